//! Grouped and depthwise convolution (groups > 1) in `window.rs`'s interior form: the accumulation
//! at output index `idx` (`[N, M, oh, ow]`) where every tap along the width is in bounds, so the
//! width index may be a vector loop's (unit stride: vector loads of the input row) and only the
//! kernel row's bounds are checked, outside the taps along the width. The border columns use the
//! direct per-element body (`conv.rs`); both sum in the same order (bias, then input channel, row, column).
//! With several input channels per group, a few output channels of the group are computed together.

use super::kernel::{lit, KB};
use super::Planner;
use rlx_ir::loops::{Expr, IOp, LoopKind, Stmt};
use rlx_ir::{BinaryOp, MirOp, OpSet};

impl Planner<'_> {
    /// The interior accumulations of a 2-D grouped convolution (see the module doc) for the output
    /// channels `chans`, all in the group of channel `idx[1]`, at once: one loop over the group's input
    /// channels and the window, each input load shared by the accumulators (register blocking over
    /// output channels).
    /// Only the kernel columns `taps` (start, end) are summed: all of them in the interior; at a border
    /// column (a constant `idx[3]`) the ones inside the input.
    pub(super) fn grouped_interior(&mut self, kb: &mut KB, n: &rlx_ir::Node<MirOp>, idx: &[Expr], chans: &[Expr], taps: (i64, i64)) -> (Vec<Stmt>, Vec<Expr>) {
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
        let kwe = Expr::add(Expr::Int(taps.0), Expr::Var(kw));
        let xv = self.elem(kb, ins[0], &[idx[0].clone(), ci, row.clone(), pos(1, kwe.clone())]);
        let mut upd = Vec::new();
        let mut stmts = Vec::new();
        for (r, &acc) in accs.iter().enumerate() {
            let init = if ins.len() == 3 { self.elem(kb, ins[2], &[chan(r)]) } else { lit(0.0, odt) };
            stmts.push(Stmt::Decl { var: acc, dtype: odt, init });
            let wv = self.elem(kb, ins[1], &[chan(r), Expr::Var(c), Expr::Var(kh), kwe.clone()]);
            let prod = Expr::Bin(BinaryOp::Mul, odt, Box::new(xv.clone()), Box::new(wv));
            upd.push(Stmt::Assign { var: acc, value: Expr::Bin(BinaryOp::Add, odt, Box::new(Expr::Var(acc)), Box::new(prod)) });
        }
        let mut cols = vec![Stmt::For { var: kw, extent: (taps.1 - taps.0).max(0), kind: LoopKind::Serial, body: upd }];
        if pads[0] > 0 || pads[2] > 0 {
            let ok = Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(0), row.clone()), Expr::i(IOp::Lt, row, Expr::Int(sx[2] as i64)));
            cols = vec![Stmt::If { cond: ok, body: cols }];
        }
        let rows = Stmt::For { var: kh, extent: sw[2] as i64, kind: LoopKind::Serial, body: cols };
        stmts.push(Stmt::For { var: c, extent: cg as i64, kind: LoopKind::Serial, body: vec![rows] });
        (stmts, accs.into_iter().map(Expr::Var).collect())
    }
}
