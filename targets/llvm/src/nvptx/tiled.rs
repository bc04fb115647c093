//! Cooperative kernels: the PTX of the plans `rlx_ir::loops::tiled::recognize` finds in a kernel's
//! loop form (the recognizer the shader writer uses too). Matmuls run [`BLOCK`] threads per block,
//! row kernels 32 per row; anything not recognized keeps the one-thread-per-output path.
//!
//! - **Tiled matmul** ([`Plan::Matmul`]): a block of 16×16 threads computes a (16·R)×(16·R) tile of
//!   the output, R×R outputs per thread held in registers (R = 4, 2 or 1, the recognizer's choice:
//!   the largest that still gives enough blocks to fill the GPU). Per step of 16 along K it stages
//!   the (16·R)×16 slice of `a` and the 16×(16·R) slice of `b` in shared memory (`addrspace(3)`,
//!   rows padded by one element against bank conflicts; each thread evaluates R elements of each,
//!   consecutive threads along whichever index is contiguous in memory, so the loads coalesce;
//!   elements past M, N or K are staged as 0), `llvm.nvvm.barrier0`, accumulates from shared memory
//!   (the 16 steps unrolled), barrier again. Each output sums its products in order k = 0, 1, …, as the
//!   per-thread kernel does. Then each thread runs the epilogue (`rest`: bias, GELU, residual, the
//!   store — whatever the planner fused) once per output it owns, inside M × N. A one-output-per-thread
//!   tile over a long K splits K inside the block ([`split_slice`]): four groups of 64 threads, 2×2
//!   outputs each, compute their quarter of a 4× wider staged slice, and their partial sums are added
//!   in group order through shared memory before the epilogue. On the tensor cores a 16×16 tile (two
//!   m16n8 fragments) over a long K splits the same way: four pairs of warps, each pair the two
//!   fragments over its quarter of the slice, the pairs' fragments added in group order through
//!   shared memory (`RLX_CUDA_TC_SPLIT=0` at compile time: two warps busy, six idle, as before).
//!   `--precision f32` takes the tensor-core tiles too, by 3×TF32 ([`mma_issue_all`]: f32 values in
//!   shared memory, split into two tf32 parts per fragment register, three `mma.sync`s per fragment and
//!   k step); `RLX_CUDA_F32_MMA=0` at compile time keeps it on the SIMT tiles above.
//!   On the tensor cores, whole tiles of operands read straight from memory and contiguous along K
//!   take `vec_tile.rs`'s form instead (128-bit staging loads, larger tiles), with this file's helpers.
//! - **Row kernels** ([`Plan::Rows`]: LayerNorm, softmax, RMSNorm rows) and **row reductions**
//!   ([`Plan::Reduce`]): one warp per row, 1, 2, 4 or 8 rows per block ([`rows_per_block`]: few rows
//!   spread over the SMs, many fill blocks of 256) — or, when the rows are few (a decode step's: one
//!   RMSNorm row, a projection's 640 outputs), 2, 4 or 8 warps per row, one row per block
//!   ([`warps_per_row`]). Each reduction: thread l of the row's S (32 per warp) folds terms
//!   l, l + S, …, then five `llvm.nvvm.shfl.sync.bfly` steps leave the warp's total in every lane (a
//!   butterfly of a commutative ⊕: every lane ends with the same bits); with several warps their
//!   totals meet in shared memory after one barrier and every thread folds them in warp order; scalars
//!   are computed by every thread; element loops are strided over the row's threads. A warp past the
//!   last row recomputes the last one and stores nothing (a whole warp: the shuffles stay uniform).
//!   The summation order differs from a serial loop's (f32 results differ in the last bits).
//! - **Fused attention** ([`Plan::Attention`]): `attention.rs`, with this file's loop, barrier and
//!   shared-memory helpers.

use super::half_weights::Halves;
use super::{vec_tile, Mma, BLOCK};
use crate::ir::{llvm_lit, llvm_type, Writer};
use rlx_ir::loops::tiled::{cdiv, unit_stride, Acc, Phase, Plan, T};
use rlx_ir::loops::{Expr, Stmt, Var};
use rlx_ir::{BinaryOp, DType};

/// Blocks a row kernel aims for before it packs more than one row (warp) into a block: two per SM of
/// a large GPU (an H200 has 132), so short row counts spread over the SMs instead of filling a few.
const ROW_FILL: i64 = 264;

/// Warps (rows) per block of a row kernel over `total` rows: 1, 2, 4 or 8 — the most that still
/// gives [`ROW_FILL`] blocks.
pub fn rows_per_block(total: i64) -> i64 {
    [8, 4, 2].into_iter().find(|&r| total / r >= ROW_FILL).unwrap_or(1)
}

/// The most warps (rows × warps per row) for which a row kernel's output pass holds its stores back
/// ([`lane_loop`]'s `defer`).
const DEFER_ROW_WARPS: i64 = 2048;

/// Warps in flight a row kernel aims for before one row gets more than one warp: 8 per SM of an H200.
const ROW_WARPS: i64 = 1056;

/// Warps sharing one row of a row kernel over `total` rows: 8, 4, 2 or 1 — the most that keeps
/// `total` × warps within twice [`ROW_WARPS`]. A decode step's rows are few (one RMSNorm row, 4 heads'
/// softmax rows, 640 outputs of a projection): one warp each would leave most SMs idle and each lane
/// waiting on a long chain of loads. At MiniLM batch 1's 128 rows the rule's 8 measured fastest (H100,
/// session 33, resident, every precision: 4, 2 and 1 warps a row in every row kernel 1.01, 1.07–1.10
/// and 1.21–1.23× the time; tests/gpu/h100-cuda-s33b*).
pub fn warps_per_row(total: i64) -> i64 {
    [8, 4, 2].into_iter().find(|&w| total * w <= 2 * ROW_WARPS).unwrap_or(1)
}

/// A cooperative kernel's function text, its grid and block, and the shared-memory globals it uses.
pub struct Tiled {
    pub text: String,
    pub groups: [u32; 3],
    pub block: u32,
    /// Dynamic shared memory in bytes (`cp_async.rs`'s pipelined tiles; 0 none).
    pub shared: u32,
    pub globals: Vec<String>,
    /// Blocks per SM the kernel must allow (`.minnctapersm`: ptxas keeps its registers within them;
    /// 0 no bound): [`ahead`]'s unrolled tiles, whose staging registers could otherwise cost a block.
    pub min_blocks: u32,
}

type Body<'b> = &'b mut dyn FnMut(&mut Writer) -> Result<(), String>;

/// `for slot in lo..hi step step { body }` (i64; `slot` an entry-block alloca).
pub(super) fn for_loop(w: &mut Writer, slot: &str, lo: &str, hi: &str, step: i64, body: Body) -> Result<(), String> {
    w.slot(slot, "i64");
    let (cond, bl, end) = (w.fresh("tcond"), w.fresh("tbody"), w.fresh("tend"));
    w.emit(&format!("store i64 {lo}, ptr {slot}"));
    w.emit(&format!("br label %{cond}"));
    w.block(&cond);
    let i = w.emit_op(format!("load i64, ptr {slot}"));
    let c = w.emit_op(format!("icmp slt i64 {i}, {hi}"));
    w.emit(&format!("br i1 {c}, label %{bl}, label %{end}"));
    w.block(&bl);
    body(w)?;
    let i2 = w.emit_op(format!("load i64, ptr {slot}"));
    let n = w.emit_op(format!("add nsw i64 {i2}, {step}"));
    w.emit(&format!("store i64 {n}, ptr {slot}"));
    w.emit(&format!("br label %{cond}"));
    w.block(&end);
    Ok(())
}

/// A row kernel's per-lane element loop with at most this many elements per lane is unrolled whole;
/// a longer one runs [`LANE_CHUNK`] elements per lane per trip. A warp issues in order: a rolled loop
/// waits one memory latency per element (a 384-wide LayerNorm row: 12 per lane, three passes — ~10 µs
/// on an H200, nearly all of it waiting), straight-line code has all of a lane's loads in flight at once.
const LANE_UNROLL: i64 = 16;
const LANE_CHUNK: i64 = 4;

/// `for slot in lane..n step st { body }` (`st` the threads sharing a row: 32 per warp), unrolled
/// (above). Each element still runs `body` once, in the same order k = lane, lane + st, …: the results
/// are those of the rolled loop, bit for bit. With `defer`, the stores the body's statements make
/// (`Writer::defer_stores`) wait until every element of a straight run — the unrolled elements, a
/// chunk's — has computed its values: a store may alias the next element's loads as far as LLVM
/// knows (one arena), so otherwise each element's loads wait for the previous element's store (a
/// LayerNorm row's output pass: one memory latency per element). For bodies whose elements do not
/// read what an earlier element of the same thread stored ([`defers`]).
pub(super) fn lane_loop(w: &mut Writer, slot: &str, lane: &str, n: i64, st: i64, defer: bool, body: Body) -> Result<(), String> {
    w.slot(slot, "i64");
    let whole = n / st;
    let tail = n % st != 0;
    let at = |w: &mut Writer, base: &str, off: i64, body: Body| -> Result<(), String> {
        let i = w.emit_op(format!("add nuw nsw i64 {base}, {off}"));
        w.emit(&format!("store i64 {i}, ptr {slot}"));
        body(w)
    };
    if whole + tail as i64 <= LANE_UNROLL {
        w.defer_stores(defer);
        for j in 0..whole {
            at(w, lane, st * j, &mut *body)?;
        }
        w.defer_stores(false);
        if tail {
            let i = w.emit_op(format!("add nuw nsw i64 {lane}, {}", st * whole));
            let c = w.emit_op(format!("icmp slt i64 {i}, {n}"));
            if_(w, &c, &mut |w| at(w, lane, st * whole, &mut *body))?;
        }
        return Ok(());
    }
    let chunked = whole / LANE_CHUNK * LANE_CHUNK * st;
    let c = format!("{slot}.c");
    for_loop(w, &c, "0", &chunked.to_string(), LANE_CHUNK * st, &mut |w| {
        let cv = w.emit_op(format!("load i64, ptr {c}"));
        let base = w.emit_op(format!("add nuw nsw i64 {cv}, {lane}"));
        w.defer_stores(defer);
        for u in 0..LANE_CHUNK {
            at(w, &base, st * u, &mut *body)?;
        }
        w.defer_stores(false);
        Ok(())
    })?;
    let lo = w.emit_op(format!("add nuw nsw i64 {lane}, {chunked}"));
    for_loop(w, slot, &lo, &n.to_string(), st, body)
}

