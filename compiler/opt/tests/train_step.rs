//! Training steps (`rlx_opt::train_step`) on the interpreter against a hand-written f64 reference in this
//! file: linear regression y = x·w + b with MSE, updated by SGD (with and without momentum), Adam and
//! AdamW over five steps (PyTorch's update rules, written out below); and softmax cross-entropy's
//! value against its definition.

use rlx_interp::run;
use rlx_ir::{BinaryOp, ConstData, DType, Mir, MirOp, OpSet, TensorType};
use rlx_opt::{train_step, Loss, Optimizer, TrainOptions};

const N: usize = 4;
const K: usize = 3;

fn f64c(shape: &[usize], v: &[f64]) -> ConstData {
    ConstData::from_f64s(DType::F64, shape.to_vec(), v)
}

fn model(w: &[f64], b: f64) -> Mir {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F64, &[N, K]));
    let wv = g.add_const(Some("w"), f64c(&[K, 1], w));
    let bv = g.add_const(Some("b"), f64c(&[1], &[b]));
    let y = g.add1("mm", MirOp::MatMul, &[x, wv]).unwrap();
    let y = g.add1("bias", MirOp::Binary(BinaryOp::Add), &[y, bv]).unwrap();
    g.outputs = vec![y];
    g
}

/// Loss and gradients of mean((x·w + b − t)²), by hand.
fn mse_grads(x: &[f64], t: &[f64], w: &[f64], b: f64) -> (f64, Vec<f64>, f64) {
    let mut loss = 0.0;
    let mut gw = vec![0.0; K];
    let mut gb = 0.0;
    for i in 0..N {
        let y: f64 = (0..K).map(|k| x[i * K + k] * w[k]).sum::<f64>() + b;
        let d = y - t[i];
        loss += d * d / N as f64;
        for k in 0..K {
            gw[k] += 2.0 * d * x[i * K + k] / N as f64;
        }
        gb += 2.0 * d / N as f64;
    }
    (loss, gw, gb)
}

fn check(opt: Optimizer) {
    let x: Vec<f64> = (0..N * K).map(|i| ((i * 7 % 5) as f64 - 2.0) * 0.3).collect();
    let t = [0.5, -1.0, 2.0, 0.25];
    let (mut w, mut b) = (vec![0.1, -0.2, 0.3], 0.05);
    let step = train_step(&model(&w, b), &TrainOptions { loss: Loss::Mse, optimizer: opt.clone(), output: 0, learn_scales: false }).unwrap();
    let mut state = step.initial();
    // The reference's state: one slot vector per parameter element ([w…, b]).
    let mut s1 = vec![0.0; K + 1];
    let mut s2 = vec![0.0; K + 1];
    for it in 1..=5 {
        let mut ins = vec![f64c(&[N, K], &x), f64c(&[N, 1], &t)];
        ins.extend(state.iter().cloned());
        let mut out = run(&step.graph, &ins).unwrap();
        let (loss, gw, gb) = mse_grads(&x, &t, &w, b);
        let mut p: Vec<f64> = w.iter().copied().chain([b]).collect();
        let g: Vec<f64> = gw.into_iter().chain([gb]).collect();
        for j in 0..=K {
            match opt {
                Optimizer::Sgd { lr, momentum } => {
                    s1[j] = momentum * s1[j] + g[j];
                    p[j] -= lr * if momentum == 0.0 { g[j] } else { s1[j] };
                }
                Optimizer::Adam { lr, beta1, beta2, eps, weight_decay } => {
                    s1[j] = beta1 * s1[j] + (1.0 - beta1) * g[j];
                    s2[j] = beta2 * s2[j] + (1.0 - beta2) * g[j] * g[j];
                    let mh = s1[j] / (1.0 - beta1.powi(it));
                    let vh = s2[j] / (1.0 - beta2.powi(it));
                    p[j] -= lr * (mh / (vh.sqrt() + eps) + weight_decay * p[j]);
                }
            }
        }
        assert!((out[0].get_f64(0) - loss).abs() < 1e-12, "{opt:?} step {it}: loss {} vs {loss}", out[0].get_f64(0));
        let got: Vec<f64> = out[1].to_f64_vec().into_iter().chain(out[2].to_f64_vec()).collect();
        for j in 0..=K {
            assert!((got[j] - p[j]).abs() < 1e-12, "{opt:?} step {it}: parameter {j} = {} vs {}", got[j], p[j]);
        }
        (w, b) = (p[..K].to_vec(), p[K]);
        state = out.split_off(1);
    }
    if let Optimizer::Adam { .. } = opt {
        assert_eq!(state.last().unwrap().get_f64(0), 5.0, "step counter");
    }
}

