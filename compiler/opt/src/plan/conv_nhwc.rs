//! Convolution with the activations channels-last (`conv_nhwc`, made by the layout pass
//! `rlx_opt::channels_last`). Rows of output positions are the parallel loop; a row whose taps all fall
//! inside x and the columns whose taps do are computed with no check, the others with a branch per tap
//! on whether it falls inside (uniform over the vector: no mask, no select). Two forms:
//! - depthwise: every output position a vector along the channels, each tap one contiguous load of x
//!   and one of the weight, packed at plan time as `[KH·KW][C]`; [`DW_TILE`] positions of a row share
//!   each tap's weight vector (independent accumulators); the channels past the last whole vector run
//!   one at a time;
//! - dense (one group; a stem over few input channels): a tile of up to 8 positions × up to 4 vectors of
//!   output channels ([`DENSE_ACCS`] accumulators), the weight packed as `[M / lanes][KH·KW][C][lanes]`
//!   (one vector load per tap, input channel and vector of the tile), x's element of each position
//!   broadcast.
//! The sums are the interpreter's order (bias, then kernel row, column, input channel), so the result
//! is its bits up to the FMA contraction every kernel shares.

use super::index::linear;
use super::kernel::{lit, KB};
use super::Planner;
use rlx_ir::loops::{Access, Expr, IOp, LoopKind, Stmt};
use rlx_ir::{BinaryOp, ConstData, DType, Def, MirOp, NodeId, OpSet};

/// Output positions a depthwise tile.
const DW_TILE: usize = 4;

/// Accumulators of a dense tile (positions × vectors of output channels): the GEMM's wide tile's.
const DENSE_ACCS: usize = 24;

/// The columns `[lo, hi)` of an output row whose taps all fall inside a row of `w` (stride `s`, left
/// padding `p`, `k` taps `d` apart), for `ow` output columns.
fn inside(ow: usize, w: usize, s: usize, p: usize, k: usize, d: usize) -> (usize, usize) {
    let lo = p.div_ceil(s).min(ow);
    let span = (k - 1) * d;
    let hi = if w + p < span + 1 { 0 } else { ((w + p - span - 1) / s + 1).min(ow) };
    (lo, hi.max(lo))
}

