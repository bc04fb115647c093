//! Loop form → CLIF → object. One local function per kernel `(ctx, start, end)` (the signature
//! `rlx_rt_parallel_for` calls), one exported entry `NAME_run` that checks its arguments and calls the
//! kernels in schedule order — the same semantics, symbols and error codes as the LLVM writer
//! (`rlx-target-llvm`'s `ir.rs`). Loop indices and declared scalars are frontend `Variable`s (SSA is
//! built by cranelift-frontend); loops are bottom-tested counted loops.
//!
//! Numerics: f32/f64 `exp log sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh erf pow fmod`
//! are calls to the C math library (`expf`, …; the link line has `-lm`), so they are as accurate as the
//! platform libm (glibc: ≤ 1–2 ulp) — more accurate than the LLVM writer's inline f32 exp/erf (2 ulp /
//! 1.5e-7 absolute). sqrt, floor, ceil, round-half-even, min/max (NaN-propagating, as LLVM's
//! `minimum`/`maximum`) are Cranelift instructions. f16 ⇄ f32 conversions are exact bit manipulations
//! (round to nearest even). `LoopKind::Vector` loops of f32 arithmetic run as f32x4 loops (`vector.rs`);
//! other vector loops are emitted as scalar loops.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, AbiParam, Block, FuncRef, InstBuilder, MemFlagsData, Signature, StackSlotData, StackSlotKind, Type, Value};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_module::{default_libcall_names, DataDescription, DataId, FuncId, Linkage, Module};
use cranelift_object::{ObjectBuilder, ObjectModule};
use rlx_ir::lir::{Base, Lir};
use rlx_ir::loops::{split_of, Expr, IOp, Kernel, LoopKind, Stmt, Var};
use rlx_ir::{BinaryOp, DType, UnaryOp};
use std::collections::{BTreeMap, HashMap, HashSet};

mod region;
mod vector;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ty {
    Index,
    S(DType),
}

/// Register (and memory) type of a dtype: bool is an i8 holding 0 or 1; bf16 is its 16 bits.
fn clty(d: DType) -> Type {
    match d {
        DType::F32 => types::F32,
        DType::F64 => types::F64,
        DType::I8 | DType::U8 | DType::Bool => types::I8,
        DType::I16 | DType::U16 | DType::F16 | DType::BF16 => types::I16,
        DType::I32 | DType::U32 => types::I32,
        DType::I64 | DType::U64 => types::I64,
        // Block-quantized dtypes are never claimed; legalization rejects them before codegen.
        _ => types::I8,
    }
}

fn is_unsigned(d: DType) -> bool {
    matches!(d, DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Bool)
}

fn bits(d: DType) -> u32 {
    match d {
        DType::I8 | DType::U8 | DType::Bool => 8,
        DType::I16 | DType::U16 => 16,
        DType::I32 | DType::U32 => 32,
        DType::I64 | DType::U64 => 64,
        _ => 0,
    }
}

fn elem_bytes(d: DType) -> i64 {
    clty(d).bytes() as i64
}

fn err(e: impl std::fmt::Display) -> String {
    format!("internal error: Cranelift: {e}")
}

struct W<'a, 'b> {
    b: FunctionBuilder<'b>,
    m: &'a mut ObjectModule,
    /// Imported C functions (libm), per function being built.
    calls: HashMap<String, FuncRef>,
    vars: HashMap<Var, (Ty, Variable)>,
    params: Vec<(DType, Value)>,
    /// The next `For` iterates `start..end` (the kernel's parallel split) instead of `0..extent`.
    split_next: Option<(Value, Value)>,
    /// The first construct this writer cannot translate (reported instead of a wrong object).
    error: Option<String>,
    /// Inside an f32x4 vector loop (see `vector.rs`): its varying variables, and the f32x4 variables
    /// of the scalars declared in it.
    vector: bool,
    vary: HashSet<Var>,
    vvars: HashMap<Var, Variable>,
}

impl<'a, 'b> W<'a, 'b> {
    fn fail(&mut self, msg: String) {
        if self.error.is_none() {
            self.error = Some(msg);
        }
    }

    fn iconst(&mut self, ty: Type, v: i64) -> Value {
        let v = if ty.bits() >= 64 { v } else { v & ((1i64 << ty.bits()) - 1) };
        self.b.ins().iconst(ty, v)
    }

    fn fconst(&mut self, d: DType, v: f64) -> Value {
        if d == DType::F32 {
            self.b.ins().f32const(v as f32)
        } else {
            self.b.ins().f64const(v)
        }
    }

    fn lit(&mut self, v: f64, d: DType) -> Value {
        match d {
            DType::F32 | DType::F64 => self.fconst(d, v),
            DType::Bool => self.iconst(types::I8, (v != 0.0) as i64),
            DType::U64 => self.iconst(types::I64, v as u64 as i64),
            DType::F16 | DType::BF16 => {
                self.fail(format!("a {d} literal is not supported by the Cranelift back end"));
                self.iconst(types::I16, 0)
            }
            _ => self.iconst(clty(d), v as i64),
        }
    }

    /// Calls a C function `name` taking and returning `args.len()` values of `ty`.
    fn ccall(&mut self, name: &str, ty: Type, args: &[Value]) -> Value {
        let f = match self.calls.get(name) {
            Some(f) => *f,
            None => {
                let mut sig = self.m.make_signature();
                for _ in args {
                    sig.params.push(AbiParam::new(ty));
                }
                sig.returns.push(AbiParam::new(ty));
                let f = match self.m.declare_function(name, Linkage::Import, &sig) {
                    Ok(id) => self.m.declare_func_in_func(id, self.b.func),
                    Err(e) => {
                        self.fail(err(e));
                        return args[0];
                    }
                };
                self.calls.insert(name.to_string(), f);
                f
            }
        };
        let inst = self.b.ins().call(f, args);
        self.b.inst_results(inst)[0]
    }

