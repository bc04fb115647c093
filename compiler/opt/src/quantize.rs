//! Post-training INT8 quantization: f32 MIR + calibration inputs → integer MIR.
//!
//! The caller runs the f32 graph (the pipeline hands in the reference interpreter, as for folding: the
//! optimizer owns no numerics) on every calibration sample and this pass records each value's min/max.
//! Then every node is rewritten onto integers:
//!
//! - activations: per-tensor int8, asymmetric from min/max (`symmetric` = zero point 0);
//! - weights of `matmul` (2-D constant right operand) and `conv` (grouped and depthwise included):
//!   symmetric int8 per output channel (±127); bias int32 at scale `s_x·s_w[c]`, with the input zero
//!   point folded in (`b - z_x·Σw`); a padded conv reads its padding as the real 0 through an int8
//!   `pad` with value `z_x` (which the planner inlines into the conv's loads);
//! - accumulation: the int8 operands are widened by `cast` to i32 at each load (the planner inlines the
//!   casts, so memory holds int8) and multiplied in i32 by `matmul` / `conv`;
//! - requantization, as plain integer MIR ops fused as the anchor's epilogue, per output channel:
//!   `y = clamp(((i64(acc) · M + 2^(S-1)) >> S) + z_out, lo, 127)` with the fixed-point multiplier
//!   `M ∈ [2^30, 2^31)` and shift `S` from `s_x·s_w/s_out = M·2^-S` — the TFLite / CMSIS-NN
//!   convention with single rounding (`ARM_NN_USE_SINGLE_ROUNDING`). A following `relu` is fused as the
//!   clamp's lower bound `lo = max(-128, z_out)`;
//! - `add` of two activations (a residual): TFLite / CMSIS-NN's int8 add — each operand minus its
//!   zero point is rescaled to the common scale `2·max(s_a, s_b)/2^20` by its own fixed-point
//!   multiplier, the sum is requantized to the output (a following relu fused into the clamp);
//! - average pooling (`avg_pool`; `reduce_mean`, which GlobalAveragePool imports as): the int8 window
//!   sum in i32 (a depthwise all-ones conv, or `reduce_sum`), then `(sum + 128·d + d/2) / d - 128`
//!   with `d` the counted elements — the mean rounded half up; parameters of the input;
//! - softmax (the lowered `exp(x - max) / sum` pattern): a 256-entry i32 table of
//!   `round(2^K·exp(-s_x·d))` indexed by `max - x`, then `(256·t + Σt/2) / Σt - 128` clamped to 127:
//!   output scale 1/256, zero point -128 (TFLite's), within half an output step of the exact softmax
//!   of the int8 input (one step where the 127 saturation cuts p > 255.5/256);
//! - `relu` alone → `max(q, z)`; max pool, reduce_max, reshape and transpose run on int8 with
//!   unchanged parameters.
//!
//! The result's graph inputs and outputs are int8: the caller quantizes inputs with
//! [`Quantized::inputs`] (`q = clamp(round_half_even(x/scale) + zero_point)`, the `quantize` op) and
//! reads outputs with [`Quantized::outputs`] (`x = (q - zero_point)·scale`). Every op of the result is
//! an existing integer primitive, so the interpreter, the LLVM target and the MCU writer execute the same
//! integer program bit for bit. Anything else in the graph is reported, every node at once, by name.

use rlx_ir::verify::Problem;
use rlx_ir::{
    BinaryOp, Blob, ConstData, DType, Mir, MirOp, NodeId, OpSet, PoolKind, ReduceOp, TensorType,
    UnaryOp, ValueId,
};
use std::collections::HashMap;

/// Runs a whole graph on inputs (the pipeline passes the reference interpreter).
pub type Runner<'a> = &'a dyn Fn(&Mir, &[ConstData]) -> Result<Vec<ConstData>, String>;

/// Affine quantization parameters: `real = (q - zero_point) · scale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QParams {
    pub scale: f32,
    pub zero_point: i32,
}

