//! Control flow: If, Loop, Scan. Where it can, each subgraph (branch or body) is translated *inline*,
//! node by node, into the graph being built — outer-scope names visible, its own names shadowing them
//! and dropped afterwards: a Scan is unrolled over its static sequence length; a Loop over a constant
//! trip count whose condition folds at import every iteration; an If whose condition is a constant
//! translates only the branch taken, otherwise both branches and a `where` per output (so the branches
//! must agree in dtype and shape). What unrolling cannot do becomes a region op (`region.rs`,
//! `rlx_ir::region`): a Loop whose trip count or condition is computed at run time, or whose constant
//! trip count unrolls past the budget, is a `loop`; so is a Scan past the budget (its sequence length
//! the trip count, its state the carried values, its scan inputs read per iteration by a `Gather` in
//! the body), and an
//! If with a run-time condition whose branches hold such a loop is an `if` (computing the untaken
//! branch's loop could run past its bound).

use super::{Node, R};
use crate::onnx::proto::{AttributeProto, GraphProto, NodeProto, TensorProto, ValueInfoProto};
use crate::onnx::{narrow, tensor_from_proto, Ctx};
use super::region;
use rlx_ir::{ConstData, DType, Def, Dim, Hir, HirOp, MirOp, TensorType, ValueId};

pub(super) const OPS: &[&str] = &["If", "Loop", "Scan"];

/// Most iterations a Loop or Scan is unrolled to (the graph grows linearly with them).
const MAX_ITERS: usize = 4096;
/// Most steps a Scan is unrolled to: a longer one is a loop region at once. Unrolled, a small body's
/// steps compile one kernel each (a tanh RNN step over 4,000 steps: 209 s of LLVM and 36 ms a run, against
/// 48 ms and 0.50 ms as a region); up to 256 steps the unrolled graph still compiles in seconds and runs
/// on every target, the GPU, MCU and Verilog ones included, which do not run regions.
const MAX_SCAN_STEPS: usize = 256;
/// Most subgraph nodes one model may unroll to in all (nested loops multiply).
const MAX_UNROLLED: usize = 1 << 20;

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    match nd.op {
        "If" => if_(cx, nd),
        "Loop" => loop_(cx, nd),
        _ => scan(cx, nd),
    }
}

fn graph_attr<'n>(nd: &Node<'n>, k: &str) -> Result<&'n GraphProto, String> {
    let a: Option<&AttributeProto> = nd.proto.attribute.iter().find(|a| a.name == k);
    a.and_then(|a| a.g.as_ref()).ok_or_else(|| format!("{}: attribute '{k}' (a graph) is required", nd.op))
}

/// Translates `g` inline with its formal inputs bound to `args`; returns the values of its outputs.
fn inline(cx: &mut Ctx, nd: &Node, what: &str, g: &GraphProto, args: &[ValueId]) -> Result<Vec<ValueId>, String> {
    if g.input.len() != args.len() {
        return Err(format!("{} {what} takes {} inputs, but {} are bound", nd.op, g.input.len(), args.len()));
    }
    let saved = cx.names.clone();
    let outer = cx.cur.clone();
    let r = inline_scoped(cx, nd, what, g, args);
    cx.names = saved;
    cx.cur = outer;
    r
}

/// Refuses, before any work, a loop of `iters` iterations of `g` that would pass the unroll budget
/// (counting the iterations of the loops it is nested in), then runs `f` with the scale raised.
fn budgeted<T>(cx: &mut Ctx, g: &GraphProto, iters: usize, f: impl FnOnce(&mut Ctx) -> Result<T, String>) -> Result<T, String> {
    let scale = cx.unroll_scale.saturating_mul(iters);
    if cx.unrolled.saturating_add(scale.saturating_mul(g.node.len().max(1))) > MAX_UNROLLED {
        return Err(format!("unsupported: control flow unrolls to more than {MAX_UNROLLED} subgraph nodes"));
    }
    let saved = cx.unroll_scale;
    cx.unroll_scale = scale;
    let r = f(cx);
    cx.unroll_scale = saved;
    r
}

