//! Kernels that read GGUF block-quantized constants: `dequant_matmul` (x · wᵀ) and `dequant_gather`
//! (a row lookup). Weights stay in their blocks, repacked at plan time into interleaved row panels
//! (`block_layout.rs`: the layout and the dequantization of one value, bit-identical to the
//! interpreter's).
//!
//! With that layout the `nr` rows of a panel are the lanes of a `vector(nr)` loop: a byte of the
//! block for all rows is one unit-stride vector load, the shifts and masks that pick a value's bits
//! are the same for every lane, and a sub-block's scale is one vector per sub-block. The matmul is
//! then the GEMM micro-kernel's shape (`gemm.rs`) with the weight panel dequantized on the fly:
//! `mr` rows of x × one panel in vector accumulators across K, the epilogue applied before the
//! store. At one row (decode) it streams every weight byte once (a sub-block's scale, where it has no
//! min, multiplies its partial dot product once instead of every value); from a few tiles of rows
//! (prefill) each panel is dequantized once into an f32 scratch in the arena and the f32
//! micro-kernel runs over every tile from it.

pub(super) use super::block_layout::{lowers, BlockWeight};
use super::block_layout::{fb, pack_blocks, panel_rows, quad_bytes, subs, value, value_f32, Fields};
use super::index::{clamp, linear, unflatten};
use super::kernel::{lit, KB};
use super::Planner;
use rlx_ir::lir::{Base, Buffer};
use rlx_ir::loops::{Access, Expr, IOp, LoopKind, Stmt, Var};
use rlx_ir::{BinaryOp, ConstData, DType, NodeId};

/// Row tiles from which `dequant_matmul` dequantizes each panel once into a scratch (the prefill form)
/// instead of on the fly for every tile.
pub(super) const PANEL_TILES: usize = 3;
/// Thread slots of the prefill form: a multiple of 1, 2, 4 and 8 threads.
pub(super) const SLOTS: usize = 8;

/// The units of thread slot `slot` out of `slots` (the parallel loop), dealt in contiguous runs: slot s
/// takes units ⌊units·s/slots⌋ … ⌊units·(s + 1)/slots⌋ − 1, one by one as `uv` (declared here) in a
/// serial loop over `j` running `body`. The pool gives each thread a run of slots whose boundaries are
/// those of a power-of-two split, so 2, 4 or 8 threads differ by at most one unit, and one thread walks
/// neighbouring units (an image's panels) in order. Used by the convolutions' packed positions,
/// channels as lanes and Winograd kernels.
pub(super) fn slot_units(slot: Var, (j, uv): (Var, Var), units: usize, slots: usize, body: Vec<Stmt>) -> Stmt {
    let bound = |s: Expr| Expr::i(IOp::Div, Expr::mul(s, Expr::Int(units as i64)), Expr::Int(slots as i64));
    let u = Expr::add(bound(Expr::Var(slot)), Expr::Var(j));
    let mut unit = vec![Stmt::Decl { var: uv, dtype: DType::I64, init: u.clone() }];
    unit.extend(body);
    if units % slots != 0 {
        unit = vec![Stmt::If { cond: Expr::i(IOp::Lt, u, bound(Expr::add(Expr::Var(slot), Expr::Int(1)))), body: unit }];
    }
    Stmt::For { var: j, extent: units.div_ceil(slots) as i64, kind: LoopKind::Serial, body: unit }
}
/// How far ahead of the block being read both forms prefetch their weight stream, in bytes. The
/// hardware prefetcher follows a stream only inside a 4 KiB page and restarts after each boundary;
/// software prefetches this far ahead of every cache line make the next page's lines arrive before
/// they are read.
const PREFETCH_AHEAD: i64 = 2048;

/// Sub-blocks whose scale is factored out of the dot product: `before` resets the partial sums,
/// `after(scale)` adds `scale · partial` to the accumulators.
struct Factor<'a> {
    before: &'a [Stmt],
    after: &'a dyn Fn(Expr) -> Vec<Stmt>,
}

