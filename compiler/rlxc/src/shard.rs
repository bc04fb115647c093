//! `--shard tp=N|pp=N`: the model's MIR folded and cut into one graph per rank (`rlx_opt::shard`),
//! the manifest that states each rank's ports and collective schedule, the interpreter running every
//! rank at once (the oracle), and — with the `mpi` feature — one rank of a compiled artifact run under
//! `mpirun`, its collectives going through MPI_COMM_WORLD.

use crate::cli::Failure;
use crate::pipeline::eval_op;
use rlx_ir::{ConstData, Mir};
pub use rlx_opt::shard::{Shard, Sharded};
use serde_json::json;

/// Parses `--shard` (a usage error names the value).
pub fn parse(s: &str) -> Result<Shard, String> {
    Shard::parse(s)
}

/// Folds `mir` and shards it; a model that cannot be sharded this way is a usage error naming the nodes.
pub fn shard(mir: &Mir, s: Shard) -> Result<Sharded, Failure> {
    let folded = rlx_opt::simplify(mir, &eval_op);
    rlx_opt::shard(&folded, s).map_err(Failure::usage)
}

/// The manifest of a sharded compile (`NAME.shard.json`): world size, kind, and per rank its folder,
/// which model inputs and outputs its ports are, and its collective schedule.
pub fn manifest(s: &Sharded, name: &str, model_inputs: &[String], model_outputs: &[String]) -> serde_json::Value {
    let ranks: Vec<serde_json::Value> = s
        .ranks
        .iter()
        .enumerate()
        .map(|(r, g)| {
            let outs: Vec<serde_json::Value> = s.outputs[r]
                .iter()
                .zip(&g.outputs)
                .map(|(k, &v)| match k {
                    Some(k) => json!({"model_output": model_outputs.get(*k), "index": k}),
                    None => json!({"sent": g.value(v).name}),
                })
                .collect();
            let schedule: Vec<serde_json::Value> = rlx_opt::shard::schedule(g)
                .into_iter()
                .map(|c| json!({"node": c.node, "op": c.op, "dtype": c.dtype, "shape": c.shape, "peer": c.peer}))
                .collect();
            // Inputs the rank holds in part (a KV cache cut by key/value heads): which part.
            let parts: Vec<serde_json::Value> = s.inputs[r]
                .iter()
                .zip(&s.parts[r])
                .filter_map(|(&k, p)| p.map(|p| json!({"input": model_inputs.get(k), "axis": p.axis, "start": p.start, "len": p.len})))
                .collect();
            json!({
                "rank": r,
                "dir": format!("rank{r}"),
                "parts": parts,
                "artifact": format!("rank{r}/{name}.json"),
                "inputs": s.inputs[r].iter().map(|&k| model_inputs.get(k)).collect::<Vec<_>>(),
                "outputs": outs,
                "schedule": schedule,
            })
        })
        .collect();
    let notes: Vec<serde_json::Value> = s.notes.iter().map(|n| json!({"node": n.node, "op": n.op, "note": n.msg})).collect();
    json!({
        "shard": s.shard.kind(),
        "world_size": s.ranks.len(),
        "communicator": "the application's: CPU artifacts rlx_rt_comm_set (runtime-min; feature mpi: rlx_rt::comm::mpi::MpiComm over MPI_COMM_WORLD); CUDA artifacts an NCCL communicator (feature nccl: rlx_rt::cuda::Executor::with_nccl)",
        "ranks": ranks,
        "notes": notes,
    })
}

/// Rank r's inputs, picked (and cut, for a sharded state) from the model's.
pub fn rank_inputs(s: &Sharded, r: usize, inputs: &[ConstData]) -> Result<Vec<ConstData>, Failure> {
    rlx_opt::shard::rank_inputs(s, r, inputs).map_err(|e| Failure::model(format!("rank {r}'s inputs: {e}")))
}

