//! Whole-graph behaviour: input checks, symbolic dims, constants, outputs, text-form graphs.
#![allow(clippy::cloned_ref_to_slice_refs)] // tests read better as &[x.clone()]
mod common;
use common::*;
use rlx_interp::run;
use rlx_ir::{text, ConstData, DType, Dim, Mir, MirOp, Shape, TensorType};

#[test]
fn text_form_graph_runs() {
    let g: Mir = text::parse(
        r#"graph {
  in %0 "x": f32[batch,2]
  const %1 "w": f32[2,2] = [1.0,2.0,3.0,4.0]
  %2 = matmul(%0, %1) : f32[batch,2] @"MatMul_0"
  %3 = relu(%2) : f32[batch,2] @"Relu_0"
  out %3
}"#,
    )
    .unwrap();
    // [1,-1] x [[1,2],[3,4]] = [-2,-2] -> relu 0,0 ; [1,1] -> [4,6]
    let out = run(&g, &[f32t(&[2, 2], &[1., -1., 1., 1.])]).unwrap();
    assert_eq!(out[0].shape, vec![2, 2]);
    close(&f64s(&out[0]), &[0., 0., 4., 6.], 0.0);
}

#[test]
fn symbol_mismatch_is_an_error() {
    let mut g = Mir::new();
    let t = TensorType::new(DType::F32, Shape(vec![Dim::sym("n")]));
    let a = g.add_input("a", t.clone());
    let b = g.add_input("b", t);
    let c = g.add1("add", MirOp::Binary(rlx_ir::BinaryOp::Add), &[a, b]).unwrap();
    g.outputs = vec![c];
    let e = run(&g, &[f32t(&[2], &[1., 2.]), f32t(&[3], &[1., 2., 3.])]).unwrap_err();
    assert!(e.node.is_none());
    assert!(e.msg.contains("input 'b'") && e.msg.contains("'n'"), "{e}");
    let out = run(&g, &[f32t(&[2], &[1., 2.]), f32t(&[2], &[3., 4.])]).unwrap();
    close(&f64s(&out[0]), &[4., 6.], 0.0);
}

#[test]
fn wrong_dtype_or_count_is_an_error() {
    let mut g = Mir::new();
    let a = g.add_input("a", TensorType::fixed(DType::F32, &[1]));
    g.outputs = vec![a];
    assert!(run(&g, &[i64t(&[1], &[1])]).unwrap_err().msg.contains("dtype"));
    assert!(run(&g, &[]).is_err());
    assert!(run(&g, &[f32t(&[2], &[1., 2.])]).unwrap_err().msg.contains("dim 0"));
}

#[test]
fn symbolic_reshape_resolves_through_binding() {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::new(DType::F32, Shape(vec![Dim::sym("b"), Dim::Fixed(2)])));
    let y = g.add1("r", MirOp::Reshape { shape: vec![Dim::sym("b"), Dim::Fixed(1), Dim::Fixed(2)] }, &[x]).unwrap();
    g.outputs = vec![y];
    let out = run(&g, &[f32t(&[3, 2], &[1., 2., 3., 4., 5., 6.])]).unwrap();
    assert_eq!(out[0].shape, vec![3, 1, 2]);
}

#[test]
fn const_and_input_outputs_pass_through() {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::I64, &[2]));
    let c = g.add_const(Some("c"), ConstData::from_i64(vec![1], &[7]));
    let y = g.add1("add", MirOp::Binary(rlx_ir::BinaryOp::Add), &[x, c]).unwrap();
    g.outputs = vec![y, x, c, y];
    let out = run(&g, &[i64t(&[2], &[1, 2])]).unwrap();
    assert_eq!(i64s(&out[0]), vec![8, 9]);
    assert_eq!(i64s(&out[1]), vec![1, 2]);
    assert_eq!(i64s(&out[2]), vec![7]);
    assert_eq!(out[3], out[0]);
}

#[test]
fn declared_shape_disagreement_is_reported() {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F32, &[2]));
    // push_node skips inference: declare a wrong output shape.
    let y = g.push_node("bad", MirOp::Unary(rlx_ir::UnaryOp::Neg), &[x], vec![TensorType::fixed(DType::F32, &[3])]);
    g.outputs = y;
    let e = run(&g, &[f32t(&[2], &[1., 2.])]).unwrap_err();
    assert_eq!(e.node.as_deref(), Some("bad"));
}
