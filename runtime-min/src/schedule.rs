//! The schedule that shader artifacts carry (`NAME.schedule.bin`, written by rlxc's shader target)
//! and what the Vulkan executor derives from it: the storage buffers (bases), the dispatches with the
//! byte ranges each reads and writes, and the barrier levels ([`Schedule::levels`]).
//!
//! Feature `schedule` (no Vulkan, no `std`; it allocates the parsed schedule through `alloc`), so the
//! parser builds and is fuzzed without ash; feature `vulkan` includes it and re-exports it from
//! [`crate::vulkan`]. [`Schedule::parse`] never panics on malformed bytes.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// The schedule file's magic (`RLXS`) and the version this executor reads. Version 2 added each
/// dispatch's byte ranges; a version 1 file (no ranges) is refused with an error saying to recompile.
pub const SCHEDULE_MAGIC: u32 = u32::from_le_bytes(*b"RLXS");
pub const SCHEDULE_VERSION: u32 = 2;

/// What went wrong, in words (no Vulkan loader, no device, a malformed schedule, a Vulkan error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VkError(pub String);

impl core::fmt::Display for VkError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for VkError {}

/// A storage buffer the schedule binds: which base it is and its exact size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaseKind {
    Arena,
    Weights,
    Input(u32),
    Output(u32),
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
    pub ranges: Vec<Range>,
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

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub bases: Vec<(BaseKind, u64)>,
    pub dispatches: Vec<Dispatch>,
}

impl Schedule {
    /// Parses `NAME.schedule.bin` (format in docs/targets.md). Never panics on malformed bytes.
    pub fn parse(b: &[u8]) -> Result<Schedule, VkError> {
        let bad = |m: &str| VkError(format!("malformed schedule: {m}"));
        if b.len() % 4 != 0 {
            return Err(bad("length is not a multiple of 4"));
        }
        let w: Vec<u32> = b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        let mut i = 0usize;
        let mut next = |what: &str| -> Result<u32, VkError> {
            let v = *w.get(i).ok_or_else(|| bad(&format!("truncated at {what}")))?;
            i += 1;
            Ok(v)
        };
        if next("magic")? != SCHEDULE_MAGIC {
            return Err(bad("bad magic (not an rlxc schedule)"));
        }
        let ver = next("version")?;
        if ver != SCHEDULE_VERSION {
            return Err(VkError(format!("schedule version {ver}, this runtime reads version {SCHEDULE_VERSION}: recompile the model with a matching rlxc")));
        }
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
            let entry = next("entry")?;
            let groups = [next("groups")?, next("groups")?, next("groups")?];
            if groups.contains(&0) {
                return Err(bad(&format!("dispatch {d} has zero workgroups")));
            }
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
            dispatches.push(Dispatch { entry, groups, ranges });
        }
        if i != w.len() {
            return Err(bad("trailing bytes"));
        }
        Ok(Schedule { bases, dispatches })
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
        let mut level = vec![0usize; ds.len()];
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
        let mut out = vec![Vec::new(); n];
        for (d, l) in level.into_iter().enumerate() {
            out[l].push(d);
        }
        out.retain(|l| !l.is_empty());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[u32]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn schedule_parses_and_rejects_malformed_bytes() {
        // Two bases (arena 64 bytes, input 0 of 16), one dispatch reading input bytes 0..16 and
        // writing arena bytes 8..72 (past 64: bad below) / 8..64.
        let good = words(&[SCHEDULE_MAGIC, 2, 2, 0, 0, 64, 0, 2, 0, 16, 0, 1, 0, 1, 1, 1, 2, 1, 1, 0, 0, 16, 0, 0, 2, 8, 0, 64, 0]);
        let s = Schedule::parse(&good).unwrap();
        assert_eq!(s.bases, vec![(BaseKind::Arena, 64), (BaseKind::Input(0), 16)]);
        let r = |base, access, start, end| Range { base, access, start, end };
        assert_eq!(s.dispatches, vec![Dispatch { entry: 0, groups: [1, 1, 1], ranges: vec![r(1, Access::Read, 0, 16), r(0, Access::Write, 8, 64)] }]);
        for n in 0..good.len() {
            assert!(Schedule::parse(&good[..n]).is_err(), "truncated at {n}");
        }
        let patch = |at: usize, v: u32| {
            let mut w = good.clone();
            w[4 * at..4 * at + 4].copy_from_slice(&v.to_le_bytes());
            Schedule::parse(&w).err().map(|e| e.0).unwrap_or_default()
        };
        assert!(patch(0, 0).contains("bad magic"));
        assert!(patch(3, 9).contains("unknown base kind 9"));
        assert!(patch(13, 0).contains("zero workgroups"));
        assert!(patch(18, 4).contains("unknown access 4"));
        assert!(patch(17, 2).contains("a range of buffer 2, the schedule has 2"));
        assert!(patch(27, 72).contains("bytes 8..72 of buffer 0, which holds 64"));
        assert!(patch(25, 65).contains("bytes 65..64"));
        assert!(patch(16, u32::MAX).contains("range count exceeds the file"));
        assert!(Schedule::parse(&words(&[SCHEDULE_MAGIC, 2, u32::MAX])).is_err());
        let mut trailing = good.clone();
        trailing.extend([0, 0, 0, 0]);
        assert_eq!(Schedule::parse(&trailing).err().map(|e| e.0).as_deref(), Some("malformed schedule: trailing bytes"));
        // A byte-sized buffer's range may cover its last word whole (byte stores go through words).
        let byte = words(&[SCHEDULE_MAGIC, 2, 1, 0, 0, 5, 0, 1, 0, 1, 1, 1, 1, 0, 2, 0, 0, 8, 0]);
        assert_eq!(Schedule::parse(&byte).unwrap().dispatches[0].ranges, vec![r(0, Access::Write, 0, 8)]);
    }

