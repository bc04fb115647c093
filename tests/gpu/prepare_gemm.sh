#!/usr/bin/env bash
# On the development machine: everything tests/gpu/bench_gemm.py needs on the GPU machine, in one folder
# (default build/gpu-gemm; ~15 MB, carried by the device tool):
#   cuda_run                 runtime-min's CUDA example (cargo build --release -p rlx-rt --features cuda --example cuda_run)
#   art/NAME_P_V/            rlxc compile --target cuda of tests/gpu/make_gemm.py's MiniLM matmul shapes (batch 8 and
#                            32; BATCHES="1 8 32" adds batch 1), precision P (f32: 3×TF32 on the tensor cores; tf32,
#                            bf16), variant V: `auto` (the writer's choice), `simt` (f32, RLX_CUDA_F32_MMA=0: the SIMT tiles), `old` (RLX_CUDA_VEC_TILE=0: tiled.rs's general form), `tk32` (RLX_CUDA_VEC_TK=32)
#                            and the forced tiles 64x64, 128x64, 128x128, 128x96, 64x96, 64x48 (RLX_CUDA_VEC_TILE=BMxBN; where a forced tile
#                            is not whole, the general form), and for bf16 `f32w` (RLX_CUDA_HALF_WEIGHTS=0: f32
#                            weights converted as they are staged; the other bf16 variants read bf16 copies of the
#                            weights), and the cp.async pipeline (nvptx/cp_async.rs) `sN` (RLX_CUDA_VEC_STAGES=N, slices
#                            of 64 where K allows), `sNtk32` (slices of 32), `sN-BMxBN` (a forced tile), `wg` (RLX_CUDA_WGMMA=1:
#                            Hopper's wgmma, nvptx/wgmma.rs; needs SM=90, compiled --sm 90 — sm_90a PTX), `wg2` (RLX_CUDA_WGMMA=2: the next slice stored while the wgmmas run), `wg-BMxBN` / `wgN-BMxBN` (a forced tile); one weights blob per shape (NAME.weights.bin in w/, the f32 artifact's; each
#                            variant's is that blob followed by the copies its manifest lists: checked here, rebuilt there
#                            by half_weights.py)
#   bench_gemm.py, make_gemm.py, half_weights.py   (the inputs, weights and bias are regenerated there from make_gemm.py's seeds)
# VARIANTS="f32_auto f32_simt tf32_auto …": only those (precision_variant). SM=90: compiled --sm 90 (227 KiB of shared
# memory for the cp.async stages; the default --sm 80 allows 163).
# Usage: tests/gpu/prepare_gemm.sh [OUT_DIR]   (run from the repository root; needs .venv and target/release/rlxc)
set -euo pipefail
D=${1:-build/gpu-gemm}
PY=${RLX_PY:-.venv/bin/python}
R=target/release/rlxc
rm -rf "$D" && mkdir -p "$D/art" "$D/w"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cargo build --release -p rlx-rt --features cuda --example cuda_run
cp target/release/examples/cuda_run tests/gpu/bench_gemm.py tests/gpu/make_gemm.py tests/gpu/half_weights.py "$D/"
"$PY" tests/gpu/make_gemm.py --out "$T" --batch ${BATCHES:-8 32} >/dev/null
ALL=$(echo f32_auto f32_simt {tf32,bf16}_{auto,old,tk32,64x64,128x64,128x128,128x96,64x96,64x48} bf16_f32w)
for f in "$T"/gemm_b*.onnx; do
  n=$(basename "$f" .onnx)
  for pv in ${VARIANTS:-$ALL}; do
    p=${pv%%_*} v=${pv#*_} tk= hw=1 mma=1 st= wg=
    case $v in auto) t= ;; wg) t= wg=1 ;; wg[0-9]) t= wg=${v:2:1} ;; wg-*) t=${v#wg-} wg=1 ;; wg[0-9]-*) t=${v#wg?-} wg=${v:2:1} ;; old) t=0 ;; tk32) t= tk=32 ;; f32w) t= hw=0 ;; simt) t= mma=0 ;;
      s[0-9]*) st=${v:1:1} t= r=${v:2}; case $r in tk64) tk=64 ;; tk32) tk=32 ;; -*) t=${r#-} ;; esac ;;
      *) t=$v ;; esac
    RLX_CUDA_WGMMA=$wg RLX_CUDA_VEC_STAGES=$st RLX_CUDA_VEC_TILE=$t RLX_CUDA_VEC_TK=$tk RLX_CUDA_HALF_WEIGHTS=$hw RLX_CUDA_F32_MMA=$mma $R compile "$f" --target cuda ${SM:+--sm $SM} --precision "$p" --name "$n" -o "$D/art/${n}_$pv" >/dev/null
    if [ -e "$D/w/$n.weights.bin" ]; then "$PY" tests/gpu/half_weights.py check "$D/w/$n.weights.bin" "$D/art/${n}_$pv/$n.json" "$D/art/${n}_$pv/$n.weights.bin" >/dev/null; rm "$D/art/${n}_$pv/$n.weights.bin"
    else mv "$D/art/${n}_$pv/$n.weights.bin" "$D/w/"; fi
  done
done
du -sh "$D"
