//! The per-element expression of an inlined node (elementwise ops, quantize / dequantize, and data
//! movement — expand, reshape, transpose, slice, pad, concat, gathers — as index math in the loads),
//! and element `idx` of any value inside a kernel.

use super::index::{bidx, clamp, linear, reshape_index};
use super::kernel::{lit, KB};
use super::Planner;
use rlx_ir::loops::{Access, Expr, IOp};
use rlx_ir::mir::slice_range;
use rlx_ir::{BinaryOp, DType, Def, MirOp, NodeId, OpSet, PadMode, UnaryOp, ValueId};

/// The saturation range of a quantized dtype, as f32 arithmetic sees it. The kernel adds the zero
/// point in f32, which is exact for 8- and 16-bit zero points; with a 32-bit one, |x / s| beyond 2^24
/// may round differently from the interpreter's i64 sum.
fn quant_range(d: DType) -> (f64, f64) {
    let (lo, hi) = d.int_range().unwrap_or((i64::MIN, i64::MAX));
    (lo as f64, hi as f64)
}

impl Planner<'_> {
    /// A gather's index `gi` (read from `indices`) into an axis of `d` elements: negative ones count
    /// from the end and the result is clamped into range — unless `indices` is a constant whose values
    /// are all in [0, d) already (a Resize's source tables, an embedding's fixed ids), when the select
    /// and the clamp would only cost instructions per element.
    fn gather_index(&self, indices: ValueId, gi: Expr, d: i64) -> Expr {
        if let Def::Const(c) = &self.g.value(indices).def {
            if !c.dtype.is_quantized_block() && (0..c.numel()).all(|i| (0.0..d as f64).contains(&c.get_f64(i))) {
                return gi;
            }
        }
        let norm = Expr::Select(Box::new(Expr::i(IOp::Lt, gi.clone(), Expr::Int(0))), Box::new(Expr::add(gi.clone(), Expr::Int(d))), Box::new(gi));
        clamp(norm, 0, d - 1)
    }

    /// Element `idx` of value `v` inside a kernel.
    pub(super) fn elem(&mut self, kb: &mut KB, v: ValueId, idx: &[Expr]) -> Expr {
        if let Some(e) = kb.subst.get(&v) {
            return e.clone();
        }
        if let Def::Const(c) = &self.g.value(v).def {
            if c.numel() == 1 && !c.dtype.is_quantized_block() {
                return lit(c.get_f64(0), c.dtype);
            }
        }
        if let Some(b) = self.buf_of[v.index()] {
            let shape = self.buffers[b as usize].shape.clone();
            let p = kb.param(b, &self.buffers[b as usize].clone(), Access::Read);
            return Expr::load(p, linear(idx, &shape));
        }
        let n = self.g.producer(v).expect("non-materialized values are node outputs");
        self.node_expr(kb, n, idx)
    }

    /// The per-element expression of an inlinable node.
    pub(super) fn node_expr(&mut self, kb: &mut KB, n: NodeId, idx: &[Expr]) -> Expr {
        let node = self.g.node(n).clone();
        let ins = &node.inputs;
        match &node.op {
            MirOp::Unary(u) => {
                let x = self.elem(kb, ins[0], &bidx(idx, &self.shape(ins[0])));
                Expr::Un(*u, self.dt(ins[0]), Box::new(x))
            }
            MirOp::Binary(b) => {
                let a = self.elem(kb, ins[0], &bidx(idx, &self.shape(ins[0])));
                let mut c = self.elem(kb, ins[1], &bidx(idx, &self.shape(ins[1])));
                let (da, db) = (self.dt(ins[0]), self.dt(ins[1]));
                if da != db {
                    c = Expr::Cast { from: db, to: da, x: Box::new(c) };
                }
                Expr::Bin(*b, da, Box::new(a), Box::new(c))
            }
            MirOp::Where => {
                let c = self.elem(kb, ins[0], &bidx(idx, &self.shape(ins[0])));
                let a = self.elem(kb, ins[1], &bidx(idx, &self.shape(ins[1])));
                let b = self.elem(kb, ins[2], &bidx(idx, &self.shape(ins[2])));
                Expr::Select(Box::new(c), Box::new(a), Box::new(b))
            }
            MirOp::Cast { to } => {
                let x = self.elem(kb, ins[0], idx);
                Expr::Cast { from: self.dt(ins[0]), to: *to, x: Box::new(x) }
            }
            MirOp::Quantize { axis } | MirOp::Dequantize { axis } | MirOp::FakeQuantize { axis } => {
                // As the interpreter (rlx-interp's quant.rs): f32 arithmetic whatever the dtypes.
                let f32_of = |e: Expr, d: DType| if d == DType::F32 { e } else { Expr::Cast { from: d, to: DType::F32, x: Box::new(e) } };
                let (sd, zd, xd) = (self.dt(ins[1]), self.dt(ins[2]), self.dt(ins[0]));
                let cidx: Vec<Expr> = if self.g.ty(ins[1]).shape.numel() == Some(1) {
                    vec![Expr::Int(0); self.shape(ins[1]).len()]
                } else if self.shape(ins[1]) == self.shape(ins[0]) {
                    idx.to_vec()
                } else {
                    vec![idx[*axis].clone()]
                };
                let scale = self.elem(kb, ins[1], &cidx);
                let zp = self.elem(kb, ins[2], &cidx);
                let x = self.elem(kb, ins[0], idx);
                let f = |op: BinaryOp, a: Expr, b: Expr| Expr::Bin(op, DType::F32, Box::new(a), Box::new(b));
                // (v - zp) · s for an integer v, the difference exact in i64 and rounded once to f32.
                let deq = |v: Expr, vd: DType, zp: Expr, scale: Expr| {
                    let i = |e: Expr, d: DType| Expr::Cast { from: d, to: DType::I64, x: Box::new(e) };
                    let diff = Expr::Bin(BinaryOp::Sub, DType::I64, Box::new(i(v, vd)), Box::new(i(zp, zd)));
                    f(BinaryOp::Mul, Expr::Cast { from: DType::I64, to: DType::F32, x: Box::new(diff) }, f32_of(scale, sd))
                };
                if matches!(node.op, MirOp::Dequantize { .. }) {
                    let v = deq(x, xd, zp, scale);
                    return if sd == DType::F32 { v } else { Expr::Cast { from: DType::F32, to: sd, x: Box::new(v) } };
                }
                // saturate(round_half_even(x / s) + zp); NaN gives zp.
                let (lo, hi) = quant_range(zd);
                let r = Expr::Un(UnaryOp::Round, DType::F32, Box::new(f(BinaryOp::Div, f32_of(x, xd), f32_of(scale.clone(), sd))));
                let nan = Expr::Un(UnaryOp::IsNan, DType::F32, Box::new(r.clone()));
                let r = Expr::Select(Box::new(nan), Box::new(lit(0.0, DType::F32)), Box::new(r));
                let v = f(BinaryOp::Add, r, f32_of(zp.clone(), zd));
                let v = f(BinaryOp::Min, f(BinaryOp::Max, v, lit(lo, DType::F32)), lit(hi, DType::F32));
                let q = Expr::Cast { from: DType::F32, to: zd, x: Box::new(v) };
                if matches!(node.op, MirOp::Quantize { .. }) {
                    return q;
                }
                let v = deq(q, zd, zp, scale);
                if xd == DType::F32 { v } else { Expr::Cast { from: DType::F32, to: xd, x: Box::new(v) } }
            }
            MirOp::Expand { .. } => {
                let s = self.shape(ins[0]);
                self.elem(kb, ins[0], &bidx(idx, &s))
            }
            MirOp::Reshape { .. } => {
                // An inlined reshape (operand inlining): remap the index group by group of dims with
                // equal products (a split or merge of adjacent dims; unit dims are pinned to 0).
                let (so, si) = (self.shape(node.outputs[0]), self.shape(ins[0]));
                let in_idx = reshape_index(idx, &so, &si);
                self.elem(kb, ins[0], &in_idx)
            }
            MirOp::Transpose { perm } => {
                let mut in_idx = vec![Expr::Int(0); perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    in_idx[p] = idx[i].clone();
                }
                self.elem(kb, ins[0], &in_idx)
            }
            MirOp::Slice { axes, starts, ends, steps } => {
                let s = self.shape(ins[0]);
                let mut in_idx = idx.to_vec();
                for (k, &a) in axes.iter().enumerate() {
                    let (st, _) = slice_range(s[a] as i64, starts[k], ends[k], steps[k]);
                    in_idx[a] = Expr::add(Expr::Int(st), Expr::mul(idx[a].clone(), Expr::Int(steps[k])));
                }
                self.elem(kb, ins[0], &in_idx)
            }
            MirOp::Pad { pads, mode, value } => {
                let s = self.shape(ins[0]);
                let r = s.len();
                let mut in_idx = Vec::with_capacity(r);
                let mut inside: Option<Expr> = None;
                for i in 0..r {
                    let d = s[i] as i64;
                    let j = Expr::i(IOp::Sub, idx[i].clone(), Expr::Int(pads[i]));
                    if pads[i] <= 0 && pads[i + r] <= 0 {
                        in_idx.push(j);
                        continue;
                    }
                    let e = match mode {
                        PadMode::Constant => {
                            let c = Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(0), j.clone()), Expr::i(IOp::Lt, j.clone(), Expr::Int(d)));
                            inside = Some(match inside.take() {
                                Some(p) => Expr::i(IOp::And, p, c),
                                None => c,
                            });
                            clamp(j, 0, d - 1)
                        }
                        PadMode::Edge => clamp(j, 0, d - 1),
                        PadMode::Reflect => {
                            // j < 0 → -j; j >= d → 2(d-1) - j.
                            let neg = Expr::i(IOp::Lt, j.clone(), Expr::Int(0));
                            let over = Expr::i(IOp::Le, Expr::Int(d), j.clone());
                            let refl = Expr::Select(
                                Box::new(neg),
                                Box::new(Expr::i(IOp::Sub, Expr::Int(0), j.clone())),
                                Box::new(Expr::Select(Box::new(over), Box::new(Expr::i(IOp::Sub, Expr::Int(2 * (d - 1)), j.clone())), Box::new(j))),
                            );
                            clamp(refl, 0, d - 1)
                        }
                        PadMode::Wrap => {
                            let k = (pads[i].max(0) / d.max(1) + 1) * d;
                            Expr::i(IOp::Rem, Expr::add(j, Expr::Int(k)), Expr::Int(d.max(1)))
                        }
                    };
                    in_idx.push(e);
                }
                let x = self.elem(kb, ins[0], &in_idx);
                match inside {
                    Some(c) => Expr::Select(Box::new(c), Box::new(x), Box::new(lit(*value, self.dt(ins[0])))),
                    None => x,
                }
            }
            MirOp::Concat { axis } => {
                let a = *axis;
                let mut offs = Vec::new();
                let mut acc = 0i64;
                for &i in ins {
                    offs.push(acc);
                    acc += self.shape(i)[a] as i64;
                }
                let last = ins.len() - 1;
                let mut in_idx = idx.to_vec();
                let len_last = self.shape(ins[last])[a] as i64;
                in_idx[a] = clamp(Expr::i(IOp::Sub, idx[a].clone(), Expr::Int(offs[last])), 0, len_last - 1);
                let mut e = self.elem(kb, ins[last], &in_idx);
                for k in (0..last).rev() {
                    let len = self.shape(ins[k])[a] as i64;
                    if len == 0 {
                        continue;
                    }
                    let mut ii = idx.to_vec();
                    ii[a] = clamp(Expr::i(IOp::Sub, idx[a].clone(), Expr::Int(offs[k])), 0, len - 1);
                    let x = self.elem(kb, ins[k], &ii);
                    let cond = Expr::i(IOp::Lt, idx[a].clone(), Expr::Int(offs[k] + len));
                    e = Expr::Select(Box::new(cond), Box::new(x), Box::new(e));
                }
                e
            }
            MirOp::Gather { axis } => {
                let a = *axis;
                let s = self.shape(ins[0]);
                let q = self.shape(ins[1]).len();
                let raw = self.elem(kb, ins[1], &idx[a..a + q]);
                let gi = Expr::ToIndex { from: self.dt(ins[1]), x: Box::new(raw) };
                let d = s[a] as i64;
                let mut in_idx: Vec<Expr> = idx[..a].to_vec();
                in_idx.push(self.gather_index(ins[1], gi, d));
                in_idx.extend(idx[a + q..].iter().cloned());
                self.elem(kb, ins[0], &in_idx)
            }
            MirOp::GatherElements { axis } => {
                let a = *axis;
                let d = self.shape(ins[0])[a] as i64;
                let raw = self.elem(kb, ins[1], idx);
                let gi = Expr::ToIndex { from: self.dt(ins[1]), x: Box::new(raw) };
                let mut in_idx = idx.to_vec();
                in_idx[a] = self.gather_index(ins[1], gi, d);
                self.elem(kb, ins[0], &in_idx)
            }
            MirOp::GatherNd { batch_dims } => {
                // out = indices.shape[..q-1] ++ data.shape[b+depth..]; index tuple at indices[idx[..q-1], j].
                let b = *batch_dims;
                let sd = self.shape(ins[0]);
                let si = self.shape(ins[1]);
                let q = si.len();
                let depth = si[q - 1];
                let mut in_idx: Vec<Expr> = idx[..b].to_vec();
                for j in 0..depth {
                    let mut ii: Vec<Expr> = idx[..q - 1].to_vec();
                    ii.push(Expr::Int(j as i64));
                    let raw = self.elem(kb, ins[1], &ii);
                    let gi = Expr::ToIndex { from: self.dt(ins[1]), x: Box::new(raw) };
                    let d = sd[b + j] as i64;
                    let norm = Expr::Select(Box::new(Expr::i(IOp::Lt, gi.clone(), Expr::Int(0))), Box::new(Expr::add(gi.clone(), Expr::Int(d))), Box::new(gi));
                    in_idx.push(clamp(norm, 0, d - 1));
                }
                in_idx.extend(idx[q - 1..].iter().cloned());
                self.elem(kb, ins[0], &in_idx)
            }
            // A split-K matmul summed inside a row kernel (split_k.rs).
            MirOp::MatMul if self.split_k_parts.contains_key(&node.outputs[0]) => self.split_k_sum(kb, &node, idx).expect("a split-K sum"),
            other => unreachable!("node_expr on non-inlinable {}", other.kind()),
        }
    }
}
