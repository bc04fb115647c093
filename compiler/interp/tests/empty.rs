//! Zero-sized tensors flow through every op family without panics.
#![allow(clippy::cloned_ref_to_slice_refs)]
mod common;
use common::*;
use rlx_ir::{ArgOp, BinaryOp as B, Dim, MirOp, PadMode, PoolKind, ReduceOp, ScatterRed, UnaryOp as U};

#[test]
fn empty_tensors() {
    let e = f32t(&[0, 3], &[]);
    assert_eq!(op1(MirOp::Unary(U::Exp), &[e.clone()]).shape, vec![0, 3]);
    assert_eq!(op1(MirOp::Binary(B::Add), &[e.clone(), f32t(&[3], &[1., 2., 3.])]).shape, vec![0, 3]);
    assert_eq!(op1(MirOp::Transpose { perm: vec![1, 0] }, &[e.clone()]).shape, vec![3, 0]);
    assert_eq!(op1(MirOp::Concat { axis: 0 }, &[e.clone(), f32t(&[1, 3], &[1., 2., 3.])]).shape, vec![1, 3]);
    assert_eq!(op1(MirOp::Gather { axis: 1 }, &[e.clone(), i64t(&[2], &[0, -1])]).shape, vec![0, 2]);
    assert_eq!(op1(MirOp::Gather { axis: 0 }, &[f32t(&[2], &[1., 2.]), i64t(&[0], &[])]).shape, vec![0]);
    let p = op1(MirOp::Pad { pads: vec![1, 0, 0, 0], mode: PadMode::Constant, value: 2.0 }, &[e.clone()]);
    assert_eq!(p.shape, vec![1, 3]);
    close(&f64s(&p), &[2., 2., 2.], 0.0);
    assert!(try_op(MirOp::Pad { pads: vec![1, 0, 0, 0], mode: PadMode::Reflect, value: 0.0 }, &[e.clone()]).is_err());
    assert_eq!(op1(MirOp::Reduce { op: ReduceOp::Sum, axes: vec![1], keepdims: false }, &[e.clone()]).shape, vec![0]);
    assert_eq!(op1(MirOp::ArgReduce { op: ArgOp::ArgMax, axis: 1, keepdims: false, select_last: false }, &[e.clone()]).shape, vec![0]);
    assert!(try_op(MirOp::ArgReduce { op: ArgOp::ArgMax, axis: 0, keepdims: false, select_last: false }, &[e.clone()]).is_err());
    assert_eq!(op1(MirOp::CumSum { axis: 0, exclusive: false, reverse: true }, &[e.clone()]).shape, vec![0, 3]);
    let outs = try_op(MirOp::TopK { axis: 1, k: 0, largest: true }, &[f32t(&[2, 2], &[1., 2., 3., 4.])]).unwrap();
    assert_eq!(outs[1].shape, vec![2, 0]);
    assert_eq!(op1(MirOp::Reshape { shape: vec![Dim::Fixed(3), Dim::Fixed(0)] }, &[e.clone()]).shape, vec![3, 0]);
    assert_eq!(op1(MirOp::MatMul, &[e.clone(), f32t(&[3, 2], &[0.; 6])]).shape, vec![0, 2]);
    let conv = MirOp::Conv { strides: vec![1], pads: vec![0, 0], dilations: vec![1], groups: 1 };
    assert_eq!(op1(conv, &[f32t(&[0, 1, 3], &[]), f32t(&[1, 1, 2], &[1., 1.])]).shape, vec![0, 1, 2]);
    let pool = MirOp::Pool {
        kind: PoolKind::Avg,
        kernel: vec![2],
        strides: vec![1],
        pads: vec![0, 0],
        dilations: vec![1],
        ceil_mode: false,
        count_include_pad: false,
    };
    assert_eq!(op1(pool, &[f32t(&[0, 1, 3], &[])]).shape, vec![0, 1, 2]);
    let sc = MirOp::ScatterElements { axis: 0, reduction: ScatterRed::Add };
    assert_eq!(op1(sc, &[f32t(&[2], &[1., 2.]), i64t(&[0], &[]), f32t(&[0], &[])]).shape, vec![2]);
    let s = MirOp::Slice { axes: vec![0], starts: vec![-1], ends: vec![i64::MIN], steps: vec![-1] };
    assert_eq!(op1(s, &[e]).shape, vec![0, 3]);
}
