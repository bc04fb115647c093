//! ONNX → HIR. Decoding (prost), tensors (raw, typed and external data), graph inputs and
//! initializers, and the node loop; the per-op translations live in `ops`, the import-time constant
//! evaluator in `fold`.

pub mod proto;

mod fold;
mod narrow;
mod ops;
mod rows;

use crate::{ImportError, ImportOptions, ImportProblem, OnnxSummary};
use proto::tensor_proto::{DataLocation, DataType};
use proto::{ModelProto, NodeProto, TensorProto, TypeProto};
use prost::Message;
use rlx_ir::{Blob, ConstData, DType, Def, Dim, Hir, HirOp, MirOp, OpSet, Shape, TensorType, ValueId};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Component, Path};
use std::sync::Arc;

pub use ops::{is_onnx_supported, supported_onnx_ops};

pub(crate) fn decode_model(bytes: &[u8]) -> Result<ModelProto, ImportError> {
    if bytes.is_empty() {
        return Err(ImportError::one("not a valid ONNX protobuf: the file is empty"));
    }
    let m = ModelProto::decode(bytes).map_err(|e| ImportError::one(format!("not a valid ONNX protobuf ({} bytes): {e}", bytes.len())))?;
    if m.graph.is_none() {
        return Err(ImportError::one("not a valid ONNX protobuf: the model has no graph"));
    }
    Ok(m)
}

fn onnx_type_name(t: i32) -> String {
    match DataType::try_from(t) {
        Ok(d) => format!("{d:?}").to_lowercase(),
        Err(_) => format!("#{t}"),
    }
}

/// ONNX element type → rlxc dtype.
pub fn dtype_from_onnx(t: i32) -> Result<DType, String> {
    Ok(match DataType::try_from(t) {
        Ok(DataType::Float) => DType::F32,
        Ok(DataType::Uint8) => DType::U8,
        Ok(DataType::Int8) => DType::I8,
        Ok(DataType::Uint16) => DType::U16,
        Ok(DataType::Int16) => DType::I16,
        Ok(DataType::Int32) => DType::I32,
        Ok(DataType::Int64) => DType::I64,
        Ok(DataType::Bool) => DType::Bool,
        Ok(DataType::Float16) => DType::F16,
        Ok(DataType::Double) => DType::F64,
        Ok(DataType::Uint32) => DType::U32,
        Ok(DataType::Uint64) => DType::U64,
        Ok(DataType::Bfloat16) => DType::BF16,
        _ => match narrow::Narrow::from_onnx(t) {
            Some(n) => n.carrier(),
            None => return Err(format!("unsupported dtype {}", onnx_type_name(t))),
        },
    })
}

/// Reads a tensor of a narrow type (float8, float4, int4, int2 …: `narrow.rs`) widened into its carrier dtype.
fn narrow_from_proto(t: &TensorProto, n: narrow::Narrow, shape: Vec<usize>, numel: usize) -> Result<ConstData, String> {
    let want = n.packed_len(numel);
    let name = onnx_type_name(t.data_type);
    if t.data_location == DataLocation::External as i32 {
        return Err(format!("unsupported: external data of dtype {name}"));
    }
    let packed: Vec<u8> = if !t.raw_data.is_empty() || numel == 0 {
        if t.raw_data.len() != want {
            return Err(format!("raw_data has {} bytes, but {name}{shape:?} needs {want}", t.raw_data.len()));
        }
        t.raw_data.clone()
    } else {
        if t.int32_data.len() != want {
            return Err(format!("int32_data has {} values, but {name}{shape:?} needs {want}", t.int32_data.len()));
        }
        t.int32_data.iter().map(|&x| x as u8).collect()
    };
    ConstData::new(n.carrier(), shape, Blob::from_vec(n.widen(&packed, numel)))
}

/// Checks an external-data location: relative, inside the model's folder.
fn safe_relative(loc: &str) -> Result<&Path, String> {
    let p = Path::new(loc);
    if p.is_absolute() || loc.starts_with('/') || loc.starts_with('\\') {
        return Err(format!("external data location '{loc}' is an absolute path"));
    }
    for c in p.components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            _ => return Err(format!("external data location '{loc}' escapes the model's folder")),
        }
    }
    Ok(p)
}

