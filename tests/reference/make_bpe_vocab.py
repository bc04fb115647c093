#!/usr/bin/env python3
"""Writes a small byte-level BPE vocabulary as a vocabulary-only GGUF (llama.cpp's `gguf` package),
the way Qwen 2 / LLaMA 3 files carry theirs: `tokenizer.ggml.model = gpt2`, the 256 GPT-2 byte
characters, merges learned here by plain BPE training on a built-in corpus, control tokens
(`<|endoftext|>`, `<|im_start|>`, `<|im_end|>`) and one user-defined token (`<tool_call>`), and one normal token that no merge reaches.

llama.cpp loads it with vocab_only=True (the architecture's hyper-parameters are set to tiny values
so its loader accepts the file; there are no tensors).

usage: make_bpe_vocab.py OUT.gguf --pre qwen2|llama-bpe [--merges N]
"""

import argparse
from collections import Counter

import gguf

CORPUS = """
The quick brown fox jumps over the lazy dog. It's a truth universally acknowledged that a single
man in possession of a good fortune must be in want of a wife. We'll see what they've done, and
I'm sure you're right: don't worry. Numbers like 1234567890, 3.14159 and 2025-01-31 appear too.
def tokenize(text):
    return [t for t in text.split() if t]
for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }
Café, naïve, déjà vu, Ångström, São Paulo, Zürich, façade, coöperate.
日本語のテキストと中文文本，还有한국어 텍스트。
Emoji: 😀 🎉 👍🏽 🇫🇷 and symbols ∑ ∫ √ ≤ ≥ ≠ € £ ¥.
    indented line with tabs\tand\ttabs
Hello world! Hello, World? hello    world... HELLO WORLD
"""


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def words(text):
    """Whitespace-led words: a rough split that is only used to learn merges."""
    out, cur = [], ""
    for ch in text:
        if ch.isspace() and cur and not cur[-1].isspace():
            out.append(cur)
            cur = ch
        else:
            cur += ch
    if cur:
        out.append(cur)
    return out


def train(n_merges):
    b2u = bytes_to_unicode()
    counts = Counter(tuple(b2u[b] for b in w.encode("utf-8")) for w in words(CORPUS))
    merges = []
    for _ in range(n_merges):
        pairs = Counter()
        for w, c in counts.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(best)
        merged = Counter()
        for w, c in counts.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        counts = merged
    return b2u, merges


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--pre", required=True, choices=["qwen2", "llama-bpe"])
    ap.add_argument("--merges", type=int, default=400)
    a = ap.parse_args()

    b2u, merges = train(a.merges)
    tokens = [b2u[b] for b in sorted(b2u)]
    seen = set(tokens)
    for l, r in merges:
        if l + r not in seen:
            seen.add(l + r)
            tokens.append(l + r)
    # A token no merge sequence reaches: LLaMA 3's pre-tokenizer emits a word that is a whole
    # token as is (llama.cpp's ignore_merges), Qwen 2's merges it from its pieces.
    tokens.append("".join(b2u[b] for b in " supercalifragilistic".encode("utf-8")))
    types = [gguf.TokenType.NORMAL] * len(tokens)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    if a.pre == "llama-bpe":
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    first_special = len(tokens)
    tokens += specials
    types += [gguf.TokenType.CONTROL] * len(specials)
    tokens.append("<tool_call>")
    types.append(gguf.TokenType.USER_DEFINED)

    arch = "qwen2" if a.pre == "qwen2" else "llama"
    w = gguf.GGUFWriter(a.out, arch)
    w.add_name(f"tiny {a.pre} vocabulary")
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(16)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_count(8)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(a.pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([f"{l} {r}" for l, r in merges])
    if a.pre == "qwen2":
        w.add_bos_token_id(first_special)
        w.add_eos_token_id(first_special + 2)
        w.add_pad_token_id(first_special)
        w.add_add_bos_token(False)
    else:
        w.add_bos_token_id(first_special)
        w.add_eos_token_id(first_special + 2)
        w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
