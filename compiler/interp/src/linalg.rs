//! MatMul, convolution, transposed convolution, pooling.

use crate::tensor::{bcast_strides, numel, walk, Buf, T};
use rlx_ir::mir::pool_out;
use rlx_ir::{broadcast_fixed, PoolKind};

pub fn matmul(a: &T, b: &T) -> Result<T, String> {
    if a.dtype != b.dtype {
        return Err(format!("operand dtypes differ ({} vs {})", a.dtype, b.dtype));
    }
    if a.shape.is_empty() || b.shape.is_empty() {
        return Err("operands must have rank >= 1".into());
    }
    let (mut ash, mut bsh) = (a.shape.clone(), b.shape.clone());
    let (a1, b1) = (ash.len() == 1, bsh.len() == 1);
    if a1 {
        ash.insert(0, 1);
    }
    if b1 {
        bsh.push(1);
    }
    let (m, k) = (ash[ash.len() - 2], ash[ash.len() - 1]);
    let (k2, n) = (bsh[bsh.len() - 2], bsh[bsh.len() - 1]);
    if k != k2 {
        return Err(format!("inner dims differ ({:?} x {:?})", a.shape, b.shape));
    }
    let (abatch, bbatch) = (&ash[..ash.len() - 2], &bsh[..bsh.len() - 2]);
    let batch = broadcast_fixed(abatch, bbatch)?;
    // Offset (in matrices) of each batch's operand.
    let aoff = walk(&batch, &bcast_strides(abatch, &batch), 0);
    let boff = walk(&batch, &bcast_strides(bbatch, &batch), 0);
    let nb = numel(&batch);
    let mut shape = batch.clone();
    if !a1 {
        shape.push(m);
    }
    if !b1 {
        shape.push(n);
    }
    let dt = a.dtype;
    if dt.is_float() {
        let (af, bf) = (a.to_f64(), b.to_f64());
        let mut acc = vec![0.0f64; nb * m * n];
        for bi in 0..nb {
            let ab = &af[aoff[bi] * m * k..][..m * k];
            let bb = &bf[boff[bi] * k * n..][..k * n];
            let ob = &mut acc[bi * m * n..][..m * n];
            for i in 0..m {
                let row = &mut ob[i * n..][..n];
                for kk in 0..k {
                    let aik = ab[i * k + kk];
                    let brow = &bb[kk * n..][..n];
                    for (o, &bv) in row.iter_mut().zip(brow) {
                        *o += aik * bv;
                    }
                }
            }
        }
        return Ok(T::from_f64_fn(dt, shape, |i| acc[i]));
    }
    let (Buf::I(av), Buf::I(bv)) = (&a.data, &b.data) else { return Err("integer storage expected".into()) };
    let mut acc = vec![0i64; nb * m * n];
    for bi in 0..nb {
        let ab = &av[aoff[bi] * m * k..][..m * k];
        let bb = &bv[boff[bi] * k * n..][..k * n];
        let ob = &mut acc[bi * m * n..][..m * n];
        for i in 0..m {
            let row = &mut ob[i * n..][..n];
            for kk in 0..k {
                let aik = ab[i * k + kk];
                for (o, &v) in row.iter_mut().zip(&bb[kk * n..][..n]) {
                    *o = o.wrapping_add(aik.wrapping_mul(v));
                }
            }
        }
    }
    Ok(T::from_i64_fn(dt, shape, |i| acc[i]))
}

/// Every multi-index of `shape`, flattened (len = numel * rank).
fn all_indices(shape: &[usize]) -> Vec<usize> {
    let n = numel(shape);
    let mut out = Vec::with_capacity(n * shape.len());
    if n == 0 {
        return out;
    }
    let mut idx = vec![0usize; shape.len()];
    loop {
        out.extend_from_slice(&idx);
        if !crate::tensor::next_index(&mut idx, shape) {
            break;
        }
    }
    out
}

fn check_spatial(x: &T, w: &T, strides: &[usize], pads: &[usize], dilations: &[usize], groups: usize) -> Result<usize, String> {
    let r = x.shape.len();
    if r < 3 || w.shape.len() != r {
        return Err(format!("input {:?} and weight {:?} must both be [N,C,spatial...]", x.shape, w.shape));
    }
    let sp = r - 2;
    if strides.len() != sp || dilations.len() != sp || pads.len() != 2 * sp || groups == 0 {
        return Err(format!("strides/dilations need {sp} entries, pads {}, groups >= 1", 2 * sp));
    }
    if strides.contains(&0) || dilations.contains(&0) {
        return Err("strides and dilations must be >= 1".into());
    }
    Ok(sp)
}

