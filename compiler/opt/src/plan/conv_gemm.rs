//! Dense convolution (groups = 1, f32) on the GEMM micro-kernel, activations kept in NCHW: per image,
//! `out[n][M = output channels][P = output positions] = W[M, K = C·k₁·k₂…] · col[n][K, P]`.
//! The weight (A) is packed at compile time into `gemm_mr`-row panels `[M/mr][K][mr]` and read as
//! broadcast scalars; B is read as `vector(nr)` rows along P: x itself for a 1×1, stride-1 unpadded
//! convolution (x[n] viewed as [C, H·W]), packed per chunk straight from x under a window mask for a
//! stride-1 one whose output rows are as wide as its input's ([`Direct`]) or from x's s² phases for a strided
//! one (`phase.rs`), else the im2col copy (its own
//! launch before the GEMM: col in the arena, zero where the window reads padding). Positions past the last full panel are narrower
//! vector panels of power-of-two widths. The epilogue (bias as the accumulators' start, then the fused elementwise
//! chain: activation, residual add) is applied per accumulator before the store. K is cut into chunks
//! whose B panel stays in L1; the parallel loop runs over images × blocks of row tiles (when the
//! weight is the larger operand, B read in place) or over thread slots that are dealt the position
//! panels, each K chunk of a panel packed into the slot's contiguous scratch before the tiles read it
//! (see [`Planner::conv_gemm_body`], [`Planner::packed_positions`]). Two other forms share the tiles:
//! output channels as the lanes over few positions (`conv_lanes.rs`) and Winograd for 3×3 stride-1
//! convolutions over large outputs (`winograd.rs`).

use super::fuse::{is_elementwise, Role};
use super::index::{clamp, linear};
use super::blocks::{slot_units, SLOTS};
use super::conv_lanes::lanes_shape;
use super::conv_rows::Rows;
use super::winograd::{self, Wino};
use super::kernel::{lit, KB};
use super::Planner;
use rlx_ir::lir::{Base, Buffer};
use rlx_ir::loops::grid::{loads_of, map_vars};
use rlx_ir::loops::{Access, Expr, IOp, LoopKind, Stmt};
use rlx_ir::{BinaryOp, ConstData, DType, Def, MirOp, NodeId, ValueId};

/// The fewest input and output channels per group for a grouped convolution to go on the GEMM.
pub(super) const GROUP_MIN: usize = 8;

/// The weight size (bytes) above which packed positions mode runs each K chunk over all of a slot's
/// units (the chunk's weight slice stays in L2) instead of all chunks of one unit at a time.
const A_L2: usize = 512 * 1024;

/// The largest window mask (bytes, a weight of the artifact) a 3-D `Direct` convolution takes: a 3×3×3
/// one over 8 × 28² has 0.68 MB (6.76 → 4.25 ms against im2col, one thread), one over 16 × 112² would
/// have 21 MB — which im2col writes per input channel per call, but the artifact would carry.
const MASK_3D: usize = 8 << 20;

/// A convolution planned on the GEMM micro-kernel.
#[derive(Clone, Debug)]
pub(super) struct ConvGemm {
    /// The weight packed in `mr`-row panels `[tiles][K][mr]`.
    pub(super) apack: u32,
    /// Rows per tile (the packing's).
    pub(super) mr: usize,
    /// Lanes per tile: the width of a panel of positions ([`PlanOptions::wide_tile`]'s, or `gemm_nr`).
    ///
    /// [`PlanOptions::wide_tile`]: super::PlanOptions::wide_tile
    pub(super) nr: usize,
    /// The im2col buffer `[N, K, P]` (None: B is x itself, a 1×1 stride-1 unpadded convolution).
    pub(super) col: Option<u32>,
    /// Whether the convolution needs the im2col copy.
    pub(super) im2col: bool,
    /// Groups: each group's output channels are their own row tiles (the packing's), reading the
    /// group's slice of B's K rows.
    pub(super) groups: usize,
    /// Packed positions mode reading the image itself (no im2col; see [`Direct`]).
    pub(super) direct: Option<Direct>,
    /// Output channels as the vector lanes (`conv_lanes.rs`): `mr` positions per tile × `nr` channels,
    /// the weight packed in `nr`-channel panels.
    pub(super) lanes: bool,
    /// The Winograd form (`winograd.rs`): `apack` is the transformed weight's α² groups of panels.
    pub(super) winograd: Option<Wino>,
}

/// A dense stride-1 2-D convolution whose output rows are as wide as its input rows (or a 3-D one whose
/// output planes are as large as its input's, the taps' offsets summed over D·H·W): its B
/// chunks are packed from x itself (in either loop order). Row `(c, kh, kw)` of col at flat output
/// position `p` is `x[n][c]` at flat `p + (d·kh − ph)·W + (d·kw − pw)` (d the dilation) — contiguous along p, across output
/// rows too — where the window is inside the input, and zero elsewhere: a constant mask
/// `[KH·KW, P]` (1.0 inside) selects which, so no im2col copy is written or read. A strided one
/// (stride s of 2–4 on both axes, see [`strided_direct`]) reads the same way from x split into its s²
/// phases by a launch of its own (`phase.rs`): phase (a, b) is `x[c][s·i + a][s·j + b]` stored
/// `[⌈H/s⌉][OW]`, so tap (kh, kw) reads phase ((kh − ph) mod s, (kw − pw) mod s) at flat
/// `p + ⌊(kh − ph)/s⌋·OW + ⌊(kw − pw)/s⌋`, contiguous along p again.
#[derive(Clone, Debug)]
pub(super) struct Direct {
    /// The mask buffer `[KH·KW, P]` (f32 0/1), shared by convolutions of the same geometry.
    pub(super) mask: u32,
    /// The panels wholly inside: i64 `[KH·KW, ⌈P/nr⌉]`, 1 where every position of panel q (nr
    /// positions, the last panel's fewer) reads inside x for the tap, so its rows are plain copies with
    /// neither the mask's loads nor its compares (the mask of a 224² stem is 0.45–2.4 MB, read from
    /// memory every call: a quarter of MobileNet-like's stem time was its compares waiting on it).
    pub(super) inner: u32,
    /// Input channels, kernel taps (KH·KW, or KD·KH·KW), elements per channel of the source read (x:
    /// H·W or D·H·W; the phases: ⌈H/s⌉·OW).
    pub(super) c: usize,
    pub(super) taps: usize,
    pub(super) hw: usize,
    /// The kernel's spatial dims and x's element stride along each (2-D: [W, 1]; 3-D: [H·W, W, 1]).
    pub(super) kdims: Vec<usize>,
    pub(super) xstrides: Vec<usize>,
    /// The flat offset of tap (0, 0): Σ pad·stride (ph·W + pw in 2-D; stride 1).
    pub(super) shift0: i64,
    /// The dilation (stride 1 only; 1 when strided): tap (k₀, k₁, …) is read at flat `p + d·Σ kᵢ·xstridesᵢ − shift0`.
    pub(super) dil: usize,
    /// Strided: the stride and the weight buffer of each tap's offset in an image's phases (i64
    /// `[KH·KW]`: phase·C·⌈H/s⌉·OW + ⌊(kh − ph)/s⌋·OW + ⌊(kw − pw)/s⌋).
    pub(super) phases: Option<(usize, u32)>,
    /// Strided over few input channels: read from x itself by output rows (`conv_rows.rs`; no phases).
    pub(super) rows: Option<Rows>,
}

impl Direct {
    /// Elements per image of the source the B chunks are packed from (x, or its s² phases).
    fn image(&self) -> usize {
        self.phases.map_or(1, |(s, _)| s * s) * self.c * self.hw
    }

    /// Positions per entry of `inner` for panels of `nr`: `nr`, or the row-read form's narrowest piece.
    fn granule(&self, nr: usize) -> usize {
        self.rows.as_ref().map_or(nr, |r| r.granule(nr))
    }
}

/// The tap offsets of a strided `Direct` convolution (see [`Direct`]) when its geometry allows them:
/// every tap that reads inside x at output column ow finds its phase element at column ow + ⌊(kw − pw)/s⌋
/// inside `[0, OW)` (so the flat offset never wraps into a neighbouring row; the phases have ⌈H/s⌉ rows,
/// so rows always fit). `geo` = (kernel, input, output, leading pad) per spatial axis (H, then W); `c`
/// the input channels. Returns the offsets and the phases' rows.
fn strided_direct(s: usize, geo: [(usize, usize, usize, usize); 2], c: usize) -> Option<(Vec<i64>, usize)> {
    let (kw, w, ow, pw) = geo[1];
    let fits = (0..kw).all(|t| {
        let d = (t as i64 - pw as i64).div_euclid(s as i64);
        (0..ow as i64).all(|o| {
            let i = o * s as i64 + t as i64 - pw as i64;
            !(0..w as i64).contains(&i) || (0..ow as i64).contains(&(o + d))
        })
    });
    // A kernel narrower than the stride reads only some phases (a 1×1 s2 one: one of four): its im2col is smaller.
    if !(2..=4).contains(&s) || geo.iter().any(|g| g.0 < s) || !fits {
        return None;
    }
    let hp = geo[0].1.div_ceil(s);
    let (ow, hw) = (ow as i64, (hp * geo[1].2) as i64);
    let split = |t: usize, pad: usize| {
        let e = t as i64 - pad as i64;
        (e.rem_euclid(s as i64), e.div_euclid(s as i64))
    };
    let mut v = Vec::new();
    for kh in 0..geo[0].0 {
        for kw in 0..geo[1].0 {
            let ((a, dh), (b, dw)) = (split(kh, geo[0].3), split(kw, geo[1].3));
            v.push((a * s as i64 + b) * c as i64 * hw + dh * ow + dw);
        }
    }
    Some((v, hp))
}

