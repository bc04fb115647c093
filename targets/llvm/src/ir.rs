//! Loop form → LLVM IR text. One internal function per kernel, one exported entry `NAME_run` that
//! checks its arguments and calls the kernels in schedule order. Scalars live in allocas that LLVM's
//! SROA/mem2reg promote; loops are plain counted loops that LLVM's vectorizer sees through.

use rlx_ir::lir::{Base, Lir};
use rlx_ir::loops::{Expr, IOp, Kernel, LoopKind, Stmt, Var};
use rlx_ir::{BinaryOp, DType, UnaryOp};
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write;

mod math;
mod region;
mod transpose;
mod vector;

pub use rlx_ir::lir::{COMM_ERROR_CODES, ERROR_CODES, LOOP_ERROR_CODES, STATE_ERROR_CODES};

/// `NAME_run`'s return code when a collective fails.
const COMM_CODE: i32 = COMM_ERROR_CODES[0].0;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ty {
    Index,
    S(DType),
}

fn llty(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F64 => "double",
        DType::I8 | DType::U8 => "i8",
        DType::I16 | DType::U16 => "i16",
        DType::I32 | DType::U32 => "i32",
        DType::I64 | DType::U64 => "i64",
        DType::Bool => "i1",
        // f16/bf16 arithmetic is not claimed; these appear only as the source or destination of a
        // cast (which legalization resolves by its input dtype), so they need storage and conversion.
        DType::F16 => "half",
        DType::BF16 => "bfloat",
        _ => unreachable!("dtype {d} is not claimed by the LLVM target"),
    }
}

/// Storage type in memory (bool is a byte).
fn memty(d: DType) -> &'static str {
    if d == DType::Bool {
        "i8"
    } else {
        llty(d)
    }
}

fn is_unsigned(d: DType) -> bool {
    matches!(d, DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Bool)
}

fn bits(d: DType) -> u32 {
    match d {
        DType::I8 | DType::U8 => 8,
        DType::I16 | DType::U16 => 16,
        DType::I32 | DType::U32 => 32,
        DType::I64 | DType::U64 => 64,
        DType::Bool => 1,
        _ => 0,
    }
}

fn float_lit(v: f64, d: DType) -> String {
    // LLVM accepts the 64-bit hex form for both float and double (the value must be exact in float).
    let x = if d == DType::F32 { v as f32 as f64 } else { v };
    format!("0x{:016X}", x.to_bits())
}

fn lit(v: f64, d: DType) -> String {
    match d {
        DType::F32 | DType::F64 => float_lit(v, d),
        DType::Bool => if v != 0.0 { "true" } else { "false" }.into(),
        DType::U64 => format!("{}", v as u64 as i64),
        _ => {
            let b = bits(d);
            let i = v as i64;
            // Wrap into the type's range, printed signed.
            let w = if b == 64 { i } else { (i << (64 - b)) >> (64 - b) };
            format!("{w}")
        }
    }
}

pub struct Writer<'a> {
    out: String,
    tmp: usize,
    label: usize,
    decls: &'a mut BTreeSet<String>,
    vars: HashMap<Var, (Ty, String)>,
    params: Vec<(DType, String)>,
    allocas: String,
    /// The next `For` iterates `%start..%end` (the kernel's parallel split) instead of `0..extent`.
    split_next: bool,
    /// Inside a vector loop: its index and lane count (see `vector.rs`).
    vec_var: Option<Var>,
    lanes: u32,
    /// Scalars declared inside the vector loop, held as vectors.
    vvars: HashMap<Var, (Ty, String)>,
    /// `vector(n)` loops are written as scalar loops (the GPU writer: its threads are the lanes).
    scalar_only: bool,
    /// The instruction a vector `Dot4` becomes.
    int8: crate::Int8Dot,
    /// Slots already in `allocas` (a body written more than once — a tiled GPU kernel's epilogue, once
    /// per output a thread owns — reuses its slots).
    allocated: BTreeSet<String>,
    /// f32 exp by `ex2.approx` (the GPU writer's tensor-core softmax: [`Writer::set_approx_exp`]).
    approx_exp: bool,
    /// Store instructions held back while [`Writer::defer_stores`] is on.
    deferred: Option<Vec<String>>,
    /// The parameters whose every stored f32 is rounded to tf32 first (the GPU writer's tf32 operands
    /// stored ahead: [`Writer::set_tf32_stores`]).
    tf32_stores: Vec<u32>,
    /// Each parameter's alias-scope suffix on its loads and stores (the GPU writer: `nvptx/alias.rs`;
    /// empty: no marks).
    alias: Vec<String>,
}

impl<'a> Writer<'a> {
    fn t(&mut self) -> String {
        self.tmp += 1;
        format!("%t{}", self.tmp)
    }
    fn l(&mut self, p: &str) -> String {
        self.label += 1;
        format!("{p}{}", self.label)
    }
    fn line(&mut self, s: &str) {
        self.out.push_str("  ");
        self.out.push_str(s);
        self.out.push('\n');
    }
    fn op(&mut self, s: String) -> String {
        let t = self.t();
        self.line(&format!("{t} = {s}"));
        t
    }
    fn call_math(&mut self, name: &str, d: DType, args: &[&str]) -> String {
        let ty = llty(d);
        let sig: Vec<&str> = args.iter().map(|_| ty).collect();
        self.decls.insert(format!("declare {ty} @{name}({})", sig.join(", ")));
        let a: Vec<String> = args.iter().map(|x| format!("{ty} {x}")).collect();
        // `nsz` on the NaN-propagating max / min: the interpreter leaves max(−0, +0)'s sign open too,
        // and without it x86 spends three more instructions a call ordering the zeros (see vector.rs).
        let fl = if name.starts_with("llvm.maximum.") || name.starts_with("llvm.minimum.") { "nsz " } else { "" };
        self.op(format!("call {fl}{ty} @{name}({})", a.join(", ")))
    }
    fn intr(&mut self, base: &str, d: DType, args: &[&str]) -> String {
        let suffix = match d {
            DType::F32 => "f32".to_string(),
            DType::F64 => "f64".to_string(),
            _ => format!("i{}", bits(d)),
        };
        let name = format!("llvm.{base}.{suffix}");
        self.call_math(&name, d, args)
    }
    fn libm(&mut self, base: &str, d: DType, args: &[&str]) -> String {
        let name = if d == DType::F32 { format!("{base}f") } else { base.to_string() };
        self.call_math(&name, d, args)
    }

    fn ty_of(&self, e: &Expr) -> Ty {
        match e {
            Expr::Int(_) | Expr::I(..) | Expr::ToIndex { .. } => Ty::Index,
            Expr::Lit(_, d) => Ty::S(*d),
            Expr::Var(v) => self.vars[v].0,
            Expr::Load { buf, .. } => Ty::S(self.params[*buf as usize].0),
            Expr::Un(u, d, _) => Ty::S(u.out_dtype(*d)),
            Expr::Bin(b, d, _, _) => Ty::S(if b.is_compare() || b.is_logical() { DType::Bool } else { *d }),
            Expr::Dot4(..) => Ty::S(DType::I32),
            Expr::Select(_, a, _) => self.ty_of(a),
            Expr::Cast { to, .. } => Ty::S(*to),
        }
    }

