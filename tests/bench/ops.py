#!/usr/bin/env python3
"""Op patterns beyond the model zoo, rlxc vs ONNX Runtime on the CPU: one small model per pattern that
shipped models use (1-D / 3-D / dilated / transposed / shared-weight convolutions, resizes, normalizations,
attention, recurrent cells, embeddings, layout ops), each timed as zoo.py times a model (bench.py's
`worker`: rlxc's host artifact and ORT in one process, interleaved blocks, p50), so a pattern where rlxc
falls off a cliff shows up before a user's model finds it.

    ops.py [--rlxc target/release/rlxc] [--only NAME,NAME] [--threads 1] [--budget-s 4] [--cpu-time] [--out docs/benchmarks.md]

rel diff = max |rlxc − ORT| / max |ORT| over the first output. Rows slower than ORT by more than 1.5× are
marked. Uses onnx.helper and numpy only; weights seeded.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (compile_rlxc, worker, write_section)

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Op patterns: rlxc vs ONNX Runtime (CPU)"
F = TensorProto.FLOAT


class M:
    """A model under construction: initializers from a seeded generator, nodes, graph inputs."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.inits, self.nodes, self.inputs, self.feeds = [], [], [], {}

    def w(self, name, shape, scale=None):
        fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        s = scale if scale is not None else np.sqrt(1.0 / max(fan, 1))
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * s).astype(np.float32), name))
        return name

    def const(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def x(self, name, shape, dtype=np.float32, high=None):
        if dtype == np.float32:
            v = self.rng.uniform(-1, 1, shape).astype(np.float32)
            self.inputs.append(helper.make_tensor_value_info(name, F, list(shape)))
        else:
            v = self.rng.integers(0, high, shape).astype(dtype)
            self.inputs.append(helper.make_tensor_value_info(name, TensorProto.INT64, list(shape)))
        self.feeds[name] = v
        return name

    def n(self, op, ins, out, **attrs):
        self.nodes.append(helper.make_node(op, ins, [out], name=f"{op.lower()}_{len(self.nodes)}", **attrs))
        return out

    def save(self, path: Path, out: str, opset: int = 17):
        g = helper.make_graph(self.nodes, path.stem, self.inputs, [], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        vi = {v.name: v for v in onnx.shape_inference.infer_shapes(m, strict_mode=True).graph.value_info}
        m.graph.output.append(vi[out])
        onnx.save(m, str(path))


def conv1d(m):
    x = m.x("x", [1, 256, 1000])
    return m.n("Relu", [m.n("Conv", [x, m.w("w", [256, 256, 3]), m.w("b", [256], 0.1)], "c", kernel_shape=[3], pads=[1, 1])], "y")


def depthwise1d(m):
    x = m.x("x", [1, 256, 1000])
    return m.n("Conv", [x, m.w("w", [256, 1, 5]), m.w("b", [256], 0.1)], "y", kernel_shape=[5], pads=[2, 2], group=256)


def conv3d(m):
    x = m.x("x", [1, 32, 8, 28, 28])
    return m.n("Relu", [m.n("Conv", [x, m.w("w", [32, 32, 3, 3, 3])], "c", kernel_shape=[3, 3, 3], pads=[1] * 6)], "y")


def conv_dilated(m):
    x = m.x("x", [1, 256, 33, 33])
    return m.n("Conv", [x, m.w("w", [256, 256, 3, 3])], "y", kernel_shape=[3, 3], pads=[2, 2, 2, 2], dilations=[2, 2])


def conv_transpose(m):
    x = m.x("x", [1, 64, 28, 28])
    return m.n("ConvTranspose", [x, m.w("w", [64, 32, 4, 4]), m.w("b", [32], 0.1)], "y", kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1])


def shared_weights(m):
    # A Siamese pair: one weight read by two convolutions.
    a, b = m.x("a", [1, 128, 28, 28]), m.x("b", [1, 128, 28, 28])
    w = m.w("w", [128, 128, 3, 3])
    ca = m.n("Conv", [a, w], "ca", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    cb = m.n("Conv", [b, w], "cb", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    return m.n("Sub", [ca, cb], "y")


def pad_reflect_conv(m):
    x = m.x("x", [1, 64, 64, 64])
    p = m.n("Pad", [x, m.const("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))], "p", mode="reflect")
    return m.n("Conv", [p, m.w("w", [64, 64, 3, 3])], "y", kernel_shape=[3, 3])


def resize_nearest(m):
    x = m.x("x", [1, 128, 40, 40])
    return m.n("Resize", [x, "", m.const("scales", np.array([1, 1, 2, 2], np.float32))], "y", mode="nearest")


def resize_linear(m):
    x = m.x("x", [1, 64, 56, 56])
    return m.n("Resize", [x, "", m.const("scales", np.array([1, 1, 2, 2], np.float32))], "y", mode="linear")


def maxpool(m):
    x = m.x("x", [1, 64, 112, 112])
    return m.n("MaxPool", [x], "y", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])


def instance_norm(m):
    x = m.x("x", [1, 64, 128, 128])
    return m.n("InstanceNormalization", [x, m.w("s", [64], 1.0), m.w("b", [64], 0.1)], "y")


def group_norm(m):
    # GroupNormalization as exported before opset 18: reshape to the groups, InstanceNormalization, back.
    x = m.x("x", [1, 128, 32, 32])
    r = m.n("Reshape", [x, m.const("g", np.array([1, 32, -1], np.int64))], "r")
    i = m.n("InstanceNormalization", [r, m.const("one", np.ones(32, np.float32)), m.const("zero", np.zeros(32, np.float32))], "i")
    b = m.n("Reshape", [i, m.const("back", np.array([1, 128, 32, 32], np.int64))], "b")
    s = m.n("Mul", [b, m.w("scale", [128, 1, 1], 1.0)], "s")
    return m.n("Add", [s, m.w("shift", [128, 1, 1], 0.1)], "y")


def layer_norm(m):
    x = m.x("x", [1, 197, 768])
    return m.n("LayerNormalization", [x, m.w("s", [768], 1.0), m.w("b", [768], 0.1)], "y", axis=-1)


def vit_mlp(m):
    x = m.x("x", [1, 197, 768])
    h = m.n("Add", [m.n("MatMul", [x, m.w("w1", [768, 3072])], "h0"), m.w("b1", [3072], 0.1)], "h1")
    g = m.n("Mul", [h, m.n("Add", [m.n("Erf", [m.n("Div", [h, m.const("r2", np.array(1.4142135, np.float32))], "d")], "e"),
                                    m.const("one", np.array(1.0, np.float32))], "e1")], "g0")
    g = m.n("Mul", [g, m.const("half", np.array(0.5, np.float32))], "g")
    return m.n("Add", [m.n("MatMul", [g, m.w("w2", [3072, 768])], "o0"), m.w("b2", [768], 0.1)], "y")


def attention(m):
    q, k, v = m.x("q", [1, 12, 197, 64]), m.x("k", [1, 12, 64, 197]), m.x("v", [1, 12, 197, 64])
    s = m.n("Mul", [m.n("MatMul", [q, k], "s0"), m.const("sc", np.array(0.125, np.float32))], "s")
    return m.n("MatMul", [m.n("Softmax", [s], "p", axis=-1), v], "y")


def lstm(m):
    x = m.x("x", [50, 1, 128])
    h = 256
    return m.n("LSTM", [x, m.w("W", [1, 4 * h, 128]), m.w("R", [1, 4 * h, h]), m.w("B", [1, 8 * h], 0.1)], "y", hidden_size=h)


def gru(m):
    x = m.x("x", [50, 1, 128])
    h = 256
    return m.n("GRU", [x, m.w("W", [1, 3 * h, 128]), m.w("R", [1, 3 * h, h]), m.w("B", [1, 6 * h], 0.1)], "y", hidden_size=h,
               linear_before_reset=1)


def embedding_bag(m):
    ids = m.x("ids", [8, 128], np.int64, high=30000)
    e = m.n("Gather", [m.w("table", [30000, 128], 0.5), ids], "e", axis=0)
    return m.n("ReduceMean", [e], "y", axes=[1], keepdims=0)


def transpose_nhwc(m):
    x = m.x("x", [1, 64, 112, 112])
    return m.n("Transpose", [x], "y", perm=[0, 2, 3, 1])


def concat_split(m):
    # YOLO-head style: split channels, one part through a sigmoid, concatenated back.
    x = m.x("x", [1, 255, 80, 80])
    r = m.n("Reshape", [x, m.const("s", np.array([1, 3, 85, 80, 80], np.int64))], "r")
    m.nodes.append(helper.make_node("Split", ["r", m.const("parts", np.array([4, 81], np.int64))], ["xy", "rest"], axis=2, name="split"))
    return m.n("Concat", [m.n("Sigmoid", ["xy"], "sx"), "rest"], "y", axis=2)


def broadcast_chain(m):
    x = m.x("x", [1, 64, 112, 112])
    a = m.n("Mul", [x, m.w("s", [64, 1, 1], 1.0)], "a")
    return m.n("Sigmoid", [m.n("Add", [a, m.w("t", [1, 64, 1, 1], 0.1)], "b")], "y")


def big_gemm(m):
    x = m.x("x", [64, 1024])
    return m.n("Gemm", [x, m.w("w", [1024, 1024]), m.w("b", [1024], 0.1)], "y", transB=1)


PATTERNS = {
    "conv1d": (conv1d, "Conv 1-D 256 → 256, k3, 1000 steps + ReLU"),
    "depthwise1d": (depthwise1d, "depthwise Conv 1-D, 256 channels, k5, 1000 steps"),
    "conv3d": (conv3d, "Conv 3-D 32 → 32, 3×3×3, 8×28×28 + ReLU"),
    "conv_dilated": (conv_dilated, "Conv 3×3 dilation 2, 256 → 256 at 33²"),
    "conv_transpose": (conv_transpose, "ConvTranspose 4×4 stride 2, 64 → 32, 28² → 56²"),
    "shared_weights": (shared_weights, "two Conv 3×3 128 → 128 at 28² sharing one weight"),
    "pad_reflect_conv": (pad_reflect_conv, "reflect Pad + Conv 3×3 64 → 64 at 64²"),
    "resize_nearest": (resize_nearest, "Resize nearest 2×, 128 × 40² "),
    "resize_linear": (resize_linear, "Resize linear 2×, 64 × 56²"),
    "maxpool": (maxpool, "MaxPool 3×3 stride 2, 64 × 112²"),
    "instance_norm": (instance_norm, "InstanceNormalization, 64 × 128²"),
    "group_norm": (group_norm, "GroupNorm (Reshape, InstanceNormalization, Reshape, affine), 128 × 32², 32 groups"),
    "layer_norm": (layer_norm, "LayerNormalization, 197 × 768"),
    "vit_mlp": (vit_mlp, "ViT MLP: MatMul 768 → 3072, erf GELU, MatMul 3072 → 768, 197 tokens"),
    "attention": (attention, "attention core: 12 heads × 197 × 64, QKᵀ, scale, Softmax, ·V"),
    "lstm": (lstm, "LSTM 128 → 256, 50 steps"),
    "gru": (gru, "GRU 128 → 256, 50 steps"),
    "embedding_bag": (embedding_bag, "Gather 8 × 128 ids from 30000 × 128, ReduceMean"),
    "transpose_nhwc": (transpose_nhwc, "Transpose NCHW → NHWC, 64 × 112²"),
    "concat_split": (concat_split, "YOLO head: Reshape, Split, Sigmoid, Concat, 255 × 80²"),
    "broadcast_chain": (broadcast_chain, "per-channel Mul, Add, Sigmoid, 64 × 112²"),
    "big_gemm": (big_gemm, "Gemm 64 × 1024 × 1024 + bias"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rlxc", default=str(ROOT / "target/release/rlxc"))
    ap.add_argument("--only", default=",".join(PATTERNS))
    ap.add_argument("--threads", default="1")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=4.0, help="time limit per row (after 2 blocks)")
    ap.add_argument("--cpu-time", action="store_true", help="time each call as the process's CPU time (a loaded machine; 1 thread)")
    ap.add_argument("--out", default=None, help="write the markdown table into this file's op-pattern section")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rlxc-ops-"))
    rows = []
    try:
        for i, name in enumerate(a.only.split(",")):
            build, what = PATTERNS[name]
            d = work / name
            d.mkdir()
            m = M(i)
            out = build(m)
            model = d / "model.onnx"
            m.save(model, out)
            inputs = {}
            for k, v in m.feeds.items():
                np.save(d / f"{k}.npy", v)
                inputs[k] = str(d / f"{k}.npy")
            try:
                so, ctime, _ = bench.compile_rlxc(a.rlxc, model, {}, d / "rlxc")
            except subprocess.CalledProcessError as e:
                note = "rlxc compile failed: " + ((e.stderr or "").strip().splitlines() or ["?"])[-1][:160]
                print(f"{name:18s} {note}", flush=True)
                rows.append({"name": name, "what": what, "note": note})
                continue
            for t in [int(x) for x in a.threads.split(",")]:
                cfg = {"threads": t, "so": str(so), "manifest": str(d / "rlxc" / "m.json"), "model": str(model), "inputs": inputs,
                       "reps": a.reps, "budget_s": a.budget_s, "flops": 0.0, "vmfb": None, "check": None, "cpu_time": a.cpu_time}
                res, note = bench.run_worker(cfg)
                if res is None:
                    print(f"{name:18s} threads {t}: {note}", flush=True)
                    rows.append({"name": name, "what": what, "threads": t, "note": note})
                    continue
                res.update(name=name, what=what, threads=t, compile_s=ctime)
                rows.append(res)
                flag = "  <-- cliff" if res["ratio"] > 1.5 else ""
                print(f"{name:18s} threads {t}: rlxc {res['rlxc_ms']:9.3f} ms  ORT {res['ort_ms']:9.3f} ms  ratio {res['ratio']:6.2f}  "
                      f"rel diff {res['reldiff']:.1e}{flag}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    geo, ntimed = bench.geomean_ratio(rows)
    print(f"geometric mean rlxc/ORT over {ntimed} rows: {geo:.2f}")
    if a.out:
        lines = [SECTION, "",
                 "Measured by `make bench-ops` (`tests/bench/ops.py`, also part of `make bench`): one small model per op pattern",
                 "that shipped models use beyond the zoo's CNNs, rlxc's host artifact and ONNX Runtime in one process, interleaved",
                 "blocks, p50 (zoo.py's method). rel diff = max |rlxc − ORT| / max |ORT|. Rows above 1.5× are marked **cliff**.", "",
                 "| pattern | what | threads | rlxc p50 ms | ORT p50 ms | rlxc/ORT | rel diff |", "|---|---|---:|---:|---:|---:|---:|"]
        for r in rows:
            if "ratio" in r:
                ratio = f"**{r['ratio']:.2f} cliff**" if r["ratio"] > 1.5 else f"{r['ratio']:.2f}"
                lines.append(f"| {r['name']} | {r['what']} | {r['threads']} | {r['rlxc_ms']:.3f} | {r['ort_ms']:.3f} | {ratio} | {r['reldiff']:.1e} |")
            else:
                lines.append(f"| {r['name']} | {r['what']} | {r.get('threads', '')} | | | {r['note']} | |")
        lines += ["", f"Geometric mean of rlxc/ORT over the {ntimed} timed rows: **{geo:.2f}**.", ""]
        bench.write_section(Path(a.out), SECTION, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
