//! Vector loops: a `for v in 0..E vector(n)` loop is emitted as E/n iterations of one `<n x T>` body.
//! Values that depend on `v` are *varying* (vectors); everything else stays scalar and is splatted where
//! it meets a varying value. Unit-stride loads and stores become vector loads and stores, loads of
//! stride 2–4 one contiguous load of the span and a shuffle (deinterleave); float
//! add/sub/mul/div, min/max, relu, compares, selects and index arithmetic become vector instructions; any
//! other varying op (libm calls, casts, gathers) runs per lane through the scalar writer, so every
//! kernel vectorizes and semantics never change. Declared scalars inside the loop become vectors.

use super::{llty, memty, Ty, Writer};
use rlx_ir::loops::{Expr, IOp, Stmt, Var};
use rlx_ir::{BinaryOp, DType, UnaryOp};

/// A value in vector mode: its SSA name, whether it is a vector, and its element type.
#[derive(Clone)]
pub(super) struct VV {
    v: String,
    varying: bool,
    ty: Ty,
}

fn elt(ty: Ty) -> &'static str {
    match ty {
        Ty::Index => "i64",
        Ty::S(d) => llty(d),
    }
}

/// `e` as `base + coeff * var` with `base` free of `var`, when it is affine in `var`.
pub(super) fn affine(e: &Expr, var: Var) -> Option<(Expr, i64)> {
    if !mentions(e, var) {
        return Some((e.clone(), 0));
    }
    match e {
        Expr::Var(v) if *v == var => Some((Expr::Int(0), 1)),
        Expr::I(IOp::Add, a, b) => {
            let (x, cx) = affine(a, var)?;
            let (y, cy) = affine(b, var)?;
            Some((Expr::add(x, y), cx + cy))
        }
        Expr::I(IOp::Sub, a, b) => {
            let (x, cx) = affine(a, var)?;
            let (y, cy) = affine(b, var)?;
            Some((Expr::i(IOp::Sub, x, y), cx - cy))
        }
        Expr::I(IOp::Mul, a, b) => match (affine(a, var)?, affine(b, var)?) {
            ((x, cx), (Expr::Int(c), 0)) => Some((Expr::mul(x, Expr::Int(c)), cx * c)),
            ((Expr::Int(c), 0), (y, cy)) => Some((Expr::mul(Expr::Int(c), y), cy * c)),
            _ => None,
        },
        _ => None,
    }
}

pub(super) fn mentions(e: &Expr, var: Var) -> bool {
    match e {
        Expr::Var(v) => *v == var,
        Expr::Int(_) | Expr::Lit(..) => false,
        Expr::Load { index, .. } => mentions(index, var),
        Expr::I(_, a, b) | Expr::Bin(_, _, a, b) => mentions(a, var) || mentions(b, var),
        Expr::Un(_, _, a) | Expr::Cast { x: a, .. } | Expr::ToIndex { x: a, .. } => mentions(a, var),
        Expr::Select(c, a, b) | Expr::Dot4(c, a, b, _) => mentions(c, var) || mentions(a, var) || mentions(b, var),
    }
}

impl<'a> Writer<'a> {
    fn vt(&self, ty: Ty) -> String {
        format!("<{} x {}>", self.lanes, elt(ty))
    }

    fn splat(&mut self, x: &VV) -> String {
        if x.varying {
            return x.v.clone();
        }
        let t = elt(x.ty);
        let vt = self.vt(x.ty);
        let i = self.op(format!("insertelement {vt} poison, {t} {}, i64 0", x.v));
        self.op(format!("shufflevector {vt} {i}, {vt} poison, <{} x i32> zeroinitializer", self.lanes))
    }

    fn lane(&mut self, x: &VV, l: u32) -> String {
        if !x.varying {
            return x.v.clone();
        }
        let vt = self.vt(x.ty);
        self.op(format!("extractelement {vt} {}, i64 {l}", x.v))
    }

    /// Runs a scalar emitter once per lane and gathers the results into a vector.
    fn per_lane(&mut self, ins: &[VV], out: Ty, mut f: impl FnMut(&mut Self, &[String]) -> String) -> VV {
        let vt = self.vt(out);
        let mut acc = "poison".to_string();
        for l in 0..self.lanes {
            let args: Vec<String> = ins.iter().map(|x| self.lane(x, l)).collect();
            let r = f(self, &args);
            acc = self.op(format!("insertelement {vt} {acc}, {} {r}, i64 {l}", elt(out)));
        }
        VV { v: acc, varying: true, ty: out }
    }

    fn uniform(&mut self, e: &Expr) -> VV {
        let ty = self.ty_of(e);
        VV { v: self.expr(e), varying: false, ty }
    }

