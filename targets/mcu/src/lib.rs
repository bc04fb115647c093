//! The MCU writer: LIR loop-form kernels → C99 firmware sources (`NAME.c`, `NAME.h`) for Cortex-M.
//!
//! What it writes: every weights buffer as a `static const` typed array (flash), one `static` arena of
//! `NAME_ARENA_BYTES` (RAM; intermediates live at the planner's offsets), one `static void` function per
//! kernel (a direct translation of the loop form: index arithmetic in `int32_t`, integer arithmetic
//! with MIR's wrapping semantics, float→int casts saturating as MIR's `cast`), and
//! `int NAME_run(const T0 *in0, …, T *out0, …)`, which calls the kernels in launch order. No heap, no
//! libc beyond `<stdint.h>` (and `<math.h>` when a float kernel needs it). The header states the
//! arena and weight bytes and, for quantized models, each port's scale and zero point.
//! `NAME_run` is not reentrant (the arena is a static).
//!
//! On cores with the DSP extension ([`Core::has_dsp`]) int8 dot-product inner loops (the planner's
//! fully connected and conv loops, recognized in the loop form by `dot`) also get a 4-wide SMLAD
//! path (`rlx_dot4_i8`: ACLE `__sxtb16` + `__smlad`) under `#if defined(__ARM_FEATURE_DSP)`, before the
//! scalar loop that finishes the row; the result is bit-identical (same products, wrapping i32 sums).
//!
//! [`emit_rust`] (module `rust`) translates the same program into one `#![no_std]` Rust file (`NAME.rs`).

pub mod firmware;
mod rust;
pub use rust::{emit_rust, RustSource};

use rlx_ir::caps::TargetCaps;
use rlx_ir::lir::{Base, Lir};
use rlx_ir::loops::{Access, Expr, IOp, Kernel, Stmt, Var};
use rlx_ir::{BinaryOp, DType, UnaryOp};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The Cortex-M cores `--target cortex-mX` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Core {
    M0Plus,
    M3,
    M4,
    M7,
    M33,
    M55,
}

impl Core {
    pub fn name(self) -> &'static str {
        match self {
            Core::M0Plus => "cortex-m0plus",
            Core::M3 => "cortex-m3",
            Core::M4 => "cortex-m4",
            Core::M7 => "cortex-m7",
            Core::M33 => "cortex-m33",
            Core::M55 => "cortex-m55",
        }
    }
    /// The core has the DSP extension (SMLAD, SXTB16): Cortex-M4, M7, M33 (as gcc's `-mcpu=cortex-m33`
    /// builds it) and M55. The C writer then adds dual 16-bit MAC inner loops, guarded by
    /// `__ARM_FEATURE_DSP`; the Rust writer does for M4 and M7 (thumbv7em, whose ISA always has them).
    pub fn has_dsp(self) -> bool {
        matches!(self, Core::M4 | Core::M7 | Core::M33 | Core::M55)
    }
    /// arm-none-eabi-gcc flags for the core (hard-float where it has an FPU).
    pub fn gcc_flags(self) -> &'static str {
        match self {
            Core::M0Plus => "-mcpu=cortex-m0plus -mthumb -mfloat-abi=soft",
            Core::M3 => "-mcpu=cortex-m3 -mthumb -mfloat-abi=soft",
            Core::M4 => "-mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16",
            Core::M7 => "-mcpu=cortex-m7 -mthumb -mfloat-abi=hard -mfpu=fpv5-d16",
            Core::M33 => "-mcpu=cortex-m33 -mthumb -mfloat-abi=hard -mfpu=fpv5-sp-d16",
            Core::M55 => "-mcpu=cortex-m55 -mthumb -mfloat-abi=hard",
        }
    }
}

/// Dtypes the C writer implements.
pub const DTYPES: &[DType] = &[
    DType::I8,
    DType::U8,
    DType::I16,
    DType::U16,
    DType::I32,
    DType::U32,
    DType::I64,
    DType::F32,
    DType::Bool,
];

