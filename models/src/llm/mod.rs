//! LLaMA-family language models (`llama`, `qwen2`, `qwen3`, `gemma3`) from a GGUF file or a Hugging
//! Face checkpoint folder (`config.json` + safetensors): the hyperparameters from the GGUF metadata
//! (`config.rs`) or the `config.json` (`hf.rs`), the graph from the tensors (`graph.rs`, one builder
//! for both: it reads tensors by their GGUF names through [`Weights`]), weights left in their GGUF
//! blocks; the vocabulary from a GGUF file's `tokenizer.ggml.*` keys (`vocab.rs`).

mod config;
mod graph;
mod hf;
mod vocab;

pub use config::{Arch, LlmConfig, RopeStyle};
pub use hf::{hf_config, HfCheckpoint, HF_MODEL_TYPES};
pub use vocab::vocab_from_gguf;

use rlx_import::gguf::GgufFile;
use rlx_ir::{ConstData, Hir};
use std::path::Path;

/// The tensors a builder reads, by their GGUF names (`blk.0.attn_q.weight`).
pub trait Weights {
    fn tensor(&self, name: &str) -> Option<&ConstData>;
    /// How an error names tensor `name`: the checkpoint's own name for it.
    fn shown(&self, name: &str) -> String {
        name.to_string()
    }
}

impl Weights for GgufFile {
    fn tensor(&self, name: &str) -> Option<&ConstData> {
        GgufFile::tensor(self, name).map(|t| &t.data)
    }
}

/// A language model's file: GGUF, or a Hugging Face checkpoint folder.
pub enum Checkpoint {
    Gguf(GgufFile),
    Hf(HfCheckpoint),
}

impl Checkpoint {
    /// Reads `path`: a `.gguf` file, or a folder (or its `model.safetensors`) with `config.json`.
    pub fn open(path: &Path) -> Result<Checkpoint, String> {
        if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
            return rlx_import::gguf::load_gguf(path).map(Checkpoint::Gguf);
        }
        HfCheckpoint::load(path).map(Checkpoint::Hf)
    }
    pub fn config(&self) -> Result<LlmConfig, String> {
        match self {
            Checkpoint::Gguf(f) => LlmConfig::from_gguf(f),
            Checkpoint::Hf(h) => Ok(h.config.clone()),
        }
    }
    pub fn weights(&self) -> &dyn Weights {
        match self {
            Checkpoint::Gguf(f) => f,
            Checkpoint::Hf(h) => h,
        }
    }
    /// The GGUF file's vocabulary (`None`: a file without one, or a Hugging Face folder — its
    /// `tokenizer.json` is not read).
    pub fn vocab(&self) -> Result<Option<crate::Vocab>, String> {
        match self {
            Checkpoint::Gguf(f) => vocab_from_gguf(f),
            Checkpoint::Hf(_) => Ok(None),
        }
    }
    /// The stateless full-sequence graph (`tokens`, `positions` → `logits`).
    pub fn graph(&self) -> Result<(LlmConfig, Hir), String> {
        let cfg = self.config()?;
        let g = graph::build(&cfg, self.weights())?;
        Ok((cfg, g))
    }
    /// One cached step: `chunk` tokens per call, caches of `context` positions as the graph's state.
    pub fn step(&self, chunk: usize, context: usize) -> Result<(LlmConfig, Hir), String> {
        let cfg = self.config()?;
        let g = graph::build_step(&cfg, self.weights(), chunk, context)?;
        Ok((cfg, g))
    }
}

/// Builds the stateless full-sequence graph (`tokens`, `positions` → `logits`) of a GGUF model.
pub fn llm_from_gguf(f: &GgufFile) -> Result<(LlmConfig, Hir), String> {
    let cfg = LlmConfig::from_gguf(f)?;
    let g = graph::build(&cfg, f)?;
    Ok((cfg, g))
}

/// Builds one cached step of a GGUF model: `chunk` tokens per call, caches of `context` positions as
/// the graph's state (see `graph.rs`).
pub fn llm_step_from_gguf(f: &GgufFile, chunk: usize, context: usize) -> Result<(LlmConfig, Hir), String> {
    let cfg = LlmConfig::from_gguf(f)?;
    let g = graph::build_step(&cfg, f, chunk, context)?;
    Ok((cfg, g))
}