/// Whether [`lane_loop`] may defer `body`'s stores: straight-line stores and scalars (no loop or
/// condition: a deferred store's value must dominate the end of the run), and no parameter both
/// stored and loaded (an element then could read what an earlier one stored). Never with
/// `RLX_CUDA_DEFER_STORES=0` at compile time (the PTX before session 32, to time the two).
pub(super) fn defers(body: &[Stmt]) -> bool {
    if std::env::var("RLX_CUDA_DEFER_STORES").is_ok_and(|v| v == "0") {
        return false;
    }
    let (mut stores, mut loads) = (Vec::new(), std::collections::BTreeSet::new());
    rlx_ir::loops::grid::collect(body, &mut Default::default(), &mut Default::default(), &mut stores, &mut loads);
    body.iter().all(|s| matches!(s, Stmt::Store { .. } | Stmt::Decl { .. } | Stmt::Assign { .. })) && stores.iter().all(|(b, _)| !loads.contains(b))
}

/// `RLX_CUDA_DEFER_STORES=all` at compile time: stores held back wherever [`defers`] allows, not only
/// where they measured faster (to time the two).
pub(super) fn defer_all() -> bool {
    std::env::var("RLX_CUDA_DEFER_STORES").is_ok_and(|v| v == "all")
}

/// `if cond { body }` (`cond` an i1).
pub(super) fn if_(w: &mut Writer, cond: &str, body: Body) -> Result<(), String> {
    let (then, end) = (w.fresh("tthen"), w.fresh("tendif"));
    w.emit(&format!("br i1 {cond}, label %{then}, label %{end}"));
    w.block(&then);
    body(w)?;
    w.emit(&format!("br label %{end}"));
    w.block(&end);
    Ok(())
}

/// Stores `(flat / stride) % extent` into each variable's slot (the last varies fastest) and binds it.
pub(super) fn unflatten(w: &mut Writer, flat: &str, dims: &[(Var, i64)]) {
    unflatten_from(w, flat, dims, false);
}

/// [`unflatten`] of a `flat` known to be below the dims' product (an output inside M × N): the
/// outermost variable is then `flat / stride` without the remainder — an epilogue's column or row of
/// one dim is `flat` itself, so its loads of a bias or a residual index it directly (no division by
/// the extent per output: 4–5 instructions each on the tensor-core tiles' 16–64 outputs a thread).
pub(super) fn unflatten_inside(w: &mut Writer, flat: &str, dims: &[(Var, i64)]) {
    unflatten_from(w, flat, dims, true);
}

fn unflatten_from(w: &mut Writer, flat: &str, dims: &[(Var, i64)], inside: bool) {
    let mut stride: i64 = dims.iter().map(|d| d.1.max(1)).product();
    for (i, &(v, e)) in dims.iter().enumerate() {
        stride /= e.max(1);
        let slot = format!("%s.v{}", v.0);
        w.slot(&slot, "i64");
        let q = w.emit_op(format!("udiv i64 {flat}, {stride}"));
        let r = if inside && i == 0 { q } else { w.emit_op(format!("urem i64 {q}, {}", e.max(1))) };
        w.emit(&format!("store i64 {r}, ptr {slot}"));
        w.bind_index(v, &slot);
    }
}

/// A special register (`tid.x`, `ctaid.y`, …) as i64.
pub(super) fn sreg(w: &mut Writer, name: &str) -> String {
    w.declare(&format!("declare i32 @llvm.nvvm.read.ptx.sreg.{name}()"));
    let v = w.emit_op(format!("call i32 @llvm.nvvm.read.ptx.sreg.{name}()"));
    w.emit_op(format!("zext i32 {v} to i64"))
}

pub(super) fn barrier(w: &mut Writer) {
    w.declare("declare void @llvm.nvvm.barrier0()");
    w.emit("call void @llvm.nvvm.barrier0()");
}

/// `base[idx]` of a shared array `[len x ty]`: its address.
/// `c += a · b` on the accumulator slot `c` of dtype `d`.
fn accumulate(w: &mut Writer, d: DType, c: &str, a: &str, b: &str) {
    let ty = llvm_type(d);
    let cv = w.emit_op(format!("load {ty}, ptr {c}"));
    let p = w.bin(BinaryOp::Mul, d, a, b);
    let s = w.bin(BinaryOp::Add, d, &cv, &p);
    w.emit(&format!("store {ty} {s}, ptr {c}"));
}

pub(super) fn shared_at(w: &mut Writer, base: &str, len: i64, ty: &str, idx: &str) -> String {
    w.emit_op(format!("getelementptr inbounds [{len} x {ty}], ptr addrspace(3) {base}, i64 0, i64 {idx}"))
}

/// The kernel `k{li}` for `plan`: `sig` its parameter list, `setup` the instructions that compute
/// the parameters' element pointers (`params`), `alias` their accesses' alias-scope marks (`alias.rs`).
pub fn kernel(li: usize, sig: &str, setup: &str, params: Vec<(DType, String)>, alias: Vec<String>, offsets: &[u64], plan: &Plan, mma: Mma, smem: i64, wgmma: bool, halves: &mut Halves, decls: &mut std::collections::BTreeSet<String>) -> Result<Tiled, String> {
    let ptrs: Vec<String> = params.iter().map(|p| p.1.clone()).collect();
    let layout: Vec<(DType, u64)> = params.iter().zip(offsets).map(|(p, &o)| (p.0, o)).collect();
    let mut w = Writer::gpu(params, decls);
    w.set_tf32_stores(halves.tf32.to_vec());
    w.set_alias(alias);
    let mut globals = Vec::new();
    let mut min_blocks = 0;
    let (groups, block) = match plan {
        Plan::Matmul { acc, a, b, rows, cols, batch, r } => {
            // Tensor cores for f32 matmuls under --precision tf32|bf16|fp16, and f32's 3×TF32
            // (`Mma::Tf32x3`); integer matmuls, and f32 with RLX_CUDA_F32_MMA=0, stay on the SIMT cores.
            let tc = if acc.dtype == DType::F32 && mma != Mma::F32 { Some(mma) } else { None };
            // Whole tiles of operands contiguous along K: 128-bit staging loads, larger tiles (vec_tile.rs).
            let (m, n, nb) = (rows.iter().map(|d| d.1).product(), cols.iter().map(|d| d.1).product(), batch.iter().map(|d| d.1).product());
            let kv = acc.ks[0].0;
            let half = match tc {
                Some(Mma::Bf16) => Some(DType::BF16),
                Some(Mma::Fp16) => Some(DType::F16),
                _ => None,
            };
            let direct = (acc.ks.len() == 1).then(|| (vec_tile::direct(a, kv, &layout, half), vec_tile::direct(b, kv, &layout, half)));
            let fast = match (tc, direct) {
                (Some(kind), Some((Some(da), Some(db)))) => vec_tile::tile(m, n, nb, acc.ks[0].1, kind, [da.period, db.period]).map(|(bm, bn, tk)| {
                    // Hopper's wgmma tiles (RLX_CUDA_WGMMA) have a tile rule of their own (RLX_CUDA_WGMMA_TILE).
                    let (bm, bn) = if wgmma { super::wgmma::tile(m, n, nb, acc.ks[0].1, (bm, bn), kind) } else { (bm, bn) };
                    (kind, da, db, (bm, bn, tk))
                }),
                _ => None,
            };
            // A 16-bit operand (half_activations.rs) only where every form stages it from its own
            // values (vec_tile.rs's: whole 8-value vectors per thread); else the general form below.
            let fast = fast.filter(|(_, da, db, (bm, bn, tk))| [(da, bm), (db, bn)].iter().all(|(x, own)| !x.half || *own * (tk / 8) % 256 == 0));
            if let Some((kind, da, db, t)) = fast {
                let (g, shared) = vec_tile::matmul(&mut w, li, acc, (&da, &db), &ptrs, (rows, cols, batch), t, kind, smem, wgmma, halves, &mut globals)?;
                let text = define(li, sig, setup, w);
                return Ok(Tiled { text, groups: g, block: BLOCK, shared, globals, min_blocks: 0 });
            }
            let (g, depth) = matmul(&mut w, li, acc, a, b, rows, cols, batch, *r, tc, &mut globals)?;
            if depth > 1 {
                min_blocks = AHEAD_BLOCKS;
            }
            (g, BLOCK)
        }
        Plan::Reduce { acc, grid } => rows_kernel(&mut w, li, &[Phase::Reduce(acc.clone())], Some(acc), grid, &mut globals)?,
        Plan::Rows { phases, grid, .. } => rows_kernel(&mut w, li, phases, None, grid, &mut globals)?,
        Plan::Attention(a) => {
            // On the tensor cores where the head fits (attention_mma.rs); else the SIMT kernel.
            if let Some((g, block, shared)) = super::attention_mma::attention(&mut w, a, mma, smem, &mut globals)? {
                let text = define(li, sig, setup, w);
                return Ok(Tiled { text, groups: g, block, shared, globals, min_blocks: 0 });
            }
            super::attention::attention(&mut w, li, a, &mut globals)?
        }
    };
    let text = define(li, sig, setup, w);
    Ok(Tiled { text, groups, block, shared: 0, globals, min_blocks })
}

