//! The layer recognizer: the chain of fully connected, conv and max-pool layers of a quantized
//! integer MIR graph (the patterns in the crate doc), or every node that does not fit one.

use crate::layer::{Kind, Layer};
use rlx_ir::{BinaryOp, ConstData, DType, Mir, MirOp, OpSet, PadMode, PoolKind, ValueId};
use std::collections::{HashMap, HashSet};

/// Padding of an int8 activation: `[top, left, bottom, right]` and the value it reads.
type Pad = ([usize; 4], i64);

#[derive(Clone)]
enum Sym {
    /// An int8 activation at layer boundary `b`.
    Act(usize),
    /// Boundary `b`, padded (the input of a padded conv).
    Padded(usize, Pad),
    /// The i32 widening of boundary `b` (padded or not).
    Wide(usize, Option<Pad>),
    /// A constant widened to i32 (weights).
    WConst(ConstData),
    /// A layer being assembled; `stage` counts the epilogue steps seen.
    Acc(Box<Layer>, usize, u8),
}

fn per_channel(c: &ConstData, n: usize) -> Option<Vec<i64>> {
    let v = c.to_i64_vec();
    match v.len() {
        1 => Some(vec![v[0]; n]),
        l if l == n => Some(v),
        _ => None,
    }
}

fn scalar(c: &ConstData) -> Option<i64> {
    let v = c.to_i64_vec();
    (!v.is_empty() && v.iter().all(|&x| x == v[0])).then(|| v[0])
}

/// `[1, C, H, W]` or a problem.
fn nchw(s: &[usize], what: &str) -> Result<[usize; 3], String> {
    match s {
        [1, c, h, w] => Ok([*c, *h, *w]),
        _ => Err(format!("the {what} must be [1, C, H, W] (batch 1, 2-D), got {s:?}")),
    }
}

/// A node the datapath does not map: the model's node name, the MIR op kind, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Unmapped {
    pub node: String,
    pub op: &'static str,
    pub why: String,
}

/// Finds the chain of layers of a quantized graph: one int8 input, one int8 output. Returns every
/// problem (node name, op, why) when the graph is not such a chain.
pub fn recognize(g: &Mir) -> Result<(Vec<Layer>, usize, usize), Vec<String>> {
    scan(g).map_err(|(nodes, graph)| nodes.iter().map(|u| format!("node '{}': {} — {}", u.node, u.op, u.why)).chain(graph).collect())
}

/// The nodes of `g` the datapath does not map, in graph order (a node fed by one of them is not
/// reported: it fails only because its input does), and the problems of the graph as a whole.
pub fn unmapped(g: &Mir) -> (Vec<Unmapped>, Vec<String>) {
    scan(g).err().unwrap_or_default()
}