fn bias_vals(bias: Option<&T>, m: usize) -> Result<Vec<f64>, String> {
    match bias {
        Some(b) if b.numel() != m => Err(format!("bias has {} elements, expected {m}", b.numel())),
        Some(b) => Ok(b.to_f64()),
        None => Ok(vec![0.0; m]),
    }
}

pub fn conv(x: &T, w: &T, bias: Option<&T>, strides: &[usize], pads: &[usize], dilations: &[usize], groups: usize) -> Result<T, String> {
    let sp = check_spatial(x, w, strides, pads, dilations, groups)?;
    let (nb, c) = (x.shape[0], x.shape[1]);
    let m = w.shape[0];
    let cg = w.shape[1];
    if cg * groups != c || !m.is_multiple_of(groups) {
        return Err(format!("weight {:?} with {groups} groups does not match {c} input channels", w.shape));
    }
    let mg = m / groups;
    let ins = &x.shape[2..];
    let ks = &w.shape[2..];
    let mut outs = Vec::with_capacity(sp);
    for d in 0..sp {
        if ks[d] == 0 {
            return Err("empty kernel".into());
        }
        outs.push(pool_out(ins[d] as u64, ks[d], strides[d], pads[d], pads[d + sp], dilations[d], false)? as usize);
    }
    let in_count = numel(ins);
    let k_count = numel(ks);
    let o_count = numel(&outs);
    let kidx = all_indices(ks);
    let oidx = all_indices(&outs);
    let xf = x.to_f64();
    let wf = w.to_f64();
    let bv = bias_vals(bias, m)?;
    let mut acc = vec![0.0f64; nb * m * o_count];
    // Input coordinate offset of each (output position, kernel position), or None in padding.
    let mut src: Vec<Option<usize>> = Vec::with_capacity(o_count * k_count);
    for op in 0..o_count {
        for kp in 0..k_count {
            let mut pos = 0usize;
            let mut ok = true;
            for d in 0..sp {
                let ic = (oidx[op * sp + d] * strides[d] + kidx[kp * sp + d] * dilations[d]) as i64 - pads[d] as i64;
                if ic < 0 || ic >= ins[d] as i64 {
                    ok = false;
                    break;
                }
                pos = pos * ins[d] + ic as usize;
            }
            src.push(ok.then_some(pos));
        }
    }
    for n in 0..nb {
        for mm in 0..m {
            let g = mm / mg;
            let out = &mut acc[(n * m + mm) * o_count..][..o_count];
            for (op, o) in out.iter_mut().enumerate() {
                let mut s = bv[mm];
                for ci in 0..cg {
                    let xb = &xf[(n * c + g * cg + ci) * in_count..][..in_count];
                    let wb = &wf[(mm * cg + ci) * k_count..][..k_count];
                    for (kp, &wv) in wb.iter().enumerate() {
                        if let Some(p) = src[op * k_count + kp] {
                            s += xb[p] * wv;
                        }
                    }
                }
                *o = s;
            }
        }
    }
    let mut shape = vec![nb, m];
    shape.extend_from_slice(&outs);
    Ok(T::from_f64_fn(x.dtype, shape, |i| acc[i]))
}

#[allow(clippy::too_many_arguments)]
pub fn conv_transpose(
    x: &T,
    w: &T,
    bias: Option<&T>,
    strides: &[usize],
    pads: &[usize],
    dilations: &[usize],
    groups: usize,
    output_padding: &[usize],
) -> Result<T, String> {
    let sp = check_spatial(x, w, strides, pads, dilations, groups)?;
    let (nb, c) = (x.shape[0], x.shape[1]);
    if w.shape[0] != c || !c.is_multiple_of(groups) {
        return Err(format!("weight {:?} does not match {c} input channels", w.shape));
    }
    let cg = c / groups;
    let mg = w.shape[1];
    let m = mg * groups;
    let ins = &x.shape[2..];
    let ks = &w.shape[2..];
    let mut outs = Vec::with_capacity(sp);
    for d in 0..sp {
        let op = output_padding.get(d).copied().unwrap_or(0) as i64;
        let o = strides[d] as i64 * (ins[d] as i64 - 1) + op + (ks[d] as i64 - 1) * dilations[d] as i64 + 1
            - pads[d] as i64
            - pads[d + sp] as i64;
        if o <= 0 {
            return Err("empty output".into());
        }
        outs.push(o as usize);
    }
    let in_count = numel(ins);
    let k_count = numel(ks);
    let o_count = numel(&outs);
    let kidx = all_indices(ks);
    let iidx = all_indices(ins);
    let xf = x.to_f64();
    let wf = w.to_f64();
    let bv = bias_vals(bias, m)?;
    let mut acc = vec![0.0f64; nb * m * o_count];
    for n in 0..nb {
        for mm in 0..m {
            acc[(n * m + mm) * o_count..][..o_count].iter_mut().for_each(|o| *o = bv[mm]);
        }
    }
    // Output offset of each (input position, kernel position), or None when it falls outside.
    let mut dst: Vec<Option<usize>> = Vec::with_capacity(in_count * k_count);
    for ip in 0..in_count {
        for kp in 0..k_count {
            let mut pos = 0usize;
            let mut ok = true;
            for d in 0..sp {
                let oc = (iidx[ip * sp + d] * strides[d] + kidx[kp * sp + d] * dilations[d]) as i64 - pads[d] as i64;
                if oc < 0 || oc >= outs[d] as i64 {
                    ok = false;
                    break;
                }
                pos = pos * outs[d] + oc as usize;
            }
            dst.push(ok.then_some(pos));
        }
    }
    for n in 0..nb {
        for ch in 0..c {
            let g = ch / cg;
            let xb = &xf[(n * c + ch) * in_count..][..in_count];
            for mi in 0..mg {
                let mm = g * mg + mi;
                let wb = &wf[(ch * mg + mi) * k_count..][..k_count];
                let out = &mut acc[(n * m + mm) * o_count..][..o_count];
                for (ip, &xv) in xb.iter().enumerate() {
                    for (kp, &wv) in wb.iter().enumerate() {
                        if let Some(p) = dst[ip * k_count + kp] {
                            out[p] += xv * wv;
                        }
                    }
                }
            }
        }
    }
    let mut shape = vec![nb, m];
    shape.extend_from_slice(&outs);
    Ok(T::from_f64_fn(x.dtype, shape, |i| acc[i]))
}

