//! Language models on the command line: `rlxc inspect model.gguf` (metadata, tensors, block-type
//! histogram) and `rlxc run model.gguf|HF_FOLDER --prompt TEXT|--tokens 1,2,3 [-n N] [sampling]`: the
//! prompt tokenized with the model's own vocabulary (GGUF; a Hugging Face folder takes `--tokens`), tokens generated through `rlxc::llm` (the `Step` on
//! the interpreter, which recomputes the whole sequence per token: no KV cache yet), text streamed
//! to stdout in whole UTF-8 characters, prefill and decode tokens/s to stderr. `--tokens` without
//! `-n` writes the prompt's logits at every position to OUT_DIR/logits.npy.

use crate::cmd_run::RunArgs;
use crate::{phase, Failure, Target};
use rlx_import::gguf::{load_gguf, GgufFile, GgufValue};
use rlx_models::llm::Checkpoint;
use rlx_models::{StreamDecoder, Tokenizer};
use rlxc::llm::{self, CompiledStep, InterpStep, Sampler, Sampling, Step};
use rlxc::pipeline::Timings;
use rlxc::targets::Request;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Instant;

fn read(p: &Path) -> Result<GgufFile, Failure> {
    phase("reading the model", || load_gguf(p)).map_err(Failure::model)
}

pub fn inspect(p: &Path, json: bool) -> Result<(), Failure> {
    let f = read(p)?;
    let mut hist: BTreeMap<String, (usize, u64, u64)> = BTreeMap::new();
    for t in &f.tensors {
        let e = hist.entry(t.data.dtype.to_string()).or_default();
        e.0 += 1;
        e.1 += t.data.numel() as u64;
        e.2 += t.data.data.len() as u64;
    }
    if json {
        let meta: serde_json::Map<String, serde_json::Value> = f.metadata.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.to_string()))).collect();
        let tensors: Vec<serde_json::Value> = f
            .tensors
            .iter()
            .map(|t| serde_json::json!({"name": t.name, "shape": t.data.shape, "dtype": t.data.dtype.name(), "bytes": t.data.data.len(), "offset": t.offset}))
            .collect();
        let h: serde_json::Map<String, serde_json::Value> =
            hist.iter().map(|(k, (n, e, b))| (k.clone(), serde_json::json!({"tensors": n, "values": e, "bytes": b}))).collect();
        crate::print_json(&serde_json::json!({
            "format": "gguf", "version": f.version, "alignment": f.alignment, "architecture": f.architecture(),
            "metadata": meta, "tensors": tensors, "block_types": h,
        }));
        return Ok(());
    }
    println!("format: gguf v{} (alignment {}, data at byte {})", f.version, f.alignment, f.data_offset);
    println!("architecture: {}", f.architecture());
    println!("metadata ({} keys):", f.metadata.len());
    for (k, v) in &f.metadata {
        println!("  {k} = {v}");
    }
    if let Some(GgufValue::Array(tokens)) = f.get("tokenizer.ggml.tokens") {
        println!("vocabulary: {} tokens", tokens.len());
    }
    println!("tensors ({}):", f.tensors.len());
    for t in &f.tensors {
        println!("  {:<40} {:<6} {:<16} {:>12} bytes", t.name, t.data.dtype.name(), format!("{:?}", t.data.shape), t.data.data.len());
    }
    println!("block types:");
    for (k, (n, e, b)) in &hist {
        println!("  {k:<6} {n:>5} tensors {e:>12} values {b:>12} bytes ({:.2} bits/value)", *b as f64 * 8.0 / (*e).max(1) as f64);
    }
    Ok(())
}

/// The file's own tokenizer (`None`: the file has no vocabulary).
pub fn tokenizer(f: &GgufFile, p: &Path) -> Result<Option<Tokenizer>, Failure> {
    let vocab = rlx_models::llm::vocab_from_gguf(f).map_err(|e| Failure::model(format!("'{}': its vocabulary is invalid: {e}", p.display())))?;
    match vocab {
        Some(v) => Ok(Some(Tokenizer::new(v).map_err(|e| Failure::model(format!("'{}': its vocabulary is invalid: {e}", p.display())))?)),
        None => Ok(None),
    }
}