/// MIR kinds with a kernel lowering that the C writer translates (integer and f32).
pub const KINDS: &[&str] = &[
    "neg",
    "abs",
    "relu",
    "sign",
    "bit_not",
    "not",
    "exp",
    "log",
    "sqrt",
    "recip",
    "sigmoid",
    "tanh",
    "floor",
    "ceil",
    "round",
    "add",
    "sub",
    "mul",
    "div",
    "max",
    "min",
    "eq",
    "lt",
    "le",
    "gt",
    "ge",
    "and",
    "or",
    "xor",
    "bit_and",
    "bit_or",
    "bit_xor",
    "shl",
    "shr",
    "where",
    "cast",
    "matmul",
    "reduce_sum",
    "reduce_max",
    "reduce_min",
    "reduce_mean",
    "argmax",
    "argmin",
    "reshape",
    "transpose",
    "expand",
    "slice",
    "concat",
    "gather",
    "pad",
    "conv",
    "max_pool",
    "avg_pool",
];

/// The claim set (the same for every core: the writer emits portable C).
pub fn caps(name: &str) -> TargetCaps {
    TargetCaps::uniform(name, KINDS, DTYPES)
}

/// Affine parameters of an int8 port: `real = (q - zero_point) · scale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PortQuant {
    pub scale: f32,
    pub zero_point: i32,
}

pub struct Options {
    /// Artifact name and C symbol prefix.
    pub name: String,
    pub core: Core,
    /// Per input / output: quantization parameters (None for unquantized ports).
    pub inputs: Vec<Option<PortQuant>>,
    pub outputs: Vec<Option<PortQuant>>,
    /// Written into the header comment.
    pub rlxc_version: String,
}

/// The sources and their sizes.
pub struct Sources {
    pub c: String,
    pub h: String,
    /// Bytes of `const` weight arrays (flash).
    pub weights_bytes: usize,
    /// Bytes of the static arena (RAM).
    pub arena_bytes: usize,
}

fn ctype(d: DType) -> Result<&'static str, String> {
    Ok(match d {
        DType::I8 => "int8_t",
        DType::U8 | DType::Bool => "uint8_t",
        DType::I16 => "int16_t",
        DType::U16 => "uint16_t",
        DType::I32 => "int32_t",
        DType::U32 => "uint32_t",
        DType::I64 => "int64_t",
        DType::U64 => "uint64_t",
        DType::F32 => "float",
        DType::F64 => "double",
        d => return Err(format!("dtype {d} has no C form on this target")),
    })
}

fn suffix(d: DType) -> &'static str {
    match d {
        DType::I8 => "i8",
        DType::U8 => "u8",
        DType::Bool => "b",
        DType::I16 => "i16",
        DType::U16 => "u16",
        DType::I32 => "i32",
        DType::U32 => "u32",
        DType::I64 => "i64",
        DType::U64 => "u64",
        DType::F64 => "f64",
        _ => "f32",
    }
}

fn utype(d: DType) -> &'static str {
    match d {
        DType::I64 | DType::U64 => "uint64_t",
        _ => "uint32_t",
    }
}

/// The C operator of add, sub or mul.
fn arith_symbol(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "+",
        BinaryOp::Sub => "-",
        _ => "*",
    }
}

pub(crate) fn int_range(d: DType) -> (i64, i64) {
    d.int_range().unwrap_or((i64::MIN, i64::MAX))
}

fn float_lit(x: f64, d: DType) -> String {
    let f = if d == DType::F32 { "f" } else { "" };
    if x.is_nan() {
        return format!("__builtin_nan{f}(\"\")");
    }
    if x.is_infinite() {
        return format!("({}__builtin_inf{f}())", if x < 0.0 { "-" } else { "" });
    }
    if d == DType::F32 {
        format!("{:e}f", x as f32)
    } else {
        format!("{x:e}")
    }
}

fn int_lit(v: i64, d: DType) -> String {
    match d {
        DType::I64 if v == i64::MIN => "INT64_MIN".into(),
        DType::I64 => format!("INT64_C({v})"),
        DType::U64 => format!("UINT64_C({})", v as u64),
        DType::I32 if v == i32::MIN as i64 => "INT32_MIN".into(),
        DType::U32 => format!("{v}u"),
        _ => format!("(({}){v})", ctype(d).unwrap_or("int32_t")),
    }
}

