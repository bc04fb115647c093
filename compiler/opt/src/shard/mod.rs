//! Sharding: one MIR graph per rank, with the communication between them as MIR ops (`all_reduce`,
//! `send`, `recv` …). `tp.rs` splits attention heads and feed-forward matmuls Megatron-style
//! (column-parallel, then row-parallel followed by one `all_reduce`); `pp.rs` cuts the graph into
//! stages balanced by FLOPs with `send`/`recv` between them; `slice.rs` cuts constants. The
//! interpreter runs every rank at once (`rlx_interp::ranks::run_ranks`), the oracle for the result.

mod cut;
mod pp;
mod slice;
mod tp;

use rlx_ir::{ConstData, Mir, OpSet};

/// How to shard: `tp=N` (tensor parallel over N ranks) or `pp=N` (N pipeline stages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shard {
    Tp(usize),
    Pp(usize),
}

impl Shard {
    /// Parses `tp=N` / `pp=N` (N ≥ 1); the error names the flag value.
    pub fn parse(s: &str) -> Result<Shard, String> {
        let bad = || format!("--shard '{s}': expected tp=N or pp=N with N a whole number of ranks ≥ 1 (e.g. tp=2)");
        let (k, v) = s.split_once('=').ok_or_else(bad)?;
        let n: usize = v.trim().parse().map_err(|_| bad())?;
        if n == 0 {
            return Err(format!("--shard '{s}': {k}=0 ranks; at least 1"));
        }
        if n > 1024 {
            return Err(format!("--shard '{s}': {n} ranks; at most 1024"));
        }
        match k.trim() {
            "tp" => Ok(Shard::Tp(n)),
            "pp" => Ok(Shard::Pp(n)),
            _ => Err(bad()),
        }
    }
    pub fn ranks(self) -> usize {
        match self {
            Shard::Tp(n) | Shard::Pp(n) => n,
        }
    }
    pub fn kind(self) -> &'static str {
        match self {
            Shard::Tp(_) => "tp",
            Shard::Pp(_) => "pp",
        }
    }
}

/// Something the pass could not shard (or kept whole), by node.
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    pub node: String,
    pub op: String,
    pub msg: String,
}

/// The ranks' graphs and what was left unsharded.
#[derive(Clone, Debug)]
pub struct Sharded {
    pub shard: Shard,
    /// Rank r's graph.
    pub ranks: Vec<Mir>,
    pub notes: Vec<Note>,
    /// For each rank: which of the model's outputs its graph outputs are (`None`: a value it sends,
    /// returned as an output of the stage). Tensor parallel: every rank returns every output.
    pub outputs: Vec<Vec<Option<usize>>>,
    /// For each rank: which of the model's inputs its graph inputs are.
    pub inputs: Vec<Vec<usize>>,
    /// For each rank and each of its graph inputs: `Some` when the rank holds only a part of that input
    /// (tensor parallel: a KV cache cut by key/value heads), `None` when it takes it whole.
    pub parts: Vec<Vec<Option<Part>>>,
}

/// A rank's part of a tensor: `len` entries of `axis` from `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub axis: usize,
    pub start: usize,
    pub len: usize,
}

impl Part {
    /// The part of a whole value `c`.
    pub fn of(&self, c: &ConstData) -> Result<ConstData, String> {
        slice::along(c, self.axis, self.start, self.len)
    }
}

/// Rank r's inputs, picked (and cut) from the model's.
pub fn rank_inputs(s: &Sharded, r: usize, inputs: &[ConstData]) -> Result<Vec<ConstData>, String> {
    s.inputs[r].iter().zip(&s.parts[r]).map(|(&k, p)| match p {
        Some(p) => p.of(&inputs[k]),
        None => Ok(inputs[k].clone()),
    }).collect()
}

/// One step of a rank's collective schedule, in the order the rank runs them.
#[derive(Clone, Debug, PartialEq)]
pub struct CommStep {
    pub node: String,
    pub op: &'static str,
    pub dtype: String,
    pub shape: Vec<usize>,
    pub peer: Option<usize>,
}

/// Shards `g` (fixed shapes; state only under tensor parallelism).
pub fn shard(g: &Mir, s: Shard) -> Result<Sharded, String> {
    if !g.state.is_empty() && matches!(s, Shard::Pp(_)) {
        return Err("--shard pp: the model carries state (a KV cache); pipeline stages of a stateful model are not supported (tp=N shards its cache by key/value heads)".into());
    }
    for &v in g.inputs.iter().chain(&g.outputs) {
        if g.ty(v).shape.as_fixed().is_none() {
            let name = g.value(v).name.clone().unwrap_or_default();
            return Err(format!("--shard: '{name}' has the symbolic shape {}; fix its dims with --dim NAME=N", g.ty(v).shape));
        }
    }
    for n in &g.nodes {
        if n.op.is_comm() {
            return Err(format!("--shard: node '{}' ({}) is already a collective: the model is sharded", n.name, n.op.kind()));
        }
        for &o in &n.outputs {
            if g.ty(o).shape.as_fixed().is_none() {
                return Err(format!("--shard: node '{}' ({}) has the symbolic shape {}; fix its dims with --dim NAME=N", n.name, n.op.kind(), g.ty(o).shape));
            }
        }
    }
    match s {
        Shard::Tp(n) => tp::tp(g, n),
        Shard::Pp(n) => pp::pp(g, n),
    }
}

/// The collectives and transfers of a rank's graph, in node order.
pub fn schedule(g: &Mir) -> Vec<CommStep> {
    g.nodes
        .iter()
        .filter(|n| n.op.is_comm())
        .map(|n| {
            let ty = g.ty(n.outputs[0]);
            let peer = match &n.op {
                rlx_ir::MirOp::Send { peer } | rlx_ir::MirOp::Recv { peer, .. } => Some(*peer),
                _ => None,
            };
            CommStep { node: n.name.clone(), op: n.op.kind(), dtype: ty.dtype.to_string(), shape: ty.shape.as_fixed().unwrap_or_default(), peer }
        })
        .collect()
}
