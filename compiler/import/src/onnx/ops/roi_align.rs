//! RoiAlign: each roi's image (`gather` of X by batch index) sampled by GridSample's tap terms
//! (`sample.rs`) at the bins' sample points, laid out [out_h, grid_h, out_w, grid_w] and reduced per bin (avg: Σ/count;
//! max: the reference's max over samples of the max of the four weighted taps). A sample outside
//! [-1, d] weighs 0; inside, the coordinate is clamped to [0, d-1] (the ONNX reference and ONNX Runtime).
//! `sampling_ratio` 0 makes the grid depend on each roi's size: the rois must then be constant, the
//! grid is the largest roi's and the samples a smaller roi does not have are masked out.

use super::sample::{clamp, combine, tap_terms};
use super::{one, Node, R};
use crate::onnx::Ctx;
use rlx_ir::{BinaryOp as B, ConstData, DType, MirOp, ReduceOp, UnaryOp as U, ValueId};

pub(super) const OPS: &[&str] = &["RoiAlign"];

/// RoiAlign (opset 10/16/22): X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices [R] → [R, C, oh, ow].
pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
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
    let mut acc = combine(cx, &terms, if max_mode { B::Max } else { B::Add })?;
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
