//! Which loops of a kernel may become a GPU's invocation grid: the outer parallel loop and nested loops
//! whose iterations are provably independent (each iteration stores only to write-only buffers the
//! kernel never loads, at indices that name the loop variable and no loaded data, and assigns only
//! scalars it declares). Shared by the shader writer and the PTX writer.

use super::{Access, Expr, Kernel, LoopKind, Stmt, Var};
use std::collections::BTreeSet;

/// Walks statements: vars assigned, buffers stored (with their index expressions), buffers loaded.
pub fn collect(s: &[Stmt], declared: &mut BTreeSet<u32>, assigned: &mut BTreeSet<u32>, stores: &mut Vec<(u32, Expr)>, loads: &mut BTreeSet<u32>) {
    fn ex(e: &Expr, loads: &mut BTreeSet<u32>) {
        match e {
            Expr::Load { buf, index } => {
                loads.insert(*buf);
                ex(index, loads);
            }
            Expr::I(_, a, b) | Expr::Bin(_, _, a, b) => {
                ex(a, loads);
                ex(b, loads);
            }
            Expr::Un(_, _, a) | Expr::Cast { x: a, .. } | Expr::ToIndex { x: a, .. } => ex(a, loads),
            Expr::Select(c, a, b) | Expr::Dot4(c, a, b, _) => {
                ex(c, loads);
                ex(a, loads);
                ex(b, loads);
            }
            Expr::Int(_) | Expr::Lit(..) | Expr::Var(_) => {}
        }
    }
    for st in s {
        match st {
            Stmt::For { var, body, .. } => {
                declared.insert(var.0);
                collect(body, declared, assigned, stores, loads);
            }
            Stmt::Decl { var, init, .. } => {
                declared.insert(var.0);
                ex(init, loads);
            }
            Stmt::Assign { var, value } => {
                assigned.insert(var.0);
                ex(value, loads);
            }
            Stmt::Store { buf, index, value } => {
                stores.push((*buf, index.clone()));
                ex(index, loads);
                ex(value, loads);
            }
            Stmt::If { cond, body } => {
                ex(cond, loads);
                collect(body, declared, assigned, stores, loads);
            }
            Stmt::Prefetch { index, .. } => ex(index, loads),
            Stmt::Comm { .. } => {}
        }
    }
}