/// An int8 dot-product loop: `for k in 0..extent { acc = acc + i32(a[ia]) * i32(b[ib]) }` (i32
/// wrapping arithmetic, int8 loads) where both indices step by exactly 1 with `k` — the inner loop of
/// the planner's fully connected and conv kernels. The DSP path runs it 4 elements at a time with two
/// SMLADs (each a pair of 16×16 products added to the accumulator, wrapping as MIR's i32 add): the
/// same products and the same wrapping sum in another order, so the result is identical.
pub(crate) struct Dot<'a> {
    pub var: Var,
    pub extent: i64,
    pub acc: Var,
    pub a: (u32, &'a Expr),
    pub b: (u32, &'a Expr),
}

/// Whether `e` mentions loop variable `v`.
fn uses(e: &Expr, v: Var) -> bool {
    match e {
        Expr::Var(x) => *x == v,
        Expr::Int(_) | Expr::Lit(..) => false,
        Expr::Load { index, .. } => uses(index, v),
        Expr::I(_, a, b) | Expr::Bin(_, _, a, b) => uses(a, v) || uses(b, v),
        Expr::Un(_, _, x) | Expr::Cast { x, .. } | Expr::ToIndex { x, .. } => uses(x, v),
        Expr::Select(c, a, b) | Expr::Dot4(c, a, b, _) => uses(c, v) || uses(a, v) || uses(b, v),
    }
}

/// The coefficient of `v` in an index expression that is affine in `v` (None when it is not).
fn coef(e: &Expr, v: Var) -> Option<i64> {
    if !uses(e, v) {
        return Some(0);
    }
    match e {
        Expr::Var(_) => Some(1),
        Expr::I(IOp::Add, a, b) => coef(a, v)?.checked_add(coef(b, v)?),
        Expr::I(IOp::Sub, a, b) => coef(a, v)?.checked_sub(coef(b, v)?),
        Expr::I(IOp::Mul, a, b) => match (a.as_ref(), b.as_ref()) {
            (Expr::Int(c), x) | (x, Expr::Int(c)) => coef(x, v)?.checked_mul(*c),
            _ => None,
        },
        _ => None,
    }
}

pub(crate) fn dot<'a>(st: &'a Stmt, k: &Kernel) -> Option<Dot<'a>> {
    let Stmt::For {
        var, extent, body, ..
    } = st
    else {
        return None;
    };
    let [Stmt::Assign { var: acc, value }] = body.as_slice() else {
        return None;
    };
    if k.decl_dtype(*acc) != Some(DType::I32) || *extent < 4 {
        return None;
    }
    let Expr::Bin(BinaryOp::Add, DType::I32, x, y) = value else {
        return None;
    };
    let prod = match (x.as_ref(), y.as_ref()) {
        (Expr::Var(a), p) | (p, Expr::Var(a)) if a == acc => p,
        _ => return None,
    };
    let Expr::Bin(BinaryOp::Mul, DType::I32, p, q) = prod else {
        return None;
    };
    let operand = |e: &'a Expr| -> Option<(u32, &'a Expr)> {
        let Expr::Cast {
            from: DType::I8,
            to: DType::I32,
            x,
        } = e
        else {
            return None;
        };
        let Expr::Load { buf, index } = x.as_ref() else {
            return None;
        };
        let ok = k.params.get(*buf as usize)?.dtype == DType::I8
            && coef(index, *var) == Some(1)
            && !uses(index, *acc);
        ok.then_some((*buf, index.as_ref()))
    };
    Some(Dot {
        var: *var,
        extent: *extent,
        acc: *acc,
        a: operand(p)?,
        b: operand(q)?,
    })
}

/// Scalar C for `e`; `helpers` collects the static inline functions it calls.
struct W {
    helpers: BTreeMap<String, String>,
    kernel: Kernel,
    math: bool,
    /// Write SMLAD inner loops (a DSP core).
    dsp: bool,
    /// Inner loops written with the DSP path.
    dsp_loops: usize,
}

impl W {
    fn helper(&mut self, name: String, def: impl FnOnce() -> String) -> String {
        if !self.helpers.contains_key(&name) {
            let d = def();
            self.helpers.insert(name.clone(), d);
        }
        name
    }

    fn dt_of(&self, e: &Expr) -> Option<DType> {
        match e {
            Expr::Lit(_, d) | Expr::Un(_, d, _) => Some(*d),
            Expr::Var(v) => self.kernel.decl_dtype(*v),
            Expr::Load { buf, .. } => Some(self.kernel.params[*buf as usize].dtype),
            Expr::Bin(op, d, ..) => Some(if op.is_compare() || op.is_logical() {
                DType::Bool
            } else {
                *d
            }),
            Expr::Cast { to, .. } => Some(*to),
            Expr::Dot4(..) => Some(DType::I32),
            Expr::Select(_, a, _) => self.dt_of(a),
            _ => None,
        }
    }

