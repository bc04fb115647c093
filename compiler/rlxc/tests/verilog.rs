//! `--target verilog`, end to end: the MNIST MLP of `tests/mcu/train_mnist.py` (the Cortex-M fixtures,
//! cached under build/mcu-test/data) is compiled to Verilog at two `--macs-per-cycle` settings, linted
//! with `verilator --lint-only -Wall`, and simulated with Icarus Verilog (`iverilog -g2005`, `vvp`)
//! by the generated testbench: the design's int8 outputs must equal the host interpreter's run of the
//! same quantized MIR, bit for bit — 200 MNIST test images at 8 MACs per cycle, 50 at 3 (padded lanes)
//! with random valid/ready stalls (Icarus runs ~50k cycles/s here; all 1,000 images take ~3 minutes,
//! so `FULL=1 tests/verilog/report.sh` runs them) — and the measured cycles per inference must equal
//! the manifest's. Also: the calibration vectors rlxc writes for the testbench, random
//! valid/ready stalls, determinism, and the errors for a CNN (conv is not mapped yet) and a missing
//! --calibrate. Synthesis figures are not measured here (slow): `tests/verilog/report.sh`.
//!
//! Needs the venv (`$RLX_PY` or `.venv/bin/python`, with mlxtend), iverilog and verilator
//! (`make setup`); a missing one fails the test, it never skips.

mod common;
use common::{python, repo};
use rlx_ir::{Blob, ConstData, DType, MirOp};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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

/// The Cortex-M test's training cache (same script, same stamp): trains once per script version.
fn data() -> PathBuf {
    static DATA: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DATA.get_or_init(|| {
        let dir = repo().join("build/mcu-test/data");
        let script = repo().join("tests/mcu/train_mnist.py");
        let stamp = dir.join("script.stamp");
        let src = std::fs::read(&script).unwrap();
        if std::fs::read(&stamp).ok().as_deref() != Some(&src[..])
            || !dir.join("meta.json").exists()
        {
            ok(Command::new(python()).arg(&script).arg("--out").arg(&dir));
            std::fs::write(&stamp, &src).unwrap();
        }
        dir
    })
    .clone()
}

fn npy(p: &Path) -> ConstData {
    rlxc::npy::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn rlxc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rlxc"))
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

/// The 1,000 test images quantized with the `quantize` op, and the interpreter's int8 outputs.
fn host_reference(model: &str) -> (Vec<u8>, Vec<u8>) {
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
    let scale = ConstData::from_f32(vec![], &[qi.scale]);
    let zp = ConstData::scalar(DType::I8, qi.zero_point as f64);
    let xq = rlxc::pipeline::eval_op(&MirOp::Quantize { axis: 0 }, &[x, scale, zp])
        .unwrap()
        .remove(0);
    let images = xq.data.bytes().to_vec();
    let per = images.len() / n;
    let in_shape = q.mir.ty(q.mir.inputs[0]).shape.as_fixed().unwrap();
    let mut host = Vec::new();
    for i in 0..n {
        let input = ConstData {
            dtype: DType::I8,
            shape: in_shape.clone(),
            data: Blob::from_vec(images[i * per..(i + 1) * per].to_vec()),
        };
        host.extend_from_slice(
            rlx_interp::run(&q.mir, &[input])
                .unwrap()
                .remove(0)
                .data
                .bytes(),
        );
    }
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

/// Builds and runs the generated testbench; returns its PASS line.
fn simulate(dir: &Path, model: &str, args: &[&str]) -> String {
    ok(Command::new("iverilog")
        .args(["-g2005", "-Wall", "-o", "tb.vvp"])
        .arg(format!("{model}_tb.v"))
        .arg(format!("{model}.v"))
        .current_dir(dir));
    let out = ok(Command::new("timeout")
        .args(["300", "vvp", "-n", "tb.vvp"])
        .args(args)
        .current_dir(dir));
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
    let (images, host) = host_reference("mlp");
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
        std::fs::write(
            dir.join("test_in.mem"),
            rlxc::pipeline::mem_hex(&images[..vectors * 784]),
        )
        .unwrap();
        std::fs::write(
            dir.join("test_expected.mem"),
            rlxc::pipeline::mem_hex(&host[..vectors * 10]),
        )
        .unwrap();
        let mut args = vec![
            format!("+vectors={vectors}"),
            "+in=test_in.mem".into(),
            "+expected=test_expected.mem".into(),
        ];
        if stall {
            args.push("+stall".into());
        }
        let line = simulate(
            &dir,
            "mlp",
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        assert!(
            line.contains(&format!("{vectors}/{vectors} vectors bit-exact")),
            "{line}"
        );
        let cycles = m["cycles_per_inference"].as_u64().unwrap();
        assert!(
            line.contains(&format!("({cycles} without stalls)")),
            "{line}"
        );
        if !stall {
            assert_eq!(cycles_of(&line), cycles, "{line}");
        }
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
    // The CNN: conv / max pool are not mapped to the datapath yet; every such node is named.
    let o = rlxc()
        .arg("compile")
        .arg(d.join("cnn.onnx"))
        .args(["--target", "verilog", "--calibrate"])
        .arg(d.join("calib_cnn.npy"))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("conv") && err.contains("node '"), "{err}");
    assert!(!out.join("cnn.v").exists());
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
