//! The ONNX op conformance suite: every backend node case (`model.onnx` + `test_data_set_0`) is
//! imported, lowered and run on the reference interpreter, and the outputs are compared with the
//! expected ones (rtol 1e-3, atol 1e-7, the ONNX backend defaults; NaN matches NaN).

use rlx_import::{ImportOptions, OnnxSummary};
use rlx_ir::{ConstData, DType};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct ConformanceArgs {
    /// Folder of node cases (build/onnx-node)
    pub dir: PathBuf,
    /// Write a markdown report to this file
    #[arg(long)]
    pub write: Option<PathBuf>,
    /// File holding the minimum number of passing cases; fail (exit 1) below it
    #[arg(long)]
    pub ratchet: Option<PathBuf>,
    /// Only run cases whose name contains this
    #[arg(long)]
    pub filter: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Passed,
    Failed,
    Unsupported,
}

#[derive(Clone, Debug)]
pub struct CaseResult {
    pub name: String,
    pub op: String,
    pub outcome: Outcome,
    pub reason: String,
}

const RTOL: f64 = 1e-3;
const ATOL: f64 = 1e-7;

fn read_set(dir: &Path, prefix: &str) -> Result<Vec<ConstData>, String> {
    let mut out = Vec::new();
    for i in 0.. {
        let p = dir.join(format!("{prefix}_{i}.pb"));
        if !p.exists() {
            break;
        }
        out.push(rlx_import::load_tensor_pb(&p)?);
    }
    Ok(out)
}

/// The op a case tests: the model op type whose name the case name starts with, else the first
/// non-Constant op type.
fn case_op(name: &str, s: Option<&OnnxSummary>) -> String {
    let key: String = name.trim_start_matches("test_").chars().filter(|c| *c != '_').collect::<String>().to_lowercase();
    if let Some(s) = s {
        let best = s.op_types.keys().filter(|op| key.starts_with(&op.to_lowercase())).max_by_key(|op| op.len());
        if let Some(b) = best {
            return b.clone();
        }
        if let Some(o) = s.op_types.keys().find(|o| o.as_str() != "Constant") {
            return o.clone();
        }
    }
    name.trim_start_matches("test_").split('_').next().unwrap_or(name).to_string()
}

fn compare(got: &ConstData, want: &ConstData) -> Result<(), String> {
    if got.dtype != want.dtype {
        return Err(format!("dtype {} , expected {}", got.dtype, want.dtype));
    }
    if got.shape != want.shape {
        return Err(format!("shape {:?}, expected {:?}", got.shape, want.shape));
    }
    let n = want.numel();
    let mut bad = 0usize;
    let mut first = None;
    for i in 0..n {
        let ok = if want.dtype.is_float() {
            let (g, e) = (got.get_f64(i), want.get_f64(i));
            (g.is_nan() && e.is_nan()) || g == e || (g - e).abs() <= ATOL + RTOL * e.abs()
        } else if want.dtype == DType::U64 {
            got.data.bytes()[i * 8..i * 8 + 8] == want.data.bytes()[i * 8..i * 8 + 8]
        } else {
            got.get_i64(i) == want.get_i64(i)
        };
        if !ok {
            bad += 1;
            if first.is_none() {
                first = Some(i);
            }
        }
    }
    match first {
        None => Ok(()),
        Some(i) => Err(format!(
            "{bad}/{n} values differ; first at {i}: got {}, expected {}",
            got.get_f64(i),
            want.get_f64(i)
        )),
    }
}