/// Kernel `k{li}`'s definition: `sig` its parameters, `setup` its entry's pointer casts, then `w`'s body.
fn define(li: usize, sig: &str, setup: &str, w: Writer) -> String {
    let (allocas, body) = w.finish();
    format!("define ptx_kernel void @k{li}({sig}) #0 {{\nentry:\n{allocas}{setup}  br label %start.bb\nstart.bb:\n{body}  ret void\n}}\n\n")
}

/// Tensor-core tiles of a matmul with at most this many blocks (two per SM of an H200) stage K slices
/// of 64 over K ≥ 256 ([`k_slice`]).
const FEW_BLOCKS: i64 = 264;

/// The K slice a tiled matmul stages per step: 64 for 1×1 outputs per thread and for tensor-core
/// tiles over K ≥ 256 in few blocks (`few_tc`: [`FEW_BLOCKS`]), 32 otherwise (fewer steps, each with
/// more loads in flight: a short-M·N, long-K matmul is bound by one global-memory latency per step —
/// on the H200, MiniLM batch 1's 32×32 bf16 FFN-up tiles, 192 blocks, with slices of 64: the model
/// 324 → 315 µs, tf32 unchanged), never more than K rounded up to 16. A multiple of 16, so each of the
/// [`BLOCK`] threads stages a whole number of elements of each operand. (Slices of 256 for one
/// output per thread over few blocks, tried on the H200: a decode step's attention scores 7 → 50 µs,
/// its probabilities × values unchanged.)
pub fn k_slice(r: i64, k: i64, few_tc: bool) -> i64 {
    let want = if r == 1 || (few_tc && k >= 256) { 64 } else { 32 };
    want.min(cdiv(k.max(1), T) * T)
}

/// Groups of a one-output-per-thread SIMT tile that split K inside the block (`SPLIT_K` groups of
/// 64 threads, each 2×2 outputs of the 16×16 tile over every `SPLIT_K`-th part of a staged slice,
/// their partial sums added in group order through shared memory at the end): a tile with few
/// blocks over a long K (a batch-1 projection, a prefill chunk's FFN) is bound by one global-memory
/// latency per staged slice, and this stages `SPLIT_K` times wider slices (all their loads in flight
/// together) while each thread's unrolled compute stays one K slice long.
pub const SPLIT_K: i64 = 4;

/// The K slice each split group computes per step, or `None` when the tile does not split K: one
/// output per thread (SIMT) or a 16×16 tile of two m16n8 fragments (tensor cores: eight warps, two
/// fragments — the groups are pairs of warps), and K at least [`SPLIT_K`] × 64 (32 per group below
/// 1024, so K = 384 or 640 stage whole slices). `RLX_CUDA_TC_SPLIT=0` at compile time keeps the
/// tensor cores' 16×16 tile unsplit (six of its eight warps idle).
pub fn split_slice(r: i64, k: i64, tc: Option<Mma>) -> Option<i64> {
    let env = |name: &str, v: &str| std::env::var(name).is_ok_and(|x| x == v);
    if r != 1 || k < SPLIT_K * 64 || (tc.is_some() && env("RLX_CUDA_TC_SPLIT", "0")) {
        return None;
    }
    Some(if k >= 1024 { 64 } else { 32 })
}

/// Register sets of staged K slices a tensor-core tile keeps in flight: with more than one, the K loop is
/// unrolled and slices 0 … D − 1 are all loaded before the first is used (slice j + D once slice j is
/// in shared memory), where the rolled loop loads only the next slice while this one is computed —
/// a small tile's slice computes in far less time than its loads take to land (MiniLM batch 1's
/// 16 × 16 and 32 × 32 tiles over K = 384: 3 and 6 slices). `RLX_CUDA_TILE_AHEAD=D` at compile time: D
/// sets (1: the rolled loop) for K of at most [`AHEAD_SLICES`] slices; by default as many as fit
/// [`AHEAD_REGS`] staging registers a thread (two at MiniLM batch 1) under bf16 / fp16 only. Measured
/// on an H100 (session 35, MiniLM batch 1 resident against the rolled loop, `_ahead1` twins in the same
/// runs; raw tests/gpu/h100-cuda-s35{a,b}*): bf16 0.96× the time with two sets (0.97× with three),
/// but f32 1.05× and tf32 1.02× — each kernel launched alone ran 1–3% faster at every precision, but
/// f32's and tf32's tiles took more registers (the FFN up 76 → 126 under 3×TF32, 64 → 126 under tf32),
/// which leaves fewer blocks of the kernels around them resident (with programmatic launch the next
/// kernel's blocks wait on the SMs); bf16's took fewer.
/// `per_slice`: the values a thread stages per slice.
fn ahead(tc: Option<Mma>, slices: i64, per_slice: i64) -> i64 {
    let Some(kind) = tc else { return 1 };
    if slices > AHEAD_SLICES {
        return 1;
    }
    let default = if matches!(kind, Mma::Bf16 | Mma::Fp16) { AHEAD_REGS / per_slice.max(1) } else { 1 };
    std::env::var("RLX_CUDA_TILE_AHEAD").ok().and_then(|v| v.parse::<i64>().ok()).unwrap_or(default).clamp(1, slices)
}

/// The most K slices [`ahead`] unrolls.
const AHEAD_SLICES: i64 = 8;
/// The staging registers a thread may hold for [`ahead`]'s ring by default.
const AHEAD_REGS: i64 = 32;
/// Blocks per SM an unrolled tile keeps room for (`Tiled::min_blocks`): two of 256 threads, 128
/// registers each (ptxas gave MiniLM batch 1's f32 FFN up 144 for sm_80 unbounded).
const AHEAD_BLOCKS: u32 = 2;

