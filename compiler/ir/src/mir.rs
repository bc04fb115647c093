//! MIR: the primitive tensor op set. Fusion, autodiff, quantization and legalization read and write it;
//! the reference interpreter executes it. Semantics follow numpy / ONNX where they name the same thing;
//! each variant documents its inputs.

use crate::attr::{dims_attr, usizes_attr, Attr, Attrs};
use crate::shape::broadcast;
use crate::{DType, Dim, Graph, OpSet, Shape, TensorType};

macro_rules! name_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vm])* $v),* }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$v),*];
            pub fn name(self) -> &'static str { match self { $($name::$v => $s),* } }
            pub fn parse(s: &str) -> Option<$name> { match s { $($s => Some($name::$v),)* _ => None } }
        }
    };
}

name_enum!(
    /// Elementwise unary ops. Output dtype = input dtype, except the `is_*` tests (bool).
    UnaryOp {
        Neg = "neg", Abs = "abs", Exp = "exp", Log = "log", Sqrt = "sqrt", Recip = "recip",
        Sin = "sin", Cos = "cos", Tan = "tan", Asin = "asin", Acos = "acos", Atan = "atan",
        Sinh = "sinh", Cosh = "cosh", Tanh = "tanh", Asinh = "asinh", Acosh = "acosh", Atanh = "atanh",
        Sigmoid = "sigmoid", Erf = "erf", Relu = "relu", Floor = "floor", Ceil = "ceil",
        /// Round half to even.
        Round = "round",
        Sign = "sign",
        /// Logical not (bool).
        Not = "not",
        /// Bitwise not (ints).
        BitNot = "bit_not",
        IsNan = "is_nan", IsInf = "is_inf", IsPosInf = "is_pos_inf", IsNegInf = "is_neg_inf",
    }
);

impl UnaryOp {
    pub fn out_dtype(self, x: DType) -> DType {
        match self {
            UnaryOp::IsNan | UnaryOp::IsInf | UnaryOp::IsPosInf | UnaryOp::IsNegInf => DType::Bool,
            _ => x,
        }
    }
}

name_enum!(
    /// Elementwise binary ops with numpy broadcasting. Both inputs have the same dtype, except `pow`
    /// (exponent may differ) and the shifts. Comparisons and logical ops output bool.
    BinaryOp {
        Add = "add", Sub = "sub", Mul = "mul",
        /// Integer division truncates toward zero.
        Div = "div",
        Pow = "pow", Max = "max", Min = "min",
        /// Floored modulo (sign of the divisor), as Python's `%`.
        Mod = "mod",
        /// Truncated modulo (sign of the dividend), as C's `fmod`.
        FMod = "fmod",
        Eq = "eq", Lt = "lt", Le = "le", Gt = "gt", Ge = "ge",
        And = "and", Or = "or", Xor = "xor",
        BitAnd = "bit_and", BitOr = "bit_or", BitXor = "bit_xor", Shl = "shl", Shr = "shr",
    }
);

impl BinaryOp {
    pub fn is_compare(self) -> bool {
        matches!(self, BinaryOp::Eq | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge)
    }
    pub fn is_logical(self) -> bool {
        matches!(self, BinaryOp::And | BinaryOp::Or | BinaryOp::Xor)
    }
}

name_enum!(
    /// Reductions. Sum, Prod and Mean accumulate in f64 in the interpreter.
    ReduceOp { Sum = "sum", Prod = "prod", Max = "max", Min = "min", Mean = "mean" }
);
name_enum!(ArgOp { ArgMax = "argmax", ArgMin = "argmin" });
name_enum!(
    /// Pad modes (ONNX Pad).
    PadMode { Constant = "constant", Reflect = "reflect", Edge = "edge", Wrap = "wrap" }
);
name_enum!(
    /// Reduction applied by scatter ops where indices collide (`none` = last write wins).
    ScatterRed { None = "none", Add = "add", Mul = "mul", Max = "max", Min = "min" }
);
name_enum!(PoolKind { Max = "max", Avg = "avg" });