pub(super) fn inline_scoped(cx: &mut Ctx, nd: &Node, what: &str, g: &GraphProto, args: &[ValueId]) -> Result<Vec<ValueId>, String> {
    cx.unrolled += g.node.len();
    if cx.unrolled > MAX_UNROLLED {
        return Err(format!("unsupported: control flow unrolls to more than {MAX_UNROLLED} subgraph nodes"));
    }
    let outer = cx.cur.clone();
    for t in &g.initializer {
        let c = tensor_from_proto(t, cx.base_dir).map_err(|e| format!("{} {what} initializer '{}': {e}", nd.op, t.name))?;
        let id = cx.konst(c);
        if let Some(n) = narrow::Narrow::from_onnx(t.data_type) {
            cx.narrow.insert(id, n);
        }
        cx.names.insert(t.name.clone(), id);
    }
    for (vi, &a) in g.input.iter().zip(args) {
        cx.names.insert(vi.name.clone(), a);
    }
    for (idx, n) in g.node.iter().enumerate() {
        let name = if n.name.is_empty() { format!("{}_{idx}", n.op_type) } else { n.name.clone() };
        let wrap = |e: String| {
            if e.starts_with("unsupported") {
                format!("{e} (in {} {what}, node '{name}' ({}))", nd.op, n.op_type)
            } else {
                format!("{} {what} node '{name}' ({}): {e}", nd.op, n.op_type)
            }
        };
        if !super::is_onnx_supported(&n.op_type, &n.domain) {
            let d = if n.domain.is_empty() { String::new() } else { format!(" in domain '{}'", n.domain) };
            return Err(wrap(format!("unsupported op {}{d}", n.op_type)));
        }
        let ins = resolve(cx, n).map_err(wrap)?;
        cx.cur = format!("{outer}/{name}");
        let outs = super::convert(cx, n, &ins).map_err(wrap)?;
        for (k, o) in n.output.iter().enumerate() {
            if o.is_empty() {
                continue;
            }
            let v = outs.get(k).ok_or_else(|| wrap(format!("unsupported: output {k} ('{o}') of {} is not implemented", n.op_type)))?;
            cx.names.insert(o.clone(), *v);
        }
    }
    g.output
        .iter()
        .map(|o| cx.names.get(&o.name).copied().ok_or_else(|| format!("{} {what} output '{}' is not produced by any node", nd.op, o.name)))
        .collect()
}

fn resolve(cx: &Ctx, n: &NodeProto) -> Result<Vec<Option<ValueId>>, String> {
    n.input
        .iter()
        .map(|i| {
            if i.is_empty() {
                Ok(None)
            } else {
                cx.names.get(i).copied().map(Some).ok_or_else(|| format!("input '{i}' is not defined in this scope or an enclosing one"))
            }
        })
        .collect()
}

fn const_bool(cx: &Ctx, v: ValueId) -> Option<bool> {
    let c = cx.cval(v)?;
    (c.numel() == 1).then(|| c.get_f64(0) != 0.0)
}

