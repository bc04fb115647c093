//! Differentiation as MIR transforms. Reverse mode (`vjp`, `grad`, `grad_with_loss`) appends the
//! backward pass to a copy of the graph: nodes are visited in reverse, each node whose output has a
//! cotangent and one of whose inputs depends on a differentiated input applies its op's rule (one file
//! per family: `elementwise`, `linear`, `reduce`, `movement`, `conv`, `pool`), cotangents of a value used twice are
//! added. Rules are written in MIR primitives, so a gradient graph differentiates again: higher orders
//! are compositions (`grad(grad(f))`), forward mode is the transpose of reverse mode (`jvp`: the vjp
//! differentiated with respect to its cotangent) and `hvp` is the gradient of ⟨∇f, v⟩.
//!
//! Only float values carry derivatives; integer and bool values (indices, masks, comparisons) are
//! constants by dtype. A float op without a rule on the path is an error naming the node and op, never
//! a silent zero. Piecewise-constant ops (floor, ceil, round, sign) have the zero rule.

mod build;
mod conv;
mod elementwise;
mod linear;
mod movement;
mod pool;
mod reduce;

pub use build::B;

use rlx_ir::{Mir, MirOp, OpSet, ValueId};
use std::fmt;

/// A differentiation error: the node and op it concerns (when it concerns one), and what is wrong.
#[derive(Clone, Debug, PartialEq)]
pub struct AdError {
    pub node: Option<String>,
    pub op: Option<String>,
    pub msg: String,
}

impl AdError {
    fn graph(msg: impl Into<String>) -> AdError {
        AdError { node: None, op: None, msg: msg.into() }
    }
}

impl fmt::Display for AdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.node, &self.op) {
            (Some(n), Some(o)) => write!(f, "node '{n}' ({o}): {}", self.msg),
            _ => f.write_str(&self.msg),
        }
    }
}

impl std::error::Error for AdError {}

/// One forward node as a rule sees it: its op, inputs, outputs, and which inputs need a gradient.
pub struct Site<'n> {
    pub ins: &'n [ValueId],
    pub outs: &'n [ValueId],
    pub need: Vec<bool>,
}

/// The op kinds with a backward rule (float dtypes), for docs and coverage.
pub const RULES: &[&str] = &[
    "neg", "abs", "exp", "log", "sqrt", "recip", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
    "atanh", "sigmoid", "erf", "relu", "floor (0)", "ceil (0)", "round (0)", "sign (0)", "add", "sub", "mul", "div", "pow", "max",
    "min", "mod", "fmod", "where", "cast (float→float)", "matmul", "dequant_matmul (input only)", "reduce_sum", "reduce_mean",
    "reduce_max", "reduce_min", "reduce_prod", "cumsum", "reshape", "transpose", "expand", "slice", "concat",
    "gather (data)", "gather_elements (data)", "topk (values)", "pad (constant)", "conv, conv_transpose (input, bias; weights with groups 1)", "max_pool", "avg_pool", "fake_quantize (input, straight-through; a per-tensor scale, LSQ)",
];