/// Primitive ops. Axis attributes are non-negative (the importer normalizes ONNX's negative axes).
#[derive(Clone, Debug, PartialEq)]
pub enum MirOp {
    /// (x)
    Unary(UnaryOp),
    /// (a, b), broadcast.
    Binary(BinaryOp),
    /// (cond: bool, a, b), broadcast; picks `a` where cond.
    Where,
    /// (x) → x converted to `to`. Float→int truncates toward zero; int→narrower int wraps; x != 0 → bool.
    Cast { to: DType },
    /// (x) → each element's bits reinterpreted as `to`, a dtype of the same width (ONNX BitCast). The
    /// planner makes it a view (the same bytes, another dtype), so a target runs it by claiming it.
    Bitcast { to: DType },
    /// (a, b): numpy matmul — 1-D operands are promoted and the added dim removed; leading dims broadcast.
    MatMul,
    /// (x): reduce over `axes` (sorted, unique; empty = identity).
    Reduce { op: ReduceOp, axes: Vec<usize>, keepdims: bool },
    /// (x) → i64 index of the max/min along `axis`; ties pick the first unless `select_last`.
    ArgReduce { op: ArgOp, axis: usize, keepdims: bool, select_last: bool },
    /// (x) → same elements, new shape (element counts must match).
    Reshape { shape: Vec<Dim> },
    /// (x) → dims permuted: out dim i = in dim perm[i].
    Transpose { perm: Vec<usize> },
    /// (x) → broadcast to exactly `shape` (numpy broadcast_to).
    Expand { shape: Vec<Dim> },
    /// (x) → strided slice with ONNX semantics per listed axis: negative start/end count from the end,
    /// then clamp; steps non-zero (negative walks backwards).
    Slice { axes: Vec<usize>, starts: Vec<i64>, ends: Vec<i64>, steps: Vec<i64> },
    /// (x0, x1, …) joined along `axis`.
    Concat { axis: usize },
    /// (data, indices: int) → numpy take along `axis`; negative indices count from the end.
    Gather { axis: usize },
    /// (data, indices) → ONNX GatherElements.
    GatherElements { axis: usize },
    /// (data, indices) → ONNX GatherND.
    GatherNd { batch_dims: usize },
    /// (data, indices, updates) → ONNX ScatterElements.
    ScatterElements { axis: usize, reduction: ScatterRed },
    /// (data, indices, updates) → ONNX ScatterND.
    ScatterNd { reduction: ScatterRed },
    /// (x) → padded: `pads` = [begin_0..begin_r, end_0..end_r], negative entries crop; `value` fills
    /// in constant mode.
    Pad { pads: Vec<i64>, mode: PadMode, value: f64 },
    /// (x[N,C,spatial…], w[M,C/groups,k…], bias[M]?) → N-d convolution (cross-correlation).
    /// `pads` = [begin…, end…] over spatial dims.
    Conv { strides: Vec<usize>, pads: Vec<usize>, dilations: Vec<usize>, groups: usize },
    /// (x[N,C,spatial…], w[C,M/groups,k…], bias[M]?) → transposed convolution; `pads` as Conv,
    /// `output_padding` added to the end of each spatial dim.
    ConvTranspose { strides: Vec<usize>, pads: Vec<usize>, dilations: Vec<usize>, groups: usize, output_padding: Vec<usize> },
    /// (x[N,spatial…,C], w[M,C/groups,k…], bias[M]?) → y[N,ospatial…,M]: `conv` with the activations
    /// channels-last (NHWC). No importer makes it: the CPU planner's layout pass (`rlx_opt`'s
    /// `channels_last`) does, for the kernels that want that layout.
    ConvNhwc { strides: Vec<usize>, pads: Vec<usize>, dilations: Vec<usize>, groups: usize },
    /// (x[N,C,spatial…]) → max/avg pool; `pads` = [begin…, end…]; `ceil_mode` rounds the output size up;
    /// avg divides by the full window when `count_include_pad`, else by the in-bounds count.
    Pool { kind: PoolKind, kernel: Vec<usize>, strides: Vec<usize>, pads: Vec<usize>, dilations: Vec<usize>, ceil_mode: bool, count_include_pad: bool },
    /// (x[N,spatial…,C]) → `max_pool` / `avg_pool` with the activations channels-last (NHWC), made by
    /// the CPU planner's layout pass as `conv_nhwc` is.
    PoolNhwc { kind: PoolKind, kernel: Vec<usize>, strides: Vec<usize>, pads: Vec<usize>, dilations: Vec<usize>, ceil_mode: bool, count_include_pad: bool },
    /// (x) → cumulative sum along `axis`.
    CumSum { axis: usize, exclusive: bool, reverse: bool },
    /// (x) → (values, i64 indices) of the `k` largest (or smallest) along `axis`; ties pick the lower index.
    TopK { axis: usize, k: usize, largest: bool },
    /// The data-dependent-length ops (`crate::bounded`): each result is padded along one axis to a static
    /// bound with values that are valid indices (zeros), so row-wise readers such as gathers stay in range;
    /// the run-time count is computed beside it (by the importer from primitives, or by `nms` itself) and
    /// the graph says which outputs are bounded (`Graph::bounded`).
    /// (x, rank ≥ 1) → i64[rank, numel]: ONNX NonZero — column j the multi-index of the j-th non-zero
    /// element in row-major order; the columns past the count are 0.
    NonZero,
    /// (x, cond: bool[n ≤ x.shape[axis]]) → x's type: the slices along `axis` where cond holds, first, in
    /// order (ONNX Compress); the slices past the count are zeros.
    Compress { axis: usize },
    /// (boxes: f32[B,N,4], scores: f32[B,C,N], iou_threshold: f32[], score_threshold: f32[]) →
    /// (i64[B·C·min(max_per_class, N), 3], i64[] count): ONNX NonMaxSuppression — per batch and class, boxes with a
    /// score above score_threshold greedily kept in order of descending score (ties: lower index
    /// first) unless their IoU with a kept box exceeds iou_threshold, at most `max_per_class`; rows
    /// (batch, class, box) in batch, class, selection order; the rows past the count are 0.
    /// `center_point_box`: boxes are [x_c, y_c, w, h], else [y1, x1, y2, x2] in any corner order.
    Nms { center_point_box: bool, max_per_class: usize },
    /// (x) → (y, indices: i64[M], inverse: i64[len], counts: i64[M]): ONNX Unique over slices along
    /// `axis` (`None`: the flattened elements, then len = M = numel), M = x.shape[axis]. `sorted`:
    /// ascending (slices compared lexicographically), else in order of first occurrence. Past the count
    /// y, indices and counts are 0.
    Unique { axis: Option<usize>, sorted: bool },
    /// (x: float, scale: float scalar or [C], zero_point: int scalar or [C]) → zero_point's dtype:
    /// saturate(round_half_to_even(x / scale) + zero_point), the division in x's dtype (ONNX
    /// QuantizeLinear). A [C] scale/zero_point is per channel along `axis` (C = x.shape[axis]); a
    /// scale/zero_point of x's own shape is per element (ONNX blocked quantization, expanded).
    Quantize { axis: usize },
    /// (q: int, scale: float scalar or [C], zero_point: q's dtype, same shape as scale) → scale's dtype:
    /// (q - zero_point) * scale (ONNX DequantizeLinear); per channel along `axis` as `quantize`.
    Dequantize { axis: usize },
    /// (x: float, scale, zero_point: int) → x's dtype: dequantize(quantize(x)) with the same scale and
    /// zero point (quantization-aware simulation; the zero point's dtype sets the saturation range).
    FakeQuantize { axis: usize },
    /// (x[…,K]: f32, w[N,K]: a constant of a float or GGUF block dtype, blocks along K) → f32[…,N]:
    /// x · wᵀ with w dequantized row by row (GGUF/ggml weight layout). Weights stay in their blocks.
    DequantMatMul,
    /// (table[R,C]: a constant of a float or GGUF block dtype, indices: int[…]) → f32[…,C]: the
    /// dequantized rows `table[indices]` (an embedding lookup that leaves the table in its blocks).
    DequantGather,
    /// (cache[R, …], rows[n, …]: cache's dtype and trailing dims, positions: int[n]) → cache's type:
    /// the cache with row `positions[i]` replaced by `rows[i]` (a KV cache's new keys or values).
    /// A position outside [0, R) writes nothing (a padding row); on repeats the later row wins.
    /// When the cache is a state input (`Graph::state`) the compiled kernel writes the n rows in
    /// place and copies nothing.
    WriteRows,
    /// (x) → x summed elementwise over the `ranks` ranks of the communicator, in rank order (MPI_Allreduce,
    /// MPI_SUM). The collectives and `send`/`recv` are written by the sharding pass (`rlx_opt::shard`);
    /// the interpreter runs every rank of a sharded model at once (`rlx_interp::ranks`).
    AllReduce { ranks: usize },
    /// (x) → every rank's x joined along `axis`, in rank order (`ranks` of them).
    AllGather { axis: usize, ranks: usize },
    /// (x) → the elementwise sum over the `ranks` ranks cut into `ranks` equal parts along `axis`;
    /// rank r keeps part r.
    ReduceScatter { axis: usize, ranks: usize },
    /// (x) → x, after sending it to rank `peer` (the output is the value sent: a pipeline stage's result).
    Send { peer: usize },
    /// () → the tensor of type `dtype[shape]` that rank `peer` sends (messages between two ranks
    /// arrive in the order they were sent).
    Recv { peer: usize, dtype: DType, shape: Vec<Dim> },
    /// (trip: i64[], cond: bool[], carried…, captured…) → (carried…, scans…: [max_trips, …], count: i64[]):
    /// the body run while iteration < trip and cond holds (ONNX Loop with a run-time trip count or
    /// condition). Semantics and the body's signature: `crate::region`.
    Loop { max_trips: Option<u64>, carried: usize, body: Box<[Graph<MirOp>; 1]> },
    /// (cond: bool[], captured…) → the outputs of `branches[0]` when cond holds, else of `branches[1]`
    /// (ONNX If with a run-time condition): `crate::region`.
    If { branches: Box<[Graph<MirOp>; 2]> },
}

fn same_dtype(op: &str, a: &TensorType, b: &TensorType) -> Result<(), String> {
    if a.dtype != b.dtype {
        return Err(format!("{op}: operand dtypes differ ({} vs {})", a.dtype, b.dtype));
    }
    Ok(())
}

/// (rows, columns) of a block-weight operand: 2-D, a float or GGUF block dtype, whole blocks per row.
fn block_rows(op: &str, w: &TensorType) -> Result<(Dim, Dim), String> {
    if w.shape.rank() != 2 || !(w.dtype.is_float() || w.dtype.is_quantized_block()) {
        return Err(format!("{op}: weight must be a 2-D float or block-quantized tensor, got {w}"));
    }
    let per_block = w.dtype.block().0 as u64;
    if let Dim::Fixed(c) = w.shape.0[1] {
        if c % per_block != 0 {
            return Err(format!("{op}: weight {w} rows of {c} values are not whole {} blocks of {per_block}", w.dtype));
        }
    }
    Ok((w.shape.0[0].clone(), w.shape.0[1].clone()))
}

impl MirOp {
    /// A collective or point-to-point transfer: run through the communicator, never folded.
    pub fn is_comm(&self) -> bool {
        matches!(self, MirOp::AllReduce { .. } | MirOp::AllGather { .. } | MirOp::ReduceScatter { .. } | MirOp::Send { .. } | MirOp::Recv { .. })
    }

