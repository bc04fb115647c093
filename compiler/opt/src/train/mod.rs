//! A training step as one MIR graph: forward, loss, backward (`autodiff::backprop`) and the optimizer
//! update. The model's parameters (its named float constants) become inputs and their updated values
//! outputs, so the step compiles and runs like any model:
//!
//! ```text
//! inputs  = [model inputs…, target, params…, state…]
//! outputs = [loss, params'…, state'…]
//! ```
//!
//! `outputs[1..]` are the next step's `inputs[data..]` (`TrainStep::data` = model inputs + 1): the
//! caller feeds them back. State is per parameter, in parameter order (momentum: `NAME.velocity`;
//! Adam: `NAME.m`, `NAME.v`), then Adam's step counter `step`. A QDQ model trains quantization-aware
//! ([`qat`]: its QuantizeLinear → DequantizeLinear pairs become `fake_quantize`).

pub mod loss;
pub mod optim;
pub mod qat;

pub use optim::Optimizer;

use crate::autodiff::{backprop, AdError, B};
use rlx_ir::{ConstData, DType, Def, Mir, TensorType, ValueId};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// Softmax cross-entropy of logits [batch, classes] against integer labels [batch] (i64).
    CrossEntropy,
    /// Mean squared error against a target of the prediction's type.
    Mse,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TrainOptions {
    pub loss: Loss,
    pub optimizer: Optimizer,
    /// Which model output is the prediction.
    pub output: usize,
    /// Quantization-aware training also trains the `fake_quantize` scales (named float constants;
    /// LSQ's estimator, per-tensor scales) as parameters; otherwise they stay fixed.
    pub learn_scales: bool,
}

pub struct TrainStep {
    pub graph: Mir,
    /// How many leading inputs are data (model inputs, then the target).
    pub data: usize,
    /// Parameter names and initial values (the model's constants), in input order.
    pub params: Vec<(String, ConstData)>,
    /// Optimizer state names and initial values (zeros), in input order after the parameters.
    pub state: Vec<(String, ConstData)>,
}

impl TrainStep {
    /// The initial values of every input after the data: parameters, then state.
    pub fn initial(&self) -> Vec<ConstData> {
        self.params.iter().chain(&self.state).map(|(_, c)| c.clone()).collect()
    }

    /// The step with the parameters and the optimizer state as the graph's state (`Graph::state`):
    /// inputs are the data, the output is the loss, and a compiled artifact keeps parameters and
    /// state resident in its state region between calls (`NAME_step(arena, state, inputs, outputs)`),
    /// updated in place where the planner proves it safe.
    pub fn resident(&self) -> Mir {
        let mut g = self.graph.clone();
        let n = (self.params.len() + self.state.len()) as u32;
        let (ni, no) = (g.inputs.len() as u32, g.outputs.len() as u32);
        g.state = (0..n).map(|k| rlx_ir::State { input: ni - n + k, output: no - n + k }).collect();
        g
    }
}

fn zeros(t: &TensorType, what: &str) -> Result<ConstData, AdError> {
    let dims = t.shape.as_fixed().ok_or_else(|| AdError { node: None, op: None, msg: format!("{what} needs fixed dims, got {t}") })?;
    let n: usize = dims.iter().product();
    Ok(ConstData::from_f64s(t.dtype, dims, &vec![0.0; n]))
}

/// Turns the parameters of `g` — the named float constants some node reads, in value order — into
/// inputs after the existing ones; returns their names and values, and their values' ids. A constant
/// read only as a `fake_quantize` scale is a quantization parameter, not a trained one unless
/// `learn_scales` (quantization-aware training trains the weights through the straight-through
/// estimator, with fixed scales or, with `learn_scales`, scales trained by LSQ's estimator; a
/// QDQ model's QuantizeLinear → DequantizeLinear pairs are `fake_quantize` by then: [`qat`]).
fn params_to_inputs(g: &mut Mir, learn_scales: bool) -> Result<(Vec<(String, ConstData)>, Vec<ValueId>), AdError> {
    let mut read = vec![false; g.values.len()];
    for n in &g.nodes {
        for (k, &i) in n.inputs.iter().enumerate() {
            let fq = matches!(n.op, rlx_ir::MirOp::FakeQuantize { .. });
            read[i.index()] |= !fq || k == 0 || (k == 1 && learn_scales);
        }
    }
    let mut params = Vec::new();
    let mut pids: Vec<ValueId> = Vec::new();
    for k in 0..g.values.len() {
        let v = &g.values[k];
        if let (Def::Const(c), Some(name)) = (&v.def, &v.name) {
            if c.dtype.is_float() && read[k] {
                params.push((name.clone(), c.clone()));
                pids.push(ValueId(k as u32));
            }
        }
    }
    if params.is_empty() {
        return Err(AdError { node: None, op: None, msg: "the model has no parameters (named float constants) to train".into() });
    }
    for &p in &pids {
        g.values[p.index()].def = Def::Input(g.inputs.len() as u32);
        g.inputs.push(p);
    }
    Ok((params, pids))
}

