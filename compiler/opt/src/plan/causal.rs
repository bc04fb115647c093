//! Attention over the filled cache positions only. Two facts of MIR semantics, recognized here and
//! used by the kernels that read attention's scores and probabilities:
//! - a `where(mask, s, c)` with a constant `c` never reads `s` where the mask is false, so a dot
//!   product feeding `s` is computed only under the mask (`masked_anchor`: the scores matmul skips the
//!   keys its query may not see — past the filled positions, later in the chunk, outside the window);
//! - the softmax over keys of scores masked with `-inf` by a causal mask `key ≤ position[row]` (the
//!   keys an iota constant, the positions a graph value, optionally `and`-ed with more conditions) is
//!   exactly 0 at every key past `position[row]` (exp(-inf) = 0), so a matmul reading those
//!   probabilities over the keys can stop at the largest position of its rows plus one
//!   (`causal_positions`): the terms it leaves out are exact zeros (0 · v for the finite values a cache
//!   holds), the sum of the others keeps its order.
//! The interpreter keeps the masked form over the whole cache; results are the same.

use rlx_ir::{BinaryOp, Def, Mir, MirOp, NodeId, ReduceOp, UnaryOp, ValueId};

fn producer<'g>(g: &'g Mir, v: ValueId) -> Option<(&'g MirOp, &'g [ValueId])> {
    g.producer(v).map(|p| {
        let n = g.node(p);
        (&n.op, n.inputs.as_slice())
    })
}

fn fixed(g: &Mir, v: ValueId) -> Option<Vec<usize>> {
    g.ty(v).shape.as_fixed()
}

/// The `where` of root `r` when it has a constant scalar for its false branch and a condition that
/// does not depend on anchor node `a`: the anchor's value only matters where the condition holds.
pub(super) fn masked_anchor(g: &Mir, r: NodeId, a: NodeId) -> Option<ValueId> {
    let n = g.node(r);
    if n.op != MirOp::Where || a == r {
        return None;
    }
    let (cond, other) = (n.inputs[0], n.inputs[2]);
    let scalar = matches!(&g.value(other).def, Def::Const(c) if c.numel() == 1);
    (scalar && !depends_on(g, cond, a, &mut Vec::new())).then_some(cond)
}

/// Whether value `v` is computed (transitively) from node `a`'s outputs.
fn depends_on(g: &Mir, v: ValueId, a: NodeId, seen: &mut Vec<ValueId>) -> bool {
    if seen.contains(&v) {
        return false;
    }
    seen.push(v);
    match g.producer(v) {
        Some(p) if p == a => true,
        Some(p) => g.node(p).inputs.iter().any(|&i| depends_on(g, i, a, seen)),
        None => false,
    }
}

/// For `v` [.., rows, keys], the softmax over its last axis of causally masked scores (module doc):
/// the positions value P (integer, [rows]); row r of `v` is exactly 0 at keys k > P[r].
pub(super) fn causal_positions(g: &Mir, v: ValueId) -> Option<ValueId> {
    let last = fixed(g, v)?.len().checked_sub(1)?;
    let is_reduce = |x: ValueId, want: ReduceOp| -> Option<ValueId> {
        match producer(g, x)? {
            (MirOp::Reduce { op, axes, keepdims: true }, [i]) if *op == want && axes.as_slice() == [last] => Some(*i),
            _ => None,
        }
    };
    let (MirOp::Binary(BinaryOp::Div), [e, s]) = producer(g, v)? else { return None };
    let (MirOp::Unary(UnaryOp::Exp), [d]) = producer(g, *e)? else { return None };
    let (MirOp::Binary(BinaryOp::Sub), [w, m]) = producer(g, *d)? else { return None };
    if is_reduce(*s, ReduceOp::Sum)? != *e || is_reduce(*m, ReduceOp::Max)? != *w {
        return None;
    }
    masked_positions(g, *w)
}

/// For `w` = where(mask, s, -inf) [.., rows, keys] with mask [rows, keys] = (iota(keys) ≤ P[row]) or
/// that `and` other conditions: P.
fn masked_positions(g: &Mir, w: ValueId) -> Option<ValueId> {
    let (MirOp::Where, [mask, _, ninf]) = producer(g, w)? else { return None };
    match &g.value(*ninf).def {
        Def::Const(c) if c.numel() == 1 && c.get_f64(0) == f64::NEG_INFINITY => {}
        _ => return None,
    }
    let sw = fixed(g, w)?;
    let sm = fixed(g, *mask)?;
    let (rows, keys) = (sw[sw.len().checked_sub(2)?], sw[sw.len() - 1]);
    if sm != [rows, keys] {
        return None;
    }
    causal_le(g, *mask, rows, keys)
}

/// `m` = iota(keys) [1, keys] ≤ reshape(P [rows] → [rows, 1]), possibly `and`-ed with other terms.
fn causal_le(g: &Mir, m: ValueId, rows: usize, keys: usize) -> Option<ValueId> {
    match producer(g, m)? {
        (MirOp::Binary(BinaryOp::And), [a, b]) => causal_le(g, *a, rows, keys).or_else(|| causal_le(g, *b, rows, keys)),
        (MirOp::Binary(BinaryOp::Le), [k, q]) => {
            let Def::Const(c) = &g.value(*k).def else { return None };
            let iota = c.shape == [1, keys] && c.dtype.is_int() && (0..keys).all(|i| c.get_i64(i) == i as i64);
            let (MirOp::Reshape { .. }, [p]) = producer(g, *q)? else { return None };
            let ok = iota && fixed(g, *q)? == [rows, 1] && fixed(g, *p)? == [rows] && g.ty(*p).dtype.is_int() && g.ty(*k).dtype == g.ty(*p).dtype;
            ok.then_some(*p)
        }
        _ => None,
    }
}
