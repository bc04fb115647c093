//! Tensor parallelism (Megatron-style). A matmul by a constant weight whose activation is whole on
//! every rank is *column-parallel*: rank r keeps columns r·N/n.. of the weight, and its result is
//! split along the last axis. The split travels through the ops that can work on a part — elementwise
//! ops (a whole operand is cut to match, a broadcast one is left), reshapes (attention's head split and
//! merge: a split axis may be merged into, or cut out of, its neighbours), transposes, reductions over
//! other axes, slices and concatenations along other axes (RoPE's halves and pairs), matmuls over split
//! batch axes (attention per head), a cache's `write_rows` — until a matmul by a constant contracts the
//! split axis: it is *row-parallel* (rank r keeps rows r·K/n.. of the weight) and its partial sums are
//! added over the ranks by one `all_reduce`. So a BERT or LLaMA block costs one all-reduce after
//! attention and one after the feed-forward layer.
//!
//! A column-parallel candidate whose split reaches something that needs the whole tensor (an op
//! without a rule, a graph output, a contraction with a weight that does not divide) is tried again in
//! fewer parts, each held by several ranks (`cut.rs`: grouped-query attention's key/value heads when
//! they do not divide into the ranks: every rank keeps the heads its query heads read), and kept whole
//! when one part is all that is left; the pass repeats until every split closes, and each refusal is a
//! note naming the node. State (a KV cache) written by `write_rows` from a split value is held split
//! the same way: each rank's state input and output are its part.

use super::cut::{through_reshape, Cut};
use super::{slice, Note, Part, Shard, Sharded};
use rlx_ir::{ConstData, Def, Dim, Mir, MirOp, OpSet, TensorType, ValueId};
use std::collections::{BTreeMap, BTreeSet};

/// How a value lives on the ranks: whole on each (`Rep`), or cut (`cut.rs`). `src` are the
/// column-parallel matmuls the cut comes from, and cut state inputs (input k as node count + k). `Poison`: past a refusal (trial runs).
#[derive(Clone, Debug, PartialEq)]
enum L {
    Rep,
    Split { cut: Cut, src: BTreeSet<usize> },
    Poison,
}

/// A refusal: the node, why, and the candidates whose split reached it.
struct Refusal {
    node: usize,
    why: String,
    src: BTreeSet<usize>,
}

/// What a trial build met: refusals, and state inputs that a split value is written into (input index → cut).
struct Trial {
    refusals: Vec<Refusal>,
    state_wants: BTreeMap<usize, Cut>,
}

