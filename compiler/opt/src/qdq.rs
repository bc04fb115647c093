//! Already-quantized models (ONNX QDQ: QuantizeLinear / DequantizeLinear around float ops) → the
//! integer MIR of [`crate::quantize`], with the model's own scales and zero points — no calibration.
//!
//! The MIR of a QDQ model (the importer maps QuantizeLinear / DequantizeLinear onto the `quantize` /
//! `dequantize` ops) is read as int8 tensors and their real meaning:
//!
//! - `quantize(x)` of a graph input: the input becomes an **int8** port with that node's scale and
//!   zero point (the caller quantizes, exactly as the model's first node would);
//! - `dequantize(q)` of an int8 activation (per tensor): the float value is `q` with the node's scale
//!   and zero point; `dequantize` of a constant is a quantized constant (a weight or a bias);
//! - `matmul` (2-D constant weight; `[N, K]` through a `transpose`, as Gemm's `transB` lowers, included)
//!   and `conv` with dequantized int8 weights (symmetric: zero point 0; per output channel or per
//!   tensor) whose float result feeds `quantize` nodes — optionally through `+ bias` (a constant, e.g.
//!   Gemm's / Conv's int32 bias at scale `s_x·s_w`, taken as it is when its scale is `s_x·s_w` and its
//!   zero point 0, else rounded to that scale) and `relu` (fused into the clamp) — become the int8 layer
//!   of the calibrated path with the weights' int8 values as they are: i32 accumulation, the input zero
//!   point folded into the bias, and the fixed-point requantization `((acc·M + 2^(S-1)) >> S) + z` with
//!   `M·2^-S = s_x·s_w[c]/s_y`, `s_y` and `z` from the `quantize` node;
//! - `add` of two activations, or of an activation and a dequantized int8 constant (ONNX Runtime
//!   writes MatMul + Add as a quantized MatMul, then an Add of the int8 bias with its own scale): the
//!   int8 add of the calibrated path (TFLite / CMSIS-NN), requantized to the following `quantize`;
//! - `max_pool`, `reduce_max`, `reshape`, `transpose` and `relu` (`max(q, z)`) of an activation are exact
//!   on int8 and keep its parameters; a `quantize` of an activation with other parameters is a
//!   fixed-point requantization `((q - z_x)·M + 2^(S-1)) >> S) + z_y` (an identity when they are equal);
//! - a graph output that is the `dequantize` of an int8 activation (or an int8 `quantize` output)
//!   becomes an **int8** port with that node's scale and zero point.
//!
//! Scales must be positive and finite constants, zero points constants in their dtype's range,
//! per-channel parameters as long as the channel axis; activations int8 (QInt8) and per tensor. Every
//! problem names the model's node, all of them at once; a node after one that failed is not reported
//! again.

use crate::quantize::{fixed_point, QParams, QuantOptions, Quantized, Q};
use rlx_ir::verify::Problem;
use rlx_ir::{BinaryOp, ConstData, DType, Mir, MirOp, NodeId, OpSet, TensorType, UnaryOp, ValueId};
use std::collections::{HashMap, HashSet};

/// Whether `g` is a QDQ model: some `quantize` node quantizes a computed value (not a constant).
/// A model whose only quantization is `dequantize` of constant weights is a float model.
pub fn is_qdq(g: &Mir) -> bool {
    g.nodes
        .iter()
        .any(|n| matches!(n.op, MirOp::Quantize { .. }) && g.const_data(n.inputs[0]).is_none())
}

/// A dequantized constant: its integer values and the per-channel (or per-tensor) parameters.
#[derive(Clone, Debug)]
struct QConst {
    dtype: DType,
    shape: Vec<usize>,
    q: Vec<i64>,
    scale: Vec<f64>,
    zero: Vec<i64>,
    /// The channel axis of `scale` / `zero` (None: one pair for the whole tensor).
    axis: Option<usize>,
}

impl QConst {
    /// Parameters of the channel `c` along `axis` (per-tensor parameters serve every channel).
    fn at(&self, c: usize) -> (f64, i64) {
        match self.axis {
            Some(_) => (self.scale[c], self.zero[c]),
            None => (self.scale[0], self.zero[0]),
        }
    }
    fn per_tensor(&self) -> Option<QParams> {
        (self.axis.is_none() && self.dtype == DType::I8).then(|| QParams {
            scale: self.scale[0] as f32,
            zero_point: self.zero[0] as i32,
        })
    }
}

