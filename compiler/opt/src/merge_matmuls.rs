//! Matmuls reading the same left operand with constant right operands of one shape (a transformer
//! layer's Q, K and V projections of its LayerNorm output) merged into one, in one of two forms
//! ([`Form`]):
//!
//! - **Columns** (the CUDA target's default under f32 / tf32 from 1,024 rows): the G weights `[K, N]`
//!   concatenated into `[K, G·N]`, one plain matmul of the operand as it is (MiniLM: 1,152 columns, which
//!   takes the ordinary tiles and their fill rule); member i's result is the column slice `[i·N, (i +
//!   1)·N)` of the last axis. Such a slice is no view (its rows are strided): it costs no launch only
//!   where operand inlining reads it in place (`plan/fuse.rs`: a slice under a reshape on a single-use
//!   path into a matmul operand — attention's Q, K, V), so only members whose every reader path is
//!   reshapes, transposes and scalar scalings into a matmul operand merge. On the H200 (MiniLM seq 128,
//!   docs/benchmarks.md session 21): batch 8 f32 −3.0% / −3.4%, tf32 −2.5% / −1.2% against the three
//!   apart in the same rounds; batch 32 within ±2%; bf16 and batch 1 no faster (the three had run side
//!   by side as parallel branches of the graph).
//! - **Batched** (session 20; the CUDA target's `RLX_CUDA_MERGE_MATMULS=1`): the weights stacked into
//!   `[G, K, N]`, the operand `[…, K]` viewed as `[1, M, K]` (M the product of its leading dims), the
//!   product `[G, M, N]`; member i's result is its slice `[i..i+1]` along the leading axis (a view of the
//!   product, no copy) reshaped to the member's own shape. On the H200 MiniLM batch 1 took 58 → 46
//!   launches but only bf16 ran faster, 266 → 252 µs; f32 340 → 347, tf32 297 → 303, batch 8 / 32 2–9%
//!   slower — the batched product gets other tiles than the three apart.
//!
//! In both, members whose only reader is an `add` of a constant bias `[N]` merge with their biases
//! (concatenated or stacked, added to the product: the one matmul's epilogue, the slices replacing the
//! adds), the others without; a group of one is left alone. Only members whose result is read by
//! reshapes and transposes alone merge: an elementwise reader is the matmul's fused epilogue when it
//! stands alone, and would be a launch of its own on the merged product's slice.
//!
//! The pass only restructures the graph — the merged weights and biases are `reshape` / `concat` nodes
//! on the constants — and the caller folds them ([`crate::fold`]) with its evaluator. Kept as it is:
//! a group whose operand or weights are not of fixed shape, whose weights differ in shape or dtype from
//! each other or from the operand, non-float dtypes, and a member that is a graph output (its value
//! would then be a view). It is target-independent; no CPU target has been measured with it.

use crate::fold::rebuild;
use rlx_ir::{BinaryOp, DType, Dim, Mir, MirOp, ValueId};
use std::collections::BTreeMap;

/// One member: its matmul node, its bias `add` node and bias constant (when merged with bias).
struct Member {
    mm: usize,
    add: Option<(usize, ValueId)>,
}

/// The merged groups of `g` (see the module doc); `None` when there is none.
pub fn merge_shared_operand_matmuls(g: &Mir) -> Option<Mir> {
    merge_matmuls(g, Form::Batched)
}

/// How a group's matmuls become one.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Form {
    /// The weights stacked `[G, K, N]`, the product `[G, M, N]`, member i its leading-axis slice
    /// (session 20's form).
    Batched,
    /// The weights concatenated along N, `[K, G·N]`: one plain matmul of the operand `[…, K]` (its
    /// shape kept) with G·N columns, the biases concatenated `[G·N]`, member i the column slice
    /// `[i·N, (i + 1)·N)` of the last axis (read in place by its reshapes / transposes' readers); only
    /// where the operand has at least `min_rows` rows (the product of its leading dims).
    Columns { min_rows: u64 },
}

