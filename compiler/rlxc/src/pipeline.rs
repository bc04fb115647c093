//! The compile pipeline as one script — import → verify → lower → fold → DCE → legalize (target
//! claim set) → plan (fusion, memory) → codegen — and the artifact writer.

use crate::artifact;
use crate::cli::{phase, problem_list, Failure, Target};
use rlx_ir::lir::Lir;
use rlx_ir::{ConstData, Mir, MirOp, TensorType};
use rlx_opt::DispatchReport;
pub use crate::cli::Backend;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
}

/// What to generate code for, and with which back end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuTarget {
    pub arch: Arch,
    /// CPU name (`x86-64-v3`, `znver3`, `cortex-a72`, …; LLVM names). Cranelift uses only the
    /// distinction host / x86-64-v3 / x86-64 baseline / aarch64.
    pub cpu: String,
    /// Feature string (`+avx2,+fma`; the host's, detected).
    pub features: String,
    pub backend: Backend,
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
        #[cfg(feature = "llvm")]
        {
            let h = rlx_target_llvm::CpuTarget::host()?;
            let arch = match h.arch {
                rlx_target_llvm::Arch::X86_64 => Arch::X86_64,
                rlx_target_llvm::Arch::Aarch64 => Arch::Aarch64,
            };
            Ok(CpuTarget { arch, cpu: h.cpu, features: h.features, backend: Backend::default() })
        }
        #[cfg(not(feature = "llvm"))]
        {
            let arch = match std::env::consts::ARCH {
                "x86_64" => Arch::X86_64,
                "aarch64" => Arch::Aarch64,
                a => return Err(format!("host architecture {a} is not supported")),
            };
            #[cfg(target_arch = "x86_64")]
            let features = if std::arch::is_x86_feature_detected!("avx512f") { "+avx512f" } else { "" }.to_string();
            #[cfg(not(target_arch = "x86_64"))]
            let features = String::new();
            Ok(CpuTarget { arch, cpu: "native".into(), features, backend: Backend::default() })
        }
    }
    fn baseline(arch: Arch) -> CpuTarget {
        match arch {
            Arch::X86_64 => CpuTarget { arch, cpu: "x86-64".into(), features: String::new(), backend: Backend::default() },
            Arch::Aarch64 => CpuTarget { arch, cpu: "generic".into(), features: "+neon".into(), backend: Backend::default() },
        }
    }
}

/// The CPU a target name means (with the default back end; set `backend` to choose another).
pub fn cpu_target(t: Target, cpu: Option<&str>) -> Result<CpuTarget, Failure> {
    let mut c = match t {
        Target::Host => CpuTarget::host().map_err(Failure::usage)?,
        Target::X86_64 => CpuTarget { arch: Arch::X86_64, cpu: "x86-64-v3".into(), features: String::new(), backend: Backend::default() },
        Target::Aarch64 => CpuTarget::baseline(Arch::Aarch64),
        Target::Interp => return Err(Failure::usage("--target interp has no compiled form; use `rlxc run --target interp`")),
        t => return Err(Failure::usage(format!("--target {} writes firmware sources, not a CPU object", t.name()))),
    };
    if let Some(cpu) = cpu {
        let (arch, known) = match c.arch {
            Arch::X86_64 => ("x86-64", crate::cpus::X86_64),
            Arch::Aarch64 => ("aarch64", crate::cpus::AARCH64),
        };
        if !known.contains(&cpu) {
            let near = crate::cpus::closest(cpu, known);
            let hint = if near.is_empty() { String::new() } else { format!(" (did you mean {}?)", near.join(", ")) };
            return Err(Failure::usage(format!(
                "--cpu {cpu}: not a known {arch} processor{hint}; --target {} takes one of: {}",
                t.name(),
                known.join(" ")
            )));
        }
        c.cpu = cpu.to_string();
        if t == Target::Host {
            c.features = String::new();
        }
    }
    Ok(c)
}