/// Decodes a TensorProto (raw, typed or external data). Every size is checked against the bytes
/// actually present before anything is allocated.
pub fn tensor_from_proto(t: &TensorProto, base_dir: Option<&Path>) -> Result<ConstData, String> {
    let dtype = dtype_from_onnx(t.data_type)?;
    let mut shape = Vec::with_capacity(t.dims.len().min(64));
    let mut numel: usize = 1;
    for &d in &t.dims {
        let du = usize::try_from(d).map_err(|_| format!("negative dim {d} in {:?}", t.dims))?;
        numel = numel.checked_mul(du).ok_or_else(|| format!("dims {:?} overflow the element count", t.dims))?;
        shape.push(du);
    }
    if let Some(n) = narrow::Narrow::from_onnx(t.data_type) {
        if t.segment.is_some() {
            return Err("segmented tensors are not supported".into());
        }
        return narrow_from_proto(t, n, shape, numel);
    }
    let nbytes = dtype.bytes_for(numel).ok_or_else(|| format!("dims {:?} overflow the byte size", t.dims))?;
    if t.segment.is_some() {
        return Err("segmented tensors are not supported".into());
    }
    if t.data_location == DataLocation::External as i32 {
        let base = base_dir.ok_or("external data, but the model was not loaded from a file")?;
        let (mut loc, mut off, mut len) = (None, 0u64, None);
        for kv in &t.external_data {
            match kv.key.as_str() {
                "location" => loc = Some(kv.value.clone()),
                "offset" => off = kv.value.parse().map_err(|_| format!("external data offset '{}' is not a number", kv.value))?,
                "length" => len = Some(kv.value.parse::<u64>().map_err(|_| format!("external data length '{}' is not a number", kv.value))?),
                _ => {}
            }
        }
        let loc = loc.ok_or("external data without a location")?;
        let rel = safe_relative(&loc)?;
        let len = len.unwrap_or(nbytes as u64);
        if len != nbytes as u64 {
            return Err(format!("external data length {len} does not match {dtype}{shape:?} ({nbytes} bytes)"));
        }
        let path = base.join(rel);
        let file = std::fs::File::open(&path).map_err(|e| format!("cannot open external data '{loc}': {e}"))?;
        let size = file.metadata().map_err(|e| format!("external data '{loc}': {e}"))?.len();
        let end = off.checked_add(len).ok_or("external data offset + length overflows")?;
        if end > size {
            return Err(format!("external data '{loc}': bytes {off}..{end} lie beyond the end of the file ({size} bytes)"));
        }
        if len == 0 {
            return ConstData::new(dtype, shape, Blob::from_vec(Vec::new()));
        }
        // SAFETY: the mapping is read-only; a file changed underneath us is the usual mmap caveat.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| format!("cannot map external data '{loc}': {e}"))?;
        let blob = Blob::from_owner(Arc::new(map), off as usize, len as usize).ok_or("external data range out of bounds")?;
        return ConstData::new(dtype, shape, blob);
    }
    if !t.raw_data.is_empty() || nbytes == 0 {
        if t.raw_data.len() != nbytes {
            return Err(format!("raw_data has {} bytes, but {dtype}{shape:?} needs {nbytes}", t.raw_data.len()));
        }
        return ConstData::new(dtype, shape, Blob::from_vec(t.raw_data.clone()));
    }
    let count = |n: usize, field: &str| {
        if n != numel {
            Err(format!("{field} has {n} values, but dims {:?} need {numel}", t.dims))
        } else {
            Ok(())
        }
    };
    let present = match dtype {
        DType::F32 => t.float_data.len(),
        DType::F64 => t.double_data.len(),
        DType::I64 => t.int64_data.len(),
        DType::U64 | DType::U32 => t.uint64_data.len(),
        _ => t.int32_data.len(),
    };
    if present != numel {
        return Err(format!("tensor data has {present} values, but dims {:?} need {numel}", t.dims));
    }
    let mut out = Vec::with_capacity(nbytes);
    match dtype {
        DType::F32 => {
            count(t.float_data.len(), "float_data")?;
            t.float_data.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
        }
        DType::F64 => {
            count(t.double_data.len(), "double_data")?;
            t.double_data.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
        }
        DType::I64 => {
            count(t.int64_data.len(), "int64_data")?;
            t.int64_data.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
        }
        DType::U64 | DType::U32 => {
            count(t.uint64_data.len(), "uint64_data")?;
            for &x in &t.uint64_data {
                if dtype == DType::U64 {
                    out.extend_from_slice(&x.to_le_bytes())
                } else {
                    out.extend_from_slice(&(x as u32).to_le_bytes())
                }
            }
        }
        DType::I32 | DType::I16 | DType::U16 | DType::I8 | DType::U8 | DType::Bool | DType::F16 | DType::BF16 => {
            count(t.int32_data.len(), "int32_data")?;
            for &x in &t.int32_data {
                match dtype {
                    DType::I32 => out.extend_from_slice(&x.to_le_bytes()),
                    DType::I16 | DType::U16 | DType::F16 | DType::BF16 => out.extend_from_slice(&(x as u16).to_le_bytes()),
                    DType::Bool => out.push((x != 0) as u8),
                    _ => out.push(x as u8),
                }
            }
        }
        _ => return Err(format!("unsupported dtype {dtype}")),
    }
    ConstData::new(dtype, shape, Blob::from_vec(out))
}

