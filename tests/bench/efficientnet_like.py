#!/usr/bin/env python3
"""An EfficientNet-B0-style CNN as an ONNX file, with deterministic weights.

    efficientnet_like.py --out OUT.onnx [--res 224] [--batch N|batch]

Stem 3×3/2 convolution to 32 channels, then EfficientNet-B0's 16 MBConv blocks (Tan & Le 2019, table 1:
1×1 expansion ×6 except the first stage, depthwise 3×3 or 5×5 with stride 1 or 2, squeeze-and-excitation
— global average pool, 1×1 reduce to a quarter of the block's input channels, SiLU, 1×1 expand,
Sigmoid, a per-channel Mul —, 1×1 projection, and the residual Add where the shape allows), a 1×1 head
to 1280 channels, global average pooling, a flatten and a 1000-way Gemm. Every convolution but the SE
ones is followed by BatchNormalization, and SiLU is written x · Sigmoid(x), as PyTorch's ONNX export
writes it. Weights, statistics and biases come from numpy's RandomState(0) (He-scaled). Input "x"
f32[batch, 3, res, res], output "logits" f32[batch, 1000]; the batch is a number or the symbolic dim
"batch" (the default).
"""
from __future__ import annotations

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# (expansion, kernel, stride of the first block, output channels, blocks): EfficientNet-B0's stages.
STAGES = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]


def build(res: int = 224, batch: int | str = "batch") -> onnx.ModelProto:
    rs = np.random.RandomState(0)
    nodes, inits = [], []
    count = [0]

    def const(name: str, a) -> str:
        inits.append(numpy_helper.from_array(np.asarray(a, dtype=np.float32), name))
        return name

    def uid(prefix: str) -> str:
        count[0] += 1
        return f"{prefix}{count[0]}"

    def node(op: str, ins: list[str], prefix: str, **kw) -> str:
        out = uid(prefix)
        nodes.append(helper.make_node(op, ins, [out], name=out, **kw))
        return out

    def silu(x: str) -> str:
        return node("Mul", [x, node("Sigmoid", [x], "sig")], "silu")

    def conv_bn(x: str, cin: int, cout: int, k: int, stride: int, groups: int, act: bool = True) -> str:
        name = uid("conv")
        w = const(name + "_w", rs.randn(cout, cin // groups, k, k) * np.sqrt(2.0 / (cin // groups * k * k)))
        nodes.append(helper.make_node("Conv", [x, w], [name], name=name, kernel_shape=[k, k], strides=[stride, stride],
                                      pads=[k // 2] * 4, group=groups))
        bn = [const(f"{name}_bn_{p}", v) for p, v in [("scale", rs.uniform(0.5, 1.5, cout)), ("bias", rs.randn(cout) * 0.1),
                                                        ("mean", rs.randn(cout) * 0.1), ("var", rs.uniform(0.5, 1.5, cout))]]
        y = node("BatchNormalization", [name, *bn], "bn", epsilon=1e-3)
        return silu(y) if act else y

    def squeeze_excite(x: str, c: int, reduced: int) -> str:
        p = node("GlobalAveragePool", [x], "se_pool")
        r = uid("se_reduce")
        nodes.append(helper.make_node("Conv", [p, const(r + "_w", rs.randn(reduced, c, 1, 1) * np.sqrt(2.0 / c)),
                                               const(r + "_b", rs.randn(reduced) * 0.1)], [r], name=r, kernel_shape=[1, 1]))
        e = uid("se_expand")
        nodes.append(helper.make_node("Conv", [silu(r), const(e + "_w", rs.randn(c, reduced, 1, 1) * np.sqrt(1.0 / reduced)),
                                               const(e + "_b", rs.randn(c) * 0.1)], [e], name=e, kernel_shape=[1, 1]))
        return node("Mul", [x, node("Sigmoid", [e], "se_gate")], "se_mul")

    x, c = conv_bn("x", 3, 32, 3, 2, 1), 32
    for expand, k, stride, cout, blocks in STAGES:
        for i in range(blocks):
            s = stride if i == 0 else 1
            h = x if expand == 1 else conv_bn(x, c, c * expand, 1, 1, 1)
            h = conv_bn(h, c * expand, c * expand, k, s, c * expand)
            h = squeeze_excite(h, c * expand, max(1, c // 4))
            h = conv_bn(h, c * expand, cout, 1, 1, 1, act=False)
            if s == 1 and c == cout:
                h = node("Add", [h, x], "add")
            x, c = h, cout
    x = conv_bn(x, c, 1280, 1, 1, 1)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1))
    nodes.append(helper.make_node("Gemm", ["flat", const("fc_w", rs.randn(1000, 1280) * np.sqrt(1.0 / 1280)),
                                           const("fc_b", rs.randn(1000) * 0.01)], ["logits"], name="fc", transB=1))
    g = helper.make_graph(nodes, "efficientnet_like", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, res, res])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 1000])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="rlxc tests/bench/efficientnet_like.py")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--res", type=int, default=224)
    ap.add_argument("--batch", default="batch", help="a number, or a symbolic dim name")
    a = ap.parse_args()
    batch = int(a.batch) if a.batch.isdigit() else a.batch
    onnx.save(build(a.res, batch), a.out)


if __name__ == "__main__":
    main()