/// Evaluates one op on constants with the reference interpreter (constant folding's evaluator).
pub fn eval_op(op: &MirOp, ins: &[ConstData]) -> Result<Vec<ConstData>, String> {
    let mut g = Mir::new();
    let vs: Vec<_> = ins.iter().map(|c| g.add_input("", TensorType::fixed(c.dtype, &c.shape))).collect();
    g.outputs = g.add_node("fold", op.clone(), &vs)?;
    rlx_interp::run(&g, ins).map_err(|e| e.to_string())
}

/// Per-phase wall times.
#[derive(Default)]
pub struct Timings(pub Vec<(&'static str, Duration)>);

impl Timings {
    pub fn time<T>(&mut self, name: &'static str, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let r = phase(name, f);
        self.0.push((name, t.elapsed()));
        r
    }
}

/// Everything a compile produced, before it is written.
pub struct Compiled {
    pub lir: Lir,
    pub report: DispatchReport,
    pub object: Vec<u8>,
    pub target: CpuTarget,
    pub llvm_ir: Option<String>,
}

/// Planning parameters for a CPU: GEMM panels are two vectors wide (AVX-512: 32 f32 lanes; AVX2 and
/// NEON: 16).
pub fn plan_options(cpu: &CpuTarget) -> rlx_opt::PlanOptions {
    let avx512 = cpu.features.split(',').any(|f| f == "+avx512f")
        || ["skylake-avx512", "icelake-server", "sapphirerapids", "znver4", "znver5", "x86-64-v4"].contains(&cpu.cpu.as_str());
    // AVX-512: 8 rows × 2 zmm = 16 accumulators (measured on MiniLM: 8 beats 6 and 12 by 4–5%).
    // Row fusion: softmax and LayerNorm in one or two kernels each (MiniLM: 171 launches → 100).
    rlx_opt::PlanOptions { gemm_nr: if avx512 { 32 } else { 16 }, gemm_mr: if avx512 { 8 } else { 6 }, row_fusion: true, ..Default::default() }
}

/// The dispatch report of `mir` on `caps`, or a failure listing every unsupported node (name, op,
/// dtype, input shapes, what would make it legal). Every compile path goes through here.
pub fn legalize(mir: &Mir, caps: &rlx_ir::TargetCaps, tm: &mut Timings) -> Result<DispatchReport, Failure> {
    let report = tm.time("legalize", || rlx_opt::report(mir, caps));
    if report.is_legal() {
        return Ok(report);
    }
    let lines: Vec<String> = report
        .unsupported()
        .map(|e| format!("node '{}': {} {} on {} — {}", e.node, e.op, e.dtype, e.input_shapes.join(", "), e.note))
        .collect();
    Err(Failure::model(problem_list(&format!("{} node(s) are unsupported on target {}", lines.len(), caps.name), &lines)))
}

/// MIR → object for a CPU target. Fails listing every unsupported node.
pub fn compile_mir(mir: &Mir, t: Target, cpu: CpuTarget, name: &str, external: bool, emit_ir: bool, tm: &mut Timings) -> Result<Compiled, Failure> {
    let folded = tm.time("fold", || rlx_opt::simplify(mir, &eval_op));
    let report = legalize(&folded, &t.caps(), tm)?;
    let lir = tm
        .time("plan", || rlx_opt::plan(&folded, &plan_options(&cpu)))
        .map_err(|p| Failure::model(problem_list("cannot plan the model", &p)))?;
    let (object, llvm_ir) = codegen(&lir, &cpu, name, external, emit_ir, tm)?;
    Ok(Compiled { lir, report, object, target: cpu, llvm_ir })
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
            let opts = rlx_target_llvm::CompileOptions { name: name.to_string(), target, external_weights: external };
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

/// Finds `librlx_rt.a` for a target triple: `$RLX_RT_DIR/<triple>/librlx_rt.a`, then the cargo layout
/// beside this executable: the `rt` profile's build (`target/rt/` for the host, `target/<triple>/rt/`
/// for others: LTO, no debug info), then the plain release build.
pub fn runtime_lib(triple: &str) -> Result<PathBuf, String> {
    let host = CpuTarget::host().map(|c| c.triple().to_string()).unwrap_or_default();
    let mut tried = Vec::new();
    if let Some(d) = std::env::var_os("RLX_RT_DIR") {
        tried.push(PathBuf::from(d).join(triple).join("librlx_rt.a"));
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            // target/release/rlxc (or target/release/deps/… in tests) → target/rt, target/<triple>/rt
            let tgt = dir.parent().map(|t| if dir.ends_with("deps") { t.parent().unwrap_or(t) } else { t });
            for profile in ["rt", "release"] {
                if let Some(tgt) = tgt {
                    if triple == host {
                        tried.push(tgt.join(profile).join("librlx_rt.a"));
                    }
                    tried.push(tgt.join(triple).join(profile).join("librlx_rt.a"));
                }
            }
            if triple == host {
                tried.push(dir.join("librlx_rt.a"));
            }
        }
    }
    tried.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        format!(
            "the runtime library librlx_rt.a for {triple} was not found (looked at: {}); build it with `make setup` or set RLX_RT_DIR",
            tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        )
    })
}

fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

pub fn default_name(model: &Path) -> String {
    let stem = if model.is_dir() { model.file_name() } else { model.file_stem() };
    artifact::sanitize_ident(&stem.map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into()))
}

/// The manifest and the files, for a compiled model.
pub fn write_artifacts(dir: &Path, name: &str, model: &Path, c: &Compiled, external: bool) -> Result<Vec<PathBuf>, Failure> {
    create_out_dir(dir)?;
    let rt = runtime_lib(c.target.triple()).map_err(Failure::model)?;
    let rt_bytes = std::fs::read(&rt).map_err(|e| Failure::model(format!("cannot read {}: {e}", rt.display())))?;
    let link_line = format!("cc app.c {name}.o librlx_rt.a -lpthread -ldl -lm -lrt -lutil");
    let port = |p: &rlx_ir::lir::Port| artifact::PortInfo {
        name: p.name.clone(),
        dtype: p.ty.dtype,
        shape: p.ty.shape.as_fixed().unwrap_or_default(),
    };
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
        model_file: model.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        link_line: link_line.clone(),
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
        "object": {"file": format!("{name}.o"), "sha256": sha256_hex(&c.object)},
        "runtime": {"file": "librlx_rt.a", "sha256": sha256_hex(&rt_bytes)},
        "link_line": link_line,
        "dispatch": {
            "native": c.report.count(rlx_opt::Resolution::Native),
            "common_ir": c.report.count(rlx_opt::Resolution::CommonIr),
            "rewritten": c.report.count(rlx_opt::Resolution::Rewritten),
            "unsupported": c.report.count(rlx_opt::Resolution::Unsupported),
            "nodes": report,
        },
    });
    let mut files = vec![
        (dir.join(format!("{name}.o")), c.object.clone()),
        (dir.join(format!("{name}.h")), artifact::c_header(&info).into_bytes()),
        (dir.join(format!("{name}.rs")), artifact::rust_binding(&info).into_bytes()),
        (dir.join("librlx_rt.a"), rt_bytes),
    ];
    if external {
        manifest["weights_file"] = serde_json::json!({"file": format!("{name}.weights.bin"), "sha256": sha256_hex(&c.lir.weights)});
        files.push((dir.join(format!("{name}.weights.bin")), c.lir.weights.clone()));
    }
    if let Some(ir) = &c.llvm_ir {
        let ext = if c.target.backend.name() == "cranelift" { "clif" } else { "ll" };
        files.push((dir.join(format!("{name}.{ext}")), ir.clone().into_bytes()));
        let mut lir_text = c.lir.to_string();
        for l in &c.lir.launches {
            lir_text.push('\n');
            lir_text.push_str(&l.kernel.to_string());
        }
        files.push((dir.join(format!("{name}.lir")), lir_text.into_bytes()));
    }
    let json = serde_json::to_string_pretty(&manifest).map_err(|e| Failure::model(e.to_string()))? + "\n";
    files.push((dir.join(format!("{name}.json")), json.into_bytes()));
    write_all_or_nothing(files)
}


