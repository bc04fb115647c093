//! The tensor-core tiles of `vec_tile.rs` with their K slices copied straight from global into
//! shared memory by `cp.async` (sm_80+, PTX 7.0) through a ring of `stages` slices in the module's
//! dynamic shared array (`@dsm`; the bytes are the schedule's, version 5, and the executor opts the
//! kernel in past 48 KiB). The block tile and its 8 warps are `vec_tile.rs`'s; the K slice is 64 where
//! K is a multiple (else 32; `RLX_CUDA_VEC_TK=32`: 32); as many of the stages as the `--sm`'s shared
//! memory holds ([`max_shared`]; fewer than two: the register-staged form).
//!
//! Taken by default under `--precision f32` (3×TF32) with 2 stages; tf32 / bf16 / fp16 keep
//! `vec_tile.rs`'s register-staged form. `RLX_CUDA_VEC_STAGES=N` at compile time: N = 2..4 stages at
//! every precision, 1 the register-staged form everywhere (f32's PTX before this file, byte for byte).
//! Measured on the H200 (tests/gpu/bench_gemm.py at MiniLM's batch 8 / 32 shapes, each kernel alone;
//! tests/gpu/h200-gemm-s19.log, -s19b.log): 3×TF32 4–7% faster with 2 stages (b32 FFN down 105.0 →
//! 98.5 µs, Q/K/V 36.3 → 33.7; b8 FFN down 49.9 → 46.8, Q/K/V 18.1 → 17.3; FFN up + GELU 38.5 → 36.1
//! at b8, 119.0 both at b32) — it converts every fragment register where loaded anyway (the split),
//! so nothing moves to the fragment loads —; 3 and 4 stages no faster than 2, slices of 32 slower
//! than 64 at every depth. tf32 (each register rounded by `cvt.rna` where loaded, 2–4 times per value
//! as 2–4 warps read it, instead of once when staged) −7% to +7% (FFN up + GELU b32 78.0 → 83.5),
//! bf16 (the f32 activations packed where loaded) 0 to +10% slower: not taken. The kernels are not
//! bound by global-load latency, which is what the stages hide: the register-staged form's loads were
//! already in flight over a whole slice's compute.
//!
//! Per slice s: wait until this thread's copies of slice s have landed (`cp.async.wait_group
//! stages − 2`), one barrier (every thread's copies of s are visible, and every warp is done with the
//! slot slice s − 1 occupied), issue the copies of slice s + stages − 1 into that slot and commit
//! them as one group (an empty group past the last slice, so the count stays), then compute slice s:
//! `stages − 1` slices' loads are in flight while one computes, one barrier per slice.
//!
//! `cp.async` copies 16 bytes as they are, so shared memory holds the operands as global memory does
//! — f32 values (tf32 rounded by `cvt.rna`, 3×TF32 split, bf16 / fp16 pairs packed by `cvt.rn` when a
//! fragment is loaded), or a weight's 16-bit copy (`half_weights.rs`) — rows of the slice unpadded,
//! and the 16-byte chunks of odd rows XOR-swizzled against bank conflicts. The fragments' K order is
//! permuted alike in both operands (an `mma.sync` sums over k, so any order shared by A and B gives
//! the product) so that each 128-bit shared load is a chunk as it was copied:
//! - 32-bit words (f32 under tf32 / 3×TF32, a 16-bit copy's pairs under bf16 / fp16): for the k steps
//!   2c and 2c + 1, lane t's chunk is words 16c + 4t .. + 3 of a row — [lo(2c), hi(2c), lo(2c + 1),
//!   hi(2c + 1)], lo the register of k = t (a0 / a1, b0: pair t for 16-bit), hi of k = t + 4 (a2 / a3,
//!   b1) —: one load per B fragment and two per A fragment (rows g and g + 8) per two steps. A
//!   quarter-warp (g, g + 1; t = 0..3) reads chunks t of two rows: with 8 or more chunks a row, odd
//!   rows' chunks are XOR 4 (the other half of the 32 banks), with 4 (a 16-bit copy's slice of 32)
//!   the rows are already 16 words apart.
//! - f32 values under bf16 / fp16 (activations, which have no 16-bit copy): for k step 2c + u, lane
//!   t's chunk is f32 values 32c + 8t + 4u .. + 3, [x0, x1] packed into lo and [x2, x3] into hi — the
//!   16-bit copy's pair order above, so either operand may be either form; one load per fragment row
//!   and step, odd rows' chunks XOR 1.

