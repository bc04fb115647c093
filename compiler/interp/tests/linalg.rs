//! MatMul, Conv, ConvTranspose, Pool with hand-computed expectations.
#![allow(clippy::cloned_ref_to_slice_refs)] // tests read better as &[x.clone()]
mod common;
use common::*;
use rlx_ir::{MirOp, PoolKind};

#[test]
fn matmul_2x3_by_3x2() {
    // [[1,2,3],[4,5,6]] x [[7,8],[9,10],[11,12]] = [[58,64],[139,154]]
    let a = f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let b = f32t(&[3, 2], &[7., 8., 9., 10., 11., 12.]);
    let out = op1(MirOp::MatMul, &[a, b]);
    assert_eq!(out.shape, vec![2, 2]);
    close(&f64s(&out), &[58., 64., 139., 154.], 0.0);
}

#[test]
fn matmul_vector_promotion() {
    let v = f32t(&[2], &[1., 2.]);
    let m = f32t(&[2, 2], &[1., 2., 3., 4.]);
    // [1,2] x [[1,2],[3,4]] = [7,10]
    let out = op1(MirOp::MatMul, &[v.clone(), m.clone()]);
    assert_eq!(out.shape, vec![2]);
    close(&f64s(&out), &[7., 10.], 0.0);
    // [[1,2],[3,4]] x [1,2] = [5,11]
    let out = op1(MirOp::MatMul, &[m, v.clone()]);
    assert_eq!(out.shape, vec![2]);
    close(&f64s(&out), &[5., 11.], 0.0);
    // dot product: scalar
    let out = op1(MirOp::MatMul, &[v.clone(), v]);
    assert_eq!(out.shape, Vec::<usize>::new());
    close(&f64s(&out), &[5.], 0.0);
}

#[test]
fn matmul_batch_broadcast() {
    // a: [2,1,2] (two 1x2 rows), b: [2,1] shared -> [2,1,1]
    let a = f32t(&[2, 1, 2], &[1., 2., 3., 4.]);
    let b = f32t(&[2, 1], &[10., 1.]);
    let out = op1(MirOp::MatMul, &[a, b]);
    assert_eq!(out.shape, vec![2, 1, 1]);
    close(&f64s(&out), &[12., 34.], 0.0);
}

#[test]
fn matmul_ints() {
    let a = i64t(&[1, 2], &[3, -4]);
    let b = i64t(&[2, 1], &[5, 6]);
    assert_eq!(i64s(&op1(MirOp::MatMul, &[a, b])), vec![-9]);
}

#[test]
fn matmul_empty_inner_dim_is_zero() {
    let a = f32t(&[2, 0], &[]);
    let b = f32t(&[0, 3], &[]);
    let out = op1(MirOp::MatMul, &[a, b]);
    assert_eq!(out.shape, vec![2, 3]);
    close(&f64s(&out), &[0.; 6], 0.0);
}

fn conv(strides: &[usize], pads: &[usize], dil: &[usize], groups: usize) -> MirOp {
    MirOp::Conv { strides: strides.to_vec(), pads: pads.to_vec(), dilations: dil.to_vec(), groups }
}

#[test]
fn conv_3x3_known_kernel() {
    // x = 1..16 as 4x4, kernel all ones 3x3, no pad: each output = sum of 3x3 window.
    let x: Vec<f32> = (1..=16).map(|v| v as f32).collect();
    let out = op1(conv(&[1, 1], &[0, 0, 0, 0], &[1, 1], 1), &[f32t(&[1, 1, 4, 4], &x), f32t(&[1, 1, 3, 3], &[1.; 9])]);
    assert_eq!(out.shape, vec![1, 1, 2, 2]);
    // windows: rows 1-3 cols 1-3: 1+2+3+5+6+7+9+10+11 = 54; shifted by 1 col: +9 = 63; by 1 row: +36 = 90; 99
    close(&f64s(&out), &[54., 63., 90., 99.], 0.0);
}

#[test]
fn conv_padding_stride_and_bias() {
    // 3x3 input 1..9, kernel [[0,0,0],[0,1,0],[0,0,0]] picks the centre; pad 1, stride 2 -> 2x2 = x[0,0],x[0,2],x[2,0],x[2,2]
    let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    let mut k = [0f32; 9];
    k[4] = 1.;
    let out = op1(
        conv(&[2, 2], &[1, 1, 1, 1], &[1, 1], 1),
        &[f32t(&[1, 1, 3, 3], &x), f32t(&[1, 1, 3, 3], &k), f32t(&[1], &[0.5])],
    );
    assert_eq!(out.shape, vec![1, 1, 2, 2]);
    close(&f64s(&out), &[1.5, 3.5, 7.5, 9.5], 0.0);
}