/// Creates the output folder `-o DIR` (and its parents). A path that cannot be a folder (a file is
/// there, no permission) is the command line's fault: exit 2, the same for every target.
pub fn create_out_dir(dir: &Path) -> Result<(), Failure> {
    std::fs::create_dir_all(dir).map_err(|e| Failure::usage(format!("cannot create the output folder {}: {e}", dir.display())))
}

/// Writes every file of an artifact or none: all contents go to temporary names first, then are
/// renamed. On a failure the temporaries are removed, and so are files already renamed in this call,
/// so a failed compile never leaves half an artifact.
pub fn write_all_or_nothing(files: Vec<(PathBuf, Vec<u8>)>) -> Result<Vec<PathBuf>, Failure> {
    let tmp_of = |p: &Path| p.with_file_name(format!(".{}.rlxc-tmp", p.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()));
    let cleanup = |upto: usize| {
        for (p, _) in &files[..upto] {
            let _ = std::fs::remove_file(tmp_of(p));
        }
    };
    for (i, (p, b)) in files.iter().enumerate() {
        if let Err(e) = std::fs::write(tmp_of(p), b) {
            cleanup(i + 1);
            return Err(Failure::model(format!("cannot write {}: {e}", p.display())));
        }
    }
    for (i, (p, _)) in files.iter().enumerate() {
        if let Err(e) = std::fs::rename(tmp_of(p), p) {
            cleanup(files.len());
            for (q, _) in &files[..i] {
                let _ = std::fs::remove_file(q);
            }
            return Err(Failure::model(format!("cannot write {}: {e}", p.display())));
        }
    }
    Ok(files.into_iter().map(|(p, _)| p).collect())
}

/// Memory limits for an MCU compile (bytes).
#[derive(Clone, Copy, Debug, Default)]
pub struct Budgets {
    pub ram: Option<usize>,
    pub flash: Option<usize>,
}

/// Everything an MCU compile produced, before it is written.
pub struct McuCompiled {
    pub lir: Lir,
    pub report: DispatchReport,
    pub sources: rlx_target_mcu::Sources,
    pub core: rlx_target_mcu::Core,
    /// Port parameters when the model was quantized.
    pub quant: Option<(Vec<rlx_opt::QParams>, Vec<rlx_opt::QParams>)>,
    /// `--emit rust`: the no_std Rust source (then NAME.rs is written instead of NAME.c / NAME.h).
    pub rust: Option<rlx_target_mcu::RustSource>,
    /// Arena bytes of each operator order the planner tried, and the one kept.
    pub order: rlx_opt::OrderReport,
}

/// Runs a whole graph with the reference interpreter (calibration's runner).
pub fn run_interp(g: &Mir, ins: &[ConstData]) -> Result<Vec<ConstData>, String> {
    rlx_interp::run(g, ins).map_err(|e| e.to_string())
}

