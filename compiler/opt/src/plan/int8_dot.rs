//! `dequant_matmul` of a Q8_0 weight over few rows (decode; a prefill's last-row logits) as integer
//! dot products on int8-quantized activations ([`PlanOptions::int8_dot`](super::PlanOptions), CPUs
//! with AVX-512 VNNI): as llama.cpp's `ggml_vec_dot_q8_0_q8_0`.
//!
//! A launch before the matmul quantizes each row of x once, per block of 32 values as llama.cpp's
//! `quantize_row_q8_0` (x86): `q = round(x · 127 / max|x|)` (half to even), `d = max|x| / 127` rounded
//! to f16, stored as 4 biased bytes `q + 128` per i32 word (`[rows, K/4]`) and `d` (`[rows, K/32]`). The matmul is `blocks.rs`'s decode form with the
//! weight in quads (`block_layout.rs`): per block, for each group of 4 quants, one `Dot4` (x86's
//! `vpdpbusd`: unsigned × signed bytes into i32 lanes) per row of the tile adds `Σ (q + 128)·w`, and one
//! shared by the tile adds `Σ 128·w`; their difference is the block's exact integer dot product `Σ q·w`,
//! scaled once by `d_w · d_x` into the f32 accumulator.
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

/// Values per activation block (Q8_0's block).
const QK: usize = 32;

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
        self.int8_act.insert(a, (qx, qs));
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let qxp = kb.param(qx, &self.buffers[qx as usize].clone(), Access::Write);
        let qsp = kb.param(qs, &self.buffers[qs as usize].clone(), Access::Write);
        let (i, b, l, g) = (kb.var(), kb.var(), kb.var(), kb.var());
        let (m, d, id) = (kb.var(), kb.var(), kb.var());
        let col = |off: Expr| Expr::add(Expr::mul(Expr::Var(b), Expr::Int(QK as i64)), off);
        let xat = |me: &mut Self, kb: &mut KB, k: Expr| {
            let mut xi = unflatten(&Expr::Var(i), &sx[..sx.len() - 1]);
            xi.push(k);
            me.elem(kb, x, &xi)
        };
        let xl = xat(self, &mut kb, col(Expr::Var(l)));
        let amax = fb(BinaryOp::Max, Expr::Var(m), Expr::Un(UnaryOp::Abs, DType::F32, Box::new(xl)));
        // The word of group g: Σ_e ((round(x · id) as i32) + 128) << 8e.
        let mut word = lit(0.0, DType::I32);
        for e in 0..4i64 {
            let xv = xat(self, &mut kb, col(Expr::add(Expr::mul(Expr::Var(g), Expr::Int(4)), Expr::Int(e))));
            let q = Expr::Cast { from: DType::F32, to: DType::I32, x: Box::new(Expr::Un(UnaryOp::Round, DType::F32, Box::new(fb(BinaryOp::Mul, xv, Expr::Var(id))))) };
            word = ib(BinaryOp::Add, word, ib(BinaryOp::Shl, ib(BinaryOp::Add, q, lit(128.0, DType::I32)), lit((8 * e) as f64, DType::I32)));
        }
        let positive = Expr::Bin(BinaryOp::Gt, DType::F32, Box::new(Expr::Var(m)), Box::new(lit(0.0, DType::F32)));
        let blk = vec![
            Stmt::Decl { var: m, dtype: DType::F32, init: lit(0.0, DType::F32) },
            Stmt::For { var: l, extent: QK as i64, kind: LoopKind::Serial, body: vec![Stmt::Assign { var: m, value: amax }] },
            Stmt::Decl { var: d, dtype: DType::F32, init: f16_rounded(fb(BinaryOp::Div, Expr::Var(m), lit(127.0, DType::F32))) },
            Stmt::Decl { var: id, dtype: DType::F32, init: Expr::Select(Box::new(positive), Box::new(fb(BinaryOp::Div, lit(127.0, DType::F32), Expr::Var(m))), Box::new(lit(0.0, DType::F32))) },
            Stmt::Store { buf: qsp, index: Expr::add(Expr::mul(Expr::Var(i), Expr::Int(nblk as i64)), Expr::Var(b)), value: Expr::Var(d) },
            Stmt::For {
                var: g,
                extent: (QK / 4) as i64,
                kind: LoopKind::Serial,
                body: vec![Stmt::Store { buf: qxp, index: Expr::add(Expr::mul(Expr::Var(i), Expr::Int((kdim / 4) as i64)), Expr::add(Expr::mul(Expr::Var(b), Expr::Int((QK / 4) as i64)), Expr::Var(g))), value: word }],
            },
        ];
        let body = vec![Stmt::For { var: i, extent: rows as i64, kind: LoopKind::Serial, body: vec![Stmt::For { var: b, extent: nblk as i64, kind: LoopKind::Serial, body: blk }] }];
        let kernel = Kernel { name: format!("{} (int8 activations)", node.name), params: kb.params, body, vars: kb.vars };
        Some(Launch { nodes: vec![], kernel, bindings: kb.bindings })
    }

    /// The int8 form of `dequant_matmul` anchored at `a` (module doc): `for p parallel (panels) { for
    /// tile { for jj vector(nr) { per block: Σ (q+128)·w and Σ 128·w by Dot4, acc += (that) · d_w · d_x
    /// } } }`, the epilogue chain up to root `r` applied before the store.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn int8_gemv_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize], w: &BlockWeight, qx: u32, qs: u32) -> Vec<Stmt> {
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
        let qxp = kb.param(qx, &self.buffers[qx as usize].clone(), Access::Read);
        let qsp = kb.param(qs, &self.buffers[qs as usize].clone(), Access::Read);
        let row = |i: usize| clamp(Expr::add(Expr::mul(Expr::Var(t), Expr::Int(mr as i64)), Expr::Int(i as i64)), 0, rows as i64 - 1);
        let accs: Vec<_> = (0..mr).map(|_| kb.var()).collect();
        let sums: Vec<_> = (0..mr).map(|_| kb.var()).collect();
        let (wsum, wq, dw) = (kb.var(), kb.var(), kb.var());
        let zero_i = lit(0.0, DType::I32);
        // Group g of the block for lane jj: i32 (((p·nblk + b)·34 + 2 + 4g)·nr + 4·jj) / 4.
        let wq_at = Expr::add(Expr::mul(Expr::add(Expr::mul(blk, Expr::Int(bb)), Expr::add(Expr::Int(2), Expr::mul(Expr::Var(g), Expr::Int(4)))), Expr::Int(nr as i64 / 4)), Expr::Var(jj));
        let bias = lit(i32::from_le_bytes([0x80; 4]) as f64, DType::I32);
        let dot4 = |acc: Expr, x: Expr| Expr::Dot4(Box::new(acc), Box::new(x), Box::new(Expr::Var(wq)));
        let mut gbody = vec![Stmt::Decl { var: wq, dtype: DType::I32, init: Expr::load(wqp, wq_at) }, Stmt::Assign { var: wsum, value: dot4(Expr::Var(wsum), bias) }];
        for (i, &s) in sums.iter().enumerate() {
            let xq = Expr::load(qxp, Expr::add(Expr::mul(row(i), Expr::Int(k4)), Expr::add(Expr::mul(Expr::Var(b), Expr::Int(gs)), Expr::Var(g))));
            gbody.push(Stmt::Assign { var: s, value: dot4(Expr::Var(s), xq) });
        }
        let mut blk_body = prefetch_ahead(w, &f, Expr::Var(p), b);
        blk_body.push(Stmt::Decl { var: dw, dtype: DType::F32, init: f.h(0) });
        blk_body.extend(sums.iter().chain([&wsum]).map(|&v| Stmt::Assign { var: v, value: zero_i.clone() }));
        blk_body.push(Stmt::For { var: g, extent: gs, kind: LoopKind::Serial, body: gbody });
        for (i, (&acc, &s)) in accs.iter().zip(&sums).enumerate() {
            let dx = Expr::load(qsp, Expr::add(Expr::mul(row(i), Expr::Int(nblk as i64)), Expr::Var(b)));
            let dot = Expr::Cast { from: DType::I32, to: DType::F32, x: Box::new(ib(BinaryOp::Sub, Expr::Var(s), Expr::Var(wsum))) };
            blk_body.push(Stmt::Assign { var: acc, value: fb(BinaryOp::Add, Expr::Var(acc), fb(BinaryOp::Mul, dot, fb(BinaryOp::Mul, Expr::Var(dw), dx))) });
        }
        let mut vbody: Vec<Stmt> = accs.iter().map(|&v| Stmt::Decl { var: v, dtype: DType::F32, init: lit(0.0, DType::F32) }).collect();
        vbody.extend(sums.iter().chain([&wsum]).map(|&v| Stmt::Decl { var: v, dtype: DType::I32, init: zero_i.clone() }));
        vbody.push(Stmt::For { var: b, extent: nblk as i64, kind: LoopKind::Serial, body: blk_body });
        vbody.extend(self.block_stores(kb, a, r, op, out_shape, &accs, &row, Expr::add(Expr::mul(Expr::Var(p), Expr::Int(nr as i64)), Expr::Var(jj))));
        let vl = Stmt::For { var: jj, extent: nr as i64, kind: LoopKind::Vector(nr as u32), body: vbody };
        let tl = Stmt::For { var: t, extent: tiles as i64, kind: LoopKind::Serial, body: vec![vl] };
        vec![Stmt::For { var: p, extent: (w.rows / nr) as i64, kind: LoopKind::Parallel, body: vec![tl] }]
    }
}
