//! The GEMM micro-kernel: a float matmul whose right operand is a packed constant weight (or a
//! materialized matrix, or an inlined transpose that keeps N contiguous) becomes register-blocked
//! tiles of `gemm_mr` rows × one panel of `gemm_nr` columns held in vector accumulators across K,
//! with cache blocking over row tiles and the epilogue applied per accumulator before the store.

use super::causal::causal_positions;
use super::fuse::{Fusion, Role};
use super::index::{bidx, clamp, unflatten};
use super::kernel::{lit, KB};
use super::Planner;
use rlx_ir::loops::{Access, Expr, IOp, LoopKind, Stmt, Var};
use rlx_ir::{BinaryOp, ConstData, Mir, MirOp, NodeId};

impl Planner<'_> {
    /// A matmul with a packed float weight on the right and a matrix (or batch of them) on the left.
    pub(super) fn is_gemm(&self, a: NodeId) -> bool {
        let n = self.g.node(a);
        if n.op != MirOp::MatMul {
            return false;
        }
        let (x, w) = (n.inputs[0], n.inputs[1]);
        if !self.dt(x).is_float() || self.shape(x).len() < 2 {
            return false;
        }
        if self.packed_weight.contains_key(&w) {
            return true;
        }
        // A materialized right operand (rows of B contiguous along N) with at least one full panel.
        let sb = self.shape(w);
        if sb.len() < 2 || sb[sb.len() - 1] < self.panel_nr(sb[sb.len() - 1]) || self.transposed_weight.contains_key(&w) {
            return false;
        }
        if self.buf_of[w.index()].is_some() {
            return true;
        }
        // An inlined transpose that keeps the last dim last (attention's V heads) streams along N too.
        match self.g.producer(w).map(|p| (p, &self.g.node(p).op)) {
            Some((p, MirOp::Transpose { perm })) => {
                self.fusion.role[p.index()] == Role::Inlined && perm.last() == Some(&(perm.len() - 1)) && self.buf_of[self.g.node(p).inputs[0].index()].is_some()
            }
            _ => false,
        }
    }

    /// Panel width for a materialized right operand of `n` columns: the target's, or on CPU targets
    /// with vector loops (`window_lanes` ≥ 8) 8 lanes when `n` is narrower than a full panel — a
    /// 10-class layer's matmuls and their gradients run as 8-lane panels plus a 2-column tail instead
    /// of dot products whose K loop gathers a strided operand.
    pub(super) fn panel_nr(&self, n: usize) -> usize {
        if n >= self.nr || self.lanes < 8 {
            self.nr
        } else {
            8
        }
    }

    /// The GEMM micro-kernel: rows in tiles of `gemm_mr` (one parallel loop over tiles; the last tile's
    /// extra rows repeat the last row, writing identical values), columns in packed panels of GEMM_NR
    /// held in vector accumulators across K, the epilogue applied to each accumulator before its store.
    /// Columns past the last full panel: on vector CPU targets the same tile over power-of-two widths,
    /// elsewhere the per-element path.
    pub(super) fn gemm_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize]) -> Vec<Stmt> {
        let anode = self.g.node(a).clone();
        let av = anode.outputs[0];
        // The kernel's value (its stores may go to a strided home: `homes.rs`).
        let rv = self.g.node(r).outputs[0];
        let (x, w) = (anode.inputs[0], anode.inputs[1]);
        let sa = self.shape(x);
        let kdim = sa[sa.len() - 1];
        let rows_shape = out_shape[..out_shape.len() - 1].to_vec();
        let rows: usize = rows_shape.iter().product();
        let n = out_shape[out_shape.len() - 1];
        // A's index of an output row: its batch dims broadcast against the output's (a left operand
        // of lower rank, or with size-1 batch dims, such as [G, M, K] × [N, G, K, L]).
        let a_rows = sa[..sa.len() - 1].to_vec();
        let a_index = |ri: &[Expr]| if a_rows == rows_shape { ri.to_vec() } else { bidx(ri, &a_rows) };
        let packed = self.packed_weight.get(&w).copied();
        // Panel width: the packed weight's own (it may be widened for few rows), else the target's.
        let nr = packed.map_or(self.panel_nr(n), |pb| self.buffers[pb as usize].shape[2]);
        // The wide tile's rows with its panels (`memory.rs` packs those), else the GEMM's.
        let mr = if packed.is_some() && self.wide_tile.0 > 0 && nr >= self.wide_tile.1 { self.wide_tile.0 } else { self.mr };
        let mr = mr.min(rows.max(1));
        let full = n / nr;
        let tail = n % nr;
        let pp = packed.map(|pb| kb.param(pb, &self.buffers[pb as usize].clone(), Access::Read));
        let sb = self.shape(w);
        let odt = self.dt(av);
        // Cache blocking: row tiles are grouped in blocks whose slice of A (rows × K) fits in ~256 KB;
        // inside a block every panel of B is swept over all the block's tiles while it is hot. With one
        // block (small M) the panels are the parallel dimension (with the two halves of the rows, below,
        // for a packed weight); otherwise the blocks are.
        // A batch of matrices with their own right operands (attention's scores and context) whose rows
        // are no multiple of the tile: tiles per matrix, so a tile's rows share one B (tiles across two
        // heads read B once per row; ViT's 197-token attention core at 12 heads — QKᵀ, softmax, ·V —,
        // one thread, CPU time: 2.99 → 1.68 ms, ORT 1.63).
        let m_rows = rows_shape.last().copied().unwrap_or(1).max(1);
        let per_batch = packed.is_none() && self.lanes >= 8 && rows / m_rows > 1 && m_rows % mr != 0;
        let tpb = m_rows.div_ceil(mr);
        let tiles = if per_batch { rows / m_rows * tpb } else { rows.div_ceil(mr) };
        // A weight much larger than A (a 1×1 convolution's 2048 × 512 at 7², 49 rows) is read once a
        // block: then the panels are the parallel dimension, each panel's K × nr slice streamed once.
        let few_rows = packed.is_some() && n.div_ceil(nr) >= 8 && n >= 4 * rows;
        let (nblocks, rb_tiles) = if few_rows { (1, tiles) } else { row_blocks(tiles, kdim, mr, odt.size().unwrap_or(4)) };
        // A over few rows (one block) by a packed weight: two blocks of rows all the same, the units
        // (block, panel) block-major, so on two threads each computes its own half of the positions —
        // the half its core's kernels wrote and will read next (the pool runs the front and the back
        // chunks on the same threads loop after loop) — instead of half the channels of every position,
        // half of which the other core wrote. Two threads, batch 1 (`ab.py --wall`, Xeon): MobileNet-like
        // 0.94×, SqueezeNet 0.91×, EfficientNet-like 0.92–0.95×, MiniLM seq 128 0.90×; one thread unchanged.
        let halves = nblocks == 1 && !few_rows && packed.is_some() && tiles >= 4;
        let (nblocks, rb_tiles) = if halves { (2, tiles.div_ceil(2)) } else { (nblocks, rb_tiles) };
        let blk = kb.var();
        let tl = kb.var();
        let blk_e = if nblocks > 1 { Expr::Var(blk) } else { Expr::Int(0) };
        // The global tile of tile loop variable `tv`, and that loop wrapped in the guard of a last
        // block's missing tiles.
        let gtile = |tv: Var| Expr::add(Expr::mul(blk_e.clone(), Expr::Int(rb_tiles as i64)), Expr::Var(tv));
        let tile_loop = |tv: Var, body: Vec<Stmt>| -> Stmt {
            let body = if nblocks * rb_tiles > tiles { vec![Stmt::If { cond: Expr::i(IOp::Lt, gtile(tv), Expr::Int(tiles as i64)), body }] } else { body };
            Stmt::For { var: tv, extent: rb_tiles as i64, kind: LoopKind::Serial, body }
        };
        // Row i of tile loop `tv`'s current tile, clamped to the last row (the last tile may be
        // partial: its extra rows repeat the last row and write identical values).
        let row = |tv: Var, i: usize| clamp(Expr::add(Expr::mul(gtile(tv), Expr::Int(mr as i64)), Expr::Int(i as i64)), 0, rows as i64 - 1);
        // The output index of that row (without the column); per matrix, the tile's matrix and its row
        // in it (clamped to the matrix's last).
        let row_ix = |tv: Var, i: usize| -> Vec<Expr> {
            if !per_batch {
                return unflatten(&row(tv, i), &rows_shape);
            }
            let b = Expr::i(IOp::Div, gtile(tv), Expr::Int(tpb as i64));
            let m = Expr::add(Expr::mul(Expr::i(IOp::Rem, gtile(tv), Expr::Int(tpb as i64)), Expr::Int(mr as i64)), Expr::Int(i as i64));
            let mut ix = unflatten(&b, &rows_shape[..rows_shape.len() - 1]);
            ix.push(clamp(m, 0, m_rows as i64 - 1));
            ix
        };
        let p = kb.var();
        // One tile of panel `pe`'s columns `off` … `off + width − 1`: `mr` accumulators of `width` lanes
        // across K, the epilogue applied to each before its store.
        let panel_tile = |me: &mut Self, kb: &mut KB, tv: Var, pe: Expr, off: usize, width: usize| -> Vec<Stmt> {
            let jv = kb.var();
            let kv = kb.var();
            let jc = Expr::add(Expr::Int(off as i64), Expr::Var(jv));
            let accs: Vec<Var> = (0..mr).map(|_| kb.var()).collect();
            // Causal attention's probabilities × values (causal.rs): K runs in chunks of `kg`, a chunk
            // past the largest position of the tile's rows skipped (its probabilities are exact zeros).
            let causal = causal_positions(me.g, x).map(|pos| (pos, kb.var(), kb.var(), key_chunk(kdim)));
            let kx = match causal {
                Some((_, _, kc, kg)) => Expr::add(Expr::mul(Expr::Var(kc), Expr::Int(kg as i64)), Expr::Var(kv)),
                None => Expr::Var(kv),
            };
            let mut inner = Vec::new();
            if let (Some(pp), true) = (pp, me.lanes >= 8) {
                let run = Expr::add(Expr::mul(Expr::add(Expr::mul(pe.clone(), Expr::Int(kdim as i64)), kx.clone()), Expr::Int(nr as i64)), Expr::Int(off as i64));
                inner.extend(weight_prefetches(pp, &run, width));
            }
            for (i, &acc) in accs.iter().enumerate() {
                let mut ai = a_index(&row_ix(tv, i));
                ai.push(kx.clone());
                let xa = me.elem(kb, x, &ai);
                let bv = match pp {
                    // packed[(p*K + k)*NR + j]
                    Some(pp) => Expr::load(pp, Expr::add(Expr::mul(Expr::add(Expr::mul(pe.clone(), Expr::Int(kdim as i64)), kx.clone()), Expr::Int(nr as i64)), jc.clone())),
                    None => {
                        // B[batch…, k, n] with B's batch dims broadcast against the output's.
                        let batch = row_ix(tv, i);
                        let mut bi = bidx(&batch[..batch.len() - 1], &sb[..sb.len() - 2]);
                        bi.push(kx.clone());
                        bi.push(Expr::add(Expr::mul(pe.clone(), Expr::Int(nr as i64)), jc.clone()));
                        me.elem(kb, w, &bi)
                    }
                };
                let prod = Expr::Bin(BinaryOp::Mul, odt, Box::new(xa), Box::new(bv));
                inner.push(Stmt::Assign { var: acc, value: Expr::Bin(BinaryOp::Add, odt, Box::new(Expr::Var(acc)), Box::new(prod)) });
            }
            let mut vbody: Vec<Stmt> = accs.iter().map(|&acc| Stmt::Decl { var: acc, dtype: odt, init: lit(0.0, odt) }).collect();
            let mut before = Vec::new();
            match causal {
                Some((pos, bound, kc, kg)) => {
                    // bound = max over the tile's rows of position + 1 (declared outside the vector loop).
                    let pdt = me.dt(pos);
                    let mut e: Option<Expr> = None;
                    for i in 0..mr {
                        let ai = a_index(&row_ix(tv, i));
                        let pi = Expr::ToIndex { from: pdt, x: Box::new(me.elem(kb, pos, &ai[ai.len() - 1..])) };
                        e = Some(match e {
                            None => pi,
                            Some(m) => Expr::i(IOp::Max, m, pi),
                        });
                    }
                    let e = Expr::add(e.expect("a tile has rows"), Expr::Int(1));
                    before.push(Stmt::Decl { var: bound, dtype: rlx_ir::DType::I64, init: e });
                    let cond = Expr::i(IOp::Lt, Expr::mul(Expr::Var(kc), Expr::Int(kg as i64)), Expr::ToIndex { from: rlx_ir::DType::I64, x: Box::new(Expr::Var(bound)) });
                    let chunk = Stmt::For { var: kv, extent: kg as i64, kind: LoopKind::Serial, body: inner };
                    vbody.push(Stmt::For { var: kc, extent: (kdim / kg) as i64, kind: LoopKind::Serial, body: vec![Stmt::If { cond, body: vec![chunk] }] });
                }
                None => vbody.push(Stmt::For { var: kv, extent: kdim as i64, kind: LoopKind::Serial, body: inner }),
            }
            for (i, &acc) in accs.iter().enumerate() {
                let col = Expr::add(Expr::mul(pe.clone(), Expr::Int(nr as i64)), jc.clone());
                let mut idx = row_ix(tv, i);
                idx.push(col);
                kb.subst.insert(av, Expr::Var(acc));
                let v = if a == r { Expr::Var(acc) } else { me.node_expr(kb, r, &idx) };
                kb.subst.remove(&av);
                vbody.push(Stmt::Store { buf: op, index: me.out_index(rv, &idx, out_shape), value: v });
            }
            let kind = LoopKind::run(width as u32);
            before.push(Stmt::For { var: jv, extent: width as i64, kind, body: vbody });
            before
        };
        let mut panels = Vec::new();
        if full > 0 {
            let body = panel_tile(self, kb, tl, Expr::Var(p), 0, nr);
            panels = vec![tile_loop(tl, body)];
        }
        let mut tail_body = Vec::new();
        if tail > 0 && self.lanes >= 8 {
            // On vector CPU targets the columns past the last full panel are the same tile over
            // narrower vectors of power-of-two widths (a 1000-class layer's 104 = 64 + 32 + 8 past
            // 7 × 128): as dot products their K loop read the packed panel at a stride of `nr`, a
            // gather a lane (MobileNet-like's classifier at batch 1 took 1.8× ORT's time).
            let tl2 = kb.var();
            let mut body = Vec::new();
            for (off, width) in super::conv_gemm::tail_pieces(0, tail) {
                body.extend(panel_tile(self, kb, tl2, Expr::Int(full as i64), off, width));
            }
            tail_body = vec![tile_loop(tl2, body)];
        } else if tail > 0 {
            // Its own tile loop variable (every loop has a distinct variable).
            let tl2 = kb.var();
            let i = kb.var();
            let jt = kb.var();
            let rowi = clamp(Expr::add(Expr::mul(gtile(tl2), Expr::Int(mr as i64)), Expr::Var(i)), 0, rows as i64 - 1);
            let mut idx = unflatten(&rowi, &rows_shape);
            idx.push(Expr::add(Expr::Int((full * nr) as i64), Expr::Var(jt)));
            let (mut pre, acc) = self.anchor_body(kb, &anode, &idx);
            kb.subst.insert(av, acc);
            let v = if a == r { kb.subst[&av].clone() } else { self.node_expr(kb, r, &idx) };
            kb.subst.remove(&av);
            pre.push(Stmt::Store { buf: op, index: self.out_index(rv, &idx, out_shape), value: v });
            let inner = Stmt::For { var: jt, extent: tail as i64, kind: LoopKind::Serial, body: pre };
            let rows_loop = Stmt::For { var: i, extent: mr as i64, kind: LoopKind::Serial, body: vec![inner] };
            tail_body = vec![tile_loop(tl2, vec![rows_loop])];
        }
        if nblocks > 1 && !halves {
            let mut body = Vec::new();
            if full > 0 {
                body.push(Stmt::For { var: p, extent: full as i64, kind: LoopKind::Serial, body: panels });
            }
            body.extend(tail_body);
            return vec![Stmt::For { var: blk, extent: nblocks as i64, kind: LoopKind::Parallel, body }];
        }
        // One block: split over panels; the tail columns are the last "panel".
        let np = full + (tail > 0) as usize;
        let mut body = Vec::new();
        if full > 0 {
            if tail > 0 {
                body.push(Stmt::If { cond: Expr::i(IOp::Lt, Expr::Var(p), Expr::Int(full as i64)), body: panels });
            } else {
                body.extend(panels);
            }
        }
        if tail > 0 {
            body.push(Stmt::If { cond: Expr::i(IOp::Le, Expr::Int(full as i64), Expr::Var(p)), body: tail_body });
        }
        if halves {
            let u = kb.var();
            let mut unit = vec![
                Stmt::Decl { var: blk, dtype: rlx_ir::DType::I64, init: Expr::i(IOp::Div, Expr::Var(u), Expr::Int(np as i64)) },
                Stmt::Decl { var: p, dtype: rlx_ir::DType::I64, init: Expr::i(IOp::Rem, Expr::Var(u), Expr::Int(np as i64)) },
            ];
            unit.extend(body);
            return vec![Stmt::For { var: u, extent: (nblocks * np) as i64, kind: LoopKind::Parallel, body: unit }];
        }
        vec![Stmt::For { var: p, extent: np as i64, kind: LoopKind::Parallel, body }]
    }
}

