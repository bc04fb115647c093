//! `rlxc tokenize model.gguf TEXT` and `rlxc detokenize model.gguf ID,ID,…`: a GGUF model's own
//! tokenizer on the command line (the same `rlx_models::Tokenizer` that `rlxc run --prompt` uses),
//! for programs that link a compiled language model, which takes and gives token ids.

use crate::Failure;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct TokenizeArgs {
    /// The GGUF model whose vocabulary tokenizes
    pub model: PathBuf,
    /// The text
    pub text: String,
    /// Do not add the BOS token (added when the model's metadata asks for it, as `rlxc run --prompt` does)
    #[arg(long)]
    pub no_bos: bool,
    /// Read special tokens such as <start_of_turn> as plain text, not as their ids
    #[arg(long)]
    pub no_special: bool,
}

#[derive(clap::Args)]
pub struct DetokenizeArgs {
    /// The GGUF model whose vocabulary detokenizes
    pub model: PathBuf,
    /// Token ids, e.g. 2,818,5279
    #[arg(value_name = "ID,ID,…", value_delimiter = ',', required = true)]
    pub ids: Vec<i64>,
    /// Print control tokens (<bos>, <end_of_turn> …) as their text; by default they print nothing
    #[arg(long)]
    pub special: bool,
}

/// Prints the ids comma-separated on one line.
pub fn tokenize(a: &TokenizeArgs) -> Result<(), Failure> {
    let tok = crate::cmd_llm::require_tokenizer(&a.model)?;
    let ids = tok.encode(&a.text, !a.no_bos, !a.no_special);
    println!("{}", ids.iter().map(u32::to_string).collect::<Vec<_>>().join(","));
    Ok(())
}

/// Prints the text of the ids (no newline added, so the text comes out exactly).
pub fn detokenize(a: &DetokenizeArgs) -> Result<(), Failure> {
    use std::io::Write;
    let tok = crate::cmd_llm::require_tokenizer(&a.model)?;
    let n = tok.n_vocab();
    let ids: Vec<u32> = a
        .ids
        .iter()
        .map(|&t| u32::try_from(t).ok().filter(|&u| (u as usize) < n).ok_or_else(|| Failure::usage(format!("token id {t} is outside the vocabulary (0..{n})"))))
        .collect::<Result<_, _>>()?;
    let bytes = tok.decode_bytes(&ids, false, a.special);
    let mut out = std::io::stdout().lock();
    out.write_all(&bytes).and_then(|()| out.flush()).map_err(|e| Failure::model(format!("cannot write to stdout: {e}")))
}
