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
//! - [`Plan::Attention`] (the planner's fused attention, `rlx-opt`'s `plan/attention.rs`): per output
//!   element three passes over the keys, each recomputing the score `s = Σ_d a · b` (a: the query
//!   row, b: the key), `mx = max(mx, w(s))`, `l = l + e(s, mx)`, `acc = acc + p(s, mx, l) · v`, then
//!   `rest` (the store). The grid variables split into the *heads* (what the keys and values depend
//!   on), the *rows* (the query rows sharing a head's keys: every other variable of the query, the
//!   scores or the store) and the *columns* (what only the values and the store depend on); a writer
//!   computes each score once per row and shares a head's keys and values among its rows.
//!
//! Anything else keeps the one-invocation-per-grid-point mapping.

use super::grid::{map_nodes, map_vars, mentions};
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
/// The most keys a fused attention kernel takes (the planner fuses no longer one: `rlx-opt`'s
/// `plan/attention.rs`): a GPU writer keeps each query row's scores in shared memory.
pub const ATTENTION_MAX_KEYS: i64 = 1024;
/// The longest dot product (head dimension) of a fused attention kernel's scores, likewise.
pub const ATTENTION_MAX_DEPTH: i64 = 256;
/// The fewest query rows (every head's together) for which the PTX writer runs f32's fused attention on
/// the tensor cores (3×TF32, `nvptx/attention_mma.rs`; below it the SIMT kernel). On an H100 MiniLM's
/// 1,536 rows at batch 1 ran 1.01× the SIMT kernel's time so, its 12,288 at batch 8 faster
/// (docs/benchmarks.md, sessions 27 and 32). tf32 / bf16 / fp16 take the tensor cores at any size
/// (session 32: MiniLM batch 1 0.98× the three launches' time, which session 27 had kept).
pub const ATTENTION_MMA_MIN_ROWS: i64 = 8192;

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
    Attention(Attention<'a>),
}

/// A fused attention kernel (see the module doc). Each pass has its own key variable and score
/// scalar; the writer binds them to the one score it computed.
pub struct Attention<'a> {
    pub heads: Dims,
    pub rows: Dims,
    pub cols: Dims,
    /// Keys (the passes' extent) and the score's dot-product length.
    pub keys: i64,
    pub depth: i64,
    /// Per pass: its key variable, its score scalar.
    pub key: [Var; 3],
    pub score: [Var; 3],
    /// The dot product's variable (pass 1) and its two factors: `a` the query row's element (grid
    /// variables and `dv`), `b` the key's (heads, `key[0]`, `dv`).
    pub dv: Var,
    pub a: &'a Expr,
    pub b: &'a Expr,
    /// The running max, the sum, the output accumulator.
    pub mx: Var,
    pub l: Var,
    pub acc: Var,
    /// The max's term (of `score[0]`, `key[0]`), the sum's (of `score[1]`, `key[1]`, `mx`), the
    /// probability (of `score[2]`, `key[2]`, `mx`, `l`) and the value (of `key[2]` and the columns).
    pub w: &'a Expr,
    pub e: &'a Expr,
    pub p: &'a Expr,
    pub v: &'a Expr,
    pub rest: &'a [Stmt],
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
    if let Some(a) = attention(k, dims, body) {
        return Some(Plan::Attention(a));
    }
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

/// `e` with variables renamed (`map`: from → to).
fn rename(e: &Expr, map: &[(Var, Var)]) -> Expr {
    super::grid::map_vars(e, &|v| Expr::Var(map.iter().find(|m| m.0 == v).map_or(v, |m| m.1)))
}

