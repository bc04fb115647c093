#!/usr/bin/env python3
"""Build small ONNX models the way exporters emit them and run ONNX Runtime on them.

    onnx_seq_models.py --out DIR

Writes, per model NAME in (lstm_gru, unet_resize, stft_frontend, control_flow, control_flow_else, stn, detector, while_loop, while_loop_else, while_scan, scan_rnn, scan_axes, scan_dim, topk_nan): DIR/NAME.onnx, DIR/NAME.x.npy (the input, "x")
and DIR/NAME.ort.npy (ONNX Runtime's output "y", float32).

- lstm_gru: a PyTorch-style sequence classifier. batch-first input [2, 12, 8] transposed to
  sequence-major, a bidirectional LSTM (hidden 16, biases, zero initial states as initializers),
  the two directions' outputs merged the way torch.onnx does (Transpose + Reshape), a GRU
  (hidden 10, linear_before_reset=1 as PyTorch's GRU exports), its last state through a Gemm to 4
  classes. Output y: [2, 4].
- unet_resize: a U-Net-style encoder/decoder [1, 4, 16, 16]: Conv+Relu, MaxPool, Conv+Relu, a nearest
  2x Resize (nn.Upsample's export: asymmetric coordinates, floor), skip Concat, Conv+Relu, a bilinear
  2x Resize (align_corners=False: pytorch_half_pixel) and a cubic Resize to given sizes (half_pixel),
  a 1x1 Conv head. Output y: [1, 3, 40, 40].
- stft_frontend: an audio front end [1, 400]: STFT (Hann window of 64 as an initializer, hop 80,
  one-sided), power spectrum (Pow + ReduceSum over re/im), a mel-style projection (MatMul by a
  [33, 8] filter bank), log(x + 1e-6). Output y: [1, 5, 8].
- control_flow: control flow as torch.onnx exports a scripted module [2, 6, 8]: a Loop over the time axis
  whose trip count is Gather(Shape(x), 1) and whose condition is a constant true, carrying a tanh RNN
  state [2, 16] (x_t by Gather with the iteration number) and emitting it per step; a Scan over the
  emitted states (scan_input_axes 0) keeping their running max and emitting it in reverse
  (scan_output_directions 1); an If on a run-time condition (mean of the final state > 0) choosing
  between two Gemm heads. Output y: [2, 4] plus the Scan's reversed output summed into it.
  control_flow_else: the same graph with an input that takes the else branch.
- while_loop: a scripted `while` as torch.onnx exports it [2, 4]: a Loop with no trip count whose
  condition (abs(h).sum() < 50) is computed before it and again in its body, carrying h (grown by 1.5
  plus a mix of x, an outer value the body reads) and an iteration counter; an If on the computed count
  (> 3) whose then branch is itself a `while` (halving until abs(g).sum() <= 20) and whose else
  branch subtracts 1; plus 0.01 * count. Neither loop's trip count is known before it runs.
  while_loop_else: an input that takes the else branch. Also bad_loop.onnx (no ONNX Runtime output):
  a `while` whose body doubles its carried value's rows each iteration.
- while_scan: a Loop of trip count 6 whose body computes its condition (abs(h).sum() < 40, h = 1.3 h + x)
  and emits h per iteration [2, 4]: output y [K, 2, 4], K the iterations run (4 for the input written).
- scan_rnn: a Scan over 5000 steps (past rlxc's Scan unroll limit of 256 steps: a loop region) of a tanh RNN
  step h = tanh(x_t W + h U) (input [5000, 4], state [8]), emitting h per step: y [5000, 8].
- scan_axes: a Scan over 4100 steps with two scan inputs — x [2, 4100, 3] read along axis 1 in
  reverse, and its transpose [4100, 2, 3] along axis 0 forward — state [2, 6], emitting the state
  along scan_output_axes 1 in reverse (scan_output_directions 1): y [2, 4100, 6].
- scan_dim: scan_rnn with a symbolic sequence length "T" (fixed by --dim T=5000 or by the input).
- topk_nan: TopK (k 4, axis 1) of x [3, 7] holding NaNs, largest and smallest: y [3, 16] is the
  largest values, their indices (as floats), the smallest values, their indices.
- stn: a spatial transformer [2, 3, 12, 12] (opset 20): GlobalAveragePool → Flatten → Gemm predicting
  theta [2, 6] around the identity → Reshape [2, 2, 3] → AffineGrid to [2, 3, 10, 10] → GridSample
  bilinear (zeros padding), GridSample bicubic (zeros, align_corners) and bilinear (border, align_corners)
  on the same grid. Output y: [2, 3, 10, 10] (their sum). (Bicubic with border or reflection padding is
  left out: ONNX Runtime clamps each cubic tap, the ONNX reference — which rlxc follows — clamps the
  coordinate first, and they differ near the edges.)
- detector: an SSD-style detector head [1, 48, 7] (4 box deltas + 3 class logits per anchor; opset 17):
  boxes decoded from 48 anchors (initializer, center form) with variances 0.1 / 0.2 (Slice, Mul, Exp,
  Add, Concat) into corners [y1, x1, y2, x2], Sigmoid scores transposed to [1, 3, 48],
  NonMaxSuppression (max 20 per class, IoU 0.45, score 0.75), then what exporters emit after it: Gather of
  the box and class columns of the selected indices, Squeeze + Gather of the selected boxes, Gather of
  their scores from the flattened score map by class·48 + box. Output y: [K, 6] (box, score, class),
  K known only at run time.
- roi_head: a two-stage detector's box head (input [2, 3, 16, 16], opset 16): Conv 3x3 + Relu as the feature
  map, RoiAlign over 5 constant boxes (batch indices [0, 1, 1, 0, 1], one partly off the map) at
  spatial_scale 1/4 — avg with sampling_ratio 2 (half_pixel) and max with sampling_ratio 0 (adaptive:
  each box's grid sized by the box, output_half_pixel) — each [5, 8, 3, 3], concatenated on channels,
  Flatten, Gemm to 6 scores. Output y: [5, 6]. Also bad_roi.onnx (no ONNX Runtime output): RoiAlign
  with sampling_ratio 0 over boxes given at run time.
- bitcast_mix: x [4, 8] (opset 26): 3x, BitCast to int32, the sign bit cleared (BitwiseAnd), BitCast
  back to float (|3x|), plus 0.01 x the biased exponent (BitCast to uint32, BitShift right 23, Cast): BitCast in the middle
  of a graph, between kernels. Output y: [4, 8].
- deform_block: a modulated deformable convolution (DCNv2-style, opset 19) on x [2, 4, 9, 8]: offsets
  [2, 36, 5, 4] and a Sigmoid mask [2, 18, 5, 4] predicted by stride-2 3x3 convolutions, then DeformConv
  3x3 (group 2, offset_group 2, stride 2, dilation 2, pads 2) with bias, Relu. Output y: [2, 6, 5, 4].
- matmul_bcast: MatMul of a lower-rank left operand a [2, 3, 36] by x [5, 2, 36, 32] (a broadcast over x's
  leading dim), Relu, MatMul by b [5, 1, 32, 7] (b's size-1 dim broadcast). Output y: [5, 2, 3, 7].
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def init(name: str, a: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(a), name)


def lstm_gru(rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray]:
    b, t, f, h1, h2, k = 2, 12, 8, 16, 10, 4
    s = 0.3
    inits = [
        init("W1", (rng.standard_normal((2, 4 * h1, f)) * s).astype(np.float32)),
        init("R1", (rng.standard_normal((2, 4 * h1, h1)) * s).astype(np.float32)),
        init("B1", (rng.standard_normal((2, 8 * h1)) * s).astype(np.float32)),
        init("h0", np.zeros((2, b, h1), np.float32)),
        init("c0", np.zeros((2, b, h1), np.float32)),
        init("W2", (rng.standard_normal((1, 3 * h2, 2 * h1)) * s).astype(np.float32)),
        init("R2", (rng.standard_normal((1, 3 * h2, h2)) * s).astype(np.float32)),
        init("B2", (rng.standard_normal((1, 6 * h2)) * s).astype(np.float32)),
        init("g0", np.zeros((1, b, h2), np.float32)),
        init("Wfc", (rng.standard_normal((k, h2)) * s).astype(np.float32)),
        init("bfc", (rng.standard_normal((k,)) * s).astype(np.float32)),
        init("shape_tb2h", np.array([t, b, 2 * h1], np.int64)),
        init("axes0", np.array([0], np.int64)),
    ]
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
        helper.make_node("LSTM", ["xt", "W1", "R1", "B1", "", "h0", "c0"], ["y1", "y1h", "y1c"],
                         hidden_size=h1, direction="bidirectional"),
        # y1: [t, 2, b, h1] → [t, b, 2, h1] → [t, b, 2·h1] (torch.onnx's merge of the directions)
        helper.make_node("Transpose", ["y1"], ["y1t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["y1t", "shape_tb2h"], ["y1m"]),
        helper.make_node("GRU", ["y1m", "W2", "R2", "B2", "", "g0"], ["y2", "y2h"], hidden_size=h2,
                         linear_before_reset=1),
        helper.make_node("Squeeze", ["y2h", "axes0"], ["last"]),
        helper.make_node("Gemm", ["last", "Wfc", "bfc"], ["y"], transB=1),
    ]
    g = helper.make_graph(nodes, "lstm_gru",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, t, f])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, k])], inits)
    x = rng.standard_normal((b, t, f)).astype(np.float32)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)]), x


def unet_resize(rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray]:
    def conv_w(o: int, i: int, k: int) -> np.ndarray:
        return (rng.standard_normal((o, i, k, k)) * (1.0 / np.sqrt(i * k * k))).astype(np.float32)

    inits = [
        init("w1", conv_w(8, 4, 3)), init("b1", np.zeros(8, np.float32) + 0.1),
        init("w2", conv_w(16, 8, 3)), init("b2", np.zeros(16, np.float32) - 0.05),
        init("w3", conv_w(8, 24, 3)), init("b3", np.zeros(8, np.float32)),
        init("w4", conv_w(3, 8, 1)), init("b4", np.zeros(3, np.float32)),
        init("scales2", np.array([1, 1, 2, 2], np.float32)),
        init("sizes40", np.array([1, 8, 40, 40], np.int64)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Resize", ["r2", "", "scales2"], ["u1"], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        helper.make_node("Concat", ["u1", "r1"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("Resize", ["r3", "", "scales2"], ["u2"], mode="linear",
                         coordinate_transformation_mode="pytorch_half_pixel"),
        helper.make_node("Resize", ["u2", "", "", "sizes40"], ["u3"], mode="cubic",
                         coordinate_transformation_mode="half_pixel"),
        helper.make_node("Conv", ["u3", "w4", "b4"], ["y"]),
    ]
    g = helper.make_graph(nodes, "unet_resize",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 40, 40])], inits)
    x = rng.standard_normal((1, 4, 16, 16)).astype(np.float32)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)]), x


def stft_frontend(rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray]:
    n, frame, hop, bins, mels = 400, 64, 80, 33, 8
    hann = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(frame) / frame)).astype(np.float32)
    inits = [
        init("shape_sig", np.array([1, n, 1], np.int64)),
        init("hop", np.array(hop, np.int64)),
        init("window", hann),
        init("two", np.array(2.0, np.float32)),
        init("axes_last", np.array([-1], np.int64)),
        init("mel", np.abs(rng.standard_normal((bins, mels))).astype(np.float32) * 0.1),
        init("eps", np.array(1e-6, np.float32)),
    ]
    nodes = [
        helper.make_node("Reshape", ["x", "shape_sig"], ["sig"]),
        helper.make_node("STFT", ["sig", "hop", "window"], ["spec"], onesided=1),
        helper.make_node("Pow", ["spec", "two"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "axes_last"], ["power"], keepdims=0),
        helper.make_node("MatMul", ["power", "mel"], ["melspec"]),
        helper.make_node("Add", ["melspec", "eps"], ["melp"]),
        helper.make_node("Log", ["melp"], ["y"]),
    ]
    g = helper.make_graph(nodes, "stft_frontend",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, mels])], inits)
    x = rng.standard_normal((1, n)).astype(np.float32)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)]), x


def control_flow_graph(rng: np.random.Generator) -> onnx.ModelProto:
    b, t, f, h, k = 2, 6, 8, 16, 4
    s = 0.4
    inits = [
        init("W", (rng.standard_normal((f, h)) * s).astype(np.float32)),
        init("U", (rng.standard_normal((h, h)) * s).astype(np.float32)),
        init("h0", np.zeros((b, h), np.float32)),
        init("Wa", (rng.standard_normal((h, k)) * s).astype(np.float32)),
        init("ba", (rng.standard_normal((k,)) * s).astype(np.float32)),
        init("Wb", (rng.standard_normal((h, k)) * s).astype(np.float32)),
        init("idx1", np.array(1, np.int64)),
        init("true", np.array(True)),
        init("zero", np.array(0.0, np.float32)),
        init("half", np.array(0.5, np.float32)),
        init("m0", np.full((b, h), -1e9, np.float32)),
    ]
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Gather", ["x", "i"], ["xt"], axis=1),
            helper.make_node("MatMul", ["xt", "W"], ["xw"]),
            helper.make_node("MatMul", ["h_in", "U"], ["hu"]),
            helper.make_node("Add", ["xw", "hu"], ["pre"]),
            helper.make_node("Tanh", ["pre"], ["h_out"]),
            helper.make_node("Identity", ["h_out"], ["h_scan"]),
        ],
        "rnn_step",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [b, h])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [b, h]),
         helper.make_tensor_value_info("h_scan", TensorProto.FLOAT, [b, h])],
    )
    scan_body = helper.make_graph(
        [helper.make_node("Max", ["m_in", "s_t"], ["m_out"]), helper.make_node("Identity", ["m_out"], ["m_scan"])],
        "running_max",
        [helper.make_tensor_value_info("m_in", TensorProto.FLOAT, [b, h]),
         helper.make_tensor_value_info("s_t", TensorProto.FLOAT, [b, h])],
        [helper.make_tensor_value_info("m_out", TensorProto.FLOAT, [b, h]),
         helper.make_tensor_value_info("m_scan", TensorProto.FLOAT, [b, h])],
    )
    then_g = helper.make_graph(
        [helper.make_node("Gemm", ["hT", "Wa", "ba"], ["head_a"])], "then_head", [],
        [helper.make_tensor_value_info("head_a", TensorProto.FLOAT, [b, k])])
    else_g = helper.make_graph(
        [helper.make_node("MatMul", ["hT", "Wb"], ["mb"]), helper.make_node("Mul", ["mb", "half"], ["head_b"])],
        "else_head", [], [helper.make_tensor_value_info("head_b", TensorProto.FLOAT, [b, k])])
    nodes = [
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Gather", ["xs", "idx1"], ["steps"], axis=0),
        helper.make_node("Loop", ["steps", "true", "h0"], ["hT", "hs"], body=body),
        helper.make_node("Scan", ["m0", "hs"], ["mT", "ms"], body=scan_body, num_scan_inputs=1,
                         scan_output_directions=[1]),
        helper.make_node("ReduceMean", ["hT"], ["mean"], keepdims=0),
        helper.make_node("Greater", ["mean", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["head"], then_branch=then_g, else_branch=else_g),
        # ms: [t, b, h] (reversed running max) → a [b, 1] summary added to the head
        helper.make_node("ReduceMean", ["ms"], ["msum"], axes=[0, 2], keepdims=0),
        helper.make_node("Unsqueeze", ["msum", "idx1"], ["msum1"]),
        helper.make_node("Add", ["head", "msum1"], ["y"]),
    ]
    g = helper.make_graph(nodes, "control_flow",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, t, f])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, k])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])


def branch_input(model: onnx.ModelProto, draw, want: bool) -> np.ndarray:
    """The first input draw(k), k = 0, 1, …, for which the model's If takes its then branch (want) or
    not: its condition `c` read by ONNX Runtime."""
    m2 = onnx.ModelProto()
    m2.CopyFrom(model)
    m2.graph.output.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    sess = ort.InferenceSession(m2.SerializeToString(), providers=["CPUExecutionProvider"])
    for k in range(200):
        x = draw(k)
        (_, c) = sess.run(None, {"x": x})
        if bool(c) == want:
            return x
    raise SystemExit("no input found for the If branch")


def control_flow_inputs(model: onnx.ModelProto, rng: np.random.Generator, want: bool) -> np.ndarray:
    """An input [2, 6, 8] whose final state's mean is > 0 (want) or not."""
    return branch_input(model, lambda k: rng.standard_normal((2, 6, 8)).astype(np.float32), want)


