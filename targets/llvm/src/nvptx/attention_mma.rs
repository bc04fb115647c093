//! Fused attention on the tensor cores: [`Plan::Attention`] (scores, softmax, probabilities × values
//! in one kernel; `attention.rs` has the SIMT form) with both matmuls on `mma.sync` — m16n8k8 tf32
//! under `--precision tf32`, m16n8k16 bf16 / fp16 under `bf16` / `fp16`, and 3×TF32 under `f32`
//! (`tiled::mma_issue_all`: f32 accuracy). Taken where the head's padded keys are at most [`MAX_KEYS`]
//! (a query row's scores stay in registers), its depth and columns at most [`MAX_DEPTH`], its keys
//! and values fit the GPU's shared memory, and — under f32 — there are at least `ATTENTION_MMA_MIN_ROWS`
//! query rows (heads × rows: fewer gave too few blocks, each a long dependent chain; `RLX_CUDA_ATTN_MMA=1`
//! at compile time: any number); otherwise — and with `RLX_CUDA_ATTN_MMA=0` — `attention.rs`'s kernel runs.
//!
//! A block of W warps (8 where that gives [`FILL`] blocks, else 4, fewer for few rows;
//! `RLX_CUDA_ATTN_WARPS` at compile time to force one) takes one head and 16·W of its query rows, 16
//! per warp:
//!
//! 1. The head's keys and values are staged in the dynamic shared array through the plan's
//!    expressions, in the form the fragments read ([`Layout`]: tf32-rounded words, bf16 / fp16 pairs,
//!    3×TF32's big and small parts; keys, depth and columns padded with zeros to the `mma` shapes; rows
//!    padded so a fragment's 32 loads hit 32 banks), barrier.
//! 2. Each warp loads its 16 query rows' A fragments once (the plan's `a`), then computes its
//!    16 × keys scores as m16n8 fragments (`%d{j}`, j = key / 8): lane 4g + t holds rows g and g + 8,
//!    keys 8j + 2t and 8j + 2t + 1.
//! 3. Per row: the max of `w(s)` (the plan's scale and mask) over the lane's keys, then over the quad
//!    (`shfl.sync.bfly` 1, 2: the four lanes sharing the row), the sum of `e(s, mx)` the same way, and
//!    `p(s, mx, l)` written over the scores. Keys past the last are left out (−∞ / 0). Where the terms
//!    nest (`Attention::chained`: a softmax), `w(s)` is kept in place of each score and then `e`, so
//!    each score's mask, scale and exp run once (the same bits). The exp is `ex2.approx` and `p`'s
//!    division by the sum a product with its reciprocal (below; `RLX_CUDA_ATTN_FAST=0`: neither).
//! 4. Probabilities × values on the tensor cores with the probabilities as the A operand straight from
//!    the score registers: bf16's m16n8k16 A fragment is two score fragments side by side (keys
//!    16k + 2t, + 1 and 16k + 8 + 2t, + 1); tf32's m16n8k8 A fragment takes the keys of one score
//!    fragment in the order 8k + 2t ↦ column t and 8k + 2t + 1 ↦ column t + 4 — the values' B fragment
//!    read in the same order, so the sum over keys is the same products.
//! 5. Each output (row, column) runs the plan's `rest` (the store) inside the rows and columns.
//!
//! Sums over the depth and over the keys run in the tensor cores' order, the max and sum per quad:
//! results differ from the interpreter's by the precision's rounding (tests state the bounds).

use super::tiled::{barrier, if_, mma_issue_known, sreg, tf32_small, to_operand, unflatten};
use super::attention::{head_and_slots, Slots};
use super::Mma;
use crate::ir::{llvm_lit, Writer};
use rlx_ir::loops::tiled::{cdiv, Attention, ATTENTION_MMA_MIN_ROWS};
use rlx_ir::{BinaryOp, DType};

/// The most keys (padded to 16) a query row keeps in registers: 16 score fragments, 64 registers.
pub const MAX_KEYS: i64 = 128;
/// The longest depth and the most columns (padded to the `mma` shapes).
pub const MAX_DEPTH: i64 = 64;
/// Blocks wanted before a block takes 8 warps of rows (about one per SM of an H200).
const FILL: i64 = 128;
/// Staging loads a thread issues before their stores.
const STAGE_RUN: i64 = 16;

