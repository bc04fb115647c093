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
//!
//! Where things live: `recognize.rs` (MIR → layers), `layer.rs` (the layers and their cycle counts),
//! `emit.rs` (the module and ROM images), `testbench.rs`, `keywords.rs` (reserved words),
//! `unsupported.rs` (what a user reads when the model does not map, in the model's own terms).

mod emit;
mod keywords;
mod layer;
mod recognize;
mod testbench;
mod unsupported;
#[cfg(test)]
mod tests;

pub use emit::emit;
pub use layer::{cycles, Kind, Layer};
pub use recognize::{recognize, unmapped, Unmapped};
pub use unsupported::unsupported;

use rlx_ir::caps::TargetCaps;
use rlx_ir::DType;

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
    /// Vectors in the testbench's default input and expected-output files (the testbench refuses to
    /// run more from them).
    pub testbench_vectors: usize,
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
