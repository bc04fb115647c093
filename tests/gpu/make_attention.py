#!/usr/bin/env python3
"""Write attention.onnx and its inputs (q, k, v, mask, mask2, qt, kt, vt, qs, ks, vs .npy): attention
patterns the CUDA target fuses into one kernel each (scores, softmax and probabilities × values;
rlx-opt's plan/attention.rs, the PTX writer's nvptx/attention.rs), at a head dimension and sequence
length that are not 32 / 128, so the warps' lane loops and the block's row tiles end part-way,
for compiler/rlxc/tests/cuda.rs.

    make_attention.py --out DIR

Outputs (each softmax over the last axis):
  att_mask   softmax(q[2,3,40,24] @ transpose(k) · 0.2 + mask[2,1,1,40]) @ v[2,3,40,24]
             (mask: 0 or -10000 per key, as BERT's extended attention mask)
  att_plain  softmax(q @ transpose(k)) @ v                 no scale, no mask
  att_heads  softmax(qt @ kt / √24 + mask2[2,1,40,40]) @ vt  q, k, v given as [2, 40, 3, d] and
             transposed to heads (the ONNX exporters' layout); values 20 wide (not the head dim); the
             mask per (row, key), as torch's exported BERT expands it
  att_long   softmax(qs[1,2,20,24] @ transpose(ks[1,2,600,24]) · 0.2) @ vs[1,2,600,24]
             600 keys: the keys and values do not fit in shared memory (read from global memory)
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    r = np.random.RandomState(11)
    f = lambda *s: r.randn(*s).astype(np.float32)
    ins = {
        "q": f(2, 3, 40, 24), "k": f(2, 3, 40, 24), "v": f(2, 3, 40, 24),
        "mask": np.where(r.rand(2, 1, 1, 40) < 0.25, -10000.0, 0.0).astype(np.float32),
        "mask2": np.where(r.rand(2, 1, 40, 40) < 0.25, -10000.0, 0.0).astype(np.float32),
        "qt": f(2, 40, 3, 24), "kt": f(2, 40, 3, 24), "vt": f(2, 40, 3, 20),
        "qs": f(1, 2, 20, 24), "ks": f(1, 2, 600, 24), "vs": f(1, 2, 600, 24),
    }
    nodes, inits = [], [numpy_helper.from_array(np.array(0.2, np.float32), "s02"), numpy_helper.from_array(np.array(np.sqrt(24.0), np.float32), "sq24")]
    n = lambda op, i, o, **kw: nodes.append(helper.make_node(op, i, [o], **kw))

    def attention(tag: str, q: str, k: str, v: str, scale: tuple[str, str] | None, mask: str | None) -> None:
        n("Transpose", [k], f"{tag}_kT", perm=[0, 1, 3, 2])
        n("MatMul", [q, f"{tag}_kT"], f"{tag}_s")
        s = f"{tag}_s"
        if scale:
            n(scale[0], [s, scale[1]], f"{tag}_sc")
            s = f"{tag}_sc"
        if mask:
            n("Add", [s, mask], f"{tag}_m")
            s = f"{tag}_m"
        n("Softmax", [s], f"{tag}_p", axis=-1)
        n("MatMul", [f"{tag}_p", v], tag)

    attention("att_mask", "q", "k", "v", ("Mul", "s02"), "mask")
    attention("att_plain", "q", "k", "v", None, None)
    for x in ("qt", "kt", "vt"):
        n("Transpose", [x], f"{x}_h", perm=[0, 2, 1, 3])
    attention("att_heads", "qt_h", "kt_h", "vt_h", ("Div", "sq24"), "mask2")
    attention("att_long", "qs", "ks", "vs", ("Mul", "s02"), None)
    outs = [("att_mask", [2, 3, 40, 24]), ("att_plain", [2, 3, 40, 24]), ("att_heads", [2, 3, 40, 20]), ("att_long", [1, 2, 20, 24])]
    g = helper.make_graph(nodes, "attention", [helper.make_tensor_value_info(k, T.FLOAT, list(x.shape)) for k, x in ins.items()],
                          [helper.make_tensor_value_info(o, T.FLOAT, s) for o, s in outs], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    os.makedirs(a.out, exist_ok=True)
    onnx.save(m, os.path.join(a.out, "attention.onnx"))
    for k, x in ins.items():
        np.save(os.path.join(a.out, f"{k}.npy"), x)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