pub(super) fn tp(g: &Mir, n: usize) -> Result<Sharded, String> {
    let mut notes = Vec::new();
    // Candidate → how many ranks hold each of its parts (1: a plain n-way split).
    let mut allowed: BTreeMap<usize, usize> = BTreeMap::new();
    for (i, node) in g.nodes.iter().enumerate() {
        if let Some((_, cols)) = weight_dims(g, i) {
            if cols % n == 0 {
                allowed.insert(i, 1);
            } else if n > 1 {
                notes.push(Note { node: node.name.clone(), op: node.op.kind().into(), msg: format!("kept whole: its {cols} output columns do not divide into {n} ranks") });
            }
        }
    }
    let candidates = allowed.clone();
    let mut kept: BTreeMap<usize, String> = BTreeMap::new();
    // State inputs cut like the rows written into them, and those that a refusal sent back whole.
    let mut state: BTreeMap<usize, Cut> = BTreeMap::new();
    let mut whole: BTreeSet<usize> = BTreeSet::new();
    loop {
        let (_, t) = build(g, n, 0, &allowed, &state, &whole)?;
        if t.refusals.is_empty() && t.state_wants.is_empty() {
            break;
        }
        for (k, c) in t.state_wants {
            state.insert(k, c);
        }
        // Each candidate steps once per round, at its first refusal.
        let mut stepped = BTreeSet::new();
        for r in t.refusals {
            let at = &g.nodes[r.node];
            for s in r.src {
                if !stepped.insert(s) {
                    continue;
                }
                // A state input's cut (its source is numbered after the nodes): the state stays whole.
                if let Some(k) = s.checked_sub(g.nodes.len()) {
                    state.remove(&k);
                    whole.insert(k);
                    let name = g.value(g.inputs[k]).name.clone().unwrap_or_default();
                    notes.push(Note { node: name, op: "state".into(), msg: format!("kept whole: its split reaches node '{}' ({}), which {}", at.name, at.op.kind(), r.why) });
                    continue;
                }
                let Some(&rep) = allowed.get(&s) else { continue };
                let cols = weight_dims(g, s).map_or(0, |x| x.1);
                let why = format!("its split reaches node '{}' ({}), which {}", at.name, at.op.kind(), r.why);
                // Fewer parts, each on more ranks; one part is the whole weight: kept whole.
                match (rep + 1..n).find(|&d| n % d == 0 && cols % (n / d) == 0) {
                    Some(d) => {
                        allowed.insert(s, d);
                        kept.insert(s, format!("{} parts, each held by {d} ranks: at {} parts {why}", n / d, n / rep));
                    }
                    None => {
                        allowed.remove(&s);
                        kept.insert(s, format!("kept whole: {why}"));
                    }
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
    let mut parts = Vec::with_capacity(n);
    for r in 0..n {
        let (m, t) = build(g, n, r, &allowed, &state, &whole)?;
        if let Some(x) = t.refusals.first() {
            return Err(format!("--shard tp={n}: internal error: node '{}' refused after the fixed point: {}", g.nodes[x.node].name, x.why));
        }
        ranks.push(m);
        let mine: Vec<Option<Part>> = (0..g.inputs.len())
            .map(|k| {
                state.get(&k).map(|c| {
                    let full = g.ty(g.inputs[k]).shape.as_fixed().unwrap_or_default();
                    let len = full[c.axis] / c.parts(n);
                    Part { axis: c.axis, start: len * (r / c.rep), len }
                })
            })
            .collect();
        parts.push(mine);
    }
    let outputs = vec![(0..g.outputs.len()).map(Some).collect(); n];
    let inputs = vec![(0..g.inputs.len()).collect(); n];
    Ok(Sharded { shard: Shard::Tp(n), ranks, notes, outputs, inputs, parts })
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

    /// Part `part` of `parts` of a whole value `v` (new id `id`) along `axis`: a constant is cut here,
    /// a computed value by a `slice` node.
    fn cut(&mut self, old: ValueId, id: ValueId, axis: usize, parts: usize, part: usize, name: &str) -> Result<ValueId, String> {
        let full = self.out.ty(id).shape.as_fixed().ok_or("symbolic shape")?[axis];
        let len = full / parts;
        let start = len * part;
        if let Some(c) = self.g.const_data(old) {
            let key = (old.index(), axis, start, len);
            if let Some(&v) = self.consts.get(&key) {
                return Ok(v);
            }
            let cut = slice::along(c, axis, start, len)?;
            let v = self.out.add_const(self.g.value(old).name.as_deref(), cut);
            self.consts.insert(key, v);
            return Ok(v);
        }
        let op = MirOp::Slice { axes: vec![axis], starts: vec![start as i64], ends: vec![(start + len) as i64], steps: vec![1] };
        self.out.add1(&format!("{name}/part"), op, &[id])
    }

    fn weight(&mut self, old: ValueId, w: ConstData) -> ValueId {
        self.out.add_const(self.g.value(old).name.as_deref(), w)
    }
}

/// Rank `rank`'s graph with the candidates in `allowed` column-parallel and the state inputs in
/// `state` cut, and every refusal met.
fn build(g: &Mir, n: usize, rank: usize, allowed: &BTreeMap<usize, usize>, state: &BTreeMap<usize, Cut>, whole: &BTreeSet<usize>) -> Result<(Mir, Trial), String> {
    let mut b = B { g, n, rank, out: Mir::new(), map: vec![None; g.values.len()], consts: BTreeMap::new() };
    for (k, &i) in g.inputs.iter().enumerate() {
        let v = g.value(i);
        let (ty, l) = match state.get(&k) {
            Some(c) => {
                let full = v.ty.shape.as_fixed().ok_or("symbolic state shape")?;
                (TensorType::fixed(v.ty.dtype, &c.local(&full, n)), L::Split { cut: *c, src: BTreeSet::from([g.nodes.len() + k]) })
            }
            None => (v.ty.clone(), L::Rep),
        };
        let id = b.out.add_input(v.name.as_deref().unwrap_or(""), ty);
        b.map[i.index()] = Some((id, l));
    }
    let mut t = Trial { refusals: Vec::new(), state_wants: BTreeMap::new() };
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
        } else if !split && !allowed.contains_key(&ni) {
            let ids: Vec<ValueId> = ins.iter().map(|x| x.0).collect();
            let o = b.out.add_node(&node.name, node.op.clone(), &ids).map_err(err)?;
            o.into_iter().map(|v| (v, L::Rep)).collect()
        } else {
            match rule(&mut b, ni, &ins, allowed, whole, &mut t.state_wants).map_err(err)? {
                Ok(o) => o,
                Err((why, src)) => {
                    if !why.is_empty() {
                        t.refusals.push(Refusal { node: ni, why, src });
                    }
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
    for (k, &o) in g.outputs.iter().enumerate() {
        let (id, l) = b.get(o)?;
        let held = g.state.iter().find(|s| s.output as usize == k).and_then(|s| state.get(&(s.input as usize)));
        match l {
            L::Rep if held.is_none() => outputs.push(id),
            L::Split { cut, .. } if held == Some(&cut) => outputs.push(id),
            L::Rep | L::Split { .. } => {
                let node = g.producer(o).map_or(0, |p| p.index());
                let src = if let L::Split { src, .. } = l { src } else { BTreeSet::new() };
                let why = if held.is_some() { "is a state output held differently from its state input" } else { "is a graph output (returned whole)" };
                t.refusals.push(Refusal { node, why: why.into(), src });
            }
            L::Poison => {}
        }
    }
    b.out.outputs = outputs;
    if b.out.outputs.len() == g.outputs.len() {
        b.out.state = g.state.clone();
    }
    Ok((b.out, t))
}

/// A refusal (why, the candidates it reaches); an empty `why`: a state input must be cut first (no note).
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

/// The cut all split operands share, in output coordinates (rank `rank`), and each operand as the
/// rank holds it (a whole operand cut to match, a broadcast one left); `Err`: why not. A replicated
/// operand (no `sub`) joins a `sub` one when it broadcasts over the sub-split axis.
fn combine(b: &mut B, node: &str, olds: &[ValueId], ins: &[(ValueId, L)], full: &[usize]) -> Result<Result<(Cut, Vec<ValueId>), String>, String> {
    let rank = full.len();
    let mut at: Option<Cut> = None;
    for (v, l) in ins {
        if let L::Split { cut, .. } = l {
            let c = Cut { axis: cut.axis + rank - b.out.ty(*v).shape.rank(), ..*cut };
            at = Some(match at {
                None => c,
                Some(a) if a == c => a,
                Some(a) if Cut { sub: c.sub, ..a } == c => Cut { sub: true, ..a },
                Some(_) => return Ok(Err("combines operands split differently".into())),
            });
        }
    }
    let c = at.expect("a split operand");
    let (parts, part, s) = (c.parts(b.n), b.rank / c.rep, b.rank % c.rep);
    let mut ids = Vec::new();
    for (k, (v, l)) in ins.iter().enumerate() {
        let vr = b.out.ty(*v).shape.rank();
        let local = b.out.ty(*v).shape.as_fixed().unwrap_or_default();
        let ext = |ax: usize| if vr + ax >= rank { local[ax + vr - rank] } else { 1 };
        match l {
            L::Split { cut, .. } => {
                if c.sub && !cut.sub && ext(c.axis + 1) != 1 {
                    return Ok(Err("combines a replicated operand with a sub-split one along the sub-split axis".into()));
                }
                ids.push(*v);
            }
            _ => {
                let mut id = *v;
                if ext(c.axis) != 1 {
                    if ext(c.axis) != full[c.axis] || c.outer != 1 {
                        return Ok(Err("has a whole operand that does not match the split".into()));
                    }
                    id = b.cut(olds[k], id, c.axis + vr - rank, parts, part, node)?;
                }
                if c.sub && ext(c.axis + 1) != 1 {
                    if ext(c.axis) != 1 || ext(c.axis + 1) != full[c.axis + 1] {
                        return Ok(Err("has a whole operand that does not match the split".into()));
                    }
                    id = b.cut(olds[k], id, c.axis + 1 + vr - rank, c.rep, s, node)?;
                }
                ids.push(id);
            }
        }
    }
    Ok(Ok((c, ids)))
}

/// The rule for node `ni` with at least one split input (or a column-parallel candidate).
fn rule(b: &mut B, ni: usize, ins: &[(ValueId, L)], allowed: &BTreeMap<usize, usize>, whole: &BTreeSet<usize>, wants: &mut BTreeMap<usize, Cut>) -> Result<Rule, String> {
    let g = b.g;
    let node = &g.nodes[ni];
    let n = b.n;
    let r = b.rank;
    let refuse = |why: &str| Ok(Err((why.to_string(), srcs(ins))));
    let out_shape = |k: usize| g.ty(node.outputs[k]).shape.as_fixed().unwrap_or_default();
    // The one split input's cut and sources (ops with one data input).
    let split0 = || match &ins[0].1 {
        L::Split { cut, src } => (*cut, src.clone()),
        _ => unreachable!("a split input"),
    };
    // Is axis `a` (or, for a sub cut, the axis after it) among `axes`?
    let touches = |c: &Cut, axes: &[usize]| axes.contains(&c.axis) || (c.sub && axes.contains(&(c.axis + 1)));
    // Matmuls by a constant weight: column-parallel (whole activation) or row-parallel (split K).
    if let Some((k, cols)) = weight_dims(g, ni) {
        let w = g.const_data(node.inputs[1]).expect("a weight").clone();
        let dequant = node.op == MirOp::DequantMatMul;
        let xr = g.ty(node.inputs[0]).shape.rank();
        match &ins[0].1 {
            L::Rep if allowed.contains_key(&ni) => {
                let rep = allowed[&ni];
                let parts = n / rep;
                let len = cols / parts;
                let start = len * (r / rep);
                let wr = if dequant { slice::rows(&w, start, len)? } else { slice::along(&w, 1, start, len)? };
                let wv = b.weight(node.inputs[1], wr);
                let y = b.out.add1(&node.name, node.op.clone(), &[ins[0].0, wv])?;
                let cut = Cut { rep, ..Cut::plain(out_shape(0).len() - 1) };
                return Ok(Ok(vec![(y, L::Split { cut, src: BTreeSet::from([ni]) })]));
            }
            L::Split { cut, .. } if cut.axis == xr - 1 && cut.outer == 1 && cut.rep == 1 && !cut.sub => {
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
            L::Split { cut, .. } if cut.rep > 1 || cut.sub => return refuse("contracts a split whose parts are held by several ranks each (a row-parallel sum would count them more than once)"),
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
            match combine(b, &node.name, &node.inputs, ins, &full)? {
                Ok((cut, ids)) => one(b, node.op.clone(), &ids, L::Split { cut, src: srcs(ins) }),
                Err(why) => refuse(&why),
            }
        }
        MirOp::Reshape { .. } => {
            let (c, src) = split0();
            let from = g.ty(node.inputs[0]).shape.as_fixed().unwrap_or_default();
            let to = out_shape(0);
            let Some(t) = through_reshape(&from, &to, c, n) else {
                return refuse("reshapes the split axis across rank boundaries");
            };
            let local: Vec<Dim> = t.local(&to, n).iter().map(|&d| Dim::Fixed(d as u64)).collect();
            one(b, MirOp::Reshape { shape: local }, &[ins[0].0], L::Split { cut: t, src })
        }
        MirOp::Transpose { perm } => {
            let (c, src) = split0();
            let a = perm.iter().position(|&p| p == c.axis).expect("a permutation");
            if c.sub && perm.get(a + 1) != Some(&(c.axis + 1)) {
                return refuse("moves a sub-split axis away from its split axis");
            }
            one(b, node.op.clone(), &[ins[0].0], L::Split { cut: Cut { axis: a, ..c }, src })
        }
        MirOp::Reduce { axes, keepdims, .. } => {
            let (c, src) = split0();
            if touches(&c, axes) {
                return refuse("reduces over the split axis");
            }
            let a = if *keepdims { c.axis } else { c.axis - axes.iter().filter(|&&x| x < c.axis).count() };
            one(b, node.op.clone(), &[ins[0].0], L::Split { cut: Cut { axis: a, ..c }, src })
        }
        MirOp::Slice { axes, .. } => {
            let (c, src) = split0();
            if touches(&c, axes) {
                return refuse("slices the split axis");
            }
            one(b, node.op.clone(), &[ins[0].0], L::Split { cut: c, src })
        }
        MirOp::Concat { axis } => {
            let first = ins.iter().find_map(|(_, l)| if let L::Split { cut, .. } = l { Some(*cut) } else { None }).expect("a split input");
            if touches(&first, &[*axis]) {
                return refuse("concatenates along the split axis");
            }
            if ins.iter().any(|(_, l)| !matches!(l, L::Split { cut, .. } if *cut == first)) {
                return refuse("concatenates operands split differently (or a whole one)");
            }
            let ids: Vec<ValueId> = ins.iter().map(|x| x.0).collect();
            one(b, node.op.clone(), &ids, L::Split { cut: first, src: srcs(ins) })
        }
        MirOp::WriteRows => {
            // write_rows(cache, rows, positions): the cache is cut as the rows written into it are.
            if !matches!(ins[2].1, L::Rep) {
                return refuse("writes at split positions");
            }
            match (&ins[0].1, &ins[1].1) {
                (L::Split { cut: a, .. }, L::Split { cut: c, .. }) if a == c => one(b, MirOp::WriteRows, &[ins[0].0, ins[1].0, ins[2].0], ins[0].1.clone()),
                (L::Split { cut, src }, L::Rep) if cut.axis > 0 && !cut.sub => {
                    let rows = b.cut(node.inputs[1], ins[1].0, cut.axis, cut.parts(n), r / cut.rep, &node.name)?;
                    one(b, MirOp::WriteRows, &[ins[0].0, rows, ins[2].0], L::Split { cut: *cut, src: src.clone() })
                }
                (_, L::Split { cut, .. }) if cut.axis > 0 && !cut.sub => match g.value(node.inputs[0]).def {
                    Def::Input(k) if g.state.iter().any(|s| s.input == k) && !whole.contains(&(k as usize)) => {
                        wants.insert(k as usize, *cut);
                        Ok(Err((String::new(), BTreeSet::new())))
                    }
                    _ => refuse("writes a split value into a tensor kept whole (no state input, or a state whose split reached a refusal)"),
                },
                _ => refuse("writes rows split differently from its cache"),
            }
        }
        MirOp::MatMul => {
            // Attention per head: operands split along the same batch axis.
            let full = out_shape(0);
            let ranks = [g.ty(node.inputs[0]).shape.rank(), g.ty(node.inputs[1]).shape.rank()];
            if ranks.iter().any(|&x| x < 3) {
                return refuse("is a matmul whose split is not along a batch axis");
            }
            for ((_, l), &vr) in ins.iter().zip(&ranks) {
                if let L::Split { cut, src } = l {
                    if cut.axis + 2 + usize::from(cut.sub) >= vr {
                        // Only this operand's candidates are at fault (e.g. one key/value head cut
                        // along head_dim), not the other operand's head split.
                        return Ok(Err(("is a matmul whose split is not along a batch axis".into(), src.clone())));
                    }
                }
            }
            match combine(b, &node.name, &node.inputs, ins, &full)? {
                Ok((cut, ids)) => one(b, MirOp::MatMul, &ids, L::Split { cut, src: srcs(ins) }),
                Err(why) => refuse(&why.replace("operand", "operand along a batch axis")),
            }
        }
        _ => refuse("has no rule for a split operand"),
    }
}
