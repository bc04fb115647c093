//! Gemma 3 270M (Q4_K_M, from `make models`) on the interpreter against independent references:
//! - the numpy reference (tests/reference/llm_ref.py: weights dequantized by llama.cpp's `gguf`
//!   package, forward pass in float64): the argmax next token at every position of 8 token-id
//!   prompts must agree;
//! - llama.cpp (`llama-cpp-python`, tests/reference/llama_cpp_ref.py): `rlxc run --prompt TEXT
//!   --temperature 0` must tokenize the text prompts as llama.cpp does and generate the same greedy
//!   ids, up to a first difference where llama.cpp's own logits for the two tokens are within 0.1
//!   (a near tie: its quantized-activation arithmetic vs ours).
//!
//! How many prompts and steps the llama.cpp check runs is a parameter — `RLX_LLM_PROMPTS` (default
//! 2, at most 8) and `RLX_LLM_STEPS` (default 3) — because the interpreter recomputes the whole
//! sequence per token (~7 s each); the full check is
//! `RLX_LLM_PROMPTS=8 RLX_LLM_STEPS=32 make test-llm`. Both are slow (the interpreter and the
//! float64 reference run the 270M model): run by `make test-llm`.

mod common;

use common::{ok, python, repo};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

const PROMPTS: [&str; 8] = [
    "2,818,5279,529,7001,563",            // The capital of France is
    "2,14946,3324,496,990,993,691",       // Once upon a time there was
    "2,818,3823,8864,37423,38167,1024,506", // The quick brown fox jumps over the
    "2,17390,104264,657,496,4022,529",    // Water boils at a temperature of
    "2,4754,8126,2258,563",               // My favorite color is
    "2,818,3768,33358,528,506",           // The sun rises in the
    "2,5778,8678,506,5232,532",           // She opened the door and
    "2,50429,563,496,3207,528",           // Paris is a city in
];

/// The same sentences as text, for the llama.cpp check.
const TEXT_PROMPTS: [&str; 8] = [
    "The capital of France is",
    "Once upon a time there was",
    "The quick brown fox jumps over the",
    "Water boils at a temperature of",
    "My favorite color is",
    "The sun rises in the",
    "She opened the door and",
    "Paris is a city in",
];

fn env_count(key: &str, default: usize) -> usize {
    match std::env::var(key) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{key}={v} is not a count")),
        Err(_) => default,
    }
}

/// The ids after `prefix` on a line of `text`.
fn ids_after(text: &str, prefix: &str) -> Vec<i64> {
    let line = text.lines().find_map(|l| l.strip_prefix(prefix)).unwrap_or_else(|| panic!("no '{prefix}' line in:\n{text}"));
    line.split(',').filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect()
}

/// Logits closer than this (llama.cpp's own; its largest are ~20 on these prompts) are a near tie.
const TIE: f64 = 0.1;

