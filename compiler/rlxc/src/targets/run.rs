//! Executors: a compiled artifact loaded where it runs ([`Session`]), and the pieces they share —
//! a child process with a time limit, a scratch folder, outputs read back from raw files.

use crate::cli::Failure;
use rlx_ir::lir::Port;
use rlx_ir::{Blob, ConstData, TensorType};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A per-inference count an executor measures instead of (or beside) wall time.
#[derive(Clone, Debug, PartialEq)]
pub struct Counter {
    /// "instructions" (Cortex-M under QEMU `-icount`) or "cycles" (the Verilog datapath).
    pub unit: &'static str,
    /// Per inference, over the samples of the last run: the smallest and the largest.
    pub min: f64,
    pub max: f64,
}

/// A compiled model loaded into its executor. The setup (compile, link, load, device objects) is
/// done; [`Session::run`] is what `rlxc bench` times.
pub trait Session {
    /// Where it runs, in words ("host (dlopen)", the Vulkan device, "qemu-system-arm mps2-an386" …).
    fn device(&self) -> String;
    /// The ports of the loaded artifact (an int8 target's ports are int8).
    fn inputs(&self) -> Vec<TensorType>;
    /// int8 parameters of the ports when the artifact is quantized (inputs then are quantized with
    /// them by [`quantize_inputs`]).
    fn quant(&self) -> Option<&super::QuantPorts> {
        None
    }
    /// Runs a batch of samples (each one value per input, of [`Session::inputs`]' types), returning
    /// each sample's outputs. Executors that start a process or a simulation run the whole batch in
    /// one.
    fn run(&mut self, samples: &[Vec<ConstData>]) -> Result<Vec<Vec<ConstData>>, Failure>;
    /// What the last run measured per inference, where the executor counts (not times).
    fn counter(&self) -> Option<Counter> {
        None
    }
    /// Whether wall-clock latency of [`Session::run`] means anything (false under an emulator or a
    /// simulator: `rlxc bench` then reports [`Session::counter`]).
    fn timed(&self) -> bool {
        true
    }
    /// Passes the communicator a sharded artifact's collectives go through (`rlx_rt_comm_set` in the
    /// loaded runtime); only executors that load the artifact into this process take one.
    fn set_comm(&mut self, _comm: *const std::ffi::c_void) -> Result<(), Failure> {
        Err(Failure::usage(format!("a sharded artifact runs here only on --target host (this executor: {})", self.device())))
    }
    /// Extra lines `rlxc bench` prints (a profile, where the executor has one).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// Where the executor keeps the tensors on a device of its own (CUDA): runs the artifact again on
    /// the inputs the last run left there, copying nothing in or out — the device's share of a run,
    /// which `rlxc bench` times beside the whole run. `None` elsewhere.
    fn resident(&mut self) -> Option<Result<(), Failure>> {
        None
    }
}

/// Float inputs of an int8 artifact are quantized with its ports' scales and zero points (the
/// `quantize` op, as the firmware's user does); inputs already of the port's dtype pass.
pub fn quantize_inputs(s: &dyn Session, inputs: Vec<ConstData>) -> Result<Vec<ConstData>, Failure> {
    let Some(q) = s.quant() else { return Ok(inputs) };
    let tys = s.inputs();
    let mut out = Vec::with_capacity(inputs.len());
    for (i, x) in inputs.into_iter().enumerate() {
        let (Some(ty), Some(p)) = (tys.get(i), q.inputs.get(i)) else {
            return Err(Failure::usage(format!("input {i}: the compiled model has {} inputs", tys.len())));
        };
        if x.dtype == ty.dtype || !x.dtype.is_float() {
            out.push(x);
            continue;
        }
        let scale = ConstData::from_f32(vec![], &[p.scale]);
        let zp = ConstData::scalar(ty.dtype, p.zero_point as f64);
        let x = crate::pipeline::eval_op(&rlx_ir::MirOp::Quantize { axis: 0 }, &[x, scale, zp]).map_err(Failure::model)?.remove(0);
        out.push(x);
    }
    Ok(out)
}

/// The types of a LIR's ports.
pub fn port_types(ports: &[Port]) -> Vec<TensorType> {
    ports.iter().map(|p| p.ty.clone()).collect()
}

/// Checks samples against a LIR's input ports.
pub fn check_inputs(ports: &[Port], samples: &[Vec<ConstData>]) -> Result<(), Failure> {
    let names: Vec<String> = ports.iter().map(|p| p.name.clone()).collect();
    check_types(&port_types(ports), &names, samples)
}

