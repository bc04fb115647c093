//! Values of data-dependent length. A planned schedule fixes every buffer at compile time, so an op
//! whose result length depends on the input values (`nonzero`, `compress`, `nms`, `unique`) yields a
//! result padded along one axis to a static bound, and the importer computes its run-time count beside
//! it from primitives. This module says how that axis travels through the ops that read such a value
//! (`through`: row-wise ops keep it, the rest are refused, naming what would be needed) and turns the
//! padded graph outputs back into the exact result (`exact`). The graph records its bounded outputs in
//! `Graph::bounded`; compiled artifacts write the padded buffer and the count as two outputs.

use crate::graph::{Bounded, Graph};
use crate::mir::MirOp;
use crate::{ConstData, OpSet, TensorType, ValueId};

/// A value whose slices along `axis` past the value of `count` (an i64 scalar) are padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub axis: usize,
    pub count: ValueId,
}

/// The ops whose result has a data-dependent length.
pub fn is_source(op: &MirOp) -> bool {
    matches!(op, MirOp::NonZero | MirOp::Compress { .. } | MirOp::Nms { .. } | MirOp::Unique { .. })
}

fn prod(d: &[usize]) -> usize {
    d.iter().product()
}

/// The bounded axis of each output of a node with op `op`, from its inputs' (`ins`, one per input).
/// A node that would mix padding into the valid slices (a reduction over the bounded axis, a gather
/// along it, a second data-dependent op …) is an error saying what is supported.
pub fn through(op: &MirOp, ins: &[Option<Row>], in_tys: &[&TensorType], out_tys: &[&TensorType]) -> Result<Vec<Option<Row>>, String> {
    let n = out_tys.len();
    let Some((first, row)) = ins.iter().enumerate().find_map(|(i, r)| r.map(|r| (i, r))) else {
        return Ok(vec![None; n]);
    };
    let refuse = || {
        Err(format!(
            "unsupported: {} of a value whose length along axis {} is data-dependent (computed at run time): \
             only elementwise ops, casts, transposes and reshapes that keep that axis, slices, reductions and gathers \
             along other axes, gathers by its values as indices and matmuls of its rows are supported",
            op.kind(),
            row.axis
        ))
    };
    let rank = |i: usize| in_tys[i].shape.rank();
    let out_rank = out_tys.first().map_or(0, |t| t.shape.rank());
    let same = |axis: usize| Ok(vec![Some(Row { axis, count: row.count }); n]);
    let bounded: Vec<usize> = (0..ins.len()).filter(|&i| ins[i].is_some()).collect();
    match op {
        MirOp::Unary(_) | MirOp::Cast { .. } | MirOp::Bitcast { .. } if first == 0 => same(row.axis),
        MirOp::Quantize { .. } | MirOp::Dequantize { .. } | MirOp::FakeQuantize { .. } if bounded == [0] => same(row.axis),
        MirOp::Binary(_) | MirOp::Where => {
            // Every bounded operand must land on the same output axis with the same count.
            let mut axis = None;
            for &i in &bounded {
                let Some(r) = ins[i] else { continue };
                let a = (r.axis + out_rank).saturating_sub(rank(i));
                if r.count != row.count || axis.is_some_and(|b| b != a) {
                    return refuse();
                }
                axis = Some(a);
            }
            match axis {
                Some(a) => same(a),
                None => refuse(),
            }
        }
        MirOp::Reshape { .. } => {
            let (Some(i), Some(o)) = (in_tys[0].shape.as_fixed(), out_tys[0].shape.as_fixed()) else { return refuse() };
            let (p, l, s) = (prod(&i[..row.axis]), i[row.axis], prod(&i[row.axis + 1..]));
            match (0..o.len()).find(|&b| prod(&o[..b]) == p && o[b] == l && prod(&o[b + 1..]) == s) {
                Some(b) => same(b),
                None => refuse(),
            }
        }
        MirOp::Transpose { perm } => same(perm.iter().position(|&p| p == row.axis).unwrap_or(0)),
        MirOp::Slice { axes, starts, ends, steps } => {
            let len = in_tys[0].shape.0[row.axis].fixed().unwrap_or(0) as i64;
            match axes.iter().position(|&a| a == row.axis) {
                Some(k) if !(starts[k] == 0 && steps[k] == 1 && ends[k] >= len) => refuse(),
                _ => same(row.axis),
            }
        }
        MirOp::Expand { .. } => {
            let a = row.axis + out_rank - rank(0);
            if out_tys[0].shape.0[a] != in_tys[0].shape.0[row.axis] {
                return refuse();
            }
            same(a)
        }
        MirOp::Gather { axis } => match bounded[..] {
            [0] if *axis != row.axis => same(if row.axis < *axis { row.axis } else { row.axis + rank(1) - 1 }),
            [1] => same(axis + row.axis),
            _ => refuse(),
        },
        MirOp::Concat { axis } => {
            if *axis == row.axis || ins.iter().any(|r| *r != Some(row)) {
                return refuse();
            }
            same(row.axis)
        }
        MirOp::Reduce { axes, keepdims, .. } if !axes.contains(&row.axis) => {
            same(if *keepdims { row.axis } else { row.axis - axes.iter().filter(|&&a| a < row.axis).count() })
        }
        MirOp::ArgReduce { axis, keepdims, .. } if *axis != row.axis => same(if *keepdims || row.axis < *axis { row.axis } else { row.axis - 1 }),
        MirOp::MatMul if bounded == [0] && rank(0) >= 2 && row.axis < rank(0) - 1 => same(row.axis + out_rank - rank(0)),
        _ => refuse(),
    }
}