/// One pass of a fused attention: `for key { decl s = 0; for d { s = s + a · b }; assign x = x ⊕ term }`
/// → (key, keys, s, d, depth, a, b, x, ⊕, term).
#[allow(clippy::type_complexity)]
fn attention_pass(st: &Stmt) -> Option<(Var, i64, Var, Var, i64, &Expr, &Expr, Var, BinaryOp, &Expr)> {
    let Stmt::For { var: key, extent: keys, body, .. } = st else { return None };
    let [Stmt::Decl { var: s, dtype: DType::F32, init: Expr::Lit(z, DType::F32) }, Stmt::For { var: d, extent: depth, body: dot, .. }, Stmt::Assign { var: x, value: Expr::Bin(op, DType::F32, lhs, term) }] = body.as_slice() else {
        return None;
    };
    let [Stmt::Assign { var: sv, value: Expr::Bin(BinaryOp::Add, DType::F32, sl, prod) }] = dot.as_slice() else { return None };
    let Expr::Bin(BinaryOp::Mul, DType::F32, a, b) = &**prod else { return None };
    if *z != 0.0 || sv != s || **sl != Expr::Var(*s) || **lhs != Expr::Var(*x) || *keys <= 0 || *depth <= 0 {
        return None;
    }
    Some((*key, *keys, *s, *d, *depth, &**a, &**b, *x, *op, &**term))
}

/// [`Plan::Attention`]: the planner's fused attention kernel under `dims` (module doc).
fn attention<'a>(k: &Kernel, dims: &[(Var, i64)], body: &'a [Stmt]) -> Option<Attention<'a>> {
    let [Stmt::Decl { var: mx, dtype: DType::F32, init: Expr::Lit(ninf, DType::F32) }, p1, Stmt::Decl { var: l, dtype: DType::F32, init: Expr::Lit(z1, DType::F32) }, p2, Stmt::Decl { var: acc, dtype: DType::F32, init: Expr::Lit(z2, DType::F32) }, p3, rest @ ..] = body else {
        return None;
    };
    if *ninf != f64::NEG_INFINITY || *z1 != 0.0 || *z2 != 0.0 || has_loop(rest) || rest.is_empty() {
        return None;
    }
    let (k1, keys, s1, d1, depth, a, b, x1, op1, w) = attention_pass(p1)?;
    let (k2, keys2, s2, d2, depth2, a2, b2, x2, op2, e) = attention_pass(p2)?;
    let (k3, keys3, s3, d3, depth3, a3, b3, x3, op3, pv) = attention_pass(p3)?;
    let Expr::Bin(BinaryOp::Mul, DType::F32, p, v) = pv else { return None };
    let (p, v): (&Expr, &Expr) = (p, v);
    if (x1, op1, x2, op2, x3, op3) != (*mx, BinaryOp::Max, *l, BinaryOp::Add, *acc, BinaryOp::Add) || (keys2, keys3, depth2, depth3) != (keys, keys, depth, depth) {
        return None;
    }
    // The three passes compute the same score.
    for (ka, da, aa, ba) in [(k2, d2, a2, b2), (k3, d3, a3, b3)] {
        let map = [(ka, k1), (da, d1)];
        if rename(aa, &map) != *a || rename(ba, &map) != *b {
            return None;
        }
    }
    let grid: BTreeSet<Var> = dims.iter().map(|d| d.0).collect();
    let within = |e: &Expr, extra: &[Var]| var_set(e).iter().all(|v| grid.contains(v) || extra.contains(v));
    if !(within(a, &[d1]) && within(b, &[k1, d1]) && within(w, &[s1, k1]) && within(e, &[s2, k2, *mx]) && within(p, &[s3, k3, *mx, *l]) && within(v, &[k3])) {
        return None;
    }
    let mut rest_vars = BTreeSet::new();
    let mut stores = Vec::new();
    super::grid::collect(rest, &mut BTreeSet::new(), &mut BTreeSet::new(), &mut stores, &mut BTreeSet::new());
    for st in rest {
        match st {
            Stmt::Store { index, value, .. } => {
                rest_vars.extend(var_set(index));
                rest_vars.extend(var_set(value));
            }
            _ => return None,
        }
    }
    if !rest_vars.iter().all(|v| grid.contains(v) || v == acc) {
        return None;
    }
    // Stored buffers are write-only (no pass reads what another row wrote).
    let mut kernel_loads = BTreeSet::new();
    super::grid::collect(&k.body, &mut BTreeSet::new(), &mut BTreeSet::new(), &mut Vec::new(), &mut kernel_loads);
    if stores.iter().any(|(b, _)| kernel_loads.contains(b)) {
        return None;
    }
    let query: BTreeSet<Var> = [a, w, e, p].iter().flat_map(|x| var_set(x)).collect();
    let kv: BTreeSet<Var> = var_set(b).union(&var_set(v)).copied().collect();
    let (mut heads, mut rows, mut cols) = (Vec::new(), Vec::new(), Vec::new());
    for &(g, n) in dims {
        if kv.contains(&g) && !query.contains(&g) && !var_set(b).contains(&g) {
            cols.push((g, n));
        } else if kv.contains(&g) {
            heads.push((g, n));
        } else if query.contains(&g) || rest_vars.contains(&g) {
            rows.push((g, n));
        } else {
            heads.push((g, n));
        }
    }
    // A column variable the query or the key reads, or a row variable the values read, would tie
    // rows or columns together.
    if cols.iter().any(|c| query.contains(&c.0) || var_set(b).contains(&c.0)) || rows.iter().any(|r| var_set(v).contains(&r.0)) {
        return None;
    }
    if keys > ATTENTION_MAX_KEYS || depth > ATTENTION_MAX_DEPTH || dims.iter().any(|d| d.1 <= 0) {
        return None;
    }
    Some(Attention { heads, rows, cols, keys, depth, key: [k1, k2, k3], score: [s1, s2, s3], dv: d1, a, b, mx: *mx, l: *l, acc: *acc, w, e, p, v, rest })
}

