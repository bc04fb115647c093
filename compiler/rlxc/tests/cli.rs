//! End-to-end tests of the `rlxc` binary on tiny ONNX models built here with the prost messages.

use prost::Message;
use rlx_import::onnx::proto::{
    tensor_proto::DataType, tensor_shape_proto::dimension, tensor_shape_proto::Dimension, type_proto, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use rlx_ir::{ConstData, DType};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh, empty folder for one test; removed when the test passes (kept on failure, to look at).
struct Tmp(PathBuf);

impl Tmp {
    fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl std::ops::Deref for Tmp {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn tmp(test: &str) -> Tmp {
    let d = std::env::temp_dir().join(format!("rlxc-cli-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Tmp(d)
}

/// A tensor value info; dims that parse as integers are fixed, others symbolic.
fn vi(name: &str, elem: DataType, dims: &[&str]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: Some(match d.parse::<i64>() {
                Ok(n) => dimension::Value::DimValue(n),
                Err(_) => dimension::Value::DimParam(d.to_string()),
            }),
            denotation: String::new(),
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor { elem_type: elem as i32, shape: Some(TensorShapeProto { dim }) })),
            denotation: String::new(),
        }),
        ..Default::default()
    }
}

fn node(name: &str, op: &str, ins: &[&str], outs: &[&str]) -> NodeProto {
    NodeProto {
        name: name.into(),
        op_type: op.into(),
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn f32_init(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: DataType::Float as i32,
        raw_data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ..Default::default()
    }
}

fn write_model(path: &Path, nodes: Vec<NodeProto>, inputs: Vec<ValueInfoProto>, outputs: Vec<ValueInfoProto>, inits: Vec<TensorProto>) {
    let m = ModelProto {
        ir_version: 8,
        producer_name: "rlxc-test".into(),
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: 17 }],
        graph: Some(GraphProto { name: "g".into(), node: nodes, input: inputs, output: outputs, initializer: inits, ..Default::default() }),
        ..Default::default()
    };
    std::fs::write(path, m.encode_to_vec()).unwrap();
}

/// out/sum = a + b, a and b f32[2,3]. The output name has a '/' on purpose.
fn add_model(dir: &Path) -> PathBuf {
    let p = dir.join("add.onnx");
    write_model(
        &p,
        vec![node("add0", "Add", &["a", "b"], &["out/sum"])],
        vec![vi("a", DataType::Float, &["2", "3"]), vi("b", DataType::Float, &["2", "3"])],
        vec![vi("out/sum", DataType::Float, &["2", "3"])],
        vec![],
    );
    p
}

/// y = x · W with W = [[1,2],[3,4]] an initializer; x f32[1,2].
fn matmul_model(dir: &Path) -> PathBuf {
    let p = dir.join("matmul.onnx");
    write_model(
        &p,
        vec![node("mm", "MatMul", &["x", "W"], &["y"])],
        vec![vi("x", DataType::Float, &["1", "2"])],
        vec![vi("y", DataType::Float, &["1", "2"])],
        vec![f32_init("W", &[2, 2], &[1., 2., 3., 4.])],
    );
    p
}

/// out = a + b with a, b f32[batch,3].
fn sym_model(dir: &Path) -> PathBuf {
    let p = dir.join("sym.onnx");
    write_model(
        &p,
        vec![node("add0", "Add", &["a", "b"], &["out"])],
        vec![vi("a", DataType::Float, &["batch", "3"]), vi("b", DataType::Float, &["batch", "3"])],
        vec![vi("out", DataType::Float, &["batch", "3"])],
        vec![],
    );
    p
}

fn npy_f32(path: &Path, shape: &[usize], v: &[f32]) -> PathBuf {
    rlxc::npy::write(path, &ConstData::from_f32(shape.to_vec(), v)).unwrap();
    path.to_path_buf()
}

fn rlxc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlxc")).args(args).output().expect("run rlxc")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn code(o: &Output, want: i32) {
    assert_eq!(o.status.code(), Some(want), "exit code; stdout:\n{}\nstderr:\n{}", stdout(o), stderr(o));
}

