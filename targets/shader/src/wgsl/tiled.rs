//! Kernels that use workgroup memory and barriers, recognized from the loop form (the back end never
//! asks which MIR op a kernel came from; it reads the shape of the loop nest under the grid):
//!
//! ```text
//! grid (flattened parallel loops) {
//!   decl acc: T = literal
//!   for k … (one loop, or a perfect nest of loops) { acc = acc ⊕ x }
//!   rest…   (the epilogue and the store; reads acc)
//! }
//! ```
//!
//! - **Tiled matmul**: `⊕` is `+` over `x = a * b`, one `k` loop, where `a` depends on grid variables
//!   that `b` does not (the rows, M) and `b` on grid variables that `a` does not (the columns, N); the
//!   variables both use (or neither) are the batch. A 16×16 workgroup computes a (16·R)×(16·R) tile of
//!   the output (R×R outputs per invocation, R = 4, 2 or 1, the largest that still gives enough
//!   workgroups to fill a GPU): per step of 16 along K it stages the (16·R)×16 slice of `a` and the
//!   16×(16·R) slice of `b` in `var<workgroup>` arrays (each invocation evaluates R elements of each,
//!   out-of-range ones are 0), `workgroupBarrier()`, accumulates from workgroup memory, barrier again.
//!   Each output still sums its products in order k = 0, 1, …, so results equal the per-invocation
//!   kernel's. Then each invocation runs `rest` once per output it owns.
//! - **Row reduction**: `⊕` ∈ {+, ×, max, min} on f32/i32/u32 with at least [`MIN_REDUCE`] terms: one
//!   workgroup of [`REDUCE_WG`] invocations per grid point; invocation t folds terms t, t + 64, …, the
//!   partials meet in a shared-memory tree (barrier per level), and invocation 0 runs `rest`. The
//!   summation order differs from a serial loop (f32 results differ in the last bits).
//!
//! - **Row kernel** (the planner's row fusion: LayerNorm, softmax): the body under the grid is a
//!   sequence of phases over one row — reductions (`decl acc = literal; for k… { acc = acc ⊕ x }`, the
//!   term may read scalars of earlier phases), scalars (`decl s = e`) and element loops (`for j { … }`
//!   whose iterations are independent: they store to buffers the kernel never reads) — with at least
//!   one reduction, one element loop, and a row of at least [`MIN_REDUCE`]. One workgroup per row
//!   ([`row_wg`] invocations: 64, 128 or 256 by the row length): each reduction folds strided
//!   partials, meets them in a shared-memory tree (barrier per level) and every invocation takes the
//!   result; scalars are computed by every invocation; element loops are strided over the
//!   invocations (invocation t does j = t, t + wg, …). A tree's summation order differs from a
//!   serial loop's (f32 results differ in the last bits). Short rows, and row kernels not of this
//!   shape, keep one invocation per row; a reduction followed by loops is never taken as a row
//!   reduction (invocation 0 would run the loops alone).
//!
//! Anything else keeps the one-invocation-per-grid-point mapping.

use super::{Ty, W};
use rlx_ir::loops::{Expr, Kernel, Stmt, Var};
use rlx_ir::{BinaryOp, DType};
use std::collections::BTreeSet;

/// Invocations per workgroup of a row reduction.
pub const REDUCE_WG: u32 = 64;
/// Reductions shorter than this keep the serial per-invocation loop.
pub const MIN_REDUCE: i64 = 64;
/// Matmul tiles: 16×16 invocations, K staged 16 at a time.
const T: i64 = 16;
/// Workgroups wanted before a larger per-invocation block is used (about one per SM of a large GPU).
const FILL: i64 = 128;
const MAX_GROUPS: i64 = 65535;

type Dims = Vec<(Var, i64)>;

fn cdiv(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// A recognized kernel: the accumulator and what feeds it.
pub(super) struct Acc<'a> {
    acc: Var,
    dtype: DType,
    init: &'a Expr,
    op: BinaryOp,
    /// The reduction loops (outermost first) and the term added each iteration.
    ks: Dims,
    x: &'a Expr,
    rest: &'a [Stmt],
}

