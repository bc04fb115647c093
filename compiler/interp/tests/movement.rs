//! Reshape, transpose, expand, slice, concat, pad, bitcast.
#![allow(clippy::cloned_ref_to_slice_refs)] // tests read better as &[x.clone()]
mod common;
use common::*;
use rlx_ir::{Dim, MirOp, PadMode};

#[test]
fn transpose_2d_and_3d() {
    let x = f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let out = op1(MirOp::Transpose { perm: vec![1, 0] }, &[x]);
    assert_eq!(out.shape, vec![3, 2]);
    close(&f64s(&out), &[1., 4., 2., 5., 3., 6.], 0.0);
    // [2,1,2] -> perm [2,0,1] -> [2,2,1]: out[k,i,j] = x[i,j,k]
    let x = f32t(&[2, 1, 2], &[1., 2., 3., 4.]);
    let out = op1(MirOp::Transpose { perm: vec![2, 0, 1] }, &[x]);
    assert_eq!(out.shape, vec![2, 2, 1]);
    close(&f64s(&out), &[1., 3., 2., 4.], 0.0);
}

#[test]
fn reshape_and_expand() {
    let x = f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let out = op1(MirOp::Reshape { shape: vec![Dim::Fixed(3), Dim::Fixed(2)] }, &[x]);
    assert_eq!(out.shape, vec![3, 2]);
    close(&f64s(&out), &[1., 2., 3., 4., 5., 6.], 0.0);
    let out = op1(MirOp::Expand { shape: vec![Dim::Fixed(2), Dim::Fixed(3)] }, &[f32t(&[2, 1], &[7., 8.])]);
    close(&f64s(&out), &[7., 7., 7., 8., 8., 8.], 0.0);
}

#[test]
fn slice_negative_and_reverse() {
    let x = f32t(&[5], &[0., 1., 2., 3., 4.]);
    let sl = |s, e, st| MirOp::Slice { axes: vec![0], starts: vec![s], ends: vec![e], steps: vec![st] };
    close(&f64s(&op1(sl(1, -1, 1), &[x.clone()])), &[1., 2., 3.], 0.0);
    close(&f64s(&op1(sl(-1, i64::MIN, -1), &[x.clone()])), &[4., 3., 2., 1., 0.], 0.0);
    close(&f64s(&op1(sl(0, 100, 2), &[x.clone()])), &[0., 2., 4.], 0.0);
    let out = op1(sl(3, 1, 1), &[x]);
    assert_eq!(out.shape, vec![0]);
}

#[test]
fn slice_2d_inner_axis() {
    let x = f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let out = op1(MirOp::Slice { axes: vec![1], starts: vec![1], ends: vec![3], steps: vec![1] }, &[x]);
    assert_eq!(out.shape, vec![2, 2]);
    close(&f64s(&out), &[2., 3., 5., 6.], 0.0);
}

#[test]
fn concat_axis1() {
    let a = f32t(&[2, 1], &[1., 2.]);
    let b = f32t(&[2, 2], &[3., 4., 5., 6.]);
    let out = op1(MirOp::Concat { axis: 1 }, &[a, b]);
    assert_eq!(out.shape, vec![2, 3]);
    close(&f64s(&out), &[1., 3., 4., 2., 5., 6.], 0.0);
}

#[test]
fn pad_modes() {
    let x = f32t(&[3], &[1., 2., 3.]);
    let p = |mode, pads: [i64; 2]| MirOp::Pad { pads: pads.to_vec(), mode, value: 9.0 };
    close(&f64s(&op1(p(PadMode::Constant, [2, 1]), &[x.clone()])), &[9., 9., 1., 2., 3., 9.], 0.0);
    close(&f64s(&op1(p(PadMode::Reflect, [2, 2]), &[x.clone()])), &[3., 2., 1., 2., 3., 2., 1.], 0.0);
    close(&f64s(&op1(p(PadMode::Edge, [2, 1]), &[x.clone()])), &[1., 1., 1., 2., 3., 3.], 0.0);
    close(&f64s(&op1(p(PadMode::Wrap, [2, 1]), &[x.clone()])), &[2., 3., 1., 2., 3., 1.], 0.0);
    // negative pads crop
    close(&f64s(&op1(p(PadMode::Constant, [-1, 1]), &[x])), &[2., 3., 9.], 0.0);
}

#[test]
fn pad_2d_constant() {
    let x = f32t(&[1, 2], &[1., 2.]);
    let out = op1(MirOp::Pad { pads: vec![1, 0, 0, 1], mode: PadMode::Constant, value: 0.0 }, &[x]);
    assert_eq!(out.shape, vec![2, 3]);
    close(&f64s(&out), &[0., 0., 0., 1., 2., 0.], 0.0);
}

#[test]
fn bitcast_reads_the_same_bytes_as_another_type() {
    // Expected bits from Rust's own `to_bits` / `from_bits` and two's complement, not from the interpreter.
    let v = [1.0f32, -2.5, 0.0, f32::INFINITY];
    let out = op1(MirOp::Bitcast { to: rlx_ir::DType::I32 }, &[f32t(&[2, 2], &v)]);
    assert_eq!(out.shape, vec![2, 2]);
    assert_eq!(i64s(&out), v.iter().map(|x| x.to_bits() as i32 as i64).collect::<Vec<_>>());
    let bits = [0x3f80_0000i64, -0x4000_0000, 0x7f7f_ffff];
    let back = op1(MirOp::Bitcast { to: rlx_ir::DType::F32 }, &[anyt(rlx_ir::DType::I32, &[3], &bits.map(|b| b as f64))]);
    close(&f64s(&back), &bits.map(|b| f32::from_bits(b as i32 as u32) as f64), 0.0);
    let u = op1(MirOp::Bitcast { to: rlx_ir::DType::U8 }, &[anyt(rlx_ir::DType::I8, &[3], &[-1.0, -128.0, 5.0])]);
    assert_eq!(i64s(&u), vec![255, 128, 5]);
    // Widths must match: the type rule refuses f32 → i64 when the node is built.
    let mut g = rlx_ir::Mir::new();
    let x = g.add_input("x", rlx_ir::TensorType::fixed(rlx_ir::DType::F32, &[1]));
    let err = g.add_node("node0", MirOp::Bitcast { to: rlx_ir::DType::I64 }, &[x]).unwrap_err();
    assert!(err.contains("bitcast: f32 and i64 differ in width"), "{err}");
}
