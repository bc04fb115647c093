//! The emitter backward rules write through: MIR nodes appended to the graph under one derived name,
//! scalar constants in the dtype of the value they combine with, and `unbroadcast` (the sum that undoes
//! numpy broadcasting). Every rule is built from these primitives, so its output differentiates again.

use rlx_ir::{BinaryOp, ConstData, DType, Dim, Mir, MirOp, ReduceOp, Shape, TensorType, UnaryOp, ValueId};

pub struct B<'a> {
    pub g: &'a mut Mir,
    /// `grad/<forward node name>`: every node a rule emits is named from it, numbered in order.
    name: String,
    n: usize,
}

impl<'a> B<'a> {
    pub fn new(g: &'a mut Mir, name: String) -> B<'a> {
        B { g, name, n: 0 }
    }
    pub fn ty(&self, v: ValueId) -> TensorType {
        self.g.ty(v).clone()
    }
    pub fn op(&mut self, op: MirOp, ins: &[ValueId]) -> Result<ValueId, String> {
        self.n += 1;
        let name = format!("{}#{}", self.name, self.n);
        self.g.add1(&name, op, ins)
    }
    pub fn un(&mut self, u: UnaryOp, x: ValueId) -> Result<ValueId, String> {
        self.op(MirOp::Unary(u), &[x])
    }
    pub fn bin(&mut self, b: BinaryOp, x: ValueId, y: ValueId) -> Result<ValueId, String> {
        self.op(MirOp::Binary(b), &[x, y])
    }
    pub fn add(&mut self, x: ValueId, y: ValueId) -> Result<ValueId, String> {
        self.bin(BinaryOp::Add, x, y)
    }
    pub fn sub(&mut self, x: ValueId, y: ValueId) -> Result<ValueId, String> {
        self.bin(BinaryOp::Sub, x, y)
    }
    pub fn mul(&mut self, x: ValueId, y: ValueId) -> Result<ValueId, String> {
        self.bin(BinaryOp::Mul, x, y)
    }
    pub fn div(&mut self, x: ValueId, y: ValueId) -> Result<ValueId, String> {
        self.bin(BinaryOp::Div, x, y)
    }
    pub fn neg(&mut self, x: ValueId) -> Result<ValueId, String> {
        self.un(UnaryOp::Neg, x)
    }
    /// A scalar constant of `v`'s dtype.
    pub fn scalar(&mut self, like: ValueId, v: f64) -> ValueId {
        let dt = self.g.ty(like).dtype;
        self.constant(dt, v)
    }
    pub fn constant(&mut self, dt: DType, v: f64) -> ValueId {
        self.g.add_const(None, ConstData::scalar(dt, v))
    }
    /// `x * c` for a scalar `c`.
    pub fn scale(&mut self, x: ValueId, c: f64) -> Result<ValueId, String> {
        let s = self.scalar(x, c);
        self.mul(x, s)
    }
    /// `where(cond, a, 0)` (or `where(cond, 0, a)` when `!keep_true`).
    pub fn select(&mut self, cond: ValueId, a: ValueId, keep_true: bool) -> Result<ValueId, String> {
        let z = self.scalar(a, 0.0);
        if keep_true {
            self.op(MirOp::Where, &[cond, a, z])
        } else {
            self.op(MirOp::Where, &[cond, z, a])
        }
    }
    /// A scalar broadcast to `shape` (symbolic dims allowed).
    pub fn fill(&mut self, dt: DType, v: f64, shape: &Shape) -> Result<ValueId, String> {
        let c = self.constant(dt, v);
        self.op(MirOp::Expand { shape: shape.0.clone() }, &[c])
    }
    pub fn reshape(&mut self, x: ValueId, shape: &Shape) -> Result<ValueId, String> {
        if self.g.ty(x).shape == *shape {
            return Ok(x);
        }
        self.op(MirOp::Reshape { shape: shape.0.clone() }, &[x])
    }
    pub fn sum(&mut self, x: ValueId, axes: Vec<usize>, keepdims: bool) -> Result<ValueId, String> {
        if axes.is_empty() {
            return Ok(x);
        }
        self.op(MirOp::Reduce { op: ReduceOp::Sum, axes, keepdims }, &[x])
    }
    /// Sums `grad` (of a broadcast result's shape) down to `target`, the shape of the operand that was
    /// broadcast: leading axes the operand lacks are summed away, axes where it has 1 are summed keeping
    /// the 1.
    pub fn unbroadcast(&mut self, grad: ValueId, target: &Shape) -> Result<ValueId, String> {
        let gs = self.g.ty(grad).shape.clone();
        let (r, k) = (gs.rank(), target.rank());
        if k > r {
            return Err(format!("cannot sum a gradient of shape {gs} down to {target}"));
        }
        let lead: Vec<usize> = (0..r - k).collect();
        let mut x = self.sum(grad, lead, false)?;
        let gs = self.g.ty(x).shape.clone();
        let ones: Vec<usize> = (0..k).filter(|&i| target.0[i] == Dim::Fixed(1) && gs.0[i] != Dim::Fixed(1)).collect();
        x = self.sum(x, ones, true)?;
        self.reshape(x, target)
    }
    /// The keepdims shape of reducing `shape` over `axes`.
    pub fn kept(shape: &Shape, axes: &[usize]) -> Shape {
        Shape(shape.0.iter().enumerate().map(|(i, d)| if axes.contains(&i) { Dim::Fixed(1) } else { d.clone() }).collect())
    }
}
