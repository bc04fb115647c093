//! Shared pieces of the command line: targets, failures and exit codes, model loading, `--dim`
//! parsing, progress spinners.

use clap::ValueEnum;
use rlx_ir::{Hir, HirOp, Mir, MirOp, TargetCaps};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// Targets this build of rlxc knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// The reference interpreter (MIR, all dtypes; the numerical oracle)
    Interp,
    /// The reference interpreter on the int8 program (--calibrate, or a QDQ model): the outputs
    /// Cortex-M and Verilog firmware must match
    #[value(name = "interp-int8")]
    InterpInt8,
    /// This machine's CPU, with all its features (LLVM)
    Host,
    /// x86-64 (LLVM; x86-64-v3 = AVX2+FMA unless --cpu)
    #[value(name = "x86_64")]
    X86_64,
    /// AArch64 Linux (LLVM; NEON)
    Aarch64,
    /// Cortex-M0+ firmware sources (C99, int8 with --calibrate)
    #[value(name = "cortex-m0plus")]
    CortexM0plus,
    /// Cortex-M3 firmware sources
    #[value(name = "cortex-m3")]
    CortexM3,
    /// Cortex-M4 firmware sources (FPU, DSP)
    #[value(name = "cortex-m4")]
    CortexM4,
    /// Cortex-M7 firmware sources
    #[value(name = "cortex-m7")]
    CortexM7,
    /// Cortex-M33 firmware sources
    #[value(name = "cortex-m33")]
    CortexM33,
    /// Cortex-M55 firmware sources
    #[value(name = "cortex-m55")]
    CortexM55,
    /// Synthesizable Verilog-2005 datapath + testbench (int8; needs --calibrate)
    Verilog,
    /// Vulkan: SPIR-V compute (NAME.spv) + schedule + weights, run by runtime-min's Vulkan executor
    Vulkan,
    /// SPIR-V compute module (the same artifact as --target vulkan)
    Spirv,
    /// WebGPU: WGSL compute source (NAME.wgsl) + schedule + weights
    Webgpu,
    /// Metal: MSL compute source (NAME.metal) + schedule + weights
    Metal,
    /// DirectX: HLSL compute source (NAME.hlsl) + schedule + weights
    Directx,
    /// OpenGL: GLSL 4.30 compute sources (NAME.kI.comp) + schedule + weights
    Opengl,
    /// CUDA: PTX (NAME.ptx, LLVM's NVPTX back end; --sm 80|86|89|90|90a) + schedule + weights, run by
    /// runtime-min's CUDA executor
    Cuda,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Interp => "interp",
            Target::InterpInt8 => "interp-int8",
            Target::Host => "host",
            Target::X86_64 => "x86_64",
            Target::Aarch64 => "aarch64",
            Target::CortexM0plus => "cortex-m0plus",
            Target::CortexM3 => "cortex-m3",
            Target::CortexM4 => "cortex-m4",
            Target::CortexM7 => "cortex-m7",
            Target::CortexM33 => "cortex-m33",
            Target::CortexM55 => "cortex-m55",
            Target::Verilog => "verilog",
            Target::Vulkan => "vulkan",
            Target::Spirv => "spirv",
            Target::Webgpu => "webgpu",
            Target::Metal => "metal",
            Target::Directx => "directx",
            Target::Opengl => "opengl",
            Target::Cuda => "cuda",
        }
    }
    /// The target's claim set (from its family).
    pub fn caps(self) -> TargetCaps {
        crate::targets::family(self).caps(self)
    }
}

/// `--target` for `rlxc run` and `rlxc bench`: only the targets with an executor.
pub fn runnable_target() -> impl clap::builder::TypedValueParser<Value = Target> {
    use clap::builder::TypedValueParser;
    let values: Vec<clap::builder::PossibleValue> = crate::targets::runnable().into_iter().filter_map(|t| t.to_possible_value()).collect();
    clap::builder::PossibleValuesParser::new(values).map(|s| Target::from_str(&s, true).unwrap_or(Target::Interp))
}

