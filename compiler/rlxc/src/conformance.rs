//! The ONNX op conformance suite: every backend node case (`model.onnx` + `test_data_set_0`) is
//! imported, lowered and run on the reference interpreter, and the outputs are compared with the
//! expected ones (rtol 1e-3, atol 1e-7, the ONNX backend defaults; NaN matches NaN).
//!
//! Compiled columns (`--target x86_64`, `--target aarch64`): every case that passes on the
//! interpreter is compiled from the same lowered MIR (`targets::cpu::compile`), linked with
//! `tests/conformance/harness.c` (embedded in this binary) and `librlx_rt.a` into an executable by
//! the CPU family's harness executor, and run in a child process (aarch64: a static executable under `qemu-aarch64`), so a crash or a hang
//! in generated code costs one case, not the run. Outcomes: passed, failed (wrong values, a crash,
//! an error code, a timeout), unsupported (legalization names the op/dtype) or compile error (a bug).
//! Outputs are compared with the same tolerance as on the interpreter.

use crate::cli::{Backend, Target as CliTarget};
use crate::pipeline::{cpu_target, Timings};
use crate::targets::cpu::harness::{Harness, HarnessError};
use crate::targets::{self, Request, Session};
use rlx_import::{ImportOptions, OnnxSummary};
use rlx_ir::{ConstData, DType, Dim, Mir};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct ConformanceArgs {
    /// Folder of node cases (build/onnx-node)
    pub dir: PathBuf,
    /// Write a markdown report to this file
    #[arg(long)]
    pub write: Option<PathBuf>,
    /// [TARGET=]FILE: FILE holds the minimum number of cases passing on TARGET (interp when no
    /// TARGET=); fail (exit 1) below it. Repeatable, e.g. --ratchet r.txt --ratchet x86_64=r64.txt
    #[arg(long)]
    pub ratchet: Vec<String>,
    /// Only run cases whose name contains this
    #[arg(long)]
    pub filter: Option<String>,
    /// Only run the cases named in this file (one per line; `#` starts a comment)
    #[arg(long)]
    pub list: Option<PathBuf>,
    /// Also compile and run each case that passes on the interpreter for this target
    /// (x86_64, aarch64 under qemu-aarch64, vulkan through runtime-min; repeatable). interp is always run.
    #[arg(long = "target", value_enum)]
    pub targets: Vec<Column>,
}

/// A conformance column: the interpreter, or a compiled target with a back end. Compiled columns
/// exist for the back ends built in: `x86_64` / `aarch64` (LLVM), `x86_64-cranelift` /
/// `aarch64-cranelift` (Cranelift).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Column {
    Interp,
    #[cfg(feature = "llvm")]
    #[value(name = "x86_64")]
    X86_64,
    #[cfg(feature = "llvm")]
    Aarch64,
    #[cfg(feature = "cranelift")]
    #[value(name = "x86_64-cranelift")]
    X86_64Cranelift,
    #[cfg(feature = "cranelift")]
    #[value(name = "aarch64-cranelift")]
    Aarch64Cranelift,
    /// SPIR-V through runtime-min's Vulkan executor (lavapipe in CI), in this process.
    Vulkan,
    /// `--target cuda` (sm_80) PTX assembled by `ptxas -arch=sm_80`: passed = it assembles (no GPU
    /// here, so values are not compared; the GPU machine runs the models: tests/gpu/run_cuda.sh).
    #[cfg(feature = "llvm")]
    #[value(name = "cuda-ptxas")]
    CudaPtxas,
    /// `--target cuda` for this machine's GPU (`Sm::native`: sm_90a on an H100 / H200), run through
    /// runtime-min's CUDA executor in this process and compared as the other columns are: needs an
    /// NVIDIA GPU and its driver, so not in `make test` (CI has none; the GPU machine runs it:
    /// tests/gpu/run_conformance_cuda.sh).
    #[cfg(feature = "llvm")]
    Cuda,
}

