//! Loop form → WGSL text: one `@compute` entry point `kI` per launch, helpers emitted on demand.
//! Scalar semantics follow `targets/llvm/src/ir.rs` (the reference translation of MIR's elementwise
//! semantics): saturating float → int casts (NaN → 0), integer division by zero gives `x`, shifts by
//! ≥ the width give 0 (signed right shift: the sign fill), Python-style `mod`.

mod half;
mod tiled;

use crate::{BaseBuf, Dispatch};
use rlx_ir::lir::Lir;
use rlx_ir::loops::grid::{buffers_of, grid};
use rlx_ir::loops::{Access, Expr, IOp, Stmt, Var};
use rlx_ir::{BinaryOp, DType, UnaryOp};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write;

/// Invocations per workgroup (x) of the one-invocation-per-grid-point mapping (on the H200, 256
/// ran MiniLM's elementwise and data-movement kernels faster than 64: batch 32 13.5 → 11.5 ms).
pub const WORKGROUP_SIZE: u32 = 256;
const MAX_GROUPS_X: u64 = 65535;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ty {
    Index,
    S(DType),
}

/// With `int64` (SPIR-V targets, when the program has i64 values of its own) i64 is real 64-bit
/// arithmetic (SPIR-V `Int64`, Vulkan `shaderInt64`). Without it, the only i64 scalars are the
/// planner's (window counters, arg-reduction positions), bounded by tensor sizes (< 2^31 elements,
/// checked), and are computed in i32; i64 tensors there (gather indices, argmax outputs on targets
/// that do not claim i64 arithmetic) are read and written as two words (low word; high word = sign).
fn norm(d: DType) -> DType {
    if d == DType::I64 && !INT64.with(|c| c.get()) {
        DType::I32
    } else {
        d
    }
}

std::thread_local! {
    /// Whether the module being written uses real i64 (set by `module_text` for its duration).
    static INT64: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn wty(d: DType) -> Result<&'static str, String> {
    Ok(match norm(d) {
        DType::I64 => "i64",
        // Bytes are held widened (sign- or zero-extended) in 32 bits.
        DType::I8 | DType::I16 => "i32",
        DType::U8 | DType::U16 => "u32",
        // Half-precision storage types held widened (exactly) in f32 (`wgsl/half.rs`).
        DType::F32 | DType::F16 | DType::BF16 => "f32",
        DType::I32 => "i32",
        DType::U32 => "u32",
        DType::Bool => "bool",
        d => return Err(format!("dtype {d} is not supported by the shader targets")),
    })
}

/// An f32 by its bits (for infinities and NaN, which WGSL has no literal for).
fn f32_lit(v: f64) -> String {
    format!("bitcast<f32>({}u)", (v as f32).to_bits())
}

/// An i64 value as an (i32) index: `i32(v)`, or for an i64 literal that fits, the i32 literal itself —
/// naga's constant evaluator does not convert an i64 literal (`i32(0li)` fails to parse).
fn i64_to_index(v: &str) -> String {
    let lit = v.strip_prefix('(').and_then(|x| x.strip_suffix("li)")).and_then(|x| x.parse::<i64>().ok());
    match lit.and_then(|i| i32::try_from(i).ok()) {
        Some(i) => format!("({i}i)"),
        None => format!("i32({v})"),
    }
}

fn lit(v: f64, d: DType) -> Result<String, String> {
    if norm(d) == DType::I64 {
        let i = v as i64;
        // `-9223372036854775808li` does not lex as one literal.
        return Ok(if i == i64::MIN { "(-9223372036854775807li - 1li)".into() } else { format!("({i}li)") });
    }
    if d == DType::I64 && (v < i32::MIN as f64 || v > i32::MAX as f64) {
        return Err(format!("the i64 constant {v} does not fit the shader's 32-bit index arithmetic"));
    }
    Ok(match norm(d) {
        DType::I8 => format!("bitcast<i32>({}u)", (v as i64 as i8) as i32 as u32),
        DType::U8 => format!("{}u", v as i64 as u8),
        DType::I16 => format!("bitcast<i32>({}u)", (v as i64 as i16) as i32 as u32),
        DType::U16 => format!("{}u", v as i64 as u16),
        DType::F32 | DType::F16 | DType::BF16 => {
            let x = v as f32;
            // Finite values print exactly (Rust's shortest round-trip form); others as their bits.
            if x.is_finite() {
                format!("f32({x:?})")
            } else {
                f32_lit(v)
            }
        }
        DType::I32 => format!("bitcast<i32>({}u)", (v as i64 as i32) as u32),
        DType::U32 => format!("{}u", v as i64 as u32),
        DType::Bool => (if v != 0.0 { "true" } else { "false" }).to_string(),
        d => return Err(format!("a {d} constant is not supported by the shader targets")),
    })
}

/// The 32-bit type an 8- or 16-bit integer is held in (sign- or zero-extended).
fn small_int_carrier(d: DType) -> Option<DType> {
    match d {
        DType::I8 | DType::I16 => Some(DType::I32),
        DType::U8 | DType::U16 => Some(DType::U32),
        _ => None,
    }
}

/// A result computed in the carrier, wrapped to `d`'s width (two's complement, as LLVM's i8/i16
/// arithmetic): the low bits kept, sign- or zero-extended again. Every carrier operation whose low
/// bits depend only on the operands' low bits (add, sub, mul, bit ops, shl) or whose result already
/// fits (div, rem, max, min, abs and neg but of the most negative value, which wraps to itself) is
/// then exact; shifts by 8..31 (16..31) give 0 / the sign fill as at the narrow width.
fn wrap_small(v: &str, d: DType) -> String {
    match d {
        DType::I8 => format!("((({v}) << 24u) >> 24u)"),
        DType::I16 => format!("((({v}) << 16u) >> 16u)"),
        DType::U8 => format!("(({v}) & 255u)"),
        _ => format!("(({v}) & 65535u)"),
    }
}

