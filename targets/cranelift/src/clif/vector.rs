//! f32x4 vector loops: a `for v in 0..E vector(n)` loop (E a multiple of 4, n a multiple of 4) whose
//! body passes [`vectorizable`] runs E/4 iterations of one f32x4 body. Values that depend on `v` or on
//! scalars declared inside the loop are *varying* (f32x4); everything else stays scalar and is splatted
//! where it meets a varying value. Loads and stores whose index is `v` + (something free of `v`) become
//! 16-byte vector accesses at the lane-0 address; f32 add/sub/mul/div/min/max are vector instructions;
//! other f32 → f32 ops on varying values (exp, erf, relu, …) run per lane through the scalar writer, so
//! semantics never change. Anything else (ints, compares, selects, casts, `if`, a varying index, a
//! reduction into a scalar declared outside the loop) keeps the whole loop scalar.

use super::W;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use rlx_ir::loops::{Expr, IOp, Stmt, Var};
use rlx_ir::{BinaryOp, DType};
use std::collections::HashSet;

pub(super) const LANES: i64 = 4;

fn mentions(e: &Expr, vs: &HashSet<Var>) -> bool {
    match e {
        Expr::Var(v) => vs.contains(v),
        Expr::Int(_) | Expr::Lit(..) => false,
        Expr::Load { index, .. } => mentions(index, vs),
        Expr::I(_, a, b) | Expr::Bin(_, _, a, b) => mentions(a, vs) || mentions(b, vs),
        Expr::Un(_, _, a) | Expr::Cast { x: a, .. } | Expr::ToIndex { x: a, .. } => mentions(a, vs),
        Expr::Select(c, a, b) | Expr::Dot4(c, a, b, _) => mentions(c, vs) || mentions(a, vs) || mentions(b, vs),
    }
}

/// The coefficient of `var` in index expression `e` when `e` is affine in it (`None` otherwise).
fn coeff(e: &Expr, var: Var) -> Option<i64> {
    let one = HashSet::from([var]);
    if !mentions(e, &one) {
        return Some(0);
    }
    match e {
        Expr::Var(v) if *v == var => Some(1),
        Expr::I(IOp::Add, a, b) => Some(coeff(a, var)? + coeff(b, var)?),
        Expr::I(IOp::Sub, a, b) => Some(coeff(a, var)? - coeff(b, var)?),
        Expr::I(IOp::Mul, a, b) => match (&**a, &**b) {
            (Expr::Int(c), x) | (x, Expr::Int(c)) => Some(coeff(x, var)? * c),
            _ => None,
        },
        _ => None,
    }
}

/// Checks a vector loop's body; `vary` collects the loop variable and the scalars declared inside.
pub(super) fn vectorizable(body: &[Stmt], var: Var, vary: &mut HashSet<Var>, params: &[DType]) -> bool {
    vary.insert(var);
    stmts_ok(body, var, vary, params)
}

