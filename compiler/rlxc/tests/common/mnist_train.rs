//! The training tests' data: tests/train/mnist_reference.py's MNIST subset, untrained MLP and numpy
//! results, made once per version of the script (and once per process) in build/train-test/mnist.

use std::path::PathBuf;

pub fn data() -> PathBuf {
    static DATA: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DATA.get_or_init(|| super::made_by_script("build/train-test/mnist", "tests/train/mnist_reference.py", "accuracy.bin")).clone()
}

/// Rows of a CSV file after its header, split at commas.
pub fn csv_rows(p: &std::path::Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(p).unwrap().lines().skip(1).map(|l| l.split(',').map(str::to_string).collect()).collect()
}
