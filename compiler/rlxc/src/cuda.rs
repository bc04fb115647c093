//! The CUDA target (`--target cuda [--sm 80|86|89|90]`): fold → legalize (the PTX claim set) → plan →
//! `rlx_target_llvm::nvptx` (LIR → LLVM IR → NVPTX → PTX); the artifact files (`NAME.ptx`,
//! `NAME.schedule.bin`, `NAME.weights.bin`, `NAME.json`); and `rlxc run --target cuda` through
//! runtime-min's CUDA executor. Needs the `llvm` feature (the NVPTX back end is LLVM's).

use crate::cli::{problem_list, Failure};
use crate::pipeline::{eval_op, Timings};
use rlx_ir::lir::Lir;
use rlx_ir::{Blob, ConstData, Mir, TargetCaps};
use rlx_opt::DispatchReport;
use std::path::{Path, PathBuf};

/// The architecture compiled for when `--sm` is not given (the PTX is JIT-compiled by the driver for
/// any newer GPU, so sm_80 code runs on Hopper too).
pub const DEFAULT_SM: u32 = 80;

/// The claim set of `--target cuda`.
pub fn caps() -> TargetCaps {
    #[cfg(feature = "llvm")]
    return rlx_target_llvm::nvptx::caps("cuda");
    #[cfg(not(feature = "llvm"))]
    return TargetCaps { name: "cuda".into(), native: Default::default() };
}

/// `ptxas` of PyPI's nvidia-cuda-nvcc-cu12 (requirements.txt): `$RLX_PTXAS`, else found through the
/// venv python (`$RLX_PY`, else `.venv/bin/python`): [`ptxas_of`].
pub fn ptxas() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("RLX_PTXAS").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    ptxas_of(&std::env::var_os("RLX_PY").filter(|p| !p.is_empty()).map_or_else(|| PathBuf::from(".venv/bin/python"), PathBuf::from))
}