/// How far ahead (bytes) a packed f32 weight's k steps are prefetched into L1, one prefetch per cache line
/// of a step's run: a weight panel is read once per row tile, in runs that cross a 4 KiB page every 4–16
/// k steps, where the hardware prefetcher stops; a whole model's weights are in L3 at best (ResNet-50:
/// 100 MB) when other work runs between calls. Measured whole models, one thread, batch 1, interleaved
/// with ONNX Runtime (`ab.py`, each variant twice): ResNet-50 0.96–0.98× the time, Inception v2
/// 0.97–0.98×, SqueezeNet (5 MB of weights) and MiniLM unchanged; 2,048 bytes ahead no better.
const WEIGHT_AHEAD: i64 = 4096;

/// Prefetches of the lines of a k step's run of `width` f32s from `start` in packed weight `buf`,
/// [`WEIGHT_AHEAD`] bytes on.
pub(super) fn weight_prefetches(buf: u32, start: &Expr, width: usize) -> Vec<Stmt> {
    (0..(width * 4).div_ceil(64)).map(|l| Stmt::Prefetch { buf, index: Expr::add(start.clone(), Expr::Int(WEIGHT_AHEAD / 4 + 16 * l as i64)), far: false }).collect()
}

/// The chunk of K a causal attention matmul skips at once: the largest power of two dividing K, at
/// most 64 and at most K / 4 (so a short context still has chunks to skip).
fn key_chunk(kdim: usize) -> usize {
    let mut g = 1;
    while g < 64 && kdim % (2 * g) == 0 && 2 * g <= (kdim / 4).max(1) {
        g *= 2;
    }
    g
}

