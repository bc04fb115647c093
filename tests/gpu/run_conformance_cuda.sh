#!/usr/bin/env bash
# On the GPU machine (the device tool): the conformance suite's `cuda` column — every ONNX node case that
# passes on the interpreter compiled for this GPU (`--target cuda` at its own architecture, sm_90a on an
# H100 / H200) and run once through runtime-min's CUDA executor, its outputs compared with the case's
# expected ones as every column's are (rtol 1e-3, atol 1e-7) — with what tests/gpu/prepare_conformance_cuda.sh
# carried. Writes $OUT/conformance-cuda.md (docs/conformance.md's form, the interp and cuda columns) and
# $OUT/conformance-cuda.log.
# Usage: run_conformance_cuda.sh CARRIED_DIR
set -euo pipefail
C=${1:-build/gpu-conf}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
xz -dc "$C/rlxc.xz" > "$W/rlxc" && chmod +x "$W/rlxc"
tar -C "$W" -xJf "$C/onnx-node.tar.xz"
export LD_LIBRARY_PATH="$(cd "$C" && pwd)/lib:${LD_LIBRARY_PATH:-}"
rc=0
{
  nvidia-smi -L || true
  nvidia-smi --query-gpu=driver_version --format=csv || true
  "$W/rlxc" conformance "$W/onnx-node" --target cuda --write "$OUT/conformance-cuda.md" || rc=$?
} > "$OUT/conformance-cuda.log" 2>&1
tail -40 "$OUT/conformance-cuda.log"
exit $rc
