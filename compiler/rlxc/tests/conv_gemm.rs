//! Dense convolution on the GEMM micro-kernel (`rlx-opt`'s `plan/conv_gemm.rs`): the cases of
//! `tests/native/make_convs.py` (1×1 read in place, im2col for k×k, strides, dilations, asymmetric pads,
//! 1-D and 3-D, batch 2, B packed from x itself for stride 1 with asymmetric pads, tiles and panels with tails, several row blocks, grouped convolutions (one GEMM
//! per group), the fused epilogues, output channels as the vector lanes over few positions, Winograd
//! F(2×2, 3×3) for 3×3 stride-1 ones over ≥ 196 tiles with odd sizes, asymmetric pads and K chunks) compiled
//! for x86_64 (AVX2: 6-row tiles × 16 lanes), the host (its own vector width, 1 and 2 threads) and
//! Cranelift, each within 1e-4 of the reference interpreter; and ConvTranspose (`plan/conv_transpose.rs`:
//! the same GEMM loops then a col2im gather, or a direct gather when grouped); and a 1000-class classifier
//! after them, whose GEMM columns past the last full panel run as narrower tiles (`plan/gemm.rs`); and
//! weights read by several convolutions (each packed once, the packed copy shared); grouped 1-D
//! convolutions as 2-D ones over a row (`rlx_opt::conv1d`).

mod common;

use common::{npy, ok, python, repo};
use std::path::{Path, PathBuf};
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("conv_gemm").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The cases, written once per test into `dir`: (name, model, input arguments).
fn cases(dir: &Path) -> Vec<(String, PathBuf, Vec<String>)> {
    let out = ok(Command::new(python()).arg("tests/native/make_convs.py").arg("--out").arg(dir).current_dir(repo()));
    let names: Vec<String> = out.lines().map(str::to_string).collect();
    assert!(names.len() >= 10, "make_convs.py wrote {} cases:\n{out}", names.len());
    names
        .into_iter()
        .map(|n| {
            let mut inputs = Vec::new();
            for inp in ["x", "r"] {
                let f = dir.join(format!("{n}.{inp}.npy"));
                if f.exists() {
                    inputs.push(format!("{inp}={}", f.display()));
                }
            }
            let model = dir.join(format!("{n}.onnx"));
            (n, model, inputs)
        })
        .collect()
}

/// `rlxc run` of `model` on `target` (threads: RLX_NUM_THREADS); returns the single output.
fn run(model: &Path, inputs: &[String], target: &str, threads: usize, out: &Path) -> Vec<f32> {
    run_with(model, inputs, target, threads, out, &[])
}

fn run_with(model: &Path, inputs: &[String], target: &str, threads: usize, out: &Path, flags: &[&str]) -> Vec<f32> {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rlxc"));
    let (t, backend) = match target.strip_suffix("-cranelift") {
        Some(t) => (t, Some("cranelift")),
        None => (target, None),
    };
    c.current_dir(repo()).arg("run").arg(model).args(["--target", t]).arg("-o").arg(out).env("RLX_NUM_THREADS", threads.to_string());
    if let Some(b) = backend {
        c.args(["--backend", b]);
    }
    for i in inputs {
        c.args(["--input", i]);
    }
    if target != "interp" {
        c.args(flags);
    }
    ok(&mut c);
    let files: Vec<PathBuf> = std::fs::read_dir(out).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "npy")).collect();
    assert_eq!(files.len(), 1, "{}: outputs {files:?}", model.display());
    let c = npy(&files[0]);
    c.data.bytes().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

fn check(targets: &[(&str, usize)], tag: &str) {
    check_with(targets, tag, "", &[]);
}

/// The cases whose name contains `only`, compiled with the extra `flags`, on each target.
fn check_with(targets: &[(&str, usize)], tag: &str, only: &str, flags: &[&str]) {
    let dir = scratch(tag);
    for (name, model, inputs) in cases(&dir).into_iter().filter(|(n, _, _)| n.contains(only)) {
        let want = run(&model, &inputs, "interp", 1, &dir.join(format!("{name}-interp")));
        assert!(want.iter().any(|&v| v != 0.0), "{name}: the reference output is all zeros");
        for &(t, threads) in targets {
            let got = run_with(&model, &inputs, t, threads, &dir.join(format!("{name}-{t}-{threads}")), flags);
            assert_eq!(got.len(), want.len(), "{name} on {t}: output length");
            let worst = got.iter().zip(&want).map(|(g, w)| (g - w).abs() / w.abs().max(1.0)).fold(0.0f32, f32::max);
            assert!(worst <= 1e-4, "{name} on {t} ({threads} threads): differs from the interpreter by {worst:e}");
            println!("{name} on {t} ({threads} threads): max diff {worst:.1e}");
        }
    }
}

#[test]
fn conv_gemm_llvm_matches_interp() {
    check(&[("x86_64", 1), ("host", 1), ("host", 2)], "llvm");
}

