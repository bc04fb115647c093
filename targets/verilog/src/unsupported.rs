//! What a user reads when a model does not map onto the datapath: every node of the model that does
//! not, once, by its own name and op type (the ONNX op type when the caller knows it), and what the
//! datapath maps instead.

use crate::recognize::unmapped;
use rlx_ir::Mir;

/// What the datapath maps, for error messages.
const MAPS: &str = "the Verilog datapath maps fully connected, conv (groups 1), max-pool layers";

/// The generic reason a node is not part of a layer; a node with this reason gets no detail line.
const NOT_A_LAYER: &str = "not part of an int8 layer";

/// `Ok` when `g` (a quantized integer MIR graph) maps onto the datapath; else one line per source
/// node that does not — `Softmax (node 'sm0') is not supported on verilog: …` — with the reason
/// where it is specific (a grouped conv's `groups`), then any problem of the graph as a whole.
/// `source` maps a MIR node's name to its model node's name and op type (the ONNX op type): MIR
/// nodes carry their source node's name (lowered blocks and quantized layers extend it, `sm0/exp`,
/// `pool.sum`), so a model node lowered to several MIR nodes is reported once, at the first that
/// does not map. Without a source the MIR node's name and op kind are used.
pub fn unsupported(g: &Mir, source: &dyn Fn(&str) -> Option<(String, String)>) -> Result<(), String> {
    let (nodes, graph) = unmapped(g);
    if nodes.is_empty() && graph.is_empty() {
        return Ok(());
    }
    let mut seen: Vec<String> = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    for u in &nodes {
        let (node, op) = source(&u.node).unwrap_or_else(|| (u.node.clone(), u.op.to_string()));
        if seen.contains(&node) {
            continue;
        }
        let mut line = format!("{op} (node '{node}') is not supported on verilog: {MAPS}");
        seen.push(node);
        if !u.why.starts_with(NOT_A_LAYER) {
            line.push_str(&format!(" ({}: {})", u.op, u.why));
        }
        lines.push(line);
    }
    lines.extend(graph);
    let head = match seen.len() {
        0 => "the model cannot be mapped to the Verilog datapath:".to_string(),
        1 => "1 node of the model is not supported on verilog:".to_string(),
        n => format!("{n} nodes of the model are not supported on verilog:"),
    };
    Err(format!("{head}\n  {}", lines.join("\n  ")))
}
