//! Helpers shared by rlxc's integration tests: where the repository and the venv python are.
#![allow(dead_code)]

use std::path::PathBuf;

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
