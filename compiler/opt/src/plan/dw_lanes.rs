//! Depthwise convolution over small planes with the channels as the vector lanes. On a 7 × 7 or 14 × 14
//! output the window kernels (`window.rs`) leave most positions to their scalar border columns and
//! rows — a 5 × 5 window has two of each on every side — and an activation in the epilogue (SiLU's
//! sigmoid) is then evaluated one lane at a time: EfficientNet-B0's 5 × 5 layers at 7² took 12× ONNX
//! Runtime's time. Here a unit is an image × a block of `lanes` channels: its input planes are copied
//! into the thread slot's scratch `[Hp][Wp][lanes]` with the padding as zeros around them (written
//! once per slot, never overwritten), then every output position is one vector of the block's
//! channels summing all KH × KW taps — no bounds check, no mask, any stride or dilation — with the
//! weight packed at compile time as `[C / lanes][KH·KW][lanes]`. The planes go in, and the outputs out,
//! through the slot's staging `[P][lanes]` (P positions, channels contiguous): the block's planes are
//! transposed into it by register tiles (`transpose.rs`'s `plane_tiles`; the last P mod lanes positions
//! a lane per plane), then copied into the padded scratch a vector per position; each output vector is
//! stored into it after its epilogue (evaluated on the whole vector at the output's own index), and the
//! unit's outputs transposed out to their planes by register tiles after its last row. A lane per plane
//! both ways (a gather per input position, a scatter per output) had made EfficientNet-like's 5 × 5
//! layers at 14² and 7² 2.7× ONNX Runtime's time at batch 8. The sum is the interpreter's order (bias,
//! then kernel row, column); a padded tap adds 0 · w, so the form is taken only for finite weights.

use super::blocks::{slot_units, SLOTS};
use super::conv_gemm::pack_rows;
use super::index::linear;
use super::kernel::{lit, KB};
use super::transpose::plane_tiles;
use super::window::interior_columns;
use super::Planner;
use super::fuse::Role;
use rlx_ir::lir::{Base, Buffer};
use rlx_ir::loops::{Access, Expr, IOp, LoopKind, Stmt};
use rlx_ir::{BinaryOp, DType, Def, MirOp, NodeId, OpSet, ValueId};

/// Output rows narrower than this many vectors take the form when they fit one block of [`ROW_BLOCK`]
/// accumulators, when more than a third of their columns are border columns, or when they fit one
/// vector and the epilogue evaluates an exponential (the window kernels' border columns evaluate it one
/// element at a time); other rows keep the window kernels, whose interior vectors then cover most of
/// each row. With the staged copies (module doc), one layer at a time (1 thread, CPU time, batch 1 / 8,
/// AVX-512): 3×3 under ReLU6 at 7² 21.9 → 12.4 / 171 → 99 µs against the window kernels, stride 2 from
/// 14² 19.3 → 15.8 / 142 → 95, at 14² within 5% (kept there); 3×3 under SiLU at 14² 123 → 76 / 815 →
/// 642 and stride 2 from 28² 102 → 77 / 745 → 577 against the padded form (`dw_padded.rs`), which keeps
/// 28² (80 against 90). Before them (a lane per plane), measured one layer at a time against
/// the window kernels (1 thread, CPU time, ReLU epilogue): 1152 channels 5×5 at 7² 92 µs against 281
/// (4 of 7 columns border), 672 channels 5×5 at 14² 209 against 203 (4 of 14), 3×3 at 7² 57 against
/// 48 (2 of 7), 3×3 at 14² and 28² 2.3–2.5× slower (the copy and the store are a lane per plane); in
/// an EfficientNet-B0-like model (SiLU epilogues) the 14² layers 278 / 194 µs against 408 / 294
/// (5×5 / 3×3), the 28² ones 154 / 160 against 110 / 152.
const MAX_ROW_VECTORS: usize = 2;

