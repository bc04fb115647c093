//! Tensor parallelism (Megatron-style). A matmul by a constant weight whose activation is whole on
//! every rank is *column-parallel*: rank r keeps columns r·N/n.. of the weight, and its result is
//! split along the last axis. The split travels through the ops that can work on a part — elementwise
//! ops (a whole operand is cut to match, a broadcast one is left), reshapes (attention's head split and
//! merge: a split axis may be merged into, or cut out of, its neighbours), transposes, reductions over
//! other axes, matmuls over split batch axes (attention per head) — until a matmul by a constant
//! contracts the split axis: it is *row-parallel* (rank r keeps rows r·K/n.. of the weight) and its
//! partial sums are added over the ranks by one `all_reduce`. So a BERT or LLaMA block costs one
//! all-reduce after attention and one after the feed-forward layer.
//!
//! A column-parallel candidate whose split reaches something that needs the whole tensor (an op
//! without a rule, a graph output, a contraction with a weight that does not divide) is kept whole
//! instead; the pass repeats until every split closes, and each refusal is a note naming the node.

use super::{slice, Note, Shard, Sharded};
use rlx_ir::{ConstData, Def, Dim, Mir, MirOp, OpSet, ValueId};
use std::collections::{BTreeMap, BTreeSet};

/// How a value lives on the ranks: whole on each (`Rep`), or cut along `axis`: the axis's extent is
/// viewed as [outer, M] and each rank holds M/n of M for every outer index (outer = 1: a plain cut).
/// `src` are the column-parallel matmuls the cut comes from. `Poison`: past a refusal (trial runs).
#[derive(Clone, Debug, PartialEq)]
enum L {
    Rep,
    Split { axis: usize, outer: usize, src: BTreeSet<usize> },
    Poison,
}

/// A refusal: the node, why, and the candidates whose split reached it.
struct Refusal {
    node: usize,
    why: String,
    src: BTreeSet<usize>,
}

pub(super) fn tp(g: &Mir, n: usize) -> Result<Sharded, String> {
    let mut notes = Vec::new();
    let mut allowed: BTreeSet<usize> = BTreeSet::new();
    for (i, node) in g.nodes.iter().enumerate() {
        if let Some((_, cols)) = weight_dims(g, i) {
            if cols % n == 0 {
                allowed.insert(i);
            } else if n > 1 {
                notes.push(Note { node: node.name.clone(), op: node.op.kind().into(), msg: format!("kept whole: its {cols} output columns do not divide into {n} ranks") });
            }
        }
    }
    let candidates = allowed.clone();
    let mut kept: BTreeMap<usize, String> = BTreeMap::new();
    loop {
        let (_, refusals) = build(g, n, 0, &allowed)?;
        if refusals.is_empty() {
            break;
        }
        for r in refusals {
            let at = &g.nodes[r.node];
            for s in r.src {
                if allowed.remove(&s) {
                    kept.insert(s, format!("kept whole: its split reaches node '{}' ({}), which {}", at.name, at.op.kind(), r.why));
                }
            }
        }
    }
    for (s, msg) in kept {
        notes.push(Note { node: g.nodes[s].name.clone(), op: g.nodes[s].op.kind().into(), msg });
    }
    if n > 1 && allowed.is_empty() {
        let why = if candidates.is_empty() && notes.is_empty() { "no matmul by a constant weight".to_string() } else { notes.iter().map(|x| format!("\n  node '{}' ({}): {}", x.node, x.op, x.msg)).collect() };
        return Err(format!("--shard tp={n}: nothing in the model splits {n} ways: {why}"));
    }
    let mut ranks = Vec::with_capacity(n);
    for r in 0..n {
        let (m, refusals) = build(g, n, r, &allowed)?;
        if let Some(x) = refusals.first() {
            return Err(format!("--shard tp={n}: internal error: node '{}' refused after the fixed point: {}", g.nodes[x.node].name, x.why));
        }
        ranks.push(m);
    }
    let outputs = vec![(0..g.outputs.len()).map(Some).collect(); n];
    let inputs = vec![(0..g.inputs.len()).collect(); n];
    Ok(Sharded { shard: Shard::Tp(n), ranks, notes, outputs, inputs })
}

