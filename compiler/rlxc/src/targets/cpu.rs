//! The CPU family (`host`, `x86_64`, `aarch64`; LLVM or Cranelift): fold → legalize → plan with the
//! CPU's GEMM panels and row fusion → object; `NAME.o`, `NAME.h`, `NAME.rs`, `librlx_rt.a` and the
//! manifest. Executors: `host` is linked into a shared object and loaded in this process
//! ([`dlopen`]); other CPUs link `tests/conformance/harness.c` into an executable run natively or
//! under `qemu-aarch64` ([`harness`]).

pub mod dlopen;
pub mod harness;

use super::write::{dispatch_counts, model_file, sha256_hex};
use super::{Artifact, Family, Flag, Planning, Prepared, Quantization, Request, Session};
use crate::artifact;
use crate::cli::{Failure, Target};
use crate::pipeline::{cpu_target, runtime_lib, Arch, Backend, CpuTarget, Timings};
use rlx_ir::lir::Lir;
use rlx_ir::{Mir, TargetCaps};
use rlx_opt::DispatchReport;
use std::path::Path;

pub struct Cpu;

/// The CPU a request means: the target's default, `--cpu`, `--backend`.
pub fn cpu_of(t: Target, r: &Request) -> Result<CpuTarget, Failure> {
    let mut c = cpu_target(t, r.cpu.as_deref())?;
    c.backend = r.backend.unwrap_or_default();
    Ok(c)
}

/// Whether the CPU has AVX-512 VNNI (`vpdpbusd` on zmm registers): by its features, or its name.
pub fn has_avx512_vnni(cpu: &CpuTarget) -> bool {
    cpu.features.split(',').any(|f| f == "+avx512vnni")
        || ["icelake-client", "icelake-server", "tigerlake", "rocketlake", "cascadelake", "cooperlake", "sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d", "znver4", "znver5"].contains(&cpu.cpu.as_str())
}

/// The CPU's int8 dot product instruction for `Dot4`: AVX-512 VNNI, else AVX2, else aarch64's dotprod
/// (by its features, or its name), else none.
pub fn int8_dot_isa(cpu: &CpuTarget) -> rlx_ir::loops::Int8Dot {
    use rlx_ir::loops::Int8Dot;
    let has = |f: &str| cpu.features.split(',').any(|x| x == f);
    const AVX2: &[&str] = &[
        "haswell", "broadwell", "skylake", "skylake-avx512", "skx", "cannonlake", "alderlake", "raptorlake", "meteorlake", "arrowlake", "arrowlake-s", "lunarlake", "pantherlake", "gracemont", "sierraforest",
        "grandridge", "clearwaterforest", "core-avx2", "x86-64-v3", "x86-64-v4", "znver1", "znver2", "znver3", "bdver4",
    ];
    const DOTPROD: &[&str] = &[
        "cortex-a55", "cortex-a75", "cortex-a76", "cortex-a76ae", "cortex-a77", "cortex-a78", "cortex-a78ae", "cortex-a78c", "cortex-a710", "cortex-a715", "cortex-a720", "cortex-x1", "cortex-x1c", "cortex-x2",
        "cortex-x3", "cortex-x4", "neoverse-n1", "neoverse-n2", "neoverse-v1", "neoverse-v2", "ampere1", "ampere1a", "ampere1b", "apple-a13", "apple-a14", "apple-a15", "apple-a16", "apple-a17", "apple-m4",
    ];
    match cpu.arch {
        Arch::X86_64 if has_avx512_vnni(cpu) => Int8Dot::Vnni,
        Arch::X86_64 if has("+avx2") || AVX2.contains(&cpu.cpu.as_str()) => Int8Dot::Avx2,
        Arch::Aarch64 if has("+dotprod") || DOTPROD.contains(&cpu.cpu.as_str()) => Int8Dot::Sdot,
        _ => Int8Dot::Plain,
    }
}

