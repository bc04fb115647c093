//! Quantization-aware training of a QDQ model: each `dequantize(quantize(x, s, z), s, z)` pair (an
//! ONNX QuantizeLinear → DequantizeLinear pair with one scale and zero point) becomes one
//! `fake_quantize(x, s, z)` — the same values, and an op with a gradient (the straight-through
//! estimator), so the weights train under the quantization the model declares. Its scales stay the
//! model's constants, or with `TrainOptions::learn_scales` are parameters trained by LSQ's estimator
//! (zero points are never trained), so the trained model, written back as ONNX with its initializers
//! replaced, deploys to the int8 targets with exactly the scales training ended with
//! (`rlx_opt::quantize_qdq`).

use crate::fold::{dce, rebuild};
use rlx_ir::{Def, Mir, MirOp, ValueId};

/// Whether `a` and `b` are the same value or equal constants.
fn same(g: &Mir, a: ValueId, b: ValueId) -> bool {
    a == b || matches!((g.const_data(a), g.const_data(b)), (Some(x), Some(y)) if x == y)
}

/// The pairs of `g` fused into `fake_quantize` (a graph without pairs comes back unchanged).
pub fn fake_quantize_pairs(g: &Mir) -> Mir {
    let pair = |ni: usize| -> Option<ValueId> {
        let n = &g.nodes[ni];
        let MirOp::Dequantize { axis } = n.op else { return None };
        let Def::Node(q, _) = g.value(n.inputs[0]).def else { return None };
        let qn = g.node(q);
        let ok = qn.op == (MirOp::Quantize { axis }) && same(g, qn.inputs[1], n.inputs[1]) && same(g, qn.inputs[2], n.inputs[2]);
        ok.then_some(qn.inputs[0])
    };
    if !(0..g.nodes.len()).any(|ni| pair(ni).is_some()) {
        return g.clone();
    }
    dce(&rebuild(g, |out, ni, ins, map| {
        let x = map[pair(ni)?.index()]?;
        let n = &g.nodes[ni];
        let MirOp::Dequantize { axis } = n.op else { return None };
        Some(out.push_node(&n.name, MirOp::FakeQuantize { axis }, &[x, ins[1], ins[2]], vec![g.ty(n.outputs[0]).clone()]))
    }))
}