/// (K, N) of a matmul by a constant weight: `matmul(x, W[K,N])` or `dequant_matmul(x, W[N,K])`.
fn weight_dims(g: &Mir, i: usize) -> Option<(usize, usize)> {
    let node = &g.nodes[i];
    let w = g.const_data(*node.inputs.get(1)?)?;
    if w.shape.len() != 2 || g.ty(node.inputs[0]).shape.rank() < 2 {
        return None;
    }
    match node.op {
        MirOp::MatMul => Some((w.shape[0], w.shape[1])),
        MirOp::DequantMatMul => Some((w.shape[1], w.shape[0])),
        _ => None,
    }
}

struct B<'a> {
    g: &'a Mir,
    n: usize,
    rank: usize,
    out: Mir,
    map: Vec<Option<(ValueId, L)>>,
    consts: BTreeMap<(usize, usize, usize, usize), ValueId>,
}

impl B<'_> {
    /// The rank's value of old value `v` (constants added on first use).
    fn get(&mut self, v: ValueId) -> Result<(ValueId, L), String> {
        if let Some(x) = &self.map[v.index()] {
            return Ok(x.clone());
        }
        match &self.g.value(v).def {
            Def::Const(c) => {
                let id = self.out.add_const(self.g.value(v).name.as_deref(), c.clone());
                self.map[v.index()] = Some((id, L::Rep));
                Ok((id, L::Rep))
            }
            _ => Err(format!("value {v} used before it is defined")),
        }
    }

    /// This rank's part of a whole value `v` (new id `id`) along `axis`: a constant is cut here, a
    /// computed value by a `slice` node.
    fn cut(&mut self, old: ValueId, id: ValueId, axis: usize, name: &str) -> Result<ValueId, String> {
        let full = self.out.ty(id).shape.as_fixed().ok_or("symbolic shape")?[axis];
        let part = full / self.n;
        let start = part * self.rank;
        if let Some(c) = self.g.const_data(old) {
            let key = (old.index(), axis, start, part);
            if let Some(&v) = self.consts.get(&key) {
                return Ok(v);
            }
            let cut = slice::along(c, axis, start, part)?;
            let v = self.out.add_const(self.g.value(old).name.as_deref(), cut);
            self.consts.insert(key, v);
            return Ok(v);
        }
        let op = MirOp::Slice { axes: vec![axis], starts: vec![start as i64], ends: vec![(start + part) as i64], steps: vec![1] };
        self.out.add1(&format!("{name}/part"), op, &[id])
    }

    fn weight(&mut self, old: ValueId, w: ConstData) -> ValueId {
        self.out.add_const(self.g.value(old).name.as_deref(), w)
    }
}

