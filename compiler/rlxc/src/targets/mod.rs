//! One interface for every target family: [`Family`].
//!
//! A family (CPU through LLVM or Cranelift, Cortex-M, Verilog, the shader languages, CUDA, the
//! interpreter)
//! says what it claims (`caps`), which command-line flags it takes (`flags`, checked here with one
//! wording), which passes it wants (`quantization`: none, int8 with `--calibrate`, or int8 always),
//! how it plans (`planning`: `PlanOptions`, the smallest arena over several orders, or no LIR at all),
//! how it writes its artifact (`emit` → [`Artifact`]: files plus a manifest, written by the one
//! all-or-nothing writer in [`write`]), and, where this machine can run it, how it executes
//! (`load` → [`Session`]). `rlxc compile`, `run`, `bench` and the conformance columns only call
//! [`compile`] and [`load`]; they never ask which family a target belongs to.
//!
//! Adding a target: a module here with a type implementing [`Family`], a variant of `cli::Target`
//! (its `--target` name and help line) and one arm in [`family`].

pub mod cpu;
pub mod cuda;
pub mod interp;
pub mod mcu;
pub mod run;
pub mod shader;
pub mod verilog;
pub mod write;

use crate::cli::{Backend, Failure, Target};
use crate::pipeline::{calibration_samples, eval_op, legalize, Timings};
use rlx_ir::lir::Lir;
use rlx_ir::{ConstData, Mir, TargetCaps};
use rlx_opt::DispatchReport;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use run::{Counter, Session};

/// The registration: which family compiles and runs each `--target`.
pub fn family(t: Target) -> &'static dyn Family {
    match t {
        Target::Interp | Target::InterpInt8 => &interp::Interp,
        Target::Host | Target::X86_64 | Target::Aarch64 => &cpu::Cpu,
        Target::CortexM0plus | Target::CortexM3 | Target::CortexM4 | Target::CortexM7 | Target::CortexM33 | Target::CortexM55 => &mcu::Mcu,
        Target::Verilog => &verilog::Verilog,
        Target::Vulkan | Target::Spirv | Target::Webgpu | Target::Metal | Target::Directx | Target::Opengl => &shader::Shader,
        Target::Cuda => &cuda::Cuda,
    }
}

/// Command-line flags that only some families take. A family lists the ones it takes in
/// [`Family::flags`]; any other one given is a usage error worded by [`check_flags`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flag {
    Cpu,
    Backend,
    WeightsExternal,
    ExactActivations,
    Winograd,
    Layout,
    EmitIr,
    EmitRust,
    Calibrate,
    RamBudget,
    FlashBudget,
    MacsPerCycle,
    Board,
    Sm,
    Precision,
}

impl Flag {
    pub fn spelling(self) -> &'static str {
        match self {
            Flag::Cpu => "--cpu",
            Flag::Backend => "--backend",
            Flag::WeightsExternal => "--weights external",
            Flag::ExactActivations => "--exact-activations",
            Flag::Winograd => "--winograd",
            Flag::Layout => "--layout",
            Flag::EmitIr => "--emit-ir",
            Flag::EmitRust => "--emit rust",
            Flag::Calibrate => "--calibrate",
            Flag::RamBudget => "--ram-budget",
            Flag::FlashBudget => "--flash-budget",
            Flag::MacsPerCycle => "--macs-per-cycle",
            Flag::Board => "--board",
            Flag::Sm => "--sm",
            Flag::Precision => "--precision",
        }
    }
}

