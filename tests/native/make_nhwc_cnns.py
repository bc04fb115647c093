#!/usr/bin/env python3
"""Small CNNs that the CPU layout pass makes channels-last (`rlx_opt::channels_last`: pointwise
convolutions as matmuls, depthwise and dense ones as `conv_nhwc`, pools as `max_pool_nhwc` /
`avg_pool_nhwc`) — and one it leaves in NCHW —, with their ONNX Runtime outputs as the independent
reference.

    make_nhwc_cnns.py --out DIR

Writes DIR/NAME.onnx, NAME_x.npy (a deterministic input) and NAME_ort_<output>.npy for:
- `dwsep` (MobileNet-style): x f32[1,3,67,67] → stem 3×3 stride 2 (3 → 16) + BatchNormalization + Clip
  0..6 (the one layout change in: after a dense convolution), then depthwise 3×3 + BatchNormalization +
  Clip, pointwise 16 → 32 + Clip, depthwise 3×3, pointwise 32 → 48 (a panel and a half) + Relu,
  depthwise 3×3 stride 2 + Relu, pointwise 48 → 40 (2½ vectors of channels) + Relu, depthwise 5×5 pad 2
  (40 channels: whole vectors and 8 one at a time), depthwise 3×3 dilation 2 pad 2 with bias, pointwise
  40 → 24 (a narrow, half-width panel), global average pool, Flatten, Gemm 24 → 10 (`logits`).
- `mbconv` (EfficientNet-style, batch 2): x f32[2,16,15,15] → expand 1×1 16 → 96 + SiLU (x · Sigmoid(x)),
  depthwise 5×5 pad 2 + SiLU, squeeze-and-excitation (global average pool, 1×1 96 → 8 + SiLU, 1×1 8 →
  96, Sigmoid, the gate multiply), project 1×1 96 → 16 plus x (a residual); then expand 16 → 64 + SiLU,
  depthwise 3×3 stride 2 pad 1 asymmetric (0, 0, 1, 1 — bottom and right only) + SiLU, and two
  pointwise branches, 64 → 24 and 64 → 8, concatenated along the channels (`y`, f32[2,32,8,8]).
- `bottleneck` (ResNet / Inception-style, batch 2): x f32[2,3,45,45] → stem 7×7 stride 2 pad 3 (3 → 64) +
  BatchNormalization + Relu, MaxPool 3×3 stride 2 pad 1; a bottleneck (1×1 64 → 16, 3×3 pad 1, 1×1 16 → 64,
  a 1×1 projection 64 → 64, the residual add, Relu); a strided one (1×1 64 → 32, 3×3 stride 2, 1×1 32 →
  64, a 1×1 stride-2 projection 64 → 64); three branches concatenated along the channels (1×1 64 → 16, 3×3
  dilation 2 pad 2 64 → 48 — three vectors of output channels —, AveragePool 3×3 pad 1 not counting the
  padding then 1×1 64 → 16); AveragePool 3×3 stride 2 pad 1 ceil mode counting the padding, MaxPool 2×2
  stride 2 ceil mode, global average pool, Flatten, Gemm 80 → 10 (`logits`): every convolution
  channels-last (its dense ones the implicit GEMM over a padded copy of x), the pools too.
- `winograd` (ResNet-stage-style, batch 2): x f32[2,64,29,29] → 1×1 64 → 128 + Relu, 3×3 pad 1 128 → 128
  plus the 1×1's output (a residual) + Relu (F(4×4) where the planner takes the Winograd form, 29
  outputs a side — a last tile row and column of one output —, its output channels in two blocks at batch 2),
  three 1×1 128 → 128 + Relu, 3×3 stride 2 128 → 32 + Relu, 3×3 pad 1 32 → 48 + Relu (F(2×2) over 15²: a
  last tile of one output; three vectors of output channels), 1×1 48 → 64, global average pool, Flatten,
  Gemm 64 → 10 (`logits`).
- `plain` (VGG-style): x f32[1,16,20,20] → 3×3 16 → 32 + Relu, 3×3 32 → 32 + Relu, MaxPool 2×2, 3×3 32 →
  64 (`y`): its input's and output's layout changes would move too much of what its three convolutions
  produce, so it keeps NCHW (its 3×3 ones NCHW's direct / Winograd forms).
Weights and inputs from numpy's RandomState.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_window_cnns import G, save  # noqa: E402  (the same model builder and ORT reference)


def classifier(g, x, cin, scale, pool):
    """Global average pool (node `pool`), Flatten, Gemm cin → 10 (`logits`): the models' head."""
    p = g.node("Flatten", [g.node("GlobalAveragePool", [x], pool)], "flat", axis=1)
    w = g.const("fc_w", g.rs.randn(10, cin) * scale)
    b = g.const("fc_b", g.rs.randn(10) * 0.1)
    g.node("Gemm", [p, w, b], "logits", transB=1)


