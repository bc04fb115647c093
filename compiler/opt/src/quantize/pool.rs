//! int8 average pooling and mean (ReduceMean, GlobalAveragePool): an i32 window sum and a rounding
//! division.

use super::Q;
use rlx_ir::{BinaryOp, DType, MirOp, NodeId, ReduceOp, ValueId};

impl Q<'_> {
    /// The rounding division of an int8 window sum by its element count `d` (a scalar, or one value
    /// per output position): `(acc + 128·d + d/2) / d - 128`, i.e. round half up of the mean (the
    /// offset keeps the dividend non-negative, so the truncating division floors). The result is
    /// an int8 average with the input's scale and zero point.
    pub(super) fn mean_epilogue(
        &mut self,
        name: &str,
        acc: ValueId,
        d: &[i64],
        dshape: Vec<usize>,
    ) -> Result<ValueId, String> {
        let k: Vec<i64> = d.iter().map(|&d| 128 * d + d / 2).collect();
        let (kv, dv) = if d.iter().all(|&x| x == d[0]) {
            (self.scalar(DType::I32, k[0]), self.scalar(DType::I32, d[0]))
        } else {
            (self.i32s(dshape.clone(), &k), self.i32s(dshape, d))
        };
        let m128 = self.scalar(DType::I32, -128);
        let n = format!("{name}.mean");
        let mut x = self.node(&n, MirOp::Binary(BinaryOp::Add), &[acc, kv])?;
        x = self.node(&n, MirOp::Binary(BinaryOp::Div), &[x, dv])?;
        x = self.node(&n, MirOp::Binary(BinaryOp::Add), &[x, m128])?;
        self.node(&n, MirOp::Cast { to: DType::I8 }, &[x])
    }

    /// int8 average pooling: the window sum is a depthwise conv with all-ones int8 weights (i32
    /// accumulation; padding reads real 0 = z when `count_include_pad`, else raw 0 and is not counted),
    /// then [`Self::mean_epilogue`] with each output position's count. Output parameters = input's.
    pub(super) fn avg_pool(&mut self, n: NodeId) -> Result<(), String> {
        let node = self.g.node(n).clone();
        let MirOp::Pool {
            kernel,
            strides,
            pads,
            dilations,
            ceil_mode,
            count_include_pad,
            ..
        } = &node.op
        else {
            unreachable!()
        };
        let Some(&(x, p)) = self.map.get(&node.inputs[0]) else {
            return Err("its input is not quantized".into());
        };
        let xs = self.fixed(node.inputs[0], "input")?;
        let ys = self.fixed(node.outputs[0], "output")?;
        let sp = kernel.len();
        if kernel.contains(&0)
            || strides.contains(&0)
            || dilations.contains(&0)
            || pads.len() != 2 * sp
        {
            return Err(format!("avg_pool window {kernel:?}, strides {strides:?}, dilations {dilations:?}, pads {pads:?} are not valid"));
        }
        if kernel.iter().product::<usize>() > 1 << 23 {
            return Err(format!("avg_pool window {kernel:?} has more than 2^23 elements (the i32 sum could overflow)"));
        }
        if xs.len() != sp + 2 {
            return Err(format!(
                "avg_pool input {xs:?} is not [N, C, spatial…] for a {sp}-d window"
            ));
        }
        // Output positions and per-position counts, as the op's semantics define them.
        let mut floor_out = Vec::new();
        for i in 0..sp {
            let span = xs[2 + i] + pads[i] + pads[sp + i];
            let win = dilations[i] * (kernel[i] - 1) + 1;
            floor_out.push(if span >= win {
                (span - win) / strides[i] + 1
            } else {
                0
            });
        }
        if *ceil_mode && floor_out[..] != ys[2..] {
            return Err("avg_pool with ceil_mode adding a partial window has no int8 form (export with ceil_mode=0)".into());
        }
        let positions: usize = ys[2..].iter().product();
        let mut counts = vec![0i64; positions];
        for (o, c) in counts.iter_mut().enumerate() {
            let mut rem = o;
            let mut idx = vec![0usize; sp];
            for i in (0..sp).rev() {
                idx[i] = rem % ys[2 + i];
                rem /= ys[2 + i];
            }
            let mut count = 1i64;
            for i in 0..sp {
                let inside = (0..kernel[i])
                    .filter(|&k| {
                        let pos = (idx[i] * strides[i] + k * dilations[i]) as i64 - pads[i] as i64;
                        if *count_include_pad {
                            pos >= -(pads[i] as i64) && pos < (xs[2 + i] + pads[sp + i]) as i64
                        } else {
                            pos >= 0 && pos < xs[2 + i] as i64
                        }
                    })
                    .count();
                count *= inside as i64;
            }
            *c = count.max(1);
        }
        let name = node.name.clone();
        let mut xin = x;
        if pads.iter().any(|&q| q != 0) {
            xin = self.pad(
                &name,
                x,
                pads,
                if *count_include_pad { p.zero_point } else { 0 },
            )?;
        }
        let xi = self.node(&name, MirOp::Cast { to: DType::I32 }, &[xin])?;
        let c = xs[1];
        let mut wshape = vec![c, 1];
        wshape.extend_from_slice(kernel);
        let ones = vec![1u8; wshape.iter().product()];
        let wc = self.konst(DType::I8, wshape, ones);
        let wi = self.node(&name, MirOp::Cast { to: DType::I32 }, &[wc])?;
        let conv = MirOp::Conv {
            strides: strides.clone(),
            pads: vec![0; 2 * sp],
            dilations: dilations.clone(),
            groups: c,
        };
        let acc = self.node(&format!("{name}.sum"), conv, &[xi, wi])?;
        let mut dshape = vec![1, 1];
        dshape.extend_from_slice(&ys[2..]);
        let y = self.mean_epilogue(&name, acc, &counts, dshape)?;
        self.map.insert(node.outputs[0], (y, p));
        Ok(())
    }

    /// int8 mean over axes (ONNX ReduceMean, GlobalAveragePool): an i32 `reduce_sum` and the rounding
    /// division of [`Self::mean_epilogue`]. Output parameters = input's.
    pub(super) fn mean(&mut self, n: NodeId) -> Result<(), String> {
        let node = self.g.node(n).clone();
        let MirOp::Reduce { axes, keepdims, .. } = &node.op else {
            unreachable!()
        };
        let Some(&(x, p)) = self.map.get(&node.inputs[0]) else {
            return Err("its input is not quantized".into());
        };
        let xs = self.fixed(node.inputs[0], "input")?;
        let d: usize = axes.iter().map(|&a| xs[a]).product();
        if d == 0 || d > (1 << 23) {
            return Err(format!(
                "int8 mean over {d} elements (1 ..= 2^23 supported)"
            ));
        }
        let name = node.name.clone();
        let xi = self.node(&name, MirOp::Cast { to: DType::I32 }, &[x])?;
        let acc = self.node(
            &format!("{name}.sum"),
            MirOp::Reduce {
                op: ReduceOp::Sum,
                axes: axes.clone(),
                keepdims: *keepdims,
            },
            &[xi],
        )?;
        let y = self.mean_epilogue(&name, acc, &[d as i64], vec![])?;
        self.map.insert(node.outputs[0], (y, p));
        Ok(())
    }
}
