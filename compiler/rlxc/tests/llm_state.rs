//! The cached step (KV cache as graph state, `rlx_models::llm::llm_step_from_gguf`) against the
//! stateless full-sequence graph on the interpreter, on the tiny random models of tests/llm.rs (written
//! by the `gguf` package through tests/reference/llm_ref.py): a prompt prefilled in chunks (the last one
//! padded; or one token per call of the chunk graph), then decoded token by token — by the chunk graph
//! with padding rows and by a one-token graph sharing the same caches — gives the stateless graph's
//! logits at the position of every call's last token (the only row a step computes). Gemma 3's tiny
//! model has a sliding window of 3, so its local layers' window mask over the cache is exercised too.

mod common;
use common::{f32s, rlxc, scratch};

use common::{ok, python, repo};
use rlx_ir::{ConstData, Mir};
use std::path::{Path, PathBuf};
use std::process::Command;

fn tiny(dir: &Path, arch: &str, qtype: &str) -> PathBuf {
    let model = dir.join(format!("{arch}-{qtype}.gguf"));
    ok(Command::new(python()).arg(repo().join("tests/reference/llm_ref.py")).args(["tiny", arch, qtype]).arg(&model));
    model
}

fn lower(h: &rlx_ir::Hir) -> Mir {
    rlx_opt::lower::lower(h).unwrap_or_else(|p| panic!("lowering failed: {p:?}"))
}

/// One call of a step graph: `tokens` at `positions` in the chunk's last rows (the rows before them
/// padding at position `context`, which writes nothing), the caches updated in place; returns the
/// logits of the last token (the step's only logits row).
fn step(g: &Mir, chunk: usize, context: usize, tokens: &[i64], positions: &[i64], caches: &mut [ConstData]) -> Vec<f32> {
    let n = tokens.len();
    assert!(n <= chunk);
    let mut t = vec![0; chunk - n];
    let mut p = vec![context as i64; chunk - n];
    t.extend_from_slice(tokens);
    p.extend_from_slice(positions);
    let mut ins = vec![ConstData::from_i64(vec![chunk], &t), ConstData::from_i64(vec![chunk], &p)];
    ins.extend(caches.iter().cloned());
    let mut out = rlx_interp::run(g, &ins).expect("step runs");
    assert_eq!(out.len(), 1 + caches.len());
    assert!(out[0].shape.len() == 2 && out[0].shape[0] == 1, "logits: one row, not {:?}", out[0].shape);
    let logits = f32s(&out[0]);
    for (c, o) in caches.iter_mut().zip(out.drain(1..)) {
        *c = o;
    }
    logits
}

