//! RotaryEmbedding (opset 23) as MIR primitives: the rotated part of each head split into halves
//! (or even/odd lanes when `interleaved`), rotated by the cos/sin caches (gathered by `position_ids`
//! when given), concatenated back with the part past `rotary_embedding_dim`. Inputs of rank 4 are
//! [batch, heads, seq, head], of rank 3 [batch, seq, heads·head] with `num_heads`.

use super::{one, Node, R};
use crate::onnx::Ctx;
use rlx_ir::{BinaryOp, Dim, MirOp, ValueId};

/// The ONNX op types this family translates.
pub(super) const OPS: &[&str] = &["RotaryEmbedding"];

fn slice(cx: &mut Ctx, x: ValueId, axis: usize, lo: usize, hi: usize, step: usize) -> Result<ValueId, String> {
    cx.prim(MirOp::Slice { axes: vec![axis], starts: vec![lo as i64], ends: vec![hi as i64], steps: vec![step as i64] }, &[x])
}

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    let a = &nd.a;
    let (x, cos, sin) = (nd.req(0)?, nd.req(1)?, nd.req(2)?);
    let xd = cx.fixed_dims(x, "RotaryEmbedding input")?;
    // To [batch, seq, heads, head].
    let x4 = match xd.len() {
        4 => cx.transpose(x, vec![0, 2, 1, 3])?,
        3 => {
            let nh = a.i("num_heads", 0);
            if nh <= 0 || xd[2] % nh as usize != 0 {
                return Err(format!("a 3-D input needs num_heads dividing its hidden size {}, got {nh}", xd[2]));
            }
            cx.reshape_u(x, &[xd[0], xd[1], nh as usize, xd[2] / nh as usize])?
        }
        r => return Err(format!("input must be 3-D or 4-D, got rank {r}")),
    };
    let d4 = cx.fixed_dims(x4, "RotaryEmbedding input")?;
    let hd = d4[3];
    let rd = match a.i("rotary_embedding_dim", 0) {
        0 => hd,
        v if v > 0 && v as usize <= hd && v % 2 == 0 => v as usize,
        v => return Err(format!("rotary_embedding_dim {v} must be even and at most the head size {hd}")),
    };
    let half = rd / 2;
    let (cos, sin) = match nd.inp(3) {
        Some(p) => (cx.prim(MirOp::Gather { axis: 0 }, &[cos, p])?, cx.prim(MirOp::Gather { axis: 0 }, &[sin, p])?),
        None => (cos, sin),
    };
    for c in [cos, sin] {
        if cx.dims(c).last() != Some(&Dim::Fixed(half as u64)) {
            return Err(format!("cos/sin cache {} must end in rotary_embedding_dim / 2 = {half}", cx.ty(c)));
        }
    }
    let cos = cx.unsqueeze(cos, &[2])?;
    let sin = cx.unsqueeze(sin, &[2])?;
    let interleaved = a.i("interleaved", 0) != 0;
    let (x1, x2) = if interleaved {
        (slice(cx, x4, 3, 0, rd, 2)?, slice(cx, x4, 3, 1, rd, 2)?)
    } else {
        (slice(cx, x4, 3, 0, half, 1)?, slice(cx, x4, 3, half, rd, 1)?)
    };
    let c1 = cx.bin(BinaryOp::Mul, cos, x1)?;
    let s2 = cx.bin(BinaryOp::Mul, sin, x2)?;
    let real = cx.bin(BinaryOp::Sub, c1, s2)?;
    let s1 = cx.bin(BinaryOp::Mul, sin, x1)?;
    let c2 = cx.bin(BinaryOp::Mul, cos, x2)?;
    let imag = cx.bin(BinaryOp::Add, s1, c2)?;
    let rot = if interleaved {
        let re = cx.unsqueeze(real, &[4])?;
        let im = cx.unsqueeze(imag, &[4])?;
        let pair = cx.prim(MirOp::Concat { axis: 4 }, &[re, im])?;
        cx.reshape_u(pair, &[d4[0], d4[1], d4[2], rd])?
    } else {
        cx.prim(MirOp::Concat { axis: 3 }, &[real, imag])?
    };
    let y = if rd < hd {
        let rest = slice(cx, x4, 3, rd, hd, 1)?;
        cx.prim(MirOp::Concat { axis: 3 }, &[rot, rest])?
    } else {
        rot
    };
    one(if xd.len() == 4 { cx.transpose(y, vec![0, 2, 1, 3])? } else { cx.reshape_u(y, &xd)? })
}