/// The ONNX element type of a tensor-typed value.
fn elem_type(tp: Option<&TypeProto>) -> Option<i32> {
    match tp.and_then(|t| t.value.as_ref()) {
        Some(proto::type_proto::Value::TensorType(t)) => Some(t.elem_type),
        _ => None,
    }
}

/// (dtype, dims) of a tensor-typed value, with symbolic and unknown dims named.
fn value_type(name: &str, tp: Option<&TypeProto>, dims: &BTreeMap<String, u64>) -> Result<TensorType, String> {
    use proto::tensor_shape_proto::dimension::Value as D;
    use proto::type_proto::Value as V;
    let t = match tp.and_then(|t| t.value.as_ref()) {
        Some(V::TensorType(t)) => t,
        Some(V::SequenceType(_)) => return Err("unsupported type: sequence".into()),
        Some(V::MapType(_)) => return Err("unsupported type: map".into()),
        Some(V::OptionalType(_)) => return Err("unsupported type: optional".into()),
        Some(V::SparseTensorType(_)) => return Err("unsupported type: sparse tensor".into()),
        Some(V::OpaqueType(_)) => return Err("unsupported type: opaque".into()),
        None => return Err(format!("value '{name}' has no type")),
    };
    let dtype = dtype_from_onnx(t.elem_type)?;
    let shape = t.shape.as_ref().ok_or_else(|| format!("value '{name}' has unknown rank"))?;
    let mut out = Vec::new();
    for (i, d) in shape.dim.iter().enumerate() {
        out.push(match &d.value {
            Some(D::DimValue(v)) if *v >= 0 => Dim::Fixed(*v as u64),
            Some(D::DimValue(v)) => return Err(format!("value '{name}' has negative dim {v}")),
            Some(D::DimParam(p)) if !p.is_empty() => Dim::Sym(p.clone()).bind(dims),
            _ => Dim::Sym(format!("{name}_d{i}")).bind(dims),
        });
    }
    Ok(TensorType::new(dtype, Shape(out)))
}

