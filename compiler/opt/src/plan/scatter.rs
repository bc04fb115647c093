//! `scatter_elements` and `scatter_nd`: one serial kernel that copies the data into the output, then
//! walks the updates in order, writing (or, with a reduction, combining with add / mul / max / min)
//! each at the position its indices name — the interpreter's order exactly, so a repeated index
//! ends as the interpreter's does. Negative indices count from the end of their axis; an index still
//! out of range (an invalid model, which the interpreter refuses) is clamped into the axis so the
//! kernel never writes outside its output. Serial on every target: no atomics, one thread on a GPU.

use super::index::linear;
use super::kernel::{nest, KB};
use super::Planner;
use rlx_ir::loops::{Access, Expr, IOp, Kernel, LoopKind, Stmt};
use rlx_ir::{BinaryOp, MirOp, NodeId, OpSet, ScatterRed};
use std::collections::HashMap;

/// Index value `k` (an integer tensor element) of an axis of length `dim`: negative from the end,
/// clamped into [0, dim − 1].
fn axis_index(k: Expr, from: rlx_ir::DType, dim: usize) -> Expr {
    let k = Expr::ToIndex { from, x: Box::new(k) };
    let k = Expr::add(k.clone(), Expr::mul(Expr::Int(dim as i64), Expr::i(IOp::Lt, k, Expr::Int(0))));
    Expr::i(IOp::Max, Expr::i(IOp::Min, k, Expr::Int(dim as i64 - 1)), Expr::Int(0))
}

impl Planner<'_> {
    /// The kernel of `scatter_elements` / `scatter_nd` node `r`.
    pub(super) fn scatter_kernel(&mut self, r: NodeId) -> (Kernel, Vec<u32>, Vec<NodeId>) {
        let node = self.g.node(r).clone();
        let out = node.outputs[0];
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let o = self.output_param(&mut kb, out, Access::ReadWrite);
        let (data, ind, upd) = (node.inputs[0], node.inputs[1], node.inputs[2]);
        let (ds, dt, it) = (self.shape(data), self.dt(data), self.dt(ind));
        let mut body = nest(&mut kb, &ds, LoopKind::Serial, &mut |kb, ix| vec![Stmt::Store { buf: o, index: linear(ix, &ds), value: self.elem(kb, data, ix) }]);
        let combine = |red: ScatterRed, at: Expr, u: Expr| -> Expr {
            let op = match red {
                ScatterRed::None => return u,
                ScatterRed::Add => BinaryOp::Add,
                ScatterRed::Mul => BinaryOp::Mul,
                ScatterRed::Max => BinaryOp::Max,
                ScatterRed::Min => BinaryOp::Min,
            };
            Expr::Bin(op, dt, Box::new(Expr::load(o, at)), Box::new(u))
        };
        match node.op {
            MirOp::ScatterElements { axis, reduction } => {
                let us = self.shape(upd);
                body.extend(nest(&mut kb, &us, LoopKind::Serial, &mut |kb, ix| {
                    let k = self.elem(kb, ind, ix);
                    let mut pos = ix.to_vec();
                    pos[axis] = axis_index(k, it, ds[axis]);
                    let at = linear(&pos, &ds);
                    let u = self.elem(kb, upd, ix);
                    vec![Stmt::Store { buf: o, index: at.clone(), value: combine(reduction, at, u) }]
                }));
            }
            MirOp::ScatterNd { reduction } => {
                // indices [b…, q]; updates [b…] ++ data[q..]: each index row names a slice of the data.
                let is = self.shape(ind);
                let q = is[is.len() - 1];
                let mut us = is[..is.len() - 1].to_vec();
                us.extend(&ds[q..]);
                let nb = is.len() - 1;
                body.extend(nest(&mut kb, &us, LoopKind::Serial, &mut |kb, ix| {
                    let mut pos: Vec<Expr> = (0..q)
                        .map(|d| {
                            let mut ii = ix[..nb].to_vec();
                            ii.push(Expr::Int(d as i64));
                            let k = self.elem(kb, ind, &ii);
                            axis_index(k, it, ds[d])
                        })
                        .collect();
                    pos.extend(ix[nb..].iter().cloned());
                    let at = linear(&pos, &ds);
                    let u = self.elem(kb, upd, ix);
                    vec![Stmt::Store { buf: o, index: at.clone(), value: combine(reduction, at, u) }]
                }));
            }
            _ => unreachable!("scatter_kernel on {}", node.op.kind()),
        }
        (Kernel { name: node.name.clone(), params: kb.params, body, vars: kb.vars }, kb.bindings, vec![r])
    }
}
