//! Tensor-core matmul tiles (`--precision tf32|bf16|fp16`, and f32 by 3×TF32: `Mma::Tf32x3`, staged as
//! tf32 is but unrounded, each fragment register split where loaded) for whole tiles of f32 operands read
//! straight from memory and contiguous along K (MiniLM's projections: activations [rows, K] times a
//! Linear weight [N, K]). The general form (`tiled.rs`) stages each element by evaluating the
//! operand's expression; this one loads four consecutive K values of a row as one aligned 128-bit
//! global load from a pointer computed once per thread (the slice's K start added per step), so a
//! slice's staging is a few vector loads per thread, and uses larger block tiles: 8 warps, 2 along M
//! × 4 along N (4 × 2 for 64×48), each a (bm/2)×(bn/4) tile of m16×n8 fragments (128×128: 4×4
//! fragments, 16 `mma.sync` per k step sharing 4 A and 4 B fragments). Under bf16 / fp16 an operand
//! read from the weights is staged from its 16-bit copy (`half_weights.rs`): eight K values per
//! 128-bit load, stored to shared memory as they are.
//!
//! Per K slice (64 or 32: [`tile`]) the next slice's vectors are loaded into registers while this one
//! computes (as in `tiled.rs`), between two barriers. Shared memory holds both operands row-major
//! along K (a: bm rows, b: bn rows), tf32 rounded (`cvt.rna`) or bf16 / fp16 pairs packed when
//! stored, rows padded by four words (a fragment's lanes 4·g + t read row g, word t: 32 banks).
//!
//! Taken when the operand is `buf[e + k]` with `e` free of k and a multiple of four elements (checked
//! on the expression) — or `buf[e + (k / E)·S + k % E]`, an attention context read across its heads
//! of E values (MiniLM's output projection: E = 32), whose slices step by the k-terms' value at the
//! slice start ([`direct`]; `RLX_CUDA_VEC_HEADS=0` at compile time: not taken) —, the buffer 16-byte
//! aligned, and M, N, K multiples of the tile and the slice; anything else keeps `tiled.rs`'s form. `RLX_CUDA_VEC_TILE` at compile time: `0` turns this form off,
//! `BMxBN` (one of [`TILES`]) forces a tile, `RLX_CUDA_VEC_TK=32` the shorter slice, to time them
//! against each other (tests/gpu/bench_gemm.py).
//!
//! (The same staging for f32 on the SIMT cores — 128×128 / 128×64 / 64×64 tiles, 8×8 / 8×4 / 4×4
//! outputs per thread, both operands K-major in shared memory — was measured on the H200 against
//! `tiled.rs`'s R×R tiles at MiniLM's batch 8 / 32 shapes: 9–14% faster on three of six, 6–10%
//! slower on three, ~4% on a whole layer's matmuls; not kept.)

use super::tiled::{barrier, epilogue, epilogue_at, fold_small, for_loop, if_, mma_issue_all, shared_at, small_accumulators, sreg, to_operand, unflatten};
use super::half_weights::Halves;
use super::Mma;
use crate::ir::Writer;
use rlx_ir::loops::grid::mentions;
use rlx_ir::loops::tiled::{cdiv, Acc};
use rlx_ir::loops::{Expr, IOp, Var};
use rlx_ir::DType;

/// Blocks a tile must give (else a smaller one, else `tiled.rs`'s form): about half a wave on an
/// H200's 132 SMs (measured: MiniLM b32's 4096×384 matmuls run fastest on the tensor cores as 96
/// blocks of 128×128, its b8 ones as 96 of 64×64).
const MIN_BLOCKS: i64 = 64;
/// Static shared memory a block may use (48 KiB without the dynamic opt-in).
const SMEM: i64 = 48 * 1024;

/// An operand read as `buf[index]`, contiguous along K.
pub struct Direct<'e> {
    pub buf: u32,
    pub index: &'e Expr,
    /// `rest` is a multiple of 8: a 16-bit copy's 128-bit loads (8 K values) are aligned too.
    pub by8: bool,
    /// The index's terms in k (`index = rest + kpart`): `k`, or `(k / E)·S + k % E` (an attention
    /// context read across heads of E values); with k = k0 + kq, k0 a multiple of the K slice, the
    /// element at kq is the one at k = kq moved by kpart(k0) ([`Direct::period`]).
    pub kpart: Expr,
    /// E, where kpart splits k into blocks of E: the K slice must divide E or be a multiple of it.
    pub period: Option<i64>,
    /// The buffer holds the tensor cores' 16-bit operands themselves (`half_activations.rs`), read as
    /// `cast(buf[index])` to f32: staged from it as from a weight's 16-bit copy, never as f32.
    pub half: bool,
}

/// Whether the index expression `e` is a multiple of `q` whatever its variables' values.
fn multiple_of(e: &Expr, q: i64) -> bool {
    match e {
        Expr::Int(c) => c % q == 0,
        Expr::I(IOp::Mul, a, b) => multiple_of(a, q) || multiple_of(b, q),
        Expr::I(IOp::Add | IOp::Sub, a, b) => multiple_of(a, q) && multiple_of(b, q),
        _ => false,
    }
}

/// The summands of a tree of additions.
fn summands<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match e {
        Expr::I(IOp::Add, a, b) => {
            summands(a, out);
            summands(b, out);
        }
        _ => out.push(e),
    }
}

