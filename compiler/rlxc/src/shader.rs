//! The shader targets (`vulkan`, `spirv`, `webgpu`, `metal`, `directx`, `opengl`): fold → legalize
//! (the shader claim set) → plan → `rlx-target-shader` (LIR → naga module, validated) → one writer;
//! the artifact files; and `rlxc run --target vulkan` through runtime-min's Vulkan executor.

use crate::cli::{problem_list, Failure, Target};
use crate::pipeline::{eval_op, Timings};
use rlx_ir::lir::Lir;
use rlx_ir::{Blob, ConstData, Mir};
use rlx_opt::DispatchReport;
use std::path::{Path, PathBuf};

/// Everything a shader compile produced, before it is written.
pub struct ShaderCompiled {
    pub lir: Lir,
    pub report: DispatchReport,
    pub program: rlx_target_shader::Program,
    pub lang: rlx_target_shader::Lang,
    /// `(suffix, bytes)`: `NAME.{suffix}`.
    pub files: Vec<(String, Vec<u8>)>,
}

/// MIR → shader sources / SPIR-V for a GPU target. Fails listing every unsupported node.
pub fn compile_shader(mir: &Mir, t: Target, tm: &mut Timings) -> Result<ShaderCompiled, Failure> {
    let lang = t.shader_lang().ok_or_else(|| Failure::usage(format!("--target {} is not a shader target", t.name())))?;
    let folded = tm.time("fold", || rlx_opt::simplify(mir, &eval_op));
    let report = crate::pipeline::legalize(&folded, &t.caps(), tm)?;
    // No CPU GEMM micro-kernel (packed panels, 6-row register tiles): a panel wider than any matrix
    // keeps every matmul in the per-element dot-product form, which the shader writer tiles through
    // workgroup memory (rlx-target-shader's tiled.rs). Row fusion on, recomputing a transcendental
    // per pass rather than storing it (LayerNorm and softmax are one kernel each; the writer runs a
    // row kernel as one workgroup per row). RLX_SHADER_ROWS=0 plans without row fusion (comparisons).
    // Transposes, reshapes and scalar scalings feeding a matmul operand are inlined into its loads
    // (the writer stages operands through workgroup tiles, so strided loads cost little; attention's
    // K^T, head split/merge and d^-¼ scalings are no dispatches of their own); RLX_SHADER_OPERANDS=0
    // materializes them as on the CPU (comparisons).
    let rows = std::env::var("RLX_SHADER_ROWS").map_or(true, |v| v != "0");
    let operands = std::env::var("RLX_SHADER_OPERANDS").map_or(true, |v| v != "0");
    let opts = rlx_opt::PlanOptions { gemm_nr: 1 << 30, row_fusion: rows, row_recompute: rows, inline_operands: operands, ..Default::default() };
    let lir = tm.time("plan", || rlx_opt::plan(&folded, &opts)).map_err(|p| Failure::model(problem_list("cannot plan the model", &p)))?;
    // RLX_SHADER_TILES=0 keeps every kernel on the one-invocation-per-output mapping (no workgroup
    // memory), for comparisons.
    let tiles = std::env::var("RLX_SHADER_TILES").map_or(true, |v| v != "0");
    let program = tm.time("codegen (naga)", || rlx_target_shader::translate_with(&lir, lang, tiles)).map_err(|e| Failure::model(format!("target {}: {e}", t.name())))?;
    let files = tm.time("write (naga)", || rlx_target_shader::emit(&program, lang)).map_err(|e| Failure::model(format!("target {}: {e}", t.name())))?;
    Ok(ShaderCompiled { lir, report, program, lang, files })
}

fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