#[derive(Clone, Debug, Default)]
pub struct QuantOptions {
    /// Symmetric activations (zero point 0) instead of asymmetric min/max.
    pub symmetric: bool,
    /// Store each 2-D matmul weight as an int8 constant `[N, K]` read through a `transpose`, so an
    /// output channel's K weights are contiguous — what the MCU writers' dual 16-bit MAC (SMLAD)
    /// inner loops need. The integer program is the same either way; the Verilog writer reads `[K, N]`.
    pub transpose_matmul_weights: bool,
}

/// The integer graph and the parameters of its (int8) inputs and outputs.
#[derive(Clone, Debug)]
pub struct Quantized {
    pub mir: Mir,
    pub inputs: Vec<QParams>,
    pub outputs: Vec<QParams>,
}

/// Activation parameters from an observed range (the range is widened to contain 0).
pub fn act_params(min: f32, max: f32, symmetric: bool) -> QParams {
    let (lo, hi) = (min.min(0.0), max.max(0.0));
    if symmetric {
        let a = lo.abs().max(hi);
        return QParams {
            scale: if a > 0.0 { a / 127.0 } else { 1.0 },
            zero_point: 0,
        };
    }
    let scale = if hi > lo { (hi - lo) / 255.0 } else { 1.0 };
    let zp = (-128.0 - lo / scale).round_ties_even().clamp(-128.0, 127.0) as i32;
    QParams {
        scale,
        zero_point: zp,
    }
}

/// Fixed-point form of a positive real multiplier: `(M, S)` with `real ≈ M · 2^-S`, `M < 2^31`,
/// `1 <= S <= 62` (normalized `M ∈ [2^30, 2^31)` unless the multiplier is tiny).
pub fn fixed_point(real: f64) -> (i64, i64) {
    if real <= 0.0 || !real.is_finite() {
        return (0, 31);
    }
    let mut e = real.log2().floor() as i64 + 1; // real = m · 2^e, m ∈ [0.5, 1)
    let mut m = (real / 2f64.powi(e as i32) * 2f64.powi(31)).round() as i64;
    if m == 1 << 31 {
        m /= 2;
        e += 1;
    }
    let mut s = 31 - e;
    if s > 62 {
        s = 62;
        m = (real * 2f64.powi(62)).round() as i64;
    }
    (m, s.max(1))
}

pub(crate) fn bytes_i8(v: &[i64]) -> Vec<u8> {
    v.iter().map(|&x| x as i8 as u8).collect()
}
pub(crate) fn bytes_i32(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect()
}

pub(crate) struct Q<'a> {
    pub(crate) g: &'a Mir,
    pub(crate) out: Mir,
    /// Old value → (new int8 value, its parameters).
    pub(crate) map: HashMap<ValueId, (ValueId, QParams)>,
    pub(crate) range: Vec<(f32, f32)>,
    pub(crate) consumers: Vec<Vec<NodeId>>,
    pub(crate) is_out: Vec<bool>,
    pub(crate) opts: QuantOptions,
}

