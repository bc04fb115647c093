//! The Verilog writer: quantized integer MIR → one synthesizable, layer-sequential Verilog-2005
//! module (`NAME.v`), its ROM images (`NAME_weights.mem`, `NAME_qparams.mem`, for `$readmemh`) and a
//! self-checking testbench (`NAME_tb.v`).
//!
//! Input: the integer MIR that `rlx_opt::quantize` writes (the same graph the MCU writer plans and the
//! interpreter runs, so the integer semantics are the host's by construction). The writer recognizes
//! its fully connected layers — `cast(x:i8→i32)` · `cast(W:i8→i32)` (`matmul`) `+ bias:i32`, then
//! `((i64(acc)·M + 2^(S-1)) >> S) + z`, `max lo`, `min hi`, `cast i8` — and `reshape` (free: the
//! layout is row-major). Anything else is reported, every node at once. It reads MIR, not the LIR
//! loop form: a datapath is scheduled per layer (a MAC array over output channels), which the loop
//! form does not describe yet.
//!
//! The datapath: one activation RAM (every layer boundary has its own region, one write and one
//! synchronous read port), a weight ROM whose words hold the `P = --macs-per-cycle` int8 weights of
//! one input element for `P` consecutive output channels (stored in the order they are read), `P`
//! int8×int8 multipliers feeding `P` int32 accumulators, and one requantization unit (bias add in
//! int32, a 32×31-bit multiply, rounding add, arithmetic shift, zero point, clamp) shared by all
//! layers, fed from a per-channel parameter ROM `{S:8, M:32, bias:32}`. Cycles per inference are
//! data-independent: [`Design::cycles`].

use rlx_ir::caps::TargetCaps;
use rlx_ir::{BinaryOp, ConstData, DType, Mir, MirOp, OpSet, ValueId};
use std::collections::HashMap;
use std::fmt::Write;

