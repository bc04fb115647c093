//! An ONNX subgraph (a Loop body, an If branch) built as a region (`rlx_ir::region`): a graph of its
//! own whose inputs are its formal inputs, then one per outer value it reads (its captures, which the
//! region op takes as trailing operands). An outer constant is copied into the region as a constant, so
//! shape chains inside it still fold at import.

use super::Node;
use crate::onnx::proto::GraphProto;
use crate::onnx::Ctx;
use rlx_ir::{Def, Graph, Hir, HirOp, MirOp, TensorType, ValueId};
use std::collections::{HashMap, HashSet};

/// The names `g` reads that it does not define (inputs, initializers, node outputs), in first-use order,
/// through nested subgraphs.
fn free_names(g: &GraphProto, out: &mut Vec<String>) {
    let mut defined: HashSet<&str> = g.input.iter().map(|i| i.name.as_str()).chain(g.initializer.iter().map(|t| t.name.as_str())).collect();
    let push = |n: &str, defined: &HashSet<&str>, out: &mut Vec<String>| {
        if !n.is_empty() && !defined.contains(n) && !out.iter().any(|o| o == n) {
            out.push(n.to_string());
        }
    };
    for nd in &g.node {
        for i in &nd.input {
            push(i, &defined, out);
        }
        for a in &nd.attribute {
            let mut inner = Vec::new();
            for sub in a.g.iter().chain(&a.graphs) {
                free_names(sub, &mut inner);
            }
            for n in inner {
                push(&n, &defined, out);
            }
        }
        defined.extend(nd.output.iter().map(String::as_str));
    }
    for o in &g.output {
        push(&o.name, &defined, out);
    }
}

/// The import state a region swaps out while it is built (everything keyed by the outer graph's values).
struct Outer {
    g: Hir,
    names: HashMap<String, ValueId>,
    narrow: HashMap<ValueId, crate::onnx::narrow::Narrow>,
    rows: HashMap<ValueId, rlx_ir::bounded::Row>,
    seed_rows: Vec<(ValueId, rlx_ir::bounded::Row)>,
    cur: String,
}

fn swap_out(cx: &mut Ctx) -> Outer {
    Outer {
        g: std::mem::take(&mut cx.g),
        names: std::mem::take(&mut cx.names),
        narrow: std::mem::take(&mut cx.narrow),
        rows: std::mem::take(&mut cx.rows),
        seed_rows: std::mem::take(&mut cx.seed_rows),
        cur: cx.cur.clone(),
    }
}

fn swap_back(cx: &mut Ctx, o: Outer) -> Hir {
    cx.names = o.names;
    cx.narrow = o.narrow;
    cx.rows = o.rows;
    cx.seed_rows = o.seed_rows;
    cx.cur = o.cur;
    std::mem::replace(&mut cx.g, o.g)
}

/// Builds `g` as a region whose formal inputs have types `formal`; returns it and the outer values its
/// capture inputs are bound to (the op's trailing operands).
pub(super) fn build(cx: &mut Ctx, nd: &Node, what: &str, g: &GraphProto, formal: &[TensorType]) -> Result<(Hir, Vec<ValueId>), String> {
    if g.input.len() != formal.len() {
        return Err(format!("{} {what} takes {} inputs, but {} are bound", nd.op, g.input.len(), formal.len()));
    }
    let mut free = Vec::new();
    free_names(g, &mut free);
    let outer = swap_out(cx);
    let r = build_in(cx, nd, what, g, formal, &free, &outer);
    let body = swap_back(cx, outer);
    r.map(|captured| (body, captured))
}

fn build_in(cx: &mut Ctx, nd: &Node, what: &str, g: &GraphProto, formal: &[TensorType], free: &[String], outer: &Outer) -> Result<Vec<ValueId>, String> {
    let args: Vec<ValueId> = g.input.iter().zip(formal).map(|(vi, t)| cx.g.add_input(&vi.name, t.clone())).collect();
    let mut captured = Vec::new();
    for name in free {
        // A name defined nowhere is reported by the node that reads it.
        let Some(&v) = outer.names.get(name) else { continue };
        if outer.rows.contains_key(&v) {
            return Err(format!("unsupported: {} {what} reads '{name}', a value of data-dependent length", nd.op));
        }
        let id = match &outer.g.value(v).def {
            Def::Const(c) => cx.g.add_const(Some(name), c.clone()),
            _ => {
                captured.push(v);
                cx.g.add_input(name, outer.g.ty(v).clone())
            }
        };
        if let Some(n) = outer.narrow.get(&v) {
            cx.narrow.insert(id, *n);
        }
        cx.names.insert(name.clone(), id);
    }
    let outs = super::control::inline_scoped(cx, nd, what, g, &args)?;
    crate::onnx::rows::propagate(cx, 0)?;
    for &o in &outs {
        if cx.rows.contains_key(&o) {
            return Err(format!("unsupported: {} {what} yields a value of data-dependent length", nd.op));
        }
        // Every output a node's own (an input or constant passed through gets an identity).
        let o = match cx.g.value(o).def {
            Def::Node(..) if !cx.g.outputs.contains(&o) => o,
            _ => {
                let shape = cx.g.ty(o).shape.0.clone();
                cx.g.add1(&format!("{}/{what}/out{}", outer.cur, cx.g.outputs.len()), HirOp::Prim(MirOp::Reshape { shape }), &[o])?
            }
        };
        cx.g.outputs.push(o);
    }
    Ok(captured)
}

/// Whether a region (or one nested in it) holds a `loop`.
pub(super) fn has_loop(g: &Graph<HirOp>) -> bool {
    g.nodes.iter().any(|n| match &n.op {
        HirOp::Loop { .. } => true,
        HirOp::If { branches } => branches.iter().any(has_loop),
        _ => false,
    })
}
