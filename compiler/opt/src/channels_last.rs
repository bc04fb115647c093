//! The CPU planner's layout pass: the convolutions that run faster with the activations channels-last
//! (NHWC) get that layout, and the layout changes only at the edges of the region they form.
//!
//! Per float 2-D convolution with a constant weight:
//! - a pointwise one (1×1, stride 1, no padding, one group) becomes a `matmul` of x as `[N, H, W, C]`
//!   by the weight as `[C, M]` plus the bias: the GEMM micro-kernel then reads x in place (each
//!   position's channels contiguous) and stores whole rows of output channels, where in NCHW its B
//!   operand had to be packed from rows `H·W` floats apart per call (a 256 → 32 layer at 27²: 0.071–0.112
//!   ms against 0.124–0.157, one thread);
//! - a depthwise one (one input channel a group) becomes `conv_nhwc`, whose window kernel
//!   (`plan/conv_nhwc.rs`) runs its vectors along the channels;
//! - a dense one (one group, any k×k, stride and dilation, whole vectors of 16 output channels) becomes
//!   `conv_nhwc` of x padded first by a `pad` (`plan/conv_nhwc_gemm.rs`: an implicit GEMM whose A is a
//!   broadcast of x at each position's window, no tap checked); a stem's layout change is then its
//!   3-channel input's, inside that padded copy, instead of its output's (MobileNet-like 0.93× the time).
//!
//! Each becomes `to_nchw(op(to_nhwc(x)))` and the transposes are moved out of the way in one pass over
//! the graph: a `to_nhwc` of a `to_nchw` is its operand; an elementwise op whose operands are `to_nchw`s
//! or broadcasts without a spatial extent (per-channel constants, a squeeze-and-excitation gate) runs
//! channels-last and is followed by the `to_nchw` instead; so does a concat along the channels, a max or
//! average pool (`max_pool_nhwc` / `avg_pool_nhwc`: `conv_nhwc.rs`'s window kernel) and a reduction over
//! the spatial dims (a global pool: its `[N, 1, 1, C]` result is `[N, C, 1, 1]` with no element moved, a
//! view). What is left of the transposes is dead (removed) or the layout change a reader in NCHW needs.
//! The pass keeps the rewrite only when those changes move few elements against the convolutions'
//! outputs ([`MAX_MOVED`]: Inception v1's LocalResponseNormalization would need two around it). Whatever
//! the share of pointwise convolutions: with `plan/winograd_nhwc.rs` a dense 3×3 one is faster
//! channels-last than in NCHW's Winograd form too (VGG-19, none pointwise: 0.60–0.65× its NCHW time at
//! batch 1 / 8, one and two threads, on a two-FMA Xeon). Otherwise the second rewrite (`Mode::Reducing`) takes only the
//! pointwise convolutions over at least [`REDUCING`] input channels per output channel (Inception v1's
//! reductions), each on its own — x read through a `to_nhwc` of its own, which the
//! planner makes index math in the matmul's loads (x itself, broadcast a row element at a time: no
//! copy), the output's few channels changed back after the epilogue. Measured one layer at a time (one
//! thread, CPU ms, NCHW against this): 256 → 32 at 27² 0.125 / 0.099, 512 → 64 at 13² 0.117 / 0.074,
//! 384 → 48 at 13² 0.075 / 0.052, 128 → 16 at 55² 0.14–0.17 / 0.15–0.16; at 4 input channels per output
//! channel no gain — ResNet's 256 → 64 at 56² 0.91–0.94 / 0.96–0.98, 512 → 128 at 28² 0.77–0.78 /
//! 0.82–0.83, 2048 → 512 at 7² 1.19–1.21 / 1.18–1.23, 1024 → 256 at 14² 0.70–0.76 / 0.68–0.71, 128 → 32
//! at 27² 0.047–0.052 / 0.046–0.048 (ResNet-50 1.03× the time with them) —, and an expanding one loses:
//! 64 → 256 at 56² 0.71 / 1.40 (the output's change back is as large as the work).

use crate::fold::{dce, rebuild};
use rlx_ir::{ConstData, Def, Dim, Mir, MirOp, ValueId};
use std::collections::HashMap;

