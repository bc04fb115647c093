//! `vmap` against a loop: the mapped graph on the interpreter, row by row, equals the original graph
//! run on each row (same interpreter, so the values agree to f32 rounding of a different summation
//! order at most: 1e-5 relative). Unbatched inputs and outputs, 1-D matmul operands on both sides,
//! reductions, transpose, concat, gather, reshape; and an op without a rule is named.

use rlx_ir::{BinaryOp, ConstData, DType, Dim, Mir, MirOp, ReduceOp, TensorType, UnaryOp};

fn model() -> Mir {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F32, &[3]));
    let y = g.add_input("y", TensorType::fixed(DType::F32, &[4, 3]));
    let w = g.add_const(Some("w"), ConstData::from_f32(vec![3, 4], &(0..12).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<_>>()));
    let b = g.add_const(Some("b"), ConstData::from_f32(vec![4], &[0.1, -0.2, 0.3, 0.05]));
    let idx = g.add_const(None, ConstData::from_i64(vec![2], &[4, 1]));
    let xw = g.add1("xw", MirOp::MatMul, &[x, w]).unwrap(); // [4]: 1-D lhs
    let hb = g.add1("hb", MirOp::Binary(BinaryOp::Add), &[xw, b]).unwrap();
    let h = g.add1("h", MirOp::Unary(UnaryOp::Tanh), &[hb]).unwrap();
    let hh = g.add1("hh", MirOp::Binary(BinaryOp::Mul), &[h, h]).unwrap();
    let s = g.add1("s", MirOp::Reduce { op: ReduceOp::Sum, axes: vec![0], keepdims: false }, &[hh]).unwrap(); // scalar
    let t = g.add1("t", MirOp::Transpose { perm: vec![1, 0] }, &[y]).unwrap(); // [3, 4]
    let u = g.add1("u", MirOp::MatMul, &[t, h]).unwrap(); // [3]: 1-D rhs
    let ys = g.add1("ys", MirOp::Binary(BinaryOp::Mul), &[y, x]).unwrap(); // [4, 3] * [3]
    let m = g.add1("m", MirOp::Reduce { op: ReduceOp::Max, axes: vec![1], keepdims: true }, &[ys]).unwrap(); // [4, 1]
    let c = g.add1("c", MirOp::Concat { axis: 0 }, &[u, x]).unwrap(); // [6]
    let gi = g.add1("gi", MirOp::Gather { axis: 0 }, &[c, idx]).unwrap(); // [2]
    let r = g.add1("r", MirOp::Reshape { shape: vec![Dim::Fixed(2), Dim::Fixed(2)] }, &[m]).unwrap();
    let wsum = g.add1("wsum", MirOp::Reduce { op: ReduceOp::Sum, axes: vec![0, 1], keepdims: false }, &[w]).unwrap(); // unbatched
    g.outputs = vec![s, u, c, gi, r, wsum];
    g
}

fn rows(c: &ConstData) -> Vec<f64> {
    c.to_f64_vec()
}

fn check(batched: &[usize]) {
    let g = model();
    let n = 5;
    let vg = rlx_opt::vmap(&g, batched, n).unwrap();
    assert!(rlx_ir::verify::verify(&vg).is_empty(), "{:?}", rlx_ir::verify::verify(&vg));
    let xs: Vec<Vec<f32>> = (0..n).map(|i| (0..3).map(|j| ((i * 3 + j) as f32 * 0.71).cos()).collect()).collect();
    let ys: Vec<Vec<f32>> = (0..n).map(|i| (0..12).map(|j| ((i * 12 + j) as f32 * 0.13).sin()).collect()).collect();
    let whole = |v: &[Vec<f32>], row: &[usize], b: bool| -> ConstData {
        if b {
            let mut shape = vec![n];
            shape.extend_from_slice(row);
            ConstData::from_f32(shape, &v.concat())
        } else {
            ConstData::from_f32(row.to_vec(), &v[0])
        }
    };
    let ins = vec![whole(&xs, &[3], batched.contains(&0)), whole(&ys, &[4, 3], batched.contains(&1))];
    let got = rlx_interp::run(&vg, &ins).unwrap();
    for i in 0..n {
        let pick = |v: &[Vec<f32>], k: usize, shape: &[usize]| ConstData::from_f32(shape.to_vec(), &v[if batched.contains(&k) { i } else { 0 }]);
        let want = rlx_interp::run(&g, &[pick(&xs, 0, &[3]), pick(&ys, 1, &[4, 3])]).unwrap();
        for (k, (w, gv)) in want.iter().zip(&got).enumerate() {
            assert_eq!(gv.shape[0], n, "output {k}");
            let per = w.numel();
            let (w, gv) = (rows(w), rows(gv));
            for j in 0..per {
                let (a, b) = (gv[i * per + j], w[j]);
                assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "batched {batched:?}, output {k}, row {i}, element {j}: vmap {a}, loop {b}");
            }
        }
    }
}

#[test]
fn vmap_matches_a_loop_over_rows() {
    check(&[0, 1]);
    check(&[0]);
    check(&[1]);
}

#[test]
fn vmap_names_an_op_without_a_rule() {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F32, &[4]));
    let c = g.add1("scan", MirOp::CumSum { axis: 0, exclusive: false, reverse: false }, &[x]).unwrap();
    g.outputs = vec![c];
    let e = rlx_opt::vmap(&g, &[0], 3).unwrap_err();
    assert!(e.contains("node 'scan' (cumsum)") && e.contains("no rule"), "{e}");
}
