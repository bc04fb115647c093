//! `rlx_interp::ranks::run_ranks`: the collectives' semantics on small tensors whose results are
//! written out by hand, ranks exchanging in one process; a rank's failure is reported, not a hang.

use rlx_interp::ranks::run_ranks;
use rlx_ir::{ConstData, DType, Dim, Mir, MirOp, TensorType};

fn f32s(c: &ConstData) -> Vec<f32> {
    (0..c.numel()).map(|i| c.get_f64(i) as f32).collect()
}

/// Rank graph: x[2,2] → (all_reduce, all_gather axis 1, reduce_scatter axis 0).
fn collectives(n: usize) -> Mir {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::new(DType::F32, rlx_ir::Shape(vec![Dim::Fixed(2), Dim::Fixed(2)])));
    let s = g.add1("sum", MirOp::AllReduce { ranks: n }, &[x]).unwrap();
    let a = g.add1("gather", MirOp::AllGather { axis: 1, ranks: n }, &[x]).unwrap();
    let r = g.add1("scatter", MirOp::ReduceScatter { axis: 0, ranks: n }, &[x]).unwrap();
    g.outputs = vec![s, a, r];
    g
}

#[test]
fn all_reduce_all_gather_reduce_scatter() {
    let g = vec![collectives(2), collectives(2)];
    let ins = vec![vec![ConstData::from_f32(vec![2, 2], &[1., 2., 3., 4.])], vec![ConstData::from_f32(vec![2, 2], &[10., 20., 30., 40.])]];
    let outs = run_ranks(&g, &ins).unwrap();
    for (r, o) in outs.iter().enumerate() {
        assert_eq!(f32s(&o[0]), [11., 22., 33., 44.], "rank {r} all_reduce");
        assert_eq!(o[1].shape, vec![2, 4]);
        assert_eq!(f32s(&o[1]), [1., 2., 10., 20., 3., 4., 30., 40.], "rank {r} all_gather");
        assert_eq!(o[2].shape, vec![1, 2]);
    }
    assert_eq!(f32s(&outs[0][2]), [11., 22.]);
    assert_eq!(f32s(&outs[1][2]), [33., 44.]);
}

#[test]
fn send_and_recv_in_order() {
    let ty = TensorType::new(DType::F32, rlx_ir::Shape(vec![Dim::Fixed(3)]));
    let mut a = Mir::new();
    let x = a.add_input("x", ty.clone());
    let y = a.add1("y", MirOp::Unary(rlx_ir::UnaryOp::Neg), &[x]).unwrap();
    let s1 = a.add1("s1", MirOp::Send { peer: 1 }, &[x]).unwrap();
    let s2 = a.add1("s2", MirOp::Send { peer: 1 }, &[y]).unwrap();
    a.outputs = vec![s1, s2];
    let mut b = Mir::new();
    let r1 = b.add1("r1", MirOp::Recv { peer: 0, dtype: DType::F32, shape: vec![Dim::Fixed(3)] }, &[]).unwrap();
    let r2 = b.add1("r2", MirOp::Recv { peer: 0, dtype: DType::F32, shape: vec![Dim::Fixed(3)] }, &[]).unwrap();
    let d = b.add1("d", MirOp::Binary(rlx_ir::BinaryOp::Sub), &[r1, r2]).unwrap();
    b.outputs = vec![d];
    let outs = run_ranks(&[a, b], &[vec![ConstData::from_f32(vec![3], &[1., 2., 3.])], vec![]]).unwrap();
    assert_eq!(f32s(&outs[0][0]), [1., 2., 3.]);
    assert_eq!(f32s(&outs[1][0]), [2., 4., 6.]);
}

#[test]
fn a_failing_rank_stops_the_others() {
    // Rank 1 waits for a message rank 0 never sends: rank 0 fails first (wrong input count).
    let mut a = Mir::new();
    let x = a.add_input("x", TensorType::new(DType::F32, rlx_ir::Shape(vec![Dim::Fixed(1)])));
    let s = a.add1("s", MirOp::Send { peer: 1 }, &[x]).unwrap();
    a.outputs = vec![s];
    let mut b = Mir::new();
    let r = b.add1("r", MirOp::Recv { peer: 0, dtype: DType::F32, shape: vec![Dim::Fixed(1)] }, &[]).unwrap();
    b.outputs = vec![r];
    let e = run_ranks(&[a, b], &[vec![], vec![]]).unwrap_err();
    assert!(e.to_string().contains("rank 0") && e.to_string().contains("graph takes 1 inputs, got 0"), "{e}");
    // A collective outside run_ranks is an error naming the node.
    let e = rlx_interp::run(&collectives(2), &[ConstData::from_f32(vec![2, 2], &[0.; 4])]).unwrap_err();
    assert!(e.to_string().contains("node 'sum' (all_reduce)"), "{e}");
}