/// A summand in `k`: `k` (unit stride), `k % E` (unit stride within blocks of E), or `(k / E)·S`
/// (constant within them): (unit stride, E, the multiplier S).
fn k_term(e: &Expr, k: Var) -> Option<(bool, Option<i64>, Option<&Expr>)> {
    let div = |x: &Expr| match x {
        Expr::I(IOp::Div, v, c) if matches!(**v, Expr::Var(w) if w == k) => match **c {
            Expr::Int(c) if c > 0 => Some(c),
            _ => None,
        },
        _ => None,
    };
    match e {
        Expr::Var(v) if *v == k => Some((true, None, None)),
        Expr::I(IOp::Rem, v, c) if matches!(**v, Expr::Var(w) if w == k) => match **c {
            Expr::Int(c) if c > 0 => Some((true, Some(c), None)),
            _ => None,
        },
        Expr::I(IOp::Mul, a, b) if !mentions(b, k) => Some((false, Some(div(a)?), Some(&**b))),
        Expr::I(IOp::Mul, a, b) if !mentions(a, k) => Some((false, Some(div(b)?), Some(&**a))),
        _ => None,
    }
}

/// `x` as a direct operand: an f32 load `buf[rest + kpart]`, `rest` free of k and a multiple of 4,
/// `kpart` one unit-stride term in k and terms constant within the same blocks of E ≥ 4 values
/// (`k_term`; multipliers multiples of 4), the buffer at a 16-byte aligned offset (`params`: each
/// buffer's dtype and byte offset in its base; every base is its own device allocation) — or such a
/// load of `half`'s 16-bit values cast to f32 (the tensor cores' own operand type: `--precision
/// bf16|fp16`), `rest` then a multiple of 8 (whole 128-bit loads).
pub fn direct<'e>(x: &'e Expr, k: Var, params: &[(DType, u64)], half: Option<DType>) -> Option<Direct<'e>> {
    let (buf, index, want) = match x {
        Expr::Load { buf, index } => (buf, index, DType::F32),
        Expr::Cast { from, to: DType::F32, x } if Some(*from) == half => match &**x {
            Expr::Load { buf, index } => (buf, index, *from),
            _ => return None,
        },
        _ => return None,
    };
    let &(d, off) = params.get(*buf as usize)?;
    let mut terms = Vec::new();
    summands(index, &mut terms);
    let (mut rest, mut kpart, mut units, mut period, mut by8) = (Expr::Int(0), Expr::Int(0), 0, None, true);
    for t in terms {
        if !mentions(t, k) {
            rest = Expr::add(rest, t.clone());
            continue;
        }
        let (unit, e, mul) = k_term(t, k)?;
        units += unit as i64;
        if let Some(e) = e {
            if period.is_some_and(|p| p != e) || e % 4 != 0 {
                return None;
            }
            by8 &= e % 8 == 0;
            period = Some(e);
        }
        if let Some(m) = mul {
            if !multiple_of(m, 4) {
                return None;
            }
            by8 &= multiple_of(m, 8);
        }
        kpart = Expr::add(kpart, t.clone());
    }
    by8 &= multiple_of(&rest, 8);
    // RLX_CUDA_VEC_HEADS=0 at compile time: only `rest + k` (operands read across heads keep tiled.rs's form).
    if period.is_some() && std::env::var("RLX_CUDA_VEC_HEADS").is_ok_and(|v| v == "0") {
        return None;
    }
    let half = want != DType::F32;
    (units == 1 && d == want && (by8 || !half) && off % 16 == 0 && multiple_of(&rest, 4)).then_some(Direct { buf: *buf, index, by8, kpart, period, half })
}

/// An error when operand `x` holds 16-bit values (`Direct::half`) and `copy` (where it is staged from
/// 16-bit values) is none: `tiled.rs` takes a tile only where every form stages such an operand so.
pub(super) fn unstaged_half(x: &Direct, copy: Option<(usize, u64)>) -> Result<(), String> {
    match x.half && copy.is_none() {
        true => Err("internal error: a 16-bit activation staged as f32".into()),
        false => Ok(()),
    }
}

