//! GGUF language models compiled for the CPU: the `dequant_matmul` / `dequant_gather` kernels
//! (compiler/opt/src/plan/blocks.rs) in LLVM and Cranelift objects, against the interpreter (the
//! oracle) and the numpy reference (tests/reference/llm_ref.py, weights dequantized by llama.cpp's
//! `gguf` package):
//! - every GGUF block type, random blocks, compiled to host (LLVM and Cranelift) and to aarch64 (LLVM,
//!   run under qemu-aarch64): a row gather is bit-identical to the interpreter's dequantization (same
//!   bytes, same f32 arithmetic), a matmul within 1e-5 of the output's range (f32 accumulation in the
//!   kernel, f64 in the interpreter; with `--exact-activations`);
//! - Q8_0, Q5_0, Q4_K and Q6_K matmuls on int8-quantized activations (LLVM: the host's VNNI, AVX2 with
//!   `--cpu haswell`, aarch64 `sdot` with `--cpu neoverse-n1` under qemu): every output within the bound
//!   that rounding x to q8_0 allows (the test states it);
//! - the tiny llama / qwen2 / qwen3 / gemma3 models in every type `gguf` writes, compiled to host
//!   (LLVM) and Cranelift, and the llama ones to aarch64 (qemu): logits within 1e-4 of the logit range
//!   of the interpreter's and of the numpy reference's (measured: ≤ 3e-7) with f32 activations, within
//!   1e-2 with int8 activations (Q8_0, host with VNNI);
//! - Gemma 3 270M (Q4_K_M: q4_k, q5_0, q6_k, q8_0) compiled to host: the argmax next token at every
//!   position of 8 prompts equals the numpy reference's.

mod common;
use common::{f32s, scratch, tiny_gguf as tiny};

use common::repo;
use rlx_ir::{ConstData, DType, Mir, MirOp, TensorType};
use rlxc::cli::{Backend, ModelSource, Target};
use rlxc::pipeline::Timings;
use rlxc::targets::{self, Request};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The stateless graph of a GGUF model with `sequence` bound to `n`.
fn gguf_mir(model: &Path, n: usize) -> Mir {
    let dims = BTreeMap::from([("sequence".to_string(), n as u64)]);
    let hir = ModelSource::from_path(model).unwrap().import(&dims).unwrap();
    rlxc::cli::lower(&hir, model).unwrap()
}

fn request(backend: Backend) -> Request {
    Request { backend: Some(backend), ..Request::named("rlxmodel") }
}

/// The same with f32 activations everywhere (`--exact-activations`).
fn exact_request(backend: Backend) -> Request {
    Request { exact_activations: true, ..request(backend) }
}

/// Runs `mir` compiled for `target` (aarch64: linked into the harness, run under qemu-aarch64).
fn run_on(target: Target, mir: &Mir, backend: Backend, inputs: Vec<ConstData>) -> Vec<ConstData> {
    run_with(target, mir, &request(backend), inputs)
}

fn run_with(target: Target, mir: &Mir, req: &Request, inputs: Vec<ConstData>) -> Vec<ConstData> {
    let mut tm = Timings::default();
    let mut s = targets::load(target, mir, req, &mut tm).unwrap_or_else(|e| panic!("{e:?}"));
    s.run(&[inputs]).unwrap_or_else(|e| panic!("{e:?}")).pop().unwrap()
}

fn tokens_and_positions(tokens: &[i64]) -> Vec<ConstData> {
    let pos: Vec<i64> = (0..tokens.len() as i64).collect();
    vec![ConstData::from_i64(vec![tokens.len()], tokens), ConstData::from_i64(vec![tokens.len()], &pos)]
}

/// max |a − b| / (range of b).
fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let lo = b.iter().cloned().fold(f32::INFINITY, f32::min);
    let hi = b.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max) / (hi - lo).max(f32::MIN_POSITIVE)
}

