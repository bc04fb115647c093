//! The Verilog writer: quantized integer MIR → one synthesizable, layer-sequential Verilog-2005
//! module (`NAME.v`), its ROM images (`NAME_weights.mem`, `NAME_qparams.mem`, for `$readmemh`) and a
//! self-checking testbench (`NAME_tb.v`).
//!
//! Input: the integer MIR that `rlx_opt::quantize` writes (the same graph the MCU writer plans and the
//! interpreter runs, so the integer semantics are the host's by construction). The writer recognizes
//! three layer kinds —
//! - fully connected: `cast(x:i8→i32)` · `cast(W:i8→i32)` (`matmul`) `+ bias:i32`, then the
//!   requantization epilogue `((i64(acc)·M + 2^(S-1)) >> S) + z`, `max lo`, `min hi`, `cast i8`;
//! - convolution (2-D, groups 1, dilation 1, any stride): `conv(cast(x), cast(W), bias:i32)` and the
//!   same epilogue, its padding an int8 `pad` of the input with the input zero point in front of the
//!   widening cast (as the quantize pass writes it);
//! - max pooling on int8 (any window, stride, padding, ceil mode; dilation 1) —
//!
//! and `reshape` (free: the layout is row-major NCHW). Anything else is reported, every node at once.
//! It reads MIR, not the LIR loop form: a datapath is scheduled per layer (a MAC array over output
//! channels), which the loop form does not describe yet.
//!
//! The datapath: one activation RAM (every layer boundary has its own region, one write and one
//! synchronous read port), a weight ROM whose words hold the `P = --macs-per-cycle` int8 weights of
//! one reduction step for `P` consecutive output channels (stored in the order they are read), `P`
//! int8×int8 multipliers feeding `P` int32 accumulators, one requantization unit (bias add in int32,
//! a 32×31-bit multiply, rounding add, arithmetic shift, zero point, clamp) shared by all layers, fed
//! from a per-channel parameter ROM `{S:8, M:32, bias:32}`, and a max register for pooling. Every
//! layer runs the same loop: for each output pixel, for each group of `P` channels, a reduction of
//! `depth` steps whose activation addresses an incremental address generator produces (window ×
//! input channels; positions in the padding read the pad value), then one write per channel. A
//! fully connected layer is the one-pixel case. Cycles per inference are data-independent:
//! [`cycles`].

use rlx_ir::caps::TargetCaps;
use rlx_ir::{BinaryOp, ConstData, DType, Mir, MirOp, OpSet, PadMode, PoolKind, ValueId};
use std::collections::HashMap;
use std::fmt::Write;

/// The MIR op kinds the writer's recognizer consumes (in the patterns above), all integer dtypes
/// of the quantized graph.
pub const KINDS: &[&str] = &[
    "cast", "matmul", "add", "mul", "shr", "max", "min", "reshape", "conv", "pad", "max_pool",
];
pub const DTYPES: &[DType] = &[DType::I8, DType::I32, DType::I64];

/// The claim set of `--target verilog`.
pub fn caps(name: &str) -> TargetCaps {
    TargetCaps::uniform(name, KINDS, DTYPES)
}

/// Affine parameters of an int8 port: `real = (q - zero_point) · scale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PortQuant {
    pub scale: f32,
    pub zero_point: i32,
}

pub struct Options {
    /// Module name (a Verilog identifier) and file prefix.
    pub name: String,
    /// Multipliers in the MAC array (output channels computed in parallel), ≥ 1.
    pub macs_per_cycle: usize,
    pub input: PortQuant,
    pub output: PortQuant,
    /// Written into the header comment.
    pub rlxc_version: String,
}

/// What a layer computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Fully connected: `x[1, K] · W[K, N]`.
    Fc,
    /// 2-D convolution, NCHW, groups 1.
    Conv,
    /// 2-D max pooling, NCHW.
    MaxPool,
}

/// One layer of the integer graph. A fully connected layer is a 1×1 "image" of `K` channels with a
/// 1×1 kernel; a max pool has no weights and no requantization (it keeps the int8 scale).
#[derive(Clone, Debug, PartialEq)]
pub struct Layer {
    /// The MIR node name of its matmul / conv / max_pool.
    pub node: String,
    pub kind: Kind,
    /// Input and output elements (the sizes of the activation regions it reads and writes).
    pub k: usize,
    pub n: usize,
    /// Output channels (fc: N; conv: filters; max pool: the input's channels).
    pub ch: usize,
    /// Input geometry `[cin, ih, iw]` (fc: `[K, 1, 1]`), window `[kh, kw]`, strides `[sh, sw]`,
    /// leading padding `[pt, pl]` (trailing padding follows from the output size) and output `[oh, ow]`.
    pub cin: usize,
    pub ih: usize,
    pub iw: usize,
    pub kh: usize,
    pub kw: usize,
    pub sh: usize,
    pub sw: usize,
    pub pt: usize,
    pub pl: usize,
    pub oh: usize,
    pub ow: usize,
    /// What a position in the padding reads (conv: the input zero point; max pool: -128).
    pub pad_value: i64,
    /// int8 weights, `[ch][depth]` row-major (depth = cin·kh·kw; empty for a max pool).
    pub w: Vec<i8>,
    /// int32 bias per output channel.
    pub bias: Vec<i32>,
    /// Fixed-point multiplier (0 ≤ M < 2^31) and shift (1 ≤ S ≤ 63) per output channel.
    pub mult: Vec<i64>,
    pub shift: Vec<i64>,
    pub zp: i64,
    pub lo: i64,
    pub hi: i64,
}

impl Layer {
    /// Reduction steps per output value: the window times the input channels (max pool: the window).
    pub fn depth(&self) -> usize {
        match self.kind {
            Kind::MaxPool => self.kh * self.kw,
            _ => self.cin * self.kh * self.kw,
        }
    }
    /// Output pixels the loop visits (a max pool visits every channel's pixels, one lane).
    pub fn pixels(&self) -> usize {
        match self.kind {
            Kind::MaxPool => self.ch * self.oh * self.ow,
            _ => self.oh * self.ow,
        }
    }
    /// Groups of `p` output channels per pixel, and values written per pixel.
    pub fn groups(&self, p: usize) -> usize {
        match self.kind {
            Kind::MaxPool => 1,
            _ => self.ch.div_ceil(p),
        }
    }
    pub fn writes(&self) -> usize {
        match self.kind {
            Kind::MaxPool => 1,
            _ => self.ch,
        }
    }
}

/// The generated files and figures.
pub struct Design {
    pub verilog: String,
    pub testbench: String,
    /// `NAME_weights.mem`: `P·8`-bit words, hex, one per line.
    pub weights_mem: String,
    /// `NAME_qparams.mem`: 72-bit words `{S, M, bias}`, hex, one per line.
    pub qparams_mem: String,
    pub layers: Vec<Layer>,
    pub in_elems: usize,
    pub out_elems: usize,
    /// Clock cycles from the first input beat to the last output beat of one inference, with the
    /// input always valid and the output always ready.
    pub cycles: u64,
    /// Bytes of the activation RAM, weight ROM and parameter ROM.
    pub act_bytes: usize,
    pub weight_rom_bits: usize,
    pub qparam_rom_bits: usize,
}

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