/// `site-packages/nvidia/cuda_nvcc/bin/ptxas` of the python `py`.
pub fn ptxas_of(py: &Path) -> Result<PathBuf, String> {
    let code = "import importlib.util, os; s = importlib.util.find_spec('nvidia.cuda_nvcc'); print(os.path.join(list(s.submodule_search_locations)[0], 'bin', 'ptxas'))";
    let out = std::process::Command::new(&py).args(["-c", code]).output().map_err(|e| format!("cannot run {} to find ptxas: {e} (make setup)", py.display()))?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() || !p.exists() {
        return Err(format!("ptxas not found through {} (make setup installs nvidia-cuda-nvcc-cu12): {}", py.display(), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(p)
}

/// Everything a CUDA compile produced, before it is written.
pub struct CudaCompiled {
    pub lir: Lir,
    pub report: DispatchReport,
    pub ptx: String,
    pub schedule: Vec<u8>,
    pub sm: u32,
    /// Per dispatch: (kernel name, grid, block), for the manifest.
    pub dispatches: Vec<(String, [u32; 3], [u32; 3])>,
}

/// MIR → PTX + schedule. Fails listing every unsupported node.
pub fn compile_cuda(mir: &Mir, sm: u32, tm: &mut Timings) -> Result<CudaCompiled, Failure> {
    let folded = tm.time("fold", || rlx_opt::simplify(mir, &eval_op));
    let report = crate::pipeline::legalize(&folded, &caps(), tm)?;
    // As for the shader targets: matmuls in their per-element form (no CPU GEMM panels), LayerNorm and
    // softmax one row kernel each, transposes and scalings inlined into matmul operand loads.
    let opts = rlx_opt::PlanOptions { gemm_nr: 1 << 30, row_fusion: true, row_recompute: true, inline_operands: true, ..Default::default() };
    let lir = tm.time("plan", || rlx_opt::plan(&folded, &opts)).map_err(|p| Failure::model(problem_list("cannot plan the model", &p)))?;
    codegen(lir, report, sm, tm)
}

#[cfg(feature = "llvm")]
fn codegen(lir: Lir, report: DispatchReport, sm: u32, tm: &mut Timings) -> Result<CudaCompiled, Failure> {
    let p = tm.time("codegen (nvptx)", || rlx_target_llvm::nvptx::compile(&lir, sm)).map_err(|e| Failure::model(format!("target cuda: {e}")))?;
    let dispatches = p.dispatches.iter().zip(&p.names).map(|(d, n)| (n.clone(), d.groups, d.block)).collect();
    Ok(CudaCompiled { schedule: p.schedule_bytes(), ptx: p.ptx, lir, report, sm, dispatches })
}

#[cfg(not(feature = "llvm"))]
fn codegen(_: Lir, _: DispatchReport, _: u32, _: &mut Timings) -> Result<CudaCompiled, Failure> {
    Err(Failure::usage("--target cuda needs LLVM's NVPTX back end: this rlxc was built without the `llvm` feature"))
}

fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

/// Writes `NAME.ptx`, `NAME.schedule.bin`, `NAME.weights.bin` and the manifest `NAME.json`, all or
/// nothing.
pub fn write_cuda_artifacts(dir: &Path, name: &str, model: &Path, c: &CudaCompiled) -> Result<Vec<PathBuf>, Failure> {
    std::fs::create_dir_all(dir).map_err(|e| Failure::usage(format!("cannot create {}: {e}", dir.display())))?;
    let port = |p: &rlx_ir::lir::Port| serde_json::json!({"name": p.name, "dtype": p.ty.dtype.name(), "shape": p.ty.shape.as_fixed().unwrap_or_default()});
    let bases: Vec<serde_json::Value> = rlx_ir::schedule::bases_of(&c.lir)
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let what = match b.base {
                rlx_ir::lir::Base::Arena => "arena".to_string(),
                rlx_ir::lir::Base::Weights => "weights".to_string(),
                rlx_ir::lir::Base::Input(k) => format!("input {k}"),
                rlx_ir::lir::Base::Output(k) => format!("output {k}"),
            };
            serde_json::json!({"param": i, "buffer": what, "bytes": b.bytes})
        })
        .collect();
    let dispatches: Vec<serde_json::Value> =
        c.dispatches.iter().enumerate().map(|(i, (n, g, b))| serde_json::json!({"entry": format!("k{i}"), "kernel": n, "grid": g, "block": b})).collect();
    let manifest = serde_json::json!({
        "name": name,
        "rlxc_version": env!("CARGO_PKG_VERSION"),
        "model": model.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        "target": {"name": "cuda", "sm": c.sm, "triple": "nvptx64-nvidia-cuda", "precision": "f32"},
        "inputs": c.lir.inputs.iter().map(port).collect::<Vec<_>>(),
        "outputs": c.lir.outputs.iter().map(port).collect::<Vec<_>>(),
        "arena_bytes": c.lir.arena_bytes,
        "weights_bytes": c.lir.weights.len(),
        "kernels": c.lir.launches.len(),
        "ptx": {"file": format!("{name}.ptx"), "sha256": sha256_hex(c.ptx.as_bytes())},
        "schedule": {"file": format!("{name}.schedule.bin"), "sha256": sha256_hex(&c.schedule), "version": 3, "params": bases, "dispatches": dispatches},
        "weights_file": {"file": format!("{name}.weights.bin"), "sha256": sha256_hex(&c.lir.weights)},
        "dispatch": {
            "native": c.report.count(rlx_opt::Resolution::Native),
            "common_ir": c.report.count(rlx_opt::Resolution::CommonIr),
            "rewritten": c.report.count(rlx_opt::Resolution::Rewritten),
            "unsupported": c.report.count(rlx_opt::Resolution::Unsupported),
        },
    });
    let json = serde_json::to_string_pretty(&manifest).map_err(|e| Failure::model(e.to_string()))? + "\n";
    crate::pipeline::write_all_or_nothing(vec![
        (dir.join(format!("{name}.ptx")), c.ptx.clone().into_bytes()),
        (dir.join(format!("{name}.schedule.bin")), c.schedule.clone()),
        (dir.join(format!("{name}.weights.bin")), c.lir.weights.clone()),
        (dir.join(format!("{name}.json")), json.into_bytes()),
    ])
}

/// Timings of `rlxc run --target cuda --bench N`.
pub struct CudaBench {
    pub device: String,
    pub compile: std::time::Duration,
    /// `Executor::new`: context, module JIT, buffers, weight upload, the captured graph.
    pub setup: std::time::Duration,
    pub first: std::time::Duration,
    /// `bench` more runs, sorted: each copy in, one graph launch, copy out.
    pub runs: Vec<std::time::Duration>,
    pub dispatches: usize,
}

/// `rlxc run --target cuda`: compile to PTX in memory (sm_80: the driver JIT-compiles it for the GPU)
/// and run it through runtime-min's CUDA executor, then `bench` more timed runs. Without a CUDA
/// driver: an error saying so (before compiling).
pub fn run_cuda_bench(mir: &Mir, inputs: &[ConstData], bench: usize) -> Result<(Vec<ConstData>, CudaBench), Failure> {
    rlx_rt::cuda::probe().map_err(|e| Failure::model(format!("cannot run --target cuda here: {e}")))?;
    let mut tm = Timings::default();
    let t0 = std::time::Instant::now();
    let c = compile_cuda(mir, DEFAULT_SM, &mut tm)?;
    let compile = t0.elapsed();
    for (v, p) in inputs.iter().zip(&c.lir.inputs) {
        let want = p.ty.shape.as_fixed().unwrap_or_default();
        if v.dtype != p.ty.dtype || v.shape != want {
            return Err(Failure::usage(format!("input '{}' is {}{:?}, the compiled model takes {}", p.name, v.dtype, v.shape, p.ty)));
        }
    }
    let t0 = std::time::Instant::now();
    let mut ex = rlx_rt::cuda::Executor::new(&c.ptx, &c.schedule, &c.lir.weights).map_err(|e| Failure::model(format!("CUDA: {e}")))?;
    let setup = t0.elapsed();
    let ins: Vec<&[u8]> = inputs.iter().map(|c| c.data.bytes()).collect();
    let mut outs: Vec<Vec<u8>> = c.lir.outputs.iter().map(|p| vec![0u8; p.ty.dtype.bytes_for(p.ty.shape.numel().unwrap_or(0)).unwrap_or(0)]).collect();
    let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
    let t0 = std::time::Instant::now();
    ex.run(&ins, &mut refs).map_err(|e| Failure::model(format!("CUDA ({}): {e}", ex.device_name())))?;
    let first = t0.elapsed();
    let mut scratch = outs.clone();
    let mut runs = Vec::with_capacity(bench);
    for _ in 0..bench {
        let mut refs: Vec<&mut [u8]> = scratch.iter_mut().map(|v| v.as_mut_slice()).collect();
        let t0 = std::time::Instant::now();
        ex.run(&ins, &mut refs).map_err(|e| Failure::model(format!("CUDA ({}): {e}", ex.device_name())))?;
        runs.push(t0.elapsed());
    }
    runs.sort();
    let timing = CudaBench { device: ex.device_name().to_string(), compile, setup, first, runs, dispatches: ex.dispatches() };
    let mut res = Vec::new();
    for (p, bytes) in c.lir.outputs.iter().zip(outs) {
        res.push(ConstData::new(p.ty.dtype, p.ty.shape.as_fixed().unwrap_or_default(), Blob::from_vec(bytes)).map_err(Failure::model)?);
    }
    Ok((res, timing))
}
