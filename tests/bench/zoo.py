#!/usr/bin/env python3
"""The CNN model zoo: rlxc vs ONNX Runtime on the onnx wheel's nine `light` models and a MobileNet-style
depthwise model, batch 1 and 8, 1 and 2 threads (part of `make bench`; `make bench-zoo` runs it alone).

    zoo.py --rlxc target/release/rlxc [--models resnet50,shufflenet] [--batches 1,8] [--threads 1,2] [--cpu-time]
           [--reps 10] [--budget-s 20] [--out docs/benchmarks.md]

A model named `conv{cin}x{cout}h{h}k{k}s{s}` (e.g. conv64x64h56k3s1) is one convolution layer with bias and
ReLU (`tests/bench/conv_layer.py`), for measuring single layers side by side.

Measured exactly as bench.py measures MiniLM (its `compile_rlxc` and `worker`): rlxc's host artifact loaded
as a shared object and ORT in one process per row, same thread count, interleaved blocks of calls, p50.
The light models carry constant-filled weights (ConstantOfShape), so their pre-softmax values are huge
(up to ~1e12) and a final Softmax over them amplifies any rounding difference into other winners: where a
model ends in Softmax its input (the logits) is made a second graph output and the accuracy column is
max |rlxc − ORT| over the logits, relative to their largest magnitude (else over the output); the
issue's bound is 1e-4.
A batch-8 copy of a model is made by fixing the input's batch dimension to 8, turning the leading 1 of
constant Reshape targets (Flatten exported as a Reshape to [1, -1]) into 0 ("copy the input's dim"), and
letting ONNX shape inference rebuild the rest; where that is not enough, the row says so instead of a time.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (compile_rlxc, worker, ms: one implementation of the measurement)

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## CNN model zoo: rlxc vs ONNX Runtime (CPU)"
LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet", "vgg19",
         "zfnet512"]


def light_dir() -> Path:
    import onnx
    return Path(onnx.__file__).parent / "backend/test/data/light"


def flops(model) -> float:
    """2 × multiply-adds of every Conv, ConvTranspose, Gemm and MatMul, from ONNX shape inference."""
    import onnx
    from onnx import numpy_helper, shape_inference
    m = shape_inference.infer_shapes(model)
    shapes = {}
    for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output):
        dims = [d.dim_value for d in v.type.tensor_type.shape.dim]
        shapes[v.name] = dims
    for t in m.graph.initializer:
        shapes[t.name] = list(t.dims)
    for n in m.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    shapes[n.output[0]] = list(numpy_helper.to_array(a.t).shape)
        if n.op_type == "ConstantOfShape":
            pass
    total = 0.0
    for n in m.graph.node:
        out = shapes.get(n.output[0])
        if not out or 0 in out:
            continue
        if n.op_type in ("Conv", "ConvTranspose"):
            w = shapes.get(n.input[1])
            if not w:
                continue
            groups = next((a.i for a in n.attribute if a.name == "group"), 1)
            per_out = float(np.prod(w[1:])) if n.op_type == "Conv" else float(w[0] // groups * np.prod(w[2:]))
            total += 2.0 * float(np.prod(out)) * per_out
        elif n.op_type in ("Gemm", "MatMul"):
            a = shapes.get(n.input[0])
            if not a:
                continue
            trans_a = next((x.i for x in n.attribute if x.name == "transA"), 0)
            k = a[-2] if (n.op_type == "Gemm" and trans_a) else a[-1]
            total += 2.0 * float(np.prod(out)) * k
    return total


def base_model(name: str, work: Path) -> Path:
    """The batch-1 ONNX file of zoo model `name`: a `light` model of the onnx wheel, or mobilenet_like /
    efficientnet_like (tests/bench/NAME.py) / a `conv{cin}x{cout}h{h}k{k}s{s}` layer written into `work`,
    or a path ending in .onnx (itself)."""
    if name.endswith(".onnx"):
        return Path(name)
    if name in ("mobilenet_like", "efficientnet_like"):
        base = work / f"{name}.onnx"
        subprocess.run([sys.executable, str(ROOT / f"tests/bench/{name}.py"), "--out", str(base)], check=True, stdout=subprocess.DEVNULL)
    elif name.startswith("conv"):
        base = work / f"{name}.onnx"
        conv_layer(base, name)
    else:
        base = light_dir() / f"light_{name}.onnx"
    return base


def with_batch(src: Path, dst: Path, batch: int) -> str | None:
    """A copy of `src` with the first input's batch dimension fixed to `batch` (None when it worked)."""
    import onnx
    from onnx import shape_inference
    m = onnx.load(str(src))
    init = {t.name for t in m.graph.initializer}
    for v in m.graph.input:
        if v.name not in init:
            v.type.tensor_type.shape.dim[0].dim_value = batch
    for v in m.graph.output:
        v.type.tensor_type.shape.dim[0].dim_value = batch
    if batch != 1:
        unpin_batch(m)
    del m.graph.value_info[:]
    try:
        m = shape_inference.infer_shapes(m, strict_mode=True)
    except Exception as e:  # noqa: BLE001
        return f"shape inference at batch {batch}: {str(e).splitlines()[0][:160]}"
    logits = softmax_input(m)
    if logits is not None:
        m.graph.output.append(logits)
    onnx.save(m, str(dst))
    return None


