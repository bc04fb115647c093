//! Hostile inputs: the ONNX importer must return an error (never panic, never allocate from a
//! declared size it has not checked) and the error must say where the problem is.

use prost::Message;
use rlx_import::proto::tensor_proto::{DataLocation, DataType};
use rlx_import::proto::*;
use rlx_import::{load_onnx, load_onnx_bytes, tensor_from_proto, ImportOptions};

mod common;
use common::{model, node, vi};

fn err(bytes: &[u8]) -> String {
    match load_onnx_bytes(bytes, None, &ImportOptions::default()) {
        Ok(_) => panic!("expected an import error"),
        Err(e) => e.to_string(),
    }
}

fn relu_model() -> Vec<u8> {
    model(vec![node("r", "Relu", &["x"], &["y"])], vec![vi("x", &[2, 3])], vec![vi("y", &[2, 3])], vec![])
}

#[test]
fn a_valid_model_imports() {
    let g = load_onnx_bytes(&relu_model(), None, &ImportOptions::default()).expect("import");
    assert_eq!(g.nodes.len(), 1);
    assert_eq!(g.value(g.outputs[0]).name.as_deref(), Some("y"));
}

#[test]
fn truncated_bytes() {
    let b = relu_model();
    for cut in [1, b.len() / 3, b.len() / 2, b.len() - 1] {
        let e = err(&b[..cut]);
        assert!(e.contains("not a valid ONNX protobuf"), "cut {cut}: {e}");
    }
}

#[test]
fn random_garbage() {
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for len in [0usize, 1, 7, 64, 1000, 4096] {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let e = err(&bytes);
        assert!(!e.is_empty());
    }
    assert!(err(&[]).contains("not a valid ONNX protobuf"));
}

fn init(name: &str, dims: &[i64], raw: Vec<u8>) -> TensorProto {
    TensorProto { name: name.into(), dims: dims.to_vec(), data_type: DataType::Float as i32, raw_data: raw, ..Default::default() }
}

fn add_model(w: TensorProto) -> Vec<u8> {
    model(vec![node("add0", "Add", &["x", "W"], &["y"])], vec![vi("x", &[2, 2])], vec![vi("y", &[2, 2])], vec![w])
}

#[test]
fn raw_data_shorter_than_dims() {
    let e = err(&add_model(init("W", &[2, 2], vec![0; 12])));
    assert!(e.contains("initializer 'W'") && e.contains("raw_data has 12 bytes"), "{e}");
}

#[test]
fn huge_dims_do_not_allocate() {
    let e = err(&add_model(init("W", &[1 << 40, 1 << 40], vec![0; 16])));
    assert!(e.contains("initializer 'W'") && e.contains("overflow"), "{e}");
    // Large but representable: must be rejected by comparing with the bytes present, not by allocating.
    let e = err(&add_model(init("W", &[1 << 20, 1 << 20], vec![])));
    assert!(e.contains("initializer 'W'"), "{e}");
    let t = TensorProto { dims: vec![1 << 30, 1 << 10], data_type: DataType::Float as i32, float_data: vec![1.0], ..Default::default() };
    assert!(tensor_from_proto(&t, None).unwrap_err().contains("need"));
}

#[test]
fn negative_dim() {
    let e = err(&add_model(init("W", &[2, -2], vec![0; 16])));
    assert!(e.contains("initializer 'W'") && e.contains("negative dim -2"), "{e}");
}

#[test]
fn node_cycle() {
    let b = model(
        vec![node("first", "Add", &["x", "b"], &["a"]), node("second", "Relu", &["a"], &["b"])],
        vec![vi("x", &[2])],
        vec![vi("b", &[2])],
        vec![],
    );
    let e = err(&b);
    assert!(e.contains("node 'first'") && e.contains("'b'") && e.contains("cycle"), "{e}");
}

