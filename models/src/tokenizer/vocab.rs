//! The tokenizer's input: plain data named after GGUF's `tokenizer.ggml.*` metadata keys, so the
//! GGUF importer (or a test, or a `tokenizer.json` reader) fills it without this crate reading files.
//!
//! Optional fields are `None` when the key is absent; `Tokenizer::new` then applies the defaults
//! llama.cpp applies for that tokenizer model (see each field).

/// `tokenizer.ggml.model`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerModel {
    /// `"llama"`: SentencePiece-style — score-driven merges of UTF-8 characters, `▁` for spaces,
    /// `<0xNN>` byte fallback (LLaMA 1/2, Mistral, Gemma).
    Spm,
    /// `"gpt2"`: byte-level BPE — GPT-2 byte↔unicode map, merges by rank, a regex pre-tokenizer
    /// named by `tokenizer.ggml.pre` (GPT-2, LLaMA 3, Qwen 2/3).
    Bpe,
}

impl TokenizerModel {
    /// Maps the `tokenizer.ggml.model` string; other models (bert, t5, rwkv, …) are not supported.
    pub fn from_gguf(name: &str) -> Result<TokenizerModel, String> {
        match name {
            "llama" => Ok(TokenizerModel::Spm),
            "gpt2" => Ok(TokenizerModel::Bpe),
            other => Err(format!(
                "tokenizer.ggml.model = '{other}' is not supported (supported: 'llama' = SentencePiece, 'gpt2' = byte-level BPE)"
            )),
        }
    }
}

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    Undefined = 0,
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
}

impl TokenType {
    /// The GGUF integer; values outside 0..=6 read as `Undefined`, as llama.cpp reads them.
    pub fn from_gguf(v: i32) -> TokenType {
        match v {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }
}

/// A vocabulary as GGUF stores it. Index `i` of `tokens`, `scores` and `types` is token id `i`.
#[derive(Clone, Debug, PartialEq)]
pub struct Vocab {
    /// `tokenizer.ggml.model`.
    pub model: TokenizerModel,
    /// `tokenizer.ggml.pre`: the BPE pre-tokenizer (`"qwen2"`, `"llama-bpe"`, `"gpt-2"`, `"default"`, …).
    /// Ignored for SentencePiece. `None` reads as `"default"`.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`: each token's text (SentencePiece: `▁` for a space, `<0xNN>` byte
    /// tokens; BPE: GPT-2's byte-as-unicode characters, `Ġ` for a space).
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.scores` (SentencePiece merge priority: higher merges first). Empty = all 0.
    pub scores: Vec<f32>,
    /// `tokenizer.ggml.token_type`. Empty = all `Normal`.
    pub types: Vec<TokenType>,
    /// `tokenizer.ggml.merges`: BPE merges, `"left right"`, in rank order (first = merged first).
    /// Required for BPE, ignored for SentencePiece.
    pub merges: Vec<String>,
    /// `tokenizer.ggml.bos_token_id` (SentencePiece default 1).
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id` (SentencePiece default 2).
    pub eos: Option<u32>,
    /// `tokenizer.ggml.eot_token_id` (end of turn; else found by its text, e.g. `<end_of_turn>`, `<|im_end|>`).
    pub eot: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id` (SentencePiece default 0).
    pub unk: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad: Option<u32>,
    /// `tokenizer.ggml.add_bos_token` (default: true for SentencePiece and the `llama-bpe` pre-tokenizer, else false).
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token` (default false).
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix` (default: true for SentencePiece, false for BPE). Gemma 3 sets false.
    pub add_space_prefix: Option<bool>,
}

impl Vocab {
    /// A vocabulary with the given model and tokens and every other key absent.
    pub fn new(model: TokenizerModel, tokens: Vec<String>) -> Vocab {
        Vocab {
            model,
            pre: None,
            tokens,
            scores: Vec::new(),
            types: Vec::new(),
            merges: Vec::new(),
            bos: None,
            eos: None,
            eot: None,
            unk: None,
            pad: None,
            add_bos: None,
            add_eos: None,
            add_space_prefix: None,
        }
    }
}