/// The MIR op kinds the writer's recognizer consumes (in the patterns above), all integer dtypes
/// of the quantized graph.
pub const KINDS: &[&str] = &[
    "cast", "matmul", "add", "mul", "shr", "max", "min", "reshape",
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

/// One fully connected layer of the integer graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Fc {
    /// The MIR node name of its matmul.
    pub node: String,
    pub k: usize,
    pub n: usize,
    /// int8 weights, `[k][n]` row-major.
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

/// The generated files and figures.
pub struct Design {
    pub verilog: String,
    pub testbench: String,
    /// `NAME_weights.mem`: `P·8`-bit words, hex, one per line.
    pub weights_mem: String,
    /// `NAME_qparams.mem`: 72-bit words `{S, M, bias}`, hex, one per line.
    pub qparams_mem: String,
    pub layers: Vec<Fc>,
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

#[derive(Clone)]
enum Sym {
    /// An int8 activation at layer boundary `b`.
    Act(usize),
    /// The i32 widening of boundary `b`.
    Wide(usize),
    /// A constant widened to i32 (weights).
    WConst(ConstData),
    /// A layer being assembled; `stage` counts the epilogue steps seen.
    Acc(Box<Fc>, usize, u8),
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

/// Finds the chain of fully connected layers of a quantized graph: one int8 input, one int8 output.
/// Returns every problem (node name, op, why) when the graph is not such a chain.
pub fn recognize(g: &Mir) -> Result<(Vec<Fc>, usize, usize), Vec<String>> {
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
    let mut layers: Vec<Fc> = Vec::new();
    for id in g.node_ids() {
        let node = g.node(id);
        let get = |k: usize| node.inputs.get(k).and_then(|v| sym.get(v).cloned());
        let konst = |k: usize| node.inputs.get(k).and_then(|&v| g.const_data(v));
        let out = node.outputs[0];
        let res: Result<Sym, String> = (|| {
            match (&node.op, get(0)) {
            (MirOp::Reshape { .. }, Some(Sym::Act(b))) => Ok(Sym::Act(b)),
            (MirOp::Cast { to: DType::I32 }, Some(Sym::Act(b))) => Ok(Sym::Wide(b)),
            (MirOp::Cast { to: DType::I32 }, None) => match konst(0) {
                Some(c) if c.dtype == DType::I8 => Ok(Sym::WConst(c.clone())),
                _ => Err("a widened operand must be an int8 activation or int8 constant".into()),
            },
            (MirOp::MatMul, Some(Sym::Wide(b))) => {
                let Some(Sym::WConst(w)) = get(1) else {
                    return Err("the right operand must be a constant int8 weight".into());
                };
                if b + 1 != bounds.len() {
                    return Err("layers must form a chain (each reads the previous layer's output)".into());
                }
                let xs = g.ty(node.inputs[0]).shape.as_fixed().unwrap_or_default();
                if w.shape.len() != 2 || xs.iter().product::<usize>() != w.shape[0] || xs.last() != Some(&w.shape[0]) {
                    return Err(format!("expected x[1, K] · W[K, N], got {xs:?} · {:?}", w.shape));
                }
                let (k, n) = (w.shape[0], w.shape[1]);
                let wv = w.to_i64_vec().iter().map(|&x| x as i8).collect();
                Ok(Sym::Acc(Box::new(Fc { node: node.name.clone(), k, n, w: wv, bias: vec![0; n], mult: vec![], shift: vec![], zp: 0, lo: -128, hi: 127 }), b, 0))
            }
            (MirOp::Binary(op), Some(Sym::Acc(mut f, b, st))) => {
                let c = konst(1).ok_or("the second operand must be a constant")?;
                let n = f.n;
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
            _ => Err("not part of an int8 fully connected layer (matmul with a constant int8 weight + bias + requantization) or a reshape".into()),
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
            _ => problems.push(
                "the output must be the int8 result of the last fully connected layer".into(),
            ),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let out = *bounds.last().unwrap();
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

/// Cycles of one inference (see the module doc): load, per layer `G·(K+2) + N`, 2 per output.
pub fn cycles(layers: &[Fc], in_elems: usize, out_elems: usize, p: usize) -> u64 {
    let mut c = in_elems as u64 + 2 * out_elems as u64;
    for l in layers {
        let g = l.n.div_ceil(p) as u64;
        c += g * (l.k as u64 + 2) + l.n as u64;
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
    let p = o.macs_per_cycle;
    if p == 0 || p > 256 {
        return Err(format!("--macs-per-cycle must be in 1..=256, got {p}"));
    }
    let name = &o.name;
    let nl = layers.len();
    // Layouts: activation regions, weight words (read order), parameter words.
    let mut abase = vec![0usize];
    for l in &layers {
        abase.push(abase.last().unwrap() + l.k);
    }
    let act_depth = abase[nl] + out_elems;
    let mut wmem = String::new();
    let mut qmem = String::new();
    let mut wdepth = 0usize;
    for l in &layers {
        for gi in 0..l.n.div_ceil(p) {
            for k in 0..l.k {
                for j in (0..p).rev() {
                    let c = gi * p + j;
                    let w = if c < l.n { l.w[k * l.n + c] } else { 0 };
                    let _ = write!(wmem, "{:02x}", w as u8);
                }
                wmem.push('\n');
                wdepth += 1;
            }
        }
        for c in 0..l.n {
            let _ = writeln!(
                qmem,
                "{:02x}{:08x}{}",
                l.shift[c],
                l.mult[c],
                hex_signed(l.bias[c] as i64, 8)
            );
        }
    }
    let qdepth: usize = layers.iter().map(|l| l.n).sum();
    let aw = bits(act_depth);
    let ww = bits(wdepth);
    let qw = bits(qdepth);
    let jw = bits(p + 1);
    let lw = bits(nl);
    let gw = bits(layers.iter().map(|l| l.n.div_ceil(p)).max().unwrap_or(1));
    let cyc = cycles(&layers, in_elems, out_elems, p);
    let pw = 8 * p;

    let mut v = String::new();
    let _ = writeln!(v, "// {name}: int8 neural network datapath, generated by rlxc {} (--target verilog --macs-per-cycle {p}).", o.rlxc_version);
    let _ = writeln!(v, "// Verilog-2005, synthesizable; ROM images are read with $readmemh from the working directory:");
    let _ = writeln!(v, "//   {name}_weights.mem ({wdepth} x {pw}-bit words), {name}_qparams.mem ({qdepth} x 72-bit words {{S[7:0], M[31:0], bias[31:0]}}).");
    let _ = writeln!(v, "//");
    let _ = writeln!(v, "// Network ({nl} fully connected layer(s), int8 weights, int32 accumulation, per-channel requantization");
    let _ = writeln!(v, "// y = clamp(((int64(acc + bias) * M + 2^(S-1)) >>> S) + zp, lo, hi), bit-exact with rlxc's int8 interpreter run):");
    for (i, l) in layers.iter().enumerate() {
        let _ = writeln!(
            v,
            "//   layer {i} '{}': {} -> {}, zp {}, clamp [{}, {}]",
            l.node, l.k, l.n, l.zp, l.lo, l.hi
        );
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
        "    localparam [{}:0] IN_LAST = {aw}'d{}, OUT_LAST = {aw}'d{}, OUT_BASE = {aw}'d{};",
        aw - 1,
        in_elems - 1,
        out_elems - 1,
        abase[nl]
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
    let _ = writeln!(v, "    reg [2:0] state;\n    reg [{}:0] layer;\n    reg [{}:0] g;\n    reg [{}:0] k;\n    reg [{}:0] cnt;\n    reg [{}:0] nptr;\n    reg [{}:0] j;", lw - 1, gw - 1, aw - 1, aw - 1, aw - 1, jw - 1);
    let _ = writeln!(v, "    reg [{}:0] wptr;\n    reg [{}:0] qptr;\n    reg mac_v, req_v, acc_clr;\n    reg [{}:0] req_addr;", ww - 1, qw - 1, aw - 1);
    if p > 1 {
        let _ = writeln!(v, "    reg [{}:0] req_lane;", jw - 1);
    }
    let _ = writeln!(
        v,
        "    reg [7:0] act_q;\n    reg [{}:0] w_q;\n    reg [71:0] q_q;\n",
        pw - 1
    );
    // Per-layer constants.
    let _ = writeln!(v, "    // Per-layer constants.");
    let _ = writeln!(v, "    reg [{}:0] k_lim, abase_in, abase_out;\n    reg [{}:0] g_last;\n    reg [{}:0] lanes_last;\n    reg signed [63:0] zp, lo, hi;", aw - 1, gw - 1, jw - 1);
    let _ = writeln!(v, "    always @* begin\n        case (layer)");
    for (i, l) in layers.iter().enumerate() {
        let gl = l.n.div_ceil(p);
        let last = l.n - (gl - 1) * p;
        let _ = writeln!(v, "            {lw}'d{i}: begin k_lim = {aw}'d{}; abase_in = {aw}'d{}; abase_out = {aw}'d{}; g_last = {gw}'d{}; lanes_last = {jw}'d{last}; zp = {}; lo = {}; hi = {}; end",
            l.k, abase[i], abase[i + 1], gl - 1, s64(l.zp), s64(l.lo), s64(l.hi));
    }
    let _ = writeln!(v, "            default: begin k_lim = {aw}'d0; abase_in = {aw}'d0; abase_out = {aw}'d0; g_last = {gw}'d0; lanes_last = {jw}'d0; zp = 64'sd0; lo = 64'sd0; hi = 64'sd0; end");
    let _ = writeln!(v, "        endcase\n    end\n");
    let _ = writeln!(
        v,
        "    wire [{}:0] lanes = (g == g_last) ? lanes_last : {jw}'d{p};\n",
        jw - 1
    );
    // MAC array.
    let _ = writeln!(v, "    // MAC array: {p} int8 x int8 multipliers, int32 accumulators (wrapping, as the host's i32).");
    let _ = writeln!(v, "    wire signed [7:0] x = act_q;");
    for l in 0..p {
        let _ = writeln!(
            v,
            "    wire signed [7:0] w{l} = w_q[{}:{}];",
            8 * l + 7,
            8 * l
        );
        let _ = writeln!(v, "    wire signed [15:0] p{l} = $signed({{{{8{{x[7]}}}}, x}}) * $signed({{{{8{{w{l}[7]}}}}, w{l}}});");
        let _ = writeln!(v, "    reg [31:0] acc{l};");
        let _ = writeln!(v, "    always @(posedge clk) begin\n        if (acc_clr) acc{l} <= 32'd0;\n        else if (mac_v) acc{l} <= acc{l} + {{{{16{{p{l}[15]}}}}, p{l}}};\n    end");
    }
    let _ = writeln!(v);
    // Requantization.
    let _ = writeln!(v, "    // Requantization (one unit, lanes in turn).");
    let _ = writeln!(v, "    reg [31:0] acc_sel;");
    if p > 1 {
        let _ = writeln!(v, "    always @* begin\n        case (req_lane)");
        for l in 0..p {
            let _ = writeln!(v, "            {jw}'d{l}: acc_sel = acc{l};");
        }
        let _ = writeln!(
            v,
            "            default: acc_sel = 32'd0;\n        endcase\n    end"
        );
    } else {
        let _ = writeln!(v, "    always @* acc_sel = acc0;");
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
    let _ = writeln!(v, "    // Activation RAM: one write port (input beats / requantized outputs), one synchronous read port.");
    let _ = writeln!(v, "    wire act_we = (state == S_LOAD) ? in_valid : req_v;");
    let _ = writeln!(
        v,
        "    wire [{}:0] act_waddr = (state == S_LOAD) ? cnt : req_addr;",
        aw - 1
    );
    let _ = writeln!(
        v,
        "    wire [7:0] act_wdata = (state == S_LOAD) ? in_data : yq;"
    );
    let _ = writeln!(
        v,
        "    wire out_phase = (state == S_ORD) || (state == S_OV);"
    );
    let _ = writeln!(
        v,
        "    wire [{}:0] act_raddr = out_phase ? OUT_BASE + cnt : abase_in + k;",
        aw - 1
    );
    let _ = writeln!(v, "    always @(posedge clk) begin\n        if (act_we) act[act_waddr] <= act_wdata;\n        act_q <= act[act_raddr];\n    end");
    let _ = writeln!(v, "    always @(posedge clk) w_q <= wrom[wptr];");
    let _ = writeln!(v, "    always @(posedge clk) q_q <= qrom[qptr];\n");
    // Control.
    let _ = writeln!(v, "    // Control: load -> per layer, per group of {p} output channels: MAC over K, requantize the group -> stream out.");
    let _ = writeln!(v, "    always @(posedge clk) begin");
    let _ = writeln!(v, "        if (rst) begin");
    let _ = writeln!(v, "            state <= S_LOAD; layer <= {lw}'d0; g <= {gw}'d0; k <= {aw}'d0; cnt <= {aw}'d0; nptr <= {aw}'d0; j <= {jw}'d0;");
    let _ = writeln!(v, "            wptr <= {ww}'d0; qptr <= {qw}'d0; mac_v <= 1'b0; req_v <= 1'b0; acc_clr <= 1'b0; req_addr <= {aw}'d0;");
    if p > 1 {
        let _ = writeln!(v, "            req_lane <= {jw}'d0;");
    }
    let _ = writeln!(v, "        end else begin");
    let _ = writeln!(
        v,
        "            mac_v <= 1'b0; req_v <= 1'b0; acc_clr <= 1'b0;"
    );
    let _ = writeln!(v, "            case (state)");
    let _ = writeln!(v, "                S_LOAD: if (in_valid) begin");
    let _ = writeln!(v, "                    if (cnt == IN_LAST) begin");
    let _ = writeln!(v, "                        cnt <= {aw}'d0; state <= S_MAC; layer <= {lw}'d0; g <= {gw}'d0; k <= {aw}'d0; nptr <= {aw}'d0;");
    let _ = writeln!(
        v,
        "                        wptr <= {ww}'d0; qptr <= {qw}'d0; acc_clr <= 1'b1;"
    );
    let _ = writeln!(v, "                    end else cnt <= cnt + {aw}'d1;");
    let _ = writeln!(v, "                end");
    let _ = writeln!(v, "                S_MAC: if (k != k_lim) begin");
    let _ = writeln!(
        v,
        "                    k <= k + {aw}'d1; wptr <= wptr + {ww}'d1; mac_v <= 1'b1;"
    );
    let _ = writeln!(v, "                end else begin");
    let _ = writeln!(v, "                    state <= S_REQ; j <= {jw}'d0;");
    let _ = writeln!(v, "                end");
    let _ = writeln!(v, "                S_REQ: if (j != lanes) begin");
    let _ = writeln!(v, "                    j <= j + {jw}'d1; qptr <= qptr + {qw}'d1; nptr <= nptr + {aw}'d1; req_v <= 1'b1;");
    let _ = writeln!(v, "                    req_addr <= abase_out + nptr;");
    if p > 1 {
        let _ = writeln!(v, "                    req_lane <= j;");
    }
    let _ = writeln!(v, "                end else begin");
    let _ = writeln!(v, "                    k <= {aw}'d0;");
    let _ = writeln!(v, "                    if (g != g_last) begin g <= g + {gw}'d1; state <= S_MAC; acc_clr <= 1'b1; end");
    let _ = writeln!(v, "                    else if (layer != LAST_LAYER) begin layer <= layer + {lw}'d1; g <= {gw}'d0; nptr <= {aw}'d0; state <= S_MAC; acc_clr <= 1'b1; end");
    let _ = writeln!(
        v,
        "                    else begin state <= S_ORD; cnt <= {aw}'d0; end"
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
    integer n, v, i, o, errors, bad_vectors, vec_errors, cycle, t0, t1, cmin, cmax, stall, verbose, seed_in, seed_out, limit;

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

    #[test]
    fn reports_every_unmapped_node() {
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
