//! Real-model checks of the ONNX breadth ops (issue 19) against ONNX Runtime: exporter-style graphs
//! built by `tests/reference/onnx_seq_models.py` with `onnx.helper` — a bidirectional LSTM + GRU
//! sequence classifier, a U-Net-style upsampler with nearest, bilinear and cubic `Resize`, an
//! STFT audio front end (power spectrum, mel-style projection, log), a scripted-module-style model
//! with `Loop`, `Scan` and a run-time `If` (inputs taking each branch), and a spatial transformer
//! (`AffineGrid` + `GridSample`), and an SSD-style detector head (anchor decoding, `NonMaxSuppression`,
//! gathers of the selected boxes and scores: an output whose row count is known only at run time,
//! written cut to its count) — run by
//! `rlxc run` on the interpreter and on `--target host`: 1e-4 max abs difference. And a scripted
//! `while` loop with an `if` around a second one (`while_loop`) and a `while` with a scan output
//! (`while_scan`): loop and if regions, which the interpreter and `--target host` (LLVM and Cranelift)
//! run and the other targets report per node. Scans past the unroll limit (`scan_rnn`, `scan_axes`,
//! `scan_dim`): loop regions on the interpreter and both CPU code generators. TopK over NaNs
//! (`topk_nan`): NaN-aware comparison (NaN must meet NaN). A two-stage detector's box head
//! (`roi_head`): `RoiAlign` avg and max (an adaptive sampling grid over constant boxes) into a `Gemm`,
//! on the interpreter, both CPU code generators and vulkan. BitCast between kernels (`bitcast_mix`): a view
//! with another dtype on the CPU back ends, reported per node on the others. A modulated deformable
//! convolution block (`deform_block`): `DeformConv` with offsets and mask from convolutions. MatMul
//! with a lower-rank left operand (`matmul_bcast`): the CPU GEMM broadcasts A's batch dims.

mod common;
use common::{ok, python, repo};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The models and ONNX Runtime's outputs, made once per test binary.
fn models() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("onnx_breadth");
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        ok(Command::new(python()).arg("tests/reference/onnx_seq_models.py").arg("--out").arg(&d).current_dir(repo()));
        d
    })
}

fn check(name: &str, target: &str, shape: &[usize]) {
    check_on(name, target, None, shape)
}

/// [`check`] with `--backend BACKEND` (a CPU target's code generator).
fn check_on(name: &str, target: &str, backend: Option<&str>, shape: &[usize]) {
    check_with(name, target, backend, &[], shape)
}

