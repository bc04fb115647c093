//! Constant tensor data: raw little-endian bytes plus dtype and shape. Weights stay in this form from the
//! importer to the weights blob; the bytes may be borrowed from a memory-mapped file.

use crate::DType;
use std::fmt;
use std::sync::Arc;

/// Shared, immutable bytes. Cloning is cheap; the backing store may be a `Vec<u8>` or a file mapping.
#[derive(Clone)]
pub struct Blob {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    start: usize,
    len: usize,
}

impl Blob {
    pub fn from_vec(v: Vec<u8>) -> Blob {
        let len = v.len();
        Blob { owner: Arc::new(v), start: 0, len }
    }
    /// A window into a shared owner (e.g. a memory map). Returns `None` if the range is out of bounds.
    pub fn from_owner(owner: Arc<dyn AsRef<[u8]> + Send + Sync>, start: usize, len: usize) -> Option<Blob> {
        let total = (*owner).as_ref().len();
        let end = start.checked_add(len)?;
        (end <= total).then_some(Blob { owner, start, len })
    }
    pub fn bytes(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.start..self.start + self.len]
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl PartialEq for Blob {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}

impl fmt::Debug for Blob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Blob({} bytes)", self.len)
    }
}

/// A constant tensor with a static shape.
#[derive(Clone, Debug, PartialEq)]
pub struct ConstData {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Blob,
}

impl ConstData {
    /// Checks that the byte length matches dtype and shape.
    pub fn new(dtype: DType, shape: Vec<usize>, data: Blob) -> Result<ConstData, String> {
        let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or("element count overflows")?;
        let want = dtype.bytes_for(numel).ok_or_else(|| format!("{numel} elements is not a whole number of {dtype} blocks"))?;
        if want != data.len() {
            return Err(format!("{dtype}{shape:?} needs {want} bytes, got {}", data.len()));
        }
        Ok(ConstData { dtype, shape, data })
    }
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn from_f32(shape: Vec<usize>, v: &[f32]) -> ConstData {
        assert_eq!(shape.iter().product::<usize>(), v.len(), "from_f32: shape/data mismatch");
        let mut b = Vec::with_capacity(v.len() * 4);
        for x in v {
            b.extend_from_slice(&x.to_le_bytes());
        }
        ConstData { dtype: DType::F32, shape, data: Blob::from_vec(b) }
    }
    pub fn from_i64(shape: Vec<usize>, v: &[i64]) -> ConstData {
        assert_eq!(shape.iter().product::<usize>(), v.len(), "from_i64: shape/data mismatch");
        let mut b = Vec::with_capacity(v.len() * 8);
        for x in v {
            b.extend_from_slice(&x.to_le_bytes());
        }
        ConstData { dtype: DType::I64, shape, data: Blob::from_vec(b) }
    }
    /// A scalar of any plain dtype, from an f64 value (rounded/wrapped to the dtype).
    pub fn scalar(dtype: DType, v: f64) -> ConstData {
        Self::from_f64s(dtype, vec![], &[v])
    }
    /// Encodes values of any plain dtype from f64 (floats rounded to nearest, ints truncated and wrapped).
    pub fn from_f64s(dtype: DType, shape: Vec<usize>, v: &[f64]) -> ConstData {
        let mut b = Vec::with_capacity(v.len() * dtype.size().unwrap_or(1));
        for &x in v {
            encode_f64(dtype, x, &mut b);
        }
        ConstData { dtype, shape, data: Blob::from_vec(b) }
    }
    /// Element `i` as f64, for plain dtypes. (u64 above 2^53 and i64 above 2^53 lose precision.)
    pub fn get_f64(&self, i: usize) -> f64 {
        decode_f64(self.dtype, self.data.bytes(), i)
    }
    /// Element `i` as i64, for integer and bool dtypes (floats truncate).
    pub fn get_i64(&self, i: usize) -> i64 {
        decode_i64(self.dtype, self.data.bytes(), i)
    }
    pub fn to_f64_vec(&self) -> Vec<f64> {
        (0..self.numel()).map(|i| self.get_f64(i)).collect()
    }
    pub fn to_i64_vec(&self) -> Vec<i64> {
        (0..self.numel()).map(|i| self.get_i64(i)).collect()
    }
    /// Stable 64-bit FNV-1a hash of dtype, shape and bytes (for dedup and text-form summaries).
    pub fn fingerprint(&self) -> u64 {
        let mut h: u64 = 0xcbf29ce484222325;
        let mut eat = |b: &[u8]| {
            for &x in b {
                h ^= x as u64;
                h = h.wrapping_mul(0x100000001b3);
            }
        };
        eat(self.dtype.name().as_bytes());
        for d in &self.shape {
            eat(&(*d as u64).to_le_bytes());
        }
        eat(self.data.bytes());
        h
    }
}