#[allow(clippy::too_many_arguments)]
fn matmul(
    w: &mut Writer, li: usize, acc: &Acc, a: &Expr, b: &Expr, rows: &[(Var, i64)], cols: &[(Var, i64)], batch: &[(Var, i64)], r: i64, tc: Option<Mma>, globals: &mut Vec<String>,
) -> Result<([u32; 3], i64), String> {
    let d = acc.dtype;
    let ty = llvm_type(d);
    let (m, n, nb): (i64, i64, i64) = (rows.iter().map(|d| d.1).product(), cols.iter().map(|d| d.1).product(), batch.iter().map(|d| d.1).product());
    let split = split_slice(r, acc.ks[0].1, tc);
    // tk: the K slice staged per step (with split K, `SPLIT_K` groups' slices of `gk` each).
    let gk = split.unwrap_or(0);
    let few = tc.is_some() && cdiv(m, T * r) * cdiv(n, T * r) * nb <= FEW_BLOCKS;
    let (bm, bn, tk) = (T * r, T * r, split.map_or(k_slice(r, acc.ks[0].1, few), |s| s * SPLIT_K));
    // Rows of a padded against bank conflicts: by one for the SIMT loop (a warp reads two rows, the
    // stores walk K), by four for the tensor cores (a fragment's lanes 4·g + t read row g, column t:
    // 32 different banks).
    // bf16 / fp16 on the tensor cores stage pairs of adjacent K values packed into one 32-bit word
    // (`pk` = 2 values a unit; each thread converts its own pairs once, and a fragment register is one
    // shared load): words of a row padded by four (lanes 4·g + t read row g, word t), rows of b by
    // eight (lanes read word row t, column g). Needs whole pairs per thread: bm·tk/2 a multiple of 256.
    let per = (T * T) as i64;
    let packed = matches!(tc, Some(Mma::Bf16) | Some(Mma::Fp16)) && (bm * tk / 2) % per == 0;
    let pk = if packed { 2 } else { 1 };
    let sty = if packed { "i32" } else { ty };
    // SIMT with R = 2 or 4 outputs per thread along each side: thread (tx, ty) owns the contiguous rows
    // ty·R + i and columns tx·R + j, a stored transposed (`sa[kk·pa + o]`) so both operands' R values
    // of a step are one vector shared load each (2 loads per R² FMAs instead of 2R); rows padded by
    // four floats, which keeps the vectors aligned.
    let vec = tc.is_none() && split.is_none() && r > 1;
    let (pa, pb) = if packed {
        (tk / 2 + 4, bn + 8)
    } else if vec {
        (bm + 4, bn + 4)
    } else {
        (tk + if tc.is_some() { 4 } else { 1 }, bn + 1)
    };
    let (la, lb) = (if vec { tk * pa } else { bm * pa }, tk / pk * pb);
    // Split K on the tensor cores: the groups' fragments meet in `sa` after the loop (4 × 256 words).
    let tsplit = tc.is_some() && split.is_some();
    let la = if tsplit { la.max(4 * per) } else { la };
    let (sa, sb) = (format!("@sa{li}"), format!("@sb{li}"));
    globals.push(format!("{sa} = internal addrspace(3) global [{la} x {sty}] undef, align 16"));
    globals.push(format!("{sb} = internal addrspace(3) global [{lb} x {sty}] undef, align 16"));
    let (kv, kext) = acc.ks[0];
    let (a_kfast, b_kfast) = (unit_stride(a, kv, &rows.to_vec()), unit_stride(b, kv, &cols.to_vec()));
    let tid = sreg(w, "tid.x");
    let tx = w.emit_op(format!("and i64 {tid}, {}", T - 1));
    let tyi = w.emit_op(format!("lshr i64 {tid}, 4"));
    let (cx, cy, cz) = (sreg(w, "ctaid.x"), sreg(w, "ctaid.y"), sreg(w, "ctaid.z"));
    let m0 = w.emit_op(format!("mul nuw nsw i64 {cy}, {bm}"));
    let n0 = w.emit_op(format!("mul nuw nsw i64 {cx}, {bn}"));
    unflatten(w, &cz, batch);
    let init = w.value(acc.init);
    // Tensor cores: warp `wp` owns the m16×n8 output fragments wp, wp + 8, … of the tile (bm/16 ×
    // bn/8 of them), four f32 per lane each (`%d{s}.{q}`); SIMT: thread (tx, ty) owns r×r outputs.
    let frags = (bm / 16) * (bn / 8);
    let per_warp = cdiv(frags, 8);
    let (wp, gq, tq) = if tc.is_some() {
        let wp = w.emit_op(format!("lshr i64 {tid}, 5"));
        let lane = w.emit_op(format!("and i64 {tid}, 31"));
        (wp, w.emit_op(format!("lshr i64 {lane}, 2")), w.emit_op(format!("and i64 {lane}, 3")))
    } else {
        Default::default()
    };
    // With split K each thread holds 2×2 partial sums (from zero: `init` joins once, in the sum).
    let rr = if split.is_some() { 2 } else { r };
    let accs: Vec<String> = if tc.is_some() {
        (0..per_warp).flat_map(|s| (0..4).map(move |q| format!("%d{s}.{q}"))).collect()
    } else {
        (0..rr).flat_map(|i| (0..rr).map(move |j| format!("%c{i}.{j}"))).collect()
    };
    let zero = llvm_lit(0.0, d);
    for c in &accs {
        w.slot(c, ty);
        w.emit(&format!("store {ty} {}, ptr {c}", if split.is_some() { &zero } else { &init }));
    }
    if let Some(kind) = tc {
        small_accumulators(w, kind, per_warp);
    }
    // Split K: group g = tid / 64 computes K steps [g·gk, (g + 1)·gk) of each staged slice; its thread
    // (x8, y8) = (t % 8, t / 8) owns rows y8, y8 + 8 and columns x8, x8 + 8 of the tile.
    let (gbase, x8, y8) = if split.is_some() && !tsplit {
        let g = w.emit_op(format!("lshr i64 {tid}, 6"));
        let t64 = w.emit_op(format!("and i64 {tid}, 63"));
        (w.emit_op(format!("mul nuw nsw i64 {g}, {gk}")), w.emit_op(format!("and i64 {t64}, 7")), w.emit_op(format!("lshr i64 {t64}, 3")))
    } else {
        Default::default()
    };
    // Split K on the tensor cores: warp wp computes fragment wp % 2 over K steps [g·gk, (g + 1)·gk)
    // of each staged slice, g = wp / 2; `tqk` is the lane's t shifted by the group's K offset in the
    // fragment layouts' units (tf32: K values; bf16 / fp16: pairs), so mma_step's indices reach it.
    let (fw, tqk) = if tsplit {
        let g = w.emit_op(format!("lshr i64 {wp}, 1"));
        let unit = if tc.is_some_and(Mma::tf32) { 1 } else { 2 };
        let off = w.emit_op(format!("mul nuw nsw i64 {g}, {}", gk / unit));
        (w.emit_op(format!("and i64 {wp}, 1")), w.emit_op(format!("add nuw nsw i64 {tq}, {off}")))
    } else {
        (wp.clone(), tq.clone())
    };
    let kslot = format!("%s.v{}", kv.0);
    w.slot(&kslot, "i64");
    w.bind_index(kv, &kslot);
    // The staged elements: (operand, q) → its staging register `%s.st{a|b}{q}` and its place in
    // shared memory (a function of `tid` and q only).
    let ops = [(a, a_kfast, m, bm, rows, &sa, la, true), (b, b_kfast, n, bn, cols, &sb, lb, false)];
    let part = |w: &mut Writer, fast: bool, own: i64, q: i64| {
        let e = w.emit_op(format!("add nuw nsw i64 {tid}, {}", q * per));
        // (o: the row of a / column of b within the tile; kk: the step (packed: the pair) within K)
        if fast {
            (w.emit_op(format!("udiv i64 {e}, {}", tk / pk)), w.emit_op(format!("urem i64 {e}, {}", tk / pk)))
        } else {
            (w.emit_op(format!("urem i64 {e}, {own}")), w.emit_op(format!("udiv i64 {e}, {own}")))
        }
    };
    // Loads the K slice at `k0` into the staging registers of set `set` ([`ahead`]'s ring; set 0 the
    // rolled loop's): every load issued before any is used (the values reach shared memory only after
    // the next compute), so they are in flight together.
    let st = |set: usize, oi: usize, q: i64, h: i64| if set == 0 { format!("%s.st{oi}.{q}.{h}") } else { format!("%s.st{oi}.{q}.{h}.s{set}") };
    let load_slice = |w: &mut Writer, k0: &str, set: usize| -> Result<(), String> {
        for (oi, &(x, fast, lim, own, dims, _, _, rows_of)) in ops.iter().enumerate() {
            for (q, h) in (0..own * tk / pk / per).flat_map(|q| (0..pk).map(move |h| (q, h))) {
                let (o, kk) = part(w, fast, own, q);
                let base = if rows_of { &m0 } else { &n0 };
                let g = w.emit_op(format!("add nuw nsw i64 {base}, {o}"));
                let kk = if packed { w.emit_op(format!("add nuw nsw i64 {kk}, {kk}")) } else { kk };
                let kk = if h > 0 { w.emit_op(format!("add nuw nsw i64 {kk}, {h}")) } else { kk };
                let kg = w.emit_op(format!("add nuw nsw i64 {k0}, {kk}"));
                let xs = st(set, oi, q, h);
                w.slot(&xs, ty);
                let mut stage = |w: &mut Writer| {
                    unflatten(w, &g, dims);
                    w.emit(&format!("store i64 {kg}, ptr {kslot}"));
                    let v = w.value(x);
                    w.emit(&format!("store {ty} {v}, ptr {xs}"));
                    Ok(())
                };
                if lim % own == 0 && kext % tk == 0 && (r > 1 || tc.is_some()) {
                    // Every tile and every K slice is whole: no element falls outside, no guard (the
                    // loads of a slice are straight-line code, all in flight together). Measured on the
                    // H200: MiniLM b32's matmuls 5–24% faster; the one-output-per-thread SIMT form
                    // (batch 1) 13% slower unguarded, so it keeps its guards.
                    stage(w)?;
                } else {
                    w.emit(&format!("store {ty} {zero}, ptr {xs}"));
                    let c1 = w.emit_op(format!("icmp slt i64 {g}, {lim}"));
                    let c2 = w.emit_op(format!("icmp slt i64 {kg}, {kext}"));
                    let c = w.emit_op(format!("and i1 {c1}, {c2}"));
                    if_(w, &c, &mut stage)?;
                }
            }
        }
        Ok(())
    };
    // One K slice: the staged registers of `set` → shared memory, a barrier, `prefetch` (the loads of a
    // later slice into registers), the slice's products, a barrier.
    let step = |w: &mut Writer, set: usize, prefetch: Body| -> Result<(), String> {
        // The staged slice → shared memory: a: sa[o·pa + kk]; b: sb[kk·pb + o].
        for (oi, &(_, fast, _, own, _, sh, len, rows_of)) in ops.iter().enumerate() {
            for q in 0..own * tk / pk / per {
                let (o, kk) = part(w, fast, own, q);
                let v = w.emit_op(format!("load {ty}, ptr {}", st(set, oi, q, 0)));
                // A packed pair: its two values as one word (the lower half the even K).
                let v = if packed {
                    let v1 = w.emit_op(format!("load {ty}, ptr {}", st(set, oi, q, 1)));
                    to_operand(w, tc.unwrap_or(Mma::Bf16), &v, Some(&v1))
                } else {
                    v
                };
                let idx = if rows_of && !vec {
                    let t = w.emit_op(format!("mul nuw nsw i64 {o}, {pa}"));
                    w.emit_op(format!("add nuw nsw i64 {t}, {kk}"))
                } else if rows_of {
                    let t = w.emit_op(format!("mul nuw nsw i64 {kk}, {pa}"));
                    w.emit_op(format!("add nuw nsw i64 {t}, {o}"))
                } else {
                    let t = w.emit_op(format!("mul nuw nsw i64 {kk}, {pb}"));
                    w.emit_op(format!("add nuw nsw i64 {t}, {o}"))
                };
                let p = shared_at(w, sh, len, sty, &idx);
                // tf32: rounded once here (cvt.rna, kept in the f32 slot as its bits), not at each use;
                // 3×TF32 stores the f32 value (split where a fragment register is loaded).
                let v = if tc == Some(Mma::Tf32) {
                    let t = to_operand(w, Mma::Tf32, &v, None);
                    w.emit_op(format!("bitcast i32 {t} to float"))
                } else {
                    v
                };
                w.emit(&format!("store {sty} {v}, ptr addrspace(3) {p}"));
            }
        }
        barrier(w);
        prefetch(w)?;
        if let Some(kind) = tc {
            mma_step(w, kind, packed, (&sa, la, pa), (&sb, lb, pb), (&fw, &gq, &tqk), bm, bn, if tsplit { gk } else { tk }, tsplit)?;
            barrier(w);
            return Ok(());
        }
        if split.is_some() {
            for kk in 0..gk {
                let kg = w.emit_op(format!("add nuw nsw i64 {gbase}, {kk}"));
                let mut ra = Vec::new();
                for i in 0..2 {
                    let row = w.emit_op(format!("add nuw nsw i64 {y8}, {}", i * 8));
                    let t = w.emit_op(format!("mul nuw nsw i64 {row}, {pa}"));
                    let idx = w.emit_op(format!("add nuw nsw i64 {t}, {kg}"));
                    let p = shared_at(w, &sa, la, ty, &idx);
                    ra.push(w.emit_op(format!("load {ty}, ptr addrspace(3) {p}")));
                }
                let mut rb = Vec::new();
                let krow = w.emit_op(format!("mul nuw nsw i64 {kg}, {pb}"));
                for j in 0..2 {
                    let t = w.emit_op(format!("add nuw nsw i64 {krow}, {x8}"));
                    let idx = w.emit_op(format!("add nuw nsw i64 {t}, {}", j * 8));
                    let p = shared_at(w, &sb, lb, ty, &idx);
                    rb.push(w.emit_op(format!("load {ty}, ptr addrspace(3) {p}")));
                }
                for i in 0..2 {
                    for j in 0..2 {
                        accumulate(w, d, &format!("%c{i}.{j}"), &ra[i], &rb[j]);
                    }
                }
            }
            barrier(w);
            return Ok(());
        }
        // Out-of-range K steps were staged as 0, so the last (partial) step adds exact zeros.
        if vec {
            let vt = format!("<{r} x {ty}>");
            let ar = w.emit_op(format!("mul nuw nsw i64 {tyi}, {r}"));
            let bc = w.emit_op(format!("mul nuw nsw i64 {tx}, {r}"));
            for kk in 0..tk {
                let vload = |w: &mut Writer, sh: &str, len: i64, off: &str, row: i64| {
                    let idx = w.emit_op(format!("add nuw nsw i64 {off}, {}", kk * row));
                    let p = shared_at(w, sh, len, ty, &idx);
                    let v = w.emit_op(format!("load {vt}, ptr addrspace(3) {p}, align {}", 4 * r));
                    (0..r).map(|i| w.emit_op(format!("extractelement {vt} {v}, i64 {i}"))).collect::<Vec<_>>()
                };
                let ra = vload(w, &sa, la, &ar, pa);
                let rb = vload(w, &sb, lb, &bc, pb);
                for i in 0..r as usize {
                    for j in 0..r as usize {
                        accumulate(w, d, &format!("%c{i}.{j}"), &ra[i], &rb[j]);
                    }
                }
            }
            barrier(w);
            return Ok(());
        }
        for kk in 0..tk {
            let mut ra = Vec::new();
            for i in 0..r {
                let row = w.emit_op(format!("add nuw nsw i64 {tyi}, {}", i * T));
                let t = w.emit_op(format!("mul nuw nsw i64 {row}, {pa}"));
                let idx = w.emit_op(format!("add nuw nsw i64 {t}, {kk}"));
                let p = shared_at(w, &sa, la, ty, &idx);
                ra.push(w.emit_op(format!("load {ty}, ptr addrspace(3) {p}")));
            }
            let mut rb = Vec::new();
            for j in 0..r {
                let idx = w.emit_op(format!("add nuw nsw i64 {tx}, {}", kk * pb + j * T));
                let p = shared_at(w, &sb, lb, ty, &idx);
                rb.push(w.emit_op(format!("load {ty}, ptr addrspace(3) {p}")));
            }
            for i in 0..r as usize {
                for j in 0..r as usize {
                    accumulate(w, d, &format!("%c{i}.{j}"), &ra[i], &rb[j]);
                }
            }
        }
        barrier(w);
        Ok(())
    };
    let slices = cdiv(kext, tk);
    let depth = ahead(tc, slices, ops.iter().map(|o| o.3 * tk / per).sum());
    if depth > 1 {
        // [`ahead`]: the slices unrolled, `depth` register sets in a ring — slices 0 … depth − 1 loaded
        // first, slice j + depth into slice j's set once j is in shared memory.
        for j in 0..depth {
            load_slice(w, &(j * tk).to_string(), j as usize)?;
        }
        for j in 0..slices {
            let set = (j % depth) as usize;
            step(w, set, &mut |w| if j + depth < slices { load_slice(w, &((j + depth) * tk).to_string(), set) } else { Ok(()) })?;
        }
    } else {
        load_slice(w, "0", 0)?;
        for_loop(w, "%s.k0", "0", &kext.to_string(), tk, &mut |w| {
            let k0 = w.emit_op("load i64, ptr %s.k0".into());
            // Prefetch the next slice while this one is computed (double buffering through registers).
            step(w, 0, &mut |w| {
                let k1 = w.emit_op(format!("add nuw nsw i64 {k0}, {tk}"));
                let more = w.emit_op(format!("icmp slt i64 {k1}, {kext}"));
                if_(w, &more, &mut |w| load_slice(w, &k1, 0))
            })
        })?;
    }
    if let Some(kind) = tc {
        fold_small(w, kind, per_warp);
    }
    if tsplit {
        // The groups' fragments meet in shared memory (sa, free after the loop's last barrier):
        // red[q·256 + tid]; then the warps of group 0 add theirs, after `init`, in group order (group
        // g's warp of the same fragment is tid + 64·g) and run the epilogue below.
        for q in 0..4 {
            let idx = w.emit_op(format!("add nuw nsw i64 {tid}, {}", q * per));
            let p = shared_at(w, &sa, la, ty, &idx);
            let v = w.emit_op(format!("load {ty}, ptr %d0.{q}"));
            w.emit(&format!("store {ty} {v}, ptr addrspace(3) {p}"));
        }
        barrier(w);
        let g0 = w.emit_op(format!("icmp ult i64 {wp}, 2"));
        if_(w, &g0, &mut |w| {
            for q in 0..4 {
                let v = w.emit_op(format!("load {ty}, ptr %d0.{q}"));
                let mut sum = w.bin(BinaryOp::Add, d, &init, &v);
                for g in 1..SPLIT_K {
                    let idx = w.emit_op(format!("add nuw nsw i64 {tid}, {}", q * per + g * 64));
                    let p = shared_at(w, &sa, la, ty, &idx);
                    let v = w.emit_op(format!("load {ty}, ptr addrspace(3) {p}"));
                    sum = w.bin(BinaryOp::Add, d, &sum, &v);
                }
                w.emit(&format!("store {ty} {sum}, ptr %d0.{q}"));
            }
            Ok(())
        })?;
    }
    if split.is_some() && !tsplit {
        // The groups' partial sums meet in shared memory (sa, free after the loop's last barrier):
        // red[g·256 + row·16 + column]; then thread (ty, tx) adds its output's in group order, after
        // `init`, into %c0.0 for the one-output epilogue below.
        for i in 0..2 {
            for j in 0..2 {
                let row = w.emit_op(format!("add nuw nsw i64 {y8}, {}", i * 8));
                let o = w.emit_op(format!("mul nuw nsw i64 {row}, {T}"));
                let o = w.emit_op(format!("add nuw nsw i64 {o}, {x8}"));
                let o = w.emit_op(format!("add nuw nsw i64 {o}, {}", j * 8));
                let g = w.emit_op(format!("lshr i64 {tid}, 6"));
                let gb = w.emit_op(format!("mul nuw nsw i64 {g}, {}", T * T));
                let idx = w.emit_op(format!("add nuw nsw i64 {gb}, {o}"));
                let p = shared_at(w, &sa, la, ty, &idx);
                let v = w.emit_op(format!("load {ty}, ptr %c{i}.{j}"));
                w.emit(&format!("store {ty} {v}, ptr addrspace(3) {p}"));
            }
        }
        barrier(w);
        let mut sum = init.clone();
        for g in 0..SPLIT_K {
            let idx = w.emit_op(format!("add nuw nsw i64 {tid}, {}", g * T * T));
            let p = shared_at(w, &sa, la, ty, &idx);
            let v = w.emit_op(format!("load {ty}, ptr addrspace(3) {p}"));
            sum = w.bin(BinaryOp::Add, d, &sum, &v);
        }
        w.emit(&format!("store {ty} {sum}, ptr %c0.0"));
    }
    // The epilogue, once per owned output (SIMT: rows ty + 16·i, columns tx + 16·j).
    let accs_slot = format!("%s.v{}", acc.acc.0);
    w.slot(&accs_slot, ty);
    if tc.is_some() {
        let (rows_of, cols_of, mut owned) = warp_frags(w, &fw, bm, bn, tsplit);
        if tsplit {
            // Only group 0 holds the sums.
            let g0 = w.emit_op(format!("icmp ult i64 {wp}, 2"));
            owned.iter_mut().for_each(|o| o.2 = g0.clone());
        }
        for (s, (i, j, has)) in owned.iter().enumerate() {
            let (mt, nt) = (&rows_of[*i], &cols_of[*j]);
            if_(w, has, &mut |w| {
                let r0 = w.emit_op(format!("mul nuw nsw i64 {mt}, 16"));
                let r0 = w.emit_op(format!("add nuw nsw i64 {r0}, {gq}"));
                let r0 = w.emit_op(format!("add nuw nsw i64 {r0}, {m0}"));
                let c0 = w.emit_op(format!("mul nuw nsw i64 {nt}, 8"));
                let t2 = w.emit_op(format!("shl i64 {tq}, 1"));
                let c0 = w.emit_op(format!("add nuw nsw i64 {c0}, {t2}"));
                let c0 = w.emit_op(format!("add nuw nsw i64 {c0}, {n0}"));
                // Fragment element q: row g + 8·(q / 2), column 2t + q % 2.
                for q in 0..4 {
                    let mm = w.emit_op(format!("add nuw nsw i64 {r0}, {}", 8 * (q / 2)));
                    let nn = w.emit_op(format!("add nuw nsw i64 {c0}, {}", q % 2));
                    epilogue(w, acc, &format!("%d{s}.{q}"), &accs_slot, (&mm, m, rows), (&nn, n, cols))?;
                }
                Ok(())
            })?;
        }
    }
    // (SIMT: rows ty + 16·i, columns tx + 16·j; with vector loads rows ty·R + i, columns tx·R + j.)
    let (own_r, own_c, step) = if vec { (w.emit_op(format!("mul nuw nsw i64 {tyi}, {r}")), w.emit_op(format!("mul nuw nsw i64 {tx}, {r}")), 1) } else { (tyi.clone(), tx.clone(), T) };
    for i in 0..if tc.is_some() { 0 } else { r } {
        for j in 0..r {
            let mm = w.emit_op(format!("add nuw nsw i64 {m0}, {own_r}"));
            let mm = w.emit_op(format!("add nuw nsw i64 {mm}, {}", i * step));
            let nn = w.emit_op(format!("add nuw nsw i64 {n0}, {own_c}"));
            let nn = w.emit_op(format!("add nuw nsw i64 {nn}, {}", j * step));
            epilogue(w, acc, &format!("%c{i}.{j}"), &accs_slot, (&mm, m, rows), (&nn, n, cols))?;
        }
    }
    let groups = [cdiv(n, bn), cdiv(m, bm), nb];
    if groups[0] > i32::MAX as i64 || groups[1] > 65535 || groups[2] > 65535 {
        return Err(format!("a tiled matmul of {m}×{n} (batch {nb}) needs a grid of {groups:?} blocks, past CUDA's limits"));
    }
    Ok(([groups[0] as u32, groups[1] as u32, groups[2] as u32], depth))
}

