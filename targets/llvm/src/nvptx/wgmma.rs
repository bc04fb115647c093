//! Hopper's warpgroup matrix multiply (`wgmma.mma_async`, sm_90a, PTX ISA 8.0) for `vec_tile.rs`'s
//! whole tiles under `--sm 90` and `--precision bf16`, `fp16`, `tf32` or `f32` (3×TF32), behind
//! `RLX_CUDA_WGMMA=N` at compile time, or by default under `--sm 90a` ([`on`]): 1 this file's form, 2 the
//! same with the next slice's stores overlapping the `wgmma`s (below; `--sm 90a`'s default for f32 and
//! for tiles with an operand in need of conversion), 3 the slices copied by a `cp.async` ring straight
//! into the stages where the operands need no conversion ([`ring`]; `--sm 90a`'s default for bf16's
//! and tf32's tiles whose operands are stored as the tensor cores read them). A module with such a
//! kernel is written for `.target sm_90a` with PTX 8.0 (`mod.rs`: LLVM 19's NVPTX knows both), which
//! runs on sm_90 GPUs only (the H100 / H200), where `--sm 90`'s plain sm_90 PTX is also compiled by
//! the driver for later GPUs: that, and a gain of 3–4% on MiniLM, is why `--sm 90` leaves it to the
//! switch and `--sm 90a` takes it (measured on the H200, docs/benchmarks.md session 23: bf16 MiniLM batch 8 / 32 670 → 653 /
//! 1,948 → 1,871 µs with 2; per kernel, tests/gpu/bench_gemm.py, FFN down −9…−16%, the others ±3%;
//! a cp.async ring of 3 / 4 stages feeding the same `wgmma`s measured 1.3–2.7× slower per kernel and
//! was not kept: git history f2e6157 — its f32 activations converted by the copying threads, and a
//! `wgmma.wait_group 0` each slice; [`ring`] is the form without either: on an H100, session 30, bf16
//! MiniLM batch 8 / 32 0.94 / 0.91× the time of form 2). Session 27 timed the tf32 and f32 forms
//! (docs/benchmarks.md); `--sm 90a` has taken them by default since.
//!
//! The block is `vec_tile.rs`'s (256 threads, the same block tile choice, [`vec_tile::tile`], or with
//! `RLX_CUDA_WGMMA_TILE=W` this file's [`tile`]): its 8 warps are two warpgroups, each one m64×nW
//! `wgmma` per k step — along M where the tile has 128 rows (each warpgroup 64 rows × all bn columns),
//! else along N (64 rows × bn / 2). Both operands come from shared memory through matrix descriptors,
//! K-major (both are contiguous along K), in the 128-byte swizzled layout: a staged row is 128 bytes —
//! a K slice of 64 16-bit values (k steps of 16: `m64nWk16`), or of 32 tf32 words (k steps of 8:
//! `m64nWk8`) —, its 16-byte chunk j stored at chunk j ^ (row % 8) (8-row atoms of 1,024 bytes, the
//! descriptor's stride byte offset; each slice's region 1,024-byte aligned, as the swizzle is applied on
//! address bits); a k step's 32 bytes are added to the descriptors' start address, as CUTLASS does
//! within a swizzle atom.
//!
//! Staging is `vec_tile.rs`'s register-staged form (it measured fastest for bf16 with `mma.sync`): per
//! slice each thread loads its chunks of the next slice (a weight's 16-bit copy: one 128-bit load per
//! chunk; f32 activations under bf16: two, packed by `cvt.rn` to bf16 pairs when stored; tf32: one,
//! each value rounded by `cvt.rna` when stored, unless it was stored rounded) while the tensor cores work on this one; the slices
//! alternate between two regions of the dynamic shared array, so one barrier per slice suffices.
//! Shared memory written by ordinary stores and read by `wgmma` (the async proxy) needs
//! `fence.proxy.async.shared::cta` in each writing thread before the barrier. Under `--precision f32`
//! (3×TF32, `Mma::Tf32x3`) a stage holds each operand twice — big = tf32(x), then small = tf32(x −
//! big), split once per value when stored — and each k step issues three tf32 `wgmma`s:
//! a_small·b_big and a_big·b_small into the small sums (`tiled::small_accumulators`, added after the K
//! loop by the epilogue), a_big·b_big into the fragments' own accumulators, as `tiled::mma_issue_all`
//! does with `mma.sync` (twice the shared memory and accumulators: MiniLM batch 32's FFN up, n128,
//! takes 254 registers, no spills).
//!
//! By default ([`register_a`]; `RLX_CUDA_X3_RS=0` at compile time: the form above) the 3×TF32 tiles take A from registers — `wgmma`'s
//! register-sourced form, as CUTLASS's mixed-input Hopper GEMMs convert A on its way to the tensor
//! cores: A's slice is staged once as the f32 it is, each thread reads its own fragment words from the
//! stage (`mma.sync`'s m16n8k8 layout, warp by warp: rows g and g + 8, k t and t + 4 of each k step;
//! conflict-free, the swizzle spreading the eight rows over all banks) and splits them in registers.
//! Per slice of a 128-row tile that removes A's small stores and the tensor cores' three reads of A
//! (176 → 128 KB of shared-memory traffic at n96; the stage keeps A's unused small half: one block
//! per SM either way); the products, and so the output bits, are the descriptor form's. On an H100
//! (session 34, raw tests/gpu/h100-cuda-s34a*): MiniLM resident 0.998 / 0.963 / 0.934× the time at
//! batch 1 / 8 / 32 — these tiles run one block of 8 warps per SM, latency-bound with shared memory
//! the busiest unit (Nsight Compute: 56–66%, L2 19–29%).
//!
//! Each slice's `wgmma`s (four, twelve under f32) are one inline-PTX block — `wgmma.fence`, the
//! `mma_async`s on the warpgroup's accumulators (`.f32`: per warp 16 rows, lane 4g + t's registers
//! 4j..4j + 3 at rows g, g + 8 and columns 8j + 2t, + 1 — `mma.sync`'s m16n8 fragments side by side, so
//! `vec_tile::Warps`'s epilogue applies), `commit_group`, `wait_group 0` — so no asynchronous state
//! crosses the block: the accumulators are ordinary registers between slices. With
//! `RLX_CUDA_WGMMA=2` the block ends at `commit_group` and a second block (`wait_group 0`, taking and
//! giving every accumulator) follows the next slice's conversion and stores into the other stage and
//! the loads of the slice after: the stores overlap the tensor cores (ptxas keeps the two blocks'
//! accumulators in place: no serialization warning). Two slices held in registers ahead of the one on
//! the tensor cores, not one (two register sets, the loop taking two slices a trip: each slice's loads
//! two iterations to land), were measured in session 33 and not kept: f32's 3×TF32 tiles, MiniLM
//! resident on an H100, 1.01 / 1.00 / 1.01× the time at batch 1 / 8 / 32 (raw tests/gpu/h100-cuda-s33b*,
//! the `_ahead2` twins) — these tiles do not wait on their loads' latency.
//!
//! Checked without a GPU by ptxas (`compiler/rlxc/tests/cuda.rs`) and in CPU emulation
//! (`tests/gpu/emulate_cuda.py` computes each `mma_async` per thread from the descriptors and the
//! swizzle the PTX ISA documents: `wgmma_tiles_match_the_interpreter_in_cpu_emulation`, every form and
//! precision, 64- and 128-row tiles, n32 … n128); on the GPU against the interpreter and f64 by
//! `tests/gpu/bench_gemm.py` and `bench_cuda.py`.