/// The block tile (bm, bn) and K slice of an M×N matmul (`nb` of them) over K, or `None` (this form
/// not taken): the largest of [`FILLING`] whose grid fills ≥ [`FILL`] of its last wave, else the
/// largest of 128×128, 128×64, 64×64 whose grid still has [`MIN_BLOCKS`] blocks; whole tiles only.
/// Fewer blocks keep `tiled.rs`'s smaller tiles (MiniLM batch 1, M = 128: its 12-block 64×64 grids
/// measured 1.25–1.37× slower over the whole model). The slice: 64 where both operands' slices fit
/// [`SMEM`], K is a multiple and each operand's slice is a whole number of vectors per thread (each
/// step's loads, all in flight together, feed twice the work), else 32. `RLX_CUDA_VEC_TILE` /
/// `RLX_CUDA_VEC_TK` override (module doc).
pub fn tile(m: i64, n: i64, nb: i64, k: i64, kind: Mma, periods: [Option<i64>; 2]) -> Option<(i64, i64, i64)> {
    if k % 32 != 0 || k == 0 {
        return None;
    }
    let whole = |&(bm, bn): &(i64, i64)| m % bm == 0 && n % bn == 0;
    let blocks = |(bm, bn): (i64, i64)| (m / bm) * (n / bn) * nb;
    let pick = [(128, 128), (128, 64), (64, 64)].into_iter().filter(whole).find(|&t| blocks(t) >= MIN_BLOCKS);
    // Before that: the largest tile whose blocks fill their last wave on the SMs (`FILL`).
    let fill = |t: (i64, i64)| blocks(t) as f64 / (cdiv(blocks(t), SMS) * SMS) as f64;
    let fills = std::env::var("RLX_CUDA_VEC_FILL").map_or(true, |v| v != "0");
    let pick = FILLING.into_iter().filter(|t| fills && whole(t) && blocks(*t) >= MIN_BLOCKS && fill(*t) >= FILL).max_by_key(|&(bm, bn)| (bm * bn, bm)).or(pick);
    // Where no tile fills FILL of its last wave: the one of FILLING with MIN_BLOCKS blocks that fills
    // it best (the largest among equals) rather than the largest by block count. MiniLM batch 8's Q/K/V
    // merged along N (1024 × 1152; rlx_opt::merge_matmuls): 96 blocks of 128×96 (fill 0.73) against 72
    // of 128×128 (0.55), launched alone f32 37.6 → 32.2 µs, tf32 23.1 → 21.0, bf16 16.7 → 15.2 (H200,
    // docs/benchmarks.md session 21); MiniLM's other matmuls at batch 1 / 8 / 32 pick the same tiles as
    // before. `RLX_CUDA_VEC_BEST_FILL=0` at compile time: the largest by block count.
    let best = std::env::var("RLX_CUDA_VEC_BEST_FILL").map_or(true, |v| v != "0");
    let pick = match pick {
        Some(t) if best && fills && fill(t) < FILL => FILLING.into_iter().filter(|t| whole(t) && blocks(*t) >= MIN_BLOCKS).max_by_key(|&(bm, bn)| ((fill((bm, bn)) * 1e6) as i64, bm * bn, bm)).or(Some(t)),
        p => p,
    };
    let pick = match std::env::var("RLX_CUDA_VEC_TILE").ok().as_deref() {
        Some("0") => return None,
        Some(v) => v.split_once('x').and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?))).filter(|t| TILES.contains(t)).map_or(pick, |t| whole(&t).then_some(t)),
        None => pick,
    };
    let (bm, bn) = pick?;
    // Shared words: bm + bn rows of tk/pk + 4 words (the narrow [`Layout`]; the paired one takes
    // fewer); each of the 256 threads stages whole f32 vectors of both operands' slices (bm·tk/4 and
    // bn·tk/4 of them).
    let pk = if kind.tf32() { 1 } else { 2 };
    let blocks_of_e = |tk: i64| periods.iter().flatten().all(|&e| e % tk == 0 || tk % e == 0);
    let fits = |tk: i64| (bm + bn) * (tk / pk + 4) * 4 <= SMEM && k % tk == 0 && bm * tk / 4 % 256 == 0 && bn * tk / 4 % 256 == 0 && blocks_of_e(tk);
    let long = fits(64) && std::env::var("RLX_CUDA_VEC_TK").map_or(true, |v| v != "32");
    if long {
        Some((bm, bn, 64))
    } else {
        fits(32).then_some((bm, bn, 32))
    }
}

/// SMs of an H200: a wave of one block per SM.
const SMS: i64 = 132;
/// The share of its last wave a tile's grid must fill to be chosen over the rule by block count
/// ([`tile`]), among [`FILLING`]: MiniLM's N = 384 matmuls at batch 32 (4096 rows) as 96 blocks of
/// 128×128 left 36 of the 132 SMs idle; as 128 blocks of 128×96 they took 15–21% less time
/// (tests/gpu/bench_gemm.py on the H200: FFN down bf16 39.4 → 33.9 µs, tf32 68.0 → 56.0; 384×384
/// bf16 21.3 → 17.0, tf32 27.3 → 22.1), and batch 8's FFN up (1024×1536) as 128 blocks of 128×96
/// instead of 96 of 128×128 6–11% less (bf16 23.9 → 21.3, tf32 30.3 → 28.5). `RLX_CUDA_VEC_FILL=0`
/// at compile time: the block-count rule alone.
const FILL: f64 = 0.9;
const FILLING: [(i64, i64); 5] = [(128, 128), (128, 96), (128, 64), (64, 96), (64, 64)];

/// Block tiles this form writes (`RLX_CUDA_VEC_TILE` may force any of them).
const TILES: [(i64, i64); 7] = [(128, 128), (128, 96), (128, 64), (64, 128), (64, 96), (64, 64), (64, 48)];

/// A tile block's thread id and first row and column (ctaid.y · bm, ctaid.x · bn) as i64 values, its
/// batch variables unflattened from ctaid.z, and the K loop variable `kv` bound to a slot of its own
/// (returned last).
pub(super) fn block_origin(w: &mut Writer, (bm, bn): (i64, i64), batch: &[(Var, i64)], kv: Var) -> (String, String, String, String) {
    let tid = sreg(w, "tid.x");
    let (cx, cy, cz) = (sreg(w, "ctaid.x"), sreg(w, "ctaid.y"), sreg(w, "ctaid.z"));
    let m0 = w.emit_op(format!("mul nuw nsw i64 {cy}, {bm}"));
    let n0 = w.emit_op(format!("mul nuw nsw i64 {cx}, {bn}"));
    unflatten(w, &cz, batch);
    let kslot = format!("%s.v{}", kv.0);
    w.slot(&kslot, "i64");
    w.bind_index(kv, &kslot);
    (tid, m0, n0, kslot)
}

/// The 8 warps of a bm×bn tile as (along M, along N): 2 × 4, or 4 × 2 where a quarter of bn is not
/// a whole number of 8-wide fragments (64×48: warps of 16×24). Each warp's tile is whole fragments.
pub(super) fn warp_grid(bn: i64) -> (i64, i64) {
    if (bn / 4) % 8 == 0 { (2, 4) } else { (4, 2) }
}