/// The file's tokenizer, or a usage error for a file without a vocabulary.
pub fn require_tokenizer(p: &Path) -> Result<Tokenizer, Failure> {
    let f = read(p)?;
    tokenizer(&f, p)?.ok_or_else(|| Failure::usage(format!("'{}' has no vocabulary (no tokenizer.ggml.tokens)", p.display())))
}

/// The first language-model flag given (for the error on a model that is not GGUF).
pub fn llm_flag(a: &RunArgs) -> Option<&'static str> {
    [
        (a.prompt.is_some(), "--prompt"),
        (!a.tokens.is_empty(), "--tokens"),
        (a.max_tokens.is_some(), "-n"),
        (a.temperature.is_some(), "--temperature"),
        (a.top_k.is_some(), "--top-k"),
        (a.top_p.is_some(), "--top-p"),
        (a.seed.is_some(), "--seed"),
        (a.show_ids, "--show-ids"),
    ]
    .into_iter()
    .find_map(|(given, flag)| given.then_some(flag))
}

/// The sampling flags, checked (exit 2 on a bad value).
fn sampling(a: &RunArgs) -> Result<Sampling, Failure> {
    let d = Sampling::DEFAULT;
    let s = Sampling {
        temperature: a.temperature.unwrap_or(d.temperature),
        top_k: a.top_k.unwrap_or(d.top_k),
        top_p: a.top_p.unwrap_or(d.top_p),
        seed: a.seed.unwrap_or(d.seed),
    };
    s.check().map_err(Failure::usage)?;
    Ok(s)
}

