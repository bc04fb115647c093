//! `rlxc train --qat`: a float ONNX model prepared for quantization-aware training — QuantizeLinear →
//! DequantizeLinear pairs inserted where the int8 targets read them (`rlx_opt::quantize_qdq`), with
//! per-tensor scales and zero points from the float model:
//!
//! - each graph input (f32) and each f32 graph output: int8, asymmetric over [min(0, lo), max(0, hi)]
//!   of the values observed when the reference interpreter runs the float model on the training split
//!   (scale (hi − lo) / 255, zero point round(−128 − lo / scale));
//! - every MatMul / Gemm weight that is an f32 initializer (its first two inputs) and every Conv
//!   weight that is one (its second input; the bias stays float, the int8 targets round it to
//!   s_x·s_w): int8, symmetric, per tensor, scale max|w| / 127, zero point 0 — the weight stays a float
//!   initializer under QuantizeLinear, so training updates it and `--onnx` writes it back in place;
//! - every Relu output (not a graph output): int8, asymmetric over its observed range. What follows a
//!   Relu and is exact on int8 (MaxPool, Reshape, Flatten, Transpose) reads the dequantized value and
//!   needs no pair of its own (`rlx_opt::quantize_qdq` keeps the Relu's parameters through it);
//! - every layer output that no Relu follows and that is no graph output (a MatMul / Gemm / Conv with
//!   a paired weight, after its bias Add if one with an initializer follows: Conv -> MaxPool -> Relu):
//!   int8, asymmetric over its observed range, as the int8 layer must end in a requantization.
//!
//! A BatchNormalization is refused, naming the node: the int8 targets fold it into the convolution
//! before it (`rlx_opt::fold_conv_affine`), which a convolution whose weight is already quantized
//! cannot take, so the model must come with it folded into the Conv's weight and bias.
//!
//! A pair for tensor `T` is named `T/quantize`, `T/dequantize` with initializers `T.scale`,
//! `T.zero_point` and the dequantized value `T.dq` (a graph output's producer writes `T.float`).
//! The result is the model's bytes with the pairs; importing them gives the QDQ model that
//! `rlx_opt::train::qat` trains, and they are what `--onnx` writes with the trained initializers.

use crate::cli::Failure;
use rlx_import::proto::{ModelProto, NodeProto, TensorProto, ValueInfoProto};
use rlx_ir::{ConstData, Mir};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

/// What one inserted pair quantizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Input,
    Weight,
    Relu,
    /// A layer's output that no Relu follows (nor is it a graph output).
    Layer,
    Output,
}

/// One inserted pair: the tensor, its role, scale and zero point.
#[derive(Clone, Debug)]
pub struct Pair {
    pub tensor: String,
    pub role: Role,
    pub scale: f32,
    pub zero_point: i8,
}

/// The model as `--qat` trains it.
pub enum Prepared {
    /// The model already has QuantizeLinear nodes: trained under its own pairs.
    AlreadyQdq,
    /// The model's bytes with the pairs inserted, and the pairs in insertion order.
    Inserted { bytes: Vec<u8>, pairs: Vec<Pair> },
}

/// int8 parameters of an activation observed in [lo, hi]: asymmetric over [min(0, lo), max(0, hi)].
pub fn act_params(lo: f64, hi: f64) -> (f32, i8) {
    let (lo, hi) = (lo.min(0.0), hi.max(0.0));
    let scale = if hi > lo { (hi - lo) / 255.0 } else { 1.0 };
    let zp = (-128.0 - lo / scale).round_ties_even().clamp(-128.0, 127.0);
    (scale as f32, zp as i8)
}

/// int8 parameters of a weight: symmetric, scale max|w| / 127 (at least 1e-8 / 127), zero point 0.
pub fn weight_params(w: &[f64]) -> (f32, i8) {
    let m = w.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    ((m.max(1e-8) / 127.0) as f32, 0)
}