    const A: u32 = 0; // the arena
    const W: u32 = 1; // the weights
    const R: Access = Access::Read;
    const WR: Access = Access::Write;
    const RW: Access = Access::ReadWrite;

    /// A schedule from dispatches given as lists of (base, access, start, end).
    fn sched(ds: &[&[(u32, Access, u64, u64)]]) -> Schedule {
        let dispatches = ds
            .iter()
            .enumerate()
            .map(|(i, rs)| Dispatch { entry: i as u32, groups: [1, 1, 1], ranges: rs.iter().map(|&(base, access, start, end)| Range { base, access, start, end }).collect() })
            .collect();
        Schedule { bases: vec![(BaseKind::Arena, 1 << 20), (BaseKind::Weights, 1 << 20)], dispatches }
    }

    fn lv(s: &Schedule) -> Vec<Vec<usize>> {
        s.levels(Barriers::Levels)
    }

    #[test]
    fn barriers_go_exactly_where_a_byte_range_is_shared_with_a_write() {
        // RAW: 1 reads what 0 wrote.
        assert_eq!(lv(&sched(&[&[(A, WR, 0, 64)], &[(A, R, 0, 64), (A, WR, 64, 128)]])), vec![vec![0], vec![1]]);
        // WAR: 1 overwrites bytes 0 reads (0 must finish reading first).
        assert_eq!(lv(&sched(&[&[(W, R, 0, 64), (A, WR, 64, 128)], &[(W, R, 0, 64), (A, WR, 0, 64)]])), vec![vec![0, 1]]);
        assert_eq!(lv(&sched(&[&[(A, R, 0, 64), (A, WR, 64, 128)], &[(A, WR, 0, 64)]])), vec![vec![0], vec![1]]);
        // WAW: both write byte 63.
        assert_eq!(lv(&sched(&[&[(A, WR, 0, 64)], &[(A, WR, 60, 64)]])), vec![vec![0], vec![1]]);
        // ReadWrite counts as a write on either side.
        assert_eq!(lv(&sched(&[&[(A, RW, 0, 4)], &[(A, R, 0, 4)]])), vec![vec![0], vec![1]]);
        assert_eq!(lv(&sched(&[&[(A, R, 0, 4)], &[(A, RW, 0, 4)]])), vec![vec![0], vec![1]]);
        // Reads never conflict with reads.
        assert_eq!(lv(&sched(&[&[(W, R, 0, 64)], &[(W, R, 0, 64)]])), vec![vec![0, 1]]);
        // Disjoint ranges of one buffer (touching ends) do not conflict, nor do the same bytes of
        // two different buffers, nor an empty range.
        assert_eq!(lv(&sched(&[&[(A, WR, 0, 64)], &[(A, WR, 64, 128)], &[(W, R, 0, 64)], &[(A, WR, 32, 32)]])), vec![vec![0, 1, 2, 3]]);
        // The same bytes reached through different bindings: a view (arena 32..64) of a root
        // (arena 0..128) and a buffer placed in reused arena bytes are the same memory.
        assert_eq!(lv(&sched(&[&[(A, WR, 0, 128)], &[(A, R, 32, 64), (A, WR, 256, 320)]])), vec![vec![0], vec![1]]);
        // Arena reuse: 0 writes x (0..64), 1 reads x → y (64..128), 2 puts z in x's old bytes (WAR
        // with 1, WAW with 0), 3 reads y and z.
        let reuse = sched(&[&[(A, WR, 0, 64)], &[(A, R, 0, 64), (A, WR, 64, 128)], &[(W, R, 0, 8), (A, WR, 0, 64)], &[(A, R, 0, 128), (A, WR, 128, 192)]]);
        assert_eq!(lv(&reuse), vec![vec![0], vec![1], vec![2], vec![3]]);
        // MiniLM's Q, K and V projections read the LayerNorm's output and the weights and write three
        // different buffers: one level, then the scores read Q and K, then the context reads V.
        let attn = sched(&[
            &[(A, WR, 0, 64)],
            &[(A, R, 0, 64), (W, R, 0, 64), (A, WR, 64, 128)],
            &[(A, R, 0, 64), (W, R, 64, 128), (A, WR, 128, 192)],
            &[(A, R, 0, 64), (W, R, 128, 192), (A, WR, 192, 256)],
            &[(A, R, 64, 192), (A, WR, 256, 320)],
            &[(A, R, 192, 320), (A, WR, 0, 64)],
        ]);
        assert_eq!(lv(&attn), vec![vec![0], vec![1, 2, 3], vec![4], vec![5]]);
        assert_eq!(attn.levels(Barriers::InOrder), vec![vec![0], vec![1, 2, 3], vec![4], vec![5]]);
        assert_eq!(attn.levels(Barriers::All).len(), 6);
        // Reordering: 2 is independent of 1 (which waits for 0), so it runs beside 0; in schedule
        // order it would wait behind 1's barrier.
        let s = sched(&[&[(A, WR, 0, 64)], &[(A, R, 0, 64), (A, WR, 64, 128)], &[(W, R, 0, 64), (A, WR, 128, 192)]]);
        assert_eq!(lv(&s), vec![vec![0, 2], vec![1]]);
        assert_eq!(s.levels(Barriers::InOrder), vec![vec![0], vec![1, 2]]);
        // A dependency on an earlier level than the previous one is still kept (all pairs are compared).
        let s = sched(&[&[(A, WR, 0, 64)], &[(W, R, 0, 4), (A, WR, 64, 128)], &[(A, R, 64, 128), (A, WR, 128, 192)], &[(A, R, 0, 4), (A, WR, 192, 200)]]);
        assert_eq!(lv(&s), vec![vec![0, 1], vec![2, 3]]);
    }

