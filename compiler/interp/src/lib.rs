//! rlx-interp: the reference interpreter for MIR — the numerical oracle every compiled target is checked
//! against. Clarity beats speed: plain loops, one obvious implementation per op.
//!
//! Storage: f32/f16/bf16 tensors live as `f32` values (f16/bf16 rounded after every op), f64 as `f64`,
//! integers and bool as `i64` wrapped to their width after every op (u64 as the i64 bit pattern).
//! Float arithmetic is done in f64 and rounded to the storage type; reductions and matmul accumulate
//! in f64.

mod block_ops;
pub mod blocks;
mod elementwise;
mod index;
mod linalg;
mod movement;
mod quant;
pub mod ranks;
mod reduce;
mod region;
mod select;
mod tensor;

pub use elementwise::erf;

use rlx_ir::{ConstData, Def, Dim, Mir, MirOp, OpSet, TargetCaps};
use std::collections::BTreeMap;
use std::fmt;
use tensor::T;

/// An error while running a graph, naming the node (when there is one) and its op.
#[derive(Clone, Debug, PartialEq)]
pub struct InterpError {
    pub node: Option<String>,
    pub op: Option<String>,
    pub msg: String,
}

impl InterpError {
    fn graph(msg: String) -> InterpError {
        InterpError { node: None, op: None, msg }
    }
}

impl fmt::Display for InterpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.node, &self.op) {
            (Some(n), Some(o)) => write!(f, "node '{n}' ({o}): {}", self.msg),
            (Some(n), None) => write!(f, "node '{n}': {}", self.msg),
            (None, Some(o)) => write!(f, "({o}): {}", self.msg),
            (None, None) => f.write_str(&self.msg),
        }
    }
}

impl std::error::Error for InterpError {}

/// Binds the symbolic dims of `declared` to `actual`, or reports the first mismatch.
fn bind_shape(declared: &[Dim], actual: &[usize], syms: &mut BTreeMap<String, u64>, what: &str) -> Result<(), String> {
    if declared.len() != actual.len() {
        return Err(format!("{what}: expected rank {} ({}), got shape {actual:?}", declared.len(), rlx_ir::Shape(declared.to_vec())));
    }
    for (i, (d, &a)) in declared.iter().zip(actual).enumerate() {
        match d {
            Dim::Fixed(n) => {
                if *n != a as u64 {
                    return Err(format!("{what}: dim {i} must be {n}, got {a} (shape {actual:?})"));
                }
            }
            Dim::Sym(s) => match syms.get(s) {
                Some(&b) if b != a as u64 => {
                    return Err(format!("{what}: dim {i} ('{s}') is {a}, but '{s}' is already bound to {b}"));
                }
                Some(_) => {}
                None => {
                    syms.insert(s.clone(), a as u64);
                }
            },
        }
    }
    Ok(())
}

/// Resolves attribute dims (Reshape/Expand shapes) through the symbol binding.
pub(crate) fn resolve_dims(dims: &[Dim], syms: &BTreeMap<String, u64>) -> Result<Vec<usize>, String> {
    dims.iter()
        .map(|d| match d {
            Dim::Fixed(n) => usize::try_from(*n).map_err(|_| format!("dim {n} too large")),
            Dim::Sym(s) => syms
                .get(s)
                .map(|&n| n as usize)
                .ok_or_else(|| format!("symbolic dim '{s}' is not bound by the inputs")),
        })
        .collect()
}

/// Runs `g` on `inputs` (graph-input order) and returns the outputs (graph-output order). A graph with
/// collectives (one rank of a sharded model) runs with its peers through [`ranks::run_ranks`].
pub fn run(g: &Mir, inputs: &[ConstData]) -> Result<Vec<ConstData>, InterpError> {
    run_rank(g, inputs, None)
}