/// The epilogue of one output at (`mm`, `nn`), inside M × N: the accumulator `from` becomes the
/// kernel's accumulator (in `slot`), then `rest` runs.
pub(super) fn epilogue(w: &mut Writer, acc: &Acc, from: &str, slot: &str, (mm, m, rows): (&str, i64, &[(Var, i64)]), (nn, n, cols): (&str, i64, &[(Var, i64)])) -> Result<(), String> {
    let c1 = w.emit_op(format!("icmp slt i64 {mm}, {m}"));
    let c2 = w.emit_op(format!("icmp slt i64 {nn}, {n}"));
    let c = w.emit_op(format!("and i1 {c1}, {c2}"));
    if_(w, &c, &mut |w| {
        epilogue_at(w, acc, from, slot, (mm, rows), (nn, cols));
        Ok(())
    })
}

/// [`epilogue`] without the bounds check, for an output known to be inside M × N (a whole tile's):
/// no branch per output, so the outputs' epilogues (a GELU's erf is ~60 dependent instructions) share
/// one basic block and interleave.
pub(super) fn epilogue_at(w: &mut Writer, acc: &Acc, from: &str, slot: &str, (mm, rows): (&str, &[(Var, i64)]), (nn, cols): (&str, &[(Var, i64)])) {
    let ty = llvm_type(acc.dtype);
    unflatten_inside(w, mm, rows);
    unflatten_inside(w, nn, cols);
    let v = w.emit_op(format!("load {ty}, ptr {from}"));
    w.emit(&format!("store {ty} {v}, ptr {slot}"));
    w.bind_scalar(acc.acc, acc.dtype, slot);
    w.body(acc.rest);
}