def softmax_input(m):
    """The value_info of the input of the Softmax producing the graph's (first) output, or None."""
    out = m.graph.output[0].name
    node = next((n for n in m.graph.node if out in n.output), None)
    if node is None or node.op_type != "Softmax":
        return None
    return next((v for v in m.graph.value_info if v.name == node.input[0]), None)


def unpin_batch(m) -> None:
    """Reshapes whose constant target shape starts with 1 (the batch of 1 the model was exported with:
    Flatten as Reshape [1, -1], ShuffleNet's channel shuffle [1, g, c/g, h, w]) get 0 there instead,
    ONNX's "copy this dim from the input": the same model at batch 1, the input's batch at any other."""
    from onnx import numpy_helper
    consts = {t.name: t for t in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    consts[n.output[0]] = a.t
    users = {}
    for n in m.graph.node:
        for i in n.input:
            users.setdefault(i, []).append(n.op_type)
    for n in m.graph.node:
        if n.op_type != "Reshape" or len(n.input) < 2 or n.input[1] not in consts:
            continue
        if any(a.name == "allowzero" and a.i for a in n.attribute) or set(users[n.input[1]]) != {"Reshape"}:
            continue
        t = consts[n.input[1]]
        v = numpy_helper.to_array(t)
        if v.ndim == 1 and v.size > 1 and v[0] == 1:
            v = v.copy()
            v[0] = 0
            t.CopyFrom(numpy_helper.from_array(v.astype(np.int64), t.name))


def m_check(model: Path) -> str | None:
    """The output the accuracy column compares: the logits output `with_batch` added, if any."""
    import onnx
    outs = onnx.load(str(model), load_external_data=False).graph.output
    return outs[1].name if len(outs) > 1 else None


def conv_layer(dst: Path, spec: str) -> None:
    """tests/bench/conv_layer.py's single convolution layer (`conv{cin}x{cout}h{h}k{k}s{s}`)."""
    subprocess.run([sys.executable, str(ROOT / "tests/bench/conv_layer.py"), "--out", str(dst), "--spec", spec], check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rlxc", default=str(ROOT / "target/release/rlxc"))
    ap.add_argument("--models", default=",".join(LIGHT + ["mobilenet_like", "efficientnet_like"]))
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=20.0, help="time limit per row (after 2 blocks)")
    ap.add_argument("--out", default=None, help="write the markdown table into this file's zoo section")
    ap.add_argument("--cpu-time", action="store_true", help="time each call as the process's CPU time (a loaded machine; 1 thread)")
    a = ap.parse_args()
    import onnx
    import onnxruntime as ort

    work = Path(tempfile.mkdtemp(prefix="rlxc-zoo-"))
    rows = []
    try:
        for name in a.models.split(","):
            base = base_model(name, work)
            for batch in [int(b) for b in a.batches.split(",")]:
                d = work / f"{name}_b{batch}"
                d.mkdir(parents=True)
                model = d / "model.onnx"
                note = with_batch(base, model, batch)
                sess = None
                if note is None:
                    try:
                        sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
                        x = np.random.RandomState(batch).rand(*sess.get_inputs()[0].shape).astype(np.float32)
                        sess.run(None, {sess.get_inputs()[0].name: x})
                    except Exception as e:  # noqa: BLE001
                        note = f"ONNX Runtime cannot run it at batch {batch}: {str(e).splitlines()[0][:160]}"
                if note:
                    print(f"{name:16s} batch {batch}: {note}", flush=True)
                    rows.append({"model": name, "batch": batch, "note": note})
                    continue
                inp = sess.get_inputs()[0].name
                np.save(d / "x.npy", x)
                try:
                    so, ctime, _ = bench.compile_rlxc(a.rlxc, model, {}, d / "rlxc")
                except subprocess.CalledProcessError as e:
                    note = "rlxc compile failed: " + ((e.stderr or "").strip().splitlines() or ["?"])[-1][:160]
                    print(f"{name:16s} batch {batch}: {note}", flush=True)
                    rows.append({"model": name, "batch": batch, "note": note})
                    continue
                size = (d / "rlxc" / "m.o").stat().st_size
                fl = flops(onnx.load(str(model)))
                for t in [int(x) for x in a.threads.split(",")]:
                    cfg = {"threads": t, "so": str(so), "manifest": str(d / "rlxc" / "m.json"), "model": str(model),
                           "inputs": {inp: str(d / "x.npy")}, "reps": a.reps, "budget_s": a.budget_s, "flops": fl,
                           "vmfb": None, "check": m_check(model), "cpu_time": a.cpu_time}
                    res, note = bench.run_worker(cfg)
                    if res is None:
                        print(f"{name:16s} batch {batch} threads {t}: {note}", flush=True)
                        rows.append({"model": name, "batch": batch, "threads": t, "note": note})
                        continue
                    res.update(model=name, batch=batch, threads=t, compile_s=ctime, object_mb=size / 1e6, gflop=fl / 1e9)
                    rows.append(res)
                    print(f"{name:16s} batch {batch} threads {t}: rlxc {res['rlxc_ms']:9.2f} ms  ORT {res['ort_ms']:9.2f} ms  "
                          f"ratio {res['ratio']:5.2f}  {res['gflops']:6.1f} GFLOP/s ({100 * res['gflops'] / res['peak']:3.0f}% of "
                          f"sgemm {res['peak']:.0f})  rel diff {res['reldiff']:.1e}  compile {ctime:.1f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    geo, ntimed = bench.geomean_ratio(rows)
    print(f"geometric mean rlxc/ORT over {ntimed} rows: {geo:.2f}")
    if a.out:
        lines = [SECTION, "",
                 "Measured by `make bench-zoo` (`tests/bench/zoo.py`, also part of `make bench`): the nine `light` models of",
                 "the onnx wheel (onnx/backend/test/data/light), a MobileNet-style depthwise model",
                 "(`tests/bench/mobilenet_like.py`) and an EfficientNet-B0-style one (`tests/bench/efficientnet_like.py`: SiLU,",
                 "squeeze-and-excitation, 5×5 depthwise), batch 1 and 8, 1 and 2 threads; rlxc's host artifact and ONNX Runtime",
                 "in one process per row, interleaved blocks, p50 (the method of the MiniLM table). GFLOP/s counts the",
                 "convolutions' and matmuls' multiply-adds ×2; sgemm peak = numpy/OpenBLAS 1024² in the same process.",
                 "rel diff = max |rlxc − ORT| / max |ORT| over the logits (the input of a final Softmax, else the output).", "",
                 "| model | batch | threads | rlxc p50 ms | ORT p50 ms | rlxc/ORT | GFLOP | rlxc GFLOP/s | % of sgemm peak | rel diff | rlxc compile s | object MB |",
                 "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            if "ratio" not in r:
                lines.append(f"| {r['model']} | {r['batch']} | {r.get('threads', '—')} | — | — | — | | | | | | {r['note']} |")
                continue
            lines.append(f"| {r['model']} | {r['batch']} | {r['threads']} | {bench.ms(r['rlxc_ms'])} | {bench.ms(r['ort_ms'])} | "
                         f"{r['ratio']:.2f} | {r['gflop']:.2f} | {r['gflops']:.1f} | {100 * r['gflops'] / r['peak']:.0f}% | "
                         f"{r['reldiff']:.1e} | {r['compile_s']:.1f} | {r['object_mb']:.1f} |")
        lines += ["", f"Geometric mean of rlxc/ORT over the {ntimed} timed rows: **{geo:.2f}**."]
        bench.write_section(Path(a.out), SECTION, "\n".join(lines) + "\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
