//! Hugging Face checkpoints of the same architectures: a folder with `config.json` and
//! `model.safetensors` (or shards listed by `model.safetensors.index.json`), read for the one builder
//! in `graph.rs`:
//! - `config.json` → [`LlmConfig`] ([`hf_config`]), every problem listed at once, each naming its key;
//! - tensors mapped onto GGUF names (`model.layers.3.self_attn.q_proj.weight` → `blk.3.attn_q.weight`),
//!   zero-copy, F32/F16/BF16 as stored (F16/BF16 matrices go through `dequant_matmul` as GGUF's do).
//!
//! The two conventions that differ from a GGUF file:
//! - RoPE: Hugging Face stores LLaMA's q/k for `rotate_half` (halves), while llama.cpp's converter
//!   permutes them for adjacent pairs; so every Hugging Face checkpoint uses [`RopeStyle::Neox`].
//! - Gemma's RMSNorm multiplies by (1 + w) (`Gemma3RMSNorm`, in f32) where llama.cpp's converter
//!   stored 1 + w; so Gemma's norm weights are read as 1 + w here (a small f32 copy of each vector).
//!
//! Unknown tensors (e.g. old checkpoints' `rotary_emb.inv_freq`) are ignored; a missing tensor or one
//! of the wrong shape is named by its Hugging Face name when the builder asks for it.

use super::config::{Arch, LlmConfig, RopeStyle};
use super::Weights;
use rlx_ir::{ConstData, DType};
use serde_json::{Map, Value};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// The `model_type`s read as language models (others: BERT folders are `bert` or have none).
pub const HF_MODEL_TYPES: [&str; 4] = ["llama", "qwen2", "qwen3", "gemma3_text"];

/// Per-layer tensors: (GGUF name after `blk.N.`, Hugging Face name after `model.layers.N.`).
fn layer_names(arch: Arch) -> Vec<(&'static str, &'static str)> {
    let mut v = vec![
        ("attn_norm.weight", "input_layernorm.weight"),
        ("attn_q.weight", "self_attn.q_proj.weight"),
        ("attn_k.weight", "self_attn.k_proj.weight"),
        ("attn_v.weight", "self_attn.v_proj.weight"),
        ("attn_q.bias", "self_attn.q_proj.bias"),
        ("attn_k.bias", "self_attn.k_proj.bias"),
        ("attn_v.bias", "self_attn.v_proj.bias"),
        ("attn_output.weight", "self_attn.o_proj.weight"),
        ("attn_q_norm.weight", "self_attn.q_norm.weight"),
        ("attn_k_norm.weight", "self_attn.k_norm.weight"),
        ("ffn_gate.weight", "mlp.gate_proj.weight"),
        ("ffn_up.weight", "mlp.up_proj.weight"),
        ("ffn_down.weight", "mlp.down_proj.weight"),
    ];
    if arch == Arch::Gemma3 {
        v.extend([
            ("post_attention_norm.weight", "post_attention_layernorm.weight"),
            ("ffn_norm.weight", "pre_feedforward_layernorm.weight"),
            ("post_ffw_norm.weight", "post_feedforward_layernorm.weight"),
        ]);
    } else {
        v.push(("ffn_norm.weight", "post_attention_layernorm.weight"));
    }
    v
}

const GLOBAL_NAMES: [(&str, &str); 3] = [("token_embd.weight", "model.embed_tokens.weight"), ("output_norm.weight", "model.norm.weight"), ("output.weight", "lm_head.weight")];

/// The Hugging Face name of GGUF tensor `gguf` (`None`: not one the builder reads).
fn hf_name(arch: Arch, gguf: &str) -> Option<String> {
    if let Some(&(_, h)) = GLOBAL_NAMES.iter().find(|(g, _)| *g == gguf) {
        return Some(h.to_string());
    }
    let (i, rest) = gguf.strip_prefix("blk.")?.split_once('.')?;
    let &(_, h) = layer_names(arch).iter().find(|(g, _)| *g == rest)?;
    Some(format!("model.layers.{i}.{h}"))
}

/// The GGUF name of Hugging Face tensor `hf` (`None`: not one the builder reads).
fn gguf_name(arch: Arch, hf: &str) -> Option<String> {
    if let Some(&(g, _)) = GLOBAL_NAMES.iter().find(|(_, h)| *h == hf) {
        return Some(g.to_string());
    }
    let (i, rest) = hf.strip_prefix("model.layers.")?.split_once('.')?;
    i.parse::<usize>().ok()?;
    let &(g, _) = layer_names(arch).iter().find(|(_, h)| *h == rest)?;
    Some(format!("blk.{i}.{g}"))
}

