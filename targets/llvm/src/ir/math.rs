//! Inline f32 exp and erf in plain LLVM instructions (no libm call), for scalars and `<n x float>`
//! vectors alike, so elementwise loops vectorize and vector loops stay vector.
//!
//! - exp: Cephes-style range reduction x = n·ln2 + r, degree-6 polynomial on r, scaling by 2^n built
//!   from the exponent bits in two factors (so the whole range up to FLT_MAX and down into the
//!   subnormals is covered); +inf above ln(FLT_MAX), 0 below -103.97, NaN stays NaN.
//! - erf: the Taylor series for |x| < 0.5, Abramowitz & Stegun 7.1.26 (with the exp above) beyond,
//!   sign restored with copysign.
//! - tanh: Cephes `tanhf`: x + x³·P(x²) (degree-4 P) for |x| < 0.625, else 1 − 2/(e^{2|x|} + 1) with the
//!   exp above, sign restored with copysign; ±1 for large |x|, NaN stays NaN.
//!
//! - sigmoid (`fast_sigmoid`): 1 / (1 + e^-x) with the exp's argument clamped to [-87, 88] (one scaling),
//!   the reduction by FMAs and a shifter constant (no round / convert).
//! - log (`fast_log`): Cephes `logf`, for the GPU writer (NVPTX lowers `llvm.log.f32` to a library
//!   call); with it and exp, the GPU writer's f32 pow, sinh and cosh (`pow_f32`, `sinh_cosh_f32`);
//!   its tan is sin / cos of the f64 forms below; f64 exp and log (`exp_f64`, `log_f64`).
//!
//! Measured errors (f64 references, a dense grid and special values) are checked by
//! `tests/native/math_accuracy.py` (run from `compiler/rlxc/tests/native.rs`), which states the bounds.
//! f64 keeps LLVM's intrinsics / libm.

use super::Writer;

mod gpu_erf;

/// The bits of the shifter 1.5·2²³ (`exp_parts`): a float in [2²³, 2²⁴) holding the integer n in its
/// low mantissa bits has these bits + n.
const SHIFTER_BITS: i32 = 0x4B40_0000;

fn hexf(c: f64) -> String {
    format!("0x{:016X}", (c as f32 as f64).to_bits())
}

impl<'a> Writer<'a> {
    /// Type and constant spellings for `lanes` (1 = scalar).
    fn fty(lanes: u32) -> (String, String) {
        if lanes == 1 {
            ("float".into(), "i32".into())
        } else {
            (format!("<{lanes} x float>"), format!("<{lanes} x i32>"))
        }
    }

    fn fk(lanes: u32, c: f64) -> String {
        if lanes == 1 {
            hexf(c)
        } else {
            format!("splat (float {})", hexf(c))
        }
    }

    fn ik(lanes: u32, c: i32) -> String {
        if lanes == 1 {
            c.to_string()
        } else {
            format!("splat (i32 {c})")
        }
    }

    fn fintr(&mut self, base: &str, lanes: u32, args: &[&str]) -> String {
        let (t, _) = Self::fty(lanes);
        let suffix = if lanes == 1 { "f32".to_string() } else { format!("v{lanes}f32") };
        let name = format!("llvm.{base}.{suffix}");
        let sig: Vec<&str> = args.iter().map(|_| t.as_str()).collect();
        self.decls.insert(format!("declare {t} @{name}({})", sig.join(", ")));
        let a: Vec<String> = args.iter().map(|x| format!("{t} {x}")).collect();
        self.op(format!("call {t} @{name}({})", a.join(", ")))
    }

    /// The core of [`Self::fast_exp`]: `x` clamped to [lo, hi]
    /// (selects keep NaN: comparisons with NaN are false), x = n·ln2 + r, the degree-6 polynomial
    /// y = e^r, and n as an integer. n = round(x·log2 e) comes out of one FMA with the shifter 1.5·2²³
    /// (`s`, whose low mantissa bits hold n; n as a float is `s` − the shifter, exact; as an integer
    /// `s`'s bits − those of the shifter), so no round, NaN guard or float-to-int conversion (whose
    /// NaN would be poison); r = x − n·ln 2 in two FMAs (Cody–Waite), e^r = 1 + r·(1 + r·P(r)) by
    /// Horner. The FMAs are `llvm.fmuladd` (fused where the target has FMA, never a libm call). A NaN
    /// x gives a NaN y, and n is then garbage that multiplies it.
    fn exp_parts(&mut self, x: &str, lanes: u32, (hi_c, lo_c): (f64, f64)) -> (String, String) {
        let (t, it) = Self::fty(lanes);
        let k = |c: f64| Self::fk(lanes, c);
        let xc = self.clamp_keep_nan(x, (lo_c, hi_c), lanes);
        let (s, n) = self.shifted_round(&xc, std::f64::consts::LOG2_E, 0, lanes);
        // r = x − n·C1 + n·(−C2), C1 + C2 = ln 2.
        let xn = self.fintr("fmuladd", lanes, &[&n, &k(-0.693_359_375), &xc]);
        let r = self.fintr("fmuladd", lanes, &[&n, &k(2.121_944_40e-4), &xn]);
        let y = self.exp_poly(&r, lanes);
        let si = self.op(format!("bitcast {t} {s} to {it}"));
        let ni = self.op(format!("sub {it} {si}, {}", Self::ik(lanes, SHIFTER_BITS)));
        (y, ni)
    }

