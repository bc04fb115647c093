//! The kernel loop form: what every LIR kernel is lowered to once, and what every target writer
//! translates (LLVM IR, CLIF, naga IR, C, a Verilog datapath). Loops with static extents, index
//! arithmetic, loads and stores into kernel buffers, scalar arithmetic with MIR's elementwise
//! semantics, mutable scalars for reductions. Tiling, vectorization and parallel splitting are
//! transformations of this form (they set [`LoopKind`] or restructure loops); a writer never needs to
//! know which MIR op a kernel came from.

pub mod grid;
pub mod tiled;

use crate::mir::{BinaryOp, UnaryOp};
use crate::DType;
use std::fmt::{self, Write};

/// A scalar variable: a loop index (type `i64`) or a declared mutable scalar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Var(pub u32);

/// Integer (index) arithmetic on i64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IOp {
    Add,
    Sub,
    Mul,
    /// Truncating division (operands are non-negative where the lowering emits it).
    Div,
    /// Remainder (non-negative operands).
    Rem,
    Min,
    Max,
    /// Comparisons give 0/1.
    Lt,
    Le,
    Eq,
    And,
}

impl IOp {
    pub fn name(self) -> &'static str {
        match self {
            IOp::Add => "+",
            IOp::Sub => "-",
            IOp::Mul => "*",
            IOp::Div => "/",
            IOp::Rem => "%",
            IOp::Min => "min",
            IOp::Max => "max",
            IOp::Lt => "<",
            IOp::Le => "<=",
            IOp::Eq => "==",
            IOp::And => "&&",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// An i64 index constant.
    Int(i64),
    /// A typed scalar constant (any plain dtype; ints and bool carry their value as f64 exactly).
    Lit(f64, DType),
    /// A loop index (i64) or declared scalar (its declared dtype).
    Var(Var),
    /// `buf[index]` (element index, not bytes), typed by the buffer's dtype.
    Load { buf: u32, index: Box<Expr> },
    /// Index arithmetic (i64 → i64).
    I(IOp, Box<Expr>, Box<Expr>),
    /// MIR elementwise unary op on a scalar of `dtype`.
    Un(UnaryOp, DType, Box<Expr>),
    /// MIR elementwise binary op on scalars of `dtype` (result bool for comparisons/logic).
    Bin(BinaryOp, DType, Box<Expr>, Box<Expr>),
    /// `cond ? a : b` where cond is an index expression (non-zero = true) or a bool scalar.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    /// Scalar conversion with MIR `cast` semantics.
    Cast { from: DType, to: DType, x: Box<Expr> },
    /// An index expression converted from a scalar of `from` (for data-dependent indices: gather).
    ToIndex { from: DType, x: Box<Expr> },
    /// `Dot4(acc, a, b, amax)`: i32 `acc + Σᵢ u8(a byte i) · i8(b byte i)` over the 4 bytes of the i32s
    /// `a` and `b` (little-endian), wrapping — x86's `vpdpbusd` lane. `amax` is the largest value a
    /// byte of `a` takes (the planner's guarantee): a writer may use an instruction that is exact only
    /// under it (AVX2's `vpmaddubsw` sums two products into a saturating i16: exact when
    /// 2·amax·128 ≤ 32767, i.e. amax ≤ 127; aarch64's `sdot` reads `a` signed: the same bytes when
    /// amax ≤ 127). Planned only for CPUs with one of those instructions (the LLVM writer picks it from
    /// the CPU); [`Expr::dot4_expanded`] is the same value from plain ops, for writers without them.
    Dot4(Box<Expr>, Box<Expr>, Box<Expr>, u8),
}

impl Expr {
    pub fn int(i: i64) -> Expr {
        Expr::Int(i)
    }
    pub fn var(v: Var) -> Expr {
        Expr::Var(v)
    }
    pub fn i(op: IOp, a: Expr, b: Expr) -> Expr {
        // Light simplification keeps printed kernels readable and index math cheap.
        match (op, &a, &b) {
            (IOp::Add, Expr::Int(0), _) => b,
            (IOp::Add | IOp::Sub, _, Expr::Int(0)) => a,
            (IOp::Mul, Expr::Int(1), _) => b,
            (IOp::Mul, _, Expr::Int(1)) | (IOp::Div, _, Expr::Int(1)) => a,
            (IOp::Mul, Expr::Int(0), _) | (IOp::Mul, _, Expr::Int(0)) => Expr::Int(0),
            (_, Expr::Int(x), Expr::Int(y)) => match op {
                IOp::Add => Expr::Int(x + y),
                IOp::Sub => Expr::Int(x - y),
                IOp::Mul => Expr::Int(x * y),
                IOp::Div if *y != 0 => Expr::Int(x / y),
                IOp::Rem if *y != 0 => Expr::Int(x % y),
                IOp::Min => Expr::Int(*x.min(y)),
                IOp::Max => Expr::Int(*x.max(y)),
                _ => Expr::I(op, Box::new(a), Box::new(b)),
            },
            _ => Expr::I(op, Box::new(a), Box::new(b)),
        }
    }
    pub fn add(a: Expr, b: Expr) -> Expr {
        Expr::i(IOp::Add, a, b)
    }
    pub fn mul(a: Expr, b: Expr) -> Expr {
        Expr::i(IOp::Mul, a, b)
    }
    pub fn load(buf: u32, index: Expr) -> Expr {
        Expr::Load { buf, index: Box::new(index) }
    }
    /// [`Expr::Dot4`]'s value written with i32 shifts, masks, casts, multiplies and adds.
    pub fn dot4_expanded(acc: &Expr, a: &Expr, b: &Expr) -> Expr {
        let i32b = |op: BinaryOp, x: Expr, y: Expr| Expr::Bin(op, DType::I32, Box::new(x), Box::new(y));
        let c = |v: i64| Expr::Lit(v as f64, DType::I32);
        let mut sum = acc.clone();
        for i in 0..4 {
            let ua = i32b(BinaryOp::BitAnd, i32b(BinaryOp::Shr, a.clone(), c(8 * i)), c(255));
            let byte = Expr::Cast { from: DType::I32, to: DType::I8, x: Box::new(i32b(BinaryOp::Shr, b.clone(), c(8 * i))) };
            let sb = Expr::Cast { from: DType::I8, to: DType::I32, x: Box::new(byte) };
            sum = i32b(BinaryOp::Add, sum, i32b(BinaryOp::Mul, ua, sb));
        }
        sum
    }
}

/// The instruction a vector [`Expr::Dot4`] becomes on a CPU (its integer dot product), chosen from the
/// CPU's features by the driver and followed by the LLVM writer; `Plain` is its expansion in plain ops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Int8Dot {
    #[default]
    Plain,
    /// AVX-512 VNNI `vpdpbusd` (512-bit).
    Vnni,
    /// AVX2 `vpmaddubsw` + `vpmaddwd` (256-bit).
    Avx2,
    /// aarch64 `sdot` (the dotprod feature; 128-bit).
    Sdot,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoopKind {
    Serial,
    /// Iterations are independent and may run on different threads.
    Parallel,
    /// Iterations are independent and may be vectorized with this many lanes.
    Vector(u32),
}

impl LoopKind {
    /// A loop over a run `width` elements wide at a time: a vector loop of that many lanes, or a serial
    /// one for single elements (the runs the planner splits a row into).
    pub fn run(width: u32) -> LoopKind {
        if width > 1 { LoopKind::Vector(width) } else { LoopKind::Serial }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// `for var in 0..extent { body }`
    For { var: Var, extent: i64, kind: LoopKind, body: Vec<Stmt> },
    /// Declares a mutable scalar with an initial value.
    Decl { var: Var, dtype: DType, init: Expr },
    /// Assigns a declared scalar.
    Assign { var: Var, value: Expr },
    /// `buf[index] = value`.
    Store { buf: u32, index: Expr, value: Expr },
    /// Executes `body` only when the index expression `cond` is non-zero.
    If { cond: Expr, body: Vec<Stmt> },
    /// A hint that `buf[index]` will be read soon (a software prefetch of its cache line). It has no
    /// effect on results: a writer without a prefetch instruction skips it, and `index` may lie past
    /// the buffer's end (the LLVM writer's prefetch never faults; it computes the address without
    /// `inbounds`). Emitted by the block-quantized decode kernels, whose weight streams cross a 4 KiB
    /// page every few blocks, where the hardware prefetcher stops. `far`: the line is wanted only
    /// after much other traffic (a convolution's next unit), so it is brought into L2 only, not L1,
    /// where the traffic in between would evict it and the lines it displaced were still in use.
    Prefetch { buf: u32, index: Expr, far: bool },
    /// A call into the communicator the application passed to the runtime (`rlx_rt_collective`): the
    /// whole of buffer `send` (`count` elements of `dtype`; none for a receive) goes out, buffer `recv`
    /// is filled. Always the only statement of its kernel; a CPU writer calls it from the entry point
    /// and returns the artifact's COMM error code when it fails.
    Comm { op: CommOp, send: Option<u32>, recv: u32, count: i64, dtype: DType, peer: i64 },
}

/// What a [`Stmt::Comm`] asks of the communicator; the value is the `op` argument of
/// `int rlx_rt_collective(int op, int dtype, int64_t count, const void *send, void *recv, int64_t peer)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommOp {
    /// recv = Σ over ranks of send (`count` elements).
    AllReduce = 0,
    /// recv = every rank's send, in rank order (`count` × ranks elements).
    AllGather = 1,
    /// recv = this rank's `count` elements of the sum over ranks of send (`count` × ranks elements).
    ReduceScatter = 2,
    /// send goes to rank `peer`; recv = a copy of send (the node's output is the value sent).
    Send = 3,
    /// recv = the `count` elements rank `peer` sends.
    Recv = 4,
}

impl CommOp {
    pub fn name(self) -> &'static str {
        match self {
            CommOp::AllReduce => "all_reduce",
            CommOp::AllGather => "all_gather",
            CommOp::ReduceScatter => "reduce_scatter",
            CommOp::Send => "send",
            CommOp::Recv => "recv",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    ReadWrite,
}

/// One buffer a kernel touches: dtype and element count; the LIR binding says where it lives.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub dtype: DType,
    pub elems: usize,
    pub access: Access,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub name: String,
    pub params: Vec<Param>,
    pub body: Vec<Stmt>,
    /// Number of `Var`s used (loop indices and scalars), for writers that preallocate slots.
    pub vars: u32,
}

/// MIR op kinds the shared kernel lowering (`rlx-opt`'s plan) produces loop form for: the claim set of a
/// writer that translates every loop-form construct (the LLVM and Cranelift writers).
pub const LOWERED_KINDS: &[&str] = &[
    "neg", "abs", "exp", "log", "sqrt", "recip", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
    "atanh", "sigmoid", "erf", "relu", "floor", "ceil", "round", "sign", "not", "bit_not", "is_nan", "is_inf", "is_pos_inf",
    "is_neg_inf", "add", "sub", "mul", "div", "pow", "max", "min", "mod", "fmod", "eq", "lt", "le", "gt", "ge", "and", "or", "xor",
    "bit_and", "bit_or", "bit_xor", "shl", "shr", "where", "cast", "bitcast", "matmul", "reduce_sum", "reduce_prod", "reduce_max", "reduce_min",
    "reduce_mean", "argmax", "argmin", "reshape", "transpose", "expand", "slice", "concat", "gather", "gather_elements", "gather_nd", "pad",
    "conv", "conv_transpose", "max_pool", "avg_pool", "cumsum", "quantize", "dequantize", "fake_quantize", "write_rows",
    "nonzero", "compress", "nms", "unique", "scatter_elements", "scatter_nd", "topk",
];

/// Dtypes every writer of the full loop form (LLVM, Cranelift) implements. f16/bf16 are storage types
/// there: no arithmetic, but `cast` to and from them and copies of them (`reshape`) are claimed.
pub const LOWERED_DTYPES: &[DType] =
    &[DType::F32, DType::F64, DType::I8, DType::U8, DType::I16, DType::U16, DType::I32, DType::U32, DType::I64, DType::U64, DType::Bool];

/// The claim set of a CPU back end that translates every loop-form construct: [`LOWERED_KINDS`] ×
/// [`LOWERED_DTYPES`], plus `cast`, `reshape` and `bitcast` for f16/bf16, `dequant_matmul` (claimed by its f32
/// input) and `dequant_gather` of tables in f32, f16, bf16 and every GGUF block type.
pub fn lowered_caps(name: &str) -> crate::TargetCaps {
    let half = [DType::F16, DType::BF16];
    crate::TargetCaps::uniform(name, LOWERED_KINDS, LOWERED_DTYPES)
        .with("cast", &half)
        .with("reshape", &half)
        .with("bitcast", &half)
        .with("dequant_matmul", &[DType::F32])
        .with("dequant_gather", &[DType::F32, DType::F16, DType::BF16])
        .with("dequant_gather", &crate::dtype::BLOCK_DTYPES)
}

/// How a kernel is launched: its body runs over `[start, end)` of its outermost loop.
pub struct Split {
    /// Iterations of the outermost loop (1 when the kernel is not split).
    pub extent: i64,
    /// Chunk size for the runtime's `rlx_rt_parallel_for`; `None` = call the body once, inline.
    pub grain: Option<i64>,
}

/// Work (innermost iterations) of a statement list.
pub fn work(s: &[Stmt]) -> i64 {
    s.iter()
        .map(|st| match st {
            Stmt::For { extent, body, .. } => extent.saturating_mul(work(body).max(1)),
            Stmt::If { body, .. } => work(body),
            _ => 1,
        })
        .fold(0i64, |a, b| a.saturating_add(b))
}

/// Kernels with at least this much work run on the runtime's thread pool (every CPU writer splits
/// the same kernels the same way: [`split_of`]). Below it, and below [`PARALLEL_MIN_BYTES`], a kernel
/// takes a few microseconds: a second thread saves at most about a microsecond when it is idle and
/// costs a scheduler slice when it is preempted mid-chunk by another process, so the caller runs the
/// kernel alone.
pub const PARALLEL_MIN_WORK: i64 = 1 << 18;
/// Kernels that stream at least this many bytes (estimated by [`streamed_bytes`]) also run on the
/// pool, whatever their work: they are bound by the bandwidth of the core's L2, and two cores stream
/// twice as fast. A matrix-vector product over 256 KiB of f32 weights takes about 2 µs on one
/// Sapphire Rapids core and 1.2 µs on two, where the pool's hand-off costs about 0.2 µs.
pub const PARALLEL_MIN_BYTES: usize = 256 << 10;
/// Target work per chunk.
pub const CHUNK_WORK: i64 = 1 << 14;

/// Bytes a kernel reads and writes, estimated from its parameters: each buffer counts its size, or
/// the kernel's work if that is smaller (a gather touches a few rows of a large table).
pub fn streamed_bytes(k: &Kernel) -> usize {
    let work = usize::try_from(work(&k.body)).unwrap_or(usize::MAX);
    k.params.iter().map(|p| p.dtype.bytes_for(p.elems.min(work)).unwrap_or(p.elems.min(work))).fold(0usize, usize::saturating_add)
}

/// How a kernel is launched: on the pool, in chunks of its outermost loop, when that loop is parallel,
/// has at least two iterations, and the kernel has [`PARALLEL_MIN_WORK`] work or streams
/// [`PARALLEL_MIN_BYTES`]; inline otherwise.
pub fn split_of(k: &Kernel) -> Split {
    match k.body.as_slice() {
        [Stmt::For { extent, kind: LoopKind::Parallel, body, .. }] => {
            let total = work(&k.body);
            let per = work(body).max(1);
            if (total >= PARALLEL_MIN_WORK || streamed_bytes(k) >= PARALLEL_MIN_BYTES) && *extent >= 2 {
                Split { extent: *extent, grain: Some((CHUNK_WORK / per).max(1)) }
            } else {
                Split { extent: *extent, grain: None }
            }
        }
        _ => Split { extent: 1, grain: None },
    }
}

/// Groups kernels that are identical up to their name (same parameters and body): returns, for each
/// kernel, the index of the function that computes it (numbered by first appearance), and the index of
/// each function's first kernel. Writers emit one function per group.
pub fn dedup_kernels<'a>(kernels: impl Iterator<Item = &'a Kernel>) -> (Vec<usize>, Vec<usize>) {
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let (mut fn_of, mut first) = (Vec::new(), Vec::new());
    for (i, k) in kernels.enumerate() {
        let key = Kernel { name: String::new(), ..k.clone() }.to_string();
        let n = seen.len();
        let f = *seen.entry(key).or_insert(n);
        if f == first.len() {
            first.push(i);
        }
        fn_of.push(f);
    }
    (fn_of, first)
}

