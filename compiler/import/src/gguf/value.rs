//! GGUF metadata values, in our own type so that callers need not know the reader crate.

use gguf_rs_lib::format::metadata::MetadataValue as M;
use std::fmt;

#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
    Str(String),
    Array(Vec<GgufValue>),
}

impl GgufValue {
    pub(crate) fn from_lib(v: &M) -> GgufValue {
        match v {
            M::U8(x) => GgufValue::UInt(*x as u64),
            M::U16(x) => GgufValue::UInt(*x as u64),
            M::U32(x) => GgufValue::UInt(*x as u64),
            M::U64(x) => GgufValue::UInt(*x),
            M::I8(x) => GgufValue::Int(*x as i64),
            M::I16(x) => GgufValue::Int(*x as i64),
            M::I32(x) => GgufValue::Int(*x as i64),
            M::I64(x) => GgufValue::Int(*x),
            M::F32(x) => GgufValue::Float(*x as f64),
            M::F64(x) => GgufValue::Float(*x),
            M::Bool(x) => GgufValue::Bool(*x),
            M::String(s) => GgufValue::Str(s.clone()),
            M::Array(a) => GgufValue::Array(a.values.iter().map(GgufValue::from_lib).collect()),
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::Str(s) => Some(s),
            _ => None,
        }
    }
    /// A non-negative integer value.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            GgufValue::UInt(x) => Some(*x),
            GgufValue::Int(x) => u64::try_from(*x).ok(),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            GgufValue::Float(x) => Some(*x),
            GgufValue::UInt(x) => Some(*x as f64),
            GgufValue::Int(x) => Some(*x as f64),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            GgufValue::Bool(b) => Some(*b),
            _ => None,
        }
    }
}

impl fmt::Display for GgufValue {
    /// Scalars as themselves; arrays as their length and first few items.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GgufValue::Int(x) => write!(f, "{x}"),
            GgufValue::UInt(x) => write!(f, "{x}"),
            GgufValue::Float(x) => write!(f, "{x}"),
            GgufValue::Bool(x) => write!(f, "{x}"),
            GgufValue::Str(s) => write!(f, "{s:?}"),
            GgufValue::Array(a) => {
                write!(f, "[{} items", a.len())?;
                for (i, v) in a.iter().take(4).enumerate() {
                    write!(f, "{}{v}", if i == 0 { ": " } else { ", " })?;
                }
                f.write_str(if a.len() > 4 { ", …]" } else { "]" })
            }
        }
    }
}
