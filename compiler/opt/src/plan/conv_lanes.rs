//! Dense convolution over few output positions with the output channels as the vector lanes: per
//! image, `out[n][c][p] = bias[c] + Σ_k W[c][k] · col[n][k][p]` computed as tiles of `rows` positions ×
//! `lanes` channels — the weight packed at compile time in `lanes`-channel panels `[M/lanes][K][lanes]`
//! (one vector load per k step), col's element of each position broadcast. The deep layers of the
//! ImageNet models run over 7×7 (49) to 14×14 (196) positions, where the positions-as-lanes form
//! (`conv_gemm.rs`) leaves lanes empty (49 = 32 + 16 + 1) while their 256–2048 channels fill every panel.
//! K is cut into chunks whose weight slice (`CHUNK` bytes) stays in L2 while the unit's position tiles
//! sweep it; between chunks the partial sums wait in a thread slot's scratch `[positions][lanes]`
//! (contiguous vectors), and only the last chunk applies the epilogue and stores each lane to its
//! channel's plane (P floats apart: one store per lane). The units — image × channel panel, with few
//! panels also a block of position tiles — are dealt to [`SLOTS`] thread slots in contiguous runs (an
//! image's panels on one thread, its im2col rows shared by them: ResNet-50's 256-channel 3×3 at 14²,
//! batch 8, 0.8× the time of a round-robin deal, per-kernel CPU samples).

use super::blocks::{slot_units, SLOTS};
use super::conv_gemm::ConvGemm;
use super::index::linear;
use super::kernel::{lit, KB};
use super::Planner;
use rlx_ir::lir::{Base, Buffer};
use rlx_ir::loops::{Access, Expr, IOp, LoopKind, Stmt};
use rlx_ir::{BinaryOp, DType, NodeId, ValueId};

/// Fewer positions than this (14 × 14 and below) and K of at least `MIN_K` take the channels as lanes.
/// Measured (ResNet-50's layers alone, `tests/bench/layers.py --cpu-time`, 1 thread): 256 channels 3×3
/// at 14² (K 2304) 0.92–0.96× the positions-as-lanes time, 512 at 7² (K 4608) 0.90–0.92×, but 2048 ← 512
/// 1×1 at 7² (K 512) 1.11×, 512 ← 2048 at 7² (K 2048) 1.07× and 64 ← 64 3×3 at 56² (K 576, im2col)
/// 1.08–1.20×: the per-lane stores.
const MAX_P: usize = 256;
const MIN_K: usize = 2304;

/// The bytes of one K chunk's weight slice (`kc` × lanes floats): kept in L2 while the tiles sweep it.
const CHUNK: usize = 256 * 1024;

/// The tile of a convolution with `m` output channels, K = `kdim`, over `pn` positions on `wide` = the
/// wide tile's (rows, lanes), when it runs with channels as the lanes: (positions per tile, lanes).
/// Taken over fewer than [`MAX_P`] positions with K ≥ [`MIN_K`]: each tile's stores are one per lane
/// (rows × lanes scalar stores, P floats apart), which a long K amortizes (see the module doc).
pub(super) fn lanes_shape(wide: (usize, usize), m: usize, kdim: usize, pn: usize) -> Option<(usize, usize)> {
    let (rows, lanes) = wide;
    if rows == 0 || lanes == 0 || pn >= MAX_P || kdim < MIN_K {
        return None;
    }
    // The same accumulator count as the wide tile: rows × lanes, half the lanes for twice the rows.
    [lanes, lanes / 2].into_iter().find(|&l| l >= 16 && m % l == 0).map(|l| (rows * lanes / l, l))
}