pub(super) enum Plan<'a> {
    Matmul { acc: Acc<'a>, a: &'a Expr, b: &'a Expr, rows: Dims, cols: Dims, batch: Dims, r: i64 },
    Reduce { acc: Acc<'a>, grid: Dims },
    Rows { phases: Vec<Phase<'a>>, grid: Dims, wg: u32 },
}

/// One phase of a row kernel, in order.
pub(super) enum Phase<'a> {
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

fn has_loop(s: &[Stmt]) -> bool {
    s.iter().any(|st| match st {
        Stmt::For { .. } => true,
        Stmt::If { body, .. } => has_loop(body),
        _ => false,
    })
}

/// A row kernel (see the module doc): `k` is the whole kernel, `body` the statements under `dims`.
fn row_phases<'a>(k: &Kernel, dims: &[(Var, i64)], body: &'a [Stmt]) -> Option<Plan<'a>> {
    let mut kernel_loads = BTreeSet::new();
    rlx_ir::loops::grid::collect(&k.body, &mut BTreeSet::new(), &mut BTreeSet::new(), &mut Vec::new(), &mut kernel_loads);
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
                if *extent <= 0 || !rlx_ir::loops::grid::independent(k, *var, lb, &kernel_loads) {
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
        Expr::Select(c, a, b) => {
            vars(c, out);
            vars(a, out);
            vars(b, out);
        }
        Expr::Int(_) | Expr::Lit(..) => {}
    }
}

fn var_set(e: &Expr) -> BTreeSet<Var> {
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
pub(super) fn recognize<'a>(k: &Kernel, dims: &[(Var, i64)], body: &'a [Stmt]) -> Option<Plan<'a>> {
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
fn eval(e: &Expr, env: &[(Var, i64)]) -> Option<i64> {
    use rlx_ir::loops::IOp;
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
        Expr::Select(c, a, b) => load_index(c, k).or_else(|| load_index(a, k)).or_else(|| load_index(b, k)),
        Expr::Int(_) | Expr::Lit(..) | Expr::Var(_) => None,
    }
}

/// Whether the operand's memory is contiguous along `k` (one element per step of `k`) rather than
/// along its own innermost grid variable (`own`): decides how invocations share the staging loads.
fn unit_stride(x: &Expr, k: Var, own: &Dims) -> bool {
    let Some(idx) = load_index(x, k) else { return true };
    let at = |v: Var, i: i64| eval(idx, &[(v, i)]);
    let step = |v: Var| Some(at(v, 2)? - at(v, 1)?);
    match (step(k), own.last().and_then(|d| step(d.0))) {
        (Some(1), _) => true,
        (_, Some(1)) => false,
        _ => true,
    }
}

/// `let v = (flat / stride) % extent;` for each variable of `dims` (the last varies fastest).
fn unflatten(w: &mut W, depth: usize, flat: &str, dims: &[(Var, i64)]) {
    let mut stride: i64 = dims.iter().map(|d| d.1).product();
    for &(v, e) in dims {
        stride /= e;
        w.vars.insert(v, Ty::Index);
        w.line(depth, &format!("let v{} = ({flat} / {stride}i) % {e}i;", v.0));
    }
}

/// What the caller needs besides the body in `w.out`.
pub(super) struct Emitted {
    /// The module-scope `var<workgroup>` arrays it uses: (name, element type, length).
    pub shared: Vec<(String, &'static str, i64)>,
    /// The entry point's attributes and signature.
    pub header: String,
    pub groups: [u32; 3],
    pub wg: [u32; 3],
}

impl W<'_> {
    pub(super) fn tiled(&mut self, li: usize, plan: &Plan) -> Result<Emitted, String> {
        match plan {
            Plan::Matmul { acc, a, b, rows, cols, batch, r } => self.matmul(li, acc, a, b, rows, cols, batch, *r),
            Plan::Reduce { acc, grid } => self.reduce(li, acc, grid),
            Plan::Rows { phases, grid, wg } => self.rows(li, phases, grid, *wg),
        }
    }

