//! Winograd F(2×2, 3×3) for dense 3×3 stride-1 convolutions over large images (CPU targets,
//! [`PlanOptions::winograd`](super::PlanOptions::winograd)): each 2×2 block of outputs ("tile") of
//! channel k is `Aᵀ [Σ_c (G g_kc Gᵀ) ⊙ (Bᵀ d_c B)] A`, with d_c the tile's 4×4 input window of channel
//! c (Lavin & Gray's matrices: `Bᵀ = [1 0 −1 0; 0 1 1 0; 0 −1 1 0; 0 1 0 −1]`, `G = [1 0 0; ½ ½ ½; ½ −½ ½;
//! 0 0 1]`, `Aᵀ = [1 1 1 0; 0 1 −1 −1]`), so 16 products a tile and channel pair instead of 36: the sum
//! over c is 16 independent GEMMs `M[ξ] = U[ξ] · V[ξ]` of K × C by C × T (T = tiles), which run on the
//! GEMM micro-kernel as one grouped 1×1 convolution of 16 groups (`conv_gemm.rs`'s `nchw_gemm`). Three
//! launches:
//! - **input transform** (`NAME (winograd input)`): `V[n][ξ·C + c][t] = (Bᵀ d B)[ξ]`, images ×
//!   channels the parallel loop, the tiles of a row in `vector(lanes)` loops (each window row a
//!   stride-2 load of x), the tiles whose window crosses the left or right edge scalar with each
//!   element selected against zero, a window row in the padding selected as zero (one condition);
//! - **the GEMM** (`NAME (winograd gemm)`): `M[n][ξ·K + k][t]`, U (`[16·K, C]`, `G g Gᵀ` computed at
//!   compile time in f64) packed in the micro-kernel's row panels per ξ;
//! - **output transform**, the convolution's own kernel: `Aᵀ M[·][k][t] A` + bias, then the fused
//!   epilogue (activation, residual add) per output, stored at (2·ti + p, 2·tj + q); images × output
//!   channels the parallel loop, the tiles of a row in vector loops (non-overlapping: a run of the lanes,
//!   then halves, then single tiles), an odd last row or column of outputs by tiles of one row or column.
//! Rounding: the transforms only add and subtract (and U's halves are exact), so the results differ
//! from the direct sum in the last bits, as any reordering of the sum does.

use super::conv_gemm::ConvGemm;
use super::im2col::vector_runs;
use super::index::{clamp, linear};
use super::kernel::{lit, nest, KB};
use super::Planner;
use rlx_ir::lir::{Base, Buffer, Launch};
use rlx_ir::loops::{Access, Expr, IOp, Kernel, LoopKind, Stmt, Var};
use rlx_ir::{BinaryOp, ConstData, DType, MirOp, NodeId};
use std::collections::HashMap;

/// The fewest tiles (2×2 output blocks) an image for the Winograd form, and the fewest input and output
/// channels: below them the transforms' memory passes outweigh the 2.25× fewer products.
const MIN_TILES: usize = 196;
const MIN_CHANNELS: usize = 16;

/// A convolution planned in the Winograd form: its tile rows and columns, and the buffers of the
/// transformed input and the products (set when the launches are planned).
#[derive(Clone, Debug)]
pub(super) struct Wino {
    pub(super) th: usize,
    pub(super) tw: usize,
    pub(super) v: Option<u32>,
    pub(super) m: Option<u32>,
}

/// The Winograd form of a convolution with weight shape `sw` and output shape `so`, if it takes one:
/// dense, 2-D, 3×3, stride 1, dilation 1, with at least [`MIN_CHANNELS`] input and output channels and
/// [`MIN_TILES`] tiles.
pub(super) fn fits(sw: &[usize], so: &[usize], strides: &[usize], dilations: &[usize], groups: usize) -> Option<Wino> {
    if groups != 1 || sw.len() != 4 || so.len() != 4 || sw[2] != 3 || sw[3] != 3 {
        return None;
    }
    if strides.iter().any(|&s| s != 1) || dilations.iter().any(|&d| d != 1) || sw[0] < MIN_CHANNELS || sw[1] < MIN_CHANNELS {
        return None;
    }
    let (th, tw) = (so[2].div_ceil(2), so[3].div_ceil(2));
    (th * tw >= MIN_TILES).then_some(Wino { th, tw, v: None, m: None })
}

