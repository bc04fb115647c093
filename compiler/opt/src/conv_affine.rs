//! Per-output-channel affine ops folded into the convolution before them: BatchNormalization at
//! inference (imported as `sub` mean, `div` √(var+ε), `mul` scale, `add` bias — constants after
//! folding) and any other `add` / `sub` / `mul` / `div` of a per-channel constant (shape `[M,1,1]`,
//! `[1,M,1,1]`, or one element) on a float convolution's output becomes part of the convolution's
//! weights and bias: `mul`/`div` by k scale both (the weight along its output-channel axis),
//! `add`/`sub` k shift the bias. The pass only restructures the graph — the new weight and bias are
//! `reshape`/`mul`/`add`… nodes on the constants — and the caller's constant folding evaluates them
//! with the evaluator it is given (the optimizer owns no numerics). Only chains whose every
//! intermediate value has one use and is no graph output are folded, with the constant on either side
//! of `add`/`mul` and on the right of `sub`/`div` (a divisor with a zero is left as it is). The chains
//! no convolution absorbs (after a concat or a pool, or a convolution whose weight is no constant) are
//! collapsed into one `mul` and one `add` instead ([`collapse_affine_chains`]).

use crate::fold::rebuild;
use rlx_ir::{BinaryOp, Blob, ConstData, DType, Dim, Mir, MirOp, ValueId};
use std::collections::BTreeMap;

/// One folded op: the binary op and the per-channel constant (a value of the source graph).
type Step = (BinaryOp, ValueId);

/// Folds per-output-channel affine chains into the float convolutions they follow (see the module doc).
/// Run constant folding afterwards to turn the new weight and bias expressions into constants.
/// `None` when there is nothing to fold.
pub fn fold_conv_affine(g: &Mir) -> Option<Mir> {
    let uses = g.use_counts();
    let outs = g.output_mask();
    let consumers = g.consumers();
    // Conv node → its chain; chain node → (its conv node, the value it continues).
    let mut chains: BTreeMap<usize, Vec<Step>> = BTreeMap::new();
    let mut links: BTreeMap<usize, (usize, ValueId)> = BTreeMap::new();
    for (ni, n) in g.nodes.iter().enumerate() {
        let MirOp::Conv { .. } = n.op else { continue };
        let y = n.outputs[0];
        let ty = g.ty(y);
        let (w, wdt) = (n.inputs[1], g.ty(n.inputs[1]).dtype);
        if !matches!(ty.dtype, DType::F32 | DType::F64) || wdt != ty.dtype || g.const_data(w).is_none() {
            continue;
        }
        if n.inputs.get(2).is_some_and(|&b| g.const_data(b).is_none() || g.ty(b).dtype != ty.dtype) {
            continue;
        }
        let steps = chain(g, y, None, &uses, &outs, &consumers);
        for &(_, c, v) in &steps {
            links.insert(c, (ni, v));
        }
        let steps: Vec<Step> = steps.into_iter().map(|(s, _, _)| s).collect();
        if !steps.is_empty() {
            chains.insert(ni, steps);
        }
    }
    if chains.is_empty() {
        return None;
    }
    // Convolutions rewritten (a chain whose head could not be rewritten is copied as it is).
    let mut done = vec![false; g.nodes.len()];
    Some(rebuild(g, |out, ni, ins, map| {
        if let Some(&(head, v)) = links.get(&ni) {
            // A folded op: its result is the rewritten convolution's.
            return if done[head] { Some(vec![map[v.index()]?]) } else { None };
        }
        let steps = chains.get(&ni)?;
        let n = &g.nodes[ni];
        let (dt, wshape) = (g.ty(n.inputs[1]).dtype, g.ty(n.inputs[1]).shape.as_fixed()?);
        let m = wshape[0];
        let name = n.name.as_str();
        let mut w = ins[1];
        let mut b = match ins.get(2) {
            Some(&b) => b,
            None => out.add_const(None, ConstData::new(dt, vec![m], Blob::from_vec(vec![0u8; m * dt.size()?])).ok()?),
        };
        for &(op, k) in steps {
            let kn = g.ty(k).shape.numel()? as u64;
            let mut kw_shape = vec![Dim::Fixed(1); wshape.len()];
            kw_shape[0] = Dim::Fixed(kn);
            let kb = out.add1(name, MirOp::Reshape { shape: vec![Dim::Fixed(kn)] }, &[map[k.index()]?]).ok()?;
            if matches!(op, BinaryOp::Mul | BinaryOp::Div) {
                let kw = out.add1(name, MirOp::Reshape { shape: kw_shape }, &[map[k.index()]?]).ok()?;
                w = out.add1(name, MirOp::Binary(op), &[w, kw]).ok()?;
            }
            b = out.add1(name, MirOp::Binary(op), &[b, kb]).ok()?;
        }
        let v = out.add1(name, n.op.clone(), &[ins[0], w, b]).ok()?;
        done[ni] = out.ty(v) == g.ty(n.outputs[0]);
        done[ni].then(|| vec![v])
    }))
}