    fn libm(&mut self, base: &str, d: DType, args: &[Value]) -> Value {
        let name = if d == DType::F32 { format!("{base}f") } else { base.to_string() };
        self.ccall(&name, clty(d), args)
    }

    fn ty_of(&self, e: &Expr) -> Ty {
        match e {
            Expr::Int(_) | Expr::I(..) | Expr::ToIndex { .. } => Ty::Index,
            Expr::Lit(_, d) => Ty::S(*d),
            Expr::Var(v) => self.vars.get(v).map(|x| x.0).unwrap_or(Ty::Index),
            Expr::Load { buf, .. } => Ty::S(self.params[*buf as usize].0),
            Expr::Un(u, d, _) => Ty::S(u.out_dtype(*d)),
            Expr::Bin(b, d, _, _) => Ty::S(if b.is_compare() || b.is_logical() { DType::Bool } else { *d }),
            Expr::Dot4(..) => Ty::S(DType::I32),
            Expr::Select(_, a, _) => self.ty_of(a),
            Expr::Cast { to, .. } => Ty::S(*to),
        }
    }

    /// The variable for `v`, declared with `ty` on first use.
    fn var(&mut self, v: Var, ty: Ty) -> Variable {
        if let Some((_, x)) = self.vars.get(&v) {
            return *x;
        }
        let t = match ty {
            Ty::Index => types::I64,
            Ty::S(d) => clty(d),
        };
        let x = self.b.declare_var(t);
        self.vars.insert(v, (ty, x));
        x
    }

    /// A condition usable by `brif`/`select` (any non-zero integer is true).
    fn cond(&mut self, e: &Expr) -> Value {
        let v = self.expr(e);
        match self.ty_of(e) {
            Ty::S(d) if d.is_float() => {
                let z = self.fconst(d, 0.0);
                self.b.ins().fcmp(FloatCC::NotEqual, v, z)
            }
            _ => v,
        }
    }

    fn addr(&mut self, buf: u32, index: &Expr) -> Value {
        let i = self.expr(index);
        let (d, p) = self.params[buf as usize];
        let sz = elem_bytes(d);
        let off = if sz == 1 { i } else { self.b.ins().ishl_imm_s(i, sz.trailing_zeros() as i64) };
        self.b.ins().iadd(p, off)
    }

    fn expr(&mut self, e: &Expr) -> Value {
        match e {
            Expr::Int(i) => self.iconst(types::I64, *i),
            Expr::Lit(v, d) => self.lit(*v, *d),
            Expr::Var(v) => match self.vars.get(v) {
                Some((_, x)) => {
                    let x = *x;
                    self.b.use_var(x)
                }
                None => {
                    self.fail(format!("internal error: variable v{} used before its declaration", v.0));
                    self.iconst(types::I64, 0)
                }
            },
            Expr::Load { buf, index } => {
                let a = self.addr(*buf, index);
                let d = self.params[*buf as usize].0;
                let v = self.b.ins().load(clty(d), MemFlagsData::trusted(), a, 0);
                if d == DType::Bool {
                    self.b.ins().icmp_imm_u(IntCC::NotEqual, v, 0)
                } else {
                    v
                }
            }
            Expr::I(op, a, b) => {
                let (x, y) = (self.expr(a), self.expr(b));
                let ins = self.b.ins();
                match op {
                    IOp::Add => ins.iadd(x, y),
                    IOp::Sub => ins.isub(x, y),
                    IOp::Mul => ins.imul(x, y),
                    IOp::Div => ins.sdiv(x, y),
                    IOp::Rem => ins.srem(x, y),
                    IOp::Min => ins.smin(x, y),
                    IOp::Max => ins.smax(x, y),
                    IOp::Lt | IOp::Le | IOp::Eq => {
                        let cc = match op {
                            IOp::Lt => IntCC::SignedLessThan,
                            IOp::Le => IntCC::SignedLessThanOrEqual,
                            _ => IntCC::Equal,
                        };
                        let c = ins.icmp(cc, x, y);
                        self.b.ins().uextend(types::I64, c)
                    }
                    IOp::And => {
                        let p = ins.icmp_imm_u(IntCC::NotEqual, x, 0);
                        let q = self.b.ins().icmp_imm_u(IntCC::NotEqual, y, 0);
                        let r = self.b.ins().band(p, q);
                        self.b.ins().uextend(types::I64, r)
                    }
                }
            }
            Expr::Dot4(c, a, b, _) => self.expr(&Expr::dot4_expanded(c, a, b)),
            Expr::Select(c, a, b) => {
                let cv = self.cond(c);
                let (x, y) = (self.expr(a), self.expr(b));
                self.b.ins().select(cv, x, y)
            }
            Expr::Cast { from, to, x } => {
                let v = self.expr(x);
                self.cast(v, *from, *to)
            }
            Expr::ToIndex { from, x } => {
                let v = self.expr(x);
                match from {
                    d if d.is_float() && matches!(d, DType::F32 | DType::F64) => self.b.ins().fcvt_to_sint_sat(types::I64, v),
                    DType::I64 | DType::U64 => v,
                    d if d.is_float() => {
                        self.fail(format!("an index from {d} is not supported by the Cranelift back end"));
                        self.iconst(types::I64, 0)
                    }
                    d if is_unsigned(*d) => self.b.ins().uextend(types::I64, v),
                    _ => self.b.ins().sextend(types::I64, v),
                }
            }
            Expr::Un(u, d, x) => {
                let v = self.expr(x);
                self.unary(*u, *d, v)
            }
            Expr::Bin(b, d, x, y) => {
                let (p, q) = (self.expr(x), self.expr(y));
                self.binary(*b, *d, p, q)
            }
        }
    }

