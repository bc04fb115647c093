//! Gather / scatter families.
#![allow(clippy::cloned_ref_to_slice_refs)] // tests read better as &[x.clone()]
mod common;
use common::*;
use rlx_ir::{MirOp, ScatterRed};

#[test]
fn gather_axis0_negative_index() {
    let x = f32t(&[3, 2], &[1., 2., 3., 4., 5., 6.]);
    let out = op1(MirOp::Gather { axis: 0 }, &[x, i64t(&[2], &[-1, 0])]);
    assert_eq!(out.shape, vec![2, 2]);
    close(&f64s(&out), &[5., 6., 1., 2.], 0.0);
}

#[test]
fn gather_axis1_matrix_indices() {
    let x = f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let out = op1(MirOp::Gather { axis: 1 }, &[x, i64t(&[1, 2], &[2, 0])]);
    assert_eq!(out.shape, vec![2, 1, 2]);
    close(&f64s(&out), &[3., 1., 6., 4.], 0.0);
}

#[test]
fn gather_out_of_range_names_node() {
    let x = f32t(&[3], &[1., 2., 3.]);
    let e = try_op(MirOp::Gather { axis: 0 }, &[x, i64t(&[1], &[3])]).unwrap_err();
    assert_eq!(e.node.as_deref(), Some("node0"));
    assert_eq!(e.op.as_deref(), Some("gather"));
    assert!(e.msg.contains("out of range"), "{e}");
}

#[test]
fn gather_elements_axis1() {
    // ONNX doc example: data [[1,2],[3,4]], indices [[0,0],[1,0]] -> [[1,1],[4,3]]
    let out = op1(MirOp::GatherElements { axis: 1 }, &[f32t(&[2, 2], &[1., 2., 3., 4.]), i64t(&[2, 2], &[0, 0, 1, 0])]);
    close(&f64s(&out), &[1., 1., 4., 3.], 0.0);
}

#[test]
fn gather_nd_with_and_without_batch_dims() {
    // data [[0,1],[2,3]], indices [[1,0],[0,1]] -> [2,1]
    let d = i64t(&[2, 2], &[0, 1, 2, 3]);
    assert_eq!(i64s(&op1(MirOp::GatherNd { batch_dims: 0 }, &[d.clone(), i64t(&[2, 2], &[1, 0, 0, 1])])), vec![2, 1]);
    // indices [[1],[0]] -> rows [[2,3],[0,1]]
    assert_eq!(i64s(&op1(MirOp::GatherNd { batch_dims: 0 }, &[d.clone(), i64t(&[2, 1], &[1, 0])])), vec![2, 3, 0, 1]);
    // batch_dims 1: per batch row pick element: [[1],[0]] -> [1, 2]
    let out = op1(MirOp::GatherNd { batch_dims: 1 }, &[d, i64t(&[2, 1], &[1, 0])]);
    assert_eq!(out.shape, vec![2]);
    assert_eq!(i64s(&out), vec![1, 2]);
}

#[test]
fn scatter_elements_with_reductions() {
    let data = f32t(&[1, 5], &[1., 2., 3., 4., 5.]);
    let idx = i64t(&[1, 2], &[1, 3]);
    let upd = f32t(&[1, 2], &[1.1, 2.1]);
    let out = op1(MirOp::ScatterElements { axis: 1, reduction: ScatterRed::None }, &[data.clone(), idx, upd]);
    close(&f64s(&out), &[1., 1.1, 3., 2.1, 5.], 1e-7);
    // duplicate indices with add: 2 + 1 + 2 = 5 at position 1
    let idx = i64t(&[1, 2], &[1, 1]);
    let upd = f32t(&[1, 2], &[1., 2.]);
    let out = op1(MirOp::ScatterElements { axis: 1, reduction: ScatterRed::Add }, &[data.clone(), idx.clone(), upd.clone()]);
    close(&f64s(&out), &[1., 5., 3., 4., 5.], 0.0);
    let out = op1(MirOp::ScatterElements { axis: 1, reduction: ScatterRed::Mul }, &[data, idx, upd]);
    close(&f64s(&out), &[1., 4., 3., 4., 5.], 0.0);
}

#[test]
fn scatter_nd_rows() {
    // data zeros [3,2]; write row 2 := [5,6], row 0 := [1,2]
    let data = f32t(&[3, 2], &[0.; 6]);
    let out = op1(
        MirOp::ScatterNd { reduction: ScatterRed::None },
        &[data.clone(), i64t(&[2, 1], &[2, 0]), f32t(&[2, 2], &[5., 6., 1., 2.])],
    );
    close(&f64s(&out), &[1., 2., 0., 0., 5., 6.], 0.0);
    let out = op1(
        MirOp::ScatterNd { reduction: ScatterRed::Max },
        &[f32t(&[3], &[1., 5., 2.]), i64t(&[2, 1], &[1, 2]), f32t(&[2], &[3., 4.])],
    );
    close(&f64s(&out), &[1., 5., 4.], 0.0);
}