impl Kernel {
    /// Dtype of a declared scalar `v`, if `v` is one (loop indices are i64 and not listed).
    pub fn decl_dtype(&self, v: Var) -> Option<DType> {
        fn walk(s: &[Stmt], v: Var) -> Option<DType> {
            for st in s {
                match st {
                    Stmt::Decl { var, dtype, .. } if *var == v => return Some(*dtype),
                    Stmt::For { body, .. } | Stmt::If { body, .. } => {
                        if let Some(d) = walk(body, v) {
                            return Some(d);
                        }
                    }
                    _ => {}
                }
            }
            None
        }
        walk(&self.body, v)
    }
}

/// `name(a, b, …)` of expressions.
fn fmt_call(out: &mut String, name: &str, args: &[&Expr]) {
    out.push_str(name);
    out.push('(');
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        fmt_expr(a, out);
    }
    out.push(')');
}

fn fmt_expr(e: &Expr, out: &mut String) {
    match e {
        Expr::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Expr::Lit(x, d) => {
            let _ = write!(out, "{x:?}:{d}");
        }
        Expr::Var(v) => {
            let _ = write!(out, "v{}", v.0);
        }
        Expr::Load { buf, index } => {
            let _ = write!(out, "b{buf}[");
            fmt_expr(index, out);
            out.push(']');
        }
        Expr::I(op, a, b) => {
            out.push('(');
            fmt_expr(a, out);
            let _ = write!(out, " {} ", op.name());
            fmt_expr(b, out);
            out.push(')');
        }
        Expr::Un(op, d, a) => {
            let _ = write!(out, "{}.{d}(", op.name());
            fmt_expr(a, out);
            out.push(')');
        }
        Expr::Bin(op, d, a, b) => {
            let _ = write!(out, "{}.{d}(", op.name());
            fmt_expr(a, out);
            out.push_str(", ");
            fmt_expr(b, out);
            out.push(')');
        }
        Expr::Select(c, a, b) => fmt_call(out, "select", &[c, a, b]),
        Expr::Cast { from, to, x } => {
            let _ = write!(out, "cast.{from}.{to}(");
            fmt_expr(x, out);
            out.push(')');
        }
        Expr::ToIndex { from, x } => {
            let _ = write!(out, "index.{from}(");
            fmt_expr(x, out);
            out.push(')');
        }
        Expr::Dot4(c, a, b, 255) => fmt_call(out, "dot4", &[c, a, b]),
        Expr::Dot4(c, a, b, m) => fmt_call(out, &format!("dot4.u{m}"), &[c, a, b]),
    }
}

