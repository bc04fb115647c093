#!/usr/bin/env python3
"""On the GPU machine: rlxc's CUDA matmul kernels at MiniLM's shapes (tests/gpu/make_gemm.py: x[batch,
128, K] @ W[N, K]ᵀ + bias, GELU after FFN up; batch 8 and 32) against PyTorch at the same precision, in
one run, each variant checked against an f64 reference.

    bench_gemm.py --carry DIR --out DIR [--runs 50]

DIR is tests/gpu/prepare_gemm.sh's folder: `cuda_run`, `art/NAME_P_V/` (precision P, variant V) and
one weights blob per shape in `w/` (a bf16 variant's: that blob followed by the bf16 weight copies
its manifest lists, rebuilt by half_weights.py). For each shape the inputs, weights and bias are regenerated from
make_gemm.py's seeds; the reference is PyTorch in f64 on the GPU. Per artifact: the kernel's device
time (`cuda_run` with RLX_CUDA_KERNEL_TIMES=1: the kernel launched alone between two events, median of
20; the launch is in it) and the output's max abs and relative RMS error against the reference. Per
shape and precision, PyTorch's `F.linear` (+ erf GELU) timed the same way (each call alone between two
events, median of --runs; the host's launch cost is in it), back to back (the mean of --runs calls
between two events) and as a CUDA graph of 20 calls (mean per call: device time only): f32 with TF32
off, tf32 with allow_tf32, bf16 on bf16 tensors. Writes OUT/h200-gemm.json; prints a table.
Exit 1 when an error exceeds its tolerance (relative RMS: f32 1e-5, tf32 2e-3, bf16 1e-2) or a run fails.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import half_weights  # noqa: E402
import make_gemm as mg  # noqa: E402

TOL_RMS = {"f32": 1e-5, "tf32": 2e-3, "bf16": 1e-2}


def torch_times(torch, x, w, b, gelu, p, runs):
    """PyTorch's F.linear (+ GELU) at precision p: median µs of one call alone between two events,
    mean µs of back-to-back calls, and mean µs per call of a CUDA graph of 20 calls (no host cost)."""
    F = torch.nn.functional
    torch.backends.cuda.matmul.allow_tf32 = p == "tf32"
    if p == "bf16":
        x, w, b = x.bfloat16(), w.bfloat16(), b.bfloat16()

    def f():
        y = F.linear(x, w, b)
        return F.gelu(y) if gelu else y

    for _ in range(10):
        f()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    alone = []
    for _ in range(runs):
        s.record()
        f()
        e.record()
        e.synchronize()
        alone.append(s.elapsed_time(e) * 1e3)
    s.record()
    for _ in range(runs):
        f()
    e.record()
    e.synchronize()
    b2b = s.elapsed_time(e) * 1e3 / runs
    g = torch.cuda.CUDAGraph()
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        for _ in range(3):
            f()
    torch.cuda.current_stream().wait_stream(st)
    with torch.cuda.graph(g):
        for _ in range(20):
            f()
    g.replay()
    torch.cuda.synchronize()
    graph = []
    for _ in range(max(3, runs // 10)):
        s.record()
        g.replay()
        e.record()
        e.synchronize()
        graph.append(s.elapsed_time(e) * 1e3 / 20)
    torch.backends.cuda.matmul.allow_tf32 = False
    return statistics.median(alone), b2b, statistics.median(graph)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--carry", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=50)
    a = ap.parse_args()
    import torch

    work = tempfile.mkdtemp()
    arts = sorted(os.listdir(os.path.join(a.carry, "art")))
    names = sorted({re.sub(r"_(f32|tf32|bf16)_[^_]+$", "", c) for c in arts}, key=lambda n: (mg.parse(n)[0], n))
    res, failed = {"kernels": {}, "torch": {}}, []
    for name in names:
        _, k, n, gelu = mg.parse(name)
        x, w, bias = mg.arrays(name)
        xb = os.path.join(work, "x.bin")
        x.tofile(xb)
        tx, tw, tb = (torch.from_numpy(v).cuda() for v in (x, w, bias))
        ref = torch.nn.functional.linear(tx.double(), tw.double(), tb.double())
        if gelu:
            ref = 0.5 * ref * (1 + torch.erf(ref / np.sqrt(2.0)))
        ref = ref.cpu().numpy()
        for p in ["f32", "tf32", "bf16"]:
            res["torch"][f"{name}_{p}"] = dict(zip(["alone_us", "back_to_back_us", "graph_us"], torch_times(torch, tx, tw, tb, gelu, p, a.runs)))
        for c in [c for c in arts if c.startswith(name + "_")]:
            d = os.path.join(a.carry, "art", c)
            if not os.path.exists(os.path.join(d, f"{name}.weights.bin")):
                f32 = open(os.path.join(a.carry, "w", f"{name}.weights.bin"), "rb").read()
                open(os.path.join(d, f"{name}.weights.bin"), "wb").write(half_weights.with_copies(f32, json.load(open(os.path.join(d, f"{name}.json")))))
            o = os.path.join(work, "out", c)
            env = dict(os.environ, RLX_CUDA_KERNEL_TIMES="1")
            r = subprocess.run([os.path.join(a.carry, "cuda_run"), d, name, "5", o, xb], capture_output=True, text=True, env=env)
            if r.returncode != 0:
                failed.append(c)
                print(f"{c}: cuda_run failed ({r.returncode}): {r.stdout}{r.stderr}")
                continue
            ks = [(int(m.group(1)), float(m.group(2)), m.group(3)) for m in re.finditer(r"kernel (\d+) \(k\d+\): ([\d.]+) µs  grid (\[[^\]]*\])", r.stdout)]
            y = np.fromfile(os.path.join(o, "out0.bin"), dtype=np.float32).reshape(ref.shape)
            err = np.abs(y - ref)
            rms = float(np.sqrt((err**2).mean() / (ref**2).mean()))
            p = c[len(name) + 1 :].split("_")[0]
            ok = rms <= TOL_RMS[p]
            if not ok:
                failed.append(c)
            res["kernels"][c] = {"us": sum(t for _, t, _ in ks), "kernels": ks, "max_abs": float(err.max()), "rel_rms": rms, "ok": ok}
    print(f"{'case':<40} {'µs':>7} {'grid':>12} {'rel rms':>9}  torch alone / b2b / graph µs  rlxc / torch alone, graph")
    for c, e in res["kernels"].items():
        name = re.sub(r"_(f32|tf32|bf16)_[^_]+$", "", c)
        p = c[len(name) + 1 :].split("_")[0]
        t = res["torch"][f"{name}_{p}"]
        grid = " ".join(g for _, _, g in e["kernels"])
        print(f"{c:<40} {e['us']:7.1f} {grid:>12} {e['rel_rms']:9.2e}  {t['alone_us']:6.1f} / {t['back_to_back_us']:6.1f} / {t['graph_us']:6.1f}  {e['us'] / t['alone_us']:5.2f} {e['us'] / t['graph_us']:5.2f}{'' if e['ok'] else '  FAILED'}")
    res["failed"] = failed
    os.makedirs(a.out, exist_ok=True)
    json.dump(res, open(os.path.join(a.out, "h200-gemm.json"), "w"), indent=1)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
