//! ONNX's narrow element types — float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz), float4e2m1, int4/uint4,
//! int2/uint2 — which the IR has no dtype for. They are read *widened* into a carrier dtype that holds
//! every value exactly (float8/float4 → f32, int4/int2 → i8, uint4/uint2 → u8); a cast *to* one of
//! them becomes arithmetic that rounds to the values the narrow type can hold (`ops/cast.rs`).
//! This file holds the type table and the decoding of their packed bytes.

use super::proto::tensor_proto::DataType;
use rlx_ir::DType;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Narrow {
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
    F4E2M1,
    I4,
    U4,
    I2,
    U2,
}

/// A narrow float format: exponent bias, mantissa bits, largest finite value, and what a NaN /
/// infinity / overflow becomes.
pub(crate) struct FloatFormat {
    pub bias: i32,
    pub mant: i32,
    pub max: f64,
    /// Largest exponent of a normal value.
    pub emax: i32,
    /// Infinities exist (e5m2 only): a non-saturating overflow is ±inf, not NaN.
    pub has_inf: bool,
    /// NaN exists (float4e2m1 has none: NaN becomes 0, overflow always saturates).
    pub has_nan: bool,
    /// NaN is the one byte 0x80 and there is no -0 (the `fnuz` formats).
    pub uz: bool,
}

impl Narrow {
    pub fn from_onnx(t: i32) -> Option<Narrow> {
        Some(match DataType::try_from(t).ok()? {
            DataType::Float8e4m3fn => Narrow::F8E4M3FN,
            DataType::Float8e4m3fnuz => Narrow::F8E4M3FNUZ,
            DataType::Float8e5m2 => Narrow::F8E5M2,
            DataType::Float8e5m2fnuz => Narrow::F8E5M2FNUZ,
            DataType::Float4e2m1 => Narrow::F4E2M1,
            DataType::Int4 => Narrow::I4,
            DataType::Uint4 => Narrow::U4,
            DataType::Int2 => Narrow::I2,
            DataType::Uint2 => Narrow::U2,
            _ => return None,
        })
    }

    /// The IR dtype its values are held in (every value exactly).
    pub fn carrier(self) -> DType {
        match self {
            Narrow::I4 | Narrow::I2 => DType::I8,
            Narrow::U4 | Narrow::U2 => DType::U8,
            _ => DType::F32,
        }
    }

    /// Bits per element in a packed tensor.
    pub fn bits(self) -> usize {
        match self {
            Narrow::I2 | Narrow::U2 => 2,
            Narrow::I4 | Narrow::U4 | Narrow::F4E2M1 => 4,
            _ => 8,
        }
    }

    /// The integer range of int4/uint4/int2/uint2.
    pub fn int_range(self) -> Option<(i64, i64)> {
        match self {
            Narrow::I4 => Some((-8, 7)),
            Narrow::U4 => Some((0, 15)),
            Narrow::I2 => Some((-2, 1)),
            Narrow::U2 => Some((0, 3)),
            _ => None,
        }
    }

    pub fn float(self) -> Option<FloatFormat> {
        let f = |bias, mant, emax, max, has_inf, has_nan, uz| FloatFormat { bias, mant, emax, max, has_inf, has_nan, uz };
        Some(match self {
            Narrow::F8E4M3FN => f(7, 3, 8, 448.0, false, true, false),
            Narrow::F8E4M3FNUZ => f(8, 3, 7, 240.0, false, true, true),
            Narrow::F8E5M2 => f(15, 2, 15, 57344.0, true, true, false),
            Narrow::F8E5M2FNUZ => f(16, 2, 15, 57344.0, false, true, true),
            Narrow::F4E2M1 => f(1, 1, 2, 6.0, false, false, false),
            _ => return None,
        })
    }

    /// Bytes a packed tensor of `numel` elements occupies.
    pub fn packed_len(self, numel: usize) -> usize {
        numel.div_ceil(8 / self.bits())
    }

    /// The `i`-th element's bit pattern (low bits first within a byte, as ONNX packs them).
    fn code(self, packed: &[u8], i: usize) -> u8 {
        let per = 8 / self.bits();
        let shift = (i % per) * self.bits();
        (packed[i / per] >> shift) & ((1u16 << self.bits()) - 1) as u8
    }

    /// One element's value.
    fn value(self, code: u8) -> f64 {
        if let Some((lo, _)) = self.int_range() {
            let bits = self.bits() as u32;
            let v = code as i64;
            return (if lo < 0 && v >= 1 << (bits - 1) { v - (1 << bits) } else { v }) as f64;
        }
        let Some(ff) = self.float() else { return 0.0 };
        let ebits = self.bits() as i32 - 1 - ff.mant;
        let sign = if code >> (self.bits() - 1) & 1 == 1 { -1.0 } else { 1.0 };
        let e = (code as i32 >> ff.mant) & ((1 << ebits) - 1);
        let m = code as i32 & ((1 << ff.mant) - 1);
        if ff.uz && code == 0x80 {
            return f64::NAN;
        }
        if ff.has_inf && e == (1 << ebits) - 1 {
            return if m == 0 { sign * f64::INFINITY } else { f64::NAN };
        }
        if !ff.uz && ff.has_nan && !ff.has_inf && e == (1 << ebits) - 1 && m == (1 << ff.mant) - 1 {
            return f64::NAN;
        }
        let frac = m as f64 / (1 << ff.mant) as f64;
        if e == 0 {
            sign * frac * 2f64.powi(1 - ff.bias)
        } else {
            sign * (1.0 + frac) * 2f64.powi(e - ff.bias)
        }
    }

    /// Widens `numel` packed elements into the carrier's little-endian bytes. `packed` must hold
    /// `packed_len(numel)` bytes (checked by the caller).
    pub fn widen(self, packed: &[u8], numel: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(numel * self.carrier().size().unwrap_or(1));
        for i in 0..numel {
            let v = self.value(self.code(packed, i));
            match self.carrier() {
                DType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
                _ => out.push(v as i64 as u8),
            }
        }
        out
    }
}