def while_loop_graph(rng: np.random.Generator) -> onnx.ModelProto:
    """torch.onnx's export of a scripted `while` loop and an `if` on a computed scalar (module doc)."""
    b, f = 2, 4
    inits = [
        init("limit", np.array(50.0, np.float32)),
        init("small", np.array(20.0, np.float32)),
        init("grow", np.array(1.5, np.float32)),
        init("mix", (rng.standard_normal((b, f)) * 0.1).astype(np.float32)),
        init("halve", np.array(0.5, np.float32)),
        init("one", np.array(1.0, np.float32)),
        init("n0", np.array(0, np.int64)),
        init("n1", np.array(1, np.int64)),
        init("three", np.array(3, np.int64)),
        init("pct", np.array(0.01, np.float32)),
    ]
    f32 = TensorProto.FLOAT
    # while abs(h).sum() < limit: h = h * grow + x * mix; n += 1
    grow_body = helper.make_graph(
        [
            helper.make_node("Mul", ["h_in", "grow"], ["hg"]),
            helper.make_node("Mul", ["x", "mix"], ["xm"]),
            helper.make_node("Add", ["hg", "xm"], ["h_out"]),
            helper.make_node("Add", ["n_in", "n1"], ["n_out"]),
            helper.make_node("Abs", ["h_out"], ["ha"]),
            helper.make_node("ReduceSum", ["ha"], ["hs"], keepdims=0),
            helper.make_node("Less", ["hs", "limit"], ["cond_out"]),
        ],
        "grow_step",
        [helper.make_tensor_value_info("it", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", f32, [b, f]),
         helper.make_tensor_value_info("n_in", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", f32, [b, f]),
         helper.make_tensor_value_info("n_out", TensorProto.INT64, [])],
    )
    # then: while abs(g).sum() > small: g = g * halve   (a loop inside a branch)
    shrink_body = helper.make_graph(
        [
            helper.make_node("Mul", ["g_in", "halve"], ["g_out"]),
            helper.make_node("Abs", ["g_out"], ["ga"]),
            helper.make_node("ReduceSum", ["ga"], ["gs"], keepdims=0),
            helper.make_node("Greater", ["gs", "small"], ["c_out"]),
        ],
        "shrink_step",
        [helper.make_tensor_value_info("j", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("g_in", f32, [b, f])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("g_out", f32, [b, f])],
    )
    then_g = helper.make_graph(
        [
            helper.make_node("Abs", ["hT"], ["ta"]),
            helper.make_node("ReduceSum", ["ta"], ["ts"], keepdims=0),
            helper.make_node("Greater", ["ts", "small"], ["c0"]),
            helper.make_node("Loop", ["", "c0", "hT"], ["gT"], body=shrink_body),
        ],
        "then_shrink", [], [helper.make_tensor_value_info("gT", f32, [b, f])])
    else_g = helper.make_graph([helper.make_node("Sub", ["hT", "one"], ["e"])], "else_shift", [],
                               [helper.make_tensor_value_info("e", f32, [b, f])])
    nodes = [
        helper.make_node("Abs", ["x"], ["xa"]),
        helper.make_node("ReduceSum", ["xa"], ["xs"], keepdims=0),
        helper.make_node("Less", ["xs", "limit"], ["cond0"]),
        helper.make_node("Loop", ["", "cond0", "x", "n0"], ["hT", "nT"], body=grow_body),
        helper.make_node("Greater", ["nT", "three"], ["c"]),
        helper.make_node("If", ["c"], ["head"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Cast", ["nT"], ["nf"], to=f32),
        helper.make_node("Mul", ["nf", "pct"], ["np"]),
        helper.make_node("Add", ["head", "np"], ["y"]),
    ]
    g = helper.make_graph(nodes, "while_loop", [helper.make_tensor_value_info("x", f32, [b, f])],
                          [helper.make_tensor_value_info("y", f32, [b, f])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])


def while_loop_input(model: onnx.ModelProto, rng: np.random.Generator, want: bool) -> np.ndarray:
    """An input [2, 4] for which the If takes the then branch (want) or not."""
    return branch_input(model, lambda k: (rng.standard_normal((2, 4)) * (1 + k % 8)).astype(np.float32), want)


def while_scan(rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray]:
    """A Loop with a constant trip count (6) whose condition its body computes, emitting its state per
    iteration: the scan output's length is the iterations run (module doc)."""
    b, f = 2, 4
    f32 = TensorProto.FLOAT
    inits = [init("six", np.array(6, np.int64)), init("true", np.array(True)), init("limit", np.array(40.0, np.float32)),
             init("grow", np.array(1.3, np.float32))]
    body = helper.make_graph(
        [helper.make_node("Mul", ["h_in", "grow"], ["hg"]), helper.make_node("Add", ["hg", "x"], ["h_out"]),
         helper.make_node("Abs", ["h_out"], ["ha"]), helper.make_node("ReduceSum", ["ha"], ["hs"], keepdims=0),
         helper.make_node("Less", ["hs", "limit"], ["c_out"]), helper.make_node("Identity", ["h_out"], ["h_scan"])],
        "grow_emit",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", f32, [b, f])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("h_out", f32, [b, f]),
         helper.make_tensor_value_info("h_scan", f32, [b, f])])
    nodes = [helper.make_node("Loop", ["six", "true", "x"], ["hT", "y"], body=body)]
    g = helper.make_graph(nodes, "while_scan", [helper.make_tensor_value_info("x", f32, [b, f])],
                          [helper.make_tensor_value_info("y", f32, ["K", b, f])], inits)
    x = rng.standard_normal((b, f)).astype(np.float32)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)]), x


def scan_rnn_graph(rng: np.random.Generator, steps) -> onnx.ModelProto:
    """A Scan of a tanh RNN step over `steps` (an int or a symbolic name) rows of x [steps, 4]."""
    f, h = 4, 8
    f32 = TensorProto.FLOAT
    inits = [init("W", (rng.standard_normal((f, h)) * 0.5).astype(np.float32)),
             init("U", (rng.standard_normal((h, h)) * 0.25).astype(np.float32)), init("h0", np.zeros((h,), np.float32))]
    body = helper.make_graph(
        [helper.make_node("Unsqueeze", ["x_t", "axis0"], ["x_row"]), helper.make_node("MatMul", ["x_row", "W"], ["xw1"]),
         helper.make_node("Squeeze", ["xw1", "axis0"], ["xw"]), helper.make_node("Unsqueeze", ["h_in", "axis0"], ["h_row"]),
         helper.make_node("MatMul", ["h_row", "U"], ["hu1"]), helper.make_node("Squeeze", ["hu1", "axis0"], ["hu"]),
         helper.make_node("Add", ["xw", "hu"], ["pre"]), helper.make_node("Tanh", ["pre"], ["h_out"]),
         helper.make_node("Identity", ["h_out"], ["h_scan"])],
        "rnn_step",
        [helper.make_tensor_value_info("h_in", f32, [h]), helper.make_tensor_value_info("x_t", f32, [f])],
        [helper.make_tensor_value_info("h_out", f32, [h]), helper.make_tensor_value_info("h_scan", f32, [h])],
        [init("axis0", np.array([0], np.int64))])
    nodes = [helper.make_node("Scan", ["h0", "x"], ["hT", "y"], body=body, num_scan_inputs=1, name="rnn_scan")]
    g = helper.make_graph(nodes, "scan_rnn", [helper.make_tensor_value_info("x", f32, [steps, f])],
                          [helper.make_tensor_value_info("y", f32, [steps, h])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])


def scan_rnn(rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray]:
    return scan_rnn_graph(rng, 5000), rng.standard_normal((5000, 4)).astype(np.float32)


def scan_dim(rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray]:
    return scan_rnn_graph(rng, "T"), rng.standard_normal((5000, 4)).astype(np.float32)


def scan_axes(rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray]:
    """Scan inputs on axes 1 (reversed) and 0, the output on axis 1 reversed (module doc)."""
    b, t, f, h = 2, 4100, 3, 6
    f32 = TensorProto.FLOAT
    inits = [init("W1", (rng.standard_normal((f, h)) * 0.5).astype(np.float32)),
             init("W2", (rng.standard_normal((f, h)) * 0.5).astype(np.float32)),
             init("U", (rng.standard_normal((h, h)) * 0.25).astype(np.float32)), init("s0", np.zeros((b, h), np.float32))]
    body = helper.make_graph(
        [helper.make_node("MatMul", ["a_t", "W1"], ["aw"]), helper.make_node("MatMul", ["b_t", "W2"], ["bw"]),
         helper.make_node("MatMul", ["s_in", "U"], ["su"]), helper.make_node("Add", ["aw", "bw"], ["ab"]),
         helper.make_node("Add", ["ab", "su"], ["pre"]), helper.make_node("Tanh", ["pre"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["s_scan"])],
        "two_inputs_step",
        [helper.make_tensor_value_info("s_in", f32, [b, h]), helper.make_tensor_value_info("a_t", f32, [b, f]),
         helper.make_tensor_value_info("b_t", f32, [b, f])],
        [helper.make_tensor_value_info("s_out", f32, [b, h]), helper.make_tensor_value_info("s_scan", f32, [b, h])])
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
             helper.make_node("Scan", ["s0", "x", "xt"], ["sT", "y"], body=body, num_scan_inputs=2,
                              scan_input_axes=[1, 0], scan_input_directions=[1, 0], scan_output_axes=[1],
                              scan_output_directions=[1])]
    g = helper.make_graph(nodes, "scan_axes", [helper.make_tensor_value_info("x", f32, [b, t, f])],
                          [helper.make_tensor_value_info("y", f32, [b, t, h])], inits)
    x = rng.standard_normal((b, t, f)).astype(np.float32)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)]), x