    /// A row kernel: one workgroup of `wg` invocations per grid point (row), its phases in order.
    fn rows(&mut self, li: usize, phases: &[Phase], grid: &Dims, wg: u32) -> Result<Emitted, String> {
        let total: i64 = grid.iter().map(|d| d.1).product::<i64>().max(1);
        let gx = total.min(MAX_GROUPS);
        let gy = cdiv(total, gx);
        let header = format!(
            "@compute @workgroup_size({wg})\nfn k{li}(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{\n"
        );
        self.line(1, "let tt = i32(lid.x);");
        // Groups past the last row (the y spill) recompute the last one and do not store: no early
        // return, so every barrier is reached by the whole workgroup.
        self.line(1, "let g = i32(wid.x + wid.y * nwg.x);");
        self.line(1, &format!("let gi = min(g, {}i);", total - 1));
        unflatten(self, 1, "gi", grid);
        let mut shared: Vec<(String, &'static str, i64)> = Vec::new();
        let last_reduce = phases.iter().rposition(|p| matches!(p, Phase::Reduce(_)));
        for (pi, p) in phases.iter().enumerate() {
            match p {
                Phase::Reduce(acc) => {
                    let d = super::norm(acc.dtype);
                    let t = super::wty(d).or_else(|m| self.err(m))?;
                    let red = format!("wr_{t}");
                    if !shared.iter().any(|s| s.0 == red) {
                        shared.push((red.clone(), t, wg as i64));
                    }
                    let kn: i64 = acc.ks.iter().map(|d| d.1).product();
                    let a = format!("v{}", acc.acc.0);
                    let init = self.typed(acc.init, Ty::S(d))?;
                    self.vars.insert(acc.acc, Ty::S(d));
                    self.line(1, &format!("var {a}: {t} = {init};"));
                    self.line(1, &format!("for (var f: i32 = tt; f < {kn}i; f = f + {wg}i) {{"));
                    unflatten(self, 2, "f", &acc.ks);
                    let x = self.typed(acc.x, Ty::S(d))?;
                    let s = self.binary(acc.op, d, &a, &x)?;
                    self.line(2, &format!("{a} = {s};"));
                    self.line(1, "}");
                    self.line(1, &format!("{red}[tt] = {a};"));
                    self.line(1, "workgroupBarrier();");
                    let mut s = wg / 2;
                    while s >= 2 {
                        let c = self.binary(acc.op, d, &format!("{red}[tt]"), &format!("{red}[tt + {s}i]"))?;
                        self.line(1, &format!("if (tt < {s}i) {{ {red}[tt] = {c}; }}"));
                        self.line(1, "workgroupBarrier();");
                        s /= 2;
                    }
                    // The last level is taken by every invocation (the same two values, the same result).
                    let c = self.binary(acc.op, d, &format!("{red}[0]"), &format!("{red}[1]"))?;
                    self.line(1, &format!("{a} = {c};"));
                    if Some(pi) != last_reduce {
                        // Everyone has read the tree before the next reduction writes it again.
                        self.line(1, "workgroupBarrier();");
                    }
                }
                Phase::Scalar(st) => self.stmts(std::slice::from_ref(*st), 1)?,
                Phase::Map { var, extent, body } => {
                    self.vars.insert(*var, Ty::Index);
                    let v = var.0;
                    self.line(1, &format!("if (g < {total}i) {{"));
                    self.line(2, &format!("for (var v{v}: i32 = tt; v{v} < {extent}i; v{v} = v{v} + {wg}i) {{"));
                    self.stmts(body, 3)?;
                    self.line(2, "}");
                    self.line(1, "}");
                }
            }
        }
        Ok(Emitted { shared, header, groups: [gx as u32, gy as u32, 1], wg: [wg, 1, 1] })
    }

    #[allow(clippy::too_many_arguments)]
    fn matmul(&mut self, li: usize, acc: &Acc, a: &Expr, b: &Expr, rows: &Dims, cols: &Dims, batch: &Dims, r: i64) -> Result<Emitted, String> {
        let d = acc.dtype;
        let t = super::wty(d).or_else(|m| self.err(m))?;
        let (m, n, nb): (i64, i64, i64) = (rows.iter().map(|d| d.1).product(), cols.iter().map(|d| d.1).product(), batch.iter().map(|d| d.1).product());
        let (bm, bn) = (T * r, T * r);
        // K is staged 16 at a time: 2·16r·16 values of workgroup memory (8 KiB at R = 4, within Vulkan's
        // minimum maxComputeSharedMemorySize of 16 KiB). (Longer steps measured slower on lavapipe.)
        let tk = T;
        let (kv, kext) = acc.ks[0];
        // One pair of workgroup arrays per element type, shared by every kernel of the module and
        // sized for the largest (a module-wide total the driver may reserve for every entry point).
        let (sa, sb) = (format!("wa_{t}"), format!("wb_{t}"));
        // Rows padded by one element (odd strides: a column of stores hits distinct banks).
        let (pa, pb) = (tk + 1, bn + 1);
        let shared = vec![(sa.clone(), t, bm * pa), (sb.clone(), t, tk * pb)];
        // Consecutive invocations stage consecutive elements of whichever index is contiguous in
        // memory (coalesced loads): K for a row-major A and for a weight stored [N, K]; M or N otherwise.
        let (a_kfast, b_kfast) = (unit_stride(a, kv, rows), unit_stride(b, kv, cols));
        let header = format!(
            "@compute @workgroup_size({T}, {T})\nfn k{li}(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {{\n"
        );
        self.line(1, "let tx = i32(lid.x);");
        self.line(1, "let ty = i32(lid.y);");
        self.line(1, &format!("let tt = ty * {T}i + tx;"));
        self.line(1, &format!("let m0 = i32(wid.y) * {bm}i;"));
        self.line(1, &format!("let n0 = i32(wid.x) * {bn}i;"));
        self.line(1, "let bz = i32(wid.z);");
        unflatten(self, 1, "bz", batch);
        let init = self.typed(acc.init, Ty::S(super::norm(d)))?;
        for i in 0..r {
            for j in 0..r {
                self.line(1, &format!("var c{i}_{j}: {t} = {init};"));
            }
        }
        self.line(1, &format!("for (var k0: i32 = 0i; k0 < {kext}i; k0 = k0 + {tk}i) {{"));
        // Stage a: (bm rows) × (tk of K), element e = tt + 256·q.
        let zero = super::zero(d);
        for q in 0..bm * tk / (T * T) {
            self.line(2, "{");
            self.line(3, &format!("let e = tt + {}i;", q * T * T));
            if a_kfast {
                self.line(3, &format!("let rr = e / {tk}i;"));
                self.line(3, &format!("let kk = e % {tk}i;"));
            } else {
                self.line(3, &format!("let rr = e % {bm}i;"));
                self.line(3, &format!("let kk = e / {bm}i;"));
            }
            self.line(3, "let mm = m0 + rr;");
            self.line(3, &format!("var x: {t} = {zero};"));
            self.line(3, &format!("if (mm < {m}i && k0 + kk < {kext}i) {{"));
            unflatten(self, 4, "mm", rows);
            self.vars.insert(kv, Ty::Index);
            self.line(4, &format!("let v{} = k0 + kk;", kv.0));
            let av = self.typed(a, Ty::S(super::norm(d)))?;
            self.line(4, &format!("x = {av};"));
            self.line(3, "}");
            self.line(3, &format!("{sa}[rr * {pa}i + kk] = x;"));
            self.line(2, "}");
        }
        // Stage b: (tk of K) × (bn columns).
        for q in 0..tk * bn / (T * T) {
            self.line(2, "{");
            self.line(3, &format!("let e = tt + {}i;", q * T * T));
            if b_kfast {
                self.line(3, &format!("let kk = e % {tk}i;"));
                self.line(3, &format!("let cc = e / {tk}i;"));
            } else {
                self.line(3, &format!("let kk = e / {bn}i;"));
                self.line(3, &format!("let cc = e % {bn}i;"));
            }
            self.line(3, "let nn = n0 + cc;");
            self.line(3, &format!("var x: {t} = {zero};"));
            self.line(3, &format!("if (nn < {n}i && k0 + kk < {kext}i) {{"));
            unflatten(self, 4, "nn", cols);
            self.line(4, &format!("let v{} = k0 + kk;", kv.0));
            let bv = self.typed(b, Ty::S(super::norm(d)))?;
            self.line(4, &format!("x = {bv};"));
            self.line(3, "}");
            self.line(3, &format!("{sb}[kk * {pb}i + cc] = x;"));
            self.line(2, "}");
        }
        self.line(2, "workgroupBarrier();");
        // Out-of-range K steps were staged as 0, so the last (partial) step adds exact zeros.
        self.line(2, &format!("for (var kk: i32 = 0i; kk < {tk}i; kk = kk + 1i) {{"));
        for i in 0..r {
            self.line(3, &format!("let ra{i} = {sa}[(ty + {}i) * {pa}i + kk];", i * T));
        }
        for j in 0..r {
            self.line(3, &format!("let rb{j} = {sb}[kk * {pb}i + tx + {}i];", j * T));
        }
        for i in 0..r {
            for j in 0..r {
                let p = self.binary(BinaryOp::Mul, super::norm(d), &format!("ra{i}"), &format!("rb{j}"))?;
                let s = self.binary(BinaryOp::Add, super::norm(d), &format!("c{i}_{j}"), &p)?;
                self.line(3, &format!("c{i}_{j} = {s};"));
            }
        }
        self.line(2, "}");
        self.line(2, "workgroupBarrier();");
        self.line(1, "}");
        // The epilogue, once per owned output (rows ty + 16·i, columns tx + 16·j).
        for i in 0..r {
            for j in 0..r {
                self.line(1, "{");
                self.line(2, &format!("let mm = m0 + ty + {}i;", i * T));
                self.line(2, &format!("let nn = n0 + tx + {}i;", j * T));
                self.line(2, &format!("if (mm < {m}i && nn < {n}i) {{"));
                unflatten(self, 3, "mm", rows);
                unflatten(self, 3, "nn", cols);
                self.vars.insert(acc.acc, Ty::S(super::norm(d)));
                self.line(3, &format!("var v{}: {t} = c{i}_{j};", acc.acc.0));
                self.stmts(acc.rest, 3)?;
                self.line(2, "}");
                self.line(1, "}");
            }
        }
        let groups = [cdiv(n, bn) as u32, cdiv(m, bm) as u32, nb as u32];
        Ok(Emitted { shared, header, groups, wg: [T as u32, T as u32, 1] })
    }

    fn reduce(&mut self, li: usize, acc: &Acc, grid: &Dims) -> Result<Emitted, String> {
        let d = super::norm(acc.dtype);
        let t = super::wty(d).or_else(|m| self.err(m))?;
        let total: i64 = grid.iter().map(|d| d.1).product::<i64>().max(1);
        let gx = total.min(MAX_GROUPS);
        let gy = cdiv(total, gx);
        let kn: i64 = acc.ks.iter().map(|d| d.1).product();
        let red = format!("wr_{t}");
        let shared = vec![(red.clone(), t, REDUCE_WG as i64)];
        let header = format!(
            "@compute @workgroup_size({REDUCE_WG})\nfn k{li}(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{\n"
        );
        self.line(1, "let tt = i32(lid.x);");
        // Groups past the last grid point (the y spill) recompute the last one and do not store: no
        // early return, so every barrier is reached by the whole workgroup.
        self.line(1, "let g = i32(wid.x + wid.y * nwg.x);");
        self.line(1, &format!("let gi = min(g, {}i);", total - 1));
        unflatten(self, 1, "gi", grid);
        let init = self.typed(acc.init, Ty::S(d))?;
        self.vars.insert(acc.acc, Ty::S(d));
        self.line(1, &format!("var v{}: {t} = {init};", acc.acc.0));
        self.line(1, &format!("for (var f: i32 = tt; f < {kn}i; f = f + {REDUCE_WG}i) {{"));
        unflatten(self, 2, "f", &acc.ks);
        let x = self.typed(acc.x, Ty::S(d))?;
        let s = self.binary(acc.op, d, &format!("v{}", acc.acc.0), &x)?;
        self.line(2, &format!("v{} = {s};", acc.acc.0));
        self.line(1, "}");
        self.line(1, &format!("{red}[tt] = v{};", acc.acc.0));
        self.line(1, "workgroupBarrier();");
        let mut s = REDUCE_WG / 2;
        while s >= 1 {
            let c = self.binary(acc.op, d, &format!("{red}[tt]"), &format!("{red}[tt + {s}i]"))?;
            self.line(1, &format!("if (tt < {s}i) {{ {red}[tt] = {c}; }}"));
            self.line(1, "workgroupBarrier();");
            s /= 2;
        }
        self.line(1, &format!("if (tt == 0i && g < {total}i) {{"));
        self.line(2, &format!("v{} = {red}[0];", acc.acc.0));
        self.stmts(acc.rest, 2)?;
        self.line(1, "}");
        Ok(Emitted { shared, header, groups: [gx as u32, gy as u32, 1], wg: [REDUCE_WG, 1, 1] })
    }
}
