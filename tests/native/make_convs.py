#!/usr/bin/env python3
"""Write small convolution models as ONNX, one per shape class of the convolution GEMM paths.

    make_convs.py --out DIR

For each case NAME writes DIR/NAME.onnx and DIR/NAME.<input>.npy (seeded): 1×1 convolutions (x read
directly) and k×k ones (im2col), strides, dilations, asymmetric pads, 1-D and 3-D, batch 2, row tiles
and position panels with tails, several row blocks, grouped (one GEMM per group), with and without bias, and the fused epilogues
(Relu, Clip/ReLU6, HardSwish, SiLU, Sigmoid, residual Add, per-channel and spatial broadcasts);
ConvTranspose with strides, output padding, dilation, 1-D, batch 2 and groups; weights shared by several
convolutions.
Prints the case names, one a line. Uses only onnx.helper and numpy.
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def case(rng, name, xshape, convs, tail, extra_inputs=()):
    """convs: list of (M, kernel, attrs, bias) applied in sequence; tail(nodes, inits, y) -> output name."""
    inits, nodes = [], []
    y = "x"
    c = xshape[1]
    for i, (m, k, attrs, bias, *op) in enumerate(convs):
        op = op[0] if op else "Conv"
        g = attrs.get("group", 1)
        shape = (m, c // g, *k) if op == "Conv" else (c, m // g, *k)
        w = rng.normal(0.0, np.sqrt(1.0 / (c * np.prod(k))), size=shape).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        ins = [y, f"w{i}"]
        if bias:
            inits.append(numpy_helper.from_array(rng.normal(0.0, 0.5, size=(m,)).astype(np.float32), f"b{i}"))
            ins.append(f"b{i}")
        nodes.append(helper.make_node(op, ins, [f"c{i}"], name=f"conv{i}", kernel_shape=list(k), **attrs))
        y, c = f"c{i}", m
    out = tail(nodes, inits, y)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xshape))]
    feeds = {"x": rng.random(xshape, dtype=np.float32) * 2 - 1}
    for n, s in extra_inputs:
        inputs.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)))
        feeds[n] = rng.random(s, dtype=np.float32) * 2 - 1
    g = helper.make_graph(nodes, name, inputs, [], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    # The output's shape from ONNX's own shape inference.
    vi = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
    m.graph.output.append(vi[out])
    onnx.checker.check_model(m)
    return m, feeds


def relu(nodes, inits, y):
    nodes.append(helper.make_node("Relu", [y], ["out"], name="relu"))
    return "out"


def clip6(nodes, inits, y):
    inits += [numpy_helper.from_array(np.array(0, np.float32), "lo"), numpy_helper.from_array(np.array(6, np.float32), "hi")]
    nodes.append(helper.make_node("Clip", [y, "lo", "hi"], ["out"], name="relu6"))
    return "out"


def hardswish(nodes, inits, y):
    nodes.append(helper.make_node("HardSwish", [y], ["out"], name="hardswish"))
    return "out"


def silu(nodes, inits, y):
    nodes.append(helper.make_node("Sigmoid", [y], ["s"], name="sigmoid"))
    nodes.append(helper.make_node("Mul", [y, "s"], ["out"], name="silu"))
    return "out"


def sigmoid(nodes, inits, y):
    nodes.append(helper.make_node("Sigmoid", [y], ["out"], name="sigmoid"))
    return "out"


def residual_relu(nodes, inits, y):
    nodes.append(helper.make_node("Add", [y, "r"], ["s"], name="residual"))
    nodes.append(helper.make_node("Relu", ["s"], ["out"], name="relu"))
    return "out"


def identity(nodes, inits, y):
    return y


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(15)

    def bcast(nodes, inits, y):
        # Per-channel scale [M,1,1] and a spatial map [1,1,H,W] broadcast against the conv output.
        inits.append(numpy_helper.from_array(rng.normal(1.0, 0.2, size=(12, 1, 1)).astype(np.float32), "scale"))
        inits.append(numpy_helper.from_array(rng.normal(0.0, 0.3, size=(1, 1, 8, 8)).astype(np.float32), "map"))
        nodes.append(helper.make_node("Mul", [y, "scale"], ["s"], name="scale"))
        nodes.append(helper.make_node("Add", ["s", "map"], ["out"], name="map"))
        return "out"

    def classifier(nodes, inits, y):
        # Global average pool, flatten and a 1000-class Gemm with bias and ReLU: a packed weight whose
        # columns past the last full panel run as narrower tiles (`gemm.rs`): 7 × 128 + 64 + 32 + 8 at
        # batch 1 (panels widened for one row), 31 × 32 + 8 at batch 3.
        c = 48
        inits.append(numpy_helper.from_array(rng.normal(0.0, np.sqrt(1.0 / c), size=(1000, c)).astype(np.float32), "fc_w"))
        inits.append(numpy_helper.from_array(rng.normal(0.0, 0.5, size=(1000,)).astype(np.float32), "fc_b"))
        nodes.append(helper.make_node("GlobalAveragePool", [y], ["pool"], name="pool"))
        nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1))
        nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["fc"], name="fc", transB=1))
        nodes.append(helper.make_node("Relu", ["fc"], ["out"], name="relu"))
        return "out"

    def shared(nodes, inits, y):
        # Weights read by several convolutions (a Siamese pair, an unrolled recurrent cell): w0 (the 3×3
        # above) again, a 1×1 weight twice, a depthwise one twice and by a Mul (so its plain copy stays),
        # a ConvTranspose weight twice — each packed once, shared by the convolutions that read it.
        c = 32
        p = rng.normal(0.0, np.sqrt(1.0 / c), size=(c, c, 1, 1)).astype(np.float32)
        dw = rng.normal(0.0, 1.0 / 3.0, size=(c, 1, 3, 3)).astype(np.float32)
        tw = rng.normal(0.0, np.sqrt(1.0 / (4 * c)), size=(c, c, 2, 2)).astype(np.float32)
        inits += [numpy_helper.from_array(p, "p"), numpy_helper.from_array(dw, "dw"), numpy_helper.from_array(tw, "tw")]
        nodes += [
            helper.make_node("Relu", [y], ["r0"], name="r0"),
            helper.make_node("Conv", ["r0", "w0", "b0"], ["c1"], name="conv0_again", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c1"], ["r1"], name="r1"),
            helper.make_node("Conv", ["r1", "p"], ["c2"], name="pw_a", kernel_shape=[1, 1]),
            helper.make_node("Relu", ["c2"], ["r2"], name="r2"),
            helper.make_node("Conv", ["r2", "p"], ["c3"], name="pw_b", kernel_shape=[1, 1]),
            helper.make_node("Add", ["c3", "r0"], ["s0"], name="s0"),
            helper.make_node("Conv", ["s0", "dw"], ["d1"], name="dw_a", kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=c),
            helper.make_node("Conv", ["d1", "dw"], ["d2"], name="dw_b", kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=c),
            helper.make_node("ReduceMean", ["x"], ["xm"], name="xm", keepdims=1),
            helper.make_node("Mul", ["dw", "xm"], ["dwx"], name="dwx"),
            helper.make_node("ReduceSum", ["dwx"], ["q"], name="q", keepdims=0),
            helper.make_node("Add", ["d2", "q"], ["e"], name="e"),
            helper.make_node("ConvTranspose", ["e", "tw"], ["t1"], name="up_a", kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("ConvTranspose", ["t1", "tw"], ["t2"], name="up_b", kernel_shape=[2, 2]),
        ]
        return "t2"

    cases = {
        # Shared weights (`shared` above): 3×3 pad 1, 32 channels over 28².
        "conv_shared_weights": ([1, 32, 28, 28], [(32, (3, 3), {"pads": [1, 1, 1, 1]}, True)], shared, ()),
        # 1×1, stride 1, no pads: x read in place; 196 positions = 12 full panels + a tail; 20 rows = 4 tiles of 6.
        "conv1x1_relu": ([1, 32, 14, 14], [(20, (1, 1), {}, True)], relu, ()),
        # 3×3 pad 1, batch 2, residual input, second conv without bias.
        "conv3x3_residual_b2": ([2, 8, 9, 11], [(16, (3, 3), {"pads": [1, 1, 1, 1]}, True), (16, (3, 3), {"pads": [1, 1, 1, 1]}, False)],
                                residual_relu, (("r", [2, 16, 9, 11]),)),
        # 7×7 stride 2, asymmetric pads, no bias, ReLU6.
        "conv7x7_s2_relu6": ([1, 3, 23, 23], [(10, (7, 7), {"strides": [2, 2], "pads": [3, 2, 2, 3]}, False)], clip6, ()),
        # Strided, B packed from x's s² phases (`phase.rs`): 3×3 stride 2 pad 1 on an odd height, batch 2,
        # residual input; a 7×7 stride 2 pad 3 stem on 22×22; 3×3 stride 3 without pads; 5×5 stride 2 with
        # the right pad short (the phases' columns still fit).
        "conv3x3_s2_phases_b2": ([2, 6, 13, 14], [(10, (3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, True)], residual_relu,
                                 (("r", [2, 10, 7, 7]),)),
        "conv7x7_s2_phases": ([1, 3, 22, 22], [(16, (7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}, True)], relu, ()),
        "conv3x3_s3_phases": ([1, 4, 12, 12], [(9, (3, 3), {"strides": [3, 3]}, False)], identity, ()),
        "conv5x5_s2_phases": ([1, 5, 17, 16], [(12, (5, 5), {"strides": [2, 2], "pads": [2, 2, 1, 1]}, True)], relu, ()),
        # Strided over few input channels (C·KH·KW ≤ 64: a stem), B packed from x itself by output rows
        # (`conv_rows.rs`), each row in pieces: 48 columns = 32 + 16 on an odd height, batch 2; 112 = 64 + 32 +
        # 16 (MobileNet's stem row); 5×5 stride 2 with the right pad short over 64 columns (one full panel);
        # 3×3 stride 3 without pads, 32 columns.
        "conv3x3_s2_rows_b2": ([2, 3, 33, 96], [(16, (3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, True)], clip6, ()),
        "conv3x3_s2_rows_stem": ([1, 3, 40, 224], [(24, (3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, True)], relu, ()),
        "conv5x5_s2_rows": ([1, 2, 19, 128], [(8, (5, 5), {"strides": [2, 2], "pads": [2, 2, 1, 1]}, True)], relu, ()),
        "conv3x3_s3_rows": ([1, 3, 30, 96], [(9, (3, 3), {"strides": [3, 3]}, False)], identity, ()),
        # Dilation 2, 7 output channels (one partial tile), HardSwish.
        "conv3x3_dil2_hardswish": ([1, 4, 12, 12], [(7, (3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}, True)], hardswish, ()),
        # Dilation 3, asymmetric pads whose output rows are as wide as the input's (B packed from x
        # under the window mask, taps 3 apart; 2 + 3 rows of padding, 1 + 5 columns), batch 2.
        "conv3x3_dil3_asym_b2": ([2, 5, 11, 13], [(10, (3, 3), {"dilations": [3, 3], "pads": [2, 1, 3, 5]}, True)], relu, ()),
        # SiLU (the conv value read twice), no padding.
        "conv3x3_silu": ([1, 6, 10, 10], [(12, (3, 3), {}, True)], silu, ()),
        # A 1×1 conv with padding (im2col), Sigmoid.
        "conv1x1_pad_sigmoid": ([1, 5, 6, 6], [(9, (1, 1), {"pads": [1, 1, 1, 1]}, True)], sigmoid, ()),
        # 1-D, batch 2.
        "conv1d_b2_relu": ([2, 5, 40], [(9, (3,), {"pads": [1, 1]}, True)], relu, ()),
        # Grouped 1-D ones run as 2-D convolutions over one row (`rlx_opt::conv1d`): a Conformer-style depthwise
        # k31 under SiLU, batch 2; depthwise stride 2, dilation 2, asymmetric pads, no bias; 4 groups of 8.
        "conv1d_depthwise_k31_silu": ([2, 16, 60], [(16, (31,), {"pads": [15, 15], "group": 16}, True)], silu, ()),
        "conv1d_dw_s2_dil2": ([1, 24, 41], [(24, (5,), {"strides": [2], "dilations": [2], "pads": [4, 3], "group": 24}, False)], relu, ()),
        "conv1d_grouped": ([2, 32, 29], [(32, (3,), {"pads": [1, 1], "group": 4}, True)], identity, ()),
        # 3-D.
        "conv3d": ([1, 3, 5, 6, 7], [(4, (2, 3, 3), {"pads": [0, 1, 1, 1, 1, 0]}, True)], identity, ()),
        # 3-D, stride 1, planes as large as the input's: B packed from x under the window mask (taps over
        # D·H·W), batch 2; and dilated 2 with asymmetric pads (depth 4 → 3).
        "conv3d_direct_b2": ([2, 4, 4, 6, 7], [(6, (3, 3, 3), {"pads": [1, 1, 1, 1, 1, 1]}, True)], relu, ()),
        "conv3d_dil2_asym": ([1, 3, 4, 6, 7], [(5, (3, 3, 3), {"dilations": [2, 2, 2], "pads": [0, 2, 1, 3, 2, 3]}, False)], identity, ()),
        # Broadcast operands in the epilogue: a per-channel scale and a spatial map.
        "conv3x3_bcast": ([1, 3, 10, 10], [(12, (3, 3), {}, True)], bcast, ()),
        # Several row blocks (256 channels × K 576), 49 positions (3 panels + a 1-wide tail), batch 2.
        "conv3x3_deep_b2": ([2, 64, 7, 7], [(256, (3, 3), {"pads": [1, 1, 1, 1]}, True)], relu, ()),
        # Few positions and a long K (≥ 2304): output channels as the vector lanes (`conv_lanes.rs`, with AVX-512's wide
        # tile; other CPUs take the forms above). 128 channels × K 2304 (three K chunks), 49 positions (8 tiles
        # of 6 + 1), batch 2: 4 units, so the position tiles split into blocks across the thread slots.
        "conv3x3_lanes_b2": ([2, 256, 7, 7], [(128, (3, 3), {"pads": [1, 1, 1, 1]}, True)], relu, ()),
        # One 64-channel panel over 36 positions (a block of one tile per slot), residual input.
        "conv3x3_lanes_residual": ([1, 256, 6, 6], [(64, (3, 3), {"pads": [1, 1, 1, 1]}, True)], residual_relu, (("r", [1, 64, 6, 6]),)),
        # 96 channels: 32-channel panels of 12 positions (25 = 2 tiles + 1), 1×1 read in place, Sigmoid.
        "conv1x1_lanes32_sigmoid": ([1, 2304, 5, 5], [(96, (1, 1), {}, True)], sigmoid, ()),
        # 1×1 stride 2 (ResNet's downsampling: im2col), 64 channels over 25 positions, batch 2, no bias.
        "conv1x1_s2_lanes_b2": ([2, 2304, 9, 9], [(64, (1, 1), {"strides": [2, 2]}, False)], identity, ()),
        # Packed B chunks over units dealt to thread slots: batch 2, K 360 (several chunks), 156 positions
        # (full panels + a tail), 24 channels (13 × 12 outputs: 42 blocks of 2×2, under the Winograd form's 49).
        "conv3x3_chunks_b2": ([2, 40, 13, 12], [(24, (3, 3), {"pads": [1, 1, 1, 1]}, True)], relu, ()),
        # A weight over 512 KB (150 × 900 floats) with more positions (168) than channels: each K chunk sweeps
        # all of a thread slot's units before the next chunk (the partial sums wait in the output).
        "conv3x3_big_weight": ([1, 100, 12, 14], [(150, (3, 3), {"pads": [1, 1, 1, 1]}, True)], relu, ()),
        # B packed from x itself (stride 1, output rows as wide as the input's): a 3×4 kernel with asymmetric
        # pads (top 0, bottom 2, left 1, right 2), batch 2, residual input; two convs in a row.
        "conv3x4_direct_asym_b2": ([2, 6, 12, 13], [(10, (3, 4), {"pads": [0, 1, 2, 2]}, True), (9, (3, 4), {"pads": [0, 1, 2, 2]}, False)],
                                   residual_relu, (("r", [2, 9, 12, 13]),)),
        # Enough work for the thread pool: 15 → 64 channels at 26×26 (15 input channels: under the Winograd
        # form's 16).
        "conv3x3_wide": ([1, 15, 26, 26], [(64, (3, 3), {"pads": [1, 1, 1, 1]}, True)], relu, ()),
        # Winograd (`winograd.rs`; the forms below are the default's, `--winograd f2` runs them all as F(2×2)).
        # F(4×4, 3×3) over 28² with 128 output channels: one block of 7 × 7 tiles, so 4 units of output channels
        # (22 row tiles: the last block short), each transforming the input again; ReLU.
        "conv3x3_winograd": ([1, 16, 28, 28], [(128, (3, 3), {"pads": [1, 1, 1, 1]}, True)], relu, ()),
        # F(4×4): odd output rows and columns (a last tile row and column of one output), batch 2 (units of 4
        # tile rows), 50 channels (4-row tiles, one group tile short), two in a row, the second without bias,
        # residual input.
        "conv3x3_winograd_res_b2": ([2, 24, 29, 31], [(50, (3, 3), {"pads": [1, 1, 1, 1]}, True), (50, (3, 3), {"pads": [1, 1, 1, 1]}, False)],
                                    residual_relu, (("r", [2, 50, 29, 31]),)),
        # F(2×2) (48 channels at 30²: F(4×4)'s units would split the channels): asymmetric pads (top 2, left 1,
        # bottom 0, right 2), no bias, SiLU (the conv value read twice).
        "conv3x3_winograd_asym": ([1, 16, 30, 29], [(48, (3, 3), {"pads": [2, 1, 0, 2]}, False)], silu, ()),
        # F(2×2) over 14² (49 blocks of 2×2), batch 2, 48 channels.
        "conv3x3_winograd_mid_b2": ([2, 32, 14, 14], [(48, (3, 3), {"pads": [1, 1, 1, 1]}, True)], relu, ()),
        # F(2×2), 160 input channels: three K chunks of the 16 GEMMs through the products.
        "conv3x3_winograd_chunks": ([1, 160, 14, 14], [(48, (3, 3), {"pads": [1, 1, 1, 1]}, True)], identity, ()),
        # 32 output channels over 28²: too few for the Winograd form (the direct one; over 56² they take F(2×2)).
        "conv3x3_growth_direct": ([1, 64, 28, 28], [(32, (3, 3), {"pads": [1, 1, 1, 1]}, True)], relu, ()),
        # 24 channels (6-row tiles) over 13² = 2 × 64 + 41 positions: the last position a column tile of 6 rows.
        "conv1x1_column6": ([1, 40, 13, 13], [(24, (1, 1), {}, True)], relu, ()),
        "classifier_tail_b1": ([1, 16, 5, 5], [(48, (1, 1), {}, True)], classifier, ()),
        "classifier_tail_b3": ([3, 16, 5, 5], [(48, (1, 1), {}, True)], classifier, ()),
        # Grouped convolutions with ≥ 8 channels a group: one GEMM per group. 2 groups of 8 → 12 channels (2 tiles
        # a group), 3×3 pad 1, batch 2 (AlexNet's form).
        "conv3x3_grouped_b2": ([2, 16, 9, 9], [(24, (3, 3), {"pads": [1, 1, 1, 1], "group": 2}, True)], relu, ()),
        # 1×1, 4 groups of 8 → 10 channels (a partial tile per group), x read in place at the group's rows (ShuffleNet's).
        "conv1x1_grouped": ([1, 32, 14, 14], [(40, (1, 1), {"group": 4}, True)], residual_relu, (("r", [1, 40, 14, 14]),)),
        # More channels a group than positions: row blocks across the groups' tiles.
        "conv3x3_grouped_deep": ([1, 32, 5, 5], [(64, (3, 3), {"pads": [1, 1, 1, 1], "group": 2}, False)], identity, ()),
        # ConvTranspose through the GEMM (then the col2im gather): 2×2 stride 2 upsampling, Relu.
        "convt2x2_s2_relu": ([1, 8, 5, 6], [(6, (2, 2), {"strides": [2, 2]}, True, "ConvTranspose")], relu, ()),
        # 3×3 stride 2, pads 1, output_padding 1, batch 2, no bias.
        "convt3x3_s2_opad_b2": ([2, 4, 7, 7], [(5, (3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}, False, "ConvTranspose")],
                                identity, ()),
        # 1-D, stride 3, dilation 2, asymmetric pads, residual input.
        "convt1d_s3_dil2_residual": ([1, 3, 9], [(4, (4,), {"strides": [3], "dilations": [2], "pads": [1, 2]}, True, "ConvTranspose")],
                                     residual_relu, (("r", [1, 4, 28]),)),
        # Grouped (2 groups): the direct per-output gather.
        "convt_grouped": ([1, 4, 6, 6], [(6, (3, 3), {"strides": [2, 2], "group": 2}, True, "ConvTranspose")], sigmoid, ()),
    }
    for name, (xs, convs, tail, extra) in cases.items():
        m, feeds = case(rng, name, xs, convs, tail, extra)
        onnx.save(m, os.path.join(a.out, f"{name}.onnx"))
        for k, v in feeds.items():
            np.save(os.path.join(a.out, f"{name}.{k}.npy"), v)
        print(name)


if __name__ == "__main__":
    main()
