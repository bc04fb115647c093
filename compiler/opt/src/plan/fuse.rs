//! Fusion: the role of every MIR node — a *view* (reshape, leading-axis slice, same-dtype cast, bitcast: no
//! kernel, aliases its input), *inlined* into its single consumer (elementwise and data-movement ops
//! become part of the consumer's per-element expression, so chains of elementwise ops are one loop),
//! an *anchor* (matmul / reduce / conv whose single same-shape elementwise consumer chain is its
//! epilogue, applied to the accumulator before the store), or a kernel *root*. Diamonds (an
//! elementwise value whose uses all end in one kernel) are recomputed there; with operand inlining,
//! transposes, reshapes and scalar scalings on a single-use path into a matmul operand become index
//! math in its loads.

use rlx_ir::{BinaryOp, Def, Mir, MirOp, NodeId, ValueId};
use std::collections::{HashMap, HashSet};

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

pub(crate) fn is_view(g: &Mir, n: NodeId) -> bool {
    let node = g.node(n);
    match &node.op {
        MirOp::Reshape { .. } => true,
        MirOp::Slice { axes, steps, .. } => {
            let shape = g.ty(node.inputs[0]).shape.as_fixed().unwrap_or_default();
            axes.len() == 1 && steps[0] == 1 && shape[..axes[0]].iter().all(|&d| d == 1)
        }
        MirOp::Cast { to } => *to == g.ty(node.inputs[0]).dtype,
        // The same bytes read as another dtype of the same width.
        MirOp::Bitcast { .. } => true,
        // A transpose that keeps the order of the axes longer than 1 moves no element: the same
        // bytes (attention's head merge at one query row: [1, heads, 1, d] → [1, 1, heads, d]).
        MirOp::Transpose { perm } => {
            let shape = g.ty(node.inputs[0]).shape.as_fixed().unwrap_or_default();
            let long: Vec<usize> = perm.iter().copied().filter(|&a| shape.get(a).is_some_and(|&d| d > 1)).collect();
            !shape.is_empty() && long.windows(2).all(|w| w[0] < w[1])
        }
        _ => false,
    }
}

