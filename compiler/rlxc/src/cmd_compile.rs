//! `rlxc compile`: the artifact contract — `NAME.o`, `NAME.h`, `NAME.rs`, `NAME.json`, and the
//! runtime static library named by the link line. The pipeline itself is `rlxc::pipeline`.

use crate::{problem_list, Failure, ModelSource, Target};
use rlxc::artifact;
use rlxc::pipeline::{calibration_samples, compile_mcu, compile_mir, compile_verilog, cpu_target, default_name, write_artifacts, write_mcu_artifacts, write_verilog_artifacts, Budgets, Timings};
use std::path::PathBuf;
use std::time::Instant;

pub const LONG_ABOUT: &str = "Compile a model ahead of time into a linkable object for a CPU target.\n\n\
Writes into DIR: NAME.o (kernels, the NAME_run entry point and, by default, the weights), NAME.h (C API: \
NAME_ARENA_BYTES, NAME_NUM_INPUTS/OUTPUTS, error codes, NAME_run), NAME.rs (a safe Rust wrapper over rlx-rt), \
NAME.json (manifest: ports, arena and weights bytes, target, dispatch report, sha256 of the object, link line), \
librlx_rt.a (runtime-min: the thread pool the object calls for parallel kernels), and with --weights external \
NAME.weights.bin.\n\n\
Symbolic dims must be fixed: --dim NAME=N (repeatable), --batch N for the batch dim.\n\
MCU targets (--target cortex-m0plus|m3|m4|m7|m33|m55) write C99 sources instead: NAME.c (const weights, a \
static arena, one function per kernel, NAME_run), NAME.h (NAME_ARENA_BYTES, NAME_WEIGHTS_BYTES, port sizes and, \
with --calibrate, each port's scale and zero point) and NAME.json; with --emit rust, one no_std NAME.rs instead of \
NAME.c/NAME.h (static weights and arena, `pub fn run(&[T; N], &mut [T; M]) -> Result<(), Error>`, the same constants). \
The arena is planned for several operator orders and the smallest kept. With --calibrate data.npy ([N, ...input shape] \
float32) the model is quantized to int8 (int8 inputs and outputs); --ram-budget / --flash-budget fail the compile, \
naming the largest buffers, when the arena / the weights do not fit.\n\n\
--target verilog --calibrate data.npy [--macs-per-cycle N] writes a synthesizable Verilog-2005 design of the int8 \
network: NAME.v (layer-sequential datapath, N int8 MACs per cycle, valid/ready byte streams; ports documented in its \
header), NAME_weights.mem and NAME_qparams.mem (ROM images), NAME_tb.v (self-checking testbench) with \
NAME_tb_in.mem / NAME_tb_expected.mem (the calibration samples and the interpreter's int8 outputs) and NAME.json.\n\n\
GPU targets (--target vulkan|spirv|webgpu|metal|directx|opengl) write compute shaders through naga instead: \
NAME.spv (SPIR-V, entry points k0, k1, …) or NAME.wgsl / NAME.metal / NAME.hlsl / NAME.kI.comp, NAME.schedule.bin \
(buffers and dispatches in order, read by runtime-min's Vulkan executor), NAME.weights.bin and NAME.json.\n\n\
--target cuda [--sm 80|86|89|90] writes NAME.ptx (LLVM's NVPTX back end: entry points k0, k1, …, one pointer per \
buffer), NAME.schedule.bin (buffers, then per dispatch its grid, block and byte ranges; read by runtime-min's CUDA \
executor, which records them as one CUDA graph), NAME.weights.bin and NAME.json.\n\n\
The same model and flags always give the same bytes.";

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Emit {
    /// C99 sources (NAME.c, NAME.h)
    C,
    /// no_std Rust source (NAME.rs): static weights, static arena, `pub fn run`
    Rust,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weights {
    /// Embedded in NAME.o as a constant
    Embedded,
    /// Written to NAME.weights.bin; the caller passes them to NAME_set_weights before NAME_run
    External,
}

#[derive(clap::Args, Debug)]
pub struct CompileArgs {
    /// The model: an .onnx file or a safetensors folder (config.json + model.safetensors)
    pub model: PathBuf,
    /// Target: host (this machine's CPU and features), x86_64 (x86-64-v3: AVX2+FMA unless --cpu), aarch64 (NEON)
    #[arg(long, value_enum, default_value_t = Target::Host)]
    pub target: Target,
    /// Output folder (created if missing)
    #[arg(short = 'o', long = "out")]
    pub out: PathBuf,
    /// Artifact name and C symbol prefix (default: the model file's stem)
    #[arg(long)]
    pub name: Option<String>,
    /// Fix a symbolic dim: NAME=N (repeatable)
    #[arg(long = "dim", value_name = "NAME=N", value_parser = crate::parse_dim)]
    pub dims: Vec<(String, u64)>,
    /// Short for --dim batch=N (and any other dim whose name starts with "batch")
    #[arg(long)]
    pub batch: Option<u64>,
    /// Where the weights go
    #[arg(long, value_enum, default_value_t = Weights::Embedded)]
    pub weights: Weights,
    /// LLVM CPU name (e.g. x86-64-v3, znver3, cortex-a72); default depends on --target
    #[arg(long)]
    pub cpu: Option<String>,
    /// Native code generator for host/x86_64/aarch64: llvm (default when built in) or cranelift
    /// (no LLVM needed, faster compiles, slower code). The artifacts are the same contract.
    #[arg(long, value_enum)]
    pub backend: Option<rlxc::cli::Backend>,
    /// Print the dispatch report (every node: native / common-IR / rewritten / unsupported)
    #[arg(long)]
    pub report: bool,
    /// Print the time of each compile phase
    #[arg(long)]
    pub timings: bool,
    /// Also write NAME.ll (LLVM IR before optimization) and NAME.lir (the planned program and kernels)
    #[arg(long)]
    pub emit_ir: bool,
    /// MCU targets: the source language written
    #[arg(long, value_enum, default_value_t = Emit::C)]
    pub emit: Emit,
    /// MCU and verilog targets: quantize to int8 with these calibration inputs (.npy, float32, [N, ...input shape])
    #[arg(long, value_name = "NPY")]
    pub calibrate: Option<PathBuf>,
    /// MCU targets: fail when the static arena needs more than BYTES of RAM
    #[arg(long, value_name = "BYTES")]
    pub ram_budget: Option<usize>,
    /// MCU targets: fail when the const weights need more than BYTES of flash
    #[arg(long, value_name = "BYTES")]
    pub flash_budget: Option<usize>,
    /// --target cuda: the GPU architecture the PTX is written for (80, 86, 89 or 90; default 80, which
    /// the driver JIT-compiles for any newer GPU)
    #[arg(long, value_name = "SM")]
    pub sm: Option<u32>,
    /// --target verilog: int8 multipliers in the MAC array (output channels computed per cycle)
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub macs_per_cycle: usize,
}

pub fn main(a: &CompileArgs) -> Result<(), Failure> {
    let src = ModelSource::from_path(&a.model)?;
    let dims = rlxc::dims::resolve(&src, &a.dims, a.batch)?;
    let mut tm = Timings::default();
    let total = Instant::now();
    let mcu = a.target.mcu_core().is_some();
    let verilog = a.target == Target::Verilog;
    if verilog && a.calibrate.is_none() {
        return Err(Failure::usage("--target verilog builds an int8 datapath: pass --calibrate data.npy"));
    }
    if !verilog && a.macs_per_cycle != 1 {
        return Err(Failure::usage("--macs-per-cycle applies to --target verilog"));
    }
    if verilog && (a.ram_budget.is_some() || a.flash_budget.is_some()) {
        return Err(Failure::usage("--ram-budget and --flash-budget apply to MCU targets (--target cortex-m*)"));
    }
    if !mcu && a.emit == Emit::Rust {
        return Err(Failure::usage("--emit rust applies to MCU targets (--target cortex-m*); CPU targets always write a Rust binding NAME.rs"));
    }
    if !mcu && !verilog && (a.calibrate.is_some() || a.ram_budget.is_some() || a.flash_budget.is_some()) {
        return Err(Failure::usage("--calibrate, --ram-budget and --flash-budget apply to MCU targets (--target cortex-m*)"));
    }
    let cuda = a.target == Target::Cuda;
    if !cuda && a.sm.is_some() {
        return Err(Failure::usage("--sm applies to --target cuda"));
    }
    if a.cpu.is_some() && (mcu || verilog || cuda || a.target.shader_lang().is_some()) {
        return Err(Failure::usage(format!("--cpu applies to CPU targets (host, x86_64, aarch64), not --target {}", a.target.name())));
    }
    let cpu = if mcu || verilog || cuda || a.target.shader_lang().is_some() { None } else { Some(cpu_target(a.target, a.cpu.as_deref())?) };
    let cpu = cpu.map(|mut c| {
        c.backend = a.backend.unwrap_or_default();
        c
    });
    let hir = tm.time("import", || src.import(&dims))?;
    let mut free: Vec<String> = hir.input_symbols();
    free.retain(|s| !dims.contains_key(s));
    if !free.is_empty() {
        return Err(Failure::model(format!(
            "symbolic dims must be fixed for a compiled artifact: {} (add {})",
            free.join(", "),
            free.iter().map(|s| format!("--dim {s}=N")).collect::<Vec<_>>().join(" ")
        )));
    }
    let mir = tm.time("lower", || rlx_opt::lower(&hir)).map_err(|p| Failure::model(problem_list("cannot lower the model to MIR", &p)))?;
    let name = a.name.clone().map(|n| artifact::sanitize_ident(&n)).unwrap_or_else(|| default_name(&a.model));
    if cuda {
        let c = rlxc::cuda::compile_cuda(&mir, a.sm.unwrap_or(rlxc::cuda::DEFAULT_SM), &mut tm)?;
        let files = tm.time("write", || rlxc::cuda::write_cuda_artifacts(&a.out, &name, &a.model, &c))?;
        if a.report {
            crate::cmd_check::print_report(&c.report);
        }
        println!("compiled {} for cuda (sm_{}): {} kernels, arena {} bytes, weights {} bytes, in {:.2?}", a.model.display(), c.sm, c.lir.launches.len(), c.lir.arena_bytes, c.lir.weights.len(), total.elapsed());
        for f in files {
            println!("  {}", f.display());
        }
        return Ok(());
    }
    if a.target.shader_lang().is_some() {
        let c = rlxc::shader::compile_shader(&mir, a.target, &mut tm)?;
        let files = tm.time("write", || rlxc::shader::write_shader_artifacts(&a.out, &name, &a.model, a.target, &c))?;
        if a.report {
            crate::cmd_check::print_report(&c.report);
        }
        println!(
            "compiled {} for {}: {} kernels ({} dispatches), arena {} bytes, weights {} bytes, in {:.2?}",
            a.model.display(),
            a.target.name(),
            c.lir.launches.len(),
            c.program.dispatches.len(),
            c.lir.arena_bytes,
            c.lir.weights.len(),
            total.elapsed()
        );
        for f in files {
            println!("  {}", f.display());
        }
        return Ok(());
    }
    if verilog {
        let p = a.calibrate.as_ref().expect("checked above");
        let data = rlxc::npy::read(p).map_err(|e| Failure::usage(format!("{}: {e}", p.display())))?;
        if mir.inputs.len() != 1 {
            return Err(Failure::usage(format!("--calibrate takes one .npy: the model has {} inputs", mir.inputs.len())));
        }
        let calib = calibration_samples(&data, mir.ty(mir.inputs[0])).map_err(|e| Failure::usage(format!("{}: {e}", p.display())))?;
        let c = compile_verilog(&mir, &name, &calib, a.macs_per_cycle, &src.node_op_types(), &mut tm)?;
        let files = tm.time("write", || write_verilog_artifacts(&a.out, &name, &a.model, &c))?;
        if a.report {
            crate::cmd_check::print_report(&c.report);
        }
        println!(
            "compiled {} for verilog (int8): {} layer(s), {} MAC(s) per cycle, {} cycles per inference, in {:.2?}",
            a.model.display(),
            c.design.layers.len(),
            c.macs_per_cycle,
            c.design.cycles,
            total.elapsed()
        );
        for f in files {
            println!("  {}", f.display());
        }
        return Ok(());
    }
    if mcu {
        let calib = match &a.calibrate {
            Some(p) => {
                let data = rlxc::npy::read(p).map_err(|e| Failure::usage(format!("{}: {e}", p.display())))?;
                if mir.inputs.len() != 1 {
                    return Err(Failure::usage(format!("--calibrate takes one .npy: the model has {} inputs", mir.inputs.len())));
                }
                Some(calibration_samples(&data, mir.ty(mir.inputs[0])).map_err(|e| Failure::usage(format!("{}: {e}", p.display())))?)
            }
            None => None,
        };
        let budgets = Budgets { ram: a.ram_budget, flash: a.flash_budget };
        let c = compile_mcu(&mir, a.target, &name, calib.as_deref(), budgets, a.emit == Emit::Rust, &mut tm)?;
        let files = tm.time("write", || write_mcu_artifacts(&a.out, &name, &a.model, &c))?;
        if a.report {
            crate::cmd_check::print_report(&c.report);
        }
        println!(
            "compiled {} for {}{}: {} kernels, arena (RAM) {} bytes, weights (flash) {} bytes, in {:.2?}",
            a.model.display(),
            c.core.name(),
            if c.quant.is_some() { " (int8)" } else { "" },
            c.lir.launches.len(),
            c.sources.arena_bytes,
            c.sources.weights_bytes,
            total.elapsed()
        );
        for f in files {
            println!("  {}", f.display());
        }
        return Ok(());
    }
    let cpu = cpu.expect("CPU targets have a CPU");
    let external = a.weights == Weights::External;
    let c = compile_mir(&mir, a.target, cpu, &name, external, a.emit_ir, &mut tm)?;
    let files = tm.time("write", || write_artifacts(&a.out, &name, &a.model, &c, external))?;
    if a.report {
        crate::cmd_check::print_report(&c.report);
    }
    println!(
        "compiled {} for {} ({}): {} kernels, arena {} bytes, weights {} bytes, in {:.2?}",
        a.model.display(),
        c.target.triple(),
        c.target.cpu,
        c.lir.launches.len(),
        c.lir.arena_bytes,
        c.lir.weights.len(),
        total.elapsed()
    );
    for f in files {
        println!("  {}", f.display());
    }
    if a.timings {
        for (n, d) in &tm.0 {
            println!("  {n:<16} {:>9.3} ms", d.as_secs_f64() * 1e3);
        }
        println!("  {:<16} {:>9.3} ms", "total", total.elapsed().as_secs_f64() * 1e3);
    }
    Ok(())
}
