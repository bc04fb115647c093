//! The interpreter's tensor: dtype, concrete shape, and storage in one of three element types.

use rlx_ir::tensor::{decode_f64, decode_i64, encode_f64, encode_i64};
use rlx_ir::{Blob, ConstData, DType};
use std::cmp::Ordering;

#[derive(Clone, Debug, PartialEq)]
pub enum Buf {
    /// f32, f16, bf16 (the latter two hold values already rounded to their type).
    F(Vec<f32>),
    /// f64.
    D(Vec<f64>),
    /// All integer types and bool, wrapped to their width (u64 as the i64 bit pattern).
    I(Vec<i64>),
}

/// Applies an expression to the vector inside a `Buf`, rebuilding the same variant.
macro_rules! map_buf {
    ($buf:expr, $v:ident => $e:expr) => {
        match $buf {
            Buf::F($v) => Buf::F($e),
            Buf::D($v) => Buf::D($e),
            Buf::I($v) => Buf::I($e),
        }
    };
}
pub(crate) use map_buf;

impl Buf {
    pub fn len(&self) -> usize {
        match self {
            Buf::F(v) => v.len(),
            Buf::D(v) => v.len(),
            Buf::I(v) => v.len(),
        }
    }
    /// Element `i` as f64 (ints converted by value; u64 callers use `T::f`).
    #[inline]
    pub fn f(&self, i: usize) -> f64 {
        match self {
            Buf::F(v) => v[i] as f64,
            Buf::D(v) => v[i],
            Buf::I(v) => v[i] as f64,
        }
    }
    /// Element `i` as i64 (floats truncate).
    #[inline]
    pub fn i(&self, i: usize) -> i64 {
        match self {
            Buf::F(v) => v[i] as i64,
            Buf::D(v) => v[i] as i64,
            Buf::I(v) => v[i],
        }
    }
    /// Elements at `idx`, in order.
    pub fn take(&self, idx: &[usize]) -> Buf {
        map_buf!(self, v => idx.iter().map(|&i| v[i]).collect())
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct T {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Buf,
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major strides of a contiguous tensor.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Strides that read a contiguous `inp` as if broadcast to `out` (0 on broadcast axes).
pub fn bcast_strides(inp: &[usize], out: &[usize]) -> Vec<isize> {
    let s = strides(inp);
    let off = out.len() - inp.len();
    (0..out.len())
        .map(|d| if d < off || inp[d - off] == 1 && out[d] != 1 { 0 } else { s[d - off] as isize })
        .collect()
}

/// For every index of `shape` in row-major order, `base + sum(idx[d] * strides[d])`.
/// Built with an incrementing multi-index counter (no per-element allocation).
pub fn walk(shape: &[usize], strides: &[isize], base: isize) -> Vec<usize> {
    let n = numel(shape);
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return out;
    }
    let r = shape.len();
    let mut idx = vec![0usize; r];
    let mut off = base;
    for _ in 0..n {
        out.push(off as usize);
        let mut d = r;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            off += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            off -= strides[d] * shape[d] as isize;
            idx[d] = 0;
        }
    }
    out
}

/// Advances a row-major multi-index; returns false after the last index.
#[inline]
pub fn next_index(idx: &mut [usize], shape: &[usize]) -> bool {
    let mut d = idx.len();
    while d > 0 {
        d -= 1;
        idx[d] += 1;
        if idx[d] < shape[d] {
            return true;
        }
        idx[d] = 0;
    }
    false
}

/// Rounds an f64 to the storage value of a float dtype (round to nearest, ties to even).
///
/// f16/bf16 go through f32 with round-to-odd, which makes the second rounding correct (f32 keeps at least
/// two more bits than either); `half`'s direct f64 conversions ignore the low 32
/// mantissa bits when rounding, so they are not used.
#[inline]
pub fn round_f(dt: DType, x: f64) -> f32 {
    match dt {
        DType::F16 => half::f16::from_f32(f64_to_f32_odd(x)).to_f32(),
        DType::BF16 => half::bf16::from_f32(f64_to_f32_odd(x)).to_f32(),
        _ => x as f32,
    }
}

/// f64 → f32 rounding to odd: truncate toward zero and set the last bit when inexact.
#[inline]
fn f64_to_f32_odd(x: f64) -> f32 {
    let t = x as f32;
    if t as f64 == x || x.is_nan() {
        return t;
    }
    let mut t = if t.is_infinite() { f32::MAX.copysign(t) } else { t };
    if (t as f64).abs() > x.abs() {
        t = f32::from_bits(t.to_bits() - 1);
    }
    f32::from_bits(t.to_bits() | 1)
}

/// Wraps an i64 to the width of an integer (or bool) dtype.
#[inline]
pub fn wrap(dt: DType, x: i64) -> i64 {
    match dt {
        DType::I8 => x as i8 as i64,
        DType::U8 => x as u8 as i64,
        DType::I16 => x as i16 as i64,
        DType::U16 => x as u16 as i64,
        DType::I32 => x as i32 as i64,
        DType::U32 => x as u32 as i64,
        DType::Bool => (x != 0) as i64,
        _ => x,
    }
}

/// Orders two stored integers of `dt` (u64 compares unsigned).
#[inline]
pub fn icmp(dt: DType, a: i64, b: i64) -> Ordering {
    if dt == DType::U64 {
        (a as u64).cmp(&(b as u64))
    } else {
        a.cmp(&b)
    }
}

/// A stored integer of `dt` as f64 (u64 read unsigned).
#[inline]
pub fn i2f(dt: DType, x: i64) -> f64 {
    if dt == DType::U64 {
        x as u64 as f64
    } else {
        x as f64
    }
}

impl T {
    pub fn new(dtype: DType, shape: Vec<usize>, data: Buf) -> T {
        debug_assert_eq!(numel(&shape), data.len());
        T { dtype, shape, data }
    }
    pub fn numel(&self) -> usize {
        self.data.len()
    }
    pub fn is_float(&self) -> bool {
        self.dtype.is_float()
    }
    /// Element `i` as f64, reading u64 unsigned.
    #[inline]
    pub fn f(&self, i: usize) -> f64 {
        match &self.data {
            Buf::I(v) => i2f(self.dtype, v[i]),
            b => b.f(i),
        }
    }
    /// All elements as f64.
    pub fn to_f64(&self) -> Vec<f64> {
        match &self.data {
            Buf::F(v) => v.iter().map(|&x| x as f64).collect(),
            Buf::D(v) => v.clone(),
            Buf::I(v) => v.iter().map(|&x| i2f(self.dtype, x)).collect(),
        }
    }
    /// All elements as i64 (for index inputs).
    pub fn to_i64(&self) -> Vec<i64> {
        match &self.data {
            Buf::I(v) => v.clone(),
            b => (0..b.len()).map(|i| b.i(i)).collect(),
        }
    }
    /// Builds a tensor of `dt` from f64 values, rounding floats and converting ints (truncating, saturating).
    pub fn from_f64_fn(dt: DType, shape: Vec<usize>, mut f: impl FnMut(usize) -> f64) -> T {
        let n = numel(&shape);
        let data = match dt {
            DType::F64 => Buf::D((0..n).map(f).collect()),
            d if d.is_float() => Buf::F((0..n).map(|i| round_f(d, f(i))).collect()),
            d => Buf::I((0..n).map(|i| f64_to_int(d, f(i))).collect()),
        };
        T { dtype: dt, shape, data }
    }
    /// Builds an integer (or bool) tensor from i64 values, wrapping to the width.
    pub fn from_i64_fn(dt: DType, shape: Vec<usize>, mut f: impl FnMut(usize) -> i64) -> T {
        let n = numel(&shape);
        T { dtype: dt, shape, data: Buf::I((0..n).map(|i| wrap(dt, f(i))).collect()) }
    }

