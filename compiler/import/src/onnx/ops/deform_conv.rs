//! DeformConv (2-D): per offset group, the input sampled bilinearly (zeros outside, pixel coordinates:
//! GridSample's linear taps with align_corners) at every kernel tap's offset position, times the
//! mask, is an im2col tensor [N, group, C/group·kh·kw, oh·ow]; a batched `matmul` with the weights
//! [1, group, M/group, C/group·kh·kw] (+ bias) is the convolution.

use super::sample::{combine, pixel_taps, tap_terms, Mode, Pad};
use super::{one, Node, R};
use crate::onnx::Ctx;
use rlx_ir::{BinaryOp as B, ConstData, DType, MirOp};

pub(super) const OPS: &[&str] = &["DeformConv"];

/// DeformConv (opset 19/22, 2-D): X [N, C, H, W], W [M, C/group, kh, kw], offset [N, G·kh·kw·2, oh, ow],
/// B [M]?, mask [N, G·kh·kw, oh, ow]? → [N, M, oh, ow].
pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    let (x, wt, offset) = (nd.req(0)?, nd.req(1)?, nd.req(2)?);
    let xd = cx.fixed_dims(x, "DeformConv X")?;
    let wd = cx.fixed_dims(wt, "DeformConv W")?;
    let od = cx.fixed_dims(offset, "DeformConv offset")?;
    if xd.len() != 4 || wd.len() != 4 || od.len() != 4 {
        return Err(format!("unsupported: DeformConv with X {xd:?}, W {wd:?} (only 2-D: rank-4 X, W and offset)"));
    }
    if !cx.dtype(x).is_float() {
        return Err(format!("unsupported: DeformConv of {}", cx.dtype(x)));
    }
    let ints = |k: &str, d: Vec<i64>| -> Vec<i64> { nd.a.ints(k).unwrap_or(d) };
    let ks = ints("kernel_shape", vec![wd[2] as i64, wd[3] as i64]);
    let st = ints("strides", vec![1, 1]);
    let dl = ints("dilations", vec![1, 1]);
    let pads = ints("pads", vec![0, 0, 0, 0]);
    let (group, og) = (nd.a.i("group", 1), nd.a.i("offset_group", 1));
    let (n, c, h, w) = (xd[0], xd[1], xd[2], xd[3]);
    let (m, (kh, kw), (oh, ow)) = (wd[0], (wd[2], wd[3]), (od[2], od[3]));
    let bad = |what: String| Err(format!("DeformConv: {what} (X {xd:?}, W {wd:?}, offset {od:?})"));
    if ks != [kh as i64, kw as i64] || st.len() != 2 || dl.len() != 2 || pads.len() != 4 || st.iter().chain(&dl).any(|&v| v < 1) || pads.iter().any(|&v| v < 0) {
        return bad(format!("kernel_shape {ks:?}, strides {st:?}, dilations {dl:?}, pads {pads:?} do not fit W"));
    }
    if group < 1 || og < 1 || c % group as usize != 0 || m % group as usize != 0 || wd[1] * group as usize != c || c % og as usize != 0 {
        return bad(format!("group {group} and offset_group {og} must divide the channels"));
    }
    let (group, og) = (group as usize, og as usize);
    let span = |i: usize, k: usize, d: i64, s: i64, p0: i64, p1: i64| (i as i64 + p0 + p1 - (k as i64 - 1) * d - 1) / s + 1;
    if od[0] != n || od[1] != og * kh * kw * 2 || oh as i64 != span(h, kh, dl[0], st[0], pads[0], pads[2]) || ow as i64 != span(w, kw, dl[1], st[1], pads[1], pads[3]) {
        return bad("offset must be [N, offset_group·kh·kw·2, oh, ow] with the convolution's output size".into());
    }
    let (taps, l) = (kh * kw, oh * ow);
    let p = taps * l;
    let ng = n * og;
    // Per sample p = (tap, output position): the undeformed pixel position of each axis, [1, 1, P].
    let (mut by, mut bx) = (vec![0f64; p], vec![0f64; p]);
    for i in 0..kh {
        for j in 0..kw {
            for a in 0..oh {
                for b in 0..ow {
                    let k = ((i * kw + j) * oh + a) * ow + b;
                    by[k] = (a as i64 * st[0] - pads[0] + i as i64 * dl[0]) as f64;
                    bx[k] = (b as i64 * st[1] - pads[1] + j as i64 * dl[1]) as f64;
                }
            }
        }
    }
    let of = cx.cast(offset, DType::F32)?;
    let of = cx.reshape_u(of, &[ng, taps, 2, l])?;
    let mut axis = Vec::new();
    for (k, base, d) in [(0, &by, h), (1, &bx, w)] {
        let dv = cx.slice_axis(of, 2, k, k + 1)?;
        let dv = cx.reshape_u(dv, &[ng, 1, p])?;
        let bc = cx.konst(ConstData::from_f64s(DType::F32, vec![1, 1, p], base));
        let pos = cx.bin(B::Add, dv, bc)?;
        axis.push(pixel_taps(cx, pos, d, true, Mode::Linear, Pad::Zeros)?);
    }
    let cg = c / og;
    let xf = cx.reshape_u(x, &[ng, cg, h * w])?;
    let terms = tap_terms(cx, xf, &[h, w], &axis, cg)?;
    let mut cols = combine(cx, &terms, B::Add)?; // [N·G, C/G, P]
    if let Some(mask) = nd.inp(4) {
        let md = cx.fixed_dims(mask, "DeformConv mask")?;
        if md != [n, og * taps, oh, ow] {
            return bad(format!("mask {md:?} must be [N, offset_group·kh·kw, oh, ow]"));
        }
        let mk = cx.cast(mask, cx.dtype(x))?;
        let mk = cx.reshape_u(mk, &[ng, 1, p])?;
        cols = cx.bin(B::Mul, cols, mk)?;
    }
    // im2col: [N, group, C/group·kh·kw, oh·ow] (channel-major, then tap: W's layout).
    let cpg = c / group;
    let cols = cx.reshape_u(cols, &[n, group, cpg * taps, l])?;
    // (Rank 4 like the columns, broadcast over the images.)
    let wm = cx.reshape_u(wt, &[1, group, m / group, cpg * taps])?;
    let y = cx.prim(MirOp::MatMul, &[wm, cols])?; // [N, group, M/group, L]
    let mut y = cx.reshape_u(y, &[n, m, oh, ow])?;
    if let Some(b) = nd.inp(3) {
        let bd = cx.fixed_dims(b, "DeformConv B")?;
        if bd != [m] {
            return bad(format!("B {bd:?} must be [M]"));
        }
        let b = cx.reshape_u(b, &[1, m, 1, 1])?;
        y = cx.bin(B::Add, y, b)?;
    }
    one(y)
}
