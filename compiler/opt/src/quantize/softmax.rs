//! int8 softmax of the lowered `exp(x - max) / sum` pattern through a 256-entry lookup table.

use super::{QParams, Q};
use rlx_ir::{BinaryOp, DType, MirOp, NodeId, ReduceOp, UnaryOp, ValueId};

impl Q<'_> {
    /// Recognizes the lowered softmax `e = exp(x - reduce_max(x)); e / reduce_sum(e)` starting at the
    /// `reduce_max` node `n`; returns (axis, nodes of the pattern, output value).
    pub(super) fn softmax_pattern(&self, n: NodeId) -> Option<(usize, Vec<NodeId>, ValueId)> {
        let g = self.g;
        let node = g.node(n);
        let MirOp::Reduce {
            op: ReduceOp::Max,
            axes,
            keepdims: true,
        } = &node.op
        else {
            return None;
        };
        if axes.len() != 1 {
            return None;
        }
        let x = node.inputs[0];
        let sub = self.only_consumer(node.outputs[0])?;
        let sn = g.node(sub);
        if sn.op != MirOp::Binary(BinaryOp::Sub) || sn.inputs != [x, node.outputs[0]] {
            return None;
        }
        let exp = self.only_consumer(sn.outputs[0])?;
        if g.node(exp).op != MirOp::Unary(UnaryOp::Exp) {
            return None;
        }
        let e = g.node(exp).outputs[0];
        let cs = &self.consumers[e.index()];
        if cs.len() != 2 || self.is_out[e.index()] {
            return None;
        }
        let (mut sum, mut div) = (None, None);
        for &c in cs {
            match &g.node(c).op {
                MirOp::Reduce {
                    op: ReduceOp::Sum,
                    axes: a2,
                    keepdims: true,
                } if a2 == axes && g.node(c).inputs == [e] => sum = Some(c),
                MirOp::Binary(BinaryOp::Div) => div = Some(c),
                _ => {}
            }
        }
        let (sum, div) = (sum?, div?);
        let s = g.node(sum).outputs[0];
        if g.node(div).inputs != [e, s] || self.only_consumer(s) != Some(div) {
            return None;
        }
        Some((axes[0], vec![n, sub, exp, sum, div], g.node(div).outputs[0]))
    }

    /// int8 softmax through a lookup table: `t = T[max(x) - x]` with
    /// `T[d] = round(2^K · exp(-s_x·d))`, d ∈ [0, 255] (i32; K ≤ 22 so that sums and the scaled
    /// numerator fit i32), then `y = (256·t + sum(t)/2) / sum(t) - 128` clamped to 127: output scale
    /// 1/256, zero point -128 (TFLite's int8 softmax output), rounding half up. The table gather is
    /// recomputed in the sum kernel and in the output kernel rather than materialized.
    pub(super) fn softmax(&mut self, n: NodeId, axis: usize, last: ValueId) -> Result<(), String> {
        let node = self.g.node(n).clone();
        let Some(&(x, p)) = self.map.get(&node.inputs[0]) else {
            return Err("its input is not quantized".into());
        };
        let xs = self.fixed(node.inputs[0], "input")?;
        let len = xs[axis] as u64;
        let bits = 64 - (len.max(1) - 1).leading_zeros() as i64; // ceil(log2(len))
        let k = (29 - bits).min(22);
        if k < 8 {
            return Err(format!(
                "int8 softmax over {len} elements (at most 2^21 supported)"
            ));
        }
        let table: Vec<i64> = (0..256)
            .map(|d| ((-(p.scale as f64) * d as f64).exp() * (1i64 << k) as f64).round() as i64)
            .collect();
        let name = node.name.clone();
        let tv = self.i32s(vec![256], &table);
        let m = self.node(
            &format!("{name}.max"),
            MirOp::Reduce {
                op: ReduceOp::Max,
                axes: vec![axis],
                keepdims: true,
            },
            &[x],
        )?;
        let lut = |q: &mut Q, tag: &str| -> Result<ValueId, String> {
            let n = format!("{name}.{tag}");
            let mi = q.node(&n, MirOp::Cast { to: DType::I32 }, &[m])?;
            let xi = q.node(&n, MirOp::Cast { to: DType::I32 }, &[x])?;
            let d = q.node(&n, MirOp::Binary(BinaryOp::Sub), &[mi, xi])?;
            q.node(&n, MirOp::Gather { axis: 0 }, &[tv, d])
        };
        let t_sum = lut(self, "exp")?;
        let s = self.node(
            &format!("{name}.sum"),
            MirOp::Reduce {
                op: ReduceOp::Sum,
                axes: vec![axis],
                keepdims: true,
            },
            &[t_sum],
        )?;
        let t = lut(self, "exp")?;
        let n2 = format!("{name}.div");
        let c256 = self.scalar(DType::I32, 256);
        let one = self.scalar(DType::I32, 1);
        let m128 = self.scalar(DType::I32, -128);
        let hi = self.scalar(DType::I32, 127);
        let mut y = self.node(&n2, MirOp::Binary(BinaryOp::Mul), &[t, c256])?;
        let half = self.node(&n2, MirOp::Binary(BinaryOp::Shr), &[s, one])?;
        y = self.node(&n2, MirOp::Binary(BinaryOp::Add), &[y, half])?;
        y = self.node(&n2, MirOp::Binary(BinaryOp::Div), &[y, s])?;
        y = self.node(&n2, MirOp::Binary(BinaryOp::Add), &[y, m128])?;
        y = self.node(&n2, MirOp::Binary(BinaryOp::Min), &[y, hi])?;
        let y = self.node(&n2, MirOp::Cast { to: DType::I8 }, &[y])?;
        self.map.insert(
            last,
            (
                y,
                QParams {
                    scale: 1.0 / 256.0,
                    zero_point: -128,
                },
            ),
        );
        Ok(())
    }
}