/// Writes the shader files, `NAME.schedule.bin`, `NAME.weights.bin` and the manifest `NAME.json`,
/// all or nothing.
pub fn write_shader_artifacts(dir: &Path, name: &str, model: &Path, t: Target, c: &ShaderCompiled) -> Result<Vec<PathBuf>, Failure> {
    crate::pipeline::create_out_dir(dir)?;
    let port = |p: &rlx_ir::lir::Port| serde_json::json!({"name": p.name, "dtype": p.ty.dtype.name(), "shape": p.ty.shape.as_fixed().unwrap_or_default()});
    let sched = c.program.schedule_bytes();
    let mut files: Vec<(PathBuf, Vec<u8>)> = c.files.iter().map(|(suf, b)| (dir.join(format!("{name}.{suf}")), b.clone())).collect();
    let shader_files: Vec<serde_json::Value> = c.files.iter().map(|(suf, b)| serde_json::json!({"file": format!("{name}.{suf}"), "sha256": sha256_hex(b)})).collect();
    let bases: Vec<serde_json::Value> = c
        .program
        .bases
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let what = match b.base {
                rlx_ir::lir::Base::Arena => "arena".to_string(),
                rlx_ir::lir::Base::Weights => "weights".to_string(),
                rlx_ir::lir::Base::Input(k) => format!("input {k}"),
                rlx_ir::lir::Base::Output(k) => format!("output {k}"),
            };
            serde_json::json!({"binding": i, "buffer": what, "bytes": b.bytes})
        })
        .collect();
    // The barrier-separated levels runtime-min's executor records (by default), from the schedule
    // bytes themselves.
    let parsed = rlx_rt::vulkan::Schedule::parse(&sched).map_err(|e| Failure::model(format!("internal error: the schedule written does not parse: {e}")))?;
    let levels = parsed.levels(rlx_rt::vulkan::Barriers::Levels);
    let mut level_of = vec![0usize; c.program.dispatches.len()];
    for (l, ds) in levels.iter().enumerate() {
        for &d in ds {
            level_of[d] = l;
        }
    }
    let access = |a: rlx_ir::loops::Access| match a {
        rlx_ir::loops::Access::Read => "r",
        rlx_ir::loops::Access::Write => "w",
        rlx_ir::loops::Access::ReadWrite => "rw",
    };
    let dispatches: Vec<serde_json::Value> = c
        .program
        .dispatches
        .iter()
        .zip(&level_of)
        .map(|(d, l)| {
            let ranges: Vec<serde_json::Value> = d.ranges.iter().map(|r| serde_json::json!([r.binding, access(r.access), r.start, r.end])).collect();
            serde_json::json!({"entry": format!("k{}", d.entry), "kernel": d.name, "workgroups": d.groups, "workgroup_size": d.workgroup_size, "bindings": d.uses, "ranges": ranges, "level": l})
        })
        .collect();
    let manifest = serde_json::json!({
        "name": name,
        "rlxc_version": env!("CARGO_PKG_VERSION"),
        "model": model.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        "target": {"name": t.name(), "language": format!("{:?}", c.lang)},
        "inputs": c.lir.inputs.iter().map(port).collect::<Vec<_>>(),
        "outputs": c.lir.outputs.iter().map(port).collect::<Vec<_>>(),
        "arena_bytes": c.lir.arena_bytes,
        "weights_bytes": c.lir.weights.len(),
        "kernels": c.lir.launches.len(),
        "shaders": shader_files,
        "schedule": {"file": format!("{name}.schedule.bin"), "sha256": sha256_hex(&sched), "descriptor_set": 0, "bindings": bases, "levels": levels.len(), "barriers": levels.len().saturating_sub(1), "dispatches": dispatches},
        "weights_file": {"file": format!("{name}.weights.bin"), "sha256": sha256_hex(&c.lir.weights)},
        "dispatch": {
            "native": c.report.count(rlx_opt::Resolution::Native),
            "common_ir": c.report.count(rlx_opt::Resolution::CommonIr),
            "rewritten": c.report.count(rlx_opt::Resolution::Rewritten),
            "unsupported": c.report.count(rlx_opt::Resolution::Unsupported),
        },
    });
    files.push((dir.join(format!("{name}.schedule.bin")), sched));
    files.push((dir.join(format!("{name}.weights.bin")), c.lir.weights.clone()));
    let json = serde_json::to_string_pretty(&manifest).map_err(|e| Failure::model(e.to_string()))? + "\n";
    files.push((dir.join(format!("{name}.json")), json.into_bytes()));
    crate::pipeline::write_all_or_nothing(files)
}

/// `rlxc run --target vulkan`: compile to SPIR-V + schedule in memory and run them through
/// runtime-min's Vulkan executor (the same bytes `rlxc compile --target vulkan` writes).
pub fn run_vulkan(mir: &Mir, inputs: &[ConstData], t: Target) -> Result<Vec<ConstData>, Failure> {
    run_vulkan_bench(mir, inputs, t, 0).map(|(outs, _)| outs)
}

/// Timings of `rlxc run --target vulkan --bench N`.
pub struct VulkanBench {
    pub device: String,
    /// MIR → SPIR-V.
    pub compile: std::time::Duration,
    /// `Executor::new`: device, buffers, weight upload, pipelines, the recorded command buffer.
    pub setup: std::time::Duration,
    /// The first `Executor::run` (the outputs come from it).
    pub first: std::time::Duration,
    /// `bench` more runs after it, sorted: each one `Executor::run` — copy the inputs in, submit the
    /// recorded command buffer, wait for its fence, copy the outputs out.
    pub runs: Vec<std::time::Duration>,
    /// Dispatches recorded, and the compute→compute barriers between them (`RLX_VULKAN_BARRIERS`).
    pub dispatches: usize,
    pub barriers: usize,
}

