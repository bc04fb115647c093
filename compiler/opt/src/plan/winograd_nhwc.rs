//! Winograd F(m×m, 3×3) (`winograd.rs`'s forms and rules) for a dense 3×3 stride-1 `conv_nhwc` in a
//! channels-last region: x comes padded (the layout pass pads it first), every tile's α×α window is
//! vectors along the channels, so both transforms are vector loops over channels with no gather and the
//! α² GEMMs are `conv_nhwc_gemm.rs`'s tile turned on tiles: `M[ξ][t][k] = Σ_c V[ξ][t][c] · U[ξ][c][k]`,
//! up to 8 tiles (rows, V's element broadcast) × up to 4 vectors of output channels, U packed at plan
//! time as `[α²][K / (per·lanes)][C][per·lanes]`.
//!
//! One kernel, the convolution's own. A unit is an image's block of tile rows (`winograd.rs`'s
//! `block_rows`: one wide panel of tiles) and a block of output channels (more than one only where the
//! batch has too few tile-row blocks for two threads to share equally; each transforms the input again),
//! dealt to the thread slots in contiguous runs; a unit runs three phases through its slot's scratch,
//! which stays in the cache:
//! - **input transform**: `V[ξ][t][c] = (Bᵀ d B)[ξ]` per tile, a vector of channels at a time; the rows
//!   and columns of a window that can fall past x (the last tile row or column where the output is not a
//!   multiple of m) are read clamped — in exact arithmetic they reach only the outputs past the edge,
//!   which are not stored, so they need no zeroing;
//! - **the GEMM** per ξ and group of output-channel vectors, over tiles of the unit's tiles (the last
//!   tile's rows past the end repeat the last tile: the same sums stored twice into the scratch);
//! - **output transform**: `Aᵀ M A` + bias, the fused epilogue (activation, residual add), stored at
//!   (m·ti + p, m·tj + q) through `out_index` (a strided home), the outputs past the edge skipped.
//!
//! Rounding is the NCHW form's (F(2×2): ~5e-7 on O(1) outputs, F(4×4): ~8e-6).

use super::blocks::{slot_units, SLOTS};
use super::conv_nhwc_gemm::{tile_shape, tile_step};
use super::index::linear;
use super::kernel::{lit, KB};
use super::winograd::{block_rows, decls, lin, transform, Wino, MIN_UNITS};
use super::Planner;
use rlx_ir::lir::{Base, Buffer};
use rlx_ir::loops::{Access, Expr, IOp, LoopKind, Stmt};
use rlx_ir::{BinaryOp, ConstData, DType, Def, MirOp, NodeId};