    /// Float → integer, saturating (NaN → 0), as LLVM's `fpto[su]i.sat`.
    fn f2i(&mut self, v: Value, to: DType) -> Value {
        let tt = clty(to);
        let u = is_unsigned(to);
        let w = bits(to);
        if w >= 32 {
            return if u { self.b.ins().fcvt_to_uint_sat(tt, v) } else { self.b.ins().fcvt_to_sint_sat(tt, v) };
        }
        let x = self.b.ins().fcvt_to_sint_sat(types::I32, v);
        let (lo, hi) = if u { (0i64, (1i64 << w) - 1) } else { (-(1i64 << (w - 1)), (1i64 << (w - 1)) - 1) };
        let lo = self.iconst(types::I32, lo);
        let hi = self.iconst(types::I32, hi);
        let x = self.b.ins().smax(x, lo);
        let x = self.b.ins().smin(x, hi);
        self.b.ins().ireduce(tt, x)
    }

    /// Integer (any width, signedness from `from`) → i64.
    fn to_i64(&mut self, v: Value, from: DType) -> Value {
        if bits(from) == 64 {
            v
        } else if is_unsigned(from) {
            self.b.ins().uextend(types::I64, v)
        } else {
            self.b.ins().sextend(types::I64, v)
        }
    }

    fn cast(&mut self, v: Value, from: DType, to: DType) -> Value {
        if from == to {
            return v;
        }
        if from == DType::F16 {
            let f = self.h2f(v);
            return self.cast(f, DType::F32, to);
        }
        if to == DType::F16 {
            // Via f32 like the interpreter (f32 storage).
            let f = self.cast(v, from, DType::F32);
            return self.f2h(f);
        }
        if to == DType::BF16 {
            // Round to nearest even by hand, via f32 (as the interpreter).
            let f = self.cast(v, from, DType::F32);
            let b = self.b.ins().bitcast(types::I32, MemFlagsData::new(), f);
            let lsb = self.b.ins().ushr_imm_u(b, 16);
            let lsb = self.b.ins().band_imm_u(lsb, 1);
            let bias = self.b.ins().iadd_imm_s(lsb, 32767);
            let r = self.b.ins().iadd(b, bias);
            let r = self.b.ins().ushr_imm_u(r, 16);
            let nan = self.b.ins().fcmp(FloatCC::Unordered, f, f);
            let qnan = self.iconst(types::I32, 32704);
            let r = self.b.ins().select(nan, qnan, r);
            return self.b.ins().ireduce(types::I16, r);
        }
        if from == DType::BF16 {
            let w = self.b.ins().uextend(types::I32, v);
            let w = self.b.ins().ishl_imm_s(w, 16);
            let f = self.b.ins().bitcast(types::F32, MemFlagsData::new(), w);
            return self.cast(f, DType::F32, to);
        }
        if to == DType::Bool {
            return if from.is_float() {
                let z = self.fconst(from, 0.0);
                self.b.ins().fcmp(FloatCC::NotEqual, v, z)
            } else {
                self.b.ins().icmp_imm_u(IntCC::NotEqual, v, 0)
            };
        }
        match (from.is_float(), to.is_float()) {
            (true, true) => {
                if to == DType::F64 {
                    self.b.ins().fpromote(types::F64, v)
                } else {
                    self.b.ins().fdemote(types::F32, v)
                }
            }
            (true, false) => self.f2i(v, to),
            (false, true) => {
                let x = self.to_i64(v, from);
                if is_unsigned(from) {
                    self.b.ins().fcvt_from_uint(clty(to), x)
                } else {
                    self.b.ins().fcvt_from_sint(clty(to), x)
                }
            }
            (false, false) => {
                let (bf, bt) = (bits(from), bits(to));
                if bf == bt {
                    v
                } else if bf > bt {
                    self.b.ins().ireduce(clty(to), v)
                } else if is_unsigned(from) {
                    self.b.ins().uextend(clty(to), v)
                } else {
                    self.b.ins().sextend(clty(to), v)
                }
            }
        }
    }

