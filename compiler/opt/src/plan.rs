//! Fusion, memory planning and kernel lowering: MIR → LIR.
//!
//! 1. **Fusion** ([`fuse`]): every node is a view (reshape, leading-axis slice: no kernel, aliases its
//!    input), *inlined* into its single consumer (elementwise and data-movement ops become part of the
//!    consumer's per-element expression, so chains of elementwise ops are one loop), an *anchor fused as
//!    the producer of an epilogue* (matmul / reduce / conv whose single consumer is elementwise of the
//!    same shape: the epilogue is applied to the accumulator before the store), or a *kernel root*.
//! 2. **Memory planning**: graph inputs and outputs are the caller's buffers; constants go to one
//!    aligned weights blob (a 2-D matmul weight is stored transposed so both operands stream
//!    contiguously); every other materialized value gets an arena offset from liveness — first fit in
//!    order of decreasing size among buffers whose live ranges overlap — so memory is reused; views
//!    alias their root at an offset. The peak is `arena_bytes`.
//! 3. **Kernel lowering**: each kernel root becomes one loop-form [`Kernel`].

use rlx_ir::lir::{Base, Buffer, Launch, Lir, Port};
use rlx_ir::loops::{Access, Expr, IOp, Kernel, LoopKind, Param, Stmt, Var};
use rlx_ir::mir::{slice_range, PoolKind};
use rlx_ir::verify::Problem;
use rlx_ir::{BinaryOp, ConstData, DType, Def, Mir, MirOp, NodeId, OpSet, PadMode, ReduceOp, UnaryOp, ValueId};
use std::collections::HashMap;

/// The MIR op kinds the kernel lowering implements (a target's claim set is a subset of these).
pub fn lowerable_kinds() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = rlx_ir::UnaryOp::ALL.iter().map(|u| u.name()).collect();
    v.extend(rlx_ir::BinaryOp::ALL.iter().map(|b| b.name()));
    v.extend([
        "where", "cast", "matmul", "reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_mean", "argmax", "argmin",
        "reshape", "transpose", "expand", "slice", "concat", "gather", "gather_elements", "gather_nd", "pad", "conv", "max_pool", "avg_pool", "cumsum",
        "quantize", "dequantize", "fake_quantize",
    ]);
    v
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Aliases its input; no kernel.
    View,
    /// Computed inside its single consumer's kernel.
    Inlined,
    /// An anchor whose single elementwise consumer applies an epilogue in the same kernel.
    Anchor,
    /// Gets its own kernel, output materialized.
    Root,
}

fn is_view(g: &Mir, n: NodeId) -> bool {
    let node = g.node(n);
    match &node.op {
        MirOp::Reshape { .. } => true,
        MirOp::Slice { axes, steps, .. } => {
            let shape = g.ty(node.inputs[0]).shape.as_fixed().unwrap_or_default();
            axes.len() == 1 && steps[0] == 1 && shape[..axes[0]].iter().all(|&d| d == 1)
        }
        MirOp::Cast { to } => *to == g.ty(node.inputs[0]).dtype,
        _ => false,
    }
}

fn is_inlinable(op: &MirOp) -> bool {
    matches!(
        op,
        MirOp::Unary(_)
            | MirOp::Binary(_)
            | MirOp::Where
            | MirOp::Cast { .. }
            | MirOp::Quantize { .. }
            | MirOp::Dequantize { .. }
            | MirOp::FakeQuantize { .. }
            | MirOp::Expand { .. }
            | MirOp::Transpose { .. }
            | MirOp::Slice { .. }
            | MirOp::Pad { .. }
            | MirOp::Concat { .. }
            | MirOp::Gather { .. }
            | MirOp::GatherElements { .. }
            | MirOp::GatherNd { .. }
    )
}

fn is_data_movement(op: &MirOp) -> bool {
    matches!(op, MirOp::Transpose { .. } | MirOp::Slice { .. } | MirOp::Expand { .. })
}

fn is_elementwise(op: &MirOp) -> bool {
    matches!(op, MirOp::Unary(_) | MirOp::Binary(_) | MirOp::Where | MirOp::Cast { .. } | MirOp::Quantize { .. } | MirOp::Dequantize { .. } | MirOp::FakeQuantize { .. })
}

fn takes_epilogue(op: &MirOp) -> bool {
    matches!(op, MirOp::MatMul | MirOp::Reduce { .. } | MirOp::Conv { .. })
}

fn numel(g: &Mir, v: ValueId) -> usize {
    g.ty(v).shape.numel().unwrap_or(0)
}

/// The fusion decision for every node, and for each kernel root its anchor (if an epilogue chain).
pub struct Fusion {
    pub role: Vec<Role>,
    /// Value → the anchor node whose accumulator it is computed from (epilogue chains).
    pub anchor_of: HashMap<ValueId, NodeId>,
    /// Row kernels ([`row_fuse`]): root → the last-axis reductions its kernel computes per row, in order.
    pub row_reduces: HashMap<NodeId, Vec<NodeId>>,
}

pub fn fuse(g: &Mir) -> Fusion {
    fuse_with(g, false)
}

/// A binary op of a value with a scalar constant (a scaling such as attention's `q·d^-¼`).
fn is_scalar_scale(g: &Mir, n: NodeId) -> bool {
    let node = g.node(n);
    let scalar = |v: ValueId| matches!(&g.value(v).def, Def::Const(c) if c.numel() == 1 && !c.dtype.is_quantized_block());
    matches!(node.op, MirOp::Binary(BinaryOp::Mul | BinaryOp::Div | BinaryOp::Add | BinaryOp::Sub)) && node.outputs.len() == 1 && node.inputs.len() == 2 && (scalar(node.inputs[0]) != scalar(node.inputs[1]))
}

/// [`fuse`], and with `operands` ([`PlanOptions::inline_operands`]) the transposes, reshapes and
/// scalar scalings on a single-use path into a matmul operand are inlined into its loads.
pub fn fuse_with(g: &Mir, operands: bool) -> Fusion {
    let consumers = g.consumers();
    let uses = g.use_counts();
    let is_out = g.output_mask();
    let mut role = vec![Role::Root; g.nodes.len()];
    let mut anchor_of: HashMap<ValueId, NodeId> = HashMap::new();
    // Operand inlining: to_mm[n] = n's value reaches a matmul operand through single-use transposes,
    // reshapes and scalar scalings only; such a reshape of an inlined transpose or scaling is itself
    // inlined (its index remapped) instead of a view that would need its input stored.
    let single = |v: ValueId| !is_out[v.index()] && uses[v.index()] == 1 && consumers[v.index()].len() == 1;
    let mut to_mm = vec![false; g.nodes.len()];
    let mut inline_reshape = vec![false; g.nodes.len()];
    if operands {
        let ids: Vec<NodeId> = g.node_ids().collect();
        for &n in ids.iter().rev() {
            let node = g.node(n);
            if node.outputs.len() != 1 || !single(node.outputs[0]) {
                continue;
            }
            let c = consumers[node.outputs[0].index()][0];
            let cop = &g.node(c).op;
            let pass = matches!(cop, MirOp::Reshape { .. } | MirOp::Transpose { .. }) || is_scalar_scale(g, c);
            to_mm[n.index()] = *cop == MirOp::MatMul || (pass && to_mm[c.index()]);
        }
        for n in g.node_ids() {
            let node = g.node(n);
            if !matches!(node.op, MirOp::Reshape { .. }) || !to_mm[n.index()] || !g.ty(node.outputs[0]).shape.numel().is_some_and(|k| k > 0) {
                continue;
            }
            if let Some(&i) = node.inputs.first() {
                inline_reshape[n.index()] = match g.producer(i).map(|p| (p, &g.node(p).op)) {
                    Some((p, MirOp::Transpose { .. })) => to_mm[p.index()],
                    // A reshape of an inlined reshape (a view of it would need it stored).
                    Some((p, MirOp::Reshape { .. })) => inline_reshape[p.index()],
                    Some((p, _)) => to_mm[p.index()] && is_scalar_scale(g, p),
                    None => false,
                };
            }
        }
    }
    for n in g.node_ids() {
        let node = g.node(n);
        if inline_reshape[n.index()] {
            role[n.index()] = Role::Inlined;
            continue;
        }
        if is_view(g, n) {
            role[n.index()] = Role::View;
            continue;
        }
        if node.outputs.len() != 1 {
            continue;
        }
        let v = node.outputs[0];
        if is_out[v.index()] || uses[v.index()] != 1 || consumers[v.index()].len() != 1 {
            continue;
        }
        let c = consumers[v.index()][0];
        let cn = g.node(c);
        if (is_view(g, c) && !inline_reshape[c.index()]) || cn.outputs.len() != 1 {
            continue;
        }
        let cv = cn.outputs[0];
        let same_shape = g.ty(cv).shape == g.ty(v).shape;
        if is_inlinable(&node.op) && to_mm[n.index()] && !anchor_of.contains_key(&v) && (is_data_movement(&node.op) || is_scalar_scale(g, n)) {
            // On a path into a matmul operand: a transpose becomes index math in the loads, a scaling
            // one multiply per loaded element, when what it reads is stored or only index math itself.
            let src_ok = node.inputs.iter().filter_map(|&i| g.producer(i)).all(|p| {
                role[p.index()] != Role::Inlined || inline_reshape[p.index()] || is_data_movement(&g.node(p).op)
            });
            if src_ok && !anchor_of.contains_key(&cv) {
                role[n.index()] = Role::Inlined;
                continue;
            }
        }
        if is_inlinable(&node.op) {
            let chain_anchor = anchor_of.get(&v).copied();
            if let Some(a) = chain_anchor {
                // Continue an epilogue chain only through same-shape elementwise consumers (not into
                // a widening cast that feeds an anchor: the chain would store the wider type; the cast
                // is inlined into the anchor's loads instead).
                let widens = matches!(cn.op, MirOp::Cast { to } if to.size() > g.ty(v).dtype.size())
                    && consumers[cv.index()].len() == 1
                    && !is_inlinable(&g.node(consumers[cv.index()][0]).op);
                if is_elementwise(&cn.op) && same_shape && !anchor_of.contains_key(&cv) && !widens {
                    role[n.index()] = Role::Inlined;
                    anchor_of.insert(cv, a);
                }
                continue;
            }
            // A cast is cheaper to redo at each load than to materialize in a wider type (int8
            // operands widened to i32 stay int8 in memory).
            let widen = matches!(node.op, MirOp::Cast { .. });
            let cheap = is_data_movement(&node.op) || widen || numel(g, v) >= numel(g, cv);
            let consumer_ok = is_inlinable(&cn.op)
                || matches!(cn.op, MirOp::MatMul | MirOp::Reduce { .. } | MirOp::ArgReduce { .. })
                || (widen && matches!(cn.op, MirOp::Conv { .. } | MirOp::Pool { .. }));
            let into_anchor = !is_inlinable(&cn.op);
            if consumer_ok && cheap && (!into_anchor || is_data_movement(&node.op) || widen) && !(anchor_of.contains_key(&cv) && !is_inlinable(&cn.op)) {
                role[n.index()] = Role::Inlined;
            }
        } else if takes_epilogue(&node.op) && is_elementwise(&cn.op) && same_shape && !anchor_of.contains_key(&cv) {
            // The anchor's value must not also reach the consumer through another operand.
            role[n.index()] = Role::Anchor;
            anchor_of.insert(cv, n);
        }
    }
    // Diamonds: an elementwise value with several uses, all of which end up in the same kernel (GELU's
    // `x·0.5·(1 + erf(x/√2))` uses x twice), is recomputed inside that kernel instead of materialized;
    // if it carries an anchor's epilogue, the anchor moves to that kernel's root.
    // dest[n] = the root whose kernel computes node n.
    let mut dest: Vec<Option<NodeId>> = vec![None; g.nodes.len()];
    let ids: Vec<NodeId> = g.node_ids().collect();
    for &n in ids.iter().rev() {
        let node = g.node(n);
        dest[n.index()] = match role[n.index()] {
            Role::Root => Some(n),
            Role::View => None,
            Role::Inlined | Role::Anchor => consumers[node.outputs[0].index()].first().and_then(|c| dest[c.index()]),
        };
    }
    for n in g.node_ids() {
        let node = g.node(n);
        if role[n.index()] != Role::Root || node.outputs.len() != 1 || !is_elementwise(&node.op) {
            continue;
        }
        let v = node.outputs[0];
        let cs = &consumers[v.index()];
        if is_out[v.index()] || cs.len() < 2 {
            continue;
        }
        let same_shape = cs.iter().all(|c| {
            let cn = g.node(*c);
            is_elementwise(&cn.op) && cn.outputs.len() == 1 && g.ty(cn.outputs[0]).shape == g.ty(v).shape
        });
        let d = dest[cs[0].index()];
        if !same_shape || d.is_none() || cs.iter().any(|c| dest[c.index()] != d) {
            continue;
        }
        let d = d.unwrap();
        let dv = g.node(d).outputs[0];
        if let Some(&a) = anchor_of.get(&v) {
            // The accumulator stands for the anchor's value at the root's own index: shapes must match.
            if anchor_of.contains_key(&dv) || g.ty(dv).shape != g.ty(v).shape {
                continue;
            }
            anchor_of.insert(dv, a);
        }
        role[n.index()] = Role::Inlined;
        dest[n.index()] = Some(d);
    }
    Fusion { role, anchor_of, row_reduces: HashMap::new() }
}

