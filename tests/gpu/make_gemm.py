#!/usr/bin/env python3
"""Write one-matmul ONNX models of MiniLM's matmul shapes (seq 128): x[batch, 128, K] @ W + bias, W
stored as torch's Linear weight [N, K] behind a Transpose (as MiniLM's are: both operands contiguous
along K), with MiniLM's erf GELU after the FFN-up one.

    make_gemm.py --out DIR [--batch 8 32] [--small]

Cases (NAME = gemm_bB_KxN[_gelu]): K×N ∈ {384×384 (Q/K/V/output), 384×1536 + GELU (FFN up),
1536×384 (FFN down), 384×1152 (Q, K and V as one matmul)} at each batch. `arrays(name)` regenerates a case's x, W [N, K] and bias from a
fixed seed (tests/gpu/bench_gemm.py does that on the GPU machine rather than carrying them; onnx is
imported only to write models).
--small writes gemm_small (x[2, 64, 96] @ W[96, 128] + bias + GELU, then a second matmul over
K = 128, N = 64, a third over K = 64, N = 192): whole 128×64 tiles (the first two), 128×96, 64×96 and
64×48 ones (the third), small enough for tests/gpu/emulate_cuda.py; and gemm_heads (an attention
context [2, 4, 64, 32] transposed and reshaped to [2, 64, 128], @ W[128, 192] + bias: the matmul reads
its rows across heads); and gemm_block (BERT's feed-forward block on x: LayerNorm, a Linear of
N = 128 + GELU, one of N = 96, the norm's output added back) and gemm_attn (self-attention on x: Q, K,
V Linears, two heads of 32, softmax(Q·Kᵀ / √32)·V, an output Linear; gemm_attn_split: the scale
split as 32^-¼ on Q and on K, as PyTorch's exported attention has it); gemm_block_wide (gemm_block
on x2[2, 64, 128] with Linears of N = 256 + GELU and N = 128: whole wgmma K slices, the operands of
both matmuls bf16 in memory under --precision bf16).
"""
from __future__ import annotations

import argparse
import os
import zlib

import numpy as np

# (384 × 1152: a layer's Q, K and V projections as one matmul, the weights concatenated along N —
# rlx_opt::merge_matmuls' `Form::Columns`.)
SHAPES = [(384, 384, False), (384, 1536, True), (1536, 384, False), (384, 1152, False)]
SEQ = 128


def name_of(b: int, k: int, n: int, gelu: bool) -> str:
    return f"gemm_b{b}_{k}x{n}" + ("_gelu" if gelu else "")


def parse(name: str):
    """(batch, K, N, gelu) of a case name."""
    p = name.split("_")
    k, n = p[2].split("x")
    return int(p[1][1:]), int(k), int(n), name.endswith("_gelu")


def arrays(name: str):
    """x [batch, 128, K], W [N, K], bias [N] (f32, N(0, 1) inputs, weights scaled by 1/sqrt(K))."""
    b, k, n, _ = parse(name)
    r = np.random.RandomState(zlib.crc32(name.encode()))
    x = r.randn(b, SEQ, k).astype(np.float32)
    w = (r.randn(n, k) / np.sqrt(k)).astype(np.float32)
    bias = r.randn(n).astype(np.float32)
    return x, w, bias


def gelu_nodes(x: str, out: str, p: str):
    """MiniLM's GELU: 0.5 · x · (1 + erf(x / sqrt(2)))."""
    from onnx import helper

    return [
        helper.make_node("Div", [x, f"{p}sqrt2"], [f"{p}g0"]),
        helper.make_node("Erf", [f"{p}g0"], [f"{p}g1"]),
        helper.make_node("Add", [f"{p}g1", f"{p}one"], [f"{p}g2"]),
        helper.make_node("Mul", [x, f"{p}g2"], [f"{p}g3"]),
        helper.make_node("Mul", [f"{p}g3", f"{p}half"], [out]),
    ]


def gelu_inits(p: str):
    from onnx import numpy_helper

    c = lambda v, n: numpy_helper.from_array(np.array(v, dtype=np.float32), p + n)
    return [c(np.sqrt(2.0), "sqrt2"), c(1.0, "one"), c(0.5, "half")]


