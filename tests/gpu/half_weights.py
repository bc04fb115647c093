#!/usr/bin/env python3
"""The weights blob of a `--precision bf16|fp16` CUDA artifact from its f32 twin's: the LIR's f32
weights, byte for byte, followed by the 16-bit copies the manifest lists (`half_weights`: dtype, f32
source byte `src`, `values`, the copy's byte `dst`; the PTX writer's nvptx/half_weights.rs), each
rounded to nearest even as the writer rounds — so the carried artifacts need only the f32 blob. A
`--precision tf32` artifact's: its f32 twin's with the weights its manifest lists in `tf32_operands`
(base "weights": byte `offset`, `shape`) rounded to tf32 in place, as nvptx/half_activations.rs rounds
them (`cvt.rna`: to nearest, ties away from zero).

    half_weights.py check F32_BLOB MANIFEST BLOB   exit 1 unless BLOB is F32_BLOB plus the listed copies
"""
import json
import sys

import numpy as np


def with_copies(f32: bytes, manifest: dict) -> bytes:
    """`f32` (the f32 twin's weights) followed by the copies `manifest` lists (zeros between them)."""
    copies = manifest.get("half_weights", [])
    out = bytearray(f32)
    for t in manifest.get("tf32_operands", []):
        if t["base"] != "weights":
            continue
        x = np.frombuffer(out, dtype="<u4", count=int(np.prod(t["shape"])), offset=t["offset"]).copy()
        nan = (x & 0x7FFFFFFF) > 0x7F800000
        r = np.where(nan, x, (x.astype(np.uint64) + 0x1000) & 0xFFFFE000).astype("<u4")
        out[t["offset"]:t["offset"] + r.nbytes] = r.tobytes()
    for c in copies:
        x = np.frombuffer(f32, dtype="<f4", count=c["values"], offset=c["src"])
        if c["dtype"] == "bf16":
            u = x.view("<u4").astype(np.uint64)
            h = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
        else:
            h = x.astype("<f2").view("<u2")
        out.extend(b"\0" * (c["dst"] - len(out)))
        out.extend(h.tobytes())
    assert len(out) == manifest["weights_bytes"], (len(out), manifest["weights_bytes"])
    return bytes(out)


if __name__ == "__main__":
    _, cmd, f32, man, blob = sys.argv
    assert cmd == "check", cmd
    ok = with_copies(open(f32, "rb").read(), json.load(open(man))) == open(blob, "rb").read()
    print(f"{blob}: {'f32 twin + copies / rounding' if ok else 'DIFFERS from its f32 twin + copies / rounding'}")
    sys.exit(0 if ok else 1)
