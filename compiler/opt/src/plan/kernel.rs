//! Kernel lowering: each kernel root becomes one loop-form [`Kernel`] — a loop nest over its output
//! (or, for row kernels, over its rows with the row's reductions first), its anchor's body (GEMM
//! micro-kernel, window kernels, dot product, reduction, convolution, pool …) and the inlined nodes' per-element
//! expressions as the value stored.

use super::fuse::is_inlinable;
use super::index::linear;
use super::Planner;
use rlx_ir::lir::{Base, Buffer, Launch};
use rlx_ir::loops::{Access, Expr, Kernel, LoopKind, Param, Stmt, Var};
use rlx_ir::{DType, NodeId, ValueId};
use std::collections::HashMap;

/// Per-kernel lowering state.
pub(super) struct KB {
    pub(super) params: Vec<Param>,
    pub(super) bindings: Vec<u32>,
    pub(super) vars: u32,
    pub(super) subst: HashMap<ValueId, Expr>,
}

impl KB {
    pub(super) fn var(&mut self) -> Var {
        self.vars += 1;
        Var(self.vars - 1)
    }
    pub(super) fn param(&mut self, buf: u32, b: &Buffer, access: Access) -> u32 {
        if let Some(p) = self.bindings.iter().position(|&x| x == buf) {
            if access != Access::Read {
                self.params[p].access = Access::ReadWrite;
            }
            return p as u32;
        }
        self.bindings.push(buf);
        self.params.push(Param { dtype: b.dtype, elems: b.elems(), access });
        (self.params.len() - 1) as u32
    }
}

pub(super) fn lit(v: f64, d: DType) -> Expr {
    Expr::Lit(v, d)
}

/// Builds nested loops over `shape`, returning the statement list and the index expressions; `inner`
/// receives the indices and returns the innermost body.
pub(super) fn nest(kb: &mut KB, shape: &[usize], kind_outer: LoopKind, inner: &mut dyn FnMut(&mut KB, &[Expr]) -> Vec<Stmt>) -> Vec<Stmt> {
    // Size-1 dims get no loop (index 0), so the outermost real loop is the one that is split.
    let vars: Vec<Option<Var>> = shape.iter().map(|&d| (d != 1).then(|| kb.var())).collect();
    let idx: Vec<Expr> = vars.iter().map(|v| v.map_or(Expr::Int(0), Expr::Var)).collect();
    let mut body = inner(kb, &idx);
    let first = vars.iter().position(Option::is_some);
    for (i, v) in vars.iter().enumerate().rev() {
        let Some(v) = *v else { continue };
        let kind = if Some(i) == first { kind_outer } else { LoopKind::Serial };
        body = vec![Stmt::For { var: v, extent: shape[i] as i64, kind, body }];
    }
    body
}

impl Planner<'_> {
    /// Lowers the kernel rooted at node `r`.
    pub(super) fn kernel(&mut self, r: NodeId) -> (Kernel, Vec<u32>, Vec<NodeId>) {
        let g = self.g;
        let root = g.node(r).clone();
        let out = root.outputs[0];
        let out_buf = self.buf_of[out.index()].expect("roots are materialized");
        let out_shape = self.shape(out);
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let ob = self.buffers[out_buf as usize].clone();
        let op = kb.param(out_buf, &ob, Access::Write);
        let anchor = self.fusion.anchor_of.get(&out).copied().or(if is_inlinable(&root.op) { None } else { Some(r) });
        let mut nodes = vec![r];
        if let Some(reduces) = self.fusion.row_reduces.get(&r).cloned() {
            nodes = reduces.iter().copied().chain([r]).collect();
            let lead = out_shape[..out_shape.len() - 1].to_vec();
            let n = out_shape[out_shape.len() - 1];
            let body = nest(&mut kb, &lead, LoopKind::Parallel, &mut |kb, ridx| {
                let mut stmts = Vec::new();
                let mut ridx0 = ridx.to_vec();
                ridx0.push(Expr::Int(0));
                for &d in &reduces {
                    let dnode = g.node(d).clone();
                    let (pre, val) = self.anchor_body(kb, &dnode, &ridx0);
                    stmts.extend(pre);
                    let s = kb.var();
                    stmts.push(Stmt::Decl { var: s, dtype: self.dt(dnode.outputs[0]), init: val });
                    kb.subst.insert(dnode.outputs[0], Expr::Var(s));
                }
                let j = kb.var();
                let mut idx = ridx.to_vec();
                idx.push(Expr::Var(j));
                let v = self.node_expr(kb, r, &idx);
                stmts.push(Stmt::For { var: j, extent: n as i64, kind: LoopKind::Serial, body: vec![Stmt::Store { buf: op, index: linear(&idx, &out_shape), value: v }] });
                for &d in &reduces {
                    kb.subst.remove(&g.node(d).outputs[0]);
                }
                stmts
            });
            let name = format!("{}+{}", g.node(reduces[0]).name, root.name);
            return (Kernel { name, params: kb.params, body, vars: kb.vars }, kb.bindings, nodes);
        }
        let body = match anchor {
            None => nest(&mut kb, &out_shape, LoopKind::Parallel, &mut |kb, idx| {
                let v = self.node_expr(kb, r, idx);
                vec![Stmt::Store { buf: op, index: linear(idx, &out_shape), value: v }]
            }),
            Some(a) if self.is_gemm(a) => {
                if a != r {
                    nodes.insert(0, a);
                }
                self.gemm_body(&mut kb, a, r, op, &out_shape)
            }
            Some(a) if self.is_window(a) => {
                if a != r {
                    nodes.insert(0, a);
                }
                self.window_body(&mut kb, a, r, op, &out_shape)
            }
            Some(a) => {
                if a != r {
                    nodes.insert(0, a);
                }
                let anode = g.node(a).clone();
                let av = anode.outputs[0];
                nest(&mut kb, &out_shape, LoopKind::Parallel, &mut |kb, idx| {
                    let (mut pre, acc) = self.anchor_body(kb, &anode, idx);
                    kb.subst.insert(av, acc);
                    let v = if a == r { kb.subst[&av].clone() } else { self.node_expr(kb, r, idx) };
                    kb.subst.remove(&av);
                    pre.push(Stmt::Store { buf: op, index: linear(idx, &out_shape), value: v });
                    pre
                })
            }
        };
        let name = match anchor {
            Some(a) if a != r => format!("{}+{}", g.node(a).name, root.name),
            _ => root.name.clone(),
        };
        (Kernel { name, params: kb.params, body, vars: kb.vars }, kb.bindings, nodes)
    }

    /// The kernel copying value `o` into the caller's output buffer `i` (an output that is a view, an
    /// input, a constant or a duplicate of another output).
    pub(super) fn copy_output(&mut self, i: usize, o: ValueId) -> Launch {
        let shape = self.shape(o);
        let ob = self.add_buffer(Buffer { base: Base::Output(i as u32), offset: 0, dtype: self.dt(o), shape: shape.clone(), label: self.label(o) }, None);
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let obuf = self.buffers[ob as usize].clone();
        let op = kb.param(ob, &obuf, Access::Write);
        let body = nest(&mut kb, &shape, LoopKind::Parallel, &mut |kb, idx| {
            let v = self.elem(kb, o, idx);
            vec![Stmt::Store { buf: op, index: linear(idx, &shape), value: v }]
        });
        let kernel = Kernel { name: format!("copy_output_{i}"), params: kb.params, body, vars: kb.vars };
        Launch { nodes: vec![], kernel, bindings: kb.bindings }
    }
}