#[test]
fn inspect_text() {
    let d = tmp("inspect_text");
    let o = rlxc(&["inspect", s(&matmul_model(&d))]);
    code(&o, 0);
    let out = stdout(&o);
    for want in ["ONNX", "IR version 8", "rlxc-test", "ai.onnx 17", "x  f32[1,2]", "y  f32[1,2]", "MatMul", "initializers: 1", "4 values, 16 bytes"] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
}

#[test]
fn inspect_json() {
    let d = tmp("inspect_json");
    let o = rlxc(&["inspect", "--json", s(&matmul_model(&d))]);
    code(&o, 0);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(j["format"], "onnx");
    assert_eq!(j["producer"], "rlxc-test");
    assert_eq!(j["opsets"]["ai.onnx"], 17);
    assert_eq!(j["inputs"][0]["name"], "x");
    assert_eq!(j["inputs"][0]["dtype"], "f32");
    assert_eq!(j["inputs"][0]["shape"], serde_json::json!([1, 2]));
    assert_eq!(j["outputs"][0]["name"], "y");
    assert_eq!(j["ops"]["MatMul"], 1);
    assert_eq!(j["param_count"], 4);
    assert_eq!(j["param_bytes"], 16);
}

#[test]
fn inspect_symbolic_dims() {
    let d = tmp("inspect_sym");
    let m = sym_model(&d);
    let o = rlxc(&["inspect", "--json", s(&m)]);
    code(&o, 0);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["inputs"][0]["shape"], serde_json::json!(["batch", 3]));
    let o = rlxc(&["inspect", "--json", "--dim", "batch=4", s(&m)]);
    code(&o, 0);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["inputs"][0]["shape"], serde_json::json!([4, 3]));
    let o = rlxc(&["inspect", s(&m)]);
    code(&o, 0);
    assert!(stdout(&o).contains("f32[batch,3]"), "{}", stdout(&o));
}

#[test]
fn inspect_hir_and_mir() {
    let d = tmp("inspect_ir");
    let m = add_model(&d);
    let o = rlxc(&["inspect", "--hir", s(&m)]);
    code(&o, 0);
    assert!(stdout(&o).contains("add"), "{}", stdout(&o));
    let o = rlxc(&["inspect", "--mir", s(&m)]);
    code(&o, 0);
    assert!(stdout(&o).contains("add"), "{}", stdout(&o));
}

