#!/usr/bin/env python3
"""The model of the build-script example: an MLP 4 -> 8 -> 3 (Gemm, Relu, Gemm) with fixed weights.

    make_model.py OUT.onnx                 write the model (input "x": f32 [batch, 4], output "y": f32 [batch, 3])
    make_model.py --unsupported OUT.onnx   write a model rlxc rejects (an op of an unknown domain)
    make_model.py --expect                 print y for the fixed input X (the same X as src/main.rs), computed
                                           with numpy (f64) from the same weights, one value per line

Needs the venv (onnx, numpy).
"""
import argparse
import os

import numpy as np

# The fixed input of src/main.rs: BATCH rows of 4 features, x[k] = ((7 k) mod 23) / 8 - 1.375 over the
# flat index k (exact in f32). BATCH is large enough that the first layer is a parallel kernel, so the
# example also links and runs rlx_rt_parallel_for.
BATCH = 8192
_K = np.arange(BATCH * 4)
X = (((_K * 7) % 23) / 8.0 - 1.375).astype(np.float32).reshape(BATCH, 4)


def weights():
    """Fixed weights: a seeded generator, so the model and the expectation agree."""
    rng = np.random.default_rng(20240611)
    w1 = rng.standard_normal((4, 8)).astype(np.float32)
    b1 = rng.standard_normal(8).astype(np.float32)
    w2 = rng.standard_normal((8, 3)).astype(np.float32)
    b2 = rng.standard_normal(3).astype(np.float32)
    return w1, b1, w2, b2


def expect(x):
    w1, b1, w2, b2 = (a.astype(np.float64) for a in weights())
    h = np.maximum(x.astype(np.float64) @ w1 + b1, 0.0)
    return h @ w2 + b2


def build(unsupported):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w1, b1, w2, b2 = weights()
    inits = [numpy_helper.from_array(a, n) for a, n in [(w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2")]]
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["hr"], name="relu"),
        helper.make_node("Gemm", ["hr", "w2", "b2"], ["y"], name="fc2"),
    ]
    opsets = [helper.make_opsetid("", 17)]
    if unsupported:
        nodes[1] = helper.make_node("Frobnicate", ["h"], ["hr"], name="frob", domain="com.example")
        opsets.append(helper.make_opsetid("com.example", 1))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=opsets, producer_name="make_model.py")
    model.ir_version = 8
    if not unsupported:
        onnx.checker.check_model(model)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", help="where to write the .onnx")
    ap.add_argument("--unsupported", action="store_true", help="write a model with an op rlxc rejects")
    ap.add_argument("--expect", action="store_true", help="print the expected outputs for the fixed input")
    a = ap.parse_args()
    if a.expect:
        for v in expect(X).reshape(-1):
            print(repr(float(v)))
        return
    if not a.out:
        ap.error("give OUT.onnx (or --expect)")
    data = build(a.unsupported).SerializeToString()
    tmp = f"{a.out}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, a.out)  # atomic: a concurrent build never reads half a model


if __name__ == "__main__":
    main()