impl Column {
    pub fn name(self) -> &'static str {
        match self {
            Column::Interp => "interp",
            #[cfg(feature = "llvm")]
            Column::X86_64 => "x86_64",
            #[cfg(feature = "llvm")]
            Column::Aarch64 => "aarch64",
            #[cfg(feature = "cranelift")]
            Column::X86_64Cranelift => "x86_64-cranelift",
            #[cfg(feature = "cranelift")]
            Column::Aarch64Cranelift => "aarch64-cranelift",
            Column::Vulkan => "vulkan",
            #[cfg(feature = "llvm")]
            Column::CudaPtxas => "cuda-ptxas",
            #[cfg(feature = "llvm")]
            Column::Cuda => "cuda",
        }
    }
    /// The CPU target and back end of a compiled column.
    fn compiled(self) -> Option<(CliTarget, Backend)> {
        match self {
            Column::Interp | Column::Vulkan => None,
            #[cfg(feature = "llvm")]
            Column::CudaPtxas | Column::Cuda => None,
            #[cfg(feature = "llvm")]
            Column::X86_64 => Some((CliTarget::X86_64, Backend::Llvm)),
            #[cfg(feature = "llvm")]
            Column::Aarch64 => Some((CliTarget::Aarch64, Backend::Llvm)),
            #[cfg(feature = "cranelift")]
            Column::X86_64Cranelift => Some((CliTarget::X86_64, Backend::Cranelift)),
            #[cfg(feature = "cranelift")]
            Column::Aarch64Cranelift => Some((CliTarget::Aarch64, Backend::Cranelift)),
        }
    }
    fn caps(self) -> rlx_ir::TargetCaps {
        match self.compiled() {
            Some((t, _)) => t.caps(),
            None if self == Column::Vulkan => CliTarget::Vulkan.caps(),
            #[cfg(feature = "llvm")]
            None if matches!(self, Column::CudaPtxas | Column::Cuda) => CliTarget::Cuda.caps(),
            None => rlx_interp::caps(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Passed,
    Failed,
    Unsupported,
}

/// The outcome of one case on a compiled target (only cases that pass on the interpreter are run).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TargetOutcome {
    Passed,
    /// Wrong values, a crash, an error code from `NAME_run`, or a timeout.
    Failed,
    /// Legalization lists unsupported nodes (op/dtype).
    Unsupported,
    /// Planning, codegen or linking failed on a legal graph: a compiler bug.
    CompileError,
}

#[derive(Clone, Debug)]
pub struct TargetRun {
    pub target: Column,
    pub outcome: TargetOutcome,
    pub reason: String,
}

#[derive(Clone, Debug)]
pub struct CaseResult {
    pub name: String,
    pub op: String,
    pub outcome: Outcome,
    pub reason: String,
    /// One entry per compiled target, for cases that pass on the interpreter.
    pub targets: Vec<TargetRun>,
    /// Inputs left after binding shape/axes inputs as constants (0: the whole graph folds away).
    pub runtime_inputs: usize,
}

const RTOL: f64 = 1e-3;
const ATOL: f64 = 1e-7;

fn read_set(dir: &Path, prefix: &str) -> Result<Vec<ConstData>, String> {
    let mut out = Vec::new();
    for i in 0.. {
        let p = dir.join(format!("{prefix}_{i}.pb"));
        if !p.exists() {
            break;
        }
        out.push(rlx_import::load_tensor_pb(&p)?);
    }
    Ok(out)
}

/// The op a case tests: the model op type whose name the case name starts with, else the first
/// non-Constant op type.
fn case_op(name: &str, s: Option<&OnnxSummary>) -> String {
    let key: String = name.trim_start_matches("test_").chars().filter(|c| *c != '_').collect::<String>().to_lowercase();
    if let Some(s) = s {
        let best = s.op_types.keys().filter(|op| key.starts_with(&op.to_lowercase())).max_by_key(|op| op.len());
        if let Some(b) = best {
            return b.clone();
        }
        if let Some(o) = s.op_types.keys().find(|o| o.as_str() != "Constant") {
            return o.clone();
        }
    }
    name.trim_start_matches("test_").split('_').next().unwrap_or(name).to_string()
}

fn compare(got: &ConstData, want: &ConstData, rtol: f64, atol: f64) -> Result<(), String> {
    if got.dtype != want.dtype {
        return Err(format!("dtype {} , expected {}", got.dtype, want.dtype));
    }
    if got.shape != want.shape {
        return Err(format!("shape {:?}, expected {:?}", got.shape, want.shape));
    }
    let n = want.numel();
    let mut bad = 0usize;
    let mut first = None;
    for i in 0..n {
        let ok = if want.dtype.is_float() {
            let (g, e) = (got.get_f64(i), want.get_f64(i));
            (g.is_nan() && e.is_nan()) || g == e || (g - e).abs() <= atol + rtol * e.abs()
        } else if want.dtype == DType::U64 {
            got.data.bytes()[i * 8..i * 8 + 8] == want.data.bytes()[i * 8..i * 8 + 8]
        } else {
            got.get_i64(i) == want.get_i64(i)
        };
        if !ok {
            bad += 1;
            if first.is_none() {
                first = Some(i);
            }
        }
    }
    match first {
        None => Ok(()),
        Some(i) => Err(format!(
            "{bad}/{n} values differ; first at {i}: got {}, expected {}",
            got.get_f64(i),
            want.get_f64(i)
        )),
    }
}

/// What a passing interpreter case hands to the compiled targets.
struct Lowered {
    mir: Mir,
    inputs: Vec<ConstData>,
    expected: Vec<ConstData>,
}

type CaseRun = (Outcome, String, Option<OnnxSummary>, Option<Lowered>);

fn run_case(dir: &Path) -> CaseRun {
    let model = dir.join("model.onnx");
    let summary = rlx_import::onnx_summary(&model).ok();
    let set = dir.join("test_data_set_0");
    let inputs = match read_set(&set, "input") {
        Ok(v) => v,
        Err(e) => return (Outcome::Unsupported, format!("test data: {e}"), summary, None),
    };
    let expected = match read_set(&set, "output") {
        Ok(v) => v,
        Err(e) => return (Outcome::Unsupported, format!("test data: {e}"), summary, None),
    };
    let names: Vec<String> = summary.as_ref().map(|s| s.inputs.iter().map(|i| i.0.clone()).collect()).unwrap_or_default();
    // Many cases pass shapes/axes/pads as graph inputs: retry with the inputs the importer needs as
    // constants bound (those its errors name; failing that, every integer input).
    let mut opts = ImportOptions::default();
    // Symbolic dims take their sizes from the test inputs, so every graph is static (compiled
    // targets need fixed shapes).
    if let Some(s) = &summary {
        for ((_, _, shape), c) in s.inputs.iter().zip(&inputs) {
            if shape.len() == c.shape.len() {
                for (d, &n) in shape.iter().zip(&c.shape) {
                    if let Dim::Sym(sym) = d {
                        opts.dims.entry(sym.clone()).or_insert(n as u64);
                    }
                }
            }
        }
    }
    let mut first_err = None;
    let hir = loop {
        match rlx_import::load_onnx(&model, &opts) {
            Ok(h) => break h,
            Err(e) => {
                let unsupported = e.is_unsupported();
                let mut named = Vec::new();
                for p in &e.problems {
                    if let Some(i) = p.msg.find("') is not a constant") {
                        if let Some(j) = p.msg[..i].rfind("('") {
                            named.push(p.msg[j + 2..i].to_string());
                        }
                    }
                }
                let before = opts.bind.len();
                for (i, c) in inputs.iter().enumerate() {
                    let Some(n) = names.get(i) else { continue };
                    if named.contains(n) {
                        opts.bind.insert(n.clone(), c.clone());
                    }
                }
                if opts.bind.len() == before && !named.is_empty() {
                    for (i, c) in inputs.iter().enumerate() {
                        if let Some(n) = names.get(i).filter(|_| c.dtype.is_int()) {
                            opts.bind.insert(n.clone(), c.clone());
                        }
                    }
                }
                if unsupported {
                    return (Outcome::Unsupported, format!("import: {e}"), summary, None);
                }
                let first = first_err.get_or_insert(e).clone();
                if opts.bind.len() == before {
                    return (Outcome::Failed, format!("import: {first}"), summary, None);
                }
            }
        }
    };
    let run_inputs: Vec<ConstData> = inputs
        .iter()
        .enumerate()
        .filter(|(i, _)| names.get(*i).is_none_or(|n| !opts.bind.contains_key(n)))
        .map(|(_, c)| c.clone())
        .collect();
    let mir = match rlx_opt::lower(&hir) {
        Ok(m) => m,
        Err(ps) => {
            let msg: Vec<String> = ps.iter().take(3).map(|p| p.to_string()).collect();
            return (Outcome::Failed, format!("lower: {}", msg.join("; ")), summary, None);
        }
    };
    let outs = match rlx_interp::run(&mir, &run_inputs) {
        Ok(o) => o,
        Err(e) => return (Outcome::Failed, format!("run: {e}"), summary, None),
    };
    // Outputs of data-dependent length are compared over their first `count` slices.
    let outs = match rlx_ir::bounded::exact(&mir, &outs) {
        Ok(o) => o,
        Err(e) => return (Outcome::Failed, format!("run: {e}"), summary, None),
    };
    if outs.len() != expected.len() {
        return (Outcome::Failed, format!("{} outputs, expected {}", outs.len(), expected.len()), summary, None);
    }
    for (k, (g, w)) in outs.iter().zip(&expected).enumerate() {
        if let Err(e) = compare(g, w, RTOL, ATOL) {
            return (Outcome::Failed, format!("output {k}: {e}"), summary, None);
        }
    }
    (Outcome::Passed, String::new(), summary, Some(Lowered { mir, inputs: run_inputs, expected }))
}

/// How to run cases for one compiled column: the CPU columns through the CPU family's harness
/// executor (`targets::cpu::harness`: the harness compiled once, linked per case, run in a child
/// process with a time limit — under qemu-aarch64 for aarch64), the Vulkan column through the shader
/// family's executor (runtime-min's, in this process), the `cuda-ptxas` column through the CUDA
/// family's compile and ptxas, the `cuda` column through the CUDA family's executor (runtime-min's,
/// in this process).
pub struct TargetEnv {
    pub target: Column,
    runner: Runner,
    work: PathBuf,
}

/// How a column's cases run (what [`TargetEnv::prepare`] found).
enum Runner {
    /// The CPU columns: the harness, compiled once, and the target and back end it links for.
    Harness(Harness, CliTarget, Backend),
    /// The Vulkan column: runtime-min's executor, in this process.
    Vulkan,
    /// The `cuda-ptxas` column: the assembler.
    #[cfg(feature = "llvm")]
    Ptxas(PathBuf),
    /// The `cuda` column: this machine's GPU's architecture; runtime-min's executor, in this process.
    #[cfg(feature = "llvm")]
    Cuda(targets::cuda::Sm),
}

static CASE_DIRS: AtomicU64 = AtomicU64::new(0);

impl TargetEnv {
    /// Checks the tools and compiles the harness once, under `work`.
    pub fn prepare(target: Column, work: &Path) -> Result<TargetEnv, String> {
        if target == Column::Vulkan {
            // No harness or linker: each case runs in this process through runtime-min's executor.
            let name = rlx_rt::vulkan::probe().map_err(|e| format!("--target vulkan needs a Vulkan device (make setup installs lavapipe): {e}"))?;
            eprintln!("vulkan column: {name}");
            return Ok(TargetEnv { target, runner: Runner::Vulkan, work: work.join("vulkan") });
        }
        #[cfg(feature = "llvm")]
        if target == Column::CudaPtxas {
            let ptxas = targets::cuda::ptxas()?;
            eprintln!("cuda-ptxas column: {}", ptxas.display());
            let dir = work.join(target.name());
            std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            return Ok(TargetEnv { target, runner: Runner::Ptxas(ptxas), work: dir });
        }
        #[cfg(feature = "llvm")]
        if target == Column::Cuda {
            let (name, cap) = rlx_rt::cuda::probe().map_err(|e| format!("--target cuda needs an NVIDIA GPU and its driver (the cuda-ptxas column needs neither): {e}"))?;
            let sm = targets::cuda::Sm::native(cap);
            eprintln!("cuda column: {name} (compute capability {}.{}), --sm {sm}", cap.0, cap.1);
            return Ok(TargetEnv { target, runner: Runner::Cuda(sm), work: work.join("cuda") });
        }
        let Some((cli, backend)) = target.compiled() else {
            return Err(format!("--target {} has no compiled conformance column", target.name()));
        };
        let mut cpu = cpu_target(cli, None).map_err(|f| f.msg)?;
        cpu.backend = backend;
        let dir = work.join(target.name());
        let h = Harness::prepare(&cpu, &dir).map_err(|e| format!("--target {}: {e}", target.name()))?;
        Ok(TargetEnv { target, runner: Runner::Harness(h, cli, backend), work: dir })
    }

    /// Compiles, links and runs one case that passed on the interpreter.
    fn run(&self, l: &Lowered) -> (TargetOutcome, String) {
        // Legalize first, so unsupported nodes are named as op/dtype rather than as a compile error.
        let folded = rlx_opt::simplify(&l.mir, &crate::pipeline::eval_op);
        let report = rlx_opt::report(&folded, &self.target.caps());
        if !report.is_legal() {
            let mut what: Vec<String> = report.unsupported().map(|e| format!("{}/{}", e.op, e.dtype)).collect();
            what.sort();
            what.dedup();
            return (TargetOutcome::Unsupported, format!("unsupported: {}", what.join(", ")));
        }
        let outs = match &self.runner {
            Runner::Harness(h, cli, backend) => self.run_harness(h, *cli, *backend, l),
            Runner::Vulkan => self.run_vulkan(l),
            #[cfg(feature = "llvm")]
            Runner::Ptxas(ptxas) => return self.run_ptxas(ptxas, l),
            #[cfg(feature = "llvm")]
            Runner::Cuda(sm) => self.run_cuda(*sm, l),
        };
        let outs = match outs.and_then(|o| rlx_ir::bounded::exact(&l.mir, &o).map_err(|e| (TargetOutcome::Failed, e))) {
            Ok(o) => o,
            Err(e) => return e,
        };
        if outs.len() != l.expected.len() {
            return (TargetOutcome::Failed, format!("{} outputs, expected {}", outs.len(), l.expected.len()));
        }
        match outs.iter().zip(&l.expected).enumerate().find_map(|(k, (g, w))| compare(g, w, RTOL, ATOL).err().map(|e| format!("output {k}: {e}"))) {
            Some(e) => (TargetOutcome::Failed, e),
            None => (TargetOutcome::Passed, String::new()),
        }
    }

    fn run_vulkan(&self, l: &Lowered) -> Result<Vec<ConstData>, (TargetOutcome, String)> {
        let mut tm = Timings::default();
        let c = targets::shader::compile(CliTarget::Vulkan, &l.mir, &Request::named("rlxmodel"), &mut tm).map_err(|f| (TargetOutcome::CompileError, format!("compile: {}", f.msg)))?;
        // The executor's own errors (device lost, bad sizes) are failures.
        let mut ex = targets::shader::Loaded::new(c, &mut tm).map_err(|f| (TargetOutcome::Failed, f.msg))?;
        let mut outs = ex.run(std::slice::from_ref(&l.inputs)).map_err(|f| (TargetOutcome::Failed, f.msg))?;
        Ok(outs.pop().unwrap_or_default())
    }

    /// The `cuda` column: the case compiled for this machine's GPU (`sm`, f32) and run once through
    /// runtime-min's CUDA executor (context, module JIT, the captured graph: each case its own).
    #[cfg(feature = "llvm")]
    fn run_cuda(&self, sm: targets::cuda::Sm, l: &Lowered) -> Result<Vec<ConstData>, (TargetOutcome, String)> {
        let mut tm = Timings::default();
        let req = Request { sm: Some(sm), ..Request::named("rlxmodel") };
        let c = targets::cuda::compile(CliTarget::Cuda, &l.mir, &req, &mut tm).map_err(|f| (TargetOutcome::CompileError, format!("compile: {}", f.msg)))?;
        // The executor's own errors (a PTX the driver refuses, a kernel fault, bad sizes) are failures.
        let mut ex = targets::cuda::Loaded::new(c, &mut tm).map_err(|f| (TargetOutcome::Failed, f.msg))?;
        let mut outs = ex.run(std::slice::from_ref(&l.inputs)).map_err(|f| (TargetOutcome::Failed, f.msg))?;
        Ok(outs.pop().unwrap_or_default())
    }

    /// The `cuda-ptxas` column: the case compiled for `--target cuda` (sm_80) and its PTX assembled by
    /// ptxas (passed = it assembles; no GPU here, so no values are compared).
    #[cfg(feature = "llvm")]
    fn run_ptxas(&self, ptxas: &Path, l: &Lowered) -> (TargetOutcome, String) {
        let c = match targets::cuda::compile(CliTarget::Cuda, &l.mir, &Request::named("rlxmodel"), &mut Timings::default()) {
            Ok(c) => c,
            Err(f) => return (TargetOutcome::CompileError, format!("compile: {}", f.msg)),
        };
        let dir = self.work.join(format!("case-{}", CASE_DIRS.fetch_add(1, Ordering::Relaxed)));
        let r = targets::cuda::ptxas::assemble(ptxas, &c.ptx, c.sm.num, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        match r {
            Ok(()) => (TargetOutcome::Passed, String::new()),
            Err(e) => (TargetOutcome::Failed, e),
        }
    }

    fn run_harness(&self, h: &Harness, cli: CliTarget, backend: Backend, l: &Lowered) -> Result<Vec<ConstData>, (TargetOutcome, String)> {
        let mut tm = Timings::default();
        let req = Request { backend: Some(backend), ..Request::named("rlxmodel") };
        let c = targets::cpu::compile(cli, &l.mir, &req, &mut tm).map_err(|f| (TargetOutcome::CompileError, format!("compile: {}", f.msg)))?;
        if c.lir.inputs.len() != l.inputs.len() {
            return Err((TargetOutcome::CompileError, format!("the compiled model has {} inputs, the case {}", c.lir.inputs.len(), l.inputs.len())));
        }
        for (x, p) in l.inputs.iter().zip(&c.lir.inputs) {
            if x.dtype != p.ty.dtype || p.ty.shape.as_fixed().as_deref() != Some(&x.shape[..]) {
                return Err((TargetOutcome::CompileError, format!("input '{}' is {}{:?}, the compiled model takes {}", p.name, x.dtype, x.shape, p.ty)));
            }
        }
        let n = CASE_DIRS.fetch_add(1, Ordering::Relaxed);
        let dir = self.work.join(format!("case-{n}"));
        let r = h.link(&c, &dir).and_then(|exe| h.exec(&exe, &c, &dir, &l.inputs));
        let _ = std::fs::remove_dir_all(&dir);
        r.map_err(|e| match e {
            HarnessError::Build(m) => (TargetOutcome::CompileError, m),
            HarnessError::Run(m) => (TargetOutcome::Failed, m),
        })
    }
}

fn panic_msg(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

/// Runs every case under `dir` (optionally filtered), in parallel.
pub fn run_all(dir: &Path, filter: Option<&str>) -> Result<Vec<CaseResult>, String> {
    run_all_targets(dir, filter, None, &[])
}

/// Runs every case under `dir` (optionally filtered, optionally only those named in `only`) on the
/// interpreter and, for the cases that pass there, on each compiled target, in parallel.
pub fn run_all_targets(dir: &Path, filter: Option<&str>, only: Option<&[String]>, envs: &[TargetEnv]) -> Result<Vec<CaseResult>, String> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e} (run `make conformance-data`)", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("model.onnx").exists())
        .filter(|p| filter.is_none_or(|f| p.file_name().is_some_and(|n| n.to_string_lossy().contains(f))))
        .filter(|p| only.is_none_or(|l| p.file_name().is_some_and(|n| l.iter().any(|x| *x == n.to_string_lossy()))))
        .collect();
    if let Some(l) = only {
        let missing: Vec<&String> = l.iter().filter(|x| !dir.join(x).join("model.onnx").exists()).collect();
        if !missing.is_empty() {
            return Err(format!("listed cases not found under {}: {}", dir.display(), missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")));
        }
    }
    cases.sort();
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(cases.len().max(1));
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::with_capacity(cases.len()));
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                let name = case.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                if std::env::var_os("RLX_CONF_TRACE").is_some() {
                    eprintln!("case {name}");
                }
                let r = std::panic::catch_unwind(|| run_case(case));
                let res = match r {
                    Ok((outcome, reason, summary, lowered)) => {
                        let mut targets = Vec::new();
                        if let Some(l) = &lowered {
                            for env in envs {
                                if std::env::var_os("RLX_CONF_TRACE").is_some() {
                                    eprintln!("case {name} on {}", env.target.name());
                                }
                                let (outcome, reason) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| env.run(l)))
                                    .unwrap_or_else(|p| (TargetOutcome::CompileError, format!("panic: {}", panic_msg(&*p))));
                                targets.push(TargetRun { target: env.target, outcome, reason });
                            }
                        }
                        let runtime_inputs = lowered.as_ref().map_or(0, |l| l.inputs.len());
                        CaseResult { op: case_op(&name, summary.as_ref()), name, outcome, reason, targets, runtime_inputs }
                    }
                    Err(p) => {
                        let msg = panic_msg(&*p);
                        let summary = rlx_import::onnx_summary(&case.join("model.onnx")).ok();
                        CaseResult { op: case_op(&name, summary.as_ref()), name, outcome: Outcome::Failed, reason: format!("panic: {msg}"), targets: Vec::new(), runtime_inputs: 0 }
                    }
                };
                results.lock().unwrap_or_else(|e| e.into_inner()).push(res);
            });
        }
    });
    std::panic::set_hook(hook);
    let mut v = results.into_inner().unwrap_or_else(|e| e.into_inner());
    v.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(v)
}

