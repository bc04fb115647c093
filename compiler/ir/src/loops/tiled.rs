//! Which kernels a GPU writer can run with shared (workgroup) memory, barriers and cooperative
//! reductions, recognized from the shape of the loop nest under the grid ([`super::grid`]) — a writer
//! never asks which MIR op a kernel came from. Shared by the shader writer (`wgsl/tiled.rs`) and the
//! PTX writer (`nvptx/tiled.rs`); each decides how to write a [`Plan`].
//!
//! ```text
//! grid (flattened parallel loops) {
//!   decl acc: T = literal
//!   for k … (one loop, or a perfect nest of loops) { acc = acc ⊕ x }
//!   rest…   (the epilogue and the store; reads acc)
//! }
//! ```
//!
//! - [`Plan::Matmul`]: `⊕` is `+` over `x = a * b`, one `k` loop, where `a` depends on grid variables
//!   that `b` does not (the rows, M) and `b` on grid variables that `a` does not (the columns, N); the
//!   variables both use (or neither) are the batch. `r` is the shader writer's outputs per invocation
//!   (R×R, R = 4, 2 or 1: the largest that still gives [`FILL`] 16·R×16·R tiles).
//! - [`Plan::Reduce`]: `⊕` ∈ {+, ×, max, min} on f32/i32/u32 with at least [`MIN_REDUCE`] terms and
//!   no loop in `rest`: the terms of one grid point folded cooperatively.
//! - [`Plan::Rows`] (the planner's row fusion: LayerNorm, softmax): the body under the grid is a
//!   sequence of phases over one row — reductions (`decl acc = literal; for k… { acc = acc ⊕ x }`, the
//!   term may read scalars of earlier phases), scalars (`decl s = e`) and element loops (`for j { … }`
//!   whose iterations are independent: they store to buffers the kernel never reads) — with at least
//!   one reduction, one element loop, and a row of at least [`MIN_REDUCE`]. A reduction followed by
//!   loops is never taken as a [`Plan::Reduce`] (one invocation would run the loops alone).
//!
//! Anything else keeps the one-invocation-per-grid-point mapping.

use super::{Expr, IOp, Kernel, Stmt, Var};
use crate::mir::BinaryOp;
use crate::DType;
use std::collections::BTreeSet;

/// Invocations per workgroup of a row reduction.
pub const REDUCE_WG: u32 = 64;
/// Reductions shorter than this keep the serial per-invocation loop.
pub const MIN_REDUCE: i64 = 64;
/// Matmul tiles: 16×16 invocations, K staged 16 at a time.
pub const T: i64 = 16;
/// Workgroups wanted before a larger per-invocation block is used (about one per SM of a large GPU).
pub const FILL: i64 = 128;
pub const MAX_GROUPS: i64 = 65535;

pub type Dims = Vec<(Var, i64)>;

pub fn cdiv(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// A recognized kernel: the accumulator and what feeds it.
#[derive(Clone)]
pub struct Acc<'a> {
    pub acc: Var,
    pub dtype: DType,
    pub init: &'a Expr,
    pub op: BinaryOp,
    /// The reduction loops (outermost first) and the term added each iteration.
    pub ks: Dims,
    pub x: &'a Expr,
    pub rest: &'a [Stmt],
}

