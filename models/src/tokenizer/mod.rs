//! Text ⇄ token ids from a model's own vocabulary (GGUF `tokenizer.ggml.*`), matching llama.cpp's
//! tokenization id for id: SentencePiece-style (`llama`: LLaMA 1/2, Gemma) and byte-level BPE
//! (`gpt2`: LLaMA 3, Qwen 2/3).
//!
//! `encode` runs in three steps, as llama.cpp does: special tokens are cut out of the text first
//! (`special.rs`: user-defined tokens always, control tokens when `parse_special`), then each
//! remaining text fragment goes through the model's algorithm (`spm.rs`, or `pretok.rs` + `bpe.rs`),
//! and BOS/EOS are added when `add_special` and the vocabulary asks for them. `decode.rs` turns ids
//! back into bytes and text, including a streaming decoder that holds back partial UTF-8.

mod bpe;
mod bytes;
mod decode;
mod pretok;
mod special;
mod spm;
mod vocab;

pub use decode::StreamDecoder;
pub use vocab::{TokenType, TokenizerModel, Vocab};

use std::collections::HashMap;

/// Token attributes (llama.cpp's `llama_token_attr` subset that tokenization reads).
pub(crate) mod attr {
    pub const NORMAL: u8 = 1;
    pub const UNKNOWN: u8 = 2;
    pub const CONTROL: u8 = 4;
    pub const USER_DEFINED: u8 = 8;
    pub const UNUSED: u8 = 16;
    pub const BYTE: u8 = 32;
}

/// Token texts that end generation (and are treated as control tokens), as llama.cpp lists them.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
];

/// A tokenizer built from a [`Vocab`]. Cheap to share (`&Tokenizer` is all `encode`/`decode` need).
#[derive(Debug)]
pub struct Tokenizer {
    model: TokenizerModel,
    texts: Vec<String>,
    scores: Vec<f32>,
    attrs: Vec<u8>,
    ids: HashMap<String, u32>,
    /// SentencePiece byte fallback: the `<0xNN>` token (or the byte's own one-character token).
    byte_tokens: [Option<u32>; 256],
    /// Control, user-defined and unknown tokens, longest text first: the order they are cut out.
    special_order: Vec<u32>,
    bpe: Option<bpe::Bpe>,
    bos: Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
    unk: Option<u32>,
    pad: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    /// llama.cpp's detokenizer clean-up (" ." → ".", " 's" → "'s", …): on for BPE except `qwen2`.
    clean_spaces: bool,
    eog: Vec<u32>,
}

impl Tokenizer {
    /// Builds the tokenizer. Errors name the GGUF key at fault (array lengths, ids outside the
    /// vocabulary, a missing merge list, an unknown pre-tokenizer); never panics on bad data.
    pub fn new(v: Vocab) -> Result<Tokenizer, String> {
        let n = v.tokens.len();
        if n == 0 {
            return Err("tokenizer.ggml.tokens is empty".into());
        }
        if u32::try_from(n).is_err() {
            return Err(format!("tokenizer.ggml.tokens has {n} entries, more than token ids can address"));
        }
        if !v.scores.is_empty() && v.scores.len() < n {
            return Err(format!("tokenizer.ggml.scores has {} entries for {n} tokens", v.scores.len()));
        }
        if !v.types.is_empty() && v.types.len() < n {
            return Err(format!("tokenizer.ggml.token_type has {} entries for {n} tokens", v.types.len()));
        }
        let spm = v.model == TokenizerModel::Spm;
        let texts: Vec<String> = v
            .tokens
            .into_iter()
            .enumerate()
            .map(|(i, t)| if t.is_empty() { format!("[EMPTY_{i}]") } else { t })
            .collect();
        let scores = if v.scores.is_empty() { vec![0.0; n] } else { v.scores[..n].to_vec() };
        let mut attrs: Vec<u8> = (0..n)
            .map(|i| match v.types.get(i).copied().unwrap_or(TokenType::Normal) {
                TokenType::Normal => attr::NORMAL,
                TokenType::Unknown => attr::UNKNOWN,
                TokenType::Control => attr::CONTROL,
                TokenType::UserDefined => attr::USER_DEFINED,
                TokenType::Unused => attr::UNUSED,
                TokenType::Byte => attr::BYTE,
                TokenType::Undefined => 0,
            })
            .collect();
        // Later duplicates win, as in llama.cpp's text → id map.
        let mut ids = HashMap::with_capacity(n);
        for (i, t) in texts.iter().enumerate() {
            ids.insert(t.clone(), i as u32);
        }

        let check = |key: &str, id: Option<u32>| -> Result<Option<u32>, String> {
            match id {
                Some(i) if i as usize >= n => {
                    Err(format!("tokenizer.ggml.{key} = {i} is outside the vocabulary ({n} tokens)"))
                }
                other => Ok(other),
            }
        };
        let dflt = |id: u32| if spm && (id as usize) < n { Some(id) } else { None };
        let bos = check("bos_token_id", v.bos.or_else(|| dflt(1)))?;
        let eos = check("eos_token_id", v.eos.or_else(|| dflt(2)))?;
        let unk = check("unknown_token_id", v.unk.or_else(|| dflt(0)))?;
        let pad = check("padding_token_id", v.pad)?;
        let mut eot = check("eot_token_id", v.eot)?;

        // Control-looking tokens llama.cpp promotes to control (and to end-of-generation).
        let mut eog: Vec<u32> = eos.into_iter().collect();
        for (i, t) in texts.iter().enumerate() {
            if EOG_TEXTS.contains(&t.as_str()) {
                attrs[i] |= attr::CONTROL;
                eog.push(i as u32);
                if eot.is_none() && t != "<|eom_id|>" {
                    eot = Some(i as u32);
                }
            }
        }
        eog.extend(eot);
        eog.sort_unstable();
        eog.dedup();

        let (bpe, pre_bos, clean_spaces) = match v.model {
            TokenizerModel::Spm => (None, true, false),
            TokenizerModel::Bpe => {
                let pre = pretok::PreTokenizer::named(v.pre.as_deref().unwrap_or("default"))?;
                let (bos_default, clean) = (pre.add_bos_default(), pre.clean_spaces());
                (Some(bpe::Bpe::new(&v.merges, pre)?), bos_default, clean)
            }
        };
        let add_bos = v.add_bos.unwrap_or(pre_bos);
        let add_eos = v.add_eos.unwrap_or(false);
        if add_bos && bos.is_none() {
            return Err("tokenizer.ggml.add_bos_token is set but the vocabulary has no BOS token (tokenizer.ggml.bos_token_id)".into());
        }
        if add_eos && eos.is_none() {
            return Err("tokenizer.ggml.add_eos_token is set but the vocabulary has no EOS token (tokenizer.ggml.eos_token_id)".into());
        }

        let mut byte_tokens = [None; 256];
        if spm {
            for (b, slot) in byte_tokens.iter_mut().enumerate() {
                let hex = format!("<0x{b:02X}>");
                *slot = ids.get(&hex).copied().or_else(|| {
                    char::from_u32(b as u32).filter(|_| b < 128).and_then(|c| ids.get(&c.to_string()).copied())
                });
            }
        }

        let mut special_order: Vec<u32> = (0..n as u32)
            .filter(|&i| attrs[i as usize] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0)
            .collect();
        special_order.sort_by(|&a, &b| texts[b as usize].len().cmp(&texts[a as usize].len()).then(a.cmp(&b)));

        Ok(Tokenizer {
            model: v.model,
            texts,
            scores,
            attrs,
            ids,
            byte_tokens,
            special_order,
            bpe,
            bos,
            eos,
            eot,
            unk,
            pad,
            add_bos,
            add_eos,
            add_space_prefix: v.add_space_prefix.unwrap_or(spm),
            clean_spaces,
            eog,
        })
    }