/// f32 → the tensor cores' operand: tf32 in a b32 (`cvt.rna`), or two f32 (lower k first) packed as
/// bf16x2 / f16x2 (`cvt.rn`: the first operand goes to the upper half); 3×TF32's is the f32's bits
/// (split at the mma: [`mma_issue_all`]).
pub(super) fn to_operand(w: &mut Writer, kind: Mma, lo: &str, hi: Option<&str>) -> String {
    match (kind, hi) {
        (Mma::Tf32, _) => w.tf32(lo),
        (Mma::Tf32x3, _) => w.emit_op(format!("bitcast float {lo} to i32")),
        (Mma::Bf16, Some(hi)) => w.emit_op(format!("call i32 asm \"cvt.rn.bf16x2.f32 $0, $1, $2;\", \"=r,f,f\"(float {hi}, float {lo}) #2")),
        (_, Some(hi)) => w.emit_op(format!("call i32 asm \"cvt.rn.f16x2.f32 $0, $1, $2;\", \"=r,f,f\"(float {hi}, float {lo}) #2")),
        (_, None) => unreachable!("16-bit operands come in pairs"),
    }
}

/// 3×TF32's small part of f32 `x` whose big part is the tf32 word `big` (`to_operand`'s): tf32(x − big),
/// the difference exact in f32.
pub(super) fn tf32_small(w: &mut Writer, x: &str, big: &str) -> String {
    let bf = w.emit_op(format!("bitcast i32 {big} to float"));
    let d = w.emit_op(format!("fsub float {x}, {bf}"));
    to_operand(w, Mma::Tf32, &d, None)
}

/// The m16×n8 fragments warp `wp` owns in a bm×bn tile: its fragment rows, its fragment columns, and
/// per owned fragment s (accumulators `%d{s}.*`): (index into rows, index into columns, whether it
/// exists — warp-uniform). Four per warp (a 64×64 tile: 32 fragments, 8 warps) form a 2×2 warp tile,
/// warps 2 down × 4 across, so a warp loads two A and two B fragments per k step for its four
/// `mma.sync`; with one per warp, warp wp owns fragment wp (row-major), if there is one (`whole`: wp
/// is known to be below the fragment count — split K's warp index within its group).
type Frags = (Vec<String>, Vec<String>, Vec<(usize, usize, String)>);
fn warp_frags(w: &mut Writer, wp: &str, bm: i64, bn: i64, whole: bool) -> Frags {
    let (mf, nf) = (bm / 16, bn / 8);
    let per_warp = cdiv(mf * nf, 8);
    if per_warp == 4 && mf % 2 == 0 && nf % 2 == 0 && (mf / 2) * (nf / 2) == 8 {
        let wn = nf / 2;
        let wm = w.emit_op(format!("udiv i64 {wp}, {wn}"));
        let wc = w.emit_op(format!("urem i64 {wp}, {wn}"));
        let m0 = w.emit_op(format!("mul nuw nsw i64 {wm}, 2"));
        let n0 = w.emit_op(format!("mul nuw nsw i64 {wc}, 2"));
        let m1 = w.emit_op(format!("add nuw nsw i64 {m0}, 1"));
        let n1 = w.emit_op(format!("add nuw nsw i64 {n0}, 1"));
        let list = (0..4).map(|s| (s / 2, s % 2, "true".to_string())).collect();
        return (vec![m0, m1], vec![n0, n1], list);
    }
    let (mut rows, mut cols, mut list) = (Vec::new(), Vec::new(), Vec::new());
    for s in 0..per_warp {
        let ti = w.emit_op(format!("add nuw nsw i64 {wp}, {}", 8 * s));
        let has = if whole { "true".to_string() } else { w.emit_op(format!("icmp ult i64 {ti}, {}", mf * nf)) };
        rows.push(w.emit_op(format!("udiv i64 {ti}, {nf}")));
        cols.push(w.emit_op(format!("urem i64 {ti}, {nf}")));
        list.push((s as usize, s as usize, has));
    }
    (rows, cols, list)
}

/// One fragment's `mma.sync` (m16n8k8 tf32, m16n8k16 bf16 / f16; f32 accumulation) from its A
/// registers `av` (4) and B registers `bv` (2) into its accumulators `%d{s}.0..3`.
pub(super) fn mma_issue(w: &mut Writer, kind: Mma, s: i64, av: &[String], bv: &[String]) {
    mma_into(w, kind, &format!("%d{s}"), av, bv)
}