/// Planning parameters for a CPU: GEMM panels are two vectors wide (AVX-512: 32 f32 lanes; AVX2 and
/// NEON: 16). Block-quantized matmuls take int8 activations (`PlanOptions::int8_dot`) with the LLVM
/// back end on a CPU with an int8 dot product instruction (`int8_dot_isa`), unless `exact`
/// (`--exact-activations`); prefill's many-row ones only with AVX-512 VNNI (`int8_gemm`). Dense 3×3
/// stride-1 convolutions over large outputs take the Winograd form `winograd` (`--winograd`); `layout`
/// (`--layout`) lets the layout pass make convolutions channels-last.
pub fn plan_options(cpu: &CpuTarget, exact: bool, winograd: crate::cli::Winograd, layout: crate::cli::Layout) -> rlx_opt::PlanOptions {
    let avx512 = cpu.features.split(',').any(|f| f == "+avx512f")
        || ["skylake-avx512", "icelake-server", "sapphirerapids", "znver4", "znver5", "x86-64-v4"].contains(&cpu.cpu.as_str());
    // AVX-512: 8 rows × 2 zmm = 16 accumulators (measured on MiniLM: 8 beats 6 and 12 by 4–5%), and the
    // wide tile 6 rows × 4 zmm = 24 accumulators for the convolutions over ≥ 64 positions and the
    // matmuls over packed weights of ≥ 64 columns (one thread, best CPU time of interleaved runs: 64
    // channels 3×3 at 56² 113 → 132 GFLOP/s, VGG's 512 at 28² 107 → 130, a 1024² matmul 103 → 131,
    // MiniLM's 128×384·384×1536 125 → 152; the register-only FMA peak is ~180).
    // Row fusion: softmax and LayerNorm in one or two kernels each (MiniLM: 171 launches → 100).
    // Window kernels (pools, depthwise / grouped convolution) in vectors of the f32 width.
    #[cfg(feature = "llvm")]
    let llvm = cpu.backend == Backend::Llvm;
    #[cfg(not(feature = "llvm"))]
    let llvm = false;
    let isa = int8_dot_isa(cpu);
    let int8_dot = !exact && llvm && isa != rlx_ir::loops::Int8Dot::Plain;
    // Prefill's GEMMs on int8 where it pays (Gemma 3 270M, prefill 128 at one thread, tokens per
    // CPU-second: VNNI 470 against 269 on f32 panels; AVX2 (--cpu haswell) 252 against 314; sdot not
    // measured: f32 kept).
    // Two 512-bit FMA units per core: Intel's server cores (Zen 4 / 5 issue one a cycle; client cores one).
    let two_fma = ["skylake-avx512", "cascadelake", "cooperlake", "icelake-server", "sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d"].contains(&cpu.cpu.as_str());
    // Channels-last where the layout pass finds that it pays (`rlx_opt::channels_last`).
    let channels_last = layout == crate::cli::Layout::Auto;
    rlx_opt::PlanOptions { gemm_nr: if avx512 { 32 } else { 16 }, gemm_mr: if avx512 { 8 } else { 6 }, wide_tile: if avx512 { (6, 64) } else { (0, 0) }, row_fusion: true, conv_gemm: true, winograd: winograd.m(), two_fma, concat_in_place: true, window_lanes: if avx512 { 16 } else { 8 }, int8_dot, int8_gemm: isa == rlx_ir::loops::Int8Dot::Vnni, channels_last, ..Default::default() }
}

