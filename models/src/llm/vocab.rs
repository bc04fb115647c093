//! A GGUF model's own vocabulary: its `tokenizer.ggml.*` metadata as a [`Vocab`] (the tokenizer
//! reads plain data; this is where the GGUF file's keys become that data). Every key of the wrong
//! type is named, all at once; nothing here panics on a file's values.

use crate::tokenizer::{TokenType, TokenizerModel, Vocab};
use rlx_import::gguf::{GgufFile, GgufValue};

/// The vocabulary the file carries, or `None` when it has none (no `tokenizer.ggml.tokens`: a file
/// written without a tokenizer, which runs on token ids only).
pub fn vocab_from_gguf(f: &GgufFile) -> Result<Option<Vocab>, String> {
    let Some(tokens) = f.get("tokenizer.ggml.tokens") else {
        return Ok(None);
    };
    let mut problems = Vec::new();
    let key = |k: &str| format!("tokenizer.ggml.{k}");
    let model = match f.get(&key("model")).map(|v| v.as_str()) {
        Some(Some(m)) => TokenizerModel::from_gguf(m).map_err(|e| problems.push(e)).ok(),
        Some(None) => {
            problems.push("tokenizer.ggml.model is not a string".into());
            None
        }
        None => {
            problems.push("tokenizer.ggml.model is missing (the vocabulary's algorithm: 'llama' or 'gpt2')".into());
            None
        }
    };
    let mut array = |k: &str, v: Option<&GgufValue>| -> Vec<GgufValue> {
        match v {
            None => Vec::new(),
            Some(GgufValue::Array(a)) => a.clone(),
            Some(_) => {
                problems.push(format!("{} is not an array", key(k)));
                Vec::new()
            }
        }
    };
    let tokens = array("tokens", Some(tokens));
    let scores = array("scores", f.get(&key("scores")));
    let types = array("token_type", f.get(&key("token_type")));
    let merges = array("merges", f.get(&key("merges")));
    let strings = |k: &str, a: Vec<GgufValue>, problems: &mut Vec<String>| -> Vec<String> {
        let mut out = Vec::with_capacity(a.len());
        for (i, v) in a.into_iter().enumerate() {
            match v {
                GgufValue::Str(s) => out.push(s),
                other => {
                    problems.push(format!("{}[{i}] is not a string ({other})", key(k)));
                    return Vec::new();
                }
            }
        }
        out
    };
    let tokens = strings("tokens", tokens, &mut problems);
    let merges = strings("merges", merges, &mut problems);
    let mut score_list = Vec::with_capacity(scores.len());
    for (i, v) in scores.iter().enumerate() {
        match v.as_f64() {
            Some(x) => score_list.push(x as f32),
            None => {
                problems.push(format!("tokenizer.ggml.scores[{i}] is not a number ({v})"));
                break;
            }
        }
    }
    let mut type_list = Vec::with_capacity(types.len());
    for (i, v) in types.iter().enumerate() {
        match v {
            GgufValue::Int(x) => type_list.push(TokenType::from_gguf(i32::try_from(*x).unwrap_or(0))),
            GgufValue::UInt(x) => type_list.push(TokenType::from_gguf(i32::try_from(*x).unwrap_or(0))),
            other => {
                problems.push(format!("tokenizer.ggml.token_type[{i}] is not an integer ({other})"));
                break;
            }
        }
    }
    let mut id = |k: &str| -> Option<u32> {
        let v = f.get(&key(k))?;
        match v.as_u64().and_then(|x| u32::try_from(x).ok()) {
            Some(x) => Some(x),
            None => {
                problems.push(format!("{} = {v} is not a token id", key(k)));
                None
            }
        }
    };
    let (bos, eos, eot, unk, pad) = (id("bos_token_id"), id("eos_token_id"), id("eot_token_id"), id("unknown_token_id"), id("padding_token_id"));
    let mut flag = |k: &str| -> Option<bool> {
        let v = f.get(&key(k))?;
        let b = v.as_bool();
        if b.is_none() {
            problems.push(format!("{} = {v} is not a boolean", key(k)));
        }
        b
    };
    let (add_bos, add_eos, add_space_prefix) = (flag("add_bos_token"), flag("add_eos_token"), flag("add_space_prefix"));
    let pre = match f.get(&key("pre")) {
        None => None,
        Some(GgufValue::Str(s)) => Some(s.clone()),
        Some(v) => {
            problems.push(format!("tokenizer.ggml.pre = {v} is not a string"));
            None
        }
    };
    match model {
        Some(model) if problems.is_empty() => {
            let mut v = Vocab::new(model, tokens);
            v.pre = pre;
            v.scores = score_list;
            v.types = type_list;
            v.merges = merges;
            (v.bos, v.eos, v.eot, v.unk, v.pad) = (bos, eos, eot, unk, pad);
            (v.add_bos, v.add_eos, v.add_space_prefix) = (add_bos, add_eos, add_space_prefix);
            Ok(Some(v))
        }
        _ => Err(problems.join("; ")),
    }
}
