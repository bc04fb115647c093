//! Shape and data movement: Shape, Size, Reshape, Flatten, Squeeze/Unsqueeze, Transpose, Expand,
//! Tile, Slice, Concat, Split, the gathers and scatters, Pad, Trilu, DepthToSpace/SpaceToDepth.

use super::build::{dim_prod, norm_axes, norm_axis};
use super::{one, Node, R};
use crate::onnx::Ctx;
use rlx_ir::{broadcast, ConstData, DType, Dim, MirOp, PadMode, ScatterRed, Shape, ValueId};

/// The ONNX op types this family translates.
pub(super) const OPS: &[&str] = &[
    "CenterCropPad", "Compress", "Concat", "DepthToSpace", "Expand", "Flatten", "Gather", "GatherElements", "GatherND", "Pad", "Reshape", "ReverseSequence",
    "Scatter", "ScatterElements", "ScatterND", "Shape", "Size", "Slice", "SpaceToDepth", "Split", "Squeeze", "Tile",
    "Transpose", "Trilu", "Unsqueeze",
];

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    let (a, op, opset, ins, n) = (&nd.a, nd.op, nd.opset, nd.ins, nd.proto);
    let inp = |i: usize| nd.inp(i);
    let req = |i: usize| nd.req(i);
    match op {
        "CenterCropPad" => {
            // One `pad` whose negative entries crop: centered, the odd element cropped from / padded at the end.
            let x = req(0)?;
            let xd = cx.fixed_dims(x, op)?;
            let r = xd.len();
            let target = cx.const_ints(req(1)?, "CenterCropPad shape")?;
            let axes: Vec<usize> = match a.ints("axes") {
                Some(v) => v.iter().map(|&d| norm_axis(d, r)).collect::<Result<_, _>>()?,
                None => (0..r).collect(),
            };
            if target.len() != axes.len() {
                return Err(format!("shape has {} values for {} axes", target.len(), axes.len()));
            }
            let mut pads = vec![0i64; 2 * r];
            for (&d, &t) in axes.iter().zip(&target) {
                if t < 0 {
                    return Err(format!("negative target size {t}"));
                }
                let diff = t - xd[d] as i64;
                let begin = if diff < 0 { -((-diff) / 2) } else { diff / 2 };
                pads[d] = begin;
                pads[r + d] = diff - begin;
            }
            one(cx.prim(MirOp::Pad { pads, mode: PadMode::Constant, value: 0.0 }, &[x])?)
        }
        "ReverseSequence" => {
            // A constant sequence_lens: a gather_elements along the time axis whose index is
            // (len − 1 − t) for t < len of that batch row, t after it (made over [batch, time], expanded).
            let x = req(0)?;
            let xd = cx.fixed_dims(x, op)?;
            let r = xd.len();
            let (ba, ta) = (norm_axis(a.i("batch_axis", 1), r)?, norm_axis(a.i("time_axis", 0), r)?);
            if ba == ta {
                return Err("batch_axis and time_axis are the same".into());
            }
            let lens = cx.const_ints(req(1)?, "ReverseSequence sequence_lens")?;
            let (nb, nt) = (xd[ba], xd[ta]);
            if lens.len() != nb {
                return Err(format!("sequence_lens has {} values for a batch of {nb}", lens.len()));
            }
            let mut small = vec![1usize; r];
            small[ba] = nb;
            small[ta] = nt;
            let mut idx = vec![0i64; nb * nt];
            for (b, &l) in lens.iter().enumerate() {
                if l < 0 || l as usize > nt {
                    return Err(format!("sequence length {l} of batch row {b} is outside 0..={nt}"));
                }
                for t in 0..nt {
                    let v = if (t as i64) < l { l - 1 - t as i64 } else { t as i64 };
                    // Row-major over (batch, time) in the order the two axes appear.
                    let k = if ba < ta { b * nt + t } else { t * nb + b };
                    idx[k] = v;
                }
            }
            let i = cx.konst(ConstData::from_i64(small, &idx));
            let i = cx.prim(MirOp::Expand { shape: cx.dims(x) }, &[i])?;
            one(cx.prim(MirOp::GatherElements { axis: ta }, &[x, i])?)
        }
        "Compress" => {
            // A constant condition: a gather of the selected positions; else `select::compress`.
            let x = req(0)?;
            let (x, axis) = match a.has("axis") {
                true => {
                    let r = cx.rank(x);
                    (x, norm_axis(a.i("axis", 0), r)?)
                }
                false => {
                    let n = dim_prod(&cx.dims(x)).ok_or("Compress without axis needs a static shape")?;
                    (cx.reshape(x, vec![n])?, 0)
                }
            };
            let len = cx.fixed_dims(x, op)?[axis];
            if cx.cval(req(1)?).is_none() {
                return super::select::compress(cx, x, req(1)?, axis);
            }
            let cond = cx.const_ints(req(1)?, "Compress condition")?;
            if cond.len() > len {
                return Err(format!("condition has {} values, the axis {len}", cond.len()));
            }
            let idx: Vec<i64> = cond.iter().enumerate().filter(|(_, &c)| c != 0).map(|(i, _)| i as i64).collect();
            let i = cx.konst(ConstData::from_i64(vec![idx.len()], &idx));
            one(cx.prim(MirOp::Gather { axis }, &[x, i])?)
        }
        "Shape" => {
            let d = cx.dims(req(0)?);
            let r = d.len() as i64;
            let cl = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
            let s = cl(a.i("start", 0));
            let e = if a.has("end") { cl(a.i("end", r)) } else { r as usize };
            let sel = if s < e { &d[s..e] } else { &[][..] };
            let v: Option<Vec<i64>> = sel.iter().map(|x| x.fixed().map(|n| n as i64)).collect();
            match v {
                Some(v) => one(cx.ints_const(&v)),
                None => Err(format!(
                    "the shape {} is symbolic; fix {} with --dim NAME=N",
                    Shape(d.clone()),
                    Shape(sel.to_vec()).symbols().join(", ")
                )),
            }
        }
        "Size" => {
            let x = req(0)?;
            let n = cx.fixed_dims(x, "Size")?.iter().product::<usize>();
            one(cx.konst(ConstData::from_i64(vec![], &[n as i64])))
        }
        "Reshape" => {
            let x = req(0)?;
            let spec = if opset < 5 { a.ints("shape").unwrap_or_default() } else { cx.const_ints(req(1)?, "Reshape shape")? };
            let t = reshape_dims(&cx.dims(x), &spec, a.i("allowzero", 0) != 0)?;
            one(cx.reshape(x, t)?)
        }
        "Flatten" => {
            let x = req(0)?;
            let d = cx.dims(x);
            let mut ax = a.i("axis", 1);
            if ax < 0 {
                ax += d.len() as i64;
            }
            if ax < 0 || ax > d.len() as i64 {
                return Err(format!("axis {} out of range", a.i("axis", 1)));
            }
            let (l, r) = d.split_at(ax as usize);
            let t = vec![dim_prod(l).ok_or("Flatten of symbolic dims")?, dim_prod(r).ok_or("Flatten of symbolic dims")?];
            one(cx.reshape(x, t)?)
        }
        "Squeeze" | "Unsqueeze" => {
            let x = req(0)?;
            let axes = if opset < 13 {
                a.ints("axes")
            } else {
                match inp(1) {
                    Some(v) => Some(cx.const_ints(v, &format!("{op} axes"))?),
                    None => None,
                }
            };
            let d = cx.dims(x);
            if op == "Squeeze" {
                let ax = match axes {
                    Some(v) => norm_axes(&v, d.len())?,
                    None => (0..d.len()).filter(|&i| d[i] == Dim::Fixed(1)).collect(),
                };
                let t: Vec<Dim> = d.iter().enumerate().filter(|(i, _)| !ax.contains(i)).map(|(_, x)| x.clone()).collect();
                one(cx.reshape(x, t)?)
            } else {
                let v = axes.ok_or("Unsqueeze needs axes")?;
                let ax = norm_axes(&v, d.len() + v.len())?;
                one(cx.unsqueeze(x, &ax)?)
            }
        }
        "Transpose" => {
            let x = req(0)?;
            let r = cx.rank(x);
            let perm = match a.ints("perm") {
                Some(p) => p.iter().map(|&i| norm_axis(i, r)).collect::<Result<Vec<_>, _>>()?,
                None => (0..r).rev().collect(),
            };
            one(cx.transpose(x, perm)?)
        }
        "Expand" => {
            let x = req(0)?;
            let s = cx.const_ints(req(1)?, "Expand shape")?;
            let sd = Shape(s.iter().map(|&d| Dim::Fixed(d.max(0) as u64)).collect());
            let t = broadcast(&cx.ty(x).shape, &sd)?;
            if t == cx.ty(x).shape {
                return one(x);
            }
            one(cx.prim(MirOp::Expand { shape: t.0 }, &[x])?)
        }
        "Tile" => {
            let x = req(0)?;
            let reps = cx.const_ints(req(1)?, "Tile repeats")?;
            let d = cx.fixed_dims(x, "Tile")?;
            if reps.len() != d.len() || reps.iter().any(|&r| r < 0) {
                return Err(format!("repeats {reps:?} do not fit rank {}", d.len()));
            }
            let mut s1 = Vec::new();
            let mut s2 = Vec::new();
            let mut s3 = Vec::new();
            for i in 0..d.len() {
                s1.extend([1, d[i]]);
                s2.extend([reps[i] as usize, d[i]]);
                s3.push(reps[i] as usize * d[i]);
            }
            let y = cx.reshape_u(x, &s1)?;
            let y = cx.prim(MirOp::Expand { shape: s2.iter().map(|&v| Dim::Fixed(v as u64)).collect() }, &[y])?;
            one(cx.reshape_u(y, &s3)?)
        }
        "Slice" => {
            let x = req(0)?;
            let r = cx.rank(x);
            let (starts, ends, axes, steps) = if opset < 10 {
                (a.ints("starts").unwrap_or_default(), a.ints("ends").unwrap_or_default(), a.ints("axes"), None)
            } else {
                let st = cx.const_ints(req(1)?, "Slice starts")?;
                let en = cx.const_ints(req(2)?, "Slice ends")?;
                let ax = match inp(3) {
                    Some(v) => Some(cx.const_ints(v, "Slice axes")?),
                    None => None,
                };
                let sp = match inp(4) {
                    Some(v) => Some(cx.const_ints(v, "Slice steps")?),
                    None => None,
                };
                (st, en, ax, sp)
            };
            let axes = match axes {
                Some(v) => v.iter().map(|&i| norm_axis(i, r)).collect::<Result<Vec<_>, _>>()?,
                None => (0..starts.len()).collect(),
            };
            let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
            if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
                return Err("Slice starts/ends/axes/steps lengths differ".into());
            }
            one(cx.prim(MirOp::Slice { axes, starts, ends, steps }, &[x])?)
        }
        "Concat" => {
            let vs: Vec<ValueId> = ins.iter().flatten().copied().collect();
            let r = cx.rank(*vs.first().ok_or("Concat needs inputs")?);
            let ax = norm_axis(a.i("axis", 0), r)?;
            if vs.len() == 1 {
                return one(vs[0]);
            }
            one(cx.prim(MirOp::Concat { axis: ax }, &vs)?)
        }
        "Split" => {
            let x = req(0)?;
            let r = cx.rank(x);
            let ax = norm_axis(a.i("axis", 0), r)?;
            let d = cx.dims(x)[ax].fixed().ok_or("Split along a symbolic dim")? as i64;
            let sizes = if opset < 13 {
                a.ints("split")
            } else {
                match inp(1) {
                    Some(v) => Some(cx.const_ints(v, "Split sizes")?),
                    None => None,
                }
            };
            let k = n.output.len() as i64;
            let sizes = match sizes {
                Some(s) => s,
                None if a.has("num_outputs") => {
                    let no = a.i("num_outputs", 1).max(1);
                    let c = (d + no - 1) / no;
                    (0..no).map(|i| (d - i * c).clamp(0, c)).collect()
                }
                None => {
                    if k == 0 || d % k != 0 {
                        return Err(format!("cannot split {d} evenly into {k}"));
                    }
                    vec![d / k; k as usize]
                }
            };
            let mut outs = Vec::new();
            let mut s = 0;
            for &sz in &sizes {
                outs.push(cx.prim(MirOp::Slice { axes: vec![ax], starts: vec![s], ends: vec![s + sz], steps: vec![1] }, &[x])?);
                s += sz;
            }
            Ok(outs)
        }
        "Gather" => {
            let x = req(0)?;
            let ax = norm_axis(a.i("axis", 0), cx.rank(x))?;
            one(cx.prim(MirOp::Gather { axis: ax }, &[x, req(1)?])?)
        }
        "GatherElements" => {
            let x = req(0)?;
            let ax = norm_axis(a.i("axis", 0), cx.rank(x))?;
            one(cx.prim(MirOp::GatherElements { axis: ax }, &[x, req(1)?])?)
        }
        "GatherND" => one(cx.prim(MirOp::GatherNd { batch_dims: a.i("batch_dims", 0).max(0) as usize }, &[req(0)?, req(1)?])?),
        "ScatterElements" | "Scatter" | "ScatterND" => {
            let x = req(0)?;
            let red = match a.s("reduction").as_deref().unwrap_or("none") {
                "none" => ScatterRed::None,
                "add" => ScatterRed::Add,
                "mul" => ScatterRed::Mul,
                "max" => ScatterRed::Max,
                "min" => ScatterRed::Min,
                r => return Err(format!("unsupported reduction '{r}'")),
            };
            let o = if op == "ScatterND" {
                MirOp::ScatterNd { reduction: red }
            } else {
                MirOp::ScatterElements { axis: norm_axis(a.i("axis", 0), cx.rank(x))?, reduction: red }
            };
            one(cx.prim(o, &[x, req(1)?, req(2)?])?)
        }
        "Pad" => {
            let x = req(0)?;
            let r = cx.rank(x);
            let (pads, value, axes) = if opset < 11 {
                let p = a.ints("pads").or_else(|| a.ints("paddings")).unwrap_or_default();
                (p, a.f("value", 0.0), None)
            } else {
                let p = cx.const_ints(req(1)?, "Pad pads")?;
                let v = match inp(2) {
                    Some(v) => cx.const_f64s(v, "Pad constant_value")?.first().copied().unwrap_or(0.0),
                    None => 0.0,
                };
                let ax = match inp(3) {
                    Some(v) => Some(cx.const_ints(v, "Pad axes")?),
                    None => None,
                };
                (p, v, ax)
            };
            let full = match axes {
                None => pads,
                Some(ax) => {
                    let ax = ax.iter().map(|&i| norm_axis(i, r)).collect::<Result<Vec<_>, _>>()?;
                    if pads.len() != 2 * ax.len() {
                        return Err("Pad: pads do not match axes".into());
                    }
                    let mut f = vec![0; 2 * r];
                    for (k, &i) in ax.iter().enumerate() {
                        f[i] = pads[k];
                        f[i + r] = pads[k + ax.len()];
                    }
                    f
                }
            };
            let mode = match a.s("mode").as_deref().unwrap_or("constant") {
                "constant" => PadMode::Constant,
                "reflect" => PadMode::Reflect,
                "edge" => PadMode::Edge,
                "wrap" => PadMode::Wrap,
                m => return Err(format!("unsupported pad mode '{m}'")),
            };
            one(cx.prim(MirOp::Pad { pads: full, mode, value }, &[x])?)
        }
        "Trilu" => {
            let x = req(0)?;
            let xd = cx.fixed_dims(x, op)?;
            let r = xd.len();
            if r < 2 {
                return Err("Trilu needs rank >= 2".into());
            }
            let k = match inp(1) {
                Some(v) => *cx.const_ints(v, "Trilu k")?.first().unwrap_or(&0),
                None => 0,
            };
            let (nr, nc) = (xd[r - 2], xd[r - 1]);
            let upper = a.i("upper", 1) != 0;
            let mut m = Vec::with_capacity(nr * nc);
            for i in 0..nr as i64 {
                for j in 0..nc as i64 {
                    m.push(if upper { (j - i >= k) as i64 as f64 } else { (j - i <= k) as i64 as f64 });
                }
            }
            let mask = cx.konst(ConstData::from_f64s(DType::Bool, vec![nr, nc], &m));
            let zero = cx.sc(x, 0.0);
            one(cx.prim(MirOp::Where, &[mask, x, zero])?)
        }
        "DepthToSpace" | "SpaceToDepth" => {
            let x = req(0)?;
            let d = cx.fixed_dims(x, op)?;
            if d.len() != 4 {
                return Err(format!("{op} needs a 4-D input"));
            }
            let b = a.i("blocksize", 1).max(1) as usize;
            let (nb, c, h, w) = (d[0], d[1], d[2], d[3]);
            if op == "DepthToSpace" {
                let crd = a.s("mode").as_deref() == Some("CRD");
                let (s1, perm) = if crd {
                    (vec![nb, c / (b * b), b, b, h, w], vec![0, 1, 4, 2, 5, 3])
                } else {
                    (vec![nb, b, b, c / (b * b), h, w], vec![0, 3, 4, 1, 5, 2])
                };
                let y = cx.reshape_u(x, &s1)?;
                let y = cx.transpose(y, perm)?;
                one(cx.reshape_u(y, &[nb, c / (b * b), h * b, w * b])?)
            } else {
                let y = cx.reshape_u(x, &[nb, c, h / b, b, w / b, b])?;
                let perm = if a.s("mode").as_deref() == Some("CRD") { vec![0, 1, 3, 5, 2, 4] } else { vec![0, 3, 5, 1, 2, 4] };
                let y = cx.transpose(y, perm)?;
                one(cx.reshape_u(y, &[nb, c * b * b, h / b, w / b])?)
            }
        }
        _ => Err(format!("unsupported op {op}")),
    }
}

