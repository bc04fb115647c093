//! Language models on `--target cuda`: the cached step (the KV cache as the schedule's state base,
//! kept on the device between calls) of the tiny random GGUF models (tests/reference/llm_ref.py),
//! checked without a GPU and, where a driver is present, on it:
//!
//! - the PTX assembles with ptxas for sm_80; the schedule has a state base (kind 4) and the manifest
//!   lists the state tensors at their offsets;
//! - in CPU emulation (tests/gpu/emulate_cuda.py keeps the state between calls) a prompt prefilled in
//!   chunks (the last one padded) then decoded one token per call gives, after every call, the
//!   stateless full-sequence interpreter's logits at that call's last position;
//! - `rlxc run MODEL.gguf --tokens … -n N --target cuda` generates the interpreter's greedy tokens
//!   (with a driver), or fails with "no CUDA driver" (exit 1, no panic) without one.

mod common;
use common::{ok, python, repo, rlxc, scratch};
use std::path::{Path, PathBuf};
use std::process::Command;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn tiny(dir: &Path, arch: &str, qtype: &str) -> PathBuf {
    let model = dir.join(format!("{arch}-{qtype}.gguf"));
    ok(Command::new(python()).arg(repo().join("tests/reference/llm_ref.py")).args(["tiny", arch, qtype]).arg(&model));
    model
}

const SEQ: [i64; 10] = [1, 5, 9, 2, 77, 3, 40, 11, 60, 8];

/// The interpreter's logits at every position of `SEQ` (the stateless full-sequence graph).
fn reference(dir: &Path, model: &Path) -> (Vec<f32>, usize) {
    let out = dir.join("ref");
    let ids: Vec<String> = SEQ.iter().map(|t| t.to_string()).collect();
    ok(rlxc().args(["run", s(model), "--tokens", &ids.join(","), "--target", "interp", "-o", s(&out)]));
    let l = common::npy(&out.join("logits.npy"));
    let vocab = *l.shape.last().unwrap();
    (common::f32s(&l), vocab)
}

