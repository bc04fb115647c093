//! The trained parameters out of `rlxc train`: a safetensors file (one tensor per parameter, named
//! as the model names it) and, with `--onnx FILE`, the ONNX model it was trained from with those
//! initializers replaced by the trained values (stored inline as raw data).

use crate::cli::Failure;
use rlx_ir::{ConstData, DType};
use std::path::Path;

fn st_dtype(d: DType) -> Option<safetensors::Dtype> {
    use safetensors::Dtype as S;
    Some(match d {
        DType::F32 => S::F32,
        DType::F16 => S::F16,
        DType::BF16 => S::BF16,
        DType::F64 => S::F64,
        _ => return None,
    })
}

/// `params` as a safetensors file.
pub fn safetensors(path: &Path, params: &[(String, ConstData)]) -> Result<(), Failure> {
    let mut views = Vec::new();
    for (name, c) in params {
        let dt = st_dtype(c.dtype).ok_or_else(|| Failure::model(format!("parameter '{name}' is {}, which safetensors cannot hold", c.dtype.name())))?;
        let v = safetensors::tensor::TensorView::new(dt, c.shape.clone(), c.data.bytes()).map_err(|e| Failure::model(format!("parameter '{name}': {e}")))?;
        views.push((name.clone(), v));
    }
    let bytes = safetensors::serialize(views, None).map_err(|e| Failure::model(format!("cannot serialize the parameters: {e}")))?;
    std::fs::write(path, bytes).map_err(|e| Failure::model(format!("cannot write {}: {e}", path.display())))
}

/// The ONNX model `bytes` (read from `model`, or `rlxc train --qat`'s model with its pairs) with the
/// initializers named in `params` replaced, written to `out`.
pub fn onnx(model: &Path, bytes: &[u8], out: &Path, params: &[(String, ConstData)]) -> Result<(), Failure> {
    use prost::Message;
    let mut m = rlx_import::proto::ModelProto::decode(&bytes[..]).map_err(|e| Failure::model(format!("{} is not an ONNX model: {e}", model.display())))?;
    let g = m.graph.as_mut().ok_or_else(|| Failure::model(format!("{} has no graph", model.display())))?;
    for (name, c) in params {
        let t = g.initializer.iter_mut().find(|t| &t.name == name).ok_or_else(|| {
            Failure::usage(format!("--onnx: parameter '{name}' is not an initializer of {} (only initializers are rewritten)", model.display()))
        })?;
        let dims: Vec<i64> = c.shape.iter().map(|&d| d as i64).collect();
        if t.dims != dims {
            return Err(Failure::model(format!("--onnx: initializer '{name}' has dims {:?}, the trained parameter {:?}", t.dims, c.shape)));
        }
        t.raw_data = c.data.bytes().to_vec();
        t.float_data.clear();
        t.double_data.clear();
        t.int32_data.clear();
        t.external_data.clear();
        t.data_location = 0;
    }
    std::fs::write(out, m.encode_to_vec()).map_err(|e| Failure::model(format!("cannot write {}: {e}", out.display())))
}
