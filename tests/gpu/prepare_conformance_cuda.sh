#!/usr/bin/env bash
# On the development machine: what tests/gpu/run_conformance_cuda.sh needs on the GPU machine, in one
# folder (default build/gpu-conf; the device tool carries it, ~25 MB):
#   rlxc.xz         rlxc with LLVM (it compiles each case for the GPU there) but without MPI (libmpi is not
#                   on the GPU machine): `cargo build --release -p rlxc --no-default-features --features
#                   llvm,cranelift --target-dir target/gpu-rlxc`, stripped
#   lib/            the shared libraries that rlxc loads besides glibc's (libffi, libz, libzstd, libstdc++,
#                   libgcc_s: whatever ldd lists), in case the GPU machine lacks them
#   onnx-node.tar.xz  the ONNX node cases (`make conformance-data`'s build/onnx-node)
# Usage: tests/gpu/prepare_conformance_cuda.sh [OUT_DIR]   (run from the repository root)
set -euo pipefail
D=${1:-build/gpu-conf}
[ -d build/onnx-node ] || { echo "prepare_conformance_cuda.sh: no build/onnx-node (run make conformance-data)" >&2; exit 1; }
rm -rf "$D" && mkdir -p "$D/lib"
cargo build --release -p rlxc --no-default-features --features llvm,cranelift --target-dir target/gpu-rlxc
strip -o "$D/rlxc" target/gpu-rlxc/release/rlxc
xz -T0 -6 -f "$D/rlxc"
ldd target/gpu-rlxc/release/rlxc | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r l; do
  case "$(basename "$l")" in libc.so.*|libm.so.*|ld-linux*) ;; *) cp -L "$l" "$D/lib/" ;; esac
done
tar -C build -cJf "$D/onnx-node.tar.xz" onnx-node
cp tests/gpu/run_conformance_cuda.sh "$D/"
du -sh "$D"
