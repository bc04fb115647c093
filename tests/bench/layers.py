#!/usr/bin/env python3
"""Per-layer time of a zoo model: every distinct Conv / MaxPool / AveragePool geometry of it as a one-node
model (a Conv with bias, then ReLU), rlxc vs ONNX Runtime side by side, with how often the model uses it.

    layers.py --rlxc target/release/rlxc --model resnet50 [--threads 1] [--reps 10] [--budget-s 2] [--only 0,7] [--cpu-time]

`--model` is a zoo name (tests/bench/zoo.py: the onnx wheel's `light` models, mobilenet_like) at batch 1.
Each row is measured as zoo.py measures a model (bench.py's `worker`: one process, interleaved blocks,
p50; with --cpu-time each call's process CPU time instead of wall time, for a shared machine at 1 thread). ORT's time of an isolated layer includes its layout conversion to and from its blocked format
(NCHWc), which it skips between the layers of a whole model, so the sum of the ORT column exceeds its
whole-model time; rlxc has no such conversion. Weights are random (He-scaled), the input uniform.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (compile_rlxc, worker)
import zoo  # noqa: E402  (base_model, with_batch)

ROOT = Path(__file__).resolve().parents[2]


def geometries(model: Path) -> dict:
    """(op, input shape, weight shape or kernel, strides, pads, group) → the node names using it."""
    import onnx
    from onnx import helper, shape_inference
    m = shape_inference.infer_shapes(onnx.load(str(model)))
    shp = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in list(m.graph.value_info) + list(m.graph.input)}
    for t in m.graph.initializer:
        shp[t.name] = list(t.dims)
    geos: dict = {}
    for n in m.graph.node:
        if n.op_type not in ("Conv", "MaxPool", "AveragePool"):
            continue
        at = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        kern = shp[n.input[1]] if n.op_type == "Conv" else list(at["kernel_shape"])
        sp = len(kern) - 2 if n.op_type == "Conv" else len(kern)
        key = (n.op_type, tuple(shp[n.input[0]]), tuple(kern), tuple(at.get("strides", [1] * sp)), tuple(at.get("pads", [0] * 2 * sp)),
               at.get("group", 1))
        geos.setdefault(key, []).append(n.name)
    return geos


def layer_model(key, path: Path) -> float:
    """Writes the one-node model of geometry `key`; returns its FLOPs (2 × multiply-adds, 0 for a pool)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper, shape_inference
    op, xs, kern, strides, pads, group = key
    rs = np.random.RandomState(0)
    inits = []
    if op == "Conv":
        w = (rs.randn(*kern) * np.sqrt(2.0 / np.prod(kern[1:]))).astype(np.float32)
        inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array((rs.randn(kern[0]) * 0.1).astype(np.float32), "b")]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=list(kern[2:]), strides=list(strides), pads=list(pads), group=group),
                 helper.make_node("Relu", ["c"], ["y"])]
    else:
        nodes = [helper.make_node(op, ["x"], ["y"], kernel_shape=list(kern), strides=list(strides), pads=list(pads))]
    g = helper.make_graph(nodes, "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), strict_mode=True)
    onnx.save(m, str(path))
    ys = [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim]
    return 2.0 * float(np.prod(ys)) * float(np.prod(kern[1:])) if op == "Conv" else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rlxc", default=str(ROOT / "target/release/rlxc"))
    ap.add_argument("--model", required=True, help="a zoo model name (resnet50, squeezenet, mobilenet_like, …)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=2.0, help="time limit per row (after 2 blocks)")
    ap.add_argument("--only", default=None, help="comma-separated row numbers")
    ap.add_argument("--cpu-time", action="store_true", help="time each call as the process's CPU time (a loaded machine; 1 thread)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rlxc-layers-"))
    model = work / "model.onnx"
    note = zoo.with_batch(zoo.base_model(a.model, work), model, 1)
    if note:
        print(f"{a.model}: {note}", file=sys.stderr)
        return 1
    only = {int(i) for i in a.only.split(",")} if a.only else None
    env = dict(os.environ, RLX_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    print("| # | layer | uses | rlxc p50 ms | ORT p50 ms | rlxc/ORT | uses × (rlxc − ORT) ms | rlxc GFLOP/s | rel diff |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    tot = [0.0, 0.0]
    for i, (key, names) in enumerate(geometries(model).items()):
        if only is not None and i not in only:
            continue
        d = work / f"layer{i}"
        d.mkdir()
        fl = layer_model(key, d / "model.onnx")
        np.save(d / "x.npy", np.random.RandomState(i).rand(*key[1]).astype(np.float32))
        so, _, _ = bench.compile_rlxc(a.rlxc, d / "model.onnx", {}, d / "rlxc")
        cfg = {"threads": a.threads, "so": str(so), "manifest": str(d / "rlxc" / "m.json"), "model": str(d / "model.onnx"),
               "inputs": {"x": str(d / "x.npy")}, "reps": a.reps, "budget_s": a.budget_s, "flops": fl, "vmfb": None, "check": None,
               "cpu_time": a.cpu_time}
        r = subprocess.run([sys.executable, str(ROOT / "tests/bench/bench.py"), "--worker", json.dumps(cfg)], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"| {i} | {key} | {len(names)} | run failed: {(r.stderr.strip().splitlines() or ['?'])[-1][:120]} |||||")
            continue
        res = json.loads(r.stdout.strip().splitlines()[-1])
        op, xs, kern, strides, pads, group = key
        what = f"{op} {list(xs[1:])} → {list(kern)} s{strides[0]} p{pads[0]}" + (f" g{group}" if group > 1 else "")
        n = len(names)
        tot[0] += n * res["rlxc_ms"]
        tot[1] += n * res["ort_ms"]
        gf = f"{res['gflops']:.1f}" if fl else ""
        print(f"| {i} | {what} | {n} | {bench.ms(res['rlxc_ms'])} | {bench.ms(res['ort_ms'])} | {res['ratio']:.2f} | "
              f"{n * (res['rlxc_ms'] - res['ort_ms']):+.3f} | {gf} | {res['reldiff']:.0e} |", flush=True)
    print(f"\nSum over the layers × uses: rlxc {tot[0]:.2f} ms, ORT {tot[1]:.2f} ms.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