fn run_case(dir: &Path) -> (Outcome, String, Option<OnnxSummary>) {
    let model = dir.join("model.onnx");
    let summary = rlx_import::onnx_summary(&model).ok();
    let set = dir.join("test_data_set_0");
    let inputs = match read_set(&set, "input") {
        Ok(v) => v,
        Err(e) => return (Outcome::Unsupported, format!("test data: {e}"), summary),
    };
    let expected = match read_set(&set, "output") {
        Ok(v) => v,
        Err(e) => return (Outcome::Unsupported, format!("test data: {e}"), summary),
    };
    let names: Vec<String> = summary.as_ref().map(|s| s.inputs.iter().map(|i| i.0.clone()).collect()).unwrap_or_default();
    // Many cases pass shapes/axes/pads as graph inputs: retry with the inputs the importer needs as
    // constants bound (those its errors name; failing that, every integer input).
    let mut opts = ImportOptions::default();
    let mut first_err = None;
    let hir = loop {
        match rlx_import::load_onnx(&model, &opts) {
            Ok(h) => break h,
            Err(e) => {
                let unsupported = e.is_unsupported();
                let mut named = Vec::new();
                for p in &e.problems {
                    if let Some(i) = p.msg.find("') is not a constant") {
                        if let Some(j) = p.msg[..i].rfind("('") {
                            named.push(p.msg[j + 2..i].to_string());
                        }
                    }
                }
                let before = opts.bind.len();
                for (i, c) in inputs.iter().enumerate() {
                    let Some(n) = names.get(i) else { continue };
                    if named.contains(n) {
                        opts.bind.insert(n.clone(), c.clone());
                    }
                }
                if opts.bind.len() == before && !named.is_empty() {
                    for (i, c) in inputs.iter().enumerate() {
                        if let Some(n) = names.get(i).filter(|_| c.dtype.is_int()) {
                            opts.bind.insert(n.clone(), c.clone());
                        }
                    }
                }
                if unsupported {
                    return (Outcome::Unsupported, format!("import: {e}"), summary);
                }
                let first = first_err.get_or_insert(e).clone();
                if opts.bind.len() == before {
                    return (Outcome::Failed, format!("import: {first}"), summary);
                }
            }
        }
    };
    let run_inputs: Vec<ConstData> = inputs
        .iter()
        .enumerate()
        .filter(|(i, _)| names.get(*i).is_none_or(|n| !opts.bind.contains_key(n)))
        .map(|(_, c)| c.clone())
        .collect();
    let mir = match rlx_opt::lower(&hir) {
        Ok(m) => m,
        Err(ps) => {
            let msg: Vec<String> = ps.iter().take(3).map(|p| p.to_string()).collect();
            return (Outcome::Failed, format!("lower: {}", msg.join("; ")), summary);
        }
    };
    let outs = match rlx_interp::run(&mir, &run_inputs) {
        Ok(o) => o,
        Err(e) => return (Outcome::Failed, format!("run: {e}"), summary),
    };
    if outs.len() != expected.len() {
        return (Outcome::Failed, format!("{} outputs, expected {}", outs.len(), expected.len()), summary);
    }
    for (k, (g, w)) in outs.iter().zip(&expected).enumerate() {
        if let Err(e) = compare(g, w) {
            return (Outcome::Failed, format!("output {k}: {e}"), summary);
        }
    }
    (Outcome::Passed, String::new(), summary)
}

/// Runs every case under `dir` (optionally filtered), in parallel.
pub fn run_all(dir: &Path, filter: Option<&str>) -> Result<Vec<CaseResult>, String> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e} (run `make conformance-data`)", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("model.onnx").exists())
        .filter(|p| filter.is_none_or(|f| p.file_name().is_some_and(|n| n.to_string_lossy().contains(f))))
        .collect();
    cases.sort();
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(cases.len().max(1));
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::with_capacity(cases.len()));
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                let name = case.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                if std::env::var_os("RLX_CONF_TRACE").is_some() {
                    eprintln!("case {name}");
                }
                let r = std::panic::catch_unwind(|| run_case(case));
                let res = match r {
                    Ok((outcome, reason, summary)) => CaseResult { op: case_op(&name, summary.as_ref()), name, outcome, reason },
                    Err(p) => {
                        let msg = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        let summary = rlx_import::onnx_summary(&case.join("model.onnx")).ok();
                        CaseResult { op: case_op(&name, summary.as_ref()), name, outcome: Outcome::Failed, reason: format!("panic: {msg}") }
                    }
                };
                results.lock().unwrap_or_else(|e| e.into_inner()).push(res);
            });
        }
    });
    std::panic::set_hook(hook);
    let mut v = results.into_inner().unwrap_or_else(|e| e.into_inner());
    v.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(v)
}