def topk_nan(rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray]:
    """TopK over rows holding NaNs, largest and smallest (module doc)."""
    f32 = TensorProto.FLOAT
    x = rng.standard_normal((3, 7)).astype(np.float32)
    x[0, [1, 4]] = np.nan
    x[1, 6] = np.nan
    x[1, 2] = x[1, 5]  # a tie: the lower index first
    x[2, :] = np.nan
    x[2, 3] = 1.0
    nodes = [helper.make_node("TopK", ["x", "k"], ["vl", "il"], axis=1, largest=1),
             helper.make_node("TopK", ["x", "k"], ["vs", "is"], axis=1, largest=0),
             helper.make_node("Cast", ["il"], ["ilf"], to=f32), helper.make_node("Cast", ["is"], ["isf"], to=f32),
             helper.make_node("Concat", ["vl", "ilf", "vs", "isf"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "topk_nan", [helper.make_tensor_value_info("x", f32, [3, 7])],
                          [helper.make_tensor_value_info("y", f32, [3, 16])], [init("k", np.array([4], np.int64))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)]), x


def bad_loop(rng: np.random.Generator) -> onnx.ModelProto:
    """A while loop whose body doubles its loop-carried value's rows every iteration (valid ONNX,
    not a static-shape loop): rlxc refuses it naming the Loop node."""
    f32 = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("Concat", ["h_in", "h_in"], ["h_out"], axis=0),
         helper.make_node("ReduceSum", ["h_out"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["c_out"])],
        "grow_rows",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", f32, ["r", 4])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("h_out", f32, ["r2", 4])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s0"], keepdims=0), helper.make_node("Less", ["s0", "limit"], ["c0"]),
             helper.make_node("Loop", ["", "c0", "x"], ["y"], body=body, name="rows_loop")]
    g = helper.make_graph(nodes, "bad_loop", [helper.make_tensor_value_info("x", f32, [2, 4])],
                          [helper.make_tensor_value_info("y", f32, ["R", 4])], [init("limit", np.array(100.0, np.float32))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])