fn if_(cx: &mut Ctx, nd: &Node) -> R {
    let cond = nd.req(0)?;
    let (then_g, else_g) = (graph_attr(nd, "then_branch")?, graph_attr(nd, "else_branch")?);
    if then_g.output.len() != else_g.output.len() {
        return Err(format!("If: then_branch has {} outputs, else_branch {}", then_g.output.len(), else_g.output.len()));
    }
    if let Some(b) = const_bool(cx, cond) {
        return if b { inline(cx, nd, "then_branch", then_g, &[]) } else { inline(cx, nd, "else_branch", else_g, &[]) };
    }
    if cx.dims(cond).iter().any(|d| d != &Dim::Fixed(1)) {
        return Err(format!("If: the condition must hold one element, got shape {}", cx.ty(cond).shape));
    }
    let c = cx.cast(cond, DType::Bool)?;
    let c = cx.reshape(c, vec![])?;
    // Built as regions first: kept only when a branch holds a `loop` (else both branches inline).
    let unrolled = cx.unrolled;
    let regions = region::build(cx, nd, "then_branch", then_g, &[]).and_then(|t| Ok((t, region::build(cx, nd, "else_branch", else_g, &[])?)));
    cx.unrolled = unrolled;
    if let Ok(((then_r, then_cap), (else_r, else_cap))) = regions {
        if region::has_loop(&then_r) || region::has_loop(&else_r) {
            return if_region(cx, c, then_r, then_cap, else_r, else_cap);
        }
    }
    let t = inline(cx, nd, "then_branch", then_g, &[])?;
    let e = inline(cx, nd, "else_branch", else_g, &[])?;
    let mut out = Vec::new();
    for (k, (&a, &b)) in t.iter().zip(&e).enumerate() {
        if cx.ty(a) != cx.ty(b) {
            let why = format!("If condition, whose branches differ in output {k} ({} and {})", cx.ty(a), cx.ty(b));
            return Err(cx.not_const(cond, &why));
        }
        out.push(cx.prim(MirOp::Where, &[c, a, b])?);
    }
    Ok(out)
}

/// An `if` region: both branches take the union of their captures (each ignores the other's).
fn if_region(cx: &mut Ctx, c: ValueId, mut t: Hir, tc: Vec<ValueId>, mut e: Hir, ec: Vec<ValueId>) -> R {
    let mut caps = tc.clone();
    caps.extend(ec.iter().filter(|v| !tc.contains(v)));
    for (g, own) in [(&mut t, &tc), (&mut e, &ec)] {
        let mut inputs = Vec::with_capacity(caps.len());
        let own_inputs = g.inputs.clone();
        for (k, &v) in caps.iter().enumerate() {
            inputs.push(match own.iter().position(|&o| o == v) {
                Some(i) => own_inputs[i],
                None => {
                    let id = ValueId(g.values.len() as u32);
                    g.values.push(rlx_ir::Value { ty: cx.ty(v).clone(), name: Some(format!("captured{k}")), def: Def::Input(0) });
                    id
                }
            });
        }
        for (i, &v) in inputs.iter().enumerate() {
            g.values[v.index()].def = Def::Input(i as u32);
        }
        g.inputs = inputs;
    }
    let mut ins = vec![c];
    ins.extend(&caps);
    let name = cx.cur.clone();
    cx.g.add_node(&name, HirOp::If { branches: Box::new([t, e]) }, &ins)
}

/// Stacks per-iteration slices along a new axis `axis` (of the stacked rank).
fn stack(cx: &mut Ctx, slices: &[ValueId], axis: usize) -> Result<ValueId, String> {
    let us: Vec<ValueId> = slices.iter().map(|&s| cx.unsqueeze(s, &[axis])).collect::<Result<_, _>>()?;
    if us.len() == 1 {
        return Ok(us[0]);
    }
    cx.prim(MirOp::Concat { axis }, &us)
}