#[test]
fn conv_top_left_weight_with_padding() {
    // kernel with 1 at top-left, pad 1: output[i,j] = x[i-1, j-1] (0 outside)
    let x: Vec<f32> = (1..=4).map(|v| v as f32).collect();
    let mut k = [0f32; 9];
    k[0] = 1.;
    let out = op1(conv(&[1, 1], &[1, 1, 1, 1], &[1, 1], 1), &[f32t(&[1, 1, 2, 2], &x), f32t(&[1, 1, 3, 3], &k)]);
    close(&f64s(&out), &[0., 0., 0., 1.], 0.0);
}

#[test]
fn conv_1d_dilation() {
    // x = [1,2,3,4,5], w = [1,1] dilation 2: y[i] = x[i] + x[i+2] -> [4,6,8]
    let out = op1(conv(&[1], &[0, 0], &[2], 1), &[f32t(&[1, 1, 5], &[1., 2., 3., 4., 5.]), f32t(&[1, 1, 2], &[1., 1.])]);
    close(&f64s(&out), &[4., 6., 8.], 0.0);
}

#[test]
fn conv_groups_depthwise() {
    // two channels, depthwise 1x1 kernels scaling by 2 and 3
    let out = op1(
        conv(&[1], &[0, 0], &[1], 2),
        &[f32t(&[1, 2, 2], &[1., 2., 10., 20.]), f32t(&[2, 1, 1], &[2., 3.])],
    );
    close(&f64s(&out), &[2., 4., 30., 60.], 0.0);
}

#[test]
fn conv_transpose_1d_stride_2() {
    // x=[1,2], w=[1,1,1], stride 2: out len = 2*(2-1)+3 = 5
    // x0 contributes 1 at 0..3, x1 contributes 2 at 2..5 -> [1,1,3,2,2]
    let op = MirOp::ConvTranspose { strides: vec![2], pads: vec![0, 0], dilations: vec![1], groups: 1, output_padding: vec![0] };
    let out = op1(op, &[f32t(&[1, 1, 2], &[1., 2.]), f32t(&[1, 1, 3], &[1., 1., 1.])]);
    assert_eq!(out.shape, vec![1, 1, 5]);
    close(&f64s(&out), &[1., 1., 3., 2., 2.], 0.0);
    // with pads [1,1] and output_padding 1: len = 2+1+3-2 = 4, window [1..5) of the padded result -> [1,3,2,2]
    let op = MirOp::ConvTranspose { strides: vec![2], pads: vec![1, 1], dilations: vec![1], groups: 1, output_padding: vec![1] };
    let out = op1(op, &[f32t(&[1, 1, 2], &[1., 2.]), f32t(&[1, 1, 3], &[1., 1., 1.])]);
    close(&f64s(&out), &[1., 3., 2., 2.], 0.0);
}

fn pool(kind: PoolKind, k: &[usize], s: &[usize], pads: &[usize], ceil: bool, cip: bool) -> MirOp {
    MirOp::Pool {
        kind,
        kernel: k.to_vec(),
        strides: s.to_vec(),
        pads: pads.to_vec(),
        dilations: vec![1; k.len()],
        ceil_mode: ceil,
        count_include_pad: cip,
    }
}

#[test]
fn max_pool_2x2() {
    let x: Vec<f32> = (1..=16).map(|v| v as f32).collect();
    let out = op1(pool(PoolKind::Max, &[2, 2], &[2, 2], &[0; 4], false, false), &[f32t(&[1, 1, 4, 4], &x)]);
    close(&f64s(&out), &[6., 8., 14., 16.], 0.0);
}

#[test]
fn max_pool_ignores_padding() {
    // all-negative input: padded zeros must not win
    let out = op1(pool(PoolKind::Max, &[3], &[1], &[1, 1], false, false), &[f32t(&[1, 1, 3], &[-1., -2., -3.])]);
    close(&f64s(&out), &[-1., -1., -2.], 0.0);
}

#[test]
fn avg_pool_padding_divisors() {
    // x=[1,2,3], kernel 3, pad 1: windows [pad,1,2],[1,2,3],[2,3,pad]
    let x = f32t(&[1, 1, 3], &[1., 2., 3.]);
    let excl = op1(pool(PoolKind::Avg, &[3], &[1], &[1, 1], false, false), &[x.clone()]);
    close(&f64s(&excl), &[1.5, 2., 2.5], 0.0);
    let incl = op1(pool(PoolKind::Avg, &[3], &[1], &[1, 1], false, true), &[x]);
    close(&f64s(&incl), &[1., 2., 5. / 3.], 1e-7);
}

#[test]
fn pool_ceil_mode() {
    // len 5, kernel 2, stride 2: floor -> 2 outputs, ceil -> 3 (last window covers x[4] only)
    let x = f32t(&[1, 1, 5], &[1., 2., 3., 4., 5.]);
    let out = op1(pool(PoolKind::Max, &[2], &[2], &[0, 0], true, false), &[x.clone()]);
    close(&f64s(&out), &[2., 4., 5.], 0.0);
    let out = op1(pool(PoolKind::Avg, &[2], &[2], &[0, 0], true, false), &[x]);
    close(&f64s(&out), &[1.5, 3.5, 5.], 0.0);
}
