//! rlx-target-llvm: the LLVM back end. Translates LIR's loop-form kernels into LLVM IR
//! ([`ir::module_text`]), optimizes with LLVM's O2 pipeline for the chosen CPU, and emits an object
//! file: internal kernel functions, an exported `NAME_run` entry, and the weights blob as an internal
//! constant (or, with external weights, a pointer set by `NAME_set_weights`).
//!
//! `nvptx/` is the CUDA target: the same loop form → `ptx_kernel` functions → PTX.
//!
//! It depends on rlx-ir only, and hands the legalizer its claim set as data ([`caps`]).

pub mod ir;
pub mod nvptx;

use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::module::Linkage;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple};
use inkwell::OptimizationLevel;
use rlx_ir::lir::Lir;
use rlx_ir::{DType, TargetCaps};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
}

/// What to generate code for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuTarget {
    pub arch: Arch,
    /// LLVM CPU name (`x86-64-v3`, `znver3`, `cortex-a72`, …).
    pub cpu: String,
    /// LLVM feature string (`+avx2,+fma`).
    pub features: String,
}

impl CpuTarget {
    pub fn triple(&self) -> &'static str {
        match self.arch {
            Arch::X86_64 => "x86_64-unknown-linux-gnu",
            Arch::Aarch64 => "aarch64-unknown-linux-gnu",
        }
    }
    /// The machine this runs on, with all its features.
    pub fn host() -> Result<CpuTarget, String> {
        let arch = match std::env::consts::ARCH {
            "x86_64" => Arch::X86_64,
            "aarch64" => Arch::Aarch64,
            a => return Err(format!("host architecture {a} is not supported by the LLVM target")),
        };
        init();
        Ok(CpuTarget {
            arch,
            cpu: TargetMachine::get_host_cpu_name().to_string(),
            features: TargetMachine::get_host_cpu_features().to_string(),
        })
    }
    /// A portable baseline for the architecture (x86-64-v2 without AVX; generic armv8-a with NEON).
    pub fn baseline(arch: Arch) -> CpuTarget {
        match arch {
            Arch::X86_64 => CpuTarget { arch, cpu: "x86-64".into(), features: String::new() },
            Arch::Aarch64 => CpuTarget { arch, cpu: "generic".into(), features: "+neon".into() },
        }
    }
}

fn init() {
    let cfg = InitializationConfig::default();
    Target::initialize_x86(&cfg);
    Target::initialize_aarch64(&cfg);
}

/// Dtypes this target implements: the shared CPU set ([`rlx_ir::loops::LOWERED_DTYPES`]).
pub const DTYPES: &[DType] = rlx_ir::loops::LOWERED_DTYPES;

/// MIR op kinds this target claims: every kind the shared kernel lowering produces loop form for.
pub const KINDS: &[&str] = rlx_ir::loops::LOWERED_KINDS;

/// The claim set for `--target NAME` ([`rlx_ir::loops::lowered_caps`], the same for every CPU writer).
pub fn caps(name: &str) -> TargetCaps {
    // Collectives and transfers: calls into runtime-min's communicator (`rlx_rt_collective`).
    let sums = [DType::F32, DType::F64, DType::I32, DType::I64];
    rlx_ir::loops::lowered_caps(name)
        .with("all_reduce", &sums)
        .with("all_gather", DTYPES)
        .with("reduce_scatter", &sums)
        .with("send", DTYPES)
        .with("recv", DTYPES)
        // Control-flow regions (`rlx_ir::lir::Region`): control flow in the driver, values of any
        // dtype copied bytewise (the bodies' nodes are resolved one by one).
        .with("loop", rlx_ir::loops::LOWERED_DTYPES)
        .with("if", rlx_ir::loops::LOWERED_DTYPES)
}

pub use rlx_ir::loops::Int8Dot;

/// Options for one compile.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// C symbol prefix: `NAME_run`.
    pub name: String,
    pub target: CpuTarget,
    /// Weights are loaded by the caller (`NAME_set_weights`) instead of embedded.
    pub external_weights: bool,
    /// The CPU's int8 dot product instruction, for `Dot4`.
    pub int8: Int8Dot,
}

/// The generated LLVM IR (before optimization), for `--emit llvm` and filetests.
pub fn emit_ir(lir: &Lir, opts: &CompileOptions) -> String {
    ir::module_text(lir, &opts.name, opts.target.triple(), &opts.target.cpu, &opts.target.features, opts.external_weights, opts.int8)
}

/// Compiles LIR to an ELF object. Deterministic: the same LIR and options give the same bytes.
pub fn compile(lir: &Lir, opts: &CompileOptions) -> Result<Vec<u8>, String> {
    init();
    let text = emit_ir(lir, opts);
    let ctx = Context::create();
    let buf = MemoryBuffer::create_from_memory_range_copy(text.as_bytes(), &opts.name);
    let module = ctx.create_module_from_ir(buf).map_err(|e| format!("internal error: generated LLVM IR does not parse: {}", e.to_string()))?;
    let triple = TargetTriple::create(opts.target.triple());
    let target = Target::from_triple(&triple).map_err(|e| format!("LLVM has no target {}: {}", opts.target.triple(), e.to_string()))?;
    let tm = target
        .create_target_machine(&triple, &opts.target.cpu, &opts.target.features, OptimizationLevel::Default, RelocMode::PIC, CodeModel::Default)
        .ok_or_else(|| format!("LLVM rejected cpu '{}' with features '{}'", opts.target.cpu, opts.target.features))?;
    module.set_triple(&triple);
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    if !lir.weights.is_empty() && !opts.external_weights {
        let g = module.get_global(&format!("{}_weights", opts.name)).ok_or("internal error: weights global missing")?;
        let init = ctx.const_string(&lir.weights, false);
        g.set_initializer(&init);
        g.set_linkage(Linkage::Internal);
        g.set_constant(true);
    }
    module.verify().map_err(|e| format!("internal error: LLVM module does not verify: {}", e.to_string()))?;
    module
        .run_passes("default<O2>", &tm, PassBuilderOptions::create())
        .map_err(|e| format!("internal error: LLVM optimization failed: {}", e.to_string()))?;
    let obj = tm.write_to_memory_buffer(&module, FileType::Object).map_err(|e| format!("LLVM code generation failed: {}", e.to_string()))?;
    Ok(obj.as_slice().to_vec())
}