fn one_line(s: &str) -> String {
    let l: String = s.replace('\n', " · ").replace('|', "\\|");
    if l.chars().count() > 220 {
        format!("{}…", l.chars().take(220).collect::<String>())
    } else {
        l
    }
}

/// The compiled targets that appear in the results, in the order they were run.
fn targets_in(res: &[CaseResult]) -> Vec<Column> {
    let mut ts: Vec<Column> = Vec::new();
    for r in res {
        for t in &r.targets {
            if !ts.contains(&t.target) {
                ts.push(t.target);
            }
        }
    }
    ts
}

/// Counts per outcome for one target: [passed, failed, unsupported, compile error].
fn target_counts<'a>(res: impl IntoIterator<Item = &'a CaseResult>, t: Column) -> [usize; 4] {
    let mut c = [0; 4];
    for r in res {
        for x in r.targets.iter().filter(|x| x.target == t) {
            c[x.outcome as usize] += 1;
        }
    }
    c
}

/// `TARGET node cases: P passed of M compiled (of N)`: M counts the cases that pass on the interpreter
/// and legalize for the target (passed + failed + compile errors), N all cases.
fn target_total_line(res: &[CaseResult], t: Column) -> String {
    let c = target_counts(res, t);
    format!("{} node cases: {} passed of {} compiled (of {})", t.name(), c[0], c[0] + c[1] + c[3], res.len())
}

