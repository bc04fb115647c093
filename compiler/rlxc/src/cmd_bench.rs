//! `rlxc bench`: latency of a compiled artifact in its executor, setup excluded — or, where the
//! executor counts instead of timing (Cortex-M under QEMU: instructions; Verilog: cycles), the count
//! per inference.

use crate::cmd_run::{fmt_count, load_model, ms, phases, On};
use crate::{phase, print_json, Failure};
use rlxc::targets;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub const LONG_ABOUT: &str = "Compile a model for a target, load it into the target's executor and time it: \
        one untimed run, then untimed runs for --warmup-ms, then --runs timed runs of the loaded artifact \
        (host: the NAME_run call; vulkan: copy in, submit, wait, copy out; cuda: copy in, one graph launch, \
        copy out — and as many launches of the graph alone on the tensors left on the device, \"device only\"). \
        Prints p50, p10, p90, min and max, and the setup phases apart (compile, link, load or device setup). \
        Executors that count instead \
        of timing report per inference: cortex-m* the instructions the firmware ran (QEMU -icount, SysTick), \
        verilog the cycles from the first input byte accepted to the last output byte.\n\n\
        Without --input every input is zeros of its declared type (fix symbolic dims with --dim).";

#[derive(clap::Args)]
pub struct BenchArgs {
    /// The model: an ONNX file, or a folder with config.json + model.safetensors
    pub model: PathBuf,
    /// A model input: NAME=FILE.npy (default: zeros)
    #[arg(long = "input", short = 'i', value_name = "NAME=FILE.npy", value_parser = crate::cmd_run::parse_input)]
    pub inputs: Vec<(String, PathBuf)>,
    #[command(flatten)]
    pub on: On,
    /// Threads of the CPU runtime's pool (RLX_NUM_THREADS; default: the machine's)
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Untimed runs for this long after the first run
    #[arg(long, value_name = "MS", default_value_t = 200)]
    pub warmup_ms: u64,
    /// Timed runs
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub runs: usize,
    /// Also write the first run's outputs as .npy into DIR
    #[arg(short = 'o', long = "out-dir", value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print one JSON object
    #[arg(long)]
    pub json: bool,
    /// Bench one rank of a sharded model (tp=N or pp=N) under `mpirun -np N` (--target host over MPI, --target cuda over NCCL): every
    /// rank runs 2 untimed runs then --runs timed ones (the same count everywhere, as the runs meet in
    /// their collectives); rank 0 reports
    #[arg(long, value_name = "tp=N|pp=N", value_parser = rlxc::shard::parse)]
    pub shard: Option<rlxc::shard::Shard>,
}

pub fn main(a: &BenchArgs) -> Result<(), Failure> {
    if let Some(n) = a.threads {
        if n == 0 {
            return Err(Failure::usage("--threads must be at least 1"));
        }
        // The pool reads it when it starts, on the first parallel kernel (after this).
        std::env::set_var("RLX_NUM_THREADS", n.to_string());
    }
    if a.runs == 0 {
        return Err(Failure::usage("--runs must be at least 1"));
    }
    let t = a.on.target();
    let tn = t.name();
    let mut m = load_model(&a.model, &a.inputs, &a.on.dims, true)?;
    if let Some(s) = a.shard {
        return bench_sharded(a, &mut m, s);
    }
    let mut sess = targets::load(t, &m.mir, &a.on.request(&m), &mut m.tm)?;
    let ins = targets::run::quantize_inputs(sess.as_ref(), std::mem::take(&mut m.inputs))?;
    let one = std::slice::from_ref(&ins);
    let t0 = Instant::now();
    let first_out = phase("first run", || sess.run(one))?;
    let first = t0.elapsed();
    if let (Some(dir), Some(o)) = (&a.out, first_out.first()) {
        crate::cmd_run::write_outputs(&m, o, dir)?;
    }
    let device = sess.device();
    let setup: Vec<(String, f64)> = m.tm.0.iter().map(|(n, d)| (n.to_string(), d.as_secs_f64() * 1e3)).collect();
    if !sess.timed() {
        let Some(c) = sess.counter() else {
            return Err(Failure::usage(format!("--target {tn} runs under an emulator that does not count ({device}): wall-clock latency there says nothing about the target; bench it where it runs natively")));
        };
        if a.json {
            print_json(&serde_json::json!({"target": t.name(), "device": device, "phases_ms": setup, "unit": c.unit, "per_inference": {"min": c.min, "max": c.max}}));
        } else {
            println!("{tn} on {device}");
            println!("setup: {}", phases(&m.tm));
            let range = if c.min == c.max { fmt_count(c.min) } else { format!("{}..{}", fmt_count(c.min), fmt_count(c.max)) };
            println!("bench: {range} {} per inference", c.unit);
        }
        return Ok(());
    }
    let warm_until = Instant::now() + Duration::from_millis(a.warmup_ms);
    let mut warmup_runs = 0usize;
    while Instant::now() < warm_until {
        sess.run(one)?;
        warmup_runs += 1;
    }
    let mut runs = Vec::with_capacity(a.runs);
    for _ in 0..a.runs {
        let t0 = Instant::now();
        sess.run(one)?;
        runs.push(t0.elapsed());
    }
    // On a device with its own memory (CUDA): as many runs of the device's share alone, the tensors
    // left where the last run put them (as a framework's graph replay on device tensors is timed).
    let mut resident = Vec::new();
    for _ in 0..a.runs {
        let t0 = Instant::now();
        match sess.resident() {
            Some(r) => r?,
            None => break,
        }
        resident.push(t0.elapsed());
    }
    let n = runs.len();
    let (lat, res) = (Latency::of(runs), (!resident.is_empty()).then(|| Latency::of(resident)));
    let (compile, load): (Vec<_>, Vec<_>) = m.tm.0.iter().filter(|(n, _)| !matches!(*n, "import" | "lower")).partition(|(n, _)| !is_setup(n));
    let sum = |v: &[&(&str, Duration)]| v.iter().map(|(_, d)| *d).sum::<Duration>();
    if a.json {
        print_json(&serde_json::json!({
            "target": t.name(),
            "device": device,
            "phases_ms": setup,
            "first_run_ms": first.as_secs_f64() * 1e3,
            "warmup_runs": warmup_runs,
            "runs": n,
            "latency_us": lat.json(),
            "resident_latency_us": res.as_ref().map(Latency::json),
        }));
    } else {
        println!("{tn} device: {device}");
        println!("compile {}, setup {}, first run {} ({})", ms(sum(&compile)), ms(sum(&load)), ms(first), phases(&m.tm));
        println!("bench: {n} runs after {warmup_runs} warmup runs: {}", lat.text());
        if let Some(r) = &res {
            println!("device only (inputs and outputs left on the device): {}", r.text());
        }
        for l in sess.notes() {
            println!("{l}");
        }
    }
    Ok(())
}

