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
