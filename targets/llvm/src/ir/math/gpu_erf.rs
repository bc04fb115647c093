//! f32 erf for the GPU writer (`nvptx/`): the CPU's form (`fast_erf`, A&S 7.1.26 for |x| ≥ 0.5, the
//! Taylor series below) with its two costly pieces taken by PTX's approximate instructions:
//! - t = 1 / (1 + p·|x|) by `rcp.approx.ftz.f32` (`llvm.nvvm.rcp.approx.ftz.f`) instead of an IEEE
//!   `div.rn.f32`, which ptxas expands into a reciprocal, a Newton step and a branch to a slow path —
//!   the branch splits the tiled matmuls' epilogue (`vec_tile.rs`: every output's GELU in one basic
//!   block, interleaved) into one block per output. The divisor is ≥ 1, never subnormal nor zero;
//! - e^(−x²) as 2^(−x²·log2 e) by `ex2.approx.ftz.f32` (`llvm.nvvm.ex2.approx.ftz.f`), one
//!   instruction for `fast_exp`'s ~25 (clamp, range reduction, degree-6 polynomial, two scalings).
//!   Past |x| ≈ 9.4 the argument is below −126 and the result flushes to 0: erf is then 1 in f32 anyway.
//! NaN stays NaN (the series branch, as on the CPU), ±inf gives ±1.
//!
//! Only the GPU writer takes it (`Writer::gpu`: `scalar_only`); the CPU's LLVM IR is unchanged. Error
//! against f64 erf over 2.5M points of [−10, 10] (tests/gpu/erf_accuracy.py): 3.06e-7 max abs with the
//! approximations correctly rounded (the CPU form's 3.0e-7), 6.0e-7 with both at PTX's stated worst; on
//! the H200, 2.98e-7 from the interpreter over 254,010 of those points. Measured there (MiniLM seq 128,
//! against the `RLX_CUDA_ERF=exact` twin in the same rounds): batch 1 f32 347 → 340 µs, tf32 302 → 297,
//! bf16 268 → 266; batch 8 f32 1,184 → 1,121 (the FFN-up + GELU kernel 42.5 → 32.8 µs). `RLX_CUDA_ERF=exact`
//! at compile time gives the CPU's form (the PTX before session 20, byte for byte), to time the two.

use super::super::Writer;

impl<'a> Writer<'a> {
    /// erf(x) of an f32 scalar in the GPU writer.
    pub(in crate::ir) fn gpu_erf(&mut self, x: &str) -> String {
        let exact = std::env::var("RLX_CUDA_ERF").is_ok_and(|v| v == "exact");
        self.erf_form(x, 1, !exact)
    }

    /// 1 / `d` by `rcp.approx.ftz.f32` (f32 scalar).
    pub(super) fn rcp_approx(&mut self, d: &str) -> String {
        self.decls.insert("declare float @llvm.nvvm.rcp.approx.ftz.f(float)".into());
        self.op(format!("call float @llvm.nvvm.rcp.approx.ftz.f(float {d})"))
    }

    /// e^(−`sq`) by `ex2.approx.ftz.f32` of −sq·log2 e (f32 scalar, `sq` ≥ 0 or NaN).
    pub(super) fn exp_neg_approx(&mut self, sq: &str) -> String {
        self.exp2_scaled(sq, -std::f64::consts::LOG2_E)
    }

    /// e^`x` by `ex2.approx.ftz.f32` of x·log2 e (f32 scalar), for the tensor-core softmax
    /// ([`Writer::set_approx_exp`]): PTX's stated error 2 ulp, plus x·2⁻²⁴ relative from rounding
    /// the product (a softmax's arguments are ≤ 0 after the max; e^x below 2⁻¹²⁶ flushes to 0);
    /// −∞ gives 0, NaN stays NaN.
    pub(in crate::ir) fn exp_approx(&mut self, x: &str) -> String {
        self.exp2_scaled(x, std::f64::consts::LOG2_E)
    }

    /// 2^(`x`·`scale`) by `ex2.approx.ftz.f32`.
    fn exp2_scaled(&mut self, x: &str, scale: f64) -> String {
        let a = self.op(format!("fmul float {x}, {}", Self::fk(1, scale)));
        self.decls.insert("declare float @llvm.nvvm.ex2.approx.ftz.f(float)".into());
        self.op(format!("call float @llvm.nvvm.ex2.approx.ftz.f(float {a})"))
    }
}