/// Refuses a run whose state the ranks hold in parts (a KV cache cut by heads): one call of `rlxc run`
/// would return only a part of it.
fn whole_state(s: &Sharded) -> Result<(), Failure> {
    if s.parts.iter().flatten().any(|p| p.is_some()) {
        return Err(Failure::usage(format!("--shard {}={}: the ranks hold the model's state (its KV cache) in parts, so rlxc run cannot return it whole; drive the ranks' steps from an application (rlx_opt::shard::rank_inputs cuts the state)", s.shard.kind(), s.ranks.len())));
    }
    Ok(())
}

/// The model's outputs from the ranks' (tensor parallel: rank 0's; pipeline: each from its stage).
pub fn model_outputs(s: &Sharded, n_outputs: usize, per_rank: &[(usize, Vec<ConstData>)]) -> Result<Vec<ConstData>, Failure> {
    let mut outs: Vec<Option<ConstData>> = vec![None; n_outputs];
    for (r, vals) in per_rank {
        for (k, v) in s.outputs[*r].iter().zip(vals) {
            if let Some(k) = k {
                if outs[*k].is_none() {
                    outs[*k] = Some(v.clone());
                }
            }
        }
    }
    outs.into_iter().enumerate().map(|(k, o)| o.ok_or_else(|| Failure::model(format!("output {k} was computed by no rank here")))).collect()
}

/// Every rank on the interpreter, in this process.
pub fn run_interp(s: &Sharded, inputs: &[ConstData], n_outputs: usize) -> Result<Vec<ConstData>, Failure> {
    whole_state(s)?;
    let ins: Vec<Vec<ConstData>> = (0..s.ranks.len()).map(|r| rank_inputs(s, r, inputs)).collect::<Result<_, _>>()?;
    let outs = rlx_interp::ranks::run_ranks(&s.ranks, &ins).map_err(|e| Failure::model(format!("sharded run failed: {e}")))?;
    model_outputs(s, n_outputs, &outs.into_iter().enumerate().collect::<Vec<_>>())
}

/// MPI initialized for a sharded run: (the MPI universe — finalized when dropped —, MPI_COMM_WORLD,
/// this process's rank, the world size), once `mpirun -np` is known to match the shard.
#[cfg(feature = "mpi")]
pub(crate) fn mpi_world(s: &Sharded) -> Result<(Box<dyn std::any::Any>, Box<rlx_rt::comm::mpi::MpiComm>, usize, usize), Failure> {
    let (universe, comm) = rlx_rt::comm::mpi::init().ok_or_else(|| Failure::model("MPI was already initialized in this process"))?;
    let (rank, size) = (comm.rank() as usize, comm.size() as usize);
    let n = s.ranks.len();
    if size != n {
        return Err(Failure::usage(format!("--shard {}={n} needs {n} MPI processes (mpirun -np {n}); started with {size}", s.shard.kind())));
    }
    Ok((Box::new(universe), comm, rank, n))
}

/// This process's rank of a sharded compile, run under `mpirun -np N` (N = the world size) on
/// `target`: MPI is initialized, the rank's graph compiled and loaded, MPI_COMM_WORLD passed to its
/// runtime (`rlx_rt_comm_set`), and the rank run on its inputs. Returns the model's outputs on the rank
/// that computes all of them (tensor parallel: rank 0), `None` on the others.
#[cfg(feature = "mpi")]
pub fn run_mpi(
    s: &Sharded,
    target: crate::cli::Target,
    req: &crate::targets::Request,
    inputs: &[ConstData],
    n_outputs: usize,
    tm: &mut crate::pipeline::Timings,
) -> Result<(usize, Option<Vec<ConstData>>), Failure> {
    whole_state(s)?;
    let (universe, comm, rank, n) = mpi_world(s)?;
    let run = |tm: &mut crate::pipeline::Timings| -> Result<Vec<ConstData>, Failure> {
        let mut sess = rank_session(target, &s.ranks[rank], req, &comm, tm)?;
        let mut outs = sess.run(&[rank_inputs(s, rank, inputs)?])?;
        outs.pop().ok_or_else(|| Failure::model("the executor returned no outputs"))
    };
    let mine = match run(tm) {
        Ok(o) => o,
        Err(f) => {
            // The other ranks would wait for this one in their next collective: end the job.
            eprintln!("error: rank {rank}: {}", f.msg);
            comm.abort(i32::from(f.code))
        }
    };
    drop(universe);
    let has: std::collections::BTreeSet<usize> = s.outputs[rank].iter().flatten().copied().collect();
    let first = (0..n).find(|&r| s.outputs[r].iter().flatten().count() >= n_outputs && s.outputs[r].iter().flatten().copied().collect::<std::collections::BTreeSet<_>>().len() == n_outputs);
    if has.len() == n_outputs && first == Some(rank) {
        Ok((rank, Some(model_outputs(s, n_outputs, &[(rank, mine)])?)))
    } else {
        Ok((rank, None))
    }
}