/// Import state: the graph being built and the ONNX name → value map.
pub(crate) struct Ctx<'a> {
    pub g: Hir,
    pub names: HashMap<String, ValueId>,
    pub opset: i64,
    /// Name used for the HIR nodes of the ONNX node being translated.
    pub cur: String,
    pub base_dir: Option<&'a Path>,
    /// Values of a narrow ONNX type (float8, int4 …) held widened in their carrier dtype.
    pub narrow: HashMap<ValueId, narrow::Narrow>,
    /// Subgraph nodes translated so far by unrolled control flow, and the product of the trip counts
    /// of the loops being unrolled now (`ops/control.rs` bounds their product up front).
    pub unrolled: usize,
    pub unroll_scale: usize,
    /// Values of data-dependent length: their padded axis and count (`rows.rs`).
    pub rows: HashMap<ValueId, rlx_ir::bounded::Row>,
    /// Rows the node being translated produced, registered once it is done (`rows::propagate`).
    pub seed_rows: Vec<(ValueId, rlx_ir::bounded::Row)>,
}

/// Fold only small constants at import time.
pub(crate) const FOLD_LIMIT: usize = 1 << 20;

impl<'a> Ctx<'a> {
    pub fn ty(&self, v: ValueId) -> &TensorType {
        self.g.ty(v)
    }
    pub fn rank(&self, v: ValueId) -> usize {
        self.g.ty(v).shape.rank()
    }
    pub fn dtype(&self, v: ValueId) -> DType {
        self.g.ty(v).dtype
    }
    pub fn dims(&self, v: ValueId) -> Vec<Dim> {
        self.g.ty(v).shape.0.clone()
    }
    /// Static dims, or an error naming the symbolic ones.
    pub fn fixed_dims(&self, v: ValueId, what: &str) -> Result<Vec<usize>, String> {
        let s = &self.g.ty(v).shape;
        s.as_fixed().ok_or_else(|| {
            let syms = s.symbols();
            format!("{what} needs a static shape, got {s} (fix {} with --dim NAME=N)", syms.join(", "))
        })
    }
    pub fn cval(&self, v: ValueId) -> Option<&ConstData> {
        self.g.const_data(v)
    }
    pub fn konst(&mut self, c: ConstData) -> ValueId {
        self.g.add_const(None, c)
    }
    pub fn scalar(&mut self, dt: DType, v: f64) -> ValueId {
        self.konst(ConstData::scalar(dt, v))
    }
    pub fn ints_const(&mut self, v: &[i64]) -> ValueId {
        self.konst(ConstData::from_i64(vec![v.len()], v))
    }
    /// A MIR primitive; folded to a constant when every input is a small constant.
    pub fn prim_n(&mut self, op: MirOp, ins: &[ValueId]) -> Result<Vec<ValueId>, String> {
        let consts: Option<Vec<&ConstData>> = ins.iter().map(|&v| self.g.const_data(v)).collect();
        if let Some(cs) = consts {
            if cs.iter().map(|c| c.numel()).sum::<usize>() <= FOLD_LIMIT {
                // Type-check first so folding never hides an error.
                let tys: Vec<&TensorType> = ins.iter().map(|&v| self.g.ty(v)).collect();
                let (lo, hi) = op.arity();
                if ins.len() >= lo && ins.len() <= hi && op.infer(&tys).is_ok() {
                    if let Some(outs) = fold::eval(&op, &cs) {
                        if outs.iter().all(|o| o.numel() <= FOLD_LIMIT) {
                            return Ok(outs.into_iter().map(|c| self.konst(c)).collect());
                        }
                    }
                }
            }
        }
        let name = self.cur.clone();
        self.g.add_node(&name, HirOp::Prim(op), ins).map_err(|e| strip_node(&e, &name))
    }
    pub fn prim(&mut self, op: MirOp, ins: &[ValueId]) -> Result<ValueId, String> {
        Ok(self.prim_n(op, ins)?[0])
    }
    pub fn hir(&mut self, op: HirOp, ins: &[ValueId]) -> Result<ValueId, String> {
        let name = self.cur.clone();
        self.g.add1(&name, op, ins).map_err(|e| strip_node(&e, &name))
    }
    /// Integer values of a constant input, or an error explaining that it must be constant.
    pub fn const_ints(&self, v: ValueId, what: &str) -> Result<Vec<i64>, String> {
        match self.cval(v) {
            Some(c) if !c.dtype.is_quantized_block() => Ok(c.to_i64_vec()),
            _ => Err(self.not_const(v, what)),
        }
    }
    pub fn const_f64s(&self, v: ValueId, what: &str) -> Result<Vec<f64>, String> {
        match self.cval(v) {
            Some(c) if !c.dtype.is_quantized_block() => Ok(c.to_f64_vec()),
            _ => Err(self.not_const(v, what)),
        }
    }
    pub fn not_const(&self, v: ValueId, what: &str) -> String {
        let vname = self.g.value(v).name.clone().unwrap_or_else(|| v.to_string());
        let syms = self.g.input_symbols();
        let hint = if syms.is_empty() {
            String::new()
        } else {
            format!("; it may depend on symbolic dims {}: fix them with --dim NAME=N", syms.join(", "))
        };
        format!("{what} ('{vname}') is not a constant, and rlxc needs its value at compile time{hint}")
    }
}

