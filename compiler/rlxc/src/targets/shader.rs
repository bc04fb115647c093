//! The shader family (`vulkan`, `spirv`, `webgpu`, `metal`, `directx`, `opengl`): fold → legalize
//! (the shader claim set) → plan (no CPU GEMM panels; row fusion with recomputation, operand
//! inlining) → `rlx-target-shader` (LIR → naga module, validated) → one writer; the artifact files;
//! and, for `vulkan`/`spirv`, runtime-min's Vulkan executor ([`Loaded`]).

use super::write::{base_name, dispatch_counts, model_file, port_json, sha256_hex};
use super::{Artifact, Family, Planning, Prepared, Quantization, Request, Session};
use crate::cli::{Failure, Target};
use crate::pipeline::Timings;
use rlx_ir::lir::Lir;
use rlx_ir::{ConstData, Mir, TargetCaps, TensorType};
use rlx_opt::DispatchReport;
use std::path::Path;

pub struct Shader;

/// The shader language of a GPU target.
pub fn lang_of(t: Target) -> Result<rlx_target_shader::Lang, Failure> {
    use rlx_target_shader::Lang;
    Ok(match t {
        Target::Vulkan | Target::Spirv => Lang::Spirv,
        Target::Webgpu => Lang::Wgsl,
        Target::Metal => Lang::Msl,
        Target::Directx => Lang::Hlsl,
        Target::Opengl => Lang::Glsl,
        _ => return Err(Failure::usage(format!("--target {} is not a shader target", t.name()))),
    })
}

/// The shader planning options: no CPU GEMM micro-kernel (packed panels, 6-row register tiles): a
/// panel wider than any matrix keeps every matmul in the per-element dot-product form, which the
/// shader writer tiles through workgroup memory (rlx-target-shader's tiled.rs). Row fusion on,
/// recomputing a transcendental per pass rather than storing it (LayerNorm and softmax are one
/// kernel each; the writer runs a row kernel as one workgroup per row). RLX_SHADER_ROWS=0 plans
/// without row fusion (comparisons). Transposes, reshapes and scalar scalings feeding a matmul
/// operand are inlined into its loads (the writer stages operands through workgroup tiles, so
/// strided loads cost little; attention's K^T, head split/merge and d^-¼ scalings are no dispatches
/// of their own); RLX_SHADER_OPERANDS=0 materializes them as on the CPU (comparisons).
pub fn plan_options() -> rlx_opt::PlanOptions {
    let rows = std::env::var("RLX_SHADER_ROWS").map_or(true, |v| v != "0");
    let operands = std::env::var("RLX_SHADER_OPERANDS").map_or(true, |v| v != "0");
    rlx_opt::PlanOptions { gemm_nr: 1 << 30, row_fusion: rows, row_recompute: rows, inline_operands: operands, ..Default::default() }
}

impl Family for Shader {
    fn describe(&self) -> &'static str {
        "GPU targets (--target vulkan|spirv|webgpu|metal|directx|opengl)"
    }
    fn caps(&self, t: Target) -> TargetCaps {
        match lang_of(t) {
            Ok(l) => rlx_target_shader::caps(t.name(), l),
            Err(_) => TargetCaps::uniform(t.name(), &[], &[]),
        }
    }
    fn quantization(&self, _t: Target) -> Quantization {
        Quantization::Never
    }
    /// Two columns for the shader languages: vulkan (SPIR-V) and webgpu (WGSL).
    fn coverage_column(&self, t: Target) -> bool {
        matches!(t, Target::Vulkan | Target::Webgpu)
    }
    fn planning(&self, _t: Target, _r: &Request) -> Result<Planning, Failure> {
        Ok(Planning::Plan(plan_options()))
    }
    fn emit(&self, t: Target, p: Prepared, _r: &Request, tm: &mut Timings) -> Result<Box<dyn Artifact>, Failure> {
        Ok(Box::new(emit(t, p, tm)?))
    }
    fn runs(&self, t: Target) -> bool {
        matches!(t, Target::Vulkan | Target::Spirv)
    }
    fn load(&self, t: Target, mir: &Mir, r: &Request, tm: &mut Timings) -> Result<Box<dyn Session>, Failure> {
        if !self.runs(t) {
            return Err(Failure::usage(format!("target {} cannot be run by rlxc (only vulkan/spirv, through runtime-min's Vulkan executor); use `rlxc compile --target {}`", t.name(), t.name())));
        }
        let c = compile(t, mir, r, tm)?;
        Ok(Box::new(Loaded::new(c, tm)?))
    }
}

/// Everything a shader compile produced, before it is written.
pub struct ShaderCompiled {
    pub lir: Lir,
    pub report: DispatchReport,
    pub program: rlx_target_shader::Program,
    pub lang: rlx_target_shader::Lang,
    /// `(suffix, bytes)`: `NAME.{suffix}`.
    pub files: Vec<(String, Vec<u8>)>,
    pub target: Target,
}

/// MIR → shader sources / SPIR-V for a GPU target (the family's script, typed). Fails listing
/// every unsupported node.
pub fn compile(t: Target, mir: &Mir, r: &Request, tm: &mut Timings) -> Result<ShaderCompiled, Failure> {
    let p = super::prepare(t, mir, r, tm)?;
    emit(t, p, tm)
}