/// [`mma_issue`] into the accumulators `{acc}.0..3`.
fn mma_into(w: &mut Writer, kind: Mma, acc: &str, av: &[String], bv: &[String]) {
    let (shape, ab) = match kind {
        Mma::Tf32 | Mma::Tf32x3 => ("m16n8k8", "tf32"),
        Mma::Bf16 => ("m16n8k16", "bf16"),
        Mma::Fp16 | Mma::F32 => ("m16n8k16", "f16"),
    };
    let ins = format!("mma.sync.aligned.{shape}.row.col.f32.{ab}.{ab}.f32 {{$0,$1,$2,$3}}, {{$4,$5,$6,$7}}, {{$8,$9}}, {{$10,$11,$12,$13}};");
    let cv: Vec<String> = (0..4).map(|q| w.emit_op(format!("load float, ptr {acc}.{q}"))).collect();
    let args: Vec<String> = av.iter().chain(bv).map(|x| format!("i32 {x}")).chain(cv.iter().map(|x| format!("float {x}"))).collect();
    let res = w.emit_op(format!("call {{ float, float, float, float }} asm sideeffect \"{ins}\", \"=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f\"({}) #1", args.join(", ")));
    for q in 0..4 {
        let v = w.emit_op(format!("extractvalue {{ float, float, float, float }} {res}, {q}"));
        w.emit(&format!("store float {v}, ptr {acc}.{q}"));
    }
}

/// 3×TF32's second accumulators: fragment s's small products (a_small·b_big, a_big·b_small) sum into
/// `%e{s}.0..3`, from 0, its big ones (a_big·b_big) into `%d{s}.*`; [`fold_small`] adds them after the
/// K loop. Each `mma.sync` rounds its f32 sum toward zero (measured on the H200: one accumulator for
/// all three products left MiniLM batch 8 9.0e-5 from the interpreter, the SIMT tiles 5.1e-6): the big
/// sum takes one such rounding per k step instead of three, the small sum's are ~2⁻¹¹ of it, and the
/// two chains are independent. Other kinds: nothing.
pub(super) fn small_accumulators(w: &mut Writer, kind: Mma, frags: i64) {
    for (s, q) in (0..frags * (kind == Mma::Tf32x3) as i64).flat_map(|s| (0..4).map(move |q| (s, q))) {
        w.slot(&format!("%e{s}.{q}"), "float");
        w.emit(&format!("store float 0.0, ptr %e{s}.{q}"));
    }
}

/// `%d{s}.q += %e{s}.q` for 3×TF32's fragments ([`small_accumulators`]); other kinds: nothing.
pub(super) fn fold_small(w: &mut Writer, kind: Mma, frags: i64) {
    for (s, q) in (0..frags * (kind == Mma::Tf32x3) as i64).flat_map(|s| (0..4).map(move |q| (s, q))) {
        let d = w.emit_op(format!("load float, ptr %d{s}.{q}"));
        let e = w.emit_op(format!("load float, ptr %e{s}.{q}"));
        let t = w.emit_op(format!("fadd float {d}, {e}"));
        w.emit(&format!("store float {t}, ptr %d{s}.{q}"));
    }
}

/// The `mma.sync`s of one k step, one `(accumulator s, A registers, B registers)` per fragment, in
/// order. 3×TF32 (`Mma::Tf32x3`): the registers hold f32 bits; each distinct register is split once,
/// big = tf32(x) (`cvt.rna`) and small = tf32(x − big) (the difference is exact in f32), and the
/// fragments take three passes in order — a_small·b_big and a_big·b_small into the small
/// accumulators ([`small_accumulators`]), a_big·b_big into the fragment's own (small·small, ~2⁻²² of
/// the product, dropped) — each pass over every fragment, so a fragment's dependent `mma.sync`s are
/// not back to back. An infinite operand gives NaN (small = ∞ − ∞), as CUTLASS's 3xTF32 does.
/// Other kinds: one `mma_issue` per fragment, as before.
pub(super) fn mma_issue_all(w: &mut Writer, kind: Mma, issues: &[(i64, &[String], &[String])]) {
    mma_issue_known(w, kind, issues, Vec::new())
}

/// [`mma_issue_all`] where some registers' 3×TF32 parts are known already, `(register, big, small)`
/// — operands staged split (`attention_mma.rs`) —: those are not split again.
pub(super) fn mma_issue_known(w: &mut Writer, kind: Mma, issues: &[(i64, &[String], &[String])], known: Vec<(String, String, String)>) {
    if kind != Mma::Tf32x3 {
        for (s, av, bv) in issues {
            mma_issue(w, kind, *s, av, bv);
        }
        return;
    }
    let mut parts = known;
    let mut split = |w: &mut Writer, regs: &[String]| -> (Vec<String>, Vec<String>) {
        regs.iter()
            .map(|x| {
                if let Some(p) = parts.iter().find(|p| &p.0 == x) {
                    return (p.1.clone(), p.2.clone());
                }
                let f = w.emit_op(format!("bitcast i32 {x} to float"));
                let big = to_operand(w, Mma::Tf32, &f, None);
                let small = tf32_small(w, &f, &big);
                parts.push((x.clone(), big.clone(), small.clone()));
                (big, small)
            })
            .unzip()
    };
    let halves: Vec<_> = issues.iter().map(|(s, av, bv)| (*s, split(w, av), split(w, bv))).collect();
    for (a_small, b_small) in [(true, false), (false, true), (false, false)] {
        for (s, (ab, asm), (bb, bsm)) in &halves {
            let acc = if a_small || b_small { format!("%e{s}") } else { format!("%d{s}") };
            mma_into(w, Mma::Tf32, &acc, if a_small { asm } else { ab }, if b_small { bsm } else { bb });
        }
    }
}

/// One K slice on the tensor cores: per k step (8 for tf32 m16n8k8, 16 for bf16/f16 m16n8k16) each
/// warp loads the A fragments of its fragment rows and the B fragments of its fragment columns from
/// shared memory once, in the PTX ISA's layouts (lane = 4·g + t; tf32: a_r at (g + 8·(r % 2),
/// t + 4·(r / 2)), b_r at (k = t + 4·r, n = g); bf16/f16 the same with pairs of adjacent k), and
/// issues one `mma.sync` per fragment it owns ([`frag_at`]), accumulating in f32. tf32 operands were
/// rounded when staged; bf16/f16 pairs are packed here, or were packed when staged (`packed`: shared
/// memory holds 32-bit words of two adjacent K values, a fragment register is one load).
#[allow(clippy::too_many_arguments)]
fn mma_step(w: &mut Writer, kind: Mma, packed: bool, (sa, la, pa): (&str, i64, i64), (sb, lb, pb): (&str, i64, i64), (wp, gq, tq): (&str, &str, &str), bm: i64, bn: i64, tk: i64, whole: bool) -> Result<(), String> {
    let kstep = if kind.tf32() { 8 } else { 16 };
    let (rows_of, cols_of, frags) = warp_frags(w, wp, bm, bn, whole);
    let t2 = w.emit_op(format!("shl i64 {tq}, 1"));
    let lda = |w: &mut Writer, ar: &str, row_off: i64, k: String| {
        let row = w.emit_op(format!("add nuw nsw i64 {ar}, {row_off}"));
        let t = w.emit_op(format!("mul nuw nsw i64 {row}, {pa}"));
        let idx = w.emit_op(format!("add nuw nsw i64 {t}, {k}"));
        let p = shared_at(w, sa, la, "float", &idx);
        w.emit_op(format!("load float, ptr addrspace(3) {p}"))
    };
    let ldb = |w: &mut Writer, bc: &str, k: String| {
        let t = w.emit_op(format!("mul nuw nsw i64 {k}, {pb}"));
        let idx = w.emit_op(format!("add nuw nsw i64 {t}, {bc}"));
        let p = shared_at(w, sb, lb, "float", &idx);
        w.emit_op(format!("load float, ptr addrspace(3) {p}"))
    };
    // Packed words: A register rr at (row g + 8·(rr % 2), word t + k0/2 + 4·(rr / 2)); B register rr
    // at (word row t + k0/2 + 4·rr, column g).
    let word = |w: &mut Writer, sh: &str, len: i64, idx: String| {
        let p = shared_at(w, sh, len, "i32", &idx);
        w.emit_op(format!("load i32, ptr addrspace(3) {p}"))
    };
    // A fragment of fragment row `mt`: four operands; B of fragment column `nt`: two.
    let frag_a = |w: &mut Writer, mt: &str, k0: i64| -> Vec<String> {
        let ar = w.emit_op(format!("mul nuw nsw i64 {mt}, 16"));
        let ar = w.emit_op(format!("add nuw nsw i64 {ar}, {gq}"));
        (0..4)
            .map(|rr| {
                if packed {
                    let row = w.emit_op(format!("add nuw nsw i64 {ar}, {}", 8 * (rr % 2)));
                    let t = w.emit_op(format!("mul nuw nsw i64 {row}, {pa}"));
                    let t = w.emit_op(format!("add nuw nsw i64 {t}, {tq}"));
                    let idx = w.emit_op(format!("add nuw nsw i64 {t}, {}", k0 / 2 + 4 * (rr / 2)));
                    word(w, sa, la, idx)
                } else if kind.tf32() {
                    let k = w.emit_op(format!("add nuw nsw i64 {tq}, {}", k0 + 4 * (rr / 2)));
                    let x = lda(w, &ar, 8 * (rr % 2), k);
                    w.emit_op(format!("bitcast float {x} to i32"))
                } else {
                    let k = w.emit_op(format!("add nuw nsw i64 {t2}, {}", k0 + 8 * (rr / 2)));
                    let k1 = w.emit_op(format!("add nuw nsw i64 {k}, 1"));
                    let x0 = lda(w, &ar, 8 * (rr % 2), k);
                    let x1 = lda(w, &ar, 8 * (rr % 2), k1);
                    to_operand(w, kind, &x0, Some(&x1))
                }
            })
            .collect()
    };
    let frag_b = |w: &mut Writer, nt: &str, k0: i64| -> Vec<String> {
        let bc = w.emit_op(format!("mul nuw nsw i64 {nt}, 8"));
        let bc = w.emit_op(format!("add nuw nsw i64 {bc}, {gq}"));
        (0..2)
            .map(|rr| {
                if packed {
                    let kr = w.emit_op(format!("add nuw nsw i64 {tq}, {}", k0 / 2 + 4 * rr));
                    let t = w.emit_op(format!("mul nuw nsw i64 {kr}, {pb}"));
                    let idx = w.emit_op(format!("add nuw nsw i64 {t}, {bc}"));
                    word(w, sb, lb, idx)
                } else if kind.tf32() {
                    let k = w.emit_op(format!("add nuw nsw i64 {tq}, {}", k0 + 4 * rr));
                    let x = ldb(w, &bc, k);
                    w.emit_op(format!("bitcast float {x} to i32"))
                } else {
                    let k = w.emit_op(format!("add nuw nsw i64 {t2}, {}", k0 + 8 * rr));
                    let k1 = w.emit_op(format!("add nuw nsw i64 {k}, 1"));
                    let x0 = ldb(w, &bc, k);
                    let x1 = ldb(w, &bc, k1);
                    to_operand(w, kind, &x0, Some(&x1))
                }
            })
            .collect()
    };
    let all = frags.iter().all(|f| f.2 == "true");
    for k0 in (0..tk).step_by(kstep) {
        if all {
            // Every fragment exists: each A / B fragment is loaded once, then the mmas.
            let av: Vec<Vec<String>> = rows_of.iter().map(|mt| frag_a(w, mt, k0)).collect();
            let bv: Vec<Vec<String>> = cols_of.iter().map(|nt| frag_b(w, nt, k0)).collect();
            let issues: Vec<_> = frags.iter().enumerate().map(|(s, (i, j, _))| (s as i64, &av[*i][..], &bv[*j][..])).collect();
            mma_issue_all(w, kind, &issues);
        } else {
            for (s, (i, j, has)) in frags.iter().enumerate() {
                if_(w, has, &mut |w| {
                    let av = frag_a(w, &rows_of[*i], k0);
                    let bv = frag_b(w, &cols_of[*j], k0);
                    mma_issue_all(w, kind, &[(s as i64, &av, &bv)]);
                    Ok(())
                })?;
            }
        }
    }
    Ok(())
}

