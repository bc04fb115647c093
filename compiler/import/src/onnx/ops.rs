//! Per-op translations of ONNX nodes into HIR: block ops where HIR has one, MIR primitive
//! compositions otherwise. Compile-time operands (shapes, axes, pads, k …) come from constants.

use super::proto::NodeProto;
use super::{dtype_from_onnx, tensor_from_proto, Attrs, Ctx};
use rlx_ir::{
    broadcast, ArgOp, BinaryOp, ConstData, DType, Dim, HirOp, MirOp, PadMode, PoolKind, ReduceOp, ScatterRed, Shape, UnaryOp,
    ValueId,
};

type R = Result<Vec<ValueId>, String>;

const OPS: &[&str] = &[
    "Abs", "Acos", "Attention", "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", "LpNormalization", "Acosh", "Add", "And", "ArgMax", "ArgMin", "Asin", "Asinh", "Atan", "Atanh", "AveragePool",
    "BatchNormalization", "BitShift", "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "Cast", "CastLike", "Ceil",
    "Celu", "Clip", "Concat", "Constant", "ConstantOfShape", "Conv", "ConvInteger", "ConvTranspose", "Cos", "Cosh", "CumSum",
    "DepthToSpace", "DequantizeLinear", "Div", "Dropout", "Einsum", "Elu", "Equal", "Erf", "Exp", "Expand", "EyeLike", "Flatten", "Floor",
    "Gather", "GatherElements", "GatherND", "Gelu", "Gemm", "GlobalAveragePool", "GlobalMaxPool", "Greater",
    "GreaterOrEqual", "GroupNormalization", "HardSigmoid", "HardSwish", "Hardmax", "Identity", "InstanceNormalization",
    "IsInf", "IsNaN", "LRN", "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax", "LpPool",
    "MatMul", "MatMulInteger", "Max", "MaxPool", "Mean", "MeanVarianceNormalization", "Min", "Mish", "Mod", "Mul", "Neg", "Not",
    "OneHot", "Or", "PRelu", "Pad", "Pow", "QLinearConv", "QLinearMatMul", "QuantizeLinear", "RMSNormalization", "Range", "Reciprocal", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum",
    "ReduceSumSquare", "Relu", "Reshape", "Round", "Scatter", "ScatterElements", "ScatterND", "Selu", "Shape", "Shrink",
    "Sigmoid", "Sign", "Sin", "Sinh", "Size", "Slice", "Softmax", "Softplus", "Softsign", "SpaceToDepth", "Split",
    "Sqrt", "Squeeze", "Sub", "Sum", "Swish", "Tan", "Tanh", "ThresholdedRelu", "Tile", "TopK", "Transpose", "Trilu",
    "Unsqueeze", "Where", "Xor",
];

/// Whether the importer translates this op (default ONNX domain only).
pub fn is_onnx_supported(op_type: &str, domain: &str) -> bool {
    (domain.is_empty() || domain == "ai.onnx") && OPS.contains(&op_type)
}

/// Every ONNX op type the importer translates, sorted.
pub fn supported_onnx_ops() -> Vec<&'static str> {
    let mut v = OPS.to_vec();
    v.sort();
    v
}

pub(crate) fn norm_axis(a: i64, r: usize) -> Result<usize, String> {
    let x = if a < 0 { a + r as i64 } else { a };
    if x < 0 || x >= r as i64 {
        return Err(format!("axis {a} out of range for rank {r}"));
    }
    Ok(x as usize)
}

fn norm_axes(v: &[i64], r: usize) -> Result<Vec<usize>, String> {
    let mut out = v.iter().map(|&a| norm_axis(a, r)).collect::<Result<Vec<_>, _>>()?;
    out.sort();
    out.dedup();
    Ok(out)
}

/// Product of dims: fixed if all fixed; the symbol itself if exactly one symbol and the rest multiply to 1.
fn dim_prod(ds: &[Dim]) -> Option<Dim> {
    let mut f = 1u64;
    let mut sym = None;
    for d in ds {
        match d {
            Dim::Fixed(n) => f = f.checked_mul(*n)?,
            Dim::Sym(_) if sym.is_none() => sym = Some(d.clone()),
            _ => return None,
        }
    }
    match sym {
        None => Some(Dim::Fixed(f)),
        Some(s) if f == 1 => Some(s),
        _ => None,
    }
}

impl<'a> Ctx<'a> {
    fn bin(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> Result<ValueId, String> {
        self.prim(MirOp::Binary(op), &[a, b])
    }
    fn un(&mut self, op: UnaryOp, a: ValueId) -> Result<ValueId, String> {
        self.prim(MirOp::Unary(op), &[a])
    }
    /// A scalar constant with `like`'s dtype.
    fn sc(&mut self, like: ValueId, v: f64) -> ValueId {
        let dt = self.dtype(like);
        self.scalar(dt, v)
    }
    fn mul_sc(&mut self, x: ValueId, v: f64) -> Result<ValueId, String> {
        let c = self.sc(x, v);
        self.bin(BinaryOp::Mul, x, c)
    }
    fn add_sc(&mut self, x: ValueId, v: f64) -> Result<ValueId, String> {
        let c = self.sc(x, v);
        self.bin(BinaryOp::Add, x, c)
    }
    fn reshape(&mut self, x: ValueId, shape: Vec<Dim>) -> Result<ValueId, String> {
        if self.dims(x) == shape {
            return Ok(x);
        }
        self.prim(MirOp::Reshape { shape }, &[x])
    }
    fn reshape_u(&mut self, x: ValueId, shape: &[usize]) -> Result<ValueId, String> {
        self.reshape(x, shape.iter().map(|&d| Dim::Fixed(d as u64)).collect())
    }
    fn transpose(&mut self, x: ValueId, perm: Vec<usize>) -> Result<ValueId, String> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x);
        }
        self.prim(MirOp::Transpose { perm }, &[x])
    }
    fn cast(&mut self, x: ValueId, to: DType) -> Result<ValueId, String> {
        if self.dtype(x) == to {
            return Ok(x);
        }
        self.prim(MirOp::Cast { to }, &[x])
    }
    fn reduce(&mut self, op: ReduceOp, x: ValueId, axes: Vec<usize>, keepdims: bool) -> Result<ValueId, String> {
        self.prim(MirOp::Reduce { op, axes, keepdims }, &[x])
    }
    /// Inserts size-1 dims at `axes` (positions in the output).
    fn unsqueeze(&mut self, x: ValueId, axes: &[usize]) -> Result<ValueId, String> {
        let mut d = self.dims(x);
        let mut ax = axes.to_vec();
        ax.sort();
        for &a in &ax {
            if a > d.len() {
                return Err(format!("unsqueeze axis {a} out of range"));
            }
            d.insert(a, Dim::Fixed(1));
        }
        self.reshape(x, d)
    }
    /// Repeats each element of `x` `block` times along `axis` and keeps the first `len`: [.., nb, ..] →
    /// [.., len, ..] (blocked quantization's scales at every element of their block).
    fn repeat_blocks(&mut self, x: ValueId, axis: usize, block: usize, len: usize) -> Result<ValueId, String> {
        let d = self.fixed_dims(x, "block scale")?;
        let u = self.unsqueeze(x, &[axis + 1])?;
        let mut wide: Vec<Dim> = self.dims(u);
        wide[axis + 1] = Dim::Fixed(block as u64);
        let e = self.prim(MirOp::Expand { shape: wide }, &[u])?;
        let mut flat = d.clone();
        flat[axis] *= block;
        let r = self.reshape_u(e, &flat)?;
        if flat[axis] == len {
            return Ok(r);
        }
        self.prim(MirOp::Slice { axes: vec![axis], starts: vec![0], ends: vec![len as i64], steps: vec![1] }, &[r])
    }
    /// Reshapes a per-channel vector [C] to [C,1,…] for broadcasting against [N,C,spatial…] of rank r.
    fn chan(&mut self, p: ValueId, r: usize) -> Result<ValueId, String> {
        let mut d = self.dims(p);
        if d.len() != 1 {
            let n = dim_prod(&d).ok_or("per-channel parameter must be 1-D")?;
            d = vec![n];
        }
        d.extend((2..r).map(|_| Dim::Fixed(1)));
        self.reshape(p, d)
    }
    fn softmax(&mut self, x: ValueId, axis: usize, log: bool) -> Result<ValueId, String> {
        if self.dtype(x).is_float() {
            self.hir(HirOp::Softmax { axis, log }, &[x])
        } else {
            Err(format!("softmax of {} is not supported", self.dtype(x)))
        }
    }
}

/// Pads for auto_pad SAME_UPPER/SAME_LOWER/VALID (conv and pool), else the explicit pads.
fn auto_pads(a: &Attrs, inp: &[usize], k: &[usize], s: &[usize], d: &[usize]) -> Result<Vec<usize>, String> {
    let sp = inp.len();
    let ap = a.s("auto_pad").unwrap_or_else(|| "NOTSET".into());
    match ap.as_str() {
        "SAME_UPPER" | "SAME_LOWER" => {
            let mut p = vec![0; 2 * sp];
            for i in 0..sp {
                let out = inp[i].div_ceil(s[i]);
                let need = (out.saturating_sub(1)) * s[i] + (k[i] - 1) * d[i] + 1;
                let total = need.saturating_sub(inp[i]);
                let small = total / 2;
                if ap == "SAME_UPPER" {
                    p[i] = small;
                    p[i + sp] = total - small;
                } else {
                    p[i] = total - small;
                    p[i + sp] = small;
                }
            }
            Ok(p)
        }
        "VALID" => Ok(vec![0; 2 * sp]),
        _ => {
            let p = a.ints("pads").unwrap_or_else(|| vec![0; 2 * sp]);
            if p.len() != 2 * sp || p.iter().any(|&x| x < 0) {
                return Err(format!("pads {p:?} do not fit {sp} spatial dims"));
            }
            Ok(p.into_iter().map(|x| x as usize).collect())
        }
    }
}

fn usizes(v: Option<Vec<i64>>, n: usize, default: usize, what: &str) -> Result<Vec<usize>, String> {
    match v {
        None => Ok(vec![default; n]),
        Some(v) if v.len() == n && v.iter().all(|&x| x >= 0) => Ok(v.into_iter().map(|x| x as usize).collect()),
        Some(v) => Err(format!("{what} {v:?} do not fit {n} spatial dims")),
    }
}

