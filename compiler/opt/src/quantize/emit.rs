//! The integer MIR emitters the quantize passes share (this one and `qdq.rs`): constants, nodes,
//! the fixed-point requantization, the bias/relu epilogue a layer absorbs, padding, rescaling.

use super::{act_params, bytes_i32, QParams, Q};
use rlx_ir::{BinaryOp, Blob, ConstData, DType, MirOp, NodeId, UnaryOp, ValueId};

impl Q<'_> {
    pub(super) fn params(&self, v: ValueId) -> QParams {
        let (lo, hi) = self.range[v.index()];
        act_params(lo, hi, self.opts.symmetric)
    }
    /// The single consumer of `v`, if `v` has exactly one use and is not a graph output.
    pub(crate) fn only_consumer(&self, v: ValueId) -> Option<NodeId> {
        let c = &self.consumers[v.index()];
        (c.len() == 1
            && !self.is_out[v.index()]
            && self.g.node(c[0]).inputs.iter().filter(|&&i| i == v).count() == 1)
            .then(|| c[0])
    }
    pub(crate) fn konst(&mut self, dtype: DType, shape: Vec<usize>, bytes: Vec<u8>) -> ValueId {
        self.out.add_const(
            None,
            ConstData {
                dtype,
                shape,
                data: Blob::from_vec(bytes),
            },
        )
    }
    pub(crate) fn i64s(&mut self, shape: Vec<usize>, v: &[i64]) -> ValueId {
        self.out.add_const(None, ConstData::from_i64(shape, v))
    }
    /// The static shape of `v` (an `input` or `output` of the node being quantized).
    pub(crate) fn fixed(&self, v: ValueId, what: &str) -> Result<Vec<usize>, String> {
        self.g.ty(v).shape.as_fixed().ok_or_else(|| format!("needs a fixed {what} shape"))
    }

    pub(crate) fn node(&mut self, name: &str, op: MirOp, ins: &[ValueId]) -> Result<ValueId, String> {
        self.out.add1(name, op, ins)
    }

    /// Emits `int8(clamp(((i64(acc) · M + 2^(S-1)) >> S) + z, lo, 127))`; per-channel constants have
    /// shape `cshape`.
    pub(crate) fn requant(
        &mut self,
        name: &str,
        acc: ValueId,
        ms: &[(i64, i64)],
        cshape: Vec<usize>,
        q: QParams,
        relu: bool,
    ) -> Result<ValueId, String> {
        let m: Vec<i64> = ms.iter().map(|&(m, _)| m).collect();
        let r: Vec<i64> = ms.iter().map(|&(_, s)| 1i64 << (s - 1)).collect();
        let s: Vec<i64> = ms.iter().map(|&(_, s)| s).collect();
        let (mv, rv, sv) = (
            self.i64s(cshape.clone(), &m),
            self.i64s(cshape.clone(), &r),
            self.i64s(cshape, &s),
        );
        let z = self
            .out
            .add_const(None, ConstData::scalar(DType::I64, q.zero_point as f64));
        let lo = if relu { q.zero_point.max(-128) } else { -128 };
        let lov = self
            .out
            .add_const(None, ConstData::scalar(DType::I64, lo as f64));
        let hiv = self
            .out
            .add_const(None, ConstData::scalar(DType::I64, 127.0));
        let n = format!("{name}.requant");
        // (An i64 accumulator is used as it is: a same-dtype cast would be a view, which ends the
        // planner's epilogue chain.)
        let mut x = if self.out.ty(acc).dtype == DType::I64 {
            acc
        } else {
            self.node(&n, MirOp::Cast { to: DType::I64 }, &[acc])?
        };
        x = self.node(&n, MirOp::Binary(BinaryOp::Mul), &[x, mv])?;
        x = self.node(&n, MirOp::Binary(BinaryOp::Add), &[x, rv])?;
        x = self.node(&n, MirOp::Binary(BinaryOp::Shr), &[x, sv])?;
        x = self.node(&n, MirOp::Binary(BinaryOp::Add), &[x, z])?;
        x = self.node(&n, MirOp::Binary(BinaryOp::Max), &[x, lov])?;
        x = self.node(&n, MirOp::Binary(BinaryOp::Min), &[x, hiv])?;
        self.node(&n, MirOp::Cast { to: DType::I8 }, &[x])
    }

    /// Looks past `v` for `+ bias` (a constant with `channels` elements) and `relu`. Returns the nodes
    /// taken, the bias, whether relu follows, and the last value of the chain.
    pub(super) fn epilogue(
        &self,
        v: ValueId,
        channels: usize,
    ) -> (Vec<NodeId>, Option<Vec<f64>>, bool, ValueId) {
        let mut taken = Vec::new();
        let mut bias = None;
        let mut last = v;
        if let Some(c) = self.only_consumer(last) {
            let n = self.g.node(c);
            if n.op == MirOp::Binary(BinaryOp::Add) {
                let other = if n.inputs[0] == last {
                    n.inputs[1]
                } else {
                    n.inputs[0]
                };
                if let Some(b) = self.g.const_data(other) {
                    if b.numel() == channels
                        && b.dtype == DType::F32
                        && self.g.ty(n.outputs[0]).shape == self.g.ty(last).shape
                    {
                        bias = Some(b.to_f64_vec());
                        taken.push(c);
                        last = n.outputs[0];
                    }
                }
            }
        }
        let mut relu = false;
        if let Some(c) = self.only_consumer(last) {
            if self.g.node(c).op == MirOp::Unary(UnaryOp::Relu) {
                relu = true;
                taken.push(c);
                last = self.g.node(c).outputs[0];
            }
        }
        (taken, bias, relu, last)
    }

    pub(crate) fn i32s(&mut self, shape: Vec<usize>, v: &[i64]) -> ValueId {
        self.konst(DType::I32, shape, bytes_i32(v))
    }
    pub(crate) fn scalar(&mut self, dtype: DType, v: i64) -> ValueId {
        self.out.add_const(None, ConstData::scalar(dtype, v as f64))
    }

    /// Pads the spatial dims of an int8 `[N, C, spatial…]` value with `value` (conv-style `pads`:
    /// begins then ends of the spatial dims).
    pub(crate) fn pad(
        &mut self,
        name: &str,
        x: ValueId,
        pads: &[usize],
        value: i32,
    ) -> Result<ValueId, String> {
        let sp = pads.len() / 2;
        let mut p = vec![0i64; 2 * (sp + 2)];
        for i in 0..sp {
            p[2 + i] = pads[i] as i64;
            p[sp + 4 + i] = pads[sp + i] as i64;
        }
        self.node(
            &format!("{name}.pad"),
            MirOp::Pad {
                pads: p,
                mode: rlx_ir::PadMode::Constant,
                value: value as f64,
            },
            &[x],
        )
    }

    /// `i64(x) - z` scaled by the fixed-point multiplier `(m, s)`:
    /// `((i64(x) - z) · m + 2^(s-1)) >> s` (one operand of a quantized add).
    pub(crate) fn rescale(
        &mut self,
        name: &str,
        x: ValueId,
        z: i32,
        (m, s): (i64, i64),
    ) -> Result<ValueId, String> {
        let zv = self.scalar(DType::I64, -(z as i64));
        let mv = self.scalar(DType::I64, m);
        let rv = self.scalar(DType::I64, 1i64 << (s - 1));
        let sv = self.scalar(DType::I64, s);
        let mut v = self.node(name, MirOp::Cast { to: DType::I64 }, &[x])?;
        v = self.node(name, MirOp::Binary(BinaryOp::Add), &[v, zv])?;
        v = self.node(name, MirOp::Binary(BinaryOp::Mul), &[v, mv])?;
        v = self.node(name, MirOp::Binary(BinaryOp::Add), &[v, rv])?;
        self.node(name, MirOp::Binary(BinaryOp::Shr), &[v, sv])
    }
}
