//! `rlxc compile --train`: the training step of the model (rlx_opt::train_step — forward, loss,
//! backward, optimizer update as one MIR graph) compiled beside the model as a second artifact,
//! `NAME_train_step`, resident (`TrainStep::resident`): the parameters and optimizer state are the
//! artifact's state, so the entry point is `NAME_train_step_step(arena, state, [x, target], [loss])`
//! and each call updates them in place. `NAME_train_step.init.bin` is the initial state image (the
//! model's parameters and zero optimizer state at their offsets), and the manifest's `train` section
//! names the tensors.

use crate::Failure;
use rlx_ir::Mir;
use rlx_opt::{train_step, Loss, Optimizer, TrainOptions, TrainStep};
use serde_json::json;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossArg {
    /// Softmax cross-entropy of logits [batch, classes] against i64 labels [batch]
    CrossEntropy,
    /// Mean squared error against a target of the output's type
    Mse,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptimizerArg {
    /// SGD, with heavy-ball momentum when --momentum is given
    Sgd,
    /// Adam (beta1 0.9, beta2 0.999, eps 1e-8)
    Adam,
    /// AdamW: Adam with decoupled --weight-decay (default 0.01)
    Adamw,
}

#[derive(clap::Args, Debug)]
pub struct TrainArgs {
    /// Also compile the training step NAME_train_step (parameters and optimizer state resident in its state)
    #[arg(long)]
    pub train: bool,
    /// --train: the loss
    #[arg(long, value_enum, default_value_t = LossArg::CrossEntropy, requires = "train")]
    pub loss: LossArg,
    /// --train: the optimizer
    #[arg(long, value_enum, default_value_t = OptimizerArg::Sgd, requires = "train")]
    pub optimizer: OptimizerArg,
    /// --train: learning rate
    #[arg(long, default_value_t = 0.01, requires = "train")]
    pub lr: f64,
    /// --train --optimizer sgd: momentum
    #[arg(long, default_value_t = 0.0, requires = "train")]
    pub momentum: f64,
    /// --train --optimizer adamw: decoupled weight decay
    #[arg(long, default_value_t = 0.01, requires = "train")]
    pub weight_decay: f64,
    /// --train of a QDQ model: also train its quantization scales (LSQ) instead of keeping them fixed
    #[arg(long, requires = "train")]
    pub learn_scales: bool,
}

/// The step's options from the flags (`rlxc compile --train` and `rlxc train` share them); a bad
/// number is a usage error naming its flag.
pub fn step_options(loss: LossArg, optimizer: OptimizerArg, lr: f64, momentum: f64, weight_decay: f64, learn_scales: bool) -> Result<TrainOptions, Failure> {
    let finite = |v: f64, what: &str| {
        if v.is_finite() && v >= 0.0 {
            Ok(v)
        } else {
            Err(Failure::usage(format!("{what} must be a finite number >= 0, got {v}")))
        }
    };
    let lr = finite(lr, "--lr")?;
    let optimizer = match optimizer {
        OptimizerArg::Sgd => Optimizer::Sgd { lr, momentum: finite(momentum, "--momentum")? },
        OptimizerArg::Adam | OptimizerArg::Adamw => Optimizer::Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: if optimizer == OptimizerArg::Adamw { finite(weight_decay, "--weight-decay")? } else { 0.0 },
        },
    };
    let loss = match loss {
        LossArg::CrossEntropy => Loss::CrossEntropy,
        LossArg::Mse => Loss::Mse,
    };
    Ok(TrainOptions { loss, optimizer, output: 0, learn_scales })
}

impl TrainArgs {
    pub fn options(&self) -> Result<TrainOptions, Failure> {
        step_options(self.loss, self.optimizer, self.lr, self.momentum, self.weight_decay, self.learn_scales)
    }

    /// The training step of `mir`, when --train was given.
    pub fn step(&self, mir: &Mir) -> Result<Option<TrainStep>, Failure> {
        if !self.train {
            return Ok(None);
        }
        let o = self.options()?;
        train_step(mir, &o).map(Some).map_err(|e| Failure::model(format!("cannot build the training step: {e}")))
    }
}

fn value_name(v: impl clap::ValueEnum) -> String {
    v.to_possible_value().map(|p| p.get_name().to_string()).unwrap_or_default()
}

/// The initial state image and the manifest's `train` section of a compiled resident step, from the
/// `state` section of its manifest (the planner's offsets): `STATE_BYTES` bytes with each parameter
/// and optimizer state tensor at its offset (parameters as the model has them, state zero).
pub fn extras(step: &TrainStep, a: &TrainArgs, file: &str, state: &serde_json::Value) -> Result<(Vec<u8>, serde_json::Value), Failure> {
    let bad = |why: String| Failure::model(format!("internal error: the compiled training step's state {why}"));
    let size = state["bytes"].as_u64().ok_or_else(|| bad("has no size".into()))? as usize;
    let mut bytes = vec![0u8; size];
    let values: Vec<&(String, rlx_ir::ConstData)> = step.params.iter().chain(&step.state).collect();
    let tensors = state["tensors"].as_array().cloned().unwrap_or_default();
    if tensors.len() != values.len() {
        return Err(bad(format!("has {} tensors, the step {}", tensors.len(), values.len())));
    }
    let mut layout = Vec::new();
    for (t, (name, c)) in tensors.iter().zip(values) {
        let off = t["offset"].as_u64().unwrap_or(u64::MAX) as usize;
        let src = c.data.bytes();
        if t["name"].as_str() != Some(name.as_str()) || off.checked_add(src.len()).is_none_or(|end| end > size) {
            return Err(bad(format!("tensor {t} is not '{name}' of {} bytes within {size}", src.len())));
        }
        bytes[off..off + src.len()].copy_from_slice(src);
        layout.push(json!({ "name": name, "offset": off, "bytes": src.len() }));
    }
    let section = json!({
        "loss": value_name(a.loss),
        "optimizer": value_name(a.optimizer),
        "lr": a.lr,
        "momentum": a.momentum,
        "weight_decay": if a.optimizer == OptimizerArg::Adamw { a.weight_decay } else { 0.0 },
        "learn_scales": a.learn_scales,
        "data_inputs": step.data,
        "parameters": step.params.iter().map(|p| p.0.clone()).collect::<Vec<_>>(),
        "state": step.state.iter().map(|p| p.0.clone()).collect::<Vec<_>>(),
        "layout": "resident: NAME_step(arena, state, [model inputs..., target], [loss]); the parameters and optimizer state live in the state region (the manifest's state section, the header's NAME_STATE_i_OFFSET) and every call updates them in place; load the init file into the state to start, read trained parameters at their offsets",
        "init": { "file": file, "sha256": rlxc::targets::write::sha256_hex(&bytes), "bytes": size, "tensors": layout },
    });
    Ok((bytes, section))
}
