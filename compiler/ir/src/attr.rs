//! Attribute values of the text form, and lenient accessors used by `OpSet::from_parts`.

use crate::{DType, Dim};
use std::fmt;

#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    Int(i64),
    Float(f64),
    Bool(bool),
    Ints(Vec<i64>),
    Floats(Vec<f64>),
    Dims(Vec<Dim>),
    DType(DType),
    Str(String),
}

fn write_f64(f: &mut fmt::Formatter<'_>, x: f64) -> fmt::Result {
    // Debug for f64 is the shortest representation that round-trips, and always has '.', 'e', "inf" or "NaN".
    write!(f, "{x:?}")
}

impl fmt::Display for Attr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attr::Int(i) => write!(f, "{i}"),
            Attr::Float(x) => write_f64(f, *x),
            Attr::Bool(b) => write!(f, "{b}"),
            Attr::Ints(v) => {
                f.write_str("[")?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{x}")?;
                }
                f.write_str("]")
            }
            Attr::Floats(v) => {
                f.write_str("f[")?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write_f64(f, *x)?;
                }
                f.write_str("]")
            }
            Attr::Dims(v) => {
                f.write_str("[")?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{x}")?;
                }
                f.write_str("]")
            }
            Attr::DType(d) => write!(f, "{d}"),
            Attr::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// Lookup helpers for `from_parts`. Each returns a message naming the attribute on failure.
pub struct Attrs<'a>(pub &'a [(String, Attr)]);

impl<'a> Attrs<'a> {
    fn get(&self, k: &str) -> Result<&'a Attr, String> {
        self.0.iter().find(|(n, _)| n == k).map(|(_, a)| a).ok_or_else(|| format!("missing attribute '{k}'"))
    }
    pub fn int(&self, k: &str) -> Result<i64, String> {
        match self.get(k)? {
            Attr::Int(i) => Ok(*i),
            a => Err(format!("attribute '{k}': expected an integer, got {a}")),
        }
    }
    pub fn usize(&self, k: &str) -> Result<usize, String> {
        let i = self.int(k)?;
        usize::try_from(i).map_err(|_| format!("attribute '{k}': expected a non-negative integer, got {i}"))
    }
    pub fn float(&self, k: &str) -> Result<f64, String> {
        match self.get(k)? {
            Attr::Float(x) => Ok(*x),
            Attr::Int(i) => Ok(*i as f64),
            a => Err(format!("attribute '{k}': expected a number, got {a}")),
        }
    }
    pub fn bool(&self, k: &str) -> Result<bool, String> {
        match self.get(k)? {
            Attr::Bool(b) => Ok(*b),
            a => Err(format!("attribute '{k}': expected true/false, got {a}")),
        }
    }
    pub fn ints(&self, k: &str) -> Result<Vec<i64>, String> {
        match self.get(k)? {
            Attr::Ints(v) => Ok(v.clone()),
            Attr::Dims(v) if v.is_empty() => Ok(vec![]),
            Attr::Floats(v) if v.is_empty() => Ok(vec![]),
            a => Err(format!("attribute '{k}': expected a list of integers, got {a}")),
        }
    }
    pub fn usizes(&self, k: &str) -> Result<Vec<usize>, String> {
        self.ints(k)?
            .into_iter()
            .map(|i| usize::try_from(i).map_err(|_| format!("attribute '{k}': negative entry {i}")))
            .collect()
    }
    pub fn floats(&self, k: &str) -> Result<Vec<f64>, String> {
        match self.get(k)? {
            Attr::Floats(v) => Ok(v.clone()),
            Attr::Ints(v) => Ok(v.iter().map(|&i| i as f64).collect()),
            a => Err(format!("attribute '{k}': expected a list of numbers, got {a}")),
        }
    }
    pub fn dims(&self, k: &str) -> Result<Vec<Dim>, String> {
        match self.get(k)? {
            Attr::Dims(v) => Ok(v.clone()),
            Attr::Ints(v) => v
                .iter()
                .map(|&i| u64::try_from(i).map(Dim::Fixed).map_err(|_| format!("attribute '{k}': negative dim {i}")))
                .collect(),
            a => Err(format!("attribute '{k}': expected a list of dims, got {a}")),
        }
    }
    pub fn dtype(&self, k: &str) -> Result<DType, String> {
        match self.get(k)? {
            Attr::DType(d) => Ok(*d),
            a => Err(format!("attribute '{k}': expected a dtype, got {a}")),
        }
    }
    pub fn str(&self, k: &str) -> Result<String, String> {
        match self.get(k)? {
            Attr::Str(s) => Ok(s.clone()),
            a => Err(format!("attribute '{k}': expected a string, got {a}")),
        }
    }
}

/// Dims as an attribute: `Ints` when all are fixed (so the text form stays plain), `Dims` otherwise.
pub fn dims_attr(d: &[Dim]) -> Attr {
    match d.iter().map(|x| x.fixed().map(|n| n as i64)).collect::<Option<Vec<i64>>>() {
        Some(v) => Attr::Ints(v),
        None => Attr::Dims(d.to_vec()),
    }
}
pub fn usizes_attr(v: &[usize]) -> Attr {
    Attr::Ints(v.iter().map(|&x| x as i64).collect())
}
