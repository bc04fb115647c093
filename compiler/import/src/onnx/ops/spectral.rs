//! DFT and STFT as MIR primitives: the signal axis moved last and multiplied by constant cos/sin matrices
//! (computed in f64 at import, stored in the input's dtype), real and imaginary parts apart —
//! forward (full or `onesided`), inverse, and the inverse of a one-sided spectrum (irfft: the
//! Hermitian half counted twice). `dft_length` pads or truncates the signal, as numpy's `n`.

use super::build::norm_axis;
use super::{one, Node, R};
use crate::onnx::Ctx;
use rlx_ir::{BinaryOp, ConstData, MirOp, ValueId};
use std::f64::consts::PI;

/// The ONNX op types this family translates.
pub(super) const OPS: &[&str] = &["DFT", "STFT"];

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    if nd.op == "STFT" {
        return stft(cx, nd);
    }
    let a = &nd.a;
    let x = nd.req(0)?;
    let dt = cx.dtype(x);
    if !dt.is_float() {
        return Err(format!("DFT of {dt} input"));
    }
    let xd = cx.fixed_dims(x, "DFT input")?;
    let r = xd.len();
    if r < 2 || !(xd[r - 1] == 1 || xd[r - 1] == 2) {
        return Err(format!("input must end in a dim of 1 (real) or 2 (complex), got {xd:?}"));
    }
    let axis = if nd.opset >= 20 {
        match nd.inp(2) {
            Some(v) => *cx.const_ints(v, "DFT axis")?.first().ok_or("empty axis")?,
            None => -2,
        }
    } else {
        a.i("axis", 1)
    };
    let axis = norm_axis(axis, r)?;
    if axis == r - 1 {
        return Err("axis must not be the last (complex) dim".into());
    }
    let (inverse, onesided) = (a.i("inverse", 0) != 0, a.i("onesided", 0) != 0);
    let len = xd[axis];
    let n = match nd.inp(1) {
        Some(v) => *cx.const_ints(v, "DFT dft_length")?.first().ok_or("empty dft_length")?,
        None if inverse && onesided => 2 * (len as i64 - 1),
        None => len as i64,
    };
    if !(1..=1 << 16).contains(&n) {
        return Err(format!("dft_length {n} is out of range 1..=65536"));
    }
    one(dft(cx, x, axis, n as usize, inverse, onesided)?)
}

/// STFT: frames gathered by a constant index (frame_step apart), weighted by the window, then a
/// DFT along the frame (one-sided by default).
fn stft(cx: &mut Ctx, nd: &Node) -> R {
    let x = nd.req(0)?;
    if !cx.dtype(x).is_float() {
        return Err(format!("STFT of {} input", cx.dtype(x)));
    }
    let xd = cx.fixed_dims(x, "STFT signal")?;
    if xd.len() != 3 || !(xd[2] == 1 || xd[2] == 2) {
        return Err(format!("signal must be [batch, length, 1 or 2], got {xd:?}"));
    }
    let step = match cx.const_ints(nd.req(1)?, "STFT frame_step")?.as_slice() {
        [s] if *s > 0 => *s as usize,
        v => return Err(format!("frame_step must be one positive value, got {v:?}")),
    };
    let window = nd.inp(2);
    let flen = match nd.inp(3) {
        Some(v) => match cx.const_ints(v, "STFT frame_length")?.as_slice() {
            [f] if *f > 0 => *f as usize,
            v => return Err(format!("frame_length must be one positive value, got {v:?}")),
        },
        None => match window {
            Some(w) => *cx.fixed_dims(w, "STFT window")?.first().ok_or("the window must be 1-D")?,
            None => xd[1],
        },
    };
    if flen > xd[1] || flen > 1 << 16 {
        return Err(format!("frame_length {flen} is longer than the signal ({}) or 65536", xd[1]));
    }
    let frames = 1 + (xd[1] - flen) / step;
    let idx: Vec<i64> = (0..frames).flat_map(|f| (0..flen).map(move |j| (f * step + j) as i64)).collect();
    let i = cx.konst(ConstData::from_i64(vec![frames, flen], &idx));
    let mut g = cx.prim(MirOp::Gather { axis: 1 }, &[x, i])?; // [batch, frames, flen, c]
    if let Some(w) = window {
        if cx.fixed_dims(w, "STFT window")? != [flen] {
            return Err(format!("window {} must be [{flen}]", cx.ty(w)));
        }
        let w = cx.reshape_u(w, &[1, 1, flen, 1])?;
        g = cx.bin(BinaryOp::Mul, g, w)?;
    }
    one(dft(cx, g, 2, flen, false, nd.a.i("onesided", 1) != 0)?)
}

