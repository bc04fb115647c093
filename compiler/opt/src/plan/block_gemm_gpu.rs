//! The GPU's `dequant_matmul` over many rows (`PlanOptions::flat_block_dots` with at least
//! [`GPU_GEMM_ROWS`] rows of x: a prefill chunk). The flat form (`blocks.rs`: one warp per output,
//! each lane dequantizing its share of the weight row) dequantizes every weight value once per row
//! of x — at 128 rows, 128 times — and is bound by that arithmetic. Here a launch of its own
//! dequantizes the weight once per call into an f32 scratch `[N][K]` in the arena (the grid one
//! thread per (weight row, block, value of a sub-block), consecutive threads on consecutive bytes
//! and consecutive stores), and the matmul kernel reads it as a plain operand: `for i parallel {
//! for j { acc = 0; for k { acc += x[i, k] · scratch[j, k] }; store } }`, the shape the GPU writers
//! tile (shared-memory tiles on the SIMT cores, `mma.sync` under `--precision tf32|bf16|fp16`).
//! The scratch is the weight's size in f32 (Gemma 3 270M's largest per-layer matrix: 5 MB), live
//! from its launch to the matmul's, so the arena reuses it across layers.

use super::block_layout::{fb, subs, value_f32, BlockWeight};
use super::index::{linear, unflatten};
use super::kernel::{lit, KB};
use super::Planner;
use rlx_ir::lir::{Base, Buffer, Launch};
use rlx_ir::loops::{Access, Expr, Kernel, LoopKind, Stmt};
use rlx_ir::{BinaryOp, DType, NodeId};
use std::collections::HashMap;

/// Rows of x from which a GPU `dequant_matmul` dequantizes its weight once into a scratch and runs
/// as a tiled matmul (below: one warp per output, the weight read in its blocks). Measured on the
/// H200 with Gemma 3 270M: at 8 rows (a chunk-8 step decoding one token) the scratch form took
/// 3.07 ms a call against the flat form's 2.45 (326 against 408 tokens/s).
pub(super) const GPU_GEMM_ROWS: usize = 16;

impl Planner<'_> {
    /// The dequantization launch before the kernel rooted at `r`, when its anchor is a GPU
    /// `dequant_matmul` over at least [`GPU_GEMM_ROWS`] rows (see the module doc); records the scratch
    /// for [`Planner::block_gemm_gpu_body`].
    pub(super) fn gpu_dequant_launch(&mut self, r: NodeId) -> Option<Launch> {
        if !self.flat_blocks {
            return None;
        }
        let (a, node, w, rows) = self.dequant_matmul_at(r)?;
        if rows < GPU_GEMM_ROWS {
            return None;
        }
        let sb = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: vec![w.rows, w.cols], label: format!("{} (dequantized weight)", node.name) }, None);
        self.gpu_dequant.insert(a, sb);
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let sp = kb.param(sb, &self.buffers[sb as usize].clone(), Access::Write);
        let (bs, _) = w.dtype.block();
        let (nsub, len) = subs(w.dtype);
        let (j, b, l) = (kb.var(), kb.var(), kb.var());
        let blk = Expr::add(Expr::mul(Expr::Var(j), Expr::Int(w.nblk() as i64)), Expr::Var(b));
        let f = self.fields(&mut kb, &w, blk, Expr::Int(0));
        let mut stores = Vec::new();
        for s in 0..nsub {
            let val = value_f32(w.dtype, &f, s, &Expr::Var(l));
            let k = Expr::add(Expr::add(Expr::mul(Expr::Var(b), Expr::Int(bs as i64)), Expr::Int((s * len) as i64)), Expr::Var(l));
            stores.push(Stmt::Store { buf: sp, index: linear(&[Expr::Var(j), k], &[w.rows, w.cols]), value: val });
        }
        let body = vec![Stmt::For {
            var: j,
            extent: w.rows as i64,
            kind: LoopKind::Parallel,
            body: vec![Stmt::For {
                var: b,
                extent: w.nblk() as i64,
                kind: LoopKind::Parallel,
                body: vec![Stmt::For { var: l, extent: len as i64, kind: LoopKind::Parallel, body: stores }],
            }],
        }];
        let kernel = Kernel { name: format!("{} (dequantize)", node.name), params: kb.params, body, vars: kb.vars };
        Some(Launch { nodes: vec![], kernel, bindings: kb.bindings })
    }

    /// The matmul over the scratch [`Planner::gpu_dequant_launch`] filled: `x · scratchᵀ` with the
    /// epilogue chain up to root `r` applied before the store.
    pub(super) fn block_gemm_gpu_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize], w: &BlockWeight, scratch: u32) -> Vec<Stmt> {
        let x = self.g.node(a).inputs[0];
        let sx = self.shape(x);
        let rows: usize = out_shape[..out_shape.len() - 1].iter().product();
        let sp = kb.param(scratch, &self.buffers[scratch as usize].clone(), Access::Read);
        let (i, j, k, acc) = (kb.var(), kb.var(), kb.var(), kb.var());
        let mut xi = unflatten(&Expr::Var(i), &sx[..sx.len() - 1]);
        xi.push(Expr::Var(k));
        let xa = self.elem(kb, x, &xi);
        let wv = Expr::load(sp, linear(&[Expr::Var(j), Expr::Var(k)], &[w.rows, w.cols]));
        let mut body = vec![
            Stmt::Decl { var: acc, dtype: DType::F32, init: lit(0.0, DType::F32) },
            Stmt::For { var: k, extent: w.cols as i64, kind: LoopKind::Serial, body: vec![Stmt::Assign { var: acc, value: fb(BinaryOp::Add, Expr::Var(acc), fb(BinaryOp::Mul, xa, wv)) }] },
        ];
        body.extend(self.block_stores(kb, a, r, op, out_shape, &[acc], &|_| Expr::Var(i), Expr::Var(j)));
        let jl = Stmt::For { var: j, extent: w.rows as i64, kind: LoopKind::Serial, body };
        vec![Stmt::For { var: i, extent: rows as i64, kind: LoopKind::Parallel, body: vec![jl] }]
    }
}