fn strip_node(e: &str, name: &str) -> String {
    let pre = format!("node '{name}' ");
    match e.strip_prefix(&pre) {
        Some(rest) => match rest.find("): ") {
            Some(i) if rest.starts_with('(') => rest[i + 3..].to_string(),
            _ => rest.to_string(),
        },
        None => e.to_string(),
    }
}

pub(crate) fn import_model(model: &ModelProto, base_dir: Option<&Path>, opts: &ImportOptions) -> Result<Hir, ImportError> {
    let graph = model.graph.as_ref().ok_or_else(|| ImportError::one("the model has no graph"))?;
    let opset = model
        .opset_import
        .iter()
        .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .unwrap_or(1);
    let mut problems = Vec::new();
    let mut cx = Ctx { g: Hir::new(), names: HashMap::new(), opset, cur: String::new(), base_dir, narrow: HashMap::new(), unrolled: 0, unroll_scale: 1, rows: HashMap::new(), seed_rows: Vec::new() };

    // Initializers first: a graph input that is also an initializer is a constant.
    let mut init_names = HashSet::new();
    for t in &graph.initializer {
        init_names.insert(t.name.clone());
        match tensor_from_proto(t, base_dir) {
            Ok(c) => {
                let id = cx.g.add_const(Some(&t.name), c);
                cx.names.insert(t.name.clone(), id);
                if let Some(n) = narrow::Narrow::from_onnx(t.data_type) {
                    cx.narrow.insert(id, n);
                }
            }
            Err(e) => problems.push(ImportProblem::msg(format!("initializer '{}': {e}", t.name))),
        }
    }
    let mut poisoned: HashSet<String> = HashSet::new();
    for t in &graph.sparse_initializer {
        let name = t.values.as_ref().map(|v| v.name.clone()).unwrap_or_default();
        problems.push(ImportProblem::msg(format!("unsupported: sparse initializer '{name}'")));
        poisoned.insert(name);
    }
    for vi in &graph.input {
        if init_names.contains(&vi.name) {
            continue;
        }
        if let Some(c) = opts.bind.get(&vi.name) {
            let id = cx.g.add_const(Some(&vi.name), c.clone());
            cx.names.insert(vi.name.clone(), id);
            if let Some(n) = elem_type(vi.r#type.as_ref()).and_then(narrow::Narrow::from_onnx) {
                cx.narrow.insert(id, n);
            }
            continue;
        }
        match value_type(&vi.name, vi.r#type.as_ref(), &opts.dims) {
            Ok(ty) => {
                let id = cx.g.add_input(&vi.name, ty);
                cx.names.insert(vi.name.clone(), id);
                if let Some(n) = elem_type(vi.r#type.as_ref()).and_then(narrow::Narrow::from_onnx) {
                    cx.narrow.insert(id, n);
                }
            }
            Err(e) => {
                problems.push(ImportProblem::msg(format!("graph input '{}': {e}", vi.name)));
                poisoned.insert(vi.name.clone());
            }
        }
    }

    for (idx, node) in graph.node.iter().enumerate() {
        let name = node_name(node, idx);
        let domain = node.domain.clone();
        let here = |msg: String| ImportProblem {
            node: Some(name.clone()),
            op_type: Some(node.op_type.clone()),
            domain: Some(domain.clone()),
            opset: Some(opset),
            msg,
        };
        if node.input.iter().any(|i| poisoned.contains(i)) {
            poisoned.extend(node.output.iter().cloned());
            continue;
        }
        if !is_onnx_supported(&node.op_type, &node.domain) {
            let d = if node.domain.is_empty() { String::new() } else { format!(" in domain '{}'", node.domain) };
            problems.push(here(format!("unsupported op {}{d}", node.op_type)));
            poisoned.extend(node.output.iter().cloned());
            continue;
        }
        let mut ins = Vec::with_capacity(node.input.len());
        let mut missing = Vec::new();
        for i in &node.input {
            if i.is_empty() {
                ins.push(None);
            } else if let Some(&v) = cx.names.get(i) {
                ins.push(Some(v));
            } else {
                missing.push(i.clone());
            }
        }
        if !missing.is_empty() {
            let list: Vec<String> = missing.iter().map(|m| format!("'{m}'")).collect();
            problems.push(here(format!(
                "input {} is not defined by any earlier node, initializer or graph input (missing initializer, misordered nodes or a cycle)",
                list.join(", ")
            )));
            poisoned.extend(node.output.iter().cloned());
            continue;
        }
        cx.cur = name.clone();
        let nodes_before = cx.g.nodes.len();
        let vals_before = cx.g.values.len();
        let converted = ops::convert(&mut cx, node, &ins).and_then(|outs| rows::propagate(&mut cx, nodes_before).map(|_| outs));
        cx.seed_rows.clear();
        match converted {
            Ok(outs) => {
                let mut bad = None;
                for (k, oname) in node.output.iter().enumerate() {
                    if oname.is_empty() {
                        continue;
                    }
                    match outs.get(k) {
                        Some(&v) => {
                            cx.names.insert(oname.clone(), v);
                        }
                        None => bad = Some(format!("unsupported: output {k} ('{oname}') of {} is not implemented", node.op_type)),
                    }
                }
                if let Some(b) = bad {
                    problems.push(here(b));
                    poisoned.extend(node.output.iter().cloned());
                }
            }
            Err(e) => {
                // Drop whatever the failed translation added (keeps the graph consistent).
                cx.g.nodes.truncate(nodes_before);
                cx.g.values.truncate(vals_before);
                cx.rows.retain(|v, _| v.index() < vals_before);
                problems.push(here(e));
                poisoned.extend(node.output.iter().cloned());
            }
        }
    }

    let mut used_names: HashSet<ValueId> = HashSet::new();
    let mut srcs = Vec::new();
    for vi in &graph.output {
        if poisoned.contains(&vi.name) {
            continue;
        }
        let Some(&v) = cx.names.get(&vi.name) else {
            problems.push(ImportProblem::msg(format!("graph output '{}' is not produced by any node", vi.name)));
            continue;
        };
        let val = cx.g.value(v);
        let fresh = matches!(val.def, Def::Node(..)) && val.name.is_none() && !used_names.contains(&v);
        let out = if fresh {
            v
        } else {
            // An input, constant or already-named value: give the output its own node.
            let shape = cx.g.ty(v).shape.0.clone();
            match cx.g.add1(&vi.name, HirOp::Prim(MirOp::Reshape { shape }), &[v]) {
                Ok(o) => o,
                Err(e) => {
                    problems.push(ImportProblem::msg(format!("graph output '{}': {e}", vi.name)));
                    continue;
                }
            }
        };
        used_names.insert(out);
        cx.g.values[out.index()].name = Some(vi.name.clone());
        cx.g.outputs.push(out);
        srcs.push(v);
    }
    if let Err(e) = rows::close(&mut cx, &srcs) {
        problems.push(ImportProblem::msg(e));
    }
    if problems.is_empty() {
        Ok(cx.g)
    } else {
        Err(ImportError { problems })
    }
}