#[test]
fn missing_initializer() {
    let b = model(vec![node("mm", "MatMul", &["x", "weights"], &["y"])], vec![vi("x", &[2, 3])], vec![vi("y", &[2, 4])], vec![]);
    let e = err(&b);
    assert!(e.contains("node 'mm'") && e.contains("'weights'") && e.contains("not defined"), "{e}");
}

#[test]
fn shape_mismatch_names_the_node() {
    let b = model(
        vec![node("the_matmul", "MatMul", &["a", "b"], &["y"])],
        vec![vi("a", &[2, 3]), vi("b", &[4, 5])],
        vec![vi("y", &[2, 5])],
        vec![],
    );
    let e = err(&b);
    assert!(e.contains("node 'the_matmul'") && e.contains("MatMul") && e.contains("inner dims"), "{e}");
}

#[test]
fn every_unsupported_op_is_listed() {
    let b = model(
        vec![
            node("n1", "FancyOp", &["x"], &["a"]),
            node("n2", "Relu", &["a"], &["b"]),
            node("n3", "OtherWeirdOp", &["x"], &["c"]),
        ],
        vec![vi("x", &[2])],
        vec![vi("b", &[2]), vi("c", &[2])],
        vec![],
    );
    let e = err(&b);
    assert!(e.contains("node 'n1'") && e.contains("FancyOp"), "{e}");
    assert!(e.contains("node 'n3'") && e.contains("OtherWeirdOp"), "{e}");
    assert!(e.contains("opset 17"), "{e}");
    assert_eq!(e.lines().count(), 2, "the Relu fed by the unsupported op is not reported: {e}");
}

