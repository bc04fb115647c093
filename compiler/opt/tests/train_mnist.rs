//! The MNIST MLP 784-128-10 trained by the training step of `rlx_opt::train_step` (forward, softmax
//! cross-entropy, backward, SGD with momentum: one MIR graph) run on the reference interpreter, against
//! a numpy implementation of the same training (tests/train/mnist_reference.py: same initial
//! parameters, same batches of 128 in order, same learning rate and momentum, float32). Checks every
//! step's loss against numpy's and that the test accuracy after training is at least numpy's.

use rlx_interp::run;
use rlx_ir::{BinaryOp, Blob, ConstData, DType, Mir, MirOp, TensorType, UnaryOp};
use rlx_opt::{train_step, Loss, Optimizer, TrainOptions};
use std::path::PathBuf;
use std::process::Command;

const BATCH: usize = 128;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The reference's data and results, made once per version of the script.
fn data() -> PathBuf {
    let dir = repo().join("build/train-test/mnist");
    let script = repo().join("tests/train/mnist_reference.py");
    let stamp = dir.join("script.stamp");
    let src = std::fs::read(&script).unwrap();
    if std::fs::read(&stamp).ok().as_deref() != Some(&src[..]) || !dir.join("accuracy.bin").exists() {
        let py = match std::env::var_os("RLX_PY") {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => repo().join(".venv/bin/python"),
        };
        assert!(py.exists(), "venv python {} not found: run `make setup`", py.display());
        let out = Command::new(&py).arg(&script).arg("--out").arg(&dir).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        std::fs::write(&stamp, &src).unwrap();
    }
    dir
}

fn load(dir: &PathBuf, name: &str, dtype: DType, shape: &[usize]) -> ConstData {
    let bytes = std::fs::read(dir.join(name)).unwrap();
    ConstData::new(dtype, shape.to_vec(), Blob::from_vec(bytes)).unwrap()
}

/// Rows `from..from+n` of a row-major tensor.
fn rows(c: &ConstData, from: usize, n: usize) -> ConstData {
    let per = c.data.len() / c.shape[0];
    let mut shape = c.shape.clone();
    shape[0] = n;
    ConstData::new(c.dtype, shape, Blob::from_vec(c.data.bytes()[from * per..(from + n) * per].to_vec())).unwrap()
}

/// x [batch, 784] → relu(x·w1 + b1)·w2 + b2, the parameters named constants.
fn mlp(batch: usize, p: &[ConstData]) -> Mir {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F32, &[batch, 784]));
    let ids: Vec<_> = ["w1", "b1", "w2", "b2"].iter().zip(p).map(|(n, c)| g.add_const(Some(n), c.clone())).collect();
    let h = g.add1("fc1", MirOp::MatMul, &[x, ids[0]]).unwrap();
    let h = g.add1("fc1_bias", MirOp::Binary(BinaryOp::Add), &[h, ids[1]]).unwrap();
    let r = g.add1("relu", MirOp::Unary(UnaryOp::Relu), &[h]).unwrap();
    let z = g.add1("fc2", MirOp::MatMul, &[r, ids[2]]).unwrap();
    let z = g.add1("fc2_bias", MirOp::Binary(BinaryOp::Add), &[z, ids[3]]).unwrap();
    g.outputs = vec![z];
    g
}

fn accuracy(p: &[ConstData], x: &ConstData, y: &ConstData) -> f64 {
    let n = x.shape[0];
    let z = run(&mlp(n, p), &[x.clone()]).unwrap().remove(0).to_f64_vec();
    let labels = y.to_i64_vec();
    let hits = (0..n)
        .filter(|&i| {
            let row = &z[i * 10..(i + 1) * 10];
            let best = (0..10).fold(0, |b, k| if row[k] > row[b] { k } else { b });
            best as i64 == labels[i]
        })
        .count();
    hits as f64 / n as f64
}

#[test]
fn mnist_mlp_trains_as_well_as_numpy() {
    let dir = data();
    let f = |b: Vec<u8>| b.chunks(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect::<Vec<f64>>();
    let np_losses = f(std::fs::read(dir.join("losses.bin")).unwrap());
    let np_acc = f(std::fs::read(dir.join("accuracy.bin")).unwrap());
    let init = vec![
        load(&dir, "w1.bin", DType::F32, &[784, 128]),
        load(&dir, "b1.bin", DType::F32, &[128]),
        load(&dir, "w2.bin", DType::F32, &[128, 10]),
        load(&dir, "b2.bin", DType::F32, &[10]),
    ];
    let (xtr, ytr) = (load(&dir, "train_x.bin", DType::F32, &[4000, 784]), load(&dir, "train_y.bin", DType::I64, &[4000]));
    let (xte, yte) = (load(&dir, "test_x.bin", DType::F32, &[1000, 784]), load(&dir, "test_y.bin", DType::I64, &[1000]));

    let opts = TrainOptions { loss: Loss::CrossEntropy, optimizer: Optimizer::Sgd { lr: 0.05, momentum: 0.9 }, output: 0 };
    let step = train_step(&mlp(BATCH, &init), &opts).unwrap();
    assert_eq!(step.params.iter().map(|p| p.0.as_str()).collect::<Vec<_>>(), ["w1", "b1", "w2", "b2"]);
    assert_eq!(step.data, 2);
    let mut state = step.initial();
    let per_epoch = 4000 / BATCH;
    let epochs = np_acc.len();
    let mut losses = Vec::new();
    let mut accs = Vec::new();
    let t0 = std::time::Instant::now();
    for _ in 0..epochs {
        for i in 0..per_epoch {
            let mut ins = vec![rows(&xtr, i * BATCH, BATCH), rows(&ytr, i * BATCH, BATCH)];
            ins.extend(state.iter().cloned());
            let mut out = run(&step.graph, &ins).unwrap();
            losses.push(out[0].get_f64(0));
            state = out.split_off(1);
        }
        accs.push(accuracy(&state[..4], &xte, &yte));
    }
    let secs = t0.elapsed().as_secs_f64();
    let worst = losses.iter().zip(&np_losses).map(|(a, b)| (a - b).abs() / (1.0 + b.abs())).fold(0.0, f64::max);
    eprintln!(
        "{} steps on the interpreter in {secs:.1} s; loss {:.4} → {:.4} (numpy {:.4} → {:.4}), worst relative loss difference {worst:.2e}; test accuracy per epoch {accs:?} (numpy {np_acc:?})",
        losses.len(),
        losses[0],
        losses[losses.len() - 1],
        np_losses[0],
        np_losses[np_losses.len() - 1]
    );
    assert_eq!(losses.len(), np_losses.len());
    assert!(worst < 1e-3, "losses diverge from numpy's: worst relative difference {worst}");
    assert!(accs[epochs - 1] >= np_acc[epochs - 1], "test accuracy {} below numpy's {}", accs[epochs - 1], np_acc[epochs - 1]);
}