    pub fn from_const(c: &ConstData) -> Result<T, String> {
        let n = c.numel();
        let b = c.data.bytes();
        if c.dtype.is_quantized_block() {
            return Err(format!("block-quantized {} data cannot be executed elementwise", c.dtype));
        }
        if c.dtype.bytes_for(n) != Some(b.len()) {
            return Err(format!("{}{:?} data has {} bytes", c.dtype, c.shape, b.len()));
        }
        let data = match c.dtype {
            DType::F32 => Buf::F(b.chunks_exact(4).map(|x| f32::from_le_bytes([x[0], x[1], x[2], x[3]])).collect()),
            DType::F64 => Buf::D(b.chunks_exact(8).map(|x| f64::from_le_bytes(x.try_into().unwrap())).collect()),
            DType::I64 | DType::U64 => Buf::I(b.chunks_exact(8).map(|x| i64::from_le_bytes(x.try_into().unwrap())).collect()),
            DType::F16 | DType::BF16 => Buf::F((0..n).map(|i| decode_f64(c.dtype, b, i) as f32).collect()),
            d => Buf::I((0..n).map(|i| wrap(d, decode_i64(d, b, i))).collect()),
        };
        Ok(T { dtype: c.dtype, shape: c.shape.clone(), data })
    }

    pub fn to_const(&self) -> ConstData {
        let mut out = Vec::with_capacity(self.dtype.bytes_for(self.numel()).unwrap_or(0));
        match (&self.data, self.dtype) {
            (Buf::F(v), DType::F32) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            (Buf::F(v), d) => v.iter().for_each(|&x| encode_f64(d, x as f64, &mut out)),
            (Buf::D(v), d) => v.iter().for_each(|&x| encode_f64(d, x, &mut out)),
            (Buf::I(v), DType::I64 | DType::U64) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            (Buf::I(v), d) => v.iter().for_each(|&x| encode_i64(d, x, &mut out)),
        }
        ConstData { dtype: self.dtype, shape: self.shape.clone(), data: Blob::from_vec(out) }
    }
}

/// Float → integer (or bool) conversion: truncate toward zero, saturate to the type's range, NaN → 0;
/// to bool: x != 0.
#[inline]
pub fn f64_to_int(dt: DType, x: f64) -> i64 {
    match dt {
        DType::Bool => (x != 0.0) as i64,
        DType::I8 => x as i8 as i64,
        DType::U8 => x as u8 as i64,
        DType::I16 => x as i16 as i64,
        DType::U16 => x as u16 as i64,
        DType::I32 => x as i32 as i64,
        DType::U32 => x as u32 as i64,
        DType::U64 => x as u64 as i64,
        _ => x as i64,
    }
}
