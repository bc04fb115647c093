//! The NVPTX writer's inline f32 log, sinh, cosh, tan and pow and f64 exp and log
//! (`targets/llvm/src/ir/math.rs`: no libdevice on the GPU), run in CPU emulation (tests/gpu/emulate_cuda.py: the `--emit-ir` module
//! compiled for the host) against the interpreter, which computes each in f64 and rounds to f32.
//! The model and inputs are tests/gpu/make_math.py's (the whole f32 range, special values, C powf's
//! special cases). NaN must be NaN and ±inf the same inf; elsewhere the relative error (against
//! max(|want|, FLT_MIN)) is bounded per function: log 2.5e-7, sinh and cosh 5e-7, tan 2.5e-7 (each a
//! few f32 ulps; measured 1.2e-7, 2.4e-7, 2.0e-7, 0), pow 3e-5 (y·ln|x| rounded once: measured
//! 4.4e-6); f64 exp and log 1e-15 against max(|want|, f64's smallest normal) (measured 2.2e-16 and
//! 2.2e-16: the interpreter's libm). tan beyond |x| = 2^50, where the f64 range reduction has lost the quadrant, is NaN on
//! the GPU (checked) rather than a wrong number.

mod common;
use common::{ok, python, repo, rlxc, scratch};
use std::path::Path;
use std::process::Command;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn inline_log_sinh_cosh_tan_pow_exp64_log64_match_the_interpreter_in_cpu_emulation() {
    let dir = scratch("cuda-math");
    ok(Command::new(python()).args(["tests/gpu/make_math.py", s(&dir)]).current_dir(repo()));
    let model = dir.join("math.onnx");
    let ins: Vec<String> = ["x", "a", "b", "d"].iter().map(|k| format!("{k}={}", s(&dir.join(format!("{k}.npy"))))).collect();
    let it = dir.join("interp");
    let mut run = rlxc();
    run.args(["run", s(&model), "--target", "interp", "-o", s(&it)]);
    for i in &ins {
        run.args(["--input", i]);
    }
    ok(&mut run);
    let art = dir.join("art");
    ok(rlxc().args(["compile", s(&model), "--target", "cuda", "--emit-ir", "-o", s(&art)]));
    let emu = dir.join("emu");
    let npys: Vec<String> = ["x", "a", "b", "d"].iter().map(|k| s(&dir.join(format!("{k}.npy"))).to_string()).collect();
    ok(Command::new(python()).arg("tests/gpu/emulate_cuda.py").args([s(&art), "math", s(&emu)]).args(&npys).current_dir(repo()));
    let x = common::npy(&dir.join("x.npy")).to_f64_vec();
    for (out, bound) in [("log", 2.5e-7), ("sinh", 5e-7), ("cosh", 5e-7), ("tan", 2.5e-7), ("pow", 3e-5), ("exp64", 1e-15), ("log64", 1e-15)] {
        let floor = if out.ends_with("64") { f64::MIN_POSITIVE } else { f32::MIN_POSITIVE as f64 };
        let (want, got) = (common::npy(&it.join(format!("{out}.npy"))).to_f64_vec(), common::npy(&emu.join(format!("{out}.npy"))).to_f64_vec());
        assert_eq!(want.len(), got.len(), "{out}");
        let mut worst = 0.0f64;
        for (i, (&w, &g)) in want.iter().zip(&got).enumerate() {
            if out == "tan" && x[i].abs() >= 2f64.powi(50) {
                assert!(g.is_nan(), "tan[{i}] of {}: {g}, NaN expected past 2^50", x[i]);
            } else if w.is_nan() || w.is_infinite() {
                assert!(g.is_nan() && w.is_nan() || g == w, "{out}[{i}]: {g}, the interpreter gives {w}");
            } else {
                assert!(g.is_finite(), "{out}[{i}]: {g}, the interpreter gives {w}");
                worst = worst.max((g - w).abs() / w.abs().max(floor));
            }
        }
        eprintln!("{out}: emulated cuda vs interp max relative error {worst:.3e}");
        assert!(worst <= bound, "{out}: {worst} > {bound}");
    }
}