/// NCHW → NHWC and back.
const TO_NHWC: [usize; 4] = [0, 2, 3, 1];
const TO_NCHW: [usize; 4] = [0, 3, 1, 2];

/// The layout changes the rewrite may keep: at most this fraction of the elements the rewritten
/// convolutions produce (a model's input and output edges: MobileNet-like's one transpose after its
/// stem is ~4% of them).
const MAX_MOVED: f64 = 0.1;

/// The node name suffixes of the layout changes the pass adds.
const NHWC_SUFFIX: &str = "/to_nhwc";
const NCHW_SUFFIX: &str = "/to_nchw";

/// What the pass does with a convolution node.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    Pointwise,
    Depthwise,
    /// A dense k×k one (one group, any stride and dilation) into whole vectors of 16 output channels:
    /// `conv_nhwc`, the implicit GEMM of `plan/conv_nhwc_gemm.rs`, of x padded first.
    Dense,
}

/// A pointwise convolution over at least this many input channels per output channel also runs
/// channels-last on its own in an NCHW model (`Mode::Reducing`).
const REDUCING: usize = 8;

/// Which convolutions a rewrite takes.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Pointwise, depthwise and dense ones, the layout changed at the region's edges.
    Region,
    /// Only pointwise ones over ≥ [`REDUCING`] input channels per output channel, each on its own: x
    /// read through its own `to_nhwc` — index math in the matmul's loads (broadcasts of x's rows, no
    /// copy) — and the few output channels changed back after the epilogue.
    Reducing,
}

fn form(g: &Mir, n: &rlx_ir::Node<MirOp>, mode: Mode) -> Option<Form> {
    let MirOp::Conv { strides, pads, groups, .. } = &n.op else { return None };
    let (x, w) = (n.inputs[0], n.inputs[1]);
    let sx = g.ty(x).shape.as_fixed()?;
    let sw = g.ty(w).shape.as_fixed()?;
    if sx.len() != 4 || g.ty(x).dtype != rlx_ir::DType::F32 || !matches!(g.value(w).def, Def::Const(_)) || g.outputs.contains(&w) {
        return None;
    }
    if *groups == 1 && sw[2] == 1 && sw[3] == 1 && strides.iter().all(|&s| s == 1) && pads.iter().all(|&p| p == 0) {
        return (mode == Mode::Region || sw[1] >= REDUCING * sw[0]).then_some(Form::Pointwise);
    }
    if mode == Mode::Region && *groups == 1 && sw[0] % 16 == 0 {
        return Some(Form::Dense);
    }
    (mode == Mode::Region && *groups == sx[1] && sw[0] == sx[1] && sw[1] == 1).then_some(Form::Depthwise)
}

/// A shape padded with leading ones to rank 4.
fn rank4(s: &[usize]) -> Option<Vec<usize>> {
    (s.len() <= 4).then(|| std::iter::repeat_n(1, 4 - s.len()).chain(s.iter().copied()).collect())
}

/// A constant of rank ≤ 4 broadcast against NCHW, as the rank-4 constant broadcast against NHWC.
fn const_nhwc(c: &ConstData) -> Option<ConstData> {
    let s = rank4(&c.shape)?;
    let es = c.dtype.size()?;
    let src = c.data.bytes();
    let (n, ch, h, w) = (s[0], s[1], s[2], s[3]);
    let mut out = vec![0u8; src.len()];
    for a in 0..n {
        for k in 0..ch {
            for i in 0..h {
                for j in 0..w {
                    let from = (((a * ch + k) * h + i) * w + j) * es;
                    let to = (((a * h + i) * w + j) * ch + k) * es;
                    out[to..to + es].copy_from_slice(&src[from..from + es]);
                }
            }
        }
    }
    ConstData::new(c.dtype, vec![n, h, w, ch], rlx_ir::Blob::from_vec(out)).ok()
}

fn dims(s: &[usize]) -> Vec<Dim> {
    s.iter().map(|&d| Dim::Fixed(d as u64)).collect()
}

/// The graph with its convolutions channels-last where that pays (module doc), or `None`.
pub fn channels_last(g: &Mir) -> Option<Mir> {
    if let Some((out, produced, moved)) = rewrite(g, Mode::Region) {
        if (moved as f64) <= MAX_MOVED * produced as f64 {
            return Some(out);
        }
    }
    rewrite(g, Mode::Reducing).map(|(out, _, _)| out)
}