/// Scales, zero points and the channel axis (None: per tensor) of a quantize / dequantize node.
type Params = (Vec<f64>, Vec<i64>, Option<usize>);

/// Checks a `quantize` / `dequantize` node's scale and zero point: constants, scales positive and
/// finite, zero points within their dtype, per-channel lengths equal to the axis. Returns the
/// scales, zero points and channel axis (None when per tensor).
fn qparams_of(g: &Mir, n: NodeId) -> Result<Params, String> {
    let node = g.node(n);
    let (MirOp::Quantize { axis } | MirOp::Dequantize { axis }) = node.op else {
        return Err("not a quantize / dequantize node".into());
    };
    let s = g
        .const_data(node.inputs[1])
        .ok_or("its scale must be a constant")?;
    let z = g
        .const_data(node.inputs[2])
        .ok_or("its zero point must be a constant")?;
    let scale = s.to_f64_vec();
    let zero = z.to_i64_vec();
    if let Some((i, bad)) = scale
        .iter()
        .enumerate()
        .find(|(_, v)| !(v.is_finite() && **v > 0.0))
    {
        return Err(format!(
            "scale {bad} (element {i} of {}) must be positive and finite",
            scale.len()
        ));
    }
    let (lo, hi) = match z.dtype {
        DType::I8 => (-128, 127),
        DType::U8 => (0, 255),
        DType::I32 => (i32::MIN as i64, i32::MAX as i64),
        d => {
            return Err(format!(
                "zero point dtype {d} (int8, uint8 or int32 expected)"
            ))
        }
    };
    if let Some(bad) = zero.iter().find(|v| !(lo..=hi).contains(*v)) {
        return Err(format!("zero point {bad} is out of range for {}", z.dtype));
    }
    if scale.len() != zero.len() {
        return Err(format!(
            "{} scales but {} zero points",
            scale.len(),
            zero.len()
        ));
    }
    if scale.len() == 1 {
        return Ok((scale, zero, None));
    }
    let xs = g
        .ty(node.inputs[0])
        .shape
        .as_fixed()
        .ok_or("needs a fixed input shape")?;
    if axis >= xs.len() || xs[axis] != scale.len() {
        return Err(format!(
            "{} per-channel scales for axis {axis} of a {xs:?} tensor (per-element / blocked parameters have no int8 form here)",
            scale.len()
        ));
    }
    Ok((scale, zero, Some(axis)))
}

/// Per-tensor int8 activation parameters of a `quantize` / `dequantize` node.
fn act_qparams(g: &Mir, n: NodeId) -> Result<QParams, String> {
    let (s, z, axis) = qparams_of(g, n)?;
    let zd = g.ty(g.node(n).inputs[2]).dtype;
    if zd != DType::I8 {
        return Err(format!(
            "{zd} activations have no int8 form here (quantize activations as int8: QInt8)"
        ));
    }
    if axis.is_some() {
        return Err("a per-channel activation has no int8 form (per tensor expected)".into());
    }
    Ok(QParams {
        scale: s[0] as f32,
        zero_point: z[0] as i32,
    })
}

struct Pass<'a> {
    q: Q<'a>,
    /// Old int8 value (a `quantize` output) → (new int8 value, the `quantize` node's parameters).
    int8: HashMap<ValueId, (ValueId, QParams)>,
    /// Old float value that is the `dequantize` of a constant.
    qconst: HashMap<ValueId, QConst>,
    done: Vec<bool>,
    /// `quantize` / `dequantize` nodes with invalid parameters (already reported).
    bad: Vec<bool>,
}