use super::half_weights::Halves;
use super::tiled::{barrier, for_loop, if_, tf32_small, to_operand, unflatten};
use super::vec_tile::{block_origin, grid, Direct, Warps};
use super::Mma;
use crate::ir::Writer;
use rlx_ir::loops::tiled::Acc;
use rlx_ir::loops::Var;

/// Whether tiles of `kind` on `sm_{sm}` take this form: `--sm 90a` (`specific`: Hopper's
/// arch-specific PTX) unless `RLX_CUDA_WGMMA=0`, or `RLX_CUDA_WGMMA=1|2` under `--sm 90`, at
/// `--precision bf16 | fp16 | tf32 | f32` (fp16's form is bf16's with `.f16` operands and
/// `cvt.rn.f16x2`: taken since session 37, when it was first checked on a GPU — MiniLM against the
/// interpreter and against its `mma.sync` twin, docs/benchmarks.md).
pub fn on(sm: u32, specific: bool, kind: Mma) -> bool {
    sm == 90 && matches!(kind, Mma::Bf16 | Mma::Fp16 | Mma::Tf32 | Mma::Tf32x3) && mode(specific).is_some()
}

/// `RLX_CUDA_WGMMA`: 0 off, 1, 2 (the next slice's stores overlapping the `wgmma`s) or 3 (the
/// cp.async ring, [`ring`], where it applies, else 2); unset: 2 under `--sm 90a`, off otherwise.
fn mode(specific: bool) -> Option<i64> {
    match std::env::var("RLX_CUDA_WGMMA").ok().and_then(|v| v.parse::<i64>().ok()) {
        Some(v) if (1..=3).contains(&v) => Some(v),
        Some(_) => None,
        None => specific.then_some(2),
    }
}

/// The next slice's stores overlap this one's `wgmma`s ([`matmul`], which runs only where [`on`]):
/// the form 2, unless `RLX_CUDA_WGMMA=1`.
fn overlapped() -> bool {
    mode(true).is_some_and(|m| m >= 2)
}

/// Whether 3×TF32 tiles take A from registers ([`matmul`]'s register-sourced form; unless
/// `RLX_CUDA_X3_RS=0` at compile time): A's slice is staged once, as the f32 it is, and each thread reads its own fragment
/// words from the stage and splits them in registers, so A's small parts never pass through shared
/// memory and the tensor cores read A's stage not at all (B, big and small, as before).
fn register_a(kind: Mma) -> bool {
    kind == Mma::Tf32x3 && std::env::var("RLX_CUDA_X3_RS").map_or(true, |v| v != "0")
}

