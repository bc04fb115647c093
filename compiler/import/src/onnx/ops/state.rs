//! Ops that update a decode state: TensorScatter (a KV cache with rows written at per-batch positions,
//! linear or circular) as a gather of the update plus a `where`, so every back end with gather runs it;
//! CausalConvWithState (a depthwise causal 1-D convolution over the past state and the input, optional
//! SiLU) as a concat, a grouped `conv` and a slice for the new state.

use super::build::norm_axis;
use super::{Node, R};
use crate::onnx::Ctx;
use rlx_ir::{BinaryOp as B, ConstData, DType, Dim, MirOp, UnaryOp as U};

pub(super) const OPS: &[&str] = &["TensorScatter", "CausalConvWithState"];

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    if nd.op == "TensorScatter" {
        tensor_scatter(cx, nd)
    } else {
        causal_conv(cx, nd)
    }
}

fn tensor_scatter(cx: &mut Ctx, nd: &Node) -> R {
    let (past, upd) = (nd.req(0)?, nd.req(1)?);
    let circular = match nd.a.s("mode").as_deref().unwrap_or("linear") {
        "linear" => false,
        "circular" => true,
        m => return Err(format!("TensorScatter: unknown mode '{m}'")),
    };
    let pd = cx.fixed_dims(past, "TensorScatter past_cache")?;
    let ud = cx.fixed_dims(upd, "TensorScatter update")?;
    let r = pd.len();
    let axis = norm_axis(nd.a.i("axis", -2), r)?;
    if axis == 0 || ud.len() != r || (0..r).any(|i| if i == axis { ud[i] > pd[i] } else { ud[i] != pd[i] }) {
        return Err(format!("TensorScatter: update {ud:?} does not fit past_cache {pd:?} on axis {axis} (axis ≥ 1)"));
    }
    let (b, l, s) = (pd[0], pd[axis] as i64, ud[axis] as i64);
    let wi = match nd.inp(2) {
        Some(w) => cx.cast(w, DType::I64)?,
        None => cx.konst(ConstData::from_i64(vec![b], &vec![0; b])),
    };
    // Per cache position j of batch row n: the update row j - w[n] (mod L when circular), if in [0, S).
    let mut bshape = vec![1usize; r];
    bshape[0] = b;
    let w = cx.reshape_u(wi, &bshape)?;
    let mut jshape = vec![1usize; r];
    jshape[axis] = l as usize;
    let j = cx.konst(ConstData::from_i64(jshape, &(0..l).collect::<Vec<_>>()));
    let mut src = cx.bin(B::Sub, j, w)?;
    if circular {
        let lv = cx.scalar(DType::I64, l as f64);
        src = cx.bin(B::Mod, src, lv)?;
    }
    let (z, sv) = (cx.scalar(DType::I64, 0.0), cx.scalar(DType::I64, (s - 1) as f64));
    let ge = cx.bin(B::Ge, src, z)?;
    let le = cx.bin(B::Le, src, sv)?;
    let hit = cx.bin(B::And, ge, le)?;
    let lo = cx.bin(B::Max, src, z)?;
    let idx = cx.bin(B::Min, lo, sv)?;
    let full: Vec<Dim> = pd.iter().map(|&d| Dim::Fixed(d as u64)).collect();
    let idx = cx.prim(MirOp::Expand { shape: full.clone() }, &[idx])?;
    let g = cx.prim(MirOp::GatherElements { axis }, &[upd, idx])?;
    let hit = cx.prim(MirOp::Expand { shape: full }, &[hit])?;
    Ok(vec![cx.prim(MirOp::Where, &[hit, g, past])?])
}

fn causal_conv(cx: &mut Ctx, nd: &Node) -> R {
    let (x, w) = (nd.req(0)?, nd.req(1)?);
    let act = nd.a.s("activation").unwrap_or_else(|| "none".into());
    if !matches!(act.as_str(), "none" | "silu" | "swish") {
        return Err(format!("CausalConvWithState: unknown activation '{act}' (none, silu, swish)"));
    }
    let xd = cx.fixed_dims(x, "CausalConvWithState input")?;
    let wd = cx.fixed_dims(w, "CausalConvWithState weight")?;
    if xd.len() != 3 || wd.len() != 3 || wd[0] != xd[1] || wd[1] != 1 || wd[2] == 0 {
        return Err(format!("CausalConvWithState: input {xd:?} must be [B, C, L] and weight {wd:?} [C, 1, k]"));
    }
    let (b, c, len, k) = (xd[0], xd[1], xd[2], wd[2]);
    let padded = match nd.inp(3) {
        Some(p) => {
            let pdims = cx.fixed_dims(p, "CausalConvWithState past_state")?;
            if pdims != [b, c, k - 1] {
                return Err(format!("CausalConvWithState: past_state {pdims:?} must be [{b}, {c}, {}]", k - 1));
            }
            if k == 1 { x } else { cx.prim(MirOp::Concat { axis: 2 }, &[p, x])? }
        }
        None => {
            if k == 1 { x } else { cx.prim(MirOp::Pad { pads: vec![0, 0, k as i64 - 1, 0, 0, 0], mode: rlx_ir::PadMode::Constant, value: 0.0 }, &[x])? }
        }
    };
    let mut ins = vec![padded, w];
    ins.extend(nd.inp(2));
    let mut y = cx.prim(MirOp::Conv { strides: vec![1], pads: vec![0, 0], dilations: vec![1], groups: c }, &ins)?;
    if act != "none" {
        let dt = cx.dtype(y);
        let yf = cx.cast(y, DType::F32)?;
        let sg = cx.un(U::Sigmoid, yf)?;
        let m = cx.bin(B::Mul, yf, sg)?;
        y = cx.cast(m, dt)?;
    }
    let total = len + k - 1;
    let state = cx.slice_axis(padded, 2, total - (k - 1), total)?;
    Ok(vec![y, state])
}