/// Applies the rule of `op` at `s` to the output cotangents `gy`; one entry per input (None: no
/// gradient, i.e. zero, or not needed).
fn rule(b: &mut B, op: &MirOp, s: &Site, gy: &[Option<ValueId>]) -> Result<Vec<Option<ValueId>>, String> {
    let Some(g) = gy.first().copied().flatten() else {
        return Err(format!("no gradient rule for {} with a cotangent on its output 1 only", op.kind()));
    };
    match op {
        MirOp::Unary(u) => Ok(vec![elementwise::unary(b, *u, s, g)?]),
        MirOp::Binary(o) => elementwise::binary(*o, b, s, g),
        MirOp::Where => elementwise::where_(b, s, g),
        MirOp::Cast { .. } => elementwise::cast(b, s, g),
        MirOp::FakeQuantize { .. } => elementwise::fake_quantize(b, s, g),
        MirOp::MatMul => linear::matmul(b, s, g),
        MirOp::DequantMatMul => linear::dequant_matmul(b, s, g),
        MirOp::Reduce { op, axes, keepdims } => reduce::reduce(*op, axes, *keepdims, b, s, g),
        MirOp::CumSum { axis, exclusive, reverse } => reduce::cumsum(*axis, *exclusive, *reverse, b, g),
        MirOp::Reshape { .. } => movement::reshape(b, s, g),
        MirOp::Transpose { perm } => movement::transpose(perm, b, g),
        MirOp::Expand { .. } => movement::expand(b, s, g),
        MirOp::Slice { axes, starts, ends, steps } => movement::slice(axes, starts, ends, steps, b, s, g),
        MirOp::Pad { pads, mode, .. } => movement::pad(pads, *mode, b, g),
        MirOp::Concat { axis } => movement::concat(*axis, b, s, g),
        MirOp::Gather { axis } => movement::gather(*axis, b, s, g),
        MirOp::GatherElements { axis } => movement::gather_elements(*axis, b, s, g),
        MirOp::TopK { axis, .. } => movement::topk(*axis, b, s, g),
        MirOp::Conv { strides, pads, dilations, groups } => conv::conv(strides, pads, dilations, *groups, b, s, g),
        MirOp::ConvTranspose { strides, pads, dilations, groups, .. } => conv::conv_transpose(strides, pads, dilations, *groups, b, s, g),
        MirOp::Pool { kind, kernel, strides, pads, dilations, count_include_pad, .. } => {
            pool::pool(*kind, kernel, strides, pads, dilations, *count_include_pad, b, s, g)
        }
        _ => Err(format!("no gradient rule for {}", op.kind())),
    }
}

/// Appends to `g` the backward pass of the values `seeds` (value, its cotangent) with respect to
/// `wrt`; returns one gradient per `wrt` entry (zeros where no path leads).
pub fn backprop(g: &mut Mir, seeds: &[(ValueId, ValueId)], wrt: &[ValueId]) -> Result<Vec<ValueId>, AdError> {
    let nv = g.values.len();
    let nn = g.nodes.len();
    for &(v, c) in seeds {
        if v.index() >= nv || c.index() >= nv {
            return Err(AdError::graph(format!("seed {v} or its cotangent {c} is not a value of the graph")));
        }
        if g.ty(v).shape != g.ty(c).shape && g.ty(c).shape.rank() != 0 {
            return Err(AdError::graph(format!("cotangent {} of {v} does not match its shape {}", g.ty(c), g.ty(v))));
        }
    }
    // Which values depend on a differentiated input through float values.
    let mut active = vec![false; nv];
    for &w in wrt {
        if w.index() >= nv {
            return Err(AdError::graph(format!("{w} is not a value of the graph")));
        }
        if !g.ty(w).dtype.is_float() {
            return Err(AdError::graph(format!("cannot differentiate with respect to {w}: dtype {} is not float", g.ty(w).dtype)));
        }
        active[w.index()] = true;
    }
    for n in &g.nodes {
        if n.inputs.iter().any(|i| active[i.index()]) {
            for &o in &n.outputs {
                active[o.index()] = g.ty(o).dtype.is_float();
            }
        }
    }
    let mut ct: Vec<Option<ValueId>> = vec![None; nv];
    let accumulate = |g: &mut Mir, ct: &mut Vec<Option<ValueId>>, v: ValueId, c: ValueId, name: &str| -> Result<(), String> {
        ct[v.index()] = Some(match ct[v.index()] {
            None => c,
            Some(prev) => g.add1(&format!("{name}#acc"), MirOp::Binary(rlx_ir::BinaryOp::Add), &[prev, c])?,
        });
        Ok(())
    };
    for &(v, c) in seeds {
        if active[v.index()] {
            let c = if g.ty(c).shape != g.ty(v).shape {
                let shape = g.ty(v).shape.0.clone();
                g.add1("grad/seed", MirOp::Expand { shape }, &[c]).map_err(AdError::graph)?
            } else {
                c
            };
            accumulate(g, &mut ct, v, c, "grad/seed").map_err(AdError::graph)?;
        }
    }
    for ni in (0..nn).rev() {
        let node = g.nodes[ni].clone();
        let gy: Vec<Option<ValueId>> = node.outputs.iter().map(|o| ct[o.index()]).collect();
        if gy.iter().all(Option::is_none) {
            continue;
        }
        let need: Vec<bool> = node.inputs.iter().map(|i| active[i.index()]).collect();
        if !need.iter().any(|&n| n) {
            continue;
        }
        let err = |msg: String| AdError { node: Some(node.name.clone()), op: Some(node.op.kind().to_string()), msg };
        let site = Site { ins: &node.inputs, outs: &node.outputs, need: need.clone() };
        let name = format!("grad/{}", node.name);
        let gx = {
            let mut b = B::new(g, name.clone());
            rule(&mut b, &node.op, &site, &gy).map_err(err)?
        };
        for (k, (&x, c)) in node.inputs.iter().zip(gx).enumerate() {
            if let (true, Some(c)) = (need[k], c) {
                if g.ty(c).shape != g.ty(x).shape || g.ty(c).dtype != g.ty(x).dtype {
                    return Err(err(format!("rule produced {} for input {k} of type {}", g.ty(c), g.ty(x))));
                }
                accumulate(g, &mut ct, x, c, &name).map_err(err)?;
            }
        }
    }
    let mut out = Vec::with_capacity(wrt.len());
    for &w in wrt {
        out.push(match ct[w.index()] {
            Some(c) => c,
            None => {
                let t = g.ty(w).clone();
                B::new(g, "grad/zero".into()).fill(t.dtype, 0.0, &t.shape).map_err(AdError::graph)?
            }
        });
    }
    Ok(out)
}

