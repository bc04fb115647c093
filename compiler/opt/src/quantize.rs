//! Post-training INT8 quantization: f32 MIR + calibration inputs → integer MIR.
//!
//! The caller runs the f32 graph (the pipeline hands in the reference interpreter, as for folding: the
//! optimizer owns no numerics) on every calibration sample and this pass records each value's min/max.
//! Then every node is rewritten onto integers:
//!
//! - activations: per-tensor int8, asymmetric from min/max (`symmetric` = zero point 0);
//! - weights of `matmul` (2-D constant right operand) and `conv`: symmetric int8 per output channel
//!   (±127); bias int32 at scale `s_x·s_w[c]`, with the input zero point folded in
//!   (`b - z_x·Σw`) where that is exact (matmul; conv without padding), else subtracted at the load;
//! - accumulation: the int8 operands are widened by `cast` to i32 at each load (the planner inlines the
//!   casts, so memory holds int8) and multiplied in i32 by `matmul` / `conv`;
//! - requantization, as plain integer MIR ops fused as the anchor's epilogue, per output channel:
//!   `y = clamp(((i64(acc) · M + 2^(S-1)) >> S) + z_out, lo, 127)` with the fixed-point multiplier
//!   `M ∈ [2^30, 2^31)` and shift `S` from `s_x·s_w/s_out = M·2^-S` — the TFLite / CMSIS-NN
//!   convention with single rounding (`ARM_NN_USE_SINGLE_ROUNDING`). A following `relu` is fused as the
//!   clamp's lower bound `lo = max(-128, z_out)`;
//! - `relu` alone → `max(q, z)`; max pool, reshape and transpose run on int8 with unchanged parameters.
//!
//! The result's graph inputs and outputs are int8: the caller quantizes inputs with
//! [`Quantized::inputs`] (`q = clamp(round_half_even(x/scale) + zero_point)`, the `quantize` op) and
//! reads outputs with [`Quantized::outputs`] (`x = (q - zero_point)·scale`). Every op of the result is
//! an existing integer primitive, so the interpreter, the LLVM target and the MCU writer execute the same
//! integer program bit for bit. Anything else in the graph (softmax, average pooling, …) is reported,
//! every node at once; export logits (argmax is order-preserving) rather than probabilities.

use rlx_ir::verify::Problem;
use rlx_ir::{
    BinaryOp, Blob, ConstData, DType, Mir, MirOp, NodeId, OpSet, PoolKind, TensorType, UnaryOp,
    ValueId,
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

fn bytes_i8(v: &[i64]) -> Vec<u8> {
    v.iter().map(|&x| x as i8 as u8).collect()
}
fn bytes_i32(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect()
}

struct Q<'a> {
    g: &'a Mir,
    out: Mir,
    /// Old value → (new int8 value, its parameters).
    map: HashMap<ValueId, (ValueId, QParams)>,
    range: Vec<(f32, f32)>,
    consumers: Vec<Vec<NodeId>>,
    is_out: Vec<bool>,
    opts: QuantOptions,
}

impl Q<'_> {
    fn params(&self, v: ValueId) -> QParams {
        let (lo, hi) = self.range[v.index()];
        act_params(lo, hi, self.opts.symmetric)
    }
    /// The single consumer of `v`, if `v` has exactly one use and is not a graph output.
    fn only_consumer(&self, v: ValueId) -> Option<NodeId> {
        let c = &self.consumers[v.index()];
        (c.len() == 1
            && !self.is_out[v.index()]
            && self.g.node(c[0]).inputs.iter().filter(|&&i| i == v).count() == 1)
            .then(|| c[0])
    }
    fn konst(&mut self, dtype: DType, shape: Vec<usize>, bytes: Vec<u8>) -> ValueId {
        self.out.add_const(
            None,
            ConstData {
                dtype,
                shape,
                data: Blob::from_vec(bytes),
            },
        )
    }
    fn i64s(&mut self, shape: Vec<usize>, v: &[i64]) -> ValueId {
        self.out.add_const(None, ConstData::from_i64(shape, v))
    }
    fn node(&mut self, name: &str, op: MirOp, ins: &[ValueId]) -> Result<ValueId, String> {
        self.out.add1(name, op, ins)
    }

    /// Emits `int8(clamp(((i64(acc) · M + 2^(S-1)) >> S) + z, lo, 127))`; per-channel constants have
    /// shape `cshape`.
    fn requant(
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
        let mut x = self.node(&n, MirOp::Cast { to: DType::I64 }, &[acc])?;
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
        let fold_zp = match &node.op {
            MirOp::Conv { pads, .. } => pads.iter().all(|&p| p == 0),
            _ => true,
        };
        let bias_q: Vec<i64> = (0..channels)
            .map(|c| {
                let b = (bias_f[c] / (sx * sw[c])).round() as i64;
                let corr = if fold_zp {
                    xp.zero_point as i64 * (0..per).map(|k| wq[at(c, k)]).sum::<i64>()
                } else {
                    0
                };
                b - corr
            })
            .collect();
        let op = self.params(last);
        let name = node.name.clone();
        let mut xi = self.node(&name, MirOp::Cast { to: DType::I32 }, &[xq])?;
        if !fold_zp && xp.zero_point != 0 {
            // Padding must read as real 0 = z_x: subtract the zero point at the (in-bounds) load.
            let z = self
                .out
                .add_const(None, ConstData::scalar(DType::I32, xp.zero_point as f64));
            xi = self.node(&name, MirOp::Binary(BinaryOp::Sub), &[xi, z])?;
        }
        let wc = self.konst(DType::I8, w.shape.clone(), bytes_i8(&wq));
        let wi = self.node(&name, MirOp::Cast { to: DType::I32 }, &[wc])?;
        let out_rank = self.g.ty(node.outputs[0]).shape.rank();
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
            bytes_i32(&bias_q),
        );
        let acc = if is_conv {
            self.node(&name, node.op.clone(), &[xi, wi, bv])?
        } else {
            let mm = self.node(&name, MirOp::MatMul, &[xi, wi])?;
            self.node(
                &format!("{name}.bias"),
                MirOp::Binary(BinaryOp::Add),
                &[mm, bv],
            )?
        };
        let ms: Vec<(i64, i64)> = (0..channels)
            .map(|c| fixed_point(sx * sw[c] / op.scale as f64))
            .collect();
        let y = self.requant(&name, acc, &ms, cshape, op, relu)?;
        for t in taken {
            done[t.index()] = true;
        }
        self.map.insert(last, (y, op));
        Ok(())
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
    let mut consumers: Vec<Vec<NodeId>> = vec![Vec::new(); g.values.len()];
    for n in g.node_ids() {
        for &i in &g.node(n).inputs {
            if !consumers[i.index()].contains(&n) {
                consumers[i.index()].push(n);
            }
        }
    }
    let is_out = (0..g.values.len())
        .map(|v| g.outputs.contains(&ValueId(v as u32)))
        .collect();
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
                MirOp::Pool { kind: PoolKind::Max, .. } | MirOp::Reshape { .. } | MirOp::Transpose { .. } => {
                    let (x, p) = input(&q, 0)?;
                    let y = q.node(&node.name, node.op.clone(), &[x])?;
                    q.map.insert(node.outputs[0], (y, p));
                    Ok(())
                }
                op => Err(format!("{} has no int8 form (quantization supports matmul/conv with constant weights, + bias, relu, max_pool, reshape, transpose)", op.kind())),
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