#[test]
fn cached_steps_match_the_stateless_graph_on_every_arch() {
    let dir = scratch("llm-state");
    let seq: Vec<i64> = vec![1, 5, 9, 2, 77, 3, 40, 11, 60, 8];
    let prompt = 6;
    let (chunk, context) = (4, 16);
    let mut report = Vec::new();
    for arch in ["llama", "qwen2", "qwen3", "gemma3"] {
        for qtype in ["F32", "Q8_0"] {
            let model = tiny(&dir, arch, qtype);
            let f = rlx_import::gguf::load_gguf(&model).unwrap();
            let (cfg, full) = rlx_models::llm::llm_from_gguf(&f).unwrap();
            let full = lower(&full);
            let pos: Vec<i64> = (0..seq.len() as i64).collect();
            let want = rlx_interp::run(&full, &[ConstData::from_i64(vec![seq.len()], &seq), ConstData::from_i64(vec![seq.len()], &pos)]).unwrap();
            let want = f32s(&want[0]);
            let vocab = cfg.vocab;
            let (_, g4) = rlx_models::llm::llm_step_from_gguf(&f, chunk, context).unwrap();
            let (_, g1) = rlx_models::llm::llm_step_from_gguf(&f, 1, context).unwrap();
            let (g4, g1) = (lower(&g4), lower(&g1));
            assert_eq!(g4.state.len(), 2 * cfg.layers);
            // Two runs: the prompt one token per call of the chunk graph (every position checked, three
            // padding rows each) then decode with the chunk graph; and the prompt in full chunks (the
            // last one padded) then decode with the one-token graph.
            for decode_chunk in [chunk, 1] {
                let zero = ConstData::from_f32(vec![context, cfg.kv_heads, cfg.head_dim], &vec![0.0; context * cfg.kv_heads * cfg.head_dim]);
                let mut caches = vec![zero; 2 * cfg.layers];
                // (position of the call's last token, its logits)
                let mut got: Vec<(usize, Vec<f32>)> = Vec::new();
                let per_call = if decode_chunk == 1 { chunk } else { 1 };
                for s in (0..prompt).step_by(per_call) {
                    let e = (s + per_call).min(prompt);
                    got.push((e - 1, step(&g4, chunk, context, &seq[s..e], &pos[s..e], &mut caches)));
                }
                for i in prompt..seq.len() {
                    let g = if decode_chunk == 1 { &g1 } else { &g4 };
                    got.push((i, step(g, decode_chunk, context, &seq[i..i + 1], &pos[i..i + 1], &mut caches)));
                }
                let positions: Vec<usize> = got.iter().map(|(p, _)| *p).collect();
                let expect: Vec<usize> = if decode_chunk == 1 { vec![3, 5, 6, 7, 8, 9] } else { (0..seq.len()).collect() };
                assert_eq!(positions, expect);
                let want: Vec<f32> = positions.iter().flat_map(|&p| want[p * vocab..(p + 1) * vocab].to_vec()).collect();
                let got: Vec<f32> = got.into_iter().flat_map(|(_, l)| l).collect();
                assert_eq!(got.len(), want.len());
                let lo = want.iter().cloned().fold(f32::INFINITY, f32::min);
                let hi = want.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                report.push(format!("{arch} {qtype} decode chunk {decode_chunk}: max |diff| {err:.2e} (logit range {:.2}) at positions {positions:?}", hi - lo));
                assert!(err <= 1e-5 * (hi - lo), "{arch} {qtype} decode chunk {decode_chunk}: max |diff| {err} over the logit range {lo}..{hi}");
            }
        }
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
fn step_graphs_round_trip_through_the_text_form_and_bad_sizes_are_errors() {
    let dir = scratch("llm-state-text");
    let model = tiny(&dir, "gemma3", "F32");
    let f = rlx_import::gguf::load_gguf(&model).unwrap();
    let (_, g) = rlx_models::llm::llm_step_from_gguf(&f, 2, 8).unwrap();
    let mir = lower(&g);
    let text = rlx_ir::text::print(&mir);
    assert!(text.contains("write_rows(") && text.contains("\n  state 4\n"), "{text}");
    let back: Mir = rlx_ir::text::parse(&text).unwrap();
    assert_eq!(back.state, mir.state);
    assert!(rlx_ir::verify::verify(&back).is_empty());
    for (chunk, context) in [(0, 8), (9, 8), (1, 0)] {
        let e = rlx_models::llm::llm_step_from_gguf(&f, chunk, context).unwrap_err();
        assert!(e.contains("chunk") && e.contains("context"), "{e}");
    }
}

/// The compiled host artifact through its C ABI: `rlxc compile --dim context=16 --dim chunk=4` (both
/// back ends; F32 matrices as plain GEMMs, Q8_0 through the compiled `dequant_matmul`), linked into tests/native/llm_generate.c, which prefills the prompt in chunks
/// (`llm_prefill`, the last one padded) and decodes greedily (`llm_decode`) — the logits of every call
/// (after each chunk's last token and each decoded token) equal the interpreter's stateless
/// full-sequence logits at those positions over prompt + generated tokens, and its tokens are their
/// argmax chain.
#[test]
fn compiled_step_generates_as_the_stateless_interpreter() {
    let dir = scratch("llm-state-host");
    let prompt: Vec<i64> = vec![1, 5, 9, 2, 77, 3];
    let ids: Vec<String> = prompt.iter().map(i64::to_string).collect();
    let n = 6;
    let mut report = Vec::new();
    for (arch, qtype) in [("llama", "F32"), ("qwen2", "F32"), ("qwen3", "F32"), ("gemma3", "F32"), ("llama", "Q8_0"), ("gemma3", "Q8_0")] {
        let model = tiny(&dir, arch, qtype);
        let f = rlx_import::gguf::load_gguf(&model).unwrap();
        let (cfg, full) = rlx_models::llm::llm_from_gguf(&f).unwrap();
        let full = lower(&full);
        // f32 activations within 1e-4 of the logit range; the default LLVM compile of a Q8_0 model
        // (int8 activations where the host has an int8 dot product: compiler/opt/src/plan/int8_dot.rs) within
        // 1e-2 (measured: 5.1e-3, tiny llama), its tokens still the interpreter's argmax chain.
        let mut configs = vec![("llvm", "--exact-activations", 1e-4f32), ("cranelift", "--exact-activations", 1e-4)];
        if qtype == "Q8_0" {
            configs.push(("llvm", "", 1e-2));
        }
        for (backend, flag, tol) in configs {
            let arch = format!("{arch} {qtype}");
            let out = dir.join(format!("{}-{backend}{flag}", arch.replace(' ', "-")));
            ok(rlxc().arg("compile").arg(&model).args(["--target", "host", "--backend", backend, "--name", "llm", "--dim", "context=16", "--dim", "chunk=4", "--emit-ir", "-o"]).arg(&out).args((!flag.is_empty()).then_some(flag)));
            attends_over_the_filled_positions(&out.join("llm.lir"), &arch);
            let h = std::fs::read_to_string(out.join("llm.h")).unwrap();
            for want in ["#define llm_MAX_CONTEXT 16", "#define llm_MAX_CHUNK 4", "#define llm_STATE_BYTES ", "int llm_step(void *arena, void *state,"] {
                assert!(h.contains(want), "llm.h lacks '{want}'");
            }
            let exe = out.join("generate");
            ok(Command::new("cc")
                .args(["-O2", "-std=c11", "-Wall", "-Werror", "-I"])
                .arg(&out)
                .arg(repo().join("tests/native/llm_generate.c"))
                .arg(out.join("llm.o"))
                .arg(out.join("librlx_rt.a"))
                .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-o"])
                .arg(&exe));
            let dump = out.join("logits.f32");
            let stdout = ok(Command::new(&exe).arg(n.to_string()).arg(ids.join(",")).arg(&dump));
            let gen: Vec<i64> = stdout.lines().find_map(|l| l.strip_prefix("generated: ")).expect("generated line").split(',').map(|t| t.parse().unwrap()).collect();
            assert_eq!(gen.len(), n);
            let got: Vec<f32> = std::fs::read(&dump).unwrap().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
            // The reference: the stateless graph over prompt + every generated token but the last.
            let seq: Vec<i64> = prompt.iter().chain(&gen[..n - 1]).copied().collect();
            let pos: Vec<i64> = (0..seq.len() as i64).collect();
            let want = rlx_interp::run(&full, &[ConstData::from_i64(vec![seq.len()], &seq), ConstData::from_i64(vec![seq.len()], &pos)]).unwrap();
            let want = f32s(&want[0]);
            let v = cfg.vocab;
            // The rows dumped: the last token of each chunk of 4 (positions 3, 5), then each decoded one.
            let rows: Vec<usize> = [3, 5].into_iter().chain(prompt.len()..seq.len()).collect();
            let want_rows: Vec<f32> = rows.iter().flat_map(|&p| want[p * v..(p + 1) * v].to_vec()).collect();
            assert_eq!(got.len(), want_rows.len(), "{arch} {backend}");
            let lo = want_rows.iter().cloned().fold(f32::INFINITY, f32::min);
            let hi = want_rows.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let err = got.iter().zip(&want_rows).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            report.push(format!("{arch} {backend} {flag}: max |diff| {err:.2e} (logit range {:.2})", hi - lo));
            assert!(err <= tol * (hi - lo), "{arch} {backend} {flag}: max |diff| {err} over the logit range {lo}..{hi}");
            for (k, &g) in gen.iter().enumerate() {
                let row = &want[(prompt.len() - 1 + k) * v..(prompt.len() + k) * v];
                let best = (0..v).fold(0, |b, i| if row[i] > row[b] { i } else { b });
                assert_eq!(g, best as i64, "{arch} {backend}: generated token {k}");
            }
        }
    }
    eprintln!("{}", report.join("\n"));
}

/// The planned attention skips what the mask discards (compiler/opt/src/plan/causal.rs): layer 0's
/// scores dot products run under the mask's `if` (per query row, or per tile of 4 rows), and its probabilities × values GEMM declares the
/// tile's bound (largest position + 1, an i64 read at run time) and skips K chunks past it — the
/// forms whose results the test above checks against the interpreter.
fn attends_over_the_filled_positions(lir: &Path, arch: &str) {
    let text = std::fs::read_to_string(lir).unwrap();
    let kernel = |name: &str| -> String {
        let head = format!("kernel \"{name}\"(");
        let at = text.find(&head).unwrap_or_else(|| panic!("{arch}: no kernel {name} in {}", lir.display()));
        let body = &text[at..];
        body[..body.find("\n}\n").unwrap_or(body.len())].to_string()
    };
    let scores = kernel("blk.0.attn.scores+blk.0.attn.mask");
    assert!(scores.lines().any(|l| l.trim_start().starts_with("if ")), "{arch}: the scores dot product is not under the mask:\n{scores}");
    let context = kernel("blk.0.attn.context");
    assert!(context.contains(": i64 = ") && context.contains(" < index.i64(v"), "{arch}: the context GEMM has no run-time key bound:\n{context}");
}

/// The same artifacts through their Rust binding (`NAME.rs`: `step`, `MAX_CONTEXT`, `MAX_CHUNK`,
/// `VOCAB`, `ARENA_BYTES`, `STATE_BYTES`): tests/native/rust-llm, linked by cargo against the object,
/// generates as tests/native/llm_generate.c does on the same object — the same ids and bit-identical
/// logits of every call (the C program is checked against the interpreter above).
#[test]
fn rust_binding_of_a_stateful_artifact_generates_as_the_c_program() {
    let dir = scratch("llm-state-rust");
    let target = dir.join("cargo-target");
    for (arch, qtype, backend) in [("llama", "Q8_0", "llvm"), ("gemma3", "F32", "cranelift")] {
        let model = tiny(&dir, arch, qtype);
        let out = dir.join(format!("{arch}-{qtype}"));
        ok(rlxc().arg("compile").arg(&model).args(["--target", "host", "--backend", backend, "--name", "llm", "--dim", "context=16", "--dim", "chunk=4", "-o"]).arg(&out));
        let rs = std::fs::read_to_string(out.join("llm.rs")).unwrap();
        for want in ["pub const MAX_CONTEXT: usize = 16;", "pub const MAX_CHUNK: usize = 4;", "pub type State = rlx_rt::Arena<STATE_BYTES>;", "pub fn step(arena: &mut [u8], state: &mut [u8]"] {
            assert!(rs.contains(want), "llm.rs lacks '{want}'");
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        ok(Command::new(cargo)
            .args(["build", "--release", "--offline", "--quiet", "--manifest-path"])
            .arg(repo().join("tests/native/rust-llm/Cargo.toml"))
            .env("CARGO_TARGET_DIR", &target)
            .env("RLX_MODEL_DIR", &out)
            .env("RLX_MODEL_NAME", "llm")
            .env_remove("CARGO_BUILD_TARGET")
            .current_dir(repo().join("tests/native/rust-llm")));
        let c_exe = out.join("generate");
        ok(Command::new("cc")
            .args(["-O2", "-std=c11", "-Wall", "-Werror", "-I"])
            .arg(&out)
            .arg(repo().join("tests/native/llm_generate.c"))
            .arg(out.join("llm.o"))
            .arg(out.join("librlx_rt.a"))
            .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-o"])
            .arg(&c_exe));
        // Six prompt tokens: one full chunk and a padded one, then decode to a full context.
        let args = ["12", "1,5,9,2,77,3"];
        let (c_dump, rs_dump) = (out.join("c.f32"), out.join("rs.f32"));
        let c_ids = ok(Command::new(&c_exe).args(args).arg(&c_dump));
        let rs_ids = ok(Command::new(target.join("release/rlx-native-rust-llm")).args(args).arg(&rs_dump));
        assert!(c_ids.starts_with("generated: ") && c_ids.split(',').count() == 11, "{arch}: {c_ids}");
        assert_eq!(rs_ids, c_ids, "{arch} {qtype} {backend}: the Rust binding and the C program generate differently");
        let (c, r) = (std::fs::read(&c_dump).unwrap(), std::fs::read(&rs_dump).unwrap());
        // Logits rows: 2 prefill calls (chunks of 4 and 2) and 10 decode calls.
        assert_eq!(c.len(), 12 * 96 * 4);
        assert!(c == r, "{arch} {qtype} {backend}: logits differ between the Rust binding and the C program");
    }
}

/// Usage errors of the stateful compile (exit 2, nothing written), and a GPU target that does not
/// claim `write_rows` lists every cache update it cannot compile (exit 1).
#[test]
fn stateful_compile_errors_are_usage_errors_naming_the_dims() {
    let dir = scratch("llm-state-errors");
    let model = tiny(&dir, "llama", "F32");
    for (dims, want) in [
        (vec!["chunk=4"], "--dim chunk=C needs --dim context=N"),
        (vec!["context=8", "sequence=4"], "--dim sequence sizes the stateless graph"),
        (vec!["context=4", "chunk=8"], "1 <= chunk (8) <= context (4)"),
        (vec!["contxt=4"], "did you mean 'context'?"),
    ] {
        let out = dir.join("out");
        let mut c = rlxc();
        c.arg("compile").arg(&model).args(["--target", "host", "-o"]).arg(&out);
        for d in &dims {
            c.args(["--dim", d]);
        }
        let r = c.output().unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{dims:?}: {err}");
        assert!(err.contains(want), "{dims:?}: {err}");
        assert!(!out.exists(), "{dims:?} wrote {}", out.display());
    }
    let r = rlxc().arg("compile").arg(&model).args(["--target", "vulkan", "--dim", "context=8", "-o"]).arg(dir.join("vk")).output().unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(err.contains("node 'cache.0.k': write_rows") && err.contains("node 'cache.1.v': write_rows"), "{err}");
}