    /// Text → ids. `add_special`: BOS/EOS as the vocabulary asks (`add_bos`, `add_eos`).
    /// `parse_special`: control tokens written in the text (`<start_of_turn>`) become their ids;
    /// otherwise they are tokenized as plain text. User-defined tokens are always matched.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let fragments = special::partition(self, text, parse_special);
        let mut out = Vec::new();
        if add_special && self.add_bos {
            out.extend(self.bos);
        }
        match &self.bpe {
            None => {
                let mut prev_special = true;
                for f in fragments {
                    match f {
                        special::Fragment::Text(t) => {
                            let mut s = String::with_capacity(t.len() + 3);
                            if self.add_space_prefix && prev_special {
                                s.push(' ');
                            }
                            s.push_str(t);
                            spm::tokenize(self, &s.replace(' ', "\u{2581}"), &mut out);
                            prev_special = false;
                        }
                        special::Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
            }
            Some(bpe) => {
                for f in fragments {
                    match f {
                        special::Fragment::Text(t) => bpe.tokenize(self, t, &mut out),
                        special::Fragment::Token(id) => out.push(id),
                    }
                }
            }
        }
        if add_special && self.add_eos {
            out.extend(self.eos);
        }
        out
    }

    /// The vocabulary size (ids are `0..n_vocab`).
    pub fn n_vocab(&self) -> usize {
        self.texts.len()
    }
    pub fn model(&self) -> TokenizerModel {
        self.model
    }
    /// The token's text as the vocabulary stores it (`None` outside the vocabulary).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.texts.get(id as usize).map(String::as_str)
    }
    /// The id of a token text, e.g. `"<start_of_turn>"`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }
    pub fn eot(&self) -> Option<u32> {
        self.eot
    }
    pub fn unk(&self) -> Option<u32> {
        self.unk
    }
    pub fn pad(&self) -> Option<u32> {
        self.pad
    }
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }
    pub fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }
    /// Whether generating this id ends the text: EOS, EOT and the end-of-turn tokens llama.cpp
    /// recognizes by text (`<end_of_turn>`, `<|im_end|>`, `<|eot_id|>`, `<|endoftext|>`, …).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }
    /// The end-of-generation ids, ascending.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }
    /// Whether the id is a control token (BOS, `<start_of_turn>`, …).
    pub fn is_control(&self, id: u32) -> bool {
        self.attr(id) & attr::CONTROL != 0
    }

    pub(crate) fn attr(&self, id: u32) -> u8 {
        self.attrs.get(id as usize).copied().unwrap_or(0)
    }
    pub(crate) fn score(&self, id: u32) -> f32 {
        self.scores.get(id as usize).copied().unwrap_or(0.0)
    }
}
