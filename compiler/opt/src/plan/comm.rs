//! Collectives and transfers (`all_reduce`, `all_gather`, `reduce_scatter`, `send`, `recv`): one
//! kernel each, whose body is a single `Stmt::Comm` — a call into the communicator the application
//! passes to the runtime — over whole materialized buffers (fusion never inlines a producer into it).

use super::kernel::KB;
use super::Planner;
use rlx_ir::loops::{Access, CommOp, Kernel, Stmt};
use rlx_ir::{Def, Mir, MirOp, Node, NodeId, OpSet};
use std::collections::HashMap;

/// Why node `n`, a collective, cannot be compiled (the runtime moves whole contiguous buffers).
pub(super) fn check(g: &Mir, n: &Node<MirOp>) -> Option<String> {
    if let Some(&i) = n.inputs.first() {
        if matches!(g.value(i).def, Def::Const(_)) {
            return Some(format!("{} of a constant: every rank has it already", n.op.kind()));
        }
    }
    if let MirOp::AllGather { axis, .. } | MirOp::ReduceScatter { axis, .. } = n.op {
        let shape = g.ty(n.inputs[0]).shape.as_fixed().unwrap_or_default();
        if shape[..axis].iter().any(|&d| d != 1) {
            return Some(format!("{} along axis {axis} of {:?}: compiled only along the leading axis (transpose it first)", n.op.kind(), shape));
        }
    }
    None
}

impl Planner<'_> {
    /// The kernel of collective node `r`.
    pub(super) fn comm_kernel(&mut self, r: NodeId) -> (Kernel, Vec<u32>, Vec<NodeId>) {
        let node = self.g.node(r).clone();
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let out = node.outputs[0];
        let ob = self.buf_of[out.index()].expect("a collective's output is materialized");
        let obuf = self.buffers[ob as usize].clone();
        let send = node.inputs.first().map(|&i| {
            let b = self.buf_of[i.index()].expect("a collective's input is materialized");
            let bb = self.buffers[b as usize].clone();
            kb.param(b, &bb, Access::Read)
        });
        let recv = kb.param(ob, &obuf, Access::Write);
        let numel = |s: Vec<usize>| s.iter().product::<usize>() as i64;
        let (op, count, peer) = match &node.op {
            MirOp::AllReduce { .. } => (CommOp::AllReduce, numel(self.shape(out)), -1),
            MirOp::AllGather { .. } => (CommOp::AllGather, numel(self.shape(node.inputs[0])), -1),
            MirOp::ReduceScatter { .. } => (CommOp::ReduceScatter, numel(self.shape(out)), -1),
            MirOp::Send { peer } => (CommOp::Send, numel(self.shape(out)), *peer as i64),
            MirOp::Recv { peer, .. } => (CommOp::Recv, numel(self.shape(out)), *peer as i64),
            other => unreachable!("{} is not a collective", other.kind()),
        };
        let body = vec![Stmt::Comm { op, send, recv, count, dtype: self.dt(out), peer }];
        (Kernel { name: node.name.clone(), params: kb.params, body, vars: 0 }, kb.bindings, vec![r])
    }
}