/// What [`Planner::depthwise_f32`] finds: the weight, the input, weight and output shapes, strides,
/// left padding, dilations, and the padded extents the output reads (rows, columns).
pub(super) struct Depthwise {
    pub(super) w: ValueId,
    pub(super) sx: Vec<usize>,
    pub(super) sw: Vec<usize>,
    pub(super) so: Vec<usize>,
    pub(super) strides: [usize; 2],
    pub(super) pads: usize,
    pub(super) dilations: [usize; 2],
    pub(super) hp: usize,
    pub(super) wp: usize,
}

/// Output columns computed together (an accumulator each).
const ROW_BLOCK: usize = 8;

/// A thread slot's padded planes may take at most this many bytes (they stay in L2).
const SCRATCH_BYTES: usize = 256 * 1024;

/// The output columns where some tap of a window falls outside an input row of `w` (the window
/// kernels' scalar border columns).
fn border_columns(w: usize, ow: usize, s: usize, p: usize, d: usize, k: usize) -> i64 {
    let (lo, hi) = interior_columns(w as i64, ow as i64, s as i64, p as i64, d as i64, k as i64);
    ow as i64 - (hi - lo)
}

/// The padded extent along one axis: the rows (columns) the output reads, from the first padding row.
pub(super) fn padded(out: usize, stride: usize, k: usize, dil: usize) -> usize {
    (out - 1) * stride + (k - 1) * dil + 1
}

