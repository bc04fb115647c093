//! The region ops `loop` and `if` (`rlx_ir::region`): built through the graph API, printed and parsed
//! back identical, verified (a body that changes a carried value's type is named), and run by the
//! interpreter against the same computation written as a plain Rust loop.
mod common;
use common::*;
use rlx_interp::run;
use rlx_ir::{text, verify, BinaryOp, ConstData, DType, Mir, MirOp, ReduceOp, Shape, TensorType};

fn t(dtype: DType, dims: &[u64]) -> TensorType {
    TensorType::fixed(dtype, &dims.iter().map(|&d| d as usize).collect::<Vec<_>>())
}

/// while sum(acc) < limit (at most 8 times): acc = acc * 2 + x; each acc a scan slice.
fn doubling_loop(carried_out_rows: u64) -> Result<Mir, String> {
    let mut body = Mir::new();
    let _it = body.add_input("it", t(DType::I64, &[]));
    let _c = body.add_input("c", t(DType::Bool, &[]));
    let acc = body.add_input("acc", t(DType::F32, &[2]));
    let x = body.add_input("x", t(DType::F32, &[2]));
    let limit = body.add_input("limit", t(DType::F32, &[]));
    let two = body.add_const(None, ConstData::scalar(DType::F32, 2.0));
    let m = body.add1("mul", MirOp::Binary(BinaryOp::Mul), &[acc, two])?;
    let a = body.add1("add", MirOp::Binary(BinaryOp::Add), &[m, x])?;
    let s = body.add1("sum", MirOp::Reduce { op: ReduceOp::Sum, axes: vec![0], keepdims: false }, &[a])?;
    let c = body.add1("lt", MirOp::Binary(BinaryOp::Lt), &[s, limit])?;
    let carried = if carried_out_rows == 2 { a } else { body.add1("grow", MirOp::Concat { axis: 0 }, &[a, a])? };
    body.outputs = vec![c, carried, a];
    let mut g = Mir::new();
    let x = g.add_input("x", t(DType::F32, &[2]));
    let limit = g.add_input("limit", t(DType::F32, &[]));
    let trip = g.add_const(None, ConstData::from_i64(vec![], &[8]));
    let yes = g.add_const(None, ConstData::scalar(DType::Bool, 1.0));
    let outs = g.add_node("while", MirOp::Loop { max_trips: Some(8), carried: 1, body: Box::new([body]) }, &[trip, yes, x, x, limit])?;
    g.outputs = outs;
    Ok(g)
}

#[test]
fn loop_round_trips_verifies_and_runs_like_a_rust_loop() {
    let g = doubling_loop(2).unwrap();
    assert!(verify::verify(&g).is_empty(), "{:?}", verify::verify(&g));
    let printed = text::print(&g);
    assert!(printed.contains("loop(") && printed.contains("max_trips=8"), "{printed}");
    let back: Mir = text::parse(&printed).unwrap();
    assert_eq!(text::print(&back), printed);
    assert_eq!(back, g);
    for (x, limit) in [([0.5f32, 1.0], 40.0f32), ([3.0, -1.0], 5.0), ([1.0, 1.0], -1.0)] {
        let out = run(&back, &[f32t(&[2], &x), anyt(DType::F32, &[], &[limit as f64])]).unwrap();
        // The same loop in Rust (f32, as the interpreter stores f32).
        let (mut acc, mut scan, mut n) = (x, Vec::new(), 0i64);
        let mut cond = true;
        while n < 8 && cond {
            acc = [acc[0] * 2.0 + x[0], acc[1] * 2.0 + x[1]];
            scan.extend(acc);
            cond = acc[0] + acc[1] < limit;
            n += 1;
        }
        scan.resize(16, 0.0);
        assert_eq!(f32s(&out[0]), acc.to_vec());
        assert_eq!(out[1].shape, vec![8, 2]);
        assert_eq!(f32s(&out[1]), scan);
        assert_eq!(out[2].get_i64(0), n, "iterations for x {x:?}, limit {limit}");
    }
}

