#!/usr/bin/env python3
"""Training throughput: rlxc's compiled training step vs numpy + OpenBLAS doing the same step.

    train.py --rlxc target/release/rlxc [--threads 1,2] [--reps 3] [--epochs 4] [--out docs/benchmarks.md]

Model and data: the MNIST MLP 784-128-10 and the MNIST subset (4,000 train images) of
tests/train/mnist_reference.py. The step: forward, softmax cross-entropy (mean over the batch),
backward, plain SGD (lr 0.05), batch 128, batches in order. rlxc: `rlxc train` (the step compiled for
this machine, parameters resident in its state region), img/s of the steps alone from its metrics CSV.
numpy: the same step in float32 (the reference's own arithmetic), timed the same way. Each side runs in
its own process with its thread count fixed at start (RLX_NUM_THREADS / OPENBLAS_NUM_THREADS), and the
two alternate (A B A B …) `--reps` times per thread count; per run the median epoch after the first
(warm-up) is kept, per side the median over runs.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Training step: MNIST MLP, rlxc vs numpy"
BATCH, LR = 128, 0.05


def numpy_worker(data: str, epochs: int) -> list[float]:
    """img/s per epoch of the numpy step (threads fixed by the caller's environment)."""
    import numpy as np

    d = Path(data)
    x = np.load(d / "train_x.npy")
    y = np.load(d / "train_y.npy")
    p = {k: np.fromfile(d / f"{k}.bin", dtype="<f4") for k in ("w1", "b1", "w2", "b2")}
    p["w1"] = p["w1"].reshape(784, 128)
    p["w2"] = p["w2"].reshape(128, 10)
    lr = np.float32(LR)
    steps = len(x) // BATCH
    rows = np.arange(BATCH)
    out = []
    for _ in range(epochs):
        t = 0.0
        for i in range(steps):
            xb, yb = x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH]
            t0 = time.perf_counter()
            h = xb @ p["w1"] + p["b1"]
            r = np.maximum(h, 0)
            z = r @ p["w2"] + p["b2"]
            e = np.exp(z - z.max(axis=1, keepdims=True))
            dz = e / e.sum(axis=1, keepdims=True)
            dz[rows, yb] -= 1
            dz /= np.float32(BATCH)
            dh = (dz @ p["w2"].T) * (h > 0)
            p["w1"] -= lr * (xb.T @ dh)
            p["b1"] -= lr * dh.sum(axis=0)
            p["w2"] -= lr * (r.T @ dz)
            p["b2"] -= lr * dz.sum(axis=0)
            t += time.perf_counter() - t0
        out.append(steps * BATCH / t)
    return out


def steady(per_epoch: list[float]) -> float:
    return statistics.median(per_epoch[1:] if len(per_epoch) > 1 else per_epoch)


def run_rlxc(rlxc: str, data: Path, epochs: int, threads: int, tmp: Path) -> float:
    env = dict(os.environ, RLX_NUM_THREADS=str(threads))
    cmd = [rlxc, "train", str(data / "mlp_init.onnx"), "--data", str(data), "--epochs", str(epochs), "--batch", str(BATCH),
           "--optimizer", "sgd", "--lr", str(LR), "--name", "mlp", "-o", str(tmp)]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(tmp / "mlp_metrics.csv") as f:
        return steady([float(r["img_per_s"]) for r in csv.DictReader(f)])


def run_numpy(data: Path, epochs: int, threads: int) -> float:
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, __file__, "--worker", json.dumps({"data": str(data), "epochs": epochs})],
                         check=True, env=env, capture_output=True, text=True).stdout
    return steady(json.loads(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rlxc", default=str(ROOT / "target/release/rlxc"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--out", default=None, help="write the section into this markdown file")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        w = json.loads(a.worker)
        print(json.dumps(numpy_worker(w["data"], w["epochs"])))
        return 0
    data = ROOT / "build/bench-train/mnist"
    if not (data / "train_x.npy").exists():
        subprocess.run([sys.executable, str(ROOT / "tests/train/mnist_reference.py"), "--out", str(data)], check=True)
    import numpy as np

    cfg = np.show_config(mode="dicts") if hasattr(np, "show_config") else None
    blas = (cfg or {}).get("Build Dependencies", {}).get("blas", {}).get("name", "?") if isinstance(cfg, dict) else "?"
    results = []
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for t in [int(s) for s in a.threads.split(",")]:
            ours, theirs = [], []
            for _ in range(a.reps):
                ours.append(run_rlxc(a.rlxc, data, a.epochs, t, Path(tmp)))
                theirs.append(run_numpy(data, a.epochs, t))
            r, n = statistics.median(ours), statistics.median(theirs)
            results.append((t, r, n))
            print(f"threads {t}: rlxc {r:,.0f} img/s, numpy ({blas}) {n:,.0f} img/s, ratio {r / n:.2f}x", flush=True)
    if a.out:
        sys.path.insert(0, str(Path(__file__).parent))
        from bench import write_section

        lines = [SECTION, "",
                 f"MNIST MLP 784-128-10, batch {BATCH}, softmax cross-entropy, SGD lr {LR}, the 4,000-image subset in order; "
                 f"`make bench-train` (tests/bench/train.py, {a.reps} alternating runs of {a.epochs} epochs per thread count, "
                 "median epoch after the first, median over runs). rlxc: `rlxc train`, the step compiled for this machine with the "
                 f"parameters resident in its state region; numpy {np.__version__} ({blas}): the same float32 step. img/s of the steps alone.",
                 "", "| threads | rlxc img/s | numpy img/s | rlxc / numpy |", "|---:|---:|---:|---:|"]
        lines += [f"| {t} | {r:,.0f} | {n:,.0f} | {r / n:.2f}× |" for t, r, n in results]
        lines += ["", f"{os.cpu_count()} CPUs, 1-minute load average {load0:.1f} at the start and {os.getloadavg()[0]:.1f} at the end "
                  "(other work shares the machine: where the load exceeds the CPUs, OpenBLAS's spinning threads lose most, "
                  "so the 2-thread ratio overstates what a quiet machine shows).", ""]
        write_section(Path(a.out), SECTION, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
