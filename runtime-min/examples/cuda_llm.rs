//! Greedy generation with a language model's cached step compiled for CUDA (`rlxc compile MODEL.gguf
//! --target cuda --dim context=N [--dim chunk=C]`): the Rust example of a stateful CUDA artifact, and
//! the runner the GPU machine uses (glibc and the NVIDIA driver only: no LLVM, no CUDA SDK).
//!
//!     cuda_llm DIR NAME CONTEXT PROMPT_IDS N
//!
//! PROMPT_IDS is a comma-separated list of token ids. The step's ports are tokens, positions i64[chunk]
//! → logits f32[1, vocab] (the chunk's last row); the KV cache is the executor's state region, on the
//! GPU between calls. The prompt runs in chunks (a call's tokens in the chunk's last rows, the rows
//! before them padding at position CONTEXT, which writes nothing), then N tokens are decoded one per
//! call, each the argmax of the last logits. Prints the generated ids, the prefill time (the best of
//! three prefills, each from an empty cache, and the first) and the
//! decode rate (tokens/s over the N − 1 calls after the first decode, and the p50 call). Exit 1 on any
//! error; exit 2 when no CUDA driver is present.

use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 6 {
        eprintln!("usage: cuda_llm DIR NAME CONTEXT PROMPT_IDS N");
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

fn bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn run(a: &[String]) -> Result<(), String> {
    let dir = std::path::Path::new(&a[1]);
    let context: usize = a[3].parse().map_err(|_| format!("CONTEXT must be a number, got {}", a[3]))?;
    let prompt: Vec<i64> = a[4].split(',').map(|t| t.trim().parse::<i64>().map_err(|_| format!("bad token id '{t}'"))).collect::<Result<_, _>>()?;
    let n: usize = a[5].parse().map_err(|_| format!("N must be a number, got {}", a[5]))?;
    let t0 = Instant::now();
    let mut ex = rlx_rt::cuda::Executor::load(dir, &a[2]).map_err(|e| e.to_string())?;
    let setup = t0.elapsed();
    let sched = std::fs::read(dir.join(format!("{}.schedule.bin", a[2]))).map_err(|e| e.to_string())?;
    let sched = rlx_rt::schedule::Schedule::parse(&sched).map_err(|e| e.to_string())?;
    use rlx_rt::schedule::BaseKind;
    let size = |k: BaseKind| sched.bases.iter().find(|b| b.0 == k).map(|b| b.1 as usize);
    let chunk = size(BaseKind::Input(0)).ok_or("the schedule has no tokens input")? / 8;
    let vocab = size(BaseKind::Output(0)).ok_or("the schedule has no logits output")? / 4;
    if ex.state_bytes() == 0 || chunk == 0 || vocab == 0 {
        return Err("not a language-model step: it keeps no state, or its ports are empty".into());
    }
    if prompt.is_empty() || prompt.len() + n > context {
        return Err(format!("{} prompt tokens and {n} new ones do not fit the context of {context}", prompt.len()));
    }
    let mut logits = vec![0u8; vocab * 4];
    // One call: `toks` at positions `start..` in the chunk's last rows.
    let call = |ex: &mut rlx_rt::cuda::Executor, toks: &[i64], start: usize, logits: &mut [u8]| -> Result<i64, String> {
        let pad = chunk - toks.len();
        let mut t = vec![0i64; chunk];
        let mut p = vec![context as i64; chunk];
        for (i, &x) in toks.iter().enumerate() {
            t[pad + i] = x;
            p[pad + i] = (start + i) as i64;
        }
        ex.run(&[&bytes(&t), &bytes(&p)], &mut [logits]).map_err(|e| e.to_string())?;
        // Greedy: the first largest logit, each read once.
        let (mut best, mut top) = (0, f32::NEG_INFINITY);
        for (i, b) in logits.chunks_exact(4).enumerate() {
            let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            if v > top || i == 0 {
                (best, top) = (i, v);
            }
        }
        Ok(best as i64)
    };
    // The prefill three times from an empty cache: the first (cold) and the best of the three.
    let mut next = 0;
    let mut times = Vec::new();
    for _ in 0..3 {
        ex.reset_state().map_err(|e| e.to_string())?;
        let t1 = Instant::now();
        for (i, c) in prompt.chunks(chunk).enumerate() {
            next = call(&mut ex, c, i * chunk, &mut logits)?;
        }
        times.push(t1.elapsed());
    }
    let (cold, prefill) = (times[0], *times.iter().min().unwrap_or(&times[0]));
    let mut out = vec![next];
    let mut ts = Vec::with_capacity(n);
    let t2 = Instant::now();
    let mut t_first = t2;
    for i in 1..n {
        let t = Instant::now();
        next = call(&mut ex, &[next], prompt.len() + i - 1, &mut logits)?;
        ts.push(t.elapsed().as_secs_f64() * 1e3);
        if i == 1 {
            t_first = Instant::now();
        }
        out.push(next);
    }
    let rate = if n > 2 { (n - 2) as f64 / t_first.elapsed().as_secs_f64() } else { 0.0 };
    ts.sort_by(f64::total_cmp);
    let p50 = ts.get(ts.len() / 2).copied().unwrap_or(0.0);
    let (maj, min) = ex.capability().map_err(|e| e.to_string())?;
    println!("generated: {}", out.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(","));
    println!(
        "cuda device: {} (sm_{maj}{min}), {} launches per call, chunk {chunk}, context {context}, setup {:.1} ms",
        ex.device_name(),
        ex.dispatches(),
        setup.as_secs_f64() * 1e3
    );
    println!(
        "prefill: {} tokens in {:.2} ms ({:.1} tokens/s; best of 3 from an empty cache, the first {:.2} ms)",
        prompt.len(),
        prefill.as_secs_f64() * 1e3,
        prompt.len() as f64 / prefill.as_secs_f64(),
        cold.as_secs_f64() * 1e3
    );
    println!("decode: {} tokens, {rate:.1} tokens/s, p50 call {p50:.3} ms", n.saturating_sub(1));
    if std::env::var("RLX_CUDA_KERNEL_TIMES").is_ok_and(|v| v == "1") {
        // The last decode call's kernels one by one, on its inputs: each run writes the same cache row
        // with the same values, so the state is unchanged.
        let times = ex.kernel_times(20).map_err(|e| e.to_string())?;
        let mut order: Vec<usize> = (0..times.len()).collect();
        order.sort_by(|&x, &y| times[y].total_cmp(&times[x]));
        for &i in &order {
            let d = sched.dispatches.iter().filter(|d| d.comm.is_none()).nth(i).ok_or("dispatch out of range")?;
            println!("kernel {i} (k{}): {:.1} µs  grid {:?} block {:?}", d.entry, times[i] * 1e3, d.groups, d.block);
        }
        println!("kernels: sum {:.1} µs over {} launches", times.iter().sum::<f32>() * 1e3, times.len());
    }
    Ok(())
}