impl Planner<'_> {
    /// The Winograd form of dense `conv_nhwc` anchor `a` (see [`Self::is_nhwc_dense`]), if it takes one:
    /// 3×3, stride 1, dilation 1, whole vectors of input channels, and `winograd::fits`' rules on its
    /// shapes — on every CPU the rules of one with one FMA unit: channels-last, the transforms are vector
    /// loops with no gather, so few input channels and F(4×4) repay them where NCHW's do not on Intel's
    /// two-FMA cores. Measured on a Sapphire Rapids-class Xeon
    /// (`inmodel.py`, one thread, batch 1, against ORT's same layer, two-FMA rules / these): ResNet-50's
    /// 64 → 64 at 56² F(2×2) 0.75 / F(4×4) 0.60; SqueezeNet's 3×3 layers 0.96 / 0.82 (16 → 64 at 55² the
    /// implicit GEMM 1.04 / F(4×4) 0.87, 32 → 128 at 27² F(2×2) 0.91 / F(4×4) 0.61).
    pub(super) fn nhwc_winograd(&self, a: NodeId) -> Option<Wino> {
        let n = self.g.node(a);
        let MirOp::ConvNhwc { strides, dilations, groups, .. } = &n.op else { return None };
        let (sx, sw, so) = (self.shape(n.inputs[0]), self.shape(n.inputs[1]), self.shape(n.outputs[0]));
        if !self.is_nhwc_dense(a) || sx[3] % self.lanes != 0 {
            return None;
        }
        let nchw_out = [so[0], so[3], so[1], so[2]];
        super::winograd::fits(&sw, &nchw_out, strides, dilations, *groups, self.opts.winograd, false)
    }

    /// The kernel of dense `conv_nhwc` anchor `a` in the Winograd form `wg` (root `r`, output param
    /// `op`), see the module doc.
    pub(super) fn winograd_nhwc_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize], wg: &Wino) -> Vec<Stmt> {
        let node = self.g.node(a).clone();
        let Def::Const(wc) = &self.g.value(node.inputs[1]).def else { unreachable!("is_nhwc_dense checks the weight") };
        let (x, av, bias) = (node.inputs[0], node.outputs[0], node.inputs.get(2).copied());
        let rv = self.g.node(r).outputs[0];
        let form = wg.form();
        let (m, al) = (form.m, form.m + 2);
        let ng = al * al;
        let sx = self.shape(x);
        let (hp, wp, c) = (sx[1], sx[2], sx[3]);
        let (nb, oh, ow, k) = (out_shape[0], out_shape[1], out_shape[2], out_shape[3]);
        let (th, tw) = (wg.th, wg.tw);
        let lanes = self.lanes;
        let (per, tile) = tile_shape(k, lanes);
        let width = per * lanes;
        let groups = k / width;
        // U as [α²][K / width][C][width].
        let u = transform(wc, form);
        let packed: Vec<f32> = (0..ng * k * c)
            .map(|i| {
                let (l, rest) = (i % width, i / width);
                let (ci, rest) = (rest % c, rest / c);
                let (grp, xi) = (rest % groups, rest / groups);
                u.get_f64((xi * k + grp * width + l) * c + ci) as f32
            })
            .collect();
        let label = format!("{} (winograd F({m}×{m}), packed [{ng}][panels][channels][{width}])", self.label(node.inputs[1]));
        let ub = self.add_weight(label, &ConstData::from_f32(vec![ng, groups, c, width], &packed));
        let up = kb.param(ub, &self.buffers[ub as usize].clone(), Access::Read);
        let rows = block_rows(nb, th, tw);
        let pb = rows * tw;
        let nblk = th.div_ceil(rows);
        // Blocks of output-channel groups while the units are fewer than `MIN_UNITS`.
        let gpb = groups.div_ceil(MIN_UNITS.div_ceil(nb * nblk).clamp(1, groups));
        let kblk = groups.div_ceil(gpb);
        let units = nb * nblk * kblk;
        let slots = SLOTS.min(units);
        let kw = gpb * width;
        let vshape = vec![slots, ng, pb, c];
        let mshape = vec![slots, ng, pb, kw];
        let vb = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: vshape.clone(), label: format!("{} (winograd input)", node.name) }, None);
        let mb = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: mshape.clone(), label: format!("{} (winograd products)", node.name) }, None);
        let vp = kb.param(vb, &self.buffers[vb as usize].clone(), Access::ReadWrite);
        let mp = kb.param(mb, &self.buffers[mb as usize].clone(), Access::ReadWrite);
        let (slot, j, uv) = (kb.var(), kb.var(), kb.var());
        let sv = Expr::Var(slot);
        let per_image = (nblk * kblk) as i64;
        let nv = if nb > 1 { Expr::i(IOp::Div, Expr::Var(uv), Expr::Int(per_image)) } else { Expr::Int(0) };
        let blk = Expr::i(IOp::Rem, Expr::i(IOp::Div, Expr::Var(uv), Expr::Int(kblk as i64)), Expr::Int(nblk as i64));
        let kq = if kblk > 1 { Expr::i(IOp::Rem, Expr::Var(uv), Expr::Int(kblk as i64)) } else { Expr::Int(0) };
        let ti0 = Expr::mul(blk, Expr::Int(rows as i64));
        let mut unit = Vec::new();

        // Input transform: tile (rr, tj) of the unit (a row past the image's last repeats it).
        {
            let (rr, tj, cb, lv) = (kb.var(), kb.var(), kb.var(), kb.var());
            let ti = Expr::i(IOp::Min, Expr::add(ti0.clone(), Expr::Var(rr)), Expr::Int(th as i64 - 1));
            let ch = Expr::add(Expr::mul(Expr::Var(cb), Expr::Int(lanes as i64)), Expr::Var(lv));
            let mut s = Vec::new();
            let mut d = Vec::new();
            // A window row or column past x (the last tile's, where the output is no multiple of m) is read
            // clamped: it reaches only outputs past the edge, which are not stored.
            let past = |e: Expr, last: usize, bound: usize| if last >= bound { Expr::i(IOp::Min, e, Expr::Int(bound as i64 - 1)) } else { e };
            for ai in 0..al {
                let row = Expr::add(Expr::mul(ti.clone(), Expr::Int(m as i64)), Expr::Int(ai as i64));
                for bi in 0..al {
                    let col = Expr::add(Expr::mul(Expr::Var(tj), Expr::Int(m as i64)), Expr::Int(bi as i64));
                    let (r, cl) = (past(row.clone(), m * (th - 1) + ai, hp), past(col, m * (tw - 1) + bi, wp));
                    d.push(self.elem(kb, x, &[nv.clone(), r, cl, ch.clone()]));
                }
            }
            let d: Vec<Expr> = decls(kb, &mut s, d).into_iter().map(Expr::Var).collect();
            let bt = form.bt;
            let t: Vec<Expr> = (0..al).flat_map(|i| (0..al).map(move |b| (i, b))).map(|(i, b)| lin(bt[i], &(0..al).map(|a| d[a * al + b].clone()).collect::<Vec<_>>())).collect();
            let t: Vec<Expr> = decls(kb, &mut s, t).into_iter().map(Expr::Var).collect();
            let tile = Expr::add(Expr::mul(Expr::Var(rr), Expr::Int(tw as i64)), Expr::Var(tj));
            for i in 0..al {
                for (jj, brow) in bt.iter().enumerate() {
                    let idx = linear(&[sv.clone(), Expr::Int((i * al + jj) as i64), tile.clone(), ch.clone()], &vshape);
                    s.push(Stmt::Store { buf: vp, index: idx, value: lin(brow, &t[i * al..(i + 1) * al]) });
                }
            }
            let vec = Stmt::For { var: lv, extent: lanes as i64, kind: LoopKind::Vector(lanes as u32), body: s };
            let chans = Stmt::For { var: cb, extent: (c / lanes) as i64, kind: LoopKind::Serial, body: vec![vec] };
            let cols = Stmt::For { var: tj, extent: tw as i64, kind: LoopKind::Serial, body: vec![chans] };
            unit.push(Stmt::For { var: rr, extent: rows as i64, kind: LoopKind::Serial, body: vec![cols] });
        }

        // The α² GEMMs: per ξ and group of the unit's block, tiles of `tile` of its tiles.
        {
            let chunks = pb.div_ceil(tile);
            let (xi, gl, ck, cv, lv) = (kb.var(), kb.var(), kb.var(), kb.var(), kb.var());
            let grp = Expr::add(Expr::mul(kq.clone(), Expr::Int(gpb as i64)), Expr::Var(gl));
            let mut body = Vec::new();
            let at: Vec<_> = (0..tile).map(|t| {
                let tv = kb.var();
                let p = Expr::add(Expr::mul(Expr::Var(ck), Expr::Int(tile as i64)), Expr::Int(t as i64));
                body.push(Stmt::Decl { var: tv, dtype: DType::I64, init: Expr::i(IOp::Min, p, Expr::Int(pb as i64 - 1)) });
                tv
            }).collect();
            let accs: Vec<Vec<_>> = (0..tile).map(|_| (0..per).map(|_| kb.var()).collect()).collect();
            let mut vbody: Vec<Stmt> = accs.iter().flatten().map(|&acc| Stmt::Decl { var: acc, dtype: DType::F32, init: lit(0.0, DType::F32) }).collect();
            let run = Expr::mul(Expr::add(Expr::mul(Expr::add(Expr::mul(Expr::Var(xi), Expr::Int(groups as i64)), grp.clone()), Expr::Int(c as i64)), Expr::Var(cv)), Expr::Int(width as i64));
            let xs: Vec<Expr> = at.iter().map(|&tv| Expr::load(vp, linear(&[sv.clone(), Expr::Var(xi), Expr::Var(tv), Expr::Var(cv)], &vshape))).collect();
            let inner = tile_step(up, &run, lanes, lv, &xs, &accs);
            vbody.push(Stmt::For { var: cv, extent: c as i64, kind: LoopKind::Serial, body: inner });
            for (t, row) in accs.iter().enumerate() {
                for (v, &acc) in row.iter().enumerate() {
                    let col = Expr::add(Expr::mul(Expr::Var(gl), Expr::Int(width as i64)), Expr::add(Expr::Int((v * lanes) as i64), Expr::Var(lv)));
                    vbody.push(Stmt::Store { buf: mp, index: linear(&[sv.clone(), Expr::Var(xi), Expr::Var(at[t]), col], &mshape), value: Expr::Var(acc) });
                }
            }
            body.push(Stmt::For { var: lv, extent: lanes as i64, kind: LoopKind::Vector(lanes as u32), body: vbody });
            let mut chunk_loop = vec![Stmt::For { var: ck, extent: chunks as i64, kind: LoopKind::Serial, body }];
            if kblk * gpb > groups {
                chunk_loop = vec![Stmt::If { cond: Expr::i(IOp::Lt, grp, Expr::Int(groups as i64)), body: chunk_loop }];
            }
            let gloop = Stmt::For { var: gl, extent: gpb as i64, kind: LoopKind::Serial, body: chunk_loop };
            unit.push(Stmt::For { var: xi, extent: ng as i64, kind: LoopKind::Serial, body: vec![gloop] });
        }

        // Output transform: per tile of the unit inside the image, per vector of the block's channels.
        {
            let (rr, tj, kl, lv, tiv) = (kb.var(), kb.var(), kb.var(), kb.var(), kb.var());
            let ti = Expr::Var(tiv);
            let kch = Expr::add(Expr::mul(kq.clone(), Expr::Int(kw as i64)), Expr::add(Expr::mul(Expr::Var(kl), Expr::Int(lanes as i64)), Expr::Var(lv)));
            let tile = Expr::add(Expr::mul(Expr::Var(rr), Expr::Int(tw as i64)), Expr::Var(tj));
            let mut s = Vec::new();
            let mv: Vec<Expr> = (0..ng).map(|xi| {
                let col = Expr::add(Expr::mul(Expr::Var(kl), Expr::Int(lanes as i64)), Expr::Var(lv));
                Expr::load(mp, linear(&[sv.clone(), Expr::Int(xi as i64), tile.clone(), col], &mshape))
            }).collect();
            let mv: Vec<Expr> = decls(kb, &mut s, mv).into_iter().map(Expr::Var).collect();
            let at = form.at;
            let st: Vec<Expr> = (0..m).flat_map(|p| (0..al).map(move |jj| (p, jj))).map(|(p, jj)| lin(at[p], &(0..al).map(|i| mv[i * al + jj].clone()).collect::<Vec<_>>())).collect();
            let st: Vec<Expr> = decls(kb, &mut s, st).into_iter().map(Expr::Var).collect();
            let b = bias.map(|b| self.elem(kb, b, &[kch.clone()]));
            for p in 0..m {
                let oy = Expr::add(Expr::mul(ti.clone(), Expr::Int(m as i64)), Expr::Int(p as i64));
                for q in 0..m {
                    let ox = Expr::add(Expr::mul(Expr::Var(tj), Expr::Int(m as i64)), Expr::Int(q as i64));
                    let y = lin(at[q], &st[p * al..(p + 1) * al]);
                    let y = match &b {
                        Some(b) => super::block_layout::fb(BinaryOp::Add, y, b.clone()),
                        None => y,
                    };
                    let acc = kb.var();
                    let mut store = vec![Stmt::Decl { var: acc, dtype: DType::F32, init: y }];
                    let idx = [nv.clone(), oy.clone(), ox.clone(), kch.clone()];
                    let val = self.conv_epilogue(kb, (a, r, av), acc, &idx, true);
                    store.push(Stmt::Store { buf: op, index: self.out_index(rv, &idx, out_shape), value: val });
                    // Outputs past the edge (the last tile row or column where the output is no multiple of m).
                    let mut conds = Vec::new();
                    if m * (th - 1) + p >= oh {
                        conds.push(Expr::i(IOp::Lt, oy.clone(), Expr::Int(oh as i64)));
                    }
                    if m * (tw - 1) + q >= ow {
                        conds.push(Expr::i(IOp::Lt, ox.clone(), Expr::Int(ow as i64)));
                    }
                    match conds.into_iter().reduce(|l, r| Expr::i(IOp::And, l, r)) {
                        Some(cond) => s.push(Stmt::If { cond, body: store }),
                        None => s.extend(store),
                    }
                }
            }
            let mut vec = Stmt::For { var: lv, extent: lanes as i64, kind: LoopKind::Vector(lanes as u32), body: s };
            if kblk * gpb > groups {
                // The last block's vectors past the last channel.
                let real = Expr::i(IOp::Lt, Expr::add(Expr::mul(kq.clone(), Expr::Int(kw as i64)), Expr::mul(Expr::Var(kl), Expr::Int(lanes as i64))), Expr::Int(k as i64));
                vec = Stmt::If { cond: real, body: vec![vec] };
            }
            let chans = vec![Stmt::For { var: kl, extent: (kw / lanes) as i64, kind: LoopKind::Serial, body: vec![vec] }];
            let cols = Stmt::For { var: tj, extent: tw as i64, kind: LoopKind::Serial, body: chans };
            let mut row = vec![Stmt::Decl { var: tiv, dtype: DType::I64, init: Expr::add(ti0.clone(), Expr::Var(rr)) }];
            row.push(if th % rows != 0 { Stmt::If { cond: Expr::i(IOp::Lt, Expr::Var(tiv), Expr::Int(th as i64)), body: vec![cols] } } else { cols });
            unit.push(Stmt::For { var: rr, extent: rows as i64, kind: LoopKind::Serial, body: row });
        }
        vec![Stmt::For { var: slot, extent: slots as i64, kind: LoopKind::Parallel, body: vec![slot_units(slot, (j, uv), units, slots, unit)] }]
    }
}
