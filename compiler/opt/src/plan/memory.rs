//! Memory planning: where every value lives. Graph inputs and outputs are the caller's buffers (an
//! output a kernel root produces is written in place); constants go into one weights blob at aligned
//! offsets (a 2-D matmul weight stored transposed, or packed in GEMM panels, so both operands stream
//! contiguously); views alias their root at an offset; every other materialized value gets an arena
//! offset from liveness over the launch order — first fit in order of decreasing size among buffers
//! whose live ranges overlap — so memory is reused. The peak is the arena size.

use super::fuse::{is_view, Role};
use super::gemm::pack_panels;
use super::index::{align_up, strides};
use super::Planner;
use rlx_ir::lir::{Base, Buffer, Launch};
use rlx_ir::mir::slice_range;
use rlx_ir::{ConstData, Def, MirOp, NodeId, OpSet, ValueId};
use std::collections::HashMap;

impl Planner<'_> {
    /// Graph inputs become the caller's input buffers; the constants that kernels load go into the
    /// weights blob (scalars become literals; matmul weights are stored transposed or packed).
    pub(super) fn place_inputs_and_constants(&mut self) {
        let g = self.g;
        // Inputs; state inputs are laid out one after another (aligned) in the state region.
        for (i, &v) in g.inputs.iter().enumerate() {
            let (base, offset) = if i < self.plain_inputs {
                (Base::Input(i as u32), 0)
            } else {
                let off = align_up(self.state_bytes, self.align);
                let bytes = self.dt(v).bytes_for(self.shape(v).iter().product()).unwrap_or(0);
                self.state_offsets.push(off);
                self.state_bytes = off + bytes;
                (Base::State, off)
            };
            let b = self.add_buffer(Buffer { base, offset, dtype: self.dt(v), shape: self.shape(v), label: self.label(v) }, None);
            self.buf_of[v.index()] = Some(b);
        }
        // Constants that kernels load (scalars become literals; matmul weights are stored transposed).
        let mut needs_load = vec![false; g.values.len()];
        let mut weight_rhs = vec![false; g.values.len()];
        for n in &g.nodes {
            for (k, &i) in n.inputs.iter().enumerate() {
                needs_load[i.index()] = true;
                if k == 1 && n.op == MirOp::MatMul && g.ty(i).shape.rank() == 2 {
                    weight_rhs[i.index()] = true;
                }
            }
        }
        for &o in &g.outputs {
            needs_load[o.index()] = true;
        }
        let mut conv_packed = Vec::new();
        if self.conv_gemm_on {
            conv_packed = self.pack_conv_weights();
            conv_packed.extend(self.pack_conv_transpose_weights());
        }
        if self.lanes >= 8 {
            conv_packed.extend(self.pack_dw_lanes_weights());
        }
        // Channels-last convolutions pack their weights in their kernels (`conv_nhwc.rs`).
        conv_packed.extend(g.node_ids().filter(|&n| matches!(g.node(n).op, MirOp::ConvNhwc { .. }) && self.is_nhwc_window(n)).map(|n| g.node(n).inputs[1]));
        // A weight packed for each convolution that reads it needs no plain copy; one read by anything
        // else keeps it.
        let uses = g.use_counts();
        let packs = |w: &ValueId| conv_packed.iter().filter(|&v| v == w).count();
        let conv_packed: Vec<ValueId> = conv_packed.iter().copied().filter(|w| packs(w) == uses[w.index()] as usize).collect();
        let mut block_seen: Vec<((usize, usize, rlx_ir::DType, Vec<usize>), super::blocks::BlockWeight)> = Vec::new();
        for (k, v) in g.values.iter().enumerate() {
            let Def::Const(c) = &v.def else { continue };
            let vid = ValueId(k as u32);
            if conv_packed.contains(&vid) {
                continue;
            }
            // Read by `dequant_matmul` / `dequant_gather`: packed once, in row panels (`blocks.rs`).
            let block_use = g.nodes.iter().any(|n| n.op.block_weight_input().is_some_and(|i| n.inputs.get(i) == Some(&vid)));
            if block_use {
                // The same tensor read through two constants (a tied embedding: the gather's table and
                // the output projection) is packed once.
                let key = (c.data.bytes().as_ptr() as usize, c.data.len(), c.dtype, c.shape.clone());
                let bw = match block_seen.iter().find(|(k, _)| *k == key) {
                    Some((_, bw)) => bw.clone(),
                    None => {
                        let bw = self.place_block_weight(self.label(vid), c);
                        block_seen.push((key, bw.clone()));
                        bw
                    }
                };
                self.block_weight.insert(vid, bw);
                let other_use = g.outputs.contains(&vid)
                    || g.nodes.iter().any(|n| n.inputs.iter().enumerate().any(|(i, &x)| x == vid && n.op.block_weight_input() != Some(i)));
                if !other_use {
                    continue;
                }
            }
            let only_kernel_users = g.node_ids().all(|n| !g.node(n).inputs.contains(&vid) || !is_view(g, n));
            // A region op reads its operands through pointers (`region.rs`): even a scalar is stored.
            let region_use = g.nodes.iter().any(|n| !n.op.regions().is_empty() && n.inputs.contains(&vid));
            if !region_use && (!needs_load[k] || (c.numel() == 1 && !c.dtype.is_quantized_block() && !g.outputs.contains(&vid) && only_kernel_users)) {
                continue;
            }
            let users_all_matmul_rhs = weight_rhs[k]
                && g.nodes.iter().all(|n| !n.inputs.contains(&vid) || (n.op == MirOp::MatMul && n.inputs[1] == vid && n.inputs[0] != vid))
                && !g.outputs.contains(&vid);
            // On vector CPU targets a weight narrower than a panel but at least half one, read by many
            // rows (a channels-last pointwise convolution projecting to 16 or 24 channels), is packed
            // in half-width panels: its dot products per output had run at a fraction of the GEMM's rate.
            let rows = if users_all_matmul_rhs && c.dtype.is_float() { self.matmul_rows(vid) } else { 0 };
            let narrow = self.lanes >= 8 && c.shape.len() == 2 && c.shape[1] < self.nr && c.shape[1] >= self.nr / 2 && rows >= 64;
            if users_all_matmul_rhs && c.dtype.is_float() && (c.shape[1] >= self.nr || narrow) {
                // Few rows (matrix-vector products) leave the micro-kernel with too few accumulators to
                // hide FMA latency; widen the panel instead (up to 4 vectors of lanes per row).
                // A weight worth splitting across threads (≥ 128 KB) keeps at least two panels: panels are
                // the parallel dimension when there are this few rows.
                // The wide tile's panels (AVX-512: 64 columns) where they leave no more tail columns
                // than the GEMM's (a 1000-column classifier keeps 32: 40 tail columns against 8).
                let (_, wn) = self.wide_tile;
                let mut nr = if wn > 0 && c.shape[1] >= wn && c.shape[1] % wn == c.shape[1] % self.nr { wn } else if narrow { self.nr / 2 } else { self.nr };
                let split = c.data.bytes().len() >= 128 * 1024;
                if rows <= 2 {
                    while nr * 2 <= c.shape[1] && nr < self.nr * 4 && (!split || c.shape[1] / (nr * 2) >= 2) {
                        nr *= 2;
                    }
                }
                let tc = pack_panels(c, nr);
                let b = self.add_weight(format!("{} (packed {}-column panels)", self.label(vid), nr), &tc);
                self.packed_weight.insert(vid, b);
            } else if users_all_matmul_rhs {
                let tc = transpose_2d(c);
                let b = self.add_weight(format!("{} (transposed)", self.label(vid)), &tc);
                self.transposed_weight.insert(vid, b);
            } else {
                let b = self.add_weight(self.label(vid), c);
                self.buf_of[k] = Some(b);
            }
        }
    }

    /// Graph outputs produced directly by a kernel root: output value → the caller's output slot.
    pub(super) fn output_slots(&self) -> HashMap<ValueId, u32> {
        let g = self.g;
        let mut out_slot: HashMap<ValueId, u32> = HashMap::new();
        for (i, &o) in g.outputs.iter().enumerate().take(self.plain_outputs) {
            if let Some(n) = g.producer(o) {
                if self.fusion.role[n.index()] == Role::Root && !out_slot.contains_key(&o) {
                    out_slot.insert(o, i as u32);
                }
            }
        }
        out_slot
    }

    /// Walks the nodes: views alias their input's buffer; kernel roots get buffers (the caller's output
    /// buffer, or the arena with offsets assigned by [`Planner::assign_arena`]). Returns the kernel
    /// roots in node order.
    pub(super) fn place_values(&mut self, out_slot: &HashMap<ValueId, u32>) -> Vec<NodeId> {
        let g = self.g;
        let mut launches_nodes: Vec<NodeId> = Vec::new();
        let homes = self.concat_homes(out_slot);
        self.strided = self.strided_homes(out_slot, &homes.in_place, &homes.home);
        for n in g.node_ids() {
            let node = g.node(n);
            match self.fusion.role[n.index()] {
                // Its inputs' kernels wrote every slice (`concat.rs`): a buffer, no launch.
                Role::Root if homes.in_place.contains(&n) => {
                    self.home_buffer(node.outputs[0], &homes);
                }
                // Every input's kernel stored it in its slice (`homes.rs`): its buffer, no launch.
                Role::Root if self.strided.full.contains(&n) => {
                    if self.buf_of[node.outputs[0].index()].is_none() {
                        self.home_buffer(node.outputs[0], &homes);
                    }
                }
                Role::View => {
                    let src = node.inputs[0];
                    let Some(sb) = self.buf_of[src.index()] else {
                        unreachable!("view inputs are materialized (fusion never inlines into a view)")
                    };
                    let (root, off) = self.root_of[sb as usize];
                    let mut extra = 0;
                    if let MirOp::Slice { axes, starts, ends, steps } = &node.op {
                        let s = self.shape(src);
                        let (st, _) = slice_range(s[axes[0]] as i64, starts[0], ends[0], steps[0]);
                        extra = st as usize * strides(&s)[axes[0]] as usize * self.dt(src).size().unwrap_or(1);
                    }
                    let sbuf = self.buffers[sb as usize].clone();
                    let v = node.outputs[0];
                    let b = self.add_buffer(
                        Buffer { base: sbuf.base, offset: sbuf.offset + extra, dtype: self.dt(v), shape: self.shape(v), label: self.label(v) },
                        Some((root, off + extra)),
                    );
                    self.buf_of[v.index()] = Some(b);
                }
                Role::Root if node.op == MirOp::WriteRows => {
                    // Updated in place: the output is the cache's own buffer (a state tensor; `plan`
                    // refuses any other cache), and the kernel writes only the new rows.
                    let Some(sb) = self.buf_of[node.inputs[0].index()] else { unreachable!("state inputs are placed first") };
                    let sbuf = self.buffers[sb as usize].clone();
                    let v = node.outputs[0];
                    let root = self.root_of[sb as usize];
                    let b = self.add_buffer(Buffer { label: self.label(v), ..sbuf }, Some(root));
                    self.buf_of[v.index()] = Some(b);
                    launches_nodes.push(n);
                }
                Role::Root => {
                    for &v in &node.outputs {
                        let base = match out_slot.get(&v) {
                            Some(&i) => Base::Output(i),
                            None => Base::Arena,
                        };
                        if homes.home.contains_key(&v) {
                            self.home_buffer(v, &homes);
                            continue;
                        }
                        if let Some(h) = self.strided.home.get(&v).cloned() {
                            self.strided_buffer(v, &h, Base::Arena);
                            continue;
                        }
                        if self.buf_of[v.index()].is_some() {
                            // A strided home, created when a value stored into it was placed.
                            continue;
                        }
                        let b = match self.inplace_state.get(&v) {
                            // A state output updated in place (`state.rs`): its slot's buffer.
                            Some(&k) => {
                                let sb = self.state_buffer(k);
                                let (sbuf, root) = (self.buffers[sb as usize].clone(), self.root_of[sb as usize]);
                                self.add_buffer(Buffer { label: self.label(v), ..sbuf }, Some(root))
                            }
                            None => self.add_buffer(Buffer { base, offset: 0, dtype: self.dt(v), shape: self.shape(v), label: self.label(v) }, None),
                        };
                        self.buf_of[v.index()] = Some(b);
                    }
                    launches_nodes.push(n);
                }
                Role::Inlined | Role::Anchor => {}
            }
        }
        launches_nodes
    }

    /// Arena offsets from liveness over the launch order; returns the peak (the arena size).
    pub(super) fn assign_arena(&mut self, launches: &[Launch]) -> usize {
        // Liveness of arena roots over launch indices.
        let nb = self.buffers.len();
        let mut first = vec![usize::MAX; nb];
        let mut last = vec![0usize; nb];
        for (li, l) in launches.iter().enumerate() {
            for &b in &l.bindings {
                let (r, _) = self.root_of[b as usize];
                first[r as usize] = first[r as usize].min(li);
                last[r as usize] = last[r as usize].max(li);
            }
        }
        let mut roots: Vec<usize> = (0..nb).filter(|&b| self.root_of[b].0 as usize == b && self.buffers[b].base == Base::Arena && first[b] != usize::MAX).collect();
        roots.sort_by(|&a, &b| self.buffers[b].bytes().cmp(&self.buffers[a].bytes()).then(a.cmp(&b)));
        let mut placed: Vec<(usize, usize, usize)> = Vec::new(); // (offset, end, buffer)
        let mut peak = 0;
        for &b in &roots {
            let size = align_up(self.buffers[b].bytes().max(1), self.align);
            let mut conflicts: Vec<(usize, usize)> =
                placed.iter().filter(|&&(_, _, o)| first[o] <= last[b] && first[b] <= last[o]).map(|&(s, e, _)| (s, e)).collect();
            conflicts.sort();
            let mut off = 0;
            for (s, e) in conflicts {
                if off + size <= s {
                    break;
                }
                off = off.max(e);
            }
            placed.push((off, off + size, b));
            peak = peak.max(off + size);
            self.buffers[b].offset = off;
        }
        // Views of arena roots follow their root's offset.
        for b in 0..nb {
            let (r, o) = self.root_of[b];
            if r as usize != b && self.buffers[r as usize].base == Base::Arena {
                self.buffers[b].offset = self.buffers[r as usize].offset + o;
            }
        }
        peak
    }

    /// The most rows (the left operand's elements over K) of the matmuls whose right operand is `w`.
    fn matmul_rows(&self, w: ValueId) -> usize {
        let g = self.g;
        g.nodes
            .iter()
            .filter(|n| n.op == MirOp::MatMul && n.inputs[1] == w)
            .map(|n| {
                let s = g.ty(n.inputs[0]).shape.as_fixed().unwrap_or_default();
                s[..s.len().saturating_sub(1)].iter().product::<usize>()
            })
            .max()
            .unwrap_or(0)
    }

    /// A buffer's label: the value's name, else its producer's, else `%N`.
    pub(super) fn label(&self, v: ValueId) -> String {
        let g = self.g;
        match (&g.value(v).name, g.producer(v)) {
            (Some(n), _) => n.clone(),
            (None, Some(n)) => g.node(n).name.clone(),
            (None, None) => format!("%{}", v.0),
        }
    }
}

/// A 2-D weight `[K, N]` stored transposed as `[N, K]`: element (k, n) at n·K + k.
fn transpose_2d(c: &ConstData) -> ConstData {
    let (kk, nn) = (c.shape[0], c.shape[1]);
    let es = c.dtype.size().unwrap_or(1);
    let src = c.data.bytes();
    let mut t = vec![0u8; src.len()];
    for r in 0..kk {
        for col in 0..nn {
            let s = (r * nn + col) * es;
            let d = (col * kk + r) * es;
            t[d..d + es].copy_from_slice(&src[s..s + es]);
        }
    }
    ConstData { dtype: c.dtype, shape: vec![nn, kk], data: rlx_ir::Blob::from_vec(t) }
}