def stn(rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray]:
    n, c, hw, out = 2, 3, 12, 10
    inits = [
        init("Wt", (rng.standard_normal((6, c)) * 0.2).astype(np.float32)),
        init("bt", np.array([1.1, 0.1, -0.05, -0.1, 0.9, 0.08], np.float32)),
        init("shape_theta", np.array([n, 2, 3], np.int64)),
        init("size", np.array([n, c, out, out], np.int64)),
    ]
    nodes = [
        helper.make_node("GlobalAveragePool", ["x"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["feat"]),
        helper.make_node("Gemm", ["feat", "Wt", "bt"], ["t6"], transB=1),
        helper.make_node("Reshape", ["t6", "shape_theta"], ["theta"]),
        helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=0),
        helper.make_node("GridSample", ["x", "grid"], ["s1"], mode="linear", padding_mode="zeros"),
        helper.make_node("GridSample", ["x", "grid"], ["s2"], mode="cubic", padding_mode="zeros", align_corners=1),
        helper.make_node("GridSample", ["x", "grid"], ["s3"], mode="linear", padding_mode="border", align_corners=1),
        helper.make_node("Sum", ["s1", "s2", "s3"], ["y"]),
    ]
    g = helper.make_graph(nodes, "stn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, c, out, out])], inits)
    x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]), x