/// What the command line asked for beyond the model and the target.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// Artifact name and C symbol prefix.
    pub name: String,
    pub cpu: Option<String>,
    pub backend: Option<Backend>,
    pub external_weights: bool,
    pub emit_ir: bool,
    pub emit_rust: bool,
    pub calibrate: Option<PathBuf>,
    pub ram_budget: Option<usize>,
    pub flash_budget: Option<usize>,
    pub macs_per_cycle: Option<usize>,
    pub board: Option<String>,
    /// `--sm`: the GPU architecture of a CUDA compile.
    pub sm: Option<cuda::Sm>,
    /// `--precision`: the arithmetic of a CUDA compile's f32 matmuls.
    pub precision: Option<crate::cli::Precision>,
    /// `--exact-activations`: CPU targets keep f32 activations in block-quantized matmuls (no int8
    /// dot products; `rlx_opt::PlanOptions::int8_dot`).
    pub exact_activations: bool,
    /// `--winograd`: CPU targets' form of dense 3×3 stride-1 convolutions (default F(4×4, 3×3)).
    pub winograd: Option<crate::cli::Winograd>,
    /// `--layout`: CPU targets' activation layout around convolutions (default: the layout pass decides).
    pub layout: Option<crate::cli::Layout>,
    /// The model's node names → op types (`ModelSource::node_op_types`), for errors that speak of
    /// the model's ops rather than the MIR's.
    pub source_ops: BTreeMap<String, String>,
}

impl Request {
    /// A request with only a name (what `rlxc run` and the tests compile with).
    pub fn named(name: &str) -> Request {
        Request { name: name.to_string(), ..Default::default() }
    }
    fn given(&self) -> Vec<Flag> {
        let mut v = Vec::new();
        let mut on = |b: bool, f: Flag| {
            if b {
                v.push(f)
            }
        };
        on(self.cpu.is_some(), Flag::Cpu);
        on(self.backend.is_some(), Flag::Backend);
        on(self.external_weights, Flag::WeightsExternal);
        on(self.exact_activations, Flag::ExactActivations);
        on(self.winograd.is_some(), Flag::Winograd);
        on(self.layout.is_some(), Flag::Layout);
        on(self.emit_ir, Flag::EmitIr);
        on(self.emit_rust, Flag::EmitRust);
        on(self.calibrate.is_some(), Flag::Calibrate);
        on(self.ram_budget.is_some(), Flag::RamBudget);
        on(self.flash_budget.is_some(), Flag::FlashBudget);
        on(self.macs_per_cycle.is_some(), Flag::MacsPerCycle);
        on(self.board.is_some(), Flag::Board);
        on(self.sm.is_some(), Flag::Sm);
        on(self.precision.is_some(), Flag::Precision);
        v
    }
}

/// The passes a family wants before legalization.
pub enum Quantization {
    /// Fold and DCE only (float and integer models as they are).
    Never,
    /// int8 with `--calibrate`; an already-quantized (QDQ) model is mapped with its own parameters
    /// without it; else float.
    Optional(rlx_opt::QuantOptions),
    /// int8 always: `--calibrate` is required.
    Required(rlx_opt::QuantOptions),
}

/// How a family plans the legalized MIR.
pub enum Planning {
    /// No LIR: the writer reads the MIR (Verilog).
    None,
    /// `rlx_opt::plan` with these options.
    Plan(rlx_opt::PlanOptions),
    /// `rlx_opt::plan_min_arena`: several operator orders, the smallest arena kept.
    SmallestArena(rlx_opt::PlanOptions),
}

/// The int8 parameters of the model's ports, when the passes quantized it.
#[derive(Clone, Debug)]
pub struct QuantPorts {
    pub inputs: Vec<rlx_opt::QParams>,
    pub outputs: Vec<rlx_opt::QParams>,
}

/// The MIR after the family's passes, legalized and planned: what [`Family::emit`] writes from.
pub struct Prepared {
    pub mir: Mir,
    pub quant: Option<QuantPorts>,
    /// The calibration samples (`--calibrate`), one `Vec` of inputs each.
    pub calib: Option<Vec<Vec<ConstData>>>,
    pub report: DispatchReport,
    pub lir: Option<Lir>,
    /// Arena bytes of each operator order tried ([`Planning::SmallestArena`]).
    pub order: Option<rlx_opt::OrderReport>,
}

/// A compiled artifact, before it is written.
pub trait Artifact {
    fn report(&self) -> &DispatchReport;
    /// What `rlxc compile` prints after "compiled MODEL for ": the target and the artifact's size.
    fn summary(&self) -> String;
    /// The files (`(file name, bytes)`) and the manifest `NAME.json` records.
    fn files(&self, name: &str, model: &Path) -> Result<(Vec<(String, Vec<u8>)>, serde_json::Value), Failure>;
}