/// ONNX Reshape target dims (0 = copy unless allowzero, -1 = inferred).
fn reshape_dims(input: &[Dim], spec: &[i64], allowzero: bool) -> Result<Vec<Dim>, String> {
    let mut out: Vec<Option<Dim>> = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &s) in spec.iter().enumerate() {
        match s {
            -1 if infer.is_none() => {
                infer = Some(i);
                out.push(None);
            }
            0 if !allowzero => out.push(Some(input.get(i).cloned().ok_or("reshape: 0 copies a dim the input does not have")?)),
            s if s >= 0 => out.push(Some(Dim::Fixed(s as u64))),
            _ => return Err(format!("reshape: bad target shape {spec:?}")),
        }
    }
    if let Some(k) = infer {
        let known: Vec<Dim> = out.iter().flatten().cloned().collect();
        let mut syms_in = Shape(input.to_vec()).symbols();
        let syms_out = Shape(known.clone()).symbols();
        for s in &syms_out {
            match syms_in.iter().position(|x| x == s) {
                Some(p) => {
                    syms_in.remove(p);
                }
                None => return Err(format!("reshape: cannot infer -1 in {spec:?} from input {}", Shape(input.to_vec()))),
            }
        }
        let fi: u64 = input.iter().filter_map(Dim::fixed).product();
        let fo: u64 = known.iter().filter_map(Dim::fixed).product();
        let d = if fo == 0 {
            Dim::Fixed(0)
        } else if fi % fo != 0 {
            return Err(format!("reshape: {} elements do not divide into {spec:?}", Shape(input.to_vec())));
        } else {
            match (syms_in.len(), fi / fo) {
                (0, n) => Dim::Fixed(n),
                (1, 1) => Dim::Sym(syms_in[0].clone()),
                _ => return Err(format!("reshape: cannot infer -1 in {spec:?} from symbolic input {}", Shape(input.to_vec()))),
            }
        };
        out[k] = Some(d);
    }
    Ok(out.into_iter().map(|d| d.unwrap()).collect())
}

