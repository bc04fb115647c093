//! The CPU layout pass (`rlx_opt::channels_last`, `--layout auto`, the default): CNNs
//! (`tests/native/make_nhwc_cnns.py` — a MobileNet-style `dwsep`, an EfficientNet-style `mbconv` with
//! squeeze-and-excitation, and a ResNet / Inception-style `bottleneck`: residuals, asymmetric padding,
//! stride 2, dilation 2, 5×5 and 7×7 windows, channel counts that are no multiple of the vector width,
//! concats along the channels, max and average pools with and without ceil mode and counted padding,
//! batch 2) run channels-last — depthwise convolutions as `conv_nhwc` window kernels
//! (`plan/conv_nhwc.rs`), dense ones as its implicit GEMM over a padded copy of x
//! (`plan/conv_nhwc_gemm.rs`), pointwise ones as matmuls, pools as `*_pool_nhwc`, the layout changed only
//! at the edges —, and `rlxc run --target interp` matches ONNX Runtime, and the host object (LLVM and
//! Cranelift), the x86_64 one (AVX2: 8 lanes) and the host object with `--layout nchw` match the
//! interpreter within 1e-4 on every output; the window-kernel models (grouped convolutions between the
//! depthwise ones) and a small VGG-style one whose edge changes would move too much are left in NCHW (a
//! ResNet-style bottleneck whose layout changes would cost too much too, and a VGG-style chain that goes
//! channels-last: `rlx_opt`'s unit tests of the pass).
//!
//! Needs the venv (onnx, onnxruntime) from `make setup`; a missing one fails the test, it never skips.

mod common;
use common::rlxc;
use common::{assert_outputs_match, ok, python, repo};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn scratch(name: &str) -> PathBuf {
    common::scratch(&format!("channels_last/{name}"))
}

/// The models, inputs and ONNX Runtime outputs (written once per test run).
fn models() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = scratch("models");
        ok(Command::new(python()).arg(repo().join("tests/native/make_nhwc_cnns.py")).arg("--out").arg(&d));
        ok(Command::new(python()).arg(repo().join("tests/native/make_window_cnns.py")).arg("--out").arg(d.join("window")));
        d
    })
}

/// `rlxc run MODEL --target T [extra] -i x=X -o OUT`.
fn run(model: &str, target: &str, extra: &[&str], out: &Path) -> String {
    common::run_with_x(models(), model, target, extra, out)
}

/// The planned program (`--emit-ir`'s LIR text) of a host compile of `model` (an .onnx path).
fn lir(model: &Path, extra: &[&str], out: &Path) -> String {
    ok(rlxc().arg("compile").arg(model).args(["--target", "host", "--emit-ir", "--name", "m"]).args(extra).arg("-o").arg(out));
    std::fs::read_to_string(out.join("m.lir")).unwrap()
}

/// Kernels of each form in a LIR text: channels-last depthwise and dense ones (their packed weights'
/// labels), the padded copies of the dense ones' inputs, and the layout changes the pass left.
fn forms(lir: &str) -> (usize, usize, usize, usize) {
    let launches: Vec<&str> = lir.lines().filter(|l| l.starts_with("launch ")).collect();
    let bufs = |what: &str| lir.lines().filter(|l| l.starts_with("buf ") && l.contains(what)).count();
    let moves = launches.iter().filter(|l| l.contains("/to_nhwc\"") || l.contains("/to_nchw\"")).count();
    let pads = launches.iter().filter(|l| l.contains("/pad\"")).count();
    (bufs("(packed [taps][channels])"), bufs("(packed [panels][taps][channels]"), pads, moves)
}