/// A target family. See the module documentation.
pub trait Family: Sync {
    /// How error messages name the family's targets, e.g. "MCU targets (--target cortex-m*)".
    fn describe(&self) -> &'static str;
    fn caps(&self, t: Target) -> TargetCaps;
    /// The family-specific flags it takes.
    fn flags(&self) -> &'static [Flag] {
        &[]
    }
    /// Checks of flag values (after [`check_flags`]).
    fn check(&self, _t: Target, _r: &Request) -> Result<(), Failure> {
        Ok(())
    }
    fn quantization(&self, t: Target) -> Quantization;
    /// Checks the program after the passes, before legalization (what the writer cannot map, named
    /// by the model's nodes).
    fn check_program(&self, _t: Target, _mir: &Mir, _r: &Request) -> Result<(), Failure> {
        Ok(())
    }
    fn planning(&self, t: Target, r: &Request) -> Result<Planning, Failure>;
    /// The family's own MIR rewrites after folding (none by default; the CUDA family merges a layer's
    /// Q, K and V projections into one matmul: `rlx_opt::merge_matmuls`).
    fn rewrite(&self, _t: Target, _r: &Request, mir: Mir) -> Mir {
        mir
    }
    /// Writes the target's code from the prepared program.
    fn emit(&self, t: Target, p: Prepared, r: &Request, tm: &mut Timings) -> Result<Box<dyn Artifact>, Failure>;
    /// Whether `t` is a column of the op-coverage table (one per distinct claim set).
    fn coverage_column(&self, _t: Target) -> bool {
        true
    }
    /// Whether [`Family::load`] can run `t` on this kind of machine (what `rlxc run --help` lists).
    fn runs(&self, _t: Target) -> bool {
        false
    }
    /// Compiles `mir` and loads it into an executor (the phases are timed into `tm`).
    fn load(&self, t: Target, _mir: &Mir, _r: &Request, _tm: &mut Timings) -> Result<Box<dyn Session>, Failure> {
        Err(Failure::usage(format!("rlxc has no executor for --target {}; compile it with `rlxc compile --target {}` and run the artifact there", t.name(), t.name())))
    }
}

/// Every target name `rlxc run` and `rlxc bench` accept.
pub fn runnable() -> Vec<Target> {
    use clap::ValueEnum;
    Target::value_variants().iter().copied().filter(|&t| family(t).runs(t)).collect()
}

