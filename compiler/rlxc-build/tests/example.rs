//! Builds `tests/build-script-example` (a standalone cargo project whose build.rs uses rlxc-build)
//! with the workspace's `target/release/rlxc`, runs it, and checks its outputs against numpy; and
//! checks that a broken model fails the cargo build with warnings that name the problem, no panic.
//!
//! Needs `target/release/rlxc` (`make build` or `cargo build --release -p rlxc`) and the venv
//! (`make setup`; `$RLX_PY` or `.venv/bin/python`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn example() -> PathBuf {
    repo().join("tests/build-script-example")
}

fn rlxc() -> PathBuf {
    let p = repo().join("target/release/rlxc");
    assert!(p.is_file(), "{} not found: build the compiler first (`make build` or `cargo build --release -p rlxc`)", p.display());
    p
}

/// The venv python: `$RLX_PY`, else `.venv/bin/python` in the repo. Fails (never skips) when absent.
fn python() -> PathBuf {
    let p = match std::env::var_os("RLX_PY") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => repo().join(".venv/bin/python"),
    };
    assert!(p.exists(), "venv python {} not found: run `make setup` (or set RLX_PY to the venv's python)", p.display());
    p
}

/// A fresh folder under the system temp dir for one test case.
fn tmp(case: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rlxc-build-{case}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn make_model(args: &[&str]) -> String {
    let out = Command::new(python()).arg(example().join("make_model.py")).args(args).output().expect("run make_model.py");
    assert!(out.status.success(), "make_model.py {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `cargo build --release --offline` of the example, target dir under `tmp`, `RLXC` = `rlxc`.
fn build_example(tmp: &Path, rlxc: &Path, model: Option<&Path>) -> Output {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut c = Command::new(cargo);
    c.args(["build", "--release", "--offline", "--manifest-path"])
        .arg(example().join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", tmp.join("target"))
        .env("RLXC", rlxc)
        .env_remove("EXAMPLE_MODEL")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    if let Some(m) = model {
        c.env("EXAMPLE_MODEL", m);
    }
    let t = Instant::now();
    let out = c.output().expect("run cargo");
    eprintln!("cargo build of the example ({}): {:.2?}", model.map_or("model.onnx".into(), |m| m.display().to_string()), t.elapsed());
    out
}

fn parse_values(text: &str) -> Vec<f64> {
    text.split_whitespace().map(|w| w.parse().unwrap_or_else(|_| panic!("not a number: {w:?}"))).collect()
}

#[test]
fn example_builds_runs_and_matches_numpy() {
    let rlxc = rlxc();
    let tmp = tmp("example");
    // The model is generated into the example's folder (git-ignored there), as its build.rs expects.
    make_model(&[example().join("model.onnx").to_str().unwrap()]);
    let expected_text = make_model(&["--expect"]);
    let expected = parse_values(&expected_text);
    assert_eq!(expected.len(), 8192 * 3);
    let expected_file = tmp.join("expected.txt");
    std::fs::write(&expected_file, &expected_text).unwrap();

    let out = build_example(&tmp, &rlxc, None);
    assert!(out.status.success(), "building the example failed:\n{}", String::from_utf8_lossy(&out.stderr));

    let bin = tmp.join("target/release/build-script-example");
    let t = Instant::now();
    let run = Command::new(&bin).arg(&expected_file).output().expect("run the example");
    eprintln!("example run: {:.2?}", t.elapsed());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "the example failed its own check:\n{stderr}");
    assert!(stderr.contains("all 24576 values match within 1e-5"), "{stderr}");

    // And compare here too, independently of the example's own check.
    let got = parse_values(&String::from_utf8(run.stdout).unwrap());
    assert_eq!(got.len(), expected.len());
    let worst = got.iter().zip(&expected).map(|(g, e)| (g - e).abs()).fold(0.0, f64::max);
    assert!(worst <= 1e-5, "max |y - numpy| = {worst:e}");

    // The artifact is where the docs say, with the archive and the manifest.
    let build = tmp.join("target/release/build");
    let out_dir = std::fs::read_dir(&build)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path().join("out/rlxc/mlp"))
        .find(|p| p.is_dir())
        .expect("OUT_DIR/rlxc/mlp");
    for f in ["mlp.rs", "mlp.h", "mlp.json", "mlp.o", "libmlp_model.a", "librlx_rt.a"] {
        assert!(out_dir.join(f).is_file(), "{} missing", out_dir.join(f).display());
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// The build fails with status != 0, prints `warning:` lines containing `needle` and the summary,
/// and nothing panicked.
fn assert_fails_with(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the build should have failed:\n{stderr}");
    assert!(!stderr.contains("panicked at"), "a panic in the build script:\n{stderr}");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.starts_with("warning: build-script-example")).collect();
    assert!(warnings.iter().any(|l| l.contains(needle)), "no `warning:` line names {needle:?}:\n{stderr}");
    assert!(stderr.contains("rlxc-build: "), "no one-line summary:\n{stderr}");
}

#[test]
fn broken_models_fail_with_warnings_not_panics() {
    let rlxc = rlxc();
    let tmp = tmp("broken");

    // A model path that does not exist.
    let missing = tmp.join("no-such-model.onnx");
    let out = build_example(&tmp, &rlxc, Some(&missing));
    assert_fails_with(&out, "no-such-model.onnx");
    assert_fails_with(&out, "cannot read model");

    // An op rlxc does not know.
    let bad = tmp.join("unsupported.onnx");
    make_model(&["--unsupported", bad.to_str().unwrap()]);
    let out = build_example(&tmp, &rlxc, Some(&bad));
    assert_fails_with(&out, "unsupported op Frobnicate in domain 'com.example'");
    assert_fails_with(&out, "node 'frob'");

    // No compiler at $RLXC.
    let out = build_example(&tmp, &tmp.join("no-rlxc"), Some(&bad));
    assert_fails_with(&out, "the rlxc compiler was not found");

    let _ = std::fs::remove_dir_all(&tmp);
}