    /// f16 bits (i16) → f32, exact (F. Giesen's half_to_float: shift into place, scale by 2^112,
    /// patch inf/NaN).
    fn h2f(&mut self, h: Value) -> Value {
        let h = self.b.ins().uextend(types::I32, h);
        let sign = self.b.ins().band_imm_u(h, 0x8000);
        let sign = self.b.ins().ishl_imm_s(sign, 16);
        let mag = self.b.ins().band_imm_u(h, 0x7fff);
        let u = self.b.ins().ishl_imm_s(mag, 13);
        let f = self.b.ins().bitcast(types::F32, MemFlagsData::new(), u);
        let magic = self.b.ins().f32const(f32::from_bits(0x7780_0000));
        let f = self.b.ins().fmul(f, magic);
        let u = self.b.ins().bitcast(types::I32, MemFlagsData::new(), f);
        let big = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, u, 0x4780_0000);
        let infnan = self.b.ins().bor_imm_u(u, 0x7f80_0000);
        let u = self.b.ins().select(big, infnan, u);
        let u = self.b.ins().bor(u, sign);
        self.b.ins().bitcast(types::F32, MemFlagsData::new(), u)
    }

    /// f32 → f16 bits (i16), round to nearest even; overflow → inf, NaN → quiet NaN (F. Giesen's
    /// float_to_half_fast3_rtne, branch-free).
    fn f2h(&mut self, f: Value) -> Value {
        let u = self.b.ins().bitcast(types::I32, MemFlagsData::new(), f);
        let sign = self.b.ins().band_imm_u(u, 0x8000_0000u32 as i64);
        let a = self.b.ins().bxor(u, sign);
        // Overflow, inf, NaN.
        let is_nan = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThan, a, 0x7f80_0000);
        let qnan = self.iconst(types::I32, 0x7e00);
        let inf = self.iconst(types::I32, 0x7c00);
        let special = self.b.ins().select(is_nan, qnan, inf);
        let is_special = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, a, (127 + 16) << 23);
        // Subnormal results and zero: let the FPU round by adding a magic number.
        let af = self.b.ins().bitcast(types::F32, MemFlagsData::new(), a);
        let dm = self.b.ins().f32const(f32::from_bits(((127 - 15) + (23 - 10) + 1) << 23));
        let s = self.b.ins().fadd(af, dm);
        let s = self.b.ins().bitcast(types::I32, MemFlagsData::new(), s);
        let sub = self.b.ins().iadd_imm_s(s, -((((127 - 15) + (23 - 10) + 1) << 23) as i64));
        let is_sub = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, a, 113 << 23);
        // Normal: rebias the exponent and round to nearest even.
        let odd = self.b.ins().ushr_imm_u(a, 13);
        let odd = self.b.ins().band_imm_u(odd, 1);
        let n = self.b.ins().iadd_imm_s(a, (((15 - 127) << 23) + 0xfff) as i64);
        let n = self.b.ins().iadd(n, odd);
        let n = self.b.ins().ushr_imm_u(n, 13);
        let o = self.b.ins().select(is_sub, sub, n);
        let o = self.b.ins().select(is_special, special, o);
        let sh = self.b.ins().ushr_imm_u(sign, 16);
        let o = self.b.ins().bor(o, sh);
        self.b.ins().ireduce(types::I16, o)
    }

    /// A 0/1 i8 widened to `ty`.
    fn widen_flag(&mut self, c: Value, ty: Type) -> Value {
        if ty == types::I8 {
            c
        } else {
            self.b.ins().uextend(ty, c)
        }
    }

    fn unary(&mut self, u: UnaryOp, d: DType, v: Value) -> Value {
        let t = clty(d);
        if d.is_float() {
            return match u {
                UnaryOp::Neg => self.b.ins().fneg(v),
                UnaryOp::Abs => self.b.ins().fabs(v),
                UnaryOp::Exp => self.libm("exp", d, &[v]),
                UnaryOp::Log => self.libm("log", d, &[v]),
                UnaryOp::Sqrt => self.b.ins().sqrt(v),
                UnaryOp::Recip => {
                    let one = self.fconst(d, 1.0);
                    self.b.ins().fdiv(one, v)
                }
                UnaryOp::Sin => self.libm("sin", d, &[v]),
                UnaryOp::Cos => self.libm("cos", d, &[v]),
                UnaryOp::Tan => self.libm("tan", d, &[v]),
                UnaryOp::Asin => self.libm("asin", d, &[v]),
                UnaryOp::Acos => self.libm("acos", d, &[v]),
                UnaryOp::Atan => self.libm("atan", d, &[v]),
                UnaryOp::Sinh => self.libm("sinh", d, &[v]),
                UnaryOp::Cosh => self.libm("cosh", d, &[v]),
                UnaryOp::Tanh => self.libm("tanh", d, &[v]),
                UnaryOp::Asinh => self.libm("asinh", d, &[v]),
                UnaryOp::Acosh => self.libm("acosh", d, &[v]),
                UnaryOp::Atanh => self.libm("atanh", d, &[v]),
                UnaryOp::Erf => self.libm("erf", d, &[v]),
                UnaryOp::Sigmoid => {
                    let n = self.b.ins().fneg(v);
                    let e = self.libm("exp", d, &[n]);
                    let one = self.fconst(d, 1.0);
                    let s = self.b.ins().fadd(one, e);
                    self.b.ins().fdiv(one, s)
                }
                UnaryOp::Relu => {
                    let z = self.fconst(d, 0.0);
                    let c = self.b.ins().fcmp(FloatCC::GreaterThan, v, z);
                    self.b.ins().select(c, v, z)
                }
                UnaryOp::Floor => self.b.ins().floor(v),
                UnaryOp::Ceil => self.b.ins().ceil(v),
                UnaryOp::Round => self.b.ins().nearest(v),
                UnaryOp::Sign => {
                    let z = self.fconst(d, 0.0);
                    let one = self.fconst(d, 1.0);
                    let m = self.fconst(d, -1.0);
                    let gt = self.b.ins().fcmp(FloatCC::GreaterThan, v, z);
                    let lt = self.b.ins().fcmp(FloatCC::LessThan, v, z);
                    let a = self.b.ins().select(lt, m, v);
                    self.b.ins().select(gt, one, a)
                }
                UnaryOp::IsNan => self.b.ins().fcmp(FloatCC::Unordered, v, v),
                UnaryOp::IsInf => {
                    let a = self.b.ins().fabs(v);
                    let inf = self.fconst(d, f64::INFINITY);
                    self.b.ins().fcmp(FloatCC::Equal, a, inf)
                }
                UnaryOp::IsPosInf => {
                    let inf = self.fconst(d, f64::INFINITY);
                    self.b.ins().fcmp(FloatCC::Equal, v, inf)
                }
                UnaryOp::IsNegInf => {
                    let inf = self.fconst(d, f64::NEG_INFINITY);
                    self.b.ins().fcmp(FloatCC::Equal, v, inf)
                }
                UnaryOp::Not | UnaryOp::BitNot => {
                    self.fail(format!("{} on {d} is rejected by inference", u.name()));
                    v
                }
            };
        }
        match u {
            UnaryOp::Not => self.b.ins().icmp_imm_u(IntCC::Equal, v, 0),
            UnaryOp::BitNot => self.b.ins().bnot(v),
            UnaryOp::Neg => self.b.ins().ineg(v),
            UnaryOp::Abs if !is_unsigned(d) => {
                let n = self.b.ins().ineg(v);
                let c = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, v, 0);
                self.b.ins().select(c, n, v)
            }
            UnaryOp::Relu if !is_unsigned(d) => {
                let z = self.iconst(t, 0);
                let c = self.b.ins().icmp(IntCC::SignedGreaterThan, v, z);
                self.b.ins().select(c, v, z)
            }
            UnaryOp::Sign => {
                if is_unsigned(d) {
                    let c = self.b.ins().icmp_imm_u(IntCC::NotEqual, v, 0);
                    self.widen_flag(c, t)
                } else {
                    let gt = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThan, v, 0);
                    let lt = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, v, 0);
                    let g = self.widen_flag(gt, t);
                    let l = self.widen_flag(lt, t);
                    self.b.ins().isub(g, l)
                }
            }
            UnaryOp::IsNan | UnaryOp::IsInf | UnaryOp::IsPosInf | UnaryOp::IsNegInf => self.iconst(types::I8, 0),
            // Abs/Relu of unsigned, rounding of integers: identity.
            _ => v,
        }
    }

    fn binary(&mut self, b: BinaryOp, d: DType, x: Value, y: Value) -> Value {
        let t = clty(d);
        if d.is_float() {
            return match b {
                BinaryOp::Add => self.b.ins().fadd(x, y),
                BinaryOp::Sub => self.b.ins().fsub(x, y),
                BinaryOp::Mul => self.b.ins().fmul(x, y),
                BinaryOp::Div => self.b.ins().fdiv(x, y),
                BinaryOp::Pow => self.libm("pow", d, &[x, y]),
                BinaryOp::Max => self.b.ins().fmax(x, y),
                BinaryOp::Min => self.b.ins().fmin(x, y),
                BinaryOp::FMod => self.libm("fmod", d, &[x, y]),
                BinaryOp::Mod => {
                    let r = self.libm("fmod", d, &[x, y]);
                    let z = self.fconst(d, 0.0);
                    let nz = self.b.ins().fcmp(FloatCC::OrderedNotEqual, r, z);
                    let rn = self.b.ins().fcmp(FloatCC::LessThan, r, z);
                    let yn = self.b.ins().fcmp(FloatCC::LessThan, y, z);
                    let diff = self.b.ins().bxor(rn, yn);
                    let fix = self.b.ins().band(nz, diff);
                    let s = self.b.ins().fadd(r, y);
                    self.b.ins().select(fix, s, r)
                }
                BinaryOp::Eq => self.b.ins().fcmp(FloatCC::Equal, x, y),
                BinaryOp::Lt => self.b.ins().fcmp(FloatCC::LessThan, x, y),
                BinaryOp::Le => self.b.ins().fcmp(FloatCC::LessThanOrEqual, x, y),
                BinaryOp::Gt => self.b.ins().fcmp(FloatCC::GreaterThan, x, y),
                BinaryOp::Ge => self.b.ins().fcmp(FloatCC::GreaterThanOrEqual, x, y),
                _ => {
                    self.fail(format!("{} on floats is rejected by inference", b.name()));
                    x
                }
            };
        }
        let u = is_unsigned(d);
        let cc = |s: IntCC, uu: IntCC| if u { uu } else { s };
        match b {
            BinaryOp::Add => self.b.ins().iadd(x, y),
            BinaryOp::Sub => self.b.ins().isub(x, y),
            BinaryOp::Mul => self.b.ins().imul(x, y),
            BinaryOp::Div | BinaryOp::FMod | BinaryOp::Mod => {
                // Division by zero gives x / 1 (as the LLVM writer; never a trap).
                let z = self.b.ins().icmp_imm_u(IntCC::Equal, y, 0);
                let one = self.iconst(t, 1);
                let s = self.b.ins().select(z, one, y);
                match (b, u) {
                    (BinaryOp::Div, true) => self.b.ins().udiv(x, s),
                    (BinaryOp::Div, false) => self.b.ins().sdiv(x, s),
                    (_, true) => self.b.ins().urem(x, s),
                    (BinaryOp::FMod, false) => self.b.ins().srem(x, s),
                    _ => {
                        // Python-style: the remainder takes the divisor's sign.
                        let r = self.b.ins().srem(x, s);
                        let nz = self.b.ins().icmp_imm_u(IntCC::NotEqual, r, 0);
                        let xr = self.b.ins().bxor(r, s);
                        let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, xr, 0);
                        let fix = self.b.ins().band(nz, neg);
                        let a = self.b.ins().iadd(r, s);
                        self.b.ins().select(fix, a, r)
                    }
                }
            }
            BinaryOp::Pow => {
                let a = self.to_i64(x, d);
                let c = self.to_i64(y, d);
                let (a, c) = if u {
                    (self.b.ins().fcvt_from_uint(types::F64, a), self.b.ins().fcvt_from_uint(types::F64, c))
                } else {
                    (self.b.ins().fcvt_from_sint(types::F64, a), self.b.ins().fcvt_from_sint(types::F64, c))
                };
                let p = self.libm("pow", DType::F64, &[a, c]);
                self.f2i(p, d)
            }
            BinaryOp::Max | BinaryOp::Min => {
                let c = if b == BinaryOp::Max { cc(IntCC::SignedGreaterThan, IntCC::UnsignedGreaterThan) } else { cc(IntCC::SignedLessThan, IntCC::UnsignedLessThan) };
                let k = self.b.ins().icmp(c, x, y);
                self.b.ins().select(k, x, y)
            }
            BinaryOp::Eq => self.b.ins().icmp(IntCC::Equal, x, y),
            BinaryOp::Lt => self.b.ins().icmp(cc(IntCC::SignedLessThan, IntCC::UnsignedLessThan), x, y),
            BinaryOp::Le => self.b.ins().icmp(cc(IntCC::SignedLessThanOrEqual, IntCC::UnsignedLessThanOrEqual), x, y),
            BinaryOp::Gt => self.b.ins().icmp(cc(IntCC::SignedGreaterThan, IntCC::UnsignedGreaterThan), x, y),
            BinaryOp::Ge => self.b.ins().icmp(cc(IntCC::SignedGreaterThanOrEqual, IntCC::UnsignedGreaterThanOrEqual), x, y),
            BinaryOp::And | BinaryOp::BitAnd => self.b.ins().band(x, y),
            BinaryOp::Or | BinaryOp::BitOr => self.b.ins().bor(x, y),
            BinaryOp::Xor | BinaryOp::BitXor => self.b.ins().bxor(x, y),
            BinaryOp::Shl | BinaryOp::Shr => {
                let w = bits(d) as i64;
                let big = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, y, w);
                let s = if b == BinaryOp::Shl {
                    self.b.ins().ishl(x, y)
                } else if u {
                    self.b.ins().ushr(x, y)
                } else {
                    self.b.ins().sshr(x, y)
                };
                // A shift by >= the width (or a negative one, unsigned-huge) gives 0, except a signed
                // right shift, which fills with the sign bit, as the interpreter.
                let fill = if b == BinaryOp::Shr && !u { self.b.ins().sshr_imm_s(x, w - 1) } else { self.iconst(t, 0) };
                self.b.ins().select(big, fill, s)
            }
        }
    }

    fn stmts(&mut self, s: &[Stmt]) {
        for st in s {
            if self.vector && !matches!(st, Stmt::For { .. }) {
                self.vector_stmt(st);
                continue;
            }
            match st {
                Stmt::For { var, extent, body, kind } => {
                    let split = self.split_next.take();
                    if split.is_none() && *extent <= 0 {
                        continue;
                    }
                    let vec = !self.vector
                        && split.is_none()
                        && matches!(kind, LoopKind::Vector(n) if *n as i64 % vector::LANES == 0)
                        && *extent % vector::LANES == 0
                        && {
                            let dts: Vec<DType> = self.params.iter().map(|p| p.0).collect();
                            let mut vary = HashSet::new();
                            let ok = vector::vectorizable(body, *var, &mut vary, &dts);
                            if ok {
                                self.vary = vary;
                            }
                            ok
                        };
                    let step = if vec { vector::LANES } else { 1 };
                    let x = self.var(*var, Ty::Index);
                    let (lo, hi) = match split {
                        Some(r) => r,
                        None => (self.iconst(types::I64, 0), self.iconst(types::I64, *extent)),
                    };
                    self.b.def_var(x, lo);
                    let (bodyb, exit) = (self.b.create_block(), self.b.create_block());
                    if split.is_some() {
                        // The range a chunk gets may be empty.
                        let c = self.b.ins().icmp(IntCC::SignedLessThan, lo, hi);
                        self.b.ins().brif(c, bodyb, &[], exit, &[]);
                    } else {
                        self.b.ins().jump(bodyb, &[]);
                    }
                    self.b.switch_to_block(bodyb);
                    if vec {
                        self.vector = true;
                        self.vvars.clear();
                    }
                    self.stmts(body);
                    if vec {
                        self.vector = false;
                        self.vary.clear();
                    }
                    let i = self.b.use_var(x);
                    let n = self.b.ins().iadd_imm_s(i, step);
                    self.b.def_var(x, n);
                    let c = self.b.ins().icmp(IntCC::SignedLessThan, n, hi);
                    self.b.ins().brif(c, bodyb, &[], exit, &[]);
                    self.b.seal_block(bodyb);
                    self.b.switch_to_block(exit);
                    self.b.seal_block(exit);
                }
                Stmt::Decl { var, dtype, init } => {
                    let v = self.expr(init);
                    let x = self.var(*var, Ty::S(*dtype));
                    self.b.def_var(x, v);
                }
                Stmt::Assign { var, value } => {
                    let v = self.expr(value);
                    match self.vars.get(var) {
                        Some((_, x)) => {
                            let x = *x;
                            self.b.def_var(x, v)
                        }
                        None => self.fail(format!("internal error: variable v{} assigned before its declaration", var.0)),
                    }
                }
                Stmt::Store { buf, index, value } => {
                    let a = self.addr(*buf, index);
                    let v = self.expr(value);
                    self.b.ins().store(MemFlagsData::trusted(), v, a, 0);
                }
                // A prefetch hint: Cranelift has no prefetch instruction; skipped.
                Stmt::Prefetch { .. } => {}
                Stmt::Comm { op, .. } => self.fail(format!("{} (a sharded model's collective) is compiled by the LLVM back end only", op.name())),
                Stmt::If { cond, body } => {
                    let c = self.cond(cond);
                    let (then, end) = (self.b.create_block(), self.b.create_block());
                    self.b.ins().brif(c, then, &[], end, &[]);
                    self.b.switch_to_block(then);
                    self.b.seal_block(then);
                    self.stmts(body);
                    self.b.ins().jump(end, &[]);
                    self.b.switch_to_block(end);
                    self.b.seal_block(end);
                }
            }
        }
    }
}

