//! Cast and CastLike, including casts to and from ONNX's narrow types (float8, float4, int4, int2:
//! `onnx/narrow.rs`). A narrow value is held widened in its carrier dtype (f32, i8, u8), so a cast
//! *from* one is an ordinary cast of the carrier, and a cast *to* one is arithmetic on the carrier
//! that yields exactly the values the narrow type can hold:
//! - float8 / float4: round half to even at the format's precision (the quantum is chosen per
//!   element by a chain of `where`s over the binade thresholds, so it is exact on every target:
//!   no bit casts, no logarithms), then saturate to ±max (`saturate=1`, the default, and always
//!   for float4) or overflow to NaN (±inf for e5m2); float4 has no NaN: NaN becomes 0.
//! - int4 / uint4 / int2 / uint2: truncation toward zero as any float → int cast, and a value
//!   outside the type's range becomes 0 (what the ONNX reference, ml_dtypes, produces).
//!
//! BitCast (opset 26) is MIR `bitcast`: the same bytes read as another dtype of the same width, a view
//! in the plan. A narrow type's bits are not its carrier's, so a BitCast from or to one is refused.

use super::{one, Node, R};
use crate::onnx::narrow::{FloatFormat, Narrow};
use crate::onnx::{dtype_from_onnx, Ctx};
use rlx_ir::{BinaryOp, DType, MirOp, UnaryOp, ValueId};

/// The ONNX op types this family translates.
pub(super) const OPS: &[&str] = &["Cast", "CastLike", "BitCast"];

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    let x = nd.req(0)?;
    if nd.op == "BitCast" {
        let t = nd.a.i("to", 0) as i32;
        if let Some(n) = Narrow::from_onnx(t).or(cx.narrow.get(&x).copied()) {
            return Err(format!("unsupported: BitCast from or to the narrow type {n:?} (held widened, so its bits are not stored)"));
        }
        let (from, to) = (cx.dtype(x), dtype_from_onnx(t)?);
        if from.size().is_none() || from.size() != to.size() {
            return Err(format!("BitCast: {from} and {to} differ in bit width"));
        }
        return one(if from == to { x } else { cx.prim(MirOp::Bitcast { to }, &[x])? });
    }
    let (narrow, to) = if nd.op == "Cast" {
        let t = nd.a.i("to", 0) as i32;
        (Narrow::from_onnx(t), dtype_from_onnx(t)?)
    } else {
        let like = nd.req(1)?;
        (cx.narrow.get(&like).copied(), cx.dtype(like))
    };
    let saturate = nd.a.i("saturate", 1) != 0;
    let Some(n) = narrow else { return one(cx.cast(x, to)?) };
    if cx.narrow.get(&x) == Some(&n) {
        return one(x);
    }
    let y = match (n.float(), n.int_range()) {
        (Some(ff), _) => to_float(cx, x, &ff, saturate)?,
        (None, Some((lo, hi))) => to_int(cx, x, lo, hi, n.carrier())?,
        (None, None) => return Err(format!("unsupported: Cast to {n:?}")),
    };
    cx.narrow.insert(y, n);
    one(y)
}

/// `where(c, a, b)` with scalar `a` of `b`'s dtype.
fn pick(cx: &mut Ctx, c: ValueId, a: f64, b: ValueId) -> Result<ValueId, String> {
    let s = cx.sc(b, a);
    cx.prim(MirOp::Where, &[c, s, b])
}

fn cmp_sc(cx: &mut Ctx, op: BinaryOp, x: ValueId, v: f64) -> Result<ValueId, String> {
    let s = cx.sc(x, v);
    cx.bin(op, x, s)
}

/// x rounded to the narrow float format, in f32.
pub(super) fn to_float(cx: &mut Ctx, x: ValueId, ff: &FloatFormat, saturate: bool) -> Result<ValueId, String> {
    // Work in f64 for f64 input (no double rounding through f32), else in f32 (f16/bf16 widen exactly).
    let work = if cx.dtype(x) == DType::F64 { DType::F64 } else { DType::F32 };
    let x = cx.cast(x, work)?;
    let a = cx.un(UnaryOp::Abs, x)?;
    let emin = 1 - ff.bias;
    // The quantum (spacing of representable values) of |x|'s binade; below 2^emin the subnormal one.
    let mut q = cx.scalar(work, 2f64.powi(emin - ff.mant));
    for e in emin + 1..=ff.emax {
        let c = cmp_sc(cx, BinaryOp::Ge, a, 2f64.powi(e))?;
        let s = cx.scalar(work, 2f64.powi(e - ff.mant));
        q = cx.prim(MirOp::Where, &[c, s, q])?;
    }
    let t = cx.bin(BinaryOp::Div, x, q)?;
    let t = cx.un(UnaryOp::Round, t)?;
    let mut r = cx.bin(BinaryOp::Mul, t, q)?;
    let m = ff.max;
    if saturate || !ff.has_nan {
        let c = cmp_sc(cx, BinaryOp::Gt, r, m)?;
        r = pick(cx, c, m, r)?;
        let c = cmp_sc(cx, BinaryOp::Lt, r, -m)?;
        r = pick(cx, c, -m, r)?;
    } else if ff.has_inf {
        let c = cmp_sc(cx, BinaryOp::Gt, r, m)?;
        r = pick(cx, c, f64::INFINITY, r)?;
        let c = cmp_sc(cx, BinaryOp::Lt, r, -m)?;
        r = pick(cx, c, f64::NEG_INFINITY, r)?;
    } else {
        let ar = cx.un(UnaryOp::Abs, r)?;
        let c = cmp_sc(cx, BinaryOp::Gt, ar, m)?;
        r = pick(cx, c, f64::NAN, r)?;
    }
    if !ff.has_nan {
        let c = cx.un(UnaryOp::IsNan, x)?;
        r = pick(cx, c, 0.0, r)?;
    }
    cx.cast(r, DType::F32)
}

/// x as an integer in [lo, hi] (out of range: 0), in the carrier dtype.
fn to_int(cx: &mut Ctx, x: ValueId, lo: i64, hi: i64, carrier: DType) -> Result<ValueId, String> {
    let dt = cx.dtype(x);
    let xi = if dt == DType::Bool {
        return cx.cast(x, carrier);
    } else if dt.is_float() {
        // f16/bf16 widen exactly to f32 (which every CPU target computes in).
        let x = if dt == DType::F64 { x } else { cx.cast(x, DType::F32)? };
        // NaN → 0; clamp just outside the range so the truncating cast never overflows.
        let c = cx.un(UnaryOp::IsNan, x)?;
        let x = pick(cx, c, 0.0, x)?;
        let l = cx.sc(x, (lo - 1) as f64);
        let x = cx.bin(BinaryOp::Max, x, l)?;
        let h = cx.sc(x, (hi + 1) as f64);
        let x = cx.bin(BinaryOp::Min, x, h)?;
        cx.cast(x, DType::I32)?
    } else if dt == DType::U64 {
        let h = cx.sc(x, (hi + 1) as f64);
        let x = cx.bin(BinaryOp::Min, x, h)?;
        cx.cast(x, DType::I64)?
    } else {
        cx.cast(x, DType::I64)?
    };
    let ge = cmp_sc(cx, BinaryOp::Ge, xi, lo as f64)?;
    let le = cmp_sc(cx, BinaryOp::Le, xi, hi as f64)?;
    let inside = cx.bin(BinaryOp::And, ge, le)?;
    let zero = cx.sc(xi, 0.0);
    let y = cx.prim(MirOp::Where, &[inside, xi, zero])?;
    cx.cast(y, carrier)
}
