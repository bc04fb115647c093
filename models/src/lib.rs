//! rlx-models: builders that turn weight-only checkpoints (a `config.json` plus `model.safetensors`)
//! into HIR graphs, and LLaMA-family language models from GGUF files (`llm`). Each builder names its nodes after the source framework's module paths
//! (`encoder.layer.3.attention.self`), so every later diagnostic points back at the model.
//! `tokenizer` turns text into a language model's token ids and back, from the model's own vocabulary.

pub mod bert;
pub mod llm;
pub mod tokenizer;

pub use bert::{bert_from_dir, bert_hir, BertConfig};
pub use tokenizer::{StreamDecoder, TokenType, Tokenizer, TokenizerModel, Vocab};