/// The exact result from a run's graph outputs (`outs`, one per `g.outputs`): each bounded output cut
/// to its count along its axis, and the count outputs left out.
pub fn exact<O: OpSet>(g: &Graph<O>, outs: &[ConstData]) -> Result<Vec<ConstData>, String> {
    if g.bounded.is_empty() {
        return Ok(outs.to_vec());
    }
    if outs.len() != g.outputs.len() {
        return Err(format!("{} outputs, the graph has {}", outs.len(), g.outputs.len()));
    }
    let counts: Vec<usize> = g.bounded.iter().map(|b| b.count as usize).collect();
    let mut res = Vec::new();
    for (k, o) in outs.iter().enumerate() {
        if counts.contains(&k) {
            continue;
        }
        match g.bounded.iter().find(|b| b.output as usize == k) {
            None => res.push(o.clone()),
            Some(b) => res.push(cut(o, b, &outs[b.count as usize]).map_err(|e| format!("output {k}: {e}"))?),
        }
    }
    Ok(res)
}

/// `o` cut to the count held by `count` along `b.axis`.
pub fn cut(o: &ConstData, b: &Bounded, count: &ConstData) -> Result<ConstData, String> {
    let axis = b.axis as usize;
    if axis >= o.shape.len() || count.numel() != 1 {
        return Err(format!("bounded axis {axis} of shape {:?} with a count of {} values", o.shape, count.numel()));
    }
    let len = o.shape[axis];
    let c = count.get_i64(0);
    if c < 0 || c as usize > len {
        return Err(format!("count {c} outside 0..={len}"));
    }
    let c = c as usize;
    let elem = if o.numel() == 0 { 0 } else { o.data.len() / o.numel() };
    let (outer, inner) = (prod(&o.shape[..axis]), prod(&o.shape[axis + 1..]) * elem);
    let bytes = o.data.bytes();
    let mut v = Vec::with_capacity(outer * c * inner);
    for p in 0..outer {
        let at = p * len * inner;
        v.extend_from_slice(&bytes[at..at + c * inner]);
    }
    let mut shape = o.shape.clone();
    shape[axis] = c;
    ConstData::new(o.dtype, shape, crate::Blob::from_vec(v))
}

