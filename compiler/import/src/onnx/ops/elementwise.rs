//! Elementwise ops: the unary and binary tables, `Where`, variadic `Max`/`Min`/`Sum`/`Mean`,
//! and the activations composed of primitives (LeakyRelu, Elu, Selu, HardSwish, Softplus, Mish, …,
//! PRelu, Gelu, Clip).

use super::{one, Node, R};
use crate::onnx::Ctx;
use rlx_ir::{BinaryOp, DType, HirOp, MirOp, UnaryOp, ValueId};

/// The ONNX op types this family translates.
pub(super) const OPS: &[&str] = &[
    "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift", "BitwiseAnd", "BitwiseNot",
    "BitwiseOr", "BitwiseXor", "Ceil", "Celu", "Clip", "Cos", "Cosh", "Div", "Dropout", "Elu",
    "Equal", "Erf", "Exp", "Floor", "Gelu", "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish", "Identity",
    "IsInf", "IsNaN", "LeakyRelu", "Less", "LessOrEqual", "Log", "Max", "Mean", "Min", "Mish", "Mod", "Mul", "Neg",
    "Not", "Or", "PRelu", "Pow", "Reciprocal", "Relu", "Round", "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh",
    "Softplus", "Softsign", "Sqrt", "Sub", "Sum", "SwiGLU", "Swish", "Tan", "Tanh", "ThresholdedRelu", "Where", "Xor",
];

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    let (a, op, opset, ins, nout) = (&nd.a, nd.op, nd.opset, nd.ins, nd.nout);
    let inp = |i: usize| nd.inp(i);
    let req = |i: usize| nd.req(i);
    let unary = match op {
        "Abs" => Some(UnaryOp::Abs),
        "Neg" => Some(UnaryOp::Neg),
        "Exp" => Some(UnaryOp::Exp),
        "Log" => Some(UnaryOp::Log),
        "Sqrt" => Some(UnaryOp::Sqrt),
        "Reciprocal" => Some(UnaryOp::Recip),
        "Sin" => Some(UnaryOp::Sin),
        "Cos" => Some(UnaryOp::Cos),
        "Tan" => Some(UnaryOp::Tan),
        "Asin" => Some(UnaryOp::Asin),
        "Acos" => Some(UnaryOp::Acos),
        "Atan" => Some(UnaryOp::Atan),
        "Sinh" => Some(UnaryOp::Sinh),
        "Cosh" => Some(UnaryOp::Cosh),
        "Tanh" => Some(UnaryOp::Tanh),
        "Asinh" => Some(UnaryOp::Asinh),
        "Acosh" => Some(UnaryOp::Acosh),
        "Atanh" => Some(UnaryOp::Atanh),
        "Sigmoid" => Some(UnaryOp::Sigmoid),
        "Erf" => Some(UnaryOp::Erf),
        "Relu" => Some(UnaryOp::Relu),
        "Floor" => Some(UnaryOp::Floor),
        "Ceil" => Some(UnaryOp::Ceil),
        "Round" => Some(UnaryOp::Round),
        "Sign" => Some(UnaryOp::Sign),
        "Not" => Some(UnaryOp::Not),
        "BitwiseNot" => Some(UnaryOp::BitNot),
        "IsNaN" => Some(UnaryOp::IsNan),
        "IsInf" => Some(match (a.i("detect_positive", 1), a.i("detect_negative", 1)) {
            (0, _) => UnaryOp::IsNegInf,
            (_, 0) => UnaryOp::IsPosInf,
            _ => UnaryOp::IsInf,
        }),
        _ => None,
    };
    if let Some(u) = unary {
        return one(cx.un(u, req(0)?)?);
    }
    let binary = match op {
        "Add" => Some(BinaryOp::Add),
        "Sub" => Some(BinaryOp::Sub),
        "Mul" => Some(BinaryOp::Mul),
        "Div" => Some(BinaryOp::Div),
        "Pow" => Some(BinaryOp::Pow),
        "Equal" => Some(BinaryOp::Eq),
        "Less" => Some(BinaryOp::Lt),
        "LessOrEqual" => Some(BinaryOp::Le),
        "Greater" => Some(BinaryOp::Gt),
        "GreaterOrEqual" => Some(BinaryOp::Ge),
        "And" => Some(BinaryOp::And),
        "Or" => Some(BinaryOp::Or),
        "Xor" => Some(BinaryOp::Xor),
        "BitwiseAnd" => Some(BinaryOp::BitAnd),
        "BitwiseOr" => Some(BinaryOp::BitOr),
        "BitwiseXor" => Some(BinaryOp::BitXor),
        "Mod" => Some(if a.i("fmod", 0) != 0 { BinaryOp::FMod } else { BinaryOp::Mod }),
        "BitShift" => Some(if a.s("direction").as_deref() == Some("LEFT") { BinaryOp::Shl } else { BinaryOp::Shr }),
        _ => None,
    };
    if let Some(b) = binary {
        let (x, mut y) = (req(0)?, req(1)?);
        if b == BinaryOp::Pow && cx.dtype(x) != cx.dtype(y) {
            y = cx.cast(y, cx.dtype(x))?;
        }
        return one(cx.bin(b, x, y)?);
    }

    match op {
        "Identity" => one(req(0)?),
        "Dropout" => {
            let x = req(0)?;
            if let Some(t) = inp(2) {
                if cx.const_ints(t, "Dropout training_mode")?.first().copied().unwrap_or(0) != 0 {
                    // Training mode drops at random; only ratio 0 (keep everything) is deterministic.
                    let ratio = match inp(1) {
                        Some(r) => cx.const_f64s(r, "Dropout ratio (training mode)")?.first().copied().unwrap_or(0.5),
                        None => 0.5,
                    };
                    if ratio != 0.0 {
                        return Err("unsupported: Dropout in training mode with a nonzero ratio (random)".into());
                    }
                }
            }
            if nout > 1 {
                let t = cx.scalar(DType::Bool, 1.0);
                let m = cx.prim(MirOp::Expand { shape: cx.dims(x) }, &[t])?;
                return Ok(vec![x, m]);
            }
            one(x)
        }
        "Where" => one(cx.prim(MirOp::Where, &[req(0)?, req(1)?, req(2)?])?),
        "Max" | "Min" | "Sum" | "Mean" => {
            let vs: Vec<ValueId> = ins.iter().flatten().copied().collect();
            let b = match op {
                "Max" => BinaryOp::Max,
                "Min" => BinaryOp::Min,
                _ => BinaryOp::Add,
            };
            let mut acc = *vs.first().ok_or("needs at least one input")?;
            for &v in &vs[1..] {
                acc = cx.bin(b, acc, v)?;
            }
            if op == "Mean" && vs.len() > 1 {
                let c = cx.sc(acc, vs.len() as f64);
                acc = cx.bin(BinaryOp::Div, acc, c)?;
            }
            one(acc)
        }
        "Relu" => unreachable!(),
        "LeakyRelu" | "ThresholdedRelu" | "Elu" | "Selu" | "Celu" | "HardSigmoid" | "HardSwish" | "Softplus" | "Softsign"
        | "Mish" | "Shrink" | "Swish" => {
            let x = req(0)?;
            let y = activation(cx, op, &|k, d| a.f(k, d), x)?.ok_or_else(|| format!("unsupported op {op}"))?;
            one(y)
        }
        "SwiGLU" => {
            // a · sigmoid(alpha · a) · b (same shapes, no broadcasting).
            let (x, y) = (req(0)?, req(1)?);
            if cx.dims(x) != cx.dims(y) {
                return Err(format!("SwiGLU inputs differ in shape: {} vs {}", cx.ty(x), cx.ty(y)));
            }
            let t = cx.mul_sc(x, a.f("alpha", 1.0))?;
            let sg = cx.un(UnaryOp::Sigmoid, t)?;
            let sw = cx.bin(BinaryOp::Mul, x, sg)?;
            one(cx.bin(BinaryOp::Mul, sw, y)?)
        }
        "PRelu" => {
            let (x, s) = (req(0)?, req(1)?);
            let zero = cx.sc(x, 0.0);
            let neg = cx.bin(BinaryOp::Lt, x, zero)?;
            let xs = cx.bin(BinaryOp::Mul, x, s)?;
            one(cx.prim(MirOp::Where, &[neg, xs, x])?)
        }
        "Gelu" => one(cx.hir(HirOp::Gelu { tanh: a.s("approximate").as_deref() == Some("tanh") }, &[req(0)?])?),
        "Clip" => {
            let mut x = req(0)?;
            let (lo, hi) = if opset < 11 {
                let lo = a.has("min").then(|| cx.sc(x, a.f("min", 0.0)));
                let hi = a.has("max").then(|| cx.sc(x, a.f("max", 0.0)));
                (lo, hi)
            } else {
                (inp(1), inp(2))
            };
            if let Some(lo) = lo {
                x = cx.bin(BinaryOp::Max, x, lo)?;
            }
            if let Some(hi) = hi {
                x = cx.bin(BinaryOp::Min, x, hi)?;
            }
            one(x)
        }
        _ => Err(format!("unsupported op {op}")),
    }
}

