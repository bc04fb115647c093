#!/usr/bin/env python3
"""Write small ONNX models that `rlxc compile` must reject, for compiler/rlxc/tests/native.rs.

    make_bad.py --out DIR

- free_dim.onnx: x f32[batch, 8] -> Relu -> y; `batch` is symbolic (compile without --dim fails).
- f16.onnx: x f16[2, 8] -> Sin -> Cos -> Tanh -> y; three nodes in a dtype (f16) that the native
  targets do not claim for these ops.
"""
from __future__ import annotations

import argparse
import os
import sys

import onnx
from onnx import TensorProto, helper


def model(nodes, inputs, outputs) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "bad", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="make_bad.py")
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    vi = helper.make_tensor_value_info
    n = helper.make_node
    free = model(
        [n("Relu", ["x"], ["y"], name="relu")],
        [vi("x", TensorProto.FLOAT, ["batch", 8])],
        [vi("y", TensorProto.FLOAT, ["batch", 8])],
    )
    onnx.save(free, os.path.join(a.out, "free_dim.onnx"))
    f16 = model(
        [n("Sin", ["x"], ["a"], name="sin"), n("Cos", ["a"], ["b"], name="cos"), n("Tanh", ["b"], ["y"], name="tanh")],
        [vi("x", TensorProto.FLOAT16, [2, 8])],
        [vi("y", TensorProto.FLOAT16, [2, 8])],
    )
    onnx.save(f16, os.path.join(a.out, "f16.onnx"))
    print(f"make_bad: {a.out}/free_dim.onnx {a.out}/f16.onnx")
    return 0


if __name__ == "__main__":
    sys.exit(main())
