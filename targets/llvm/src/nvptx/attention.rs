//! Fused attention on the GPU: the PTX of `rlx_ir::loops::tiled`'s [`Attention`] plan (the planner's
//! scores → softmax → probabilities × values kernel, `rlx-opt`'s `plan/attention.rs`). The score
//! matrix never reaches global memory.
//!
//! A block of [`BLOCK`] threads (8 warps) takes one head (the grid variables the keys and values
//! depend on) and a tile of 8·R of its query rows (R = 4, 2 or 1 rows per warp: the most that still
//! gives [`ROW_FILL`] blocks). When they fit in shared memory with the rows' scratch (48 KiB), the
//! head's keys `[keys][depth]` and values `[keys][columns]` are staged there once per block (rows
//! padded by one float: a warp's lanes read 32 different keys of one column, or 32 columns of one
//! key, in 32 banks); otherwise every read goes to global memory through the plan's expressions. Each
//! warp then takes one query row at a time:
//!
//! 1. the row's query elements into shared memory (lane-strided), barrier;
//! 2. lane l computes the scores of keys l, l + 32, … (each a dot product in order d = 0, 1, …, as
//!    the plain kernel), stores them in the warp's row of shared memory, and folds `max(mx, w(s))`
//!    (scale and mask: the plan's `w`); five `shfl.sync.bfly` steps give every lane the row's max;
//! 3. the sum of `e(s, mx)` (exp) the same way, then each lane overwrites its scores with the
//!    probabilities `p(s, mx, l)`, barrier;
//! 4. lane l computes output columns l, l + 32, …: Σ_k p_k · v[k][c] in order k = 0, 1, … (as the
//!    plain kernel), and runs the plan's `rest` (the store); barrier before the next row.
//!
//! f32 throughout, under every `--precision` (the tensor cores are not used here: this kernel's
//! matmuls stay f32 SIMT). The max and sum are folded in a lane-then-butterfly order, so results
//! differ from the plain kernel's in the last bits (as the row kernels'). A warp past the last row
//! recomputes the last one and stores nothing (every thread reaches every barrier).

use super::tiled::{barrier, for_loop, if_, lane_loop, shared_at, sreg, unflatten};
use super::BLOCK;
use crate::ir::{llvm_lit, Writer};
use rlx_ir::loops::tiled::{cdiv, Attention};
use rlx_ir::{BinaryOp, DType};

/// Blocks wanted before a warp takes more than one query row (two per SM of an H200).
const ROW_FILL: i64 = 264;
/// Warps per block.
const WARPS: i64 = BLOCK as i64 / 32;
/// Static shared memory per block.
const SHARED: i64 = 48 << 10;

/// Whether a block's scratch (its warps' query rows and scores) fits in shared memory; the
/// recognizer's plans always do (`ATTENTION_MAX_KEYS`), this guards the writer.
fn fits(keys: i64, depth: i64) -> bool {
    WARPS * (keys + depth) * 4 <= SHARED
}

/// The slots a kernel binds the plan's variables to: the key, the dot product's index, the score (every
/// pass's), the running max, the sum and the output accumulator.
pub(super) struct Slots {
    pub js: &'static str,
    pub ds: &'static str,
    pub s: &'static str,
    pub mx: &'static str,
    pub l: &'static str,
    pub acc: &'static str,
}

/// A block's head (block `ctaid.x` / `tiles`, its variables bound) and the plan's variables bound to
/// [`Slots`]; returns the block's tile of query rows (`ctaid.x` % `tiles`).
pub(super) fn head_and_slots(w: &mut Writer, a: &Attention, tiles: i64) -> (String, Slots) {
    let f = DType::F32;
    let cx = sreg(w, "ctaid.x");
    let head = w.emit_op(format!("udiv i64 {cx}, {tiles}"));
    let tile = w.emit_op(format!("urem i64 {cx}, {tiles}"));
    unflatten(w, &head, &a.heads);
    let sl = Slots { js: "%a.j", ds: "%a.d", s: "%a.s", mx: "%a.mx", l: "%a.l", acc: "%a.acc" };
    w.slot(sl.js, "i64");
    w.slot(sl.ds, "i64");
    for &k in &a.key {
        w.bind_index(k, sl.js);
    }
    w.bind_index(a.dv, sl.ds);
    for (slot, vars) in [(sl.s, &a.score[..]), (sl.mx, &[a.mx]), (sl.l, &[a.l]), (sl.acc, &[a.acc])] {
        w.slot(slot, "float");
        for &v in vars {
            w.bind_scalar(v, f, slot);
        }
    }
    (tile, sl)
}