/// The positions `from` … `pn` − 1 past the last full panel in power-of-two widths (a vector of an odd
/// width such as 17 lanes compiles to lane shuffles and spills): (first position, width).
pub(super) fn tail_pieces(from: usize, pn: usize) -> Vec<(usize, usize)> {
    let mut pieces = Vec::new();
    let mut off = from;
    while off < pn {
        let w = 1usize << (usize::BITS - 1 - (pn - off).leading_zeros());
        pieces.push((off, w));
        off += w;
    }
    pieces
}

/// Rows per tile for `mg` output channels a group on a tile of `mr` rows: `mr`, or 4 where `mr`-row
/// tiles would compute more than 1/16 of their rows past the last channel (the wide tile's 6 rows over
/// DenseNet's 32-channel growth convolutions: 36 rows for 32, where 4-row tiles compute 32; a 4 × 64
/// tile keeps 16 accumulators, and an AVX-512 core issues one 512-bit FMA per cycle either way).
fn tile_rows(mr: usize, mg: usize) -> usize {
    let mr = mr.min(mg).max(1);
    let waste = |r: usize| mg.div_ceil(r) * r - mg;
    if mr > 4 && waste(mr) * 16 > mg && waste(4) < waste(mr) { 4 } else { mr }
}

/// Whether the GEMM of `mg` output channels a group, `tiles` row tiles, over `pn` positions runs with
/// blocks of row tiles as the parallel loop (the weight is the larger operand), B read in place.
fn by_rows(mg: usize, pn: usize, tiles: usize) -> bool {
    mg >= pn && tiles >= 2
}

