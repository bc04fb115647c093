//! Inputs the fuzzer found (`fuzz/fuzz_targets/{onnx_*,safetensors*,npy}.rs`), checked in under
//! `tests/fuzz-regressions/<target>/`: each gives an error that says where the problem is, never a
//! panic. Every checked-in input of a target also runs through that target's reader.

use rlx_import::{load_onnx_bytes, ImportOptions};
use std::path::{Path, PathBuf};

fn dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fuzz-regressions").join(target)
}

fn read(target: &str, name: &str) -> Vec<u8> {
    let p = dir(target).join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every checked-in file of `target`.
fn inputs(target: &str) -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir(target)) else { return Vec::new() };
    entries.map(|e| std::fs::read(e.unwrap().path()).unwrap()).collect()
}

fn onnx_err(name: &str) -> String {
    match load_onnx_bytes(&read("onnx_import", name), None, &ImportOptions::default()) {
        Ok(_) => panic!("onnx_import/{name}: expected an import error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_checked_in_input_is_read_without_panic() {
    for b in inputs("onnx_import").iter().chain(&inputs("onnx_decode")) {
        let _ = load_onnx_bytes(b, None, &ImportOptions::default());
        let _ = rlx_import::onnx_summary_bytes(b);
    }
    for b in inputs("onnx_tensor") {
        let _ = rlx_import::parse_tensor_pb(&b, None);
    }
    for b in inputs("safetensors") {
        let _ = rlx_import::safetensors::parse_safetensors(std::sync::Arc::new(b));
    }
    for b in inputs("npy") {
        let _ = rlx_import::npy::parse(&b);
    }
}

#[test]
fn einsum_with_an_ellipsis_term_longer_than_the_rank_names_the_node() {
    // Equation "...ii -\x1c...i" on a rank-3 input: the ellipsis' rank was computed as
    // rank - (letters - 3), which wrapped below zero and asked for a capacity-overflowing string.
    let e = onnx_err("einsum-ellipsis-longer-than-rank.onnx");
    assert!(e.contains("(Einsum, opset") && e.contains("has more letters than its operand's rank 3"), "{e}");
}

#[test]
fn a_pool_kernel_of_size_0_names_the_node() {
    // MaxPool kernel_shape [0, 2]: the window size dilation * (k - 1) + 1 wrapped below zero.
    let e = onnx_err("maxpool-kernel-0.onnx");
    assert!(e.contains("(MaxPool, opset 22)") && e.contains("pool kernel 0, stride 1, dilation 1: each must be at least 1"), "{e}");
}

#[test]
fn attention_with_k_of_another_rank_than_q_names_the_node() {
    // 3-D Q [2, 4, 24] with a 2-D K [6, 24]: the head split indexed K's third dim.
    let e = onnx_err("attention-k-rank-2.onnx");
    assert!(e.contains("(Attention, opset") && e.contains("Attention: K has rank 2, expected 3"), "{e}");
}

#[test]
fn a_same_upper_pool_kernel_of_size_0_names_the_node() {
    // MaxPool auto_pad SAME_UPPER, kernel_shape [2, 0]: the SAME pads computed k - 1, which wrapped
    // below zero before the pool's own kernel check ran.
    let e = onnx_err("maxpool-same-upper-kernel-0.onnx");
    assert!(e.contains("(MaxPool, opset 22)") && e.contains("auto_pad SAME_UPPER: kernel [2, 0] and strides [1, 1] must be at least 1"), "{e}");
}

#[test]
fn group_normalization_of_a_rank_1_input_names_the_node() {
    // Found by the 600 s campaign on 16 cores: GroupNormalization read the channel dim xd[1] of a
    // rank-1 input (index out of bounds). The rank and num_groups | C are checked now.
    let e = onnx_err("groupnorm-rank-1-input.onnx");
    assert!(e.contains("GroupNormalization") && e.contains("it needs [N, C, ...]"), "{e}");
}

#[test]
fn range_with_an_empty_start_tensor_names_the_node() {
    // Found by a 600 s local run of onnx_import: Range read element 0 of an empty constant start.
    let e = onnx_err("range-start-empty-tensor.onnx");
    assert!(e.contains("must be a scalar (one element), it has 0"), "{e}");
}
