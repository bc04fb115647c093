//! Helpers shared by rlxc's integration tests: where the repository and the venv python are.
#![allow(dead_code)]

pub mod mnist;

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

/// A .npy file (panics naming it when it cannot be read).
pub fn npy(p: &Path) -> ConstData {
    rlxc::npy::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}