/// How a staged slice (`d` words per row: a tf32 value or a bf16 / fp16 pair each) sits in shared
/// memory and how the fragments are read from it. `paired` (the default where `d` is a multiple of
/// 16 and each thread stages an even number of A's f32 vectors): K is permuted alike in both
/// operands within each 16-word group, step 2c + u of the group taking words x, x + 1 with
/// x = 16c + 4t + 2u for lane t (its registers a0 / a2 of an A row, b0 / b1), so that each register
/// set an `mma.sync` takes comes from one 128-bit shared load, in order: A's rows r and r + 8 of
/// each 16-row block are stored interleaved word by word (pair (r / 16)·8 + r % 8, `2d + 4` words
/// a pair: word w of row r at 2w + (r / 8) % 2), so [a0, a1, a2, a3] is words 2x..2x + 3 of the
/// lane's pair — one load per fragment per step; B's rows are `d` words (odd rows' 16-word groups
/// swapped in pairs, w at w ^ 16, where d ≥ 32), and [b0, b1] of steps 2c and 2c + 1 are words
/// 16c + 4t..+3 of the row — one load per fragment per two steps. A quarter-warp's loads cover 32
/// banks (A: pairs g, g + 1 at 8t + 0..3, 4 apart mod 32; B: 16-word halves of two rows). A thread
/// stages rows r and r + 8 of A at the same K and stores them interleaved, 128 bits at a time.
/// Measured on the H200 (ncu, bench_gemm.py's b32 FFN down bf16), `narrow`: shared loads were 2.2M
/// of the kernel's 5.6M warp instructions and half its stall samples, nearly all `mio_throttle`
/// (the shared-memory instruction queue full; no bank conflicts); 128-bit loads of both operands'
/// rows (two steps' registers, K permuted) cut them 4× but each A fragment then needed register
/// moves (3.4M IMAD / MOV: the kernel's instructions 5.6M → 8.3M, no faster) — hence A's pairs.
/// Paired, MiniLM's matmul kernels (device time, each launched alone; the `_lds32` twins of
/// tests/gpu/bench_cuda.py in the same run): bf16 b32 1,243 → 1,214 µs, tf32 b8 744 → 698, tf32
/// b32 1,654 → 1,649, bf16 b8 560 → 568.
/// `narrow` (RLX_CUDA_VEC_LDS=32 at compile time, and where paired does not apply): rows of d + 4
/// words, each register a 32-bit load of word t (+ 4) of a step's 8 (lanes 4g + t: 32 banks).
#[derive(Clone, Copy)]
struct Layout {
    d: i64,
    paired: bool,
}

impl Layout {
    /// `a_vectors`: f32 vectors of A each thread stages per slice.
    fn of(d: i64, a_vectors: i64) -> Layout {
        let paired = d % 16 == 0 && a_vectors % 2 == 0 && std::env::var("RLX_CUDA_VEC_LDS").map_or(true, |v| v != "32");
        Layout { d, paired }
    }
    /// A's words per pair of rows (paired) or per row, and B's per row.
    fn pitch(&self) -> (i64, i64) {
        if self.paired { (2 * self.d + 4, self.d) } else { (self.d + 4, self.d + 4) }
    }
    fn swizzle(&self) -> bool {
        self.paired && self.d >= 32
    }
}