    /// `x` clamped to [lo, hi] by two selects, which keep NaN (comparisons with NaN are false).
    fn clamp_keep_nan(&mut self, x: &str, (lo, hi): (f64, f64), lanes: u32) -> String {
        let (t, _) = Self::fty(lanes);
        let k = |c: f64| Self::fk(lanes, c);
        let cmp_t = if lanes == 1 { "i1".to_string() } else { format!("<{lanes} x i1>") };
        let over = self.op(format!("fcmp ogt {t} {x}, {}", k(hi)));
        let xc = self.op(format!("select {cmp_t} {over}, {t} {}, {t} {x}", k(hi)));
        let under = self.op(format!("fcmp olt {t} {xc}, {}", k(lo)));
        self.op(format!("select {cmp_t} {under}, {t} {}, {t} {xc}", k(lo)))
    }

    /// `s` = x·`scale` + 1.5·2²³ + `bias` rounded to an integer (one FMA; |x·scale| < 2²²), and n =
    /// round(x·scale) as a float (`s` − the shifter, exact): `s`'s bits are [`SHIFTER_BITS`] + bias + n.
    fn shifted_round(&mut self, x: &str, scale: f64, bias: i32, lanes: u32) -> (String, String) {
        let (t, _) = Self::fty(lanes);
        let k = |c: f64| Self::fk(lanes, c);
        let shifter = 12_582_912.0 + bias as f64;
        let s = self.fintr("fmuladd", lanes, &[x, &k(scale), &k(shifter)]);
        let n = self.op(format!("fsub {t} {s}, {}", k(shifter)));
        (s, n)
    }

    /// e^r for the reduced argument r (|r| ≤ ln2 / 2): 1 + r·(1 + r·P(r)), P Cephes `expf`'s degree-5
    /// polynomial, by Horner in FMAs.
    fn exp_poly(&mut self, r: &str, lanes: u32) -> String {
        let k = |c: f64| Self::fk(lanes, c);
        let coeffs = [1.987_569_150_0e-4, 1.398_199_950_7e-3, 8.333_451_907_3e-3, 4.166_579_589_4e-2, 1.666_666_545_9e-1, 5.000_000_120_1e-1, 1.0, 1.0];
        let mut p = k(coeffs[0]);
        for &c in &coeffs[1..] {
            p = self.fintr("fmuladd", lanes, &[&p, r, &k(c)]);
        }
        p
    }

    /// 2^`n` (an integer in [-126, 127]) as a float: its exponent bits.
    fn pow2(&mut self, n: &str, lanes: u32) -> String {
        let (t, it) = Self::fty(lanes);
        let e = self.op(format!("add {it} {n}, {}", Self::ik(lanes, 127)));
        let e = self.op(format!("shl {it} {e}, {}", Self::ik(lanes, 23)));
        self.op(format!("bitcast {it} {e} to {t}"))
    }

    /// e^x for f32 scalars (`lanes` = 1) or `<lanes x float>` vectors.
    pub(super) fn fast_exp(&mut self, x: &str, lanes: u32) -> String {
        let (t, it) = Self::fty(lanes);
        let k = |c: f64| Self::fk(lanes, c);
        let cmp_t = if lanes == 1 { "i1".to_string() } else { format!("<{lanes} x i1>") };
        // Clamped to [-103.97, ln(FLT_MAX)].
        let (hi_c, lo_c) = (88.722_839_355_468_75, -103.972_084_045_410_16);
        let (y, ni) = self.exp_parts(x, lanes, (hi_c, lo_c));
        // 2^n as 2^(n>>1) · 2^(n - (n>>1)): n is in [-150, 128] after the clamp, each factor a normal
        // float, so the top of the range reaches FLT_MAX and the bottom rounds into the subnormals.
        let mut res = y;
        let n1 = self.op(format!("ashr {it} {ni}, {}", Self::ik(lanes, 1)));
        let n2 = self.op(format!("sub {it} {ni}, {n1}"));
        for part in [n1, n2] {
            let s = self.pow2(&part, lanes);
            res = self.op(format!("fmul {t} {res}, {s}"));
        }
        let over = self.op(format!("fcmp ogt {t} {x}, {}", k(hi_c)));
        let res = self.op(format!("select {cmp_t} {over}, {t} {}, {t} {res}", if lanes == 1 { "0x7FF0000000000000".to_string() } else { "splat (float 0x7FF0000000000000)".to_string() }));
        let under = self.op(format!("fcmp olt {t} {x}, {}", k(lo_c)));
        self.op(format!("select {cmp_t} {under}, {t} {}, {t} {res}", k(0.0)))
    }