impl Planner<'_> {
    /// The kernel of convolution anchor `a` (root `r`, output param `op`) with output channels as the
    /// lanes: `cg.apack` the weight in `cg.nr`-channel panels, `cg.mr` positions per tile, B = `bbuf`
    /// (`[N, K, P]`: the im2col copy or x itself).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn lanes_gemm(&mut self, kb: &mut KB, a: NodeId, r: NodeId, bias: Option<ValueId>, op: u32, out_shape: &[usize], cg: &ConvGemm, bbuf: u32, kdim: usize) -> Vec<Stmt> {
        let av = self.g.node(a).outputs[0];
        let (nb, m) = (out_shape[0], out_shape[1]);
        let pn: usize = out_shape[2..].iter().product();
        let (rows, lanes) = (cg.mr, cg.nr);
        let panels = m / lanes;
        let (full, rem) = (pn / rows, pn % rows);
        let ptiles = full + (rem > 0) as usize;
        // Position blocks: as many as make at least SLOTS units (a narrow layer still splits).
        let pblocks = if nb * panels >= SLOTS { 1 } else { (SLOTS / (nb * panels)).clamp(1, ptiles) };
        let tpb = ptiles.div_ceil(pblocks);
        let pblocks = ptiles.div_ceil(tpb);
        let units = nb * panels * pblocks;
        let slots = SLOTS.min(units);
        let nch = kdim.div_ceil((CHUNK / (lanes * 4)).max(16));
        let kc = kdim.div_ceil(nch);
        let pdim = (2..out_shape.len()).rev().find(|&d| out_shape[d] != 1).unwrap_or(out_shape.len() - 1);
        let ap = kb.param(cg.apack, &self.buffers[cg.apack as usize].clone(), Access::Read);
        let bp = kb.param(bbuf, &self.buffers[bbuf as usize].clone(), Access::Read);
        let slot = kb.var();
        let scratch = (nch > 1).then(|| {
            let label = format!("{} (partial sums)", self.g.node(a).name);
            let sb = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: vec![slots, tpb * rows, lanes], label }, None);
            kb.param(sb, &self.buffers[sb as usize].clone(), Access::ReadWrite)
        });
        let (j, uv) = (kb.var(), kb.var());
        let uvx = || Expr::Var(uv);
        let nv = if nb > 1 { Expr::i(IOp::Div, uvx(), Expr::Int((panels * pblocks) as i64)) } else { Expr::Int(0) };
        let cp = Expr::i(IOp::Rem, Expr::i(IOp::Div, uvx(), Expr::Int(pblocks as i64)), Expr::Int(panels as i64));
        let pb = if pblocks > 1 { Expr::i(IOp::Rem, uvx(), Expr::Int(pblocks as i64)) } else { Expr::Int(0) };
        let t = Lanes { a, r, av, bias, op, out_shape, ap, bp, nv, cp, slot: Expr::Var(slot), scratch, srows: (tpb * rows) as i64, kdim, pn, lanes, pdim };
        let mut unit = Vec::new();
        let mut k_body = |me: &mut Self, kb: &mut KB, k0: Expr, klen: usize, first: bool, last: bool| -> Vec<Stmt> {
            let mut v = Vec::new();
            if full > 0 {
                let tl = kb.var();
                let gt = Expr::add(Expr::mul(pb.clone(), Expr::Int(tpb as i64)), Expr::Var(tl));
                let tile = me.lanes_tile(kb, &t, Expr::mul(gt.clone(), Expr::Int(rows as i64)), Expr::mul(Expr::Var(tl), Expr::Int(rows as i64)), rows, k0.clone(), klen, first, last);
                let body = if full % tpb != 0 || ptiles > full { vec![Stmt::If { cond: Expr::i(IOp::Lt, gt, Expr::Int(full as i64)), body: tile }] } else { tile };
                v.push(Stmt::For { var: tl, extent: tpb as i64, kind: LoopKind::Serial, body });
            }
            if rem > 0 {
                // The last, partial tile: in the block holding tile `full`.
                let local = (full % tpb * rows) as i64;
                let tile = me.lanes_tile(kb, &t, Expr::Int((full * rows) as i64), Expr::Int(local), rem, k0, klen, first, last);
                if pblocks > 1 {
                    v.push(Stmt::If { cond: Expr::i(IOp::Eq, pb.clone(), Expr::Int((full / tpb) as i64)), body: tile });
                } else {
                    v.extend(tile);
                }
            }
            v
        };
        unit.extend(self.k_chunks(kb, (kdim, kc, nch), &mut k_body));
        vec![Stmt::For { var: slot, extent: slots as i64, kind: LoopKind::Parallel, body: vec![slot_units(slot, (j, uv), units, slots, unit)] }]
    }

    /// One tile: `width` positions from `p0` (`local` within the unit's block, the scratch row) × the
    /// unit's panel of channels, over K `k0 .. k0 + klen`.
    #[allow(clippy::too_many_arguments)]
    fn lanes_tile(&mut self, kb: &mut KB, t: &Lanes, p0: Expr, local: Expr, width: usize, k0: Expr, klen: usize, first: bool, last: bool) -> Vec<Stmt> {
        let (jv, kv) = (kb.var(), kb.var());
        let accs: Vec<_> = (0..width).map(|_| kb.var()).collect();
        let (kdim, lanes) = (t.kdim as i64, t.lanes as i64);
        let kx = Expr::add(k0, Expr::Var(kv));
        let chan = Expr::add(Expr::mul(t.cp.clone(), Expr::Int(lanes)), Expr::Var(jv));
        // W panel cp, row k, lane jv; col[n][k][p0 + i].
        let w = Expr::load(t.ap, Expr::add(Expr::mul(Expr::add(Expr::mul(t.cp.clone(), Expr::Int(kdim)), kx.clone()), Expr::Int(lanes)), Expr::Var(jv)));
        let brow = Expr::mul(Expr::add(Expr::mul(t.nv.clone(), Expr::Int(kdim)), kx), Expr::Int(t.pn as i64));
        let inner = accs.iter().enumerate().map(|(i, &acc)| {
            let x = Expr::load(t.bp, Expr::add(brow.clone(), Expr::add(p0.clone(), Expr::Int(i as i64))));
            let prod = Expr::Bin(BinaryOp::Mul, DType::F32, Box::new(x), Box::new(w.clone()));
            Stmt::Assign { var: acc, value: Expr::Bin(BinaryOp::Add, DType::F32, Box::new(Expr::Var(acc)), Box::new(prod)) }
        }).collect();
        // The scratch element of row i: [slot][local + i][jv].
        let srow = |i: usize| Expr::add(Expr::mul(Expr::add(Expr::mul(t.slot.clone(), Expr::Int(t.srows)), Expr::add(local.clone(), Expr::Int(i as i64))), Expr::Int(lanes)), Expr::Var(jv));
        let idx = |i: usize| {
            let mut idx = vec![Expr::Int(0); t.out_shape.len()];
            idx[0] = t.nv.clone();
            idx[1] = chan.clone();
            idx[t.pdim] = Expr::add(p0.clone(), Expr::Int(i as i64));
            idx
        };
        let mut body = Vec::new();
        for (i, &acc) in accs.iter().enumerate() {
            let init = match (first, t.bias, t.scratch) {
                (false, _, Some(sp)) => Expr::load(sp, srow(i)),
                (true, Some(b), _) => self.elem(kb, b, &[chan.clone()]),
                _ => lit(0.0, DType::F32),
            };
            body.push(Stmt::Decl { var: acc, dtype: DType::F32, init });
        }
        body.push(Stmt::For { var: kv, extent: klen as i64, kind: LoopKind::Serial, body: inner });
        for (i, &acc) in accs.iter().enumerate() {
            if !last {
                let sp = t.scratch.expect("a chunk before the last has partial sums");
                body.push(Stmt::Store { buf: sp, index: srow(i), value: Expr::Var(acc) });
                continue;
            }
            let ix = idx(i);
            let v = self.conv_epilogue(kb, (t.a, t.r, t.av), acc, &ix, true);
            body.push(Stmt::Store { buf: t.op, index: linear(&ix, t.out_shape), value: v });
        }
        vec![Stmt::For { var: jv, extent: lanes, kind: LoopKind::Vector(t.lanes as u32), body }]
    }
}

/// What every tile of one channels-as-lanes kernel shares.
struct Lanes<'a> {
    a: NodeId,
    r: NodeId,
    av: ValueId,
    bias: Option<ValueId>,
    op: u32,
    out_shape: &'a [usize],
    /// The packed weight's and B's params.
    ap: u32,
    bp: u32,
    /// The unit's image and channel panel.
    nv: Expr,
    cp: Expr,
    /// The thread slot, its scratch's param (several K chunks) and rows (a block's positions).
    slot: Expr,
    scratch: Option<u32>,
    srows: i64,
    kdim: usize,
    pn: usize,
    lanes: usize,
    pdim: usize,
}
