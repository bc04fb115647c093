//! Window kernels: 2-D pools and grouped / depthwise convolutions (NCHW) as one parallel loop over
//! (batch ×) channels, a serial loop over output rows, and each row cut into three column ranges — the
//! left border, the interior (every tap along the width inside the input) and the right border. The
//! interior is a `vector(lanes)` loop over output columns: at stride 1 its input loads are unit-stride
//! vector loads, at stride 2 two overlapping vector loads and one two-source shuffle (the LLVM writer); padding checks stay out
//! of it (the kernel row's bounds are one condition on the row alone). The interior's remainder is one
//! more vector ending at its last column (overlapping the previous one: those columns are stored twice,
//! with the same values). Up to 8 border columns on each side are unrolled, each summing only the
//! kernel columns inside the input (known at compile time: no check per tap); more, and interiors
//! narrower than 4 columns, use the per-element bodies. With several input channels per group, 4 to 8 output channels of a group are computed per
//! iteration, sharing each input load. The epilogue (bias, activation…) is
//! applied to every accumulator before its store, as in the per-element form. Channels are the
//! parallel loop, so threads split channels. A stride-1 "same" grouped convolution over rows narrower
//! than two vectors runs its interior rows as one flat loop over positions instead (`depthwise.rs`'s
//! plane form). The planner enables these kernels with
//! [`PlanOptions::window_lanes`](super::PlanOptions::window_lanes) (the CPU targets).

use super::fuse::Role;
use super::index::linear;
use super::kernel::KB;
use super::Planner;
use rlx_ir::loops::{Expr, IOp, LoopKind, Stmt};
use rlx_ir::{DType, MirOp, NodeId, OpSet, UnaryOp};

