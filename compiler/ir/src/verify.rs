//! The verifier: checks a graph's structural invariants and re-runs type inference on every node.
//! It reports every problem it finds, each naming the node, rather than stopping at the first.

use crate::graph::{Def, Graph, NodeId, OpSet, ValueId};
use std::fmt;

#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    /// The source node name, when the problem is at a node.
    pub node: Option<String>,
    pub msg: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.node {
            Some(n) => write!(f, "node '{n}': {}", self.msg),
            None => f.write_str(&self.msg),
        }
    }
}

/// Returns all problems found (empty = valid).
pub fn verify<O: OpSet>(g: &Graph<O>) -> Vec<Problem> {
    let mut probs = Vec::new();
    let nv = g.values.len();
    // defined[v] = the value is available (input, const, or output of an earlier node).
    let mut defined = vec![false; nv];
    for (i, &v) in g.inputs.iter().enumerate() {
        if v.index() >= nv {
            probs.push(Problem { node: None, msg: format!("graph input {i} is {v}, which does not exist") });
            continue;
        }
        if g.value(v).def != Def::Input(i as u32) {
            probs.push(Problem { node: None, msg: format!("graph input {i} ({v}) is not defined as input {i}") });
        }
        defined[v.index()] = true;
    }
    for (k, v) in g.values.iter().enumerate() {
        match &v.def {
            Def::Const(c) => {
                defined[k] = true;
                if c.dtype != v.ty.dtype || v.ty.shape.as_fixed().as_deref() != Some(&c.shape[..]) {
                    probs.push(Problem { node: None, msg: format!("constant %{k} has type {} but data {}{:?}", v.ty, c.dtype, c.shape) });
                }
                if c.dtype.bytes_for(c.numel()) != Some(c.data.len()) {
                    probs.push(Problem { node: None, msg: format!("constant %{k}: {} bytes do not fit {}{:?}", c.data.len(), c.dtype, c.shape) });
                }
            }
            Def::Input(i) => {
                if g.inputs.get(*i as usize) != Some(&ValueId(k as u32)) {
                    probs.push(Problem { node: None, msg: format!("value %{k} claims to be input {i} but is not listed there") });
                }
            }
            Def::Node(n, o) => {
                let ok = g.nodes.get(n.index()).is_some_and(|nd| nd.outputs.get(*o as usize) == Some(&ValueId(k as u32)));
                if !ok {
                    probs.push(Problem { node: None, msg: format!("value %{k} claims to be output {o} of {n}, which does not list it") });
                }
            }
        }
    }
    for (ni, n) in g.nodes.iter().enumerate() {
        let here = |msg: String| Problem { node: Some(n.name.clone()), msg };
        let (lo, hi) = n.op.arity();
        if n.inputs.len() < lo || n.inputs.len() > hi {
            probs.push(here(format!("{} takes {lo}..={hi} inputs, has {}", n.op.kind(), n.inputs.len())));
        }
        let mut inputs_ok = true;
        for &i in &n.inputs {
            if i.index() >= nv {
                probs.push(here(format!("input {i} does not exist")));
                inputs_ok = false;
            } else if !defined[i.index()] {
                probs.push(here(format!("input {i} is used before it is defined (cycle or misordered nodes)")));
                inputs_ok = false;
            }
        }
        for (k, &o) in n.outputs.iter().enumerate() {
            if o.index() >= nv || g.value(o).def != Def::Node(NodeId(ni as u32), k as u32) {
                probs.push(here(format!("output {k} ({o}) is not defined by this node")));
                inputs_ok = false;
            } else {
                defined[o.index()] = true;
            }
        }
        // A region op's sub-graphs are graphs of their own: every problem in them, named by the op.
        for (k, r) in n.op.regions().iter().enumerate() {
            for p in verify(r) {
                probs.push(here(format!("{} region {k}: {p}", n.op.kind())));
            }
        }
        if inputs_ok && n.inputs.len() >= lo && n.inputs.len() <= hi {
            let tys: Vec<_> = n.inputs.iter().map(|&i| g.ty(i)).collect();
            match n.op.infer(&tys) {
                Err(e) => probs.push(here(e)),
                Ok(out) => {
                    if out.len() != n.outputs.len() {
                        probs.push(here(format!("{} produces {} outputs, node lists {}", n.op.kind(), out.len(), n.outputs.len())));
                    } else {
                        for (k, (t, &o)) in out.iter().zip(&n.outputs).enumerate() {
                            if g.ty(o) != t {
                                probs.push(here(format!("output {k} is recorded as {} but infers as {t}", g.ty(o))));
                            }
                        }
                    }
                }
            }
        }
    }
    for (i, &o) in g.outputs.iter().enumerate() {
        if o.index() >= nv {
            probs.push(Problem { node: None, msg: format!("graph output {i} ({o}) does not exist") });
        }
    }
    verify_state(g, &mut probs);
    verify_bounded(g, &mut probs);
    probs
}

