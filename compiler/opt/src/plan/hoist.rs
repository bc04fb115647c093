//! Loop-invariant index loads hoisted out of their loops (vector CPU targets). An integer load (a
//! gather's id, a table of offsets) whose index uses only values fixed outside a loop, from a buffer
//! the kernel never writes, is read once into a scalar declared before the loop. The LLVM writer cannot do this itself: a kernel's buffers are plain
//! pointers into one arena, so every store in the loop might change what the load reads, and the load
//! stays inside the loop. A gather of runtime ids is the case that needed it: the id's load (and the
//! normalize-and-clamp of the index computed from it) ran once per copied element, and kept the row
//! copy from being vectorized — an embedding bag (8 × 128 ids into a 30,000 × 128 table, then a mean;
//! one thread, CPU time) 3.2× ONNX Runtime's time before.
//!
//! Only loads every iteration executes are hoisted (not those under an `if` or in one arm of a
//! `select`, which may guard an index out of range), and only out of loops that run at least once;
//! parallel loops keep their loads (their bodies are outlined per thread range). The buffers that
//! qualify are the caller's: those read and never written by the kernel, nor sharing storage with one it
//! writes. Float loads stay where they are: in the vector loops of the convolution tiles a per-channel
//! bias hoisted out is one more scalar live across the 24 accumulators (ResNet-50 1.01×,
//! EfficientNet-like 1.02× the time with them hoisted too; one thread, `ab.py`), and a uniform load in
//! a vector loop is one broadcast anyway.

use rlx_ir::loops::{Expr, Kernel, LoopKind, Stmt, Var};
use rlx_ir::DType;
use std::collections::HashSet;

/// Hoists the invariant integer loads of `k`'s loops from the parameters in `frozen` (read-only, unaliased).
pub(super) fn invariant_loads(k: &mut Kernel, frozen: &HashSet<u32>) {
    let hoistable: HashSet<u32> = frozen.iter().copied().filter(|&p| matches!(k.params[p as usize].dtype, DType::I32 | DType::I64)).collect();
    if hoistable.is_empty() {
        return;
    }
    let mut body = std::mem::take(&mut k.body);
    hoist_in(&mut body, &hoistable, k);
    k.body = body;
}

fn hoist_in(stmts: &mut Vec<Stmt>, ok: &HashSet<u32>, k: &mut Kernel) {
    let mut i = 0;
    while i < stmts.len() {
        let mut decls = Vec::new();
        match &mut stmts[i] {
            Stmt::For { var, extent, kind, body } => {
                hoist_in(body, ok, k);
                if *extent >= 1 && !matches!(kind, LoopKind::Parallel) {
                    let mut bound = HashSet::from([*var]);
                    bound_vars(body, &mut bound);
                    while let Some((buf, index)) = body.iter().find_map(|s| candidate(s, ok, &bound)) {
                        let v = Var(k.vars);
                        k.vars += 1;
                        let load = Expr::Load { buf, index: Box::new(index) };
                        replace_in(body, &load, &Expr::Var(v));
                        decls.push(Stmt::Decl { var: v, dtype: k.params[buf as usize].dtype, init: load });
                    }
                }
            }
            Stmt::If { body, .. } => hoist_in(body, ok, k),
            _ => {}
        }
        let n = decls.len();
        stmts.splice(i..i, decls);
        i += n + 1;
    }
}

/// Every variable a statement list binds (loop indices, declarations, assignments).
fn bound_vars(stmts: &[Stmt], out: &mut HashSet<Var>) {
    for s in stmts {
        match s {
            Stmt::For { var, body, .. } => {
                out.insert(*var);
                bound_vars(body, out);
            }
            Stmt::Decl { var, .. } | Stmt::Assign { var, .. } => {
                out.insert(*var);
            }
            Stmt::If { body, .. } => bound_vars(body, out),
            _ => {}
        }
    }
}

