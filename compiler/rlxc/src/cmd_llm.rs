//! GGUF language models on the command line: `rlxc inspect model.gguf` (metadata, tensors, block-type
//! histogram) and `rlxc run model.gguf --tokens 1,2,3 [-n N]` on the interpreter (the prompt's logits
//! to OUT_DIR/logits.npy; greedy generation recomputes the whole sequence for every new token — there
//! is no KV cache yet).

use crate::cmd_run::RunArgs;
use crate::{phase, Failure, Target};
use rlx_import::gguf::{load_gguf, GgufFile, GgufValue};
use rlx_ir::{ConstData, Mir};
use std::collections::BTreeMap;
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

/// Logits [len, vocab] for `tokens` at positions 0..len.
fn logits(mir: &Mir, tokens: &[i64]) -> Result<ConstData, Failure> {
    let n = tokens.len();
    let pos: Vec<i64> = (0..n as i64).collect();
    let ins = [ConstData::from_i64(vec![n], tokens), ConstData::from_i64(vec![n], &pos)];
    let mut out = rlx_interp::run(mir, &ins).map_err(|e| Failure::model(format!("running the model failed: {e}")))?;
    out.pop().ok_or_else(|| Failure::model("the model has no output"))
}

/// Argmax of row `r` of a [rows, vocab] f32 tensor (first index on ties).
fn argmax_row(l: &ConstData, r: usize) -> i64 {
    let v = l.shape[1];
    let b = &l.data.bytes()[r * v * 4..(r + 1) * v * 4];
    let mut best = (0usize, f32::NEG_INFINITY);
    for (i, c) in b.chunks_exact(4).enumerate() {
        let x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        if x > best.1 {
            best = (i, x);
        }
    }
    best.0 as i64
}

pub fn run(a: &RunArgs, p: &Path) -> Result<(), Failure> {
    if !a.inputs.is_empty() {
        return Err(Failure::usage("a GGUF model takes its prompt as --tokens ID,ID,…, not --input".to_string()));
    }
    if a.tokens.is_empty() {
        return Err(Failure::usage("a GGUF model needs a prompt: --tokens ID,ID,…".to_string()));
    }
    if !matches!(a.target, Target::Interp) {
        return Err(Failure::usage("GGUF models run on --target interp for now".to_string()));
    }
    let f = read(p)?;
    let (cfg, hir) = phase("building", || rlx_models::llm::llm_from_gguf(&f))
        .map_err(|e| Failure::model(format!("cannot build a model from '{}': {e}", p.display())))?;
    if let Some(bad) = a.tokens.iter().find(|&&t| t < 0 || t as usize >= cfg.vocab) {
        return Err(Failure::usage(format!("token id {bad} is outside the vocabulary (0..{})", cfg.vocab)));
    }
    let mir = crate::lower(&hir, p)?;
    let t0 = Instant::now();
    let l = phase("running (interp)", || logits(&mir, &a.tokens))?;
    let d_prompt = t0.elapsed();
    let out = a.out.join("logits.npy");
    let bytes = rlxc::npy::encode(&l).map_err(|e| Failure::model(format!("logits: {e}")))?;
    rlxc::pipeline::create_out_dir(&a.out)?;
    rlxc::pipeline::write_all_or_nothing(vec![(out.clone(), bytes)])?;
    let next: Vec<String> = (0..a.tokens.len()).map(|r| argmax_row(&l, r).to_string()).collect();
    println!("next token at each position: {}", next.join(","));
    eprintln!("prompt: {} tokens in {:.2} s on the interpreter; logits [{}, {}] -> {}", a.tokens.len(), d_prompt.as_secs_f64(), a.tokens.len(), cfg.vocab, out.display());
    if a.max_tokens > 0 {
        let mut seq = a.tokens.clone();
        let mut gen = vec![argmax_row(&l, seq.len() - 1)];
        let t1 = Instant::now();
        while gen.len() < a.max_tokens {
            seq.push(*gen.last().expect("one token"));
            let l = phase("generating (interp)", || logits(&mir, &seq))?;
            gen.push(argmax_row(&l, seq.len() - 1));
        }
        let ids: Vec<String> = gen.iter().map(i64::to_string).collect();
        println!("generated: {}", ids.join(","));
        if gen.len() > 1 {
            eprintln!(
                "generation: {} tokens, {:.2} s per token after the first (full recompute per token, no KV cache yet)",
                gen.len(),
                t1.elapsed().as_secs_f64() / (gen.len() - 1) as f64
            );
        }
    }
    Ok(())
}
