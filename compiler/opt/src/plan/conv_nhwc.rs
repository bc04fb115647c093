//! Convolution with the activations channels-last (`conv_nhwc`, made by the layout pass
//! `rlx_opt::channels_last`), depthwise: rows of output positions are the parallel loop; a row whose
//! taps all fall inside x and the columns whose taps do are computed with no check, the others with a
//! branch per tap on whether it falls inside (uniform over the vector: no mask, no select); every output position a vector along the channels, each tap one contiguous load of x
//!   and one of the weight, packed at plan time as `[KH·KW][C]`; [`DW_TILE`] positions of a row share
//!   each tap's weight vector (independent accumulators); the channels past the last whole vector run
//!   one at a time;
//! - dense (one group): `conv_nhwc_gemm.rs`'s implicit GEMM.
//! The sums are the interpreter's order (bias, then kernel row, column, input channel), so the result
//! is its bits up to the FMA contraction every kernel shares.

use super::index::linear;
use super::kernel::{lit, KB};
use super::Planner;
use rlx_ir::loops::{Access, Expr, IOp, LoopKind, Stmt};
use rlx_ir::{BinaryOp, ConstData, DType, Def, MirOp, NodeId, OpSet, PoolKind};

/// Output positions a depthwise tile.
const DW_TILE: usize = 4;

/// The columns `[lo, hi)` of an output row whose taps all fall inside a row of `w` (stride `s`, left
/// padding `p`, `k` taps `d` apart), for `ow` output columns.
fn inside(ow: usize, w: usize, s: usize, p: usize, k: usize, d: usize) -> (usize, usize) {
    let lo = p.div_ceil(s).min(ow);
    let span = (k - 1) * d;
    let hi = if w + p < span + 1 { 0 } else { ((w + p - span - 1) / s + 1).min(ow) };
    (lo, hi.max(lo))
}

/// What a window kernel combines at each tap.
enum Win {
    /// A depthwise convolution: the packed weight's parameter.
    Conv(u32),
    Max,
    /// An average pool; `include_pad`: dividing by the taps inside the padded extent.
    Avg { include_pad: bool },
}

