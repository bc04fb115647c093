//! Convolution and pooling: Conv, ConvTranspose, MaxPool/AveragePool/LpPool, the global pools, LRN.


use super::{one, Node, R};
use crate::onnx::{Attrs, Ctx};
use rlx_ir::{BinaryOp, ConstData, MirOp, PoolKind, ReduceOp, UnaryOp};

/// The ONNX op types this family translates.
pub(super) const OPS: &[&str] = &[
    "AveragePool", "Col2Im", "Conv", "ConvTranspose", "GlobalAveragePool", "GlobalMaxPool", "LRN", "LpPool", "MaxPool", "MaxUnpool",
];

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    let (a, op, nout) = (&nd.a, nd.op, nd.nout);
    let inp = |i: usize| nd.inp(i);
    let req = |i: usize| nd.req(i);
    match op {
        "Col2Im" => {
            // A scatter-add of every (block offset, sliding position) column entry into its image
            // position, from a constant index map; entries that fall in the padding go to one
            // extra slot, sliced away.
            let x = req(0)?;
            let xd = cx.fixed_dims(x, op)?;
            let image: Vec<i64> = cx.const_ints(req(1)?, "Col2Im image_shape")?;
            let block: Vec<i64> = cx.const_ints(req(2)?, "Col2Im block_shape")?;
            let sp = image.len();
            if xd.len() != 3 || block.len() != sp || sp == 0 {
                return Err(format!("input {xd:?}, image_shape {image:?} and block_shape {block:?} do not fit"));
            }
            let dil = a.ints("dilations").unwrap_or_else(|| vec![1; sp]);
            let strides = a.ints("strides").unwrap_or_else(|| vec![1; sp]);
            let pads = a.ints("pads").unwrap_or_else(|| vec![0; 2 * sp]);
            if dil.len() != sp || strides.len() != sp || pads.len() != 2 * sp {
                return Err(format!("dilations {dil:?}, strides {strides:?}, pads {pads:?} do not fit {sp} spatial dims"));
            }
            let pos = |v: &[i64], what: &str| -> Result<Vec<usize>, String> {
                v.iter().map(|&d| if (1..=1 << 20).contains(&d) { Ok(d as usize) } else { Err(format!("{what} {v:?} must be positive")) }).collect()
            };
            let (image, block, dil, strides) = (pos(&image, "image_shape")?, pos(&block, "block_shape")?, pos(&dil, "dilations")?, pos(&strides, "strides")?);
            // Sliding positions per dim.
            let mut nblk = Vec::with_capacity(sp);
            for d in 0..sp {
                let span = image[d] as i64 + pads[d] + pads[sp + d] - (dil[d] * (block[d] - 1) + 1) as i64;
                if span < 0 {
                    return Err(format!("the blocks do not fit the padded image in dim {d}"));
                }
                nblk.push(span as usize / strides[d] + 1);
            }
            let prod = |v: &[usize]| v.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).filter(|&p| p <= 1 << 28);
            let (Some(nb), Some(nl), Some(np)) = (prod(&block), prod(&nblk), prod(&image)) else {
                return Err("the image, block or column count is too large".into());
            };
            if nb.checked_mul(nl).is_none_or(|t| t > 1 << 28) {
                return Err("the column tensor is too large".into());
            }
            if xd[1] % nb != 0 || xd[2] != nl {
                return Err(format!("input {xd:?} must be [N, C·{nb}, {nl}]"));
            }
            let c = xd[1] / nb;
            let unravel = |mut i: usize, dims: &[usize]| -> Vec<usize> {
                let mut out = vec![0; dims.len()];
                for d in (0..dims.len()).rev() {
                    out[d] = i % dims[d];
                    i /= dims[d];
                }
                out
            };
            let mut idx = Vec::with_capacity(nb * nl);
            for b in 0..nb {
                let bk = unravel(b, &block);
                for l in 0..nl {
                    let lp = unravel(l, &nblk);
                    let mut flat = 0i64;
                    let mut inside = true;
                    for d in 0..sp {
                        let v = (lp[d] * strides[d]) as i64 - pads[d] + (bk[d] * dil[d]) as i64;
                        inside &= (0..image[d] as i64).contains(&v);
                        flat = flat * image[d] as i64 + v;
                    }
                    idx.push(if inside { flat } else { np as i64 });
                }
            }
            let n = xd[0];
            let i = cx.konst(ConstData::from_i64(vec![1, 1, nb * nl], &idx));
            let i = cx.prim(MirOp::Expand { shape: [n, c, nb * nl].iter().map(|&d| rlx_ir::Dim::Fixed(d as u64)).collect() }, &[i])?;
            let upd = cx.reshape_u(x, &[n, c, nb * nl])?;
            let z = cx.sc(x, 0.0);
            let zeros = cx.prim(MirOp::Expand { shape: [n, c, np + 1].iter().map(|&d| rlx_ir::Dim::Fixed(d as u64)).collect() }, &[z])?;
            let y = cx.prim(MirOp::ScatterElements { axis: 2, reduction: rlx_ir::ScatterRed::Add }, &[zeros, i, upd])?;
            let y = cx.prim(MirOp::Slice { axes: vec![2], starts: vec![0], ends: vec![np as i64], steps: vec![1] }, &[y])?;
            let mut shape = vec![n, c];
            shape.extend(&image);
            one(cx.reshape_u(y, &shape)?)
        }
        "MaxUnpool" => {
            // A scatter of X into zeros at the (flat) indices MaxPool produced, then padded at the end
            // to output_shape when given.
            let (x, ind) = (req(0)?, req(1)?);
            let xd = cx.fixed_dims(x, op)?;
            if xd.len() < 3 {
                return Err(format!("X must be [N,C,spatial…], got {xd:?}"));
            }
            let sp = xd.len() - 2;
            let kernel = a.ints("kernel_shape").ok_or("MaxUnpool needs kernel_shape")?;
            let strides = a.ints("strides").unwrap_or_else(|| vec![1; sp]);
            let pads = a.ints("pads").unwrap_or_else(|| vec![0; 2 * sp]);
            if kernel.len() != sp || strides.len() != sp || pads.len() != 2 * sp {
                return Err(format!("kernel_shape {kernel:?}, strides {strides:?}, pads {pads:?} do not fit {sp} spatial dims"));
            }
            let mut shape = xd[..2].to_vec();
            for d in 0..sp {
                let v = (xd[d + 2] as i128 - 1) * strides[d] as i128 - (pads[d] as i128 + pads[sp + d] as i128) + kernel[d] as i128;
                if !(0..=1 << 31).contains(&v) {
                    return Err(format!("MaxUnpool output dim {d} would be {v}"));
                }
                shape.push(v as usize);
            }
            let total: usize = shape.iter().product();
            let n: usize = xd.iter().product();
            let z = cx.sc(x, 0.0);
            let zeros = cx.prim(MirOp::Expand { shape: vec![rlx_ir::Dim::Fixed(total as u64)] }, &[z])?;
            let xf = cx.reshape_u(x, &[n])?;
            let idx = cx.reshape_u(ind, &[n])?;
            let y = cx.prim(MirOp::ScatterElements { axis: 0, reduction: rlx_ir::ScatterRed::None }, &[zeros, idx, xf])?;
            let y = cx.reshape_u(y, &shape)?;
            match nd.inp(2) {
                Some(os) => {
                    let want = cx.const_ints(os, "MaxUnpool output_shape")?;
                    if want.len() != shape.len() || want.iter().zip(&shape).any(|(&w, &s)| w < s as i64) {
                        return Err(format!("output_shape {want:?} is smaller than the unpooled {shape:?}"));
                    }
                    let mut p = vec![0i64; 2 * shape.len()];
                    for (d, (&w, &s)) in want.iter().zip(&shape).enumerate() {
                        p[shape.len() + d] = w - s as i64;
                    }
                    one(cx.prim(MirOp::Pad { pads: p, mode: rlx_ir::PadMode::Constant, value: 0.0 }, &[y])?)
                }
                None => one(y),
            }
        }
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
                if let Some(o) = &out_shape {
                    if o.len() != sp {
                        return Err(format!("output_shape {o:?} does not fit {sp} spatial dims"));
                    }
                }
                for i in 0..sp {
                    // In i128: every term is a model size up to 2^64, so no step overflows.
                    let w = |v: usize| v as i128;
                    let want = match &out_shape {
                        Some(o) => i128::from(o[i]),
                        None => w(xd[i + 2]) * w(strides[i]),
                    };
                    if xd[i + 2] == 0 || k[i] == 0 {
                        return Err(format!("input {xd:?} and weight {wd:?}: spatial axis {i} is empty"));
                    }
                    let full = w(strides[i]) * (w(xd[i + 2]) - 1) + w(opad[i]) + (w(k[i]) - 1) * w(dil[i]) + 1;
                    let mut total = full - want;
                    if total < 0 {
                        opad[i] = usize::try_from(w(opad[i]) - total).map_err(|_| format!("output_shape {want} on spatial axis {i} is out of range"))?;
                        total = 0;
                    }
                    let t = usize::try_from(total).map_err(|_| format!("output_shape {want} on spatial axis {i} is out of range"))?;
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
                // The kernel's element count as f64 (a product past 2^64 only loses precision, never panics).
                let s = cx.mul_sc(avg, k.iter().map(|&n| n as f64).product::<f64>())?;
                let ie = cx.sc(x, 1.0 / p);
                return one(cx.bin(BinaryOp::Pow, s, ie)?);
            }
            let kind = if op == "MaxPool" { PoolKind::Max } else { PoolKind::Avg };
            if k[..] == xd[2..] && pads.iter().all(|&p| p == 0) && dil.iter().all(|&d| d == 1) {
                // One window over the whole input (ResNet-50's and Inception's 7×7 average pool over 7×7):
                // the global pool, whose reduction over one image plane is a flat vector loop (a window
                // kernel's nested 7 × 7 loops were unrolled and vectorized over the channels by gathers).
                let o = if kind == PoolKind::Max { ReduceOp::Max } else { ReduceOp::Mean };
                return one(cx.reduce(o, x, (2..2 + sp).collect(), true)?);
            }
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
            if d.len() < 2 {
                return Err(format!("LRN input {d:?} must be [N,C,…]"));
            }
            let c = d[1];
            let rest = d[2..].iter().try_fold(1usize, |a, &n| a.checked_mul(n)).ok_or_else(|| format!("LRN input {d:?}: element count overflows"))?;
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
                if s[i] == 0 || k[i] == 0 {
                    return Err(format!("auto_pad {ap}: kernel {k:?} and strides {s:?} must be at least 1"));
                }
                let out = inp[i].div_ceil(s[i]);
                // (out-1)*stride + (k-1)*dilation + 1, checked: the sizes are the model's word.
                let need = out.saturating_sub(1)
                    .checked_mul(s[i])
                    .zip((k[i] - 1).checked_mul(d[i]))
                    .and_then(|(a, b)| a.checked_add(b))
                    .and_then(|n| n.checked_add(1))
                    .ok_or_else(|| format!("auto_pad {ap}: kernel {} with stride {} and dilation {} on an input of {} overflows", k[i], s[i], d[i], inp[i]))?;
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