fn fmt_stmts(s: &[Stmt], depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    for st in s {
        match st {
            Stmt::For { var, extent, kind, body } => {
                let k = match kind {
                    LoopKind::Serial => String::new(),
                    LoopKind::Parallel => " parallel".into(),
                    LoopKind::Vector(n) => format!(" vector({n})"),
                };
                let _ = writeln!(out, "{pad}for v{} in 0..{extent}{k} {{", var.0);
                fmt_stmts(body, depth + 1, out);
                let _ = writeln!(out, "{pad}}}");
            }
            Stmt::Decl { var, dtype, init } => {
                let _ = write!(out, "{pad}var v{}: {dtype} = ", var.0);
                fmt_expr(init, out);
                out.push('\n');
            }
            Stmt::Assign { var, value } => {
                let _ = write!(out, "{pad}v{} = ", var.0);
                fmt_expr(value, out);
                out.push('\n');
            }
            Stmt::Store { buf, index, value } => {
                let _ = write!(out, "{pad}b{buf}[");
                fmt_expr(index, out);
                out.push_str("] = ");
                fmt_expr(value, out);
                out.push('\n');
            }
            Stmt::Prefetch { buf, index, far } => {
                let _ = write!(out, "{pad}prefetch{} b{buf}[", if *far { ".far" } else { "" });
                fmt_expr(index, out);
                out.push_str("]\n");
            }
            Stmt::Comm { op, send, recv, count, dtype, peer } => {
                let send = send.map_or("-".to_string(), |b| format!("b{b}"));
                let _ = writeln!(out, "{pad}comm.{}.{dtype}({send} -> b{recv}, count {count}, peer {peer})", op.name());
            }
            Stmt::If { cond, body } => {
                let _ = write!(out, "{pad}if ");
                fmt_expr(cond, out);
                out.push_str(" {\n");
                fmt_stmts(body, depth + 1, out);
                let _ = writeln!(out, "{pad}}}");
            }
        }
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        let _ = write!(out, "kernel {:?}(", self.name);
        for (i, p) in self.params.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            let acc = match p.access {
                Access::Read => "in",
                Access::Write => "out",
                Access::ReadWrite => "inout",
            };
            let _ = write!(out, "b{i}: {}[{}] {acc}", p.dtype, p.elems);
        }
        out.push_str(") {\n");
        fmt_stmts(&self.body, 1, &mut out);
        out.push_str("}\n");
        f.write_str(&out)
    }
}