/// The rewrite in `mode`: the graph, the elements its rewritten convolutions produce and the elements its
/// layout changes move; `None` when it has no convolution to rewrite.
fn rewrite(g: &Mir, mode: Mode) -> Option<(Mir, usize, usize)> {
    if !g.nodes.iter().any(|n| form(g, n, mode).is_some()) {
        return None;
    }
    // New NCHW value → the NHWC value it is the transpose of.
    let mut nhwc: HashMap<ValueId, ValueId> = HashMap::new();
    // NCHW value → its `to_nhwc` (one per value).
    let mut made: HashMap<ValueId, ValueId> = HashMap::new();
    let mut produced = 0usize;
    let out = rebuild(g, |out, ni, ins, _| {
        let n = &g.nodes[ni];
        let name = n.name.as_str();
        let rank = |out: &Mir, v: ValueId| out.ty(v).shape.rank();
        // The `to_nhwc` of NCHW value v: one per value (`Mode::Reducing`: one per reader, so that it is
        // index math in that reader's loads).
        let to_nhwc = |out: &mut Mir, made: &mut HashMap<ValueId, ValueId>, v: ValueId| -> Option<ValueId> {
            if let Some(&a) = made.get(&v).filter(|_| mode == Mode::Region) {
                return Some(a);
            }
            let a = out.add1(&format!("{name}{NHWC_SUFFIX}"), MirOp::Transpose { perm: TO_NHWC.to_vec() }, &[v]).ok()?;
            made.insert(v, a);
            Some(a)
        };
        let back = |out: &mut Mir, y: ValueId, nhwc: &mut HashMap<ValueId, ValueId>| -> Option<Vec<ValueId>> {
            let b = out.add1(&format!("{name}{NCHW_SUFFIX}"), MirOp::Transpose { perm: TO_NCHW.to_vec() }, &[y]).ok()?;
            nhwc.insert(b, y);
            Some(vec![b])
        };
        if let Some(f) = form(g, n, mode) {
            let x = match nhwc.get(&ins[0]) {
                Some(&a) => a,
                None => to_nhwc(out, &mut made, ins[0])?,
            };
            let y = match f {
                Form::Pointwise => {
                    let Def::Const(w) = &g.value(n.inputs[1]).def else { return None };
                    let (m, c) = (w.shape[0], w.shape[1]);
                    let es = w.dtype.size()?;
                    let src = w.data.bytes();
                    let mut t = vec![0u8; src.len()];
                    for i in 0..m {
                        for k in 0..c {
                            t[(k * m + i) * es..(k * m + i + 1) * es].copy_from_slice(&src[(i * c + k) * es..(i * c + k + 1) * es]);
                        }
                    }
                    let wt = out.add_const(None, ConstData::new(w.dtype, vec![c, m], rlx_ir::Blob::from_vec(t)).ok()?);
                    let mm = out.add1(name, MirOp::MatMul, &[x, wt]).ok()?;
                    match ins.get(2) {
                        Some(&b) => out.add1(&format!("{name}/bias"), MirOp::Binary(rlx_ir::BinaryOp::Add), &[mm, b]).ok()?,
                        None => mm,
                    }
                }
                Form::Depthwise | Form::Dense => {
                    let MirOp::Conv { strides, pads, dilations, groups } = &n.op else { return None };
                    let mut pads = pads.clone();
                    let mut x = x;
                    if f == Form::Dense && pads.iter().any(|&p| p != 0) {
                        // The dense kernel (an implicit GEMM) reads its windows unchecked: x padded first.
                        let p: Vec<i64> = pads.iter().map(|&p| p as i64).collect();
                        let nhwc_pads = vec![0, p[0], p[1], 0, 0, p[2], p[3], 0];
                        x = out.add1(&format!("{name}/pad"), MirOp::Pad { pads: nhwc_pads, mode: rlx_ir::PadMode::Constant, value: 0.0 }, &[x]).ok()?;
                        pads = vec![0; pads.len()];
                    }
                    let mut cins = vec![x, ins[1]];
                    cins.extend(ins.get(2).copied());
                    out.add1(name, MirOp::ConvNhwc { strides: strides.clone(), pads, dilations: dilations.clone(), groups: *groups }, &cins).ok()?
                }
            };
            produced += out.ty(y).shape.numel().unwrap_or(0) as usize;
            return back(out, y, &mut nhwc);
        }
        if n.outputs.len() != 1 {
            return None;
        }
        match &n.op {
            MirOp::Unary(_) | MirOp::Binary(_) | MirOp::Where | MirOp::Cast { .. } => {
                if !ins.iter().any(|v| nhwc.contains_key(v)) || g.ty(n.outputs[0]).shape.rank() != 4 {
                    return None;
                }
                let mut nins = Vec::new();
                for &v in ins {
                    if let Some(&a) = nhwc.get(&v) {
                        nins.push(a);
                        continue;
                    }
                    let s = rank4(&out.ty(v).shape.as_fixed()?)?;
                    if let Def::Const(c) = &out.value(v).def {
                        nins.push(out.add_const(None, const_nhwc(c)?));
                    } else if (s[2] == 1 && s[3] == 1) || s[1] == 1 {
                        // No element moves: a reshape (a view).
                        nins.push(out.add1(&format!("{name}/as_nhwc"), MirOp::Reshape { shape: dims(&[s[0], s[2], s[3], s[1]]) }, &[v]).ok()?);
                    } else if rank(out, v) == 4 && mode == Mode::Region {
                        // A map computed in NCHW (a residual from the graph's input): its layout change.
                        nins.push(to_nhwc(out, &mut made, v)?);
                    } else {
                        return None;
                    }
                }
                let y = out.add1(name, n.op.clone(), &nins).ok()?;
                back(out, y, &mut nhwc)
            }
            MirOp::Concat { axis: 1 } if ins.iter().all(|v| nhwc.contains_key(v)) && rank(out, ins[0]) == 4 => {
                let nins: Vec<ValueId> = ins.iter().map(|v| nhwc[v]).collect();
                let y = out.add1(name, MirOp::Concat { axis: 3 }, &nins).ok()?;
                back(out, y, &mut nhwc)
            }
            MirOp::Pool { kind, kernel, strides, pads, dilations, ceil_mode, count_include_pad } if mode == Mode::Region && kernel.len() == 2 && nhwc.contains_key(&ins[0]) && rank(out, ins[0]) == 4 => {
                let pool = MirOp::PoolNhwc { kind: *kind, kernel: kernel.clone(), strides: strides.clone(), pads: pads.clone(), dilations: dilations.clone(), ceil_mode: *ceil_mode, count_include_pad: *count_include_pad };
                let y = out.add1(name, pool, &[nhwc[&ins[0]]]).ok()?;
                back(out, y, &mut nhwc)
            }
            MirOp::Reduce { op, axes, keepdims } if axes == &[2, 3] && nhwc.contains_key(&ins[0]) && rank(out, ins[0]) == 4 => {
                let y = out.add1(name, MirOp::Reduce { op: *op, axes: vec![1, 2], keepdims: *keepdims }, &[nhwc[&ins[0]]]).ok()?;
                if *keepdims {
                    back(out, y, &mut nhwc)
                } else {
                    Some(vec![y])
                }
            }
            _ => None,
        }
    });
    let out = dce(&out);
    // The layout changes left that move elements (a transpose of only unit axes is a view).
    let moved: usize = out
        .node_ids()
        .filter(|&id| {
            let n = out.node(id);
            (n.name.ends_with(NHWC_SUFFIX) || n.name.ends_with(NCHW_SUFFIX)) && !crate::plan::is_view(&out, id)
        })
        .map(|id| out.ty(out.node(id).inputs[0]).shape.numel().unwrap_or(0) as usize)
        .sum();
    (produced > 0).then_some((out, produced, moved))
}