/// The hyperparameters of a Hugging Face `config.json` (its text), and whether the output matrix is
/// the token embedding (`tie_word_embeddings`). Every problem is listed, each naming its key.
pub fn hf_config(text: &str) -> Result<(LlmConfig, bool), String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let o = v.as_object().ok_or("not a JSON object")?;
    let arch = match o.get("model_type").map(|t| t.as_str()) {
        Some(Some("llama")) => Arch::Llama,
        Some(Some("qwen2")) => Arch::Qwen2,
        Some(Some("qwen3")) => Arch::Qwen3,
        Some(Some("gemma3_text")) => Arch::Gemma3,
        Some(Some("gemma3")) => {
            return Err("model_type 'gemma3' is Gemma 3's multimodal checkpoint; its text-only model (model_type 'gemma3_text') is supported".into())
        }
        Some(Some(t)) => return Err(format!("model_type '{t}' is not supported (language models: {}; encoders: bert)", HF_MODEL_TYPES.join(", "))),
        Some(None) => return Err("model_type must be a string".into()),
        None => return Err("model_type is missing".into()),
    };
    let gemma = arch == Arch::Gemma3;
    let mut problems = Vec::new();
    let hidden = int(o, "hidden_size", None, &mut problems);
    let layers = int(o, "num_hidden_layers", None, &mut problems);
    let ffn = int(o, "intermediate_size", None, &mut problems);
    let heads = int(o, "num_attention_heads", None, &mut problems);
    let kv_heads = int(o, "num_key_value_heads", Some(heads), &mut problems);
    let head_dim = int(o, "head_dim", Some(hidden / heads.max(1)), &mut problems);
    let vocab = int(o, "vocab_size", None, &mut problems);
    let context = int(o, "max_position_embeddings", Some(2048), &mut problems);
    let eps = float(o, "rms_norm_eps", 1e-6, &mut problems);
    let rope_base = float(o, "rope_theta", if gemma { 1_000_000.0 } else { 10000.0 }, &mut problems);
    let rope_base_local = float(o, "rope_local_base_freq", 10000.0, &mut problems);
    let (window, period) = if gemma {
        let w = int(o, "sliding_window", None, &mut problems);
        (Some(w), gemma_period(o, layers, &mut problems))
    } else {
        (None, 6)
    };
    let attn_scale = if gemma { 1.0 / float(o, "query_pre_attn_scalar", head_dim as f64, &mut problems).sqrt() } else { 1.0 / (head_dim as f64).sqrt() };
    // Gemma 3's text config ties the output to the embedding by default; the others do not.
    let tied = match o.get("tie_word_embeddings") {
        None | Some(Value::Null) => gemma,
        Some(Value::Bool(b)) => *b,
        Some(x) => {
            problems.push(format!("tie_word_embeddings must be true or false, got {x}"));
            false
        }
    };
    let (act_key, act) = if gemma { ("hidden_activation", "gelu_pytorch_tanh") } else { ("hidden_act", "silu") };
    match o.get(act_key) {
        None | Some(Value::Null) => {}
        Some(a) if a.as_str() == Some(act) => {}
        Some(a) => problems.push(format!("{act_key} {a} is not supported (only \"{act}\")")),
    }
    match o.get("rope_scaling") {
        None | Some(Value::Null) => {}
        Some(s) if s.get("rope_type").or_else(|| s.get("type")).and_then(Value::as_str) == Some("default") => {}
        Some(s) => problems.push(format!("rope_scaling {s} is not supported (only none)")),
    }
    let on = |k: &str| o.get(k).and_then(Value::as_bool) == Some(true);
    for key in ["attention_bias", "mlp_bias", "use_sliding_window"] {
        // Qwen 2's q/k/v biases are part of its architecture, whatever the key says.
        if on(key) && !(arch == Arch::Qwen2 && key == "attention_bias") {
            problems.push(format!("{key} true is not supported"));
        }
    }
    for key in ["final_logit_softcapping", "attn_logit_softcapping"] {
        if o.get(key).is_some_and(|x| !x.is_null()) {
            problems.push(format!("{key} {} is not supported (only null)", o[key]));
        }
    }
    if !heads.is_multiple_of(kv_heads) {
        problems.push(format!("num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"));
    }
    if !head_dim.is_multiple_of(2) {
        problems.push(format!("head_dim {head_dim} must be even for RoPE"));
    }
    if !problems.is_empty() {
        return Err(problems.join("\n  "));
    }
    let cfg = LlmConfig {
        arch,
        hidden,
        layers,
        ffn,
        heads,
        kv_heads,
        head_dim,
        vocab,
        context,
        eps,
        attn_scale,
        rope_base,
        rope: RopeStyle::Neox,
        sliding_window: window,
        rope_base_local,
        swa_period: period,
    };
    Ok((cfg, tied))
}

