//! `rlxc run`: run a model on .npy inputs with the target's executor (`rlxc::targets::load`) and
//! write .npy outputs. The model and input handling here is shared with `rlxc bench`.

use crate::{phase, Failure, ModelSource, Target};
use rlx_ir::{ConstData, DType, Dim, Hir, Mir, Shape};
use rlxc::npy;
use rlxc::pipeline::Timings;
use rlxc::targets::{self, Request};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The long `--help` text.
pub const LONG_ABOUT: &str = "Run a model on .npy inputs and write one .npy file per output (DIR/<output name>.npy, with \
        characters unsafe in file names replaced by '_'), then print each output's dtype, shape, min, max \
        and mean, and the time taken.\n\n\
        Every model input needs exactly one --input. Symbolic dims (batch, sequence, …) are bound from the \
        input shapes; --dim fixes them explicitly.\n\n\
        .npy files: format 1.0/2.0/3.0, C order, little-endian f4 f8 f2 i1 i2 i4 i8 u1 u2 u4 u8 b1.\n\n\
        Targets: interp (the reference interpreter), interp-int8 (the interpreter on the int8 program: \
        --calibrate data.npy, or a QDQ model — the reference a firmware's outputs must equal), host \
        (compiled, linked into a shared object and loaded), x86_64 and aarch64 (linked with a small \
        harness; aarch64 runs under qemu-aarch64), vulkan/spirv (runtime-min's Vulkan executor), cuda \
        (runtime-min's CUDA executor; needs an NVIDIA driver), cortex-m* (int8 firmware built with arm-none-eabi-gcc, run in qemu-system-arm; --board picks \
        the QEMU board), verilog (Icarus simulation of the int8 datapath; cycles reported). Float inputs \
        of an int8 target are quantized with its input's scale and zero point; its outputs are written \
        as int8. The time of each phase (import, lower, compile, link/build/setup, run) is printed apart.\n\n\
        Language models (MODEL.gguf, or a Hugging Face folder whose config.json says model_type llama, qwen2, \
        qwen3 or gemma3_text, with model.safetensors or its shards) take a prompt instead of inputs: --prompt \
        TEXT (GGUF only: tokenized with the file's own vocabulary; the generated text streams to stdout, prefill and decode tokens/s go \
        to stderr) or --tokens ID,ID,… (generated ids to stdout; without -n, the prompt's logits at every \
        position to DIR/logits.npy). Generation stops after -n tokens, at an end-of-generation token or a \
        full context. --temperature 0 (the default) is greedy; above 0, top-k, then top-p, then the \
        temperature, then a draw seeded by --seed (the same seed gives the same text). A language model \
        runs as the stateful KV-cache artifact compiled for this CPU (--dim context=N, --dim chunk=C) when \
        rlxc has the LLVM back end, else, and with --target interp, on the interpreter.";