/// The merged groups of `g` in `form` (see the module doc); `None` when there is none.
pub fn merge_matmuls(g: &Mir, form: Form) -> Option<Mir> {
    let uses = g.use_counts();
    let outs = g.output_mask();
    let consumers = g.consumers();
    // (operand, weight dtype, K, N) → matmul nodes, in node order.
    let mut by_operand: BTreeMap<(u32, String, usize, usize), Vec<usize>> = BTreeMap::new();
    for (ni, n) in g.nodes.iter().enumerate() {
        if n.op != MirOp::MatMul || n.inputs.len() != 2 {
            continue;
        }
        let (a, w) = (n.inputs[0], n.inputs[1]);
        let (ta, tw) = (g.ty(a), g.ty(w));
        let (Some(sa), Some(sw)) = (ta.shape.as_fixed(), tw.shape.as_fixed()) else { continue };
        if g.const_data(w).is_none() || sw.len() != 2 || sa.len() < 2 || !matches!(ta.dtype, DType::F32) || tw.dtype != ta.dtype || sa[sa.len() - 1] != sw[0] {
            continue;
        }
        if outs[n.outputs[0].index()] || g.ty(n.outputs[0]).shape.as_fixed().is_none() {
            continue;
        }
        if let Form::Columns { min_rows } = form {
            if (sa[..sa.len() - 1].iter().map(|&d| d as u64).product::<u64>()) < min_rows {
                continue;
            }
        }
        by_operand.entry((a.0, format!("{}", tw.dtype), sw[0], sw[1])).or_default().push(ni);
    }
    // The bias of a member: its output's only reader, an `add` with a constant [N] (either side), not a graph output.
    let bias = |ni: usize, nn: usize| -> Option<(usize, ValueId)> {
        let y = g.nodes[ni].outputs[0];
        if uses[y.index()] != 1 || consumers[y.index()].len() != 1 {
            return None;
        }
        let c = consumers[y.index()][0];
        let cn = g.node(c);
        if cn.op != MirOp::Binary(BinaryOp::Add) || outs[cn.outputs[0].index()] || g.ty(cn.outputs[0]) != g.ty(y) {
            return None;
        }
        let k = if cn.inputs[0] == y { cn.inputs[1] } else { cn.inputs[0] };
        (g.const_data(k).is_some() && g.ty(k).dtype == g.ty(y).dtype && g.ty(k).shape.as_fixed()? == vec![nn]).then_some((c.index(), k))
    };
    let mut groups: Vec<Vec<Member>> = Vec::new();
    // A member's result (its bias add's, or its own) read only by reshapes and transposes: the data
    // movement that views or operand inlining take over. A result read by an elementwise op would lose
    // that op as the matmul's fused epilogue (a launch of its own on the slice: measured on this file's
    // test model, 9 launches merged against 10 apart when such readers were merged too).
    let movement_only = |v: ValueId| consumers[v.index()].iter().all(|&c| matches!(g.node(c).op, MirOp::Reshape { .. } | MirOp::Transpose { .. }));
    // Columns: a member's column slice is no view (its rows are strided); it costs no launch only where
    // operand inlining reads it in place (`plan/fuse.rs`: slice → reshape → transposes and scalar
    // scalings → a matmul operand, each single-use — attention's Q, K and V), so only such members merge.
    fn into_matmul(g: &Mir, v: ValueId, uses: &[u32], outs: &[bool], consumers: &[Vec<rlx_ir::NodeId>]) -> bool {
        let cs = &consumers[v.index()];
        if outs[v.index()] || uses[v.index()] != 1 || cs.len() != 1 {
            return false;
        }
        let c = g.node(cs[0]);
        match c.op {
            MirOp::MatMul => true,
            MirOp::Reshape { .. } | MirOp::Transpose { .. } => into_matmul(g, c.outputs[0], uses, outs, consumers),
            _ if crate::plan::is_scalar_scale(g, cs[0]) => into_matmul(g, c.outputs[0], uses, outs, consumers),
            _ => false,
        }
    }
    let inlined = |v: ValueId| !matches!(form, Form::Columns { .. }) || into_matmul(g, v, &uses, &outs, &consumers);
    // The members with a bias merge with their biases, the others without; a group of one is left alone.
    for ((_, _, _, nn), nodes) in &by_operand {
        let members: Vec<Member> = nodes
            .iter()
            .map(|&mm| Member { mm, add: bias(mm, *nn) })
            .filter(|m| {
                let v = m.add.map_or(g.nodes[m.mm].outputs[0], |(a, _)| g.nodes[a].outputs[0]);
                movement_only(v) && inlined(v)
            })
            .collect();
        let (with, without): (Vec<Member>, Vec<Member>) = members.into_iter().partition(|m| m.add.is_some());
        groups.extend([with, without].into_iter().filter(|grp| grp.len() >= 2));
    }
    if groups.is_empty() {
        return None;
    }
    // Node → (group, member); the group's results, made at its first member's matmul (the earliest of
    // its nodes). A member's matmul and its bias add both become its result (with the bias merged, the
    // matmul's value is then read by nothing and dead code removal drops it).
    let mut role: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    for (gi, grp) in groups.iter().enumerate() {
        for (mi, m) in grp.iter().enumerate() {
            role.insert(m.mm, (gi, mi));
            if let Some((a, _)) = m.add {
                role.insert(a, (gi, mi));
            }
        }
    }
    let mut results: Vec<Option<Vec<ValueId>>> = vec![None; groups.len()];
    Some(rebuild(g, |out, ni, _, map| {
        let &(gi, mi) = role.get(&ni)?;
        if results[gi].is_none() {
            results[gi] = Some(match form {
                Form::Batched => merge(g, out, &groups[gi], map)?,
                Form::Columns { .. } => merge_columns(g, out, &groups[gi], map)?,
            });
        }
        Some(vec![results[gi].as_ref()?[mi]])
    }))
}

