//! [`Step`] on any compiled cached step (`tokens`, `positions` i64[chunk] → `logits` f32[1, vocab] of
//! the chunk's last row, the KV cache as state; docs/targets.md "Stateful artifacts"), whatever runs
//! it: a [`Runner`] executes one call and zeroes the state, [`Chunked`] does the rest — prefill in
//! chunks, one-token decode, the checks. A call's tokens fill the chunk's last rows; the rows before
//! them are padding at position `context`, which writes nothing to the state.

use super::Step;
use crate::cli::Failure;
use rlx_ir::lir::Lir;
use rlx_ir::DType;

/// What executes a compiled cached step: the CPU artifact loaded in process (`compiled.rs`) or the
/// CUDA executor (`cuda.rs`).
pub trait Runner {
    /// One call: `tokens` and `positions` are the chunk's (padding included), `logits` the last row's.
    fn run(&mut self, tokens: &[i64], positions: &[i64], logits: &mut [f32]) -> Result<(), Failure>;
    /// Zeroes the state (a new sequence).
    fn reset(&mut self) -> Result<(), Failure>;
}

/// The shape of a cached step: (chunk, context, vocab), checked against the LIR's ports (logits: the
/// last row only).
pub fn step_shape(lir: &Lir) -> Result<(usize, usize, usize), Failure> {
    let bad = |why: &str| Failure::model(format!("the compiled program is not a language-model step ({why})"));
    let [t, p] = &lir.inputs[..] else { return Err(bad("it does not take tokens and positions")) };
    let [l] = &lir.outputs[..] else { return Err(bad("it does not give one logits output")) };
    let fixed = |ty: &rlx_ir::TensorType| ty.shape.as_fixed().ok_or_else(|| bad("a port's shape is symbolic"));
    let (ts, ps, ls) = (fixed(&t.ty)?, fixed(&p.ty)?, fixed(&l.ty)?);
    let chunk = *ts.first().ok_or_else(|| bad("tokens is a scalar"))?;
    let context = lir.state.first().and_then(|s| s.port.ty.shape.as_fixed()).and_then(|s| s.first().copied()).ok_or_else(|| bad("it has no state"))?;
    let ok = t.ty.dtype == DType::I64 && p.ty.dtype == DType::I64 && l.ty.dtype == DType::F32 && ts == [chunk] && ps == [chunk] && ls.len() == 2 && ls[0] == 1;
    if !ok || chunk == 0 || context == 0 {
        return Err(bad("its ports are not tokens, positions i64[chunk] → logits f32[1, vocab]"));
    }
    Ok((chunk, context, ls[1]))
}

pub struct Chunked<R> {
    pub(super) runner: R,
    chunk: usize,
    context: usize,
    vocab: usize,
    logits: Vec<f32>,
    /// Positions written so far (prefill resets this).
    filled: usize,
    what: String,
}

impl<R: Runner> Chunked<R> {
    /// `runner` of a step of `shape` (from [`step_shape`]); `what` names it for the timing line.
    pub fn new(runner: R, (chunk, context, vocab): (usize, usize, usize), what: String) -> Chunked<R> {
        Chunked { runner, chunk, context, vocab, logits: vec![0.0; vocab], filled: 0, what }
    }

    /// Tokens per call of the compiled step (prefill runs the prompt in chunks of this many).
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Runs `tokens` (1..=chunk of them, in the chunk's last rows) at positions `start..`; the padding
    /// rows before them sit at position `context`, which writes nothing. Returns the logits of the last
    /// token (the only row the step computes).
    fn call(&mut self, tokens: &[i64], start: usize) -> Result<Vec<f32>, Failure> {
        let n = tokens.len();
        if n == 0 || n > self.chunk || start + n > self.context {
            return Err(Failure::model(format!("a step of {n} tokens at position {start} does not fit (chunk {}, context {})", self.chunk, self.context)));
        }
        if let Some(bad) = tokens.iter().find(|&&t| t < 0 || t as usize >= self.vocab) {
            return Err(Failure::usage(format!("token id {bad} is outside the vocabulary (0..{})", self.vocab)));
        }
        let mut t = vec![0i64; self.chunk];
        let mut p = vec![self.context as i64; self.chunk];
        let pad = self.chunk - n;
        for (i, &tok) in tokens.iter().enumerate() {
            t[pad + i] = tok;
            p[pad + i] = (start + i) as i64;
        }
        self.runner.run(&t, &p, &mut self.logits).map_err(|f| Failure { msg: format!("{} at position {start}", f.msg), ..f })?;
        self.filled = start + n;
        Ok(self.logits.clone())
    }
}

impl<R: Runner> Step for Chunked<R> {
    fn describe(&self) -> String {
        format!("the compiled KV-cache artifact: {}", self.what)
    }
    fn context(&self) -> usize {
        self.context
    }
    fn prefill(&mut self, tokens: &[i64]) -> Result<Vec<f32>, Failure> {
        if tokens.is_empty() {
            return Err(Failure::usage("the prompt is empty"));
        }
        if tokens.len() > self.context {
            return Err(Failure::usage(format!("the prompt is {} tokens, longer than the compiled context of {}", tokens.len(), self.context)));
        }
        // A new sequence: a zeroed state (as NAME_reset does).
        self.runner.reset()?;
        let mut last = Vec::new();
        for (i, c) in tokens.chunks(self.chunk).enumerate() {
            last = self.call(c, i * self.chunk)?;
        }
        Ok(last)
    }
    fn decode(&mut self, token: i64, pos: usize) -> Result<Vec<f32>, Failure> {
        if pos != self.filled {
            return Err(Failure::model(format!("decode at position {pos}, but the state holds {} positions", self.filled)));
        }
        if pos >= self.context {
            return Err(Failure::usage(format!("the compiled context of {} positions is full", self.context)));
        }
        self.call(&[token], pos)
    }
}
