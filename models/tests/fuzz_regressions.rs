//! Inputs of the `safetensors_folder` fuzz target (`fuzz/fuzz_targets/safetensors_folder.rs`),
//! checked in under `tests/fuzz-regressions/safetensors_folder/`: a `config.json`, one NUL byte, then
//! `model.safetensors`. Each is laid out as a checkpoint folder and loaded with `bert_from_dir`: an
//! error naming the file and the field or tensor at fault, never a panic or a hang.

use std::path::{Path, PathBuf};

fn dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fuzz-regressions").join(target)
}

/// Lays `input` out as a checkpoint folder (as the fuzz target does) and loads it.
fn load(test: &str, input: &[u8]) -> Result<rlx_ir::Hir, String> {
    let split = input.iter().position(|&b| b == 0).unwrap_or(input.len());
    let d = std::env::temp_dir().join(format!("rlx-models-fuzz-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("config.json"), &input[..split]).unwrap();
    std::fs::write(d.join("model.safetensors"), input.get(split + 1..).unwrap_or(&[])).unwrap();
    let r = rlx_models::bert_from_dir(&d);
    let _ = std::fs::remove_dir_all(&d);
    r
}

#[test]
fn every_checked_in_input_loads_or_errs_without_panic() {
    for e in std::fs::read_dir(dir("safetensors_folder")).unwrap() {
        let p = e.unwrap().path();
        let _ = load("all", &std::fs::read(&p).unwrap());
    }
}

#[test]
fn a_layer_count_beyond_the_checkpoint_is_named_not_listed() {
    // num_hidden_layers 10^12 built a list of 16 × 10^12 expected weights before comparing.
    let input = std::fs::read(dir("safetensors_folder").join("huge-layer-count.bin")).unwrap();
    let e = load("layers", &input).unwrap_err();
    assert!(e.contains("model.safetensors: num_hidden_layers 1000000000000 cannot match a checkpoint of 1 tensors"), "{e}");
}
