//! Resize (and the older Upsample) as MIR primitives. Resize is separable: each resized axis is
//! an independent 1-D resampling, computed at import time (shapes are static) as `n` taps per
//! output position — a source index and a weight, the ONNX reference's formulation
//! (`_interpolate_1d_along_axis`): every coordinate transformation mode, nearest (every
//! `nearest_mode`), linear and cubic (`cubic_coeff_a`, `exclude_outside`), antialiasing,
//! `tf_crop_and_resize`'s extrapolation, scales or sizes with `keep_aspect_ratio_policy`, `axes`.
//! An axis whose taps pick one source element each (nearest) is one `gather` (exact for any
//! dtype); otherwise it is Σₖ gather(x, idxₖ) · wₖ in f32 (f64 for f64 input), so the CPU back
//! ends need nothing new.

use super::build::norm_axis;
use super::{one, Node, R};
use crate::onnx::Ctx;
use rlx_ir::{BinaryOp, ConstData, DType, MirOp, ValueId};

/// The ONNX op types this family translates.
pub(super) const OPS: &[&str] = &["Resize", "Upsample"];

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

struct Params {
    mode: Mode,
    ctm: String,
    nearest: String,
    cubic_a: f64,
    antialias: bool,
    exclude_outside: bool,
    extrapolation: f64,
}