def detector(rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray]:
    a, c = 48, 3
    # Anchors on a 4x4 grid, three sizes each, in center form (cx, cy, w, h), overlapping.
    g = (np.arange(4, dtype=np.float32) + 0.5) / 4
    cx, cy = np.meshgrid(g, g)
    anchors = np.stack([np.repeat(cx.ravel(), 3), np.repeat(cy.ravel(), 3), np.tile([0.2, 0.35, 0.5], 16), np.tile([0.25, 0.35, 0.45], 16)], 1).astype(np.float32)
    i64 = lambda *v: np.array(v, np.int64)
    inits = [
        init("anchors", anchors[None]),
        init("var_xy", np.array([0.1], np.float32)),
        init("var_wh", np.array([0.2], np.float32)),
        init("half", np.array([0.5], np.float32)),
        init("s0", i64(0)), init("s2", i64(2)), init("s4", i64(4)), init("s7", i64(7)), init("ax2", i64(2)),
        init("max_out", i64(20)), init("iou", np.array([0.45], np.float32)), init("score_th", np.array([0.75], np.float32)),
        init("col1", np.array(1, np.int64)), init("col2", np.array(2, np.int64)),
        init("n_anchors", np.array(a, np.int64)), init("flat", i64(-1)), init("ax0", i64(0)),
    ]
    nodes = [
        helper.make_node("Slice", ["x", "s0", "s2", "ax2"], ["d_xy"]),
        helper.make_node("Slice", ["x", "s2", "s4", "ax2"], ["d_wh"]),
        helper.make_node("Slice", ["x", "s4", "s7", "ax2"], ["logits"]),
        helper.make_node("Slice", ["anchors", "s0", "s2", "ax2"], ["a_xy"]),
        helper.make_node("Slice", ["anchors", "s2", "s4", "ax2"], ["a_wh"]),
        helper.make_node("Mul", ["d_xy", "var_xy"], ["t0"]),
        helper.make_node("Mul", ["t0", "a_wh"], ["t1"]),
        helper.make_node("Add", ["t1", "a_xy"], ["ctr"]),
        helper.make_node("Mul", ["d_wh", "var_wh"], ["t2"]),
        helper.make_node("Exp", ["t2"], ["t3"]),
        helper.make_node("Mul", ["t3", "a_wh"], ["wh"]),
        helper.make_node("Mul", ["wh", "half"], ["hwh"]),
        helper.make_node("Sub", ["ctr", "hwh"], ["p_min"]),
        helper.make_node("Add", ["ctr", "hwh"], ["p_max"]),
        # (x, y) pairs → [y1, x1, y2, x2] as the ONNX box format wants.
        helper.make_node("Split", ["p_min"], ["x1", "y1"], axis=2),
        helper.make_node("Split", ["p_max"], ["x2", "y2"], axis=2),
        helper.make_node("Concat", ["y1", "x1", "y2", "x2"], ["boxes"], axis=2),
        helper.make_node("Sigmoid", ["logits"], ["probs"]),
        helper.make_node("Transpose", ["probs"], ["scores"], perm=[0, 2, 1]),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_th"], ["selected"], center_point_box=0),
        helper.make_node("Gather", ["selected", "col2"], ["box_idx"], axis=1),
        helper.make_node("Gather", ["selected", "col1"], ["cls"], axis=1),
        helper.make_node("Squeeze", ["boxes", "ax0"], ["boxes0"]),
        helper.make_node("Gather", ["boxes0", "box_idx"], ["sel_boxes"], axis=0),
        helper.make_node("Reshape", ["scores", "flat"], ["scores_flat"]),
        helper.make_node("Mul", ["cls", "n_anchors"], ["t4"]),
        helper.make_node("Add", ["t4", "box_idx"], ["score_idx"]),
        helper.make_node("Gather", ["scores_flat", "score_idx"], ["sel_scores"], axis=0),
        helper.make_node("Unsqueeze", ["sel_scores", "flat"], ["sel_scores1"]),
        helper.make_node("Cast", ["cls"], ["cls_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["cls_f", "flat"], ["cls1"]),
        helper.make_node("Concat", ["sel_boxes", "sel_scores1", "cls1"], ["y"], axis=1),
    ]
    g = helper.make_graph(nodes, "detector", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, a, 4 + c])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["K", 6])], inits)
    x = np.concatenate([rng.standard_normal((1, a, 4)) * 0.8, rng.standard_normal((1, a, c)) * 1.5], 2).astype(np.float32)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)]), x