impl Planner<'_> {
    /// The kernel root whose kernel computes anchor `a` (itself when it is a root).
    pub(super) fn root_of_anchor(&self, a: NodeId) -> Option<NodeId> {
        if self.fusion.role[a.index()] == Role::Root {
            return Some(a);
        }
        self.fusion.anchor_of.iter().filter(|(_, &an)| an == a).filter_map(|(&v, _)| self.g.producer(v)).find(|&p| self.fusion.role[p.index()] == Role::Root)
    }

    /// Whether `v`'s value lives in a buffer (a graph input, a kernel root's output or a view of one).
    pub(super) fn materialized(&self, v: ValueId) -> bool {
        self.g.inputs.contains(&v) || self.g.producer(v).is_some_and(|p| matches!(self.fusion.role[p.index()], Role::Root | Role::View))
    }

    /// Whether the epilogue of anchor `a` in root `r`'s kernel can be evaluated at a flat position index:
    /// every inlined node elementwise and every operand's spatial dims either all 1 or the output's.
    fn flat_epilogue_ok(&self, a: NodeId, r: NodeId, out: &[usize]) -> bool {
        let av = self.g.node(a).outputs[0];
        let ok_shape = |s: &[usize]| {
            if s.len() > out.len() {
                return false;
            }
            let mut p = vec![1; out.len() - s.len()];
            p.extend_from_slice(s);
            p[2..].iter().all(|&d| d == 1) || p[2..] == out[2..]
        };
        let mut stack = vec![r];
        let mut seen = vec![r];
        while let Some(n) = stack.pop() {
            let node = self.g.node(n);
            if !is_elementwise(&node.op) || node.outputs.len() != 1 || !ok_shape(&self.shape(node.outputs[0])) {
                return false;
            }
            for &v in &node.inputs {
                if v == av {
                    continue;
                }
                match self.g.producer(v) {
                    Some(p) if self.fusion.role[p.index()] == Role::Inlined => {
                        if !seen.contains(&p) {
                            seen.push(p);
                            stack.push(p);
                        }
                    }
                    _ => {
                        if !ok_shape(&self.shape(v)) {
                            return false;
                        }
                    }
                }
            }
        }
        true
    }

    /// The convolutions that go on the GEMM micro-kernel, in node order, with their weights: f32
    /// convolutions over a materialized input, dense or grouped with at least [`GROUP_MIN`] input and
    /// output channels per group (one GEMM per group; fewer go to `window.rs`'s kernels), whose weight
    /// is a constant (no graph output; convolutions sharing it share its packed copy) and whose
    /// epilogue reads operands at a flat position index.
    pub(super) fn conv_gemm_candidates(&self) -> Vec<(NodeId, ValueId)> {
        let g = self.g;
        let is_out = g.output_mask();
        let mut v = Vec::new();
        for a in g.node_ids() {
            let node = g.node(a);
            let MirOp::Conv { groups, .. } = node.op else { continue };
            let (x, w) = (node.inputs[0], node.inputs[1]);
            let out = self.shape(node.outputs[0]);
            let sw = self.shape(w);
            if groups > 1 && (sw[1] < GROUP_MIN || sw[0] / groups < GROUP_MIN) {
                continue;
            }
            let f32s = node.inputs.iter().chain(&node.outputs).all(|&i| self.dt(i) == DType::F32);
            let kdim: usize = sw[1..].iter().product();
            if !f32s || out.len() < 3 || out.contains(&0) || kdim == 0 || !self.materialized(x) || !matches!(g.value(w).def, Def::Const(_)) || is_out[w.index()] {
                continue;
            }
            if self.fusion.role[a.index()] == Role::Inlined || self.fusion.role[a.index()] == Role::View {
                continue;
            }
            let Some(r) = self.root_of_anchor(a) else { continue };
            if r != a && !self.flat_epilogue_ok(a, r, &out) {
                continue;
            }
            v.push((a, w));
        }
        v
    }

    /// Packs the weights of the convolutions that go on the GEMM micro-kernel; returns the weights
    /// packed (they need no other copy in the blob).
    pub(super) fn pack_conv_weights(&mut self) -> Vec<ValueId> {
        let mut packed = Vec::new();
        // Masks of `Direct` convolutions by geometry (input, output and kernel dims, leading pads, stride,
        // dilation, panel width).
        let mut masks: std::collections::HashMap<Vec<usize>, (u32, u32)> = std::collections::HashMap::new();
        for (a, w) in self.conv_gemm_candidates() {
            let Def::Const(c) = &self.g.value(w).def else { continue };
            let node = self.g.node(a);
            let MirOp::Conv { strides, pads, dilations, groups } = &node.op else { continue };
            let groups = *groups;
            let sw = self.shape(w);
            let (sx, so) = (self.shape(node.inputs[0]), self.shape(node.outputs[0]));
            let one = sw[2..].iter().all(|&k| k == 1) && strides.iter().all(|&s| s == 1) && pads.iter().all(|&p| p == 0);
            // A 3×3 stride-1 one over a large output: Winograd F(m×m, 3×3), its α² GEMMs as α² groups.
            if let Some(wg) = winograd::fits(&sw, &so, strides, dilations, groups, self.opts.winograd, self.opts.two_fma) {
                let (cmr, cnr) = self.wide_tile;
                let (mr, nr) = if cmr > 0 && cnr > 0 { (cmr, cnr) } else { (self.mr, self.nr) };
                let mr = tile_rows(mr, sw[0]);
                let pc = pack_rows(&winograd::transform(c, wg.form()), mr, wg.form().groups());
                let b = self.add_packed(w, format!("{} (winograd, packed {mr}-row panels)", self.label(w)), &pc, wg.form().groups());
                self.conv_gemm.insert(a, ConvGemm { apack: b, mr, nr, col: None, im2col: false, groups: wg.form().groups(), direct: None, lanes: false, winograd: Some(wg) });
                packed.push(w);
                continue;
            }
            // Few positions and channels that fill whole panels: the channels are the lanes.
            if let Some((rows, lanes)) = lanes_shape(self.wide_tile, sw[0], sw[1..].iter().product(), so[2..].iter().product()).filter(|_| groups == 1) {
                let pc = pack_rows(c, lanes, 1);
                let b = self.add_packed(w, format!("{} (packed {lanes}-channel panels)", self.label(w)), &pc, 1);
                self.conv_gemm.insert(a, ConvGemm { apack: b, mr: rows, nr: lanes, col: None, im2col: !one, groups, direct: None, lanes: true, winograd: None });
                packed.push(w);
                continue;
            }
            // The wide tile (AVX-512: 6 × 64) where the positions fill one of its panels, else the GEMM's.
            let (cmr, cnr) = self.wide_tile;
            let (mr, nr) = if cmr > 0 && cnr > 0 && so[2..].iter().product::<usize>() >= cnr { (cmr, cnr) } else { (self.mr, self.nr) };
            let mr = tile_rows(mr, sw[0] / groups);
            // A dilated one (DeepLab's atrous 3×3s) reads its taps d apart: stride 1 only.
            let dil = dilations.first().copied().unwrap_or(1);
            // A 3-D one (stride 1) the same way, its taps' offsets over D·H·W, while its mask (taps ×
            // positions f32, a weight) stays under MASK_3D: past it, the im2col copy.
            let mask_bytes = sw[2..].iter().product::<usize>() * so[2..].iter().product::<usize>() * 4;
            let plain = !one && groups == 1 && (sx.len() == 4 || (sx.len() == 5 && strides.iter().all(|&s| s == 1) && mask_bytes <= MASK_3D)) && dilations.iter().all(|&d| d == dil)
                && strides.iter().all(|&s| s == strides[0]) && (dil == 1 || strides[0] == 1);
            let s = strides[0];
            // The 2-D geometry (the strided forms; `plain` checks the rank first).
            let at = |v: &[usize], i: usize| v.get(i).copied().unwrap_or(0);
            let (kh, kw, h, wd, oh, ow) = (at(&sw, 2), at(&sw, 3), at(&sx, 2), at(&sx, 3), at(&so, 2), at(&so, 3));
            let (ph, pw) = (pads[0], at(pads, 1));
            // One whose weight is the larger operand over 8 blocks of row tiles and fewer than two panels of
            // positions keeps im2col: each block would pack every B chunk itself, mostly in narrow pieces
            // (ResNet-50's 512-channel 3×3 at 7²: the im2col form 0.90× the packed one's time, CPU time; its
            // stride-2 one at 14² → 7² 0.90–0.97×; VGG-19's 512-channel 3×3 at 14², 196 positions, 1.11–1.14×
            // with im2col, so it packs; ResNet's stride-2 256-channel at 28² → 14² in 4 blocks packs, 0.79–0.95×).
            let tiles = sw[0].div_ceil(mr);
            let pn: usize = so[2..].iter().product();
            let eight = by_rows(sw[0], pn, tiles) && tiles / 8 >= 8 && pn < 2 * nr;
            let toff = if plain && s > 1 && sx.len() == 4 && !eight { strided_direct(s, [(kh, h, oh, ph), (kw, wd, ow, pw)], sx[1]) } else { None };
            // Few input channels (a stem): x read by output rows instead of split into phases.
            let rows = toff.as_ref().and_then(|_| Rows::fits(s, sx[1] * kh * kw, (wd, ow, kw), (ph, pw), sw[0], pn));
            let toff = toff.filter(|_| rows.is_none());
            // Stride 1: the output's dims after the first spatial one as the input's (rows as wide, in 3-D
            // planes as large too), so a flat output position plus a tap's offset is its flat input position.
            let nsp = sx.len() - 2;
            let direct = if plain && ((s == 1 && so[3..] == sx[3..] && !eight) || toff.is_some() || rows.is_some()) {
                let (kd, xd, od) = (&sw[2..], &sx[2..], &so[2..]);
                let key: Vec<usize> = [xd, od, kd, &pads[..nsp], &[s, dil, nr, rows.is_some() as usize]].concat();
                let (mask, inner) = match masks.get(&key) {
                    Some(&m) => m,
                    None => {
                        let mc = window_mask(kd, xd, od, (s, dil), &pads[..nsp]);
                        let ic = match &rows {
                            Some(r) => r.inner(&mc, nr),
                            None => inner_panels(&mc, nr),
                        };
                        let m = (self.add_weight(format!("{} (window mask)", node.name), &mc), self.add_weight(format!("{} (panels inside)", node.name), &ic));
                        masks.insert(key, m);
                        m
                    }
                };
                let hw = toff.as_ref().map_or(xd.iter().product(), |(_, hp)| hp * ow);
                let xstrides: Vec<usize> = (0..nsp).map(|i| xd[i + 1..].iter().product()).collect();
                let shift0 = (0..nsp).map(|i| pads[i] * xstrides[i]).sum::<usize>() as i64;
                let phases = toff.map(|(t, _)| {
                    let bytes: Vec<u8> = t.iter().flat_map(|v| v.to_le_bytes()).collect();
                    let cd = ConstData { dtype: DType::I64, shape: vec![t.len()], data: rlx_ir::Blob::from_vec(bytes) };
                    (s, self.add_weight(format!("{} (phase tap offsets)", node.name), &cd))
                });
                Some(Direct { mask, inner, c: sx[1], taps: kd.iter().product(), hw, kdims: kd.to_vec(), xstrides, shift0, dil, phases, rows })
            } else {
                None
            };
            let pc = pack_rows(c, mr, groups);
            let b = self.add_packed(w, format!("{} (packed {mr}-row panels)", self.label(w)), &pc, groups);
            self.conv_gemm.insert(a, ConvGemm { apack: b, mr, nr, col: None, im2col: !one && direct.is_none(), groups, direct, lanes: false, winograd: None });
            packed.push(w);
        }
        packed
    }

    /// The GEMM kernel of convolution anchor `a` (root `r`, output param `op`).
    ///
    /// K is cut into chunks of at most `kc` (a chunk of a B panel, `kc × nr`, stays in L1 while the
    /// tiles sweep it); the accumulators of a chunk start from the bias (first chunk) or the partial
    /// sums stored by the previous one, and only the last chunk applies the epilogue. The operand that
    /// is larger is read once: with more weight than col (M ≥ P, deep layers over few positions) the
    /// parallel loop is over blocks of row tiles (8, or as many as there are tiles, so two threads get
    /// equal shares) and every chunk of every panel sweeps the block's tiles; otherwise (groups = 1) B
    /// is packed per chunk into a thread slot's scratch (`packed_positions`), or (grouped) the parallel
    /// loop is over the position panels and every chunk sweeps all tiles.
    pub(super) fn conv_gemm_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize]) -> Vec<Stmt> {
        let node = self.g.node(a).clone();
        let cg = self.conv_gemm[&a].clone();
        if cg.winograd.is_some() {
            return self.winograd_body(kb, a, r, op, out_shape);
        }
        let sw = self.shape(node.inputs[1]);
        let kdim: usize = sw[1..].iter().product();
        let bbuf = match cg.col {
            Some(c) => c,
            None => self.buf_of[node.inputs[0].index()].expect("conv GEMM input is materialized"),
        };
        if cg.lanes {
            return self.lanes_gemm(kb, a, r, node.inputs.get(2).copied(), op, out_shape, &cg, bbuf, kdim);
        }
        self.nchw_gemm(kb, a, r, node.inputs.get(2).copied(), op, out_shape, &cg, bbuf, kdim)
    }

    /// The GEMM loops shared by convolution and transposed convolution: `out[n][m][p] (+ epilogue of
    /// anchor `a` in root `r`'s kernel, none when `a == r`) = bias[m] + Σ_k A[m][k] · B[n][k][p]` with
    /// A packed in `cg.mr`-row panels and B the buffer `bbuf` ([N, K, P] row-major).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn nchw_gemm(&mut self, kb: &mut KB, a: NodeId, r: NodeId, bias: Option<ValueId>, op: u32, out_shape: &[usize], cg: &ConvGemm, bbuf: u32, kdim: usize) -> Vec<Stmt> {
        let av = self.g.node(a).outputs[0];
        let (nb, m) = (out_shape[0], out_shape[1]);
        let pn: usize = out_shape[2..].iter().product();
        let (mr, nr) = (cg.mr, cg.nr);
        // Row tiles: each group's own (`tpg` a group), in group order.
        let mg = m / cg.groups;
        let tpg = mg.div_ceil(mr);
        let tiles = cg.groups * tpg;
        let (full, tail) = (pn / nr, pn % nr);
        let by_rows = by_rows(mg, pn, tiles);
        // K chunks: a B chunk of ~16 KB read in place (P floats between rows), 32 KB when packed
        // (contiguous, so it still stays in L1 and the partial sums go through the output half as often).
        let packed = !by_rows && cg.groups == 1;
        let kc_max = ((if packed || cg.direct.is_some() { 32 } else { 16 }) * 1024 / (nr * 4)).max(16);
        let nch = kdim.div_ceil(kc_max);
        let kc = kdim.div_ceil(nch);
        // Blocks of row tiles: 8 (2, 4 and 8 threads get equal shares). A Direct convolution's block packs
        // every B chunk itself, so its blocks keep at least 8 tiles (64 output channels with AVX-512) to
        // share each packed chunk, in 2, 4 or 8 blocks: ResNet-50's 256-channel 3×3 layer at 14×14 went
        // from 8 blocks of 4 tiles to 4 of 8 and 13% less time (1 thread).
        let (nblocks, rb_tiles) = if by_rows {
            let want = if cg.direct.is_some() { 1usize << (usize::BITS - 1 - (tiles / 8).clamp(2, 8).leading_zeros()) } else { 8 };
            let rb = tiles.div_ceil(tiles.min(want));
            (tiles.div_ceil(rb), rb)
        } else {
            (1, tiles)
        };
        let np = if by_rows { nblocks } else { full + (tail > 0) as usize };
        let pieces = tail_pieces(full * nr, pn);
        // The output position is carried on the last spatial dim that is not 1 (the others 0): a flat
        // index that `linear` maps to the right offset for the output and every epilogue operand.
        let pdim = (2..out_shape.len()).rev().find(|&d| out_shape[d] != 1).unwrap_or(out_shape.len() - 1);
        let ap = kb.param(cg.apack, &self.buffers[cg.apack as usize].clone(), Access::Read);
        let bp = kb.param(bbuf, &self.buffers[bbuf as usize].clone(), Access::Read);
        if nch > 1 {
            // Partial sums are read back from the output.
            kb.params[op as usize].access = Access::ReadWrite;
        }
        let it = kb.var();
        let (nv, q) = if nb > 1 {
            (Expr::i(IOp::Div, Expr::Var(it), Expr::Int(np as i64)), Expr::i(IOp::Rem, Expr::Var(it), Expr::Int(np as i64)))
        } else {
            (Expr::Int(0), Expr::Var(it))
        };
        let direct = cg.direct.clone().map(|d| {
            assert_eq!(cg.groups, 1, "a Direct convolution is dense");
            let mp = kb.param(d.mask, &self.buffers[d.mask as usize].clone(), Access::Read);
            (d, mp, 0)
        });
        let t = Tiling { a, r, av, bias, op, out_shape, ap, bp, nv, kdim, pn, mr, nr, pdim, kc, nch, groups: cg.groups, tpg, mg, direct };
        let guard = |gt: &Expr, body: Vec<Stmt>| -> Vec<Stmt> {
            if nblocks * rb_tiles > tiles {
                vec![Stmt::If { cond: Expr::i(IOp::Lt, gt.clone(), Expr::Int(tiles as i64)), body }]
            } else {
                body
            }
        };
        let mut body = Vec::new();
        if by_rows {
            // A block of row tiles: every chunk of every panel sweeps the block's tiles.
            let blk = q.clone();
            // A Direct convolution packs each panel's chunk from x into the iteration's own scratch
            // `[kc][nr]` first (x is read, not an im2col copy K/C times its size; contiguous for the tiles).
            let scratch = t.direct.as_ref().map(|_| {
                let label = format!("{} (packed B chunks)", self.g.node(a).name);
                let sb = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: vec![nb * np, kc, nr], label }, None);
                let sp = kb.param(sb, &self.buffers[sb as usize].clone(), Access::ReadWrite);
                (sp, Expr::mul(Expr::Var(it), Expr::Int((kc * nr) as i64)))
            });
            body = self.conv_chunks(kb, &t, &mut |me, kb, k0, klen, first, last| {
                let mut v = Vec::new();
                let pack = |me: &mut Self, kb: &mut KB, p0: Expr, w: usize| -> Vec<Stmt> {
                    match (&t.direct, &scratch) {
                        (Some((d, mp, _)), Some((sp, sbase))) => vec![me.direct_pack(kb, &t, d, (*mp, 0), *sp, sbase, p0, 0, w, k0.clone(), klen)],
                        _ => Vec::new(),
                    }
                };
                if full > 0 {
                    let p = kb.var();
                    let tl = kb.var();
                    let gt = Expr::add(Expr::mul(blk.clone(), Expr::Int(rb_tiles as i64)), Expr::Var(tl));
                    let p0 = Expr::mul(Expr::Var(p), Expr::Int(nr as i64));
                    let mut pb = pack(me, kb, p0.clone(), nr);
                    let tb = me.conv_tile(kb, &t, gt.clone(), p0, nr, k0.clone(), klen, first, last, scratch.clone());
                    pb.push(Stmt::For { var: tl, extent: rb_tiles as i64, kind: LoopKind::Serial, body: guard(&gt, tb) });
                    v.push(Stmt::For { var: p, extent: full as i64, kind: LoopKind::Serial, body: pb });
                }
                for &(off, w) in &pieces {
                    let tl = kb.var();
                    let gt = Expr::add(Expr::mul(blk.clone(), Expr::Int(rb_tiles as i64)), Expr::Var(tl));
                    v.extend(pack(me, kb, Expr::Int(off as i64), w));
                    let tb = me.conv_tile(kb, &t, gt.clone(), Expr::Int(off as i64), w, k0.clone(), klen, first, last, scratch.clone());
                    v.push(Stmt::For { var: tl, extent: rb_tiles as i64, kind: LoopKind::Serial, body: guard(&gt, tb) });
                }
                v
            });
        } else if packed {
            return self.packed_positions(kb, &t, nb, full, &pieces);
        } else {
            // A panel of positions (the tail positions the last one): every chunk sweeps all tiles.
            let full_panel = vec![(Expr::mul(q.clone(), Expr::Int(nr as i64)), nr)];
            let tail_panel: Vec<(Expr, usize)> = pieces.iter().map(|&(off, w)| (Expr::Int(off as i64), w)).collect();
            for (cond, panel) in [
                (Expr::i(IOp::Lt, q.clone(), Expr::Int(full as i64)), full_panel),
                (Expr::i(IOp::Le, Expr::Int(full as i64), q.clone()), tail_panel),
            ] {
                if panel.is_empty() || (panel[0].1 == nr && full == 0) {
                    continue;
                }
                let chunks = self.conv_chunks(kb, &t, &mut |me, kb, k0, klen, first, last| {
                    let mut v = Vec::new();
                    for (cbase, width) in &panel {
                        let tl = kb.var();
                        let tb = me.conv_tile(kb, &t, Expr::Var(tl), cbase.clone(), *width, k0.clone(), klen, first, last, None);
                        v.push(Stmt::For { var: tl, extent: tiles as i64, kind: LoopKind::Serial, body: tb });
                    }
                    v
                });
                if full > 0 && tail > 0 {
                    body.push(Stmt::If { cond, body: chunks });
                } else {
                    body.extend(chunks);
                }
            }
        }
        vec![Stmt::For { var: it, extent: (nb * np) as i64, kind: LoopKind::Parallel, body }]
    }

    /// Positions mode with packed B (groups = 1): the units (image × position panel, the tail positions
    /// the last panel of an image) are dealt to [`SLOTS`] thread slots (the parallel loop) in contiguous
    /// runs, so 1, 2, 4 and 8 threads get equal shares within one unit. For each K chunk of a unit, its B chunk
    /// `[klen][width]` (rows of col, or of x itself, P floats apart: a page or more for large images)
    /// is copied into the slot's scratch `[kc][nr]`, contiguous and L1-resident, which every tile then
    /// reads: one strided row read per chunk instead of one per tile, so the micro-kernel's B loads
    /// stay within a few pages. A weight larger than [`A_L2`] turns the loops around: each K chunk
    /// sweeps all the slot's units, so the chunk's slice of the weight is read from L2, not streamed
    /// from memory once per unit (the partial sums wait in the output between chunks).
    fn packed_positions(&mut self, kb: &mut KB, t: &Tiling, nb: usize, full: usize, pieces: &[(usize, usize)]) -> Vec<Stmt> {
        let nr = t.nr;
        // The row-read form's unit is an output row, run as its pieces.
        let rows = t.direct.as_ref().and_then(|d| d.0.rows.clone());
        let np = rows.as_ref().map_or(full + (!pieces.is_empty()) as usize, |r| t.pn / r.ow);
        // Fewer panels than two a slot: the row tiles are cut in two blocks as well (each packs its own
        // copy of the panel's chunks), so two threads still get equal shares of an odd panel count.
        let tiles = t.groups * t.tpg;
        let tb = if nb * np < 2 * SLOTS && tiles >= 2 { 2 } else { 1 };
        let rbt = tiles.div_ceil(tb);
        let tb = tiles.div_ceil(rbt);
        let units = nb * np * tb;
        let slots = SLOTS.min(units);
        let label = format!("{} (packed B chunks)", self.g.node(t.a).name);
        let sb = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: vec![slots, t.kc, nr], label }, None);
        let sp = kb.param(sb, &self.buffers[sb as usize].clone(), Access::ReadWrite);
        let slot = kb.var();
        let sbase = Expr::mul(Expr::Var(slot), Expr::Int((t.kc * nr) as i64));
        let chunk_outer = t.kdim * t.mg * 4 > A_L2;
        // A Direct convolution prefetches the rows of x that the slot's next unit (the next panel, or
        // output row: s rows of x on) will pack: x is read in a pattern the hardware prefetcher does not
        // follow (a few lines of every channel per unit), and from a large image each first touch missed.
        let ahead = rows.as_ref().map_or(nr, |r| r.s * r.w) as i64;
        let t = &Tiling { direct: t.direct.clone().map(|(d, mp, _)| (d, mp, ahead)), ..t.clone() };
        // The slot's units (`slot_units`: contiguous runs), each running `f(tiling, q, first tile)` (q:
        // the panel within its image).
        let units_loop = |kb: &mut KB, f: &mut dyn FnMut(&mut KB, &Tiling, &Expr, &Expr) -> Vec<Stmt>| -> Vec<Stmt> {
            let (j, uv) = (kb.var(), kb.var());
            let (w, t0) = if tb > 1 { (Expr::i(IOp::Div, Expr::Var(uv), Expr::Int(tb as i64)), Expr::mul(Expr::i(IOp::Rem, Expr::Var(uv), Expr::Int(tb as i64)), Expr::Int(rbt as i64))) } else { (Expr::Var(uv), Expr::Int(0)) };
            let (nv, q) = if nb > 1 { (Expr::i(IOp::Div, w.clone(), Expr::Int(np as i64)), Expr::i(IOp::Rem, w, Expr::Int(np as i64))) } else { (Expr::Int(0), w) };
            let tu = Tiling { nv, ..t.clone() };
            let body = f(kb, &tu, &q, &t0);
            vec![slot_units(slot, (j, uv), units, slots, body)]
        };
        // The full panel q or the tail panel, each as (first position, offset in the panel, width) pieces
        // under the condition that it is the one (none where every unit runs it: an output row's pieces,
        // each a panel of its own, in the row-read form).
        let panels = |q: &Expr| -> Vec<(Option<Expr>, Vec<(Expr, usize, usize)>)> {
            let mut v = Vec::new();
            if let Some(r) = &rows {
                let row = Expr::mul(q.clone(), Expr::Int(r.ow as i64));
                return r.pieces(nr).into_iter().map(|(off, w)| (None, vec![(Expr::add(row.clone(), Expr::Int(off as i64)), 0, w)])).collect();
            }
            if full > 0 {
                v.push((Some(Expr::i(IOp::Lt, q.clone(), Expr::Int(full as i64))), vec![(Expr::mul(q.clone(), Expr::Int(nr as i64)), 0usize, nr)]));
            }
            if !pieces.is_empty() {
                v.push((Some(Expr::i(IOp::Le, Expr::Int(full as i64), q.clone())), pieces.iter().map(|&(off, w)| (Expr::Int((full * nr) as i64), off - full * nr, w)).collect()));
            }
            if v.len() == 1 {
                v[0].0 = None;
            }
            v
        };
        let guard = |cond: Option<Expr>, b: Vec<Stmt>| match cond {
            Some(cond) => vec![Stmt::If { cond, body: b }],
            None => b,
        };
        let body = if chunk_outer {
            self.conv_chunks(kb, t, &mut |me, kb, k0, klen, first, last| {
                units_loop(kb, &mut |kb, tu, q, t0| {
                    panels(q).into_iter().flat_map(|(cond, panel)| guard(cond, me.packed_chunk(kb, tu, &panel, sp, &sbase, (t0, rbt), k0.clone(), klen, first, last))).collect()
                })
            })
        } else {
            units_loop(kb, &mut |kb, tu, q, t0| {
                panels(q).into_iter().flat_map(|(cond, panel)| guard(cond, self.conv_chunks(kb, tu, &mut |me, kb, k0, klen, first, last| me.packed_chunk(kb, tu, &panel, sp, &sbase, (t0, rbt), k0, klen, first, last)))).collect()
            })
        };
        vec![Stmt::For { var: slot, extent: slots as i64, kind: LoopKind::Parallel, body }]
    }

    /// One K chunk of one unit with packed B: the copy `scratch[slot][kk][off + jj] = B[n][k0 + kk][p0 +
    /// off + jj]`, then the unit's `ntl` tiles from `t0` over it.
    #[allow(clippy::too_many_arguments)]
    fn packed_chunk(&mut self, kb: &mut KB, t: &Tiling, panel: &[(Expr, usize, usize)], sp: u32, sbase: &Expr, (t0, ntl): (&Expr, usize), k0: Expr, klen: usize, first: bool, last: bool) -> Vec<Stmt> {
        let nr = t.nr;
        let tiles = t.groups * t.tpg;
        let mut v = Vec::new();
        for (p0, off, w) in panel {
            if let Some((d, mp, ahead)) = &t.direct {
                v.push(self.direct_pack(kb, t, d, (*mp, *ahead), sp, sbase, Expr::add(p0.clone(), Expr::Int(*off as i64)), *off, *w, k0.clone(), klen));
                continue;
            }
            let (kk, jj) = (kb.var(), kb.var());
            let brow = Expr::add(Expr::mul(t.nv.clone(), Expr::Int(t.kdim as i64)), Expr::add(k0.clone(), Expr::Var(kk)));
            let src = Expr::add(Expr::mul(brow, Expr::Int(t.pn as i64)), Expr::add(p0.clone(), Expr::add(Expr::Int(*off as i64), Expr::Var(jj))));
            let dst = Expr::add(sbase.clone(), Expr::add(Expr::mul(Expr::Var(kk), Expr::Int(nr as i64)), Expr::add(Expr::Int(*off as i64), Expr::Var(jj))));
            let kind = if *w >= 2 { LoopKind::Vector(*w as u32) } else { LoopKind::Serial };
            let copy = Stmt::For { var: jj, extent: *w as i64, kind, body: vec![Stmt::Store { buf: sp, index: dst, value: Expr::load(t.bp, src.clone()) }] };
            // Each row first prefetches the same row a panel on (the slot's next unit, as `direct_pack`).
            let mut row: Vec<Stmt> = line_offsets(*w).map(|o| Stmt::Prefetch { buf: t.bp, index: subst_var(&src, jj, nr as i64 + o), far: true }).collect();
            row.push(copy);
            v.push(Stmt::For { var: kk, extent: klen as i64, kind: LoopKind::Serial, body: row });
        }
        for (p0, off, w) in panel {
            let tl = kb.var();
            let base = Expr::add(sbase.clone(), Expr::Int(*off as i64));
            let gt = Expr::add(t0.clone(), Expr::Var(tl));
            let mut tb = self.conv_tile(kb, t, gt.clone(), Expr::add(p0.clone(), Expr::Int(*off as i64)), *w, k0.clone(), klen, first, last, Some((sp, base)));
            if tiles % ntl != 0 {
                tb = vec![Stmt::If { cond: Expr::i(IOp::Lt, gt, Expr::Int(tiles as i64)), body: tb }];
            }
            v.push(Stmt::For { var: tl, extent: ntl as i64, kind: LoopKind::Serial, body: tb });
        }
        v
    }

    /// The copy of a `Direct` convolution's B chunk from x: `scratch[slot][kk][off + jj] = mask[tap][p +
    /// jj] > 0 ? x[n][c][p + jj + shift(tap)] : 0` for the `width` positions from `p`, with `(c, tap)` =
    /// `k0 + kk` split by the taps; each row first prefetches the same row `ahead` positions on (the
    /// slot's next unit). The rows whose span reaches before or past x (the first and last
    /// channels' padding rows) clamp each lane's index instead (the masked lanes' values are discarded).
    #[allow(clippy::too_many_arguments)]
    fn direct_pack(&mut self, kb: &mut KB, t: &Tiling, d: &Direct, (mp, ahead): (u32, i64), sp: u32, sbase: &Expr, p: Expr, off: usize, width: usize, k0: Expr, klen: usize) -> Stmt {
        let nr = t.nr;
        let total = (t.out_shape[0] * d.image()) as i64;
        let (kk, base, mrow) = (kb.var(), kb.var(), kb.var());
        let k = Expr::add(k0, Expr::Var(kk));
        let (c, tap) = (Expr::i(IOp::Div, k.clone(), Expr::Int(d.taps as i64)), Expr::i(IOp::Rem, k, Expr::Int(d.taps as i64)));
        let b = match (d.phases, &d.rows) {
            // Read by rows: the piece's first lane's element of x (`Rows::source`), lanes s apart.
            (None, Some(rw)) => rw.source(Expr::mul(Expr::add(Expr::mul(t.nv.clone(), Expr::Int(d.c as i64)), c), Expr::Int(d.hw as i64)), &tap, &p),
            // The first lane's element of x: (n·C + c)·HW + p + shift(tap) − shift(0, 0).
            (None, None) => {
                // Tap axis i's index: tap / (the inner axes' taps) % k_i (no division on the last axis, no
                // remainder on the first), times d·stride_i.
                let n = d.kdims.len();
                let shift = (0..n).map(|i| {
                    let inner: usize = d.kdims[i + 1..].iter().product();
                    let q = if i + 1 < n { Expr::i(IOp::Div, tap.clone(), Expr::Int(inner as i64)) } else { tap.clone() };
                    let q = if i > 0 { Expr::i(IOp::Rem, q, Expr::Int(d.kdims[i] as i64)) } else { q };
                    Expr::mul(q, Expr::Int((d.dil * d.xstrides[i]) as i64))
                }).reduce(Expr::add).expect("a spatial axis");
                let chan = Expr::add(Expr::mul(t.nv.clone(), Expr::Int(d.c as i64)), c);
                Expr::i(IOp::Sub, Expr::add(Expr::add(Expr::mul(chan, Expr::Int(d.hw as i64)), p.clone()), shift), Expr::Int(d.shift0))
            }
            // Of the phases: n·s²·C·⌈H/s⌉·OW + c·⌈H/s⌉·OW + p + offset(tap).
            (Some((_, tb)), _) => {
                let tp = kb.param(tb, &self.buffers[tb as usize].clone(), Access::Read);
                let off = Expr::ToIndex { from: DType::I64, x: Box::new(Expr::load(tp, tap.clone())) };
                Expr::add(Expr::add(Expr::add(Expr::mul(t.nv.clone(), Expr::Int(d.image() as i64)), Expr::mul(c, Expr::Int(d.hw as i64))), p.clone()), off)
            }
        };
        let ip = kb.param(d.inner, &self.buffers[d.inner as usize].clone(), Access::Read);
        let g = d.granule(nr);
        let q = Expr::add(Expr::mul(tap.clone(), Expr::Int(t.pn.div_ceil(g) as i64)), Expr::i(IOp::Div, p.clone(), Expr::Int(g as i64)));
        let whole = Expr::ToIndex { from: DType::I64, x: Box::new(Expr::load(ip, q)) };
        let mut body = vec![
            Stmt::Decl { var: base, dtype: DType::I64, init: b },
            Stmt::Decl { var: mrow, dtype: DType::I64, init: Expr::add(Expr::mul(tap, Expr::Int(t.pn as i64)), p) },
        ];
        // Lane l reads x at base + s·l (s = 1 but in the row-read form).
        let s = d.rows.as_ref().map_or(1, |r| r.s as i64);
        let lane = |jj: Expr| Expr::add(Expr::Var(base), if s == 1 { jj } else { Expr::mul(jj, Expr::Int(s)) });
        let span = s * (width as i64 - 1) + 1;
        if ahead > 0 {
            body.extend(line_offsets(span as usize).map(|o| Stmt::Prefetch { buf: t.bp, index: Expr::add(Expr::Var(base), Expr::Int(ahead + o)), far: true }));
        }
        let dst = |jj: Expr| Expr::add(sbase.clone(), Expr::add(Expr::mul(Expr::Var(kk), Expr::Int(nr as i64)), Expr::add(Expr::Int(off as i64), jj)));
        // A panel wholly inside for this tap: a plain copy.
        let jw = kb.var();
        let kind = LoopKind::run(width as u32);
        let plain = Stmt::For { var: jw, extent: width as i64, kind, body: vec![Stmt::Store { buf: sp, index: dst(Expr::Var(jw)), value: Expr::load(t.bp, lane(Expr::Var(jw))) }] };
        body.push(Stmt::If { cond: Expr::i(IOp::Lt, Expr::Int(0), whole.clone()), body: vec![plain] });
        let masked = Expr::i(IOp::Eq, whole, Expr::Int(0));
        let inside = Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(0), Expr::Var(base)), Expr::i(IOp::Le, Expr::add(Expr::Var(base), Expr::Int(span)), Expr::Int(total)));
        for (cond, clamped) in [(Expr::i(IOp::And, masked.clone(), inside.clone()), false), (Expr::i(IOp::And, masked.clone(), Expr::i(IOp::Eq, inside, Expr::Int(0))), true)] {
            let jj = kb.var();
            let mut xi = lane(Expr::Var(jj));
            if clamped {
                xi = clamp(xi, 0, total - 1);
            }
            let keep = Expr::Bin(BinaryOp::Gt, DType::F32, Box::new(Expr::load(mp, Expr::add(Expr::Var(mrow), Expr::Var(jj)))), Box::new(lit(0.0, DType::F32)));
            let val = Expr::Select(Box::new(keep), Box::new(Expr::load(t.bp, xi)), Box::new(lit(0.0, DType::F32)));
            let kind = LoopKind::run(width as u32);
            let copy = Stmt::For { var: jj, extent: width as i64, kind, body: vec![Stmt::Store { buf: sp, index: dst(Expr::Var(jj)), value: val }] };
            body.push(Stmt::If { cond, body: vec![copy] });
        }
        Stmt::For { var: kk, extent: klen as i64, kind: LoopKind::Serial, body }
    }

    /// The K chunks of convolution tiling `t` (see [`Planner::k_chunks`]).
    #[allow(clippy::type_complexity)]
    fn conv_chunks(&mut self, kb: &mut KB, t: &Tiling, f: &mut dyn FnMut(&mut Self, &mut KB, Expr, usize, bool, bool) -> Vec<Stmt>) -> Vec<Stmt> {
        self.k_chunks(kb, (t.kdim, t.kc, t.nch), f)
    }

    /// The `nch` chunks of `kc` of K = `kdim` in order: `f(k0, length, first, last)` for the first, the
    /// middle ones (one serial loop) and the last.
    #[allow(clippy::type_complexity)]
    pub(super) fn k_chunks(&mut self, kb: &mut KB, (kdim, kc, nch): (usize, usize, usize), f: &mut dyn FnMut(&mut Self, &mut KB, Expr, usize, bool, bool) -> Vec<Stmt>) -> Vec<Stmt> {
        if nch == 1 {
            return f(self, kb, Expr::Int(0), kdim, true, true);
        }
        let mut v = f(self, kb, Expr::Int(0), kc, true, false);
        if nch > 2 {
            let c = kb.var();
            // Chunks 1 ..= nch − 2.
            let body = f(self, kb, Expr::mul(Expr::add(Expr::Var(c), Expr::Int(1)), Expr::Int(kc as i64)), kc, false, false);
            v.push(Stmt::For { var: c, extent: nch as i64 - 2, kind: LoopKind::Serial, body });
        }
        let k0 = (nch - 1) * kc;
        v.extend(f(self, kb, Expr::Int(k0 as i64), kdim - k0, false, true));
        v
    }

    /// One tile: `mr` output channels from tile `gt` × `width` positions from `cbase`, over K
    /// `k0 .. k0 + klen`; the accumulators start from the bias (`first`) or the stored partial sums, and
    /// the epilogue is applied when `last`.
    #[allow(clippy::too_many_arguments)]
    /// With `packed` = (scratch param, the panel's first element there), B is read from the packed
    /// chunk `[klen][nr]` (the tile's columns at `cbase` minus the panel's first position).
    pub(super) fn conv_tile(&mut self, kb: &mut KB, t: &Tiling, gt: Expr, cbase: Expr, width: usize, k0: Expr, klen: usize, first: bool, last: bool, packed: Option<(u32, Expr)>) -> Vec<Stmt> {
        let (mr, kdim, pn) = (t.mr, t.kdim as i64, t.pn as i64);
        if width == 1 && mr >= 4 {
            return self.conv_column(kb, t, gt, cbase, k0, klen, first, last, packed);
        }
        let jv = kb.var();
        let kv = kb.var();
        let accs: Vec<_> = (0..mr).map(|_| kb.var()).collect();
        let colx = Expr::add(cbase, Expr::Var(jv));
        let kx = Expr::add(k0, Expr::Var(kv));
        // Group g's output rows g·mg + (local tile)·mr + i and B rows g·kdim + k of the image's groups·kdim.
        let (grp, lt) = if t.groups == 1 { (Expr::Int(0), gt.clone()) } else { (Expr::i(IOp::Div, gt.clone(), Expr::Int(t.tpg as i64)), Expr::i(IOp::Rem, gt.clone(), Expr::Int(t.tpg as i64))) };
        let brow = Expr::add(Expr::mul(Expr::add(Expr::mul(t.nv.clone(), Expr::Int(t.groups as i64)), grp.clone()), Expr::Int(kdim)), kx.clone());
        let mut inner = Vec::new();
        // The next row tile's weight lines at this k, into L2: ~a tile's time before it reads them.
        // Packed per tile ([tiles][K][mr]), a K chunk of the weight is a short run per tile, a page or
        // more from the next tile's, which the hardware prefetcher does not follow; and a whole model
        // streams every weight from memory once per call (ResNet-50: 100 MB), where one layer timed
        // alone finds it in cache. One prefetch per k step (24 bytes of an mr = 6 tile, so ~2.7 per
        // line) costs a load-port slot of the FMA-bound loop. Measured over whole models, one thread,
        // `ab.py` (this against none, ORT in the same rounds): ResNet-50 batch 1 0.90× / 0.95× (two
        // runs), batch 8 0.94×; Inception v2 0.93×, v1 0.93×, VGG-19 0.92×, EfficientNet-like 0.93×,
        // AlexNet 0.97×, SqueezeNet, DenseNet-121, MobileNet-like 0.98×, ShuffleNet 0.99×, ZFNet
        // 1.01×; into L1 instead 0.93–0.98×, two or four tiles ahead no better than one.
        let ahead = Expr::mul(Expr::add(Expr::mul(Expr::add(gt.clone(), Expr::Int(1)), Expr::Int(kdim)), kx.clone()), Expr::Int(mr as i64));
        inner.push(Stmt::Prefetch { buf: t.ap, index: ahead, far: true });
        for (i, &acc) in accs.iter().enumerate() {
            let ai = Expr::add(Expr::mul(Expr::add(Expr::mul(gt.clone(), Expr::Int(kdim)), kx.clone()), Expr::Int(mr as i64)), Expr::Int(i as i64));
            let bl = match &packed {
                Some((sp, base)) => Expr::load(*sp, Expr::add(base.clone(), Expr::add(Expr::mul(Expr::Var(kv), Expr::Int(t.nr as i64)), Expr::Var(jv)))),
                None => Expr::load(t.bp, Expr::add(Expr::mul(brow.clone(), Expr::Int(pn)), colx.clone())),
            };
            let prod = Expr::Bin(BinaryOp::Mul, DType::F32, Box::new(Expr::load(t.ap, ai)), Box::new(bl));
            inner.push(Stmt::Assign { var: acc, value: Expr::Bin(BinaryOp::Add, DType::F32, Box::new(Expr::Var(acc)), Box::new(prod)) });
        }
        let rows: Vec<Expr> = (0..mr).map(|i| Expr::add(Expr::mul(grp.clone(), Expr::Int(t.mg as i64)), clamp(Expr::add(Expr::mul(lt.clone(), Expr::Int(mr as i64)), Expr::Int(i as i64)), 0, t.mg as i64 - 1))).collect();
        let idx = |i: usize| {
            let mut idx = vec![Expr::Int(0); t.out_shape.len()];
            idx[0] = t.nv.clone();
            idx[1] = rows[i].clone();
            idx[t.pdim] = colx.clone();
            idx
        };
        let mut vbody = Vec::new();
        for (i, &acc) in accs.iter().enumerate() {
            let init = match (first, t.bias) {
                (false, _) => Expr::load(t.op, linear(&idx(i), t.out_shape)),
                (true, Some(b)) => self.elem(kb, b, &[rows[i].clone()]),
                (true, None) => lit(0.0, DType::F32),
            };
            vbody.push(Stmt::Decl { var: acc, dtype: DType::F32, init });
        }
        vbody.push(Stmt::For { var: kv, extent: klen as i64, kind: LoopKind::Serial, body: inner });
        for (i, &acc) in accs.iter().enumerate() {
            let ix = idx(i);
            let v = self.conv_epilogue(kb, (t.a, t.r, t.av), acc, &ix, last);
            vbody.push(Stmt::Store { buf: t.op, index: linear(&ix, t.out_shape), value: v });
        }
        let kind = LoopKind::run(width as u32);
        let mut out = if (first || last) && t.groups == 1 { self.epilogue_prefetch(kb, t, &lt, &colx, jv, width, first, last) } else { Vec::new() };
        out.push(Stmt::For { var: jv, extent: width as i64, kind, body: vbody });
        out
    }

    /// Prefetches of the output lines and the epilogue operands' lines (a residual, …) that the next row
    /// tile (same positions) will store and read: in NCHW a tile's rows are a plane apart, a stream
    /// each, more than the hardware prefetcher follows. Measured over whole models (one thread,
    /// interleaved in one process, with the B-row prefetches of `packed_chunk`): SqueezeNet batch 8 −4%,
    /// MobileNet-like batch 8 −4%, ResNet-50 batch 8 −2%, batch 1 −1%; Inception v2 unchanged.
    /// These and the B-row prefetches are `far` (into L2, `prefetcht1`): a whole tile's or unit's traffic
    /// passes before the line is used, and into L1 they evicted the B chunk and A lines the tile was
    /// still reading — one layer at a time (one thread, `ab.py`, in turn in one process) 512 → 128 1×1
    /// at 28² 0.96× the time of L1 prefetches, 256 → 64 1×1 at 56² 0.97×, the 7×7 stride-2 stem 0.93×,
    /// 64 → 256 1×1 at 56² unchanged. The output lines are prefetched in the first K chunk (`output`),
    /// whose partial-sum stores touch them first — a 3.2 MB output missed on every store, one layer at a
    /// time the 7×7 stride-2 stem 0.90× the time of prefetching them in the last chunk (1×1 layers whose
    /// output stays in L2 between calls unchanged) —, the epilogue operands' in the last (`operands`).
    #[allow(clippy::too_many_arguments)]
    fn epilogue_prefetch(&mut self, kb: &mut KB, t: &Tiling, lt: &Expr, colx: &Expr, jv: rlx_ir::loops::Var, width: usize, output: bool, operands: bool) -> Vec<Stmt> {
        if width < 16 {
            return Vec::new();
        }
        let dummy = kb.var();
        let mut v = Vec::new();
        for i in 0..t.mr {
            let row = clamp(Expr::add(Expr::mul(Expr::add(lt.clone(), Expr::Int(1)), Expr::Int(t.mr as i64)), Expr::Int(i as i64)), 0, t.mg as i64 - 1);
            for c in line_offsets(width) {
                let mut idx = vec![Expr::Int(0); t.out_shape.len()];
                idx[0] = t.nv.clone();
                idx[1] = row.clone();
                idx[t.pdim] = subst_var(colx, jv, c);
                if output {
                    v.push(Stmt::Prefetch { buf: t.op, index: linear(&idx, t.out_shape), far: true });
                }
                if !operands {
                    continue;
                }
                let e = self.conv_epilogue(kb, (t.a, t.r, t.av), dummy, &idx, true);
                let mut loads = Vec::new();
                loads_of(&e, &mut loads);
                for (b, ix) in loads {
                    if b != t.op && !v.iter().any(|s| matches!(s, Stmt::Prefetch { buf, index, .. } if *buf == b && *index == ix)) {
                        v.push(Stmt::Prefetch { buf: b, index: ix, far: true });
                    }
                }
            }
        }
        v
    }
}