pub(crate) fn convert(cx: &mut Ctx, n: &NodeProto, ins: &[Option<ValueId>]) -> R {
    let a = Attrs(n);
    let op = n.op_type.as_str();
    let opset = cx.opset;
    let inp = |i: usize| ins.get(i).copied().flatten();
    let req = |i: usize| inp(i).ok_or_else(|| format!("{op}: input {i} is required"));
    let nout = n.output.iter().rposition(|o| !o.is_empty()).map(|p| p + 1).unwrap_or(0);
    let one = |v: ValueId| -> R { Ok(vec![v]) };

    let unary = match op {
        "Abs" => Some(UnaryOp::Abs),
        "Neg" => Some(UnaryOp::Neg),
        "Exp" => Some(UnaryOp::Exp),
        "Log" => Some(UnaryOp::Log),
        "Sqrt" => Some(UnaryOp::Sqrt),
        "Reciprocal" => Some(UnaryOp::Recip),
        "Sin" => Some(UnaryOp::Sin),
        "Cos" => Some(UnaryOp::Cos),
        "Tan" => Some(UnaryOp::Tan),
        "Asin" => Some(UnaryOp::Asin),
        "Acos" => Some(UnaryOp::Acos),
        "Atan" => Some(UnaryOp::Atan),
        "Sinh" => Some(UnaryOp::Sinh),
        "Cosh" => Some(UnaryOp::Cosh),
        "Tanh" => Some(UnaryOp::Tanh),
        "Asinh" => Some(UnaryOp::Asinh),
        "Acosh" => Some(UnaryOp::Acosh),
        "Atanh" => Some(UnaryOp::Atanh),
        "Sigmoid" => Some(UnaryOp::Sigmoid),
        "Erf" => Some(UnaryOp::Erf),
        "Relu" => Some(UnaryOp::Relu),
        "Floor" => Some(UnaryOp::Floor),
        "Ceil" => Some(UnaryOp::Ceil),
        "Round" => Some(UnaryOp::Round),
        "Sign" => Some(UnaryOp::Sign),
        "Not" => Some(UnaryOp::Not),
        "BitwiseNot" => Some(UnaryOp::BitNot),
        "IsNaN" => Some(UnaryOp::IsNan),
        "IsInf" => Some(match (a.i("detect_positive", 1), a.i("detect_negative", 1)) {
            (0, _) => UnaryOp::IsNegInf,
            (_, 0) => UnaryOp::IsPosInf,
            _ => UnaryOp::IsInf,
        }),
        _ => None,
    };
    if let Some(u) = unary {
        return one(cx.un(u, req(0)?)?);
    }
    let binary = match op {
        "Add" => Some(BinaryOp::Add),
        "Sub" => Some(BinaryOp::Sub),
        "Mul" => Some(BinaryOp::Mul),
        "Div" => Some(BinaryOp::Div),
        "Pow" => Some(BinaryOp::Pow),
        "Equal" => Some(BinaryOp::Eq),
        "Less" => Some(BinaryOp::Lt),
        "LessOrEqual" => Some(BinaryOp::Le),
        "Greater" => Some(BinaryOp::Gt),
        "GreaterOrEqual" => Some(BinaryOp::Ge),
        "And" => Some(BinaryOp::And),
        "Or" => Some(BinaryOp::Or),
        "Xor" => Some(BinaryOp::Xor),
        "BitwiseAnd" => Some(BinaryOp::BitAnd),
        "BitwiseOr" => Some(BinaryOp::BitOr),
        "BitwiseXor" => Some(BinaryOp::BitXor),
        "Mod" => Some(if a.i("fmod", 0) != 0 { BinaryOp::FMod } else { BinaryOp::Mod }),
        "BitShift" => Some(if a.s("direction").as_deref() == Some("LEFT") { BinaryOp::Shl } else { BinaryOp::Shr }),
        _ => None,
    };
    if let Some(b) = binary {
        let (x, mut y) = (req(0)?, req(1)?);
        if b == BinaryOp::Pow && cx.dtype(x) != cx.dtype(y) {
            y = cx.cast(y, cx.dtype(x))?;
        }
        return one(cx.bin(b, x, y)?);
    }

    match op {
        "Identity" => one(req(0)?),
        "Dropout" => {
            let x = req(0)?;
            if let Some(t) = inp(2) {
                if cx.const_ints(t, "Dropout training_mode")?.first().copied().unwrap_or(0) != 0 {
                    return Err("unsupported: Dropout in training mode".into());
                }
            }
            if nout > 1 {
                let t = cx.scalar(DType::Bool, 1.0);
                let m = cx.prim(MirOp::Expand { shape: cx.dims(x) }, &[t])?;
                return Ok(vec![x, m]);
            }
            one(x)
        }
        "Cast" | "CastLike" => {
            let x = req(0)?;
            let to = if op == "Cast" { dtype_from_onnx(a.i("to", 0) as i32)? } else { cx.dtype(req(1)?) };
            one(cx.cast(x, to)?)
        }
        "Where" => one(cx.prim(MirOp::Where, &[req(0)?, req(1)?, req(2)?])?),
        "MatMul" => one(cx.prim(MirOp::MatMul, &[req(0)?, req(1)?])?),
        "Max" | "Min" | "Sum" | "Mean" => {
            let vs: Vec<ValueId> = ins.iter().flatten().copied().collect();
            let b = match op {
                "Max" => BinaryOp::Max,
                "Min" => BinaryOp::Min,
                _ => BinaryOp::Add,
            };
            let mut acc = *vs.first().ok_or("needs at least one input")?;
            for &v in &vs[1..] {
                acc = cx.bin(b, acc, v)?;
            }
            if op == "Mean" && vs.len() > 1 {
                let c = cx.sc(acc, vs.len() as f64);
                acc = cx.bin(BinaryOp::Div, acc, c)?;
            }
            one(acc)
        }
        "Gemm" => {
            let (mut x, mut w) = (req(0)?, req(1)?);
            let (ta, tb) = (a.i("transA", 0) != 0, a.i("transB", 0) != 0);
            let (alpha, beta) = (a.f("alpha", 1.0), a.f("beta", 1.0));
            let c = inp(2);
            // A Linear block when it is one: x[M,K]·W (+ bias[N]).
            if !ta && alpha == 1.0 && cx.dtype(x).is_float() && (c.is_none() || (beta == 1.0 && cx.rank(c.unwrap()) == 1)) {
                let mut li = vec![x, w];
                li.extend(c);
                if let Ok(v) = cx.hir(HirOp::Linear { transpose_w: tb }, &li) {
                    return one(v);
                }
            }
            if ta {
                x = cx.transpose(x, vec![1, 0])?;
            }
            if tb {
                w = cx.transpose(w, vec![1, 0])?;
            }
            let mut y = cx.prim(MirOp::MatMul, &[x, w])?;
            if alpha != 1.0 {
                y = cx.mul_sc(y, alpha)?;
            }
            if let Some(mut c) = c {
                if beta != 1.0 {
                    c = cx.mul_sc(c, beta)?;
                }
                y = cx.bin(BinaryOp::Add, y, c)?;
            }
            one(y)
        }
        "Relu" => unreachable!(),
        "LeakyRelu" | "ThresholdedRelu" | "Elu" | "Selu" | "Celu" | "HardSigmoid" | "HardSwish" | "Softplus" | "Softsign"
        | "Mish" | "Shrink" | "Swish" => {
            let x = req(0)?;
            let zero = cx.sc(x, 0.0);
            let y = match op {
                "LeakyRelu" => {
                    let neg = cx.bin(BinaryOp::Lt, x, zero)?;
                    let ax = cx.mul_sc(x, a.f("alpha", 0.01))?;
                    cx.prim(MirOp::Where, &[neg, ax, x])?
                }
                "ThresholdedRelu" => {
                    let t = cx.sc(x, a.f("alpha", 1.0));
                    let gt = cx.bin(BinaryOp::Gt, x, t)?;
                    cx.prim(MirOp::Where, &[gt, x, zero])?
                }
                "Elu" | "Selu" => {
                    let (al, ga) = if op == "Elu" {
                        (a.f("alpha", 1.0), 1.0)
                    } else {
                        (a.f("alpha", 1.6732632423543772848170429916717), a.f("gamma", 1.0507009873554804934193349852946))
                    };
                    let pos = cx.bin(BinaryOp::Gt, x, zero)?;
                    let e = cx.un(UnaryOp::Exp, x)?;
                    let e1 = cx.add_sc(e, -1.0)?;
                    let neg = cx.mul_sc(e1, al)?;
                    let y = cx.prim(MirOp::Where, &[pos, x, neg])?;
                    if ga != 1.0 {
                        cx.mul_sc(y, ga)?
                    } else {
                        y
                    }
                }
                "Celu" => {
                    let al = a.f("alpha", 1.0);
                    let xs = cx.mul_sc(x, 1.0 / al)?;
                    let e = cx.un(UnaryOp::Exp, xs)?;
                    let e1 = cx.add_sc(e, -1.0)?;
                    let neg = cx.mul_sc(e1, al)?;
                    let mn = cx.bin(BinaryOp::Min, zero, neg)?;
                    let mx = cx.bin(BinaryOp::Max, zero, x)?;
                    cx.bin(BinaryOp::Add, mx, mn)?
                }
                "HardSigmoid" | "HardSwish" => {
                    let (al, be) = if op == "HardSigmoid" { (a.f("alpha", 0.2), a.f("beta", 0.5)) } else { (1.0 / 6.0, 0.5) };
                    let t = cx.mul_sc(x, al)?;
                    let t = cx.add_sc(t, be)?;
                    let one_ = cx.sc(x, 1.0);
                    let t = cx.bin(BinaryOp::Min, t, one_)?;
                    let t = cx.bin(BinaryOp::Max, t, zero)?;
                    if op == "HardSwish" {
                        cx.bin(BinaryOp::Mul, x, t)?
                    } else {
                        t
                    }
                }
                "Softplus" | "Mish" => {
                    // log(1+exp(x)), stable: max(x,0) + log(1+exp(-|x|))
                    let ab = cx.un(UnaryOp::Abs, x)?;
                    let nab = cx.un(UnaryOp::Neg, ab)?;
                    let e = cx.un(UnaryOp::Exp, nab)?;
                    let e1 = cx.add_sc(e, 1.0)?;
                    let l = cx.un(UnaryOp::Log, e1)?;
                    let mx = cx.bin(BinaryOp::Max, x, zero)?;
                    let sp = cx.bin(BinaryOp::Add, mx, l)?;
                    if op == "Mish" {
                        let t = cx.un(UnaryOp::Tanh, sp)?;
                        cx.bin(BinaryOp::Mul, x, t)?
                    } else {
                        sp
                    }
                }
                "Softsign" => {
                    let ab = cx.un(UnaryOp::Abs, x)?;
                    let d = cx.add_sc(ab, 1.0)?;
                    cx.bin(BinaryOp::Div, x, d)?
                }
                "Swish" => {
                    let t = cx.mul_sc(x, a.f("alpha", 1.0))?;
                    let s = cx.un(UnaryOp::Sigmoid, t)?;
                    cx.bin(BinaryOp::Mul, x, s)?
                }
                _ => {
                    // Shrink
                    let (l, b) = (a.f("lambd", 0.5), a.f("bias", 0.0));
                    let lo = cx.sc(x, -l);
                    let hi = cx.sc(x, l);
                    let below = cx.bin(BinaryOp::Lt, x, lo)?;
                    let above = cx.bin(BinaryOp::Gt, x, hi)?;
                    let xb = cx.add_sc(x, b)?;
                    let xm = cx.add_sc(x, -b)?;
                    let t = cx.prim(MirOp::Where, &[above, xm, zero])?;
                    cx.prim(MirOp::Where, &[below, xb, t])?
                }
            };
            one(y)
        }
        "PRelu" => {
            let (x, s) = (req(0)?, req(1)?);
            let zero = cx.sc(x, 0.0);
            let neg = cx.bin(BinaryOp::Lt, x, zero)?;
            let xs = cx.bin(BinaryOp::Mul, x, s)?;
            one(cx.prim(MirOp::Where, &[neg, xs, x])?)
        }
        "Gelu" => one(cx.hir(HirOp::Gelu { tanh: a.s("approximate").as_deref() == Some("tanh") }, &[req(0)?])?),
        "Clip" => {
            let mut x = req(0)?;
            let (lo, hi) = if opset < 11 {
                let lo = a.has("min").then(|| cx.sc(x, a.f("min", 0.0)));
                let hi = a.has("max").then(|| cx.sc(x, a.f("max", 0.0)));
                (lo, hi)
            } else {
                (inp(1), inp(2))
            };
            if let Some(lo) = lo {
                x = cx.bin(BinaryOp::Max, x, lo)?;
            }
            if let Some(hi) = hi {
                x = cx.bin(BinaryOp::Min, x, hi)?;
            }
            one(x)
        }
        "Constant" => {
            let c = if let Some(t) = a.t("value") {
                tensor_from_proto(t, cx.base_dir)?
            } else if a.has("value_float") {
                ConstData::from_f32(vec![], &[a.f("value_float", 0.0) as f32])
            } else if let Some(v) = a.floats("value_floats") {
                ConstData::from_f64s(DType::F32, vec![v.len()], &v)
            } else if a.has("value_int") {
                ConstData::from_i64(vec![], &[a.i("value_int", 0)])
            } else if let Some(v) = a.ints("value_ints") {
                ConstData::from_i64(vec![v.len()], &v)
            } else {
                return Err("unsupported: Constant of this kind (string or sparse)".into());
            };
            one(cx.konst(c))
        }
        "ConstantOfShape" => {
            let s = cx.const_ints(req(0)?, "ConstantOfShape shape")?;
            let val = match a.t("value") {
                Some(t) => tensor_from_proto(t, cx.base_dir)?,
                None => ConstData::from_f32(vec![1], &[0.0]),
            };
            let v = ConstData::new(val.dtype, vec![], val.data.clone()).map_err(|e| format!("value: {e}"))?;
            let sv = cx.konst(v);
            let shape = s.iter().map(|&d| u64::try_from(d).map(Dim::Fixed).map_err(|_| format!("negative dim {d}"))).collect::<Result<Vec<_>, _>>()?;
            one(cx.prim(MirOp::Expand { shape }, &[sv])?)
        }
        "Shape" => {
            let d = cx.dims(req(0)?);
            let r = d.len() as i64;
            let cl = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
            let s = cl(a.i("start", 0));
            let e = if a.has("end") { cl(a.i("end", r)) } else { r as usize };
            let sel = if s < e { &d[s..e] } else { &[][..] };
            let v: Option<Vec<i64>> = sel.iter().map(|x| x.fixed().map(|n| n as i64)).collect();
            match v {
                Some(v) => one(cx.ints_const(&v)),
                None => Err(format!(
                    "the shape {} is symbolic; fix {} with --dim NAME=N",
                    Shape(d.clone()),
                    Shape(sel.to_vec()).symbols().join(", ")
                )),
            }
        }
        "Size" => {
            let x = req(0)?;
            let n = cx.fixed_dims(x, "Size")?.iter().product::<usize>();
            one(cx.konst(ConstData::from_i64(vec![], &[n as i64])))
        }
        "Reshape" => {
            let x = req(0)?;
            let spec = if opset < 5 { a.ints("shape").unwrap_or_default() } else { cx.const_ints(req(1)?, "Reshape shape")? };
            let t = reshape_dims(&cx.dims(x), &spec, a.i("allowzero", 0) != 0)?;
            one(cx.reshape(x, t)?)
        }
        "Flatten" => {
            let x = req(0)?;
            let d = cx.dims(x);
            let mut ax = a.i("axis", 1);
            if ax < 0 {
                ax += d.len() as i64;
            }
            if ax < 0 || ax > d.len() as i64 {
                return Err(format!("axis {} out of range", a.i("axis", 1)));
            }
            let (l, r) = d.split_at(ax as usize);
            let t = vec![dim_prod(l).ok_or("Flatten of symbolic dims")?, dim_prod(r).ok_or("Flatten of symbolic dims")?];
            one(cx.reshape(x, t)?)
        }
        "Squeeze" | "Unsqueeze" => {
            let x = req(0)?;
            let axes = if opset < 13 {
                a.ints("axes")
            } else {
                match inp(1) {
                    Some(v) => Some(cx.const_ints(v, &format!("{op} axes"))?),
                    None => None,
                }
            };
            let d = cx.dims(x);
            if op == "Squeeze" {
                let ax = match axes {
                    Some(v) => norm_axes(&v, d.len())?,
                    None => (0..d.len()).filter(|&i| d[i] == Dim::Fixed(1)).collect(),
                };
                let t: Vec<Dim> = d.iter().enumerate().filter(|(i, _)| !ax.contains(i)).map(|(_, x)| x.clone()).collect();
                one(cx.reshape(x, t)?)
            } else {
                let v = axes.ok_or("Unsqueeze needs axes")?;
                let ax = norm_axes(&v, d.len() + v.len())?;
                one(cx.unsqueeze(x, &ax)?)
            }
        }
        "Transpose" => {
            let x = req(0)?;
            let r = cx.rank(x);
            let perm = match a.ints("perm") {
                Some(p) => p.iter().map(|&i| norm_axis(i, r)).collect::<Result<Vec<_>, _>>()?,
                None => (0..r).rev().collect(),
            };
            one(cx.transpose(x, perm)?)
        }
        "Expand" => {
            let x = req(0)?;
            let s = cx.const_ints(req(1)?, "Expand shape")?;
            let sd = Shape(s.iter().map(|&d| Dim::Fixed(d.max(0) as u64)).collect());
            let t = broadcast(&cx.ty(x).shape, &sd)?;
            if t == cx.ty(x).shape {
                return one(x);
            }
            one(cx.prim(MirOp::Expand { shape: t.0 }, &[x])?)
        }
        "Tile" => {
            let x = req(0)?;
            let reps = cx.const_ints(req(1)?, "Tile repeats")?;
            let d = cx.fixed_dims(x, "Tile")?;
            if reps.len() != d.len() || reps.iter().any(|&r| r < 0) {
                return Err(format!("repeats {reps:?} do not fit rank {}", d.len()));
            }
            let mut s1 = Vec::new();
            let mut s2 = Vec::new();
            let mut s3 = Vec::new();
            for i in 0..d.len() {
                s1.extend([1, d[i]]);
                s2.extend([reps[i] as usize, d[i]]);
                s3.push(reps[i] as usize * d[i]);
            }
            let y = cx.reshape_u(x, &s1)?;
            let y = cx.prim(MirOp::Expand { shape: s2.iter().map(|&v| Dim::Fixed(v as u64)).collect() }, &[y])?;
            one(cx.reshape_u(y, &s3)?)
        }
        "Slice" => {
            let x = req(0)?;
            let r = cx.rank(x);
            let (starts, ends, axes, steps) = if opset < 10 {
                (a.ints("starts").unwrap_or_default(), a.ints("ends").unwrap_or_default(), a.ints("axes"), None)
            } else {
                let st = cx.const_ints(req(1)?, "Slice starts")?;
                let en = cx.const_ints(req(2)?, "Slice ends")?;
                let ax = match inp(3) {
                    Some(v) => Some(cx.const_ints(v, "Slice axes")?),
                    None => None,
                };
                let sp = match inp(4) {
                    Some(v) => Some(cx.const_ints(v, "Slice steps")?),
                    None => None,
                };
                (st, en, ax, sp)
            };
            let axes = match axes {
                Some(v) => v.iter().map(|&i| norm_axis(i, r)).collect::<Result<Vec<_>, _>>()?,
                None => (0..starts.len()).collect(),
            };
            let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
            if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
                return Err("Slice starts/ends/axes/steps lengths differ".into());
            }
            one(cx.prim(MirOp::Slice { axes, starts, ends, steps }, &[x])?)
        }
        "Concat" => {
            let vs: Vec<ValueId> = ins.iter().flatten().copied().collect();
            let r = cx.rank(*vs.first().ok_or("Concat needs inputs")?);
            let ax = norm_axis(a.i("axis", 0), r)?;
            if vs.len() == 1 {
                return one(vs[0]);
            }
            one(cx.prim(MirOp::Concat { axis: ax }, &vs)?)
        }
        "Split" => {
            let x = req(0)?;
            let r = cx.rank(x);
            let ax = norm_axis(a.i("axis", 0), r)?;
            let d = cx.dims(x)[ax].fixed().ok_or("Split along a symbolic dim")? as i64;
            let sizes = if opset < 13 {
                a.ints("split")
            } else {
                match inp(1) {
                    Some(v) => Some(cx.const_ints(v, "Split sizes")?),
                    None => None,
                }
            };
            let k = n.output.len() as i64;
            let sizes = match sizes {
                Some(s) => s,
                None if a.has("num_outputs") => {
                    let no = a.i("num_outputs", 1).max(1);
                    let c = (d + no - 1) / no;
                    (0..no).map(|i| (d - i * c).clamp(0, c)).collect()
                }
                None => {
                    if k == 0 || d % k != 0 {
                        return Err(format!("cannot split {d} evenly into {k}"));
                    }
                    vec![d / k; k as usize]
                }
            };
            let mut outs = Vec::new();
            let mut s = 0;
            for &sz in &sizes {
                outs.push(cx.prim(MirOp::Slice { axes: vec![ax], starts: vec![s], ends: vec![s + sz], steps: vec![1] }, &[x])?);
                s += sz;
            }
            Ok(outs)
        }
        "Gather" => {
            let x = req(0)?;
            let ax = norm_axis(a.i("axis", 0), cx.rank(x))?;
            one(cx.prim(MirOp::Gather { axis: ax }, &[x, req(1)?])?)
        }
        "GatherElements" => {
            let x = req(0)?;
            let ax = norm_axis(a.i("axis", 0), cx.rank(x))?;
            one(cx.prim(MirOp::GatherElements { axis: ax }, &[x, req(1)?])?)
        }
        "GatherND" => one(cx.prim(MirOp::GatherNd { batch_dims: a.i("batch_dims", 0).max(0) as usize }, &[req(0)?, req(1)?])?),
        "ScatterElements" | "Scatter" | "ScatterND" => {
            let x = req(0)?;
            let red = match a.s("reduction").as_deref().unwrap_or("none") {
                "none" => ScatterRed::None,
                "add" => ScatterRed::Add,
                "mul" => ScatterRed::Mul,
                "max" => ScatterRed::Max,
                "min" => ScatterRed::Min,
                r => return Err(format!("unsupported reduction '{r}'")),
            };
            let o = if op == "ScatterND" {
                MirOp::ScatterNd { reduction: red }
            } else {
                MirOp::ScatterElements { axis: norm_axis(a.i("axis", 0), cx.rank(x))?, reduction: red }
            };
            one(cx.prim(o, &[x, req(1)?, req(2)?])?)
        }
        "Pad" => {
            let x = req(0)?;
            let r = cx.rank(x);
            let (pads, value, axes) = if opset < 11 {
                let p = a.ints("pads").or_else(|| a.ints("paddings")).unwrap_or_default();
                (p, a.f("value", 0.0), None)
            } else {
                let p = cx.const_ints(req(1)?, "Pad pads")?;
                let v = match inp(2) {
                    Some(v) => cx.const_f64s(v, "Pad constant_value")?.first().copied().unwrap_or(0.0),
                    None => 0.0,
                };
                let ax = match inp(3) {
                    Some(v) => Some(cx.const_ints(v, "Pad axes")?),
                    None => None,
                };
                (p, v, ax)
            };
            let full = match axes {
                None => pads,
                Some(ax) => {
                    let ax = ax.iter().map(|&i| norm_axis(i, r)).collect::<Result<Vec<_>, _>>()?;
                    if pads.len() != 2 * ax.len() {
                        return Err("Pad: pads do not match axes".into());
                    }
                    let mut f = vec![0; 2 * r];
                    for (k, &i) in ax.iter().enumerate() {
                        f[i] = pads[k];
                        f[i + r] = pads[k + ax.len()];
                    }
                    f
                }
            };
            let mode = match a.s("mode").as_deref().unwrap_or("constant") {
                "constant" => PadMode::Constant,
                "reflect" => PadMode::Reflect,
                "edge" => PadMode::Edge,
                "wrap" => PadMode::Wrap,
                m => return Err(format!("unsupported pad mode '{m}'")),
            };
            one(cx.prim(MirOp::Pad { pads: full, mode, value }, &[x])?)
        }
        "Conv" | "ConvTranspose" => {
            let (x, w) = (req(0)?, req(1)?);
            let xd = cx.fixed_dims(x, op)?;
            let wd = cx.fixed_dims(w, &format!("{op} weight"))?;
            if xd.len() < 3 || wd.len() != xd.len() {
                return Err(format!("input {:?} and weight {:?} must be [N,C,spatial…]", xd, wd));
            }
            let sp = xd.len() - 2;
            let k: Vec<usize> = wd[2..].to_vec();
            let strides = usizes(a.ints("strides"), sp, 1, "strides")?;
            let dil = usizes(a.ints("dilations"), sp, 1, "dilations")?;
            let groups = a.i("group", 1).max(1) as usize;
            let mut ins2 = vec![x, w];
            ins2.extend(inp(2));
            if op == "Conv" {
                let pads = auto_pads(&a, &xd[2..], &k, &strides, &dil)?;
                return one(cx.prim(MirOp::Conv { strides, pads, dilations: dil, groups }, &ins2)?);
            }
            let mut opad = usizes(a.ints("output_padding"), sp, 0, "output_padding")?;
            let ap = a.s("auto_pad").unwrap_or_default();
            let out_shape = a.ints("output_shape").map(|v| v[v.len().saturating_sub(sp)..].to_vec());
            let pads = if out_shape.is_some() || ap == "SAME_UPPER" || ap == "SAME_LOWER" {
                let mut p = vec![0; 2 * sp];
                for i in 0..sp {
                    let want = match &out_shape {
                        Some(o) => o[i],
                        None => (xd[i + 2] * strides[i]) as i64,
                    };
                    let full = (strides[i] * (xd[i + 2] - 1) + opad[i] + (k[i] - 1) * dil[i] + 1) as i64;
                    let mut total = full - want;
                    if total < 0 {
                        opad[i] += (-total) as usize;
                        total = 0;
                    }
                    let t = total as usize;
                    if ap == "SAME_UPPER" {
                        p[i] = t / 2;
                        p[i + sp] = t - t / 2;
                    } else {
                        p[i] = t - t / 2;
                        p[i + sp] = t / 2;
                    }
                }
                p
            } else if ap == "VALID" {
                vec![0; 2 * sp]
            } else {
                usizes(a.ints("pads"), 2 * sp, 0, "pads")?
            };
            one(cx.prim(MirOp::ConvTranspose { strides, pads, dilations: dil, groups, output_padding: opad }, &ins2)?)
        }
        "MaxPool" | "AveragePool" | "LpPool" => {
            let x = req(0)?;
            if nout > 1 {
                return Err("unsupported: MaxPool indices output".into());
            }
            let xd = cx.fixed_dims(x, op)?;
            let sp = xd.len().checked_sub(2).ok_or("pool input must be [N,C,spatial…]")?;
            let k = usizes(a.ints("kernel_shape"), sp, 1, "kernel_shape")?;
            let strides = usizes(a.ints("strides"), sp, 1, "strides")?;
            let dil = usizes(a.ints("dilations"), sp, 1, "dilations")?;
            let pads = auto_pads(&a, &xd[2..], &k, &strides, &dil)?;
            let ceil_mode = a.i("ceil_mode", 0) != 0;
            if op == "LpPool" {
                let p = a.i("p", 2) as f64;
                let ab = cx.un(UnaryOp::Abs, x)?;
                let pe = cx.sc(x, p);
                let xp = cx.bin(BinaryOp::Pow, ab, pe)?;
                let avg = cx.prim(
                    MirOp::Pool { kind: PoolKind::Avg, kernel: k.clone(), strides, pads, dilations: dil, ceil_mode, count_include_pad: true },
                    &[xp],
                )?;
                let s = cx.mul_sc(avg, k.iter().product::<usize>() as f64)?;
                let ie = cx.sc(x, 1.0 / p);
                return one(cx.bin(BinaryOp::Pow, s, ie)?);
            }
            let kind = if op == "MaxPool" { PoolKind::Max } else { PoolKind::Avg };
            let cip = a.i("count_include_pad", 0) != 0;
            one(cx.prim(MirOp::Pool { kind, kernel: k, strides, pads, dilations: dil, ceil_mode, count_include_pad: cip }, &[x])?)
        }
        "GlobalAveragePool" | "GlobalMaxPool" => {
            let x = req(0)?;
            let r = cx.rank(x);
            let o = if op == "GlobalMaxPool" { ReduceOp::Max } else { ReduceOp::Mean };
            one(cx.reduce(o, x, (2..r).collect(), true)?)
        }
        "BatchNormalization" => {
            if a.i("training_mode", 0) != 0 || nout > 1 {
                return Err("unsupported: BatchNormalization in training mode".into());
            }
            let x = req(0)?;
            let r = cx.rank(x);
            let eps = a.f("epsilon", 1e-5);
            let sc = cx.chan(req(1)?, r)?;
            let b = cx.chan(req(2)?, r)?;
            let m = cx.chan(req(3)?, r)?;
            let v = cx.chan(req(4)?, r)?;
            let ve = cx.add_sc(v, eps)?;
            let sd = cx.un(UnaryOp::Sqrt, ve)?;
            let d = cx.bin(BinaryOp::Sub, x, m)?;
            let y = cx.bin(BinaryOp::Div, d, sd)?;
            let y = cx.bin(BinaryOp::Mul, y, sc)?;
            one(cx.bin(BinaryOp::Add, y, b)?)
        }
        "InstanceNormalization" | "MeanVarianceNormalization" => {
            let x = req(0)?;
            let r = cx.rank(x);
            let (axes, eps) = if op == "InstanceNormalization" {
                ((2..r).collect::<Vec<_>>(), a.f("epsilon", 1e-5))
            } else {
                (norm_axes(&a.ints("axes").unwrap_or(vec![0, 2, 3]), r)?, 0.0)
            };
            let m = cx.reduce(ReduceOp::Mean, x, axes.clone(), true)?;
            let d = cx.bin(BinaryOp::Sub, x, m)?;
            let d2 = cx.bin(BinaryOp::Mul, d, d)?;
            let var = cx.reduce(ReduceOp::Mean, d2, axes, true)?;
            if op == "MeanVarianceNormalization" {
                let sd = cx.un(UnaryOp::Sqrt, var)?;
                let sd = cx.add_sc(sd, 1e-9)?;
                return one(cx.bin(BinaryOp::Div, d, sd)?);
            }
            let ve = cx.add_sc(var, eps)?;
            let sd = cx.un(UnaryOp::Sqrt, ve)?;
            let y = cx.bin(BinaryOp::Div, d, sd)?;
            let s = cx.chan(req(1)?, r)?;
            let b = cx.chan(req(2)?, r)?;
            let y = cx.bin(BinaryOp::Mul, y, s)?;
            one(cx.bin(BinaryOp::Add, y, b)?)
        }
        "GroupNormalization" => {
            let x = req(0)?;
            let xd = cx.fixed_dims(x, op)?;
            let r = xd.len();
            let g = a.i("num_groups", 1).max(1) as usize;
            let c = xd[1];
            let eps = a.f("epsilon", 1e-5);
            let grouped = cx.reshape_u(x, &[xd[0], g, xd[1..].iter().product::<usize>() / g])?;
            let m = cx.reduce(ReduceOp::Mean, grouped, vec![2], true)?;
            let d = cx.bin(BinaryOp::Sub, grouped, m)?;
            let d2 = cx.bin(BinaryOp::Mul, d, d)?;
            let var = cx.reduce(ReduceOp::Mean, d2, vec![2], true)?;
            let ve = cx.add_sc(var, eps)?;
            let sd = cx.un(UnaryOp::Sqrt, ve)?;
            let y = cx.bin(BinaryOp::Div, d, sd)?;
            let y = cx.reshape_u(y, &xd)?;
            let mut params = Vec::new();
            for i in [1, 2] {
                let mut p = req(i)?;
                if cx.fixed_dims(p, "GroupNormalization scale")? == vec![g] && g != c {
                    p = cx.reshape_u(p, &[g, 1])?;
                    p = cx.prim(MirOp::Expand { shape: vec![Dim::Fixed(g as u64), Dim::Fixed((c / g) as u64)] }, &[p])?;
                    p = cx.reshape_u(p, &[c])?;
                }
                params.push(cx.chan(p, r)?);
            }
            let y = cx.bin(BinaryOp::Mul, y, params[0])?;
            one(cx.bin(BinaryOp::Add, y, params[1])?)
        }
        "LayerNormalization" | "RMSNormalization" => {
            let x0 = req(0)?;
            let r = cx.rank(x0);
            let ax = norm_axis(a.i("axis", -1), r)?;
            let eps = a.f("epsilon", 1e-5);
            let xdt = cx.dtype(x0);
            let scale = req(1)?;
            let bias = inp(2);
            if op == "LayerNormalization" && nout <= 1 && xdt == DType::F32 {
                let mut li = vec![x0, scale];
                li.extend(bias);
                if let Ok(v) = cx.hir(HirOp::LayerNorm { axis: ax, eps }, &li) {
                    return one(v);
                }
            }
            let stash = if a.i("stash_type", 1) == 1 && xdt != DType::F64 { DType::F32 } else { xdt };
            let x = cx.cast(x0, stash)?;
            let axes: Vec<usize> = (ax..r).collect();
            let (d, var, m) = if op == "LayerNormalization" {
                let m = cx.reduce(ReduceOp::Mean, x, axes.clone(), true)?;
                let d = cx.bin(BinaryOp::Sub, x, m)?;
                let d2 = cx.bin(BinaryOp::Mul, d, d)?;
                (d, cx.reduce(ReduceOp::Mean, d2, axes, true)?, Some(m))
            } else {
                let x2 = cx.bin(BinaryOp::Mul, x, x)?;
                (x, cx.reduce(ReduceOp::Mean, x2, axes, true)?, None)
            };
            let ve = cx.add_sc(var, eps)?;
            let sd = cx.un(UnaryOp::Sqrt, ve)?;
            let inv = cx.un(UnaryOp::Recip, sd)?;
            let y = cx.bin(BinaryOp::Mul, d, inv)?;
            let y = cx.cast(y, xdt)?;
            let y = cx.bin(BinaryOp::Mul, y, scale)?;
            let y = match bias {
                Some(b) => cx.bin(BinaryOp::Add, y, b)?,
                None => y,
            };
            let mut outs = vec![y];
            if let Some(m) = m {
                outs.push(m);
                outs.push(inv);
            }
            Ok(outs)
        }
        "Softmax" | "LogSoftmax" | "Hardmax" => {
            let x = req(0)?;
            let d = cx.dims(x);
            let r = d.len();
            let default_axis = if opset < 13 { 1 } else { -1 };
            let ax = norm_axis(a.i("axis", default_axis), r)?;
            let (xin, axis) = if opset < 13 && ax != r - 1 {
                let (l, rr) = d.split_at(ax);
                let t = vec![dim_prod(l).ok_or("symbolic dims")?, dim_prod(rr).ok_or("symbolic dims")?];
                (cx.reshape(x, t)?, 1)
            } else {
                (x, ax)
            };
            let y = if op == "Hardmax" {
                let xd = cx.fixed_dims(xin, op)?;
                let am = cx.prim(MirOp::ArgReduce { op: ArgOp::ArgMax, axis, keepdims: true, select_last: false }, &[xin])?;
                let n = xd[axis];
                let mut rs = vec![1usize; xd.len()];
                rs[axis] = n;
                let ids: Vec<i64> = (0..n as i64).collect();
                let rg = cx.konst(ConstData::from_i64(rs, &ids));
                let eq = cx.bin(BinaryOp::Eq, am, rg)?;
                cx.cast(eq, cx.dtype(x))?
            } else {
                cx.softmax(xin, axis, op == "LogSoftmax")?
            };
            one(cx.reshape(y, d)?)
        }
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1" | "ReduceL2" | "ReduceLogSum"
        | "ReduceLogSumExp" | "ReduceSumSquare" => {
            let x = req(0)?;
            let r = cx.rank(x);
            let keep = a.i("keepdims", 1) != 0;
            let from_input = if op == "ReduceSum" { opset >= 13 } else { opset >= 18 };
            let axes = if from_input {
                match inp(1) {
                    Some(v) => Some(cx.const_ints(v, &format!("{op} axes"))?),
                    None => None,
                }
            } else {
                a.ints("axes")
            };
            let axes = match axes {
                Some(v) if !v.is_empty() => norm_axes(&v, r)?,
                _ if a.i("noop_with_empty_axes", 0) != 0 => return one(x),
                _ => (0..r).collect(),
            };
            let y = match op {
                "ReduceSum" => cx.reduce(ReduceOp::Sum, x, axes, keep)?,
                "ReduceMean" => cx.reduce(ReduceOp::Mean, x, axes, keep)?,
                "ReduceMax" => cx.reduce(ReduceOp::Max, x, axes, keep)?,
                "ReduceMin" => cx.reduce(ReduceOp::Min, x, axes, keep)?,
                "ReduceProd" => cx.reduce(ReduceOp::Prod, x, axes, keep)?,
                "ReduceL1" => {
                    let ab = cx.un(UnaryOp::Abs, x)?;
                    cx.reduce(ReduceOp::Sum, ab, axes, keep)?
                }
                "ReduceL2" | "ReduceSumSquare" => {
                    let sq = cx.bin(BinaryOp::Mul, x, x)?;
                    let s = cx.reduce(ReduceOp::Sum, sq, axes, keep)?;
                    if op == "ReduceL2" {
                        cx.un(UnaryOp::Sqrt, s)?
                    } else {
                        s
                    }
                }
                "ReduceLogSum" => {
                    let s = cx.reduce(ReduceOp::Sum, x, axes, keep)?;
                    cx.un(UnaryOp::Log, s)?
                }
                _ => {
                    // log(sum(exp(x - max))) + max, with -inf maxima (empty or all -inf) kept finite.
                    let m = cx.reduce(ReduceOp::Max, x, axes.clone(), true)?;
                    let fin = cx.un(UnaryOp::IsInf, m)?;
                    let zero = cx.sc(m, 0.0);
                    let m = cx.prim(MirOp::Where, &[fin, zero, m])?;
                    let d = cx.bin(BinaryOp::Sub, x, m)?;
                    let e = cx.un(UnaryOp::Exp, d)?;
                    let s = cx.reduce(ReduceOp::Sum, e, axes.clone(), keep)?;
                    let l = cx.un(UnaryOp::Log, s)?;
                    let m2 = if keep { m } else { cx.reduce(ReduceOp::Max, m, axes, false)? };
                    cx.bin(BinaryOp::Add, l, m2)?
                }
            };
            one(y)
        }
        "ArgMax" | "ArgMin" => {
            let x = req(0)?;
            let axis = norm_axis(a.i("axis", 0), cx.rank(x))?;
            let o = if op == "ArgMax" { ArgOp::ArgMax } else { ArgOp::ArgMin };
            one(cx.prim(
                MirOp::ArgReduce { op: o, axis, keepdims: a.i("keepdims", 1) != 0, select_last: a.i("select_last_index", 0) != 0 },
                &[x],
            )?)
        }
        "CumSum" => {
            let x = req(0)?;
            let ax = cx.const_ints(req(1)?, "CumSum axis")?;
            let axis = norm_axis(*ax.first().ok_or("empty axis")?, cx.rank(x))?;
            one(cx.prim(MirOp::CumSum { axis, exclusive: a.i("exclusive", 0) != 0, reverse: a.i("reverse", 0) != 0 }, &[x])?)
        }
        "QuantizeLinear" | "DequantizeLinear" => {
            // Per-tensor, per-axis, or blocked (opset 21's block_size: each run of `block_size` elements
            // along `axis` shares a scale; the scale and zero point are repeated to x's shape and the
            // op is per element).
            let x = req(0)?;
            let mut scale = req(1)?;
            let block = a.i("block_size", 0);
            let mut sshape = cx.ty(scale).shape.as_fixed().ok_or_else(|| format!("{op}: scale must have a fixed shape"))?;
            let mut zp_in = inp(2);
            if block != 0 {
                let xs = cx.fixed_dims(x, op)?;
                let axis = norm_axis(a.i("axis", 1), xs.len())?;
                let bad = || format!("{op}: block_size {block} needs a scale of x's shape {xs:?} with axis {axis} of ceil({} / {block}), got {sshape:?}", xs[axis]);
                if block < 0 || sshape.len() != xs.len() || (0..xs.len()).any(|d| if d == axis { sshape[d] != xs[d].div_ceil(block as usize) } else { sshape[d] != xs[d] }) {
                    return Err(bad());
                }
                scale = cx.repeat_blocks(scale, axis, block as usize, xs[axis])?;
                if let Some(z) = zp_in {
                    if cx.ty(z).shape.as_fixed().as_ref() != Some(&sshape) {
                        return Err(format!("{op}: zero point shape differs from the scale's {sshape:?}"));
                    }
                    zp_in = Some(cx.repeat_blocks(z, axis, block as usize, xs[axis])?);
                }
                sshape = xs;
            }
            let zp = match zp_in {
                Some(z) => z,
                None => {
                    let dt = if op == "QuantizeLinear" {
                        match a.i("output_dtype", 0) {
                            0 => DType::U8,
                            t => dtype_from_onnx(t as i32)?,
                        }
                    } else {
                        cx.dtype(x)
                    };
                    let n: usize = sshape.iter().product();
                    let bytes = vec![0u8; dt.bytes_for(n).ok_or("bad zero point dtype")?];
                    cx.konst(ConstData { dtype: dt, shape: sshape.clone(), data: rlx_ir::Blob::from_vec(bytes) })
                }
            };
            let axis = if sshape.iter().product::<usize>() == 1 || block != 0 { 0 } else { norm_axis(a.i("axis", 1), cx.rank(x))? };
            let mop = if op == "QuantizeLinear" { MirOp::Quantize { axis } } else { MirOp::Dequantize { axis } };
            one(cx.prim(mop, &[x, scale, zp])?)
        }
        "MatMulInteger" | "QLinearMatMul" | "ConvInteger" | "QLinearConv" => {
            // Integer cores on the quantized primitives: operands widened to int32 minus their zero
            // points (per-tensor; per-row for MatMul's A, per-column for B, per-output-channel for
            // Conv's W), an int32 matmul / conv (+ int32 bias), and for the QLinear forms the
            // requantization `quantize(f32(acc) · (s_a·s_b / s_y), 1, y_zp)` — round half to even,
            // saturate (the ONNX reference).
            let qlinear = op.starts_with("QLinear");
            let conv = op.ends_with("Conv") || op == "ConvInteger";
            // Input positions: [a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp, bias] for QLinear*,
            // [a, b, a_zp, b_zp] for *Integer.
            let (ia, ib, iaz, ibz) = if qlinear { (0, 3, 2, 5) } else { (0, 1, 2, 3) };
            let (a0, b0) = (req(ia)?, req(ib)?);
            let rb = cx.rank(b0);
            let mut av = cx.cast(a0, DType::I32)?;
            if let Some(z) = inp(iaz) {
                let z = cx.cast(z, DType::I32)?;
                let per_row = !conv && cx.rank(z) == 1 && cx.dims(z)[0] != Dim::Fixed(1);
                let z = if per_row { cx.unsqueeze(z, &[1])? } else { z };
                av = cx.bin(BinaryOp::Sub, av, z)?;
            }
            let mut bv = cx.cast(b0, DType::I32)?;
            if let Some(z) = inp(ibz) {
                let z = cx.cast(z, DType::I32)?;
                let per_chan = conv && cx.rank(z) == 1 && cx.dims(z)[0] != Dim::Fixed(1);
                let z = if per_chan { cx.chan(z, rb + 1)? } else { z };
                bv = cx.bin(BinaryOp::Sub, bv, z)?;
            }
            let acc = if conv {
                let xd = cx.fixed_dims(a0, op)?;
                let wd = cx.fixed_dims(b0, &format!("{op} weight"))?;
                if xd.len() < 3 || wd.len() != xd.len() {
                    return Err(format!("input {:?} and weight {:?} must be [N,C,spatial…]", xd, wd));
                }
                let sp = xd.len() - 2;
                let strides = usizes(a.ints("strides"), sp, 1, "strides")?;
                let dil = usizes(a.ints("dilations"), sp, 1, "dilations")?;
                let groups = a.i("group", 1).max(1) as usize;
                let pads = auto_pads(&a, &xd[2..], &wd[2..], &strides, &dil)?;
                let mut cins = vec![av, bv];
                if qlinear {
                    if let Some(bias) = inp(8) {
                        cins.push(cx.cast(bias, DType::I32)?);
                    }
                }
                cx.prim(MirOp::Conv { strides, pads, dilations: dil, groups }, &cins)?
            } else {
                cx.prim(MirOp::MatMul, &[av, bv])?
            };
            if !qlinear {
                return one(acc);
            }
            let rank_out = cx.rank(acc);
            let scale = |cx: &mut Ctx, i: usize, per_row: bool| -> Result<ValueId, String> {
                let s = cx.cast(req(i)?, DType::F32)?;
                if cx.rank(s) == 1 && cx.dims(s)[0] != Dim::Fixed(1) {
                    if conv {
                        return cx.chan(s, rank_out);
                    }
                    if per_row {
                        return cx.unsqueeze(s, &[1]);
                    }
                }
                Ok(s)
            };
            let sa = scale(cx, 1, true)?;
            let sb = scale(cx, 4, false)?;
            let sy = scale(cx, 6, false)?;
            let m = cx.bin(BinaryOp::Mul, sa, sb)?;
            let m = cx.bin(BinaryOp::Div, m, sy)?;
            let f = cx.cast(acc, DType::F32)?;
            let d = cx.bin(BinaryOp::Mul, f, m)?;
            let yz = req(7)?;
            if dim_prod(&cx.dims(yz)) != Some(Dim::Fixed(1)) {
                return Err(format!("{op}: only a per-tensor y_zero_point is supported"));
            }
            let yz = cx.reshape(yz, vec![])?;
            let unit = cx.scalar(DType::F32, 1.0);
            one(cx.prim(MirOp::Quantize { axis: 0 }, &[d, unit, yz])?)
        }
        "TopK" => {
            let x = req(0)?;
            let k = if opset < 10 { a.i("k", 1) } else { *cx.const_ints(req(1)?, "TopK k")?.first().ok_or("empty k")? };
            let axis = norm_axis(a.i("axis", -1), cx.rank(x))?;
            cx.prim_n(MirOp::TopK { axis, k: k.max(0) as usize, largest: a.i("largest", 1) != 0 }, &[x])
        }
        "Trilu" => {
            let x = req(0)?;
            let xd = cx.fixed_dims(x, op)?;
            let r = xd.len();
            if r < 2 {
                return Err("Trilu needs rank >= 2".into());
            }
            let k = match inp(1) {
                Some(v) => *cx.const_ints(v, "Trilu k")?.first().unwrap_or(&0),
                None => 0,
            };
            let (nr, nc) = (xd[r - 2], xd[r - 1]);
            let upper = a.i("upper", 1) != 0;
            let mut m = Vec::with_capacity(nr * nc);
            for i in 0..nr as i64 {
                for j in 0..nc as i64 {
                    m.push(if upper { (j - i >= k) as i64 as f64 } else { (j - i <= k) as i64 as f64 });
                }
            }
            let mask = cx.konst(ConstData::from_f64s(DType::Bool, vec![nr, nc], &m));
            let zero = cx.sc(x, 0.0);
            one(cx.prim(MirOp::Where, &[mask, x, zero])?)
        }
        "OneHot" => {
            let (idx, vals) = (req(0)?, req(2)?);
            let depth = *cx.const_f64s(req(1)?, "OneHot depth")?.first().ok_or("empty depth")? as i64;
            let r = cx.rank(idx);
            let ax = norm_axis(a.i("axis", -1), r + 1)?;
            let idx = cx.cast(idx, DType::I64)?;
            let zero = cx.scalar(DType::I64, 0.0);
            let dc = cx.scalar(DType::I64, depth as f64);
            let neg = cx.bin(BinaryOp::Lt, idx, zero)?;
            let wrapped = cx.bin(BinaryOp::Add, idx, dc)?;
            let idx = cx.prim(MirOp::Where, &[neg, wrapped, idx])?;
            let idx = cx.unsqueeze(idx, &[ax])?;
            let mut rs = vec![1usize; r + 1];
            rs[ax] = depth.max(0) as usize;
            let ids: Vec<i64> = (0..depth.max(0)).collect();
            let rg = cx.konst(ConstData::from_i64(rs, &ids));
            let eq = cx.bin(BinaryOp::Eq, idx, rg)?;
            let off = cx.prim(MirOp::Slice { axes: vec![0], starts: vec![0], ends: vec![1], steps: vec![1] }, &[vals])?;
            let on = cx.prim(MirOp::Slice { axes: vec![0], starts: vec![1], ends: vec![2], steps: vec![1] }, &[vals])?;
            let off = cx.reshape(off, vec![])?;
            let on = cx.reshape(on, vec![])?;
            one(cx.prim(MirOp::Where, &[eq, on, off])?)
        }
        "EyeLike" => {
            let x = req(0)?;
            let xd = cx.fixed_dims(x, op)?;
            if xd.len() != 2 {
                return Err("EyeLike needs a 2-D input".into());
            }
            let dt = if a.has("dtype") { dtype_from_onnx(a.i("dtype", 1) as i32)? } else { cx.dtype(x) };
            let k = a.i("k", 0);
            let mut v = Vec::with_capacity(xd[0] * xd[1]);
            for i in 0..xd[0] as i64 {
                for j in 0..xd[1] as i64 {
                    v.push((j - i == k) as i64 as f64);
                }
            }
            one(cx.konst(ConstData::from_f64s(dt, xd, &v)))
        }
        "Range" => {
            let (s, l, d) = (req(0)?, req(1)?, req(2)?);
            let dt = cx.dtype(s);
            let (sv, lv, dv) = (cx.const_f64s(s, "Range start")?[0], cx.const_f64s(l, "Range limit")?[0], cx.const_f64s(d, "Range delta")?[0]);
            if dv == 0.0 {
                return Err("Range delta is 0".into());
            }
            let n = ((lv - sv) / dv).ceil().max(0.0);
            if n > 1e8 {
                return Err(format!("Range of {n} elements is too large"));
            }
            let v: Vec<f64> = if dt.is_float() {
                (0..n as usize).map(|i| sv + i as f64 * dv).collect()
            } else {
                (0..n as usize).map(|i| (sv as i64 + i as i64 * dv as i64) as f64).collect()
            };
            one(cx.konst(ConstData::from_f64s(dt, vec![v.len()], &v)))
        }
        "DepthToSpace" | "SpaceToDepth" => {
            let x = req(0)?;
            let d = cx.fixed_dims(x, op)?;
            if d.len() != 4 {
                return Err(format!("{op} needs a 4-D input"));
            }
            let b = a.i("blocksize", 1).max(1) as usize;
            let (nb, c, h, w) = (d[0], d[1], d[2], d[3]);
            if op == "DepthToSpace" {
                let crd = a.s("mode").as_deref() == Some("CRD");
                let (s1, perm) = if crd {
                    (vec![nb, c / (b * b), b, b, h, w], vec![0, 1, 4, 2, 5, 3])
                } else {
                    (vec![nb, b, b, c / (b * b), h, w], vec![0, 3, 4, 1, 5, 2])
                };
                let y = cx.reshape_u(x, &s1)?;
                let y = cx.transpose(y, perm)?;
                one(cx.reshape_u(y, &[nb, c / (b * b), h * b, w * b])?)
            } else {
                let y = cx.reshape_u(x, &[nb, c, h / b, b, w / b, b])?;
                let perm = if a.s("mode").as_deref() == Some("CRD") { vec![0, 1, 3, 5, 2, 4] } else { vec![0, 3, 5, 1, 2, 4] };
                let y = cx.transpose(y, perm)?;
                one(cx.reshape_u(y, &[nb, c * b * b, h / b, w / b])?)
            }
        }
        "LRN" => {
            let x = req(0)?;
            let d = cx.fixed_dims(x, op)?;
            let size = a.i("size", 1).max(1) as usize;
            let (alpha, beta, bias) = (a.f("alpha", 1e-4), a.f("beta", 0.75), a.f("bias", 1.0));
            let c = d[1];
            let rest: usize = d[2..].iter().product();
            let sq = cx.bin(BinaryOp::Mul, x, x)?;
            let s4 = cx.reshape_u(sq, &[d[0], 1, c, rest])?;
            let lo = (size - 1) / 2;
            let hi = size - 1 - lo;
            let avg = cx.prim(
                MirOp::Pool {
                    kind: PoolKind::Avg,
                    kernel: vec![size, 1],
                    strides: vec![1, 1],
                    pads: vec![lo, 0, hi, 0],
                    dilations: vec![1, 1],
                    ceil_mode: false,
                    count_include_pad: true,
                },
                &[s4],
            )?;
            let avg = cx.reshape_u(avg, &d)?;
            // avg = sum/size, so alpha/size*sum = alpha*avg
            let t = cx.mul_sc(avg, alpha)?;
            let t = cx.add_sc(t, bias)?;
            let be = cx.sc(x, beta);
            let t = cx.bin(BinaryOp::Pow, t, be)?;
            one(cx.bin(BinaryOp::Div, x, t)?)
        }
        "NegativeLogLikelihoodLoss" | "SoftmaxCrossEntropyLoss" => {
            let (mut x, t) = (req(0)?, req(1)?);
            let mut outs = Vec::new();
            if op == "SoftmaxCrossEntropyLoss" {
                x = cx.softmax(x, 1, true)?;
            }
            let red = a.s("reduction").unwrap_or_else(|| "mean".into());
            let ii = a.has("ignore_index").then(|| a.i("ignore_index", 0));
            let t = cx.cast(t, DType::I64)?;
            let (t_safe, valid) = match ii {
                Some(ii) => {
                    let c = cx.scalar(DType::I64, ii as f64);
                    let eq = cx.bin(BinaryOp::Eq, t, c)?;
                    let valid = cx.un(UnaryOp::Not, eq)?;
                    let z = cx.scalar(DType::I64, 0.0);
                    (cx.prim(MirOp::Where, &[valid, t, z])?, Some(valid))
                }
                None => (t, None),
            };
            let tu = cx.unsqueeze(t_safe, &[1])?;
            let g = cx.prim(MirOp::GatherElements { axis: 1 }, &[x, tu])?;
            let g = cx.reshape(g, cx.dims(t_safe))?;
            let mut loss = cx.un(UnaryOp::Neg, g)?;
            let dt = cx.dtype(x);
            let wg = match (inp(2), valid) {
                (Some(w), v) => {
                    let wg = cx.prim(MirOp::Gather { axis: 0 }, &[w, t_safe])?;
                    match v {
                        Some(v) => {
                            let z = cx.scalar(dt, 0.0);
                            Some(cx.prim(MirOp::Where, &[v, wg, z])?)
                        }
                        None => Some(wg),
                    }
                }
                (None, Some(v)) => Some(cx.cast(v, dt)?),
                (None, None) => None,
            };
            if let Some(w) = wg {
                loss = cx.bin(BinaryOp::Mul, loss, w)?;
            }
            let r = cx.rank(loss);
            let all: Vec<usize> = (0..r).collect();
            let y = match (red.as_str(), wg) {
                ("none", _) => loss,
                ("sum", _) => cx.reduce(ReduceOp::Sum, loss, all, false)?,
                (_, Some(w)) => {
                    let s = cx.reduce(ReduceOp::Sum, loss, all.clone(), false)?;
                    let ws = cx.reduce(ReduceOp::Sum, w, all, false)?;
                    cx.bin(BinaryOp::Div, s, ws)?
                }
                (_, None) => cx.reduce(ReduceOp::Mean, loss, all, false)?,
            };
            outs.push(y);
            if op == "SoftmaxCrossEntropyLoss" {
                outs.push(x);
            }
            Ok(outs)
        }
        "LpNormalization" => {
            let x = req(0)?;
            let ax = norm_axis(a.i("axis", -1), cx.rank(x))?;
            let nrm = if a.i("p", 2) == 1 {
                let ab = cx.un(UnaryOp::Abs, x)?;
                cx.reduce(ReduceOp::Sum, ab, vec![ax], true)?
            } else {
                let sq = cx.bin(BinaryOp::Mul, x, x)?;
                let s = cx.reduce(ReduceOp::Sum, sq, vec![ax], true)?;
                cx.un(UnaryOp::Sqrt, s)?
            };
            let z = cx.sc(nrm, 0.0);
            let o = cx.sc(nrm, 1.0);
            let is0 = cx.bin(BinaryOp::Eq, nrm, z)?;
            let nrm = cx.prim(MirOp::Where, &[is0, o, nrm])?;
            one(cx.bin(BinaryOp::Div, x, nrm)?)
        }
        "Attention" => attention(cx, &a, ins, nout),
        "Einsum" => einsum(cx, &a.s("equation").unwrap_or_default(), &ins.iter().flatten().copied().collect::<Vec<_>>()),
        _ => Err(format!("unsupported op {op}")),
    }
}