/// One axis's resampling: `n` (source index, weight) taps per output position, and for
/// `tf_crop_and_resize` the positions that take the extrapolation value.
struct Taps {
    n: usize,
    idx: Vec<i64>,
    w: Vec<f64>,
    extrapolated: Vec<bool>,
}

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    let a = &nd.a;
    let x = nd.req(0)?;
    let shape = cx.fixed_dims(x, nd.op)?;
    let r = shape.len();
    let mode_s = a.s("mode").unwrap_or_else(|| "nearest".into());
    let mode = match mode_s.as_str() {
        "nearest" => Mode::Nearest,
        "linear" | "bilinear" => Mode::Linear,
        "cubic" | "bicubic" => Mode::Cubic,
        m => return Err(format!("unknown mode '{m}'")),
    };
    let upsample = nd.op == "Upsample";
    // Resize-10 and Upsample: (X, scales), asymmetric coordinates, nearest rounds down (Upsample) or
    // to the nearest (Resize-10, round_prefer_floor as the reference evaluates it).
    let old = upsample || nd.opset < 11;
    let p = Params {
        mode,
        ctm: if old { "asymmetric".into() } else { a.s("coordinate_transformation_mode").unwrap_or_else(|| "half_pixel".into()) },
        nearest: if upsample { "floor".into() } else { a.s("nearest_mode").unwrap_or_else(|| "round_prefer_floor".into()) },
        cubic_a: a.f("cubic_coeff_a", -0.75),
        antialias: a.i("antialias", 0) != 0,
        exclude_outside: a.i("exclude_outside", 0) != 0,
        extrapolation: a.f("extrapolation_value", 0.0),
    };
    if p.antialias && mode == Mode::Nearest {
        return Err("antialias is not defined for mode 'nearest'".into());
    }
    let axes: Vec<usize> = match a.ints("axes") {
        Some(v) => {
            let mut ax = Vec::with_capacity(v.len());
            for &d in &v {
                let d = norm_axis(d, r)?;
                if ax.contains(&d) {
                    return Err(format!("axes {v:?} repeat an axis"));
                }
                ax.push(d);
            }
            ax
        }
        None => (0..r).collect(),
    };
    let present = |i: usize| nd.inp(i).filter(|&v| cx.ty(v).shape.as_fixed().is_none_or(|s| s.iter().product::<usize>() > 0));
    let (roi_in, scales_in, sizes_in) = if old {
        if upsample && nd.opset < 9 {
            (None, None, None)
        } else {
            (None, nd.inp(1), None)
        }
    } else {
        (present(1), present(2), present(3))
    };
    // Per-axis scale factors and output sizes over all r dims.
    let mut scale = vec![1.0f64; r];
    let mut out = shape.clone();
    if let Some(sz) = sizes_in {
        if scales_in.is_some() {
            return Err("only one of scales and sizes may be given".into());
        }
        let sizes = cx.const_ints(sz, "Resize sizes")?;
        if sizes.len() != axes.len() {
            return Err(format!("sizes has {} values for {} axes", sizes.len(), axes.len()));
        }
        for (&d, &s) in axes.iter().zip(&sizes) {
            if s < 0 {
                return Err(format!("negative size {s}"));
            }
            if shape[d] == 0 {
                return Err(format!("cannot resize an empty axis {d} to {s}"));
            }
            out[d] = s as usize;
            scale[d] = s as f64 / shape[d] as f64;
        }
        let policy = a.s("keep_aspect_ratio_policy").unwrap_or_else(|| "stretch".into());
        if policy != "stretch" {
            let it = axes.iter().map(|&d| scale[d]);
            let s = match policy.as_str() {
                "not_larger" => it.fold(f64::INFINITY, f64::min),
                "not_smaller" => it.fold(f64::NEG_INFINITY, f64::max),
                p => return Err(format!("unknown keep_aspect_ratio_policy '{p}'")),
            };
            for &d in &axes {
                scale[d] = s;
                out[d] = (s * shape[d] as f64 + 0.5) as usize;
            }
        }
    } else {
        let sc = match scales_in {
            Some(v) => cx.const_f64s(v, "Resize scales")?,
            None if upsample => a.floats("scales").ok_or("Upsample needs scales")?,
            None => return Err("needs scales or sizes".into()),
        };
        let sc_axes: Vec<usize> = if sc.len() == r && a.ints("axes").is_none() { (0..r).collect() } else { axes.clone() };
        if sc.len() != sc_axes.len() {
            return Err(format!("scales has {} values for {} axes", sc.len(), sc_axes.len()));
        }
        for (&d, &s) in sc_axes.iter().zip(&sc) {
            if !(s > 0.0 && s.is_finite()) {
                return Err(format!("scale {s} must be positive"));
            }
            scale[d] = s;
            let o = (s * shape[d] as f64).floor();
            if o > (1u64 << 31) as f64 {
                return Err(format!("scale {s} makes axis {d} too large"));
            }
            out[d] = o as usize;
        }
    }
    let roi: Option<Vec<f64>> = match (p.ctm.as_str(), roi_in) {
        ("tf_crop_and_resize", Some(v)) => {
            let vals = cx.const_f64s(v, "Resize roi")?;
            let mut full = [vec![0.0; r], vec![1.0; r]].concat();
            let k = vals.len() / 2;
            let ax: Vec<usize> = if k == r && a.ints("axes").is_none() { (0..r).collect() } else { axes.clone() };
            if vals.len() != 2 * ax.len() {
                return Err(format!("roi has {} values for {} axes", vals.len(), ax.len()));
            }
            for (i, &d) in ax.iter().enumerate() {
                full[d] = vals[i];
                full[r + d] = vals[k + i];
            }
            Some(full)
        }
        ("tf_crop_and_resize", None) => return Err("tf_crop_and_resize needs roi".into()),
        _ => None,
    };

    let dt = cx.dtype(x);
    let mut y = x;
    for &d in &axes {
        let (lo, hi) = roi.as_ref().map(|v| (v[d], v[r + d])).unwrap_or((0.0, 1.0));
        let identity = (scale[d] - 1.0).abs() < 1e-9 && out[d] == shape[d] && (lo.abs() < 1e-9 && (hi - 1.0).abs() < 1e-9);
        if identity {
            continue;
        }
        let taps = axis_taps(&p, shape[d], out[d], scale[d], roi.as_ref().map(|_| (lo, hi)))?;
        y = apply(cx, y, d, r, &taps, p.extrapolation)?;
    }
    let y = if cx.dtype(y) != dt { cx.cast(y, dt)? } else { y };
    one(if y == x { cx.reshape(x, cx.dims(x))? } else { y })
}