pub fn report_markdown(res: &[CaseResult]) -> String {
    let count = |o: Outcome| res.iter().filter(|r| r.outcome == o).count();
    let (p, f, u) = (count(Outcome::Passed), count(Outcome::Failed), count(Outcome::Unsupported));
    let ts = targets_in(res);
    let mut s = String::new();
    s.push_str("# ONNX node conformance\n\n");
    s.push_str(&format!("node cases: {p} passed of {}\n", res.len()));
    for &t in &ts {
        s.push_str(&format!("{}\n", target_total_line(res, t)));
    }
    s.push_str(&format!("\n- failed: {f}\n- unsupported: {u}\n"));
    for &t in &ts {
        let c = target_counts(res, t);
        s.push_str(&format!(
            "- {}: {} passed, {} failed, {} unsupported, {} compile errors (of the {p} cases that pass on the interpreter)\n",
            t.name(),
            c[0],
            c[1],
            c[2],
            c[3]
        ));
    }
    if let Some(&t) = ts.first() {
        let folded = res.iter().filter(|r| r.runtime_inputs == 0 && r.targets.iter().any(|x| x.target == t && x.outcome == TargetOutcome::Passed)).count();
        s.push_str(&format!(
            "- {folded} of the {} cases passing on {} have no runtime inputs (every input is bound as a constant), so they fold to constants at compile time and test folding and the output copy only\n",
            target_counts(res, t)[0],
            t.name()
        ));
    }
    let cmd: String = ts.iter().map(|t| format!(" --target {}", t.name())).collect();
    s.push_str(&format!("\nGenerated by `rlxc conformance build/onnx-node{cmd} --write docs/conformance.md` (`make conformance`).\n"));
    s.push_str("Interpreter: reference interpreter; rtol 1e-3, atol 1e-7 (the ONNX backend defaults; NaN matches NaN).\n");
    if !ts.is_empty() {
        s.push_str(
            "Compiled targets: every case that passes on the interpreter is compiled from the same lowered MIR (LLVM; `-cranelift` columns: Cranelift), \
             linked with `tests/conformance/harness.c` and `librlx_rt.a`, and run in a child process \
             (x86_64 and x86_64-cranelift: x86-64-v3 on this machine; aarch64 and aarch64-cranelift: generic+neon, a static executable under `qemu-aarch64`). \
             Same tolerance as the interpreter (rtol 1e-3, atol 1e-7): every compiled case passes at it \
             despite FMA contraction (x86-64-v3) and storage-type accumulation in the kernels. \
             \"compiled\" counts the cases that legalize for the target (passed + failed + compile errors).\n",
        );
    }
    s.push_str("\n## By op\n\n| op | passed | failed | unsupported |");
    for t in &ts {
        let n = t.name();
        s.push_str(&format!(" {n} passed | {n} failed | {n} unsupported | {n} compile errors |"));
    }
    s.push_str("\n|---|---:|---:|---:|");
    for _ in &ts {
        s.push_str("---:|---:|---:|---:|");
    }
    s.push('\n');
    let mut by: BTreeMap<&str, Vec<&CaseResult>> = BTreeMap::new();
    for r in res {
        by.entry(&r.op).or_default().push(r);
    }
    for (op, rs) in &by {
        let c = |o: Outcome| rs.iter().filter(|r| r.outcome == o).count();
        s.push_str(&format!("| {op} | {} | {} | {} |", c(Outcome::Passed), c(Outcome::Failed), c(Outcome::Unsupported)));
        for &t in &ts {
            let tc = target_counts(rs.iter().copied(), t);
            s.push_str(&format!(" {} | {} | {} | {} |", tc[0], tc[1], tc[2], tc[3]));
        }
        s.push('\n');
    }
    let rest: Vec<&CaseResult> = res.iter().filter(|r| r.outcome != Outcome::Passed).collect();
    s.push_str(&crate::conformance_gaps::section(&rest));
    for (title, o) in [("Failing cases", Outcome::Failed), ("Unsupported cases", Outcome::Unsupported)] {
        s.push_str(&format!("\n## {title}\n\n"));
        for r in res.iter().filter(|r| r.outcome == o) {
            s.push_str(&format!("- `{}`: {}\n", r.name, one_line(&r.reason)));
        }
    }
    for &t in &ts {
        let runs = || res.iter().flat_map(|r| r.targets.iter().filter(|x| x.target == t).map(move |x| (r, x)));
        for (title, o) in [("failing cases", TargetOutcome::Failed), ("compile errors", TargetOutcome::CompileError)] {
            s.push_str(&format!("\n## {} {title}\n\n", t.name()));
            let mut none = true;
            for (r, x) in runs().filter(|(_, x)| x.outcome == o) {
                s.push_str(&format!("- `{}`: {}\n", r.name, one_line(&x.reason)));
                none = false;
            }
            if none {
                s.push_str("(none)\n");
            }
        }
        s.push_str(&format!("\n## {} unsupported (by op/dtype)\n\n", t.name()));
        let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (r, x) in runs().filter(|(_, x)| x.outcome == TargetOutcome::Unsupported) {
            groups.entry(x.reason.trim_start_matches("unsupported: ")).or_default().push(&r.name);
        }
        for (what, names) in &groups {
            let shown: Vec<String> = names.iter().take(4).map(|n| format!("`{n}`")).collect();
            let more = if names.len() > 4 { format!(", … {} more", names.len() - 4) } else { String::new() };
            s.push_str(&format!("- {} ({} cases): {}{more}\n", one_line(what), names.len(), shown.join(", ")));
        }
    }
    s
}