#[derive(clap::Args)]
pub struct RunArgs {
    /// The model: an ONNX file, a folder with config.json + model.safetensors (BERT, or a llama/qwen2/
    /// qwen3/gemma3_text language model: the folder or its model.safetensors), or a GGUF language model
    pub model: PathBuf,
    /// A model input: NAME=FILE.npy (repeat once per model input)
    #[arg(long = "input", short = 'i', value_name = "NAME=FILE.npy", value_parser = parse_input)]
    pub inputs: Vec<(String, PathBuf)>,
    /// Folder for the output .npy files (created if missing)
    #[arg(short = 'o', long = "out-dir", value_name = "DIR", default_value = ".")]
    pub out: PathBuf,
    #[command(flatten)]
    pub on: On,
    /// GGUF language models: the prompt as text, tokenized with the model's own vocabulary (BOS as
    /// its metadata says; special tokens such as <start_of_turn> are parsed); the generated text is
    /// streamed to stdout, prefill and decode tokens/s to stderr
    #[arg(long, value_name = "TEXT", conflicts_with = "tokens")]
    pub prompt: Option<String>,
    /// GGUF language models: the prompt as token ids, e.g. --tokens 2,651,6037. With -n N, prints
    /// the N generated ids; without, writes the prompt's logits to OUT_DIR/logits.npy and prints the
    /// next token at every position
    #[arg(long, value_name = "ID,ID,…", value_delimiter = ',')]
    pub tokens: Vec<i64>,
    /// GGUF language models: generate at most N tokens (stops earlier at an end-of-generation token
    /// or a full context) [default: 64 with --prompt, 0 with --tokens]
    #[arg(short = 'n', long = "max-tokens", value_name = "N")]
    pub max_tokens: Option<usize>,
    /// GGUF language models: sampling temperature; 0 is greedy (the first largest logit) [default: 0]
    #[arg(long, value_name = "T", allow_negative_numbers = true)]
    pub temperature: Option<f32>,
    /// GGUF language models, temperature > 0: sample among the K largest logits; 0 = all [default: 40]
    #[arg(long, value_name = "K", allow_negative_numbers = true)]
    pub top_k: Option<usize>,
    /// GGUF language models, temperature > 0: sample among the most probable tokens whose
    /// probabilities reach P, in (0, 1]; 1 = all [default: 0.95]
    #[arg(long, value_name = "P", allow_negative_numbers = true)]
    pub top_p: Option<f32>,
    /// GGUF language models, temperature > 0: the sampler's seed; the same seed gives the same
    /// tokens [default: 0]
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    /// GGUF language models: also print the prompt's and the generated token ids (stderr)
    #[arg(long)]
    pub show_ids: bool,
    /// Run the model sharded (tp=N or pp=N): with --target interp every rank in this process (the
    /// oracle); with --target host one rank per process under `mpirun -np N`, over MPI_COMM_WORLD;
    /// with --target cuda one rank per GPU (rank % devices), over NCCL (the rank that computes every
    /// output writes them)
    #[arg(long, value_name = "tp=N|pp=N", value_parser = rlxc::shard::parse)]
    pub shard: Option<rlxc::shard::Shard>,
}

/// Where a model runs: the flags `rlxc run` and `rlxc bench` share.
#[derive(clap::Args)]
pub struct On {
    /// Where to run the model (only targets with an executor are listed) [default: interp; for a
    /// GGUF language model, host when the LLVM back end is built in]
    #[arg(long, value_parser = rlxc::cli::runnable_target())]
    pub target: Option<Target>,
    /// Native code generator for CPU targets: llvm (default when built in) or cranelift
    #[arg(long, value_enum)]
    pub backend: Option<rlxc::cli::Backend>,
    /// Fix a symbolic dim by name, e.g. --dim batch=1 (repeatable; normally bound from the inputs)
    #[arg(long = "dim", value_name = "NAME=N", value_parser = crate::parse_dim)]
    pub dims: Vec<(String, u64)>,
    /// int8 targets (cortex-m*, verilog, interp-int8): quantize with these calibration inputs (.npy,
    /// float32, [N, ...input shape])
    #[arg(long, value_name = "NPY")]
    pub calibrate: Option<PathBuf>,
    /// cortex-m*: the QEMU board the firmware runs on (default: the core's first board)
    #[arg(long, value_name = "NAME")]
    pub board: Option<String>,
    /// CPU targets: keep f32 activations in block-quantized matmuls (no int8 dot products; see
    /// `rlxc compile --help`)
    #[arg(long)]
    pub exact_activations: bool,
    /// CPU targets: the form of dense 3×3 stride-1 convolutions over large outputs (off, f2, f4; see
    /// `rlxc compile --help`)
    #[arg(long, value_enum, value_name = "FORM")]
    pub winograd: Option<rlxc::cli::Winograd>,
    /// CPU targets: the activations' layout around convolutions (auto, nchw; see `rlxc compile --help`)
    #[arg(long, value_enum, value_name = "LAYOUT")]
    pub layout: Option<rlxc::cli::Layout>,
}

