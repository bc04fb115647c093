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
    /// The target to check against (the same default as `rlxc compile`)
    #[arg(long, value_enum, default_value_t = Target::Host)]
    pub target: Target,
    /// Print the report as one JSON object (keys: model, target, legal, summary, entries)
    #[arg(long)]
    pub json: bool,
    /// Fix a symbolic dim by name, e.g. --dim batch=1 (repeatable)
    #[arg(long = "dim", value_name = "NAME=N", value_parser = crate::parse_dim)]
    pub dims: Vec<(String, u64)>,
    /// Shard the model first (tp=N or pp=N) and report, by node, what stays whole, then check every rank
    #[arg(long, value_name = "tp=N|pp=N", value_parser = rlxc::shard::parse)]
    pub shard: Option<rlxc::shard::Shard>,
}

pub fn main(a: &CheckArgs) -> Result<(), Failure> {
    let src = ModelSource::from_path(&a.model)?;
    let dims = rlxc::dims::resolve(&src, &a.dims, None)?;
    // Symbolic dims: the report resolves op kinds and dtypes, which no dim size changes. A model that
    // imports with them symbolic is checked as it is; one whose import needs sizes (shape arithmetic
    // folded at import) is checked with every unfixed dim at 1, and says so.
    let hir = match src.import(&dims) {
        Ok(h) => h,
        Err(f) => {
            let free: Vec<String> = crate::model_symbols(&src)?.into_iter().filter(|s| !dims.contains_key(s)).collect();
            if free.is_empty() {
                return Err(f);
            }
            let mut at_one = dims.clone();
            for s in &free {
                at_one.insert(s.clone(), 1);
            }
            let h = src.import(&at_one).map_err(|_| f)?;
            eprintln!("note: checked with {} (the import needs fixed sizes; --dim NAME=N sets them)", free.iter().map(|s| format!("{s}=1")).collect::<Vec<_>>().join(", "));
            h
        }
    };
    let mir = crate::lower(&hir, src.path())?;
    if let Some(s) = a.shard {
        return check_sharded(a, &mir, s);
    }
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

/// `rlxc check --shard`: the notes of the sharding pass (what stays whole, by node; the pipeline's
/// stages), each rank's collectives, and each rank's graph checked against the target.
fn check_sharded(a: &CheckArgs, mir: &rlx_ir::Mir, s: rlxc::shard::Shard) -> Result<(), Failure> {
    let sh = rlxc::shard::shard(mir, s)?;
    println!("--shard {}={}: {} ranks", s.kind(), s.ranks(), sh.ranks.len());
    for n in &sh.notes {
        println!("  node '{}' ({}): {}", n.node, n.op, n.msg);
    }
    let mut bad = Vec::new();
    for (r, g) in sh.ranks.iter().enumerate() {
        let steps = rlx_opt::shard::schedule(g);
        println!("rank {r}: {} nodes, {} collective(s): {}", g.nodes.len(), steps.len(), steps.iter().map(|c| c.op).collect::<Vec<_>>().join(" "));
        let report = rlx_opt::legalize::report(g, &a.target.caps());
        bad.extend(report.unsupported().map(|e| format!("rank {r}: node '{}': {} {}: {}", e.node, e.op, e.dtype, e.note)));
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(Failure::model(crate::problem_list(&format!("{} node(s) are unsupported on target '{}'", bad.len(), a.target.name()), &bad)))
    }
}
