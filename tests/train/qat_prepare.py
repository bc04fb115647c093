"""The independent reference for `rlxc train --qat`'s preparation (compiler/rlxc/tests/qat.rs compares
them: the same nodes, scales within 1e-5, the same zero points): a float ONNX model with QuantizeLinear →
DequantizeLinear pairs (QDQ) inserted where rlxc's int8 targets read them, with scales and zero points
from the float model's ranges on the training set — written with onnx's helper, the ranges from ONNX
Runtime, none of rlxc's code.

Pairs: on the graph input, on every MatMul / Gemm weight and every Conv weight (input 1; an initializer;
int8, symmetric, per tensor: scale max|w| / 127; a Conv bias stays float), on every Relu output, on
every layer output that no Relu follows (after its bias Add; not the graph output) and on the graph
output (int8 activations, per tensor, asymmetric over [min(0, lo), max(0, hi)] of the observed values). The weights stay float
initializers (QuantizeLinear of an initializer).

Writes --out (the QDQ model) and --ports (JSON: the input's and output's scale and zero point).
"""
import argparse
import json

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def act_params(lo, hi):
    lo, hi = min(0.0, float(lo)), max(0.0, float(hi))
    scale = (hi - lo) / 255.0 if hi > lo else 1.0
    zp = int(np.clip(np.round(-128 - lo / scale), -128, 127))
    return np.float32(scale), zp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True, help="folder with train_x.npy")
    ap.add_argument("--out", required=True)
    ap.add_argument("--ports", required=True)
    a = ap.parse_args()
    m = onnx.load(a.model)
    g = m.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    (inp,), (outp,) = g.input, g.output
    relus = [n.output[0] for n in g.node if n.op_type == "Relu"]

    def weight_slots(n):
        if n.op_type in ("MatMul", "Gemm", "Conv"):
            return [k for k, i in enumerate(n.input[:2]) if (n.op_type != "Conv" or k == 1) and i in inits and inits[i].dtype == np.float32]
        return []

    # Layer outputs (after a bias Add of an initializer) read by something other than one Relu, and
    # no graph output: they end in a pair of their own.
    def readers(t):
        return [c for c in g.node if t in c.input]

    ends = []
    for n in g.node:
        if not weight_slots(n):
            continue
        v = n.output[0]
        r = readers(v)
        if len(r) == 1 and r[0].op_type == "Add" and any(i in inits for i in r[0].input):
            v = r[0].output[0]
        r = readers(v)
        if v != outp.name and not (len(r) == 1 and r[0].op_type == "Relu") and v not in ends:
            ends.append(v)
    relus += ends
    # Ranges of the observed activations: the float model on the whole training split.
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    for r in relus:
        probe.graph.output.append(helper.make_tensor_value_info(r, TensorProto.FLOAT, None))
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.load(f"{a.data}/train_x.npy").astype(np.float32)
    vals = sess.run([outp.name] + relus, {inp.name: x})
    ranges = {inp.name: (x.min(), x.max()), outp.name: (vals[0].min(), vals[0].max())}
    ranges.update({r: (v.min(), v.max()) for r, v in zip(relus, vals[1:])})

    nodes, extra = [], []

    def pair(src, dst, scale, zp, tag):
        s, z = f"{tag}.scale", f"{tag}.zero_point"
        extra.append(numpy_helper.from_array(np.array(scale, np.float32), s))
        extra.append(numpy_helper.from_array(np.array(zp, np.int8), z))
        nodes.append(helper.make_node("QuantizeLinear", [src, s, z], [f"{tag}.q"], name=f"{tag}/quantize"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{tag}.q", s, z], [dst], name=f"{tag}/dequantize"))

    rename = {inp.name: f"{inp.name}.dq"}
    pair(inp.name, rename[inp.name], *act_params(*ranges[inp.name]), inp.name)
    for n in g.node:
        ins = [rename.get(i, i) for i in n.input]
        for k in weight_slots(n):
            i = n.input[k]
            scale = np.float32(max(float(np.abs(inits[i]).max()), 1e-8) / 127.0)
            pair(i, f"{i}.dq", scale, 0, i)
            ins[k] = f"{i}.dq"
        outs = list(n.output)
        if outp.name in outs:
            outs[outs.index(outp.name)] = f"{outp.name}.float"
        nodes.append(helper.make_node(n.op_type, ins, outs, name=n.name, domain=n.domain, **{x.name: helper.get_attribute_value(x) for x in n.attribute}))
        for r in n.output:
            if r in relus:
                rename[r] = f"{r}.dq"
                pair(r, rename[r], *act_params(*ranges[r]), r)
    oscale, ozp = act_params(*ranges[outp.name])
    pair(f"{outp.name}.float", outp.name, oscale, ozp, outp.name)
    iscale, izp = act_params(*ranges[inp.name])
    graph = helper.make_graph(nodes, g.name + "_qat", list(g.input), list(g.output), list(g.initializer) + extra)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = m.ir_version
    onnx.checker.check_model(model)
    onnx.save(model, a.out)
    with open(a.ports, "w") as f:
        json.dump({"input_scale": float(iscale), "input_zero_point": izp, "output_scale": float(oscale), "output_zero_point": ozp}, f)


if __name__ == "__main__":
    main()