/// Random bytes that are valid blocks of `d` (every f16 field a finite scale of moderate size).
fn random_blocks(d: DType, rows: usize, cols: usize, seed: &mut u64) -> Vec<u8> {
    let (bs, bb) = d.block();
    let mut next = || {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    };
    let mut out = Vec::new();
    let f16_at: &[usize] = match d {
        DType::Q4_0 | DType::Q5_0 | DType::Q8_0 => &[0],
        DType::Q4_1 | DType::Q5_1 | DType::Q4_K | DType::Q5_K => &[0, 2],
        DType::Q2_K => &[80, 82],
        DType::Q3_K => &[108],
        DType::Q6_K => &[208],
        _ => &[],
    };
    for _ in 0..rows * cols / bs {
        let mut b: Vec<u8> = (0..bb).map(|_| next() as u8).collect();
        for &t in f16_at {
            // ±(2^-10 … 2^-6) · mantissa: finite, no subnormals.
            let h = half::f16::from_f32(((next() % 1000) as f32 / 1000.0 + 0.5) * 0.01 * if next() % 2 == 0 { 1.0 } else { -1.0 });
            b[t..t + 2].copy_from_slice(&h.to_bits().to_le_bytes());
        }
        if matches!(d, DType::F16 | DType::BF16 | DType::F32) {
            let x = ((next() % 2000) as f32 - 1000.0) / 1000.0;
            match d {
                DType::F32 => b.copy_from_slice(&x.to_le_bytes()),
                DType::F16 => b.copy_from_slice(&half::f16::from_f32(x).to_bits().to_le_bytes()),
                _ => b.copy_from_slice(&half::bf16::from_f32(x).to_bits().to_le_bytes()),
            }
        }
        out.extend(b);
    }
    out
}

#[test]
fn every_block_type_gathers_bit_exact_and_multiplies_within_tolerance() {
    let types = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ];
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut report = Vec::new();
    for d in types {
        // 24 rows (panels of 8 with AVX2 and AVX-512 alike), 512 values per row (2 super-blocks).
        // x of 3 rows (the on-the-fly form) and of 40 (the dequantized-panel form).
        let (rows, cols, m, m2) = (24usize, 512usize, 3usize, 40usize);
        let bytes = random_blocks(d, rows, cols, &mut seed);
        let w = ConstData::new(d, vec![rows, cols], rlx_ir::Blob::from_vec(bytes)).unwrap();
        let mut g = Mir::new();
        let x = g.add_input("x", TensorType::fixed(DType::F32, &[m, cols]));
        let idx = g.add_input("idx", TensorType::fixed(DType::I64, &[5]));
        let wv = g.add_const(Some("w"), w);
        let y = g.add_node("mm", MirOp::DequantMatMul, &[x, wv]).unwrap()[0];
        let e = g.add_node("emb", MirOp::DequantGather, &[wv, idx]).unwrap()[0];
        let x2 = g.add_input("x2", TensorType::fixed(DType::F32, &[m2, cols]));
        let y2 = g.add_node("mm2", MirOp::DequantMatMul, &[x2, wv]).unwrap()[0];
        g.outputs = vec![y, e, y2];
        let xs = |m: usize| -> Vec<f32> { (0..m * cols).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 500.0).collect() };
        let ins = vec![
            ConstData::from_f32(vec![m, cols], &xs(m)),
            ConstData::from_i64(vec![5], &[0, 23, 7, -1, 16]),
            ConstData::from_f32(vec![m2, cols], &xs(m2)),
        ];
        let want = rlx_interp::run(&g, &ins).unwrap();
        for (target, backend) in [(Target::Host, Backend::Llvm), (Target::Host, Backend::Cranelift), (Target::Aarch64, Backend::Llvm)] {
            let got = run_with(target, &g, &exact_request(backend), ins.clone());
            let what = format!("{d} {} {backend:?}", target.name());
            assert_eq!(got[1].data.bytes(), want[1].data.bytes(), "{what}: the gather differs from the interpreter's dequantization");
            let r = rel_err(&f32s(&got[0]), &f32s(&want[0]));
            let r2 = rel_err(&f32s(&got[2]), &f32s(&want[2]));
            report.push(format!("{what}: matmul {r:.1e} ({m} rows), {r2:.1e} ({m2} rows) of the range"));
            assert!(r <= 1e-5 && r2 <= 1e-5, "{}", report.last().unwrap());
        }
    }
    eprintln!("{}", report.join("\n"));
}