/// Splits a calibration array `[N, ...input shape]` (or one sample of the input shape) into samples.
pub fn calibration_samples(data: &ConstData, input: &TensorType) -> Result<Vec<Vec<ConstData>>, String> {
    let shape = input.shape.as_fixed().ok_or("the input shape must be fixed")?;
    if data.dtype != rlx_ir::DType::F32 {
        return Err(format!("calibration data must be float32, got {}", data.dtype));
    }
    let per: usize = shape.iter().product();
    let n = if data.shape == shape { 1 } else { data.shape.first().copied().unwrap_or(0) };
    if n == 0 || data.numel() != n * per {
        return Err(format!("calibration data {:?} is neither {shape:?} nor [N, {}]", data.shape, shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")));
    }
    // Quantization derives each tensor's range from these samples: a NaN or infinity would poison
    // every scale, and data with no spread (all one value) gives no range to quantize over.
    let vals = data.to_f64_vec();
    if let Some(i) = vals.iter().position(|v| !v.is_finite()) {
        return Err(format!("calibration data holds {} at sample {}, element {} (flat index {i}): quantization needs finite values", vals[i], i / per, i % per));
    }
    let (lo, hi) = vals.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| (l.min(v), h.max(v)));
    if lo == hi {
        return Err(format!("calibration data is {lo} everywhere ({n} sample(s)): it gives no range to quantize over; pass real inputs"));
    }
    let b = data.data.bytes();
    Ok((0..n)
        .map(|i| vec![ConstData { dtype: data.dtype, shape: shape.clone(), data: rlx_ir::Blob::from_vec(b[i * per * 4..(i + 1) * per * 4].to_vec()) }])
        .collect())
}

/// Quantizes a folded f32 MIR with calibration samples (the interpreter runs the calibration).
pub fn quantize_mir(mir: &Mir, calib: &[Vec<ConstData>]) -> Result<rlx_opt::Quantized, Failure> {
    quantize_mir_with(mir, calib, &rlx_opt::QuantOptions::default())
}

/// The quantization options of the MCU path: matmul weights stored `[N, K]` (contiguous per output
/// channel, for the dual-MAC inner loops).
pub fn mcu_quant_options() -> rlx_opt::QuantOptions {
    rlx_opt::QuantOptions { transpose_matmul_weights: true, ..Default::default() }
}

/// [`quantize_mir`] with explicit options.
pub fn quantize_mir_with(mir: &Mir, calib: &[Vec<ConstData>], opts: &rlx_opt::QuantOptions) -> Result<rlx_opt::Quantized, Failure> {
    let folded = rlx_opt::simplify(mir, &eval_op);
    rlx_opt::quantize(&folded, calib, &run_interp, opts).map_err(|p| Failure::model(problem_list("cannot quantize the model", &p)))
}

/// An already-quantized (QDQ) model's lowered MIR → the int8 integer MIR of the MCU path, with the
/// model's own scales and zero points (`rlx_opt::quantize_qdq`; not folded first: folding would turn
/// the int8 weights into floats).
pub fn quantize_qdq_mir(mir: &Mir) -> Result<rlx_opt::Quantized, Failure> {
    rlx_opt::quantize_qdq(mir, &mcu_quant_options()).map_err(|p| Failure::model(problem_list("cannot map the QDQ model onto int8 kernels", &p)))
}

/// MIR → C sources for a Cortex-M core: fold → quantize (with calibration data; a QDQ model without it,
/// with its own parameters) → legalize → plan →
/// budgets → write C. Fails listing every unsupported node, or the largest buffers over a budget.
/// With `rust`, the program is also written as no_std Rust (`--emit rust`).
pub fn compile_mcu(mir: &Mir, t: Target, name: &str, calib: Option<&[Vec<ConstData>]>, budgets: Budgets, rust: bool, tm: &mut Timings) -> Result<McuCompiled, Failure> {
    let core = t.mcu_core().ok_or_else(|| Failure::usage(format!("{} is not an MCU target", t.name())))?;
    let qdq = rlx_opt::is_qdq(mir);
    let (mir, quant) = match calib {
        Some(_) if qdq => {
            return Err(Failure::usage(
                "the model is already quantized (QuantizeLinear / DequantizeLinear): compile it without --calibrate, with its own scales and zero points",
            ))
        }
        Some(c) => {
            let q = tm.time("quantize", || quantize_mir_with(mir, c, &mcu_quant_options()))?;
            (q.mir, Some((q.inputs, q.outputs)))
        }
        None if qdq => {
            let q = tm.time("quantize (QDQ)", || quantize_qdq_mir(mir))?;
            (q.mir, Some((q.inputs, q.outputs)))
        }
        None => (tm.time("fold", || rlx_opt::simplify(mir, &eval_op)), None),
    };
    let report = legalize(&mir, &t.caps(), tm)?;
    // Several operator orders; the plan with the smallest arena is kept (rlx_opt::order).
    let (lir, order) = tm
        .time("plan", || rlx_opt::plan_min_arena(&mir, &rlx_opt::PlanOptions { align: 8, ..Default::default() }))
        .map_err(|p| Failure::model(problem_list("cannot plan the model", &p)))?;
    let pq = |q: &rlx_opt::QParams| Some(rlx_target_mcu::PortQuant { scale: q.scale, zero_point: q.zero_point });
    let opts = rlx_target_mcu::Options {
        name: name.to_string(),
        core,
        inputs: quant.as_ref().map(|q| q.0.iter().map(pq).collect()).unwrap_or_default(),
        outputs: quant.as_ref().map(|q| q.1.iter().map(pq).collect()).unwrap_or_default(),
        rlxc_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let sources = tm.time("codegen (C)", || rlx_target_mcu::emit_c(&lir, &opts)).map_err(Failure::model)?;
    check_budgets(&lir, &sources, budgets)?;
    let rust = match rust {
        true => Some(tm.time("codegen (Rust)", || rlx_target_mcu::emit_rust(&lir, &opts)).map_err(Failure::model)?),
        false => None,
    };
    Ok(McuCompiled { lir, report, sources, core, quant, rust, order })
}

/// Fails when the arena (RAM) or the weights (flash) exceed a budget, naming the largest buffers.
fn check_budgets(lir: &Lir, s: &rlx_target_mcu::Sources, b: Budgets) -> Result<(), Failure> {
    use rlx_ir::lir::Base;
    let mut problems = Vec::new();
    for (what, used, budget, base) in [("RAM (arena)", s.arena_bytes, b.ram, Base::Arena), ("flash (weights)", s.weights_bytes, b.flash, Base::Weights)] {
        let Some(budget) = budget else { continue };
        if used <= budget {
            continue;
        }
        let mut bufs: Vec<_> = lir.buffers.iter().filter(|x| x.base == base).collect();
        bufs.sort_by(|x, y| y.bytes().cmp(&x.bytes()).then(x.offset.cmp(&y.offset)));
        bufs.dedup_by(|x, y| x.offset == y.offset && x.bytes() == y.bytes());
        let largest: Vec<String> = bufs.iter().take(5).map(|x| format!("{} bytes: '{}' {}{:?}", x.bytes(), x.label, x.dtype, x.shape)).collect();
        problems.push(format!("{what}: needs {used} bytes, budget {budget} (over by {}); largest buffers: {}", used - budget, largest.join("; ")));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Failure::model(problem_list("the plan does not fit the memory budget", &problems)))
    }
}

/// Writes `NAME.c`, `NAME.h` and the manifest `NAME.json` of an MCU compile.
pub fn write_mcu_artifacts(dir: &Path, name: &str, model: &Path, c: &McuCompiled) -> Result<Vec<PathBuf>, Failure> {
    create_out_dir(dir)?;
    let port = |p: &rlx_ir::lir::Port, q: Option<&rlx_opt::QParams>| {
        let mut v = serde_json::json!({"name": p.name, "dtype": p.ty.dtype.name(), "shape": p.ty.shape.as_fixed().unwrap_or_default()});
        if let Some(q) = q {
            v["scale"] = serde_json::json!(q.scale);
            v["zero_point"] = serde_json::json!(q.zero_point);
        }
        v
    };
    let ins: Vec<_> = c.lir.inputs.iter().enumerate().map(|(i, p)| port(p, c.quant.as_ref().map(|q| &q.0[i]))).collect();
    let outs: Vec<_> = c.lir.outputs.iter().enumerate().map(|(i, p)| port(p, c.quant.as_ref().map(|q| &q.1[i]))).collect();
    let manifest = serde_json::json!({
        "name": name,
        "rlxc_version": env!("CARGO_PKG_VERSION"),
        "model": model.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        "target": {"core": c.core.name(), "gcc_flags": c.core.gcc_flags()},
        "quantized": c.quant.is_some(),
        "inputs": ins,
        "outputs": outs,
        "arena_bytes": c.sources.arena_bytes,
        "weights_bytes": c.sources.weights_bytes,
        "kernels": c.lir.launches.len(),
        "arena_by_order": {
            "tried": c.order.tried.iter().map(|(n, b)| serde_json::json!({"order": n, "arena_bytes": b})).collect::<Vec<_>>(),
            "chosen": c.order.chosen_name(),
        },
        "sources": match &c.rust {
            Some(r) => serde_json::json!({"rs": {"file": format!("{name}.rs"), "sha256": sha256_hex(r.rs.as_bytes()), "proven_accesses": r.proven_accesses, "checked_accesses": r.checked_accesses}}),
            None => serde_json::json!({"c": {"file": format!("{name}.c"), "sha256": sha256_hex(c.sources.c.as_bytes())}, "h": {"file": format!("{name}.h"), "sha256": sha256_hex(c.sources.h.as_bytes())}}),
        },
        "dispatch": {
            "native": c.report.count(rlx_opt::Resolution::Native),
            "common_ir": c.report.count(rlx_opt::Resolution::CommonIr),
            "rewritten": c.report.count(rlx_opt::Resolution::Rewritten),
            "unsupported": c.report.count(rlx_opt::Resolution::Unsupported),
        },
    });
    let json = serde_json::to_string_pretty(&manifest).map_err(|e| Failure::model(e.to_string()))? + "\n";
    let files = match &c.rust {
        Some(r) => vec![(dir.join(format!("{name}.rs")), r.rs.clone().into_bytes()), (dir.join(format!("{name}.json")), json.into_bytes())],
        None => vec![
            (dir.join(format!("{name}.c")), c.sources.c.clone().into_bytes()),
            (dir.join(format!("{name}.h")), c.sources.h.clone().into_bytes()),
            (dir.join(format!("{name}.json")), json.into_bytes()),
        ],
    };
    write_all_or_nothing(files)
}

/// Everything a Verilog compile produced, before it is written.
pub struct VerilogCompiled {
    pub report: DispatchReport,
    pub design: rlx_target_verilog::Design,
    pub macs_per_cycle: usize,
    pub input: rlx_opt::QParams,
    pub output: rlx_opt::QParams,
    /// Testbench vectors from the calibration samples: int8 inputs and the interpreter's int8 outputs.
    pub tb_in: Vec<u8>,
    pub tb_expected: Vec<u8>,
}

/// MIR → Verilog: fold → quantize (the same pass and runner as the MCU path, so the integer program
/// is the one the interpreter and the firmware run) → the datapath check → legalize → the Verilog
/// writer. Nodes the datapath does not map fail the compile, every one named with its op type from
/// `source_ops` (node name → the model's op type, `ModelSource::node_op_types`). The calibration
/// samples, quantized and run through the interpreter on the integer MIR, become the testbench's
/// default vectors.
pub fn compile_verilog(
    mir: &Mir,
    name: &str,
    calib: &[Vec<ConstData>],
    macs_per_cycle: usize,
    source_ops: &BTreeMap<String, String>,
    tm: &mut Timings,
) -> Result<VerilogCompiled, Failure> {
    let q = tm.time("quantize", || quantize_mir(mir, calib))?;
    // Lowered blocks and quantized layers extend their node's name (`sm0/exp`, `pool.sum`): the
    // model node is the longest prefix ending before a '/' or '.' that the model names (ONNX names
    // may hold '/' and '.' themselves).
    let source = |mir_node: &str| -> Option<(String, String)> {
        let mut name = mir_node;
        loop {
            if let Some(op) = source_ops.get(name) {
                return Some((name.to_string(), op.clone()));
            }
            name = &name[..name.rfind(['/', '.'])?];
        }
    };
    rlx_target_verilog::unsupported(&q.mir, &source).map_err(Failure::model)?;
    let report = legalize(&q.mir, &Target::Verilog.caps(), tm)?;
    let (qi, qo) = (q.inputs[0], q.outputs[0]);
    let pq = |q: rlx_opt::QParams| rlx_target_verilog::PortQuant { scale: q.scale, zero_point: q.zero_point };
    let opts = rlx_target_verilog::Options { name: name.to_string(), macs_per_cycle, input: pq(qi), output: pq(qo), rlxc_version: env!("CARGO_PKG_VERSION").to_string(), testbench_vectors: calib.len() };
    let design = tm.time("codegen (Verilog)", || rlx_target_verilog::emit(&q.mir, &opts)).map_err(Failure::model)?;
    let (mut tb_in, mut tb_expected) = (Vec::new(), Vec::new());
    tm.time("testbench vectors", || -> Result<(), Failure> {
        let scale = ConstData::from_f32(vec![], &[qi.scale]);
        let zp = ConstData::scalar(rlx_ir::DType::I8, qi.zero_point as f64);
        for s in calib {
            let x = eval_op(&MirOp::Quantize { axis: 0 }, &[s[0].clone(), scale.clone(), zp.clone()]).map_err(Failure::model)?.remove(0);
            let y = run_interp(&q.mir, std::slice::from_ref(&x)).map_err(Failure::model)?.remove(0);
            tb_in.extend_from_slice(x.data.bytes());
            tb_expected.extend_from_slice(y.data.bytes());
        }
        Ok(())
    })?;
    Ok(VerilogCompiled { report, design, macs_per_cycle, input: qi, output: qo, tb_in, tb_expected })
}

/// int8 bytes as a `$readmemh` file: two hex digits a line.
pub fn mem_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 3);
    for b in bytes {
        s.push_str(&format!("{b:02x}\n"));
    }
    s
}