/// U = G g Gᵀ for every (k, c) of an f32 weight `[K, C, 3, 3]`, as `[16·K, C]` with row ξ·K + k
/// (ξ = 4i + j), computed in f64 and rounded once.
pub(super) fn transform(c: &ConstData) -> ConstData {
    let (k, cin) = (c.shape[0], c.shape[1]);
    let w: Vec<f64> = c.data.bytes().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64).collect();
    let g = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]];
    let mut u = vec![0f32; 16 * k * cin];
    for kk in 0..k {
        for cc in 0..cin {
            let f = &w[(kk * cin + cc) * 9..][..9];
            let mut t = [[0f64; 3]; 4];
            for (i, ti) in t.iter_mut().enumerate() {
                for (j, tij) in ti.iter_mut().enumerate() {
                    *tij = (0..3).map(|l| g[i][l] * f[l * 3 + j]).sum();
                }
            }
            for i in 0..4 {
                for j in 0..4 {
                    let v: f64 = (0..3).map(|l| t[i][l] * g[j][l]).sum();
                    u[((i * 4 + j) * k + kk) * cin + cc] = v as f32;
                }
            }
        }
    }
    ConstData::from_f32(vec![16 * k, cin], &u)
}

fn f(op: BinaryOp, a: Expr, b: Expr) -> Expr {
    Expr::Bin(op, DType::F32, Box::new(a), Box::new(b))
}

/// Declares `n` f32 variables with the given initial values; returns them.
fn decls(kb: &mut KB, body: &mut Vec<Stmt>, inits: Vec<Expr>) -> Vec<Var> {
    inits.into_iter().map(|init| {
        let v = kb.var();
        body.push(Stmt::Decl { var: v, dtype: DType::F32, init });
        v
    }).collect()
}

/// Non-overlapping runs of `n` tiles from `lo` as (first, tiles, width) loops: vectors of the lanes, then
/// of half as many … down to 4, then single tiles (the output transform stores, so no tile is done twice).
fn exact_runs(lo: i64, n: i64, lanes: i64) -> Vec<(i64, i64, i64)> {
    let (mut at, mut left, mut w) = (lo, n, lanes.max(1));
    let mut runs = Vec::new();
    while left > 0 {
        if w < 4 {
            runs.push((at, left, 1));
            break;
        }
        if left >= w {
            let c = left / w * w;
            runs.push((at, c, w));
            at += c;
            left -= c;
        }
        w /= 2;
    }
    runs
}

