//! int8 matmul / conv layers with constant weights: per-output-channel int8 weights, i32
//! accumulation, the input zero point folded into the i32 bias, fixed-point requantization.

use super::{bytes_i32, bytes_i8, fixed_point, QParams, Q};
use rlx_ir::{BinaryOp, DType, MirOp, NodeId, ValueId};

impl Q<'_> {
    /// matmul / conv with a constant weight: per-output-channel int8 weights, i32 accumulation and
    /// requantization. `w` is the f32 weight laid out with output channel `ch_axis`.
    pub(super) fn linear(&mut self, n: NodeId, done: &mut [bool]) -> Result<(), String> {
        let node = self.g.node(n).clone();
        let (x, wv) = (node.inputs[0], node.inputs[1]);
        let Some(&(xq, xp)) = self.map.get(&x) else {
            return Err("its input is not quantized".into());
        };
        let w = self
            .g
            .const_data(wv)
            .ok_or("the weight must be a constant")?
            .clone();
        if w.dtype != DType::F32 {
            return Err(format!("weight dtype {} (f32 expected)", w.dtype));
        }
        let is_conv = matches!(node.op, MirOp::Conv { .. });
        if !is_conv && w.shape.len() != 2 {
            return Err(format!("matmul weight must be 2-D, got {:?}", w.shape));
        }
        let wf = w.to_f64_vec();
        let (channels, per) = if is_conv {
            (w.shape[0], wf.len() / w.shape[0])
        } else {
            (w.shape[1], w.shape[0])
        };
        let at = |c: usize, k: usize| {
            if is_conv {
                c * per + k
            } else {
                k * channels + c
            }
        };
        // Symmetric per-channel weights.
        let mut sw = vec![0f64; channels];
        let mut wq = vec![0i64; wf.len()];
        for c in 0..channels {
            let a = (0..per).map(|k| wf[at(c, k)].abs()).fold(0.0, f64::max);
            sw[c] = if a > 0.0 { a / 127.0 } else { 1.0 };
            for k in 0..per {
                wq[at(c, k)] = ((wf[at(c, k)] / sw[c]) as f32)
                    .round_ties_even()
                    .clamp(-127.0, 127.0) as i64;
            }
        }
        let mut conv_bias = None;
        if is_conv && node.inputs.len() == 3 {
            conv_bias = Some(
                self.g
                    .const_data(node.inputs[2])
                    .ok_or("the conv bias must be a constant")?
                    .to_f64_vec(),
            );
        }
        let (taken, add_bias, relu, last) = self.epilogue(node.outputs[0], channels);
        let bias_f: Vec<f64> = (0..channels)
            .map(|c| {
                conv_bias.as_ref().map_or(0.0, |b| b[c]) + add_bias.as_ref().map_or(0.0, |b| b[c])
            })
            .collect();
        let sx = xp.scale as f64;
        // The input zero point is folded into the bias (`b - z_x·Σw`); a padded conv reads its
        // padding as real 0 = z_x through an int8 `pad` (inlined into the conv's loads by the planner).
        let bias_q: Vec<i64> = (0..channels)
            .map(|c| {
                let b = (bias_f[c] / (sx * sw[c])).round() as i64;
                b - xp.zero_point as i64 * (0..per).map(|k| wq[at(c, k)]).sum::<i64>()
            })
            .collect();
        let op = self.params(last);
        let ms: Vec<(i64, i64)> = (0..channels)
            .map(|c| fixed_point(sx * sw[c] / op.scale as f64))
            .collect();
        let out_rank = self.g.ty(node.outputs[0]).shape.rank();
        let y = self.emit_linear(
            &node.name, &node.op, out_rank, (xq, xp), (&w.shape, &wq), &bias_q, &ms, op, relu,
        )?;
        for t in taken {
            done[t.index()] = true;
        }
        self.map.insert(last, (y, op));
        Ok(())
    }

    /// Emits an int8 layer: `op_node` (the matmul, or the conv with its attributes) on the int8 input
    /// `xq` (parameters `xp`) and the int8 weights `wq` of shape `wshape` (conv `[C_out, …]`, matmul
    /// `[K, N]`), i32 accumulation plus the i32 bias `bias_q` (the input zero point already folded
    /// in), then per output channel the fixed-point requantization `ms` to `op` (relu: clamped at its
    /// zero point). `out_rank` is the rank of the layer's output.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn emit_linear(
        &mut self,
        name: &str,
        op_node: &MirOp,
        out_rank: usize,
        (xq, xp): (ValueId, QParams),
        (wshape, wq): (&[usize], &[i64]),
        bias_q: &[i64],
        ms: &[(i64, i64)],
        op: QParams,
        relu: bool,
    ) -> Result<ValueId, String> {
        let is_conv = matches!(op_node, MirOp::Conv { .. });
        let channels = bias_q.len();
        let name = name.to_string();
        let mut op_node = op_node.clone();
        let mut xin = xq;
        if let MirOp::Conv { pads, .. } = &mut op_node {
            if pads.iter().any(|&p| p != 0) {
                xin = self.pad(&name, xq, pads, xp.zero_point)?;
                pads.iter_mut().for_each(|p| *p = 0);
            }
        }
        let xi = self.node(&name, MirOp::Cast { to: DType::I32 }, &[xin])?;
        let wi = if !is_conv && self.opts.transpose_matmul_weights {
            let (k, n) = (wshape[0], wshape[1]);
            let wt: Vec<i64> = (0..n * k).map(|i| wq[(i % k) * n + i / k]).collect();
            let wc = self.konst(DType::I8, vec![n, k], bytes_i8(&wt));
            let t = self.node(&name, MirOp::Transpose { perm: vec![1, 0] }, &[wc])?;
            self.node(&name, MirOp::Cast { to: DType::I32 }, &[t])?
        } else {
            let wc = self.konst(DType::I8, wshape.to_vec(), bytes_i8(wq));
            self.node(&name, MirOp::Cast { to: DType::I32 }, &[wc])?
        };
        let cshape = if is_conv {
            let mut s = vec![channels];
            s.extend(std::iter::repeat_n(1, out_rank - 2));
            s
        } else {
            vec![channels]
        };
        let bv = self.konst(
            DType::I32,
            if is_conv {
                vec![channels]
            } else {
                cshape.clone()
            },
            bytes_i32(bias_q),
        );
        let acc = if is_conv {
            self.node(&name, op_node, &[xi, wi, bv])?
        } else {
            let mm = self.node(&name, MirOp::MatMul, &[xi, wi])?;
            self.node(
                &format!("{name}.bias"),
                MirOp::Binary(BinaryOp::Add),
                &[mm, bv],
            )?
        };
        self.requant(&name, acc, ms, cshape, op, relu)
    }
}