    pub(super) fn vexpr(&mut self, e: &Expr) -> VV {
        let var = self.vec_var.expect("vector mode");
        let touches_vvar = self.mentions_vvar(e);
        if !mentions(e, var) && !touches_vvar {
            return self.uniform(e);
        }
        match e {
            Expr::Var(v) if *v == var => {
                let base = VV { v: self.expr(e), varying: false, ty: Ty::Index };
                let b = self.splat(&base);
                let steps: Vec<String> = (0..self.lanes).map(|l| format!("i64 {l}")).collect();
                let vt = self.vt(Ty::Index);
                let v = self.op(format!("add {vt} {b}, <{}>", steps.join(", ")));
                VV { v, varying: true, ty: Ty::Index }
            }
            Expr::Var(v) => {
                let (ty, slot) = self.vvars[v].clone();
                let vt = self.vt(ty);
                VV { v: self.op(format!("load {vt}, ptr {slot}")), varying: true, ty }
            }
            Expr::Load { buf, index } => {
                let (d, p) = self.params[*buf as usize].clone();
                let ty = Ty::S(d);
                match affine(index, var) {
                    Some((base, 1)) if !self.mentions_vvar(&base) && d != DType::Bool => {
                        // Lane 0's element: the index at the loop's current (scalar) value.
                        let b = self.expr(index);
                        let ptr = self.op(format!("getelementptr inbounds {}, ptr {p}, i64 {b}", memty(d)));
                        let vt = self.vt(ty);
                        VV { v: self.op(format!("load {vt}, ptr {ptr}, align {}", d.size().unwrap_or(1))), varying: true, ty }
                    }
                    Some((base, 2)) if !self.mentions_vvar(&base) && d != DType::Bool && self.lanes >= 4 => {
                        // A stride-2 load (a stride-2 pool's or convolution's input row): the 2n − 1
                        // elements from the first lane's to the last lane's as two n-wide loads — the
                        // first n and the last n (overlapping by one) —, then every other element kept
                        // by one two-source shuffle (`vpermt2ps`); no element outside that span is
                        // touched. (As one (2n − 1)-wide load LLVM split it into 128-bit pieces and
                        // inserts: 30% of a 3×3 stride-2 max pool's instructions.)
                        let b = self.expr(index);
                        let n = self.lanes as i64;
                        let vt = self.vt(ty);
                        let p0 = self.op(format!("getelementptr inbounds {}, ptr {p}, i64 {b}", memty(d)));
                        let lo = self.op(format!("load {vt}, ptr {p0}, align {}", d.size().unwrap_or(1)));
                        let p1 = self.op(format!("getelementptr inbounds {}, ptr {p0}, i64 {}", memty(d), n - 1));
                        let hi = self.op(format!("load {vt}, ptr {p1}, align {}", d.size().unwrap_or(1)));
                        // Lane l reads element 2l: lo[2l] while 2l < n, else hi[2l − (n − 1)], which is
                        // shuffle index n + 2l − n + 1 = 2l + 1.
                        let keep: Vec<String> = (0..n).map(|l| format!("i32 {}", if 2 * l < n { 2 * l } else { 2 * l + 1 })).collect();
                        VV { v: self.op(format!("shufflevector {vt} {lo}, {vt} {hi}, <{n} x i32> <{}>", keep.join(", "))), varying: true, ty }
                    }
                    Some((base, c @ 2..=4)) if !self.mentions_vvar(&base) && d != DType::Bool => {
                        // A stride-c load (a stride-3 or 4 row, or a stride-2 one under 4 lanes): one
                        // contiguous load of the (n−1)·c + 1 elements from the first lane's to the last
                        // lane's, then every c-th kept — no element outside the ones the lanes read is touched.
                        let b = self.expr(index);
                        let ptr = self.op(format!("getelementptr inbounds {}, ptr {p}, i64 {b}", memty(d)));
                        let span = (self.lanes as i64 - 1) * c + 1;
                        let wide = format!("<{span} x {}>", elt(ty));
                        let all = self.op(format!("load {wide}, ptr {ptr}, align {}", d.size().unwrap_or(1)));
                        let keep: Vec<String> = (0..self.lanes as i64).map(|l| format!("i32 {}", l * c)).collect();
                        VV { v: self.op(format!("shufflevector {wide} {all}, {wide} poison, <{} x i32> <{}>", self.lanes, keep.join(", "))), varying: true, ty }
                    }
                    _ => {
                        let idx = self.vexpr(index);
                        self.per_lane(&[idx], ty, |w, a| {
                            let ptr = w.op(format!("getelementptr inbounds {}, ptr {p}, i64 {}", memty(d), a[0]));
                            let x = w.op(format!("load {}, ptr {ptr}", memty(d)));
                            if d == DType::Bool {
                                w.op(format!("icmp ne i8 {x}, 0"))
                            } else {
                                x
                            }
                        })
                    }
                }
            }
            Expr::I(op, a, b) => {
                let (x, y) = (self.vexpr(a), self.vexpr(b));
                let (xs, ys) = (self.splat(&x), self.splat(&y));
                let vt = self.vt(Ty::Index);
                let v = match op {
                    IOp::Add => self.op(format!("add {vt} {xs}, {ys}")),
                    IOp::Sub => self.op(format!("sub {vt} {xs}, {ys}")),
                    IOp::Mul => self.op(format!("mul {vt} {xs}, {ys}")),
                    IOp::Min | IOp::Max => {
                        let name = format!("llvm.{}.v{}i64", if *op == IOp::Min { "smin" } else { "smax" }, self.lanes);
                        self.decls.insert(format!("declare {vt} @{name}({vt}, {vt})"));
                        self.op(format!("call {vt} @{name}({vt} {xs}, {vt} {ys})"))
                    }
                    IOp::Lt | IOp::Le | IOp::Eq => {
                        let c = match op {
                            IOp::Lt => "slt",
                            IOp::Le => "sle",
                            _ => "eq",
                        };
                        let m = self.op(format!("icmp {c} {vt} {xs}, {ys}"));
                        self.op(format!("zext <{} x i1> {m} to {vt}", self.lanes))
                    }
                    IOp::Div | IOp::Rem | IOp::And => {
                        return self.per_lane(&[x, y], Ty::Index, |w, a| w.expr_i_scalar(*op, &a[0], &a[1]));
                    }
                };
                VV { v, varying: true, ty: Ty::Index }
            }
            Expr::Bin(op, d, a, b) if d.is_float() && matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div) => {
                let (x, y) = (self.vexpr(a), self.vexpr(b));
                let (xs, ys) = (self.splat(&x), self.splat(&y));
                let ty = Ty::S(*d);
                let vt = self.vt(ty);
                let ins = match op {
                    BinaryOp::Add => "fadd reassoc contract",
                    BinaryOp::Sub => "fsub",
                    BinaryOp::Mul => "fmul reassoc contract",
                    _ => "fdiv",
                };
                VV { v: self.op(format!("{ins} {vt} {xs}, {ys}")), varying: true, ty }
            }
            Expr::Bin(op, d, a, b) if d.is_float() && matches!(op, BinaryOp::Max | BinaryOp::Min) => {
                let (x, y) = (self.vexpr(a), self.vexpr(b));
                let (xs, ys) = (self.splat(&x), self.splat(&y));
                let ty = Ty::S(*d);
                let vt = self.vt(ty);
                let name = format!("llvm.{}.v{}{}", if *op == BinaryOp::Max { "maximum" } else { "minimum" }, self.lanes, if *d == DType::F32 { "f32" } else { "f64" });
                self.decls.insert(format!("declare {vt} @{name}({vt}, {vt})"));
                // NaN-propagating as the interpreter's, but `nsz`: the sign of max(−0, +0) is left open
                // (the interpreter's too), which on AVX-512 takes a max from 6 instructions to 3 (a
                // pool's window) and a ReLU6's clamp against constants from 4 to 2 (every fused epilogue).
                VV { v: self.op(format!("call nsz {vt} @{name}({vt} {xs}, {vt} {ys})")), varying: true, ty }
            }
            Expr::Bin(op, d, a, b) if d.is_float() && op.is_compare() => {
                // As the scalar form: ordered compares (false with a NaN operand), an <n x i1> result.
                let (x, y) = (self.vexpr(a), self.vexpr(b));
                let (xs, ys) = (self.splat(&x), self.splat(&y));
                let vt = self.vt(Ty::S(*d));
                let c = match op {
                    BinaryOp::Eq => "oeq",
                    BinaryOp::Lt => "olt",
                    BinaryOp::Le => "ole",
                    BinaryOp::Gt => "ogt",
                    _ => "oge",
                };
                VV { v: self.op(format!("fcmp {c} {vt} {xs}, {ys}")), varying: true, ty: Ty::S(DType::Bool) }
            }
            Expr::Un(UnaryOp::Relu, d, a) if d.is_float() => {
                // As the scalar form: x > 0 ? x : 0 (NaN → 0).
                let x = self.vexpr(a);
                let xs = self.splat(&x);
                let vt = self.vt(Ty::S(*d));
                let c = self.op(format!("fcmp ogt {vt} {xs}, zeroinitializer"));
                VV { v: self.op(format!("select <{} x i1> {c}, {vt} {xs}, {vt} zeroinitializer", self.lanes)), varying: true, ty: Ty::S(*d) }
            }
            Expr::Un(UnaryOp::Neg, d, a) if d.is_float() => {
                let x = self.vexpr(a);
                let xs = self.splat(&x);
                let vt = self.vt(Ty::S(*d));
                VV { v: self.op(format!("fneg {vt} {xs}")), varying: true, ty: Ty::S(*d) }
            }
            Expr::Dot4(c, a, b, amax) if self.int8 != crate::Int8Dot::Plain && self.lanes % dot4_part(self.int8) == 0 => {
                // The CPU's dot product instruction on each part of `dot4_part` lanes, concatenated back.
                let vs: Vec<VV> = [c, a, b].iter().map(|e| self.vexpr(e)).collect();
                let vs: Vec<String> = vs.iter().map(|v| self.splat(v)).collect();
                let (n, w0) = (self.lanes, dot4_part(self.int8));
                let vt = format!("<{n} x i32>");
                let mut parts = Vec::new();
                for h in 0..n / w0 {
                    let idx: Vec<String> = (h * w0..h * w0 + w0).map(|i| format!("i32 {i}")).collect();
                    let p: Vec<String> = if n == w0 { vs.clone() } else { vs.iter().map(|x| self.op(format!("shufflevector {vt} {x}, {vt} poison, <{w0} x i32> <{}>", idx.join(", ")))).collect() };
                    let part = self.dot4_part(&p[0], &p[1], &p[2], *amax);
                    parts.push(part);
                }
                // Concatenate the parts pairwise back into n lanes.
                let mut w = w0;
                while parts.len() > 1 {
                    let all: Vec<String> = (0..2 * w).map(|i| format!("i32 {i}")).collect();
                    parts = parts.chunks(2).map(|q| self.op(format!("shufflevector <{w} x i32> {}, <{w} x i32> {}, <{} x i32> <{}>", q[0], q[1], 2 * w, all.join(", ")))).collect();
                    w *= 2;
                }
                VV { v: parts.pop().unwrap_or_default(), varying: true, ty: Ty::S(DType::I32) }
            }
            Expr::Dot4(c, a, b, _) => self.vexpr(&Expr::dot4_expanded(c, a, b)),
            Expr::Select(c, a, b) => {
                let cv = self.vexpr(c);
                let (x, y) = (self.vexpr(a), self.vexpr(b));
                let ty = x.ty;
                // The condition as <n x i1>.
                let m = match (cv.varying, cv.ty) {
                    (true, Ty::S(DType::Bool)) => cv.v.clone(),
                    (true, Ty::Index) => {
                        let vt = self.vt(Ty::Index);
                        self.op(format!("icmp ne {vt} {}, zeroinitializer", cv.v))
                    }
                    _ => {
                        // Uniform or non-bool varying condition: per lane.
                        let cty = cv.ty;
                        return self.per_lane(&[cv, x, y], ty, |w, a| {
                            let c = w.cond_str(&a[0], cty);
                            w.op(format!("select i1 {c}, {} {}, {} {}", elt(ty), a[1], elt(ty), a[2]))
                        });
                    }
                };
                let (xs, ys) = (self.splat(&x), self.splat(&y));
                let vt = self.vt(ty);
                VV { v: self.op(format!("select <{} x i1> {m}, {vt} {xs}, {vt} {ys}", self.lanes)), varying: true, ty }
            }
            Expr::Un(op @ (UnaryOp::Exp | UnaryOp::Erf | UnaryOp::Tanh | UnaryOp::Sigmoid), DType::F32, a) => {
                let x = self.vexpr(a);
                let xs = self.splat(&x);
                let v = match op {
                    UnaryOp::Exp => self.fast_exp(&xs, self.lanes),
                    UnaryOp::Erf => self.fast_erf(&xs, self.lanes),
                    UnaryOp::Sigmoid => self.fast_sigmoid(&xs, self.lanes),
                    _ => self.fast_tanh(&xs, self.lanes),
                };
                VV { v, varying: true, ty: Ty::S(DType::F32) }
            }
            Expr::Un(op, d, a) => {
                let x = self.vexpr(a);
                let out = Ty::S(op.out_dtype(*d));
                let (op, d) = (*op, *d);
                self.per_lane(&[x], out, |w, a| w.unary(op, d, &a[0]))
            }
            Expr::Bin(op, d, a, b)
                if d.is_int()
                    && matches!(
                        op,
                        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor | BinaryOp::Shl | BinaryOp::Shr
                    ) =>
            {
                // Integer arithmetic and bit operations as vector instructions (the block-quantized
                // kernels' unpacking); shifts keep the scalar writer's semantics for out-of-range counts.
                let (x, y) = (self.vexpr(a), self.vexpr(b));
                let (xs, ys) = (self.splat(&x), self.splat(&y));
                let ty = Ty::S(*d);
                let vt = self.vt(ty);
                let u = super::is_unsigned(*d);
                let v = match op {
                    BinaryOp::Add => self.op(format!("add {vt} {xs}, {ys}")),
                    BinaryOp::Sub => self.op(format!("sub {vt} {xs}, {ys}")),
                    BinaryOp::Mul => self.op(format!("mul {vt} {xs}, {ys}")),
                    BinaryOp::BitAnd => self.op(format!("and {vt} {xs}, {ys}")),
                    BinaryOp::BitOr => self.op(format!("or {vt} {xs}, {ys}")),
                    BinaryOp::BitXor => self.op(format!("xor {vt} {xs}, {ys}")),
                    _ => {
                        let w = super::bits(*d);
                        let wv = self.splat(&VV { v: w.to_string(), varying: false, ty });
                        let big = self.op(format!("icmp uge {vt} {ys}, {wv}"));
                        let ins = if *op == BinaryOp::Shl { "shl" } else if u { "lshr" } else { "ashr" };
                        let sh = self.op(format!("{ins} {vt} {xs}, {ys}"));
                        let fill = if *op == BinaryOp::Shr && !u {
                            let m = self.splat(&VV { v: (w - 1).to_string(), varying: false, ty });
                            self.op(format!("ashr {vt} {xs}, {m}"))
                        } else {
                            "zeroinitializer".to_string()
                        };
                        self.op(format!("select <{} x i1> {big}, {vt} {fill}, {vt} {sh}", self.lanes))
                    }
                };
                VV { v, varying: true, ty }
            }
            Expr::Bin(op, d, a, b) => {
                let (x, y) = (self.vexpr(a), self.vexpr(b));
                let out = Ty::S(if op.is_compare() || op.is_logical() { DType::Bool } else { *d });
                let (op, d) = (*op, *d);
                self.per_lane(&[x, y], out, |w, a| w.binary(op, d, &a[0], &a[1]))
            }
            Expr::Cast { from, to, x } if vector_cast(*from, *to) => {
                let v = self.vexpr(x);
                let xs = self.splat(&v);
                let (f, t) = (Ty::S(*from), Ty::S(*to));
                let (fv, tv) = (self.vt(f), self.vt(t));
                let r = if *from == DType::BF16 {
                    let n = self.lanes;
                    let h = self.op(format!("bitcast {fv} {xs} to <{n} x i16>"));
                    let w = self.op(format!("zext <{n} x i16> {h} to <{n} x i32>"));
                    let w = self.op(format!("shl <{n} x i32> {w}, splat (i32 16)"));
                    self.op(format!("bitcast <{n} x i32> {w} to {tv}"))
                } else if from.is_float() {
                    self.op(format!("fpext {fv} {xs} to {tv}"))
                } else if to.is_float() {
                    self.op(format!("{}itofp {fv} {xs} to {tv}", if super::is_unsigned(*from) { "u" } else { "s" }))
                } else {
                    let (bf, bt) = (super::bits(*from), super::bits(*to));
                    if bf == bt {
                        xs
                    } else if bf > bt {
                        self.op(format!("trunc {fv} {xs} to {tv}"))
                    } else {
                        self.op(format!("{} {fv} {xs} to {tv}", if super::is_unsigned(*from) { "zext" } else { "sext" }))
                    }
                };
                VV { v: r, varying: true, ty: t }
            }
            Expr::Cast { from, to, x } => {
                let v = self.vexpr(x);
                let (from, to) = (*from, *to);
                self.per_lane(&[v], Ty::S(to), |w, a| w.cast(&a[0], from, to))
            }
            Expr::ToIndex { from, x } => {
                let v = self.vexpr(x);
                let from = *from;
                self.per_lane(&[v], Ty::Index, |w, a| w.to_index(&a[0], from))
            }
            Expr::Int(_) | Expr::Lit(..) => self.uniform(e),
        }
    }

    /// A scalar of type `ty` as an i1 condition (non-zero = true).
    fn cond_str(&mut self, v: &str, ty: Ty) -> String {
        match ty {
            Ty::Index => self.op(format!("icmp ne i64 {v}, 0")),
            Ty::S(DType::Bool) => v.to_string(),
            Ty::S(d) if d.is_float() => self.op(format!("fcmp une {} {v}, 0.0", llty(d))),
            Ty::S(d) => self.op(format!("icmp ne {} {v}, 0", llty(d))),
        }
    }

    /// Scalar index ops that have no cheap vector form.
    fn expr_i_scalar(&mut self, op: IOp, x: &str, y: &str) -> String {
        match op {
            IOp::Div => self.op(format!("sdiv i64 {x}, {y}")),
            IOp::Rem => self.op(format!("srem i64 {x}, {y}")),
            _ => {
                let p = self.op(format!("icmp ne i64 {x}, 0"));
                let q = self.op(format!("icmp ne i64 {y}, 0"));
                let r = self.op(format!("and i1 {p}, {q}"));
                self.op(format!("zext i1 {r} to i64"))
            }
        }
    }

    fn to_index(&mut self, v: &str, from: DType) -> String {
        match from {
            d if d.is_float() => self.op(format!("fptosi {} {v} to i64", llty(d))),
            DType::I64 | DType::U64 => v.to_string(),
            DType::U8 | DType::U16 | DType::U32 | DType::Bool => self.op(format!("zext {} {v} to i64", llty(from))),
            d => self.op(format!("sext {} {v} to i64", llty(d))),
        }
    }

    fn mentions_vvar(&self, e: &Expr) -> bool {
        match e {
            Expr::Var(v) => self.vvars.contains_key(v),
            Expr::Int(_) | Expr::Lit(..) => false,
            Expr::Load { index, .. } => self.mentions_vvar(index),
            Expr::I(_, a, b) | Expr::Bin(_, _, a, b) => self.mentions_vvar(a) || self.mentions_vvar(b),
            Expr::Un(_, _, a) | Expr::Cast { x: a, .. } | Expr::ToIndex { x: a, .. } => self.mentions_vvar(a),
            Expr::Select(c, a, b) | Expr::Dot4(c, a, b, _) => self.mentions_vvar(c) || self.mentions_vvar(a) || self.mentions_vvar(b),
        }
    }

    /// Emits `for var in 0..extent vector(lanes)`; `extent` is a multiple of `lanes`.
    pub(super) fn vector_loop(&mut self, var: Var, extent: i64, lanes: u32, body: &[Stmt]) {
        let slot = format!("%v{}", var.0);
        self.allocas.push_str(&format!("  {slot} = alloca i64\n"));
        self.vars.insert(var, (Ty::Index, slot.clone()));
        let (cond, bodyl, end) = (self.l("vcond"), self.l("vbody"), self.l("vend"));
        self.line(&format!("store i64 0, ptr {slot}"));
        self.line(&format!("br label %{cond}"));
        self.out.push_str(&format!("{cond}:\n"));
        let i = self.op(format!("load i64, ptr {slot}"));
        let c = self.op(format!("icmp slt i64 {i}, {extent}"));
        self.line(&format!("br i1 {c}, label %{bodyl}, label %{end}"));
        self.out.push_str(&format!("{bodyl}:\n"));
        let saved = (self.vec_var, self.lanes);
        self.vec_var = Some(var);
        self.lanes = lanes;
        self.vstmts(body);
        (self.vec_var, self.lanes) = saved;
        let i2 = self.op(format!("load i64, ptr {slot}"));
        let n = self.op(format!("add nsw i64 {i2}, {lanes}"));
        self.line(&format!("store i64 {n}, ptr {slot}"));
        self.line(&format!("br label %{cond}"));
        self.out.push_str(&format!("{end}:\n"));
    }

    fn vstmts(&mut self, s: &[Stmt]) {
        let var = self.vec_var.expect("vector mode");
        for st in s {
            match st {
                Stmt::Decl { var: v, dtype, init } => {
                    let ty = Ty::S(*dtype);
                    let vt = self.vt(ty);
                    let slot = format!("%vv{}", v.0);
                    self.allocas.push_str(&format!("  {slot} = alloca {vt}, align 64\n"));
                    let x = self.vexpr(init);
                    let xs = self.splat(&x);
                    self.vvars.insert(*v, (ty, slot.clone()));
                    self.line(&format!("store {vt} {xs}, ptr {slot}"));
                }
                Stmt::Assign { var: v, value } if self.vvars.contains_key(v) => {
                    let x = self.vexpr(value);
                    let xs = self.splat(&x);
                    let (ty, slot) = self.vvars[v].clone();
                    let vt = self.vt(ty);
                    self.line(&format!("store {vt} {xs}, ptr {slot}"));
                }
                Stmt::Assign { .. } => {
                    // Assigning a scalar declared outside the vector loop from inside it would race
                    // between lanes; the kernel lowering never emits it.
                    unreachable!("vector loop assigns an outer scalar")
                }
                Stmt::Store { buf, index, value } => {
                    let (d, p) = self.params[*buf as usize].clone();
                    let x = self.vexpr(value);
                    match affine(index, var) {
                        Some((base, 1)) if !self.mentions_vvar(&base) && d != DType::Bool => {
                            let b = self.expr(index);
                            let xs = self.splat(&x);
                            let ptr = self.op(format!("getelementptr inbounds {}, ptr {p}, i64 {b}", memty(d)));
                            let vt = self.vt(Ty::S(d));
                            self.line(&format!("store {vt} {xs}, ptr {ptr}, align {}", d.size().unwrap_or(1)));
                        }
                        _ => {
                            let idx = self.vexpr(index);
                            for l in 0..self.lanes {
                                let i = self.lane(&idx, l);
                                let v = self.lane(&x, l);
                                let ptr = self.op(format!("getelementptr inbounds {}, ptr {p}, i64 {i}", memty(d)));
                                let sv = if d == DType::Bool { self.op(format!("zext i1 {v} to i8")) } else { v };
                                self.line(&format!("store {} {sv}, ptr {ptr}", memty(d)));
                            }
                        }
                    }
                }
                Stmt::For { var: v, extent, body, .. } => {
                    // An inner loop: its index is uniform; its body stays in vector mode.
                    let slot = format!("%v{}", v.0);
                    self.allocas.push_str(&format!("  {slot} = alloca i64\n"));
                    self.vars.insert(*v, (Ty::Index, slot.clone()));
                    let (cond, bodyl, end) = (self.l("cond"), self.l("body"), self.l("end"));
                    self.line(&format!("store i64 0, ptr {slot}"));
                    self.line(&format!("br label %{cond}"));
                    self.out.push_str(&format!("{cond}:\n"));
                    let i = self.op(format!("load i64, ptr {slot}"));
                    let c = self.op(format!("icmp slt i64 {i}, {extent}"));
                    self.line(&format!("br i1 {c}, label %{bodyl}, label %{end}"));
                    self.out.push_str(&format!("{bodyl}:\n"));
                    self.vstmts(body);
                    let i2 = self.op(format!("load i64, ptr {slot}"));
                    let n = self.op(format!("add nsw i64 {i2}, 1"));
                    self.line(&format!("store i64 {n}, ptr {slot}"));
                    self.line(&format!("br label %{cond}"));
                    self.out.push_str(&format!("{end}:\n"));
                }
                // A prefetch is emitted once when its address is the same for every lane, else skipped.
                Stmt::Prefetch { buf, index, far } => {
                    if !mentions(index, var) && !self.mentions_vvar(index) {
                        self.prefetch(*buf, index, *far);
                    }
                }
                Stmt::Comm { .. } => unreachable!("vectorizable() refuses a loop holding a collective"),
                Stmt::If { cond, body } => {
                    assert!(!mentions(cond, var) && !self.mentions_vvar(cond), "vector loop with a varying condition");
                    let c = self.cond(cond);
                    let (then, end) = (self.l("then"), self.l("endif"));
                    self.line(&format!("br i1 {c}, label %{then}, label %{end}"));
                    self.out.push_str(&format!("{then}:\n"));
                    self.vstmts(body);
                    self.line(&format!("br label %{end}"));
                    self.out.push_str(&format!("{end}:\n"));
                }
            }
        }
    }
}