fn kernel_sig(m: &ObjectModule) -> Signature {
    let ptr = m.target_config().pointer_type();
    let mut sig = m.make_signature();
    sig.params.push(AbiParam::new(ptr));
    sig.params.push(AbiParam::new(types::I64));
    sig.params.push(AbiParam::new(types::I64));
    sig
}

fn define(m: &mut ObjectModule, id: FuncId, ctx: &mut cranelift_codegen::Context, text: &mut Option<String>) -> Result<(), String> {
    if let Some(t) = text {
        t.push_str(&ctx.func.display().to_string());
        t.push('\n');
    }
    m.define_function(id, ctx).map_err(|e| match e {
        cranelift_module::ModuleError::Compilation(c) => err(format!("{c:?}")),
        e => err(e),
    })?;
    m.clear_context(ctx);
    Ok(())
}

fn kernel_fn(m: &mut ObjectModule, id: FuncId, k: &Kernel, fctx: &mut FunctionBuilderContext, text: &mut Option<String>) -> Result<(), String> {
    let ptr = m.target_config().pointer_type();
    let mut ctx = m.make_context();
    ctx.func.signature = kernel_sig(m);
    let mut b = FunctionBuilder::new(&mut ctx.func, fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let (c, start, end) = {
        let p = b.block_params(entry);
        (p[0], p[1], p[2])
    };
    let params: Vec<(DType, Value)> = k
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| (p.dtype, b.ins().load(ptr, MemFlagsData::trusted().with_readonly(), c, (i * 8) as i32)))
        .collect();
    let split = matches!(k.body.as_slice(), [Stmt::For { kind: LoopKind::Parallel, .. }]);
    let mut w = W { b, m, calls: HashMap::new(), vars: HashMap::new(), params, split_next: split.then_some((start, end)), error: None, vector: false, vary: HashSet::new(), vvars: HashMap::new() };
    w.stmts(&k.body);
    w.b.ins().return_(&[]);
    if let Some(e) = w.error.take() {
        return Err(format!("kernel {:?}: {e}", k.name));
    }
    let cfg = w.m.target_config();
    w.b.finalize(cfg);
    define(m, id, &mut ctx, text)
}