#[test]
fn external_data_cannot_escape_the_folder() {
    let dir = std::env::temp_dir().join(format!("rlx-bad-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ext = |loc: &str| {
        let mut t = init("W", &[2, 2], vec![]);
        t.data_location = DataLocation::External as i32;
        t.external_data = vec![
            StringStringEntryProto { key: "location".into(), value: loc.into() },
            StringStringEntryProto { key: "offset".into(), value: "0".into() },
            StringStringEntryProto { key: "length".into(), value: "16".into() },
        ];
        t
    };
    for (loc, want) in [("../secret.bin", "escapes"), ("/etc/passwd", "absolute"), ("a/../../x.bin", "escapes")] {
        let p = dir.join("m.onnx");
        std::fs::write(&p, add_model(ext(loc))).unwrap();
        let e = load_onnx(&p, &ImportOptions::default()).unwrap_err().to_string();
        assert!(e.contains("initializer 'W'") && e.contains(want), "{loc}: {e}");
    }
    // In the folder but too short: the range lies beyond the end of the file.
    std::fs::write(dir.join("w.bin"), [0u8; 8]).unwrap();
    let p = dir.join("m.onnx");
    std::fs::write(&p, add_model(ext("w.bin"))).unwrap();
    let e = load_onnx(&p, &ImportOptions::default()).unwrap_err().to_string();
    assert!(e.contains("initializer 'W'") && e.contains("beyond the end"), "{e}");
    // And a good one loads.
    std::fs::write(dir.join("w.bin"), [0u8; 16]).unwrap();
    assert!(load_onnx(&p, &ImportOptions::default()).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn blocked_quantization_with_a_wrong_scale_shape_names_the_node() {
    // x [2, 6] with block_size 4 along axis 1 needs a scale of [2, 2] (ceil(6 / 4)); [2, 3] is wrong.
    let mut n = node("deq_blocked", "QuantizeLinear", &["x", "s"], &["y"]);
    n.attribute = vec![
        AttributeProto { name: "axis".into(), i: 1, r#type: attribute_proto::AttributeType::Int as i32, ..Default::default() },
        AttributeProto { name: "block_size".into(), i: 4, r#type: attribute_proto::AttributeType::Int as i32, ..Default::default() },
    ];
    let s = init("s", &[2, 3], vec![0; 24]);
    let mut m = ModelProto::decode(&model(vec![n], vec![vi("x", &[2, 6])], vec![vi("y", &[2, 6])], vec![s])[..]).unwrap();
    m.opset_import[0].version = 21;
    let e = err(&m.encode_to_vec());
    assert!(e.contains("node 'deq_blocked'") && e.contains("block_size 4") && e.contains("[2, 3]"), "{e}");
}

// ---- GGUF ----

/// A GGUF v3 file: one string key (general.architecture = "llama"), then `tensors` as
/// (name, ggml dims innermost first, type id, offset in the data section), padding to 32, `data`.
fn gguf_bytes(tensors: &[(&str, &[u64], u32, u64)], data: &[u8]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    let string = |b: &mut Vec<u8>, s: &str| {
        b.extend_from_slice(&(s.len() as u64).to_le_bytes());
        b.extend_from_slice(s.as_bytes());
    };
    string(&mut b, "general.architecture");
    b.extend_from_slice(&8u32.to_le_bytes()); // string
    string(&mut b, "llama");
    for (name, dims, ty, off) in tensors {
        string(&mut b, name);
        b.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        dims.iter().for_each(|d| b.extend_from_slice(&d.to_le_bytes()));
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(&off.to_le_bytes());
    }
    while b.len() % 32 != 0 {
        b.push(0);
    }
    b.extend_from_slice(data);
    b
}

fn gguf_err(name: &str, bytes: &[u8]) -> String {
    let dir = std::env::temp_dir().join(format!("rlx-gguf-bad-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    let r = rlx_import::gguf::load_gguf(&p);
    let _ = std::fs::remove_dir_all(&dir);
    match r {
        Ok(_) => panic!("{name}: expected an error"),
        Err(e) => {
            eprintln!("{name}: {e}");
            e
        }
    }
}

/// One Q8_0 tensor 'w' of 2 rows × 32 values (2 blocks of 34 bytes) and one f32 'b' [4].
fn good_gguf() -> Vec<u8> {
    let mut data = vec![0u8; 68];
    data[0..2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
    data[2] = 3;
    data.resize(96, 0);
    data.extend_from_slice(&[0u8; 16]);
    gguf_bytes(&[("w", &[32, 2], 8, 0), ("b", &[4], 0, 96)], &data)
}

#[test]
fn a_valid_gguf_loads_without_copying_blocks() {
    let dir = std::env::temp_dir().join(format!("rlx-gguf-ok-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("ok.gguf");
    std::fs::write(&p, good_gguf()).unwrap();
    let f = rlx_import::gguf::load_gguf(&p).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(f.architecture(), "llama");
    let w = &f.tensor("w").unwrap().data;
    assert_eq!((w.dtype, w.shape.clone(), w.data.len()), (rlx_ir::DType::Q8_0, vec![2, 32], 68));
    assert_eq!(w.data.bytes()[2], 3);
    assert_eq!(f.tensor("b").unwrap().offset, f.data_offset + 96);
}

#[test]
fn truncated_gguf_header_is_named() {
    let e = gguf_err("short.gguf", &good_gguf()[..10]);
    assert!(e.contains("truncated") && e.contains("24 bytes"), "{e}");
    let full = good_gguf();
    // Cut inside the tensor table (the second tensor's name).
    let e = gguf_err("cut-table.gguf", &full[..90]);
    assert!(e.contains("truncated") && e.contains("past the end of the file (90 bytes)"), "{e}");
}

#[test]
fn truncated_gguf_tensor_data_is_named() {
    let full = good_gguf();
    let e = gguf_err("cut-data.gguf", &full[..full.len() - 20]);
    assert!(e.contains("tensor 'b': 16 bytes at file offset") && e.contains("run past the end of the file"), "{e}");
}

#[test]
fn bad_gguf_magic_version_and_type_are_named() {
    let mut b = good_gguf();
    b[0] = b'X';
    assert!(gguf_err("magic.gguf", &b).contains("not a GGUF file"));
    let mut b = good_gguf();
    b[4] = 9;
    assert!(gguf_err("version.gguf", &b).contains("unsupported GGUF version 9 (bytes 4..8)"));
    let e = gguf_err("type.gguf", &gguf_bytes(&[("w", &[32, 2], 77, 0)], &[0u8; 68]));
    assert!(e.contains("read up to byte offset 110") && e.contains("77"), "{e}");
    // A real ggml type we do not read (Q8_1, id 9) is named with the tensor.
    let e = gguf_err("q8_1.gguf", &gguf_bytes(&[("w", &[32, 2], 9, 0)], &[0u8; 72]));
    assert!(e.contains("tensor 'w': unsupported GGUF type Q8_1"), "{e}");
}

#[test]
fn absurd_gguf_counts_and_dims_are_refused_before_allocating() {
    let mut b = good_gguf();
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let e = gguf_err("count.gguf", &b);
    assert!(e.contains("tensor count 18446744073709551615 (bytes 8..16)"), "{e}");
    let mut b = good_gguf();
    b[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let e = gguf_err("kvs.gguf", &b);
    assert!(e.contains("metadata count") && e.contains("bytes 16..24"), "{e}");
    let e = gguf_err("dims.gguf", &gguf_bytes(&[("w", &[1 << 40, 1 << 40], 0, 0)], &[0u8; 64]));
    assert!(e.contains("byte offset 110") && e.contains("overflows"), "{e}");
    let e = gguf_err("big.gguf", &gguf_bytes(&[("w", &[1 << 20, 1 << 20], 0, 0)], &[0u8; 64]));
    assert!(e.contains("tensor 'w'") && e.contains("run past the end"), "{e}");
}

#[test]
fn every_gguf_truncation_is_an_error_not_a_panic() {
    let full = good_gguf();
    let dir = std::env::temp_dir().join(format!("rlx-gguf-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("cut.gguf");
    for n in 0..full.len() {
        std::fs::write(&p, &full[..n]).unwrap();
        assert!(rlx_import::gguf::load_gguf(&p).is_err(), "a file cut to {n} bytes loaded");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Narrow types are read widened; the packed encodings below are what the `onnx` package's
/// `helper.make_tensor` writes for these values (int32_data, one packed byte per entry).
#[test]
fn narrow_types_widen_to_their_carriers() {
    let t = |dt: DataType, dims: &[i64], int32: Vec<i32>| TensorProto { dims: dims.to_vec(), data_type: dt as i32, int32_data: int32, ..Default::default() };
    let c = tensor_from_proto(&t(DataType::Int4, &[5], vec![225, 195, 5]), None).unwrap();
    assert_eq!((c.dtype, c.to_i64_vec()), (rlx_ir::DType::I8, vec![1, -2, 3, -4, 5]));
    let c = tensor_from_proto(&t(DataType::Uint2, &[5], vec![57, 1]), None).unwrap();
    assert_eq!((c.dtype, c.to_i64_vec()), (rlx_ir::DType::U8, vec![1, 2, 3, 0, 1]));
    let c = tensor_from_proto(&t(DataType::Float8e4m3fn, &[3], vec![56, 48, 126]), None).unwrap();
    assert_eq!((c.dtype, c.to_f64_vec()), (rlx_ir::DType::F32, vec![1.0, 0.5, 448.0]));
    // e4m3fn 0x7f and e5m2 0x7e are NaN, e5m2 0x7c is +inf, e4m3fnuz 0x80 is NaN (no -0).
    assert!(tensor_from_proto(&t(DataType::Float8e4m3fn, &[1], vec![0x7f]), None).unwrap().get_f64(0).is_nan());
    let c = tensor_from_proto(&t(DataType::Float8e5m2, &[2], vec![0x7e, 0x7c]), None).unwrap();
    assert!(c.get_f64(0).is_nan() && c.get_f64(1) == f64::INFINITY);
    assert!(tensor_from_proto(&t(DataType::Float8e4m3fnuz, &[1], vec![0x80]), None).unwrap().get_f64(0).is_nan());
}

#[test]
fn narrow_tensor_with_too_few_bytes_is_named() {
    let w = TensorProto { name: "W".into(), dims: vec![2, 2], data_type: DataType::Int4 as i32, raw_data: vec![0x11], ..Default::default() };
    let e = err(&add_model(w));
    assert!(e.contains("initializer 'W'") && e.contains("raw_data has 1 bytes") && e.contains("needs 2"), "{e}");
    let t = TensorProto { dims: vec![1 << 30, 1 << 10], data_type: DataType::Float8e5m2 as i32, int32_data: vec![1], ..Default::default() };
    assert!(tensor_from_proto(&t, None).unwrap_err().contains("needs"));
}

fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attribute_proto::AttributeType::Graph as i32, g: Some(g), ..Default::default() }
}

fn bool_vi(name: &str) -> ValueInfoProto {
    let mut v = vi(name, &[]);
    if let Some(TypeProto { value: Some(type_proto::Value::TensorType(t)), .. }) = v.r#type.as_mut() {
        t.elem_type = DataType::Bool as i32;
    }
    v
}

#[test]
fn loop_with_a_run_time_condition_is_a_region() {
    // cond_out = max(s) > 0: computed at run time, so the Loop cannot unroll; it is a `loop` region
    // (bounded by its constant trip count 3, its one-element condition made a scalar).
    let body = GraphProto {
        node: vec![node("mx", "ReduceMax", &["s_in"], &["m_s"]), node("gt", "Greater", &["m_s", "zero"], &["c_out"])],
        input: vec![vi("i", &[]), bool_vi("c_in"), vi("s_in", &[2])],
        output: vec![bool_vi("c_out"), vi("s_in", &[2])],
        ..Default::default()
    };
    let mut lp = node("the_loop", "Loop", &["m", "", "x"], &["y"]);
    lp.attribute.push(graph_attr("body", body));
    let m = TensorProto { name: "m".into(), data_type: DataType::Int64 as i32, int64_data: vec![3], ..Default::default() };
    let zero = TensorProto { name: "zero".into(), data_type: DataType::Float as i32, float_data: vec![0.0], ..Default::default() };
    let b = model(vec![lp], vec![vi("x", &[2])], vec![vi("y", &[2])], vec![m, zero]);
    let h = load_onnx_bytes(&b, None, &ImportOptions::default()).unwrap();
    let lp = h.nodes.iter().find(|n| n.name == "the_loop").expect("the loop node");
    let rlx_ir::HirOp::Loop { max_trips, carried, body } = &lp.op else { panic!("not a loop region: {:?}", lp.op) };
    assert_eq!((*max_trips, *carried), (Some(3), 1));
    assert!(rlx_ir::verify::verify(&body[0]).is_empty());
    assert_eq!(body[0].ty(body[0].outputs[0]).to_string(), "bool[]");
}

#[test]
fn scan_body_problems_name_the_inner_node() {
    let body = GraphProto {
        node: vec![node("inner_fancy", "FancyOp", &["s_in", "x_t"], &["s_out"])],
        input: vec![vi("s_in", &[2]), vi("x_t", &[2])],
        output: vec![vi("s_out", &[2])],
        ..Default::default()
    };
    let mut sc = node("the_scan", "Scan", &["s0", "xs"], &["s"]);
    sc.attribute.push(graph_attr("body", body));
    sc.attribute.push(AttributeProto { name: "num_scan_inputs".into(), r#type: attribute_proto::AttributeType::Int as i32, i: 1, ..Default::default() });
    let b = model(vec![sc], vec![vi("s0", &[2]), vi("xs", &[4, 2])], vec![vi("s", &[2])], vec![]);
    let e = err(&b);
    assert!(e.contains("node 'the_scan'") && e.contains("unsupported op FancyOp") && e.contains("'inner_fancy'"), "{e}");
}

#[test]
fn if_without_a_branch_is_an_error() {
    let then_g = GraphProto { node: vec![node("r", "Relu", &["x"], &["t"])], output: vec![vi("t", &[2])], ..Default::default() };
    let mut n = node("the_if", "If", &["c"], &["y"]);
    n.attribute.push(graph_attr("then_branch", then_g));
    let b = model(vec![n], vec![bool_vi("c"), vi("x", &[2])], vec![vi("y", &[2])], vec![]);
    let e = err(&b);
    assert!(e.contains("node 'the_if'") && e.contains("else_branch"), "{e}");
}

#[test]
fn nested_loops_past_the_unroll_budget_become_a_loop_region() {
    // 2,000 × 2,000 iterations of an Identity: past the 2^20-node unroll budget (found before any
    // work), so the outer Loop is a `loop` region bounded by its trip count; its body unrolls the inner.
    let inner_body = GraphProto {
        node: vec![node("id", "Identity", &["s_in"], &["s_out"])],
        input: vec![vi("j", &[]), bool_vi("c_in"), vi("s_in", &[2])],
        output: vec![bool_vi("c_in"), vi("s_out", &[2])],
        ..Default::default()
    };
    let mut inner = node("inner", "Loop", &["m", "", "t_in"], &["t_out"]);
    inner.attribute.push(graph_attr("body", inner_body));
    let outer_body = GraphProto {
        node: vec![inner],
        input: vec![vi("i", &[]), bool_vi("c_in"), vi("t_in", &[2])],
        output: vec![bool_vi("c_in"), vi("t_out", &[2])],
        ..Default::default()
    };
    let mut outer = node("outer", "Loop", &["m", "", "x"], &["y"]);
    outer.attribute.push(graph_attr("body", outer_body));
    let m = TensorProto { name: "m".into(), data_type: DataType::Int64 as i32, int64_data: vec![2000], ..Default::default() };
    let b = model(vec![outer], vec![vi("x", &[2])], vec![vi("y", &[2])], vec![m]);
    let h = load_onnx_bytes(&b, None, &ImportOptions::default()).unwrap();
    let outer = h.nodes.iter().find(|n| n.name == "outer").expect("the outer loop");
    let rlx_ir::HirOp::Loop { max_trips, carried, body } = &outer.op else { panic!("not a loop region: {:?}", outer.op) };
    assert_eq!((*max_trips, *carried), (Some(2000), 1));
    assert!(body[0].nodes.iter().all(|n| !matches!(n.op, rlx_ir::HirOp::Loop { .. })), "the inner loop unrolls");
}

#[test]
fn a_loop_with_no_trip_count_past_the_unroll_limit_is_refused() {
    // No trip count and a condition that stays a constant true: unrolling stops at 4,096 iterations,
    // and with no trip count to bound it there is no region either.
    let body = GraphProto {
        node: vec![node("id", "Identity", &["s_in"], &["s_out"])],
        input: vec![vi("i", &[]), bool_vi("c_in"), vi("s_in", &[2])],
        output: vec![bool_vi("c_in"), vi("s_out", &[2])],
        ..Default::default()
    };
    let mut lp = node("forever", "Loop", &["", "t", "x"], &["y"]);
    lp.attribute.push(graph_attr("body", body));
    let t = TensorProto { name: "t".into(), data_type: DataType::Bool as i32, int32_data: vec![1], ..Default::default() };
    let b = model(vec![lp], vec![vi("x", &[2])], vec![vi("y", &[2])], vec![t]);
    let e = err(&b);
    assert!(e.contains("node 'forever'") && e.contains("more than 4096 iterations"), "{e}");
}
