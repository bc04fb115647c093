//! 1-D convolutions as 2-D ones over a single row: `x [N, C, L]` viewed as `[N, C, 1, L]`, the
//! weight `[M, C/g, k]` as `[M, C/g, 1, k]`, the output viewed back. The planner's vectorized window
//! kernels (depthwise and grouped, `plan/window.rs`, `dw_padded.rs`) are 2-D; a 1-D depthwise
//! convolution (a Conformer's or wav2vec's conv module) otherwise ran in the per-output loops: 256
//! channels, k 5, 1000 steps, one thread, CPU time, 0.50 ms against ONNX Runtime's 0.28. Dense 1-D
//! ones run on the GEMM at any rank, but only a 2-D one whose output rows are as wide as its input's
//! packs its B chunks from x itself (`conv_gemm.rs`'s `Direct`) instead of an im2col copy: 256 → 256,
//! k 3, 1000 steps under ReLU (one thread, CPU time, `ab.py`) 0.94× the time as 1-D (ORT 1.03×).

use crate::fold::rebuild;
use rlx_ir::{DType, Dim, Mir, MirOp};

/// The graph with each float 1-D convolution rewritten (module doc), or `None` when it has none.
/// Run constant folding afterwards to make the reshaped weights constants again.
pub fn conv1d_as_2d(g: &Mir) -> Option<Mir> {
    let pick = |n: &rlx_ir::Node<MirOp>| {
        let MirOp::Conv { strides, pads, dilations, .. } = &n.op else { return false };
        let fixed = |v| g.ty(v).shape.as_fixed().is_some_and(|s| s.len() == 3);
        strides.len() == 1 && pads.len() == 2 && dilations.len() == 1 && fixed(n.inputs[0]) && fixed(n.inputs[1]) && fixed(n.outputs[0])
            && matches!(g.ty(n.outputs[0]).dtype, DType::F32 | DType::F64)
    };
    if !g.nodes.iter().any(pick) {
        return None;
    }
    Some(rebuild(g, |out, ni, ins, _| {
        let n = &g.nodes[ni];
        if !pick(n) {
            return None;
        }
        let MirOp::Conv { strides, pads, dilations, groups } = &n.op else { return None };
        let dims = |v| -> Vec<Dim> {
            let s = g.ty(v).shape.as_fixed().unwrap_or_default();
            vec![Dim::Fixed(s[0] as u64), Dim::Fixed(s[1] as u64), Dim::Fixed(1), Dim::Fixed(s[2] as u64)]
        };
        let name = n.name.as_str();
        let x = out.add1(name, MirOp::Reshape { shape: dims(n.inputs[0]) }, &[ins[0]]).ok()?;
        let w = out.add1(name, MirOp::Reshape { shape: dims(n.inputs[1]) }, &[ins[1]]).ok()?;
        let mut cin = vec![x, w];
        cin.extend(ins.get(2).copied());
        let op = MirOp::Conv { strides: vec![1, strides[0]], pads: vec![0, pads[0], 0, pads[1]], dilations: vec![1, dilations[0]], groups: *groups };
        let y = out.add1(name, op, &cin).ok()?;
        let back = g.ty(n.outputs[0]).shape.as_fixed()?.iter().map(|&d| Dim::Fixed(d as u64)).collect();
        let y = out.add1(name, MirOp::Reshape { shape: back }, &[y]).ok()?;
        (out.ty(y) == g.ty(n.outputs[0])).then(|| vec![y])
    }))
}
