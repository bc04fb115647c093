//! Winograd F(m×m, 3×3) for dense 3×3 stride-1 convolutions over large images (CPU targets,
//! [`PlanOptions::winograd`](super::PlanOptions::winograd) = m, 2 or 4): each m×m block of outputs
//! ("tile") of channel k is `Aᵀ [Σ_c (G g_kc Gᵀ) ⊙ (Bᵀ d_c B)] A`, with d_c the tile's α×α input window
//! of channel c (α = m + 2; Lavin & Gray's matrices, [`F2`] and [`F4`]), so α² products a tile and
//! channel pair instead of 9·m²: 16 for 4 outputs (F(2×2): 2.25× fewer) or 36 for 16 (F(4×4): 4×). The
//! sum over c is α² independent GEMMs `M[ξ] = U[ξ] · V[ξ]` (K × C by C × tiles); U (`[α²·K, C]`,
//! `G g Gᵀ` computed at compile time in f64) is packed in the micro-kernel's row panels per ξ.
//!
//! One kernel, the convolution's own: the units — an image's block of tile rows, ≥ 64 tiles (one panel
//! of the wide tile) or the whole image — are dealt to thread slots in contiguous runs, and each unit
//! runs three phases through its slot's scratch, which stays in the cache (V and M of a whole layer
//! would not: VGG-19's 224² layers take 51 MB each under F(2×2), and as separate launches ResNet-50 at
//! batch 8 ran no faster than the direct form):
//! - **input transform**: `V[ξ·C + c][r·TW + tj] = (Bᵀ d B)[ξ]`, the tiles of a row in `vector(lanes)`
//!   loops (each window row a stride-m load of x), the tiles whose window crosses the left or right
//!   edge scalar with each element selected against zero, a window row in the padding (or past the
//!   last tile row) selected as zero (one condition);
//! - **the GEMM** `M[ξ·K + k][·] = U[ξ] · V[ξ]`: `conv_gemm.rs`'s tiles over the unit's positions as
//!   α² groups, V read in place, K chunks through M;
//! - **output transform**: `Aᵀ M A` + bias, then the fused epilogue (activation, residual add) per
//!   output, stored at (m·ti + p, m·tj + q); the tiles of a row in vector loops (non-overlapping: runs
//!   of the lanes, then halves, then single tiles), a last row or column of tiles with the outputs left.
//!
//! Each transform is a constant matrix product emitted term by term ([`lin`]: zero coefficients
//! skipped, ±1 as additions and subtractions). Rounding: F(2×2)'s transforms only add and subtract
//! (results differ from the direct sum in the last bits: ~5e-7 on O(1) outputs, `make_convs.py`'s
//! cases); F(4×4)'s constants (up to 8 in Aᵀ, 5 in Bᵀ, 1/24 in G) cost more: ~8e-6 on the same cases.

use super::block_layout::fb;
use super::blocks::{slot_units, SLOTS};
use super::conv_gemm::{tail_pieces, Tiling};
use super::im2col::vector_runs;
use super::index::{clamp, linear};
use super::kernel::{lit, KB};
use super::Planner;
use rlx_ir::lir::{Base, Buffer};
use rlx_ir::loops::{Access, Expr, IOp, LoopKind, Stmt, Var};
use rlx_ir::{BinaryOp, ConstData, DType, MirOp, NodeId};

