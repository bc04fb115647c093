//! A training step compiled for this machine's CPU and loaded in this process, with the parameters
//! and the optimizer state resident in its state region: `TrainStep::resident` makes them the
//! graph's state, so the artifact is `NAME_step(arena, state, [x, y], [loss])` and every call updates
//! them in place — nothing but a batch goes in and a loss comes out. Evaluation runs a second
//! artifact, the model with its parameters as inputs (`rlx_opt::train::with_params_as_inputs`), whose
//! parameter pointers are the step's state slots: the trained values are read where they live.
//!
//! Both are linked and loaded as `rlxc run --target host` loads a compile (`targets::cpu::dlopen`).

use crate::cli::{Failure, Target};
use crate::pipeline::Timings;
use crate::targets::cpu::dlopen::{self, lines, Line, RunFn, StepFn};
use crate::targets::cpu::{self, Compiled};
use crate::targets::run::port_bytes;
use crate::targets::Request;
use rlx_ir::lir::{Port, StateSlot};
use rlx_ir::{Blob, ConstData, DType, Mir};
use rlx_opt::TrainStep;

pub struct CompiledTraining {
    // The libraries stay loaded while `step` and `eval` (pointers into them) are used.
    _libs: (libloading::Library, libloading::Library),
    step: StepFn,
    eval: RunFn,
    arena: Vec<Line>,
    eval_arena: Vec<Line>,
    state: Vec<Line>,
    slots: Vec<StateSlot>,
    /// The step's data ports (samples, targets) and its loss.
    pub data: Vec<Port>,
    loss: Port,
    /// The evaluation artifact's outputs; output 0 is the prediction.
    eval_outputs: Vec<Port>,
    outs: Vec<Vec<Line>>,
    n_params: usize,
    pub what: String,
}

fn scalar(ty: &rlx_ir::TensorType, bytes: &[u8]) -> f64 {
    match ty.dtype {
        DType::F64 => f64::from_le_bytes(bytes[..8].try_into().unwrap_or_default()),
        _ => f32::from_le_bytes(bytes[..4].try_into().unwrap_or_default()) as f64,
    }
}

impl CompiledTraining {
    /// Compiles `step` (resident form) and `eval` for this machine (`req`: name, --cpu, --backend),
    /// loads both and writes the initial parameters and zero optimizer state into the state region.
    pub fn compile(step: &TrainStep, eval: &Mir, req: &Request, tm: &mut Timings) -> Result<CompiledTraining, Failure> {
        let sreq = Request { name: format!("{}_train_step", req.name), ..req.clone() };
        let ereq = Request { name: format!("{}_eval", req.name), ..req.clone() };
        let s: Compiled = cpu::compile(Target::Host, &step.resident(), &sreq, tm)?;
        let e: Compiled = cpu::compile(Target::Host, eval, &ereq, tm)?;
        let initial = step.initial();
        let n_params = step.params.len();
        let bad = |why: String| Failure::model(format!("internal error: the compiled training step {why}"));
        if s.lir.state.len() != initial.len() || s.lir.inputs.len() != 2 || s.lir.outputs.len() != 1 {
            return Err(bad(format!("has {} state tensors, {} inputs, {} outputs", s.lir.state.len(), s.lir.inputs.len(), s.lir.outputs.len())));
        }
        if e.lir.inputs.len() != 1 + n_params || e.lir.outputs.is_empty() {
            return Err(bad(format!("evaluation takes {} inputs for {n_params} parameters", e.lir.inputs.len())));
        }
        let loss = s.lir.outputs[0].clone();
        if !matches!(loss.ty.dtype, DType::F32 | DType::F64) || loss.ty.shape.numel() != Some(1) {
            return Err(bad(format!("gives a loss of type {}", loss.ty)));
        }
        let mut state = lines(s.lir.state_bytes);
        {
            // SAFETY: `state` is `lines.len() * 64` initialized bytes.
            let bytes = unsafe { std::slice::from_raw_parts_mut(state.as_mut_ptr() as *mut u8, state.len() * 64) };
            for (slot, c) in s.lir.state.iter().zip(&initial) {
                let n = port_bytes(&slot.port.ty);
                if n != c.data.len() || slot.offset + n > s.lir.state_bytes {
                    return Err(bad(format!("state '{}' holds {n} bytes, its initial value {}", slot.port.name, c.data.len())));
                }
                bytes[slot.offset..slot.offset + n].copy_from_slice(c.data.bytes());
            }
        }
        let what = format!("host ({}, {})", s.target.cpu, s.target.backend.name());
        let slib = dlopen::open(&s, tm)?;
        let elib = dlopen::open(&e, tm)?;
        let stepf: StepFn = *dlopen::symbol::<StepFn>(&slib, &format!("{}_step", s.object_name))?;
        let evalf: RunFn = *dlopen::symbol::<RunFn>(&elib, &format!("{}_run", e.object_name))?;
        Ok(CompiledTraining {
            _libs: (slib, elib),
            step: stepf,
            eval: evalf,
            arena: lines(s.lir.arena_bytes),
            eval_arena: lines(e.lir.arena_bytes),
            state,
            slots: s.lir.state.clone(),
            data: s.lir.inputs.clone(),
            loss,
            outs: e.lir.outputs.iter().map(|p| lines(port_bytes(&p.ty))).collect(),
            eval_outputs: e.lir.outputs.clone(),
            n_params,
            what,
        })
    }