/// A positive integer key (`default` when absent).
fn int(o: &Map<String, Value>, key: &str, default: Option<usize>, problems: &mut Vec<String>) -> usize {
    match o.get(key).filter(|v| !v.is_null()) {
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 && n < (1 << 32) => n as usize,
            _ => {
                problems.push(format!("{key} must be a positive integer, got {v}"));
                1
            }
        },
        None => default.unwrap_or_else(|| {
            problems.push(format!("{key} is missing"));
            1
        }),
    }
}

/// A positive finite number key (`default` when absent).
fn float(o: &Map<String, Value>, key: &str, default: f64, problems: &mut Vec<String>) -> f64 {
    match o.get(key) {
        None | Some(Value::Null) => default,
        Some(v) => match v.as_f64() {
            Some(x) if x > 0.0 && x.is_finite() => x,
            _ => {
                problems.push(format!("{key} must be a positive number, got {v}"));
                default
            }
        },
    }
}

/// Gemma 3's global-layer period: every `sliding_window_pattern`-th layer is global (default 6), or
/// `layer_types` (newer configs) when it follows such a period.
fn gemma_period(o: &Map<String, Value>, layers: usize, problems: &mut Vec<String>) -> usize {
    let period = int(o, "sliding_window_pattern", Some(6), problems);
    let Some(types) = o.get("layer_types").filter(|t| !t.is_null()) else { return period };
    let Some(types) = types.as_array().filter(|t| t.len() == layers) else {
        problems.push(format!("layer_types must list num_hidden_layers ({layers}) strings"));
        return period;
    };
    let global: Vec<bool> = types.iter().map(|t| t.as_str() == Some("full_attention")).collect();
    if let Some(bad) = types.iter().find(|t| !matches!(t.as_str(), Some("full_attention" | "sliding_attention"))) {
        problems.push(format!("layer_types: {bad} is not \"full_attention\" or \"sliding_attention\""));
        return period;
    }
    // The period is the first global layer's number; every layer must follow it.
    let p = global.iter().position(|&g| g).map_or(layers + 1, |i| i + 1);
    if global.iter().enumerate().any(|(i, &g)| g != ((i + 1) % p == 0)) {
        problems.push("layer_types: the full-attention layers are not every n-th layer (not supported)".to_string());
    }
    p
}

/// A Hugging Face checkpoint read for the builder: its config and its tensors under GGUF names.
pub struct HfCheckpoint {
    pub config: LlmConfig,
    /// GGUF name → (Hugging Face name, tensor); Gemma's norms already 1 + w.
    tensors: HashMap<String, (String, ConstData)>,
}

impl Weights for HfCheckpoint {
    fn tensor(&self, name: &str) -> Option<&ConstData> {
        self.tensors.get(name).map(|t| &t.1)
    }
    fn shown(&self, name: &str) -> String {
        hf_name(self.config.arch, name).unwrap_or_else(|| name.to_string())
    }
}