impl Planner<'_> {
    /// Whether anchor `a` is a `conv_nhwc` or `max_pool_nhwc` / `avg_pool_nhwc` this module computes: 2-D,
    /// f32; a convolution's weight constant (packed by the kernel: no plain copy is stored, `memory.rs`),
    /// depthwise or dense ([`Self::is_nhwc_dense`]).
    pub(super) fn is_nhwc_window(&self, a: NodeId) -> bool {
        let n = self.g.node(a);
        let sx = self.shape(n.inputs[0]);
        if sx.len() != 4 || !n.inputs.iter().chain(&n.outputs).all(|&v| self.dt(v) == DType::F32) {
            return false;
        }
        match &n.op {
            MirOp::PoolNhwc { kernel, .. } => kernel.len() == 2,
            MirOp::ConvNhwc { groups, .. } => {
                let sw = self.shape(n.inputs[1]);
                if sw.len() != 4 || !matches!(self.g.value(n.inputs[1]).def, Def::Const(_)) {
                    return false;
                }
                (*groups == sx[3] && sw[0] == sx[3] && sw[1] == 1) || self.is_nhwc_dense(a)
            }
            _ => false,
        }
    }

    /// Whether `conv_nhwc` anchor `a` is dense (`conv_nhwc_gemm.rs`'s implicit GEMM): one group (not a
    /// single channel's, which the window kernel takes), whole vectors of output channels, x unpadded
    /// (the layout pass pads it first), f32, a constant weight.
    pub(super) fn is_nhwc_dense(&self, a: NodeId) -> bool {
        let n = self.g.node(a);
        let MirOp::ConvNhwc { groups, pads, .. } = &n.op else { return false };
        let (sx, sw) = (self.shape(n.inputs[0]), self.shape(n.inputs[1]));
        sx.len() == 4
            && sw.len() == 4
            && *groups == 1
            && !(sx[3] == 1 && sw[0] == 1)
            && self.lanes > 1
            && sw[0] % self.lanes == 0
            && pads.iter().all(|&p| p == 0)
            && matches!(self.g.value(n.inputs[1]).def, Def::Const(_))
            && n.inputs.iter().chain(&n.outputs).all(|&v| self.dt(v) == DType::F32)
    }

    /// The kernel of `conv_nhwc` / pool anchor `a` (root `r`, output param `op`), see the module doc.
    pub(super) fn nhwc_window_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize]) -> Vec<Stmt> {
        let node = self.g.node(a).clone();
        let (x, av) = (node.inputs[0], node.outputs[0]);
        let sx = self.shape(x);
        let (nb, h, w, c) = (sx[0], sx[1], sx[2], sx[3]);
        let (oh, ow) = (out_shape[1], out_shape[2]);
        let (win, kernel, strides, pads, dilations, bias) = match &node.op {
            MirOp::ConvNhwc { strides, pads, dilations, .. } => {
                let Def::Const(wc) = &self.g.value(node.inputs[1]).def else { unreachable!("is_nhwc_window checks the weight") };
                let (kh, kw) = (wc.shape[2], wc.shape[3]);
                if self.is_nhwc_dense(a) {
                    return self.conv_nhwc_gemm_body(kb, a, r, op, out_shape);
                }
                // [KH·KW][C]: a tap's channels contiguous.
                let taps = kh * kw;
                let packed: Vec<f32> = (0..taps * c).map(|i| wc.get_f64((i % c) * taps + i / c) as f32).collect();
                let wb = self.add_weight(format!("{} (packed [taps][channels])", self.label(node.inputs[1])), &ConstData::from_f32(vec![taps, c], &packed));
                let wp = kb.param(wb, &self.buffers[wb as usize].clone(), Access::Read);
                (Win::Conv(wp), vec![kh, kw], strides.clone(), pads.clone(), dilations.clone(), node.inputs.get(2).copied())
            }
            MirOp::PoolNhwc { kind, kernel, strides, pads, dilations, count_include_pad, .. } => {
                let win = if *kind == PoolKind::Max { Win::Max } else { Win::Avg { include_pad: *count_include_pad } };
                (win, kernel.clone(), strides.clone(), pads.clone(), dilations.clone(), None)
            }
            _ => unreachable!("nhwc_window_body on {}", node.op.kind()),
        };
        let (kh, kw) = (kernel[0], kernel[1]);
        let (s0, s1, d0, d1) = (strides[0], strides[1], dilations[0], dilations[1]);
        let (pt, pl, pb, pr) = (pads[0], pads[1], pads[2], pads[3]);
        let lanes = self.lanes.max(1);
        let u = kb.var();
        let ni = if nb > 1 { Expr::i(IOp::Div, Expr::Var(u), Expr::Int(oh as i64)) } else { Expr::Int(0) };
        let oy = if nb > 1 { Expr::i(IOp::Rem, Expr::Var(u), Expr::Int(oh as i64)) } else { Expr::Var(u) };
        // Input row of tap row i: oy·s0 − pt + i·d0.
        let iy = |i: usize| Expr::add(Expr::mul(oy.clone(), Expr::Int(s0 as i64)), Expr::Int((i * d0) as i64 - pt as i64));
        let between = |e: Expr, lo: i64, hi: i64| Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(lo), e.clone()), Expr::i(IOp::Lt, e, Expr::Int(hi)));
        let in_range = |e: Expr, n: usize| between(e, 0, n as i64);
        // An average pool counting the padding: a tap inside the padded extent (not past it, in ceil mode).
        let in_padded = |i: usize, ix: Expr| Expr::i(IOp::And, between(iy(i), -(pt as i64), (h + pb) as i64), between(ix, -(pl as i64), (w + pr) as i64));
        let (full, rem) = (c / lanes * lanes, c % lanes);
        let tile = DW_TILE;
        let tap_ok = |i: usize, ix: Expr, rows: bool, cols: bool| match (rows, cols) {
            (true, true) => Some(Expr::i(IOp::And, in_range(iy(i), h), in_range(ix, w))),
            (true, false) => Some(in_range(iy(i), h)),
            (false, true) => Some(in_range(ix, w)),
            (false, false) => None,
        };
        // Depthwise: `count` positions from column `ox0`, each tap checked where `rows` / `cols`.
        let dw_block = |me: &mut Self, kb: &mut KB, ox0: Expr, count: usize, rows: bool, cols: bool| -> Vec<Stmt> {
            let chans = |me: &mut Self, kb: &mut KB, ch: Expr| -> Vec<Stmt> {
                let accs: Vec<_> = (0..count).map(|_| kb.var()).collect();
                // An average pool's count of the taps it divides by, where some are checked.
                let counted = matches!(win, Win::Avg { .. }) && (rows || cols);
                let cnts: Vec<_> = (0..if counted { count } else { 0 }).map(|_| kb.var()).collect();
                let ox = |t: usize| Expr::add(ox0.clone(), Expr::Int(t as i64));
                let f32s = |op: BinaryOp, a: Expr, b: Expr| Expr::Bin(op, DType::F32, Box::new(a), Box::new(b));
                let mut body = Vec::new();
                for &acc in &accs {
                    let init = match (&win, bias) {
                        (Win::Conv(_), Some(b)) => me.elem(kb, b, &[ch.clone()]),
                        (Win::Max, _) => lit(f64::NEG_INFINITY, DType::F32),
                        _ => lit(0.0, DType::F32),
                    };
                    body.push(Stmt::Decl { var: acc, dtype: DType::F32, init });
                }
                for &cnt in &cnts {
                    body.push(Stmt::Decl { var: cnt, dtype: DType::F32, init: lit(0.0, DType::F32) });
                }
                for i in 0..kh {
                    for j in 0..kw {
                        for (t, &acc) in accs.iter().enumerate() {
                            let ix = Expr::add(Expr::mul(ox(t), Expr::Int(s1 as i64)), Expr::Int((j * d1) as i64 - pl as i64));
                            let xv = me.elem(kb, x, &[ni.clone(), iy(i), ix.clone(), ch.clone()]);
                            let value = match &win {
                                Win::Conv(wp) => f32s(BinaryOp::Add, Expr::Var(acc), f32s(BinaryOp::Mul, xv, Expr::load(*wp, Expr::add(Expr::Int(((i * kw + j) * c) as i64), ch.clone())))),
                                Win::Max => f32s(BinaryOp::Max, Expr::Var(acc), xv),
                                Win::Avg { .. } => f32s(BinaryOp::Add, Expr::Var(acc), xv),
                            };
                            let mut st = vec![Stmt::Assign { var: acc, value }];
                            let count = |cnt| Stmt::Assign { var: cnt, value: f32s(BinaryOp::Add, Expr::Var(cnt), lit(1.0, DType::F32)) };
                            match (&win, cnts.get(t)) {
                                (Win::Avg { include_pad: false }, Some(&cnt)) => st.push(count(cnt)),
                                (Win::Avg { include_pad: true }, Some(&cnt)) => body.push(Stmt::If { cond: in_padded(i, ix.clone()), body: vec![count(cnt)] }),
                                _ => {}
                            }
                            match tap_ok(i, ix, rows, cols) {
                                Some(cond) => body.push(Stmt::If { cond, body: st }),
                                None => body.extend(st),
                            }
                        }
                    }
                }
                for (t, &acc) in accs.iter().enumerate() {
                    if matches!(win, Win::Avg { .. }) {
                        let div = cnts.get(t).map_or(lit((kh * kw) as f64, DType::F32), |&n| Expr::Var(n));
                        body.push(Stmt::Assign { var: acc, value: f32s(BinaryOp::Div, Expr::Var(acc), div) });
                    }
                    let idx = [ni.clone(), oy.clone(), ox(t), ch.clone()];
                    let v = me.conv_epilogue(kb, (a, r, av), acc, &idx, true);
                    body.push(Stmt::Store { buf: op, index: linear(&idx, out_shape), value: v });
                }
                body
            };
            let mut v = Vec::new();
            if full > 0 {
                let cv = kb.var();
                let body = chans(me, kb, Expr::Var(cv));
                v.push(Stmt::For { var: cv, extent: full as i64, kind: LoopKind::run(lanes as u32), body });
            }
            if rem > 0 {
                let cr = kb.var();
                let body = chans(me, kb, Expr::add(Expr::Int(full as i64), Expr::Var(cr)));
                v.push(Stmt::For { var: cr, extent: rem as i64, kind: LoopKind::Serial, body });
            }
            v
        };
        let block = dw_block;
        // Columns [from, to) in tiles, then one at a time.
        let span = |me: &mut Self, kb: &mut KB, from: usize, to: usize, rows: bool, cols: bool| -> Vec<Stmt> {
            let n = to.saturating_sub(from);
            let mut v = Vec::new();
            if n / tile > 0 {
                let tv = kb.var();
                let ox0 = Expr::add(Expr::mul(Expr::Var(tv), Expr::Int(tile as i64)), Expr::Int(from as i64));
                let body = block(me, kb, ox0, tile, rows, cols);
                v.push(Stmt::For { var: tv, extent: (n / tile) as i64, kind: LoopKind::Serial, body });
            }
            if n % tile > 0 {
                let tv = kb.var();
                let ox0 = Expr::add(Expr::Var(tv), Expr::Int((from + n / tile * tile) as i64));
                let body = block(me, kb, ox0, 1, rows, cols);
                v.push(Stmt::For { var: tv, extent: (n % tile) as i64, kind: LoopKind::Serial, body });
            }
            v
        };
        let (lo, hi) = inside(ow, w, s1, pl, kw, d1);
        // A row whose taps all fall inside x: its inside columns unchecked, the others checked by column.
        let mut inner = span(self, kb, 0, lo, false, true);
        inner.extend(span(self, kb, lo, hi, false, false));
        inner.extend(span(self, kb, hi, ow, false, true));
        // Any other row: every tap checked.
        let outer = span(self, kb, 0, ow, true, true);
        let top = Expr::add(Expr::mul(oy.clone(), Expr::Int(s0 as i64)), Expr::Int(-(pt as i64)));
        let bottom = Expr::add(top.clone(), Expr::Int(((kh - 1) * d0) as i64));
        let row_inside = Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(0), top), Expr::i(IOp::Lt, bottom, Expr::Int(h as i64)));
        let not_inside = Expr::i(IOp::Eq, row_inside.clone(), Expr::Int(0));
        let row = vec![Stmt::If { cond: row_inside, body: inner }, Stmt::If { cond: not_inside, body: outer }];
        vec![Stmt::For { var: u, extent: (nb * oh) as i64, kind: LoopKind::Parallel, body: row }]
    }
}

#[cfg(test)]
mod tests {
    use super::inside;

    /// The inside columns: 3×3 pad 1 stride 1 over 56 → [1, 55); stride 2 over 112 → 56 outputs [1, 56);
    /// 5×5 pad 2 over 7 → [2, 5); a window wider than the padded row → none.
    #[test]
    fn inside_columns() {
        assert_eq!(inside(56, 56, 1, 1, 3, 1), (1, 55));
        assert_eq!(inside(56, 112, 2, 1, 3, 1), (1, 56));
        assert_eq!(inside(7, 7, 1, 2, 5, 1), (2, 5));
        let (lo, hi) = inside(3, 3, 1, 4, 9, 1);
        assert_eq!(lo, hi);
    }
}
