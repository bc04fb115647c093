//! The CPU executor for objects this process cannot load: `tests/conformance/harness.c` (embedded)
//! linked with the object and `librlx_rt.a` into an executable — natively for x86-64, statically
//! with `aarch64-linux-gnu-gcc` and run under `qemu-aarch64` for AArch64 — run once per sample in a
//! child process with a time limit, so a crash or a hang in generated code costs one run. The
//! conformance columns use the same [`Harness`].

use super::Compiled;
use crate::cli::Failure;
use crate::pipeline::{runtime_lib, Arch, CpuTarget, Timings};
use crate::targets::run::{check_inputs, port_bytes, run_limited, value_of, Scratch};
use crate::targets::Session;
use rlx_ir::{ConstData, TensorType};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const HARNESS_C: &str = include_str!("../../../../../tests/conformance/harness.c");

/// The harness compiled for one CPU, with its linker, runtime library and emulator.
pub struct Harness {
    linker: &'static str,
    link_args: &'static [&'static str],
    runner: Option<&'static str>,
    obj: PathBuf,
    runtime: PathBuf,
    pub timeout: Duration,
}

/// Why a harness run failed: the executable could not be built, or it ran and failed.
pub enum HarnessError {
    Build(String),
    Run(String),
}

impl HarnessError {
    pub fn msg(self) -> String {
        match self {
            HarnessError::Build(s) | HarnessError::Run(s) => s,
        }
    }
}

