//! Ops that make tensors from attributes and constants: Constant, ConstantOfShape, OneHot, EyeLike,
//! Range, the window functions and MelWeightMatrix (constants computed at import from constant inputs).

use super::build::norm_axis;
use super::{one, Node, R};
use crate::onnx::{dtype_from_onnx, tensor_from_proto, Ctx};
use rlx_ir::{BinaryOp, ConstData, DType, Dim, MirOp};

/// The ONNX op types this family translates.
pub(super) const OPS: &[&str] = &[
    "BlackmanWindow", "Constant", "ConstantOfShape", "EyeLike", "HammingWindow", "HannWindow", "MelWeightMatrix", "OneHot", "Range",
];

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    let (a, op) = (&nd.a, nd.op);
    let req = |i: usize| nd.req(i);
    match op {
        "Constant" => {
            let c = if let Some(t) = a.t("value") {
                tensor_from_proto(t, cx.base_dir)?
            } else if a.has("value_float") {
                ConstData::from_f32(vec![], &[a.f("value_float", 0.0) as f32])
            } else if let Some(v) = a.floats("value_floats") {
                ConstData::from_f64s(DType::F32, vec![v.len()], &v)
            } else if a.has("value_int") {
                ConstData::from_i64(vec![], &[a.i("value_int", 0)])
            } else if let Some(v) = a.ints("value_ints") {
                ConstData::from_i64(vec![v.len()], &v)
            } else {
                return Err("unsupported: Constant of this kind (string or sparse)".into());
            };
            one(cx.konst(c))
        }
        "ConstantOfShape" => {
            let s = cx.const_ints(req(0)?, "ConstantOfShape shape")?;
            let val = match a.t("value") {
                Some(t) => tensor_from_proto(t, cx.base_dir)?,
                None => ConstData::from_f32(vec![1], &[0.0]),
            };
            let v = ConstData::new(val.dtype, vec![], val.data.clone()).map_err(|e| format!("value: {e}"))?;
            let sv = cx.konst(v);
            let shape = s.iter().map(|&d| u64::try_from(d).map(Dim::Fixed).map_err(|_| format!("negative dim {d}"))).collect::<Result<Vec<_>, _>>()?;
            one(cx.prim(MirOp::Expand { shape }, &[sv])?)
        }
        "OneHot" => {
            let (idx, vals) = (req(0)?, req(2)?);
            let depth = *cx.const_f64s(req(1)?, "OneHot depth")?.first().ok_or("empty depth")? as i64;
            let r = cx.rank(idx);
            let ax = norm_axis(a.i("axis", -1), r + 1)?;
            let idx = cx.cast(idx, DType::I64)?;
            let zero = cx.scalar(DType::I64, 0.0);
            let dc = cx.scalar(DType::I64, depth as f64);
            let neg = cx.bin(BinaryOp::Lt, idx, zero)?;
            let wrapped = cx.bin(BinaryOp::Add, idx, dc)?;
            let idx = cx.prim(MirOp::Where, &[neg, wrapped, idx])?;
            let idx = cx.unsqueeze(idx, &[ax])?;
            let mut rs = vec![1usize; r + 1];
            rs[ax] = depth.max(0) as usize;
            let ids: Vec<i64> = (0..depth.max(0)).collect();
            let rg = cx.konst(ConstData::from_i64(rs, &ids));
            let eq = cx.bin(BinaryOp::Eq, idx, rg)?;
            let off = cx.prim(MirOp::Slice { axes: vec![0], starts: vec![0], ends: vec![1], steps: vec![1] }, &[vals])?;
            let on = cx.prim(MirOp::Slice { axes: vec![0], starts: vec![1], ends: vec![2], steps: vec![1] }, &[vals])?;
            let off = cx.reshape(off, vec![])?;
            let on = cx.reshape(on, vec![])?;
            one(cx.prim(MirOp::Where, &[eq, on, off])?)
        }
        "EyeLike" => {
            let x = req(0)?;
            let xd = cx.fixed_dims(x, op)?;
            if xd.len() != 2 {
                return Err("EyeLike needs a 2-D input".into());
            }
            let dt = if a.has("dtype") { dtype_from_onnx(a.i("dtype", 1) as i32)? } else { cx.dtype(x) };
            let k = a.i("k", 0);
            match xd[0].checked_mul(xd[1]) {
                Some(n) if n <= 100_000_000 => {}
                _ => return Err(format!("EyeLike of {} x {} elements is too large", xd[0], xd[1])),
            }
            let mut v = Vec::with_capacity(xd[0] * xd[1]);
            for i in 0..xd[0] as i64 {
                for j in 0..xd[1] as i64 {
                    v.push((j - i == k) as i64 as f64);
                }
            }
            one(cx.konst(ConstData::from_f64s(dt, xd, &v)))
        }
        "HannWindow" | "HammingWindow" | "BlackmanWindow" => {
            // Constants: w[n] = Σ a_k cos(2πkn / N'), N' = size (periodic, the default) or size − 1.
            let size = match cx.const_ints(req(0)?, &format!("{op} size"))?.as_slice() {
                [s] => *s,
                v => return Err(format!("{op} size must be a scalar, it has {} values", v.len())),
            };
            if !(0..=1 << 24).contains(&size) {
                return Err(format!("{op} size {size} is out of range"));
            }
            let dt = dtype_from_onnx(a.i("output_datatype", 1) as i32)?;
            let n = size as usize;
            let den = if a.i("periodic", 1) != 0 { n as f64 } else { n as f64 - 1.0 };
            let coef: &[f64] = match op {
                "HannWindow" => &[0.5, -0.5],
                "HammingWindow" => &[25.0 / 46.0, -21.0 / 46.0],
                _ => &[0.42, -0.5, 0.08],
            };
            let w: Vec<f64> = (0..n)
                .map(|i| coef.iter().enumerate().map(|(k, c)| c * (2.0 * std::f64::consts::PI * (k * i) as f64 / den).cos()).sum())
                .collect();
            one(cx.konst(ConstData::from_f64s(dt, vec![n], &w)))
        }
        "MelWeightMatrix" => {
            let scalar = |cx: &mut Ctx, i: usize, what: &str| -> Result<f64, String> {
                match cx.const_f64s(req(i)?, &format!("MelWeightMatrix {what}"))?.as_slice() {
                    [x] => Ok(*x),
                    v => Err(format!("MelWeightMatrix {what} must be a scalar, it has {} values", v.len())),
                }
            };
            let (bins, dft, rate) = (scalar(cx, 0, "num_mel_bins")?, scalar(cx, 1, "dft_length")?, scalar(cx, 2, "sample_rate")?);
            let (lo, hi) = (scalar(cx, 3, "lower_edge_hertz")?, scalar(cx, 4, "upper_edge_hertz")?);
            if !(1.0..=65536.0).contains(&bins) || !(1.0..=(1 << 24) as f64).contains(&dft) || rate < 1.0 {
                return Err(format!("MelWeightMatrix: num_mel_bins {bins}, dft_length {dft}, sample_rate {rate} out of range"));
            }
            let dt = dtype_from_onnx(a.i("output_datatype", 1) as i32)?;
            one(cx.konst(mel_weight_matrix(bins as usize, dft as i64, rate, lo as f32, hi as f32, dt)))
        }
        "Range" => {
            let (s, l, d) = (req(0)?, req(1)?, req(2)?);
            let dt = cx.dtype(s);
            let scalar = |v, what: &str| -> Result<f64, String> {
                match cx.const_f64s(v, what)?.as_slice() {
                    [x] => Ok(*x),
                    xs => Err(format!("{what} must be a scalar (one element), it has {}", xs.len())),
                }
            };
            let (sv, lv, dv) = (scalar(s, "Range start")?, scalar(l, "Range limit")?, scalar(d, "Range delta")?);
            if dv == 0.0 {
                return Err("Range delta is 0".into());
            }
            let n = ((lv - sv) / dv).ceil().max(0.0);
            if n > 1e8 {
                return Err(format!("Range of {n} elements is too large"));
            }
            let v: Vec<f64> = if dt.is_float() {
                (0..n as usize).map(|i| sv + i as f64 * dv).collect()
            } else {
                (0..n as usize).map(|i| (sv as i64 + i as i64 * dv as i64) as f64).collect()
            };
            one(cx.konst(ConstData::from_f64s(dt, vec![v.len()], &v)))
        }
        _ => Err(format!("unsupported op {op}")),
    }
}

