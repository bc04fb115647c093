//! The CUDA family (`--target cuda [--sm 80|86|89|90|90a]`): fold → legalize (the PTX claim set) → plan
//! (as the shader family: no CPU GEMM panels, row kernels, operand inlining) →
//! `rlx_target_llvm::nvptx` (LIR → LLVM IR → NVPTX → PTX) → the one writer (`NAME.ptx`,
//! `NAME.schedule.bin`, `NAME.weights.bin`, `NAME.json`); and runtime-min's CUDA executor
//! ([`Loaded`]: one CUDA graph per run) for `rlxc run`/`bench --target cuda`. Needs the `llvm`
//! feature (the NVPTX back end is LLVM's). `ptxas` (the `cuda-ptxas` conformance column) is found
//! by [`ptxas`].

pub mod ptxas;
pub use ptxas::{ptxas, ptxas_of};

use super::write::{base_name, dispatch_counts, model_file, port_json, sha256_hex};
use super::{Artifact, Family, Flag, Planning, Prepared, Quantization, Request, Session};
use crate::cli::{Failure, Precision, Target};
use crate::pipeline::Timings;
use rlx_ir::lir::Lir;
use rlx_ir::{ConstData, Mir, TargetCaps, TensorType};
use rlx_opt::DispatchReport;
use std::path::Path;

pub struct Cuda;

/// `--sm`: the GPU architecture the PTX is written for — a compute capability (80, 86, 89, 90: the
/// driver JIT-compiles the PTX for that GPU and any newer one) or `90a`, Hopper's arch-specific form:
/// the tensor-core matmul tiles on `wgmma` (`nvptx/wgmma.rs`), PTX that runs on sm_90 GPUs (H100 /
/// H200) only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sm {
    pub num: u32,
    pub specific: bool,
}

impl std::str::FromStr for Sm {
    type Err = String;
    fn from_str(s: &str) -> Result<Sm, String> {
        let (digits, specific) = match s.strip_suffix('a') {
            Some(d) => (d, true),
            None => (s, false),
        };
        let num = digits.parse::<u32>().map_err(|_| format!("'{s}' is not a GPU architecture (80, 86, 89, 90 or 90a)"))?;
        Ok(Sm { num, specific })
    }
}

impl std::fmt::Display for Sm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.num, if self.specific { "a" } else { "" })
    }
}

impl Sm {
    /// The form for a GPU of compute capability `(major, minor)`: its own where `--sm` knows it (9.0:
    /// `90a`), `90` for a later GPU (the driver JIT-compiles sm_90 PTX for it), else [`DEFAULT_SM`].
    pub fn native((major, minor): (i32, i32)) -> Sm {
        match (major * 10 + minor).max(0) as u32 {
            90 => Sm { num: 90, specific: true },
            n @ (80 | 86 | 89) => Sm { num: n, specific: false },
            n if n > 90 => Sm { num: 90, specific: false },
            _ => DEFAULT_SM,
        }
    }
}

/// The architecture compiled for when `--sm` is not given (the PTX is JIT-compiled by the driver for
/// any newer GPU, so sm_80 code runs on Hopper too).
pub const DEFAULT_SM: Sm = Sm { num: 80, specific: false };

/// The claim set of `--target cuda`.
pub fn caps() -> TargetCaps {
    #[cfg(feature = "llvm")]
    return rlx_target_llvm::nvptx::caps("cuda");
    #[cfg(not(feature = "llvm"))]
    return TargetCaps { name: "cuda".into(), native: Default::default() };
}

/// The fewest rows (the product of the operand's leading dims) for which Q, K and V merge by default
/// (f32 / tf32). On the H200 (MiniLM seq 128, docs/benchmarks.md session 21, twins in the same rounds,
/// p50 medians of three rounds, two runs): merged at batch 8 (1,024 rows: 96 blocks of 128×96 for the
/// 1,152 columns, the vector tile that fills its last wave best) f32 1,148 → 1,113 and 1,142 → 1,103
/// µs, tf32 859 → 837 and 842 → 832, every round faster; at batch 32 tf32 −1.4% / −1.7%, f32 −1.7% /
/// +0.3%. bf16 gained nothing (batch 8 685 → 678 and 666 → 682, batch 32 −2.0% / +1.3%: the rounds'
/// spread), so it keeps them apart. At batch 1 (128 rows: the three projections ran side by side as 192
/// blocks each, ~8 µs; merged, one kernel of 13.7–15.4 µs in f32 / tf32, 11.3 in bf16) f32 345 → 356,
/// tf32 305 → 309, bf16 272 → 268 — batch 1 keeps them apart too.
const MERGE_MIN_ROWS: u64 = 1024;

