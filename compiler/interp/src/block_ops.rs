//! The ops that read block-quantized constants: `dequant_matmul` and `dequant_gather`. Weights are
//! dequantized one row at a time into a scratch row (never a whole f32 copy of the tensor); products
//! accumulate in f64, as `matmul` does.

use crate::blocks::dequantize;
use crate::tensor::{Buf, T};
use rlx_ir::{ConstData, DType};

/// Row `r` of a 2-D constant, dequantized into `row`.
fn weight_row(w: &ConstData, r: usize, row: &mut [f32]) -> Result<(), String> {
    let (n, size) = w.dtype.block();
    let cols = w.shape[1];
    let row_bytes = cols / n * size;
    let b = w.data.bytes();
    let bytes = b.get(r * row_bytes..(r + 1) * row_bytes).ok_or_else(|| format!("row {r} is outside the {} weight bytes", b.len()))?;
    dequantize(w.dtype, bytes, row)
}

fn check_weight(w: &ConstData) -> Result<(usize, usize), String> {
    match w.shape[..] {
        [r, c] if c % w.dtype.block().0 == 0 => Ok((r, c)),
        _ => Err(format!("weight {}{:?} must be 2-D with whole blocks per row", w.dtype, w.shape)),
    }
}

/// x[…,K] · wᵀ for w[N,K].
pub fn dequant_matmul(x: &T, w: &ConstData) -> Result<T, String> {
    let (n, k) = check_weight(w)?;
    let Buf::F(xv) = &x.data else { return Err(format!("input must be f32, got {}", x.dtype)) };
    if x.shape.last() != Some(&k) {
        return Err(format!("input {:?} does not end in the weight's {k} columns", x.shape));
    }
    let m = xv.len() / k.max(1);
    let mut out = vec![0f32; m * n];
    let mut row = vec![0f32; k];
    for j in 0..n {
        weight_row(w, j, &mut row)?;
        for i in 0..m {
            let xr = &xv[i * k..(i + 1) * k];
            let acc: f64 = xr.iter().zip(&row).map(|(&a, &b)| a as f64 * b as f64).sum();
            out[i * n + j] = acc as f32;
        }
    }
    let mut shape = x.shape.clone();
    *shape.last_mut().expect("rank >= 1") = n;
    Ok(T { dtype: DType::F32, shape, data: Buf::F(out) })
}

/// The dequantized rows `table[indices]`; negative indices count from the end.
pub fn dequant_gather(table: &ConstData, idx: &T) -> Result<T, String> {
    let (r, c) = check_weight(table)?;
    let mut out = vec![0f32; idx.data.len() * c];
    for (p, o) in out.chunks_exact_mut(c.max(1)).enumerate() {
        let i = idx.data.i(p);
        let row = if i < 0 { i + r as i64 } else { i };
        if row < 0 || row >= r as i64 {
            return Err(format!("index {i} at position {p} is out of range for {r} rows"));
        }
        weight_row(table, row as usize, o)?;
    }
    let mut shape = idx.shape.clone();
    shape.push(c);
    Ok(T { dtype: DType::F32, shape, data: Buf::F(out) })
}