/// The offsets of a run of `width` f32s that touch each of its cache lines, wherever the run starts
/// (every 16th, and the last).
fn line_offsets(width: usize) -> impl Iterator<Item = i64> {
    let last = width as i64 - 1;
    (0..width as i64).step_by(16).chain((last % 16 != 0).then_some(last))
}

/// `e` with loop index `v` replaced by the constant `c`.
fn subst_var(e: &Expr, v: rlx_ir::loops::Var, c: i64) -> Expr {
    map_vars(e, &|x| if x == v { Expr::Int(c) } else { Expr::Var(x) })
}

impl Planner<'_> {
    /// The value a convolution tile stores for accumulator `acc` at output index `idx`: on the last K
    /// chunk the fused epilogue of anchor `a` in root `r`'s kernel (the chain with `a`'s value `av`
    /// substituted by the accumulator), else the accumulator itself (a partial sum).
    pub(super) fn conv_epilogue(&mut self, kb: &mut KB, (a, r, av): (NodeId, NodeId, ValueId), acc: rlx_ir::loops::Var, idx: &[Expr], last: bool) -> Expr {
        if !last || a == r {
            return Expr::Var(acc);
        }
        kb.subst.insert(av, Expr::Var(acc));
        let v = self.node_expr(kb, r, idx);
        kb.subst.remove(&av);
        v
    }

    /// A tile one position wide (the last of an odd position count): the vector runs over the tile's
    /// `mr` rows instead, four accumulators over interleaved k steps, each k step one load of the packed
    /// weight's `mr` contiguous values times the broadcast B element. (As `mr` scalar accumulators the k loop was vectorized by
    /// LLVM into gathers of B and shuffles of A, with spills: 13% of a 512-channel layer at 7×7 for 1
    /// of its 49 positions; with 6-row tiles, scalar, the last of 13² positions cost as much as 8 — the
    /// vector of 6 is split into 4 + 2 by LLVM: SqueezeNet's 1000-channel 13² layer 4% faster.) The stores
    /// and the bias and epilogue operands are per row.
    #[allow(clippy::too_many_arguments)]
    fn conv_column(&mut self, kb: &mut KB, t: &Tiling, gt: Expr, col: Expr, k0: Expr, klen: usize, first: bool, last: bool, packed: Option<(u32, Expr)>) -> Vec<Stmt> {
        // A group's last tile runs only its rows short of the group's channels: a lane clamped onto the
        // last channel would reread, after its twin's store, the partial sum it is adding to (the lanes of
        // a vector loop are independent, and a writer may run them one after the other).
        let short = t.mg % t.mr;
        let tile = |me: &mut Self, kb: &mut KB, lanes: usize| me.column_rows(kb, t, gt.clone(), col.clone(), k0.clone(), klen, first, last, packed.clone(), lanes);
        if short == 0 {
            return tile(self, kb, t.mr);
        }
        let lt = if t.groups == 1 { gt.clone() } else { Expr::i(IOp::Rem, gt.clone(), Expr::Int(t.tpg as i64)) };
        let last_tile = Expr::i(IOp::Eq, lt, Expr::Int(t.tpg as i64 - 1));
        vec![
            Stmt::If { cond: Expr::i(IOp::Eq, last_tile.clone(), Expr::Int(0)), body: tile(self, kb, t.mr) },
            Stmt::If { cond: last_tile, body: tile(self, kb, short) },
        ]
    }

    /// [`Self::conv_column`]'s tile over its first `lanes` rows.
    #[allow(clippy::too_many_arguments)]
    fn column_rows(&mut self, kb: &mut KB, t: &Tiling, gt: Expr, col: Expr, k0: Expr, klen: usize, first: bool, last: bool, packed: Option<(u32, Expr)>, lanes: usize) -> Vec<Stmt> {
        let (mr, kdim) = (t.mr, t.kdim as i64);
        let (iv, kv, kr, acc) = (kb.var(), kb.var(), kb.var(), kb.var());
        let (grp, lt) = if t.groups == 1 { (Expr::Int(0), gt.clone()) } else { (Expr::i(IOp::Div, gt.clone(), Expr::Int(t.tpg as i64)), Expr::i(IOp::Rem, gt.clone(), Expr::Int(t.tpg as i64))) };
        // `acc += A[k0 + kl] · B[k0 + kl]` (kl: the k step within the chunk).
        let step = |acc: rlx_ir::loops::Var, kl: Expr| {
            let kx = Expr::add(k0.clone(), kl.clone());
            let ai = Expr::add(Expr::mul(Expr::add(Expr::mul(gt.clone(), Expr::Int(kdim)), kx.clone()), Expr::Int(mr as i64)), Expr::Var(iv));
            let bl = match &packed {
                Some((sp, base)) => Expr::load(*sp, Expr::add(base.clone(), Expr::mul(kl, Expr::Int(t.nr as i64)))),
                None => {
                    let brow = Expr::add(Expr::mul(Expr::add(Expr::mul(t.nv.clone(), Expr::Int(t.groups as i64)), grp.clone()), Expr::Int(kdim)), kx);
                    Expr::load(t.bp, Expr::add(Expr::mul(brow, Expr::Int(t.pn as i64)), col.clone()))
                }
            };
            let prod = Expr::Bin(BinaryOp::Mul, DType::F32, Box::new(Expr::load(t.ap, ai)), Box::new(bl));
            Stmt::Assign { var: acc, value: Expr::Bin(BinaryOp::Add, DType::F32, Box::new(Expr::Var(acc)), Box::new(prod)) }
        };
        // Four partial sums over interleaved k steps, so the FMAs do not wait on one another (one
        // accumulator ran at the FMA's latency: a quarter of the throughput).
        const U: usize = 4;
        let parts: Vec<_> = (0..U).map(|_| kb.var()).collect();
        let unrolled: Vec<Stmt> = parts.iter().enumerate().map(|(u, &pa)| step(pa, Expr::add(Expr::mul(Expr::Var(kv), Expr::Int(U as i64)), Expr::Int(u as i64)))).collect();
        let rest = step(parts[0], Expr::add(Expr::Int((klen / U * U) as i64), Expr::Var(kr)));
        let row = Expr::add(Expr::mul(grp, Expr::Int(t.mg as i64)), clamp(Expr::add(Expr::mul(lt, Expr::Int(mr as i64)), Expr::Var(iv)), 0, t.mg as i64 - 1));
        let mut idx = vec![Expr::Int(0); t.out_shape.len()];
        idx[0] = t.nv.clone();
        idx[1] = row.clone();
        idx[t.pdim] = col;
        let init = match (first, t.bias) {
            (false, _) => Expr::load(t.op, linear(&idx, t.out_shape)),
            (true, Some(b)) => self.elem(kb, b, &[row]),
            (true, None) => lit(0.0, DType::F32),
        };
        let v = self.conv_epilogue(kb, (t.a, t.r, t.av), acc, &idx, last);
        let f32s = |a: Expr, b: Expr| Expr::Bin(BinaryOp::Add, DType::F32, Box::new(a), Box::new(b));
        let mut body: Vec<Stmt> = parts.iter().enumerate().map(|(u, &pa)| Stmt::Decl { var: pa, dtype: DType::F32, init: if u == 0 { init.clone() } else { lit(0.0, DType::F32) } }).collect();
        if klen >= U {
            body.push(Stmt::For { var: kv, extent: (klen / U) as i64, kind: LoopKind::Serial, body: unrolled });
        }
        if klen % U > 0 {
            body.push(Stmt::For { var: kr, extent: (klen % U) as i64, kind: LoopKind::Serial, body: vec![rest] });
        }
        let pv = |u: usize| Expr::Var(parts[u]);
        body.push(Stmt::Decl { var: acc, dtype: DType::F32, init: f32s(f32s(pv(0), pv(1)), f32s(pv(2), pv(3))) });
        body.push(Stmt::Store { buf: t.op, index: linear(&idx, t.out_shape), value: v });
        let kind = LoopKind::run(lanes as u32);
        vec![Stmt::For { var: iv, extent: lanes as i64, kind, body }]
    }
}