#[cfg(test)]
mod tests {
    use super::channels_last;
    use rlx_ir::{BinaryOp, ConstData, DType, Mir, MirOp, TensorType, UnaryOp, ValueId};

    fn conv(g: &mut Mir, name: &str, x: ValueId, cin: usize, cout: usize, k: usize, groups: usize, seed: usize) -> ValueId {
        let n = cout * cin / groups * k * k;
        let w: Vec<f32> = (0..n).map(|i| (((i * 7 + seed * 13) % 17) as f32 - 8.0) / 16.0).collect();
        let w = g.add_const(None, ConstData::from_f32(vec![cout, cin / groups, k, k], &w));
        let b = g.add_const(None, ConstData::from_f32(vec![cout], &(0..cout).map(|i| i as f32 / 8.0).collect::<Vec<_>>()));
        let p = k / 2;
        let op = MirOp::Conv { strides: vec![1, 1], pads: vec![p; 4], dilations: vec![1, 1], groups };
        let y = g.add1(name, op, &[x, w, b]).unwrap();
        g.add1(&format!("{name}/relu"), MirOp::Unary(UnaryOp::Relu), &[y]).unwrap()
    }

    fn input(c: usize) -> (Mir, ValueId, ConstData) {
        let mut g = Mir::new();
        let x = g.add_input("x", TensorType::fixed(DType::F32, &[1, c, 9, 9]));
        let data: Vec<f32> = (0..c * 81).map(|i| ((i * 5 % 23) as f32 - 11.0) / 8.0).collect();
        (g, x, ConstData::from_f32(vec![1, c, 9, 9], &data))
    }