impl Pass<'_> {
    /// An activation (a dequantized int8 value) used by a node.
    fn act(&self, v: ValueId) -> Result<(ValueId, QParams), String> {
        self.q.map.get(&v).copied().ok_or_else(|| {
            "an operand is not a dequantized int8 activation (QDQ: DequantizeLinear expected before each float op)".to_string()
        })
    }

    /// A float constant as a per-tensor [`QConst`] of scale 1 (an unquantized bias), or a
    /// dequantized constant.
    fn constant(&self, v: ValueId) -> Option<QConst> {
        if let Some(c) = self.qconst.get(&v) {
            return Some(c.clone());
        }
        let c = self.q.g.const_data(v)?;
        c.dtype.is_float().then(|| QConst {
            dtype: c.dtype,
            shape: c.shape.clone(),
            q: Vec::new(),
            scale: vec![1.0],
            zero: vec![0],
            axis: None,
        })
    }

    /// Real values of a float or dequantized constant.
    fn real(&self, v: ValueId, c: &QConst) -> Vec<f64> {
        if c.q.is_empty() {
            return self
                .q
                .g
                .const_data(v)
                .map(|d| d.to_f64_vec())
                .unwrap_or_default();
        }
        let ax = c
            .axis
            .map(|a| (c.shape[a + 1..].iter().product::<usize>(), c.shape[a]));
        c.q.iter()
            .enumerate()
            .map(|(i, &q)| {
                let (s, z) = c.at(ax.map_or(0, |(inner, n)| (i / inner) % n));
                (q - z) as f64 * s
            })
            .collect()
    }

    /// Where the float result `v` of an int8 layer goes: an optional `relu`, then one or more
    /// `quantize` nodes with the same per-tensor int8 parameters. Returns the nodes taken, whether
    /// relu follows, the `quantize` outputs and their parameters.
    fn requant_target(
        &self,
        v: ValueId,
    ) -> Result<(Vec<NodeId>, bool, Vec<ValueId>, QParams), String> {
        let g = self.q.g;
        let mut taken = Vec::new();
        let mut last = v;
        let mut relu = false;
        if let Some(c) = self.q.only_consumer(last) {
            if g.node(c).op == MirOp::Unary(UnaryOp::Relu) {
                relu = true;
                taken.push(c);
                last = g.node(c).outputs[0];
            }
        }
        let cs = &self.q.consumers[last.index()];
        let bad: Vec<&str> = cs
            .iter()
            .filter(|&&c| !matches!(g.node(c).op, MirOp::Quantize { .. }))
            .map(|&c| g.node(c).name.as_str())
            .collect();
        if cs.is_empty() || !bad.is_empty() || self.q.is_out[last.index()] {
            return Err(format!(
                "its float result must feed QuantizeLinear nodes only (the int8 kernels requantize it){}{}",
                if bad.is_empty() { String::new() } else { format!("; also used by {}", bad.join(", ")) },
                if self.q.is_out[last.index()] { "; it is a graph output" } else { "" }
            ));
        }
        if cs.iter().any(|c| self.bad[c.index()]) {
            return Err(String::new()); // that QuantizeLinear is reported
        }
        let mut outs = Vec::new();
        let mut params: Option<QParams> = None;
        for &c in cs {
            let p = act_qparams(g, c)
                .map_err(|e| format!("QuantizeLinear '{}': {e}", g.node(c).name))?;
            if params.is_some_and(|q| q != p) {
                return Err("its result is quantized with different parameters by several QuantizeLinear nodes".into());
            }
            params = Some(p);
            taken.push(c);
            outs.push(g.node(c).outputs[0]);
        }
        Ok((taken, relu, outs, params.expect("at least one consumer")))
    }

    fn finish(&mut self, taken: &[NodeId], outs: &[ValueId], y: ValueId, p: QParams) {
        for t in taken {
            self.done[t.index()] = true;
        }
        for &o in outs {
            self.int8.insert(o, (y, p));
        }
    }

    /// `matmul` / `conv` with a dequantized int8 weight (+ bias) (+ relu) → `quantize`.
    fn linear(&mut self, n: NodeId) -> Result<(), String> {
        let g = self.q.g;
        let node = g.node(n).clone();
        let (xq, xp) = self.act(node.inputs[0])?;
        let is_conv = matches!(node.op, MirOp::Conv { .. });
        // The weight: a dequantized constant, or (matmul) the [1, 0] transpose of one.
        let mut wv = node.inputs[1];
        let mut transposed = false;
        if !is_conv && !self.qconst.contains_key(&wv) {
            if let Some(p) = g.producer(wv) {
                if g.node(p).op == (MirOp::Transpose { perm: vec![1, 0] }) {
                    wv = g.node(p).inputs[0];
                    transposed = true;
                }
            }
        }
        let mut w = self
            .qconst
            .get(&wv)
            .cloned()
            .ok_or("the weight must be a DequantizeLinear of an int8 constant")?;
        if w.dtype != DType::I8 {
            return Err(format!("weight dtype {} (int8 expected)", w.dtype));
        }
        if let Some(z) = w.zero.iter().find(|&&z| z != 0) {
            return Err(format!(
                "weight zero point {z}: int8 weights must be symmetric (zero point 0)"
            ));
        }
        if !is_conv && w.shape.len() != 2 {
            return Err(format!("matmul weight must be 2-D, got {:?}", w.shape));
        }
        if transposed {
            let (r, c) = (w.shape[0], w.shape[1]);
            w.q = (0..r * c).map(|i| w.q[(i % r) * c + i / r]).collect();
            w.shape = vec![c, r];
            w.axis = w.axis.map(|a| 1 - a);
        }
        let ch_axis = if is_conv { 0 } else { 1 };
        if w.axis.is_some_and(|a| a != ch_axis) {
            return Err(format!(
                "weight quantized along axis {:?}; per output channel (axis {ch_axis}) or per tensor expected",
                w.axis
            ));
        }
        let channels = w.shape[ch_axis];
        let per = w.q.len() / channels.max(1);
        let at = |c: usize, k: usize| {
            if is_conv {
                c * per + k
            } else {
                k * channels + c
            }
        };
        let sx = xp.scale as f64;
        let sw: Vec<f64> = (0..channels).map(|c| w.at(c).0).collect();
        // Bias: the conv's third input, or a following `add` of a constant with one value per channel.
        let mut taken = Vec::new();
        let mut bias: Option<(ValueId, QConst)> = None;
        let mut last = node.outputs[0];
        if is_conv && node.inputs.len() == 3 {
            let b = node.inputs[2];
            bias = Some((
                b,
                self.constant(b)
                    .ok_or("the conv bias must be a constant (or its DequantizeLinear)")?,
            ));
        } else if !is_conv {
            if let Some(c) = self.q.only_consumer(last) {
                let an = g.node(c);
                if an.op == MirOp::Binary(BinaryOp::Add) {
                    let other = if an.inputs[0] == last {
                        an.inputs[1]
                    } else {
                        an.inputs[0]
                    };
                    if let Some(k) = self.constant(other) {
                        if k.shape.iter().product::<usize>() == channels
                            && g.ty(an.outputs[0]).shape == g.ty(last).shape
                        {
                            bias = Some((other, k));
                            taken.push(c);
                            last = an.outputs[0];
                        }
                    }
                }
            }
        }
        let bias_q: Vec<i64> = match &bias {
            None => vec![0; channels],
            Some((bv, b)) => {
                if b.axis.is_some() && b.scale.len() != channels {
                    return Err(format!(
                        "bias has {} per-channel scales for {channels} channels",
                        b.scale.len()
                    ));
                }
                let real = self.real(*bv, b);
                (0..channels)
                    .map(|c| {
                        let (bs, bz) = b.at(c);
                        let want = sx * sw[c];
                        if !b.q.is_empty()
                            && b.dtype == DType::I32
                            && bz == 0
                            && ((bs - want) / want).abs() < 1e-6
                        {
                            b.q[c] // the model's int32 bias at scale s_x·s_w, as it is
                        } else {
                            (real[c] / want).round() as i64
                        }
                    })
                    .collect()
            }
        };
        if let Some(b) = bias_q.iter().find(|b| b.abs() > i32::MAX as i64) {
            return Err(format!("bias {b} does not fit int32 at scale s_x·s_w"));
        }
        let bias_q: Vec<i64> = (0..channels)
            .map(|c| {
                bias_q[c] - xp.zero_point as i64 * (0..per).map(|k| w.q[at(c, k)]).sum::<i64>()
            })
            .collect();
        let (t2, relu, outs, op) = self.requant_target(last)?;
        taken.extend(t2);
        let mut ms = Vec::with_capacity(channels);
        for &s in &sw {
            let real = sx * s / op.scale as f64;
            if real >= (1u64 << 30) as f64 {
                return Err(format!(
                    "requantization multiplier {real} is too large (s_x·s_w/s_y < 2^30 expected)"
                ));
            }
            ms.push(fixed_point(real));
        }
        let out_rank = g.ty(node.outputs[0]).shape.rank();
        let op_node = node.op.clone();
        let y = self.q.emit_linear(
            &node.name,
            &op_node,
            out_rank,
            (xq, xp),
            (&w.shape, &w.q),
            &bias_q,
            &ms,
            op,
            relu,
        )?;
        self.finish(&taken, &outs, y, op);
        Ok(())
    }

    /// `add` of two int8 operands (activations, or an activation and a dequantized int8 constant).
    fn add(&mut self, n: NodeId) -> Result<(), String> {
        let g = self.q.g;
        let node = g.node(n).clone();
        let mut ops = Vec::new();
        for &v in &node.inputs {
            if let Some(&a) = self.q.map.get(&v) {
                ops.push(a);
                continue;
            }
            let c = self
                .qconst
                .get(&v)
                .cloned()
                .ok_or("an operand is neither a dequantized int8 activation nor a dequantized int8 constant")?;
            let p = c
                .per_tensor()
                .ok_or("a constant operand must be int8, quantized per tensor")?;
            let k = self
                .q
                .konst(DType::I8, c.shape.clone(), crate::quantize::bytes_i8(&c.q));
            ops.push((k, p));
        }
        let (taken, relu, outs, po) = self.requant_target(node.outputs[0])?;
        let y = self.q.emit_add(&node.name, ops[0], ops[1], po, relu)?;
        self.finish(&taken, &outs, y, po);
        Ok(())
    }

    /// `quantize` of an activation: the same int8 value when the parameters agree, else a
    /// fixed-point requantization `((q - z_x)·M + 2^(S-1)) >> S) + z_y`.
    fn requantize(&mut self, n: NodeId) -> Result<(), String> {
        let g = self.q.g;
        let node = g.node(n).clone();
        let po = act_qparams(g, n)?;
        let (x, px) = self.act(node.inputs[0])?;
        if px == po {
            self.int8.insert(node.outputs[0], (x, po));
            return Ok(());
        }
        let real = px.scale as f64 / po.scale as f64;
        if real >= (1u64 << 30) as f64 {
            return Err(format!("requantization multiplier {real} is too large"));
        }
        let name = node.name.clone();
        let z = self.q.scalar(DType::I64, -(px.zero_point as i64));
        let xi = self.q.node(&name, MirOp::Cast { to: DType::I64 }, &[x])?;
        let xz = self.q.node(&name, MirOp::Binary(BinaryOp::Add), &[xi, z])?;
        let y = self
            .q
            .requant(&name, xz, &[fixed_point(real)], vec![], po, false)?;
        self.int8.insert(node.outputs[0], (y, po));
        Ok(())
    }
}