fn loop_(cx: &mut Ctx, nd: &Node) -> R {
    let body = graph_attr(nd, "body")?;
    let carried: Vec<ValueId> = (2..nd.ins.len()).map(|i| nd.req(i)).collect::<Result<_, _>>()?;
    let n_scan = body.output.len().checked_sub(1 + carried.len()).ok_or_else(|| {
        format!("Loop: body has {} outputs, fewer than the condition plus {} loop-carried values", body.output.len(), carried.len())
    })?;
    if nd.inp(0).is_none() && nd.inp(1).is_none() {
        return Err("unsupported: Loop without a trip count or a condition (an infinite loop)".into());
    }
    // A constant trip count and condition unroll (the condition must also fold every iteration);
    // anything computed at run time is a `loop` region.
    let trip = match nd.inp(0) {
        Some(m) if cx.cval(m).is_some() => Some(cx.const_ints(m, "Loop trip count")?.first().copied().unwrap_or(0).max(0) as usize),
        Some(m) => return loop_region(cx, nd, body, carried, n_scan).map_err(|e| ask_const(cx, m, "Loop trip count", e)),
        None => None,
    };
    let cond = match nd.inp(1) {
        Some(c) => match const_bool(cx, c) {
            Some(b) => b,
            None => return loop_region(cx, nd, body, carried, n_scan).map_err(|e| ask_const(cx, c, "Loop condition", e)),
        },
        None => true,
    };
    let limit = trip.unwrap_or(MAX_ITERS + 1);
    let (nodes, values, unrolled) = (cx.g.nodes.len(), cx.g.values.len(), cx.unrolled);
    match budgeted(cx, body, limit.min(MAX_ITERS), |cx| loop_iters(cx, nd, body, carried.clone(), n_scan, limit, cond)) {
        Ok(Some(out)) => Ok(out),
        // Past the unroll budget with a constant trip count to bound it (the outermost such loop: one
        // being unrolled itself passes the error up), or a condition the body computes at run time:
        // drop the partial unrolling, make a region.
        Err(e) if trip.is_none() || cx.unroll_scale != 1 || !(e.starts_with("unsupported: control flow unrolls") || e.starts_with("unsupported: Loop runs more than")) => Err(e),
        Ok(None) | Err(_) => {
            rollback(cx, (nodes, values, unrolled));
            loop_region(cx, nd, body, carried, n_scan)
        }
    }
}

/// Drops a partial unrolling: the graph and the import state back to (nodes, values, unrolled).
fn rollback(cx: &mut Ctx, (nodes, values, unrolled): (usize, usize, usize)) {
    cx.g.nodes.truncate(nodes);
    cx.g.values.truncate(values);
    cx.narrow.retain(|v, _| v.index() < values);
    cx.rows.retain(|v, _| v.index() < values);
    cx.seed_rows.retain(|(v, _)| v.index() < values);
    cx.unrolled = unrolled;
}

/// A Loop that a run-time operand `v` made a region, and that cannot be one (`e`): the graph input `v`
/// is computed from is asked for as a constant (then the Loop unrolls), with the region's reason.
fn ask_const(cx: &Ctx, v: ValueId, what: &str, e: String) -> String {
    match source_input(cx, v) {
        Some(src) if !e.contains("') is not a constant") || src == v => {
            format!("{} ({what}; as a loop computed at run time: {e})", cx.not_const(src, "input"))
        }
        _ => e,
    }
}

/// A scalar operand of a `loop` in `dt`, shape [] (ONNX allows [1]).
fn scalar_operand(cx: &mut Ctx, v: ValueId, dt: DType, what: &str) -> Result<ValueId, String> {
    if cx.dims(v).iter().any(|d| d != &Dim::Fixed(1)) {
        return Err(format!("Loop: the {what} must hold one element, got shape {}", cx.ty(v).shape));
    }
    let c = cx.cast(v, dt)?;
    cx.reshape(c, vec![])
}

/// The first graph input `v` is computed from (for the message asking for it as a constant).
fn source_input(cx: &Ctx, v: ValueId) -> Option<ValueId> {
    let mut stack = vec![v];
    let mut seen = std::collections::HashSet::new();
    while let Some(v) = stack.pop() {
        match cx.g.value(v).def {
            Def::Input(_) => return Some(v),
            Def::Node(n, _) if seen.insert(n) => stack.extend(cx.g.node(n).inputs.iter().rev()),
            _ => {}
        }
    }
    None
}