impl On {
    /// `--target`, or the interpreter.
    pub fn target(&self) -> Target {
        self.target.unwrap_or(Target::Interp)
    }
    /// The flags that go to the target's family, for model `m`.
    pub fn request(&self, m: &Model) -> Request {
        Request { backend: self.backend, calibrate: self.calibrate.clone(), board: self.board.clone(), exact_activations: self.exact_activations, winograd: self.winograd, layout: self.layout, source_ops: m.src.node_op_types(), ..Request::named("rlxmodel") }
    }
}

/// `NAME=FILE.npy` for `--input` (split at the first '=').
pub fn parse_input(s: &str) -> Result<(String, PathBuf), String> {
    let (name, file) = s.split_once('=').ok_or_else(|| format!("expected NAME=FILE.npy, got '{s}'"))?;
    if name.is_empty() {
        return Err(format!("expected NAME=FILE.npy, got '{s}': the name is empty"));
    }
    if file.is_empty() {
        return Err(format!("expected NAME=FILE.npy, got '{s}': the file is empty"));
    }
    Ok((name.to_string(), PathBuf::from(file)))
}

/// A model imported and lowered for a run, with its inputs matched to its ports.
pub struct Model {
    pub src: ModelSource,
    pub hir: Hir,
    pub mir: Mir,
    /// The inputs in the model's order.
    pub inputs: Vec<ConstData>,
    /// The input files (outputs must not overwrite them).
    pub files: BTreeSet<PathBuf>,
    pub tm: Timings,
}

pub fn main(a: &RunArgs) -> Result<(), Failure> {
    let t_start = Instant::now();
    // A sharded language model's stateless graph on given `tokens` / `positions` (--input) runs below
    // like any other model; generating text with it does not.
    let stateless_sharded = a.shard.is_some() && !a.inputs.is_empty() && crate::cmd_llm::llm_flag(a).is_none();
    if let (ModelSource::Gguf(p) | ModelSource::HfLlm(p), false) = (ModelSource::from_path(&a.model)?, stateless_sharded) {
        return crate::cmd_llm::run(a, &p);
    }
    if let Some(flag) = crate::cmd_llm::llm_flag(a) {
        return Err(Failure::usage(format!("{flag} is for language models (MODEL.gguf, or a Hugging Face folder with config.json and safetensors)")));
    }
    let mut m = load_model(&a.model, &a.inputs, &a.on.dims, false)?;
    if let Some(s) = a.shard {
        return run_sharded(a, &mut m, s, t_start);
    }
    let req = a.on.request(&m);
    let mut sess = targets::load(a.on.target(), &m.mir, &req, &mut m.tm)?;
    let ins = targets::run::quantize_inputs(sess.as_ref(), std::mem::take(&mut m.inputs))?;
    let t_run = Instant::now();
    let mut outs = phase(&format!("running ({})", a.on.target().name()), || sess.run(std::slice::from_ref(&ins)))?;
    let d_run = t_run.elapsed();
    let outs = outs.pop().ok_or_else(|| Failure::model("the executor returned no outputs"))?;
    write_outputs(&m, &outs, &a.out)?;
    let counted = sess.counter().map(|c| format!(", {} {}", fmt_count(c.min), c.unit)).unwrap_or_default();
    println!("ran on {} ({}) in {}{counted} ({}; total {})", a.on.target().name(), sess.device(), ms(d_run), phases(&m.tm), ms(t_start.elapsed()));
    Ok(())
}

/// "import 1.2 ms, lower 0.3 ms, fold …": every timed phase, apart.
pub fn phases(tm: &Timings) -> String {
    tm.0.iter().map(|(n, d)| format!("{n} {}", ms(*d))).collect::<Vec<_>>().join(", ")
}

pub fn fmt_count(x: f64) -> String {
    if x == x.trunc() {
        format!("{x}")
    } else {
        format!("{x:.1}")
    }
}

