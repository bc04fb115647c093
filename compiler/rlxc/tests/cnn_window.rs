//! Window kernels (depthwise / grouped convolution and 2-D pools in vector loops, `plan/window.rs`)
//! and BatchNormalization folding (`rlx_opt::fold_conv_affine`), end to end through the CLI:
//! `tests/native/make_window_cnns.py` writes small CNNs and ONNX Runtime's outputs on them.
//! - `window` (rows of 37 columns: vector interiors with remainders, stride 1 and 2, dilation, padded
//!   and unpadded, ceil mode, both average-pool counts, a partial block of output channels, an average
//!   and a max pool whose one window covers the input — imported as the global pools —, SiLU after a
//!   depthwise convolution: rows stored bare, then the epilogue over each row in vectors) and
//!   `narrow` (7 columns: under a vector; batch 2), `plane` (13 × 13, batch 2) and `plane2` (9 × 9,
//!   padding at the bottom and right only, a residual operand the plane's size, a grouped convolution
//!   in blocks of 8 output channels) — the plane form of stride-1 "same" grouped convolutions —, and
//!   `silu` (32 channels over 7 × 7, batch 2: depthwise 5×5, 5×5 stride 2, 3×3 dilation 2 with a
//!   residual operand in the channels-as-lanes form, bottom/right padding in the window kernels,
//!   SiLU = x · Sigmoid(x) fused after a depthwise, a 1×1 and a Gemm), and `padded` (16 channels over
//!   29 × 29, batch 2: the padded phase-plane form — 5×5 at stride 1 and 2, dilation 2 and 4,
//!   asymmetric padding, 3×3 under SiLU at stride 1 and 2, a residual operand, a 7-column output; and
//!   a squeeze-and-excitation gate multiply, an elementwise kernel over flat planes, `plan/flat.rs`):
//!   `rlxc run --target interp` matches ONNX Runtime, and the host object (LLVM, and Cranelift) and
//!   the x86_64 one (AVX2: 8 lanes) match the interpreter within 1e-4 on every output;
//! - `bn` (Conv → BatchNormalization → Relu → depthwise Conv → BatchNormalization → Relu): compiles
//!   for `--target cortex-m4 --calibrate` (before the folding: "no int8 form" for sub/div/mul/add), its
//!   firmware's int8 outputs in qemu-system-arm equal `--target interp-int8` bit for bit, and
//!   dequantized they are within a few int8 steps of ONNX Runtime's float outputs.
//!
//! Needs the venv (onnx, onnxruntime), arm-none-eabi-gcc and qemu-system-arm (`make setup`); a
//! missing one fails the test, it never skips.

mod common;
use common::{rlxc};
use common::{assert_outputs_match, npy, ok, python, repo};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn scratch(name: &str) -> PathBuf {
    common::scratch(&format!("cnn_window/{name}"))
}

/// The models, inputs and ONNX Runtime outputs (written once per test run).
fn models() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = scratch("models");
        ok(Command::new(python()).arg(repo().join("tests/native/make_window_cnns.py")).arg("--out").arg(&d));
        d
    })
}

/// `rlxc run MODEL --target T [extra] -i x=X -o OUT`; returns stdout.
fn run(model: &str, target: &str, extra: &[&str], out: &Path) -> String {
    common::run_with_x(models(), model, target, extra, out)
}

/// The `silu` model's outputs: depthwise convolutions in the channels-as-lanes form (`plan/dw_lanes.rs`)
/// and SiLU epilogues reading the anchor's value twice (`plan/fuse.rs`).
const SILU: [&str; 6] = ["dws", "dws2", "dwd", "dwp", "pws", "mms"];

/// The padded phase-plane form's outputs (`plan/dw_padded.rs`; `pd` and `pg`, 16 channels with rows of 15
/// and 7 columns, the channels-as-lanes form's), and `ph` (`plan/flat.rs`).
const PADDED: [&str; 10] = ["pa", "pb", "pc", "pd", "pe", "pf", "pg", "ph", "pi", "pj"];

const OUTS: [&str; 12] = ["dw", "dw2", "grp", "maxp", "avgp", "avgc", "dw5", "grp5", "gavg", "gmax", "dwsw", "dwsw2"];

#[test]
fn window_kernels_match_the_interpreter_and_onnx_runtime() {
    for (model, outs) in [("window", &OUTS[..]), ("narrow", &OUTS[..]), ("plane", &OUTS[..]), ("plane2", &["dwa", "grp8"][..]), ("silu", &SILU[..]), ("padded", &PADDED[..])] {
        let dir = scratch(model);
        run(model, "interp", &[], &dir.join("interp"));
        run(model, "host", &[], &dir.join("llvm"));
        run(model, "host", &["--backend", "cranelift"], &dir.join("cranelift"));
        // x86-64-v3 (AVX2): 8-lane window kernels whatever this machine's vector width.
        run(model, "x86_64", &[], &dir.join("x86_64"));
        assert_outputs_match(model, outs, models(), &dir, &["llvm", "cranelift", "x86_64"]);
    }
}

#[test]
fn conv_batchnorm_relu_runs_int8_on_cortex_m4() {
    let dir = scratch("bn");
    let calib = models().join("calib.npy").display().to_string();
    ok(rlxc().arg("compile").arg(models().join("bn.onnx")).args(["--target", "cortex-m4", "--calibrate", &calib, "--name", "bn", "-o"]).arg(dir.join("c")));
    let man: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("c/bn.json")).unwrap()).unwrap();
    let (scale, zp) = (man["outputs"][0]["scale"].as_f64().unwrap(), man["outputs"][0]["zero_point"].as_f64().unwrap());

    run("bn", "interp-int8", &["--calibrate", &calib], &dir.join("int8"));
    let said = run("bn", "cortex-m4", &["--calibrate", &calib], &dir.join("m4"));
    assert!(said.contains("qemu-system-arm"), "{said}");
    let (want, got) = (npy(&dir.join("int8/y.npy")), npy(&dir.join("m4/y.npy")));
    assert_eq!(got.shape, vec![1, 4, 8, 8]);
    assert_eq!(got.data.bytes(), want.data.bytes(), "cortex-m4 firmware vs the int8 interpreter");

    // Against the float model in ONNX Runtime: a few int8 steps (two quantized layers).
    let ort = npy(&models().join("bn_ort_y.npy")).to_f64_vec();
    let steps = got.to_f64_vec().iter().zip(&ort).map(|(q, f)| ((q - zp) * scale - f).abs() / scale).fold(0.0, f64::max);
    eprintln!("bn: int8 output within {steps:.2} steps of ONNX Runtime (scale {scale})");
    assert!(steps <= 4.0, "int8 output {steps} steps from ONNX Runtime's");
}
