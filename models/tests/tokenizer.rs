//! The tokenizer against llama.cpp (`tests/reference/llama_cpp_ref.py`, llama-cpp-python built by
//! `make llama-ref`), id for id and byte for byte:
//! - Gemma 3 270M's SentencePiece vocabulary (`make models`), read from the GGUF's metadata, on
//!   prompts that exercise spaces, newlines,
//!   tabs, digits, CJK, emoji, accents, code, special tokens and the empty string;
//! - small byte-level BPE vocabularies (Qwen 2 and LLaMA 3 pre-tokenizers) written as GGUF by the
//!   `gguf` package (`tests/reference/make_bpe_vocab.py`), loaded by llama.cpp with vocab_only.
//! Each prompt is tokenized four ways (with/without BOS, with/without special-token parsing) and
//! decoded four ways (remove_special × unparse_special). Needs `make setup`; never skips.

#[allow(dead_code)]
mod common;

use common::gguf_meta::Meta;
use rlx_models::{StreamDecoder, TokenType, Tokenizer, TokenizerModel, Vocab};
use serde_json::Value;
use std::path::Path;

/// Prompts for every vocabulary: the hard parts of tokenization.
const PROMPTS: &[&str] = &[
    "",
    "Hello world",
    " Hello world",
    "Hello world ",
    "Hello   world",
    "   ",
    " ",
    "  two leading spaces and two trailing  ",
    "line one\nline two\n\nline four\n",
    "\n\n\nnewlines first",
    "tab\tseparated\tvalues\t\t",
    "CRLF\r\nline\r\n",
    "Digits 1234567890 and 3.14159, 2025-01-31, 1,000,000.",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "emoji 😀🎉👍🏽 and a flag 🇫🇷",
    "Accented: café naïve déjà vu Ångström São Paulo",
    "fn main() {\n    println!(\"hi {}\", 1 + 2);\n}\n",
    "def f(x):\n\treturn x**2  # square\n",
    "It's, don't we'll I've you're ?!. , 's",
    "HELLO World hElLo",
    "\u{00a0}non-breaking\u{2009}thin space\u{3000}ideographic",
    "rare: \u{13000}\u{E000}\u{1F9EC} control\u{0001}char",
    "<div>html</div> <span>x</span>",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text with bos inside<eos>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>",
    "<|begin_of_text|>hi<|eot_id|> and <tool_call>{\"a\": 1}</tool_call>",
    "a<start_of_turn>b",
    "▁already▁escaped▁",
    "a supercalifragilistic word",
    "qqq ЖЖЖ ююю ŋŋŋ ĳĳĳ 가가가 ㅋㅋㅋ ๆๆๆ ﷺﷺﷺ ⸻⸻⸻ ……… ━━━ ~~~~~ ===== ----- ____ ****",
];

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("id list").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

/// The vocabulary from the GGUF's `tokenizer.ggml.*` keys (read by the tests' own minimal
/// metadata reader, `common/gguf_meta.rs`).
fn vocab_from_gguf(model: &Path) -> Vocab {
    let m = common::gguf_meta::read_metadata(model).unwrap();
    let key = |k: &str| m.get(&format!("tokenizer.ggml.{k}"));
    let array = |k: &str| key(k).map(|v| v.as_array().unwrap_or_else(|| panic!("{k} is not an array"))).unwrap_or(&[]);
    let strings = |k: &str| -> Vec<String> { array(k).iter().map(|s| s.as_str().unwrap().to_string()).collect() };
    let model = TokenizerModel::from_gguf(key("model").and_then(Meta::as_str).unwrap()).unwrap();
    let mut v = Vocab::new(model, strings("tokens"));
    v.pre = key("pre").and_then(Meta::as_str).map(str::to_string);
    v.scores = array("scores").iter().map(|x| if let Meta::Float(f) = x { *f as f32 } else { panic!("score {x:?}") }).collect();
    v.types = array("token_type").iter().map(|x| if let Meta::Int(i) = x { TokenType::from_gguf(*i as i32) } else { panic!("type {x:?}") }).collect();
    v.merges = strings("merges");
    v.bos = key("bos_token_id").and_then(Meta::as_u32);
    v.eos = key("eos_token_id").and_then(Meta::as_u32);
    v.eot = key("eot_token_id").and_then(Meta::as_u32);
    v.unk = key("unknown_token_id").and_then(Meta::as_u32);
    v.pad = key("padding_token_id").and_then(Meta::as_u32);
    v.add_bos = key("add_bos_token").and_then(Meta::as_bool);
    v.add_eos = key("add_eos_token").and_then(Meta::as_bool);
    v.add_space_prefix = key("add_space_prefix").and_then(Meta::as_bool);
    v
}