/// The stages of the cp.async ring (`RLX_CUDA_WGMMA=3`; `RLX_CUDA_WGMMA_STAGES=S`, 3 … 6; by default 5
/// for bf16 / fp16, 6 for tf32, whose 128-byte rows hold half as many K values, so a stage covers half the
/// K: on an H100, session 31, MiniLM batch 8 / 32 resident, 5 stages took tf32 0.93 / 0.95×, bf16
/// 0.98 / 0.97× 4 stages' time, and 6 tf32 0.98 / 0.99×, bf16 1.00 / 1.00× 5 stages'),
/// or `None`: the register-staged forms. The ring takes tiles whose operands are all 16-bit in
/// memory (the weights' copies, `half_weights.rs`; activations stored as bf16 / fp16,
/// `half_activations.rs`), and `--precision tf32`'s (f32 in memory), which it copies unchanged — 16
/// bytes a `cp.async`, straight into the swizzled stage the descriptors read, no register in
/// between. So tf32's operands reach the tensor cores as they are in memory, and the tensor cores read
/// the top 19 bits of each word: the register-staged form's rounding (`cvt.rna`) where the values were
/// stored rounded (`half_activations.rs`, the default), else truncation (as cuBLAS's TMA-fed kernels
/// feed them; not the same bits, within tf32's tolerance). Iteration s: wait for this thread's
/// copies of slice s (`cp.async.wait_group S − 3`), `fence.proxy.async` (the copies are generic-proxy
/// writes that the tensor cores read), one barrier — after which every thread's copies of slice s
/// have landed and both warpgroups' `wgmma`s of slice s − 2 are done —, the copies of slice s + S − 2
/// into slice s − 2's stage, one commit group, slice s's `wgmma`s, then `wgmma.wait_group 1`: slice s
/// − 1's done, s's left running while the next iteration waits and copies. So S − 2 slices are in
/// flight from memory and two on the tensor cores.
///
/// By default (`RLX_CUDA_WGMMA` unset, `--sm 90a`) bf16's and fp16's tiles take the ring — the same output bits
/// as the register-staged form; on an H100, MiniLM seq 128 bf16 batch 8 / 32 resident 0.94 / 0.91×
/// the time (docs/benchmarks.md, session 30) — and so do tf32's whose operands are all stored
/// tf32-rounded (`half_activations.rs`: the activations by the kernels that write them, the weights
/// in the blob), the same bits as the register-staged form's rounding. A tf32 tile with an operand
/// not so stored keeps the register-staged form, which rounds it (the ring's truncation: 4.7× the
/// error against the interpreter at MiniLM batch 8, where it ran 0.80× the time; rounding each
/// thread's landed chunks in place — between the wait and the barrier, or slice s + 1's while slice
/// s's `wgmma`s ran — gave form 2's bits and its time too, 0.98–1.02× at batch 8 / 32: the speed is
/// in not converting at all); `RLX_CUDA_WGMMA=3`: every bf16 / tf32 tile, truncating tf32's unrounded
/// operands; 1 / 2: none. The flag: whether the ring was forced so.
fn ring(kind: Mma) -> Option<(i64, bool)> {
    let forced = match std::env::var("RLX_CUDA_WGMMA").ok().and_then(|v| v.parse::<i64>().ok()) {
        Some(3) => true,
        None => false,
        _ => return None,
    };
    let stages = std::env::var("RLX_CUDA_WGMMA_STAGES").ok().and_then(|v| v.parse::<i64>().ok()).filter(|s| (3..=6).contains(s)).unwrap_or(if kind == Mma::Tf32 { 6 } else { 5 });
    (forced || matches!(kind, Mma::Bf16 | Mma::Fp16 | Mma::Tf32)).then_some((stages, forced))
}

/// The block tile for these kernels from [`vec_tile::tile`]'s pick `(bm, bn)` of an M×N matmul (`nb`
/// of them, over K): with `RLX_CUDA_WGMMA_TILE=W` at compile time (W ≥ 1 waves; unset or 0: the pick as it
/// is), 128×64 where the pick has 128 rows and is wider and 128×64 tiles give at least W waves of
/// blocks on an H200's 132 SMs (session 23's forced tiles, bf16 N = 1: MiniLM batch 32's FFN up,
/// 4096 × 1536, 48.9 → 43.7 µs and its merged Q/K/V 42.0 → 38.7 as 768 / 576 blocks of 128×64;
/// batch 32's N = 384 matmuls, 192 blocks, and batch 8's slower).
///
/// With `RLX_CUDA_WGMMA_WIDE=B` at compile time (B ≥ 1; unset or 0: off), bf16 tiles of 128 rows are
/// 128 × 192 — else 128 × 256 — wide where N is a multiple and the grid keeps at least B blocks: each
/// row block of A is then read by half as many blocks (MiniLM batch 32's FFN up, 4096 × 1536: 256
/// blocks of 128 × 192 instead of 512 of 128 × 96; cuBLAS's Hopper tiles are this wide). Each warp
/// then holds 16 × 192 or 16 × 256 accumulators (96 / 128 registers; MiniLM's FFN up + GELU 174 in
/// all): not under tf32, whose staged f32 chunks take twice the registers (MiniLM batch 32 spilled in
/// 12 kernels), nor f32's 3×TF32, which doubles the accumulators. Checked by ptxas and in CPU
/// emulation, not yet timed on a GPU.
pub fn tile(m: i64, n: i64, nb: i64, k: i64, (bm, bn): (i64, i64), kind: Mma) -> (i64, i64) {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
    let (waves, wide) = (env("RLX_CUDA_WGMMA_TILE"), env("RLX_CUDA_WGMMA_WIDE"));
    // (Whole slices of K, so that `matmul` takes the tile: vec_tile.rs's forms have no wide tiles.)
    if wide >= 1 && !kind.tf32() && bm == 128 && m % 128 == 0 && k % slice(kind).0 == 0 {
        if let Some(w) = [192, 256].into_iter().find(|&w| n % w == 0 && (m / 128) * (n / w) * nb >= wide) {
            return (128, w);
        }
    }
    let blocks = (m / 128) * (n / 64) * nb;
    if waves >= 1 && bm == 128 && bn > 64 && m % 128 == 0 && n % 64 == 0 && blocks >= waves * 132 {
        (128, 64)
    } else {
        (bm, bn)
    }
}