/// As for the shader targets: matmuls in their per-element form (no CPU GEMM panels), LayerNorm and
/// softmax one row kernel each, transposes and scalings inlined into matmul operand loads; attention
/// (scores, softmax, probabilities × values) one kernel (`rlx_opt`'s `plan/attention.rs`) unless
/// `RLX_CUDA_FUSED_ATTENTION=0` at compile time, which keeps its three launches (to time both); the
/// PTX writer runs it on the tensor cores (`nvptx/attention_mma.rs`) under tf32 / bf16 / fp16, and
/// under f32 from `ATTENTION_MMA_MIN_ROWS` query rows (the SIMT kernel below). Measured on an H200
/// (MiniLM seq 128, p50, docs/benchmarks.md session 27): at batch 8 / 32 the tensor-core kernel
/// against the three launches tf32 0.94 / 0.92×, bf16 0.95 / 0.93×; at batch 1 (1,536 query rows) it
/// then took 1.14 / 1.16×, so the three launches stayed there until session 32, when on an H100
/// (with the softmax's `ex2.approx` and row reciprocal since) it took 0.98× their time in tf32 and
/// bf16 (f32's 3×TF32 kernel 1.01× the SIMT one's). Matmuls with few outputs over a
/// long K (MiniLM batch 1's FFN down) split K across launches into 8 partial sums (`rlx_opt`'s
/// `plan/split_k.rs`; `RLX_CUDA_SPLIT_K=N` at compile time: N parts, 0 none). Measured on the H200
/// (MiniLM batch 1, p50 of three rounds × 100 runs, against the unsplit twin in the same rounds): f32
/// 480 → 434 µs, tf32 339 → 311, bf16 307 → 274 (2, 4 and 16 parts: docs/benchmarks.md, session 17b).
/// Where only a LayerNorm reads the split matmul's residual sum, its row kernel adds the partials
/// (`split_k_rows`: K ≥ 1024; `RLX_CUDA_SPLIT_K_ROWS=N` at compile time: K ≥ N, 0 a sum kernel of their
/// own): MiniLM batch 1 f32 350 → 348 µs, tf32 309 → 300, bf16 275 → 269; with 256 the attention
/// output projection too, measured no faster (docs/benchmarks.md, session 18b).
pub fn plan_options(precision: Precision) -> rlx_opt::PlanOptions {
    let fused_attention = std::env::var("RLX_CUDA_FUSED_ATTENTION").map_or(true, |v| v != "0");
    // At any number of query rows (RLX_CUDA_ATTN_MIN_ROWS=N at compile time: from N, under tf32 / bf16 /
    // fp16 — 8,192 was their rule before session 32, three launches below it).
    let min_rows = std::env::var("RLX_CUDA_ATTN_MIN_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let fused_attention_min_rows = if precision == Precision::F32 { 0 } else { min_rows };
    let split_k = std::env::var("RLX_CUDA_SPLIT_K").ok().and_then(|v| v.parse().ok()).unwrap_or(8);
    let split_k_rows = std::env::var("RLX_CUDA_SPLIT_K_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(1024);
    let split_k_wide = split_k_wide(std::env::var("RLX_CUDA_SPLIT_K_WIDE").ok().as_deref(), precision);
    // A gather from a constant read broadcast by an elementwise op, inlined there (`PlanOptions::inline_gathers`:
    // MiniLM's embedding scales, a launch before its first LayerNorm; H100, session 36, resident, against the
    // launch: 0.987× the time at batch 1 in every precision, 0.991–0.995× at batch 8 / 32;
    // RLX_CUDA_INLINE_GATHERS=0 at compile time: that launch).
    let inline_gathers = std::env::var("RLX_CUDA_INLINE_GATHERS").map_or(true, |v| v != "0");
    rlx_opt::PlanOptions { gemm_nr: 1 << 30, row_fusion: true, row_recompute: true, inline_operands: true, inline_gathers, flat_block_dots: true, fused_attention, fused_attention_min_rows, split_k, split_k_rows, split_k_wide, ..Default::default() }
}

/// Matmuls with more outputs than `split_k` takes (`PlanOptions::split_k_wide`), over K ≥ 1024: in
/// [`SPLIT_K_WIDE`]'s parts up to its bound of outputs — MiniLM batch 8's FFN down (1024 × 384 over K =
/// 1536: 96 blocks of 64×64, fewer than the H200's 132 SMs, 24 staged K slices each) as 2 × 128 blocks
/// of 64×96 whose partials its LayerNorm adds: launched alone f32 46.9 → 33.3 µs, tf32 30.7 → 22.1, bf16 22.5 →
/// 15.7 (the LayerNorm 7.5 → 7.8), the model's p50 −5.3% f32, −5.8% tf32, −6.9% bf16 on the H200
/// against the unsplit twin in the same rounds (a first run: −7.4 / −6.6 / −5.8%, 4 parts −6.6 / −1.4 /
/// −4.5%, and the attention output projection split too, `RLX_CUDA_SPLIT_K_ROWS=256`, −5.6 / −1.7 /
/// −0.5%). Batch 32's (4096 × 384: 128 blocks of 128×96 already) measured no faster
/// split in 2, f32 +1.0%, tf32 +4.1%, bf16 −2.7% over mixed rounds (its 2 × 128 blocks take the unsplit
/// kernel's time launched alone, f32 103 µs, bf16 38, and its LayerNorm 9.3 → 11.9), so the bound leaves
/// it whole (docs/benchmarks.md, session 24). `RLX_CUDA_SPLIT_K_WIDE=P` at compile time:
/// P parts at any output count, `P:N` up to N outputs, 0 none (the PTX before session 24, byte for byte).
/// `--precision f32` takes 4 parts ([`SPLIT_K_WIDE_F32`]): its 3×TF32 tiles do three times a tf32
/// tile's tensor-core work per block, so more, shorter blocks pay — MiniLM batch 8 on an H100 (session
/// 34, 3×TF32 `wgmma` tiles): 0.971 and 0.968× the time of 2 parts in two runs, the model resident;
/// batch 32 split in 4 (beyond the bound) 1.091×.
const SPLIT_K_WIDE: (usize, usize) = (2, 524_288);
const SPLIT_K_WIDE_F32: (usize, usize) = (4, 524_288);

fn split_k_wide(v: Option<&str>, precision: Precision) -> (usize, usize) {
    let Some(v) = v else { return if precision == Precision::F32 { SPLIT_K_WIDE_F32 } else { SPLIT_K_WIDE } };
    let (p, n) = v.split_once(':').unwrap_or((v, ""));
    match (p.trim().parse(), n.trim().parse()) {
        (Ok(p), Ok(n)) => (p, n),
        (Ok(p), Err(_)) if n.trim().is_empty() => (p, usize::MAX),
        _ => (0, 0),
    }
}

impl Family for Cuda {
    fn describe(&self) -> &'static str {
        "--target cuda"
    }
    fn caps(&self, _t: Target) -> TargetCaps {
        caps()
    }
    fn flags(&self) -> &'static [Flag] {
        &[Flag::Sm, Flag::Precision, Flag::EmitIr]
    }
    /// `--sm` outside the architectures the NVPTX writer knows is a usage error before any work.
    fn check(&self, _t: Target, r: &Request) -> Result<(), Failure> {
        check_sm(r.sm.unwrap_or(DEFAULT_SM))
    }
    fn quantization(&self, _t: Target) -> Quantization {
        Quantization::Never
    }
    fn planning(&self, _t: Target, r: &Request) -> Result<Planning, Failure> {
        Ok(Planning::Plan(plan_options(r.precision.unwrap_or(Precision::F32))))
    }
    /// Matmuls sharing their left operand and constant weights of one shape (a layer's Q, K and V
    /// projections) merged into one (`rlx_opt::merge_matmuls`): by default the weights concatenated
    /// along N (`Form::Columns`: one plain matmul of 1,152 columns on MiniLM, each projection a column
    /// slice read in place by the attention's loads) where the operand has at least [`MERGE_MIN_ROWS`]
    /// rows, under `--precision f32` and `tf32` (bf16 measured as fast apart). `RLX_CUDA_MERGE_MATMULS` at compile time: `0` none (the PTX before session 21, byte for
    /// byte), `cols` the column form at any row count, `1` session 20's batched form ([3, M, N]: on
    /// the H200 batch 1 58 → 46 launches but f32 340 → 347 µs, tf32 297 → 303, bf16 266 → 252, batch 8 /
    /// 32 2–9% slower — the batched product gets other tiles than three [M, N]; docs/benchmarks.md
    /// session 20).
    fn rewrite(&self, _t: Target, r: &Request, mir: Mir) -> Mir {
        let tf32 = matches!(r.precision.unwrap_or(Precision::F32), Precision::F32 | Precision::Tf32);
        let form = match std::env::var("RLX_CUDA_MERGE_MATMULS").as_deref() {
            Ok("1") => rlx_opt::MergeForm::Batched,
            Ok("cols") => rlx_opt::MergeForm::Columns { min_rows: 0 },
            Ok("0") => return mir,
            _ if tf32 => rlx_opt::MergeForm::Columns { min_rows: MERGE_MIN_ROWS },
            _ => return mir,
        };
        match rlx_opt::merge_matmuls(&mir, form) {
            Some(g) => rlx_opt::simplify(&g, &crate::pipeline::eval_op),
            None => mir,
        }
    }
    fn emit(&self, _t: Target, p: Prepared, r: &Request, tm: &mut Timings) -> Result<Box<dyn Artifact>, Failure> {
        Ok(Box::new(emit(p, r, tm)?))
    }
    fn runs(&self, _t: Target) -> bool {
        true
    }
    /// Without a CUDA driver: an error saying so, before compiling. Without `--sm` the PTX is written
    /// for the GPU it is about to run on ([`Sm::native`]: `rlxc run` / `rlxc bench` on an H200 take
    /// sm_90a's programmatic launch and `wgmma` tiles).
    fn load(&self, t: Target, mir: &Mir, r: &Request, tm: &mut Timings) -> Result<Box<dyn Session>, Failure> {
        let (_, cap) = rlx_rt::cuda::probe().map_err(|e| Failure::model(format!("cannot run --target cuda here: {e}")))?;
        let native = Request { sm: Some(r.sm.unwrap_or(Sm::native(cap))), ..r.clone() };
        let c = compile(t, mir, &native, tm)?;
        Ok(Box::new(Loaded::new(c, tm)?))
    }
}

