#!/usr/bin/env python3
"""Write small transpose models as ONNX, one per shape class of the CPU transpose kernels.

    make_transposes.py --out DIR

For each case NAME writes DIR/NAME.onnx and DIR/NAME.x.npy (seeded) and prints NAME. Cases whose name
starts with `tiles_` move the input's innermost dim with that dim and the output's last one multiples of
16 (the register-tile form on every CPU vector width: 4, 8, 16); `tails_` ones hold at least 16 along both
but no multiple (tiles, then the remainders element by element); `blocked_` ones fewer than 8 along one
(the blocked form); `fused_` ones transpose a computed value (the blocked form too). Uses only onnx.helper and
numpy.
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper

CASES = [
    # name, input shape, perm, dtype, a unary op applied before the transpose (or None)
    ("tiles_nhwc_batch2", [2, 32, 16, 48], [0, 2, 3, 1], np.float32, None),
    ("tiles_matrix", [48, 64], [1, 0], np.float32, None),
    ("tiles_rank5", [1, 16, 3, 2, 32], [0, 4, 2, 3, 1], np.float32, None),
    ("tiles_batch_inner", [16, 5, 32], [2, 1, 0], np.float32, None),
    ("tiles_int32", [1, 16, 4, 32], [0, 2, 3, 1], np.int32, None),
    ("tails_odd_channels", [1, 24, 7, 20], [0, 2, 3, 1], np.float32, None),
    ("tails_matrix", [40, 17], [1, 0], np.float32, None),
    ("tails_batch2", [2, 20, 3, 33], [0, 2, 3, 1], np.float32, None),
    ("blocked_narrow", [1, 24, 7, 7], [0, 2, 3, 1], np.float32, None),
    ("fused_relu", [1, 32, 8, 16], [0, 2, 3, 1], np.float32, "Relu"),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, shape, perm, dt, pre in CASES:
        et = TensorProto.FLOAT if dt == np.float32 else TensorProto.INT32
        x = helper.make_tensor_value_info("x", et, shape)
        y = helper.make_tensor_value_info("y", et, [shape[p] for p in perm])
        nodes, src = [], "x"
        if pre:
            nodes.append(helper.make_node(pre, ["x"], ["p"], name="pre"))
            src = "p"
        nodes.append(helper.make_node("Transpose", [src], ["y"], perm=perm, name="t"))
        g = helper.make_graph(nodes, name, [x], [y])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(a.out, f"{name}.onnx"))
        v = rng.normal(0.0, 1.0, size=shape) if dt == np.float32 else rng.integers(-1000, 1000, size=shape)
        np.save(os.path.join(a.out, f"{name}.x.npy"), v.astype(dt))
        print(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
