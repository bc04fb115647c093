//! The byte-level BPE pre-tokenizer named by `tokenizer.ggml.pre`: regexes that split text into
//! words before merging (the patterns of the models' `tokenizer.json`, as llama.cpp lists them).
//! Each regex splits every piece the previous one left into its matches and the text between.
//! fancy-regex runs them: the patterns need look-ahead (`\s+(?!\S)`), which `regex` lacks.

use fancy_regex::Regex;

const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const DEFAULT: &[&str] = &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"];

#[derive(Debug)]
pub(crate) struct PreTokenizer {
    name: String,
    regexes: Vec<Regex>,
    /// LLaMA 3: a word that is already a token is emitted whole, without merging.
    pub(crate) ignore_merges: bool,
}

impl PreTokenizer {
    /// The pre-tokenizers supported: `default`, `gpt-2`, `llama-bpe` (`llama3`, `llama-v3`),
    /// `qwen2` (`deepseek-r1-qwen`). Anything else is an error naming the key.
    pub(crate) fn named(name: &str) -> Result<PreTokenizer, String> {
        let (patterns, ignore_merges): (&[&str], bool) = match name {
            "default" => (DEFAULT, false),
            "gpt-2" | "phi-2" => (&[GPT2], false),
            "llama3" | "llama-v3" | "llama-bpe" => (&[LLAMA3], true),
            "qwen2" | "deepseek-r1-qwen" => (&[QWEN2], false),
            other => {
                return Err(format!(
                    "tokenizer.ggml.pre = '{other}' is not supported (supported: default, gpt-2, llama-bpe, qwen2)"
                ))
            }
        };
        let regexes = patterns
            .iter()
            .map(|p| Regex::new(p).map_err(|e| format!("pre-tokenizer '{name}': regex {p:?}: {e}")))
            .collect::<Result<_, _>>()?;
        Ok(PreTokenizer { name: name.to_string(), regexes, ignore_merges })
    }

    /// llama.cpp adds BOS by default for LLaMA 3's pre-tokenizer only.
    pub(crate) fn add_bos_default(&self) -> bool {
        self.ignore_merges
    }

    /// llama.cpp's detokenizer clean-up is off for Qwen 2.
    pub(crate) fn clean_spaces(&self) -> bool {
        !matches!(self.name.as_str(), "qwen2" | "deepseek-r1-qwen")
    }

    /// Splits `text` into words (each a slice of `text`, in order, covering it).
    pub(crate) fn split<'a>(&self, text: &'a str) -> Vec<&'a str> {
        let mut pieces = vec![text];
        for re in &self.regexes {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            for p in pieces {
                let mut at = 0;
                for m in re.find_iter(p) {
                    // A backtracking limit hit on a pathological input: keep the rest as one word.
                    let Ok(m) = m else { break };
                    if m.start() > at {
                        next.push(&p[at..m.start()]);
                    }
                    if m.end() > m.start() {
                        next.push(m.as_str());
                    }
                    at = m.end();
                }
                if at < p.len() {
                    next.push(&p[at..]);
                }
            }
            pieces = next;
        }
        pieces
    }
}