    /// 1 / (1 + e^-x) for f32 scalars or vectors, x clamped to [-88, 87] (so -x is in [-87, 88], where
    /// 2^n is one normal factor, n in [-126, 127]) — beyond, the sum 1 + e^-x is 1 or e^-x overflows
    /// the result's precision alike, so the clamp costs nothing the caller can see (sigmoid(-88.7)
    /// would be 6e-39, here 6e-39 as well: its error is absolute, below 1e-38). SiLU's sigmoid is most
    /// of an EfficientNet's elementwise work, so this is `fast_exp`'s reduction in fewer instructions:
    /// - n = round(-x·log2 e) comes out of one FMA with the shifter 1.5·2²³ + 127 (`s`): its low
    ///   mantissa bits hold n + 127, so 2^n is `s`'s bits shifted left by 23 and n itself `s` − the
    ///   shifter (exact) — instead of a round, a NaN guard, a float-to-int conversion and an add;
    /// - r = −x − n·ln 2 as two FMAs (Cody–Waite's two parts of ln 2), e^r = 1 + r·(1 + r·P(r)) by
    ///   Horner in FMAs (`fast_exp`'s polynomial).
    /// The FMAs are `llvm.fmuladd` (fused where the target has FMA, never a libm call). NaN stays NaN
    /// (through r; `s`'s bits are then garbage times NaN).
    pub(super) fn fast_sigmoid(&mut self, x: &str, lanes: u32) -> String {
        let (t, it) = Self::fty(lanes);
        let k = |c: f64| Self::fk(lanes, c);
        let xc = self.clamp_keep_nan(x, (-88.0, 87.0), lanes);
        let (s, n) = self.shifted_round(&xc, -std::f64::consts::LOG2_E, 127, lanes);
        // r = n·C2 − (x + n·C1), C1 + (−C2) = ln 2.
        let xn = self.fintr("fmuladd", lanes, &[&n, &k(0.693_359_375), &xc]);
        let nxn = self.op(format!("fneg {t} {xn}"));
        let r = self.fintr("fmuladd", lanes, &[&n, &k(2.121_944_40e-4), &nxn]);
        let p = self.exp_poly(&r, lanes);
        let si = self.op(format!("bitcast {t} {s} to {it}"));
        let e = self.op(format!("shl {it} {si}, {}", Self::ik(lanes, 23)));
        let sc = self.op(format!("bitcast {it} {e} to {t}"));
        let ex = self.op(format!("fmul {t} {p}, {sc}"));
        let d = self.op(format!("fadd {t} {ex}, {}", k(1.0)));
        self.op(format!("fdiv {t} {}, {d}", k(1.0)))
    }

    /// tanh(x) for f32 scalars or vectors.
    pub(super) fn fast_tanh(&mut self, x: &str, lanes: u32) -> String {
        let (t, _) = Self::fty(lanes);
        let k = |c: f64| Self::fk(lanes, c);
        let cmp_t = if lanes == 1 { "i1".to_string() } else { format!("<{lanes} x i1>") };
        let ax = self.fintr("fabs", lanes, &[x]);
        // Small |x|: odd polynomial.
        let z = self.op(format!("fmul {t} {x}, {x}"));
        let coeffs = [-5.704_988_727_45e-3, 2.063_908_879_54e-2, -5.373_971_555_31e-2, 1.333_144_220_36e-1, -3.333_328_194_22e-1];
        let mut p = k(coeffs[0]);
        for &c in &coeffs[1..] {
            let m = self.op(format!("fmul contract {t} {p}, {z}"));
            p = self.op(format!("fadd contract {t} {m}, {}", k(c)));
        }
        let pz = self.op(format!("fmul {t} {p}, {z}"));
        let pzx = self.op(format!("fmul contract {t} {pz}, {x}"));
        let small = self.op(format!("fadd contract {t} {pzx}, {x}"));
        // Large |x|: 1 - 2/(e^{2|x|} + 1), with the sign of x.
        let two = self.op(format!("fmul {t} {ax}, {}", k(2.0)));
        let e = self.fast_exp(&two, lanes);
        let d = self.op(format!("fadd {t} {e}, {}", k(1.0)));
        let q = self.op(format!("fdiv {t} {}, {d}", k(2.0)));
        let big = self.op(format!("fsub {t} {}, {q}", k(1.0)));
        let big = self.fintr("copysign", lanes, &[&big, x]);
        // NaN fails the comparison and takes the polynomial branch, which keeps it NaN.
        let is_big = self.op(format!("fcmp ogt {t} {ax}, {}", k(0.625)));
        self.op(format!("select {cmp_t} {is_big}, {t} {big}, {t} {small}"))
    }

    /// erf(x) for f32 scalars or vectors.
    pub(super) fn fast_erf(&mut self, x: &str, lanes: u32) -> String {
        self.erf_form(x, lanes, false)
    }

