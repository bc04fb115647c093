//! Greedy generation through a stateful language-model artifact's Rust binding.
//!
//!     rust-llm N ID,ID,… [LOGITS.f32]
//!
//! As tests/native/llm_generate.c: the prompt prefilled in chunks of `MAX_CHUNK` tokens (the last one
//! padded: a call's tokens fill the chunk's last rows, the rows before them sit at position
//! `MAX_CONTEXT`, outside the cache, and write nothing), then one token per `step` at its position
//! until N tokens are generated or the context is full. Prints "generated: ID,ID,…"; with LOGITS.f32,
//! writes the logits every call returns — after each prompt chunk's last token and every decoded token
//! but the last (f32, `VOCAB` per row). Exit: 0 success; 1 bad usage or I/O; 3
//! `step` returned an error.

use std::process::ExitCode;

#[allow(clippy::all)]
mod model {
    include!(env!("RLX_MODEL_RS"));
}

use model::{Inputs, Outputs, MAX_CHUNK, MAX_CONTEXT, VOCAB};

/// The first `n` bytes of 16-byte aligned words.
fn bytes(words: &mut [u128], n: usize) -> &mut [u8] {
    assert!(n <= words.len() * 16);
    // SAFETY: the words own at least `n` initialized bytes; any bit pattern is a valid u8.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast(), n) }
}

fn argmax(row: &[f32]) -> i64 {
    (1..row.len()).fold(0, |b, i| if row[i] > row[b] { i } else { b }) as i64
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 || args.len() > 3 {
        eprintln!("usage: rust-llm N ID,ID,… [LOGITS.f32]");
        return ExitCode::from(1);
    }
    let (Ok(want), Ok(prompt)) = (args[0].parse::<usize>(), args[1].split(',').map(str::parse::<i64>).collect::<Result<Vec<_>, _>>()) else {
        eprintln!("bad N or prompt ids");
        return ExitCode::from(1);
    };
    if want == 0 || prompt.is_empty() || prompt.len() > MAX_CONTEXT || prompt.iter().any(|&t| t < 0 || t as usize >= VOCAB) {
        eprintln!("need N >= 1 and 1..={MAX_CONTEXT} prompt ids in 0..{VOCAB}");
        return ExitCode::from(1);
    }
    // The arena and the state (the KV cache, zeroed: a fresh sequence) are the caller's, 16-byte
    // aligned (on the heap: a model's `Arena` / `State` types can be too large for the stack).
    let mut arena = vec![0u128; model::ARENA_BYTES.div_ceil(16).max(1)];
    let mut state = vec![0u128; model::STATE_BYTES.div_ceil(16).max(1)];
    let mut logits = vec![0f32; VOCAB];
    let mut dump = Vec::new();
    let mut step = |tokens: &[i64], start: usize, logits: &mut [f32]| -> Result<(), rlx_rt::Error> {
        let mut tok = [0i64; MAX_CHUNK];
        let mut pos = [MAX_CONTEXT as i64; MAX_CHUNK];
        let pad = MAX_CHUNK - tokens.len();
        for (k, &t) in tokens.iter().enumerate() {
            tok[pad + k] = t;
            pos[pad + k] = (start + k) as i64;
        }
        model::step(bytes(&mut arena, model::ARENA_BYTES), bytes(&mut state, model::STATE_BYTES), &Inputs { tokens: &tok, positions: &pos }, &mut Outputs { logits })
    };
    let mut next = 0;
    for (c, chunk) in prompt.chunks(MAX_CHUNK).enumerate() {
        if let Err(e) = step(chunk, c * MAX_CHUNK, &mut logits) {
            eprintln!("step at position {} failed: {e:?}", c * MAX_CHUNK);
            return ExitCode::from(3);
        }
        dump.extend_from_slice(&logits);
        next = argmax(&logits);
    }
    let mut gen = vec![next];
    let mut pos = prompt.len();
    while gen.len() < want && pos < MAX_CONTEXT {
        if let Err(e) = step(&[next], pos, &mut logits) {
            eprintln!("step at position {pos} failed: {e:?}");
            return ExitCode::from(3);
        }
        dump.extend_from_slice(&logits);
        next = argmax(&logits);
        gen.push(next);
        pos += 1;
    }
    let ids: Vec<String> = gen.iter().map(i64::to_string).collect();
    println!("generated: {}", ids.join(","));
    if let Some(path) = args.get(2) {
        let bytes: Vec<u8> = dump.iter().flat_map(|x| x.to_le_bytes()).collect();
        if let Err(e) = std::fs::write(path, bytes) {
            eprintln!("{path}: {e}");
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}
