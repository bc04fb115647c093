//! Constant folding and dead-code elimination.
//!
//! Folding evaluates every node whose inputs are all constants and replaces its outputs with constants
//! (e.g. the int8-weight MiniLM export's `Cast → Mul` dequantization chains become f32 weights, a
//! Linear's weight transpose becomes a pre-transposed weight). The optimizer does not own numerics:
//! the caller passes the evaluator (the pipeline hands it the reference interpreter), so folded values
//! are exactly what the oracle computes.

use crate::conv1d::conv1d_as_2d;
use crate::conv_affine::{collapse_affine_chains, fold_conv_affine};
use crate::narrow::narrow_broadcasts;
use rlx_ir::{ConstData, Def, Dim, Mir, MirOp, ValueId};

/// Evaluates one op on constant inputs.
pub type Evaluator<'a> = &'a dyn Fn(&MirOp, &[ConstData]) -> Result<Vec<ConstData>, String>;

/// Largest tensor (in elements) that folding will materialize.
pub const FOLD_LIMIT_ELEMS: usize = 1 << 26;

/// Copies `g` node by node; `step(out, node, mapped inputs, value map)` may emit a replacement for the
/// node (its outputs), or `None` to copy it as is.
pub(crate) fn rebuild(g: &Mir, mut step: impl FnMut(&mut Mir, usize, &[ValueId], &[Option<ValueId>]) -> Option<Vec<ValueId>>) -> Mir {
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
        let outs = match step(&mut out, ni, &ins, &map) {
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
    out.state = g.state.clone();
    out.bounded = g.bounded.clone();
    out
}

/// The whole constant pass as every target runs it: gathers moved below constant chains
/// ([`sink_gathers`]), then folding, then per-channel affine ops (BatchNormalization) folded into the
/// convolutions before them ([`fold_conv_affine`], whose new weights are folded in turn), the chains
/// left collapsed into one `mul` and one `add` ([`collapse_affine_chains`]), 1-D convolutions as
/// 2-D ones over a row ([`conv1d_as_2d`]), and elementwise ops computed at the size their operands
/// vary over, broadcast after ([`narrow_broadcasts`]: an attention mask built at the scores' size), with
/// dead code removed before and after.
pub fn simplify(g: &Mir, eval: Evaluator) -> Mir {
    let folded = fold(&dce(&sink_gathers(g)), eval);
    let folded = match fold_conv_affine(&folded) {
        Some(g) => dce(&fold(&g, eval)),
        None => dce(&folded),
    };
    let folded = match collapse_affine_chains(&folded) {
        Some(g) => dce(&fold(&g, eval)),
        None => folded,
    };
    let folded = match conv1d_as_2d(&folded) {
        Some(g) => dce(&fold(&g, eval)),
        None => folded,
    };
    dce(&narrow_broadcasts(&folded))
}

/// Folds constant subgraphs. Nodes the evaluator rejects are kept as they are.
pub fn fold(g: &Mir, eval: Evaluator) -> Mir {
    fold_only(g, eval, &|_| true)
}

/// [`fold`] restricted to the nodes whose op `which` accepts (e.g. only `quantize` of a constant
/// weight, so a QDQ model's other dequantized int8 constants stay int8).
pub fn fold_only(g: &Mir, eval: Evaluator, which: &dyn Fn(&MirOp) -> bool) -> Mir {
    rebuild(g, |out, ni, ins, _| {
        let n = &g.nodes[ni];
        if !which(&n.op) {
            return None;
        }
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
    out.state = g.state.clone();
    out.bounded = g.bounded.clone();
    out
}

/// Moves a row gather below the constant elementwise chain that feeds it: `gather(mul(cast(W), s), ids)`
/// becomes `mul(cast(gather(W, ids)), gather(s, ids))`. Folding would otherwise materialize the whole
/// dequantized table (MiniLM's int8 word embeddings: 30522×384 f32, 47 MB of the 90 MB of weights)
/// when a run reads a few rows of it; after the move the table stays int8 and only the gathered rows are
/// converted, in the gather's kernel. Applies to axis-0 gathers whose data is computed only from
/// constants by unary, cast and binary ops, each value used once, and only when the gathered result is
/// smaller than the table. Operands that do not vary along axis 0 (rank below the table's, or a leading
/// dim of 1) are kept as they are; the result is the same values in the same order.
pub fn sink_gathers(g: &Mir) -> Mir {
    let uses = g.use_counts();
    let fixed = |v: ValueId| g.ty(v).shape.as_fixed();
    // Can `v` (shape with leading dim `rows`) be gathered through? Leaves are constants.
    fn through(g: &Mir, uses: &[u32], v: ValueId, rows: u64) -> bool {
        if g.const_data(v).is_some() {
            return true;
        }
        let Some(n) = g.producer(v) else { return false };
        let n = g.node(n);
        if uses[v.index()] != 1 || !matches!(n.op, MirOp::Unary(_) | MirOp::Cast { .. } | MirOp::Binary(_)) {
            return false;
        }
        let rank = g.ty(v).shape.rank();
        n.inputs.iter().all(|&u| {
            let s = &g.ty(u).shape;
            match s.dims().first() {
                _ if s.rank() < rank => true,
                Some(Dim::Fixed(1)) => true,
                Some(Dim::Fixed(d)) if s.rank() == rank && *d == rows => through(g, uses, u, rows),
                _ => false,
            }
        })
    }
    // Emits the gathered chain into `out`; `map` holds the already copied values of `g`. The new
    // gathers carry the original gather's node name.
    fn emit(g: &Mir, out: &mut Mir, map: &[Option<ValueId>], v: ValueId, ids: ValueId, rows: u64, name: &str) -> Option<ValueId> {
        let rank = g.ty(v).shape.rank();
        if g.const_data(v).is_some() {
            return out.add1(name, MirOp::Gather { axis: 0 }, &[map[v.index()]?, ids]).ok();
        }
        let n = g.node(g.producer(v)?);
        let mut ins = Vec::with_capacity(n.inputs.len());
        for &u in &n.inputs {
            let s = &g.ty(u).shape;
            let varies = s.rank() == rank && s.dims().first() == Some(&Dim::Fixed(rows)) && rows != 1;
            ins.push(if varies { emit(g, out, map, u, ids, rows, name)? } else { map[u.index()]? });
        }
        out.add1(&n.name, n.op.clone(), &ins).ok()
    }
    rebuild(g, |out, ni, _, map| {
        let n = &g.nodes[ni];
        let MirOp::Gather { axis: 0 } = n.op else { return None };
        let (data, ids) = (n.inputs[0], n.inputs[1]);
        g.const_data(data).is_none().then_some(())?;
        let table = fixed(data)?;
        let rows = *table.first()? as u64;
        let gathered: usize = fixed(n.outputs[0])?.iter().product();
        if rows < 2 || gathered >= table.iter().product::<usize>() || !through(g, &uses, data, rows) {
            return None;
        }
        let v = emit(g, out, map, data, map[ids.index()]?, rows, &n.name)?;
        (out.ty(v) == g.ty(n.outputs[0])).then(|| vec![v])
    })
}