/// Einsum as transpose/reshape + broadcast multiply + sum: every operand is laid out over all the
/// equation's letters (missing ones as size-1 dims), multiplied, and summed over the letters not in
/// the output. Repeated letters within one operand (diagonals) are not supported.
fn einsum(cx: &mut Ctx, eq: &str, ins: &[ValueId]) -> R {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ins.len() {
        return Err(format!("einsum '{eq}' names {} operands, got {}", terms.len(), ins.len()));
    }
    // Expand '...' into upper-case placeholder letters: the dims an operand's rank has beyond its
    // term's letters.
    let mut ell_ranks = Vec::with_capacity(terms.len());
    for (t, &v) in terms.iter().zip(ins) {
        let letters = t.chars().count();
        ell_ranks.push(match t.contains("...") {
            true => cx.rank(v).checked_sub(letters - 3).ok_or_else(|| format!("einsum term '{t}' has more letters than its operand's rank {}", cx.rank(v)))?,
            false => 0,
        });
    }
    let ell_rank = ell_ranks.iter().copied().max().unwrap_or(0);
    if ell_rank > 26 {
        return Err(format!("einsum '{eq}': '...' stands for {ell_rank} dims, more than the 26 supported"));
    }
    let ell: String = (0..ell_rank).map(|i| (b'A' + i as u8) as char).collect();
    let mut subs: Vec<Vec<char>> = Vec::new();
    for ((t, &v), &k) in terms.iter().zip(ins).zip(&ell_ranks) {
        let s = if t.contains("...") {
            t.replace("...", &ell[ell_rank - k..])
        } else {
            t.to_string()
        };
        let cs: Vec<char> = s.chars().collect();
        if cs.len() != cx.rank(v) {
            return Err(format!("einsum term '{t}' does not match rank {}", cx.rank(v)));
        }
        let mut u = cs.clone();
        u.sort();
        u.dedup();
        if u.len() != cs.len() {
            return Err("unsupported: einsum with a repeated index in one operand".into());
        }
        subs.push(cs);
    }
    let out: Vec<char> = match rhs {
        Some(r) => r.replace("...", &ell).chars().collect(),
        None => {
            let mut cnt = std::collections::BTreeMap::new();
            for s in &subs {
                for &c in s {
                    *cnt.entry(c).or_insert(0) += 1;
                }
            }
            let mut o: Vec<char> = ell.chars().collect();
            o.extend(cnt.iter().filter(|(c, &n)| n == 1 && c.is_ascii_lowercase()).map(|(c, _)| *c));
            o
        }
    };
    let mut all: Vec<char> = out.clone();
    for s in &subs {
        for &c in s {
            if !all.contains(&c) {
                all.push(c);
            }
        }
    }
    let mut acc: Option<ValueId> = None;
    for (s, &v) in subs.iter().zip(ins) {
        let d = cx.dims(v);
        let mut present: Vec<char> = all.iter().filter(|c| s.contains(c)).copied().collect();
        let perm: Vec<usize> = present.iter().map(|c| s.iter().position(|x| x == c).unwrap()).collect();
        let t = cx.transpose(v, perm.clone())?;
        let shape: Vec<Dim> = all.iter().map(|c| match s.iter().position(|x| x == c) {
            Some(p) => d[p].clone(),
            None => Dim::Fixed(1),
        }).collect();
        present.clear();
        let t = cx.reshape(t, shape)?;
        acc = Some(match acc {
            None => t,
            Some(a) => cx.bin(BinaryOp::Mul, a, t)?,
        });
    }
    let acc = acc.ok_or("einsum without operands")?;
    let red: Vec<usize> = (out.len()..all.len()).collect();
    let y = if red.is_empty() { acc } else { cx.reduce(ReduceOp::Sum, acc, red, false)? };
    Ok(vec![y])
}