/// The GPU writer's erf (`ir/math/gpu_erf.rs`: `rcp.approx.ftz.f32` and `ex2.approx.ftz.f32` in place of
/// an IEEE division and the inline exp): tests/gpu/erf_accuracy.py's bounds hold with both
/// approximations at PTX's stated worst (measured 6.0e-7 abs, 1.1e-6 rel); the module holds both
/// instructions and no `rcp.rn.f32`, `RLX_CUDA_ERF=exact` neither and the CPU's `rcp.rn.f32`; both
/// assemble for sm_80 and sm_90; in CPU emulation (the approximations correctly rounded there) on the
/// script's grid plus ±inf and NaN, within 4e-7 of the interpreter's f64 erf (measured 2.98e-7 either way,
/// as on the H200), ±inf giving ±1 and NaN NaN.
#[test]
fn gpu_erf_is_within_its_bounds_in_cpu_emulation() {
    ok(Command::new(python()).arg("tests/gpu/erf_accuracy.py").current_dir(repo()));
    let dir = scratch("cuda-erf");
    let x = dir.join("x.npy");
    ok(Command::new(python()).args(["tests/gpu/erf_accuracy.py", "--grid", s(&x)]).current_dir(repo()));
    let code = "import sys, numpy as np, onnx; from onnx import helper as h, TensorProto as T; from pathlib import Path; \
                d = Path(sys.argv[1]); x = np.concatenate([np.load(d / 'x.npy'), [np.inf, -np.inf, np.nan]]).astype(np.float32); \
                np.save(d / 'x.npy', x); n = len(x); \
                g = h.make_graph([h.make_node('Erf', ['x'], ['y'])], 'erf', [h.make_tensor_value_info('x', T.FLOAT, [n])], \
                                 [h.make_tensor_value_info('y', T.FLOAT, [n])]); \
                onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 17)]), d / 'erf.onnx')";
    ok(Command::new(python()).args(["-c", code, s(&dir)]).current_dir(repo()));
    let model = dir.join("erf.onnx");
    let it = dir.join("interp");
    ok(rlxc().args(["run", s(&model), "--target", "interp", "--input", &format!("x={}", s(&x)), "-o", s(&it)]));
    let ptxas = rlxc::targets::cuda::ptxas_of(&python()).unwrap_or_else(|e| panic!("{e}"));
    for exact in [false, true] {
        for sm in ["80", "90"] {
            let art = dir.join(format!("art{sm}{exact}"));
            let mut c = rlxc();
            c.args(["compile", s(&model), "--target", "cuda", "--sm", sm, "--emit-ir", "-o", s(&art)]);
            if exact {
                c.env("RLX_CUDA_ERF", "exact");
            }
            ok(&mut c);
            let ptx = std::fs::read_to_string(art.join("erf.ptx")).unwrap();
            let approx = ptx.contains("rcp.approx.ftz.f32") && ptx.contains("ex2.approx.ftz.f32");
            assert_eq!(approx, !exact, "RLX_CUDA_ERF=exact {exact}: approximations {approx}");
            assert_eq!(ptx.contains("rcp.rn.f32"), exact, "RLX_CUDA_ERF=exact {exact}: rcp.rn.f32");
            ok(Command::new(&ptxas).args([&format!("-arch=sm_{sm}"), s(&art.join("erf.ptx")), "-o", s(&art.join("k.cubin"))]));
            if sm == "80" {
                continue;
            }
            let emu = dir.join(format!("emu{exact}"));
            ok(Command::new(python()).arg("tests/gpu/emulate_cuda.py").args([s(&art), "erf", s(&emu), s(&x)]).current_dir(repo()));
            let (want, got) = (common::npy(&it.join("y.npy")).to_f64_vec(), common::npy(&emu.join("y.npy")).to_f64_vec());
            assert_eq!(want.len(), got.len());
            let n = want.len();
            assert!(got[n - 1].is_nan() && got[n - 3] == 1.0 && got[n - 2] == -1.0, "erf(inf, -inf, NaN): {:?}", &got[n - 3..]);
            let d = want[..n - 3].iter().zip(&got[..n - 3]).map(|(w, g)| (w - g).abs()).fold(0.0, f64::max);
            eprintln!("erf (RLX_CUDA_ERF=exact {exact}): emulated cuda vs interp max abs {d:.3e} over {} points", n - 3);
            assert!(d <= 4e-7, "{d}");
        }
    }
}
