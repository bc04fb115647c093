//! `NAME.schedule.bin`, the schedule of a GPU artifact (written by `rlx_ir::schedule::encode`; the
//! layout is in docs/targets.md): the storage buffers, then per dispatch its entry point, grid,
//! (version 3: block size,) and every byte range it reads or writes. Read by both device executors
//! (`vulkan.rs`, `cuda.rs`). Parsing never panics on malformed bytes.

use std::format;
use std::string::String;
use std::vec::Vec;

/// The schedule file's magic (`RLXS`) and the versions this runtime reads. Version 2 added each
/// dispatch's byte ranges (a version 1 file, with none, is refused with an error saying to
/// recompile); version 3 adds each dispatch's block size (CUDA: PTX states no launch dimensions);
/// version 4 adds collectives between the kernels; version 5 each kernel's dynamic shared memory.
pub const SCHEDULE_MAGIC: u32 = u32::from_le_bytes(*b"RLXS");
pub const SCHEDULE_VERSION: u32 = 2;
pub const SCHEDULE_VERSION_BLOCKS: u32 = 3;
/// Version 4 (CUDA, a sharded rank): version 3 with a tag word before each entry — 0 a kernel, 1 a
/// collective ([`Collective`]).
pub const SCHEDULE_VERSION_COMM: u32 = 4;
/// Version 5 (CUDA, a kernel with dynamic shared memory): version 4 with each kernel's dynamic shared
/// bytes after its block ([`Dispatch::shared`]).
pub const SCHEDULE_VERSION_SHARED: u32 = 5;

/// A malformed or unreadable schedule, in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleError(pub String);

impl core::fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A storage buffer the schedule binds: which base it is and its exact size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaseKind {
    Arena,
    Weights,
    Input(u32),
    Output(u32),
    /// The state region of a stateful model (a KV cache): kept on the device between runs, zeroed
    /// when the executor is set up and by its `reset_state`. At most one.
    State,
}

/// How a dispatch touches a byte range (file code 1, 2, 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    ReadWrite,
}

/// Bytes `start..end` of base `base` that a dispatch may read and/or write (the whole of one LIR
/// buffer the kernel binds, widened to 4-byte words). A dispatch touches nothing outside its ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub base: u32,
    pub access: Access,
    pub start: u64,
    pub end: u64,
}

/// One dispatch: entry point `k{entry}`, workgroup counts, and every byte range it touches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dispatch {
    pub entry: u32,
    pub groups: [u32; 3],
    /// Threads per block (version 3, CUDA); `[0; 3]` in version 2, whose modules state their own
    /// workgroup sizes.
    pub block: [u32; 3],
    /// Dynamic shared memory in bytes (version 5, CUDA; 0 otherwise).
    pub shared: u32,
    pub ranges: Vec<Range>,
    /// A collective in place of a kernel (version 4): `entry`, `groups` and `block` are unused; the
    /// ranges are the send buffer's exact bytes (read; none for a receive), then the receive
    /// buffer's (write).
    pub comm: Option<Collective>,
}

/// A collective of a sharded rank: `op` one of [`crate::comm`]'s codes (`ALL_REDUCE` … `RECV`), on
/// `count` elements of `dtype` per rank (sent by an all-reduce, all-gather or send; received by a
/// reduce-scatter or receive), `ranks` the communicator size its ranges assume, `peer` the other
/// rank of a send or receive (-1 otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Collective {
    pub op: i32,
    pub dtype: crate::DType,
    pub count: u64,
    pub ranks: u32,
    pub peer: i32,
}

impl Collective {
    /// Bytes (sent, received) per the op: the ranges must be exactly these.
    pub fn bytes(&self) -> Option<(u64, u64)> {
        use crate::comm::*;
        let one = self.count.checked_mul(self.dtype.size()? as u64)?;
        let all = one.checked_mul(self.ranks as u64)?;
        Some(match self.op {
            ALL_REDUCE | SEND => (one, one),
            ALL_GATHER => (one, all),
            REDUCE_SCATTER => (all, one),
            RECV => (0, one),
            _ => return None,
        })
    }
}

/// Whether `b` must wait for `a` (or `a` for `b`): some range of one and some range of the other
/// overlap in the same base and at least one of the two writes it (RAW, WAR, WAW). Two reads never
/// conflict, nor do disjoint ranges of one buffer.
pub fn conflict(a: &Dispatch, b: &Dispatch) -> bool {
    let writes = |r: &Range| r.access != Access::Read;
    let overlap = |x: &Range, y: &Range| x.base == y.base && x.start.max(y.start) < x.end.min(y.end);
    a.ranges.iter().any(|x| b.ranges.iter().any(|y| overlap(x, y) && (writes(x) || writes(y))))
}

/// Where the executor puts compute→compute barriers (`RLX_VULKAN_BARRIERS` at setup).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Barriers {
    /// `all`: schedule order, a barrier after every dispatch (the executor before version 2).
    All,
    /// `inorder`: schedule order, a barrier only before a dispatch that conflicts with one since the
    /// last barrier.
    InOrder,
    /// `levels` (the default): each dispatch at the level after the last one it conflicts with
    /// (list scheduling, as soon as possible); a level's dispatches run between one pair of barriers.
    Levels,
}