impl Planner<'_> {
    /// A float 2-D pool, or a float 2-D convolution with groups > 1, when window kernels are on.
    pub(super) fn is_window(&self, a: NodeId) -> bool {
        let n = self.g.node(a);
        let out = n.outputs[0];
        if self.lanes < 4 || self.dt(out) != DType::F32 || self.shape(out).len() != 4 {
            return false;
        }
        match &n.op {
            MirOp::Pool { .. } => true,
            MirOp::Conv { groups, .. } => *groups > 1 && n.inputs.iter().all(|&i| self.dt(i) == DType::F32),
            _ => false,
        }
    }

    /// The window kernel of anchor `a` with epilogue root `r`, storing into parameter `op`.
    pub(super) fn window_body(&mut self, kb: &mut KB, a: NodeId, r: NodeId, op: u32, out_shape: &[usize]) -> Vec<Stmt> {
        let anode = self.g.node(a).clone();
        let (nb, ch, oh, ow) = (out_shape[0], out_shape[1], out_shape[2], out_shape[3]);
        let w = self.shape(anode.inputs[0])[3] as i64;
        let (s, p, d, k) = match &anode.op {
            MirOp::Pool { kernel, strides, pads, dilations, .. } => (strides[1], pads[1], dilations[1], kernel[1]),
            MirOp::Conv { strides, pads, dilations, .. } => (strides[1], pads[1], dilations[1], self.shape(anode.inputs[1])[3]),
            other => unreachable!("window_body on {}", other.kind()),
        };
        let (s, p, d, k) = (s as i64, p as i64, d as i64, k as i64);
        let (lo, hi) = interior_columns(w, ow as i64, s, p, d, k);
        let mut lanes = self.lanes as i64;
        while lanes > 4 && hi - lo < lanes {
            lanes /= 2;
        }
        let nv = if hi - lo >= lanes { (hi - lo) / lanes * lanes } else { 0 };
        // The interior's remainder: one more vector ending at its last column, overlapping the one
        // before (the overlapped columns are written twice with the same values).
        let over = nv > 0 && nv < hi - lo;
        let rest = if over { hi } else { lo + nv };
        // Output channels per iteration: with several input channels per group, a block of `rb` of the
        // group's output channels shares each input load (4–8, the fewest wasted channels, then the
        // most; a group's last block repeats its last channel, storing identical values). Pools and
        // depthwise convolutions: 1.
        let (mg, rb) = match &anode.op {
            MirOp::Conv { groups, .. } => {
                let sw = self.shape(anode.inputs[1]);
                let mg = sw[0] / groups;
                let rb = if sw[1] < 2 || mg < 4 { 1 } else { (4..=8.min(mg)).min_by_key(|&b| (mg.div_ceil(b) * b - mg, usize::MAX - b)).unwrap_or(1) };
                (mg, rb)
            }
            _ => (1, 1),
        };
        let per_group = mg.div_ceil(rb);
        let blocks = ch / mg * per_group;
        let nc = kb.var();
        let (ni, blk) = if nb == 1 {
            (Expr::Int(0), Expr::Var(nc))
        } else {
            (Expr::i(IOp::Div, Expr::Var(nc), Expr::Int(blocks as i64)), Expr::i(IOp::Rem, Expr::Var(nc), Expr::Int(blocks as i64)))
        };
        // The block's first channel: group · mg + (block in group) · rb; channel r clamped to the group's last.
        let (grp, inb) = if per_group == 1 { (blk.clone(), Expr::Int(0)) } else { (Expr::i(IOp::Div, blk.clone(), Expr::Int(per_group as i64)), Expr::i(IOp::Rem, blk.clone(), Expr::Int(per_group as i64))) };
        let gfirst = Expr::mul(grp, Expr::Int(mg as i64));
        let c0 = Expr::add(gfirst.clone(), Expr::mul(inb, Expr::Int(rb as i64)));
        let glast = Expr::add(gfirst, Expr::Int(mg as i64 - 1));
        let chan = |r: Expr| if mg % rb == 0 { Expr::add(c0.clone(), r) } else { Expr::i(IOp::Min, Expr::add(c0.clone(), r), glast.clone()) };
        let count_pad = matches!(&anode.op, MirOp::Pool { count_include_pad: true, .. });
        // The right padding (for an average pool counting it).
        let pad_end = match &anode.op {
            MirOp::Pool { pads, .. } => pads[3] as i64,
            _ => p,
        };
        let chans: Vec<Expr> = (0..rb).map(|i| chan(Expr::Int(i as i64))).collect();
        let glast = (mg % rb != 0).then_some(glast);
        let plane = self.plane_rows(a, r, out_shape);
        let staged = plane.is_none() && a != r && self.transcendental_epilogue(a);
        if staged {
            kb.params[op as usize].access = rlx_ir::loops::Access::ReadWrite;
        }
        let win = Win { a, r, op, ni, c0, chans, glast, rb, w, s, p, d, k, lo, hi, nv, over, rest, lanes, pad_end, count_pad, staged };
        let body = match plane {
            // The plane form: the output rows whose row taps are all inside the input as one flat
            // vector loop over their positions (`plane_body`), then the rows above and below them by
            // rows, and the two border columns the flat range leaves out.
            Some((top, bottom)) => {
                let oh = oh as i64;
                let mut body = Vec::new();
                // (first row, rows, borders only?)
                let mut parts = vec![(0, top, false), (top, 1, true)];
                if oh - bottom - 1 > top {
                    parts.push((oh - bottom - 1, 1, true));
                }
                parts.push((oh - bottom, bottom, false));
                body.extend(self.plane_body(kb, &anode, &win, out_shape, top, bottom));
                for (first, count, borders_only) in parts {
                    if count <= 0 {
                        continue;
                    }
                    let row = kb.var();
                    let cols = self.window_row(kb, &anode, &win, out_shape, Expr::add(Expr::Int(first), Expr::Var(row)), borders_only);
                    body.push(Stmt::For { var: row, extent: count, kind: LoopKind::Serial, body: cols });
                }
                body
            }
            None => {
                let row = kb.var();
                let mut cols = self.window_row(kb, &anode, &win, out_shape, Expr::Var(row), false);
                if staged {
                    cols.extend(self.epilogue_pass(kb, &win, out_shape, Expr::Var(row)));
                }
                vec![Stmt::For { var: row, extent: oh as i64, kind: LoopKind::Serial, body: cols }]
            }
        };
        vec![Stmt::For { var: nc, extent: (nb * blocks) as i64, kind: LoopKind::Parallel, body }]
    }

    /// One output row `row` of a window kernel: its left border, interior and right border (only
    /// the borders, the columns not in the vector loops, with `borders_only`).
    fn window_row(&mut self, kb: &mut KB, anode: &rlx_ir::Node<MirOp>, win: &Win, out_shape: &[usize], row: Expr, borders_only: bool) -> Vec<Stmt> {
        let Win { ref ni, ref c0, ref chans, ref glast, rb, w, s, p, d, k, lo, hi, nv, over, rest, lanes, pad_end, count_pad, .. } = *win;
        let av = anode.outputs[0];
        let ow = out_shape[3] as i64;
        let mut cols = Vec::new();
        // Kernel columns inside the input at output column c (and, for an average pool counting the
        // padding, inside the padding).
        let inside = |c: i64, lo_in: i64, hi_in: i64| -> (i64, i64) {
            // c·s − p + t·d in [lo_in, hi_in)  ⇔  t in [ceil((lo_in − c·s + p) / d), floor((hi_in − 1 − c·s + p) / d) + 1)
            let (a, b) = (lo_in - c * s + p, hi_in - 1 - c * s + p);
            let t0 = if a <= 0 { 0 } else { (a + d - 1) / d };
            let t1 = if b < 0 { 0 } else { (b / d + 1).min(k) };
            (t0.min(t1), t1)
        };
        // (first column, count, vector?) for the left border, the interior, its last vector and the rest.
        let tail = if over { lanes } else { 0 };
        for (start, count, vector) in [(0, lo, false), (lo, nv, true), (hi - lanes, tail, true), (rest, ow - rest, false)] {
            if count <= 0 || (vector && borders_only) {
                continue;
            }
            if !vector && count <= 8 {
                // A few border columns: each its own statements with the kernel columns inside the
                // input known here, so no bounds check per tap.
                for c in start..start + count {
                    let taps = inside(c, 0, w);
                    let wcount = if count_pad { let (a, b) = inside(c, -p, w + pad_end); b - a } else { taps.1 - taps.0 };
                    let idx0 = [ni.clone(), c0.clone(), row.clone(), Expr::Int(c)];
                    let (pre, accs) = match &anode.op {
                        MirOp::Pool { .. } => {
                            let (pre, acc) = self.pool_interior(kb, anode, &idx0, taps, wcount);
                            (pre, vec![acc])
                        }
                        _ => self.grouped_interior(kb, anode, &idx0, chans, taps, None),
                    };
                    cols.extend(pre);
                    for (i, acc) in accs.into_iter().enumerate() {
                        let idx = [ni.clone(), chans[i].clone(), row.clone(), Expr::Int(c)];
                        cols.push(self.win_store(kb, win, av, acc, &idx, out_shape));
                    }
                }
                continue;
            }
            let j = kb.var();
            let col = Expr::add(Expr::Int(start), Expr::Var(j));
            let at = |c: Expr| [ni.clone(), c, row.clone(), col.clone()];
            let mut body = Vec::new();
            if vector {
                let (pre, accs) = match &anode.op {
                    MirOp::Pool { .. } => {
                        let (pre, acc) = self.pool_interior(kb, anode, &at(c0.clone()), (0, k), k);
                        (pre, vec![acc])
                    }
                    _ => self.grouped_interior(kb, anode, &at(c0.clone()), chans, (0, k), None),
                };
                body.extend(pre);
                for (i, acc) in accs.into_iter().enumerate() {
                    let idx = at(chans[i].clone());
                    body.push(self.win_store(kb, win, av, acc, &idx, out_shape));
                }
            } else {
                // Per element, each channel of the block in turn.
                let rv = kb.var();
                let ch = match glast {
                    Some(g) => Expr::i(IOp::Min, Expr::add(c0.clone(), Expr::Var(rv)), g.clone()),
                    None => Expr::add(c0.clone(), Expr::Var(rv)),
                };
                let idx = at(if rb > 1 { ch } else { c0.clone() });
                let (mut pre, acc) = self.anchor_body(kb, anode, &idx);
                pre.push(self.win_store(kb, win, av, acc, &idx, out_shape));
                body = if rb > 1 { vec![Stmt::For { var: rv, extent: rb as i64, kind: LoopKind::Serial, body: pre }] } else { pre };
            }
            let kind = if vector { LoopKind::Vector(lanes as u32) } else { LoopKind::Serial };
            cols.push(Stmt::For { var: j, extent: count, kind, body });
        }
        cols
    }

    /// Whether the epilogue of anchor `a` evaluates an exponential-class function (SiLU's sigmoid, GELU's
    /// erf or tanh): the window kernels' border columns would evaluate it one element at a time.
    pub(super) fn transcendental_epilogue(&self, a: NodeId) -> bool {
        let Some(r) = self.root_of_anchor(a) else { return false };
        let mut stack = vec![r];
        let mut seen = Vec::new();
        while let Some(n) = stack.pop() {
            if n == a || seen.contains(&n) {
                continue;
            }
            seen.push(n);
            let node = self.g.node(n);
            if matches!(node.op, MirOp::Unary(u) if matches!(u, UnaryOp::Exp | UnaryOp::Sigmoid | UnaryOp::Tanh | UnaryOp::Erf | UnaryOp::Log)) {
                return true;
            }
            stack.extend(node.inputs.iter().filter_map(|&v| self.g.producer(v)).filter(|p| *p == a || self.fusion.role[p.index()] == Role::Inlined));
        }
        false
    }

    /// A window kernel's store of accumulator `acc` at `idx`: through the epilogue, or the bare value
    /// when the row's epilogue is applied afterwards (`win.staged`).
    fn win_store(&mut self, kb: &mut KB, win: &Win, av: rlx_ir::ValueId, acc: Expr, idx: &[Expr], out_shape: &[usize]) -> Stmt {
        if win.staged {
            Stmt::Store { buf: win.op, index: linear(idx, out_shape), value: acc }
        } else {
            self.store_with_epilogue(kb, av, acc, win.a, win.r, win.op, idx, out_shape)
        }
    }

    /// The epilogue of a staged row (`win.staged`): every column's stored value read back and put
    /// through the epilogue in vectors — runs of whole vectors, then narrower ones down to 4 lanes,
    /// then single columns, none overlapping (the epilogue is applied once per element).
    fn epilogue_pass(&mut self, kb: &mut KB, win: &Win, out_shape: &[usize], row: Expr) -> Vec<Stmt> {
        let av = self.g.node(win.a).outputs[0];
        let ow = out_shape[3] as i64;
        let mut runs = Vec::new();
        let (mut at, mut width) = (0, win.lanes.max(1));
        while at < ow {
            while width > 1 && ow - at < width {
                width = if width / 2 >= 4 { width / 2 } else { 1 };
            }
            let count = (ow - at) / width;
            runs.push((at, count, width));
            at += count * width;
        }
        let mut out = Vec::new();
        for chan in win.chans.clone() {
            for &(start, count, width) in &runs {
                let j = kb.var();
                let idx = [win.ni.clone(), chan.clone(), row.clone(), Expr::add(Expr::Int(start), Expr::Var(j))];
                let raw = Expr::load(win.op, linear(&idx, out_shape));
                let st = self.store_with_epilogue(kb, av, raw, win.a, win.r, win.op, &idx, out_shape);
                let kind = LoopKind::run(width as u32);
                out.push(Stmt::For { var: j, extent: count * width, kind, body: vec![st] });
            }
        }
        out
    }

    /// The store of accumulator `acc` (anchor value `av` of node `a`) at `idx`, through the epilogue
    /// up to root `r`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn store_with_epilogue(&mut self, kb: &mut KB, av: rlx_ir::ValueId, acc: Expr, a: NodeId, r: NodeId, op: u32, idx: &[Expr], out_shape: &[usize]) -> Stmt {
        kb.subst.insert(av, acc);
        let v = if a == r { kb.subst[&av].clone() } else { self.node_expr(kb, r, idx) };
        kb.subst.remove(&av);
        Stmt::Store { buf: op, index: linear(idx, out_shape), value: v }
    }
}

