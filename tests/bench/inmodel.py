#!/usr/bin/env python3
"""Where a zoo model's time goes, layer by layer, inside the model: each convolution's share of rlxc's
CPU time beside ONNX Runtime's own per-node profile (one thread).

    inmodel.py --model mobilenet_like [--batch 8] [--threads 2] [--secs 8] [--all]

rlxc's side: the host artifact is called in a loop under `perf record` (timer samples; `perf` is the
linux-perf package — a diagnostic, not part of `make bench`), each kernel function's share of the
samples times the measured CPU time per call, split evenly among the launches that share the function
(launches whose kernels are identical share one, `--emit-ir`'s NAME.ll says which) and named by the
launch (`NAME.lir`: a convolution and the epilogue fused into it). ONNX Runtime's side: its profiler's
per-node kernel times (median over 30 runs), a convolution counted with the nodes fused into it (named
after the last of BatchNormalization / Clip / Relu / Add after it) and a QuickGelu (SiLU) on its output.
Layers in a model run with their inputs and outputs where the model leaves them (cache, memory), which
`layers.py` (each geometry as a model of its own) does not see. Found this way: EfficientNet-like's
depthwise layers at 14² and 7², 2.7× ORT's time at batch 8 (docs/benchmarks.md, session 22).
"""
from __future__ import annotations

import argparse
import collections
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
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (compile_rlxc, load_artifact)
import zoo  # noqa: E402  (base_model, with_batch)


def bound(so: Path, man: dict):
    """The artifact's call on deterministic inputs."""
    rs = np.random.RandomState(0)
    inputs = [rs.rand(*p["shape"]).astype(np.float32) for p in man["inputs"]]
    return bench.load_artifact(so, "m", man, inputs)[0]


def loop(so: Path, man: dict, secs: float) -> None:
    """The artifact called for `secs` seconds (the child `perf record` samples)."""
    call = bound(so, man)
    t = time.perf_counter()
    while time.perf_counter() - t < secs:
        call()


def cpu_per_call(so: Path, man: dict, secs: float) -> float:
    call = bound(so, man)
    for _ in range(3):
        call()
    n, c = 0, time.process_time()
    t = time.perf_counter()
    while time.perf_counter() - t < secs:
        call()
        n += 1
    return (time.process_time() - c) / n * 1e3