/// The raw bytes of each output port (at least the port's size) as values.
pub fn outputs_from(ports: &[Port], bufs: Vec<Vec<u8>>) -> Result<Vec<ConstData>, Failure> {
    ports.iter().zip(bufs).map(|(p, mut b)| {
        b.truncate(port_bytes(&p.ty));
        value_of(&p.ty, b, &format!("output '{}'", p.name))
    }).collect()
}

/// Checks samples against input types.
pub fn check_types(tys: &[TensorType], names: &[String], samples: &[Vec<ConstData>]) -> Result<(), Failure> {
    for s in samples {
        if s.len() != tys.len() {
            return Err(Failure::usage(format!("{} inputs given, the compiled model takes {}", s.len(), tys.len())));
        }
        for (k, (v, ty)) in s.iter().zip(tys).enumerate() {
            let want = ty.shape.as_fixed().unwrap_or_default();
            if v.dtype != ty.dtype || v.shape != want {
                let name = names.get(k).cloned().unwrap_or_else(|| format!("input{k}"));
                return Err(Failure::usage(format!("input '{name}' is {}{:?}, the compiled model takes {ty}", v.dtype, v.shape)));
            }
        }
    }
    Ok(())
}

/// Byte size of a fixed-shape port.
pub fn port_bytes(ty: &TensorType) -> usize {
    ty.dtype.bytes_for(ty.shape.numel().unwrap_or(0)).unwrap_or(0)
}

/// `bytes` as a value of the fixed-shape type `ty` (an error naming `what` when the size is wrong).
pub fn value_of(ty: &TensorType, bytes: Vec<u8>, what: &str) -> Result<ConstData, Failure> {
    let shape = ty.shape.as_fixed().unwrap_or_default();
    if bytes.len() != port_bytes(ty) {
        return Err(Failure::model(format!("{what}: {} bytes read back, {} expected ({ty})", bytes.len(), port_bytes(ty))));
    }
    ConstData::new(ty.dtype, shape, Blob::from_vec(bytes)).map_err(Failure::model)
}

/// A scratch folder under the system's temp dir, unique per call, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Result<Scratch, Failure> {
        static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("rlxc-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| Failure::model(format!("cannot create {}: {e}", dir.display())))?;
        Ok(Scratch(dir))
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn write(&self, file: &str, bytes: &[u8]) -> Result<PathBuf, Failure> {
        let p = self.0.join(file);
        std::fs::write(&p, bytes).map_err(|e| Failure::model(format!("cannot write {}: {e}", p.display())))?;
        Ok(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How a child process ended.
pub struct Finished {
    pub stdout: String,
    pub stderr: String,
    pub status: std::process::ExitStatus,
}

/// Runs a tool to completion (a compiler or linker): its failure is a model failure quoting stderr.
pub fn tool(cmd: &mut Command, what: &str) -> Result<String, Failure> {
    let prog = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd.output().map_err(|e| Failure::model(format!("cannot run `{prog}` to {what} (make setup installs it): {e}")))?;
    if !out.status.success() {
        return Err(Failure::model(format!("{what} failed ({prog}, {}):\n{}{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `cmd` with stdin closed, killing it after `limit`. `Err` only when it cannot start or is
/// killed; a non-zero exit is returned for the caller to word.
pub fn run_limited(cmd: &mut Command, limit: Duration) -> Result<Finished, String> {
    let prog = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run `{prog}` (make setup installs it): {e}"))?;
    // Drain the pipes on threads so a chatty child never blocks on a full pipe.
    let drain = |p: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(mut p) = p {
                let _ = p.read_to_end(&mut s);
            }
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if t0.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("timed out after {}s", limit.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(format!("waiting for `{prog}`: {e}")),
        }
    };
    Ok(Finished { stdout: out.join().unwrap_or_default(), stderr: err.join().unwrap_or_default(), status })
}

/// Runs each sample through an in-process device executor: checks the samples against the LIR's
/// input ports, hands `exec` the input bytes and zeroed output buffers of the output ports' sizes,
/// and reads the outputs back as values (the Vulkan and CUDA sessions).
pub fn run_samples(
    inputs: &[Port],
    outputs: &[Port],
    samples: &[Vec<ConstData>],
    mut exec: impl FnMut(&[&[u8]], &mut [&mut [u8]]) -> Result<(), Failure>,
) -> Result<Vec<Vec<ConstData>>, Failure> {
    check_inputs(inputs, samples)?;
    let mut res = Vec::with_capacity(samples.len());
    for s in samples {
        let ins: Vec<&[u8]> = s.iter().map(|c| c.data.bytes()).collect();
        let mut outs: Vec<Vec<u8>> = outputs.iter().map(|p| vec![0u8; port_bytes(&p.ty)]).collect();
        let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
        exec(&ins, &mut refs)?;
        res.push(outputs_from(outputs, outs)?);
    }
    Ok(res)
}