    fn expr(&mut self, e: &Expr) -> Result<String, String> {
        Ok(match e {
            Expr::Int(i) => {
                if *i < i32::MIN as i64 || *i > i32::MAX as i64 {
                    return Err(format!("index constant {i} does not fit 32 bits"));
                }
                if *i < 0 {
                    format!("({i})")
                } else {
                    i.to_string()
                }
            }
            Expr::Lit(v, d) => {
                if d.is_float() {
                    float_lit(*v, *d)
                } else if v.is_infinite() {
                    let (lo, hi) = int_range(*d);
                    int_lit(if *v < 0.0 { lo } else { hi }, *d)
                } else if *d == DType::Bool {
                    ((*v != 0.0) as i32).to_string()
                } else {
                    int_lit(*v as i64, *d)
                }
            }
            Expr::Var(v) => format!("v{}", v.0),
            Expr::Load { buf, index } => format!("b{buf}[{}]", self.expr(index)?),
            Expr::I(op, a, b) => {
                let (a, b) = (self.expr(a)?, self.expr(b)?);
                match op {
                    IOp::Min => format!("rlx_imin({a}, {b})"),
                    IOp::Max => format!("rlx_imax({a}, {b})"),
                    _ => format!("({a} {} {b})", op.name()),
                }
            }
            Expr::Un(op, d, x) => self.unary(*op, *d, x)?,
            Expr::Bin(op, d, a, b) => self.binary(*op, *d, a, b)?,
            Expr::Dot4(c, a, b, _) => self.expr(&Expr::dot4_expanded(c, a, b))?,
            Expr::Select(c, a, b) => format!(
                "({} ? {} : {})",
                self.expr(c)?,
                self.expr(a)?,
                self.expr(b)?
            ),
            Expr::Cast { from, to, x } => self.cast(*from, *to, x)?,
            Expr::ToIndex { x, .. } => format!("((int32_t){})", self.expr(x)?),
        })
    }

    fn unary(&mut self, op: UnaryOp, d: DType, x: &Expr) -> Result<String, String> {
        let t = ctype(d)?;
        let xs = self.expr(x)?;
        let s = suffix(d);
        let f = if d == DType::F32 { "f" } else { "" };
        let simple = |body: &str| {
            format!(
                "static inline {t} rlx_{}_{s}({t} x) {{ return {body}; }}",
                op.name()
            )
        };
        let body: String = match (op, d.is_float()) {
            (UnaryOp::Neg, true) => return Ok(format!("(-{xs})")),
            (UnaryOp::Neg, false) => format!("({t})(0 - ({})x)", utype(d)),
            (UnaryOp::Abs, _) => format!("x < 0 ? ({t})(0 - x) : x"),
            (UnaryOp::Relu, _) => "x > 0 ? x : 0".into(),
            (UnaryOp::Sign, _) => format!("({t})((x > 0) - (x < 0))"),
            (UnaryOp::BitNot, false) => format!("({t})~x"),
            (UnaryOp::Not, _) => return Ok(format!("(!{xs})")),
            (UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round, false) => return Ok(xs),
            (UnaryOp::Recip, true) => "1 / x".to_string(),
            (UnaryOp::Sigmoid, true) => {
                self.math = true;
                format!("1 / (1 + exp{f}(-x))")
            }
            (
                UnaryOp::Exp
                | UnaryOp::Log
                | UnaryOp::Sqrt
                | UnaryOp::Tanh
                | UnaryOp::Floor
                | UnaryOp::Ceil,
                true,
            ) => {
                self.math = true;
                format!("{}{f}(x)", op.name())
            }
            (UnaryOp::Round, true) => {
                self.math = true;
                format!("nearbyint{f}(x)")
            }
            _ => {
                return Err(format!(
                    "unary {} on {d} has no C form on this target",
                    op.name()
                ))
            }
        };
        let name = self.helper(format!("rlx_{}_{s}", op.name()), || simple(&body));
        Ok(format!("{name}({xs})"))
    }

