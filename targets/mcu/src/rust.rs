//! The second MCU writer: LIR loop-form kernels → one `#![no_std]` Rust source file (`NAME.rs`) that a
//! firmware crate includes as a module (`mod mlp { include!("mlp.rs"); }`).
//!
//! What it writes (the same program as the C writer): every weights buffer as a `static` typed array
//! (flash), one `static mut` arena of `ARENA_BYTES` (RAM, 8-byte aligned; intermediates at the
//! planner's offsets), one `unsafe fn` per kernel over raw pointers, and the safe entry
//! `pub fn run(in0: &[T; INPUT_0_ELEMS], …, out0: &mut [T; OUTPUT_0_ELEMS], …) -> Result<(), Error>`.
//! Header-equivalent constants: `ARENA_BYTES`, `WEIGHTS_BYTES` (flash), `NUM_INPUTS`, `NUM_OUTPUTS`,
//! per port `INPUT_i_ELEMS` and, for quantized models, `INPUT_i_SCALE` / `INPUT_i_ZERO_POINT`.
//!
//! No panics on the hot path: there is no slice indexing and no checked arithmetic. Integer scalar
//! arithmetic uses `wrapping_*` (MIR's wrapping semantics), float→int casts are `as` (saturating,
//! NaN → 0: MIR `cast`), integer division by zero gives 0, shifts out of range follow MIR. Each
//! buffer access is either *proven*: the writer bounds the index by interval arithmetic over the
//! static loop extents and finds it inside `[0, elems)` — then it is an unchecked `ptr.add(i)` —
//! or *checked*: compared against the static element count, a load out of range reads 0 and a store
//! out of range is dropped (the loop form only emits such accesses under a guard, e.g. padding, so
//! the check never fires). Index arithmetic that is proven to stay within ±2^31 uses plain
//! operators; anything else uses `wrapping_*`. Re-entry (an interrupt calling `run` while `run` is
//! using the static arena) returns `Err(Error::Busy)` on cores with compare-and-swap (thumbv7+); on
//! thumbv6m (Cortex-M0+) the flag is a plain load/store and `run` must not be called from an
//! interrupt that can preempt it.

use crate::{int_range, weight_arrays, Options, PortQuant};
use rlx_ir::lir::{Base, Lir};
use rlx_ir::loops::{Access, Expr, IOp, Kernel, Stmt, Var};
use rlx_ir::{BinaryOp, DType, UnaryOp};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

/// The Rust source and its sizes.
pub struct RustSource {
    pub rs: String,
    /// Bytes of `static` weight arrays (flash).
    pub weights_bytes: usize,
    /// Bytes of the static arena (RAM).
    pub arena_bytes: usize,
    /// Buffer accesses the writer proved in bounds (unchecked) and the ones it checks.
    pub proven_accesses: usize,
    pub checked_accesses: usize,
}

fn rtype(d: DType) -> Result<&'static str, String> {
    Ok(match d {
        DType::I8 => "i8",
        DType::U8 => "u8",
        DType::Bool => "bool",
        DType::I16 => "i16",
        DType::U16 => "u16",
        DType::I32 => "i32",
        DType::U32 => "u32",
        DType::I64 => "i64",
        DType::U64 => "u64",
        DType::F32 => "f32",
        DType::F64 => "f64",
        d => return Err(format!("dtype {d} has no Rust form on this target")),
    })
}

/// Memory type of a buffer element (bool is stored as one byte 0/1).
fn mtype(d: DType) -> Result<&'static str, String> {
    if d == DType::Bool {
        Ok("u8")
    } else {
        rtype(d)
    }
}

fn signed(d: DType) -> bool {
    matches!(d, DType::I8 | DType::I16 | DType::I32 | DType::I64)
}

/// Type of an emitted expression.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ty {
    /// Index arithmetic (`isize`).
    Idx,
    S(DType),
}

fn float_lit(x: f64, d: DType) -> String {
    let t = if d == DType::F64 { "f64" } else { "f32" };
    if x.is_nan() {
        return format!("{t}::NAN");
    }
    if x.is_infinite() {
        return format!("{}{t}::INFINITY", if x < 0.0 { "-" } else { "" });
    }
    let s = if d == DType::F64 { format!("{x:e}") } else { format!("{:e}", x as f32) };
    if s.starts_with('-') {
        format!("({s}{t})")
    } else {
        format!("{s}{t}")
    }
}

fn int_lit(v: i64, d: DType) -> String {
    let t = rtype(d).unwrap_or("i64");
    match d {
        DType::I64 if v == i64::MIN => "i64::MIN".into(),
        DType::U64 => format!("{}u64", v as u64),
        _ if v < 0 => format!("({v}{t})"),
        _ => format!("{v}{t}"),
    }
}

