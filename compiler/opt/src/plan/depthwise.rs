//! Grouped and depthwise convolution (groups > 1) in `window.rs`'s interior form: the accumulation
//! at output index `idx` (`[N, M, oh, ow]`) where every tap along the width is in bounds, so the
//! width index may be a vector loop's (unit stride: vector loads of the input row) and only the
//! kernel row's bounds are checked, outside the taps along the width. The border columns use the
//! direct per-element body (`conv.rs`); both sum in the same order (bias, then input channel, row, column).
//! With several input channels per group, a few output channels of the group are computed together.
//! The plane form (`plane_rows`, `plane_body`): a stride-1 "same" convolution over narrow rows, whose
//! interior rows are one flat vector loop over the plane's positions with a constant column mask.

use super::kernel::{lit, KB};
use super::window::Win;
use super::Planner;
use rlx_ir::lir::Base;
use rlx_ir::loops::{Access, Expr, IOp, LoopKind, Stmt};
use rlx_ir::{BinaryOp, ConstData, DType, MirOp, NodeId, OpSet};

/// The plane form is used for output rows narrower than this many vectors.
const PLANE_ROW_VECTORS: i64 = 2;

impl Planner<'_> {
    /// The interior accumulations of a 2-D grouped convolution (see the module doc) for the output
    /// channels `chans`, all in the group of channel `idx[1]`, at once: one loop over the group's input
    /// channels and the window, each input load shared by the accumulators (register blocking over
    /// output channels).
    /// Only the kernel columns `taps` (start, end) are summed: all of them in the interior; at a border
    /// column (a constant `idx[3]`) the ones inside the input. With `plane` = (mask parameter, `t`,
    /// count) it is the plane form's (`plane_body`): `idx` is `[n, m, 0, q]` with `q` a flat position of
    /// a plane the window maps onto itself, no kernel row is checked (every row tap is inside the
    /// input), and kernel column `j`'s product is added where `mask[j · count + t]` is non-zero, else 0
    /// (its tap wrapped into the neighbouring row).
    pub(super) fn grouped_interior(&mut self, kb: &mut KB, n: &rlx_ir::Node<MirOp>, idx: &[Expr], chans: &[Expr], taps: (i64, i64), plane: Option<(u32, &Expr, i64)>) -> (Vec<Stmt>, Vec<Expr>) {
        let MirOp::Conv { strides, pads, dilations, groups } = &n.op else { unreachable!("grouped_interior on {}", n.op.kind()) };
        let ins = &n.inputs;
        let odt = self.dt(n.outputs[0]);
        let (sx, sw) = (self.shape(ins[0]), self.shape(ins[1]));
        let (cg, mg) = (sw[1], sw[0] / groups);
        let chan = |r: usize| chans[r].clone();
        let accs: Vec<_> = chans.iter().map(|_| kb.var()).collect();
        let (c, kh, kw) = (kb.var(), kb.var(), kb.var());
        // input channel = (m / mg) * cg + c (the block's channels share a group)
        let ci = Expr::add(Expr::mul(Expr::i(IOp::Div, idx[1].clone(), Expr::Int(mg as i64)), Expr::Int(cg as i64)), Expr::Var(c));
        let pos = |i: usize, k: Expr| Expr::add(Expr::i(IOp::Sub, Expr::mul(idx[2 + i].clone(), Expr::Int(strides[i] as i64)), Expr::Int(pads[i] as i64)), Expr::mul(k, Expr::Int(dilations[i] as i64)));
        let row = pos(0, Expr::Var(kh));
        // The kernel columns: a loop over them, or in the plane form one statement each (the middle
        // one, which never wraps, without the mask).
        let columns: Vec<Expr> = match plane {
            None => vec![Expr::add(Expr::Int(taps.0), Expr::Var(kw))],
            Some(_) => (taps.0..taps.1).map(Expr::Int).collect(),
        };
        let mut stmts = Vec::new();
        let mut upd = Vec::new();
        for (r, &acc) in accs.iter().enumerate() {
            let init = if ins.len() == 3 { self.elem(kb, ins[2], &[chan(r)]) } else { lit(0.0, odt) };
            stmts.push(Stmt::Decl { var: acc, dtype: odt, init });
        }
        for kwe in &columns {
            let xv = self.elem(kb, ins[0], &[idx[0].clone(), ci.clone(), row.clone(), pos(1, kwe.clone())]);
            for (r, &acc) in accs.iter().enumerate() {
                let wv = self.elem(kb, ins[1], &[chan(r), Expr::Var(c), Expr::Var(kh), kwe.clone()]);
                let mut prod = Expr::Bin(BinaryOp::Mul, odt, Box::new(xv.clone()), Box::new(wv));
                match plane {
                    Some((m, t, count)) if *kwe != Expr::Int(pads[1] as i64) => {
                        let mv = Expr::load(m, Expr::add(Expr::mul(kwe.clone(), Expr::Int(count)), t.clone()));
                        let on = Expr::Bin(BinaryOp::Gt, DType::F32, Box::new(mv), Box::new(lit(0.0, DType::F32)));
                        prod = Expr::Select(Box::new(on), Box::new(prod), Box::new(lit(0.0, odt)));
                    }
                    _ => {}
                }
                upd.push(Stmt::Assign { var: acc, value: Expr::Bin(BinaryOp::Add, odt, Box::new(Expr::Var(acc)), Box::new(prod)) });
            }
        }
        let mut cols = match plane {
            None => vec![Stmt::For { var: kw, extent: (taps.1 - taps.0).max(0), kind: LoopKind::Serial, body: upd }],
            Some(_) => upd,
        };
        if plane.is_none() && (pads[0] > 0 || pads[2] > 0) {
            let ok = Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(0), row.clone()), Expr::i(IOp::Lt, row, Expr::Int(sx[2] as i64)));
            cols = vec![Stmt::If { cond: ok, body: cols }];
        }
        let rows = Stmt::For { var: kh, extent: sw[2] as i64, kind: LoopKind::Serial, body: cols };
        stmts.push(Stmt::For { var: c, extent: cg as i64, kind: LoopKind::Serial, body: vec![rows] });
        (stmts, accs.into_iter().map(Expr::Var).collect())
    }

    /// The plane form's rows for window anchor `a` (root `r`): `Some((top, bottom))` for a grouped
    /// convolution at stride 1 and dilation 1 whose output plane is its input's (`oh = h`, `ow = w`:
    /// a "same" padding, `top` and `bottom` rows of it) with rows narrower than `PLANE_ROW_VECTORS`
    /// vectors, an input in a buffer of its own shape, and an epilogue of elementwise ops whose operands
    /// are per channel or whole planes (so each is indexed by the flat position too).
    pub(super) fn plane_rows(&self, a: NodeId, r: NodeId, out_shape: &[usize]) -> Option<(i64, i64)> {
        let n = self.g.node(a);
        let MirOp::Conv { strides, pads, dilations, .. } = &n.op else { return None };
        let (x, sx, sw) = (n.inputs[0], self.shape(n.inputs[0]), self.shape(n.inputs[1]));
        let (h, w) = (out_shape[2], out_shape[3]);
        let same = sx[2] == h && sx[3] == w && h >= 2 && w >= 2;
        let unit = strides.iter().chain(dilations.iter()).all(|&v| v == 1);
        let own = self.buf_of[x.index()].is_some_and(|b| self.buffers[b as usize].shape == sx);
        let flat = (h + 1 - sw[2]) as i64 * w as i64 - (sw[3] as i64 - 1);
        (same && unit && own && (w as i64) < PLANE_ROW_VECTORS * self.lanes as i64 && flat >= 4 && self.tail_safe(r, Some(a), &[h, w])).then_some((pads[0] as i64, pads[2] as i64))
    }

    /// The plane form's flat loop: for a grouped convolution mapping its input plane onto the output's
    /// (`plane_rows`), output position `q = row·w + col` reads `x[q + (i − top)·w + (j − left)]` at tap
    /// (i, j), so over the rows `top..h − bottom` — every row tap inside the input — the positions
    /// `[top·w + left, (h − bottom)·w − right)` are one range cut into vectors (the last one overlapping
    /// the one before): unit-stride loads with no bounds check, all inside the plane. A tap whose
    /// column falls outside the row (it wrapped into the neighbouring row) adds 0 instead of its
    /// product, by a constant mask `[kw][positions]` shared by the convolutions of one shape. Left out:
    /// the first `left` columns of row `top` and the last `right` of row `h − bottom − 1` (the caller
    /// computes those rows' borders). Rows of 7 or 14 columns: 3 or 11 vectors of 16 a channel in place
    /// of 14 or 28 half-empty ones and two scalar columns a row.
    pub(super) fn plane_body(&mut self, kb: &mut KB, anode: &rlx_ir::Node<MirOp>, win: &Win, out_shape: &[usize], top: i64, bottom: i64) -> Vec<Stmt> {
        let (h, w) = (out_shape[2] as i64, out_shape[3] as i64);
        let kh = self.shape(anode.inputs[1])[2] as i64;
        debug_assert_eq!(top + bottom, kh - 1);
        let (start, count) = (top * w + win.p, (h - kh + 1) * w - (win.k - 1));
        // mask[j][t] = 1 where position start + t's column + j − left is inside the row.
        let label = format!("plane column mask {h}x{w}, {}x{} window, pads {top},{}", kh, win.k, win.p);
        let m = match self.buffers.iter().position(|b| b.base == Base::Weights && b.label == label) {
            Some(b) => b as u32,
            None => {
                let v: Vec<f32> = (0..win.k).flat_map(|j| (0..count).map(move |t| (0..w).contains(&((start + t) % w + j - win.p)) as u8 as f32)).collect();
                self.add_weight(label, &ConstData::from_f32(vec![win.k as usize, count as usize], &v))
            }
        };
        let mp = kb.param(m, &self.buffers[m as usize].clone(), Access::Read);
        let mut lanes = self.lanes as i64;
        while lanes > 4 && count < lanes {
            lanes /= 2;
        }
        let nv = count / lanes * lanes;
        let tail = if nv < count { lanes } else { 0 };
        let av = anode.outputs[0];
        let mut stmts = Vec::new();
        for (first, extent) in [(0, nv), (count - lanes, tail)] {
            if extent <= 0 {
                continue;
            }
            let j = kb.var();
            let t = Expr::add(Expr::Int(first), Expr::Var(j));
            let q = Expr::add(Expr::Int(start), t.clone());
            let (mut body, accs) = self.grouped_interior(kb, anode, &[win.ni.clone(), win.c0.clone(), Expr::Int(0), q.clone()], &win.chans, (0, win.k), Some((mp, &t, count)));
            for (i, acc) in accs.into_iter().enumerate() {
                let idx = [win.ni.clone(), win.chans[i].clone(), Expr::Int(0), q.clone()];
                body.push(self.store_with_epilogue(kb, av, acc, win.a, win.r, win.op, &idx, out_shape));
            }
            stmts.push(Stmt::For { var: j, extent, kind: LoopKind::Vector(lanes as u32), body });
        }
        stmts
    }
}