    fn binary(&mut self, op: BinaryOp, d: DType, a: &Expr, b: &Expr) -> Result<String, String> {
        let (xa, xb) = (self.expr(a)?, self.expr(b)?);
        let t = ctype(d)?;
        let s = suffix(d);
        let fl = d.is_float();
        let call = |w: &mut W, body: String| {
            let name = w.helper(format!("rlx_{}_{s}", op.name()), || {
                format!(
                    "static inline {t} rlx_{}_{s}({t} a, {t} b) {{ return {body}; }}",
                    op.name()
                )
            });
            format!("{name}({xa}, {xb})")
        };
        use BinaryOp::*;
        Ok(match op {
            Add | Sub | Mul if fl => format!("({xa} {} {xb})", arith_symbol(op)),
            Add | Sub | Mul => {
                let o = arith_symbol(op);
                call(self, format!("({t})(({u})a {o} ({u})b)", u = utype(d)))
            }
            Div => format!("({xa} / {xb})"),
            Max => call(self, "a > b ? a : b".into()),
            Min => call(self, "a < b ? a : b".into()),
            Eq => format!("({xa} == {xb})"),
            Lt => format!("({xa} < {xb})"),
            Le => format!("({xa} <= {xb})"),
            Gt => format!("({xa} > {xb})"),
            Ge => format!("({xa} >= {xb})"),
            And => format!("({xa} && {xb})"),
            Or => format!("({xa} || {xb})"),
            Xor => format!("({xa} != {xb})"),
            BitAnd if !fl => format!("(({t})({xa} & {xb}))"),
            BitOr if !fl => format!("(({t})({xa} | {xb}))"),
            BitXor if !fl => format!("(({t})({xa} ^ {xb}))"),
            Shl | Shr if !fl => {
                // MIR: amounts outside [0, bits) give 0 (or -1 for an arithmetic right shift of a negative).
                let bits = d.size().unwrap_or(4) * 8;
                let signed = !matches!(
                    d,
                    DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Bool
                );
                let body = if op == Shl {
                    format!("(b < 0 || b >= {bits}) ? 0 : ({t})(({})a << b)", utype(d))
                } else if signed {
                    format!("(b < 0 || b >= {bits}) ? (a < 0 ? -1 : 0) : ({t})(a >> b)")
                } else {
                    format!("(b < 0 || b >= {bits}) ? 0 : ({t})(a >> b)")
                };
                call(self, body)
            }
            _ => {
                return Err(format!(
                    "binary {} on {d} has no C form on this target",
                    op.name()
                ))
            }
        })
    }

    fn cast(&mut self, from: DType, to: DType, x: &Expr) -> Result<String, String> {
        let xs = self.expr(x)?;
        let t = ctype(to)?;
        ctype(from)?;
        if to == DType::Bool {
            return Ok(format!("(({xs}) != 0)"));
        }
        if from.is_float() && !to.is_float() {
            // Saturating, NaN → 0 (MIR cast).
            let (lo, hi) = int_range(to);
            let (sf, ft) = (suffix(from), ctype(from)?);
            let name = self.helper(format!("rlx_cvt_{sf}_{}", suffix(to)), || {
                format!(
                    "static inline {t} rlx_cvt_{sf}_{}({ft} x) {{ return x != x ? 0 : x <= ({ft}){lo} ? {lo_l} : x >= ({ft}){hi} ? {hi_l} : ({t})x; }}",
                    suffix(to),
                    lo_l = int_lit(lo, to),
                    hi_l = int_lit(hi, to)
                )
            });
            return Ok(format!("{name}({xs})"));
        }
        Ok(format!("(({t})({xs}))"))
    }