impl Family for Cpu {
    fn describe(&self) -> &'static str {
        "CPU targets (--target host|x86_64|aarch64)"
    }
    fn caps(&self, t: Target) -> TargetCaps {
        crate::cli::cpu_caps(t.name())
    }
    fn flags(&self) -> &'static [Flag] {
        &[Flag::Cpu, Flag::Backend, Flag::WeightsExternal, Flag::EmitIr, Flag::ExactActivations, Flag::Winograd, Flag::Layout]
    }
    fn check(&self, t: Target, r: &Request) -> Result<(), Failure> {
        cpu_of(t, r).map(|_| ())
    }
    fn quantization(&self, _t: Target) -> Quantization {
        Quantization::Never
    }
    fn coverage_column(&self, t: Target) -> bool {
        t != Target::Host
    }
    fn planning(&self, t: Target, r: &Request) -> Result<Planning, Failure> {
        Ok(Planning::Plan(plan_options(&cpu_of(t, r)?, r.exact_activations, r.winograd.unwrap_or(crate::cli::Winograd::F4), r.layout.unwrap_or(crate::cli::Layout::Auto))))
    }
    fn emit(&self, t: Target, p: Prepared, r: &Request, tm: &mut Timings) -> Result<Box<dyn Artifact>, Failure> {
        Ok(Box::new(emit(t, p, r, tm)?))
    }
    fn runs(&self, t: Target) -> bool {
        match t {
            Target::Host => true,
            Target::Aarch64 => true,
            _ => CpuTarget::host().is_ok_and(|h| cpu_target(t, None).is_ok_and(|c| c.triple() == h.triple())),
        }
    }
    fn load(&self, t: Target, mir: &Mir, r: &Request, tm: &mut Timings) -> Result<Box<dyn Session>, Failure> {
        let c = compile(t, mir, r, tm)?;
        if t == Target::Host {
            return Ok(Box::new(dlopen::Loaded::new(c, tm)?));
        }
        Ok(Box::new(harness::HarnessSession::new(c, tm)?))
    }
}

/// Everything a CPU compile produced, before it is written.
pub struct Compiled {
    pub lir: Lir,
    pub report: DispatchReport,
    pub object: Vec<u8>,
    pub target: CpuTarget,
    pub llvm_ir: Option<String>,
    pub external: bool,
    /// The artifact name (`NAME_run`).
    pub object_name: String,
    /// The graph's outputs of data-dependent length (`rlx_ir::bounded`).
    pub bounded: Vec<rlx_ir::Bounded>,
}

/// MIR → object for a CPU target (the family's script, typed). Fails listing every unsupported node.
pub fn compile(t: Target, mir: &Mir, r: &Request, tm: &mut Timings) -> Result<Compiled, Failure> {
    let p = super::prepare(t, mir, r, tm)?;
    emit(t, p, r, tm)
}

fn emit(t: Target, p: Prepared, r: &Request, tm: &mut Timings) -> Result<Compiled, Failure> {
    let cpu = cpu_of(t, r)?;
    let p_bounded = p.mir.bounded.clone();
    let lir = p.lir.ok_or_else(|| Failure::model("internal error: the CPU family plans a LIR"))?;
    let (object, llvm_ir) = codegen(&lir, &cpu, &r.name, r.external_weights, r.emit_ir, tm)?;
    Ok(Compiled { lir, report: p.report, object, target: cpu, llvm_ir, external: r.external_weights, object_name: r.name.clone(), bounded: p_bounded })
}