/// A load that statement `s` executes every time it runs (not under an `if`, not in a nested loop,
/// not in a `select`'s arms) whose index is free of `bound` and of other loads.
fn candidate(s: &Stmt, ok: &HashSet<u32>, bound: &HashSet<Var>) -> Option<(u32, Expr)> {
    let exprs: Vec<&Expr> = match s {
        Stmt::Decl { init, .. } => vec![init],
        Stmt::Assign { value, .. } => vec![value],
        Stmt::Store { index, value, .. } => vec![index, value],
        Stmt::If { cond, .. } => vec![cond],
        _ => Vec::new(),
    };
    exprs.into_iter().find_map(|e| find_load(e, ok, bound))
}

fn find_load(e: &Expr, ok: &HashSet<u32>, bound: &HashSet<Var>) -> Option<(u32, Expr)> {
    match e {
        Expr::Load { buf, index } => {
            if ok.contains(buf) && invariant(index, bound) {
                return Some((*buf, (**index).clone()));
            }
            find_load(index, ok, bound)
        }
        Expr::Int(_) | Expr::Lit(..) | Expr::Var(_) => None,
        Expr::I(_, a, b) | Expr::Bin(_, _, a, b) => find_load(a, ok, bound).or_else(|| find_load(b, ok, bound)),
        Expr::Un(_, _, x) | Expr::Cast { x, .. } | Expr::ToIndex { x, .. } => find_load(x, ok, bound),
        Expr::Select(c, _, _) => find_load(c, ok, bound),
        Expr::Dot4(a, b, c, _) => find_load(a, ok, bound).or_else(|| find_load(b, ok, bound)).or_else(|| find_load(c, ok, bound)),
    }
}

/// Whether index `e` reads no variable of `bound` and no buffer.
fn invariant(e: &Expr, bound: &HashSet<Var>) -> bool {
    match e {
        Expr::Int(_) | Expr::Lit(..) => true,
        Expr::Var(v) => !bound.contains(v),
        Expr::Load { .. } => false,
        Expr::I(_, a, b) | Expr::Bin(_, _, a, b) => invariant(a, bound) && invariant(b, bound),
        Expr::Un(_, _, x) | Expr::Cast { x, .. } | Expr::ToIndex { x, .. } => invariant(x, bound),
        Expr::Select(c, a, b) => invariant(c, bound) && invariant(a, bound) && invariant(b, bound),
        Expr::Dot4(a, b, c, _) => invariant(a, bound) && invariant(b, bound) && invariant(c, bound),
    }
}

/// Replaces every occurrence of `from` in the statements (arms and nested bodies included) by `to`.
fn replace_in(stmts: &mut [Stmt], from: &Expr, to: &Expr) {
    for s in stmts {
        match s {
            Stmt::For { body, .. } => replace_in(body, from, to),
            Stmt::Decl { init: e, .. } | Stmt::Assign { value: e, .. } => replace(e, from, to),
            Stmt::Store { index, value, .. } => {
                replace(index, from, to);
                replace(value, from, to);
            }
            Stmt::If { cond, body } => {
                replace(cond, from, to);
                replace_in(body, from, to);
            }
            Stmt::Prefetch { index, .. } => replace(index, from, to),
            _ => {}
        }
    }
}