fn neg_inf_where(cx: &mut Ctx, allowed: ValueId, dt: DType) -> Result<ValueId, String> {
    let z = cx.scalar(dt, 0.0);
    let ni = cx.scalar(dt, f64::NEG_INFINITY);
    cx.prim(MirOp::Where, &[allowed, z, ni])
}

/// ONNX Attention (opset 23+), following the reference: 3-D inputs split into heads, past K/V
/// concatenated, causal / sliding-window / padding biases, GQA head repetition, softcap, and the
/// fully-masked-row guard.
fn attention(cx: &mut Ctx, a: &Attrs, ins: &[Option<ValueId>], nout: usize) -> R {
    let inp = |i: usize| ins.get(i).copied().flatten();
    let (mut q, mut k, mut v) = (inp(0).ok_or("Q required")?, inp(1).ok_or("K required")?, inp(2).ok_or("V required")?);
    let dt = cx.dtype(q);
    let three = cx.rank(q) == 3;
    if three {
        let (qh, kvh) = (a.i("q_num_heads", 0), a.i("kv_num_heads", 0));
        if qh <= 0 || kvh <= 0 {
            return Err("3-D Attention needs q_num_heads and kv_num_heads".into());
        }
        for (t, h) in [(&mut q, qh), (&mut k, kvh), (&mut v, kvh)] {
            let d = cx.fixed_dims(*t, "Attention")?;
            let x = cx.reshape_u(*t, &[d[0], d[1], h as usize, d[2] / h as usize])?;
            *t = cx.transpose(x, vec![0, 2, 1, 3])?;
        }
    }
    let past_len = match inp(4) {
        Some(pk) => {
            let l = cx.fixed_dims(pk, "past_key")?[2];
            k = cx.prim(MirOp::Concat { axis: 2 }, &[pk, k])?;
            l
        }
        None => 0,
    };
    if let Some(pv) = inp(5) {
        v = cx.prim(MirOp::Concat { axis: 2 }, &[pv, v])?;
    }
    let (present_k, present_v) = (k, v);
    let qd = cx.fixed_dims(q, "Attention Q")?;
    let kd = cx.fixed_dims(k, "Attention K")?;
    let (batch, qh, qs, hd) = (qd[0], qd[1], qd[2], qd[3]);
    let (kvh, kvs) = (kd[1], kd[2]);
    let nonpad = inp(6);
    let mut bias: Option<ValueId>;
    let mut mask = inp(3);
    if let Some(m) = mask {
        let md = cx.fixed_dims(m, "attn_mask")?;
        let last = *md.last().ok_or("attn_mask must have rank >= 1")?;
        if last < kvs {
            let r = md.len();
            let mut pads = vec![0i64; 2 * r];
            pads[2 * r - 1] = (kvs - last) as i64;
            let val = if cx.dtype(m) == DType::Bool { 0.0 } else { f64::NEG_INFINITY };
            mask = Some(cx.prim(MirOp::Pad { pads, mode: PadMode::Constant, value: val }, &[m])?);
        }
    }
    let mask = match mask {
        Some(m) if cx.dtype(m) == DType::Bool => Some(neg_inf_where(cx, m, dt)?),
        Some(m) => Some(cx.cast(m, dt)?),
        None => None,
    };
    let causal = a.i("is_causal", 0) != 0;
    let (lw, rw) = (a.i("left_window_size", -1), a.i("right_window_size", -1));
    // diff[i,j] = i + offset - j for a static offset.
    let static_diff = |off: i64| -> Vec<i64> {
        let mut d = Vec::with_capacity(qs * kvs);
        for i in 0..qs as i64 {
            for j in 0..kvs as i64 {
                d.push(i + off - j);
            }
        }
        d
    };
    if causal {
        let allowed = match nonpad.filter(|_| past_len == 0) {
            Some(np) => {
                // j <= i + nonpad[b] - qs  <=>  j - i + qs <= nonpad[b]
                let d: Vec<i64> = static_diff(0).iter().map(|x| -x + qs as i64).collect();
                let dc = cx.konst(ConstData::from_i64(vec![1, 1, qs, kvs], &d));
                let np = cx.cast(np, DType::I64)?;
                let np = cx.reshape_u(np, &[batch, 1, 1, 1])?;
                cx.bin(BinaryOp::Le, dc, np)?
            }
            None => {
                let d: Vec<f64> = static_diff(past_len as i64).iter().map(|&x| (x >= 0) as i64 as f64).collect();
                cx.konst(ConstData::from_f64s(DType::Bool, vec![qs, kvs], &d))
            }
        };
        let c = neg_inf_where(cx, allowed, dt)?;
        bias = Some(match mask {
            Some(m) => cx.bin(BinaryOp::Add, m, c)?,
            None => c,
        });
    } else {
        bias = mask;
    }
    if lw >= 0 || rw >= 0 {
        if nonpad.is_some() && past_len == 0 {
            return Err("unsupported: Attention sliding window with nonpad_kv_seqlen".into());
        }
        let d: Vec<f64> = static_diff(past_len as i64)
            .iter()
            .map(|&x| ((lw < 0 || x <= lw) && (rw < 0 || -x <= rw)) as i64 as f64)
            .collect();
        let al = cx.konst(ConstData::from_f64s(DType::Bool, vec![qs, kvs], &d));
        let w = neg_inf_where(cx, al, dt)?;
        bias = Some(match bias {
            Some(b) => cx.bin(BinaryOp::Add, b, w)?,
            None => w,
        });
    }
    if let Some(np) = nonpad {
        let ids: Vec<i64> = (0..kvs as i64).collect();
        let r = cx.konst(ConstData::from_i64(vec![1, kvs], &ids));
        let np = cx.cast(np, DType::I64)?;
        let np = cx.reshape_u(np, &[batch, 1])?;
        let lt = cx.bin(BinaryOp::Lt, r, np)?;
        let lt = cx.reshape_u(lt, &[batch, 1, 1, kvs])?;
        let pm = neg_inf_where(cx, lt, dt)?;
        bias = Some(match bias {
            Some(b) => cx.bin(BinaryOp::Add, b, pm)?,
            None => pm,
        });
    }
    if qh != kvh {
        if kvh == 0 || qh % kvh != 0 {
            return Err(format!("{qh} query heads are not a multiple of {kvh} kv heads"));
        }
        let rep = qh / kvh;
        for t in [&mut k, &mut v] {
            let d = cx.fixed_dims(*t, "Attention")?;
            let x = cx.reshape_u(*t, &[d[0], d[1], 1, d[2], d[3]])?;
            let x = cx.prim(MirOp::Expand { shape: [d[0], d[1], rep, d[2], d[3]].iter().map(|&n| Dim::Fixed(n as u64)).collect() }, &[x])?;
            *t = cx.reshape_u(x, &[d[0], qh, d[2], d[3]])?;
        }
    }
    let scale = if a.has("scale") { a.f("scale", 1.0) } else { 1.0 / (hd as f64).sqrt() };
    let ss = scale.sqrt();
    let qsc = cx.mul_sc(q, ss)?;
    let kt = cx.transpose(k, vec![0, 1, 3, 2])?;
    let ksc = cx.mul_sc(kt, ss)?;
    let mut qk = cx.prim(MirOp::MatMul, &[qsc, ksc])?;
    let softcap = a.f("softcap", 0.0);
    if softcap > 0.0 {
        let t = cx.mul_sc(qk, 1.0 / softcap)?;
        let t = cx.un(UnaryOp::Tanh, t)?;
        qk = cx.mul_sc(t, softcap)?;
    }
    let qkb = match bias {
        Some(b) => cx.bin(BinaryOp::Add, qk, b)?,
        None => qk,
    };
    let mode = a.i("qk_matmul_output_mode", 0);
    let sp = if a.has("softmax_precision") { dtype_from_onnx(a.i("softmax_precision", 1) as i32)? } else { dt };
    let x = cx.cast(qkb, sp)?;
    let m = cx.reduce(ReduceOp::Max, x, vec![3], true)?;
    let mi = cx.un(UnaryOp::IsNegInf, m)?;
    let z = cx.scalar(sp, 0.0);
    let m = cx.prim(MirOp::Where, &[mi, z, m])?;
    let d = cx.bin(BinaryOp::Sub, x, m)?;
    let e = cx.un(UnaryOp::Exp, d)?;
    let s = cx.reduce(ReduceOp::Sum, e, vec![3], true)?;
    let s0 = cx.bin(BinaryOp::Eq, s, z)?;
    let one_ = cx.scalar(sp, 1.0);
    let s = cx.prim(MirOp::Where, &[s0, one_, s])?;
    let mut p = cx.bin(BinaryOp::Div, e, s)?;
    if let Some(b) = bias {
        let bm = cx.reduce(ReduceOp::Max, b, vec![cx.rank(b) - 1], true)?;
        let ram = cx.un(UnaryOp::IsNegInf, bm)?;
        let z = cx.scalar(sp, 0.0);
        p = cx.prim(MirOp::Where, &[ram, z, p])?;
    }
    let p = cx.cast(p, dt)?;
    let mut y = cx.prim(MirOp::MatMul, &[p, v])?;
    if three {
        y = cx.transpose(y, vec![0, 2, 1, 3])?;
        let yd = cx.fixed_dims(y, "Attention")?;
        y = cx.reshape_u(y, &[yd[0], yd[1], yd[2] * yd[3]])?;
    }
    let mut outs = vec![y, present_k, present_v];
    if nout > 3 {
        let o = match mode {
            2 => qkb,
            3 => p,
            _ => qk,
        };
        outs.push(o);
    }
    Ok(outs)
}