/// Reads the inputs, binds symbolic dims from their shapes, imports and lowers the model and matches
/// the inputs to its ports, reporting every problem at once. With `zeros_if_none` and no inputs at
/// all, every input is zeros of its declared (then fixed) type (`rlxc bench` without --input).
pub fn load_model(model: &Path, inputs: &[(String, PathBuf)], dims: &[(String, u64)], zeros_if_none: bool) -> Result<Model, Failure> {
    let src = ModelSource::from_path(model)?;
    let explicit = rlxc::dims::resolve(&src, dims, None)?;
    let mut tm = Timings::default();

    // Read every input file; report all problems at once.
    let mut given: BTreeMap<String, (PathBuf, ConstData)> = BTreeMap::new();
    let mut probs = Vec::new();
    for (name, file) in inputs {
        if given.contains_key(name) {
            probs.push(format!("input '{name}' is given more than once"));
            continue;
        }
        match npy::read(file) {
            Ok(c) => {
                given.insert(name.clone(), (file.clone(), c));
            }
            Err(e) => probs.push(format!("input '{name}': {e}")),
        }
    }
    if !probs.is_empty() {
        return Err(Failure::usage(crate::problem_list("bad --input", &probs)));
    }

    // Fix symbolic dims from the input shapes (ONNX: before import, so shapes inside are static).
    let mut dims = explicit.clone();
    if let ModelSource::Onnx(p) = &src {
        let s = phase("reading the model", || rlx_import::onnx_summary(p))
            .map_err(|e| Failure::model(crate::problem_list(&format!("cannot read ONNX model '{}'", p.display()), &e.problems)))?;
        let mut from: BTreeMap<String, String> = BTreeMap::new();
        let mut probs = Vec::new();
        for (name, _, shape) in &s.inputs {
            let Some((file, c)) = given.get(name) else { continue };
            if shape.len() != c.shape.len() {
                continue; // reported with both types after import
            }
            for (axis, (d, &n)) in shape.iter().zip(&c.shape).enumerate() {
                let Dim::Sym(sym) = d else { continue };
                let n = n as u64;
                if let Some(&want) = explicit.get(sym) {
                    if want != n {
                        probs.push(format!("input '{name}': axis {axis} ('{sym}') is {n} in {}, but --dim {sym}={want}", file.display()));
                    }
                    continue;
                }
                match dims.get(sym) {
                    Some(&b) if b != n => probs.push(format!(
                        "dim '{sym}' is {b} from input '{}' but {n} from input '{name}' (axis {axis})",
                        from.get(sym).map(String::as_str).unwrap_or("?")
                    )),
                    Some(_) => {}
                    None => {
                        dims.insert(sym.clone(), n);
                        from.insert(sym.clone(), name.clone());
                    }
                }
            }
        }
        if !probs.is_empty() {
            return Err(Failure::usage(crate::problem_list("inputs do not agree on the symbolic dims", &probs)));
        }
    }

    let hir = tm.time("import", || src.import(&dims))?;

    // Match the given inputs to the model's.
    let names: Vec<String> = hir
        .inputs
        .iter()
        .enumerate()
        .map(|(i, &v)| hir.value(v).name.clone().unwrap_or_else(|| format!("input{i}")))
        .collect();
    let mut probs = Vec::new();
    let mut syms: BTreeMap<String, u64> = BTreeMap::new();
    let mut ordered = Vec::with_capacity(names.len());
    for (name, &v) in names.iter().zip(&hir.inputs) {
        let ty = hir.ty(v);
        match given.get(name) {
            None if zeros_if_none && given.is_empty() => match ty.shape.as_fixed() {
                Some(shape) => ordered.push(ConstData::from_f64s(ty.dtype, shape.clone(), &vec![0.0; shape.iter().product()])),
                None => probs.push(format!("input {name}: {ty} has symbolic dims: fix them with --dim, or give --input {name}=FILE.npy")),
            },
            None => probs.push(format!("missing --input {name}=FILE.npy (the model expects {ty})")),
            Some((file, c)) => {
                let actual = format!("{}{}", c.dtype, Shape::fixed(&c.shape));
                let mismatch = |why: String| format!("input '{name}': the model expects {ty}, {} holds {actual} ({why})", file.display());
                if c.dtype != ty.dtype {
                    probs.push(mismatch(format!("dtype {} vs {}", ty.dtype, c.dtype)));
                } else if c.shape.len() != ty.shape.rank() {
                    probs.push(mismatch(format!("rank {} vs {}", ty.shape.rank(), c.shape.len())));
                } else if let Err(why) = match_shape(&ty.shape.0, &c.shape, &mut syms) {
                    probs.push(mismatch(why));
                }
                ordered.push(c.clone());
            }
        }
    }
    let known: BTreeSet<&String> = names.iter().collect();
    for name in given.keys().filter(|n| !known.contains(n)) {
        probs.push(format!("the model has no input named '{name}' (its inputs: {})", names.join(", ")));
    }
    if !probs.is_empty() {
        return Err(Failure::usage(crate::problem_list("the inputs do not match the model", &probs)));
    }

    let mir = tm.time("lower", || crate::lower(&hir, src.path()))?;
    let files: BTreeSet<PathBuf> = given.values().filter_map(|(f, _)| f.canonicalize().ok()).collect();
    Ok(Model { src, hir, mir, inputs: ordered, files, tm })
}