#[test]
fn run_add_writes_outputs() {
    let d = tmp("run_add");
    let m = add_model(&d);
    let a = npy_f32(&d.join("a.npy"), &[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let b = npy_f32(&d.join("b.npy"), &[2, 3], &[10., 20., 30., 40., 50., 60.]);
    let out = d.join("out");
    let o = rlxc(&["run", s(&m), "--input", &format!("a={}", s(&a)), "--input", &format!("b={}", s(&b)), "-o", s(&out)]);
    code(&o, 0);
    // "out/sum" is written as out_sum.npy.
    let r = rlxc::npy::read(&out.join("out_sum.npy")).unwrap();
    assert_eq!(r.dtype, DType::F32);
    assert_eq!(r.shape, vec![2, 3]);
    assert_eq!(r.to_f64_vec(), vec![11., 22., 33., 44., 55., 66.]);
    let text = stdout(&o);
    assert!(text.contains("out/sum") && text.contains("f32[2,3]"), "{text}");
    assert!(text.contains("min 11") && text.contains("max 66") && text.contains("mean 38.5"), "{text}");
    assert!(text.contains("ran on interp"), "{text}");
}

#[test]
fn run_matmul_with_initializer() {
    let d = tmp("run_matmul");
    let m = matmul_model(&d);
    let x = npy_f32(&d.join("x.npy"), &[1, 2], &[1., 1.]);
    let o = rlxc(&["run", s(&m), "-i", &format!("x={}", s(&x)), "-o", s(&d)]);
    code(&o, 0);
    let y = rlxc::npy::read(&d.join("y.npy")).unwrap();
    assert_eq!(y.shape, vec![1, 2]);
    assert_eq!(y.to_f64_vec(), vec![4., 6.]);
}

#[test]
fn run_binds_symbolic_dims_from_inputs() {
    let d = tmp("run_sym");
    let m = sym_model(&d);
    let a = npy_f32(&d.join("a.npy"), &[4, 3], &(0..12).map(|i| i as f32).collect::<Vec<_>>());
    let b = npy_f32(&d.join("b.npy"), &[4, 3], &[1.; 12]);
    let o = rlxc(&["run", s(&m), "-i", &format!("a={}", s(&a)), "-i", &format!("b={}", s(&b)), "-o", s(&d)]);
    code(&o, 0);
    let r = rlxc::npy::read(&d.join("out.npy")).unwrap();
    assert_eq!(r.shape, vec![4, 3]);
    assert_eq!(r.to_f64_vec(), (1..13).map(|i| i as f64).collect::<Vec<_>>());
    // Inputs that disagree on 'batch' are an error naming the dim.
    let b2 = npy_f32(&d.join("b2.npy"), &[2, 3], &[1.; 6]);
    let o = rlxc(&["run", s(&m), "-i", &format!("a={}", s(&a)), "-i", &format!("b={}", s(&b2)), "-o", s(&d)]);
    code(&o, 2);
    assert!(stderr(&o).contains("batch"), "{}", stderr(&o));
}

#[test]
fn run_input_mismatches_are_named() {
    let d = tmp("run_mismatch");
    let m = add_model(&d);
    let a = npy_f32(&d.join("a.npy"), &[2, 3], &[0.; 6]);
    let ai = d.join("ai.npy");
    rlxc::npy::write(&ai, &ConstData::from_i64(vec![2, 3], &[0; 6])).unwrap();
    let a1 = npy_f32(&d.join("a1.npy"), &[6], &[0.; 6]);
    let out = d.join("o");
    let ia = format!("a={}", s(&a));
    // Missing b.
    let o = rlxc(&["run", s(&m), "-i", &ia, "-o", s(&out)]);
    code(&o, 2);
    assert!(stderr(&o).contains("missing --input b="), "{}", stderr(&o));
    // Extra c.
    let o = rlxc(&["run", s(&m), "-i", &ia, "-i", &format!("b={}", s(&a)), "-i", &format!("c={}", s(&a)), "-o", s(&out)]);
    code(&o, 2);
    assert!(stderr(&o).contains("no input named 'c'"), "{}", stderr(&o));
    // Wrong dtype: names the input and both types.
    let o = rlxc(&["run", s(&m), "-i", &ia, "-i", &format!("b={}", s(&ai)), "-o", s(&out)]);
    code(&o, 2);
    let e = stderr(&o);
    assert!(e.contains("input 'b'") && e.contains("f32[2,3]") && e.contains("i64[2,3]"), "{e}");
    // Wrong rank.
    let o = rlxc(&["run", s(&m), "-i", &ia, "-i", &format!("b={}", s(&a1)), "-o", s(&out)]);
    code(&o, 2);
    let e = stderr(&o);
    assert!(e.contains("input 'b'") && e.contains("f32[2,3]") && e.contains("f32[6]"), "{e}");
}

#[test]
fn usage_errors_exit_2() {
    let d = tmp("usage");
    let m = add_model(&d);
    let a = npy_f32(&d.join("a.npy"), &[2, 3], &[0.; 6]);
    let ia = format!("a={}", s(&a));
    let ib = format!("b={}", s(&a));
    // Unknown target, for run and check; the message lists the available ones.
    let o = rlxc(&["run", s(&m), "-i", &ia, "-i", &ib, "--target", "tpu"]);
    code(&o, 2);
    assert!(stderr(&o).contains("interp"), "{}", stderr(&o));
    let o = rlxc(&["check", s(&m), "--target", "tpu"]);
    code(&o, 2);
    assert!(stderr(&o).contains("interp"), "{}", stderr(&o));
    // Bad --dim syntax.
    for bad in ["batch", "batch=x", "=3", "batch=-1"] {
        let o = rlxc(&["inspect", s(&m), "--dim", bad]);
        code(&o, 2);
        assert!(stderr(&o).contains("NAME=N"), "{}", stderr(&o));
    }
    // Bad --input syntax.
    let o = rlxc(&["run", s(&m), "-i", "a.npy"]);
    code(&o, 2);
    assert!(stderr(&o).contains("NAME=FILE.npy"), "{}", stderr(&o));
}

#[test]
fn check_interp() {
    let d = tmp("check");
    let m = matmul_model(&d);
    let o = rlxc(&["check", s(&m), "--target", "interp"]);
    code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("mm") && out.contains("matmul") && out.contains("native"), "{out}");
    assert!(out.contains("0 unsupported"), "{out}");
    let o = rlxc(&["check", s(&m), "--target", "interp", "--json"]);
    code(&o, 0);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["target"], "interp");
    assert_eq!(j["legal"], true);
    assert_eq!(j["entries"][0]["node"], "mm");
    assert_eq!(j["entries"][0]["resolution"], "native");
}

