//! The compile pipeline as one script — import → verify → lower → fold → DCE → legalize (target
//! claim set) → plan (fusion, memory) → codegen — and the artifact writer.

use crate::artifact;
use crate::cli::{phase, problem_list, Failure, Target};
use rlx_ir::lir::Lir;
use rlx_ir::{ConstData, Mir, MirOp, TensorType};
use rlx_opt::DispatchReport;
use rlx_target_llvm::{Arch, CpuTarget};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The CPU a target name means.
pub fn cpu_target(t: Target, cpu: Option<&str>) -> Result<CpuTarget, Failure> {
    let mut c = match t {
        Target::Host => CpuTarget::host().map_err(Failure::usage)?,
        Target::X86_64 => CpuTarget { arch: Arch::X86_64, cpu: "x86-64-v3".into(), features: String::new() },
        Target::Aarch64 => CpuTarget::baseline(Arch::Aarch64),
        Target::Interp => return Err(Failure::usage("--target interp has no compiled form; use `rlxc run --target interp`")),
    };
    if let Some(cpu) = cpu {
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

/// MIR → object for a CPU target. Fails listing every unsupported node.
pub fn compile_mir(mir: &Mir, t: Target, cpu: CpuTarget, name: &str, external: bool, emit_ir: bool, tm: &mut Timings) -> Result<Compiled, Failure> {
    let folded = tm.time("fold", || rlx_opt::dce(&rlx_opt::fold(mir, &eval_op)));
    let caps = t.caps();
    let report = tm.time("legalize", || rlx_opt::report(&folded, &caps));
    if !report.is_legal() {
        let lines: Vec<String> = report
            .unsupported()
            .map(|e| format!("node '{}': {} {} on {} — {}", e.node, e.op, e.dtype, e.input_shapes.join(", "), e.note))
            .collect();
        return Err(Failure::model(problem_list(&format!("{} node(s) are unsupported on target {}", lines.len(), caps.name), &lines)));
    }
    let lir = tm
        .time("plan", || rlx_opt::plan(&folded, &rlx_opt::PlanOptions::default()))
        .map_err(|p| Failure::model(problem_list("cannot plan the model", &p)))?;
    let opts = rlx_target_llvm::CompileOptions { name: name.to_string(), target: cpu.clone(), external_weights: external };
    let llvm_ir = emit_ir.then(|| rlx_target_llvm::emit_ir(&lir, &opts));
    let object = tm.time("codegen (LLVM)", || rlx_target_llvm::compile(&lir, &opts)).map_err(Failure::model)?;
    Ok(Compiled { lir, report, object, target: cpu, llvm_ir })
}

/// Finds `librlx_rt.a` for a target triple: `$RLX_RT_DIR/<triple>/librlx_rt.a`, then the cargo layout
/// beside this executable (`target/release/` for the host, `target/<triple>/release/` for others).
pub fn runtime_lib(triple: &str) -> Result<PathBuf, String> {
    let host = rlx_target_llvm::CpuTarget::host().map(|c| c.triple().to_string()).unwrap_or_default();
    let mut tried = Vec::new();
    if let Some(d) = std::env::var_os("RLX_RT_DIR") {
        tried.push(PathBuf::from(d).join(triple).join("librlx_rt.a"));
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            if triple == host {
                tried.push(dir.join("librlx_rt.a"));
                tried.push(dir.join("../librlx_rt.a"));
            }
            // target/release/rlxc → target/<triple>/release/librlx_rt.a
            if let Some(tgt) = dir.parent() {
                tried.push(tgt.join(triple).join("release/librlx_rt.a"));
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

/// Writes `path` atomically (temp file + rename) so a failed compile never leaves half an artifact.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    let tmp = path.with_extension(format!("{}.tmp", path.extension().and_then(|e| e.to_str()).unwrap_or("")));
    std::fs::write(&tmp, bytes).map_err(|e| Failure::model(format!("cannot write {}: {e}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(|e| Failure::model(format!("cannot write {}: {e}", path.display())))
}

pub fn default_name(model: &Path) -> String {
    let stem = if model.is_dir() { model.file_name() } else { model.file_stem() };
    artifact::sanitize_ident(&stem.map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into()))
}

/// The manifest and the files, for a compiled model.
pub fn write_artifacts(dir: &Path, name: &str, model: &Path, c: &Compiled, external: bool) -> Result<Vec<PathBuf>, Failure> {
    std::fs::create_dir_all(dir).map_err(|e| Failure::usage(format!("cannot create {}: {e}", dir.display())))?;
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
        "target": {"triple": info.triple, "cpu": info.cpu, "features": info.features},
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
        files.push((dir.join(format!("{name}.ll")), ir.clone().into_bytes()));
        let mut lir_text = c.lir.to_string();
        for l in &c.lir.launches {
            lir_text.push('\n');
            lir_text.push_str(&l.kernel.to_string());
        }
        files.push((dir.join(format!("{name}.lir")), lir_text.into_bytes()));
    }
    let json = serde_json::to_string_pretty(&manifest).map_err(|e| Failure::model(e.to_string()))? + "\n";
    files.push((dir.join(format!("{name}.json")), json.into_bytes()));
    // Write everything to temp names first, then rename: all or nothing.
    for (p, b) in &files {
        write_atomic(p, b)?;
    }
    Ok(files.into_iter().map(|(p, _)| p).collect())
}

