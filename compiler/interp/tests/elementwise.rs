//! Elementwise ops: expected values worked by hand from each op's definition.
#![allow(clippy::cloned_ref_to_slice_refs)] // tests read better as &[x.clone()]
mod common;
use common::*;
use rlx_ir::{BinaryOp as B, DType, MirOp, UnaryOp as U};

#[test]
fn add_broadcasts_row_over_matrix() {
    // [[1,2,3],[4,5,6]] + [10,20,30]
    let out = op1(MirOp::Binary(B::Add), &[f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.]), f32t(&[3], &[10., 20., 30.])]);
    assert_eq!(out.shape, vec![2, 3]);
    close(&f64s(&out), &[11., 22., 33., 14., 25., 36.], 0.0);
}

#[test]
fn mul_broadcasts_column_and_row() {
    // [2,1] * [1,3] -> outer product [[1*1,1*2,1*3],[4*1,4*2,4*3]]
    let out = op1(MirOp::Binary(B::Mul), &[f32t(&[2, 1], &[1., 4.]), f32t(&[1, 3], &[1., 2., 3.])]);
    assert_eq!(out.shape, vec![2, 3]);
    close(&f64s(&out), &[1., 2., 3., 4., 8., 12.], 0.0);
}

#[test]
fn integer_div_truncates_toward_zero() {
    let a = i64t(&[4], &[7, -7, 7, -7]);
    let b = i64t(&[4], &[2, 2, -2, -2]);
    assert_eq!(i64s(&op1(MirOp::Binary(B::Div), &[a, b])), vec![3, -3, -3, 3]);
}

#[test]
fn integer_mod_is_floored_and_fmod_truncated() {
    let a = i64t(&[4], &[7, -7, 7, -7]);
    let b = i64t(&[4], &[3, 3, -3, -3]);
    // Python: 7%3=1, -7%3=2, 7%-3=-2, -7%-3=-1
    assert_eq!(i64s(&op1(MirOp::Binary(B::Mod), &[a.clone(), b.clone()])), vec![1, 2, -2, -1]);
    // C fmod: sign of the dividend.
    assert_eq!(i64s(&op1(MirOp::Binary(B::FMod), &[a, b])), vec![1, -1, 1, -1]);
}

#[test]
fn float_mod_is_floored() {
    let out = op1(MirOp::Binary(B::Mod), &[f32t(&[2], &[-5.5, 5.5]), f32t(&[2], &[2.0, -2.0])]);
    // -5.5 mod 2 = 0.5 ; 5.5 mod -2 = -0.5
    close(&f64s(&out), &[0.5, -0.5], 0.0);
}

#[test]
fn integer_division_by_zero_is_an_error() {
    let e = try_op(MirOp::Binary(B::Div), &[i64t(&[1], &[1]), i64t(&[1], &[0])]).unwrap_err();
    assert_eq!(e.node.as_deref(), Some("node0"));
    assert!(e.to_string().starts_with("node 'node0' (div): "), "{e}");
}

#[test]
fn int8_add_wraps() {
    let a = anyt(DType::I8, &[2], &[127., -128.]);
    let b = anyt(DType::I8, &[2], &[1., -1.]);
    assert_eq!(i64s(&op1(MirOp::Binary(B::Add), &[a, b])), vec![-128, 127]);
}

#[test]
fn max_min_propagate_nan() {
    let a = f32t(&[3], &[1., f32::NAN, 3.]);
    let b = f32t(&[3], &[2., 0., f32::NAN]);
    let mx = f64s(&op1(MirOp::Binary(B::Max), &[a.clone(), b.clone()]));
    let mn = f64s(&op1(MirOp::Binary(B::Min), &[a, b]));
    assert_eq!(mx[0], 2.0);
    assert!(mx[1].is_nan() && mx[2].is_nan());
    assert_eq!(mn[0], 1.0);
    assert!(mn[1].is_nan() && mn[2].is_nan());
}

#[test]
fn pow_float_and_int_exponents() {
    let out = op1(MirOp::Binary(B::Pow), &[f32t(&[3], &[2., 4., 9.]), f32t(&[3], &[3., 0.5, -1.])]);
    close(&f64s(&out), &[8., 2., 1. / 9.], 1e-7);
    let out = op1(MirOp::Binary(B::Pow), &[f32t(&[2], &[2., 3.]), i64t(&[2], &[10, 2])]);
    close(&f64s(&out), &[1024., 9.], 0.0);
    let out = op1(MirOp::Binary(B::Pow), &[i64t(&[2], &[3, -2]), i64t(&[2], &[4, 3])]);
    assert_eq!(i64s(&out), vec![81, -8]);
}

