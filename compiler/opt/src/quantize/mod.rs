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
//!
//! Where things live: the shared emitters (requantization, epilogue, pad, rescale) in `emit.rs`, one
//! file per op family — `linear.rs` (matmul, conv), `add.rs`, `pool.rs` (average pool, mean),
//! `softmax.rs` — and this file's driver [`quantize`].

use rlx_ir::verify::Problem;
use rlx_ir::{
    BinaryOp, ConstData, DType, Mir, MirOp, NodeId, OpSet, PoolKind, ReduceOp, TensorType,
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


mod add;
mod emit;
mod linear;
mod pool;
mod softmax;
#[cfg(test)]
mod tests;

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