/// Flags given that the target's family does not take are usage errors, worded the same for every
/// flag and family: "--X applies to <families that take it>, not --target T".
pub fn check_flags(t: Target, r: &Request) -> Result<(), Failure> {
    use clap::ValueEnum;
    let fam = family(t);
    let wrong: Vec<Flag> = r.given().into_iter().filter(|f| !fam.flags().contains(f)).collect();
    if let Some(&f) = wrong.first() {
        let mut takers: Vec<&'static str> = Vec::new();
        for &u in Target::value_variants() {
            let d = family(u).describe();
            if family(u).flags().contains(&f) && !takers.contains(&d) {
                takers.push(d);
            }
        }
        let to = match takers.split_last() {
            None => "no target".to_string(),
            Some((last, [])) => last.to_string(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        };
        return Err(Failure::usage(format!("{} applies to {to}, not --target {}", f.spelling(), t.name())));
    }
    fam.check(t, r)
}

/// Reads `--calibrate` once: a float32 `.npy` of `[N, ...input shape]` split into samples.
pub fn read_calibration(path: &Path, mir: &Mir) -> Result<Vec<Vec<ConstData>>, Failure> {
    let data = crate::npy::read(path).map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
    if mir.inputs.len() != 1 {
        return Err(Failure::usage(format!("--calibrate takes one .npy: the model has {} inputs", mir.inputs.len())));
    }
    calibration_samples(&data, mir.ty(mir.inputs[0])).map_err(|e| Failure::usage(format!("{}: {e}", path.display())))
}

/// A planned program that keeps state (a KV cache, a resident training step's parameters) on a
/// family whose writer has no state region: a model error naming the target.
pub fn refuse_state(t: Target, lir: &rlx_ir::lir::Lir) -> Result<(), Failure> {
    if lir.state.is_empty() {
        return Ok(());
    }
    Err(Failure::model(format!(
        "target {}: the model keeps state between calls ({} tensors, e.g. '{}': a KV cache, or the parameters of a training step from --train); stateful artifacts compile for the CPU targets (host, x86_64, aarch64) and cuda",
        t.name(),
        lir.state.len(),
        lir.state[0].port.name
    )))
}

/// The family's passes: fold, or quantize (with the calibration samples, or a QDQ model's own
/// parameters).
pub fn passes(t: Target, mir: &Mir, r: &Request, tm: &mut Timings) -> Result<(Mir, Option<QuantPorts>, Option<Vec<Vec<ConstData>>>), Failure> {
    let calib = match &r.calibrate {
        Some(p) => Some(read_calibration(p, mir)?),
        None => None,
    };
    let ports = |q: rlx_opt::Quantized| (q.mir, Some(QuantPorts { inputs: q.inputs, outputs: q.outputs }));
    let (out, quant) = match (family(t).quantization(t), &calib) {
        (Quantization::Never, _) => (tm.time("fold", || rlx_opt::simplify(mir, &eval_op)), None),
        // A QDQ model on a target that is int8 only (Verilog) keeps its own scales and zero points;
        // --calibrate, if given, only supplies the testbench's vectors.
        (Quantization::Required(o), _) if rlx_opt::is_qdq(mir) => ports(tm.time("quantize (QDQ)", || crate::pipeline::quantize_qdq_mir_with(mir, &o))?),
        (Quantization::Required(_), None) => {
            return Err(Failure::usage(format!("--target {} builds an int8 program: pass --calibrate data.npy", t.name())))
        }
        (Quantization::Optional(_), Some(_)) if rlx_opt::is_qdq(mir) => {
            return Err(Failure::usage(
                "the model is already quantized (QuantizeLinear / DequantizeLinear): compile it without --calibrate, with its own scales and zero points",
            ))
        }
        (Quantization::Optional(o) | Quantization::Required(o), Some(c)) => ports(tm.time("quantize", || crate::pipeline::quantize_mir_with(mir, c, &o))?),
        (Quantization::Optional(_), None) if rlx_opt::is_qdq(mir) => ports(tm.time("quantize (QDQ)", || crate::pipeline::quantize_qdq_mir(mir))?),
        (Quantization::Optional(_), None) => (tm.time("fold", || rlx_opt::simplify(mir, &eval_op)), None),
    };
    let out = family(t).rewrite(t, r, out);
    Ok((out, quant, calib))
}

/// The family's passes, its program check, legalization against its claim set, and its planning.
pub fn prepare(t: Target, mir: &Mir, r: &Request, tm: &mut Timings) -> Result<Prepared, Failure> {
    let fam = family(t);
    check_flags(t, r)?;
    let (mir, quant, calib) = passes(t, mir, r, tm)?;
    fam.check_program(t, &mir, r)?;
    let report = legalize(&mir, &fam.caps(t), tm)?;
    let (lir, order) = match fam.planning(t, r)? {
        Planning::None => (None, None),
        Planning::Plan(o) => (Some(tm.time("plan", || rlx_opt::plan(&mir, &o)).map_err(plan_err)?), None),
        Planning::SmallestArena(o) => {
            let (l, ord) = tm.time("plan", || rlx_opt::plan_min_arena(&mir, &o)).map_err(plan_err)?;
            (Some(l), Some(ord))
        }
    };
    Ok(Prepared { mir, quant, calib, report, lir, order })
}

fn plan_err<P: std::fmt::Display>(p: Vec<P>) -> Failure {
    Failure::model(crate::cli::problem_list("cannot plan the model", &p))
}

/// The compile script after import and lowering: the target's passes → legalize → plan → its writer.
pub fn compile(t: Target, mir: &Mir, r: &Request, tm: &mut Timings) -> Result<Box<dyn Artifact>, Failure> {
    let p = prepare(t, mir, r, tm)?;
    family(t).emit(t, p, r, tm)
}

/// Compiles `mir` for `t` and loads it into the target's executor.
pub fn load(t: Target, mir: &Mir, r: &Request, tm: &mut Timings) -> Result<Box<dyn Session>, Failure> {
    check_flags(t, r)?;
    family(t).load(t, mir, r, tm)
}