/// Inclusive interval of an index expression.
type Range = (i64, i64);

const I32R: Range = (i32::MIN as i64, i32::MAX as i64);

fn within(r: Range, b: Range) -> bool {
    r.0 >= b.0 && r.1 <= b.1
}

struct W<'a> {
    kernel: &'a Kernel,
    helpers: BTreeMap<String, String>,
    /// Loop variables in scope and their extents.
    loops: HashMap<Var, i64>,
    proven: usize,
    checked: usize,
    /// Write SMLAD inner loops (Cortex-M4 / M7: thumbv7em).
    dsp: bool,
}

/// Four int8 MACs: `sxtb16` splits each word into its even and odd bytes as two 16-bit lanes, and two
/// `smlad`s add both lane products to the accumulator (wrapping, as MIR's i32 add). Off ARM (the
/// host tests) the same sum in plain wrapping arithmetic.
const DOT4: &str = "#[cfg(target_arch = \"arm\")]
#[inline(always)]
unsafe fn dot4_i8(a: *const i8, b: *const i8, mut acc: i32) -> i32 {
    let x = core::ptr::read_unaligned(a as *const u32);
    let y = core::ptr::read_unaligned(b as *const u32);
    core::arch::asm!(
        \"sxtb16 {t0}, {x}\",
        \"sxtb16 {t1}, {y}\",
        \"smlad {acc}, {t0}, {t1}, {acc}\",
        \"sxtb16 {t0}, {x}, ror #8\",
        \"sxtb16 {t1}, {y}, ror #8\",
        \"smlad {acc}, {t0}, {t1}, {acc}\",
        acc = inout(reg) acc, x = in(reg) x, y = in(reg) y, t0 = out(reg) _, t1 = out(reg) _,
        options(pure, nomem, nostack),
    );
    acc
}
#[cfg(not(target_arch = \"arm\"))]
#[inline(always)]
unsafe fn dot4_i8(a: *const i8, b: *const i8, mut acc: i32) -> i32 {
    for j in 0..4 {
        acc = acc.wrapping_add((*a.add(j) as i32).wrapping_mul(*b.add(j) as i32));
    }
    acc
}";

