//! `rlxc run --target host`: compile the model, link the object and the runtime into a shared object,
//! load it, and call `NAME_run` with the given inputs.

use crate::cli::{Failure, Target};
use crate::pipeline::{compile_mir, cpu_target, runtime_lib, Backend, CpuTarget, Timings};
use rlx_ir::{Blob, ConstData, Mir};
use std::process::Command;

pub fn run_compiled(mir: &Mir, inputs: &[ConstData], t: Target) -> Result<Vec<ConstData>, Failure> {
    run_compiled_with(mir, inputs, t, Backend::default())
}

/// [`run_compiled`] with a chosen back end.
pub fn run_compiled_with(mir: &Mir, inputs: &[ConstData], t: Target, backend: Backend) -> Result<Vec<ConstData>, Failure> {
    if t != Target::Host {
        let host = CpuTarget::host().map_err(Failure::usage)?;
        let want = cpu_target(t, None)?;
        if want.triple() != host.triple() {
            return Err(Failure::usage(format!(
                "target {} cannot run on this {} machine; use `rlxc compile --target {}` and run the artifact there",
                t.name(),
                host.triple(),
                t.name()
            )));
        }
    }
    let mut cpu = cpu_target(t, None)?;
    cpu.backend = backend;
    let mut tm = Timings::default();
    let c = compile_mir(mir, t, cpu.clone(), "rlxmodel", false, false, &mut tm)?;
    // Unique per call (process id + counter): concurrent calls in one process must not share files.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("rlxc-run-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Failure::model(format!("cannot create {}: {e}", dir.display())))?;
    let obj = dir.join("rlxmodel.o");
    let so = dir.join("rlxmodel.so");
    std::fs::write(&obj, &c.object).map_err(|e| Failure::model(format!("cannot write {}: {e}", obj.display())))?;
    let rt = runtime_lib(cpu.triple()).map_err(Failure::model)?;
    let out = Command::new("cc")
        .arg("-shared")
        .arg("-o")
        .arg(&so)
        .arg(&obj)
        .arg(&rt)
        .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil"])
        .output()
        .map_err(|e| Failure::model(format!("cannot run the C compiler `cc` to link the model: {e}")));
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
    };
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(Failure::model(format!("linking the compiled model failed:\n{}", String::from_utf8_lossy(&out.stderr))));
    }
    let result = call(&so, &c.lir, inputs);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn call(so: &std::path::Path, lir: &rlx_ir::lir::Lir, inputs: &[ConstData]) -> Result<Vec<ConstData>, Failure> {
    // SAFETY: the library was just built by us from our own object; loading runs no constructors of
    // consequence (the runtime's thread pool starts lazily).
    let lib = unsafe { libloading::Library::new(so) }.map_err(|e| Failure::model(format!("cannot load {}: {e}", so.display())))?;
    type RunFn = unsafe extern "C" fn(*mut u8, *const *const u8, *const *mut u8) -> i32;
    // SAFETY: NAME_run has exactly this C signature (see the generated header).
    let run: libloading::Symbol<RunFn> = unsafe { lib.get(b"rlxmodel_run\0") }.map_err(|e| Failure::model(format!("symbol rlxmodel_run: {e}")))?;
    // A 64-byte aligned arena.
    let words = lir.arena_bytes.div_ceil(64).max(1) * 8;
    let mut arena = vec![0u64; words];
    let in_ptrs: Vec<*const u8> = inputs.iter().map(|c| c.data.bytes().as_ptr()).collect();
    let mut outs: Vec<Vec<u64>> = lir.outputs.iter().map(|p| vec![0u64; p.ty.dtype.bytes_for(p.ty.shape.numel().unwrap_or(0)).unwrap_or(0).div_ceil(8).max(1)]).collect();
    let out_ptrs: Vec<*mut u8> = outs.iter_mut().map(|v| v.as_mut_ptr() as *mut u8).collect();
    for (c, p) in inputs.iter().zip(&lir.inputs) {
        let want = p.ty.shape.as_fixed().unwrap_or_default();
        if c.dtype != p.ty.dtype || c.shape != want {
            return Err(Failure::usage(format!("input '{}' is {}{:?}, the compiled model takes {}", p.name, c.dtype, c.shape, p.ty)));
        }
    }
    // SAFETY: every pointer is valid for the byte length the planner computed from the static shapes
    // checked above; the arena is aligned to 64 and at least arena_bytes long.
    let code = unsafe { run(arena.as_mut_ptr() as *mut u8, in_ptrs.as_ptr(), out_ptrs.as_ptr()) };
    if code != 0 {
        return Err(Failure::model(format!("the compiled model returned error code {code}")));
    }
    let mut res = Vec::new();
    for (p, buf) in lir.outputs.iter().zip(outs) {
        let shape = p.ty.shape.as_fixed().unwrap_or_default();
        let n = p.ty.dtype.bytes_for(shape.iter().product()).unwrap_or(0);
        let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_le_bytes()).take(n).collect();
        res.push(ConstData::new(p.ty.dtype, shape, Blob::from_vec(bytes)).map_err(Failure::model)?);
    }
    Ok(res)
}