fn stmts_ok(body: &[Stmt], var: Var, vary: &mut HashSet<Var>, params: &[DType]) -> bool {
    for st in body {
        let ok = match st {
            Stmt::For { var: iv, body, .. } => !vary.contains(iv) && stmts_ok(body, var, vary, params),
            Stmt::Decl { var: v, dtype, init } => {
                let ok = *dtype == DType::F32 && expr_ok(init, var, vary, params);
                vary.insert(*v);
                ok
            }
            // Assigning a varying value to a scalar declared outside the loop (a reduction) is not a
            // lane-wise operation.
            Stmt::Assign { var: v, value } => vary.contains(v) && *v != var && expr_ok(value, var, vary, params),
            Stmt::Store { buf, index, value } => {
                params.get(*buf as usize) == Some(&DType::F32) && index_ok(index, var, vary) && coeff(index, var) == Some(1) && expr_ok(value, var, vary, params)
            }
            Stmt::If { .. } | Stmt::Comm { .. } => false,
            // A hint Cranelift has no instruction for: skipped.
            Stmt::Prefetch { .. } => true,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// An index may use the loop variable (affinely) but no scalar declared in the loop.
fn index_ok(e: &Expr, var: Var, vary: &HashSet<Var>) -> bool {
    let mut inner = vary.clone();
    inner.remove(&var);
    !mentions(e, &inner) && coeff(e, var).is_some()
}

/// A varying expression is f32 and built from vector loads, declared scalars and f32 ops.
fn expr_ok(e: &Expr, var: Var, vary: &HashSet<Var>, params: &[DType]) -> bool {
    if !mentions(e, vary) {
        return true;
    }
    match e {
        Expr::Var(v) => *v != var,
        Expr::Load { buf, index } => params.get(*buf as usize) == Some(&DType::F32) && index_ok(index, var, vary) && coeff(index, var) == Some(1),
        Expr::Bin(b, DType::F32, x, y) => !b.is_compare() && !b.is_logical() && expr_ok(x, var, vary, params) && expr_ok(y, var, vary, params),
        Expr::Un(u, DType::F32, x) => u.out_dtype(DType::F32) == DType::F32 && expr_ok(x, var, vary, params),
        _ => false,
    }
}

/// A value in a vector loop: scalar (uniform) or f32x4 (varying).
#[derive(Clone, Copy)]
enum VV {
    U(Value),
    V(Value),
}

impl<'a, 'b> W<'a, 'b> {
    fn splat4(&mut self, x: VV) -> Value {
        match x {
            VV::V(v) => v,
            VV::U(u) => self.b.ins().splat(types::F32X4, u),
        }
    }

    fn vexpr(&mut self, e: &Expr) -> VV {
        if !mentions(e, &self.vary) {
            return VV::U(self.expr(e));
        }
        match e {
            Expr::Var(v) => match self.vvars.get(v) {
                Some(x) => {
                    let x = *x;
                    VV::V(self.b.use_var(x))
                }
                None => {
                    self.fail(format!("internal error: vector variable v{} used before its declaration", v.0));
                    VV::U(self.fconst(DType::F32, 0.0))
                }
            },
            Expr::Load { buf, index } => {
                let a = self.addr(*buf, index);
                VV::V(self.b.ins().load(types::F32X4, MemFlagsData::new().with_notrap(), a, 0))
            }
            Expr::Bin(b, _, x, y) => {
                let (p, q) = (self.vexpr(x), self.vexpr(y));
                let (p, q) = (self.splat4(p), self.splat4(q));
                VV::V(match b {
                    BinaryOp::Add => self.b.ins().fadd(p, q),
                    BinaryOp::Sub => self.b.ins().fsub(p, q),
                    BinaryOp::Mul => self.b.ins().fmul(p, q),
                    BinaryOp::Div => self.b.ins().fdiv(p, q),
                    BinaryOp::Max => self.b.ins().fmax(p, q),
                    BinaryOp::Min => self.b.ins().fmin(p, q),
                    _ => {
                        let mut acc = p;
                        for l in 0..LANES as u8 {
                            let (xs, ys) = (self.b.ins().extractlane(p, l), self.b.ins().extractlane(q, l));
                            let r = self.binary(*b, DType::F32, xs, ys);
                            acc = self.b.ins().insertlane(acc, r, l);
                        }
                        acc
                    }
                })
            }
            Expr::Un(u, _, x) => {
                let p = self.vexpr(x);
                let p = self.splat4(p);
                let mut acc = p;
                for l in 0..LANES as u8 {
                    let xs = self.b.ins().extractlane(p, l);
                    let r = self.unary(*u, DType::F32, xs);
                    acc = self.b.ins().insertlane(acc, r, l);
                }
                VV::V(acc)
            }
            _ => {
                self.fail("internal error: a vector loop expression the check admitted is not translatable".into());
                VV::U(self.fconst(DType::F32, 0.0))
            }
        }
    }

    /// One statement (not a `for`: those are emitted by `stmts`) inside a vector loop.
    pub(super) fn vector_stmt(&mut self, st: &Stmt) {
        match st {
            Stmt::Decl { var, init, .. } => {
                let v = self.vexpr(init);
                let v = self.splat4(v);
                let x = match self.vvars.get(var) {
                    Some(x) => *x,
                    None => {
                        let x = self.b.declare_var(types::F32X4);
                        self.vvars.insert(*var, x);
                        x
                    }
                };
                self.b.def_var(x, v);
            }
            Stmt::Assign { var, value } => {
                let v = self.vexpr(value);
                let v = self.splat4(v);
                match self.vvars.get(var) {
                    Some(x) => {
                        let x = *x;
                        self.b.def_var(x, v)
                    }
                    None => self.fail(format!("internal error: vector variable v{} assigned before its declaration", var.0)),
                }
            }
            Stmt::Store { buf, index, value } => {
                let a = self.addr(*buf, index);
                let v = self.vexpr(value);
                let v = self.splat4(v);
                self.b.ins().store(MemFlagsData::new().with_notrap(), v, a, 0);
            }
            Stmt::Prefetch { .. } => {}
            Stmt::If { .. } | Stmt::For { .. } | Stmt::Comm { .. } => self.fail("internal error: unexpected statement in a vector loop".into()),
        }
    }
}
