//! `rlxc compile --train`: the training step of the model (rlx_opt::train_step — forward, loss,
//! backward, optimizer update as one MIR graph) compiled beside the model as a second artifact,
//! `NAME_train_step` (entry point `NAME_train_step_run`), with the initial parameters and optimizer
//! state in `NAME_train_step.init.bin` (raw little-endian bytes of each input after the data, in
//! input order) and a `train` section in its manifest naming the inputs.

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
    /// Also compile the training step NAME_train_step (parameters in, updated parameters out)
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
}

/// The step's options from the flags (`rlxc compile --train` and `rlxc train` share them); a bad
/// number is a usage error naming its flag.
pub fn step_options(loss: LossArg, optimizer: OptimizerArg, lr: f64, momentum: f64, weight_decay: f64) -> Result<TrainOptions, Failure> {
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
    Ok(TrainOptions { loss, optimizer, output: 0 })
}

impl TrainArgs {
    pub fn options(&self) -> Result<TrainOptions, Failure> {
        step_options(self.loss, self.optimizer, self.lr, self.momentum, self.weight_decay)
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

/// The initial values file and the manifest's `train` section of a compiled step.
pub fn extras(step: &TrainStep, a: &TrainArgs, file: &str) -> (Vec<u8>, serde_json::Value) {
    let mut bytes = Vec::new();
    let mut inputs = Vec::new();
    for (name, c) in step.params.iter().chain(&step.state) {
        inputs.push(json!({ "name": name, "offset": bytes.len(), "bytes": c.data.len() }));
        bytes.extend_from_slice(c.data.bytes());
    }
    let section = json!({
        "loss": value_name(a.loss),
        "optimizer": value_name(a.optimizer),
        "lr": a.lr,
        "momentum": a.momentum,
        "weight_decay": if a.optimizer == OptimizerArg::Adamw { a.weight_decay } else { 0.0 },
        "data_inputs": step.data,
        "parameters": step.params.iter().map(|p| p.0.clone()).collect::<Vec<_>>(),
        "state": step.state.iter().map(|p| p.0.clone()).collect::<Vec<_>>(),
        "layout": "inputs = [model inputs..., target, parameters..., state...]; outputs = [loss, parameters'..., state'...]: outputs[1..] are the next step's inputs[data_inputs..]",
        "init": { "file": file, "sha256": rlxc::targets::write::sha256_hex(&bytes), "inputs": inputs },
    });
    (bytes, section)
}
