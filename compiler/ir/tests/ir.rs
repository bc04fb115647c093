//! Text-form round trips, inference and verifier checks for rlx-ir.

use rlx_ir::text::{parse, print};
use rlx_ir::*;

/// A MIR graph touching every op family, built through the API (so types come from inference).
fn sample_mir() -> Mir {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::new(DType::F32, Shape(vec![Dim::sym("batch"), Dim::Fixed(2), Dim::Fixed(3)])));
    let idx = g.add_input("idx", TensorType::fixed(DType::I64, &[2]));
    let w = g.add_const(Some("w"), ConstData::from_f32(vec![3, 4], &(0..12).map(|i| i as f32 * 0.25 - 1.0).collect::<Vec<_>>()));
    let c = g.add_const(None, ConstData::scalar(DType::F32, 1e-5));
    let mm = g.add1("mm", MirOp::MatMul, &[x, w]).unwrap();
    let a = g.add1("add", MirOp::Binary(BinaryOp::Add), &[mm, c]).unwrap();
    let e = g.add1("exp", MirOp::Unary(UnaryOp::Exp), &[a]).unwrap();
    let r = g.add1("sum", MirOp::Reduce { op: ReduceOp::Sum, axes: vec![1, 2], keepdims: false }, &[e]).unwrap();
    let t = g.add1("t", MirOp::Transpose { perm: vec![0, 2, 1] }, &[mm]).unwrap();
    let gt = g.add1("g", MirOp::Gather { axis: 2 }, &[t, idx]).unwrap();
    let cmp = g.add1("gt", MirOp::Binary(BinaryOp::Gt), &[gt, gt]).unwrap();
    let wh = g.add1("where", MirOp::Where, &[cmp, gt, gt]).unwrap();
    let sl = g.add1("slice", MirOp::Slice { axes: vec![1], starts: vec![-3], ends: vec![i64::MAX], steps: vec![2] }, &[wh]).unwrap();
    let cv = g.add1("cast", MirOp::Cast { to: DType::BF16 }, &[sl]).unwrap();
    let outs = g.add_node("topk", MirOp::TopK { axis: 1, k: 1, largest: true }, &[mm]).unwrap();
    let am = g.add1("argmax", MirOp::ArgReduce { op: ArgOp::ArgMax, axis: 2, keepdims: true, select_last: false }, &[x]).unwrap();
    g.values[r.index()].name = Some("total".into());
    g.outputs = vec![r, cv, outs[0], outs[1], am];
    g
}

#[test]
fn mir_text_round_trips() {
    let g = sample_mir();
    assert!(verify::verify(&g).is_empty(), "{:?}", verify::verify(&g));
    let t = print(&g);
    let back: Mir = parse(&t).unwrap();
    assert_eq!(back, g, "graph changed through print/parse:\n{t}");
    assert_eq!(print(&back), t);
}

#[test]
fn hir_text_round_trips() {
    let t = "graph {
  in %0 \"x\": f32[batch,seq,8]
  in %1 \"mask\": i64[batch,seq]
  const %2: f32[8] = [1.0,1.0,1.0,1.0,1.0,1.0,1.0,1.0]
  const %3: f32[8,8] = [0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0]
  %4 = linear(%0, %3) {transpose_w=true} : f32[batch,seq,8] @\"q\"
  %5 = attention(%4, %4, %4, %1) {heads=2, scale=0.5, causal=false} : f32[batch,seq,8] @\"attn\"
  %6 = layer_norm(%5, %2) {axis=2, eps=1e-12} : f32[batch,seq,8] @\"ln\"
  %7 \"y\" = gelu(%6) {tanh=true} : f32[batch,seq,8] @\"act\"
  out %7
}
";
    let g: Hir = parse(t).unwrap();
    assert!(verify::verify(&g).is_empty(), "{:?}", verify::verify(&g));
    assert_eq!(print(&g), t);
}