#[test]
fn garbage_model_exits_1() {
    let d = tmp("garbage");
    let p = d.join("junk.onnx");
    std::fs::write(&p, b"\xff\xfe this is not a protobuf \x00\x01\x02\xff\xff\xff\xff\xff").unwrap();
    for args in [vec!["inspect", s(&p)], vec!["check", s(&p), "--target", "interp"], vec!["inspect", "--hir", s(&p)]] {
        let o = rlxc(&args);
        code(&o, 1);
        let e = stderr(&o);
        assert!(e.starts_with("error:") && e.contains("junk.onnx"), "{e}");
        assert!(!e.contains("panicked"), "{e}");
    }
    let o = rlxc(&["inspect", s(&d.join("does-not-exist.onnx"))]);
    code(&o, 1);
}

#[test]
fn unsupported_op_exits_1_naming_the_node() {
    let d = tmp("unsupported");
    let p = d.join("mystery.onnx");
    write_model(
        &p,
        vec![node("mystery_node", "NoSuchOp", &["x"], &["y"])],
        vec![vi("x", DataType::Float, &["2"])],
        vec![vi("y", DataType::Float, &["2"])],
        vec![],
    );
    let x = npy_f32(&d.join("x.npy"), &[2], &[1., 2.]);
    for args in [
        vec!["check", s(&p), "--target", "interp"],
        vec!["inspect", "--mir", s(&p)],
        vec!["run", s(&p), "-i", &format!("x={}", s(&x)), "-o", s(&d)],
    ] {
        let o = rlxc(&args);
        code(&o, 1);
        let e = stderr(&o);
        assert!(e.starts_with("error:") && e.contains("mystery_node") && e.contains("NoSuchOp"), "{e}");
    }
    // inspect (summary only) still works: it reads the protobuf without importing.
    let o = rlxc(&["inspect", s(&p)]);
    code(&o, 0);
    assert!(stdout(&o).contains("NoSuchOp"));
}

#[test]
fn bad_npy_inputs_are_rejected_clearly() {
    let d = tmp("bad_npy");
    let m = add_model(&d);
    let a = npy_f32(&d.join("a.npy"), &[2, 3], &[0.; 6]);
    let bytes = std::fs::read(&a).unwrap();
    let t = d.join("trunc.npy");
    std::fs::write(&t, &bytes[..bytes.len() - 5]).unwrap();
    let err = rlxc::npy::read(&t).unwrap_err();
    assert!(err.contains("truncated") && err.contains("trunc.npy"), "{err}");
    let o = rlxc(&["run", s(&m), "-i", &format!("a={}", s(&a)), "-i", &format!("b={}", s(&t)), "-o", s(&d)]);
    code(&o, 2);
    let e = stderr(&o);
    assert!(e.contains("input 'b'") && e.contains("truncated"), "{e}");
    // Fortran order.
    let f = d.join("fortran.npy");
    let mut fb = bytes.clone();
    let at = fb.windows(5).position(|w| w == b"False").unwrap();
    fb[at..at + 5].copy_from_slice(b"True ");
    std::fs::write(&f, &fb).unwrap();
    let err = rlxc::npy::read(&f).unwrap_err();
    assert!(err.contains("fortran_order"), "{err}");
    // Not a .npy at all; a missing file.
    let g = d.join("garbage.npy");
    std::fs::write(&g, b"hello").unwrap();
    assert!(rlxc::npy::read(&g).unwrap_err().contains("not a .npy"));
    assert!(rlxc::npy::read(&d.join("nope.npy")).unwrap_err().contains("cannot read"));
}

