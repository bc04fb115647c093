#!/usr/bin/env python3
"""Small CNNs for the window kernels (depthwise / grouped convolution, pools) and BatchNormalization
folding, with their ONNX Runtime outputs as the independent reference.

    make_window_cnns.py --out DIR

Writes into DIR, for each model NAME below: NAME.onnx, NAME_x.npy (a deterministic input) and
NAME_ort_<output>.npy (ONNX Runtime's outputs on it); and calib.npy (64 samples for `bn`).
- `window`: x f32[1,8,11,37] → depthwise 3×3 pad 1 + BatchNormalization + Clip 0..6 (out `dw`) →
  depthwise 3×3 stride 2 pad 1 with bias + Relu (`dw2`) → grouped conv (2 groups of 4 channels) 3×3
  dilation 2 pad 2 (`grp`) → MaxPool 3×3 stride 2 pad 1 (`maxp`); and from `dw`: AveragePool 3×3 pad 1
  without the padding counted (`avgp`), AveragePool 3×3 stride 2 pad 1 counting it, ceil mode
  (`avgc`), depthwise 5×5 pad 2 with a per-channel Mul and Add after it (`dw5`); and from `dw2` a
  grouped 1×1 convolution 8→10 (2 groups, 5 output channels each) with bias and Relu (`grp5`), an
  AveragePool (stride 2) and a MaxPool whose one window covers all of it (`gavg`, `gmax`: imported as
  the global pools); from x depthwise 3×3 with bias + SiLU as x · Sigmoid(x), stride 1 and 2 (`dwsw`,
  `dwsw2`: rows stored without the epilogue, then the epilogue over each row in vectors).
- `narrow`: the same with x f32[2,8,7,7] (rows narrower than a vector, batch 2).
- `plane`: the same with x f32[2,8,13,13] (the plane form of `dw` and `dw5`: odd sizes, batch 2).
- `plane2`: x f32[1,20,9,9] → depthwise 3×3 padded only at the bottom and right (pads 0,0,2,2) plus x
  itself (`dwa`: an epilogue operand the size of the plane), and a grouped conv 20→40 (5 groups of 4
  input channels) 3×3 pad 1 with bias + Relu (`grp8`: blocks of 8 output channels): the plane form with
  asymmetric padding and register blocking.
- `silu`: x f32[2,32,7,7] (channels in whole vectors) → depthwise 5×5 pad 2 with bias, then SiLU written
  as x · Sigmoid(x) (`dws`: the channels-as-lanes form — rows narrower than two vectors, mostly border
  columns —, the convolution's value read twice by its epilogue), depthwise 5×5 stride 2 pad 2 + SiLU
  (`dws2`), depthwise 3×3 dilation 2 pad 2 plus x (`dwd`: an epilogue operand at the output's own
  index), depthwise 3×3 padded only at the bottom and right (`dwp`: rows of 7 columns, one block of
  accumulators, the channels-as-lanes form too), a 1×1
  convolution 32→48 with bias + SiLU (`pws`: the GEMM form's epilogue) and global average pool → Gemm
  32→24 + SiLU (`mms`: a matmul's).
- `bn`: x f32[1,1,8,8] → Conv 1→4 3×3 pad 1 + BatchNormalization + Relu → depthwise 3×3 pad 1 +
  BatchNormalization + Relu (`y`), the Cortex-M int8 model.
Weights and inputs from numpy's RandomState(0).
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


class G:
    def __init__(self, seed: int):
        self.rs = np.random.RandomState(seed)
        self.nodes, self.inits = [], []

    def const(self, name, a):
        self.inits.append(numpy_helper.from_array(np.asarray(a, dtype=np.float32), name))
        return name

    def node(self, op, ins, out, **kw):
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **kw))
        return out

    def conv(self, x, out, cin, cout, k, groups, stride=1, pad=0, dil=1, bias=False):
        w = self.const(out + "_w", self.rs.randn(cout, cin // groups, k, k) * np.sqrt(2.0 / (cin // groups * k * k)))
        ins = [x, w] + ([self.const(out + "_b", self.rs.randn(cout) * 0.1)] if bias else [])
        return self.node("Conv", ins, out, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                         dilations=[dil, dil], group=groups)

    def bn(self, x, out, c):
        p = [self.const(f"{out}_{n}", v) for n, v in [("s", self.rs.uniform(0.5, 1.5, c)), ("b", self.rs.randn(c) * 0.1),
                                                         ("m", self.rs.randn(c) * 0.1), ("v", self.rs.uniform(0.5, 1.5, c))]]
        return self.node("BatchNormalization", [x, *p], out, epsilon=1e-5)

    def model(self, name, x_shape, outs):
        g = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        # The outputs' shapes, from ONNX's shape inference (on a copy without graph outputs, so that
        # every node's result is listed among the inferred values).
        probe = onnx.ModelProto()
        probe.CopyFrom(m)
        del probe.graph.output[:]
        inferred = {v.name: v.type for v in onnx.shape_inference.infer_shapes(probe).graph.value_info}
        for o in m.graph.output:
            o.type.CopyFrom(inferred[o.name])
        onnx.checker.check_model(m)
        return m


def window(x_shape):
    g = G(0)
    g.const("lo", 0.0)
    g.const("hi", 6.0)
    dw = g.node("Clip", [g.bn(g.conv("x", "dw_c", 8, 8, 3, 8, pad=1), "dw_bn", 8), "lo", "hi"], "dw")
    dw2 = g.node("Relu", [g.conv(dw, "dw2_c", 8, 8, 3, 8, stride=2, pad=1, bias=True)], "dw2")
    grp = g.conv(dw2, "grp", 8, 8, 3, 2, pad=2, dil=2)
    # 2 groups of 4 input → 5 output channels: a block of 4 + one repeating its last channel.
    g.node("Relu", [g.conv(dw2, "grp5_c", 8, 10, 1, 2, bias=True)], "grp5")
    g.node("MaxPool", [grp], "maxp", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    g.node("AveragePool", [dw], "avgp", kernel_shape=[3, 3], pads=[1] * 4, count_include_pad=0)
    g.node("AveragePool", [dw], "avgc", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4, count_include_pad=1, ceil_mode=1)
    k = g.const("k", g.rs.uniform(0.5, 2.0, (8, 1, 1)))
    t = g.const("t", g.rs.randn(1, 8, 1, 1))
    g.node("Add", [g.node("Mul", [k, g.conv(dw, "dw5_c", 8, 8, 5, 8, pad=2)], "dw5_k"), t], "dw5")
    # One window over all of dw2 (imported as the global pool): its spatial size from x's.
    whole = [(n - 1) // 2 + 1 for n in x_shape[2:]]
    g.node("AveragePool", [dw2], "gavg", kernel_shape=whole, strides=[2, 2])
    g.node("MaxPool", [dw2], "gmax", kernel_shape=whole)
    # SiLU (x · Sigmoid(x)) after a depthwise 3×3, stride 1 and 2: rows stored bare, then the epilogue
    # over each row in vectors.
    for name, stride in [("dwsw", 1), ("dwsw2", 2)]:
        c = g.conv("x", name + "_c", 8, 8, 3, 8, stride=stride, pad=1, bias=True)
        g.node("Mul", [c, g.node("Sigmoid", [c], name + "_sig")], name)
    return g.model("window", x_shape, ["dw", "dw2", "grp", "maxp", "avgp", "avgc", "dw5", "grp5", "gavg", "gmax", "dwsw", "dwsw2"])


def plane2():
    g = G(2)
    g.node("Add", [g.node("Conv", ["x", g.const("dwa_w", g.rs.randn(20, 1, 3, 3) * 0.5)], "dwa_c", kernel_shape=[3, 3],
                          pads=[0, 0, 2, 2], group=20), "x"], "dwa")
    g.node("Relu", [g.conv("x", "grp8_c", 20, 40, 3, 5, pad=1, bias=True)], "grp8")
    return g.model("plane2", [1, 20, 9, 9], ["dwa", "grp8"])


def silu_model():
    g = G(3)

    def silu(x, out):
        return g.node("Mul", [x, g.node("Sigmoid", [x], out + "_sig")], out)

    silu(g.conv("x", "dws_c", 32, 32, 5, 32, pad=2, bias=True), "dws")
    silu(g.conv("x", "dws2_c", 32, 32, 5, 32, stride=2, pad=2), "dws2")
    g.node("Add", [g.conv("x", "dwd_c", 32, 32, 3, 32, pad=2, dil=2), "x"], "dwd")
    g.node("Conv", ["x", g.const("dwp_w", g.rs.randn(32, 1, 3, 3) * 0.5)], "dwp", kernel_shape=[3, 3], pads=[0, 0, 2, 2], group=32)
    silu(g.conv("x", "pws_c", 32, 48, 1, 1, bias=True), "pws")
    flat = g.node("Flatten", [g.node("GlobalAveragePool", ["x"], "gap")], "flat", axis=1)
    mm = g.node("Gemm", [flat, g.const("mm_w", g.rs.randn(24, 32) * 0.3), g.const("mm_b", g.rs.randn(24) * 0.1)], "mm", transB=1)
    silu(mm, "mms")
    return g.model("silu", [2, 32, 7, 7], ["dws", "dws2", "dwd", "dwp", "pws", "mms"])


def padded_model():
    """Depthwise convolutions in the padded phase-plane form (`plan/dw_padded.rs`): rows of 29 columns
    (not whole vectors), 5 × 5 at stride 1 and 2, dilation, asymmetric padding, 3 × 3 under SiLU at stride
    1 and 2, a residual operand, a 7-column output (4-lane vectors), with and without bias."""
    g = G(4)

    def silu(x, out):
        return g.node("Mul", [x, g.node("Sigmoid", [x], out + "_sig")], out)

    def dw(out, k, stride=1, pads=(0, 0, 0, 0), dil=1, bias=False, x="x", c=16):
        ins = [x, g.const(out + "_w", g.rs.randn(c, 1, k, k) * 0.3)] + ([g.const(out + "_b", g.rs.randn(c) * 0.1)] if bias else [])
        return g.node("Conv", ins, out, kernel_shape=[k, k], strides=[stride, stride], pads=list(pads), dilations=[dil, dil], group=c)

    silu(dw("pa_c", 5, pads=(2, 2, 2, 2), bias=True), "pa")
    g.node("Relu", [dw("pb_c", 5, stride=2, pads=(2, 2, 2, 2))], "pb")
    silu(dw("pc_c", 3, pads=(1, 1, 1, 1), bias=True), "pc")
    silu(dw("pd_c", 3, stride=2, pads=(0, 0, 1, 1)), "pd")
    g.node("Add", [dw("pe_c", 5, pads=(4, 4, 4, 4), dil=2), "x"], "pe")
    dw("pf", 5, stride=2, pads=(3, 1, 2, 4), dil=2, bias=True)
    g.node("Relu", [dw("pg_c", 5, stride=2, dil=4)], "pg")
    # A squeeze-and-excitation gate: an elementwise kernel with a per-channel operand (`plan/flat.rs`).
    g.node("Mul", ["x", g.node("Sigmoid", [g.node("GlobalAveragePool", ["x"], "ph_pool")], "ph_gate")], "ph")
    # Twelve channels, not whole vectors (so not the channels-as-lanes form, which now takes `pd` and
    # `pg` on 8 and 16 lanes): the stride-2 3 × 3 under SiLU and the 7-column output here.
    x12 = g.conv("x", "p12", 16, 12, 1, 1)
    silu(dw("pi_c", 3, stride=2, pads=(0, 0, 1, 1), x=x12, c=12), "pi")
    g.node("Relu", [dw("pj_c", 5, stride=2, dil=4, x=x12, c=12)], "pj")
    return g.model("padded", [2, 16, 29, 29], ["pa", "pb", "pc", "pd", "pe", "pf", "pg", "ph", "pi", "pj"])


def bn_model():
    g = G(1)
    a = g.node("Relu", [g.bn(g.conv("x", "c1", 1, 4, 3, 1, pad=1), "bn1", 4)], "r1")
    g.node("Relu", [g.bn(g.conv(a, "dw", 4, 4, 3, 4, pad=1), "bn2", 4)], "y")
    return g.model("bn", [1, 1, 8, 8], ["y"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    out = ap.parse_args().out
    os.makedirs(out, exist_ok=True)
    rs = np.random.RandomState(0)
    for name, m, shape in [("window", window([1, 8, 11, 37]), [1, 8, 11, 37]), ("narrow", window([2, 8, 7, 7]), [2, 8, 7, 7]),
                           ("plane", window([2, 8, 13, 13]), [2, 8, 13, 13]), ("plane2", plane2(), [1, 20, 9, 9]),
                           ("bn", bn_model(), [1, 1, 8, 8])]:
        save(out, name, m, rs.randn(*shape).astype(np.float32))
    np.save(os.path.join(out, "calib.npy"), rs.randn(64, 1, 1, 8, 8).astype(np.float32))
    # (After the others: their inputs and calib.npy keep the random stream they were written with.)
    save(out, "silu", silu_model(), np.random.RandomState(3).randn(2, 32, 7, 7).astype(np.float32))
    save(out, "padded", padded_model(), np.random.RandomState(4).randn(2, 16, 29, 29).astype(np.float32))


def save(out, name, m, x):
    """NAME.onnx, its input NAME_x.npy and ONNX Runtime's outputs on it, NAME_ort_OUTPUT.npy."""
    onnx.save(m, os.path.join(out, f"{name}.onnx"))
    np.save(os.path.join(out, f"{name}_x.npy"), x)
    s = ort.InferenceSession(os.path.join(out, f"{name}.onnx"), providers=["CPUExecutionProvider"])
    for o, v in zip([o.name for o in s.get_outputs()], s.run(None, {"x": x})):
        np.save(os.path.join(out, f"{name}_ort_{o}.npy"), v)


if __name__ == "__main__":
    main()
