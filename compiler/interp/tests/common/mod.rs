//! Helpers shared by the interpreter tests: build a one-node graph over the given inputs and run it.
#![allow(dead_code)]

use rlx_interp::{run, InterpError};
use rlx_ir::{ConstData, DType, Mir, MirOp, TensorType};

pub fn f32t(shape: &[usize], v: &[f32]) -> ConstData {
    ConstData::from_f32(shape.to_vec(), v)
}
pub fn i64t(shape: &[usize], v: &[i64]) -> ConstData {
    ConstData::from_i64(shape.to_vec(), v)
}
pub fn anyt(dtype: DType, shape: &[usize], v: &[f64]) -> ConstData {
    ConstData::from_f64s(dtype, shape.to_vec(), v)
}

/// Runs `op` on `inputs` (all graph inputs) and returns every output of the node.
pub fn try_op(op: MirOp, inputs: &[ConstData]) -> Result<Vec<ConstData>, InterpError> {
    let mut g = Mir::new();
    let ids: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(i, c)| g.add_input(&format!("x{i}"), TensorType::fixed(c.dtype, &c.shape)))
        .collect();
    let outs = g.add_node("node0", op, &ids).expect("graph builds");
    g.outputs = outs;
    run(&g, inputs)
}

pub fn op1(op: MirOp, inputs: &[ConstData]) -> ConstData {
    try_op(op, inputs).expect("runs").remove(0)
}

pub fn f64s(c: &ConstData) -> Vec<f64> {
    c.to_f64_vec()
}
pub fn i64s(c: &ConstData) -> Vec<i64> {
    c.to_i64_vec()
}

pub fn close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "length: got {got:?}, want {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "element {i}: got {g}, want {w} (all: {got:?})");
    }
}