/// The name the importer gives node `idx`: its own, else `OPTYPE_INDEX`.
fn node_name(node: &NodeProto, idx: usize) -> String {
    if node.name.is_empty() {
        format!("{}_{idx}", node.op_type)
    } else {
        node.name.clone()
    }
}

pub(crate) fn summarize(model: &ModelProto) -> Result<OnnxSummary, ImportError> {
    let graph = model.graph.as_ref().ok_or_else(|| ImportError::one("the model has no graph"))?;
    let none = BTreeMap::new();
    let io = |vis: &[proto::ValueInfoProto], skip: &HashSet<&str>| -> Vec<(String, DType, Vec<Dim>)> {
        vis.iter()
            .filter(|v| !skip.contains(v.name.as_str()))
            .map(|v| match value_type(&v.name, v.r#type.as_ref(), &none) {
                Ok(t) => (v.name.clone(), t.dtype, t.shape.0),
                Err(_) => (v.name.clone(), DType::F32, vec![]),
            })
            .collect()
    };
    let inits: HashSet<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
    let mut op_types = BTreeMap::new();
    let mut node_op_types = BTreeMap::new();
    for (idx, n) in graph.node.iter().enumerate() {
        let k = if n.domain.is_empty() || n.domain == "ai.onnx" { n.op_type.clone() } else { format!("{}:{}", n.domain, n.op_type) };
        node_op_types.insert(node_name(n, idx), k.clone());
        *op_types.entry(k).or_insert(0) += 1;
    }
    let (mut count, mut bytes) = (0u64, 0u64);
    for t in &graph.initializer {
        let n = t.dims.iter().try_fold(1u64, |a, &d| u64::try_from(d).ok().and_then(|d| a.checked_mul(d))).unwrap_or(0);
        count = count.saturating_add(n);
        let sz = dtype_from_onnx(t.data_type).ok().and_then(|d| d.size()).unwrap_or(0) as u64;
        bytes = bytes.saturating_add(n.saturating_mul(sz));
    }
    Ok(OnnxSummary {
        ir_version: model.ir_version,
        producer: if model.producer_version.is_empty() {
            model.producer_name.clone()
        } else {
            format!("{} {}", model.producer_name, model.producer_version)
        },
        opsets: model.opset_import.iter().map(|o| (if o.domain.is_empty() { "ai.onnx".into() } else { o.domain.clone() }, o.version)).collect(),
        inputs: io(&graph.input, &inits),
        outputs: io(&graph.output, &HashSet::new()),
        op_types,
        node_op_types,
        initializers: graph.initializer.len(),
        param_count: count,
        param_bytes: bytes,
    })
}