/// LIR → object with the chosen back end; with `emit_ir` also its IR text (LLVM IR or CLIF).
fn codegen(lir: &Lir, cpu: &CpuTarget, name: &str, external: bool, emit_ir: bool, tm: &mut Timings) -> Result<(Vec<u8>, Option<String>), Failure> {
    match cpu.backend {
        #[cfg(feature = "llvm")]
        Backend::Llvm => {
            let arch = match cpu.arch {
                Arch::X86_64 => rlx_target_llvm::Arch::X86_64,
                Arch::Aarch64 => rlx_target_llvm::Arch::Aarch64,
            };
            let target = rlx_target_llvm::CpuTarget { arch, cpu: cpu.cpu.clone(), features: cpu.features.clone() };
            let opts = rlx_target_llvm::CompileOptions { name: name.to_string(), target, external_weights: external, int8: int8_dot_isa(cpu) };
            let ir = emit_ir.then(|| rlx_target_llvm::emit_ir(lir, &opts));
            let object = tm.time("codegen (LLVM)", || rlx_target_llvm::compile(lir, &opts)).map_err(Failure::model)?;
            Ok((object, ir))
        }
        #[cfg(feature = "cranelift")]
        Backend::Cranelift => {
            use rlx_target_cranelift::Isa;
            let isa = match cpu.arch {
                Arch::Aarch64 => Isa::Aarch64,
                _ if cpu.cpu == "native" || !cpu.features.is_empty() => Isa::Host,
                _ if cpu.cpu == "x86-64" => Isa::X86_64,
                _ => Isa::X86_64V3,
            };
            let opts = rlx_target_cranelift::CompileOptions { name: name.to_string(), isa, external_weights: external };
            let ir = if emit_ir { Some(rlx_target_cranelift::emit_ir(lir, &opts).map_err(Failure::model)?) } else { None };
            let object = tm.time("codegen (Cranelift)", || rlx_target_cranelift::compile(lir, &opts)).map_err(Failure::model)?;
            Ok((object, ir))
        }
    }
}