    /// erf(x): A&S 7.1.26 for |x| ≥ 0.5, the Taylor series below. `gpu_approx` (the GPU writer's form,
    /// `math/gpu_erf.rs`): its reciprocal and its e^(−x²) by PTX's approximate instructions.
    fn erf_form(&mut self, x: &str, lanes: u32, gpu_approx: bool) -> String {
        let (t, _) = Self::fty(lanes);
        let k = |c: f64| Self::fk(lanes, c);
        let ax = self.fintr("fabs", lanes, &[x]);
        let d = self.op(format!("fmul contract {t} {ax}, {}", k(0.327_591_1)));
        let d = self.op(format!("fadd contract {t} {d}, {}", k(1.0)));
        let tt = if gpu_approx { self.rcp_approx(&d) } else { self.op(format!("fdiv {t} {}, {d}", k(1.0))) };
        let coeffs = [1.061_405_429, -1.453_152_027, 1.421_413_741, -0.284_496_736, 0.254_829_592];
        let mut p = k(coeffs[0]);
        for &c in &coeffs[1..] {
            let m = self.op(format!("fmul contract {t} {p}, {tt}"));
            p = self.op(format!("fadd contract {t} {m}, {}", k(c)));
        }
        let p = self.op(format!("fmul {t} {p}, {tt}"));
        let sq = self.op(format!("fmul {t} {ax}, {ax}"));
        let e = if gpu_approx {
            self.exp_neg_approx(&sq)
        } else {
            let nsq = self.op(format!("fneg {t} {sq}"));
            self.fast_exp(&nsq, lanes)
        };
        let pe = self.op(format!("fmul {t} {p}, {e}"));
        let y = self.op(format!("fsub {t} {}, {pe}", k(1.0)));
        // (The GPU's: PTX's `copysign.f32` — sign of its first operand, magnitude of its second —, one
        // instruction where LLVM's NVPTX expands `llvm.copysign` into six.)
        let big = if gpu_approx && lanes == 1 {
            self.op(format!("call float asm \"copysign.f32 $0, $1, $2;\", \"=f,f,f\"(float {x}, float {y}) #2"))
        } else {
            self.fintr("copysign", lanes, &[&y, x])
        };
        // |x| < 0.5: the Taylor series x·(2/√π)·Σ (-x²)^k / (k!(2k+1)), k ≤ 6 (truncation < 1e-9), which
        // keeps the relative accuracy near 0 that 1 − t·P·e^{-x²} loses to cancellation.
        let taylor = [1.0 / 9360.0, -1.0 / 1320.0, 1.0 / 216.0, -1.0 / 42.0, 1.0 / 10.0, -1.0 / 3.0, 1.0];
        let mut q = k(taylor[0]);
        for &c in &taylor[1..] {
            let m = self.op(format!("fmul contract {t} {q}, {sq}"));
            q = self.op(format!("fadd contract {t} {m}, {}", k(c)));
        }
        let q = self.op(format!("fmul {t} {q}, {}", k(std::f64::consts::FRAC_2_SQRT_PI)));
        let small = self.op(format!("fmul {t} {q}, {x}"));
        let cmp_t = if lanes == 1 { "i1".to_string() } else { format!("<{lanes} x i1>") };
        // NaN fails the comparison and takes the series branch, which keeps it NaN.
        let is_big = self.op(format!("fcmp oge {t} {ax}, {}", k(0.5)));
        self.op(format!("select {cmp_t} {is_big}, {t} {big}, {t} {small}"))
    }

    /// sin(x) or cos(x) (`cos`) of an f32 scalar in plain LLVM instructions, for the GPU writer (the
    /// NVPTX back end has no lowering for `llvm.sin`/`llvm.cos` short of the approximate `sin.approx`,
    /// whose error grows with |x|: RoPE's angles reach thousands of radians). Computed in f64: the
    /// quadrant k = round(x·2/π), r = x − k·π/2 with π/2 in two parts (fma, so r is exact to f64 for
    /// |x| below 2^50; beyond, NaN: k has lost the quadrant), Taylor series to r¹³ / r¹² on |r| ≤ π/4 (truncation below
    /// 1e-12), the quadrant's sign and swap, rounded once to f32 — within an ulp of the f32 result of
    /// the exact function (the interpreter's f64 libm rounded). ±inf and NaN give NaN.
    pub(super) fn sin_cos_f32(&mut self, x: &str, cos: bool) -> String {
        let xd = self.op(format!("fpext float {x} to double"));
        let v = self.sin_cos_f64(&xd, cos);
        self.op(format!("fptrunc double {v} to float"))
    }

    /// tan(x) of an f32 scalar for the GPU writer: sin / cos of the f64 forms above, divided in f64
    /// and rounded once (relative error a few f64 ulps before the rounding, so within an ulp of the
    /// rounded exact value except where cos x is within ~1e-9 of 0 and tan is huge anyway).
    pub(super) fn tan_f32(&mut self, x: &str) -> String {
        let xd = self.op(format!("fpext float {x} to double"));
        let s = self.sin_cos_f64(&xd, false);
        let c = self.sin_cos_f64(&xd, true);
        let t = self.op(format!("fdiv double {s}, {c}"));
        self.op(format!("fptrunc double {t} to float"))
    }

