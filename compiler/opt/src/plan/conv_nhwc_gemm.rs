//! Dense convolution (one group) with the activations channels-last (`conv_nhwc`, made by the layout
//! pass `rlx_opt::channels_last`) as an implicit GEMM on the micro-kernel's tile:
//! `out[p][m] = bias[m] + Σ_{tap, c} x[window(p) + tap][c] · W[tap][c][m]` over the output positions p
//! (images, rows and columns flattened, as a matmul's rows) — no im2col copy: a position's A element at
//! (tap, c) is `x[base(p) + offset(tap) + c]`, its base computed once a tile. x comes unpadded (the pass
//! pads it first with a `pad`, so no tap is ever checked); the weight is packed at plan time as
//! `[M / (per·lanes)][KH·KW][C][per·lanes]` (a tile's `per` vectors of a k step one contiguous run,
//! prefetched [`weight_prefetches`]' distance ahead).
//! A tile is up to 8 positions × up to 4 vectors of output channels ([`ACCS`] accumulators: the wide
//! GEMM tile's 6 × 64 with AVX-512), x's element of each position broadcast. The units — (group of
//! output-channel vectors, tile of positions) pairs, group-major — are dealt to the thread slots in
//! contiguous runs, so a slot runs consecutive tiles against one group's weight panel (KH·KW·C·lanes·per
//! floats, read from L2) before the next, and 1, 2, 4 or 8 threads get equal shares. The last tile's
//! positions past the end repeat the last position (its stores skipped). The sums are the interpreter's
//! order (bias, then kernel row, column, input channel) up to the FMA contraction every kernel shares.

use super::blocks::{slot_units, SLOTS};
use super::gemm::weight_prefetches;
use super::index::linear;
use super::kernel::{lit, KB};
use super::Planner;
use rlx_ir::loops::{Access, Expr, IOp, LoopKind, Stmt, Var};
use rlx_ir::{BinaryOp, ConstData, DType, Def, MirOp, NodeId};

/// Accumulators of a tile (positions × vectors of output channels): the GEMM's wide tile's.
const ACCS: usize = 24;

/// The tile over `m` output channels of `lanes`-wide vectors: vectors of output channels (up to 4, a
/// divisor of the channel vectors) and positions (up to 8, [`ACCS`] accumulators in all). Shared with
/// `winograd_nhwc.rs`'s GEMMs, whose positions are tiles.
pub(super) fn tile_shape(m: usize, lanes: usize) -> (usize, usize) {
    let per = (1..=4).rev().find(|&v| (m / lanes) % v == 0).unwrap_or(1);
    (per, (ACCS / per).min(8))
}

/// One k step of the tile: the packed weight's run at `run` prefetched ([`weight_prefetches`]), then
/// `accs[t][v] += xs[t] · W[run + v·lanes + lv]` — `xs[t]` the position's A element, broadcast.
pub(super) fn tile_step(wp: u32, run: &Expr, lanes: usize, lv: Var, xs: &[Expr], accs: &[Vec<Var>]) -> Vec<Stmt> {
    let width = accs.first().map_or(0, Vec::len) * lanes;
    let wv = |v: usize| Expr::load(wp, Expr::add(run.clone(), Expr::add(Expr::Int((v * lanes) as i64), Expr::Var(lv))));
    let mut inner = weight_prefetches(wp, run, width);
    for (xv, row) in xs.iter().zip(accs) {
        for (v, &acc) in row.iter().enumerate() {
            let prod = Expr::Bin(BinaryOp::Mul, DType::F32, Box::new(xv.clone()), Box::new(wv(v)));
            inner.push(Stmt::Assign { var: acc, value: Expr::Bin(BinaryOp::Add, DType::F32, Box::new(Expr::Var(acc)), Box::new(prod)) });
        }
    }
    inner
}

