//! Register transposes: the loop nest the planner writes for an `n × n` block of a transpose
//! (`compiler/opt/src/plan/transpose.rs`),
//!
//! ```text
//! for i in 0..n { for l in 0..n vector(n) { dst[d0 + i + l·ds] = src[s0 + i·ss + l] } }
//! ```
//!
//! is written as `n` vector loads (the block's rows), the block transposed in registers by
//! shufflevectors and `n` vector stores (its columns), where the vector writer alone would store each
//! lane apart (`n` scalar stores per row). n = 8 takes the AVX form — in-lane unpacks, in-lane pair
//! moves, then 128-bit halves exchanged: 24 shuffles, each one instruction on AVX2 (the log-step
//! interleave below became 48 there); n = 4 and 16 take `log2(n)` rounds of interleaves (rows k and
//! k + n/2 zipped into rows 2k and 2k + 1), which are `unpcklps`/`unpckhps` for 4 lanes and one
//! two-source permute (`vpermt2ps`) each for 16.

use super::vector::affine;
use super::{memty, Writer};
use rlx_ir::loops::{Expr, LoopKind, Stmt, Var};
use rlx_ir::DType;

/// A recognized block: `dst[d0 + i + l·ds] = src[s0 + i·ss + l]` for i, l in 0..n.
pub(super) struct Block {
    n: usize,
    dst: u32,
    d0: Expr,
    ds: i64,
    src: u32,
    s0: Expr,
    ss: i64,
}

/// The block that `for var in 0..extent { body }` copies, when it is the nest of the module doc over
/// buffers of one non-bool dtype.
pub(super) fn block(params: &[(DType, String)], var: Var, extent: i64, body: &[Stmt]) -> Option<Block> {
    let [Stmt::For { var: l, extent: inner, kind: LoopKind::Vector(n), body }] = body else { return None };
    let n = *n as usize;
    if !matches!(n, 4 | 8 | 16) || extent != n as i64 || *inner != n as i64 {
        return None;
    }
    let [Stmt::Store { buf: dst, index: di, value: Expr::Load { buf: src, index: si } }] = body.as_slice() else { return None };
    let (di_l, ds) = affine(di, *l)?;
    let (d0, 1) = affine(&di_l, var)? else { return None };
    let (si_l, 1) = affine(si, *l)? else { return None };
    let (s0, ss) = affine(&si_l, var)?;
    let (dt, st) = (params[*dst as usize].0, params[*src as usize].0);
    (dt == st && dt != DType::Bool && ds != 1).then_some(Block { n, dst: *dst, d0, ds, src: *src, s0, ss })
}

/// The shuffle masks, in rounds: each entry (a, b, mask, into) makes row `into` of the next round from
/// rows a and b of this one.
fn rounds(n: usize) -> Vec<Vec<(usize, usize, Vec<usize>, usize)>> {
    if n == 8 {
        let (lo, hi) = (vec![0, 8, 1, 9, 4, 12, 5, 13], vec![2, 10, 3, 11, 6, 14, 7, 15]);
        let (pl, ph) = (vec![0, 1, 8, 9, 4, 5, 12, 13], vec![2, 3, 10, 11, 6, 7, 14, 15]);
        let (hl, hh) = (vec![0, 1, 2, 3, 8, 9, 10, 11], vec![4, 5, 6, 7, 12, 13, 14, 15]);
        // Round 1: rows (2k, 2k + 1) unpacked into 2k (low) and 2k + 1 (high).
        let r1 = (0..4).flat_map(|k| [(2 * k, 2 * k + 1, lo.clone(), 2 * k), (2 * k, 2 * k + 1, hi.clone(), 2 * k + 1)]).collect();
        // Round 2: within each group of four rows g, pairs of (0, 2) and (1, 3) moved together.
        let r2 = (0..2)
            .flat_map(|g| {
                let b = 4 * g;
                [(b, b + 2, pl.clone(), b), (b, b + 2, ph.clone(), b + 1), (b + 1, b + 3, pl.clone(), b + 2), (b + 1, b + 3, ph.clone(), b + 3)]
            })
            .collect();
        // Round 3: 128-bit halves of rows c and c + 4 exchanged: columns c and c + 4.
        let r3 = (0..4).flat_map(|c| [(c, c + 4, hl.clone(), c), (c, c + 4, hh.clone(), c + 4)]).collect();
        return vec![r1, r2, r3];
    }
    let h = n / 2;
    let lo: Vec<usize> = (0..h).flat_map(|k| [k, k + n]).collect();
    let hi: Vec<usize> = (h..n).flat_map(|k| [k, k + n]).collect();
    let round: Vec<_> = (0..h).flat_map(|k| [(k, k + h, lo.clone(), 2 * k), (k, k + h, hi.clone(), 2 * k + 1)]).collect();
    vec![round; n.trailing_zeros() as usize]
}

impl Writer<'_> {
    /// Writes block `b`: its rows loaded, transposed by [`rounds`], its columns stored.
    pub(super) fn transpose_block(&mut self, b: &Block) {
        let (d, sp) = self.params[b.src as usize].clone();
        let dp = self.params[b.dst as usize].1.clone();
        let (mt, align) = (memty(d), d.size().unwrap_or(1));
        let vt = format!("<{} x {mt}>", b.n);
        let s0 = self.expr(&b.s0);
        let mut rows = Vec::with_capacity(b.n);
        for i in 0..b.n {
            let at = self.op(format!("add nsw i64 {s0}, {}", i as i64 * b.ss));
            let p = self.op(format!("getelementptr inbounds {mt}, ptr {sp}, i64 {at}"));
            rows.push(self.op(format!("load {vt}, ptr {p}, align {align}")));
        }
        for round in rounds(b.n) {
            let mut next = rows.clone();
            for (x, y, mask, into) in round {
                let m: Vec<String> = mask.iter().map(|k| format!("i32 {k}")).collect();
                next[into] = self.op(format!("shufflevector {vt} {}, {vt} {}, <{} x i32> <{}>", rows[x], rows[y], b.n, m.join(", ")));
            }
            rows = next;
        }
        let d0 = self.expr(&b.d0);
        for (l, col) in rows.iter().enumerate() {
            let at = self.op(format!("add nsw i64 {d0}, {}", l as i64 * b.ds));
            let p = self.op(format!("getelementptr inbounds {mt}, ptr {dp}, i64 {at}"));
            self.line(&format!("store {vt} {col}, ptr {p}, align {align}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::rounds;

    /// The rounds transpose: rows of an n × n matrix of distinct values come out as its columns.
    #[test]
    fn rounds_transpose() {
        for n in [4, 8, 16] {
            let mut rows: Vec<Vec<usize>> = (0..n).map(|i| (0..n).map(|l| i * n + l).collect()).collect();
            for round in rounds(n) {
                let mut next = rows.clone();
                for (x, y, mask, into) in round {
                    let both: Vec<usize> = rows[x].iter().chain(&rows[y]).copied().collect();
                    next[into] = mask.iter().map(|&k| both[k]).collect();
                }
                rows = next;
            }
            for (l, col) in rows.iter().enumerate() {
                assert_eq!(col, &(0..n).map(|i| i * n + l).collect::<Vec<_>>(), "n = {n}, column {l}");
            }
        }
    }
}