/// `rlxc --version`: the version and the native back ends built in.
#[cfg(all(feature = "llvm", feature = "cranelift"))]
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (back ends: llvm, cranelift)");
#[cfg(all(feature = "llvm", not(feature = "cranelift")))]
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (back ends: llvm)");
#[cfg(all(not(feature = "llvm"), feature = "cranelift"))]
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (back ends: cranelift)");
#[cfg(not(any(feature = "llvm", feature = "cranelift")))]
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `--winograd` of a CPU compile: the form of its dense 3×3 stride-1 convolutions over outputs of ≥ 13²
/// (with ≥ 48 output channels; `rlx_opt`'s `winograd.rs` says where each form is taken).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Winograd {
    /// the direct forms (im2col or x itself on the GEMM micro-kernel): the smallest weights and arena
    Off,
    /// F(2×2, 3×3): 2.25× fewer products, weights 16/9 their size, rounding as the direct sum's
    F2,
    /// F(4×4, 3×3) where it measured faster (≥ 28²), else F(2×2) (the default): 4× fewer products, weights 4×
    /// their size, rounding ~10× the direct sum's
    F4,
}

impl Winograd {
    /// The tile side m of the form (0: none), `rlx_opt::PlanOptions::winograd`.
    pub fn m(self) -> usize {
        match self {
            Winograd::Off => 0,
            Winograd::F2 => 2,
            Winograd::F4 => 4,
        }
    }
}

/// `--layout` of a CPU compile: the activations' layout around its convolutions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Layout {
    /// channels-last (NHWC) where the layout pass finds that it pays (the default): pointwise
    /// convolutions as matmuls, depthwise ones vectorized along the channels, the layout changed only at
    /// the edges of the region they form
    Auto,
    /// every convolution in the model's own NCHW layout
    Nchw,
}

/// `--precision` of a CUDA compile: the arithmetic of its f32 matmuls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Precision {
    /// f32 products and sums (the SIMT cores): results within 1e-4 of the interpreter on MiniLM
    F32,
    /// tensor cores: operands rounded to TF32 (10-bit mantissa), f32 accumulation
    Tf32,
    /// tensor cores: operands rounded to bfloat16 (7-bit mantissa), f32 accumulation
    Bf16,
    /// tensor cores: operands rounded to IEEE half (10-bit mantissa, range ±65504), f32 accumulation
    Fp16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Tf32 => "tf32",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
        }
    }
}

/// Native code generators built into this rlxc (cargo features `llvm` and `cranelift`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// LLVM 19 (inkwell): O2, vector loops, inline f32 exp/erf — the faster code
    #[cfg(feature = "llvm")]
    Llvm,
    /// Cranelift (pure Rust, no LLVM needed): much faster code generation, slower code (f32x4 only)
    #[cfg(feature = "cranelift")]
    Cranelift,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            #[cfg(feature = "llvm")]
            Backend::Llvm => "llvm",
            #[cfg(feature = "cranelift")]
            Backend::Cranelift => "cranelift",
        }
    }
    /// Every back end this build has, default first.
    pub fn built_in() -> Vec<Backend> {
        vec![
            #[cfg(feature = "llvm")]
            Backend::Llvm,
            #[cfg(feature = "cranelift")]
            Backend::Cranelift,
        ]
    }
}

impl Default for Backend {
    /// LLVM when built in, else Cranelift.
    fn default() -> Backend {
        Backend::built_in()[0]
    }
}

/// The claim set of the CPU targets (host, x86_64, aarch64). Both native back ends claim the same
/// set: every op kind the shared kernel lowering produces loop form for (`rlx_ir::loops::LOWERED_KINDS`).
pub fn cpu_caps(name: &str) -> TargetCaps {
    #[cfg(feature = "llvm")]
    return rlx_target_llvm::caps(name);
    #[cfg(not(feature = "llvm"))]
    return rlx_target_cranelift::caps(name);
}