def roi_head(rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray]:
    n, c, hw, r = 2, 8, 16, 5
    # Boxes in image pixels (x1, y1, x2, y2) on a 64x64 image: sizes 8..60, the last partly off the map.
    rois = np.array([[4, 6, 30, 20], [10, 10, 18, 50], [0, 0, 63, 63], [33.5, 12.25, 41, 19], [40, 44, 72, 70]], np.float32)
    inits = [
        init("Wc", (rng.standard_normal((c, 3, 3, 3)) * 0.3).astype(np.float32)),
        init("bc", (rng.standard_normal(c) * 0.1).astype(np.float32)),
        init("rois", rois),
        init("bidx", np.array([0, 1, 1, 0, 1], np.int64)),
        init("Wf", (rng.standard_normal((6, 2 * c * 9)) * 0.1).astype(np.float32)),
        init("bf", (rng.standard_normal(6) * 0.1).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "Wc", "bc"], ["f0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["f0"], ["feat"]),
        helper.make_node("RoiAlign", ["feat", "rois", "bidx"], ["ra"], mode="avg", output_height=3, output_width=3,
                         sampling_ratio=2, spatial_scale=0.25, coordinate_transformation_mode="half_pixel"),
        helper.make_node("RoiAlign", ["feat", "rois", "bidx"], ["rm"], mode="max", output_height=3, output_width=3,
                         sampling_ratio=0, spatial_scale=0.25, coordinate_transformation_mode="output_half_pixel"),
        helper.make_node("Concat", ["ra", "rm"], ["pooled"], axis=1),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("Gemm", ["flat", "Wf", "bf"], ["y"], transB=1),
    ]
    g = helper.make_graph(nodes, "roi_head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 3, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [r, 6])], inits)
    x = rng.standard_normal((n, 3, hw, hw)).astype(np.float32)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)]), x