/// Translates and compiles the whole module; returns the object and (when `want_text`) the CLIF text.
pub fn translate(lir: &Lir, name: &str, external_weights: bool, isa: OwnedTargetIsa, want_text: bool) -> Result<(Vec<u8>, String), String> {
    let builder = ObjectBuilder::new(isa, name, default_libcall_names()).map_err(err)?;
    let mut m = ObjectModule::new(builder);
    let ptr = m.target_config().pointer_type();
    let mut text = want_text.then(String::new);
    let mut fctx = FunctionBuilderContext::new();

    // Weights: a local read-only data object, or a pointer set by NAME_set_weights.
    let wl = lir.weights.len();
    let mut weights: Option<DataId> = None;
    if wl > 0 {
        let mut dd = DataDescription::new();
        if external_weights {
            let id = m.declare_data(&format!("{name}_weights_ptr"), Linkage::Local, true, false).map_err(err)?;
            dd.define_zeroinit(8);
            dd.set_align(8);
            m.define_data(id, &dd).map_err(err)?;
            weights = Some(id);
            // void NAME_set_weights(const void *w)
            let mut sig = m.make_signature();
            sig.params.push(AbiParam::new(ptr));
            let fid = m.declare_function(&format!("{name}_set_weights"), Linkage::Export, &sig).map_err(err)?;
            let mut ctx = m.make_context();
            ctx.func.signature = sig;
            let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
            let e = b.create_block();
            b.append_block_params_for_function_params(e);
            b.switch_to_block(e);
            b.seal_block(e);
            let wv = b.block_params(e)[0];
            let gv = m.declare_data_in_func(id, b.func);
            let slot = b.ins().symbol_value(ptr, gv);
            b.ins().store(MemFlagsData::trusted(), wv, slot, 0);
            b.ins().return_(&[]);
            b.finalize(m.target_config());
            define(&mut m, fid, &mut ctx, &mut text)?;
        } else {
            let id = m.declare_data(&format!("{name}_weights"), Linkage::Local, false, false).map_err(err)?;
            dd.define(lir.weights.clone().into_boxed_slice());
            dd.set_align(lir.align.max(16) as u64);
            m.define_data(id, &dd).map_err(err)?;
            weights = Some(id);
        }
    }

    program(&mut m, lir, name, None, weights, external_weights, &mut fctx, &mut text)?;
    let obj = m.finish().emit().map_err(err)?;
    Ok((obj, text.unwrap_or_default()))
}