#[test]
fn loop_past_its_bound_is_an_error_naming_the_node() {
    let mut g = doubling_loop(2).unwrap();
    let MirOp::Loop { max_trips, .. } = &mut g.nodes[0].op else { unreachable!() };
    *max_trips = Some(2);
    // Scan outputs are [max_trips, 2]: fix the recorded type so the graph stays consistent.
    let scan = g.nodes[0].outputs[1];
    g.values[scan.index()].ty = TensorType::new(DType::F32, Shape(vec![rlx_ir::Dim::Fixed(2), rlx_ir::Dim::Fixed(2)]));
    assert!(verify::verify(&g).is_empty(), "{:?}", verify::verify(&g));
    let e = run(&g, &[f32t(&[2], &[0.5, 1.0]), anyt(DType::F32, &[], &[1000.0])]).unwrap_err();
    assert_eq!(e.node.as_deref(), Some("while"));
    assert!(e.msg.contains("bound of 2 iterations"), "{e}");
}

#[test]
fn body_changing_a_carried_shape_is_refused_naming_the_node() {
    let e = doubling_loop(4).unwrap_err();
    assert!(e.contains("node 'while' (loop)") && e.contains("changes loop-carried value 0 from f32[2] to f32[4]"), "{e}");
}

#[test]
fn if_runs_the_branch_its_condition_picks() {
    let branch = |op: BinaryOp| -> Mir {
        let mut b = Mir::new();
        let x = b.add_input("x", t(DType::F32, &[3]));
        let k = b.add_const(None, ConstData::scalar(DType::F32, 10.0));
        let y = b.add1("y", MirOp::Binary(op), &[x, k]).unwrap();
        b.outputs = vec![y];
        b
    };
    let mut g = Mir::new();
    let c = g.add_input("c", t(DType::Bool, &[]));
    let x = g.add_input("x", t(DType::F32, &[3]));
    g.outputs = g.add_node("pick", MirOp::If { branches: Box::new([branch(BinaryOp::Add), branch(BinaryOp::Mul)]) }, &[c, x]).unwrap();
    let back: Mir = text::parse(&text::print(&g)).unwrap();
    assert_eq!(back, g);
    assert!(verify::verify(&back).is_empty());
    let x = f32t(&[3], &[1.0, -2.0, 0.5]);
    let yes = run(&back, &[anyt(DType::Bool, &[], &[1.0]), x.clone()]).unwrap();
    assert_eq!(f32s(&yes[0]), vec![11.0, 8.0, 10.5]);
    let no = run(&back, &[anyt(DType::Bool, &[], &[0.0]), x]).unwrap();
    assert_eq!(f32s(&no[0]), vec![10.0, -20.0, 5.0]);
    // Branches of different output types are refused.
    let mut other = branch(BinaryOp::Add);
    let o = other.outputs[0];
    other.values[o.index()].ty = t(DType::F32, &[1, 3]);
    let mut bad = Mir::new();
    let c = bad.add_input("c", t(DType::Bool, &[]));
    let x = bad.add_input("x", t(DType::F32, &[3]));
    let e = bad.add_node("pick", MirOp::If { branches: Box::new([branch(BinaryOp::Add), other]) }, &[c, x]).unwrap_err();
    assert!(e.contains("node 'pick' (if): if: the branches differ in output 0"), "{e}");
}

fn f32s(c: &ConstData) -> Vec<f32> {
    (0..c.numel()).map(|i| c.get_f64(i) as f32).collect()
}

#[test]
fn regions_nested_too_deep_are_a_parse_error_not_a_stack_overflow() {
    let mut g = String::from("graph { }");
    for _ in 0..65 {
        g = format!("graph {{\n  %0 = loop() {{max_trips=1, carried=0}} [{g}] : i64[] @\"n\"\n}}");
    }
    let e = text::parse::<MirOp>(&g).unwrap_err();
    assert!(e.msg.contains("regions nested more than 64 deep"), "{e}");
    // A region op without its regions is refused too.
    let e = text::parse::<MirOp>("graph {\n  %0 = loop() {max_trips=1, carried=0} : i64[] @\"n\"\n}").unwrap_err();
    assert!(e.msg.contains("loop needs its regions"), "{e}");
}