impl W<'_> {
    fn helper(&mut self, name: &str, def: impl FnOnce() -> String) -> String {
        if !self.helpers.contains_key(name) {
            let d = def();
            self.helpers.insert(name.to_string(), d);
        }
        name.to_string()
    }

    /// The interval an index expression stays in, when it can be bounded.
    fn range(&self, e: &Expr) -> Option<Range> {
        let r = match e {
            Expr::Int(i) => (*i, *i),
            Expr::Var(v) => {
                let n = *self.loops.get(v)?;
                (0, (n - 1).max(0))
            }
            Expr::I(op, a, b) => {
                let (a, b) = (self.range(a)?, self.range(b)?);
                let c = |x: i64, y: i64, f: fn(i64, i64) -> Option<i64>| f(x, y);
                match op {
                    IOp::Add => (a.0.checked_add(b.0)?, a.1.checked_add(b.1)?),
                    IOp::Sub => (a.0.checked_sub(b.1)?, a.1.checked_sub(b.0)?),
                    IOp::Mul => {
                        let ps = [
                            c(a.0, b.0, i64::checked_mul)?,
                            c(a.0, b.1, i64::checked_mul)?,
                            c(a.1, b.0, i64::checked_mul)?,
                            c(a.1, b.1, i64::checked_mul)?,
                        ];
                        (*ps.iter().min()?, *ps.iter().max()?)
                    }
                    IOp::Div if b.0 == b.1 && b.0 > 0 && a.0 >= 0 => (a.0 / b.0, a.1 / b.0),
                    IOp::Rem if b.0 == b.1 && b.0 > 0 && a.0 >= 0 => (0, (b.0 - 1).min(a.1)),
                    IOp::Min => (a.0.min(b.0), a.1.min(b.1)),
                    IOp::Max => (a.0.max(b.0), a.1.max(b.1)),
                    IOp::Lt | IOp::Le | IOp::Eq | IOp::And => (0, 1),
                    _ => return None,
                }
            }
            Expr::Select(_, a, b) => {
                let (a, b) = (self.range(a)?, self.range(b)?);
                (a.0.min(b.0), a.1.max(b.1))
            }
            _ => return None,
        };
        within(r, I32R).then_some(r)
    }

    fn dtype_of_var(&self, v: Var) -> Ty {
        if self.loops.contains_key(&v) {
            Ty::Idx
        } else {
            self.kernel.decl_dtype(v).map(Ty::S).unwrap_or(Ty::Idx)
        }
    }

    /// `s` (of type `from`) converted to scalar type `to`.
    fn coerce(&self, s: String, from: Ty, to: DType) -> Result<String, String> {
        let t = rtype(to)?;
        Ok(match from {
            Ty::S(d) if d == to => s,
            Ty::Idx if to == DType::Bool => format!("({s} != 0)"),
            Ty::Idx => format!("({s} as {t})"),
            Ty::S(DType::Bool) if to.is_float() => format!("(({s}) as u8 as {t})"),
            Ty::S(DType::Bool) => format!("(({s}) as {t})"),
            Ty::S(d) if to == DType::Bool => {
                if d.is_float() {
                    format!("({s} != 0.0)")
                } else {
                    format!("({s} != 0)")
                }
            }
            Ty::S(_) => format!("({s} as {t})"),
        })
    }

    fn to_idx(&self, s: String, from: Ty) -> String {
        match from {
            Ty::Idx => s,
            Ty::S(DType::Bool) => format!("(({s}) as isize)"),
            Ty::S(_) => format!("({s} as isize)"),
        }
    }

    fn cond(&mut self, e: &Expr) -> Result<String, String> {
        // Index comparisons and conjunctions as Rust bools directly (readable, and no round trip
        // through 0/1).
        if let Expr::I(op @ (IOp::Lt | IOp::Le | IOp::Eq | IOp::And), a, b) = e {
            if *op == IOp::And {
                return Ok(format!("({} && {})", self.cond(a)?, self.cond(b)?));
            }
            let (sa, ta) = self.expr(a)?;
            let (sb, tb) = self.expr(b)?;
            return Ok(format!("({} {} {})", self.to_idx(sa, ta), op.name(), self.to_idx(sb, tb)));
        }
        let (s, t) = self.expr(e)?;
        Ok(match t {
            Ty::Idx => format!("({s} != 0)"),
            Ty::S(DType::Bool) => s,
            Ty::S(d) => self.coerce(s, Ty::S(d), DType::Bool)?,
        })
    }

    fn index(&mut self, e: &Expr) -> Result<(String, Option<Range>), String> {
        let (s, t) = self.expr(e)?;
        Ok((self.to_idx(s, t), self.range(e)))
    }

    fn load(&mut self, buf: u32, index: &Expr) -> Result<(String, Ty), String> {
        let p = self.kernel.params.get(buf as usize).ok_or("load from an unknown buffer")?;
        let (d, n) = (p.dtype, p.elems as i64);
        let (i, r) = self.index(index)?;
        let raw = match r {
            Some(r) if r.0 >= 0 && r.1 < n => {
                self.proven += 1;
                format!("*b{buf}.add({i} as usize)")
            }
            _ => {
                self.checked += 1;
                let zero = if d.is_float() { float_lit(0.0, d) } else { format!("0{}", mtype(d)?) };
                format!("{{ let i: isize = {i}; if i >= 0 && i < {n} {{ *b{buf}.add(i as usize) }} else {{ {zero} }} }}")
            }
        };
        Ok(if d == DType::Bool { (format!("({raw} != 0)"), Ty::S(d)) } else { (format!("({raw})"), Ty::S(d)) })
    }

    fn expr(&mut self, e: &Expr) -> Result<(String, Ty), String> {
        Ok(match e {
            Expr::Int(i) => {
                if !within((*i, *i), I32R) {
                    return Err(format!("index constant {i} does not fit 32 bits"));
                }
                (if *i < 0 { format!("({i}isize)") } else { format!("{i}isize") }, Ty::Idx)
            }
            Expr::Lit(v, d) => {
                let s = if d.is_float() {
                    float_lit(*v, *d)
                } else if *d == DType::Bool {
                    (*v != 0.0).to_string()
                } else if v.is_infinite() {
                    let (lo, hi) = int_range(*d);
                    match d {
                        DType::U64 if *v > 0.0 => "u64::MAX".into(),
                        _ => int_lit(if *v < 0.0 { lo } else { hi }, *d),
                    }
                } else {
                    int_lit(*v as i64, *d)
                };
                (s, Ty::S(*d))
            }
            Expr::Var(v) => (format!("v{}", v.0), self.dtype_of_var(*v)),
            Expr::Load { buf, index } => self.load(*buf, index)?,
            Expr::I(op, a, b) => {
                let whole = self.range(e);
                let (sa, ta) = self.expr(a)?;
                let (sb, tb) = self.expr(b)?;
                let (sa, sb) = (self.to_idx(sa, ta), self.to_idx(sb, tb));
                // Plain operators only where the operands and the result are bounded within 32 bits.
                let safe = whole.is_some() && self.range(a).is_some() && self.range(b).is_some();
                let s = match op {
                    IOp::Add | IOp::Sub | IOp::Mul if safe => format!("({sa} {} {sb})", op.name()),
                    IOp::Add => format!("{sa}.wrapping_add({sb})"),
                    IOp::Sub => format!("{sa}.wrapping_sub({sb})"),
                    IOp::Mul => format!("{sa}.wrapping_mul({sb})"),
                    IOp::Div | IOp::Rem => {
                        let (name, o) = if *op == IOp::Div { ("rlx_idiv", "wrapping_div") } else { ("rlx_irem", "wrapping_rem") };
                        match b.as_ref() {
                            Expr::Int(k) if *k > 0 => format!("({sa} {} {k}isize)", op.name()),
                            _ => {
                                let h = self.helper(name, || {
                                    format!("#[inline(always)]\nfn {name}(a: isize, b: isize) -> isize {{ if b == 0 {{ 0 }} else {{ a.{o}(b) }} }}")
                                });
                                format!("{h}({sa}, {sb})")
                            }
                        }
                    }
                    IOp::Min => format!("{sa}.min({sb})"),
                    IOp::Max => format!("{sa}.max({sb})"),
                    IOp::Lt | IOp::Le | IOp::Eq => format!("(({sa} {} {sb}) as isize)", op.name()),
                    IOp::And => format!("((({sa} != 0) & ({sb} != 0)) as isize)"),
                };
                (s, Ty::Idx)
            }
            Expr::Un(op, d, x) => (self.unary(*op, *d, x)?, Ty::S(op.out_dtype(*d))),
            Expr::Bin(op, d, a, b) => {
                let out = if op.is_compare() || op.is_logical() { DType::Bool } else { *d };
                (self.binary(*op, *d, a, b)?, Ty::S(out))
            }
            Expr::Dot4(c, a, b, _) => self.expr(&Expr::dot4_expanded(c, a, b))?,
            Expr::Select(c, a, b) => {
                let c = self.cond(c)?;
                let (sa, ta) = self.expr(a)?;
                let (sb, tb) = self.expr(b)?;
                let sb = match (ta, tb) {
                    (x, y) if x == y => sb,
                    (Ty::Idx, y) => self.to_idx(sb, y),
                    (Ty::S(d), y) => self.coerce(sb, y, d)?,
                };
                (format!("(if {c} {{ {sa} }} else {{ {sb} }})"), ta)
            }
            Expr::Cast { to, x, .. } => {
                let (s, t) = self.expr(x)?;
                (self.coerce(s, t, *to)?, Ty::S(*to))
            }
            Expr::ToIndex { x, .. } => {
                let (s, t) = self.expr(x)?;
                (self.to_idx(s, t), Ty::Idx)
            }
        })
    }

    fn operand(&mut self, x: &Expr, d: DType) -> Result<String, String> {
        let (s, t) = self.expr(x)?;
        self.coerce(s, t, d)
    }

    fn unary(&mut self, op: UnaryOp, d: DType, x: &Expr) -> Result<String, String> {
        let t = rtype(d)?;
        let xs = self.operand(x, d)?;
        let fl = d.is_float();
        let name = format!("rlx_{}_{t}", op.name());
        let body: String = match op {
            UnaryOp::Neg if fl => return Ok(format!("(-{xs})")),
            UnaryOp::Neg => return Ok(format!("{xs}.wrapping_neg()")),
            UnaryOp::Abs if fl => "if x < 0.0 { -x } else { x }".into(),
            UnaryOp::Abs if signed(d) => return Ok(format!("{xs}.wrapping_abs()")),
            UnaryOp::Abs => return Ok(xs),
            UnaryOp::Relu if fl => "if x > 0.0 { x } else { 0.0 }".into(),
            UnaryOp::Relu if d == DType::Bool => return Ok(xs),
            UnaryOp::Relu => "if x > 0 { x } else { 0 }".into(),
            UnaryOp::Sign if fl => format!("((x > 0.0) as i8 - (x < 0.0) as i8) as {t}"),
            UnaryOp::Sign if signed(d) => return Ok(format!("{xs}.signum()")),
            UnaryOp::Sign => format!("(x > 0) as {t}"),
            UnaryOp::BitNot if !fl && d != DType::Bool => return Ok(format!("(!{xs})")),
            UnaryOp::Not => {
                let b = self.operand(x, DType::Bool)?;
                return Ok(format!("(!{b})"));
            }
            UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round if !fl => return Ok(xs),
            UnaryOp::Recip if fl => return Ok(format!("(1.0 / {xs})")),
            _ => {
                return Err(format!(
                    "unary {} on {d} has no no_std Rust form (core has no libm): use --emit c, or quantize with --calibrate",
                    op.name()
                ))
            }
        };
        let h = self.helper(&name, || format!("#[inline(always)]\nfn {name}(x: {t}) -> {t} {{ {body} }}"));
        Ok(format!("{h}({xs})"))
    }

    fn binary(&mut self, op: BinaryOp, d: DType, a: &Expr, b: &Expr) -> Result<String, String> {
        use BinaryOp::*;
        if op.is_logical() {
            let (xa, xb) = (self.operand(a, DType::Bool)?, self.operand(b, DType::Bool)?);
            let o = match op {
                And => "&",
                Or => "|",
                _ => "^",
            };
            return Ok(format!("({xa} {o} {xb})"));
        }
        let (xa, xb) = (self.operand(a, d)?, self.operand(b, d)?);
        let t = rtype(d)?;
        let fl = d.is_float();
        let call = |w: &mut W, body: String| {
            let name = format!("rlx_{}_{t}", op.name());
            let h = w.helper(&name, || format!("#[inline(always)]\nfn {name}(a: {t}, b: {t}) -> {t} {{ {body} }}"));
            format!("{h}({xa}, {xb})")
        };
        Ok(match op {
            Add | Sub | Mul | Div if fl => {
                let o = ["+", "-", "*", "/"][[Add, Sub, Mul, Div].iter().position(|&o| o == op).unwrap_or(0)];
                format!("({xa} {o} {xb})")
            }
            Add if d != DType::Bool => format!("{xa}.wrapping_add({xb})"),
            Sub if d != DType::Bool => format!("{xa}.wrapping_sub({xb})"),
            Mul if d != DType::Bool => format!("{xa}.wrapping_mul({xb})"),
            Div if d != DType::Bool => call(self, "if b == 0 { 0 } else { a.wrapping_div(b) }".into()),
            Max => call(self, "if a > b { a } else { b }".into()),
            Min => call(self, "if a < b { a } else { b }".into()),
            Eq => format!("({xa} == {xb})"),
            Lt => format!("({xa} < {xb})"),
            Le => format!("({xa} <= {xb})"),
            Gt => format!("({xa} > {xb})"),
            Ge => format!("({xa} >= {xb})"),
            BitAnd if !fl => format!("({xa} & {xb})"),
            BitOr if !fl => format!("({xa} | {xb})"),
            BitXor if !fl => format!("({xa} ^ {xb})"),
            Shl | Shr if !fl && d != DType::Bool => {
                // MIR: amounts outside [0, bits) give 0 (or -1 for an arithmetic right shift of a negative).
                let bits = d.size().unwrap_or(4) * 8;
                let neg = if signed(d) { "b < 0 || " } else { "" };
                let body = if op == Shl {
                    format!("if {neg}b >= {bits} {{ 0 }} else {{ a.wrapping_shl(b as u32) }}")
                } else if signed(d) {
                    format!("if b < 0 || b >= {bits} {{ if a < 0 {{ -1 }} else {{ 0 }} }} else {{ a.wrapping_shr(b as u32) }}")
                } else {
                    format!("if b >= {bits} {{ 0 }} else {{ a.wrapping_shr(b as u32) }}")
                };
                call(self, body)
            }
            _ => return Err(format!("binary {} on {d} has no no_std Rust form on this target", op.name())),
        })
    }

    fn stmts(&mut self, s: &[Stmt], depth: usize, out: &mut String) -> Result<(), String> {
        let pad = "    ".repeat(depth);
        for st in s {
            if let Some(d) = self.dsp.then(|| crate::dot(st, self.kernel)).flatten() {
                // Both accesses proven in bounds over 0..extent: the 4-byte reads at k ≤ extent - 4
                // stay inside them (each index steps by 1 with k).
                let (k, e, acc) = (d.var.0, d.extent, d.acc.0);
                self.loops.insert(d.var, e);
                let (ia, ra) = self.index(d.a.1)?;
                let (ib, rb) = self.index(d.b.1)?;
                let inb = |r: Option<Range>, b: u32| r.is_some_and(|r| r.0 >= 0 && r.1 < self.kernel.params[b as usize].elems as i64);
                if inb(ra, d.a.0) && inb(rb, d.b.0) {
                    let Stmt::For { body, .. } = st else { unreachable!() };
                    let mut rest = String::new();
                    self.stmts(body, depth + 2, &mut rest)?;
                    self.loops.remove(&d.var);
                    self.proven += 2;
                    let f = self.helper("dot4_i8", || DOT4.to_string());
                    let _ = writeln!(out, "{pad}{{\n{pad}    let mut v{k}: isize = 0;\n{pad}    while v{k} + 4 <= {e}isize {{\n{pad}        v{acc} = {f}(b{ba}.add({ia} as usize), b{bb}.add({ib} as usize), v{acc});\n{pad}        v{k} += 4;\n{pad}    }}\n{pad}    while v{k} < {e}isize {{\n{rest}{pad}        v{k} += 1;\n{pad}    }}\n{pad}}}", ba = d.a.0, bb = d.b.0);
                    continue;
                }
                self.loops.remove(&d.var);
            }
            match st {
                Stmt::For { var, extent, body, .. } => {
                    if !within((*extent, *extent), I32R) {
                        return Err(format!("loop extent {extent} does not fit 32 bits"));
                    }
                    let _ = writeln!(out, "{pad}for v{} in 0..{extent}isize {{", var.0);
                    self.loops.insert(*var, *extent);
                    self.stmts(body, depth + 1, out)?;
                    self.loops.remove(var);
                    let _ = writeln!(out, "{pad}}}");
                }
                Stmt::Decl { var, dtype, init } => {
                    let v = self.operand(init, *dtype)?;
                    let _ = writeln!(out, "{pad}let mut v{}: {} = {v};", var.0, rtype(*dtype)?);
                }
                Stmt::Assign { var, value } => {
                    let d = self.kernel.decl_dtype(*var).ok_or_else(|| format!("assignment to v{}, which is not a declared scalar", var.0))?;
                    let v = self.operand(value, d)?;
                    let _ = writeln!(out, "{pad}v{} = {v};", var.0);
                }
                Stmt::Store { buf, index, value } => {
                    let p = self.kernel.params.get(*buf as usize).ok_or("store to an unknown buffer")?;
                    let (d, n) = (p.dtype, p.elems as i64);
                    let v = self.operand(value, d)?;
                    let v = if d == DType::Bool { format!("({v} as u8)") } else { v };
                    let (i, r) = self.index(index)?;
                    match r {
                        Some(r) if r.0 >= 0 && r.1 < n => {
                            self.proven += 1;
                            let _ = writeln!(out, "{pad}*b{buf}.add({i} as usize) = {v};");
                        }
                        _ => {
                            self.checked += 1;
                            let _ = writeln!(out, "{pad}{{ let i: isize = {i}; if i >= 0 && i < {n} {{ *b{buf}.add(i as usize) = {v}; }} }}");
                        }
                    }
                }
                // A prefetch hint: no effect on results; the Rust writer skips it.
                Stmt::Prefetch { .. } => {}
                Stmt::Comm { op, .. } => return Err(format!("{} (a sharded model's collective) is not supported on MCU targets", op.name())),
                Stmt::If { cond, body } => {
                    let c = self.cond(cond)?;
                    let _ = writeln!(out, "{pad}if {c} {{");
                    self.stmts(body, depth + 1, out)?;
                    let _ = writeln!(out, "{pad}}}");
                }
            }
        }
        Ok(())
    }
}

