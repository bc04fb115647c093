//! Quantization: QuantizeLinear / DequantizeLinear onto `quantize` / `dequantize`, and the integer
//! products MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv onto an int32 matmul / conv.

use super::build::{dim_prod, norm_axis};
use super::nn::{auto_pads, usizes};
use super::{one, Node, R};
use crate::onnx::narrow::Narrow;
use crate::onnx::{dtype_from_onnx, Ctx};
use rlx_ir::{BinaryOp, ConstData, DType, Dim, MirOp, ReduceOp, UnaryOp, ValueId};

/// The ONNX op types this family translates.
pub(super) const OPS: &[&str] = &[
    "ConvInteger", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "QLinearConv", "QLinearMatMul", "QuantizeLinear",
];

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    let (a, op) = (&nd.a, nd.op);
    let inp = |i: usize| nd.inp(i);
    let req = |i: usize| nd.req(i);
    // Narrow types (float8, int4 …) are held widened in a carrier dtype (`onnx/narrow.rs`).
    let narrow_of = |cx: &Ctx, i: usize| nd.inp(i).and_then(|v| cx.narrow.get(&v).copied());
    if op != "QuantizeLinear" && op != "DequantizeLinear" {
        if let Some(n) = (0..nd.ins.len()).find_map(|i| narrow_of(cx, i)) {
            return Err(format!("unsupported: {op} with {n:?} values"));
        }
    }
    match op {
        "QuantizeLinear" | "DequantizeLinear" => {
            // Per-tensor, per-axis, or blocked (opset 21's block_size: each run of `block_size` elements
            // along `axis` shares a scale; the scale and zero point are repeated to x's shape and the
            // op is per element).
            let x = req(0)?;
            let mut scale = req(1)?;
            let block = a.i("block_size", 0);
            let mut sshape = cx.ty(scale).shape.as_fixed().ok_or_else(|| format!("{op}: scale must have a fixed shape"))?;
            let mut zp_in = inp(2);
            if block != 0 {
                let xs = cx.fixed_dims(x, op)?;
                let axis = norm_axis(a.i("axis", 1), xs.len())?;
                let bad = || format!("{op}: block_size {block} needs a scale of x's shape {xs:?} with axis {axis} of ceil({} / {block}), got {sshape:?}", xs[axis]);
                if block < 0 || sshape.len() != xs.len() || (0..xs.len()).any(|d| if d == axis { sshape[d] != xs[d].div_ceil(block as usize) } else { sshape[d] != xs[d] }) {
                    return Err(bad());
                }
                scale = cx.repeat_blocks(scale, axis, block as usize, xs[axis])?;
                if let Some(z) = zp_in {
                    if cx.ty(z).shape.as_fixed().as_ref() != Some(&sshape) {
                        return Err(format!("{op}: zero point shape differs from the scale's {sshape:?}"));
                    }
                    zp_in = Some(cx.repeat_blocks(z, axis, block as usize, xs[axis])?);
                }
                sshape = xs;
            }
            let zp = match zp_in {
                Some(z) => z,
                None => {
                    let dt = if op == "QuantizeLinear" {
                        match a.i("output_dtype", 0) {
                            0 => DType::U8,
                            t => dtype_from_onnx(t as i32)?,
                        }
                    } else {
                        cx.dtype(x)
                    };
                    let n: usize = sshape.iter().product();
                    let bytes = vec![0u8; dt.bytes_for(n).ok_or("bad zero point dtype")?];
                    cx.konst(ConstData { dtype: dt, shape: sshape.clone(), data: rlx_ir::Blob::from_vec(bytes) })
                }
            };
            let axis = if sshape.iter().product::<usize>() == 1 || block != 0 { 0 } else { norm_axis(a.i("axis", 1), cx.rank(x))? };
            let nq = if op == "QuantizeLinear" {
                narrow_of(cx, 2).or_else(|| Narrow::from_onnx(a.i("output_dtype", 0) as i32))
            } else {
                narrow_of(cx, 0)
            };
            if let Some(n) = nq {
                return narrow_q(cx, op == "QuantizeLinear", n, x, scale, zp, axis, a.i("saturate", 1) != 0);
            }
            let mop = if op == "QuantizeLinear" { MirOp::Quantize { axis } } else { MirOp::Dequantize { axis } };
            one(cx.prim(mop, &[x, scale, zp])?)
        }
        "DynamicQuantizeLinear" => {
            // uint8 with scale = (max(x, 0) − min(x, 0)) / 255 over the whole tensor and
            // zero point = saturate(round(−min / scale)) (ONNX DynamicQuantizeLinear).
            let x = req(0)?;
            let all: Vec<usize> = (0..cx.rank(x)).collect();
            let z = cx.sc(x, 0.0);
            let mn = cx.reduce(ReduceOp::Min, x, all.clone(), false)?;
            let mn = cx.bin(BinaryOp::Min, mn, z)?;
            let mx = cx.reduce(ReduceOp::Max, x, all, false)?;
            let mx = cx.bin(BinaryOp::Max, mx, z)?;
            let range = cx.bin(BinaryOp::Sub, mx, mn)?;
            let scale = cx.mul_sc(range, 1.0 / 255.0)?;
            let nm = cx.un(UnaryOp::Neg, mn)?;
            let zf = cx.bin(BinaryOp::Div, nm, scale)?;
            let lo = cx.sc(zf, 0.0);
            let hi = cx.sc(zf, 255.0);
            let zf = cx.bin(BinaryOp::Max, zf, lo)?;
            let zf = cx.bin(BinaryOp::Min, zf, hi)?;
            let zf = cx.un(UnaryOp::Round, zf)?;
            let zp = cx.cast(zf, DType::U8)?;
            let y = cx.prim(MirOp::Quantize { axis: 0 }, &[x, scale, zp])?;
            Ok(vec![y, scale, zp])
        }
        "MatMulInteger" | "QLinearMatMul" | "ConvInteger" | "QLinearConv" => {
            // Integer cores on the quantized primitives: operands widened to int32 minus their zero
            // points (per-tensor; per-row for MatMul's A, per-column for B, per-output-channel for
            // Conv's W), an int32 matmul / conv (+ int32 bias), and for the QLinear forms the
            // requantization `quantize(f32(acc) · (s_a·s_b / s_y), 1, y_zp)` — round half to even,
            // saturate (the ONNX reference).
            let qlinear = op.starts_with("QLinear");
            let conv = op.ends_with("Conv") || op == "ConvInteger";
            // Input positions: [a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp, bias] for QLinear*,
            // [a, b, a_zp, b_zp] for *Integer.
            let (ia, ib, iaz, ibz) = if qlinear { (0, 3, 2, 5) } else { (0, 1, 2, 3) };
            let (a0, b0) = (req(ia)?, req(ib)?);
            let rb = cx.rank(b0);
            let mut av = cx.cast(a0, DType::I32)?;
            if let Some(z) = inp(iaz) {
                let z = cx.cast(z, DType::I32)?;
                let per_row = !conv && cx.rank(z) == 1 && cx.dims(z)[0] != Dim::Fixed(1);
                let z = if per_row { cx.unsqueeze(z, &[1])? } else { z };
                av = cx.bin(BinaryOp::Sub, av, z)?;
            }
            let mut bv = cx.cast(b0, DType::I32)?;
            if let Some(z) = inp(ibz) {
                let z = cx.cast(z, DType::I32)?;
                let per_chan = conv && cx.rank(z) == 1 && cx.dims(z)[0] != Dim::Fixed(1);
                let z = if per_chan { cx.chan(z, rb + 1)? } else { z };
                bv = cx.bin(BinaryOp::Sub, bv, z)?;
            }
            let acc = if conv {
                let xd = cx.fixed_dims(a0, op)?;
                let wd = cx.fixed_dims(b0, &format!("{op} weight"))?;
                if xd.len() < 3 || wd.len() != xd.len() {
                    return Err(format!("input {:?} and weight {:?} must be [N,C,spatial…]", xd, wd));
                }
                let sp = xd.len() - 2;
                let strides = usizes(a.ints("strides"), sp, 1, "strides")?;
                let dil = usizes(a.ints("dilations"), sp, 1, "dilations")?;
                let groups = a.i("group", 1).max(1) as usize;
                let pads = auto_pads(&a, &xd[2..], &wd[2..], &strides, &dil)?;
                let mut cins = vec![av, bv];
                if qlinear {
                    if let Some(bias) = inp(8) {
                        cins.push(cx.cast(bias, DType::I32)?);
                    }
                }
                cx.prim(MirOp::Conv { strides, pads, dilations: dil, groups }, &cins)?
            } else {
                cx.prim(MirOp::MatMul, &[av, bv])?
            };
            if !qlinear {
                return one(acc);
            }
            let rank_out = cx.rank(acc);
            let scale = |cx: &mut Ctx, i: usize, per_row: bool| -> Result<ValueId, String> {
                let s = cx.cast(req(i)?, DType::F32)?;
                if cx.rank(s) == 1 && cx.dims(s)[0] != Dim::Fixed(1) {
                    if conv {
                        return cx.chan(s, rank_out);
                    }
                    if per_row {
                        return cx.unsqueeze(s, &[1]);
                    }
                }
                Ok(s)
            };
            let sa = scale(cx, 1, true)?;
            let sb = scale(cx, 4, false)?;
            let sy = scale(cx, 6, false)?;
            let m = cx.bin(BinaryOp::Mul, sa, sb)?;
            let m = cx.bin(BinaryOp::Div, m, sy)?;
            let f = cx.cast(acc, DType::F32)?;
            let d = cx.bin(BinaryOp::Mul, f, m)?;
            let yz = req(7)?;
            if dim_prod(&cx.dims(yz)) != Some(Dim::Fixed(1)) {
                return Err(format!("{op}: only a per-tensor y_zero_point is supported"));
            }
            let yz = cx.reshape(yz, vec![])?;
            let unit = cx.scalar(DType::F32, 1.0);
            one(cx.prim(MirOp::Quantize { axis: 0 }, &[d, unit, yz])?)
        }
        _ => Err(format!("unsupported op {op}")),
    }
}

