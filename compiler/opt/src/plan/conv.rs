//! Convolution bodies in the loop form (the direct form: one accumulator per output element, loops
//! over input channels and the window). Convolution kernels specialized for speed (im2col /
//! GEMM-shaped, Winograd) belong here; grouped and depthwise ones are in `depthwise.rs`, pooling in
//! `pool.rs`.

use super::kernel::{lit, KB};
use super::Planner;
use rlx_ir::loops::{Expr, IOp, LoopKind, Stmt, Var};
use rlx_ir::{BinaryOp, MirOp, OpSet};

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
}
