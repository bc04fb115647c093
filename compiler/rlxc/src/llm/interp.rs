//! [`Step`] on the reference interpreter: the stateless graph (`tokens`, `positions` → `logits`
//! [sequence, vocab]) run over the whole sequence at every step. No state but the token list.

use super::Step;
use crate::cli::Failure;
use rlx_ir::{ConstData, Mir};

/// Logits [len, vocab] (f32) for `tokens` at positions `0..len`.
pub fn logits(mir: &Mir, tokens: &[i64]) -> Result<ConstData, Failure> {
    let n = tokens.len();
    let pos: Vec<i64> = (0..n as i64).collect();
    let ins = [ConstData::from_i64(vec![n], tokens), ConstData::from_i64(vec![n], &pos)];
    let mut out = rlx_interp::run(mir, &ins).map_err(|e| Failure::model(format!("running the model failed: {e}")))?;
    out.pop().ok_or_else(|| Failure::model("the model has no output"))
}

/// Row `r` of a [rows, vocab] f32 tensor.
pub fn row(l: &ConstData, r: usize) -> Result<Vec<f32>, Failure> {
    let v = l.shape.get(1).copied().unwrap_or(0);
    let b = l
        .data
        .bytes()
        .get(r * v * 4..(r + 1) * v * 4)
        .ok_or_else(|| Failure::model(format!("the model's logits {:?} have no row {r}", l.shape)))?;
    Ok(b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

pub struct InterpStep {
    mir: Mir,
    context: usize,
    seq: Vec<i64>,
}

impl InterpStep {
    /// `context`: the model's maximum positions (its metadata's context length).
    pub fn new(mir: Mir, context: usize) -> InterpStep {
        InterpStep { mir, context, seq: Vec::new() }
    }

    fn last(&self) -> Result<Vec<f32>, Failure> {
        let l = logits(&self.mir, &self.seq)?;
        row(&l, self.seq.len() - 1)
    }
}

impl Step for InterpStep {
    fn describe(&self) -> String {
        "the interpreter, full recompute per token: no KV cache".into()
    }
    fn context(&self) -> usize {
        self.context
    }
    fn prefill(&mut self, tokens: &[i64]) -> Result<Vec<f32>, Failure> {
        if tokens.is_empty() {
            return Err(Failure::usage("the prompt is empty"));
        }
        self.seq = tokens.to_vec();
        self.last()
    }
    fn decode(&mut self, token: i64, pos: usize) -> Result<Vec<f32>, Failure> {
        if pos != self.seq.len() {
            return Err(Failure::model(format!("decode at position {pos}, but the sequence holds {} tokens", self.seq.len())));
        }
        self.seq.push(token);
        self.last()
    }
}