fn array_values(bytes: &[u8], d: DType) -> Result<String, String> {
    let es = d.size().ok_or("weights dtype has no element size")?;
    let mut s = String::with_capacity(bytes.len() * 5);
    for (i, c) in bytes.chunks_exact(es).enumerate() {
        if i > 0 {
            s.push_str(if i % 16 == 0 { ",\n    " } else { ", " });
        }
        if d.is_float() {
            let v = rlx_ir::tensor::decode_f64(d, c, 0);
            let _ = write!(s, "{}", float_lit(v, d).trim_start_matches('(').trim_end_matches(')'));
        } else if d == DType::Bool {
            let _ = write!(s, "{}", (c[0] != 0) as u8);
        } else if d == DType::U64 {
            let _ = write!(s, "{}", rlx_ir::tensor::decode_i64(d, c, 0) as u64);
        } else {
            let _ = write!(s, "{}", rlx_ir::tensor::decode_i64(d, c, 0));
        }
    }
    Ok(s)
}

fn comment(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// Writes `NAME.rs` for a planned program.
pub fn emit_rust(lir: &Lir, o: &Options) -> Result<RustSource, String> {
    let arrays = weight_arrays(lir)?;
    let weights_bytes: usize = arrays.iter().map(|a| a.1).sum();
    for b in &lir.buffers {
        if b.elems() > i32::MAX as usize {
            return Err(format!("buffer '{}' has {} elements (more than 32-bit indexing allows)", b.label, b.elems()));
        }
    }
    let mut helpers = BTreeMap::new();
    let (mut proven, mut checked) = (0, 0);
    let mut kernels = String::new();
    let mut calls = Vec::new();
    for (li, l) in lir.launches.iter().enumerate() {
        let k = &l.kernel;
        let mut params = Vec::new();
        let mut args = Vec::new();
        for (pi, (p, &bi)) in k.params.iter().zip(&l.bindings).enumerate() {
            let t = mtype(p.dtype)?;
            let b = lir.buffers.get(bi as usize).ok_or("launch binds an unknown buffer")?;
            let es = p.dtype.size().unwrap_or(1);
            if b.offset % es != 0 {
                return Err(format!("buffer '{}' is not element-aligned", b.label));
            }
            let read = p.access == Access::Read;
            let q = if read { "const" } else { "mut" };
            params.push(format!("b{pi}: *{q} {t}"));
            if p.elems > b.elems() {
                return Err(format!("kernel '{}' reads {} elements of buffer '{}', which has {}", k.name, p.elems, b.label, b.elems()));
            }
            args.push(match b.base {
                Base::Arena => format!("base.add({}) as *{q} {t}", b.offset),
                Base::Weights => {
                    let ai = arrays
                        .iter()
                        .position(|a| b.offset >= a.0 && b.offset < a.0 + a.1.max(1))
                        .ok_or("weights buffer outside the blob")?;
                    if !read {
                        return Err(format!("kernel '{}' writes the weights buffer '{}'", k.name, b.label));
                    }
                    let rel = b.offset - arrays[ai].0;
                    if rel % es != 0 {
                        return Err(format!("weights buffer '{}' is not element-aligned in its array", b.label));
                    }
                    format!("W{ai}.as_ptr().add({}) as *const {t}", rel / es)
                }
                Base::Input(i) => {
                    if !read {
                        return Err(format!("kernel '{}' writes input {i}", k.name));
                    }
                    format!("in{i}.as_ptr().add({}) as *const {t}", b.offset / es)
                }
                Base::Output(i) => format!("out{i}.as_mut_ptr().add({}) as *{q} {t}", b.offset / es),
                Base::State => return Err(format!("kernel '{}' reads state (a KV cache): MCU targets have no stateful artifacts", k.name)),
            });
        }
        let dsp = matches!(o.core, crate::Core::M4 | crate::Core::M7);
        let mut w = W { kernel: k, helpers: std::mem::take(&mut helpers), loops: HashMap::new(), proven: 0, checked: 0, dsp };
        let mut text = String::new();
        w.stmts(&k.body, 2, &mut text)?;
        helpers = w.helpers;
        proven += w.proven;
        checked += w.checked;
        let _ = writeln!(
            kernels,
            "    // {}: {} accesses proven in bounds, {} checked.\n    // SAFETY (caller): every pointer is valid for its parameter's element count (the planner's\n    // bindings) and the output does not overlap an input of this kernel.\n    #[inline(never)]\n    pub(super) unsafe fn k{li}({}) {{\n{text}    }}\n",
            comment(&k.name),
            w.proven,
            w.checked,
            params.join(", ")
        );
        calls.push(format!("            k{li}({});", args.join(", ")));
    }

    let n = &o.name;
    let mut r = String::new();
    let _ = writeln!(r, "// {n}.rs: generated by rlxc {} for {} (no_std Rust). Do not edit.", o.rlxc_version, o.core.name());
    let _ = writeln!(r, "// Include it as a module of a #![no_std] crate: `mod {n} {{ include!(\"{n}.rs\"); }}`.");
    let _ = writeln!(r, "// Weights are `static` arrays (flash), intermediates live in one static arena (RAM); no heap,");
    let _ = writeln!(r, "// no dependencies, no panicking operations in `run`.\n");
    let _ = writeln!(r, "/// Static RAM reserved for intermediates (the arena).");
    let _ = writeln!(r, "pub const ARENA_BYTES: usize = {};", lir.arena_bytes);
    let _ = writeln!(r, "/// Bytes of `static` weight data (flash).");
    let _ = writeln!(r, "pub const WEIGHTS_BYTES: usize = {weights_bytes};");
    let _ = writeln!(r, "pub const NUM_INPUTS: usize = {};\npub const NUM_OUTPUTS: usize = {};\n", lir.inputs.len(), lir.outputs.len());
    let mut sig = Vec::new();
    for (kind, ports, qs) in [("INPUT", &lir.inputs, &o.inputs), ("OUTPUT", &lir.outputs, &o.outputs)] {
        for (i, p) in ports.iter().enumerate() {
            let elems: usize = p.ty.shape.as_fixed().unwrap_or_default().iter().product();
            let _ = writeln!(r, "/// {} {i} \"{}\": {}", kind.to_ascii_lowercase(), comment(&p.name).replace('"', "'"), p.ty);
            let _ = writeln!(r, "pub const {kind}_{i}_ELEMS: usize = {elems};");
            if let Some(Some(PortQuant { scale, zero_point })) = qs.get(i) {
                let _ = writeln!(r, "/// real = (q - {kind}_{i}_ZERO_POINT) * {kind}_{i}_SCALE");
                let _ = writeln!(r, "pub const {kind}_{i}_SCALE: f32 = {};", float_lit(*scale as f64, DType::F32));
                let _ = writeln!(r, "pub const {kind}_{i}_ZERO_POINT: i32 = {zero_point};");
            }
            let t = mtype(p.ty.dtype)?;
            if kind == "INPUT" {
                sig.push(format!("in{i}: &[{t}; {kind}_{i}_ELEMS]"));
            } else {
                sig.push(format!("out{i}: &mut [{t}; {kind}_{i}_ELEMS]"));
            }
            r.push('\n');
        }
    }
    let _ = writeln!(r, "/// Why `run` failed.\n#[derive(Clone, Copy, Debug, PartialEq, Eq)]\npub enum Error {{\n    /// `run` was entered while another call was using the static arena (an interrupt preempted it).\n    Busy = 8,\n}}\n");
    let _ = writeln!(r, "/// Runs the model: reads the inputs, writes every element of the outputs. Uses the static arena:");
    let _ = writeln!(r, "/// a call that preempts a running call returns `Err(Error::Busy)` (on thumbv6m, where there is no");
    let _ = writeln!(r, "/// compare-and-swap, do not call `run` from an interrupt that can preempt it).");
    let _ = writeln!(r, "pub fn run({}) -> Result<(), Error> {{", sig.join(", "));
    let _ = writeln!(r, "    if !imp::acquire() {{\n        return Err(Error::Busy);\n    }}");
    let _ = writeln!(r, "    // SAFETY: the arena is ours alone until `release` (the busy flag); every kernel's pointers are");
    let _ = writeln!(r, "    // the planner's bindings: offsets and element counts inside the arena, a weights array or a");
    let _ = writeln!(r, "    // port array whose length is fixed by its type, so each kernel's accesses (proven or checked");
    let _ = writeln!(r, "    // against the static element count) stay inside the memory it was given.");
    let _ = writeln!(r, "    unsafe {{\n        let base = imp::arena();\n        let _ = base;");
    let _ = writeln!(r, "        {{\n            use imp::*;");
    for c in &calls {
        let _ = writeln!(r, "{c}");
    }
    let _ = writeln!(r, "        }}\n    }}\n    imp::release();\n    Ok(())\n}}\n");

    let _ = writeln!(r, "#[allow(unused_mut, unused_variables, unused_parens, unused_braces, non_upper_case_globals, dead_code, unused_unsafe, clippy::all)]\nmod imp {{");
    let _ = writeln!(r, "    use core::sync::atomic::{{AtomicBool, Ordering}};\n");
    let _ = writeln!(r, "    #[repr(C, align({}))]\n    struct Arena([u8; {}]);", lir.align.max(8), lir.arena_bytes.max(1));
    let _ = writeln!(r, "    static mut ARENA: Arena = Arena([0; {}]);", lir.arena_bytes.max(1));
    let _ = writeln!(r, "    static BUSY: AtomicBool = AtomicBool::new(false);\n");
    let _ = writeln!(r, "    #[cfg(target_has_atomic = \"8\")]\n    pub(super) fn acquire() -> bool {{\n        BUSY.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()\n    }}");
    let _ = writeln!(r, "    #[cfg(not(target_has_atomic = \"8\"))]\n    pub(super) fn acquire() -> bool {{\n        if BUSY.load(Ordering::Acquire) {{\n            return false;\n        }}\n        BUSY.store(true, Ordering::Relaxed);\n        true\n    }}");
    let _ = writeln!(r, "    pub(super) fn release() {{\n        BUSY.store(false, Ordering::Release);\n    }}");
    let _ = writeln!(r, "    pub(super) fn arena() -> *mut u8 {{\n        unsafe {{ core::ptr::addr_of_mut!(ARENA) as *mut u8 }}\n    }}\n");
    let _ = writeln!(r, "    // Weights: {weights_bytes} bytes of static data (flash).");
    for (ai, &(off, bytes, d)) in arrays.iter().enumerate() {
        let _ = writeln!(
            r,
            "    pub(super) static W{ai}: [{}; {}] = [\n    {}\n    ];",
            mtype(d)?,
            bytes / d.size().unwrap_or(1),
            array_values(&lir.weights[off..off + bytes], d)?
        );
    }
    r.push('\n');
    for h in helpers.values() {
        let _ = writeln!(r, "    {}", h.replace('\n', "\n    "));
    }
    r.push('\n');
    r.push_str(&kernels);
    let _ = writeln!(r, "}}");
    Ok(RustSource { rs: r, weights_bytes, arena_bytes: lir.arena_bytes, proven_accesses: proven, checked_accesses: checked })
}