/// `run` with the communicator that collectives and transfers go through.
fn run_rank(g: &Mir, inputs: &[ConstData], comm: Option<&ranks::Member>) -> Result<Vec<ConstData>, InterpError> {
    if inputs.len() != g.inputs.len() {
        return Err(InterpError::graph(format!("graph takes {} inputs, got {}", g.inputs.len(), inputs.len())));
    }
    let mut syms: BTreeMap<String, u64> = BTreeMap::new();
    let mut slots: Vec<Option<T>> = vec![None; g.values.len()];
    for (k, (&vid, data)) in g.inputs.iter().zip(inputs).enumerate() {
        let v = g.value(vid);
        let name = v.name.clone().unwrap_or_else(|| format!("#{k}"));
        let what = format!("input '{name}'");
        if data.dtype != v.ty.dtype {
            return Err(InterpError::graph(format!("{what}: expected dtype {}, got {}", v.ty.dtype, data.dtype)));
        }
        bind_shape(&v.ty.shape.0, &data.shape, &mut syms, &what).map_err(InterpError::graph)?;
        slots[vid.index()] = Some(T::from_const(data).map_err(|m| InterpError::graph(format!("{what}: {m}")))?);
    }
    let mut uses = g.use_counts();
    for node in &g.nodes {
        let err = |msg: String| InterpError { node: Some(node.name.clone()), op: Some(node.op.kind().to_string()), msg };
        // Materialize constants on first use (a block-weight input stays raw bytes: see `block_ops`).
        let raw = node.op.block_weight_input();
        for (k, &i) in node.inputs.iter().enumerate() {
            if Some(k) == raw {
                continue;
            }
            if slots[i.index()].is_none() {
                match &g.value(i).def {
                    Def::Const(c) => slots[i.index()] = Some(T::from_const(c).map_err(&err)?),
                    _ => return Err(err(format!("input {i} has no value (graph not in topological order?)"))),
                }
            }
        }
        let outs = if node.op.is_comm() {
            let comm = comm.ok_or_else(|| err("a collective needs the other ranks: run the sharded graphs together (rlx_interp::ranks::run_ranks)".into()))?;
            let ins: Vec<&T> = node.inputs.iter().map(|i| slots[i.index()].as_ref().unwrap()).collect();
            vec![comm.exchange(&node.op, ins.first().copied()).map_err(&err)?]
        } else if let Some(w) = raw {
            let Def::Const(c) = &g.value(node.inputs[w]).def else {
                return Err(err(format!("input {w} (the weights) must be a constant")));
            };
            let other = node.inputs[1 - w];
            let t = slots[other.index()].as_ref().ok_or_else(|| err(format!("input {other} has no value")))?;
            exec_block(&node.op, c, t).map_err(&err)?
        } else {
            let ins: Vec<&T> = node.inputs.iter().map(|i| slots[i.index()].as_ref().unwrap()).collect();
            exec(&node.op, &ins, &syms).map_err(&err)?
        };
        if outs.len() != node.outputs.len() {
            return Err(err(format!("produced {} outputs, graph declares {}", outs.len(), node.outputs.len())));
        }
        for (k, (t, &vid)) in outs.into_iter().zip(&node.outputs).enumerate() {
            let ty = g.ty(vid);
            if t.dtype != ty.dtype {
                return Err(err(format!("output {k}: computed dtype {}, declared {}", t.dtype, ty.dtype)));
            }
            bind_shape(&ty.shape.0, &t.shape, &mut syms, &format!("output {k}"))
                .map_err(|m| err(format!("{m} (computed shape disagrees with the declared type {ty})")))?;
            slots[vid.index()] = Some(t);
        }
        for &i in &node.inputs {
            let c = &mut uses[i.index()];
            *c = c.saturating_sub(1);
            if *c == 0 {
                slots[i.index()] = None;
            }
        }
    }
    let mut res = Vec::with_capacity(g.outputs.len());
    for &o in &g.outputs {
        let t = match &slots[o.index()] {
            Some(t) => t.to_const(),
            None => match &g.value(o).def {
                Def::Const(c) => c.clone(),
                _ => return Err(InterpError::graph(format!("graph output {o} was never computed"))),
            },
        };
        res.push(t);
    }
    Ok(res)
}