/// A last-axis reduction kept in a row kernel: sum / mean / max / min over the last axis of a float
/// value, keeping the axis.
fn is_row_reduce(g: &Mir, n: NodeId) -> bool {
    let node = g.node(n);
    let rank = g.ty(node.inputs[0]).shape.rank();
    matches!(&node.op, MirOp::Reduce { op, axes, keepdims: true }
        if axes[..] == [rank - 1] && matches!(op, ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Max | ReduceOp::Min))
        && g.ty(node.outputs[0]).dtype.is_float()
}

/// Row fusion (CPU targets): softmax and LayerNorm become one kernel each. An elementwise root whose
/// value depends, through elementwise ops on its own shape `[.., N]` or its row shape `[.., 1]`, on
/// last-axis reductions of values of its shape, computes those reductions per row inside its kernel
/// (each as a vector loop over the row, in order, later ones using earlier results as scalars) and then
/// the row's N outputs; the intermediate values (max, exp, sum; mean, centered, variance, std) are
/// never materialized. A node joins a region only when every consumer of its value is in the region
/// (or is the root), so nothing outside reads a value that is no longer stored. With `recompute`
/// (GPU targets, where a kernel launch costs more than a few transcendentals) a transcendental read
/// by several passes is recomputed in each instead of ending the region: softmax is one kernel.
pub fn row_fuse(g: &Mir, f: &mut Fusion, recompute: bool) {
    let mut consumers: Vec<Vec<NodeId>> = vec![Vec::new(); g.values.len()];
    for n in g.node_ids() {
        for &i in &g.node(n).inputs {
            consumers[i.index()].push(n);
        }
    }
    let is_out = g.output_mask();
    let ids: Vec<NodeId> = g.node_ids().collect();
    for &r in ids.iter().rev() {
        let root = g.node(r);
        if f.role[r.index()] != Role::Root || root.outputs.len() != 1 || !is_elementwise(&root.op) {
            continue;
        }
        let rv = root.outputs[0];
        let Some(full) = g.ty(rv).shape.as_fixed() else { continue };
        if full.is_empty() || full[full.len() - 1] < 2 || f.anchor_of.contains_key(&rv) {
            continue;
        }
        let mut row = full.clone();
        row[full.len() - 1] = 1;
        // Candidates: the backward closure through eligible nodes.
        let eligible = |n: NodeId| -> bool {
            let node = g.node(n);
            if node.outputs.len() != 1 || f.role[n.index()] == Role::View || is_out[node.outputs[0].index()] {
                return false;
            }
            let Some(sh) = g.ty(node.outputs[0]).shape.as_fixed() else { return false };
            // The epilogue of a matmul or conv stays in its anchor's kernel (a row reduction's may move).
            if f.anchor_of.get(&node.outputs[0]).is_some_and(|&a| !is_row_reduce(g, a)) {
                return false;
            }
            if is_row_reduce(g, n) {
                return g.ty(node.inputs[0]).shape.as_fixed().as_deref() == Some(&full[..]) && sh == row;
            }
            // A transcendental read by more than one pass (softmax's exp: by the sum and by the divide)
            // is stored once rather than recomputed per pass: it ends the region (and starts its own).
            let costly = matches!(&node.op, MirOp::Unary(u) if !matches!(u,
                UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu | UnaryOp::Sqrt | UnaryOp::Recip | UnaryOp::Floor | UnaryOp::Ceil
                    | UnaryOp::Round | UnaryOp::Sign | UnaryOp::Not | UnaryOp::BitNot));
            if costly && !recompute && sh == full && consumers[node.outputs[0].index()].len() > 1 {
                return false;
            }
            is_elementwise(&node.op) && (sh == full || sh == row)
        };
        // At most two reductions chained (LayerNorm: mean then variance; softmax: max then sum): every
        // reduction is one more pass over the row recomputing the region's expression. A longer chain
        // (a LayerNorm feeding a softmax) stops at the latest row output inside it, which keeps its
        // own buffer (and becomes a row kernel of its own).
        let mut stop: Vec<NodeId> = Vec::new();
        let (region, reduces) = loop {
            let mut region: Vec<NodeId> = Vec::new();
            let mut stack: Vec<NodeId> = root.inputs.iter().filter_map(|&i| g.producer(i)).collect();
            while let Some(n) = stack.pop() {
                if region.contains(&n) || stop.contains(&n) || !eligible(n) || region.len() >= 32 {
                    continue;
                }
                region.push(n);
                stack.extend(g.node(n).inputs.iter().filter_map(|&i| g.producer(i)));
            }
            // Prune nodes read from outside the region until none is.
            loop {
                let before = region.len();
                let inside = region.clone();
                region.retain(|&n| consumers[g.node(n).outputs[0].index()].iter().all(|c| *c == r || inside.contains(c)));
                if region.len() == before {
                    break;
                }
            }
            region.sort();
            let mut depth: HashMap<NodeId, usize> = HashMap::new();
            for &n in &region {
                let up = g.node(n).inputs.iter().filter_map(|&i| g.producer(i)).filter_map(|p| depth.get(&p)).max().copied().unwrap_or(0);
                depth.insert(n, up + is_row_reduce(g, n) as usize);
            }
            let reduces: Vec<NodeId> = region.iter().copied().filter(|&n| is_row_reduce(g, n)).collect();
            if depth.values().all(|&d| d <= 2) {
                break (region, reduces);
            }
            // The latest materialized elementwise value with a reduction under it becomes a boundary.
            let cut = region.iter().rev().copied().find(|&n| f.role[n.index()] == Role::Root && is_elementwise(&g.node(n).op) && depth[&n] >= 1);
            match cut {
                Some(c) => stop.push(c),
                None => break (Vec::new(), Vec::new()),
            }
        };
        if reduces.is_empty() {
            continue;
        }
        for &n in &region {
            f.role[n.index()] = Role::Inlined;
            f.anchor_of.remove(&g.node(n).outputs[0]);
        }
        f.row_reduces.insert(r, reduces);
    }
}

/// Planning options.
#[derive(Clone, Debug)]
pub struct PlanOptions {
    /// Alignment of arena and weights offsets in bytes.
    pub align: usize,
    /// Columns per GEMM panel = lanes of the micro-kernel's vector accumulators: the target's f32
    /// vector width × 2 (AVX2 and NEON: 16; AVX-512: 32).
    pub gemm_nr: usize,
    /// Rows per GEMM micro-kernel tile: `gemm_mr` × 2 vector accumulators must fit the register file
    /// with room for the B vectors (AVX2: 6 rows, 12 of 16 ymm; AVX-512: 8 rows, 16 of 32 zmm).
    pub gemm_mr: usize,
    /// Softmax / LayerNorm as one row kernel each ([`row_fuse`]); CPU targets turn it on.
    pub row_fusion: bool,
    /// Row kernels recompute a transcendental that several passes read instead of storing it
    /// ([`row_fuse`]'s `recompute`; the shader targets turn it on: softmax becomes one kernel).
    pub row_recompute: bool,
    /// Transposes, reshapes and scalar scalings on a single-use path into a matmul operand are
    /// inlined into the matmul's loads instead of materialized ([`fuse_with`]; the shader targets
    /// turn it on: attention's K^T and its scalings are no dispatches of their own).
    pub inline_operands: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions { align: 64, gemm_nr: GEMM_NR, gemm_mr: GEMM_MR, row_fusion: false, row_recompute: false, inline_operands: false }
    }
}