/// A command's failure: the exit code and the message for stderr (empty when already printed).
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub msg: String,
}

impl Failure {
    /// Exit 2: the command line or its inputs are wrong.
    pub fn usage(msg: impl Into<String>) -> Failure {
        Failure { code: 2, msg: msg.into() }
    }
    /// Exit 1: the model is invalid or unsupported, or running it failed.
    pub fn model(msg: impl Into<String>) -> Failure {
        Failure { code: 1, msg: msg.into() }
    }
}

/// `NAME=N` for `--dim`.
pub fn parse_dim(s: &str) -> Result<(String, u64), String> {
    let (name, n) = s.split_once('=').ok_or_else(|| format!("expected NAME=N (e.g. batch=1), got '{s}'"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("expected NAME=N (e.g. batch=1), got '{s}': the name is empty"));
    }
    let n = n.trim().parse::<u64>().map_err(|_| format!("expected NAME=N (e.g. batch=1), got '{s}': '{n}' is not a non-negative integer"))?;
    Ok((name.to_string(), n))
}

/// Collects `--dim` pairs; the same name twice with different sizes is a usage error.
pub fn dims_map(dims: &[(String, u64)]) -> Result<BTreeMap<String, u64>, Failure> {
    let mut m = BTreeMap::new();
    for (k, v) in dims {
        if let Some(old) = m.insert(k.clone(), *v) {
            if old != *v {
                return Err(Failure::usage(format!("--dim {k} is given twice, as {old} and {v}")));
            }
        }
    }
    Ok(m)
}

/// What kind of model a path names.
#[derive(Clone, Debug)]
pub enum ModelSource {
    Onnx(PathBuf),
    /// A folder with config.json + model.safetensors.
    SafetensorsDir(PathBuf),
    /// A GGUF language model (llama, qwen2, qwen3, gemma3).
    Gguf(PathBuf),
    /// A Hugging Face language-model folder: config.json (`model_type` llama, qwen2, qwen3,
    /// gemma3_text) + model.safetensors or its shards.
    HfLlm(PathBuf),
}