    /// A depthwise-separable chain runs channels-last, its values the interpreter's on the original
    /// graph; one layout change is left (the input's): the global pools' results need none, and the
    /// product by the pooled value (a gate) runs channels-last too.
    #[test]
    fn a_depthwise_separable_chain_goes_channels_last() {
        let (mut g, x, xd) = input(16);
        let mut v = x;
        for (i, (cin, cout)) in [(16, 32), (32, 32), (32, 48)].into_iter().enumerate() {
            v = conv(&mut g, &format!("dw{i}"), v, cin, cin, 3, cin, i);
            v = conv(&mut g, &format!("pw{i}"), v, cin, cout, 1, 1, i + 5);
        }
        let p = g.add1("pool", MirOp::Reduce { op: rlx_ir::ReduceOp::Mean, axes: vec![2, 3], keepdims: true }, &[v]).unwrap();
        let s = g.add1("scale", MirOp::Binary(BinaryOp::Mul), &[v, p]).unwrap();
        let q = g.add1("pool2", MirOp::Reduce { op: rlx_ir::ReduceOp::Sum, axes: vec![2, 3], keepdims: false }, &[s]).unwrap();
        g.outputs = vec![p, q];
        let out = channels_last(&g).expect("the chain is rewritten");
        let kinds: Vec<&str> = out.nodes.iter().map(|n| rlx_ir::OpSet::kind(&n.op)).collect();
        assert_eq!(kinds.iter().filter(|&&k| k == "conv_nhwc").count(), 3, "{kinds:?}");
        assert_eq!(kinds.iter().filter(|&&k| k == "matmul").count(), 3, "{kinds:?}");
        assert!(!kinds.contains(&"conv"), "{kinds:?}");
        assert_same(&g, &out, &xd);
    }