/// The merged matmul of `grp` (values of `g` mapped into `out` by `map`): each member's result, in
/// member order.
fn merge(g: &Mir, out: &mut Mir, grp: &[Member], map: &[Option<ValueId>]) -> Option<Vec<ValueId>> {
    let first = &g.nodes[grp[0].mm];
    let a = map[first.inputs[0].index()]?;
    let name = first.name.as_str();
    let sa = out.ty(a).shape.as_fixed()?;
    let sw = g.ty(first.inputs[1]).shape.as_fixed()?;
    let (k, nn) = (sw[0] as u64, sw[1] as u64);
    let m: u64 = sa[..sa.len() - 1].iter().map(|&d| d as u64).product();
    let gn = grp.len() as u64;
    let fixed = |d: &[u64]| d.iter().map(|&x| Dim::Fixed(x)).collect::<Vec<_>>();
    let a3 = out.add1(name, MirOp::Reshape { shape: fixed(&[1, m, k]) }, &[a]).ok()?;
    let mut ws = Vec::new();
    for mem in grp {
        let w = map[g.nodes[mem.mm].inputs[1].index()]?;
        ws.push(out.add1(name, MirOp::Reshape { shape: fixed(&[1, k, nn]) }, &[w]).ok()?);
    }
    let wst = out.add1(name, MirOp::Concat { axis: 0 }, &ws).ok()?;
    let mut y = out.add1(name, MirOp::MatMul, &[a3, wst]).ok()?;
    if grp.iter().all(|mem| mem.add.is_some()) {
        let mut bs = Vec::new();
        for mem in grp {
            let (_, b) = mem.add?;
            bs.push(out.add1(name, MirOp::Reshape { shape: fixed(&[1, 1, nn]) }, &[map[b.index()]?]).ok()?);
        }
        let bst = out.add1(name, MirOp::Concat { axis: 0 }, &bs).ok()?;
        let an = mem_add_name(g, &grp[0]);
        y = out.add1(an, MirOp::Binary(BinaryOp::Add), &[y, bst]).ok()?;
    }
    debug_assert_eq!(out.ty(y).shape.as_fixed()?, vec![gn as usize, m as usize, nn as usize]);
    let mut res = Vec::new();
    for (i, mem) in grp.iter().enumerate() {
        let nm = &g.nodes[mem.mm];
        let s = out.add1(&nm.name, MirOp::Slice { axes: vec![0], starts: vec![i as i64], ends: vec![i as i64 + 1], steps: vec![1] }, &[y]).ok()?;
        let shape = g.ty(nm.outputs[0]).shape.0.clone();
        res.push(out.add1(&nm.name, MirOp::Reshape { shape }, &[s]).ok()?);
    }
    Some(res)
}

/// [`Form::Columns`]' merged matmul of `grp`: each member's result, in member order.
fn merge_columns(g: &Mir, out: &mut Mir, grp: &[Member], map: &[Option<ValueId>]) -> Option<Vec<ValueId>> {
    let first = &g.nodes[grp[0].mm];
    let a = map[first.inputs[0].index()]?;
    let name = first.name.as_str();
    let rank = out.ty(a).shape.as_fixed()?.len();
    let nn = g.ty(first.inputs[1]).shape.as_fixed()?[1] as i64;
    let ws: Vec<ValueId> = grp.iter().map(|mem| map[g.nodes[mem.mm].inputs[1].index()]).collect::<Option<_>>()?;
    let wcat = out.add1(name, MirOp::Concat { axis: 1 }, &ws).ok()?;
    let mut y = out.add1(name, MirOp::MatMul, &[a, wcat]).ok()?;
    if grp.iter().all(|mem| mem.add.is_some()) {
        let bs: Vec<ValueId> = grp.iter().map(|mem| map[mem.add?.1.index()]).collect::<Option<_>>()?;
        let bcat = out.add1(name, MirOp::Concat { axis: 0 }, &bs).ok()?;
        y = out.add1(mem_add_name(g, &grp[0]), MirOp::Binary(BinaryOp::Add), &[y, bcat]).ok()?;
    }
    let mut res = Vec::new();
    for (i, mem) in grp.iter().enumerate() {
        let nm = &g.nodes[mem.mm];
        let s = out.add1(&nm.name, MirOp::Slice { axes: vec![rank - 1], starts: vec![i as i64 * nn], ends: vec![(i as i64 + 1) * nn], steps: vec![1] }, &[y]).ok()?;
        debug_assert_eq!(out.ty(s).shape, g.ty(nm.outputs[0]).shape);
        res.push(s);
    }
    Some(res)
}

fn mem_add_name<'a>(g: &'a Mir, m: &Member) -> &'a str {
    m.add.map_or(g.nodes[m.mm].name.as_str(), |(a, _)| g.nodes[a].name.as_str())
}