pub fn decode_f64(dtype: DType, b: &[u8], i: usize) -> f64 {
    match dtype {
        DType::F32 => f32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().unwrap()) as f64,
        DType::F64 => f64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap()),
        DType::F16 => half::f16::from_bits(u16::from_le_bytes([b[i * 2], b[i * 2 + 1]])).to_f64(),
        DType::BF16 => half::bf16::from_bits(u16::from_le_bytes([b[i * 2], b[i * 2 + 1]])).to_f64(),
        DType::U64 => u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap()) as f64,
        _ => decode_i64(dtype, b, i) as f64,
    }
}

pub fn decode_i64(dtype: DType, b: &[u8], i: usize) -> i64 {
    match dtype {
        DType::I8 => b[i] as i8 as i64,
        DType::U8 | DType::Bool => b[i] as i64,
        DType::I16 => i16::from_le_bytes([b[i * 2], b[i * 2 + 1]]) as i64,
        DType::U16 => u16::from_le_bytes([b[i * 2], b[i * 2 + 1]]) as i64,
        DType::I32 => i32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().unwrap()) as i64,
        DType::U32 => u32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().unwrap()) as i64,
        DType::I64 => i64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap()),
        DType::U64 => u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap()) as i64,
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => decode_f64(dtype, b, i) as i64,
        _ => panic!("decode of block-quantized {dtype} is elementwise-undefined"),
    }
}

/// Appends `x` encoded as `dtype`. Floats round to nearest; ints truncate toward zero and wrap.
pub fn encode_f64(dtype: DType, x: f64, out: &mut Vec<u8>) {
    match dtype {
        DType::F32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
        DType::F64 => out.extend_from_slice(&x.to_le_bytes()),
        DType::F16 => out.extend_from_slice(&half::f16::from_f64(x).to_bits().to_le_bytes()),
        DType::BF16 => out.extend_from_slice(&half::bf16::from_f64(x).to_bits().to_le_bytes()),
        DType::Bool => out.push((x != 0.0) as u8),
        DType::U64 => out.extend_from_slice(&(x as u64).to_le_bytes()),
        _ => encode_i64(dtype, x as i64, out),
    }
}

/// Appends `x` encoded as `dtype`, wrapping to the integer width.
pub fn encode_i64(dtype: DType, x: i64, out: &mut Vec<u8>) {
    match dtype {
        DType::I8 | DType::U8 => out.push(x as u8),
        DType::Bool => out.push((x != 0) as u8),
        DType::I16 | DType::U16 => out.extend_from_slice(&(x as u16).to_le_bytes()),
        DType::I32 | DType::U32 => out.extend_from_slice(&(x as u32).to_le_bytes()),
        DType::I64 | DType::U64 => out.extend_from_slice(&x.to_le_bytes()),
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => encode_f64(dtype, x as f64, out),
        _ => panic!("encode of block-quantized {dtype} is elementwise-undefined"),
    }
}