#[cfg(feature = "llvm")]
fn check_sm(sm: Sm) -> Result<(), Failure> {
    use rlx_target_llvm::nvptx::SMS;
    if SMS.contains(&sm.num) && (!sm.specific || sm.num == 90) {
        return Ok(());
    }
    Err(Failure::usage(format!("--sm {sm} is not supported: choose one of {}, 90a", SMS.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", "))))
}

#[cfg(not(feature = "llvm"))]
fn check_sm(_: Sm) -> Result<(), Failure> {
    Err(Failure::usage("--target cuda needs LLVM's NVPTX back end: this rlxc was built without the `llvm` feature"))
}

/// Everything a CUDA compile produced, before it is written.
pub struct CudaCompiled {
    pub lir: Lir,
    pub report: DispatchReport,
    pub ptx: String,
    pub schedule: Vec<u8>,
    pub sm: Sm,
    /// `--precision` (f32 unless given).
    pub precision: Precision,
    /// With `--emit-ir`: the LLVM IR handed to the NVPTX back end (`NAME.ll`).
    pub llvm_ir: Option<String>,
    /// Per dispatch: (kernel name, grid, block, the collective in place of a kernel), for the manifest.
    pub dispatches: Vec<(String, [u32; 3], [u32; 3], u32, Option<rlx_ir::schedule::SchedComm>)>,
    /// `--precision bf16|fp16`: the 16-bit weight copies appended to the weights, for the manifest
    /// (`half_weights`: [dtype, f32 source byte, values, copy's byte] each).
    pub half_weights: Vec<(String, u64, u64, u64)>,
    /// `--precision bf16|fp16`: the arena buffers stored as 16-bit values between kernels
    /// (nvptx/half_activations.rs), for the manifest (`half_activations`).
    pub half_activations: Vec<u32>,
    /// `--precision tf32`: the buffers (arena values and weights) holding tf32-rounded f32 values
    /// (nvptx/half_activations.rs), for the manifest (`tf32_operands`).
    pub tf32_operands: Vec<u32>,
}