    fn stmts(&mut self, s: &[Stmt], depth: usize, out: &mut String) -> Result<(), String> {
        let pad = "    ".repeat(depth);
        for st in s {
            if let Some(d) = self.dsp.then(|| dot(st, &self.kernel)).flatten() {
                // Four int8 MACs per step with two SMLADs where the compiler has the DSP extension,
                // then the scalar loop for the rest (all of it without __ARM_FEATURE_DSP).
                let (k, e, acc) = (d.var.0, d.extent, d.acc.0);
                let (ia, ib) = (self.expr(d.a.1)?, self.expr(d.b.1)?);
                let (ba, bb) = (d.a.0, d.b.0);
                let mut rest = String::new();
                let Stmt::For { body, .. } = st else {
                    unreachable!()
                };
                self.stmts(body, depth + 2, &mut rest)?;
                let _ = writeln!(
                    out,
                    "{pad}{{
{pad}    int32_t v{k} = 0;
#if defined(__ARM_FEATURE_DSP)
{pad}    for (; v{k} + 4 <= {e}; v{k} += 4) {{
{pad}        v{acc} = rlx_dot4_i8(&b{ba}[{ia}], &b{bb}[{ib}], v{acc});
{pad}    }}
#endif
{pad}    for (; v{k} < {e}; v{k}++) {{
{rest}{pad}    }}
{pad}}}"
                );
                self.dsp_loops += 1;
                continue;
            }
            match st {
                Stmt::For {
                    var, extent, body, ..
                } => {
                    let _ = writeln!(
                        out,
                        "{pad}for (int32_t v{0} = 0; v{0} < {extent}; v{0}++) {{",
                        var.0
                    );
                    self.stmts(body, depth + 1, out)?;
                    let _ = writeln!(out, "{pad}}}");
                }
                Stmt::Decl { var, dtype, init } => {
                    let _ = writeln!(
                        out,
                        "{pad}{} v{} = {};",
                        ctype(*dtype)?,
                        var.0,
                        self.expr(init)?
                    );
                }
                Stmt::Assign { var, value } => {
                    let _ = writeln!(out, "{pad}v{} = {};", var.0, self.expr(value)?);
                }
                Stmt::Store { buf, index, value } => {
                    let d = self.kernel.params[*buf as usize].dtype;
                    let v = self.expr(value)?;
                    let v = if self.dt_of(value) == Some(d) {
                        v
                    } else {
                        format!("({})({v})", ctype(d)?)
                    };
                    let _ = writeln!(out, "{pad}b{buf}[{}] = {v};", self.expr(index)?);
                }
                // A prefetch hint: no effect on results; the C writer skips it.
                Stmt::Prefetch { .. } => {}
                Stmt::Comm { op, .. } => return Err(format!("{} (a sharded model's collective) is not supported on MCU targets", op.name())),
                Stmt::If { cond, body } => {
                    let _ = writeln!(out, "{pad}if ({}) {{", self.expr(cond)?);
                    self.stmts(body, depth + 1, out)?;
                    let _ = writeln!(out, "{pad}}}");
                }
            }
        }
        Ok(())
    }
}

fn c_comment(s: &str) -> String {
    s.replace("*/", "* /").replace(['\n', '\r'], " ")
}

/// One `const` array per maximal run of overlapping weights buffers: (offset, bytes, dtype).
pub(crate) fn weight_arrays(lir: &Lir) -> Result<Vec<(usize, usize, DType)>, String> {
    let mut ws: Vec<(usize, usize, DType)> = lir
        .buffers
        .iter()
        .filter(|b| b.base == Base::Weights)
        .map(|b| (b.offset, b.bytes(), b.dtype))
        .collect();
    ws.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let mut arrays: Vec<(usize, usize, DType)> = Vec::new();
    for (off, bytes, dt) in ws {
        match arrays.last_mut() {
            Some((o, n, d)) if off < *o + *n => {
                if *d != dt {
                    return Err(format!(
                        "weights at byte {off} are read as both {d} and {dt}"
                    ));
                }
                *n = (*n).max(off + bytes - *o);
            }
            _ => arrays.push((off, bytes, dt)),
        }
    }
    Ok(arrays)
}

fn array_values(bytes: &[u8], d: DType) -> Result<String, String> {
    let es = d.size().ok_or("weights dtype has no element size")?;
    let mut s = String::with_capacity(bytes.len() * 5);
    for (i, c) in bytes.chunks_exact(es).enumerate() {
        if i > 0 {
            s.push_str(if i % 16 == 0 { ",\n    " } else { ", " });
        }
        let v = rlx_ir::tensor::decode_f64(d, c, 0);
        let _ = if d.is_float() {
            write!(s, "{}", float_lit(v, d))
        } else {
            write!(s, "{}", rlx_ir::tensor::decode_i64(d, c, 0))
        };
    }
    Ok(s)
}

