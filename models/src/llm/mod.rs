//! LLaMA-family language models (`llama`, `qwen2`, `qwen3`, `gemma3`) from a GGUF file: the
//! hyperparameters from its metadata (`config.rs`), the graph from its tensors (`graph.rs`), weights
//! left in their GGUF blocks; the vocabulary from its `tokenizer.ggml.*` keys (`vocab.rs`).

mod config;
mod graph;
mod vocab;

pub use config::{Arch, LlmConfig, RopeStyle};
pub use vocab::vocab_from_gguf;

use rlx_import::gguf::GgufFile;
use rlx_ir::Hir;

/// Builds the stateless full-sequence graph (`tokens`, `positions` → `logits`) of a GGUF model.
pub fn llm_from_gguf(f: &GgufFile) -> Result<(LlmConfig, Hir), String> {
    let cfg = LlmConfig::from_gguf(f)?;
    let g = graph::build(&cfg, f)?;
    Ok((cfg, g))
}