impl Attention<'_> {
    /// The sum's and the probability's terms over the previous pass's value, where the plan's terms
    /// nest so: `e` reads the score only through `w(s)` and `p` only through `e(s, mx)` (a softmax's
    /// `exp(w(s) − mx)` and `e / l`). A writer that keeps each pass's value in place of the score —
    /// `w(s)` after the max pass, `e` after the sum pass — then evaluates `e` as `e'(w)` and `p` as
    /// `p'(e)`: each exp, mask load and scale once per score instead of up to three times, the same
    /// operations on the same values (the same bits). `None` where the terms do not nest.
    pub fn chained(&self) -> Option<(Expr, Expr)> {
        let e = over(self.e, self.w, (self.score[0], self.key[0]), (self.score[1], self.key[1]))?;
        let p = over(self.p, self.e, (self.score[1], self.key[1]), (self.score[2], self.key[2]))?;
        Some((e, p))
    }

    /// The sum's and the probability's terms a writer evaluates, and whether each pass's value is
    /// kept in place of the score ([`Attention::chained`]), else the plan's own.
    pub fn pass_terms(&self) -> (Expr, Expr, bool) {
        match self.chained() {
            Some((e, p)) => (e, p, true),
            None => (self.e.clone(), self.p.clone(), false),
        }
    }

    /// Probability term `p` (the plan's or [`Attention::pass_terms`]') with each f32 `x / l` — the
    /// division by the row's sum — written `x · l`, for a writer that holds 1 / l in l's place: one
    /// division per row instead of one per key (the product with the rounded reciprocal is within
    /// one ulp more of the quotient). `None` where `p` reads `l` otherwise, or divides by none.
    pub fn by_reciprocal(&self, p: &Expr) -> Option<Expr> {
        let l = self.l;
        let div = |n: &Expr| match n {
            Expr::Bin(BinaryOp::Div, DType::F32, x, y) if **y == Expr::Var(l) && !mentions(x, l) => Some(x.clone()),
            _ => None,
        };
        let without = map_nodes(p, &|n| div(n).map(|_| Expr::Int(0)));
        (without != *p && !mentions(&without, l)).then(|| map_nodes(p, &|n| div(n).map(|x| Expr::Bin(BinaryOp::Mul, DType::F32, x, Box::new(Expr::Var(l))))))
    }
}