/// Casts with one vector instruction (or a short sequence): between integers (not bool), integer →
/// f32/f64, and f16/bf16 → f32 (the block-quantized kernels' unpacking).
fn vector_cast(from: DType, to: DType) -> bool {
    let int = |d: DType| d.is_int();
    (int(from) && int(to)) || (int(from) && matches!(to, DType::F32 | DType::F64)) || (matches!(from, DType::F16 | DType::BF16) && to == DType::F32)
}

/// Whether a kernel body can be emitted with a given loop in vector mode: no `if` whose condition
/// varies, no assignment to a scalar declared outside the loop.
pub(super) fn vectorizable(body: &[Stmt], var: Var, inner_decls: &mut Vec<Var>) -> bool {
    for st in body {
        match st {
            Stmt::Decl { var: v, .. } => inner_decls.push(*v),
            Stmt::Assign { var: v, .. } => {
                if !inner_decls.contains(v) {
                    return false;
                }
            }
            Stmt::Store { .. } | Stmt::Prefetch { .. } => {}
            Stmt::For { body, .. } => {
                if !vectorizable(body, var, inner_decls) {
                    return false;
                }
            }
            Stmt::If { cond, body } => {
                if mentions(cond, var) || inner_decls.iter().any(|v| mentions(cond, *v)) || !vectorizable(body, var, inner_decls) {
                    return false;
                }
            }
            Stmt::Comm { .. } => return false,
        }
    }
    true
}