/// The interpreter's claim set: every MIR op kind, for every plain (non-block-quantized) dtype; the
/// block-weight ops (`dequant_gather` is claimed by its table's dtype) for the block types too.
pub fn caps() -> TargetCaps {
    let dtypes: Vec<rlx_ir::DType> = rlx_ir::dtype::ALL_DTYPES.iter().copied().filter(|d| !d.is_quantized_block()).collect();
    let all: Vec<rlx_ir::DType> = rlx_ir::dtype::ALL_DTYPES.to_vec();
    let native = rlx_ir::mir::all_mir_kinds()
        .into_iter()
        .map(|k| (k, if k.starts_with("dequant_") { all.clone() } else { dtypes.clone() }))
        .collect();
    TargetCaps { name: "interp".to_string(), native }
}

/// Executes a block-weight op: `w` is its raw constant, `other` its other (materialized) input.
fn exec_block(op: &MirOp, w: &ConstData, other: &T) -> Result<Vec<T>, String> {
    match op {
        MirOp::DequantMatMul => Ok(vec![block_ops::dequant_matmul(other, w)?]),
        MirOp::DequantGather => Ok(vec![block_ops::dequant_gather(w, other)?]),
        _ => Err(format!("{} has no block-weight input", op.kind())),
    }
}

/// Evaluates one op on constant inputs (the shape of `rlx_opt::fold`'s evaluator). Attribute dims must
/// be fixed, since there are no graph inputs to bind symbols.
pub fn eval_op(op: &MirOp, inputs: &[ConstData]) -> Result<Vec<ConstData>, String> {
    let (lo, hi) = op.arity();
    if inputs.len() < lo || inputs.len() > hi {
        return Err(format!("{} takes {lo}..={hi} inputs, got {}", op.kind(), inputs.len()));
    }
    if let Some(w) = op.block_weight_input() {
        let other = T::from_const(&inputs[1 - w])?;
        return Ok(exec_block(op, &inputs[w], &other)?.iter().map(T::to_const).collect());
    }
    let ts: Vec<T> = inputs.iter().map(T::from_const).collect::<Result<_, _>>()?;
    let refs: Vec<&T> = ts.iter().collect();
    Ok(exec(op, &refs, &BTreeMap::new())?.iter().map(T::to_const).collect())
}