/// A Loop as a `loop` region: run-time trip count and condition, carried values of static shapes,
/// scan outputs padded to the constant trip count with the iteration count beside them.
fn loop_region(cx: &mut Ctx, nd: &Node, body: &GraphProto, carried: Vec<ValueId>, n_scan: usize) -> R {
    let max_trips = nd.inp(0).and_then(|m| cx.cval(m)).map(|c| c.get_i64(0).max(0) as u64);
    if n_scan > 0 {
        match max_trips {
            Some(m) if m as usize <= MAX_ITERS => {}
            Some(m) => return Err(format!("unsupported: Loop scan outputs over up to {m} iterations (their padded length is at most {MAX_ITERS})")),
            None => {
                // The scan outputs' length would be data-dependent with no bound: ask for the inputs
                // the trip count is computed from, as constants.
                let m = nd.req(0)?;
                let src = source_input(cx, m).unwrap_or(m);
                return Err(format!("{} (the Loop's scan outputs need a constant trip count, and it is computed from it)", cx.not_const(src, "input")));
            }
        }
    }
    let trip = match nd.inp(0) {
        Some(m) => scalar_operand(cx, m, DType::I64, "trip count")?,
        None => cx.konst(ConstData::from_i64(vec![], &[i64::MAX])),
    };
    let cond = match nd.inp(1) {
        Some(c) => scalar_operand(cx, c, DType::Bool, "condition")?,
        None => cx.konst(ConstData::scalar(DType::Bool, 1.0)),
    };
    let mut formal = vec![TensorType::new(DType::I64, rlx_ir::Shape(vec![])), TensorType::new(DType::Bool, rlx_ir::Shape(vec![]))];
    for &v in &carried {
        if cx.ty(v).shape.as_fixed().is_none() {
            return Err(format!("unsupported: Loop-carried value '{}' of type {} has no static shape", cx.g.value(v).name.clone().unwrap_or_else(|| v.to_string()), cx.ty(v)));
        }
        formal.push(cx.ty(v).clone());
    }
    let (mut g, captured) = region::build(cx, nd, "body", body, &formal)?;
    // ONNX allows the body's condition as a one-element tensor: the op's is a bool scalar.
    let c = g.outputs[0];
    if g.ty(c).shape.rank() != 0 && g.ty(c).shape.numel() == Some(1) {
        let name = format!("{}/cond", cx.cur);
        g.outputs[0] = g.add1(&name, HirOp::Prim(MirOp::Reshape { shape: vec![] }), &[c])?;
    }
    let mut ins = vec![trip, cond];
    ins.extend(&carried);
    ins.extend(&captured);
    let name = cx.cur.clone();
    let op = HirOp::Loop { max_trips: if n_scan > 0 { max_trips } else { max_trips.filter(|&m| m < i64::MAX as u64) }, carried: carried.len(), body: Box::new([g]) };
    let outs = cx.g.add_node(&name, op, &ins)?;
    let count = outs[outs.len() - 1];
    for &s in &outs[carried.len()..outs.len() - 1] {
        cx.seed_rows.push((s, rlx_ir::bounded::Row { axis: 0, count }));
    }
    Ok(outs[..outs.len() - 1].to_vec())
}

/// Unrolls the Loop; `None` when the body's condition is computed at run time (a region instead).
#[allow(clippy::too_many_arguments)]
fn loop_iters(cx: &mut Ctx, nd: &Node, body: &GraphProto, carried: Vec<ValueId>, n_scan: usize, limit: usize, mut cond: bool) -> Result<Option<Vec<ValueId>>, String> {
    let mut state = carried;
    let mut scans: Vec<Vec<ValueId>> = vec![Vec::new(); n_scan];
    let mut i = 0usize;
    while i < limit && cond {
        if i == MAX_ITERS {
            return Err(format!("unsupported: Loop runs more than {MAX_ITERS} iterations (it is unrolled at import)"));
        }
        let it = cx.konst(ConstData::from_i64(vec![], &[i as i64]));
        let cv = cx.konst(ConstData::scalar(DType::Bool, 1.0));
        let mut args = vec![it, cv];
        args.extend(&state);
        let outs = inline(cx, nd, "body", body, &args)?;
        let Some(c) = const_bool(cx, outs[0]) else { return Ok(None) };
        cond = c;
        state = outs[1..1 + state.len()].to_vec();
        for (k, s) in outs[1 + state.len()..].iter().enumerate() {
            scans[k].push(*s);
        }
        i += 1;
    }
    let mut out = state;
    for (k, s) in scans.iter().enumerate() {
        if s.is_empty() {
            return Err(format!("unsupported: Loop scan output {k} of zero iterations (its element shape is unknown)"));
        }
        out.push(stack(cx, s, 0)?);
    }
    Ok(Some(out))
}

