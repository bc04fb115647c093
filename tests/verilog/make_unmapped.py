#!/usr/bin/env python3
"""Write a small CNN that the Verilog datapath cannot map, as ONNX (seeded random weights).

    make_unmapped.py --out DIR

Writes DIR/unmapped.onnx and DIR/calib_unmapped.npy (f32[16,1,8,8] calibration inputs). Graph:
x f32[1,1,8,8] -> Conv 1->4 3x3 'conv0' -> Relu 'relu0' -> AveragePool 2x2 (no name: the importer
calls it AveragePool_2) -> Flatten 'flat0' -> Gemm 36->10 'fc0' -> Softmax 'sm0' -> y f32[1,10].
The conv, the Gemm and the Flatten map onto the datapath; the average pool and the softmax do not.
Uses only onnx.helper and numpy.
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(rng: np.random.Generator) -> onnx.ModelProto:
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.5, (4, 1, 3, 3)).astype(np.float32), "conv0.w"),
        numpy_helper.from_array(rng.uniform(-0.1, 0.1, 4).astype(np.float32), "conv0.b"),
        numpy_helper.from_array(rng.normal(0, 0.3, (10, 36)).astype(np.float32), "fc0.w"),
        numpy_helper.from_array(rng.uniform(-0.1, 0.1, 10).astype(np.float32), "fc0.b"),
    ]
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "conv0.w", "conv0.b"], ["c0"], name="conv0", kernel_shape=[3, 3]),
        n("Relu", ["c0"], ["r0"], name="relu0"),
        n("AveragePool", ["r0"], ["p0"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Flatten", ["p0"], ["f0"], name="flat0", axis=1),
        n("Gemm", ["f0", "fc0.w", "fc0.b"], ["l0"], name="fc0", transB=1),
        n("Softmax", ["l0"], ["y"], name="sm0", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "unmapped",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(7)
    onnx.save(build(rng), os.path.join(args.out, "unmapped.onnx"))
    np.save(os.path.join(args.out, "calib_unmapped.npy"), rng.uniform(0, 1, (16, 1, 8, 8)).astype(np.float32))


if __name__ == "__main__":
    main()