impl HfCheckpoint {
    /// Reads a checkpoint folder (or the `model.safetensors` / index file in it). Errors name the file
    /// and the key or tensor at fault.
    pub fn load(path: &Path) -> Result<HfCheckpoint, String> {
        let dir = if path.is_dir() { path } else { path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")) };
        let cfg_path = dir.join("config.json");
        let text = std::fs::read_to_string(&cfg_path).map_err(|e| format!("{}: cannot read: {e}", cfg_path.display()))?;
        let (config, tied) = hf_config(&text).map_err(|e| format!("{}: {e}", cfg_path.display()))?;
        let arch = config.arch;
        let mut tensors = HashMap::new();
        let mut problems = Vec::new();
        for file in shards(dir)? {
            for (name, data) in rlx_import::safetensors::load_safetensors(&file)? {
                let Some(g) = gguf_name(arch, &name) else { continue };
                if g == "output.weight" && tied {
                    continue; // the embedding is the output matrix
                }
                if !matches!(data.dtype, DType::F32 | DType::F16 | DType::BF16) {
                    problems.push(format!("{}: tensor '{name}' is {}; a language model's tensors must be F32, F16 or BF16", file.display(), data.dtype));
                    continue;
                }
                let data = if arch == Arch::Gemma3 && g.ends_with("norm.weight") {
                    // Gemma3RMSNorm: x̂ · (1 + w), in f32.
                    let w: Vec<f32> = data.to_f64_vec().into_iter().map(|w| 1.0 + w as f32).collect();
                    ConstData::from_f32(data.shape.clone(), &w)
                } else {
                    data
                };
                tensors.insert(g, (name, data));
            }
        }
        let (h, v) = (config.hidden, config.vocab);
        match tensors.get("token_embd.weight") {
            Some((n, t)) if t.shape != [v, h] => problems.push(format!("tensor '{n}' has shape {:?}, expected [vocab_size {v}, hidden_size {h}]", t.shape)),
            Some(_) => {}
            None => problems.push("tensor 'model.embed_tokens.weight' is missing".to_string()),
        }
        if !tied && !tensors.contains_key("output.weight") {
            problems.push("tensor 'lm_head.weight' is missing (config.json: tie_word_embeddings is false)".to_string());
        }
        if !problems.is_empty() {
            return Err(format!("{}: {}", dir.display(), problems.join("\n  ")));
        }
        Ok(HfCheckpoint { config, tensors })
    }
}

/// The safetensors files of a checkpoint folder: `model.safetensors`, or the shards its
/// `model.safetensors.index.json` lists.
fn shards(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index)
        .map_err(|e| format!("{}: neither model.safetensors nor model.safetensors.index.json can be read ({e})", dir.display()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: not valid JSON: {e}", index.display()))?;
    let map = v.get("weight_map").and_then(Value::as_object).ok_or_else(|| format!("{}: weight_map is missing", index.display()))?;
    let mut files = BTreeSet::new();
    for (t, f) in map {
        match f.as_str() {
            Some(f) if !f.contains('/') && !f.contains('\\') && f != ".." => files.insert(dir.join(f)),
            _ => return Err(format!("{}: weight_map['{t}'] must be a file name in the folder, got {f}", index.display())),
        };
    }
    Ok(files.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_both_ways() {
        for arch in [Arch::Llama, Arch::Gemma3] {
            for (g, _) in layer_names(arch) {
                let g = format!("blk.7.{g}");
                assert_eq!(gguf_name(arch, &hf_name(arch, &g).unwrap()).as_deref(), Some(g.as_str()));
            }
        }
        assert_eq!(hf_name(Arch::Llama, "blk.2.ffn_norm.weight").unwrap(), "model.layers.2.post_attention_layernorm.weight");
        assert_eq!(hf_name(Arch::Gemma3, "blk.2.ffn_norm.weight").unwrap(), "model.layers.2.pre_feedforward_layernorm.weight");
        assert_eq!(gguf_name(Arch::Llama, "model.layers.0.self_attn.rotary_emb.inv_freq"), None);
    }

    #[test]
    fn config_problems_name_their_keys() {
        let e = hf_config(r#"{"model_type": "mamba"}"#).unwrap_err();
        assert!(e.contains("model_type 'mamba' is not supported"), "{e}");
        let e = hf_config(r#"{"model_type": "qwen3", "hidden_size": 0, "rope_scaling": {"rope_type": "yarn"}}"#).unwrap_err();
        for k in ["hidden_size must be a positive integer", "num_hidden_layers is missing", "vocab_size is missing", "rope_scaling"] {
            assert!(e.contains(k), "{e}");
        }
        let base = r#""hidden_size": 8, "num_hidden_layers": 12, "intermediate_size": 16, "num_attention_heads": 2, "vocab_size": 10, "sliding_window": 4, "query_pre_attn_scalar": 16"#;
        let (c, tied) = hf_config(&format!(r#"{{"model_type": "gemma3_text", {base}}}"#)).unwrap();
        assert!(tied && c.rope == RopeStyle::Neox && c.is_local(4) && !c.is_local(5));
        assert!((c.attn_scale - 0.25).abs() < 1e-12 && c.rope_base == 1e6);
        let types: Vec<&str> = (0..12).map(|i| if (i + 1) % 3 == 0 { "\"full_attention\"" } else { "\"sliding_attention\"" }).collect();
        let (c, _) = hf_config(&format!(r#"{{"model_type": "gemma3_text", {base}, "layer_types": [{}]}}"#, types.join(","))).unwrap();
        assert_eq!(c.swa_period, 3);
    }
}