    /// Emits `e` as an i1 condition.
    fn cond(&mut self, e: &Expr) -> String {
        let v = self.expr(e);
        match self.ty_of(e) {
            Ty::Index => self.op(format!("icmp ne i64 {v}, 0")),
            Ty::S(DType::Bool) => v,
            Ty::S(d) if d.is_float() => self.op(format!("fcmp une {} {v}, 0.0", llty(d))),
            Ty::S(d) => self.op(format!("icmp ne {} {v}, 0", llty(d))),
        }
    }

    fn expr(&mut self, e: &Expr) -> String {
        match e {
            Expr::Int(i) => format!("{i}"),
            Expr::Lit(v, d) => lit(*v, *d),
            Expr::Var(v) => {
                let (ty, slot) = self.vars[v].clone();
                let t = match ty {
                    Ty::Index => "i64",
                    Ty::S(d) => llty(d),
                };
                self.op(format!("load {t}, ptr {slot}"))
            }
            Expr::Load { buf, index } => {
                let i = self.expr(index);
                let (d, p) = self.params[*buf as usize].clone();
                let mt = memty(d);
                let ptr = self.op(format!("getelementptr inbounds {mt}, ptr {p}, i64 {i}"));
                let v = self.op(format!("load {mt}, ptr {ptr}{}", self.alias_of(*buf)));
                if d == DType::Bool {
                    self.op(format!("icmp ne i8 {v}, 0"))
                } else {
                    v
                }
            }
            Expr::I(op, a, b) => {
                let (x, y) = (self.expr(a), self.expr(b));
                match op {
                    IOp::Add => self.op(format!("add nsw i64 {x}, {y}")),
                    IOp::Sub => self.op(format!("sub nsw i64 {x}, {y}")),
                    IOp::Mul => self.op(format!("mul nsw i64 {x}, {y}")),
                    IOp::Div => self.op(format!("sdiv i64 {x}, {y}")),
                    IOp::Rem => self.op(format!("srem i64 {x}, {y}")),
                    IOp::Min => self.call_math("llvm.smin.i64", DType::I64, &[&x, &y]),
                    IOp::Max => self.call_math("llvm.smax.i64", DType::I64, &[&x, &y]),
                    IOp::Lt | IOp::Le | IOp::Eq => {
                        let c = match op {
                            IOp::Lt => "slt",
                            IOp::Le => "sle",
                            _ => "eq",
                        };
                        let b = self.op(format!("icmp {c} i64 {x}, {y}"));
                        self.op(format!("zext i1 {b} to i64"))
                    }
                    IOp::And => {
                        let p = self.op(format!("icmp ne i64 {x}, 0"));
                        let q = self.op(format!("icmp ne i64 {y}, 0"));
                        let r = self.op(format!("and i1 {p}, {q}"));
                        self.op(format!("zext i1 {r} to i64"))
                    }
                }
            }
            Expr::Dot4(c, a, b, _) => self.expr(&Expr::dot4_expanded(c, a, b)),
            Expr::Select(c, a, b) => {
                let cv = self.cond(c);
                let (x, y) = (self.expr(a), self.expr(b));
                let t = match self.ty_of(a) {
                    Ty::Index => "i64",
                    Ty::S(d) => llty(d),
                };
                self.op(format!("select i1 {cv}, {t} {x}, {t} {y}"))
            }
            Expr::Cast { from, to, x } => {
                let v = self.expr(x);
                self.cast(&v, *from, *to)
            }
            Expr::ToIndex { from, x } => {
                let v = self.expr(x);
                match from {
                    d if d.is_float() => self.op(format!("fptosi {} {v} to i64", llty(*d))),
                    DType::I64 | DType::U64 => v,
                    d if is_unsigned(*d) => self.op(format!("zext {} {v} to i64", llty(*d))),
                    d => self.op(format!("sext {} {v} to i64", llty(*d))),
                }
            }
            Expr::Un(u, d, x) => {
                let v = self.expr(x);
                self.unary(*u, *d, &v)
            }
            Expr::Bin(b, d, x, y) => {
                let (p, q) = (self.expr(x), self.expr(y));
                self.binary(*b, *d, &p, &q)
            }
        }
    }

    fn cast(&mut self, v: &str, from: DType, to: DType) -> String {
        if from == to {
            return v.to_string();
        }
        let half = |d: DType| matches!(d, DType::F16 | DType::BF16);
        if (half(from) && !to.is_float()) || (half(to) && !from.is_float()) {
            // Integer <-> f16/bf16 goes through f32.
            let f = self.cast(v, from, DType::F32);
            return self.cast(&f, DType::F32, to);
        }
        let (ft, tt) = (llty(from), llty(to));
        if to == DType::Bool {
            return if from.is_float() { self.op(format!("fcmp une {ft} {v}, 0.0")) } else { self.op(format!("icmp ne {ft} {v}, 0")) };
        }
        match (from.is_float(), to.is_float()) {
            (true, true) => {
                let width = |d: DType| match d {
                    DType::F64 => 64,
                    DType::F32 => 32,
                    _ => 16,
                };
                let gpu_cast = if to == DType::BF16 && self.scalar_only { std::env::var("RLX_CUDA_BF16_CAST").unwrap_or_default() } else { String::new() };
                if gpu_cast == "cvt" || gpu_cast == "pack" {
                    // The GPU writer with RLX_CUDA_BF16_CAST=cvt: one `cvt.rn.bf16.f32` (sm_80 and
                    // newer; round to nearest even, the bits of the form below but a NaN's, canonical
                    // 0x7FFF here) where the form below takes seven instructions; =pack: the pair
                    // conversion `cvt.rn.bf16x2.f32` of the value twice, its low half.
                    let f = self.cast(v, from, DType::F32);
                    let h = if gpu_cast == "cvt" {
                        self.op(format!("call i16 asm \"cvt.rn.bf16.f32 $0, $1;\", \"=h,f\"(float {f}) #2"))
                    } else {
                        let p = self.op(format!("call i32 asm \"cvt.rn.bf16x2.f32 $0, $1, $2;\", \"=r,f,f\"(float {f}, float {f}) #2"));
                        self.op(format!("trunc i32 {p} to i16"))
                    };
                    self.op(format!("bitcast i16 {h} to bfloat"))
                } else if to == DType::BF16 {
                    // Round to nearest even by hand (no libcall needed): via f32, as the interpreter.
                    let f = self.cast(v, from, DType::F32);
                    let b = self.op(format!("bitcast float {f} to i32"));
                    let lsb = self.op(format!("lshr i32 {b}, 16"));
                    let lsb = self.op(format!("and i32 {lsb}, 1"));
                    let bias = self.op(format!("add i32 {lsb}, 32767"));
                    let r = self.op(format!("add i32 {b}, {bias}"));
                    let r = self.op(format!("lshr i32 {r}, 16"));
                    let nan = self.op(format!("fcmp uno float {f}, 0.0"));
                    let r = self.op(format!("select i1 {nan}, i32 32704, i32 {r}"));
                    let h = self.op(format!("trunc i32 {r} to i16"));
                    self.op(format!("bitcast i16 {h} to bfloat"))
                } else if from == DType::BF16 {
                    let h = self.op(format!("bitcast bfloat {v} to i16"));
                    let w = self.op(format!("zext i16 {h} to i32"));
                    let w = self.op(format!("shl i32 {w}, 16"));
                    let f = self.op(format!("bitcast i32 {w} to float"));
                    self.cast(&f, DType::F32, to)
                } else if to == DType::F16 && from == DType::F64 {
                    // Via f32 like the interpreter (f32 storage), and no f64 -> f16 libcall.
                    let f = self.cast(v, from, DType::F32);
                    self.cast(&f, DType::F32, to)
                } else if width(to) > width(from) {
                    self.op(format!("fpext {ft} {v} to {tt}"))
                } else {
                    self.op(format!("fptrunc {ft} {v} to {tt}"))
                }
            }
            (true, false) => {
                let name = format!("llvm.fpto{}i.sat.i{}.{}", if is_unsigned(to) { "u" } else { "s" }, bits(to), if from == DType::F32 { "f32" } else { "f64" });
                self.decls.insert(format!("declare {tt} @{name}({ft})"));
                self.op(format!("call {tt} @{name}({ft} {v})"))
            }
            (false, true) => self.op(format!("{}itofp {ft} {v} to {tt}", if is_unsigned(from) { "u" } else { "s" })),
            (false, false) => {
                let (bf, bt) = (bits(from), bits(to));
                if bf == bt {
                    v.to_string()
                } else if bf > bt {
                    self.op(format!("trunc {ft} {v} to {tt}"))
                } else if is_unsigned(from) {
                    self.op(format!("zext {ft} {v} to {tt}"))
                } else {
                    self.op(format!("sext {ft} {v} to {tt}"))
                }
            }
        }
    }

