//! Reductions that keep the input's last axis (a mean over a sentence's tokens, [B, S, D] → [B, D]; an
//! embedding bag): per output element the reduced axis is read a whole row apart, which the vector
//! loop over it gathers lane by lane (an 8 × 128-token mean of 128-wide rows, one thread, CPU time:
//! 0.18 ms against ONNX Runtime's 0.03). On vector CPU targets the output's row is instead the vector
//! loop, accumulated in place over the reduced rows in turn — every load a unit-stride row segment —,
//! a mean's division applied in a last pass over the row.

use super::index::linear;
use super::anchor::identity;
use super::kernel::{lit, nest, KB};
use super::Planner;
use rlx_ir::loops::{Access, Expr, LoopKind, Stmt};
use rlx_ir::{BinaryOp, MirOp, Node, ReduceOp};

impl Planner<'_> {
    /// The body of reduction `n` (the kernel's root, its output parameter `op`) in row form (module
    /// doc), or `None` where it does not apply: a float reduction on a vector CPU target whose reduced
    /// axes leave the input's last axis of at least 8 elements.
    pub(super) fn reduce_rows_body(&mut self, kb: &mut KB, n: &Node<MirOp>, op: u32, out_shape: &[usize]) -> Option<Vec<Stmt>> {
        let MirOp::Reduce { op: rop, axes, keepdims } = &n.op else { return None };
        let s = self.shape(n.inputs[0]);
        let odt = self.dt(n.outputs[0]);
        let last = s.len().checked_sub(1)?;
        if self.lanes < 8 || !odt.is_float() || odt != self.dt(n.inputs[0]) || axes.contains(&last) || axes.is_empty() || s[last] < 8 {
            return None;
        }
        let width = s[last];
        let lead = &out_shape[..out_shape.len() - 1];
        kb.params[op as usize].access = Access::ReadWrite;
        let (rop, axes, keepdims) = (*rop, axes.clone(), *keepdims);
        let x = n.inputs[0];
        let count: usize = axes.iter().map(|&a| s[a]).product();
        let lanes = LoopKind::Vector(self.lanes as u32);
        Some(nest(kb, lead, LoopKind::Parallel, &mut |kb, lidx| {
            // One pass over the output row: its own loop variable (every loop has a distinct one) and
            // the row element's index.
            let row = |kb: &mut KB| {
                let j = kb.var();
                let mut oidx = lidx.to_vec();
                oidx.push(Expr::Var(j));
                (j, oidx)
            };
            let pass = |j, body| Stmt::For { var: j, extent: width as i64, kind: lanes, body };
            let (j0, o0) = row(kb);
            let mut body = vec![pass(j0, vec![Stmt::Store { buf: op, index: linear(&o0, out_shape), value: lit(identity(rop, odt), odt) }])];
            // Input index: the reduced axes' loop variables, the others the output's (which keeps a
            // size-1 axis for each reduced one under keepdims).
            let (j1, o1) = row(kb);
            let rvars: Vec<_> = axes.iter().map(|_| kb.var()).collect();
            let (mut xi, mut oi) = (Vec::with_capacity(s.len()), 0);
            for d in 0..s.len() {
                if let Some(k) = axes.iter().position(|&a| a == d) {
                    xi.push(Expr::Var(rvars[k]));
                    oi += keepdims as usize;
                } else {
                    xi.push(o1[oi].clone());
                    oi += 1;
                }
            }
            let xv = self.elem(kb, x, &xi);
            let bop = match rop {
                ReduceOp::Sum | ReduceOp::Mean => BinaryOp::Add,
                ReduceOp::Prod => BinaryOp::Mul,
                ReduceOp::Max => BinaryOp::Max,
                ReduceOp::Min => BinaryOp::Min,
            };
            let at = linear(&o1, out_shape);
            let upd = Expr::Bin(bop, odt, Box::new(Expr::load(op, at.clone())), Box::new(xv));
            let mut acc = vec![pass(j1, vec![Stmt::Store { buf: op, index: at, value: upd }])];
            for (k, &a) in axes.iter().enumerate().rev() {
                acc = vec![Stmt::For { var: rvars[k], extent: s[a] as i64, kind: LoopKind::Serial, body: acc }];
            }
            body.extend(acc);
            if rop == ReduceOp::Mean {
                let (j2, o2) = row(kb);
                let at = linear(&o2, out_shape);
                let mean = Expr::Bin(BinaryOp::Div, odt, Box::new(Expr::load(op, at.clone())), Box::new(lit(count as f64, odt)));
                body.push(pass(j2, vec![Stmt::Store { buf: op, index: at, value: mean }]));
            }
            body
        }))
    }
}