/// Q8_0, Q5_0, Q4_K and Q6_K matmuls over 1, 3, 9 and 40 rows (one, two and five tiles: decode and
/// prefill) on int8-quantized activations, each output within the quantization bound of the
/// interpreter's f32 result. x rounded to q8_0 (per 32 values, steps of max|x|/127) moves each value by
/// at most half a step, and the f16 rounding of the block's scale by at most 2⁻¹¹·max|x| more, so
/// output j moves by at most Σ_blocks (max|x_block|/254 + max|x_block|/2048)·Σ_block |w_j| (the weights
/// are the file's integers times their scales, not rounded again; a K-quant's sub-block scale and min
/// are applied to the exact integer sums); 1e-5 of the output range is added for the f32 accumulation.
/// Each `Dot4` instruction: the host's (AVX-512 VNNI `vpdpbusd` here; 24 rows are panels of 8 lanes,
/// written with plain vector ops, 64 rows panels of 32), AVX2's `vpmaddubsw` + `vpmaddwd` (`--cpu
/// haswell`, run natively where the host has AVX2) and aarch64's `sdot` (`--cpu neoverse-n1`, under
/// qemu-aarch64), the last two on 64 rows, 3 and 40 rows of x (40 rows: the f32 panels there, the int8
/// form of prefill only with VNNI).
#[test]
fn block_matmuls_on_int8_activations_are_within_the_quantization_bound() {
    use rlx_ir::loops::Int8Dot;
    let host = rlxc::pipeline::CpuTarget::host().unwrap();
    let isa = rlxc::targets::cpu::int8_dot_isa(&host);
    let avx2 = rlxc::targets::cpu::int8_dot_isa(&rlxc::pipeline::cpu_target(Target::Host, Some("haswell")).unwrap()) == Int8Dot::Avx2;
    assert!(avx2, "--cpu haswell takes the AVX2 int8 path");
    let n1 = rlxc::pipeline::cpu_target(Target::Aarch64, Some("neoverse-n1")).unwrap();
    assert_eq!(rlxc::targets::cpu::int8_dot_isa(&n1), Int8Dot::Sdot, "--cpu neoverse-n1 takes the sdot path");
    let host_avx2 = host.features.split(',').any(|f| f == "+avx2");
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut report = Vec::new();
    for (dt, rows) in [(DType::Q8_0, 24usize), (DType::Q8_0, 64), (DType::Q5_0, 24), (DType::Q5_0, 64), (DType::Q4_K, 24), (DType::Q4_K, 64), (DType::Q6_K, 24), (DType::Q6_K, 64)] {
        let cols = 512usize;
        let w = ConstData::new(dt, vec![rows, cols], rlx_ir::Blob::from_vec(random_blocks(dt, rows, cols, &mut seed))).unwrap();
        for m in [1usize, 3, 9, 40] {
            let mut g = Mir::new();
            let x = g.add_input("x", TensorType::fixed(DType::F32, &[m, cols]));
            let idx = g.add_input("idx", TensorType::fixed(DType::I64, &[rows]));
            let wv = g.add_const(Some("w"), w.clone());
            let y = g.add_node("mm", MirOp::DequantMatMul, &[x, wv]).unwrap()[0];
            let e = g.add_node("emb", MirOp::DequantGather, &[wv, idx]).unwrap()[0];
            g.outputs = vec![y, e];
            let xs: Vec<f32> = (0..m * cols).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 500.0 * if i % 97 == 0 { 8.0 } else { 1.0 }).collect();
            let all: Vec<i64> = (0..rows as i64).collect();
            let ins = vec![ConstData::from_f32(vec![m, cols], &xs), ConstData::from_i64(vec![rows], &all)];
            let want = rlx_interp::run(&g, &ins).unwrap();
            let wf = f32s(&want[1]);
            let wy = f32s(&want[0]);
            let range = wy.iter().cloned().fold(f32::NEG_INFINITY, f32::max) - wy.iter().cloned().fold(f32::INFINITY, f32::min);
            let mut configs: Vec<(Target, Option<&str>, Int8Dot)> = vec![(Target::Host, None, isa)];
            if rows == 64 && matches!(m, 3 | 40) {
                if host_avx2 {
                    configs.push((Target::Host, Some("haswell"), Int8Dot::Avx2));
                }
                configs.push((Target::Aarch64, Some("neoverse-n1"), Int8Dot::Sdot));
            }
            for (target, cpu, isa) in configs {
                let req = Request { cpu: cpu.map(str::to_string), ..request(Backend::Llvm) };
                let mut tm = Timings::default();
                let compiled = rlxc::targets::cpu::compile(target, &g, &req, &mut tm).unwrap_or_else(|e| panic!("{e:?}"));
                // Prefill's many rows (5 tiles) take the int8 form only with VNNI (where it pays).
                let int8 = isa != Int8Dot::Plain && (m < 40 || isa == Int8Dot::Vnni);
                assert_eq!(rlxc::targets::cpu::int8_matmuls(&compiled.lir), usize::from(int8), "int8 form planned iff the CPU has an int8 dot product instruction");
                let exact = rlxc::targets::cpu::compile(target, &g, &Request { exact_activations: true, ..req.clone() }, &mut tm).unwrap_or_else(|e| panic!("{e:?}"));
                assert_eq!(rlxc::targets::cpu::int8_matmuls(&exact.lir), 0, "--exact-activations plans no int8 form");
                let got = run_with(target, &g, &req, ins.clone());
                // The gather reads the same repacked bytes: still bit-exact.
                assert_eq!(got[1].data.bytes(), want[1].data.bytes(), "{rows} rows: the gather differs from the interpreter's");
                let gy = f32s(&got[0]);
                let (mut worst, mut diff) = (0f64, 0f64);
                for i in 0..m {
                    for j in 0..rows {
                        let mut bound = 0f64;
                        for b in 0..cols / 32 {
                            let amax = (0..32).map(|l| xs[i * cols + b * 32 + l].abs()).fold(0f32, f32::max) as f64;
                            let wsum: f64 = (0..32).map(|l| wf[j * cols + b * 32 + l].abs() as f64).sum();
                            bound += (amax / 254.0 + amax / 2048.0) * wsum;
                        }
                        let d = (gy[i * rows + j] - wy[i * rows + j]).abs() as f64;
                        diff = diff.max(d);
                        worst = worst.max(d / (bound + 1e-5 * range as f64));
                        assert!(d <= bound + 1e-5 * range as f64, "{dt} {rows}x{cols}, {m} rows, {isa:?}: output ({i}, {j}) off by {d:.3e}, bound {bound:.3e}");
                    }
                }
                if int8 {
                    assert!(diff > 0.0, "{rows}x{cols}, {m} rows: int8 activations should round something");
                }
                report.push(format!("{dt} {rows}x{cols}, {m} rows, {isa:?}: max |diff| {diff:.2e} of range {range:.2e}, {:.0}% of the bound at worst", worst * 100.0));
            }
        }
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
fn tiny_models_compiled_match_the_interpreter_and_numpy() {
    let dir = scratch("llm-compiled-tiny");
    let tokens = [1i64, 5, 9, 2, 77, 3, 40];
    let tok_s = tokens.map(|t| t.to_string()).join(",");
    let mut worst = Vec::new();
    for arch in ["llama", "qwen2", "qwen3", "gemma3"] {
        for qtype in ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"] {
            let (model, refp) = tiny(&dir, arch, qtype, &tok_s);
            let mir = gguf_mir(&model, tokens.len());
            let interp = f32s(&rlx_interp::run(&mir, &tokens_and_positions(&tokens)).unwrap()[0]);
            let numpy = f32s(&common::npy(&refp));
            // aarch64 (under qemu) for the llama models: correctness of the Arm object, not speed.
            let mut configs = vec![(Target::Host, Backend::Llvm), (Target::Host, Backend::Cranelift)];
            if arch == "llama" {
                configs.push((Target::Aarch64, Backend::Llvm));
            }
            for (target, backend) in configs {
                let got = f32s(&run_with(target, &mir, &exact_request(backend), tokens_and_positions(&tokens))[0]);
                let (ri, rn) = (rel_err(&got, &interp), rel_err(&got, &numpy));
                worst.push(format!("{arch} {qtype} {} {backend:?}: {ri:.1e} (interpreter), {rn:.1e} (numpy) of the logit range", target.name()));
                assert!(ri <= 1e-4 && rn <= 1e-4, "{}", worst.last().unwrap());
            }
            // The default compile of a Q8_0 / Q5_0 model takes int8 activations where the host has
            // AVX-512 VNNI: every matmul within its rounding bound (the test above), the logits within
            // 1e-2 of their range of the interpreter's (measured: 1.5e-3 … 7.0e-3, qwen2 Q5_0 the largest).
            if qtype == "Q8_0" || qtype == "Q5_0" {
                let got = f32s(&run_on(Target::Host, &mir, Backend::Llvm, tokens_and_positions(&tokens))[0]);
                let ri = rel_err(&got, &interp);
                worst.push(format!("{arch} {qtype} host Llvm, int8 activations where the CPU has VNNI: {ri:.1e} (interpreter) of the logit range"));
                assert!(ri <= 1e-2, "{}", worst.last().unwrap());
            }
        }
    }
    eprintln!("{}", worst.join("\n"));
}