/// [`check_on`] with further `rlxc run` arguments (`--dim T=N`). NaN must meet NaN.
fn check_with(name: &str, target: &str, backend: Option<&str>, args: &[&str], shape: &[usize]) {
    let dir = models();
    let tag = backend.map_or(target.to_string(), |b| format!("{target}-{b}"));
    let out = dir.join(format!("{name}.{tag}"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rlxc"));
    cmd
        .arg("run")
        .arg(dir.join(format!("{name}.onnx")))
        .arg("--input")
        .arg(format!("x={}", dir.join(format!("{name}.x.npy")).display()))
        .arg("--target")
        .arg(target)
        .arg("-o")
        .arg(&out);
    if let Some(b) = backend {
        cmd.arg("--backend").arg(b);
    }
    cmd.args(args);
    ok(&mut cmd);
    let got = rlxc::npy::read(&out.join("y.npy")).unwrap();
    let want = rlxc::npy::read(&dir.join(format!("{name}.ort.npy"))).unwrap();
    assert_eq!(got.shape, shape, "{name} on {target}: output shape");
    assert_eq!(got.shape, want.shape);
    let diff = (0..want.numel())
        .map(|i| match (got.get_f64(i), want.get_f64(i)) {
            (g, w) if g.is_nan() || w.is_nan() => if g.is_nan() && w.is_nan() { 0.0 } else { f64::INFINITY },
            (g, w) => (g - w).abs(),
        })
        .fold(0.0, f64::max);
    println!("{name} on {tag}: max abs diff vs ONNX Runtime {diff:.3e}");
    assert!(diff <= 1e-4, "{name} on {tag}: max abs diff {diff} > 1e-4");
}

#[test]
fn lstm_gru_sequence_model_matches_onnxruntime_on_interp() {
    check("lstm_gru", "interp", &[2, 4]);
}

#[test]
fn lstm_gru_sequence_model_matches_onnxruntime_on_host() {
    check("lstm_gru", "host", &[2, 4]);
}

#[test]
fn unet_resize_matches_onnxruntime_on_interp() {
    check("unet_resize", "interp", &[1, 3, 40, 40]);
}

#[test]
fn unet_resize_matches_onnxruntime_on_host() {
    check("unet_resize", "host", &[1, 3, 40, 40]);
}

#[test]
fn stft_frontend_matches_onnxruntime_on_interp() {
    check("stft_frontend", "interp", &[1, 5, 8]);
}

#[test]
fn stft_frontend_matches_onnxruntime_on_host() {
    check("stft_frontend", "host", &[1, 5, 8]);
}

#[test]
fn loop_scan_if_model_matches_onnxruntime_on_interp() {
    check("control_flow", "interp", &[2, 4]);
    check("control_flow_else", "interp", &[2, 4]);
}

#[test]
fn loop_scan_if_model_matches_onnxruntime_on_host() {
    check("control_flow", "host", &[2, 4]);
    check("control_flow_else", "host", &[2, 4]);
}

#[test]
fn while_loop_and_if_regions_match_onnxruntime_on_interp() {
    check("while_loop", "interp", &[2, 4]);
    check("while_loop_else", "interp", &[2, 4]);
}

/// A loop region's scan output: padded to the trip count 6, written cut to the 4 iterations run.
#[test]
fn while_loop_scan_output_matches_onnxruntime_on_interp() {
    check("while_scan", "interp", &[4, 2, 4]);
}

/// The CPU targets run the regions as control flow in the driver (`rlx_ir::lir::Region`), on both
/// code generators.
#[test]
fn while_loop_and_if_regions_match_onnxruntime_on_host() {
    for backend in ["llvm", "cranelift"] {
        check_on("while_loop", "host", Some(backend), &[2, 4]);
        check_on("while_loop_else", "host", Some(backend), &[2, 4]);
        check_on("while_scan", "host", Some(backend), &[4, 2, 4]);
    }
}

/// A compiled loop region with a maximum trip count may stop there: its header lists return code 11
/// (and runtime-min names it); an artifact without one does not.
#[test]
fn a_bounded_loop_region_lists_its_return_code_in_the_header() {
    let dir = models();
    let out_dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("while_scan_header");
    let out = Command::new(env!("CARGO_BIN_EXE_rlxc")).arg("compile").arg(dir.join("while_scan.onnx")).args(["--target", "host", "--name", "ws", "-o"]).arg(&out_dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let h = std::fs::read_to_string(out_dir.join("ws.h")).unwrap();
    assert!(h.contains("#define ws_ERR_LOOP_BOUND 11 /* a loop region was still running at its maximum trip count */"), "{h}");
    assert_eq!(rlx_rt::Error::from_code(11), Some(rlx_rt::Error::LoopBound));
}

/// The CPU targets claim the region ops (and their bodies' nodes); shaders, CUDA, MCU and Verilog do
/// not: each refuses the model naming every region node with the reason.
#[test]
fn while_loop_and_if_regions_are_reported_per_node_on_non_cpu_targets() {
    let dir = models();
    for target in ["aarch64", "x86_64"] {
        let out = Command::new(env!("CARGO_BIN_EXE_rlxc")).arg("check").arg(dir.join("while_loop.onnx")).arg("--target").arg(target).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{target}: {text}");
    }
    for target in ["vulkan", "cuda", "cortex-m4", "verilog"] {
        let out = Command::new(env!("CARGO_BIN_EXE_rlxc")).arg("check").arg(dir.join("while_loop.onnx")).arg("--target").arg(target).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{target}: {text}");
        for line in [
            "node 'Loop_3': loop i64".to_string(),
            "node 'If_5': if bool".to_string(),
            format!("target '{target}' does not run control-flow regions (loop: a Loop or Scan that does not unroll: a trip count or condition known only at run time, or past the unroll limits)"),
            format!("target '{target}' does not run control-flow regions (if: an if whose branch holds such a loop)"),
        ] {
            assert!(text.contains(&line), "{target}: '{line}' missing from:\n{text}");
        }
    }
}

/// A Scan past the unroll limit (5000 and 4100 steps) is a `loop` region: a tanh RNN over a long
/// sequence; two scan inputs on axes 1 (reversed) and 0 with the output on axis 1 reversed; a
/// symbolic sequence length fixed by `--dim`.
#[test]
fn long_scans_as_loop_regions_match_onnxruntime_on_interp() {
    check("scan_rnn", "interp", &[5000, 8]);
    check("scan_axes", "interp", &[2, 4100, 6]);
    check_with("scan_dim", "interp", None, &["--dim", "T=5000"], &[5000, 8]);
}

#[test]
fn long_scans_as_loop_regions_match_onnxruntime_on_host() {
    for backend in ["llvm", "cranelift"] {
        check_on("scan_rnn", "host", Some(backend), &[5000, 8]);
        check_on("scan_axes", "host", Some(backend), &[2, 4100, 6]);
        check_with("scan_dim", "host", Some(backend), &["--dim", "T=5000"], &[5000, 8]);
    }
}

/// The long Scan is a region (a GPU target names it as one); over an unbound symbolic length it is
/// refused naming the node and the `--dim` that fixes it.
#[test]
fn a_long_scan_is_a_region_and_an_unbound_one_is_refused_naming_the_dim() {
    let dir = models();
    let out = Command::new(env!("CARGO_BIN_EXE_rlxc")).arg("check").arg(dir.join("scan_rnn.onnx")).args(["--target", "vulkan"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("node 'rnn_scan': loop i64") && text.contains("target 'vulkan' does not run control-flow regions (loop:"), "{text}");
    // (`check` binds an unset dim to 1; `compile` leaves it unbound.)
    let out_dir = dir.join("scan_dim.unbound");
    let out = Command::new(env!("CARGO_BIN_EXE_rlxc")).arg("compile").arg(dir.join("scan_dim.onnx")).args(["--target", "host", "-o"]).arg(&out_dir).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("node 'rnn_scan' (Scan, opset 17)") && err.contains("(fix it with --dim T=N)"), "{err}");
}

/// TopK over rows holding NaNs: NaN is the largest value (picked first by largest=1, last by
/// largest=0, in index order), as the interpreter and ONNX Runtime order them; compiled on both CPU
/// code generators and on Vulkan (lavapipe), which runs the same loop form through the shader writer.
#[test]
fn topk_with_nan_matches_onnxruntime_everywhere() {
    check("topk_nan", "interp", &[3, 16]);
    for backend in ["llvm", "cranelift"] {
        check_on("topk_nan", "host", Some(backend), &[3, 16]);
    }
    check("topk_nan", "vulkan", &[3, 16]);
}

#[test]
fn loop_body_changing_a_carried_shape_is_refused_naming_the_node() {
    let dir = models();
    let out = Command::new(env!("CARGO_BIN_EXE_rlxc")).arg("check").arg(dir.join("bad_loop.onnx")).arg("--target").arg("interp").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("node 'rows_loop' (Loop, opset 17)") && err.contains("loop body changes loop-carried value 0 from f32[2,4] to f32[4,4] across an iteration"), "{err}");
}

#[test]
fn spatial_transformer_matches_onnxruntime_on_interp() {
    check("stn", "interp", &[2, 3, 10, 10]);
}

#[test]
fn spatial_transformer_matches_onnxruntime_on_host() {
    check("stn", "host", &[2, 3, 10, 10]);
}

#[test]
fn detector_head_with_nms_matches_onnxruntime_on_interp() {
    check("detector", "interp", &[28, 6]);
}

#[test]
fn detector_head_with_nms_matches_onnxruntime_on_host() {
    check("detector", "host", &[28, 6]);
}

#[test]
fn detector_artifact_declares_its_bounded_output_and_count() {
    let dir = models();
    let out = dir.join("detector.artifact");
    ok(Command::new(env!("CARGO_BIN_EXE_rlxc")).arg("compile").arg(dir.join("detector.onnx")).arg("--target").arg("host").arg("-o").arg(&out));
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("detector.json")).unwrap()).unwrap();
    // 1 batch × 3 classes × min(20 per class, 48 boxes) rows; the count is output 1, an i64 scalar.
    assert_eq!(m["bounded"], serde_json::json!([{"output": 0, "axis": 0, "bound": 60, "count_output": 1}]));
    assert_eq!(m["outputs"][0]["shape"], serde_json::json!([60, 6]));
    assert_eq!(m["outputs"][1], serde_json::json!({"name": "y_count", "dtype": "i64", "shape": []}));
    let h = std::fs::read_to_string(out.join("detector.h")).unwrap();
    for line in ["#define detector_OUTPUT_0_BOUNDED_AXIS 0", "#define detector_OUTPUT_0_BOUND 60", "#define detector_OUTPUT_0_COUNT_OUTPUT 1"] {
        assert!(h.contains(line), "{line} missing from the header");
    }
    let rs = std::fs::read_to_string(out.join("detector.rs")).unwrap();
    assert!(rs.contains("pub const BOUNDED: [(usize, usize, usize); 1] = [(0, 0, 1)];"));
}

