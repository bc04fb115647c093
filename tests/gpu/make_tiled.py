#!/usr/bin/env python3
"""Write tiled.onnx and its inputs (a.npy … e.npy): matmuls and reductions of awkward shapes that the
shader back end maps onto workgroup memory (tiled matmul at 16×16 per workgroup with 1×1, 2×2 and
4×4 outputs per invocation; row reductions with a shared-memory tree), for compiler/rlxc/tests/shader.rs.

    make_tiled.py --out DIR

Outputs:
  mm_odd   relu(a[3,37,53] @ w[53,29] + bias)      rows (3·37) and columns not multiples of 16, K = 53
  mm_bat   b[2,3,70,45] @ transpose(b2)[2,3,45,90]  both operands batched (the batch is the z grid)
  mm_r4    c[1024,100] @ w4[100,640]                4×4 outputs per invocation
  mm_r2    c[:256] @ w4                             2×2 outputs per invocation
  mm_i32   int32(round(8a)) @ int32 weight          integer accumulation (exact)
  sum12    reduce_sum(d[5,33,20], axes 1 and 2)     a nest of two reduction loops
  max_last reduce_max(e[4,6,100], last axis)
  mean_all reduce_mean(e) to a scalar               a kernel without a parallel loop

and splitk.onnx (inputs g.npy, h.npy): matmuls of few 16×16 tiles over a long K, which the PTX writer
splits inside the block, on the SIMT cores and on the tensor cores (K = 300 with a bias: slices of
4 × 32; K = 1100: 4 × 64; both end in a partial slice):
  mm_k300  g[40,300] @ w5[300,50] + bias5
  mm_k1100 h[20,1100] @ w6[1100,24]
  mm_k768  h[:, :768] @ w7[768,40]                 whole slices of 4 × 32 (unguarded staging)

and splitk_launch.onnx (inputs p.npy, q.npy): matmuls with few outputs over a long K, which the CUDA
target computes as 8 partial sums in a launch of their own, added in order by the matmul's kernel
(rlx-opt's plan/split_k.rs; RLX_CUDA_SPLIT_K):
  mm_sk2048  p[32,2048] @ w8[2048,48] + bias8 + p[:, :48]   parts of 256, the partial tiles one output per thread
  mm_sk1024  q[64,1024] @ w9[1024,256]                      parts of 128, the partial tiles 2×2 outputs per thread

and splitk_rows.onnx (inputs sx.npy, sy.npy, sr.npy): MiniLM batch 1's FFN down and attention output
projection, each followed by its residual and a LayerNorm (ONNX's LayerNormalization), whose row kernel
adds the matmul's partial sums itself with RLX_CUDA_SPLIT_K_ROWS (rlx-opt's plan/split_k.rs):
  ln_sk1536  LayerNorm(sx[128,1536] @ w10[1536,384] + b10 + sr[128,384])   parts of 192
  ln_sk384   LayerNorm(sy[128,384] @ w11[384,384] + b11 + sr)            parts of 48 (split only when
                                                                         RLX_CUDA_SPLIT_K_ROWS ≤ 384)

and splitk_wide.onnx (inputs wx.npy, wy.npy, wr.npy): the same two at 256 rows (98,304 outputs: more than
split K's 65,536), split by split_k_wide (RLX_CUDA_SPLIT_K_WIDE=P: P parts; the projection with
RLX_CUDA_SPLIT_K_ROWS ≤ 384):
  ln_kw1024  LayerNorm(wx[256,1024] @ w12[1024,384] + b12 + wr[256,384])
  ln_kw384   LayerNorm(wy[256,384] @ w13[384,384] + b13 + wr)
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
    r = np.random.RandomState(7)
    f = lambda *s: r.randn(*s).astype(np.float32)
    inits = [
        numpy_helper.from_array(f(53, 29), "w"),
        numpy_helper.from_array(f(29), "bias"),
        numpy_helper.from_array(f(100, 640), "w4"),
        numpy_helper.from_array(r.randint(-50, 50, size=(53, 17)).astype(np.int32), "wi"),
        numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "ax12"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "axl"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "s0"),
        numpy_helper.from_array(np.array([256], dtype=np.int64), "s256"),
        numpy_helper.from_array(np.array(8.0, dtype=np.float32), "eight"),
    ]
    nodes = [
        helper.make_node("MatMul", ["a", "w"], ["t0"]),
        helper.make_node("Add", ["t0", "bias"], ["t1"]),
        helper.make_node("Relu", ["t1"], ["mm_odd"]),
        helper.make_node("Transpose", ["b2"], ["b2t"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["b", "b2t"], ["mm_bat"]),
        helper.make_node("MatMul", ["c", "w4"], ["mm_r4"]),
        helper.make_node("Slice", ["c", "s0", "s256"], ["c256"]),
        helper.make_node("MatMul", ["c256", "w4"], ["mm_r2"]),
        helper.make_node("Mul", ["a", "eight"], ["a8"]),
        helper.make_node("Round", ["a8"], ["a8r"]),
        helper.make_node("Cast", ["a8r"], ["ai"], to=T.INT32),
        helper.make_node("MatMul", ["ai", "wi"], ["mm_i32"]),
        helper.make_node("ReduceSum", ["d", "ax12"], ["sum12"], keepdims=0),
        helper.make_node("ReduceMax", ["e", "axl"], ["max_last"], keepdims=0),
        helper.make_node("ReduceMean", ["e"], ["mean_all"], keepdims=0),
    ]
    shapes = {"a": [3, 37, 53], "b": [2, 3, 70, 45], "b2": [2, 3, 90, 45], "c": [1024, 100], "d": [5, 33, 20], "e": [4, 6, 100]}
    ins = [helper.make_tensor_value_info(n, T.FLOAT, s) for n, s in shapes.items()]
    outs = [
        helper.make_tensor_value_info("mm_odd", T.FLOAT, [3, 37, 29]),
        helper.make_tensor_value_info("mm_bat", T.FLOAT, [2, 3, 70, 90]),
        helper.make_tensor_value_info("mm_r4", T.FLOAT, [1024, 640]),
        helper.make_tensor_value_info("mm_r2", T.FLOAT, [256, 640]),
        helper.make_tensor_value_info("mm_i32", T.INT32, [3, 37, 17]),
        helper.make_tensor_value_info("sum12", T.FLOAT, [5]),
        helper.make_tensor_value_info("max_last", T.FLOAT, [4, 6]),
        helper.make_tensor_value_info("mean_all", T.FLOAT, []),
    ]
    m = helper.make_model(helper.make_graph(nodes, "tiled", ins, outs, inits), opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    os.makedirs(a.out, exist_ok=True)
    onnx.save(m, os.path.join(a.out, "tiled.onnx"))
    for n, s in shapes.items():
        np.save(os.path.join(a.out, f"{n}.npy"), f(*s))
    # splitk.onnx: matmuls with few tiles over a long K, which the PTX writer splits inside the block.
    inits = [numpy_helper.from_array(f(300, 50), "w5"), numpy_helper.from_array(f(50), "bias5"), numpy_helper.from_array(f(1100, 24), "w6"),
             numpy_helper.from_array(f(768, 40), "w7"), numpy_helper.from_array(np.array([0], dtype=np.int64), "z1"),
             numpy_helper.from_array(np.array([768], dtype=np.int64), "e768"), numpy_helper.from_array(np.array([1], dtype=np.int64), "ax1")]
    nodes = [
        helper.make_node("MatMul", ["g", "w5"], ["t5"]),
        helper.make_node("Add", ["t5", "bias5"], ["mm_k300"]),
        helper.make_node("MatMul", ["h", "w6"], ["mm_k1100"]),
        helper.make_node("Slice", ["h", "z1", "e768", "ax1"], ["h768"]),
        helper.make_node("MatMul", ["h768", "w7"], ["mm_k768"]),
    ]
    shapes = {"g": [40, 300], "h": [20, 1100]}
    ins = [helper.make_tensor_value_info(n, T.FLOAT, s) for n, s in shapes.items()]
    outs = [helper.make_tensor_value_info("mm_k300", T.FLOAT, [40, 50]), helper.make_tensor_value_info("mm_k1100", T.FLOAT, [20, 24]),
            helper.make_tensor_value_info("mm_k768", T.FLOAT, [20, 40])]
    m = helper.make_model(helper.make_graph(nodes, "splitk", ins, outs, inits), opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(a.out, "splitk.onnx"))
    for n, s in shapes.items():
        np.save(os.path.join(a.out, f"{n}.npy"), f(*s))
    # splitk_launch.onnx: few outputs over a long K, split across launches (CUDA's plan/split_k.rs).
    inits = [numpy_helper.from_array(f(2048, 48), "w8"), numpy_helper.from_array(f(48), "bias8"), numpy_helper.from_array(f(1024, 256), "w9"),
             numpy_helper.from_array(np.array([0], dtype=np.int64), "z1"), numpy_helper.from_array(np.array([48], dtype=np.int64), "e48"),
             numpy_helper.from_array(np.array([1], dtype=np.int64), "ax1")]
    nodes = [
        helper.make_node("MatMul", ["p", "w8"], ["t8"]),
        helper.make_node("Add", ["t8", "bias8"], ["u8"]),
        helper.make_node("Slice", ["p", "z1", "e48", "ax1"], ["p48"]),
        helper.make_node("Add", ["u8", "p48"], ["mm_sk2048"]),
        helper.make_node("MatMul", ["q", "w9"], ["mm_sk1024"]),
    ]
    shapes = {"p": [32, 2048], "q": [64, 1024]}
    ins = [helper.make_tensor_value_info(n, T.FLOAT, s) for n, s in shapes.items()]
    outs = [helper.make_tensor_value_info("mm_sk2048", T.FLOAT, [32, 48]), helper.make_tensor_value_info("mm_sk1024", T.FLOAT, [64, 256])]
    m = helper.make_model(helper.make_graph(nodes, "splitk_launch", ins, outs, inits), opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(a.out, "splitk_launch.onnx"))
    for n, s in shapes.items():
        np.save(os.path.join(a.out, f"{n}.npy"), f(*s))
    def row_split(name: str, k: int, rows: int, w: list[str], x: list[str], outs: list[str]) -> None:
        """NAME.onnx: matmuls over K = k and 384 whose residual sums the row kernel normalizes — adding the
        split matmul's partials itself (CUDA's plan/split_k.rs)."""
        inits = [numpy_helper.from_array(f(k, 384) * 0.05, w[0]), numpy_helper.from_array(f(384), w[1]),
                 numpy_helper.from_array(f(384, 384) * 0.1, w[2]), numpy_helper.from_array(f(384), w[3]),
                 numpy_helper.from_array(f(384), "gamma"), numpy_helper.from_array(f(384), "beta")]
        nodes = []
        for xi, wi, bi, o in [(x[0], w[0], w[1], outs[0]), (x[1], w[2], w[3], outs[1])]:
            nodes += [
                helper.make_node("MatMul", [xi, wi], [f"{o}_mm"]),
                helper.make_node("Add", [f"{o}_mm", bi], [f"{o}_b"]),
                helper.make_node("Add", [f"{o}_b", x[2]], [f"{o}_res"]),
                helper.make_node("LayerNormalization", [f"{o}_res", "gamma", "beta"], [o], axis=-1, epsilon=1e-12),
            ]
        shapes = {x[0]: [rows, k], x[1]: [rows, 384], x[2]: [rows, 384]}
        ins = [helper.make_tensor_value_info(n, T.FLOAT, s) for n, s in shapes.items()]
        ous = [helper.make_tensor_value_info(o, T.FLOAT, [rows, 384]) for o in outs]
        m = helper.make_model(helper.make_graph(nodes, name, ins, ous, inits), opset_imports=[helper.make_opsetid("", 18)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        onnx.save(m, os.path.join(a.out, f"{name}.onnx"))
        for n, s in shapes.items():
            np.save(os.path.join(a.out, f"{n}.npy"), f(*s))

    # splitk_rows.onnx: a split matmul's residual sum normalized by the row kernel that adds its partials.
    row_split("splitk_rows", 1536, 128, ["w10", "b10", "w11", "b11"], ["sx", "sy", "sr"], ["ln_sk1536", "ln_sk384"])
    # splitk_wide.onnx: the same at 256 rows, K = 1024 (more outputs than split K takes, but for split_k_wide).
    row_split("splitk_wide", 1024, 256, ["w12", "b12", "w13", "b13"], ["wx", "wy", "wr"], ["ln_kw1024", "ln_kw384"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