/// Writes `NAME.c` and `NAME.h` for a planned program.
pub fn emit_c(lir: &Lir, o: &Options) -> Result<Sources, String> {
    let n = &o.name;
    let arrays = weight_arrays(lir)?;
    let weights_bytes: usize = arrays.iter().map(|a| a.1).sum();
    let mut body = String::new();
    let mut w = W {
        helpers: BTreeMap::new(),
        kernel: Kernel {
            name: String::new(),
            params: vec![],
            body: vec![],
            vars: 0,
        },
        math: false,
        dsp: o.core.has_dsp(),
        dsp_loops: 0,
    };
    for b in &lir.buffers {
        if b.elems() > i32::MAX as usize {
            return Err(format!(
                "buffer '{}' has {} elements (more than 32-bit indexing allows)",
                b.label,
                b.elems()
            ));
        }
    }
    // Kernels.
    let mut calls = Vec::new();
    for (li, l) in lir.launches.iter().enumerate() {
        let k = &l.kernel;
        let mut params = Vec::new();
        let mut args = Vec::new();
        for (pi, (p, &bi)) in k.params.iter().zip(&l.bindings).enumerate() {
            let t = ctype(p.dtype)?;
            let cq = if p.access == Access::Read {
                "const "
            } else {
                ""
            };
            params.push(format!("{cq}{t} *b{pi}"));
            let b = &lir.buffers[bi as usize];
            let es = p.dtype.size().unwrap_or(1);
            args.push(match b.base {
                Base::Arena => format!("({cq}{t} *)({n}_arena + {})", b.offset),
                Base::Weights => {
                    let ai = arrays
                        .iter()
                        .position(|a| b.offset >= a.0 && b.offset < a.0 + a.1.max(1))
                        .ok_or("weights buffer outside the blob")?;
                    let rel = b.offset - arrays[ai].0;
                    if !rel.is_multiple_of(es) {
                        return Err(format!(
                            "weights buffer '{}' is not element-aligned in its array",
                            b.label
                        ));
                    }
                    format!("{n}_w{ai} + {}", rel / es)
                }
                Base::Input(i) => format!("({cq}{t} *)in{i} + {}", b.offset / es),
                Base::Output(i) => format!("({cq}{t} *)out{i} + {}", b.offset / es),
                Base::State => return Err(format!("kernel '{}' reads state (a KV cache): MCU targets have no stateful artifacts", k.name)),
            });
        }
        w.kernel = k.clone();
        let mut text = String::new();
        w.stmts(&k.body, 1, &mut text)?;
        let _ = writeln!(
            body,
            "/* {} */\nstatic void {n}_k{li}({}) {{\n{text}}}\n",
            c_comment(&k.name),
            if params.is_empty() {
                "void".into()
            } else {
                params.join(", ")
            }
        );
        calls.push(format!("    {n}_k{li}({});", args.join(", ")));
    }
    let mut c = String::new();
    let _ = writeln!(c, "/* {n}.c: generated by rlxc {} for {}. Do not edit.\n * Build: arm-none-eabi-gcc {} -O2 -c {n}.c */\n", o.rlxc_version, o.core.name(), o.core.gcc_flags());
    let _ = writeln!(c, "#include \"{n}.h\"");
    if w.math {
        let _ = writeln!(c, "#include <math.h>");
    }
    let _ = writeln!(
        c,
        "\nstatic inline int32_t rlx_imin(int32_t a, int32_t b) {{ return a < b ? a : b; }}"
    );
    let _ = writeln!(
        c,
        "static inline int32_t rlx_imax(int32_t a, int32_t b) {{ return a > b ? a : b; }}"
    );
    for h in w.helpers.values() {
        let _ = writeln!(c, "{h}");
    }
    if w.dsp_loops > 0 {
        let _ = writeln!(c, "\n/* DSP extension: 4 int8 MACs as two SMLADs (dual 16x16 multiply-accumulate, wrapping as i32). */");
        let _ = writeln!(c, "#if defined(__ARM_FEATURE_DSP)\n#include <arm_acle.h>\nstatic inline int32_t rlx_dot4_i8(const int8_t *a, const int8_t *b, int32_t acc) {{");
        let _ = writeln!(
            c,
            "    uint32_t x, y;\n    __builtin_memcpy(&x, a, 4);\n    __builtin_memcpy(&y, b, 4);"
        );
        let _ = writeln!(c, "    acc = __smlad(__sxtb16((int8x4_t)x), __sxtb16((int8x4_t)y), acc); /* bytes 0 and 2 */");
        let _ = writeln!(c, "    return __smlad(__sxtb16((int8x4_t)((x >> 8) | (x << 24))), __sxtb16((int8x4_t)((y >> 8) | (y << 24))), acc); /* bytes 1 and 3 */\n}}\n#endif");
    }
    let _ = writeln!(
        c,
        "\n/* Weights: {weights_bytes} bytes of const data (flash). */"
    );
    for (ai, &(off, bytes, d)) in arrays.iter().enumerate() {
        let _ = writeln!(
            c,
            "static const {} {n}_w{ai}[{}] = {{\n    {}\n}};",
            ctype(d)?,
            bytes / d.size().unwrap_or(1),
            array_values(&lir.weights[off..off + bytes], d)?
        );
    }
    let _ = writeln!(
        c,
        "\n/* Scratch: intermediates at planned offsets (RAM). */"
    );
    let _ = writeln!(
        c,
        "static uint8_t {n}_arena[{}] __attribute__((aligned({})));\n",
        lir.arena_bytes.max(1),
        lir.align.max(4)
    );
    c.push_str(&body);
    let mut sig = Vec::new();
    for (i, p) in lir.inputs.iter().enumerate() {
        sig.push(format!("const {} *in{i}", ctype(p.ty.dtype)?));
    }
    for (i, p) in lir.outputs.iter().enumerate() {
        sig.push(format!("{} *out{i}", ctype(p.ty.dtype)?));
    }
    let sig = format!(
        "int {n}_run({})",
        if sig.is_empty() {
            "void".into()
        } else {
            sig.join(", ")
        }
    );
    let _ = writeln!(c, "{sig} {{");
    for i in 0..lir.inputs.len() {
        let _ = writeln!(c, "    if (!in{i}) return {n}_ERR_NULL_INPUT;");
    }
    for i in 0..lir.outputs.len() {
        let _ = writeln!(c, "    if (!out{i}) return {n}_ERR_NULL_OUTPUT;");
    }
    for call in &calls {
        let _ = writeln!(c, "{call}");
    }
    let _ = writeln!(c, "    return {n}_OK;\n}}");

    // Header.
    let mut h = String::new();
    let guard = format!("{}_H", n.to_ascii_uppercase());
    let _ = writeln!(
        h,
        "/* {n}.h: generated by rlxc {} for {} ({}). Do not edit. */",
        o.rlxc_version,
        o.core.name(),
        o.core.gcc_flags()
    );
    let _ = writeln!(h, "#ifndef {guard}\n#define {guard}\n\n#include <stdint.h>\n\n#ifdef __cplusplus\nextern \"C\" {{\n#endif\n");
    let _ = writeln!(
        h,
        "/* Static RAM that {n}.c reserves for intermediates (its arena). */"
    );
    let _ = writeln!(h, "#define {n}_ARENA_BYTES {}", lir.arena_bytes);
    let _ = writeln!(h, "/* Const weight data in {n}.c (flash). */");
    let _ = writeln!(h, "#define {n}_WEIGHTS_BYTES {weights_bytes}");
    let _ = writeln!(
        h,
        "#define {n}_NUM_INPUTS {}\n#define {n}_NUM_OUTPUTS {}\n",
        lir.inputs.len(),
        lir.outputs.len()
    );
    for (kind, ports, qs) in [
        ("INPUT", &lir.inputs, &o.inputs),
        ("OUTPUT", &lir.outputs, &o.outputs),
    ] {
        for (i, p) in ports.iter().enumerate() {
            let elems: usize = p.ty.shape.as_fixed().unwrap_or_default().iter().product();
            let _ = writeln!(
                h,
                "/* {} {i} \"{}\": {} */",
                kind.to_ascii_lowercase(),
                c_comment(&p.name),
                p.ty
            );
            let _ = writeln!(h, "#define {n}_{kind}_{i}_ELEMS {elems}");
            if let Some(Some(q)) = qs.get(i) {
                let _ = writeln!(h, "/* real = ({n}_{kind}_{i}_ZERO_POINT subtracted from q) * {n}_{kind}_{i}_SCALE */");
                let _ = writeln!(
                    h,
                    "#define {n}_{kind}_{i}_SCALE {}",
                    float_lit(q.scale as f64, DType::F32)
                );
                let _ = writeln!(h, "#define {n}_{kind}_{i}_ZERO_POINT ({})", q.zero_point);
            }
            h.push('\n');
        }
    }
    let _ = writeln!(h, "#define {n}_OK 0\n#define {n}_ERR_NULL_INPUT 4 /* an input pointer is NULL */\n#define {n}_ERR_NULL_OUTPUT 5 /* an output pointer is NULL */\n");
    let _ = writeln!(h, "/* Runs the model: inputs and outputs in manifest order, {n}_INPUT_i_ELEMS / {n}_OUTPUT_i_ELEMS");
    let _ = writeln!(h, " * elements each. Uses the static arena: not reentrant. Returns {n}_OK or an {n}_ERR_* code. */");
    let _ = writeln!(h, "{sig};\n\n#ifdef __cplusplus\n}}\n#endif\n#endif");
    Ok(Sources {
        c,
        h,
        weights_bytes,
        arena_bytes: lir.arena_bytes,
    })
}