/// On vector CPU targets: a transpose that feeds a float matmul's right operand across its last axis,
/// where the reduction is short (K < 16: a dot product of at most two 8-lane vectors per output), is
/// materialized — a copy of the small operand — so the matmul runs on the micro-kernel's panels.
/// (The MNIST step's dz·W2ᵀ, K = 10 classes: 18% of the step as dot products.)
pub(super) fn materialize_short_k_rhs(g: &Mir, f: &mut Fusion) {
    for n in g.node_ids() {
        let node = g.node(n);
        if node.op != MirOp::MatMul {
            continue;
        }
        let (a, b) = (node.inputs[0], node.inputs[1]);
        let (Some(sa), Some(sb)) = (g.ty(a).shape.as_fixed(), g.ty(b).shape.as_fixed()) else { continue };
        if !g.ty(a).dtype.is_float() || sa.len() < 2 || sb.len() < 2 || sa[sa.len() - 1] >= 16 || sb[sb.len() - 1] < 8 {
            continue;
        }
        if let Some(p) = g.producer(b) {
            let across = matches!(&g.node(p).op, MirOp::Transpose { perm } if perm.last() != Some(&(perm.len() - 1)));
            if across && f.role[p.index()] == Role::Inlined {
                f.role[p.index()] = Role::Root;
            }
        }
    }
}