/// What every tile of one convolution's GEMM kernel shares.
#[derive(Clone)]
pub(super) struct Tiling<'a> {
    pub(super) a: NodeId,
    pub(super) r: NodeId,
    pub(super) av: ValueId,
    pub(super) bias: Option<ValueId>,
    pub(super) op: u32,
    pub(super) out_shape: &'a [usize],
    pub(super) ap: u32,
    pub(super) bp: u32,
    /// The image index.
    pub(super) nv: Expr,
    pub(super) kdim: usize,
    pub(super) pn: usize,
    pub(super) mr: usize,
    /// Lanes of a full panel of positions.
    pub(super) nr: usize,
    pub(super) pdim: usize,
    pub(super) kc: usize,
    pub(super) nch: usize,
    pub(super) groups: usize,
    /// Row tiles per group.
    pub(super) tpg: usize,
    /// Output channels per group.
    pub(super) mg: usize,
    /// A `Direct` convolution, its mask's param and the prefetch distance (positions: the slot's next
    /// unit's panel): B chunks packed from x.
    pub(super) direct: Option<(Direct, u32, i64)>,
}

/// `Direct::inner` of mask `[KH·KW, P]` for panels of `nr` positions.
fn inner_panels(mask: &ConstData, nr: usize) -> ConstData {
    let (taps, p) = (mask.shape[0], mask.shape[1]);
    let np = p.div_ceil(nr);
    let m = mask.data.bytes();
    let one = |i: usize| m[4 * i..4 * i + 4] != [0u8; 4];
    let mut v = Vec::with_capacity(taps * np * 8);
    for t in 0..taps {
        for q in 0..np {
            let all = (q * nr..((q + 1) * nr).min(p)).all(|j| one(t * p + j));
            v.extend_from_slice(&(all as i64).to_le_bytes());
        }
    }
    ConstData { dtype: DType::I64, shape: vec![taps, np], data: rlx_ir::Blob::from_vec(v) }
}