    fn unary(&mut self, u: UnaryOp, d: DType, v: &str) -> String {
        let t = llty(d);
        if d.is_float() {
            let one = float_lit(1.0, d);
            let zero = float_lit(0.0, d);
            return match u {
                UnaryOp::Neg => self.op(format!("fneg {t} {v}")),
                UnaryOp::Abs => self.intr("fabs", d, &[v]),
                UnaryOp::Exp if d == DType::F32 && self.approx_exp => self.exp_approx(v),
                UnaryOp::Exp if d == DType::F32 => self.fast_exp(v, 1),
                UnaryOp::Exp if d == DType::F64 && self.scalar_only => self.exp_f64(v),
                UnaryOp::Exp => self.intr("exp", d, &[v]),
                UnaryOp::Log if d == DType::F64 && self.scalar_only => self.log_f64(v),
                UnaryOp::Log if d == DType::F32 && self.scalar_only => self.fast_log(v, 1),
                UnaryOp::Log => self.intr("log", d, &[v]),
                UnaryOp::Sqrt => self.intr("sqrt", d, &[v]),
                UnaryOp::Recip => self.op(format!("fdiv {t} {one}, {v}")),
                UnaryOp::Sin if d == DType::F32 && self.scalar_only => self.sin_cos_f32(v, false),
                UnaryOp::Cos if d == DType::F32 && self.scalar_only => self.sin_cos_f32(v, true),
                UnaryOp::Sin => self.intr("sin", d, &[v]),
                UnaryOp::Cos => self.intr("cos", d, &[v]),
                UnaryOp::Tan if d == DType::F32 && self.scalar_only => self.tan_f32(v),
                UnaryOp::Tan => self.libm("tan", d, &[v]),
                UnaryOp::Asin => self.libm("asin", d, &[v]),
                UnaryOp::Acos => self.libm("acos", d, &[v]),
                UnaryOp::Atan => self.libm("atan", d, &[v]),
                UnaryOp::Sinh if d == DType::F32 && self.scalar_only => self.sinh_cosh_f32(v, false),
                UnaryOp::Cosh if d == DType::F32 && self.scalar_only => self.sinh_cosh_f32(v, true),
                UnaryOp::Sinh => self.libm("sinh", d, &[v]),
                UnaryOp::Cosh => self.libm("cosh", d, &[v]),
                UnaryOp::Tanh if d == DType::F32 => self.fast_tanh(v, 1),
                UnaryOp::Tanh => self.libm("tanh", d, &[v]),
                UnaryOp::Asinh => self.libm("asinh", d, &[v]),
                UnaryOp::Acosh => self.libm("acosh", d, &[v]),
                UnaryOp::Atanh => self.libm("atanh", d, &[v]),
                UnaryOp::Erf if d == DType::F32 && self.scalar_only => self.gpu_erf(v),
                UnaryOp::Erf if d == DType::F32 => self.fast_erf(v, 1),
                UnaryOp::Erf => self.libm("erf", d, &[v]),
                UnaryOp::Sigmoid if d == DType::F32 => self.fast_sigmoid(v, 1),
                UnaryOp::Sigmoid => {
                    let n = self.op(format!("fneg {t} {v}"));
                    let e = if d == DType::F32 { self.fast_exp(&n, 1) } else if d == DType::F64 && self.scalar_only { self.exp_f64(&n) } else { self.intr("exp", d, &[&n]) };
                    let s = self.op(format!("fadd {t} {one}, {e}"));
                    self.op(format!("fdiv {t} {one}, {s}"))
                }
                UnaryOp::Relu => {
                    let c = self.op(format!("fcmp ogt {t} {v}, {zero}"));
                    self.op(format!("select i1 {c}, {t} {v}, {t} {zero}"))
                }
                UnaryOp::Floor => self.intr("floor", d, &[v]),
                UnaryOp::Ceil => self.intr("ceil", d, &[v]),
                UnaryOp::Round => self.intr("roundeven", d, &[v]),
                UnaryOp::Sign => {
                    let gt = self.op(format!("fcmp ogt {t} {v}, {zero}"));
                    let lt = self.op(format!("fcmp olt {t} {v}, {zero}"));
                    let m = float_lit(-1.0, d);
                    let a = self.op(format!("select i1 {lt}, {t} {m}, {t} {v}"));
                    self.op(format!("select i1 {gt}, {t} {one}, {t} {a}"))
                }
                UnaryOp::IsNan => self.op(format!("fcmp uno {t} {v}, {v}")),
                UnaryOp::IsInf => {
                    let a = self.intr("fabs", d, &[v]);
                    self.op(format!("fcmp oeq {t} {a}, 0x7FF0000000000000"))
                }
                UnaryOp::IsPosInf => self.op(format!("fcmp oeq {t} {v}, 0x7FF0000000000000")),
                UnaryOp::IsNegInf => self.op(format!("fcmp oeq {t} {v}, 0xFFF0000000000000")),
                UnaryOp::Not | UnaryOp::BitNot => unreachable!("rejected by inference"),
            };
        }
        match u {
            UnaryOp::Not => self.op(format!("xor i1 {v}, true")),
            UnaryOp::BitNot => self.op(format!("xor {t} {v}, -1")),
            UnaryOp::Neg => self.op(format!("sub {t} 0, {v}")),
            UnaryOp::Abs if !is_unsigned(d) => {
                let n = self.op(format!("sub {t} 0, {v}"));
                let c = self.op(format!("icmp slt {t} {v}, 0"));
                self.op(format!("select i1 {c}, {t} {n}, {t} {v}"))
            }
            UnaryOp::Relu if !is_unsigned(d) => {
                let c = self.op(format!("icmp sgt {t} {v}, 0"));
                self.op(format!("select i1 {c}, {t} {v}, {t} 0"))
            }
            UnaryOp::Sign => {
                if is_unsigned(d) {
                    let c = self.op(format!("icmp ne {t} {v}, 0"));
                    self.op(format!("zext i1 {c} to {t}"))
                } else {
                    let gt = self.op(format!("icmp sgt {t} {v}, 0"));
                    let lt = self.op(format!("icmp slt {t} {v}, 0"));
                    let g = self.op(format!("zext i1 {gt} to {t}"));
                    let l = self.op(format!("zext i1 {lt} to {t}"));
                    self.op(format!("sub {t} {g}, {l}"))
                }
            }
            UnaryOp::IsNan | UnaryOp::IsInf | UnaryOp::IsPosInf | UnaryOp::IsNegInf => "false".into(),
            // Abs/Relu of unsigned, rounding of integers: identity.
            _ => v.to_string(),
        }
    }