/// The matmul kernel's body (see the module doc); returns its grid. `ptrs`: each buffer's element
/// pointer (the kernel's parameters).
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    w: &mut Writer, li: usize, acc: &Acc, (a, b): (&Direct, &Direct), ptrs: &[String], (rows, cols, batch): (&[(Var, i64)], &[(Var, i64)], &[(Var, i64)]), (bm, bn, tk): (i64, i64, i64), kind: Mma,
    smem: i64, wgmma: bool, halves: &mut Halves, globals: &mut Vec<String>,
) -> Result<([u32; 3], u32), String> {
    // RLX_CUDA_WGMMA=1|2 at compile time under --sm 90, bf16 / tf32 / f32: Hopper's wgmma (wgmma.rs).
    if wgmma {
        if let Some(r) = super::wgmma::matmul(w, acc, (a, b), ptrs, (rows, cols, batch), (bm, bn), kind, smem, halves, globals)? {
            return Ok(r);
        }
    }
    // RLX_CUDA_VEC_STAGES=2..4 at compile time: the cp.async pipeline (cp_async.rs) instead.
    if let Some(stages) = super::cp_async::stages(kind) {
        if let Some(r) = super::cp_async::matmul(w, acc, (a, b), ptrs, (rows, cols, batch), (bm, bn, tk), kind, (stages, smem), halves, globals)? {
            return Ok(r);
        }
    }
    let (m, n, nb): (i64, i64, i64) = (rows.iter().map(|d| d.1).product(), cols.iter().map(|d| d.1).product(), batch.iter().map(|d| d.1).product());
    let (kv, kext) = acc.ks[0];
    let packed = !kind.tf32();
    // Shared memory in 32-bit words, rows of pw words: a tf32 value, or a bf16 / fp16 pair of
    // adjacent K values.
    let pk = if packed { 2 } else { 1 };
    // Each operand's 16-bit copy, if staged from one (A first: the copies' order in the weights).
    let copies: Vec<Option<(usize, u64)>> = [(a, bm), (b, bn)].iter().map(|(x, own)| if packed && x.by8 && own * (tk / 8) % 256 == 0 { halves.of_param(x.buf) } else { None }).collect();
    unstaged_half(a, copies[0])?;
    unstaged_half(b, copies[1])?;
    let lay = Layout::of(tk / pk, bm * tk / if copies[0].is_some() { 8 } else { 4 } / 256);
    let (pa, pb) = lay.pitch();
    let pw = pa;
    let (la, lb) = if lay.paired { (bm / 2 * pa, bn * pb) } else { (bm * pa, bn * pb) };
    let (sa, sb) = (format!("@sa{li}"), format!("@sb{li}"));
    globals.push(format!("{sa} = internal addrspace(3) global [{la} x i32] undef, align 16"));
    globals.push(format!("{sb} = internal addrspace(3) global [{lb} x i32] undef, align 16"));
    let (tid, m0, n0, kslot) = block_origin(w, (bm, bn), batch, kv);
    // Staging: vector e = tid + 256·q of an operand's slice is row e / (tk/v), K values v·(e % (tk/v))
    // + 0..v-1 (v = 4 f32 values per 128-bit load, or 8 of a 16-bit copy of a weight: half_weights.rs;
    // a warp's loads and stores fill whole rows); its global pointer (at K = that offset) computed
    // once, the slice start added per step; its place in shared memory word o·pw + kq / pk.
    let mut stage = Vec::new();
    for (oi, (x, own, base, dims)) in [(a, bm, &m0, rows), (b, bn, &n0, cols)].into_iter().enumerate() {
        let copy = copies[oi];
        let per_row = if copy.is_some() { tk / 8 } else { tk / 4 };
        let from = match copy {
            Some((bind, off)) => w.emit_op(format!("getelementptr inbounds i8, ptr %g{bind}, i64 {off}")),
            None => ptrs[x.buf as usize].clone(),
        };
        let pair = lay.paired && oi == 0;
        for q in 0..own * per_row / 256 {
            // Paired A: vectors 2q' and 2q' + 1 are rows r and r + 8 of pair e' / per_row, e' = tid + 256q'.
            let qe = if pair { q / 2 } else { q };
            let e = w.emit_op(format!("add nuw nsw i64 {tid}, {}", 256 * qe));
            let pr = w.emit_op(format!("udiv i64 {e}, {per_row}"));
            let o = if pair {
                let hi = w.emit_op(format!("lshr i64 {pr}, 3"));
                let hi = w.emit_op(format!("shl nuw nsw i64 {hi}, 4"));
                let lo = w.emit_op(format!("and i64 {pr}, 7"));
                let r = w.emit_op(format!("or i64 {hi}, {lo}"));
                w.emit_op(format!("add nuw nsw i64 {r}, {}", 8 * (q % 2)))
            } else {
                pr.clone()
            };
            let kq = w.emit_op(format!("urem i64 {e}, {per_row}"));
            let kq = w.emit_op(format!("mul nuw nsw i64 {kq}, {}", tk / per_row));
            let g = w.emit_op(format!("add nuw nsw i64 {base}, {o}"));
            unflatten(w, &g, dims);
            w.emit(&format!("store i64 {kq}, ptr {kslot}"));
            let idx = w.value(x.index);
            let ety = if copy.is_some() { "i16" } else { "float" };
            let p = w.emit_op(format!("getelementptr inbounds {ety}, ptr {from}, i64 {idx}"));
            let kw = w.emit_op(format!("udiv i64 {kq}, {pk}"));
            // Where this vector's words go: row o's word kw (swizzled: ^ 16 on odd rows), or for a pair
            // (stored by its first vector, with the second's words interleaved) word 2·kw of pair pr.
            let si = if pair {
                let t = w.emit_op(format!("mul nuw nsw i64 {pr}, {pa}"));
                let kw2 = w.emit_op(format!("shl nuw nsw i64 {kw}, 1"));
                w.emit_op(format!("add nuw nsw i64 {t}, {kw2}"))
            } else {
                let t = w.emit_op(format!("mul nuw nsw i64 {o}, {}", if oi == 0 { pa } else { pb }));
                let kw = if lay.swizzle() {
                    let odd = w.emit_op(format!("and i64 {o}, 1"));
                    let x = w.emit_op(format!("shl nuw nsw i64 {odd}, 4"));
                    w.emit_op(format!("xor i64 {kw}, {x}"))
                } else {
                    kw
                };
                w.emit_op(format!("add nuw nsw i64 {t}, {kw}"))
            };
            let sp = shared_at(w, if oi == 0 { &sa } else { &sb }, if oi == 0 { la } else { lb }, "i32", &si);
            let reg = format!("%s.vx{oi}.{q}");
            let vty = if copy.is_some() { "<4 x i32>" } else { "<4 x float>" };
            w.slot(&reg, vty);
            // (pointer, shared place, register slot, from a 16-bit copy, operand, role): role 0 a vector
            // stored alone, 1 a pair's first (stores both), 2 a pair's second.
            stage.push((p, sp, reg, copy.is_some(), oi, if pair { 1 + q % 2 } else { 0 }));
        }
    }
    // Slice k0's vectors: each at its pointer (k = kq) moved by its operand's kpart(k0).
    let load_slice = |w: &mut Writer, k0: &str| {
        w.emit(&format!("store i64 {k0}, ptr {kslot}"));
        let offs = [w.value(&a.kpart), w.value(&b.kpart)];
        for (p, _, reg, half, oi, _) in &stage {
            let (ety, vty) = if *half { ("i16", "<4 x i32>") } else { ("float", "<4 x float>") };
            let at = w.emit_op(format!("getelementptr inbounds {ety}, ptr {p}, i64 {}", offs[*oi]));
            let v = w.emit_op(format!("load {vty}, ptr {at}, align 16"));
            w.emit(&format!("store {vty} {v}, ptr {reg}"));
        }
    };
    // The staged vectors → shared memory (tf32 rounded, bf16 / fp16 pairs packed; a 16-bit copy's
    // words as they are).
    let words_of = |w: &mut Writer, reg: &str, half: bool| -> Vec<String> {
        if half {
            let v = w.emit_op(format!("load <4 x i32>, ptr {reg}"));
            return (0..4).map(|i| w.emit_op(format!("extractelement <4 x i32> {v}, i64 {i}"))).collect();
        }
        let v = w.emit_op(format!("load <4 x float>, ptr {reg}"));
        let x: Vec<String> = (0..4).map(|i| w.emit_op(format!("extractelement <4 x float> {v}, i64 {i}"))).collect();
        if packed { vec![to_operand(w, kind, &x[0], Some(&x[1])), to_operand(w, kind, &x[2], Some(&x[3]))] } else { x.iter().map(|e| to_operand(w, kind, e, None)).collect() }
    };
    let store_words = |w: &mut Writer, words: &[String], sp: &str| {
        let vt = format!("<{} x i32>", words.len());
        let mut vv = "poison".to_string();
        for (i, e) in words.iter().enumerate() {
            vv = w.emit_op(format!("insertelement {vt} {vv}, i32 {e}, i64 {i}"));
        }
        w.emit(&format!("store {vt} {vv}, ptr addrspace(3) {sp}, align {}", 4 * words.len()));
    };
    let store_slice = |w: &mut Writer| {
        for (n, (_, sp, reg, half, _, role)) in stage.iter().enumerate() {
            match role {
                0 => {
                    let words = words_of(w, reg, *half);
                    store_words(w, &words, sp);
                }
                1 => {
                    // Rows r and r + 8 word by word, four words (two of each) per store.
                    let (x, y) = (words_of(w, reg, *half), words_of(w, &stage[n + 1].2, stage[n + 1].3));
                    for h in 0..x.len() / 2 {
                        let at = w.emit_op(format!("getelementptr inbounds i32, ptr addrspace(3) {sp}, i64 {}", 4 * h));
                        store_words(w, &[x[2 * h].clone(), y[2 * h].clone(), x[2 * h + 1].clone(), y[2 * h + 1].clone()], &at);
                    }
                }
                _ => {}
            }
        }
    };
    let wg = Warps::new(w, acc, &tid, (bm, bn), kind);
    let Warps { ref wr, ref wc, ref gq, ref tq, wm, wn, mf, nf, .. } = wg;
    // Paired: A fragment i's words for this lane from pair (wr·wm / 16 + i)·8 + g, word 8t; B fragment
    // j's from row wc·wn + 8j + g, word 4t, two bases where swizzled (even / odd 16-word groups c:
    // +16 / -16 on rows of odd g — the row's parity, the other terms being even).
    let swz = if lay.swizzle() {
        let odd = w.emit_op(format!("and i64 {gq}, 1"));
        Some(w.emit_op(format!("shl nuw nsw i64 {odd}, 4")))
    } else {
        None
    };
    let apair: Vec<String> = (0..mf * lay.paired as i64)
        .map(|i| {
            let r = w.emit_op(format!("mul nuw nsw i64 {wr}, {}", wm / 16));
            let r = w.emit_op(format!("add nuw nsw i64 {r}, {i}"));
            let r = w.emit_op(format!("shl nuw nsw i64 {r}, 3"));
            let r = w.emit_op(format!("add nuw nsw i64 {r}, {gq}"));
            let r = w.emit_op(format!("mul nuw nsw i64 {r}, {pa}"));
            let t8 = w.emit_op(format!("shl nuw nsw i64 {tq}, 3"));
            let r = w.emit_op(format!("add nuw nsw i64 {r}, {t8}"));
            shared_at(w, &sa, la, "i32", &r)
        })
        .collect();
    let brow: Vec<(String, String)> = (0..nf * lay.paired as i64)
        .map(|j| {
            let r = w.emit_op(format!("mul nuw nsw i64 {wc}, {wn}"));
            let r = w.emit_op(format!("add nuw nsw i64 {r}, {}", 8 * j));
            let r = w.emit_op(format!("add nuw nsw i64 {r}, {gq}"));
            let r = w.emit_op(format!("mul nuw nsw i64 {r}, {pb}"));
            let t4 = w.emit_op(format!("shl nuw nsw i64 {tq}, 2"));
            let r = w.emit_op(format!("add nuw nsw i64 {r}, {t4}"));
            match &swz {
                Some(x) => {
                    let (re, ro) = (w.emit_op(format!("add nuw nsw i64 {r}, {x}")), w.emit_op(format!("sub nuw nsw i64 {r}, {x}")));
                    (shared_at(w, &sb, lb, "i32", &re), shared_at(w, &sb, lb, "i32", &ro))
                }
                None => {
                    let p = shared_at(w, &sb, lb, "i32", &r);
                    (p.clone(), p)
                }
            }
        })
        .collect();
    // Narrow: each fragment's first shared word for this lane: A row wr·wm + 16·i + g, B row wc·wn + 8·j + g, word t.
    let frag_base = |w: &mut Writer, sh: &str, len: i64, wi: &str, span: i64, step: i64, f: i64| -> String {
        let r = w.emit_op(format!("mul nuw nsw i64 {wi}, {span}"));
        let r = w.emit_op(format!("add nuw nsw i64 {r}, {}", step * f));
        let r = w.emit_op(format!("add nuw nsw i64 {r}, {gq}"));
        let r = w.emit_op(format!("mul nuw nsw i64 {r}, {pw}"));
        let r = w.emit_op(format!("add nuw nsw i64 {r}, {tq}"));
        shared_at(w, sh, len, "i32", &r)
    };
    let abase: Vec<String> = (0..mf * !lay.paired as i64).map(|i| frag_base(w, &sa, la, &wr, wm, 16, i)).collect();
    let bbase: Vec<String> = (0..nf * !lay.paired as i64).map(|j| frag_base(w, &sb, lb, &wc, wn, 8, j)).collect();
    let word = |w: &mut Writer, p: &str, off: i64| {
        let q = w.emit_op(format!("getelementptr inbounds i32, ptr addrspace(3) {p}, i64 {off}"));
        w.emit_op(format!("load i32, ptr addrspace(3) {q}"))
    };
    let kstep = if packed { 16 } else { 8 };
    load_slice(w, "0");
    for_loop(w, "%s.k0", "0", &kext.to_string(), tk, &mut |w| {
        let k0 = w.emit_op("load i64, ptr %s.k0".into());
        store_slice(w);
        barrier(w);
        let k1 = w.emit_op(format!("add nuw nsw i64 {k0}, {tk}"));
        let more = w.emit_op(format!("icmp slt i64 {k1}, {kext}"));
        if_(w, &more, &mut |w| {
            load_slice(w, &k1);
            Ok(())
        })?;
        // Paired: per 16-word group c, B's registers for steps 2c and 2c + 1 (one 128-bit load per
        // fragment), then per step A's (one per fragment, words 32c + 4u from the pair's base).
        let quad = |w: &mut Writer, p: &str, off: i64| -> Vec<String> {
            let q = w.emit_op(format!("getelementptr inbounds i32, ptr addrspace(3) {p}, i64 {off}"));
            let v = w.emit_op(format!("load <4 x i32>, ptr addrspace(3) {q}, align 16"));
            (0..4).map(|e| w.emit_op(format!("extractelement <4 x i32> {v}, i64 {e}"))).collect()
        };
        for c in (0..tk / pk / 16).filter(|_| lay.paired) {
            let bq: Vec<Vec<String>> = brow.iter().map(|p| quad(w, if c % 2 == 0 { &p.0 } else { &p.1 }, 16 * c)).collect();
            for u in 0..2 {
                let av: Vec<Vec<String>> = apair.iter().map(|p| quad(w, p, 32 * c + 4 * u)).collect();
                let issues: Vec<_> = (0..(mf * nf) as usize).map(|f| (f as i64, &av[f / nf as usize][..], &bq[f % nf as usize][2 * u as usize..2 * u as usize + 2])).collect();
                mma_issue_all(w, kind, &issues);
            }
        }
        for k in (0..tk).step_by(kstep).filter(|_| !lay.paired) {
            // A register rr: row g + 8·(rr % 2), word t + k/pk + 4·(rr / 2); B register rr: word t + k/pk + 4·rr.
            let av: Vec<Vec<String>> = abase.iter().map(|p| (0..4).map(|rr| word(w, p, 8 * pw * (rr % 2) + k / pk + 4 * (rr / 2))).collect()).collect();
            let bv: Vec<Vec<String>> = bbase.iter().map(|p| (0..2).map(|rr| word(w, p, k / pk + 4 * rr)).collect()).collect();
            let issues: Vec<_> = (0..(mf * nf) as usize).map(|f| (f as i64, &av[f / nf as usize][..], &bv[f % nf as usize][..])).collect();
            mma_issue_all(w, kind, &issues);
        }
        barrier(w);
        Ok(())
    })?;
    wg.epilogue(w, acc, kind, (&m0, &n0), (m, n), (rows, cols), halves)?;
    Ok((grid(m, n, nb, bm, bn)?, 0))
}