def dwsep():
    g = G(5)
    g.const("lo", 0.0)
    g.const("hi", 6.0)

    def clip(x, out):
        return g.node("Clip", [x, "lo", "hi"], out)

    x = clip(g.bn(g.conv("x", "stem", 3, 16, 3, 1, stride=2, pad=1, bias=True), "stem_bn", 16), "stem_r")
    x = clip(g.bn(g.conv(x, "dw1", 16, 16, 3, 16, pad=1), "dw1_bn", 16), "dw1_r")
    x = clip(g.conv(x, "pw1", 16, 32, 1, 1, bias=True), "pw1_r")
    x = g.conv(x, "dw2", 32, 32, 3, 32, pad=1)
    x = g.node("Relu", [g.conv(x, "pw2", 32, 48, 1, 1, bias=True)], "pw2_r")
    x = g.node("Relu", [g.conv(x, "dw3", 48, 48, 3, 48, stride=2, pad=1)], "dw3_r")
    x = g.node("Relu", [g.conv(x, "pw3", 48, 40, 1, 1, bias=True)], "pw3_r")
    x = g.conv(x, "dw4", 40, 40, 5, 40, pad=2)
    x = g.conv(x, "dw5", 40, 40, 3, 40, pad=2, dil=2, bias=True)
    x = g.conv(x, "pw4", 40, 24, 1, 1, bias=True)
    classifier(g, x, 24, 0.3, "pool")
    return g.model("dwsep", [1, 3, 67, 67], ["logits"])


def mbconv():
    g = G(6)

    def silu(x, out):
        return g.node("Mul", [x, g.node("Sigmoid", [x], out + "_sig")], out)

    e = silu(g.conv("x", "ex1", 16, 96, 1, 1, bias=True), "ex1_s")
    d = silu(g.conv(e, "dw1", 96, 96, 5, 96, pad=2, bias=True), "dw1_s")
    s = g.node("GlobalAveragePool", [d], "se_pool")
    s = silu(g.conv(s, "se_r", 96, 8, 1, 1, bias=True), "se_r_s")
    s = g.node("Sigmoid", [g.conv(s, "se_e", 8, 96, 1, 1, bias=True)], "se_gate")
    d = g.node("Mul", [d, s], "se_mul")
    x = g.node("Add", [g.conv(d, "pr1", 96, 16, 1, 1, bias=True), "x"], "res1")
    e = silu(g.conv(x, "ex2", 16, 64, 1, 1, bias=True), "ex2_s")
    w = g.const("dw2_w", g.rs.randn(64, 1, 3, 3) * 0.5)
    d = silu(g.node("Conv", [e, w], "dw2", kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1], group=64), "dw2_s")
    a = g.conv(d, "pr2", 64, 24, 1, 1, bias=True)
    b = g.node("Relu", [g.conv(d, "pr3", 64, 8, 1, 1, bias=True)], "pr3_r")
    g.node("Concat", [a, b], "y", axis=1)
    return g.model("mbconv", [2, 16, 15, 15], ["y"])