pub(super) fn is_inlinable(op: &MirOp) -> bool {
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

pub(super) fn is_data_movement(op: &MirOp) -> bool {
    matches!(op, MirOp::Transpose { .. } | MirOp::Slice { .. } | MirOp::Expand { .. })
}

pub(super) fn is_elementwise(op: &MirOp) -> bool {
    matches!(op, MirOp::Unary(_) | MirOp::Binary(_) | MirOp::Where | MirOp::Cast { .. } | MirOp::Quantize { .. } | MirOp::Dequantize { .. } | MirOp::FakeQuantize { .. })
}

fn takes_epilogue(op: &MirOp) -> bool {
    matches!(op, MirOp::MatMul | MirOp::DequantMatMul | MirOp::Reduce { .. } | MirOp::Conv { .. } | MirOp::ConvTranspose { .. } | MirOp::ConvNhwc { .. })
}

pub(super) fn numel(g: &Mir, v: ValueId) -> usize {
    g.ty(v).shape.numel().unwrap_or(0)
}

/// The fusion decision for every node, and for each kernel root its anchor (if an epilogue chain).
#[derive(Clone)]
pub struct Fusion {
    pub role: Vec<Role>,
    /// Value → the anchor node whose accumulator it is computed from (epilogue chains).
    pub anchor_of: HashMap<ValueId, NodeId>,
    /// Row kernels ([`row_fuse`]): root → the last-axis reductions its kernel computes per row, in order.
    pub row_reduces: HashMap<NodeId, Vec<NodeId>>,
    /// Split-K matmuls whose value is their partials' sum computed inside a row kernel's passes
    /// (`split_k.rs`'s [`super::split_k::row_fuse_split`]): to [`row_fuse`] an elementwise leaf.
    pub split_sums: HashSet<NodeId>,
}

pub fn fuse(g: &Mir) -> Fusion {
    fuse_with(g, false, false)
}

/// A binary op of a value with a scalar constant (a scaling such as attention's `q·d^-¼`).
pub fn is_scalar_scale(g: &Mir, n: NodeId) -> bool {
    let node = g.node(n);
    let scalar = |v: ValueId| matches!(&g.value(v).def, Def::Const(c) if c.numel() == 1 && !c.dtype.is_quantized_block());
    matches!(node.op, MirOp::Binary(BinaryOp::Mul | BinaryOp::Div | BinaryOp::Add | BinaryOp::Sub)) && node.outputs.len() == 1 && node.inputs.len() == 2 && (scalar(node.inputs[0]) != scalar(node.inputs[1]))
}

/// [`fuse`], and with `operands` ([`PlanOptions::inline_operands`]) the transposes, reshapes and
/// scalar scalings on a single-use path into a matmul operand are inlined into its loads; with
/// `gathers` ([`PlanOptions::inline_gathers`]) a gather from a constant that an elementwise op reads
/// broadcast (fewer values than it writes) is too, redone per element where it would have been a
/// launch of its own (MiniLM's int8 embedding rows' scales, one per token, before its first LayerNorm).
pub fn fuse_with(g: &Mir, operands: bool, gathers: bool) -> Fusion {
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
                    // A reshape of a slice on the path (a column slice of Q/K/V merged along N,
                    // rlx_opt::merge_matmuls' `Form::Columns`): both index math in the loads.
                    Some((p, MirOp::Slice { .. })) => to_mm[p.index()],
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
            // A concat reads each element of each input once: inlining an input recomputes nothing
            // (RoPE's two rotated halves and their concat are one kernel).
            let const_gather = gathers && matches!(node.op, MirOp::Gather { .. }) && g.const_data(node.inputs[0]).is_some() && is_elementwise(&cn.op);
            let cheap = is_data_movement(&node.op) || widen || const_gather || numel(g, v) >= numel(g, cv) || matches!(cn.op, MirOp::Concat { .. });
            let consumer_ok = is_inlinable(&cn.op)
                || matches!(cn.op, MirOp::MatMul | MirOp::Reduce { .. } | MirOp::ArgReduce { .. })
                || (widen && matches!(cn.op, MirOp::Conv { .. } | MirOp::ConvTranspose { .. } | MirOp::Pool { .. }));
            let into_anchor = !is_inlinable(&cn.op);
            // A concat read through a transpose or into a dot product would put a select between two
            // clamped loads in the innermost loop (a gather per lane: attention's RoPE'd q read by the
            // scores was 34% of a decode step); it is stored once instead, so the loads are unit-stride.
            let concat_into_loads = matches!(node.op, MirOp::Concat { .. }) && !is_elementwise(&cn.op) && !matches!(cn.op, MirOp::Concat { .. });
            // An activation reading a convolution's or matmul's value (SiLU's x · σ(x)) stays that
            // anchor's epilogue rather than going into a transpose after it (a layout change,
            // `channels_last`), whose kernel would evaluate it element by element in its tiles.
            let epilogue_into_transpose = is_elementwise(&node.op)
                && matches!(cn.op, MirOp::Transpose { .. })
                && node.inputs.iter().any(|&i| g.producer(i).is_some_and(|p| takes_epilogue(&g.node(p).op)));
            if consumer_ok && cheap && !concat_into_loads && !epilogue_into_transpose && (!into_anchor || is_data_movement(&node.op) || widen) && !(anchor_of.contains_key(&cv) && !is_inlinable(&cn.op)) {
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
        // (A slice is index math: RoPE's halves, each read by both rotated outputs, are recomputed.)
        let recompute = is_elementwise(&node.op) || matches!(node.op, MirOp::Slice { .. });
        if role[n.index()] != Role::Root || node.outputs.len() != 1 || !(recompute || takes_epilogue(&node.op)) {
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
        if !recompute {
            // An anchor read by several elementwise nodes that all end in one kernel (SiLU's x · σ(x)
            // after a convolution or matmul): that kernel's root applies them all as the epilogue, the
            // accumulator standing for every read — so every path from it to the root must be
            // elementwise at the same shape (the root's own index).
            let on_path = |c: NodeId| {
                let mut c = c;
                loop {
                    let cn = g.node(c);
                    if c == d {
                        return true;
                    }
                    if !is_elementwise(&cn.op) || role[c.index()] != Role::Inlined || g.ty(cn.outputs[0]).shape != g.ty(v).shape {
                        return false;
                    }
                    match consumers[cn.outputs[0].index()].as_slice() {
                        [next] => c = *next,
                        _ => return false,
                    }
                }
            };
            if anchor_of.contains_key(&dv) || g.ty(dv).shape != g.ty(v).shape || !is_elementwise(&g.node(d).op) || !cs.iter().all(|&c| on_path(c)) {
                continue;
            }
            role[n.index()] = Role::Anchor;
            anchor_of.insert(dv, n);
            dest[n.index()] = Some(d);
            continue;
        }
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
    Fusion { role, anchor_of, row_reduces: HashMap::new(), split_sums: HashSet::new() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::{DType, TensorType};

    /// concat(a, b) → transpose → matmul, and concat(c, d) + 1: the first concat is stored (its
    /// transpose is then index math in the matmul's loads), the second is part of the add's loop.
    #[test]
    fn a_concat_is_inlined_into_elementwise_consumers_only() {
        let mut g = Mir::new();
        let f = |s: &[usize]| TensorType::fixed(DType::F32, s);
        let (a, b) = (g.add_input("a", f(&[2, 4, 3])), g.add_input("b", f(&[2, 4, 3])));
        let cat = g.add_node("cat", MirOp::Concat { axis: 2 }, &[a, b]).unwrap()[0];
        let t = g.add_node("t", MirOp::Transpose { perm: vec![1, 0, 2] }, &[cat]).unwrap()[0];
        let k = g.add_input("k", f(&[4, 6, 5]));
        let mm = g.add_node("mm", MirOp::MatMul, &[t, k]).unwrap()[0];
        let (c, d) = (g.add_input("c", f(&[4, 3])), g.add_input("d", f(&[4, 3])));
        let cat2 = g.add_node("cat2", MirOp::Concat { axis: 1 }, &[c, d]).unwrap()[0];
        let e = g.add_node("e", MirOp::Unary(rlx_ir::UnaryOp::Neg), &[cat2]).unwrap()[0];
        g.outputs = vec![mm, e];
        let fu = fuse(&g);
        let role = |v: ValueId| fu.role[g.producer(v).unwrap().index()];
        assert_eq!(role(cat), Role::Root);
        assert_eq!(role(t), Role::Inlined);
        assert_eq!(role(cat2), Role::Inlined);
    }

    /// SiLU after a matmul, `m · σ(m)`: the matmul is the anchor of the `mul` (both reads of its value
    /// are the accumulator); when one of its readers is not elementwise at its shape (a reduction), it
    /// stays a root of its own.
    #[test]
    fn an_anchor_read_twice_by_its_epilogue_is_fused() {
        let mut g = Mir::new();
        let f = |s: &[usize]| TensorType::fixed(DType::F32, s);
        let (x, w) = (g.add_input("x", f(&[4, 8])), g.add_input("w", f(&[8, 6])));
        let m = g.add_node("m", MirOp::MatMul, &[x, w]).unwrap()[0];
        let s = g.add_node("s", MirOp::Unary(rlx_ir::UnaryOp::Sigmoid), &[m]).unwrap()[0];
        let y = g.add_node("y", MirOp::Binary(BinaryOp::Mul), &[m, s]).unwrap()[0];
        let m2 = g.add_node("m2", MirOp::MatMul, &[x, w]).unwrap()[0];
        let s2 = g.add_node("s2", MirOp::Unary(rlx_ir::UnaryOp::Sigmoid), &[m2]).unwrap()[0];
        let r2 = g.add_node("r2", MirOp::Reduce { op: rlx_ir::ReduceOp::Sum, axes: vec![1], keepdims: true }, &[m2]).unwrap()[0];
        g.outputs = vec![y, s2, r2];
        let fu = fuse(&g);
        let role = |v: ValueId| fu.role[g.producer(v).unwrap().index()];
        assert_eq!(role(m), Role::Anchor);
        assert_eq!(role(s), Role::Inlined);
        assert_eq!(fu.anchor_of.get(&y), g.producer(m).as_ref());
        assert_eq!(role(m2), Role::Root);
    }

    /// A transpose that moves only axes of length 1 is a view (no kernel); one that moves a longer
    /// axis past another is not.
    #[test]
    fn a_transpose_of_unit_axes_is_a_view() {
        let mut g = Mir::new();
        let x = g.add_input("x", TensorType::fixed(DType::F32, &[1, 4, 1, 8]));
        let t = g.add_node("t", MirOp::Transpose { perm: vec![0, 2, 1, 3] }, &[x]).unwrap()[0];
        let u = g.add_node("u", MirOp::Transpose { perm: vec![0, 3, 2, 1] }, &[x]).unwrap()[0];
        g.outputs = vec![t, u];
        let fu = fuse(&g);
        let role = |v: ValueId| fu.role[g.producer(v).unwrap().index()];
        assert_eq!(role(t), Role::View);
        assert_eq!(role(u), Role::Root);
    }
}
