//! The CUDA target: LIR loop-form kernels → LLVM IR for `nvptx64-nvidia-cuda` (one `ptx_kernel`
//! function per launch, `module.rs`) → LLVM's NVPTX back end → `NAME.ptx`, plus the dispatch list that
//! becomes `NAME.schedule.bin` (`rlx_ir::schedule`, version 3: with each launch's block size).
//!
//! The mapping (the same as the shader writer's, through the one grid analysis
//! `rlx_ir::loops::grid`): the outer parallel loop and the nested loops whose iterations are provably
//! independent become the thread grid — one thread per grid point, [`BLOCK`] threads per block,
//! bounds-checked —; inner loops stay loops, `vector(n)` loops are scalar loops; a kernel with no
//! parallel outer loop runs on one thread. Each kernel takes one `ptr addrspace(1)` per LIR base
//! (arena, weights, each input, each output: the schedule's bindings, in order) and finds its buffers
//! at their byte offsets. Scalars are written by the CPU writer's statement and expression writer
//! (`ir.rs`), f32 `exp`/`erf`/`tanh` as its inline sequences (`ir/math.rs`): the PTX calls no
//! library function (checked: a module that would is an error naming the kernels).

mod alias;
mod attention;
mod attention_mma;
mod comm;
mod cp_async;
mod half_activations;
mod half_weights;
mod module;
mod pdl;
mod tiled;
mod vec_tile;
mod wgmma;

use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetTriple};
use inkwell::OptimizationLevel;
use rlx_ir::lir::Lir;
use rlx_ir::schedule::{BaseBuf, SchedDispatch};
use rlx_ir::{DType, TargetCaps};

pub use half_weights::HalfCopy;
pub use module::module_text;

/// The target triple.
pub const TRIPLE: &str = "nvptx64-nvidia-cuda";
/// Threads per block of the one-thread-per-grid-point mapping.
pub const BLOCK: u32 = 256;
/// The GPU architectures `--sm` accepts (LLVM 19's NVPTX emits PTX for each).
pub const SMS: &[u32] = &[80, 86, 89, 90];

/// MIR op kinds claimed: the shared lowering's kinds whose f32 math has an inline form here (exp, erf,
/// tanh, sigmoid, log, sinh, cosh, pow (f32 only: `caps`); sin, cos and tan through f64 range
/// reduction and series, `ir/math.rs`) or a PTX instruction (sqrt, floor, ceil, round — `cvt.rni`,
/// half to even, which the quantization ops' rounding is —, min/max, …). Not claimed: functions that
/// would need libm or libdevice on the GPU (the inverse trigonometric and hyperbolic functions), float
/// `mod`/`fmod`.
pub const KINDS: &[&str] = &[
    "neg", "abs", "exp", "sin", "cos", "sqrt", "recip", "tanh", "sigmoid", "erf", "relu", "floor", "ceil", "round", "sign", "not", "bit_not", "is_nan",
    "is_inf", "is_pos_inf", "is_neg_inf", "add", "sub", "mul", "div", "max", "min", "eq", "lt", "le", "gt", "ge", "and", "or", "xor",
    "bit_and", "bit_or", "bit_xor", "shl", "shr", "where", "cast", "matmul", "reduce_sum", "reduce_prod", "reduce_max", "reduce_min",
    "reduce_mean", "argmax", "argmin", "reshape", "transpose", "expand", "slice", "concat", "gather", "gather_elements", "gather_nd", "pad",
    "conv", "conv_transpose", "max_pool", "avg_pool", "cumsum", "write_rows", "compress", "nonzero", "nms", "unique", "log", "tan", "sinh", "cosh",
    "quantize", "dequantize", "fake_quantize", "scatter_elements", "scatter_nd", "topk",
];

/// Kinds claimed for f64 too: the ones whose f64 form is PTX's own f64 instructions or, for exp, log
/// and sigmoid, the writer's inline f64 forms (`ir/math.rs`); not the other transcendental functions
/// (library calls) nor matmul (its tiled kernels are f32).
pub const F64_KINDS: &[&str] = &[
    "exp", "log", "sigmoid", "neg", "abs", "sqrt", "recip", "relu", "floor", "ceil", "round", "sign", "is_nan", "is_inf", "is_pos_inf", "is_neg_inf", "add", "sub",
    "mul", "div", "max", "min", "eq", "lt", "le", "gt", "ge", "where", "cast", "reduce_sum", "reduce_prod", "reduce_max", "reduce_min",
    "reduce_mean", "argmax", "argmin", "reshape", "transpose", "expand", "slice", "concat", "gather", "gather_elements", "gather_nd", "pad",
    "cumsum",
];

