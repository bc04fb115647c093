//! Optimizer updates as MIR, appended after the backward pass so the update is part of the step:
//! SGD with (heavy-ball) momentum as PyTorch's `SGD` — v' = μv + g, p' = p − lr·v' — and Adam / AdamW
//! as PyTorch's — m' = β1·m + (1−β1)·g, v' = β2·v + (1−β2)·g², t' = t + 1,
//! p' = p − lr·((m'/(1−β1^t')) / (√(v'/(1−β2^t')) + ε) + λ·p) (λ, decoupled weight decay, is AdamW's;
//! 0 gives Adam).

use crate::autodiff::B;
use rlx_ir::{BinaryOp, UnaryOp, ValueId};

#[derive(Clone, Debug, PartialEq)]
pub enum Optimizer {
    Sgd { lr: f64, momentum: f64 },
    Adam { lr: f64, beta1: f64, beta2: f64, eps: f64, weight_decay: f64 },
}

impl Optimizer {
    /// Per-parameter state tensors (zero-initialized, the parameter's shape): momentum's velocity, or
    /// Adam's two moments.
    pub fn slots(&self) -> usize {
        match self {
            Optimizer::Sgd { momentum, .. } if *momentum == 0.0 => 0,
            Optimizer::Sgd { .. } => 1,
            Optimizer::Adam { .. } => 2,
        }
    }
    /// Whether the step carries a step counter (a scalar of the parameters' dtype, starting at 0).
    pub fn counts_steps(&self) -> bool {
        matches!(self, Optimizer::Adam { .. })
    }
}

/// The update of one parameter `p` with gradient `g` and state `slots`; `t1` is the incremented step
/// counter (Adam). Returns the new parameter and the new state.
pub fn update(o: &Optimizer, b: &mut B, p: ValueId, g: ValueId, slots: &[ValueId], t1: Option<ValueId>) -> Result<(ValueId, Vec<ValueId>), String> {
    match *o {
        Optimizer::Sgd { lr, momentum } => {
            if momentum == 0.0 {
                let s = b.scale(g, lr)?;
                return Ok((b.sub(p, s)?, vec![]));
            }
            let mv = b.scale(slots[0], momentum)?;
            let v1 = b.add(mv, g)?;
            let s = b.scale(v1, lr)?;
            Ok((b.sub(p, s)?, vec![v1]))
        }
        Optimizer::Adam { lr, beta1, beta2, eps, weight_decay } => {
            let t1 = t1.ok_or("Adam needs the step counter")?;
            let m = b.scale(slots[0], beta1)?;
            let gm = b.scale(g, 1.0 - beta1)?;
            let m1 = b.add(m, gm)?;
            let v = b.scale(slots[1], beta2)?;
            let gg = b.mul(g, g)?;
            let gv = b.scale(gg, 1.0 - beta2)?;
            let v1 = b.add(v, gv)?;
            // Bias corrections 1 − β^t' as scalars of the graph.
            let one = b.scalar(t1, 1.0);
            let b1 = b.scalar(t1, beta1);
            let b2 = b.scalar(t1, beta2);
            let p1 = b.bin(BinaryOp::Pow, b1, t1)?;
            let c1 = b.sub(one, p1)?;
            let p2 = b.bin(BinaryOp::Pow, b2, t1)?;
            let c2 = b.sub(one, p2)?;
            let mh = b.div(m1, c1)?;
            let vh = b.div(v1, c2)?;
            let r = b.un(UnaryOp::Sqrt, vh)?;
            let e = b.scalar(r, eps);
            let den = b.add(r, e)?;
            let mut step = b.div(mh, den)?;
            if weight_decay != 0.0 {
                let wd = b.scale(p, weight_decay)?;
                step = b.add(step, wd)?;
            }
            let s = b.scale(step, lr)?;
            Ok((b.sub(p, s)?, vec![m1, v1]))
        }
    }
}
