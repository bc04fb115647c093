//! Depthwise convolution over a zero-padded, phase-split copy of each channel plane. The window
//! kernels (`window.rs`) sum an output vector's taps into one accumulator — a chain of KH·KW
//! dependent multiply-adds per vector — leave the border columns to scalar code (a 5 × 5 window at
//! 28² has 4 of every 28 columns there, about half the row's instructions), and at stride 2 load each
//! tap's vector as two loads and a shuffle. Here a unit is an image × one channel: its input plane is
//! copied into the thread slot's scratch `[s][Hp][Wq]` — padded column `s·j + b` at phase `b`, column
//! `j`, the padding as zeros around the plane (written once per slot, never overwritten) — so that at
//! any stride every tap of a row of outputs is one unit-stride vector load, and up to [`MAX_ACCS`]
//! output vectors — a row's, or a few rows' when a row has fewer — are summed together: each tap's
//! weight is broadcast once for the block, the block's chains are independent, and no column is a
//! border column (a row that is not a whole number of vectors ends with one vector overlapping the one
//! before, and the last block of rows overlaps the one before when its rows do not divide the
//! output's: those outputs are computed and stored twice, with the same values). The epilogue runs on the whole vector at the
//! output's own index. The sum is the interpreter's order (bias, then kernel row, column); a padded tap
//! adds 0 · w, so the form is taken only for finite constant weights.

use super::blocks::{slot_units, SLOTS};
use super::dw_lanes::{padded, Depthwise};
use super::kernel::{lit, KB};
use super::Planner;
use rlx_ir::lir::{Base, Buffer};
use rlx_ir::loops::{Access, Expr, IOp, LoopKind, Stmt};
use rlx_ir::{BinaryOp, DType, MirOp, NodeId, OpSet};

/// Output vectors summed together (an accumulator each).
const MAX_ACCS: usize = 6;

/// A thread slot's padded planes may take at most this many bytes (they stay in L2).
const SCRATCH_BYTES: usize = 256 * 1024;