#[test]
fn optimizers_match_their_update_rules() {
    check(Optimizer::Sgd { lr: 0.1, momentum: 0.0 });
    check(Optimizer::Sgd { lr: 0.1, momentum: 0.9 });
    check(Optimizer::Adam { lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 });
    check(Optimizer::Adam { lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 });
}

#[test]
fn step_layout_names_parameters_and_state() {
    let opt = Optimizer::Adam { lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 };
    let step = train_step(&model(&[0.0; K], 0.0), &TrainOptions { loss: Loss::Mse, optimizer: opt, output: 0, learn_scales: false }).unwrap();
    let names: Vec<String> = step.graph.inputs.iter().map(|&i| step.graph.value(i).name.clone().unwrap_or_default()).collect();
    assert_eq!(names, ["x", "target", "w", "b", "w.m", "w.v", "b.m", "b.v", "step"]);
    assert_eq!(step.graph.outputs.len(), 1 + 2 + 4 + 1);
    // Output i+1 has the type of input data+i: the step feeds itself.
    for (k, &o) in step.graph.outputs[1..].iter().enumerate() {
        assert_eq!(step.graph.ty(o), step.graph.ty(step.graph.inputs[step.data + k]));
    }
}

#[test]
fn cross_entropy_matches_its_definition() {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F64, &[2, 3]));
    let s = g.add_const(Some("scale"), f64c(&[3], &[1.0, 2.0, -1.0]));
    let z = g.add1("mul", MirOp::Binary(BinaryOp::Mul), &[x, s]).unwrap();
    g.outputs = vec![z];
    let step = train_step(&g, &TrainOptions { loss: Loss::CrossEntropy, optimizer: Optimizer::Sgd { lr: 0.0, momentum: 0.0 }, output: 0, learn_scales: false }).unwrap();
    let xs = [0.3, -1.2, 2.0, 5.0, 1.0, -0.5];
    let labels = [2i64, 0];
    let ins = vec![f64c(&[2, 3], &xs), ConstData::from_i64(vec![2], &labels), f64c(&[3], &[1.0, 2.0, -1.0])];
    let out = run(&step.graph, &ins).unwrap();
    let z: Vec<f64> = xs.iter().enumerate().map(|(i, v)| v * [1.0, 2.0, -1.0][i % 3]).collect();
    let want: f64 = (0..2).map(|r| {
        let row = &z[r * 3..r * 3 + 3];
        row.iter().map(|v| v.exp()).sum::<f64>().ln() - row[labels[r] as usize]
    }).sum::<f64>() / 2.0;
    assert!((out[0].get_f64(0) - want).abs() < 1e-12, "{} vs {want}", out[0].get_f64(0));
}

#[test]
fn bad_requests_are_errors() {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F64, &[2, 3]));
    let y = g.add1("exp", MirOp::Unary(rlx_ir::UnaryOp::Exp), &[x]).unwrap();
    g.outputs = vec![y];
    let o = TrainOptions { loss: Loss::Mse, optimizer: Optimizer::Sgd { lr: 0.1, momentum: 0.0 }, output: 0, learn_scales: false };
    assert!(train_step(&g, &o).err().unwrap().msg.contains("no parameters"));
    assert!(train_step(&model(&[0.0; K], 0.0), &TrainOptions { output: 1, ..o.clone() }).err().unwrap().msg.contains("no output 1"));
    // Cross-entropy on [N,1] regression outputs is fine shape-wise; on a rank-1 prediction it is not.
    let mut g = model(&[0.0; K], 0.0);
    let o0 = g.outputs[0];
    let r = g.add1("flat", MirOp::Reshape { shape: rlx_ir::Shape::fixed(&[N]).0 }, &[o0]).unwrap();
    g.outputs = vec![r];
    let e = train_step(&g, &TrainOptions { loss: Loss::CrossEntropy, ..o }).err().unwrap();
    assert!(e.msg.contains("logits [batch, classes]"), "{e}");
}