#[test]
fn comparisons_and_logic() {
    let a = f32t(&[3], &[1., 2., 3.]);
    let b = f32t(&[3], &[2., 2., 2.]);
    let lt = op1(MirOp::Binary(B::Lt), &[a.clone(), b.clone()]);
    assert_eq!(lt.dtype, DType::Bool);
    assert_eq!(i64s(&lt), vec![1, 0, 0]);
    assert_eq!(i64s(&op1(MirOp::Binary(B::Ge), &[a.clone(), b.clone()])), vec![0, 1, 1]);
    assert_eq!(i64s(&op1(MirOp::Binary(B::Eq), &[a, b])), vec![0, 1, 0]);
    let p = anyt(DType::Bool, &[4], &[0., 0., 1., 1.]);
    let q = anyt(DType::Bool, &[4], &[0., 1., 0., 1.]);
    assert_eq!(i64s(&op1(MirOp::Binary(B::And), &[p.clone(), q.clone()])), vec![0, 0, 0, 1]);
    assert_eq!(i64s(&op1(MirOp::Binary(B::Or), &[p.clone(), q.clone()])), vec![0, 1, 1, 1]);
    assert_eq!(i64s(&op1(MirOp::Binary(B::Xor), &[p.clone(), q])), vec![0, 1, 1, 0]);
    assert_eq!(i64s(&op1(MirOp::Unary(U::Not), &[p])), vec![1, 1, 0, 0]);
}

#[test]
fn unsigned_compare_and_shift() {
    // u64 values above 2^63 must compare unsigned.
    let a = u64t(&[u64::MAX, 1]);
    let b = u64t(&[1, 2]);
    assert_eq!(i64s(&op1(MirOp::Binary(B::Gt), &[a.clone(), b])), vec![1, 0]);
    let out = op1(MirOp::Binary(B::Shr), &[a, u64t(&[60, 1])]);
    assert_eq!(out.to_i64_vec(), vec![15, 0]);
    // u8: 0b1000_0001 << 1 wraps to 0b10, << 7 wraps to 0b1000_0000; >> 1 = 64, >> 7 = 1.
    let x = anyt(DType::U8, &[2], &[129., 129.]);
    assert_eq!(i64s(&op1(MirOp::Binary(B::Shl), &[x.clone(), anyt(DType::U8, &[2], &[1., 7.])])), vec![2, 128]);
    assert_eq!(i64s(&op1(MirOp::Binary(B::Shr), &[x, anyt(DType::U8, &[2], &[1., 7.])])), vec![64, 1]);
}

fn u64t(v: &[u64]) -> rlx_ir::ConstData {
    let mut b = Vec::new();
    for x in v {
        b.extend_from_slice(&x.to_le_bytes());
    }
    rlx_ir::ConstData::new(DType::U64, vec![v.len()], rlx_ir::Blob::from_vec(b)).unwrap()
}

#[test]
fn bitwise_ops() {
    let a = anyt(DType::I32, &[2], &[12., -1.]);
    let b = anyt(DType::I32, &[2], &[10., 5.]);
    assert_eq!(i64s(&op1(MirOp::Binary(B::BitAnd), &[a.clone(), b.clone()])), vec![8, 5]);
    assert_eq!(i64s(&op1(MirOp::Binary(B::BitOr), &[a.clone(), b.clone()])), vec![14, -1]);
    assert_eq!(i64s(&op1(MirOp::Binary(B::BitXor), &[a.clone(), b])), vec![6, -6]);
    assert_eq!(i64s(&op1(MirOp::Unary(U::BitNot), &[a])), vec![-13, 0]);
}

#[test]
fn unary_math() {
    let x = f32t(&[4], &[-2.0, -0.5, 0.5, 2.5]);
    close(&f64s(&op1(MirOp::Unary(U::Relu), &[x.clone()])), &[0., 0., 0.5, 2.5], 0.0);
    close(&f64s(&op1(MirOp::Unary(U::Abs), &[x.clone()])), &[2., 0.5, 0.5, 2.5], 0.0);
    close(&f64s(&op1(MirOp::Unary(U::Sign), &[x.clone()])), &[-1., -1., 1., 1.], 0.0);
    close(&f64s(&op1(MirOp::Unary(U::Floor), &[x.clone()])), &[-2., -1., 0., 2.], 0.0);
    close(&f64s(&op1(MirOp::Unary(U::Ceil), &[x.clone()])), &[-2., -0., 1., 3.], 0.0);
    close(&f64s(&op1(MirOp::Unary(U::Neg), &[x])), &[2., 0.5, -0.5, -2.5], 0.0);
    // sigmoid(0) = 1/2, sigmoid(ln 3) = 3/4
    let s = op1(MirOp::Unary(U::Sigmoid), &[f32t(&[2], &[0.0, 3f32.ln()])]);
    close(&f64s(&s), &[0.5, 0.75], 1e-7);
    // exp(ln 2) = 2, sqrt(16) = 4, 1/4
    close(&f64s(&op1(MirOp::Unary(U::Sqrt), &[f32t(&[1], &[16.])])), &[4.], 0.0);
    close(&f64s(&op1(MirOp::Unary(U::Recip), &[f32t(&[1], &[4.])])), &[0.25], 0.0);
    close(&f64s(&op1(MirOp::Unary(U::Exp), &[f32t(&[1], &[0.])])), &[1.], 0.0);
}

#[test]
fn round_half_to_even() {
    let x = f32t(&[6], &[0.5, 1.5, 2.5, -0.5, -1.5, 2.6]);
    close(&f64s(&op1(MirOp::Unary(U::Round), &[x])), &[0., 2., 2., -0., -2., 3.], 0.0);
}