/// A tiny BERT checkpoint folder (hidden 4, 1 layer, 2 heads) with deterministic weights; the
/// LayerNorms have gamma 1 and beta 0.
fn tiny_bert(dir: &Path) -> PathBuf {
    let m = dir.join("tiny-bert");
    std::fs::create_dir_all(&m).unwrap();
    std::fs::write(
        m.join("config.json"),
        r#"{"hidden_size": 4, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8,
            "max_position_embeddings": 8, "type_vocab_size": 2, "vocab_size": 16, "hidden_act": "gelu"}"#,
    )
    .unwrap();
    let (h, f) = (4usize, 8usize);
    let mut t: Vec<(String, Vec<usize>)> = vec![
        ("embeddings.word_embeddings.weight".into(), vec![16, h]),
        ("embeddings.position_embeddings.weight".into(), vec![8, h]),
        ("embeddings.token_type_embeddings.weight".into(), vec![2, h]),
        ("embeddings.LayerNorm.weight".into(), vec![h]),
        ("embeddings.LayerNorm.bias".into(), vec![h]),
    ];
    for (m, o, i) in [
        ("attention.self.query", h, h),
        ("attention.self.key", h, h),
        ("attention.self.value", h, h),
        ("attention.output.dense", h, h),
        ("intermediate.dense", f, h),
        ("output.dense", h, f),
    ] {
        t.push((format!("encoder.layer.0.{m}.weight"), vec![o, i]));
        t.push((format!("encoder.layer.0.{m}.bias"), vec![o]));
    }
    for m in ["attention.output.LayerNorm", "output.LayerNorm"] {
        t.push((format!("encoder.layer.0.{m}.weight"), vec![h]));
        t.push((format!("encoder.layer.0.{m}.bias"), vec![h]));
    }
    // safetensors: u64 header length, JSON header (space-padded to 8 bytes), then the data.
    let (mut header, mut data) = (Vec::new(), Vec::<u8>::new());
    for (k, (name, shape)) in t.iter().enumerate() {
        let n: usize = shape.iter().product();
        let start = data.len();
        for i in 0..n {
            let x = if name.contains("LayerNorm.weight") {
                1.0
            } else if name.contains("LayerNorm.bias") {
                0.0
            } else {
                ((k * 31 + i * 7) as f32).sin() * 0.5
            };
            data.extend_from_slice(&x.to_le_bytes());
        }
        header.push(format!(r#""{name}":{{"dtype":"F32","shape":{shape:?},"data_offsets":[{start},{}]}}"#, data.len()));
    }
    let mut header = format!("{{{}}}", header.join(","));
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&data);
    std::fs::write(m.join("model.safetensors"), bytes).unwrap();
    m
}

