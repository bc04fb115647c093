//! End to end: all-MiniLM-L6-v2 from its safetensors checkpoint → HIR (`bert_from_dir`) → MIR
//! (`rlx_opt::lower`) → the reference interpreter, compared with the independent NumPy reference
//! `tests/reference/minilm_ref.py` (float64, written without torch). Needs `make setup`; never skips.

mod common;

use common::npy::{read_npy, write_npy};
use rlx_ir::{ConstData, DType};
use std::time::Instant;

const TOL: f64 = 1e-4;

#[test]
fn builds_the_minilm_graph() {
    let g = rlx_models::bert_from_dir(&common::minilm_dir()).unwrap();
    let names: Vec<String> = g.inputs.iter().map(|&i| format!("{} {}", g.value(i).name.as_deref().unwrap(), g.ty(i))).collect();
    assert_eq!(
        names,
        ["input_ids i64[batch,sequence]", "attention_mask i64[batch,sequence]", "token_type_ids i64[batch,sequence]"]
    );
    let out = g.value(g.outputs[0]);
    assert_eq!((out.name.as_deref(), out.ty.to_string().as_str()), (Some("last_hidden_state"), "f32[batch,sequence,384]"));
    let hist = g.histogram();
    let count = |k: &str| hist.iter().find(|(n, _)| *n == k).map_or(0, |x| x.1);
    assert_eq!((count("linear"), count("attention"), count("layer_norm"), count("gelu")), (36, 6, 13, 6));
    let (elems, _) = g.const_stats();
    // 22.7M parameters, less the pooler the encoder does not use.
    assert!((22_000_000..23_000_000).contains(&elems), "{elems} parameters");
    assert!(g.nodes.iter().any(|n| n.name == "encoder.layer.5.attention.self"));
}

#[test]
fn missing_checkpoint_names_the_file() {
    let d = common::scratch("minilm_missing");
    std::fs::copy(common::minilm_dir().join("config.json"), d.join("config.json")).unwrap();
    let e = rlx_models::bert_from_dir(&d).unwrap_err();
    assert!(e.contains("model.safetensors") && e.contains("cannot open"), "{e}");
}

/// Runs the interpreter and the NumPy reference on the same inputs; returns the max abs difference
/// and the interpreter's wall time.
fn compare(tag: &str, batch: usize, seq: usize, edit: impl Fn(&mut [i64], &mut [i64])) -> (f64, f64) {
    let dir = common::scratch(tag);
    let d = |f: &str| dir.join(f);
    let s = |p: std::path::PathBuf| p.to_str().unwrap().to_string();
    common::run_python("tests/reference/make_inputs.py", &["--seq", &seq.to_string(), "--batch", &batch.to_string(), "--out", &s(dir.clone())]);
    let ids = read_npy(&d("input_ids.npy")).unwrap();
    assert_eq!((ids.dtype, ids.shape.clone()), (DType::I64, vec![batch, seq]));
    let mut mask = read_npy(&d("attention_mask.npy")).unwrap().to_i64_vec();
    let mut tt = read_npy(&d("token_type_ids.npy")).unwrap().to_i64_vec();
    edit(&mut mask, &mut tt);
    let mask = ConstData::from_i64(vec![batch, seq], &mask);
    let tt = ConstData::from_i64(vec![batch, seq], &tt);
    write_npy(&d("mask.npy"), &mask).unwrap();
    write_npy(&d("tt.npy"), &tt).unwrap();

    let model = common::minilm_dir();
    common::run_python(
        "tests/reference/minilm_ref.py",
        &["--model-dir", &s(model.clone()), "--input-ids", &s(d("input_ids.npy")), "--attention-mask", &s(d("mask.npy")),
          "--token-type-ids", &s(d("tt.npy")), "--out", &s(d("ref.npy"))],
    );
    let want = read_npy(&d("ref.npy")).unwrap();

    let hir = rlx_models::bert_from_dir(&model).unwrap();
    let mir = rlx_opt::lower(&hir).unwrap_or_else(|probs| {
        panic!("lowering failed:\n{}", probs.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("\n"))
    });
    let t0 = Instant::now();
    let outs = rlx_interp::run(&mir, &[ids, mask, tt]).unwrap_or_else(|e| panic!("interpreter: {e}"));
    let secs = t0.elapsed().as_secs_f64();
    let got = &outs[0];
    assert_eq!((got.dtype, got.shape.clone()), (DType::F32, vec![batch, seq, 384]));
    assert_eq!(want.shape, got.shape);
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    let (mut worst, mut at) = (0.0f64, 0);
    for i in 0..g.len() {
        let diff = (g[i] - w[i]).abs();
        if diff.is_nan() || diff > worst {
            (worst, at) = (diff, i);
        }
    }
    println!("{tag}: batch {batch} seq {seq}: max abs diff {worst:.3e} (at flat index {at}); interpreter {secs:.2} s");
    (worst, secs)
}

#[test]
fn minilm_batch2_seq16_masked_matches_numpy() {
    // The second sequence's last 5 tokens are padding; the first uses token type 1 from position 8.
    let (diff, _) = compare("minilm_b2_s16", 2, 16, |mask, tt| {
        mask[16 + 11..32].fill(0);
        tt[8..16].fill(1);
    });
    assert!(diff <= TOL, "max abs diff {diff:e} > {TOL:e}");
}

#[test]
fn minilm_batch1_seq128_matches_numpy() {
    let (diff, _) = compare("minilm_b1_s128", 1, 128, |_, _| {});
    assert!(diff <= TOL, "max abs diff {diff:e} > {TOL:e}");
}