/// A block tile's 8 warps: warp (wr, wc) of the warp grid ([`warp_grid`]), lane 4·g + t (`gq`, `tq`),
/// each warp's wm × wn tile of mf × nf m16n8 fragments, accumulators `%d{i·nf + j}.{q}` set to the
/// matmul's init (and 3×TF32's second set, `small_accumulators`).
pub(super) struct Warps {
    pub wr: String,
    pub wc: String,
    pub gq: String,
    pub tq: String,
    pub wm: i64,
    pub wn: i64,
    pub mf: i64,
    pub nf: i64,
    slot: String,
}

impl Warps {
    pub(super) fn new(w: &mut Writer, acc: &Acc, tid: &str, (bm, bn): (i64, i64), kind: Mma) -> Warps {
        let init = w.value(acc.init);
        let slot = format!("%s.v{}", acc.acc.0);
        w.slot(&slot, "float");
        let (gm, gn) = warp_grid(bn);
        let (wm, wn) = (bm / gm, bn / gn);
        let (mf, nf) = (wm / 16, wn / 8);
        let wp = w.emit_op(format!("lshr i64 {tid}, 5"));
        let lane = w.emit_op(format!("and i64 {tid}, 31"));
        let (gq, tq) = (w.emit_op(format!("lshr i64 {lane}, 2")), w.emit_op(format!("and i64 {lane}, 3")));
        let wr = w.emit_op(format!("udiv i64 {wp}, {gn}"));
        let wc = w.emit_op(format!("urem i64 {wp}, {gn}"));
        Warps::with(w, kind, &init, (wr, wc, gq, tq), (wm, wn, mf, nf), slot)
    }