/// The statements for block `b` (a loop variable) of the row `f` points at: per sub-block its scale
/// and min declared once, then for each of its values `l` the dequantized value declared as `wv` and
/// `per_value(kb, wv, k, false)` with `k` the value's column (`b·bs + s·len + l`). With `factor`, a
/// sub-block without a min (Q4_0, Q5_0, Q8_0, Q3_K, Q6_K) passes the unscaled integer value instead
/// (`per_value(kb, q, k, true)`) between `factor.before` and `factor.after(scale)`: one multiply per
/// sub-block instead of one per value (the dot product reassociated, as llama.cpp's kernels do).
fn walk_block(kb: &mut KB, w: &BlockWeight, f: &Fields, b: Var, factor: Option<Factor>, per_value: &mut dyn FnMut(&mut KB, Expr, Expr, bool) -> Vec<Stmt>) -> Vec<Stmt> {
    let (bs, _) = w.dtype.block();
    let (nsub, len) = subs(w.dtype);
    let mut out = Vec::new();
    for s in 0..nsub {
        let l = kb.var();
        let (dl, ml, q) = value(w.dtype, f, s, &Expr::Var(l));
        let decl = |kb: &mut KB, e: Expr, out: &mut Vec<Stmt>| {
            let v = kb.var();
            out.push(Stmt::Decl { var: v, dtype: DType::F32, init: e });
            Expr::Var(v)
        };
        let k = Expr::add(Expr::add(Expr::mul(Expr::Var(b), Expr::Int(bs as i64)), Expr::Int((s * len) as i64)), Expr::Var(l));
        let factored = factor.as_ref().filter(|_| ml.is_none() && dl.is_some());
        if let (Some(fa), Some(dl)) = (factored, dl.clone()) {
            let sv = decl(kb, dl, &mut out);
            out.extend(fa.before.iter().cloned());
            let mut body = Vec::new();
            let qv = decl(kb, q, &mut body);
            body.extend(per_value(kb, qv, k, true));
            out.push(Stmt::For { var: l, extent: len as i64, kind: LoopKind::Serial, body });
            out.extend((fa.after)(sv));
            continue;
        }
        let scale = dl.map(|e| decl(kb, e, &mut out));
        let min = ml.map(|e| decl(kb, e, &mut out));
        let mut val = match scale {
            Some(sv) => fb(BinaryOp::Mul, sv, q),
            None => q,
        };
        if let Some(mv) = min {
            val = fb(BinaryOp::Sub, val, mv);
        }
        let mut body = Vec::new();
        let wv = decl(kb, val, &mut body);
        body.extend(per_value(kb, wv, k, false));
        out.push(Stmt::For { var: l, extent: len as i64, kind: LoopKind::Serial, body });
    }
    out
}

/// Prefetches of block `b` of panel `p`'s bytes, [`PREFETCH_AHEAD`] bytes ahead: a block's `bb·nr`
/// bytes are contiguous in the panel layout and followed by the next block's, so this is one
/// prefetch per cache line of the stream (the same address for every lane of the `vector(nr)` loop
/// around it, so one instruction per line).
pub(super) fn prefetch_ahead(w: &BlockWeight, f: &Fields, p: Expr, b: Var) -> Vec<Stmt> {
    let (bb, nr) = (w.dtype.block().1 as i64, w.nr as i64);
    let start = Expr::mul(Expr::mul(Expr::add(Expr::mul(p, Expr::Int(w.nblk() as i64)), Expr::Var(b)), Expr::Int(bb)), Expr::Int(nr));
    (0..(bb * nr + 63) / 64).map(|l| Stmt::Prefetch { buf: f.u8p, index: Expr::add(start.clone(), Expr::Int(PREFETCH_AHEAD + 64 * l)), far: false }).collect()
}

