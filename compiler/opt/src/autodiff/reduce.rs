//! Backward rules of reductions and scans: sum and mean spread the gradient back over the reduced
//! axes; max and min send it to the elements equal to the result (split evenly between ties); prod
//! multiplies by y / x (undefined where an input is exactly 0); cumsum runs the other way.

use super::build::B;
use super::Site;
use rlx_ir::{BinaryOp, MirOp, ReduceOp, ValueId};

pub fn reduce(op: ReduceOp, axes: &[usize], keepdims: bool, b: &mut B, s: &Site, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    let (x, y) = (s.ins[0], s.outs[0]);
    let xt = b.ty(x);
    let kept = B::kept(&xt.shape, axes);
    let gk = if keepdims { g } else { b.reshape(g, &kept)? };
    let spread = |b: &mut B, v: ValueId| b.op(MirOp::Expand { shape: xt.shape.0.clone() }, &[v]);
    let gx = match op {
        ReduceOp::Sum => spread(b, gk)?,
        ReduceOp::Mean => {
            let mut n: u64 = 1;
            for &a in axes {
                let d = xt.shape.0[a].fixed().ok_or_else(|| format!("reduce_mean over symbolic axis {a} ({})", xt.shape.0[a]))?;
                n = n.saturating_mul(d);
            }
            let t = spread(b, gk)?;
            b.scale(t, 1.0 / n as f64)?
        }
        ReduceOp::Max | ReduceOp::Min => {
            let yk = if keepdims { y } else { b.reshape(y, &kept)? };
            let eq = b.bin(BinaryOp::Eq, x, yk)?;
            let mask = b.op(MirOp::Cast { to: xt.dtype }, &[eq])?;
            let cnt = b.sum(mask, axes.to_vec(), true)?;
            let share = b.div(gk, cnt)?;
            b.mul(mask, share)?
        }
        ReduceOp::Prod => {
            let yk = if keepdims { y } else { b.reshape(y, &kept)? };
            let t = b.mul(gk, yk)?;
            let t = spread(b, t)?;
            b.div(t, x)?
        }
    };
    Ok(vec![Some(gx)])
}

pub fn cumsum(axis: usize, exclusive: bool, reverse: bool, b: &mut B, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    Ok(vec![Some(b.op(MirOp::CumSum { axis, exclusive, reverse: !reverse }, &[g])?)])
}