/// Writes one .npy per output into `dir` and prints a row per output (name, type, stats, path).
pub fn write_outputs(m: &Model, outs: &[ConstData], dir: &Path) -> Result<(), Failure> {
    let (hir, mir) = (&m.hir, &m.mir);
    let inputs_at = &m.files;
    // Every output is encoded first, then all are written at once (all or nothing, as `compile`).
    let mut files = Vec::with_capacity(outs.len());
    let mut used: BTreeSet<String> = BTreeSet::new();
    let mut rows = Vec::new();
    // An output of data-dependent length is written cut to its count; the counts are not written.
    let counts = rlx_ir::bounded::count_outputs(mir);
    for (i, (out, &v)) in outs.iter().zip(&mir.outputs).enumerate() {
        if counts.contains(&i) {
            continue;
        }
        let cut;
        let out = match (mir.bounded.iter().find(|b| b.output as usize == i), outs.get(i)) {
            (Some(b), Some(_)) => {
                let c = outs.get(b.count as usize).ok_or_else(|| Failure::model(format!("output {i}: its count is missing")))?;
                cut = rlx_ir::bounded::cut(out, b, c).map_err(|e| Failure::model(format!("output {i}: {e}")))?;
                &cut
            }
            _ => out,
        };
        let name = mir
            .value(v)
            .name
            .clone()
            .or_else(|| hir.outputs.get(i).and_then(|&h| hir.value(h).name.clone()))
            .unwrap_or_else(|| format!("output{i}"));
        let mut file = sanitize(&name);
        let mut k = 2;
        while !used.insert(file.clone()) {
            file = format!("{}_{k}", sanitize(&name));
            k += 1;
        }
        let path = dir.join(format!("{file}.npy"));
        if let Ok(target) = path.canonicalize() {
            if inputs_at.contains(&target) {
                return Err(Failure::usage(format!(
                    "output '{name}' would overwrite the input file {}; choose another folder with -o",
                    path.display()
                )));
            }
        }
        let (to_write, note) = match out.dtype {
            DType::BF16 => (
                ConstData::from_f64s(DType::F32, out.shape.clone(), &out.to_f64_vec()),
                " (bf16 written as f32: .npy has no bf16)",
            ),
            _ => (out.clone(), ""),
        };
        let bytes = rlxc::npy::encode(&to_write).map_err(|e| Failure::model(format!("output '{name}': {e}")))?;
        files.push((path.clone(), bytes));
        rows.push((name, format!("{}{}", out.dtype, Shape::fixed(&out.shape)), stats(out), format!("{}{note}", path.display())));
    }
    rlxc::targets::write::create_out_dir(dir)?;
    rlxc::targets::write::write_all_or_nothing(files)?;
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let w1 = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    let w2 = rows.iter().map(|r| r.2.len()).max().unwrap_or(0);
    for (name, ty, st, path) in &rows {
        println!("{name:<w0$}  {ty:<w1$}  {st:<w2$}  -> {path}");
    }
    Ok(())
}

