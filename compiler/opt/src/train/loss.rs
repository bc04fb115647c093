//! Losses as MIR: softmax cross-entropy on integer class labels and mean squared error, each the mean
//! over the batch, built from primitives that all have backward rules.

use crate::autodiff::B;
use rlx_ir::{BinaryOp, ConstData, DType, Dim, MirOp, ReduceOp, Shape, UnaryOp, ValueId};

/// mean over rows of logsumexp(z) − z[label]: `logits` [N, C] float, `labels` [N] integer in 0..C.
pub fn cross_entropy(b: &mut B, logits: ValueId, labels: ValueId) -> Result<ValueId, String> {
    let zt = b.ty(logits);
    let lt = b.ty(labels);
    if zt.shape.rank() != 2 || !zt.dtype.is_float() {
        return Err(format!("cross-entropy needs float logits [batch, classes], got {zt}"));
    }
    if lt.shape.rank() != 1 || !lt.dtype.is_int() || lt.shape.0[0] != zt.shape.0[0] {
        return Err(format!("cross-entropy needs integer labels [{}], got {lt}", zt.shape.0[0]));
    }
    let c = zt.shape.0[1].fixed().ok_or("cross-entropy needs a fixed class count")?;
    let n = zt.shape.0[0].clone();
    let mut l = b.reshape(labels, &Shape(vec![n, Dim::Fixed(1)]))?;
    if lt.dtype != DType::I64 {
        l = b.op(MirOp::Cast { to: DType::I64 }, &[l])?;
    }
    let classes: Vec<i64> = (0..c as i64).collect();
    let r = b.g.add_const(None, ConstData::from_i64(vec![c as usize], &classes));
    let hit = b.bin(BinaryOp::Eq, l, r)?;
    let onehot = b.op(MirOp::Cast { to: zt.dtype }, &[hit])?;
    let zl = b.mul(onehot, logits)?;
    let picked = b.sum(zl, vec![1], true)?;
    // logsumexp with the row max subtracted (its gradient cancels: softmax sums to 1).
    let m = b.op(MirOp::Reduce { op: ReduceOp::Max, axes: vec![1], keepdims: true }, &[logits])?;
    let d = b.sub(logits, m)?;
    let e = b.un(UnaryOp::Exp, d)?;
    let s = b.sum(e, vec![1], true)?;
    let ls = b.un(UnaryOp::Log, s)?;
    let lse = b.add(ls, m)?;
    let per = b.sub(lse, picked)?;
    b.op(MirOp::Reduce { op: ReduceOp::Mean, axes: vec![0, 1], keepdims: false }, &[per])
}

/// mean((prediction − target)²) over every element; `target` has the prediction's type.
pub fn mse(b: &mut B, pred: ValueId, target: ValueId) -> Result<ValueId, String> {
    let (pt, tt) = (b.ty(pred), b.ty(target));
    if pt != tt || !pt.dtype.is_float() {
        return Err(format!("mse needs a float target of the prediction's type {pt}, got {tt}"));
    }
    let d = b.sub(pred, target)?;
    let sq = b.mul(d, d)?;
    let r = pt.shape.rank();
    b.op(MirOp::Reduce { op: ReduceOp::Mean, axes: (0..r).collect(), keepdims: false }, &[sq])
}