pub enum Plan<'a> {
    Matmul { acc: Acc<'a>, a: &'a Expr, b: &'a Expr, rows: Dims, cols: Dims, batch: Dims, r: i64 },
    Reduce { acc: Acc<'a>, grid: Dims },
    Rows { phases: Vec<Phase<'a>>, grid: Dims, wg: u32 },
}

/// One phase of a row kernel, in order.
pub enum Phase<'a> {
    /// A reduction over the row (its `rest` is unused).
    Reduce(Acc<'a>),
    /// `decl s = e`, computed by every invocation.
    Scalar(&'a Stmt),
    /// `for var in 0..extent { body }` with independent iterations, strided over the invocations.
    Map { var: Var, extent: i64, body: &'a [Stmt] },
}

/// Invocations per workgroup of a row kernel over rows of `n`: the smallest of 64, 128, 256 that
/// gives each invocation at most 4 elements (256 beyond 1024).
pub fn row_wg(n: i64) -> u32 {
    [64u32, 128, 256].into_iter().find(|&w| 4 * w as i64 >= n).unwrap_or(256)
}

pub fn has_loop(s: &[Stmt]) -> bool {
    s.iter().any(|st| match st {
        Stmt::For { .. } => true,
        Stmt::If { body, .. } => has_loop(body),
        _ => false,
    })
}

/// A row kernel (see the module doc): `k` is the whole kernel, `body` the statements under `dims`.
fn row_phases<'a>(k: &Kernel, dims: &[(Var, i64)], body: &'a [Stmt]) -> Option<Plan<'a>> {
    let mut kernel_loads = BTreeSet::new();
    super::grid::collect(&k.body, &mut BTreeSet::new(), &mut BTreeSet::new(), &mut Vec::new(), &mut kernel_loads);
    // Variables a phase may read: the grid's and the scalars of earlier phases.
    let mut known: BTreeSet<Var> = dims.iter().map(|d| d.0).collect();
    let (mut phases, mut i, mut longest) = (Vec::new(), 0, 0i64);
    while i < body.len() {
        if let Some(acc) = accumulation(&body[i..]) {
            let kvars: BTreeSet<Var> = acc.ks.iter().map(|d| d.0).collect();
            let kn: i64 = acc.ks.iter().map(|d| d.1).product();
            if acc.ks.iter().any(|d| d.1 <= 0) || kn > i32::MAX as i64 || !var_set(acc.x).iter().all(|v| known.contains(v) || kvars.contains(v)) {
                return None;
            }
            known.insert(acc.acc);
            longest = longest.max(kn);
            phases.push(Phase::Reduce(acc));
            i += 2;
            continue;
        }
        match &body[i] {
            st @ Stmt::Decl { var, init, .. } => {
                if !var_set(init).iter().all(|v| known.contains(v)) {
                    return None;
                }
                known.insert(*var);
                phases.push(Phase::Scalar(st));
            }
            Stmt::For { var, extent, body: lb, .. } => {
                if *extent <= 0 || !super::grid::independent(k, *var, lb, &kernel_loads) {
                    return None;
                }
                longest = longest.max(*extent);
                phases.push(Phase::Map { var: *var, extent: *extent, body: lb });
            }
            _ => return None,
        }
        i += 1;
    }
    let total: i64 = dims.iter().map(|d| d.1).product();
    let reduces = phases.iter().any(|p| matches!(p, Phase::Reduce(_)));
    let maps = phases.iter().any(|p| matches!(p, Phase::Map { .. }));
    if !reduces || !maps || longest < MIN_REDUCE || total <= 0 || total > MAX_GROUPS * MAX_GROUPS {
        return None;
    }
    Some(Plan::Rows { phases, grid: dims.to_vec(), wg: row_wg(longest) })
}

fn vars(e: &Expr, out: &mut BTreeSet<Var>) {
    match e {
        Expr::Var(v) => {
            out.insert(*v);
        }
        Expr::Load { index: a, .. } | Expr::Un(_, _, a) | Expr::Cast { x: a, .. } | Expr::ToIndex { x: a, .. } => vars(a, out),
        Expr::I(_, a, b) | Expr::Bin(_, _, a, b) => {
            vars(a, out);
            vars(b, out);
        }
        Expr::Select(c, a, b) | Expr::Dot4(c, a, b, _) => {
            vars(c, out);
            vars(a, out);
            vars(b, out);
        }
        Expr::Int(_) | Expr::Lit(..) => {}
    }
}

pub fn var_set(e: &Expr) -> BTreeSet<Var> {
    let mut s = BTreeSet::new();
    vars(e, &mut s);
    s
}

/// `decl acc = lit; for k… { acc = acc ⊕ x }; rest`.
fn accumulation(body: &[Stmt]) -> Option<Acc<'_>> {
    let [Stmt::Decl { var: acc, dtype, init: init @ Expr::Lit(..) }, Stmt::For { var, extent, body: lb, .. }, rest @ ..] = body else {
        return None;
    };
    let mut ks = vec![(*var, *extent)];
    let mut cur: &[Stmt] = lb;
    while let [Stmt::For { var, extent, body, .. }] = cur {
        ks.push((*var, *extent));
        cur = body;
    }
    let [Stmt::Assign { var: av, value: Expr::Bin(op, d, lhs, x) }] = cur else {
        return None;
    };
    if av != acc || d != dtype || **lhs != Expr::Var(*acc) || var_set(x).contains(acc) {
        return None;
    }
    if !matches!(dtype, DType::F32 | DType::I32 | DType::U32) || !matches!(op, BinaryOp::Add | BinaryOp::Mul | BinaryOp::Max | BinaryOp::Min) {
        return None;
    }
    Some(Acc { acc: *acc, dtype: *dtype, init, op: *op, ks, x, rest })
}

/// Recognizes a row kernel, a tiled matmul or a row reduction in `body`, the statements of kernel `k`
/// under the grid `dims`.
pub fn recognize<'a>(k: &Kernel, dims: &[(Var, i64)], body: &'a [Stmt]) -> Option<Plan<'a>> {
    if let Some(p) = row_phases(k, dims, body) {
        return Some(p);
    }
    let acc = accumulation(body)?;
    let grid: BTreeSet<Var> = dims.iter().map(|d| d.0).collect();
    let kvars: BTreeSet<Var> = acc.ks.iter().map(|d| d.0).collect();
    // The term may use only grid and reduction variables (no scalars of the kernel's own).
    if !var_set(acc.x).iter().all(|v| grid.contains(v) || kvars.contains(v)) {
        return None;
    }
    if acc.ks.iter().any(|d| d.1 <= 0) {
        return None;
    }
    if let (BinaryOp::Add, [(kv, _)], Expr::Bin(BinaryOp::Mul, md, a, b)) = (acc.op, acc.ks.as_slice(), acc.x) {
        let (va, vb) = (var_set(a), var_set(b));
        if *md == acc.dtype && va.contains(kv) && vb.contains(kv) {
            let (mut rows, mut cols, mut batch) = (Vec::new(), Vec::new(), Vec::new());
            for &(v, e) in dims {
                match (va.contains(&v), vb.contains(&v)) {
                    (true, false) => rows.push((v, e)),
                    (false, true) => cols.push((v, e)),
                    _ => batch.push((v, e)),
                }
            }
            let (m, n, nb): (i64, i64, i64) = (rows.iter().map(|d| d.1).product(), cols.iter().map(|d| d.1).product(), batch.iter().map(|d| d.1).product());
            if !rows.is_empty() && !cols.is_empty() && m > 0 && n > 0 && nb > 0 && nb <= MAX_GROUPS {
                let groups = |r: i64| cdiv(m, T * r) * cdiv(n, T * r) * nb;
                let r = [4, 2, 1].into_iter().find(|&r| (m >= T * r && n >= T * r && groups(r) >= FILL) || r == 1).unwrap_or(1);
                if cdiv(m, T * r) <= MAX_GROUPS && cdiv(n, T * r) <= MAX_GROUPS {
                    return Some(Plan::Matmul { acc, a, b, rows, cols, batch, r });
                }
            }
        }
    }
    let kn: i64 = acc.ks.iter().map(|d| d.1).product();
    let total: i64 = dims.iter().map(|d| d.1).product();
    // (A reduction followed by loops is a row kernel `row_phases` did not take: invocation 0 would run
    // the loops alone, so it keeps the per-invocation mapping.)
    if kn >= MIN_REDUCE && total > 0 && total <= MAX_GROUPS * MAX_GROUPS && kn <= i32::MAX as i64 && !has_loop(acc.rest) {
        return Some(Plan::Reduce { acc, grid: dims.to_vec() });
    }
    None
}