/// Writes `NAME.v`, `NAME_tb.v`, the ROM images, the testbench vectors and the manifest `NAME.json`.
pub fn write_verilog_artifacts(dir: &Path, name: &str, model: &Path, c: &VerilogCompiled) -> Result<Vec<PathBuf>, Failure> {
    create_out_dir(dir)?;
    let d = &c.design;
    let mut files: Vec<(PathBuf, Vec<u8>)> = vec![
        (dir.join(format!("{name}.v")), d.verilog.clone().into_bytes()),
        (dir.join(format!("{name}_tb.v")), d.testbench.clone().into_bytes()),
        (dir.join(format!("{name}_weights.mem")), d.weights_mem.clone().into_bytes()),
        (dir.join(format!("{name}_qparams.mem")), d.qparams_mem.clone().into_bytes()),
        (dir.join(format!("{name}_tb_in.mem")), mem_hex(&c.tb_in).into_bytes()),
        (dir.join(format!("{name}_tb_expected.mem")), mem_hex(&c.tb_expected).into_bytes()),
    ];
    let sources: serde_json::Map<String, serde_json::Value> = files
        .iter()
        .map(|(p, b)| (p.file_name().unwrap().to_string_lossy().into_owned(), serde_json::json!(sha256_hex(b))))
        .collect();
    let port = |n: usize, q: &rlx_opt::QParams| serde_json::json!({"dtype": "i8", "elems": n, "scale": q.scale, "zero_point": q.zero_point});
    let manifest = serde_json::json!({
        "name": name,
        "rlxc_version": env!("CARGO_PKG_VERSION"),
        "model": model.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        "target": "verilog",
        "macs_per_cycle": c.macs_per_cycle,
        "cycles_per_inference": d.cycles,
        "layers": d.layers.iter().map(|l| serde_json::json!({"node": l.node, "in": l.k, "out": l.n})).collect::<Vec<_>>(),
        "input": port(d.in_elems, &c.input),
        "output": port(d.out_elems, &c.output),
        "memories": {"activation_ram_bytes": d.act_bytes, "weight_rom_bits": d.weight_rom_bits, "qparam_rom_bits": d.qparam_rom_bits},
        "testbench_vectors": c.tb_in.len() / d.in_elems.max(1),
        "sha256": sources,
        "dispatch": {
            "native": c.report.count(rlx_opt::Resolution::Native),
            "common_ir": c.report.count(rlx_opt::Resolution::CommonIr),
            "rewritten": c.report.count(rlx_opt::Resolution::Rewritten),
            "unsupported": c.report.count(rlx_opt::Resolution::Unsupported),
        },
    });
    let json = serde_json::to_string_pretty(&manifest).map_err(|e| Failure::model(e.to_string()))? + "\n";
    files.push((dir.join(format!("{name}.json")), json.into_bytes()));
    write_all_or_nothing(files)
}