/// p50, p10, p90, min and max of a set of timed runs, in µs.
struct Latency([f64; 5]);

impl Latency {
    fn of(mut runs: Vec<Duration>) -> Latency {
        runs.sort();
        let q = |p: f64| runs.get(((runs.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or_default().as_secs_f64() * 1e6;
        Latency([q(0.5), q(0.1), q(0.9), q(0.0), q(1.0)])
    }
    fn json(&self) -> serde_json::Value {
        let [p50, p10, p90, min, max] = self.0;
        serde_json::json!({"p50": p50, "p10": p10, "p90": p90, "min": min, "max": max})
    }
    fn text(&self) -> String {
        let [p50, p10, p90, min, max] = self.0;
        format!("p50 {p50:.1} µs  p10 {p10:.1} µs  p90 {p90:.1} µs  min {min:.1} µs  max {max:.1} µs")
    }
}

/// `--shard`: this process's rank under mpirun; rank 0 prints the latency of a whole sharded run.
#[cfg(feature = "mpi")]
fn bench_sharded(a: &BenchArgs, m: &mut crate::cmd_run::Model, s: rlxc::shard::Shard) -> Result<(), Failure> {
    let t = a.on.target();
    let sh = m.tm.time("shard", || rlxc::shard::shard(&m.mir, s))?;
    let req = a.on.request(m);
    let mut tm = std::mem::take(&mut m.tm);
    let (rank, runs) = rlxc::shard::bench_mpi(&sh, t, &req, &m.inputs, 2, a.runs, &mut tm)?;
    if rank != 0 {
        return Ok(());
    }
    let n = runs.len();
    let lat = Latency::of(runs);
    if a.json {
        print_json(&serde_json::json!({"target": t.name(), "shard": format!("{}={}", s.kind(), s.ranks()), "runs": n, "latency_us": lat.json()}));
    } else {
        println!("{} --shard {}={}, rank 0 of {} ({})", t.name(), s.kind(), s.ranks(), sh.ranks.len(), phases(&tm));
        println!("bench: {n} runs after 2 warmup runs: {}", lat.text());
    }
    Ok(())
}

#[cfg(not(feature = "mpi"))]
fn bench_sharded(a: &BenchArgs, _m: &mut crate::cmd_run::Model, _s: rlxc::shard::Shard) -> Result<(), Failure> {
    Err(Failure::usage(format!("--shard on --target {}: this rlxc is built without the mpi feature", a.on.target().name())))
}

/// Phases that load an artifact rather than compile it.
fn is_setup(phase: &str) -> bool {
    ["link", "load", "build", "setup"].iter().any(|p| phase.starts_with(p))
}