/// Source coordinate of output position `o` (the reference's `_compute_x_ori`); `None`: extrapolated.
fn source(p: &Params, o: f64, scale: f64, in_w: usize, out_int: usize, roi: Option<(f64, f64)>) -> Result<Option<f64>, String> {
    let iw = in_w as f64;
    let ow = scale * iw;
    Ok(Some(match p.ctm.as_str() {
        "align_corners" => {
            if ow == 1.0 {
                0.0
            } else {
                o * (iw - 1.0) / (ow - 1.0)
            }
        }
        "asymmetric" => o / scale,
        "tf_crop_and_resize" => {
            let (lo, hi) = roi.ok_or("tf_crop_and_resize needs roi")?;
            let x = if ow == 1.0 { (hi - lo) * (iw - 1.0) / 2.0 } else { o * (hi - lo) * (iw - 1.0) / (ow - 1.0) };
            let x = x + lo * (iw - 1.0);
            if x < 0.0 || x > iw - 1.0 {
                return Ok(None);
            }
            x
        }
        "pytorch_half_pixel" => {
            if ow == 1.0 {
                -0.5
            } else {
                (o + 0.5) / scale - 0.5
            }
        }
        "half_pixel" => (o + 0.5) / scale - 0.5,
        "half_pixel_symmetric" => {
            let adjustment = out_int as f64 / ow;
            let offset = iw / 2.0 * (1.0 - adjustment);
            offset + (o + 0.5) / scale - 0.5
        }
        m => return Err(format!("unknown coordinate_transformation_mode '{m}'")),
    }))
}

/// The reference's coefficient functions, for `ratio` in (0, 1].
fn coeffs(p: &Params, ratio: f64, scale: f64) -> Result<Vec<f64>, String> {
    let a = p.cubic_a;
    Ok(match p.mode {
        Mode::Nearest => {
            if ratio == 1.0 {
                vec![0.0, 1.0]
            } else {
                let up = match p.nearest.as_str() {
                    "round_prefer_floor" => ratio > 0.5,
                    "round_prefer_ceil" => ratio >= 0.5,
                    "floor" => false,
                    "ceil" => true,
                    m => return Err(format!("unknown nearest_mode '{m}'")),
                };
                if up {
                    vec![0.0, 1.0]
                } else {
                    vec![1.0, 0.0]
                }
            }
        }
        Mode::Linear if p.antialias => {
            let s = scale.min(1.0);
            let start = (-1.0 / s).floor() as i64 + 1;
            let n = 2 - 2 * start;
            let c: Vec<f64> = (start..start + n).map(|i| (1.0 - ((i as f64 - ratio) * s).abs()).clamp(0.0, 1.0)).collect();
            let sum: f64 = c.iter().sum();
            c.iter().map(|v| v / sum).collect()
        }
        Mode::Linear => vec![1.0 - ratio, ratio],
        Mode::Cubic if p.antialias => {
            let s = scale.min(1.0);
            let f = |x: f64| {
                let x = x.abs();
                let (x2, x3) = (x * x, x * x * x);
                if x <= 1.0 {
                    (a + 2.0) * x3 - (a + 3.0) * x2 + 1.0
                } else if x < 2.0 {
                    a * x3 - 5.0 * a * x2 + 8.0 * a * x - 4.0 * a
                } else {
                    0.0
                }
            };
            let i_start = (-2.0 / s).floor() as i64 + 1;
            let i_end = 2 - i_start;
            let c: Vec<f64> = (i_start..i_end).map(|i| f(s * (i as f64 - ratio))).collect();
            let sum: f64 = c.iter().sum();
            c.iter().map(|v| v / sum).collect()
        }
        Mode::Cubic => {
            let r1 = ratio + 1.0;
            let q = 1.0 - ratio;
            let q1 = q + 1.0;
            vec![
                ((a * r1 - 5.0 * a) * r1 + 8.0 * a) * r1 - 4.0 * a,
                ((a + 2.0) * ratio - (a + 3.0)) * ratio * ratio + 1.0,
                ((a + 2.0) * q - (a + 3.0)) * q * q + 1.0,
                ((a * q1 - 5.0 * a) * q1 + 8.0 * a) * q1 - 4.0 * a,
            ]
        }
    })
}

