//! int8 add of two activations (a residual), TFLite / CMSIS-NN style.

use super::{fixed_point, QParams, Q};
use rlx_ir::{BinaryOp, MirOp, NodeId, UnaryOp, ValueId};

impl Q<'_> {
    /// Elementwise add of two int8 activations with their own scales (TFLite / CMSIS-NN's int8 add):
    /// both operands are rescaled to a common scale `2·max(s_a, s_b) / 2^20` with integer fixed-point
    /// multipliers, summed in i64, then requantized to the output (a following relu fused into the
    /// clamp). All integer; one elementwise kernel after planning.
    pub(super) fn add(&mut self, n: NodeId, done: &mut [bool]) -> Result<(), String> {
        let node = self.g.node(n).clone();
        let get = |q: &Q, v: ValueId| {
            q.map.get(&v).copied().ok_or_else(|| {
                "an operand is not quantized (add of two activations expected)".to_string()
            })
        };
        let (a, pa) = get(self, node.inputs[0])?;
        let (b, pb) = get(self, node.inputs[1])?;
        let (ta, tb) = (self.g.ty(node.inputs[0]), self.g.ty(node.inputs[1]));
        if ta.shape != tb.shape {
            return Err(format!(
                "int8 add needs operands of one shape, got {} and {}",
                ta.shape, tb.shape
            ));
        }
        let mut last = node.outputs[0];
        let mut relu = false;
        if let Some(c) = self.only_consumer(last) {
            if self.g.node(c).op == MirOp::Unary(UnaryOp::Relu) {
                relu = true;
                done[c.index()] = true;
                last = self.g.node(c).outputs[0];
            }
        }
        let po = self.params(last);
        let y = self.emit_add(&node.name, (a, pa), (b, pb), po, relu)?;
        self.map.insert(last, (y, po));
        Ok(())
    }

    /// The int8 add of [`Self::add`]: `a` and `b` int8 with their parameters (numpy broadcasting),
    /// the result int8 with `po` (relu: clamped at its zero point).
    pub(crate) fn emit_add(
        &mut self,
        name: &str,
        (a, pa): (ValueId, QParams),
        (b, pb): (ValueId, QParams),
        po: QParams,
        relu: bool,
    ) -> Result<ValueId, String> {
        const LEFT_SHIFT: i32 = 20;
        let twice_max = 2.0 * (pa.scale as f64).max(pb.scale as f64);
        let (ma, sa) = fixed_point(pa.scale as f64 / twice_max);
        let (mb, sb) = fixed_point(pb.scale as f64 / twice_max);
        let out_mult = fixed_point(twice_max / ((1i64 << LEFT_SHIFT) as f64 * po.scale as f64));
        // (x << 20) · m == x · (m << 20): |x - z| < 2^8, m < 2^31, so the product stays below 2^59.
        let ra = self.rescale(
            &format!("{name}.lhs"),
            a,
            pa.zero_point,
            (ma << LEFT_SHIFT, sa),
        )?;
        let rb = self.rescale(
            &format!("{name}.rhs"),
            b,
            pb.zero_point,
            (mb << LEFT_SHIFT, sb),
        )?;
        let sum = self.node(name, MirOp::Binary(BinaryOp::Add), &[ra, rb])?;
        self.requant(name, sum, &[out_mult], vec![], po, relu)
    }
}