/// MIR → PTX + schedule (the family's script, typed). Fails listing every unsupported node.
pub fn compile(t: Target, mir: &Mir, r: &Request, tm: &mut Timings) -> Result<CudaCompiled, Failure> {
    let p = super::prepare(t, mir, r, tm)?;
    emit(p, r, tm)
}

fn emit(p: Prepared, r: &Request, tm: &mut Timings) -> Result<CudaCompiled, Failure> {
    let lir = p.lir.ok_or_else(|| Failure::model("internal error: the CUDA family plans a LIR"))?;
    let mut c = codegen(lir, p.report, r.sm.unwrap_or(DEFAULT_SM), r.precision.unwrap_or(Precision::F32), tm)?;
    if !r.emit_ir {
        c.llvm_ir = None;
    }
    Ok(c)
}

#[cfg(feature = "llvm")]
fn codegen(mut lir: Lir, report: DispatchReport, sm: Sm, precision: Precision, tm: &mut Timings) -> Result<CudaCompiled, Failure> {
    use rlx_target_llvm::nvptx::Mma;
    // RLX_CUDA_TILES=0: every kernel one thread per output (the reference for the cooperative kernels,
    // as RLX_SHADER_TILES=0 is for the shader family's).
    let tiles = std::env::var("RLX_CUDA_TILES").map_or(true, |v| v != "0");
    // f32 matmul tiles on the tensor cores by 3×TF32 (f32 accuracy); RLX_CUDA_F32_MMA=0 at compile
    // time keeps them on the SIMT cores (the PTX before session 18, byte for byte).
    let f32_mma = tiles && std::env::var("RLX_CUDA_F32_MMA").map_or(true, |v| v != "0");
    let mma = match precision {
        Precision::F32 if f32_mma => Mma::Tf32x3,
        Precision::F32 => Mma::F32,
        Precision::Tf32 => Mma::Tf32,
        Precision::Bf16 => Mma::Bf16,
        Precision::Fp16 => Mma::Fp16,
    };
    let p = tm.time("codegen (nvptx)", || rlx_target_llvm::nvptx::compile(&mut lir, sm.num, sm.specific, tiles, mma)).map_err(|e| Failure::model(format!("target cuda: {e}")))?;
    let dispatches = p.dispatches.iter().zip(&p.names).map(|(d, n)| (n.clone(), d.groups, d.block, d.shared, d.comm.clone())).collect();
    let half_weights = p.half_weights.iter().map(|h| (h.dtype.to_string(), h.src, h.elems, h.dst)).collect();
    Ok(CudaCompiled { schedule: p.schedule_bytes(), ptx: p.ptx, lir, report, sm, precision, llvm_ir: Some(p.ir), dispatches, half_weights, half_activations: p.half_activations, tf32_operands: p.tf32_operands })
}