    #[test]
    fn levels_keep_every_conflicting_pair_ordered_on_random_schedules() {
        // xorshift: deterministic pseudo-random schedules of 40 dispatches over two small buffers.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..200 {
            let ds: Vec<Vec<(u32, Access, u64, u64)>> = (0..40)
                .map(|_| {
                    (0..1 + rnd(3))
                        .map(|_| {
                            let start = 4 * rnd(16);
                            (rnd(2) as u32, [R, WR, RW][rnd(3) as usize], start, start + 4 * rnd(6))
                        })
                        .collect()
                })
                .collect();
            let refs: Vec<&[(u32, Access, u64, u64)]> = ds.iter().map(|d| d.as_slice()).collect();
            let s = sched(&refs);
            // `conflict` against a byte-by-byte oracle: some byte of one buffer both touch, one writing.
            let touches = |d: &[(u32, Access, u64, u64)], base: u32, byte: u64, write: bool| d.iter().any(|&(b, a, s, e)| b == base && s <= byte && byte < e && (!write || a != R));
            for (d, e) in (0..12).flat_map(|d| (d + 1..12).map(move |e| (d, e))) {
                let oracle = (0..2).any(|b| (0..100).any(|y| (touches(&ds[d], b, y, true) && touches(&ds[e], b, y, false)) || (touches(&ds[d], b, y, false) && touches(&ds[e], b, y, true))));
                assert_eq!(conflict(&s.dispatches[d], &s.dispatches[e]), oracle, "{:?} vs {:?}", ds[d], ds[e]);
            }
            let mut counts = Vec::new();
            for how in [Barriers::Levels, Barriers::InOrder, Barriers::All] {
                let levels = s.levels(how);
                let mut at = vec![usize::MAX; 40];
                for (l, ds) in levels.iter().enumerate() {
                    assert!(!ds.is_empty() && ds.windows(2).all(|w| w[0] < w[1]));
                    for &d in ds {
                        assert_eq!(at[d], usize::MAX, "dispatch {d} scheduled twice");
                        at[d] = l;
                    }
                }
                for d in 0..40 {
                    assert_ne!(at[d], usize::MAX, "dispatch {d} not scheduled");
                    for e in 0..d {
                        if conflict(&s.dispatches[e], &s.dispatches[d]) {
                            assert!(at[e] < at[d], "{how:?}: {e} and {d} conflict but share level {}", at[d]);
                        }
                    }
                    if how != Barriers::Levels && d > 0 {
                        assert!(at[d - 1] <= at[d], "{how:?} reordered {d}");
                    }
                }
                counts.push(levels.len());
            }
            assert!(counts[0] <= counts[1] && counts[1] <= counts[2] && counts[2] == 40, "{counts:?}");
        }
    }
}
