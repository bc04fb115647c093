//! Inline f32 exp and erf in plain LLVM instructions (no libm call), for scalars and `<n x float>`
//! vectors alike, so elementwise loops vectorize and vector loops stay vector.
//!
//! - exp: Cephes-style range reduction x = n·ln2 + r, degree-6 polynomial on r, scaling by 2^n built
//!   from the exponent bits; max relative error ≈ 2 ulp on [-87.3, 88.4]; +inf above 88.72, 0 below
//!   -103.97, NaN stays NaN.
//! - erf: Abramowitz & Stegun 7.1.26 on |x| with the exp above, sign restored with copysign; max
//!   absolute error 1.5e-7.
//! f64 keeps LLVM's intrinsics / libm.

use super::Writer;

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

    /// e^x for f32 scalars (`lanes` = 1) or `<lanes x float>` vectors.
    pub(super) fn fast_exp(&mut self, x: &str, lanes: u32) -> String {
        let (t, it) = Self::fty(lanes);
        let k = |c: f64| Self::fk(lanes, c);
        let cmp_t = if lanes == 1 { "i1".to_string() } else { format!("<{lanes} x i1>") };
        // Clamp (selects keep NaN: comparisons with NaN are false).
        let hi = self.op(format!("fcmp ogt {t} {x}, {}", k(88.376_262_664_794_9)));
        let xc = self.op(format!("select {cmp_t} {hi}, {t} {}, {t} {x}", k(88.376_262_664_794_9)));
        let lo = self.op(format!("fcmp olt {t} {xc}, {}", k(-87.336_544_750_553_1)));
        let xc = self.op(format!("select {cmp_t} {lo}, {t} {}, {t} {xc}", k(-87.336_544_750_553_1)));
        let xl = self.op(format!("fmul {t} {xc}, {}", k(std::f64::consts::LOG2_E)));
        let n = self.fintr("roundeven", lanes, &[&xl]);
        let a = self.op(format!("fmul {t} {n}, {}", k(0.693_359_375)));
        let r = self.op(format!("fsub {t} {xc}, {a}"));
        let b = self.op(format!("fmul {t} {n}, {}", k(-2.121_944_40e-4)));
        let r = self.op(format!("fsub {t} {r}, {b}"));
        let coeffs = [1.987_569_150_0e-4, 1.398_199_950_7e-3, 8.333_451_907_3e-3, 4.166_579_589_4e-2, 1.666_666_545_9e-1, 5.000_000_120_1e-1];
        let mut p = k(coeffs[0]);
        for &c in &coeffs[1..] {
            let m = self.op(format!("fmul contract {t} {p}, {r}"));
            p = self.op(format!("fadd contract {t} {m}, {}", k(c)));
        }
        let r2 = self.op(format!("fmul {t} {r}, {r}"));
        let pr = self.op(format!("fmul contract {t} {p}, {r2}"));
        let y = self.op(format!("fadd {t} {pr}, {r}"));
        let y = self.op(format!("fadd {t} {y}, {}", k(1.0)));
        // 2^n from the exponent bits (n is in [-126, 127] after the clamp). NaN becomes 0 first, so a
        // plain fptosi (one vcvttps2dq; the saturating intrinsic scalarizes) is never poison; the
        // result is NaN anyway through y.
        let ord = self.op(format!("fcmp ord {t} {n}, {}", k(0.0)));
        let n0 = self.op(format!("select {cmp_t} {ord}, {t} {n}, {t} {}", k(0.0)));
        let ni = self.op(format!("fptosi {t} {n0} to {it}"));
        let e = self.op(format!("add {it} {ni}, {}", Self::ik(lanes, 127)));
        let e = self.op(format!("shl {it} {e}, {}", Self::ik(lanes, 23)));
        let s = self.op(format!("bitcast {it} {e} to {t}"));
        let res = self.op(format!("fmul {t} {y}, {s}"));
        let over = self.op(format!("fcmp ogt {t} {x}, {}", k(88.722_839_355_468_75)));
        let res = self.op(format!("select {cmp_t} {over}, {t} {}, {t} {res}", if lanes == 1 { "0x7FF0000000000000".to_string() } else { "splat (float 0x7FF0000000000000)".to_string() }));
        let under = self.op(format!("fcmp olt {t} {x}, {}", k(-103.972_084_045_410_16)));
        self.op(format!("select {cmp_t} {under}, {t} {}, {t} {res}", k(0.0)))
    }

    /// erf(x) for f32 scalars or vectors.
    pub(super) fn fast_erf(&mut self, x: &str, lanes: u32) -> String {
        let (t, _) = Self::fty(lanes);
        let k = |c: f64| Self::fk(lanes, c);
        let ax = self.fintr("fabs", lanes, &[x]);
        let d = self.op(format!("fmul contract {t} {ax}, {}", k(0.327_591_1)));
        let d = self.op(format!("fadd contract {t} {d}, {}", k(1.0)));
        let tt = self.op(format!("fdiv {t} {}, {d}", k(1.0)));
        let coeffs = [1.061_405_429, -1.453_152_027, 1.421_413_741, -0.284_496_736, 0.254_829_592];
        let mut p = k(coeffs[0]);
        for &c in &coeffs[1..] {
            let m = self.op(format!("fmul contract {t} {p}, {tt}"));
            p = self.op(format!("fadd contract {t} {m}, {}", k(c)));
        }
        let p = self.op(format!("fmul {t} {p}, {tt}"));
        let sq = self.op(format!("fmul {t} {ax}, {ax}"));
        let nsq = self.op(format!("fneg {t} {sq}"));
        let e = self.fast_exp(&nsq, lanes);
        let pe = self.op(format!("fmul {t} {p}, {e}"));
        let y = self.op(format!("fsub {t} {}, {pe}", k(1.0)));
        self.fintr("copysign", lanes, &[&y, x])
    }
}