fn replace(e: &mut Expr, from: &Expr, to: &Expr) {
    if e == from {
        *e = to.clone();
        return;
    }
    match e {
        Expr::Int(_) | Expr::Lit(..) | Expr::Var(_) => {}
        Expr::Load { index, .. } => replace(index, from, to),
        Expr::I(_, a, b) | Expr::Bin(_, _, a, b) => {
            replace(a, from, to);
            replace(b, from, to);
        }
        Expr::Un(_, _, x) | Expr::Cast { x, .. } | Expr::ToIndex { x, .. } => replace(x, from, to),
        Expr::Select(c, a, b) => {
            replace(c, from, to);
            replace(a, from, to);
            replace(b, from, to);
        }
        Expr::Dot4(a, b, c, _) => {
            replace(a, from, to);
            replace(b, from, to);
            replace(c, from, to);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::loops::{Access, Param};

    fn ld(buf: u32, index: Expr) -> Expr {
        Expr::Load { buf, index: Box::new(index) }
    }

    /// A gather's row copy: out (b0) ← table (b2) at the row of id b1[i]. The id's load leaves the
    /// column loop; the table's load (it reads the column) and the output's stay.
    fn gather(body_extra: Vec<Stmt>) -> Kernel {
        let (i, j) = (Var(0), Var(1));
        let row = Expr::ToIndex { from: DType::I64, x: Box::new(ld(1, Expr::Var(i))) };
        let mut col = vec![Stmt::Store { buf: 0, index: Expr::add(Expr::mul(Expr::Var(i), Expr::Int(8)), Expr::Var(j)), value: ld(2, Expr::add(Expr::mul(row, Expr::Int(8)), Expr::Var(j))) }];
        col.extend(body_extra);
        let params = vec![
            Param { dtype: DType::F32, elems: 32, access: Access::Write },
            Param { dtype: DType::I64, elems: 4, access: Access::Read },
            Param { dtype: DType::F32, elems: 80, access: Access::Read },
        ];
        let body = vec![Stmt::For { var: i, extent: 4, kind: LoopKind::Parallel, body: vec![Stmt::For { var: j, extent: 8, kind: LoopKind::Serial, body: col }] }];
        Kernel { name: "g".into(), params, body, vars: 2 }
    }

    #[test]
    fn a_gathers_id_leaves_the_row_copy() {
        let mut k = gather(Vec::new());
        invariant_loads(&mut k, &HashSet::from([1, 2]));
        let Stmt::For { body: outer, .. } = &k.body[0] else { panic!() };
        assert_eq!(outer[0], Stmt::Decl { var: Var(2), dtype: DType::I64, init: ld(1, Expr::Var(Var(0))) });
        let Stmt::For { body: col, .. } = &outer[1] else { panic!("{outer:?}") };
        let text = format!("{col:?}");
        assert!(!text.contains("buf: 1"), "the id is still loaded per column: {text}");
        assert!(text.contains("buf: 2"), "the table's load must stay: {text}");
        assert_eq!(k.vars, 3);
    }

    /// Not hoisted: a buffer the kernel may write (not in `frozen`), a float load, and a load only
    /// an `if` or a `select` arm reaches (it may be guarded against an out-of-range index).
    #[test]
    fn guarded_written_and_float_loads_stay() {
        let mut k = gather(Vec::new());
        let before = k.clone();
        invariant_loads(&mut k, &HashSet::from([2]));
        assert_eq!(k, before, "b1 not frozen");
        let i = Expr::Var(Var(0));
        let guarded = vec![
            Stmt::If { cond: Expr::i(rlx_ir::loops::IOp::Lt, i.clone(), Expr::Int(2)), body: vec![Stmt::Store { buf: 0, index: i.clone(), value: Expr::Cast { from: DType::I64, to: DType::F32, x: Box::new(ld(1, Expr::add(i.clone(), Expr::Int(2)))) } }] },
            Stmt::Store { buf: 0, index: i.clone(), value: Expr::Select(Box::new(Expr::i(rlx_ir::loops::IOp::Lt, i.clone(), Expr::Int(3))), Box::new(Expr::Cast { from: DType::I64, to: DType::F32, x: Box::new(ld(1, Expr::add(i.clone(), Expr::Int(1)))) }), Box::new(ld(2, i.clone()))) },
        ];
        let mut k = gather(guarded);
        invariant_loads(&mut k, &HashSet::from([1, 2]));
        let Stmt::For { body: outer, .. } = &k.body[0] else { panic!() };
        assert_eq!(outer.len(), 2, "only the id b1[i] is hoisted: {outer:?}");
        let text = format!("{:?}", outer[1]);
        assert!(text.contains("Int(2)") && text.contains("Int(1)") && text.contains("buf: 2"), "{text}");
    }
}