/// The kernel body for plan `a`: its grid and block.
pub fn attention(w: &mut Writer, li: usize, a: &Attention, globals: &mut Vec<String>) -> Result<([u32; 3], u32), String> {
    let prod = |d: &[(rlx_ir::loops::Var, i64)]| d.iter().map(|x| x.1).product::<i64>();
    let (heads, rows, cols) = (prod(&a.heads), prod(&a.rows), prod(&a.cols));
    let (keys, depth) = (a.keys, a.depth);
    if !fits(keys, depth) {
        return Err(format!("fused attention over {keys} keys of depth {depth} does not fit shared memory"));
    }
    let rpw = [4, 2].into_iter().find(|&r| heads * cdiv(rows, WARPS * r) >= ROW_FILL && rows >= WARPS * r).unwrap_or(1);
    let tq = WARPS * rpw;
    let tiles = cdiv(rows, tq);
    let blocks = heads * tiles;
    if blocks > i32::MAX as i64 {
        return Err(format!("fused attention over {heads} heads × {rows} rows needs more than 2^31 - 1 blocks"));
    }
    let (pk, pv) = (depth + 1, cols + 1);
    let staged = (keys * pk + keys * pv + WARPS * (keys + depth)) * 4 <= SHARED;
    let (sq, ss, sk, sv) = (format!("@aq{li}"), format!("@as{li}"), format!("@ak{li}"), format!("@av{li}"));
    let (lq, ls, lk, lv) = (WARPS * depth, WARPS * keys, keys * pk, keys * pv);
    globals.push(format!("{sq} = internal addrspace(3) global [{lq} x float] undef, align 16"));
    globals.push(format!("{ss} = internal addrspace(3) global [{ls} x float] undef, align 16"));
    if staged {
        globals.push(format!("{sk} = internal addrspace(3) global [{lk} x float] undef, align 16"));
        globals.push(format!("{sv} = internal addrspace(3) global [{lv} x float] undef, align 16"));
    }
    let f = DType::F32;
    let ninf = llvm_lit(f64::NEG_INFINITY, f);
    let zero = llvm_lit(0.0, f);
    let tid = sreg(w, "tid.x");
    let warp = w.emit_op(format!("lshr i64 {tid}, 5"));
    let lane = w.emit_op(format!("and i64 {tid}, 31"));
    let (tile, Slots { js, ds, s, mx, l, acc }) = head_and_slots(w, a, tiles);
    // The column index c (flat) → the column variables.
    let bind_col = |w: &mut Writer, c: &str| unflatten(w, c, &a.cols);
    if staged {
        // keys[j][d] and values[j][c] of this head, consecutive threads on consecutive d / c.
        for_loop(w, "%a.e", &tid, &(keys * depth).to_string(), BLOCK as i64, &mut |w| {
            let e = w.emit_op("load i64, ptr %a.e".into());
            let j = w.emit_op(format!("udiv i64 {e}, {depth}"));
            let d = w.emit_op(format!("urem i64 {e}, {depth}"));
            w.emit(&format!("store i64 {j}, ptr {js}"));
            w.emit(&format!("store i64 {d}, ptr {ds}"));
            let x = w.value(a.b);
            let t = w.emit_op(format!("mul nuw nsw i64 {j}, {pk}"));
            let i = w.emit_op(format!("add nuw nsw i64 {t}, {d}"));
            let p = shared_at(w, &sk, lk, "float", &i);
            w.emit(&format!("store float {x}, ptr addrspace(3) {p}"));
            Ok(())
        })?;
        for_loop(w, "%a.e2", &tid, &(keys * cols).to_string(), BLOCK as i64, &mut |w| {
            let e = w.emit_op("load i64, ptr %a.e2".into());
            let j = w.emit_op(format!("udiv i64 {e}, {cols}"));
            let c = w.emit_op(format!("urem i64 {e}, {cols}"));
            w.emit(&format!("store i64 {j}, ptr {js}"));
            bind_col(w, &c);
            let x = w.value(a.v);
            let t = w.emit_op(format!("mul nuw nsw i64 {j}, {pv}"));
            let i = w.emit_op(format!("add nuw nsw i64 {t}, {c}"));
            let p = shared_at(w, &sv, lv, "float", &i);
            w.emit(&format!("store float {x}, ptr addrspace(3) {p}"));
            Ok(())
        })?;
        barrier(w);
    }
    let qbase = w.emit_op(format!("mul nuw nsw i64 {warp}, {depth}"));
    let sbase = w.emit_op(format!("mul nuw nsw i64 {warp}, {keys}"));
    let t0 = w.emit_op(format!("mul nuw nsw i64 {tile}, {tq}"));
    let row0 = w.emit_op(format!("add nuw nsw i64 {t0}, {warp}"));
    // The warp's score of key j (slot js) into slot s.
    let score = |w: &mut Writer| -> Result<(), String> {
        w.emit(&format!("store float {zero}, ptr {s}"));
        let j = w.emit_op(format!("load i64, ptr {js}"));
        let kb = w.emit_op(format!("mul nuw nsw i64 {j}, {pk}"));
        for_loop(w, ds, "0", &depth.to_string(), 1, &mut |w| {
            let d = w.emit_op(format!("load i64, ptr {ds}"));
            let qi = w.emit_op(format!("add nuw nsw i64 {qbase}, {d}"));
            let qp = shared_at(w, &sq, lq, "float", &qi);
            let q = w.emit_op(format!("load float, ptr addrspace(3) {qp}"));
            let k = if staged {
                let ki = w.emit_op(format!("add nuw nsw i64 {kb}, {d}"));
                let kp = shared_at(w, &sk, lk, "float", &ki);
                w.emit_op(format!("load float, ptr addrspace(3) {kp}"))
            } else {
                w.value(a.b)
            };
            let cur = w.emit_op(format!("load float, ptr {s}"));
            let m = w.bin(BinaryOp::Mul, f, &q, &k);
            let n = w.bin(BinaryOp::Add, f, &cur, &m);
            w.emit(&format!("store float {n}, ptr {s}"));
            Ok(())
        })
    };
    // The warp's row of scores / probabilities at key j (slot js).
    let srow = |w: &mut Writer| -> String {
        let j = w.emit_op(format!("load i64, ptr {js}"));
        let i = w.emit_op(format!("add nuw nsw i64 {sbase}, {j}"));
        shared_at(w, &ss, ls, "float", &i)
    };
    // Every lane ends with the warp's fold (⊕ commutative: the same bits in every lane).
    let butterfly = |w: &mut Writer, slot: &str, op: BinaryOp| {
        w.declare("declare float @llvm.nvvm.shfl.sync.bfly.f32(i32, float, i32, i32)");
        for off in [16, 8, 4, 2, 1] {
            let cur = w.emit_op(format!("load float, ptr {slot}"));
            let o = w.emit_op(format!("call float @llvm.nvvm.shfl.sync.bfly.f32(i32 -1, float {cur}, i32 {off}, i32 31)"));
            let r = w.bin(op, f, &cur, &o);
            w.emit(&format!("store float {r}, ptr {slot}"));
        }
    };
    for_loop(w, "%a.r", "0", &rpw.to_string(), 1, &mut |w| {
        let r = w.emit_op("load i64, ptr %a.r".into());
        let ro = w.emit_op(format!("mul nuw nsw i64 {r}, {WARPS}"));
        let row = w.emit_op(format!("add nuw nsw i64 {row0}, {ro}"));
        let inside = w.emit_op(format!("icmp slt i64 {row}, {rows}"));
        let rowc = w.emit_op(format!("select i1 {inside}, i64 {row}, i64 {}", rows - 1));
        unflatten(w, &rowc, &a.rows);
        // 1. The query row.
        lane_loop(w, ds, &lane, depth, 32, false, &mut |w| {
            let x = w.value(a.a);
            let d = w.emit_op(format!("load i64, ptr {ds}"));
            let i = w.emit_op(format!("add nuw nsw i64 {qbase}, {d}"));
            let p = shared_at(w, &sq, lq, "float", &i);
            w.emit(&format!("store float {x}, ptr addrspace(3) {p}"));
            Ok(())
        })?;
        barrier(w);
        // 2. Scores and their max. Where the terms nest (`Attention::chained`: a softmax), each pass's
        // value is kept in place of the score — `w(s)`, then `e` — so each score's mask, scale and exp
        // run once (the same bits).
        let (e_term, p_term, kept) = a.pass_terms();
        w.emit(&format!("store float {ninf}, ptr {mx}"));
        lane_loop(w, js, &lane, keys, 32, false, &mut |w| {
            score(w)?;
            let sv = w.emit_op(format!("load float, ptr {s}"));
            let x = w.value(a.w);
            let p = srow(w);
            let score = if kept { &x } else { &sv };
            w.emit(&format!("store float {score}, ptr addrspace(3) {p}"));
            let cur = w.emit_op(format!("load float, ptr {mx}"));
            let m = w.bin(BinaryOp::Max, f, &cur, &x);
            w.emit(&format!("store float {m}, ptr {mx}"));
            Ok(())
        })?;
        butterfly(w, mx, BinaryOp::Max);
        // 3. The sum, then the probabilities in place of the scores.
        w.emit(&format!("store float {zero}, ptr {l}"));
        lane_loop(w, js, &lane, keys, 32, false, &mut |w| {
            let p = srow(w);
            let sv = w.emit_op(format!("load float, ptr addrspace(3) {p}"));
            w.emit(&format!("store float {sv}, ptr {s}"));
            let x = w.value(&e_term);
            if kept {
                w.emit(&format!("store float {x}, ptr addrspace(3) {p}"));
            }
            let cur = w.emit_op(format!("load float, ptr {l}"));
            let n = w.bin(BinaryOp::Add, f, &cur, &x);
            w.emit(&format!("store float {n}, ptr {l}"));
            Ok(())
        })?;
        butterfly(w, l, BinaryOp::Add);
        lane_loop(w, js, &lane, keys, 32, false, &mut |w| {
            let p = srow(w);
            let sv = w.emit_op(format!("load float, ptr addrspace(3) {p}"));
            w.emit(&format!("store float {sv}, ptr {s}"));
            let x = w.value(&p_term);
            w.emit(&format!("store float {x}, ptr addrspace(3) {p}"));
            Ok(())
        })?;
        barrier(w);
        // 4. Probabilities × values, then the store.
        lane_loop(w, "%a.c", &lane, cols, 32, false, &mut |w| {
            let c = w.emit_op("load i64, ptr %a.c".into());
            bind_col(w, &c);
            w.emit(&format!("store float {zero}, ptr {acc}"));
            for_loop(w, js, "0", &keys.to_string(), 1, &mut |w| {
                let p = srow(w);
                let pj = w.emit_op(format!("load float, ptr addrspace(3) {p}"));
                let v = if staged {
                    let j = w.emit_op(format!("load i64, ptr {js}"));
                    let t = w.emit_op(format!("mul nuw nsw i64 {j}, {pv}"));
                    let i = w.emit_op(format!("add nuw nsw i64 {t}, {c}"));
                    let vp = shared_at(w, &sv, lv, "float", &i);
                    w.emit_op(format!("load float, ptr addrspace(3) {vp}"))
                } else {
                    w.value(a.v)
                };
                let cur = w.emit_op(format!("load float, ptr {acc}"));
                let m = w.bin(BinaryOp::Mul, f, &pj, &v);
                let n = w.bin(BinaryOp::Add, f, &cur, &m);
                w.emit(&format!("store float {n}, ptr {acc}"));
                Ok(())
            })?;
            if_(w, &inside, &mut |w| {
                w.body(a.rest);
                Ok(())
            })
        })?;
        barrier(w);
        Ok(())
    })?;
    Ok(([blocks as u32, 1, 1], BLOCK))
}
