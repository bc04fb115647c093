#!/usr/bin/env python3
"""On the GPU machine: PyTorch's matmuls at MiniLM's shapes (seq 128: x[batch·128, K] @ W[N, K]ᵀ + bias,
erf GELU after FFN up; tests/gpu/make_gemm.py's SHAPES, Q/K/V merged 384 × 1152 among them) at f32 (TF32
off), tf32 (allow_tf32) and bf16 (bf16 tensors), timed as bench_gemm.py's `torch_times` does (one call
alone between two events, the launch in it; a CUDA graph of 20 calls, device time only), with the
GFLOP/s of each (2·M·N·K). No rlxc artifact: rlxc's kernels at the same shapes are MiniLM's own, launched
alone by tests/gpu/bench_cuda.py (`kernels` in its JSON) in the same device call.

    torch_gemm.py --out DIR [--batch 1 8 32] [--runs 50]    writes DIR/h200-torch-gemm.json, prints a table
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gemm import torch_times  # noqa: E402
from make_gemm import SEQ, SHAPES  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--runs", type=int, default=50)
    a = ap.parse_args()
    import torch

    torch.manual_seed(0)
    rows = []
    for b in a.batch:
        m = b * SEQ
        for k, n, gelu in SHAPES:
            x = torch.randn(m, k, device="cuda")
            w = torch.randn(n, k, device="cuda") / k**0.5
            bias = torch.randn(n, device="cuda")
            for p in ["f32", "tf32", "bf16"]:
                alone, _, graph = torch_times(torch, x, w, bias, gelu, p, a.runs)
                gf = 2 * m * n * k / graph / 1e3
                rows.append({"batch": b, "m": m, "k": k, "n": n, "gelu": gelu, "precision": p, "alone_us": alone, "graph_us": graph, "gflops_graph": gf})
                print(f"b{b:<3} {m:5}x{k:<5}x{n:<5}{' +gelu' if gelu else '      '} {p:5} torch alone {alone:7.1f} µs  graph {graph:7.1f} µs  {gf:8.0f} GFLOP/s", flush=True)
    json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows}, open(os.path.join(a.out, "h200-torch-gemm.json"), "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
