#!/usr/bin/env python3
"""Cranelift vs LLVM objects: compile time and run time, side by side, in one run.

    backends.py --rlxc target/release/rlxc [--threads 1] [--reps 20] [--out docs/benchmarks.md]

For each model (MiniLM-L6 int8 ONNX at batch 1, seq 128; the MLP 784-128-10 of bench.py at batch 1)
and each back end, `rlxc compile --target host --backend B --timings` is timed (wall time of the whole
command, and its codegen phase), the object is linked into a shared object, and the two back ends' objects
run interleaved (A B A B ...) in one process after warm-up; p50 latencies. With --out, the section
"## Cranelift vs LLVM" of that file is replaced (or appended): other sections are kept.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (make_mlp, minilm_path, compile_rlxc)

BACKENDS = ["llvm", "cranelift"]
SECTION = "## Cranelift vs LLVM"


def compile_one(rlxc: str, model: Path, dims: dict, out: Path, backend: str) -> tuple[Path, float, float]:
    """bench.compile_rlxc with `--backend` and `--timings`; also returns the codegen phase alone."""
    so, wall, log = bench.compile_rlxc(rlxc, model, dims, out, ("--backend", backend, "--timings"))
    m = re.search(r"codegen \([^)]*\)\D*([0-9.]+)\s*(ms|s)", log)
    codegen = float(m.group(1)) / (1000.0 if m.group(2) == "ms" else 1.0) if m else float("nan")
    return so, wall, codegen


def worker(cfg: dict) -> dict:
    """Loads both shared objects and runs them interleaved; returns p50 ms and the max abs difference."""
    feeds = {k: np.load(v) for k, v in cfg["inputs"].items()}
    runs, outs_all = [], []
    for so, man_path in zip(cfg["sos"], cfg["manifests"]):
        man = json.loads(Path(man_path).read_text())
        lib = ctypes.CDLL(so)
        arena = np.zeros(max(man["arena_bytes"], 64) // 8 + 8, dtype=np.uint64)
        ins_np = [np.ascontiguousarray(feeds[p["name"]]) for p in man["inputs"]]
        outs_np = [np.zeros(p["shape"], dtype=np.float32) for p in man["outputs"]]
        ins = (ctypes.c_void_p * len(ins_np))(*[a.ctypes.data for a in ins_np])
        outs = (ctypes.c_void_p * len(outs_np))(*[a.ctypes.data for a in outs_np])
        arena_p = ctypes.c_void_p(arena.ctypes.data)

        def run(lib=lib, arena_p=arena_p, ins=ins, outs=outs, keep=(ins_np, outs_np, arena)):
            r = lib.m_run(arena_p, ins, outs)
            if r != 0:
                raise RuntimeError(f"m_run returned {r}")
        runs.append(run)
        outs_all.append(outs_np)
    for _ in range(2):
        for r in runs:
            r()
    maxdiff = float(np.abs(outs_all[0][0] - outs_all[1][0]).max())
    times = [[] for _ in runs]
    deadline = time.perf_counter() + cfg["budget_s"]
    for i in range(cfg["reps"]):
        for k, r in enumerate(runs):
            t = time.perf_counter(); r(); times[k].append(time.perf_counter() - t)
        if time.perf_counter() > deadline and i >= 2:
            break
    return {"ms": [float(np.median(t)) * 1e3 for t in times], "maxdiff": maxdiff, "reps": len(times[0])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rlxc", default=str(ROOT / "target/release/rlxc"))
    ap.add_argument("--threads", default="1")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=30.0, help="time limit per configuration (after 3 reps)")
    ap.add_argument("--out", default=None, help="replace or append the section in this markdown file")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(json.loads(a.worker))))
        return 0
    work = Path(tempfile.mkdtemp(prefix="rlxc-backends-"))
    rows = []
    try:
        mlp = work / "mlp.onnx"
        bench.make_mlp(mlp)
        cases = [("MiniLM-L6 int8→f32, batch 1, seq 128", bench.minilm_path(), {"batch": 1, "sequence": 128}),
                 ("MLP 784-128-10, batch 1", mlp, {"batch": 1})]
        for title, model, dims in cases:
            d = work / model.stem
            d.mkdir(parents=True, exist_ok=True)
            if "sequence" in dims:
                subprocess.run([sys.executable, str(ROOT / "tests/reference/make_inputs.py"), "--seq", str(dims["sequence"]),
                                "--batch", "1", "--out", str(d)], check=True, stdout=subprocess.DEVNULL)
                inputs = {k: str(d / f"{k}.npy") for k in ("input_ids", "attention_mask", "token_type_ids")}
            else:
                np.save(d / "x.npy", np.random.RandomState(1).rand(1, 784).astype(np.float32))
                inputs = {"x": str(d / "x.npy")}
            built = {}
            for b in BACKENDS:
                so, wall, codegen = compile_one(a.rlxc, model, dims, d / b, b)
                built[b] = (so, wall, codegen, os.path.getsize(d / b / "m.o"))
            for t in [int(x) for x in a.threads.split(",")]:
                env = dict(os.environ, RLX_NUM_THREADS=str(t))
                cfg = {"sos": [str(built[b][0]) for b in BACKENDS], "manifests": [str(d / b / "m.json") for b in BACKENDS],
                       "inputs": inputs, "reps": a.reps, "budget_s": a.budget_s}
                r = subprocess.run([sys.executable, __file__, "--worker", json.dumps(cfg)], env=env, check=True,
                                   capture_output=True, text=True)
                res = json.loads(r.stdout.strip().splitlines()[-1])
                row = {"model": title, "threads": t, "maxdiff": res["maxdiff"], "reps": res["reps"]}
                for k, b in enumerate(BACKENDS):
                    row[b] = {"compile_s": built[b][1], "codegen_s": built[b][2], "obj_kb": built[b][3] / 1024, "run_ms": res["ms"][k]}
                rows.append(row)
                l, c = row["llvm"], row["cranelift"]
                print(f"{title:40s} threads {t}: compile llvm {l['compile_s']:.2f} s (codegen {l['codegen_s'] * 1e3:.0f} ms) "
                      f"cranelift {c['compile_s']:.2f} s (codegen {c['codegen_s'] * 1e3:.0f} ms); run llvm {l['run_ms']:.3f} ms "
                      f"cranelift {c['run_ms']:.3f} ms ({c['run_ms'] / l['run_ms']:.1f}x); max|diff| {row['maxdiff']:.1e}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.out:
        lines = [SECTION, "",
                 "Measured by `make bench-backends` (`tests/bench/backends.py`): the same model compiled with",
                 "`rlxc compile --target host --backend llvm` and `--backend cranelift`, each compile timed as a whole command",
                 "(import, fold, plan, codegen, writing the artifacts) and its codegen phase alone (`--timings`); both objects",
                 "linked as shared objects and run interleaved in one process (p50 latency). max abs diff = between the two",
                 "back ends' outputs. Machine: shared 2-vCPU VM; compare ratios, not absolute times.", "",
                 "| model | threads | LLVM compile s | LLVM codegen ms | Cranelift compile s | Cranelift codegen ms | LLVM run ms | Cranelift run ms | Cranelift/LLVM run | object KiB (LLVM / Cranelift) | max abs diff |",
                 "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            l, c = r["llvm"], r["cranelift"]
            lines.append(f"| {r['model']} | {r['threads']} | {l['compile_s']:.2f} | {l['codegen_s'] * 1e3:.0f} | {c['compile_s']:.2f} | "
                         f"{c['codegen_s'] * 1e3:.0f} | {l['run_ms']:.3f} | {c['run_ms']:.3f} | {c['run_ms'] / l['run_ms']:.1f}x | "
                         f"{l['obj_kb']:.0f} / {c['obj_kb']:.0f} | {r['maxdiff']:.1e} |")
        bench.write_section(Path(a.out), SECTION, "\n".join(lines) + "\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
