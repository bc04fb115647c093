//! `rlxc train MODEL --data DIR --epochs N -o OUT`: the model's training step (`rlx_opt::train_step`)
//! compiled for this machine with its parameters and optimizer state resident in the artifact's
//! state region (`rlxc::train::compiled`), run over the training split batch by batch in order (the
//! last partial batch dropped) for N epochs, with an indicatif progress bar per epoch (running loss
//! and img/s), the test split evaluated after each epoch; writes OUT/NAME.safetensors (the trained
//! parameters), OUT/NAME_metrics.csv, and with --plot / --onnx the plot and the trained ONNX model.

use crate::cmd_train_step::{step_options, LossArg, OptimizerArg};
use crate::{problem_list, Failure, ModelSource};
use rlxc::pipeline::{default_name, Timings};
use rlxc::targets::Request;
use rlxc::train::{compiled::CompiledTraining, data, metrics, qat_insert, report, save};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

pub const LONG_ABOUT: &str = "Train a model with its compiled training step.\n\n\
The training step (forward, loss, backward and optimizer update as one graph, as `rlxc compile --train` builds it) \
is compiled for this machine and loaded in this process with the parameters and optimizer state resident in its \
state region: a step takes a batch and gives the loss, nothing else moves.\n\n\
--data DIR holds train_x.npy (samples [N, ...the model input's shape after the batch axis]) and train_y.npy \
(integer class labels [N] for cross-entropy, targets of the output's shape for mse), and optionally test_x.npy / \
test_y.npy, evaluated after every epoch (test loss, and accuracy for cross-entropy). Batches are taken in order; \
the last partial batch is dropped.\n\n\
Writes OUT/NAME.safetensors (the trained parameters, named as in the model), OUT/NAME_metrics.csv (per epoch: \
train loss, test loss, test accuracy, img/s), with --plot FILE.svg a plot of them, with --onnx FILE the ONNX model \
with its initializers replaced by the trained values. RLX_NUM_THREADS sets the threads of the compiled step.\n\n\
A QDQ model (QuantizeLinear -> DequantizeLinear pairs with one scale and zero point) trains quantization-aware: each \
pair is a fake quantization whose gradient is the straight-through estimator, its scale fixed, or trained too with \
--learn-scales (LSQ's estimator, per-tensor scales). The trained ONNX model (--onnx) keeps the pairs and compiles for \
the int8 targets (--target cortex-m*, verilog) with those scales, without --calibrate.\n\n\
--qat prepares a float ONNX model for that itself: rlxc inserts the pairs where the int8 targets read them — on the \
graph input and output and on every Relu output (int8, asymmetric, per tensor, over the range [min(0, lo), max(0, hi)] \
the reference interpreter observes running the float model on the training split), and on every f32 initializer \
weight of a MatMul, Gemm or Conv (int8, symmetric, per tensor: scale max|w| / 127; a Conv bias stays float) — prints \
each pair's scale and zero point, checks that the int8 targets can map the result (else names the node they cannot), \
and trains it; --onnx then writes the model with its pairs. MaxPool, Reshape and Flatten after a Relu keep its pair; \
a layer output that no Relu follows (Conv -> MaxPool -> Relu) and that is no graph output gets a pair of its own. \
A BatchNormalization is refused (fold it into the Conv before it first). A model that already has QuantizeLinear \
nodes is trained under its own pairs.";

#[derive(clap::Args, Debug)]
pub struct TrainCmdArgs {
    /// The model: an .onnx file or a safetensors folder; its named float constants are the parameters
    pub model: PathBuf,
    /// Folder of train_x.npy, train_y.npy (and optionally test_x.npy, test_y.npy)
    #[arg(long, value_name = "DIR")]
    pub data: PathBuf,
    /// Passes over the training split
    #[arg(long, default_value_t = 1)]
    pub epochs: usize,
    /// Samples per step (fixes the model's batch dim)
    #[arg(long)]
    pub batch: Option<u64>,
    /// Fix a symbolic dim: NAME=N (repeatable)
    #[arg(long = "dim", value_name = "NAME=N", value_parser = crate::parse_dim)]
    pub dims: Vec<(String, u64)>,
    /// The loss
    #[arg(long, value_enum, default_value_t = LossArg::CrossEntropy)]
    pub loss: LossArg,
    /// The optimizer
    #[arg(long, value_enum, default_value_t = OptimizerArg::Sgd)]
    pub optimizer: OptimizerArg,
    /// Learning rate
    #[arg(long, default_value_t = 0.01)]
    pub lr: f64,
    /// --optimizer sgd: momentum
    #[arg(long, default_value_t = 0.0)]
    pub momentum: f64,
    /// --optimizer adamw: decoupled weight decay
    #[arg(long, default_value_t = 0.01)]
    pub weight_decay: f64,
    /// Quantization-aware training of a float ONNX model: insert QuantizeLinear -> DequantizeLinear pairs
    /// (input, MatMul/Gemm weights, Relu outputs, output) with scales from its ranges on the training data
    #[arg(long)]
    pub qat: bool,
    /// A QDQ model (quantization-aware training): also train its quantization scales (LSQ, per-tensor
    /// scales) instead of keeping them fixed; --onnx then writes the learned scales
    #[arg(long)]
    pub learn_scales: bool,
    /// Output folder for NAME.safetensors and NAME_metrics.csv (created if missing)
    #[arg(short = 'o', long = "out")]
    pub out: PathBuf,
    /// Name of the written files (default: the model file's stem)
    #[arg(long)]
    pub name: Option<String>,
    /// Also plot loss and accuracy per epoch into this SVG file
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Also write the trained model as ONNX (the input model with its initializers replaced)
    #[arg(long, value_name = "FILE.onnx")]
    pub onnx: Option<PathBuf>,
    /// Native code generator: llvm (default when built in) or cranelift
    #[arg(long, value_enum)]
    pub backend: Option<rlxc::cli::Backend>,
}