    /// Rows per call (the batch the step was compiled for).
    pub fn batch(&self) -> usize {
        self.data[0].ty.shape.as_fixed().and_then(|s| s.first().copied()).unwrap_or(1)
    }

    /// One training step on a batch (`x`, `y`: the bytes of the data ports); returns the loss.
    pub fn step(&mut self, x: &[u8], y: &[u8]) -> Result<f64, Failure> {
        for (b, p) in [x, y].iter().zip(&self.data) {
            if b.len() != port_bytes(&p.ty) {
                return Err(Failure::model(format!("a batch of '{}' holds {} bytes, the step takes {}", p.name, b.len(), port_bytes(&p.ty))));
            }
        }
        let mut loss = [0u8; 8];
        let ins = [x.as_ptr(), y.as_ptr()];
        let outs = [loss.as_mut_ptr()];
        // SAFETY: the inputs hold exactly their ports' bytes (checked above), the loss output is one
        // f32/f64 (checked at load); arena and state are 64-aligned and at least arena_bytes /
        // state_bytes long, and the state holds the values the previous call left.
        let code = unsafe { (self.step)(self.arena.as_mut_ptr() as *mut u8, self.state.as_mut_ptr() as *mut u8, ins.as_ptr(), outs.as_ptr()) };
        if code != 0 {
            return Err(Failure::model(format!("the compiled training step returned error code {code}")));
        }
        Ok(scalar(&self.loss.ty, &loss))
    }

    /// The model's prediction (output 0) for one batch of samples `x`, with the current parameters,
    /// as f64 values.
    pub fn predict(&mut self, x: &[u8]) -> Result<Vec<f64>, Failure> {
        if x.len() != port_bytes(&self.data[0].ty) {
            return Err(Failure::model(format!("a batch of samples holds {} bytes, the model takes {}", x.len(), port_bytes(&self.data[0].ty))));
        }
        let base = self.state.as_ptr() as *const u8;
        let mut ins: Vec<*const u8> = vec![x.as_ptr()];
        // SAFETY: each slot lies inside the state region (checked at load).
        ins.extend(self.slots[..self.n_params].iter().map(|s| unsafe { base.add(s.offset) }));
        let outs: Vec<*mut u8> = self.outs.iter_mut().map(|o| o.as_mut_ptr() as *mut u8).collect();
        // SAFETY: the parameters are read in place from the state region (the evaluation artifact's
        // parameter ports have the step's parameter types, in the same order); every output buffer
        // holds its port's bytes; the arena is 64-aligned and arena_bytes long.
        let code = unsafe { (self.eval)(self.eval_arena.as_mut_ptr() as *mut u8, ins.as_ptr(), outs.as_ptr()) };
        if code != 0 {
            return Err(Failure::model(format!("the compiled model returned error code {code}")));
        }
        let p = &self.eval_outputs[0];
        let n = port_bytes(&p.ty);
        // SAFETY: the output buffer holds at least n bytes.
        let bytes = unsafe { std::slice::from_raw_parts(self.outs[0].as_ptr() as *const u8, n) };
        let c = ConstData::new(p.ty.dtype, p.ty.shape.as_fixed().unwrap_or_default(), Blob::from_vec(bytes.to_vec())).map_err(Failure::model)?;
        Ok(c.to_f64_vec())
    }

    /// The current parameters (names and values, copied out of the state region).
    pub fn params(&self) -> Vec<(String, ConstData)> {
        // SAFETY: the state region is `len * 64` initialized bytes.
        let bytes = unsafe { std::slice::from_raw_parts(self.state.as_ptr() as *const u8, self.state.len() * 64) };
        self.slots[..self.n_params]
            .iter()
            .filter_map(|s| {
                let n = port_bytes(&s.port.ty);
                let c = ConstData::new(s.port.ty.dtype, s.port.ty.shape.as_fixed()?, Blob::from_vec(bytes[s.offset..s.offset + n].to_vec())).ok()?;
                Some((s.port.name.clone(), c))
            })
            .collect()
    }
}
