//! Transposes that move the input's innermost dim (NCHW → NHWC, a pixel shuffle's permutation, a
//! matrix transpose): the output's nest in its own order reads the input with a stride of a whole
//! plane in the innermost loop — one cache line per element, which the LLVM writer cannot vectorize
//! (a 64 × 112² NCHW → NHWC transpose, one thread, CPU time: 0.715 ms, ONNX Runtime 0.198).
//! Here the output dim `j` that walks the input's innermost dim runs in blocks of [`BLOCK`] whose
//! lanes are the innermost loop, inside the loop over the output's last dim: each innermost run reads
//! [`BLOCK`] consecutive input values and writes [`BLOCK`] outputs one output row apart, all within
//! the block's rows of the output (a few KiB, in L1 while the last dim sweeps them).
//!
//! Where the transposed value is a plain load (no fused arithmetic) and both the blocked dim and the
//! output's last dim hold at least one vector width `n`, the kernel is `n × n` blocks instead (the
//! dims' remainders element by element)
//! ([`Planner::transpose_tiles`]): for each block, `for i in 0..n { for l in 0..n vector(n) { out[…, j0 +
//! l, c0 + i] = x[…, c0 + i, …, j0 + l] } }` — each lane loop a contiguous load and a store `C` apart.
//! As plain loops every writer runs it as before; the LLVM writer recognizes the nest (`ir/transpose.rs`)
//! and writes it as `n` vector loads, the block transposed in registers by shuffles and `n` vector stores
//! (64 × 112² NCHW → NHWC, one thread, CPU time, the blocked form in the same rounds: 0.377 → 0.143 ms,
//! ONNX Runtime 0.206).

use super::index::linear;
use super::kernel::KB;
use super::Planner;
use rlx_ir::loops::{Expr, IOp, LoopKind, Stmt, Var};
use rlx_ir::{DType, MirOp, NodeId};

/// Output positions along `j` per block: 64 bytes of f32 input, one cache line.
const BLOCK: usize = 16;

/// The copy of `count` positions × `n` channels between planes (positions contiguous) and a staging
/// `[P][n]` (channels contiguous), `store(p, c)` the statement for position `p`, channel `c`: whole
/// blocks of `n` positions as the `n × n` nest that the LLVM writer turns into register tiles
/// (`for i in 0..n { for l in 0..n vector(n) { … } }`, the lanes `l` the positions when
/// `lanes_are_positions` — a load from the planes —, else the channels — a store to them), the last
/// `count mod n` positions a vector of channels each. n is 4, 8 or 16.
pub(super) fn plane_tiles(kb: &mut KB, count: usize, n: usize, lanes_are_positions: bool, store: &mut dyn FnMut(&mut KB, Expr, Expr) -> Stmt) -> Vec<Stmt> {
    let (b, i, l) = (kb.var(), kb.var(), kb.var());
    let p0 = Expr::mul(Expr::Var(b), Expr::Int(n as i64));
    let (p, c) = if lanes_are_positions { (Expr::add(p0, Expr::Var(l)), Expr::Var(i)) } else { (Expr::add(p0, Expr::Var(i)), Expr::Var(l)) };
    let tile = Stmt::For { var: l, extent: n as i64, kind: LoopKind::Vector(n as u32), body: vec![store(kb, p, c)] };
    let tile = Stmt::For { var: i, extent: n as i64, kind: LoopKind::Serial, body: vec![tile] };
    let mut out = vec![Stmt::For { var: b, extent: (count / n) as i64, kind: LoopKind::Serial, body: vec![tile] }];
    if count % n != 0 {
        let (t, lv) = (kb.var(), kb.var());
        let p = Expr::add(Expr::Int((count / n * n) as i64), Expr::Var(t));
        let rest = Stmt::For { var: lv, extent: n as i64, kind: LoopKind::Vector(n as u32), body: vec![store(kb, p, Expr::Var(lv))] };
        out.push(Stmt::For { var: t, extent: (count % n) as i64, kind: LoopKind::Serial, body: vec![rest] });
    }
    out
}

