#!/usr/bin/env python3
"""Write deterministic BERT inputs: input_ids.npy, attention_mask.npy, token_type_ids.npy.

    make_inputs.py --seq N [--batch B] [--seed S] --out DIR

input_ids are int64 in [1000, 2000) from a fixed seed, with [CLS]=101 first and [SEP]=102 last;
attention_mask is all ones and token_type_ids all zeros (both int64), shape [B, N].
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.seq < 2:
        ap.error("--seq must be at least 2 ([CLS] and [SEP])")

    rng = np.random.default_rng(a.seed)
    ids = rng.integers(1000, 2000, size=(a.batch, a.seq), dtype=np.int64)
    ids[:, 0] = 101
    ids[:, -1] = 102
    os.makedirs(a.out, exist_ok=True)
    np.save(os.path.join(a.out, "input_ids.npy"), ids)
    np.save(os.path.join(a.out, "attention_mask.npy"), np.ones_like(ids))
    np.save(os.path.join(a.out, "token_type_ids.npy"), np.zeros_like(ids))
    print(f"make_inputs: [{a.batch}, {a.seq}] -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
