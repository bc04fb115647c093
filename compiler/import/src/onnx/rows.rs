//! Values of data-dependent length through the import (`rlx_ir::bounded`): after each ONNX node, the
//! bounded axis of every HIR value it added (`propagate`), and at the end the graph outputs' counts
//! (`close`).

use super::Ctx;
use rlx_ir::bounded::{self, Row};
use rlx_ir::{Bounded, HirOp, MirOp, TensorType, ValueId};

/// Carries the bounded axes through HIR nodes `from..`, then registers the rows the node's own
/// translation produced (`Ctx::seed_rows`: their counts are computed from the padded result, which
/// must not count as a reader of it).
pub(crate) fn propagate(cx: &mut Ctx, from: usize) -> Result<(), String> {
    for ni in from..cx.g.nodes.len() {
        let n = &cx.g.nodes[ni];
        let ins: Vec<Option<Row>> = n.inputs.iter().map(|v| cx.rows.get(v).copied()).collect();
        if ins.iter().all(Option::is_none) {
            continue;
        }
        let rows = match &n.op {
            HirOp::Prim(op) => {
                let it: Vec<&TensorType> = n.inputs.iter().map(|&v| cx.g.ty(v)).collect();
                let ot: Vec<&TensorType> = n.outputs.iter().map(|&v| cx.g.ty(v)).collect();
                bounded::through(op, &ins, &it, &ot)?
            }
            op => return Err(format!("unsupported: {} of a value of data-dependent length", rlx_ir::OpSet::kind(op))),
        };
        for (&o, r) in n.outputs.clone().iter().zip(rows) {
            if let Some(r) = r {
                cx.rows.insert(o, r);
            }
        }
    }
    for (v, r) in std::mem::take(&mut cx.seed_rows) {
        cx.rows.insert(v, r);
    }
    Ok(())
}

/// For each graph output whose value (`srcs[k]`, before the output's own naming node) is bounded, its
/// count as a further graph output named `NAME_count` (one per distinct count) and its `Graph::bounded`
/// entry.
pub(crate) fn close(cx: &mut Ctx, srcs: &[ValueId]) -> Result<(), String> {
    let mut counts: Vec<(ValueId, u32)> = Vec::new();
    for (k, s) in srcs.iter().enumerate() {
        let Some(r) = cx.rows.get(s).copied() else { continue };
        let idx = match counts.iter().find(|(c, _)| *c == r.count) {
            Some(&(_, i)) => i,
            None => {
                let name = format!("{}_count", cx.g.value(cx.g.outputs[k]).name.clone().unwrap_or_default());
                let c = cx.g.add1(&name, HirOp::Prim(MirOp::Reshape { shape: vec![] }), &[r.count])?;
                cx.g.values[c.index()].name = Some(name);
                cx.g.outputs.push(c);
                let i = (cx.g.outputs.len() - 1) as u32;
                counts.push((r.count, i));
                i
            }
        };
        cx.g.bounded.push(Bounded { output: k as u32, axis: r.axis as u32, count: idx });
    }
    Ok(())
}
