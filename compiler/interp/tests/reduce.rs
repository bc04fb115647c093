//! Reductions, arg-reductions, cumsum, topk, and a softmax chain.
#![allow(clippy::cloned_ref_to_slice_refs)] // tests read better as &[x.clone()]
mod common;
use common::*;
use rlx_ir::{ArgOp, BinaryOp as B, MirOp, ReduceOp, TensorType, UnaryOp as U};

fn red(op: ReduceOp, axes: &[usize], keepdims: bool) -> MirOp {
    MirOp::Reduce { op, axes: axes.to_vec(), keepdims }
}

#[test]
fn reduce_sum_axes() {
    let x = f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let out = op1(red(ReduceOp::Sum, &[1], false), &[x.clone()]);
    assert_eq!(out.shape, vec![2]);
    close(&f64s(&out), &[6., 15.], 0.0);
    let out = op1(red(ReduceOp::Sum, &[0], true), &[x.clone()]);
    assert_eq!(out.shape, vec![1, 3]);
    close(&f64s(&out), &[5., 7., 9.], 0.0);
    let out = op1(red(ReduceOp::Mean, &[0, 1], false), &[x.clone()]);
    assert_eq!(out.shape, Vec::<usize>::new());
    close(&f64s(&out), &[3.5], 0.0);
    close(&f64s(&op1(red(ReduceOp::Prod, &[1], false), &[x.clone()])), &[6., 120.], 0.0);
    close(&f64s(&op1(red(ReduceOp::Max, &[0], false), &[x.clone()])), &[4., 5., 6.], 0.0);
    close(&f64s(&op1(red(ReduceOp::Min, &[1], false), &[x])), &[1., 4.], 0.0);
}

#[test]
fn reduce_empty_axes_is_identity() {
    let x = f32t(&[2, 2], &[1., 2., 3., 4.]);
    let out = op1(red(ReduceOp::Sum, &[], false), &[x]);
    assert_eq!(out.shape, vec![2, 2]);
    close(&f64s(&out), &[1., 2., 3., 4.], 0.0);
}

#[test]
fn reduce_over_empty_axis_gives_identities() {
    let x = f32t(&[2, 0], &[]);
    close(&f64s(&op1(red(ReduceOp::Sum, &[1], false), &[x.clone()])), &[0., 0.], 0.0);
    close(&f64s(&op1(red(ReduceOp::Prod, &[1], false), &[x.clone()])), &[1., 1.], 0.0);
    close(&f64s(&op1(red(ReduceOp::Max, &[1], false), &[x.clone()])), &[f64::NEG_INFINITY; 2], 0.0);
    close(&f64s(&op1(red(ReduceOp::Min, &[1], false), &[x])), &[f64::INFINITY; 2], 0.0);
}

#[test]
fn reduce_int_sum() {
    let x = i64t(&[3], &[5, -2, 10]);
    assert_eq!(i64s(&op1(red(ReduceOp::Sum, &[0], false), &[x])), vec![13]);
}

#[test]
fn argmax_argmin_ties() {
    let x = f32t(&[2, 3], &[1., 3., 3., 2., 2., 0.]);
    let am = |op, keep, last| MirOp::ArgReduce { op, axis: 1, keepdims: keep, select_last: last };
    let out = op1(am(ArgOp::ArgMax, false, false), &[x.clone()]);
    assert_eq!(out.shape, vec![2]);
    assert_eq!(i64s(&out), vec![1, 0]);
    assert_eq!(i64s(&op1(am(ArgOp::ArgMax, true, true), &[x.clone()])), vec![2, 1]);
    assert_eq!(i64s(&op1(am(ArgOp::ArgMin, false, false), &[x])), vec![0, 2]);
}

#[test]
fn cumsum_variants() {
    let x = f32t(&[4], &[1., 2., 3., 4.]);
    let cs = |e, r| MirOp::CumSum { axis: 0, exclusive: e, reverse: r };
    close(&f64s(&op1(cs(false, false), &[x.clone()])), &[1., 3., 6., 10.], 0.0);
    close(&f64s(&op1(cs(true, false), &[x.clone()])), &[0., 1., 3., 6.], 0.0);
    close(&f64s(&op1(cs(false, true), &[x.clone()])), &[10., 9., 7., 4.], 0.0);
    close(&f64s(&op1(cs(true, true), &[x])), &[9., 7., 4., 0.], 0.0);
}

#[test]
fn topk_ties_prefer_lower_index() {
    let x = f32t(&[1, 5], &[3., 1., 3., 2., 1.]);
    let outs = try_op(MirOp::TopK { axis: 1, k: 3, largest: true }, &[x.clone()]).unwrap();
    close(&f64s(&outs[0]), &[3., 3., 2.], 0.0);
    assert_eq!(i64s(&outs[1]), vec![0, 2, 3]);
    let outs = try_op(MirOp::TopK { axis: 1, k: 2, largest: false }, &[x]).unwrap();
    close(&f64s(&outs[0]), &[1., 1.], 0.0);
    assert_eq!(i64s(&outs[1]), vec![1, 4]);
}

#[test]
fn softmax_chain() {
    // softmax([0, ln 3]) = [1/4, 3/4], built from max, sub, exp, sum, div.
    let mut g = rlx_ir::Mir::new();
    let x = g.add_input("x", TensorType::fixed(rlx_ir::DType::F32, &[1, 2]));
    let m = g.add1("max", red(ReduceOp::Max, &[1], true), &[x]).unwrap();
    let s = g.add1("sub", MirOp::Binary(B::Sub), &[x, m]).unwrap();
    let e = g.add1("exp", MirOp::Unary(U::Exp), &[s]).unwrap();
    let z = g.add1("sum", red(ReduceOp::Sum, &[1], true), &[e]).unwrap();
    let y = g.add1("div", MirOp::Binary(B::Div), &[e, z]).unwrap();
    g.outputs = vec![y];
    let out = rlx_interp::run(&g, &[f32t(&[1, 2], &[0., 3f32.ln()])]).unwrap();
    close(&f64s(&out[0]), &[0.25, 0.75], 1e-7);
}
