//! Per-op translations of ONNX nodes into HIR: block ops where HIR has one, MIR primitive
//! compositions otherwise. Compile-time operands (shapes, axes, pads, k …) come from constants.
//!
//! One file per op family, each with the op types it translates (`OPS`) and its `convert`:
//! `elementwise.rs`, `linear.rs` (MatMul, Gemm, Einsum, Attention), `cast.rs` (Cast, CastLike; the narrow
//! types), `shape.rs` (shape and data
//! movement), `generate.rs` (Constant, Range, OneHot …), `nn.rs` (convolution, pooling), `norm.rs`
//! (normalizations, softmax, losses), `reduce.rs`, `quant.rs`, `resize.rs` (Resize, Upsample), `rnn.rs` (RNN, GRU, LSTM), `rotary.rs` (RotaryEmbedding), `spectral.rs` (DFT, STFT),
//! `control.rs` (If, Loop, Scan: subgraphs translated inline, loops unrolled), `sample.rs` (GridSample, AffineGrid: the bilinear/cubic sampler), `roi_align.rs` and `deform_conv.rs` (on that sampler),
//! `state.rs` (TensorScatter, CausalConvWithState), `optional.rs` (OptionalHasElement/GetElement on tensors), `select.rs` (NonMaxSuppression, NonZero, Unique, run-time Compress: outputs of data-dependent length); shared helpers in `build.rs`.

mod build;
mod cast;
mod control;
mod deform_conv;
mod region;
mod elementwise;
mod generate;
mod linear;
mod nn;
mod norm;
mod optional;
mod quant;
mod reduce;
mod resize;
mod rnn;
mod roi_align;
mod rotary;
mod sample;
mod select;
mod shape;
mod spectral;
mod state;


use super::proto::NodeProto;
use super::{Attrs, Ctx};
use rlx_ir::ValueId;

type R = Result<Vec<ValueId>, String>;

/// The op families, each with the op types it translates and its translation.
const FAMILIES: &[(&[&str], fn(&mut Ctx, &Node) -> R)] = &[
    (elementwise::OPS, elementwise::convert),
    (cast::OPS, cast::convert),
    (control::OPS, control::convert),
    (linear::OPS, linear::convert),
    (generate::OPS, generate::convert),
    (shape::OPS, shape::convert),
    (nn::OPS, nn::convert),
    (norm::OPS, norm::convert),
    (reduce::OPS, reduce::convert),
    (quant::OPS, quant::convert),
    (resize::OPS, resize::convert),
    (rnn::OPS, rnn::convert),
    (rotary::OPS, rotary::convert),
    (sample::OPS, sample::convert),
    (roi_align::OPS, roi_align::convert),
    (deform_conv::OPS, deform_conv::convert),
    (spectral::OPS, spectral::convert),
    (state::OPS, state::convert),
    (optional::OPS, optional::convert),
    (select::OPS, select::convert),
];

/// Whether the importer translates this op (default ONNX domain only).
pub fn is_onnx_supported(op_type: &str, domain: &str) -> bool {
    (domain.is_empty() || domain == "ai.onnx") && FAMILIES.iter().any(|(ops, _)| ops.contains(&op_type))
}

/// Every ONNX op type the importer translates, sorted.
pub fn supported_onnx_ops() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = FAMILIES.iter().flat_map(|(ops, _)| ops.iter().copied()).collect();
    v.sort();
    v
}

/// The ONNX node being translated, and what every op family reads of it.
struct Node<'n> {
    proto: &'n NodeProto,
    a: Attrs<'n>,
    op: &'n str,
    opset: i64,
    ins: &'n [Option<ValueId>],
    /// Outputs the model uses (trailing unnamed ones dropped).
    nout: usize,
}

impl Node<'_> {
    fn inp(&self, i: usize) -> Option<ValueId> {
        self.ins.get(i).copied().flatten()
    }
    fn req(&self, i: usize) -> Result<ValueId, String> {
        self.inp(i).ok_or_else(|| format!("{}: input {i} is required", self.op))
    }
}

fn one(v: ValueId) -> R {
    Ok(vec![v])
}

pub(crate) fn convert(cx: &mut Ctx, n: &NodeProto, ins: &[Option<ValueId>]) -> R {
    let nd = Node {
        proto: n,
        a: Attrs(n),
        op: n.op_type.as_str(),
        opset: cx.opset,
        ins,
        nout: n.output.iter().rposition(|o| !o.is_empty()).map(|p| p + 1).unwrap_or(0),
    };
    match FAMILIES.iter().find(|(ops, _)| ops.contains(&nd.op)) {
        Some((_, convert)) => convert(cx, &nd),
        None => Err(format!("unsupported op {}", nd.op)),
    }
}
