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
//! With `PlanOptions::split_k_rows` the sum moves one step further where it can: a split matmul whose
//! epilogue chain only a row kernel reads (a post-norm transformer's LayerNorm after FFN down) is
//! summed by that row kernel in each of its passes ([`row_fuse_split`]), and its own kernel is gone.
//! With `PlanOptions::split_k_wide` a matmul with more outputs than that (MiniLM batch 8's FFN down,
//! 1024 × 384: a GPU's worth of tiles, but 96 blocks of 64 × 64 with 24 staged K slices each) splits
//! too, into that option's parts (fewer than `split_k`'s: its partials are as many values again).

use super::fuse::{Fusion, Role};
use super::index::linear;
use super::row_fuse;
use super::kernel::{lit, nest, KB};
use super::Planner;
use rlx_ir::lir::{Base, Buffer, Launch};
use rlx_ir::loops::{Access, Expr, Kernel, LoopKind, Stmt};
use rlx_ir::{BinaryOp, DType, Mir, MirOp, NodeId, ValueId};
use std::collections::HashMap;

/// A matmul splits K across launches into `PlanOptions::split_k` parts when its outputs are at most
/// this many (MiniLM batch 1's FFN down: 49,152), and into `split_k_wide`'s above it ...
const SPLIT_OUTPUTS: usize = 65_536;
/// ... and its K at least this long, each part a multiple of 16 (whole staged K steps).
const SPLIT_MIN_K: usize = 1024;

/// The split rule: parts for matmuls of few outputs, and for those of more (up to a bound), over K ≥ `min_k`.
#[derive(Clone, Copy, Debug)]
pub struct Split {
    pub parts: usize,
    pub wide: (usize, usize),
    pub min_k: usize,
}

impl Split {
    pub fn of(opts: &super::PlanOptions, min_k: usize) -> Split {
        Split { parts: opts.split_k, wide: opts.split_k_wide, min_k }
    }

    /// Into how many parts matmul `n` splits (None: it does not): a float matmul of a matrix (or batch
    /// of rows) by a 2-D right operand over K ≥ `min_k`, each part a multiple of 16; `parts` for at
    /// most [`SPLIT_OUTPUTS`] outputs, `wide.0` for at most `wide.1`.
    fn parts_of(&self, g: &Mir, n: NodeId) -> Option<usize> {
        let node = g.node(n);
        if node.op != MirOp::MatMul || self.parts < 2 {
            return None;
        }
        let shape = |v: ValueId| g.ty(v).shape.as_fixed().unwrap_or_default();
        let (sa, sb, so) = (shape(node.inputs[0]), shape(node.inputs[1]), shape(node.outputs[0]));
        let f32s = [node.inputs[0], node.inputs[1], node.outputs[0]].iter().all(|&v| g.ty(v).dtype == DType::F32);
        let k = sa.last().copied().unwrap_or(0);
        let elems: usize = so.iter().product();
        let parts = if elems <= SPLIT_OUTPUTS { self.parts } else if elems <= self.wide.1 { self.wide.0 } else { 0 };
        let ok = f32s && sa.len() >= 2 && sb.len() == 2 && !so.is_empty() && parts >= 2 && k >= self.min_k && k % (parts * 16) == 0;
        ok.then_some(parts)
    }
}

/// [`row_fuse`] with `PlanOptions::split_k_rows`: a split matmul anchoring an epilogue chain (bias,
/// residual) whose value only a row kernel reads (post-norm transformers: the LayerNorm after FFN
/// down and after the attention output projection) gives up its kernel — the matmul and its chain
/// become elementwise nodes of that row kernel, the matmul's value its partials' sum — so the row
/// kernel adds the partials, bias and residual in each of its passes over the row (three for
/// LayerNorm: ten loads per element each, from L2) and its own launch is gone. A matmul whose chain
/// no row kernel takes keeps its anchor (row fusion runs again without it).
pub fn row_fuse_split(g: &Mir, f: &mut Fusion, recompute: bool, split: Split) {
    let before = f.clone();
    // Candidates: split anchors → the root of their epilogue chain (the value they would store).
    let mut cands: Vec<(NodeId, NodeId)> = Vec::new();
    for n in g.node_ids() {
        if f.role[n.index()] != Role::Anchor || split.parts_of(g, n).is_none() {
            continue;
        }
        let chain = f.anchor_of.iter().filter(|&(_, &a)| a == n).filter_map(|(&v, _)| g.producer(v));
        if let Some(root) = chain.filter(|c| f.role[c.index()] == Role::Root).min() {
            cands.push((n, root));
        }
    }
    let demote = |f: &mut Fusion, take: &[(NodeId, NodeId)]| {
        for &(m, _) in take {
            f.role[m.index()] = Role::Inlined;
            f.anchor_of.retain(|_, a| *a != m);
            f.split_sums.insert(m);
        }
    };
    let mut take = cands;
    // At most twice: the candidates a first try's row kernels took are then taken alone.
    for _ in 0..2 {
        *f = before.clone();
        demote(f, &take);
        row_fuse(g, f, recompute);
        let taken: Vec<(NodeId, NodeId)> = take.iter().copied().filter(|&(_, root)| f.role[root.index()] == Role::Inlined).collect();
        if taken.len() == take.len() {
            return;
        }
        take = taken;
    }
    *f = before;
    row_fuse(g, f, recompute);
}

/// Row kernel roots → the split matmuls ([`Fusion::split_sums`]) whose partials they add: each
/// matmul's value followed through the inlined nodes reading it to the kernel root computing them.
pub(super) fn split_rows(g: &Mir, f: &Fusion) -> HashMap<NodeId, Vec<NodeId>> {
    let consumers = g.consumers();
    let mut rows: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
    let mut ms: Vec<NodeId> = f.split_sums.iter().copied().collect();
    ms.sort();
    for m in ms {
        let mut n = m;
        while f.role[n.index()] == Role::Inlined {
            match consumers[g.node(n).outputs[0].index()].first() {
                Some(&c) => n = c,
                None => break,
            }
        }
        rows.entry(n).or_default().push(m);
    }
    rows
}

impl Planner<'_> {
    /// The partial-products launches before the kernel rooted at `r`: for its anchor when that is a
    /// float matmul of a matrix (or batch of rows) by a 2-D right operand with few outputs over a long
    /// K (see the module doc), or for the split matmuls a row kernel at `r` sums
    /// ([`row_fuse_split`]); records the scratch and the part count for [`Planner::split_k_sum`].
    pub(super) fn split_k_launch(&mut self, r: NodeId) -> Vec<Launch> {
        if let Some(ms) = self.split_rows.get(&r).cloned() {
            let split = Split::of(&self.opts, self.opts.split_k_rows);
            return ms.into_iter().filter_map(|m| Some(self.partials_launch(m, split.parts_of(self.g, m)?))).collect();
        }
        let out = self.g.node(r).outputs[0];
        let a = self.fusion.anchor_of.get(&out).copied().unwrap_or(r);
        match Split::of(&self.opts, SPLIT_MIN_K).parts_of(self.g, a) {
            Some(parts) if !self.fusion.row_reduces.contains_key(&r) => vec![self.partials_launch(a, parts)],
            _ => Vec::new(),
        }
    }

    /// The launch computing matmul `a`'s `parts` partial sums into a scratch of its own.
    fn partials_launch(&mut self, a: NodeId, parts: usize) -> Launch {
        let node = self.g.node(a).clone();
        let so = self.shape(node.outputs[0]);
        let k = self.matmul_k(&node);
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
        Launch { nodes: vec![], kernel, bindings: kb.bindings }
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