impl Artifact for Compiled {
    fn report(&self) -> &DispatchReport {
        &self.report
    }
    fn summary(&self) -> String {
        let int8 = int8_matmuls(&self.lir);
        format!(
            "{} ({}): {} kernels, arena {} bytes, weights {} bytes{}",
            self.target.triple(),
            self.target.cpu,
            self.lir.launches.len(),
            self.lir.arena_bytes,
            self.lir.weights.len(),
            if int8 > 0 { format!(", int8 activations in {int8} matmuls (VNNI; --exact-activations keeps f32)") } else { String::new() }
        )
    }
    fn files(&self, name: &str, model: &Path) -> Result<(Vec<(String, Vec<u8>)>, serde_json::Value), Failure> {
        let c = self;
        let external = c.external;
        let rt = runtime_lib(c.target.triple()).map_err(Failure::model)?;
        let rt_bytes = std::fs::read(&rt).map_err(|e| Failure::model(format!("cannot read {}: {e}", rt.display())))?;
        let link_line = format!("cc app.c {name}.o librlx_rt.a -lpthread -ldl -lm -lrt -lutil");
        let port = |p: &rlx_ir::lir::Port| artifact::PortInfo { name: p.name.clone(), dtype: p.ty.dtype, shape: p.ty.shape.as_fixed().unwrap_or_default() };
        let info = artifact::ArtifactInfo {
            name: name.to_string(),
            inputs: c.lir.inputs.iter().map(port).collect(),
            outputs: c.lir.outputs.iter().map(port).collect(),
            arena_bytes: c.lir.arena_bytes,
            weights_bytes: c.lir.weights.len(),
            external_weights: external,
            triple: c.target.triple().to_string(),
            cpu: c.target.cpu.clone(),
            features: c.target.features.clone(),
            rlxc_version: env!("CARGO_PKG_VERSION").to_string(),
            model_file: model_file(model),
            link_line: link_line.clone(),
            state: (c.lir.state_bytes > 0).then(|| artifact::StateInfo {
                bytes: c.lir.state_bytes,
                tensors: c.lir.state.iter().map(|s| (port(&s.port), s.offset)).collect(),
            }),
            comm: c.lir.launches.iter().any(|l| matches!(l.kernel.body.as_slice(), [rlx_ir::loops::Stmt::Comm { .. }])),
            loops: c.lir.has_bounded_loop(),
            bounded: c.bounded.clone(),
        };
        let ports = |ps: &[artifact::PortInfo]| -> serde_json::Value {
            ps.iter().map(|p| serde_json::json!({"name": p.name, "dtype": p.dtype.name(), "shape": p.shape})).collect()
        };
        let report: Vec<serde_json::Value> = c
            .report
            .entries
            .iter()
            .map(|e| serde_json::json!({"node": e.node, "op": e.op, "dtype": e.dtype.name(), "resolution": e.resolution.name(), "note": e.note}))
            .collect();
        let mut dispatch = dispatch_counts(&c.report);
        dispatch["nodes"] = serde_json::Value::Array(report);
        let mut manifest = serde_json::json!({
            "name": name,
            "rlxc_version": info.rlxc_version,
            "model": info.model_file,
            "target": {"triple": info.triple, "cpu": info.cpu, "features": info.features, "backend": c.target.backend.name()},
            "inputs": ports(&info.inputs),
            "outputs": ports(&info.outputs),
            "arena_bytes": info.arena_bytes,
            "arena_align": 16,
            "weights_bytes": info.weights_bytes,
            "weights": if external { "external" } else { "embedded" },
            "kernels": c.lir.launches.len(),
            "int8_activation_matmuls": int8_matmuls(&c.lir),
            "object": {"file": format!("{name}.o"), "sha256": sha256_hex(&c.object)},
            "runtime": {"file": "librlx_rt.a", "sha256": sha256_hex(&rt_bytes)},
            "link_line": link_line,
            "dispatch": dispatch,
        });
        if !info.bounded.is_empty() {
            // Only artifacts with outputs of data-dependent length carry this key.
            let b: Vec<serde_json::Value> = info
                .bounded
                .iter()
                .map(|b| {
                    let bound = info.outputs.get(b.output as usize).and_then(|p| p.shape.get(b.axis as usize)).copied().unwrap_or(0);
                    serde_json::json!({"output": b.output, "axis": b.axis, "bound": bound, "count_output": b.count})
                })
                .collect();
            manifest["bounded"] = serde_json::Value::Array(b);
        }
        if let Some(st) = &info.state {
            // Only stateful artifacts carry these keys (a stateless manifest is unchanged).
            let tensors: Vec<serde_json::Value> = st
                .tensors
                .iter()
                .map(|(p, off)| serde_json::json!({"name": p.name, "dtype": p.dtype.name(), "shape": p.shape, "offset": off}))
                .collect();
            manifest["entry"] = serde_json::json!(format!("{name}_step"));
            manifest["state"] = serde_json::json!({"bytes": st.bytes, "align": 16, "tensors": tensors});
            if let Some((chunk, context, vocab)) = artifact::llm_step_shape(&info) {
                // "logits": "last_row": a call's logits are the chunk's last row only (tokens right-aligned).
                manifest["llm"] = serde_json::json!({"max_context": context, "max_chunk": chunk, "vocab": vocab, "logits": "last_row"});
            }
        }
        let mut files = vec![
            (format!("{name}.o"), c.object.clone()),
            (format!("{name}.h"), artifact::c_header(&info).into_bytes()),
            (format!("{name}.rs"), artifact::rust_binding(&info).into_bytes()),
            ("librlx_rt.a".to_string(), rt_bytes),
        ];
        if external {
            manifest["weights_file"] = serde_json::json!({"file": format!("{name}.weights.bin"), "sha256": sha256_hex(&c.lir.weights)});
            files.push((format!("{name}.weights.bin"), c.lir.weights.clone()));
        }
        if let Some(ir) = &c.llvm_ir {
            let ext = if c.target.backend.name() == "cranelift" { "clif" } else { "ll" };
            files.push((format!("{name}.{ext}"), ir.clone().into_bytes()));
            let mut lir_text = c.lir.to_string();
            for l in &c.lir.launches {
                lir_text.push('\n');
                lir_text.push_str(&l.kernel.to_string());
            }
            files.push((format!("{name}.lir"), lir_text.into_bytes()));
        }
        Ok((files, manifest))
    }
}

/// Matmuls planned on int8-quantized activations (each has its quantization launch, named so by
/// `rlx_opt`'s `int8_dot.rs`).
pub fn int8_matmuls(lir: &Lir) -> usize {
    lir.launches.iter().filter(|l| l.kernel.name.ends_with("(int8 activations)")).count()
}
