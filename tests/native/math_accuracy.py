#!/usr/bin/env python3
"""Accuracy of the inline f32 exp, erf, tanh and sigmoid that the LLVM back end emits (scalar and vector
forms), measured against double-precision references on a dense grid plus special values.

    math_accuracy.py RLXC OUT_DIR [--backend llvm]

Builds an ONNX model computing Exp, Erf, Tanh and Sigmoid of one f32 vector, runs it with
`rlxc run --target host`, compares each output with math.exp / math.erf / math.tanh in f64 rounded to
f32, prints the max relative error (|got - ref| / max(|ref|, tiny)) and max absolute error of each, and
exits 1 when one exceeds its stated bound (BOUNDS) or a special value (±inf, NaN, 0) comes out wrong.
"""
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

# Stated bounds: (max relative error where |ref| >= 1e-30, max absolute error).
# Measured on x86-64 (AVX-512 and AVX2 code): exp 1.2e-7 rel; erf 3.0e-7 abs, 5.6e-7 rel; tanh 1.2e-7 rel;
# sigmoid 1.5e-7 rel.
BOUNDS = {
    "exp": (4e-7, None),
    "erf": (1e-6, 4e-7),
    "tanh": (4e-7, 1.5e-7),
    "sigmoid": (4e-7, 3e-7),
}


def main() -> int:
    rlxc, out = sys.argv[1], Path(sys.argv[2])
    extra = sys.argv[3:]
    out.mkdir(parents=True, exist_ok=True)
    grid = np.concatenate([
        np.linspace(-90.0, 90.0, 120_001),
        np.linspace(-4.0, 4.0, 80_001),
        np.geomspace(1e-8, 1.0, 20_000),
        -np.geomspace(1e-8, 1.0, 20_000),
        [0.0, -0.0, np.inf, -np.inf, np.nan, 88.7, 88.8, -103.9, -104.0, 1e-30, -1e-30],
    ]).astype(np.float32)
    n = grid.size
    ops = ["Exp", "Erf", "Tanh", "Sigmoid"]
    nodes = [helper.make_node(op, ["x"], [op.lower()], name=op.lower()) for op in ops]
    outs = [helper.make_tensor_value_info(op.lower(), TensorProto.FLOAT, [n]) for op in ops]
    g = helper.make_graph(nodes, "math", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])], outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(out / "math.onnx"))
    np.save(out / "x.npy", grid)
    subprocess.run([rlxc, "run", str(out / "math.onnx"), "--target", "host", *extra, "-i", f"x={out / 'x.npy'}",
                    "-o", str(out)], check=True, stdout=subprocess.DEVNULL)
    refs = {
        "exp": lambda v: math.exp(v) if v < 709 else math.inf,
        "erf": math.erf,
        "tanh": math.tanh,
        "sigmoid": lambda v: 1.0 / (1.0 + math.exp(-v)) if v > -709 else 0.0,
    }
    failed = False
    report = {}
    for name, ref_fn in refs.items():
        got = np.load(out / f"{name}.npy").astype(np.float64)
        ref = np.array([ref_fn(float(v)) if not math.isnan(v) else math.nan for v in grid], dtype=np.float64)
        ref = ref.astype(np.float32).astype(np.float64)  # the correctly rounded f32 value
        nan_ok = np.array_equal(np.isnan(got), np.isnan(ref))
        fin = np.isfinite(ref) & np.isfinite(got)
        inf_ok = np.array_equal(got[np.isinf(ref)], ref[np.isinf(ref)]) and not np.isinf(got[np.isfinite(ref)]).any()
        err = np.abs(got[fin] - ref[fin])
        big = np.abs(ref[fin]) >= 1e-30
        rel = float((err[big] / np.abs(ref[fin][big])).max())
        absr = float(err.max())
        rb, ab = BOUNDS[name]
        ok = nan_ok and inf_ok and (rb is None or rel <= rb) and (ab is None or absr <= ab)
        report[name] = {"max_rel": rel, "max_abs": absr, "nan_ok": nan_ok, "inf_ok": inf_ok, "ok": ok}
        print(f"{name:8s} max rel {rel:.2e}  max abs {absr:.2e}  NaN {'ok' if nan_ok else 'WRONG'}  inf {'ok' if inf_ok else 'WRONG'}"
              f"  bound rel {rb} abs {ab}: {'ok' if ok else 'EXCEEDED'}")
        failed |= not ok
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
