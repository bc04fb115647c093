//! GridSample (2-D and N-D): the ONNX reference's formulation as tensor arithmetic. Per spatial axis the
//! grid coordinate is unnormalized, rounded (nearest), clamped or reflected into range (border,
//! reflection), and split into taps (index, weight) — 1 for nearest, 2 linear, 4 cubic (Keys, a = -0.75);
//! every tap's index is mapped by the padding mode (zeros: out of range weighs 0). The output is
//! Σ over tap combinations of gather_elements(X, flat index) · Π weights. Coordinates are f32 (as the
//! reference computes them). AffineGrid: theta [N, nd, nd+1] times the constant homogeneous grid of
//! `size` (x fastest, then y, z, then 1), as GridSample reads it.
//!
//! The sampler — per-axis taps (index, weight) and `tap_terms`, the gathers of their combinations — is
//! shared with RoiAlign (`roi_align.rs`) and DeformConv (`deform_conv.rs`).

use super::{one, Node, R};
use crate::onnx::Ctx;
use rlx_ir::{BinaryOp as B, ConstData, DType, Dim, MirOp, UnaryOp as U, ValueId};

pub(super) const OPS: &[&str] = &["GridSample", "AffineGrid"];

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Mode {
    Nearest,
    Linear,
    Cubic,
}
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Pad {
    Zeros,
    Border,
    Reflection,
}

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    if nd.op == "AffineGrid" {
        return affine_grid(cx, nd);
    }
    let (x, grid) = (nd.req(0)?, nd.req(1)?);
    let mode = match nd.a.s("mode").as_deref().unwrap_or("linear") {
        "nearest" => Mode::Nearest,
        "linear" | "bilinear" => Mode::Linear,
        "cubic" | "bicubic" => Mode::Cubic,
        m => return Err(format!("GridSample: unknown mode '{m}'")),
    };
    let pad = match nd.a.s("padding_mode").as_deref().unwrap_or("zeros") {
        "zeros" => Pad::Zeros,
        "border" => Pad::Border,
        "reflection" => Pad::Reflection,
        m => return Err(format!("GridSample: unknown padding_mode '{m}'")),
    };
    let align = nd.a.i("align_corners", 0) != 0;
    let xd = cx.fixed_dims(x, "GridSample input")?;
    let gd = cx.fixed_dims(grid, "GridSample grid")?;
    let nsp = xd.len().checked_sub(2).filter(|&n| n >= 1).ok_or("GridSample: X needs rank 3 or more")?;
    if gd.len() != nsp + 2 || gd[0] != xd[0] || gd[nsp + 1] != nsp {
        return Err(format!("GridSample: grid shape {gd:?} does not match X shape {xd:?} (want [N, out…, {nsp}])"));
    }
    if !cx.dtype(x).is_float() {
        return Err(format!("unsupported: GridSample of {}", cx.dtype(x)));
    }
    let (n, c) = (xd[0], xd[1]);
    let sp = &xd[2..];
    let p: usize = gd[1..=nsp].iter().product();
    let q: usize = sp.iter().product();
    let g = cx.cast(grid, DType::F32)?;
    // Per spatial axis i: its taps as ([N,1,P] i64 index, [N,1,P] f32 weight).
    let mut taps: Vec<Vec<(ValueId, ValueId)>> = Vec::new();
    for (i, &d) in sp.iter().enumerate() {
        let comp = cx.slice_axis(g, nsp + 1, nsp - 1 - i, nsp - i)?;
        let comp = cx.reshape_u(comp, &[n, 1, p])?;
        taps.push(axis_taps(cx, comp, d, align, mode, pad)?);
    }
    let xf = cx.reshape_u(x, &[n, c, q])?;
    let terms = tap_terms(cx, xf, sp, &taps, c)?;
    let acc = combine(cx, &terms, B::Add)?;
    let mut out = vec![n, c];
    out.extend_from_slice(&gd[1..=nsp]);
    let y = cx.reshape_u(acc, &out)?;
    one(y)
}

/// The sampler's terms combined elementwise by `op` in order (a sum; RoiAlign's max mode takes their max).
pub(super) fn combine(cx: &mut Ctx, terms: &[ValueId], op: B) -> Result<ValueId, String> {
    let (&first, rest) = terms.split_first().ok_or("sampler: no taps")?;
    rest.iter().try_fold(first, |a, &t| cx.bin(op, a, t))
}

