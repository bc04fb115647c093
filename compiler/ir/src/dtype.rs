//! Element types. Quantized block types (GGUF-style) have a block size and a byte size per block.

use std::fmt;

/// GGUF's own names (`Q4_K`) are kept for the block types.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    BF16,
    F64,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    Bool,
    /// GGUF Q8_0: blocks of 32 values, one f16 scale + 32 i8 (34 bytes).
    Q8_0,
    /// GGUF Q4_0: blocks of 32 values, one f16 scale + 16 bytes of nibbles (18 bytes).
    Q4_0,
    /// GGUF Q4_1: blocks of 32, f16 scale + f16 min + 16 bytes of nibbles (20 bytes).
    Q4_1,
    /// GGUF Q5_0: blocks of 32, f16 scale + 4 bytes of high bits + 16 bytes of nibbles (22 bytes).
    Q5_0,
    /// GGUF Q5_1: blocks of 32, f16 scale + f16 min + 4 bytes of high bits + 16 of nibbles (24 bytes).
    Q5_1,
    /// GGUF Q2_K: super-blocks of 256, 16 sub-blocks with 4-bit scales/mins, 2-bit values (84 bytes).
    Q2_K,
    /// GGUF Q3_K: super-blocks of 256, 16 sub-blocks with 6-bit scales, 3-bit values (110 bytes).
    Q3_K,
    /// GGUF Q4_K: super-blocks of 256, 8 sub-blocks with 6-bit scales/mins, 4-bit values (144 bytes).
    Q4_K,
    /// GGUF Q5_K: super-blocks of 256, 8 sub-blocks with 6-bit scales/mins, 5-bit values (176 bytes).
    Q5_K,
    /// GGUF Q6_K: super-blocks of 256, 16 sub-blocks with 8-bit scales, 6-bit values (210 bytes).
    Q6_K,
}

/// The GGUF block types (every `DType` that `is_quantized_block`).
pub const BLOCK_DTYPES: [DType; 10] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
];

pub const ALL_DTYPES: [DType; 23] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::F64,
    DType::I8,
    DType::U8,
    DType::I16,
    DType::U16,
    DType::I32,
    DType::U32,
    DType::I64,
    DType::U64,
    DType::Bool,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
];

impl DType {
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::U64 => "u64",
            DType::Bool => "bool",
            DType::Q8_0 => "q8_0",
            DType::Q4_0 => "q4_0",
            DType::Q4_1 => "q4_1",
            DType::Q5_0 => "q5_0",
            DType::Q5_1 => "q5_1",
            DType::Q2_K => "q2_k",
            DType::Q3_K => "q3_k",
            DType::Q4_K => "q4_k",
            DType::Q5_K => "q5_k",
            DType::Q6_K => "q6_k",
        }
    }

    pub fn parse(s: &str) -> Option<DType> {
        ALL_DTYPES.iter().copied().find(|d| d.name() == s)
    }

    /// (values per block, bytes per block). Plain types have blocks of one value.
    pub fn block(self) -> (usize, usize) {
        match self {
            DType::F32 | DType::I32 | DType::U32 => (1, 4),
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => (1, 2),
            DType::F64 | DType::I64 | DType::U64 => (1, 8),
            DType::I8 | DType::U8 | DType::Bool => (1, 1),
            DType::Q8_0 => (32, 34),
            DType::Q4_0 => (32, 18),
            DType::Q4_1 => (32, 20),
            DType::Q5_0 => (32, 22),
            DType::Q5_1 => (32, 24),
            DType::Q2_K => (256, 84),
            DType::Q3_K => (256, 110),
            DType::Q4_K => (256, 144),
            DType::Q5_K => (256, 176),
            DType::Q6_K => (256, 210),
        }
    }

    /// Bytes per element for plain types; `None` for block-quantized types.
    pub fn size(self) -> Option<usize> {
        let (n, b) = self.block();
        (n == 1).then_some(b)
    }

    /// Bytes needed for `elems` values, or `None` on overflow or a partial block.
    pub fn bytes_for(self, elems: usize) -> Option<usize> {
        let (n, b) = self.block();
        if elems % n != 0 {
            return None;
        }
        (elems / n).checked_mul(b)
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }
    pub fn is_int(self) -> bool {
        matches!(
            self,
            DType::I8 | DType::U8 | DType::I16 | DType::U16 | DType::I32 | DType::U32 | DType::I64 | DType::U64
        )
    }
    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }
    pub fn is_quantized_block(self) -> bool {
        self.block().0 > 1
    }
    /// The smallest and largest value of an integer (or bool) dtype, for those whose range is an i64
    /// range (not u64, not floats).
    pub fn int_range(self) -> Option<(i64, i64)> {
        Some(match self {
            DType::Bool => (0, 1),
            DType::I8 => (i8::MIN as i64, i8::MAX as i64),
            DType::U8 => (0, u8::MAX as i64),
            DType::I16 => (i16::MIN as i64, i16::MAX as i64),
            DType::U16 => (0, u16::MAX as i64),
            DType::I32 => (i32::MIN as i64, i32::MAX as i64),
            DType::U32 => (0, u32::MAX as i64),
            DType::I64 => (i64::MIN, i64::MAX),
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
