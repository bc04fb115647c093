//! `topk`: one serial kernel. For each slice along the axis, k scans each pick the best element after
//! the previous pick in (value, index) order — descending values for `largest`, ascending otherwise,
//! ties by ascending index — so the outputs are the interpreter's stable sort's first k, without a sort
//! or scratch memory (O(k·n) per slice). Floats are compared in the interpreter's total order: NaN
//! above every number and equal to NaN (so `largest` picks NaNs first, in index order, and smallest
//! picks them last, as ONNX Runtime does), -0 equal to +0. Serial on every target, one thread on a GPU.

use super::kernel::KB;
use super::Planner;
use rlx_ir::loops::{Access, Expr, IOp, Kernel, LoopKind, Stmt, Var};
use rlx_ir::{BinaryOp, DType, MirOp, NodeId, UnaryOp};
use std::collections::HashMap;

fn b(op: BinaryOp, dt: DType, x: Expr, y: Expr) -> Expr {
    Expr::Bin(op, dt, Box::new(x), Box::new(y))
}

fn serial(var: Var, extent: usize, body: Vec<Stmt>) -> Stmt {
    Stmt::For { var, extent: extent as i64, kind: LoopKind::Serial, body }
}

impl Planner<'_> {
    /// The kernel of `topk` node `r`.
    pub(super) fn topk_kernel(&mut self, r: NodeId) -> (Kernel, Vec<u32>, Vec<NodeId>) {
        let node = self.g.node(r).clone();
        let MirOp::TopK { axis, k, largest } = node.op else { unreachable!("topk_kernel on another op") };
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let p: Vec<u32> = node.outputs.iter().map(|&v| self.output_param(&mut kb, v, Access::Write)).collect();
        let (vals, inds) = (p[0], p[1]);
        let x = node.inputs[0];
        let (s, dt) = (self.shape(x), self.dt(x));
        let (outer, n, inner) = (s[..axis].iter().product::<usize>(), s[axis], s[axis + 1..].iter().product::<usize>());
        let (ov, iv, step, j) = (kb.var(), kb.var(), kb.var(), kb.var());
        let (prev_v, prev_i, best_v, best_i) = (kb.var(), kb.var(), kb.var(), kb.var());
        let mut ix: Vec<Expr> = Vec::new();
        // x's index from (outer, j, inner) through its own shape: unflatten outer and inner.
        let (os, is) = (&s[..axis], &s[axis + 1..]);
        let unflat = |flat: Expr, shape: &[usize]| -> Vec<Expr> {
            let mut out = Vec::new();
            let mut stride: usize = shape.iter().product();
            for &d in shape {
                stride /= d.max(1);
                out.push(Expr::i(IOp::Rem, Expr::i(IOp::Div, flat.clone(), Expr::Int(stride as i64)), Expr::Int(d as i64)));
            }
            out
        };
        ix.extend(unflat(Expr::Var(ov), os));
        ix.push(Expr::Var(j));
        ix.extend(unflat(Expr::Var(iv), is));
        let v = self.elem(&mut kb, x, &ix);
        // The interpreter's total order on floats (NaN above every number, equal to NaN); plain
        // comparisons for integers.
        let nan = |e: &Expr| Expr::Un(UnaryOp::IsNan, dt, Box::new(e.clone()));
        let not = |e: Expr| Expr::Un(UnaryOp::Not, DType::Bool, Box::new(e));
        let float = dt.is_float();
        let gt = |x: &Expr, y: &Expr| {
            let c = b(BinaryOp::Gt, dt, x.clone(), y.clone());
            if float { b(BinaryOp::Or, DType::Bool, b(BinaryOp::And, DType::Bool, nan(x), not(nan(y))), c) } else { c }
        };
        let lt = |x: &Expr, y: &Expr| {
            let c = b(BinaryOp::Lt, dt, x.clone(), y.clone());
            if float { b(BinaryOp::Or, DType::Bool, b(BinaryOp::And, DType::Bool, not(nan(x)), nan(y)), c) } else { c }
        };
        let eq = |x: &Expr, y: &Expr| {
            let c = b(BinaryOp::Eq, dt, x.clone(), y.clone());
            if float { b(BinaryOp::Or, DType::Bool, b(BinaryOp::And, DType::Bool, nan(x), nan(y)), c) } else { c }
        };
        let (pv, bv) = (Expr::Var(prev_v), Expr::Var(best_v));
        let (behind, beats) = if largest { (lt(&v, &pv), gt(&v, &bv)) } else { (gt(&v, &pv), lt(&v, &bv)) };
        // After the previous pick (any element for the first): strictly behind it in the order, or
        // equal with a higher index.
        let after = b(BinaryOp::Or, DType::Bool, behind, b(BinaryOp::And, DType::Bool, eq(&v, &pv), b(BinaryOp::Gt, DType::I64, Expr::Var(j), Expr::Var(prev_i))));
        let first = b(BinaryOp::Lt, DType::I64, Expr::Var(prev_i), Expr::Lit(0.0, DType::I64));
        let after = b(BinaryOp::Or, DType::Bool, first, after);
        let better = b(BinaryOp::Or, DType::Bool, b(BinaryOp::Lt, DType::I64, Expr::Var(best_i), Expr::Lit(0.0, DType::I64)), beats);
        let pick = b(BinaryOp::And, DType::Bool, after, better);
        let truth = |c: Expr| Expr::Select(Box::new(c), Box::new(Expr::Int(1)), Box::new(Expr::Int(0)));
        let scan = serial(j, n, vec![Stmt::If { cond: truth(pick), body: vec![Stmt::Assign { var: best_v, value: v }, Stmt::Assign { var: best_i, value: Expr::Var(j) }] }]);
        let at = Expr::add(Expr::mul(Expr::add(Expr::mul(Expr::Var(ov), Expr::Int(k as i64)), Expr::Var(step)), Expr::Int(inner as i64)), Expr::Var(iv));
        let zero = |d: DType| Expr::Lit(0.0, d);
        let step_body = vec![
            Stmt::Assign { var: best_i, value: Expr::Lit(-1.0, DType::I64) },
            Stmt::Assign { var: best_v, value: zero(dt) },
            scan,
            Stmt::Store { buf: vals, index: at.clone(), value: Expr::Var(best_v) },
            Stmt::Store { buf: inds, index: at, value: Expr::Var(best_i) },
            Stmt::Assign { var: prev_v, value: Expr::Var(best_v) },
            Stmt::Assign { var: prev_i, value: Expr::Var(best_i) },
        ];
        let slice = vec![
            Stmt::Decl { var: prev_v, dtype: dt, init: zero(dt) },
            Stmt::Decl { var: prev_i, dtype: DType::I64, init: Expr::Lit(-1.0, DType::I64) },
            Stmt::Decl { var: best_v, dtype: dt, init: zero(dt) },
            Stmt::Decl { var: best_i, dtype: DType::I64, init: Expr::Lit(-1.0, DType::I64) },
            serial(step, k, step_body),
        ];
        let body = vec![serial(ov, outer, vec![serial(iv, inner, slice)])];
        (Kernel { name: node.name.clone(), params: kb.params, body, vars: kb.vars }, kb.bindings, vec![r])
    }
}