#[test]
fn parse_errors_have_positions() {
    let e = parse::<MirOp>("graph {\n  in %0: f32[2]\n  %1 = exp(%9) : f32[2] @\"n\"\n  out %1\n}").unwrap_err();
    assert_eq!(e.line, 3);
    assert!(e.msg.contains("%9 is used before it is defined"), "{e}");
    let e = parse::<MirOp>("graph {\n  %1 = frobnicate() : f32[2] @\"n\"\n}").unwrap_err();
    assert!(e.msg.contains("unknown MIR op 'frobnicate'"), "{e}");
    let e = parse::<MirOp>("graph {\n  const %0: f32[3] = [1.0,2.0]\n}").unwrap_err();
    assert!(e.msg.contains("has 2 values, expected 3"), "{e}");
}

#[test]
fn verifier_reports_every_problem_including_cycles() {
    // Two nodes consuming each other's outputs (a cycle), plus a dangling graph output.
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F32, &[2]));
    let ty = TensorType::fixed(DType::F32, &[2]);
    // node a uses value %2 (b's output) before b exists.
    let a = g.push_node("a", MirOp::Binary(BinaryOp::Add), &[x, ValueId(2)], vec![ty.clone()]);
    let b = g.push_node("b", MirOp::Unary(UnaryOp::Exp), &[a[0]], vec![ty]);
    assert_eq!(b[0], ValueId(2));
    g.outputs = vec![b[0], ValueId(99)];
    let probs = verify::verify(&g);
    let text: Vec<String> = probs.iter().map(|p| p.to_string()).collect();
    assert!(text.iter().any(|p| p.contains("node 'a'") && p.contains("used before it is defined")), "{text:?}");
    assert!(text.iter().any(|p| p.contains("graph output 1")), "{text:?}");
}

#[test]
fn inference_rejects_bad_shapes_with_reasons() {
    let f = |d: &[usize]| TensorType::fixed(DType::F32, d);
    let err = MirOp::MatMul.infer(&[&f(&[2, 3]), &f(&[4, 5])]).unwrap_err();
    assert!(err.contains("inner dims differ"), "{err}");
    let err = MirOp::Binary(BinaryOp::Add).infer(&[&f(&[2, 3]), &f(&[4])]).unwrap_err();
    assert!(err.contains("do not broadcast"), "{err}");
    let err = MirOp::Reshape { shape: vec![Dim::Fixed(5)] }.infer(&[&f(&[2, 3])]).unwrap_err();
    assert!(err.contains("6 elements"), "{err}");
    // numpy matmul: 1-D operands and batch broadcasting.
    let out = MirOp::MatMul.infer(&[&f(&[3]), &f(&[7, 3, 4])]).unwrap();
    assert_eq!(out[0], f(&[7, 4]));
    let out = MirOp::MatMul.infer(&[&f(&[2, 1, 5, 3]), &f(&[6, 3, 4])]).unwrap();
    assert_eq!(out[0], f(&[2, 6, 5, 4]));
    // Conv output size: 5x5 input, 3x3 kernel, pad 1, stride 2 → 3x3.
    let conv = MirOp::Conv { strides: vec![2, 2], pads: vec![1, 1, 1, 1], dilations: vec![1, 1], groups: 1 };
    assert_eq!(conv.infer(&[&f(&[1, 1, 5, 5]), &f(&[4, 1, 3, 3])]).unwrap()[0], f(&[1, 4, 3, 3]));
    // Symbolic dims broadcast with themselves and with 1, and reshape proves counts with shared symbols.
    let b = TensorType::new(DType::F32, Shape(vec![Dim::sym("batch"), Dim::Fixed(6)]));
    let r = MirOp::Reshape { shape: vec![Dim::sym("batch"), Dim::Fixed(2), Dim::Fixed(3)] }.infer(&[&b]).unwrap();
    assert_eq!(r[0].shape.to_string(), "[batch,2,3]");
    let err = MirOp::Reshape { shape: vec![Dim::Fixed(6)] }.infer(&[&b]).unwrap_err();
    assert!(err.contains("cannot prove"), "{err}");
}