const PROMPTS: [&str; 8] = [
    "2,818,5279,529,7001,563",
    "2,14946,3324,496,990,993,691",
    "2,818,3823,8864,37423,38167,1024,506",
    "2,17390,104264,657,496,4022,529",
    "2,4754,8126,2258,563",
    "2,818,3768,33358,528,506",
    "2,5778,8678,506,5232,532",
    "2,50429,563,496,3207,528",
];

fn gemma() -> PathBuf {
    let model = repo().join("build/models/gemma-3-270m-q4_k_m.gguf");
    assert!(model.exists(), "{} not found: run `make models`", model.display());
    model
}

/// Gemma 3 270M compiled once at sequence 8; each prompt is padded to 8 tokens (a causal model's
/// logits at position i depend on tokens 0..=i only) and its first positions compared with the numpy
/// reference's argmax, checked in as tests/reference/gemma3_270m_argmax.txt (the float64 reference
/// takes minutes; `make test-llm` runs it live against the interpreter, with the same prompts).
/// With `--exact-activations` every position matches. The default compile (int8 activations in every
/// block-quantized matmul where the host has an int8 dot product: Gemma's activation outliers make a
/// block's int8 step coarse, as in llama.cpp's q8 path) moves logits by up to 2.26 here (measured; at
/// most [`INT8_LOGIT_MOVE`] asserted) and must still give numpy's argmax wherever numpy's top-2 gap is
/// at least [`INT8_GAP`] (measured: it differs at 1 of 51 positions, a gap of 0.11).
#[test]
fn gemma3_270m_compiled_next_token_matches_numpy_at_every_position() {
    /// The largest |Δ logit| the int8 activations may cause on these prompts (logits span ≈ ±30).
    const INT8_LOGIT_MOVE: f32 = 3.0;
    /// The smallest numpy top-2 gap at which the int8 compile must agree with numpy's argmax.
    const INT8_GAP: f32 = 0.25;
    let model = gemma();
    // The numpy reference's answers (written by llm_ref.py argmax; `make test-llm` runs it live).
    let reference = std::fs::read_to_string(repo().join("tests/reference/gemma3_270m_argmax.txt")).unwrap();
    let reference: Vec<&str> = reference.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(reference.len(), PROMPTS.len());
    let t = std::time::Instant::now();
    let mir = gguf_mir(&model, 8);
    let mut tm = Timings::default();
    let mut exact = targets::load(Target::Host, &mir, &exact_request(Backend::Llvm), &mut tm).unwrap_or_else(|e| panic!("{e:?}"));
    let mut int8 = targets::load(Target::Host, &mir, &request(Backend::Llvm), &mut tm).unwrap_or_else(|e| panic!("{e:?}"));
    eprintln!("compile + load (both): {:.1} s", t.elapsed().as_secs_f64());
    let mut mismatches = Vec::new();
    let (mut positions, mut moved) = (0, 0f32);
    for (p, want) in PROMPTS.iter().zip(reference) {
        let mut toks: Vec<i64> = p.split(',').map(|t| t.parse().unwrap()).collect();
        let n = toks.len();
        toks.resize(8, 0);
        let t = std::time::Instant::now();
        let le = f32s(&exact.run(&[tokens_and_positions(&toks)]).unwrap_or_else(|e| panic!("{e:?}")).pop().unwrap()[0]);
        let li = f32s(&int8.run(&[tokens_and_positions(&toks)]).unwrap_or_else(|e| panic!("{e:?}")).pop().unwrap()[0]);
        eprintln!("prompt of {n} tokens: {:.0} ms (both)", t.elapsed().as_secs_f64() * 1e3);
        let vocab = le.len() / 8;
        for (i, w) in want.split(' ').enumerate().take(n) {
            let (tok, gap) = w.split_once(':').unwrap();
            let gap: f32 = gap.parse().unwrap();
            let argmax = |l: &[f32]| l[i * vocab..(i + 1) * vocab].iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (j, &x)| if x > b.1 { (j, x) } else { b }).0;
            moved = (i * vocab..(i + 1) * vocab).map(|j| (li[j] - le[j]).abs()).fold(moved, f32::max);
            positions += 1;
            let (be, bi) = (argmax(&le), argmax(&li));
            if be.to_string() != tok {
                mismatches.push(format!("exact: prompt {p}, position {i}: ours {be}, numpy {tok} (numpy's top-2 gap {gap})"));
            }
            if bi.to_string() != tok && gap >= INT8_GAP {
                mismatches.push(format!("int8: prompt {p}, position {i}: ours {bi}, numpy {tok} (numpy's top-2 gap {gap})"));
            }
        }
    }
    eprintln!("int8 activations: largest logit move {moved:.3} (allowed {INT8_LOGIT_MOVE})");
    assert!(moved <= INT8_LOGIT_MOVE, "int8 activations moved a logit by {moved}, more than {INT8_LOGIT_MOVE}");
    assert!(mismatches.is_empty(), "{} of {positions} positions differ:\n{}", mismatches.len(), mismatches.join("\n"));
}
