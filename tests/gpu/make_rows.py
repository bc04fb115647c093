#!/usr/bin/env python3
"""Write rows.onnx and its inputs (x.npy … w.npy): row-wise chains that the planner fuses into one
kernel per row (LayerNorm, softmax, log-softmax) and the shader back end writes as one
workgroup per row with a shared-memory tree per reduction, for compiler/rlxc/tests/shader.rs.

    make_rows.py --out DIR [--cuda]

--cuda (for --target cuda) leaves out LogSoftmax (cuda claims no `log`: six outputs, no input t) and
makes sm_spill 4100 rows (CUDA's grid has no 65,535-block limit to spill past; the files stay small).

Outputs:
  ln        LayerNormalization(x[3,50,384])       rows of 384: 128 invocations per row, 3 elements each
  ln_long   LayerNormalization(l[2,3000])         rows of 3000 (not a multiple of 256), only 2 rows
  sm        Softmax(s[2,4,33,128])                a 4-D row grid, rows of 128
  lsm       LogSoftmax(t[7,200])                  max, then sum of exp, then x - max - log(sum)
  sm_short  Softmax(u[5,10])                      rows shorter than 64: one invocation per row
  sm_spill  Softmax(v[65600,64])                  more rows than 65,535 workgroups: the y spill
  sm_1d     Softmax(w[1000])                      one row, no grid: a single workgroup
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cuda", action="store_true", help="no LogSoftmax (lsm, input t); sm_spill 4100 rows")
    a = ap.parse_args()
    r = np.random.RandomState(11)
    f = lambda *s: (r.randn(*s) * 3 + 1).astype(np.float32)
    inits = [
        numpy_helper.from_array(f(384), "g384"),
        numpy_helper.from_array(f(384), "b384"),
        numpy_helper.from_array(f(3000), "g3000"),
        numpy_helper.from_array(f(3000), "b3000"),
    ]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g384", "b384"], ["ln"], axis=-1, epsilon=1e-5),
        helper.make_node("LayerNormalization", ["l", "g3000", "b3000"], ["ln_long"], axis=-1, epsilon=1e-5),
        helper.make_node("Softmax", ["s"], ["sm"], axis=-1),
        helper.make_node("LogSoftmax", ["t"], ["lsm"], axis=-1),
        helper.make_node("Softmax", ["u"], ["sm_short"], axis=-1),
        helper.make_node("Softmax", ["v"], ["sm_spill"], axis=-1),
        helper.make_node("Softmax", ["w"], ["sm_1d"], axis=-1),
    ]
    shapes = {"x": [3, 50, 384], "l": [2, 3000], "s": [2, 4, 33, 128], "t": [7, 200], "u": [5, 10], "v": [65600, 64], "w": [1000]}
    if a.cuda:
        nodes = [n for n in nodes if n.op_type != "LogSoftmax"]
        del shapes["t"]
        shapes["v"] = [4100, 64]
    ins = [helper.make_tensor_value_info(n, T.FLOAT, s) for n, s in shapes.items()]
    outs = [helper.make_tensor_value_info(n, T.FLOAT, shapes[i]) for n, i in
            [("ln", "x"), ("ln_long", "l"), ("sm", "s"), ("lsm", "t"), ("sm_short", "u"), ("sm_spill", "v"), ("sm_1d", "w")] if i in shapes]
    m = helper.make_model(helper.make_graph(nodes, "rows", ins, outs, inits), opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    os.makedirs(a.out, exist_ok=True)
    onnx.save(m, os.path.join(a.out, "rows.onnx"))
    for n, s in shapes.items():
        np.save(os.path.join(a.out, f"{n}.npy"), f(*s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