fn align_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

fn strides(shape: &[usize]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1] as i64;
    }
    s
}

fn linear(idx: &[Expr], shape: &[usize]) -> Expr {
    let st = strides(shape);
    let mut e = Expr::Int(0);
    for (i, x) in idx.iter().enumerate() {
        if shape[i] == 1 {
            continue;
        }
        e = Expr::add(e, Expr::mul(x.clone(), Expr::Int(st[i])));
    }
    e
}

/// Index into an operand broadcast to `out` rank: drop leading dims, pin size-1 dims to 0.
fn bidx(idx: &[Expr], in_shape: &[usize]) -> Vec<Expr> {
    let off = idx.len() - in_shape.len();
    in_shape.iter().enumerate().map(|(i, &d)| if d == 1 { Expr::Int(0) } else { idx[i + off].clone() }).collect()
}

fn clamp(e: Expr, lo: i64, hi: i64) -> Expr {
    Expr::i(IOp::Min, Expr::i(IOp::Max, e, Expr::Int(lo)), Expr::Int(hi))
}

struct Planner<'g> {
    g: &'g Mir,
    fusion: Fusion,
    /// Value → buffer index, for materialized values.
    buf_of: Vec<Option<u32>>,
    buffers: Vec<Buffer>,
    /// Buffer → root buffer (itself unless a view) and byte offset within the root.
    root_of: Vec<(u32, usize)>,
    weights: Vec<u8>,
    transposed_weight: HashMap<ValueId, u32>,
    /// Float matmul weights packed in panels of `GEMM_NR` columns: [N/NR (rounded up), K, NR].
    packed_weight: HashMap<ValueId, u32>,
    align: usize,
    nr: usize,
    mr: usize,
}

/// Columns per packed weight panel = lanes of the GEMM micro-kernel's vector accumulators.
pub const GEMM_NR: usize = 16;
/// Rows per GEMM micro-kernel tile by default (6 rows × 16 lanes = 12 AVX2 accumulators).
pub const GEMM_MR: usize = 6;

/// The index into a reshape's input (`si`) of element `idx` of its output (`so`): the non-unit dims
/// in groups of equal products, each group's flat offset split over its input dims (the whole index
/// linearized if the dims do not group).
fn reshape_index(idx: &[Expr], so: &[usize], si: &[usize]) -> Vec<Expr> {
    let on: Vec<usize> = (0..so.len()).filter(|&i| so[i] != 1).collect();
    let inn: Vec<usize> = (0..si.len()).filter(|&i| si[i] != 1).collect();
    let mut out = vec![Expr::Int(0); si.len()];
    let (mut i, mut j) = (0, 0);
    while i < on.len() && j < inn.len() {
        let (i0, j0) = (i, j);
        let (mut po, mut pi) = (so[on[i]], si[inn[j]]);
        i += 1;
        j += 1;
        while po != pi {
            if po < pi && i < on.len() {
                po *= so[on[i]];
                i += 1;
            } else if pi < po && j < inn.len() {
                pi *= si[inn[j]];
                j += 1;
            } else {
                return unflatten(&linear(idx, so), si);
            }
        }
        let od: Vec<usize> = on[i0..i].iter().map(|&k| so[k]).collect();
        let ox: Vec<Expr> = on[i0..i].iter().map(|&k| idx[k].clone()).collect();
        let id: Vec<usize> = inn[j0..j].iter().map(|&k| si[k]).collect();
        for (k, e) in inn[j0..j].iter().zip(unflatten(&linear(&ox, &od), &id)) {
            out[*k] = e;
        }
    }
    if i < on.len() || j < inn.len() {
        return unflatten(&linear(idx, so), si);
    }
    out
}

/// Row-major multi-index of a flat row number over `dims`.
fn unflatten(row: &Expr, dims: &[usize]) -> Vec<Expr> {
    let st = strides(dims);
    dims.iter()
        .enumerate()
        .map(|(i, &d)| {
            if d == 1 {
                return Expr::Int(0);
            }
            let q = Expr::i(IOp::Div, row.clone(), Expr::Int(st[i]));
            // The outermost index needs no remainder: rows are in range.
            if i == 0 {
                q
            } else {
                Expr::i(IOp::Rem, q, Expr::Int(d as i64))
            }
        })
        .collect()
}

/// Per-kernel lowering state.
struct KB {
    params: Vec<Param>,
    bindings: Vec<u32>,
    vars: u32,
    subst: HashMap<ValueId, Expr>,
}

impl KB {
    fn var(&mut self) -> Var {
        self.vars += 1;
        Var(self.vars - 1)
    }
    fn param(&mut self, buf: u32, b: &Buffer, access: Access) -> u32 {
        if let Some(p) = self.bindings.iter().position(|&x| x == buf) {
            if access != Access::Read {
                self.params[p].access = Access::ReadWrite;
            }
            return p as u32;
        }
        self.bindings.push(buf);
        self.params.push(Param { dtype: b.dtype, elems: b.elems(), access });
        (self.params.len() - 1) as u32
    }
}

fn lit(v: f64, d: DType) -> Expr {
    Expr::Lit(v, d)
}

/// The saturation range of a quantized dtype, as f32 arithmetic sees it. The kernel adds the zero
/// point in f32, which is exact for 8- and 16-bit zero points; with a 32-bit one, |x / s| beyond 2^24
/// may round differently from the interpreter's i64 sum.
fn quant_range(d: DType) -> (f64, f64) {
    let (lo, hi) = d.int_range().unwrap_or((i64::MIN, i64::MAX));
    (lo as f64, hi as f64)
}

fn identity(op: ReduceOp, d: DType) -> f64 {
    match op {
        ReduceOp::Sum | ReduceOp::Mean => 0.0,
        ReduceOp::Prod => 1.0,
        ReduceOp::Max => {
            if d.is_float() {
                f64::NEG_INFINITY
            } else {
                int_min(d)
            }
        }
        ReduceOp::Min => {
            if d.is_float() {
                f64::INFINITY
            } else {
                int_max(d)
            }
        }
    }
}

fn int_min(d: DType) -> f64 {
    match d {
        DType::I8 => -128.0,
        DType::I16 => -32768.0,
        DType::I32 => i32::MIN as f64,
        DType::I64 => i64::MIN as f64,
        _ => 0.0,
    }
}
fn int_max(d: DType) -> f64 {
    match d {
        DType::I8 => 127.0,
        DType::U8 | DType::Bool => 255.0,
        DType::I16 => 32767.0,
        DType::U16 => 65535.0,
        DType::I32 => i32::MAX as f64,
        DType::U32 => u32::MAX as f64,
        DType::I64 => i64::MAX as f64,
        DType::U64 => u64::MAX as f64,
        _ => f64::INFINITY,
    }
}

/// Builds nested loops over `shape`, returning the statement list and the index expressions; `inner`
/// receives the indices and returns the innermost body.
fn nest(kb: &mut KB, shape: &[usize], kind_outer: LoopKind, inner: &mut dyn FnMut(&mut KB, &[Expr]) -> Vec<Stmt>) -> Vec<Stmt> {
    // Size-1 dims get no loop (index 0), so the outermost real loop is the one that is split.
    let vars: Vec<Option<Var>> = shape.iter().map(|&d| (d != 1).then(|| kb.var())).collect();
    let idx: Vec<Expr> = vars.iter().map(|v| v.map_or(Expr::Int(0), Expr::Var)).collect();
    let mut body = inner(kb, &idx);
    let first = vars.iter().position(Option::is_some);
    for (i, v) in vars.iter().enumerate().rev() {
        let Some(v) = *v else { continue };
        let kind = if Some(i) == first { kind_outer } else { LoopKind::Serial };
        body = vec![Stmt::For { var: v, extent: shape[i] as i64, kind, body }];
    }
    body
}

impl<'g> Planner<'g> {
    fn shape(&self, v: ValueId) -> Vec<usize> {
        self.g.ty(v).shape.as_fixed().expect("plan checks static shapes")
    }
    fn dt(&self, v: ValueId) -> DType {
        self.g.ty(v).dtype
    }

    fn add_buffer(&mut self, b: Buffer, root: Option<(u32, usize)>) -> u32 {
        let id = self.buffers.len() as u32;
        self.buffers.push(b);
        self.root_of.push(root.unwrap_or((id, 0)));
        id
    }

    fn add_weight(&mut self, label: String, c: &ConstData) -> u32 {
        let off = align_up(self.weights.len(), self.align);
        self.weights.resize(off, 0);
        self.weights.extend_from_slice(c.data.bytes());
        self.add_buffer(Buffer { base: Base::Weights, offset: off, dtype: c.dtype, shape: c.shape.clone(), label }, None)
    }

    /// Element `idx` of value `v` inside a kernel.
    fn elem(&mut self, kb: &mut KB, v: ValueId, idx: &[Expr]) -> Expr {
        if let Some(e) = kb.subst.get(&v) {
            return e.clone();
        }
        if let Def::Const(c) = &self.g.value(v).def {
            if c.numel() == 1 && !c.dtype.is_quantized_block() {
                return lit(c.get_f64(0), c.dtype);
            }
        }
        if let Some(b) = self.buf_of[v.index()] {
            let shape = self.buffers[b as usize].shape.clone();
            let p = kb.param(b, &self.buffers[b as usize].clone(), Access::Read);
            return Expr::load(p, linear(idx, &shape));
        }
        let n = self.g.producer(v).expect("non-materialized values are node outputs");
        self.node_expr(kb, n, idx)
    }