    /// The input that these ops read as raw (possibly block-quantized) constant bytes, if any.
    pub fn block_weight_input(&self) -> Option<usize> {
        match self {
            MirOp::DequantMatMul => Some(1),
            MirOp::DequantGather => Some(0),
            _ => None,
        }
    }
}

fn check_axis(axis: usize, rank: usize) -> Result<(), String> {
    if axis >= rank {
        return Err(format!("axis {axis} out of range for rank {rank}"));
    }
    Ok(())
}

fn fixed(d: &Dim, what: &str) -> Result<u64, String> {
    d.fixed().ok_or_else(|| format!("{what} needs a fixed dim, got symbolic '{d}' (fix it with --dim {d}=N)"))
}

/// Output size of a convolution window: floor((in + pads - dil*(k-1) - 1)/stride) + 1.
pub fn window_out(input: u64, k: usize, stride: usize, pad_total: usize, dil: usize, _ceil: bool) -> Result<u64, String> {
    pool_out(input, k, stride, pad_total, 0, dil, false)
}

/// Slice bounds for one axis with ONNX semantics: returns (start, count) after normalization and clamping.
pub fn slice_range(dim: i64, start: i64, end: i64, step: i64) -> (i64, i64) {
    // In i128 so that no bound, step or size the model gives can overflow; a negative dim (a size past
    // i64::MAX cast by the caller) counts as 0. Results fit i64: 0 <= s < dim and n <= dim.
    let (dim, start, end, step) = (i128::from(dim.max(0)), i128::from(start), i128::from(end), i128::from(step));
    let norm = |x: i128| if x < 0 { x + dim } else { x };
    let (mut s, mut e) = (norm(start), norm(end));
    let n = if step == 0 {
        0
    } else if step > 0 {
        s = s.clamp(0, dim);
        e = e.clamp(0, dim);
        if e > s { (e - s + step - 1) / step } else { 0 }
    } else {
        s = s.clamp(-1, dim - 1);
        e = e.clamp(-1, dim - 1);
        if s > e { (s - e + (-step) - 1) / (-step) } else { 0 }
    };
    (s as i64, n as i64)
}

