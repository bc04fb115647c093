//! LLaMA-family hyperparameters from GGUF metadata (`{arch}.embedding_length`, …), checked against the
//! tensors, every problem listed at once.

use rlx_import::gguf::GgufFile;

/// How RoPE pairs dimensions: `Norm` rotates adjacent pairs (x[2i], x[2i+1]) — llama.cpp's
/// LLAMA_ROPE_TYPE_NORM, used for GGUF `llama` files (its converter permutes q/k to match) —, `Neox`
/// rotates halves (x[i], x[i+d/2]) — qwen2, qwen3, gemma3, and every Hugging Face checkpoint (its
/// `rotate_half`; llama's q/k unpermuted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    Norm,
    Neox,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LlmConfig {
    pub arch: Arch,
    pub hidden: usize,
    pub layers: usize,
    pub ffn: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
    pub context: usize,
    pub eps: f64,
    /// The factor on q·k before the softmax: 1/sqrt(head_dim), or Gemma 3's
    /// 1/sqrt(query_pre_attn_scalar) from a Hugging Face config.
    pub attn_scale: f64,
    pub rope_base: f64,
    pub rope: RopeStyle,
    /// Gemma 3: the sliding window of local layers, their RoPE base, and the global-layer period
    /// (every `swa_period`-th layer is global).
    pub sliding_window: Option<usize>,
    pub rope_base_local: f64,
    pub swa_period: usize,
}

impl LlmConfig {
    /// True when layer `i` attends within the sliding window (Gemma 3's local layers).
    pub fn is_local(&self, i: usize) -> bool {
        self.sliding_window.is_some() && (i + 1) % self.swa_period != 0
    }

    pub fn from_gguf(f: &GgufFile) -> Result<LlmConfig, String> {
        let a = f.architecture().to_string();
        let arch = match a.as_str() {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "gemma3" => Arch::Gemma3,
            "" => return Err("general.architecture is missing".into()),
            other => return Err(format!("architecture '{other}' is not supported (llama, qwen2, qwen3, gemma3)")),
        };
        let mut problems = Vec::new();
        let mut int = |key: &str, default: Option<usize>| -> usize {
            let full = format!("{a}.{key}");
            match f.get(&full).map(|v| v.as_u64()) {
                Some(Some(n)) if n > 0 && n < (1 << 32) => n as usize,
                Some(_) => {
                    problems.push(format!("{full} must be a positive integer"));
                    1
                }
                None => default.unwrap_or_else(|| {
                    problems.push(format!("{full} is missing"));
                    1
                }),
            }
        };
        let hidden = int("embedding_length", None);
        let layers = int("block_count", None);
        let ffn = int("feed_forward_length", None);
        let heads = int("attention.head_count", None);
        let kv_heads = int("attention.head_count_kv", Some(heads));
        let head_dim = int("attention.key_length", Some(hidden / heads.max(1)));
        let value_dim = int("attention.value_length", Some(head_dim));
        let rope_dim = int("rope.dimension_count", Some(head_dim));
        let context = int("context_length", Some(2048));
        let window = if arch == Arch::Gemma3 { Some(int("attention.sliding_window", None)) } else { None };
        let float = |key: &str, default: f64| f.get(&format!("{a}.{key}")).and_then(|v| v.as_f64()).unwrap_or(default);
        let eps = float("attention.layer_norm_rms_epsilon", 1e-6);
        let rope_base = float("rope.freq_base", 10000.0);
        if value_dim != head_dim {
            problems.push(format!("{a}.attention.value_length {value_dim} differs from key_length {head_dim} (not supported)"));
        }
        if rope_dim != head_dim {
            problems.push(format!("{a}.rope.dimension_count {rope_dim} differs from the head size {head_dim} (partial RoPE is not supported)"));
        }
        if heads % kv_heads != 0 {
            problems.push(format!("{a}.attention.head_count {heads} is not a multiple of head_count_kv {kv_heads}"));
        }
        if head_dim % 2 != 0 {
            problems.push(format!("head size {head_dim} must be even for RoPE"));
        }
        if let Some(s) = f.get(&format!("{a}.rope.scaling.type")).and_then(|v| v.as_str()) {
            if s != "none" {
                problems.push(format!("{a}.rope.scaling.type '{s}' is not supported"));
            }
        }
        let vocab = match f.tensor("token_embd.weight") {
            Some(t) if t.data.shape.len() == 2 && t.data.shape[1] == hidden => t.data.shape[0],
            Some(t) => {
                problems.push(format!("tensor 'token_embd.weight' has shape {:?}, expected [vocab, {hidden}]", t.data.shape));
                0
            }
            None => {
                problems.push("tensor 'token_embd.weight' is missing".into());
                0
            }
        };
        if !problems.is_empty() {
            return Err(problems.join("\n  "));
        }
        Ok(LlmConfig {
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
            // llama.cpp's scale for these architectures (Gemma 3 270M..12B: query_pre_attn_scalar = head_dim).
            attn_scale: 1.0 / (head_dim as f64).sqrt(),
            rope_base,
            rope: if arch == Arch::Llama { RopeStyle::Norm } else { RopeStyle::Neox },
            sliding_window: window,
            // llama.cpp's gemma3: local layers use rope.freq_base_swa (default 10000); every 6th layer
            // is global (5 local : 1 global).
            rope_base_local: float("rope.freq_base_swa", 10000.0),
            swa_period: 6,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_import::gguf::{GgufTensor, GgufValue};
    use rlx_ir::{Blob, ConstData, DType};

    fn file(arch: &str, keys: &[(&str, u64)]) -> GgufFile {
        let mut metadata: Vec<(String, GgufValue)> = keys.iter().map(|(k, v)| (format!("{arch}.{k}"), GgufValue::UInt(*v))).collect();
        metadata.push(("general.architecture".into(), GgufValue::Str(arch.into())));
        metadata.sort_by(|a, b| a.0.cmp(&b.0));
        let emb = ConstData::new(DType::F32, vec![10, 8], Blob::from_vec(vec![0; 320])).unwrap();
        GgufFile { version: 3, alignment: 32, data_offset: 0, metadata, tensors: vec![GgufTensor { name: "token_embd.weight".into(), data: emb, offset: 0 }] }
    }

    const KEYS: [(&str, u64); 5] =
        [("embedding_length", 8), ("block_count", 12), ("feed_forward_length", 16), ("attention.head_count", 2), ("attention.sliding_window", 4)];

    #[test]
    fn gemma3_layers_alternate_five_local_one_global() {
        let c = LlmConfig::from_gguf(&file("gemma3", &KEYS)).unwrap();
        let local: Vec<bool> = (0..12).map(|i| c.is_local(i)).collect();
        assert_eq!(local, [true, true, true, true, true, false, true, true, true, true, true, false]);
        assert_eq!((c.vocab, c.head_dim, c.kv_heads, c.rope), (10, 4, 2, RopeStyle::Neox));
        let l = LlmConfig::from_gguf(&file("llama", &KEYS)).unwrap();
        assert!(!l.is_local(0) && l.rope == RopeStyle::Norm);
    }

    #[test]
    fn problems_are_listed_together() {
        let e = LlmConfig::from_gguf(&file("qwen3", &KEYS[..1])).unwrap_err();
        for k in ["qwen3.block_count is missing", "qwen3.feed_forward_length is missing", "qwen3.attention.head_count is missing"] {
            assert!(e.contains(k), "{e}");
        }
        let e = LlmConfig::from_gguf(&file("mamba", &KEYS)).unwrap_err();
        assert!(e.contains("architecture 'mamba' is not supported"), "{e}");
    }
}
