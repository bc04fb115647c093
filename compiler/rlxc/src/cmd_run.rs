//! `rlxc run`: run a model on .npy inputs and write .npy outputs.

use crate::{phase, Failure, ModelSource, Target};
use rlx_ir::{ConstData, DType, Dim, Shape};
use rlxc::npy;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The long `--help` text.
pub const LONG_ABOUT: &str = "Run a model on .npy inputs and write one .npy file per output (DIR/<output name>.npy, with \
        characters unsafe in file names replaced by '_'), then print each output's dtype, shape, min, max \
        and mean, and the time taken.\n\n\
        Every model input needs exactly one --input. Symbolic dims (batch, sequence, …) are bound from the \
        input shapes; --dim fixes them explicitly.\n\n\
        .npy files: format 1.0/2.0/3.0, C order, little-endian f4 f8 f2 i1 i2 i4 i8 u1 u2 u4 u8 b1.";

#[derive(clap::Args)]
pub struct RunArgs {
    /// The model: an ONNX file, or a folder with config.json + model.safetensors
    pub model: PathBuf,
    /// A model input: NAME=FILE.npy (repeat once per model input)
    #[arg(long = "input", short = 'i', value_name = "NAME=FILE.npy", value_parser = parse_input)]
    pub inputs: Vec<(String, PathBuf)>,
    /// Folder for the output .npy files (created if missing)
    #[arg(short = 'o', long = "out-dir", value_name = "DIR", default_value = ".")]
    pub out: PathBuf,
    /// Where to run the model
    #[arg(long, value_enum, default_value_t = Target::Interp)]
    pub target: Target,
    /// Native code generator for --target host: llvm (default when built in) or cranelift
    #[arg(long, value_enum)]
    pub backend: Option<rlxc::cli::Backend>,
    /// Fix a symbolic dim by name, e.g. --dim batch=1 (repeatable; normally bound from the inputs)
    #[arg(long = "dim", value_name = "NAME=N", value_parser = crate::parse_dim)]
    pub dims: Vec<(String, u64)>,
    /// With --target vulkan: after the run that writes the outputs, time N more runs of the same
    /// loaded artifact (each: copy inputs in, submit, wait, copy outputs out; setup excluded) and print
    /// p50, p10, p90, min and max
    #[arg(long, value_name = "N")]
    pub bench: Option<usize>,
    /// GGUF language models: the prompt as token ids, e.g. --tokens 2,651,6037 (writes the prompt's
    /// logits to OUT_DIR/logits.npy and prints the next token at every position)
    #[arg(long, value_name = "ID,ID,…", value_delimiter = ',')]
    pub tokens: Vec<i64>,
    /// GGUF language models: greedily generate N tokens after the prompt and print their ids
    #[arg(short = 'n', long = "max-tokens", value_name = "N", default_value_t = 0)]
    pub max_tokens: usize,
}

/// `NAME=FILE.npy` for `--input` (split at the first '=').
fn parse_input(s: &str) -> Result<(String, PathBuf), String> {
    let (name, file) = s.split_once('=').ok_or_else(|| format!("expected NAME=FILE.npy, got '{s}'"))?;
    if name.is_empty() {
        return Err(format!("expected NAME=FILE.npy, got '{s}': the name is empty"));
    }
    if file.is_empty() {
        return Err(format!("expected NAME=FILE.npy, got '{s}': the file is empty"));
    }
    Ok((name.to_string(), PathBuf::from(file)))
}