/// The model with its parameters as inputs after its own (`inputs = [model inputs…, params…]`, the
/// parameters in [`TrainStep::params`] order): the forward pass run with trained values.
pub fn with_params_as_inputs(model: &Mir, learn_scales: bool) -> Result<Mir, AdError> {
    let mut g = qat::fake_quantize_pairs(model);
    params_to_inputs(&mut g, learn_scales)?;
    Ok(g)
}

/// Builds the training step of `model` (see the module doc for its inputs and outputs).
pub fn train_step(model: &Mir, o: &TrainOptions) -> Result<TrainStep, AdError> {
    let gerr = |msg: String| AdError { node: None, op: None, msg };
    let mut g = qat::fake_quantize_pairs(model);
    let pred = *g.outputs.get(o.output).ok_or_else(|| gerr(format!("the model has no output {}", o.output)))?;
    let pt = g.ty(pred).clone();
    let target = match o.loss {
        Loss::CrossEntropy => {
            let n = pt.shape.0.first().cloned().ok_or_else(|| gerr(format!("cross-entropy needs logits [batch, classes], got {pt}")))?;
            g.add_input("labels", TensorType::new(DType::I64, rlx_ir::Shape(vec![n])))
        }
        Loss::Mse => g.add_input("target", pt.clone()),
    };
    let data = g.inputs.len();
    let (params, pids) = params_to_inputs(&mut g, o.learn_scales)?;
    let loss = {
        let mut b = B::new(&mut g, "loss".into());
        match o.loss {
            Loss::CrossEntropy => loss::cross_entropy(&mut b, pred, target),
            Loss::Mse => loss::mse(&mut b, pred, target),
        }
        .map_err(gerr)?
    };
    let one = g.add_const(None, ConstData::scalar(g.ty(loss).dtype, 1.0));
    let grads = backprop(&mut g, &[(loss, one)], &pids)?;
    // Optimizer state inputs.
    let slot_names: &[&str] = match o.optimizer.slots() {
        0 => &[],
        1 => &["velocity"],
        _ => &["m", "v"],
    };
    let mut state = Vec::new();
    let mut slots: Vec<Vec<ValueId>> = Vec::new();
    for ((name, _), &p) in params.iter().zip(&pids) {
        let t = g.ty(p).clone();
        let mut s = Vec::new();
        for sn in slot_names {
            let full = format!("{name}.{sn}");
            state.push((full.clone(), zeros(&t, &full)?));
            s.push(g.add_input(&full, t.clone()));
        }
        slots.push(s);
    }
    let mut outputs = vec![loss];
    let mut new_state = Vec::new();
    let mut b = B::new(&mut g, "optimizer".into());
    let t1 = if o.optimizer.counts_steps() {
        let dt = pt.dtype;
        state.push(("step".into(), ConstData::scalar(dt, 0.0)));
        let t = b.g.add_input("step", TensorType::fixed(dt, &[]));
        let one = b.scalar(t, 1.0);
        Some(b.add(t, one).map_err(gerr)?)
    } else {
        None
    };
    for ((&p, &gr), s) in pids.iter().zip(&grads).zip(&slots) {
        let (p1, s1) = optim::update(&o.optimizer, &mut b, p, gr, s, t1).map_err(gerr)?;
        outputs.push(p1);
        new_state.extend(s1);
    }
    outputs.extend(new_state);
    outputs.extend(t1);
    g.outputs = outputs;
    Ok(TrainStep { graph: crate::fold::dce(&g), data, params, state })
}
