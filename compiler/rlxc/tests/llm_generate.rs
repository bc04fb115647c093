//! `rlxc run model.gguf --prompt …|--tokens …`: generation from the command line, on a tiny model
//! whose output is known by construction (tests/reference/make_speller.py: the next token is a
//! function of the current one, chosen by the script; a SentencePiece vocabulary with byte tokens):
//! - greedy text streamed in whole UTF-8 characters (a euro sign spelled by three byte tokens), the
//!   stop at the end-of-generation token, prompt and generated ids, tokens/s on stderr;
//! - the same prompt through llama.cpp (`llama-cpp-python`) on the same file: same prompt ids, same
//!   generated ids;
//! - sampling: draws between two known logits against the softmax's probability, top-k / top-p
//!   cut-offs, the same seed giving the same tokens;
//! - errors: --prompt without a vocabulary, both or neither of --prompt/--tokens, a prompt longer
//!   than the context, bad sampling values (exit 2); the context filling up ends generation; a
//!   closed pipe ends the process quietly.

mod common;
use common::{rlxc, scratch};

use common::{ok, python, repo};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The speller model in `dir` and its token ids by text.
fn speller(dir: &Path) -> (PathBuf, BTreeMap<String, i64>) {
    let model = dir.join("speller.gguf");
    let out = ok(Command::new(python()).arg(repo().join("tests/reference/make_speller.py")).arg(&model));
    (model, serde_json::from_str(&out).expect("make_speller.py prints JSON"))
}

