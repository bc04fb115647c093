//! GGUF language models on the interpreter against the numpy reference (tests/reference/llm_ref.py,
//! which reads and dequantizes the weights with llama.cpp's `gguf` package and implements the forward
//! pass independently):
//! - tiny random llama / qwen2 / qwen3 / gemma3 models written by `gguf`, matrices in every type it
//!   writes: logits within 1e-4 of the logit range. The tolerance is the same for every block type:
//!   both sides dequantize the same blocks to the same f32 values (checked bit-exact in rlx-interp's
//!   `blocks` test), so what differs is only our f32 storage of activations vs numpy's f64;
//! - `rlxc run -n N` greedy generation: ids equal to the reference's argmax chain;
//! - `rlxc inspect` lists metadata, tensors and the block-type histogram.
//! The Gemma 3 270M file is checked by tests/llm_gemma.rs (`make test-llm`).

mod common;
use common::{rlxc, scratch, tiny_gguf as tiny};

use common::{ok, python, repo};
use std::process::Command;

fn f32s(c: &rlx_ir::ConstData) -> Vec<f32> {
    c.data.bytes().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
}

#[test]
fn tiny_models_match_numpy_for_every_arch_and_block_type() {
    let dir = scratch("llm-tiny");
    let tokens = "1,5,9,2,77,3,40";
    let mut worst = Vec::new();
    for arch in ["llama", "qwen2", "qwen3", "gemma3"] {
        for qtype in ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"] {
            let (model, refp) = tiny(&dir, arch, qtype, tokens);
            let out = dir.join(format!("{arch}-{qtype}"));
            ok(rlxc().arg("run").arg(&model).args(["--tokens", tokens, "-o"]).arg(&out));
            let got = f32s(&common::npy(&out.join("logits.npy")));
            let want = f32s(&common::npy(&refp));
            assert_eq!(got.len(), want.len(), "{arch} {qtype}");
            assert_eq!(got.len(), 7 * 96);
            let lo = want.iter().cloned().fold(f32::INFINITY, f32::min);
            let hi = want.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            let rel = err / (hi - lo);
            worst.push(format!("{arch} {qtype}: max |diff| {err:.2e}, {rel:.2e} of the logit range"));
            assert!(rel <= 1e-4, "{arch} {qtype}: max |diff| {err} is {rel:.2e} of the logit range {lo}..{hi}");
        }
    }
    eprintln!("{}", worst.join("\n"));
}

#[test]
fn greedy_generation_follows_the_reference_argmax() {
    let dir = scratch("llm-greedy");
    // The reference's logits for prompt + generated ids: each generated id is the argmax of the
    // previous position, so one reference run over the full sequence checks the whole chain.
    let (model, _) = tiny(&dir, "llama", "Q8_0", "1,2,3");
    let out = ok(rlxc().arg("run").arg(&model).args(["--tokens", "1,2,3", "-n", "5", "-o"]).arg(dir.join("run")));
    let gen: Vec<i64> = out
        .lines()
        .find_map(|l| l.strip_prefix("generated: "))
        .unwrap_or_else(|| panic!("no generated ids in:\n{out}"))
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(gen.len(), 5);
    let all: Vec<String> = [1, 2, 3].iter().chain(&gen).map(|t| t.to_string()).collect();
    let refp = dir.join("chain.npy");
    ok(Command::new(python())
        .arg(repo().join("tests/reference/llm_ref.py"))
        .arg("logits")
        .arg(&model)
        .args(["--tokens", &all.join(","), "--out"])
        .arg(&refp));
    let want = f32s(&common::npy(&refp));
    let v = 96;
    for (k, &g) in gen.iter().enumerate() {
        let row = &want[(2 + k) * v..(3 + k) * v];
        let arg = row.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0;
        assert_eq!(g, arg as i64, "generated token {k}: ours {g}, reference argmax {arg} (all: {gen:?})");
    }
}

#[test]
fn inspect_lists_metadata_tensors_and_block_types() {
    let dir = scratch("llm-inspect");
    let (model, _) = tiny(&dir, "llama", "Q4_0", "1");
    let out = ok(rlxc().arg("inspect").arg(&model));
    for frag in ["architecture: llama", "llama.embedding_length = 64", "llama.attention.head_count_kv = 2", "token_embd.weight", "q4_0", "[96, 64]", "block types:"] {
        assert!(out.contains(frag), "inspect output lacks {frag:?}:\n{out}");
    }
    let js: serde_json::Value = serde_json::from_str(&ok(rlxc().arg("inspect").arg(&model).arg("--json"))).unwrap();
    assert_eq!(js["architecture"], "llama");
    assert_eq!(js["block_types"]["q4_0"]["tensors"], 16); // token_embd, output, 2 × (q, k, v, o, gate, up, down)
    assert_eq!(js["block_types"]["f32"]["tensors"], 5); // 2 × (attn_norm, ffn_norm), output_norm
}

#[test]
fn bad_token_ids_and_files_are_errors() {
    let dir = scratch("llm-bad");
    let (model, _) = tiny(&dir, "llama", "F32", "1");
    let o = rlxc().arg("run").arg(&model).args(["--tokens", "1,500"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("token id 500 is outside the vocabulary (0..96)"), "{o:?}");
    let bytes = std::fs::read(&model).unwrap();
    let cut = dir.join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
    let o = rlxc().arg("run").arg(&cut).args(["--tokens", "1"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("run past the end of the file"), "{o:?}");
}