    /// `wgmma.rs`'s warps: two warpgroups (warps 0–3, 4–7), each 64 rows × bn or, where bm is 64,
    /// 64 rows × bn / 2; warp wp's 16 rows are (wp % (bm / 16))·16 of the tile, its columns
    /// (wp / (bm / 16))·wn (a warpgroup's accumulators are `mma.sync`'s m16n8 fragments, one row of
    /// them per warp).
    pub(super) fn grouped(w: &mut Writer, acc: &Acc, tid: &str, (bm, bn): (i64, i64), kind: Mma) -> Warps {
        let init = w.value(acc.init);
        let slot = format!("%s.v{}", acc.acc.0);
        w.slot(&slot, "float");
        let gm = bm / 16;
        let wn = bn / (8 / gm);
        let wp = w.emit_op(format!("lshr i64 {tid}, 5"));
        let lane = w.emit_op(format!("and i64 {tid}, 31"));
        let (gq, tq) = (w.emit_op(format!("lshr i64 {lane}, 2")), w.emit_op(format!("and i64 {lane}, 3")));
        let wr = w.emit_op(format!("urem i64 {wp}, {gm}"));
        let wc = w.emit_op(format!("udiv i64 {wp}, {gm}"));
        Warps::with(w, kind, &init, (wr, wc, gq, tq), (16, wn, 1, wn / 8), slot)
    }

