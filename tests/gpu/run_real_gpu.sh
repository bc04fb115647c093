#!/usr/bin/env bash
# Runs rlxc's Vulkan artifacts on a real GPU machine (used with the project's device tool on an NVIDIA
# H200) and writes each model's outputs from --target vulkan and --target interp under $OUT for
# comparison on the development machine (tests/gpu/compare.py).
#
# Carried from the development machine: an rlxc built without LLVM (target/nollvm/release/rlxc: it
# needs only glibc; the Vulkan loader is opened at run time) and build/gpu/ (the models, inputs, and
# the Debian Vulkan loader libvulkan.so.1, since the GPU machine may have none).
# On headless NVIDIA containers the GLX ICD fails vkCreateInstance; the EGL ICD works, so the loader is
# pointed at it (tests/gpu/nvidia_egl_icd.sh).
set -euo pipefail
R=target/nollvm/release/rlxc
G=build/gpu
export LD_LIBRARY_PATH="$PWD/$G:${LD_LIBRARY_PATH:-}"
. tests/gpu/nvidia_egl_icd.sh
nvidia-smi -L || true
run() {  # name model inputs...
  local n=$1 f=$2; shift 2
  for t in vulkan interp; do
    "$R" run "$G/$f" "$@" --target "$t" -o "$OUT/$n-$t" | tail -1
  done
}
run mlp mlp.onnx -i x=$G/x.npy
run cnn cnn.onnx -i image=$G/image.npy
run minilm minilm.onnx -i input_ids=$G/input_ids.npy -i attention_mask=$G/attention_mask.npy -i token_type_ids=$G/token_type_ids.npy