impl ModelSource {
    pub fn from_path(p: &Path) -> Result<ModelSource, Failure> {
        let meta = std::fs::metadata(p).map_err(|e| Failure::model(format!("cannot read model '{}': {e}", p.display())))?;
        let has_weights = |d: &Path| d.join("model.safetensors").is_file() || d.join("model.safetensors.index.json").is_file();
        // A folder with config.json and safetensors: a language model by its `model_type`, else BERT.
        let st_dir = |d: &Path| -> Result<Option<ModelSource>, Failure> {
            let cfg = d.join("config.json");
            if !cfg.is_file() || !has_weights(d) {
                return Ok(None);
            }
            let text = std::fs::read_to_string(&cfg).map_err(|e| Failure::model(format!("{}: cannot read: {e}", cfg.display())))?;
            let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| Failure::model(format!("{}: not valid JSON: {e}", cfg.display())))?;
            match v.get("model_type").and_then(|t| t.as_str()) {
                // Language models, and unknown types (the language-model reader names model_type).
                Some(t) if t != "bert" => Ok(Some(ModelSource::HfLlm(d.to_path_buf()))),
                _ if d.join("model.safetensors").is_file() => Ok(Some(ModelSource::SafetensorsDir(d.to_path_buf()))),
                _ => Ok(None),
            }
        };
        if meta.is_dir() {
            if let Some(s) = st_dir(p)? {
                return Ok(s);
            }
            return Err(Failure::model(format!(
                "'{}' is a folder but not a safetensors model (it needs config.json and model.safetensors)",
                p.display()
            )));
        }
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
        let name = p.file_name().and_then(|f| f.to_str()).unwrap_or("");
        match ext.as_str() {
            "safetensors" | "json" if name == "model.safetensors" || name == "model.safetensors.index.json" => {
                let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
                st_dir(dir)?.ok_or_else(|| {
                    Failure::model(format!("'{}': a safetensors file alone has no architecture; it needs config.json beside it", p.display()))
                })
            }
            "safetensors" => Err(Failure::model(format!(
                "'{}': a safetensors file alone has no architecture; pass the folder holding config.json and model.safetensors",
                p.display()
            ))),
            "gguf" => Ok(ModelSource::Gguf(p.to_path_buf())),
            _ => Ok(ModelSource::Onnx(p.to_path_buf())),
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            ModelSource::Onnx(p) | ModelSource::SafetensorsDir(p) | ModelSource::Gguf(p) | ModelSource::HfLlm(p) => p,
        }
    }

    /// Node name → the model's op type (ONNX models; empty for weight-only checkpoints and GGUF
    /// files, whose nodes the builders name, or when the file cannot be read — the import reports
    /// that). Error messages name ops by it.
    pub fn node_op_types(&self) -> BTreeMap<String, String> {
        match self {
            ModelSource::Onnx(p) => rlx_import::onnx_summary(p).map(|s| s.node_op_types).unwrap_or_default(),
            ModelSource::SafetensorsDir(_) | ModelSource::Gguf(_) | ModelSource::HfLlm(_) => BTreeMap::new(),
        }
    }

    /// Imports the model. `dims` fixes symbolic dims by name.
    pub fn import(&self, dims: &BTreeMap<String, u64>) -> Result<Hir, Failure> {
        match self {
            ModelSource::Onnx(p) => {
                let opts = rlx_import::ImportOptions { dims: dims.clone(), bind: BTreeMap::new() };
                phase("importing", || rlx_import::load_onnx(p, &opts))
                    .map_err(|e| Failure::model(problem_list(&format!("cannot import '{}'", p.display()), &e.problems)))
            }
            ModelSource::SafetensorsDir(d) => {
                let mut hir = phase("building", || rlx_models::bert_from_dir(d))
                    .map_err(|e| Failure::model(format!("cannot build a model from '{}': {e}", d.display())))?;
                if !dims.is_empty() {
                    bind_graph_dims(&mut hir, dims);
                    let probs = rlx_ir::verify::verify(&hir);
                    if !probs.is_empty() {
                        return Err(Failure::model(problem_list(&format!("'{}' with the given --dim values is invalid", d.display()), &probs)));
                    }
                }
                Ok(hir)
            }
            ModelSource::Gguf(p) | ModelSource::HfLlm(p) => {
                let f = phase("reading the model", || rlx_models::llm::Checkpoint::open(p)).map_err(Failure::model)?;
                // `--dim context=N [--dim chunk=C]`: the stateful step (KV cache of N positions as
                // state, C tokens per call); otherwise the stateless full-sequence graph.
                if let Some(&context) = dims.get("context") {
                    if dims.contains_key("sequence") {
                        return Err(Failure::usage(
                            "--dim sequence sizes the stateless graph; a stateful artifact (--dim context=N) takes --dim chunk=C tokens per call".to_string(),
                        ));
                    }
                    let chunk = dims.get("chunk").copied().unwrap_or(1);
                    let (_, hir) = phase("building", || f.step(chunk as usize, context as usize))
                        .map_err(|e| Failure::usage(format!("cannot build a cached step from '{}': {e}", p.display())))?;
                    return Ok(hir);
                }
                if dims.contains_key("chunk") {
                    return Err(Failure::usage("--dim chunk=C needs --dim context=N (the positions the KV cache holds)".to_string()));
                }
                let (_, mut hir) = phase("building", || f.graph()).map_err(|e| Failure::model(format!("cannot build a model from '{}': {e}", p.display())))?;
                if !dims.is_empty() {
                    bind_graph_dims(&mut hir, dims);
                    let probs = rlx_ir::verify::verify(&hir);
                    if !probs.is_empty() {
                        return Err(Failure::model(problem_list(&format!("'{}' with the given --dim values is invalid", p.display()), &probs)));
                    }
                }
                Ok(hir)
            }
        }
    }
}

