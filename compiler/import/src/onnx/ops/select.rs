//! Ops whose output length depends on the input values: NonMaxSuppression, NonZero, Unique, and
//! Compress with a condition computed at run time (`shape.rs` keeps a constant one a gather). Each is
//! one MIR op padded to its static bound plus a count beside it (computed from primitives, or the op's
//! own for NonMaxSuppression, whose zero padding no primitive can tell from a kept box 0); the count is
//! registered with the output (`Ctx::seed_rows`) and travels to the graph outputs (`rlx_ir::bounded`).

use super::build::norm_axis;
use super::{one, Node, R};
use crate::onnx::Ctx;
use rlx_ir::bounded::Row;
use rlx_ir::{BinaryOp, DType, MirOp, ReduceOp, ValueId};

pub(super) const OPS: &[&str] = &["NonMaxSuppression", "NonZero", "Unique"];

/// The number of true values of a bool tensor, as an i64 scalar.
fn count_true(cx: &mut Ctx, b: ValueId) -> Result<ValueId, String> {
    let i = cx.cast(b, DType::I64)?;
    let axes = (0..cx.rank(i)).collect();
    cx.reduce(ReduceOp::Sum, i, axes, false)
}

/// Rejects an input that is itself of data-dependent length (one such op after another is not supported).
fn plain(cx: &Ctx, v: ValueId, op: &str) -> Result<(), String> {
    match cx.rows.get(&v) {
        Some(r) => Err(format!("unsupported: {op} of a value whose length along axis {} is data-dependent", r.axis)),
        None => Ok(()),
    }
}

pub(super) fn convert(cx: &mut Ctx, n: &Node) -> R {
    let (a, req) = (&n.a, |i| n.req(i));
    let x = req(0)?;
    plain(cx, x, n.op)?;
    match n.op {
        "NonZero" => {
            let y = cx.prim(MirOp::NonZero, &[x])?;
            let b = cx.cast(x, DType::Bool)?;
            let c = count_true(cx, b)?;
            cx.seed_rows.push((y, Row { axis: 1, count: c }));
            one(y)
        }
        "NonMaxSuppression" => {
            let scores = req(1)?;
            plain(cx, scores, n.op)?;
            let max = match n.inp(2) {
                Some(m) => cx.const_ints(m, "NonMaxSuppression max_output_boxes_per_class")?.first().copied().unwrap_or(0).max(0) as usize,
                None => 0,
            };
            let mut thr = |i: usize, absent: f64| -> Result<ValueId, String> {
                let v = match n.inp(i) {
                    Some(v) => cx.cast(v, DType::F32)?,
                    None => cx.scalar(DType::F32, absent),
                };
                plain(cx, v, "NonMaxSuppression")?;
                Ok(v)
            };
            // Absent thresholds: IoU 0 (any overlap suppresses), no score threshold.
            let iou = thr(3, 0.0)?;
            let st = thr(4, f64::NEG_INFINITY)?;
            let op = MirOp::Nms { center_point_box: a.i("center_point_box", 0) != 0, max_per_class: max };
            let outs = cx.prim_n(op, &[x, scores, iou, st])?;
            let (y, c) = (outs[0], outs[1]);
            cx.seed_rows.push((y, Row { axis: 0, count: c }));
            one(y)
        }
        "Unique" => {
            let axis = match a.has("axis") {
                true => Some(norm_axis(a.i("axis", 0), cx.rank(x))?),
                false => None,
            };
            let outs = cx.prim_n(MirOp::Unique { axis, sorted: a.i("sorted", 1) != 0 }, &[x])?;
            let z = cx.sc(outs[3], 0.0);
            let used = cx.bin(BinaryOp::Gt, outs[3], z)?;
            let c = count_true(cx, used)?;
            let ax = axis.unwrap_or(0);
            for (k, axis) in [(0, ax), (1, 0), (3, 0)] {
                cx.seed_rows.push((outs[k], Row { axis, count: c }));
            }
            Ok(outs)
        }
        _ => Err(format!("unsupported op {}", n.op)),
    }
}

/// Compress along `axis` by a condition known only at run time.
pub(super) fn compress(cx: &mut Ctx, x: ValueId, cond: ValueId, axis: usize) -> R {
    plain(cx, x, "Compress")?;
    plain(cx, cond, "Compress")?;
    let b = cx.cast(cond, DType::Bool)?;
    let y = cx.prim(MirOp::Compress { axis }, &[x, b])?;
    let c = count_true(cx, b)?;
    cx.seed_rows.push((y, Row { axis, count: c }));
    one(y)
}
