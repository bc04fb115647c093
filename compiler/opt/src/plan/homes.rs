//! Strided homes ([`PlanOptions::concat_in_place`](super::PlanOptions::concat_in_place), with the
//! channels-last layout): a value whose producer's kernel can store it at an offset per dim of a larger
//! buffer is stored there directly, where its only reader would otherwise copy it —
//! - into the interior of a zero `pad` of rank 4 padding only dims 1 and 2 (the padded copy of x that
//!   `conv_nhwc_gemm.rs` reads), whose launch then only zeroes the border ([`Planner::pad_border_body`]);
//! - into its slice of a concat that `concat.rs` cannot write in place (its slices not contiguous: a
//!   channels-last concat along the channels), which then copies only its other inputs, or is no
//!   launch when every input is stored so.
//! The producers that store so are the kernels whose stores go through [`Planner::out_index`]: the
//! GEMM micro-kernel over a packed weight (`gemm.rs`) and the channels-last dense convolution
//! (`conv_nhwc_gemm.rs`). The value itself has no buffer of its own: its kernel's output parameter is
//! a view of the home's whole buffer, and it has no other reader.

use super::fuse::Role;
use super::im2col::vector_runs;
use super::index::linear;
use super::kernel::KB;
use super::Planner;
use rlx_ir::lir::{Base, Buffer};
use rlx_ir::loops::{Expr, IOp, LoopKind, Stmt};
use rlx_ir::{MirOp, NodeId, OpSet, PadMode, ValueId};
use std::collections::{HashMap, HashSet};

/// Where a value with a strided home lives: the home value and the value's offset along each dim.
#[derive(Clone, Debug)]
pub(super) struct StridedHome {
    pub home: ValueId,
    pub offsets: Vec<usize>,
}

/// The strided homes and the concats whose every input has one (no launch).
#[derive(Default)]
pub(super) struct Strided {
    pub home: HashMap<ValueId, StridedHome>,
    pub full: HashSet<NodeId>,
}