impl Barriers {
    /// From `RLX_VULKAN_BARRIERS` (`all`, `inorder`, `levels`; unset = `levels`).
    pub fn from_env() -> Result<Barriers, ScheduleError> {
        match std::env::var("RLX_VULKAN_BARRIERS").as_deref() {
            Err(_) | Ok("levels") => Ok(Barriers::Levels),
            Ok("all") => Ok(Barriers::All),
            Ok("inorder") => Ok(Barriers::InOrder),
            Ok(v) => Err(ScheduleError(format!("RLX_VULKAN_BARRIERS={v}: expected all, inorder or levels"))),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub bases: Vec<(BaseKind, u64)>,
    pub dispatches: Vec<Dispatch>,
}

/// A collective's ranges: its send buffer (read; none for a receive) and its receive buffer (write),
/// each exactly the bytes the op moves.
fn check_comm(d: usize, c: &Collective, ranges: &[Range]) -> Result<(), String> {
    let (send, recv) = c.bytes().ok_or_else(|| format!("dispatch {d}: collective {c:?}"))?;
    let want: &[(Access, u64)] = if c.op == crate::comm::RECV { &[(Access::Write, recv)] } else { &[(Access::Read, send), (Access::Write, recv)] };
    let got: Vec<(Access, u64)> = ranges.iter().map(|r| (r.access, r.end - r.start)).collect();
    if got != want {
        return Err(format!("dispatch {d}: a collective of {c:?} has ranges {got:?}, expected {want:?}"));
    }
    Ok(())
}

impl Schedule {
    /// Parses `NAME.schedule.bin` (format in docs/targets.md). Never panics on malformed bytes.
    pub fn parse(b: &[u8]) -> Result<Schedule, ScheduleError> {
        let bad = |m: &str| ScheduleError(format!("malformed schedule: {m}"));
        if b.len() % 4 != 0 {
            return Err(bad("length is not a multiple of 4"));
        }
        let w: Vec<u32> = b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        let mut i = 0usize;
        let mut next = |what: &str| -> Result<u32, ScheduleError> {
            let v = *w.get(i).ok_or_else(|| bad(&format!("truncated at {what}")))?;
            i += 1;
            Ok(v)
        };
        if next("magic")? != SCHEDULE_MAGIC {
            return Err(bad("bad magic (not an rlxc schedule)"));
        }
        let ver = next("version")?;
        if !(SCHEDULE_VERSION..=SCHEDULE_VERSION_SHARED).contains(&ver) {
            return Err(ScheduleError(format!("schedule version {ver}, this runtime reads versions {SCHEDULE_VERSION} to {SCHEDULE_VERSION_SHARED}: recompile the model with a matching rlxc")));
        }
        let blocks = ver >= SCHEDULE_VERSION_BLOCKS;
        let nb = next("base count")? as usize;
        if nb > w.len() {
            return Err(bad("base count exceeds the file"));
        }
        let mut bases = Vec::with_capacity(nb);
        for _ in 0..nb {
            let kind = next("base kind")?;
            let idx = next("base index")?;
            let lo = next("base size")? as u64;
            let hi = next("base size")? as u64;
            let k = match kind {
                0 => BaseKind::Arena,
                1 => BaseKind::Weights,
                2 => BaseKind::Input(idx),
                3 => BaseKind::Output(idx),
                4 if idx == 0 && !bases.iter().any(|b: &(BaseKind, u64)| b.0 == BaseKind::State) => BaseKind::State,
                4 => return Err(bad("a second state base, or a state base with an index")),
                _ => return Err(bad(&format!("unknown base kind {kind}"))),
            };
            bases.push((k, lo | (hi << 32)));
        }
        let nd = next("dispatch count")? as usize;
        if nd > w.len() {
            return Err(bad("dispatch count exceeds the file"));
        }
        let mut dispatches = Vec::with_capacity(nd);
        for d in 0..nd {
            let tag = if ver >= SCHEDULE_VERSION_COMM { next("entry tag")? } else { 0 };
            let comm = match tag {
                0 => None,
                1 => {
                    let op = next("collective op")?;
                    let code = next("collective dtype")?;
                    let count = next("collective count")? as u64 | (next("collective count")? as u64) << 32;
                    let ranks = next("collective ranks")?;
                    let peer = next("collective peer")? as i32;
                    let dtype = u8::try_from(code).ok().and_then(crate::DType::from_code).ok_or_else(|| bad(&format!("dispatch {d}: unknown dtype code {code}")))?;
                    if op > crate::comm::RECV as u32 || ranks == 0 {
                        return Err(bad(&format!("dispatch {d}: collective op {op} over {ranks} ranks")));
                    }
                    let c = Collective { op: op as i32, dtype, count, ranks, peer };
                    let p2p = c.op == crate::comm::SEND || c.op == crate::comm::RECV;
                    if p2p != (peer >= 0) || c.bytes().is_none() {
                        return Err(bad(&format!("dispatch {d}: collective {c:?}")));
                    }
                    Some(c)
                }
                t => return Err(bad(&format!("dispatch {d}: unknown entry tag {t}"))),
            };
            let (entry, groups, block, shared) = if comm.is_some() {
                (0, [1; 3], [1; 3], 0)
            } else {
                let entry = next("entry")?;
                let groups = [next("groups")?, next("groups")?, next("groups")?];
                if groups.contains(&0) {
                    return Err(bad(&format!("dispatch {d} has zero workgroups")));
                }
                let block = if blocks { [next("block")?, next("block")?, next("block")?] } else { [0; 3] };
                if blocks && (block.contains(&0) || block.iter().try_fold(1u64, |a, &b| a.checked_mul(b as u64)).is_none_or(|n| n > 1024)) {
                    return Err(bad(&format!("dispatch {d} has a block of {block:?} threads (1 to 1024 in all)")));
                }
                // Dynamic shared memory: 227 KiB is the most any CUDA GPU gives a block.
                let shared = if ver >= SCHEDULE_VERSION_SHARED { next("shared bytes")? } else { 0 };
                if shared > 227 * 1024 {
                    return Err(bad(&format!("dispatch {d} asks for {shared} bytes of dynamic shared memory")));
                }
                (entry, groups, block, shared)
            };
            let nr = next("range count")? as usize;
            if nr > w.len() {
                return Err(bad("range count exceeds the file"));
            }
            let mut ranges = Vec::with_capacity(nr);
            for _ in 0..nr {
                let base = next("range base")?;
                let access = match next("range access")? {
                    1 => Access::Read,
                    2 => Access::Write,
                    3 => Access::ReadWrite,
                    a => return Err(bad(&format!("dispatch {d}: unknown access {a}"))),
                };
                let start = next("range start")? as u64 | (next("range start")? as u64) << 32;
                let end = next("range end")? as u64 | (next("range end")? as u64) << 32;
                let Some(&(_, bytes)) = bases.get(base as usize) else {
                    return Err(bad(&format!("dispatch {d}: a range of buffer {base}, the schedule has {nb}")));
                };
                // The buffer's bytes widened to whole 4-byte words (saturating: a size near 2^64
                // is the file's claim, not arithmetic to overflow on).
                if start > end || end > bytes.div_ceil(4).max(1).saturating_mul(4) {
                    return Err(bad(&format!("dispatch {d}: bytes {start}..{end} of buffer {base}, which holds {bytes}")));
                }
                ranges.push(Range { base, access, start, end });
            }
            if let Some(c) = &comm {
                check_comm(d, c, &ranges).map_err(|m| bad(&m))?;
            }
            dispatches.push(Dispatch { entry, groups, block, shared, ranges, comm });
        }
        if i != w.len() {
            return Err(bad("trailing bytes"));
        }
        Ok(Schedule { bases, dispatches })
    }

    /// The collectives' count (a schedule with any runs only where a communicator is given).
    pub fn collectives(&self) -> usize {
        self.dispatches.iter().filter(|d| d.comm.is_some()).count()
    }

    pub fn count(&self, f: impl Fn(BaseKind) -> bool) -> usize {
        self.bases.iter().filter(|(k, _)| f(*k)).count()
    }

    /// The dispatches (indices) grouped into barrier-separated levels, each level in schedule order:
    /// a barrier goes between consecutive levels and none inside one. Every pair `e < d` of
    /// conflicting dispatches ([`conflict`]) lands in levels `L(e) < L(d)`, since `L(d)` is computed
    /// against every earlier dispatch, not only its neighbours; that is all the correctness there is:
    /// the arena's reused bytes are ranges like any other, so its WAR/WAW hazards are conflicts.
    /// `Levels`: `L(d)` = 1 + the highest level of an earlier conflicting dispatch, else 0 (the
    /// fewest barriers any order needs: the longest chain of conflicts). `InOrder`: the same but never
    /// below `L(d - 1)` (schedule order kept). `All`: one dispatch per level.
    pub fn levels(&self, how: Barriers) -> Vec<Vec<usize>> {
        let ds = &self.dispatches;
        let mut level = std::vec![0usize; ds.len()];
        for d in 0..ds.len() {
            level[d] = match how {
                Barriers::All => d,
                Barriers::InOrder => d.checked_sub(1).map_or(0, |p| level[p]),
                Barriers::Levels => 0,
            };
            for e in 0..d {
                if level[e] + 1 > level[d] && conflict(&ds[e], &ds[d]) {
                    level[d] = level[e] + 1;
                }
            }
        }
        let n = level.iter().max().map_or(0, |m| m + 1);
        let mut out = std::vec![Vec::new(); n];
        for (d, l) in level.into_iter().enumerate() {
            out[l].push(d);
        }
        out.retain(|l| !l.is_empty());
        out
    }
}