/// The per-channel affine chain on `y` (see the module doc): each step, the node applying it and the
/// value it continues. With `first`, the chain starts at that consumer of `y` (which may have others).
fn chain(g: &Mir, y: ValueId, first: Option<rlx_ir::NodeId>, uses: &[u32], outs: &[bool], consumers: &[Vec<rlx_ir::NodeId>]) -> Vec<(Step, usize, ValueId)> {
    let ty = g.ty(y);
    let mut steps = Vec::new();
    let Some(oshape) = ty.shape.as_fixed() else { return steps };
    let Some(&m) = oshape.get(1) else { return steps };
    if !matches!(ty.dtype, DType::F32 | DType::F64) {
        return steps;
    }
    let mut v = y;
    let mut first = first;
    while first.is_some() || (uses[v.index()] == 1 && !outs[v.index()]) {
        let Some(c) = first.take().or_else(|| consumers[v.index()].first().copied()) else { break };
        let cn = g.node(c);
        let MirOp::Binary(op) = cn.op else { break };
        let (a, b) = (cn.inputs[0], cn.inputs[1]);
        let k = match op {
            BinaryOp::Add | BinaryOp::Mul if a == v => b,
            BinaryOp::Add | BinaryOp::Mul => a,
            BinaryOp::Sub | BinaryOp::Div if a == v => b,
            _ => break,
        };
        if g.ty(cn.outputs[0]) != ty || !per_channel(g, k, oshape.len(), m) {
            break;
        }
        // y / 0 is ±inf or NaN by the sign of y; a folded weight / 0 would not keep that.
        if op == BinaryOp::Div && g.const_data(k).is_some_and(|c| c.to_f64_vec().contains(&0.0)) {
            break;
        }
        steps.push(((op, k), c.index(), v));
        v = cn.outputs[0];
    }
    steps
}