/// Axis `a` of a rank-`r` value (negative counts from the end).
fn axis(a: i64, r: usize, what: &str) -> Result<usize, String> {
    super::build::norm_axis(a, r).map_err(|e| format!("Scan {what}: {e}"))
}

fn scan(cx: &mut Ctx, nd: &Node) -> R {
    let body = graph_attr(nd, "body")?;
    let m = nd.a.i("num_scan_inputs", -1);
    if m < 1 {
        return Err("Scan: attribute num_scan_inputs (≥ 1) is required".into());
    }
    let m = m as usize;
    // Opset 8: input 0 is sequence_lens and every input has a leading batch axis the body does not see.
    let batched = nd.opset < 9;
    let first = usize::from(batched);
    let ins: Vec<ValueId> = (first..nd.ins.len()).map(|i| nd.req(i)).collect::<Result<_, _>>()?;
    let n = ins.len().checked_sub(m).ok_or_else(|| format!("Scan: {} inputs, fewer than num_scan_inputs {m}", ins.len()))?;
    if let Some(sl) = nd.inp(0).filter(|_| batched) {
        // Every sequence runs the whole length (a shorter one would stop its state early and pad its
        // outputs with zeros, which is not translated).
        let lens = cx.const_ints(sl, "Scan sequence_lens")?;
        let full = cx.dims(ins[n]).get(1).and_then(Dim::fixed);
        if let Some(&l) = lens.iter().find(|&&l| Some(l as u64) != full) {
            return Err(format!("unsupported: Scan (opset 8) sequence_lens entry {l}, not the whole sequence length {}", cx.ty(ins[n]).shape));
        }
    }
    let k = body.output.len().checked_sub(n).ok_or_else(|| format!("Scan: body has {} outputs, fewer than its {n} state values", body.output.len()))?;
    let dir_key = if batched { "directions" } else { "scan_input_directions" };
    let in_dirs = nd.a.ints(dir_key).unwrap_or_else(|| vec![0; m]);
    let in_axes = nd.a.ints("scan_input_axes").unwrap_or_else(|| vec![0; m]);
    let out_dirs = nd.a.ints("scan_output_directions").unwrap_or_else(|| vec![0; k]);
    let out_axes = nd.a.ints("scan_output_axes").unwrap_or_else(|| vec![0; k]);
    if in_dirs.len() != m || in_axes.len() != m || out_dirs.len() != k || out_axes.len() != k {
        return Err("Scan: scan_input_*/scan_output_* attributes must have one entry per scan input/output".into());
    }
    if !batched {
        return scan_one(cx, nd, body, &ins[..n], &ins[n..], &in_axes, &in_dirs, &out_axes, &out_dirs);
    }
    // Opset 8: run the body per batch row, then stack the rows.
    let nb = *cx.fixed_dims(ins[0], "Scan (opset 8) batch")?.first().ok_or("Scan: inputs need a batch axis")?;
    let mut rows: Vec<Vec<ValueId>> = Vec::new();
    for b in 0..nb {
        let pick: Vec<ValueId> = ins
            .iter()
            .map(|&v| {
                let s = cx.slice_axis(v, 0, b, b + 1)?;
                let mut d = cx.dims(s);
                d.remove(0);
                cx.reshape(s, d)
            })
            .collect::<Result<_, _>>()?;
        rows.push(scan_one(cx, nd, body, &pick[..n], &pick[n..], &in_axes, &in_dirs, &out_axes, &out_dirs)?);
    }
    (0..n + k).map(|j| stack(cx, &rows.iter().map(|r| r[j]).collect::<Vec<_>>(), 0)).collect()
}