/// llama.cpp's tokenization and detokenization of `PROMPTS` (vocabulary only, no weights).
fn llama_reference(model: &Path, scratch: &Path) -> Value {
    let prompts = scratch.join("prompts.json");
    std::fs::write(&prompts, serde_json::to_string(PROMPTS).unwrap()).unwrap();
    let out = common::python_stdout(
        "tests/reference/llama_cpp_ref.py",
        &[model.to_str().unwrap(), "--vocab-only", "--prompts-json", prompts.to_str().unwrap()],
    );
    serde_json::from_slice(&out).expect("llama_cpp_ref.py prints JSON")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Compares every prompt × mode; returns the number of comparisons. Panics listing every mismatch.
fn compare(tok: &Tokenizer, reference: &Value) -> usize {
    let cases = reference["tokenize"].as_array().expect("tokenize list");
    assert_eq!(cases.len(), PROMPTS.len());
    let mut bad = Vec::new();
    let mut n = 0;
    for case in cases {
        let text = case["text"].as_str().unwrap();
        for (key, add, parse) in [("plain", false, false), ("bos", true, false), ("special", false, true), ("bos_special", true, true)] {
            let want = ids(&case[key]);
            let got = tok.encode(text, add, parse);
            n += 1;
            if got != want {
                bad.push(format!("{text:?} [{key}]\n  llama.cpp {want:?}\n  rlxc      {got:?}"));
            }
        }
        let full = ids(&case["bos_special"]);
        for (key, rs, us) in [("ff", false, false), ("ft", false, true), ("tf", true, false), ("tt", true, true)] {
            let want = case["detok"][key].as_str().unwrap();
            let got = hex(&tok.decode_bytes(&full, rs, us));
            n += 1;
            if got != want {
                bad.push(format!("{text:?} detokenize [{key}]\n  llama.cpp {want}\n  rlxc      {got}"));
            }
        }
    }
    assert!(bad.is_empty(), "{} of {n} comparisons differ from llama.cpp:\n{}", bad.len(), bad.join("\n"));
    n
}

#[test]
fn gemma3_tokenization_matches_llama_cpp() {
    let scratch = common::scratch("tok_gemma");
    let model = common::gemma_gguf();
    let t0 = std::time::Instant::now();
    let vocab = vocab_from_gguf(&model);
    let t_read = t0.elapsed();
    let reference = llama_reference(&model, &scratch);
    let t1 = std::time::Instant::now();
    let tok = Tokenizer::new(vocab).unwrap();
    assert_eq!(tok.n_vocab() as u64, reference["n_vocab"].as_u64().unwrap());
    // Gemma 3's settings as its metadata states them.
    assert_eq!((tok.model(), tok.add_bos(), tok.add_space_prefix(), tok.bos(), tok.eos()), (TokenizerModel::Spm, true, false, Some(2), Some(1)));
    let t2 = std::time::Instant::now();
    let n = compare(&tok, &reference);
    eprintln!(
        "gemma3: {n} comparisons identical to llama.cpp {}; vocabulary read {:.2} s, llama.cpp {:.1} s, Tokenizer::new {:.0} ms, encode+decode {:.0} ms",
        reference["llama_cpp_version"],
        t_read.as_secs_f64(),
        (t1 - t0 - t_read).as_secs_f64(),
        (t2 - t1).as_secs_f64() * 1e3,
        t2.elapsed().as_secs_f64() * 1e3
    );

    // End of generation: <eos> and <end_of_turn>.
    let eot = tok.token_id("<end_of_turn>").unwrap();
    assert!(tok.is_eog(1) && tok.is_eog(eot) && !tok.is_eog(2), "{:?}", tok.eog_ids());

    // Streaming: a character spelled by byte tokens comes out whole, after its last byte.
    let ids = tok.encode("\u{13000}", false, false);
    assert_eq!(ids.len(), 4, "U+13000 is not in Gemma's vocabulary: four <0xNN> byte tokens, {ids:?}");
    let mut s = StreamDecoder::new(false);
    let chunks: Vec<String> = ids.iter().map(|&i| s.push(&tok, i, false)).collect();
    assert_eq!(chunks, ["", "", "", "\u{13000}"]);
    for text in PROMPTS {
        let ids = tok.encode(text, true, true);
        let mut s = StreamDecoder::new(false);
        let mut streamed: String = ids.iter().map(|&i| s.push(&tok, i, false)).collect();
        streamed.push_str(&s.finish());
        assert_eq!(streamed, tok.decode(&ids, false, false), "{text:?}");
    }
}

#[test]
fn qwen2_bpe_tokenization_matches_llama_cpp() {
    bpe_case("qwen2");
}

#[test]
fn llama3_bpe_tokenization_matches_llama_cpp() {
    bpe_case("llama-bpe");
}

fn bpe_case(pre: &str) {
    let scratch = common::scratch(&format!("tok_bpe_{pre}"));
    let model = scratch.join("vocab.gguf");
    common::run_python("tests/reference/make_bpe_vocab.py", &[model.to_str().unwrap(), "--pre", pre]);
    let vocab = vocab_from_gguf(&model);
    assert_eq!(vocab.pre.as_deref(), Some(pre));
    let reference = llama_reference(&model, &scratch);
    let tok = Tokenizer::new(vocab).unwrap();
    assert_eq!(tok.model(), TokenizerModel::Bpe);
    let n = compare(&tok, &reference);
    eprintln!("{pre}: {n} comparisons identical to llama.cpp");
}

fn tiny(model: TokenizerModel) -> Vocab {
    let mut v = Vocab::new(model, ["<unk>", "<s>", "</s>", "a", "b", "ab"].map(String::from).to_vec());
    v.merges = vec!["a b".into()];
    v
}

#[test]
fn bad_vocabularies_name_the_key() {
    let err = |v: Vocab| Tokenizer::new(v).unwrap_err();
    let mut v = tiny(TokenizerModel::Spm);
    v.scores = vec![0.0; 3];
    assert!(err(v).contains("tokenizer.ggml.scores has 3 entries for 6 tokens"));
    let mut v = tiny(TokenizerModel::Spm);
    v.types = vec![TokenType::Normal; 2];
    assert!(err(v).contains("tokenizer.ggml.token_type"));
    let mut v = tiny(TokenizerModel::Spm);
    v.bos = Some(99);
    assert!(err(v).contains("tokenizer.ggml.bos_token_id = 99 is outside the vocabulary (6 tokens)"));
    let mut v = tiny(TokenizerModel::Bpe);
    v.pre = Some("nonesuch".into());
    assert!(err(v).contains("tokenizer.ggml.pre = 'nonesuch'"));
    let mut v = tiny(TokenizerModel::Bpe);
    v.merges.clear();
    assert!(err(v).contains("tokenizer.ggml.merges"));
    let mut v = tiny(TokenizerModel::Bpe);
    v.merges = vec!["ab".into()];
    assert!(err(v).contains("tokenizer.ggml.merges[0]"));
    let mut v = tiny(TokenizerModel::Bpe);
    v.add_bos = Some(true);
    assert!(err(v).contains("no BOS token"));
    assert!(err(Vocab::new(TokenizerModel::Spm, vec![])).contains("tokenizer.ggml.tokens is empty"));
    assert!(TokenizerModel::from_gguf("bert").unwrap_err().contains("tokenizer.ggml.model = 'bert'"));
    // Ids outside the vocabulary decode to nothing rather than panicking.
    let tok = Tokenizer::new(tiny(TokenizerModel::Spm)).unwrap();
    assert_eq!(tok.decode(&[3, 1_000_000, 4], false, false), "ab");
}