    fn binary(&mut self, b: BinaryOp, d: DType, x: &str, y: &str) -> String {
        let t = llty(d);
        if d.is_float() {
            let fl = "reassoc contract";
            return match b {
                BinaryOp::Add => self.op(format!("fadd {fl} {t} {x}, {y}")),
                BinaryOp::Sub => self.op(format!("fsub {t} {x}, {y}")),
                BinaryOp::Mul => self.op(format!("fmul {fl} {t} {x}, {y}")),
                BinaryOp::Div => self.op(format!("fdiv {t} {x}, {y}")),
                BinaryOp::Pow if d == DType::F32 && self.scalar_only => self.pow_f32(x, y),
                BinaryOp::Pow => self.intr("pow", d, &[x, y]),
                BinaryOp::Max => self.intr("maximum", d, &[x, y]),
                BinaryOp::Min => self.intr("minimum", d, &[x, y]),
                BinaryOp::FMod => self.op(format!("frem {t} {x}, {y}")),
                BinaryOp::Mod => {
                    let r = self.op(format!("frem {t} {x}, {y}"));
                    let nz = self.op(format!("fcmp one {t} {r}, 0.0"));
                    let rn = self.op(format!("fcmp olt {t} {r}, 0.0"));
                    let yn = self.op(format!("fcmp olt {t} {y}, 0.0"));
                    let diff = self.op(format!("xor i1 {rn}, {yn}"));
                    let fix = self.op(format!("and i1 {nz}, {diff}"));
                    let s = self.op(format!("fadd {t} {r}, {y}"));
                    self.op(format!("select i1 {fix}, {t} {s}, {t} {r}"))
                }
                BinaryOp::Eq => self.op(format!("fcmp oeq {t} {x}, {y}")),
                BinaryOp::Lt => self.op(format!("fcmp olt {t} {x}, {y}")),
                BinaryOp::Le => self.op(format!("fcmp ole {t} {x}, {y}")),
                BinaryOp::Gt => self.op(format!("fcmp ogt {t} {x}, {y}")),
                BinaryOp::Ge => self.op(format!("fcmp oge {t} {x}, {y}")),
                _ => unreachable!("{} on floats is rejected by inference", b.name()),
            };
        }
        let u = is_unsigned(d);
        let safe_div = |w: &mut Self| -> String {
            let z = w.op(format!("icmp eq {t} {y}, 0"));
            w.op(format!("select i1 {z}, {t} 1, {t} {y}"))
        };
        match b {
            BinaryOp::Add => self.op(format!("add {t} {x}, {y}")),
            BinaryOp::Sub => self.op(format!("sub {t} {x}, {y}")),
            BinaryOp::Mul => self.op(format!("mul {t} {x}, {y}")),
            BinaryOp::Div => {
                let s = safe_div(self);
                self.op(format!("{}div {t} {x}, {s}", if u { "u" } else { "s" }))
            }
            BinaryOp::FMod => {
                let s = safe_div(self);
                self.op(format!("{}rem {t} {x}, {s}", if u { "u" } else { "s" }))
            }
            BinaryOp::Mod => {
                let s = safe_div(self);
                if u {
                    return self.op(format!("urem {t} {x}, {s}"));
                }
                let r = self.op(format!("srem {t} {x}, {s}"));
                let nz = self.op(format!("icmp ne {t} {r}, 0"));
                let xr = self.op(format!("xor {t} {r}, {s}"));
                let neg = self.op(format!("icmp slt {t} {xr}, 0"));
                let fix = self.op(format!("and i1 {nz}, {neg}"));
                let a = self.op(format!("add {t} {r}, {s}"));
                self.op(format!("select i1 {fix}, {t} {a}, {t} {r}"))
            }
            BinaryOp::Pow => {
                let conv = if u { "uitofp" } else { "sitofp" };
                let a = self.op(format!("{conv} {t} {x} to double"));
                let c = self.op(format!("{conv} {t} {y} to double"));
                let p = self.intr("pow", DType::F64, &[&a, &c]);
                let name = format!("llvm.fpto{}i.sat.i{}.f64", if u { "u" } else { "s" }, bits(d));
                self.decls.insert(format!("declare {t} @{name}(double)"));
                self.op(format!("call {t} @{name}(double {p})"))
            }
            BinaryOp::Max => self.intr(if u { "umax" } else { "smax" }, d, &[x, y]),
            BinaryOp::Min => self.intr(if u { "umin" } else { "smin" }, d, &[x, y]),
            BinaryOp::Eq => self.op(format!("icmp eq {t} {x}, {y}")),
            BinaryOp::Lt => self.op(format!("icmp {} {t} {x}, {y}", if u { "ult" } else { "slt" })),
            BinaryOp::Le => self.op(format!("icmp {} {t} {x}, {y}", if u { "ule" } else { "sle" })),
            BinaryOp::Gt => self.op(format!("icmp {} {t} {x}, {y}", if u { "ugt" } else { "sgt" })),
            BinaryOp::Ge => self.op(format!("icmp {} {t} {x}, {y}", if u { "uge" } else { "sge" })),
            BinaryOp::And | BinaryOp::BitAnd => self.op(format!("and {t} {x}, {y}")),
            BinaryOp::Or | BinaryOp::BitOr => self.op(format!("or {t} {x}, {y}")),
            BinaryOp::Xor | BinaryOp::BitXor => self.op(format!("xor {t} {x}, {y}")),
            BinaryOp::Shl | BinaryOp::Shr => {
                let w = bits(d);
                let big = self.op(format!("icmp uge {t} {y}, {w}"));
                let s = self.op(format!("{} {t} {x}, {y}", if b == BinaryOp::Shl { "shl" } else if u { "lshr" } else { "ashr" }));
                // A shift by >= the width (or a negative one, unsigned-huge) gives 0, except a signed
                // right shift, which fills with the sign bit (-1 for negative x), as the interpreter.
                let fill = if b == BinaryOp::Shr && !u { self.op(format!("ashr {t} {x}, {}", w - 1)) } else { "0".to_string() };
                self.op(format!("select i1 {big}, {t} {fill}, {t} {s}"))
            }
        }
    }