impl Planner<'_> {
    /// The convolution anchor of the kernel rooted at `r`, when it is planned in the Winograd form.
    fn winograd_anchor(&self, r: NodeId) -> Option<(NodeId, ConvGemm, Wino)> {
        let out = self.g.node(r).outputs[0];
        let a = self.fusion.anchor_of.get(&out).copied().unwrap_or(r);
        let cg = self.conv_gemm.get(&a)?.clone();
        let w = cg.winograd.clone()?;
        Some((a, cg, w))
    }

    /// The input transform and GEMM launches before the kernel rooted at `r` (see the module doc).
    pub(super) fn winograd_launches(&mut self, r: NodeId) -> Vec<Launch> {
        let Some((a, cg, wg)) = self.winograd_anchor(r) else { return Vec::new() };
        let node = self.g.node(a).clone();
        let MirOp::Conv { pads, .. } = &node.op else { return Vec::new() };
        let x = node.inputs[0];
        let (sx, sw) = (self.shape(x), self.shape(node.inputs[1]));
        let (nb, c, k) = (sx[0], sx[1], sw[0]);
        let (h, w) = (sx[2] as i64, sx[3] as i64);
        let (ph, pw) = (pads[0] as i64, pads[1] as i64);
        let (th, tw) = (wg.th as i64, wg.tw as i64);
        let t = wg.th * wg.tw;
        let vshape = vec![nb, 16 * c, t];
        let vb = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: vshape.clone(), label: format!("{} (winograd input)", node.name) }, None);
        let mshape = vec![nb, 16 * k, t];
        let mb = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: mshape.clone(), label: format!("{} (winograd products)", node.name) }, None);
        if let Some(g) = self.conv_gemm.get_mut(&a).and_then(|g| g.winograd.as_mut()) {
            g.v = Some(vb);
            g.m = Some(mb);
        }

        // Input transform.
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let vp = kb.param(vb, &self.buffers[vb as usize].clone(), Access::Write);
        let lanes = self.lanes as i64;
        let body = nest(&mut kb, &[nb, c], LoopKind::Parallel, &mut |kb, nc| {
            let ti = kb.var();
            // Tiles whose four window columns 2·tj − pw … + 3 are all inside x: [lo, hi).
            let lo = ((pw + 1) / 2).min(tw);
            let hi = if w - 4 + pw < 0 { lo } else { ((w - 4 + pw) / 2 + 1).clamp(lo, tw) };
            let mut row = Vec::new();
            let tile = |me: &mut Self, kb: &mut KB, tj: Expr, guarded: bool| -> Vec<Stmt> {
                let mut s = Vec::new();
                let mut d = Vec::new();
                for ai in 0..4 {
                    let r = Expr::add(Expr::mul(Expr::Var(ti), Expr::Int(2)), Expr::Int(ai - ph));
                    let rin = Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(0), r.clone()), Expr::i(IOp::Lt, r.clone(), Expr::Int(h)));
                    for bi in 0..4 {
                        let col = Expr::add(Expr::mul(tj.clone(), Expr::Int(2)), Expr::Int(bi - pw));
                        let (cond, col) = if guarded {
                            let cin = Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(0), col.clone()), Expr::i(IOp::Lt, col.clone(), Expr::Int(w)));
                            (Expr::i(IOp::And, rin.clone(), cin), clamp(col, 0, w - 1))
                        } else {
                            (rin.clone(), col)
                        };
                        let v = me.elem(kb, x, &[nc[0].clone(), nc[1].clone(), clamp(r.clone(), 0, h - 1), col]);
                        d.push(Expr::Select(Box::new(cond), Box::new(v), Box::new(lit(0.0, DType::F32))));
                    }
                }
                let d = decls(kb, &mut s, d);
                let dv = |a: usize, b: usize| Expr::Var(d[a * 4 + b]);
                // Bᵀ d, row by row of the result.
                let mut bt = Vec::new();
                for b in 0..4 {
                    bt.push(f(BinaryOp::Sub, dv(0, b), dv(2, b)));
                }
                for b in 0..4 {
                    bt.push(f(BinaryOp::Add, dv(1, b), dv(2, b)));
                }
                for b in 0..4 {
                    bt.push(f(BinaryOp::Sub, dv(2, b), dv(1, b)));
                }
                for b in 0..4 {
                    bt.push(f(BinaryOp::Sub, dv(1, b), dv(3, b)));
                }
                let tv = decls(kb, &mut s, bt);
                let tt = |i: usize, b: usize| Expr::Var(tv[i * 4 + b]);
                let tidx = Expr::add(Expr::mul(Expr::Var(ti), Expr::Int(tw)), tj.clone());
                for i in 0..4 {
                    let vals = [
                        f(BinaryOp::Sub, tt(i, 0), tt(i, 2)),
                        f(BinaryOp::Add, tt(i, 1), tt(i, 2)),
                        f(BinaryOp::Sub, tt(i, 2), tt(i, 1)),
                        f(BinaryOp::Sub, tt(i, 1), tt(i, 3)),
                    ];
                    for (j, v) in vals.into_iter().enumerate() {
                        let ch = Expr::add(Expr::Int(((i * 4 + j) * c) as i64), nc[1].clone());
                        s.push(Stmt::Store { buf: vp, index: linear(&[nc[0].clone(), ch, tidx.clone()], &vshape), value: v });
                    }
                }
                s
            };
            for (start, count, width, guarded) in [(0, lo, 1, true)].into_iter().chain(vector_runs(lo, hi - lo, lanes).into_iter().map(|(s, n, wd)| (s, n, wd, false))).chain([(hi, tw - hi, 1, true)]) {
                if count <= 0 {
                    continue;
                }
                let j = kb.var();
                let tj = Expr::add(Expr::Int(start), Expr::Var(j));
                let kind = if width > 1 { LoopKind::Vector(width as u32) } else { LoopKind::Serial };
                let b = tile(self, kb, tj, guarded);
                row.push(Stmt::For { var: j, extent: count, kind, body: b });
            }
            vec![Stmt::For { var: ti, extent: th, kind: LoopKind::Serial, body: row }]
        });
        let input = Launch { nodes: vec![], kernel: Kernel { name: format!("{} (winograd input)", node.name), params: kb.params, body, vars: kb.vars }, bindings: kb.bindings };

        // The 16 GEMMs, one grouped 1×1 convolution over V.
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let mp = kb.param(mb, &self.buffers[mb as usize].clone(), Access::Write);
        let gcg = ConvGemm { groups: 16, winograd: None, ..cg };
        let body = self.nchw_gemm(&mut kb, a, a, None, mp, &mshape, &gcg, vb, c);
        let gemm = Launch { nodes: vec![], kernel: Kernel { name: format!("{} (winograd gemm)", node.name), params: kb.params, body, vars: kb.vars }, bindings: kb.bindings };
        vec![input, gemm]
    }

    /// The output transform: the kernel of convolution anchor `a` in the Winograd form (root `r`, output
    /// param `op`), with the fused epilogue (see the module doc).
    pub(super) fn winograd_out_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize]) -> Vec<Stmt> {
        let node = self.g.node(a).clone();
        let wg = self.conv_gemm[&a].winograd.clone().expect("a Winograd convolution");
        let mb = wg.m.expect("the Winograd launches are planned before the output transform");
        let mshape = self.buffers[mb as usize].shape.clone();
        let mp = kb.param(mb, &self.buffers[mb as usize].clone(), Access::Read);
        let bias = node.inputs.get(2).copied();
        let av = node.outputs[0];
        let (nb, k, oh, ow) = (out_shape[0], out_shape[1], out_shape[2] as i64, out_shape[3] as i64);
        let tw = wg.tw as i64;
        let lanes = self.lanes as i64;
        nest(kb, &[nb, k], LoopKind::Parallel, &mut |kb, nk| {
            let mut out = Vec::new();
            // Tile rows with both output rows, then an odd last one with its first row only.
            for (t0, tn, rows) in [(0, oh / 2, 2), (oh / 2, oh % 2, 1)] {
                if tn == 0 {
                    continue;
                }
                let ti = kb.var();
                let tiv = Expr::add(Expr::Int(t0), Expr::Var(ti));
                let mut row = Vec::new();
                let mut runs: Vec<(i64, i64, i64, i64)> = exact_runs(0, ow / 2, lanes).into_iter().map(|(s, n, w)| (s, n, w, 2)).collect();
                if ow % 2 == 1 {
                    runs.push((ow / 2, 1, 1, 1));
                }
                for (start, count, width, cols) in runs {
                    let j = kb.var();
                    let tj = Expr::add(Expr::Int(start), Expr::Var(j));
                    let mut s = Vec::new();
                    let tidx = Expr::add(Expr::mul(tiv.clone(), Expr::Int(tw)), tj.clone());
                    let m: Vec<Expr> = (0..16).map(|xi| {
                        let ch = Expr::add(Expr::Int((xi * k) as i64), nk[1].clone());
                        Expr::load(mp, linear(&[nk[0].clone(), ch, tidx.clone()], &mshape))
                    }).collect();
                    let m = decls(kb, &mut s, m);
                    let mv = |i: usize, j: usize| Expr::Var(m[i * 4 + j]);
                    // Aᵀ M: row 0 = M0 + M1 + M2, row 1 = M1 − M2 − M3.
                    let mut at = Vec::new();
                    for jj in 0..4 {
                        at.push(f(BinaryOp::Add, f(BinaryOp::Add, mv(0, jj), mv(1, jj)), mv(2, jj)));
                    }
                    for jj in 0..4 {
                        at.push(f(BinaryOp::Sub, f(BinaryOp::Sub, mv(1, jj), mv(2, jj)), mv(3, jj)));
                    }
                    let sv = decls(kb, &mut s, at);
                    let st = |p: usize, j: usize| Expr::Var(sv[p * 4 + j]);
                    let b = bias.map(|b| self.elem(kb, b, &[nk[1].clone()]));
                    for p in 0..rows as usize {
                        for q in 0..cols as usize {
                            let y = if q == 0 {
                                f(BinaryOp::Add, f(BinaryOp::Add, st(p, 0), st(p, 1)), st(p, 2))
                            } else {
                                f(BinaryOp::Sub, f(BinaryOp::Sub, st(p, 1), st(p, 2)), st(p, 3))
                            };
                            let y = match &b {
                                Some(b) => f(BinaryOp::Add, y, b.clone()),
                                None => y,
                            };
                            let acc = kb.var();
                            s.push(Stmt::Decl { var: acc, dtype: DType::F32, init: y });
                            let idx = [
                                nk[0].clone(),
                                nk[1].clone(),
                                Expr::add(Expr::mul(tiv.clone(), Expr::Int(2)), Expr::Int(p as i64)),
                                Expr::add(Expr::mul(tj.clone(), Expr::Int(2)), Expr::Int(q as i64)),
                            ];
                            let v = self.conv_epilogue(kb, (a, r, av), acc, &idx, true);
                            s.push(Stmt::Store { buf: op, index: linear(&idx, out_shape), value: v });
                        }
                    }
                    let kind = if width > 1 { LoopKind::Vector(width as u32) } else { LoopKind::Serial };
                    row.push(Stmt::For { var: j, extent: count, kind, body: s });
                }
                out.push(Stmt::For { var: ti, extent: tn, kind: LoopKind::Serial, body: row });
            }
            out
        })
    }
}