#[cfg(not(feature = "llvm"))]
fn codegen(_: Lir, _: DispatchReport, _: Sm, _: Precision, _: &mut Timings) -> Result<CudaCompiled, Failure> {
    Err(Failure::usage("--target cuda needs LLVM's NVPTX back end: this rlxc was built without the `llvm` feature"))
}

impl Artifact for CudaCompiled {
    fn report(&self) -> &DispatchReport {
        &self.report
    }
    fn summary(&self) -> String {
        format!("cuda (sm_{}, {}): {} kernels, arena {} bytes, weights {} bytes", self.sm, self.precision.name(), self.lir.launches.len(), self.lir.arena_bytes, self.lir.weights.len())
    }
    /// `NAME.ptx`, `NAME.schedule.bin`, `NAME.weights.bin` and the manifest (with `--emit-ir`, also
    /// `NAME.ll`: the LLVM IR before optimization).
    fn files(&self, name: &str, model: &Path) -> Result<(Vec<(String, Vec<u8>)>, serde_json::Value), Failure> {
        let c = self;
        let bases: Vec<serde_json::Value> = rlx_ir::schedule::bases_of(&c.lir)
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let what = base_name(b.base);
                serde_json::json!({"param": i, "buffer": what, "bytes": b.bytes})
            })
            .collect();
        let dispatches: Vec<serde_json::Value> = c
            .dispatches
            .iter()
            .enumerate()
            .map(|(i, (n, g, b, sh, comm))| match comm {
                Some(c) => serde_json::json!({"collective": c.op.name(), "node": n, "dtype": c.dtype.to_string(), "count": c.count, "ranks": c.ranks, "peer": c.peer, "via": "NCCL"}),
                None if *sh > 0 => serde_json::json!({"entry": format!("k{i}"), "kernel": n, "grid": g, "block": b, "shared": sh}),
                None => serde_json::json!({"entry": format!("k{i}"), "kernel": n, "grid": g, "block": b}),
            })
            .collect();
        let version = c.schedule.get(4..8).map_or(0, |w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        let manifest = serde_json::json!({
            "name": name,
            "rlxc_version": env!("CARGO_PKG_VERSION"),
            "model": model_file(model),
            "target": {"name": "cuda", "sm": c.sm.num, "arch": format!("sm_{}", c.sm), "triple": "nvptx64-nvidia-cuda", "precision": c.precision.name()},
            "inputs": c.lir.inputs.iter().map(port_json).collect::<Vec<_>>(),
            "outputs": c.lir.outputs.iter().map(port_json).collect::<Vec<_>>(),
            "arena_bytes": c.lir.arena_bytes,
            "weights_bytes": c.lir.weights.len(),
            "kernels": c.lir.launches.len(),
            "ptx": {"file": format!("{name}.ptx"), "sha256": sha256_hex(c.ptx.as_bytes())},
            "schedule": {"file": format!("{name}.schedule.bin"), "sha256": sha256_hex(&c.schedule), "version": version, "params": bases, "dispatches": dispatches},
            "weights_file": {"file": format!("{name}.weights.bin"), "sha256": sha256_hex(&c.lir.weights)},
            "dispatch": dispatch_counts(&c.report),
        });
        let mut manifest = manifest;
        if !c.half_weights.is_empty() {
            // The weights' tail: 16-bit copies of f32 weights (nvptx/half_weights.rs), each rounded to
            // nearest even from the f32 values at `src` — a tool may rebuild it from the f32 part.
            let copies: Vec<serde_json::Value> = c.half_weights.iter().map(|(d, src, n, dst)| serde_json::json!({"dtype": d, "src": src, "values": n, "dst": dst})).collect();
            manifest["half_weights"] = serde_json::json!(copies);
        }
        if !c.half_activations.is_empty() {
            // Intermediate values the kernels store as bf16 / fp16 (only tensor-core tiles read them).
            let acts: Vec<serde_json::Value> = c.half_activations.iter().filter_map(|&b| c.lir.buffers.get(b as usize)).map(|b| serde_json::json!({"value": b.label, "dtype": b.dtype.to_string(), "offset": b.offset, "shape": b.shape})).collect();
            manifest["half_activations"] = serde_json::json!(acts);
        }
        if !c.tf32_operands.is_empty() {
            // Values and weights held rounded to tf32 (only tensor-core tiles read them; the weights
            // file's bytes are the rounded ones), which the tiles stage unconverted.
            let ops: Vec<serde_json::Value> = c.tf32_operands.iter().filter_map(|&b| c.lir.buffers.get(b as usize)).map(|b| serde_json::json!({"value": b.label, "base": format!("{:?}", b.base).to_lowercase(), "offset": b.offset, "shape": b.shape})).collect();
            manifest["tf32_operands"] = serde_json::json!(ops);
        }
        if c.lir.state_bytes > 0 {
            // A stateful model (a KV cache): the schedule's state base, which the executor keeps on
            // the device between runs and zeroes on reset; each tensor at its byte offset in it.
            // The CPU manifest's form: name, dtype, shape and offset per tensor.
            let tensors: Vec<serde_json::Value> = c
                .lir
                .state
                .iter()
                .map(|s| {
                    let mut t = port_json(&s.port);
                    t["offset"] = serde_json::json!(s.offset);
                    t
                })
                .collect();
            manifest["state"] = serde_json::json!({"bytes": c.lir.state_bytes, "tensors": tensors});
        }
        let files = vec![
            (format!("{name}.ptx"), c.ptx.clone().into_bytes()),
            (format!("{name}.schedule.bin"), c.schedule.clone()),
            (format!("{name}.weights.bin"), c.lir.weights.clone()),
        ];
        let mut files = files;
        if let Some(ir) = &c.llvm_ir {
            files.push((format!("{name}.ll"), ir.clone().into_bytes()));
        }
        Ok((files, manifest))
    }
}

