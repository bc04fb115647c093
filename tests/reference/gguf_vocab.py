#!/usr/bin/env python3
"""Dumps a GGUF file's `tokenizer.ggml.*` metadata as JSON, read by llama.cpp's own `gguf` package
(independent of rlxc's GGUF reader). Keys are the metadata names without the `tokenizer.ggml.`
prefix; an absent key is null.

usage: gguf_vocab.py MODEL.gguf OUT.json
"""

import json
import sys

import gguf

KEYS = [
    "model", "pre", "tokens", "scores", "token_type", "merges", "bos_token_id", "eos_token_id",
    "eot_token_id", "unknown_token_id", "padding_token_id", "add_bos_token", "add_eos_token",
    "add_space_prefix",
]


def main():
    model, out = sys.argv[1], sys.argv[2]
    r = gguf.GGUFReader(model)
    d = {}
    for k in KEYS:
        f = r.fields.get("tokenizer.ggml." + k)
        v = None if f is None else f.contents()
        if isinstance(v, list) and v and isinstance(v[0], float):
            v = [float(x) for x in v]
        d[k] = v
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(d, fh, ensure_ascii=False)


if __name__ == "__main__":
    main()
