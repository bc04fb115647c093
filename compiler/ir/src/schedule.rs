//! The GPU schedule: what runtime-min's device executors (Vulkan, CUDA) read beside the kernels —
//! the storage buffers (one per LIR base), then per dispatch its entry point, grid, and one byte range
//! per kernel parameter. One format and one encoder for every GPU writer (`NAME.schedule.bin`; the
//! layout is in docs/targets.md), parsed by `rlx_rt::schedule`.

use crate::lir::{Base, Lir};
use crate::loops::Access;

/// The schedule file's magic (`RLXS` little-endian).
pub const SCHEDULE_MAGIC: u32 = u32::from_le_bytes(*b"RLXS");
/// Version 2: each dispatch's byte ranges (shader artifacts: the workgroup size is in the module).
pub const SCHEDULE_VERSION: u32 = 2;
/// Version 3: version 2 plus each dispatch's block (workgroup) size after its grid (CUDA artifacts:
/// PTX has no launch dimensions of its own).
pub const SCHEDULE_VERSION_BLOCKS: u32 = 3;
/// Version 4: version 3 with a tag word before each entry — 0 a kernel launch (as in version 3), 1 a
/// collective (a sharded CUDA rank's `Stmt::Comm`: [`SchedComm`]). Written only when the program has
/// a collective, so every other artifact keeps version 3 bytes.
pub const SCHEDULE_VERSION_COMM: u32 = 4;
/// Version 5: version 4 (tagged entries) with each kernel's dynamic shared memory in bytes after its
/// block (CUDA: `nvptx/cp_async.rs`'s pipelined tiles take more than the 48 KiB of static shared
/// memory; the executor opts each such kernel in and passes the bytes at launch). Written only when
/// some kernel has dynamic shared memory, so every other artifact keeps its version 3 / 4 bytes.
pub const SCHEDULE_VERSION_SHARED: u32 = 5;

/// One storage buffer of the program: a LIR base and its size in bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct BaseBuf {
    pub base: Base,
    pub bytes: u64,
}

/// Bytes `start..end` of binding `binding` that a kernel parameter may read or write: the LIR
/// buffer's bytes (`offset .. offset + bytes`, a view's inside its root's, reused arena bytes shared
/// with the other buffers placed there), widened to whole 4-byte words since byte-wide values are
/// read and stored a word at a time by the shader targets. `access` is the parameter's, widened by
/// what the kernel body does (a load makes it a read, a store a write), so it never understates.
/// Loop-form kernels index a parameter only within its elements (the planner's invariant), so the
/// kernel touches nothing outside its ranges. Executors order dispatches by these.
#[derive(Clone, Debug, PartialEq)]
pub struct ByteRange {
    pub binding: u32,
    pub access: Access,
    pub start: u64,
    pub end: u64,
}

/// One dispatch as the schedule records it.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedDispatch {
    pub entry: u32,
    pub groups: [u32; 3],
    /// Threads per block / workgroup (written only in version 3).
    pub block: [u32; 3],
    /// Dynamic shared memory in bytes (CUDA; 0 none: written only in version 5).
    pub shared: u32,
    pub ranges: Vec<ByteRange>,
    /// A collective in place of a kernel (version 4; `entry`, `groups`, `block` unused): its ranges
    /// are the send buffer's exact bytes (read; none for a receive) then the receive buffer's (write).
    pub comm: Option<SchedComm>,
}

/// A collective as the schedule records it: what the executor asks of the communicator the
/// application passed in (NCCL on CUDA), on the dispatch's two byte ranges.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedComm {
    pub op: crate::loops::CommOp,
    pub dtype: crate::DType,
    /// Elements per rank: sent (all-reduce, all-gather, send), received (reduce-scatter, receive).
    pub count: u64,
    /// The communicator's size the ranges assume (the receive of an all-gather and the send of a
    /// reduce-scatter are `count` × ranks elements; 1 for the others, where the ranges say nothing).
    pub ranks: u32,
    /// The other rank of a send or receive; -1 for the collectives.
    pub peer: i64,
}