/// Rank `rank`'s graph with the candidates in `allowed` column-parallel, and every refusal met.
fn build(g: &Mir, n: usize, rank: usize, allowed: &BTreeSet<usize>) -> Result<(Mir, Vec<Refusal>), String> {
    let mut b = B { g, n, rank, out: Mir::new(), map: vec![None; g.values.len()], consts: BTreeMap::new() };
    for &i in &g.inputs {
        let v = g.value(i);
        let id = b.out.add_input(v.name.as_deref().unwrap_or(""), v.ty.clone());
        b.map[i.index()] = Some((id, L::Rep));
    }
    let mut refusals = Vec::new();
    for (ni, node) in g.nodes.iter().enumerate() {
        let mut ins = Vec::with_capacity(node.inputs.len());
        for &i in &node.inputs {
            ins.push(b.get(i)?);
        }
        let err = |m: String| format!("node '{}' ({}): {m}", node.name, node.op.kind());
        let poison = ins.iter().any(|(_, l)| *l == L::Poison);
        let split = ins.iter().any(|(_, l)| matches!(l, L::Split { .. }));
        let outs: Vec<(ValueId, L)> = if poison {
            node.outputs.iter().map(|_| (ValueId(u32::MAX), L::Poison)).collect()
        } else if !split && !allowed.contains(&ni) {
            let ids: Vec<ValueId> = ins.iter().map(|x| x.0).collect();
            let o = b.out.add_node(&node.name, node.op.clone(), &ids).map_err(err)?;
            o.into_iter().map(|v| (v, L::Rep)).collect()
        } else {
            match rule(&mut b, ni, &ins, allowed).map_err(err)? {
                Ok(o) => o,
                Err((why, src)) => {
                    refusals.push(Refusal { node: ni, why, src });
                    node.outputs.iter().map(|_| (ValueId(u32::MAX), L::Poison)).collect()
                }
            }
        };
        for (&o, (id, l)) in node.outputs.iter().zip(outs) {
            if id != ValueId(u32::MAX) {
                b.out.values[id.index()].name = g.value(o).name.clone();
            }
            b.map[o.index()] = Some((id, l));
        }
    }
    let mut outputs = Vec::new();
    for &o in &g.outputs {
        let (id, l) = b.get(o)?;
        match l {
            L::Rep => outputs.push(id),
            L::Split { src, .. } => {
                let node = g.producer(o).map_or(0, |p| p.index());
                refusals.push(Refusal { node, why: "is a graph output (returned whole)".into(), src });
            }
            L::Poison => {}
        }
    }
    b.out.outputs = outputs;
    Ok((b.out, refusals))
}

type Rule = Result<Vec<(ValueId, L)>, (String, BTreeSet<usize>)>;

fn srcs(ins: &[(ValueId, L)]) -> BTreeSet<usize> {
    let mut s = BTreeSet::new();
    for (_, l) in ins {
        if let L::Split { src, .. } = l {
            s.extend(src.iter().copied());
        }
    }
    s
}