/// The mask of a `Direct` convolution: `[taps, positions]` f32 (2-D: `[KH·KW, OH·OW]`), 1.0 where the tap
/// of the output position reads inside the input along every spatial axis (0 ≤ s·o + d·k − pad < in),
/// else 0.0. `kd`, `xd`, `od`: the kernel's, input's and output's spatial dims; `pads` their leading pads.
fn window_mask(kd: &[usize], xd: &[usize], od: &[usize], (s, d): (usize, usize), pads: &[usize]) -> ConstData {
    let (taps, pn): (usize, usize) = (kd.iter().product(), od.iter().product());
    // Row-major multi-index of flat `f` over `dims`.
    let split = |mut f: usize, dims: &[usize]| -> Vec<usize> {
        let mut ix = vec![0; dims.len()];
        for (i, &n) in dims.iter().enumerate().rev() {
            ix[i] = f % n;
            f /= n;
        }
        ix
    };
    let mut v = Vec::with_capacity(taps * pn * 4);
    for t in 0..taps {
        let k = split(t, kd);
        for q in 0..pn {
            let o = split(q, od);
            let inside = (0..kd.len()).all(|i| (s * o[i] + d * k[i]).checked_sub(pads[i]).is_some_and(|x| x < xd[i]));
            v.extend_from_slice(&(if inside { 1.0f32 } else { 0.0 }).to_le_bytes());
        }
    }
    ConstData { dtype: DType::F32, shape: vec![taps, pn], data: rlx_ir::Blob::from_vec(v) }
}

/// A float weight `[M, …]` (rows of K elements) packed in panels of `mr` rows per group of `M / groups`
/// rows: `packed[g·T + t][k][i] = w[g·(M / groups) + min(t·mr + i, M / groups − 1)][k]` with `T` the
/// tiles per group (a group's last panel's extra rows repeat the group's last row).
pub(super) fn pack_rows(c: &ConstData, mr: usize, groups: usize) -> ConstData {
    let mg = c.shape[0] / groups;
    let es = c.dtype.size().unwrap_or(1);
    let k: usize = c.shape[1..].iter().product();
    let tpg = mg.div_ceil(mr);
    let tiles = groups * tpg;
    let src = c.data.bytes();
    let mut t = vec![0u8; tiles * k * mr * es];
    for tt in 0..tiles {
        for i in 0..mr {
            let row = tt / tpg * mg + (tt % tpg * mr + i).min(mg - 1);
            for kk in 0..k {
                let s = (row * k + kk) * es;
                let d = ((tt * k + kk) * mr + i) * es;
                t[d..d + es].copy_from_slice(&src[s..s + es]);
            }
        }
    }
    ConstData { dtype: c.dtype, shape: vec![tiles, k, mr], data: rlx_ir::Blob::from_vec(t) }
}