/// Prepares the ONNX model at `path` (imported as `float`, the lowered float model with `dims`
/// bound) for quantization-aware training; `train_x` is the training split's samples [N, …].
pub fn prepare(path: &Path, dims: &BTreeMap<String, u64>, float: &Mir, train_x: &ConstData) -> Result<Prepared, Failure> {
    use prost::Message;
    let bytes = std::fs::read(path).map_err(|e| Failure::model(format!("cannot read {}: {e}", path.display())))?;
    let m = ModelProto::decode(&bytes[..]).map_err(|e| Failure::model(format!("{} is not an ONNX model: {e}", path.display())))?;
    let g = m.graph.as_ref().ok_or_else(|| Failure::model(format!("{} has no graph", path.display())))?;
    if g.node.iter().any(|n| n.op_type == "QuantizeLinear") {
        return Ok(Prepared::AlreadyQdq);
    }
    let opset = m.opset_import.iter().find(|o| o.domain.is_empty() || o.domain == "ai.onnx").map(|o| o.version).unwrap_or(0);
    if opset < 10 {
        return Err(Failure::model(format!("--qat: {} imports ONNX opset {opset}, which has no QuantizeLinear (opset 10 or later needed)", path.display())));
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let inits: HashMap<&str, &TensorProto> = g.initializer.iter().map(|t| (t.name.as_str(), t)).collect();
    let named = |want: &str| float.values.iter().find(|v| v.name.as_deref() == Some(want)).map(|v| v.ty.dtype);
    let f32_port = |name: &str| named(name) == Some(rlx_ir::DType::F32);
    let inputs: Vec<&str> = g.input.iter().map(|v| v.name.as_str()).filter(|n| !inits.contains_key(n) && f32_port(n)).collect();
    let outputs: HashSet<&str> = g.output.iter().map(|v| v.name.as_str()).filter(|n| f32_port(n)).collect();
    let relus: Vec<&str> = g.node.iter().filter(|n| n.op_type == "Relu").flat_map(|n| n.output.iter().map(String::as_str)).filter(|r| !outputs.contains(r)).collect();
    if let Some(bn) = g.node.iter().find(|n| n.op_type == "BatchNormalization") {
        let after = g.node.iter().find(|c| c.op_type == "Conv" && bn.input.first().is_some_and(|x| c.output.contains(x))).map(|c| format!(" after Conv '{}'", c.name)).unwrap_or_default();
        return Err(Failure::model(format!(
            "--qat: {} has a BatchNormalization (node '{}'){after}: fold it into the convolution's weight and bias first (w·γ/√(var+ε), (b − mean)·γ/√(var+ε) + β); the int8 targets fold it only into a float convolution, and under --qat the Conv weight is quantized",
            path.display(),
            bn.name
        )));
    }
    // A weight input: MatMul / Gemm inputs 0 and 1, Conv input 1, when it is an f32 initializer.
    fn weight<'a>(inits: &HashMap<&str, &TensorProto>, n: &'a NodeProto, k: usize) -> Option<&'a str> {
        let w = n.input.get(k)?.as_str();
        let slot = match n.op_type.as_str() {
            "MatMul" | "Gemm" => k < 2,
            "Conv" => k == 1,
            _ => false,
        };
        (slot && inits.get(w).is_some_and(|t| t.data_type == 1)).then_some(w)
    }
    let weight = |n, k| weight(&inits, n, k);
    if !g.node.iter().any(|n| (0..2).any(|k| weight(n, k).is_some())) {
        return Err(Failure::model(format!(
            "--qat: {} has nothing to quantize: no MatMul, Gemm or Conv reads an f32 initializer weight (rlxc inserts pairs on those weights, on Relu outputs and on the graph's input and output)",
            path.display()
        )));
    }
    // Layer ends that no Relu follows: a layer's output (after its bias Add, if one with an
    // initializer follows) that is no graph output and not read by a Relu alone (Conv -> MaxPool -> Relu).
    let readers = |t: &str| g.node.iter().filter(|c| c.input.iter().any(|i| i == t)).collect::<Vec<_>>();
    let mut ends: Vec<&str> = Vec::new();
    for n in g.node.iter().filter(|n| (0..2).any(|k| weight(n, k).is_some())) {
        let Some(mut v) = n.output.first().map(String::as_str) else { continue };
        if let [add] = readers(v)[..] {
            if add.op_type == "Add" && add.input.iter().any(|i| inits.contains_key(i.as_str())) {
                v = add.output[0].as_str();
            }
        }
        let by_relu = matches!(readers(v)[..], [r] if r.op_type == "Relu");
        if !outputs.contains(v) && !by_relu && !ends.contains(&v) {
            ends.push(v);
        }
    }
    let probed: Vec<&str> = relus.iter().chain(&ends).copied().collect();
    let ranges = observe(&m, base, dims, &probed, train_x)?;
    let x_range = {
        let v = train_x.to_f64_vec();
        v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)))
    };
    let range = |t: &str| -> (f64, f64) {
        if inputs.contains(&t) {
            x_range
        } else {
            ranges[t]
        }
    };

    // The graph with the pairs, the script of the module doc.
    let mut out = m.clone();
    let og = out.graph.as_mut().ok_or_else(|| Failure::model("the ONNX model has no graph"))?;
    let taken: HashSet<String> = g.node.iter().flat_map(|n| n.output.iter().cloned()).chain(g.input.iter().map(|v| v.name.clone())).chain(g.initializer.iter().map(|t| t.name.clone())).collect();
    let mut nodes: Vec<NodeProto> = Vec::new();
    let mut pairs: Vec<Pair> = Vec::new();
    let mut extra: Vec<TensorProto> = Vec::new();
    let mut pair = |src: &str, dst: &str, tensor: &str, role: Role, (scale, zero_point): (f32, i8), nodes: &mut Vec<NodeProto>| -> Result<(), Failure> {
        let (s, z, q) = (format!("{tensor}.scale"), format!("{tensor}.zero_point"), format!("{tensor}.q"));
        if let Some(clash) = [&s, &z, &q, &dst.to_string()].into_iter().find(|n| taken.contains(n.as_str()) && n.as_str() != tensor) {
            return Err(Failure::model(format!("--qat: cannot insert the pair of '{tensor}': the model already has a tensor named '{clash}'")));
        }
        extra.push(TensorProto { name: s.clone(), data_type: 1, raw_data: scale.to_le_bytes().to_vec(), ..Default::default() });
        extra.push(TensorProto { name: z.clone(), data_type: 3, raw_data: vec![zero_point as u8], ..Default::default() });
        let node = |op: &str, ins: [&str; 3], o: &str, name: String| NodeProto { input: ins.map(String::from).to_vec(), output: vec![o.into()], name, op_type: op.into(), ..Default::default() };
        nodes.push(node("QuantizeLinear", [src, &s, &z], &q, format!("{tensor}/quantize")));
        nodes.push(node("DequantizeLinear", [&q, &s, &z], dst, format!("{tensor}/dequantize")));
        pairs.push(Pair { tensor: tensor.into(), role, scale, zero_point });
        Ok(())
    };
    let mut rename: HashMap<String, String> = HashMap::new();
    for &x in &inputs {
        rename.insert(x.into(), format!("{x}.dq"));
        pair(x, &format!("{x}.dq"), x, Role::Input, act_params(range(x).0, range(x).1), &mut nodes)?;
    }
    for n in &g.node {
        let mut node = n.clone();
        for (k, i) in node.input.iter_mut().enumerate() {
            if let Some(w) = (k < 2).then(|| weight(n, k)).flatten() {
                let dq = format!("{w}.dq");
                if !rename.contains_key(w) {
                    let values = rlx_import::tensor_from_proto(inits[w], Some(base)).map_err(|e| Failure::model(format!("--qat: initializer '{w}': {e}")))?;
                    pair(w, &dq, w, Role::Weight, weight_params(&values.to_f64_vec()), &mut nodes)?;
                    rename.insert(w.into(), dq);
                }
            }
            if let Some(r) = rename.get(i.as_str()) {
                *i = r.clone();
            }
        }
        for o in node.output.iter_mut().filter(|o| outputs.contains(o.as_str())) {
            *o = format!("{o}.float");
        }
        nodes.push(node);
        for o in &n.output {
            if outputs.contains(o.as_str()) {
                let (lo, hi) = ranges[o.as_str()];
                pair(&format!("{o}.float"), o, o, Role::Output, act_params(lo, hi), &mut nodes)?;
            } else if relus.contains(&o.as_str()) || ends.contains(&o.as_str()) {
                rename.insert(o.clone(), format!("{o}.dq"));
                let (lo, hi) = range(o);
                let role = if relus.contains(&o.as_str()) { Role::Relu } else { Role::Layer };
                pair(o, &format!("{o}.dq"), o, role, act_params(lo, hi), &mut nodes)?;
            }
        }
    }
    og.node = nodes;
    og.initializer.extend(extra);
    Ok(Prepared::Inserted { bytes: out.encode_to_vec(), pairs })
}

