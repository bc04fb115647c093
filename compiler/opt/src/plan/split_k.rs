//! Split K across launches (`PlanOptions::split_k`, the CUDA target's): a matmul with few outputs over
//! a long K — MiniLM batch 1's FFN down, 128 × 384 outputs over K = 1536 — fills few blocks of a large
//! GPU, each a long serial chain of staged K slices. Here a launch of its own computes S partial
//! products, each over one S-th of K, into an f32 scratch `[S, ..out]` in the arena: `for s parallel
//! { for idx parallel { acc = 0; for kk { acc += a[idx, s·K/S + kk] · b[s·K/S + kk, idx] }; store } }`,
//! which the GPU writers tile with `s` as a batch dimension (S times the blocks, each a chain S times
//! shorter). The matmul's own kernel then reads its value as the partials' sum in the fixed order
//! ((p0 + p1) + p2) + … and applies the fused epilogue (bias, residual) as before: one thread per
//! output, no float atomics, the same bits run to run. The scratch is live from the partial launch to
//! the sum's, so the arena reuses it across layers.

use super::index::linear;
use super::kernel::{lit, nest, KB};
use super::Planner;
use rlx_ir::lir::{Base, Buffer, Launch};
use rlx_ir::loops::{Access, Expr, Kernel, LoopKind, Stmt};
use rlx_ir::{BinaryOp, DType, MirOp, NodeId};
use std::collections::HashMap;

/// A matmul splits K across launches when its outputs are at most this many (MiniLM batch 1's FFN
/// down: 49,152; batch 8's: 393,216 fill the GPU unsplit) ...
const SPLIT_OUTPUTS: usize = 65_536;
/// ... and its K at least this long, each part a multiple of 16 (whole staged K steps).
const SPLIT_MIN_K: usize = 1024;

impl Planner<'_> {
    /// The partial-products launch before the kernel rooted at `r`, when its anchor is a float matmul
    /// of a matrix (or batch of rows) by a 2-D right operand with few outputs over a long K (see the
    /// module doc); records the scratch and the part count for [`Planner::split_k_sum`].
    pub(super) fn split_k_launch(&mut self, r: NodeId) -> Option<Launch> {
        let parts = self.opts.split_k;
        if parts < 2 {
            return None;
        }
        let out = self.g.node(r).outputs[0];
        let a = self.fusion.anchor_of.get(&out).copied().unwrap_or(r);
        let node = self.g.node(a).clone();
        if node.op != MirOp::MatMul || self.fusion.row_reduces.contains_key(&r) {
            return None;
        }
        let (sa, sb, so) = (self.shape(node.inputs[0]), self.shape(node.inputs[1]), self.shape(node.outputs[0]));
        let k = self.matmul_k(&node);
        let f32s = [node.inputs[0], node.inputs[1], node.outputs[0]].iter().all(|&v| self.dt(v) == DType::F32);
        let elems: usize = so.iter().product();
        if !f32s || sa.len() < 2 || sb.len() != 2 || elems > SPLIT_OUTPUTS || k < SPLIT_MIN_K || k % (parts * 16) != 0 {
            return None;
        }
        let mut shape = vec![parts];
        shape.extend(&so);
        let label = format!("{} (split-K partial sums)", node.name);
        let sp = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: shape.clone(), label }, None);
        self.split_k_parts.insert(node.outputs[0], (sp, parts));
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let p = kb.param(sp, &self.buffers[sp as usize].clone(), Access::Write);
        let part = (k / parts) as i64;
        let body = nest(&mut kb, &shape, LoopKind::Parallel, &mut |kb, idx| {
            let (kv, acc) = (kb.var(), kb.var());
            let kx = Expr::add(Expr::mul(idx[0].clone(), Expr::Int(part)), Expr::Var(kv));
            let prod = self.matmul_term(kb, &node, &idx[1..], kx);
            vec![
                Stmt::Decl { var: acc, dtype: DType::F32, init: lit(0.0, DType::F32) },
                Stmt::For { var: kv, extent: part, kind: LoopKind::Vector(8), body: vec![Stmt::Assign { var: acc, value: Expr::Bin(BinaryOp::Add, DType::F32, Box::new(Expr::Var(acc)), Box::new(prod)) }] },
                Stmt::Store { buf: p, index: linear(idx, &shape), value: Expr::Var(acc) },
            ]
        });
        let kernel = Kernel { name: format!("{} (split K: {parts} partial sums)", node.name), params: kb.params, body, vars: kb.vars };
        Some(Launch { nodes: vec![], kernel, bindings: kb.bindings })
    }

    /// The value of a matmul whose K [`Planner::split_k_launch`] split, at output index `idx`: its
    /// partial sums added in part order (None for any other node).
    pub(super) fn split_k_sum(&mut self, kb: &mut KB, n: &rlx_ir::Node<MirOp>, idx: &[Expr]) -> Option<Expr> {
        let (sp, parts) = *self.split_k_parts.get(&n.outputs[0])?;
        let shape = self.buffers[sp as usize].shape.clone();
        let p = kb.param(sp, &self.buffers[sp as usize].clone(), Access::Read);
        let at = |s: usize| {
            let mut i = vec![Expr::Int(s as i64)];
            i.extend(idx.iter().cloned());
            Expr::load(p, linear(&i, &shape))
        };
        Some((1..parts).fold(at(0), |sum, s| Expr::Bin(BinaryOp::Add, DType::F32, Box::new(sum), Box::new(at(s)))))
    }
}
