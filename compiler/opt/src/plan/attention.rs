//! Fused attention (`PlanOptions::fused_attention`, set by the CUDA target): `matmul(Q, Kᵀ)`, an
//! optional scaling and mask (elementwise ops with a scalar, a per-head constant, an additive mask, or
//! a `where` of a boolean mask that does not vary over the query rows), the softmax
//! over the keys as lowering writes it (`reduce_max`, `sub`, `exp`, `reduce_sum`, `div`; optionally
//! followed by `where(is_nan(P), c, P)`, as torch exports it) and `matmul(P, V)` become ONE kernel
//! whose scores and probabilities are never stored.
//!
//! The kernel, per output element (.., query row q, column c) — exact MIR semantics for any writer,
//! each pass recomputing the scores (s = Σ_d Q[q, d]·K[d, k] in order d = 0, 1, …):
//!
//! ```text
//! var mx = -inf;  for k { s = dot(q, k); mx = max(mx, w(s)) }          // w: scale, mask
//! var l = 0;      for k { s = dot(q, k); l = l + exp(w(s) - mx) }
//! var acc = 0;    for k { s = dot(q, k); acc = acc + (exp(w(s) - mx) / l) · V[k, c] }
//! out[.., q, c] = acc
//! ```
//!
//! As plain loops this costs three dot products per (output, key) — a GPU writer that recognizes the
//! form (`rlx_ir::loops::tiled`'s `Plan::Attention`) computes each score once per query row, with the
//! head's keys and values staged in shared memory. Every intermediate value (scores, the scaled and
//! masked scores, max, exp, sum, probabilities) is inlined through `inline.rs`'s per-element
//! expressions with the dot product and the reductions substituted as scalars, so the chain keeps the
//! interpreter's order of operations. Recognized only where every intermediate value is read by the
//! chain alone (not a graph output), dtypes are f32, and the keys and the head dimension are at most
//! [`rlx_ir::loops::tiled::ATTENTION_MAX_KEYS`] and `ATTENTION_MAX_DEPTH` (the GPU writer keeps its
//! query rows and their scores in shared memory). A `where` mask that varies over the query rows (a
//! causal one) and single query rows (a decode step) are not taken: the language models keep their
//! scores matmul, softmax row kernel and probabilities × values matmul.

use super::fuse::{Fusion, Role};
use super::index::{bidx, linear};
use super::kernel::{lit, nest, KB};
use super::Planner;
use rlx_ir::loops::{Access, Expr, Kernel, LoopKind, Stmt};
use rlx_ir::{BinaryOp, DType, Def, Mir, MirOp, NodeId, ReduceOp, UnaryOp, ValueId};
use std::collections::HashMap;

/// One recognized attention, keyed by its `matmul(P, V)` node.
#[derive(Clone, Debug)]
pub(super) struct Attention {
    /// `matmul(Q, Kᵀ)`.
    scores: NodeId,
    /// The softmax's input (the scores after scaling and mask).
    pre: ValueId,
    /// `reduce_max(pre)` and `reduce_sum(exp)` (keepdims, last axis).
    max: ValueId,
    sum: ValueId,
    /// `exp(pre - max)`.
    exp: ValueId,
    /// The fused nodes, in graph order (for the launch's report).
    nodes: Vec<NodeId>,
}

fn scalar_const(g: &Mir, v: ValueId) -> bool {
    matches!(&g.value(v).def, Def::Const(c) if c.numel() == 1 && !c.dtype.is_quantized_block())
}

/// From the softmax input `w` back to the scores matmul through elementwise `mul`, `div`, `add`,
/// `sub` with another operand (a scalar, a per-head constant — the folder's collapsed affine chains
/// give `[heads, 1, 1]` —, an additive mask: BERT's `[batch, 1, 1, keys]`, torch's exported
/// `[batch, 1, rows, keys]`) and `where`s of a boolean mask that does not vary over the query rows
/// (the HIR attention's padding mask; a causal `where` — the language models' — ends the walk): the
/// matmul and the nodes walked.
fn walk_to_scores(g: &Mir, w: ValueId, shape: &[usize]) -> Option<(NodeId, Vec<NodeId>)> {
    let rank = shape.len();
    let full = |v: ValueId| g.ty(v).shape.as_fixed().as_deref() == Some(shape);
    // Broadcast over the rows: right-aligned, size 1 (or absent) at the row axis.
    let row_broadcast = |v: ValueId| g.ty(v).shape.as_fixed().is_some_and(|s| s.len() <= rank && (s.len() < 2 || s[s.len() - 2] == 1));
    // The walk's side of a binary op: of the full shape, computed by the ops it walks through.
    let path = |v: ValueId| full(v) && g.producer(v).is_some_and(|p| matches!(g.node(p).op, MirOp::MatMul | MirOp::Binary(_) | MirOp::Where));
    let (mut cur, mut walked) = (w, Vec::new());
    for _ in 0..8 {
        if !full(cur) || g.ty(cur).dtype != DType::F32 {
            return None;
        }
        let n = g.producer(cur)?;
        let node = g.node(n);
        let ins = &node.inputs;
        cur = match node.op {
            MirOp::MatMul => return Some((n, walked)),
            MirOp::Where if row_broadcast(ins[0]) && path(ins[1]) && !path(ins[2]) => ins[1],
            MirOp::Binary(BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div) => {
                let commutes = matches!(node.op, MirOp::Binary(BinaryOp::Add | BinaryOp::Mul));
                if path(ins[0]) && !path(ins[1]) {
                    ins[0]
                } else if commutes && path(ins[1]) && !path(ins[0]) {
                    ins[1]
                } else {
                    return None;
                }
            }
            _ => return None,
        };
        walked.push(n);
    }
    None
}