impl Q<'_> {
    fn params(&self, v: ValueId) -> QParams {
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
    fn epilogue(
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

    /// Elementwise add of two int8 activations with their own scales (TFLite / CMSIS-NN's int8 add):
    /// both operands are rescaled to a common scale `2·max(s_a, s_b) / 2^20` with integer fixed-point
    /// multipliers, summed in i64, then requantized to the output (a following relu fused into the
    /// clamp). All integer; one elementwise kernel after planning.
    fn add(&mut self, n: NodeId, done: &mut [bool]) -> Result<(), String> {
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

    /// The rounding division of an int8 window sum by its element count `d` (a scalar, or one value
    /// per output position): `(acc + 128·d + d/2) / d - 128`, i.e. round half up of the mean (the
    /// offset keeps the dividend non-negative, so the truncating division floors). The result is
    /// an int8 average with the input's scale and zero point.
    fn mean_epilogue(
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
    fn avg_pool(&mut self, n: NodeId) -> Result<(), String> {
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
    fn mean(&mut self, n: NodeId) -> Result<(), String> {
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

    /// Recognizes the lowered softmax `e = exp(x - reduce_max(x)); e / reduce_sum(e)` starting at the
    /// `reduce_max` node `n`; returns (axis, nodes of the pattern, output value).
    fn softmax_pattern(&self, n: NodeId) -> Option<(usize, Vec<NodeId>, ValueId)> {
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
    fn softmax(&mut self, n: NodeId, axis: usize, last: ValueId) -> Result<(), String> {
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

    /// matmul / conv with a constant weight: per-output-channel int8 weights, i32 accumulation and
    /// requantization. `w` is the f32 weight laid out with output channel `ch_axis`.
    fn linear(&mut self, n: NodeId, done: &mut [bool]) -> Result<(), String> {
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

/// Quantizes `g` (f32, static shapes) with the calibration samples (each a full input list).
/// Problems name every node that cannot be quantized.
pub fn quantize(
    g: &Mir,
    calib: &[Vec<ConstData>],
    run: Runner,
    opts: &QuantOptions,
) -> Result<Quantized, Vec<Problem>> {
    let prob = |node: Option<&str>, msg: String| {
        vec![Problem {
            node: node.map(str::to_string),
            msg,
        }]
    };
    if calib.is_empty() {
        return Err(prob(
            None,
            "quantization needs at least one calibration sample".into(),
        ));
    }
    // Calibration: every float value's min/max over all samples.
    let mut probe = g.clone();
    let watched: Vec<ValueId> = g
        .inputs
        .iter()
        .copied()
        .chain(g.nodes.iter().flat_map(|n| n.outputs.iter().copied()))
        .filter(|&v| g.ty(v).dtype.is_float())
        .collect();
    probe.outputs = watched
        .iter()
        .copied()
        .filter(|v| !g.inputs.contains(v))
        .collect();
    let mut range = vec![(f32::INFINITY, f32::NEG_INFINITY); g.values.len()];
    for (k, sample) in calib.iter().enumerate() {
        let outs =
            run(&probe, sample).map_err(|e| prob(None, format!("calibration sample {k}: {e}")))?;
        for (&v, c) in g
            .inputs
            .iter()
            .zip(sample)
            .chain(probe.outputs.iter().zip(&outs))
        {
            let r = &mut range[v.index()];
            for x in c.to_f64_vec() {
                r.0 = r.0.min(x as f32);
                r.1 = r.1.max(x as f32);
            }
        }
    }
    let consumers = g.consumers();
    let is_out = g.output_mask();
    let mut q = Q {
        g,
        out: Mir::new(),
        map: HashMap::new(),
        range,
        consumers,
        is_out,
        opts: opts.clone(),
    };
    let mut inputs = Vec::new();
    for &i in &g.inputs {
        let v = g.value(i);
        if v.ty.dtype != DType::F32 {
            return Err(prob(
                None,
                format!(
                    "input '{}' is {} (quantization takes f32 inputs)",
                    v.name.clone().unwrap_or_default(),
                    v.ty.dtype
                ),
            ));
        }
        let p = q.params(i);
        let ni = q.out.add_input(
            v.name.as_deref().unwrap_or(""),
            TensorType::new(DType::I8, v.ty.shape.clone()),
        );
        q.out.values[ni.index()].name = v.name.clone();
        q.map.insert(i, (ni, p));
        inputs.push(p);
    }
    let mut done = vec![false; g.nodes.len()];
    let mut problems = Vec::new();
    for n in g.node_ids() {
        if done[n.index()] {
            continue;
        }
        done[n.index()] = true;
        let node = g.node(n).clone();
        let res: Result<(), String> = (|| {
            // A reduce_max that starts a softmax (softmax_pattern returns None for any other node).
            if let Some((axis, nodes, last)) = q.softmax_pattern(n) {
                for t in nodes {
                    done[t.index()] = true;
                }
                return q.softmax(n, axis, last);
            }
            let input = |q: &Q, k: usize| {
                q.map
                    .get(&node.inputs[k])
                    .copied()
                    .ok_or_else(|| "its input is not quantized".to_string())
            };
            match &node.op {
                MirOp::MatMul if g.const_data(node.inputs[1]).is_some() => q.linear(n, &mut done),
                MirOp::Conv { .. } if g.const_data(node.inputs[1]).is_some() => q.linear(n, &mut done),
                MirOp::Unary(UnaryOp::Relu) => {
                    let (x, p) = input(&q, 0)?;
                    let z = q.out.add_const(None, ConstData::scalar(DType::I8, p.zero_point as f64));
                    let y = q.node(&node.name, MirOp::Binary(BinaryOp::Max), &[x, z])?;
                    q.map.insert(node.outputs[0], (y, p));
                    Ok(())
                }
                MirOp::Binary(BinaryOp::Add)
                    if node.inputs.iter().all(|&i| g.const_data(i).is_none()) =>
                {
                    q.add(n, &mut done)
                }
                MirOp::Pool { kind: PoolKind::Avg, .. } => q.avg_pool(n),
                MirOp::Reduce { op: ReduceOp::Mean, .. } => q.mean(n),
                MirOp::Pool { kind: PoolKind::Max, .. }
                | MirOp::Reduce { op: ReduceOp::Max, .. }
                | MirOp::Reshape { .. }
                | MirOp::Transpose { .. } => {
                    let (x, p) = input(&q, 0)?;
                    let y = q.node(&node.name, node.op.clone(), &[x])?;
                    q.map.insert(node.outputs[0], (y, p));
                    Ok(())
                }
                op => Err(format!("{} has no int8 form (quantization supports matmul/conv with constant weights, + bias, relu, add of two activations, max_pool, avg_pool, reduce_max, reduce_mean, softmax, reshape, transpose)", op.kind())),
            }
        })();
        if let Err(msg) = res {
            problems.push(Problem {
                node: Some(node.name.clone()),
                msg,
            });
        }
    }
    let mut outputs = Vec::new();
    let mut outs = Vec::new();
    for &o in &g.outputs {
        match q.map.get(&o) {
            Some(&(v, p)) => {
                if let Some(name) = &g.value(o).name {
                    q.out.values[v.index()].name = Some(name.clone());
                }
                outs.push(v);
                outputs.push(p);
            }
            None if problems.is_empty() => problems.push(Problem {
                node: None,
                msg: format!("output {o} is not quantized (constant or non-float?)"),
            }),
            None => {}
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    q.out.outputs = outs;
    Ok(Quantized {
        mir: q.out,
        inputs,
        outputs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::{PadMode, TensorType};

    fn run(g: &Mir, ins: &[ConstData]) -> Result<Vec<ConstData>, String> {
        rlx_interp::run(g, ins).map_err(|e| e.to_string())
    }

    /// Deterministic values in [lo, hi).
    fn values(seed: &mut u64, n: usize, lo: f64, hi: f64) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                (lo + (hi - lo) * ((*seed >> 11) as f64 / (1u64 << 53) as f64)) as f32
            })
            .collect()
    }

    fn quantized(g: &Mir, shapes: &[Vec<usize>], ranges: &[(f64, f64)]) -> Quantized {
        let mut seed = 0x9e37_79b9_7f4a_7c15;
        let calib: Vec<Vec<ConstData>> = (0..32)
            .map(|_| {
                shapes
                    .iter()
                    .zip(ranges)
                    .map(|(s, &(lo, hi))| {
                        ConstData::from_f32(
                            s.clone(),
                            &values(&mut seed, s.iter().product(), lo, hi),
                        )
                    })
                    .collect()
            })
            .collect();
        let q =
            quantize(g, &calib, &run, &QuantOptions::default()).unwrap_or_else(|p| panic!("{p:?}"));
        for n in &q.out_nodes() {
            assert!(
                !q.mir.ty(*n).dtype.is_float(),
                "float value left in the quantized graph"
            );
        }
        q
    }

    impl Quantized {
        fn out_nodes(&self) -> Vec<ValueId> {
            self.mir
                .nodes
                .iter()
                .flat_map(|n| n.outputs.iter().copied())
                .collect()
        }
    }

    fn i8s(shape: Vec<usize>, v: &[i64]) -> ConstData {
        ConstData {
            dtype: DType::I8,
            shape,
            data: Blob::from_vec(bytes_i8(v)),
        }
    }

    fn random_q(seed: &mut u64, n: usize) -> Vec<i64> {
        values(seed, n, -128.0, 128.0)
            .iter()
            .map(|&x| (x.floor() as i64).clamp(-128, 127))
            .collect()
    }

    fn softmax_graph(n: usize) -> Mir {
        let mut g = Mir::new();
        let x = g.add_input("x", TensorType::fixed(DType::F32, &[1, n]));
        let m = g
            .add1(
                "sm/max",
                MirOp::Reduce {
                    op: ReduceOp::Max,
                    axes: vec![1],
                    keepdims: true,
                },
                &[x],
            )
            .unwrap();
        let d = g
            .add1("sm/sub", MirOp::Binary(BinaryOp::Sub), &[x, m])
            .unwrap();
        let e = g.add1("sm/exp", MirOp::Unary(UnaryOp::Exp), &[d]).unwrap();
        let s = g
            .add1(
                "sm/sum",
                MirOp::Reduce {
                    op: ReduceOp::Sum,
                    axes: vec![1],
                    keepdims: true,
                },
                &[e],
            )
            .unwrap();
        g.outputs = vec![g.add1("sm", MirOp::Binary(BinaryOp::Div), &[e, s]).unwrap()];
        g
    }

    /// The lookup-table softmax against the exact softmax of its dequantized int8 input: within one
    /// output step (1/256) on random inputs, and within half a step below the saturation at 127/256.
    #[test]
    fn int8_softmax_is_within_one_step_of_the_exact_softmax() {
        for n in [10usize, 100] {
            let q = quantized(&softmax_graph(n), &[vec![1, n]], &[(-6.0, 6.0)]);
            assert_eq!(
                (q.outputs[0].scale, q.outputs[0].zero_point),
                (1.0 / 256.0, -128)
            );
            let p = q.inputs[0];
            let mut seed = 7;
            let (mut worst, mut worst_unsat) = (0f64, 0f64);
            for _ in 0..300 {
                let xq = random_q(&mut seed, n);
                let y = run(&q.mir, &[i8s(vec![1, n], &xq)])
                    .unwrap()
                    .remove(0)
                    .to_i64_vec();
                let xr: Vec<f64> = xq
                    .iter()
                    .map(|&v| (v - p.zero_point as i64) as f64 * p.scale as f64)
                    .collect();
                let mx = xr.iter().cloned().fold(f64::MIN, f64::max);
                let sum: f64 = xr.iter().map(|v| (v - mx).exp()).sum();
                for (yv, xv) in y.iter().zip(&xr) {
                    let exact = (xv - mx).exp() / sum;
                    let err = ((yv + 128) as f64 / 256.0 - exact).abs();
                    worst = worst.max(err);
                    if exact < 127.0 / 256.0 {
                        worst_unsat = worst_unsat.max(err);
                    }
                }
            }
            eprintln!(
                "softmax n={n}: max error {:.3} steps, {:.3} steps below saturation",
                worst * 256.0,
                worst_unsat * 256.0
            );
            assert!(worst <= 1.0 / 256.0 + 1e-9, "n={n}: {worst}");
            assert!(worst_unsat <= 0.5 / 256.0 + 1e-6, "n={n}: {worst_unsat}");
        }
    }

    /// Two activations with different scales, then relu: within one output step of the float sum of
    /// the dequantized operands.
    #[test]
    fn int8_add_rescales_both_operands() {
        let mut g = Mir::new();
        let a = g.add_input("a", TensorType::fixed(DType::F32, &[1, 64]));
        let b = g.add_input("b", TensorType::fixed(DType::F32, &[1, 64]));
        let s = g
            .add1("res", MirOp::Binary(BinaryOp::Add), &[a, b])
            .unwrap();
        g.outputs = vec![g
            .add1("res_relu", MirOp::Unary(UnaryOp::Relu), &[s])
            .unwrap()];
        let q = quantized(&g, &[vec![1, 64], vec![1, 64]], &[(-1.0, 1.0), (-0.5, 7.5)]);
        assert!(
            q.mir
                .nodes
                .iter()
                .all(|n| n.op != MirOp::Unary(UnaryOp::Relu)),
            "relu fused into the clamp"
        );
        let (pa, pb, po) = (q.inputs[0], q.inputs[1], q.outputs[0]);
        assert_ne!(pa.scale, pb.scale);
        let mut seed = 3;
        for _ in 0..50 {
            let (xa, xb) = (random_q(&mut seed, 64), random_q(&mut seed, 64));
            let y = run(&q.mir, &[i8s(vec![1, 64], &xa), i8s(vec![1, 64], &xb)])
                .unwrap()
                .remove(0)
                .to_i64_vec();
            for i in 0..64 {
                let real = (xa[i] - pa.zero_point as i64) as f64 * pa.scale as f64
                    + (xb[i] - pb.zero_point as i64) as f64 * pb.scale as f64;
                let want =
                    (real.max(0.0) / po.scale as f64 + po.zero_point as f64).clamp(-128.0, 127.0);
                assert!(
                    (y[i] as f64 - want).abs() <= 0.5 + 1e-3,
                    "{i}: {} vs {want}",
                    y[i]
                );
            }
        }
    }

    /// Average pooling (padding counted and not counted) and a global mean: the int8 result is the
    /// mean of the int8 window rounded half up, `floor(Σq/d + 1/2)`, with d the counted elements and
    /// padding read as the real 0 (the zero point) when counted.
    #[test]
    fn int8_average_pools_round_half_up() {
        for include in [false, true] {
            let mut g = Mir::new();
            let x = g.add_input("x", TensorType::fixed(DType::F32, &[1, 2, 5, 5]));
            let op = MirOp::Pool {
                kind: PoolKind::Avg,
                kernel: vec![3, 3],
                strides: vec![2, 2],
                pads: vec![1, 1, 1, 1],
                dilations: vec![1, 1],
                ceil_mode: false,
                count_include_pad: include,
            };
            let y = g.add1("pool", op, &[x]).unwrap();
            let m = g
                .add1(
                    "gap",
                    MirOp::Reduce {
                        op: ReduceOp::Mean,
                        axes: vec![2, 3],
                        keepdims: true,
                    },
                    &[x],
                )
                .unwrap();
            g.outputs = vec![y, m];
            let q = quantized(&g, &[vec![1, 2, 5, 5]], &[(-1.0, 3.0)]);
            let z = q.inputs[0].zero_point as i64;
            assert_eq!(q.outputs[0], q.inputs[0]);
            let mut seed = 11;
            for _ in 0..20 {
                let xq = random_q(&mut seed, 50);
                let out = run(&q.mir, &[i8s(vec![1, 2, 5, 5], &xq)]).unwrap();
                let (yp, ym) = (out[0].to_i64_vec(), out[1].to_i64_vec());
                for c in 0..2 {
                    for oy in 0..3 {
                        for ox in 0..3 {
                            let (mut sum, mut d) = (0i64, 0i64);
                            for ky in 0..3 {
                                for kx in 0..3 {
                                    let (iy, ix) = (oy * 2 + ky, ox * 2 + kx);
                                    let inside = (1..6).contains(&iy) && (1..6).contains(&ix);
                                    if inside {
                                        sum += xq[c * 25 + (iy - 1) * 5 + (ix - 1)];
                                        d += 1;
                                    } else if include {
                                        sum += z;
                                        d += 1;
                                    }
                                }
                            }
                            let want = (sum as f64 / d as f64 + 0.5).floor() as i64;
                            assert_eq!(
                                yp[c * 9 + oy * 3 + ox],
                                want,
                                "include_pad={include} c{c} ({oy},{ox})"
                            );
                        }
                    }
                    let s: i64 = xq[c * 25..c * 25 + 25].iter().sum();
                    assert_eq!(ym[c], (s as f64 / 25.0 + 0.5).floor() as i64);
                }
            }
        }
    }

    /// A padded conv reads its padding as the input zero point through an int8 `pad` (the zero point
    /// folded into the bias), not through an i32 subtraction.
    #[test]
    fn padded_conv_pads_with_the_zero_point() {
        let mut g = Mir::new();
        let x = g.add_input("x", TensorType::fixed(DType::F32, &[1, 2, 4, 4]));
        let w = g.add_const(
            None,
            ConstData::from_f32(vec![2, 1, 3, 3], &values(&mut 5, 18, -1.0, 1.0)),
        );
        let conv = MirOp::Conv {
            strides: vec![1, 1],
            pads: vec![1, 1, 1, 1],
            dilations: vec![1, 1],
            groups: 2,
        };
        g.outputs = vec![g.add1("dw", conv, &[x, w]).unwrap()];
        let q = quantized(&g, &[vec![1, 2, 4, 4]], &[(0.0, 2.0)]);
        let z = q.inputs[0].zero_point as f64;
        assert!(q.mir.nodes.iter().any(
            |n| matches!(&n.op, MirOp::Pad { mode: PadMode::Constant, value, .. } if *value == z)
        ));
        assert!(q
            .mir
            .nodes
            .iter()
            .all(|n| !matches!(&n.op, MirOp::Conv { pads, .. } if pads.iter().any(|&p| p != 0))));
        // Against the float conv of the dequantized input: within a few output steps.
        let f = run(&g, &[ConstData::from_f32(vec![1, 2, 4, 4], &[1.0; 32])])
            .unwrap()
            .remove(0)
            .to_f64_vec();
        let xq = ((1.0 / q.inputs[0].scale as f64).round() + z) as i64;
        let y = run(&q.mir, &[i8s(vec![1, 2, 4, 4], &[xq; 32])])
            .unwrap()
            .remove(0)
            .to_i64_vec();
        let po = q.outputs[0];
        for (a, b) in y.iter().zip(&f) {
            assert!(
                ((*a - po.zero_point as i64) as f64 * po.scale as f64 - b).abs()
                    <= 3.0 * po.scale as f64,
                "{a} vs {b}"
            );
        }
    }

    /// What has no int8 form is reported with the node's name, every node at once.
    #[test]
    fn unsupported_nodes_are_named() {
        let mut g = Mir::new();
        let x = g.add_input("x", TensorType::fixed(DType::F32, &[1, 4]));
        let e = g.add1("my_exp", MirOp::Unary(UnaryOp::Exp), &[x]).unwrap();
        let c = g.add_const(None, ConstData::from_f32(vec![1, 4], &[1.0; 4]));
        let a = g
            .add1("my_add_const", MirOp::Binary(BinaryOp::Add), &[x, c])
            .unwrap();
        let y = g
            .add1("join", MirOp::Binary(BinaryOp::Mul), &[e, a])
            .unwrap();
        g.outputs = vec![y];
        let calib = vec![vec![ConstData::from_f32(
            vec![1, 4],
            &[0.5, -0.5, 1.0, 2.0],
        )]];
        let p = quantize(&g, &calib, &run, &QuantOptions::default()).unwrap_err();
        let names: Vec<_> = p.iter().filter_map(|p| p.node.as_deref()).collect();
        assert_eq!(names, ["my_exp", "my_add_const", "join"], "{p:?}");
        assert!(p[0].msg.contains("exp has no int8 form"), "{}", p[0].msg);
    }
}
