//! Row fusion (`PlanOptions::row_fusion`): softmax and LayerNorm as one kernel each, the last-axis
//! reductions computed per row inside the kernel of the elementwise root that depends on them.

use super::fuse::{is_elementwise, Fusion, Role};
use rlx_ir::{Mir, MirOp, NodeId, ReduceOp, UnaryOp};
use std::collections::HashMap;

/// A last-axis reduction kept in a row kernel: sum / mean / max / min over the last axis of a float
/// value, keeping the axis.
fn is_row_reduce(g: &Mir, n: NodeId) -> bool {
    let node = g.node(n);
    let Some(&x) = node.inputs.first() else { return false };
    let rank = g.ty(x).shape.rank();
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
        let rv = root.outputs[0];
        let Some(full) = g.ty(rv).shape.as_fixed() else { continue };
        // The root: elementwise, or a concat along the last axis (RoPE's rotated halves of a normalized
        // head: its norm's reduction is computed in the rotation's kernel).
        let last_concat = matches!(root.op, MirOp::Concat { axis } if axis + 1 == full.len());
        if f.role[r.index()] != Role::Root || root.outputs.len() != 1 || !(is_elementwise(&root.op) || last_concat) {
            continue;
        }
        if full.is_empty() || full[full.len() - 1] < 2 || f.anchor_of.contains_key(&rv) {
            continue;
        }
        let mut row = full.clone();
        row[full.len() - 1] = 1;
        // Candidates: the backward closure through eligible nodes.
        // A value whose rows are the root's rows (same leading dims, any last length): what a slice
        // along the last axis yields, and the elementwise ops on it.
        let rowlike = |sh: &[usize]| sh.len() == full.len() && sh[..sh.len() - 1] == full[..full.len() - 1];
        let eligible = |n: NodeId| -> bool {
            let node = g.node(n);
            let last_slice = matches!(&node.op, MirOp::Slice { axes, steps, .. } if axes[..] == [full.len() - 1] && steps[0] == 1);
            if node.outputs.len() != 1 || (f.role[n.index()] == Role::View && !last_slice) || is_out[node.outputs[0].index()] {
                return false;
            }
            let Some(sh) = g.ty(node.outputs[0]).shape.as_fixed() else { return false };
            if last_slice {
                return rowlike(&sh) && g.ty(node.inputs[0]).shape.as_fixed().is_some_and(|s| rowlike(&s));
            }
            // A split-K matmul's value is its partials' sum at each index (split_k.rs): a leaf.
            if f.split_sums.contains(&n) {
                return sh == full;
            }
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
            is_elementwise(&node.op) && (sh == full || sh == row || (last_concat && rowlike(&sh)))
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
                if !f.split_sums.contains(&n) {
                    stack.extend(g.node(n).inputs.iter().filter_map(|&i| g.producer(i)));
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fuse::fuse;
    use rlx_ir::{BinaryOp, DType, ReduceOp, TensorType, UnaryOp, ValueId};

    /// RoPE on RMS-normalized heads, as a language model's attention builds it: x / √mean(x²) split
    /// into halves along the head, each half rotated by the other, the halves concatenated. With 4
    /// heads the slices are real slices, with 1 head views; either way the whole is one row kernel
    /// (the concat) computing the norm's reduction per head.
    #[test]
    fn rope_of_a_normalized_head_is_one_row_kernel() {
        for heads in [4, 1] {
            let mut g = Mir::new();
            let f = |s: &[usize]| TensorType::fixed(DType::F32, s);
            let x = g.add_input("x", f(&[1, heads, 1, 8]));
            let (c, s) = (g.add_input("cos", f(&[1, 1, 1, 4])), g.add_input("sin", f(&[1, 1, 1, 4])));
            let mut op = |name: &str, op: MirOp, ins: &[ValueId]| g.add_node(name, op, ins).unwrap()[0];
            let sq = op("sq", MirOp::Binary(BinaryOp::Mul), &[x, x]);
            let ms = op("ms", MirOp::Reduce { op: ReduceOp::Mean, axes: vec![3], keepdims: true }, &[sq]);
            let rt = op("rt", MirOp::Unary(UnaryOp::Sqrt), &[ms]);
            let n = op("n", MirOp::Binary(BinaryOp::Div), &[x, rt]);
            let half = |lo| MirOp::Slice { axes: vec![3], starts: vec![lo], ends: vec![lo + 4], steps: vec![1] };
            let (x1, x2) = (op("x1", half(0), &[n]), op("x2", half(4), &[n]));
            let (a, b) = (op("a", MirOp::Binary(BinaryOp::Mul), &[x1, c]), op("b", MirOp::Binary(BinaryOp::Mul), &[x2, s]));
            let o1 = op("o1", MirOp::Binary(BinaryOp::Sub), &[a, b]);
            let (a2, b2) = (op("a2", MirOp::Binary(BinaryOp::Mul), &[x2, c]), op("b2", MirOp::Binary(BinaryOp::Mul), &[x1, s]));
            let o2 = op("o2", MirOp::Binary(BinaryOp::Add), &[a2, b2]);
            let out = op("rope", MirOp::Concat { axis: 3 }, &[o1, o2]);
            g.outputs = vec![out];
            let mut fu = fuse(&g);
            row_fuse(&g, &mut fu, true);
            let roots: Vec<&str> = g.node_ids().filter(|n| fu.role[n.index()] == Role::Root).map(|n| g.node(n).name.as_str()).collect();
            assert_eq!(roots, ["rope"], "{heads} heads");
            assert_eq!(fu.row_reduces[&g.producer(out).unwrap()].len(), 1);
        }
    }
}