#[allow(clippy::too_many_arguments)]
fn scan_one(
    cx: &mut Ctx,
    nd: &Node,
    body: &GraphProto,
    init: &[ValueId],
    xs: &[ValueId],
    in_axes: &[i64],
    in_dirs: &[i64],
    out_axes: &[i64],
    out_dirs: &[i64],
) -> R {
    let mut len = None;
    let mut ax = Vec::new();
    for (j, &x) in xs.iter().enumerate() {
        let a = axis(in_axes[j], cx.rank(x), "scan_input_axes")?;
        let d = match cx.dims(x)[a] {
            Dim::Fixed(d) => d as usize,
            Dim::Sym(ref s) if s.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                return Err(format!("Scan needs a static sequence length, got the symbolic dim '{s}' (fix it with --dim {s}=N)"))
            }
            ref s => return Err(format!("Scan needs a static sequence length, got {s} (fix the symbolic dims it is computed from with --dim NAME=N)")),
        };
        if *len.get_or_insert(d) != d {
            return Err(format!("Scan: scan inputs disagree in sequence length ({} and {d})", len.unwrap_or(0)));
        }
        ax.push(a);
    }
    let t_len = len.unwrap_or(0);
    if t_len == 0 {
        return Err("unsupported: Scan over 0 steps (its outputs' element shapes are unknown)".into());
    }
    let sc = Scan { body, init, xs, ax: &ax, in_dirs, out_axes, out_dirs, t_len };
    if t_len <= MAX_SCAN_STEPS {
        let mark = (cx.g.nodes.len(), cx.g.values.len(), cx.unrolled);
        match budgeted(cx, body, t_len, |cx| scan_iters(cx, nd, &sc)) {
            Ok(out) => return Ok(out),
            // Past the budget: the outermost loop becomes the region (one being unrolled passes it up).
            Err(e) if cx.unroll_scale != 1 || !e.starts_with("unsupported: control flow unrolls") => return Err(e),
            Err(_) => rollback(cx, mark),
        }
    }
    scan_region(cx, nd, &sc)
}

/// One Scan (a batch row of opset 8's) with its attributes read: the body, the state and scan inputs,
/// each scan input's axis and direction, each scan output's axis and direction, the sequence length.
#[derive(Clone, Copy)]
struct Scan<'a> {
    body: &'a GraphProto,
    init: &'a [ValueId],
    xs: &'a [ValueId],
    ax: &'a [usize],
    in_dirs: &'a [i64],
    out_axes: &'a [i64],
    out_dirs: &'a [i64],
    t_len: usize,
}