    /// `slot = alloca ty` in the entry block, once per slot name.
    fn alloca(&mut self, slot: &str, ty: &str) {
        if self.allocated.insert(slot.to_string()) {
            self.allocas.push_str(&format!("  {slot} = alloca {ty}\n"));
        }
    }

    fn stmts(&mut self, s: &[Stmt]) {
        for st in s {
            match st {
                Stmt::For { var, extent, kind: LoopKind::Vector(n), body }
                    if *n > 1 && *extent % *n as i64 == 0 && !self.split_next && !self.scalar_only && vector::vectorizable(body, *var, &mut Vec::new()) =>
                {
                    self.vector_loop(*var, *extent, *n, body);
                }
                Stmt::For { var, extent, kind: LoopKind::Serial, body }
                    if !self.split_next && !self.scalar_only && transpose::block(&self.params, *var, *extent, body).is_some() =>
                {
                    let b = transpose::block(&self.params, *var, *extent, body).expect("matched above");
                    self.transpose_block(&b);
                }
                Stmt::For { var, extent, kind, body } => {
                    let meta = match kind {
                        LoopKind::Vector(n) if *n > 1 && !self.scalar_only && (2 * *n as i64..=UNROLLED).contains(extent) => self.inner_vector_loop_id(),
                        _ => String::new(),
                    };
                    let slot = format!("%v{}", var.0);
                    self.alloca(&slot, "i64");
                    self.vars.insert(*var, (Ty::Index, slot.clone()));
                    let (cond, bodyl, end) = (self.l("cond"), self.l("body"), self.l("end"));
                    let (lo, hi) = if std::mem::take(&mut self.split_next) { ("%start".to_string(), "%end".to_string()) } else { ("0".to_string(), extent.to_string()) };
                    self.line(&format!("store i64 {lo}, ptr {slot}"));
                    self.line(&format!("br label %{cond}"));
                    self.out.push_str(&format!("{cond}:\n"));
                    let i = self.op(format!("load i64, ptr {slot}"));
                    let c = self.op(format!("icmp slt i64 {i}, {hi}"));
                    self.line(&format!("br i1 {c}, label %{bodyl}, label %{end}"));
                    self.out.push_str(&format!("{bodyl}:\n"));
                    self.stmts(body);
                    let i2 = self.op(format!("load i64, ptr {slot}"));
                    let n = self.op(format!("add nsw i64 {i2}, 1"));
                    self.line(&format!("store i64 {n}, ptr {slot}"));
                    self.line(&format!("br label %{cond}{meta}"));
                    self.out.push_str(&format!("{end}:\n"));
                }
                Stmt::Decl { var, dtype, init } => {
                    let slot = format!("%v{}", var.0);
                    self.alloca(&slot, llty(*dtype));
                    let v = self.expr(init);
                    self.vars.insert(*var, (Ty::S(*dtype), slot.clone()));
                    self.line(&format!("store {} {v}, ptr {slot}", llty(*dtype)));
                }
                Stmt::Assign { var, value } => {
                    let v = self.expr(value);
                    let (ty, slot) = self.vars[var].clone();
                    let t = match ty {
                        Ty::Index => "i64",
                        Ty::S(d) => llty(d),
                    };
                    self.line(&format!("store {t} {v}, ptr {slot}"));
                }
                Stmt::Store { buf, index, value } => {
                    let i = self.expr(index);
                    let v = self.expr(value);
                    let (d, p) = self.params[*buf as usize].clone();
                    let mt = memty(d);
                    let ptr = self.op(format!("getelementptr inbounds {mt}, ptr {p}, i64 {i}"));
                    let sv = if d == DType::Bool {
                        self.op(format!("zext i1 {v} to i8"))
                    } else if d == DType::F32 && self.tf32_stores.contains(buf) {
                        let t = self.tf32(&v);
                        self.op(format!("bitcast i32 {t} to float"))
                    } else {
                        v
                    };
                    let store = format!("store {mt} {sv}, ptr {ptr}{}", self.alias_of(*buf));
                    match &mut self.deferred {
                        Some(held) => held.push(store),
                        None => self.line(&store),
                    }
                }
                Stmt::Comm { op, send, recv, count, dtype, peer } => {
                    // Reached only by a GPU body (module_text calls a CPU kernel's collective itself).
                    let s = send.map_or("null".to_string(), |b| self.params[b as usize].1.clone());
                    let r = self.params[*recv as usize].1.clone();
                    self.decls.insert(COMM_DECL.to_string());
                    self.op(format!("call i32 @rlx_rt_collective(i32 {}, i32 {}, i64 {count}, ptr {s}, ptr {r}, i64 {peer})", *op as i32, comm_dtype(*dtype)));
                }
                Stmt::If { cond, body } => {
                    let c = self.cond(cond);
                    let (then, end) = (self.l("then"), self.l("endif"));
                    self.line(&format!("br i1 {c}, label %{then}, label %{end}"));
                    self.out.push_str(&format!("{then}:\n"));
                    self.stmts(body);
                    self.line(&format!("br label %{end}"));
                    self.out.push_str(&format!("{end}:\n"));
                }
                Stmt::Prefetch { buf, index, far } => self.prefetch(*buf, index, *far),
            }
        }
    }

    /// The `!llvm.loop` attachment of a short `vector(n)` loop (at most [`UNROLLED`] iterations) written
    /// as a scalar loop (a reduction into a scalar declared outside it, or an extent not a multiple of
    /// n): LLVM may vectorize this loop and must not unroll it first. Fully unrolled (a global pool's 49 values), it left the loop around it
    /// innermost, which LLVM's vectorizer then took, loading every value by a gather (MobileNet-like's
    /// pool at batch 8: 160 µs against ORT's 22).
    fn inner_vector_loop_id(&mut self) -> String {
        self.decls.insert("!0 = !{!\"llvm.loop.unroll.disable\"}".to_string());
        self.decls.insert("!1 = !{!\"llvm.loop.vectorize.enable\", i1 true}".to_string());
        self.decls.insert("!2 = !{!\"llvm.loop.interleave.count\", i32 4}".to_string());
        let id = 3 + self.decls.iter().filter(|d| d.starts_with("!") && d.contains("distinct")).count();
        self.decls.insert(format!("!{id} = distinct !{{!{id}, !0, !1, !2}}"));
        format!(", !llvm.loop !{id}")
    }

