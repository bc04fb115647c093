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

#[cfg(test)]
mod tests {
    use super::*;

    fn file(keys: Vec<(&str, GgufValue)>) -> GgufFile {
        let mut metadata: Vec<(String, GgufValue)> = keys.into_iter().map(|(k, v)| (format!("tokenizer.ggml.{k}"), v)).collect();
        metadata.sort_by(|a, b| a.0.cmp(&b.0));
        GgufFile { version: 3, alignment: 32, data_offset: 0, metadata, tensors: Vec::new() }
    }
    fn strs(v: &[&str]) -> GgufValue {
        GgufValue::Array(v.iter().map(|s| GgufValue::Str(s.to_string())).collect())
    }

    #[test]
    fn keys_become_the_vocab_and_absent_tokens_mean_none() {
        assert_eq!(vocab_from_gguf(&file(vec![("model", GgufValue::Str("llama".into()))])), Ok(None));
        let v = vocab_from_gguf(&file(vec![
            ("model", GgufValue::Str("llama".into())),
            ("tokens", strs(&["<unk>", "<s>", "a"])),
            ("scores", GgufValue::Array(vec![GgufValue::Float(0.0), GgufValue::Float(0.0), GgufValue::Float(-1.5)])),
            ("token_type", GgufValue::Array(vec![GgufValue::Int(2), GgufValue::Int(3), GgufValue::Int(1)])),
            ("bos_token_id", GgufValue::UInt(1)),
            ("add_bos_token", GgufValue::Bool(true)),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((v.model, v.tokens.len(), v.scores[2], v.types[1], v.bos, v.add_bos, v.eos), (TokenizerModel::Spm, 3, -1.5, TokenType::Control, Some(1), Some(true), None));
    }

    #[test]
    fn mistyped_keys_are_named_together() {
        let e = vocab_from_gguf(&file(vec![
            ("tokens", GgufValue::Array(vec![GgufValue::Str("a".into()), GgufValue::UInt(7)])),
            ("bos_token_id", GgufValue::Int(-1)),
            ("add_bos_token", GgufValue::UInt(1)),
            ("scores", GgufValue::Str("x".into())),
        ]))
        .unwrap_err();
        for k in [
            "tokenizer.ggml.model is missing",
            "tokenizer.ggml.tokens[1] is not a string (7)",
            "tokenizer.ggml.bos_token_id = -1 is not a token id",
            "tokenizer.ggml.add_bos_token = 1 is not a boolean",
            "tokenizer.ggml.scores is not an array",
        ] {
            assert!(e.contains(k), "{e}");
        }
        let e = vocab_from_gguf(&file(vec![("model", GgufValue::Str("bert".into())), ("tokens", strs(&["a"]))])).unwrap_err();
        assert!(e.contains("tokenizer.ggml.model = 'bert' is not supported"), "{e}");
    }
}
