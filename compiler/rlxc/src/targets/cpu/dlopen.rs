//! The `host` executor: the object and `librlx_rt.a` linked into a shared object with `cc`, loaded
//! into this process, `NAME_run` called with a 64-byte aligned arena.

use super::Compiled;
use crate::cli::Failure;
use crate::pipeline::{runtime_lib, Timings};
use crate::targets::run::{check_inputs, outputs_from, port_bytes, port_types, tool, Scratch};
use crate::targets::Session;
use rlx_ir::{ConstData, TensorType};
use std::process::Command;

/// `int NAME_run(void *arena, const void *const *inputs, void *const *outputs)`.
pub type RunFn = unsafe extern "C" fn(*mut u8, *const *const u8, *const *mut u8) -> i32;
/// `int NAME_step(void *arena, void *state, const void *const *inputs, void *const *outputs)`: a
/// stateful artifact's entry point.
pub type StepFn = unsafe extern "C" fn(*mut u8, *mut u8, *const *const u8, *const *mut u8) -> i32;

/// 64 bytes, 64-aligned: the unit of the arena and the state region a loaded artifact is called
/// with (both need 16).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub struct Line(pub [u8; 64]);

/// Zeroed lines holding at least `bytes` bytes (at least one line).
pub fn lines(bytes: usize) -> Vec<Line> {
    vec![Line([0; 64]); bytes.div_ceil(64).max(1)]
}

/// A compiled model loaded with dlopen.
pub struct Loaded {
    c: Compiled,
    // The library stays loaded while `run` (a pointer into it) is used.
    _lib: libloading::Library,
    run: RunFn,
    arena: Vec<u64>,
}

impl Loaded {
    /// Links (phase "link") and loads (phase "load") a host compile.
    pub fn new(c: Compiled, tm: &mut Timings) -> Result<Loaded, Failure> {
        let lib = open(&c, tm)?;
        let name = &c.object_name;
        let run: RunFn = *symbol(&lib, &format!("{name}_run"))?;
        // A 64-byte aligned arena.
        let words = c.lir.arena_bytes.div_ceil(64).max(1) * 8;
        Ok(Loaded { c, _lib: lib, run, arena: vec![0u64; words] })
    }
}

/// Links a compile of this machine's CPU with `librlx_rt.a` into a shared object in a scratch folder
/// (phase "link") and loads it into this process (phase "load"). The folder is removed once loaded.
pub fn open(c: &Compiled, tm: &mut Timings) -> Result<libloading::Library, Failure> {
    let dir = Scratch::new("run")?;
    let name = &c.object_name;
    let obj = dir.write(&format!("{name}.o"), &c.object)?;
    let so = dir.path().join(format!("{name}.so"));
    let rt = runtime_lib(c.target.triple()).map_err(Failure::model)?;
    tm.time("link", || {
        tool(Command::new("cc").arg("-shared").arg("-o").arg(&so).arg(&obj).arg(&rt).args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil"]), "link the compiled model")
    })?;
    let lib = tm.time("load", || {
        // SAFETY: the library was just built by us from our own object; loading runs no
        // constructors of consequence (the runtime's thread pool starts lazily).
        unsafe { libloading::Library::new(&so) }.map_err(|e| Failure::model(format!("cannot load {}: {e}", so.display())))
    });
    // `dir` is removed here; the mapping stays valid after the files are gone.
    lib
}

/// The function `sym` of a library built by [`open`]; the caller names the C signature `T` the
/// generated header declares for it.
pub fn symbol<'l, T>(lib: &'l libloading::Library, sym: &str) -> Result<libloading::Symbol<'l, T>, Failure> {
    let z = format!("{sym}\0");
    // SAFETY: the caller's `T` is the signature the artifact's header gives `sym`.
    unsafe { lib.get::<T>(z.as_bytes()) }.map_err(|e| Failure::model(format!("the compiled model has no symbol {sym}: {e}")))
}

impl Session for Loaded {
    fn device(&self) -> String {
        format!("this machine ({}, {}; dlopen)", self.c.target.triple(), self.c.target.cpu)
    }
    fn inputs(&self) -> Vec<TensorType> {
        port_types(&self.c.lir.inputs)
    }
    fn set_comm(&mut self, comm: *const std::ffi::c_void) -> Result<(), Failure> {
        let set: libloading::Symbol<unsafe extern "C" fn(*const std::ffi::c_void)> = symbol(&self._lib, "rlx_rt_comm_set")?;
        // SAFETY: the runtime's `rlx_rt_comm_set(const struct rlx_comm *)`; the caller keeps `comm` alive while it runs.
        unsafe { set(comm) };
        Ok(())
    }
    fn run(&mut self, samples: &[Vec<ConstData>]) -> Result<Vec<Vec<ConstData>>, Failure> {
        check_inputs(&self.c.lir.inputs, samples)?;
        let mut res = Vec::with_capacity(samples.len());
        for s in samples {
            let in_ptrs: Vec<*const u8> = s.iter().map(|c| c.data.bytes().as_ptr()).collect();
            let mut outs: Vec<Vec<u64>> = self.c.lir.outputs.iter().map(|p| vec![0u64; port_bytes(&p.ty).div_ceil(8).max(1)]).collect();
            let out_ptrs: Vec<*mut u8> = outs.iter_mut().map(|v| v.as_mut_ptr() as *mut u8).collect();
            // SAFETY: every pointer is valid for the byte length the planner computed from the static
            // shapes checked above; the arena is aligned to 64 and at least arena_bytes long.
            let code = unsafe { (self.run)(self.arena.as_mut_ptr() as *mut u8, in_ptrs.as_ptr(), out_ptrs.as_ptr()) };
            if code != 0 {
                return Err(Failure::model(format!("the compiled model returned error code {code}")));
            }
            let bytes = outs.iter().map(|buf| buf.iter().flat_map(|w| w.to_le_bytes()).collect()).collect();
            res.push(outputs_from(&self.c.lir.outputs, bytes)?);
        }
        Ok(res)
    }
}
