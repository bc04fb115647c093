//! [`CompiledStep`]: the cached step (`chunked.rs`) compiled for this machine's CPU, linked into a
//! shared object and loaded in this process (`targets::cpu::dlopen`).
//!
//! The runner owns the arena and the state; the weights live in the loaded object (one copy: the
//! compile's own buffers are dropped once it is loaded).

use super::chunked::{step_shape, Chunked, Runner};
use crate::cli::{Failure, Target};
use crate::pipeline::{CpuTarget, Timings};
use crate::targets::cpu::dlopen::{self, lines, Line, StepFn};
use crate::targets::cpu::{self, Compiled};
use crate::targets::Request;
use rlx_ir::Mir;

/// The CPU artifact loaded in process: its `NAME_step` with the arena and the state it is given.
pub struct CpuRunner {
    // The library stays loaded while `step` (a pointer into it) is used.
    lib: libloading::Library,
    step: StepFn,
    arena: Vec<Line>,
    state: Vec<Line>,
}

impl Runner for CpuRunner {
    fn run(&mut self, tokens: &[i64], positions: &[i64], logits: &mut [f32]) -> Result<(), Failure> {
        let ins = [tokens.as_ptr() as *const u8, positions.as_ptr() as *const u8];
        let outs = [logits.as_mut_ptr() as *mut u8];
        // SAFETY: `Chunked` passes the ports' sizes of the LIR checked by `step_shape`: tokens and
        // positions i64[chunk], logits f32[vocab]; the arena and the state are 64-aligned and at least
        // arena_bytes / state_bytes long; positions are in 0..=context (context = padding).
        let code = unsafe { (self.step)(self.arena.as_mut_ptr() as *mut u8, self.state.as_mut_ptr() as *mut u8, ins.as_ptr(), outs.as_ptr()) };
        if code != 0 {
            return Err(Failure::model(format!("the compiled step returned error code {code}")));
        }
        Ok(())
    }
    fn reset(&mut self) -> Result<(), Failure> {
        for l in &mut self.state {
            l.0 = [0; 64];
        }
        Ok(())
    }
}

/// The cached step on this machine's CPU.
pub type CompiledStep = Chunked<CpuRunner>;

impl Chunked<CpuRunner> {
    /// Compiles the cached-step `mir` (built with `llm_step_from_gguf`) for `t` — a CPU target this
    /// machine runs in process: `host`, or `x86_64` on an x86-64 host — and loads it. Phases go to
    /// `tm` ("fold", "plan", "codegen", "link", "load"…).
    pub fn compile(t: Target, mir: &Mir, req: &Request, tm: &mut Timings) -> Result<CompiledStep, Failure> {
        if !matches!(t, Target::Host | Target::X86_64 | Target::Aarch64) {
            return Err(Failure::usage(format!("--target {} cannot run a language model: use host, a CPU target of this machine, cuda (with an NVIDIA GPU), or interp", t.name())));
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
        let shape = step_shape(&c.lir)?;
        let lib = dlopen::open(&c, tm)?;
        let step: StepFn = *dlopen::symbol::<StepFn>(&lib, &format!("{}_step", c.object_name))?;
        let what = format!("{} ({}, {}), context {}, chunk {}", t.name(), c.target.cpu, c.target.backend.name(), shape.1, shape.0);
        let runner = CpuRunner { lib, step, arena: lines(c.lir.arena_bytes), state: lines(c.lir.state_bytes) };
        // `c` (the object bytes and the planned weights) is dropped here: the loaded library holds
        // the only copy of the weights.
        drop(c);
        Ok(Chunked::new(runner, shape, what))
    }

    /// Passes the communicator a sharded rank's collectives go through (`rlx_rt_comm_set` in the
    /// loaded library); the caller keeps it alive while the step runs.
    pub fn set_comm(&mut self, comm: *const std::ffi::c_void) -> Result<(), Failure> {
        let set = dlopen::symbol::<unsafe extern "C" fn(*const std::ffi::c_void)>(&self.runner.lib, "rlx_rt_comm_set")?;
        // SAFETY: the runtime's `rlx_rt_comm_set(const struct rlx_comm *)`; the caller keeps `comm` alive.
        unsafe { set(comm) };
        Ok(())
    }
}
