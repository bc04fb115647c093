//! The graph container shared by HIR and MIR: nodes and values in arenas, named by typed `u32` handles.
//!
//! Invariant (checked by the verifier): `nodes` is in topological order — every node input is a graph
//! input, a constant, or an output of an earlier node.

use crate::{ConstData, TensorType};
use std::fmt;

macro_rules! handle {
    ($name:ident, $prefix:literal) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);
        impl $name {
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}
handle!(NodeId, "n");
handle!(ValueId, "%");

/// Where a value comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Def {
    /// The i-th graph input.
    Input(u32),
    /// A constant (weights, folded values).
    Const(ConstData),
    /// Output `1` of node `0`.
    Node(NodeId, u32),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    pub ty: TensorType,
    /// The model's own tensor name, when it has one.
    pub name: Option<String>,
    pub def: Def,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node<O> {
    pub op: O,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// The source model's node name (ONNX node name, builder path); used in every diagnostic.
    pub name: String,
}

/// What an op set must provide to live in a [`Graph`].
pub trait OpSet: Clone + PartialEq + fmt::Debug {
    /// The op kind as written in the text form (`matmul`, `reduce_sum`, `layer_norm`).
    fn kind(&self) -> &'static str;
    /// Output types from input types; an error message on mismatch (the caller adds the node name).
    fn infer(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String>;
    /// Attributes for the text form, in a fixed order.
    fn attrs(&self) -> Vec<(&'static str, crate::Attr)>;
    /// Rebuilds an op from its kind and attributes (the inverse of `kind` + `attrs`).
    fn from_parts(kind: &str, attrs: &[(String, crate::Attr)]) -> Result<Self, String>;
    /// Allowed input counts (min, max).
    fn arity(&self) -> (usize, usize);
    /// The sub-graphs this op owns (a `loop`'s body, an `if`'s branches: `crate::region`); none for
    /// every other op.
    fn regions(&self) -> &[Graph<Self>]
    where
        Self: Sized,
    {
        &[]
    }
    /// Moves parsed sub-graphs into this op's region slots (the text form's parser; the inverse of
    /// `regions`). An op without regions takes none.
    fn set_regions(&mut self, regions: Vec<Graph<Self>>) -> Result<(), String>
    where
        Self: Sized,
    {
        if regions.is_empty() {
            Ok(())
        } else {
            Err(format!("{} owns no regions, got {}", self.kind(), regions.len()))
        }
    }
}

/// A state tensor (a KV cache, a training step's parameters and optimizer state): graph input `input`
/// is its contents before a call, graph output `output` after it. The caller keeps it between calls;
/// compiled artifacts own it as one state region (`NAME_STATE_BYTES`) instead of an input and an
/// output. State inputs and outputs come last, in the same order; a cache read by a `write_rows` has
/// that `write_rows`, which yields its output, as its only reader (the verifier checks both), so a
/// compiled artifact updates it in place; other state is updated in place when the planner proves it
/// safe (`rlx_opt::plan`), else copied into the region at the end of the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    /// Index into `Graph::inputs`.
    pub input: u32,
    /// Index into `Graph::outputs`.
    pub output: u32,
}

/// A graph output whose length along `axis` is data-dependent (`crate::bounded`): its static size
/// there is an upper bound, and graph output `count` (an i64 scalar) holds how many of its slices along
/// `axis` are the result; the rest is padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounded {
    /// Index into `Graph::outputs`.
    pub output: u32,
    pub axis: u32,
    /// Index into `Graph::outputs` of the count.
    pub count: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Graph<O> {
    pub nodes: Vec<Node<O>>,
    pub values: Vec<Value>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// State carried between calls (empty for a stateless model).
    pub state: Vec<State>,
    /// Outputs of data-dependent length (empty for most models).
    pub bounded: Vec<Bounded>,
}

impl<O> Default for Graph<O> {
    fn default() -> Self {
        Graph { nodes: Vec::new(), values: Vec::new(), inputs: Vec::new(), outputs: Vec::new(), state: Vec::new(), bounded: Vec::new() }
    }
}

impl<O: OpSet> Graph<O> {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn value(&self, v: ValueId) -> &Value {
        &self.values[v.index()]
    }
    pub fn ty(&self, v: ValueId) -> &TensorType {
        &self.values[v.index()].ty
    }
    pub fn node(&self, n: NodeId) -> &Node<O> {
        &self.nodes[n.index()]
    }
    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> {
        (0..self.nodes.len() as u32).map(NodeId)
    }
    pub fn add_input(&mut self, name: &str, ty: TensorType) -> ValueId {
        let id = ValueId(self.values.len() as u32);
        self.values.push(Value { ty, name: Some(name.to_string()), def: Def::Input(self.inputs.len() as u32) });
        self.inputs.push(id);
        id
    }
    pub fn add_const(&mut self, name: Option<&str>, data: ConstData) -> ValueId {
        let id = ValueId(self.values.len() as u32);
        let ty = TensorType::fixed(data.dtype, &data.shape);
        self.values.push(Value { ty, name: name.map(str::to_string), def: Def::Const(data) });
        id
    }
    /// Appends a node, inferring its output types. On a type error nothing is added and the error
    /// names the node.
    pub fn add_node(&mut self, name: &str, op: O, inputs: &[ValueId]) -> Result<Vec<ValueId>, String> {
        let (lo, hi) = op.arity();
        if inputs.len() < lo || inputs.len() > hi {
            return Err(format!(
                "node '{name}' ({}): takes {lo}..={hi} inputs, got {}",
                op.kind(),
                inputs.len()
            ));
        }
        for &i in inputs {
            if i.index() >= self.values.len() {
                return Err(format!("node '{name}' ({}): input {i} does not exist", op.kind()));
            }
        }
        let tys: Vec<&TensorType> = inputs.iter().map(|&v| self.ty(v)).collect();
        let out_tys = op.infer(&tys).map_err(|e| format!("node '{name}' ({}): {e}", op.kind()))?;
        Ok(self.push_node(name, op, inputs, out_tys))
    }
    /// Appends a node with the given output types, without inference (the parser and verifier tests use it).
    pub fn push_node(&mut self, name: &str, op: O, inputs: &[ValueId], out_tys: Vec<TensorType>) -> Vec<ValueId> {
        let nid = NodeId(self.nodes.len() as u32);
        let mut outs = Vec::with_capacity(out_tys.len());
        for (k, ty) in out_tys.into_iter().enumerate() {
            let id = ValueId(self.values.len() as u32);
            self.values.push(Value { ty, name: None, def: Def::Node(nid, k as u32) });
            outs.push(id);
        }
        self.nodes.push(Node { op, inputs: inputs.to_vec(), outputs: outs.clone(), name: name.to_string() });
        outs
    }
    /// Convenience for single-output ops.
    pub fn add1(&mut self, name: &str, op: O, inputs: &[ValueId]) -> Result<ValueId, String> {
        let outs = self.add_node(name, op, inputs)?;
        outs.into_iter().next().ok_or_else(|| format!("node '{name}': op has no outputs"))
    }
    pub fn const_data(&self, v: ValueId) -> Option<&ConstData> {
        match &self.value(v).def {
            Def::Const(c) => Some(c),
            _ => None,
        }
    }
    /// The node that defines `v`, if any.
    pub fn producer(&self, v: ValueId) -> Option<NodeId> {
        match self.value(v).def {
            Def::Node(n, _) => Some(n),
            _ => None,
        }
    }
    /// For each value, the distinct nodes that read it, in node order.
    pub fn consumers(&self) -> Vec<Vec<NodeId>> {
        let mut c: Vec<Vec<NodeId>> = vec![Vec::new(); self.values.len()];
        for (n, node) in self.nodes.iter().enumerate() {
            for &i in &node.inputs {
                let n = NodeId(n as u32);
                if !c[i.index()].contains(&n) {
                    c[i.index()].push(n);
                }
            }
        }
        c
    }
    /// For each value, whether it is a graph output.
    pub fn output_mask(&self) -> Vec<bool> {
        let mut m = vec![false; self.values.len()];
        for &o in &self.outputs {
            m[o.index()] = true;
        }
        m
    }
    /// Number of uses of each value (node inputs plus graph outputs).
    pub fn use_counts(&self) -> Vec<u32> {
        let mut c = vec![0u32; self.values.len()];
        for n in &self.nodes {
            for &i in &n.inputs {
                c[i.index()] += 1;
            }
        }
        for &o in &self.outputs {
            c[o.index()] += 1;
        }
        c
    }
    /// Total bytes and element count of constant values (parameters).
    pub fn const_stats(&self) -> (usize, usize) {
        let mut bytes = 0;
        let mut elems = 0;
        for v in &self.values {
            if let Def::Const(c) = &v.def {
                bytes += c.data.len();
                elems += c.numel();
            }
        }
        (elems, bytes)
    }
    /// Symbolic dim names used by the graph inputs, sorted and deduplicated.
    pub fn input_symbols(&self) -> Vec<String> {
        let mut s: Vec<String> = self.inputs.iter().flat_map(|&i| self.ty(i).shape.symbols()).collect();
        s.sort();
        s.dedup();
        s
    }
    /// Op-kind histogram, sorted by kind.
    pub fn histogram(&self) -> Vec<(&'static str, usize)> {
        let mut m = std::collections::BTreeMap::new();
        for n in &self.nodes {
            *m.entry(n.op.kind()).or_insert(0) += 1;
        }
        m.into_iter().collect()
    }
}