def rlxc_layers(work: Path, model: Path, rlxc: str, secs: float) -> tuple[dict, float, float]:
    """Launch name → CPU ms per call, the CPU ms per call, and the part outside the kernels (the thread
    pool's waiting, the caller)."""
    so, _, _ = bench.compile_rlxc(rlxc, model, {}, work / "art", ("--emit-ir",), name="m")
    man = json.loads((work / "art" / "m.json").read_text())
    cpu = cpu_per_call(so, man, 3.0)
    data = work / "perf.data"
    subprocess.run(["perf", "record", "-q", "-F", "2999", "-o", str(data), "--", sys.executable, __file__, "--loop", str(work), "--secs", str(secs)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rep = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", "dso,sym"], check=True, capture_output=True, text=True).stdout
    # The artifact's own samples only: the loop process's start (Python, numpy's imports) is in the
    # recording too, and would otherwise be counted as ~10% of every call.
    share = {m.group(2): float(m.group(1)) for m in (re.match(r"\s*([\d.]+)%\s+m\.so\s+\[\.\]\s+(\S+)", l) for l in rep.splitlines()) if m}
    total = sum(share.values())
    share = {k: v * 100 / total for k, v in share.items()}
    names = re.findall(r'^launch "([^"]+)"', (work / "art" / "m.lir").read_text(), re.M)
    run = re.search(r"^define .*@m_run\(.*?^}", (work / "art" / "m.ll").read_text(), re.M | re.S).group(0)
    fns = re.findall(r"@(m_k\d+)\b", run)
    if len(fns) != len(names):
        sys.exit(f"inmodel.py: {len(fns)} kernel calls in m_run but {len(names)} launches in m.lir")
    count = collections.Counter(fns)
    ms = collections.defaultdict(float)
    for n, f in zip(names, fns):
        ms[n] += share.get(f, 0.0) * cpu / 100 / count[f]
    other = sum(v for k, v in share.items() if not k.startswith("m_k")) * cpu / 100
    return ms, cpu, other


def shape_key(weight, out) -> tuple:
    """A convolution's key where ORT renames its nodes (the `light` models' layout transform): the
    weight's and the output's shapes."""
    return (tuple(weight), tuple(out))


def ort_layers(model: Path, work: Path) -> tuple[dict, dict]:
    """ORT's per-node kernel ms (median over 30 runs) by node name, and each Conv's by `shape_key`."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.enable_profiling = 1, 1, True
    so.profile_file_prefix = str(work / "ort")
    s = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    rs = np.random.RandomState(0)
    feed = {i.name: rs.rand(*i.shape).astype(np.float32) for i in s.get_inputs()}
    for _ in range(30):
        s.run(None, feed)
    times, keys = collections.defaultdict(list), {}
    for e in json.loads(Path(s.end_profiling()).read_text()):
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            name = e["name"][: -len("_kernel_time")]
            times[name].append(e["dur"])
            args = e.get("args", {})
            if args.get("op_name") == "Conv" and len(args.get("input_type_shape", [])) >= 2:
                keys[name] = shape_key(*args["input_type_shape"][1].values(), *args["output_type_shape"][0].values())
    ms = {k: float(np.median(v)) / 1e3 for k, v in times.items()}
    by_key = collections.defaultdict(list)
    for name, key in keys.items():
        by_key[key].append(ms[name])
    return ms, by_key


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rlxc", default="target/release/rlxc")
    ap.add_argument("--model")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--secs", type=float, default=8, help="seconds sampled by perf")
    ap.add_argument("--all", action="store_true", help="every convolution, not only the kinds' totals")
    ap.add_argument("--threads", type=int, default=1, help="rlxc's threads (its CPU time over all of them; ORT's profile stays at one)")
    ap.add_argument("--loop", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.loop:
        # The thread count is the parent's (RLX_NUM_THREADS inherited), not this process's default.
        d = Path(a.loop)
        loop(d / "art" / "m.so", json.loads((d / "art" / "m.json").read_text()), a.secs)
        return 0
    if not a.model:
        ap.error("--model is required")
    os.environ["RLX_NUM_THREADS"] = str(a.threads)  # before the artifact's pool starts, here and in the loop
    if shutil.which("perf") is None:
        sys.exit("inmodel.py: needs `perf` (Debian package linux-perf)")
    work = Path(tempfile.mkdtemp(prefix="rlx-inmodel-"))
    model = work / "model.onnx"
    note = zoo.with_batch(zoo.base_model(a.model, work), model, a.batch)
    if note:
        sys.exit(f"{a.model} at batch {a.batch}: {note}")
    ms, cpu, other = rlxc_layers(work, model, a.rlxc, a.secs)
    ort_ms, ort_keys = ort_layers(model, work)
    g = onnx.shape_inference.infer_shapes(onnx.load(str(model))).graph
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in [*g.value_info, *g.output]}
    dims.update({t.name: list(t.dims) for t in g.initializer})
    readers = collections.defaultdict(list)
    for n in g.node:
        for i in n.input:
            readers[i].append(n)
    kinds = collections.defaultdict(lambda: [0.0, 0.0, 0])
    print(f"{a.model} batch {a.batch}: rlxc {cpu:.3f} ms CPU per call on {a.threads} thread(s) (outside its kernels: {other:.3f}), ORT's nodes {sum(ort_ms.values()):.3f} ms on one")
    for n in g.node:
        if n.op_type != "Conv":
            continue
        at = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        k, s = at.get("kernel_shape", [1])[0], at.get("strides", [1])[0]
        kind = f"depthwise {k}x{k}/{s}" if at.get("group", 1) > 1 else ("pointwise" if k == 1 else f"conv {k}x{k}/{s}")
        r = sum(v for name, v in ms.items() if name == n.name or name.startswith(n.name + "+") or name.startswith(n.name + " "))
        chain, out, nx = [n.name], n.output[0], readers.get(n.output[0], [])
        while len(nx) == 1 and nx[0].op_type in ("BatchNormalization", "Clip", "Relu", "Add"):
            chain.append(nx[0].name)
            out, nx = nx[0].output[0], readers.get(nx[0].output[0], [])
        o = sum(ort_ms.get(c + "_nchwc", 0.0) + ort_ms.get(c, 0.0) for c in chain)
        o += sum(v for c in readers.get(out, []) for name, v in ort_ms.items() if name.startswith(c.name + "/"))
        if o == 0.0:
            # ORT renamed the node (its NCHWc transform names some `rN_nchwc`): the mean of its convolutions
            # of the same weight and output shapes (the Conv's time holds what it fused after it).
            same = ort_keys.get(shape_key(dims.get(n.input[1], []), dims.get(n.output[0], [])), [])
            o = sum(same) / len(same) if same else 0.0
        kinds[kind][0] += r
        kinds[kind][1] += o
        kinds[kind][2] += 1
        if a.all:
            print(f"  {n.name:24s} {kind:16s} rlxc {r:8.3f} ms  ORT {o:8.3f} ms  {r / o if o else float('nan'):5.2f}")
    for kind, (r, o, c) in sorted(kinds.items()):
        print(f"{kind:16s} {c:3d} layers  rlxc {r:8.3f} ms  ORT {o:8.3f} ms  {r / o if o else float('nan'):5.2f}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