/// A sharded rank on the GPU of `comm` (the application's NCCL communicator): compiled, then loaded
/// with each collective issued through `comm` inside the captured graph.
pub fn load_nccl(mir: &Mir, r: &Request, tm: &mut Timings, comm: std::sync::Arc<rlx_rt::nccl::Nccl>) -> Result<Box<dyn Session>, Failure> {
    super::check_flags(Target::Cuda, r)?;
    let c = compile(Target::Cuda, mir, r, tm)?;
    let ex = tm
        .time("setup (CUDA)", || rlx_rt::cuda::Executor::with_nccl(&c.ptx, &c.schedule, &c.lir.weights, comm))
        .map_err(|e| Failure::model(format!("CUDA: {e}")))?;
    Ok(Box::new(Loaded { c, ex }))
}

/// A CUDA compile loaded into runtime-min's CUDA executor (`Executor::new`: context, module JIT,
/// buffers, weight upload, the captured graph). Each run copies the inputs in, launches the graph
/// once and copies the outputs out.
pub struct Loaded {
    c: CudaCompiled,
    ex: rlx_rt::cuda::Executor,
}

impl Loaded {
    pub fn new(c: CudaCompiled, tm: &mut Timings) -> Result<Loaded, Failure> {
        let ex = tm.time("setup (CUDA)", || rlx_rt::cuda::Executor::new(&c.ptx, &c.schedule, &c.lir.weights)).map_err(|e| Failure::model(format!("CUDA: {e}")))?;
        Ok(Loaded { c, ex })
    }
}