fn read_ratchet(r: &Path) -> Result<usize, String> {
    match std::fs::read_to_string(r) {
        Ok(t) => t.trim().parse::<usize>().map_err(|_| format!("ratchet file {} does not hold a number", r.display())),
        Err(e) => Err(format!("ratchet file {} is missing or unreadable: {e}", r.display())),
    }
}

fn read_list(p: &Path) -> Result<Vec<String>, String> {
    let t = std::fs::read_to_string(p).map_err(|e| format!("cannot read case list {}: {e}", p.display()))?;
    Ok(t.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()).map(str::to_string).collect())
}

pub fn main(args: &ConformanceArgs) -> i32 {
    let t0 = Instant::now();
    // Ratchets first: a bad flag should fail before minutes of work.
    let mut ratchets: Vec<(Column, PathBuf)> = Vec::new();
    for r in &args.ratchet {
        let (t, path) = match r.split_once('=') {
            Some((t, p)) => match <Column as clap::ValueEnum>::from_str(t, true) {
                Ok(t) => (t, PathBuf::from(p)),
                _ => {
                    eprintln!("error: --ratchet {r}: '{t}' is not interp, x86_64, aarch64, x86_64-cranelift, aarch64-cranelift or vulkan");
                    return 1;
                }
            },
            None => (Column::Interp, PathBuf::from(r)),
        };
        if t != Column::Interp && !args.targets.contains(&t) {
            eprintln!("error: --ratchet {r} needs --target {}", t.name());
            return 1;
        }
        ratchets.push((t, path));
    }
    let only = match args.list.as_deref().map(read_list).transpose() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    let mut wanted: Vec<Column> = Vec::new();
    for &t in &args.targets {
        if t != Column::Interp && !wanted.contains(&t) {
            wanted.push(t);
        }
    }
    let work = std::env::temp_dir().join(format!("rlxc-conformance-{}", std::process::id()));
    let mut envs = Vec::new();
    for &t in &wanted {
        match TargetEnv::prepare(t, &work) {
            Ok(e) => envs.push(e),
            Err(e) => {
                eprintln!("error: {e}");
                let _ = std::fs::remove_dir_all(&work);
                return 1;
            }
        }
    }
    let res = run_all_targets(&args.dir, args.filter.as_deref(), only.as_deref(), &envs);
    let _ = std::fs::remove_dir_all(&work);
    let res = match res {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    let count = |o: Outcome| res.iter().filter(|r| r.outcome == o).count();
    let passed = count(Outcome::Passed);
    let panics: Vec<&CaseResult> = res.iter().filter(|r| r.reason.starts_with("panic")).collect();
    for p in &panics {
        eprintln!("PANIC {}: {}", p.name, one_line(&p.reason));
    }
    println!(
        "node cases: {passed} passed of {} ({} failed, {} unsupported, {} panics) in {:.1}s",
        res.len(),
        count(Outcome::Failed),
        count(Outcome::Unsupported),
        panics.len(),
        t0.elapsed().as_secs_f64()
    );
    for &t in &wanted {
        let c = target_counts(&res, t);
        println!("{} ({} failed, {} unsupported, {} compile errors)", target_total_line(&res, t), c[1], c[2], c[3]);
        for r in &res {
            for x in r.targets.iter().filter(|x| x.target == t && matches!(x.outcome, TargetOutcome::Failed | TargetOutcome::CompileError)) {
                let tag = if x.outcome == TargetOutcome::Failed { "FAIL" } else { "COMPILE ERROR" };
                eprintln!("{} {tag} {}: {}", t.name(), r.name, one_line(&x.reason));
            }
        }
    }
    if let Some(w) = &args.write {
        if let Some(parent) = w.parent().filter(|p| !p.as_os_str().is_empty()) {
            let _ = std::fs::create_dir_all(parent);
        }
        if let Err(e) = std::fs::write(w, report_markdown(&res)) {
            eprintln!("error: cannot write {}: {e}", w.display());
            return 1;
        }
        println!("wrote {}", w.display());
    }
    let mut code = 0;
    for (t, path) in &ratchets {
        let min = match read_ratchet(path) {
            Ok(n) => n,
            Err(e) => {
                eprintln!("error: {e}");
                return 1;
            }
        };
        let got = if *t == Column::Interp { passed } else { target_counts(&res, *t)[0] };
        let label = if *t == Column::Interp { String::new() } else { format!("{} ", t.name()) };
        if got < min {
            eprintln!("ratchet: {got} {label}cases pass, fewer than the {min} required by {}", path.display());
            code = 1;
        } else {
            println!("ratchet: {label}{got} passed >= {min} required");
        }
    }
    code
}

