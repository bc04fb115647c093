//! `dequant_matmul` of a Q8_0 or Q5_0 weight over few rows (decode; a prefill's last-row logits) as
//! integer dot products on int8-quantized activations ([`PlanOptions::int8_dot`](super::PlanOptions),
//! CPUs with AVX-512 VNNI), as llama.cpp's `ggml_vec_dot_q8_0_q8_0` / `_q5_0_q8_0`.
//!
//! A launch before the matmul quantizes each row of x once, per block of 32 values as llama.cpp's
//! `quantize_row_q8_0` (x86): `q = round(x · 127 / max|x|)` (half to even), `d = max|x| / 127` rounded
//! to f16; it stores the quants as i32 words of 4 signed bytes (`[rows, K/4]`), `d` (`[rows, K/32]`)
//! and each block's `Σ q` (i32, `[rows, K/32]`). The matmul is `blocks.rs`'s decode form with the
//! weight in quads (`block_layout.rs`): per block and group of 4 values, the weights' 4 bytes made
//! unsigned `u = w + c` (Q8_0: `w ^ 0x80` per byte, c = 128; Q5_0: the nibble with its high bit from
//! `qh` spread into bit 4 of each byte, c = 16), one `Dot4` (x86's `vpdpbusd`: u8 × i8 into i32 lanes)
//! per row of the tile adds `Σ u·q`; the block's exact integer dot product is `Σ u·q − c·Σ q`, scaled
//! once by `d_w · d_x` into the f32 accumulator.
//!
//! Numerics: only x is rounded (the weights are the file's integers), by at most half a step of
//! `max|x| / 127` per value (the f16 scale moves a value's reconstruction by ≤ 2⁻¹¹ of max|x| more),
//! so an output differs from the f32 product by at most `Σ_blocks (max|x_block| / 254 + max|x_block| /
//! 2048) · Σ_block |w|` plus f32 rounding (compiler/rlxc/tests/llm_compiled.rs checks it against the
//! interpreter).

use super::block_layout::{fb, BlockWeight};
use super::blocks::{prefetch_ahead, PANEL_TILES};
use super::index::{clamp, unflatten};
use super::kernel::{lit, KB};
use super::Planner;
use rlx_ir::lir::{Base, Buffer, Launch};
use rlx_ir::loops::{Access, Expr, Kernel, LoopKind, Stmt};
use rlx_ir::{BinaryOp, DType, MirOp, NodeId, UnaryOp};
use std::collections::HashMap;

/// Values per activation block (Q8_0's and Q5_0's block).
const QK: usize = 32;