/// Where the Winograd form pays, measured a layer at a time against the direct form (`tests/bench/ab.py
/// --model conv… --variant '--winograd f2' --variant '' --variant '--winograd off'`, one thread, batch 1
/// unless said; F(2×2) / F(4×4) over direct):
/// - [`MIN_TILES_F2`]: 13² outputs and up (49 blocks of 2×2). 256 channels at 14² 0.75 / 1.71 (0.54 / 0.83 at
///   batch 8), 64 → 256 at 13² 0.78 / –; 512 at 7² (16 blocks) 1.70 / 1.70 (1.29 at batch 8): direct.
/// - [`MIN_OUT_CHANNELS`]: the input transform is shared by the output channels, so few of them do not repay
///   it: 128 → 32 at 28² 1.07 / 1.46, at 14² 1.22 / 1.22 (DenseNet's growth layers), where 32 → 48 at 28²
///   is 0.70 / 1.03 and 192 → 48 at 14² 0.92 / 0.92; over [`FEW_CHANNELS_TILES`] blocks (56² outputs) fewer
///   channels take F(2×2): 128 → 32 at 56² 0.90 / 0.98.
/// - F(4×4) (the default form asked for) over [`MIN_TILES`] blocks (28² outputs) where its units need not
///   also split the output channels (each channel block transforms the input again: `winograd_body`), or
///   with [`F4_CHANNELS`] output channels; else F(2×2). 64 at 56² 0.57 / 0.51; 128 at 28² 0.76 / 0.62; but
///   64 at 28² 0.65 / 0.84, 64 → 96 at 28² 0.63 / 0.73.
const MIN_TILES: usize = 196;
const MIN_TILES_F2: usize = 49;
const MIN_CHANNELS: usize = 16;
/// [`MIN_CHANNELS`] for input channels on a CPU with two 512-bit FMA units (`PlanOptions::two_fma`:
/// Intel's server cores), measured on a Sapphire Rapids-class Xeon (one thread, batch 1, `ab.py`, CPU
/// time, F(4×4) / F(2×2) / direct): 16 → 64 at 55² 0.53 / 0.53 / 0.41 ms (ORT 0.42; SqueezeNet's
/// expand layers), 16 → 16 at 112² – / 0.74 / 0.69; with 32 the form still pays: 32 → 64 at 56² 0.71 /
/// 0.75 / 0.82, 32 → 32 at 112² – / 1.94 / 2.61.
const MIN_CHANNELS_TWO_FMA: usize = 32;
/// On such a CPU F(4×4) only over this many input channels, else F(2×2) (same machine, F(4×4) / F(2×2) ms):
/// 64 → 64 at 56² 1.54 / 1.34 (ResNet-50's first stage), 32 → 128 at 27² 0.45 / 0.39 (SqueezeNet), 64 → 96 at
/// 28² 0.72 / 0.64, but 128 → 128 at 28² 1.59 / 1.94; 32 → 64 at 56² 0.71 / 0.75 takes F(2×2) all the same.
const F4_IN_TWO_FMA: usize = 128;
const MIN_OUT_CHANNELS: usize = 48;
const FEW_CHANNELS_TILES: usize = 784;
const F4_CHANNELS: usize = 128;


/// A Winograd form F(m×m, 3×3): `m` outputs a tile side, `α = m + 2` inputs, and its matrices (rows):
/// `Bᵀ` (α × α), `G` (α × 3), `Aᵀ` (m × α).
pub(super) struct Form {
    pub(super) m: usize,
    pub(super) bt: &'static [&'static [f64]],
    g: &'static [&'static [f64]],
    pub(super) at: &'static [&'static [f64]],
}

impl Form {
    fn alpha(&self) -> usize {
        self.m + 2
    }
    /// The products a tile and channel pair: α².
    pub(super) fn groups(&self) -> usize {
        self.alpha() * self.alpha()
    }
}

/// F(2×2, 3×3) (Lavin & Gray).
pub(super) static F2: Form = Form {
    m: 2,
    bt: &[&[1.0, 0.0, -1.0, 0.0], &[0.0, 1.0, 1.0, 0.0], &[0.0, -1.0, 1.0, 0.0], &[0.0, 1.0, 0.0, -1.0]],
    g: &[&[1.0, 0.0, 0.0], &[0.5, 0.5, 0.5], &[0.5, -0.5, 0.5], &[0.0, 0.0, 1.0]],
    at: &[&[1.0, 1.0, 1.0, 0.0], &[0.0, 1.0, -1.0, -1.0]],
};