/// The rule for node `ni` with at least one split input (or a column-parallel candidate).
fn rule(b: &mut B, ni: usize, ins: &[(ValueId, L)], allowed: &BTreeSet<usize>) -> Result<Rule, String> {
    let g = b.g;
    let node = &g.nodes[ni];
    let n = b.n;
    let r = b.rank;
    let refuse = |why: &str| Ok(Err((why.to_string(), srcs(ins))));
    let out_shape = |k: usize| g.ty(node.outputs[k]).shape.as_fixed().unwrap_or_default();
    // Matmuls by a constant weight: column-parallel (whole activation) or row-parallel (split K).
    if let Some((k, cols)) = weight_dims(g, ni) {
        let w = g.const_data(node.inputs[1]).expect("a weight").clone();
        let dequant = node.op == MirOp::DequantMatMul;
        let xr = g.ty(node.inputs[0]).shape.rank();
        match &ins[0].1 {
            L::Rep if allowed.contains(&ni) => {
                let part = cols / n;
                let wr = if dequant { slice::rows(&w, part * r, part)? } else { slice::along(&w, 1, part * r, part)? };
                let wv = b.weight(node.inputs[1], wr);
                let y = b.out.add1(&node.name, node.op.clone(), &[ins[0].0, wv])?;
                return Ok(Ok(vec![(y, L::Split { axis: out_shape(0).len() - 1, outer: 1, src: BTreeSet::from([ni]) })]));
            }
            L::Split { axis, outer: 1, .. } if *axis == xr - 1 => {
                if k % n != 0 {
                    return refuse(&format!("contracts {k} columns, which do not divide into {n} ranks"));
                }
                let part = k / n;
                let wr = if dequant {
                    match slice::cols(&w, part * r, part) {
                        Ok(c) => c,
                        Err(e) => return refuse(&format!("cannot cut its weight: {e}")),
                    }
                } else {
                    slice::rows(&w, part * r, part)?
                };
                let wv = b.weight(node.inputs[1], wr);
                let y = b.out.add1(&format!("{}/partial", node.name), node.op.clone(), &[ins[0].0, wv])?;
                let s = b.out.add1(&node.name, MirOp::AllReduce { ranks: n }, &[y])?;
                return Ok(Ok(vec![(s, L::Rep)]));
            }
            _ => return refuse("needs its activation whole or split along the contracted axis"),
        }
    }
    let one = |b: &mut B, op: MirOp, ids: &[ValueId], l: L| -> Result<Rule, String> {
        let y = b.out.add1(&node.name, op, ids)?;
        Ok(Ok(vec![(y, l)]))
    };
    match &node.op {
        MirOp::Unary(_) | MirOp::Binary(_) | MirOp::Where | MirOp::Cast { .. } => {
            let full = out_shape(0);
            let rank = full.len();
            // The split (in output coordinates) all split operands share.
            let mut at: Option<(usize, usize)> = None;
            for (v, l) in ins {
                if let L::Split { axis, outer, .. } = l {
                    let a = axis + rank - b.out.ty(*v).shape.rank();
                    if at.is_some_and(|x| x != (a, *outer)) {
                        return refuse("combines operands split differently");
                    }
                    at = Some((a, *outer));
                }
            }
            let (axis, outer) = at.expect("a split operand");
            let mut ids = Vec::new();
            for (k, (v, l)) in ins.iter().enumerate() {
                let vr = b.out.ty(*v).shape.rank();
                if *l != L::Rep || vr + axis < rank {
                    ids.push(*v);
                    continue;
                }
                let a = axis + vr - rank;
                let ext = b.out.ty(*v).shape.as_fixed().unwrap_or_default()[a];
                if ext == 1 {
                    ids.push(*v);
                } else if ext == full[axis] && outer == 1 {
                    ids.push(b.cut(node.inputs[k], *v, a, &node.name)?);
                } else {
                    return refuse("has a whole operand that does not match the split");
                }
            }
            one(b, node.op.clone(), &ids, L::Split { axis, outer, src: srcs(ins) })
        }
        MirOp::Reshape { .. } => {
            let L::Split { axis, outer, src } = ins[0].1.clone() else { unreachable!("a split input") };
            let from = g.ty(node.inputs[0]).shape.as_fixed().unwrap_or_default();
            let to = out_shape(0);
            let Some((t, o)) = reshape_split(&from, &to, axis, outer, n) else {
                return refuse("reshapes the split axis across rank boundaries");
            };
            let mut local: Vec<Dim> = to.iter().map(|&d| Dim::Fixed(d as u64)).collect();
            local[t] = Dim::Fixed((to[t] / n) as u64);
            one(b, MirOp::Reshape { shape: local }, &[ins[0].0], L::Split { axis: t, outer: o, src })
        }
        MirOp::Transpose { perm } => {
            let L::Split { axis, outer, src } = ins[0].1.clone() else { unreachable!("a split input") };
            let a = perm.iter().position(|&p| p == axis).expect("a permutation");
            one(b, node.op.clone(), &[ins[0].0], L::Split { axis: a, outer, src })
        }
        MirOp::Reduce { axes, keepdims, .. } => {
            let L::Split { axis, outer, src } = ins[0].1.clone() else { unreachable!("a split input") };
            if axes.contains(&axis) {
                return refuse("reduces over the split axis");
            }
            let a = if *keepdims { axis } else { axis - axes.iter().filter(|&&x| x < axis).count() };
            one(b, node.op.clone(), &[ins[0].0], L::Split { axis: a, outer, src })
        }
        MirOp::MatMul => {
            // Attention per head: both operands split along the same batch axis.
            let rank = out_shape(0).len();
            let ranks = [g.ty(node.inputs[0]).shape.rank(), g.ty(node.inputs[1]).shape.rank()];
            if ranks.iter().any(|&x| x < 3) {
                return refuse("is a matmul whose split is not along a batch axis");
            }
            let mut at = None;
            for ((_, l), &vr) in ins.iter().zip(&ranks) {
                match l {
                    L::Split { axis, outer, .. } if axis + 2 < vr => {
                        let a = axis + rank - vr;
                        if at.is_some_and(|x| x != (a, *outer)) {
                            return refuse("multiplies operands split differently");
                        }
                        at = Some((a, *outer));
                    }
                    L::Split { .. } => return refuse("is a matmul whose split is not along a batch axis"),
                    _ => {}
                }
            }
            let (axis, outer) = at.expect("a split operand");
            for ((v, l), &vr) in ins.iter().zip(&ranks) {
                if *l == L::Rep && vr + axis >= rank && b.out.ty(*v).shape.as_fixed().unwrap_or_default()[axis + vr - rank] != 1 {
                    return refuse("multiplies a split operand by a whole one along a batch axis");
                }
            }
            one(b, MirOp::MatMul, &[ins[0].0, ins[1].0], L::Split { axis, outer, src: srcs(ins) })
        }
        _ => refuse("has no rule for a split operand"),
    }
}