/// Observed [min, max] of every f32 graph output and of each tensor in `extra` (made graph outputs
/// of a probe copy of `m`): the float model on every row of `train_x` on the reference interpreter,
/// batch by batch at the model's batch size (the last partial batch filled up with the first rows,
/// which leaves the ranges unchanged).
fn observe(m: &ModelProto, base: &Path, dims: &BTreeMap<String, u64>, extra: &[&str], train_x: &ConstData) -> Result<HashMap<String, (f64, f64)>, Failure> {
    use prost::Message;
    let mut probe = m.clone();
    let pg = probe.graph.as_mut().ok_or_else(|| Failure::model("the ONNX model has no graph"))?;
    pg.output.extend(extra.iter().map(|&r| ValueInfoProto { name: r.into(), ..Default::default() }));
    let names: Vec<String> = pg.output.iter().map(|v| v.name.clone()).collect();
    let opts = rlx_import::ImportOptions { dims: dims.clone(), bind: BTreeMap::new() };
    let hir = rlx_import::load_onnx_bytes(&probe.encode_to_vec(), Some(base), &opts).map_err(|e| Failure::model(crate::cli::problem_list("--qat: cannot import the range probe", &e.problems)))?;
    let mir = rlx_opt::lower(&hir).map_err(|p| Failure::model(crate::cli::problem_list("--qat: cannot lower the range probe", &p)))?;
    let xt = mir.ty(mir.inputs[0]).clone();
    let shape = xt.shape.as_fixed().ok_or_else(|| Failure::model(format!("--qat: the model input {xt} needs fixed dims")))?;
    let batch = shape.first().copied().unwrap_or(1).max(1);
    let n = train_x.shape[0];
    let per = train_x.data.len() / n.max(1);
    let rows = train_x.data.bytes();
    let mut ranges: HashMap<String, (f64, f64)> = HashMap::new();
    for start in (0..n).step_by(batch) {
        let mut buf = Vec::with_capacity(batch * per);
        for r in start..start + batch {
            let r = if r < n { r } else { r % n };
            buf.extend_from_slice(&rows[r * per..(r + 1) * per]);
        }
        let x = ConstData::new(xt.dtype, shape.clone(), rlx_ir::Blob::from_vec(buf)).map_err(|e| Failure::model(format!("--qat: {e}")))?;
        let outs = rlx_interp::run(&mir, &[x]).map_err(|e| Failure::model(format!("--qat: running the float model for its ranges: {e}")))?;
        for (name, o) in names.iter().zip(outs) {
            let r = ranges.entry(name.clone()).or_insert((f64::INFINITY, f64::NEG_INFINITY));
            for v in o.to_f64_vec() {
                *r = (r.0.min(v), r.1.max(v));
            }
        }
    }
    Ok(ranges)
}