def bottleneck():
    g = G(9)

    def relu(x, out):
        return g.node("Relu", [x], out)

    x = relu(g.bn(g.conv("x", "stem", 3, 64, 7, 1, stride=2, pad=3), "stem_bn", 64), "stem_r")
    x = g.node("MaxPool", [x], "pool1", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    a = relu(g.conv(x, "b1a", 64, 16, 1, 1, bias=True), "b1a_r")
    a = relu(g.conv(a, "b1b", 16, 16, 3, 1, pad=1, bias=True), "b1b_r")
    x = relu(g.node("Add", [g.conv(a, "b1c", 16, 64, 1, 1, bias=True), g.conv(x, "b1p", 64, 64, 1, 1, bias=True)], "b1_sum"), "b1_r")
    a = relu(g.conv(x, "b2a", 64, 32, 1, 1, bias=True), "b2a_r")
    a = relu(g.conv(a, "b2b", 32, 32, 3, 1, stride=2, pad=1, bias=True), "b2b_r")
    x = relu(g.node("Add", [g.conv(a, "b2c", 32, 64, 1, 1, bias=True), g.conv(x, "b2p", 64, 64, 1, 1, stride=2)], "b2_sum"), "b2_r")
    c1 = g.conv(x, "c1", 64, 16, 1, 1, bias=True)
    c2 = relu(g.conv(x, "c2", 64, 48, 3, 1, pad=2, dil=2, bias=True), "c2_r")
    c3 = g.node("AveragePool", [x], "c3p", kernel_shape=[3, 3], pads=[1] * 4, count_include_pad=0)
    c3 = g.conv(c3, "c3", 64, 16, 1, 1, bias=True)
    x = g.node("Concat", [c1, c2, c3], "cat", axis=1)
    x = g.node("AveragePool", [x], "pool2", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4, count_include_pad=1, ceil_mode=1)
    x = g.node("MaxPool", [x], "pool3", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    classifier(g, x, 80, 0.2, "gap")
    return g.model("bottleneck", [2, 3, 45, 45], ["logits"])


def winograd():
    g = G(11)

    def relu(x, out):
        return g.node("Relu", [x], out)

    p = relu(g.conv("x", "p1", 64, 128, 1, 1, bias=True), "p1_r")
    a = relu(g.node("Add", [g.conv(p, "a", 128, 128, 3, 1, pad=1, bias=True), p], "a_sum"), "a_r")
    for i in (2, 3, 4):
        a = relu(g.conv(a, f"p{i}", 128, 128, 1, 1, bias=True), f"p{i}_r")
    s = relu(g.conv(a, "s", 128, 32, 3, 1, stride=2, pad=1, bias=True), "s_r")
    b = relu(g.conv(s, "b", 32, 48, 3, 1, pad=1), "b_r")
    x = g.conv(b, "p5", 48, 64, 1, 1, bias=True)
    classifier(g, x, 64, 0.2, "gap")
    return g.model("winograd", [2, 64, 29, 29], ["logits"])


def plain():
    g = G(10)
    x = g.node("Relu", [g.conv("x", "c1", 16, 32, 3, 1, pad=1, bias=True)], "c1_r")
    x = g.node("Relu", [g.conv(x, "c2", 32, 32, 3, 1, pad=1, bias=True)], "c2_r")
    x = g.node("MaxPool", [x], "pool", kernel_shape=[2, 2], strides=[2, 2])
    g.conv(x, "y", 32, 64, 3, 1, pad=1, bias=True)
    return g.model("plain", [1, 16, 20, 20], ["y"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    out = ap.parse_args().out
    os.makedirs(out, exist_ok=True)
    save(out, "dwsep", dwsep(), np.random.RandomState(7).randn(1, 3, 67, 67).astype(np.float32))
    save(out, "mbconv", mbconv(), np.random.RandomState(8).randn(2, 16, 15, 15).astype(np.float32))
    save(out, "bottleneck", bottleneck(), np.random.RandomState(9).randn(2, 3, 45, 45).astype(np.float32))
    save(out, "winograd", winograd(), np.random.RandomState(11).randn(2, 64, 29, 29).astype(np.float32))
    save(out, "plain", plain(), np.random.RandomState(10).randn(1, 16, 20, 20).astype(np.float32))


if __name__ == "__main__":
    main()