/// Attribute access for one node.
pub(crate) struct Attrs<'n>(pub &'n NodeProto);

impl<'n> Attrs<'n> {
    fn get(&self, k: &str) -> Option<&'n proto::AttributeProto> {
        self.0.attribute.iter().find(|a| a.name == k)
    }
    pub fn has(&self, k: &str) -> bool {
        self.get(k).is_some()
    }
    pub fn i(&self, k: &str, d: i64) -> i64 {
        self.get(k).map(|a| a.i).unwrap_or(d)
    }
    pub fn f(&self, k: &str, d: f64) -> f64 {
        self.get(k).map(|a| a.f as f64).unwrap_or(d)
    }
    pub fn ints(&self, k: &str) -> Option<Vec<i64>> {
        self.get(k).map(|a| a.ints.clone())
    }
    pub fn floats(&self, k: &str) -> Option<Vec<f64>> {
        self.get(k).map(|a| a.floats.iter().map(|&x| x as f64).collect())
    }
    pub fn strings(&self, k: &str) -> Option<Vec<String>> {
        self.get(k).map(|a| a.strings.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect())
    }
    pub fn s(&self, k: &str) -> Option<String> {
        self.get(k).map(|a| String::from_utf8_lossy(&a.s).into_owned())
    }
    pub fn t(&self, k: &str) -> Option<&'n TensorProto> {
        self.get(k).and_then(|a| a.t.as_ref())
    }
}
