//! Runs a CUDA artifact folder (`rlxc compile --target cuda`) through runtime-min's executor: the Rust
//! example of the `cuda` feature, and the runner the GPU machine uses (it needs only glibc and the
//! NVIDIA driver: no LLVM, no CUDA SDK).
//!
//!     cuda_run DIR NAME RUNS OUT_DIR IN0.bin [IN1.bin …]
//!
//! Inputs are raw little-endian tensors (numpy's `tofile`) in port order; each output is written to
//! `OUT_DIR/outI.bin`. After one untimed run, RUNS more runs (each: copy in, one CUDA graph launch,
//! copy out) are timed, then RUNS launches of the graph alone (`Executor::launch`: inputs and outputs
//! left on the device, as a framework's graph replay on GPU tensors is timed: the "resident" line);
//! prints the device, setup time and p50 / p10 / p90 / min in µs of both. With
//! `RLX_CUDA_KERNEL_TIMES=1` it then launches the kernels one by one (outside the graph) and prints
//! each dispatch's device time (median of 20), its grid and block, and their sum. Exit 1 on any
//! error, with the message; exit 2 when no CUDA driver is present.

use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 5 {
        eprintln!("usage: cuda_run DIR NAME RUNS OUT_DIR [IN.bin …]");
        std::process::exit(1);
    }
    if let Err(e) = rlx_rt::cuda::probe() {
        eprintln!("skipped: {e}");
        std::process::exit(2);
    }
    if let Err(e) = run(&a) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(a: &[String]) -> Result<(), String> {
    let dir = std::path::Path::new(&a[1]);
    let runs: usize = a[3].parse().map_err(|_| format!("RUNS must be a number, got {}", a[3]))?;
    let out = std::path::Path::new(&a[4]);
    let inputs: Vec<Vec<u8>> = a[5..].iter().map(|p| std::fs::read(p).map_err(|e| format!("{p}: {e}"))).collect::<Result<_, _>>()?;
    let t0 = Instant::now();
    let mut ex = rlx_rt::cuda::Executor::load(dir, &a[2]).map_err(|e| e.to_string())?;
    let setup = t0.elapsed();
    let sched = std::fs::read(dir.join(format!("{}.schedule.bin", a[2]))).map_err(|e| e.to_string())?;
    let sched = rlx_rt::schedule::Schedule::parse(&sched).map_err(|e| e.to_string())?;
    let mut outs: Vec<Vec<u8>> = sched.bases.iter().filter(|b| matches!(b.0, rlx_rt::schedule::BaseKind::Output(_))).map(|b| vec![0u8; b.1 as usize]).collect();
    let ins: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
    let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
    ex.run(&ins, &mut refs).map_err(|e| e.to_string())?;
    let mut scratch = outs.clone();
    let mut ts = Vec::with_capacity(runs);
    for _ in 0..runs {
        let mut refs: Vec<&mut [u8]> = scratch.iter_mut().map(|v| v.as_mut_slice()).collect();
        let t = Instant::now();
        ex.run(&ins, &mut refs).map_err(|e| e.to_string())?;
        ts.push(t.elapsed().as_secs_f64() * 1e6);
    }
    // The graph alone (launch and wait, the inputs and outputs left on the device), as often.
    let mut rs = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        ex.launch().map_err(|e| e.to_string())?;
        rs.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let quantiles = |ts: &mut Vec<f64>| {
        ts.sort_by(f64::total_cmp);
        let q = |p: f64| ts.get(((ts.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0.0);
        format!("{} runs: p50 {:.1} µs  p10 {:.1} µs  p90 {:.1} µs  min {:.1} µs", ts.len(), q(0.5), q(0.1), q(0.9), q(0.0))
    };
    std::fs::create_dir_all(out).map_err(|e| e.to_string())?;
    for (i, o) in outs.iter().enumerate() {
        std::fs::write(out.join(format!("out{i}.bin")), o).map_err(|e| e.to_string())?;
    }
    let (maj, min) = ex.capability().map_err(|e| e.to_string())?;
    println!("cuda device: {} (sm_{maj}{min}), {} launches in one graph ({} programmatic), setup {:.1} ms", ex.device_name(), ex.dispatches(), ex.programmatic(), setup.as_secs_f64() * 1e3);
    println!("bench: {}", quantiles(&mut ts));
    println!("resident: {} (one graph launch and wait; inputs and outputs left on the device)", quantiles(&mut rs));
    if std::env::var("RLX_CUDA_KERNEL_TIMES").is_ok_and(|v| v == "1") {
        let times = ex.kernel_times(20).map_err(|e| e.to_string())?;
        for (i, (t, d)) in times.iter().zip(&sched.dispatches).enumerate() {
            println!("kernel {i} (k{}): {:.1} µs  grid {:?} block {:?}", d.entry, t * 1e3, d.groups, d.block);
        }
        println!("kernels: sum {:.1} µs over {} launches", times.iter().sum::<f32>() * 1e3, times.len());
    }
    Ok(())
}