/// Executes one op on materialized inputs.
fn exec(op: &MirOp, ins: &[&T], syms: &BTreeMap<String, u64>) -> Result<Vec<T>, String> {
    for t in ins {
        if t.dtype.is_quantized_block() {
            return Err(format!("block-quantized {} input is not executable by MIR ops", t.dtype));
        }
    }
    let (lo, hi) = op.arity();
    if ins.len() < lo || ins.len() > hi {
        return Err(format!("takes {lo}..={hi} inputs, got {}", ins.len()));
    }
    let one = |t: Result<T, String>| t.map(|t| vec![t]);
    match op {
        MirOp::Unary(u) => one(elementwise::unary(*u, ins[0])),
        MirOp::Binary(b) => one(elementwise::binary(*b, ins[0], ins[1])),
        MirOp::Where => one(elementwise::where_(ins[0], ins[1], ins[2])),
        MirOp::Cast { to } => one(elementwise::cast(ins[0], *to)),
        MirOp::Bitcast { to } => one(movement::bitcast(ins[0], *to)),
        MirOp::MatMul => one(linalg::matmul(ins[0], ins[1])),
        MirOp::Reduce { op, axes, keepdims } => one(reduce::reduce(*op, ins[0], axes, *keepdims)),
        MirOp::ArgReduce { op, axis, keepdims, select_last } => one(reduce::arg_reduce(*op, ins[0], *axis, *keepdims, *select_last)),
        MirOp::Reshape { shape } => one(movement::reshape(ins[0], &resolve_dims(shape, syms)?)),
        MirOp::Transpose { perm } => one(movement::transpose(ins[0], perm)),
        MirOp::Expand { shape } => one(movement::expand(ins[0], &resolve_dims(shape, syms)?)),
        MirOp::Slice { axes, starts, ends, steps } => one(movement::slice(ins[0], axes, starts, ends, steps)),
        MirOp::Concat { axis } => one(movement::concat(ins, *axis)),
        MirOp::Gather { axis } => one(index::gather(ins[0], ins[1], *axis)),
        MirOp::GatherElements { axis } => one(index::gather_elements(ins[0], ins[1], *axis)),
        MirOp::GatherNd { batch_dims } => one(index::gather_nd(ins[0], ins[1], *batch_dims)),
        MirOp::ScatterElements { axis, reduction } => one(index::scatter_elements(ins[0], ins[1], ins[2], *axis, *reduction)),
        MirOp::ScatterNd { reduction } => one(index::scatter_nd(ins[0], ins[1], ins[2], *reduction)),
        MirOp::Pad { pads, mode, value } => one(movement::pad(ins[0], pads, *mode, *value)),
        MirOp::Conv { strides, pads, dilations, groups } => {
            one(linalg::conv(ins[0], ins[1], ins.get(2).copied(), strides, pads, dilations, *groups))
        }
        MirOp::ConvNhwc { strides, pads, dilations, groups } => {
            // The same convolution with the channels moved second and back.
            let r = ins[0].shape.len();
            let to_first: Vec<usize> = [0, r - 1].into_iter().chain(1..r - 1).collect();
            let to_last: Vec<usize> = [0].into_iter().chain(2..r).chain([1]).collect();
            let x = movement::transpose(ins[0], &to_first)?;
            let y = linalg::conv(&x, ins[1], ins.get(2).copied(), strides, pads, dilations, *groups)?;
            one(movement::transpose(&y, &to_last))
        }
        MirOp::ConvTranspose { strides, pads, dilations, groups, output_padding } => {
            one(linalg::conv_transpose(ins[0], ins[1], ins.get(2).copied(), strides, pads, dilations, *groups, output_padding))
        }
        MirOp::Pool { kind, kernel, strides, pads, dilations, ceil_mode, count_include_pad } => {
            one(linalg::pool(*kind, ins[0], kernel, strides, pads, dilations, *ceil_mode, *count_include_pad))
        }
        MirOp::PoolNhwc { kind, kernel, strides, pads, dilations, ceil_mode, count_include_pad } => {
            // The same pool with the channels moved second and back.
            let r = ins[0].shape.len();
            let to_first: Vec<usize> = [0, r - 1].into_iter().chain(1..r - 1).collect();
            let to_last: Vec<usize> = [0].into_iter().chain(2..r).chain([1]).collect();
            let x = movement::transpose(ins[0], &to_first)?;
            let y = linalg::pool(*kind, &x, kernel, strides, pads, dilations, *ceil_mode, *count_include_pad)?;
            one(movement::transpose(&y, &to_last))
        }
        MirOp::CumSum { axis, exclusive, reverse } => one(reduce::cumsum(ins[0], *axis, *exclusive, *reverse)),
        MirOp::TopK { axis, k, largest } => reduce::topk(ins[0], *axis, *k, *largest),
        MirOp::NonZero => one(select::nonzero(ins[0])),
        MirOp::Compress { axis } => one(select::compress(ins[0], ins[1], *axis)),
        MirOp::Nms { center_point_box, max_per_class } => select::nms(ins[0], ins[1], ins[2], ins[3], *center_point_box, *max_per_class),
        MirOp::Unique { axis, sorted } => select::unique(ins[0], *axis, *sorted),
        MirOp::Quantize { axis } => one(quant::quantize(ins[0], ins[1], ins[2], *axis, false)),
        MirOp::FakeQuantize { axis } => one(quant::quantize(ins[0], ins[1], ins[2], *axis, true)),
        MirOp::Dequantize { axis } => one(quant::dequantize(ins[0], ins[1], ins[2], *axis)),
        MirOp::WriteRows => one(index::write_rows(ins[0], ins[1], ins[2])),
        MirOp::DequantMatMul | MirOp::DequantGather => Err(format!("{}: weights must be a constant", op.kind())),
        MirOp::AllReduce { .. } | MirOp::AllGather { .. } | MirOp::ReduceScatter { .. } | MirOp::Send { .. } | MirOp::Recv { .. } => {
            Err(format!("{}: a collective is run by rlx_interp::ranks, with the other ranks", op.kind()))
        }
        MirOp::Loop { max_trips, carried, body } => region::run_loop(*max_trips, *carried, &body[0], ins),
        MirOp::If { branches } => region::run_if(&branches[..], ins),
    }
}
