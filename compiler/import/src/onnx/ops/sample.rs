//! GridSample (2-D and N-D): the ONNX reference's formulation as tensor arithmetic. Per spatial axis the
//! grid coordinate is unnormalized, rounded (nearest), clamped or reflected into range (border,
//! reflection), and split into taps (index, weight) — 1 for nearest, 2 linear, 4 cubic (Keys, a = -0.75);
//! every tap's index is mapped by the padding mode (zeros: out of range weighs 0). The output is
//! Σ over tap combinations of gather_elements(X, flat index) · Π weights. Coordinates are f32 (as the
//! reference computes them). AffineGrid: theta [N, nd, nd+1] times the constant homogeneous grid of
//! `size` (x fastest, then y, z, then 1), as GridSample reads it.
//!
//! RoiAlign: each roi's image (`gather` of X by batch index) sampled by the same tap terms at the
//! bins' sample points, laid out [out_h, grid_h, out_w, grid_w] and reduced per bin (avg: Σ/count;
//! max: the reference's max over samples of the max of the four weighted taps). A sample outside
//! [-1, d] weighs 0; inside, the coordinate is clamped to [0, d-1] (the ONNX reference and ONNX Runtime).
//! `sampling_ratio` 0 makes the grid depend on each roi's size: the rois must then be constant, the
//! grid is the largest roi's and the samples a smaller roi does not have are masked out.
//!
//! DeformConv (2-D): per offset group, the input sampled bilinearly (zeros outside, pixel coordinates:
//! GridSample's linear taps with align_corners) at every kernel tap's offset position, times the
//! mask, is an im2col tensor [N, group, C/group·kh·kw, oh·ow]; a batched `matmul` with the weights
//! [1, group, M/group, C/group·kh·kw] (+ bias) is the convolution.

use super::{one, Node, R};
use crate::onnx::Ctx;
use rlx_ir::{BinaryOp as B, ConstData, DType, Dim, MirOp, ReduceOp, UnaryOp as U, ValueId};

pub(super) const OPS: &[&str] = &["GridSample", "AffineGrid", "RoiAlign", "DeformConv"];

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}
#[derive(Clone, Copy, PartialEq)]
enum Pad {
    Zeros,
    Border,
    Reflection,
}

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    match nd.op {
        "AffineGrid" => return affine_grid(cx, nd),
        "RoiAlign" => return roi_align(cx, nd),
        "DeformConv" => return deform_conv(cx, nd),
        _ => {}
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
    let mut acc: Option<ValueId> = None;
    for t in tap_terms(cx, xf, sp, &taps, c)? {
        acc = Some(match acc {
            Some(a) => cx.bin(B::Add, a, t)?,
            None => t,
        });
    }
    let mut out = vec![n, c];
    out.extend_from_slice(&gd[1..=nsp]);
    let y = cx.reshape_u(acc.ok_or("GridSample: no taps")?, &out)?;
    one(y)
}