/// The activations composed of primitives, by ONNX op name (also the recurrent layers'
/// `activations`); `attr(name, default)` reads alpha, beta, gamma, lambd, bias. `None`: not one of them.
pub(super) fn activation(cx: &mut Ctx, op: &str, attr: &dyn Fn(&str, f64) -> f64, x: ValueId) -> Result<Option<ValueId>, String> {
    let zero = cx.sc(x, 0.0);
    Ok(Some(match op {
        "LeakyRelu" => {
            let neg = cx.bin(BinaryOp::Lt, x, zero)?;
            let ax = cx.mul_sc(x, attr("alpha", 0.01))?;
            cx.prim(MirOp::Where, &[neg, ax, x])?
        }
        "ThresholdedRelu" => {
            let t = cx.sc(x, attr("alpha", 1.0));
            let gt = cx.bin(BinaryOp::Gt, x, t)?;
            cx.prim(MirOp::Where, &[gt, x, zero])?
        }
        "Elu" | "Selu" => {
            let (al, ga) = if op == "Elu" {
                (attr("alpha", 1.0), 1.0)
            } else {
                (attr("alpha", 1.6732632423543772848170429916717), attr("gamma", 1.0507009873554804934193349852946))
            };
            let pos = cx.bin(BinaryOp::Gt, x, zero)?;
            let e = cx.un(UnaryOp::Exp, x)?;
            let e1 = cx.add_sc(e, -1.0)?;
            let neg = cx.mul_sc(e1, al)?;
            let y = cx.prim(MirOp::Where, &[pos, x, neg])?;
            if ga != 1.0 {
                cx.mul_sc(y, ga)?
            } else {
                y
            }
        }
        "Celu" => {
            let al = attr("alpha", 1.0);
            let xs = cx.mul_sc(x, 1.0 / al)?;
            let e = cx.un(UnaryOp::Exp, xs)?;
            let e1 = cx.add_sc(e, -1.0)?;
            let neg = cx.mul_sc(e1, al)?;
            let mn = cx.bin(BinaryOp::Min, zero, neg)?;
            let mx = cx.bin(BinaryOp::Max, zero, x)?;
            cx.bin(BinaryOp::Add, mx, mn)?
        }
        "HardSigmoid" | "HardSwish" => {
            let (al, be) = if op == "HardSigmoid" { (attr("alpha", 0.2), attr("beta", 0.5)) } else { (1.0 / 6.0, 0.5) };
            let t = cx.mul_sc(x, al)?;
            let t = cx.add_sc(t, be)?;
            let one_ = cx.sc(x, 1.0);
            let t = cx.bin(BinaryOp::Min, t, one_)?;
            let t = cx.bin(BinaryOp::Max, t, zero)?;
            if op == "HardSwish" {
                cx.bin(BinaryOp::Mul, x, t)?
            } else {
                t
            }
        }
        "Softplus" | "Mish" => {
            // log(1+exp(x)), stable: max(x,0) + log(1+exp(-|x|))
            let ab = cx.un(UnaryOp::Abs, x)?;
            let nab = cx.un(UnaryOp::Neg, ab)?;
            let e = cx.un(UnaryOp::Exp, nab)?;
            let e1 = cx.add_sc(e, 1.0)?;
            let l = cx.un(UnaryOp::Log, e1)?;
            let mx = cx.bin(BinaryOp::Max, x, zero)?;
            let sp = cx.bin(BinaryOp::Add, mx, l)?;
            if op == "Mish" {
                let t = cx.un(UnaryOp::Tanh, sp)?;
                cx.bin(BinaryOp::Mul, x, t)?
            } else {
                sp
            }
        }
        "Softsign" => {
            let ab = cx.un(UnaryOp::Abs, x)?;
            let d = cx.add_sc(ab, 1.0)?;
            cx.bin(BinaryOp::Div, x, d)?
        }
        "Swish" => {
            let t = cx.mul_sc(x, attr("alpha", 1.0))?;
            let s = cx.un(UnaryOp::Sigmoid, t)?;
            cx.bin(BinaryOp::Mul, x, s)?
        }
        "Shrink" => {
            let (l, b) = (attr("lambd", 0.5), attr("bias", 0.0));
            let lo = cx.sc(x, -l);
            let hi = cx.sc(x, l);
            let below = cx.bin(BinaryOp::Lt, x, lo)?;
            let above = cx.bin(BinaryOp::Gt, x, hi)?;
            let xb = cx.add_sc(x, b)?;
            let xm = cx.add_sc(x, -b)?;
            let t = cx.prim(MirOp::Where, &[above, xm, zero])?;
            cx.prim(MirOp::Where, &[below, xb, t])?
        }
        _ => return Ok(None),
    }))
}
