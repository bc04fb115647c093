//! `rlxc compile`: import → lower → the target's passes → legalize → plan → its writer
//! (`rlxc::targets::compile`), then the one artifact writer. Which files a target writes is its
//! family's business (`rlxc::targets`); this command never asks which family it is.

use crate::{problem_list, Failure, ModelSource, Target};
use rlxc::artifact;
use rlxc::pipeline::{default_name, Timings};
use rlxc::targets::{self, Request};
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
--board NAME (MCU targets: microbit, mps2-an385, mps2-an386, mps2-an500, mps2-an505, mps3-an547) also writes a \
buildable firmware folder beside the sources: main.c (runs the model over images.bin read over semihosting, writes \
outputs.bin), startup.c, the board's linker script where it needs one, and a Makefile (`make`, `make run` in QEMU).\n\n\
GPU targets (--target vulkan|spirv|webgpu|metal|directx|opengl) write compute shaders through naga instead: \
NAME.spv (SPIR-V, entry points k0, k1, …) or NAME.wgsl / NAME.metal / NAME.hlsl / NAME.kI.comp, NAME.schedule.bin \
(buffers and dispatches in order, read by runtime-min's Vulkan executor), NAME.weights.bin and NAME.json.\n\n\
--target cuda [--sm 80|86|89|90|90a] [--precision f32|tf32|bf16|fp16] writes NAME.ptx (LLVM's NVPTX back end: entry points k0, k1, …, one pointer per \
buffer), NAME.schedule.bin (buffers, then per dispatch its grid, block and byte ranges; read by runtime-min's CUDA \
executor, which records them as one CUDA graph), NAME.weights.bin and NAME.json.\n\n\
--train [--loss cross-entropy|mse] [--optimizer sgd|adam|adamw] [--lr X] [--momentum M] [--weight-decay L] also \
compiles the model's training step beside it as NAME_train_step, with the parameters (the model's named float constants) \
and the optimizer state resident in its state region: NAME_train_step_step(arena, state, inputs, outputs) takes the model's \
inputs and the target (i64 labels [batch] for cross-entropy, the output's type for mse), returns the loss, and updates \
parameters and state in place. NAME_train_step.init.bin is the initial state (NAME_train_step_STATE_BYTES bytes: the \
model's parameters and zero optimizer state at their offsets, NAME_train_step_STATE_i_OFFSET); trained parameters are \
read at those offsets. The manifest's `train` and `state` sections name them. A QDQ model (QuantizeLinear → \
DequantizeLinear pairs) trains quantization-aware: each pair is a fake quantization with the straight-through \
estimator; --learn-scales trains its scales too (LSQ).\n\n\
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
    /// The model: an .onnx file, a safetensors folder (config.json + model.safetensors: BERT, or a
    /// llama/qwen2/qwen3/gemma3_text language model) or a GGUF language model; language models take
    /// --dim sequence=N (stateless) or --dim context=N [--dim chunk=C] (a stateful KV-cache artifact)
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
    /// CPU targets: keep f32 activations in block-quantized matmuls. By default, with the LLVM back end
    /// on a CPU with AVX-512 VNNI, a Q8_0 / Q5_0 matmul over few rows (decode) quantizes its activations to
    /// int8 per 32 values (as llama.cpp's q8_0) for integer dot products: faster, slightly different
    /// results (docs/benchmarks.md)
    #[arg(long)]
    pub exact_activations: bool,
    /// CPU targets: the form of dense 3×3 stride-1 convolutions over outputs of at least 13×13 (default
    /// f4: Winograd F(4×4, 3×3) where it measured fastest, else F(2×2, 3×3); F(4×4)'s transformed weights
    /// take 4× the convolution's weight bytes, f2 (F(2×2) only) 16/9, off 1×; docs/targets.md)
    #[arg(long, value_enum, value_name = "FORM")]
    pub winograd: Option<rlxc::cli::Winograd>,
    /// CPU targets: the activations' layout around convolutions (default auto: channels-last where the
    /// layout pass finds that it pays — depthwise-separable models —, the model's NCHW elsewhere;
    /// docs/targets.md)
    #[arg(long, value_enum, value_name = "LAYOUT")]
    pub layout: Option<rlxc::cli::Layout>,
    /// Print the dispatch report (every node: native / common-IR / rewritten / unsupported)
    #[arg(long)]
    pub report: bool,
    /// Print the time of each compile phase
    #[arg(long)]
    pub timings: bool,
    /// Also write NAME.ll (LLVM IR before optimization) and NAME.lir (the planned program and kernels;
    /// --target cuda: NAME.ll only)
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
    /// --target verilog: int8 multipliers in the MAC array (output channels computed per cycle; default 1)
    #[arg(long, value_name = "N")]
    pub macs_per_cycle: Option<usize>,
    /// MCU targets: also write a buildable firmware folder for this QEMU board (main.c, startup.c,
    /// linker script, Makefile): microbit (M0+), mps2-an385 (M3), mps2-an386 (M4), mps2-an500 (M7),
    /// mps2-an505 (M33), mps3-an547 (M55)
    #[arg(long, value_name = "NAME")]
    pub board: Option<String>,
    /// --target cuda: the GPU architecture the PTX is written for (80, 86, 89 or 90; default 80, which
    /// the driver JIT-compiles for any newer GPU), or 90a: Hopper's arch-specific form (wgmma matmul
    /// tiles; runs on H100 / H200 only)
    #[arg(long, value_name = "SM")]
    pub sm: Option<rlxc::targets::cuda::Sm>,
    /// --target cuda: the arithmetic of f32 matmuls: f32 (default), or tensor cores (mma.sync) with
    /// operands rounded to tf32, bf16 or fp16 and f32 accumulation (docs/targets.md states the tolerances)
    #[arg(long, value_enum, value_name = "P")]
    pub precision: Option<rlxc::cli::Precision>,
    /// Shard the model over ranks: tp=N (tensor parallel: attention heads and feed-forward matmuls split,
    /// one all-reduce per block) or pp=N (N pipeline stages of equal FLOPs). Writes DIR/rank0 … DIR/rankN-1
    /// (one artifact each) and DIR/NAME.shard.json (world size, each rank's ports and collective schedule)
    #[arg(long, value_name = "tp=N|pp=N", value_parser = rlxc::shard::parse)]
    pub shard: Option<rlxc::shard::Shard>,
    #[command(flatten)]
    pub train: crate::cmd_train_step::TrainArgs,
}

