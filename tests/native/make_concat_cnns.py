#!/usr/bin/env python3
"""Small CNNs whose concats the CPU planner writes in place (`compiler/opt/src/plan/concat.rs`), with their
ONNX Runtime outputs as the independent reference.

    make_concat_cnns.py --out DIR

Writes into DIR, for each model NAME below: NAME.onnx, NAME_x.npy (a deterministic input) and
NAME_ort_<output>.npy (ONNX Runtime's outputs on it).
- `fire` (x f32[1,8,13,13]): a fire module's branches — 1×1 conv + Relu, 3×3 pad 1 conv + Relu, MaxPool 3×3
  stride 1 pad 1, a depthwise 3×3 + Clip — concatenated along channels (`cat`); then two DenseNet steps:
  `d1` = concat(cat, conv(relu(bn(cat)))), `d2` = concat(d1, conv(relu(bn(d1)))) (a concat inside a concat;
  a BatchNormalization that no convolution absorbs, collapsed to one mul and add), read by a 1×1 conv
  (`y`); `r2` (read from `d1` in place) and `y` are the outputs.
- `fire2`: the same at batch 2 (the slices are not contiguous: concats stay copies).
Weights and inputs from numpy's RandomState(0).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import onnxruntime as ort
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_window_cnns import G  # noqa: E402  (the graph builder)


def fire(x_shape):
    g = G(0)
    g.const("lo", 0.0)
    g.const("hi", 6.0)
    a = g.node("Relu", [g.conv("x", "sq1", 8, 6, 1, 1, bias=True)], "a")
    b = g.node("Relu", [g.conv("x", "ex3", 8, 10, 3, 1, pad=1, bias=True)], "b")
    c = g.node("MaxPool", ["x"], "c", kernel_shape=[3, 3], pads=[1] * 4)
    d = g.node("Clip", [g.conv("x", "dwc", 8, 8, 3, 8, pad=1), "lo", "hi"], "d")
    cat = g.node("Concat", [a, b, c, d], "cat", axis=1)
    n1 = g.conv(g.node("Relu", [g.bn(cat, "bn1", 32)], "r1"), "n1", 32, 4, 3, 1, pad=1)
    d1 = g.node("Concat", [cat, n1], "d1", axis=1)
    n2 = g.conv(g.node("Relu", [g.bn(d1, "bn2", 36)], "r2"), "n2", 36, 4, 3, 1, pad=1)
    d2 = g.node("Concat", [d1, n2], "d2", axis=1)
    g.conv(d2, "y", 40, 5, 1, 1, bias=True)
    return g.model("fire", x_shape, ["r2", "y"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    out = ap.parse_args().out
    os.makedirs(out, exist_ok=True)
    rs = np.random.RandomState(0)
    for name, shape in [("fire", [1, 8, 13, 13]), ("fire2", [2, 8, 13, 13])]:
        onnx.save(fire(shape), os.path.join(out, f"{name}.onnx"))
        x = rs.randn(*shape).astype(np.float32)
        np.save(os.path.join(out, f"{name}_x.npy"), x)
        s = ort.InferenceSession(os.path.join(out, f"{name}.onnx"), providers=["CPUExecutionProvider"])
        for o, v in zip([o.name for o in s.get_outputs()], s.run(None, {"x": x})):
            np.save(os.path.join(out, f"{name}_ort_{o}.npy"), v)


if __name__ == "__main__":
    main()
