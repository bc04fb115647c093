//! Training steps end to end: the MNIST MLP 784-128-10 (tests/train/mnist_reference.py's untrained
//! ONNX model) imported, lowered, turned into one training-step graph by `rlx_opt::train_step`
//! (forward, softmax cross-entropy, backward, SGD with momentum 0.9, lr 0.05) and run for 3 epochs of
//! 31 batches of 128 — on the reference interpreter and compiled for the host (dlopen) — against a
//! numpy implementation of the same training (same initial parameters, same batches in order, same
//! hyperparameters, float32). Every step's loss must match numpy's (relative 1e-3) and the test
//! accuracy after training must be at least numpy's. And `rlxc compile --train` writes the step's
//! resident artifact beside the model's, which a C program (tests/native/train_steps.c) loads and runs
//! for N steps against the interpreter's N steps.

mod common;
use common::mnist_train::{csv_rows, data};
use common::{ok, repo};
use rlx_ir::{Blob, ConstData, DType, Mir};
use rlx_opt::{train_step, Loss, Optimizer, TrainOptions, TrainStep};
use rlxc::cli::Target;
use rlxc::pipeline::Timings;
use rlxc::targets::{self, Request};
use std::process::Command;

const BATCH: usize = 128;

fn load(name: &str, dtype: DType, shape: &[usize]) -> ConstData {
    let bytes = std::fs::read(data().join(name)).unwrap();
    ConstData::new(dtype, shape.to_vec(), Blob::from_vec(bytes)).unwrap()
}