impl Planner<'_> {
    /// The `dequant_matmul` anchoring the kernel rooted at `r`, if its anchor is one: (anchor, its
    /// node, its block weight, the rows of x).
    pub(super) fn dequant_matmul_at(&self, r: NodeId) -> Option<(NodeId, rlx_ir::Node<rlx_ir::MirOp>, BlockWeight, usize)> {
        let out = self.g.node(r).outputs[0];
        let a = self.fusion.anchor_of.get(&out).copied().unwrap_or(r);
        let node = self.g.node(a).clone();
        if node.op != rlx_ir::MirOp::DequantMatMul {
            return None;
        }
        let w = self.block_weight.get(&node.inputs[1])?.clone();
        let sx = self.shape(node.inputs[0]);
        let rows: usize = sx[..sx.len() - 1].iter().product();
        Some((a, node, w, rows))
    }

    /// Places a constant that `dequant_matmul` / `dequant_gather` read: its packed bytes once in the
    /// weights blob, with views for each field width.
    pub(super) fn place_block_weight(&mut self, label: String, c: &ConstData) -> BlockWeight {
        let (rows, cols) = (c.shape[0], c.shape[1]);
        // The flat form reads each row's blocks in their own order (panels of one row).
        let nr = if self.flat_blocks { 1 } else { panel_rows(rows, self.nr) };
        let quads = self.int8_dot && super::int8_dot::takes(c.dtype) && nr % 4 == 0;
        let bytes = pack_blocks(c, nr, quads);
        let n = bytes.len();
        let off = super::index::align_up(self.weights.len(), self.align);
        self.weights.resize(off, 0);
        self.weights.extend_from_slice(&bytes);
        let view = |me: &mut Self, d: DType, what: &str| {
            let elems = n / d.size().unwrap_or(1);
            me.add_buffer(Buffer { base: Base::Weights, offset: off, dtype: d, shape: vec![elems], label: format!("{label} ({what}, {nr}-row panels)") }, None)
        };
        let u8v = view(self, DType::U8, "bytes");
        let i8v = view(self, DType::I8, "signed bytes");
        let f16v = view(self, DType::F16, "f16 fields");
        let valv = if c.dtype.is_float() { view(self, c.dtype, "values") } else { u8v };
        let quads = quads.then(|| view(self, DType::I32, "quant quads"));
        BlockWeight { dtype: c.dtype, rows, cols, nr, u8v, i8v, f16v, valv, quads }
    }

    pub(super) fn fields(&self, kb: &mut KB, w: &BlockWeight, blk: Expr, jj: Expr) -> Fields {
        let mut p = |b: u32| kb.param(b, &self.buffers[b as usize].clone(), Access::Read);
        Fields {
            u8p: p(w.u8v),
            i8p: p(w.i8v),
            f16p: p(w.f16v),
            valp: p(w.valv),
            bb: w.dtype.block().1 as i64,
            nr: w.nr as i64,
            blk,
            jj,
            quads: w.quads.and(quad_bytes(w.dtype)).map(|(s, e)| (s as i64, e as i64)),
        }
    }

    /// `dequant_matmul` anchored at `a`, with the epilogue chain up to root `r` applied before the
    /// store. Few rows (decode): `for p parallel (panels) { for tile { for jj vector(nr) { acc[mr] +=
    /// x · dequantized w } } }`, every weight byte read once per tile. Many rows (prefill): each
    /// panel is dequantized once into an f32 scratch `[K][nr]` (one per thread slot, in the arena;
    /// L2-sized) and the f32 micro-kernel runs over all tiles from it.
    pub(super) fn block_matmul_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize]) -> Vec<Stmt> {
        let anode = self.g.node(a).clone();
        let x = anode.inputs[0];
        let w = self.block_weight[&anode.inputs[1]].clone();
        if let Some(&scratch) = self.gpu_dequant.get(&a) {
            return self.block_gemm_gpu_body(kb, a, r, op, out_shape, &w, scratch);
        }
        if self.flat_blocks {
            return self.block_flat_body(kb, a, r, op, out_shape, &w);
        }
        let rows: usize = out_shape[..out_shape.len() - 1].iter().product();
        let mr = self.mr.min(rows.max(1));
        if let Some(&act) = self.int8_act.get(&a) {
            return self.int8_gemv_body(kb, a, r, op, out_shape, &w, act);
        }
        if rows.div_ceil(mr) >= PANEL_TILES && w.nr > 1 {
            return self.block_gemm_body(kb, a, r, op, out_shape, &w);
        }
        let sx = self.shape(x);
        let tiles = rows.div_ceil(mr);
        let nr = w.nr;
        let (p, t, jj, b) = (kb.var(), kb.var(), kb.var(), kb.var());
        let blk = Expr::add(Expr::mul(Expr::Var(p), Expr::Int(w.nblk() as i64)), Expr::Var(b));
        let f = self.fields(kb, &w, blk, Expr::Var(jj));
        let row = |i: usize| clamp(Expr::add(Expr::mul(Expr::Var(t), Expr::Int(mr as i64)), Expr::Int(i as i64)), 0, rows as i64 - 1);
        let accs: Vec<_> = (0..mr).map(|_| kb.var()).collect();
        // Partial sums of a sub-block whose scale is factored out (see `walk_block`).
        let parts: Vec<_> = (0..mr).map(|_| kb.var()).collect();
        let zero = lit(0.0, DType::F32);
        let before: Vec<Stmt> = parts.iter().map(|&pv| Stmt::Assign { var: pv, value: zero.clone() }).collect();
        let after = |sv: Expr| -> Vec<Stmt> {
            accs.iter()
                .zip(&parts)
                .map(|(&acc, &pv)| Stmt::Assign { var: acc, value: fb(BinaryOp::Add, Expr::Var(acc), fb(BinaryOp::Mul, sv.clone(), Expr::Var(pv))) })
                .collect()
        };
        let factor = Factor { before: &before, after: &after };
        let mut blk_body = prefetch_ahead(&w, &f, Expr::Var(p), b);
        blk_body.extend(walk_block(kb, &w, &f, b, Some(factor), &mut |kb, wv, k, factored| {
            accs.iter()
                .zip(&parts)
                .enumerate()
                .map(|(i, (&acc, &pv))| {
                    let mut xi = unflatten(&row(i), &sx[..sx.len() - 1]);
                    xi.push(k.clone());
                    let xa = self.elem(kb, x, &xi);
                    let into = if factored { pv } else { acc };
                    Stmt::Assign { var: into, value: fb(BinaryOp::Add, Expr::Var(into), fb(BinaryOp::Mul, xa, wv.clone())) }
                })
                .collect()
        }));
        let mut vbody: Vec<Stmt> = accs.iter().chain(&parts).map(|&v| Stmt::Decl { var: v, dtype: DType::F32, init: zero.clone() }).collect();
        vbody.push(Stmt::For { var: b, extent: w.nblk() as i64, kind: LoopKind::Serial, body: blk_body });
        vbody.extend(self.block_stores(kb, a, r, op, out_shape, &accs, &row, Expr::add(Expr::mul(Expr::Var(p), Expr::Int(nr as i64)), Expr::Var(jj))));
        let kind = LoopKind::run(nr as u32);
        let vl = Stmt::For { var: jj, extent: nr as i64, kind, body: vbody };
        let tl = Stmt::For { var: t, extent: tiles as i64, kind: LoopKind::Serial, body: vec![vl] };
        vec![Stmt::For { var: p, extent: (w.rows / nr) as i64, kind: LoopKind::Parallel, body: vec![tl] }]
    }

    /// The flat form (`PlanOptions::flat_block_dots`, the GPU's): `for i parallel (rows of x) { for j
    /// (weight rows) { acc = 0; for b (blocks) { for l (values of a sub-block) { acc += Σ_s x[i, b·bs +
    /// s·len + l] · w[j, b, s, l] } }; store } }` — a pure expression per term (each sub-block's
    /// scale recomputed per value: on a GPU the loads are cached and the dot product is bound by
    /// the weight stream), so the GPU writers split (b, l) over a warp's lanes, consecutive lanes
    /// reading consecutive bytes of the row, and reduce with shuffles.
    fn block_flat_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize], w: &BlockWeight) -> Vec<Stmt> {
        let x = self.g.node(a).inputs[0];
        let sx = self.shape(x);
        let rows: usize = out_shape[..out_shape.len() - 1].iter().product();
        let (bs, _) = w.dtype.block();
        let (nsub, len) = subs(w.dtype);
        let (i, j, b, l, acc) = (kb.var(), kb.var(), kb.var(), kb.var(), kb.var());
        let blk = Expr::add(Expr::mul(Expr::Var(j), Expr::Int(w.nblk() as i64)), Expr::Var(b));
        let f = self.fields(kb, w, blk, Expr::Int(0));
        let mut term: Option<Expr> = None;
        for s in 0..nsub {
            let val = value_f32(w.dtype, &f, s, &Expr::Var(l));
            let k = Expr::add(Expr::add(Expr::mul(Expr::Var(b), Expr::Int(bs as i64)), Expr::Int((s * len) as i64)), Expr::Var(l));
            let mut xi = unflatten(&Expr::Var(i), &sx[..sx.len() - 1]);
            xi.push(k);
            let t = fb(BinaryOp::Mul, self.elem(kb, x, &xi), val);
            term = Some(match term {
                None => t,
                Some(p) => fb(BinaryOp::Add, p, t),
            });
        }
        let term = term.expect("a block has a sub-block");
        let mut body = vec![
            Stmt::Decl { var: acc, dtype: DType::F32, init: lit(0.0, DType::F32) },
            Stmt::For {
                var: b,
                extent: w.nblk() as i64,
                kind: LoopKind::Serial,
                body: vec![Stmt::For { var: l, extent: len as i64, kind: LoopKind::Serial, body: vec![Stmt::Assign { var: acc, value: fb(BinaryOp::Add, Expr::Var(acc), term) }] }],
            },
        ];
        body.extend(self.block_stores(kb, a, r, op, out_shape, &[acc], &|_| Expr::Var(i), Expr::Var(j)));
        let jl = Stmt::For { var: j, extent: w.rows as i64, kind: LoopKind::Serial, body };
        vec![Stmt::For { var: i, extent: rows as i64, kind: LoopKind::Parallel, body: vec![jl] }]
    }

    /// The stores of a tile's accumulators at column `col`, each through the epilogue chain.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn block_stores(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize], accs: &[Var], row: &dyn Fn(usize) -> Expr, col: Expr) -> Vec<Stmt> {
        let av = self.g.node(a).outputs[0];
        let rows_shape = &out_shape[..out_shape.len() - 1];
        let mut out = Vec::new();
        for (i, &acc) in accs.iter().enumerate() {
            let mut idx = unflatten(&row(i), rows_shape);
            idx.push(col.clone());
            kb.subst.insert(av, Expr::Var(acc));
            let v = if a == r { Expr::Var(acc) } else { self.node_expr(kb, r, &idx) };
            kb.subst.remove(&av);
            out.push(Stmt::Store { buf: op, index: linear(&idx, out_shape), value: v });
        }
        out
    }

    /// The prefill form: thread slots (the parallel loop, [`SLOTS`] of them so 1, 2, 4 or 8 threads get
    /// equal shares) each walk their share of the panels; a panel is dequantized into the slot's f32
    /// scratch `[K][nr]`, then every tile of `mr` rows runs the f32 micro-kernel over it.
    fn block_gemm_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize], w: &BlockWeight) -> Vec<Stmt> {
        let x = self.g.node(a).inputs[0];
        let sx = self.shape(x);
        let kdim = w.cols;
        let rows: usize = out_shape[..out_shape.len() - 1].iter().product();
        let mr = self.mr.min(rows.max(1));
        let tiles = rows.div_ceil(mr);
        let nr = w.nr;
        let np = w.rows / nr;
        let slots = SLOTS.min(np);
        let per = np.div_ceil(slots);
        let label = format!("{} (dequantized panel scratch)", self.g.node(a).name);
        let sb = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: vec![slots, kdim, nr], label }, None);
        let sp = kb.param(sb, &self.buffers[sb as usize].clone(), Access::ReadWrite);
        let (slot, q, jj, b, t, jj2, kv) = (kb.var(), kb.var(), kb.var(), kb.var(), kb.var(), kb.var(), kb.var());
        let p = Expr::add(Expr::mul(Expr::Var(slot), Expr::Int(per as i64)), Expr::Var(q));
        let blk = Expr::add(Expr::mul(p.clone(), Expr::Int(w.nblk() as i64)), Expr::Var(b));
        let f = self.fields(kb, w, blk, Expr::Var(jj));
        let base = Expr::mul(Expr::Var(slot), Expr::Int((kdim * nr) as i64));
        // Dequantize the panel: scratch[slot][k][jj].
        let mut blk_body = prefetch_ahead(w, &f, p.clone(), b);
        blk_body.extend(walk_block(kb, w, &f, b, None, &mut |_, wv, k, _| {
            vec![Stmt::Store { buf: sp, index: Expr::add(base.clone(), Expr::add(Expr::mul(k, Expr::Int(nr as i64)), Expr::Var(jj))), value: wv }]
        }));
        let deq = Stmt::For {
            var: jj,
            extent: nr as i64,
            kind: LoopKind::Vector(nr as u32),
            body: vec![Stmt::For { var: b, extent: w.nblk() as i64, kind: LoopKind::Serial, body: blk_body }],
        };
        // The micro-kernel over every tile.
        let row = |i: usize| clamp(Expr::add(Expr::mul(Expr::Var(t), Expr::Int(mr as i64)), Expr::Int(i as i64)), 0, rows as i64 - 1);
        let accs: Vec<_> = (0..mr).map(|_| kb.var()).collect();
        let wk = Expr::load(sp, Expr::add(base.clone(), Expr::add(Expr::mul(Expr::Var(kv), Expr::Int(nr as i64)), Expr::Var(jj2))));
        let mut inner = Vec::new();
        for (i, &acc) in accs.iter().enumerate() {
            let mut xi = unflatten(&row(i), &sx[..sx.len() - 1]);
            xi.push(Expr::Var(kv));
            let xa = self.elem(kb, x, &xi);
            inner.push(Stmt::Assign { var: acc, value: fb(BinaryOp::Add, Expr::Var(acc), fb(BinaryOp::Mul, xa, wk.clone())) });
        }
        let mut vbody: Vec<Stmt> = accs.iter().map(|&acc| Stmt::Decl { var: acc, dtype: DType::F32, init: lit(0.0, DType::F32) }).collect();
        vbody.push(Stmt::For { var: kv, extent: kdim as i64, kind: LoopKind::Serial, body: inner });
        vbody.extend(self.block_stores(kb, a, r, op, out_shape, &accs, &row, Expr::add(Expr::mul(p.clone(), Expr::Int(nr as i64)), Expr::Var(jj2))));
        let gemm = Stmt::For {
            var: t,
            extent: tiles as i64,
            kind: LoopKind::Serial,
            body: vec![Stmt::For { var: jj2, extent: nr as i64, kind: LoopKind::Vector(nr as u32), body: vbody }],
        };
        let mut panel = vec![deq, gemm];
        if slots * per > np {
            panel = vec![Stmt::If { cond: Expr::i(IOp::Lt, p, Expr::Int(np as i64)), body: panel }];
        }
        vec![Stmt::For {
            var: slot,
            extent: slots as i64,
            kind: LoopKind::Parallel,
            body: vec![Stmt::For { var: q, extent: per as i64, kind: LoopKind::Serial, body: panel }],
        }]
    }

    /// `dequant_gather` at root `r`: for each index (parallel), its row's blocks dequantized into the
    /// output. An index below zero counts from the end; one out of range is clamped (kernels do not
    /// fail; the interpreter reports it).
    pub(super) fn block_gather_body(&mut self, kb: &mut KB, r: NodeId, op: u32, out_shape: &[usize]) -> Vec<Stmt> {
        let node = self.g.node(r).clone();
        let (table, idx) = (node.inputs[0], node.inputs[1]);
        let w = self.block_weight[&table].clone();
        let ishape = self.shape(idx);
        let positions: usize = ishape.iter().product();
        let nblk = w.nblk();
        let (pos, b) = (kb.var(), kb.var());
        let ii = unflatten(&Expr::Var(pos), &ishape);
        let raw = Expr::ToIndex { from: self.dt(idx), x: Box::new(self.elem(kb, idx, &ii)) };
        let rv = kb.var();
        let wrapped = Expr::Select(Box::new(Expr::i(IOp::Lt, Expr::Var(rv), Expr::Int(0))), Box::new(Expr::add(Expr::Var(rv), Expr::Int(w.rows as i64))), Box::new(Expr::Var(rv)));
        let row = clamp(wrapped, 0, w.rows as i64 - 1);
        let rowv = kb.var();
        let pnl = Expr::i(IOp::Div, Expr::Var(rowv), Expr::Int(w.nr as i64));
        let jj = Expr::i(IOp::Rem, Expr::Var(rowv), Expr::Int(w.nr as i64));
        let blk = Expr::add(Expr::mul(pnl, Expr::Int(nblk as i64)), Expr::Var(b));
        let f = self.fields(kb, &w, blk, jj);
        debug_assert_eq!(out_shape.iter().product::<usize>(), positions * w.cols);
        let blk_body = walk_block(kb, &w, &f, b, None, &mut |_, wv, k, _| {
            vec![Stmt::Store { buf: op, index: Expr::add(Expr::mul(Expr::Var(pos), Expr::Int(w.cols as i64)), k), value: wv }]
        });
        let decls = vec![Stmt::Decl { var: rv, dtype: DType::I64, init: raw }, Stmt::Decl { var: rowv, dtype: DType::I64, init: row }];
        if self.flat_blocks {
            // The GPU's: the blocks are a grid dimension too (the row's index read per block), so a
            // prefill chunk's 128 rows are not 128 threads each walking a whole row (101 µs for
            // Gemma 3 270M's embedding on the H200).
            let mut inner = decls;
            inner.extend(blk_body);
            let bl = Stmt::For { var: b, extent: nblk as i64, kind: LoopKind::Parallel, body: inner };
            return vec![Stmt::For { var: pos, extent: positions as i64, kind: LoopKind::Parallel, body: vec![bl] }];
        }
        let mut body = decls;
        body.push(Stmt::For { var: b, extent: nblk as i64, kind: LoopKind::Serial, body: blk_body });
        vec![Stmt::For { var: pos, extent: positions as i64, kind: LoopKind::Parallel, body }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{plan, PlanOptions};
    use rlx_ir::{Blob, Mir, MirOp, TensorType};

    #[test]
    fn panels_divide_the_rows() {
        assert_eq!(panel_rows(640, 32), 32);
        assert_eq!(panel_rows(96, 32), 32);
        assert_eq!(panel_rows(100, 32), 4);
        assert_eq!(panel_rows(7, 16), 1);
        assert_eq!(panel_rows(24, 16), 8);
    }

    /// Packing permutes the bytes: the same multiset, and each row's block fields where the layout says.
    #[test]
    fn packing_moves_every_byte_of_a_block_to_its_panel_slot() {
        let (rows, cols) = (8usize, 64usize);
        let bytes: Vec<u8> = (0..rows * 2 * 18).map(|i| (i * 31 % 251) as u8).collect();
        let c = ConstData::new(DType::Q4_0, vec![rows, cols], Blob::from_vec(bytes.clone())).unwrap();
        let nr = 4;
        let p = pack_blocks(&c, nr, false);
        assert_eq!(p.len(), bytes.len());
        for j in 0..rows {
            for b in 0..2 {
                let src = &bytes[(j * 2 + b) * 18..][..18];
                let base = ((j / nr) * 2 + b) * 18 * nr;
                // The f16 scale keeps its two bytes together; the nibbles are one byte per row.
                assert_eq!(&p[base + 2 * (j % nr)..][..2], &src[..2]);
                for t in 2..18 {
                    assert_eq!(p[base + t * nr + j % nr], src[t], "row {j} block {b} byte {t}");
                }
            }
        }
    }

    fn matmul_of(w: ConstData, as_input: bool) -> Mir {
        let mut g = Mir::new();
        let k = w.shape[1];
        let x = g.add_input("x", TensorType::fixed(DType::F32, &[1, k]));
        let wv = if as_input { g.add_input("w", TensorType::fixed(w.dtype, &w.shape)) } else { g.add_const(Some("w"), w) };
        let y = g.add_node("proj", MirOp::DequantMatMul, &[x, wv]).unwrap()[0];
        g.outputs = vec![y];
        g
    }

    #[test]
    fn unsupported_weights_are_problems_naming_the_node() {
        let f64w = ConstData::new(DType::F64, vec![4, 8], Blob::from_vec(vec![0u8; 4 * 8 * 8])).unwrap();
        let e = plan(&matmul_of(f64w, false), &PlanOptions::default()).unwrap_err();
        assert!(e.iter().any(|p| p.node.as_deref() == Some("proj") && p.msg.contains("f64 weight")), "{e:?}");
        let q = ConstData::new(DType::Q8_0, vec![4, 32], Blob::from_vec(vec![0u8; 4 * 34])).unwrap();
        let e = plan(&matmul_of(q, true), &PlanOptions::default()).unwrap_err();
        assert!(e.iter().any(|p| p.node.as_deref() == Some("proj") && p.msg.contains("must be a constant")), "{e:?}");
    }

    /// One tensor behind two constants (a tied embedding and output projection) is packed once.
    #[test]
    fn a_tied_weight_is_stored_once() {
        let blob = Blob::from_vec(vec![0u8; 64 * 34]);
        let w = ConstData::new(DType::Q8_0, vec![64, 32], blob).unwrap();
        let mut g = Mir::new();
        let ids = g.add_input("ids", TensorType::fixed(DType::I64, &[2]));
        let t1 = g.add_const(Some("table"), w.clone());
        let t2 = g.add_const(Some("output"), w);
        let e = g.add_node("emb", MirOp::DequantGather, &[t1, ids]).unwrap()[0];
        let y = g.add_node("logits", MirOp::DequantMatMul, &[e, t2]).unwrap()[0];
        g.outputs = vec![y];
        let lir = plan(&g, &PlanOptions::default()).unwrap();
        assert_eq!(lir.weights.len(), 64 * 34);
    }
}