/// The sampler's terms: per combination of one tap of each spatial axis, gather_elements(xf, flat index)
/// · Π weights, each [N, C, P]. `xf` is X as [N, C, Π sp]; `taps[i]` are axis i's (i64 [N,1,P] index,
/// f32 [N,1,P] weight) pairs. GridSample sums the terms; RoiAlign sums them or takes their max.
pub(super) fn tap_terms(cx: &mut Ctx, xf: ValueId, sp: &[usize], taps: &[Vec<(ValueId, ValueId)>], c: usize) -> Result<Vec<ValueId>, String> {
    let nsp = sp.len();
    let dims = cx.dims(taps[0][0].0);
    let (n, p) = (dims[0].fixed().unwrap_or(1), dims[2].fixed().unwrap_or(1));
    let strides: Vec<usize> = (0..nsp).map(|i| sp[i + 1..].iter().product()).collect();
    let total: usize = taps.iter().map(|t| t.len()).product();
    let mut terms = Vec::with_capacity(total);
    for combo in 0..total {
        let (mut idx, mut w): (Option<ValueId>, Option<ValueId>) = (None, None);
        let mut rest = combo;
        for i in (0..nsp).rev() {
            let (ti, tw) = taps[i][rest % taps[i].len()];
            rest /= taps[i].len();
            let s = cx.scalar(DType::I64, strides[i] as f64);
            let term = cx.bin(B::Mul, ti, s)?;
            idx = Some(match idx {
                Some(a) => cx.bin(B::Add, a, term)?,
                None => term,
            });
            w = Some(match w {
                Some(a) => cx.bin(B::Mul, a, tw)?,
                None => tw,
            });
        }
        let (idx, w) = (idx.ok_or("sampler: no spatial axes")?, w.ok_or("sampler: no spatial axes")?);
        let ie = cx.prim(MirOp::Expand { shape: vec![Dim::Fixed(n), Dim::Fixed(c as u64), Dim::Fixed(p)] }, &[idx])?;
        let v = cx.prim(MirOp::GatherElements { axis: 2 }, &[xf, ie])?;
        let w = cx.cast(w, cx.dtype(xf))?;
        terms.push(cx.bin(B::Mul, v, w)?);
    }
    Ok(terms)
}

/// Reflects `x` into [lo, hi] by the nearer border, repeatedly (the reference's `_gs_reflect`).
fn reflect(cx: &mut Ctx, x: ValueId, lo: f64, hi: f64) -> Result<ValueId, String> {
    let rng = hi - lo;
    if rng <= 0.0 {
        let l = cx.scalar(DType::F32, lo);
        let z = cx.mul_sc(x, 0.0)?;
        return cx.bin(B::Add, z, l);
    }
    let (l, h) = (cx.scalar(DType::F32, lo), cx.scalar(DType::F32, hi));
    // One side: dx ≥ 0 past the border `from`; even wraps land at from ∓ r, odd at the other border ± r.
    let side = |cx: &mut Ctx, dx: ValueId, even_base: ValueId, even_sign: f64| -> Result<ValueId, String> {
        let k = cx.mul_sc(dx, 1.0 / rng)?;
        let k = cx.un(U::Floor, k)?;
        let kr = cx.mul_sc(k, rng)?;
        let r = cx.bin(B::Sub, dx, kr)?;
        let half = cx.mul_sc(k, 0.5)?;
        let hf = cx.un(U::Floor, half)?;
        let hf2 = cx.mul_sc(hf, 2.0)?;
        let par = cx.bin(B::Sub, k, hf2)?;
        let zero = cx.scalar(DType::F32, 0.0);
        let even = cx.bin(B::Eq, par, zero)?;
        let rs = cx.mul_sc(r, even_sign)?;
        let e = cx.bin(B::Add, even_base, rs)?;
        let other = if even_base == l { h } else { l };
        let rn = cx.mul_sc(r, -even_sign)?;
        let o = cx.bin(B::Add, other, rn)?;
        cx.prim(MirOp::Where, &[even, e, o])
    };
    let dlo = cx.bin(B::Sub, l, x)?;
    let below = side(cx, dlo, l, 1.0)?;
    let dhi = cx.bin(B::Sub, x, h)?;
    let above = side(cx, dhi, h, -1.0)?;
    let is_lo = cx.bin(B::Lt, x, l)?;
    let is_hi = cx.bin(B::Gt, x, h)?;
    let t = cx.prim(MirOp::Where, &[is_hi, above, x])?;
    cx.prim(MirOp::Where, &[is_lo, below, t])
}