    /// The rewritten graph's values against the original's on the interpreter: the largest difference
    /// relative to the largest value (1 at least), within 1e-5.
    fn assert_same(g: &Mir, out: &Mir, xd: &ConstData) {
        let want = rlx_interp::run(g, std::slice::from_ref(xd)).unwrap();
        let got = rlx_interp::run(out, std::slice::from_ref(xd)).unwrap();
        for (a, b) in got.iter().zip(&want) {
            assert_eq!(a.shape, b.shape);
            let (p, q) = (a.to_f64_vec(), b.to_f64_vec());
            let scale = q.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            let e = p.iter().zip(&q).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max) / scale;
            assert!(e <= 1e-5, "rewritten vs original: {e:e} of the largest value {scale}");
        }
    }

    /// Bottlenecks (1×1 64 → 16, 3×3 16 → 16, 1×1 16 → 64) after a 1×1 expansion, then a max pool: the
    /// 3×3 convolutions become `conv_nhwc` of a padded x, the pool `max_pool_nhwc`, the 1×1 ones
    /// matmuls; the layout changes left are the input's and the output's (a tenth of the outputs).
    #[test]
    fn bottlenecks_and_their_pool_go_channels_last() {
        let mut g = Mir::new();
        let x = g.add_input("x", TensorType::fixed(DType::F32, &[1, 16, 16, 16]));
        let xd = ConstData::from_f32(vec![1, 16, 16, 16], &(0..16 * 256).map(|i| ((i * 5 % 23) as f32 - 11.0) / 8.0).collect::<Vec<_>>());
        let mut v = conv(&mut g, "in", x, 16, 64, 1, 1, 0);
        for i in 0..3 {
            let a = conv(&mut g, &format!("a{i}"), v, 64, 16, 1, 1, 3 * i + 1);
            let b = conv(&mut g, &format!("b{i}"), a, 16, 16, 3, 1, 3 * i + 2);
            v = conv(&mut g, &format!("c{i}"), b, 16, 64, 1, 1, 3 * i + 3);
        }
        let pool = MirOp::Pool { kind: rlx_ir::PoolKind::Max, kernel: vec![2, 2], strides: vec![2, 2], pads: vec![0; 4], dilations: vec![1, 1], ceil_mode: false, count_include_pad: false };
        let p = g.add1("pool", pool, &[v]).unwrap();
        g.outputs = vec![p];
        let out = channels_last(&g).expect("the bottlenecks are rewritten");
        let kinds: Vec<&str> = out.nodes.iter().map(|n| rlx_ir::OpSet::kind(&n.op)).collect();
        let count = |k: &str| kinds.iter().filter(|&&x| x == k).count();
        assert_eq!((count("conv_nhwc"), count("pad"), count("matmul"), count("max_pool_nhwc"), count("transpose")), (3, 3, 7, 1, 2), "{kinds:?}");
        assert!(!kinds.contains(&"conv") && !kinds.contains(&"max_pool"), "{kinds:?}");
        assert_same(&g, &out, &xd);
    }

    /// A VGG-style chain — a stem, 3×3 convolutions, no pointwise one — ending in a global pool: every
    /// convolution channels-last (Winograd's form is faster there too), no layout change but the stem's
    /// input inside its padded copy.
    #[test]
    fn a_model_without_pointwise_convolutions_goes_channels_last() {
        let mut g = Mir::new();
        let x = g.add_input("x", TensorType::fixed(DType::F32, &[1, 3, 16, 16]));
        let xd = ConstData::from_f32(vec![1, 3, 16, 16], &(0..3 * 256).map(|i| ((i * 7 % 19) as f32 - 9.0) / 8.0).collect::<Vec<_>>());
        let mut v = conv(&mut g, "c0", x, 3, 16, 3, 1, 0);
        for i in 1..4 {
            v = conv(&mut g, &format!("c{i}"), v, 16, 16, 3, 1, i);
        }
        let p = g.add1("pool", MirOp::Reduce { op: rlx_ir::ReduceOp::Mean, axes: vec![2, 3], keepdims: true }, &[v]).unwrap();
        g.outputs = vec![p];
        let out = channels_last(&g).expect("the chain is rewritten");
        let kinds: Vec<&str> = out.nodes.iter().map(|n| rlx_ir::OpSet::kind(&n.op)).collect();
        assert_eq!(kinds.iter().filter(|&&k| k == "conv_nhwc").count(), 4, "{kinds:?}");
        assert!(!kinds.contains(&"conv"), "{kinds:?}");
        assert_same(&g, &out, &xd);
    }

    /// ResNet's bottleneck over a small map whose input (64 channels) and output would need layout
    /// changes moving more than a tenth of what its convolutions produce: the graph is left as it is.
    #[test]
    fn a_bottleneck_keeps_nchw() {
        let (mut g, x, _) = input(64);
        let a = conv(&mut g, "a", x, 64, 32, 1, 1, 1);
        let b = conv(&mut g, "b", a, 32, 32, 3, 1, 2);
        let c = conv(&mut g, "c", b, 32, 64, 1, 1, 3);
        let y = g.add1("res", MirOp::Binary(BinaryOp::Add), &[c, x]).unwrap();
        let d = conv(&mut g, "d", y, 64, 32, 1, 1, 4);
        let e = conv(&mut g, "e", d, 32, 32, 3, 1, 5);
        g.outputs = vec![e];
        assert!(channels_last(&g).is_none());
    }
}
