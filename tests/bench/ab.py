#!/usr/bin/env python3
"""Compile variants of one zoo model side by side: each variant's artifact and (with --ort) ONNX Runtime
loaded in one process and called in turn, in blocks A B C A B C …, so a shared machine's load drifts alike
for all.

    ab.py --model resnet50 [--batch 8] --variant "" --variant "--winograd off" [--variant "RLX_X=1 --flag v"]
          [--rlxc target/release/rlxc] [--secs 20] [--ort] [--wall]

A variant is compile flags for `rlxc compile` and/or NAME=VALUE environment settings for it (compile-time
switches read by the compiler); `RLXC=path` takes another rlxc binary (a build of an earlier commit).
`--model` is a zoo name (tests/bench/zoo.py: the `light` models, mobilenet_like, efficientnet_like, conv{cin}x{cout}h{h}k{k}s{s}
single layers). Reported: each variant's median per call — the process's CPU time (all threads), or wall
time with --wall (use it with RLX_NUM_THREADS > 1) — and its ratio to the first variant's, and the largest
output difference from the first variant. Set the thread count with RLX_NUM_THREADS (ORT gets the same).
This is how the per-layer Winograd rules in compiler/opt/src/plan/winograd.rs were measured; the zoo's
table itself comes from zoo.py.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (compile_rlxc, load_artifact)
import zoo  # noqa: E402  (base_model, with_batch)


def model_file(name: str, batch: int, work: Path) -> Path:
    model = work / "model.onnx"
    note = zoo.with_batch(zoo.base_model(name, work), model, batch)
    if note:
        sys.exit(f"{name} at batch {batch}: {note}")
    return model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rlxc", default="target/release/rlxc")
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--variant", action="append", required=True, help="compile flags and NAME=VALUE settings")
    ap.add_argument("--secs", type=float, default=20)
    ap.add_argument("--ort", action="store_true", help="time ONNX Runtime in the same rounds")
    ap.add_argument("--wall", action="store_true", help="wall time per call instead of the process's CPU time")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rlx-ab-"))
    model = model_file(a.model, a.batch, work)
    rs = np.random.RandomState(0)
    runs, inputs, first = [], None, None
    for i, v in enumerate(a.variant):
        toks = shlex.split(v)
        env = dict(t.split("=", 1) for t in toks if "=" in t and not t.startswith("-"))
        flags = tuple(t for t in toks if "=" not in t or t.startswith("-"))
        rlxc = env.pop("RLXC", a.rlxc)
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            so, _, _ = bench.compile_rlxc(rlxc, model, {}, work / f"v{i}", flags, name=f"m{i}")
        finally:
            for k, old in saved.items():
                if old is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = old
        man = json.loads((work / f"v{i}" / f"m{i}.json").read_text())
        if inputs is None:
            inputs = [rs.rand(*p["shape"]).astype(np.float32) for p in man["inputs"]]
        call, outs, _ = bench.load_artifact(so, f"m{i}", man, inputs)
        call()
        if first is None:
            first = outs
            diff = 0.0
        else:
            diff = max(float(np.abs(x - y).max()) for x, y in zip(first, outs))
        runs.append((v or "(default)", call, diff))
    if a.ort:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = int(os.environ.get("RLX_NUM_THREADS", "1"))
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
        feed = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
        sess.run(None, feed)
        runs.append(("ONNX Runtime", lambda: sess.run(None, feed), None))
    # Blocks in turn, as bench.py's worker: each first calls for 100 ms untimed (the previous engine's
    # worker threads may still spin: ORT's for ~35 ms after a call, taking a core from the engine timed),
    # then times its calls for 50 ms.
    clock = time.perf_counter if a.wall else time.process_time
    times: list[list[float]] = [[] for _ in runs]
    end = time.perf_counter() + a.secs
    while time.perf_counter() < end or len(times[0]) < 3:
        for (_, call, _), ts in zip(runs, times):
            warm = time.perf_counter() + 0.1
            while time.perf_counter() < warm:
                call()
            until = time.perf_counter() + 0.05
            while time.perf_counter() < until:
                t = clock()
                call()
                ts.append(clock() - t)
    base = float(np.median(times[0]))
    what = "wall" if a.wall else "CPU"
    for (name, _, diff), ts in zip(runs, times):
        med = float(np.median(ts))
        d = "" if diff is None else f"  max |diff| vs the first {diff:.3g}"
        print(f"{name:32} median {what} ms {med * 1e3:10.3f}  ratio {med / base:.3f}  ({len(ts)} calls){d}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