fn zero(d: DType) -> &'static str {
    match norm(d) {
        DType::I64 => "0li",
        DType::I8 | DType::I16 => "0i",
        DType::U8 | DType::U16 => "0u",
        DType::F32 | DType::F16 | DType::BF16 => "0.0f",
        DType::I32 => "0i",
        DType::U32 => "0u",
        _ => "false",
    }
}

struct Param {
    dtype: DType,
    /// Binding index of the base buffer.
    bind: usize,
    /// Byte offset in the base.
    offset: usize,
}

struct W<'a> {
    params: Vec<Param>,
    /// Bases stored to byte-wise (bool): they get an atomic view at binding `n_bases + base`.
    atomics: &'a mut BTreeSet<usize>,
    vars: HashMap<Var, Ty>,
    helpers: &'a mut BTreeMap<String, String>,
    out: String,
    kname: String,
}

impl W<'_> {
    fn err<T>(&self, m: impl std::fmt::Display) -> Result<T, String> {
        Err(format!("kernel '{}': {m}", self.kname))
    }

    fn ty_of(&self, e: &Expr) -> Ty {
        match e {
            Expr::Int(_) | Expr::I(..) | Expr::ToIndex { .. } => Ty::Index,
            Expr::Lit(_, d) => Ty::S(norm(*d)),
            Expr::Var(v) => self.vars.get(v).copied().unwrap_or(Ty::Index),
            Expr::Load { buf, .. } => Ty::S(norm(self.params[*buf as usize].dtype)),
            Expr::Un(u, d, _) => Ty::S(norm(u.out_dtype(*d))),
            Expr::Bin(b, d, _, _) => Ty::S(if b.is_compare() || b.is_logical() { DType::Bool } else { norm(*d) }),
            Expr::Dot4(..) => Ty::S(norm(DType::I32)),
            Expr::Select(_, a, b) => {
                if self.ty_of(b) == Ty::S(norm(DType::I64)) {
                    self.ty_of(b)
                } else {
                    self.ty_of(a)
                }
            }
            Expr::Cast { to, .. } => Ty::S(norm(*to)),
        }
    }

    /// C's fmod for f32 (see `BinaryOp::FMod`).
    fn fmod_f32(&mut self) -> String {
        self.helper("fmod_f32", "fn fmod_f32(x: f32, y: f32) -> f32 {\n  if (abs(y) > 3.4028235e38f && abs(x) <= 3.4028235e38f) { return x; }\n  return x % y;\n}\n".into())
    }

    fn helper(&mut self, name: &str, body: String) -> String {
        self.helpers.entry(name.to_string()).or_insert(body);
        name.to_string()
    }

    /// `e` as a value of type `want`: index expressions (i32 here) are widened where a real i64 is
    /// expected (the loop form's indices are i64, so it mixes them freely with i64 scalars).
    fn typed(&mut self, e: &Expr, want: Ty) -> Result<String, String> {
        let v = self.expr(e)?;
        Ok(match (self.ty_of(e), want) {
            (Ty::Index, Ty::S(DType::I64)) if norm(DType::I64) == DType::I64 => format!("i64({v})"),
            (Ty::S(DType::I64), Ty::Index) if norm(DType::I64) == DType::I64 => i64_to_index(&v),
            _ => v,
        })
    }

    fn cond(&mut self, e: &Expr) -> Result<String, String> {
        let v = self.expr(e)?;
        Ok(match self.ty_of(e) {
            Ty::Index => format!("({v} != 0i)"),
            Ty::S(DType::Bool) => v,
            Ty::S(d) => format!("({v} != {})", zero(d)),
        })
    }

    /// The i32 element index into the base buffer for `buf[index]` (4-byte dtypes).
    fn word(&self, buf: u32, idx: &str) -> Result<String, String> {
        let p = &self.params[buf as usize];
        if p.offset % 4 != 0 {
            return self.err(format!("buffer {buf} is at byte offset {} of its base, not a multiple of 4", p.offset));
        }
        Ok(format!("b{}[{} + {idx}]", p.bind, p.offset / 4))
    }

    fn expr(&mut self, e: &Expr) -> Result<String, String> {
        Ok(match e {
            Expr::Int(i) => {
                if *i < i32::MIN as i64 || *i > i32::MAX as i64 {
                    return self.err(format!("index constant {i} does not fit i32"));
                }
                format!("({i}i)")
            }
            Expr::Lit(v, d) => lit(*v, *d).or_else(|m| self.err(m))?,
            Expr::Var(v) => format!("v{}", v.0),
            Expr::Load { buf, index } => {
                let i = self.typed(index, Ty::Index)?;
                let p = &self.params[*buf as usize];
                match p.dtype {
                    DType::F32 => format!("bitcast<f32>({})", self.word(*buf, &i)?),
                    DType::I32 => format!("bitcast<i32>({})", self.word(*buf, &i)?),
                    DType::U32 => self.word(*buf, &i)?,
                    DType::I64 => {
                        let p = &self.params[*buf as usize];
                        if p.offset % 8 != 0 {
                            return self.err(format!("i64 buffer {buf} is at byte offset {}, not a multiple of 8", p.offset));
                        }
                        let (b, o) = (p.bind, p.offset / 4);
                        if norm(DType::I64) == DType::I64 {
                            // Little-endian words: low (zero-extended) | high (sign-extended) << 32.
                            format!("(i64(b{b}[{o}i + 2i * ({i})]) | (i64(bitcast<i32>(b{b}[{o}i + 2i * ({i}) + 1i])) << 32u))")
                        } else {
                            // The low word; values beyond i32 are not representable without int64.
                            format!("bitcast<i32>(b{b}[{o}i + 2i * ({i})])")
                        }
                    }
                    DType::Bool | DType::I8 | DType::U8 => {
                        // One byte per value: byte address = offset + index.
                        let (b, off, d) = (p.bind, p.offset, p.dtype);
                        let byte = format!("((b{b}[({off}i + {i}) / 4i] >> (u32(({off}i + {i}) % 4i) * 8u)) & 255u)");
                        match d {
                            DType::Bool => format!("({byte} != 0u)"),
                            DType::U8 => byte,
                            _ => format!("(bitcast<i32>({byte} << 24u) >> 24u)"),
                        }
                    }
                    DType::I16 | DType::U16 | DType::F16 | DType::BF16 => {
                        // Two bytes per value: the half of its word at byte address offset + 2·index.
                        let (b, off, d) = (p.bind, p.offset, p.dtype);
                        if off % 2 != 0 {
                            return self.err(format!("{d} buffer {buf} is at byte offset {off}, not a multiple of 2"));
                        }
                        let h = format!("((b{b}[({off}i + 2i * ({i})) / 4i] >> (u32(({off}i + 2i * ({i})) % 4i) * 8u)) & 65535u)");
                        match d {
                            DType::U16 => h,
                            DType::I16 => format!("(bitcast<i32>({h} << 16u) >> 16u)"),
                            DType::BF16 => format!("bitcast<f32>({h} << 16u)"),
                            _ => format!("{}({h})", self.helper("h2f", half::H2F.into())),
                        }
                    }
                    d => return self.err(format!("loads of {d} are not supported by the shader targets")),
                }
            }
            Expr::I(op, a, b) => {
                let (x, y) = (self.typed(a, Ty::Index)?, self.typed(b, Ty::Index)?);
                match op {
                    IOp::Add => format!("({x} + {y})"),
                    IOp::Sub => format!("({x} - {y})"),
                    IOp::Mul => format!("({x} * {y})"),
                    IOp::Div => format!("({x} / {y})"),
                    IOp::Rem => format!("({x} % {y})"),
                    IOp::Min => format!("min({x}, {y})"),
                    IOp::Max => format!("max({x}, {y})"),
                    IOp::Lt => format!("select(0i, 1i, {x} < {y})"),
                    IOp::Le => format!("select(0i, 1i, {x} <= {y})"),
                    IOp::Eq => format!("select(0i, 1i, {x} == {y})"),
                    IOp::And => format!("select(0i, 1i, ({x} != 0i) && ({y} != 0i))"),
                }
            }
            Expr::Dot4(c, a, b, _) => self.expr(&Expr::dot4_expanded(c, a, b))?,
            Expr::Select(c, a, b) => {
                let cv = self.cond(c)?;
                // The branches' common type: a real i64 wins over an index.
                let want = if self.ty_of(b) == Ty::S(norm(DType::I64)) { self.ty_of(b) } else { self.ty_of(a) };
                let (x, y) = (self.typed(a, want)?, self.typed(b, want)?);
                format!("select({y}, {x}, {cv})")
            }
            Expr::Cast { from, to, x } => {
                let v = self.expr(x)?;
                self.cast(&v, norm(*from), norm(*to))?
            }
            Expr::ToIndex { from, x } => {
                let v = self.expr(x)?;
                match from {
                    DType::F32 => format!("i32({v})"),
                    DType::I32 => v,
                    DType::I64 if norm(DType::I64) == DType::I32 => v,
                    DType::I64 => i64_to_index(&v),
                    DType::U32 => format!("i32({v})"),
                    DType::Bool => format!("select(0i, 1i, {v})"),
                    d => return self.err(format!("{d} indices are not supported by the shader targets")),
                }
            }
            Expr::Un(u, d, x) => {
                let v = self.expr(x)?;
                self.unary(*u, norm(*d), &v)?
            }
            Expr::Bin(b, d, x, y) => {
                let (p, q) = (self.typed(x, Ty::S(norm(*d)))?, self.typed(y, Ty::S(norm(*d)))?);
                self.binary(*b, norm(*d), &p, &q)?
            }
        })
    }

    /// An f32 value rounded to f16 or bf16 (`d`) and held in f32 again: each f16/bf16 operation is
    /// computed in f32 and rounded once more, which for + − × ÷ and sqrt is the correctly rounded
    /// result (f32 carries more than 2·11 + 2 bits) and for the other functions within an f16 ulp.
    fn round_half(&mut self, r: &str, d: DType) -> String {
        if d == DType::F16 {
            let (h2f, f2h) = (self.helper("h2f", half::H2F.into()), self.helper("f2h", half::F2H.into()));
            format!("{h2f}({f2h}({r}))")
        } else {
            format!("bitcast<f32>({}({r}) << 16u)", self.helper("f2bf", half::F2BF.into()))
        }
    }

    fn cast(&mut self, v: &str, from: DType, to: DType) -> Result<String, String> {
        wty(from).or_else(|m| self.err(m))?;
        wty(to).or_else(|m| self.err(m))?;
        if from == to {
            return Ok(v.to_string());
        }
        // Bytes: held widened, so a byte source casts as its 32-bit carrier; a byte destination
        // saturates from float (as LLVM's fpto*i.sat) and wraps from integers (keeps the low byte).
        // The same for 16-bit integers; f16 and bf16 are held exactly in f32, so a cast to them
        // rounds there (`wgsl/half.rs`) and a cast from them is a cast from f32.
        let carrier = |d: DType| match d {
            DType::I8 | DType::I16 => DType::I32,
            DType::U8 | DType::U16 => DType::U32,
            DType::F16 | DType::BF16 => DType::F32,
            d => d,
        };
        if matches!(from, DType::I8 | DType::U8 | DType::I16 | DType::U16 | DType::F16 | DType::BF16) {
            return self.cast(v, carrier(from), to);
        }
        if matches!(to, DType::F16 | DType::BF16) {
            let f = self.cast(v, from, DType::F32)?;
            return Ok(if to == DType::F16 {
                let (h2f, f2h) = (self.helper("h2f", half::H2F.into()), self.helper("f2h", half::F2H.into()));
                format!("{h2f}({f2h}({f}))")
            } else {
                format!("bitcast<f32>({}({f}) << 16u)", self.helper("f2bf", half::F2BF.into()))
            });
        }
        if matches!(to, DType::I8 | DType::U8 | DType::I16 | DType::U16) {
            let signed = matches!(to, DType::I8 | DType::I16);
            let bits = if matches!(to, DType::I8 | DType::U8) { 8 } else { 16 };
            let (lo, hi) = if signed { (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1) } else { (0, (1i64 << bits) - 1) };
            return Ok(match from {
                DType::Bool => self.cast(v, from, carrier(to))?,
                DType::F32 if signed => format!("clamp({}, {lo}i, {hi}i)", self.cast(v, from, DType::I32)?),
                DType::F32 => format!("min({}, {hi}u)", self.cast(v, from, DType::U32)?),
                _ => {
                    let w = self.cast(v, from, DType::U32)?;
                    if signed {
                        format!("(bitcast<i32>({w} << {}u) >> {}u)", 32 - bits, 32 - bits)
                    } else {
                        format!("({w} & {hi}u)")
                    }
                }
            });
        }
        Ok(match (from, to) {
            (_, DType::Bool) => format!("({v} != {})", zero(from)),
            (DType::Bool, t) => format!("select({}, {}, {v})", zero(t), lit(1.0, t)?),
            (DType::F32, DType::I32) => {
                let h = self.helper("f2i", "fn f2i(x: f32) -> i32 {\n  if (x != x) { return 0i; }\n  return i32(clamp(x, -2147483648.0f, 2147483520.0f));\n}\n".into());
                format!("{h}({v})")
            }
            (DType::F32, DType::U32) => {
                let h = self.helper("f2u", "fn f2u(x: f32) -> u32 {\n  if (x != x) { return 0u; }\n  return u32(clamp(x, 0.0f, 4294967040.0f));\n}\n".into());
                format!("{h}({v})")
            }
            (DType::F32, DType::I64) => {
                let h = self.helper("f2l", "fn f2l(x: f32) -> i64 {\n  if (x != x) { return 0li; }\n  if (x >= 9223372036854775807.0f) { return 9223372036854775807li; }\n  if (x <= -9223372036854775808.0f) { return -9223372036854775807li - 1li; }\n  return i64(x);\n}\n".into());
                format!("{h}({v})")
            }
            (_, DType::F32) => format!("f32({v})"),
            // Widening: sign- or zero-extends by the source's signedness; narrowing keeps the low bits.
            (DType::I32 | DType::U32, DType::I64) => format!("i64({v})"),
            (DType::I64, DType::I32) => format!("bitcast<i32>(u32({v} & 4294967295li))"),
            (DType::I64, DType::U32) => format!("u32({v} & 4294967295li)"),
            // i32 <-> u32: same bits (wrap), as the interpreter's same-width integer cast.
            (_, t) => format!("bitcast<{}>({v})", wty(t)?),
        })
    }

    fn unary(&mut self, u: UnaryOp, d: DType, v: &str) -> Result<String, String> {
        wty(d).or_else(|m| self.err(m))?;
        if let Some(c) = small_int_carrier(d) {
            let r = self.unary(u, c, v)?;
            return Ok(if u.out_dtype(d) == d { wrap_small(&r, d) } else { r });
        }
        if matches!(d, DType::F16 | DType::BF16) {
            let r = self.unary(u, DType::F32, v)?;
            return Ok(if u.out_dtype(d) == d { self.round_half(&r, d) } else { r });
        }
        if d == DType::F32 {
            let f = |n: &str| format!("{n}({v})");
            return Ok(match u {
                UnaryOp::Neg => format!("(-{v})"),
                UnaryOp::Abs => f("abs"),
                UnaryOp::Exp => f("exp"),
                UnaryOp::Log => f("log"),
                UnaryOp::Sqrt => f("sqrt"),
                UnaryOp::Recip => format!("(1.0f / {v})"),
                UnaryOp::Sin => f("sin"),
                UnaryOp::Cos => f("cos"),
                UnaryOp::Tan => f("tan"),
                UnaryOp::Asin => f("asin"),
                UnaryOp::Acos => f("acos"),
                UnaryOp::Atan => f("atan"),
                UnaryOp::Sinh => f("sinh"),
                UnaryOp::Cosh => f("cosh"),
                UnaryOp::Tanh => {
                    // tanh(x) = (e^2x - 1) / (e^2x + 1) on x clamped to ±15 (tanh(±15) is ±1 in f32): no inf/inf NaN.
                    let h = self.helper("tanh_f32", "fn tanh_f32(x: f32) -> f32 {\n  let c = clamp(x, -15.0f, 15.0f);\n  let e = exp(2.0f * c);\n  return (e - 1.0f) / (e + 1.0f);\n}\n".into());
                    format!("{h}({v})")
                }
                UnaryOp::Asinh => f("asinh"),
                UnaryOp::Acosh => f("acosh"),
                UnaryOp::Atanh => f("atanh"),
                UnaryOp::Erf => {
                    // Abramowitz & Stegun 7.1.26 (max abs error 1.5e-7).
                    let h = self.helper(
                        "erf_f32",
                        "fn erf_f32(x: f32) -> f32 {\n  let a = abs(x);\n  let t = 1.0f / (1.0f + 0.3275911f * a);\n  let p = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));\n  let y = 1.0f - p * exp(-a * a);\n  return select(-y, y, x >= 0.0f);\n}\n"
                            .into(),
                    );
                    format!("{h}({v})")
                }
                UnaryOp::Sigmoid => format!("(1.0f / (1.0f + exp(-{v})))"),
                UnaryOp::Relu => format!("max({v}, 0.0f)"),
                UnaryOp::Floor => f("floor"),
                UnaryOp::Ceil => f("ceil"),
                // WGSL's round() rounds half to even, as MIR's round.
                UnaryOp::Round => f("round"),
                UnaryOp::Sign => f("sign"),
                UnaryOp::IsNan => format!("((bitcast<u32>({v}) & 0x7fffffffu) > 0x7f800000u)"),
                UnaryOp::IsInf => format!("((bitcast<u32>({v}) & 0x7fffffffu) == 0x7f800000u)"),
                UnaryOp::IsPosInf => format!("(bitcast<u32>({v}) == 0x7f800000u)"),
                UnaryOp::IsNegInf => format!("(bitcast<u32>({v}) == 0xff800000u)"),
                UnaryOp::Not | UnaryOp::BitNot => return self.err(format!("{} on f32", u.name())),
            });
        }
        let t = wty(d)?;
        Ok(match u {
            UnaryOp::Not => format!("(!{v})"),
            UnaryOp::BitNot => format!("(~{v})"),
            UnaryOp::Neg if d == DType::U32 => format!("(0u - {v})"),
            UnaryOp::Neg => format!("(-{v})"),
            UnaryOp::Abs if d != DType::U32 => format!("abs({v})"),
            UnaryOp::Relu if d != DType::U32 => format!("max({v}, {})", zero(d)),
            UnaryOp::Sign if d != DType::U32 => format!("sign({v})"),
            UnaryOp::Sign => format!("select(0u, 1u, {v} != 0u)"),
            UnaryOp::IsNan | UnaryOp::IsInf | UnaryOp::IsPosInf | UnaryOp::IsNegInf => "false".into(),
            // Abs/Relu of unsigned, rounding of integers: identity.
            _ => {
                let _ = t;
                v.to_string()
            }
        })
    }

    fn binary(&mut self, b: BinaryOp, d: DType, x: &str, y: &str) -> Result<String, String> {
        let t = wty(d).or_else(|m| self.err(m))?;
        if let Some(c) = small_int_carrier(d) {
            let r = self.binary(b, c, x, y)?;
            return Ok(if b.is_compare() || b.is_logical() { r } else { wrap_small(&r, d) });
        }
        if matches!(d, DType::F16 | DType::BF16) {
            let r = self.binary(b, DType::F32, x, y)?;
            return Ok(if b.is_compare() || b.is_logical() { r } else { self.round_half(&r, d) });
        }
        if d == DType::F32 {
            return Ok(match b {
                BinaryOp::Add => format!("({x} + {y})"),
                BinaryOp::Sub => format!("({x} - {y})"),
                BinaryOp::Mul => format!("({x} * {y})"),
                BinaryOp::Div => format!("({x} / {y})"),
                BinaryOp::Pow => {
                    // pow for negative bases with integral exponents (WGSL's pow is undefined for x < 0).
                    let h = self.helper(
                        "pow_f32",
                        "fn pow_f32(x: f32, y: f32) -> f32 {\n  if (y == 0.0f) { return 1.0f; }\n  let r = pow(abs(x), y);\n  if (x < 0.0f) {\n    if (y != floor(y)) { return bitcast<f32>(0x7fc00000u); }\n    if (abs(y % 2.0f) == 1.0f) { return -r; }\n  }\n  return r;\n}\n"
                            .into(),
                    );
                    format!("{h}({x}, {y})")
                }
                BinaryOp::Max => format!("max({x}, {y})"),
                BinaryOp::Min => format!("min({x}, {y})"),
                // WGSL's float % truncates, as C's fmod, but as x - y·trunc(x / y): a finite x over an
                // infinite y gives NaN (∞·0) where fmod gives x.
                BinaryOp::FMod => {
                    let h = self.fmod_f32();
                    format!("{h}({x}, {y})")
                }
                BinaryOp::Mod => {
                    let f = self.fmod_f32();
                    let h = self.helper("mod_f32", format!("fn mod_f32(x: f32, y: f32) -> f32 {{\n  let r = {f}(x, y);\n  if (r != 0.0f && ((r < 0.0f) != (y < 0.0f))) {{ return r + y; }}\n  return r;\n}}\n"));
                    format!("{h}({x}, {y})")
                }
                BinaryOp::Eq => format!("({x} == {y})"),
                BinaryOp::Lt => format!("({x} < {y})"),
                BinaryOp::Le => format!("({x} <= {y})"),
                BinaryOp::Gt => format!("({x} > {y})"),
                BinaryOp::Ge => format!("({x} >= {y})"),
                _ => return self.err(format!("{} on f32", b.name())),
            });
        }
        if d == DType::Bool {
            return Ok(match b {
                BinaryOp::And | BinaryOp::BitAnd | BinaryOp::Mul | BinaryOp::Min => format!("({x} && {y})"),
                BinaryOp::Or | BinaryOp::BitOr | BinaryOp::Add | BinaryOp::Max => format!("({x} || {y})"),
                BinaryOp::Xor | BinaryOp::BitXor => format!("({x} != {y})"),
                BinaryOp::Eq => format!("({x} == {y})"),
                BinaryOp::Lt => format!("((!{x}) && {y})"),
                BinaryOp::Le => format!("((!{x}) || {y})"),
                BinaryOp::Gt => format!("({x} && (!{y}))"),
                BinaryOp::Ge => format!("({x} || (!{y}))"),
                _ => return self.err(format!("{} on bool", b.name())),
            });
        }
        let signed = d != DType::U32;
        let bits = if d == DType::I64 { 64 } else { 32 };
        Ok(match b {
            BinaryOp::Add => format!("({x} + {y})"),
            BinaryOp::Sub => format!("({x} - {y})"),
            BinaryOp::Mul => format!("({x} * {y})"),
            // WGSL defines x / 0 = x and x % 0 = 0... the helper makes `% 0` give x's remainder by 1.
            BinaryOp::Div => {
                let h = self.helper(&format!("div_{t}"), format!("fn div_{t}(x: {t}, y: {t}) -> {t} {{\n  return x / select(y, {one}, y == {z});\n}}\n", one = lit(1.0, d)?, z = zero(d)));
                format!("{h}({x}, {y})")
            }
            BinaryOp::FMod => {
                let h = self.helper(&format!("rem_{t}"), format!("fn rem_{t}(x: {t}, y: {t}) -> {t} {{\n  return x % select(y, {one}, y == {z});\n}}\n", one = lit(1.0, d)?, z = zero(d)));
                format!("{h}({x}, {y})")
            }
            BinaryOp::Mod if signed => {
                let (one, z) = (lit(1.0, d)?, zero(d));
                let h = self.helper(
                    &format!("mod_{t}"),
                    format!("fn mod_{t}(x: {t}, y: {t}) -> {t} {{\n  let s = select(y, {one}, y == {z});\n  let r = x % s;\n  if (r != {z} && ((r ^ s) < {z})) {{ return r + s; }}\n  return r;\n}}\n"),
                );
                format!("{h}({x}, {y})")
            }
            BinaryOp::Mod => {
                let h = self.helper("rem_u32", "fn rem_u32(x: u32, y: u32) -> u32 {\n  return x % select(y, 1u, y == 0u);\n}\n".into());
                format!("{h}({x}, {y})")
            }
            BinaryOp::Pow => {
                // Exact integer power by squaring; negative exponents: 1/x^n truncated (0 unless |x| = 1).
                let body = if signed {
                    let s = "fn pow_i32(x: i32, y: i32) -> i32 {\n  if (y < 0i) {\n    if (x == 1i) { return 1i; }\n    if (x == -1i) { return select(1i, -1i, (y & 1i) != 0i); }\n    return 0i;\n  }\n  var r = 1i;\n  var b = x;\n  var e = y;\n  loop {\n    if (e == 0i) { break; }\n    if ((e & 1i) != 0i) { r = r * b; }\n    b = b * b;\n    e = e >> 1u;\n  }\n  return r;\n}\n";
                    if d == DType::I64 {
                        s.replace("i32", "i64").replace("1i", "1li").replace("0i", "0li")
                    } else {
                        s.to_string()
                    }
                } else {
                    "fn pow_u32(x: u32, y: u32) -> u32 {\n  var r = 1u;\n  var b = x;\n  var e = y;\n  loop {\n    if (e == 0u) { break; }\n    if ((e & 1u) != 0u) { r = r * b; }\n    b = b * b;\n    e = e >> 1u;\n  }\n  return r;\n}\n"
                        .to_string()
                };
                let h = self.helper(&format!("pow_{t}"), body);
                format!("{h}({x}, {y})")
            }
            BinaryOp::Max => format!("max({x}, {y})"),
            BinaryOp::Min => format!("min({x}, {y})"),
            BinaryOp::Eq => format!("({x} == {y})"),
            BinaryOp::Lt => format!("({x} < {y})"),
            BinaryOp::Le => format!("({x} <= {y})"),
            BinaryOp::Gt => format!("({x} > {y})"),
            BinaryOp::Ge => format!("({x} >= {y})"),
            BinaryOp::And | BinaryOp::BitAnd => format!("({x} & {y})"),
            BinaryOp::Or | BinaryOp::BitOr => format!("({x} | {y})"),
            BinaryOp::Xor | BinaryOp::BitXor => format!("({x} ^ {y})"),
            BinaryOp::Shl => {
                let amt = if d == DType::I64 { "select(u32(y), 64u, y < 0li || y >= 64li)" } else { "u32(y)" };
                let h = self.helper(&format!("shl_{t}"), format!("fn shl_{t}(x: {t}, y: {t}) -> {t} {{\n  return select(x << ({amt} & {m}u), {z}, {amt} >= {bits}u);\n}}\n", z = zero(d), m = bits - 1));
                format!("{h}({x}, {y})")
            }
            BinaryOp::Shr => {
                let fill = if d == DType::I64 { "x >> 63u" } else if signed { "x >> 31u" } else { "0u" };
                let amt = if d == DType::I64 { "select(u32(y), 64u, y < 0li || y >= 64li)" } else { "u32(y)" };
                let h = self.helper(&format!("shr_{t}"), format!("fn shr_{t}(x: {t}, y: {t}) -> {t} {{\n  return select(x >> ({amt} & {m}u), {fill}, {amt} >= {bits}u);\n}}\n", m = bits - 1));
                format!("{h}({x}, {y})")
            }
        })
    }

    fn line(&mut self, depth: usize, s: &str) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn stmts(&mut self, s: &[Stmt], depth: usize) -> Result<(), String> {
        for st in s {
            match st {
                Stmt::For { var, extent, body, .. } => {
                    if *extent > i32::MAX as i64 {
                        return self.err(format!("loop extent {extent} does not fit i32"));
                    }
                    self.vars.insert(*var, Ty::Index);
                    let v = var.0;
                    self.line(depth, &format!("for (var v{v}: i32 = 0i; v{v} < {extent}i; v{v} = v{v} + 1i) {{"));
                    self.stmts(body, depth + 1)?;
                    self.line(depth, "}");
                }
                Stmt::Decl { var, dtype, init } => {
                    let t = wty(*dtype).or_else(|m| self.err(m))?;
                    let v = self.typed(init, Ty::S(norm(*dtype)))?;
                    self.vars.insert(*var, Ty::S(norm(*dtype)));
                    self.line(depth, &format!("var v{}: {t} = {v};", var.0));
                }
                Stmt::Assign { var, value } => {
                    let want = self.vars.get(var).copied().unwrap_or(Ty::Index);
                    let v = self.typed(value, want)?;
                    self.line(depth, &format!("v{} = {v};", var.0));
                }
                Stmt::Store { buf, index, value } => {
                    let i = self.typed(index, Ty::Index)?;
                    let d = self.params[*buf as usize].dtype;
                    let v = self.typed(value, Ty::S(norm(d)))?;
                    let sv = match d {
                        DType::F32 | DType::I32 => format!("bitcast<u32>({v})"),
                        DType::U32 => v,
                        DType::I64 => {
                            // Two words: the value and its sign extension.
                            let p = &self.params[*buf as usize];
                            if p.offset % 8 != 0 {
                                return self.err(format!("i64 buffer {buf} is at byte offset {}, not a multiple of 8", p.offset));
                            }
                            let (b, o) = (p.bind, p.offset / 4);
                            self.line(depth, "{");
                            self.line(depth + 1, &format!("let x = {v};"));
                            self.line(depth + 1, &format!("let w = {o}i + 2i * ({i});"));
                            if norm(DType::I64) == DType::I64 {
                                self.line(depth + 1, &format!("b{b}[w] = u32(x & 4294967295li);"));
                                self.line(depth + 1, &format!("b{b}[w + 1i] = u32((x >> 32u) & 4294967295li);"));
                            } else {
                                self.line(depth + 1, &format!("b{b}[w] = bitcast<u32>(x);"));
                                self.line(depth + 1, &format!("b{b}[w + 1i] = select(0u, 0xffffffffu, x < 0i);"));
                            }
                            self.line(depth, "}");
                            continue;
                        }
                        DType::Bool | DType::I8 | DType::U8 => {
                            // One byte per value: clear and set this byte of its word through the
                            // base's atomic view, so neighbours' bytes written by other invocations survive.
                            let p = &self.params[*buf as usize];
                            let (b, off) = (p.bind, p.offset);
                            self.atomics.insert(b);
                            self.line(depth, "{");
                            let x = match d {
                                DType::Bool => format!("select(0u, 1u, {v})"),
                                DType::U8 => format!("({v} & 255u)"),
                                _ => format!("(bitcast<u32>({v}) & 255u)"),
                            };
                            self.line(depth + 1, &format!("let x = {x};"));
                            self.line(depth + 1, &format!("let ba = {off}i + ({i});"));
                            self.line(depth + 1, "let sh = u32(ba % 4i) * 8u;");
                            self.line(depth + 1, &format!("atomicAnd(&a{b}[ba / 4i], ~(255u << sh));"));
                            self.line(depth + 1, &format!("atomicOr(&a{b}[ba / 4i], x << sh);"));
                            self.line(depth, "}");
                            continue;
                        }
                        DType::I16 | DType::U16 | DType::F16 | DType::BF16 => {
                            // Two bytes per value: clear and set this half of its word through the
                            // base's atomic view, as for bytes.
                            let p = &self.params[*buf as usize];
                            let (b, off) = (p.bind, p.offset);
                            if off % 2 != 0 {
                                return self.err(format!("{d} buffer {buf} is at byte offset {off}, not a multiple of 2"));
                            }
                            self.atomics.insert(b);
                            let x = match d {
                                DType::U16 => format!("({v} & 65535u)"),
                                DType::I16 => format!("(bitcast<u32>({v}) & 65535u)"),
                                DType::BF16 => format!("{}({v})", self.helper("f2bf", half::F2BF.into())),
                                _ => format!("{}({v})", self.helper("f2h", half::F2H.into())),
                            };
                            self.line(depth, "{");
                            self.line(depth + 1, &format!("let x = {x};"));
                            self.line(depth + 1, &format!("let ba = {off}i + 2i * ({i});"));
                            self.line(depth + 1, "let sh = u32(ba % 4i) * 8u;");
                            self.line(depth + 1, &format!("atomicAnd(&a{b}[ba / 4i], ~(65535u << sh));"));
                            self.line(depth + 1, &format!("atomicOr(&a{b}[ba / 4i], x << sh);"));
                            self.line(depth, "}");
                            continue;
                        }
                        d => return self.err(format!("stores of {d} are not supported by the shader targets")),
                    };
                    let w = self.word(*buf, &i)?;
                    self.line(depth, &format!("{w} = {sv};"));
                }
                // A prefetch hint: no effect on results; shaders skip it.
                Stmt::Prefetch { .. } => {}
                Stmt::Comm { op, .. } => return Err(format!("{} (a sharded model's collective) is not supported by the shader writers", op.name())),
                Stmt::If { cond, body } => {
                    let c = self.cond(cond)?;
                    self.line(depth, &format!("if ({c}) {{"));
                    self.stmts(body, depth + 1)?;
                    self.line(depth, "}");
                }
            }
        }
        Ok(())
    }
}

