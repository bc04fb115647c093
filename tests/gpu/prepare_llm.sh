#!/usr/bin/env bash
# On the development machine: what tests/gpu/run_llm.sh needs on the GPU machine to run Gemma 3 270M
# (Q4_K_M GGUF) compiled for --target cuda, split so that the device tool carries it (64 MiB per
# call, so the 247 MB weights blob travels in parts: OUT_DIR/part1 … partK, one per call; OUT_DIR/base
# travels with the first):
#   base/cuda_llm            runtime-min's example (greedy generation on a stateful CUDA artifact)
#   base/art8/, base/art1/   rlxc compile --target cuda --dim context=1024 with --dim chunk=8 (prefill in
#                            chunks of 8; decode runs the 8-row step) and chunk=1 (one token per call),
#                            without their weights: the two blobs are the same bytes (checked here)
#   base/prompt.txt          the prompt's token ids; base/host.txt the tokens `rlxc run --target host`
#                            generates from it (the reference the GPU's tokens must equal)
#   base/config.json         the model's shapes for tests/gpu/bench_gemma_torch.py
#   base/tensors.json        each GGUF tensor's type, shape and offset in the weights blob, and
#   base/pylib/gguf          the gguf package: PyTorch gets the same dequantized weights
#   base/run_llm.sh, base/bench_gemma_torch.py
#   partI/weights.partI      consecutive slices of the weights blob (cat them in order)
# Usage: tests/gpu/prepare_llm.sh [OUT_DIR]   (from the repository root; needs target/release/rlxc and
# the model in build/models, which `make models-llm` fetches)
set -euo pipefail
D=${1:-.devcarry/llm}
R=target/release/rlxc
M=build/models/gemma-3-270m-q4_k_m.gguf
N=${N:-128}
rm -rf "$D" && mkdir -p "$D/base"
cargo build --release -p rlx-rt --features cuda --example cuda_llm
cp target/release/examples/cuda_llm tests/gpu/run_llm.sh tests/gpu/bench_gemma_torch.py "$D/base/"
for c in 8 1 128; do
  $R compile "$M" --target cuda --name gemma --dim context=1024 --dim chunk=$c -o "$D/base/art$c" >/dev/null
done
cmp "$D/base/art8/gemma.weights.bin" "$D/base/art1/gemma.weights.bin"
cmp "$D/base/art8/gemma.weights.bin" "$D/base/art128/gemma.weights.bin"
# The prefill artifact with its matmuls on the tensor cores (bf16 operands, f32 accumulation).
$R compile "$M" --target cuda --name gemma --dim context=1024 --dim chunk=128 --precision bf16 -o "$D/base/art128bf16" >/dev/null
cmp "$D/base/art8/gemma.weights.bin" "$D/base/art128bf16/gemma.weights.bin"
rm "$D/base/art128bf16/gemma.weights.bin"
mv "$D/base/art8/gemma.weights.bin" "$D/weights.bin"
rm "$D/base/art1/gemma.weights.bin" "$D/base/art128/gemma.weights.bin"
# The prompt and the host's greedy tokens (the compiled CPU artifact with f32 activations, as the GPU
# computes; it stops early at an end-of-generation token, so the GPU's first tokens are compared with
# however many it gave).
$R run "$M" --prompt "The history of the printing press begins" -n "$N" --show-ids --dim context=1024 --target host --exact-activations \
  2> "$D/host.err" >/dev/null
sed -n 's/^prompt ids: //p' "$D/host.err" > "$D/base/prompt.txt"
sed -n 's/^generated ids: //p' "$D/host.err" > "$D/base/host.txt"
test -s "$D/base/prompt.txt" && test -s "$D/base/host.txt"
# The prefill prompt: 512 ids (the prompt and its generation repeated), and the host's next 16 tokens after it.
ids=$(cat "$D/base/prompt.txt" "$D/base/host.txt" | tr ',' '\n')
for _ in 1 2 3 4 5 6; do ids="$ids"$'\n'"$ids"; done
echo "$ids" | head -512 | paste -sd, > "$D/base/prompt512.txt"
$R run "$M" --tokens "$(cat "$D/base/prompt512.txt")" -n 16 --show-ids --dim context=1024 --target host --exact-activations \
  2> "$D/host.err" >/dev/null
sed -n 's/^generated ids: //p' "$D/host.err" > "$D/base/host512.txt"
test -s "$D/base/host512.txt"
rm "$D/host.err"
# The shapes for PyTorch's Gemma3TextConfig, from the GGUF's metadata.
${RLX_PY:-.venv/bin/python} - "$M" "$D/base/config.json" <<'PY'
import json, sys, gguf
r = gguf.GGUFReader(sys.argv[1])
f = lambda k: r.fields[k].parts[r.fields[k].data[0]].tolist()[0]
vocab = len(r.fields["tokenizer.ggml.tokens"].data)
json.dump({"vocab_size": vocab, "hidden_size": f("gemma3.embedding_length"), "intermediate_size": f("gemma3.feed_forward_length"),
           "num_hidden_layers": f("gemma3.block_count"), "num_attention_heads": f("gemma3.attention.head_count"),
           "num_key_value_heads": f("gemma3.attention.head_count_kv"), "head_dim": f("gemma3.attention.key_length"),
           "rms_norm_eps": f("gemma3.attention.layer_norm_rms_epsilon"), "sliding_window": f("gemma3.attention.sliding_window"),
           "max_position_embeddings": 32768, "query_pre_attn_scalar": f("gemma3.attention.key_length")}, open(sys.argv[2], "w"), indent=1)
PY
# The GGUF's tensors lie verbatim in the CUDA weights blob (block weights keep their bytes): their
# offsets there (base/tensors.json) and the gguf package (base/pylib, its dequantizers) let
# bench_gemma_torch.py give PyTorch the same dequantized weights without carrying the GGUF too.
${RLX_PY:-.venv/bin/python} - "$M" "$D/weights.bin" "$D/base/tensors.json" <<'PY'
import json, sys, gguf
r = gguf.GGUFReader(sys.argv[1])
blob = open(sys.argv[2], "rb").read()
table = []
for t in r.tensors:
    b = bytes(t.data.tobytes())
    at = blob.find(b[:4096])
    while at >= 0 and blob[at:at + len(b)] != b:
        at = blob.find(b[:4096], at + 1)
    if at < 0:
        sys.exit(f"tensor {t.name} is not in the weights blob")
    table.append({"name": t.name, "type": int(t.tensor_type), "shape": [int(d) for d in reversed(t.shape.tolist())], "offset": at, "bytes": len(b)})
json.dump(table, open(sys.argv[3], "w"))
PY
mkdir -p "$D/base/pylib" && cp -r "$(${RLX_PY:-.venv/bin/python} -c 'import gguf, os; print(os.path.dirname(gguf.__file__))')" "$D/base/pylib/"
rm -rf "$D/base/pylib/gguf/__pycache__" "$D/base/pylib/gguf/scripts"
# Parts that fit a call beside the working tree and base/.
split -b 40M -d -a 1 "$D/weights.bin" "$D/weights.part"
rm "$D/weights.bin"
i=0
for p in "$D"/weights.part*; do i=$((i + 1)); mkdir -p "$D/part$i"; mv "$p" "$D/part$i/"; done
du -sh "$D"/*