impl OpSet for MirOp {
    fn kind(&self) -> &'static str {
        match self {
            MirOp::Unary(u) => u.name(),
            MirOp::Binary(b) => b.name(),
            MirOp::Where => "where",
            MirOp::Cast { .. } => "cast",
            MirOp::Bitcast { .. } => "bitcast",
            MirOp::MatMul => "matmul",
            MirOp::Reduce { op, .. } => match op {
                ReduceOp::Sum => "reduce_sum",
                ReduceOp::Prod => "reduce_prod",
                ReduceOp::Max => "reduce_max",
                ReduceOp::Min => "reduce_min",
                ReduceOp::Mean => "reduce_mean",
            },
            MirOp::ArgReduce { op, .. } => op.name(),
            MirOp::Reshape { .. } => "reshape",
            MirOp::Transpose { .. } => "transpose",
            MirOp::Expand { .. } => "expand",
            MirOp::Slice { .. } => "slice",
            MirOp::Concat { .. } => "concat",
            MirOp::Gather { .. } => "gather",
            MirOp::GatherElements { .. } => "gather_elements",
            MirOp::GatherNd { .. } => "gather_nd",
            MirOp::ScatterElements { .. } => "scatter_elements",
            MirOp::ScatterNd { .. } => "scatter_nd",
            MirOp::Pad { .. } => "pad",
            MirOp::Conv { .. } => "conv",
            MirOp::ConvTranspose { .. } => "conv_transpose",
            MirOp::ConvNhwc { .. } => "conv_nhwc",
            MirOp::Pool { kind: PoolKind::Max, .. } => "max_pool",
            MirOp::Pool { kind: PoolKind::Avg, .. } => "avg_pool",
            MirOp::PoolNhwc { kind: PoolKind::Max, .. } => "max_pool_nhwc",
            MirOp::PoolNhwc { kind: PoolKind::Avg, .. } => "avg_pool_nhwc",
            MirOp::CumSum { .. } => "cumsum",
            MirOp::TopK { .. } => "topk",
            MirOp::NonZero => "nonzero",
            MirOp::Compress { .. } => "compress",
            MirOp::Nms { .. } => "nms",
            MirOp::Unique { .. } => "unique",
            MirOp::Quantize { .. } => "quantize",
            MirOp::Dequantize { .. } => "dequantize",
            MirOp::FakeQuantize { .. } => "fake_quantize",
            MirOp::DequantMatMul => "dequant_matmul",
            MirOp::DequantGather => "dequant_gather",
            MirOp::WriteRows => "write_rows",
            MirOp::AllReduce { .. } => "all_reduce",
            MirOp::AllGather { .. } => "all_gather",
            MirOp::ReduceScatter { .. } => "reduce_scatter",
            MirOp::Send { .. } => "send",
            MirOp::Recv { .. } => "recv",
            MirOp::Loop { .. } => "loop",
            MirOp::If { .. } => "if",
        }
    }

    fn arity(&self) -> (usize, usize) {
        match self {
            MirOp::Compress { .. } => (2, 2),
            MirOp::Nms { .. } => (4, 4),
            MirOp::Binary(_) | MirOp::MatMul | MirOp::Gather { .. } | MirOp::GatherElements { .. } | MirOp::GatherNd { .. } => (2, 2),
            MirOp::DequantMatMul | MirOp::DequantGather => (2, 2),
            MirOp::Where | MirOp::ScatterElements { .. } | MirOp::ScatterNd { .. } | MirOp::WriteRows => (3, 3),
            MirOp::Quantize { .. } | MirOp::Dequantize { .. } | MirOp::FakeQuantize { .. } => (3, 3),
            MirOp::Concat { .. } => (1, usize::MAX),
            MirOp::Conv { .. } | MirOp::ConvTranspose { .. } | MirOp::ConvNhwc { .. } => (2, 3),
            MirOp::Recv { .. } => (0, 0),
            MirOp::Loop { carried, body, .. } => (2 + carried, (2 + carried).max(body[0].inputs.len())),
            MirOp::If { branches } => (1, 1 + branches[0].inputs.len()),
            _ => (1, 1),
        }
    }

    fn infer(&self, ins: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        if let MirOp::Recv { dtype, shape, .. } = self {
            if dtype.is_quantized_block() {
                return Err(format!("recv: block-quantized dtype {dtype}"));
            }
            return Ok(vec![TensorType::new(*dtype, Shape(shape.clone()))]);
        }
        match self {
            MirOp::Loop { max_trips, carried, body } => return crate::region::infer_loop(*max_trips, *carried, &body[0], ins),
            MirOp::If { branches } => return crate::region::infer_if(&branches[..], ins),
            _ => {}
        }
        let Some(&x) = ins.first() else {
            return Err(format!("{}: takes an input", self.kind()));
        };
        let one = |dtype: DType, shape: Shape| Ok(vec![TensorType::new(dtype, shape)]);
        match self {
            MirOp::Unary(u) => {
                match u {
                    UnaryOp::Not if x.dtype != DType::Bool => return Err(format!("not: needs bool, got {}", x.dtype)),
                    UnaryOp::BitNot if !x.dtype.is_int() => return Err(format!("bit_not: needs an integer dtype, got {}", x.dtype)),
                    UnaryOp::Not | UnaryOp::BitNot | UnaryOp::Abs | UnaryOp::Neg | UnaryOp::Sign | UnaryOp::Relu => {}
                    _ if !x.dtype.is_float() && !matches!(u, UnaryOp::IsNan | UnaryOp::IsInf | UnaryOp::IsPosInf | UnaryOp::IsNegInf | UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round) => {
                        return Err(format!("{}: needs a float dtype, got {}", u.name(), x.dtype))
                    }
                    _ => {}
                }
                if x.dtype.is_quantized_block() {
                    return Err(format!("{}: block-quantized input", u.name()));
                }
                one(u.out_dtype(x.dtype), x.shape.clone())
            }
            MirOp::Binary(b) => {
                let y = ins[1];
                if !matches!(b, BinaryOp::Pow) {
                    same_dtype(b.name(), x, y)?;
                }
                if b.is_logical() && x.dtype != DType::Bool {
                    return Err(format!("{}: needs bool operands, got {}", b.name(), x.dtype));
                }
                let s = broadcast(&x.shape, &y.shape)?;
                let dt = if b.is_compare() || b.is_logical() { DType::Bool } else { x.dtype };
                one(dt, s)
            }
            MirOp::Where => {
                if x.dtype != DType::Bool {
                    return Err(format!("where: condition must be bool, got {}", x.dtype));
                }
                same_dtype("where", ins[1], ins[2])?;
                let s = broadcast(&broadcast(&x.shape, &ins[1].shape)?, &ins[2].shape)?;
                one(ins[1].dtype, s)
            }
            MirOp::Cast { to } => {
                if to.is_quantized_block() || x.dtype.is_quantized_block() {
                    return Err("cast: block-quantized types are converted by dequantize ops, not cast".into());
                }
                one(*to, x.shape.clone())
            }
            MirOp::Bitcast { to } => {
                if to.size().is_none() || to.size() != x.dtype.size() {
                    return Err(format!("bitcast: {} and {to} differ in width", x.dtype));
                }
                one(*to, x.shape.clone())
            }
            MirOp::MatMul => {
                let y = ins[1];
                same_dtype("matmul", x, y)?;
                if x.shape.rank() == 0 || y.shape.rank() == 0 {
                    return Err("matmul: operands must have rank >= 1".into());
                }
                let mut a = x.shape.0.clone();
                let mut b = y.shape.0.clone();
                let (a1, b1) = (a.len() == 1, b.len() == 1);
                if a1 {
                    a.insert(0, Dim::Fixed(1));
                }
                if b1 {
                    b.push(Dim::Fixed(1));
                }
                let (m, k) = (a[a.len() - 2].clone(), a[a.len() - 1].clone());
                let (k2, n) = (b[b.len() - 2].clone(), b[b.len() - 1].clone());
                if k != k2 {
                    return Err(format!("matmul: inner dims differ ({} has {k}, {} has {k2})", x.shape, y.shape));
                }
                let batch = broadcast(&Shape(a[..a.len() - 2].to_vec()), &Shape(b[..b.len() - 2].to_vec()))?;
                let mut out = batch.0;
                if !a1 {
                    out.push(m);
                }
                if !b1 {
                    out.push(n);
                }
                one(x.dtype, Shape(out))
            }
            MirOp::Reduce { op, axes, keepdims } => {
                let r = x.shape.rank();
                let mut prev = None;
                for &a in axes {
                    check_axis(a, r)?;
                    if prev.is_some_and(|p| p >= a) {
                        return Err(format!("reduce: axes {axes:?} must be sorted and unique"));
                    }
                    prev = Some(a);
                }
                if matches!(op, ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Mean) && x.dtype == DType::Bool {
                    return Err(format!("reduce_{}: bool input", op.name()));
                }
                let mut out = Vec::new();
                for (i, d) in x.shape.0.iter().enumerate() {
                    if axes.contains(&i) {
                        if *keepdims {
                            out.push(Dim::Fixed(1));
                        }
                    } else {
                        out.push(d.clone());
                    }
                }
                one(x.dtype, Shape(out))
            }
            MirOp::ArgReduce { axis, keepdims, .. } => {
                check_axis(*axis, x.shape.rank())?;
                let mut out = x.shape.0.clone();
                if *keepdims {
                    out[*axis] = Dim::Fixed(1);
                } else {
                    out.remove(*axis);
                }
                one(DType::I64, Shape(out))
            }
            MirOp::Reshape { shape } => {
                let target = Shape(shape.clone());
                if let (Some(a), Some(b)) = (x.shape.numel(), target.numel()) {
                    if a != b {
                        return Err(format!("reshape: {} has {a} elements, target {target} has {b}", x.shape));
                    }
                } else {
                    // Symbolic: the product of fixed dims must agree once shared symbols cancel.
                    let mut sa = x.shape.symbols();
                    let mut sb = target.symbols();
                    sa.sort();
                    sb.sort();
                    let (Some(fa), Some(fb)) = (x.shape.fixed_product(), target.fixed_product()) else {
                        return Err(format!("reshape: the fixed dims of {} or {target} multiply past 2^64", x.shape));
                    };
                    if sa != sb || fa != fb {
                        return Err(format!("reshape: cannot prove {} and {target} have the same element count", x.shape));
                    }
                }
                one(x.dtype, target)
            }
            MirOp::Transpose { perm } => {
                let r = x.shape.rank();
                let mut seen = vec![false; r];
                if perm.len() != r || perm.iter().any(|&p| p >= r || std::mem::replace(&mut seen[p], true)) {
                    return Err(format!("transpose: perm {perm:?} is not a permutation of rank {r}"));
                }
                one(x.dtype, Shape(perm.iter().map(|&p| x.shape.0[p].clone()).collect()))
            }
            MirOp::Expand { shape } => {
                let target = Shape(shape.clone());
                let b = broadcast(&x.shape, &target)?;
                if b != target {
                    return Err(format!("expand: {} does not broadcast to exactly {target}", x.shape));
                }
                one(x.dtype, target)
            }
            MirOp::Slice { axes, starts, ends, steps } => {
                let n = axes.len();
                if starts.len() != n || ends.len() != n || steps.len() != n {
                    return Err("slice: axes/starts/ends/steps lengths differ".into());
                }
                let mut out = x.shape.0.clone();
                for i in 0..n {
                    check_axis(axes[i], x.shape.rank())?;
                    if steps[i] == 0 {
                        return Err("slice: step 0".into());
                    }
                    let d = &x.shape.0[axes[i]];
                    match d {
                        Dim::Fixed(dv) => {
                            let dv = i64::try_from(*dv).map_err(|_| format!("slice: axis {} of size {dv} exceeds 2^63", axes[i]))?;
                            let (_, cnt) = slice_range(dv, starts[i], ends[i], steps[i]);
                            out[axes[i]] = Dim::Fixed(cnt as u64);
                        }
                        Dim::Sym(_) => {
                            if !(starts[i] == 0 && steps[i] == 1 && ends[i] >= i64::MAX / 2) {
                                fixed(d, "slice of a symbolic dim")?;
                            }
                        }
                    }
                }
                one(x.dtype, Shape(out))
            }
            MirOp::Concat { axis } => {
                let r = x.shape.rank();
                check_axis(*axis, r)?;
                let mut total = 0u64;
                let mut sym = None;
                for t in ins {
                    same_dtype("concat", x, t)?;
                    if t.shape.rank() != r {
                        return Err(format!("concat: rank mismatch ({} vs {})", x.shape, t.shape));
                    }
                    for i in 0..r {
                        if i != *axis && t.shape.0[i] != x.shape.0[i] {
                            return Err(format!("concat: shapes {} and {} differ off axis {axis}", x.shape, t.shape));
                        }
                    }
                    match &t.shape.0[*axis] {
                        Dim::Fixed(n) => {
                            total = total.checked_add(*n).ok_or_else(|| format!("concat: sizes along axis {axis} add past 2^64"))?
                        }
                        d => sym = Some(d.clone()),
                    }
                }
                let mut out = x.shape.0.clone();
                out[*axis] = match sym {
                    Some(d) if ins.len() == 1 => d,
                    Some(d) => return Err(format!("concat along symbolic dim '{d}' (fix it with --dim {d}=N)")),
                    None => Dim::Fixed(total),
                };
                one(x.dtype, Shape(out))
            }
            MirOp::Gather { axis } => {
                let idx = ins[1];
                check_axis(*axis, x.shape.rank())?;
                if !idx.dtype.is_int() {
                    return Err(format!("gather: indices must be integers, got {}", idx.dtype));
                }
                let mut out = x.shape.0[..*axis].to_vec();
                out.extend(idx.shape.0.iter().cloned());
                out.extend(x.shape.0[axis + 1..].iter().cloned());
                one(x.dtype, Shape(out))
            }
            MirOp::GatherElements { axis } => {
                let idx = ins[1];
                check_axis(*axis, x.shape.rank())?;
                if idx.shape.rank() != x.shape.rank() || !idx.dtype.is_int() {
                    return Err("gather_elements: indices must be integers of the data's rank".into());
                }
                one(x.dtype, idx.shape.clone())
            }
            MirOp::GatherNd { batch_dims } => {
                let idx = ins[1];
                let (r, q) = (x.shape.rank(), idx.shape.rank());
                if q == 0 || !idx.dtype.is_int() {
                    return Err("gather_nd: indices must be integers of rank >= 1".into());
                }
                let last = fixed(&idx.shape.0[q - 1], "gather_nd index depth")? as usize;
                if *batch_dims >= q || batch_dims + last > r {
                    return Err(format!("gather_nd: index depth {last} with batch_dims {batch_dims} exceeds data rank {r}"));
                }
                let mut out = idx.shape.0[..q - 1].to_vec();
                out.extend(x.shape.0[batch_dims + last..].iter().cloned());
                one(x.dtype, Shape(out))
            }
            MirOp::ScatterElements { axis, .. } => {
                check_axis(*axis, x.shape.rank())?;
                same_dtype("scatter_elements", x, ins[2])?;
                if ins[1].shape != ins[2].shape || !ins[1].dtype.is_int() {
                    return Err("scatter_elements: indices (integers) and updates must have the same shape".into());
                }
                one(x.dtype, x.shape.clone())
            }
            MirOp::ScatterNd { .. } => {
                same_dtype("scatter_nd", x, ins[2])?;
                if !ins[1].dtype.is_int() {
                    return Err("scatter_nd: indices must be integers".into());
                }
                one(x.dtype, x.shape.clone())
            }
            MirOp::Pad { pads, .. } => {
                let r = x.shape.rank();
                if pads.len() != 2 * r {
                    return Err(format!("pad: {} pads for rank {r}", pads.len()));
                }
                let mut out = Vec::with_capacity(r);
                for i in 0..r {
                    if pads[i] == 0 && pads[i + r] == 0 {
                        out.push(x.shape.0[i].clone());
                        continue;
                    }
                    let d = i128::from(fixed(&x.shape.0[i], "pad")?) + i128::from(pads[i]) + i128::from(pads[i + r]);
                    if d < 0 {
                        return Err(format!("pad: negative size on axis {i}"));
                    }
                    let d = u64::try_from(d).map_err(|_| format!("pad: size {d} on axis {i} exceeds 2^64"))?;
                    out.push(Dim::Fixed(d));
                }
                one(x.dtype, Shape(out))
            }
            MirOp::Conv { strides, pads, dilations, groups } | MirOp::ConvTranspose { strides, pads, dilations, groups, .. } => {
                let w = ins[1];
                same_dtype(self.kind(), x, w)?;
                let r = x.shape.rank();
                if r < 3 || w.shape.rank() != r {
                    return Err(format!("{}: input {} and weight {} must both be [N,C,spatial...]", self.kind(), x.shape, w.shape));
                }
                let sp = r - 2;
                if strides.len() != sp || dilations.len() != sp || pads.len() != 2 * sp || *groups == 0 {
                    return Err(format!("{}: strides/dilations need {sp} entries, pads {}", self.kind(), 2 * sp));
                }
                let c = fixed(&x.shape.0[1], "conv channels")?;
                let wd: Vec<u64> = w.shape.0.iter().map(|d| fixed(d, "conv weight")).collect::<Result<_, _>>()?;
                let g = *groups as u64;
                let transpose = matches!(self, MirOp::ConvTranspose { .. });
                let m = if transpose {
                    if wd[0] != c || c % g != 0 {
                        return Err(format!("conv_transpose: weight {} does not match {c} input channels", w.shape));
                    }
                    wd[1].checked_mul(g).ok_or_else(|| format!("conv_transpose: {} output channels per group times {g} groups overflows", wd[1]))?
                } else {
                    if wd[1].checked_mul(g) != Some(c) || wd[0] % g != 0 {
                        return Err(format!("conv: weight {} with {g} groups does not match {c} input channels", w.shape));
                    }
                    wd[0]
                };
                if ins.len() == 3 && (ins[2].shape.as_fixed() != Some(vec![m as usize]) || ins[2].dtype != x.dtype) {
                    return Err(format!("{}: bias must be {}[{m}], got {}", self.kind(), x.dtype, ins[2]));
                }
                let mut out = vec![x.shape.0[0].clone(), Dim::Fixed(m)];
                for i in 0..sp {
                    let inp = fixed(&x.shape.0[i + 2], "conv spatial")?;
                    let k = wd[i + 2] as usize;
                    if transpose {
                        let op = match self {
                            MirOp::ConvTranspose { output_padding, .. } => output_padding.get(i).copied().unwrap_or(0) as i64,
                            _ => 0,
                        };
                        // stride*(in-1) + output_padding + dil*(k-1) + 1 - pads, in i128: every term is at most
                        // 2^64, so no step overflows; a result past u64 is the model's error.
                        let w = |v: usize| v as i128;
                        let o = w(strides[i]) * (i128::from(inp) - 1) + i128::from(op) + (w(k) - 1) * w(dilations[i]) + 1
                            - w(pads[i])
                            - w(pads[i + sp]);
                        if o <= 0 {
                            return Err("conv_transpose: empty output".into());
                        }
                        let o = u64::try_from(o).map_err(|_| format!("conv_transpose: output size {o} on spatial axis {i} exceeds 2^64"))?;
                        out.push(Dim::Fixed(o));
                    } else {
                        let pad_total = pads[i].checked_add(pads[i + sp]).ok_or_else(|| format!("conv: pads {} + {} overflow", pads[i], pads[i + sp]))?;
                        out.push(Dim::Fixed(window_out(inp, k, strides[i], pad_total, dilations[i], false)?));
                    }
                }
                one(x.dtype, Shape(out))
            }
            MirOp::ConvNhwc { strides, pads, dilations, groups } => channels_last(x, "conv_nhwc", |xc| {
                let mut cins: Vec<&TensorType> = vec![xc];
                cins.extend(&ins[1..]);
                MirOp::Conv { strides: strides.clone(), pads: pads.clone(), dilations: dilations.clone(), groups: *groups }.infer(&cins)
            }),
            MirOp::PoolNhwc { kind, kernel, strides, pads, dilations, ceil_mode, count_include_pad } => channels_last(x, "pool_nhwc", |xc| {
                MirOp::Pool { kind: *kind, kernel: kernel.clone(), strides: strides.clone(), pads: pads.clone(), dilations: dilations.clone(), ceil_mode: *ceil_mode, count_include_pad: *count_include_pad }.infer(&[xc])
            }),
            MirOp::Pool { kernel, strides, pads, dilations, ceil_mode, .. } => {
                let r = x.shape.rank();
                let sp = kernel.len();
                if r != sp + 2 || strides.len() != sp || dilations.len() != sp || pads.len() != 2 * sp {
                    return Err(format!("pool: kernel rank {sp} does not fit input {}", x.shape));
                }
                let mut out = x.shape.0[..2].to_vec();
                for i in 0..sp {
                    let inp = fixed(&x.shape.0[i + 2], "pool spatial")?;
                    out.push(Dim::Fixed(pool_out(inp, kernel[i], strides[i], pads[i], pads[i + sp], dilations[i], *ceil_mode)?));
                }
                one(x.dtype, Shape(out))
            }
            MirOp::CumSum { axis, .. } => {
                check_axis(*axis, x.shape.rank())?;
                one(x.dtype, x.shape.clone())
            }
            MirOp::TopK { axis, k, .. } => {
                check_axis(*axis, x.shape.rank())?;
                let d = fixed(&x.shape.0[*axis], "topk axis")?;
                if *k as u64 > d {
                    return Err(format!("topk: k={k} exceeds axis size {d}"));
                }
                let mut s = x.shape.0.clone();
                s[*axis] = Dim::Fixed(*k as u64);
                Ok(vec![TensorType::new(x.dtype, Shape(s.clone())), TensorType::new(DType::I64, Shape(s))])
            }
            MirOp::NonZero => {
                let n = x.shape.numel().ok_or_else(|| format!("nonzero needs a static shape, got {}", x.shape))?;
                if x.shape.rank() == 0 {
                    return Err("nonzero: rank-0 input".into());
                }
                one(DType::I64, Shape(vec![Dim::Fixed(x.shape.rank() as u64), Dim::Fixed(n as u64)]))
            }
            MirOp::Compress { axis } => {
                check_axis(*axis, x.shape.rank())?;
                let c = ins[1];
                let len = fixed(&x.shape.0[*axis], "compress axis")?;
                let n = c.shape.numel().ok_or("compress: the condition needs a static shape")?;
                if c.dtype != DType::Bool || c.shape.rank() != 1 || n as u64 > len {
                    return Err(format!("compress: condition must be bool[n <= {len}], got {c}"));
                }
                one(x.dtype, x.shape.clone())
            }
            MirOp::Nms { max_per_class, .. } => {
                let (s, it, st) = (ins[1], ins[2], ins[3]);
                let (Some(b), Some(sc)) = (x.shape.as_fixed(), s.shape.as_fixed()) else {
                    return Err(format!("nms: boxes {} and scores {} need static shapes", x.shape, s.shape));
                };
                if b.len() != 3 || b[2] != 4 || sc.len() != 3 || sc[0] != b[0] || sc[2] != b[1] {
                    return Err(format!("nms: boxes must be [B,N,4] and scores [B,C,N], got {} and {}", x.shape, s.shape));
                }
                if x.dtype != DType::F32 || s.dtype != DType::F32 || it.dtype != DType::F32 || st.dtype != DType::F32 || it.shape.numel() != Some(1) || st.shape.numel() != Some(1) {
                    return Err(format!("nms: needs f32 boxes, scores and scalar thresholds, got {x}, {s}, {it}, {st}"));
                }
                let bound = (b[0] as u64).checked_mul(sc[1] as u64).and_then(|v| v.checked_mul((*max_per_class).min(b[1]) as u64));
                let bound = bound.ok_or("nms: the output bound overflows")?;
                Ok(vec![TensorType::new(DType::I64, Shape(vec![Dim::Fixed(bound), Dim::Fixed(3)])), TensorType::new(DType::I64, Shape(vec![]))])
            }
            MirOp::Unique { axis, .. } => {
                let (y, len) = match axis {
                    None => {
                        let n = x.shape.numel().ok_or_else(|| format!("unique needs a static shape, got {}", x.shape))?;
                        (Shape(vec![Dim::Fixed(n as u64)]), n as u64)
                    }
                    Some(a) => {
                        check_axis(*a, x.shape.rank())?;
                        (x.shape.clone(), fixed(&x.shape.0[*a], "unique axis")?)
                    }
                };
                let i = |n: u64| TensorType::new(DType::I64, Shape(vec![Dim::Fixed(n)]));
                Ok(vec![TensorType::new(x.dtype, y), i(len), i(len), i(len)])
            }
            MirOp::Quantize { axis } | MirOp::Dequantize { axis } | MirOp::FakeQuantize { axis } => {
                let (scale, zp) = (ins[1], ins[2]);
                let k = self.kind();
                let deq = matches!(self, MirOp::Dequantize { .. });
                if !scale.dtype.is_float() || !zp.dtype.is_int() || (deq && x.dtype != zp.dtype) || (!deq && !x.dtype.is_float()) {
                    return Err(format!("{k}: needs {} x, float scale and an integer zero point of the same shape (got {x}, {scale}, {zp})", if deq { "an integer" } else { "a float" }));
                }
                if scale.shape != zp.shape {
                    return Err(format!("{k}: scale {} and zero point {} shapes differ", scale.shape, zp.shape));
                }
                match scale.shape.numel() {
                    Some(1) => {}
                    _ if scale.shape == x.shape => {}
                    _ => {
                        check_axis(*axis, x.shape.rank())?;
                        if scale.shape.rank() != 1 || scale.shape.0[0] != x.shape.0[*axis] {
                            return Err(format!("{k}: per-channel scale {} must be [{}] (axis {axis} of {})", scale.shape, x.shape.0[*axis], x.shape));
                        }
                    }
                }
                let dt = match self {
                    MirOp::Quantize { .. } => zp.dtype,
                    MirOp::Dequantize { .. } => scale.dtype,
                    _ => x.dtype,
                };
                one(dt, x.shape.clone())
            }
            MirOp::DequantMatMul => {
                let w = ins[1];
                if x.dtype != DType::F32 || x.shape.rank() == 0 {
                    return Err(format!("dequant_matmul: input must be f32 of rank >= 1, got {x}"));
                }
                let (n, k) = block_rows("dequant_matmul", w)?;
                if x.shape.0[x.shape.rank() - 1] != k {
                    return Err(format!("dequant_matmul: input {x} has {} features, weight {w} has {k}", x.shape.0[x.shape.rank() - 1]));
                }
                let mut s = x.shape.0.clone();
                *s.last_mut().expect("rank >= 1") = n;
                one(DType::F32, Shape(s))
            }
            MirOp::DequantGather => {
                let idx = ins[1];
                let (_, c) = block_rows("dequant_gather", x)?;
                if !idx.dtype.is_int() {
                    return Err(format!("dequant_gather: indices must be integers, got {idx}"));
                }
                let mut s = idx.shape.0.clone();
                s.push(c);
                one(DType::F32, Shape(s))
            }
            MirOp::WriteRows => {
                let (rows, pos) = (ins[1], ins[2]);
                let (cr, rr) = (x.shape.rank(), rows.shape.rank());
                if cr == 0 || rr != cr || rows.dtype != x.dtype {
                    return Err(format!("write_rows: rows {rows} must have the cache {x}'s dtype and rank"));
                }
                if rows.shape.0[1..] != x.shape.0[1..] {
                    return Err(format!("write_rows: rows {rows} and cache {x} differ after the first axis"));
                }
                if !pos.dtype.is_int() || pos.shape.rank() != 1 || pos.shape.0[0] != rows.shape.0[0] {
                    return Err(format!("write_rows: positions {pos} must be integers, one per row of {rows}"));
                }
                Ok(vec![x.clone()])
            }
            MirOp::AllReduce { ranks } | MirOp::AllGather { ranks, .. } | MirOp::ReduceScatter { ranks, .. } if *ranks == 0 => {
                Err(format!("{}: ranks must be at least 1", self.kind()))
            }
            MirOp::AllReduce { .. } | MirOp::Send { .. } => {
                if x.dtype.is_quantized_block() {
                    return Err(format!("{}: block-quantized input", self.kind()));
                }
                Ok(vec![x.clone()])
            }
            MirOp::AllGather { axis, ranks } | MirOp::ReduceScatter { axis, ranks } => {
                check_axis(*axis, x.shape.rank())?;
                let d = fixed(&x.shape.0[*axis], self.kind())?;
                let gather = matches!(self, MirOp::AllGather { .. });
                let n = *ranks as u64;
                let e = if gather {
                    d.checked_mul(n).ok_or_else(|| format!("all_gather: {d} x {n} overflows"))?
                } else if d % n != 0 {
                    return Err(format!("reduce_scatter: axis {axis} of {} is not divisible by {n} ranks", x.shape));
                } else {
                    d / n
                };
                let mut s = x.shape.0.clone();
                s[*axis] = Dim::Fixed(e);
                one(x.dtype, Shape(s))
            }
            MirOp::Recv { .. } | MirOp::Loop { .. } | MirOp::If { .. } => unreachable!("handled above"),
        }
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        match self {
            MirOp::Unary(_) | MirOp::Binary(_) | MirOp::Where | MirOp::MatMul | MirOp::DequantMatMul | MirOp::DequantGather | MirOp::WriteRows | MirOp::NonZero => vec![],
            MirOp::Compress { axis } => vec![("axis", Attr::Int(*axis as i64))],
            MirOp::Nms { center_point_box, max_per_class } => {
                vec![("center_point_box", Attr::Bool(*center_point_box)), ("max_per_class", Attr::Int(*max_per_class as i64))]
            }
            MirOp::Unique { axis, sorted } => vec![("axis", Attr::Int(axis.map_or(-1, |a| a as i64))), ("sorted", Attr::Bool(*sorted))],
            MirOp::Cast { to } | MirOp::Bitcast { to } => vec![("to", Attr::DType(*to))],
            MirOp::Reduce { axes, keepdims, .. } => vec![("axes", usizes_attr(axes)), ("keepdims", Attr::Bool(*keepdims))],
            MirOp::ArgReduce { axis, keepdims, select_last, .. } => vec![
                ("axis", Attr::Int(*axis as i64)),
                ("keepdims", Attr::Bool(*keepdims)),
                ("select_last", Attr::Bool(*select_last)),
            ],
            MirOp::Reshape { shape } => vec![("shape", dims_attr(shape))],
            MirOp::Transpose { perm } => vec![("perm", usizes_attr(perm))],
            MirOp::Expand { shape } => vec![("shape", dims_attr(shape))],
            MirOp::Slice { axes, starts, ends, steps } => vec![
                ("axes", usizes_attr(axes)),
                ("starts", Attr::Ints(starts.clone())),
                ("ends", Attr::Ints(ends.clone())),
                ("steps", Attr::Ints(steps.clone())),
            ],
            MirOp::Concat { axis } | MirOp::Gather { axis } | MirOp::GatherElements { axis } => vec![("axis", Attr::Int(*axis as i64))],
            MirOp::GatherNd { batch_dims } => vec![("batch_dims", Attr::Int(*batch_dims as i64))],
            MirOp::ScatterElements { axis, reduction } => {
                vec![("axis", Attr::Int(*axis as i64)), ("reduction", Attr::Str(reduction.name().into()))]
            }
            MirOp::ScatterNd { reduction } => vec![("reduction", Attr::Str(reduction.name().into()))],
            MirOp::Pad { pads, mode, value } => {
                vec![("pads", Attr::Ints(pads.clone())), ("mode", Attr::Str(mode.name().into())), ("value", Attr::Float(*value))]
            }
            MirOp::Conv { strides, pads, dilations, groups } => vec![
                ("strides", usizes_attr(strides)),
                ("pads", usizes_attr(pads)),
                ("dilations", usizes_attr(dilations)),
                ("groups", Attr::Int(*groups as i64)),
            ],
            MirOp::ConvNhwc { strides, pads, dilations, groups } => vec![
                ("strides", usizes_attr(strides)),
                ("pads", usizes_attr(pads)),
                ("dilations", usizes_attr(dilations)),
                ("groups", Attr::Int(*groups as i64)),
            ],
            MirOp::ConvTranspose { strides, pads, dilations, groups, output_padding } => vec![
                ("strides", usizes_attr(strides)),
                ("pads", usizes_attr(pads)),
                ("dilations", usizes_attr(dilations)),
                ("groups", Attr::Int(*groups as i64)),
                ("output_padding", usizes_attr(output_padding)),
            ],
            MirOp::Pool { kernel, strides, pads, dilations, ceil_mode, count_include_pad, .. } | MirOp::PoolNhwc { kernel, strides, pads, dilations, ceil_mode, count_include_pad, .. } => vec![
                ("kernel", usizes_attr(kernel)),
                ("strides", usizes_attr(strides)),
                ("pads", usizes_attr(pads)),
                ("dilations", usizes_attr(dilations)),
                ("ceil_mode", Attr::Bool(*ceil_mode)),
                ("count_include_pad", Attr::Bool(*count_include_pad)),
            ],
            MirOp::CumSum { axis, exclusive, reverse } => vec![
                ("axis", Attr::Int(*axis as i64)),
                ("exclusive", Attr::Bool(*exclusive)),
                ("reverse", Attr::Bool(*reverse)),
            ],
            MirOp::TopK { axis, k, largest } => {
                vec![("axis", Attr::Int(*axis as i64)), ("k", Attr::Int(*k as i64)), ("largest", Attr::Bool(*largest))]
            }
            MirOp::Quantize { axis } | MirOp::Dequantize { axis } | MirOp::FakeQuantize { axis } => vec![("axis", Attr::Int(*axis as i64))],
            MirOp::AllReduce { ranks } => vec![("ranks", Attr::Int(*ranks as i64))],
            MirOp::AllGather { axis, ranks } | MirOp::ReduceScatter { axis, ranks } => {
                vec![("axis", Attr::Int(*axis as i64)), ("ranks", Attr::Int(*ranks as i64))]
            }
            MirOp::Send { peer } => vec![("peer", Attr::Int(*peer as i64))],
            MirOp::Recv { peer, dtype, shape } => vec![("peer", Attr::Int(*peer as i64)), ("dtype", Attr::DType(*dtype)), ("shape", dims_attr(shape))],
            MirOp::Loop { max_trips, carried, .. } => crate::region::loop_attrs(*max_trips, *carried),
            MirOp::If { .. } => vec![],
        }
    }

    fn from_parts(kind: &str, attrs: &[(String, Attr)]) -> Result<Self, String> {
        let a = Attrs(attrs);
        if let Some(u) = UnaryOp::parse(kind) {
            return Ok(MirOp::Unary(u));
        }
        if let Some(b) = BinaryOp::parse(kind) {
            return Ok(MirOp::Binary(b));
        }
        let red = |s: String| ScatterRed::parse(&s).ok_or_else(|| format!("unknown reduction '{s}'"));
        Ok(match kind {
            "where" => MirOp::Where,
            "matmul" => MirOp::MatMul,
            "cast" => MirOp::Cast { to: a.dtype("to")? },
            "bitcast" => MirOp::Bitcast { to: a.dtype("to")? },
            k if k.starts_with("reduce_") => MirOp::Reduce {
                op: ReduceOp::parse(&k[7..]).ok_or_else(|| format!("unknown reduction '{k}'"))?,
                axes: a.usizes("axes")?,
                keepdims: a.bool("keepdims")?,
            },
            "argmax" | "argmin" => MirOp::ArgReduce {
                op: ArgOp::parse(kind).unwrap(),
                axis: a.usize("axis")?,
                keepdims: a.bool("keepdims")?,
                select_last: a.bool("select_last")?,
            },
            "reshape" => MirOp::Reshape { shape: a.dims("shape")? },
            "transpose" => MirOp::Transpose { perm: a.usizes("perm")? },
            "expand" => MirOp::Expand { shape: a.dims("shape")? },
            "slice" => MirOp::Slice { axes: a.usizes("axes")?, starts: a.ints("starts")?, ends: a.ints("ends")?, steps: a.ints("steps")? },
            "concat" => MirOp::Concat { axis: a.usize("axis")? },
            "gather" => MirOp::Gather { axis: a.usize("axis")? },
            "gather_elements" => MirOp::GatherElements { axis: a.usize("axis")? },
            "gather_nd" => MirOp::GatherNd { batch_dims: a.usize("batch_dims")? },
            "scatter_elements" => MirOp::ScatterElements { axis: a.usize("axis")?, reduction: red(a.str("reduction")?)? },
            "scatter_nd" => MirOp::ScatterNd { reduction: red(a.str("reduction")?)? },
            "pad" => MirOp::Pad {
                pads: a.ints("pads")?,
                mode: PadMode::parse(&a.str("mode")?).ok_or("unknown pad mode")?,
                value: a.float("value")?,
            },
            "conv" => MirOp::Conv { strides: a.usizes("strides")?, pads: a.usizes("pads")?, dilations: a.usizes("dilations")?, groups: a.usize("groups")? },
            "conv_nhwc" => MirOp::ConvNhwc { strides: a.usizes("strides")?, pads: a.usizes("pads")?, dilations: a.usizes("dilations")?, groups: a.usize("groups")? },
            "conv_transpose" => MirOp::ConvTranspose {
                strides: a.usizes("strides")?,
                pads: a.usizes("pads")?,
                dilations: a.usizes("dilations")?,
                groups: a.usize("groups")?,
                output_padding: a.usizes("output_padding")?,
            },
            "max_pool" | "avg_pool" | "max_pool_nhwc" | "avg_pool_nhwc" => {
                let pk = if kind.starts_with("max") { PoolKind::Max } else { PoolKind::Avg };
                let (kernel, strides, pads, dilations) = (a.usizes("kernel")?, a.usizes("strides")?, a.usizes("pads")?, a.usizes("dilations")?);
                let (ceil_mode, count_include_pad) = (a.bool("ceil_mode")?, a.bool("count_include_pad")?);
                if kind.ends_with("_nhwc") {
                    MirOp::PoolNhwc { kind: pk, kernel, strides, pads, dilations, ceil_mode, count_include_pad }
                } else {
                    MirOp::Pool { kind: pk, kernel, strides, pads, dilations, ceil_mode, count_include_pad }
                }
            }
            "cumsum" => MirOp::CumSum { axis: a.usize("axis")?, exclusive: a.bool("exclusive")?, reverse: a.bool("reverse")? },
            "topk" => MirOp::TopK { axis: a.usize("axis")?, k: a.usize("k")?, largest: a.bool("largest")? },
            "nonzero" => MirOp::NonZero,
            "compress" => MirOp::Compress { axis: a.usize("axis")? },
            "nms" => MirOp::Nms { center_point_box: a.bool("center_point_box")?, max_per_class: a.usize("max_per_class")? },
            "unique" => MirOp::Unique {
                axis: match a.int("axis")? {
                    -1 => None,
                    v => Some(usize::try_from(v).map_err(|_| format!("unique: axis {v}"))?),
                },
                sorted: a.bool("sorted")?,
            },
            "quantize" => MirOp::Quantize { axis: a.usize("axis")? },
            "dequantize" => MirOp::Dequantize { axis: a.usize("axis")? },
            "fake_quantize" => MirOp::FakeQuantize { axis: a.usize("axis")? },
            "dequant_matmul" => MirOp::DequantMatMul,
            "dequant_gather" => MirOp::DequantGather,
            "write_rows" => MirOp::WriteRows,
            "all_reduce" => MirOp::AllReduce { ranks: a.usize("ranks")? },
            "all_gather" => MirOp::AllGather { axis: a.usize("axis")?, ranks: a.usize("ranks")? },
            "reduce_scatter" => MirOp::ReduceScatter { axis: a.usize("axis")?, ranks: a.usize("ranks")? },
            "send" => MirOp::Send { peer: a.usize("peer")? },
            "recv" => MirOp::Recv { peer: a.usize("peer")?, dtype: a.dtype("dtype")?, shape: a.dims("shape")? },
            "loop" => {
                let (max_trips, carried) = crate::region::loop_from_attrs(attrs)?;
                MirOp::Loop { max_trips, carried, body: Box::new([Graph::new()]) }
            }
            "if" => MirOp::If { branches: Box::new([Graph::new(), Graph::new()]) },
            _ => return Err(format!("unknown MIR op '{kind}'")),
        })
    }

    fn regions(&self) -> &[Graph<MirOp>] {
        match self {
            MirOp::Loop { body, .. } => &body[..],
            MirOp::If { branches } => &branches[..],
            _ => &[],
        }
    }

    fn set_regions(&mut self, regions: Vec<Graph<MirOp>>) -> Result<(), String> {
        let kind = self.kind();
        match self {
            MirOp::Loop { body, .. } => crate::region::fill(kind, &mut body[..], regions),
            MirOp::If { branches } => crate::region::fill(kind, &mut branches[..], regions),
            _ if regions.is_empty() => Ok(()),
            _ => Err(format!("{kind} owns no regions, got {}", regions.len())),
        }
    }
}