/// The ONNX reference's triangular mel filters, [dft_length/2 + 1, num_mel_bins]: num_mel_bins + 2
/// points evenly spaced in mel (2595·log10(1 + f/700)) between the edges, mapped back to Hz and to the
/// DFT bin ⌊(dft_length + 1)·f / sample_rate⌋; filter i rises from point i to i+1 and falls to i+2.
/// The edge frequencies' mels are computed in f32 as the reference's numpy does, the rest in f64.
fn mel_weight_matrix(bins: usize, dft: i64, rate: f64, lo: f32, hi: f32, dt: DType) -> ConstData {
    let spec = (dft / 2 + 1) as usize;
    let ln10 = std::f64::consts::LN_10;
    let mel = |f: f32| (2595.0f32 * (f / 700.0).ln_1p()) as f64 / ln10;
    let (lm, hm) = (mel(lo), mel(hi));
    let step = (hm - lm) / (bins + 2) as f64;
    let pts: Vec<i64> = (0..bins + 2)
        .map(|k| {
            let f = 700.0 * ((k as f64 * step + lm) / 2595.0 * ln10).exp_m1();
            (((dft + 1) as f64 * f) / rate).floor() as i64
        })
        .collect();
    let mut out = vec![0f64; spec * bins];
    let mut set = |j: i64, i: usize, v: f64| {
        // numpy's negative indices count from the end; anything else out of range is skipped.
        let j = if j < 0 { j + spec as i64 } else { j };
        if (0..spec as i64).contains(&j) {
            out[j as usize * bins + i] = v;
        }
    };
    for i in 0..bins {
        let (l, c, h) = (pts[i], pts[i + 1], pts[i + 2]);
        if c == l {
            set(c, i, 1.0);
        } else {
            for j in l..=c {
                set(j, i, (j - l) as f64 / (c - l) as f64);
            }
        }
        if h > c {
            for j in c..h {
                set(j, i, (h - j) as f64 / (h - c) as f64);
            }
        }
    }
    ConstData::from_f64s(dt, vec![spec, bins], &out)
}