/// Integer dtypes (`mod` / `fmod`: `srem` / `urem`; float remainders are NVPTX's inexact `frem`
/// expansion, not claimed).
const INTS: &[DType] = &[DType::I8, DType::U8, DType::I16, DType::U16, DType::I32, DType::U32, DType::I64, DType::U64];

/// Dtypes claimed: f32 and the integer types and bool (f64 is not: its transcendental functions
/// would be libm calls); f16/bf16 as storage (`cast`, `reshape`), as on the CPU.
pub const DTYPES: &[DType] = &[DType::F32, DType::I8, DType::U8, DType::I16, DType::U16, DType::I32, DType::U32, DType::I64, DType::U64, DType::Bool];

/// The claim set for `--target NAME`.
pub fn caps(name: &str) -> TargetCaps {
    let half = [DType::F16, DType::BF16];
    // Collectives and transfers: schedule entries the CUDA executor issues through the application's
    // NCCL communicator (`nvptx/comm.rs`); NCCL sums f32/i32/i64 and moves any of these.
    let sums = [DType::F32, DType::I32, DType::I64];
    let mut caps = TargetCaps::uniform(name, KINDS, DTYPES);
    for &k in F64_KINDS {
        caps = caps.with(k, &[DType::F64]);
    }
    caps.with("cast", &half)
        // f32 pow from the GPU writer's log and exp (`ir/math.rs`); integer pow would be f64 pow.
        .with("pow", &[DType::F32])
        .with("mod", INTS)
        .with("fmod", INTS)
        .with("reshape", &half)
        // GGUF weights read in their blocks (`plan/blocks.rs`): the language models' matmuls and
        // embedding lookups.
        .with("dequant_matmul", &[DType::F32])
        .with("dequant_gather", &[DType::F32, DType::F16, DType::BF16])
        .with("dequant_gather", &rlx_ir::dtype::BLOCK_DTYPES)
        .with("all_reduce", &sums)
        .with("all_gather", DTYPES)
        .with("reduce_scatter", &sums)
        .with("send", DTYPES)
        .with("recv", DTYPES)
}

/// The arithmetic of f32 matmuls (`--precision`): f32 FMAs on the SIMT cores, or the tensor cores
/// (`mma.sync`, f32 accumulation) with operands rounded to tf32, bf16 or fp16, or split into two tf32
/// parts each (`Tf32x3`: `--precision f32`'s tensor-core form, f32 accuracy; `tiled::mma_issue_all`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mma {
    F32,
    Tf32,
    Bf16,
    Fp16,
    /// 3×TF32: each f32 operand x = big + small, big = tf32(x), small = tf32(x − big), and
    /// a·b ≈ a_small·b_big + a_big·b_small + a_big·b_big (small·small dropped) on m16n8k8 tf32
    /// `mma.sync`s, f32 accumulation: a relative error at f32's level (~1e-6), not tf32's (~1e-3).
    /// Shared memory holds the f32 values; each fragment register is split where it is loaded.
    Tf32x3,
}

impl Mma {
    /// Whether the tensor cores take tf32 operands (m16n8k8, one f32 word per value in shared memory).
    pub fn tf32(self) -> bool {
        matches!(self, Mma::Tf32 | Mma::Tf32x3)
    }
}

/// A compiled CUDA program: the PTX text and its schedule.
pub struct PtxProgram {
    pub ptx: String,
    /// The LLVM IR handed to the NVPTX back end (`--emit-ir`).
    pub ir: String,
    pub bases: Vec<BaseBuf>,
    /// One per launch, in order: entry point `k{entry}`, grid, block, byte ranges (a collective: its
    /// `comm`, and no PTX function).
    pub dispatches: Vec<SchedDispatch>,
    /// Launch names, parallel to `dispatches` (the fused MIR nodes), for reports.
    pub names: Vec<String>,
    pub sm: u32,
    /// The 16-bit weight copies appended to the LIR's weights (`half_weights.rs`; bf16 / fp16 only).
    pub half_weights: Vec<HalfCopy>,
    /// The LIR buffers stored as bf16 / fp16 between kernels (`half_activations.rs`).
    pub half_activations: Vec<u32>,
    /// The LIR buffers (activations and weights) holding tf32-rounded f32 values under `--precision
    /// tf32` (`half_activations.rs`).
    pub tf32_operands: Vec<u32>,
}

impl PtxProgram {
    /// `NAME.schedule.bin` (version 3: grid and block per dispatch; version 4 when there are collectives;
    /// 5 when some kernel has dynamic shared memory, `cp_async.rs`'s).
    pub fn schedule_bytes(&self) -> Vec<u8> {
        rlx_ir::schedule::encode(&self.bases, &self.dispatches, true)
    }
}