/// Where a split of `from` along `axis` (outer `outer`) lands in `to`: (axis, outer), when each
/// rank's part is a relabeling of its own elements.
fn reshape_split(from: &[usize], to: &[usize], axis: usize, outer: usize, n: usize) -> Option<(usize, usize)> {
    let (mut i, mut j) = (0, 0);
    while i < from.len() || j < to.len() {
        let (si, sj) = (i, j);
        let (mut pa, mut pb) = (1usize, 1usize);
        if i < from.len() {
            pa *= from[i];
            i += 1;
        }
        if j < to.len() {
            pb *= to[j];
            j += 1;
        }
        while pa != pb {
            if pa < pb && i < from.len() {
                pa *= from[i];
                i += 1;
            } else if pb < pa && j < to.len() {
                pb *= to[j];
                j += 1;
            } else {
                return None;
            }
        }
        if !(si..i).contains(&axis) {
            continue;
        }
        let p_in: usize = from[si..axis].iter().product();
        let t_in: usize = from[axis + 1..i].iter().product();
        let a = p_in * outer;
        let m = from[axis] / outer;
        for t in sj..j {
            let p_out: usize = to[sj..t].iter().product();
            let t_out: usize = to[t + 1..j].iter().product();
            if p_out == 0 || a % p_out != 0 {
                continue;
            }
            let o = a / p_out;
            if o == 0 || to[t] % o != 0 {
                continue;
            }
            let mt = to[t] / o;
            if mt * t_out == m * t_in && ((m / n) * t_in) % t_out.max(1) == 0 && mt % n == 0 {
                return Some((t, o));
            }
        }
        return None;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::reshape_split;

    #[test]
    fn head_split_and_merge() {
        assert_eq!(reshape_split(&[2, 16, 384], &[2, 16, 12, 32], 2, 1, 2), Some((2, 1)));
        assert_eq!(reshape_split(&[2, 12, 16, 32], &[24, 16, 32], 1, 1, 2), Some((0, 2)));
        assert_eq!(reshape_split(&[24, 32, 16], &[2, 12, 32, 16], 0, 2, 2), Some((1, 1)));
        assert_eq!(reshape_split(&[2, 16, 12, 32], &[2, 16, 384], 2, 1, 2), Some((2, 1)));
        // 12 heads over 5 ranks: no whole heads per rank.
        assert_eq!(reshape_split(&[2, 16, 380], &[2, 16, 10, 38], 2, 1, 4), None);
    }
}