/// This process's rank `g` loaded on `target` with its collectives going through MPI_COMM_WORLD —
/// or, on `--target cuda`, through an NCCL communicator over the ranks' GPUs (GPU rank % the
/// device count; rank 0's NCCL unique id broadcast over MPI; NCCL then talks over its own transports).
#[cfg(feature = "mpi")]
fn rank_session(
    target: crate::cli::Target,
    g: &Mir,
    req: &crate::targets::Request,
    comm: &rlx_rt::comm::mpi::MpiComm,
    tm: &mut crate::pipeline::Timings,
) -> Result<Box<dyn crate::targets::Session>, Failure> {
    if target == crate::cli::Target::Cuda {
        let cuda = |e: rlx_rt::cuda::CudaError| Failure::model(format!("--target cuda: {e}"));
        let devices = rlx_rt::cuda::device_count().map_err(cuda)?;
        if devices < 1 {
            return Err(Failure::model("--target cuda: the CUDA driver reports no device"));
        }
        let mut id = [0u8; 128];
        if comm.rank() == 0 {
            id = rlx_rt::nccl::unique_id().map_err(cuda)?;
        }
        comm.broadcast(0, &mut id);
        let nccl = tm.time("NCCL init", || rlx_rt::nccl::Nccl::init(comm.rank() % devices, comm.rank(), comm.size(), &id)).map_err(cuda)?;
        return crate::targets::cuda::load_nccl(g, req, tm, std::sync::Arc::new(nccl));
    }
    let mut sess = crate::targets::load(target, g, req, tm)?;
    sess.set_comm(comm.as_comm() as *const std::ffi::c_void)?;
    Ok(sess)
}

/// `rlxc bench --shard` under `mpirun -np N`: this process's rank compiled, loaded and given
/// MPI_COMM_WORLD, then `warmup` untimed and `runs` timed runs — the same counts on every rank, as
/// each run meets the others in its collectives. Returns (rank, the timed runs' durations).
#[cfg(feature = "mpi")]
pub fn bench_mpi(
    s: &Sharded,
    target: crate::cli::Target,
    req: &crate::targets::Request,
    inputs: &[ConstData],
    warmup: usize,
    runs: usize,
    tm: &mut crate::pipeline::Timings,
) -> Result<(usize, Vec<std::time::Duration>), Failure> {
    whole_state(s)?;
    let (universe, comm, rank, _) = mpi_world(s)?;
    let run = |tm: &mut crate::pipeline::Timings| -> Result<Vec<std::time::Duration>, Failure> {
        let mut sess = rank_session(target, &s.ranks[rank], req, &comm, tm)?;
        let ins = [rank_inputs(s, rank, inputs)?];
        for _ in 0..warmup {
            sess.run(&ins)?;
        }
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t0 = std::time::Instant::now();
            sess.run(&ins)?;
            times.push(t0.elapsed());
        }
        Ok(times)
    };
    match run(tm) {
        Ok(t) => {
            drop(universe);
            Ok((rank, t))
        }
        Err(f) => {
            eprintln!("error: rank {rank}: {}", f.msg);
            comm.abort(i32::from(f.code))
        }
    }
}