/// One program's driver and kernels: the entry point `NAME_run` / `NAME_step` (`body_of` None) or a
/// region body's local driver `FNAME_run`, kernels `FNAME_kN`, its regions' bodies `FNAME_rK_B_run`.
#[allow(clippy::too_many_arguments)]
fn program(m: &mut ObjectModule, lir: &Lir, fname: &str, body_of: Option<()>, weights: Option<DataId>, external_weights: bool, fctx: &mut FunctionBuilderContext, text: &mut Option<String>) -> Result<FuncId, String> {
    // Kernel functions.
    // Launches with identical kernels share one function (as in the LLVM writer).
    let ksig = kernel_sig(m);
    let ptr = m.target_config().pointer_type();
    let (fn_of, unique) = rlx_ir::loops::dedup_kernels(lir.launches.iter().map(|l| &l.kernel));
    let unique: Vec<usize> = unique.into_iter().filter(|&li| lir.region_at(li).is_none()).collect();
    let mut fids = HashMap::new();
    for &li in &unique {
        fids.insert(fn_of[li], m.declare_function(&format!("{fname}_k{}", fn_of[li]), Linkage::Local, &ksig).map_err(err)?);
    }
    // Region bodies: drivers of their own (`region.rs`), defined first.
    let mut bodies = Vec::new();
    for (ri, r) in lir.regions.iter().enumerate() {
        let ids = r.bodies.iter().enumerate().map(|(bi, body)| program(m, body, &format!("{fname}_r{ri}_{bi}"), Some(()), weights, external_weights, fctx, text)).collect::<Result<Vec<_>, _>>()?;
        bodies.push(ids);
    }

    // Entry point: int NAME_run(void *arena, const void *const *inputs, void *const *outputs), or for
    // a model with state int NAME_step(void *arena, void *state, const void *const *inputs, void *const *outputs).
    let stateful = lir.state_bytes > 0;
    let mut sig = m.make_signature();
    for _ in 0..if stateful { 4 } else { 3 } {
        sig.params.push(AbiParam::new(ptr));
    }
    sig.returns.push(AbiParam::new(types::I32));
    let (entry_name, linkage) = match (body_of, stateful) {
        (Some(()), _) => (format!("{fname}_run"), Linkage::Local),
        (None, true) => (format!("{fname}_step"), Linkage::Export),
        (None, false) => (format!("{fname}_run"), Linkage::Export),
    };
    let run_id = m.declare_function(&entry_name, linkage, &sig).map_err(err)?;
    let mut pfor: Option<FuncId> = None;
    {
        let mut ctx = m.make_context();
        ctx.func.signature = sig;
        let mut b = FunctionBuilder::new(&mut ctx.func, fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        b.seal_block(entry);
        let (arena, state, inputs, outputs) = {
            let p = b.block_params(entry);
            if stateful {
                (p[0], Some(p[1]), p[2], p[3])
            } else {
                (p[0], None, p[1], p[2])
            }
        };
        let mut fails: BTreeMap<i32, Block> = BTreeMap::new();
        // Branches to the failure block for `code` when `c` is non-zero.
        let mut check = |b: &mut FunctionBuilder, c: Value, code: i32| {
            let f = *fails.entry(code).or_insert_with(|| b.create_block());
            let ok = b.create_block();
            b.ins().brif(c, f, &[], ok, &[]);
            b.switch_to_block(ok);
            b.seal_block(ok);
        };
        if lir.arena_bytes > 0 {
            let c = b.ins().icmp_imm_u(IntCC::Equal, arena, 0);
            check(&mut b, c, 1);
            let a = b.ins().band_imm_u(arena, 15);
            let c = b.ins().icmp_imm_u(IntCC::NotEqual, a, 0);
            check(&mut b, c, 6);
        }
        if let Some(st) = state {
            let c = b.ins().icmp_imm_u(IntCC::Equal, st, 0);
            check(&mut b, c, 8);
            let a = b.ins().band_imm_u(st, 15);
            let c = b.ins().icmp_imm_u(IntCC::NotEqual, a, 0);
            check(&mut b, c, 9);
        }
        if !lir.inputs.is_empty() {
            let c = b.ins().icmp_imm_u(IntCC::Equal, inputs, 0);
            check(&mut b, c, 2);
        }
        let c = b.ins().icmp_imm_u(IntCC::Equal, outputs, 0);
        check(&mut b, c, 3);
        let mut ins = Vec::new();
        for i in 0..lir.inputs.len() {
            let p = b.ins().load(ptr, MemFlagsData::trusted(), inputs, (i * 8) as i32);
            let c = b.ins().icmp_imm_u(IntCC::Equal, p, 0);
            check(&mut b, c, 4);
            ins.push(p);
        }
        let mut outs = Vec::new();
        for i in 0..lir.outputs.len() {
            let p = b.ins().load(ptr, MemFlagsData::trusted(), outputs, (i * 8) as i32);
            let c = b.ins().icmp_imm_u(IntCC::Equal, p, 0);
            check(&mut b, c, 5);
            outs.push(p);
        }
        let wbase = match weights {
            Some(id) => {
                let gv = m.declare_data_in_func(id, b.func);
                let a = b.ins().symbol_value(ptr, gv);
                if external_weights {
                    let p = b.ins().load(ptr, MemFlagsData::trusted(), a, 0);
                    let c = b.ins().icmp_imm_u(IntCC::Equal, p, 0);
                    check(&mut b, c, 7);
                    p
                } else {
                    a
                }
            }
            // No weights: only zero-byte constants live there, never dereferenced.
            None => b.ins().iconst(ptr, 0),
        };
        // One pointer array for the kernel being called (kernels run one after another).
        let np = lir.launches.iter().map(|l| l.bindings.len()).max().unwrap_or(0).max(1);
        let slot = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, (np * 8) as u32, 3));
        let addr = |b: &mut FunctionBuilder, bi: u32| {
            let buf = &lir.buffers[bi as usize];
            let base = match buf.base {
                Base::Arena => arena,
                Base::Weights => wbase,
                Base::Input(k) => ins[k as usize],
                Base::Output(k) => outs[k as usize],
                // `state` is Some whenever a buffer lives there (stateful LIR).
                Base::State => state.unwrap_or(arena),
            };
            if buf.offset == 0 {
                base
            } else {
                b.ins().iadd_imm_s(base, buf.offset as i64)
            }
        };
        for (li, l) in lir.launches.iter().enumerate() {
            if let Some((ri, r)) = lir.regions.iter().enumerate().find(|(_, r)| r.launch == li) {
                let calls: Vec<FuncRef> = bodies[ri].iter().map(|&id| m.declare_func_in_func(id, b.func)).collect();
                region::emit(&mut b, m.target_config(), lir, r, &calls, &addr, &mut check);
                continue;
            }
            for (pi, &bi) in l.bindings.iter().enumerate() {
                let a = addr(&mut b, bi);
                b.ins().stack_store(ptr, a, slot, (pi * 8) as i32);
            }
            let ctxp = b.ins().stack_addr(ptr, slot, 0);
            let kref = m.declare_func_in_func(fids[&fn_of[li]], b.func);
            let sp = split_of(&l.kernel);
            match sp.grain {
                Some(grain) => {
                    let pf = match pfor {
                        Some(id) => id,
                        None => {
                            let mut s = m.make_signature();
                            s.params.push(AbiParam::new(ptr));
                            s.params.push(AbiParam::new(ptr));
                            s.params.push(AbiParam::new(types::I64));
                            s.params.push(AbiParam::new(types::I64));
                            let id = m.declare_function("rlx_rt_parallel_for", Linkage::Import, &s).map_err(err)?;
                            pfor = Some(id);
                            id
                        }
                    };
                    let pref = m.declare_func_in_func(pf, b.func);
                    let fp = b.ins().func_addr(ptr, kref);
                    let n = b.ins().iconst(types::I64, sp.extent);
                    let g = b.ins().iconst(types::I64, grain);
                    b.ins().call(pref, &[fp, ctxp, n, g]);
                }
                None => {
                    let z = b.ins().iconst(types::I64, 0);
                    let n = b.ins().iconst(types::I64, sp.extent);
                    b.ins().call(kref, &[ctxp, z, n]);
                }
            }
        }
        let z = b.ins().iconst(types::I32, 0);
        b.ins().return_(&[z]);
        for (code, blk) in fails {
            b.switch_to_block(blk);
            b.seal_block(blk);
            let v = b.ins().iconst(types::I32, code as i64);
            b.ins().return_(&[v]);
        }
        b.finalize(m.target_config());
        define(m, run_id, &mut ctx, text)?;
    }

    for &li in &unique {
        kernel_fn(m, fids[&fn_of[li]], &lir.launches[li].kernel, fctx, text)?;
    }
    Ok(run_id)
}