/// ONNX Reshape target dims (0 = copy unless allowzero, -1 = inferred).
fn reshape_dims(input: &[Dim], spec: &[i64], allowzero: bool) -> Result<Vec<Dim>, String> {
    let mut out: Vec<Option<Dim>> = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &s) in spec.iter().enumerate() {
        match s {
            -1 if infer.is_none() => {
                infer = Some(i);
                out.push(None);
            }
            0 if !allowzero => out.push(Some(input.get(i).cloned().ok_or("reshape: 0 copies a dim the input does not have")?)),
            s if s >= 0 => out.push(Some(Dim::Fixed(s as u64))),
            _ => return Err(format!("reshape: bad target shape {spec:?}")),
        }
    }
    if let Some(k) = infer {
        let known: Vec<Dim> = out.iter().flatten().cloned().collect();
        let mut syms_in = Shape(input.to_vec()).symbols();
        let syms_out = Shape(known.clone()).symbols();
        for s in &syms_out {
            match syms_in.iter().position(|x| x == s) {
                Some(p) => {
                    syms_in.remove(p);
                }
                None => return Err(format!("reshape: cannot infer -1 in {spec:?} from input {}", Shape(input.to_vec()))),
            }
        }
        let fi: u64 = input.iter().filter_map(Dim::fixed).product();
        let fo: u64 = known.iter().filter_map(Dim::fixed).product();
        let d = if fo == 0 {
            Dim::Fixed(0)
        } else if fi % fo != 0 {
            return Err(format!("reshape: {} elements do not divide into {spec:?}", Shape(input.to_vec())));
        } else {
            match (syms_in.len(), fi / fo) {
                (0, n) => Dim::Fixed(n),
                (1, 1) => Dim::Sym(syms_in[0].clone()),
                _ => return Err(format!("reshape: cannot infer -1 in {spec:?} from symbolic input {}", Shape(input.to_vec()))),
            }
        };
        out[k] = Some(d);
    }
    Ok(out.into_iter().map(|d| d.unwrap()).collect())
}
