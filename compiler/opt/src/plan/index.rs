//! Index arithmetic in the loop form: row-major strides and linear offsets, broadcasting, clamping,
//! and the index remapping of a reshape.

use rlx_ir::loops::{Expr, IOp};

pub(super) fn align_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

pub(super) fn strides(shape: &[usize]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1] as i64;
    }
    s
}

pub(super) fn linear(idx: &[Expr], shape: &[usize]) -> Expr {
    let st = strides(shape);
    let mut e = Expr::Int(0);
    let mut i = 0;
    while i < idx.len() {
        // A run of dims indexed by `split_flat` over exactly these dims: its flat position itself.
        if let Some((q, last)) = flat_run(idx, shape, i) {
            e = Expr::add(e, Expr::mul(q, Expr::Int(st[last])));
            i = last + 1;
            continue;
        }
        if shape[i] != 1 {
            e = Expr::add(e, Expr::mul(idx[i].clone(), Expr::Int(st[i])));
        }
        i += 1;
    }
    e
}

/// The index of each of `dims` (row-major) at flat position `q` over them: `q / S₀`, …, `q / Sᵢ % dᵢ`,
/// …, `q % d_last` (`linear` folds such a run back into `q`).
pub(super) fn split_flat(q: Expr, dims: &[usize]) -> Vec<Expr> {
    let st = strides(dims);
    (0..dims.len())
        .map(|i| {
            let d = if st[i] == 1 { q.clone() } else { Expr::i(IOp::Div, q.clone(), Expr::Int(st[i])) };
            if i == 0 { d } else { Expr::i(IOp::Rem, d, Expr::Int(dims[i] as i64)) }
        })
        .collect()
}

/// `Some((q, last))` when `idx[i..=last]` is `split_flat(q, &shape[i..=last])` for some q, the
/// longest such run of at least two dims.
fn flat_run(idx: &[Expr], shape: &[usize], i: usize) -> Option<(Expr, usize)> {
    let Expr::I(IOp::Div, q, _) = &idx[i] else { return None };
    (i + 1..idx.len()).rev().find(|&last| idx[i..=last] == split_flat((**q).clone(), &shape[i..=last])[..]).map(|last| ((**q).clone(), last))
}

/// Index into an operand broadcast to `out` rank: drop leading dims, pin size-1 dims to 0.
pub(super) fn bidx(idx: &[Expr], in_shape: &[usize]) -> Vec<Expr> {
    let off = idx.len() - in_shape.len();
    in_shape.iter().enumerate().map(|(i, &d)| if d == 1 { Expr::Int(0) } else { idx[i + off].clone() }).collect()
}

pub(super) fn clamp(e: Expr, lo: i64, hi: i64) -> Expr {
    Expr::i(IOp::Min, Expr::i(IOp::Max, e, Expr::Int(lo)), Expr::Int(hi))
}

/// The index into a reshape's input (`si`) of element `idx` of its output (`so`): the non-unit dims
/// in groups of equal products, each group's flat offset split over its input dims (the whole index
/// linearized if the dims do not group).
pub(super) fn reshape_index(idx: &[Expr], so: &[usize], si: &[usize]) -> Vec<Expr> {
    let on: Vec<usize> = (0..so.len()).filter(|&i| so[i] != 1).collect();
    let inn: Vec<usize> = (0..si.len()).filter(|&i| si[i] != 1).collect();
    let mut out = vec![Expr::Int(0); si.len()];
    let (mut i, mut j) = (0, 0);
    while i < on.len() && j < inn.len() {
        let (i0, j0) = (i, j);
        let (mut po, mut pi) = (so[on[i]], si[inn[j]]);
        i += 1;
        j += 1;
        while po != pi {
            if po < pi && i < on.len() {
                po *= so[on[i]];
                i += 1;
            } else if pi < po && j < inn.len() {
                pi *= si[inn[j]];
                j += 1;
            } else {
                return unflatten(&linear(idx, so), si);
            }
        }
        let od: Vec<usize> = on[i0..i].iter().map(|&k| so[k]).collect();
        let ox: Vec<Expr> = on[i0..i].iter().map(|&k| idx[k].clone()).collect();
        let id: Vec<usize> = inn[j0..j].iter().map(|&k| si[k]).collect();
        for (k, e) in inn[j0..j].iter().zip(unflatten(&linear(&ox, &od), &id)) {
            out[*k] = e;
        }
    }
    if i < on.len() || j < inn.len() {
        return unflatten(&linear(idx, so), si);
    }
    out
}

/// Row-major multi-index of a flat row number over `dims`.
pub(super) fn unflatten(row: &Expr, dims: &[usize]) -> Vec<Expr> {
    let st = strides(dims);
    dims.iter()
        .enumerate()
        .map(|(i, &d)| {
            if d == 1 {
                return Expr::Int(0);
            }
            let q = Expr::i(IOp::Div, row.clone(), Expr::Int(st[i]));
            // The outermost index needs no remainder: rows are in range.
            if i == 0 {
                q
            } else {
                Expr::i(IOp::Rem, q, Expr::Int(d as i64))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::loops::Var;

    /// A flat position split over dims of their full size is folded back into the position; an
    /// operand constant over them (its dims pinned to 0) and a split over other sizes are not.
    #[test]
    fn linear_folds_a_flat_split() {
        let (c, q) = (Expr::Var(Var(0)), Expr::Var(Var(1)));
        let mut idx = vec![c.clone()];
        idx.extend(split_flat(q.clone(), &[3, 5, 7]));
        let want = Expr::add(Expr::add(Expr::Int(0), Expr::mul(c.clone(), Expr::Int(105))), Expr::mul(q.clone(), Expr::Int(1)));
        assert_eq!(linear(&idx, &[4, 3, 5, 7]), want);
        // The same split read as [.., 5, 3, 7] is not a run of those dims: term by term.
        let unfolded = linear(&idx, &[4, 5, 3, 7]);
        assert_ne!(unfolded, want);
        assert!(format!("{unfolded:?}").contains("Rem"), "{unfolded:?}");
    }
}
