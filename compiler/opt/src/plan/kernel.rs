//! Kernel lowering: each kernel root becomes one loop-form [`Kernel`] — a loop nest over its output
//! (or, for row kernels, over its rows with the row's reductions first), its anchor's body (GEMM
//! micro-kernel, window kernels, dot product, reduction, convolution, pool …) and the inlined nodes' per-element
//! expressions as the value stored.

use super::fuse::is_inlinable;
use super::causal::masked_anchor;
use super::index::{bidx, linear};
use super::Planner;
use rlx_ir::lir::{Base, Buffer, Launch};
use rlx_ir::loops::{Access, Expr, IOp, Kernel, LoopKind, Param, Stmt, Var};
use rlx_ir::{DType, MirOp, NodeId, ValueId};
use std::collections::HashMap;

/// Rows of a masked matmul's tile (`masked_rows_body`): 4 dot products share each load of the other operand.
const SCORE_ROWS: usize = 4;

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
    /// The kernel parameter of value `v`, a node's own output (its buffer placed by memory planning).
    pub(super) fn output_param(&self, kb: &mut KB, v: ValueId, access: Access) -> u32 {
        let ob = self.buf_of[v.index()].expect("a kernel's own output is materialized");
        kb.param(ob, &self.buffers[ob as usize].clone(), access)
    }

    /// Lowers the kernel rooted at node `r`.
    pub(super) fn kernel(&mut self, r: NodeId) -> (Kernel, Vec<u32>, Vec<NodeId>) {
        let g = self.g;
        let root = g.node(r).clone();
        if root.op == MirOp::WriteRows {
            return self.write_rows(r);
        }
        if root.op.is_comm() {
            return self.comm_kernel(r);
        }
        if rlx_ir::bounded::is_source(&root.op) {
            return self.select_kernel(r);
        }
        if matches!(root.op, MirOp::ScatterElements { .. } | MirOp::ScatterNd { .. }) {
            return self.scatter_kernel(r);
        }
        if matches!(root.op, MirOp::TopK { .. }) {
            return self.topk_kernel(r);
        }
        if let Some(a) = self.attention.get(&r).cloned() {
            return self.attention_kernel(r, &a);
        }
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
            Some(a) if g.node(a).op == rlx_ir::MirOp::DequantGather => self.block_gather_body(&mut kb, a, op, &out_shape),
            Some(a) if g.node(a).op == rlx_ir::MirOp::DequantMatMul => {
                if a != r {
                    nodes.insert(0, a);
                }
                self.block_matmul_body(&mut kb, a, r, op, &out_shape)
            }
            None if self.is_pad_border(r) => self.pad_border_body(&mut kb, r, op, &out_shape),
            None if self.is_concat_copy(r) => self.concat_copy_body(&mut kb, r, op, &out_shape),
            None => self.elementwise_body(&mut kb, r, op, &out_shape),
            Some(a) if self.is_nhwc_window(a) => {
                if a != r {
                    nodes.insert(0, a);
                }
                self.nhwc_window_body(&mut kb, a, r, op, &out_shape)
            }
            Some(a) if self.conv_gemm.contains_key(&a) => {
                if a != r {
                    nodes.insert(0, a);
                }
                self.conv_gemm_body(&mut kb, a, r, op, &out_shape)
            }
            Some(a) if self.is_gemm(a) => {
                if a != r {
                    nodes.insert(0, a);
                }
                self.gemm_body(&mut kb, a, r, op, &out_shape)
            }
            Some(a) if self.dw_lanes.contains_key(&a) => {
                if a != r {
                    nodes.insert(0, a);
                }
                self.dw_lanes_body(&mut kb, a, r, op, &out_shape)
            }
            Some(a) if self.is_window(a) && self.dw_padded_fits(a) => {
                if a != r {
                    nodes.insert(0, a);
                }
                self.dw_padded_body(&mut kb, a, r, op, &out_shape)
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
                // A reduction that keeps the last axis: its output rows accumulated in place (`reduce_rows.rs`).
                if a == r {
                    if let Some(body) = self.reduce_rows_body(&mut kb, &anode, op, &out_shape) {
                        return (Kernel { name: root.name.clone(), params: kb.params, body, vars: kb.vars }, kb.bindings, nodes);
                    }
                }
                // A dot product under a `where` with a constant false branch runs only where its
                // condition holds (attention's scores: the keys a query may see; causal.rs). CPU
                // targets (vector lanes set) only: the GPU writers' tiled matmul wants the bare form.
                let masked = if anode.op == MirOp::MatMul && self.lanes > 0 { masked_anchor(g, r, a) } else { None };
                let rank = out_shape.len();
                if let Some(m) = masked.filter(|_| rank >= 2 && out_shape[rank - 2] % SCORE_ROWS == 0) {
                    let body = self.masked_rows_body(&mut kb, &anode, r, m, op, &out_shape);
                    let name = format!("{}+{}", g.node(a).name, root.name);
                    return (Kernel { name, params: kb.params, body, vars: kb.vars }, kb.bindings, nodes);
                }
                nest(&mut kb, &out_shape, LoopKind::Parallel, &mut |kb, idx| {
                    let (mut pre, acc) = self.anchor_body(kb, &anode, idx);
                    if let (Some(m), [Stmt::Decl { .. }, Stmt::For { .. }]) = (masked, pre.as_slice()) {
                        let cond = self.elem(kb, m, &bidx(idx, &self.shape(m)));
                        let dot = pre.pop().expect("the dot product's loop");
                        pre.push(Stmt::If { cond, body: vec![dot] });
                    }
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

    /// A masked matmul (`masked_anchor`) over [.., rows, cols] in tiles of `SCORE_ROWS` rows: for each
    /// column, the tile's dot products share one loop over K (each b[k, col] loaded once for all of
    /// them: attention's key rows are the whole cache, its query rows one chunk), run when any of the
    /// tile's mask entries holds; each output is the root's value under its own mask entry.
    fn masked_rows_body(&mut self, kb: &mut KB, anode: &rlx_ir::Node<MirOp>, r: NodeId, m: ValueId, op: u32, out_shape: &[usize]) -> Vec<Stmt> {
        let rank = out_shape.len();
        let av = anode.outputs[0];
        let odt = self.dt(av);
        let k = self.matmul_k(anode);
        let mut tiles = out_shape.to_vec();
        tiles[rank - 2] /= SCORE_ROWS;
        let ms = self.shape(m);
        nest(kb, &tiles, LoopKind::Parallel, &mut |kb, tidx| {
            let rows: Vec<Vec<Expr>> = (0..SCORE_ROWS)
                .map(|i| {
                    let mut idx = tidx.to_vec();
                    idx[rank - 2] = Expr::add(Expr::mul(tidx[rank - 2].clone(), Expr::Int(SCORE_ROWS as i64)), Expr::Int(i as i64));
                    idx
                })
                .collect();
            let kv = kb.var();
            let accs: Vec<Var> = (0..SCORE_ROWS).map(|_| kb.var()).collect();
            let mut stmts: Vec<Stmt> = accs.iter().map(|&acc| Stmt::Decl { var: acc, dtype: odt, init: lit(0.0, odt) }).collect();
            let mut body = Vec::new();
            let mut any: Option<Expr> = None;
            for (idx, &acc) in rows.iter().zip(&accs) {
                let prod = self.matmul_term(kb, anode, idx, Expr::Var(kv));
                body.push(Stmt::Assign { var: acc, value: Expr::Bin(rlx_ir::BinaryOp::Add, odt, Box::new(Expr::Var(acc)), Box::new(prod)) });
                let c = self.elem(kb, m, &bidx(idx, &ms));
                any = Some(match any {
                    None => c,
                    Some(x) => Expr::Bin(rlx_ir::BinaryOp::Or, DType::Bool, Box::new(x), Box::new(c)),
                });
            }
            let dot = Stmt::For { var: kv, extent: k as i64, kind: LoopKind::Serial, body };
            stmts.push(Stmt::If { cond: any.expect("a tile has rows"), body: vec![dot] });
            for (idx, &acc) in rows.iter().zip(&accs) {
                kb.subst.insert(av, Expr::Var(acc));
                let v = self.node_expr(kb, r, idx);
                kb.subst.remove(&av);
                stmts.push(Stmt::Store { buf: op, index: linear(idx, out_shape), value: v });
            }
            stmts
        })
    }

    /// `write_rows` in place: for each of the n rows, when its position p is inside the cache, the row
    /// is stored at row p of the cache's own buffer (the node's output aliases it); nothing else is
    /// touched. At each element the rows run in order, so on repeated positions the later row wins
    /// (as the interpreter).
    fn write_rows(&mut self, r: NodeId) -> (Kernel, Vec<u32>, Vec<NodeId>) {
        let node = self.g.node(r).clone();
        let (cache, rows, pos) = (node.inputs[0], node.inputs[1], node.inputs[2]);
        let out_buf = self.buf_of[node.outputs[0].index()].expect("write_rows aliases its cache");
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let ob = self.buffers[out_buf as usize].clone();
        let op = kb.param(out_buf, &ob, Access::Write);
        let (cshape, rshape) = (self.shape(cache), self.shape(rows));
        let i = kb.var();
        let raw = self.elem(&mut kb, pos, &[Expr::Var(i)]);
        let p = Expr::ToIndex { from: self.dt(pos), x: Box::new(raw) };
        let inside = Expr::i(IOp::Mul, Expr::i(IOp::Le, Expr::Int(0), p.clone()), Expr::i(IOp::Lt, p.clone(), Expr::Int(cshape[0] as i64)));
        // The element loops outside, parallel (a GPU's grid: one decode row of 256 values ran on one
        // thread, 7 µs), the rows inside in order at each element, so the later row still wins.
        let body = nest(&mut kb, &rshape[1..], LoopKind::Parallel, &mut |kb, idx| {
            let ri: Vec<Expr> = std::iter::once(Expr::Var(i)).chain(idx.iter().cloned()).collect();
            let ci: Vec<Expr> = std::iter::once(p.clone()).chain(idx.iter().cloned()).collect();
            let v = self.elem(kb, rows, &ri);
            let store = Stmt::Store { buf: op, index: linear(&ci, &cshape), value: v };
            vec![Stmt::For { var: i, extent: rshape[0] as i64, kind: LoopKind::Serial, body: vec![Stmt::If { cond: inside.clone(), body: vec![store] }] }]
        });
        (Kernel { name: node.name.clone(), params: kb.params, body, vars: kb.vars }, kb.bindings, vec![r])
    }

    /// The kernel copying value `o` into the caller's output buffer `i` (an output that is a view, an
    /// input, a constant or a duplicate of another output).
    pub(super) fn copy_output(&mut self, i: usize, o: ValueId) -> Launch {
        let shape = self.shape(o);
        let ob = self.add_buffer(Buffer { base: Base::Output(i as u32), offset: 0, dtype: self.dt(o), shape, label: self.label(o) }, None);
        self.copy_into(ob, o, format!("copy_output_{i}"))
    }

    /// A kernel storing value `o` into buffer `ob` (of `o`'s shape), element by element.
    pub(super) fn copy_into(&mut self, ob: u32, o: ValueId, name: String) -> Launch {
        let shape = self.shape(o);
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let obuf = self.buffers[ob as usize].clone();
        let op = kb.param(ob, &obuf, Access::Write);
        let body = nest(&mut kb, &shape, LoopKind::Parallel, &mut |kb, idx| {
            let v = self.elem(kb, o, idx);
            vec![Stmt::Store { buf: op, index: linear(idx, &shape), value: v }]
        });
        let kernel = Kernel { name, params: kb.params, body, vars: kb.vars };
        Launch { nodes: vec![], kernel, bindings: kb.bindings }
    }
}