#[test]
fn erf_matches_tables_in_f64() {
    let x = anyt(DType::F64, &[3], &[0.0, 1.0, -2.0]);
    // erf(1) = 0.8427007929497149, erf(2) = 0.9953222650189527 (A&S Table 7.1)
    close(&f64s(&op1(MirOp::Unary(U::Erf), &[x])), &[0.0, 0.8427007929497149, -0.9953222650189527], 1e-15);
}

#[test]
fn is_nan_inf() {
    let x = f32t(&[4], &[1.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
    assert_eq!(i64s(&op1(MirOp::Unary(U::IsNan), &[x.clone()])), vec![0, 1, 0, 0]);
    assert_eq!(i64s(&op1(MirOp::Unary(U::IsInf), &[x.clone()])), vec![0, 0, 1, 1]);
    assert_eq!(i64s(&op1(MirOp::Unary(U::IsPosInf), &[x.clone()])), vec![0, 0, 1, 0]);
    assert_eq!(i64s(&op1(MirOp::Unary(U::IsNegInf), &[x])), vec![0, 0, 0, 1]);
}

#[test]
fn where_picks_and_broadcasts() {
    let c = anyt(DType::Bool, &[2, 1], &[1., 0.]);
    let a = f32t(&[1, 3], &[1., 2., 3.]);
    let b = f32t(&[1], &[-1.]);
    let out = op1(MirOp::Where, &[c, a, b]);
    assert_eq!(out.shape, vec![2, 3]);
    close(&f64s(&out), &[1., 2., 3., -1., -1., -1.], 0.0);
}

#[test]
fn cast_float_to_int_truncates_and_saturates() {
    let x = f32t(&[6], &[2.7, -2.7, 300.0, -300.0, f32::NAN, f32::INFINITY]);
    assert_eq!(i64s(&op1(MirOp::Cast { to: DType::I8 }, &[x.clone()])), vec![2, -2, 127, -128, 0, 127]);
    assert_eq!(i64s(&op1(MirOp::Cast { to: DType::U8 }, &[x.clone()])), vec![2, 0, 255, 0, 0, 255]);
    assert_eq!(i64s(&op1(MirOp::Cast { to: DType::Bool }, &[f32t(&[3], &[0.0, -0.5, 2.0])])), vec![0, 1, 1]);
}

#[test]
fn cast_int_narrowing_wraps() {
    let x = i64t(&[3], &[256 + 5, -1, 128]);
    assert_eq!(i64s(&op1(MirOp::Cast { to: DType::U8 }, &[x.clone()])), vec![5, 255, 128]);
    assert_eq!(i64s(&op1(MirOp::Cast { to: DType::I8 }, &[x])), vec![5, -1, -128]);
}

#[test]
fn cast_to_f16_rounds() {
    // 1 + 2^-11 is halfway between f16 neighbours 1 and 1+2^-10: ties to even -> 1.
    // 1 + 3*2^-11 is halfway between 1+2^-10 and 1+2^-9: ties to even -> 1+2^-9.
    let x = f32t(&[2], &[1.0 + 2f32.powi(-11), 1.0 + 3.0 * 2f32.powi(-11)]);
    let out = op1(MirOp::Cast { to: DType::F16 }, &[x]);
    assert_eq!(out.dtype, DType::F16);
    close(&f64s(&out), &[1.0, 1.0 + 2f64.powi(-9)], 0.0);
}

#[test]
fn f16_arithmetic_rounds_every_op() {
    // 2048 + 1 is not representable in f16 (spacing 2 at 2048): ties to even -> 2048.
    let a = anyt(DType::F16, &[1], &[2048.]);
    let b = anyt(DType::F16, &[1], &[1.]);
    close(&f64s(&op1(MirOp::Binary(B::Add), &[a, b])), &[2048.], 0.0);
}

#[test]
fn f64_to_f16_and_bf16_round_correctly_just_above_a_tie() {
    // 1 + 2^-11 + 2^-40 lies just above the f16 tie between 1 and 1 + 2^-10: rounds up.
    let x = anyt(DType::F64, &[1], &[1.0 + 2f64.powi(-11) + 2f64.powi(-40)]);
    close(&f64s(&op1(MirOp::Cast { to: DType::F16 }, &[x])), &[1.0 + 2f64.powi(-10)], 0.0);
    // bf16 keeps 8 significant bits: 1 + 2^-8 + 2^-40 is just above the tie between 1 and 1 + 2^-7.
    let x = anyt(DType::F64, &[1], &[1.0 + 2f64.powi(-8) + 2f64.powi(-40)]);
    close(&f64s(&op1(MirOp::Cast { to: DType::BF16 }, &[x])), &[1.0 + 2f64.powi(-7)], 0.0);
    // and exactly on the tie: to even (1).
    let x = anyt(DType::F64, &[1], &[1.0 + 2f64.powi(-8)]);
    close(&f64s(&op1(MirOp::Cast { to: DType::BF16 }, &[x])), &[1.0], 0.0);
}
