//! Graph-building helpers every op family uses: axis normalization, dim products, and the `Ctx`
//! shorthands (elementwise ops with scalars, reshape, transpose, cast, reduce, unsqueeze, per-channel
//! parameters, softmax).

use crate::onnx::Ctx;
use rlx_ir::{BinaryOp, DType, Dim, HirOp, MirOp, ReduceOp, UnaryOp, ValueId};

pub(crate) fn norm_axis(a: i64, r: usize) -> Result<usize, String> {
    let x = if a < 0 { a + r as i64 } else { a };
    if x < 0 || x >= r as i64 {
        return Err(format!("axis {a} out of range for rank {r}"));
    }
    Ok(x as usize)
}

pub(super) fn norm_axes(v: &[i64], r: usize) -> Result<Vec<usize>, String> {
    let mut out = v.iter().map(|&a| norm_axis(a, r)).collect::<Result<Vec<_>, _>>()?;
    out.sort();
    out.dedup();
    Ok(out)
}

/// Product of dims: fixed if all fixed; the symbol itself if exactly one symbol and the rest multiply to 1.
pub(super) fn dim_prod(ds: &[Dim]) -> Option<Dim> {
    let mut f = 1u64;
    let mut sym = None;
    for d in ds {
        match d {
            Dim::Fixed(n) => f = f.checked_mul(*n)?,
            Dim::Sym(_) if sym.is_none() => sym = Some(d.clone()),
            _ => return None,
        }
    }
    match sym {
        None => Some(Dim::Fixed(f)),
        Some(s) if f == 1 => Some(s),
        _ => None,
    }
}

impl<'a> Ctx<'a> {
    pub(super) fn bin(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> Result<ValueId, String> {
        self.prim(MirOp::Binary(op), &[a, b])
    }
    pub(super) fn un(&mut self, op: UnaryOp, a: ValueId) -> Result<ValueId, String> {
        self.prim(MirOp::Unary(op), &[a])
    }
    /// A scalar constant with `like`'s dtype.
    pub(super) fn sc(&mut self, like: ValueId, v: f64) -> ValueId {
        let dt = self.dtype(like);
        self.scalar(dt, v)
    }
    pub(super) fn mul_sc(&mut self, x: ValueId, v: f64) -> Result<ValueId, String> {
        let c = self.sc(x, v);
        self.bin(BinaryOp::Mul, x, c)
    }
    pub(super) fn add_sc(&mut self, x: ValueId, v: f64) -> Result<ValueId, String> {
        let c = self.sc(x, v);
        self.bin(BinaryOp::Add, x, c)
    }
    pub(super) fn reshape(&mut self, x: ValueId, shape: Vec<Dim>) -> Result<ValueId, String> {
        if self.dims(x) == shape {
            return Ok(x);
        }
        self.prim(MirOp::Reshape { shape }, &[x])
    }
    pub(super) fn reshape_u(&mut self, x: ValueId, shape: &[usize]) -> Result<ValueId, String> {
        self.reshape(x, shape.iter().map(|&d| Dim::Fixed(d as u64)).collect())
    }
    pub(super) fn transpose(&mut self, x: ValueId, perm: Vec<usize>) -> Result<ValueId, String> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x);
        }
        self.prim(MirOp::Transpose { perm }, &[x])
    }
    pub(super) fn cast(&mut self, x: ValueId, to: DType) -> Result<ValueId, String> {
        if self.dtype(x) == to {
            return Ok(x);
        }
        self.prim(MirOp::Cast { to }, &[x])
    }
    pub(super) fn reduce(&mut self, op: ReduceOp, x: ValueId, axes: Vec<usize>, keepdims: bool) -> Result<ValueId, String> {
        self.prim(MirOp::Reduce { op, axes, keepdims }, &[x])
    }
    /// Slices `[lo, hi)` of axis `axis`.
    pub(super) fn slice_axis(&mut self, x: ValueId, axis: usize, lo: usize, hi: usize) -> Result<ValueId, String> {
        self.prim(MirOp::Slice { axes: vec![axis], starts: vec![lo as i64], ends: vec![hi as i64], steps: vec![1] }, &[x])
    }
    /// Inserts size-1 dims at `axes` (positions in the output).
    pub(super) fn unsqueeze(&mut self, x: ValueId, axes: &[usize]) -> Result<ValueId, String> {
        let mut d = self.dims(x);
        let mut ax = axes.to_vec();
        ax.sort();
        for &a in &ax {
            if a > d.len() {
                return Err(format!("unsqueeze axis {a} out of range"));
            }
            d.insert(a, Dim::Fixed(1));
        }
        self.reshape(x, d)
    }
    /// Repeats each element of `x` `block` times along `axis` and keeps the first `len`: [.., nb, ..] →
    /// [.., len, ..] (blocked quantization's scales at every element of their block).
    pub(super) fn repeat_blocks(&mut self, x: ValueId, axis: usize, block: usize, len: usize) -> Result<ValueId, String> {
        let d = self.fixed_dims(x, "block scale")?;
        let u = self.unsqueeze(x, &[axis + 1])?;
        let mut wide: Vec<Dim> = self.dims(u);
        wide[axis + 1] = Dim::Fixed(block as u64);
        let e = self.prim(MirOp::Expand { shape: wide }, &[u])?;
        let mut flat = d.clone();
        flat[axis] *= block;
        let r = self.reshape_u(e, &flat)?;
        if flat[axis] == len {
            return Ok(r);
        }
        self.prim(MirOp::Slice { axes: vec![axis], starts: vec![0], ends: vec![len as i64], steps: vec![1] }, &[r])
    }
    /// Reshapes a per-channel vector [C] to [C,1,…] for broadcasting against [N,C,spatial…] of rank r.
    pub(super) fn chan(&mut self, p: ValueId, r: usize) -> Result<ValueId, String> {
        let mut d = self.dims(p);
        if d.len() != 1 {
            let n = dim_prod(&d).ok_or("per-channel parameter must be 1-D")?;
            d = vec![n];
        }
        d.extend((2..r).map(|_| Dim::Fixed(1)));
        self.reshape(p, d)
    }
    pub(super) fn softmax(&mut self, x: ValueId, axis: usize, log: bool) -> Result<ValueId, String> {
        if self.dtype(x).is_float() {
            self.hir(HirOp::Softmax { axis, log }, &[x])
        } else {
            Err(format!("softmax of {} is not supported", self.dtype(x)))
        }
    }
}