/// Integer value of an index expression with the variables in `env` (others 0); `None` for anything
/// data-dependent.
pub fn eval(e: &Expr, env: &[(Var, i64)]) -> Option<i64> {
    Some(match e {
        Expr::Int(i) => *i,
        Expr::Var(v) => env.iter().find(|x| x.0 == *v).map_or(0, |x| x.1),
        Expr::I(op, a, b) => {
            let (x, y) = (eval(a, env)?, eval(b, env)?);
            match op {
                IOp::Add => x.wrapping_add(y),
                IOp::Sub => x.wrapping_sub(y),
                IOp::Mul => x.wrapping_mul(y),
                IOp::Div => x.checked_div(y)?,
                IOp::Rem => x.checked_rem(y)?,
                IOp::Min => x.min(y),
                IOp::Max => x.max(y),
                IOp::Lt => (x < y) as i64,
                IOp::Le => (x <= y) as i64,
                IOp::Eq => (x == y) as i64,
                IOp::And => (x != 0 && y != 0) as i64,
            }
        }
        _ => return None,
    })
}

/// The first load in `e` whose index uses `k`.
fn load_index(e: &Expr, k: Var) -> Option<&Expr> {
    match e {
        Expr::Load { index, .. } if var_set(index).contains(&k) => Some(index),
        Expr::Load { index: a, .. } | Expr::Un(_, _, a) | Expr::Cast { x: a, .. } | Expr::ToIndex { x: a, .. } => load_index(a, k),
        Expr::I(_, a, b) | Expr::Bin(_, _, a, b) => load_index(a, k).or_else(|| load_index(b, k)),
        Expr::Select(c, a, b) | Expr::Dot4(c, a, b, _) => load_index(c, k).or_else(|| load_index(a, k)).or_else(|| load_index(b, k)),
        Expr::Int(_) | Expr::Lit(..) | Expr::Var(_) => None,
    }
}

/// Whether the operand's memory is contiguous along `k` (one element per step of `k`) rather than
/// along its own innermost grid variable (`own`): decides how invocations share the staging loads.
pub fn unit_stride(x: &Expr, k: Var, own: &Dims) -> bool {
    let Some(idx) = load_index(x, k) else { return true };
    let at = |v: Var, i: i64| eval(idx, &[(v, i)]);
    let step = |v: Var| Some(at(v, 2)? - at(v, 1)?);
    match (step(k), own.last().and_then(|d| step(d.0))) {
        (Some(1), _) => true,
        (_, Some(1)) => false,
        _ => true,
    }
}