/// Finds the chain of layers of a quantized graph: one int8 input, one int8 output. Returns every
/// problem (node name, op, why) when the graph is not such a chain.
pub fn recognize(g: &Mir) -> Result<(Vec<Layer>, usize, usize), Vec<String>> {
    let mut problems = Vec::new();
    if g.inputs.len() != 1 || g.outputs.len() != 1 {
        return Err(vec![format!(
            "the Verilog writer takes one input and one output (the model has {} and {})",
            g.inputs.len(),
            g.outputs.len()
        )]);
    }
    let numel = |v: ValueId| {
        g.ty(v)
            .shape
            .as_fixed()
            .map(|s| s.iter().product::<usize>())
    };
    let inp = g.inputs[0];
    if g.ty(inp).dtype != DType::I8 {
        return Err(vec![format!("the input is {} (the Verilog writer takes a model quantized to int8: pass --calibrate)", g.ty(inp).dtype)]);
    }
    let Some(in_elems) = numel(inp) else {
        return Err(vec!["the input shape must be fixed".into()]);
    };
    let mut sym: HashMap<ValueId, Sym> = HashMap::new();
    sym.insert(inp, Sym::Act(0));
    let mut bounds = vec![in_elems];
    let mut layers: Vec<Layer> = Vec::new();
    for id in g.node_ids() {
        let node = g.node(id);
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
            Err(e) => problems.push(format!("node '{}': {} — {e}", node.name, node.op.kind())),
        }
    }
    if problems.is_empty() {
        match sym.get(&g.outputs[0]) {
            Some(Sym::Act(b)) if *b == bounds.len() - 1 && *b > 0 => {}
            _ => problems.push("the output must be the int8 result of the last layer".into()),
        }
        if layers.iter().all(|l| l.kind == Kind::MaxPool) {
            problems.push("the network has no fully connected or conv layer".into());
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let out = bounds.last().copied().unwrap_or(0);
    Ok((layers, in_elems, out))
}

/// Verilog-2005 reserved words (IEEE 1364-2005 annex B), which cannot name the module.
const KEYWORDS: &[&str] = &[
    "always",
    "and",
    "assign",
    "automatic",
    "begin",
    "buf",
    "bufif0",
    "bufif1",
    "case",
    "casex",
    "casez",
    "cell",
    "cmos",
    "config",
    "deassign",
    "default",
    "defparam",
    "design",
    "disable",
    "edge",
    "else",
    "end",
    "endcase",
    "endconfig",
    "endfunction",
    "endgenerate",
    "endmodule",
    "endprimitive",
    "endspecify",
    "endtable",
    "endtask",
    "event",
    "for",
    "force",
    "forever",
    "fork",
    "function",
    "generate",
    "genvar",
    "highz0",
    "highz1",
    "if",
    "ifnone",
    "incdir",
    "include",
    "initial",
    "inout",
    "input",
    "instance",
    "integer",
    "join",
    "large",
    "liblist",
    "library",
    "localparam",
    "macromodule",
    "medium",
    "module",
    "nand",
    "negedge",
    "nmos",
    "nor",
    "noshowcancelled",
    "not",
    "notif0",
    "notif1",
    "or",
    "output",
    "parameter",
    "pmos",
    "posedge",
    "primitive",
    "pull0",
    "pull1",
    "pulldown",
    "pullup",
    "pulsestyle_onevent",
    "pulsestyle_ondetect",
    "rcmos",
    "real",
    "realtime",
    "reg",
    "release",
    "repeat",
    "rnmos",
    "rpmos",
    "rtran",
    "rtranif0",
    "rtranif1",
    "scalared",
    "showcancelled",
    "signed",
    "small",
    "specify",
    "specparam",
    "strong0",
    "strong1",
    "supply0",
    "supply1",
    "table",
    "task",
    "time",
    "tran",
    "tranif0",
    "tranif1",
    "tri",
    "tri0",
    "tri1",
    "triand",
    "trior",
    "trireg",
    "unsigned",
    "use",
    "uwire",
    "vectored",
    "wait",
    "wand",
    "weak0",
    "weak1",
    "while",
    "wire",
    "wor",
    "xnor",
    "xor",
];

/// Bits to hold values `0..n` (at least 1).
fn bits(n: usize) -> usize {
    let mut b = 1;
    while (1usize << b) < n {
        b += 1;
    }
    b
}

/// Cycles of one inference (see the module doc): one per input byte, then per layer and output pixel
/// `G·(depth+2)` for its groups of `p` channels plus one per value written, and 2 per output byte:
/// `IN + Σ_layers pixels·(G·(depth+2) + writes) + 2·OUT`.
pub fn cycles(layers: &[Layer], in_elems: usize, out_elems: usize, p: usize) -> u64 {
    let mut c = in_elems as u64 + 2 * out_elems as u64;
    for l in layers {
        let per_pixel = l.groups(p) as u64 * (l.depth() as u64 + 2) + l.writes() as u64;
        c += l.pixels() as u64 * per_pixel;
    }
    c
}

fn hex_signed(v: i64, digits: usize) -> String {
    let mask = if digits >= 16 {
        u64::MAX
    } else {
        (1u64 << (4 * digits)) - 1
    };
    format!("{:0w$x}", (v as u64) & mask, w = digits)
}

/// Verilog signed 64-bit literal.
fn s64(v: i64) -> String {
    if v < 0 {
        format!("-64'sd{}", v.unsigned_abs())
    } else {
        format!("64'sd{v}")
    }
}

/// `v` modulo `2^w` as a `w`-bit Verilog literal (address steps may be negative: they wrap).
fn lit(v: i64, w: usize) -> String {
    format!("{w}'d{}", (v as i128).rem_euclid(1i128 << w))
}

/// `sig` (`from` bits) zero-extended to `to` bits.
fn zext(sig: &str, from: usize, to: usize) -> String {
    if to > from {
        format!("{{{}'d0, {sig}}}", to - from)
    } else {
        sig.to_string()
    }
}

/// Writes the design for a quantized graph.
pub fn emit(g: &Mir, o: &Options) -> Result<Design, String> {
    let (layers, in_elems, out_elems) = recognize(g).map_err(|p| {
        let mut s = format!(
            "{} node(s) cannot be mapped to the Verilog datapath:",
            p.len()
        );
        for x in &p {
            s.push_str("\n  ");
            s.push_str(x);
        }
        s
    })?;
    if KEYWORDS.contains(&o.name.as_str())
        || !o
            .name
            .starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
    {
        return Err(format!("'{}' is not a Verilog module name (a Verilog keyword, or not an identifier): pass --name", o.name));
    }
    if let Some(l) = layers.iter().find(|l| l.depth() == 0 || l.ch == 0 || l.n == 0 || l.k == 0) {
        return Err(format!("node '{}': a layer with an empty input, window or output cannot be mapped", l.node));
    }
    let p = o.macs_per_cycle;
    if p == 0 || p > 256 {
        return Err(format!("--macs-per-cycle must be in 1..=256, got {p}"));
    }
    let name = &o.name;
    let nl = layers.len();
    // Layouts: activation regions, weight words (read order), parameter words.
    let mut abase = vec![0usize];
    for l in &layers {
        abase.push(abase.last().copied().unwrap_or(0) + l.k);
    }
    let act_depth = abase[nl] + out_elems;
    let mut wmem = String::new();
    let mut qmem = String::new();
    let (mut wbase, mut qbase) = (Vec::new(), Vec::new());
    let (mut wdepth, mut qdepth) = (0usize, 0usize);
    for l in &layers {
        wbase.push(wdepth);
        qbase.push(qdepth);
        if l.kind == Kind::MaxPool {
            continue;
        }
        let depth = l.depth();
        for gi in 0..l.groups(p) {
            for d in 0..depth {
                for j in (0..p).rev() {
                    let c = gi * p + j;
                    let w = if c < l.ch { l.w[c * depth + d] } else { 0 };
                    let _ = write!(wmem, "{:02x}", w as u8);
                }
                wmem.push('\n');
                wdepth += 1;
            }
        }
        for c in 0..l.ch {
            let _ = writeln!(
                qmem,
                "{:02x}{:08x}{}",
                l.shift[c],
                l.mult[c],
                hex_signed(l.bias[c] as i64, 8)
            );
        }
        qdepth += l.ch;
    }
    let aw = bits(act_depth);
    let ww = bits(wdepth);
    let qw = bits(qdepth);
    let jw = bits(p + 1);
    let lw = bits(nl);
    let gw = bits(layers.iter().map(|l| l.groups(p)).max().unwrap_or(1));
    let dw = bits(layers.iter().map(|l| l.depth() + 1).max().unwrap_or(1));
    let xw = bits(layers.iter().map(|l| l.kh.max(l.kw)).max().unwrap_or(1));
    let cw = bits(
        layers
            .iter()
            .map(|l| {
                ((l.oh - 1) * l.sh + l.kh)
                    .max((l.ow - 1) * l.sw + l.kw)
                    .max(l.pt + l.ih)
                    .max(l.pl + l.iw)
                    + 1
            })
            .max()
            .unwrap_or(1),
    )
    .max(xw);
    let pxw = bits(layers.iter().map(|l| l.pixels()).max().unwrap_or(1));
    let cyc = cycles(&layers, in_elems, out_elems, p);
    let pw = 8 * p;
    let has_pool = layers.iter().any(|l| l.kind == Kind::MaxPool);
    // First read address of a layer: its input region, moved back by the leading padding.
    let mstart0 = |i: usize| {
        let l = &layers[i];
        abase[i] as i64 - (l.pt * l.iw + l.pl) as i64
    };

    let mut v = String::new();
    let _ = writeln!(v, "// {name}: int8 neural network datapath, generated by rlxc {} (--target verilog --macs-per-cycle {p}).", o.rlxc_version);
    let _ = writeln!(v, "// Verilog-2005, synthesizable; ROM images are read with $readmemh from the working directory:");
    let _ = writeln!(v, "//   {name}_weights.mem ({wdepth} x {pw}-bit words), {name}_qparams.mem ({qdepth} x 72-bit words {{S[7:0], M[31:0], bias[31:0]}}).");
    let _ = writeln!(v, "//");
    let _ = writeln!(v, "// Network ({nl} layer(s); int8 weights, int32 accumulation, per-channel requantization");
    let _ = writeln!(v, "// y = clamp(((int64(acc + bias) * M + 2^(S-1)) >>> S) + zp, lo, hi), bit-exact with rlxc's int8 interpreter run):");
    for (i, l) in layers.iter().enumerate() {
        let _ = match l.kind {
            Kind::Fc => writeln!(v, "//   layer {i} '{}': fully connected {} -> {}, zp {}, clamp [{}, {}]", l.node, l.k, l.n, l.zp, l.lo, l.hi),
            Kind::Conv => writeln!(v, "//   layer {i} '{}': conv {}x{}x{} -> {}x{}x{}, kernel {}x{}, stride {}x{}, pad {}/{} (reads {}), zp {}, clamp [{}, {}]",
                l.node, l.cin, l.ih, l.iw, l.ch, l.oh, l.ow, l.kh, l.kw, l.sh, l.sw, l.pt, l.pl, l.pad_value, l.zp, l.lo, l.hi),
            Kind::MaxPool => writeln!(v, "//   layer {i} '{}': max pool {}x{}x{} -> {}x{}x{}, window {}x{}, stride {}x{}, pad {}/{}",
                l.node, l.ch, l.ih, l.iw, l.ch, l.oh, l.ow, l.kh, l.kw, l.sh, l.sw, l.pt, l.pl),
        };
    }
    let _ = writeln!(v, "//");
    let _ = writeln!(v, "// Ports:");
    let _ = writeln!(
        v,
        "//   clk        in   1  clock; everything is registered on its rising edge"
    );
    let _ = writeln!(v, "//   rst        in   1  synchronous reset, active high");
    let _ = writeln!(v, "//   in_valid   in   1  in_data holds an input element");
    let _ = writeln!(v, "//   in_ready   out  1  the design accepts an element (high while loading; a beat is in_valid && in_ready)");
    let _ = writeln!(v, "//   in_data    in   8  int8 input element, two's complement, {in_elems} beats per inference in row-major order;");
    let _ = writeln!(v, "//                     quantize with scale {:e}, zero point {}: q = clamp(round_half_even(x / scale) + zp, -128, 127)", o.input.scale, o.input.zero_point);
    let _ = writeln!(
        v,
        "//   out_valid  out  1  out_data holds an output element"
    );
    let _ = writeln!(
        v,
        "//   out_ready  in   1  the consumer takes it (a beat is out_valid && out_ready)"
    );
    let _ = writeln!(v, "//   out_data   out  8  int8 output element, {out_elems} beats per inference; real = (q - {}) * {:e}", o.output.zero_point, o.output.scale);
    let _ = writeln!(
        v,
        "//   out_last   out  1  marks the last output beat of an inference"
    );
    let _ = writeln!(v, "// Latency: {cyc} cycles per inference from the first input beat to the last output beat (no stalls).");
    let _ = writeln!(
        v,
        "// One inference at a time: inputs are accepted again after the last output beat.\n"
    );
    let _ = writeln!(v, "`default_nettype none\n");
    let _ = writeln!(v, "module {name} (\n    input  wire       clk,\n    input  wire       rst,\n    input  wire       in_valid,\n    output wire       in_ready,\n    input  wire [7:0] in_data,\n    output wire       out_valid,\n    input  wire       out_ready,\n    output wire [7:0] out_data,\n    output wire       out_last\n);");
    let _ = writeln!(v, "    localparam [2:0] S_LOAD = 3'd0, S_MAC = 3'd1, S_REQ = 3'd2, S_ORD = 3'd3, S_OV = 3'd4;");
    let _ = writeln!(
        v,
        "    localparam [{}:0] IN_LAST = {aw}'d{}, OUT_LAST = {aw}'d{}, OUT_BASE = {aw}'d{}, MSTART_FIRST = {};",
        aw - 1,
        in_elems - 1,
        out_elems - 1,
        abase[nl],
        lit(mstart0(0), aw)
    );
    let _ = writeln!(
        v,
        "    localparam [{}:0] LAST_LAYER = {lw}'d{};\n",
        lw - 1,
        nl - 1
    );
    let _ = writeln!(v, "    // Memories: activations (input region at 0, then each layer's output), weights, requantization parameters.");
    let _ = writeln!(v, "    reg [7:0] act [0:{}];", act_depth - 1);
    let _ = writeln!(v, "    reg [{}:0] wrom [0:{}];", pw - 1, wdepth - 1);
    let _ = writeln!(v, "    reg [71:0] qrom [0:{}];", qdepth - 1);
    let _ = writeln!(v, "    initial $readmemh(\"{name}_weights.mem\", wrom);");
    let _ = writeln!(v, "    initial $readmemh(\"{name}_qparams.mem\", qrom);\n");
    let _ = writeln!(v, "    reg [2:0] state;\n    reg [{}:0] layer;\n    reg [{}:0] g;\n    reg [{}:0] k;\n    reg [{}:0] cnt;\n    reg [{}:0] j;", lw - 1, gw - 1, dw - 1, aw - 1, jw - 1);
    let _ = writeln!(v, "    reg [{}:0] wptr;\n    reg [{}:0] qptr;\n    reg mac_v, req_v, acc_clr;\n    reg [{}:0] req_addr;", ww - 1, qw - 1, aw - 1);
    let _ = writeln!(v, "    // Address generator: output pixel (origin px0/py0 in padded coordinates, first read address mstart,");
    let _ = writeln!(v, "    // index pix), window position kx/ky, read address maddr, offset coff of the channel being written.");
    let _ = writeln!(v, "    reg [{}:0] px0, py0;\n    reg [{}:0] kx, ky;\n    reg [{}:0] mstart, maddr, coff;\n    reg [{}:0] pix;", cw - 1, xw - 1, aw - 1, pxw - 1);
    let _ = writeln!(v, "    reg [31:0] acc_sel;");
    let _ = writeln!(
        v,
        "    reg [7:0] act_q;\n    reg x_pad;\n    reg [{}:0] w_q;\n    reg [71:0] q_q;\n",
        pw - 1
    );
    // Per-layer constants.
    let _ = writeln!(v, "    // Per-layer constants (see the module doc of rlx-target-verilog for the loop they drive).");
    let _ = writeln!(v, "    reg [{}:0] k_lim;\n    reg [{}:0] abase_out, d_row, d_ch, step_x, step_y, step_c, ohw, mstart_next;", dw - 1, aw - 1);
    let _ = writeln!(v, "    reg [{}:0] kw_last, kh_last;\n    reg [{}:0] s_x, s_y, px_last, py_last, pad_t, pad_l, end_y, end_x;", xw - 1, cw - 1);
    let _ = writeln!(v, "    reg [{}:0] pix_last;\n    reg [{}:0] wbase;\n    reg [{}:0] qbase;", pxw - 1, ww - 1, qw - 1);
    let _ = writeln!(v, "    reg [{}:0] g_last;\n    reg [{}:0] lanes_last;\n    reg [7:0] padv;\n    reg pool;\n    reg signed [63:0] zp, lo, hi;", gw - 1, jw - 1);
    let _ = writeln!(v, "    always @* begin\n        case (layer)");
    for (i, l) in layers.iter().enumerate() {
        let gl = l.groups(p);
        let last = if l.kind == Kind::MaxPool { 1 } else { l.ch - (gl - 1) * p };
        let (iw, ihw) = (l.iw as i64, (l.ih * l.iw) as i64);
        let (kw, kh) = (l.kw as i64, l.kh as i64);
        let (sw, sh) = (l.sw as i64, l.sh as i64);
        let (ow, oh) = (l.ow as i64, l.oh as i64);
        let d_row = iw - (kw - 1);
        let d_ch = ihw - (kh - 1) * iw - (kw - 1);
        let step_y = sh * iw - (ow - 1) * sw;
        let step_c = ihw - (oh - 1) * sh * iw - (ow - 1) * sw;
        let next = if i + 1 < nl { mstart0(i + 1) } else { 0 };
        let _ = writeln!(v, "            {lw}'d{i}: begin k_lim = {dw}'d{}; abase_out = {aw}'d{}; d_row = {}; d_ch = {}; step_x = {}; step_y = {}; step_c = {}; ohw = {}; mstart_next = {};",
            l.depth(), abase[i + 1], lit(d_row, aw), lit(d_ch, aw), lit(sw, aw), lit(step_y, aw), lit(step_c, aw), lit(oh * ow, aw), lit(next, aw));
        let _ = writeln!(v, "                kw_last = {xw}'d{}; kh_last = {xw}'d{}; s_x = {cw}'d{sw}; s_y = {cw}'d{sh}; px_last = {cw}'d{}; py_last = {cw}'d{}; pad_t = {cw}'d{}; pad_l = {cw}'d{}; end_y = {cw}'d{}; end_x = {cw}'d{};",
            kw - 1, kh - 1, (ow - 1) * sw, (oh - 1) * sh, l.pt, l.pl, l.pt + l.ih, l.pl + l.iw);
        let _ = writeln!(v, "                pix_last = {pxw}'d{}; wbase = {ww}'d{}; qbase = {qw}'d{}; g_last = {gw}'d{}; lanes_last = {jw}'d{last}; padv = 8'h{:02x}; pool = 1'b{}; zp = {}; lo = {}; hi = {}; end",
            l.pixels() - 1, wbase[i], qbase[i], gl - 1, l.pad_value as u8, u8::from(l.kind == Kind::MaxPool), s64(l.zp), s64(l.lo), s64(l.hi));
    }
    let _ = writeln!(v, "            default: begin k_lim = {dw}'d0; abase_out = {aw}'d0; d_row = {aw}'d0; d_ch = {aw}'d0; step_x = {aw}'d0; step_y = {aw}'d0; step_c = {aw}'d0; ohw = {aw}'d0; mstart_next = {aw}'d0;");
    let _ = writeln!(v, "                kw_last = {xw}'d0; kh_last = {xw}'d0; s_x = {cw}'d0; s_y = {cw}'d0; px_last = {cw}'d0; py_last = {cw}'d0; pad_t = {cw}'d0; pad_l = {cw}'d0; end_y = {cw}'d0; end_x = {cw}'d0;");
    let _ = writeln!(v, "                pix_last = {pxw}'d0; wbase = {ww}'d0; qbase = {qw}'d0; g_last = {gw}'d0; lanes_last = {jw}'d0; padv = 8'h00; pool = 1'b0; zp = 64'sd0; lo = 64'sd0; hi = 64'sd0; end");
    let _ = writeln!(v, "        endcase\n    end\n");
    let _ = writeln!(
        v,
        "    wire [{}:0] lanes = (g == g_last) ? lanes_last : {jw}'d{p};",
        jw - 1
    );
    let _ = writeln!(v, "    // The position read now, in padded coordinates: inside the input, or in the padding (reads padv).");
    let _ = writeln!(v, "    wire [{}:0] iy = py0 + {};\n    wire [{}:0] ix = px0 + {};", cw - 1, zext("ky", xw, cw), cw - 1, zext("kx", xw, cw));
    let _ = writeln!(v, "    wire in_win = (iy >= pad_t) && (iy < end_y) && (ix >= pad_l) && (ix < end_x);\n");
    // MAC array.
    let _ = writeln!(v, "    // MAC array: {p} int8 x int8 multipliers, int32 accumulators (wrapping, as the host's i32).");
    let _ = writeln!(v, "    wire signed [7:0] x = x_pad ? padv : act_q;");
    // The 16-bit products in one combinational block (one evaluation per cycle in an event-driven
    // simulator; a separate 16-bit product keeps synthesis from building 32-bit multipliers).
    for l in 0..p {
        let _ = writeln!(v, "    reg signed [15:0] p{l};");
    }
    let _ = writeln!(v, "    always @* begin");
    for l in 0..p {
        let _ = writeln!(v, "        p{l} = x * $signed(w_q[{}:{}]);", 8 * l + 7, 8 * l);
    }
    let _ = writeln!(v, "    end");
    for l in 0..p {
        let _ = writeln!(v, "    reg signed [31:0] acc{l};");
    }
    let _ = writeln!(v, "    always @(posedge clk) begin\n        if (acc_clr) begin");
    for l in 0..p {
        let _ = writeln!(v, "            acc{l} <= 32'd0;");
    }
    let _ = writeln!(v, "        end else if (mac_v) begin");
    for l in 0..p {
        let _ = writeln!(v, "            acc{l} <= acc{l} + {{{{16{{p{l}[15]}}}}, p{l}}};");
    }
    let _ = writeln!(v, "        end\n    end");
    let _ = writeln!(v);
    if has_pool {
        let _ = writeln!(v, "    // Max pooling: the running maximum of the window (padding reads -128).");
        let _ = writeln!(v, "    reg signed [7:0] mx;");
        let _ = writeln!(v, "    always @(posedge clk) begin\n        if (acc_clr) mx <= -8'sd128;\n        else if (mac_v && x > mx) mx <= x;\n    end\n");
    }
    // Requantization.
    let _ = writeln!(v, "    // Requantization (one unit, lanes in turn).");
    let _ = writeln!(v, "    // acc_sel: the accumulator of lane j, registered as its parameters are read (q_q).");
    let _ = writeln!(v, "    reg [31:0] acc_j;");
    if p > 1 {
        let _ = writeln!(v, "    always @* begin\n        case (j)");
        for l in 0..p {
            let _ = writeln!(v, "            {jw}'d{l}: acc_j = acc{l};");
        }
        let _ = writeln!(
            v,
            "            default: acc_j = 32'd0;\n        endcase\n    end"
        );
    } else {
        let _ = writeln!(v, "    always @* acc_j = acc0;");
    }
    let _ = writeln!(v, "    wire [31:0] q_bias = q_q[31:0];\n    wire [31:0] q_mult = q_q[63:32];\n    wire [7:0] q_shift = q_q[71:64];");
    let _ = writeln!(v, "    wire [31:0] accb = acc_sel + q_bias;");
    let _ = writeln!(v, "    wire signed [63:0] prod = $signed({{{{32{{accb[31]}}}}, accb}}) * $signed({{32'd0, q_mult}});");
    let _ = writeln!(
        v,
        "    wire signed [63:0] rnd = prod + $signed(64'd1 << (q_shift - 8'd1));"
    );
    let _ = writeln!(v, "    wire signed [63:0] shd = rnd >>> q_shift;");
    let _ = writeln!(v, "    wire signed [63:0] zq = shd + zp;");
    let _ = writeln!(
        v,
        "    wire [7:0] yq = (zq < lo) ? lo[7:0] : (zq > hi) ? hi[7:0] : zq[7:0];\n"
    );
    // Memory ports.
    let _ = writeln!(v, "    // Activation RAM: one write port (input beats / layer outputs), one synchronous read port.");
    let _ = writeln!(v, "    wire act_we = (state == S_LOAD) ? in_valid : req_v;");
    let _ = writeln!(
        v,
        "    wire [{}:0] act_waddr = (state == S_LOAD) ? cnt : req_addr;",
        aw - 1
    );
    let res = if has_pool { "pool ? mx : yq" } else { "yq" };
    let _ = writeln!(
        v,
        "    wire [7:0] act_wdata = (state == S_LOAD) ? in_data : {res};"
    );
    let _ = writeln!(
        v,
        "    wire out_phase = (state == S_ORD) || (state == S_OV);"
    );
    let _ = writeln!(
        v,
        "    wire [{}:0] act_raddr = out_phase ? OUT_BASE + cnt : maddr;",
        aw - 1
    );
    let _ = writeln!(v, "    always @(posedge clk) begin\n        if (act_we) act[act_waddr] <= act_wdata;\n        act_q <= act[act_raddr];\n        x_pad <= !in_win;\n    end");
    let _ = writeln!(v, "    always @(posedge clk) w_q <= wrom[wptr];");
    let _ = writeln!(v, "    always @(posedge clk) q_q <= qrom[qptr];\n");
    // Control.
    let _ = writeln!(v, "    // Control: load -> per layer, per output pixel, per group of {p} output channels: a reduction over");
    let _ = writeln!(v, "    // the window x input channels, then one write per channel (requantized, or the pool's maximum) -> stream out.");
    let _ = writeln!(v, "    always @(posedge clk) begin");
    let _ = writeln!(v, "        if (rst) begin");
    let _ = writeln!(v, "            state <= S_LOAD; layer <= {lw}'d0; g <= {gw}'d0; k <= {dw}'d0; cnt <= {aw}'d0; j <= {jw}'d0;");
    let _ = writeln!(v, "            wptr <= {ww}'d0; qptr <= {qw}'d0; mac_v <= 1'b0; req_v <= 1'b0; acc_clr <= 1'b0; req_addr <= {aw}'d0;");
    let _ = writeln!(v, "            px0 <= {cw}'d0; py0 <= {cw}'d0; kx <= {xw}'d0; ky <= {xw}'d0; mstart <= {aw}'d0; maddr <= {aw}'d0; coff <= {aw}'d0; pix <= {pxw}'d0;");
    let _ = writeln!(v, "            acc_sel <= 32'd0;");
    let _ = writeln!(v, "        end else begin");
    let _ = writeln!(
        v,
        "            mac_v <= 1'b0; req_v <= 1'b0; acc_clr <= 1'b0;"
    );
    let _ = writeln!(v, "            case (state)");
    let _ = writeln!(v, "                S_LOAD: if (in_valid) begin");
    let _ = writeln!(v, "                    if (cnt == IN_LAST) begin");
    let _ = writeln!(v, "                        cnt <= {aw}'d0; state <= S_MAC; layer <= {lw}'d0; g <= {gw}'d0; k <= {dw}'d0; coff <= {aw}'d0; pix <= {pxw}'d0;");
    let _ = writeln!(v, "                        px0 <= {cw}'d0; py0 <= {cw}'d0; kx <= {xw}'d0; ky <= {xw}'d0; mstart <= MSTART_FIRST; maddr <= MSTART_FIRST;");
    let _ = writeln!(
        v,
        "                        wptr <= {ww}'d0; qptr <= {qw}'d0; acc_clr <= 1'b1;"
    );
    let _ = writeln!(v, "                    end else cnt <= cnt + {aw}'d1;");
    let _ = writeln!(v, "                end");
    let _ = writeln!(v, "                S_MAC: if (k != k_lim) begin");
    let _ = writeln!(v, "                    k <= k + {dw}'d1; mac_v <= 1'b1;");
    let _ = writeln!(v, "                    if (!pool) wptr <= wptr + {ww}'d1;");
    let _ = writeln!(v, "                    if (kx != kw_last) begin kx <= kx + {xw}'d1; maddr <= maddr + {aw}'d1; end");
    let _ = writeln!(v, "                    else if (ky != kh_last) begin kx <= {xw}'d0; ky <= ky + {xw}'d1; maddr <= maddr + d_row; end");
    let _ = writeln!(v, "                    else begin kx <= {xw}'d0; ky <= {xw}'d0; maddr <= maddr + d_ch; end");
    let _ = writeln!(v, "                end else begin");
    let _ = writeln!(v, "                    state <= S_REQ; j <= {jw}'d0;");
    let _ = writeln!(v, "                end");
    let _ = writeln!(v, "                S_REQ: if (j != lanes) begin");
    let _ = writeln!(v, "                    j <= j + {jw}'d1; coff <= coff + ohw; req_v <= 1'b1;");
    let _ = writeln!(v, "                    if (!pool) qptr <= qptr + {qw}'d1;");
    let _ = writeln!(v, "                    req_addr <= abase_out + {} + coff;", zext("pix", pxw, aw));
    let _ = writeln!(v, "                    acc_sel <= acc_j;");
    let _ = writeln!(v, "                end else begin");
    let _ = writeln!(v, "                    k <= {dw}'d0; kx <= {xw}'d0; ky <= {xw}'d0; state <= S_MAC; acc_clr <= 1'b1;");
    let _ = writeln!(v, "                    if (g != g_last) begin g <= g + {gw}'d1; maddr <= mstart; end");
    let _ = writeln!(v, "                    else if (pix != pix_last) begin");
    let _ = writeln!(v, "                        g <= {gw}'d0; pix <= pix + {pxw}'d1; coff <= {aw}'d0; wptr <= wbase; qptr <= qbase;");
    let _ = writeln!(v, "                        if (px0 != px_last) begin px0 <= px0 + s_x; mstart <= mstart + step_x; maddr <= mstart + step_x; end");
    let _ = writeln!(v, "                        else if (py0 != py_last) begin px0 <= {cw}'d0; py0 <= py0 + s_y; mstart <= mstart + step_y; maddr <= mstart + step_y; end");
    let _ = writeln!(v, "                        else begin px0 <= {cw}'d0; py0 <= {cw}'d0; mstart <= mstart + step_c; maddr <= mstart + step_c; end");
    let _ = writeln!(v, "                    end");
    let _ = writeln!(v, "                    else if (layer != LAST_LAYER) begin");
    let _ = writeln!(v, "                        layer <= layer + {lw}'d1; g <= {gw}'d0; pix <= {pxw}'d0; coff <= {aw}'d0;");
    let _ = writeln!(v, "                        px0 <= {cw}'d0; py0 <= {cw}'d0; mstart <= mstart_next; maddr <= mstart_next;");
    let _ = writeln!(v, "                    end");
    let _ = writeln!(
        v,
        "                    else begin state <= S_ORD; cnt <= {aw}'d0; acc_clr <= 1'b0; end"
    );
    let _ = writeln!(v, "                end");
    let _ = writeln!(v, "                S_ORD: state <= S_OV;");
    let _ = writeln!(v, "                S_OV: if (out_ready) begin");
    let _ = writeln!(
        v,
        "                    if (cnt == OUT_LAST) begin cnt <= {aw}'d0; state <= S_LOAD; end"
    );
    let _ = writeln!(
        v,
        "                    else begin cnt <= cnt + {aw}'d1; state <= S_ORD; end"
    );
    let _ = writeln!(v, "                end");
    let _ = writeln!(v, "                default: state <= S_LOAD;");
    let _ = writeln!(v, "            endcase");
    let _ = writeln!(v, "        end");
    let _ = writeln!(v, "    end\n");
    let _ = writeln!(v, "    assign in_ready = (state == S_LOAD);");
    let _ = writeln!(v, "    assign out_valid = (state == S_OV);");
    let _ = writeln!(v, "    assign out_data = act_q;");
    let _ = writeln!(
        v,
        "    assign out_last = (state == S_OV) && (cnt == OUT_LAST);"
    );
    let _ = writeln!(v, "endmodule\n\n`default_nettype wire");

    let tb = testbench(name, in_elems, out_elems, cyc);
    Ok(Design {
        verilog: v,
        testbench: tb,
        weights_mem: wmem,
        qparams_mem: qmem,
        in_elems,
        out_elems,
        cycles: cyc,
        act_bytes: act_depth,
        weight_rom_bits: wdepth * pw,
        qparam_rom_bits: qdepth * 72,
        layers,
    })
}

fn testbench(name: &str, in_elems: usize, out_elems: usize, cycles: u64) -> String {
    format!(
        r#"// Self-checking testbench for {name} (generated by rlxc).
//   iverilog -g2005 -o {name}_tb.vvp {name}_tb.v {name}.v && vvp {name}_tb.vvp +vectors=N
// Plusargs: +vectors=N (default 1), +in=FILE (default {name}_tb_in.mem: N*{in_elems} int8 hex values),
// +expected=FILE (default {name}_tb_expected.mem: N*{out_elems} int8 hex values, the host interpreter's
// int8 outputs), +stall (random gaps in in_valid / out_ready), +verbose (one line per vector).
// Prints "PASS: N/N vectors bit-exact ... cycles per inference" or "FAIL: ..." and finishes.
// Override the capacity with -P{name}_tb.MAX_VECTORS=M.
`timescale 1ns / 1ps
module {name}_tb;
    parameter MAX_VECTORS = 1000;
    localparam IN_N = {in_elems}, OUT_N = {out_elems}, CYCLES = {cycles};
    reg clk = 1'b0;
    always #5 clk = ~clk;
    reg rst = 1'b1;
    reg in_valid = 1'b0, out_ready = 1'b0;
    reg [7:0] in_data = 8'd0;
    wire in_ready, out_valid, out_last;
    wire [7:0] out_data;
    {name} dut (.clk(clk), .rst(rst), .in_valid(in_valid), .in_ready(in_ready), .in_data(in_data),
        .out_valid(out_valid), .out_ready(out_ready), .out_data(out_data), .out_last(out_last));

    reg [7:0] in_mem [0:MAX_VECTORS*IN_N-1];
    reg [7:0] exp_mem [0:MAX_VECTORS*OUT_N-1];
    reg [8*512-1:0] in_file, exp_file;
    integer n, v, i, o, errors, bad_vectors, vec_errors, cycle, t0, t1, cmin, cmax, stall, verbose, seed_in, seed_out;
    reg [63:0] limit; // n * (8 * CYCLES + 1000): 64 bits, as it passes 2^31 for long designs

    always @(posedge clk) cycle <= cycle + 1;

    initial begin
        cycle = 0; errors = 0; bad_vectors = 0; cmin = 0; cmax = 0; seed_in = 1; seed_out = 2;
        if (!$value$plusargs("vectors=%d", n)) n = 1;
        if (!$value$plusargs("in=%s", in_file)) in_file = "{name}_tb_in.mem";
        if (!$value$plusargs("expected=%s", exp_file)) exp_file = "{name}_tb_expected.mem";
        stall = $test$plusargs("stall");
        verbose = $test$plusargs("verbose");
        if (n < 1 || n > MAX_VECTORS) begin
            $display("FAIL: +vectors=%0d is outside 1..%0d (MAX_VECTORS)", n, MAX_VECTORS);
            $finish;
        end
        $readmemh(in_file, in_mem, 0, n*IN_N-1);
        $readmemh(exp_file, exp_mem, 0, n*OUT_N-1);
        limit = n * (CYCLES * 8 + 1000);
        repeat (3) @(posedge clk);
        @(negedge clk) rst = 1'b0;
        for (v = 0; v < n; v = v + 1) begin
            vec_errors = 0;
            fork
                begin
                    i = 0;
                    while (i < IN_N) begin
                        @(negedge clk);
                        in_valid = stall ? (($random(seed_in) & 3) != 0) : 1'b1;
                        in_data = in_mem[v*IN_N+i];
                        if (in_valid && in_ready) begin
                            if (i == 0) t0 = cycle;
                            i = i + 1;
                        end
                    end
                    @(negedge clk) in_valid = 1'b0;
                end
                begin
                    o = 0;
                    while (o < OUT_N) begin
                        @(negedge clk);
                        out_ready = stall ? $random(seed_out) & 1 : 1'b1;
                        if (out_valid && out_ready) begin
                            if (out_data !== exp_mem[v*OUT_N+o]) begin
                                vec_errors = vec_errors + 1;
                                if (errors + vec_errors <= 10)
                                    $display("FAIL vector %0d output %0d: got %0d, expected %0d", v, o, $signed(out_data), $signed(exp_mem[v*OUT_N+o]));
                            end
                            if ((o == OUT_N-1) != out_last) begin
                                vec_errors = vec_errors + 1;
                                $display("FAIL vector %0d output %0d: out_last is %b", v, o, out_last);
                            end
                            if (o == OUT_N-1) t1 = cycle;
                            o = o + 1;
                        end
                    end
                    @(negedge clk) out_ready = 1'b0;
                end
            join
            errors = errors + vec_errors;
            if (vec_errors != 0) bad_vectors = bad_vectors + 1;
            if (v == 0 || t1 - t0 + 1 < cmin) cmin = t1 - t0 + 1;
            if (v == 0 || t1 - t0 + 1 > cmax) cmax = t1 - t0 + 1;
            if (verbose) $display("vector %0d: %s, %0d cycles", v, vec_errors == 0 ? "PASS" : "FAIL", t1 - t0 + 1);
        end
        if (errors == 0)
            $display("PASS: %0d/%0d vectors bit-exact, %0d..%0d cycles per inference (%0d without stalls)", n, n, cmin, cmax, CYCLES);
        else
            $display("FAIL: %0d of %0d vectors differ (%0d outputs)", bad_vectors, n, errors);
        $finish;
    end

    initial begin
        wait (limit > 0);
        wait (cycle > limit);
        $display("FAIL: timeout after %0d cycles", cycle);
        $finish;
    end
endmodule
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::{Shape, TensorType};

    /// A one-layer int8 graph as `rlx_opt::quantize` writes it: x[1,4] · W[4,3] + b, requantized.
    fn one_layer(extra_relu_node: bool) -> Mir {
        let mut g = Mir::new();
        let x = g.add_input("x", TensorType::new(DType::I8, Shape::fixed(&[1, 4])));
        let w = g.add_const(
            None,
            ConstData::new(
                DType::I8,
                vec![4, 3],
                rlx_ir::Blob::from_vec((0..12u8).map(|i| i.wrapping_mul(37)).collect()),
            )
            .unwrap(),
        );
        let b = g.add_const(
            None,
            ConstData::new(
                DType::I32,
                vec![3],
                rlx_ir::Blob::from_vec(
                    [5i32, -7, 9].iter().flat_map(|v| v.to_le_bytes()).collect(),
                ),
            )
            .unwrap(),
        );
        let xi = g.add1("fc", MirOp::Cast { to: DType::I32 }, &[x]).unwrap();
        let wi = g.add1("fc", MirOp::Cast { to: DType::I32 }, &[w]).unwrap();
        let mm = g.add1("fc", MirOp::MatMul, &[xi, wi]).unwrap();
        let mut v = g
            .add1("fc.bias", MirOp::Binary(BinaryOp::Add), &[mm, b])
            .unwrap();
        v = g
            .add1("fc.requant", MirOp::Cast { to: DType::I64 }, &[v])
            .unwrap();
        let steps: [(BinaryOp, ConstData); 6] = [
            (
                BinaryOp::Mul,
                ConstData::from_i64(vec![3], &[1 << 30, 1 << 30, 3 << 29]),
            ),
            (
                BinaryOp::Add,
                ConstData::from_i64(vec![3], &[1 << 37, 1 << 37, 1 << 37]),
            ),
            (BinaryOp::Shr, ConstData::from_i64(vec![3], &[38, 38, 38])),
            (BinaryOp::Add, ConstData::scalar(DType::I64, -3.0)),
            (BinaryOp::Max, ConstData::scalar(DType::I64, -3.0)),
            (BinaryOp::Min, ConstData::scalar(DType::I64, 127.0)),
        ];
        for (op, c) in steps {
            let c = g.add_const(None, c);
            v = g.add1("fc.requant", MirOp::Binary(op), &[v, c]).unwrap();
        }
        v = g
            .add1("fc.requant", MirOp::Cast { to: DType::I8 }, &[v])
            .unwrap();
        if extra_relu_node {
            let z = g.add_const(None, ConstData::scalar(DType::I8, 0.0));
            v = g
                .add1("relu", MirOp::Binary(BinaryOp::Max), &[v, z])
                .unwrap();
        }
        g.outputs = vec![v];
        g
    }

    #[test]
    fn recognizes_a_layer_and_counts_cycles() {
        let (layers, i, o) = recognize(&one_layer(false)).unwrap();
        assert_eq!((layers.len(), i, o), (1, 4, 3));
        let l = &layers[0];
        assert_eq!((l.k, l.n, l.zp, l.lo, l.hi), (4, 3, -3, -3, 127));
        assert_eq!(l.bias, vec![5, -7, 9]);
        assert_eq!(l.shift, vec![38; 3]);
        // 4 loads, 2 groups of 2 channels: 2·(4+2) + 3, 2 cycles per output.
        assert_eq!(cycles(&layers, i, o, 2), 4 + 12 + 3 + 6);
        let q = PortQuant {
            scale: 1.0,
            zero_point: 0,
        };
        let d = emit(
            &one_layer(false),
            &Options {
                name: "t".into(),
                macs_per_cycle: 2,
                input: q,
                output: q,
                rlxc_version: "test".into(),
            },
        )
        .unwrap();
        // Weight words in read order: group 0 holds channels {1, 0}, group 1 {pad, 2}.
        assert_eq!(d.weights_mem.lines().count(), 8);
        assert_eq!(d.weights_mem.lines().next().unwrap(), "2500");
        assert_eq!(d.weights_mem.lines().nth(4).unwrap(), "004a");
        assert_eq!(d.qparams_mem.lines().nth(1).unwrap(), "2640000000fffffff9");
        assert!(d.verilog.contains("module t (") && d.testbench.contains("module t_tb;"));
    }

    /// A padded conv + max pool as `rlx_opt::quantize` writes them: x[1,2,4,3] → pad(1, zp -5) →
    /// conv 3×2×2×2 stride (2, 1) → requantize → max pool 2×2 stride 1. `dilated_pool` makes the pool
    /// unmappable.
    fn conv_pool(dilated_pool: bool) -> Mir {
        let mut g = Mir::new();
        let x = g.add_input("x", TensorType::new(DType::I8, Shape::fixed(&[1, 2, 4, 3])));
        let w = g.add_const(
            None,
            ConstData::new(
                DType::I8,
                vec![3, 2, 2, 2],
                rlx_ir::Blob::from_vec((0..24u8).map(|i| i.wrapping_mul(29)).collect()),
            )
            .unwrap(),
        );
        let b = g.add_const(
            None,
            ConstData::new(
                DType::I32,
                vec![3],
                rlx_ir::Blob::from_vec([1i32, 2, 3].iter().flat_map(|v| v.to_le_bytes()).collect()),
            )
            .unwrap(),
        );
        let pad = MirOp::Pad { pads: vec![0, 0, 1, 1, 0, 0, 1, 1], mode: PadMode::Constant, value: -5.0 };
        let xp = g.add1("conv.pad", pad, &[x]).unwrap();
        let xi = g.add1("conv", MirOp::Cast { to: DType::I32 }, &[xp]).unwrap();
        let wi = g.add1("conv", MirOp::Cast { to: DType::I32 }, &[w]).unwrap();
        let conv = MirOp::Conv { strides: vec![2, 1], pads: vec![0; 4], dilations: vec![1, 1], groups: 1 };
        let mut v = g.add1("conv", conv, &[xi, wi, b]).unwrap();
        v = g.add1("conv.requant", MirOp::Cast { to: DType::I64 }, &[v]).unwrap();
        let steps: [(BinaryOp, ConstData); 6] = [
            (BinaryOp::Mul, ConstData::from_i64(vec![3, 1, 1], &[1 << 30, 1 << 29, 3 << 28])),
            (BinaryOp::Add, ConstData::from_i64(vec![3, 1, 1], &[1 << 36; 3])),
            (BinaryOp::Shr, ConstData::from_i64(vec![3, 1, 1], &[37; 3])),
            (BinaryOp::Add, ConstData::scalar(DType::I64, 4.0)),
            (BinaryOp::Max, ConstData::scalar(DType::I64, 4.0)),
            (BinaryOp::Min, ConstData::scalar(DType::I64, 127.0)),
        ];
        for (op, c) in steps {
            let c = g.add_const(None, c);
            v = g.add1("conv.requant", MirOp::Binary(op), &[v, c]).unwrap();
        }
        v = g.add1("conv.requant", MirOp::Cast { to: DType::I8 }, &[v]).unwrap();
        let pool = MirOp::Pool {
            kind: PoolKind::Max,
            kernel: vec![2, 2],
            strides: vec![1, 1],
            pads: vec![0; 4],
            dilations: vec![if dilated_pool { 2 } else { 1 }, 1],
            ceil_mode: false,
            count_include_pad: false,
        };
        v = g.add1("pool", pool, &[v]).unwrap();
        g.outputs = vec![v];
        g
    }

    #[test]
    fn recognizes_a_padded_conv_and_a_max_pool() {
        let (layers, i, o) = recognize(&conv_pool(false)).unwrap();
        // Padded input 6×5, kernel 2×2, stride (2, 1): output 3×4; the pool: 2×3.
        assert_eq!((layers.len(), i, o), (2, 24, 3 * 2 * 3));
        let c = &layers[0];
        assert_eq!((c.kind, c.cin, c.ih, c.iw, c.ch, c.oh, c.ow), (Kind::Conv, 2, 4, 3, 3, 3, 4));
        assert_eq!((c.sh, c.sw, c.pt, c.pl, c.pad_value, c.zp, c.lo), (2, 1, 1, 1, -5, 4, 4));
        assert_eq!((c.bias.clone(), c.shift.clone()), (vec![1, 2, 3], vec![37; 3]));
        let m = &layers[1];
        assert_eq!((m.kind, m.ch, m.ih, m.iw, m.oh, m.ow, m.pad_value), (Kind::MaxPool, 3, 3, 4, 2, 3, -128));
        // Load 24; conv: 12 pixels × (2 groups of 2 × (8 + 2) + 3 writes); pool: 18 × (4 + 2 + 1); out 2 × 18.
        assert_eq!(cycles(&layers, i, o, 2), 24 + 12 * (2 * 10 + 3) + 18 * 7 + 36);
        let q = PortQuant { scale: 1.0, zero_point: -5 };
        let opts = Options { name: "cp".into(), macs_per_cycle: 2, input: q, output: q, rlxc_version: "test".into() };
        let d = emit(&conv_pool(false), &opts).unwrap();
        // Weight words: group 0 = channels {1, 0}, step 0 = w[c][0][0][0] = byte 8c·29; group 1 = {pad, 2}.
        let w: Vec<&str> = d.weights_mem.lines().collect();
        assert_eq!(w.len(), 2 * 8);
        assert_eq!((w[0], w[1], w[8]), ("e800", "051d", "00d0"));
        assert!(d.verilog.contains("padv = 8'hfb; pool = 1'b0") && d.verilog.contains("pool = 1'b1"));
    }

    #[test]
    fn reports_every_unmapped_node() {
        let e = recognize(&conv_pool(true)).unwrap_err();
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("node 'pool': max_pool") && e[0].contains("dilation"), "{e:?}");
        let e = recognize(&one_layer(true)).unwrap_err();
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("node 'relu': max"), "{e:?}");
        let q = PortQuant {
            scale: 1.0,
            zero_point: 0,
        };
        let o = Options {
            name: "t".into(),
            macs_per_cycle: 0,
            input: q,
            output: q,
            rlxc_version: "test".into(),
        };
        let e = emit(&one_layer(false), &o).err().unwrap();
        assert!(e.contains("--macs-per-cycle"), "{e}");
        let o = Options {
            name: "input".into(),
            macs_per_cycle: 1,
            ..o
        };
        let e = emit(&one_layer(false), &o).err().unwrap();
        assert!(e.contains("Verilog keyword"), "{e}");
    }
}