def bitcast_mix(rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray]:
    f32, i32 = TensorProto.FLOAT, TensorProto.INT32
    inits = [init("three", np.array([3.0], np.float32)), init("no_sign", np.array([0x7FFFFFFF], np.int32)),
             init("shift", np.array([23], np.uint32)), init("scale", np.array([0.01], np.float32))]
    nodes = [
        helper.make_node("Mul", ["x", "three"], ["x3"]),
        helper.make_node("BitCast", ["x3"], ["bits"], to=i32),
        helper.make_node("BitwiseAnd", ["bits", "no_sign"], ["abs_bits"]),
        helper.make_node("BitCast", ["abs_bits"], ["abs3"], to=f32),
        helper.make_node("BitCast", ["abs_bits"], ["ubits"], to=TensorProto.UINT32),
        helper.make_node("BitShift", ["ubits", "shift"], ["expo"], direction="RIGHT"),
        helper.make_node("Cast", ["expo"], ["expo_f"], to=f32),
        helper.make_node("Mul", ["expo_f", "scale"], ["e1"]),
        helper.make_node("Add", ["abs3", "e1"], ["y"]),
    ]
    g = helper.make_graph(nodes, "bitcast_mix", [helper.make_tensor_value_info("x", f32, [4, 8])],
                          [helper.make_tensor_value_info("y", f32, [4, 8])], inits)
    x = (rng.standard_normal((4, 8)) * 10).astype(np.float32)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 26)]), x