impl Session for Loaded {
    fn device(&self) -> String {
        self.ex.device_name().to_string()
    }
    fn inputs(&self) -> Vec<TensorType> {
        super::run::port_types(&self.c.lir.inputs)
    }
    fn run(&mut self, samples: &[Vec<ConstData>]) -> Result<Vec<Vec<ConstData>>, Failure> {
        let ex = &mut self.ex;
        super::run::run_samples(&self.c.lir.inputs, &self.c.lir.outputs, samples, |ins, outs| {
            ex.run(ins, outs).map_err(|e| Failure::model(format!("CUDA ({}): {e}", ex.device_name())))
        })
    }
    fn notes(&self) -> Vec<String> {
        let comm = match self.ex.collectives() {
            0 => String::new(),
            n => format!(", {n} of them NCCL collectives"),
        };
        vec![format!("{} launches in one CUDA graph (sm_{} PTX, {} matmuls{comm})", self.ex.dispatches(), self.c.sm, self.c.precision.name())]
    }
    fn resident(&mut self) -> Option<Result<(), Failure>> {
        Some(self.ex.launch().map_err(|e| Failure::model(format!("CUDA ({}): {e}", self.ex.device_name()))))
    }
}

#[cfg(test)]
mod tests {
    use super::Sm;

    #[test]
    fn sm_parses_and_names_the_arch_specific_form() {
        let p = |s: &str| s.parse::<Sm>();
        assert_eq!(p("90a"), Ok(Sm { num: 90, specific: true }));
        assert_eq!(p("86"), Ok(Sm { num: 86, specific: false }));
        assert!(p("9x").is_err() && p("a").is_err() && p("").is_err());
        assert_eq!(Sm { num: 90, specific: true }.to_string(), "90a");
    }

    #[test]
    fn a_gpu_gets_its_own_form_or_the_nearest_older() {
        let n = |c| Sm::native(c).to_string();
        assert_eq!([n((9, 0)), n((8, 6)), n((8, 9)), n((10, 0)), n((12, 0)), n((8, 7)), n((7, 5))], ["90a", "86", "89", "90", "90", "80", "80"]);
    }
}