/// The sampler's terms: per combination of one tap of each spatial axis, gather_elements(xf, flat index)
/// · Π weights, each [N, C, P]. `xf` is X as [N, C, Π sp]; `taps[i]` are axis i's (i64 [N,1,P] index,
/// f32 [N,1,P] weight) pairs. GridSample sums the terms; RoiAlign sums them or takes their max.
fn tap_terms(cx: &mut Ctx, xf: ValueId, sp: &[usize], taps: &[Vec<(ValueId, ValueId)>], c: usize) -> Result<Vec<ValueId>, String> {
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

fn clamp(cx: &mut Ctx, x: ValueId, lo: f64, hi: f64) -> Result<ValueId, String> {
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
fn pixel_taps(cx: &mut Ctx, mut x: ValueId, d: usize, align: bool, mode: Mode, pad: Pad) -> Result<Vec<(ValueId, ValueId)>, String> {
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

/// RoiAlign (opset 10/16/22): X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices [R] → [R, C, oh, ow].
fn roi_align(cx: &mut Ctx, nd: &Node) -> R {
    let (x, rois, bidx) = (nd.req(0)?, nd.req(1)?, nd.req(2)?);
    let max_mode = match nd.a.s("mode").as_deref().unwrap_or("avg") {
        "avg" => false,
        "max" => true,
        m => return Err(format!("RoiAlign: unknown mode '{m}' (avg or max)")),
    };
    // Opset 16 added the attribute with default half_pixel; opset 10 behaved as output_half_pixel.
    let default_ctm = if nd.opset >= 16 { "half_pixel" } else { "output_half_pixel" };
    let half_pixel = match nd.a.s("coordinate_transformation_mode").as_deref().unwrap_or(default_ctm) {
        "half_pixel" => true,
        "output_half_pixel" => false,
        m => return Err(format!("RoiAlign: unknown coordinate_transformation_mode '{m}'")),
    };
    let (oh, ow) = (nd.a.i("output_height", 1), nd.a.i("output_width", 1));
    let sr = nd.a.i("sampling_ratio", 0);
    let scale = nd.a.f("spatial_scale", 1.0);
    if oh < 1 || ow < 1 || sr < 0 {
        return Err(format!("RoiAlign: output_height {oh}, output_width {ow} must be >= 1 and sampling_ratio {sr} >= 0"));
    }
    let (oh, ow) = (oh as usize, ow as usize);
    let xd = cx.fixed_dims(x, "RoiAlign X")?;
    let rd = cx.fixed_dims(rois, "RoiAlign rois")?;
    let bd = cx.fixed_dims(bidx, "RoiAlign batch_indices")?;
    if xd.len() != 4 || rd.len() != 2 || rd[1] != 4 || bd != [rd[0]] {
        return Err(format!("RoiAlign: want X [N, C, H, W], rois [R, 4], batch_indices [R]; got {xd:?}, {rd:?}, {bd:?}"));
    }
    if !cx.dtype(x).is_float() {
        return Err(format!("unsupported: RoiAlign of {}", cx.dtype(x)));
    }
    let (c, h, w, r) = (xd[1], xd[2], xd[3], rd[0]);
    let off = if half_pixel { 0.5 } else { 0.0 };
    // Per roi sample grid (gh, gw): the attribute, or (sampling_ratio 0) ceil(roi size / output size) of
    // constant rois, computed in f32 as the reference does.
    let grids: Vec<(usize, usize)> = if sr > 0 {
        vec![(sr as usize, sr as usize); r]
    } else {
        let rv = cx.const_f64s(rois, "RoiAlign rois (sampling_ratio 0 sizes the sample grid by each roi, so the rois must be constant; or set sampling_ratio > 0)")?;
        (0..r)
            .map(|i| {
                let at = |k: usize| (rv[i * 4 + k] as f32) * scale as f32 - off as f32;
                let (mut rw, mut rh) = (at(2) - at(0), at(3) - at(1));
                if !half_pixel {
                    rw = rw.max(1.0);
                    rh = rh.max(1.0);
                }
                let g = |v: f32, o: usize| (v / o as f32).ceil().max(0.0) as usize;
                (g(rh, oh), g(rw, ow))
            })
            .collect()
    };
    let gh = grids.iter().map(|g| g.0).max().unwrap_or(1).max(1);
    let gw = grids.iter().map(|g| g.1).max().unwrap_or(1).max(1);
    let uniform = grids.iter().all(|&g| g == (gh, gw));
    let p = oh * gh * ow * gw;
    // Per sample p = ((ph·gh + iy)·ow + pw)·gw + ix: its position in bin units, kh = ph + (iy + ½)/gh_r
    // (kw likewise), whether roi r has it, and (avg) its weight 1/count_r.
    let rr = if uniform { 1 } else { r };
    let (mut kh, mut kw, mut has, mut wt) = (vec![0f64; rr * p], vec![0f64; rr * p], vec![0f64; rr * p], vec![0f64; rr * p]);
    for ri in 0..rr {
        let (g_h, g_w) = grids[ri];
        let count = (g_h * g_w).max(1) as f64;
        for ph in 0..oh {
            for iy in 0..gh {
                for pw in 0..ow {
                    for ix in 0..gw {
                        let k = ri * p + ((ph * gh + iy) * ow + pw) * gw + ix;
                        kh[k] = ph as f64 + (iy as f64 + 0.5) / g_h.max(1) as f64;
                        kw[k] = pw as f64 + (ix as f64 + 0.5) / g_w.max(1) as f64;
                        let inside = iy < g_h && ix < g_w;
                        has[k] = inside as u8 as f64;
                        wt[k] = if inside { 1.0 / count } else { 0.0 };
                    }
                }
            }
        }
    }
    let kconst = |cx: &mut Ctx, dt: DType, v: &[f64]| cx.konst(ConstData::from_f64s(dt, vec![rr, 1, p], v));
    // Roi corners in feature-map pixels, [R, 1, 1] each.
    let rf = cx.cast(rois, DType::F32)?;
    let rf = cx.mul_sc(rf, scale)?;
    let rf = cx.add_sc(rf, -off)?;
    let corner = |cx: &mut Ctx, k: usize| -> Result<ValueId, String> {
        let v = cx.slice_axis(rf, 1, k, k + 1)?;
        cx.reshape_u(v, &[r, 1, 1])
    };
    let (x1, y1, x2, y2) = (corner(cx, 0)?, corner(cx, 1)?, corner(cx, 2)?, corner(cx, 3)?);
    let mut taps = Vec::new();
    for (lo, hi, o, d, k) in [(y1, y2, oh, h, &kh), (x1, x2, ow, w, &kw)] {
        let mut size = cx.bin(B::Sub, hi, lo)?;
        if !half_pixel {
            let one_f = cx.scalar(DType::F32, 1.0);
            size = cx.bin(B::Max, size, one_f)?;
        }
        let bin = cx.mul_sc(size, 1.0 / o as f64)?;
        let kc = kconst(cx, DType::F32, k);
        let t = cx.bin(B::Mul, bin, kc)?;
        let pos = cx.bin(B::Add, lo, t)?; // [R, 1, P]
        taps.push(roi_axis_taps(cx, pos, d)?);
    }
    // Each roi's image: X gathered by batch index, [R, C, H·W].
    let bi = cx.cast(bidx, DType::I64)?;
    let xr = cx.prim(MirOp::Gather { axis: 0 }, &[x, bi])?;
    let xf = cx.reshape_u(xr, &[r, c, h * w])?;
    let terms = tap_terms(cx, xf, &[h, w], &taps, c)?;
    let dt = cx.dtype(x);
    let mut acc = terms[0];
    for &t in &terms[1..] {
        acc = cx.bin(if max_mode { B::Max } else { B::Add }, acc, t)?;
    }
    let red = if max_mode {
        if !has.iter().all(|&v| v != 0.0) {
            // A sample the roi does not have: -inf (or 0 for a roi with no samples, as the reference).
            let fill: Vec<f64> = (0..rr * p).map(|k| if grids[k / p].0 * grids[k / p].1 == 0 { 0.0 } else { f64::NEG_INFINITY }).collect();
            let m = kconst(cx, DType::Bool, &has);
            let f = kconst(cx, dt, &fill);
            acc = cx.prim(MirOp::Where, &[m, acc, f])?;
        }
        ReduceOp::Max
    } else {
        let wc = kconst(cx, dt, &wt);
        acc = cx.bin(B::Mul, acc, wc)?;
        ReduceOp::Sum
    };
    let acc = cx.reshape_u(acc, &[r, c, oh, gh, ow, gw])?;
    one(cx.reduce(red, acc, vec![3, 5], false)?)
}

/// RoiAlign's two taps of one axis of size `d` at pixel positions `pos` (f32): outside [-1, d] both
/// weigh 0; else the position clamped to [0, d-1] splits into floor (weight 1 - frac) and the next
/// pixel, clamped (weight frac).
fn roi_axis_taps(cx: &mut Ctx, pos: ValueId, d: usize) -> Result<Vec<(ValueId, ValueId)>, String> {
    let (lo, hi) = (cx.sc(pos, -1.0), cx.sc(pos, d as f64));
    let ge = cx.bin(B::Ge, pos, lo)?;
    let le = cx.bin(B::Le, pos, hi)?;
    let ok = cx.bin(B::And, ge, le)?;
    let y = clamp(cx, pos, 0.0, d as f64 - 1.0)?;
    let f = cx.un(U::Floor, y)?;
    let fr = cx.bin(B::Sub, y, f)?;
    let one_f = cx.scalar(DType::F32, 1.0);
    let w0 = cx.bin(B::Sub, one_f, fr)?;
    let zero = cx.scalar(DType::F32, 0.0);
    let w0 = cx.prim(MirOp::Where, &[ok, w0, zero])?;
    let w1 = cx.prim(MirOp::Where, &[ok, fr, zero])?;
    let i0 = cx.cast(f, DType::I64)?;
    let i1 = cx.add_sc(i0, 1.0)?;
    let i1 = clamp(cx, i1, 0.0, d as f64 - 1.0)?;
    Ok(vec![(i0, w0), (i1, w1)])
}

/// DeformConv (opset 19/22, 2-D): X [N, C, H, W], W [M, C/group, kh, kw], offset [N, G·kh·kw·2, oh, ow],
/// B [M]?, mask [N, G·kh·kw, oh, ow]? → [N, M, oh, ow].
fn deform_conv(cx: &mut Ctx, nd: &Node) -> R {
    let (x, wt, offset) = (nd.req(0)?, nd.req(1)?, nd.req(2)?);
    let xd = cx.fixed_dims(x, "DeformConv X")?;
    let wd = cx.fixed_dims(wt, "DeformConv W")?;
    let od = cx.fixed_dims(offset, "DeformConv offset")?;
    if xd.len() != 4 || wd.len() != 4 || od.len() != 4 {
        return Err(format!("unsupported: DeformConv with X {xd:?}, W {wd:?} (only 2-D: rank-4 X, W and offset)"));
    }
    if !cx.dtype(x).is_float() {
        return Err(format!("unsupported: DeformConv of {}", cx.dtype(x)));
    }
    let ints = |k: &str, d: Vec<i64>| -> Vec<i64> { nd.a.ints(k).unwrap_or(d) };
    let ks = ints("kernel_shape", vec![wd[2] as i64, wd[3] as i64]);
    let st = ints("strides", vec![1, 1]);
    let dl = ints("dilations", vec![1, 1]);
    let pads = ints("pads", vec![0, 0, 0, 0]);
    let (group, og) = (nd.a.i("group", 1), nd.a.i("offset_group", 1));
    let (n, c, h, w) = (xd[0], xd[1], xd[2], xd[3]);
    let (m, (kh, kw), (oh, ow)) = (wd[0], (wd[2], wd[3]), (od[2], od[3]));
    let bad = |what: String| Err(format!("DeformConv: {what} (X {xd:?}, W {wd:?}, offset {od:?})"));
    if ks != [kh as i64, kw as i64] || st.len() != 2 || dl.len() != 2 || pads.len() != 4 || st.iter().chain(&dl).any(|&v| v < 1) || pads.iter().any(|&v| v < 0) {
        return bad(format!("kernel_shape {ks:?}, strides {st:?}, dilations {dl:?}, pads {pads:?} do not fit W"));
    }
    if group < 1 || og < 1 || c % group as usize != 0 || m % group as usize != 0 || wd[1] * group as usize != c || c % og as usize != 0 {
        return bad(format!("group {group} and offset_group {og} must divide the channels"));
    }
    let (group, og) = (group as usize, og as usize);
    let span = |i: usize, k: usize, d: i64, s: i64, p0: i64, p1: i64| (i as i64 + p0 + p1 - (k as i64 - 1) * d - 1) / s + 1;
    if od[0] != n || od[1] != og * kh * kw * 2 || oh as i64 != span(h, kh, dl[0], st[0], pads[0], pads[2]) || ow as i64 != span(w, kw, dl[1], st[1], pads[1], pads[3]) {
        return bad("offset must be [N, offset_group·kh·kw·2, oh, ow] with the convolution's output size".into());
    }
    let (taps, l) = (kh * kw, oh * ow);
    let p = taps * l;
    let ng = n * og;
    // Per sample p = (tap, output position): the undeformed pixel position of each axis, [1, 1, P].
    let (mut by, mut bx) = (vec![0f64; p], vec![0f64; p]);
    for i in 0..kh {
        for j in 0..kw {
            for a in 0..oh {
                for b in 0..ow {
                    let k = ((i * kw + j) * oh + a) * ow + b;
                    by[k] = (a as i64 * st[0] - pads[0] + i as i64 * dl[0]) as f64;
                    bx[k] = (b as i64 * st[1] - pads[1] + j as i64 * dl[1]) as f64;
                }
            }
        }
    }
    let of = cx.cast(offset, DType::F32)?;
    let of = cx.reshape_u(of, &[ng, taps, 2, l])?;
    let mut axis = Vec::new();
    for (k, base, d) in [(0, &by, h), (1, &bx, w)] {
        let dv = cx.slice_axis(of, 2, k, k + 1)?;
        let dv = cx.reshape_u(dv, &[ng, 1, p])?;
        let bc = cx.konst(ConstData::from_f64s(DType::F32, vec![1, 1, p], base));
        let pos = cx.bin(B::Add, dv, bc)?;
        axis.push(pixel_taps(cx, pos, d, true, Mode::Linear, Pad::Zeros)?);
    }
    let cg = c / og;
    let xf = cx.reshape_u(x, &[ng, cg, h * w])?;
    let mut cols: Option<ValueId> = None;
    for t in tap_terms(cx, xf, &[h, w], &axis, cg)? {
        cols = Some(match cols {
            Some(a) => cx.bin(B::Add, a, t)?,
            None => t,
        });
    }
    let mut cols = cols.ok_or("DeformConv: no taps")?; // [N·G, C/G, P]
    if let Some(mask) = nd.inp(4) {
        let md = cx.fixed_dims(mask, "DeformConv mask")?;
        if md != [n, og * taps, oh, ow] {
            return bad(format!("mask {md:?} must be [N, offset_group·kh·kw, oh, ow]"));
        }
        let mk = cx.cast(mask, cx.dtype(x))?;
        let mk = cx.reshape_u(mk, &[ng, 1, p])?;
        cols = cx.bin(B::Mul, cols, mk)?;
    }
    // im2col: [N, group, C/group·kh·kw, oh·ow] (channel-major, then tap: W's layout).
    let cpg = c / group;
    let cols = cx.reshape_u(cols, &[n, group, cpg * taps, l])?;
    // (Rank 4 like the columns: the CPU GEMM mis-broadcasts a lower-rank left operand, [G, M, K] ×
    // [N, G, K, L] with N > 1.)
    let wm = cx.reshape_u(wt, &[1, group, m / group, cpg * taps])?;
    let y = cx.prim(MirOp::MatMul, &[wm, cols])?; // [N, group, M/group, L]
    let mut y = cx.reshape_u(y, &[n, m, oh, ow])?;
    if let Some(b) = nd.inp(3) {
        let bd = cx.fixed_dims(b, "DeformConv B")?;
        if bd != [m] {
            return bad(format!("B {bd:?} must be [M]"));
        }
        let b = cx.reshape_u(b, &[1, m, 1, 1])?;
        y = cx.bin(B::Add, y, b)?;
    }
    one(y)
}