    /// The per-element expression of an inlinable node.
    fn node_expr(&mut self, kb: &mut KB, n: NodeId, idx: &[Expr]) -> Expr {
        let node = self.g.node(n).clone();
        let ins = &node.inputs;
        match &node.op {
            MirOp::Unary(u) => {
                let x = self.elem(kb, ins[0], &bidx(idx, &self.shape(ins[0])));
                Expr::Un(*u, self.dt(ins[0]), Box::new(x))
            }
            MirOp::Binary(b) => {
                let a = self.elem(kb, ins[0], &bidx(idx, &self.shape(ins[0])));
                let mut c = self.elem(kb, ins[1], &bidx(idx, &self.shape(ins[1])));
                let (da, db) = (self.dt(ins[0]), self.dt(ins[1]));
                if da != db {
                    c = Expr::Cast { from: db, to: da, x: Box::new(c) };
                }
                Expr::Bin(*b, da, Box::new(a), Box::new(c))
            }
            MirOp::Where => {
                let c = self.elem(kb, ins[0], &bidx(idx, &self.shape(ins[0])));
                let a = self.elem(kb, ins[1], &bidx(idx, &self.shape(ins[1])));
                let b = self.elem(kb, ins[2], &bidx(idx, &self.shape(ins[2])));
                Expr::Select(Box::new(c), Box::new(a), Box::new(b))
            }
            MirOp::Cast { to } => {
                let x = self.elem(kb, ins[0], idx);
                Expr::Cast { from: self.dt(ins[0]), to: *to, x: Box::new(x) }
            }
            MirOp::Quantize { axis } | MirOp::Dequantize { axis } | MirOp::FakeQuantize { axis } => {
                // As the interpreter (rlx-interp's quant.rs): f32 arithmetic whatever the dtypes.
                let f32_of = |e: Expr, d: DType| if d == DType::F32 { e } else { Expr::Cast { from: d, to: DType::F32, x: Box::new(e) } };
                let (sd, zd, xd) = (self.dt(ins[1]), self.dt(ins[2]), self.dt(ins[0]));
                let cidx: Vec<Expr> = if self.g.ty(ins[1]).shape.numel() == Some(1) {
                    vec![Expr::Int(0); self.shape(ins[1]).len()]
                } else if self.shape(ins[1]) == self.shape(ins[0]) {
                    idx.to_vec()
                } else {
                    vec![idx[*axis].clone()]
                };
                let scale = self.elem(kb, ins[1], &cidx);
                let zp = self.elem(kb, ins[2], &cidx);
                let x = self.elem(kb, ins[0], idx);
                let f = |op: BinaryOp, a: Expr, b: Expr| Expr::Bin(op, DType::F32, Box::new(a), Box::new(b));
                // (v - zp) · s for an integer v, the difference exact in i64 and rounded once to f32.
                let deq = |v: Expr, vd: DType, zp: Expr, scale: Expr| {
                    let i = |e: Expr, d: DType| Expr::Cast { from: d, to: DType::I64, x: Box::new(e) };
                    let diff = Expr::Bin(BinaryOp::Sub, DType::I64, Box::new(i(v, vd)), Box::new(i(zp, zd)));
                    f(BinaryOp::Mul, Expr::Cast { from: DType::I64, to: DType::F32, x: Box::new(diff) }, f32_of(scale, sd))
                };
                if matches!(node.op, MirOp::Dequantize { .. }) {
                    let v = deq(x, xd, zp, scale);
                    return if sd == DType::F32 { v } else { Expr::Cast { from: DType::F32, to: sd, x: Box::new(v) } };
                }
                // saturate(round_half_even(x / s) + zp); NaN gives zp.
                let (lo, hi) = quant_range(zd);
                let r = Expr::Un(UnaryOp::Round, DType::F32, Box::new(f(BinaryOp::Div, f32_of(x, xd), f32_of(scale.clone(), sd))));
                let nan = Expr::Un(UnaryOp::IsNan, DType::F32, Box::new(r.clone()));
                let r = Expr::Select(Box::new(nan), Box::new(lit(0.0, DType::F32)), Box::new(r));
                let v = f(BinaryOp::Add, r, f32_of(zp.clone(), zd));
                let v = f(BinaryOp::Min, f(BinaryOp::Max, v, lit(lo, DType::F32)), lit(hi, DType::F32));
                let q = Expr::Cast { from: DType::F32, to: zd, x: Box::new(v) };
                if matches!(node.op, MirOp::Quantize { .. }) {
                    return q;
                }
                let v = deq(q, zd, zp, scale);
                if xd == DType::F32 { v } else { Expr::Cast { from: DType::F32, to: xd, x: Box::new(v) } }
            }
            MirOp::Expand { .. } => {
                let s = self.shape(ins[0]);
                self.elem(kb, ins[0], &bidx(idx, &s))
            }
            MirOp::Reshape { .. } => {
                // An inlined reshape (operand inlining): remap the index group by group of dims with
                // equal products (a split or merge of adjacent dims; unit dims are pinned to 0).
                let (so, si) = (self.shape(node.outputs[0]), self.shape(ins[0]));
                let in_idx = reshape_index(idx, &so, &si);
                self.elem(kb, ins[0], &in_idx)
            }
            MirOp::Transpose { perm } => {
                let mut in_idx = vec![Expr::Int(0); perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    in_idx[p] = idx[i].clone();
                }
                self.elem(kb, ins[0], &in_idx)
            }
            MirOp::Slice { axes, starts, ends, steps } => {
                let s = self.shape(ins[0]);
                let mut in_idx = idx.to_vec();
                for (k, &a) in axes.iter().enumerate() {
                    let (st, _) = slice_range(s[a] as i64, starts[k], ends[k], steps[k]);
                    in_idx[a] = Expr::add(Expr::Int(st), Expr::mul(idx[a].clone(), Expr::Int(steps[k])));
                }
                self.elem(kb, ins[0], &in_idx)
            }
            MirOp::Pad { pads, mode, value } => {
                let s = self.shape(ins[0]);
                let r = s.len();
                let mut in_idx = Vec::with_capacity(r);
                let mut inside: Option<Expr> = None;
                for i in 0..r {
                    let d = s[i] as i64;
                    let j = Expr::i(IOp::Sub, idx[i].clone(), Expr::Int(pads[i]));
                    if pads[i] <= 0 && pads[i + r] <= 0 {
                        in_idx.push(j);
                        continue;
                    }
                    let e = match mode {
                        PadMode::Constant => {
                            let c = Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(0), j.clone()), Expr::i(IOp::Lt, j.clone(), Expr::Int(d)));
                            inside = Some(match inside.take() {
                                Some(p) => Expr::i(IOp::And, p, c),
                                None => c,
                            });
                            clamp(j, 0, d - 1)
                        }
                        PadMode::Edge => clamp(j, 0, d - 1),
                        PadMode::Reflect => {
                            // j < 0 → -j; j >= d → 2(d-1) - j.
                            let neg = Expr::i(IOp::Lt, j.clone(), Expr::Int(0));
                            let over = Expr::i(IOp::Le, Expr::Int(d), j.clone());
                            let refl = Expr::Select(
                                Box::new(neg),
                                Box::new(Expr::i(IOp::Sub, Expr::Int(0), j.clone())),
                                Box::new(Expr::Select(Box::new(over), Box::new(Expr::i(IOp::Sub, Expr::Int(2 * (d - 1)), j.clone())), Box::new(j))),
                            );
                            clamp(refl, 0, d - 1)
                        }
                        PadMode::Wrap => {
                            let k = (pads[i].max(0) / d.max(1) + 1) * d;
                            Expr::i(IOp::Rem, Expr::add(j, Expr::Int(k)), Expr::Int(d.max(1)))
                        }
                    };
                    in_idx.push(e);
                }
                let x = self.elem(kb, ins[0], &in_idx);
                match inside {
                    Some(c) => Expr::Select(Box::new(c), Box::new(x), Box::new(lit(*value, self.dt(ins[0])))),
                    None => x,
                }
            }
            MirOp::Concat { axis } => {
                let a = *axis;
                let mut offs = Vec::new();
                let mut acc = 0i64;
                for &i in ins {
                    offs.push(acc);
                    acc += self.shape(i)[a] as i64;
                }
                let last = ins.len() - 1;
                let mut in_idx = idx.to_vec();
                let len_last = self.shape(ins[last])[a] as i64;
                in_idx[a] = clamp(Expr::i(IOp::Sub, idx[a].clone(), Expr::Int(offs[last])), 0, len_last - 1);
                let mut e = self.elem(kb, ins[last], &in_idx);
                for k in (0..last).rev() {
                    let len = self.shape(ins[k])[a] as i64;
                    if len == 0 {
                        continue;
                    }
                    let mut ii = idx.to_vec();
                    ii[a] = clamp(Expr::i(IOp::Sub, idx[a].clone(), Expr::Int(offs[k])), 0, len - 1);
                    let x = self.elem(kb, ins[k], &ii);
                    let cond = Expr::i(IOp::Lt, idx[a].clone(), Expr::Int(offs[k] + len));
                    e = Expr::Select(Box::new(cond), Box::new(x), Box::new(e));
                }
                e
            }
            MirOp::Gather { axis } => {
                let a = *axis;
                let s = self.shape(ins[0]);
                let q = self.shape(ins[1]).len();
                let raw = self.elem(kb, ins[1], &idx[a..a + q]);
                let gi = Expr::ToIndex { from: self.dt(ins[1]), x: Box::new(raw) };
                let d = s[a] as i64;
                let norm = Expr::Select(Box::new(Expr::i(IOp::Lt, gi.clone(), Expr::Int(0))), Box::new(Expr::add(gi.clone(), Expr::Int(d))), Box::new(gi));
                let mut in_idx: Vec<Expr> = idx[..a].to_vec();
                in_idx.push(clamp(norm, 0, d - 1));
                in_idx.extend(idx[a + q..].iter().cloned());
                self.elem(kb, ins[0], &in_idx)
            }
            MirOp::GatherElements { axis } => {
                let a = *axis;
                let d = self.shape(ins[0])[a] as i64;
                let raw = self.elem(kb, ins[1], idx);
                let gi = Expr::ToIndex { from: self.dt(ins[1]), x: Box::new(raw) };
                let norm = Expr::Select(Box::new(Expr::i(IOp::Lt, gi.clone(), Expr::Int(0))), Box::new(Expr::add(gi.clone(), Expr::Int(d))), Box::new(gi));
                let mut in_idx = idx.to_vec();
                in_idx[a] = clamp(norm, 0, d - 1);
                self.elem(kb, ins[0], &in_idx)
            }
            MirOp::GatherNd { batch_dims } => {
                // out = indices.shape[..q-1] ++ data.shape[b+depth..]; index tuple at indices[idx[..q-1], j].
                let b = *batch_dims;
                let sd = self.shape(ins[0]);
                let si = self.shape(ins[1]);
                let q = si.len();
                let depth = si[q - 1];
                let mut in_idx: Vec<Expr> = idx[..b].to_vec();
                for j in 0..depth {
                    let mut ii: Vec<Expr> = idx[..q - 1].to_vec();
                    ii.push(Expr::Int(j as i64));
                    let raw = self.elem(kb, ins[1], &ii);
                    let gi = Expr::ToIndex { from: self.dt(ins[1]), x: Box::new(raw) };
                    let d = sd[b + j] as i64;
                    let norm = Expr::Select(Box::new(Expr::i(IOp::Lt, gi.clone(), Expr::Int(0))), Box::new(Expr::add(gi.clone(), Expr::Int(d))), Box::new(gi));
                    in_idx.push(clamp(norm, 0, d - 1));
                }
                in_idx.extend(idx[q - 1..].iter().cloned());
                self.elem(kb, ins[0], &in_idx)
            }
            other => unreachable!("node_expr on non-inlinable {}", other.kind()),
        }
    }

    /// Lowers the kernel rooted at node `r`.
    fn kernel(&mut self, r: NodeId) -> (Kernel, Vec<u32>, Vec<NodeId>) {
        let g = self.g;
        let root = g.node(r).clone();
        let out = root.outputs[0];
        let out_buf = self.buf_of[out.index()].expect("roots are materialized");
        let out_shape = self.shape(out);
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let ob = self.buffers[out_buf as usize].clone();
        let op = kb.param(out_buf, &ob, Access::Write);
        let anchor = self.fusion.anchor_of.get(&out).copied().or(if is_inlinable(&root.op) { None } else { Some(r) });
        let mut nodes = vec![r];
        if let Some(reduces) = self.fusion.row_reduces.get(&r).cloned() {
            nodes = reduces.iter().copied().chain([r]).collect();
            let lead = out_shape[..out_shape.len() - 1].to_vec();
            let n = out_shape[out_shape.len() - 1];
            let body = nest(&mut kb, &lead, LoopKind::Parallel, &mut |kb, ridx| {
                let mut stmts = Vec::new();
                let mut ridx0 = ridx.to_vec();
                ridx0.push(Expr::Int(0));
                for &d in &reduces {
                    let dnode = g.node(d).clone();
                    let (pre, val) = self.anchor_body(kb, &dnode, &ridx0);
                    stmts.extend(pre);
                    let s = kb.var();
                    stmts.push(Stmt::Decl { var: s, dtype: self.dt(dnode.outputs[0]), init: val });
                    kb.subst.insert(dnode.outputs[0], Expr::Var(s));
                }
                let j = kb.var();
                let mut idx = ridx.to_vec();
                idx.push(Expr::Var(j));
                let v = self.node_expr(kb, r, &idx);
                stmts.push(Stmt::For { var: j, extent: n as i64, kind: LoopKind::Serial, body: vec![Stmt::Store { buf: op, index: linear(&idx, &out_shape), value: v }] });
                for &d in &reduces {
                    kb.subst.remove(&g.node(d).outputs[0]);
                }
                stmts
            });
            let name = format!("{}+{}", g.node(reduces[0]).name, root.name);
            return (Kernel { name, params: kb.params, body, vars: kb.vars }, kb.bindings, nodes);
        }
        let body = match anchor {
            None => nest(&mut kb, &out_shape, LoopKind::Parallel, &mut |kb, idx| {
                let v = self.node_expr(kb, r, idx);
                vec![Stmt::Store { buf: op, index: linear(idx, &out_shape), value: v }]
            }),
            Some(a) if self.is_gemm(a) => {
                if a != r {
                    nodes.insert(0, a);
                }
                self.gemm_body(&mut kb, a, r, op, &out_shape)
            }
            Some(a) => {
                if a != r {
                    nodes.insert(0, a);
                }
                let anode = g.node(a).clone();
                let av = anode.outputs[0];
                nest(&mut kb, &out_shape, LoopKind::Parallel, &mut |kb, idx| {
                    let (mut pre, acc) = self.anchor_body(kb, &anode, idx);
                    kb.subst.insert(av, acc);
                    let v = if a == r { kb.subst[&av].clone() } else { self.node_expr(kb, r, idx) };
                    kb.subst.remove(&av);
                    pre.push(Stmt::Store { buf: op, index: linear(idx, &out_shape), value: v });
                    pre
                })
            }
        };
        let name = match anchor {
            Some(a) if a != r => format!("{}+{}", g.node(a).name, root.name),
            _ => root.name.clone(),
        };
        (Kernel { name, params: kb.params, body, vars: kb.vars }, kb.bindings, nodes)
    }

    /// A matmul with a packed float weight on the right and a matrix (or batch of them) on the left.
    fn is_gemm(&self, a: NodeId) -> bool {
        let n = self.g.node(a);
        if n.op != MirOp::MatMul {
            return false;
        }
        let (x, w) = (n.inputs[0], n.inputs[1]);
        if !self.dt(x).is_float() || self.shape(x).len() < 2 {
            return false;
        }
        if self.packed_weight.contains_key(&w) {
            return true;
        }
        // A materialized right operand (rows of B contiguous along N) with at least one full panel.
        let sb = self.shape(w);
        if sb.len() < 2 || sb[sb.len() - 1] < self.nr || self.transposed_weight.contains_key(&w) {
            return false;
        }
        if self.buf_of[w.index()].is_some() {
            return true;
        }
        // An inlined transpose that keeps the last dim last (attention's V heads) streams along N too.
        match self.g.producer(w).map(|p| (p, &self.g.node(p).op)) {
            Some((p, MirOp::Transpose { perm })) => {
                self.fusion.role[p.index()] == Role::Inlined && perm.last() == Some(&(perm.len() - 1)) && self.buf_of[self.g.node(p).inputs[0].index()].is_some()
            }
            _ => false,
        }
    }

    /// The GEMM micro-kernel: rows in tiles of `gemm_mr` (one parallel loop over tiles; the last tile's
    /// extra rows repeat the last row, writing identical values), columns in packed panels of GEMM_NR
    /// held in vector accumulators across K, the epilogue applied to each accumulator before its store.
    /// Columns past the last full panel use the per-element path.
    fn gemm_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize]) -> Vec<Stmt> {
        let anode = self.g.node(a).clone();
        let av = anode.outputs[0];
        let (x, w) = (anode.inputs[0], anode.inputs[1]);
        let sa = self.shape(x);
        let kdim = sa[sa.len() - 1];
        let rows_shape = out_shape[..out_shape.len() - 1].to_vec();
        let rows: usize = rows_shape.iter().product();
        let n = out_shape[out_shape.len() - 1];
        let packed = self.packed_weight.get(&w).copied();
        // Panel width: the packed weight's own (it may be widened for few rows), else the target's.
        let nr = packed.map_or(self.nr, |pb| self.buffers[pb as usize].shape[2]);
        let mr = self.mr.min(rows.max(1));
        let full = n / nr;
        let tail = n % nr;
        let pp = packed.map(|pb| kb.param(pb, &self.buffers[pb as usize].clone(), Access::Read));
        let sb = self.shape(w);
        let odt = self.dt(av);
        // Cache blocking: row tiles are grouped in blocks whose slice of A (rows × K) fits in ~256 KB;
        // inside a block every panel of B is swept over all the block's tiles while it is hot. With one
        // block (small M) the panels are the parallel dimension; otherwise the blocks are.
        let tiles = rows.div_ceil(mr);
        let es = odt.size().unwrap_or(4);
        let fit = ((256 * 1024) / (kdim * es).max(1) / mr).max(1);
        let mut nblocks = tiles.div_ceil(fit);
        let mut rb_tiles = tiles;
        if nblocks > 1 {
            // Several blocks: they are the parallel dimension, so make them equal and a multiple of 8
            // (the runtime cuts a loop into 4 chunks per thread: 2, 4 or 8 threads get equal shares),
            // while the tiles allow.
            nblocks = nblocks.max(8).next_multiple_of(8).min(tiles);
            rb_tiles = tiles.div_ceil(nblocks);
            nblocks = tiles.div_ceil(rb_tiles);
        }
        let blk = kb.var();
        let tl = kb.var();
        let blk_e = if nblocks > 1 { Expr::Var(blk) } else { Expr::Int(0) };
        let gtile = Expr::add(Expr::mul(blk_e, Expr::Int(rb_tiles as i64)), Expr::Var(tl));
        let guard = |body: Vec<Stmt>| -> Vec<Stmt> {
            if nblocks * rb_tiles > tiles {
                vec![Stmt::If { cond: Expr::i(IOp::Lt, gtile.clone(), Expr::Int(tiles as i64)), body }]
            } else {
                body
            }
        };
        // Row i of the current tile, clamped to the last row (the last tile may be partial: its extra
        // rows repeat the last row and write identical values).
        let row = |i: usize| clamp(Expr::add(Expr::mul(gtile.clone(), Expr::Int(mr as i64)), Expr::Int(i as i64)), 0, rows as i64 - 1);
        let p = kb.var();
        let mut panels = Vec::new();
        if full > 0 {
            let jv = kb.var();
            let kv = kb.var();
            let accs: Vec<Var> = (0..mr).map(|_| kb.var()).collect();
            let mut inner = Vec::new();
            for (i, &acc) in accs.iter().enumerate() {
                let mut ai = unflatten(&row(i), &sa[..sa.len() - 1]);
                ai.push(Expr::Var(kv));
                let xa = self.elem(kb, x, &ai);
                let bv = match pp {
                    // packed[(p*K + k)*NR + jv]
                    Some(pp) => Expr::load(
                        pp,
                        Expr::add(Expr::mul(Expr::add(Expr::mul(Expr::Var(p), Expr::Int(kdim as i64)), Expr::Var(kv)), Expr::Int(nr as i64)), Expr::Var(jv)),
                    ),
                    None => {
                        // B[batch…, k, n] with B's batch dims broadcast against the output's.
                        let batch = unflatten(&row(i), &rows_shape);
                        let mut bi = bidx(&batch[..batch.len() - 1], &sb[..sb.len() - 2]);
                        bi.push(Expr::Var(kv));
                        bi.push(Expr::add(Expr::mul(Expr::Var(p), Expr::Int(nr as i64)), Expr::Var(jv)));
                        self.elem(kb, w, &bi)
                    }
                };
                let prod = Expr::Bin(BinaryOp::Mul, odt, Box::new(xa), Box::new(bv));
                inner.push(Stmt::Assign { var: acc, value: Expr::Bin(BinaryOp::Add, odt, Box::new(Expr::Var(acc)), Box::new(prod)) });
            }
            let mut vbody: Vec<Stmt> = accs.iter().map(|&acc| Stmt::Decl { var: acc, dtype: odt, init: lit(0.0, odt) }).collect();
            vbody.push(Stmt::For { var: kv, extent: kdim as i64, kind: LoopKind::Serial, body: inner });
            for (i, &acc) in accs.iter().enumerate() {
                let col = Expr::add(Expr::mul(Expr::Var(p), Expr::Int(nr as i64)), Expr::Var(jv));
                let mut idx = unflatten(&row(i), &rows_shape);
                idx.push(col);
                kb.subst.insert(av, Expr::Var(acc));
                let v = if a == r { Expr::Var(acc) } else { self.node_expr(kb, r, &idx) };
                kb.subst.remove(&av);
                vbody.push(Stmt::Store { buf: op, index: linear(&idx, out_shape), value: v });
            }
            let vl = Stmt::For { var: jv, extent: nr as i64, kind: LoopKind::Vector(nr as u32), body: vbody };
            panels = vec![Stmt::For { var: tl, extent: rb_tiles as i64, kind: LoopKind::Serial, body: guard(vec![vl]) }];
        }
        let mut tail_body = Vec::new();
        if tail > 0 {
            // Its own tile loop variable (every loop has a distinct variable).
            let tl2 = kb.var();
            let blk_e = if nblocks > 1 { Expr::Var(blk) } else { Expr::Int(0) };
            let gtile2 = Expr::add(Expr::mul(blk_e, Expr::Int(rb_tiles as i64)), Expr::Var(tl2));
            let guard2 = |body: Vec<Stmt>| -> Vec<Stmt> {
                if nblocks * rb_tiles > tiles {
                    vec![Stmt::If { cond: Expr::i(IOp::Lt, gtile2.clone(), Expr::Int(tiles as i64)), body }]
                } else {
                    body
                }
            };
            let i = kb.var();
            let jt = kb.var();
            let rowi = clamp(Expr::add(Expr::mul(gtile2.clone(), Expr::Int(mr as i64)), Expr::Var(i)), 0, rows as i64 - 1);
            let mut idx = unflatten(&rowi, &rows_shape);
            idx.push(Expr::add(Expr::Int((full * nr) as i64), Expr::Var(jt)));
            let (mut pre, acc) = self.anchor_body(kb, &anode, &idx);
            kb.subst.insert(av, acc);
            let v = if a == r { kb.subst[&av].clone() } else { self.node_expr(kb, r, &idx) };
            kb.subst.remove(&av);
            pre.push(Stmt::Store { buf: op, index: linear(&idx, out_shape), value: v });
            let inner = Stmt::For { var: jt, extent: tail as i64, kind: LoopKind::Serial, body: pre };
            let rows_loop = Stmt::For { var: i, extent: mr as i64, kind: LoopKind::Serial, body: vec![inner] };
            tail_body = vec![Stmt::For { var: tl2, extent: rb_tiles as i64, kind: LoopKind::Serial, body: guard2(vec![rows_loop]) }];
        }
        if nblocks > 1 {
            let mut body = Vec::new();
            if full > 0 {
                body.push(Stmt::For { var: p, extent: full as i64, kind: LoopKind::Serial, body: panels });
            }
            body.extend(tail_body);
            return vec![Stmt::For { var: blk, extent: nblocks as i64, kind: LoopKind::Parallel, body }];
        }
        // One block: split over panels; the tail columns are the last "panel".
        let np = full + (tail > 0) as usize;
        let mut body = Vec::new();
        if full > 0 {
            if tail > 0 {
                body.push(Stmt::If { cond: Expr::i(IOp::Lt, Expr::Var(p), Expr::Int(full as i64)), body: panels });
            } else {
                body.extend(panels);
            }
        }
        if tail > 0 {
            body.push(Stmt::If { cond: Expr::i(IOp::Le, Expr::Int(full as i64), Expr::Var(p)), body: tail_body });
        }
        vec![Stmt::For { var: p, extent: np as i64, kind: LoopKind::Parallel, body }]
    }

    /// Statements computing an anchor's value at output index `idx`, and the expression of that value.
    fn anchor_body(&mut self, kb: &mut KB, n: &rlx_ir::Node<MirOp>, idx: &[Expr]) -> (Vec<Stmt>, Expr) {
        let ins = &n.inputs;
        let odt = self.dt(n.outputs[0]);
        match &n.op {
            MirOp::MatMul => {
                let (sa, sb) = (self.shape(ins[0]), self.shape(ins[1]));
                let (a1, b1) = (sa.len() == 1, sb.len() == 1);
                let k = if a1 { sa[0] } else { sa[sa.len() - 1] };
                let nb = if a1 { 0 } else { sa.len() - 2 };
                let mb = if b1 { 0 } else { sb.len() - 2 };
                let batch_rank = idx.len() - (!a1) as usize - (!b1) as usize;
                let batch = &idx[..batch_rank];
                let kv = kb.var();
                let kx = Expr::Var(kv);
                let mut ai: Vec<Expr> = bidx(batch, &sa[..nb]);
                if !a1 {
                    ai.push(idx[batch_rank].clone());
                }
                ai.push(kx.clone());
                let mut bi: Vec<Expr> = bidx(batch, &sb[..mb]);
                bi.push(kx.clone());
                if !b1 {
                    bi.push(idx[idx.len() - 1].clone());
                }
                let av = self.elem(kb, ins[0], &ai);
                let packed = self.packed_weight.get(&ins[1]).copied();
                let bv = match (packed, self.transposed_weight.get(&ins[1]).copied()) {
                    (Some(pb), _) => {
                        let (n, kx) = (bi[1].clone(), bi[0].clone());
                        let nr = self.buffers[pb as usize].shape[2] as i64;
                        let idx = Expr::add(
                            Expr::mul(Expr::add(Expr::mul(Expr::i(IOp::Div, n.clone(), Expr::Int(nr)), Expr::Int(k as i64)), kx), Expr::Int(nr)),
                            Expr::i(IOp::Rem, n, Expr::Int(nr)),
                        );
                        let p = kb.param(pb, &self.buffers[pb as usize].clone(), Access::Read);
                        Expr::load(p, idx)
                    }
                    (None, Some(tb)) => {
                        // Weight stored as [N, K]: element (k, n) is at n*K + k.
                        let shape = self.buffers[tb as usize].shape.clone();
                        let p = kb.param(tb, &self.buffers[tb as usize].clone(), Access::Read);
                        Expr::load(p, linear(&[bi[1].clone(), bi[0].clone()], &shape))
                    }
                    (None, None) => self.elem(kb, ins[1], &bi),
                };
                let acc = kb.var();
                let prod = Expr::Bin(BinaryOp::Mul, odt, Box::new(av), Box::new(bv));
                let stmts = vec![
                    Stmt::Decl { var: acc, dtype: odt, init: lit(0.0, odt) },
                    Stmt::For {
                        var: kv,
                        extent: k as i64,
                        kind: LoopKind::Vector(8),
                        body: vec![Stmt::Assign { var: acc, value: Expr::Bin(BinaryOp::Add, odt, Box::new(Expr::Var(acc)), Box::new(prod)) }],
                    },
                ];
                (stmts, Expr::Var(acc))
            }
            MirOp::Reduce { op, axes, keepdims } => {
                let s = self.shape(ins[0]);
                let acc = kb.var();
                let mut in_idx = Vec::with_capacity(s.len());
                let mut loops = Vec::new();
                let mut oi = 0;
                for (d, &sd) in s.iter().enumerate() {
                    if axes.contains(&d) {
                        let v = kb.var();
                        loops.push((v, sd));
                        in_idx.push(Expr::Var(v));
                        if *keepdims {
                            oi += 1;
                        }
                    } else {
                        in_idx.push(idx[oi].clone());
                        oi += 1;
                    }
                }
                let x = self.elem(kb, ins[0], &in_idx);
                let bop = match op {
                    ReduceOp::Sum | ReduceOp::Mean => BinaryOp::Add,
                    ReduceOp::Prod => BinaryOp::Mul,
                    ReduceOp::Max => BinaryOp::Max,
                    ReduceOp::Min => BinaryOp::Min,
                };
                let mut body = vec![Stmt::Assign { var: acc, value: Expr::Bin(bop, odt, Box::new(Expr::Var(acc)), Box::new(x)) }];
                let nloops = loops.len();
                for (i, (v, e)) in loops.into_iter().enumerate().rev() {
                    let kind = if i + 1 == nloops { LoopKind::Vector(8) } else { LoopKind::Serial };
                    body = vec![Stmt::For { var: v, extent: e as i64, kind, body }];
                }
                let mut stmts = vec![Stmt::Decl { var: acc, dtype: odt, init: lit(identity(*op, odt), odt) }];
                stmts.extend(body);
                let count: usize = axes.iter().map(|&a| s[a]).product();
                let val = if *op == ReduceOp::Mean {
                    Expr::Bin(BinaryOp::Div, odt, Box::new(Expr::Var(acc)), Box::new(lit(count as f64, odt)))
                } else {
                    Expr::Var(acc)
                };
                (stmts, val)
            }
            MirOp::ArgReduce { op, axis, keepdims, select_last } => {
                let s = self.shape(ins[0]);
                let dt = self.dt(ins[0]);
                let a = *axis;
                let mut base: Vec<Expr> = Vec::with_capacity(s.len());
                let mut oi = 0;
                for d in 0..s.len() {
                    if d == a {
                        base.push(Expr::Int(0));
                        if *keepdims {
                            oi += 1;
                        }
                    } else {
                        base.push(idx[oi].clone());
                        oi += 1;
                    }
                }
                let best = kb.var();
                let bi = kb.var();
                let j = kb.var();
                let first = self.elem(kb, ins[0], &base);
                let mut at = base.clone();
                at[a] = Expr::Var(j);
                let x = self.elem(kb, ins[0], &at);
                let cmp = match (op, select_last) {
                    (rlx_ir::ArgOp::ArgMax, false) => BinaryOp::Gt,
                    (rlx_ir::ArgOp::ArgMax, true) => BinaryOp::Ge,
                    (rlx_ir::ArgOp::ArgMin, false) => BinaryOp::Lt,
                    (rlx_ir::ArgOp::ArgMin, true) => BinaryOp::Le,
                };
                let cond = Expr::Bin(cmp, dt, Box::new(x.clone()), Box::new(Expr::Var(best)));
                let stmts = vec![
                    Stmt::Decl { var: best, dtype: dt, init: first },
                    Stmt::Decl { var: bi, dtype: DType::I64, init: lit(0.0, DType::I64) },
                    Stmt::For {
                        var: j,
                        extent: s[a] as i64,
                        kind: LoopKind::Serial,
                        body: vec![
                            Stmt::Assign { var: bi, value: Expr::Select(Box::new(cond.clone()), Box::new(Expr::ToIndex { from: DType::I64, x: Box::new(Expr::Var(j)) }), Box::new(Expr::Var(bi))) },
                            Stmt::Assign { var: best, value: Expr::Select(Box::new(cond), Box::new(x), Box::new(Expr::Var(best))) },
                        ],
                    },
                ];
                (stmts, Expr::Var(bi))
            }
            MirOp::Conv { strides, pads, dilations, groups } => {
                let (sx, sw) = (self.shape(ins[0]), self.shape(ins[1]));
                let sp = sx.len() - 2;
                let cg = sw[1];
                let mg = sw[0] / groups;
                let acc = kb.var();
                let init = if ins.len() == 3 { self.elem(kb, ins[2], &[idx[1].clone()]) } else { lit(0.0, odt) };
                let c = kb.var();
                let kvars: Vec<Var> = (0..sp).map(|_| kb.var()).collect();
                // input channel = (m / mg) * cg + c
                let ci = Expr::add(Expr::mul(Expr::i(IOp::Div, idx[1].clone(), Expr::Int(mg as i64)), Expr::Int(cg as i64)), Expr::Var(c));
                let mut xi = vec![idx[0].clone(), ci];
                let mut cond: Option<Expr> = None;
                for i in 0..sp {
                    let pos = Expr::add(
                        Expr::i(IOp::Sub, Expr::mul(idx[2 + i].clone(), Expr::Int(strides[i] as i64)), Expr::Int(pads[i] as i64)),
                        Expr::mul(Expr::Var(kvars[i]), Expr::Int(dilations[i] as i64)),
                    );
                    let ok = Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(0), pos.clone()), Expr::i(IOp::Lt, pos.clone(), Expr::Int(sx[2 + i] as i64)));
                    if pads[i] > 0 || pads[i + sp] > 0 {
                        cond = Some(match cond.take() {
                            Some(p) => Expr::i(IOp::And, p, ok),
                            None => ok,
                        });
                    }
                    xi.push(pos);
                }
                let xv = self.elem(kb, ins[0], &xi);
                let mut wi = vec![idx[1].clone(), Expr::Var(c)];
                wi.extend(kvars.iter().map(|&v| Expr::Var(v)));
                let wv = self.elem(kb, ins[1], &wi);
                let upd = Stmt::Assign {
                    var: acc,
                    value: Expr::Bin(BinaryOp::Add, odt, Box::new(Expr::Var(acc)), Box::new(Expr::Bin(BinaryOp::Mul, odt, Box::new(xv), Box::new(wv)))),
                };
                let mut body = vec![match cond {
                    Some(cnd) => Stmt::If { cond: cnd, body: vec![upd] },
                    None => upd,
                }];
                for i in (0..sp).rev() {
                    body = vec![Stmt::For { var: kvars[i], extent: sw[2 + i] as i64, kind: LoopKind::Serial, body }];
                }
                let stmts = vec![Stmt::Decl { var: acc, dtype: odt, init }, Stmt::For { var: c, extent: cg as i64, kind: LoopKind::Serial, body }];
                (stmts, Expr::Var(acc))
            }
            MirOp::Pool { kind, kernel, strides, pads, dilations, count_include_pad, .. } => {
                let sx = self.shape(ins[0]);
                let sp = kernel.len();
                let acc = kb.var();
                let cnt = kb.var();
                let cntp = kb.var();
                let kvars: Vec<Var> = (0..sp).map(|_| kb.var()).collect();
                let mut xi = vec![idx[0].clone(), idx[1].clone()];
                let mut inb: Option<Expr> = None;
                let mut inpad: Option<Expr> = None;
                for i in 0..sp {
                    let pos = Expr::add(
                        Expr::i(IOp::Sub, Expr::mul(idx[2 + i].clone(), Expr::Int(strides[i] as i64)), Expr::Int(pads[i] as i64)),
                        Expr::mul(Expr::Var(kvars[i]), Expr::Int(dilations[i] as i64)),
                    );
                    let d = sx[2 + i] as i64;
                    let ok = Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(0), pos.clone()), Expr::i(IOp::Lt, pos.clone(), Expr::Int(d)));
                    let okp = Expr::i(
                        IOp::And,
                        Expr::i(IOp::Le, Expr::Int(-(pads[i] as i64)), pos.clone()),
                        Expr::i(IOp::Lt, pos.clone(), Expr::Int(d + pads[i + sp] as i64)),
                    );
                    inb = Some(match inb.take() {
                        Some(p) => Expr::i(IOp::And, p, ok),
                        None => ok,
                    });
                    inpad = Some(match inpad.take() {
                        Some(p) => Expr::i(IOp::And, p, okp),
                        None => okp,
                    });
                    xi.push(pos);
                }
                let xv = self.elem(kb, ins[0], &xi);
                let upd = match kind {
                    PoolKind::Max => Expr::Bin(BinaryOp::Max, odt, Box::new(Expr::Var(acc)), Box::new(xv)),
                    PoolKind::Avg => Expr::Bin(BinaryOp::Add, odt, Box::new(Expr::Var(acc)), Box::new(xv)),
                };
                let one = Expr::Bin(BinaryOp::Add, DType::I64, Box::new(Expr::Var(cnt)), Box::new(lit(1.0, DType::I64)));
                let onep = Expr::Bin(BinaryOp::Add, DType::I64, Box::new(Expr::Var(cntp)), Box::new(lit(1.0, DType::I64)));
                let mut body = vec![
                    Stmt::If { cond: inb.unwrap_or(Expr::Int(1)), body: vec![Stmt::Assign { var: acc, value: upd }, Stmt::Assign { var: cnt, value: one }] },
                    Stmt::If { cond: inpad.unwrap_or(Expr::Int(1)), body: vec![Stmt::Assign { var: cntp, value: onep }] },
                ];
                for i in (0..sp).rev() {
                    body = vec![Stmt::For { var: kvars[i], extent: kernel[i] as i64, kind: LoopKind::Serial, body }];
                }
                let init = match kind {
                    PoolKind::Max => f64::NEG_INFINITY,
                    PoolKind::Avg => 0.0,
                };
                let mut stmts = vec![
                    Stmt::Decl { var: acc, dtype: odt, init: lit(init, odt) },
                    Stmt::Decl { var: cnt, dtype: DType::I64, init: lit(0.0, DType::I64) },
                    Stmt::Decl { var: cntp, dtype: DType::I64, init: lit(0.0, DType::I64) },
                ];
                stmts.extend(body);
                let val = match kind {
                    PoolKind::Max => Expr::Var(acc),
                    PoolKind::Avg => {
                        let div = if *count_include_pad { cntp } else { cnt };
                        let d = Expr::Cast { from: DType::I64, to: odt, x: Box::new(Expr::Var(div)) };
                        Expr::Bin(BinaryOp::Div, odt, Box::new(Expr::Var(acc)), Box::new(d))
                    }
                };
                (stmts, val)
            }
            MirOp::CumSum { axis, exclusive, reverse } => {
                // out[i] = Σ x[j] over j ≤ i (j < i when exclusive; j ≥ i / j > i when reversed).
                // Quadratic in the axis length, which is fine for the position-id and small-scan
                // uses seen in models; a linear scan needs a stateful loop the per-element form lacks.
                let s = self.shape(ins[0]);
                let a = *axis;
                let acc = kb.var();
                let j = kb.var();
                let mut xi = idx.to_vec();
                xi[a] = Expr::Var(j);
                let x = self.elem(kb, ins[0], &xi);
                let (lo, hi) = if *reverse { (idx[a].clone(), Expr::Var(j)) } else { (Expr::Var(j), idx[a].clone()) };
                let cond = if *exclusive { Expr::i(IOp::Lt, lo, hi) } else { Expr::i(IOp::Le, lo, hi) };
                let upd = Stmt::Assign { var: acc, value: Expr::Bin(BinaryOp::Add, odt, Box::new(Expr::Var(acc)), Box::new(x)) };
                let stmts = vec![
                    Stmt::Decl { var: acc, dtype: odt, init: lit(0.0, odt) },
                    Stmt::For { var: j, extent: s[a] as i64, kind: LoopKind::Serial, body: vec![Stmt::If { cond, body: vec![upd] }] },
                ];
                (stmts, Expr::Var(acc))
            }
            other => unreachable!("anchor_body on {}", other.kind()),
        }
    }
}

