#!/usr/bin/env python3
"""One convolution layer (Conv with bias, then ReLU) as an ONNX file, with deterministic weights: the
single-layer rows of tests/bench/zoo.py (`--models conv64x64h56k3s1,…`).

    conv_layer.py --out OUT.onnx --spec conv64x64h56k3s1

The spec names input channels × output channels, the input's height (= width), the kernel size and the
stride, and optionally the groups: `conv{cin}x{cout}h{h}k{k}s{s}[g{groups}]` (`conv32x32h112k3s2g32`: a
depthwise one), padded by k // 2 ("same" for stride 1). Weights and bias come from
numpy's RandomState(0), He-scaled. Input "x" f32[1, cin, h, h], output "y".
"""
from __future__ import annotations

import argparse
import re

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SPEC = re.compile(r"conv(\d+)x(\d+)h(\d+)k(\d+)s(\d+)(?:g(\d+))?$")


def build(spec: str) -> onnx.ModelProto:
    m = SPEC.match(spec)
    if not m:
        raise SystemExit(f"conv_layer.py: spec {spec!r} is not conv{{cin}}x{{cout}}h{{h}}k{{k}}s{{s}}[g{{groups}}]")
    cin, cout, h, k, s = (int(g) for g in m.groups()[:5])
    groups = int(m.group(6) or 1)
    if cin % groups or cout % groups:
        raise SystemExit(f"conv_layer.py: spec {spec!r}: {groups} groups do not divide {cin} and {cout} channels")
    rs = np.random.RandomState(0)
    w = numpy_helper.from_array((rs.randn(cout, cin // groups, k, k) * np.sqrt(2.0 / (cin // groups * k * k))).astype(np.float32), "w")
    b = numpy_helper.from_array((rs.randn(cout) * 0.1).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4, group=groups),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    oh = (h + 2 * (k // 2) - k) // s + 1
    g = helper.make_graph(nodes, spec, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, h, h])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, oh, oh])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--spec", required=True)
    a = ap.parse_args()
    onnx.save(build(a.spec), a.out)


if __name__ == "__main__":
    main()
