//! Backward rules of the elementwise family: unary and binary ops (numpy broadcasting undone by
//! `unbroadcast`), `where`, float-to-float `cast`, and `fake_quantize` (straight-through estimator;
//! LSQ for a trained scale).
//! Piecewise-constant ops (floor, ceil, round, sign) have the zero rule: their derivative is 0 wherever
//! it exists.

use super::build::B;
use super::Site;
use rlx_ir::{BinaryOp, DType, MirOp, UnaryOp, ValueId};
use std::f64::consts::PI;

pub fn unary(b: &mut B, u: UnaryOp, s: &Site, g: ValueId) -> Result<Option<ValueId>, String> {
    let (x, y) = (s.ins[0], s.outs[0]);
    use UnaryOp::*;
    // `one_minus(v)` = 1 - v; `sq(v)` = v * v.
    let gx = match u {
        Neg => b.neg(g)?,
        Abs => {
            let sg = b.un(Sign, x)?;
            b.mul(g, sg)?
        }
        Exp => b.mul(g, y)?,
        Log => b.div(g, x)?,
        Sqrt => {
            let h = b.div(g, y)?;
            b.scale(h, 0.5)?
        }
        Recip => {
            let yy = b.mul(y, y)?;
            let t = b.mul(g, yy)?;
            b.neg(t)?
        }
        Sin => {
            let c = b.un(Cos, x)?;
            b.mul(g, c)?
        }
        Cos => {
            let sn = b.un(Sin, x)?;
            let t = b.mul(g, sn)?;
            b.neg(t)?
        }
        Tan => {
            let yy = b.mul(y, y)?;
            let one = b.scalar(y, 1.0);
            let d = b.add(one, yy)?;
            b.mul(g, d)?
        }
        Asin | Acos => {
            let xx = b.mul(x, x)?;
            let one = b.scalar(x, 1.0);
            let d = b.sub(one, xx)?;
            let r = b.un(Sqrt, d)?;
            let t = b.div(g, r)?;
            if u == Acos { b.neg(t)? } else { t }
        }
        Atan => {
            let xx = b.mul(x, x)?;
            let one = b.scalar(x, 1.0);
            let d = b.add(one, xx)?;
            b.div(g, d)?
        }
        Sinh => {
            let c = b.un(Cosh, x)?;
            b.mul(g, c)?
        }
        Cosh => {
            let sn = b.un(Sinh, x)?;
            b.mul(g, sn)?
        }
        Tanh => {
            let yy = b.mul(y, y)?;
            let one = b.scalar(y, 1.0);
            let d = b.sub(one, yy)?;
            b.mul(g, d)?
        }
        Asinh | Acosh => {
            let xx = b.mul(x, x)?;
            let one = b.scalar(x, 1.0);
            let d = if u == Asinh { b.add(xx, one)? } else { b.sub(xx, one)? };
            let r = b.un(Sqrt, d)?;
            b.div(g, r)?
        }
        Atanh => {
            let xx = b.mul(x, x)?;
            let one = b.scalar(x, 1.0);
            let d = b.sub(one, xx)?;
            b.div(g, d)?
        }
        Sigmoid => {
            let one = b.scalar(y, 1.0);
            let d = b.sub(one, y)?;
            let t = b.mul(y, d)?;
            b.mul(g, t)?
        }
        Erf => {
            let xx = b.mul(x, x)?;
            let nxx = b.neg(xx)?;
            let e = b.un(Exp, nxx)?;
            let t = b.scale(e, 2.0 / PI.sqrt())?;
            b.mul(g, t)?
        }
        Relu => {
            let z = b.scalar(x, 0.0);
            let pos = b.bin(BinaryOp::Gt, x, z)?;
            b.select(pos, g, true)?
        }
        Floor | Ceil | Round | Sign => return Ok(None),
        Not | BitNot | IsNan | IsInf | IsPosInf | IsNegInf => return Err(format!("{} has no float output to differentiate", u.name())),
    };
    Ok(Some(gx))
}