#[test]
fn safetensors_folder_inspect_and_run() {
    let d = tmp("bert");
    let m = tiny_bert(&d);
    let o = rlxc(&["inspect", "--json", s(&m)]);
    code(&o, 0);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["format"], "safetensors");
    assert_eq!(j["ops_level"], "hir");
    assert_eq!(j["inputs"][0]["name"], "input_ids");
    assert_eq!(j["inputs"][0]["shape"], serde_json::json!(["batch", "sequence"]));
    assert_eq!(j["outputs"][0]["name"], "last_hidden_state");
    assert_eq!(j["ops"]["attention"], 1);
    // 284 checkpoint values (16*4 + 8*4 + 2*4 + 4 + 4 + 4*(4*4+4) + (8*4+8) + (4*8+4) + 4*4), plus
    // whatever small constants the builder adds itself.
    let count = j["param_count"].as_u64().unwrap();
    assert!((284..300).contains(&count), "{count}");
    assert!(j["param_bytes"].as_u64().unwrap() >= 284 * 4);
    let o = rlxc(&["inspect", s(&m)]);
    code(&o, 0);
    assert!(stdout(&o).contains("safetensors") && stdout(&o).contains("i64[batch,sequence]"), "{}", stdout(&o));

    let ids = d.join("ids.npy");
    rlxc::npy::write(&ids, &ConstData::from_i64(vec![1, 3], &[1, 5, 2])).unwrap();
    let mask = d.join("mask.npy");
    rlxc::npy::write(&mask, &ConstData::from_i64(vec![1, 3], &[1, 1, 1])).unwrap();
    let tt = d.join("tt.npy");
    rlxc::npy::write(&tt, &ConstData::from_i64(vec![1, 3], &[0, 0, 0])).unwrap();
    let o = rlxc(&[
        "run",
        s(&m),
        "-i",
        &format!("input_ids={}", s(&ids)),
        "-i",
        &format!("attention_mask={}", s(&mask)),
        "-i",
        &format!("token_type_ids={}", s(&tt)),
        "-o",
        s(&d),
    ]);
    code(&o, 0);
    let y = rlxc::npy::read(&d.join("last_hidden_state.npy")).unwrap();
    assert_eq!(y.shape, vec![1, 3, 4]);
    // The last op is a LayerNorm with gamma 1, beta 0: every token's features have mean 0, variance 1.
    let v = y.to_f64_vec();
    for tok in v.chunks(4) {
        let mean = tok.iter().sum::<f64>() / 4.0;
        let var = tok.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / 4.0;
        assert!(mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-3, "{tok:?}");
    }
    let o = rlxc(&["check", s(&m), "--target", "interp"]);
    code(&o, 0);
}

/// Runs `args` with stdout a pipe whose reading end is already closed (`rlxc … | head -0`): the
/// first print meets a closed pipe. The command must end quietly — killed by SIGPIPE or exit 0, as
/// cat and grep do — never with a panic or a backtrace.
fn run_into_closed_pipe(args: &[&str]) -> std::process::ExitStatus {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_rlxc"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run rlxc");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait for rlxc");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{args:?} into a closed pipe:\n{err}");
    out.status
}

#[test]
fn closed_pipe_ends_every_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let d = tmp("pipe");
    let m = add_model(&d);
    let a = npy_f32(&d.join("a.npy"), &[2, 3], &[1.; 6]);
    let (ia, ib) = (format!("a={}", s(&a)), format!("b={}", s(&a)));
    let out = d.join("o");
    let cmds: Vec<Vec<&str>> = vec![
        vec!["inspect", s(&m)],
        vec!["inspect", s(&m), "--json"],
        vec!["inspect", s(&m), "--mir"],
        vec!["run", s(&m), "-i", &ia, "-i", &ib, "-o", s(&out)],
        vec!["check", s(&m), "--target", "x86_64"],
        vec!["compile", s(&m), "--target", "x86_64", "-o", s(&out)],
        vec!["coverage"],
        vec!["--help"],
    ];
    for c in &cmds {
        let st = run_into_closed_pipe(c);
        assert!(st.success() || st.signal() == Some(libc_sigpipe()), "{c:?}: {st:?}");
    }
    // A real pipeline, as a user types it.
    let sh = format!("set -o pipefail; {} inspect {} | head -1", env!("CARGO_BIN_EXE_rlxc"), s(&m));
    let o = Command::new("bash").args(["-c", &sh]).output().unwrap();
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 1, "{}", stdout(&o));
}

fn libc_sigpipe() -> i32 {
    13 // SIGPIPE on Linux
}

#[test]
fn cpu_names_are_checked() {
    let d = tmp("cpu");
    let m = add_model(&d);
    let out = d.join("o");
    for (target, cpu, hint) in [("x86_64", "foo", "not a known x86-64 processor"), ("x86_64", "cortex-a72", "not a known x86-64"), ("aarch64", "foo", "not a known aarch64"), ("aarch64", "znver3", "not a known aarch64"), ("x86_64", "znver33", "did you mean znver3")] {
        let o = rlxc(&["compile", s(&m), "--target", target, "--cpu", cpu, "-o", s(&out)]);
        code(&o, 2);
        assert!(stderr(&o).contains(hint), "{target} --cpu {cpu}: {}", stderr(&o));
        assert!(!stderr(&o).contains("LLVM ERROR") && !stderr(&o).contains("not a recognized processor"), "{}", stderr(&o));
        assert!(!out.exists(), "nothing is written on a usage error");
    }
    // --cpu on a target without a CPU choice.
    let o = rlxc(&["compile", s(&m), "--target", "vulkan", "--cpu", "znver3", "-o", s(&out)]);
    code(&o, 2);
    assert!(stderr(&o).contains("--cpu applies to CPU targets"), "{}", stderr(&o));
    // Known names compile, and the manifest records them.
    for (target, cpu) in [("aarch64", "cortex-a72"), ("x86_64", "znver3")] {
        let o = rlxc(&["compile", s(&m), "--target", target, "--cpu", cpu, "-o", s(&out)]);
        code(&o, 0);
        let manifest = std::fs::read_to_string(out.join("add.json")).unwrap();
        assert!(manifest.contains(&format!("\"cpu\": \"{cpu}\"")), "{manifest}");
    }
}

