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

/// Parses `target/name` with op set `O` (it must parse) and returns the verifier's problems as text.
fn problems<O: OpSet>(target: &str, name: &str) -> Vec<String> {
    let g = text::parse::<O>(&read(target, name)).unwrap_or_else(|e| panic!("{target}/{name}: {e}"));
    rlx_ir::verify::verify(&g).iter().map(|p| p.to_string()).collect()
}

#[test]
fn a_hir_reshape_of_dims_multiplying_past_2_64_is_a_verifier_problem() {
    // %23 is recorded with ~200 fixed dims; %24 reshapes it next to the symbols batch, seq, and the
    // product of the fixed dims (checked only for equality) overflowed u64.
    let p = problems::<HirOp>("ir_text_hir", "reshape-of-dims-multiplying-past-2-64.rlx");
    assert!(p.iter().any(|m| m.starts_with("node 'attn': reshape: the fixed dims of [batch,seq,2,") && m.ends_with("multiply past 2^64")), "{p:#?}");
}

#[test]
fn a_mir_reshape_of_dims_multiplying_past_2_64_is_a_verifier_problem() {
    // Input "v" is f16[batch,sbat88658928925,62378889223788925,…]: reshaping it overflowed the same product.
    let p = problems::<MirOp>("ir_text_mir", "reshape-of-dims-multiplying-past-2-64.rlx");
    assert!(p.iter().any(|m| m.starts_with("node 'attn/v_heads': reshape: the fixed dims of [batch,") && m.ends_with("multiply past 2^64")), "{p:#?}");
}

/// Verifier problems of a MIR graph given as text (it must parse).
fn mir_problems(src: &str) -> Vec<String> {
    let g = text::parse::<MirOp>(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    rlx_ir::verify::verify(&g).iter().map(|p| p.to_string()).collect()
}

#[test]
fn shape_inference_near_2_64_is_a_verifier_problem_not_an_overflow() {
    // The same pattern as the reshape finds, in the other shape rules reachable from the text form:
    // each size here overflows u64 (or i64) in the rule's arithmetic.
    let (big, imax) = (u64::MAX, i64::MAX);
    let cases = [
        (
            format!("graph {{\n  in %0 \"x\": f32[1,1,{big}]\n  in %1 \"w\": f32[1,1,3]\n  %2 = conv_transpose(%0, %1) {{strides=[{imax}], pads=[0,0], dilations=[1], groups=1, output_padding=[0]}} : f32[1,1,1] @\"ct\"\n  out %2\n}}\n"),
            "node 'ct': conv_transpose: output size",
        ),
        (
            format!("graph {{\n  in %0 \"x\": f32[1,1,5]\n  in %1 \"w\": f32[1,1,3]\n  %2 = conv(%0, %1) {{strides=[1], pads=[{imax},{imax}], dilations=[1], groups=1}} : f32[1,1,1] @\"c\"\n  out %2\n}}\n"),
            "node 'c': pool kernel 3 with dilation 1 and pads 18446744073709551614, 0 on an input of 5 overflows",
        ),
        (
            format!("graph {{\n  in %0 \"x\": f32[1,4,3]\n  in %1 \"w\": f32[2,{big},3]\n  %2 = conv(%0, %1) {{strides=[1], pads=[0,0], dilations=[1], groups=2}} : f32[1,2,1] @\"g\"\n  out %2\n}}\n"),
            "node 'g': conv: weight",
        ),
        (
            format!("graph {{\n  in %0 \"x\": f32[{big}]\n  in %1 \"y\": f32[2]\n  %2 = concat(%0, %1) {{axis=0}} : f32[1] @\"cat\"\n  out %2\n}}\n"),
            "node 'cat': concat: sizes along axis 0 add past 2^64",
        ),
        (
            format!("graph {{\n  in %0 \"x\": f32[{big}]\n  %1 = pad(%0) {{pads=[{imax},1], mode=\"constant\", value=0.0}} : f32[1] @\"p\"\n  out %1\n}}\n"),
            "node 'p': pad: size",
        ),
        (
            format!("graph {{\n  in %0 \"x\": f32[{big}]\n  %1 = slice(%0) {{axes=[0], starts=[0], ends=[5], steps=[1]}} : f32[5] @\"s\"\n  out %1\n}}\n"),
            "node 's': slice: axis 0 of size",
        ),
    ];
    for (src, want) in cases {
        let p = mir_problems(&src);
        assert!(p.iter().any(|m| m.starts_with(want)), "want {want:?}, got {p:#?}\n{src}");
    }
}

#[test]
fn slice_range_takes_any_bounds_and_steps() {
    use rlx_ir::mir::slice_range;
    // Steps and bounds at the ends of i64 (ONNX allows any): these overflowed e - s + step - 1.
    assert_eq!(slice_range(10, 0, 10, i64::MAX), (0, 1));
    assert_eq!(slice_range(10, 9, -20, i64::MIN), (9, 1));
    assert_eq!(slice_range(10, i64::MIN, i64::MAX, 3), (0, 4)); // 0,3,6,9
}