impl Planner<'_> {
    /// Whether depthwise convolution `a` takes the form (see the module doc): [`Planner::depthwise_f32`]
    /// at stride 1 or 2 along the width, output rows at least 4 columns wide, and a window of 25 taps or more, or an epilogue with an
    /// exponential (SiLU) at stride 1 or over rows of at most 32 columns. Measured one layer at a time
    /// against the window kernels (1 thread, CPU time, AVX-512): 5 × 5 at 28² 293 against 426 µs (SiLU),
    /// 209 against 253 (ReLU); 5 × 5 stride 2 from 56² 221 against 403 (SiLU), 175 against 308 (ReLU);
    /// 3 × 3 under SiLU at 56² 313 against 440, at 112² 267 against 296, stride 2 from 28² 96 against 138,
    /// at 14² 137 against 172 (the channels-as-lanes form as it was; with its staged copies it takes rows
    /// of up to one vector under SiLU itself, `dw_lanes.rs`); but 3 × 3 stride 2 from 112² 1.05–1.15×
    /// slower and 3 × 3 under ReLU 1.0–1.15× (the window kernels store each row through the epilogue
    /// without a staged pass there).
    pub(super) fn dw_padded_fits(&self, a: NodeId) -> bool {
        let Some(Depthwise { sw, so, strides, hp, wp, .. }) = self.depthwise_f32(a, 4) else { return false };
        let s1 = strides[1];
        let bytes = s1 * hp * wp.div_ceil(s1) * 4;
        let taps = sw[2] * sw[3];
        (s1 == 1 || s1 == 2) && so[3] >= 4 && bytes <= SCRATCH_BYTES && (taps >= 25 || (self.transcendental_epilogue(a) && (s1 == 1 || so[3] <= 32)))
    }

    /// The kernel of depthwise convolution anchor `a` in this form (root `r`, output param `op`).
    pub(super) fn dw_padded_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize]) -> Vec<Stmt> {
        let node = self.g.node(a).clone();
        let MirOp::Conv { strides, pads, dilations, .. } = &node.op else { unreachable!("dw_padded_body on {}", node.op.kind()) };
        let (x, wt, av) = (node.inputs[0], node.inputs[1], node.outputs[0]);
        let sx = self.shape(x);
        let sw = self.shape(wt);
        let (nb, c, h, w) = (sx[0], sx[1], sx[2], sx[3]);
        let (oh, ow, kh, kw) = (out_shape[2], out_shape[3], sw[2], sw[3]);
        let (s0, s1, d0, d1) = (strides[0], strides[1], dilations[0], dilations[1]);
        let (pt, pl) = (pads[0], pads[1]);
        let lanes = self.lanes;
        let (hp, wp) = (padded(oh, s0, kh, d0), padded(ow, s1, kw, d1));
        let wq = wp.div_ceil(s1);
        // One slot's scratch, rounded up to whole vectors (zeroed in vectors).
        let plane = (s1 * hp * wq).div_ceil(lanes) * lanes;
        let units = nb * c;
        let slots = SLOTS.min(units);
        let label = format!("{} (padded phase planes)", node.name);
        let sb = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: vec![slots, plane], label }, None);
        let sp = kb.param(sb, &self.buffers[sb as usize].clone(), Access::ReadWrite);
        let slot = kb.var();
        // Scratch element (phase b, padded row, column j) of this slot.
        let at = |b: usize, row: Expr, j: Expr| Expr::add(Expr::add(Expr::mul(Expr::Var(slot), Expr::Int(plane as i64)), Expr::mul(Expr::add(Expr::Int((b * hp) as i64), row), Expr::Int(wq as i64))), j);
        // A copy or zeroing over `count` consecutive elements starting at `start` (a loop variable's
        // offset): whole vectors, then one vector overlapping the last one, or single elements when
        // the run is narrower than a vector.
        let runs = |count: usize| -> Vec<(usize, usize, usize)> {
            if count >= lanes {
                let mut v = vec![(0, count / lanes * lanes, lanes)];
                if count % lanes != 0 {
                    v.push((count - lanes, lanes, lanes));
                }
                v
            } else {
                vec![(0, count, 1)]
            }
        };
        let kind = |width: usize| LoopKind::run(width as u32);
        // The padding: zeros, once per slot (units only rewrite the planes' interior).
        let q = kb.var();
        let zero = Stmt::Store { buf: sp, index: Expr::add(Expr::mul(Expr::Var(slot), Expr::Int(plane as i64)), Expr::Var(q)), value: lit(0.0, DType::F32) };
        let mut slot_body = vec![Stmt::For { var: q, extent: plane as i64, kind: LoopKind::Vector(lanes as u32), body: vec![zero] }];
        // Unit u: image u / c, channel u % c.
        let (j, uv) = (kb.var(), kb.var());
        let ni = if nb > 1 { Expr::i(IOp::Div, Expr::Var(uv), Expr::Int(c as i64)) } else { Expr::Int(0) };
        let ch = if nb > 1 { Expr::i(IOp::Rem, Expr::Var(uv), Expr::Int(c as i64)) } else { Expr::Var(uv) };
        // The input plane into the scratch, phase by phase: input column s·j + b − pl at column j.
        let hc = h.min(hp.saturating_sub(pt));
        let iy = kb.var();
        let mut rows = Vec::new();
        for b in 0..s1 {
            let j0 = if pl > b { (pl - b).div_ceil(s1) } else { 0 };
            let last = (pl + w.min(wp.saturating_sub(pl))) as i64 - 1 - b as i64;
            let j1 = if last < 0 { 0 } else { (last as usize / s1 + 1).min(wq) };
            if j1 <= j0 {
                continue;
            }
            for (start, count, width) in runs(j1 - j0) {
                let jv = kb.var();
                let jj = Expr::add(Expr::Int((j0 + start) as i64), Expr::Var(jv));
                let col = Expr::i(IOp::Sub, Expr::add(Expr::mul(jj.clone(), Expr::Int(s1 as i64)), Expr::Int(b as i64)), Expr::Int(pl as i64));
                let v = self.elem(kb, x, &[ni.clone(), ch.clone(), Expr::Var(iy), col]);
                let st = Stmt::Store { buf: sp, index: at(b, Expr::add(Expr::Var(iy), Expr::Int(pt as i64)), jj), value: v };
                rows.push(Stmt::For { var: jv, extent: count as i64, kind: kind(width), body: vec![st] });
            }
        }
        let mut unit = vec![Stmt::For { var: iy, extent: hc as i64, kind: LoopKind::Serial, body: rows }];
        // The output rows: vectors at columns 0, vw, … and one ending at the last column, in blocks;
        // vectors narrower than the target's (down to 4 lanes) where a row is.
        let mut vw = lanes;
        while vw > 4 && ow < vw {
            vw /= 2;
        }
        let lanes = vw;
        let mut starts: Vec<usize> = (0..ow / lanes).map(|v| v * lanes).collect();
        if ow % lanes != 0 {
            starts.push(ow - lanes);
        }
        let nblk = starts.len().div_ceil(MAX_ACCS);
        let per = starts.len().div_ceil(nblk);
        // Output rows summed together: of the counts that keep at most MAX_ACCS accumulators, the one
        // recomputing the fewest rows, then the largest; the last block of rows starts at oh − rows
        // (overlapping the one before when rows do not divide oh). Against one row at a time (1 thread,
        // SiLU): 3 × 3 at 14² 148 against 162 µs, stride 2 from 28² 109 against 120, 5 × 5 at 28² 264
        // against 283; the most rows that fit (3 of 28, recomputing 2) 278 there.
        let most = (MAX_ACCS / per).clamp(1, oh);
        let rows = (1..=most).min_by_key(|&r| (oh.div_ceil(r) * r - oh, usize::MAX - r)).unwrap_or(1);
        let ob = kb.var();
        let oy = Expr::i(IOp::Min, Expr::mul(Expr::Var(ob), Expr::Int(rows as i64)), Expr::Int((oh - rows) as i64));
        let bias = node.inputs.get(2).copied();
        let mut row = Vec::new();
        for block in starts.chunks(per) {
            let lv = kb.var();
            let ky = kb.var();
            // accs[i · block.len() + v]: output row oy + i, vector v of the block.
            let accs: Vec<_> = (0..rows * block.len()).map(|_| kb.var()).collect();
            let init = match bias {
                Some(bv) => self.elem(kb, bv, &[ch.clone()]),
                None => lit(0.0, DType::F32),
            };
            let mut body: Vec<Stmt> = accs.iter().map(|&acc| Stmt::Decl { var: acc, dtype: DType::F32, init: init.clone() }).collect();
            let prow = |i: usize| Expr::add(Expr::mul(Expr::add(oy.clone(), Expr::Int(i as i64)), Expr::Int(s0 as i64)), Expr::mul(Expr::Var(ky), Expr::Int(d0 as i64)));
            let mut taps = Vec::new();
            for kx in 0..kw {
                let wv = self.elem(kb, wt, &[ch.clone(), Expr::Int(0), Expr::Var(ky), Expr::Int(kx as i64)]);
                let wvar = kb.var();
                taps.push(Stmt::Decl { var: wvar, dtype: DType::F32, init: wv });
                let (b, off) = ((kx * d1) % s1, (kx * d1) / s1);
                for i in 0..rows {
                    for (v, &start) in block.iter().enumerate() {
                        let acc = accs[i * block.len() + v];
                        let xv = Expr::load(sp, at(b, prow(i), Expr::add(Expr::Int((start + off) as i64), Expr::Var(lv))));
                        let prod = Expr::Bin(BinaryOp::Mul, DType::F32, Box::new(xv), Box::new(Expr::Var(wvar)));
                        taps.push(Stmt::Assign { var: acc, value: Expr::Bin(BinaryOp::Add, DType::F32, Box::new(Expr::Var(acc)), Box::new(prod)) });
                    }
                }
            }
            body.push(Stmt::For { var: ky, extent: kh as i64, kind: LoopKind::Serial, body: taps });
            for i in 0..rows {
                for (v, &start) in block.iter().enumerate() {
                    let idx = [ni.clone(), ch.clone(), Expr::add(oy.clone(), Expr::Int(i as i64)), Expr::add(Expr::Int(start as i64), Expr::Var(lv))];
                    body.push(self.store_with_epilogue(kb, av, Expr::Var(accs[i * block.len() + v]), a, r, op, &idx, out_shape));
                }
            }
            row.push(Stmt::For { var: lv, extent: lanes as i64, kind: LoopKind::Vector(lanes as u32), body });
        }
        unit.push(Stmt::For { var: ob, extent: oh.div_ceil(rows) as i64, kind: LoopKind::Serial, body: row });
        slot_body.push(slot_units(slot, (j, uv), units, slots, unit));
        vec![Stmt::For { var: slot, extent: slots as i64, kind: LoopKind::Parallel, body: slot_body }]
    }
}