/// The CPU list `--cpu` accepts is the installed LLVM's (`llc-19 -mcpu=help`), name for name.
#[test]
fn cpu_list_matches_llvm() {
    for (arch, ours) in [("x86-64", rlxc::cpus::X86_64), ("aarch64", rlxc::cpus::AARCH64)] {
        let ll = std::env::temp_dir().join(format!("rlxc-cpus-{}.ll", std::process::id()));
        std::fs::write(&ll, "").unwrap();
        let o = Command::new("llc-19").args([&format!("-march={arch}"), "-mcpu=help", s(&ll), "-o", "/dev/null"]).output().expect("llc-19 (make setup installs llvm-19)");
        let _ = std::fs::remove_file(&ll);
        let text = format!("{}{}", stdout(&o), stderr(&o));
        let llvm: Vec<&str> = text
            .split("Available CPUs for this target:")
            .nth(1)
            .and_then(|t| t.split("Available features").next())
            .expect("llc -mcpu=help lists CPUs")
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(llvm, ours.to_vec(), "{arch}: regenerate compiler/rlxc/src/cpus.rs from llc-19 -mcpu=help");
    }
}

#[test]
fn dim_mistakes_are_usage_errors() {
    let d = tmp("dims");
    let sym = sym_model(&d);
    let fixed = add_model(&d);
    let out = d.join("o");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["compile", s(&sym), "--dim", "btch=1"], "no dim named 'btch' (did you mean 'batch'?)"),
        (vec!["compile", s(&sym), "--dim", "batch=1", "--dim", "seq=5"], "no dim named 'seq'"),
        (vec!["compile", s(&fixed), "--dim", "batch=1"], "input shapes are all fixed"),
        (vec!["compile", s(&sym), "--batch", "2", "--dim", "batch=3"], "--batch 2 and --dim batch=3 disagree"),
        (vec!["compile", s(&sym), "--dim", "batch=0"], "at least 1"),
        (vec!["compile", s(&sym), "--batch", "0"], "at least 1"),
        (vec!["compile", s(&sym), "--batch", "99999999999"], "at most 2147483647"),
        (vec!["compile", s(&fixed), "--batch", "2"], "has no batch dim"),
        (vec!["check", s(&sym), "--target", "x86_64", "--dim", "btch=1"], "no dim named 'btch'"),
        (vec!["inspect", s(&sym), "--dim", "btch=1"], "no dim named 'btch'"),
    ];
    for (mut args, want) in cases {
        if args[0] == "compile" {
            args.extend(["--target", "x86_64", "-o", s(&out)]);
        }
        let o = rlxc(&args);
        code(&o, 2);
        assert!(stderr(&o).contains(want), "{args:?}: want '{want}' in:\n{}", stderr(&o));
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
    // --dim on run is checked against the model too.
    let a = npy_f32(&d.join("a.npy"), &[2, 3], &[1.; 6]);
    let (ia, ib) = (format!("a={}", s(&a)), format!("b={}", s(&a)));
    let o = rlxc(&["run", s(&sym), "-i", &ia, "-i", &ib, "--dim", "btch=2", "-o", s(&out)]);
    code(&o, 2);
    assert!(stderr(&o).contains("no dim named 'btch'"), "{}", stderr(&o));
    // The right spelling still works.
    let o = rlxc(&["compile", s(&sym), "--target", "x86_64", "--batch", "2", "-o", s(&out)]);
    code(&o, 0);
}

