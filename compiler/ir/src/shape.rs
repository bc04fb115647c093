//! Shapes with symbolic dimensions. A symbolic dim is a name (`batch`, `sequence`) that is fixed later
//! (`--dim batch=1`) or bound from the shapes of the inputs a graph is run with.

use std::collections::BTreeMap;
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    Fixed(u64),
    Sym(String),
}

impl Dim {
    pub fn fixed(&self) -> Option<u64> {
        match self {
            Dim::Fixed(n) => Some(*n),
            Dim::Sym(_) => None,
        }
    }
    pub fn sym(name: &str) -> Dim {
        Dim::Sym(name.to_string())
    }
    /// Substitutes a bound symbol.
    pub fn bind(&self, dims: &BTreeMap<String, u64>) -> Dim {
        match self {
            Dim::Sym(s) => dims.get(s).map(|&n| Dim::Fixed(n)).unwrap_or_else(|| self.clone()),
            d => d.clone(),
        }
    }
}

impl From<u64> for Dim {
    fn from(n: u64) -> Dim {
        Dim::Fixed(n)
    }
}
impl From<usize> for Dim {
    fn from(n: usize) -> Dim {
        Dim::Fixed(n as u64)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub Vec<Dim>);

impl Shape {
    pub fn fixed(dims: &[usize]) -> Shape {
        Shape(dims.iter().map(|&d| Dim::Fixed(d as u64)).collect())
    }
    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }
    pub fn rank(&self) -> usize {
        self.0.len()
    }
    pub fn dims(&self) -> &[Dim] {
        &self.0
    }
    /// All dims as numbers, if none is symbolic.
    pub fn as_fixed(&self) -> Option<Vec<usize>> {
        self.0.iter().map(|d| d.fixed().map(|n| n as usize)).collect()
    }
    pub fn is_static(&self) -> bool {
        self.0.iter().all(|d| matches!(d, Dim::Fixed(_)))
    }
    /// Element count, when static and it fits in usize.
    pub fn numel(&self) -> Option<usize> {
        let mut n: usize = 1;
        for d in &self.0 {
            n = n.checked_mul(usize::try_from(d.fixed()?).ok()?)?;
        }
        Some(n)
    }
    /// Product of the fixed dims (symbols skipped), or None when it overflows u64.
    pub fn fixed_product(&self) -> Option<u64> {
        self.0.iter().filter_map(Dim::fixed).try_fold(1u64, |a, d| a.checked_mul(d))
    }
    pub fn symbols(&self) -> Vec<String> {
        self.0
            .iter()
            .filter_map(|d| match d {
                Dim::Sym(s) => Some(s.clone()),
                _ => None,
            })
            .collect()
    }
    pub fn bind(&self, dims: &BTreeMap<String, u64>) -> Shape {
        Shape(self.0.iter().map(|d| d.bind(dims)).collect())
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// Numpy-style broadcasting of two shapes. Symbolic dims broadcast with 1 and with an equal symbol.
pub fn broadcast(a: &Shape, b: &Shape) -> Result<Shape, String> {
    let r = a.rank().max(b.rank());
    let mut out = Vec::with_capacity(r);
    for i in 0..r {
        let da = if i + a.rank() >= r { Some(&a.0[i + a.rank() - r]) } else { None };
        let db = if i + b.rank() >= r { Some(&b.0[i + b.rank() - r]) } else { None };
        let d = match (da, db) {
            (Some(x), None) | (None, Some(x)) => x.clone(),
            (Some(x), Some(y)) => match (x, y) {
                (Dim::Fixed(1), y) => y.clone(),
                (x, Dim::Fixed(1)) => x.clone(),
                (x, y) if x == y => x.clone(),
                _ => return Err(format!("shapes {a} and {b} do not broadcast (axis {i}: {x} vs {y})")),
            },
            (None, None) => unreachable!(),
        };
        out.push(d);
    }
    Ok(Shape(out))
}

/// Concrete broadcasting for runtime shapes.
pub fn broadcast_fixed(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for i in 0..r {
        let da = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
        let db = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(format!("shapes {a:?} and {b:?} do not broadcast"));
        };
    }
    Ok(out)
}

/// The type of a value: element type and shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: crate::DType,
    pub shape: Shape,
}

impl TensorType {
    pub fn new(dtype: crate::DType, shape: Shape) -> Self {
        TensorType { dtype, shape }
    }
    pub fn fixed(dtype: crate::DType, dims: &[usize]) -> Self {
        TensorType { dtype, shape: Shape::fixed(dims) }
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}
