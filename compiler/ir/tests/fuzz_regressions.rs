//! Inputs the fuzzer found (`fuzz/fuzz_targets/ir_text_*.rs`), checked in under
//! `tests/fuzz-regressions/ir_text_{hir,mir}/`: each must give a parse error naming its line and
//! column (never a panic), and every checked-in input is run through the parser and, where it parses,
//! the verifier and the print → parse round trip.

use rlx_ir::text::{self, ParseError};
use rlx_ir::{HirOp, MirOp, OpSet};
use std::path::{Path, PathBuf};

fn dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fuzz-regressions").join(target)
}

fn read(target: &str, name: &str) -> String {
    let p = dir(target).join(name);
    String::from_utf8_lossy(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).into_owned()
}

fn parse_err<O: OpSet>(target: &str, name: &str) -> ParseError {
    match text::parse::<O>(&read(target, name)) {
        Ok(_) => panic!("{target}/{name}: expected a parse error"),
        Err(e) => e,
    }
}

/// Every file of both targets, under both op sets: no panic; what parses verifies and round-trips.
fn all_inputs<O: OpSet>() {
    for target in ["ir_text_hir", "ir_text_mir"] {
        let Ok(entries) = std::fs::read_dir(dir(target)) else { continue };
        for e in entries {
            let bytes = std::fs::read(e.unwrap().path()).unwrap();
            let Ok(t) = std::str::from_utf8(&bytes) else { continue };
            if let Ok(g) = text::parse::<O>(t) {
                let _ = rlx_ir::verify::verify(&g);
                let printed = text::print(&g);
                let again = text::parse::<O>(&printed).expect("printed text parses");
                assert_eq!(text::print(&again), printed);
            }
        }
    }
}

#[test]
fn every_checked_in_input_parses_or_errs_without_panic() {
    all_inputs::<HirOp>();
    all_inputs::<MirOp>();
}

#[test]
fn a_block_quantized_constant_written_as_a_list_is_an_error() {
    // `const %3: q8_0[2] = [1,0]` panicked in the element encoder.
    let e = parse_err::<MirOp>("ir_text_mir", "q8_0-constant-as-a-list.rlx");
    assert_eq!(e.line, 5, "{e}");
    assert!(e.msg.contains("q8_0 constant is written as hex bytes"), "{e}");
}

#[test]
fn a_graph_without_outputs_round_trips() {
    // It printed an empty `out` line, which does not parse.
    let g = text::parse::<MirOp>(&read("ir_text_mir", "no-outputs.rlx")).expect("parses");
    assert!(g.outputs.is_empty());
    let printed = text::print(&g);
    assert_eq!(printed, "graph {\n  in %0 \"x\": f32[batch,3]\n}\n");
    assert_eq!(text::print(&text::parse::<MirOp>(&printed).expect("printed text parses")), printed);
}