/// Outputs of data-dependent length: each names an existing output, one of its axes, and a count
/// output that is an i64 scalar.
fn verify_bounded<O: OpSet>(g: &Graph<O>, probs: &mut Vec<Problem>) {
    let nv = g.values.len();
    for (k, b) in g.bounded.iter().enumerate() {
        let (Some(&o), Some(&c)) = (g.outputs.get(b.output as usize), g.outputs.get(b.count as usize)) else {
            probs.push(Problem { node: None, msg: format!("bounded {k} names output {} / count output {}, which do not exist", b.output, b.count) });
            continue;
        };
        if o.index() >= nv || c.index() >= nv {
            continue;
        }
        if b.axis as usize >= g.ty(o).shape.rank() {
            probs.push(Problem { node: None, msg: format!("bounded {k}: axis {} out of range for output {} of type {}", b.axis, b.output, g.ty(o)) });
        }
        let ct = g.ty(c);
        if ct.dtype != crate::DType::I64 || ct.shape.numel() != Some(1) {
            probs.push(Problem { node: None, msg: format!("bounded {k}: count output {} must be an i64 scalar, is {ct}", b.count) });
        }
    }
}

/// State pairs: trailing inputs and outputs in the same order, one type each; a cache input read by a
/// `write_rows` is read only by the `write_rows` that yields the output (so it updates in place).
fn verify_state<O: OpSet>(g: &Graph<O>, probs: &mut Vec<Problem>) {
    let ns = g.state.len();
    let nv = g.values.len();
    let top = |msg: String| Problem { node: None, msg };
    for (k, s) in g.state.iter().enumerate() {
        let (Some(&i), Some(&o)) = (g.inputs.get(s.input as usize), g.outputs.get(s.output as usize)) else {
            probs.push(top(format!("state {k} names input {} / output {}, which do not exist", s.input, s.output)));
            continue;
        };
        if i.index() >= nv || o.index() >= nv {
            continue;
        }
        if s.input as usize + ns != g.inputs.len() + k || s.output as usize + ns != g.outputs.len() + k {
            probs.push(top(format!("state {k} (input {}, output {}) is not among the trailing inputs and outputs in order", s.input, s.output)));
        }
        if g.ty(i) != g.ty(o) {
            probs.push(top(format!("state {k}: input type {} differs from output type {}", g.ty(i), g.ty(o))));
        }
        // A cache (the state input read by a `write_rows`) is updated in place row by row: that
        // `write_rows` must be its only reader and yield the output. Any other state (a training
        // step's parameters) is computed by any nodes; the planner updates it in place when that is
        // safe and copies it into the state region otherwise.
        let readers: Vec<&crate::graph::Node<O>> = g.nodes.iter().filter(|n| n.inputs.contains(&i)).collect();
        let ok = !readers.iter().any(|n| n.op.kind() == "write_rows")
            || match readers.as_slice() {
                [n] => n.inputs[0] == i && n.inputs[1..].iter().all(|&x| x != i) && n.outputs.first() == Some(&o),
                _ => false,
            };
        if !ok {
            probs.push(top(format!("state {k} (input {}): its only reader must be the write_rows that yields output {}", s.input, s.output)));
        }
    }
}
