//! The pieces every target family's script shares: the CPU a target name means, constant folding's
//! evaluator (the interpreter), phase timings, legalization with its error listing, calibration
//! samples and quantization, the runtime library's location. The script itself — the target's
//! passes → legalize → plan → its writer — is `crate::targets::compile`.

use crate::artifact;
use crate::cli::{phase, problem_list, Failure, Target};
use rlx_ir::{ConstData, Mir, MirOp, TensorType};
use rlx_opt::DispatchReport;
pub use crate::cli::Backend;
pub use crate::targets::mcu::quant_options as mcu_quant_options;
pub use crate::targets::verilog::{compile_verilog, mem_hex, write_verilog_artifacts, VerilogCompiled};
pub use crate::targets::write::{create_out_dir, write_all_or_nothing};
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

/// Finds `librlx_rt.a` for a target triple: `$RLX_RT_DIR/<triple>/librlx_rt.a`, then the cargo layout
/// beside this executable: the `rt` profile's build (`target/rt/` for the host, `target/<triple>/rt/`
/// for others: LTO, no debug info), then the plain release build; then `make install`'s
/// `PREFIX/lib/rlxc/<triple>/` beside `PREFIX/bin/rlxc`.
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
            // `make install`: PREFIX/bin/rlxc and PREFIX/lib/rlxc/<triple>/librlx_rt.a.
            if let Some(prefix) = dir.parent() {
                tried.push(prefix.join("lib/rlxc").join(triple).join("librlx_rt.a"));
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

pub fn default_name(model: &Path) -> String {
    let stem = if model.is_dir() { model.file_name() } else { model.file_stem() };
    artifact::sanitize_ident(&stem.map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into()))
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

/// [`quantize_mir`] with explicit options.
pub fn quantize_mir_with(mir: &Mir, calib: &[Vec<ConstData>], opts: &rlx_opt::QuantOptions) -> Result<rlx_opt::Quantized, Failure> {
    let folded = rlx_opt::simplify(mir, &eval_op);
    rlx_opt::quantize(&folded, calib, &run_interp, opts).map_err(|p| Failure::model(problem_list("cannot quantize the model", &p)))
}

/// An already-quantized (QDQ) model's lowered MIR → the int8 integer MIR of the MCU path, with the
/// model's own scales and zero points (`rlx_opt::quantize_qdq`; not folded first: folding would turn
/// the int8 weights into floats). Only a `quantize` of constants is folded: a float weight quantized
/// in the model (QuantizeLinear of an initializer, as a model trained quantization-aware by `rlxc
/// train` keeps its weights) becomes the int8 constant its DequantizeLinear reads.
pub fn quantize_qdq_mir(mir: &Mir) -> Result<rlx_opt::Quantized, Failure> {
    quantize_qdq_mir_with(mir, &mcu_quant_options())
}

/// [`quantize_qdq_mir`] with explicit options (the Verilog family's: weights not transposed).
pub fn quantize_qdq_mir_with(mir: &Mir, opts: &rlx_opt::QuantOptions) -> Result<rlx_opt::Quantized, Failure> {
    let mir = rlx_opt::fold_only(mir, &eval_op, &|op| matches!(op, MirOp::Quantize { .. }));
    rlx_opt::quantize_qdq(&mir, opts).map_err(|p| Failure::model(problem_list("cannot map the QDQ model onto int8 kernels", &p)))
}