/// `term` with each copy of `inner` (written over `(score, key)` `from`, read over `to`) replaced by
/// `to`'s score, where that leaves no other reading of the score; `None` otherwise.
fn over(term: &Expr, inner: &Expr, from: (Var, Var), to: (Var, Var)) -> Option<Expr> {
    let renamed = map_vars(inner, &|v| Expr::Var(if v == from.0 { to.0 } else if v == from.1 { to.1 } else { v }));
    let with = |x: Expr| map_nodes(term, &|n| (*n == renamed).then(|| x.clone()));
    let without = with(Expr::Int(0));
    (without != *term && !mentions(&without, to.0)).then(|| with(Expr::Var(to.0)))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mir::UnaryOp;

    /// A softmax's passes (MiniLM's exported attention: `w = s + mask[key]`, `e = exp(w − mx)`,
    /// `p = isnan(e / l) ? 0 : e / l`) nest: `e` over `w`'s value, `p` over `e`'s; a term that also
    /// reads the score outside the inner term does not.
    #[test]
    fn softmax_terms_nest_over_the_previous_pass() {
        let f = DType::F32;
        let (s, k, mx, l) = ([Var(1), Var(2), Var(3)], [Var(4), Var(5), Var(6)], Var(7), Var(8));
        let b = |x: Expr| Box::new(x);
        let w_of = |i: usize| Expr::Bin(BinaryOp::Add, f, b(Expr::Var(s[i])), b(Expr::load(3, Expr::Var(k[i]))));
        let e_of = |x: Expr| Expr::Un(UnaryOp::Exp, f, b(Expr::Bin(BinaryOp::Sub, f, b(x), b(Expr::Var(mx)))));
        let p_of = |x: Expr| {
            let d = Expr::Bin(BinaryOp::Div, f, b(x), b(Expr::Var(l)));
            Expr::Select(b(Expr::Un(UnaryOp::IsNan, f, b(d.clone()))), b(Expr::Lit(0.0, f)), b(d))
        };
        let (w, e, p) = (w_of(0), e_of(w_of(1)), p_of(e_of(w_of(2))));
        let e2 = over(&e, &w, (s[0], k[0]), (s[1], k[1])).unwrap();
        assert_eq!(e2, e_of(Expr::Var(s[1])));
        let p2 = over(&p, &e, (s[1], k[1]), (s[2], k[2])).unwrap();
        assert_eq!(p2, p_of(Expr::Var(s[2])));
        // e also adds the raw score: it does not read it only through w.
        let stray = Expr::Bin(BinaryOp::Add, f, b(e.clone()), b(Expr::Var(s[1])));
        assert_eq!(over(&stray, &w, (s[0], k[0]), (s[1], k[1])), None);
        // p over another key's term: no copy of e in it.
        assert_eq!(over(&p, &e_of(w_of(0)), (s[1], k[1]), (s[2], k[2])), None);
    }

    /// The probability's `x / l` becomes `x · l` (the writer holds 1 / l there) only where nothing
    /// else in the term reads `l`.
    #[test]
    fn probability_divides_by_the_sum_through_its_reciprocal() {
        let f = DType::F32;
        let (s, l) = (Var(1), Var(8));
        let b = |x: Expr| Box::new(x);
        let q = |op: BinaryOp| Expr::Bin(op, f, b(Expr::Var(s)), b(Expr::Var(l)));
        let guarded = |d: Expr| Expr::Select(b(Expr::Un(UnaryOp::IsNan, f, b(d.clone()))), b(Expr::Lit(0.0, f)), b(d));
        let (a, m) = (Expr::Int(0), Expr::Int(0));
        let mut at = Attention {
            heads: vec![], rows: vec![], cols: vec![], keys: 1, depth: 1, key: [Var(2); 3], score: [s; 3], dv: Var(3), a: &a, b: &m, mx: Var(7), l, acc: Var(9), w: &a, e: &a, p: &a, v: &a, rest: &[],
        };
        assert_eq!(at.by_reciprocal(&guarded(q(BinaryOp::Div))), Some(guarded(q(BinaryOp::Mul))));
        // l read outside the division, or no division by it: left alone.
        let stray = Expr::Bin(BinaryOp::Add, f, b(q(BinaryOp::Div)), b(Expr::Var(l)));
        assert_eq!(at.by_reciprocal(&stray), None);
        assert_eq!(at.by_reciprocal(&q(BinaryOp::Mul)), None);
        at.l = Var(10);
        assert_eq!(at.by_reciprocal(&q(BinaryOp::Div)), None);
    }
}