/// One warp per grid point (row), [`rows_per_block`] warps per block: the phases in order; for a row
/// reduction (`reduce`), lane 0 then runs the reduction's `rest`. Returns the grid and the block.
fn rows_kernel(w: &mut Writer, li: usize, phases: &[Phase], reduce: Option<&Acc>, grid: &[(Var, i64)], globals: &mut Vec<String>) -> Result<([u32; 3], u32), String> {
    let total: i64 = grid.iter().map(|d| d.1).product::<i64>().max(1);
    // Several warps per row (one row per block), or several rows (one warp each) per block.
    let wpr = warps_per_row(total);
    let rpb = if wpr > 1 { 1 } else { rows_per_block(total) };
    let st = 32 * wpr;
    let tid = sreg(w, "tid.x");
    let warp = w.emit_op(format!("lshr i64 {tid}, 5"));
    // `wl`: the lane in its warp; `lane`: the thread's index among the row's threads.
    let wl = w.emit_op(format!("and i64 {tid}, 31"));
    let cx = sreg(w, "ctaid.x");
    let (lane, g) = if wpr > 1 {
        (tid.clone(), cx)
    } else {
        let g0 = w.emit_op(format!("mul nuw nsw i64 {cx}, {rpb}"));
        (wl.clone(), w.emit_op(format!("add nuw nsw i64 {g0}, {warp}")))
    };
    let lt = w.emit_op(format!("icmp slt i64 {g}, {}", total - 1));
    let gi = w.emit_op(format!("select i1 {lt}, i64 {g}, i64 {}", total - 1));
    let inside = w.emit_op(format!("icmp slt i64 {g}, {total}"));
    unflatten(w, &gi, grid);
    for (pi, p) in phases.iter().enumerate() {
        match p {
            Phase::Reduce(acc) => {
                let d = acc.dtype;
                let ty = llvm_type(d);
                let sfx = match d {
                    DType::F32 => "f32",
                    DType::I32 | DType::U32 => "i32",
                    _ => return Err(format!("a row reduction over {d} has no warp shuffle")),
                };
                let slot = format!("%s.v{}", acc.acc.0);
                w.slot(&slot, ty);
                let init = w.value(acc.init);
                w.emit(&format!("store {ty} {init}, ptr {slot}"));
                w.bind_scalar(acc.acc, d, &slot);
                let kn: i64 = acc.ks.iter().map(|d| d.1).product();
                let f = format!("%s.f{pi}");
                lane_loop(w, &f, &lane, kn, st, false, &mut |w| {
                    let fv = w.emit_op(format!("load i64, ptr {f}"));
                    unflatten(w, &fv, &acc.ks);
                    let x = w.value(acc.x);
                    let cur = w.emit_op(format!("load {ty}, ptr {slot}"));
                    let s = w.bin(acc.op, d, &cur, &x);
                    w.emit(&format!("store {ty} {s}, ptr {slot}"));
                    Ok(())
                })?;
                w.declare(&format!("declare {ty} @llvm.nvvm.shfl.sync.bfly.{sfx}(i32, {ty}, i32, i32)"));
                for off in [16, 8, 4, 2, 1] {
                    let cur = w.emit_op(format!("load {ty}, ptr {slot}"));
                    let o = w.emit_op(format!("call {ty} @llvm.nvvm.shfl.sync.bfly.{sfx}(i32 -1, {ty} {cur}, i32 {off}, i32 31)"));
                    let s = w.bin(acc.op, d, &cur, &o);
                    w.emit(&format!("store {ty} {s}, ptr {slot}"));
                }
                if wpr > 1 {
                    // The warps' totals through shared memory: lane 0 of each writes its own, then every
                    // thread folds them in warp order (the same bits in every thread). Each reduction
                    // has its own array, so no second barrier guards its reuse.
                    let sh = format!("@sr{li}_{pi}");
                    globals.push(format!("{sh} = internal addrspace(3) global [{wpr} x {ty}] undef, align 16"));
                    let first = w.emit_op(format!("icmp eq i64 {wl}, 0"));
                    if_(w, &first, &mut |w| {
                        let cur = w.emit_op(format!("load {ty}, ptr {slot}"));
                        let p = shared_at(w, &sh, wpr, ty, &warp);
                        w.emit(&format!("store {ty} {cur}, ptr addrspace(3) {p}"));
                        Ok(())
                    })?;
                    barrier(w);
                    let p0 = shared_at(w, &sh, wpr, ty, "0");
                    let mut tot = w.emit_op(format!("load {ty}, ptr addrspace(3) {p0}"));
                    for i in 1..wpr {
                        let p = shared_at(w, &sh, wpr, ty, &i.to_string());
                        let v = w.emit_op(format!("load {ty}, ptr addrspace(3) {p}"));
                        tot = w.bin(acc.op, d, &tot, &v);
                    }
                    w.emit(&format!("store {ty} {tot}, ptr {slot}"));
                }
            }
            Phase::Scalar(st) => w.body(std::slice::from_ref(*st)),
            Phase::Map { var, extent, body } => {
                let slot = format!("%s.v{}", var.0);
                // Stores held back where few warps share the SMs (a LayerNorm's one memory latency per
                // element is then the row's time: MiniLM batch 8's 1,024 rows × 2 warps 4% faster on an
                // H100, session 32); with many (batch 32's 4,096) the other warps hid that latency and the
                // held values cost more (4–14% slower).
                let defer = defers(body) && (total * wpr <= DEFER_ROW_WARPS || defer_all());
                if_(w, &inside, &mut |w| {
                    lane_loop(w, &slot, &lane, *extent, st, defer, &mut |w| {
                        w.bind_index(*var, &slot);
                        w.body(body);
                        Ok(())
                    })
                })?;
            }
        }
    }
    if let Some(acc) = reduce {
        let first = w.emit_op(format!("icmp eq i64 {lane}, 0"));
        let c = w.emit_op(format!("and i1 {first}, {inside}"));
        if_(w, &c, &mut |w| {
            w.body(acc.rest);
            Ok(())
        })?;
    }
    let blocks = cdiv(total, rpb);
    if blocks > i32::MAX as i64 {
        return Err(format!("a row kernel of {total} rows needs more than 2^31 - 1 blocks"));
    }
    Ok(([blocks as u32, 1, 1], (32 * rpb * wpr) as u32))
}