fn emit(t: Target, p: Prepared, tm: &mut Timings) -> Result<ShaderCompiled, Failure> {
    let lang = lang_of(t)?;
    let lir = p.lir.ok_or_else(|| Failure::model("internal error: the shader family plans a LIR"))?;
    super::refuse_state(t, &lir)?;
    // RLX_SHADER_TILES=0 keeps every kernel on the one-invocation-per-output mapping (no workgroup
    // memory), for comparisons.
    let tiles = std::env::var("RLX_SHADER_TILES").map_or(true, |v| v != "0");
    let program = tm.time("codegen (naga)", || rlx_target_shader::translate_with(&lir, lang, tiles)).map_err(|e| Failure::model(format!("target {}: {e}", t.name())))?;
    let files = tm.time("write (naga)", || rlx_target_shader::emit(&program, lang)).map_err(|e| Failure::model(format!("target {}: {e}", t.name())))?;
    Ok(ShaderCompiled { lir, report: p.report, program, lang, files, target: t })
}

impl Artifact for ShaderCompiled {
    fn report(&self) -> &DispatchReport {
        &self.report
    }
    fn summary(&self) -> String {
        format!(
            "{}: {} kernels ({} dispatches), arena {} bytes, weights {} bytes",
            self.target.name(),
            self.lir.launches.len(),
            self.program.dispatches.len(),
            self.lir.arena_bytes,
            self.lir.weights.len()
        )
    }
    /// The shader files, `NAME.schedule.bin`, `NAME.weights.bin` and the manifest.
    fn files(&self, name: &str, model: &Path) -> Result<(Vec<(String, Vec<u8>)>, serde_json::Value), Failure> {
    let (c, t) = (self, self.target);
    let sched = c.program.schedule_bytes();
    let mut files: Vec<(String, Vec<u8>)> = c.files.iter().map(|(suf, b)| (format!("{name}.{suf}"), b.clone())).collect();
    let shader_files: Vec<serde_json::Value> = c.files.iter().map(|(suf, b)| serde_json::json!({"file": format!("{name}.{suf}"), "sha256": sha256_hex(b)})).collect();
    let bases: Vec<serde_json::Value> = c
        .program
        .bases
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let what = base_name(b.base);
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
        "model": model_file(model),
        "target": {"name": t.name(), "language": format!("{:?}", c.lang)},
        "inputs": c.lir.inputs.iter().map(port_json).collect::<Vec<_>>(),
        "outputs": c.lir.outputs.iter().map(port_json).collect::<Vec<_>>(),
        "arena_bytes": c.lir.arena_bytes,
        "weights_bytes": c.lir.weights.len(),
        "kernels": c.lir.launches.len(),
        "shaders": shader_files,
        "schedule": {"file": format!("{name}.schedule.bin"), "sha256": sha256_hex(&sched), "descriptor_set": 0, "bindings": bases, "levels": levels.len(), "barriers": levels.len().saturating_sub(1), "dispatches": dispatches},
        "weights_file": {"file": format!("{name}.weights.bin"), "sha256": sha256_hex(&c.lir.weights)},
        "dispatch": dispatch_counts(&c.report),
    });
    files.push((format!("{name}.schedule.bin"), sched));
    files.push((format!("{name}.weights.bin"), c.lir.weights.clone()));
    Ok((files, manifest))
    }
}

/// A shader compile loaded into runtime-min's Vulkan executor (`Executor::new`: device, buffers,
/// weight upload, pipelines, the recorded command buffer). Each run copies the inputs in, submits
/// the recorded command buffer, waits for its fence and copies the outputs out.
pub struct Loaded {
    c: ShaderCompiled,
    ex: rlx_rt::vulkan::Executor,
}

impl Loaded {
    pub fn new(c: ShaderCompiled, tm: &mut Timings) -> Result<Loaded, Failure> {
        let spv = &c.files[0].1;
        let ex = tm
            .time("setup (Vulkan)", || rlx_rt::vulkan::Executor::new(spv, &c.program.schedule_bytes(), &c.lir.weights))
            .map_err(|e| Failure::model(format!("Vulkan: {e}")))?;
        Ok(Loaded { c, ex })
    }
}

impl Session for Loaded {
    fn device(&self) -> String {
        self.ex.device_name().to_string()
    }
    fn inputs(&self) -> Vec<TensorType> {
        crate::targets::run::port_types(&self.c.lir.inputs)
    }
    fn run(&mut self, samples: &[Vec<ConstData>]) -> Result<Vec<Vec<ConstData>>, Failure> {
        let ex = &mut self.ex;
        super::run::run_samples(&self.c.lir.inputs, &self.c.lir.outputs, samples, |ins, outs| {
            ex.run(ins, outs).map_err(|e| Failure::model(format!("Vulkan ({}): {e}", ex.device_name())))
        })
    }
    /// The dispatches and the barriers between them; with RLX_VULKAN_PROFILE=1 the last run's time
    /// per kernel, summed by fused-kernel name pattern.
    fn notes(&self) -> Vec<String> {
        let head = format!("{} dispatches, {} barriers between them", self.ex.dispatches(), self.ex.barriers());
        let Some(p) = self.ex.profile() else { return vec![head] };
        let total: f64 = p.iter().sum();
        let mut by: Vec<(f64, usize, String)> = Vec::new();
        for (t, d) in p.iter().zip(&self.c.program.dispatches) {
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
        let mut v = vec![head, format!("profile: {} dispatches, {} barriers, {total:.1} µs on the device (timestamps)", self.ex.dispatches(), self.ex.barriers())];
        for (t, n, k) in by.iter().take(30) {
            v.push(format!("  {t:9.1} µs  {:4.1}%  {n:3}×  {k}", 100.0 * t / total.max(1e-9)));
        }
        v
    }
}
