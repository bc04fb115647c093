//! `rlxc check`: the dispatch report of a model on a target, without compiling.

use crate::{print_json, Failure, ModelSource, Target};
use rlx_opt::legalize::{DispatchReport, Resolution};
use serde_json::json;
use std::path::PathBuf;

const RESOLUTIONS: [Resolution; 4] = [Resolution::Native, Resolution::CommonIr, Resolution::Rewritten, Resolution::Unsupported];

/// The long `--help` text.
pub const LONG_ABOUT: &str = "Import and lower a model, then resolve every primitive op against the target's claim set: \
        native (the target implements it), common-IR (a registered lowering to ops the target implements), \
        rewritten (a structural rewrite), or unsupported.\n\n\
        Prints one row per node (node, op, dtype, input shapes, resolution, note) and a summary. \
        Exits 1 and lists every unsupported node when any is unsupported.";

#[derive(clap::Args)]
pub struct CheckArgs {
    /// The model: an ONNX file, or a folder with config.json + model.safetensors
    pub model: PathBuf,
    /// The target to check against
    #[arg(long, value_enum)]
    pub target: Target,
    /// Print the report as one JSON object (keys: model, target, legal, summary, entries)
    #[arg(long)]
    pub json: bool,
    /// Fix a symbolic dim by name, e.g. --dim batch=1 (repeatable)
    #[arg(long = "dim", value_name = "NAME=N", value_parser = crate::parse_dim)]
    pub dims: Vec<(String, u64)>,
}

pub fn main(a: &CheckArgs) -> Result<(), Failure> {
    let src = ModelSource::from_path(&a.model)?;
    let dims = rlxc::dims::resolve(&src, &a.dims, None)?;
    let hir = src.import(&dims)?;
    let mir = crate::lower(&hir, src.path())?;
    let report = rlx_opt::legalize::report(&mir, &a.target.caps());
    if a.json {
        print_json(&to_json(&a.model, a.target, &report));
    } else {
        print_report(&report);
    }
    let bad: Vec<String> = report
        .unsupported()
        .map(|e| format!("node '{}': {} {} ({}): {}", e.node, e.op, e.dtype, e.input_shapes.join(", "), e.note))
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(Failure::model(crate::problem_list(
            &format!("{} node(s) of '{}' are unsupported on target '{}'", bad.len(), src.path().display(), a.target.name()),
            &bad,
        )))
    }
}

fn summary(r: &DispatchReport) -> String {
    let counts: Vec<String> = RESOLUTIONS.iter().map(|&k| format!("{} {}", r.count(k), k.name())).collect();
    let n = r.entries.len();
    format!("{n} node{}: {}", if n == 1 { "" } else { "s" }, counts.join(", "))
}

pub fn print_report(r: &DispatchReport) {
    let head = ["node", "op", "dtype", "input shapes", "resolution", "note"];
    let rows: Vec<[String; 6]> = r
        .entries
        .iter()
        .map(|e| [e.node.clone(), e.op.clone(), e.dtype.to_string(), e.input_shapes.join(" "), e.resolution.name().to_string(), e.note.clone()])
        .collect();
    let mut w = head.map(str::len);
    for row in &rows {
        for (k, c) in row.iter().enumerate() {
            w[k] = w[k].max(c.len());
        }
    }
    let line = |cells: [&str; 6]| {
        let mut s = String::new();
        for (k, c) in cells.iter().enumerate() {
            if k == 5 {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<width$}  ", width = w[k]));
            }
        }
        println!("{}", s.trim_end());
    };
    line(head);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3], &row[4], &row[5]]);
    }
    println!("target {}: {}", r.target, summary(r));
}

fn to_json(model: &std::path::Path, target: Target, r: &DispatchReport) -> serde_json::Value {
    let entries: Vec<serde_json::Value> = r
        .entries
        .iter()
        .map(|e| {
            json!({
                "node": e.node,
                "op": e.op,
                "dtype": e.dtype.name(),
                "input_shapes": e.input_shapes,
                "resolution": e.resolution.name(),
                "note": e.note,
            })
        })
        .collect();
    let mut counts = serde_json::Map::new();
    for k in RESOLUTIONS {
        counts.insert(k.name().to_string(), json!(r.count(k)));
    }
    json!({
        "model": model.display().to_string(),
        "target": target.name(),
        "legal": r.is_legal(),
        "summary": counts,
        "entries": entries,
    })
}
