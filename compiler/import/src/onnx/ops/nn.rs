//! Convolution and pooling: Conv, ConvTranspose, MaxPool/AveragePool/LpPool, the global pools, LRN.


use super::{one, Node, R};
use crate::onnx::{Attrs, Ctx};
use rlx_ir::{BinaryOp, MirOp, PoolKind, ReduceOp, UnaryOp};

/// The ONNX op types this family translates.
pub(super) const OPS: &[&str] = &[
    "AveragePool", "Conv", "ConvTranspose", "GlobalAveragePool", "GlobalMaxPool", "LRN", "LpPool", "MaxPool",
];

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    let (a, op, nout) = (&nd.a, nd.op, nd.nout);
    let inp = |i: usize| nd.inp(i);
    let req = |i: usize| nd.req(i);
    match op {
        "Conv" | "ConvTranspose" => {
            let (x, w) = (req(0)?, req(1)?);
            let xd = cx.fixed_dims(x, op)?;
            let wd = cx.fixed_dims(w, &format!("{op} weight"))?;
            if xd.len() < 3 || wd.len() != xd.len() {
                return Err(format!("input {:?} and weight {:?} must be [N,C,spatial…]", xd, wd));
            }
            let sp = xd.len() - 2;
            let k: Vec<usize> = wd[2..].to_vec();
            let strides = usizes(a.ints("strides"), sp, 1, "strides")?;
            let dil = usizes(a.ints("dilations"), sp, 1, "dilations")?;
            let groups = a.i("group", 1).max(1) as usize;
            let mut ins2 = vec![x, w];
            ins2.extend(inp(2));
            if op == "Conv" {
                let pads = auto_pads(&a, &xd[2..], &k, &strides, &dil)?;
                return one(cx.prim(MirOp::Conv { strides, pads, dilations: dil, groups }, &ins2)?);
            }
            let mut opad = usizes(a.ints("output_padding"), sp, 0, "output_padding")?;
            let ap = a.s("auto_pad").unwrap_or_default();
            let out_shape = a.ints("output_shape").map(|v| v[v.len().saturating_sub(sp)..].to_vec());
            let pads = if out_shape.is_some() || ap == "SAME_UPPER" || ap == "SAME_LOWER" {
                let mut p = vec![0; 2 * sp];
                for i in 0..sp {
                    let want = match &out_shape {
                        Some(o) => o[i],
                        None => (xd[i + 2] * strides[i]) as i64,
                    };
                    let full = (strides[i] * (xd[i + 2] - 1) + opad[i] + (k[i] - 1) * dil[i] + 1) as i64;
                    let mut total = full - want;
                    if total < 0 {
                        opad[i] += (-total) as usize;
                        total = 0;
                    }
                    let t = total as usize;
                    if ap == "SAME_UPPER" {
                        p[i] = t / 2;
                        p[i + sp] = t - t / 2;
                    } else {
                        p[i] = t - t / 2;
                        p[i + sp] = t / 2;
                    }
                }
                p
            } else if ap == "VALID" {
                vec![0; 2 * sp]
            } else {
                usizes(a.ints("pads"), 2 * sp, 0, "pads")?
            };
            one(cx.prim(MirOp::ConvTranspose { strides, pads, dilations: dil, groups, output_padding: opad }, &ins2)?)
        }
        "MaxPool" | "AveragePool" | "LpPool" => {
            let x = req(0)?;
            if nout > 1 {
                return Err("unsupported: MaxPool indices output".into());
            }
            let xd = cx.fixed_dims(x, op)?;
            let sp = xd.len().checked_sub(2).ok_or("pool input must be [N,C,spatial…]")?;
            let k = usizes(a.ints("kernel_shape"), sp, 1, "kernel_shape")?;
            let strides = usizes(a.ints("strides"), sp, 1, "strides")?;
            let dil = usizes(a.ints("dilations"), sp, 1, "dilations")?;
            let pads = auto_pads(&a, &xd[2..], &k, &strides, &dil)?;
            let ceil_mode = a.i("ceil_mode", 0) != 0;
            if op == "LpPool" {
                let p = a.i("p", 2) as f64;
                let ab = cx.un(UnaryOp::Abs, x)?;
                let pe = cx.sc(x, p);
                let xp = cx.bin(BinaryOp::Pow, ab, pe)?;
                let avg = cx.prim(
                    MirOp::Pool { kind: PoolKind::Avg, kernel: k.clone(), strides, pads, dilations: dil, ceil_mode, count_include_pad: true },
                    &[xp],
                )?;
                let s = cx.mul_sc(avg, k.iter().product::<usize>() as f64)?;
                let ie = cx.sc(x, 1.0 / p);
                return one(cx.bin(BinaryOp::Pow, s, ie)?);
            }
            let kind = if op == "MaxPool" { PoolKind::Max } else { PoolKind::Avg };
            let cip = a.i("count_include_pad", 0) != 0;
            one(cx.prim(MirOp::Pool { kind, kernel: k, strides, pads, dilations: dil, ceil_mode, count_include_pad: cip }, &[x])?)
        }
        "GlobalAveragePool" | "GlobalMaxPool" => {
            let x = req(0)?;
            let r = cx.rank(x);
            let o = if op == "GlobalMaxPool" { ReduceOp::Max } else { ReduceOp::Mean };
            one(cx.reduce(o, x, (2..r).collect(), true)?)
        }
        "LRN" => {
            let x = req(0)?;
            let d = cx.fixed_dims(x, op)?;
            let size = a.i("size", 1).max(1) as usize;
            let (alpha, beta, bias) = (a.f("alpha", 1e-4), a.f("beta", 0.75), a.f("bias", 1.0));
            let c = d[1];
            let rest: usize = d[2..].iter().product();
            let sq = cx.bin(BinaryOp::Mul, x, x)?;
            let s4 = cx.reshape_u(sq, &[d[0], 1, c, rest])?;
            let lo = (size - 1) / 2;
            let hi = size - 1 - lo;
            let avg = cx.prim(
                MirOp::Pool {
                    kind: PoolKind::Avg,
                    kernel: vec![size, 1],
                    strides: vec![1, 1],
                    pads: vec![lo, 0, hi, 0],
                    dilations: vec![1, 1],
                    ceil_mode: false,
                    count_include_pad: true,
                },
                &[s4],
            )?;
            let avg = cx.reshape_u(avg, &d)?;
            // avg = sum/size, so alpha/size*sum = alpha*avg
            let t = cx.mul_sc(avg, alpha)?;
            let t = cx.add_sc(t, bias)?;
            let be = cx.sc(x, beta);
            let t = cx.bin(BinaryOp::Pow, t, be)?;
            one(cx.bin(BinaryOp::Div, x, t)?)
        }
        _ => Err(format!("unsupported op {op}")),
    }
}