    /// sin or cos (`cos`) of a double `xd` holding an f32 value: the body of [`Self::sin_cos_f32`].
    fn sin_cos_f64(&mut self, xd: &str, cos: bool) -> String {
        let dk = |c: f64| format!("0x{:016X}", c.to_bits());
        let q = self.op(format!("fmul double {xd}, {}", dk(std::f64::consts::FRAC_2_PI)));
        self.decls.insert("declare double @llvm.roundeven.f64(double)".into());
        self.decls.insert("declare double @llvm.floor.f64(double)".into());
        self.decls.insert("declare double @llvm.fma.f64(double, double, double)".into());
        let k = self.op(format!("call double @llvm.roundeven.f64(double {q})"));
        let nk = self.op(format!("fneg double {k}"));
        let (hi, lo) = (std::f64::consts::FRAC_PI_2, 6.123_233_995_736_766e-17);
        let r = self.op(format!("call double @llvm.fma.f64(double {nk}, double {}, double {xd})", dk(hi)));
        let r = self.op(format!("call double @llvm.fma.f64(double {nk}, double {}, double {r})", dk(lo)));
        let z = self.op(format!("fmul double {r}, {r}"));
        // Horner in z over 1/n! with alternating signs: sin r = r·(1 − z/3! + z²/5! − …), cos r = 1 − z/2! + z²/4! − ….
        let series = |me: &mut Self, first: u32| -> String {
            let terms: Vec<f64> = (0..7)
                .map(|i| {
                    let n = first + 2 * i;
                    let f: f64 = (1..=n).map(|j| j as f64).product();
                    if i % 2 == 0 { 1.0 / f } else { -1.0 / f }
                })
                .collect();
            let mut p = dk(terms[6]);
            for &c in terms[..6].iter().rev() {
                let m = me.op(format!("fmul double {p}, {z}"));
                p = me.op(format!("fadd double {m}, {}", dk(c)));
            }
            p
        };
        let ps = series(self, 1);
        let s = self.op(format!("fmul double {ps}, {r}"));
        let c = series(self, 0);
        // The quadrant k mod 4 (exact while |k| < 2^53; NaN/inf give NaN through r anyway, the quadrant
        // is taken as 0 so the conversion below is never poison); cos x = sin(x + π/2): quadrant + 1.
        let k4 = self.op(format!("fmul double {k}, 0x3FD0000000000000"));
        let fl = self.op(format!("call double @llvm.floor.f64(double {k4})"));
        let m = self.op(format!("call double @llvm.fma.f64(double {fl}, double 0xC010000000000000, double {k})"));
        let ok = self.op(format!("fcmp ord double {m}, 0.0"));
        let m = self.op(format!("select i1 {ok}, double {m}, double 0.0"));
        let qi = self.op(format!("fptosi double {m} to i32"));
        let qi = if cos { self.op(format!("add i32 {qi}, 1")) } else { qi };
        let odd = self.op(format!("and i32 {qi}, 1"));
        let odd = self.op(format!("icmp ne i32 {odd}, 0"));
        let neg = self.op(format!("and i32 {qi}, 2"));
        let neg = self.op(format!("icmp ne i32 {neg}, 0"));
        let v = self.op(format!("select i1 {odd}, double {c}, double {s}"));
        let nv = self.op(format!("fneg double {v}"));
        let v = self.op(format!("select i1 {neg}, double {nv}, double {v}"));
        // Past 2^50 the quadrant's low bits are lost in k: NaN rather than a wrong number.
        self.decls.insert("declare double @llvm.fabs.f64(double)".into());
        let ax = self.op(format!("call double @llvm.fabs.f64(double {xd})"));
        let big = self.op(format!("fcmp oge double {ax}, {}", dk(2f64.powi(50))));
        self.op(format!("select i1 {big}, double 0x7FF8000000000000, double {v}"))
    }

