#!/usr/bin/env bash
# On the GPU machine (an NVIDIA H200): Gemma 3 270M compiled for --target cuda (tests/gpu/prepare_llm.sh),
# after every part of its weights has been copied into STAGE by earlier calls (`stage`), then `run`:
# greedy generation with runtime-min's CUDA executor (chunk 8 and chunk 1 artifacts) — its tokens must
# equal the host's — decode tokens/s at 128 and ~1000 positions; the prefill of a 512-token prompt with
# the chunk 128 and chunk 8 artifacts (the next 16 tokens must equal the host's) and chunk 128 with
# --precision bf16 (its tokens may part from the f32 host's); and PyTorch's decode
# and prefill rates on the same model with the same weights, dequantized (bench_gemma_torch.py;
# TORCH=0 skips its decode runs, TORCH_PREFILL=0 its prefill run). Raw output to $OUT/h200-llm.log; every kernel's device time of a
# decode call at ~1000 positions (slowest first) to $OUT/kernels-chunkC.txt.
# Usage: run_llm.sh stage CARRIED_PART_DIR STAGE | run_llm.sh run BASE_DIR STAGE
set -euo pipefail
case $1 in
  stage) mkdir -p "$3" && cp "$2"/* "$3"/ && ls -la "$3" && exit 0 ;;
  run) ;;
  *) echo "usage: run_llm.sh stage PART STAGE | run BASE STAGE" >&2; exit 2 ;;
esac
B=$2; S=$3
export PYTHONUNBUFFERED=1
{
  nvidia-smi -L || true
  cat "$S"/weights.part* > "$S/gemma.weights.bin"
  ls -la "$S/gemma.weights.bin"
  for c in 8 1 128 128bf16; do ln -sf "$S/gemma.weights.bin" "$B/art$c/gemma.weights.bin"; done
  prompt=$(cat "$B/prompt.txt")
  host=$(cat "$B/host.txt")
  n=$(echo "$host" | tr ',' '\n' | wc -l)
  for c in 8 1; do
    echo "== chunk $c: $n tokens after the prompt"
    out=$("$B/cuda_llm" "$B/art$c" gemma 1024 "$prompt" "$n")
    echo "$out"
    got=$(echo "$out" | sed -n 's/^generated: //p')
    if [ "$got" = "$host" ]; then echo "tokens: equal to the host's ($n)"; else echo "tokens: DIFFER from the host's: $host"; fi
    echo "== chunk $c: decode to ~1000 positions"
    RLX_CUDA_KERNEL_TIMES=1 "$B/cuda_llm" "$B/art$c" gemma 1024 "$prompt" 1000 > "$OUT/kernels-chunk$c.txt"
    grep -v "^generated" "$OUT/kernels-chunk$c.txt" | head -16 || true
    tail -1 "$OUT/kernels-chunk$c.txt"
  done
  long=$(cat "$B/prompt512.txt"); host512=$(cat "$B/host512.txt")
  for c in 128 8 128bf16; do
    echo "== chunk $c: prefill of 512 tokens, then 16 tokens"
    out=$("$B/cuda_llm" "$B/art$c" gemma 1024 "$long" 16)
    echo "$out" | grep -v "^generated"
    got=$(echo "$out" | sed -n 's/^generated: //p')
    # (bf16 operands change the logits' last bits: its tokens may part from the host's f32 ones.)
    if [ "$got" = "$host512" ]; then echo "tokens: equal to the host's (16)"; else echo "tokens: DIFFER from the host's: $host512 vs $got"; fi
  done
  RLX_CUDA_KERNEL_TIMES=1 "$B/cuda_llm" "$B/art128" gemma 1024 "$long" 2 > "$OUT/kernels-chunk128.txt" || true
  p=$(echo "$prompt" | tr ',' '\n' | wc -l)
  echo "== PyTorch (prompt $p): decode 128 and 1000 tokens"
  if [ "${TORCH:-1}" = 1 ]; then
    W="--weights $S/gemma.weights.bin --tensors $B/tensors.json --prompt $B/prompt.txt --host $B/host.txt"
    python3 "$B/bench_gemma_torch.py" "$B/config.json" "$p" 128 $W || echo "torch bench failed"
    python3 "$B/bench_gemma_torch.py" "$B/config.json" "$p" 1000 $W || echo "torch bench failed"
  fi
  if [ "${TORCH_PREFILL:-1}" = 1 ]; then
    echo "== PyTorch: prefill of 512 tokens"
    python3 "$B/bench_gemma_torch.py" "$B/config.json" 512 0 --weights "$S/gemma.weights.bin" --tensors "$B/tensors.json" --prefill "$B/prompt512.txt" || echo "torch prefill bench failed"
  fi
} 2>&1 | tee "$OUT/h200-llm.log"