    /// `llvm.prefetch` (read) of `buf[index]`'s cache line, into L1 (locality 3: `prefetcht0`) or, when
    /// `far`, into L2 (locality 2: `prefetcht1`); nothing on a GPU. The address is computed without
    /// `inbounds`: a prefetch past the buffer's end is allowed and never faults.
    fn prefetch(&mut self, buf: u32, index: &Expr, far: bool) {
        if self.scalar_only {
            return;
        }
        let i = self.expr(index);
        let (d, p) = self.params[buf as usize].clone();
        let ptr = self.op(format!("getelementptr {}, ptr {p}, i64 {i}", memty(d)));
        self.decls.insert("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)".to_string());
        let loc = if far { 2 } else { 3 };
        self.line(&format!("call void @llvm.prefetch.p0(ptr {ptr}, i32 0, i32 {loc}, i32 1)"));
    }
}

pub use rlx_ir::loops::{split_of, Split, CHUNK_WORK, PARALLEL_MIN_WORK};

/// The longest `vector(n)` loop written as a scalar loop that gets the hints of
/// `Writer::inner_vector_loop_id`: the extents LLVM unrolls fully (a 7 × 7 plane). Longer ones keep
/// LLVM's own choice — its unrolled, interleaved forms; with the hints on every such loop Gemma 3
/// 270M's RMSNorm / softmax / attention reductions changed and prefill and decode ran ~3% slower
/// (`tests/bench/llm.py --engines rlxc --threads 1`, four rounds alternating with the previous binary).
const UNROLLED: i64 = 64;

/// Writes `body` as LLVM IR instructions for a GPU kernel (the PTX writer, `nvptx/`): `params` are the
/// kernel parameters' element pointers (dtype, SSA name), `alias` their accesses' alias-scope marks
/// ([`Writer::set_alias`]), `bound` the index variables whose values are
/// already stored in the named `i64` allocas (the thread's grid coordinates), `tf32_stores` the
/// parameters it stores tf32-rounded ([`Writer::set_tf32_stores`]). `vector(n)` loops are scalar
/// loops. Returns the allocas the body needs (for the entry block) and its instructions.
pub(crate) fn gpu_body(body: &[Stmt], params: Vec<(DType, String)>, alias: Vec<String>, bound: &[(Var, String)], tf32_stores: Vec<u32>, decls: &mut BTreeSet<String>) -> (String, String) {
    let mut w = Writer::gpu(params, decls);
    w.set_tf32_stores(tf32_stores);
    w.set_alias(alias);
    for (v, slot) in bound {
        w.bind_index(*v, slot);
    }
    w.body(body);
    w.finish()
}

/// The writer as a toolkit for the PTX writer's cooperative kernels (`nvptx/tiled.rs`): it writes the
/// control flow around them (thread indices, shared memory, barriers, shuffles) as lines and labels,
/// and has this writer evaluate the loop form's expressions and statements in between.
impl<'a> Writer<'a> {
    /// A writer for a GPU kernel body: `vector(n)` loops are scalar loops.
    pub(crate) fn gpu(params: Vec<(DType, String)>, decls: &'a mut BTreeSet<String>) -> Writer<'a> {
        Writer { out: String::new(), tmp: 0, label: 0, decls, vars: HashMap::new(), params, allocas: String::new(), split_next: false, vec_var: None, lanes: 1, vvars: HashMap::new(), scalar_only: true, int8: crate::Int8Dot::Plain, allocated: BTreeSet::new(), approx_exp: false, tf32_stores: Vec::new(), deferred: None, alias: Vec::new() }
    }
    /// Index variable `v` lives in the `i64` slot `slot` (allocated with [`Writer::slot`]).
    pub(crate) fn bind_index(&mut self, v: Var, slot: &str) {
        self.vars.insert(v, (Ty::Index, slot.to_string()));
    }
    /// Scalar `v` of dtype `d` lives in `slot`.
    pub(crate) fn bind_scalar(&mut self, v: Var, d: DType, slot: &str) {
        self.vars.insert(v, (Ty::S(d), slot.to_string()));
    }
    /// An entry-block `alloca` named `slot` of LLVM type `ty` (once per name).
    pub(crate) fn slot(&mut self, slot: &str, ty: &str) {
        self.alloca(slot, ty);
    }
    /// One instruction line.
    pub(crate) fn emit(&mut self, s: &str) {
        self.line(s);
    }
    /// `v = instr`, `v` a fresh SSA name.
    pub(crate) fn emit_op(&mut self, s: String) -> String {
        self.op(s)
    }
    /// A fresh label with prefix `p`.
    pub(crate) fn fresh(&mut self, p: &str) -> String {
        self.l(p)
    }
    /// Starts basic block `label`.
    pub(crate) fn block(&mut self, label: &str) {
        self.out.push_str(&format!("{label}:\n"));
    }
    /// f32 exp by `ex2.approx.ftz.f32` of x·log2 e (on) or the accurate `fast_exp` (off, the
    /// default) in what follows: the tensor-core attention's softmax (`nvptx/attention_mma.rs`: a few
    /// f32 ulps of a probability, below every precision's rounding of it into the second matmul).
    pub(crate) fn set_approx_exp(&mut self, on: bool) {
        self.approx_exp = on;
    }
    /// On: the store instructions of the statements written next are held back (their addresses and
    /// values computed in place); off: those held are written, in order. For straight-line code only
    /// (`nvptx/tiled.rs`'s `lane_loop`: a row kernel's unrolled elements; `vec_tile.rs`'s epilogue: a
    /// run of outputs), so that every element's loads are in flight before the first store, which LLVM
    /// may not move them past.
    pub(crate) fn defer_stores(&mut self, on: bool) {
        if on {
            self.deferred.get_or_insert_with(Vec::new);
        } else if let Some(held) = self.deferred.take() {
            for s in held {
                self.line(&s);
            }
        }
    }
    /// Every f32 the body stores to one of parameters `params` rounded to tf32 first ([`Writer::tf32`]):
    /// the values `--precision tf32`'s tensor-core tiles read as operands, stored as they would round
    /// them (`nvptx/half_activations.rs`).
    pub(crate) fn set_tf32_stores(&mut self, params: Vec<u32>) {
        self.tf32_stores = params;
    }
    /// Each parameter's loads and stores marked with its alias scopes (`nvptx/alias.rs`).
    pub(crate) fn set_alias(&mut self, suffixes: Vec<String>) {
        self.alias = suffixes;
    }
    fn alias_of(&self, buf: u32) -> &str {
        self.alias.get(buf as usize).map_or("", |s| s.as_str())
    }
    /// f32 `x` rounded to tf32 (`cvt.rna`: to nearest, ties away from zero), as a b32 whose low 13 bits
    /// are zero — the tensor cores' tf32 operand and the f32 of the same value.
    pub(crate) fn tf32(&mut self, x: &str) -> String {
        self.op(format!("call i32 asm \"cvt.rna.tf32.f32 $0, $1;\", \"=r,f\"(float {x}) #2"))
    }
    /// A declaration the module needs (an intrinsic).
    pub(crate) fn declare(&mut self, d: &str) {
        self.decls.insert(d.to_string());
    }
    /// The value of `e` (an SSA name or a constant).
    pub(crate) fn value(&mut self, e: &Expr) -> String {
        self.expr(e)
    }
    /// `x ⊕ y` with MIR's semantics for dtype `d`.
    pub(crate) fn bin(&mut self, b: BinaryOp, d: DType, x: &str, y: &str) -> String {
        self.binary(b, d, x, y)
    }
    pub(crate) fn body(&mut self, s: &[Stmt]) {
        self.stmts(s);
    }
    /// (entry-block allocas, instructions).
    pub(crate) fn finish(self) -> (String, String) {
        (self.allocas, self.out)
    }
}

/// LLVM's name of a scalar type (bool: `i1`).
pub(crate) fn llvm_type(d: DType) -> &'static str {
    llty(d)
}