    /// ln(x) for f32 scalars or vectors (Cephes `logf`): subnormals scaled by 2^25 first; x = m·2^e
    /// with m in [√½, √2) from the exponent bits, f = m − 1, ln x = f − f²/2 + f³·P(f) (degree-8 P)
    /// + e·ln2 with ln2 in two parts. Cephes states 7.6e-8 peak relative error over the f32 range;
    /// `tests/gpu/emulate_cuda.py` measures it (`compiler/rlxc/tests/cuda.rs`). ln(+inf) = +inf,
    /// ln(±0) = −inf, negative or NaN x give NaN. The GPU writer's log (NVPTX has no lowering for
    /// `llvm.log.f32` but a library call).
    pub(super) fn fast_log(&mut self, x: &str, lanes: u32) -> String {
        let (t, it) = Self::fty(lanes);
        let k = |c: f64| Self::fk(lanes, c);
        let ik = |c: i32| Self::ik(lanes, c);
        let cmp_t = if lanes == 1 { "i1".to_string() } else { format!("<{lanes} x i1>") };
        let small = self.op(format!("fcmp olt {t} {x}, {}", k(f32::MIN_POSITIVE as f64)));
        let xs = self.op(format!("fmul {t} {x}, {}", k(33_554_432.0)));
        let xn = self.op(format!("select {cmp_t} {small}, {t} {xs}, {t} {x}"));
        let adj = self.op(format!("select {cmp_t} {small}, {it} {}, {it} {}", ik(-25), ik(0)));
        let bits = self.op(format!("bitcast {t} {xn} to {it}"));
        let eb = self.op(format!("lshr {it} {bits}, {}", ik(23)));
        let e = self.op(format!("add {it} {eb}, {}", ik(-126)));
        let e = self.op(format!("add {it} {e}, {adj}"));
        let mb = self.op(format!("and {it} {bits}, {}", ik(0x007F_FFFF)));
        let mb = self.op(format!("or {it} {mb}, {}", ik(0x3F00_0000)));
        let m = self.op(format!("bitcast {it} {mb} to {t}"));
        // m in [0.5, 1): below √½ take 2m and e − 1, so f = m − 1 is in [−0.293, 0.414].
        let lo = self.op(format!("fcmp olt {t} {m}, {}", k(std::f64::consts::FRAC_1_SQRT_2)));
        let m2 = self.op(format!("fadd {t} {m}, {m}"));
        let m = self.op(format!("select {cmp_t} {lo}, {t} {m2}, {t} {m}"));
        let e1 = self.op(format!("add {it} {e}, {}", ik(-1)));
        let e = self.op(format!("select {cmp_t} {lo}, {it} {e1}, {it} {e}"));
        let f = self.op(format!("fsub {t} {m}, {}", k(1.0)));
        let fe = self.op(format!("sitofp {it} {e} to {t}"));
        let z = self.op(format!("fmul {t} {f}, {f}"));
        let coeffs = [7.037_683_629_2e-2, -1.151_461_031_0e-1, 1.167_699_874_0e-1, -1.242_014_084_6e-1, 1.424_932_278_7e-1, -1.666_805_766_5e-1, 2.000_071_476_5e-1, -2.499_999_399_3e-1, 3.333_333_117_4e-1];
        let mut p = k(coeffs[0]);
        for &c in &coeffs[1..] {
            let m = self.op(format!("fmul contract {t} {p}, {f}"));
            p = self.op(format!("fadd contract {t} {m}, {}", k(c)));
        }
        let pf = self.op(format!("fmul {t} {p}, {f}"));
        let y = self.op(format!("fmul {t} {pf}, {z}"));
        let a = self.op(format!("fmul {t} {fe}, {}", k(-2.121_944_40e-4)));
        let y = self.op(format!("fadd {t} {y}, {a}"));
        let hz = self.op(format!("fmul {t} {z}, {}", k(-0.5)));
        let y = self.op(format!("fadd {t} {y}, {hz}"));
        let r = self.op(format!("fadd {t} {f}, {y}"));
        let b = self.op(format!("fmul {t} {fe}, {}", k(0.693_359_375)));
        let r = self.op(format!("fadd {t} {r}, {b}"));
        let inf = if lanes == 1 { "0x7FF0000000000000".to_string() } else { "splat (float 0x7FF0000000000000)".to_string() };
        let ninf = if lanes == 1 { "0xFFF0000000000000".to_string() } else { "splat (float 0xFFF0000000000000)".to_string() };
        let nan = if lanes == 1 { "0x7FF8000000000000".to_string() } else { "splat (float 0x7FF8000000000000)".to_string() };
        let pinf = self.op(format!("fcmp oeq {t} {x}, {inf}"));
        let r = self.op(format!("select {cmp_t} {pinf}, {t} {inf}, {t} {r}"));
        let zero = self.op(format!("fcmp oeq {t} {x}, {}", k(0.0)));
        let r = self.op(format!("select {cmp_t} {zero}, {t} {ninf}, {t} {r}"));
        let bad = self.op(format!("fcmp ult {t} {x}, {}", k(0.0)));
        self.op(format!("select {cmp_t} {bad}, {t} {nan}, {t} {r}"))
    }

    /// x^y of f32 scalars for the GPU writer: e^(y·ln|x|) with the log and exp above, the sign of x
    /// for an odd integer y, and C's `powf` special cases: x^±0 = 1 and 1^y = 1 (NaN included),
    /// (−1)^±inf = 1, a finite negative x with a non-integer y gives NaN. y·ln|x| is rounded once
    /// (relative 6e-8) on top of the log's error, so the result's relative error is about
    /// 2e-7·(1 + |y·ln|x||) plus exp's: below 3e-5 wherever the result is a normal f32.
    pub(super) fn pow_f32(&mut self, x: &str, y: &str) -> String {
        let k = |c: f64| hexf(c);
        let ax = self.fintr("fabs", 1, &[x]);
        let l = self.fast_log(&ax, 1);
        let p = self.op(format!("fmul float {y}, {l}"));
        let m = self.fast_exp(&p, 1);
        let fy = self.fintr("floor", 1, &[y]);
        let is_int = self.op(format!("fcmp oeq float {fy}, {y}"));
        let hy = self.op(format!("fmul float {y}, {}", k(0.5)));
        let fhy = self.fintr("floor", 1, &[&hy]);
        let even = self.op(format!("fcmp oeq float {fhy}, {hy}"));
        let odd = self.op(format!("xor i1 {even}, true"));
        let odd = self.op(format!("and i1 {is_int}, {odd}"));
        let sm = self.fintr("copysign", 1, &[&m, x]);
        let r = self.op(format!("select i1 {odd}, float {sm}, float {m}"));
        // A finite negative base with a non-integer exponent (NaN included): NaN.
        let neg = self.op(format!("fcmp olt float {x}, {}", k(0.0)));
        let fin = self.op(format!("fcmp one float {x}, 0xFFF0000000000000"));
        let frac = self.op(format!("xor i1 {is_int}, true"));
        let bad = self.op(format!("and i1 {neg}, {fin}"));
        let bad = self.op(format!("and i1 {bad}, {frac}"));
        let r = self.op(format!("select i1 {bad}, float 0x7FF8000000000000, float {r}"));
        // The ones: y = ±0, x = 1, and |x| = 1 with y = ±inf.
        let y0 = self.op(format!("fcmp oeq float {y}, {}", k(0.0)));
        let x1 = self.op(format!("fcmp oeq float {x}, {}", k(1.0)));
        let ax1 = self.op(format!("fcmp oeq float {ax}, {}", k(1.0)));
        let ay = self.fintr("fabs", 1, &[y]);
        let yinf = self.op(format!("fcmp oeq float {ay}, 0x7FF0000000000000"));
        let one = self.op(format!("and i1 {ax1}, {yinf}"));
        let one = self.op(format!("or i1 {one}, {y0}"));
        let one = self.op(format!("or i1 {one}, {x1}"));
        self.op(format!("select i1 {one}, float {}, float {r}", k(1.0)))
    }