impl Planner<'_> {
    /// Whether anchor `a` is a `conv_nhwc` this kernel computes: 2-D, f32, a constant weight, depthwise
    /// or dense with whole vectors of output channels.
    pub(super) fn is_conv_nhwc(&self, a: NodeId) -> bool {
        let n = self.g.node(a);
        let MirOp::ConvNhwc { groups, .. } = &n.op else { return false };
        let (sx, sw) = (self.shape(n.inputs[0]), self.shape(n.inputs[1]));
        if sx.len() != 4 || sw.len() != 4 {
            return false;
        }
        let depthwise = *groups == sx[3] && sw[0] == sx[3] && sw[1] == 1;
        let dense = *groups == 1 && self.lanes > 1 && sw[0] % self.lanes == 0;
        (depthwise || dense) && matches!(self.g.value(n.inputs[1]).def, Def::Const(_)) && n.inputs.iter().chain(&n.outputs).all(|&v| self.dt(v) == DType::F32)
    }

    /// The kernel of `conv_nhwc` anchor `a` (root `r`, output param `op`), see the module doc.
    pub(super) fn conv_nhwc_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize]) -> Vec<Stmt> {
        let node = self.g.node(a).clone();
        let MirOp::ConvNhwc { strides, pads, dilations, groups } = &node.op else { unreachable!("conv_nhwc_body on {}", node.op.kind()) };
        let Def::Const(wc) = &self.g.value(node.inputs[1]).def else { unreachable!("is_conv_nhwc checks the weight") };
        let (x, av, bias) = (node.inputs[0], node.outputs[0], node.inputs.get(2).copied());
        let sx = self.shape(x);
        let (nb, h, w, c) = (sx[0], sx[1], sx[2], sx[3]);
        let (oh, ow) = (out_shape[1], out_shape[2]);
        let (kh, kw) = (wc.shape[2], wc.shape[3]);
        let (s0, s1, d0, d1) = (strides[0], strides[1], dilations[0], dilations[1]);
        let (pt, pl) = (pads[0], pads[1]);
        let taps = kh * kw;
        let m = out_shape[3];
        let dense = *groups == 1 && !(c == 1 && m == 1);
        let lanes = self.lanes.max(1);
        let wp = if dense {
            // [M / lanes][KH·KW][C][lanes]: a tap's and input channel's vector of output channels contiguous.
            let packed: Vec<f32> = (0..m * taps * c)
                .map(|i| {
                    let (l, rest) = (i % lanes, i / lanes);
                    let (ci, rest) = (rest % c, rest / c);
                    let (tap, panel) = (rest % taps, rest / taps);
                    wc.get_f64(((panel * lanes + l) * c + ci) * taps + tap) as f32
                })
                .collect();
            let label = format!("{} (packed [panels][taps][channels][{lanes}])", self.label(node.inputs[1]));
            let wb = self.add_weight(label, &ConstData::from_f32(vec![m / lanes, taps, c, lanes], &packed));
            kb.param(wb, &self.buffers[wb as usize].clone(), Access::Read)
        } else {
            // [KH·KW][C]: a tap's channels contiguous.
            let packed: Vec<f32> = (0..taps * c).map(|i| wc.get_f64((i % c) * taps + i / c) as f32).collect();
            let wb = self.add_weight(format!("{} (packed [taps][channels])", self.label(node.inputs[1])), &ConstData::from_f32(vec![taps, c], &packed));
            kb.param(wb, &self.buffers[wb as usize].clone(), Access::Read)
        };
        let u = kb.var();
        let ni = if nb > 1 { Expr::i(IOp::Div, Expr::Var(u), Expr::Int(oh as i64)) } else { Expr::Int(0) };
        let oy = if nb > 1 { Expr::i(IOp::Rem, Expr::Var(u), Expr::Int(oh as i64)) } else { Expr::Var(u) };
        // Input row of tap row i: oy·s0 − pt + i·d0.
        let iy = |i: usize| Expr::add(Expr::mul(oy.clone(), Expr::Int(s0 as i64)), Expr::Int((i * d0) as i64 - pt as i64));
        let in_range = |e: Expr, n: usize| Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(0), e.clone()), Expr::i(IOp::Lt, e, Expr::Int(n as i64)));
        let (full, rem) = (c / lanes * lanes, c % lanes);
        // Dense: vectors of output channels a tile (up to 4), positions a tile (up to 8).
        let per = (1..=4).rev().find(|&v| (m / lanes) % v == 0).unwrap_or(1);
        let tile = if dense { (DENSE_ACCS / per).min(8) } else { DW_TILE };
        let tap_ok = |i: usize, ix: Expr, rows: bool, cols: bool| match (rows, cols) {
            (true, true) => Some(Expr::i(IOp::And, in_range(iy(i), h), in_range(ix, w))),
            (true, false) => Some(in_range(iy(i), h)),
            (false, true) => Some(in_range(ix, w)),
            (false, false) => None,
        };
        // Dense: `count` positions from column `ox0`, each tap checked where `rows` / `cols`.
        let dense_block = |me: &mut Self, kb: &mut KB, ox0: Expr, count: usize, rows: bool, cols: bool| -> Vec<Stmt> {
            let (gv, lv) = (kb.var(), kb.var());
            let ox = |t: usize| Expr::add(ox0.clone(), Expr::Int(t as i64));
            let ix = |t: usize, j: usize| Expr::add(Expr::mul(ox(t), Expr::Int(s1 as i64)), Expr::Int((j * d1) as i64 - pl as i64));
            // Output channel of vector v of the group: (g·per + v)·lanes + lane.
            let panel = |v: usize| Expr::add(Expr::mul(Expr::Var(gv), Expr::Int(per as i64)), Expr::Int(v as i64));
            let chan = |v: usize| Expr::add(Expr::mul(panel(v), Expr::Int(lanes as i64)), Expr::Var(lv));
            let accs: Vec<Vec<_>> = (0..count).map(|_| (0..per).map(|_| kb.var()).collect()).collect();
            let mut body = Vec::new();
            for row in &accs {
                for (v, &acc) in row.iter().enumerate() {
                    let init = match bias {
                        Some(b) => me.elem(kb, b, &[chan(v)]),
                        None => lit(0.0, DType::F32),
                    };
                    body.push(Stmt::Decl { var: acc, dtype: DType::F32, init });
                }
            }
            for i in 0..kh {
                for j in 0..kw {
                    let tap = (i * kw + j) as i64;
                    // The k steps of tap (i, j) for positions `ts`: the input channels in turn.
                    let steps = |me: &mut Self, kb: &mut KB, ts: &[usize]| -> Stmt {
                        let cv = kb.var();
                        let wv = |v: usize| {
                            let at = Expr::add(Expr::mul(Expr::add(Expr::mul(Expr::add(Expr::mul(panel(v), Expr::Int(taps as i64)), Expr::Int(tap)), Expr::Int(c as i64)), Expr::Var(cv)), Expr::Int(lanes as i64)), Expr::Var(lv));
                            Expr::load(wp, at)
                        };
                        let mut inner = Vec::new();
                        for &t in ts {
                            let xv = me.elem(kb, x, &[ni.clone(), iy(i), ix(t, j), Expr::Var(cv)]);
                            for (v, &acc) in accs[t].iter().enumerate() {
                                let prod = Expr::Bin(BinaryOp::Mul, DType::F32, Box::new(xv.clone()), Box::new(wv(v)));
                                inner.push(Stmt::Assign { var: acc, value: Expr::Bin(BinaryOp::Add, DType::F32, Box::new(Expr::Var(acc)), Box::new(prod)) });
                            }
                        }
                        Stmt::For { var: cv, extent: c as i64, kind: LoopKind::Serial, body: inner }
                    };
                    if !rows && !cols {
                        let all: Vec<usize> = (0..count).collect();
                        body.push(steps(me, kb, &all));
                        continue;
                    }
                    for t in 0..count {
                        let st = steps(me, kb, &[t]);
                        let cond = tap_ok(i, ix(t, j), rows, cols).expect("a checked tap");
                        body.push(Stmt::If { cond, body: vec![st] });
                    }
                }
            }
            for (t, row) in accs.iter().enumerate() {
                for (v, &acc) in row.iter().enumerate() {
                    let idx = [ni.clone(), oy.clone(), ox(t), chan(v)];
                    let val = me.conv_epilogue(kb, (a, r, av), acc, &idx, true);
                    body.push(Stmt::Store { buf: op, index: linear(&idx, out_shape), value: val });
                }
            }
            let vl = Stmt::For { var: lv, extent: lanes as i64, kind: LoopKind::Vector(lanes as u32), body };
            vec![Stmt::For { var: gv, extent: (m / lanes / per) as i64, kind: LoopKind::Serial, body: vec![vl] }]
        };
        // Depthwise: `count` positions from column `ox0`, each tap checked where `rows` / `cols`.
        let dw_block = |me: &mut Self, kb: &mut KB, ox0: Expr, count: usize, rows: bool, cols: bool| -> Vec<Stmt> {
            let chans = |me: &mut Self, kb: &mut KB, ch: Expr| -> Vec<Stmt> {
                let accs: Vec<_> = (0..count).map(|_| kb.var()).collect();
                let ox = |t: usize| Expr::add(ox0.clone(), Expr::Int(t as i64));
                let mut body = Vec::new();
                for &acc in &accs {
                    let init = match bias {
                        Some(b) => me.elem(kb, b, &[ch.clone()]),
                        None => lit(0.0, DType::F32),
                    };
                    body.push(Stmt::Decl { var: acc, dtype: DType::F32, init });
                }
                for i in 0..kh {
                    for j in 0..kw {
                        let wv = Expr::load(wp, Expr::add(Expr::Int(((i * kw + j) * c) as i64), ch.clone()));
                        for (t, &acc) in accs.iter().enumerate() {
                            let ix = Expr::add(Expr::mul(ox(t), Expr::Int(s1 as i64)), Expr::Int((j * d1) as i64 - pl as i64));
                            let xv = me.elem(kb, x, &[ni.clone(), iy(i), ix.clone(), ch.clone()]);
                            let prod = Expr::Bin(BinaryOp::Mul, DType::F32, Box::new(xv), Box::new(wv.clone()));
                            let st = Stmt::Assign { var: acc, value: Expr::Bin(BinaryOp::Add, DType::F32, Box::new(Expr::Var(acc)), Box::new(prod)) };
                            body.push(match tap_ok(i, ix, rows, cols) {
                                Some(cond) => Stmt::If { cond, body: vec![st] },
                                None => st,
                            });
                        }
                    }
                }
                for (t, &acc) in accs.iter().enumerate() {
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
                v.push(Stmt::For { var: cv, extent: full as i64, kind: if lanes > 1 { LoopKind::Vector(lanes as u32) } else { LoopKind::Serial }, body });
            }
            if rem > 0 {
                let cr = kb.var();
                let body = chans(me, kb, Expr::add(Expr::Int(full as i64), Expr::Var(cr)));
                v.push(Stmt::For { var: cr, extent: rem as i64, kind: LoopKind::Serial, body });
            }
            v
        };
        let block = |me: &mut Self, kb: &mut KB, ox0: Expr, count: usize, rows: bool, cols: bool| {
            if dense {
                dense_block(me, kb, ox0, count, rows, cols)
            } else {
                dw_block(me, kb, ox0, count, rows, cols)
            }
        };
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