/// LIR → PTX for `sm_{sm}`; `tiles`: cooperative kernels (shared-memory matmul tiles, warp-per-row
/// row kernels) where `rlx_ir::loops::tiled` recognizes them, else one thread per output everywhere.
/// `mma`: the arithmetic of the tiled f32 matmuls; with bf16 / fp16 the 16-bit copies of the weights
/// its tiles read are appended to `lir.weights` (`half_weights.rs`). Deterministic: the same LIR and
/// `sm` give the same bytes. Errors name the kernel. `specific`: `--sm 90a`, Hopper's arch-specific
/// instructions (`wgmma.rs`); such a module runs on sm_90 GPUs only.
pub fn compile(lir: &mut Lir, sm: u32, specific: bool, tiles: bool, mma: Mma) -> Result<PtxProgram, String> {
    if specific && sm != 90 {
        return Err(format!("--sm {sm}a is not supported: the arch-specific form is 90a (Hopper)"));
    }
    if !SMS.contains(&sm) {
        return Err(format!("--sm {sm} is not supported: choose one of {}", SMS.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ")));
    }
    if mma != Mma::F32 && !tiles {
        return Err(format!("tensor-core matmuls ({mma:?}) need the tiled matmul kernels (RLX_CUDA_TILES=0 turns them off)"));
    }
    // bf16 / fp16: activations only tensor-core tiles read stored as such; tf32: those activations
    // and weights stored tf32-rounded (half_activations.rs).
    let operands = half_activations::rewrite(lir, mma, tiles, cp_async::max_shared(sm));
    let (half_activations, tf32_operands) = if mma == Mma::Tf32 { (Vec::new(), operands) } else { (operands, Vec::new()) };
    let mut bases = rlx_ir::schedule::bases_of(lir);
    let (ir, dispatches, names, half_weights, extra) = module_text(lir, &bases, tiles, mma, pdl::prologue(sm), cp_async::max_shared(sm), wgmma::on(sm, specific, mma), &tf32_operands)?;
    if !extra.is_empty() {
        lir.weights.extend_from_slice(&extra);
        for b in bases.iter_mut().filter(|b| b.base == rlx_ir::lir::Base::Weights) {
            b.bytes = lir.weights.len() as u64;
        }
    }
    Target::initialize_nvptx(&InitializationConfig::default());
    let ctx = Context::create();
    let buf = MemoryBuffer::create_from_memory_range_copy(ir.as_bytes(), "rlx_cuda");
    let module = ctx.create_module_from_ir(buf).map_err(|e| format!("internal error: generated NVPTX IR does not parse: {}", e.to_string()))?;
    let triple = TargetTriple::create(TRIPLE);
    let target = Target::from_triple(&triple).map_err(|e| format!("LLVM has no target {TRIPLE}: {}", e.to_string()))?;
    // PTX ISA 7.8 runs on every driver that knows sm_90 and is the newest LLVM 19 pairs with sm_80–sm_89;
    // a module with `wgmma` (wgmma.rs: --sm 90a) needs sm_90a and PTX ISA 8.0.
    let (cpu, ptx) = if wgmma::used(&ir) { (format!("sm_{sm}a"), "+ptx80") } else { (format!("sm_{sm}"), "+ptx78") };
    let tm = target
        .create_target_machine(&triple, &cpu, ptx, OptimizationLevel::Default, RelocMode::Default, CodeModel::Default)
        .ok_or_else(|| format!("LLVM rejected cpu sm_{sm}"))?;
    module.set_triple(&triple);
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    module.verify().map_err(|e| format!("internal error: NVPTX module does not verify: {}", e.to_string()))?;
    module
        .run_passes("default<O2>", &tm, PassBuilderOptions::create())
        .map_err(|e| format!("internal error: LLVM optimization failed: {}", e.to_string()))?;
    let out = tm.write_to_memory_buffer(&module, FileType::Assembly).map_err(|e| format!("LLVM NVPTX code generation failed: {}", e.to_string()))?;
    let ptx = String::from_utf8_lossy(out.as_slice()).trim_end_matches('\0').to_string();
    // No library calls on the GPU: every function the PTX declares but does not define is one.
    let externs: Vec<&str> = ptx.lines().filter(|l| l.contains(".extern .func")).collect();
    if !externs.is_empty() {
        return Err(format!("internal error: the PTX calls functions no GPU provides: {}", externs.join("; ")));
    }
    Ok(PtxProgram { ptx, ir, bases, dispatches, names, sm, half_weights, half_activations, tf32_operands })
}
