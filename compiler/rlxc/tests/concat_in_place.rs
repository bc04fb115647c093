//! Concatenation in place (`plan/concat.rs`), end to end through the CLI: `tests/native/make_concat_cnns.py`
//! writes a fire module's four branches (1×1 and 3×3 convolutions, a max pool, a depthwise convolution)
//! concatenated along channels and two DenseNet steps (a concat inside a concat), at batch 1 (`fire`: the
//! slices are contiguous, so every branch's kernel stores into its slice and the concats are no launches)
//! and batch 2 (`fire2`: the concats stay copies), with ONNX Runtime's outputs on them. Each DenseNet step
//! starts with a BatchNormalization on a concat (no convolution to fold it into, a Relu after it), which
//! `rlx_opt::collapse_affine_chains` turns into one `mul` and one `add`: the program has no division.
//! `rlxc run --target interp` matches ONNX Runtime, and the host object (LLVM, and Cranelift) and the
//! x86_64 one (AVX2) match the interpreter within 1e-4 on every output; the planned program (`--emit-ir`)
//! has no concat launch at batch 1 and all three at batch 2.
//!
//! Needs the venv (onnx, onnxruntime; `make setup`); a missing one fails the test, it never skips.

mod common;
use common::{assert_outputs_match, ok, python, repo, rlxc, scratch};
use std::path::Path;
use std::process::Command;

fn run(models: &Path, model: &str, target: &str, extra: &[&str], out: &Path) {
    common::run_with_x(models, model, target, extra, out);
}

#[test]
fn concats_written_in_place_match_the_interpreter_and_onnx_runtime() {
    let models = scratch("concat_in_place/models");
    ok(Command::new(python()).arg(repo().join("tests/native/make_concat_cnns.py")).arg("--out").arg(&models));
    for (model, launched) in [("fire", 0), ("fire2", 3)] {
        let dir = scratch(&format!("concat_in_place/{model}"));
        ok(rlxc().arg("compile").arg(models.join(format!("{model}.onnx"))).args(["--target", "x86_64", "--emit-ir", "--name", "m", "-o"]).arg(dir.join("ir")));
        let lir = std::fs::read_to_string(dir.join("ir/m.lir")).unwrap();
        let concats = ["cat", "d1", "d2"].iter().filter(|c| lir.contains(&format!("launch \"{c}\" "))).count();
        assert_eq!(concats, launched, "{model}: concat launches in\n{}", lir.lines().filter(|l| l.starts_with("launch")).collect::<Vec<_>>().join("\n"));
        assert!(!lir.contains("div.f32"), "{model}: a BatchNormalization left with its division");
        run(&models, model, "interp", &[], &dir.join("interp"));
        run(&models, model, "host", &[], &dir.join("llvm"));
        run(&models, model, "host", &["--backend", "cranelift"], &dir.join("cranelift"));
        run(&models, model, "x86_64", &[], &dir.join("x86_64"));
        assert_outputs_match(model, &["r2", "y"], &models, &dir, &["llvm", "cranelift", "x86_64"]);
    }
}