#[allow(clippy::too_many_arguments)]
pub fn pool(
    kind: PoolKind,
    x: &T,
    kernel: &[usize],
    strides: &[usize],
    pads: &[usize],
    dilations: &[usize],
    ceil_mode: bool,
    count_include_pad: bool,
) -> Result<T, String> {
    let sp = kernel.len();
    let r = x.shape.len();
    if r != sp + 2 || strides.len() != sp || dilations.len() != sp || pads.len() != 2 * sp {
        return Err(format!("kernel rank {sp} does not fit input {:?}", x.shape));
    }
    if strides.contains(&0) || dilations.contains(&0) || kernel.contains(&0) {
        return Err("kernel, strides and dilations must be >= 1".into());
    }
    let ins = &x.shape[2..];
    let mut outs = Vec::with_capacity(sp);
    for d in 0..sp {
        outs.push(pool_out(ins[d] as u64, kernel[d], strides[d], pads[d], pads[d + sp], dilations[d], ceil_mode)? as usize);
    }
    let (in_count, k_count, o_count) = (numel(ins), numel(kernel), numel(&outs));
    let kidx = all_indices(kernel);
    let oidx = all_indices(&outs);
    let planes = x.shape[0] * x.shape[1];
    let xf = x.to_f64();
    let mut acc = vec![0.0f64; planes * o_count];
    let mut src: Vec<usize> = Vec::with_capacity(k_count);
    for op in 0..o_count {
        // In-bounds window positions, and how many positions lie inside the padded extent.
        src.clear();
        let mut in_padded = 0usize;
        for kp in 0..k_count {
            let mut pos = 0usize;
            let mut inside = true;
            let mut inside_pad = true;
            for d in 0..sp {
                let ic = (oidx[op * sp + d] * strides[d] + kidx[kp * sp + d] * dilations[d]) as i64 - pads[d] as i64;
                if ic < 0 || ic >= ins[d] as i64 {
                    inside = false;
                }
                if ic < -(pads[d] as i64) || ic >= (ins[d] + pads[d + sp]) as i64 {
                    inside_pad = false;
                }
                if inside {
                    pos = pos * ins[d] + ic as usize;
                }
            }
            if inside {
                src.push(pos);
            }
            if inside_pad {
                in_padded += 1;
            }
        }
        for p in 0..planes {
            let xb = &xf[p * in_count..][..in_count];
            acc[p * o_count + op] = match kind {
                PoolKind::Max => {
                    let mut best = f64::NEG_INFINITY;
                    for &s in &src {
                        let v = xb[s];
                        if v.is_nan() || v > best {
                            best = v;
                            if v.is_nan() {
                                break;
                            }
                        }
                    }
                    best
                }
                PoolKind::Avg => {
                    let sum: f64 = src.iter().map(|&s| xb[s]).sum();
                    let div = if count_include_pad { in_padded } else { src.len() };
                    sum / div as f64
                }
            };
        }
    }
    let mut shape = x.shape[..2].to_vec();
    shape.extend_from_slice(&outs);
    Ok(T::from_f64_fn(x.dtype, shape, |i| acc[i]))
}