#[test]
fn bad_calibration_data_is_refused() {
    let d = tmp("calib");
    let m = matmul_model(&d);
    let out = d.join("o");
    let nan = npy_f32(&d.join("nan.npy"), &[3, 1, 2], &[0.5, 1.0, f32::NAN, 2.0, 1.0, 0.0]);
    let zeros = npy_f32(&d.join("zeros.npy"), &[3, 1, 2], &[0.0; 6]);
    let inf = npy_f32(&d.join("inf.npy"), &[2, 1, 2], &[0.5, f32::INFINITY, 1.0, 0.0]);
    for target in ["cortex-m4", "verilog"] {
        for (f, want) in [(&nan, "NaN at sample 1, element 0"), (&inf, "inf at sample 0, element 1"), (&zeros, "0 everywhere")] {
            let o = rlxc(&["compile", s(&m), "--target", target, "--calibrate", s(f), "-o", s(&out)]);
            code(&o, 2);
            assert!(stderr(&o).contains(want), "{target} {}: want '{want}' in:\n{}", f.display(), stderr(&o));
            assert!(!out.exists());
        }
    }
}

#[test]
fn output_folder_that_is_a_file_exits_2_on_every_target() {
    let d = tmp("outfile");
    let m = matmul_model(&d);
    let calib = npy_f32(&d.join("c.npy"), &[4, 1, 2], &[0.5, -1.0, 0.25, 2.0, -0.75, 1.5, 1.0, 0.0]);
    let file = d.join("a-file");
    std::fs::write(&file, b"not a folder").unwrap();
    let runs: Vec<Vec<&str>> = vec![
        vec!["compile", s(&m), "--target", "x86_64"],
        vec!["compile", s(&m), "--target", "cortex-m4"],
        vec!["compile", s(&m), "--target", "cortex-m4", "--calibrate", s(&calib)],
        vec!["compile", s(&m), "--target", "verilog", "--calibrate", s(&calib)],
        vec!["compile", s(&m), "--target", "vulkan"],
        vec!["compile", s(&m), "--target", "webgpu"],
    ];
    for mut args in runs {
        args.extend(["-o", s(&file)]);
        let o = rlxc(&args);
        code(&o, 2);
        assert!(stderr(&o).contains("cannot create the output folder"), "{args:?}: {}", stderr(&o));
    }
    let x = npy_f32(&d.join("x.npy"), &[1, 2], &[1.0, 2.0]);
    let o = rlxc(&["run", s(&m), "-i", &format!("x={}", s(&x)), "-o", s(&file)]);
    code(&o, 2);
    assert!(stderr(&o).contains("cannot create the output folder"), "{}", stderr(&o));
}

/// Two outputs; the second cannot be written (a folder stands at its path): `rlxc run` must write
/// neither, as `compile` writes all of an artifact or nothing.
#[test]
fn run_writes_outputs_all_or_nothing() {
    let d = tmp("allornothing");
    let p = d.join("two.onnx");
    write_model(
        &p,
        vec![node("n0", "Add", &["a", "a"], &["first"]), node("n1", "Mul", &["a", "a"], &["second"])],
        vec![vi("a", DataType::Float, &["2"])],
        vec![vi("first", DataType::Float, &["2"]), vi("second", DataType::Float, &["2"])],
        vec![],
    );
    let a = npy_f32(&d.join("a.npy"), &[2], &[1.0, 3.0]);
    let out = d.join("o");
    std::fs::create_dir_all(out.join("second.npy")).unwrap();
    let o = rlxc(&["run", s(&p), "-i", &format!("a={}", s(&a)), "-o", s(&out)]);
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!out.join("first.npy").exists(), "first.npy was written although second.npy failed");
    let left: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 1, "only the blocking folder remains: {left:?}");
    std::fs::remove_dir(out.join("second.npy")).unwrap();
    let o = rlxc(&["run", s(&p), "-i", &format!("a={}", s(&a)), "-o", s(&out)]);
    code(&o, 0);
    assert!(out.join("first.npy").exists() && out.join("second.npy").exists());
}