impl Planner<'_> {
    /// The kernel of dense `conv_nhwc` anchor `a` (root `r`, output param `op`), see the module doc.
    pub(super) fn conv_nhwc_gemm_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize]) -> Vec<Stmt> {
        if let Some(wg) = self.nhwc_winograd(a) {
            return self.winograd_nhwc_body(kb, a, r, op, out_shape, &wg);
        }
        let node = self.g.node(a).clone();
        let MirOp::ConvNhwc { strides, dilations, .. } = &node.op else { unreachable!("conv_nhwc_gemm_body on another op") };
        let Def::Const(wc) = &self.g.value(node.inputs[1]).def else { unreachable!("is_nhwc_window checks the weight") };
        let (x, av, bias) = (node.inputs[0], node.outputs[0], node.inputs.get(2).copied());
        // The kernel's value (its stores may go to a strided home: `homes.rs`).
        let rv = self.g.node(r).outputs[0];
        let sx = self.shape(x);
        let (h, w, c) = (sx[1], sx[2], sx[3]);
        let (nb, oh, ow, m) = (out_shape[0], out_shape[1], out_shape[2], out_shape[3]);
        let (kh, kw) = (wc.shape[2], wc.shape[3]);
        let (s0, s1, d0, d1) = (strides[0], strides[1], dilations[0], dilations[1]);
        let taps = kh * kw;
        let lanes = self.lanes;
        // Vectors of output channels a tile (up to 4), positions a tile (up to 8).
        let (per, tile) = tile_shape(m, lanes);
        // The weight as [M / (per·lanes)][KH·KW][C][per·lanes]: a group's k step one contiguous run.
        let width = per * lanes;
        let packed: Vec<f32> = (0..m * taps * c)
            .map(|i| {
                let (l, rest) = (i % width, i / width);
                let (ci, rest) = (rest % c, rest / c);
                let (tap, group) = (rest % taps, rest / taps);
                wc.get_f64(((group * width + l) * c + ci) * taps + tap) as f32
            })
            .collect();
        let label = format!("{} (packed [panels][taps][channels][{width}])", self.label(node.inputs[1]));
        let wb = self.add_weight(label, &ConstData::from_f32(vec![m / width, taps, c, width], &packed));
        let wp = kb.param(wb, &self.buffers[wb as usize].clone(), Access::Read);
        // x's buffer, whose flat index a position's A elements are read at (else x's element by index).
        let xp = self.buf_of[x.index()].map(|xb| kb.param(xb, &self.buffers[xb as usize].clone(), Access::Read));
        let pn = nb * oh * ow;
        let tiles = pn.div_ceil(tile);
        let units = (m / lanes / per) * tiles;
        let slots = SLOTS.min(units);
        let (slot, j, u, lv) = (kb.var(), kb.var(), kb.var(), kb.var());
        let group = Expr::i(IOp::Div, Expr::Var(u), Expr::Int(tiles as i64));
        let first = Expr::mul(Expr::i(IOp::Rem, Expr::Var(u), Expr::Int(tiles as i64)), Expr::Int(tile as i64));
        let mut body = Vec::new();
        // Each position's index (the last position for those past the end) and its window's base in x.
        let mut at = Vec::new();
        for t in 0..tile {
            let (pv, bv) = (kb.var(), kb.var());
            let p = Expr::add(first.clone(), Expr::Int(t as i64));
            body.push(Stmt::Decl { var: pv, dtype: DType::I64, init: Expr::i(IOp::Min, p, Expr::Int(pn as i64 - 1)) });
            let (n, rest) = (Expr::i(IOp::Div, Expr::Var(pv), Expr::Int((oh * ow) as i64)), Expr::i(IOp::Rem, Expr::Var(pv), Expr::Int((oh * ow) as i64)));
            let (oy, ox) = (Expr::i(IOp::Div, rest.clone(), Expr::Int(ow as i64)), Expr::i(IOp::Rem, rest, Expr::Int(ow as i64)));
            let base = linear(&[n.clone(), Expr::mul(oy.clone(), Expr::Int(s0 as i64)), Expr::mul(ox.clone(), Expr::Int(s1 as i64)), Expr::Int(0)], &[nb, h, w, c]);
            body.push(Stmt::Decl { var: bv, dtype: DType::I64, init: base });
            at.push((pv, bv, [n, oy, ox]));
        }
        let chan = |v: usize| Expr::add(Expr::mul(group.clone(), Expr::Int(width as i64)), Expr::add(Expr::Int((v * lanes) as i64), Expr::Var(lv)));
        let accs: Vec<Vec<_>> = (0..tile).map(|_| (0..per).map(|_| kb.var()).collect()).collect();
        let mut vbody = Vec::new();
        for row in &accs {
            for (v, &acc) in row.iter().enumerate() {
                let init = match bias {
                    Some(b) => self.elem(kb, b, &[chan(v)]),
                    None => lit(0.0, DType::F32),
                };
                vbody.push(Stmt::Decl { var: acc, dtype: DType::F32, init });
            }
        }
        for i in 0..kh {
            for jj in 0..kw {
                let tap = (i * kw + jj) as i64;
                let offset = ((i * d0 * w + jj * d1) * c) as i64;
                let cv = kb.var();
                let k = Expr::add(Expr::mul(Expr::add(Expr::mul(group.clone(), Expr::Int(taps as i64)), Expr::Int(tap)), Expr::Int(c as i64)), Expr::Var(cv));
                let run = Expr::mul(k, Expr::Int(width as i64));
                let xs: Vec<Expr> = at
                    .iter()
                    .map(|(_, bv, pos)| match xp {
                        Some(xp) => Expr::load(xp, Expr::add(Expr::Var(*bv), Expr::add(Expr::Int(offset), Expr::Var(cv)))),
                        None => {
                            let [n, oy, ox] = pos.clone();
                            let iy = Expr::add(Expr::mul(oy, Expr::Int(s0 as i64)), Expr::Int((i * d0) as i64));
                            let ix = Expr::add(Expr::mul(ox, Expr::Int(s1 as i64)), Expr::Int((jj * d1) as i64));
                            self.elem(kb, x, &[n, iy, ix, Expr::Var(cv)])
                        }
                    })
                    .collect();
                let inner = tile_step(wp, &run, lanes, lv, &xs, &accs);
                vbody.push(Stmt::For { var: cv, extent: c as i64, kind: LoopKind::Serial, body: inner });
            }
        }
        for (t, row) in accs.iter().enumerate() {
            let mut stores = Vec::new();
            for (v, &acc) in row.iter().enumerate() {
                let [n, oy, ox] = at[t].2.clone();
                let idx = [n, oy, ox, chan(v)];
                let val = self.conv_epilogue(kb, (a, r, av), acc, &idx, true);
                stores.push(Stmt::Store { buf: op, index: self.out_index(rv, &idx, out_shape), value: val });
            }
            if pn % tile != 0 && t > 0 {
                // A repeat of the last position stores nothing: an epilogue operand sharing the output's
                // buffer (an in-place residual) was already updated by the first.
                let real = Expr::i(IOp::Lt, Expr::add(first.clone(), Expr::Int(t as i64)), Expr::Int(pn as i64));
                vbody.push(Stmt::If { cond: real, body: stores });
            } else {
                vbody.extend(stores);
            }
        }
        body.push(Stmt::For { var: lv, extent: lanes as i64, kind: LoopKind::Vector(lanes as u32), body: vbody });
        vec![Stmt::For { var: slot, extent: slots as i64, kind: LoopKind::Parallel, body: vec![slot_units(slot, (j, u), units, slots, body)] }]
    }
}