impl Planner<'_> {
    /// The output dim that walks the input's innermost dim, when kernel root `r` is a transpose that
    /// moves it on a vector CPU target (with at least a block along it and 4 along the output's last).
    pub(super) fn transpose_block_dim(&self, r: NodeId, out_shape: &[usize]) -> Option<usize> {
        let MirOp::Transpose { perm } = &self.g.node(r).op else { return None };
        let n = out_shape.len();
        let j = perm.iter().position(|&p| p == n - 1)?;
        (self.lanes >= 4 && j + 1 < n && out_shape[j] >= BLOCK && out_shape[n - 1] >= 4).then_some(j)
    }

    /// The body of transpose kernel `r` (output parameter `op`) with output dim `j` blocked (module doc):
    /// the other dims in order (the first the parallel loop), `j`'s blocks, the last dim, `j`'s lanes.
    pub(super) fn transpose_body(&mut self, kb: &mut KB, r: NodeId, op: u32, out_shape: &[usize], j: usize) -> Vec<Stmt> {
        if let Some(body) = self.transpose_tiles(kb, r, op, out_shape, j) {
            return body;
        }
        let n = out_shape.len();
        let outer: Vec<usize> = (0..n - 1).filter(|&d| d != j && out_shape[d] != 1).collect();
        let vars: Vec<_> = outer.iter().map(|_| kb.var()).collect();
        let (vb, vl, vlast) = (kb.var(), kb.var(), kb.var());
        let mut idx = vec![Expr::Int(0); n];
        for (&d, &v) in outer.iter().zip(&vars) {
            idx[d] = Expr::Var(v);
        }
        idx[j] = Expr::add(Expr::mul(Expr::Var(vb), Expr::Int(BLOCK as i64)), Expr::Var(vl));
        idx[n - 1] = Expr::Var(vlast);
        let v = self.node_expr(kb, r, &idx);
        let mut body = vec![Stmt::Store { buf: op, index: linear(&idx, out_shape), value: v }];
        if out_shape[j] % BLOCK != 0 {
            body = vec![Stmt::If { cond: Expr::i(IOp::Lt, idx[j].clone(), Expr::Int(out_shape[j] as i64)), body }];
        }
        let mut body = vec![Stmt::For { var: vl, extent: BLOCK as i64, kind: LoopKind::Serial, body }];
        body = vec![Stmt::For { var: vlast, extent: out_shape[n - 1] as i64, kind: LoopKind::Serial, body }];
        let blocks = vec![Stmt::For { var: vb, extent: out_shape[j].div_ceil(BLOCK) as i64, kind: if outer.is_empty() { LoopKind::Parallel } else { LoopKind::Serial }, body }];
        body = blocks;
        for (i, (&d, &v)) in outer.iter().zip(&vars).enumerate().rev() {
            let kind = if i == 0 { LoopKind::Parallel } else { LoopKind::Serial };
            body = vec![Stmt::For { var: v, extent: out_shape[d] as i64, kind, body }];
        }
        body
    }

    /// The register-tile form of transpose kernel `r` (module doc), when its value is a plain load of
    /// a non-bool buffer and dim `j` and the output's last dim hold at least one vector width each:
    /// the other dims in order (the first the parallel loop), `j`'s blocks; in each whole block the
    /// last dim's whole blocks as tiles (rows `i`, lanes `l`) and its remainder element by element;
    /// the remainder of `j` (the block past the whole ones) element by element.
    fn transpose_tiles(&mut self, kb: &mut KB, r: NodeId, op: u32, out_shape: &[usize], j: usize) -> Option<Vec<Stmt>> {
        let (n, w) = (out_shape.len(), self.lanes);
        let (jn, cn) = (out_shape[j], out_shape[n - 1]);
        if !matches!(w, 4 | 8 | 16) || jn < w || cn < w || self.dt(self.g.node(r).outputs[0]) == DType::Bool {
            return None;
        }
        let (jfull, cfull) = (jn / w, cn / w);
        let outer: Vec<usize> = (0..n - 1).filter(|&d| d != j && out_shape[d] != 1).collect();
        let vars: Vec<_> = outer.iter().map(|_| kb.var()).collect();
        let (vjb, vcb, vi, vl) = (kb.var(), kb.var(), kb.var(), kb.var());
        let mut idx = vec![Expr::Int(0); n];
        for (&d, &v) in outer.iter().zip(&vars) {
            idx[d] = Expr::Var(v);
        }
        let block = |b: Var, x: Var| Expr::add(Expr::mul(Expr::Var(b), Expr::Int(w as i64)), Expr::Var(x));
        idx[j] = block(vjb, vl);
        idx[n - 1] = block(vcb, vi);
        let value = self.node_expr(kb, r, &idx);
        if !matches!(value, Expr::Load { .. }) {
            return None;
        }
        let mut tile = vec![Stmt::Store { buf: op, index: linear(&idx, out_shape), value }];
        tile = vec![Stmt::For { var: vl, extent: w as i64, kind: LoopKind::Vector(w as u32), body: tile }];
        tile = vec![Stmt::For { var: vi, extent: w as i64, kind: LoopKind::Serial, body: tile }];
        let mut whole = vec![Stmt::For { var: vcb, extent: cfull as i64, kind: LoopKind::Serial, body: tile }];
        // Element by element: output positions (j, c) for j = j0 + a, a < ja, and c = c0 + b, b < cb.
        let elements = |this: &mut Self, kb: &mut KB, j0: Expr, ja: usize, c0: usize, cb: usize| {
            let (va, vb) = (kb.var(), kb.var());
            let mut at = idx.clone();
            at[j] = Expr::add(j0, Expr::Var(va));
            at[n - 1] = Expr::add(Expr::Int(c0 as i64), Expr::Var(vb));
            let v = this.node_expr(kb, r, &at);
            let store = Stmt::Store { buf: op, index: linear(&at, out_shape), value: v };
            let inner = Stmt::For { var: vb, extent: cb as i64, kind: LoopKind::Serial, body: vec![store] };
            Stmt::For { var: va, extent: ja as i64, kind: LoopKind::Serial, body: vec![inner] }
        };
        let jb0 = Expr::mul(Expr::Var(vjb), Expr::Int(w as i64));
        if cn % w != 0 {
            whole.push(elements(self, kb, jb0.clone(), w, cfull * w, cn % w));
        }
        let mut body = whole;
        if jn % w != 0 {
            let last = Expr::Int(jfull as i64);
            let rest = elements(self, kb, jb0, jn % w, 0, cn);
            body = vec![
                Stmt::If { cond: Expr::i(IOp::Lt, Expr::Var(vjb), last.clone()), body },
                Stmt::If { cond: Expr::i(IOp::Eq, Expr::Var(vjb), last), body: vec![rest] },
            ];
        }
        let kind = if outer.is_empty() { LoopKind::Parallel } else { LoopKind::Serial };
        body = vec![Stmt::For { var: vjb, extent: jn.div_ceil(w) as i64, kind, body }];
        for (i, (&d, &v)) in outer.iter().zip(&vars).enumerate().rev() {
            let kind = if i == 0 { LoopKind::Parallel } else { LoopKind::Serial };
            body = vec![Stmt::For { var: v, extent: out_shape[d] as i64, kind, body }];
        }
        Some(body)
    }
}
