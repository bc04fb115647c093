//! Concatenation in place ([`PlanOptions::concat_in_place`](super::PlanOptions::concat_in_place)):
//! where a concat's slices are contiguous (every dim before the axis is 1: NCHW channels at batch 1)
//! and each of its inputs is written by a kernel of its own, each input is placed as a view of its
//! slice of the concat's buffer, so its kernel stores straight into the concat and the concat is no
//! launch. A concat input that is itself such a concat is placed in the outer one's buffer (DenseNet's
//! growing concats become one buffer per dense block). The inputs' readers read the views, so nothing
//! else changes; the arena keeps the whole buffer live from the first slice's kernel on.

use super::fuse::Role;
use super::Planner;
use rlx_ir::lir::{Base, Buffer};
use rlx_ir::{MirOp, NodeId, OpSet, ValueId};
use std::collections::{HashMap, HashSet};

/// Value → (the concat output it is stored in, byte offset there), and the concats that need no launch.
pub(super) struct ConcatHomes {
    pub home: HashMap<ValueId, (ValueId, usize)>,
    pub in_place: HashSet<NodeId>,
}

impl Planner<'_> {
    /// The concats written in place (see the module doc) and where their inputs live.
    pub(super) fn concat_homes(&self, out_slot: &HashMap<ValueId, u32>) -> ConcatHomes {
        let g = self.g;
        let mut homes = ConcatHomes { home: HashMap::new(), in_place: HashSet::new() };
        if !self.opts.concat_in_place {
            return homes;
        }
        // A value its producer's kernel stores into a buffer of its own (an arena temporary).
        let own_kernel = |v: ValueId| -> bool {
            let Some(p) = g.producer(v) else { return false };
            let pn = g.node(p);
            self.fusion.role[p.index()] == Role::Root
                && pn.op != MirOp::WriteRows
                && pn.op.regions().is_empty()
                && !out_slot.contains_key(&v)
                && !g.outputs.contains(&v)
                && !self.inplace_state.contains_key(&v)
        };
        for n in g.node_ids() {
            let node = g.node(n);
            let MirOp::Concat { axis } = node.op else { continue };
            let out = node.outputs[0];
            if !own_kernel(out) {
                continue;
            }
            let shape = self.shape(out);
            if shape[..axis].iter().product::<usize>() != 1 {
                continue;
            }
            let distinct = node.inputs.iter().enumerate().all(|(i, v)| !node.inputs[..i].contains(v) && !homes.home.contains_key(v));
            if !distinct || !node.inputs.iter().all(|&v| own_kernel(v) && self.dt(v) == self.dt(out)) {
                continue;
            }
            let row = shape[axis + 1..].iter().product::<usize>() * self.dt(out).size().unwrap_or(1);
            let mut at = 0;
            for &v in &node.inputs {
                homes.home.insert(v, (out, at * row));
                at += self.shape(v)[axis];
            }
            homes.in_place.insert(n);
        }
        homes
    }

    /// The buffer of `v`: its own arena buffer, or where a concat in place keeps it (a view of the
    /// outermost concat's buffer, created here when its first slice is placed).
    pub(super) fn home_buffer(&mut self, v: ValueId, homes: &ConcatHomes) -> u32 {
        if let Some(b) = self.buf_of[v.index()] {
            return b;
        }
        let (dtype, shape, label) = (self.dt(v), self.shape(v), self.label(v));
        let b = match homes.home.get(&v) {
            Some(&(c, off)) => {
                let cb = self.home_buffer(c, homes);
                let (root, roff) = self.root_of[cb as usize];
                let cbuf = &self.buffers[cb as usize];
                let buf = Buffer { base: cbuf.base, offset: cbuf.offset + off, dtype, shape, label };
                self.add_buffer(buf, Some((root, roff + off)))
            }
            None => self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype, shape, label }, None),
        };
        self.buf_of[v.index()] = Some(b);
        b
    }
}