/// Warps per block for `heads` heads of `rows` query rows: `RLX_CUDA_ATTN_WARPS` if set, else 8 where
/// that gives [`FILL`] blocks, else 4 — each block stages its head's keys and values, so fewer
/// threads per block would each wait on more loads; never more warps than the rows need.
fn warps(heads: i64, rows: i64) -> i64 {
    if let Some(n) = std::env::var("RLX_CUDA_ATTN_WARPS").ok().and_then(|v| v.parse::<i64>().ok()).filter(|n| [1, 2, 4, 8].contains(n)) {
        return n;
    }
    let n = if heads * cdiv(rows, 16 * 8) >= FILL { 8 } else { 4 };
    [8, 4, 2, 1].into_iter().filter(|&m| m <= n).find(|&m| 16 * m / 2 < rows).unwrap_or(1)
}

fn round_up(x: i64, m: i64) -> i64 {
    cdiv(x, m) * m
}

/// 3×TF32's split planes (below) only while they take at most this many bytes, so two blocks or more
/// share an SM of Hopper's 228 KiB (MiniLM's 32-wide heads: 72 KiB; BERT-base's 64-wide ones would take
/// 136 KiB, one block an SM): larger heads stage f32 words, split where each fragment loads them.
const PLANES_MAX: i64 = 80 * 1024;

/// How [`attention`] stages a head's keys and values in the dynamic shared array (32-bit words), in
/// the form its fragments read them — each word converted once by the block, not by every warp:
/// - tf32: keys `[key][d]` at word key·sk + d, values `[key][c]` at `v` + key·sv + c, tf32-rounded;
/// - bf16 / fp16: pairs of adjacent k in one word — keys `[key][d / 2]` (depth d, d + 1), values
///   `[key / 2][c]` (keys 2i, 2i + 1) — so a fragment register is one load;
/// - 3×TF32: the keys' and values' tf32 big parts as tf32's, their small parts `planes` words further
///   on (`planes` 0: f32 words, split at each fragment's load: heads past [`PLANES_MAX`]).
///
/// Rows are padded so a fragment's 32 loads hit 32 banks: tf32's rows by 4 mod 32 words; bf16 / fp16
/// key rows (lanes 4g + t read row g, word t) by 4 mod 8, value rows of pairs (lanes read row t,
/// word g) by 8 mod 32.
pub struct Layout {
    /// Keys, depth and columns padded to the `mma` shapes.
    kp: i64,
    dp: i64,
    cp: i64,
    sk: i64,
    sv: i64,
    v: i64,
    planes: i64,
    bytes: i64,
}

/// Where [`attention`] writes plan `a` on the tensor cores of `kind` (`smem`: below): its [`Layout`];
/// `None` where it does not (the SIMT kernel: `RLX_CUDA_ATTN_MMA=0`, f32 on the SIMT cores, a head too
/// large, f32 with fewer than `ATTENTION_MMA_MIN_ROWS` query rows unless `RLX_CUDA_ATTN_MMA=1`).
pub fn fits(a: &Attention, kind: Mma, smem: i64) -> Option<Layout> {
    let switch = std::env::var("RLX_CUDA_ATTN_MMA").ok();
    if kind == Mma::F32 || switch.as_deref() == Some("0") {
        return None;
    }
    let any_size = switch.as_deref() == Some("1");
    let prod = |d: &[(rlx_ir::loops::Var, i64)]| d.iter().map(|x| x.1).product::<i64>();
    let (heads, rows, cols) = (prod(&a.heads), prod(&a.rows), prod(&a.cols));
    let ks = if kind.tf32() { 8 } else { 16 };
    let (kp, dp, cp) = (round_up(a.keys, 16), round_up(a.depth, ks), round_up(cols, 8));
    let layout = if kind.tf32() {
        let (sk, sv) = (round_up(dp, 32) + 4, round_up(cp, 32) + 4);
        let words = kp * (sk + sv);
        let planes = if kind == Mma::Tf32x3 && 8 * words <= PLANES_MAX.min(smem) { words } else { 0 };
        Layout { kp, dp, cp, sk, sv, v: kp * sk, planes, bytes: 4 * (words + planes) }
    } else {
        let (sk, sv) = (round_up(dp / 2, 8) + 4, round_up(cp, 32) + 8);
        Layout { kp, dp, cp, sk, sv, v: kp * sk, planes: 0, bytes: 4 * (kp * sk + kp / 2 * sv) }
    };
    let ok = kp <= MAX_KEYS && dp <= MAX_DEPTH && cp <= MAX_DEPTH && layout.bytes <= smem && rows >= 1 && (kind != Mma::Tf32x3 || heads * rows >= ATTENTION_MMA_MIN_ROWS || any_size);
    ok.then_some(layout)
}