def linear(x: str, out: str, w: np.ndarray, bias: np.ndarray, gelu: bool, p: str):
    """x @ transpose(w) + bias (+ GELU): nodes and initializers."""
    from onnx import helper, numpy_helper

    inits = [numpy_helper.from_array(w, p + "w"), numpy_helper.from_array(bias, p + "b")]
    y = p + "y" if gelu else out
    nodes = [
        helper.make_node("Transpose", [p + "w"], [p + "wt"], perm=[1, 0]),
        helper.make_node("MatMul", [x, p + "wt"], [p + "mm"]),
        helper.make_node("Add", [p + "mm", p + "b"], [y]),
    ]
    if gelu:
        nodes += gelu_nodes(y, out, p)
        inits += gelu_inits(p)
    return nodes, inits


def save(path: str, nodes, inits, ins, outs) -> None:
    import onnx
    from onnx import helper

    m = helper.make_model(helper.make_graph(nodes, "gemm", ins, outs, inits), opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)


def ffn_block(path: str, r, d: int, f: int):
    """BERT's feed-forward block on x[2, 64, d]: LayerNorm, a Linear of N = f + GELU, one of N = d, the
    norm's output added back (the residual) — its weights drawn from `r` in that order."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    gamma, beta = (1 + r.randn(d) / 10).astype(np.float32), (r.randn(d) / 10).astype(np.float32)
    n1, i1 = linear("n", "f", (r.randn(f, d) / 10).astype(np.float32), r.randn(f).astype(np.float32), True, "b1_")
    n2, i2 = linear("f", "o", (r.randn(d, f) / 10).astype(np.float32), r.randn(d).astype(np.float32), False, "b2_")
    norm = [numpy_helper.from_array(gamma, "gamma"), numpy_helper.from_array(beta, "beta")]
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["n"], axis=-1, epsilon=1e-5)] + n1 + n2 + [helper.make_node("Add", ["o", "n"], ["y"])]
    ins = [helper.make_tensor_value_info("x", T.FLOAT, [2, 64, d])]
    outs = [helper.make_tensor_value_info("y", T.FLOAT, [2, 64, d])]
    save(path, nodes, norm + i1 + i2, ins, outs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, nargs="*", default=[8, 32])
    ap.add_argument("--small", action="store_true")
    a = ap.parse_args()
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    os.makedirs(a.out, exist_ok=True)
    for b in a.batch:
        for k, n, gelu in SHAPES:
            name = name_of(b, k, n, gelu)
            _, w, bias = arrays(name)
            nodes, inits = linear("x", "y", w, bias, gelu, "l_")
            ins = [helper.make_tensor_value_info("x", T.FLOAT, [b, SEQ, k])]
            outs = [helper.make_tensor_value_info("y", T.FLOAT, [b, SEQ, n])]
            save(os.path.join(a.out, name + ".onnx"), nodes, inits, ins, outs)
            print(name)
    if a.small:
        r = np.random.RandomState(11)
        x = r.randn(2, 64, 96).astype(np.float32)
        n1, i1 = linear("x", "h", (r.randn(128, 96) / 10).astype(np.float32), r.randn(128).astype(np.float32), True, "l1_")
        n2, i2 = linear("h", "h2", (r.randn(64, 128) / 10).astype(np.float32), r.randn(64).astype(np.float32), False, "l2_")
        n3, i3 = linear("h2", "y", (r.randn(192, 64) / 10).astype(np.float32), r.randn(192).astype(np.float32), False, "l3_")
        ins = [helper.make_tensor_value_info("x", T.FLOAT, [2, 64, 96])]
        outs = [helper.make_tensor_value_info("y", T.FLOAT, [2, 64, 192])]
        save(os.path.join(a.out, "gemm_small.onnx"), n1 + n2 + n3, i1 + i2 + i3, ins, outs)
        np.save(os.path.join(a.out, "x.npy"), x)
        # gemm_heads: an attention context [2, 4 heads, 64, 32] back to [2, 64, 128] (Transpose +
        # Reshape, read by the matmul across heads: k / 32 and k % 32), then a Linear of N = 192.
        ctx = r.randn(2, 4, 64, 32).astype(np.float32)
        n3, i3 = linear("c", "y", (r.randn(192, 128) / 10).astype(np.float32), r.randn(192).astype(np.float32), False, "l_")
        shape = numpy_helper.from_array(np.array([2, 64, 128], dtype=np.int64), "shape")
        nodes = [helper.make_node("Transpose", ["ctx"], ["ct"], perm=[0, 2, 1, 3]), helper.make_node("Reshape", ["ct", "shape"], ["c"])] + n3
        ins = [helper.make_tensor_value_info("ctx", T.FLOAT, [2, 4, 64, 32])]
        outs = [helper.make_tensor_value_info("y", T.FLOAT, [2, 64, 192])]
        save(os.path.join(a.out, "gemm_heads.onnx"), nodes, [shape] + i3, ins, outs)
        np.save(os.path.join(a.out, "ctx.npy"), ctx)
        # gemm_block: BERT's feed-forward block on x — LayerNorm, a Linear + GELU, a Linear, the
        # norm's output added back (the residual): the norm's output read by a matmul and by an add.
        ffn_block(os.path.join(a.out, "gemm_block.onnx"), r, 96, 128)
        ins = [helper.make_tensor_value_info("x", T.FLOAT, [2, 64, 96])]
        # gemm_attn: self-attention on x — Q, K, V Linears of 64 (two heads of 32), softmax(Q·Kᵀ / √32)·V,
        # the heads joined and an output Linear of N = 96: the projections' outputs read by the attention;
        # gemm_attn_split: the same with the scale split as PyTorch's exported attention splits it,
        # 32^-¼ on Q and on K before their product.
        for name, split in [("gemm_attn", False), ("gemm_attn_split", True)]:
            nodes, inits = [], []
            heads = numpy_helper.from_array(np.array([2, 64, 2, 32], dtype=np.int64), "heads")
            joined = numpy_helper.from_array(np.array([2, 64, 64], dtype=np.int64), "joined")
            scale = numpy_helper.from_array(np.array(32 ** (-0.25 if split else -0.5), dtype=np.float32), "scale")
            for t in "qkv":
                n, i = linear("x", t, (r.randn(64, 96) / 10).astype(np.float32), r.randn(64).astype(np.float32), False, f"{t}_")
                nodes += n + [helper.make_node("Reshape", [t, "heads"], [t + "r"]), helper.make_node("Transpose", [t + "r"], [t + "h"], perm=[0, 2, 1, 3] if t != "k" else [0, 2, 3, 1])]
                inits += i
            if split:
                nodes += [helper.make_node("Mul", ["qh", "scale"], ["qs"]), helper.make_node("Mul", ["kh", "scale"], ["ks"]), helper.make_node("MatMul", ["qs", "ks"], ["s"])]
            else:
                nodes += [helper.make_node("MatMul", ["qh", "kh"], ["s0"]), helper.make_node("Mul", ["s0", "scale"], ["s"])]
            no, io = linear("c", "y", (r.randn(96, 64) / 10).astype(np.float32), r.randn(96).astype(np.float32), False, "o_")
            nodes += [
                helper.make_node("Softmax", ["s"], ["p"], axis=-1),
                helper.make_node("MatMul", ["p", "vh"], ["ch"]),
                helper.make_node("Transpose", ["ch"], ["ct"], perm=[0, 2, 1, 3]),
                helper.make_node("Reshape", ["ct", "joined"], ["c"]),
            ] + no
            outs = [helper.make_tensor_value_info("y", T.FLOAT, [2, 64, 96])]
            save(os.path.join(a.out, name + ".onnx"), nodes, [heads, joined, scale] + inits + io, ins, outs)
        # gemm_block_wide: gemm_block at widths the wgmma tiles take (K a multiple of 64) on x2[2, 64,
        # 128]: LayerNorm, a Linear of N = 256 + GELU, one of N = 128 (K = 256: four 64-wide slices),
        # the residual — both matmuls' operands stored as bf16 under --precision bf16.
        r = np.random.RandomState(12)
        np.save(os.path.join(a.out, "x2.npy"), r.randn(2, 64, 128).astype(np.float32))
        ffn_block(os.path.join(a.out, "gemm_block_wide.onnx"), r, 128, 256)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
