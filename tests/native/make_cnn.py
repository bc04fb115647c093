#!/usr/bin/env python3
"""Write a LeNet-style CNN as ONNX (seeded random weights, no training).

    make_cnn.py --out DIR [--seed S] [--name NAME]

Writes DIR/NAME.onnx (default name `cnn`) and DIR/image.npy, a deterministic f32[1,1,28,28] input.
Graph: image f32[1,1,28,28] -> Conv 1->6 5x5 pad 2 -> Relu -> MaxPool 2 -> Conv 6->16 5x5 -> Relu
-> AveragePool 2 -> Flatten -> Gemm 400->120 -> Relu -> Gemm 120->84 -> Relu -> Gemm 84->10 -> Softmax
-> probs f32[1,10]. Uses only onnx.helper and numpy.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)

    def weight(name: str, shape: tuple[int, ...], fan_in: int) -> onnx.TensorProto:
        # He-style scale keeps activations O(1) through the ReLUs.
        w = rng.normal(0.0, np.sqrt(2.0 / fan_in), size=shape).astype(np.float32)
        return numpy_helper.from_array(w, name)

    def bias(name: str, n: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.uniform(-0.1, 0.1, size=n).astype(np.float32), name)

    inits = [
        weight("conv1.w", (6, 1, 5, 5), 25), bias("conv1.b", 6),
        weight("conv2.w", (16, 6, 5, 5), 150), bias("conv2.b", 16),
        weight("fc1.w", (120, 400), 400), bias("fc1.b", 120),
        weight("fc2.w", (84, 120), 120), bias("fc2.b", 84),
        weight("fc3.w", (10, 84), 84), bias("fc3.b", 10),
    ]
    n = helper.make_node
    nodes = [
        n("Conv", ["image", "conv1.w", "conv1.b"], ["c1"], name="conv1", kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["p1", "conv2.w", "conv2.b"], ["c2"], name="conv2", kernel_shape=[5, 5]),
        n("Relu", ["c2"], ["r2"], name="relu2"),
        n("AveragePool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        n("Flatten", ["p2"], ["flat"], name="flatten", axis=1),
        n("Gemm", ["flat", "fc1.w", "fc1.b"], ["f1"], name="fc1", transB=1),
        n("Relu", ["f1"], ["r3"], name="relu3"),
        n("Gemm", ["r3", "fc2.w", "fc2.b"], ["f2"], name="fc2", transB=1),
        n("Relu", ["f2"], ["r4"], name="relu4"),
        n("Gemm", ["r4", "fc3.w", "fc3.b"], ["logits"], name="fc3", transB=1),
        n("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "lenet",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 28, 28])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="make_cnn.py")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="cnn")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"{a.name}.onnx")
    onnx.save(build(a.seed), path)
    img = np.random.default_rng(a.seed + 1).uniform(0.0, 1.0, size=(1, 1, 28, 28)).astype(np.float32)
    np.save(os.path.join(a.out, "image.npy"), img)
    print(f"make_cnn: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
