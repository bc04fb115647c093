//! `rlxc inspect`: what a model is, without running it.

use crate::{print_json, Failure, ModelSource};
use rlx_ir::{DType, Dim, Shape};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The long `--help` text.
pub const LONG_ABOUT: &str = "Show a model's format, producer and opsets (ONNX), inputs and outputs with dtypes and shapes \
        (symbolic dims by name), the op histogram (ONNX op types, or HIR ops for a safetensors model), and \
        the parameter count and size.\n\n\
        With --hir or --mir, import (and for --mir, lower) the model and print the IR's text form instead.";

#[derive(clap::Args)]
pub struct InspectArgs {
    /// The model: an ONNX file, or a folder with config.json + model.safetensors
    pub model: PathBuf,
    /// Print one JSON object (keys: format, producer, opsets, inputs, outputs, ops, param_count, param_bytes, …)
    #[arg(long, conflicts_with_all = ["hir", "mir"])]
    pub json: bool,
    /// Fix a symbolic dim by name, e.g. --dim batch=1 (repeatable)
    #[arg(long = "dim", value_name = "NAME=N", value_parser = crate::parse_dim)]
    pub dims: Vec<(String, u64)>,
    /// Print the imported high-level IR (HIR) as text
    #[arg(long, conflicts_with = "mir")]
    pub hir: bool,
    /// Print the lowered primitive IR (MIR) as text
    #[arg(long)]
    pub mir: bool,
}

/// Everything inspect reports, independent of the model format.
struct Info {
    format: &'static str,
    producer: Option<String>,
    ir_version: Option<i64>,
    opsets: Vec<(String, i64)>,
    inputs: Vec<(String, DType, Vec<Dim>)>,
    outputs: Vec<(String, DType, Vec<Dim>)>,
    /// "onnx" (ONNX op types) or "hir" (HIR op kinds).
    ops_level: &'static str,
    ops: BTreeMap<String, usize>,
    initializers: Option<usize>,
    param_count: u64,
    param_bytes: u64,
}

pub fn main(a: &InspectArgs) -> Result<(), Failure> {
    let src = ModelSource::from_path(&a.model)?;
    if let (ModelSource::Gguf(p), false, false) = (&src, a.hir, a.mir) {
        return crate::cmd_llm::inspect(p, a.json);
    }
    let dims = rlxc::dims::resolve(&src, &a.dims, None)?;
    if a.hir || a.mir {
        let hir = src.import(&dims)?;
        if a.hir {
            print!("{}", rlx_ir::text::print(&hir));
        } else {
            let mir = crate::lower(&hir, src.path())?;
            print!("{}", rlx_ir::text::print(&mir));
        }
        return Ok(());
    }
    let info = match &src {
        ModelSource::Onnx(p) => {
            let s = crate::phase("reading the model", || rlx_import::onnx_summary(p))
                .map_err(|e| Failure::model(crate::problem_list(&format!("cannot read ONNX model '{}'", p.display()), &e.problems)))?;
            Info {
                format: "onnx",
                producer: Some(s.producer),
                ir_version: Some(s.ir_version),
                opsets: s.opsets,
                inputs: s.inputs,
                outputs: s.outputs,
                ops_level: "onnx",
                ops: s.op_types,
                initializers: Some(s.initializers),
                param_count: s.param_count,
                param_bytes: s.param_bytes,
            }
        }
        // GGUF files are summarized by cmd_llm::inspect (above); --hir/--mir return earlier.
        ModelSource::SafetensorsDir(_) | ModelSource::Gguf(_) | ModelSource::HfLlm(_) => {
            let hir = src.import(&BTreeMap::new())?;
            let io = |vs: &[rlx_ir::ValueId], what: &str| -> Vec<(String, DType, Vec<Dim>)> {
                vs.iter()
                    .enumerate()
                    .map(|(i, &v)| {
                        let val = hir.value(v);
                        (val.name.clone().unwrap_or_else(|| format!("{what}{i}")), val.ty.dtype, val.ty.shape.0.clone())
                    })
                    .collect()
            };
            let (count, bytes) = hir.const_stats();
            Info {
                format: "safetensors",
                producer: None,
                ir_version: None,
                opsets: Vec::new(),
                inputs: io(&hir.inputs, "input"),
                outputs: io(&hir.outputs, "output"),
                ops_level: "hir",
                ops: hir.histogram().into_iter().map(|(k, n)| (k.to_string(), n)).collect(),
                initializers: None,
                param_count: count as u64,
                param_bytes: bytes as u64,
            }
        }
    };
    // Show shapes with the given --dim values substituted.
    let bind = |v: Vec<(String, DType, Vec<Dim>)>| -> Vec<(String, DType, Shape)> {
        v.into_iter().map(|(n, d, s)| (n, d, Shape(s).bind(&dims))).collect()
    };
    let inputs = bind(info.inputs.clone());
    let outputs = bind(info.outputs.clone());
    if a.json {
        print_json(&to_json(&info, &inputs, &outputs));
    } else {
        print_text(&a.model, &info, &inputs, &outputs);
    }
    Ok(())
}

