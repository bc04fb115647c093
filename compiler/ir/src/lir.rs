//! LIR: MIR after memory planning. Every materialized tensor is a [`Buffer`] at a byte offset from one
//! of four bases (the arena, the weights blob, an input, an output); views (reshape, leading-axis
//! slice) alias their root at an offset; constants live in one weights blob; the program is an ordered
//! list of kernel [`Launch`]es, each a loop-form kernel plus the buffers bound to its parameters.
//! Targets consume LIR only.

use crate::loops::Kernel;
use crate::{DType, NodeId, TensorType};
use std::fmt::{self, Write};

/// Return codes of a compiled model's `NAME_run`: (code, suffix of `NAME_ERR_*`, meaning). Code 0 is
/// `NAME_OK`. Every CPU writer returns these, the C header and Rust binding document them, and
/// `rlx_rt::Error::from_code` maps them back.
pub const ERROR_CODES: &[(i32, &str, &str)] = &[
    (0, "OK", "success"),
    (1, "NULL_ARENA", "arena is NULL but the model needs scratch memory"),
    (2, "NULL_INPUTS", "the inputs array is NULL"),
    (3, "NULL_OUTPUTS", "the outputs array is NULL"),
    (4, "NULL_INPUT", "an input pointer is NULL"),
    (5, "NULL_OUTPUT", "an output pointer is NULL"),
    (6, "MISALIGNED_ARENA", "arena is not 16-byte aligned"),
    (7, "NULL_WEIGHTS", "external weights were not set (call NAME_set_weights first)"),
];

/// The further return code of a sharded artifact's `NAME_run` (one rank of a `--shard` compile): a
/// collective or transfer through the communicator failed, or no communicator was passed in.
pub const COMM_ERROR_CODES: &[(i32, &str, &str)] = &[(10, "COMM", "a collective failed or no communicator was set (rlx_rt_comm_set)")];

/// The further return codes of a stateful model's `NAME_step` (listed only in stateful artifacts, so a
/// stateless artifact's header and object are what they were before state existed).
pub const STATE_ERROR_CODES: &[(i32, &str, &str)] = &[
    (8, "NULL_STATE", "state is NULL (it must point to NAME_STATE_BYTES bytes)"),
    (9, "MISALIGNED_STATE", "state is not 16-byte aligned"),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Base {
    /// The caller-provided scratch arena (`NAME_ARENA_BYTES`).
    Arena,
    /// The weights blob (embedded in the artifact or loaded by the caller).
    Weights,
    /// The i-th graph input, as passed by the caller.
    Input(u32),
    /// The i-th graph output, as passed by the caller.
    Output(u32),
    /// The caller's state region (`NAME_STATE_BYTES`): the graph's state tensors, kept between calls.
    State,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    pub base: Base,
    /// Byte offset from the base.
    pub offset: usize,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Why it exists (the MIR value's name or node), for reports.
    pub label: String,
}

impl Buffer {
    pub fn elems(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn bytes(&self) -> usize {
        self.dtype.bytes_for(self.elems()).unwrap_or(0)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    /// The MIR nodes this kernel computes (a fused region), in order.
    pub nodes: Vec<NodeId>,
    pub kernel: Kernel,
    /// One buffer index per kernel parameter.
    pub bindings: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Port {
    pub name: String,
    pub ty: TensorType,
}

/// One state tensor (a KV cache) at a byte offset of the state region.
#[derive(Clone, Debug, PartialEq)]
pub struct StateSlot {
    pub port: Port,
    pub offset: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Lir {
    /// The caller's inputs and outputs (state tensors are not among them: they live in `state`).
    pub inputs: Vec<Port>,
    pub outputs: Vec<Port>,
    /// The graph's state tensors in the state region, in graph order (empty: a stateless model).
    pub state: Vec<StateSlot>,
    /// Bytes of the state region (0 for a stateless model).
    pub state_bytes: usize,
    pub buffers: Vec<Buffer>,
    pub launches: Vec<Launch>,
    /// Peak arena bytes: the scratch memory the caller reserves.
    pub arena_bytes: usize,
    /// All constants, each at an aligned offset.
    pub weights: Vec<u8>,
    /// Alignment of every arena and weights offset, in bytes.
    pub align: usize,
}

impl fmt::Display for Lir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        let _ = writeln!(out, "lir {{ arena_bytes={}, weights_bytes={}, align={} }}", self.arena_bytes, self.weights.len(), self.align);
        for (i, p) in self.inputs.iter().enumerate() {
            let _ = writeln!(out, "input {i} {:?}: {}", p.name, p.ty);
        }
        for (i, p) in self.outputs.iter().enumerate() {
            let _ = writeln!(out, "output {i} {:?}: {}", p.name, p.ty);
        }
        for (i, s) in self.state.iter().enumerate() {
            let _ = writeln!(out, "state {i} {:?}: {} at {}", s.port.name, s.port.ty, s.offset);
        }
        for (i, b) in self.buffers.iter().enumerate() {
            let base = match b.base {
                Base::Arena => "arena".to_string(),
                Base::Weights => "weights".to_string(),
                Base::Input(k) => format!("input{k}"),
                Base::Output(k) => format!("output{k}"),
                Base::State => "state".to_string(),
            };
            let _ = writeln!(out, "buf {i} = {base}+{} : {}{:?} {:?}", b.offset, b.dtype, b.shape, b.label);
        }
        for l in &self.launches {
            let binds: Vec<String> = l.bindings.iter().map(|b| format!("buf{b}")).collect();
            let _ = writeln!(out, "launch {:?} ({})", l.kernel.name, binds.join(", "));
        }
        f.write_str(&out)
    }
}