/// A Scan as a `loop` region (past the unroll limits), on the Loop's region machinery: the trip count
/// is the sequence length, the state the carried values; the body, as a Loop body taking (iteration,
/// condition, state…), first reads each scan input's slice — a `Gather` at the iteration, or at
/// length − 1 − iteration for a reversed input — from the whole outer value, a capture like any outer
/// value a body reads. The loop's scan outputs (stacked on axis 0, exactly `t_len` slices: the
/// condition stays true) are then reversed and moved to their axes outside the region.
fn scan_region(cx: &mut Ctx, nd: &Node, sc: &Scan) -> R {
    let Scan { body, init, xs, ax, in_dirs, out_axes, out_dirs, t_len } = *sc;
    let n = init.len();
    if body.input.len() != n + xs.len() {
        return Err(format!("Scan body takes {} inputs, but {n} state values and {} scan inputs are bound", body.input.len(), xs.len()));
    }
    let mut formal = vec![TensorType::new(DType::I64, rlx_ir::Shape(vec![])), TensorType::new(DType::Bool, rlx_ir::Shape(vec![]))];
    for (j, &v) in init.iter().enumerate() {
        if cx.ty(v).shape.as_fixed().is_none() {
            return Err(format!("unsupported: Scan state value {j} of type {} has no static shape (as a loop region)", cx.ty(v)));
        }
        formal.push(cx.ty(v).clone());
    }
    // Names of the Loop body's own values, out of the way of the body's (ONNX names hold no '#').
    let tag = format!("#scan{}", cx.g.nodes.len());
    let named = |name: String| ValueInfoProto { name, ..Default::default() };
    let (t, c, back) = (format!("{tag}.t"), format!("{tag}.cond"), format!("{tag}.back"));
    let mut g = GraphProto { name: body.name.clone(), initializer: body.initializer.clone(), ..Default::default() };
    g.input = vec![named(t.clone()), named(c.clone())];
    g.input.extend(body.input[..n].iter().cloned());
    if in_dirs.iter().any(|&d| d != 0) {
        let last = format!("{tag}.last");
        g.initializer.push(TensorProto { name: last.clone(), data_type: 7, int64_data: vec![t_len as i64 - 1], ..Default::default() });
        g.node.push(NodeProto { op_type: "Sub".into(), name: back.clone(), input: vec![last, t.clone()], output: vec![back.clone()], ..Default::default() });
    }
    let saved = cx.names.clone();
    for (j, &x) in xs.iter().enumerate() {
        let whole = format!("{tag}.x{j}");
        cx.names.insert(whole.clone(), x);
        let at = if in_dirs[j] != 0 { back.clone() } else { t.clone() };
        let axis = AttributeProto { name: "axis".into(), r#type: 2, i: ax[j] as i64, ..Default::default() };
        let slice = body.input[n + j].name.clone();
        g.node.push(NodeProto { op_type: "Gather".into(), name: format!("{tag}.slice{j}"), input: vec![whole, at], output: vec![slice], attribute: vec![axis], ..Default::default() });
    }
    g.node.extend(body.node.iter().cloned());
    g.output = vec![named(c)];
    g.output.extend(body.output.iter().cloned());
    let built = region::build(cx, nd, "body", &g, &formal);
    cx.names = saved;
    let (g, captured) = built?;
    let trip = cx.konst(ConstData::from_i64(vec![], &[t_len as i64]));
    let cond = cx.konst(ConstData::scalar(DType::Bool, 1.0));
    let mut ins = vec![trip, cond];
    ins.extend(init);
    ins.extend(&captured);
    let name = cx.cur.clone();
    let op = HirOp::Loop { max_trips: Some(t_len as u64), carried: n, body: Box::new([g]) };
    let outs = cx.g.add_node(&name, op, &ins)?;
    let mut res = outs[..n].to_vec();
    for (j, &y) in outs[n..outs.len() - 1].iter().enumerate() {
        let mut y = y;
        if out_dirs[j] != 0 {
            let rev: Vec<i64> = (0..t_len as i64).rev().collect();
            let idx = cx.konst(ConstData::from_i64(vec![t_len], &rev));
            y = cx.prim(MirOp::Gather { axis: 0 }, &[y, idx])?;
        }
        let r = cx.rank(y);
        let a = axis(out_axes[j], r, "scan_output_axes")?;
        if a != 0 {
            let perm: Vec<usize> = (0..r).map(|i| if i < a { i + 1 } else if i == a { 0 } else { i }).collect();
            y = cx.transpose(y, perm)?;
        }
        res.push(y);
    }
    Ok(res)
}

fn scan_iters(cx: &mut Ctx, nd: &Node, sc: &Scan) -> R {
    let Scan { body, init, xs, ax, in_dirs, out_axes, out_dirs, t_len } = *sc;
    let mut state = init.to_vec();
    let k = body.output.len() - state.len();
    let mut outs: Vec<Vec<ValueId>> = vec![Vec::new(); k];
    for t in 0..t_len {
        let mut args = state.clone();
        for (j, &x) in xs.iter().enumerate() {
            let i = if in_dirs[j] != 0 { t_len - 1 - t } else { t };
            let s = cx.slice_axis(x, ax[j], i, i + 1)?;
            let mut d = cx.dims(s);
            d.remove(ax[j]);
            args.push(cx.reshape(s, d)?);
        }
        let r = inline(cx, nd, "body", body, &args)?;
        state = r[..state.len()].to_vec();
        for (j, &y) in r[state.len()..].iter().enumerate() {
            outs[j].push(y);
        }
    }
    let mut res = state;
    for (j, mut s) in outs.into_iter().enumerate() {
        if out_dirs[j] != 0 {
            s.reverse();
        }
        let a = axis(out_axes[j], cx.rank(s[0]) + 1, "scan_output_axes")?;
        res.push(stack(cx, &s, a)?);
    }
    Ok(res)
}
