//! `dequant_matmul` of a Q8_0, Q5_0, Q4_K or Q6_K weight (decode's few rows, and prefill's many with
//! [`PlanOptions::int8_gemm`](super::PlanOptions)) as
//! integer dot products on int8-quantized activations ([`PlanOptions::int8_dot`](super::PlanOptions),
//! CPUs with an int8 dot product instruction), as llama.cpp's `ggml_vec_dot_q8_0_q8_0`, `_q5_0_q8_0`,
//! `_q4_K_q8_K`, `_q6_K_q8_K`.
//!
//! A launch before the matmul quantizes each row of x once, per block of 32 values as llama.cpp's
//! `quantize_row_q8_0` (x86): `q = round(x · 127 / max|x|)` (half to even), `d = max|x| / 127` rounded
//! to f16; it stores the quants as i32 words of 4 signed bytes (`[rows, K/4]`), `d` (`[rows, K/32]`)
//! and each half block's `Σ q` (i32, `[rows, K/16]`). The matmul is `blocks.rs`'s decode form (panels
//! the parallel loop, tiles of `mr` rows inside: prefill's tiles reread a panel from L1) with the
//! weight in quads (`block_layout.rs`): per sub-block and group of 4 values, the weights' 4 bytes made
//! unsigned `u = w + c` (Q8_0: `w ^ 0x80` per byte, c = 128; Q5_0: the nibble with its high bit from
//! `qh` spread into bit 4 of each byte, c = 16; Q4_K: the nibble, c = 0; Q6_K: `ql`'s nibble with `qh`'s
//! two bits above it, c = 32), one `Dot4` (u8 × i8 into i32 lanes; the bound on `u` goes with it for
//! the writer) per row of the tile adds `Σ u·q`; the sub-block's exact integer dot product is
//! `Σ u·q − c·Σ q`, scaled once by the weight's (sub-block) scale and `d_x` into the f32 accumulator;
//! Q4_K's min enters as `dmin·m·Σ q`.
//!
//! Numerics: only x is rounded (the weights are the file's integers), by at most half a step of
//! `max|x| / 127` per value (the f16 scale moves a value's reconstruction by ≤ 2⁻¹¹ of max|x| more),
//! so an output differs from the f32 product by at most `Σ_blocks (max|x_block| / 254 + max|x_block| /
//! 2048) · Σ_block |w|` plus f32 rounding (compiler/rlxc/tests/llm_compiled.rs checks it against the
//! interpreter for every type here and every `Dot4` instruction).

use super::block_layout::{fb, quad_bytes, value, BlockWeight};
use super::blocks::{prefetch_ahead, PANEL_TILES};
use super::index::{clamp, unflatten};
use super::kernel::{lit, KB};
use super::Planner;
use rlx_ir::lir::{Base, Buffer, Launch};
use rlx_ir::loops::{Access, Expr, Kernel, LoopKind, Stmt, Var};
use rlx_ir::{BinaryOp, DType, NodeId, UnaryOp};
use std::collections::HashMap;

/// Values per activation block (Q8_0's and Q5_0's block).
const QK: usize = 32;

/// The block types the int8 form reads (those with quad bytes, `block_layout::quad_bytes`).
pub(super) fn takes(d: DType) -> bool {
    matches!(d, DType::Q8_0 | DType::Q5_0 | DType::Q4_K | DType::Q6_K)
}

/// A matmul's quantized activations (buffer ids): words of 4 signed bytes `[rows, K/4]`, scales
/// `[rows, K/32]` (f32), block sums `[rows, K/32]` (i32).
#[derive(Clone, Copy, Debug)]
pub(super) struct Int8Act {
    qx: u32,
    qs: u32,
    qsum: u32,
}

/// `x` rounded to f16 and back (llama.cpp stores an activation block's scale as f16).
fn f16_rounded(x: Expr) -> Expr {
    Expr::Cast { from: DType::F16, to: DType::F32, x: Box::new(Expr::Cast { from: DType::F32, to: DType::F16, x: Box::new(x) }) }
}

fn ib(op: BinaryOp, a: Expr, b: Expr) -> Expr {
    Expr::Bin(op, DType::I32, Box::new(a), Box::new(b))
}