/// The CPU targets' default Winograd form is F(4×4, 3×3); F(2×2, 3×3) (`--winograd f2`) on the same cases.
#[test]
fn conv_gemm_winograd_f2_matches_interp() {
    check_with(&[("host", 2), ("x86_64-cranelift", 1)], "winograd-f2", "winograd", &["--winograd", "f2"]);
}

#[test]
fn conv_gemm_cranelift_matches_interp() {
    check(&[("x86_64-cranelift", 2), ("host-cranelift", 1)], "cranelift");
}

/// The planner really takes the GEMM paths (the planned program, `--emit-ir`'s NAME.lir): packed weight
/// rows and an im2col launch for a k×k convolution (none for a stride-1 one whose output rows are as wide
/// as its input's: B packed from x under a window mask; a strided one packs from x's phases, or over few
/// input channels from x by output rows; over 196
/// tiles or more the Winograd form, over 49 F(2×2, 3×3)), no copy for a 1×1 one, a GEMM launch and the packed
/// transposed weight for a transposed convolution; weights read by several convolutions packed once.
/// (In NCHW, `--layout nchw`: with the default layout a strongly reducing 1×1 one may run channels-last
/// as a matmul, `rlx_opt::channels_last` — its outputs are checked against the interpreter above.)
#[test]
fn conv_gemm_paths_are_taken() {
    let dir = scratch("path");
    let cases = cases(&dir);
    let lir = |case: &str| {
        let (_, model, _) = cases.iter().find(|(n, _, _)| n == case).unwrap_or_else(|| panic!("case {case}"));
        let out = dir.join(case);
        ok(Command::new(env!("CARGO_BIN_EXE_rlxc")).current_dir(repo()).arg("compile").arg(model).args(["--target", "x86_64", "--layout", "nchw", "--name", "m", "--emit-ir", "-o"]).arg(&out));
        std::fs::read_to_string(out.join("m.lir")).unwrap()
    };
    let k3 = lir("conv3x3_silu");
    assert!(k3.contains("packed 6-row panels") && k3.contains("(im2col)"), "3×3: no packed weight or im2col launch:\n{k3}");
    assert!(k3.contains("(packed B chunks)"), "3×3: B chunks are not packed:\n{k3}");
    let kd = lir("conv3x3_wide");
    assert!(kd.contains("(window mask)") && !kd.contains("(im2col)") && kd.contains("(packed B chunks)"), "3×3 pad 1, stride 1: B is not packed from x:\n{kd}");
    let kw = lir("conv3x3_winograd");
    assert!(kw.contains("(winograd, packed") && kw.contains("(winograd input)") && kw.contains("(winograd products)") && !kw.contains("(im2col)") && !kw.contains("(window mask)"), "3×3 pad 1 over 28²: not the Winograd form:\n{kw}");
    // F(4×4, 3×3) by default: 36 groups of panels (128 channels: 22 tiles of 6 rows each); --winograd off: the direct form.
    assert!(kw.contains("f32[792, 16, 6] \"w0 (winograd, packed 6-row panels)\""), "3×3 over 28², 128 channels: not F(4×4, 3×3)'s 36 groups:\n{kw}");
    // 48 channels over 14²: F(2×2, 3×3)'s 16 groups (8 tiles of 6 rows) though F(4×4) is the default; 7²
    // outputs (16 blocks of 2×2) and 32 output channels stay direct.
    let km = lir("conv3x3_winograd_mid_b2");
    assert!(km.contains("f32[128, 32, 6] \"w0 (winograd, packed 6-row panels)\""), "3×3 over 14²: not F(2×2, 3×3)'s 16 groups:\n{km}");
    for case in ["conv3x3_deep_b2", "conv3x3_growth_direct"] {
        let kd = lir(case);
        assert!(!kd.contains("winograd"), "{case}: not the direct form:\n{kd}");
    }
    let (_, model, _) = cases.iter().find(|(n, _, _)| n == "conv3x3_winograd").unwrap();
    let off = dir.join("conv3x3_winograd-off");
    ok(Command::new(env!("CARGO_BIN_EXE_rlxc")).current_dir(repo()).arg("compile").arg(model).args(["--target", "x86_64", "--winograd", "off", "--layout", "nchw", "--name", "m", "--emit-ir", "-o"]).arg(&off));
    let ko = std::fs::read_to_string(off.join("m.lir")).unwrap();
    assert!(!ko.contains("winograd") && ko.contains("(window mask)"), "--winograd off: not the direct form:\n{ko}");
    // On a CPU with two 512-bit FMA units (Intel's server cores) fewer than 32 input channels keep the
    // direct form; 32 still take Winograd.
    let spr = |case: &str| {
        let (_, model, _) = cases.iter().find(|(n, _, _)| n == case).unwrap();
        let out = dir.join(format!("{case}-spr"));
        ok(Command::new(env!("CARGO_BIN_EXE_rlxc")).current_dir(repo()).arg("compile").arg(model).args(["--target", "x86_64", "--cpu", "sapphirerapids", "--layout", "nchw", "--name", "m", "--emit-ir", "-o"]).arg(&out));
        std::fs::read_to_string(out.join("m.lir")).unwrap()
    };
    let (k16, k48) = (spr("conv3x3_winograd"), spr("conv3x3_winograd_mid_b2"));
    assert!(!k16.contains("winograd") && k16.contains("(window mask)"), "16 input channels on sapphirerapids: not the direct form:\n{k16}");
    assert!(k48.contains("(winograd products)"), "32 input channels on sapphirerapids: not the Winograd form:\n{k48}");
    let ks = lir("conv3x3_s2_phases_b2");
    assert!(ks.contains("(phases)") && ks.contains("(window mask)") && !ks.contains("(im2col)"), "3×3 stride 2: B is not packed from x's phases:\n{ks}");
    // Strided over few input channels: B packed from x itself by output rows (no phases, no im2col).
    for case in ["conv3x3_s2_rows_b2", "conv3x3_s2_rows_stem", "conv5x5_s2_rows", "conv3x3_s3_rows"] {
        let kr = lir(case);
        assert!(kr.contains("(window mask)") && kr.contains("(packed B chunks)") && !kr.contains("(phases)") && !kr.contains("(im2col)"), "{case}: B is not packed from x by rows:\n{kr}");
    }
    // Dilated or 3-D, stride 1, output rows (3-D: planes) as large as the input's: B packed from x.
    for case in ["conv3x3_dil2_hardswish", "conv3x3_dil3_asym_b2", "conv3d_direct_b2", "conv3d_dil2_asym"] {
        let kd = lir(case);
        assert!(kd.contains("(window mask)") && !kd.contains("(im2col)"), "{case}: B is not packed from x:\n{kd}");
    }
    let k7 = lir("conv7x7_s2_relu6");
    assert!(k7.contains("(im2col)") && !k7.contains("(phases)"), "7×7 stride 2 whose phase columns would wrap: not im2col:\n{k7}");
    let k1 = lir("conv1x1_relu");
    // 20 output channels: 4-row tiles (6-row ones would compute 24 rows).
    assert!(k1.contains("packed 4-row panels") && !k1.contains("(im2col)"), "1×1: x is read in place:\n{k1}");
    assert!(k1.contains("(packed B chunks)"), "1×1: B chunks are not packed:\n{k1}");
    let kg = lir("conv3x3_grouped_b2");
    assert!(kg.contains("f32[4, 72, 6] \"w0 (packed 6-row panels)\"") && kg.contains("(im2col)"), "grouped 3×3: not one GEMM per group:\n{kg}");
    let kg1 = lir("conv1x1_grouped");
    assert!(kg1.contains("f32[8, 8, 6] \"w0 (packed 6-row panels)\"") && !kg1.contains("(im2col)"), "grouped 1×1: not one GEMM per group over x in place:\n{kg1}");
    // x86_64 (AVX2) has no wide tile: the host's own CPU decides whether the channels are the lanes.
    let host = |case: &str| {
        let (_, model, _) = cases.iter().find(|(n, _, _)| n == case).unwrap_or_else(|| panic!("case {case}"));
        let out = dir.join(format!("{case}-host"));
        ok(Command::new(env!("CARGO_BIN_EXE_rlxc")).current_dir(repo()).arg("compile").arg(model).args(["--target", "host", "--layout", "nchw", "--name", "m", "--emit-ir", "-o"]).arg(&out));
        std::fs::read_to_string(out.join("m.lir")).unwrap()
    };
    if std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains(" avx512f ")) {
        let kl = host("conv3x3_lanes_b2");
        assert!(kl.contains("(packed 64-channel panels)") && kl.contains("(im2col)") && kl.contains("(partial sums)"), "3×3 over 49 positions, K 2304: channels are not the lanes over K chunks:\n{kl}");
        let kl = host("conv1x1_lanes32_sigmoid");
        assert!(kl.contains("(packed 32-channel panels)") && !kl.contains("(im2col)"), "1×1 with 96 channels: not 32-channel panels over x in place:\n{kl}");
        let kl = host("conv3x3_deep_b2");
        assert!(!kl.contains("-channel panels)"), "3×3 with K 576: channels as lanes (its per-lane stores outweigh it):\n{kl}");
    } else {
        println!("no AVX-512 on this host: the channels-as-lanes path is not checked here");
    }
    // A grouped 1-D convolution runs as a 2-D one over a row (its output [N, C, 1, L]).
    let k1d = lir("conv1d_depthwise_k31_silu");
    assert!(k1d.contains("f32[2, 16, 1, 60]"), "depthwise 1-D: not a 2-D convolution over a row:\n{k1d}");
    // Weights shared by several convolutions take the packed forms, one packed copy each.
    let sh = lir("conv_shared_weights");
    for label in ["\"w0 (packed", "\"p (packed", "\"tw (transposed, packed"] {
        assert_eq!(sh.matches(label).count(), 1, "shared weights: not one packed copy of {label}:\n{sh}");
    }
    let kt = lir("convt2x2_s2_relu");
    assert!(kt.contains("(transposed, packed 6-row panels)") && kt.contains("(gemm)"), "ConvTranspose: no GEMM launch:\n{kt}");
}
