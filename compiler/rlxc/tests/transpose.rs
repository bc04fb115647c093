//! Transposes that move the input's innermost dim on the CPU targets (`rlx-opt`'s `plan/transpose.rs`):
//! the cases of `tests/native/make_transposes.py` — the register-tile form (`tiles_*`: NCHW → NHWC at
//! batch 2, a matrix, rank 5, the parallel loop inside the blocks, int32; `tails_*`: dims past the whole
//! tiles), and the blocked form where a dim is narrower than the vector width or the value is computed
//! (`blocked_*`, `fused_*`) — compiled for
//! x86_64 (AVX2: 8 × 8 tiles), the host (its own width, 1 and 2 threads) and Cranelift: each output equal,
//! byte for byte, to the reference interpreter's (a transpose copies values). And the LLVM writer takes
//! the register form exactly where the planner wrote its nest (`ir/transpose.rs`: shuffles in the IR).

mod common;

use common::{npy, ok, python, repo, rlxc, scratch};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The cases, written into `dir`: (name, model, input argument).
fn cases(dir: &Path) -> Vec<(String, PathBuf, String)> {
    let out = ok(Command::new(python()).arg("tests/native/make_transposes.py").arg("--out").arg(dir).current_dir(repo()));
    let names: Vec<String> = out.lines().map(str::to_string).collect();
    assert!(names.len() >= 8, "make_transposes.py wrote {} cases:\n{out}", names.len());
    names.into_iter().map(|n| (n.clone(), dir.join(format!("{n}.onnx")), format!("x={}", dir.join(format!("{n}.x.npy")).display()))).collect()
}

/// `rlxc run` of `model` on `target` (`-cranelift`: that back end) with `threads`; the output's bytes.
fn run(model: &Path, input: &str, target: &str, threads: usize, out: &Path) -> Vec<u8> {
    let (t, backend) = target.strip_suffix("-cranelift").map_or((target, None), |t| (t, Some("cranelift")));
    let mut c = rlxc();
    c.current_dir(repo()).arg("run").arg(model).args(["--target", t, "--input", input]).arg("-o").arg(out).env("RLX_NUM_THREADS", threads.to_string());
    if let Some(b) = backend {
        c.args(["--backend", b]);
    }
    ok(&mut c);
    let files: Vec<PathBuf> = std::fs::read_dir(out).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "npy")).collect();
    assert_eq!(files.len(), 1, "{}: outputs {files:?}", model.display());
    npy(&files[0]).data.bytes().to_vec()
}

#[test]
fn transposes_match_interp() {
    let dir = scratch("transpose_run");
    for (name, model, input) in cases(&dir) {
        let want = run(&model, &input, "interp", 1, &dir.join(format!("{name}-interp")));
        assert!(want.iter().any(|&b| b != 0), "{name}: the reference output is all zeros");
        for (t, threads) in [("x86_64", 1), ("host", 1), ("host", 2), ("x86_64-cranelift", 2)] {
            let got = run(&model, &input, t, threads, &dir.join(format!("{name}-{t}-{threads}")));
            assert!(got == want, "{name} on {t} ({threads} threads): differs from the interpreter");
        }
    }
}

#[test]
fn register_tiles_are_taken() {
    let dir = scratch("transpose_path");
    for (name, model, _) in cases(&dir) {
        for target in ["x86_64", "host"] {
            let out = dir.join(format!("{name}-{target}"));
            ok(rlxc().current_dir(repo()).arg("compile").arg(&model).args(["--target", target, "--name", "m", "--emit-ir", "-o"]).arg(&out));
            let ll = std::fs::read_to_string(out.join("m.ll")).unwrap();
            let shuffles = ll.matches("shufflevector").count();
            if name.starts_with("tiles_") || name.starts_with("tails_") {
                // x86_64: 8 × 8 blocks, 24 shuffles each; the host: 16 × 16 (64) with AVX-512, else 8 × 8.
                assert!(shuffles == 24 || (target == "host" && shuffles == 64), "{name} on {target}: {shuffles} shuffles, not one register-tile block");
            } else {
                assert_eq!(shuffles, 0, "{name} on {target}: the register-tile form on a shape it does not fit");
            }
        }
    }
}