/// [`run_vulkan`], then `bench` more timed runs of the same executor on the same inputs.
pub fn run_vulkan_bench(mir: &Mir, inputs: &[ConstData], t: Target, bench: usize) -> Result<(Vec<ConstData>, VulkanBench), Failure> {
    if !matches!(t, Target::Vulkan | Target::Spirv) {
        return Err(Failure::usage(format!("target {} cannot be run by rlxc (only vulkan/spirv, through runtime-min's Vulkan executor); use `rlxc compile --target {}`", t.name(), t.name())));
    }
    let mut tm = Timings::default();
    let t0 = std::time::Instant::now();
    let c = compile_shader(mir, t, &mut tm)?;
    let compile = t0.elapsed();
    let spv = &c.files[0].1;
    let t0 = std::time::Instant::now();
    let mut ex = rlx_rt::vulkan::Executor::new(spv, &c.program.schedule_bytes(), &c.lir.weights).map_err(|e| Failure::model(format!("Vulkan: {e}")))?;
    let setup = t0.elapsed();
    for (v, p) in inputs.iter().zip(&c.lir.inputs) {
        let want = p.ty.shape.as_fixed().unwrap_or_default();
        if v.dtype != p.ty.dtype || v.shape != want {
            return Err(Failure::usage(format!("input '{}' is {}{:?}, the compiled model takes {}", p.name, v.dtype, v.shape, p.ty)));
        }
    }
    let ins: Vec<&[u8]> = inputs.iter().map(|c| c.data.bytes()).collect();
    let mut outs: Vec<Vec<u8>> = c.lir.outputs.iter().map(|p| vec![0u8; p.ty.dtype.bytes_for(p.ty.shape.numel().unwrap_or(0)).unwrap_or(0)]).collect();
    let mut out_refs: Vec<&mut [u8]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
    let t0 = std::time::Instant::now();
    ex.run(&ins, &mut out_refs).map_err(|e| Failure::model(format!("Vulkan ({}): {e}", ex.device_name())))?;
    let first = t0.elapsed();
    let mut scratch: Vec<Vec<u8>> = outs.clone();
    let mut runs = Vec::with_capacity(bench);
    for _ in 0..bench {
        let mut refs: Vec<&mut [u8]> = scratch.iter_mut().map(|v| v.as_mut_slice()).collect();
        let t0 = std::time::Instant::now();
        ex.run(&ins, &mut refs).map_err(|e| Failure::model(format!("Vulkan ({}): {e}", ex.device_name())))?;
        runs.push(t0.elapsed());
    }
    runs.sort();
    if let Some(p) = ex.profile() {
        // RLX_VULKAN_PROFILE=1: the last run's time per kernel, summed by fused-kernel name pattern.
        let total: f64 = p.iter().sum();
        let mut by: Vec<(f64, usize, String)> = Vec::new();
        for (t, d) in p.iter().zip(&c.program.dispatches) {
            let key: String = d.name.chars().filter(|c| !c.is_ascii_digit()).collect();
            let key = format!("{key} [{}x{}]", d.workgroup_size[0], d.workgroup_size[1]);
            match by.iter_mut().find(|e| e.2 == key) {
                Some(e) => {
                    e.0 += t;
                    e.1 += 1;
                }
                None => by.push((*t, 1, key)),
            }
        }
        by.sort_by(|a, b| b.0.total_cmp(&a.0));
        println!("profile: {} dispatches, {} barriers, {total:.1} µs on the device (timestamps)", ex.dispatches(), ex.barriers());
        for (t, n, k) in by.iter().take(30) {
            println!("  {t:9.1} µs  {:4.1}%  {n:3}×  {k}", 100.0 * t / total.max(1e-9));
        }
    }
    let timing = VulkanBench { device: ex.device_name().to_string(), compile, setup, first, runs, dispatches: ex.dispatches(), barriers: ex.barriers() };
    let mut res = Vec::new();
    for (p, bytes) in c.lir.outputs.iter().zip(outs) {
        let shape = p.ty.shape.as_fixed().unwrap_or_default();
        res.push(ConstData::new(p.ty.dtype, shape, Blob::from_vec(bytes)).map_err(Failure::model)?);
    }
    Ok((res, timing))
}
