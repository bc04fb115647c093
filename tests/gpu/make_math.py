#!/usr/bin/env python3
"""The GPU writer's inline functions (f32 log, sinh, cosh, tan, pow; f64 exp, log) as one ONNX model
with inputs, for compiler/rlxc/tests/cuda_math.rs:

    make_math.py OUT_DIR   → OUT_DIR/math.onnx, x.npy (Log/Sinh/Cosh/Tan), a.npy and b.npy (Pow a^b),
                             d.npy (f64: Exp → exp64, Log → log64)

x spans the f32 range log-uniformly (e^-103 … e^88.7) plus [0.5, 2], [-20, 20] and the special values
(±0, ±1, subnormals, FLT_MAX, ±inf, NaN); a^b has integer and fractional exponents on negative and
positive bases, and C powf's special cases (0^neg, (-1)^±inf, 1^NaN, NaN^0, -inf^0.5, overflow and
underflow); d spans the f64 range (e^-745 … e^709.8 for log; exp's whole domain and beyond) with
the special values."""
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

d = Path(sys.argv[1])
r = np.random.RandomState(7)
x = np.concatenate([np.exp(r.uniform(-103, 88.7, 3000)), r.uniform(0.5, 2, 1000), r.uniform(-20, 20, 1000),
                    [0.0, -0.0, 1.0, -1.0, 1e-45, 1e-40, 1.17e-38, 3.4e38, np.inf, -np.inf, np.nan]]).astype(np.float32)
n = len(x)
sa = [0, -0.0, 0, -0.0, 1, 1, -1, -1, 2, 0.5, -2, -2, -8, -8, np.inf, -np.inf, -np.inf, np.nan, np.nan, 3,
      0.5, 2, -1.5, 1e-20, 1e20, 7, -3, 10, 0.1, 0.9, 1.1, 2, -2, 4, -0.5, 16, 1e-3, -1e-3, 5, 1]
sb = [3, 3, -3, -2, np.nan, np.inf, np.inf, -np.inf, 0, -0.0, 0.5, 3, 1 / 3, 3, 0.5, 0.5, 3, 0, 1, np.nan,
      np.inf, -np.inf, 2, 2, 1.5, 38.0, 21, -35, 40, 800, 900, 127, 127, -149, 150, 31, 12, 13, 55.1, 1e30]
m = n - len(sa)
a = np.concatenate([r.uniform(-10, 10, m), sa]).astype(np.float32)
b = np.concatenate([np.where(r.rand(m) < 0.5, r.randint(-6, 7, m), r.uniform(-5, 5, m)), sb]).astype(np.float32)
dd = np.concatenate([np.exp(r.uniform(-744, 709.7, 2000)), r.uniform(-760, 720, 2000), r.uniform(-2, 2, 1000),
                     [0.0, -0.0, 1.0, -1.0, 5e-324, 1e-310, 2.2250738585072014e-308, 1.7976931348623157e308, np.inf, -np.inf, np.nan]])
dd = np.concatenate([dd, np.zeros(n - len(dd))])
for k, v in dict(x=x, a=a, b=b, d=dd).items():
    np.save(d / f"{k}.npy", v)
outs = ["log", "sinh", "cosh", "tan", "pow"]
nodes = [h.make_node(o.capitalize(), ["x"], [o]) for o in outs[:4]] + [h.make_node("Pow", ["a", "b"], ["pow"])]
nodes += [h.make_node("Exp", ["d"], ["exp64"]), h.make_node("Log", ["d"], ["log64"])]
io = lambda k, t=T.FLOAT: h.make_tensor_value_info(k, t, [n])
g = h.make_graph(nodes, "math", [io("x"), io("a"), io("b"), io("d", T.DOUBLE)], [io(o) for o in outs] + [io(o, T.DOUBLE) for o in ["exp64", "log64"]])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), d / "math.onnx")