/// Gemma 3 (sliding-window layers, q/k norms, tied Q8_0 embedding; steps of 4 rows and of one) and
/// LLaMA with Q5_0 matrices (the block type of most of Gemma 3 270M's projections) in CPU emulation —
/// the GPU's flat block dot products (one warp per output, lanes along the row) —, and LLaMA with Q4_1
/// matrices (a min per block) in steps of 16 rows, which dequantize each weight into an f32 scratch and
/// run as tiled matmuls (`block_gemm_gpu.rs`): each call's logits within
/// 1e-5 of the logit range of the interpreter's (measured ≤ 1e-7 of it: f32 sums in another order).
#[test]
fn cached_step_on_cuda_matches_the_stateless_interpreter_in_cpu_emulation() {
    let dir = scratch("cuda-llm-emulate");
    let ptxas = rlxc::targets::cuda::ptxas_of(&python()).unwrap_or_else(|e| panic!("{e}"));
    let context = 16usize;
    // Chunk 4: the prompt in two calls (the second padded), one-row logits from a 4-row step; chunk 1:
    // every call one row (the decode artifact: kernels without a grid loop).
    for (arch, qtype, chunk) in [("gemma3", "Q8_0", 4usize), ("llama", "Q5_0", 4), ("gemma3", "Q8_0", 1), ("llama", "Q4_1", 16)] {
        let d = dir.join(format!("{arch}-{qtype}-{chunk}"));
        std::fs::create_dir_all(&d).unwrap();
        let model = tiny(&d, arch, qtype);
        let (want, vocab) = reference(&d, &model);
        let art = d.join("art");
        ok(rlxc().args(["compile", s(&model), "--target", "cuda", "--dim", &format!("context={context}"), "--dim", &format!("chunk={chunk}"), "--emit-ir", "-o", s(&art)]));
        let name = format!("{arch}_{qtype}");
        let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(art.join(format!("{name}.json"))).unwrap()).unwrap();
        let params = m["schedule"]["params"].as_array().unwrap();
        assert_eq!(params.last().unwrap()["buffer"], "state", "{params:?}");
        assert_eq!(m["state"]["tensors"].as_array().unwrap().len(), 2 * 2, "two layers, k and v: {}", m["state"]);
        let sched = std::fs::read(art.join(format!("{name}.schedule.bin"))).unwrap();
        let parsed = rlx_rt::schedule::Schedule::parse(&sched).unwrap();
        assert_eq!(parsed.bases.iter().filter(|b| b.0 == rlx_rt::schedule::BaseKind::State).count(), 1);
        rlxc::targets::cuda::ptxas::assemble(&ptxas, &std::fs::read_to_string(art.join(format!("{name}.ptx"))).unwrap(), 80, &d.join("sm80")).unwrap_or_else(|e| panic!("{arch} {qtype}: {e}"));
        // The prompt's 6 tokens in calls of `chunk` (the last one padded), then 4 decode calls.
        let calls: Vec<(usize, usize)> = (0..6).step_by(chunk).map(|s| (s, (s + chunk).min(6))).chain((6..SEQ.len()).map(|i| (i, i + 1))).collect();
        let emu = d.join("emu");
        let (lo, hi) = want.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        let mut worst = 0f32;
        for (start, end) in calls {
            let n = end - start;
            let mut t = vec![0i64; chunk - n];
            let mut p = vec![context as i64; chunk - n];
            t.extend_from_slice(&SEQ[start..end]);
            p.extend((start..end).map(|i| i as i64));
            let code = "import sys, numpy as np; np.save(sys.argv[1], np.array(sys.argv[3].split(','), dtype=np.int64)); np.save(sys.argv[2], np.array(sys.argv[4].split(','), dtype=np.int64))";
            let join = |v: &[i64]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",");
            let (tn, pn) = (d.join("t.npy"), d.join("p.npy"));
            ok(Command::new(python()).args(["-c", code, s(&tn), s(&pn), &join(&t), &join(&p)]));
            ok(Command::new(python()).arg("tests/gpu/emulate_cuda.py").args([s(&art), &name, s(&emu), s(&tn), s(&pn)]).current_dir(repo()));
            let got = common::f32s(&common::npy(&emu.join("logits.npy")));
            let pos = end - 1;
            let err = got.iter().zip(&want[pos * vocab..(pos + 1) * vocab]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert_eq!(got.len(), vocab);
            assert!(err <= 1e-5 * (hi - lo), "{arch} {qtype} position {pos}: max |diff| {err} over the logit range {lo}..{hi}");
            worst = worst.max(err);
        }
        eprintln!("{arch} {qtype} chunk {chunk}: emulated cuda cached step vs stateless interp, max |diff| {worst:.2e} (logit range {:.1})", hi - lo);
    }
}

/// Generation through `rlxc run --target cuda` (the CUDA executor's `Step`): the interpreter's greedy
/// tokens with a driver; without one, the error (exit 1) and no panic.
#[test]
fn generation_on_cuda_gives_the_interpreters_tokens_when_a_driver_is_present() {
    let dir = scratch("cuda-llm-run");
    let model = tiny(&dir, "gemma3", "Q8_0");
    let run = |t: &str| rlxc().args(["run", s(&model), "--tokens", "1,5,9,2,77", "-n", "6", "--target", t]).output().unwrap();
    let cu = run("cuda");
    let err = String::from_utf8_lossy(&cu.stderr);
    assert!(!err.contains("panicked"), "{err}");
    if let Err(e) = rlx_rt::cuda::probe() {
        eprintln!("no CUDA driver here ({e}): checking the error");
        assert_eq!(cu.status.code(), Some(1), "{err}");
        assert!(err.contains("cannot run --target cuda here") && err.contains("no CUDA driver"), "{err}");
        return;
    }
    let it = run("interp");
    assert!(cu.status.success() && it.status.success(), "{err}");
    let (a, b) = (String::from_utf8_lossy(&cu.stdout), String::from_utf8_lossy(&it.stdout));
    eprintln!("cuda: {a}interp: {b}{err}");
    assert_eq!(a, b);
}