fn check_index(what: &str, k: usize, n: usize) -> Result<(), AdError> {
    if k >= n {
        return Err(AdError::graph(format!("{what} {k} out of range: the graph has {n}")));
    }
    Ok(())
}

/// The graph's inputs `wrt` (indices into `g.inputs`).
fn inputs_of(g: &Mir, wrt: &[usize]) -> Result<Vec<ValueId>, AdError> {
    wrt.iter().map(|&k| check_index("input", k, g.inputs.len()).map(|_| g.inputs[k])).collect()
}

/// Reverse mode: a graph with the inputs of `g` plus one cotangent input per entry of `outputs`
/// (named `ct:<output name>`, of the output's type), whose outputs are `g`'s outputs followed by the
/// vector-Jacobian products with respect to the inputs `wrt`.
pub fn vjp(g: &Mir, outputs: &[usize], wrt: &[usize]) -> Result<Mir, AdError> {
    let mut h = g.clone();
    let xs = inputs_of(g, wrt)?;
    let mut seeds = Vec::new();
    for &k in outputs {
        check_index("output", k, g.outputs.len())?;
        let o = g.outputs[k];
        let name = format!("ct:{}", g.value(o).name.clone().unwrap_or_else(|| format!("output{k}")));
        let c = h.add_input(&name, g.ty(o).clone());
        seeds.push((o, c));
    }
    let grads = backprop(&mut h, &seeds, &xs)?;
    h.outputs.extend(grads);
    Ok(crate::fold::dce(&h))
}

/// Seeds output `output` of `h` with ones (the gradient of the sum of its elements).
fn seed_ones(h: &mut Mir, output: usize) -> Result<(ValueId, ValueId), AdError> {
    check_index("output", output, h.outputs.len())?;
    let o = h.outputs[output];
    let dt = h.ty(o).dtype;
    if !dt.is_float() {
        return Err(AdError::graph(format!("output {output} is {dt}: only a float output has a gradient")));
    }
    let one = h.add_const(None, rlx_ir::ConstData::scalar(dt, 1.0));
    Ok((o, one))
}

/// The gradient of output `output` (of the sum of its elements, when it is not a scalar) with respect
/// to the inputs `wrt`: a graph with `g`'s inputs whose outputs are the gradients.
pub fn grad(g: &Mir, output: usize, wrt: &[usize]) -> Result<Mir, AdError> {
    let mut h = grad_with_loss(g, output, wrt)?;
    h.outputs.remove(0);
    Ok(crate::fold::dce(&h))
}

