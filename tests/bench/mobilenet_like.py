#!/usr/bin/env python3
"""A MobileNet-v1-style depthwise-separable CNN as an ONNX file, with deterministic weights.

    mobilenet_like.py --out OUT.onnx [--alpha 0.5] [--res 224] [--batch N|batch]

Stem 3×3/2 convolution, then 13 blocks of depthwise 3×3 (stride 1 or 2) + pointwise 1×1, each
convolution followed by BatchNormalization and ReLU6 (Clip 0..6), then global average pooling, a
flatten and a 1000-way Gemm — MobileNet v1's layer list (Howard et al. 2017, table 1) with the width
multiplier `alpha`. Weights, BatchNormalization statistics and biases come from numpy's RandomState(0)
(He-scaled, so activations stay O(1) through the depth). Input "x" f32[batch, 3, res, res], output
"logits" f32[batch, 1000]; the batch is a number or the symbolic dim "batch" (the default).
"""
from __future__ import annotations

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# (output channels at alpha 1, depthwise stride) of the 13 depthwise-separable blocks.
BLOCKS = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]


def build(alpha: float = 0.5, res: int = 224, batch: int | str = "batch") -> onnx.ModelProto:
    rs = np.random.RandomState(0)
    nodes, inits = [], []

    def const(name: str, a: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(a.astype(np.float32), name))
        return name

    const("clip_lo", np.array(0.0))
    const("clip_hi", np.array(6.0))

    def conv_bn_relu6(x: str, name: str, cin: int, cout: int, k: int, stride: int, groups: int) -> str:
        fan_in = cin // groups * k * k
        w = const(f"{name}_w", rs.randn(cout, cin // groups, k, k) * np.sqrt(2.0 / fan_in))
        nodes.append(helper.make_node("Conv", [x, w], [f"{name}_conv"], name=name, kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[k // 2] * 4, group=groups))
        bn = [const(f"{name}_bn_{p}", v) for p, v in [
            ("scale", rs.uniform(0.5, 1.5, cout)), ("bias", rs.randn(cout) * 0.1),
            ("mean", rs.randn(cout) * 0.1), ("var", rs.uniform(0.5, 1.5, cout))]]
        nodes.append(helper.make_node("BatchNormalization", [f"{name}_conv", *bn], [f"{name}_bn"], name=f"{name}_bn", epsilon=1e-5))
        nodes.append(helper.make_node("Clip", [f"{name}_bn", "clip_lo", "clip_hi"], [f"{name}_relu6"], name=f"{name}_relu6"))
        return f"{name}_relu6"

    c = max(8, int(32 * alpha))
    x = conv_bn_relu6("x", "stem", 3, c, 3, 2, 1)
    for i, (cout, stride) in enumerate(BLOCKS):
        cout = max(8, int(cout * alpha))
        x = conv_bn_relu6(x, f"dw{i + 1}", c, c, 3, stride, c)
        x = conv_bn_relu6(x, f"pw{i + 1}", c, cout, 1, 1, 1)
        c = cout
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1))
    fc_w = const("fc_w", rs.randn(1000, c) * np.sqrt(1.0 / c))
    fc_b = const("fc_b", rs.randn(1000) * 0.01)
    nodes.append(helper.make_node("Gemm", ["flat", fc_w, fc_b], ["logits"], name="fc", transB=1))
    g = helper.make_graph(nodes, "mobilenet_like",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, res, res])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 1000])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="rlxc tests/bench/mobilenet_like.py")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def flops(alpha: float = 0.5, res: int = 224) -> float:
    """Multiply-adds × 2 of the convolutions and the Gemm at batch 1."""
    macs, s, c = 0, res // 2, max(8, int(32 * alpha))
    macs += s * s * c * 3 * 9
    for cout, stride in BLOCKS:
        cout = max(8, int(cout * alpha))
        s = -(-s // stride)
        macs += s * s * c * 9 + s * s * c * cout
        c = cout
    return 2.0 * (macs + c * 1000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--res", type=int, default=224)
    ap.add_argument("--batch", default="batch", help="a number, or a symbolic dim name")
    a = ap.parse_args()
    batch = int(a.batch) if a.batch.isdigit() else a.batch
    onnx.save(build(a.alpha, a.res, batch), a.out)


if __name__ == "__main__":
    main()
