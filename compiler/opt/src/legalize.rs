//! Legalization: the dispatch contract. Every MIR node resolves against a target's claim set to
//!
//! - **native**: the target claims the op kind for the node's dtype;
//! - **common-IR**: a registered lowering ([`COMMON_IR`]) expresses it with primitives the target claims;
//! - **rewritten**: a structural rewrite gives the same semantics (fused regions unfuse; none are
//!   registered yet beyond the common-IR table);
//! - **unsupported**: none of the above. The compile fails and the report lists every such node.
//!
//! The dtype a claim is checked against is the node's first input's dtype. A `cast` (or `bitcast`) must be claimed
//! for its source and for its destination dtype (a target without f64 cannot produce one either), and
//! an output written by a copy kernel (a constant or input) needs `reshape` for its dtype, so `rlxc
//! check` reports what the compile would otherwise fail on.

use rlx_ir::{DType, Mir, MirOp, OpSet, TargetCaps};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resolution {
    Native,
    CommonIr,
    Rewritten,
    Unsupported,
}

impl Resolution {
    pub fn name(self) -> &'static str {
        match self {
            Resolution::Native => "native",
            Resolution::CommonIr => "common-IR",
            Resolution::Rewritten => "rewritten",
            Resolution::Unsupported => "unsupported",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct DispatchEntry {
    /// The source node name.
    pub node: String,
    /// MIR op kind.
    pub op: String,
    pub dtype: DType,
    pub input_shapes: Vec<String>,
    pub resolution: Resolution,
    /// How it resolved, or what would make it legal.
    pub note: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct DispatchReport {
    pub target: String,
    pub entries: Vec<DispatchEntry>,
}

impl DispatchReport {
    pub fn unsupported(&self) -> impl Iterator<Item = &DispatchEntry> {
        self.entries.iter().filter(|e| e.resolution == Resolution::Unsupported)
    }
    pub fn count(&self, r: Resolution) -> usize {
        self.entries.iter().filter(|e| e.resolution == r).count()
    }
    pub fn is_legal(&self) -> bool {
        self.unsupported().next().is_none()
    }
}

/// Registered common-IR lowerings: op kind → the primitive kinds (same dtype) it expands to.
pub const COMMON_IR: &[(&str, &[&str])] = &[
    ("reduce_mean", &["reduce_sum", "div"]),
    ("sigmoid", &["neg", "exp", "add", "recip"]),
    ("relu", &["max"]),
    ("recip", &["div"]),
    ("sub", &["neg", "add"]),
    ("tanh", &["exp", "sub", "add", "div"]),
];

/// Resolves every node of `g` against `caps`. Never fails: an illegal graph gives a report with
/// unsupported entries.
pub fn report(g: &Mir, caps: &TargetCaps) -> DispatchReport {
    let mut entries = Vec::with_capacity(g.nodes.len());
    for n in &g.nodes {
        let kind = n.op.kind();
        // (A `recv` has no input: its claim is checked for what it receives.)
        let dtype = n.inputs.first().or(n.outputs.first()).map(|&i| g.ty(i).dtype).unwrap_or(DType::F32);
        let input_shapes = n.inputs.iter().map(|&i| g.ty(i).to_string()).collect();
        let cast_to = match n.op {
            MirOp::Cast { to } | MirOp::Bitcast { to } if !caps.claims(kind, to) => Some(to),
            _ => None,
        };
        let (resolution, note) = if let Some(to) = cast_to {
            (Resolution::Unsupported, format!("target '{}' does not implement {kind} to {to}; legal if the target would claim {kind}/{to}", caps.name))
        } else if caps.claims(kind, dtype) {
            (Resolution::Native, String::new())
        } else if !n.op.regions().is_empty() {
            let what = if kind == "loop" { "a Loop or Scan that does not unroll: a trip count or condition known only at run time, or past the unroll limits" } else { "an if whose branch holds such a loop" };
            (Resolution::Unsupported, format!("target '{}' does not run control-flow regions ({kind}: {what}); legal if the target would claim {kind}/{dtype}", caps.name))
        } else if let Some((_, prims)) = COMMON_IR.iter().find(|(k, prims)| *k == kind && prims.iter().all(|p| caps.claims(p, dtype))) {
            (Resolution::CommonIr, format!("via {}", prims.join(" + ")))
        } else {
            let what = match COMMON_IR.iter().find(|(k, _)| *k == kind) {
                Some((_, prims)) => format!("claim {kind}/{dtype}, or {} for {dtype}", prims.join(" + ")),
                None => format!("claim {kind}/{dtype}"),
            };
            (Resolution::Unsupported, format!("target '{}' does not implement {kind} for {dtype}; legal if the target would {what}", caps.name))
        };
        let native = resolution == Resolution::Native;
        entries.push(DispatchEntry { node: n.name.clone(), op: kind.to_string(), dtype, input_shapes, resolution, note });
        // A region the target runs: its bodies' nodes are compiled too, each resolved the same way.
        if native {
            for (k, body) in n.op.regions().iter().enumerate() {
                let sub = report(body, caps);
                entries.extend(sub.entries.into_iter().map(|e| DispatchEntry { node: format!("{}, region {k}, {}", n.name, e.node), ..e }));
            }
        }
    }
    // An output that no kernel computes (a graph input, a constant — folded subgraphs end as one — or
    // a reshape of either) is written by a copy kernel: the target must move its dtype.
    for (i, &o) in g.outputs.iter().enumerate() {
        let copied = match g.producer(o) {
            None => true,
            Some(p) => matches!(g.node(p).op, MirOp::Reshape { .. } | MirOp::Bitcast { .. }) && g.producer(g.node(p).inputs[0]).is_none(),
        };
        let dtype = g.ty(o).dtype;
        if copied && !caps.claims("reshape", dtype) {
            let name = g.value(o).name.clone().unwrap_or_else(|| format!("output {i}"));
            entries.push(DispatchEntry {
                node: format!("output '{name}'"),
                op: "copy".into(),
                dtype,
                input_shapes: vec![g.ty(o).to_string()],
                resolution: Resolution::Unsupported,
                note: format!("target '{}' cannot store {dtype}: the output is a constant or an input, written by a copy; legal if the target would claim reshape/{dtype}", caps.name),
            });
        }
    }
    DispatchReport { target: caps.name.clone(), entries }
}