/// Whether any expression casts to i64 (the model's own i64 values, as opposed to the planner's
/// counters, which are declared and incremented but never cast to).
pub fn casts_to_i64(s: &[Stmt]) -> bool {
    fn ex(e: &Expr) -> bool {
        match e {
            Expr::Cast { to: DType::I64, .. } => true,
            Expr::Load { index: a, .. } | Expr::Un(_, _, a) | Expr::Cast { x: a, .. } | Expr::ToIndex { x: a, .. } => ex(a),
            Expr::I(_, a, b) | Expr::Bin(_, _, a, b) => ex(a) || ex(b),
            Expr::Select(c, a, b) | Expr::Dot4(c, a, b, _) => ex(c) || ex(a) || ex(b),
            Expr::Int(_) | Expr::Lit(..) | Expr::Var(_) => false,
        }
    }
    s.iter().any(|st| match st {
        Stmt::For { body, .. } => casts_to_i64(body),
        Stmt::Decl { init: e, .. } | Stmt::Assign { value: e, .. } => ex(e),
        Stmt::Store { index, value, .. } => ex(index) || ex(value),
        Stmt::If { cond, body } => ex(cond) || casts_to_i64(body),
        Stmt::Prefetch { .. } => false,
        Stmt::Comm { .. } => false,
    })
}

