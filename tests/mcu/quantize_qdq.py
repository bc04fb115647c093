"""Quantizes the Cortex-M test models with ONNX Runtime's static quantizer, QDQ format, and runs the
QDQ models in ONNX Runtime on the host (the reference the rlxc firmware is compared with).

    quantize_qdq.py --data build/mcu-test/data --out DIR [--models mlp cnn]

For each model: `onnxruntime.quantization.quantize_static(..., quant_format=QuantFormat.QDQ,
per_channel=True, activation_type=QInt8, weight_type=QInt8)` calibrated (MinMax) on the same 100
training images as rlxc's `--calibrate` path (calib_MODEL.npy), written to DIR/MODEL_qdq.onnx. Then
ONNX Runtime (CPU provider, default graph optimizations: it fuses the Q/DQ pairs into its int8 kernels,
which requantize in float, rounding half to even) runs it on the 1,000 test images. The QDQ model's graph output is float (DequantizeLinear of the last int8 tensor):
it is mapped back to that int8 tensor with the output's own scale and zero point,
`q = round((y / scale)) + zero_point` (exact: y is (q - z)·s in f32), and written as DIR/MODEL_ort_q.npy
([1000, classes] int8), with DIR/MODEL_qdq.json: the input's and the output's scale and zero point,
read from the model's first QuantizeLinear and last DequantizeLinear.

Also writes DIR/mlp_bad.onnx, a malformed copy of the MLP's QDQ model for the compiler's error report:
the per-channel weight scale w1_scale[3] set to 0 and the activation scale h1_scale set to -0.5.
"""
import argparse
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_static)


class Reader(CalibrationDataReader):
    def __init__(self, name, samples):
        self.it = iter([{name: s} for s in samples])

    def get_next(self):
        return next(self.it, None)


def port_qparams(model):
    """Scale and zero point of the QuantizeLinear of the graph input and of the DequantizeLinear
    that produces the graph output."""
    g = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    inp, out = g.input[0].name, g.output[0].name
    q = [n for n in g.node if n.op_type == "QuantizeLinear" and n.input[0] == inp]
    d = [n for n in g.node if n.op_type == "DequantizeLinear" and n.output[0] == out]
    if len(q) != 1 or len(d) != 1:
        raise SystemExit(f"input {inp} / output {out} are not quantized by one Q / DQ node")
    return [(float(inits[n.input[1]]), int(inits[n.input[2]])) for n in (q[0], d[0])]


def write_bad(src, dst):
    model = onnx.load(src)
    for t in model.graph.initializer:
        a = numpy_helper.to_array(t).copy()
        if t.name == "w1_scale":
            a[3] = 0.0
        elif t.name == "h1_scale":
            a = np.array(-0.5, dtype=a.dtype)
        else:
            continue
        t.CopyFrom(numpy_helper.from_array(a, t.name))
    onnx.save(model, dst)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    x = np.load(os.path.join(a.data, "test_x.npy")).astype(np.float32)
    for m in a.models:
        src = os.path.join(a.data, f"{m}.onnx")
        dst = os.path.join(a.out, f"{m}_qdq.onnx")
        calib = np.load(os.path.join(a.data, f"calib_{m}.npy")).astype(np.float32)
        name = onnx.load(src).graph.input[0].name
        quantize_static(src, dst, Reader(name, calib), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
        model = onnx.load(dst)
        (in_scale, in_zp), (scale, zp) = port_qparams(model)
        sess = ort.InferenceSession(dst, providers=["CPUExecutionProvider"])
        shape = calib.shape[1:]
        ys = [sess.run(None, {name: x[i].reshape(shape)})[0].reshape(-1) for i in range(len(x))]
        y = np.stack(ys).astype(np.float32)
        q = np.clip(np.round(y / np.float32(scale)) + zp, -128, 127).astype(np.int8)
        np.save(os.path.join(a.out, f"{m}_ort_q.npy"), q)
        with open(os.path.join(a.out, f"{m}_qdq.json"), "w") as f:
            json.dump({"input_scale": in_scale, "input_zero_point": in_zp,
                       "output_scale": scale, "output_zero_point": zp}, f)
        print(f"{m}: {dst}")
        if m == "mlp":
            write_bad(dst, os.path.join(a.out, "mlp_bad.onnx"))


if __name__ == "__main__":
    main()
