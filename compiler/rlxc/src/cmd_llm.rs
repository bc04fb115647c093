//! GGUF language models on the command line: `rlxc inspect model.gguf` (metadata, tensors, block-type
//! histogram) and `rlxc run model.gguf --prompt TEXT|--tokens 1,2,3 [-n N] [sampling]`: the prompt
//! tokenized with the model's own vocabulary, tokens generated through `rlxc::llm` (the `Step` on
//! the interpreter, which recomputes the whole sequence per token: no KV cache yet), text streamed
//! to stdout in whole UTF-8 characters, prefill and decode tokens/s to stderr. `--tokens` without
//! `-n` writes the prompt's logits at every position to OUT_DIR/logits.npy.

use crate::cmd_run::RunArgs;
use crate::{phase, Failure, Target};
use rlx_import::gguf::{load_gguf, GgufFile, GgufValue};
use rlx_models::{StreamDecoder, Tokenizer};
use rlxc::llm::{self, InterpStep, Sampler, Sampling, Step};
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
        return Err(Failure::usage("a GGUF model takes its prompt as --prompt TEXT or --tokens ID,ID,…, not --input".to_string()));
    }
    if a.prompt.is_none() && a.tokens.is_empty() {
        return Err(Failure::usage("a GGUF model needs a prompt: --prompt TEXT, or --tokens ID,ID,…".to_string()));
    }
    if !matches!(a.on.target, Target::Interp) {
        return Err(Failure::usage("GGUF models run on --target interp for now".to_string()));
    }
    let sampling = sampling(a)?;
    let f = read(p)?;
    let vocab = rlx_models::llm::vocab_from_gguf(&f).map_err(|e| Failure::model(format!("'{}': its vocabulary is invalid: {e}", p.display())))?;
    let tok = match vocab {
        Some(v) => Some(Tokenizer::new(v).map_err(|e| Failure::model(format!("'{}': its vocabulary is invalid: {e}", p.display())))?),
        None => None,
    };
    let prompt: Vec<i64> = match (&a.prompt, &tok) {
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
    let (cfg, hir) = phase("building", || rlx_models::llm::llm_from_gguf(&f))
        .map_err(|e| Failure::model(format!("cannot build a model from '{}': {e}", p.display())))?;
    if let Some(bad) = prompt.iter().find(|&&t| t < 0 || t as usize >= cfg.vocab) {
        return Err(Failure::usage(format!("token id {bad} is outside the vocabulary (0..{})", cfg.vocab)));
    }
    if prompt.len() > cfg.context {
        return Err(Failure::usage(format!("the prompt is {} tokens, longer than the model's context of {}", prompt.len(), cfg.context)));
    }
    let mir = crate::lower(&hir, p)?;
    let n = a.max_tokens.unwrap_or(if a.prompt.is_some() { 64 } else { 0 });
    if a.prompt.is_none() && n == 0 {
        return prompt_logits(a, &mir, &prompt, cfg.vocab);
    }
    if a.show_ids {
        eprintln!("prompt ids: {}", ids(&prompt));
    }
    // What runs the model (a compiled KV-cache artifact is another `Step`; nothing below changes).
    let mut step: Box<dyn Step> = Box::new(InterpStep::new(mir, cfg.context));
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