impl Planner<'_> {
    /// The quantization launch before the kernel rooted at `r`, when its anchor is a `dequant_matmul`
    /// in the int8 form (module doc); records the form for `block_matmul_body`.
    pub(super) fn int8_launch(&mut self, r: NodeId) -> Option<Launch> {
        if !self.int8_dot {
            return None;
        }
        let (a, node, w, rows) = self.dequant_matmul_at(r)?;
        w.quads?;
        let x = node.inputs[0];
        let sx = self.shape(x);
        let mr = self.mr.min(rows.max(1));
        if self.dt(x) != DType::F32 || w.cols % QK != 0 || (!self.int8_gemm && rows.div_ceil(mr) >= PANEL_TILES) {
            return None;
        }
        let (kdim, nblk) = (w.cols, w.cols / QK);
        let qx = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::I32, shape: vec![rows, kdim / 4], label: format!("{} (int8 activations)", node.name) }, None);
        let qs = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: vec![rows, nblk], label: format!("{} (int8 activation scales)", node.name) }, None);
        let qsum = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::I32, shape: vec![rows, 2 * nblk], label: format!("{} (int8 activation half-block sums)", node.name) }, None);
        self.int8_act.insert(a, Int8Act { qx, qs, qsum });
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let qxp = kb.param(qx, &self.buffers[qx as usize].clone(), Access::Write);
        let qsp = kb.param(qs, &self.buffers[qs as usize].clone(), Access::Write);
        let qsump = kb.param(qsum, &self.buffers[qsum as usize].clone(), Access::Write);
        let (i, b, l, g) = (kb.var(), kb.var(), kb.var(), kb.var());
        let (m, d, id, sum) = (kb.var(), kb.var(), kb.var(), kb.var());
        let col = |off: Expr| Expr::add(Expr::mul(Expr::Var(b), Expr::Int(QK as i64)), off);
        let xat = |me: &mut Self, kb: &mut KB, k: Expr| {
            let mut xi = unflatten(&Expr::Var(i), &sx[..sx.len() - 1]);
            xi.push(k);
            me.elem(kb, x, &xi)
        };
        let xl = xat(self, &mut kb, col(Expr::Var(l)));
        let amax = fb(BinaryOp::Max, Expr::Var(m), Expr::Un(UnaryOp::Abs, DType::F32, Box::new(xl)));
        // The word of group g of half h: Σ_e (round(x · id) as i32 & 255) << 8e; the half's Σ q alongside.
        let h = kb.var();
        let grp = Expr::add(Expr::mul(Expr::Var(h), Expr::Int(4)), Expr::Var(g));
        let mut word = lit(0.0, DType::I32);
        let mut qsum = Vec::new();
        for e in 0..4i64 {
            let xv = xat(self, &mut kb, col(Expr::add(Expr::mul(grp.clone(), Expr::Int(4)), Expr::Int(e))));
            let q = Expr::Cast { from: DType::F32, to: DType::I32, x: Box::new(Expr::Un(UnaryOp::Round, DType::F32, Box::new(fb(BinaryOp::Mul, xv, Expr::Var(id))))) };
            let qv = kb.var();
            qsum.push(Stmt::Decl { var: qv, dtype: DType::I32, init: q });
            qsum.push(Stmt::Assign { var: sum, value: ib(BinaryOp::Add, Expr::Var(sum), Expr::Var(qv)) });
            word = ib(BinaryOp::Add, word, ib(BinaryOp::Shl, ib(BinaryOp::BitAnd, Expr::Var(qv), lit(255.0, DType::I32)), lit((8 * e) as f64, DType::I32)));
        }
        qsum.push(Stmt::Store { buf: qxp, index: Expr::add(Expr::mul(Expr::Var(i), Expr::Int((kdim / 4) as i64)), Expr::add(Expr::mul(Expr::Var(b), Expr::Int((QK / 4) as i64)), grp)), value: word });
        let positive = Expr::Bin(BinaryOp::Gt, DType::F32, Box::new(Expr::Var(m)), Box::new(lit(0.0, DType::F32)));
        let blk = vec![
            Stmt::Decl { var: m, dtype: DType::F32, init: lit(0.0, DType::F32) },
            Stmt::For { var: l, extent: QK as i64, kind: LoopKind::Serial, body: vec![Stmt::Assign { var: m, value: amax }] },
            Stmt::Decl { var: d, dtype: DType::F32, init: f16_rounded(fb(BinaryOp::Div, Expr::Var(m), lit(127.0, DType::F32))) },
            Stmt::Decl { var: id, dtype: DType::F32, init: Expr::Select(Box::new(positive), Box::new(fb(BinaryOp::Div, lit(127.0, DType::F32), Expr::Var(m))), Box::new(lit(0.0, DType::F32))) },
            Stmt::Store { buf: qsp, index: Expr::add(Expr::mul(Expr::Var(i), Expr::Int(nblk as i64)), Expr::Var(b)), value: Expr::Var(d) },
            Stmt::For {
                var: h,
                extent: 2,
                kind: LoopKind::Serial,
                body: vec![
                    Stmt::Decl { var: sum, dtype: DType::I32, init: lit(0.0, DType::I32) },
                    Stmt::For { var: g, extent: (QK / 8) as i64, kind: LoopKind::Serial, body: qsum },
                    Stmt::Store { buf: qsump, index: Expr::add(Expr::mul(Expr::Var(i), Expr::Int(2 * nblk as i64)), Expr::add(Expr::mul(Expr::Var(b), Expr::Int(2)), Expr::Var(h))), value: Expr::Var(sum) },
                ],
            },
        ];
        let body = vec![Stmt::For { var: i, extent: rows as i64, kind: LoopKind::Parallel, body: vec![Stmt::For { var: b, extent: nblk as i64, kind: LoopKind::Serial, body: blk }] }];
        let kernel = Kernel { name: format!("{} (int8 activations)", node.name), params: kb.params, body, vars: kb.vars };
        Some(Launch { nodes: vec![], kernel, bindings: kb.bindings })
    }

    /// The int8 form of `dequant_matmul` anchored at `a` (module doc): `for p parallel (panels) { for
    /// tile { for jj vector(nr) { per sub-block: Σ u·q by Dot4, acc += its exact integer dot product
    /// scaled (less its min) } } }`, the epilogue chain up to root `r` applied before the store.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn int8_gemv_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize], w: &BlockWeight, act: Int8Act) -> Vec<Stmt> {
        let rows: usize = out_shape[..out_shape.len() - 1].iter().product();
        let mr = self.mr.min(rows.max(1));
        let tiles = rows.div_ceil(mr);
        let (nr, nblk, k4) = (w.nr, w.nblk(), (w.cols / 4) as i64);
        let (bs, bb) = (w.dtype.block().0 as i64, w.dtype.block().1 as i64);
        let (per, nab, gs) = (bs / QK as i64, (w.cols / QK) as i64, (QK / 4) as i64);
        let (p, t, jj, b, g) = (kb.var(), kb.var(), kb.var(), kb.var(), kb.var());
        let blk = Expr::add(Expr::mul(Expr::Var(p), Expr::Int(nblk as i64)), Expr::Var(b));
        let f = self.fields(kb, w, blk.clone(), Expr::Var(jj));
        let quads = w.quads.expect("the int8 form reads a weight packed in quads");
        let (qs0, _) = quad_bytes(w.dtype).expect("the int8 form reads a type with quad bytes");
        let wqp = kb.param(quads, &self.buffers[quads as usize].clone(), Access::Read);
        let qxp = kb.param(act.qx, &self.buffers[act.qx as usize].clone(), Access::Read);
        let qsp = kb.param(act.qs, &self.buffers[act.qs as usize].clone(), Access::Read);
        let qsump = kb.param(act.qsum, &self.buffers[act.qsum as usize].clone(), Access::Read);
        let row = |i: usize| clamp(Expr::add(Expr::mul(Expr::Var(t), Expr::Int(mr as i64)), Expr::Int(i as i64)), 0, rows as i64 - 1);
        let accs: Vec<_> = (0..mr).map(|_| kb.var()).collect();
        let sums: Vec<_> = (0..mr).map(|_| kb.var()).collect();
        let (wq, u, dw, qh) = (kb.var(), kb.var(), kb.var(), kb.var());
        let zero_i = lit(0.0, DType::I32);
        let c32 = |v: u32| lit(v as i32 as f64, DType::I32);
        // Quad group `grp` (byte s + 4·grp of the block) for lane jj: i32 (((p·nblk + b)·bb + s + 4·grp)·nr + 4·jj) / 4.
        let quad = |grp: Expr| Expr::load(wqp, Expr::add(Expr::mul(Expr::add(Expr::mul(blk.clone(), Expr::Int(bb)), Expr::add(Expr::Int(qs0 as i64), Expr::mul(grp, Expr::Int(4)))), Expr::Int(nr as i64 / 4)), Expr::Var(jj)));
        // Activation block `j` of weight block b, its word for values 4·xg … 4·xg + 3 (row i), its scale and half-block sums.
        let ab = |j: i64| Expr::add(Expr::mul(Expr::Var(b), Expr::Int(per)), Expr::Int(j));
        let xword = |i: usize, j: i64, xg: Expr| Expr::load(qxp, Expr::add(Expr::mul(row(i), Expr::Int(k4)), Expr::add(Expr::mul(ab(j), Expr::Int(gs)), xg)));
        let dx = |i: usize, j: i64| Expr::load(qsp, Expr::add(Expr::mul(row(i), Expr::Int(nab)), ab(j)));
        let hsum = |i: usize, j: i64, half: i64| Expr::load(qsump, Expr::add(Expr::mul(row(i), Expr::Int(2 * nab)), Expr::add(Expr::mul(ab(j), Expr::Int(2)), Expr::Int(half))));
        let bsum = |i: usize, j: i64| ib(BinaryOp::Add, hsum(i, j, 0), hsum(i, j, 1));
        let to_f = |e: Expr| Expr::Cast { from: DType::I32, to: DType::F32, x: Box::new(e) };
        // The largest byte of u: Q8_0's w + 128 any byte, Q5_0's 5 bits, Q4_K's nibble, Q6_K's 6 bits.
        let umax: u8 = match w.dtype {
            DType::Q8_0 => 255,
            DType::Q5_0 => 31,
            DType::Q4_K => 15,
            _ => 63,
        };
        let dot4 = |acc: Expr, u: Var, x: Expr| Expr::Dot4(Box::new(acc), Box::new(Expr::Var(u)), Box::new(x), umax);
        let shr = |x: Expr, n: Expr| ib(BinaryOp::Shr, x, n);
        let reset = |out: &mut Vec<Stmt>| out.extend(sums.iter().map(|&v| Stmt::Assign { var: v, value: zero_i.clone() }));
        // One loop (index gv, a variable of its own) over `extent` groups from `xg0` of activation block
        // `j`: `pre` (declaring uv) then one Dot4 per row.
        let group_loop = |gv: Var, uv: Var, pre: Vec<Stmt>, j: i64, xg0: i64, extent: i64| {
            let mut gbody = pre;
            for (i, &s) in sums.iter().enumerate() {
                gbody.push(Stmt::Assign { var: s, value: dot4(Expr::Var(s), uv, xword(i, j, Expr::add(Expr::Int(xg0), Expr::Var(gv)))) });
            }
            Stmt::For { var: gv, extent, kind: LoopKind::Serial, body: gbody }
        };
        let add_acc = |out: &mut Vec<Stmt>, i: usize, v: Expr| out.push(Stmt::Assign { var: accs[i], value: fb(BinaryOp::Add, Expr::Var(accs[i]), v) });
        let mut blk_body = prefetch_ahead(w, &f, Expr::Var(p), b);
        match w.dtype {
            DType::Q8_0 | DType::Q5_0 => {
                blk_body.push(Stmt::Decl { var: dw, dtype: DType::F32, init: f.h(0) });
                reset(&mut blk_body);
                let offset = if w.dtype == DType::Q8_0 {
                    // Q8_0: 8 groups of 4 signed quants; u = w + 128 per byte.
                    let pre = vec![Stmt::Decl { var: wq, dtype: DType::I32, init: quad(Expr::Var(g)) }, Stmt::Decl { var: u, dtype: DType::I32, init: ib(BinaryOp::BitXor, Expr::Var(wq), c32(0x8080_8080)) }];
                    blk_body.push(group_loop(g, u, pre, 0, 0, gs));
                    128.0
                } else {
                    // Q5_0: qh (group 0), then 4 groups of nibbles: byte l holds value l (low) and 16 + l (high);
                    // value k's fifth bit is bit k of qh. u = nibble | bit << 4, the value u − 16.
                    blk_body.push(Stmt::Decl { var: qh, dtype: DType::I32, init: quad(Expr::Int(0)) });
                    let g4 = ib(BinaryOp::Mul, Expr::Cast { from: DType::I64, to: DType::I32, x: Box::new(Expr::Var(g)) }, c32(4));
                    // Bits n … n+3 of qh spread into bit 4 of each byte (4 bits × 0x204081: bit e at 8e, no carries).
                    let spread = |n: Expr| ib(BinaryOp::Shl, ib(BinaryOp::BitAnd, ib(BinaryOp::Mul, ib(BinaryOp::BitAnd, shr(Expr::Var(qh), n), c32(15)), c32(0x0020_4081)), c32(0x0101_0101)), c32(4));
                    let mut gbody = vec![Stmt::Decl { var: wq, dtype: DType::I32, init: quad(Expr::add(Expr::Var(g), Expr::Int(1))) }];
                    for half in 0..2i64 {
                        let nib = ib(BinaryOp::BitAnd, shr(Expr::Var(wq), c32(4 * half as u32)), c32(0x0F0F_0F0F));
                        let hb = spread(ib(BinaryOp::Add, g4.clone(), c32(16 * half as u32)));
                        gbody.push(if half == 0 { Stmt::Decl { var: u, dtype: DType::I32, init: ib(BinaryOp::BitOr, nib, hb) } } else { Stmt::Assign { var: u, value: ib(BinaryOp::BitOr, nib, hb) } });
                        for (i, &s) in sums.iter().enumerate() {
                            gbody.push(Stmt::Assign { var: s, value: dot4(Expr::Var(s), u, xword(i, 0, Expr::add(Expr::Var(g), Expr::Int(4 * half)))) });
                        }
                    }
                    blk_body.push(Stmt::For { var: g, extent: 4, kind: LoopKind::Serial, body: gbody });
                    16.0
                };
                for (i, &s) in sums.iter().enumerate() {
                    let exact = ib(BinaryOp::Sub, Expr::Var(s), ib(BinaryOp::Mul, bsum(i, 0), lit(offset, DType::I32)));
                    add_acc(&mut blk_body, i, fb(BinaryOp::Mul, to_f(exact), fb(BinaryOp::Mul, Expr::Var(dw), dx(i, 0))));
                }
            }
            DType::Q4_K => {
                // 8 sub-blocks of 32 (one activation block each): sub-block s is the low (s even) or high
                // nibbles of bytes 16 + 32·(s/2) … + 31, quad groups 8·(s/2) …; u = the nibble (no offset),
                // the value d·sc·u − dmin·m: Σ w·x̂ = d_x·(d·sc·Σ u·q − dmin·m·Σ q).
                for sb in 0..8i64 {
                    let (dl, ml, _) = value(w.dtype, &f, sb as usize, &Expr::Int(0));
                    let (dv, mv) = (kb.var(), kb.var());
                    blk_body.push(Stmt::Decl { var: dv, dtype: DType::F32, init: dl.expect("Q4_K has a scale") });
                    blk_body.push(Stmt::Decl { var: mv, dtype: DType::F32, init: ml.expect("Q4_K has a min") });
                    reset(&mut blk_body);
                    let (gv, uv) = (kb.var(), kb.var());
                    let nib = ib(BinaryOp::BitAnd, shr(quad(Expr::add(Expr::Int(8 * (sb / 2)), Expr::Var(gv))), c32(4 * (sb % 2) as u32)), c32(0x0F0F_0F0F));
                    blk_body.push(group_loop(gv, uv, vec![Stmt::Decl { var: uv, dtype: DType::I32, init: nib }], sb, 0, gs));
                    for (i, &s) in sums.iter().enumerate() {
                        let v = fb(BinaryOp::Sub, fb(BinaryOp::Mul, to_f(Expr::Var(s)), Expr::Var(dv)), fb(BinaryOp::Mul, to_f(bsum(i, sb)), Expr::Var(mv)));
                        add_acc(&mut blk_body, i, fb(BinaryOp::Mul, v, dx(i, sb)));
                    }
                }
            }
            _ => {
                // Q6_K: 16 sub-blocks of 16; sub-block s = 8h + 2k + e is values 128h + 32k + 16e + l, the
                // low (k < 2) or high nibble of ql byte 64h + 32·(k%2) + 16e + l with bits 2k, 2k+1 of qh byte
                // 128 + 32h + 16e + l above it: u = 6 bits, the value d·sc·(u − 32). Activation block 4h + k,
                // its half e: Σ w·x̂ = d_x·d·sc·(Σ u·q − 32·Σ q).
                for sb in 0..16i64 {
                    let (h, k, e) = (sb / 8, (sb % 8) / 2, sb % 2);
                    let (dl, _, _) = value(w.dtype, &f, sb as usize, &Expr::Int(0));
                    let dv = kb.var();
                    blk_body.push(Stmt::Decl { var: dv, dtype: DType::F32, init: dl.expect("Q6_K has a scale") });
                    reset(&mut blk_body);
                    let (gv, lo, hv, uv) = (kb.var(), kb.var(), kb.var(), kb.var());
                    let ql = ib(BinaryOp::BitAnd, shr(Expr::Var(lo), c32(4 * (k / 2) as u32)), c32(0x0F0F_0F0F));
                    let hi = ib(BinaryOp::Shl, ib(BinaryOp::BitAnd, shr(Expr::Var(hv), c32(2 * k as u32)), c32(0x0303_0303)), c32(4));
                    let pre = vec![
                        Stmt::Decl { var: lo, dtype: DType::I32, init: quad(Expr::add(Expr::Int((64 * h + 32 * (k % 2) + 16 * e) / 4), Expr::Var(gv))) },
                        Stmt::Decl { var: hv, dtype: DType::I32, init: quad(Expr::add(Expr::Int((128 + 32 * h + 16 * e) / 4), Expr::Var(gv))) },
                        Stmt::Decl { var: uv, dtype: DType::I32, init: ib(BinaryOp::BitOr, ql, hi) },
                    ];
                    blk_body.push(group_loop(gv, uv, pre, 4 * h + k, 4 * e, 4));
                    for (i, &s) in sums.iter().enumerate() {
                        let exact = ib(BinaryOp::Sub, Expr::Var(s), ib(BinaryOp::Mul, hsum(i, 4 * h + k, e), lit(32.0, DType::I32)));
                        add_acc(&mut blk_body, i, fb(BinaryOp::Mul, fb(BinaryOp::Mul, to_f(exact), Expr::Var(dv)), dx(i, 4 * h + k)));
                    }
                }
            }
        }
        let mut vbody: Vec<Stmt> = accs.iter().map(|&v| Stmt::Decl { var: v, dtype: DType::F32, init: lit(0.0, DType::F32) }).collect();
        vbody.extend(sums.iter().map(|&v| Stmt::Decl { var: v, dtype: DType::I32, init: zero_i.clone() }));
        vbody.push(Stmt::For { var: b, extent: nblk as i64, kind: LoopKind::Serial, body: blk_body });
        vbody.extend(self.block_stores(kb, a, r, op, out_shape, &accs, &row, Expr::add(Expr::mul(Expr::Var(p), Expr::Int(nr as i64)), Expr::Var(jj))));
        let vl = Stmt::For { var: jj, extent: nr as i64, kind: LoopKind::Vector(nr as u32), body: vbody };
        let tl = Stmt::For { var: t, extent: tiles as i64, kind: LoopKind::Serial, body: vec![vl] };
        vec![Stmt::For { var: p, extent: (w.rows / nr) as i64, kind: LoopKind::Parallel, body: vec![tl] }]
    }
}