/// F(4×4, 3×3) (Lavin & Gray): 36 products for 16 outputs, with larger constants (rounding grows).
pub(super) static F4: Form = Form {
    m: 4,
    bt: &[
        &[4.0, 0.0, -5.0, 0.0, 1.0, 0.0],
        &[0.0, -4.0, -4.0, 1.0, 1.0, 0.0],
        &[0.0, 4.0, -4.0, -1.0, 1.0, 0.0],
        &[0.0, -2.0, -1.0, 2.0, 1.0, 0.0],
        &[0.0, 2.0, -1.0, -2.0, 1.0, 0.0],
        &[0.0, 4.0, 0.0, -5.0, 0.0, 1.0],
    ],
    g: &[
        &[1.0 / 4.0, 0.0, 0.0],
        &[-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
        &[-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
        &[1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
        &[1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
        &[0.0, 0.0, 1.0],
    ],
    at: &[&[1.0, 1.0, 1.0, 1.0, 1.0, 0.0], &[0.0, 1.0, -1.0, 2.0, -2.0, 0.0], &[0.0, 1.0, 1.0, 4.0, 4.0, 0.0], &[0.0, 1.0, -1.0, 8.0, -8.0, 1.0]],
};

/// A convolution planned in the Winograd form: the form and its tile rows and columns.
#[derive(Clone, Debug)]
pub(super) struct Wino {
    pub(super) m: usize,
    pub(super) th: usize,
    pub(super) tw: usize,
}

impl Wino {
    pub(super) fn form(&self) -> &'static Form {
        if self.m == 4 { &F4 } else { &F2 }
    }
}

/// The Winograd form of a convolution with weight shape `sw` and output shape `so`, if it takes one:
/// dense, 2-D, 3×3, stride 1, dilation 1, with at least [`MIN_CHANNELS`] input and output channels and
/// [`MIN_TILES_F2`] blocks of 2×2 an image ([`FEW_CHANNELS_TILES`] with fewer than [`MIN_OUT_CHANNELS`]
/// output channels); F(m×m, 3×3) for the `m` asked for (2 or 4; 0: none) where the constants' rules
/// allow, else F(2×2, 3×3). `two_fma`: [`MIN_CHANNELS_TWO_FMA`] input channels, F(4×4) from [`F4_IN_TWO_FMA`].
pub(super) fn fits(sw: &[usize], so: &[usize], strides: &[usize], dilations: &[usize], groups: usize, m: usize, two_fma: bool) -> Option<Wino> {
    if m == 0 || groups != 1 || sw.len() != 4 || so.len() != 4 || sw[2] != 3 || sw[3] != 3 {
        return None;
    }
    if strides.iter().any(|&s| s != 1) || dilations.iter().any(|&d| d != 1) || sw[0] < MIN_CHANNELS || sw[1] < if two_fma { MIN_CHANNELS_TWO_FMA } else { MIN_CHANNELS } {
        return None;
    }
    let tiles = so[2].div_ceil(2) * so[3].div_ceil(2);
    let few = sw[0] < MIN_OUT_CHANNELS;
    if tiles < MIN_TILES_F2 || (few && tiles < FEW_CHANNELS_TILES) {
        return None;
    }
    let (th, tw) = (so[2].div_ceil(m), so[3].div_ceil(m));
    let units = so[0] * th.div_ceil(block_rows(so[0], th, tw));
    let m = if m == 4 && !few && tiles >= MIN_TILES && (units >= MIN_UNITS || sw[0] >= F4_CHANNELS) && !(two_fma && sw[1] < F4_IN_TWO_FMA) { 4 } else { 2 };
    Some(Wino { m, th: so[2].div_ceil(m), tw: so[3].div_ceil(m) })
}

/// U = G g Gᵀ for every (k, c) of an f32 weight `[K, C, 3, 3]`, as `[α²·K, C]` with row ξ·K + k
/// (ξ = α·i + j), computed in f64 and rounded once.
pub(super) fn transform(c: &ConstData, form: &Form) -> ConstData {
    let (k, cin) = (c.shape[0], c.shape[1]);
    let al = form.alpha();
    let w: Vec<f64> = c.data.bytes().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64).collect();
    let g = form.g;
    let mut u = vec![0f32; al * al * k * cin];
    for kk in 0..k {
        for cc in 0..cin {
            let f = &w[(kk * cin + cc) * 9..][..9];
            for i in 0..al {
                // Row i of G f.
                let t: Vec<f64> = (0..3).map(|j| (0..3).map(|l| g[i][l] * f[l * 3 + j]).sum()).collect();
                for j in 0..al {
                    let v: f64 = (0..3).map(|l| t[l] * g[j][l]).sum();
                    u[((i * al + j) * k + kk) * cin + cc] = v as f32;
                }
            }
        }
    }
    ConstData::from_f32(vec![al * al * k, cin], &u)
}

/// Σ coefs[i]·xs[i] over the non-zero coefficients, ±1 as additions and subtractions.
pub(super) fn lin(coefs: &[f64], xs: &[Expr]) -> Expr {
    let mut acc: Option<Expr> = None;
    for (&c, x) in coefs.iter().zip(xs) {
        if c == 0.0 {
            continue;
        }
        let term = if c.abs() == 1.0 { x.clone() } else { fb(BinaryOp::Mul, lit(c.abs(), DType::F32), x.clone()) };
        acc = Some(match (acc, c < 0.0) {
            (None, false) => term,
            (None, true) => Expr::Un(rlx_ir::UnaryOp::Neg, DType::F32, Box::new(term)),
            (Some(a), false) => fb(BinaryOp::Add, a, term),
            (Some(a), true) => fb(BinaryOp::Sub, a, term),
        });
    }
    acc.unwrap_or_else(|| lit(0.0, DType::F32))
}

/// Declares `n` f32 variables with the given initial values; returns them.
pub(super) fn decls(kb: &mut KB, body: &mut Vec<Stmt>, inits: Vec<Expr>) -> Vec<Var> {
    inits.into_iter().map(|init| {
        let v = kb.var();
        body.push(Stmt::Decl { var: v, dtype: DType::F32, init });
        v
    }).collect()
}

/// Non-overlapping runs of `n` tiles as (first, tiles, width) loops: vectors of the lanes, then the rest
/// in power-of-two pieces (`tail_pieces`; the output transform stores, so no tile is done twice).
fn exact_runs(n: usize, lanes: usize) -> Vec<(i64, i64, i64)> {
    let full = n / lanes.max(1) * lanes.max(1);
    let mut runs = if full > 0 { vec![(0, full as i64, lanes.max(1) as i64)] } else { Vec::new() };
    runs.extend(tail_pieces(full, n).into_iter().map(|(o, w)| (o as i64, w as i64, w as i64)));
    runs
}


/// The fewest units a convolution is cut into, so that two threads get equal shares within a fifth
/// (by tile rows, else also by output channels).
pub(super) const MIN_UNITS: usize = 4;

/// The tile rows of a unit: enough that a unit has one wide panel of tiles (64), at most the image's;
/// fewer where that leaves fewer than [`MIN_UNITS`] units over the batch and a unit keeps ≥ 32 tiles
/// (ResNet's 56² layers under F(4×4): 14 × 14 tiles in 4 blocks of 4 rows instead of 3 of 5).
pub(super) fn block_rows(nb: usize, th: usize, tw: usize) -> usize {
    let rows = 64usize.div_ceil(tw).clamp(1, th);
    if nb * th.div_ceil(rows) >= MIN_UNITS {
        return rows;
    }
    let fewer = th.div_ceil(MIN_UNITS.div_ceil(nb));
    if fewer * tw >= 32 { fewer.min(rows) } else { rows }
}

impl Planner<'_> {
    /// The kernel of convolution anchor `a` in the Winograd form (root `r`, output param `op`; see the
    /// module doc).
    pub(super) fn winograd_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize]) -> Vec<Stmt> {
        let node = self.g.node(a).clone();
        let cg = self.conv_gemm[&a].clone();
        let wg = cg.winograd.clone().expect("a Winograd convolution");
        let form = wg.form();
        let ng = form.groups();
        let pads = match &node.op {
            MirOp::Conv { pads, .. } => (pads[0] as i64, pads[1] as i64),
            _ => (0, 0),
        };
        let sx = self.shape(node.inputs[0]);
        let (nb, c, k) = (sx[0], sx[1], out_shape[1]);
        let (th, tw) = (wg.th, wg.tw);
        let rows = block_rows(nb, th, tw);
        let pb = rows * tw;
        let nblk = th.div_ceil(rows);
        // Blocks of output channels (whole row tiles) when there are still fewer than `MIN_UNITS` units:
        // F(4×4)'s 28² layers at batch 1 are one block (7 × 7 tiles), which one thread would run alone.
        // Each channel block transforms the input again.
        let (mr, nr) = (cg.mr, cg.nr);
        let tpg = k.div_ceil(mr);
        let tpb = tpg.div_ceil(MIN_UNITS.div_ceil(nb * nblk).clamp(1, tpg));
        let kblk = tpg.div_ceil(tpb);
        let units = nb * nblk * kblk;
        let slots = SLOTS.min(units);
        let vshape = vec![slots, ng * c, pb];
        let mshape = vec![slots, ng * k, pb];
        let vb = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: vshape.clone(), label: format!("{} (winograd input)", node.name) }, None);
        let mb = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: mshape.clone(), label: format!("{} (winograd products)", node.name) }, None);
        let vp = kb.param(vb, &self.buffers[vb as usize].clone(), Access::ReadWrite);
        let mp = kb.param(mb, &self.buffers[mb as usize].clone(), Access::ReadWrite);
        let ap = kb.param(cg.apack, &self.buffers[cg.apack as usize].clone(), Access::Read);
        // The slot's units in a contiguous run (`slot_units`).
        let slot = kb.var();
        let (j, uv) = (kb.var(), kb.var());
        // Unit u: image u / (nblk·kblk), tile rows block (u / kblk) % nblk, channel block u % kblk.
        let per_image = (nblk * kblk) as i64;
        let nv = if nb > 1 { Expr::i(IOp::Div, Expr::Var(uv), Expr::Int(per_image)) } else { Expr::Int(0) };
        let blk = Expr::i(IOp::Rem, Expr::i(IOp::Div, Expr::Var(uv), Expr::Int(kblk as i64)), Expr::Int(nblk as i64));
        let kq = if kblk > 1 { Expr::i(IOp::Rem, Expr::Var(uv), Expr::Int(kblk as i64)) } else { Expr::Int(0) };
        let ti0 = Expr::mul(blk, Expr::Int(rows as i64));
        let sv = Expr::Var(slot);
        let kn = (tpb * mr).min(k);
        let geo = Geo { form, c, k, rows, tw, pads, sv: sv.clone(), nv: nv.clone(), ti0, k0: Expr::mul(kq.clone(), Expr::Int((tpb * mr) as i64)), kn, kguard: kblk * tpb * mr > k };
        let mut unit = self.wino_input(kb, node.inputs[0], &geo, vp, &vshape);
        // The α² GEMMs: `conv_gemm.rs`'s tiles, α² groups over the unit's positions, V read in place;
        // of each group the unit's channel block's `tpb` row tiles.
        let nch = c.div_ceil((16 * 1024 / (nr * 4)).max(16));
        let kc = c.div_ceil(nch);
        let t = Tiling { a, r: a, av: node.outputs[0], bias: None, op: mp, out_shape: &mshape, ap, bp: vp, nv: sv, kdim: c, pn: pb, mr, nr, pdim: 2, kc, nch, groups: ng, tpg, mg: k, direct: None };
        let full = pb / nr;
        let pieces = tail_pieces(full * nr, pb);
        unit.extend(self.k_chunks(kb, (c, kc, nch), &mut |me, kb, k0, klen, first, last| {
            let mut v = Vec::new();
            let panel = |me: &mut Self, kb: &mut KB, cbase: Expr, width: usize| -> Stmt {
                let tl = kb.var();
                let local = Expr::add(Expr::mul(kq.clone(), Expr::Int(tpb as i64)), Expr::i(IOp::Rem, Expr::Var(tl), Expr::Int(tpb as i64)));
                let gt = Expr::add(Expr::mul(Expr::i(IOp::Div, Expr::Var(tl), Expr::Int(tpb as i64)), Expr::Int(tpg as i64)), local.clone());
                let mut body = me.conv_tile(kb, &t, gt, cbase, width, k0.clone(), klen, first, last, None);
                if kblk * tpb > tpg {
                    body = vec![Stmt::If { cond: Expr::i(IOp::Lt, local, Expr::Int(tpg as i64)), body }];
                }
                Stmt::For { var: tl, extent: (ng * tpb) as i64, kind: LoopKind::Serial, body }
            };
            if full > 0 {
                let p = kb.var();
                let s = panel(me, kb, Expr::mul(Expr::Var(p), Expr::Int(nr as i64)), nr);
                v.push(Stmt::For { var: p, extent: full as i64, kind: LoopKind::Serial, body: vec![s] });
            }
            for &(off, w) in &pieces {
                v.push(panel(me, kb, Expr::Int(off as i64), w));
            }
            v
        }));
        unit.extend(self.wino_output(kb, (a, r, node.outputs[0]), node.inputs.get(2).copied(), &geo, (mp, &mshape), (op, out_shape)));
        vec![Stmt::For { var: slot, extent: slots as i64, kind: LoopKind::Parallel, body: vec![slot_units(slot, (j, uv), units, slots, unit)] }]
    }

    /// The input transform of a unit: `V[slot][ξ·C + c][r·TW + tj] = (Bᵀ d B)[ξ]` for its tile rows.
    fn wino_input(&mut self, kb: &mut KB, x: rlx_ir::ValueId, geo: &Geo, vp: u32, vshape: &[usize]) -> Vec<Stmt> {
        let sx = self.shape(x);
        let (h, w) = (sx[2] as i64, sx[3] as i64);
        let (ph, pw) = geo.pads;
        let (m, al) = (geo.form.m as i64, geo.form.alpha());
        let tw = geo.tw as i64;
        let lanes = self.lanes as i64;
        let (ci, rr) = (kb.var(), kb.var());
        let ti = Expr::add(geo.ti0.clone(), Expr::Var(rr));
        // Tiles whose α window columns m·tj − pw … + α − 1 are all inside x: [lo, hi).
        let lo = ((pw + m - 1) / m).min(tw);
        let last = w - al as i64 + pw;
        let hi = if last < 0 { lo } else { (last / m + 1).clamp(lo, tw) };
        let mut row = Vec::new();
        let runs = [(0, lo, 1, true)].into_iter().chain(vector_runs(lo, hi - lo, lanes).into_iter().map(|(s, n, wd)| (s, n, wd, false))).chain([(hi, tw - hi, 1, true)]);
        for (start, count, width, guarded) in runs {
            if count <= 0 {
                continue;
            }
            let j = kb.var();
            let tj = Expr::add(Expr::Int(start), Expr::Var(j));
            let mut s = Vec::new();
            let mut d = Vec::new();
            for ai in 0..al as i64 {
                let r = Expr::add(Expr::mul(ti.clone(), Expr::Int(m)), Expr::Int(ai - ph));
                let rin = Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(0), r.clone()), Expr::i(IOp::Lt, r.clone(), Expr::Int(h)));
                for bi in 0..al as i64 {
                    let col = Expr::add(Expr::mul(tj.clone(), Expr::Int(m)), Expr::Int(bi - pw));
                    let (cond, col) = if guarded {
                        let cin = Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(0), col.clone()), Expr::i(IOp::Lt, col.clone(), Expr::Int(w)));
                        (Expr::i(IOp::And, rin.clone(), cin), clamp(col, 0, w - 1))
                    } else {
                        (rin.clone(), col)
                    };
                    let v = self.elem(kb, x, &[geo.nv.clone(), Expr::Var(ci), clamp(r.clone(), 0, h - 1), col]);
                    d.push(Expr::Select(Box::new(cond), Box::new(v), Box::new(lit(0.0, DType::F32))));
                }
            }
            let d: Vec<Expr> = decls(kb, &mut s, d).into_iter().map(Expr::Var).collect();
            // Bᵀ d (row i, column b), then (Bᵀ d) B (row i, column j).
            let bt = geo.form.bt;
            let t: Vec<Expr> = (0..al).flat_map(|i| (0..al).map(move |b| (i, b))).map(|(i, b)| lin(bt[i], &(0..al).map(|a| d[a * al + b].clone()).collect::<Vec<_>>())).collect();
            let t: Vec<Expr> = decls(kb, &mut s, t).into_iter().map(Expr::Var).collect();
            let col = Expr::add(Expr::mul(Expr::Var(rr), Expr::Int(tw)), tj.clone());
            for i in 0..al {
                for (jj, row) in bt.iter().enumerate() {
                    let ch = Expr::add(Expr::Int(((i * al + jj) * geo.c) as i64), Expr::Var(ci));
                    let value = lin(row, &t[i * al..(i + 1) * al]);
                    s.push(Stmt::Store { buf: vp, index: linear(&[geo.sv.clone(), ch, col.clone()], vshape), value });
                }
            }
            let kind = LoopKind::run(width as u32);
            row.push(Stmt::For { var: j, extent: count, kind, body: s });
        }
        let rows = Stmt::For { var: rr, extent: geo.rows as i64, kind: LoopKind::Serial, body: row };
        vec![Stmt::For { var: ci, extent: geo.c as i64, kind: LoopKind::Serial, body: vec![rows] }]
    }

    /// The output transform of a unit: `Aᵀ M A` + bias and the epilogue of anchor `a` in root `r`'s
    /// kernel, stored into `op` for the unit's tile rows.
    fn wino_output(&mut self, kb: &mut KB, (a, r, av): (NodeId, NodeId, rlx_ir::ValueId), bias: Option<rlx_ir::ValueId>, geo: &Geo, (mp, mshape): (u32, &[usize]), (op, out_shape): (u32, &[usize])) -> Vec<Stmt> {
        let (oh, ow) = (out_shape[2] as i64, out_shape[3] as i64);
        let (m, al) = (geo.form.m as i64, geo.form.alpha());
        let at = geo.form.at;
        let tw = geo.tw as i64;
        let (kl, rr, kv) = (kb.var(), kb.var(), kb.var());
        let ti = Expr::add(geo.ti0.clone(), Expr::Var(rr));
        let mut per_row = Vec::new();
        // Tile rows with all m output rows, then a last one with the rest.
        for (cond, rows) in [(Expr::i(IOp::Lt, ti.clone(), Expr::Int(oh / m)), m), (Expr::i(IOp::Eq, ti.clone(), Expr::Int(oh / m)), oh % m)] {
            if rows == 0 {
                continue;
            }
            let mut runs: Vec<(i64, i64, i64, i64)> = exact_runs((ow / m) as usize, self.lanes).into_iter().map(|(s, n, w)| (s, n, w, m)).collect();
            if ow % m != 0 {
                runs.push((ow / m, 1, 1, ow % m));
            }
            let mut body = Vec::new();
            for (start, count, width, cols) in runs {
                let j = kb.var();
                let tj = Expr::add(Expr::Int(start), Expr::Var(j));
                let mut s = Vec::new();
                let col = Expr::add(Expr::mul(Expr::Var(rr), Expr::Int(tw)), tj.clone());
                let mv: Vec<Expr> = (0..al * al).map(|xi| {
                    let ch = Expr::add(Expr::Int((xi * geo.k) as i64), Expr::Var(kv));
                    Expr::load(mp, linear(&[geo.sv.clone(), ch, col.clone()], mshape))
                }).collect();
                let mv: Vec<Expr> = decls(kb, &mut s, mv).into_iter().map(Expr::Var).collect();
                // Aᵀ M (row p, column j) for the rows stored.
                let st: Vec<Expr> = (0..rows as usize).flat_map(|p| (0..al).map(move |jj| (p, jj))).map(|(p, jj)| lin(at[p], &(0..al).map(|i| mv[i * al + jj].clone()).collect::<Vec<_>>())).collect();
                let st: Vec<Expr> = decls(kb, &mut s, st).into_iter().map(Expr::Var).collect();
                let b = bias.map(|b| self.elem(kb, b, &[Expr::Var(kv)]));
                for p in 0..rows as usize {
                    for q in 0..cols as usize {
                        let y = lin(at[q], &st[p * al..(p + 1) * al]);
                        let y = match &b {
                            Some(b) => fb(BinaryOp::Add, y, b.clone()),
                            None => y,
                        };
                        let acc = kb.var();
                        s.push(Stmt::Decl { var: acc, dtype: DType::F32, init: y });
                        let idx = [
                            geo.nv.clone(),
                            Expr::Var(kv),
                            Expr::add(Expr::mul(ti.clone(), Expr::Int(m)), Expr::Int(p as i64)),
                            Expr::add(Expr::mul(tj.clone(), Expr::Int(m)), Expr::Int(q as i64)),
                        ];
                        let v = self.conv_epilogue(kb, (a, r, av), acc, &idx, true);
                        s.push(Stmt::Store { buf: op, index: linear(&idx, out_shape), value: v });
                    }
                }
                let kind = LoopKind::run(width as u32);
                body.push(Stmt::For { var: j, extent: count, kind, body: s });
            }
            per_row.push(Stmt::If { cond, body });
        }
        // Channel kv = the block's first + kl (past the last channel in a last, short block: skipped).
        let mut body = vec![Stmt::Decl { var: kv, dtype: DType::I64, init: Expr::add(geo.k0.clone(), Expr::Var(kl)) }];
        let rows = Stmt::For { var: rr, extent: geo.rows as i64, kind: LoopKind::Serial, body: per_row };
        body.push(if geo.kguard { Stmt::If { cond: Expr::i(IOp::Lt, Expr::Var(kv), Expr::Int(geo.k as i64)), body: vec![rows] } } else { rows });
        vec![Stmt::For { var: kl, extent: geo.kn as i64, kind: LoopKind::Serial, body }]
    }
}

/// A unit's geometry: the form, input and output channels, tile rows a unit and tiles a row, leading
/// pads (rows, columns), its slot, image and first tile row, and its block of output channels (the
/// first, how many, whether the last block runs past the last channel).
struct Geo {
    form: &'static Form,
    c: usize,
    k: usize,
    rows: usize,
    tw: usize,
    pads: (i64, i64),
    sv: Expr,
    nv: Expr,
    ti0: Expr,
    k0: Expr,
    kn: usize,
    kguard: bool,
}
