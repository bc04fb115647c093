//! cranelift-style filetests: each `filetests/*.rlx` file has a header line `test PASS` (plus optional
//! header lines), an input graph in the text form, a line `----`, and the expected output.
//! `BLESS=1 cargo test -p rlx-opt --test filetests` rewrites the expectations for review in git.
//!
//! Passes: `lower` (HIR in, MIR text out), `fold` (constant folding + DCE), `plan` (MIR in; LIR buffers, launches and loop-form kernels out; `plan-rows` with row fusion), `verify-hir` / `verify-mir` (problems, one per line),
//! `legalize` (MIR in; header `caps KIND:DTYPE …`; dispatch report out), `roundtrip-hir` /
//! `roundtrip-mir` (parse then print).

use rlx_ir::{text, DType, HirOp, MirOp, TargetCaps};
use std::collections::BTreeMap;
use std::path::Path;

fn run_pass(header: &[String], input: &str) -> Result<String, String> {
    let pass = header[0].strip_prefix("test ").ok_or("first line must be `test PASS`")?.trim();
    let perr = |e: text::ParseError| format!("parse error: {e}");
    Ok(match pass {
        "lower" => {
            let h = text::parse::<HirOp>(input).map_err(perr)?;
            match rlx_opt::lower(&h) {
                Ok(m) => text::print(&m),
                Err(ps) => ps.iter().map(|p| format!("error: {p}\n")).collect(),
            }
        }
        "verify-hir" => {
            let g = text::parse::<HirOp>(input).map_err(perr)?;
            rlx_ir::verify::verify(&g).iter().map(|p| format!("{p}\n")).collect::<String>() + "(end)\n"
        }
        "verify-mir" => {
            let g = text::parse::<MirOp>(input).map_err(perr)?;
            rlx_ir::verify::verify(&g).iter().map(|p| format!("{p}\n")).collect::<String>() + "(end)\n"
        }
        "fold" => {
            // Gather sinking, constant folding (evaluated by the reference interpreter) and DCE.
            let g = text::parse::<MirOp>(input).map_err(perr)?;
            let eval = |op: &MirOp, ins: &[rlx_ir::ConstData]| -> Result<Vec<rlx_ir::ConstData>, String> {
                let mut m = rlx_ir::Mir::new();
                let vs: Vec<_> = ins.iter().map(|c| m.add_input("", rlx_ir::TensorType::fixed(c.dtype, &c.shape))).collect();
                m.outputs = m.add_node("fold", op.clone(), &vs)?;
                rlx_interp::run(&m, ins).map_err(|e| e.to_string())
            };
            text::print(&rlx_opt::simplify(&g, &eval))
        }
        "plan" | "plan-rows" => {
            let g = text::parse::<MirOp>(input).map_err(perr)?;
            let opts = rlx_opt::PlanOptions { row_fusion: pass == "plan-rows", ..Default::default() };
            match rlx_opt::plan(&g, &opts) {
                Ok(l) => {
                    let mut s = l.to_string();
                    for la in &l.launches {
                        s.push_str(&la.kernel.to_string());
                    }
                    s
                }
                Err(ps) => ps.iter().map(|p| format!("error: {p}\n")).collect(),
            }
        }
        "roundtrip-hir" => text::print(&text::parse::<HirOp>(input).map_err(perr)?),
        "roundtrip-mir" => text::print(&text::parse::<MirOp>(input).map_err(perr)?),
        "legalize" => {
            let g = text::parse::<MirOp>(input).map_err(perr)?;
            let mut native: BTreeMap<&'static str, Vec<DType>> = BTreeMap::new();
            for line in &header[1..] {
                if let Some(rest) = line.strip_prefix("caps ") {
                    for claim in rest.split_whitespace() {
                        let (k, d) = claim.split_once(':').ok_or(format!("bad claim '{claim}'"))?;
                        let kind = rlx_ir::mir::all_mir_kinds().into_iter().find(|x| *x == k).ok_or(format!("unknown op kind '{k}'"))?;
                        native.entry(kind).or_default().push(DType::parse(d).ok_or(format!("bad dtype '{d}'"))?);
                    }
                }
            }
            let caps = TargetCaps { name: "filetest".into(), native };
            let r = rlx_opt::report(&g, &caps);
            r.entries.iter().map(|e| format!("{} {} {} -> {} {}\n", e.node, e.op, e.dtype, e.resolution.name(), e.note)).collect()
        }
        other => return Err(format!("unknown pass '{other}'")),
    })
}

#[test]
fn filetests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("filetests");
    let bless = std::env::var("BLESS").is_ok_and(|v| v == "1");
    let mut files: Vec<_> = std::fs::read_dir(&dir).expect("filetests dir").map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut failures = Vec::new();
    let mut ran = 0;
    for f in files.iter().filter(|p| p.extension().is_some_and(|e| e == "rlx")) {
        let text = std::fs::read_to_string(f).unwrap();
        let (top, expected) = match text.split_once("\n----\n") {
            Some((a, b)) => (a.to_string(), b.to_string()),
            None => (text.clone(), String::new()),
        };
        let header: Vec<String> = top.lines().take_while(|l| !l.starts_with("graph")).map(|l| l.to_string()).collect();
        let input: String = top.lines().skip_while(|l| !l.starts_with("graph")).collect::<Vec<_>>().join("\n");
        let got = run_pass(&header, &input).unwrap_or_else(|e| format!("harness error: {e}\n"));
        ran += 1;
        if got != expected {
            if bless {
                std::fs::write(f, format!("{top}\n----\n{got}")).unwrap();
            } else {
                failures.push(format!("{}:\n--- expected\n{expected}\n--- got\n{got}", f.display()));
            }
        }
    }
    assert!(ran > 0, "no filetests found in {}", dir.display());
    assert!(failures.is_empty(), "{} filetest(s) differ (BLESS=1 to rewrite):\n{}", failures.len(), failures.join("\n"));
}