fn run(model: &Path, args: &[&str]) -> Output {
    rlxc().arg("run").arg(model).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The ids after `prefix` on a line of `text` ("generated: 1,2,3", "prompt ids: 1,2").
fn ids_after(text: &str, prefix: &str) -> Vec<i64> {
    let line = text.lines().find_map(|l| l.strip_prefix(prefix)).unwrap_or_else(|| panic!("no '{prefix}' line in:\n{text}"));
    line.split(',').filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect()
}

fn usage_error(o: &Output, needle: &str) {
    assert_eq!(o.status.code(), Some(2), "want exit 2 with {needle:?}: {o:?}");
    assert!(stderr(o).contains(needle), "stderr lacks {needle:?}:\n{}", stderr(o));
    assert!(!stderr(o).contains("panicked"), "{}", stderr(o));
}

#[test]
fn prompt_streams_the_spelled_text_and_stops_at_end_of_generation() {
    let dir = scratch("gen-text");
    let (model, id) = speller(&dir);
    let o = run(&model, &["--prompt", "a b", "-n", "20", "--show-ids"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(String::from_utf8(o.stdout.clone()).unwrap(), " price is 5€.");
    let err = stderr(&o);
    assert_eq!(ids_after(&err, "prompt ids: "), vec![id["<s>"], id["▁a"], id["▁b"]]);
    let chain: Vec<i64> = ["▁price", "▁is", "▁5", "<0xE2>", "<0x82>", "<0xAC>", ".", "</s>"].iter().map(|t| id[*t]).collect();
    assert_eq!(ids_after(&err, "generated ids: "), chain);
    for frag in ["prefill 3 tokens in", "decode 7 tokens in", "tokens/s", "stopped: end of generation (</s>, id 2) after 8 tokens"] {
        assert!(err.contains(frag), "stderr lacks {frag:?}:\n{err}");
    }
    // -n 5 stops after the euro sign's first two bytes: they are held back, never written as
    // broken UTF-8; the end of generation turns them into one replacement character.
    let o = run(&model, &["--prompt", "a b", "-n", "5"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(String::from_utf8(o.stdout.clone()).unwrap(), " price is 5\u{FFFD}");
    assert!(stderr(&o).contains("stopped: 5 tokens generated"), "{}", stderr(&o));
}

#[test]
fn streamed_output_arrives_in_whole_characters() {
    let dir = scratch("gen-stream");
    let (model, _) = speller(&dir);
    let mut child = rlxc().arg("run").arg(&model).args(["--prompt", "a b", "-n", "20"]).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut chunks = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        let n = out.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        chunks.push(buf[..n].to_vec());
    }
    assert!(child.wait().unwrap().success());
    for c in &chunks {
        assert!(std::str::from_utf8(c).is_ok(), "a read returned a split character: {c:02x?} (all reads: {chunks:02x?})");
    }
    assert_eq!(String::from_utf8(chunks.concat()).unwrap(), " price is 5€.");
}

#[test]
fn prompt_ids_and_greedy_ids_match_llama_cpp_on_the_same_file() {
    let dir = scratch("gen-llama");
    let (model, _) = speller(&dir);
    let out = ok(Command::new(python())
        .arg(repo().join("tests/reference/llama_cpp_ref.py"))
        .arg(&model)
        .args(["--prompt", "a b", "-n", "8", "--ctx", "32"]));
    let js: serde_json::Value = serde_json::from_str(&out).expect("llama_cpp_ref.py prints JSON");
    let want = |k: &str| -> Vec<i64> { js["generate"][k].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect() };
    let o = run(&model, &["--prompt", "a b", "-n", "8", "--show-ids"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(ids_after(&stderr(&o), "prompt ids: "), want("prompt_ids"), "prompt tokenization");
    assert_eq!(ids_after(&stderr(&o), "generated ids: "), want("generated"), "greedy ids");
}

#[test]
fn tokens_print_generated_ids() {
    let dir = scratch("gen-tokens");
    let (model, id) = speller(&dir);
    let o = run(&model, &["--tokens", &format!("{},{}", id["<s>"], id["▁b"]), "-n", "3"]);
    assert!(o.status.success(), "{o:?}");
    let got = ids_after(&String::from_utf8_lossy(&o.stdout), "generated: ");
    assert_eq!(got, vec![id["▁price"], id["▁is"], id["▁5"]]);
}

/// `n` draws after "x" (logits g for "x", 0.9 g for "y") with the given flags, over several seeds.
fn draws(model: &Path, x: i64, flags: &[&str], seeds: std::ops::Range<u64>) -> Vec<i64> {
    let mut all = Vec::new();
    for s in seeds {
        let seed = s.to_string();
        let mut args = vec!["--tokens".to_string(), x.to_string(), "-n".into(), "31".into(), "--seed".into(), seed];
        args.extend(flags.iter().map(|f| f.to_string()));
        let o = rlxc().arg("run").arg(model).args(&args).output().unwrap();
        assert!(o.status.success(), "{o:?}");
        let got = ids_after(&String::from_utf8_lossy(&o.stdout), "generated: ");
        assert_eq!(got.len(), 31, "{o:?}");
        all.extend(got);
    }
    all
}

#[test]
fn sampling_follows_the_softmax_and_the_seed() {
    let dir = scratch("gen-sample");
    let (model, id) = speller(&dir);
    let (x, y) = (id["x"], id["y"]);
    // Temperature 1, top-k 2: only "x" and "y", P(x) = 1 / (1 + e^(-0.1 g)).
    let d = draws(&model, x, &["--temperature", "1", "--top-k", "2"], 0..20);
    assert!(d.iter().all(|&t| t == x || t == y), "{d:?}");
    let g = 1.0 / (1.0f64 / 128.0 + 1e-6).sqrt();
    let p = 1.0 / (1.0 + (-0.1 * g).exp());
    let n = d.len() as f64;
    let got = d.iter().filter(|&&t| t == x).count() as f64 / n;
    let sd = (p * (1.0 - p) / n).sqrt();
    eprintln!("P(x): drawn {got:.4} over {n} draws, softmax {p:.4} (sd {sd:.4})");
    assert!((got - p).abs() < 4.5 * sd, "P(x) drawn {got}, softmax {p}");
    // At temperature 2 the draw is flatter: P(x) = 1 / (1 + e^(-0.05 g)).
    let d2 = draws(&model, x, &["--temperature", "2", "--top-k", "2"], 0..20);
    let p2 = 1.0 / (1.0 + (-0.05 * g).exp());
    let got2 = d2.iter().filter(|&&t| t == x).count() as f64 / n;
    assert!((got2 - p2).abs() < 4.5 * (p2 * (1.0 - p2) / n).sqrt(), "T=2: P(x) drawn {got2}, softmax {p2}");
    // The same seed gives the same tokens; another seed others.
    assert_eq!(draws(&model, x, &["--temperature", "1", "--top-k", "2"], 3..4), d[3 * 31..4 * 31]);
    assert_ne!(d[..31], d[31..62]);
    // Cut-offs that leave one candidate, and temperature 0, are greedy whatever the seed.
    for flags in [&["--temperature", "5", "--top-k", "1"][..], &["--temperature", "1", "--top-k", "0", "--top-p", "0.5"], &["--temperature", "0"]] {
        let d = draws(&model, x, flags, 0..2);
        assert!(d.iter().all(|&t| t == x), "{flags:?}: {d:?}");
    }
}

#[test]
fn the_context_ends_generation() {
    let dir = scratch("gen-context");
    let (model, id) = speller(&dir);
    // 30 prompt tokens in a context of 32: two decodes fit, the third token is the last drawn.
    let mut prompt = vec![id["a"].to_string(); 29];
    prompt.push(id["x"].to_string());
    let o = run(&model, &["--tokens", &prompt.join(","), "-n", "10"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(ids_after(&String::from_utf8_lossy(&o.stdout), "generated: ").len(), 3);
    assert!(stderr(&o).contains("stopped: the context is full after 3 tokens"), "{}", stderr(&o));
}

#[test]
fn bad_prompts_and_values_are_usage_errors() {
    let dir = scratch("gen-bad");
    let (model, _) = speller(&dir);
    // A file without a vocabulary (the llm tests' tiny random model).
    let plain = dir.join("plain.gguf");
    ok(Command::new(python()).arg(repo().join("tests/reference/llm_ref.py")).args(["tiny", "llama", "F32"]).arg(&plain));
    usage_error(&run(&plain, &["--prompt", "hello"]), "has no vocabulary (no tokenizer.ggml.tokens), so --prompt cannot be tokenized");
    usage_error(&run(&model, &["--prompt", "a", "--tokens", "1"]), "cannot be used with");
    usage_error(&run(&model, &[]), "a language model needs a prompt: --prompt TEXT, or --tokens ID,ID,…");
    usage_error(&run(&model, &["--prompt", &"a ".repeat(40)]), "tokens, longer than the model's context of 32");
    usage_error(&run(&model, &["--tokens", &vec!["1"; 33].join(",")]), "the prompt is 33 tokens, longer than the model's context of 32");
    usage_error(&run(&model, &["--prompt", "a", "--temperature", "-1"]), "--temperature -1 must be a finite number ≥ 0");
    usage_error(&run(&model, &["--prompt", "a", "--temperature", "NaN"]), "--temperature NaN must be a finite number ≥ 0");
    usage_error(&run(&model, &["--prompt", "a", "--top-p", "0"]), "--top-p 0 must be in (0, 1]");
    usage_error(&run(&model, &["--prompt", "a", "--top-p", "1.5"]), "--top-p 1.5 must be in (0, 1]");
    usage_error(&run(&model, &["--prompt", "a", "--top-k", "-3"]), "--top-k");
    usage_error(&run(&model, &["--prompt", "a", "--seed", "x"]), "--seed");
    usage_error(&run(&model, &["--tokens", "1,99"]), "token id 99 is outside the vocabulary (0..25)");
    // Language-model flags on an ONNX model.
    // (checked before the file is read: any bytes will do)
    let onnx = dir.join("model.onnx");
    std::fs::write(&onnx, b"not read").unwrap();
    usage_error(&run(&onnx, &["--temperature", "1"]), "--temperature is for language models (MODEL.gguf, or a Hugging Face folder");
}

#[test]
fn a_closed_pipe_ends_the_run_quietly() {
    let dir = scratch("gen-pipe");
    let (model, _) = speller(&dir);
    let mut child = rlxc().arg("run").arg(&model).args(["--prompt", "a b", "-n", "20"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert!(!err.contains("panicked") && !err.contains("error"), "{err}");
}