/// Cache blocking of a GEMM's row tiles: blocks of tiles whose slice of A (`mr` rows × `kdim` elements
/// of `es` bytes per tile) fits in ~256 KB. Returns (blocks, tiles per block). Several blocks are the
/// parallel dimension, so they are made equal and a multiple of 8 in number while the tiles allow (the
/// runtime cuts a loop into 4 chunks per thread: 2, 4 or 8 threads get equal shares).
pub(super) fn row_blocks(tiles: usize, kdim: usize, mr: usize, es: usize) -> (usize, usize) {
    let fit = ((256 * 1024) / (kdim * es).max(1) / mr).max(1);
    let mut nblocks = tiles.div_ceil(fit);
    let mut rb_tiles = tiles;
    if nblocks > 1 {
        nblocks = nblocks.max(8).next_multiple_of(8).min(tiles);
        rb_tiles = tiles.div_ceil(nblocks);
        nblocks = tiles.div_ceil(rb_tiles);
    }
    (nblocks, rb_tiles)
}

/// A float weight `[K, N]` packed in panels of `nr` columns: `packed[p][k][j] = w[k][p·nr + j]`,
/// zero past the last column.
pub(super) fn pack_panels(c: &ConstData, nr: usize) -> ConstData {
    // Panels of nr columns: packed[p][k][j] = w[k][p*NR + j], zero past the last column.
    let (kk, nn) = (c.shape[0], c.shape[1]);
    let es = c.dtype.size().unwrap_or(1);
    let np = nn.div_ceil(nr);
    let src = c.data.bytes();
    let mut t = vec![0u8; np * kk * nr * es];
    for r in 0..kk {
        for col in 0..nn {
            let s = (r * nn + col) * es;
            let d = (((col / nr) * kk + r) * nr + col % nr) * es;
            t[d..d + es].copy_from_slice(&src[s..s + es]);
        }
    }
    ConstData { dtype: c.dtype, shape: vec![np, kk, nr], data: rlx_ir::Blob::from_vec(t) }
}