/// The symbolic dim names of a model's inputs (without importing the whole model for ONNX).
pub fn model_symbols(src: &ModelSource) -> Result<Vec<String>, Failure> {
    match src {
        ModelSource::Onnx(p) => {
            let s = rlx_import::onnx_summary(p).map_err(|e| Failure::model(problem_list(&format!("cannot read '{}'", p.display()), &e.problems)))?;
            let mut v: Vec<String> = s.inputs.iter().flat_map(|i| i.2.iter().filter_map(|d| match d {
                rlx_ir::Dim::Sym(n) => Some(n.clone()),
                _ => None,
            })).collect();
            v.sort();
            v.dedup();
            Ok(v)
        }
        ModelSource::SafetensorsDir(_) => Ok(src.import(&BTreeMap::new())?.input_symbols()),
        // `sequence`: the stateless graph; `context` and `chunk`: the stateful step (KV cache).
        ModelSource::Gguf(_) | ModelSource::HfLlm(_) => Ok(vec!["chunk".to_string(), "context".to_string(), "sequence".to_string()]),
    }
}

/// Substitutes fixed sizes for symbolic dims in every value type of `g`.
/// (Reshape and expand attributes name dims too: they are substituted as well.)
fn bind_graph_dims(g: &mut Hir, dims: &BTreeMap<String, u64>) {
    for v in &mut g.values {
        v.ty.shape = v.ty.shape.bind(dims);
    }
    for n in &mut g.nodes {
        if let HirOp::Prim(MirOp::Reshape { shape } | MirOp::Expand { shape }) = &mut n.op {
            *shape = rlx_ir::Shape(std::mem::take(shape)).bind(dims).0;
        }
    }
}

/// "HEAD (N problems):" followed by one indented line per problem.
pub fn problem_list<P: std::fmt::Display>(head: &str, probs: &[P]) -> String {
    let mut s = match probs.len() {
        1 => format!("{head}:"),
        n => format!("{head} ({n} problems):"),
    };
    for p in probs {
        s.push_str("\n  ");
        s.push_str(&p.to_string().replace('\n', "\n    "));
    }
    s
}

/// Lowers HIR to MIR, reporting every problem.
pub fn lower(hir: &Hir, what: &Path) -> Result<Mir, Failure> {
    phase("lowering", || rlx_opt::lower(hir))
        .map_err(|probs| Failure::model(problem_list(&format!("cannot lower '{}' to MIR", what.display()), &probs)))
}

/// Runs `f`; when stderr is a terminal and `f` takes more than a second, shows a spinner meanwhile.
pub fn phase<T>(msg: &str, f: impl FnOnce() -> T) -> T {
    use std::sync::mpsc::{channel, RecvTimeoutError};
    use std::time::Duration;
    if !std::io::stderr().is_terminal() {
        return f();
    }
    let (tx, rx) = channel::<()>();
    let msg = msg.to_string();
    let start = std::time::Instant::now();
    let spinner = std::thread::spawn(move || {
        if rx.recv_timeout(Duration::from_secs(1)) != Err(RecvTimeoutError::Timeout) {
            return;
        }
        let pb = indicatif::ProgressBar::new_spinner().with_elapsed(start.elapsed());
        if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
            pb.set_style(style);
        }
        pb.set_message(msg);
        pb.enable_steady_tick(Duration::from_millis(100));
        let _ = rx.recv();
        pb.finish_and_clear();
    });
    let r = f();
    drop(tx);
    let _ = spinner.join();
    r
}

/// Writes a pretty JSON value to stdout.
pub fn print_json(v: &serde_json::Value) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("error: cannot format JSON: {e}"),
    }
}