use super::half_weights::Halves;
use super::tiled::{barrier, for_loop, if_, mma_issue_all, to_operand, unflatten};
use super::vec_tile::{block_origin, grid, Direct, Warps};
use super::Mma;
use crate::ir::Writer;
use rlx_ir::loops::tiled::{cdiv, Acc};
use rlx_ir::loops::Var;

/// The pipeline's depth, or `None`: `vec_tile.rs`'s register-staged form. `RLX_CUDA_VEC_STAGES=N` at
/// compile time: N = 2, 3 or 4 for every precision, 1 none; unset, [`DEFAULT_STAGES`] for 3×TF32
/// (`--precision f32`) and none for tf32 / bf16 / fp16 (module doc: measured).
pub fn stages(kind: Mma) -> Option<i64> {
    match std::env::var("RLX_CUDA_VEC_STAGES").ok().and_then(|v| v.parse::<i64>().ok()) {
        Some(s @ 2..=4) => Some(s),
        Some(_) => None,
        None => (kind == Mma::Tf32x3).then_some(DEFAULT_STAGES),
    }
}

/// Stages of 3×TF32's pipeline: 3 and 4 measured no faster than 2 (module doc).
const DEFAULT_STAGES: i64 = 2;

/// Shared memory a block of an sm_{sm} GPU may have (the CUDA programming guide's table): 227 KiB on
/// sm_90, 163 on sm_80, 99 on sm_86 / sm_89.
pub fn max_shared(sm: u32) -> i64 {
    match sm {
        90 => 227 * 1024,
        80 => 163 * 1024,
        _ => 99 * 1024,
    }
}

/// Declares the `cp.async` intrinsics ([`copy16`], [`commit`], [`wait`]; this file's ring and
/// `wgmma.rs`'s).
pub(super) fn declare(w: &mut Writer) {
    w.declare("declare void @llvm.nvvm.cp.async.cg.shared.global.16(ptr addrspace(3), ptr addrspace(1))");
    w.declare("declare void @llvm.nvvm.cp.async.commit.group()");
    w.declare("declare void @llvm.nvvm.cp.async.wait.group(i32)");
}

/// One 16-byte copy global → shared (`cp.async.cg`).
pub(super) fn copy16(w: &mut Writer, dst: &str, src: &str) {
    w.emit(&format!("call void @llvm.nvvm.cp.async.cg.shared.global.16(ptr addrspace(3) {dst}, ptr addrspace(1) {src})"));
}

/// Closes this thread's copies issued since the last commit as one group.
pub(super) fn commit(w: &mut Writer) {
    w.emit("call void @llvm.nvvm.cp.async.commit.group()");
}

/// Waits until at most `pending` of this thread's committed groups are still in flight.
pub(super) fn wait(w: &mut Writer, pending: i64) {
    w.emit(&format!("call void @llvm.nvvm.cp.async.wait.group(i32 {pending})"));
}

/// The module's dynamic shared array (one declaration, every pipelined kernel's).
pub(super) const DSM: &str = "@dsm";

/// One operand's slots in a stage: `rows` rows of `pitch` 32-bit words at word `off`, 16-byte chunks
/// of odd rows XOR `swz`; `split`: f32 values that bf16 / fp16 fragments pack when loaded.
struct Slot {
    rows: i64,
    pitch: i64,
    off: i64,
    swz: i64,
    split: bool,
    copy: Option<(usize, u64)>,
}

