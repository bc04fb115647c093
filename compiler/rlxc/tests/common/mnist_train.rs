//! The training tests' data: tests/train/mnist_reference.py's MNIST subset, untrained MLP and numpy
//! results, made once per version of the script (and once per process) in build/train-test/mnist.

use super::{ok, repo};
use std::path::PathBuf;
use std::process::Command;

pub fn data() -> PathBuf {
    static DATA: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DATA.get_or_init(|| {
        let dir = repo().join("build/train-test/mnist");
        let script = repo().join("tests/train/mnist_reference.py");
        let stamp = dir.join("script.stamp");
        let src = std::fs::read(&script).unwrap();
        if std::fs::read(&stamp).ok().as_deref() != Some(&src[..]) || !dir.join("accuracy.bin").exists() {
            ok(Command::new(super::python()).arg(&script).arg("--out").arg(&dir));
            std::fs::write(&stamp, &src).unwrap();
        }
        dir
    })
    .clone()
}

/// Rows of a CSV file after its header, split at commas.
pub fn csv_rows(p: &std::path::Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(p).unwrap().lines().skip(1).map(|l| l.split(',').map(str::to_string).collect()).collect()
}