/// Lanes (i32 words of 4 bytes) per `Dot4` instruction: one register of the CPU's vector width.
fn dot4_part(isa: crate::Int8Dot) -> u32 {
    match isa {
        crate::Int8Dot::Vnni => 16,
        crate::Int8Dot::Avx2 => 8,
        crate::Int8Dot::Sdot | crate::Int8Dot::Plain => 4,
    }
}

impl Writer<'_> {
    /// Each byte of the words `a` (type `vt`) split into its low 7 bits and its top bit (0 or 1): the
    /// two operands of a u8 × i8 dot product done with signed or saturating instructions (× 1, × 128).
    fn split_top_bit(&mut self, vt: &str, a: &str, splat: &dyn Fn(u32) -> String) -> (String, String) {
        let lo = self.op(format!("and {vt} {a}, {}", splat(0x7F7F_7F7F)));
        let hi = self.op(format!("lshr {vt} {a}, {}", splat(7)));
        let hi = self.op(format!("and {vt} {hi}, {}", splat(0x0101_0101)));
        (lo, hi)
    }

    /// `acc + Σ u8(a)·i8(b)` per i32 lane of one register (`dot4_part` lanes; operands `<w x i32>`),
    /// exact for every `a` whose bytes are ≤ `amax` (`Expr::Dot4`).
    fn dot4_part(&mut self, acc: &str, a: &str, b: &str, amax: u8) -> String {
        let w = dot4_part(self.int8);
        let (vt, bt) = (format!("<{w} x i32>"), format!("<{} x i8>", 4 * w));
        let splat = |v: u32| format!("<{}>", vec![format!("i32 {}", v as i32); w as usize].join(", "));
        match self.int8 {
            crate::Int8Dot::Vnni => {
                self.decls.insert("declare <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32>, <16 x i32>, <16 x i32>)".into());
                self.op(format!("call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> {acc}, <16 x i32> {a}, <16 x i32> {b})"))
            }
            crate::Int8Dot::Avx2 => {
                // vpmaddubsw sums the two u8·i8 products of each byte pair into an i16 with saturation:
                // exact when 2·amax·128 ≤ 32767. A larger amax (Q8_0's w + 128) is split into its low 7
                // bits and its top bit, two exact vpmaddubsw; vpmaddwd by 1 (by 128 for the top bits)
                // sums the i16 pairs into i32 exactly.
                self.decls.insert("declare <16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8>, <32 x i8>)".into());
                self.decls.insert("declare <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16>, <16 x i16>)".into());
                let bb = self.op(format!("bitcast {vt} {b} to {bt}"));
                let madd = |me: &mut Self, av: &str, mul: i16| {
                    let ab = me.op(format!("bitcast {vt} {av} to {bt}"));
                    let m = me.op(format!("call <16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8> {ab}, <32 x i8> {bb})"));
                    let k = format!("<{}>", vec![format!("i16 {mul}"); 16].join(", "));
                    me.op(format!("call <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16> {m}, <16 x i16> {k})"))
                };
                if amax <= 127 {
                    let s = madd(self, a, 1);
                    self.op(format!("add {vt} {acc}, {s}"))
                } else {
                    let (lo, hi) = self.split_top_bit(&vt, a, &splat);
                    let s1 = madd(self, &lo, 1);
                    let s2 = madd(self, &hi, 128);
                    let t = self.op(format!("add {vt} {acc}, {s1}"));
                    self.op(format!("add {vt} {t}, {s2}"))
                }
            }
            _ => {
                // sdot multiplies signed bytes: a's bytes are the same values when amax ≤ 127; otherwise
                // its low 7 bits and its top bit (× 128, a shift) in two sdot.
                self.decls.insert("declare <4 x i32> @llvm.aarch64.neon.sdot.v4i32.v16i8(<4 x i32>, <16 x i8>, <16 x i8>)".into());
                let bb = self.op(format!("bitcast {vt} {b} to {bt}"));
                if amax <= 127 {
                    let ab = self.op(format!("bitcast {vt} {a} to {bt}"));
                    self.op(format!("call <4 x i32> @llvm.aarch64.neon.sdot.v4i32.v16i8(<4 x i32> {acc}, <16 x i8> {ab}, <16 x i8> {bb})"))
                } else {
                    let (lo, hi) = self.split_top_bit(&vt, a, &splat);
                    let (lb, hb) = (self.op(format!("bitcast {vt} {lo} to {bt}")), self.op(format!("bitcast {vt} {hi} to {bt}")));
                    let s1 = self.op(format!("call <4 x i32> @llvm.aarch64.neon.sdot.v4i32.v16i8(<4 x i32> {acc}, <16 x i8> {lb}, <16 x i8> {bb})"));
                    let s2 = self.op(format!("call <4 x i32> @llvm.aarch64.neon.sdot.v4i32.v16i8(<4 x i32> zeroinitializer, <16 x i8> {hb}, <16 x i8> {bb})"));
                    let s2 = self.op(format!("shl {vt} {s2}, {}", splat(7)));
                    self.op(format!("add {vt} {s1}, {s2}"))
                }
            }
        }
    }
}