/// Quantization-aware training: y = x·fake_quantize(w) + b (int8, scale 0.05). The scale and zero
/// point are not parameters; the weights train through the straight-through estimator — the update
/// is the gradient with respect to the quantized weights (by hand below), applied to the float ones.
#[test]
fn quantization_aware_training_steps_through_fake_quantize() {
    qat_steps(false);
}

/// The same model written as a QDQ model (`dequantize(quantize(w))`, ONNX's QuantizeLinear →
/// DequantizeLinear pair): the pair trains as one fake_quantize, with the same steps.
#[test]
fn qdq_pairs_train_as_fake_quantize() {
    qat_steps(true);
}

fn qat_steps(pair: bool) {
    let (scale, lr) = (0.05, 0.1);
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F64, &[N, K]));
    let wv = g.add_const(Some("w"), f64c(&[K, 1], &[0.13, -0.21, 0.34]));
    let sv = g.add_const(Some("w_scale"), f64c(&[], &[scale]));
    let zv = g.add_const(Some("w_zero_point"), ConstData::from_f64s(DType::I8, vec![], &[0.0]));
    let bv = g.add_const(Some("b"), f64c(&[1], &[0.05]));
    let wq = if pair {
        let q = g.add1("q", MirOp::Quantize { axis: 0 }, &[wv, sv, zv]).unwrap();
        g.add1("dq", MirOp::Dequantize { axis: 0 }, &[q, sv, zv]).unwrap()
    } else {
        g.add1("fq", MirOp::FakeQuantize { axis: 0 }, &[wv, sv, zv]).unwrap()
    };
    let y = g.add1("mm", MirOp::MatMul, &[x, wq]).unwrap();
    let y = g.add1("bias", MirOp::Binary(BinaryOp::Add), &[y, bv]).unwrap();
    g.outputs = vec![y];
    let step = train_step(&g, &TrainOptions { loss: Loss::Mse, optimizer: Optimizer::Sgd { lr, momentum: 0.0 }, output: 0, learn_scales: false }).unwrap();
    assert_eq!(step.params.iter().map(|p| p.0.as_str()).collect::<Vec<_>>(), ["w", "b"]);
    let kinds: Vec<&str> = step.graph.nodes.iter().map(|n| n.op.kind()).collect();
    assert!(kinds.contains(&"fake_quantize") && !kinds.contains(&"quantize") && !kinds.contains(&"dequantize"), "{kinds:?}");
    let xs: Vec<f64> = (0..N * K).map(|i| ((i * 7 % 5) as f64 - 2.0) * 0.3).collect();
    let t = [0.5, -1.0, 2.0, 0.25];
    let (mut w, mut b) = (vec![0.13, -0.21, 0.34], 0.05);
    let mut state = step.initial();
    for it in 1..=5 {
        let mut ins = vec![f64c(&[N, K], &xs), f64c(&[N, 1], &t)];
        ins.extend(state.iter().cloned());
        let mut out = run(&step.graph, &ins).unwrap();
        // The interpreter quantizes in f32 (the scale rounded to f32): tolerance 1e-7 below.
        let s32 = scale as f32 as f64;
        let wq: Vec<f64> = w.iter().map(|&v| ((v / s32).round_ties_even().clamp(-128.0, 127.0)) * s32).collect();
        let (loss, gw, gb) = mse_grads(&xs, &t, &wq, b);
        assert!((out[0].get_f64(0) - loss).abs() < 1e-7, "step {it}: loss {} vs {loss}", out[0].get_f64(0));
        for k in 0..K {
            w[k] -= lr * gw[k];
        }
        b -= lr * gb;
        let got = out[1].to_f64_vec();
        for k in 0..K {
            assert!((got[k] - w[k]).abs() < 1e-7, "step {it}: w[{k}] = {} vs {}", got[k], w[k]);
        }
        assert!((out[2].get_f64(0) - b).abs() < 1e-7, "step {it}: b");
        // Continue from the step's own values, so the f32 rounding above does not accumulate.
        (w, b) = (got, out[2].get_f64(0));
        state = out.split_off(1);
    }
}