fn axis_taps(p: &Params, in_w: usize, out_w: usize, scale: f64, roi: Option<(f64, f64)>) -> Result<Taps, String> {
    let mut t = Taps { n: 0, idx: Vec::new(), w: Vec::new(), extrapolated: Vec::with_capacity(out_w) };
    if in_w == 0 {
        return Err("cannot resize an empty axis".into());
    }
    for o in 0..out_w {
        let (x, extra) = match source(p, o as f64, scale, in_w, out_w, roi)? {
            Some(x) => (x, false),
            None => (0.0, true),
        };
        let fl = x.floor();
        let ratio = if x == fl { 1.0 } else { x - fl };
        let mut c = coeffs(p, ratio, scale)?;
        let n = c.len();
        if o == 0 {
            t.n = n;
            let total = out_w.checked_mul(n).filter(|&k| k <= 1 << 28).ok_or("the resize taps are too many")?;
            t.idx.reserve(total);
            t.w.reserve(total);
        } else if n != t.n {
            return Err("internal: tap count varies along an axis".into());
        }
        let pad = n.div_ceil(2) as f64;
        let xp = x + pad;
        let pp = xp.floor();
        let frac = xp - pp;
        let half = (n / 2) as i64;
        let off = if n % 2 == 0 {
            if frac == 0.0 {
                -half
            } else {
                -half + 1
            }
        } else {
            let base = -(((n - 1) / 2) as i64);
            if frac <= 0.5 {
                base
            } else {
                base + 1
            }
        };
        let start = pp as i64 + off - pad as i64;
        let idx: Vec<i64> = (0..n as i64).map(|k| start + k).collect();
        if p.exclude_outside {
            for (k, &i) in idx.iter().enumerate() {
                if i < 0 || i >= in_w as i64 {
                    c[k] = 0.0;
                }
            }
            let s: f64 = c.iter().sum();
            let s = if s == 0.0 { 1.0 } else { s };
            c.iter_mut().for_each(|v| *v /= s);
        }
        t.idx.extend(idx.iter().map(|&i| i.clamp(0, in_w as i64 - 1)));
        t.w.extend(c);
        t.extrapolated.push(extra);
    }
    Ok(t)
}

/// Applies one axis's taps to `x` along axis `d` (rank `r`).
fn apply(cx: &mut Ctx, x: ValueId, d: usize, r: usize, t: &Taps, extrapolation: f64) -> Result<ValueId, String> {
    let out_w = t.extrapolated.len();
    let n = t.n;
    let any_extra = t.extrapolated.iter().any(|&e| e);
    // One tap with weight 1 per position (nearest): a single gather.
    let single: Option<Vec<i64>> = (0..out_w)
        .map(|o| {
            let row = &t.w[o * n..o * n + n];
            let ones: Vec<usize> = (0..n).filter(|&k| row[k] == 1.0).collect();
            (ones.len() == 1 && row.iter().filter(|&&v| v != 0.0).count() == 1).then(|| t.idx[o * n + ones[0]])
        })
        .collect();
    let mut bshape = vec![1usize; r];
    bshape[d] = out_w;
    if let (Some(sel), false) = (&single, any_extra) {
        let i = cx.konst(ConstData::from_i64(vec![out_w], sel));
        return cx.prim(MirOp::Gather { axis: d }, &[x, i]);
    }
    let dt = cx.dtype(x);
    let work = if dt == DType::F64 { DType::F64 } else if dt.is_float() { DType::F32 } else {
        return Err(format!("unsupported: Resize with interpolation of {dt} data"));
    };
    let xf = cx.cast(x, work)?;
    let mut acc: Option<ValueId> = None;
    for k in 0..n {
        let wk: Vec<f64> = (0..out_w).map(|o| t.w[o * n + k]).collect();
        if wk.iter().all(|&v| v == 0.0) {
            continue;
        }
        let ik: Vec<i64> = (0..out_w).map(|o| t.idx[o * n + k]).collect();
        let i = cx.konst(ConstData::from_i64(vec![out_w], &ik));
        let g = cx.prim(MirOp::Gather { axis: d }, &[xf, i])?;
        let w = cx.konst(ConstData::from_f64s(work, bshape.clone(), &wk));
        let term = cx.bin(BinaryOp::Mul, g, w)?;
        acc = Some(match acc {
            None => term,
            Some(s) => cx.bin(BinaryOp::Add, s, term)?,
        });
    }
    let mut y = match acc {
        Some(v) => v,
        None => {
            // Every weight zero: the result is zeros of the output shape.
            let i = cx.konst(ConstData::from_i64(vec![out_w], &vec![0; out_w]));
            let g = cx.prim(MirOp::Gather { axis: d }, &[xf, i])?;
            let z = cx.sc(g, 0.0);
            cx.bin(BinaryOp::Mul, g, z)?
        }
    };
    if any_extra {
        let bytes: Vec<u8> = t.extrapolated.iter().map(|&e| e as u8).collect();
        let m = cx.konst(ConstData::new(DType::Bool, bshape, rlx_ir::Blob::from_vec(bytes))?);
        let e = cx.sc(y, extrapolation);
        y = cx.prim(MirOp::Where, &[m, e, y])?;
    }
    Ok(y)
}
