//! Backward rules of data movement: reshape and transpose invert, expand sums back (`unbroadcast`),
//! slice pads with zeros (spreading out strided steps), constant-mode pad crops (a pad with negated pads), concat slices
//! its gradient apart, gather scatters through a one-hot matmul (so its rule is differentiable again),
//! gather_elements and topk's values through a one-hot comparison summed over the read axis.

use super::build::B;
use super::Site;
use rlx_ir::mir::slice_range;
use rlx_ir::{BinaryOp, ConstData, DType, Dim, MirOp, PadMode, Shape, ValueId};

fn fixed_dims(b: &B, v: ValueId, what: &str) -> Result<Vec<usize>, String> {
    b.ty(v).shape.as_fixed().ok_or_else(|| format!("{what} needs fixed dims, got {} (fix them with --dim)", b.ty(v).shape))
}

pub fn reshape(b: &mut B, s: &Site, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    let t = b.ty(s.ins[0]).shape;
    Ok(vec![Some(b.op(MirOp::Reshape { shape: t.0 }, &[g])?)])
}

pub fn transpose(perm: &[usize], b: &mut B, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    let mut inv = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    Ok(vec![Some(b.op(MirOp::Transpose { perm: inv }, &[g])?)])
}

pub fn expand(b: &mut B, s: &Site, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    let t = b.ty(s.ins[0]).shape;
    Ok(vec![Some(b.unbroadcast(g, &t)?)])
}

/// Each sliced axis in turn: a negative step reverses the gradient first (a step −1 slice); a step
/// s > 1 spreads it out (a new axis of 1 padded to s, merged, cut to (n−1)·s + 1); then zero padding
/// puts it at the slice's first position. Only reshape, pad and step ±1 slices: it differentiates again.
pub fn slice(axes: &[usize], starts: &[i64], ends: &[i64], steps: &[i64], b: &mut B, s: &Site, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    let dims = fixed_dims(b, s.ins[0], "the gradient of slice")?;
    let r = dims.len();
    let mut v = g;
    for (k, &a) in axes.iter().enumerate() {
        let step = steps[k];
        let (st, n) = slice_range(dims[a] as i64, starts[k], ends[k], step);
        if n == 0 || step == 0 {
            return Ok(vec![None]);
        }
        let (low, stride) = if step < 0 {
            v = b.op(MirOp::Slice { axes: vec![a], starts: vec![-1], ends: vec![i64::MIN], steps: vec![-1] }, &[v])?;
            (st + (n - 1) * step, -step)
        } else {
            (st, step)
        };
        let span = (n - 1) * stride + 1;
        if stride > 1 {
            let mut cur = b.ty(v).shape.0;
            let mut split = cur.clone();
            split.insert(a + 1, Dim::Fixed(1));
            let t = b.reshape(v, &Shape(split))?;
            let mut pads = vec![0i64; 2 * (r + 1)];
            pads[a + 1 + r + 1] = stride - 1;
            let t = b.op(MirOp::Pad { pads, mode: PadMode::Constant, value: 0.0 }, &[t])?;
            cur[a] = Dim::Fixed((n * stride) as u64);
            let t = b.reshape(t, &Shape(cur))?;
            v = b.op(MirOp::Slice { axes: vec![a], starts: vec![0], ends: vec![span], steps: vec![1] }, &[t])?;
        }
        let mut pads = vec![0i64; 2 * r];
        pads[a] = low;
        pads[a + r] = dims[a] as i64 - low - span;
        v = b.op(MirOp::Pad { pads, mode: PadMode::Constant, value: 0.0 }, &[v])?;
    }
    Ok(vec![Some(v)])
}

pub fn pad(pads: &[i64], mode: PadMode, b: &mut B, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    if mode != PadMode::Constant {
        return Err(format!("no gradient rule for pad mode '{}' (only constant)", mode.name()));
    }
    let neg: Vec<i64> = pads.iter().map(|p| -p).collect();
    Ok(vec![Some(b.op(MirOp::Pad { pads: neg, mode: PadMode::Constant, value: 0.0 }, &[g])?)])
}

pub fn concat(axis: usize, b: &mut B, s: &Site, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    let mut out = Vec::with_capacity(s.ins.len());
    let mut off: i64 = 0;
    for (k, &x) in s.ins.iter().enumerate() {
        let len = b.ty(x).shape.0[axis].fixed().ok_or("the gradient of concat needs a fixed concat axis")? as i64;
        out.push(if s.need[k] {
            Some(b.op(MirOp::Slice { axes: vec![axis], starts: vec![off], ends: vec![off + len], steps: vec![1] }, &[g])?)
        } else {
            None
        });
        off += len;
    }
    Ok(out)
}

