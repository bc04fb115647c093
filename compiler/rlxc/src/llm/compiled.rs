//! [`Step`] on a compiled stateful artifact: the cached step (`tokens`, `positions` i64[chunk] →
//! `logits` f32[1, vocab] of the chunk's last row, the KV cache as state; docs/targets.md "Stateful
//! artifacts") compiled for this machine's CPU, linked into a shared object and loaded in this process
//! (`targets::cpu::dlopen`). Prefill runs the prompt in chunks; decode runs one token. A call's tokens
//! fill the chunk's last rows; the rows before them are padding at position `context`, which writes
//! nothing to the state.
//!
//! The step owns the arena and the state; the weights live in the loaded object (one copy: the
//! compile's own buffers are dropped once it is loaded).

use super::Step;
use crate::cli::{Failure, Target};
use crate::pipeline::{CpuTarget, Timings};
use crate::targets::cpu::dlopen::{self, lines, Line, StepFn};
use crate::targets::cpu::{self, Compiled};
use crate::targets::Request;
use rlx_ir::lir::Lir;
use rlx_ir::{DType, Mir};

/// The shape of a cached step: (chunk, context, vocab), checked against the LIR's ports (logits: the
/// last row only).
fn step_shape(lir: &Lir) -> Result<(usize, usize, usize), Failure> {
    let bad = |why: &str| Failure::model(format!("the compiled program is not a language-model step ({why})"));
    let [t, p] = &lir.inputs[..] else { return Err(bad("it does not take tokens and positions")) };
    let [l] = &lir.outputs[..] else { return Err(bad("it does not give one logits output")) };
    let fixed = |ty: &rlx_ir::TensorType| ty.shape.as_fixed().ok_or_else(|| bad("a port's shape is symbolic"));
    let (ts, ps, ls) = (fixed(&t.ty)?, fixed(&p.ty)?, fixed(&l.ty)?);
    let chunk = *ts.first().ok_or_else(|| bad("tokens is a scalar"))?;
    let context = lir.state.first().and_then(|s| s.port.ty.shape.as_fixed()).and_then(|s| s.first().copied()).ok_or_else(|| bad("it has no state"))?;
    let ok = t.ty.dtype == DType::I64 && p.ty.dtype == DType::I64 && l.ty.dtype == DType::F32 && ts == [chunk] && ps == [chunk] && ls.len() == 2 && ls[0] == 1;
    if !ok || chunk == 0 || context == 0 {
        return Err(bad("its ports are not tokens, positions i64[chunk] → logits f32[1, vocab]"));
    }
    Ok((chunk, context, ls[1]))
}

pub struct CompiledStep {
    // The library stays loaded while `step` (a pointer into it) is used.
    _lib: libloading::Library,
    step: StepFn,
    arena: Vec<Line>,
    state: Vec<Line>,
    state_bytes: usize,
    chunk: usize,
    context: usize,
    vocab: usize,
    logits: Vec<f32>,
    /// Positions written so far (prefill resets this).
    filled: usize,
    what: String,
}

impl CompiledStep {
    /// Compiles the cached-step `mir` (built with `llm_step_from_gguf`) for `t` — a CPU target this
    /// machine runs in process: `host`, or `x86_64` on an x86-64 host — and loads it. Phases go to
    /// `tm` ("fold", "plan", "codegen", "link", "load"…).
    pub fn compile(t: Target, mir: &Mir, req: &Request, tm: &mut Timings) -> Result<CompiledStep, Failure> {
        if !matches!(t, Target::Host | Target::X86_64 | Target::Aarch64) {
            return Err(Failure::usage(format!("--target {} cannot run a language model: use host, a CPU target of this machine, or interp", t.name())));
        }
        let host = CpuTarget::host().map_err(Failure::model)?;
        let want = cpu::cpu_of(t, req)?;
        if want.triple() != host.triple() {
            return Err(Failure::usage(format!(
                "--target {} is {}, but this machine is {}: a language model runs in this process only on this machine's CPU (--target host), or on --target interp",
                t.name(),
                want.triple(),
                host.triple()
            )));
        }
        let c: Compiled = cpu::compile(t, mir, req, tm)?;
        let (chunk, context, vocab) = step_shape(&c.lir)?;
        let lib = dlopen::open(&c, tm)?;
        let step: StepFn = *dlopen::symbol::<StepFn>(&lib, &format!("{}_step", c.object_name))?;
        let what = format!("{} ({}, {}), context {context}, chunk {chunk}", t.name(), c.target.cpu, c.target.backend.name());
        let (arena, state_bytes) = (lines(c.lir.arena_bytes), c.lir.state_bytes);
        // `c` (the object bytes and the planned weights) is dropped here: the loaded library holds
        // the only copy of the weights.
        drop(c);
        Ok(CompiledStep {
            _lib: lib,
            step,
            arena,
            state: lines(state_bytes),
            state_bytes,
            chunk,
            context,
            vocab,
            logits: vec![0.0; vocab],
            filled: 0,
            what,
        })
    }