    /// sinh(x) or cosh(x) (`cosh`) of an f32 scalar for the GPU writer, from h = e^(|x|/2) (the exp
    /// above): e^|x|/2 as h·(h/2), so it overflows only where the result does, and e^−|x|/2 as
    /// ½/h²; cosh the sum, sinh the difference with the sign of x for |x| ≥ 1 and the Taylor series
    /// to x¹¹ (truncation below 3e-8 relative) for |x| < 1, where the difference cancels. Relative
    /// error a few f32 ulps; ±inf and NaN pass through.
    pub(super) fn sinh_cosh_f32(&mut self, x: &str, cosh: bool) -> String {
        let k = |c: f64| hexf(c);
        let ax = self.fintr("fabs", 1, &[x]);
        let half = self.op(format!("fmul float {ax}, {}", k(0.5)));
        let h = self.fast_exp(&half, 1);
        let hh = self.op(format!("fmul float {h}, {h}"));
        let h2 = self.op(format!("fmul float {h}, {}", k(0.5)));
        let big = self.op(format!("fmul float {h}, {h2}"));
        let inv = self.op(format!("fdiv float {}, {hh}", k(0.5)));
        if cosh {
            return self.op(format!("fadd float {big}, {inv}"));
        }
        let d = self.op(format!("fsub float {big}, {inv}"));
        let d = self.fintr("copysign", 1, &[&d, x]);
        let z = self.op(format!("fmul float {x}, {x}"));
        let terms = [1.0 / 39_916_800.0, 1.0 / 362_880.0, 1.0 / 5040.0, 1.0 / 120.0, 1.0 / 6.0, 1.0];
        let mut p = k(terms[0]);
        for &c in &terms[1..] {
            let m = self.op(format!("fmul contract float {p}, {z}"));
            p = self.op(format!("fadd contract float {m}, {}", k(c)));
        }
        let small = self.op(format!("fmul float {p}, {x}"));
        // NaN fails the comparison and takes the series, which keeps it NaN.
        let is_big = self.op(format!("fcmp oge float {ax}, {}", k(1.0)));
        self.op(format!("select i1 {is_big}, float {d}, float {small}"))
    }

    /// e^x of an f64 scalar for the GPU writer: n = round(x·log2 e), r = x − n·ln2 with ln2 in two
    /// parts (fma, exact), the Taylor series to r¹³ on |r| ≤ 0.347 (truncation below 5e-18), times 2^n
    /// in two normal factors; +inf above 709.78, 0 below −745.13, NaN stays NaN. A few f64 ulps
    /// (`compiler/rlxc/tests/cuda_math.rs` measures it against the interpreter's libm).
    pub(super) fn exp_f64(&mut self, x: &str) -> String {
        let dk = |c: f64| format!("0x{:016X}", c.to_bits());
        for d in ["roundeven", "fma"] {
            let args = if d == "fma" { "double, double, double" } else { "double" };
            self.decls.insert(format!("declare double @llvm.{d}.f64({args})"));
        }
        let (hi_c, lo_c) = (709.782_712_893_384, -745.133_219_101_941_2);
        let hi = self.op(format!("fcmp ogt double {x}, {}", dk(hi_c)));
        let xc = self.op(format!("select i1 {hi}, double {}, double {x}", dk(hi_c)));
        let lo = self.op(format!("fcmp olt double {xc}, {}", dk(lo_c)));
        let xc = self.op(format!("select i1 {lo}, double {}, double {xc}", dk(lo_c)));
        let xl = self.op(format!("fmul double {xc}, {}", dk(std::f64::consts::LOG2_E)));
        let n = self.op(format!("call double @llvm.roundeven.f64(double {xl})"));
        let nn = self.op(format!("fneg double {n}"));
        let r = self.op(format!("call double @llvm.fma.f64(double {nn}, double {}, double {xc})", dk(f64::from_bits(0x3FE6_2E42_FEE0_0000))));
        let r = self.op(format!("call double @llvm.fma.f64(double {nn}, double {}, double {r})", dk(f64::from_bits(0x3DEA_39EF_3579_3C76))));
        let mut p = dk(1.0 / (1..=13).map(|j| j as f64).product::<f64>());
        for i in (0..13).rev() {
            let c = 1.0 / (1..=i).map(|j| j as f64).product::<f64>();
            let m = self.op(format!("fmul double {p}, {r}"));
            p = self.op(format!("fadd double {m}, {}", dk(c)));
        }
        // n in [-1075, 1024] after the clamp: 2^n as 2^(n>>1)·2^(n − (n>>1)), each factor normal.
        let ord = self.op(format!("fcmp ord double {n}, 0.0"));
        let n0 = self.op(format!("select i1 {ord}, double {n}, double 0.0"));
        let ni = self.op(format!("fptosi double {n0} to i64"));
        let n1 = self.op(format!("ashr i64 {ni}, 1"));
        let n2 = self.op(format!("sub i64 {ni}, {n1}"));
        let mut res = p;
        for part in [n1, n2] {
            let e = self.op(format!("add i64 {part}, 1023"));
            let e = self.op(format!("shl i64 {e}, 52"));
            let f = self.op(format!("bitcast i64 {e} to double"));
            res = self.op(format!("fmul double {res}, {f}"));
        }
        let over = self.op(format!("fcmp ogt double {x}, {}", dk(hi_c)));
        let res = self.op(format!("select i1 {over}, double 0x7FF0000000000000, double {res}"));
        let under = self.op(format!("fcmp olt double {x}, {}", dk(lo_c)));
        self.op(format!("select i1 {under}, double 0.0, double {res}"))
    }