/// LLVM's constant for `v` as a `d`.
pub(crate) fn llvm_lit(v: f64, d: DType) -> String {
    lit(v, d)
}

/// `int rlx_rt_collective(int op, int dtype, int64_t count, const void *send, void *recv, int64_t peer)`:
/// runtime-min's call into the communicator the application set (`rlx_rt_comm_set`).
const COMM_DECL: &str = "declare i32 @rlx_rt_collective(i32, i32, i64, ptr, ptr, i64)";

/// The runtime's dtype code (`rlx_rt::DType`: rlx-ir's order).
fn comm_dtype(d: DType) -> i32 {
    d as i32
}

/// The collective of a kernel that is one (`Stmt::Comm`, alone in its kernel).
fn comm_of(k: &Kernel) -> Option<&Stmt> {
    match k.body.as_slice() {
        [s @ Stmt::Comm { .. }] => Some(s),
        _ => None,
    }
}

fn kernel_fn(k: &Kernel, fname: &str, decls: &mut BTreeSet<String>, int8: crate::Int8Dot) -> String {
    let params: Vec<(DType, String)> = k.params.iter().enumerate().map(|(i, p)| (p.dtype, format!("%p{i}"))).collect();
    let split = matches!(k.body.as_slice(), [Stmt::For { kind: LoopKind::Parallel, .. }]);
    let mut w = Writer { out: String::new(), tmp: 0, label: 0, decls, vars: HashMap::new(), params, allocas: String::new(), split_next: split, vec_var: None, lanes: 1, vvars: HashMap::new(), scalar_only: false, int8, allocated: BTreeSet::new(), approx_exp: false, tf32_stores: Vec::new(), deferred: None, alias: Vec::new() };
    w.stmts(&k.body);
    let mut loads = String::new();
    for i in 0..k.params.len() {
        let _ = writeln!(loads, "  %p{i}.slot = getelementptr inbounds ptr, ptr %ctx, i64 {i}\n  %p{i} = load ptr, ptr %p{i}.slot, align 8");
    }
    format!(
        "; kernel {:?}\ndefine internal void @{fname}(ptr noalias nocapture readonly %ctx, i64 %start, i64 %end) #1 {{\nentry:\n{}{}  br label %start.bb\nstart.bb:\n{}  ret void\n}}\n\n",
        k.name, w.allocas, loads, w.out
    )
}

/// The whole module as LLVM IR text. `weights_len` > 0 declares `@NAME_weights`, whose initializer the
/// caller attaches (embedded weights), or a pointer set at run time (external weights).
pub fn module_text(lir: &Lir, name: &str, triple: &str, cpu: &str, features: &str, external_weights: bool, int8: crate::Int8Dot) -> String {
    let mut decls = BTreeSet::new();
    let mut body = String::new();
    let mut m = String::new();
    let _ = writeln!(m, "; rlxc {} — model {name}", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(m, "target triple = \"{triple}\"\n");
    let wl = lir.weights.len();
    if wl > 0 {
        if external_weights {
            let _ = writeln!(m, "@{name}_weights_ptr = internal global ptr null, align 8");
            let _ = writeln!(m, "define void @{name}_set_weights(ptr %w) #0 {{\n  store ptr %w, ptr @{name}_weights_ptr, align 8\n  ret void\n}}\n");
        } else {
            let _ = writeln!(m, "@{name}_weights = internal constant [{wl} x i8] zeroinitializer, align {}\n", lir.align.max(16));
        }
    }
    let w = Weights { name, len: wl, external: external_weights, int8 };
    m.push_str(&program(lir, name, true, &w, &mut decls, &mut body));
    m.push_str(&body);
    for d in &decls {
        m.push_str(d);
        m.push('\n');
    }
    let _ = writeln!(m, "\nattributes #0 = {{ nounwind \"target-cpu\"=\"{cpu}\" \"target-features\"=\"{features}\" }}");
    // Kernels stay out of line: shared by every launch of the same shape (see `dedup_kernels`), and
    // inlining a model's serial kernels into NAME_run only multiplies LLVM's work (and the code size).
    let _ = writeln!(m, "attributes #1 = {{ noinline nounwind \"target-cpu\"=\"{cpu}\" \"target-features\"=\"{features}\" }}");
    m
}

/// Where a program's constants are: the model's weights (`@NAME_weights` or the pointer set at run
/// time), `len` bytes — shared by the entry point and every region body.
pub(crate) struct Weights<'a> {
    pub name: &'a str,
    pub len: usize,
    pub external: bool,
    /// The int8 dot-product instruction the CPU has (how kernels write `Expr::Dot4`).
    pub int8: crate::Int8Dot,
}