fn scan(g: &Mir) -> Result<(Vec<Layer>, usize, usize), (Vec<Unmapped>, Vec<String>)> {
    let mut unmapped: Vec<Unmapped> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    if g.inputs.len() != 1 || g.outputs.len() != 1 {
        return Err((vec![], vec![format!(
            "the Verilog writer takes one input and one output (the model has {} and {})",
            g.inputs.len(),
            g.outputs.len()
        )]));
    }
    let numel = |v: ValueId| {
        g.ty(v)
            .shape
            .as_fixed()
            .map(|s| s.iter().product::<usize>())
    };
    let inp = g.inputs[0];
    if g.ty(inp).dtype != DType::I8 {
        return Err((vec![], vec![format!("the input is {} (the Verilog writer takes a model quantized to int8: pass --calibrate)", g.ty(inp).dtype)]));
    }
    let Some(in_elems) = numel(inp) else {
        return Err((vec![], vec!["the input shape must be fixed".into()]));
    };
    let mut sym: HashMap<ValueId, Sym> = HashMap::new();
    sym.insert(inp, Sym::Act(0));
    let mut bounds = vec![in_elems];
    let mut layers: Vec<Layer> = Vec::new();
    // Outputs of unmapped nodes (and of nodes fed by them). Past an unmapped node the scan goes on,
    // so every unmapped node is reported, not only the first: an int8 value it produced is taken as
    // a fresh activation (what the node would give if it were mapped); a node reading a wider one
    // belongs to the same failed layer and is skipped.
    let mut failed: HashSet<ValueId> = HashSet::new();
    for id in g.node_ids() {
        let node = g.node(id);
        let mut skip = false;
        for v in &node.inputs {
            if !failed.contains(v) {
                continue;
            }
            match numel(*v) {
                Some(n) if g.ty(*v).dtype == DType::I8 => {
                    failed.remove(v);
                    bounds.push(n);
                    sym.insert(*v, Sym::Act(bounds.len() - 1));
                }
                _ => skip = true,
            }
        }
        if skip {
            failed.extend(node.outputs.iter().copied());
            continue;
        }
        let get = |k: usize| node.inputs.get(k).and_then(|v| sym.get(v).cloned());
        let konst = |k: usize| node.inputs.get(k).and_then(|&v| g.const_data(v));
        let shape = |v: ValueId| g.ty(v).shape.as_fixed().unwrap_or_default();
        let out = node.outputs[0];
        let res: Result<Sym, String> = (|| {
            match (&node.op, get(0)) {
            (MirOp::Reshape { .. }, Some(Sym::Act(b))) => Ok(Sym::Act(b)),
            (MirOp::Cast { to: DType::I32 }, Some(Sym::Act(b))) => Ok(Sym::Wide(b, None)),
            (MirOp::Cast { to: DType::I32 }, Some(Sym::Padded(b, p))) => Ok(Sym::Wide(b, Some(p))),
            (MirOp::Cast { to: DType::I32 }, None) => match konst(0) {
                Some(c) if c.dtype == DType::I8 => Ok(Sym::WConst(c.clone())),
                _ => Err("a widened operand must be an int8 activation or int8 constant".into()),
            },
            (MirOp::Pad { pads, mode, value }, Some(Sym::Act(b))) => {
                let ok = *mode == PadMode::Constant
                    && pads.len() == 8
                    && pads[..2] == [0, 0]
                    && pads[4..6] == [0, 0]
                    && pads.iter().all(|&p| p >= 0)
                    && value.fract() == 0.0
                    && (-128.0..=127.0).contains(value);
                if !ok {
                    return Err(format!("expected a constant int8 padding of the spatial dims of [1, C, H, W], got pads {pads:?}, mode {}, value {value}", mode.name()));
                }
                let p = [pads[2], pads[3], pads[6], pads[7]].map(|p| p as usize);
                Ok(Sym::Padded(b, (p, *value as i64)))
            }
            (MirOp::Conv { strides, pads, dilations, groups }, Some(Sym::Wide(b, pad))) => {
                let Some(Sym::WConst(w)) = get(1) else {
                    return Err("the weight must be a constant int8 tensor".into());
                };
                if b + 1 != bounds.len() {
                    return Err("layers must form a chain (each reads the previous layer's output)".into());
                }
                if *groups != 1 {
                    return Err(format!("grouped / depthwise convolution (groups = {groups}) is not mapped to the datapath"));
                }
                if dilations.iter().any(|&d| d != 1) || strides.len() != 2 || strides.contains(&0) {
                    return Err(format!("only 2-D convolution with dilation 1 is mapped (strides {strides:?}, dilations {dilations:?})"));
                }
                if pads.iter().any(|&p| p != 0) {
                    return Err("the padding must be a separate int8 pad with the input zero point (as rlx_opt::quantize writes it)".into());
                }
                let [cin, hp, wp] = nchw(&shape(node.inputs[0]), "conv input")?;
                let [ch, oh, ow] = nchw(&shape(out), "conv output")?;
                let ([pt, pl, pb, pr], pad_value) = pad.unwrap_or(([0; 4], 0));
                if w.shape.len() != 4 || w.shape[0] != ch || w.shape[1] != cin {
                    return Err(format!("weight {:?} does not match input {cin} and output {ch} channels", w.shape));
                }
                let (kh, kw) = (w.shape[2], w.shape[3]);
                let (Some(ih), Some(iw)) = (hp.checked_sub(pt + pb), wp.checked_sub(pl + pr)) else {
                    return Err(format!("padding {:?} is larger than the padded input {:?}", [pt, pl, pb, pr], [hp, wp]));
                };
                if [kh, kw, oh, ow, ih, iw].contains(&0) || (oh - 1) * strides[0] + kh > hp || (ow - 1) * strides[1] + kw > wp {
                    return Err(format!("conv window {kh}x{kw}, strides {strides:?} and output {oh}x{ow} do not fit the padded input {hp}x{wp}"));
                }
                let bias = match konst(2) {
                    None if node.inputs.len() < 3 => vec![0; ch],
                    Some(c) if c.dtype == DType::I32 => per_channel(c, ch).ok_or("bias must have one value per output channel")?.iter().map(|&x| x as i32).collect(),
                    _ => return Err("the bias must be a constant int32 tensor".into()),
                };
                let wv = w.to_i64_vec().iter().map(|&x| x as i8).collect();
                Ok(Sym::Acc(Box::new(Layer { node: node.name.clone(), kind: Kind::Conv, k: cin * ih * iw, n: ch * oh * ow, ch, cin, ih, iw, kh, kw, sh: strides[0], sw: strides[1], pt, pl, oh, ow, pad_value, w: wv, bias, mult: vec![], shift: vec![], zp: 0, lo: -128, hi: 127 }), b, 0))
            }
            (MirOp::Pool { kind: PoolKind::Max, kernel, strides, pads, dilations, .. }, Some(Sym::Act(b))) => {
                if b + 1 != bounds.len() {
                    return Err("layers must form a chain (each reads the previous layer's output)".into());
                }
                if kernel.len() != 2 || strides.len() != 2 || pads.len() != 4 || strides.contains(&0) || dilations.iter().any(|&d| d != 1) {
                    return Err(format!("only 2-D max pooling with dilation 1 is mapped (kernel {kernel:?}, strides {strides:?}, dilations {dilations:?})"));
                }
                let [c, ih, iw] = nchw(&shape(node.inputs[0]), "pool input")?;
                let [co, oh, ow] = nchw(&shape(out), "pool output")?;
                if c != co || [oh, ow, ih, iw, kernel[0], kernel[1]].contains(&0) {
                    return Err(format!("pool output {:?} does not match input {:?}", shape(out), shape(node.inputs[0])));
                }
                let l = Layer { node: node.name.clone(), kind: Kind::MaxPool, k: c * ih * iw, n: c * oh * ow, ch: c, cin: 1, ih, iw, kh: kernel[0], kw: kernel[1], sh: strides[0], sw: strides[1], pt: pads[0], pl: pads[1], oh, ow, pad_value: -128, w: vec![], bias: vec![], mult: vec![], shift: vec![], zp: 0, lo: -128, hi: 127 };
                bounds.push(l.n);
                layers.push(l);
                Ok(Sym::Act(bounds.len() - 1))
            }
            (MirOp::MatMul, Some(Sym::Wide(b, None))) => {
                let Some(Sym::WConst(w)) = get(1) else {
                    return Err("the right operand must be a constant int8 weight".into());
                };
                if b + 1 != bounds.len() {
                    return Err("layers must form a chain (each reads the previous layer's output)".into());
                }
                let xs = shape(node.inputs[0]);
                if w.shape.len() != 2 || xs.iter().product::<usize>() != w.shape[0] || xs.last() != Some(&w.shape[0]) {
                    return Err(format!("expected x[1, K] · W[K, N], got {xs:?} · {:?}", w.shape));
                }
                let (k, n) = (w.shape[0], w.shape[1]);
                let kn = w.to_i64_vec();
                // [K][N] → [N][K], the order of the other layers.
                let wv = (0..n * k).map(|i| kn[(i % k) * n + i / k] as i8).collect();
                Ok(Sym::Acc(Box::new(Layer { node: node.name.clone(), kind: Kind::Fc, k, n, ch: n, cin: k, ih: 1, iw: 1, kh: 1, kw: 1, sh: 1, sw: 1, pt: 0, pl: 0, oh: 1, ow: 1, pad_value: 0, w: wv, bias: vec![0; n], mult: vec![], shift: vec![], zp: 0, lo: -128, hi: 127 }), b, 0))
            }
            (MirOp::Binary(op), Some(Sym::Acc(mut f, b, st))) => {
                let c = konst(1).ok_or("the second operand must be a constant")?;
                let n = f.ch;
                let bad = || format!("unexpected {} after step {st} of the requantization epilogue", op.name());
                match (op, st) {
                    (BinaryOp::Add, 0) if c.dtype == DType::I32 => {
                        let v = per_channel(c, n).ok_or("bias must have one value per output channel")?;
                        for (x, y) in f.bias.iter_mut().zip(v) {
                            *x = x.wrapping_add(y as i32);
                        }
                        Ok(Sym::Acc(f, b, 0))
                    }
                    (BinaryOp::Mul, 1) => {
                        let m = per_channel(c, n).ok_or("the multiplier must be per channel")?;
                        if m.iter().any(|&m| !(0..1 << 31).contains(&m)) {
                            return Err("requantization multipliers must be in [0, 2^31)".into());
                        }
                        f.mult = m;
                        Ok(Sym::Acc(f, b, 2))
                    }
                    (BinaryOp::Add, 2) => {
                        // The rounding term: checked against the shift that follows.
                        f.shift = per_channel(c, n).ok_or("the rounding term must be per channel")?;
                        Ok(Sym::Acc(f, b, 3))
                    }
                    (BinaryOp::Shr, 3) => {
                        let s = per_channel(c, n).ok_or("the shift must be per channel")?;
                        for (r, s) in f.shift.iter().zip(&s) {
                            if !(1..=63).contains(s) || *r != 1i64 << (s - 1) {
                                return Err(format!("shift {s} with rounding term {r} (expected 2^(S-1), 1 ≤ S ≤ 63)"));
                            }
                        }
                        f.shift = s;
                        Ok(Sym::Acc(f, b, 4))
                    }
                    (BinaryOp::Add, 4) => {
                        f.zp = scalar(c).ok_or("the output zero point must be one value")?;
                        Ok(Sym::Acc(f, b, 5))
                    }
                    (BinaryOp::Max, 5) => {
                        f.lo = scalar(c).ok_or("the clamp bound must be one value")?;
                        Ok(Sym::Acc(f, b, 6))
                    }
                    (BinaryOp::Min, 6) => {
                        f.hi = scalar(c).ok_or("the clamp bound must be one value")?;
                        Ok(Sym::Acc(f, b, 7))
                    }
                    _ => Err(bad()),
                }
            }
            (MirOp::Cast { to: DType::I64 }, Some(Sym::Acc(f, b, 0))) => Ok(Sym::Acc(f, b, 1)),
            (MirOp::Cast { to: DType::I8 }, Some(Sym::Acc(f, b, 7))) => {
                if !(-128..=127).contains(&f.lo) || !(-128..=127).contains(&f.hi) || f.lo > f.hi || !(-(1i64 << 40)..(1 << 40)).contains(&f.zp) {
                    return Err(format!("clamp [{}, {}] is not within int8", f.lo, f.hi));
                }
                if b + 1 != bounds.len() {
                    return Err("layers must form a chain".into());
                }
                bounds.push(f.n);
                layers.push(*f);
                Ok(Sym::Act(bounds.len() - 1))
            }
            _ => Err("not part of an int8 layer the datapath maps (fully connected or conv with a constant int8 weight + bias + requantization, max pool) or a reshape".into()),
        }
        })();
        match res {
            Ok(s) => {
                sym.insert(out, s);
            }
            Err(why) => {
                failed.extend(node.outputs.iter().copied());
                unmapped.push(Unmapped { node: node.name.clone(), op: node.op.kind(), why });
            }
        }
    }
    if unmapped.is_empty() {
        match sym.get(&g.outputs[0]) {
            Some(Sym::Act(b)) if *b == bounds.len() - 1 && *b > 0 => {}
            _ => problems.push("the output must be the int8 result of the last layer".into()),
        }
        if layers.iter().all(|l| l.kind == Kind::MaxPool) {
            problems.push("the network has no fully connected or conv layer".into());
        }
    }
    if !unmapped.is_empty() || !problems.is_empty() {
        return Err((unmapped, problems));
    }
    let out = bounds.last().copied().unwrap_or(0);
    Ok((layers, in_elems, out))
}
