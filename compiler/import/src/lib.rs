//! rlx-import: readers of outside bytes. ONNX (prost messages written by hand in `onnx::proto`) into
//! HIR, safetensors checkpoints, GGUF files (metadata + block-quantized tensors, memory-mapped), and
//! NumPy `.npy` arrays (the inputs and outputs of `rlxc run`).
//!
//! Importers never panic on a user's file and collect every problem they find (each naming the
//! model's own node) instead of stopping at the first.

pub mod npy;
pub mod onnx;
pub mod gguf;
pub mod safetensors;

use rlx_ir::{ConstData, DType, Dim};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

pub use onnx::proto;
pub use onnx::{is_onnx_supported, supported_onnx_ops, tensor_from_proto};

/// Options that change how a model is imported.
#[derive(Default, Clone, Debug)]
pub struct ImportOptions {
    /// Fix symbolic dims by name (`--dim batch=1`).
    pub dims: BTreeMap<String, u64>,
    /// Graph inputs to treat as constants (by input name).
    pub bind: BTreeMap<String, ConstData>,
}

/// One problem found while importing, with as much location as is known.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportProblem {
    pub node: Option<String>,
    pub op_type: Option<String>,
    pub domain: Option<String>,
    pub opset: Option<i64>,
    pub msg: String,
}

impl ImportProblem {
    pub fn msg(msg: impl Into<String>) -> ImportProblem {
        ImportProblem { node: None, op_type: None, domain: None, opset: None, msg: msg.into() }
    }
    /// True when the problem is an op or dtype the importer does not support (as opposed to a
    /// malformed model).
    pub fn is_unsupported(&self) -> bool {
        self.msg.starts_with("unsupported")
    }
}

impl fmt::Display for ImportProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(n) = &self.node {
            write!(f, "node '{n}'")?;
            if let Some(op) = &self.op_type {
                let dom = self.domain.as_deref().filter(|d| !d.is_empty() && *d != "ai.onnx");
                match (dom, self.opset) {
                    (Some(d), Some(v)) => write!(f, " ({d}:{op}, opset {v})")?,
                    (None, Some(v)) => write!(f, " ({op}, opset {v})")?,
                    (Some(d), None) => write!(f, " ({d}:{op})")?,
                    (None, None) => write!(f, " ({op})")?,
                }
            }
            f.write_str(": ")?;
        }
        f.write_str(&self.msg)
    }
}

/// Every problem found while importing.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportError {
    pub problems: Vec<ImportProblem>,
}

impl ImportError {
    pub fn one(msg: impl Into<String>) -> ImportError {
        ImportError { problems: vec![ImportProblem::msg(msg)] }
    }
    /// True when any problem is an unsupported op or dtype.
    pub fn is_unsupported(&self) -> bool {
        self.problems.iter().any(ImportProblem::is_unsupported)
    }
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ImportError {}

/// Imports an ONNX file. External tensor data is resolved relative to the file's folder.
pub fn load_onnx(path: &Path, opts: &ImportOptions) -> Result<rlx_ir::Hir, ImportError> {
    let bytes = std::fs::read(path).map_err(|e| ImportError::one(format!("cannot read {}: {e}", path.display())))?;
    load_onnx_bytes(&bytes, Some(path.parent().unwrap_or(Path::new("."))), opts)
}

/// Imports ONNX protobuf bytes; `base_dir` is where external data lives (none: external data is an error).
pub fn load_onnx_bytes(bytes: &[u8], base_dir: Option<&Path>, opts: &ImportOptions) -> Result<rlx_ir::Hir, ImportError> {
    let model = onnx::decode_model(bytes)?;
    onnx::import_model(&model, base_dir, opts)
}

/// What `rlxc inspect` shows about an ONNX file, read from the protobuf alone.
#[derive(Clone, Debug)]
pub struct OnnxSummary {
    pub ir_version: i64,
    pub producer: String,
    pub opsets: Vec<(String, i64)>,
    pub inputs: Vec<(String, DType, Vec<Dim>)>,
    pub outputs: Vec<(String, DType, Vec<Dim>)>,
    pub op_types: BTreeMap<String, usize>,
    /// Node name (as the importer names it: the node's own name, else `OPTYPE_INDEX`) → op type
    /// (`domain:OpType` outside the default domain). The compiler's nodes carry these names.
    pub node_op_types: BTreeMap<String, String>,
    pub initializers: usize,
    pub param_count: u64,
    pub param_bytes: u64,
}

pub fn onnx_summary(path: &Path) -> Result<OnnxSummary, ImportError> {
    let bytes = std::fs::read(path).map_err(|e| ImportError::one(format!("cannot read {}: {e}", path.display())))?;
    onnx_summary_bytes(&bytes)
}

/// [`onnx_summary`] of ONNX protobuf bytes.
pub fn onnx_summary_bytes(bytes: &[u8]) -> Result<OnnxSummary, ImportError> {
    let model = onnx::decode_model(bytes)?;
    onnx::summarize(&model)
}

/// Reads one serialized `TensorProto` (`.pb` test data of the ONNX backend suite).
pub fn load_tensor_pb(path: &Path) -> Result<ConstData, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_tensor_pb(&bytes, path.parent()).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses one serialized `TensorProto`; `base_dir` is where external data lives (none: an error).
pub fn parse_tensor_pb(bytes: &[u8], base_dir: Option<&Path>) -> Result<ConstData, String> {
    use prost::Message;
    let t = proto::TensorProto::decode(bytes).map_err(|e| format!("not a TensorProto: {e}"))?;
    tensor_from_proto(&t, base_dir)
}