/// The attentions of `g` (module doc) whose `matmul(P, V)` is a kernel root with no epilogue; each
/// one's scores matmul, scaling, mask addition and softmax nodes become inlined into it (their anchor
/// and row-kernel roles dropped).
/// `min_rows`: the fewest query rows (every head's together) an attention needs to be fused
/// (`PlanOptions::fused_attention_min_rows`; 0 any).
pub(super) fn fuse(g: &Mir, f: &mut Fusion, min_rows: usize) -> HashMap<NodeId, Attention> {
    let consumers = g.consumers();
    let is_out = g.output_mask();
    let mut found = HashMap::new();
    for pv in g.node_ids() {
        let node = g.node(pv);
        if node.op != MirOp::MatMul || f.role[pv.index()] != Role::Root || f.anchor_of.contains_key(&node.outputs[0]) {
            continue;
        }
        let Some(a) = recognize(g, pv) else { continue };
        let rows = g.ty(node.inputs[0]).shape.as_fixed().map_or(0, |s| s.iter().product::<usize>() / s.last().copied().unwrap_or(1).max(1));
        if rows < min_rows {
            continue;
        }
        // Every intermediate value is read inside the chain only (or by the final matmul).
        let mut inside: Vec<NodeId> = a.nodes.clone();
        inside.push(pv);
        let private = a.nodes.iter().all(|&n| g.node(n).outputs.iter().all(|&v| !is_out[v.index()] && consumers[v.index()].iter().all(|c| inside.contains(c))));
        if !private {
            continue;
        }
        for &n in &a.nodes {
            f.role[n.index()] = Role::Inlined;
            f.row_reduces.remove(&n);
        }
        f.anchor_of.retain(|v, anchor| !a.nodes.contains(anchor) && !g.producer(*v).is_some_and(|p| a.nodes.contains(&p)));
        found.insert(pv, a);
    }
    found
}

/// `matmul(P, V)` at `pv` with P the softmax (over the last axis) of attention scores.
fn recognize(g: &Mir, pv: NodeId) -> Option<Attention> {
    let prod = |v: ValueId| g.producer(v).map(|n| (n, &g.node(n).op, g.node(n).inputs.as_slice()));
    let node = g.node(pv);
    let (mut p, v) = (node.inputs[0], node.inputs[1]);
    // `where(is_nan(P), c, P)` (torch's exported scaled_dot_product_attention: a fully masked row's
    // NaNs become c) is taken with P.
    let mut guard = Vec::new();
    if let Some((nw, MirOp::Where, [cond, c, x])) = prod(p) {
        if let Some((nn, MirOp::Unary(UnaryOp::IsNan), [y])) = prod(*cond) {
            if y == x && scalar_const(g, *c) {
                guard = vec![nw, nn];
                p = *x;
            }
        }
    }
    let shape = g.ty(p).shape.as_fixed()?;
    let rank = shape.len();
    // One query row (a decode step): nothing to share the keys among, and its mask (a causal one
    // over the positions) would not show it varies over the rows.
    if rank < 2 || shape[rank - 2] < 2 || g.ty(v).shape.rank() < 2 || g.ty(p).dtype != DType::F32 || g.ty(v).dtype != DType::F32 {
        return None;
    }
    let is_reduce = |x: ValueId, want: ReduceOp| -> Option<(NodeId, ValueId)> {
        match prod(x)? {
            (n, MirOp::Reduce { op, axes, keepdims: true }, [i]) if *op == want && axes.as_slice() == [rank - 1] => Some((n, *i)),
            _ => None,
        }
    };
    let (ndiv, MirOp::Binary(BinaryOp::Div), [e, s]) = prod(p)? else { return None };
    let (nexp, MirOp::Unary(UnaryOp::Exp), [d]) = prod(*e)? else { return None };
    let (nsub, MirOp::Binary(BinaryOp::Sub), [w, m]) = prod(*d)? else { return None };
    let (nsum, se) = is_reduce(*s, ReduceOp::Sum)?;
    let (nmax, mw) = is_reduce(*m, ReduceOp::Max)?;
    if se != *e || mw != *w || (shape[rank - 1] as i64) > rlx_ir::loops::tiled::ATTENTION_MAX_KEYS {
        return None;
    }
    let (scores, walked) = walk_to_scores(g, *w, &shape)?;
    let sn = g.node(scores);
    let (qs, ks) = (g.ty(sn.inputs[0]).shape.as_fixed()?, g.ty(sn.inputs[1]).shape.as_fixed()?);
    if qs.len() < 2 || ks.len() < 2 || (qs[qs.len() - 1] as i64) > rlx_ir::loops::tiled::ATTENTION_MAX_DEPTH || g.ty(sn.inputs[0]).dtype != DType::F32 || g.ty(sn.inputs[1]).dtype != DType::F32 {
        return None;
    }
    let mut nodes = vec![scores, nmax, nsub, nexp, nsum, ndiv];
    nodes.extend(walked);
    nodes.extend(guard);
    nodes.sort();
    Some(Attention { scores, pre: *w, max: *m, sum: *s, exp: *e, nodes })
}

