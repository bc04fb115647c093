//! Normalizations and softmax: BatchNormalization, InstanceNormalization, MeanVarianceNormalization,
//! GroupNormalization, LayerNormalization / RMSNormalization (a `layer_norm` block when it is one),
//! LpNormalization, Softmax / LogSoftmax / Hardmax, and the two losses.

use super::build::{dim_prod, norm_axes, norm_axis};
use super::{one, Node, R};
use crate::onnx::Ctx;
use rlx_ir::{ArgOp, BinaryOp, ConstData, DType, Dim, HirOp, MirOp, ReduceOp, UnaryOp};

/// The ONNX op types this family translates.
pub(super) const OPS: &[&str] = &[
    "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", "LpNormalization", "BatchNormalization",
    "GroupNormalization", "Hardmax", "InstanceNormalization", "LayerNormalization", "LogSoftmax",
    "MeanVarianceNormalization", "RMSNormalization", "Softmax",
];

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    let (a, op, opset, nout) = (&nd.a, nd.op, nd.opset, nd.nout);
    let inp = |i: usize| nd.inp(i);
    let req = |i: usize| nd.req(i);
    match op {
        "BatchNormalization" => {
            let training = a.i("training_mode", 0) != 0;
            if nout > 1 && (!training || opset < 14) {
                return Err("unsupported: BatchNormalization's mean/variance outputs before opset 14 (training with saved statistics)".into());
            }
            let x = req(0)?;
            let r = cx.rank(x);
            let eps = a.f("epsilon", 1e-5);
            let sc = cx.chan(req(1)?, r)?;
            let b = cx.chan(req(2)?, r)?;
            let (mut m, mut v) = (cx.chan(req(3)?, r)?, cx.chan(req(4)?, r)?);
            let mut running = None;
            if training {
                // Batch statistics over every axis but the channel; running ones updated by momentum.
                let axes: Vec<usize> = (0..r).filter(|&i| i != 1).collect();
                let bm = cx.reduce(ReduceOp::Mean, x, axes.clone(), true)?;
                let d = cx.bin(BinaryOp::Sub, x, bm)?;
                let d2 = cx.bin(BinaryOp::Mul, d, d)?;
                let bv = cx.reduce(ReduceOp::Mean, d2, axes, true)?;
                let mom = a.f("momentum", 0.9);
                let upd = |cx: &mut Ctx, old: rlx_ir::ValueId, new: rlx_ir::ValueId| -> Result<rlx_ir::ValueId, String> {
                    let o = cx.mul_sc(old, mom)?;
                    let n = cx.mul_sc(new, 1.0 - mom)?;
                    let s = cx.bin(BinaryOp::Add, o, n)?;
                    let c = cx.dims(req(3)?);
                    cx.reshape(s, c)
                };
                running = Some((upd(cx, m, bm)?, upd(cx, v, bv)?));
                (m, v) = (bm, bv);
            }
            let ve = cx.add_sc(v, eps)?;
            let sd = cx.un(UnaryOp::Sqrt, ve)?;
            let d = cx.bin(BinaryOp::Sub, x, m)?;
            let y = cx.bin(BinaryOp::Div, d, sd)?;
            let y = cx.bin(BinaryOp::Mul, y, sc)?;
            let y = cx.bin(BinaryOp::Add, y, b)?;
            match running {
                Some((rm, rv)) => Ok(vec![y, rm, rv]),
                None => one(y),
            }
        }
        "InstanceNormalization" if cx.rank(req(0)?) > 3 && cx.fixed_dims(req(0)?, op).is_ok() => {
            // Over a plane of several dims: the plane flattened ([N, C, H·W]), so the statistics are
            // reductions over the last axis, which planning fuses into a row kernel (`row_fuse.rs`) —
            // over (H, W) they were five launches with x − mean and its square materialized (64 × 128²,
            // one thread, CPU time: 0.50 → 0.34 ms, ONNX Runtime 0.36).
            // GroupNormalization's statistics with a group per channel.
            let x = req(0)?;
            let xd = cx.fixed_dims(x, op)?;
            let r = xd.len();
            let y = group_normalized(cx, x, &xd, xd[1], a.f("epsilon", 1e-5))?;
            let s = cx.chan(req(1)?, r)?;
            let b = cx.chan(req(2)?, r)?;
            let y = cx.bin(BinaryOp::Mul, y, s)?;
            one(cx.bin(BinaryOp::Add, y, b)?)
        }
        "InstanceNormalization" | "MeanVarianceNormalization" => {
            let x = req(0)?;
            let r = cx.rank(x);
            let (axes, eps) = if op == "InstanceNormalization" {
                ((2..r).collect::<Vec<_>>(), a.f("epsilon", 1e-5))
            } else {
                (norm_axes(&a.ints("axes").unwrap_or(vec![0, 2, 3]), r)?, 0.0)
            };
            let m = cx.reduce(ReduceOp::Mean, x, axes.clone(), true)?;
            let d = cx.bin(BinaryOp::Sub, x, m)?;
            let d2 = cx.bin(BinaryOp::Mul, d, d)?;
            let var = cx.reduce(ReduceOp::Mean, d2, axes, true)?;
            if op == "MeanVarianceNormalization" {
                let sd = cx.un(UnaryOp::Sqrt, var)?;
                let sd = cx.add_sc(sd, 1e-9)?;
                return one(cx.bin(BinaryOp::Div, d, sd)?);
            }
            let ve = cx.add_sc(var, eps)?;
            let sd = cx.un(UnaryOp::Sqrt, ve)?;
            let y = cx.bin(BinaryOp::Div, d, sd)?;
            let s = cx.chan(req(1)?, r)?;
            let b = cx.chan(req(2)?, r)?;
            let y = cx.bin(BinaryOp::Mul, y, s)?;
            one(cx.bin(BinaryOp::Add, y, b)?)
        }
        "GroupNormalization" => {
            let x = req(0)?;
            let xd = cx.fixed_dims(x, op)?;
            let r = xd.len();
            if r < 2 {
                return Err(format!("GroupNormalization: the input has rank {r}, it needs [N, C, ...] (rank 2 or more)"));
            }
            let g = a.i("num_groups", 1).max(1) as usize;
            let c = xd[1];
            if c % g != 0 {
                return Err(format!("GroupNormalization: num_groups {g} does not divide the {c} channels"));
            }
            let y = group_normalized(cx, x, &xd, g, a.f("epsilon", 1e-5))?;
            let mut params = Vec::new();
            for i in [1, 2] {
                let mut p = req(i)?;
                if cx.fixed_dims(p, "GroupNormalization scale")? == vec![g] && g != c {
                    p = cx.reshape_u(p, &[g, 1])?;
                    p = cx.prim(MirOp::Expand { shape: vec![Dim::Fixed(g as u64), Dim::Fixed((c / g) as u64)] }, &[p])?;
                    p = cx.reshape_u(p, &[c])?;
                }
                params.push(cx.chan(p, r)?);
            }
            let y = cx.bin(BinaryOp::Mul, y, params[0])?;
            one(cx.bin(BinaryOp::Add, y, params[1])?)
        }
        "LayerNormalization" | "RMSNormalization" => {
            let x0 = req(0)?;
            let r = cx.rank(x0);
            let ax = norm_axis(a.i("axis", -1), r)?;
            let eps = a.f("epsilon", 1e-5);
            let xdt = cx.dtype(x0);
            let scale = req(1)?;
            let bias = inp(2);
            if op == "LayerNormalization" && nout <= 1 && xdt == DType::F32 {
                let mut li = vec![x0, scale];
                li.extend(bias);
                if let Ok(v) = cx.hir(HirOp::LayerNorm { axis: ax, eps }, &li) {
                    return one(v);
                }
            }
            let stash = if a.i("stash_type", 1) == 1 && xdt != DType::F64 { DType::F32 } else { xdt };
            let x = cx.cast(x0, stash)?;
            let axes: Vec<usize> = (ax..r).collect();
            let (d, var, m) = if op == "LayerNormalization" {
                let m = cx.reduce(ReduceOp::Mean, x, axes.clone(), true)?;
                let d = cx.bin(BinaryOp::Sub, x, m)?;
                let d2 = cx.bin(BinaryOp::Mul, d, d)?;
                (d, cx.reduce(ReduceOp::Mean, d2, axes, true)?, Some(m))
            } else {
                let x2 = cx.bin(BinaryOp::Mul, x, x)?;
                (x, cx.reduce(ReduceOp::Mean, x2, axes, true)?, None)
            };
            let ve = cx.add_sc(var, eps)?;
            let sd = cx.un(UnaryOp::Sqrt, ve)?;
            let inv = cx.un(UnaryOp::Recip, sd)?;
            let y = cx.bin(BinaryOp::Mul, d, inv)?;
            let y = cx.cast(y, xdt)?;
            let y = cx.bin(BinaryOp::Mul, y, scale)?;
            let y = match bias {
                Some(b) => cx.bin(BinaryOp::Add, y, b)?,
                None => y,
            };
            let mut outs = vec![y];
            if let Some(m) = m {
                outs.push(m);
                outs.push(inv);
            }
            Ok(outs)
        }
        "Softmax" | "LogSoftmax" | "Hardmax" => {
            let x = req(0)?;
            let d = cx.dims(x);
            let r = d.len();
            let default_axis = if opset < 13 { 1 } else { -1 };
            let ax = norm_axis(a.i("axis", default_axis), r)?;
            let (xin, axis) = if opset < 13 && ax != r - 1 {
                let (l, rr) = d.split_at(ax);
                let t = vec![dim_prod(l).ok_or("symbolic dims")?, dim_prod(rr).ok_or("symbolic dims")?];
                (cx.reshape(x, t)?, 1)
            } else {
                (x, ax)
            };
            let y = if op == "Hardmax" {
                let xd = cx.fixed_dims(xin, op)?;
                let am = cx.prim(MirOp::ArgReduce { op: ArgOp::ArgMax, axis, keepdims: true, select_last: false }, &[xin])?;
                let n = xd[axis];
                let mut rs = vec![1usize; xd.len()];
                rs[axis] = n;
                let ids: Vec<i64> = (0..n as i64).collect();
                let rg = cx.konst(ConstData::from_i64(rs, &ids));
                let eq = cx.bin(BinaryOp::Eq, am, rg)?;
                cx.cast(eq, cx.dtype(x))?
            } else {
                cx.softmax(xin, axis, op == "LogSoftmax")?
            };
            one(cx.reshape(y, d)?)
        }
        "NegativeLogLikelihoodLoss" | "SoftmaxCrossEntropyLoss" => {
            let (mut x, t) = (req(0)?, req(1)?);
            let mut outs = Vec::new();
            if op == "SoftmaxCrossEntropyLoss" {
                x = cx.softmax(x, 1, true)?;
            }
            let red = a.s("reduction").unwrap_or_else(|| "mean".into());
            let ii = a.has("ignore_index").then(|| a.i("ignore_index", 0));
            let t = cx.cast(t, DType::I64)?;
            let (t_safe, valid) = match ii {
                Some(ii) => {
                    let c = cx.scalar(DType::I64, ii as f64);
                    let eq = cx.bin(BinaryOp::Eq, t, c)?;
                    let valid = cx.un(UnaryOp::Not, eq)?;
                    let z = cx.scalar(DType::I64, 0.0);
                    (cx.prim(MirOp::Where, &[valid, t, z])?, Some(valid))
                }
                None => (t, None),
            };
            let tu = cx.unsqueeze(t_safe, &[1])?;
            let g = cx.prim(MirOp::GatherElements { axis: 1 }, &[x, tu])?;
            let g = cx.reshape(g, cx.dims(t_safe))?;
            let mut loss = cx.un(UnaryOp::Neg, g)?;
            let dt = cx.dtype(x);
            let wg = match (inp(2), valid) {
                (Some(w), v) => {
                    let wg = cx.prim(MirOp::Gather { axis: 0 }, &[w, t_safe])?;
                    match v {
                        Some(v) => {
                            let z = cx.scalar(dt, 0.0);
                            Some(cx.prim(MirOp::Where, &[v, wg, z])?)
                        }
                        None => Some(wg),
                    }
                }
                (None, Some(v)) => Some(cx.cast(v, dt)?),
                (None, None) => None,
            };
            if let Some(w) = wg {
                loss = cx.bin(BinaryOp::Mul, loss, w)?;
            }
            let r = cx.rank(loss);
            let all: Vec<usize> = (0..r).collect();
            let y = match (red.as_str(), wg) {
                ("none", _) => loss,
                ("sum", _) => cx.reduce(ReduceOp::Sum, loss, all, false)?,
                (_, Some(w)) => {
                    let s = cx.reduce(ReduceOp::Sum, loss, all.clone(), false)?;
                    let ws = cx.reduce(ReduceOp::Sum, w, all, false)?;
                    cx.bin(BinaryOp::Div, s, ws)?
                }
                (_, None) => cx.reduce(ReduceOp::Mean, loss, all, false)?,
            };
            outs.push(y);
            if op == "SoftmaxCrossEntropyLoss" {
                outs.push(x);
            }
            Ok(outs)
        }
        "LpNormalization" => {
            let x = req(0)?;
            let ax = norm_axis(a.i("axis", -1), cx.rank(x))?;
            let nrm = if a.i("p", 2) == 1 {
                let ab = cx.un(UnaryOp::Abs, x)?;
                cx.reduce(ReduceOp::Sum, ab, vec![ax], true)?
            } else {
                let sq = cx.bin(BinaryOp::Mul, x, x)?;
                let s = cx.reduce(ReduceOp::Sum, sq, vec![ax], true)?;
                cx.un(UnaryOp::Sqrt, s)?
            };
            let z = cx.sc(nrm, 0.0);
            let o = cx.sc(nrm, 1.0);
            let is0 = cx.bin(BinaryOp::Eq, nrm, z)?;
            let nrm = cx.prim(MirOp::Where, &[is0, o, nrm])?;
            one(cx.bin(BinaryOp::Div, x, nrm)?)
        }
        _ => Err(format!("unsupported op {op}")),
    }
}

/// `x` (of dims `xd`, [N, C, ...]) normalized over each of `g` groups of its channels and their
/// positions: viewed as [N, g, rest], (x − mean) / √(var + eps) over the last axis — a reduction
/// planning fuses into a row kernel (`row_fuse.rs`) —, viewed back as `xd`.
fn group_normalized(cx: &mut Ctx, x: rlx_ir::ValueId, xd: &[usize], g: usize, eps: f64) -> Result<rlx_ir::ValueId, String> {
    let grouped = cx.reshape_u(x, &[xd[0], g, xd[1..].iter().product::<usize>() / g])?;
    let m = cx.reduce(ReduceOp::Mean, grouped, vec![2], true)?;
    let d = cx.bin(BinaryOp::Sub, grouped, m)?;
    let d2 = cx.bin(BinaryOp::Mul, d, d)?;
    let var = cx.reduce(ReduceOp::Mean, d2, vec![2], true)?;
    let ve = cx.add_sc(var, eps)?;
    let sd = cx.un(UnaryOp::Sqrt, ve)?;
    let y = cx.bin(BinaryOp::Div, d, sd)?;
    cx.reshape_u(y, xd)
}
