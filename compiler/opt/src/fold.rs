//! Constant folding and dead-code elimination.
//!
//! Folding evaluates every node whose inputs are all constants and replaces its outputs with constants
//! (e.g. the int8-weight MiniLM export's `Cast → Mul` dequantization chains become f32 weights, a
//! Linear's weight transpose becomes a pre-transposed weight). The optimizer does not own numerics:
//! the caller passes the evaluator (the pipeline hands it the reference interpreter), so folded values
//! are exactly what the oracle computes.

use rlx_ir::{ConstData, Def, Mir, MirOp, ValueId};

/// Evaluates one op on constant inputs.
pub type Evaluator<'a> = &'a dyn Fn(&MirOp, &[ConstData]) -> Result<Vec<ConstData>, String>;

/// Largest tensor (in elements) that folding will materialize.
pub const FOLD_LIMIT_ELEMS: usize = 1 << 26;

/// Copies `g` keeping only what `keep(node)` allows; returns the new graph and the value map.
fn rebuild(g: &Mir, mut step: impl FnMut(&mut Mir, usize, &[ValueId]) -> Option<Vec<ValueId>>) -> Mir {
    let mut out = Mir::new();
    let mut map: Vec<Option<ValueId>> = vec![None; g.values.len()];
    for &i in &g.inputs {
        let v = g.value(i);
        let id = out.add_input("", v.ty.clone());
        out.values[id.index()].name = v.name.clone();
        map[i.index()] = Some(id);
    }
    for (k, v) in g.values.iter().enumerate() {
        if let Def::Const(c) = &v.def {
            map[k] = Some(out.add_const(v.name.as_deref(), c.clone()));
        }
    }
    for (ni, n) in g.nodes.iter().enumerate() {
        let Some(ins) = n.inputs.iter().map(|i| map[i.index()]).collect::<Option<Vec<_>>>() else { continue };
        let outs = match step(&mut out, ni, &ins) {
            Some(o) => o,
            None => out.push_node(&n.name, n.op.clone(), &ins, n.outputs.iter().map(|&o| g.ty(o).clone()).collect()),
        };
        for (&o, no) in n.outputs.iter().zip(outs) {
            if g.value(o).name.is_some() && out.value(no).name.is_none() {
                out.values[no.index()].name = g.value(o).name.clone();
            }
            map[o.index()] = Some(no);
        }
    }
    out.outputs = g.outputs.iter().map(|o| map[o.index()].expect("graph outputs are defined")).collect();
    out
}

/// Folds constant subgraphs. Nodes the evaluator rejects are kept as they are.
pub fn fold(g: &Mir, eval: Evaluator) -> Mir {
    rebuild(g, |out, ni, ins| {
        let n = &g.nodes[ni];
        let consts: Option<Vec<ConstData>> = ins.iter().map(|&i| out.const_data(i).cloned()).collect();
        let consts = consts?;
        let big = n.outputs.iter().any(|&o| g.ty(o).shape.numel().is_none_or(|e| e > FOLD_LIMIT_ELEMS));
        if big {
            return None;
        }
        let vals = eval(&n.op, &consts).ok()?;
        if vals.len() != n.outputs.len() {
            return None;
        }
        for (v, &o) in vals.iter().zip(&n.outputs) {
            let ty = g.ty(o);
            if v.dtype != ty.dtype || ty.shape.as_fixed().as_deref() != Some(&v.shape[..]) {
                return None;
            }
        }
        Some(vals.into_iter().zip(&n.outputs).map(|(v, &o)| out.add_const(g.value(o).name.as_deref(), v)).collect())
    })
}

/// Removes nodes whose outputs are never used, and constants nothing reads.
pub fn dce(g: &Mir) -> Mir {
    let mut live = vec![false; g.values.len()];
    for &o in &g.outputs {
        live[o.index()] = true;
    }
    let mut keep = vec![false; g.nodes.len()];
    for (ni, n) in g.nodes.iter().enumerate().rev() {
        if n.outputs.iter().any(|o| live[o.index()]) {
            keep[ni] = true;
            for &i in &n.inputs {
                live[i.index()] = true;
            }
        }
    }
    // Rebuild with dead nodes skipped; constants are re-added only when live.
    let mut out = Mir::new();
    let mut map: Vec<Option<ValueId>> = vec![None; g.values.len()];
    for &i in &g.inputs {
        let v = g.value(i);
        let id = out.add_input("", v.ty.clone());
        out.values[id.index()].name = v.name.clone();
        map[i.index()] = Some(id);
    }
    for (k, v) in g.values.iter().enumerate() {
        if let (Def::Const(c), true) = (&v.def, live[k]) {
            map[k] = Some(out.add_const(v.name.as_deref(), c.clone()));
        }
    }
    for (ni, n) in g.nodes.iter().enumerate() {
        if !keep[ni] {
            continue;
        }
        let ins: Vec<ValueId> = n.inputs.iter().map(|i| map[i.index()].expect("live inputs are mapped")).collect();
        let outs = out.push_node(&n.name, n.op.clone(), &ins, n.outputs.iter().map(|&o| g.ty(o).clone()).collect());
        for (&o, no) in n.outputs.iter().zip(outs) {
            out.values[no.index()].name = g.value(o).name.clone();
            map[o.index()] = Some(no);
        }
    }
    out.outputs = g.outputs.iter().map(|o| map[o.index()].expect("outputs are live")).collect();
    out
}