/// Per-channel affine chains that no convolution absorbed (a BatchNormalization after a concat or a
/// pool: DenseNet's BatchNormalization → Relu before each convolution, where the Relu keeps it out of
/// the convolution after it) collapsed into `x · A + B`, one `mul` and one `add` by per-channel
/// constants built from the chain's (`A` = the product of the scalings, `B` = the shifts carried
/// through the later scalings) — BatchNormalization's `sub`, `div`, `mul`, `add` (and a scale layer's
/// `mul`, `add` after it) become two ops and no division. Chains of one `mul` and one `add` or fewer
/// are left alone. Like [`fold_conv_affine`], the new constants are nodes the caller's folding
/// evaluates. `None` when there is nothing to collapse.
pub fn collapse_affine_chains(g: &Mir) -> Option<Mir> {
    let uses = g.use_counts();
    let outs = g.output_mask();
    let consumers = g.consumers();
    // Last node of a chain → (the chained value x, the steps); chain nodes before it → x.
    let mut last: BTreeMap<usize, (ValueId, Vec<Step>)> = BTreeMap::new();
    let mut inner: BTreeMap<usize, ValueId> = BTreeMap::new();
    for (ci, cn) in g.nodes.iter().enumerate() {
        // A chain's first op: a binary op by a constant, on a value no chain op produced.
        let MirOp::Binary(_) = cn.op else { continue };
        let x = if g.const_data(cn.inputs[0]).is_none() { cn.inputs[0] } else { cn.inputs[1] };
        if g.producer(x).is_some_and(|p| inner.contains_key(&p.index()) || last.contains_key(&p.index())) {
            continue;
        }
        let steps = chain(g, x, Some(rlx_ir::NodeId(ci as u32)), &uses, &outs, &consumers);
        let scales = steps.iter().filter(|((op, _), _, _)| matches!(op, BinaryOp::Mul | BinaryOp::Div)).count();
        let divides = steps.iter().any(|((op, _), _, _)| *op == BinaryOp::Div);
        if !divides && steps.len() <= scales.min(1) + (steps.len() - scales).min(1) {
            continue;
        }
        let Some(&(_, end, _)) = steps.last() else { continue };
        for &(_, c, _) in &steps[..steps.len() - 1] {
            inner.insert(c, x);
        }
        last.insert(end, (x, steps.into_iter().map(|(s, _, _)| s).collect()));
    }
    if last.is_empty() {
        return None;
    }
    Some(rebuild(g, |out, ni, _, map| {
        if let Some(&x) = inner.get(&ni) {
            return Some(vec![map[x.index()]?]);
        }
        let (x, steps) = last.get(&ni)?;
        let n = &g.nodes[ni];
        let ty = g.ty(*x);
        let (dt, shape) = (ty.dtype, ty.shape.as_fixed()?);
        let m = shape[1];
        let name = n.name.as_str();
        let mut a = out.add_const(None, ConstData::from_f64s(dt, vec![m], &vec![1.0; m]));
        let mut b = out.add_const(None, ConstData::from_f64s(dt, vec![m], &vec![0.0; m]));
        for &(op, k) in steps {
            let kn = g.ty(k).shape.numel()? as u64;
            let kv = out.add1(name, MirOp::Reshape { shape: vec![Dim::Fixed(kn)] }, &[map[k.index()]?]).ok()?;
            if matches!(op, BinaryOp::Mul | BinaryOp::Div) {
                a = out.add1(name, MirOp::Binary(op), &[a, kv]).ok()?;
            }
            b = out.add1(name, MirOp::Binary(op), &[b, kv]).ok()?;
        }
        // [M] → [M, 1, …] against x's [N, M, …].
        let bshape: Vec<Dim> = std::iter::once(Dim::Fixed(m as u64)).chain(shape[2..].iter().map(|_| Dim::Fixed(1))).collect();
        let a = out.add1(name, MirOp::Reshape { shape: bshape.clone() }, &[a]).ok()?;
        let b = out.add1(name, MirOp::Reshape { shape: bshape }, &[b]).ok()?;
        let ax = out.add1(name, MirOp::Binary(BinaryOp::Mul), &[map[x.index()]?, a]).ok()?;
        let y = out.add1(name, MirOp::Binary(BinaryOp::Add), &[ax, b]).ok()?;
        (out.ty(y) == g.ty(n.outputs[0])).then(|| vec![y])
    }))
}

/// Whether constant `k` broadcast against a rank-`rank` output varies at most along axis 1 (size `m`).
fn per_channel(g: &Mir, k: ValueId, rank: usize, m: usize) -> bool {
    let Some(c) = g.const_data(k) else { return false };
    if c.shape.len() > rank {
        return false;
    }
    let lead = rank - c.shape.len();
    c.shape.iter().enumerate().all(|(i, &d)| d == 1 || (i + lead == 1 && d == m))
}