fn ids(v: &[i64]) -> String {
    v.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

/// A write to stdout that failed for a reason other than a closed pipe (which ends the process).
fn stdout_failure(e: std::io::Error) -> Failure {
    Failure::model(format!("cannot write to stdout: {e}"))
}

pub fn run(a: &RunArgs, p: &Path) -> Result<(), Failure> {
    if !a.inputs.is_empty() {
        return Err(Failure::usage("a language model takes its prompt as --prompt TEXT or --tokens ID,ID,…, not --input".to_string()));
    }
    if a.prompt.is_none() && a.tokens.is_empty() {
        return Err(Failure::usage("a language model needs a prompt: --prompt TEXT, or --tokens ID,ID,…".to_string()));
    }
    let sampling = sampling(a)?;
    let f = phase("reading the model", || Checkpoint::open(p)).map_err(Failure::model)?;
    let tok = match &f {
        Checkpoint::Gguf(g) => tokenizer(g, p)?,
        Checkpoint::Hf(_) => None,
    };
    let prompt: Vec<i64> = match (&a.prompt, &tok) {
        (Some(_), None) if matches!(f, Checkpoint::Hf(_)) => {
            return Err(Failure::usage(format!(
                "'{}' is a Hugging Face checkpoint: rlxc does not read its tokenizer.json, so --prompt cannot be tokenized: give the prompt as --tokens ID,ID,…",
                p.display()
            )))
        }
        (Some(_), None) => {
            return Err(Failure::usage(format!(
                "'{}' has no vocabulary (no tokenizer.ggml.tokens), so --prompt cannot be tokenized: give the prompt as --tokens ID,ID,…",
                p.display()
            )))
        }
        (Some(text), Some(t)) => t.encode(text, true, true).into_iter().map(i64::from).collect(),
        (None, _) => a.tokens.clone(),
    };
    if prompt.is_empty() {
        return Err(Failure::usage("the prompt is empty: it has no tokens (and the vocabulary adds no BOS)".to_string()));
    }
    let n = a.max_tokens.unwrap_or(if a.prompt.is_some() { 64 } else { 0 });
    let logits_only = a.prompt.is_none() && n == 0;
    let target = where_to_run(a, logits_only)?;
    let cfg = f.config().map_err(|e| Failure::model(format!("cannot build a model from '{}': {e}", p.display())))?;
    if let Some(bad) = prompt.iter().find(|&&t| t < 0 || t as usize >= cfg.vocab) {
        return Err(Failure::usage(format!("token id {bad} is outside the vocabulary (0..{})", cfg.vocab)));
    }
    if prompt.len() > cfg.context {
        return Err(Failure::usage(format!("the prompt is {} tokens, longer than the model's context of {}", prompt.len(), cfg.context)));
    }
    if a.show_ids {
        eprintln!("prompt ids: {}", ids(&prompt));
    }
    // What runs the model: the interpreter (the reference), or the compiled KV-cache artifact.
    if let (Some(s), Target::Interp) = (a.shard, target) {
        return Err(Failure::usage(format!("--shard {}={}: a sharded language model generates on its compiled ranks under mpirun (mpirun -np {} rlxc run … --shard {}={} --target host)", s.kind(), s.ranks(), s.ranks(), s.kind(), s.ranks())));
    }
    let mut step: Box<dyn Step> = if target == Target::Interp {
        if let Some((name, _)) = a.on.dims.first() {
            return Err(Failure::usage(format!("--dim {name}: the interpreter sizes a language model from the prompt; --dim context / chunk are for a compiled --target")));
        }
        let (_, hir) = phase("building", || f.graph()).map_err(|e| Failure::model(format!("cannot build a model from '{}': {e}", p.display())))?;
        let mir = crate::lower(&hir, p)?;
        if logits_only {
            return prompt_logits(a, &mir, &prompt, cfg.vocab);
        }
        Box::new(InterpStep::new(mir, cfg.context))
    } else {
        compiled_step(a, p, &f, target, prompt.len(), n, cfg.context)?
    };
    let mut sampler = Sampler::new(sampling);
    let is_eog = |t: i64| tok.as_ref().is_some_and(|k| u32::try_from(t).is_ok_and(|t| k.is_eog(t)));
    let mut out = std::io::stdout().lock();
    let mut generated = Vec::new();
    let stats = if let (Some(_), Some(k)) = (&a.prompt, &tok) {
        // Text: whole UTF-8 characters as they complete; control tokens print nothing.
        let mut dec = StreamDecoder::new(false);
        let stats = llm::generate(step.as_mut(), &prompt, n, &mut sampler, &is_eog, &mut |t| {
            generated.push(t);
            let s = dec.push(k, t as u32, false);
            out.write_all(s.as_bytes()).and_then(|()| out.flush()).map_err(stdout_failure)
        })?;
        let rest = dec.finish();
        out.write_all(rest.as_bytes()).map_err(stdout_failure)?;
        if std::io::stdout().is_terminal() {
            out.write_all(b"\n").map_err(stdout_failure)?;
        }
        out.flush().map_err(stdout_failure)?;
        stats
    } else {
        out.write_all(b"generated: ").map_err(stdout_failure)?;
        let stats = llm::generate(step.as_mut(), &prompt, n, &mut sampler, &is_eog, &mut |t| {
            let sep = if generated.is_empty() { "" } else { "," };
            generated.push(t);
            write!(out, "{sep}{t}").and_then(|()| out.flush()).map_err(stdout_failure)
        })?;
        out.write_all(b"\n").and_then(|()| out.flush()).map_err(stdout_failure)?;
        stats
    };
    if a.show_ids {
        eprintln!("generated ids: {}", ids(&generated));
    }
    let name = |t: i64| match tok.as_ref().and_then(|k| k.token_text(t as u32)) {
        Some(s) => format!("{s}, id {t}"),
        None => format!("id {t}"),
    };
    eprintln!("{} (on {})", stats.line(&name), step.describe());
    Ok(())
}

/// Where `rlxc run model.gguf` runs: `--target`, else the compiled host artifact when the LLVM back
/// end is built in (the interpreter otherwise). The prompt's logits (`--tokens` without `-n`) are
/// the interpreter's.
fn where_to_run(a: &RunArgs, logits_only: bool) -> Result<Target, Failure> {
    match a.on.target {
        Some(t) if logits_only && t != Target::Interp => Err(Failure::usage(format!(
            "--tokens without -n writes the prompt's logits from --target interp; give -n N to generate on --target {}",
            t.name()
        ))),
        Some(t) => Ok(t),
        None if logits_only || !cfg!(feature = "llvm") => Ok(Target::Interp),
        None => Ok(Target::Host),
    }
}

/// Positions a compiled run holds by default: the prompt and the new tokens, rounded up to a
/// multiple of 64, at most the model's context.
pub fn default_context(needed: usize, model_context: usize) -> usize {
    needed.div_ceil(64).saturating_mul(64).clamp(1, model_context.max(1))
}

/// Tokens per call of the compiled step when `--dim chunk` is not given. Decode runs the whole
/// chunk (padding rows included), prefill runs the prompt in chunks: 8 is the balance measured on
/// Gemma 3 270M (docs/llm.md).
pub const DEFAULT_CHUNK: usize = 8;

/// The cached step of `f` compiled for `t` and loaded: context `--dim context=N` (default: the
/// prompt and the new tokens, rounded up to 64, capped at the model's), `--dim chunk=C` tokens per
/// prefill call. Prints the compile time (stderr) apart from generation's.
fn compiled_step(a: &RunArgs, p: &Path, f: &Checkpoint, t: Target, prompt: usize, n: usize, model_context: usize) -> Result<Box<dyn Step>, Failure> {
    let mut context = default_context(prompt + n, model_context);
    let mut chunk = DEFAULT_CHUNK;
    for (name, v) in &a.on.dims {
        match name.as_str() {
            "context" => context = *v as usize,
            "chunk" => chunk = *v as usize,
            other => {
                return Err(Failure::usage(format!(
                    "--dim {other}: a language model run on --target {} takes --dim context=N (positions the KV cache holds) and --dim chunk=C (tokens per prefill call)",
                    t.name()
                )))
            }
        }
    }
    if context > model_context {
        return Err(Failure::usage(format!("--dim context={context} is more than the model's context of {model_context}")));
    }
    if context < prompt {
        return Err(Failure::usage(format!("--dim context={context} holds fewer positions than the prompt's {prompt} tokens")));
    }
    if chunk == 0 || context == 0 {
        return Err(Failure::usage("--dim context and --dim chunk must be at least 1".to_string()));
    }
    let chunk = chunk.min(context);
    let t0 = Instant::now();
    let (_, hir) = phase("building the cached step", || f.step(chunk, context))
        .map_err(|e| Failure::model(format!("cannot build a cached step from '{}': {e}", p.display())))?;
    let mir = crate::lower(&hir, p)?;
    drop(hir);
    let req = Request { backend: a.on.backend, exact_activations: a.on.exact_activations, ..Request::named("rlxllm") };
    let mut tm = Timings::default();
    let step: Box<dyn Step> = match a.shard {
        None if t == Target::Cuda => Box::new(phase("compiling for cuda", || llm::CudaStep::compile(&mir, &req, &mut tm))?),
        None => Box::new(phase(&format!("compiling for {}", t.name()), || CompiledStep::compile(t, &mir, &req, &mut tm))?),
        #[cfg(feature = "mpi")]
        Some(s) => Box::new(phase(&format!("compiling this rank of --shard {}={} for {}", s.kind(), s.ranks(), t.name()), || llm::ShardedStep::compile(t, &mir, s, &req, &mut tm))?),
        #[cfg(not(feature = "mpi"))]
        Some(s) => return Err(Failure::usage(format!("--shard {}={}: this rlxc is built without the mpi feature", s.kind(), s.ranks()))),
    };
    eprintln!("compiled in {:.2} s ({}; {})", t0.elapsed().as_secs_f64(), step.describe(), crate::cmd_run::phases(&tm));
    Ok(step)
}

/// `--tokens` without `-n`: the logits at every position of the prompt to OUT_DIR/logits.npy, and
/// the argmax next token at each position on stdout.
fn prompt_logits(a: &RunArgs, mir: &rlx_ir::Mir, prompt: &[i64], vocab: usize) -> Result<(), Failure> {
    let t0 = Instant::now();
    let l = phase("running (interp)", || llm::interp::logits(mir, prompt))?;
    let d_prompt = t0.elapsed();
    let out = a.out.join("logits.npy");
    let bytes = rlxc::npy::encode(&l).map_err(|e| Failure::model(format!("logits: {e}")))?;
    rlxc::pipeline::create_out_dir(&a.out)?;
    rlxc::pipeline::write_all_or_nothing(vec![(out.clone(), bytes)])?;
    let mut next = Vec::with_capacity(prompt.len());
    for r in 0..prompt.len() {
        let row = llm::interp::row(&l, r)?;
        next.push(llm::sample::argmax(&row).map_err(|e| Failure::model(format!("at position {r}: {e}")))? as i64);
    }
    println!("next token at each position: {}", ids(&next));
    eprintln!("prompt: {} tokens in {:.2} s on the interpreter; logits [{}, {vocab}] -> {}", prompt.len(), d_prompt.as_secs_f64(), prompt.len(), out.display());
    Ok(())
}