/// The kernel parameters the body loads from (`stores` false) or stores to (`stores` true).
pub fn buffers_of(s: &[Stmt], stores: bool) -> BTreeSet<u32> {
    fn ex(e: &Expr, out: &mut BTreeSet<u32>, loads: bool) {
        match e {
            Expr::Load { buf, index } => {
                if loads {
                    out.insert(*buf);
                }
                ex(index, out, loads);
            }
            Expr::Un(_, _, a) | Expr::Cast { x: a, .. } | Expr::ToIndex { x: a, .. } => ex(a, out, loads),
            Expr::I(_, a, b) | Expr::Bin(_, _, a, b) => {
                ex(a, out, loads);
                ex(b, out, loads);
            }
            Expr::Select(c, a, b) | Expr::Dot4(c, a, b, _) => {
                ex(c, out, loads);
                ex(a, out, loads);
                ex(b, out, loads);
            }
            Expr::Int(_) | Expr::Lit(..) | Expr::Var(_) => {}
        }
    }
    fn st(s: &[Stmt], out: &mut BTreeSet<u32>, stores: bool) {
        for x in s {
            match x {
                Stmt::For { body, .. } => st(body, out, stores),
                Stmt::Decl { init: e, .. } | Stmt::Assign { value: e, .. } => ex(e, out, !stores),
                Stmt::Store { buf, index, value } => {
                    if stores {
                        out.insert(*buf);
                    }
                    ex(index, out, !stores);
                    ex(value, out, !stores);
                }
                Stmt::If { cond, body } => {
                    ex(cond, out, !stores);
                    st(body, out, stores);
                }
                Stmt::Prefetch { index, .. } => ex(index, out, !stores),
                Stmt::Comm { send, recv, .. } => {
                    out.extend(if stores { Some(*recv) } else { *send });
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    st(s, &mut out, stores);
    out
}

pub fn mentions(e: &Expr, v: Var) -> bool {
    match e {
        Expr::Var(x) => *x == v,
        Expr::Load { index, .. } => mentions(index, v),
        Expr::I(_, a, b) | Expr::Bin(_, _, a, b) => mentions(a, v) || mentions(b, v),
        Expr::Un(_, _, a) | Expr::Cast { x: a, .. } | Expr::ToIndex { x: a, .. } => mentions(a, v),
        Expr::Select(c, a, b) | Expr::Dot4(c, a, b, _) => mentions(c, v) || mentions(a, v) || mentions(b, v),
        Expr::Int(_) | Expr::Lit(..) => false,
    }
}

/// `e` with every variable `v` replaced by `f(v)`.
pub fn map_vars(e: &Expr, f: &dyn Fn(Var) -> Expr) -> Expr {
    map_nodes(e, &|x| match x {
        Expr::Var(v) => Some(f(*v)),
        _ => None,
    })
}

/// `e` rebuilt top-down, each node for which `f` answers replaced by its answer.
pub fn map_nodes(e: &Expr, f: &dyn Fn(&Expr) -> Option<Expr>) -> Expr {
    if let Some(x) = f(e) {
        return x;
    }
    let r = |x: &Expr| Box::new(map_nodes(x, f));
    match e {
        Expr::Load { buf, index } => Expr::Load { buf: *buf, index: r(index) },
        Expr::I(op, a, b) => Expr::I(*op, r(a), r(b)),
        Expr::Un(op, d, a) => Expr::Un(*op, *d, r(a)),
        Expr::Bin(op, d, a, b) => Expr::Bin(*op, *d, r(a), r(b)),
        Expr::Select(c, a, b) => Expr::Select(r(c), r(a), r(b)),
        Expr::Cast { from, to, x } => Expr::Cast { from: *from, to: *to, x: r(x) },
        Expr::ToIndex { from, x } => Expr::ToIndex { from: *from, x: r(x) },
        Expr::Dot4(c, a, b, m) => Expr::Dot4(r(c), r(a), r(b), *m),
        Expr::Var(_) | Expr::Int(_) | Expr::Lit(..) => e.clone(),
    }
}

/// The (buffer, index) of every load in `e` whose index loads nothing itself, in order.
pub fn loads_of(e: &Expr, out: &mut Vec<(u32, Expr)>) {
    match e {
        Expr::Load { buf, index } => {
            if !has_load(index) {
                out.push((*buf, (**index).clone()));
            }
        }
        Expr::I(_, a, b) | Expr::Bin(_, _, a, b) => {
            loads_of(a, out);
            loads_of(b, out);
        }
        Expr::Un(_, _, a) | Expr::Cast { x: a, .. } | Expr::ToIndex { x: a, .. } => loads_of(a, out),
        Expr::Select(a, b, c) | Expr::Dot4(a, b, c, _) => {
            loads_of(a, out);
            loads_of(b, out);
            loads_of(c, out);
        }
        Expr::Int(_) | Expr::Lit(..) | Expr::Var(_) => {}
    }
}

pub fn has_load(e: &Expr) -> bool {
    let mut l = BTreeSet::new();
    collect(&[Stmt::Assign { var: Var(u32::MAX), value: e.clone() }], &mut BTreeSet::new(), &mut BTreeSet::new(), &mut Vec::new(), &mut l);
    !l.is_empty()
}

/// Whether the iterations of `for var { body }` are independent, so the loop may become part of the
/// invocation grid: the body assigns only scalars it declares, stores only to write-only buffers that
/// the kernel never loads, at indices that depend on `var` and on no loaded data.
pub fn independent(k: &Kernel, var: Var, body: &[Stmt], kernel_loads: &BTreeSet<u32>) -> bool {
    let (mut declared, mut assigned, mut stores, mut loads) = (BTreeSet::new(), BTreeSet::new(), Vec::new(), BTreeSet::new());
    collect(body, &mut declared, &mut assigned, &mut stores, &mut loads);
    if !assigned.is_subset(&declared) || stores.is_empty() {
        return false;
    }
    stores.iter().all(|(b, idx)| k.params[*b as usize].access == Access::Write && !kernel_loads.contains(b) && !has_load(idx) && mentions(idx, var))
}

/// The kernel's grid: the outermost `parallel` loop and the nested loops under it whose iterations are
/// [`independent`] (a loop of one iteration always is: it runs once either way), while their product
/// stays within `max_total` invocations — the flattened
/// (var, extent) loops, outermost first — and the body left inside them. Every GPU writer (shaders,
/// PTX) maps a kernel onto its invocation grid with this one analysis.
pub fn grid(k: &Kernel, max_total: i64) -> (Vec<(Var, i64)>, &[Stmt]) {
    let mut dims = Vec::new();
    let mut cur: &[Stmt] = &k.body;
    if let [Stmt::For { var, extent, kind: LoopKind::Parallel, body }] = cur {
        dims.push((*var, *extent));
        cur = body;
        let (mut kl, mut ks) = (BTreeSet::new(), Vec::new());
        collect(&k.body, &mut BTreeSet::new(), &mut BTreeSet::new(), &mut ks, &mut kl);
        let mut total = *extent;
        while let [Stmt::For { var, extent, body, .. }] = cur {
            if total.saturating_mul(*extent) > max_total || (*extent != 1 && !independent(k, *var, body, &kl)) {
                break;
            }
            total *= extent;
            dims.push((*var, *extent));
            cur = body;
        }
    }
    (dims, cur)
}