/// The graph's count outputs (indices into `outputs`), sorted and deduplicated.
pub fn count_outputs<O>(g: &Graph<O>) -> Vec<usize> {
    let mut v: Vec<usize> = g.bounded.iter().map(|b| b.count as usize).collect();
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mir::{BinaryOp, ReduceOp};
    use crate::{DType, Dim, Shape};

    fn ty(dt: DType, s: &[u64]) -> TensorType {
        TensorType::new(dt, Shape(s.iter().map(|&d| Dim::Fixed(d)).collect()))
    }

    #[test]
    fn row_wise_ops_keep_the_axis_and_the_rest_are_refused() {
        let row = Row { axis: 0, count: ValueId(7) };
        let sel = ty(DType::I64, &[6, 3]);
        // gather(selected, 2, axis 1) → [6]: still bounded along 0.
        let col = ty(DType::I64, &[6]);
        let scalar = ty(DType::I64, &[]);
        let r = through(&MirOp::Gather { axis: 1 }, &[Some(row), None], &[&sel, &scalar], &[&col]).unwrap();
        assert_eq!(r, vec![Some(row)]);
        // gather(boxes [8, 4], indices [6]) → [6, 4]: bounded along 0 through the indices.
        let boxes = ty(DType::F32, &[8, 4]);
        let picked = ty(DType::F32, &[6, 4]);
        let r = through(&MirOp::Gather { axis: 0 }, &[None, Some(row)], &[&boxes, &col], &[&picked]).unwrap();
        assert_eq!(r, vec![Some(row)]);
        // reshape [6, 3] → [2, 9] mixes rows: refused; [6, 3] → [6, 3, 1] keeps them.
        let mixed = ty(DType::I64, &[2, 9]);
        assert!(through(&MirOp::Reshape { shape: vec![] }, &[Some(row)], &[&sel], &[&mixed]).is_err());
        let kept = ty(DType::I64, &[6, 3, 1]);
        assert_eq!(through(&MirOp::Reshape { shape: vec![] }, &[Some(row)], &[&sel], &[&kept]).unwrap(), vec![Some(row)]);
        // A sum over the bounded axis would add padding: refused, saying what is supported.
        let e = through(&MirOp::Reduce { op: ReduceOp::Sum, axes: vec![0], keepdims: false }, &[Some(row)], &[&sel], &[&ty(DType::I64, &[3])]).unwrap_err();
        assert!(e.starts_with("unsupported: reduce_sum") && e.contains("data-dependent"), "{e}");
        // Two bounded operands with different counts: refused.
        let other = Row { axis: 0, count: ValueId(9) };
        assert!(through(&MirOp::Binary(BinaryOp::Add), &[Some(row), Some(other)], &[&col, &col], &[&col]).is_err());
    }

    #[test]
    fn exact_cuts_each_bounded_output_to_its_count_and_drops_the_counts() {
        let mut g: crate::Mir = Graph::new();
        let x = g.add_input("x", ty(DType::F32, &[2, 4, 3]));
        let c = g.add_input("c", ty(DType::I64, &[]));
        g.outputs = vec![x, c];
        g.bounded = vec![Bounded { output: 0, axis: 1, count: 1 }];
        let v: Vec<f32> = (0..24).map(|i| i as f32).collect();
        let outs = [ConstData::from_f32(vec![2, 4, 3], &v), ConstData::from_i64(vec![], &[2])];
        let r = exact(&g, &outs).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].shape, vec![2, 2, 3]);
        assert_eq!(r[0].to_f64_vec(), vec![0., 1., 2., 3., 4., 5., 12., 13., 14., 15., 16., 17.]);
        let bad = [outs[0].clone(), ConstData::from_i64(vec![], &[5])];
        assert!(exact(&g, &bad).unwrap_err().contains("count 5 outside 0..=4"));
    }
}
