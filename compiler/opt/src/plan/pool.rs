//! Max and average pooling bodies in the loop form: the per-element window (any rank, padding by
//! bounds checks) and, for 2-D pools, the interior form of `window.rs`'s vector loops (every tap along
//! the width in bounds, so only the row's taps are checked, outside the width loop).

use super::kernel::{lit, KB};
use super::Planner;
use rlx_ir::loops::{Expr, IOp, LoopKind, Stmt, Var};
use rlx_ir::mir::PoolKind;
use rlx_ir::{BinaryOp, DType, MirOp, OpSet};

impl Planner<'_> {
    /// A max or average pool's window at output index `idx`: the max, or the sum divided by the count
    /// of in-bounds elements (with padding when `count_include_pad`).
    pub(super) fn pool_body(&mut self, kb: &mut KB, n: &rlx_ir::Node<MirOp>, idx: &[Expr]) -> (Vec<Stmt>, Expr) {
        let MirOp::Pool { kind, kernel, strides, pads, dilations, count_include_pad, .. } = &n.op else { unreachable!("pool_body on {}", n.op.kind()) };
        let ins = &n.inputs;
        let odt = self.dt(n.outputs[0]);
        let sx = self.shape(ins[0]);
        let sp = kernel.len();
        let acc = kb.var();
        let cnt = kb.var();
        let cntp = kb.var();
        let kvars: Vec<Var> = (0..sp).map(|_| kb.var()).collect();
        let mut xi = vec![idx[0].clone(), idx[1].clone()];
        let mut inb: Option<Expr> = None;
        let mut inpad: Option<Expr> = None;
        for i in 0..sp {
            let pos = Expr::add(
                Expr::i(IOp::Sub, Expr::mul(idx[2 + i].clone(), Expr::Int(strides[i] as i64)), Expr::Int(pads[i] as i64)),
                Expr::mul(Expr::Var(kvars[i]), Expr::Int(dilations[i] as i64)),
            );
            let d = sx[2 + i] as i64;
            let ok = Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(0), pos.clone()), Expr::i(IOp::Lt, pos.clone(), Expr::Int(d)));
            let okp = Expr::i(
                IOp::And,
                Expr::i(IOp::Le, Expr::Int(-(pads[i] as i64)), pos.clone()),
                Expr::i(IOp::Lt, pos.clone(), Expr::Int(d + pads[i + sp] as i64)),
            );
            inb = Some(match inb.take() {
                Some(p) => Expr::i(IOp::And, p, ok),
                None => ok,
            });
            inpad = Some(match inpad.take() {
                Some(p) => Expr::i(IOp::And, p, okp),
                None => okp,
            });
            xi.push(pos);
        }
        let xv = self.elem(kb, ins[0], &xi);
        let upd = match kind {
            PoolKind::Max => Expr::Bin(BinaryOp::Max, odt, Box::new(Expr::Var(acc)), Box::new(xv)),
            PoolKind::Avg => Expr::Bin(BinaryOp::Add, odt, Box::new(Expr::Var(acc)), Box::new(xv)),
        };
        let one = Expr::Bin(BinaryOp::Add, DType::I64, Box::new(Expr::Var(cnt)), Box::new(lit(1.0, DType::I64)));
        let onep = Expr::Bin(BinaryOp::Add, DType::I64, Box::new(Expr::Var(cntp)), Box::new(lit(1.0, DType::I64)));
        let mut body = vec![
            Stmt::If { cond: inb.unwrap_or(Expr::Int(1)), body: vec![Stmt::Assign { var: acc, value: upd }, Stmt::Assign { var: cnt, value: one }] },
            Stmt::If { cond: inpad.unwrap_or(Expr::Int(1)), body: vec![Stmt::Assign { var: cntp, value: onep }] },
        ];
        for i in (0..sp).rev() {
            body = vec![Stmt::For { var: kvars[i], extent: kernel[i] as i64, kind: LoopKind::Serial, body }];
        }
        let init = match kind {
            PoolKind::Max => f64::NEG_INFINITY,
            PoolKind::Avg => 0.0,
        };
        let mut stmts = vec![
            Stmt::Decl { var: acc, dtype: odt, init: lit(init, odt) },
            Stmt::Decl { var: cnt, dtype: DType::I64, init: lit(0.0, DType::I64) },
            Stmt::Decl { var: cntp, dtype: DType::I64, init: lit(0.0, DType::I64) },
        ];
        stmts.extend(body);
        let val = match kind {
            PoolKind::Max => Expr::Var(acc),
            PoolKind::Avg => {
                let div = if *count_include_pad { cntp } else { cnt };
                let d = Expr::Cast { from: DType::I64, to: odt, x: Box::new(Expr::Var(div)) };
                Expr::Bin(BinaryOp::Div, odt, Box::new(Expr::Var(acc)), Box::new(d))
            }
        };
        (stmts, val)
    }

    /// A 2-D max or average pool's window at output index `idx` (`[N, C, oh, ow]`) where every tap
    /// along the width is in bounds (`window.rs`'s interior columns): rows outside the input are
    /// skipped by a condition on `oh` alone, so the width index may be a vector loop's. The average
    /// divides by the in-bounds (or, with `count_include_pad`, in-padding) row taps × the kernel width.
    /// Only the kernel columns `taps` (start, end) are read — all of them in the interior; at a border
    /// column (a constant `idx[3]`) the ones inside the input — and an average counts `wcount` columns
    /// per counted row (the columns read, or with `count_include_pad` those inside the padding).
    pub(super) fn pool_interior(&mut self, kb: &mut KB, n: &rlx_ir::Node<MirOp>, idx: &[Expr], taps: (i64, i64), wcount: i64) -> (Vec<Stmt>, Expr) {
        let MirOp::Pool { kind, kernel, strides, pads, dilations, count_include_pad, .. } = &n.op else { unreachable!("pool_interior on {}", n.op.kind()) };
        let x = n.inputs[0];
        let odt = self.dt(n.outputs[0]);
        let h = self.shape(x)[2] as i64;
        let (kh, kw) = (kb.var(), kb.var());
        let acc = kb.var();
        let row = |k: Expr| Expr::add(Expr::i(IOp::Sub, Expr::mul(idx[2].clone(), Expr::Int(strides[0] as i64)), Expr::Int(pads[0] as i64)), Expr::mul(k, Expr::Int(dilations[0] as i64)));
        let kwe = Expr::add(Expr::Int(taps.0), Expr::Var(kw));
        let col = Expr::add(Expr::i(IOp::Sub, Expr::mul(idx[3].clone(), Expr::Int(strides[1] as i64)), Expr::Int(pads[1] as i64)), Expr::mul(kwe, Expr::Int(dilations[1] as i64)));
        let inside = |p: Expr, lo: i64, hi: i64| Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(lo), p.clone()), Expr::i(IOp::Lt, p, Expr::Int(hi)));
        let xv = self.elem(kb, x, &[idx[0].clone(), idx[1].clone(), row(Expr::Var(kh)), col]);
        let upd = match kind {
            PoolKind::Max => Expr::Bin(BinaryOp::Max, odt, Box::new(Expr::Var(acc)), Box::new(xv)),
            PoolKind::Avg => Expr::Bin(BinaryOp::Add, odt, Box::new(Expr::Var(acc)), Box::new(xv)),
        };
        let cols = Stmt::For { var: kw, extent: (taps.1 - taps.0).max(0), kind: LoopKind::Serial, body: vec![Stmt::Assign { var: acc, value: upd }] };
        let body = vec![Stmt::If { cond: inside(row(Expr::Var(kh)), 0, h), body: vec![cols] }];
        let init = if *kind == PoolKind::Max { f64::NEG_INFINITY } else { 0.0 };
        let stmts = vec![Stmt::Decl { var: acc, dtype: odt, init: lit(init, odt) }, Stmt::For { var: kh, extent: kernel[0] as i64, kind: LoopKind::Serial, body }];
        let val = match kind {
            PoolKind::Max => Expr::Var(acc),
            PoolKind::Avg => {
                // Rows counted: Σ over the row taps of [tap inside the input (or its padding)].
                let (lo, hi) = if *count_include_pad { (-(pads[0] as i64), h + pads[2] as i64) } else { (0, h) };
                let rows = (0..kernel[0] as i64).fold(Expr::Int(0), |s, k| Expr::add(s, inside(row(Expr::Int(k)), lo, hi)));
                let cnt = Expr::mul(rows, Expr::Int(wcount));
                let d = Expr::Cast { from: DType::I64, to: odt, x: Box::new(Expr::ToIndex { from: DType::I64, x: Box::new(cnt) }) };
                Expr::Bin(BinaryOp::Div, odt, Box::new(Expr::Var(acc)), Box::new(d))
            }
        };
        (stmts, val)
    }
}
