//! Optional values on plain tensors: OptionalHasElement (true for a tensor, false for an absent input)
//! and OptionalGetElement (the tensor itself). Optional- and sequence-typed graph values are not
//! represented (the IR has tensors only).

use super::{one, Node, R};
use crate::onnx::Ctx;
use rlx_ir::DType;

pub(super) const OPS: &[&str] = &["OptionalHasElement", "OptionalGetElement"];

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    match nd.op {
        "OptionalHasElement" => {
            let has = nd.inp(0).is_some();
            one(cx.scalar(DType::Bool, if has { 1.0 } else { 0.0 }))
        }
        _ => one(nd.inp(0).ok_or("OptionalGetElement of an empty optional")?),
    }
}