#[test]
fn slice_ranges_follow_onnx() {
    use rlx_ir::mir::slice_range;
    assert_eq!(slice_range(10, 0, 3, 1), (0, 3));
    assert_eq!(slice_range(10, -3, i64::MAX, 1), (7, 3));
    assert_eq!(slice_range(10, 20, 1, -2), (9, 4)); // 9,7,5,3
    assert_eq!(slice_range(10, -1, i64::MIN, -1), (9, 10));
    assert_eq!(slice_range(10, 5, 2, 1), (5, 0));
}

#[test]
fn const_data_checks_lengths_and_blocks() {
    assert!(ConstData::new(DType::F32, vec![2, 2], Blob::from_vec(vec![0; 15])).is_err());
    assert!(ConstData::new(DType::Q4_0, vec![32], Blob::from_vec(vec![0; 18])).is_ok());
    assert!(ConstData::new(DType::Q4_0, vec![31], Blob::from_vec(vec![0; 18])).is_err());
    assert!(ConstData::new(DType::F32, vec![usize::MAX, 4], Blob::from_vec(vec![])).is_err());
    let c = ConstData::from_f64s(DType::I8, vec![3], &[127.0, 128.0, -129.0]);
    assert_eq!(c.to_i64_vec(), vec![127, -128, 127]);
}

/// A KV-cache update as the cached LLM step writes it: state input `cache`, `write_rows` at `pos`,
/// state output = its result.
fn stateful_mir() -> Mir {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F32, &[2, 3]));
    let pos = g.add_input("pos", TensorType::fixed(DType::I64, &[2]));
    let cache = g.add_input("cache", TensorType::fixed(DType::F32, &[8, 3]));
    let c = g.add1("cache.update", MirOp::WriteRows, &[cache, x, pos]).unwrap();
    let s = g.add1("sum", MirOp::Reduce { op: ReduceOp::Sum, axes: vec![0], keepdims: false }, &[c]).unwrap();
    g.outputs = vec![s, c];
    g.state = vec![State { input: 2, output: 1 }];
    g
}

#[test]
fn state_pairs_round_trip_and_are_verified() {
    let g = stateful_mir();
    assert!(verify::verify(&g).is_empty(), "{:?}", verify::verify(&g));
    let text = print(&g);
    assert!(text.contains("write_rows(") && text.ends_with("  state 1\n}\n"), "{text}");
    let back: Mir = parse(&text).unwrap();
    assert_eq!(back.state, g.state);
    assert_eq!(print(&back), text);
    // The state input read by a second node: no in-place update possible.
    let mut g2 = stateful_mir();
    let cache = g2.inputs[2];
    let extra = g2.add1("peek", MirOp::Unary(UnaryOp::Neg), &[cache]).unwrap();
    g2.outputs.insert(1, extra);
    g2.state = vec![State { input: 2, output: 2 }];
    let p = verify::verify(&g2);
    assert!(p.iter().any(|p| p.msg.contains("only reader must be the write_rows")), "{p:?}");
    // A state pair that is not the trailing input/output.
    let mut g3 = stateful_mir();
    g3.state = vec![State { input: 2, output: 0 }];
    let p = verify::verify(&g3);
    assert!(p.iter().any(|p| p.msg.contains("trailing")), "{p:?}");
    // Rows that do not fit the cache.
    let mut g4 = Mir::new();
    let x = g4.add_input("x", TensorType::fixed(DType::F32, &[2, 4]));
    let pos = g4.add_input("pos", TensorType::fixed(DType::I64, &[2]));
    let cache = g4.add_input("cache", TensorType::fixed(DType::F32, &[8, 3]));
    let e = g4.add_node("bad", MirOp::WriteRows, &[cache, x, pos]).unwrap_err();
    assert!(e.contains("node 'bad' (write_rows)") && e.contains("differ after the first axis"), "{e}");
    // A state count beyond the graph's inputs is a parse error.
    assert!(parse::<MirOp>("graph {\n  in %0: f32[1]\n  out %0\n  state 2\n}\n").is_err());
}