/// The block types the int8 form reads.
pub(super) fn takes(d: DType) -> bool {
    matches!(d, DType::Q8_0 | DType::Q5_0)
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
        let out = self.g.node(r).outputs[0];
        let a = self.fusion.anchor_of.get(&out).copied().unwrap_or(r);
        let node = self.g.node(a).clone();
        if node.op != MirOp::DequantMatMul {
            return None;
        }
        let w = self.block_weight.get(&node.inputs[1])?.clone();
        w.quads?;
        let x = node.inputs[0];
        let sx = self.shape(x);
        let rows: usize = sx[..sx.len() - 1].iter().product();
        let mr = self.mr.min(rows.max(1));
        if self.dt(x) != DType::F32 || rows.div_ceil(mr) >= PANEL_TILES || w.cols % QK != 0 {
            return None;
        }
        let (kdim, nblk) = (w.cols, w.cols / QK);
        let qx = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::I32, shape: vec![rows, kdim / 4], label: format!("{} (int8 activations)", node.name) }, None);
        let qs = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: vec![rows, nblk], label: format!("{} (int8 activation scales)", node.name) }, None);
        let qsum = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::I32, shape: vec![rows, nblk], label: format!("{} (int8 activation block sums)", node.name) }, None);
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
        // The word of group g: Σ_e (round(x · id) as i32 & 255) << 8e; the block's Σ q alongside.
        let mut word = lit(0.0, DType::I32);
        let mut qsum = Vec::new();
        for e in 0..4i64 {
            let xv = xat(self, &mut kb, col(Expr::add(Expr::mul(Expr::Var(g), Expr::Int(4)), Expr::Int(e))));
            let q = Expr::Cast { from: DType::F32, to: DType::I32, x: Box::new(Expr::Un(UnaryOp::Round, DType::F32, Box::new(fb(BinaryOp::Mul, xv, Expr::Var(id))))) };
            let qv = kb.var();
            qsum.push(Stmt::Decl { var: qv, dtype: DType::I32, init: q });
            qsum.push(Stmt::Assign { var: sum, value: ib(BinaryOp::Add, Expr::Var(sum), Expr::Var(qv)) });
            word = ib(BinaryOp::Add, word, ib(BinaryOp::Shl, ib(BinaryOp::BitAnd, Expr::Var(qv), lit(255.0, DType::I32)), lit((8 * e) as f64, DType::I32)));
        }
        qsum.push(Stmt::Store { buf: qxp, index: Expr::add(Expr::mul(Expr::Var(i), Expr::Int((kdim / 4) as i64)), Expr::add(Expr::mul(Expr::Var(b), Expr::Int((QK / 4) as i64)), Expr::Var(g))), value: word });
        let positive = Expr::Bin(BinaryOp::Gt, DType::F32, Box::new(Expr::Var(m)), Box::new(lit(0.0, DType::F32)));
        let blk = vec![
            Stmt::Decl { var: m, dtype: DType::F32, init: lit(0.0, DType::F32) },
            Stmt::For { var: l, extent: QK as i64, kind: LoopKind::Serial, body: vec![Stmt::Assign { var: m, value: amax }] },
            Stmt::Decl { var: d, dtype: DType::F32, init: f16_rounded(fb(BinaryOp::Div, Expr::Var(m), lit(127.0, DType::F32))) },
            Stmt::Decl { var: id, dtype: DType::F32, init: Expr::Select(Box::new(positive), Box::new(fb(BinaryOp::Div, lit(127.0, DType::F32), Expr::Var(m))), Box::new(lit(0.0, DType::F32))) },
            Stmt::Store { buf: qsp, index: Expr::add(Expr::mul(Expr::Var(i), Expr::Int(nblk as i64)), Expr::Var(b)), value: Expr::Var(d) },
            Stmt::Decl { var: sum, dtype: DType::I32, init: lit(0.0, DType::I32) },
            Stmt::For { var: g, extent: (QK / 4) as i64, kind: LoopKind::Serial, body: qsum },
            Stmt::Store { buf: qsump, index: Expr::add(Expr::mul(Expr::Var(i), Expr::Int(nblk as i64)), Expr::Var(b)), value: Expr::Var(sum) },
        ];
        let body = vec![Stmt::For { var: i, extent: rows as i64, kind: LoopKind::Serial, body: vec![Stmt::For { var: b, extent: nblk as i64, kind: LoopKind::Serial, body: blk }] }];
        let kernel = Kernel { name: format!("{} (int8 activations)", node.name), params: kb.params, body, vars: kb.vars };
        Some(Launch { nodes: vec![], kernel, bindings: kb.bindings })
    }

    /// The int8 form of `dequant_matmul` anchored at `a` (module doc): `for p parallel (panels) { for
    /// tile { for jj vector(nr) { per block: Σ u·q by Dot4, acc += (Σ u·q − c·Σ q) · d_w · d_x } } }`,
    /// the epilogue chain up to root `r` applied before the store.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn int8_gemv_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize], w: &BlockWeight, act: Int8Act) -> Vec<Stmt> {
        let rows: usize = out_shape[..out_shape.len() - 1].iter().product();
        let mr = self.mr.min(rows.max(1));
        let tiles = rows.div_ceil(mr);
        let (nr, nblk, k4) = (w.nr, w.nblk(), (w.cols / 4) as i64);
        let (bb, gs) = (w.dtype.block().1 as i64, (QK / 4) as i64);
        let (p, t, jj, b, g) = (kb.var(), kb.var(), kb.var(), kb.var(), kb.var());
        let blk = Expr::add(Expr::mul(Expr::Var(p), Expr::Int(nblk as i64)), Expr::Var(b));
        let f = self.fields(kb, w, blk.clone(), Expr::Var(jj));
        let quads = w.quads.expect("the int8 form reads a weight packed in quads");
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
        // Group `grp` (byte 2 + 4·grp of the block) for lane jj: i32 (((p·nblk + b)·bb + 2 + 4·grp)·nr + 4·jj) / 4.
        let quad = |grp: Expr| Expr::load(wqp, Expr::add(Expr::mul(Expr::add(Expr::mul(blk.clone(), Expr::Int(bb)), Expr::add(Expr::Int(2), Expr::mul(grp, Expr::Int(4)))), Expr::Int(nr as i64 / 4)), Expr::Var(jj)));
        // x's word for values 4·xg … 4·xg + 3 of block b, row i.
        let xword = |i: usize, xg: Expr| Expr::load(qxp, Expr::add(Expr::mul(row(i), Expr::Int(k4)), Expr::add(Expr::mul(Expr::Var(b), Expr::Int(gs)), xg)));
        let dot4 = |acc: Expr, x: Expr| Expr::Dot4(Box::new(acc), Box::new(Expr::Var(u)), Box::new(x));
        let shr = |x: Expr, n: Expr| ib(BinaryOp::Shr, x, n);
        let mut blk_body = prefetch_ahead(w, &f, Expr::Var(p), b);
        blk_body.push(Stmt::Decl { var: dw, dtype: DType::F32, init: f.h(0) });
        blk_body.extend(sums.iter().map(|&v| Stmt::Assign { var: v, value: zero_i.clone() }));
        let offset = if w.dtype == DType::Q8_0 {
            // Q8_0: 8 groups of 4 signed quants; u = w + 128 per byte.
            let mut gbody = vec![Stmt::Decl { var: wq, dtype: DType::I32, init: quad(Expr::Var(g)) }, Stmt::Decl { var: u, dtype: DType::I32, init: ib(BinaryOp::BitXor, Expr::Var(wq), c32(0x8080_8080)) }];
            for (i, &s) in sums.iter().enumerate() {
                gbody.push(Stmt::Assign { var: s, value: dot4(Expr::Var(s), xword(i, Expr::Var(g))) });
            }
            blk_body.push(Stmt::For { var: g, extent: gs, kind: LoopKind::Serial, body: gbody });
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
                    gbody.push(Stmt::Assign { var: s, value: dot4(Expr::Var(s), xword(i, Expr::add(Expr::Var(g), Expr::Int(4 * half)))) });
                }
            }
            blk_body.push(Stmt::For { var: g, extent: 4, kind: LoopKind::Serial, body: gbody });
            16.0
        };
        for (i, (&acc, &s)) in accs.iter().zip(&sums).enumerate() {
            let at = Expr::add(Expr::mul(row(i), Expr::Int(nblk as i64)), Expr::Var(b));
            let exact = ib(BinaryOp::Sub, Expr::Var(s), ib(BinaryOp::Mul, Expr::load(qsump, at.clone()), lit(offset, DType::I32)));
            let dot = Expr::Cast { from: DType::I32, to: DType::F32, x: Box::new(exact) };
            blk_body.push(Stmt::Assign { var: acc, value: fb(BinaryOp::Add, Expr::Var(acc), fb(BinaryOp::Mul, dot, fb(BinaryOp::Mul, Expr::Var(dw), Expr::load(qsp, at)))) });
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
