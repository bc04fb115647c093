//! Outputs of data-dependent length (`rlx_ir::bounded`): the importer pads them to a static bound,
//! adds their count as a further graph output, and refuses, naming the node, a reader that would mix
//! the padding into the result.

use rlx_import::proto::*;
use rlx_import::{load_onnx_bytes, ImportOptions};
use rlx_ir::Bounded;

mod common;
use common::{model, node_with as node, vi};

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto { name: name.into(), ints: v.to_vec(), r#type: attribute_proto::AttributeType::Ints as i32, ..Default::default() }
}

#[test]
fn nonzero_output_is_bounded_with_its_count_as_a_further_output() {
    let b = model(vec![node("nz", "NonZero", &["x"], &["y"], vec![])], vec![vi("x", &[2, 3])], vec![vi("y", &[2, 6])], vec![]);
    let g = load_onnx_bytes(&b, None, &ImportOptions::default()).expect("import");
    assert_eq!(g.outputs.len(), 2);
    assert_eq!(g.bounded, vec![Bounded { output: 0, axis: 1, count: 1 }]);
    assert_eq!(g.ty(g.outputs[0]).to_string(), "i64[2,6]");
    assert_eq!(g.value(g.outputs[1]).name.as_deref(), Some("y_count"));
    assert!(rlx_ir::verify::verify(&g).is_empty());
}

#[test]
fn a_reduction_over_the_data_dependent_axis_is_refused_naming_the_node() {
    let b = model(
        vec![node("nz", "NonZero", &["x"], &["i"], vec![]), node("total", "ReduceMax", &["i"], &["y"], vec![ints("axes", &[1])])],
        vec![vi("x", &[2, 3])],
        vec![vi("y", &[2, 1])],
        vec![],
    );
    let e = load_onnx_bytes(&b, None, &ImportOptions::default()).unwrap_err();
    assert!(e.is_unsupported(), "{e}");
    let e = e.to_string();
    assert!(e.contains("node 'total' (ReduceMax") && e.contains("data-dependent"), "{e}");
}
