//! State outputs that are not a cache's `write_rows` (a training step's parameters and optimizer
//! state): each is written straight into its slot of the state region when that is safe, else
//! computed in the arena and copied into the slot by a launch after every other.
//!
//! In place is safe for state input `i` with output `o` when `o`'s producer is a kernel root whose
//! kernel computes everything that depends on `i` elementwise at `i`'s shape (so it reads `i` at the
//! index it writes; a matmul or reduction anchor whose epilogue reads `i` qualifies), reads `i`
//! itself and no view of it, and no later kernel, graph output copy or other state output reads `i`
//! or a view of it: then every read of the old contents happens before (or at the same element as)
//! the write. SGD with momentum and Adam on the MNIST MLP: every parameter and slot in place.

use super::fuse::{is_elementwise, Role};
use super::Planner;
use rlx_ir::lir::{Base, Buffer, Launch};
use rlx_ir::{Mir, MirOp, NodeId, ValueId};
use std::collections::{HashMap, HashSet};

impl Planner<'_> {
    /// The nodes whose values a root's kernel computes: the root, its row reductions, and the
    /// inlined nodes and epilogue anchors it reads through.
    fn kernel_nodes(&self, r: NodeId) -> Vec<NodeId> {
        let g = self.g;
        let mut todo: Vec<NodeId> = vec![r];
        todo.extend(self.fusion.row_reduces.get(&r).cloned().unwrap_or_default());
        let mut seen: HashSet<NodeId> = todo.iter().copied().collect();
        let mut out = Vec::new();
        while let Some(n) = todo.pop() {
            out.push(n);
            for &v in &g.node(n).inputs {
                if let Some(p) = g.producer(v) {
                    if matches!(self.fusion.role[p.index()], Role::Inlined | Role::Anchor) && seen.insert(p) {
                        todo.push(p);
                    }
                }
            }
        }
        out
    }

    /// For each state pair `k` whose output is not a `write_rows`: whether its output is computed in
    /// place (output value → k). The others (except an output that is its own input) are copied.
    pub(super) fn plan_inplace_state(&self) -> HashMap<ValueId, usize> {
        let g = self.g;
        let mut inplace = HashMap::new();
        let roots: Vec<NodeId> = g.node_ids().filter(|n| self.fusion.role[n.index()] == Role::Root).collect();
        let node_sets: HashMap<NodeId, Vec<NodeId>> = roots.iter().map(|&r| (r, self.kernel_nodes(r))).collect();
        for (k, st) in g.state.iter().enumerate() {
            let (i, o) = (g.inputs[st.input as usize], g.outputs[st.output as usize]);
            let Some(n) = g.producer(o) else { continue };
            if g.node(n).op == MirOp::WriteRows || self.fusion.role[n.index()] != Role::Root || inplace.contains_key(&o) {
                continue;
            }
            let alias = aliases(g, &self.fusion.role, i);
            let reads = |m: NodeId, any: bool| g.node(m).inputs.iter().any(|v| alias.contains(v) && (any || *v != i));
            // In `o`'s own kernel, every node that depends on `i` must be elementwise of `i`'s shape
            // (so it is evaluated at the index being written); nodes that do not (a matmul or
            // reduction anchor whose epilogue reads `i`) keep their accumulators in registers and
            // store once. Convolutions (K-chunked GEMMs that store partial sums) are never in place.
            let mut own = node_sets[&n].clone();
            own.sort();
            let mut tainted: HashSet<ValueId> = [i].into();
            let mut elementwise = true;
            for &m in &own {
                let node = g.node(m);
                elementwise &= !matches!(node.op, MirOp::Conv { .. } | MirOp::ConvTranspose { .. });
                if node.inputs.iter().any(|v| tainted.contains(v)) {
                    elementwise &= is_elementwise(&node.op) && node.outputs.iter().all(|&v| g.ty(v).shape == g.ty(i).shape);
                    tainted.extend(node.outputs.iter().copied());
                }
            }
            let views_in_own = own.iter().any(|&m| reads(m, false));
            let later = roots.iter().filter(|r| r.index() > n.index()).any(|r| node_sets[r].iter().any(|&m| reads(m, true)));
            let copied_later = g.outputs.iter().enumerate().any(|(j, v)| alias.contains(v) && j != st.output as usize);
            if elementwise && !views_in_own && !later && !copied_later {
                inplace.insert(o, k);
            }
        }
        inplace
    }

    /// The buffer of state slot `k` (its input's buffer, placed first).
    pub(super) fn state_buffer(&self, k: usize) -> u32 {
        let i = self.g.inputs[self.g.state[k].input as usize];
        self.buf_of[i.index()].expect("state inputs are placed first")
    }

    /// Launches copying each state output that is neither a `write_rows`, computed in place, nor its
    /// own input into its slot; they come after every other launch.
    pub(super) fn state_copies(&mut self, inplace: &HashMap<ValueId, usize>) -> Vec<Launch> {
        let g = self.g;
        let mut launches = Vec::new();
        for k in 0..g.state.len() {
            let st = g.state[k];
            let (i, o) = (g.inputs[st.input as usize], g.outputs[st.output as usize]);
            let cache = g.producer(o).is_some_and(|n| g.node(n).op == MirOp::WriteRows);
            if cache || o == i || inplace.get(&o) == Some(&k) {
                continue;
            }
            let sb = self.buffers[self.state_buffer(k) as usize].clone();
            let dst = self.add_buffer(Buffer { label: self.label(o), ..sb }, None);
            debug_assert_eq!(self.buffers[dst as usize].base, Base::State);
            launches.push(self.copy_into(dst, o, format!("copy_state_{k}")));
        }
        launches
    }
}

/// `v` and every view of it (views of views too).
fn aliases(g: &Mir, role: &[Role], v: ValueId) -> HashSet<ValueId> {
    let mut set: HashSet<ValueId> = [v].into();
    for n in g.node_ids() {
        let node = g.node(n);
        if role[n.index()] == Role::View && set.contains(&node.inputs[0]) {
            set.extend(node.outputs.iter().copied());
        }
    }
    set
}