pub(super) fn clamp(cx: &mut Ctx, x: ValueId, lo: f64, hi: f64) -> Result<ValueId, String> {
    let (l, h) = (cx.sc(x, lo), cx.sc(x, hi));
    let a = cx.bin(B::Max, x, l)?;
    cx.bin(B::Min, a, h)
}

/// The taps of one spatial axis of size `d`: (i64 index mapped by the padding mode, f32 weight).
fn axis_taps(cx: &mut Ctx, nx: ValueId, d: usize, align: bool, mode: Mode, pad: Pad) -> Result<Vec<(ValueId, ValueId)>, String> {
    let df = d as f64;
    // Unnormalize: align ? (n+1)/2·(d-1) : ((n+1)·d - 1)/2.
    let n1 = cx.add_sc(nx, 1.0)?;
    let x = if align { cx.mul_sc(n1, (df - 1.0) / 2.0)? } else {
        let t = cx.mul_sc(n1, df)?;
        let t = cx.add_sc(t, -1.0)?;
        cx.mul_sc(t, 0.5)?
    };
    pixel_taps(cx, x, d, align, mode, pad)
}

/// The taps of pixel coordinates `x` on an axis of size `d` (as `axis_taps`, after unnormalizing).
pub(super) fn pixel_taps(cx: &mut Ctx, mut x: ValueId, d: usize, align: bool, mode: Mode, pad: Pad) -> Result<Vec<(ValueId, ValueId)>, String> {
    let df = d as f64;
    if mode == Mode::Nearest {
        x = cx.un(U::Round, x)?;
    }
    let (lo, hi) = if align { (0.0, df - 1.0) } else { (-0.5, df - 0.5) };
    x = match pad {
        Pad::Zeros => x,
        // Only out-of-[lo, hi] values move; clamping to [0, d-1] leaves the in-range ones alone
        // except those in [lo, 0) and (d-1, hi], which the reference keeps.
        Pad::Border => {
            let c = clamp(cx, x, 0.0, df - 1.0)?;
            let (l, h) = (cx.sc(x, lo), cx.sc(x, hi));
            let out_lo = cx.bin(B::Lt, x, l)?;
            let out_hi = cx.bin(B::Gt, x, h)?;
            let out = cx.bin(B::Or, out_lo, out_hi)?;
            cx.prim(MirOp::Where, &[out, c, x])?
        }
        Pad::Reflection => reflect(cx, x, lo, hi)?,
    };
    let one_f = cx.scalar(DType::F32, 1.0);
    let (base, weights): (ValueId, Vec<ValueId>) = match mode {
        // The reference truncates toward zero (astype int32).
        Mode::Nearest => {
            let t = cx.cast(x, DType::I64)?;
            (t, vec![one_f])
        }
        Mode::Linear => {
            let f = cx.un(U::Floor, x)?;
            let fr = cx.bin(B::Sub, x, f)?;
            let w0 = cx.bin(B::Sub, one_f, fr)?;
            (cx.cast(f, DType::I64)?, vec![w0, fr])
        }
        Mode::Cubic => {
            let f = cx.un(U::Floor, x)?;
            let t = cx.bin(B::Sub, x, f)?;
            let b = cx.cast(f, DType::I64)?;
            let m1 = cx.scalar(DType::I64, -1.0);
            (cx.bin(B::Add, b, m1)?, cubic(cx, t)?)
        }
    };
    let mut out = Vec::new();
    for (k, w) in weights.into_iter().enumerate() {
        let off = cx.scalar(DType::I64, k as f64);
        let i = cx.bin(B::Add, base, off)?;
        out.push(map_index(cx, i, w, d, lo, hi, pad)?);
    }
    Ok(out)
}

/// A tap's index inside [0, d) by the padding mode; zeros: index 0 and weight 0 when outside.
fn map_index(cx: &mut Ctx, i: ValueId, w: ValueId, d: usize, lo: f64, hi: f64, pad: Pad) -> Result<(ValueId, ValueId), String> {
    let last = d as f64 - 1.0;
    match pad {
        Pad::Zeros => {
            let (z, l) = (cx.sc(i, 0.0), cx.sc(i, last));
            let ge = cx.bin(B::Ge, i, z)?;
            let le = cx.bin(B::Le, i, l)?;
            let ok = cx.bin(B::And, ge, le)?;
            let wz = cx.scalar(DType::F32, 0.0);
            let okw = cx.prim(MirOp::Where, &[ok, w, wz])?;
            let ic = clamp(cx, i, 0.0, last)?;
            Ok((ic, okw))
        }
        Pad::Border => Ok((clamp(cx, i, 0.0, last)?, w)),
        Pad::Reflection => {
            let f = cx.cast(i, DType::F32)?;
            let r = reflect(cx, f, lo, hi)?;
            let t = cx.cast(r, DType::I64)?;
            // Float roundoff can never leave [0, d-1] after truncation, but clamp for safety of the gather.
            Ok((clamp(cx, t, 0.0, last)?, w))
        }
    }
}