pub fn binary(bop: BinaryOp, b: &mut B, s: &Site, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    let (x0, x1, y) = (s.ins[0], s.ins[1], s.outs[0]);
    let (need0, need1) = (s.need[0], s.need[1]);
    use BinaryOp::*;
    let (g0, g1): (Option<ValueId>, Option<ValueId>) = match bop {
        Add => (Some(g), Some(g)),
        Sub => (Some(g), if need1 { Some(b.neg(g)?) } else { None }),
        Mul => (
            if need0 { Some(b.mul(g, x1)?) } else { None },
            if need1 { Some(b.mul(g, x0)?) } else { None },
        ),
        Div => {
            let g0 = if need0 { Some(b.div(g, x1)?) } else { None };
            let g1 = if need1 {
                // -g * y / x1
                let t = b.mul(g, y)?;
                let t = b.div(t, x1)?;
                Some(b.neg(t)?)
            } else {
                None
            };
            (g0, g1)
        }
        Pow => {
            let fdt = b.ty(x0).dtype;
            let g0 = if need0 {
                // g * e * x^(e-1); an integer exponent is converted to the base's dtype for the product.
                let one = b.scalar(x1, 1.0);
                let em1 = b.sub(x1, one)?;
                let p = b.bin(Pow, x0, em1)?;
                let e = if b.ty(x1).dtype == fdt { x1 } else { b.op(MirOp::Cast { to: fdt }, &[x1])? };
                let t = b.mul(e, p)?;
                Some(b.mul(g, t)?)
            } else {
                None
            };
            let g1 = if need1 {
                let l = b.un(UnaryOp::Log, x0)?;
                let t = b.mul(y, l)?;
                Some(b.mul(g, t)?)
            } else {
                None
            };
            (g0, g1)
        }
        Max | Min => {
            // The first operand takes the gradient where it wins or ties.
            let c = b.bin(if bop == Max { Ge } else { Le }, x0, x1)?;
            (
                if need0 { Some(b.select(c, g, true)?) } else { None },
                if need1 { Some(b.select(c, g, false)?) } else { None },
            )
        }
        Mod | FMod => {
            // y = x0 - x1 * q with q = floor or trunc(x0 / x1), piecewise constant: dy/dx1 = -q = -(x0 - y) / x1.
            let g1 = if need1 {
                let d = b.sub(x0, y)?;
                let q = b.div(d, x1)?;
                let t = b.mul(g, q)?;
                Some(b.neg(t)?)
            } else {
                None
            };
            (Some(g), g1)
        }
        _ => return Err(format!("{} has no float output to differentiate", bop.name())),
    };
    let t0 = b.ty(x0).shape;
    let t1 = b.ty(x1).shape;
    let g0 = match g0 {
        Some(v) if need0 => Some(b.unbroadcast(v, &t0)?),
        _ => None,
    };
    let g1 = match g1 {
        Some(v) if need1 => Some(b.unbroadcast(v, &t1)?),
        _ => None,
    };
    Ok(vec![g0, g1])
}

/// where(cond, a, b): the gradient goes to the operand that was picked.
pub fn where_(b: &mut B, s: &Site, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    let c = s.ins[0];
    let mut out = vec![None, None, None];
    for (k, keep) in [(1, true), (2, false)] {
        if s.need[k] {
            let v = b.select(c, g, keep)?;
            let t = b.ty(s.ins[k]).shape;
            out[k] = Some(b.unbroadcast(v, &t)?);
        }
    }
    Ok(out)
}

/// A float-to-float cast passes the gradient back in the source dtype.
pub fn cast(b: &mut B, s: &Site, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    let from = b.ty(s.ins[0]).dtype;
    Ok(vec![Some(b.op(MirOp::Cast { to: from }, &[g])?)])
}

/// fake_quantize: the straight-through estimator for the input (the rounding's derivative is taken
/// as 1); for a trained scale (`TrainOptions::learn_scales`), the estimator of LSQ (Esser et al.,
/// "Learned Step Size Quantization", 2019): ∂y/∂s = (q − z) − x/s where x/s + z rounds inside
/// [qmin, qmax], (q − z) where it clips, scaled by LSQ's 1/√(n·(qmax − qmin)) (n: elements of x) so
/// the step size moves at the pace of the weights; per-tensor scales only. No gradient to the zero
/// point.
pub fn fake_quantize(b: &mut B, s: &Site, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    let gs = if s.need[1] { Some(lsq_scale(b, s, g)?) } else { None };
    Ok(vec![Some(g), gs, None])
}

fn lsq_scale(b: &mut B, s: &Site, g: ValueId) -> Result<ValueId, String> {
    let (x, sc, z, y) = (s.ins[0], s.ins[1], s.ins[2], s.outs[0]);
    let st = b.ty(sc);
    if st.shape.numel() != Some(1) {
        return Err(format!("a trained fake_quantize scale must be per tensor (one value), got {}", st.shape));
    }
    let (qmin, qmax) = match b.ty(z).dtype {
        DType::I8 => (-128.0, 127.0),
        DType::U8 => (0.0, 255.0),
        d => return Err(format!("a trained fake_quantize scale needs an int8 or uint8 zero point, got {d}")),
    };
    let n = b.ty(x).shape.numel().ok_or("a trained fake_quantize scale needs fixed dims")?;
    let dt = b.ty(x).dtype;
    let zf = b.op(MirOp::Cast { to: dt }, &[z])?;
    let xs = b.div(x, sc)?;
    let r = b.add(xs, zf)?;
    let (lo, hi) = (b.scalar(x, qmin - 0.5), b.scalar(x, qmax + 0.5));
    let ge = b.bin(BinaryOp::Ge, r, lo)?;
    let le = b.bin(BinaryOp::Le, r, hi)?;
    let inside = b.bin(BinaryOp::And, ge, le)?;
    let qz = b.div(y, sc)?;
    let xin = b.select(inside, xs, true)?;
    let d = b.sub(qz, xin)?;
    let gd = b.mul(g, d)?;
    let gd = b.scale(gd, 1.0 / (n as f64 * (qmax - qmin)).sqrt())?;
    b.unbroadcast(gd, &st.shape)
}