    /// ln(x) of an f64 scalar for the GPU writer: subnormals scaled by 2^54, x = m·2^e with m in
    /// [√½, √2), f = m − 1, s = f/(2 + f), ln m = 2s·Σ s^2k/(2k+1) to k = 12 (|s| ≤ 0.172: truncation
    /// below 1e-19), plus e·ln2 in two parts. ln(+inf) = +inf, ln(±0) = −inf, negative or NaN x give NaN.
    pub(super) fn log_f64(&mut self, x: &str) -> String {
        let dk = |c: f64| format!("0x{:016X}", c.to_bits());
        let small = self.op(format!("fcmp olt double {x}, {}", dk(f64::MIN_POSITIVE)));
        let xs = self.op(format!("fmul double {x}, {}", dk(2f64.powi(54))));
        let xn = self.op(format!("select i1 {small}, double {xs}, double {x}"));
        let adj = self.op(format!("select i1 {small}, i64 -54, i64 0"));
        let bits = self.op(format!("bitcast double {xn} to i64"));
        let eb = self.op(format!("lshr i64 {bits}, 52"));
        let e = self.op(format!("add i64 {eb}, -1022"));
        let e = self.op(format!("add i64 {e}, {adj}"));
        let mb = self.op(format!("and i64 {bits}, 4503599627370495"));
        let mb = self.op(format!("or i64 {mb}, 4602678819172646912"));
        let m = self.op(format!("bitcast i64 {mb} to double"));
        let lo = self.op(format!("fcmp olt double {m}, {}", dk(std::f64::consts::FRAC_1_SQRT_2)));
        let m2 = self.op(format!("fadd double {m}, {m}"));
        let m = self.op(format!("select i1 {lo}, double {m2}, double {m}"));
        let e1 = self.op(format!("add i64 {e}, -1"));
        let e = self.op(format!("select i1 {lo}, i64 {e1}, i64 {e}"));
        let f = self.op(format!("fsub double {m}, 1.0"));
        let d = self.op(format!("fadd double {f}, 2.0"));
        let sv = self.op(format!("fdiv double {f}, {d}"));
        let z = self.op(format!("fmul double {sv}, {sv}"));
        let mut p = dk(1.0 / 25.0);
        for k in (0..12).rev() {
            let m = self.op(format!("fmul double {p}, {z}"));
            p = self.op(format!("fadd double {m}, {}", dk(1.0 / (2 * k + 1) as f64)));
        }
        let s2 = self.op(format!("fadd double {sv}, {sv}"));
        let lm = self.op(format!("fmul double {s2}, {p}"));
        let fe = self.op(format!("sitofp i64 {e} to double"));
        let a = self.op(format!("fmul double {fe}, {}", dk(f64::from_bits(0x3DEA_39EF_3579_3C76))));
        let lm = self.op(format!("fadd double {lm}, {a}"));
        let b = self.op(format!("fmul double {fe}, {}", dk(f64::from_bits(0x3FE6_2E42_FEE0_0000))));
        let r = self.op(format!("fadd double {b}, {lm}"));
        let pinf = self.op(format!("fcmp oeq double {x}, 0x7FF0000000000000"));
        let r = self.op(format!("select i1 {pinf}, double 0x7FF0000000000000, double {r}"));
        let zero = self.op(format!("fcmp oeq double {x}, 0.0"));
        let r = self.op(format!("select i1 {zero}, double 0xFFF0000000000000, double {r}"));
        let bad = self.op(format!("fcmp ult double {x}, 0.0"));
        self.op(format!("select i1 {bad}, double 0x7FF8000000000000, double {r}"))
    }
}
