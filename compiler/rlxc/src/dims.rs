//! `--dim NAME=N` and `--batch N`: checked against the model's own symbolic dims before anything is
//! imported, so a typo, a dim the model does not have, a zero or an absurd size is a usage error that
//! names the model's dims, not a failure deep in the pipeline.

use crate::cli::{dims_map, model_symbols, Failure, ModelSource};
use std::collections::BTreeMap;

/// The largest size a dim may be fixed to (ONNX's and every target's index arithmetic hold it).
pub const MAX_DIM: u64 = i32::MAX as u64;

/// The dims to bind: `--dim` pairs plus `--batch` (applied to every symbolic dim whose name starts
/// with "batch"), each checked against the model's symbolic input dims.
pub fn resolve(src: &ModelSource, given: &[(String, u64)], batch: Option<u64>) -> Result<BTreeMap<String, u64>, Failure> {
    let mut dims = dims_map(given)?;
    if dims.is_empty() && batch.is_none() {
        return Ok(dims);
    }
    let syms = model_symbols(src)?;
    check_names(&dims, &syms)?;
    for (k, &v) in &dims {
        check_size(&format!("--dim {k}={v}"), v)?;
    }
    if let Some(b) = batch {
        check_size(&format!("--batch {b}"), b)?;
        let batch_dims: Vec<&String> = syms.iter().filter(|s| s.to_ascii_lowercase().starts_with("batch")).collect();
        if batch_dims.is_empty() {
            return Err(Failure::usage(format!("--batch {b}: the model has no batch dim ({})", listing(&syms))));
        }
        for s in batch_dims {
            match dims.get(s) {
                Some(&d) if d != b => {
                    return Err(Failure::usage(format!("--batch {b} and --dim {s}={d} disagree: give one of them")));
                }
                _ => {
                    dims.insert(s.clone(), b);
                }
            }
        }
    }
    Ok(dims)
}

/// Every name in `dims` must be one of the model's symbolic dims `syms`.
pub fn check_names(dims: &BTreeMap<String, u64>, syms: &[String]) -> Result<(), Failure> {
    let mut probs = Vec::new();
    for k in dims.keys().filter(|k| !syms.contains(k)) {
        let known: Vec<&str> = syms.iter().map(String::as_str).collect();
        let near = crate::cpus::closest(k, &known);
        let hint = if near.is_empty() { String::new() } else { format!(" (did you mean '{}'?)", near.join("', '")) };
        probs.push(format!("--dim {k}: the model has no dim named '{k}'{hint}; {}", listing(syms)));
    }
    match probs.len() {
        0 => Ok(()),
        1 => Err(Failure::usage(probs.remove(0))),
        _ => Err(Failure::usage(crate::cli::problem_list("unknown --dim names", &probs))),
    }
}

/// A dim is at least 1 and at most [`MAX_DIM`].
pub fn check_size(what: &str, v: u64) -> Result<(), Failure> {
    if v == 0 {
        return Err(Failure::usage(format!("{what}: a dim must be at least 1")));
    }
    if v > MAX_DIM {
        return Err(Failure::usage(format!("{what}: a dim must be at most {MAX_DIM} (2^31 - 1)")));
    }
    Ok(())
}

fn listing(syms: &[String]) -> String {
    if syms.is_empty() {
        "its input shapes are all fixed, so no --dim applies".to_string()
    } else {
        format!("its symbolic dims: {}", syms.join(", "))
    }
}