/// The interior output columns `[lo, hi)` of a window over input rows of `w` (stride `s`, left padding
/// `p`, dilation `d`, `k` taps): those where 0 <= c·s − p and c·s − p + (k−1)·d < w; the others are
/// the border columns.
pub(super) fn interior_columns(w: i64, ow: i64, s: i64, p: i64, d: i64, k: i64) -> (i64, i64) {
    let lo = ((p + s - 1) / s).min(ow);
    let last = w - 1 + p - (k - 1) * d;
    let hi = if last < 0 { lo } else { (last / s + 1).clamp(lo, ow) };
    (lo, hi)
}

/// A window kernel's column ranges and channel block (`window_body`), shared by its rows and the
/// plane form (`depthwise.rs`).
pub(super) struct Win {
    /// The anchor, the epilogue's root and the output parameter.
    pub(super) a: NodeId,
    pub(super) r: NodeId,
    pub(super) op: u32,
    /// The image index and the block's first channel (from the parallel loop's index).
    pub(super) ni: Expr,
    pub(super) c0: Expr,
    /// The block's `rb` output channels, and the group's last channel when a block is clamped to it.
    pub(super) chans: Vec<Expr>,
    pub(super) glast: Option<Expr>,
    pub(super) rb: usize,
    /// Input width; stride, left padding, dilation and kernel size along the width.
    pub(super) w: i64,
    pub(super) s: i64,
    pub(super) p: i64,
    pub(super) d: i64,
    pub(super) k: i64,
    /// Interior columns [lo, hi), `nv` of them in whole vectors, a last overlapping vector when
    /// `over`, and the right border's first column `rest`; the vector width.
    pub(super) lo: i64,
    pub(super) hi: i64,
    pub(super) nv: i64,
    pub(super) over: bool,
    pub(super) rest: i64,
    pub(super) lanes: i64,
    /// The right padding and whether an average pool counts the padding.
    pub(super) pad_end: i64,
    pub(super) count_pad: bool,
    /// Whether each row is stored without its epilogue, which a vector pass over the row then applies
    /// (`epilogue_pass`: an epilogue with an exponential would run one element at a time in the
    /// border columns).
    pub(super) staged: bool,
}