impl Planner<'_> {
    /// A float 2-D depthwise convolution (one input channel per group) with a constant finite weight,
    /// not inlined into its consumer, with a materialized input and the window kernels' lanes (≥
    /// `min_lanes`): its shapes and attributes — the first condition of both depthwise forms here and in
    /// `dw_padded.rs` (a padded tap adds 0 · w there, hence finite weights).
    pub(super) fn depthwise_f32(&self, a: NodeId, min_lanes: usize) -> Option<Depthwise> {
        let n = self.g.node(a);
        let MirOp::Conv { strides, pads, dilations, groups } = &n.op else { return None };
        if self.lanes < min_lanes || n.inputs.len() < 2 || matches!(self.fusion.role[a.index()], Role::Inlined | Role::View) {
            return None;
        }
        let (x, w) = (n.inputs[0], n.inputs[1]);
        let (sx, sw, so) = (self.shape(x), self.shape(w), self.shape(n.outputs[0]));
        if sx.len() != 4 || sw.len() != 4 || so.len() != 4 || so.contains(&0) || pads.len() != 4 || strides.len() != 2 || dilations.len() != 2 {
            return None;
        }
        let c = sx[1];
        let depthwise = *groups == c && sw[0] == c && sw[1] == 1 && so[1] == c;
        let f32s = n.inputs.iter().chain(&n.outputs).all(|&v| self.dt(v) == DType::F32);
        let Def::Const(wc) = &self.g.value(w).def else { return None };
        let finite = (0..wc.numel()).all(|i| wc.get_f64(i).is_finite());
        let (hp, wp) = (padded(so[2], strides[0], sw[2], dilations[0]), padded(so[3], strides[1], sw[3], dilations[1]));
        (depthwise && f32s && finite && self.materialized(x)).then(|| Depthwise { w, sx, sw, so, strides: [strides[0], strides[1]], pads: pads[1], dilations: [dilations[0], dilations[1]], hp, wp })
    }

    /// Whether depthwise convolution `a` takes the form (see the module doc): [`Planner::depthwise_f32`]
    /// with a weight that is not a graph output, channels in whole vectors, rows narrower than
    /// [`MAX_ROW_VECTORS`] vectors that fit one block of [`ROW_BLOCK`] columns, or of which more than a
    /// third are border columns, or that fit one vector under an epilogue with an exponential.
    fn dw_lanes_fits(&self, a: NodeId, is_out: &[bool]) -> bool {
        let lanes = self.lanes;
        let Some(Depthwise { w, sx, sw, so, strides, pads, dilations, hp, wp }) = self.depthwise_f32(a, 8) else { return false };
        sx[1] % lanes == 0 && !is_out[w.index()]
            && so[3] < MAX_ROW_VECTORS * lanes
            && (so[3] <= ROW_BLOCK || border_columns(sx[3], so[3], strides[1], pads, dilations[1], sw[3]) * 3 > so[3] as i64 || (so[3] <= lanes && self.transcendental_epilogue(a)))
            && hp * wp * lanes * 4 <= SCRATCH_BYTES
    }

    /// Packs the weights of the depthwise convolutions that take the form; returns the weights packed
    /// (they need no other copy in the blob).
    pub(super) fn pack_dw_lanes_weights(&mut self) -> Vec<ValueId> {
        let mut packed = Vec::new();
        let is_out = self.g.output_mask();
        let ids: Vec<NodeId> = self.g.node_ids().collect();
        for a in ids {
            if !self.dw_lanes_fits(a, &is_out) {
                continue;
            }
            let w = self.g.node(a).inputs[1];
            let Def::Const(c) = &self.g.value(w).def else { continue };
            let pc = pack_rows(c, self.lanes, 1);
            let b = self.add_packed(w, format!("{} (packed {}-channel panels)", self.label(w), self.lanes), &pc, 1);
            self.dw_lanes.insert(a, b);
            packed.push(w);
        }
        packed
    }

    /// The kernel of depthwise convolution anchor `a` in this form (root `r`, output param `op`).
    pub(super) fn dw_lanes_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize]) -> Vec<Stmt> {
        let node = self.g.node(a).clone();
        let MirOp::Conv { strides, pads, dilations, .. } = &node.op else { unreachable!("dw_lanes_body on {}", node.op.kind()) };
        let (x, av) = (node.inputs[0], node.outputs[0]);
        let sx = self.shape(x);
        let sw = self.shape(node.inputs[1]);
        let (nb, c, h, w) = (sx[0], sx[1], sx[2], sx[3]);
        let (oh, ow, kh, kw) = (out_shape[2], out_shape[3], sw[2], sw[3]);
        let (s0, s1, d0, d1) = (strides[0] as i64, strides[1] as i64, dilations[0] as i64, dilations[1] as i64);
        let (pt, pl) = (pads[0], pads[1]);
        let lanes = self.lanes;
        let (hp, wp) = (padded(oh, strides[0], kh, dilations[0]), padded(ow, strides[1], kw, dilations[1]));
        let blocks = c / lanes;
        let units = nb * blocks;
        let slots = SLOTS.min(units);
        let plane = (hp * wp) as i64;
        let label = format!("{} (padded planes)", node.name);
        let sb = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: vec![slots, hp * wp, lanes], label }, None);
        let sp = kb.param(sb, &self.buffers[sb as usize].clone(), Access::ReadWrite);
        let wpk = self.dw_lanes[&a];
        let wpp = kb.param(wpk, &self.buffers[wpk as usize].clone(), Access::Read);
        let slot = kb.var();
        let l = || Expr::Int(lanes as i64);
        // Scratch element (flat padded position q, lane `lv`) of this slot.
        let at = |q: Expr, lv: Expr| Expr::add(Expr::mul(Expr::add(Expr::mul(Expr::Var(slot), Expr::Int(plane)), q), l()), lv);
        let vloop = |kb: &mut KB, f: &mut dyn FnMut(&mut KB, Expr) -> Vec<Stmt>| {
            let lv = kb.var();
            let body = f(kb, Expr::Var(lv));
            Stmt::For { var: lv, extent: lanes as i64, kind: LoopKind::Vector(lanes as u32), body }
        };
        // The padding: zeros, once per slot (units only rewrite the planes' interior).
        let q = kb.var();
        let zero = vloop(kb, &mut |_, lv| vec![Stmt::Store { buf: sp, index: at(Expr::Var(q), lv), value: lit(0.0, DType::F32) }]);
        let mut slot_body = vec![Stmt::For { var: q, extent: plane, kind: LoopKind::Serial, body: vec![zero] }];
        // Unit u: image u / blocks, channels (u % blocks) · lanes + lane.
        let (j, uv) = (kb.var(), kb.var());
        let ni = if nb > 1 { Expr::i(IOp::Div, Expr::Var(uv), Expr::Int(blocks as i64)) } else { Expr::Int(0) };
        let cb = if nb > 1 { Expr::i(IOp::Rem, Expr::Var(uv), Expr::Int(blocks as i64)) } else { Expr::Var(uv) };
        let chan = |lv: Expr| Expr::add(Expr::mul(cb.clone(), l()), lv);
        // The input planes into the scratch: rows and columns the output reads.
        let (iy, ix) = (kb.var(), kb.var());
        let (hc, wc) = (h.min(hp.saturating_sub(pt)), w.min(wp.saturating_sub(pl)));
        // Staged: the block's planes transposed into the slot's `[P][lanes]` by register tiles, then
        // copied into the padded scratch a vector per position (see the module doc).
        let (pin, pout) = (h * w, oh * ow);
        let stage = (matches!(lanes, 4 | 8 | 16) && pin >= lanes && pout >= lanes).then(|| {
            let rows = pin.max(pout);
            let label = format!("{} (transposed planes)", node.name);
            let b = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: vec![slots, rows, lanes], label }, None);
            (kb.param(b, &self.buffers[b as usize].clone(), Access::ReadWrite), rows as i64)
        });
        // Staging element (position p, lane `lv`) of this slot.
        let sat = |p: Expr, lv: Expr, rows: i64| Expr::add(Expr::mul(Expr::add(Expr::mul(Expr::Var(slot), Expr::Int(rows)), p), l()), lv);
        let mut unit = Vec::new();
        let copy = match stage {
            Some((stb, rows)) => {
                unit.extend(plane_tiles(kb, pin, lanes, true, &mut |kb, p, c| {
                    let value = self.elem(kb, x, &[ni.clone(), chan(c.clone()), Expr::Int(0), p.clone()]);
                    Stmt::Store { buf: stb, index: sat(p, c, rows), value }
                }));
                vloop(kb, &mut |_, lv| {
                    let q = Expr::add(Expr::mul(Expr::add(Expr::Var(iy), Expr::Int(pt as i64)), Expr::Int(wp as i64)), Expr::add(Expr::Var(ix), Expr::Int(pl as i64)));
                    let p = Expr::add(Expr::mul(Expr::Var(iy), Expr::Int(w as i64)), Expr::Var(ix));
                    vec![Stmt::Store { buf: sp, index: at(q, lv.clone()), value: Expr::load(stb, sat(p, lv, rows)) }]
                })
            }
            // Too few positions for a tile: a lane per plane.
            None => vloop(kb, &mut |kb, lv| {
                let v = self.elem(kb, x, &[ni.clone(), chan(lv.clone()), Expr::Var(iy), Expr::Var(ix)]);
                let q = Expr::add(Expr::mul(Expr::add(Expr::Var(iy), Expr::Int(pt as i64)), Expr::Int(wp as i64)), Expr::add(Expr::Var(ix), Expr::Int(pl as i64)));
                vec![Stmt::Store { buf: sp, index: at(q, lv), value: v }]
            }),
        };
        unit.push(Stmt::For { var: iy, extent: hc as i64, kind: LoopKind::Serial, body: vec![Stmt::For { var: ix, extent: wc as i64, kind: LoopKind::Serial, body: vec![copy] }] });
        // The output positions: rows of up to `ROW_BLOCK` columns, each a vector of the block's channels
        // with an accumulator of its own (independent chains that share each tap's weight load).
        let oy = kb.var();
        let bias = node.inputs.get(2).copied();
        let rb = ow.min(ROW_BLOCK);
        let mut row = Vec::new();
        for (first, count, width) in [(0, ow / rb, rb), ((ow / rb) * rb, 1, ow % rb)] {
            if count == 0 || width == 0 {
                continue;
            }
            let (bx, ky, kx) = (kb.var(), kb.var(), kb.var());
            let accs: Vec<_> = (0..width).map(|_| kb.var()).collect();
            let col0 = Expr::add(Expr::Int(first as i64), Expr::mul(Expr::Var(bx), Expr::Int(width as i64)));
            let point = vloop(kb, &mut |kb, lv| {
                let init = match bias {
                    Some(b) => self.elem(kb, b, &[chan(lv.clone())]),
                    None => lit(0.0, DType::F32),
                };
                let mut body: Vec<Stmt> = accs.iter().map(|&acc| Stmt::Decl { var: acc, dtype: DType::F32, init: init.clone() }).collect();
                let tap = Expr::add(Expr::mul(Expr::Var(ky), Expr::Int(kw as i64)), Expr::Var(kx));
                let wv = Expr::load(wpp, Expr::add(Expr::mul(Expr::add(Expr::mul(cb.clone(), Expr::Int((kh * kw) as i64)), tap), l()), lv.clone()));
                let wvar = kb.var();
                let mut upd = vec![Stmt::Decl { var: wvar, dtype: DType::F32, init: wv }];
                let srow = Expr::add(Expr::mul(Expr::Var(oy), Expr::Int(s0)), Expr::mul(Expr::Var(ky), Expr::Int(d0)));
                for (i, &acc) in accs.iter().enumerate() {
                    let ox = Expr::add(col0.clone(), Expr::Int(i as i64));
                    let scol = Expr::add(Expr::mul(ox, Expr::Int(s1)), Expr::mul(Expr::Var(kx), Expr::Int(d1)));
                    let xv = Expr::load(sp, at(Expr::add(Expr::mul(srow.clone(), Expr::Int(wp as i64)), scol), lv.clone()));
                    let prod = Expr::Bin(BinaryOp::Mul, DType::F32, Box::new(xv), Box::new(Expr::Var(wvar)));
                    upd.push(Stmt::Assign { var: acc, value: Expr::Bin(BinaryOp::Add, DType::F32, Box::new(Expr::Var(acc)), Box::new(prod)) });
                }
                body.push(Stmt::For { var: ky, extent: kh as i64, kind: LoopKind::Serial, body: vec![Stmt::For { var: kx, extent: kw as i64, kind: LoopKind::Serial, body: upd }] });
                for (i, &acc) in accs.iter().enumerate() {
                    let idx = [ni.clone(), chan(lv.clone()), Expr::Var(oy), Expr::add(col0.clone(), Expr::Int(i as i64))];
                    let store = self.store_with_epilogue(kb, av, Expr::Var(acc), a, r, op, &idx, out_shape);
                    // Staged: the finished vector into the slot's `[P][lanes]`, transposed out below.
                    body.push(match (stage, store) {
                        (Some((stb, rows)), Stmt::Store { value, .. }) => {
                            let p = Expr::add(Expr::mul(Expr::Var(oy), Expr::Int(ow as i64)), Expr::add(col0.clone(), Expr::Int(i as i64)));
                            Stmt::Store { buf: stb, index: sat(p, lv.clone(), rows), value }
                        }
                        (_, store) => store,
                    });
                }
                body
            });
            row.push(Stmt::For { var: bx, extent: count as i64, kind: LoopKind::Serial, body: vec![point] });
        }
        unit.push(Stmt::For { var: oy, extent: oh as i64, kind: LoopKind::Serial, body: row });
        if let Some((stb, rows)) = stage {
            unit.extend(plane_tiles(kb, pout, lanes, false, &mut |_, p, c| {
                let index = linear(&[ni.clone(), chan(c.clone()), Expr::Int(0), p.clone()], out_shape);
                Stmt::Store { buf: op, index, value: Expr::load(stb, sat(p, c, rows)) }
            }));
        }
        slot_body.push(slot_units(slot, (j, uv), units, slots, unit));
        vec![Stmt::For { var: slot, extent: slots as i64, kind: LoopKind::Parallel, body: slot_body }]
    }
}