/// The storage buffers of a LIR program, in binding order: arena, weights, inputs, outputs (each
/// port's exact bytes), then the state region when the program keeps state (a KV cache: the executor
/// keeps it on the device between runs).
pub fn bases_of(lir: &Lir) -> Vec<BaseBuf> {
    let port = |p: &crate::lir::Port| p.ty.dtype.bytes_for(p.ty.shape.numel().unwrap_or(0)).unwrap_or(0) as u64;
    let mut v = vec![BaseBuf { base: Base::Arena, bytes: lir.arena_bytes as u64 }, BaseBuf { base: Base::Weights, bytes: lir.weights.len() as u64 }];
    v.extend(lir.inputs.iter().enumerate().map(|(i, p)| BaseBuf { base: Base::Input(i as u32), bytes: port(p) }));
    v.extend(lir.outputs.iter().enumerate().map(|(i, p)| BaseBuf { base: Base::Output(i as u32), bytes: port(p) }));
    if lir.state_bytes > 0 {
        v.push(BaseBuf { base: Base::State, bytes: lir.state_bytes as u64 });
    }
    v
}

/// The byte range of launch parameter `pi` bound to LIR buffer `buf` at binding `bind`: its declared
/// access widened by whether the body loads (`loaded`) or stores (`stored`) it.
pub fn param_range(lir: &Lir, buf: u32, bind: usize, declared: Access, loaded: bool, stored: bool) -> ByteRange {
    let b = &lir.buffers[buf as usize];
    let end = b.offset as u64 + b.bytes() as u64;
    let read = declared != Access::Write || loaded;
    let write = declared != Access::Read || stored;
    let access = match (read, write) {
        (true, false) => Access::Read,
        (false, true) => Access::Write,
        _ => Access::ReadWrite,
    };
    ByteRange { binding: bind as u32, access, start: b.offset as u64 / 4 * 4, end: end.div_ceil(4) * 4 }
}

/// The schedule as little-endian u32 words — `magic, version, n_bases, {kind (0 arena, 1 weights,
/// 2 input, 3 output, 4 state), index, bytes_lo, bytes_hi} × n_bases, n_dispatches, {[tag: version 4 only,]
/// entry, groups_x, groups_y, groups_z, [block_x, block_y, block_z: versions 3 to 5,] [shared bytes:
/// version 5,] n_ranges,
/// {binding, access (1 read, 2 write, 3 read-write), start_lo, start_hi, end_lo, end_hi} × n_ranges}
/// × n_dispatches`; in version 4 (with blocks, and some dispatch a collective) a tag-1 entry is
/// `1, op (CommOp), dtype (DType code), count_lo, count_hi, ranks, peer (i32, -1 none), n_ranges, ranges`.
pub fn encode(bases: &[BaseBuf], dispatches: &[SchedDispatch], with_blocks: bool) -> Vec<u8> {
    let shared = with_blocks && dispatches.iter().any(|d| d.shared > 0);
    let comm = shared || with_blocks && dispatches.iter().any(|d| d.comm.is_some());
    let version = if shared { SCHEDULE_VERSION_SHARED } else if comm { SCHEDULE_VERSION_COMM } else if with_blocks { SCHEDULE_VERSION_BLOCKS } else { SCHEDULE_VERSION };
    let mut w: Vec<u32> = vec![SCHEDULE_MAGIC, version, bases.len() as u32];
    for b in bases {
        let (kind, idx) = match b.base {
            Base::Arena => (0, 0),
            Base::Weights => (1, 0),
            Base::Input(i) => (2, i),
            Base::Output(i) => (3, i),
            Base::State => (4, 0),
        };
        w.extend([kind, idx, b.bytes as u32, (b.bytes >> 32) as u32]);
    }
    w.push(dispatches.len() as u32);
    for d in dispatches {
        match &d.comm {
            Some(c) if comm => w.extend([1, c.op as u32, c.dtype as u32, c.count as u32, (c.count >> 32) as u32, c.ranks, c.peer as i32 as u32]),
            _ => {
                if comm {
                    w.push(0);
                }
                w.extend([d.entry, d.groups[0], d.groups[1], d.groups[2]]);
                if with_blocks {
                    w.extend(d.block);
                }
                if shared {
                    w.push(d.shared);
                }
            }
        }
        w.push(d.ranges.len() as u32);
        for r in &d.ranges {
            let access = match r.access {
                Access::Read => 1,
                Access::Write => 2,
                Access::ReadWrite => 3,
            };
            w.extend([r.binding, access, r.start as u32, (r.start >> 32) as u32, r.end as u32, (r.end >> 32) as u32]);
        }
    }
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}