/// Pads for auto_pad SAME_UPPER/SAME_LOWER/VALID (conv and pool), else the explicit pads.
pub(super) fn auto_pads(a: &Attrs, inp: &[usize], k: &[usize], s: &[usize], d: &[usize]) -> Result<Vec<usize>, String> {
    let sp = inp.len();
    let ap = a.s("auto_pad").unwrap_or_else(|| "NOTSET".into());
    match ap.as_str() {
        "SAME_UPPER" | "SAME_LOWER" => {
            let mut p = vec![0; 2 * sp];
            for i in 0..sp {
                let out = inp[i].div_ceil(s[i]);
                let need = (out.saturating_sub(1)) * s[i] + (k[i] - 1) * d[i] + 1;
                let total = need.saturating_sub(inp[i]);
                let small = total / 2;
                if ap == "SAME_UPPER" {
                    p[i] = small;
                    p[i + sp] = total - small;
                } else {
                    p[i] = total - small;
                    p[i + sp] = small;
                }
            }
            Ok(p)
        }
        "VALID" => Ok(vec![0; 2 * sp]),
        _ => {
            let p = a.ints("pads").unwrap_or_else(|| vec![0; 2 * sp]);
            if p.len() != 2 * sp || p.iter().any(|&x| x < 0) {
                return Err(format!("pads {p:?} do not fit {sp} spatial dims"));
            }
            Ok(p.into_iter().map(|x| x as usize).collect())
        }
    }
}

pub(super) fn usizes(v: Option<Vec<i64>>, n: usize, default: usize, what: &str) -> Result<Vec<usize>, String> {
    match v {
        None => Ok(vec![default; n]),
        Some(v) if v.len() == n && v.iter().all(|&x| x >= 0) => Ok(v.into_iter().map(|x| x as usize).collect()),
        Some(v) => Err(format!("{what} {v:?} do not fit {n} spatial dims")),
    }
}