/// gather(data, idx) along `axis`: d data[a, v, c] = Σ_i [idx_i = v] g[a, i, c], computed as
/// onehot(idx)ᵀ [V, n] · g [A, n, C].
pub fn gather(axis: usize, b: &mut B, s: &Site, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    if s.need[1] {
        return Err("indices have no gradient".into());
    }
    let (data, idx) = (s.ins[0], s.ins[1]);
    let dt = b.ty(data);
    let dims = fixed_dims(b, data, "the gradient of gather")?;
    let n = b.ty(idx).shape.numel().ok_or("the gradient of gather needs fixed index dims")?;
    let a: usize = dims[..axis].iter().product();
    let v = dims[axis];
    let c: usize = dims[axis + 1..].iter().product();
    let fx = |d: &[usize]| Shape::fixed(d);
    let i = b.reshape(idx, &fx(&[n, 1]))?;
    let i = wrap_index(b, i, v)?;
    let range: Vec<i64> = (0..v as i64).collect();
    let r = b.g.add_const(None, ConstData::from_i64(vec![v], &range));
    let hit = b.bin(BinaryOp::Eq, i, r)?;
    let onehot = b.op(MirOp::Cast { to: dt.dtype }, &[hit])?;
    let oh_t = b.op(MirOp::Transpose { perm: vec![1, 0] }, &[onehot])?;
    let g3 = b.reshape(g, &fx(&[a, n, c]))?;
    let gd = b.op(MirOp::MatMul, &[oh_t, g3])?;
    let shape = Shape(dims.iter().map(|&d| Dim::Fixed(d as u64)).collect());
    Ok(vec![Some(b.reshape(gd, &shape)?), None])
}

/// The adjoint of reading `data` (shape `dims`) at `idx` along `axis` elementwise (gather_elements;
/// topk's values): d data[…, v, …] = Σ_j [idx[…, j, …] = v] · g[…, j, …], as a one-hot comparison on a
/// new axis after `axis`, summed over `axis`, then zero-padded where idx's other dims are shorter.
fn scatter_along(b: &mut B, g: ValueId, idx: ValueId, axis: usize, dims: &[usize]) -> Result<ValueId, String> {
    let ishape = b.ty(idx).shape.as_fixed().ok_or("the gradient needs fixed index dims")?;
    let r = dims.len();
    let v = dims[axis];
    let dt = b.ty(g).dtype;
    let i = wrap_index(b, idx, v)?;
    // [.., J, 1, ..] against [1.., 1, V, 1..].
    let mut split = ishape.clone();
    split.insert(axis + 1, 1);
    let i = b.reshape(i, &Shape::fixed(&split))?;
    let mut rshape = vec![1usize; r + 1];
    rshape[axis + 1] = v;
    let range: Vec<i64> = (0..v as i64).collect();
    let rc = b.g.add_const(None, ConstData::from_i64(rshape, &range));
    let hit = b.bin(BinaryOp::Eq, i, rc)?;
    let onehot = b.op(MirOp::Cast { to: dt }, &[hit])?;
    let gs = b.reshape(g, &Shape::fixed(&split))?;
    let parts = b.mul(onehot, gs)?;
    let summed = b.sum(parts, vec![axis], false)?; // [.., V, ..] with idx's other dims
    let mut pads = vec![0i64; 2 * r];
    for d in 0..r {
        if d != axis {
            pads[d + r] = dims[d] as i64 - ishape[d] as i64;
        }
    }
    if pads.iter().all(|&p| p == 0) {
        return Ok(summed);
    }
    b.op(MirOp::Pad { pads, mode: PadMode::Constant, value: 0.0 }, &[summed])
}

pub fn gather_elements(axis: usize, b: &mut B, s: &Site, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    if s.need[1] {
        return Err("indices have no gradient".into());
    }
    let dims = fixed_dims(b, s.ins[0], "the gradient of gather_elements")?;
    Ok(vec![Some(scatter_along(b, g, s.ins[1], axis, &dims)?), None])
}

/// topk: the values' gradient goes back to where they were taken (output 1, the indices, has none).
pub fn topk(axis: usize, b: &mut B, s: &Site, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    let dims = fixed_dims(b, s.ins[0], "the gradient of topk")?;
    Ok(vec![Some(scatter_along(b, g, s.outs[1], axis, &dims)?)])
}

/// Indices `i` into an axis of `v` entries as i64, negative ones counted from the end (`i + v`).
fn wrap_index(b: &mut B, i: ValueId, v: usize) -> Result<ValueId, String> {
    let i = if b.ty(i).dtype != DType::I64 { b.op(MirOp::Cast { to: DType::I64 }, &[i])? } else { i };
    let zero = b.constant(DType::I64, 0.0);
    let vv = b.constant(DType::I64, v as f64);
    let neg = b.bin(BinaryOp::Lt, i, zero)?;
    let wrapped = b.add(i, vv)?;
    b.op(MirOp::Where, &[neg, wrapped, i])
}