#[test]
fn cnns_run_channels_last_and_match_the_interpreter() {
    let cases = [
        // dwsep: its input's change inside the stem's padded copy (the stem a dense `conv_nhwc`).
        ("dwsep", &["logits"][..], (5, 1, 1, 0)),
        // mbconv: its input's and output's changes.
        ("mbconv", &["y"][..], (2, 0, 0, 2)),
        // bottleneck: stem, three 3×3 and a strided 1×1 dense, four of them padded; pools, concat and
        // global pool channels-last too: no change but inside the stem's padded copy.
        ("bottleneck", &["logits"][..], (0, 5, 4, 0)),
        // winograd: the two 3×3 stride-1 convolutions in the Winograd form (`plan/winograd_nhwc.rs`,
        // counted below), the stride-2 one the implicit GEMM; three padded copies; x read channels-last
        // by the first pointwise convolution in place: no change.
        ("winograd", &["logits"][..], (0, 1, 3, 0)),
    ];
    for (model, outs, want) in cases {
        let dir = scratch(model);
        let onnx = models().join(format!("{model}.onnx"));
        let got = forms(&lir(&onnx, &[], &dir.join("lir")));
        assert_eq!(got, want, "{model}: (depthwise, dense channels-last kernels, padded copies, layout changes)");
        if model == "bottleneck" {
            // Strided homes (plan/homes.rs): the 1×1 convolutions before the 3×3 ones store into the
            // interior of the padded copy, whose launch binds only its own buffer (it zeroes the border),
            // and the branches store into their slices of the concat, which is no launch.
            let text = std::fs::read_to_string(dir.join("lir").join("m.lir")).unwrap();
            let launch = |name: &str| text.lines().find(|l| l.starts_with(&format!("launch \"{name}\""))).map(str::to_string);
            for pad in ["b1b/pad", "b2b/pad"] {
                let l = launch(pad).unwrap_or_else(|| panic!("no {pad} launch"));
                assert_eq!(l.matches("buf").count(), 1, "{l}");
            }
            assert!(launch("cat").is_none(), "the concat is a launch: {text}");
        }
        if model == "winograd" {
            // F(4×4) over 29² outputs (a last tile of one row and column), F(2×2) over 15².
            let text = std::fs::read_to_string(dir.join("lir").join("m.lir")).unwrap();
            for (w, form) in [("a_w", "F(4×4)"), ("b_w", "F(2×2)")] {
                assert!(text.lines().any(|l| l.starts_with("buf ") && l.contains(&format!("\"{w} (winograd {form}, packed"))), "{w} not in the {form} form: {text}");
            }
        }
        assert_eq!(forms(&lir(&onnx, &["--layout", "nchw"], &dir.join("lir_nchw"))), (0, 0, 0, 0), "{model} --layout nchw");
        run(model, "interp", &[], &dir.join("interp"));
        run(model, "host", &[], &dir.join("llvm"));
        run(model, "host", &["--backend", "cranelift"], &dir.join("cranelift"));
        // x86-64-v3 (AVX2): 8-lane vectors and half-width panels of 8 whatever this machine's width.
        run(model, "x86_64", &[], &dir.join("x86_64"));
        run(model, "host", &["--layout", "nchw"], &dir.join("nchw"));
        assert_outputs_match(model, outs, models(), &dir, &["llvm", "cranelift", "x86_64", "nchw"]);
    }
}

/// Models whose convolutions would need a layout change on each side of most of them keep NCHW — the
/// window-kernel models (grouped convolutions between the depthwise ones) —, and so does a small VGG-style
/// one whose input's and output's changes would move too much of what its three convolutions produce
/// (`plain`: its 3×3 ones keep NCHW's direct and Winograd forms); `plain` still matches ONNX Runtime
/// (interpreter) and the interpreter (host).
#[test]
fn models_that_would_not_gain_keep_nchw() {
    let dir = scratch("keep");
    for model in ["window", "silu", "padded"] {
        let onnx = models().join("window").join(format!("{model}.onnx"));
        assert_eq!(forms(&lir(&onnx, &[], &dir.join(model))), (0, 0, 0, 0), "{model}");
    }
    assert_eq!(forms(&lir(&models().join("plain.onnx"), &[], &dir.join("plain"))), (0, 0, 0, 0), "plain");
    run("plain", "interp", &[], &dir.join("plain_run/interp"));
    run("plain", "host", &[], &dir.join("plain_run/llvm"));
    assert_outputs_match("plain", &["y"], models(), &dir.join("plain_run"), &["llvm"]);
}
