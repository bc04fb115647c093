"""Block-quantized test data and its reference dequantization, by llama.cpp's `gguf` package.

Usage: gguf_blocks.py OUT_DIR [MODEL.gguf]

Writes, per case NAME: NAME.bin (the raw block bytes), NAME.f32 (gguf.quants.dequantize of them,
little-endian f32) and a line "NAME TYPE ROWS COLS" in OUT_DIR/cases.txt.
- quantized/<type>: random values quantized by gguf.quants.quantize (every type it can write);
- random/<type>: random bytes for every block type (scales set to finite f16), which exercises every
  bit of the layout, including the K-quants gguf cannot write;
- gemma/<type>: the first tensor of each type in MODEL.gguf (at most 64 rows of it), real weights.
"""
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as Q, GGUFReader
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

TYPES = [Q.F32, Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K]
# Byte offsets of each block type's f16 scale fields (set to finite values in the random cases).
F16_FIELDS = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
    Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208],
}


def write(out: Path, lines: list, name: str, qtype: Q, raw: np.ndarray, rows: int, cols: int) -> None:
    ref = dequantize(raw, qtype).astype("<f4").reshape(rows, cols)
    safe = name.replace("/", "_")
    raw.tofile(out / f"{safe}.bin")
    ref.tofile(out / f"{safe}.f32")
    lines.append(f"{safe} {qtype.name} {rows} {cols}")


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    lines: list = []
    rows, cols = 4, 512
    for t in TYPES:
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        try:
            raw = quantize(x, t)
        except NotImplementedError:
            continue  # gguf has no quantizer for this type (the K-quants): see random/<type>
        write(out, lines, f"quantized/{t.name}", t, np.asarray(raw), rows, cols)
    for t, fields in F16_FIELDS.items():
        block, size = GGML_QUANT_SIZES[t]
        nblocks = rows * cols // block
        raw = rng.integers(0, 256, size=(nblocks, size), dtype=np.uint8)
        for f in fields:
            raw[:, f:f + 2] = rng.uniform(-0.1, 0.1, size=nblocks).astype("<f2").view(np.uint8).reshape(nblocks, 2)
        write(out, lines, f"random/{t.name}", t, raw.reshape(rows, cols // block * size), rows, cols)
    if len(sys.argv) > 2:
        seen = set()
        for tensor in GGUFReader(sys.argv[2]).tensors:
            t = tensor.tensor_type
            if t in seen or tensor.data.ndim != 2:
                continue
            seen.add(t)
            data = np.asarray(tensor.data)[:64]
            n_rows = data.shape[0]
            n_cols = int(tensor.shape[0])  # ggml's ne[0]: values per row
            write(out, lines, f"gemma/{t.name}", t, np.ascontiguousarray(data), n_rows, n_cols)
    (out / "cases.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
