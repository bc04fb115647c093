#!/usr/bin/env bash
# The rlxc built without LLVM (`cargo build --release -p rlxc --no-default-features --features
# rlxc/cranelift`): it says so in --version, has no LLVM in its dependency tree, and its objects link
# into a C program and into `rlxc run --target host` with outputs matching the interpreter (1e-4).
#   tests/nollvm/smoke.sh RLXC_BINARY PYTHON
set -euo pipefail
RLXC=$1
PY=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

v=$("$RLXC" --version)
echo "$v"
[[ "$v" == *"back ends: cranelift)"* ]] || { echo "FAIL: --version does not say cranelift only: $v"; exit 1; }
if cargo tree --manifest-path "$ROOT/Cargo.toml" -p rlxc --no-default-features --features rlxc/cranelift -e normal --prefix none | grep -Eq '^(inkwell|llvm-sys)'; then
  echo "FAIL: the no-LLVM rlxc depends on LLVM"; exit 1
fi

"$PY" -c "import sys, numpy as np; from pathlib import Path; sys.path.insert(0, '$ROOT/tests/bench'); import bench; \
d = Path('$W'); bench.make_mlp(d / 'mlp.onnx'); np.save(d / 'x.npy', np.random.RandomState(1).rand(1, 784).astype(np.float32)); \
np.random.RandomState(1).rand(1, 784).astype(np.float32).tofile(d / 'x.bin')"

"$RLXC" compile "$W/mlp.onnx" --target x86_64 --dim batch=1 -o "$W/out" --name mlp
grep -q '"backend": "cranelift"' "$W/out/mlp.json"
cc -O2 -std=c11 -DMODEL=mlp -I "$W/out" "$ROOT/tests/native/app.c" "$W/out/mlp.o" "$W/out/librlx_rt.a" \
   -lpthread -ldl -lm -lrt -lutil -o "$W/app"
"$W/app" "$W/x.bin" "$W/logits.bin"
"$RLXC" run "$W/mlp.onnx" --target host -i x="$W/x.npy" -o "$W/host"
"$RLXC" run "$W/mlp.onnx" --target interp -i x="$W/x.npy" -o "$W/interp"
"$PY" - "$W" <<'PY'
import sys, numpy as np
w = sys.argv[1]
ref = np.load(f"{w}/interp/logits.npy")
c = np.fromfile(f"{w}/logits.bin", dtype=np.float32).reshape(ref.shape)
host = np.load(f"{w}/host/logits.npy")
dc, dh = float(np.abs(c - ref).max()), float(np.abs(host - ref).max())
print(f"no-LLVM rlxc: MLP C program max abs diff vs interp {dc:.2e}; rlxc run --target host {dh:.2e}")
assert dc <= 1e-4 and dh <= 1e-4, "outputs differ from the interpreter"
PY
echo "no-LLVM rlxc: ok"