fn one_line(s: &str) -> String {
    let l: String = s.replace('\n', " · ").replace('|', "\\|");
    if l.chars().count() > 220 {
        format!("{}…", l.chars().take(220).collect::<String>())
    } else {
        l
    }
}

pub fn report_markdown(res: &[CaseResult]) -> String {
    let count = |o: Outcome| res.iter().filter(|r| r.outcome == o).count();
    let (p, f, u) = (count(Outcome::Passed), count(Outcome::Failed), count(Outcome::Unsupported));
    let mut s = String::new();
    s.push_str("# ONNX node conformance\n\n");
    s.push_str(&format!("node cases: {p} passed of {}\n\n", res.len()));
    s.push_str(&format!("- failed: {f}\n- unsupported: {u}\n\n"));
    s.push_str("Generated by `rlxc conformance build/onnx-node --write docs/conformance.md` (reference interpreter; rtol 1e-3, atol 1e-7).\n\n");
    s.push_str("## By op\n\n| op | passed | failed | unsupported |\n|---|---:|---:|---:|\n");
    let mut by: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    for r in res {
        by.entry(&r.op).or_default()[r.outcome as usize] += 1;
    }
    for (op, c) in &by {
        s.push_str(&format!("| {op} | {} | {} | {} |\n", c[0], c[1], c[2]));
    }
    for (title, o) in [("Failing cases", Outcome::Failed), ("Unsupported cases", Outcome::Unsupported)] {
        s.push_str(&format!("\n## {title}\n\n"));
        for r in res.iter().filter(|r| r.outcome == o) {
            s.push_str(&format!("- `{}`: {}\n", r.name, one_line(&r.reason)));
        }
    }
    s
}

pub fn main(args: &ConformanceArgs) -> i32 {
    let t0 = Instant::now();
    let res = match run_all(&args.dir, args.filter.as_deref()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    let count = |o: Outcome| res.iter().filter(|r| r.outcome == o).count();
    let passed = count(Outcome::Passed);
    let panics: Vec<&CaseResult> = res.iter().filter(|r| r.reason.starts_with("panic")).collect();
    for p in &panics {
        eprintln!("PANIC {}: {}", p.name, one_line(&p.reason));
    }
    println!(
        "node cases: {passed} passed of {} ({} failed, {} unsupported, {} panics) in {:.1}s",
        res.len(),
        count(Outcome::Failed),
        count(Outcome::Unsupported),
        panics.len(),
        t0.elapsed().as_secs_f64()
    );
    if let Some(w) = &args.write {
        if let Some(parent) = w.parent().filter(|p| !p.as_os_str().is_empty()) {
            let _ = std::fs::create_dir_all(parent);
        }
        if let Err(e) = std::fs::write(w, report_markdown(&res)) {
            eprintln!("error: cannot write {}: {e}", w.display());
            return 1;
        }
        println!("wrote {}", w.display());
    }
    if let Some(r) = &args.ratchet {
        let min = match std::fs::read_to_string(r) {
            Ok(t) => match t.trim().parse::<usize>() {
                Ok(n) => n,
                Err(_) => {
                    eprintln!("error: ratchet file {} does not hold a number", r.display());
                    return 1;
                }
            },
            Err(e) => {
                eprintln!("error: ratchet file {} is missing or unreadable: {e}", r.display());
                return 1;
            }
        };
        if passed < min {
            eprintln!("ratchet: {passed} cases pass, fewer than the {min} required by {}", r.display());
            return 1;
        }
        println!("ratchet: {passed} passed >= {min} required");
    }
    0
}

#[cfg(test)]
mod tests {
    /// Drives the whole suite from `cargo test` (RLX_CONF_DIR, RLX_CONF_FILTER, RLX_CONF_WRITE).
    #[test]
    #[ignore]
    fn run_suite() {
        let dir = std::env::var("RLX_CONF_DIR").unwrap_or_else(|_| "../../build/onnx-node".into());
        let args = super::ConformanceArgs {
            dir: dir.into(),
            write: std::env::var("RLX_CONF_WRITE").ok().map(Into::into),
            ratchet: None,
            filter: std::env::var("RLX_CONF_FILTER").ok(),
        };
        super::main(&args);
    }
}
