#!/usr/bin/env python3
"""A tiny LLaMA GGUF (written by llama.cpp's `gguf` package) whose next token is a function of the
current token alone, chosen here, and that carries a SentencePiece vocabulary — so the text a
greedy run must print is known by construction, not by running any tokenizer or model:

  make_speller.py OUT.gguf      writes the model; prints JSON {token text: id} on stdout

Construction: one layer whose attention output and feed-forward down projection are zero, so the
last position's hidden state is its token's embedding; embeddings are one-hot (hidden = 128 >=
vocab), norms are 1, and `output.weight[j, t]` is the logit of token j after token t (times
sqrt(hidden), RMSNorm's gain on a one-hot row). So:

- the prompt "a b" (SentencePiece: "<s>", "▁a", "▁b") continues greedily as
  "▁price" "▁is" "▁5" <0xE2> <0x82> <0xAC> "." "</s>": the text " price is 5€." — the euro sign spelled
  by three byte tokens — then the end-of-generation token;
- after "x" or "y" the logits are g for "x" and 0.9 g for "y", g = 1 / sqrt(1/128 + 1e-6) (RMSNorm of
  a one-hot row), 0 for every other token: a sampler's draws between two known logits;
- the context is 32 positions.
"""
import json
import sys

import numpy as np
import gguf

SPECIAL = [("<unk>", 2), ("<s>", 3), ("</s>", 3)]  # token types: 2 unknown, 3 control
BYTES = [0x0A, 0xE2, 0x82, 0xAC]
WORDS = ["▁", "a", "b", "x", "y", ".", "▁a", "▁b", "▁price", "▁is", "▁5", "p", "r", "i", "c", "e", "s", "5"]
CHAIN = ["▁b", "▁price", "▁is", "▁5", "<0xE2>", "<0x82>", "<0xAC>", ".", "</s>"]


def main() -> None:
    out = sys.argv[1]
    tokens = [t for t, _ in SPECIAL] + [f"<0x{b:02X}>" for b in BYTES] + WORDS
    types = [k for _, k in SPECIAL] + [6] * len(BYTES) + [1] * len(WORDS)  # 6 byte, 1 normal
    # SentencePiece merges the pair whose joined token scores highest: longer words score higher.
    scores = [0.0] * (len(SPECIAL) + len(BYTES)) + [float(len(w)) for w in WORDS]
    ids = {t: i for i, t in enumerate(tokens)}
    V, H, L, nh, d, F = len(tokens), 128, 1, 4, 32, 64
    assert V <= H

    out_w = np.zeros((V, H), np.float32)
    for cur, nxt in zip(CHAIN, CHAIN[1:]):
        out_w[ids[nxt], ids[cur]] = 1.0
    for cur in ("x", "y"):
        out_w[ids["x"], ids[cur]] = 1.0
        out_w[ids["y"], ids[cur]] = 0.9

    w = gguf.GGUFWriter(out, "llama")
    w.add_block_count(L)
    w.add_context_length(32)
    w.add_embedding_length(H)
    w.add_feed_forward_length(F)
    w.add_head_count(nh)
    w.add_head_count_kv(nh)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(ids["<s>"])
    w.add_eos_token_id(ids["</s>"])
    w.add_unk_token_id(ids["<unk>"])
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    zeros = lambda r, c: np.zeros((r, c), np.float32)
    ones = lambda n: np.ones(n, np.float32)
    emb = np.zeros((V, H), np.float32)
    emb[np.arange(V), np.arange(V)] = 1.0
    w.add_tensor("token_embd.weight", emb)
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(H))
        for m in ("attn_q", "attn_k", "attn_v"):
            w.add_tensor(p + m + ".weight", zeros(nh * d, H))
        w.add_tensor(p + "attn_output.weight", zeros(H, nh * d))
        w.add_tensor(p + "ffn_norm.weight", ones(H))
        w.add_tensor(p + "ffn_gate.weight", zeros(F, H))
        w.add_tensor(p + "ffn_up.weight", zeros(F, H))
        w.add_tensor(p + "ffn_down.weight", zeros(H, F))
    w.add_tensor("output_norm.weight", ones(H))
    w.add_tensor("output.weight", out_w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    json.dump(ids, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