pub fn main(a: &RunArgs) -> Result<(), Failure> {
    let t_start = Instant::now();
    let src = ModelSource::from_path(&a.model)?;
    if let ModelSource::Gguf(p) = &src {
        return crate::cmd_llm::run(a, p);
    }
    if !a.tokens.is_empty() || a.max_tokens > 0 {
        return Err(Failure::usage("--tokens and -n are for GGUF language models".to_string()));
    }
    let explicit = rlxc::dims::resolve(&src, &a.dims, None)?;

    // Read every input file; report all problems at once.
    let mut given: BTreeMap<String, (PathBuf, ConstData)> = BTreeMap::new();
    let mut probs = Vec::new();
    for (name, file) in &a.inputs {
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

    let t_import = Instant::now();
    let hir = src.import(&dims)?;
    let d_import = t_import.elapsed();

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

    let t_lower = Instant::now();
    let mir = crate::lower(&hir, src.path())?;
    let d_lower = t_lower.elapsed();
    if a.bench.is_some() && a.target.shader_lang().is_none() && a.target != Target::Cuda {
        return Err(Failure::usage("--bench is for --target vulkan or cuda (it times runs of the loaded artifact)".to_string()));
    }

    let t_run = Instant::now();
    let outs = match a.target {
        Target::Interp => phase("running (interp)", || rlx_interp::run(&mir, &ordered))
            .map_err(|e| Failure::model(format!("running '{}' failed: {e}", src.path().display())))?,
        t if t.shader_lang().is_some() => {
            let (outs, b) = phase("compiling and running (Vulkan)", || rlxc::shader::run_vulkan_bench(&mir, &ordered, t, a.bench.unwrap_or(0)))?;
            if a.bench.is_some() {
                let q = |p: f64| b.runs.get(((b.runs.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or_default();
                let us = |d: Duration| format!("{:.1} µs", d.as_secs_f64() * 1e6);
                println!("vulkan device: {}", b.device);
                println!("{} dispatches, {} barriers between them", b.dispatches, b.barriers);
                println!("compile {}, setup {}, first run {}", ms(b.compile), ms(b.setup), ms(b.first));
                println!(
                    "bench: {} runs: p50 {}  p10 {}  p90 {}  min {}  max {}",
                    b.runs.len(),
                    us(q(0.5)),
                    us(q(0.1)),
                    us(q(0.9)),
                    us(q(0.0)),
                    us(q(1.0))
                );
            }
            outs
        }
        Target::Cuda => {
            let (outs, b) = phase("compiling and running (CUDA)", || rlxc::cuda::run_cuda_bench(&mir, &ordered, a.bench.unwrap_or(0)))?;
            if a.bench.is_some() {
                let q = |p: f64| b.runs.get(((b.runs.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or_default();
                let us = |d: Duration| format!("{:.1} µs", d.as_secs_f64() * 1e6);
                println!("cuda device: {}", b.device);
                println!("{} kernel launches in one CUDA graph", b.dispatches);
                println!("compile {}, setup {}, first run {}", ms(b.compile), ms(b.setup), ms(b.first));
                println!("bench: {} runs: p50 {}  p10 {}  p90 {}  min {}  max {}", b.runs.len(), us(q(0.5)), us(q(0.1)), us(q(0.9)), us(q(0.0)), us(q(1.0)));
            }
            outs
        }
        t => phase("compiling and running", || rlxc::native::run_compiled_with(&mir, &ordered, t, a.backend.unwrap_or_default()))?,
    };
    let d_run = t_run.elapsed();

    // Write outputs.
    // Every output is encoded first, then all are written at once (all or nothing, as `compile`).
    let mut files = Vec::with_capacity(outs.len());
    let inputs_at: BTreeSet<PathBuf> = given.values().filter_map(|(f, _)| f.canonicalize().ok()).collect();
    let mut used: BTreeSet<String> = BTreeSet::new();
    let mut rows = Vec::new();
    for (i, (out, &v)) in outs.iter().zip(&mir.outputs).enumerate() {
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
        let path = a.out.join(format!("{file}.npy"));
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
    rlxc::pipeline::create_out_dir(&a.out)?;
    rlxc::pipeline::write_all_or_nothing(files)?;
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let w1 = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    let w2 = rows.iter().map(|r| r.2.len()).max().unwrap_or(0);
    for (name, ty, st, path) in &rows {
        println!("{name:<w0$}  {ty:<w1$}  {st:<w2$}  -> {path}");
    }
    println!(
        "ran on {} in {} (import {}, lower {}; total {})",
        a.target.name(),
        ms(d_run),
        ms(d_import),
        ms(d_lower),
        ms(t_start.elapsed())
    );
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

fn ms(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1e-3 {
        format!("{:.0} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}