/// QuantizeLinear / DequantizeLinear where the quantized side is a narrow type held in its carrier:
/// int4/int2 quantize through an i32 `quantize` clamped to the type's range; float8/float4 divide
/// by the scale and round to the format (`cast::to_float`, `saturate` as Cast's), dequantize as
/// (x − zero_point) · scale.
#[allow(clippy::too_many_arguments)]
fn narrow_q(cx: &mut Ctx, quantize: bool, n: Narrow, x: ValueId, scale: ValueId, zp: ValueId, axis: usize, saturate: bool) -> R {
    if let Some((lo, hi)) = n.int_range() {
        if !quantize {
            // A zero point of one element may come as [1] beside a scalar scale.
            let zp = if cx.dims(zp) != cx.dims(scale) && dim_prod(&cx.dims(zp)) == dim_prod(&cx.dims(scale)) {
                cx.reshape(zp, cx.dims(scale))?
            } else {
                zp
            };
            return one(cx.prim(MirOp::Dequantize { axis }, &[x, scale, zp])?);
        }
        let z = cx.cast(zp, DType::I32)?;
        let q = cx.prim(MirOp::Quantize { axis }, &[x, scale, z])?;
        let l = cx.scalar(DType::I32, lo as f64);
        let q = cx.bin(BinaryOp::Max, q, l)?;
        let h = cx.scalar(DType::I32, hi as f64);
        let q = cx.bin(BinaryOp::Min, q, h)?;
        let y = cx.cast(q, n.carrier())?;
        cx.narrow.insert(y, n);
        return one(y);
    }
    let ff = n.float().ok_or_else(|| format!("unsupported: quantization to {n:?}"))?;
    // A per-axis [C] scale / zero point broadcast along `axis` of x.
    let r = cx.rank(x);
    let along = |cx: &mut Ctx, v: ValueId| -> Result<ValueId, String> {
        let d = cx.dims(v);
        if d.len() == 1 && r > 1 && d[0] != Dim::Fixed(1) {
            let mut s = vec![Dim::Fixed(1); r];
            s[axis] = d[0].clone();
            cx.reshape(v, s)
        } else {
            Ok(v)
        }
    };
    let s = along(cx, scale)?;
    if quantize {
        let xs = cx.cast(x, cx.dtype(s))?;
        let t = cx.bin(BinaryOp::Div, xs, s)?;
        let y = super::cast::to_float(cx, t, &ff, saturate)?;
        cx.narrow.insert(y, n);
        return one(y);
    }
    // In f32 (f16/bf16 scales widen exactly), the result in the scale's dtype.
    let sdt = cx.dtype(s);
    let work = if sdt == DType::F64 { DType::F64 } else { DType::F32 };
    let xf = cx.cast(x, work)?;
    let z = along(cx, zp)?;
    let z = cx.cast(z, work)?;
    let d = cx.bin(BinaryOp::Sub, xf, z)?;
    let s = cx.cast(s, work)?;
    let y = cx.bin(BinaryOp::Mul, d, s)?;
    one(cx.cast(y, sdt)?)
}