impl Harness {
    /// Checks the tools and compiles the harness once, into `dir`.
    pub fn prepare(cpu: &CpuTarget, dir: &Path) -> Result<Harness, String> {
        let (linker, link_args, runner, timeout): (&'static str, &'static [&'static str], Option<&'static str>, u64) = match cpu.arch {
            Arch::X86_64 => ("cc", &[], None, 60),
            Arch::Aarch64 => ("aarch64-linux-gnu-gcc", &["-static"], Some("qemu-aarch64"), 120),
        };
        let host = CpuTarget::host()?;
        if runner.is_none() && host.triple() != cpu.triple() {
            return Err(format!("{} objects run natively only, but this machine is {}", cpu.triple(), host.triple()));
        }
        let runtime = runtime_lib(cpu.triple())?;
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let src = dir.join("harness.c");
        std::fs::write(&src, HARNESS_C).map_err(|e| format!("cannot write {}: {e}", src.display()))?;
        let obj = dir.join("harness.o");
        let out = Command::new(linker)
            .args(["-O1", "-c", "-o"])
            .arg(&obj)
            .arg(&src)
            .output()
            .map_err(|e| format!("cannot run `{linker}` (make setup installs it): {e}"))?;
        if !out.status.success() {
            return Err(format!("compiling the harness with {linker} failed:\n{}", String::from_utf8_lossy(&out.stderr)));
        }
        if let Some(r) = runner {
            Command::new(r).arg("--version").output().map_err(|e| format!("cannot run `{r}` (make setup installs qemu-user): {e}"))?;
        }
        Ok(Harness { linker, link_args, runner, obj, runtime, timeout: Duration::from_secs(timeout) })
    }

    /// Links the harness with `c`'s object (whose entry point must be `rlxmodel_run`) into `dir/case`.
    pub fn link(&self, c: &Compiled, dir: &Path) -> Result<PathBuf, HarnessError> {
        let b = |s: String| HarnessError::Build(s);
        std::fs::create_dir_all(dir).map_err(|e| b(format!("{}: {e}", dir.display())))?;
        let obj = dir.join("model.o");
        std::fs::write(&obj, &c.object).map_err(|e| b(format!("{}: {e}", obj.display())))?;
        let exe = dir.join("case");
        let out = Command::new(self.linker)
            .args(self.link_args)
            .arg("-o")
            .arg(&exe)
            .arg(&self.obj)
            .arg(&obj)
            .arg(&self.runtime)
            .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil"])
            .output()
            .map_err(|e| b(format!("cannot run {}: {e}", self.linker)))?;
        if !out.status.success() {
            return Err(b(format!("link: {}", String::from_utf8_lossy(&out.stderr).trim())));
        }
        Ok(exe)
    }

    /// Runs the linked executable on one sample: inputs written to `dir/inI.bin`, outputs read back
    /// from `dir/outI.bin`.
    pub fn exec(&self, exe: &Path, c: &Compiled, dir: &Path, inputs: &[ConstData]) -> Result<Vec<ConstData>, HarnessError> {
        let mut cmd = match self.runner {
            Some(r) => {
                let mut k = Command::new(r);
                k.arg(exe);
                k
            }
            None => Command::new(exe),
        };
        cmd.arg(c.lir.arena_bytes.to_string()).arg(inputs.len().to_string());
        for (i, x) in inputs.iter().enumerate() {
            let p = dir.join(format!("in{i}.bin"));
            std::fs::write(&p, x.data.bytes()).map_err(|e| HarnessError::Build(format!("{}: {e}", p.display())))?;
            cmd.arg(&p);
        }
        cmd.arg(c.lir.outputs.len().to_string());
        let mut outs = Vec::new();
        for (i, p) in c.lir.outputs.iter().enumerate() {
            let path = dir.join(format!("out{i}.bin"));
            cmd.arg(&path).arg(port_bytes(&p.ty).to_string());
            outs.push(path);
        }
        let f = run_limited(&mut cmd, self.timeout).map_err(HarnessError::Run)?;
        if !f.status.success() {
            use std::os::unix::process::ExitStatusExt;
            let how = match (f.status.code(), f.status.signal()) {
                (_, Some(sig)) => format!("crashed with signal {sig}"),
                (Some(k), _) if k >= 10 => format!("rlxmodel_run returned error code {}", k - 10),
                (Some(k), _) => format!("exit status {k}"),
                _ => "failed".to_string(),
            };
            return Err(HarnessError::Run(format!("{how} {}", f.stderr.trim()).trim().to_string()));
        }
        let mut res = Vec::new();
        for (k, (path, p)) in outs.iter().zip(&c.lir.outputs).enumerate() {
            let data = std::fs::read(path).map_err(|e| HarnessError::Run(format!("output {k}: {e}")))?;
            res.push(value_of(&p.ty, data, &format!("output {k}")).map_err(|f| HarnessError::Run(f.msg))?);
        }
        Ok(res)
    }
}

/// `rlxc run --target aarch64` (or x86_64): the harness executable, built once, run per sample.
pub struct HarnessSession {
    c: Compiled,
    h: Harness,
    exe: PathBuf,
    dir: Scratch,
}

impl HarnessSession {
    pub fn new(c: Compiled, tm: &mut Timings) -> Result<HarnessSession, Failure> {
        let dir = Scratch::new("harness")?;
        let h = tm.time("link", || Harness::prepare(&c.target, dir.path())).map_err(Failure::model)?;
        let exe = tm.time("link", || h.link(&c, dir.path())).map_err(|e| Failure::model(e.msg()))?;
        Ok(HarnessSession { c, h, exe, dir })
    }
}

impl Session for HarnessSession {
    fn device(&self) -> String {
        match self.h.runner {
            Some(r) => format!("{r} ({}, {})", self.c.target.triple(), self.c.target.cpu),
            None => format!("this machine ({}, {}; a child process)", self.c.target.triple(), self.c.target.cpu),
        }
    }
    fn inputs(&self) -> Vec<TensorType> {
        crate::targets::run::port_types(&self.c.lir.inputs)
    }
    fn run(&mut self, samples: &[Vec<ConstData>]) -> Result<Vec<Vec<ConstData>>, Failure> {
        check_inputs(&self.c.lir.inputs, samples)?;
        samples
            .iter()
            .map(|s| self.h.exec(&self.exe, &self.c, self.dir.path(), s).map_err(|e| Failure::model(format!("running the compiled model failed: {}", e.msg()))))
            .collect()
    }
    fn timed(&self) -> bool {
        self.h.runner.is_none()
    }
}