/// The DFT of `x` (last dim: 1 real or 2 complex parts) along `axis` with length `n`.
fn dft(cx: &mut Ctx, x: ValueId, axis: usize, n: usize, inverse: bool, onesided: bool) -> Result<ValueId, String> {
    let dt = cx.dtype(x);
    let xd = cx.fixed_dims(x, "DFT input")?;
    let r = xd.len();
    let len = xd[axis];
    // Samples used (the rest is zero padding), and outputs.
    let used = if inverse && onesided { len.min(n / 2 + 1) } else { len.min(n) };
    let k_out = if !inverse && onesided { n / 2 + 1 } else { n };
    // The signal axis last: [others…, len] per part.
    let mut perm: Vec<usize> = (0..r - 1).filter(|&d| d != axis).collect();
    perm.push(axis);
    let part = |cx: &mut Ctx, i: usize| -> Result<ValueId, String> {
        let p = cx.prim(MirOp::Slice { axes: vec![r - 1], starts: vec![i as i64], ends: vec![i as i64 + 1], steps: vec![1] }, &[x])?;
        let p = cx.reshape_u(p, &xd[..r - 1])?;
        let p = cx.transpose(p, perm.clone())?;
        if used < len {
            cx.prim(MirOp::Slice { axes: vec![r - 2], starts: vec![0], ends: vec![used as i64], steps: vec![1] }, &[p])
        } else {
            Ok(p)
        }
    };
    let re = part(cx, 0)?;
    let im = if xd[r - 1] == 2 { Some(part(cx, 1)?) } else { None };
    // out_re = re·M0 + im·M1, out_im = re·M2 + im·M3 (`coef`).
    let mat = |which: usize| -> ConstData {
        let v: Vec<f64> = (0..used).flat_map(|j| (0..k_out).map(move |k| coef(inverse, onesided, n, which, j, k))).collect();
        ConstData::from_f64s(dt, vec![used, k_out], &v)
    };
    let sum = |cx: &mut Ctx, ma: usize, mb: usize| -> Result<ValueId, String> {
        let c = cx.konst(mat(ma));
        let s = cx.prim(MirOp::MatMul, &[re, c])?;
        match im {
            Some(i) => {
                let c = cx.konst(mat(mb));
                let t = cx.prim(MirOp::MatMul, &[i, c])?;
                cx.bin(BinaryOp::Add, s, t)
            }
            None => Ok(s),
        }
    };
    let out_re = sum(cx, 0, 1)?;
    let parts = if inverse && onesided { vec![out_re] } else { vec![out_re, sum(cx, 2, 3)?] };
    // Back to the input's layout, the parts along a new last dim.
    let mut inv = vec![0; r - 1];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    let mut outs = Vec::new();
    for p in parts {
        let p = cx.transpose(p, inv.clone())?;
        let r1 = cx.rank(p);
        outs.push(cx.unsqueeze(p, &[r1])?);
    }
    if outs.len() == 1 {
        Ok(outs[0])
    } else {
        cx.prim(MirOp::Concat { axis: r - 1 }, &outs)
    }
}

/// Entry (j, k) of matrix `which` (0: re→re, 1: im→re, 2: re→im, 3: im→im), θ = 2πjk/n.
fn coef(inverse: bool, onesided: bool, n: usize, which: usize, j: usize, k: usize) -> f64 {
    let t = 2.0 * PI * ((j * k) % n) as f64 / n as f64;
    let (c, s) = (t.cos(), t.sin());
    if !inverse {
        return [c, s, -s, c][which];
    }
    let nf = n as f64;
    if !onesided {
        return [c / nf, -s / nf, s / nf, c / nf][which];
    }
    // irfft: frequency j of the one-sided half stands for j and n − j, except DC and Nyquist.
    let w = if j == 0 || (n % 2 == 0 && j == n / 2) { 1.0 } else { 2.0 };
    [w * c / nf, -w * s / nf, 0.0, 0.0][which]
}
