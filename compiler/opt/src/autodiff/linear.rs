//! Backward rules of matrix products: `matmul` (numpy semantics: 1-D operands promoted, batch dims
//! broadcast and summed back) and `dequant_matmul` (the input's gradient through the weight's rows,
//! dequantized by `dequant_gather`; the weight is a constant).

use super::build::B;
use super::Site;
use rlx_ir::{ConstData, Dim, MirOp, OpSet, Shape, ValueId};

/// Swaps the last two axes.
fn t_last2(b: &mut B, x: ValueId) -> Result<ValueId, String> {
    let r = b.ty(x).shape.rank();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    b.op(MirOp::Transpose { perm }, &[x])
}

pub fn matmul(b: &mut B, s: &Site, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    let (a0, b0) = (s.ins[0], s.ins[1]);
    let (sa, sb) = (b.ty(a0).shape, b.ty(b0).shape);
    // Promote 1-D operands as numpy does: a [K] → [1,K], b [K] → [K,1].
    let a = if sa.rank() == 1 { b.reshape(a0, &Shape(vec![Dim::Fixed(1), sa.0[0].clone()]))? } else { a0 };
    let bb = if sb.rank() == 1 { b.reshape(b0, &Shape(vec![sb.0[0].clone(), Dim::Fixed(1)]))? } else { b0 };
    let (ta, tb) = (b.ty(a), b.ty(bb));
    let full = MirOp::MatMul.infer(&[&ta, &tb])?.remove(0).shape;
    let g = b.reshape(g, &full)?;
    let mut out = vec![None, None];
    if s.need[0] {
        let bt = t_last2(b, bb)?;
        let ga = b.op(MirOp::MatMul, &[g, bt])?;
        let ga = b.unbroadcast(ga, &ta.shape)?;
        out[0] = Some(b.reshape(ga, &sa)?);
    }
    if s.need[1] {
        let at = t_last2(b, a)?;
        let gb = b.op(MirOp::MatMul, &[at, g])?;
        let gb = b.unbroadcast(gb, &tb.shape)?;
        out[1] = Some(b.reshape(gb, &sb)?);
    }
    Ok(out)
}

/// dequant_matmul(x, w) = x · wᵀ with w [N,K] constant: dx = g · dequant(w), the rows of w read by
/// `dequant_gather(w, 0..N)`.
pub fn dequant_matmul(b: &mut B, s: &Site, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    if s.need[1] {
        return Err("the weight of dequant_matmul is a constant in blocks: it has no gradient".into());
    }
    let w = s.ins[1];
    let n = b.ty(w).shape.0[0].fixed().ok_or("dequant_matmul weight rows must be fixed")?;
    let rows: Vec<i64> = (0..n as i64).collect();
    let idx = b.g.add_const(None, ConstData::from_i64(vec![n as usize], &rows));
    let wf = b.op(MirOp::DequantGather, &[w, idx])?;
    Ok(vec![Some(b.op(MirOp::MatMul, &[g, wf])?), None])
}
