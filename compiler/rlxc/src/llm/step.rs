//! What generation needs from an executor: the next token's logits after a prompt, then after each
//! token appended. The interpreter (`interp.rs`, full recompute) is one implementation; a compiled
//! KV-cache artifact is another. Generation and sampling never ask which one runs.

use crate::cli::Failure;

pub trait Step {
    /// What runs the model, for the timing line (e.g. "the interpreter, full recompute per token").
    fn describe(&self) -> String;
    /// The most positions the model holds: prompt plus generated tokens.
    fn context(&self) -> usize;
    /// Runs `tokens` at positions `0..tokens.len()` from an empty state (a previous sequence is
    /// forgotten); returns the logits (vocabulary-long) at the last position.
    fn prefill(&mut self, tokens: &[i64]) -> Result<Vec<f32>, Failure>;
    /// Appends `token` at position `pos` (the number of tokens so far, `< context()`); returns its
    /// logits.
    fn decode(&mut self, token: i64, pos: usize) -> Result<Vec<f32>, Failure>;
}