/// One program's driver `FNAME_run` (the entry point when `entry`: `NAME_run` / `NAME_step`; else a
/// region body's internal driver), its kernels `FNAME_kN` and its regions' bodies `FNAME_rK_*` appended
/// to `body`. Returns the driver's text.
pub(crate) fn program(lir: &Lir, fname: &str, entry: bool, w: &Weights, decls: &mut BTreeSet<String>, body: &mut String) -> String {
    // Launches whose kernels are identical up to their name (the same op on the same shapes, e.g. every
    // encoder layer's) share one function: buffers are bound through the context, not baked in.
    let (fn_of, unique) = rlx_ir::loops::dedup_kernels(lir.launches.iter().map(|l| &l.kernel));
    for &li in unique.iter().filter(|&&li| comm_of(&lir.launches[li].kernel).is_none() && lir.region_at(li).is_none()) {
        body.push_str(&kernel_fn(&lir.launches[li].kernel, &format!("{fname}_k{}", fn_of[li]), decls, w.int8));
    }
    let mut bodies = Vec::new();
    for (ri, r) in lir.regions.iter().enumerate() {
        for (bi, b) in r.bodies.iter().enumerate() {
            bodies.push(program(b, &format!("{fname}_r{ri}_{bi}"), false, w, decls, body));
        }
    }
    let name = w.name;
    let mut m = String::new();
    // Entry point: `NAME_run`, or for a model with state `NAME_step`, which also takes the state region.
    let stateful = lir.state_bytes > 0;
    if !entry {
        let _ = writeln!(m, "define internal i32 @{fname}_run(ptr %arena, ptr %inputs, ptr %outputs) #0 {{\nentry:");
    } else if stateful {
        let _ = writeln!(m, "define i32 @{name}_step(ptr %arena, ptr %state, ptr %inputs, ptr %outputs) #0 {{\nentry:");
    } else {
        let _ = writeln!(m, "define i32 @{name}_run(ptr %arena, ptr %inputs, ptr %outputs) #0 {{\nentry:");
    }
    let mut e = String::new();
    let mut t = 0;
    let fail = |e: &mut String, cond: String, code: i32, t: &mut usize| {
        *t += 1;
        let _ = writeln!(e, "  %c{t} = {cond}\n  br i1 %c{t}, label %fail{code}, label %ok{t}\nok{t}:", t = *t);
    };
    if lir.arena_bytes > 0 {
        fail(&mut e, "icmp eq ptr %arena, null".into(), 1, &mut t);
        t += 1;
        let _ = writeln!(e, "  %ai{t} = ptrtoint ptr %arena to i64\n  %am{t} = and i64 %ai{t}, 15");
        fail(&mut e, format!("icmp ne i64 %am{t}, 0"), 6, &mut t);
    }
    if stateful {
        fail(&mut e, "icmp eq ptr %state, null".into(), 8, &mut t);
        t += 1;
        let _ = writeln!(e, "  %si{t} = ptrtoint ptr %state to i64\n  %sm{t} = and i64 %si{t}, 15");
        fail(&mut e, format!("icmp ne i64 %sm{t}, 0"), 9, &mut t);
    }
    if !lir.inputs.is_empty() {
        fail(&mut e, "icmp eq ptr %inputs, null".into(), 2, &mut t);
    }
    fail(&mut e, "icmp eq ptr %outputs, null".into(), 3, &mut t);
    for i in 0..lir.inputs.len() {
        let _ = writeln!(e, "  %inp{i}.p = getelementptr inbounds ptr, ptr %inputs, i64 {i}\n  %in{i} = load ptr, ptr %inp{i}.p, align 8");
        fail(&mut e, format!("icmp eq ptr %in{i}, null"), 4, &mut t);
    }
    for i in 0..lir.outputs.len() {
        let _ = writeln!(e, "  %outp{i}.p = getelementptr inbounds ptr, ptr %outputs, i64 {i}\n  %out{i} = load ptr, ptr %outp{i}.p, align 8");
        fail(&mut e, format!("icmp eq ptr %out{i}, null"), 5, &mut t);
    }
    let wl = w.len;
    if wl > 0 {
        if w.external {
            let _ = writeln!(e, "  %wbase = load ptr, ptr @{name}_weights_ptr, align 8");
            fail(&mut e, "icmp eq ptr %wbase, null".into(), 7, &mut t);
        } else {
            let _ = writeln!(e, "  %wbase = getelementptr inbounds i8, ptr @{name}_weights, i64 0");
        }
    }
    let base_of = |b: &rlx_ir::lir::Buffer| match b.base {
        Base::Arena => "%arena".to_string(),
        // No weights: only zero-byte constants live here, never dereferenced.
        Base::Weights if wl == 0 => "null".to_string(),
        Base::Weights => "%wbase".to_string(),
        Base::Input(k) => format!("%in{k}"),
        Base::Output(k) => format!("%out{k}"),
        Base::State => "%state".to_string(),
    };
    let mut uses_runtime = false;
    let mut uses_comm = false;
    let mut uses_loop = false;
    for (li, l) in lir.launches.iter().enumerate() {
        if let Some((ri, r)) = lir.regions.iter().enumerate().find(|(_, r)| r.launch == li) {
            uses_loop |= region::emit(&mut e, lir, r, li, &format!("{fname}_r{ri}"), &base_of, decls);
            continue;
        }
        for (pi, &b) in l.bindings.iter().enumerate() {
            let buf = &lir.buffers[b as usize];
            let _ = writeln!(e, "  %a{li}.{pi} = getelementptr inbounds i8, ptr {}, i64 {}", base_of(buf), buf.offset);
        }
        if let Some(Stmt::Comm { op, send, recv, count, dtype, peer }) = comm_of(&l.kernel) {
            // A collective: called here, its status checked (the COMM error code).
            let s = send.map_or("null".to_string(), |b| format!("%a{li}.{b}"));
            let _ = writeln!(e, "  %comm{li} = call i32 @rlx_rt_collective(i32 {}, i32 {}, i64 {count}, ptr {s}, ptr %a{li}.{recv}, i64 {peer})", *op as i32, comm_dtype(*dtype));
            fail(&mut e, format!("icmp ne i32 %comm{li}, 0"), COMM_CODE, &mut t);
            uses_comm = true;
            continue;
        }
        let np = l.bindings.len().max(1);
        let sp = split_of(&l.kernel);
        // A kernel run on the pool: its context (the buffer pointers the workers read) gets cache lines
        // of its own, so the caller's other stack writes do not pull the line back from a worker that is
        // reading it (measured on a 2-chunk matrix-vector product: 0.09 µs a launch).
        let (slots, align) = if sp.grain.is_some() { (np.next_multiple_of(8), 64) } else { (np, 8) };
        let _ = writeln!(e, "  %ctx{li} = alloca [{slots} x ptr], align {align}");
        for pi in 0..l.bindings.len() {
            let _ = writeln!(e, "  %ctx{li}.{pi} = getelementptr inbounds ptr, ptr %ctx{li}, i64 {pi}\n  store ptr %a{li}.{pi}, ptr %ctx{li}.{pi}, align 8");
        }
        match sp.grain {
            Some(grain) => {
                let _ = writeln!(e, "  call void @rlx_rt_parallel_for(ptr @{fname}_k{}, ptr %ctx{li}, i64 {}, i64 {grain})", fn_of[li], sp.extent);
                uses_runtime = true;
            }
            None => {
                let _ = writeln!(e, "  call void @{fname}_k{}(ptr %ctx{li}, i64 0, i64 {})", fn_of[li], sp.extent);
            }
        }
    }
    let _ = writeln!(e, "  ret i32 0");
    let state_codes = if stateful { STATE_ERROR_CODES } else { &[] };
    let comm_codes = if uses_comm { COMM_ERROR_CODES } else { &[] };
    let loop_codes = if uses_loop { LOOP_ERROR_CODES } else { &[] };
    for (code, _, _) in ERROR_CODES.iter().skip(1).chain(state_codes).chain(comm_codes).chain(loop_codes) {
        let _ = writeln!(e, "fail{code}:\n  ret i32 {code}");
    }
    m.push_str(&e);
    m.push_str("}\n\n");
    for b in bodies {
        m.push_str(&b);
    }
    if uses_runtime {
        decls.insert("declare void @rlx_rt_parallel_for(ptr, ptr, i64, i64)".to_string());
    }
    if uses_comm {
        decls.insert(COMM_DECL.to_string());
    }
    m
}