    /// Passes the communicator a sharded rank's collectives go through (`rlx_rt_comm_set` in the
    /// loaded library); the caller keeps it alive while the step runs.
    pub fn set_comm(&mut self, comm: *const std::ffi::c_void) -> Result<(), Failure> {
        let set = dlopen::symbol::<unsafe extern "C" fn(*const std::ffi::c_void)>(&self._lib, "rlx_rt_comm_set")?;
        // SAFETY: the runtime's `rlx_rt_comm_set(const struct rlx_comm *)`; the caller keeps `comm` alive.
        unsafe { set(comm) };
        Ok(())
    }

    /// Tokens per call of the compiled step (prefill runs the prompt in chunks of this many).
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Runs `tokens` (1..=chunk of them, in the chunk's last rows) at positions `start..`; the padding
    /// rows before them sit at position `context`, which writes nothing. Returns the logits of the last
    /// token (the only row the step computes).
    fn call(&mut self, tokens: &[i64], start: usize) -> Result<Vec<f32>, Failure> {
        let n = tokens.len();
        if n == 0 || n > self.chunk || start + n > self.context {
            return Err(Failure::model(format!("a step of {n} tokens at position {start} does not fit (chunk {}, context {})", self.chunk, self.context)));
        }
        if let Some(bad) = tokens.iter().find(|&&t| t < 0 || t as usize >= self.vocab) {
            return Err(Failure::usage(format!("token id {bad} is outside the vocabulary (0..{})", self.vocab)));
        }
        let mut t = vec![0i64; self.chunk];
        let mut p = vec![self.context as i64; self.chunk];
        let pad = self.chunk - n;
        for (i, &tok) in tokens.iter().enumerate() {
            t[pad + i] = tok;
            p[pad + i] = (start + i) as i64;
        }
        let ins = [t.as_ptr() as *const u8, p.as_ptr() as *const u8];
        let outs = [self.logits.as_mut_ptr() as *mut u8];
        // SAFETY: the ports' sizes are the LIR's (checked by `step_shape`): tokens and positions
        // i64[chunk], logits f32[vocab]; the arena and the state are 64-aligned and at least
        // arena_bytes / state_bytes long; positions are in 0..=context (context = padding).
        let code = unsafe { (self.step)(self.arena.as_mut_ptr() as *mut u8, self.state.as_mut_ptr() as *mut u8, ins.as_ptr(), outs.as_ptr()) };
        if code != 0 {
            return Err(Failure::model(format!("the compiled step returned error code {code} at position {start}")));
        }
        self.filled = start + n;
        Ok(self.logits.clone())
    }
}

impl Step for CompiledStep {
    fn describe(&self) -> String {
        format!("the compiled KV-cache artifact: {}", self.what)
    }
    fn context(&self) -> usize {
        self.context
    }
    fn prefill(&mut self, tokens: &[i64]) -> Result<Vec<f32>, Failure> {
        if tokens.is_empty() {
            return Err(Failure::usage("the prompt is empty"));
        }
        if tokens.len() > self.context {
            return Err(Failure::usage(format!("the prompt is {} tokens, longer than the compiled context of {}", tokens.len(), self.context)));
        }
        // A new sequence: a zeroed state (as NAME_reset does).
        for l in &mut self.state {
            l.0 = [0; 64];
        }
        debug_assert!(self.state.len() * 64 >= self.state_bytes);
        let mut last = Vec::new();
        for (i, c) in tokens.chunks(self.chunk).enumerate() {
            last = self.call(c, i * self.chunk)?;
        }
        Ok(last)
    }
    fn decode(&mut self, token: i64, pos: usize) -> Result<Vec<f32>, Failure> {
        if pos != self.filled {
            return Err(Failure::model(format!("decode at position {pos}, but the state holds {} positions", self.filled)));
        }
        if pos >= self.context {
            return Err(Failure::usage(format!("the compiled context of {} positions is full", self.context)));
        }
        self.call(&[token], pos)
    }
}