def deform_block(rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray]:
    n, c, h, w, m, g, og = 2, 4, 9, 8, 6, 2, 2
    taps = 9
    inits = [
        init("Wo", (rng.standard_normal((og * taps * 2, c, 3, 3)) * 0.3).astype(np.float32)),
        init("bo", (rng.standard_normal(og * taps * 2) * 0.5).astype(np.float32)),
        init("Wm", (rng.standard_normal((og * taps, c, 3, 3)) * 0.3).astype(np.float32)),
        init("Wd", (rng.standard_normal((m, c // g, 3, 3)) * 0.3).astype(np.float32)),
        init("bd", (rng.standard_normal(m) * 0.1).astype(np.float32)),
    ]
    strided = dict(strides=[2, 2], pads=[1, 1, 1, 1])
    nodes = [
        helper.make_node("Conv", ["x", "Wo", "bo"], ["offset"], **strided),
        helper.make_node("Conv", ["x", "Wm"], ["m0"], **strided),
        helper.make_node("Sigmoid", ["m0"], ["mask"]),
        helper.make_node("DeformConv", ["x", "Wd", "offset", "bd", "mask"], ["d"], group=g, offset_group=og,
                         kernel_shape=[3, 3], strides=[2, 2], dilations=[2, 2], pads=[2, 2, 2, 2]),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    gr = helper.make_graph(nodes, "deform_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, m, 5, 4])], inits)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    return helper.make_model(gr, opset_imports=[helper.make_opsetid("", 19)]), x


def matmul_bcast(rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray]:
    a = (rng.standard_normal((2, 3, 36)) * 0.3).astype(np.float32)
    b = (rng.standard_normal((5, 1, 32, 7)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["a", "x"], ["ax"]), helper.make_node("Relu", ["ax"], ["r"]),
             helper.make_node("MatMul", ["r", "b"], ["y"])]
    g = helper.make_graph(nodes, "matmul_bcast", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2, 36, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 2, 3, 7])], [init("a", a), init("b", b)])
    x = rng.standard_normal((5, 2, 36, 32)).astype(np.float32)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)]), x


def bad_roi() -> onnx.ModelProto:
    """RoiAlign with sampling_ratio 0 (a grid sized by each box) over boxes given at run time: rlxc
    refuses it naming the node and the rois input."""
    f32 = TensorProto.FLOAT
    nodes = [helper.make_node("RoiAlign", ["x", "rois", "bidx"], ["y"], output_height=2, output_width=2, name="box_pool")]
    g = helper.make_graph(nodes, "bad_roi", [helper.make_tensor_value_info("x", f32, [1, 2, 8, 8]), helper.make_tensor_value_info("rois", f32, [3, 4])],
                          [helper.make_tensor_value_info("y", f32, [3, 2, 2, 2])], [init("bidx", np.zeros(3, np.int64))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(19)
    cf = control_flow_graph(rng)
    wl = while_loop_graph(np.random.default_rng(23))  # its own generator: the other models keep their inputs
    builds = [("lstm_gru", lstm_gru), ("unet_resize", unet_resize), ("stft_frontend", stft_frontend),
              ("control_flow", lambda r: (cf, control_flow_inputs(cf, r, True))),
              ("control_flow_else", lambda r: (cf, control_flow_inputs(cf, r, False))), ("stn", stn), ("detector", detector),
              ("while_loop", lambda r: (wl, while_loop_input(wl, r, True))),
              ("while_loop_else", lambda r: (wl, while_loop_input(wl, r, False))), ("while_scan", while_scan)]
    # Each with its own generator: the models above keep their inputs.
    builds += [(name, lambda r, f=f, seed=seed: f(np.random.default_rng(seed)))
               for name, f, seed in [("scan_rnn", scan_rnn, 31), ("scan_axes", scan_axes, 37), ("scan_dim", scan_dim, 31),
                                     ("topk_nan", topk_nan, 41), ("roi_head", roi_head, 43), ("bitcast_mix", bitcast_mix, 47),
                                     ("deform_block", deform_block, 53), ("matmul_bcast", matmul_bcast, 59)]]
    for name, build in builds:
        model, x = build(rng)
        model.ir_version = 11 if name == "bitcast_mix" else 8  # BitCast is opset 26 (IR 11)
        onnx.checker.check_model(model, full_check=True)
        path = os.path.join(args.out, f"{name}.onnx")
        onnx.save(model, path)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        (y,) = sess.run(["y"], {"x": x})
        np.save(os.path.join(args.out, f"{name}.x.npy"), x)
        np.save(os.path.join(args.out, f"{name}.ort.npy"), y.astype(np.float32))
        print(f"{name}: x {list(x.shape)} -> y {list(y.shape)}")
    bad = bad_loop(rng)
    bad.ir_version = 8
    onnx.checker.check_model(bad, full_check=True)
    onnx.save(bad, os.path.join(args.out, "bad_loop.onnx"))
    bad = bad_roi()
    bad.ir_version = 8
    onnx.checker.check_model(bad, full_check=True)
    onnx.save(bad, os.path.join(args.out, "bad_roi.onnx"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