/// The pipelined matmul body, or `None` where it does not apply (K not a multiple of the slice, an
/// operand read across heads whose period the slice neither divides nor is a multiple of): returns
/// the grid and the dynamic shared bytes.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    w: &mut Writer, acc: &Acc, (a, b): (&Direct, &Direct), ptrs: &[String], (rows, cols, batch): (&[(Var, i64)], &[(Var, i64)], &[(Var, i64)]), (bm, bn, _): (i64, i64, i64), kind: Mma, (stages, smem): (i64, i64),
    halves: &mut Halves, globals: &mut Vec<String>,
) -> Result<Option<([u32; 3], u32)>, String> {
    let (m, n, nb): (i64, i64, i64) = (rows.iter().map(|d| d.1).product(), cols.iter().map(|d| d.1).product(), batch.iter().map(|d| d.1).product());
    let (kv, kext) = acc.ks[0];
    let fits = |tk: i64| kext % tk == 0 && [a.period, b.period].iter().flatten().all(|&e| e % tk == 0 || tk % e == 0);
    let long = fits(64) && std::env::var("RLX_CUDA_VEC_TK").map_or(true, |v| v != "32");
    let tk = if long { 64 } else { 32 };
    if !fits(tk) {
        return Ok(None);
    }
    let packed = !kind.tf32();
    let slot_of = |x: &Direct, own: i64, off: i64, halves: &mut Halves| {
        let copy = if packed && x.by8 { halves.of_param(x.buf) } else { None };
        let eb = if copy.is_some() { 2 } else { 4 };
        let (pitch, chunks) = (tk * eb / 4, tk * eb / 16);
        let split = packed && copy.is_none();
        let swz = if split { 1 } else if chunks >= 8 { 4 } else { 0 };
        Slot { rows: own, pitch, off, swz, split, copy }
    };
    let sa = slot_of(a, bm, 0, halves);
    let sb = slot_of(b, bn, bm * sa.pitch, halves);
    super::vec_tile::unstaged_half(a, sa.copy)?;
    super::vec_tile::unstaged_half(b, sb.copy)?;
    let stage_words = bm * sa.pitch + bn * sb.pitch;
    // As many of the stages asked for as the GPU's shared memory holds.
    let stages = stages.min(smem / (4 * stage_words));
    if stages < 2 {
        return Ok(None);
    }
    globals.push(format!("{DSM} = external addrspace(3) global [0 x i32], align 16"));
    declare(w);
    let (tid, m0, n0, kslot) = block_origin(w, (bm, bn), batch, kv);
    // The copies: chunk e = tid + 256·q of an operand's slice is row e / C, chunk e % C (C chunks a
    // row), its global pointer at K = that chunk's first value computed once (the slice's kpart added
    // per slice), its place word off + row·pitch + 4·(chunk ^ swizzle) of a stage.
    let mut copies = Vec::new();
    for (oi, (x, sl, base, dims)) in [(a, &sa, &m0, rows), (b, &sb, &n0, cols)].into_iter().enumerate() {
        let chunks = sl.pitch / 4;
        let per = 16 / if sl.copy.is_some() { 2 } else { 4 };
        let from = match sl.copy {
            Some((bind, off)) => w.emit_op(format!("getelementptr inbounds i8, ptr %g{bind}, i64 {off}")),
            None => ptrs[x.buf as usize].clone(),
        };
        let total = sl.rows * chunks;
        for q in 0..cdiv(total, 256) {
            let e = w.emit_op(format!("add nuw nsw i64 {tid}, {}", 256 * q));
            let r = w.emit_op(format!("udiv i64 {e}, {chunks}"));
            let j = w.emit_op(format!("urem i64 {e}, {chunks}"));
            let kq = w.emit_op(format!("mul nuw nsw i64 {j}, {per}"));
            let g = w.emit_op(format!("add nuw nsw i64 {base}, {r}"));
            unflatten(w, &g, dims);
            w.emit(&format!("store i64 {kq}, ptr {kslot}"));
            let idx = w.value(x.index);
            let ety = if sl.copy.is_some() { "i16" } else { "float" };
            let p = w.emit_op(format!("getelementptr inbounds {ety}, ptr {from}, i64 {idx}"));
            let odd = w.emit_op(format!("and i64 {r}, 1"));
            let x = w.emit_op(format!("mul nuw nsw i64 {odd}, {}", sl.swz));
            let jj = w.emit_op(format!("xor i64 {j}, {x}"));
            let rw = w.emit_op(format!("mul nuw nsw i64 {r}, {}", sl.pitch));
            let jw = w.emit_op(format!("shl nuw nsw i64 {jj}, 2"));
            let d = w.emit_op(format!("add nuw nsw i64 {rw}, {jw}"));
            let d = w.emit_op(format!("add nuw nsw i64 {d}, {}", sl.off));
            // The last round of a slice that is not a whole number of chunks per thread: guarded.
            let guard = (256 * (q + 1) > total).then(|| w.emit_op(format!("icmp ult i64 {e}, {total}")));
            copies.push((p, d, guard, ety, oi));
        }
    }
    // Slice k0's copies into stage `st` (an i64 value).
    let issue = |w: &mut Writer, k0: &str, st: &str| -> Result<(), String> {
        w.emit(&format!("store i64 {k0}, ptr {kslot}"));
        let offs = [w.value(&a.kpart), w.value(&b.kpart)];
        let sw = w.emit_op(format!("mul nuw nsw i64 {st}, {stage_words}"));
        for (p, d, guard, ety, oi) in &copies {
            let mut one = |w: &mut Writer| -> Result<(), String> {
                let src = w.emit_op(format!("getelementptr inbounds {ety}, ptr {p}, i64 {}", offs[*oi]));
                let src = w.emit_op(format!("addrspacecast ptr {src} to ptr addrspace(1)"));
                let at = w.emit_op(format!("add nuw nsw i64 {sw}, {d}"));
                let dst = w.emit_op(format!("getelementptr inbounds i32, ptr addrspace(3) {DSM}, i64 {at}"));
                copy16(w, &dst, &src);
                Ok(())
            };
            match guard {
                Some(c) => if_(w, c, &mut one)?,
                None => one(w)?,
            }
        }
        Ok(())
    };
    let wg = Warps::new(w, acc, &tid, (bm, bn), kind);
    let Warps { ref wr, ref wc, ref gq, ref tq, wm, wn, mf, nf, .. } = wg;
    // Each fragment row's two bases in a stage (words): word mode, for even / odd c (row·pitch + 4t
    // ± 16 on odd rows where swizzled); split, for steps u = 0 / 1 (row·pitch + 8t + 4·(u ^ odd)). A
    // fragment row's parity is g's (the other terms are multiples of 8).
    let odd = w.emit_op(format!("and i64 {gq}, 1"));
    let bases = |w: &mut Writer, sl: &Slot, row: String| -> (String, String) {
        let rw = w.emit_op(format!("mul nuw nsw i64 {row}, {}", sl.pitch));
        let rw = w.emit_op(format!("add nuw nsw i64 {rw}, {}", sl.off));
        if sl.split {
            let t8 = w.emit_op(format!("shl nuw nsw i64 {tq}, 3"));
            let r = w.emit_op(format!("add nuw nsw i64 {rw}, {t8}"));
            let o4 = w.emit_op(format!("shl nuw nsw i64 {odd}, 2"));
            let u0 = w.emit_op(format!("add nuw nsw i64 {r}, {o4}"));
            let r4 = w.emit_op(format!("add nuw nsw i64 {r}, 4"));
            let u1 = w.emit_op(format!("sub nuw nsw i64 {r4}, {o4}"));
            (u0, u1)
        } else {
            let t4 = w.emit_op(format!("shl nuw nsw i64 {tq}, 2"));
            let r = w.emit_op(format!("add nuw nsw i64 {rw}, {t4}"));
            if sl.swz == 4 {
                let o16 = w.emit_op(format!("shl nuw nsw i64 {odd}, 4"));
                (w.emit_op(format!("add nuw nsw i64 {r}, {o16}")), w.emit_op(format!("sub nuw nsw i64 {r}, {o16}")))
            } else {
                (r.clone(), r)
            }
        }
    };
    let arow: Vec<(String, String)> = (0..mf)
        .flat_map(|i| [0, 8].map(move |h| (i, h)))
        .map(|(i, h)| {
            let r = w.emit_op(format!("mul nuw nsw i64 {wr}, {wm}"));
            let r = w.emit_op(format!("add nuw nsw i64 {r}, {}", 16 * i + h));
            let r = w.emit_op(format!("add nuw nsw i64 {r}, {gq}"));
            bases(w, &sa, r)
        })
        .collect();
    let brow: Vec<(String, String)> = (0..nf)
        .map(|j| {
            let r = w.emit_op(format!("mul nuw nsw i64 {wc}, {wn}"));
            let r = w.emit_op(format!("add nuw nsw i64 {r}, {}", 8 * j));
            let r = w.emit_op(format!("add nuw nsw i64 {r}, {gq}"));
            bases(w, &sb, r)
        })
        .collect();
    // A 128-bit load of a stage (`sw` its first word) at base + off: four f32 values or four words.
    let quad = |w: &mut Writer, sw: &str, base: &str, off: i64, f32s: bool| -> Vec<String> {
        let at = w.emit_op(format!("add nuw nsw i64 {sw}, {base}"));
        let at = w.emit_op(format!("add nuw nsw i64 {at}, {off}"));
        let p = w.emit_op(format!("getelementptr inbounds i32, ptr addrspace(3) {DSM}, i64 {at}"));
        let ty = if f32s { "<4 x float>" } else { "<4 x i32>" };
        let v = w.emit_op(format!("load {ty}, ptr addrspace(3) {p}, align 16"));
        (0..4).map(|e| w.emit_op(format!("extractelement {ty} {v}, i64 {e}"))).collect()
    };
    // The registers lo, hi of k step 2c + u from a row's bases: word mode from chunk c (loaded once
    // for both steps: `cache`), split mode from its own chunk, packed.
    let regs = |w: &mut Writer, sl: &Slot, sw: &str, bs: &(String, String), c: i64, u: i64, cache: &mut Option<Vec<String>>| -> [String; 2] {
        if sl.split {
            let x = quad(w, sw, if u == 0 { &bs.0 } else { &bs.1 }, 32 * c, true);
            return [to_operand(w, kind, &x[0], Some(&x[1])), to_operand(w, kind, &x[2], Some(&x[3]))];
        }
        if cache.is_none() {
            *cache = Some(quad(w, sw, if c % 2 == 0 { &bs.0 } else { &bs.1 }, 16 * c, !packed));
        }
        let x = cache.as_ref().unwrap();
        let (lo, hi) = (&x[2 * u as usize], &x[2 * u as usize + 1]);
        if packed { [lo.clone(), hi.clone()] } else { [to_operand(w, kind, lo, None), to_operand(w, kind, hi, None)] }
    };
    let steps = if packed { tk / 16 } else { tk / 8 };
    let compute = |w: &mut Writer, st: &str| {
        let sw = w.emit_op(format!("mul nuw nsw i64 {st}, {stage_words}"));
        for c in 0..steps / 2 {
            let mut ac: Vec<Option<Vec<String>>> = vec![None; arow.len()];
            let mut bc: Vec<Option<Vec<String>>> = vec![None; brow.len()];
            for u in 0..2 {
                let bv: Vec<[String; 2]> = brow.iter().zip(&mut bc).map(|(bs, cache)| regs(w, &sb, &sw, bs, c, u, cache)).collect();
                let av: Vec<[String; 4]> = (0..mf as usize)
                    .map(|i| {
                        let [lo, hi] = regs(w, &sa, &sw, &arow[2 * i], c, u, &mut ac[2 * i]);
                        let [lo8, hi8] = regs(w, &sa, &sw, &arow[2 * i + 1], c, u, &mut ac[2 * i + 1]);
                        [lo, lo8, hi, hi8]
                    })
                    .collect();
                let issues: Vec<_> = (0..(mf * nf) as usize).map(|f| (f as i64, &av[f / nf as usize][..], &bv[f % nf as usize][..])).collect();
                mma_issue_all(w, kind, &issues);
            }
        }
    };
    // The prologue: slices 0 .. stages − 2 into stages 0 .. stages − 2, one group each (empty past K).
    for s in 0..stages - 1 {
        if s * tk < kext {
            issue(w, &(s * tk).to_string(), &s.to_string())?;
        }
        commit(w);
    }
    for_loop(w, "%s.k0", "0", &kext.to_string(), tk, &mut |w| {
        let k0 = w.emit_op("load i64, ptr %s.k0".into());
        let kt = w.emit_op(format!("udiv i64 {k0}, {tk}"));
        wait(w, stages - 2);
        barrier(w);
        let kn = w.emit_op(format!("add nuw nsw i64 {k0}, {}", (stages - 1) * tk));
        let more = w.emit_op(format!("icmp slt i64 {kn}, {kext}"));
        if_(w, &more, &mut |w| {
            let t = w.emit_op(format!("add nuw nsw i64 {kt}, {}", stages - 1));
            let st = w.emit_op(format!("urem i64 {t}, {stages}"));
            issue(w, &kn, &st)
        })?;
        commit(w);
        let st = w.emit_op(format!("urem i64 {kt}, {stages}"));
        compute(w, &st);
        Ok(())
    })?;
    wg.epilogue(w, acc, kind, (&m0, &n0), (m, n), (rows, cols), halves)?;
    Ok(Some((grid(m, n, nb, bm, bn)?, (4 * stages * stage_words) as u32)))
}
