//! Kernels that use workgroup memory and barriers: the WGSL of the plans that
//! `rlx_ir::loops::tiled::recognize` finds in the loop form (the recognizer is shared with the PTX
//! writer; this file only writes them).
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
//! - **Row reduction**: `⊕` ∈ {+, ×, max, min} on f32/i32/u32 with at least `MIN_REDUCE` terms: one
//!   workgroup of `REDUCE_WG` invocations per grid point; invocation t folds terms t, t + 64, …, the
//!   partials meet in a shared-memory tree (barrier per level), and invocation 0 runs `rest`. The
//!   summation order differs from a serial loop (f32 results differ in the last bits).
//!
//! - **Row kernel** (the planner's row fusion: LayerNorm, softmax): the body under the grid is a
//!   sequence of phases over one row — reductions (`decl acc = literal; for k… { acc = acc ⊕ x }`, the
//!   term may read scalars of earlier phases), scalars (`decl s = e`) and element loops (`for j { … }`
//!   whose iterations are independent: they store to buffers the kernel never reads) — with at least
//!   one reduction, one element loop, and a row of at least `MIN_REDUCE`. One workgroup per row
//!   (`row_wg` invocations: 64, 128 or 256 by the row length): each reduction folds strided
//!   partials, meets them in a shared-memory tree (barrier per level) and every invocation takes the
//!   result; scalars are computed by every invocation; element loops are strided over the
//!   invocations (invocation t does j = t, t + wg, …). A tree's summation order differs from a
//!   serial loop's (f32 results differ in the last bits). Short rows, and row kernels not of this
//!   shape, keep one invocation per row; a reduction followed by loops is never taken as a row
//!   reduction (invocation 0 would run the loops alone).
//!
//! Anything else keeps the one-invocation-per-grid-point mapping.

use super::{Ty, W};
use rlx_ir::loops::tiled::{cdiv, unit_stride, Acc, Dims, Phase, Plan, MAX_GROUPS, REDUCE_WG, T};
use rlx_ir::loops::{Expr, Var};
use rlx_ir::BinaryOp;

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
            Plan::Attention(_) => Err(format!("kernel '{}': fused attention has no cooperative WGSL form", self.kname)),
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