#[test]
fn roi_align_box_head_matches_onnxruntime_on_interp() {
    check("roi_head", "interp", &[5, 6]);
}

#[test]
fn roi_align_box_head_matches_onnxruntime_on_host_and_vulkan() {
    for backend in ["llvm", "cranelift"] {
        check_on("roi_head", "host", Some(backend), &[5, 6]);
    }
    check("roi_head", "vulkan", &[5, 6]);
}

#[test]
fn roi_align_with_an_adaptive_grid_over_run_time_boxes_is_refused_naming_the_node() {
    let dir = models();
    let out = Command::new(env!("CARGO_BIN_EXE_rlxc")).arg("check").arg(dir.join("bad_roi.onnx")).arg("--target").arg("interp").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("node 'box_pool' (RoiAlign, opset 16)") && err.contains("rois") && err.contains("sampling_ratio > 0"), "{err}");
}

#[test]
fn bitcast_between_kernels_matches_onnxruntime_on_interp_and_host() {
    check("bitcast_mix", "interp", &[4, 8]);
    for backend in ["llvm", "cranelift"] {
        check_on("bitcast_mix", "host", Some(backend), &[4, 8]);
    }
}

#[test]
fn bitcast_is_reported_per_node_on_targets_that_do_not_claim_it() {
    let dir = models();
    let out = Command::new(env!("CARGO_BIN_EXE_rlxc")).arg("check").arg(dir.join("bitcast_mix.onnx")).arg("--target").arg("vulkan").output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{text}");
    for (node, to) in [("BitCast_1", "i32"), ("BitCast_3", "f32"), ("BitCast_4", "u32")] {
        assert!(text.contains(&format!("node '{node}': bitcast")) && text.contains(&format!("does not implement bitcast to {to}")), "{text}");
    }
}

#[test]
fn deformable_conv_block_matches_onnxruntime_on_interp_host_and_vulkan() {
    check("deform_block", "interp", &[2, 6, 5, 4]);
    for backend in ["llvm", "cranelift"] {
        check_on("deform_block", "host", Some(backend), &[2, 6, 5, 4]);
    }
    check("deform_block", "vulkan", &[2, 6, 5, 4]);
}

#[test]
fn matmul_with_a_broadcast_left_operand_matches_onnxruntime_on_interp_and_host() {
    check("matmul_bcast", "interp", &[5, 2, 3, 7]);
    for backend in ["llvm", "cranelift"] {
        check_on("matmul_bcast", "host", Some(backend), &[5, 2, 3, 7]);
    }
}