/// Keys cubic coefficients (a = -0.75) of the fractional offset t ∈ [0, 1): taps at -1, 0, 1, 2.
fn cubic(cx: &mut Ctx, t: ValueId) -> Result<Vec<ValueId>, String> {
    let a = -0.75;
    // Outer taps (distance s ∈ [1, 2]): ((a·s - 5a)·s + 8a)·s - 4a; inner (s ∈ [0, 1]): ((a+2)·s - (a+3))·s·s + 1.
    let outer = |cx: &mut Ctx, s: ValueId| -> Result<ValueId, String> {
        let u = cx.mul_sc(s, a)?;
        let u = cx.add_sc(u, -5.0 * a)?;
        let u = cx.bin(B::Mul, u, s)?;
        let u = cx.add_sc(u, 8.0 * a)?;
        let u = cx.bin(B::Mul, u, s)?;
        cx.add_sc(u, -4.0 * a)
    };
    let inner = |cx: &mut Ctx, s: ValueId| -> Result<ValueId, String> {
        let u = cx.mul_sc(s, a + 2.0)?;
        let u = cx.add_sc(u, -(a + 3.0))?;
        let u = cx.bin(B::Mul, u, s)?;
        let u = cx.bin(B::Mul, u, s)?;
        cx.add_sc(u, 1.0)
    };
    let s0 = cx.add_sc(t, 1.0)?;
    let nt = cx.mul_sc(t, -1.0)?;
    let s2 = cx.add_sc(nt, 1.0)?;
    let s3 = cx.add_sc(nt, 2.0)?;
    Ok(vec![outer(cx, s0)?, inner(cx, t)?, inner(cx, s2)?, outer(cx, s3)?])
}

fn affine_grid(cx: &mut Ctx, nd: &Node) -> R {
    let theta = nd.req(0)?;
    let size = cx.const_ints(nd.req(1)?, "AffineGrid size")?;
    let align = nd.a.i("align_corners", 0) != 0;
    let td = cx.fixed_dims(theta, "AffineGrid theta")?;
    let nsp = size.len().checked_sub(2).filter(|n| *n == 2 || *n == 3).ok_or("AffineGrid: size must be [N, C, H, W] or [N, C, D, H, W]")?;
    if td != [size[0] as usize, nsp, nsp + 1] || size.iter().any(|&d| d < 1) {
        return Err(format!("AffineGrid: theta {td:?} does not fit size {size:?}"));
    }
    let sp: Vec<usize> = size[2..].iter().map(|&d| d as usize).collect();
    let p: usize = sp.iter().product();
    // Coordinate k of each axis of length d: -1 + k·2/(d-1) (align) or -1 + (2k+1)/d.
    let coord = |k: usize, d: usize| if align { if d == 1 { -1.0 } else { -1.0 + 2.0 * k as f64 / (d - 1) as f64 } } else { -1.0 + (2 * k + 1) as f64 / d as f64 };
    // Rows [x, y, (z), 1] of the homogeneous grid, one column per output position (row-major over sp).
    let mut h = vec![0f64; (nsp + 1) * p];
    for pos in 0..p {
        let mut rest = pos;
        for a in (0..nsp).rev() {
            let k = rest % sp[a];
            rest /= sp[a];
            h[(nsp - 1 - a) * p + pos] = coord(k, sp[a]);
        }
        h[nsp * p + pos] = 1.0;
    }
    let dt = cx.dtype(theta);
    let hc = ConstData::from_f64s(dt, vec![nsp + 1, p], &h);
    let hc = cx.konst(hc);
    let g = cx.prim(MirOp::MatMul, &[theta, hc])?; // [N, nsp, P]
    let g = cx.transpose(g, vec![0, 2, 1])?;
    let mut out = vec![size[0] as usize];
    out.extend(&sp);
    out.push(nsp);
    Ok(vec![cx.reshape_u(g, &out)?])
}