/// Checks `actual` against `declared`, binding symbolic dims consistently across inputs.
fn match_shape(declared: &[Dim], actual: &[usize], syms: &mut BTreeMap<String, u64>) -> Result<(), String> {
    for (axis, (d, &n)) in declared.iter().zip(actual).enumerate() {
        let n = n as u64;
        match d {
            Dim::Fixed(m) if *m != n => return Err(format!("axis {axis} must be {m}, is {n}")),
            Dim::Fixed(_) => {}
            Dim::Sym(s) => match syms.get(s) {
                Some(&b) if b != n => return Err(format!("axis {axis} ('{s}') is {n}, but another input has '{s}' = {b}")),
                Some(_) => {}
                None => {
                    syms.insert(s.clone(), n);
                }
            },
        }
    }
    Ok(())
}

/// A file-name-safe form of an output name: keeps ASCII letters, digits, '-', '_' and '.'; anything
/// else becomes '_'. Never empty, never "." or "..", never hidden.
pub fn sanitize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        s.insert(0, '_');
    }
    s
}

/// "min -1.5  max 3  mean 0.25" over the values (NaNs counted apart).
fn stats(c: &ConstData) -> String {
    if c.dtype.is_quantized_block() {
        return String::new();
    }
    let n = c.numel();
    if n == 0 {
        return "(empty)".to_string();
    }
    let (mut lo, mut hi, mut sum, mut nans) = (f64::INFINITY, f64::NEG_INFINITY, 0.0, 0usize);
    for i in 0..n {
        let x = c.get_f64(i);
        if x.is_nan() {
            nans += 1;
            continue;
        }
        lo = lo.min(x);
        hi = hi.max(x);
        sum += x;
    }
    if nans == n {
        return format!("all {n} values NaN");
    }
    let mean = sum / (n - nans) as f64;
    let mut s = format!("min {}  max {}  mean {}", num(lo), num(hi), num(mean));
    if nans > 0 {
        s.push_str(&format!("  ({nans} NaN)"));
    }
    s
}

fn num(x: f64) -> String {
    if x.is_finite() && x == x.trunc() && x.abs() < 1e15 {
        format!("{x}")
    } else if x.is_finite() && (x.abs() >= 1e6 || x.abs() < 1e-4) {
        format!("{x:.4e}")
    } else {
        format!("{x:.6}").trim_end_matches('0').to_string()
    }
}

pub fn ms(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1e-3 {
        format!("{:.0} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// `rlxc run --shard`: every rank on the interpreter, or this process's rank under mpirun.
fn run_sharded(a: &RunArgs, m: &mut Model, s: rlxc::shard::Shard, t_start: Instant) -> Result<(), Failure> {
    let sh = m.tm.time("shard", || rlxc::shard::shard(&m.mir, s))?;
    let n_out = m.mir.outputs.len();
    let target = a.on.target();
    if target == Target::Interp {
        let outs = phase("running (interp, every rank)", || rlxc::shard::run_interp(&sh, &m.inputs, n_out))?;
        write_outputs(m, &outs, &a.out)?;
        println!("ran {} ranks ({}={}) on interp ({}; total {})", sh.ranks.len(), s.kind(), s.ranks(), phases(&m.tm), ms(t_start.elapsed()));
        return Ok(());
    }
    #[cfg(feature = "mpi")]
    {
        let req = a.on.request(m);
        let mut tm = std::mem::take(&mut m.tm);
        let (rank, outs) = rlxc::shard::run_mpi(&sh, target, &req, &m.inputs, n_out, &mut tm)?;
        m.tm = tm;
        if let Some(outs) = outs {
            write_outputs(m, &outs, &a.out)?;
            println!("rank {rank} of {} ({}={}) ran on {} and wrote the outputs ({}; total {})", sh.ranks.len(), s.kind(), s.ranks(), target.name(), phases(&m.tm), ms(t_start.elapsed()));
        } else {
            println!("rank {rank} of {} ({}={}) ran on {}", sh.ranks.len(), s.kind(), s.ranks(), target.name());
        }
        Ok(())
    }
    #[cfg(not(feature = "mpi"))]
    Err(Failure::usage(format!("--shard on --target {}: this rlxc is built without the mpi feature (use --target interp)", target.name())))
}