impl Planner<'_> {
    /// The fused attention kernel of `matmul(P, V)` node `r` (module doc).
    pub(super) fn attention_kernel(&mut self, r: NodeId, a: &Attention) -> (Kernel, Vec<u32>, Vec<NodeId>) {
        let g = self.g;
        let pv = g.node(r).clone();
        let sn = g.node(a.scores).clone();
        let out = pv.outputs[0];
        let out_shape = self.shape(out);
        let ps = self.shape(pv.inputs[0]);
        let keys = ps[ps.len() - 1] as i64;
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let out_buf = self.buf_of[out.index()].expect("roots are materialized");
        let ob = self.buffers[out_buf as usize].clone();
        let op = kb.param(out_buf, &ob, Access::Write);
        let rank = out_shape.len();
        let f32 = DType::F32;
        let add = |x: Expr, y: Expr| Expr::Bin(BinaryOp::Add, f32, Box::new(x), Box::new(y));
        let body = nest(&mut kb, &out_shape, LoopKind::Parallel, &mut |kb, idx| {
            // P's index at key k: its batch dims broadcast from the output's, then (row, k).
            let batch = &idx[..rank - 2];
            let sidx = |k: Expr| -> Vec<Expr> { bidx(batch, &ps[..ps.len() - 2]).into_iter().chain([idx[rank - 2].clone(), k]).collect() };
            let scores_out = sn.outputs[0];
            // One pass over the keys: the score s at key k substituted for the scores matmul's value.
            let pass = |kb: &mut KB, this: &mut Planner, f: &mut dyn FnMut(&mut KB, &mut Planner, Expr) -> Stmt| -> Stmt {
                let k = kb.var();
                let si = sidx(Expr::Var(k));
                let (mut stmts, s) = this.anchor_body(kb, &sn, &si);
                kb.subst.insert(scores_out, s);
                stmts.push(f(kb, this, Expr::Var(k)));
                kb.subst.remove(&scores_out);
                Stmt::For { var: k, extent: keys, kind: LoopKind::Serial, body: stmts }
            };
            let (mx, l, acc) = (kb.var(), kb.var(), kb.var());
            let mut stmts = vec![Stmt::Decl { var: mx, dtype: f32, init: lit(f64::NEG_INFINITY, f32) }];
            stmts.push(pass(kb, self, &mut |kb, this, k| {
                let w = this.elem(kb, a.pre, &sidx(k));
                Stmt::Assign { var: mx, value: Expr::Bin(BinaryOp::Max, f32, Box::new(Expr::Var(mx)), Box::new(w)) }
            }));
            stmts.push(Stmt::Decl { var: l, dtype: f32, init: lit(0.0, f32) });
            stmts.push(pass(kb, self, &mut |kb, this, k| {
                kb.subst.insert(a.max, Expr::Var(mx));
                let e = this.elem(kb, a.exp, &sidx(k));
                kb.subst.remove(&a.max);
                Stmt::Assign { var: l, value: add(Expr::Var(l), e) }
            }));
            stmts.push(Stmt::Decl { var: acc, dtype: f32, init: lit(0.0, f32) });
            stmts.push(pass(kb, self, &mut |kb, this, k| {
                kb.subst.insert(a.max, Expr::Var(mx));
                kb.subst.insert(a.sum, Expr::Var(l));
                // P[.., q, k] · V[.., k, c] with the matmul's own broadcasting.
                let term = this.matmul_term(kb, &pv, idx, k);
                kb.subst.remove(&a.max);
                kb.subst.remove(&a.sum);
                Stmt::Assign { var: acc, value: add(Expr::Var(acc), term) }
            }));
            stmts.push(Stmt::Store { buf: op, index: linear(idx, &out_shape), value: Expr::Var(acc) });
            stmts
        });
        let mut nodes = a.nodes.clone();
        nodes.push(r);
        let name = format!("{}+{}", sn.name, pv.name);
        (Kernel { name, params: kb.params, body, vars: kb.vars }, kb.bindings, nodes)
    }
}