/// The type of a channels-last op (`conv_nhwc`, `*_pool_nhwc`): its NCHW twin's (`nchw`, given x's type
/// with the channels moved second) with the channels moved last.
fn channels_last(x: &TensorType, name: &str, nchw: impl FnOnce(&TensorType) -> Result<Vec<TensorType>, String>) -> Result<Vec<TensorType>, String> {
    let r = x.shape.rank();
    if r < 3 {
        return Err(format!("{name}: input {} must be [N,spatial...,C]", x.shape));
    }
    let mut first = x.shape.0.clone();
    let c = first.remove(r - 1);
    first.insert(1, c);
    let mut y = nchw(&TensorType::new(x.dtype, Shape(first)))?.remove(0);
    let m = y.shape.0.remove(1);
    y.shape.0.push(m);
    Ok(vec![y])
}

/// Pool output size along one axis (ONNX MaxPool/AveragePool, including ceil mode's rule that the last
/// window must start inside the input or the left padding).
pub fn pool_out(input: u64, k: usize, stride: usize, pad_begin: usize, pad_end: usize, dil: usize, ceil: bool) -> Result<u64, String> {
    if k == 0 || dil == 0 || stride == 0 {
        return Err(format!("pool kernel {k}, stride {stride}, dilation {dil}: each must be at least 1"));
    }
    // Checked: the sizes are the model's word, up to 2^64.
    let eff = (dil as u64).checked_mul(k as u64 - 1).and_then(|e| e.checked_add(1));
    let padded = input.checked_add(pad_begin as u64).and_then(|p| p.checked_add(pad_end as u64));
    let (Some(eff), Some(padded)) = (eff, padded) else {
        return Err(format!("pool kernel {k} with dilation {dil} and pads {pad_begin}, {pad_end} on an input of {input} overflows"));
    };
    if padded < eff {
        return Err(format!("pool window {eff} larger than padded input {padded}"));
    }
    let span = padded - eff;
    let s = stride as u64;
    let mut out = if ceil { span.div_ceil(s) + 1 } else { span / s + 1 };
    if ceil && (out - 1).saturating_mul(s) >= input + pad_begin as u64 {
        out -= 1;
    }
    Ok(out)
}

/// All MIR op kinds, for claim sets and coverage tables.
pub fn all_mir_kinds() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = UnaryOp::ALL.iter().map(|u| u.name()).collect();
    v.extend(BinaryOp::ALL.iter().map(|b| b.name()));
    v.extend([
        "where", "cast", "bitcast", "matmul", "reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_mean", "argmax", "argmin",
        "reshape", "transpose", "expand", "slice", "concat", "gather", "gather_elements", "gather_nd", "scatter_elements",
        "scatter_nd", "pad", "conv", "conv_transpose", "max_pool", "avg_pool", "cumsum", "topk", "nonzero", "compress", "nms", "unique",
        "quantize", "dequantize", "fake_quantize", "dequant_matmul", "dequant_gather", "write_rows", "all_reduce", "all_gather", "reduce_scatter",
        "send", "recv", "loop", "if",
    ]);
    v
}