impl CompileArgs {
    /// The flags that go to the target's family.
    pub fn request(&self, name: String) -> Request {
        Request {
            name,
            cpu: self.cpu.clone(),
            backend: self.backend,
            external_weights: self.weights == Weights::External,
            emit_ir: self.emit_ir,
            exact_activations: self.exact_activations,
            winograd: self.winograd,
            layout: self.layout,
            emit_rust: self.emit == Emit::Rust,
            calibrate: self.calibrate.clone(),
            ram_budget: self.ram_budget,
            flash_budget: self.flash_budget,
            macs_per_cycle: self.macs_per_cycle,
            board: self.board.clone(),
            sm: self.sm,
            precision: self.precision,
            source_ops: Default::default(),
        }
    }
}

pub fn main(a: &CompileArgs) -> Result<(), Failure> {
    let src = ModelSource::from_path(&a.model)?;
    let dims = rlxc::dims::resolve(&src, &a.dims, a.batch)?;
    let mut tm = Timings::default();
    let total = Instant::now();
    let name = a.name.clone().map(|n| artifact::sanitize_ident(&n)).unwrap_or_else(|| default_name(&a.model));
    let mut req = a.request(name.clone());
    // Flags the target's family does not take fail before any work.
    targets::check_flags(a.target, &req)?;
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
    req.source_ops = src.node_op_types();
    // --train: the training step, compiled beside the model (cmd_train_step); built before either
    // compile so that a model it cannot train writes nothing.
    if a.train.train && (a.calibrate.is_some() || matches!(targets::family(a.target).quantization(a.target), targets::Quantization::Required(_))) {
        return Err(Failure::usage("--train compiles a float training step: it does not combine with int8 quantization (--calibrate, --target verilog)"));
    }
    if let Some(s) = a.shard {
        if a.train.train {
            return Err(Failure::usage("--shard does not combine with --train"));
        }
        return compile_sharded(a, &mir, s, &req, &name, tm, total);
    }
    let step = tm.time("train step", || a.train.step(&mir))?;
    let art = targets::compile(a.target, &mir, &req, &mut tm)?;
    let (files, manifest) = art.files(&name, &a.model)?;
    let mut train_art = None;
    if let Some(step) = &step {
        let tname = format!("{name}_train_step");
        let treq = Request { name: tname.clone(), ..req.clone() };
        let t = targets::compile(a.target, &step.resident(), &treq, &mut tm)?;
        let (mut tfiles, mut tmanifest) = t.files(&tname, &a.model)?;
        let init = format!("{tname}.init.bin");
        let (bytes, section) = crate::cmd_train_step::extras(step, &a.train, &init, &tmanifest["state"])?;
        tfiles.push((init, bytes));
        tmanifest["train"] = section;
        train_art = Some((tname, tfiles, tmanifest));
    }
    let mut written = tm.time("write", || targets::write::write_artifact(&a.out, &name, files, &manifest))?;
    if let Some((tname, tfiles, tmanifest)) = train_art {
        written.extend(tm.time("write", || targets::write::write_artifact(&a.out, &tname, tfiles, &tmanifest))?);
    }
    if a.report {
        crate::cmd_check::print_report(art.report());
    }
    println!("compiled {} for {}, in {:.2?}", a.model.display(), art.summary(), total.elapsed());
    for f in written {
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

/// `--shard`: one artifact per rank in DIR/rankR, and DIR/NAME.shard.json.
fn compile_sharded(a: &CompileArgs, mir: &rlx_ir::Mir, s: rlxc::shard::Shard, req: &Request, name: &str, mut tm: Timings, total: Instant) -> Result<(), Failure> {
    let sh = tm.time("shard", || rlxc::shard::shard(mir, s))?;
    let names = |vs: &[rlx_ir::ValueId]| vs.iter().map(|&v| mir.value(v).name.clone().unwrap_or_default()).collect::<Vec<_>>();
    let mut arts = Vec::new();
    for (r, g) in sh.ranks.iter().enumerate() {
        let art = targets::compile(a.target, g, req, &mut tm)?;
        let (files, mut manifest) = art.files(name, &a.model)?;
        manifest["shard"] = serde_json::json!({"kind": s.kind(), "rank": r, "world_size": sh.ranks.len(), "manifest": format!("../{name}.shard.json")});
        arts.push((files, manifest, art.summary()));
    }
    let mut written = Vec::new();
    for (r, (files, manifest, _)) in arts.into_iter().enumerate() {
        written.extend(tm.time("write", || targets::write::write_artifact(&a.out.join(format!("rank{r}")), name, files, &manifest))?);
    }
    let top = rlxc::shard::manifest(&sh, name, &names(&mir.inputs), &names(&mir.outputs));
    written.extend(targets::write::write_artifact(&a.out, &format!("{name}.shard"), Vec::new(), &top)?);
    for n in &sh.notes {
        println!("note: node '{}' ({}): {}", n.node, n.op, n.msg);
    }
    println!("compiled {} as {} ranks ({}={}) for {}, in {:.2?}", a.model.display(), sh.ranks.len(), s.kind(), s.ranks(), a.target.name(), total.elapsed());
    for f in written {
        println!("  {}", f.display());
    }
    Ok(())
}
