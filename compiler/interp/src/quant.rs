//! Affine quantization: quantize, dequantize, fake-quantize (ONNX QuantizeLinear / DequantizeLinear).
//! Arithmetic is in f32 (the ONNX reference's precision): q = saturate(round_half_even(x / s) + zp),
//! x' = (q - zp) * s.

use crate::tensor::{round_f, strides, Buf, T};
use rlx_ir::DType;

fn range(dt: DType) -> (i64, i64) {
    dt.int_range().unwrap_or((i64::MIN, i64::MAX))
}

/// Channel of each element: per-tensor → 0; per-element (scale of x's shape) → the element itself;
/// per-channel → the index along `axis`.
fn channel(x: &T, scale: &T, axis: usize) -> impl Fn(usize) -> usize {
    let per_element = scale.numel() != 1 && scale.shape == x.shape;
    let per_channel = scale.numel() != 1 && !per_element;
    let st = if per_channel {
        strides(&x.shape)[axis]
    } else {
        1
    };
    let c = if per_channel { x.shape[axis] } else { 1 };
    move |i| if per_element { i } else if per_channel { (i / st) % c } else { 0 }
}

fn quant_one(x: f32, s: f32, zp: i64, dt: DType) -> i64 {
    let (lo, hi) = range(dt);
    let r = (x / s).round_ties_even();
    if r.is_nan() {
        return zp.clamp(lo, hi);
    }
    ((r as f64) as i64).saturating_add(zp).clamp(lo, hi)
}

pub fn quantize(x: &T, scale: &T, zp: &T, axis: usize, fake: bool) -> Result<T, String> {
    let ch = channel(x, scale, axis);
    let n = x.numel();
    let q: Vec<i64> = (0..n)
        .map(|i| {
            let c = ch(i);
            quant_one(x.f(i) as f32, scale.f(c) as f32, zp.data.i(c), zp.dtype)
        })
        .collect();
    if !fake {
        return Ok(T::new(zp.dtype, x.shape.clone(), Buf::I(q)));
    }
    let v: Vec<f32> = (0..n)
        .map(|i| {
            let c = ch(i);
            round_f(
                x.dtype,
                (((q[i] - zp.data.i(c)) as f32) * scale.f(c) as f32) as f64,
            )
        })
        .collect();
    Ok(T::new(
        x.dtype,
        x.shape.clone(),
        if x.dtype == DType::F64 {
            Buf::D(v.iter().map(|&f| f as f64).collect())
        } else {
            Buf::F(v)
        },
    ))
}

pub fn dequantize(q: &T, scale: &T, zp: &T, axis: usize) -> Result<T, String> {
    let ch = channel(q, scale, axis);
    let v: Vec<f32> = (0..q.numel())
        .map(|i| {
            let c = ch(i);
            round_f(
                scale.dtype,
                (((q.data.i(i) - zp.data.i(c)) as f32) * scale.f(c) as f32) as f64,
            )
        })
        .collect();
    Ok(T::new(
        scale.dtype,
        q.shape.clone(),
        if scale.dtype == DType::F64 {
            Buf::D(v.iter().map(|&f| f as f64).collect())
        } else {
            Buf::F(v)
        },
    ))
}
