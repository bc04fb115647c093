//! Hugging Face language-model checkpoints (config.json + model.safetensors) through the same builders
//! as GGUF files, against the numpy reference (tests/reference/llm_ref.py `HfModel`: the checkpoint
//! read by the `safetensors` package, transformers' conventions — rotate-half RoPE for llama too,
//! Gemma's (1 + w) norms, query_pre_attn_scalar, the local/global layer pattern — in float64):
//! - tiny random llama / qwen2 / qwen3 / gemma3_text checkpoints written by numpy + `safetensors`, F32
//!   and F16: logits within 1e-4 of the logit range on the interpreter (`rlxc run DIR --tokens`) and
//!   compiled for the host (LLVM);
//! - `rlxc run DIR --tokens … -n N` (the compiled KV-cache step) generates the reference's argmax
//!   chain; `rlxc compile DIR --dim context=N` writes the stateful artifact; `--prompt` (no tokenizer
//!   read) is a usage error;
//! - a checkpoint in two shards (model.safetensors.index.json) gives the single file's logits;
//! - bad checkpoints: a missing tensor, a wrong shape, a missing lm_head, an unknown model_type, a
//!   missing key — exit 1, the tensor or key named, nothing written.

mod common;
use common::{f32s, rlxc, scratch};

use common::{ok, python, repo};
use rlx_ir::ConstData;
use rlxc::cli::{Backend, ModelSource, Target};
use rlxc::pipeline::Timings;
use rlxc::targets::{self, Request};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// max |a − b| / (range of b).
fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let lo = b.iter().cloned().fold(f32::INFINITY, f32::min);
    let hi = b.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max) / (hi - lo)
}

/// Writes a tiny checkpoint folder and its reference logits for `tokens`; returns (folder, reference).
fn tiny(dir: &Path, model_type: &str, dtype: &str, tokens: &str) -> (PathBuf, PathBuf) {
    let folder = dir.join(format!("{model_type}-{dtype}"));
    let refp = dir.join(format!("{model_type}-{dtype}.ref.npy"));
    ok(Command::new(python())
        .arg(repo().join("tests/reference/llm_ref.py"))
        .args(["tiny-hf", model_type, dtype])
        .arg(&folder)
        .args(["--tokens", tokens, "--ref"])
        .arg(&refp));
    (folder, refp)
}

const TYPES: [&str; 4] = ["llama", "qwen2", "qwen3", "gemma3_text"];