/// As [`grad`], with the differentiated output first: outputs `[loss, grad wrt[0], …]`.
pub fn grad_with_loss(g: &Mir, output: usize, wrt: &[usize]) -> Result<Mir, AdError> {
    let mut h = g.clone();
    let xs = inputs_of(g, wrt)?;
    let seed = seed_ones(&mut h, output)?;
    let grads = backprop(&mut h, &[seed], &xs)?;
    h.outputs = std::iter::once(seed.0).chain(grads).collect();
    Ok(crate::fold::dce(&h))
}

/// Forward mode: a graph with `g`'s inputs plus one tangent input per entry of `wrt` (named
/// `tangent:<input name>`), whose outputs are `g`'s outputs followed by the Jacobian-vector products
/// of the outputs `outputs`. Built as the transpose of reverse mode: the vjp is linear in its
/// cotangent u, so J·t = ∇_u ⟨vjp(u), t⟩, evaluated at u = 0.
pub fn jvp(g: &Mir, outputs: &[usize], wrt: &[usize]) -> Result<Mir, AdError> {
    let mut h = g.clone();
    let xs = inputs_of(g, wrt)?;
    let mut tangents = Vec::new();
    for (&k, &x) in wrt.iter().zip(&xs) {
        let name = format!("tangent:{}", g.value(x).name.clone().unwrap_or_else(|| format!("input{k}")));
        tangents.push(h.add_input(&name, g.ty(x).clone()));
    }
    let mut seeds = Vec::new();
    for &k in outputs {
        check_index("output", k, g.outputs.len())?;
        let o = g.outputs[k];
        let t = g.ty(o).clone();
        let u = B::new(&mut h, format!("jvp/u{k}")).fill(t.dtype, 0.0, &t.shape).map_err(AdError::graph)?;
        seeds.push((o, u));
    }
    let vj = backprop(&mut h, &seeds, &xs)?;
    let inner = dot_sum(&mut h, &vj, &tangents, "jvp/dot")?;
    let us: Vec<ValueId> = seeds.iter().map(|s| s.1).collect();
    let dt = h.ty(inner).dtype;
    let one = h.add_const(None, rlx_ir::ConstData::scalar(dt, 1.0));
    let jt = backprop(&mut h, &[(inner, one)], &us)?;
    h.outputs.extend(jt);
    Ok(crate::fold::dce(&h))
}

/// Hessian-vector product of output `output` (summed) with respect to the inputs `wrt`: a graph with
/// `g`'s inputs plus one direction input per `wrt` (named `v:<input name>`) whose outputs are H·v.
pub fn hvp(g: &Mir, output: usize, wrt: &[usize]) -> Result<Mir, AdError> {
    let mut h = g.clone();
    let xs = inputs_of(g, wrt)?;
    let mut vs = Vec::new();
    for (&k, &x) in wrt.iter().zip(&xs) {
        let name = format!("v:{}", g.value(x).name.clone().unwrap_or_else(|| format!("input{k}")));
        vs.push(h.add_input(&name, g.ty(x).clone()));
    }
    let seed = seed_ones(&mut h, output)?;
    let gr = backprop(&mut h, &[seed], &xs)?;
    let inner = dot_sum(&mut h, &gr, &vs, "hvp/dot")?;
    let dt = h.ty(inner).dtype;
    let one = h.add_const(None, rlx_ir::ConstData::scalar(dt, 1.0));
    h.outputs = backprop(&mut h, &[(inner, one)], &xs)?;
    Ok(crate::fold::dce(&h))
}

/// Σ_i sum(a_i * b_i) as a scalar.
fn dot_sum(h: &mut Mir, a: &[ValueId], b: &[ValueId], name: &str) -> Result<ValueId, AdError> {
    let mut bb = B::new(h, name.to_string());
    let mut acc: Option<ValueId> = None;
    for (&x, &y) in a.iter().zip(b) {
        let p = bb.mul(x, y).map_err(AdError::graph)?;
        let r = bb.ty(p).shape.rank();
        let s = bb.sum(p, (0..r).collect(), false).map_err(AdError::graph)?;
        acc = Some(match acc {
            None => s,
            Some(a) => bb.add(a, s).map_err(AdError::graph)?,
        });
    }
    acc.ok_or_else(|| AdError::graph("nothing to differentiate with respect to"))
}
