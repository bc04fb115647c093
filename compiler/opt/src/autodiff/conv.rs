//! Backward rules of convolution: the input's gradient is the transposed convolution of the output's
//! gradient with the same weights (output padding restoring the input size); the weight's gradient is
//! a convolution of the input with the output's gradient, batch and channel axes swapped and stride
//! and dilation exchanged (groups = 1), cut to the kernel size; the bias's is a sum. A transposed
//! convolution is the adjoint of a convolution: its input's gradient is the convolution of the
//! output's gradient with the same weights, its weights' gradient the same exchanged convolution with
//! the roles of input and gradient swapped.

use super::build::B;
use super::Site;
use rlx_ir::{MirOp, ValueId};

pub fn conv(strides: &[usize], pads: &[usize], dilations: &[usize], groups: usize, b: &mut B, s: &Site, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    let (x, w) = (s.ins[0], s.ins[1]);
    let xs = b.ty(x).shape.as_fixed().ok_or("the gradient of conv needs fixed input dims")?;
    let ws = b.ty(w).shape.as_fixed().ok_or("the gradient of conv needs fixed weight dims")?;
    let gs = b.ty(g).shape.as_fixed().ok_or("the gradient of conv needs fixed output dims")?;
    let sp = xs.len() - 2;
    let mut out = vec![None; s.ins.len()];
    if s.need[0] {
        // conv_transpose(g, w) gives (o-1)·s − pads + d·(k−1) + 1 + output_padding per spatial axis.
        let mut output_padding = Vec::with_capacity(sp);
        for i in 0..sp {
            let base = (gs[i + 2] as i64 - 1) * strides[i] as i64 - (pads[i] + pads[i + sp]) as i64 + dilations[i] as i64 * (ws[i + 2] as i64 - 1) + 1;
            let extra = xs[i + 2] as i64 - base;
            if extra < 0 {
                return Err(format!("conv gradient: spatial axis {i} does not invert ({base} > {})", xs[i + 2]));
            }
            output_padding.push(extra as usize);
        }
        let op = MirOp::ConvTranspose { strides: strides.to_vec(), pads: pads.to_vec(), dilations: dilations.to_vec(), groups, output_padding };
        out[0] = Some(b.op(op, &[g, w])?);
    }
    if s.need[1] {
        if groups != 1 {
            return Err(format!("no gradient rule for the weights of a grouped conv (groups {groups})"));
        }
        out[1] = Some(weight_grad(b, x, g, &ws, strides, pads, dilations)?);
    }
    bias(b, s, g, &mut out)?;
    Ok(out)
}

/// out[ca, cz, k…] = Σ over the batch and positions j of a[n, ca, j·s + k·d − p] · z[n, cz, j]: a
/// convolution of aᵀ [Ca, N, …] with zᵀ [Cz, N, …] as its kernel, stride and dilation exchanged, cut
/// to the kernel size k.
fn exchanged(b: &mut B, a: ValueId, z: ValueId, k: &[usize], strides: &[usize], pads: &[usize], dilations: &[usize]) -> Result<ValueId, String> {
    let r = b.ty(a).shape.rank();
    let sp = r - 2;
    let mut swap: Vec<usize> = (0..r).collect();
    swap.swap(0, 1);
    let at = b.op(MirOp::Transpose { perm: swap.clone() }, &[a])?;
    let zt = b.op(MirOp::Transpose { perm: swap }, &[z])?;
    let op = MirOp::Conv { strides: dilations.to_vec(), pads: pads.to_vec(), dilations: strides.to_vec(), groups: 1 };
    let cw = b.op(op, &[at, zt])?;
    let cs = b.ty(cw).shape.as_fixed().ok_or("conv gradient: unfixed shape")?;
    if (0..sp).any(|i| cs[i + 2] != k[i]) {
        let axes: Vec<usize> = (2..r).collect();
        let ends: Vec<i64> = k.iter().map(|&k| k as i64).collect();
        return b.op(MirOp::Slice { axes, starts: vec![0; sp], ends, steps: vec![1; sp] }, &[cw]);
    }
    Ok(cw)
}

fn weight_grad(b: &mut B, x: ValueId, g: ValueId, ws: &[usize], strides: &[usize], pads: &[usize], dilations: &[usize]) -> Result<ValueId, String> {
    let r = ws.len();
    let cw = exchanged(b, x, g, &ws[2..], strides, pads, dilations)?; // [C, M, k…]
    let mut swap: Vec<usize> = (0..r).collect();
    swap.swap(0, 1);
    b.op(MirOp::Transpose { perm: swap }, &[cw])
}

fn bias(b: &mut B, s: &Site, g: ValueId, out: &mut [Option<ValueId>]) -> Result<(), String> {
    if s.ins.len() > 2 && s.need[2] {
        let r = b.ty(g).shape.rank();
        let axes: Vec<usize> = std::iter::once(0).chain(2..r).collect();
        out[2] = Some(b.sum(g, axes, false)?);
    }
    Ok(())
}

/// conv_transpose(x [N,C,…], w [C, M/groups, k…]) is the adjoint of conv(·, w): dx = conv(g, w); for
/// groups = 1, dw[c, m, k] = Σ x[n, c, i] · g[n, m, i·s + k·d − p] = the exchanged convolution of g
/// by x; the output padding only adds positions no input reaches.
pub fn conv_transpose(strides: &[usize], pads: &[usize], dilations: &[usize], groups: usize, b: &mut B, s: &Site, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    let (x, w) = (s.ins[0], s.ins[1]);
    let ws = b.ty(w).shape.as_fixed().ok_or("the gradient of conv_transpose needs fixed weight dims")?;
    let mut out = vec![None; s.ins.len()];
    if s.need[0] {
        let op = MirOp::Conv { strides: strides.to_vec(), pads: pads.to_vec(), dilations: dilations.to_vec(), groups };
        let dx = b.op(op, &[g, w])?;
        let (dt, xt) = (b.ty(dx).shape, b.ty(x).shape);
        if dt != xt {
            return Err(format!("conv_transpose gradient: the adjoint conv gives {dt}, the input is {xt}"));
        }
        out[0] = Some(dx);
    }
    if s.need[1] {
        if groups != 1 {
            return Err(format!("no gradient rule for the weights of a grouped conv_transpose (groups {groups})"));
        }
        // [M, C, k…] from (g, x), transposed to w's [C, M, k…].
        let r = ws.len();
        let mw = exchanged(b, g, x, &ws[2..], strides, pads, dilations)?;
        let mut swap: Vec<usize> = (0..r).collect();
        swap.swap(0, 1);
        out[1] = Some(b.op(MirOp::Transpose { perm: swap }, &[mw])?);
    }
    bias(b, s, g, &mut out)?;
    Ok(out)
}