#[test]
fn tiny_checkpoints_match_numpy_on_the_interpreter_and_host() {
    let dir = scratch("llm-hf-tiny");
    let tokens = [1i64, 5, 9, 2, 77, 3, 40];
    let tok_s = tokens.map(|t| t.to_string()).join(",");
    let pos: Vec<i64> = (0..tokens.len() as i64).collect();
    let inputs = vec![ConstData::from_i64(vec![tokens.len()], &tokens), ConstData::from_i64(vec![tokens.len()], &pos)];
    let mut report = Vec::new();
    for model_type in TYPES {
        for dtype in ["F32", "F16"] {
            let (folder, refp) = tiny(&dir, model_type, dtype, &tok_s);
            let numpy = f32s(&common::npy(&refp));
            // The interpreter, through the command line (the folder, and its model.safetensors).
            let out = dir.join(format!("{model_type}-{dtype}-interp"));
            let model_arg = if dtype == "F16" { folder.join("model.safetensors") } else { folder.clone() };
            ok(rlxc().arg("run").arg(&model_arg).args(["--tokens", &tok_s, "-o"]).arg(&out));
            let interp = f32s(&common::npy(&out.join("logits.npy")));
            // Compiled for this machine: the stateless graph at sequence = 7.
            let dims = BTreeMap::from([("sequence".to_string(), tokens.len() as u64)]);
            let src = ModelSource::from_path(&folder).unwrap();
            assert!(matches!(src, ModelSource::HfLlm(_)), "{model_type}: read as {src:?}");
            let mir = rlxc::cli::lower(&src.import(&dims).unwrap(), &folder).unwrap();
            let req = Request { backend: Some(Backend::Llvm), ..Request::named("rlxmodel") };
            let mut s = targets::load(Target::Host, &mir, &req, &mut Timings::default()).unwrap_or_else(|e| panic!("{e:?}"));
            let host = f32s(&s.run(std::slice::from_ref(&inputs)).unwrap_or_else(|e| panic!("{e:?}")).pop().unwrap()[0]);
            let (ri, rh) = (rel_err(&interp, &numpy), rel_err(&host, &numpy));
            report.push(format!("{model_type} {dtype}: interpreter {ri:.1e}, host {rh:.1e} of the logit range"));
            assert!(ri <= 1e-4 && rh <= 1e-4, "{}", report.last().unwrap());
        }
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
fn command_line_generates_the_reference_argmax_chain_and_compiles_a_stateful_artifact() {
    let dir = scratch("llm-hf-cli");
    for model_type in ["llama", "gemma3_text"] {
        let (folder, _) = tiny(&dir, model_type, "F32", "1");
        // Default target: the compiled KV-cache step.
        let o = rlxc().arg("run").arg(&folder).args(["--tokens", "1,2,3", "-n", "5"]).output().unwrap();
        assert!(o.status.success(), "{o:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("compiled KV-cache artifact"), "{model_type}: not the compiled path:\n{err}");
        let gen: Vec<i64> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("generated: ").map(str::to_string))
            .unwrap_or_else(|| panic!("no generated ids: {o:?}"))
            .split(',')
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(gen.len(), 5);
        let all: Vec<String> = [1, 2, 3].iter().chain(&gen).map(|t| t.to_string()).collect();
        let refp = dir.join(format!("{model_type}-chain.npy"));
        ok(Command::new(python()).arg(repo().join("tests/reference/llm_ref.py")).arg("logits").arg(&folder).args(["--tokens", &all.join(","), "--out"]).arg(&refp));
        let want = f32s(&common::npy(&refp));
        for (k, &g) in gen.iter().enumerate() {
            let row = &want[(2 + k) * 96..(3 + k) * 96];
            let arg = (0..96).fold(0, |b, i| if row[i] > row[b] { i } else { b });
            assert_eq!(g, arg as i64, "{model_type}: generated token {k}: ours {g}, reference argmax {arg} (all: {gen:?})");
        }
        let out = dir.join(format!("{model_type}-artifact"));
        ok(rlxc().arg("compile").arg(&folder).args(["--target", "host", "--name", "llm", "--dim", "context=16", "--dim", "chunk=4", "-o"]).arg(&out));
        let h = std::fs::read_to_string(out.join("llm.h")).unwrap();
        for want in ["#define llm_MAX_CONTEXT 16", "#define llm_MAX_CHUNK 4", "#define llm_VOCAB 96"] {
            assert!(h.contains(want), "llm.h lacks '{want}'");
        }
    }
    let (folder, _) = tiny(&dir, "qwen3", "F32", "1");
    let o = rlxc().arg("run").arg(&folder).args(["--prompt", "hello"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("give the prompt as --tokens"), "{o:?}");
}

/// A checkpoint split into two shards listed by `model.safetensors.index.json` (transformers' layout
/// for large models) reads as the single file does: the same logits, bit for bit.
#[test]
fn sharded_checkpoint_reads_as_the_single_file() {
    let dir = scratch("llm-hf-shards");
    let (folder, _) = tiny(&dir, "qwen2", "F32", "1");
    let one = dir.join("one");
    ok(rlxc().arg("run").arg(&folder).args(["--tokens", "1,5,9,2", "-o"]).arg(&one));
    let code = "import json, os, sys\nfrom safetensors.numpy import load_file, save_file\nd = sys.argv[1]\n\
                t = load_file(d + '/model.safetensors'); os.remove(d + '/model.safetensors')\n\
                names = sorted(t); half = {n: t[n] for n in names[::2]}; rest = {n: t[n] for n in names[1::2]}\n\
                save_file(half, d + '/model-00001-of-00002.safetensors'); save_file(rest, d + '/model-00002-of-00002.safetensors')\n\
                m = {n: 'model-00001-of-00002.safetensors' for n in half}; m.update({n: 'model-00002-of-00002.safetensors' for n in rest})\n\
                json.dump({'metadata': {}, 'weight_map': m}, open(d + '/model.safetensors.index.json', 'w'))\n";
    ok(Command::new(python()).args(["-c", code]).arg(&folder));
    assert!(!folder.join("model.safetensors").exists());
    let two = dir.join("two");
    ok(rlxc().arg("run").arg(&folder).args(["--tokens", "1,5,9,2", "-o"]).arg(&two));
    assert_eq!(common::npy(&one.join("logits.npy")), common::npy(&two.join("logits.npy")));
    // An index naming a file outside the folder is refused, naming the entry.
    let index = folder.join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index).unwrap().replacen("model-00002-of-00002.safetensors", "../x.safetensors", 1);
    std::fs::write(&index, text).unwrap();
    let o = rlxc().arg("run").arg(&folder).args(["--tokens", "1"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("must be a file name in the folder"), "{o:?}");
}

/// Rewrites the checkpoint in `folder` with python: `edit` is Python code on `t` (the tensors, a dict
/// of numpy arrays) and `c` (config.json, a dict).
fn edit(folder: &Path, edit: &str) {
    let code = format!(
        "import json, sys, numpy as np\nfrom safetensors.numpy import load_file, save_file\nd = sys.argv[1]\n\
         t = load_file(d + '/model.safetensors'); c = json.load(open(d + '/config.json'))\n{edit}\n\
         save_file(t, d + '/model.safetensors'); json.dump(c, open(d + '/config.json', 'w'))\n"
    );
    ok(Command::new(python()).args(["-c", &code]).arg(folder));
}

#[test]
fn bad_checkpoints_name_the_tensor_or_key() {
    let dir = scratch("llm-hf-bad");
    let cases = [
        ("llama", "del t['model.layers.1.mlp.up_proj.weight']", "tensor 'model.layers.1.mlp.up_proj.weight' is missing"),
        ("qwen2", "del t['model.layers.0.self_attn.k_proj.bias']", "tensor 'model.layers.0.self_attn.k_proj.bias' is missing"),
        (
            "llama",
            "t['model.layers.0.self_attn.k_proj.weight'] = np.zeros((16, 64), np.float32)",
            "tensor 'model.layers.0.self_attn.k_proj.weight' has shape [16, 64], expected [32, 64]",
        ),
        ("gemma3_text", "t['model.norm.weight'] = np.zeros(63, np.float32)", "tensor 'model.norm.weight' is f32[63], expected a float [64]"),
        ("qwen3", "t['model.embed_tokens.weight'] = np.zeros((95, 64), np.float32)", "tensor 'model.embed_tokens.weight' has shape [95, 64], expected [vocab_size 96"),
        ("llama", "del t['lm_head.weight']", "tensor 'lm_head.weight' is missing (config.json: tie_word_embeddings is false)"),
        ("llama", "t['model.layers.0.mlp.gate_proj.weight'] = np.zeros((128, 64), np.int32)", "tensor 'model.layers.0.mlp.gate_proj.weight' is i32"),
        ("llama", "c['model_type'] = 'mamba'", "model_type 'mamba' is not supported"),
        ("qwen3", "del c['num_attention_heads']; c['rope_scaling'] = {'rope_type': 'yarn', 'factor': 4.0}", "num_attention_heads is missing"),
        ("gemma3_text", "c['layer_types'][0] = 'chunked_attention'", "layer_types: \"chunked_attention\""),
    ];
    for (k, (model_type, change, want)) in cases.iter().enumerate() {
        let (folder, _) = tiny(&dir, model_type, "F32", "1");
        let case = dir.join(format!("case{k}"));
        std::fs::rename(&folder, &case).unwrap();
        edit(&case, change);
        for cmd in [&["run", "--tokens", "1,2"][..], &["compile", "--target", "host", "--dim", "sequence=2"][..]] {
            let out = dir.join(format!("case{k}-out"));
            let o = rlxc().arg(cmd[0]).arg(&case).args(&cmd[1..]).arg("-o").arg(&out).output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{change}: {cmd:?}: {err}");
            assert!(err.contains(want), "{change}: {cmd:?}: expected {want:?} in:\n{err}");
            assert!(!out.join("rlxmodel.o").exists() && !out.join("logits.npy").exists(), "{change}: {cmd:?} wrote output");
        }
    }
}