fn opset_domain(d: &str) -> &str {
    if d.is_empty() {
        "ai.onnx"
    } else {
        d
    }
}

fn to_json(info: &Info, inputs: &[(String, DType, Shape)], outputs: &[(String, DType, Shape)]) -> Value {
    let io = |v: &[(String, DType, Shape)]| -> Value {
        v.iter()
            .map(|(n, d, s)| {
                let shape: Vec<Value> = s
                    .0
                    .iter()
                    .map(|d| match d {
                        Dim::Fixed(n) => json!(n),
                        Dim::Sym(s) => json!(s),
                    })
                    .collect();
                json!({"name": n, "dtype": d.name(), "shape": shape})
            })
            .collect()
    };
    let mut opsets = Map::new();
    for (d, v) in &info.opsets {
        opsets.insert(opset_domain(d).to_string(), json!(v));
    }
    let mut ops = Map::new();
    for (k, n) in &info.ops {
        ops.insert(k.clone(), json!(n));
    }
    json!({
        "format": info.format,
        "producer": info.producer,
        "ir_version": info.ir_version,
        "opsets": opsets,
        "inputs": io(inputs),
        "outputs": io(outputs),
        "ops_level": info.ops_level,
        "ops": ops,
        "node_count": info.ops.values().sum::<usize>(),
        "initializers": info.initializers,
        "param_count": info.param_count,
        "param_bytes": info.param_bytes,
    })
}

fn print_text(path: &std::path::Path, info: &Info, inputs: &[(String, DType, Shape)], outputs: &[(String, DType, Shape)]) {
    match info.format {
        "onnx" => {
            let producer = info.producer.as_deref().filter(|p| !p.is_empty()).unwrap_or("unknown");
            println!("{}: ONNX model, IR version {}, producer {producer}", path.display(), info.ir_version.unwrap_or(0));
            let opsets: Vec<String> = info.opsets.iter().map(|(d, v)| format!("{} {v}", opset_domain(d))).collect();
            println!("opsets: {}", if opsets.is_empty() { "none".to_string() } else { opsets.join(", ") });
        }
        _ => println!("{}: safetensors model folder", path.display()),
    }
    let width = inputs.iter().chain(outputs).map(|(n, ..)| n.len()).max().unwrap_or(0);
    for (title, list) in [("inputs", inputs), ("outputs", outputs)] {
        println!("{title}:");
        if list.is_empty() {
            println!("  (none)");
        }
        for (n, d, s) in list {
            println!("  {n:<width$}  {d}{s}");
        }
    }
    let mut syms: Vec<String> = inputs.iter().flat_map(|(_, _, s)| s.symbols()).collect();
    syms.sort();
    syms.dedup();
    if !syms.is_empty() {
        println!("symbolic dims: {} (fix with --dim NAME=N; `rlxc run` binds them from the inputs)", syms.join(", "));
    }
    let nodes: usize = info.ops.values().sum();
    let what = if info.ops_level == "onnx" { "ONNX ops" } else { "HIR ops" };
    println!("{what}: {nodes} node{}, {} kind{}", plural(nodes), info.ops.len(), plural(info.ops.len()));
    let mut ops: Vec<(&String, &usize)> = info.ops.iter().collect();
    ops.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let w = ops.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, n) in ops {
        println!("  {k:<w$}  {n}");
    }
    if let Some(i) = info.initializers {
        println!("initializers: {i}");
    }
    println!("parameters: {} values, {} bytes ({})", group(info.param_count), group(info.param_bytes), human_bytes(info.param_bytes));
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// 1234567 → "1,234,567".
fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Bytes with a decimal unit: "512 B", "3.2 KB", "90.9 MB", "1.42 GB".
fn human_bytes(b: u64) -> String {
    let f = b as f64;
    if b < 1000 {
        format!("{b} B")
    } else if f < 1e6 {
        format!("{:.1} KB", f / 1e3)
    } else if f < 1e9 {
        format!("{:.1} MB", f / 1e6)
    } else {
        format!("{:.2} GB", f / 1e9)
    }
}