/// The whole module as WGSL, and the dispatches in launch order.
/// With `use_tiles`, matmuls and reductions of the shapes `tiled.rs` recognizes use workgroup memory.
pub fn module_text(lir: &Lir, bases: &[BaseBuf], int64: bool, use_tiles: bool) -> Result<(String, Vec<Dispatch>), String> {
    INT64.with(|c| c.set(int64));
    let r = module_text_inner(lir, bases, use_tiles);
    INT64.with(|c| c.set(false));
    r
}

fn module_text_inner(lir: &Lir, bases: &[BaseBuf], use_tiles: bool) -> Result<(String, Vec<Dispatch>), String> {
    let mut helpers = BTreeMap::new();
    let mut atomics = BTreeSet::new();
    let mut kernels = String::new();
    let mut dispatches = Vec::new();
    let mut writable = vec![false; bases.len()];
    let mut problems = Vec::new();
    let mut shared: BTreeMap<String, (&'static str, i64)> = BTreeMap::new();
    for (li, l) in lir.launches.iter().enumerate() {
        let k = &l.kernel;
        let mut params = Vec::new();
        let mut uses = BTreeSet::new();
        let mut ranges = Vec::new();
        let (loads, stores) = (buffers_of(&k.body, false), buffers_of(&k.body, true));
        for (pi, &b) in l.bindings.iter().enumerate() {
            let buf = &lir.buffers[b as usize];
            let bind = bases.iter().position(|x| x.base == buf.base).ok_or_else(|| format!("kernel '{}': buffer {b} has no base", k.name))?;
            let end = buf.offset as u64 + buf.bytes() as u64;
            if end > bases[bind].bytes || bases[bind].bytes / 4 > i32::MAX as u64 {
                return Err(format!("kernel '{}': buffer '{}' ({} bytes at {}) does not fit its base of {} bytes (or the base exceeds 2^31 words)", k.name, buf.label, buf.bytes(), buf.offset, bases[bind].bytes));
            }
            if k.params[pi].access != Access::Read {
                writable[bind] = true;
            }
            uses.insert(bind as u32);
            params.push(Param { dtype: buf.dtype, bind, offset: buf.offset });
            let declared = k.params.get(pi).map_or(Access::ReadWrite, |p| p.access);
            ranges.push(rlx_ir::schedule::param_range(lir, b, bind, declared, loads.contains(&(pi as u32)), stores.contains(&(pi as u32))));
        }
        let (dims, inner) = grid(k, i32::MAX as i64);
        // An empty grid (a zero extent) runs no invocation's body.
        let total: i64 = if dims.is_empty() { 1 } else { dims.iter().map(|d| d.1).product::<i64>() };
        let mut w = W { params, atomics: &mut atomics, vars: HashMap::new(), helpers: &mut helpers, out: String::new(), kname: k.name.clone() };
        let body = if dims.is_empty() { &k.body[..] } else if total == 0 { &[][..] } else { inner };
        // Matmuls and reductions with workgroup memory and barriers (tiled.rs), when recognized.
        // (Fused attention, which only the CUDA target plans, keeps the per-invocation form here.)
        let plan = if total > 0 && use_tiles { rlx_ir::loops::tiled::recognize(k, &dims, body) } else { None };
        let plan = plan.filter(|p| !matches!(p, rlx_ir::loops::tiled::Plan::Attention(_)));
        let (header, groups, wg) = if let Some(plan) = plan {
            match w.tiled(li, &plan) {
                Ok(e) => {
                    for (name, t, len) in e.shared {
                        let entry = shared.entry(name).or_insert((t, 0));
                        entry.1 = entry.1.max(len);
                    }
                    (e.header, e.groups, e.wg)
                }
                Err(e) => {
                    problems.push(e);
                    continue;
                }
            }
        } else {
            let wgs = WORKGROUP_SIZE;
            let groups = (total as u64).div_ceil(wgs as u64).max(1);
            let gx = groups.min(MAX_GROUPS_X);
            let gy = groups.div_ceil(gx);
            w.line(1, &format!("let gi = i32(gid.x + gid.y * nwg.x * {wgs}u);"));
            w.line(1, &format!("if (gi >= {total}i) {{ return; }}"));
            // Unflatten: the innermost grid loop varies fastest.
            let mut stride = total;
            for (v, e) in dims.iter().take_while(|_| total > 0) {
                stride /= e;
                w.vars.insert(*v, Ty::Index);
                w.line(1, &format!("let v{} = (gi / {stride}i) % {e}i;", v.0));
            }
            if let Err(e) = w.stmts(body, 1) {
                problems.push(e);
                continue;
            }
            let header = format!("@compute @workgroup_size({wgs})\nfn k{li}(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{\n");
            (header, [gx as u32, gy as u32, 1], [wgs, 1, 1])
        };
        let _ = writeln!(kernels, "// launch {li}: {:?}", k.name);
        kernels.push_str(&header);
        kernels.push_str(&w.out);
        kernels.push_str("}\n\n");
        dispatches.push(Dispatch { entry: li as u32, groups, workgroup_size: wg, uses: uses.into_iter().collect(), ranges, name: k.name.clone() });
    }
    if !problems.is_empty() {
        return Err(problems.join("\n"));
    }
    let mut m = String::new();
    let _ = writeln!(m, "// rlxc {} — shader module", env!("CARGO_PKG_VERSION"));
    for (i, b) in bases.iter().enumerate() {
        let access = if writable[i] { "read_write" } else { "read" };
        let _ = writeln!(m, "@group(0) @binding({i}) var<storage, {access}> b{i}: array<u32, {}>; // {:?}", b.bytes.div_ceil(4).max(1), b.base);
    }
    for &i in &atomics {
        let _ = writeln!(m, "@group(0) @binding({}) var<storage, read_write> a{i}: array<atomic<u32>, {}>; // atomic view of binding {i}", bases.len() + i, bases[i].bytes.div_ceil(4).max(1));
    }
    for (name, (t, len)) in &shared {
        let _ = writeln!(m, "var<workgroup> {name}: array<{t}, {len}>;");
    }
    m.push('\n');
    for h in helpers.values() {
        m.push_str(h);
        m.push('\n');
    }
    m.push_str(&kernels);
    Ok((m, dispatches))
}