#[test]
#[ignore = "slow: run with `make test-llm`"]
fn gemma3_270m_greedy_generation_matches_llama_cpp() {
    let model = repo().join("build/models/gemma-3-270m-q4_k_m.gguf");
    assert!(model.exists(), "{} not found: run `make models`", model.display());
    let prompts = env_count("RLX_LLM_PROMPTS", 2).min(TEXT_PROMPTS.len());
    let steps = env_count("RLX_LLM_STEPS", 3);
    let (mut bad, mut ties) = (Vec::new(), Vec::new());
    let (mut t_ref, mut t_ours) = (0.0, 0.0);
    for text in &TEXT_PROMPTS[..prompts] {
        let t = Instant::now();
        let out = ok(Command::new(python())
            .arg(repo().join("tests/reference/llama_cpp_ref.py"))
            .arg(&model)
            .args(["--prompt", text, "-n", &steps.to_string()]));
        t_ref += t.elapsed().as_secs_f64();
        let js: serde_json::Value = serde_json::from_str(&out).expect("llama_cpp_ref.py prints JSON");
        let want = |k: &str| -> Vec<i64> { js["generate"][k].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect() };
        let t = Instant::now();
        let o = Command::new(env!("CARGO_BIN_EXE_rlxc"))
            .arg("run")
            .arg(&model)
            .args(["--prompt", text, "-n", &steps.to_string(), "--temperature", "0", "--show-ids"])
            .output()
            .unwrap();
        t_ours += t.elapsed().as_secs_f64();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{text:?}: {o:?}");
        let text_out = String::from_utf8_lossy(&o.stdout);
        eprintln!("{text:?} → {text_out:?}\n  {}", err.lines().last().unwrap_or(""));
        let (p_ours, p_ref) = (ids_after(&err, "prompt ids: "), want("prompt_ids"));
        if p_ours != p_ref {
            bad.push(format!("{text:?}: prompt ids: ours {p_ours:?}, llama.cpp {p_ref:?}"));
            continue;
        }
        let (g_ours, g_ref) = (ids_after(&err, "generated ids: "), want("generated"));
        // Ours stops early only at an end-of-generation token, which llama.cpp's greedy run also chose.
        let stopped = g_ours.len() < steps && err.contains("stopped: end of generation");
        let Some(i) = g_ours.iter().zip(&g_ref).position(|(a, b)| a != b) else {
            if !(g_ours == g_ref || (stopped && g_ref.starts_with(&g_ours))) {
                bad.push(format!("{text:?}: generated: ours {g_ours:?}, llama.cpp {g_ref:?}"));
            }
            continue;
        };
        // A first difference where llama.cpp's own logits for its token and ours are within TIE is
        // a near tie (llama.cpp's quantized-activation dot products vs our f32/f64 arithmetic);
        // the sequences are not comparable after it.
        let top: Vec<(i64, f64)> = js["generate"]["top"][i].as_array().unwrap().iter().map(|p| (p[0].as_i64().unwrap(), p[1].as_f64().unwrap())).collect();
        let theirs = top[0].1;
        match top.iter().find(|p| p.0 == g_ours[i]) {
            Some(&(_, l)) if theirs - l < TIE => {
                ties.push(format!("{text:?}, step {i}: ours {}, llama.cpp {} (its logits {theirs:.4} vs {l:.4}); same before", g_ours[i], g_ref[i]))
            }
            _ => bad.push(format!("{text:?}: generated: ours {g_ours:?}, llama.cpp {g_ref:?} (differ at step {i}; llama.cpp's top 5 there: {top:?})")),
        }
    }
    eprintln!("{prompts} prompts × {steps} greedy steps: llama.cpp {t_ref:.1} s, rlxc on the interpreter {t_ours:.1} s");
    if !ties.is_empty() {
        eprintln!("near ties (llama.cpp's two logits within {TIE}), compared up to there:\n  {}", ties.join("\n  "));
    }
    assert!(bad.is_empty(), "{} of {prompts} prompts differ:\n{}", bad.len(), bad.join("\n"));
}

#[test]
#[ignore = "slow: run with `make test-llm`"]
fn gemma3_270m_next_token_matches_numpy_at_every_position() {
    let model = repo().join("build/models/gemma-3-270m-q4_k_m.gguf");
    assert!(model.exists(), "{} not found: run `make models`", model.display());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("llm-gemma");
    std::fs::create_dir_all(&dir).unwrap();
    let refp = dir.join("ref.txt");
    let t = Instant::now();
    ok(Command::new(python())
        .arg(repo().join("tests/reference/llm_ref.py"))
        .arg("argmax")
        .arg(&model)
        .args(["--prompts", &PROMPTS.join(";"), "--out"])
        .arg(&refp));
    eprintln!("numpy reference: {:.1} s for {} prompts", t.elapsed().as_secs_f64(), PROMPTS.len());
    let reference = std::fs::read_to_string(&refp).unwrap();
    let mut tokens = 0;
    let t = Instant::now();
    let mut mismatches = Vec::new();
    for (p, want) in PROMPTS.iter().zip(reference.lines()) {
        let out = ok(Command::new(env!("CARGO_BIN_EXE_rlxc")).arg("run").arg(&model).args(["--tokens", p, "-o"]).arg(&dir));
        let got: Vec<&str> = out.lines().find_map(|l| l.strip_prefix("next token at each position: ")).expect("next tokens").split(',').collect();
        let want: Vec<(&str, f64)> = want
            .split(' ')
            .map(|w| {
                let (t, gap) = w.split_once(':').unwrap();
                (t, gap.parse().unwrap())
            })
            .collect();
        assert_eq!(got.len(), want.len());
        tokens += got.len();
        for (i, (g, (w, gap))) in got.iter().zip(&want).enumerate() {
            if g != w {
                mismatches.push(format!("prompt {p}, position {i}: ours {g}, numpy {w} (numpy's top-2 gap {gap})"));
            }
        }
    }
    let secs = t.elapsed().as_secs_f64();
    eprintln!("interpreter: {tokens} positions in {secs:.1} s ({:.2} s per position, full-sequence runs)", secs / tokens as f64);
    assert!(mismatches.is_empty(), "{} of {tokens} positions differ:\n{}", mismatches.len(), mismatches.join("\n"));
}