/// The kernel body for plan `a` on the tensor cores of `kind`, or `None` where it does not apply
/// (above): its grid, block and dynamic shared bytes. `smem`: the most dynamic shared memory a
/// block may take on this GPU.
pub fn attention(w: &mut Writer, a: &Attention, kind: Mma, smem: i64, globals: &mut Vec<String>) -> Result<Option<([u32; 3], u32, u32)>, String> {
    let Some(Layout { kp, dp, cp, sk, sv, v: vbase, planes, bytes }) = fits(a, kind, smem) else { return Ok(None) };
    let prod = |d: &[(rlx_ir::loops::Var, i64)]| d.iter().map(|x| x.1).product::<i64>();
    let (heads, rows, cols) = (prod(&a.heads), prod(&a.rows), prod(&a.cols));
    let (keys, depth) = (a.keys, a.depth);
    let tf32 = kind.tf32();
    // The k of one mma.sync: 8 tf32 values, 16 of the 16-bit kinds.
    let ks = if tf32 { 8 } else { 16 };
    let nw = warps(heads, rows);
    let tiles = cdiv(rows, 16 * nw);
    let blocks = heads * tiles;
    if blocks > i32::MAX as i64 {
        return Err(format!("fused attention over {heads} heads × {rows} rows needs more than 2^31 - 1 blocks"));
    }
    let threads = 32 * nw;
    let (nt, nc) = (kp / 8, cp / 8);
    globals.push(format!("{} = external addrspace(3) global [0 x i32], align 16", super::cp_async::DSM));
    let dsm = super::cp_async::DSM;
    let at = |w: &mut Writer, i: &str| w.emit_op(format!("getelementptr inbounds i32, ptr addrspace(3) {dsm}, i64 {i}"));
    let f = DType::F32;
    let tid = sreg(w, "tid.x");
    let warp = w.emit_op(format!("lshr i64 {tid}, 5"));
    let lane = w.emit_op(format!("and i64 {tid}, 31"));
    let g = w.emit_op(format!("lshr i64 {lane}, 2"));
    let t = w.emit_op(format!("and i64 {lane}, 3"));
    let (tile, Slots { js, ds, s, mx, l, acc }) = head_and_slots(w, a, tiles);
    // 1. The staged words ([`Layout`]). Thread tid stages words tid + threads·q, the loads of
    // STAGE_RUN of them issued before their stores (a rolled loop would wait one memory latency per
    // word); a word past the last is clamped to it (two threads store the same value to the same word).
    let stage = |w: &mut Writer, total: i64, word: &mut dyn FnMut(&mut Writer, &str) -> Vec<(String, String)>| {
        let per = cdiv(total, threads);
        for q0 in (0..per).step_by(STAGE_RUN as usize) {
            let mut pending = Vec::new();
            for q in q0..per.min(q0 + STAGE_RUN) {
                let e = w.emit_op(format!("add nuw nsw i64 {tid}, {}", threads * q));
                let e = if (q + 1) * threads > total {
                    let inside = w.emit_op(format!("icmp slt i64 {e}, {total}"));
                    w.emit_op(format!("select i1 {inside}, i64 {e}, i64 {}", total - 1))
                } else {
                    e
                };
                pending.extend(word(w, &e));
            }
            for (r, o) in pending {
                let p = at(w, &o);
                w.emit(&format!("store i32 {r}, ptr addrspace(3) {p}"));
            }
        }
    };
    // The plan's expression `x` at key j (an i64 value) and inner index i (`bind` binds it, clamped
    // inside `extent`): 0 past the keys or the extent.
    let element = |w: &mut Writer, x: &rlx_ir::loops::Expr, j: &str, i: &str, extent: i64, bind: &dyn Fn(&mut Writer, &str)| -> String {
        let ok1 = w.emit_op(format!("icmp slt i64 {j}, {keys}"));
        let ok2 = w.emit_op(format!("icmp slt i64 {i}, {extent}"));
        let ok = w.emit_op(format!("and i1 {ok1}, {ok2}"));
        let jc = w.emit_op(format!("select i1 {ok1}, i64 {j}, i64 {}", keys - 1));
        let ic = w.emit_op(format!("select i1 {ok2}, i64 {i}, i64 {}", extent - 1));
        w.emit(&format!("store i64 {jc}, ptr {js}"));
        bind(w, &ic);
        let v = w.value(x);
        w.emit_op(format!("select i1 {ok}, float {v}, float 0.0"))
    };
    // One staged operand of `rows` × `inner` words at `base` + row·`stride` + inner index. Word (j, i)
    // holds, by kind: tf32 the rounded element (key j, index i); 3×TF32 with planes its big part, and
    // its small part `planes` words on; without planes its f32 bits; the 16-bit kinds the pair along
    // the inner index (`along_keys` false: (j, 2i), (j, 2i + 1)) or along the keys ((2j, i), (2j + 1, i)).
    let matrix = |w: &mut Writer, (rows_w, inner): (i64, i64), (base, stride): (i64, i64), x: &rlx_ir::loops::Expr, extent: i64, along_keys: bool, bind: &dyn Fn(&mut Writer, &str)| {
        stage(w, rows_w * inner, &mut |w, e| {
            let j = w.emit_op(format!("udiv i64 {e}, {inner}"));
            let i = w.emit_op(format!("urem i64 {e}, {inner}"));
            let o = w.emit_op(format!("mul nuw nsw i64 {j}, {stride}"));
            let o = if base > 0 { w.emit_op(format!("add nuw nsw i64 {o}, {base}")) } else { o };
            let o = w.emit_op(format!("add nuw nsw i64 {o}, {i}"));
            if tf32 {
                let v = element(w, x, &j, &i, extent, bind);
                let big = to_operand(w, if planes > 0 { Mma::Tf32 } else { kind }, &v, None);
                if planes == 0 {
                    return vec![(big, o)];
                }
                let small = tf32_small(w, &v, &big);
                let os = w.emit_op(format!("add nuw nsw i64 {o}, {planes}"));
                return vec![(big, o), (small, os)];
            }
            let (j0, i0) = if along_keys { (w.emit_op(format!("shl nuw nsw i64 {j}, 1")), i.clone()) } else { (j.clone(), w.emit_op(format!("shl nuw nsw i64 {i}, 1"))) };
            let (j1, i1) = if along_keys { (w.emit_op(format!("or i64 {j0}, 1")), i.clone()) } else { (j.clone(), w.emit_op(format!("or i64 {i0}, 1"))) };
            let lo = element(w, x, &j0, &i0, extent, bind);
            let hi = element(w, x, &j1, &i1, extent, bind);
            vec![(to_operand(w, kind, &lo, Some(&hi)), o)]
        })
    };
    let bind_d = |w: &mut Writer, d: &str| w.emit(&format!("store i64 {d}, ptr {ds}"));
    let bind_c = |w: &mut Writer, c: &str| unflatten(w, c, &a.cols);
    if tf32 {
        matrix(w, (kp, dp), (0, sk), a.b, depth, false, &bind_d);
        matrix(w, (kp, cp), (vbase, sv), a.v, cols, false, &bind_c);
    } else {
        matrix(w, (kp, dp / 2), (0, sk), a.b, depth, false, &bind_d);
        matrix(w, (kp / 2, cp), (vbase, sv), a.v, cols, true, &bind_c);
    }
    barrier(w);
    // Shared word `base + off`: an mma operand register (3×TF32 without planes: f32 bits).
    let word = |w: &mut Writer, base: &str, off: i64| -> String {
        let o = w.emit_op(format!("add nuw nsw i64 {base}, {off}"));
        let p = at(w, &o);
        w.emit_op(format!("load i32, ptr addrspace(3) {p}"))
    };
    // A B fragment's registers from words `base + off` for each `off`; with 3×TF32's planes each
    // register is its big part, whose small part (`planes` words on) goes into `known`.
    let fragment = |w: &mut Writer, base: &str, offs: &[i64], known: &mut Vec<(String, String, String)>| -> Vec<String> {
        offs.iter()
            .map(|&off| {
                let big = word(w, base, off);
                if planes > 0 {
                    let small = word(w, base, off + planes);
                    known.push((big.clone(), big.clone(), small));
                }
                big
            })
            .collect()
    };
    // 16-bit pairs (lower k first) from two f32 values.
    let pair = |w: &mut Writer, lo: &str, hi: &str| to_operand(w, kind, lo, Some(hi));
    // The warp's rows g and g + 8, clamped to the last (a row past it computes and stores nothing).
    let r0 = w.emit_op(format!("mul nuw nsw i64 {tile}, {}", 16 * nw));
    let w16 = w.emit_op(format!("mul nuw nsw i64 {warp}, 16"));
    let r0 = w.emit_op(format!("add nuw nsw i64 {r0}, {w16}"));
    let mut row = Vec::new();
    for h in 0..2 {
        let r = w.emit_op(format!("add nuw nsw i64 {r0}, {g}"));
        let r = w.emit_op(format!("add nuw nsw i64 {r}, {}", 8 * h));
        let inside = w.emit_op(format!("icmp slt i64 {r}, {rows}"));
        let rc = w.emit_op(format!("select i1 {inside}, i64 {r}, i64 {}", rows - 1));
        row.push((inside, rc));
    }
    // 2. The query rows' A fragments: per k step (k0 = ks·kk) registers a0 (row g), a1 (g + 8), a2
    // (g, k + 4 / + 8), a3 (g + 8, likewise); tf32 one value each (column k0 + t, + 4), 16-bit kinds
    // a pair (k0 + 2t, + 1 and k0 + 8 + 2t, + 1).
    let mut q: Vec<[Vec<String>; 2]> = vec![[Vec::new(), Vec::new()]; (dp / ks) as usize];
    for (h, (_, rc)) in row.iter().enumerate() {
        unflatten(w, rc, &a.rows);
        for (kk, qk) in q.iter_mut().enumerate() {
            let kk = kk as i64;
            let offs: &[i64] = if tf32 { &[0, 4] } else { &[0, 1, 8, 9] };
            let mut vals = Vec::new();
            for &o in offs {
                let base = if tf32 { t.clone() } else { w.emit_op(format!("shl nuw nsw i64 {t}, 1")) };
                let d = w.emit_op(format!("add nuw nsw i64 {base}, {}", ks * kk + o));
                let ok = w.emit_op(format!("icmp slt i64 {d}, {depth}"));
                let dc = w.emit_op(format!("select i1 {ok}, i64 {d}, i64 {}", depth - 1));
                w.emit(&format!("store i64 {dc}, ptr {ds}"));
                let x = w.value(a.a);
                vals.push(w.emit_op(format!("select i1 {ok}, float {x}, float 0.0")));
            }
            qk[h] = if tf32 { vals.iter().map(|x| to_operand(w, kind, x, None)).collect() } else { vec![pair(w, &vals[0], &vals[1]), pair(w, &vals[2], &vals[3])] };
        }
    }
    // Accumulators: scores %d0..%d{nt-1}, outputs %d{nt}..; 3×TF32's small sums %e likewise.
    for s in 0..nt + nc {
        for r in 0..4 {
            let pres: &[&str] = if kind == Mma::Tf32x3 { &["%d", "%e"] } else { &["%d"] };
            for pre in pres {
                let sl = format!("{pre}{s}.{r}");
                w.slot(&sl, "float");
                w.emit(&format!("store float 0.0, ptr {sl}"));
            }
        }
    }
    let fold = |w: &mut Writer, range: std::ops::Range<i64>| {
        if kind != Mma::Tf32x3 {
            return;
        }
        for s in range {
            for r in 0..4 {
                let d = w.emit_op(format!("load float, ptr %d{s}.{r}"));
                let e = w.emit_op(format!("load float, ptr %e{s}.{r}"));
                let x = w.emit_op(format!("fadd float {d}, {e}"));
                w.emit(&format!("store float {x}, ptr %d{s}.{r}"));
            }
        }
    };
    // Scores: B fragment of key tile j at k step kk: key 8j + g, word t and t + 4 of the step's
    // (tf32: depth k0 + t, + 4; 16-bit kinds: the pairs at k0 + 2t and k0 + 8 + 2t).
    let g_sk = w.emit_op(format!("mul nuw nsw i64 {g}, {sk}"));
    let kb = w.emit_op(format!("add nuw nsw i64 {g_sk}, {t}"));
    let step_words = if tf32 { ks } else { ks / 2 };
    for kk in 0..dp / ks {
        let mut known = Vec::new();
        let bs: Vec<Vec<String>> = (0..nt).map(|j| fragment(w, &kb, &[8 * j * sk + step_words * kk, 8 * j * sk + step_words * kk + 4], &mut known)).collect();
        let qk = &q[kk as usize];
        let av: Vec<String> = vec![qk[0][0].clone(), qk[1][0].clone(), qk[0][1].clone(), qk[1][1].clone()];
        let issues: Vec<(i64, &[String], &[String])> = (0..nt).map(|j| (j, av.as_slice(), bs[j as usize].as_slice())).collect();
        mma_issue_known(w, kind, &issues, known);
    }
    fold(w, 0..nt);
    // 3. Softmax per row half h (registers 2h, 2h + 1 of each score fragment).
    w.declare("declare float @llvm.nvvm.shfl.sync.bfly.f32(i32, float, i32, i32)");
    let quad = |w: &mut Writer, slot: &str, op: BinaryOp| {
        for off in [1, 2] {
            let cur = w.emit_op(format!("load float, ptr {slot}"));
            let o = w.emit_op(format!("call float @llvm.nvvm.shfl.sync.bfly.f32(i32 -1, float {cur}, i32 {off}, i32 31)"));
            let r = w.bin(op, f, &cur, &o);
            w.emit(&format!("store float {r}, ptr {slot}"));
        }
    };
    let t2 = w.emit_op(format!("shl nuw nsw i64 {t}, 1"));
    let padded = kp != keys;
    // Binds key 8j + 2t + e and its score (register r of fragment j); whether the key exists.
    let bind = |w: &mut Writer, j: i64, e: i64, r: i64| -> Option<String> {
        let key = w.emit_op(format!("add nuw nsw i64 {t2}, {}", 8 * j + e));
        w.emit(&format!("store i64 {key}, ptr {js}"));
        let x = w.emit_op(format!("load float, ptr %d{j}.{r}"));
        w.emit(&format!("store float {x}, ptr {s}"));
        padded.then(|| w.emit_op(format!("icmp slt i64 {key}, {keys}")))
    };
    let ninf = llvm_lit(f64::NEG_INFINITY, f);
    let (e_term, p_term, kept) = a.pass_terms();
    // The exp is `ex2.approx.ftz` of x·log2 e (`Writer::set_approx_exp`) and the division by the row's
    // sum a product with its reciprocal (`Attention::by_reciprocal`), each within a few f32 ulps: under
    // tf32 / bf16 / fp16 the probabilities are then rounded to 10 or 7 bits on their way into the second
    // matmul, and 3×TF32 splits them to f32's accuracy, which a few ulps of a probability (≤ 1) keep
    // (PyTorch's f32 attention kernels take `exp2f` of x·log2 e too). `RLX_CUDA_ATTN_FAST=0` at compile
    // time: the accurate exp and a division per key (to time the two; before session 32 f32's form).
    let fast = std::env::var("RLX_CUDA_ATTN_FAST").map_or(true, |v| v != "0");
    let recip = if fast { a.by_reciprocal(&p_term) } else { None };
    let by_recip = recip.is_some();
    let p_term = recip.unwrap_or(p_term);
    w.set_approx_exp(fast);
    // Row half h's fold of `x` over its keys into `slot` (from `init`; a key past the last folds
    // `init`), then over the quad; `back`: each key's `x` kept in place of its score.
    let fold_row = |w: &mut Writer, h: i64, x: &rlx_ir::loops::Expr, slot: &str, op: BinaryOp, init: &str, back: bool| {
        w.emit(&format!("store float {init}, ptr {slot}"));
        for (j, e) in (0..nt).flat_map(|j| (0..2).map(move |e| (j, e))) {
            let ok = bind(w, j, e, 2 * h + e);
            let v = w.value(x);
            if back {
                w.emit(&format!("store float {v}, ptr %d{j}.{}", 2 * h + e));
            }
            let v = match ok { Some(ok) => w.emit_op(format!("select i1 {ok}, float {v}, float {init}")), None => v };
            let cur = w.emit_op(format!("load float, ptr {slot}"));
            let n = w.bin(op, f, &cur, &v);
            w.emit(&format!("store float {n}, ptr {slot}"));
        }
        quad(w, slot, op);
    };
    for (h, (_, rc)) in row.iter().enumerate() {
        let h = h as i64;
        unflatten(w, rc, &a.rows);
        // Each pass's value kept in place of the score where the terms nest (`Attention::chained`).
        fold_row(w, h, a.w, mx, BinaryOp::Max, &ninf, kept);
        fold_row(w, h, &e_term, l, BinaryOp::Add, "0.0", kept);
        if by_recip {
            let sum = w.emit_op(format!("load float, ptr {l}"));
            let r = w.emit_op(format!("fdiv float 1.0, {sum}"));
            w.emit(&format!("store float {r}, ptr {l}"));
        }
        let mut probs = Vec::new();
        for (j, e) in (0..nt).flat_map(|j| (0..2).map(move |e| (j, e))) {
            let ok = bind(w, j, e, 2 * h + e);
            let x = w.value(&p_term);
            let x = match ok { Some(ok) => w.emit_op(format!("select i1 {ok}, float {x}, float 0.0")), None => x };
            probs.push((j, 2 * h + e, x));
        }
        for (j, r, x) in probs {
            w.emit(&format!("store float {x}, ptr %d{j}.{r}"));
        }
    }
    w.set_approx_exp(false);
    // 4. Probabilities × values: B fragment of column tile n at key step kk — tf32: value rows
    // 8kk + 2t (k = t) and 8kk + 2t + 1 (k = t + 4); 16-bit kinds: pairs of rows 16kk + 2t, + 1 and
    // 16kk + 8 + 2t, + 1; column 8n + g.
    let row_sv = w.emit_op(format!("mul nuw nsw i64 {}, {sv}", if tf32 { &t2 } else { &t }));
    let vb = w.emit_op(format!("add nuw nsw i64 {row_sv}, {g}"));
    let vb = w.emit_op(format!("add nuw nsw i64 {vb}, {vbase}"));
    let p = |w: &mut Writer, j: i64, r: i64| w.emit_op(format!("load float, ptr %d{j}.{r}"));
    for kk in 0..kp / ks {
        let av: Vec<String> = if tf32 {
            [0, 2, 1, 3].iter().map(|&r| {
                let x = p(w, kk, r);
                to_operand(w, kind, &x, None)
            }).collect()
        } else {
            let mut v = Vec::new();
            for (j, r) in [(2 * kk, 0), (2 * kk, 2), (2 * kk + 1, 0), (2 * kk + 1, 2)] {
                let lo = p(w, j, r);
                let hi = p(w, j, r + 1);
                v.push(pair(w, &lo, &hi));
            }
            v
        };
        // tf32: value rows 8kk + 2t and + 1; 16-bit kinds: pair rows 8kk + t and + 4.
        let mut known = Vec::new();
        let bs: Vec<Vec<String>> = (0..nc)
            .map(|n| {
                let off = 8 * kk * sv + 8 * n;
                fragment(w, &vb, &[off, off + if tf32 { sv } else { 4 * sv }], &mut known)
            })
            .collect();
        let issues: Vec<(i64, &[String], &[String])> = (0..nc).map(|n| (nt + n, av.as_slice(), bs[n as usize].as_slice())).collect();
        mma_issue_known(w, kind, &issues, known);
    }
    fold(w, nt..nt + nc);
    // 5. The stores: row half h, column 8n + 2t + e.
    for (h, (inside, rc)) in row.iter().enumerate() {
        unflatten(w, rc, &a.rows);
        for (n, e) in (0..nc).flat_map(|n| (0..2).map(move |e| (n, e))) {
            let c = w.emit_op(format!("add nuw nsw i64 {t2}, {}", 8 * n + e));
            let ok = if cp != cols {
                let in_c = w.emit_op(format!("icmp slt i64 {c}, {cols}"));
                w.emit_op(format!("and i1 {inside}, {in_c}"))
            } else {
                inside.clone()
            };
            let x = w.emit_op(format!("load float, ptr %d{}.{}", nt + n, 2 * h as i64 + e));
            if_(w, &ok, &mut |w| {
                unflatten(w, &c, &a.cols);
                w.emit(&format!("store float {x}, ptr {acc}"));
                w.body(a.rest);
                Ok(())
            })?;
        }
    }
    Ok(Some(([blocks as u32, 1, 1], threads as u32, bytes as u32)))
}