/// Whether a module's LLVM IR uses `wgmma` (then it is written for sm_90a, PTX 8.0).
pub fn used(ir: &str) -> bool {
    ir.contains("wgmma.mma_async")
}

/// The dynamic shared array of these kernels (aligned at run time to 1,024 bytes inside it).
const DSW: &str = "@dsw";
/// Bytes of a staged row: one 128-byte swizzled row.
const ROW: i64 = 128;

/// The K slice (one staged row) and the K values of a 16-byte chunk: 64 and 8 of 16-bit values,
/// 32 and 4 of tf32 words.
fn slice(kind: Mma) -> (i64, i64) {
    if kind.tf32() { (32, 4) } else { (64, 8) }
}

/// One staged 16-byte chunk of an operand's slice: its global pointer at the slice's start, its
/// register slot(s), its byte offset in a stage, whether it is a 16-bit copy's or tf32-rounded, and its
/// operand.
struct Chunk {
    ptr: String,
    regs: [String; 2],
    at: i64,
    half: bool,
    /// tf32 words already rounded in memory (`Halves::tf32`).
    ready: bool,
    oi: usize,
    row_dep: String,
}

/// The matmul body, or `None` where the form does not apply (K not a multiple of the slice, an operand read
/// across heads whose period does not fit the slice, a tile whose rows are not whole chunks per
/// thread or whose warpgroup width `wgmma` has no shape for): the grid and the dynamic shared bytes.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    w: &mut Writer, acc: &Acc, (a, b): (&Direct, &Direct), ptrs: &[String], (rows, cols, batch): (&[(Var, i64)], &[(Var, i64)], &[(Var, i64)]), (bm, bn): (i64, i64), kind: Mma, smem: i64,
    halves: &mut Halves, globals: &mut Vec<String>,
) -> Result<Option<([u32; 3], u32)>, String> {
    let (m, n, nb): (i64, i64, i64) = (rows.iter().map(|d| d.1).product(), cols.iter().map(|d| d.1).product(), batch.iter().map(|d| d.1).product());
    let (kv, kext) = acc.ks[0];
    let (tk, per) = slice(kind);
    let periods = [a.period, b.period].into_iter().flatten().all(|e| e % tk == 0 || (tk % e == 0 && e % per == 0));
    let (wgm, wgn) = match bm {
        128 => (2, 1),
        64 => (1, 2),
        _ => return Ok(None),
    };
    let wn = bn / wgn;
    // 3×TF32 (`--precision f32`): each operand's big parts, then its small parts, a stage apiece.
    let x3 = kind == Mma::Tf32x3;
    let rs = register_a(kind);
    let small_at = (bm + bn) * ROW;
    let stage = small_at * (1 + x3 as i64);
    // The ring's stages where it may apply (operands stored as the tensor cores read them, known once
    // the chunks are), else two.
    let ring = ring(kind).filter(|&(s, _)| kind != Mma::Tf32x3 && s * stage + 1024 <= smem);
    let bytes = 2 * stage + 1024;
    if kext % tk != 0 || !periods || (bm * 8) % 256 != 0 || (bn * 8) % 256 != 0 || wn % 8 != 0 || wn > 256 || bytes > smem {
        return Ok(None);
    }
    // The instruction: m64nWk16 for 16-bit operands (scale-a, scale-b, then both operands K-major:
    // no transpose), m64nWk8 for tf32 (which has no transpose operands); 32 bytes of a row either way.
    let (ab, ks, tail) = match kind {
        Mma::Bf16 => ("bf16", 16, "1, 1, 0, 0"),
        Mma::Fp16 => ("f16", 16, "1, 1, 0, 0"),
        Mma::Tf32 | Mma::Tf32x3 => ("tf32", 8, "1, 1"),
        _ => return Ok(None),
    };
    let tf32 = kind.tf32();
    globals.push(format!("{DSW} = external addrspace(3) global [0 x i8], align 1024"));
    let (tid, m0, n0, kslot) = block_origin(w, (bm, bn), batch, kv);
    // The aligned start of the two stages: as a shared address (descriptors) and as bytes past @dsw.
    let base = w.emit_op(format!("ptrtoint ptr addrspace(3) {DSW} to i64"));
    let al = w.emit_op(format!("add nuw nsw i64 {base}, 1023"));
    let al = w.emit_op(format!("and i64 {al}, -1024"));
    let pad = w.emit_op(format!("sub nuw nsw i64 {al}, {base}"));
    // Chunk e = tid + 256·q of an operand's slice: row e / 8, chunk e % 8 (K values 8·(e % 8) .. + 7),
    // stored at row·128 + 16·(chunk ^ row % 8) after the operand's earlier rows.
    let mut chunks = Vec::new();
    for (oi, (x, own, off, from_rows, dims)) in [(a, bm, 0, &m0, rows), (b, bn, bm * ROW, &n0, cols)].into_iter().enumerate() {
        let copy = if x.by8 && !tf32 { halves.of_param(x.buf) } else { None };
        // tf32 values stored rounded (`half_activations.rs`): staged as they are.
        let ready = kind == Mma::Tf32 && halves.tf32.contains(&x.buf);
        super::vec_tile::unstaged_half(x, copy)?;
        let from = match copy {
            Some((bind, o)) => w.emit_op(format!("getelementptr inbounds i8, ptr %g{bind}, i64 {o}")),
            None => ptrs[x.buf as usize].clone(),
        };
        for q in 0..own * 8 / 256 {
            let e = w.emit_op(format!("add nuw nsw i64 {tid}, {}", 256 * q));
            let r = w.emit_op(format!("lshr i64 {e}, 3"));
            let j = w.emit_op(format!("and i64 {e}, 7"));
            let kq = w.emit_op(format!("mul nuw nsw i64 {j}, {per}"));
            let g = w.emit_op(format!("add nuw nsw i64 {from_rows}, {r}"));
            unflatten(w, &g, dims);
            w.emit(&format!("store i64 {kq}, ptr {kslot}"));
            let idx = w.value(x.index);
            let ety = if copy.is_some() { "i16" } else { "float" };
            let ptr = w.emit_op(format!("getelementptr inbounds {ety}, ptr {from}, i64 {idx}"));
            let r7 = w.emit_op(format!("and i64 {r}, 7"));
            let sj = w.emit_op(format!("xor i64 {j}, {r7}"));
            let sj = w.emit_op(format!("shl nuw nsw i64 {sj}, 4"));
            let rb = w.emit_op(format!("shl nuw nsw i64 {r}, 7"));
            let d = w.emit_op(format!("add nuw nsw i64 {rb}, {sj}"));
            let d = w.emit_op(format!("add nuw nsw i64 {d}, {pad}"));
            let regs = [format!("%s.wx{oi}.{q}.0"), format!("%s.wx{oi}.{q}.1")];
            let vty = if copy.is_some() { "<4 x i32>" } else { "<4 x float>" };
            for r in &regs {
                w.slot(r, vty);
            }
            chunks.push(Chunk { ptr, regs, at: off, half: copy.is_some(), ready, oi, row_dep: d });
        }
    }
    // Slice k0's chunks into their registers: each at its pointer moved by its operand's kpart(k0).
    let load_slice = |w: &mut Writer, k0: &str| {
        w.emit(&format!("store i64 {k0}, ptr {kslot}"));
        let offs = [w.value(&a.kpart), w.value(&b.kpart)];
        for c in &chunks {
            let (ety, vty) = if c.half { ("i16", "<4 x i32>") } else { ("float", "<4 x float>") };
            let p = w.emit_op(format!("getelementptr inbounds {ety}, ptr {}, i64 {}", c.ptr, offs[c.oi]));
            let v = w.emit_op(format!("load {vty}, ptr {p}, align 16"));
            w.emit(&format!("store {vty} {v}, ptr {}", c.regs[0]));
            if !c.half && !tf32 {
                let p4 = w.emit_op(format!("getelementptr inbounds float, ptr {p}, i64 4"));
                let v = w.emit_op(format!("load <4 x float>, ptr {p4}, align 16"));
                w.emit(&format!("store <4 x float> {v}, ptr {}", c.regs[1]));
            }
        }
    };
    // The registers → stage `st` (an i64 value): 16 bytes a chunk, f32 pairs packed.
    let store_slice = |w: &mut Writer, st: &str| {
        let sb = w.emit_op(format!("mul nuw nsw i64 {st}, {stage}"));
        for c in &chunks {
            let v = if c.half {
                w.emit_op(format!("load <4 x i32>, ptr {}", c.regs[0]))
            } else if c.ready {
                let v = w.emit_op(format!("load <4 x float>, ptr {}", c.regs[0]));
                w.emit_op(format!("bitcast <4 x float> {v} to <4 x i32>"))
            } else if rs && c.oi == 0 {
                // (Register-sourced A: its f32 bits as they are; each thread splits its own fragment.)
                let v = w.emit_op(format!("load <4 x float>, ptr {}", c.regs[0]));
                w.emit_op(format!("bitcast <4 x float> {v} to <4 x i32>"))
            } else if tf32 {
                // Four f32 values, each rounded to tf32 (`cvt.rna`, as the mma.sync tiles stage them);
                // 3×TF32: big = tf32(x) here and small = tf32(x − big) (exact in f32) into the stage's
                // second half, as `tiled::mma_issue_all` splits a fragment register.
                let v = w.emit_op(format!("load <4 x float>, ptr {}", c.regs[0]));
                let (mut vv, mut sv) = ("poison".to_string(), "poison".to_string());
                for i in 0..4 {
                    let x = w.emit_op(format!("extractelement <4 x float> {v}, i64 {i}"));
                    let word = to_operand(w, Mma::Tf32, &x, None);
                    vv = w.emit_op(format!("insertelement <4 x i32> {vv}, i32 {word}, i64 {i}"));
                    if x3 {
                        let small = tf32_small(w, &x, &word);
                        sv = w.emit_op(format!("insertelement <4 x i32> {sv}, i32 {small}, i64 {i}"));
                    }
                }
                if x3 {
                    let o = w.emit_op(format!("add nuw nsw i64 {sb}, {}", c.row_dep));
                    let o = w.emit_op(format!("add nuw nsw i64 {o}, {}", c.at + small_at));
                    let p = w.emit_op(format!("getelementptr inbounds i8, ptr addrspace(3) {DSW}, i64 {o}"));
                    w.emit(&format!("store <4 x i32> {sv}, ptr addrspace(3) {p}, align 16"));
                }
                vv
            } else {
                let mut x = Vec::new();
                for r in &c.regs {
                    let v = w.emit_op(format!("load <4 x float>, ptr {r}"));
                    x.extend((0..4).map(|i| w.emit_op(format!("extractelement <4 x float> {v}, i64 {i}"))));
                }
                let mut vv = "poison".to_string();
                for i in 0..4 {
                    let word = to_operand(w, kind, &x[2 * i], Some(&x[2 * i + 1]));
                    vv = w.emit_op(format!("insertelement <4 x i32> {vv}, i32 {word}, i64 {i}"));
                }
                vv
            };
            let o = w.emit_op(format!("add nuw nsw i64 {sb}, {}", c.row_dep));
            let o = w.emit_op(format!("add nuw nsw i64 {o}, {}", c.at));
            let p = w.emit_op(format!("getelementptr inbounds i8, ptr addrspace(3) {DSW}, i64 {o}"));
            w.emit(&format!("store <4 x i32> {v}, ptr addrspace(3) {p}, align 16"));
        }
    };
    // Warps and accumulators: warp wp's 16 rows are (wp % (bm / 16))·16, its columns (wp / (bm / 16))·wn.
    let wg = Warps::grouped(w, acc, &tid, (bm, bn), kind);
    // The warpgroup's first A row (its 64) and first B row (its wn columns): warp wp's group is wp / 4.
    let wp = w.emit_op(format!("lshr i64 {tid}, 5"));
    let grp = w.emit_op(format!("lshr i64 {wp}, 2"));
    let (arow, brow) = if wgm == 2 { (w.emit_op(format!("shl nuw nsw i64 {grp}, 6")), "0".to_string()) } else { ("0".to_string(), w.emit_op(format!("mul nuw nsw i64 {grp}, {wn}"))) };
    // A descriptor: the start address / 16 (bits 0–13), leading byte offset 16 / 16 (unused for
    // swizzled K-major operands), stride byte offset 1024 / 16 (bits 32–45: 8-row atoms), 128-byte
    // swizzle (bits 62–63 = 1).
    let fixed: u64 = (1 << 16) | (64 << 32) | (1 << 62);
    let desc = |w: &mut Writer, addr: &str| -> String {
        let a = w.emit_op(format!("and i64 {addr}, 262143"));
        let a = w.emit_op(format!("lshr i64 {a}, 4"));
        w.emit_op(format!("or i64 {a}, {}", fixed as i64))
    };
    // The block's operands: the accumulators (3×TF32: the fragments' own, then the small sums'
    // `%e`, `tiled::small_accumulators`), per k step the descriptors (A, B; 3×TF32: A, B, A small,
    // B small; register-sourced A: B, B small), register-sourced A's words (per k step big a0–a3,
    // then small a0–a3), the scale-d flag, the accumulators again (tied).
    let frags = 4 * (wn / 8);
    let sets = 1 + x3 as i64;
    let accs = frags * sets;
    let regs: Vec<String> = ["d", "e"][..sets as usize].iter().flat_map(|e| (0..wn / 8).flat_map(move |j| (0..4).map(move |q| format!("%{e}{j}.{q}")))).collect();
    let per_step = if rs { 2 } else { 2 * sets };
    let words = if rs { 32 } else { 0 };
    let fmt_list = |from: i64, n: i64| (from..from + n).map(|i| format!("${i}")).collect::<Vec<_>>().join(",");
    let mut text = format!("{{ .reg .pred p; setp.ne.b32 p, ${}, 0; wgmma.fence.sync.aligned; ", accs + 4 * per_step + words);
    let mut issue = |set: i64, a: String, db: i64| text += &format!("wgmma.mma_async.sync.aligned.m64n{wn}k{ks}.f32.{ab}.{ab} {{{}}}, {a}, ${db}, p, {tail}; ", fmt_list(set * frags, frags));
    for s in 0..4 {
        let d0 = accs + per_step * s;
        if rs {
            // A's words: big at a0, small at a0 + 4.
            let a0 = accs + 4 * per_step + 8 * s;
            issue(1, format!("{{{}}}", fmt_list(a0 + 4, 4)), d0);
            issue(1, format!("{{{}}}", fmt_list(a0, 4)), d0 + 1);
            issue(0, format!("{{{}}}", fmt_list(a0, 4)), d0);
            continue;
        }
        // 3×TF32 per k step: a_small·b_big and a_big·b_small into the small sums, then a_big·b_big.
        if x3 {
            issue(1, format!("${}", d0 + 2), d0 + 1);
            issue(1, format!("${d0}"), d0 + 3);
        }
        issue(0, format!("${d0}"), d0 + 1);
    }
    let overlap = overlapped();
    text += if overlap { "wgmma.commit_group.sync.aligned; }" } else { "wgmma.commit_group.sync.aligned; wgmma.wait_group.sync.aligned 0; }" };
    let cons: Vec<String> = (0..accs).map(|_| "=f".to_string()).chain((0..4 * per_step).map(|_| "l".to_string())).chain((0..words + 1).map(|_| "r".to_string())).chain((0..accs).map(|i| i.to_string())).collect();
    let sty = format!("{{ {} }}", vec!["float"; accs as usize].join(", "));
    // Register-sourced A: this thread's fragment rows in a stage (row g and g + 8 of its warp's 16 in
    // the warpgroup's 64; `wgmma`'s m64k8 A layout, as `mma.sync`'s m16n8k8: word q of lane 4g + t at
    // row g + 8·(q % 2), k t + 4·(q / 2)), as bytes past the aligned start less the swizzle: K chunk c
    // of row r lies at 16·(c ^ r % 8), and r % 8 = g.
    let a_at = rs.then(|| {
        let wq = w.emit_op(format!("and i64 {wp}, 3"));
        let r = w.emit_op(format!("shl nuw nsw i64 {wq}, 4"));
        let r = w.emit_op(format!("add nuw nsw i64 {r}, {}", wg.gq));
        let r = w.emit_op(format!("add nuw nsw i64 {r}, {arow}"));
        let o = w.emit_op(format!("shl nuw nsw i64 {r}, 7"));
        let t4 = w.emit_op(format!("shl nuw nsw i64 {}, 2", wg.tq));
        let o = w.emit_op(format!("add nuw nsw i64 {o}, {t4}"));
        w.emit_op(format!("add nuw nsw i64 {o}, {pad}"))
    });
    let compute = |w: &mut Writer, st: &str| {
        let sb = w.emit_op(format!("mul nuw nsw i64 {st}, {stage}"));
        let s0 = w.emit_op(format!("add nuw nsw i64 {al}, {sb}"));
        // The operands the tensor cores read from the stage (A, B; register-sourced A: B), their
        // descriptors, then under 3×TF32 their small halves'.
        let mut staged = Vec::new();
        if !rs {
            let aa = w.emit_op(format!("shl nuw nsw i64 {arow}, 7"));
            staged.push(w.emit_op(format!("add nuw nsw i64 {s0}, {aa}")));
        }
        let ba = w.emit_op(format!("shl nuw nsw i64 {brow}, 7"));
        let ba = w.emit_op(format!("add nuw nsw i64 {s0}, {ba}"));
        staged.push(w.emit_op(format!("add nuw nsw i64 {ba}, {}", bm * ROW)));
        let mut bases: Vec<String> = staged.iter().map(|x| desc(w, x)).collect();
        if x3 {
            for x in &staged {
                let sx = w.emit_op(format!("add nuw nsw i64 {x}, {small_at}"));
                bases.push(desc(w, &sx));
            }
        }
        // k step s: 32 bytes further along each row, 2 in the descriptors' start field.
        let mut args = Vec::new();
        for s in 0..4 {
            for d in &bases {
                let x = if s == 0 { d.clone() } else { w.emit_op(format!("add nuw nsw i64 {d}, {}", 2 * s)) };
                args.push(format!("i64 {x}"));
            }
        }
        if let Some(at) = &a_at {
            // Per k step s: chunks 2s (k t) and 2s + 1 (k t + 4) of rows g and g + 8, each word split
            // into big = tf32(x) and small = tf32(x − big).
            let at = w.emit_op(format!("add nuw nsw i64 {at}, {sb}"));
            for s in 0..4 {
                let mut big = Vec::new();
                let mut small = Vec::new();
                for q in 0..4 {
                    let c = w.emit_op(format!("xor i64 {}, {}", wg.gq, 2 * s + q / 2));
                    let c = w.emit_op(format!("shl nuw nsw i64 {c}, 4"));
                    let o = w.emit_op(format!("add nuw nsw i64 {at}, {c}"));
                    let o = w.emit_op(format!("add nuw nsw i64 {o}, {}", 1024 * (q % 2)));
                    let p = w.emit_op(format!("getelementptr inbounds i8, ptr addrspace(3) {DSW}, i64 {o}"));
                    let x = w.emit_op(format!("load float, ptr addrspace(3) {p}, align 4"));
                    let b = to_operand(w, Mma::Tf32, &x, None);
                    small.push(tf32_small(w, &x, &b));
                    big.push(b);
                }
                args.extend(big.into_iter().chain(small).map(|v| format!("i32 {v}")));
            }
        }
        args.push("i32 1".into());
        for r in &regs {
            let v = w.emit_op(format!("load float, ptr {r}"));
            args.push(format!("float {v}"));
        }
        let res = w.emit_op(format!("call {sty} asm sideeffect \"{text}\", \"{},~{{memory}}\"({}) #1", cons.join(","), args.join(", ")));
        for (i, r) in regs.iter().enumerate() {
            let v = w.emit_op(format!("extractvalue {sty} {res}, {i}"));
            w.emit(&format!("store float {v}, ptr {r}"));
        }
    };
    // Overlapped: the wait on the accumulators, as one block that takes and gives them all.
    let wait = |w: &mut Writer, pending: i64| {
        let ins: Vec<String> = regs.iter().map(|r| format!("float {}", w.emit_op(format!("load float, ptr {r}")))).collect();
        let cons: Vec<String> = (0..accs).map(|_| "=f".to_string()).chain((0..accs).map(|i| i.to_string())).collect();
        let res = w.emit_op(format!("call {sty} asm sideeffect \"wgmma.wait_group.sync.aligned {pending};\", \"{},~{{memory}}\"({}) #1", cons.join(","), ins.join(", ")));
        for (i, r) in regs.iter().enumerate() {
            let v = w.emit_op(format!("extractvalue {sty} {res}, {i}"));
            w.emit(&format!("store float {v}, ptr {r}"));
        }
    };
    let fence = |w: &mut Writer| w.emit("call void asm sideeffect \"fence.proxy.async.shared::cta;\", \"~{memory}\"() #1");
    if let Some((stages, _)) = ring.filter(|&(_, forced)| chunks.iter().all(|c| c.half || c.ready || (forced && kind == Mma::Tf32))) {
        // ([`ring`].) Slice k0's copies into stage `st` (an i64 value).
        super::cp_async::declare(w);
        let copy_slice = |w: &mut Writer, k0: &str, st: &str| {
            w.emit(&format!("store i64 {k0}, ptr {kslot}"));
            let offs = [w.value(&a.kpart), w.value(&b.kpart)];
            let sb = w.emit_op(format!("mul nuw nsw i64 {st}, {stage}"));
            for c in &chunks {
                let ety = if c.half { "i16" } else { "float" };
                let p = w.emit_op(format!("getelementptr inbounds {ety}, ptr {}, i64 {}", c.ptr, offs[c.oi]));
                let src = w.emit_op(format!("addrspacecast ptr {p} to ptr addrspace(1)"));
                let o = w.emit_op(format!("add nuw nsw i64 {sb}, {}", c.row_dep));
                let o = w.emit_op(format!("add nuw nsw i64 {o}, {}", c.at));
                let dst = w.emit_op(format!("getelementptr inbounds i8, ptr addrspace(3) {DSW}, i64 {o}"));
                super::cp_async::copy16(w, &dst, &src);
            }
        };
        use super::cp_async::commit;
        let ahead = stages - 2;
        // The prologue: slices 0 .. S − 3 into stages 0 .. S − 3, one group each (empty past K).
        for s in 0..ahead {
            if s * tk < kext {
                copy_slice(w, &(s * tk).to_string(), &s.to_string());
            }
            commit(w);
        }
        for_loop(w, "%s.k0", "0", &kext.to_string(), tk, &mut |w| {
            let k0 = w.emit_op("load i64, ptr %s.k0".into());
            let kt = w.emit_op(format!("udiv i64 {k0}, {tk}"));
            super::cp_async::wait(w, ahead - 1);
            fence(w);
            barrier(w);
            let kn = w.emit_op(format!("add nuw nsw i64 {k0}, {}", ahead * tk));
            let more = w.emit_op(format!("icmp slt i64 {kn}, {kext}"));
            if_(w, &more, &mut |w| {
                let t = w.emit_op(format!("add nuw nsw i64 {kt}, {ahead}"));
                let st = w.emit_op(format!("urem i64 {t}, {stages}"));
                copy_slice(w, &kn, &st);
                Ok(())
            })?;
            commit(w);
            let st = w.emit_op(format!("urem i64 {kt}, {stages}"));
            compute(w, &st);
            wait(w, 1);
            Ok(())
        })?;
        wait(w, 0);
        wg.epilogue(w, acc, kind, (&m0, &n0), (m, n), (rows, cols), halves)?;
        return Ok(Some((grid(m, n, nb, bm, bn)?, (stages * stage + 1024) as u32)));
    }
    if overlap {
        // Slice s in stage s % 2 before iteration s's barrier; iteration s issues its wgmmas, stores slice
        // s + 1 (in registers since iteration s − 1) into the other stage — whose wgmmas, slice s − 1's,
        // were waited for —, loads slice s + 2 into the registers, waits for its wgmmas, then the barrier.
        load_slice(w, "0");
        store_slice(w, "0");
        fence(w);
        if kext > tk {
            load_slice(w, &tk.to_string());
        }
        barrier(w);
        for_loop(w, "%s.k0", "0", &kext.to_string(), tk, &mut |w| {
            let k0 = w.emit_op("load i64, ptr %s.k0".into());
            let kt = w.emit_op(format!("udiv i64 {k0}, {tk}"));
            let st = w.emit_op(format!("and i64 {kt}, 1"));
            compute(w, &st);
            let k1 = w.emit_op(format!("add nuw nsw i64 {k0}, {tk}"));
            let more = w.emit_op(format!("icmp slt i64 {k1}, {kext}"));
            if_(w, &more, &mut |w| {
                let nx = w.emit_op(format!("xor i64 {st}, 1"));
                store_slice(w, &nx);
                fence(w);
                let k2 = w.emit_op(format!("add nuw nsw i64 {k1}, {tk}"));
                let more2 = w.emit_op(format!("icmp slt i64 {k2}, {kext}"));
                if_(w, &more2, &mut |w| {
                    load_slice(w, &k2);
                    Ok(())
                })
            })?;
            wait(w, 0);
            barrier(w);
            Ok(())
        })?;
        wg.epilogue(w, acc, kind, (&m0, &n0), (m, n), (rows, cols), halves)?;
        return Ok(Some((grid(m, n, nb, bm, bn)?, bytes as u32)));
    }
    load_slice(w, "0");
    for_loop(w, "%s.k0", "0", &kext.to_string(), tk, &mut |w| {
        let k0 = w.emit_op("load i64, ptr %s.k0".into());
        let kt = w.emit_op(format!("udiv i64 {k0}, {tk}"));
        let st = w.emit_op(format!("and i64 {kt}, 1"));
        store_slice(w, &st);
        fence(w);
        barrier(w);
        let k1 = w.emit_op(format!("add nuw nsw i64 {k0}, {tk}"));
        let more = w.emit_op(format!("icmp slt i64 {k1}, {kext}"));
        if_(w, &more, &mut |w| {
            load_slice(w, &k1);
            Ok(())
        })?;
        compute(w, &st);
        Ok(())
    })?;
    wg.epilogue(w, acc, kind, (&m0, &n0), (m, n), (rows, cols), halves)?;
    Ok(Some((grid(m, n, nb, bm, bn)?, bytes as u32)))
}