fn f64s(name: &str) -> Vec<f64> {
    std::fs::read(data().join(name)).unwrap().chunks(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Rows `from..from+n` of a row-major tensor.
fn rows(c: &ConstData, from: usize, n: usize) -> ConstData {
    let per = c.data.len() / c.shape[0];
    let mut shape = c.shape.clone();
    shape[0] = n;
    ConstData::new(c.dtype, shape, Blob::from_vec(c.data.bytes()[from * per..(from + n) * per].to_vec())).unwrap()
}

/// The untrained MLP as MIR with its batch fixed to `batch`.
fn mlp(batch: u64) -> Mir {
    let opts = rlx_import::ImportOptions { dims: [("batch".to_string(), batch)].into(), ..Default::default() };
    let hir = rlx_import::load_onnx(&data().join("mlp_init.onnx"), &opts).unwrap();
    rlx_opt::lower(&hir).unwrap()
}

fn step() -> TrainStep {
    let opts = TrainOptions { loss: Loss::CrossEntropy, optimizer: Optimizer::Sgd { lr: 0.05, momentum: 0.9 }, output: 0, learn_scales: false };
    let s = train_step(&mlp(BATCH as u64), &opts).unwrap();
    assert_eq!(s.params.iter().map(|p| p.0.as_str()).collect::<Vec<_>>(), ["w1", "b1", "w2", "b2"]);
    assert_eq!(s.data, 2);
    s
}

/// Test accuracy of the MLP with parameters `p` (w1, b1, w2, b2), on the interpreter.
fn accuracy(p: &[ConstData]) -> f64 {
    let (x, y) = (load("test_x.bin", DType::F32, &[1000, 784]), load("test_y.bin", DType::I64, &[1000]));
    let mut g = mlp(1000);
    for (k, c) in p.iter().enumerate() {
        let v = g.values.iter().position(|v| v.name.as_deref() == Some(["w1", "b1", "w2", "b2"][k])).unwrap();
        g.values[v].def = rlx_ir::Def::Const(c.clone());
    }
    let z = rlx_interp::run(&g, &[x]).unwrap().remove(0).to_f64_vec();
    let labels = y.to_i64_vec();
    let hits = (0..1000)
        .filter(|&i| {
            let row = &z[i * 10..(i + 1) * 10];
            (0..10).fold(0, |b, k| if row[k] > row[b] { k } else { b }) as i64 == labels[i]
        })
        .count();
    hits as f64 / 1000.0
}

/// Trains with `run_step` (inputs → outputs of one step); returns every loss, the test accuracy
/// after each epoch and the images per second of the steps.
fn train(s: &TrainStep, mut run_step: impl FnMut(Vec<ConstData>) -> Vec<ConstData>, epochs: usize) -> (Vec<f64>, Vec<f64>, f64) {
    let (xtr, ytr) = (load("train_x.bin", DType::F32, &[4000, 784]), load("train_y.bin", DType::I64, &[4000]));
    let mut state = s.initial();
    let (mut losses, mut accs, mut secs) = (Vec::new(), Vec::new(), 0.0);
    for _ in 0..epochs {
        for i in 0..4000 / BATCH {
            let mut ins = vec![rows(&xtr, i * BATCH, BATCH), rows(&ytr, i * BATCH, BATCH)];
            ins.extend(state.iter().cloned());
            let t = std::time::Instant::now();
            let mut out = run_step(ins);
            secs += t.elapsed().as_secs_f64();
            losses.push(out[0].get_f64(0));
            state = out.split_off(1);
        }
        accs.push(accuracy(&state[..4]));
    }
    (losses.clone(), accs, (losses.len() * BATCH) as f64 / secs)
}

fn compare(what: &str, losses: &[f64], accs: &[f64], img_s: f64) {
    let (np_losses, np_acc) = (f64s("losses.bin"), f64s("accuracy.bin"));
    assert_eq!(losses.len(), np_losses.len());
    let worst = losses.iter().zip(&np_losses).map(|(a, b)| (a - b).abs() / (1.0 + b.abs())).fold(0.0, f64::max);
    eprintln!(
        "{what}: {} steps, {img_s:.0} img/s; loss {:.4} → {:.4} (numpy {:.4} → {:.4}), worst relative loss difference {worst:.1e}; test accuracy per epoch {accs:?} (numpy {np_acc:?})",
        losses.len(),
        losses[0],
        losses[losses.len() - 1],
        np_losses[0],
        np_losses[np_losses.len() - 1]
    );
    assert!(worst < 1e-3, "{what}: losses diverge from numpy's (worst relative difference {worst})");
    let n = np_acc.len();
    assert!(accs[n - 1] >= np_acc[n - 1], "{what}: test accuracy {} below numpy's {}", accs[n - 1], np_acc[n - 1]);
}

#[test]
fn mnist_training_step_on_the_interpreter_matches_numpy() {
    let s = step();
    let epochs = f64s("accuracy.bin").len();
    let (losses, accs, img_s) = train(&s, |ins| rlx_interp::run(&s.graph, &ins).unwrap(), epochs);
    compare("interpreter", &losses, &accs, img_s);
}

#[test]
fn mnist_training_step_compiled_for_the_host_matches_numpy() {
    let s = step();
    let mut session = targets::load(Target::Host, &s.graph, &Request::named("mnist_train_step"), &mut Timings::default()).unwrap();
    let epochs = f64s("accuracy.bin").len();
    let (losses, accs, img_s) = train(&s, |ins| session.run(&[ins]).unwrap().remove(0), epochs);
    compare("host (compiled)", &losses, &accs, img_s);
}

#[test]
fn compile_train_writes_the_step_beside_the_model() {
    let out = std::env::temp_dir().join(format!("rlxc-train-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let rlxc = env!("CARGO_BIN_EXE_rlxc");
    let model = data().join("mlp_init.onnx");
    let args = ["--train", "--loss", "cross-entropy", "--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.05", "--batch", "128", "--name", "mnist"];
    ok(Command::new(rlxc).arg("compile").arg(&model).args(args).arg("-o").arg(&out));
    for f in ["mnist.o", "mnist.h", "mnist.json", "mnist_train_step.o", "mnist_train_step.h", "mnist_train_step.rs", "mnist_train_step.json", "mnist_train_step.init.bin"] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let h = std::fs::read_to_string(out.join("mnist_train_step.h")).unwrap();
    assert!(h.contains("int mnist_train_step_step(void *arena, void *state,") && h.contains("#define mnist_train_step_STATE_0_NAME \"w1\""), "{h}");
    let r = std::fs::read_to_string(out.join("mnist_train_step.rs")).unwrap();
    assert!(r.contains("pub const STATE_TENSORS: [(rlx_rt::TensorSpec, usize); 8]") && r.contains("name: \"w1.velocity\""), "{r}");
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("mnist_train_step.json")).unwrap()).unwrap();
    let t = &m["train"];
    assert_eq!(t["parameters"], serde_json::json!(["w1", "b1", "w2", "b2"]));
    assert_eq!(t["state"], serde_json::json!(["w1.velocity", "b1.velocity", "w2.velocity", "b2.velocity"]));
    assert_eq!(t["data_inputs"], 2);
    assert_eq!(m["entry"], "mnist_train_step_step");
    assert_eq!((m["inputs"].as_array().unwrap().len(), m["outputs"].as_array().unwrap().len()), (2, 1));
    // The initial state image: each parameter as the model has it at its offset, zero velocities.
    let init = std::fs::read(out.join("mnist_train_step.init.bin")).unwrap();
    assert_eq!(init.len() as u64, m["state"]["bytes"].as_u64().unwrap());
    let tensors = m["state"]["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 8);
    for (k, tm) in tensors.iter().enumerate() {
        let (name, off) = (tm["name"].as_str().unwrap(), tm["offset"].as_u64().unwrap() as usize);
        let p = std::fs::read(data().join(format!("{}.bin", name.trim_end_matches(".velocity")))).unwrap();
        let got = &init[off..off + p.len()];
        if k < 4 {
            assert!(got == &p[..], "{name} at byte {off} is not the model's");
        } else {
            assert!(got.iter().all(|&b| b == 0), "{name} is not zero");
        }
        assert!(h.contains(&format!("#define mnist_train_step_STATE_{k}_OFFSET {off}\n")), "{name}");
    }
    // The same flags give the same bytes.
    let again = out.join("again");
    ok(Command::new(rlxc).arg("compile").arg(&model).args(args).arg("-o").arg(&again));
    for f in ["mnist_train_step.o", "mnist_train_step.json", "mnist_train_step.init.bin"] {
        assert_eq!(std::fs::read(out.join(f)).unwrap(), std::fs::read(again.join(f)).unwrap(), "{f} differs between runs");
    }
    // Bad flags are usage errors (exit 2), and --train with int8 quantization is refused.
    for (flags, says) in [
        (&["--train", "--lr=nan", "--batch", "128"][..], "--lr must be a finite number"),
        (&["--train", "--target", "cortex-m4", "--calibrate", "calib.npy", "--batch", "1"][..], "--train compiles a float training step"),
    ] {
        let bad = Command::new(rlxc).arg("compile").arg(&model).args(flags).arg("-o").arg(&out).output().unwrap();
        let err = String::from_utf8_lossy(&bad.stderr);
        assert!(bad.status.code() == Some(2) && err.contains(says), "{flags:?}: {:?} {err}", bad.status.code());
    }
    let bad = Command::new(rlxc).arg("compile").arg(&model).args(["--loss", "mse"]).arg("-o").arg(&out).output().unwrap();
    assert_eq!(bad.status.code(), Some(2), "--loss without --train");
    // A GPU target has no state region: a model error naming the target, nothing written.
    let gpu = out.join("gpu");
    let bad = Command::new(rlxc).arg("compile").arg(&model).args(["--train", "--batch", "8", "--target", "vulkan"]).arg("-o").arg(&gpu).output().unwrap();
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(bad.status.code() == Some(1) && err.contains("target vulkan: the model keeps state") && !gpu.join("mlp_init.json").exists(), "{:?} {err}", bad.status.code());
    let _ = std::fs::remove_dir_all(&out);
}

/// `rlxc compile --train --optimizer adam` → the resident artifact linked into tests/native/train_steps.c,
/// which loads NAME.init.bin into the state and runs STEPS steps on consecutive batches, updating the
/// parameters, Adam's moments and its step counter in place; the C program's losses and final state
/// (every tensor read back at its header offset) against the interpreter running the same step graph
/// STEPS times with its outputs fed back. Tolerance: relative 1e-4 on the losses, and on each state
/// tensor a max abs difference of 1e-4 of its largest magnitude (f32 kernels in their own summation
/// order against the interpreter's f64 accumulation; measured 1.2e-5).
#[test]
fn compiled_train_step_from_c_matches_the_interpreter() {
    const STEPS: usize = 12;
    let out = std::env::temp_dir().join(format!("rlxc-train-c-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let rlxc = env!("CARGO_BIN_EXE_rlxc");
    let args = ["--train", "--loss", "cross-entropy", "--optimizer", "adam", "--lr", "0.001", "--batch", "128", "--name", "mnist"];
    ok(Command::new(rlxc).arg("compile").arg(data().join("mlp_init.onnx")).args(args).arg("-o").arg(&out));
    let exe = out.join("train_steps");
    ok(Command::new("cc")
        .args(["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-DSTEP=mnist_train_step", "-I"])
        .arg(&out)
        .arg(repo().join("tests/native/train_steps.c"))
        .arg(out.join("mnist_train_step.o"))
        .arg(out.join("librlx_rt.a"))
        .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-o"])
        .arg(&exe));
    let (xtr, ytr) = (load("train_x.bin", DType::F32, &[4000, 784]), load("train_y.bin", DType::I64, &[4000]));
    let n = STEPS * BATCH;
    std::fs::write(out.join("x.bin"), &xtr.data.bytes()[..n * 784 * 4]).unwrap();
    std::fs::write(out.join("y.bin"), &ytr.data.bytes()[..n * 8]).unwrap();
    let o = ok(Command::new(&exe).arg(STEPS.to_string()).arg(out.join("mnist_train_step.init.bin")).arg(out.join("x.bin")).arg(out.join("y.bin")).arg(out.join("losses.f32")).arg(out.join("state.bin")));
    eprintln!("{o}");
    // The interpreter: the same step, stateless, its outputs fed back.
    let opts = TrainOptions { loss: Loss::CrossEntropy, optimizer: Optimizer::Adam { lr: 0.001, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 }, output: 0, learn_scales: false };
    let s = train_step(&mlp(BATCH as u64), &opts).unwrap();
    let mut state = s.initial();
    let mut losses = Vec::new();
    for i in 0..STEPS {
        let mut ins = vec![rows(&xtr, i * BATCH, BATCH), rows(&ytr, i * BATCH, BATCH)];
        ins.extend(state.iter().cloned());
        let mut o = rlx_interp::run(&s.graph, &ins).unwrap();
        losses.push(o[0].get_f64(0));
        state = o.split_off(1);
    }
    let c_losses: Vec<f64> = std::fs::read(out.join("losses.f32")).unwrap().chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect();
    for (i, (a, b)) in c_losses.iter().zip(&losses).enumerate() {
        assert!((a - b).abs() <= 1e-4 * b.abs(), "step {i}: loss {a} from C, interpreter {b}");
    }
    assert!(losses[STEPS - 1] < losses[0], "the loss did not decrease: {losses:?}");
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("mnist_train_step.json")).unwrap()).unwrap();
    let img = std::fs::read(out.join("state.bin")).unwrap();
    let names: Vec<String> = s.params.iter().chain(&s.state).map(|p| p.0.clone()).collect();
    let tensors = m["state"]["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), names.len());
    let mut worst = 0.0f64;
    for ((tm, name), want) in tensors.iter().zip(&names).zip(&state) {
        assert_eq!(tm["name"].as_str(), Some(name.as_str()));
        let off = tm["offset"].as_u64().unwrap() as usize;
        let want = want.to_f64_vec();
        let got: Vec<f64> = img[off..off + 4 * want.len()].chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect();
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-30);
        let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max) / scale;
        worst = worst.max(diff);
        assert!(diff <= 1e-4, "{name}: max abs difference {diff} of its largest magnitude after {STEPS} steps");
    }
    eprintln!("{STEPS} steps from C: loss {:.4} -> {:.4}; worst state difference {worst:.1e} of the tensor's largest magnitude", c_losses[0], c_losses[STEPS - 1]);
    let _ = std::fs::remove_dir_all(&out);
}

/// The step with parameters and velocities as state: the planner updates every one in place (no
/// copy into the state region), and the state region holds exactly them.
#[test]
fn resident_step_updates_parameters_in_place() {
    let s = step();
    let g = s.resident();
    assert_eq!((g.inputs.len(), g.outputs.len(), g.state.len()), (10, 9, 8));
    let c = rlxc::targets::cpu::compile(Target::Host, &g, &Request::named("mnist_resident"), &mut Timings::default()).unwrap();
    let names: Vec<&str> = c.lir.launches.iter().map(|l| l.kernel.name.as_str()).collect();
    assert!(!names.iter().any(|n| n.starts_with("copy_state")), "{names:?}");
    let state: Vec<&str> = c.lir.state.iter().map(|s| s.port.name.as_str()).collect();
    assert_eq!(state, ["w1", "b1", "w2", "b2", "w1.velocity", "b1.velocity", "w2.velocity", "b2.velocity"]);
    assert_eq!((c.lir.inputs.len(), c.lir.outputs.len()), (2, 1));
}

/// `rlxc train` end to end on the MNIST subset: the same training as the numpy reference (same
/// initial parameters, batches, SGD momentum 0.9, lr 0.05, 3 epochs) — each epoch's mean loss within
/// 1e-3 of numpy's, the final test accuracy at least numpy's; the saved safetensors weights give that
/// accuracy again on the interpreter, the trained ONNX model holds the same weights, the plot is SVG.
#[test]
fn rlxc_train_end_to_end_reaches_the_numpy_accuracy() {
    let out = std::env::temp_dir().join(format!("rlxc-train-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let rlxc = env!("CARGO_BIN_EXE_rlxc");
    let plot = out.join("mnist.svg");
    let onnx = out.join("trained.onnx");
    let epochs = f64s("accuracy.bin").len().to_string();
    let o = ok(Command::new(rlxc)
        .arg("train")
        .arg(data().join("mlp_init.onnx"))
        .arg("--data")
        .arg(data())
        .args(["--epochs", &epochs, "--batch", "128", "--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.05", "--name", "mnist", "-o"])
        .arg(&out)
        .arg("--plot")
        .arg(&plot)
        .arg("--onnx")
        .arg(&onnx));
    eprintln!("{o}");
    let rows = csv_rows(&out.join("mnist_metrics.csv"));
    let (np_losses, np_acc) = (f64s("losses.bin"), f64s("accuracy.bin"));
    assert_eq!(rows.len(), np_acc.len());
    let per = np_losses.len() / rows.len();
    for (e, r) in rows.iter().enumerate() {
        let mean = np_losses[e * per..(e + 1) * per].iter().sum::<f64>() / per as f64;
        let loss: f64 = r[1].parse().unwrap();
        assert!((loss - mean).abs() < 1e-3 * (1.0 + mean), "epoch {}: train loss {loss}, numpy {mean}", e + 1);
    }
    let acc: f64 = rows.last().unwrap()[3].parse().unwrap();
    assert!(acc >= *np_acc.last().unwrap(), "test accuracy {acc} below numpy's {:?}", np_acc.last());
    // The saved weights, on the interpreter: the accuracy the compiled evaluation reported.
    let bytes = std::fs::read(out.join("mnist.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let p: Vec<ConstData> = ["w1", "b1", "w2", "b2"]
        .iter()
        .map(|n| {
            let t = st.tensor(n).unwrap();
            ConstData::new(DType::F32, t.shape().to_vec(), Blob::from_vec(t.data().to_vec())).unwrap()
        })
        .collect();
    let interp_acc = accuracy(&p);
    assert!((interp_acc - acc).abs() <= 0.002, "interpreter accuracy {interp_acc} with the saved weights, compiled {acc}");
    // The trained ONNX model: the same weights as initializers.
    let opts = rlx_import::ImportOptions { dims: [("batch".to_string(), 1000)].into(), ..Default::default() };
    let trained = rlx_opt::lower(&rlx_import::load_onnx(&onnx, &opts).unwrap()).unwrap();
    for (k, n) in ["w1", "b1", "w2", "b2"].iter().enumerate() {
        let v = trained.values.iter().find(|v| v.name.as_deref() == Some(*n)).unwrap();
        let rlx_ir::Def::Const(c) = &v.def else { panic!("{n} is not a constant") };
        assert_eq!(c.data.bytes(), p[k].data.bytes(), "{n} differs between the ONNX model and the safetensors file");
    }
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("test accuracy") && svg.contains("<polyline"), "{}", &svg[..svg.len().min(300)]);
    let _ = std::fs::remove_dir_all(&out);
}

/// Bad flags and bad data are usage errors (exit 2) naming the flag or the file.
#[test]
fn rlxc_train_bad_flags_exit_2_naming_the_flag() {
    let out = std::env::temp_dir().join(format!("rlxc-train-bad-{}", std::process::id()));
    let rlxc = env!("CARGO_BIN_EXE_rlxc");
    let model = data().join("mlp_init.onnx");
    let bad_data = out.join("bad-data");
    std::fs::create_dir_all(&bad_data).unwrap();
    // Labels outside the 10 classes.
    std::fs::copy(data().join("train_x.npy"), bad_data.join("train_x.npy")).unwrap();
    let ys = rlxc::npy::read(&data().join("train_y.npy")).unwrap();
    let mut labels = ys.to_i64_vec();
    labels[7] = 10;
    rlxc::npy::write(&bad_data.join("train_y.npy"), &ConstData::from_i64(vec![labels.len()], &labels)).unwrap();
    let d = data();
    let dstr = d.to_str().unwrap();
    let bstr = bad_data.to_str().unwrap();
    for (flags, says) in [
        (vec!["--data", dstr, "--epochs", "0", "--batch", "128"], "--epochs"),
        (vec!["--data", dstr, "--lr=-1", "--batch", "128"], "--lr must be a finite number"),
        (vec!["--data", dstr, "--batch", "128", "--plot", "loss.png"], "--plot"),
        (vec!["--data", "/nonexistent-rlxc-data", "--batch", "128"], "--data"),
        (vec!["--data", dstr, "--batch", "5000"], "--batch 5000"),
        (vec!["--data", dstr], "--batch"),
        (vec!["--data", bstr, "--batch", "128"], "row 7 is label 10"),
        (vec!["--batch", "128"], "--data"),
    ] {
        let o = Command::new(rlxc).arg("train").arg(&model).args(&flags).arg("-o").arg(&out).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.code() == Some(2) && err.contains(says), "{flags:?}: {:?} {err}", o.status.code());
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// A state output that cannot be written in place (a transpose reads other elements of the state it
/// replaces) is copied into its slot after every read; one that can (elementwise) is not. Three calls
/// of the compiled step against the interpreter iterating the same graph.
#[test]
fn state_not_safe_in_place_is_copied_into_its_slot() {
    use rlx_ir::{BinaryOp, MirOp, State, TensorType};
    use rlxc::targets::cpu::dlopen;
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F32, &[3, 3]));
    let s = g.add_input("s", TensorType::fixed(DType::F32, &[3, 3]));
    let u = g.add_input("u", TensorType::fixed(DType::F32, &[3, 3]));
    let t = g.add1("t", MirOp::Transpose { perm: vec![1, 0] }, &[s]).unwrap();
    let s1 = g.add1("s1", MirOp::Binary(BinaryOp::Add), &[t, x]).unwrap();
    let y = g.add1("y", MirOp::Binary(BinaryOp::Sub), &[u, s]).unwrap();
    let u1 = g.add1("u1", MirOp::Binary(BinaryOp::Mul), &[u, s]).unwrap();
    g.outputs = vec![y, s1, u1];
    g.state = vec![State { input: 1, output: 1 }, State { input: 2, output: 2 }];
    assert!(rlx_ir::verify::verify(&g).is_empty());
    let c = rlxc::targets::cpu::compile(Target::Host, &g, &Request::named("state_copy"), &mut Timings::default()).unwrap();
    let names: Vec<&str> = c.lir.launches.iter().map(|l| l.kernel.name.as_str()).collect();
    assert!(names.contains(&"copy_state_0") && !names.contains(&"copy_state_1"), "{names:?}");
    let lib = dlopen::open(&c, &mut Timings::default()).unwrap();
    let f = *dlopen::symbol::<dlopen::StepFn>(&lib, "state_copy_step").unwrap();
    let (mut arena, mut state) = (dlopen::lines(c.lir.arena_bytes), dlopen::lines(c.lir.state_bytes));
    let xv: Vec<f32> = (0..9).map(|i| i as f32 * 0.5 - 1.0).collect();
    let (mut sv, mut uv): (Vec<f32>, Vec<f32>) = ((0..9).map(|i| i as f32).collect(), (0..9).map(|i| 1.0 + i as f32 * 0.1).collect());
    let off: Vec<usize> = c.lir.state.iter().map(|s| s.offset).collect();
    {
        let b = unsafe { std::slice::from_raw_parts_mut(state.as_mut_ptr() as *mut u8, state.len() * 64) };
        for (k, v) in [&sv, &uv].iter().enumerate() {
            b[off[k]..off[k] + 36].copy_from_slice(&v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>());
        }
    }
    for call in 0..3 {
        let mut yv = [0f32; 9];
        let ins = [xv.as_ptr() as *const u8];
        let outs = [yv.as_mut_ptr() as *mut u8];
        let code = unsafe { f(arena.as_mut_ptr() as *mut u8, state.as_mut_ptr() as *mut u8, ins.as_ptr(), outs.as_ptr()) };
        assert_eq!(code, 0);
        let want = rlx_interp::run(&g, &[ConstData::from_f32(vec![3, 3], &xv), ConstData::from_f32(vec![3, 3], &sv), ConstData::from_f32(vec![3, 3], &uv)]).unwrap();
        let b = unsafe { std::slice::from_raw_parts(state.as_ptr() as *const u8, state.len() * 64) };
        let got = |k: usize| -> Vec<f32> { b[off[k]..off[k] + 36].chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect() };
        let f32s = |c: &ConstData| -> Vec<f32> { c.to_f64_vec().iter().map(|&v| v as f32).collect() };
        assert_eq!(yv.to_vec(), f32s(&want[0]), "call {call}: y");
        assert_eq!(got(0), f32s(&want[1]), "call {call}: s");
        assert_eq!(got(1), f32s(&want[2]), "call {call}: u");
        sv = got(0);
        uv = got(1);
    }
}