impl Planner<'_> {
    /// The values stored into a strided home (module doc), given the concats written in place.
    pub(super) fn strided_homes(&self, out_slot: &HashMap<ValueId, u32>, in_place: &HashSet<NodeId>, contiguous: &HashMap<ValueId, (ValueId, usize)>) -> Strided {
        let g = self.g;
        let mut s = Strided::default();
        if !self.opts.concat_in_place || !self.opts.channels_last {
            return s;
        }
        let consumers = g.consumers();
        let uses = g.use_counts();
        // v: stored by a kernel that maps its stores, read once, by `c`.
        let eligible = |v: ValueId, c: NodeId| -> bool {
            self.own_kernel(v, out_slot)
                && uses[v.index()] == 1
                && consumers[v.index()] == [c]
                && self.fusion.role[c.index()] == Role::Root
                && !contiguous.contains_key(&v)
                && self.dt(v) == self.dt(g.node(c).outputs[0])
                && self.stores_mapped(v)
        };
        for c in g.node_ids() {
            let node = g.node(c);
            let out = node.outputs[0];
            if self.g.outputs.contains(&out) || contiguous.contains_key(&out) {
                continue;
            }
            match &node.op {
                MirOp::Pad { pads, mode: PadMode::Constant, value } if *value == 0.0 && pads.len() == 8 && self.shape(out).len() == 4 => {
                    let spatial = pads.iter().enumerate().all(|(i, &p)| p >= 0 && (p == 0 || matches!(i % 4, 1 | 2)));
                    let v = node.inputs[0];
                    if spatial && eligible(v, c) {
                        s.home.insert(v, StridedHome { home: out, offsets: pads[..4].iter().map(|&p| p as usize).collect() });
                    }
                }
                MirOp::Concat { axis } if !in_place.contains(&c) => {
                    // Copied run by run (`concat.rs`'s `concat_copy_body`, which skips the homed inputs):
                    // every input in a buffer of the concat's type.
                    let copied = node.inputs.iter().all(|&v| self.materialized(v) && self.dt(v) == self.dt(out));
                    let distinct = copied && node.inputs.iter().enumerate().all(|(i, v)| !node.inputs[..i].contains(v));
                    let mut at = 0;
                    let mut all = distinct;
                    for &v in &node.inputs {
                        if distinct && eligible(v, c) {
                            let mut offsets = vec![0; self.shape(out).len()];
                            offsets[*axis] = at;
                            s.home.insert(v, StridedHome { home: out, offsets });
                        } else {
                            all = false;
                        }
                        at += self.shape(v)[*axis];
                    }
                    if all {
                        s.full.insert(c);
                    }
                }
                _ => {}
            }
        }
        s
    }

    /// A value its producer's kernel stores into a buffer of its own (an arena temporary).
    pub(super) fn own_kernel(&self, v: ValueId, out_slot: &HashMap<ValueId, u32>) -> bool {
        let g = self.g;
        let Some(p) = g.producer(v) else { return false };
        let pn = g.node(p);
        self.fusion.role[p.index()] == Role::Root
            && pn.op != MirOp::WriteRows
            && pn.op.regions().is_empty()
            && !out_slot.contains_key(&v)
            && !g.outputs.contains(&v)
            && !self.inplace_state.contains_key(&v)
    }

    /// Whether root value `v`'s kernel stores through [`Self::out_index`]: the GEMM micro-kernel over a
    /// packed weight or the channels-last dense convolution, as `kernel.rs` dispatches them.
    fn stores_mapped(&self, v: ValueId) -> bool {
        let Some(r) = self.g.producer(v) else { return false };
        if self.fusion.row_reduces.contains_key(&r) || self.attention.contains_key(&r) || self.split_k_parts.contains_key(&v) {
            return false;
        }
        let a = self.fusion.anchor_of.get(&v).copied().unwrap_or(r);
        let n = self.g.node(a);
        match &n.op {
            MirOp::MatMul => self.packed_weight.contains_key(&n.inputs[1]) && !self.conv_gemm.contains_key(&a) && self.is_gemm(a),
            MirOp::ConvNhwc { .. } => self.is_nhwc_dense(a),
            _ => false,
        }
    }

    /// The buffer of `v`, a value with a strided home: a view of its home's whole buffer (created here
    /// when the first value stored into it is placed; `base` the home's own when it is new).
    pub(super) fn strided_buffer(&mut self, v: ValueId, h: &StridedHome, base: Base) -> u32 {
        let hb = match self.buf_of[h.home.index()] {
            Some(b) => b,
            None => {
                let (dtype, shape, label) = (self.dt(h.home), self.shape(h.home), self.label(h.home));
                let b = self.add_buffer(Buffer { base, offset: 0, dtype, shape, label }, None);
                self.buf_of[h.home.index()] = Some(b);
                b
            }
        };
        let (root, off) = self.root_of[hb as usize];
        let hbuf = self.buffers[hb as usize].clone();
        let b = self.add_buffer(Buffer { label: self.label(v), ..hbuf }, Some((root, off)));
        self.buf_of[v.index()] = Some(b);
        b
    }

    /// The flat index a kernel stores root value `v`'s element `idx` (of `shape`) at: in its strided
    /// home, offset per dim in the home's shape; else in its own buffer.
    pub(super) fn out_index(&self, v: ValueId, idx: &[Expr], shape: &[usize]) -> Expr {
        match self.strided.home.get(&v) {
            Some(h) => {
                let moved: Vec<Expr> = idx.iter().zip(&h.offsets).map(|(e, &o)| if o == 0 { e.clone() } else { Expr::add(e.clone(), Expr::Int(o as i64)) }).collect();
                linear(&moved, &self.shape(h.home))
            }
            None => linear(idx, shape),
        }
    }

    /// Whether pad root `r`'s input was stored into its interior (its launch zeroes the border only).
    pub(super) fn is_pad_border(&self, r: NodeId) -> bool {
        matches!(self.g.node(r).op, MirOp::Pad { .. }) && self.strided.home.contains_key(&self.g.node(r).inputs[0])
    }

    /// The launch of a pad whose interior its input's kernel wrote: zeroes per row (image, padded row)
    /// the whole row where it is padding, else the columns left and right of the interior, as vector loops.
    pub(super) fn pad_border_body(&mut self, kb: &mut KB, r: NodeId, op: u32, out_shape: &[usize]) -> Vec<Stmt> {
        let MirOp::Pad { pads, .. } = &self.g.node(r).op else { unreachable!("pad_border_body on another op") };
        let (pt, pl, pb, pr) = (pads[1] as usize, pads[2] as usize, pads[5] as usize, pads[6] as usize);
        let (nb, hp, wp, c) = (out_shape[0], out_shape[1], out_shape[2], out_shape[3]);
        let lanes = self.lanes.max(1);
        let dt = self.dt(self.g.node(r).outputs[0]);
        let row = kb.var();
        let zero = super::kernel::lit(0.0, dt);
        // Zero `len` elements from `row`'s element `from`.
        let run = |kb: &mut KB, from: usize, len: usize| -> Vec<Stmt> {
            let mut v = Vec::new();
            for (at, n, width) in vector_runs(from as i64, len as i64, lanes as i64).into_iter().filter(|r| r.1 > 0) {
                let j = kb.var();
                let kind = LoopKind::run(width as u32);
                let index = Expr::add(Expr::mul(Expr::Var(row), Expr::Int((wp * c) as i64)), Expr::add(Expr::Int(at), Expr::Var(j)));
                v.push(Stmt::For { var: j, extent: n, kind, body: vec![Stmt::Store { buf: op, index, value: zero.clone() }] });
            }
            v
        };
        let whole = run(kb, 0, wp * c);
        let mut sides = run(kb, 0, pl * c);
        sides.extend(run(kb, (wp - pr) * c, pr * c));
        let h = Expr::i(IOp::Rem, Expr::Var(row), Expr::Int(hp as i64));
        let inside = Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(pt as i64), h.clone()), Expr::i(IOp::Lt, h, Expr::Int((hp - pb) as i64)));
        let body = vec![Stmt::If { cond: inside.clone(), body: sides }, Stmt::If { cond: Expr::i(IOp::Eq, inside, Expr::Int(0)), body: whole }];
        vec![Stmt::For { var: row, extent: (nb * hp) as i64, kind: LoopKind::Parallel, body }]
    }
}
