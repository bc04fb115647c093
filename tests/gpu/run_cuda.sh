#!/usr/bin/env bash
# On the GPU machine (the device tool, an NVIDIA H200): rlxc's CUDA artifacts for the MLP, the CNN and
# MiniLM against the interpreter, and MiniLM seq 128 at batch 1 / 8 / 32 against PyTorch eager and
# CUDA-graph replay (f32), in one run: tests/gpu/bench_cuda.py. Everything it needs comes from
# tests/gpu/prepare_cuda.sh, carried; raw results go to $OUT/h200-cuda.log and $OUT/h200-cuda-bench.json.
# Usage: run_cuda.sh CARRIED_DIR
set -euo pipefail
C=$1
export PYTHONUNBUFFERED=1
# prepare_cuda.sh carries the model PyTorch reads xz-compressed.
[ -e "$C/minilm.onnx" ] || xz -dk "$C/minilm.onnx.xz"
# rlxc's Vulkan artifact, where carried: the rlxc built without LLVM, the Debian loader beside it, and
# the NVIDIA EGL ICD (headless containers fail vkCreateInstance through the GLX one: nvidia_egl_icd.sh).
if [ -e "$C/rlxc_nollvm.xz" ]; then
  [ -x "$C/rlxc_nollvm" ] || { xz -dc "$C/rlxc_nollvm.xz" > "$C/rlxc_nollvm" && chmod +x "$C/rlxc_nollvm"; }
  export LD_LIBRARY_PATH="$(cd "$C" && pwd):${LD_LIBRARY_PATH:-}"
  . "$C/nvidia_egl_icd.sh"
fi
{
  nvidia-smi -L || true
  nvidia-smi --query-gpu=driver_version,clocks.sm,clocks.mem --format=csv || true
  python3 "$C/bench_cuda.py" --carry "$C" --out "$OUT" --runs "${RUNS:-100}" --rounds "${ROUNDS:-3}"
} 2>&1 | tee "$OUT/h200-cuda.log"
