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

/// The further return code of a `NAME_run` whose model holds a `loop` region with a maximum trip count:
/// the loop was still running when it reached it (the interpreter's error, as a code).
pub const LOOP_ERROR_CODES: &[(i32, &str, &str)] = &[(11, "LOOP_BOUND", "a loop region was still running at its maximum trip count")];

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

/// What a [`Region`] runs.
#[derive(Clone, Debug, PartialEq)]
pub enum RegionKind {
    /// `loop` (`crate::region`): the body run while iteration < trip and the condition holds.
    Loop { max_trips: Option<u64>, carried: usize },
    /// `if`: body 0 (then) or body 1 (else) by the condition.
    If,
}

/// A control-flow region (`crate::region`), run by the driver in place of launch `launch`, whose kernel
/// has no body and whose bindings are every buffer named here (so the arena plan keeps them alive
/// across the whole region). Each body is a program of its own — `NAME_rK_run(arena, inputs, outputs)`
/// over its own launches —, its arena at `scratch`, its constants in the outer weights blob.
///
/// A loop: the carried results hold the loop-carried values (the operands copied in first), the count
/// result is the iteration, scan results are zeroed first; per iteration the body reads (count, `truth`,
/// carried results…, captured operands…) and writes (`temps[0]`: the condition, `temps[1..]`: the
/// carried values, each scan result at the iteration's slice), then the carried temps are copied back
/// and the count incremented. An if: the branch the condition picks reads the captured operands and
/// writes the results.
#[derive(Clone, Debug, PartialEq)]
pub struct Region {
    pub launch: usize,
    pub kind: RegionKind,
    pub bodies: Vec<Lir>,
    /// The op's operands' buffers, then its results'.
    pub operands: Vec<u32>,
    pub results: Vec<u32>,
    /// The bodies' arena: `None` when they need none.
    pub scratch: Option<u32>,
    /// A loop's condition and carried temporaries (above); empty for an if.
    pub temps: Vec<u32>,
    /// A loop's constant `true` (bool[]) in the weights, the body's condition input.
    pub truth: Option<u32>,
}

/// A loop region's operand and result buffers by role, in the order the `loop` op has them (trip count,
/// condition, initial carried values, captured values; carried results, scan results, iteration count).
pub struct LoopParts<'a> {
    pub trip: u32,
    pub cond: u32,
    pub init: &'a [u32],
    pub captured: &'a [u32],
    pub carried: &'a [u32],
    pub scans: &'a [u32],
    pub count: u32,
    pub max_trips: Option<u64>,
}

impl Region {
    /// The buffers of a loop region by role; `None` for an if.
    pub fn loop_parts(&self) -> Option<LoopParts<'_>> {
        let RegionKind::Loop { max_trips, carried } = self.kind else { return None };
        let n = self.results.len();
        Some(LoopParts {
            trip: self.operands[0],
            cond: self.operands[1],
            init: &self.operands[2..2 + carried],
            captured: &self.operands[2 + carried..],
            carried: &self.results[..carried],
            scans: &self.results[carried..n - 1],
            count: self.results[n - 1],
            max_trips,
        })
    }
}

impl LoopParts<'_> {
    /// Bytes of one iteration's slice of scan result `b` (its buffer holds `max_trips` slices).
    pub fn scan_slice_bytes(&self, lir: &Lir, b: u32) -> usize {
        lir.buffers[b as usize].bytes() / self.max_trips.unwrap_or(1).max(1) as usize
    }
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
    /// Control-flow regions, each in place of one launch (ordered by launch).
    pub regions: Vec<Region>,
    /// Peak arena bytes: the scratch memory the caller reserves.
    pub arena_bytes: usize,
    /// All constants, each at an aligned offset.
    pub weights: Vec<u8>,
    /// Alignment of every arena and weights offset, in bytes.
    pub align: usize,
}

impl Lir {
    /// The region run in place of launch `li`, if it is one.
    pub fn region_at(&self, li: usize) -> Option<&Region> {
        self.regions.iter().find(|r| r.launch == li)
    }

    /// Whether a loop region with a maximum trip count runs anywhere in the program (its bodies
    /// included): then the driver may return [`LOOP_ERROR_CODES`]' code.
    pub fn has_bounded_loop(&self) -> bool {
        self.regions.iter().any(|r| matches!(r.kind, RegionKind::Loop { max_trips: Some(_), .. }) || r.bodies.iter().any(Lir::has_bounded_loop))
    }
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
        for (li, l) in self.launches.iter().enumerate() {
            let binds: Vec<String> = l.bindings.iter().map(|b| format!("buf{b}")).collect();
            match self.region_at(li) {
                Some(r) => {
                    let _ = writeln!(out, "region {:?} {:?} ({}) {{", l.kernel.name, r.kind, binds.join(", "));
                    for b in &r.bodies {
                        for line in b.to_string().lines() {
                            let _ = writeln!(out, "  {line}");
                        }
                    }
                    let _ = writeln!(out, "}}");
                }
                None => {
                    let _ = writeln!(out, "launch {:?} ({})", l.kernel.name, binds.join(", "));
                }
            }
        }
        f.write_str(&out)
    }
}
