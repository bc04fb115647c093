//! The generation loop: prefill the prompt, then sample a token, hand it to the caller (who streams
//! it), decode it, and again — until `max_new` tokens, an end-of-generation token, or the context
//! is full. Prefill and decode are timed apart.

use super::{Sampler, Step};
use crate::cli::Failure;
use std::time::{Duration, Instant};

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// `max_new` tokens were generated.
    Length,
    /// The model produced this end-of-generation token (it is the last token handed out).
    EndOfGeneration(i64),
    /// The context holds no more positions.
    Context,
}

#[derive(Clone, Debug)]
pub struct Stats {
    pub prompt_tokens: usize,
    pub prefill: Duration,
    /// Tokens handed out (the end-of-generation token included).
    pub generated: usize,
    /// `decode` calls and their total time (the first generated token comes from the prefill).
    pub decode_steps: usize,
    pub decode: Duration,
    pub stop: Stop,
}

/// Generates up to `max_new` tokens after `prompt`, calling `emit` with each as soon as it is chosen.
/// `is_eog`: whether a token ends generation (the vocabulary's EOS/EOT; never, without a vocabulary).
pub fn generate(
    step: &mut dyn Step,
    prompt: &[i64],
    max_new: usize,
    sampler: &mut Sampler,
    is_eog: &dyn Fn(i64) -> bool,
    emit: &mut dyn FnMut(i64) -> Result<(), Failure>,
) -> Result<Stats, Failure> {
    let context = step.context();
    if prompt.is_empty() {
        return Err(Failure::usage("the prompt is empty: it has no tokens"));
    }
    if prompt.len() > context {
        return Err(Failure::usage(format!("the prompt is {} tokens, longer than the model's context of {context}", prompt.len())));
    }
    let t = Instant::now();
    let mut logits = step.prefill(prompt)?;
    let mut stats =
        Stats { prompt_tokens: prompt.len(), prefill: t.elapsed(), generated: 0, decode_steps: 0, decode: Duration::ZERO, stop: Stop::Length };
    let mut pos = prompt.len();
    while stats.generated < max_new {
        let tok = sampler.sample(&logits).map_err(|e| Failure::model(format!("at position {pos}: {e}")))?;
        stats.generated += 1;
        emit(tok)?;
        if is_eog(tok) {
            stats.stop = Stop::EndOfGeneration(tok);
            break;
        }
        if stats.generated == max_new {
            break;
        }
        if pos >= context {
            stats.stop = Stop::Context;
            break;
        }
        let t = Instant::now();
        logits = step.decode(tok, pos)?;
        stats.decode += t.elapsed();
        stats.decode_steps += 1;
        pos += 1;
    }
    Ok(stats)
}

impl Stats {
    /// "prefill 6 tokens in 1.20 s (5.00 tokens/s); decode 7 tokens in 9.80 s (0.71 tokens/s); stopped: …"
    pub fn line(&self, eog_name: &dyn Fn(i64) -> String) -> String {
        let rate = |n: usize, d: Duration| {
            let s = d.as_secs_f64();
            if n == 0 || s == 0.0 {
                String::from("-")
            } else {
                format!("{:.2}", n as f64 / s)
            }
        };
        let stop = match self.stop {
            Stop::Length => format!("{} tokens generated", self.generated),
            Stop::EndOfGeneration(t) => format!("end of generation ({}) after {} tokens", eog_name(t), self.generated),
            Stop::Context => format!("the context is full after {} tokens", self.generated),
        };
        format!(
            "prefill {} tokens in {:.2} s ({} tokens/s); decode {} tokens in {:.2} s ({} tokens/s); stopped: {stop}",
            self.prompt_tokens,
            self.prefill.as_secs_f64(),
            rate(self.prompt_tokens, self.prefill),
            self.decode_steps,
            self.decode.as_secs_f64(),
            rate(self.decode_steps, self.decode),
        )
    }
}
