//! Reductions: the Reduce* family (L1, L2, LogSum, LogSumExp, SumSquare composed of primitives),
//! ArgMax / ArgMin, CumSum, TopK.

use super::build::{norm_axes, norm_axis};
use super::{one, Node, R};
use crate::onnx::Ctx;
use rlx_ir::{ArgOp, BinaryOp, MirOp, ReduceOp, UnaryOp};

/// The ONNX op types this family translates.
pub(super) const OPS: &[&str] = &[
    "ArgMax", "ArgMin", "CumProd", "CumSum", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
    "ReduceProd", "ReduceSum", "ReduceSumSquare", "TopK",
];

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    let (a, op, opset) = (&nd.a, nd.op, nd.opset);
    let inp = |i: usize| nd.inp(i);
    let req = |i: usize| nd.req(i);
    match op {
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1" | "ReduceL2" | "ReduceLogSum"
        | "ReduceLogSumExp" | "ReduceSumSquare" => {
            let x = req(0)?;
            let r = cx.rank(x);
            let keep = a.i("keepdims", 1) != 0;
            let from_input = if op == "ReduceSum" { opset >= 13 } else { opset >= 18 };
            let axes = if from_input {
                match inp(1) {
                    Some(v) => Some(cx.const_ints(v, &format!("{op} axes"))?),
                    None => None,
                }
            } else {
                a.ints("axes")
            };
            let axes = match axes {
                Some(v) if !v.is_empty() => norm_axes(&v, r)?,
                _ if a.i("noop_with_empty_axes", 0) != 0 => return one(x),
                _ => (0..r).collect(),
            };
            let y = match op {
                "ReduceSum" => cx.reduce(ReduceOp::Sum, x, axes, keep)?,
                "ReduceMean" => cx.reduce(ReduceOp::Mean, x, axes, keep)?,
                "ReduceMax" => cx.reduce(ReduceOp::Max, x, axes, keep)?,
                "ReduceMin" => cx.reduce(ReduceOp::Min, x, axes, keep)?,
                "ReduceProd" => cx.reduce(ReduceOp::Prod, x, axes, keep)?,
                "ReduceL1" => {
                    let ab = cx.un(UnaryOp::Abs, x)?;
                    cx.reduce(ReduceOp::Sum, ab, axes, keep)?
                }
                "ReduceL2" | "ReduceSumSquare" => {
                    let sq = cx.bin(BinaryOp::Mul, x, x)?;
                    let s = cx.reduce(ReduceOp::Sum, sq, axes, keep)?;
                    if op == "ReduceL2" {
                        cx.un(UnaryOp::Sqrt, s)?
                    } else {
                        s
                    }
                }
                "ReduceLogSum" => {
                    let s = cx.reduce(ReduceOp::Sum, x, axes, keep)?;
                    cx.un(UnaryOp::Log, s)?
                }
                _ => {
                    // log(sum(exp(x - max))) + max, with -inf maxima (empty or all -inf) kept finite.
                    let m = cx.reduce(ReduceOp::Max, x, axes.clone(), true)?;
                    let fin = cx.un(UnaryOp::IsInf, m)?;
                    let zero = cx.sc(m, 0.0);
                    let m = cx.prim(MirOp::Where, &[fin, zero, m])?;
                    let d = cx.bin(BinaryOp::Sub, x, m)?;
                    let e = cx.un(UnaryOp::Exp, d)?;
                    let s = cx.reduce(ReduceOp::Sum, e, axes.clone(), keep)?;
                    let l = cx.un(UnaryOp::Log, s)?;
                    let m2 = if keep { m } else { cx.reduce(ReduceOp::Max, m, axes, false)? };
                    cx.bin(BinaryOp::Add, l, m2)?
                }
            };
            one(y)
        }
        "ArgMax" | "ArgMin" => {
            let x = req(0)?;
            let axis = norm_axis(a.i("axis", 0), cx.rank(x))?;
            let o = if op == "ArgMax" { ArgOp::ArgMax } else { ArgOp::ArgMin };
            one(cx.prim(
                MirOp::ArgReduce { op: o, axis, keepdims: a.i("keepdims", 1) != 0, select_last: a.i("select_last_index", 0) != 0 },
                &[x],
            )?)
        }
        "CumProd" => {
            // Unrolled along the (static) axis: a running product of one-element slices, concatenated.
            let x = req(0)?;
            let ax = cx.const_ints(req(1)?, "CumProd axis")?;
            let axis = norm_axis(*ax.first().ok_or("empty axis")?, cx.rank(x))?;
            let n = cx.fixed_dims(x, "CumProd input")?[axis];
            if n > 4096 {
                return Err(format!("unsupported: CumProd along an axis of {n} elements (at most 4096 are unrolled)"));
            }
            if n == 0 {
                return one(x);
            }
            let (exclusive, reverse) = (a.i("exclusive", 0) != 0, a.i("reverse", 0) != 0);
            let order: Vec<usize> = if reverse { (0..n).rev().collect() } else { (0..n).collect() };
            let mut outs = vec![None; n];
            let mut run: Option<rlx_ir::ValueId> = None;
            for &i in &order {
                let s = cx.prim(MirOp::Slice { axes: vec![axis], starts: vec![i as i64], ends: vec![i as i64 + 1], steps: vec![1] }, &[x])?;
                let next = match run {
                    Some(r) => cx.bin(BinaryOp::Mul, r, s)?,
                    None => s,
                };
                outs[i] = Some(if exclusive {
                    match run {
                        Some(r) => r,
                        None => {
                            let one_ = cx.sc(s, 1.0);
                            cx.prim(MirOp::Expand { shape: cx.dims(s) }, &[one_])?
                        }
                    }
                } else {
                    next
                });
                run = Some(next);
            }
            let parts: Vec<rlx_ir::ValueId> = outs.into_iter().flatten().collect();
            one(if parts.len() == 1 { parts[0] } else { cx.prim(MirOp::Concat { axis }, &parts)? })
        }
        "CumSum" => {
            let x = req(0)?;
            let ax = cx.const_ints(req(1)?, "CumSum axis")?;
            let axis = norm_axis(*ax.first().ok_or("empty axis")?, cx.rank(x))?;
            one(cx.prim(MirOp::CumSum { axis, exclusive: a.i("exclusive", 0) != 0, reverse: a.i("reverse", 0) != 0 }, &[x])?)
        }
        "TopK" => {
            let x = req(0)?;
            let k = if opset < 10 { a.i("k", 1) } else { *cx.const_ints(req(1)?, "TopK k")?.first().ok_or("empty k")? };
            let axis = norm_axis(a.i("axis", -1), cx.rank(x))?;
            cx.prim_n(MirOp::TopK { axis, k: k.max(0) as usize, largest: a.i("largest", 1) != 0 }, &[x])
        }
        _ => Err(format!("unsupported op {op}")),
    }
}
