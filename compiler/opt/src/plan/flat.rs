//! Elementwise kernels over their trailing dims as one flat loop. A kernel of elementwise ops on an
//! NCHW value loops over rows of W columns, which the LLVM writer vectorizes row by row: a row of 7 or
//! 14 columns is a partial vector or none at 16 lanes. Squeeze-and-excitation's gate multiply alone
//! (x · g, g per channel; 1 thread, CPU time): 672 channels at 14² 47 → 13 µs (ONNX Runtime 30), 1152
//! at 7² 17 → 6 (24), 144 at 56² 56 → 42 (79). Where every operand is either of the output's full size over the
//! trailing dims or constant over all of them (a per-channel scale), those dims are one loop over
//! their flat position `q`, each dim's index `q / S % d`, which `index::linear` folds back into `q`
//! for an operand of their full size. The plane form of the window kernels (`depthwise.rs`) reads its
//! epilogue's operands at a flat position under the same condition ([`Planner::tail_safe`]).

use super::index::{linear, split_flat};
use super::kernel::{nest, KB};
use super::Planner;
use rlx_ir::loops::{LoopKind, Stmt};
use rlx_ir::{Def, MirOp, NodeId};

impl Planner<'_> {
    /// Whether the ops from `n` down to `a` (or to the values in buffers of their own, without `a`)
    /// read every operand at a flat position over the output's trailing dims `tail` as at its
    /// multi-dimensional index: elementwise ops only, operands constant over all of `tail` or of its
    /// full size in a buffer of their own shape.
    pub(super) fn tail_safe(&self, n: NodeId, a: Option<NodeId>, tail: &[usize]) -> bool {
        if Some(n) == a {
            return true;
        }
        let node = self.g.node(n);
        if !matches!(node.op, MirOp::Unary(_) | MirOp::Binary(_) | MirOp::Where | MirOp::Cast { .. }) {
            return false;
        }
        node.inputs.iter().all(|&v| {
            let p = self.g.producer(v);
            if p.is_some() && p == a {
                return true;
            }
            let s = self.shape(v);
            let dims: Vec<usize> = (0..tail.len()).map(|i| { let back = tail.len() - i; if s.len() >= back { s[s.len() - back] } else { 1 } }).collect();
            let constant = dims.iter().all(|&d| d == 1);
            if !constant && dims != tail {
                return false;
            }
            if let Some(b) = self.buf_of[v.index()] {
                return constant || self.buffers[b as usize].shape == s;
            }
            match (&self.g.value(v).def, p) {
                (Def::Const(_), _) => constant,
                (_, Some(p)) => self.tail_safe(p, a, tail),
                _ => false,
            }
        })
    }

    /// The first of the trailing dims that the elementwise kernel rooted at `r` runs as one flat loop
    /// (see the module doc): on vector CPU targets, at least two dims of more than one element after
    /// the first such dim (the parallel loop's), the most that [`Planner::tail_safe`] allows.
    fn flat_from(&self, r: NodeId, shape: &[usize]) -> Option<usize> {
        let first = shape.iter().position(|&d| d != 1)?;
        if self.lanes < 4 {
            return None;
        }
        (first + 1..shape.len()).find(|&k| shape[k..].iter().filter(|&&d| d != 1).count() >= 2 && self.tail_safe(r, None, &shape[k..]))
    }

    /// The body of the elementwise kernel rooted at `r` storing into parameter `op`: a nest over the
    /// output's dims, the trailing ones flat where [`Planner::flat_from`] allows (a transpose that moves
    /// the input's innermost dim: `transpose.rs`).
    pub(super) fn elementwise_body(&mut self, kb: &mut KB, r: NodeId, op: u32, out_shape: &[usize]) -> Vec<Stmt> {
        if let Some(j) = self.transpose_block_dim(r, out_shape) {
            return self.transpose_body(kb, r, op, out_shape, j);
        }
        let k = self.flat_from(r, out_shape).unwrap_or(out_shape.len());
        let mut shape = out_shape[..k].to_vec();
        if k < out_shape.len() {
            shape.push(out_shape[k..].iter().product());
        }
        nest(kb, &shape, LoopKind::Parallel, &mut |kb, cidx| {
            let mut idx = cidx[..k].to_vec();
            if k < out_shape.len() {
                idx.extend(split_flat(cidx[k].clone(), &out_shape[k..]));
            }
            let v = self.node_expr(kb, r, &idx);
            vec![Stmt::Store { buf: op, index: linear(&idx, out_shape), value: v }]
        })
    }
}