    fn with(w: &mut Writer, kind: Mma, init: &str, (wr, wc, gq, tq): (String, String, String, String), (wm, wn, mf, nf): (i64, i64, i64, i64), slot: String) -> Warps {
        for s in 0..mf * nf {
            for q in 0..4 {
                let c = format!("%d{s}.{q}");
                w.slot(&c, "float");
                w.emit(&format!("store float {init}, ptr {c}"));
            }
        }
        small_accumulators(w, kind, mf * nf);
        Warps { wr, wc, gq, tq, wm, wn, mf, nf, slot }
    }

    /// After the K loop: 3×TF32's small sums folded in, then each fragment's outputs through the
    /// matmul's epilogue (tile origin `m0`, `n0`).
    pub(super) fn epilogue(&self, w: &mut Writer, acc: &Acc, kind: Mma, (m0, n0): (&str, &str), (m, n): (i64, i64), (rows, cols): (&[(Var, i64)], &[(Var, i64)]), halves: &Halves) -> Result<(), String> {
        let Warps { wr, wc, gq, tq, wm, wn, mf, nf, slot } = self;
        let (wm, wn, mf, nf) = (*wm, *wn, *mf, *nf);
        fold_small(w, kind, mf * nf);
        // The epilogue: fragment element q at row g + 8·(q / 2), column 2t + q % 2, every one inside M × N
        // (whole tiles): no bounds check, no branch per output, so the outputs' epilogues share one basic
        // block and interleave — a GELU's erf is ~60 dependent instructions. Measured on the H200
        // (tests/gpu/bench_gemm.py, two runs each): the FFN-up matmul + GELU 4–10% less time (b32 bf16
        // 59.4 → 56.1 µs, tf32 82.3 → 78.3; b8 bf16 22.0 → 19.7, tf32 28.4 → 26.6), the others unchanged
        // within the runs' ±1 µs. `RLX_CUDA_VEC_EPI=checked` at compile time: each output checked (and
        // branched around) as before, to time the two.
        let t2 = w.emit_op(format!("shl i64 {tq}, 1"));
        let checked = std::env::var("RLX_CUDA_VEC_EPI").is_ok_and(|v| v == "checked");
        // Unchecked, where the epilogue loads memory kernels write (a residual, in the arena), the stores
        // of each run of [`EPILOGUE_RUN`] outputs wait until the run's values are computed
        // (`Writer::defer_stores`; `tiled::defers` says where they may): each output's load otherwise
        // waits for the previous output's store, which LLVM may not move it past (one memory latency
        // per output). A bias alone (the weights: `ld.global.nc`, not held up) keeps its stores in
        // place — held back, they measured slower (H100, session 32: MiniLM batch 8 / 32's Q, K, V
        // and FFN up + GELU up to 5%), as the residual's gained 2–21% (`RLX_CUDA_DEFER_STORES=all`:
        // every epilogue where they may).
        let defer = !checked && super::tiled::defers(acc.rest) && (halves.loads_writable(acc.rest) || super::tiled::defer_all());
        let mut run = 0;
        for i in 0..mf {
            for j in 0..nf {
                let r0 = w.emit_op(format!("mul nuw nsw i64 {wr}, {wm}"));
                let r0 = w.emit_op(format!("add nuw nsw i64 {r0}, {}", 16 * i));
                let r0 = w.emit_op(format!("add nuw nsw i64 {r0}, {gq}"));
                let r0 = w.emit_op(format!("add nuw nsw i64 {r0}, {m0}"));
                let c0 = w.emit_op(format!("mul nuw nsw i64 {wc}, {wn}"));
                let c0 = w.emit_op(format!("add nuw nsw i64 {c0}, {}", 8 * j));
                let c0 = w.emit_op(format!("add nuw nsw i64 {c0}, {t2}"));
                let c0 = w.emit_op(format!("add nuw nsw i64 {c0}, {n0}"));
                for q in 0..4 {
                    let mm = w.emit_op(format!("add nuw nsw i64 {r0}, {}", 8 * (q / 2)));
                    let nn = w.emit_op(format!("add nuw nsw i64 {c0}, {}", q % 2));
                    if checked {
                        epilogue(w, acc, &format!("%d{}.{q}", i * nf + j), &slot, (&mm, m, rows), (&nn, n, cols))?;
                    } else {
                        w.defer_stores(defer);
                        epilogue_at(w, acc, &format!("%d{}.{q}", i * nf + j), &slot, (&mm, rows), (&nn, cols));
                        run += 1;
                        if run % EPILOGUE_RUN == 0 {
                            w.defer_stores(false);
                        }
                    }
                }
            }
        }
        w.defer_stores(false);
        Ok(())
    }
}

/// Outputs per run of an unchecked epilogue's deferred stores ([`Warps::epilogue`]): the values and
/// addresses of a run stay live until its stores.
const EPILOGUE_RUN: usize = 16;

pub(super) fn grid(m: i64, n: i64, nb: i64, bm: i64, bn: i64) -> Result<[u32; 3], String> {
    let groups = [n / bn, m / bm, nb];
    if groups[1] > 65535 || groups[2] > 65535 {
        return Err(format!("a tiled matmul of {m}×{n} (batch {nb}) needs a grid of {groups:?} blocks, past CUDA's limits"));
    }
    Ok([groups[0] as u32, groups[1] as u32, groups[2] as u32])
}