/// Maps a QDQ model onto int8 kernels with its own scales and zero points (see the module doc).
/// `g` is the lowered MIR, not constant-folded (folding would turn the int8 weights into floats).
/// Problems name every node that has no int8 form, or whose parameters are not valid.
pub fn quantize_qdq(g: &Mir, opts: &QuantOptions) -> Result<Quantized, Vec<Problem>> {
    let mut problems = Vec::new();
    // Every quantize / dequantize node's parameters first, so each bad one is named once.
    let mut bad = vec![false; g.nodes.len()];
    for n in g.node_ids() {
        if matches!(
            g.node(n).op,
            MirOp::Quantize { .. } | MirOp::Dequantize { .. }
        ) {
            if let Err(msg) = qparams_of(g, n) {
                bad[n.index()] = true;
                problems.push(Problem {
                    node: Some(g.node(n).name.clone()),
                    msg,
                });
            }
        }
    }
    let consumers = g.consumers();
    let is_out = g.output_mask();
    let mut p = Pass {
        q: Q {
            g,
            out: Mir::new(),
            map: HashMap::new(),
            range: Vec::new(),
            consumers,
            is_out,
            opts: opts.clone(),
        },
        int8: HashMap::new(),
        qconst: HashMap::new(),
        done: bad.clone(),
        bad,
    };
    // Inputs: each must feed QuantizeLinear nodes with one set of int8 parameters.
    let mut inputs = Vec::new();
    for &i in &g.inputs {
        let v = g.value(i);
        let name = v.name.clone().unwrap_or_default();
        let cs = p.q.consumers[i.index()].clone();
        let res = (|| -> Result<QParams, String> {
            if v.ty.dtype != DType::F32 {
                return Err(format!(
                    "is {} (a QDQ model takes f32 inputs, quantized by its first QuantizeLinear)",
                    v.ty.dtype
                ));
            }
            let mut params: Option<QParams> = None;
            for &c in &cs {
                let cn = g.node(c);
                if !matches!(cn.op, MirOp::Quantize { .. }) {
                    return Err(format!(
                        "feeds '{}' ({}): every use of an input must be a QuantizeLinear",
                        cn.name,
                        cn.op.kind()
                    ));
                }
                if p.bad[c.index()] {
                    return Err(String::new()); // that QuantizeLinear is reported
                }
                let q =
                    act_qparams(g, c).map_err(|e| format!("QuantizeLinear '{}': {e}", cn.name))?;
                if params.is_some_and(|x| x != q) {
                    return Err(
                        "is quantized with different parameters by several QuantizeLinear nodes"
                            .into(),
                    );
                }
                params = Some(q);
            }
            params.ok_or_else(|| "is not quantized by a QuantizeLinear".to_string())
        })();
        match res {
            Ok(q) => {
                let ni =
                    p.q.out
                        .add_input(&name, TensorType::new(DType::I8, v.ty.shape.clone()));
                p.q.out.values[ni.index()].name = v.name.clone();
                for &c in &cs {
                    p.done[c.index()] = true;
                    p.int8.insert(g.node(c).outputs[0], (ni, q));
                }
                inputs.push(q);
            }
            Err(msg) if msg.is_empty() => {}
            Err(msg) => problems.push(Problem {
                node: None,
                msg: format!("input '{name}' {msg}"),
            }),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    // A node fails quietly when an operand comes from a node that failed (that one is reported).
    let mut failed: HashSet<ValueId> = HashSet::new();
    for n in g.node_ids() {
        if p.bad[n.index()] {
            failed.extend(g.node(n).outputs.iter().copied());
        }
        if p.done[n.index()] {
            continue;
        }
        p.done[n.index()] = true;
        let node = g.node(n).clone();
        if node.inputs.iter().any(|v| failed.contains(v)) {
            failed.extend(node.outputs.iter().copied());
            continue;
        }
        let res: Result<(), String> = (|| {
            match &node.op {
            MirOp::Dequantize { .. } => {
                let x = node.inputs[0];
                if let Some(c) = g.const_data(x) {
                    let (scale, zero, axis) = qparams_of(g, n)?;
                    p.qconst.insert(
                        node.outputs[0],
                        QConst { dtype: c.dtype, shape: c.shape.clone(), q: c.to_i64_vec(), scale, zero, axis },
                    );
                    return Ok(());
                }
                let &(xq, _) = p.int8.get(&x).ok_or("its input is neither a constant nor an int8 tensor of the model")?;
                let dp = act_qparams(g, n)?;
                p.q.map.insert(node.outputs[0], (xq, dp));
                Ok(())
            }
            MirOp::Quantize { .. } => p.requantize(n),
            MirOp::MatMul | MirOp::Conv { .. } => p.linear(n),
            MirOp::Binary(BinaryOp::Add) => p.add(n),
            MirOp::Unary(UnaryOp::Relu) => {
                let (x, xp) = p.act(node.inputs[0])?;
                let z = p.q.out.add_const(None, ConstData::scalar(DType::I8, xp.zero_point as f64));
                let y = p.q.node(&node.name, MirOp::Binary(BinaryOp::Max), &[x, z])?;
                p.q.map.insert(node.outputs[0], (y, xp));
                Ok(())
            }
            MirOp::Pool { kind: rlx_ir::PoolKind::Max, .. }
            | MirOp::Reduce { op: rlx_ir::ReduceOp::Max, .. }
            | MirOp::Reshape { .. }
            | MirOp::Transpose { .. } if p.q.map.contains_key(&node.inputs[0]) => {
                let (x, xp) = p.act(node.inputs[0])?;
                let y = p.q.node(&node.name, node.op.clone(), &[x])?;
                p.q.map.insert(node.outputs[0], (y, xp));
                Ok(())
            }
            // A transpose of a constant weight: read by the matmul that uses it.
            MirOp::Transpose { .. } if p.qconst.contains_key(&node.inputs[0]) => Ok(()),
            op => Err(format!("{} has no int8 form (QDQ models support matmul/conv with DequantizeLinear int8 weights, + bias, relu, add, max_pool, reduce_max, reshape, transpose, between QuantizeLinear/DequantizeLinear pairs)", op.kind())),
        }
        })();
        if let Err(msg) = res {
            failed.extend(node.outputs.iter().copied());
            if !msg.is_empty() {
                problems.push(Problem {
                    node: Some(node.name.clone()),
                    msg,
                });
            }
        }
    }
    let mut outputs = Vec::new();
    let mut outs = Vec::new();
    for &o in &g.outputs {
        if failed.contains(&o) {
            continue;
        }
        match p.q.map.get(&o).or_else(|| p.int8.get(&o)) {
            Some(&(v, q)) => {
                if let Some(name) = &g.value(o).name {
                    p.q.out.values[v.index()].name = Some(name.clone());
                }
                outs.push(v);
                outputs.push(q);
            }
            None => problems.push(Problem {
                node: g.producer(o).map(|n| g.node(n).name.clone()),
                msg: format!(
                    "output '{}' is not the DequantizeLinear of an int8 tensor (a QDQ model's outputs are read as int8)",
                    g.value(o).name.clone().unwrap_or_default()
                ),
            }),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    p.q.out.outputs = outs;
    Ok(Quantized {
        mir: p.q.out,
        inputs,
        outputs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::Blob;

    fn run(g: &Mir, ins: &[ConstData]) -> Vec<ConstData> {
        rlx_interp::run(g, ins).unwrap_or_else(|e| panic!("{e}"))
    }
    fn i8c(shape: Vec<usize>, v: &[i64]) -> ConstData {
        ConstData {
            dtype: DType::I8,
            shape,
            data: Blob::from_vec(v.iter().map(|&x| x as i8 as u8).collect()),
        }
    }
    fn f32c(shape: Vec<usize>, v: &[f32]) -> ConstData {
        ConstData::from_f32(shape, v)
    }
    fn lcg(seed: &mut u64) -> f64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Gemm's QDQ form (`transB`: a transposed per-channel weight, an int32 bias at s_x·s_w, relu)
    /// then an add of an int8 constant: the integer program against the interpreter's float run of
    /// the QDQ graph (dequantize → f32 op → quantize, as ONNX defines it) — within one int8 step, and
    /// equal on most outputs.
    fn gemm_graph(w_scale0: f32, w_zero0: i64) -> Mir {
        let (k, n) = (24usize, 8usize);
        let mut seed = 9;
        let mut g = Mir::new();
        let x = g.add_input("x", TensorType::fixed(DType::F32, &[1, k]));
        let c = |g: &mut Mir, d: ConstData| g.add_const(None, d);
        let (sx, zx) = (
            c(&mut g, f32c(vec![], &[0.02])),
            c(&mut g, i8c(vec![], &[-3])),
        );
        let xq = g
            .add1("x_q", MirOp::Quantize { axis: 0 }, &[x, sx, zx])
            .unwrap();
        let xd = g
            .add1("x_dq", MirOp::Dequantize { axis: 0 }, &[xq, sx, zx])
            .unwrap();
        let wq: Vec<i64> = (0..n * k)
            .map(|_| (lcg(&mut seed) * 254.0) as i64 - 127)
            .collect();
        let mut ws: Vec<f32> = (0..n)
            .map(|_| 0.002 + 0.01 * lcg(&mut seed) as f32)
            .collect();
        ws[0] = w_scale0;
        let mut wz = vec![0i64; n];
        wz[0] = w_zero0;
        let w = c(&mut g, i8c(vec![n, k], &wq));
        let (wsv, wzv) = (c(&mut g, f32c(vec![n], &ws)), c(&mut g, i8c(vec![n], &wz)));
        let wd = g
            .add1("w_dq", MirOp::Dequantize { axis: 0 }, &[w, wsv, wzv])
            .unwrap();
        let wt = g
            .add1(
                "gemm/weight_t",
                MirOp::Transpose { perm: vec![1, 0] },
                &[wd],
            )
            .unwrap();
        let bq: Vec<i64> = (0..n)
            .map(|_| (lcg(&mut seed) * 2000.0) as i64 - 1000)
            .collect();
        let bs: Vec<f32> = ws.iter().map(|s| s * 0.02).collect();
        let bqv = c(
            &mut g,
            ConstData {
                dtype: DType::I32,
                shape: vec![n],
                data: Blob::from_vec(bq.iter().flat_map(|&b| (b as i32).to_le_bytes()).collect()),
            },
        );
        let (bsv, bzv) = (
            c(&mut g, f32c(vec![n], &bs)),
            c(
                &mut g,
                ConstData {
                    dtype: DType::I32,
                    shape: vec![n],
                    data: Blob::from_vec(vec![0; 4 * n]),
                },
            ),
        );
        let bd = g
            .add1("b_dq", MirOp::Dequantize { axis: 0 }, &[bqv, bsv, bzv])
            .unwrap();
        let mm = g.add1("gemm/matmul", MirOp::MatMul, &[xd, wt]).unwrap();
        let h = g
            .add1("gemm", MirOp::Binary(BinaryOp::Add), &[mm, bd])
            .unwrap();
        let r = g.add1("relu", MirOp::Unary(UnaryOp::Relu), &[h]).unwrap();
        let (sh, zh) = (
            c(&mut g, f32c(vec![], &[0.05])),
            c(&mut g, i8c(vec![], &[-128])),
        );
        let hq = g
            .add1("h_q", MirOp::Quantize { axis: 0 }, &[r, sh, zh])
            .unwrap();
        let hd = g
            .add1("h_dq", MirOp::Dequantize { axis: 0 }, &[hq, sh, zh])
            .unwrap();
        let k8 = c(
            &mut g,
            i8c(
                vec![n],
                &(0..n as i64).map(|i| 10 * i - 40).collect::<Vec<_>>(),
            ),
        );
        let (sk, zk) = (
            c(&mut g, f32c(vec![], &[0.03])),
            c(&mut g, i8c(vec![], &[5])),
        );
        let kd = g
            .add1("k_dq", MirOp::Dequantize { axis: 0 }, &[k8, sk, zk])
            .unwrap();
        let a = g
            .add1("add", MirOp::Binary(BinaryOp::Add), &[hd, kd])
            .unwrap();
        let (sy, zy) = (
            c(&mut g, f32c(vec![], &[0.07])),
            c(&mut g, i8c(vec![], &[-20])),
        );
        let yq = g
            .add1("y_q", MirOp::Quantize { axis: 0 }, &[a, sy, zy])
            .unwrap();
        g.outputs = vec![g
            .add1("y_dq", MirOp::Dequantize { axis: 0 }, &[yq, sy, zy])
            .unwrap()];
        g
    }

    #[test]
    fn qdq_gemm_relu_add_runs_on_integers_within_one_step_of_the_float_qdq_graph() {
        let g = gemm_graph(0.004, 0);
        assert!(is_qdq(&g));
        let q = quantize_qdq(
            &g,
            &QuantOptions {
                transpose_matmul_weights: true,
                ..Default::default()
            },
        )
        .unwrap_or_else(|p| panic!("{p:?}"));
        assert_eq!(
            q.inputs[0],
            QParams {
                scale: 0.02,
                zero_point: -3
            }
        );
        assert_eq!(
            q.outputs[0],
            QParams {
                scale: 0.07,
                zero_point: -20
            }
        );
        for n in &q.mir.nodes {
            assert!(
                n.outputs.iter().all(|&v| !q.mir.ty(v).dtype.is_float()),
                "{}: float left",
                n.name
            );
        }
        let (mut seed, mut equal, mut total) = (5u64, 0, 0);
        for _ in 0..200 {
            let xf: Vec<f32> = (0..24)
                .map(|_| (lcg(&mut seed) * 5.0 - 2.5) as f32)
                .collect();
            let want = run(&g, &[f32c(vec![1, 24], &xf)]).remove(0).to_f64_vec();
            let xq = run(&g_quantize_input(), &[f32c(vec![1, 24], &xf)]).remove(0);
            let got = run(&q.mir, &[xq]).remove(0).to_i64_vec();
            for (yq, yf) in got.iter().zip(&want) {
                let wq = (yf / 0.07).round() as i64 - 20;
                assert!((yq - wq).abs() <= 1, "{yq} vs {wq}");
                equal += (*yq == wq) as usize;
                total += 1;
            }
        }
        assert!(equal * 100 >= total * 95, "{equal} of {total} equal");
    }

    /// x → int8 with the test graph's input parameters (the caller's side of the port).
    fn g_quantize_input() -> Mir {
        let mut g = Mir::new();
        let x = g.add_input("x", TensorType::fixed(DType::F32, &[1, 24]));
        let s = g.add_const(None, f32c(vec![], &[0.02]));
        let z = g.add_const(None, i8c(vec![], &[-3]));
        g.outputs = vec![g
            .add1("q", MirOp::Quantize { axis: 0 }, &[x, s, z])
            .unwrap()];
        g
    }

    /// Bad parameters are named by node, every one: a zero weight scale (and so a zero bias scale,
    /// s_x·s_w), an asymmetric weight.
    #[test]
    fn qdq_bad_parameters_are_named() {
        let p = quantize_qdq(&gemm_graph(0.0, 0), &QuantOptions::default()).unwrap_err();
        let names: Vec<_> = p.iter().filter_map(|p| p.node.as_deref()).collect();
        assert_eq!(names, ["w_dq", "b_dq"], "{p:?}");
        assert!(
            p[0].msg
                .contains("scale 0 (element 0 of 8) must be positive"),
            "{}",
            p[0].msg
        );
        let p = quantize_qdq(&gemm_graph(0.004, 3), &QuantOptions::default()).unwrap_err();
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].node.as_deref(), Some("gemm/matmul"));
        assert!(p[0].msg.contains("weight zero point 3"), "{}", p[0].msg);
    }
}