/// Plans a MIR graph (static shapes, legal for the target) into LIR. Problems name the nodes.
pub fn plan(g: &Mir, opts: &PlanOptions) -> Result<Lir, Vec<Problem>> {
    let mut probs = Vec::new();
    for n in &g.nodes {
        for &o in n.outputs.iter().chain(&n.inputs) {
            if !g.ty(o).shape.is_static() {
                probs.push(Problem { node: Some(n.name.clone()), msg: format!("shape {} is not static; fix {} with --dim NAME=N", g.ty(o).shape, g.ty(o).shape.symbols().join(", ")) });
                break;
            }
        }
        if !lowerable_kinds().contains(&n.op.kind()) {
            probs.push(Problem { node: Some(n.name.clone()), msg: format!("no kernel lowering for {}", n.op.kind()) });
        }
    }
    for &i in &g.inputs {
        if !g.ty(i).shape.is_static() {
            probs.push(Problem { node: None, msg: format!("input '{}' has shape {}; fix {} with --dim NAME=N", g.value(i).name.clone().unwrap_or_default(), g.ty(i).shape, g.ty(i).shape.symbols().join(", ")) });
        }
    }
    if !probs.is_empty() {
        return Err(probs);
    }
    let mut fusion = fuse_with(g, opts.inline_operands);
    if opts.row_fusion {
        row_fuse(g, &mut fusion, opts.row_recompute);
    }
    let mut p = Planner {
        g,
        fusion,
        buf_of: vec![None; g.values.len()],
        buffers: Vec::new(),
        root_of: Vec::new(),
        weights: Vec::new(),
        transposed_weight: HashMap::new(),
        packed_weight: HashMap::new(),
        align: opts.align,
        nr: opts.gemm_nr.max(1),
        mr: opts.gemm_mr.max(1),
    };
    let label = |v: ValueId| -> String {
        match (&g.value(v).name, g.producer(v)) {
            (Some(n), _) => n.clone(),
            (None, Some(n)) => g.node(n).name.clone(),
            (None, None) => format!("%{}", v.0),
        }
    };
    // Inputs.
    for (i, &v) in g.inputs.iter().enumerate() {
        let b = p.add_buffer(Buffer { base: Base::Input(i as u32), offset: 0, dtype: p.dt(v), shape: p.shape(v), label: label(v) }, None);
        p.buf_of[v.index()] = Some(b);
    }
    // Constants that kernels load (scalars become literals; matmul weights are stored transposed).
    let mut needs_load = vec![false; g.values.len()];
    let mut weight_rhs = vec![false; g.values.len()];
    for n in &g.nodes {
        for (k, &i) in n.inputs.iter().enumerate() {
            needs_load[i.index()] = true;
            if k == 1 && n.op == MirOp::MatMul && g.ty(i).shape.rank() == 2 {
                weight_rhs[i.index()] = true;
            }
        }
    }
    for &o in &g.outputs {
        needs_load[o.index()] = true;
    }
    for (k, v) in g.values.iter().enumerate() {
        let Def::Const(c) = &v.def else { continue };
        let vid = ValueId(k as u32);
        let only_kernel_users = g.node_ids().all(|n| !g.node(n).inputs.contains(&vid) || !is_view(g, n));
        if !needs_load[k] || (c.numel() == 1 && !c.dtype.is_quantized_block() && !g.outputs.contains(&vid) && only_kernel_users) {
            continue;
        }
        let users_all_matmul_rhs = weight_rhs[k]
            && g.nodes.iter().all(|n| !n.inputs.contains(&vid) || (n.op == MirOp::MatMul && n.inputs[1] == vid && n.inputs[0] != vid))
            && !g.outputs.contains(&vid);
        if users_all_matmul_rhs && c.dtype.is_float() && c.shape[1] >= p.nr {
            // Few rows (matrix-vector products) leave the micro-kernel with too few accumulators to
            // hide FMA latency; widen the panel instead (up to 4 vectors of lanes per row).
            let rows = g
                .nodes
                .iter()
                .filter(|n| n.op == MirOp::MatMul && n.inputs[1] == vid)
                .map(|n| {
                    let s = g.ty(n.inputs[0]).shape.as_fixed().unwrap_or_default();
                    s[..s.len().saturating_sub(1)].iter().product::<usize>()
                })
                .max()
                .unwrap_or(0);
            // A weight worth splitting across threads (≥ 128 KB) keeps at least two panels: panels are
            // the parallel dimension when there are this few rows.
            let mut nr = p.nr;
            let split = c.data.bytes().len() >= 128 * 1024;
            if rows <= 2 {
                while nr * 2 <= c.shape[1] && nr < p.nr * 4 && (!split || c.shape[1] / (nr * 2) >= 2) {
                    nr *= 2;
                }
            }
            // Panels of nr columns: packed[p][k][j] = w[k][p*NR + j], zero past the last column.
            let (kk, nn) = (c.shape[0], c.shape[1]);
            let es = c.dtype.size().unwrap_or(1);
            let np = nn.div_ceil(nr);
            let src = c.data.bytes();
            let mut t = vec![0u8; np * kk * nr * es];
            for r in 0..kk {
                for col in 0..nn {
                    let s = (r * nn + col) * es;
                    let d = (((col / nr) * kk + r) * nr + col % nr) * es;
                    t[d..d + es].copy_from_slice(&src[s..s + es]);
                }
            }
            let tc = ConstData { dtype: c.dtype, shape: vec![np, kk, nr], data: rlx_ir::Blob::from_vec(t) };
            let b = p.add_weight(format!("{} (packed {}-column panels)", label(vid), nr), &tc);
            p.packed_weight.insert(vid, b);
        } else if users_all_matmul_rhs {
            let (kk, nn) = (c.shape[0], c.shape[1]);
            let es = c.dtype.size().unwrap_or(1);
            let src = c.data.bytes();
            let mut t = vec![0u8; src.len()];
            for r in 0..kk {
                for col in 0..nn {
                    let s = (r * nn + col) * es;
                    let d = (col * kk + r) * es;
                    t[d..d + es].copy_from_slice(&src[s..s + es]);
                }
            }
            let tc = ConstData { dtype: c.dtype, shape: vec![nn, kk], data: rlx_ir::Blob::from_vec(t) };
            let b = p.add_weight(format!("{} (transposed)", label(vid)), &tc);
            p.transposed_weight.insert(vid, b);
        } else {
            let b = p.add_weight(label(vid), c);
            p.buf_of[k] = Some(b);
        }
    }
    // Outputs produced directly by a kernel root land in the caller's output buffer.
    let mut out_slot: HashMap<ValueId, u32> = HashMap::new();
    for (i, &o) in g.outputs.iter().enumerate() {
        if let Some(n) = g.producer(o) {
            if p.fusion.role[n.index()] == Role::Root && !out_slot.contains_key(&o) {
                out_slot.insert(o, i as u32);
            }
        }
    }
    // Walk nodes: views alias; roots get buffers (arena for now, offsets assigned below).
    let mut launches_nodes: Vec<NodeId> = Vec::new();
    for n in g.node_ids() {
        let node = g.node(n);
        match p.fusion.role[n.index()] {
            Role::View => {
                let src = node.inputs[0];
                let Some(sb) = p.buf_of[src.index()] else {
                    unreachable!("view inputs are materialized (fusion never inlines into a view)")
                };
                let (root, off) = p.root_of[sb as usize];
                let mut extra = 0;
                if let MirOp::Slice { axes, starts, ends, steps } = &node.op {
                    let s = p.shape(src);
                    let (st, _) = slice_range(s[axes[0]] as i64, starts[0], ends[0], steps[0]);
                    extra = st as usize * strides(&s)[axes[0]] as usize * p.dt(src).size().unwrap_or(1);
                }
                let sbuf = p.buffers[sb as usize].clone();
                let v = node.outputs[0];
                let b = p.add_buffer(
                    Buffer { base: sbuf.base, offset: sbuf.offset + extra, dtype: p.dt(v), shape: p.shape(v), label: label(v) },
                    Some((root, off + extra)),
                );
                p.buf_of[v.index()] = Some(b);
            }
            Role::Root => {
                for &v in &node.outputs {
                    let base = match out_slot.get(&v) {
                        Some(&i) => Base::Output(i),
                        None => Base::Arena,
                    };
                    let b = p.add_buffer(Buffer { base, offset: 0, dtype: p.dt(v), shape: p.shape(v), label: label(v) }, None);
                    p.buf_of[v.index()] = Some(b);
                }
                launches_nodes.push(n);
            }
            Role::Inlined | Role::Anchor => {}
        }
    }
    // Kernels, in node order.
    let mut launches = Vec::new();
    for &n in &launches_nodes {
        let (kernel, bindings, nodes) = p.kernel(n);
        launches.push(Launch { nodes, kernel, bindings });
    }
    // Copies for outputs that are not a root's own result (views, inputs, constants, duplicates).
    for (i, &o) in g.outputs.iter().enumerate() {
        if out_slot.get(&o) == Some(&(i as u32)) {
            continue;
        }
        let shape = p.shape(o);
        let ob = p.add_buffer(Buffer { base: Base::Output(i as u32), offset: 0, dtype: p.dt(o), shape: shape.clone(), label: label(o) }, None);
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let obuf = p.buffers[ob as usize].clone();
        let op = kb.param(ob, &obuf, Access::Write);
        let body = nest(&mut kb, &shape, LoopKind::Parallel, &mut |kb, idx| {
            let v = p.elem(kb, o, idx);
            vec![Stmt::Store { buf: op, index: linear(idx, &shape), value: v }]
        });
        let kernel = Kernel { name: format!("copy_output_{i}"), params: kb.params, body, vars: kb.vars };
        launches.push(Launch { nodes: vec![], kernel, bindings: kb.bindings });
    }
    // Liveness of arena roots over launch indices.
    let nb = p.buffers.len();
    let mut first = vec![usize::MAX; nb];
    let mut last = vec![0usize; nb];
    for (li, l) in launches.iter().enumerate() {
        for &b in &l.bindings {
            let (r, _) = p.root_of[b as usize];
            first[r as usize] = first[r as usize].min(li);
            last[r as usize] = last[r as usize].max(li);
        }
    }
    let mut roots: Vec<usize> = (0..nb).filter(|&b| p.root_of[b].0 as usize == b && p.buffers[b].base == Base::Arena && first[b] != usize::MAX).collect();
    roots.sort_by(|&a, &b| p.buffers[b].bytes().cmp(&p.buffers[a].bytes()).then(a.cmp(&b)));
    let mut placed: Vec<(usize, usize, usize)> = Vec::new(); // (offset, end, buffer)
    let mut peak = 0;
    for &b in &roots {
        let size = align_up(p.buffers[b].bytes().max(1), opts.align);
        let mut conflicts: Vec<(usize, usize)> =
            placed.iter().filter(|&&(_, _, o)| first[o] <= last[b] && first[b] <= last[o]).map(|&(s, e, _)| (s, e)).collect();
        conflicts.sort();
        let mut off = 0;
        for (s, e) in conflicts {
            if off + size <= s {
                break;
            }
            off = off.max(e);
        }
        placed.push((off, off + size, b));
        peak = peak.max(off + size);
        p.buffers[b].offset = off;
    }
    // Views of arena roots follow their root's offset.
    for b in 0..nb {
        let (r, o) = p.root_of[b];
        if r as usize != b && p.buffers[r as usize].base == Base::Arena {
            p.buffers[b].offset = p.buffers[r as usize].offset + o;
        }
    }
    let port = |v: ValueId, i: usize, what: &str| Port { name: g.value(v).name.clone().unwrap_or_else(|| format!("{what}{i}")), ty: g.ty(v).clone() };
    Ok(Lir {
        inputs: g.inputs.iter().enumerate().map(|(i, &v)| port(v, i, "input")).collect(),
        outputs: g.outputs.iter().enumerate().map(|(i, &v)| port(v, i, "output")).collect(),
        buffers: p.buffers,
        launches,
        arena_bytes: peak,
        weights: p.weights,
        align: opts.align,
    })
}
