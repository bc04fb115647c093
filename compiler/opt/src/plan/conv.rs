//! Convolution and pooling bodies in the loop form (the direct form: one accumulator per output
//! element, loops over input channels and the window). Convolution kernels specialized for speed
//! (im2col / GEMM-shaped, Winograd, depthwise) belong here.

use super::kernel::{lit, KB};
use super::Planner;
use rlx_ir::loops::{Expr, IOp, LoopKind, Stmt, Var};
use rlx_ir::mir::PoolKind;
use rlx_ir::{BinaryOp, DType, MirOp, OpSet};

impl Planner<'_> {
    /// A convolution's accumulation at output index `idx` (`[N, M, spatial…]`): bias, then Σ over the
    /// group's input channels and the kernel window of x·w, positions in the padding skipped.
    pub(super) fn conv_body(&mut self, kb: &mut KB, n: &rlx_ir::Node<MirOp>, idx: &[Expr]) -> (Vec<Stmt>, Expr) {
        let MirOp::Conv { strides, pads, dilations, groups } = &n.op else { unreachable!("conv_body on {}", n.op.kind()) };
        let ins = &n.inputs;
        let odt = self.dt(n.outputs[0]);
        let (sx, sw) = (self.shape(ins[0]), self.shape(ins[1]));
        let sp = sx.len() - 2;
        let cg = sw[1];
        let mg = sw[0] / groups;
        let acc = kb.var();
        let init = if ins.len() == 3 { self.elem(kb, ins[2], &[idx[1].clone()]) } else { lit(0.0, odt) };
        let c = kb.var();
        let kvars: Vec<Var> = (0..sp).map(|_| kb.var()).collect();
        // input channel = (m / mg) * cg + c
        let ci = Expr::add(Expr::mul(Expr::i(IOp::Div, idx[1].clone(), Expr::Int(mg as i64)), Expr::Int(cg as i64)), Expr::Var(c));
        let mut xi = vec![idx[0].clone(), ci];
        let mut cond: Option<Expr> = None;
        for i in 0..sp {
            let pos = Expr::add(
                Expr::i(IOp::Sub, Expr::mul(idx[2 + i].clone(), Expr::Int(strides[i] as i64)), Expr::Int(pads[i] as i64)),
                Expr::mul(Expr::Var(kvars[i]), Expr::Int(dilations[i] as i64)),
            );
            let ok = Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(0), pos.clone()), Expr::i(IOp::Lt, pos.clone(), Expr::Int(sx[2 + i] as i64)));
            if pads[i] > 0 || pads[i + sp] > 0 {
                cond = Some(match cond.take() {
                    Some(p) => Expr::i(IOp::And, p, ok),
                    None => ok,
                });
            }
            xi.push(pos);
        }
        let xv = self.elem(kb, ins[0], &xi);
        let mut wi = vec![idx[1].clone(), Expr::Var(c)];
        wi.extend(kvars.iter().map(|&v| Expr::Var(v)));
        let wv = self.elem(kb, ins[1], &wi);
        let upd = Stmt::Assign {
            var: acc,
            value: Expr::Bin(BinaryOp::Add, odt, Box::new(Expr::Var(acc)), Box::new(Expr::Bin(BinaryOp::Mul, odt, Box::new(xv), Box::new(wv)))),
        };
        let mut body = vec![match cond {
            Some(cnd) => Stmt::If { cond: cnd, body: vec![upd] },
            None => upd,
        }];
        for i in (0..sp).rev() {
            body = vec![Stmt::For { var: kvars[i], extent: sw[2 + i] as i64, kind: LoopKind::Serial, body }];
        }
        let stmts = vec![Stmt::Decl { var: acc, dtype: odt, init }, Stmt::For { var: c, extent: cg as i64, kind: LoopKind::Serial, body }];
        (stmts, Expr::Var(acc))
    }

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
}