fn bar(epoch: usize, epochs: usize, steps: usize) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(steps as u64);
    if let Ok(style) = indicatif::ProgressStyle::with_template("epoch {prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed})") {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_prefix(format!("{epoch}/{epochs}"));
    pb
}

pub fn main(a: &TrainCmdArgs) -> Result<(), Failure> {
    let opts = step_options(a.loss, a.optimizer, a.lr, a.momentum, a.weight_decay, a.learn_scales)?;
    if a.epochs == 0 {
        return Err(Failure::usage("--epochs must be at least 1"));
    }
    if let Some(p) = &a.plot {
        if p.extension().and_then(|e| e.to_str()) != Some("svg") {
            return Err(Failure::usage(format!("--plot writes SVG: '{}' must end in .svg", p.display())));
        }
    }
    let src = ModelSource::from_path(&a.model)?;
    if a.onnx.is_some() && !matches!(src, ModelSource::Onnx(_)) {
        return Err(Failure::usage("--onnx rewrites the initializers of an ONNX model: MODEL is not an .onnx file"));
    }
    let dims = rlxc::dims::resolve(&src, &a.dims, a.batch)?;
    let hir = src.import(&dims)?;
    let mut free: Vec<String> = hir.input_symbols();
    free.retain(|s| !dims.contains_key(s));
    if !free.is_empty() {
        return Err(Failure::usage(format!("symbolic dims must be fixed to train: {} (use --batch N or --dim NAME=N)", free.join(", "))));
    }
    let mut mir = rlx_opt::lower(&hir).map_err(|p| Failure::model(problem_list("cannot lower the model to MIR", &p)))?;
    let mut step = rlx_opt::train_step(&mir, &opts).map_err(|e| Failure::model(format!("cannot build the training step: {e}")))?;
    let g = &step.graph;
    let (xt, yt) = (g.ty(g.inputs[0]).clone(), g.ty(g.inputs[1]).clone());
    let classes = (opts.loss == rlx_opt::Loss::CrossEntropy).then(|| mir.ty(mir.outputs[0]).shape.as_fixed().and_then(|s| s.last().copied()).unwrap_or(0));
    let ds = data::load(&a.data, &xt, &yt, classes)?;
    // --qat: the model with its pairs (the bytes --onnx rewrites), imported and stepped again.
    let mut qat_bytes = None;
    if a.qat {
        let ModelSource::Onnx(path) = &src else {
            return Err(Failure::usage("--qat inserts QuantizeLinear -> DequantizeLinear pairs into an ONNX model: MODEL is not an .onnx file"));
        };
        match crate::phase("observing the float model's ranges", || qat_insert::prepare(path, &dims, &mir, &ds.train.x))? {
            qat_insert::Prepared::AlreadyQdq => println!("qat: {} already has QuantizeLinear nodes: trained under its own pairs", path.display()),
            qat_insert::Prepared::Inserted { bytes, pairs } => {
                println!("qat: inserted {} QuantizeLinear -> DequantizeLinear pairs (ranges of the float model on the {} training samples):", pairs.len(), ds.train.len());
                for p in &pairs {
                    println!("qat:   {:?} {}: scale {} zero point {}", p.role, p.tensor, p.scale, p.zero_point);
                }
                let io = rlx_import::ImportOptions { dims: dims.clone(), bind: Default::default() };
                let hir = rlx_import::load_onnx_bytes(&bytes, path.parent(), &io).map_err(|e| Failure::model(problem_list("--qat: cannot import the model with its pairs", &e.problems)))?;
                mir = rlx_opt::lower(&hir).map_err(|p| Failure::model(problem_list("--qat: cannot lower the model with its pairs", &p)))?;
                step = rlx_opt::train_step(&mir, &opts).map_err(|e| Failure::model(format!("cannot build the training step: {e}")))?;
                qat_bytes = Some(bytes);
            }
        }
        rlxc::pipeline::quantize_qdq_mir(&mir).map_err(|f| Failure::model(format!("--qat: the int8 targets (cortex-m*, verilog) cannot run this model (rlxc puts the pairs on layer weights, after each layer or its Relu, and on the graph's input and output): {}", f.msg)))?;
    }
    if opts.learn_scales && !mir.nodes.iter().any(|n| matches!(n.op, rlx_ir::MirOp::Quantize { .. } | rlx_ir::MirOp::FakeQuantize { .. })) {
        return Err(Failure::usage("--learn-scales trains the scales of QuantizeLinear -> DequantizeLinear pairs, and the model has none: add --qat"));
    }
    let eval = rlx_opt::train::with_params_as_inputs(&mir, opts.learn_scales).map_err(|e| Failure::model(format!("cannot build the evaluation: {e}")))?;
    let batch = xt.shape.as_fixed().and_then(|s| s.first().copied()).unwrap_or(1).max(1);
    let steps = ds.train.len() / batch;
    if steps == 0 {
        return Err(Failure::usage(format!("--batch {batch} is larger than the {} training samples", ds.train.len())));
    }
    std::fs::create_dir_all(&a.out).map_err(|e| Failure::usage(format!("-o {}: cannot create the folder: {e}", a.out.display())))?;
    let name = a.name.clone().map(|n| rlxc::artifact::sanitize_ident(&n)).unwrap_or_else(|| default_name(&a.model));
    let req = Request { backend: a.backend, ..Request::named(&name) };
    let mut tm = Timings::default();
    let t0 = Instant::now();
    let mut t = crate::phase("compiling the training step", || CompiledTraining::compile(&step, &eval, &req, &mut tm))?;
    eprintln!(
        "compiled the training step of {} for {} in {:.2?}: {} parameters, batch {batch}, {steps} steps per epoch",
        a.model.display(),
        t.what,
        t0.elapsed(),
        step.params.iter().map(|p| p.1.numel()).sum::<usize>()
    );
    let mut rows = Vec::new();
    for epoch in 1..=a.epochs {
        let pb = bar(epoch, a.epochs, steps);
        let (mut sum, mut secs) = (0.0, 0.0);
        for i in 0..steps {
            let (x, y) = ds.train.rows(i * batch, batch);
            let s0 = Instant::now();
            let loss = t.step(x, y)?;
            secs += s0.elapsed().as_secs_f64();
            if !loss.is_finite() {
                pb.abandon();
                return Err(Failure::model(format!("the loss is {loss} at epoch {epoch}, step {}: training diverged (try a smaller --lr)", i + 1)));
            }
            sum += loss;
            pb.inc(1);
            pb.set_message(format!("loss {:.4} · {:.0} img/s", sum / (i + 1) as f64, ((i + 1) * batch) as f64 / secs));
        }
        pb.finish_and_clear();
        let (test_loss, test_accuracy) = match &ds.test {
            Some(s) => {
                let (l, acc) = metrics::evaluate(&mut t, s, opts.loss)?;
                (Some(l), acc)
            }
            None => (None, None),
        };
        let row = report::Epoch { epoch, train_loss: sum / steps as f64, test_loss, test_accuracy, img_per_s: (steps * batch) as f64 / secs };
        let opt = |label: &str, v: Option<f64>| v.map(|v| format!(", {label} {v:.4}")).unwrap_or_default();
        println!("epoch {epoch}/{}: train loss {:.4}{}{}, {:.0} img/s", a.epochs, row.train_loss, opt("test loss", test_loss), opt("test accuracy", test_accuracy), row.img_per_s);
        rows.push(row);
    }
    let params = t.params();
    let weights = a.out.join(format!("{name}.safetensors"));
    save::safetensors(&weights, &params)?;
    let csv = a.out.join(format!("{name}_metrics.csv"));
    report::write_csv(&csv, &rows)?;
    println!("wrote {}", weights.display());
    println!("wrote {}", csv.display());
    if let Some(p) = &a.plot {
        report::plot(p, &rows)?;
        println!("wrote {}", p.display());
    }
    if let Some(p) = &a.onnx {
        let bytes = match qat_bytes {
            Some(b) => b,
            None => std::fs::read(&a.model).map_err(|e| Failure::model(format!("cannot read {}: {e}", a.model.display())))?,
        };
        save::onnx(&a.model, &bytes, p, &params)?;
        println!("wrote {}", p.display());
    }
    Ok(())
}
