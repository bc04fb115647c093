//! Backward rules of convolution: the input's gradient is the transposed convolution of the output's
//! gradient with the same weights (output padding restoring the input size); the weight's gradient is
//! a convolution of the input with the output's gradient, batch and channel axes swapped and stride
//! and dilation exchanged (groups = 1), cut to the kernel size; the bias's is a sum.

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
        let r = xs.len();
        let mut swap: Vec<usize> = (0..r).collect();
        swap.swap(0, 1);
        let xt = b.op(MirOp::Transpose { perm: swap.clone() }, &[x])?; // [C, N, spatial…]
        let gt = b.op(MirOp::Transpose { perm: swap.clone() }, &[g])?; // [M, N, out spatial…]
        let op = MirOp::Conv { strides: dilations.to_vec(), pads: pads.to_vec(), dilations: strides.to_vec(), groups: 1 };
        let cw = b.op(op, &[xt, gt])?; // [C, M, ≥k…]
        let cs = b.ty(cw).shape.as_fixed().ok_or("conv gradient: unfixed shape")?;
        let cut = if (0..sp).any(|i| cs[i + 2] != ws[i + 2]) {
            let axes: Vec<usize> = (2..r).collect();
            let ends: Vec<i64> = ws[2..].iter().map(|&k| k as i64).collect();
            b.op(MirOp::Slice { axes, starts: vec![0; sp], ends, steps: vec![1; sp] }, &[cw])?
        } else {
            cw
        };
        out[1] = Some(b.op(MirOp::Transpose { perm: swap }, &[cut])?);
    }
    if s.ins.len() > 2 && s.need[2] {
        let axes: Vec<usize> = std::iter::once(0).chain(2..gs.len()).collect();
        out[2] = Some(b.sum(g, axes, false)?);
    }
    Ok(out)
}
