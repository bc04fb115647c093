//! Reverse- and forward-mode differentiation (rlx_opt::autodiff), run on the reference interpreter.
//!
//! - Every op with a rule: the gradient of Σ R·op(inputs) (R a fixed random weighting) against f64
//!   central finite differences, step 1e-6, tolerance |ad − fd| ≤ 1e-6·(1 + |fd|). (Ops that only exist
//!   for f32, and a cast through f32, use f32 with step 1e-2 on functions that are linear there, and a
//!   tolerance of 1e-4·(1 + |fd|).)
//! - Softmax, log-softmax, LayerNorm, GELU and attention through their primitive decomposition (the HIR
//!   blocks lowered by `rlx_opt::lower`) against finite differences the same way.
//! - Third derivatives of x³, tanh, GELU (erf form) and SiLU, by grad∘grad∘grad, against closed forms.
//! - jvp against finite differences and against the vjp (⟨jvp(t), u⟩ = ⟨t, vjp(u)⟩); hvp against
//!   finite differences of the gradient.
//! - Convolution (strides, asymmetric pads, dilations, 1-D and 2-D; grouped for the input and bias)
//!   against finite differences the same way; max and average pooling (pads, dilations, ceil mode,
//!   count_include_pad) and transposed convolution too; a Hessian-vector product through all of them.
//! - An op without a rule is an error naming the node and op.

use rlx_interp::run;
use rlx_ir::{BinaryOp, ConstData, DType, Hir, HirOp, Mir, MirOp, OpSet, PadMode, PoolKind, ReduceOp, Shape, TensorType, UnaryOp, ValueId};
use rlx_opt::autodiff::{grad, hvp, jvp, vjp};

/// A deterministic stream of values in [lo, hi).
struct Rng(u64);
impl Rng {
    fn next(&mut self, lo: f64, hi: f64) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        lo + (hi - lo) * ((self.0 >> 11) as f64 / (1u64 << 53) as f64)
    }
    fn vec(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.next(lo, hi)).collect()
    }
}

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

fn tensor(dt: DType, shape: &[usize], v: &[f64]) -> ConstData {
    ConstData::from_f64s(dt, shape.to_vec(), v)
}

/// `g` with its output 0 replaced by Σ R ⊙ output (R fixed, random).
fn weighted(g: &Mir, seed: u64) -> Mir {
    let mut h = g.clone();
    let o = h.outputs[0];
    let t = h.ty(o).clone();
    let dims = t.shape.as_fixed().unwrap();
    let r = h.add_const(None, tensor(t.dtype, &dims, &Rng(seed).vec(numel(&dims), -1.0, 1.0)));
    let p = h.add1("w/mul", MirOp::Binary(BinaryOp::Mul), &[o, r]).unwrap();
    let s = h.add1("w/sum", MirOp::Reduce { op: ReduceOp::Sum, axes: (0..dims.len()).collect(), keepdims: false }, &[p]).unwrap();
    h.outputs = vec![s];
    h
}

fn scalar_of(g: &Mir, ins: &[ConstData]) -> f64 {
    run(g, ins).unwrap()[0].get_f64(0)
}

/// Gradient of Σ R·output0 with respect to every float input of `g`, against central differences.
fn check_grad(what: &str, g: &Mir, ins: &[ConstData], eps: f64, tol: f64) {
    let w = weighted(g, 99);
    let wrt: Vec<usize> = (0..ins.len()).filter(|&k| ins[k].dtype.is_float()).collect();
    let gg = grad(&w, 0, &wrt).unwrap_or_else(|e| panic!("{what}: {e}"));
    let ad = run(&gg, ins).unwrap_or_else(|e| panic!("{what}: {e}"));
    for (j, &k) in wrt.iter().enumerate() {
        assert_eq!(ad[j].shape, ins[k].shape, "{what}: gradient shape");
        for e in 0..ins[k].numel() {
            let mut p = ins.to_vec();
            let mut m = ins.to_vec();
            let mut vp = ins[k].to_f64_vec();
            let mut vm = vp.clone();
            vp[e] += eps;
            vm[e] -= eps;
            p[k] = tensor(ins[k].dtype, &ins[k].shape, &vp);
            m[k] = tensor(ins[k].dtype, &ins[k].shape, &vm);
            let fd = (scalar_of(&w, &p) - scalar_of(&w, &m)) / (2.0 * eps);
            let a = ad[j].get_f64(e);
            assert!((a - fd).abs() <= tol * (1.0 + fd.abs()), "{what}: input {k} element {e}: autodiff {a}, finite differences {fd}");
        }
    }
}

/// A one-node graph over inputs of the given types (`Some(data)`: a constant instead of an input).
struct Case {
    g: Mir,
    ins: Vec<ConstData>,
}

fn case(op: MirOp, operands: Vec<(ConstData, bool)>) -> Case {
    let mut g = Mir::new();
    let mut ids = Vec::new();
    let mut ins = Vec::new();
    for (k, (d, is_input)) in operands.into_iter().enumerate() {
        if is_input {
            ids.push(g.add_input(&format!("x{k}"), TensorType::fixed(d.dtype, &d.shape)));
            ins.push(d);
        } else {
            ids.push(g.add_const(Some(&format!("c{k}")), d));
        }
    }
    let o = g.add_node("op", op, &ids).unwrap()[0];
    g.outputs = vec![o];
    Case { g, ins }
}

const F64_EPS: f64 = 1e-6;
const F64_TOL: f64 = 1e-6;

fn f64t(shape: &[usize], v: Vec<f64>) -> (ConstData, bool) {
    (tensor(DType::F64, shape, &v), true)
}

fn check(what: &str, c: Case) {
    check_grad(what, &c.g, &c.ins, F64_EPS, F64_TOL);
}

#[test]
fn unary_rules_match_finite_differences() {
    use UnaryOp::*;
    let mut r = Rng(1);
    // Domains keep each function smooth and away from kinks at the sampled points.
    let away = |v: Vec<f64>| v.into_iter().map(|x| if x.abs() < 0.2 { x + 0.4 * x.signum() + 0.1 } else { x }).collect::<Vec<_>>();
    for (u, lo, hi) in [
        (Neg, -2.0, 2.0), (Exp, -2.0, 2.0), (Log, 0.2, 3.0), (Sqrt, 0.2, 3.0), (Recip, 0.3, 2.0), (Sin, -3.0, 3.0),
        (Cos, -3.0, 3.0), (Tan, -1.0, 1.0), (Asin, -0.9, 0.9), (Acos, -0.9, 0.9), (Atan, -3.0, 3.0), (Sinh, -2.0, 2.0),
        (Cosh, -2.0, 2.0), (Tanh, -2.0, 2.0), (Asinh, -3.0, 3.0), (Acosh, 1.2, 3.0), (Atanh, -0.9, 0.9), (Sigmoid, -3.0, 3.0),
        (Erf, -2.0, 2.0),
    ] {
        check(u.name(), case(MirOp::Unary(u), vec![f64t(&[2, 3], r.vec(6, lo, hi))]));
    }
    for u in [Abs, Relu] {
        check(u.name(), case(MirOp::Unary(u), vec![f64t(&[2, 3], away(r.vec(6, -2.0, 2.0)))]));
    }
    // Piecewise constant: the zero rule; sampled away from the steps, finite differences are 0 too.
    for u in [Floor, Ceil, Round, Sign] {
        check(u.name(), case(MirOp::Unary(u), vec![f64t(&[4], vec![-1.3, 0.2, 1.7, 2.6])]));
    }
}

#[test]
fn binary_rules_with_broadcasting_match_finite_differences() {
    use BinaryOp::*;
    let mut r = Rng(2);
    for op in [Add, Sub, Mul, Div, Max, Min] {
        for (sa, sb) in [(vec![2, 3], vec![2, 3]), (vec![2, 3], vec![3]), (vec![2, 1], vec![1, 3]), (vec![], vec![2, 3])] {
            let a = r.vec(numel(&sa), 0.5, 2.0);
            // Distinct from a everywhere (max/min have no ties).
            let b = r.vec(numel(&sb), 2.5, 4.0).into_iter().map(|x| if op == Max || op == Min { x - 2.2 } else { x }).collect();
            check(&format!("{} {sa:?} {sb:?}", op.name()), case(MirOp::Binary(op), vec![f64t(&sa, a), f64t(&sb, b)]));
        }
    }
    check("pow", case(MirOp::Binary(Pow), vec![f64t(&[2, 3], r.vec(6, 0.5, 2.0)), f64t(&[3], r.vec(3, -1.5, 2.5))]));
    let int_exp = (tensor(DType::I64, &[3], &[2.0, 3.0, -1.0]), false);
    check("pow (int exponent)", case(MirOp::Binary(Pow), vec![f64t(&[2, 3], r.vec(6, 0.5, 2.0)), int_exp]));
    // Quotients a/b well inside (k, k+1): mod and fmod are smooth there.
    for op in [Mod, FMod] {
        check(op.name(), case(MirOp::Binary(op), vec![f64t(&[4], vec![5.3, -5.3, 7.9, -2.2]), f64t(&[4], vec![2.0, 2.0, -3.0, 1.5])]));
    }
}

#[test]
fn where_cast_matmul_rules_match_finite_differences() {
    let mut r = Rng(3);
    let cond = (tensor(DType::Bool, &[2, 1], &[1.0, 0.0]), false);
    check("where", case(MirOp::Where, vec![cond, f64t(&[2, 3], r.vec(6, -1.0, 1.0)), f64t(&[3], r.vec(3, -1.0, 1.0))]));
    for (sa, sb) in [
        (vec![2, 3], vec![3, 4]),
        (vec![3], vec![3, 4]),
        (vec![2, 3], vec![3]),
        (vec![3], vec![3]),
        (vec![2, 2, 3], vec![3, 4]),
        (vec![1, 2, 3], vec![2, 3, 4]),
    ] {
        let c = case(MirOp::MatMul, vec![f64t(&sa, r.vec(numel(&sa), -1.0, 1.0)), f64t(&sb, r.vec(numel(&sb), -1.0, 1.0))]);
        check(&format!("matmul {sa:?} {sb:?}"), c);
    }
    // f64 → f32 → f64: linear, so a wide step measures it exactly up to f32 rounding.
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F64, &[4]));
    let y = g.add1("to32", MirOp::Cast { to: DType::F32 }, &[x]).unwrap();
    let z = g.add1("to64", MirOp::Cast { to: DType::F64 }, &[y]).unwrap();
    g.outputs = vec![z];
    check_grad("cast", &g, &[tensor(DType::F64, &[4], &r.vec(4, -1.0, 1.0))], 1e-2, 1e-4);
    // dequant_matmul is f32-only; with an f32 weight it is linear in x.
    let w = (tensor(DType::F32, &[3, 4], &r.vec(12, -1.0, 1.0)), false);
    let c = case(MirOp::DequantMatMul, vec![(tensor(DType::F32, &[2, 4], &r.vec(8, -1.0, 1.0)), true), w]);
    check_grad("dequant_matmul", &c.g, &c.ins, 1e-2, 1e-4);
}

#[test]
fn reduction_rules_match_finite_differences() {
    let mut r = Rng(4);
    for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod] {
        for (axes, keepdims) in [(vec![1], false), (vec![0, 2], true), (vec![0, 1, 2], false)] {
            let c = case(MirOp::Reduce { op, axes: axes.clone(), keepdims }, vec![f64t(&[2, 3, 2], r.vec(12, 0.5, 2.0))]);
            check(&format!("reduce_{} {axes:?} {keepdims}", op.name()), c);
        }
    }
    for (exclusive, reverse) in [(false, false), (true, false), (false, true), (true, true)] {
        check("cumsum", case(MirOp::CumSum { axis: 1, exclusive, reverse }, vec![f64t(&[2, 4], r.vec(8, -1.0, 1.0))]));
    }
}

#[test]
fn movement_rules_match_finite_differences() {
    let mut r = Rng(5);
    let x = || f64t(&[2, 3, 4], Rng(6).vec(24, -1.0, 1.0));
    check("reshape", case(MirOp::Reshape { shape: Shape::fixed(&[6, 4]).0 }, vec![x()]));
    check("transpose", case(MirOp::Transpose { perm: vec![2, 0, 1] }, vec![x()]));
    check("expand", case(MirOp::Expand { shape: Shape::fixed(&[2, 2, 3]).0 }, vec![f64t(&[2, 1, 3], r.vec(6, -1.0, 1.0))]));
    check("expand (new axes)", case(MirOp::Expand { shape: Shape::fixed(&[4, 2, 3]).0 }, vec![f64t(&[3], r.vec(3, -1.0, 1.0))]));
    let sl = MirOp::Slice { axes: vec![1, 2], starts: vec![1, -3], ends: vec![3, 100], steps: vec![1, 1] };
    check("slice", case(sl, vec![x()]));
    let strided = MirOp::Slice { axes: vec![2, 1], starts: vec![0, -1], ends: vec![4, -100], steps: vec![3, -2] };
    check("slice (steps 3, -2)", case(strided, vec![x()]));
    let rev = MirOp::Slice { axes: vec![0, 2], starts: vec![5, 3], ends: vec![-10, 0], steps: vec![-1, -2] };
    check("slice (steps -1, -2)", case(rev, vec![x()]));
    check("concat", case(MirOp::Concat { axis: 1 }, vec![f64t(&[2, 1, 2], r.vec(4, -1.0, 1.0)), f64t(&[2, 3, 2], r.vec(12, -1.0, 1.0))]));
    check("pad", case(MirOp::Pad { pads: vec![1, 0, -1, 0, 2, 1], mode: PadMode::Constant, value: 0.5 }, vec![x()]));
    // Repeated and negative indices: their gradients add up.
    let idx = (tensor(DType::I64, &[2, 2], &[0.0, -1.0, 2.0, 0.0]), false);
    check("gather", case(MirOp::Gather { axis: 1 }, vec![x(), idx]));
    let idx32 = (tensor(DType::I32, &[3], &[3.0, 1.0, 3.0]), false);
    check("gather (i32, last axis)", case(MirOp::Gather { axis: 2 }, vec![x(), idx32]));
    // gather_elements: indices shorter than the data on other axes, negative and repeated.
    let ie = (tensor(DType::I64, &[2, 2, 3], &[0.0, -1.0, 2.0, 1.0, 1.0, 0.0, 2.0, 2.0, -3.0, 0.0, 1.0, 1.0]), false);
    check("gather_elements", case(MirOp::GatherElements { axis: 1 }, vec![x(), ie]));
    for largest in [true, false] {
        check("topk", case(MirOp::TopK { axis: 2, k: 2, largest }, vec![x()]));
    }
}

#[test]
fn conv_rule_matches_finite_differences() {
    let mut r = Rng(8);
    // (input shape, weight shape, strides, pads, dilations)
    for (xs, ws, st, pd, dl) in [
        (vec![1, 2, 5, 5], vec![3, 2, 3, 3], vec![1, 1], vec![0, 0, 0, 0], vec![1, 1]),
        (vec![2, 2, 6, 5], vec![2, 2, 3, 2], vec![2, 1], vec![1, 0, 0, 1], vec![1, 1]),
        (vec![1, 1, 7, 7], vec![2, 1, 2, 3], vec![2, 2], vec![1, 1, 1, 1], vec![2, 1]),
        (vec![1, 2, 8], vec![2, 2, 3], vec![3], vec![2, 1], vec![1]),
    ] {
        let op = MirOp::Conv { strides: st.clone(), pads: pd.clone(), dilations: dl.clone(), groups: 1 };
        let m = ws[0];
        let c = case(op, vec![f64t(&xs, r.vec(numel(&xs), -1.0, 1.0)), f64t(&ws, r.vec(numel(&ws), -1.0, 1.0)), f64t(&[m], r.vec(m, -1.0, 1.0))]);
        check(&format!("conv {xs:?} {ws:?} strides {st:?} pads {pd:?} dilations {dl:?}"), c);
    }
    // Grouped (depthwise): the input and bias have rules, the weights are constants here.
    let op = MirOp::Conv { strides: vec![1, 1], pads: vec![1, 1, 1, 1], dilations: vec![1, 1], groups: 2 };
    let w = (tensor(DType::F64, &[2, 1, 3, 3], &r.vec(18, -1.0, 1.0)), false);
    check("conv groups 2", case(op, vec![f64t(&[1, 2, 4, 4], r.vec(32, -1.0, 1.0)), w, f64t(&[2], r.vec(2, -1.0, 1.0))]));
}

#[test]
fn conv_transpose_rule_matches_finite_differences() {
    let mut r = Rng(10);
    // (input shape, weight shape [C, M, k…], strides, pads, dilations, output_padding)
    for (xs, ws, st, pd, dl, op) in [
        (vec![1, 2, 3, 3], vec![2, 3, 3, 3], vec![1, 1], vec![0, 0, 0, 0], vec![1, 1], vec![0, 0]),
        (vec![2, 2, 3, 2], vec![2, 1, 3, 2], vec![2, 1], vec![1, 0, 0, 1], vec![1, 2], vec![1, 0]),
        (vec![1, 1, 4], vec![1, 2, 3], vec![3], vec![1, 2], vec![2], vec![2]),
    ] {
        let m = ws[1];
        let conv = MirOp::ConvTranspose { strides: st.clone(), pads: pd.clone(), dilations: dl.clone(), groups: 1, output_padding: op.clone() };
        let c = case(conv, vec![f64t(&xs, r.vec(numel(&xs), -1.0, 1.0)), f64t(&ws, r.vec(numel(&ws), -1.0, 1.0)), f64t(&[m], r.vec(m, -1.0, 1.0))]);
        check(&format!("conv_transpose {xs:?} {ws:?} strides {st:?} pads {pd:?} dilations {dl:?} output_padding {op:?}"), c);
    }
    let conv = MirOp::ConvTranspose { strides: vec![2, 2], pads: vec![0; 4], dilations: vec![1, 1], groups: 2, output_padding: vec![1, 0] };
    let w = (tensor(DType::F64, &[2, 1, 2, 2], &r.vec(8, -1.0, 1.0)), false);
    check("conv_transpose groups 2", case(conv, vec![f64t(&[1, 2, 3, 3], r.vec(18, -1.0, 1.0)), w]));
}

/// Second order through conv, conv_transpose and pooling: the Hessian-vector product of
/// Σ tanh(avg_pool(max_pool(conv_transpose(tanh(conv(x, w))))))² against finite differences of the gradient.
#[test]
fn conv_and_pool_gradients_differentiate_again() {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F64, &[1, 2, 6, 6]));
    let w = g.add_input("w", TensorType::fixed(DType::F64, &[3, 2, 3, 3]));
    let wt = g.add_input("wt", TensorType::fixed(DType::F64, &[3, 2, 2, 2]));
    let c = g.add1("conv", MirOp::Conv { strides: vec![1, 1], pads: vec![1, 1, 1, 1], dilations: vec![1, 1], groups: 1 }, &[x, w]).unwrap();
    let t = un(&mut g, UnaryOp::Tanh, c);
    let ct = MirOp::ConvTranspose { strides: vec![2, 2], pads: vec![1, 1, 1, 1], dilations: vec![1, 1], groups: 1, output_padding: vec![0, 0] };
    let u = g.add1("convT", ct, &[t, wt]).unwrap();
    let mp = MirOp::Pool { kind: PoolKind::Max, kernel: vec![2, 2], strides: vec![2, 2], pads: vec![0; 4], dilations: vec![1, 1], ceil_mode: false, count_include_pad: false };
    let p = g.add1("maxpool", mp, &[u]).unwrap();
    let ap = MirOp::Pool { kind: PoolKind::Avg, kernel: vec![2, 2], strides: vec![1, 1], pads: vec![1, 0, 0, 1], dilations: vec![1, 1], ceil_mode: false, count_include_pad: false };
    let a = g.add1("avgpool", ap, &[p]).unwrap();
    let t2 = un(&mut g, UnaryOp::Tanh, a);
    let sq = bin(&mut g, BinaryOp::Mul, t2, t2);
    g.outputs = vec![sq];
    let mut r = Rng(14);
    let ins: Vec<ConstData> = [vec![1, 2, 6, 6], vec![3, 2, 3, 3], vec![3, 2, 2, 2]].iter().map(|s| tensor(DType::F64, s, &r.vec(numel(s), -1.0, 1.0))).collect();
    let v: Vec<ConstData> = ins.iter().map(|x| tensor(DType::F64, &x.shape, &r.vec(x.numel(), -1.0, 1.0))).collect();
    check_hvp(&g, &ins, &v, &[0, 1, 2]);
}

#[test]
fn pool_rules_match_finite_differences() {
    let mut r = Rng(9);
    // (kind, input shape, kernel, strides, pads, dilations, ceil_mode, count_include_pad); distinct
    // random inputs, so no window has a tie.
    for (kind, xs, k, st, pd, dl, ceil, inc) in [
        (PoolKind::Max, vec![1, 2, 4, 4], vec![2, 2], vec![2, 2], vec![0, 0, 0, 0], vec![1, 1], false, false),
        (PoolKind::Max, vec![2, 1, 5, 6], vec![3, 2], vec![2, 1], vec![1, 0, 1, 1], vec![1, 2], false, false),
        (PoolKind::Max, vec![1, 2, 5, 5], vec![2, 2], vec![2, 2], vec![0, 0, 0, 0], vec![1, 1], true, false),
        (PoolKind::Avg, vec![1, 2, 4, 4], vec![2, 2], vec![2, 2], vec![0, 0, 0, 0], vec![1, 1], false, false),
        (PoolKind::Avg, vec![2, 1, 5, 6], vec![3, 3], vec![2, 1], vec![1, 1, 1, 0], vec![1, 1], false, false),
        (PoolKind::Avg, vec![2, 1, 5, 6], vec![3, 3], vec![2, 1], vec![1, 1, 1, 0], vec![1, 1], false, true),
        (PoolKind::Avg, vec![1, 2, 5, 5], vec![2, 2], vec![2, 2], vec![1, 1, 0, 0], vec![1, 1], true, true),
        (PoolKind::Avg, vec![1, 2, 7], vec![3], vec![2], vec![1, 1], vec![2], true, false),
    ] {
        let op = MirOp::Pool { kind, kernel: k.clone(), strides: st.clone(), pads: pd.clone(), dilations: dl.clone(), ceil_mode: ceil, count_include_pad: inc };
        let what = format!("{} {xs:?} kernel {k:?} strides {st:?} pads {pd:?} dilations {dl:?} ceil {ceil} include_pad {inc}", op.kind());
        check(&what, case(op, vec![f64t(&xs, r.vec(numel(&xs), -1.0, 1.0))]));
    }
}

#[test]
fn fake_quantize_is_straight_through() {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F32, &[3]));
    let s = g.add_const(None, ConstData::from_f32(vec![], &[0.1]));
    let z = g.add_const(None, ConstData::scalar(DType::I8, 0.0));
    let y = g.add1("fq", MirOp::FakeQuantize { axis: 0 }, &[x, s, z]).unwrap();
    let w = g.add_const(None, ConstData::from_f32(vec![3], &[2.0, -3.0, 0.5]));
    let p = g.add1("mul", MirOp::Binary(BinaryOp::Mul), &[y, w]).unwrap();
    g.outputs = vec![p];
    let gr = grad(&g, 0, &[0]).unwrap();
    let out = run(&gr, &[ConstData::from_f32(vec![3], &[0.33, -1.0, 7.0])]).unwrap();
    assert_eq!(out[0].to_f64_vec(), vec![2.0, -3.0, 0.5]);
}

/// A trained fake_quantize scale: LSQ's estimator, by hand — per element (q − z) − x/s where x/s + z
/// rounds inside [−128, 127], (q − z) where it clips, summed with the output's cotangent and scaled
/// by 1/√(n·255).
#[test]
fn fake_quantize_scale_follows_lsq() {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F32, &[4]));
    let s = g.add_input("s", TensorType::fixed(DType::F32, &[]));
    let z = g.add_const(None, ConstData::scalar(DType::I8, 0.0));
    let y = g.add1("fq", MirOp::FakeQuantize { axis: 0 }, &[x, s, z]).unwrap();
    let wv = [2.0f32, -3.0, 0.5, 1.0];
    let w = g.add_const(None, ConstData::from_f32(vec![4], &wv));
    let p = g.add1("mul", MirOp::Binary(BinaryOp::Mul), &[y, w]).unwrap();
    g.outputs = vec![p];
    let gr = grad(&g, 0, &[0, 1]).unwrap();
    let (xv, sv) = ([0.33f32, -1.0, 20.0, -13.0], 0.1f32);
    let out = run(&gr, &[ConstData::from_f32(vec![4], &xv), ConstData::from_f32(vec![], &[sv])]).unwrap();
    assert_eq!(out[0].to_f64_vec(), wv.iter().map(|&v| v as f64).collect::<Vec<_>>(), "input: straight-through");
    let want: f64 = xv
        .iter()
        .zip(&wv)
        .map(|(&xi, &wi)| {
            let r = (xi / sv) as f64;
            let q = r.round_ties_even().clamp(-128.0, 127.0);
            wi as f64 * if (-128.5..=127.5).contains(&r) { q - r } else { q }
        })
        .sum::<f64>()
        / (4.0f64 * 255.0).sqrt();
    let got = out[1].get_f64(0);
    assert!((got - want).abs() <= 1e-5 * want.abs(), "scale: {got} vs {want}");
}

/// Lowers a one-block HIR graph over f64 inputs to MIR.
fn lowered(op: HirOp, shapes: &[&[usize]]) -> Mir {
    let mut h = Hir::new();
    let ids: Vec<ValueId> = shapes.iter().enumerate().map(|(k, s)| h.add_input(&format!("x{k}"), TensorType::fixed(DType::F64, s))).collect();
    let o = h.add1("block", op, &ids).unwrap();
    h.outputs = vec![o];
    rlx_opt::lower(&h).unwrap()
}

#[test]
fn blocks_differentiate_through_their_primitives() {
    let mut r = Rng(7);
    let mut go = |what: &str, op: HirOp, shapes: &[&[usize]]| {
        let g = lowered(op, shapes);
        let ins: Vec<ConstData> = shapes.iter().map(|s| tensor(DType::F64, s, &r.vec(numel(s), -1.5, 1.5))).collect();
        check_grad(what, &g, &ins, F64_EPS, F64_TOL);
    };
    go("softmax", HirOp::Softmax { axis: 1, log: false }, &[&[2, 5]]);
    go("log_softmax", HirOp::Softmax { axis: 1, log: true }, &[&[2, 5]]);
    go("layer_norm", HirOp::LayerNorm { axis: 1, eps: 1e-5 }, &[&[3, 4], &[4], &[4]]);
    go("gelu (erf)", HirOp::Gelu { tanh: false }, &[&[2, 3]]);
    go("gelu (tanh)", HirOp::Gelu { tanh: true }, &[&[2, 3]]);
    go("linear", HirOp::Linear { transpose_w: true }, &[&[2, 3], &[4, 3], &[4]]);
    go("attention", HirOp::Attention { heads: 2, scale: 0.5, causal: true }, &[&[1, 3, 4], &[1, 3, 4], &[1, 3, 4]]);
}

/// f(x) elementwise on f64[5] built by `body`; returns its first three derivatives by repeated grad.
fn third_derivatives(body: impl Fn(&mut Mir, ValueId) -> ValueId, xs: &[f64]) -> [Vec<f64>; 3] {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F64, &[xs.len()]));
    let y = body(&mut g, x);
    g.outputs = vec![y];
    let d1 = grad(&g, 0, &[0]).unwrap();
    let d2 = grad(&d1, 0, &[0]).unwrap();
    let d3 = grad(&d2, 0, &[0]).unwrap();
    let input = [tensor(DType::F64, &[xs.len()], xs)];
    let ev = |m: &Mir| run(m, &input).unwrap()[0].to_f64_vec();
    [ev(&d1), ev(&d2), ev(&d3)]
}

fn close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= tol * (1.0 + b.abs()), "{what}[{i}]: {a} vs closed form {b}");
    }
}

fn c(g: &mut Mir, v: f64) -> ValueId {
    g.add_const(None, ConstData::scalar(DType::F64, v))
}
fn un(g: &mut Mir, u: UnaryOp, x: ValueId) -> ValueId {
    g.add1(u.name(), MirOp::Unary(u), &[x]).unwrap()
}
fn bin(g: &mut Mir, b: BinaryOp, x: ValueId, y: ValueId) -> ValueId {
    g.add1(b.name(), MirOp::Binary(b), &[x, y]).unwrap()
}

#[test]
fn third_derivatives_match_closed_forms() {
    let xs = [-2.0, -0.7, 0.3, 1.1, 2.5];
    let tol = 1e-10;
    // x³ (pow with exponent 3): 3x², 6x, 6.
    let d = third_derivatives(|g, x| { let e = c(g, 3.0); bin(g, BinaryOp::Pow, x, e) }, &xs);
    close("x^3'", &d[0], &xs.map(|x| 3.0 * x * x), tol);
    close("x^3''", &d[1], &xs.map(|x| 6.0 * x), tol);
    close("x^3'''", &d[2], &xs.map(|_| 6.0), tol);
    // tanh: 1−t², −2t(1−t²), (1−t²)(6t²−2).
    let d = third_derivatives(|g, x| un(g, UnaryOp::Tanh, x), &xs);
    let t = xs.map(f64::tanh);
    close("tanh'", &d[0], &t.map(|t| 1.0 - t * t), tol);
    close("tanh''", &d[1], &t.map(|t| -2.0 * t * (1.0 - t * t)), tol);
    close("tanh'''", &d[2], &t.map(|t| (1.0 - t * t) * (6.0 * t * t - 2.0)), tol);
    // GELU (erf form) x·Φ(x): Φ + xφ, φ(2 − x²), φ(x³ − 4x); φ the standard normal density.
    let gelu = |g: &mut Mir, x: ValueId| {
        let r = c(g, std::f64::consts::FRAC_1_SQRT_2);
        let s = bin(g, BinaryOp::Mul, x, r);
        let e = un(g, UnaryOp::Erf, s);
        let one = c(g, 1.0);
        let p = bin(g, BinaryOp::Add, e, one);
        let h = c(g, 0.5);
        let ph = bin(g, BinaryOp::Mul, p, h);
        bin(g, BinaryOp::Mul, x, ph)
    };
    let d = third_derivatives(gelu, &xs);
    let phi = |x: f64| (-x * x / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let cdf = |x: f64| 0.5 * (1.0 + erf_ref(x / std::f64::consts::SQRT_2));
    close("gelu'", &d[0], &xs.map(|x| cdf(x) + x * phi(x)), 1e-7);
    close("gelu''", &d[1], &xs.map(|x| phi(x) * (2.0 - x * x)), tol);
    close("gelu'''", &d[2], &xs.map(|x| phi(x) * (x * x * x - 4.0 * x)), tol);
    // SiLU x·σ(x): s + xs', 2s' + xs'', 3s'' + xs''' with s' = s(1−s), s'' = s'(1−2s), s''' = s''(1−2s) − 2s'².
    let d = third_derivatives(|g, x| { let s = un(g, UnaryOp::Sigmoid, x); bin(g, BinaryOp::Mul, x, s) }, &xs);
    let s = |x: f64| 1.0 / (1.0 + (-x).exp());
    let s1 = |x: f64| s(x) * (1.0 - s(x));
    let s2 = |x: f64| s1(x) * (1.0 - 2.0 * s(x));
    let s3 = |x: f64| s2(x) * (1.0 - 2.0 * s(x)) - 2.0 * s1(x) * s1(x);
    close("silu'", &d[0], &xs.map(|x| s(x) + x * s1(x)), tol);
    close("silu''", &d[1], &xs.map(|x| 2.0 * s1(x) + x * s2(x)), tol);
    close("silu'''", &d[2], &xs.map(|x| 3.0 * s2(x) + x * s3(x)), tol);
}

/// erf by its Maclaurin series (|x| < 2 here: 60 terms reach f64 precision); independent of the
/// interpreter's erf, used only for GELU's first derivative.
fn erf_ref(x: f64) -> f64 {
    let mut term = x;
    let mut sum = x;
    for n in 1..60 {
        term *= -x * x / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

/// A small network: y = tanh(x·W1 + b) · W2, then softmax along the last axis; inputs x, W1, b, W2.
fn net() -> (Mir, Vec<ConstData>) {
    let mut h = Hir::new();
    let x = h.add_input("x", TensorType::fixed(DType::F64, &[2, 3]));
    let w1 = h.add_input("w1", TensorType::fixed(DType::F64, &[3, 4]));
    let b = h.add_input("b", TensorType::fixed(DType::F64, &[4]));
    let w2 = h.add_input("w2", TensorType::fixed(DType::F64, &[4, 3]));
    let a = h.add1("l1", HirOp::Linear { transpose_w: false }, &[x, w1, b]).unwrap();
    let t = h.add1("tanh", HirOp::Prim(MirOp::Unary(UnaryOp::Tanh)), &[a]).unwrap();
    let z = h.add1("l2", HirOp::Prim(MirOp::MatMul), &[t, w2]).unwrap();
    let s = h.add1("sm", HirOp::Softmax { axis: 1, log: false }, &[z]).unwrap();
    h.outputs = vec![s];
    let g = rlx_opt::lower(&h).unwrap();
    let mut r = Rng(11);
    let ins = [[2, 3], [3, 4], [1, 4], [4, 3]].iter().map(|s| {
        let s: &[usize] = if s[0] == 1 { &s[1..] } else { s };
        tensor(DType::F64, s, &r.vec(numel(s), -1.0, 1.0))
    });
    (g, ins.collect())
}

fn dot(a: &[ConstData], b: &[ConstData]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x.to_f64_vec().iter().zip(y.to_f64_vec()).map(|(p, q)| p * q).sum::<f64>()).sum()
}

#[test]
fn jvp_matches_finite_differences_and_the_vjp() {
    let (g, ins) = net();
    let wrt = [0, 1, 2, 3];
    let mut r = Rng(12);
    let t: Vec<ConstData> = ins.iter().map(|x| tensor(DType::F64, &x.shape, &r.vec(x.numel(), -1.0, 1.0))).collect();
    let out_shape = run(&g, &ins).unwrap()[0].shape.clone();
    let u = tensor(DType::F64, &out_shape, &r.vec(numel(&out_shape), -1.0, 1.0));
    // jvp: inputs ++ tangents → outputs ++ J·t.
    let j = jvp(&g, &[0], &wrt).unwrap();
    let jt = run(&j, &[ins.clone(), t.clone()].concat()).unwrap().remove(1);
    // Finite differences along t.
    let eps = 1e-6;
    let shift = |s: f64| -> Vec<ConstData> {
        ins.iter().zip(&t).map(|(x, d)| {
            let v: Vec<f64> = x.to_f64_vec().iter().zip(d.to_f64_vec()).map(|(a, b)| a + s * b).collect();
            tensor(DType::F64, &x.shape, &v)
        }).collect()
    };
    let (p, m) = (run(&g, &shift(eps)).unwrap().remove(0), run(&g, &shift(-eps)).unwrap().remove(0));
    let fd: Vec<f64> = p.to_f64_vec().iter().zip(m.to_f64_vec()).map(|(a, b)| (a - b) / (2.0 * eps)).collect();
    close("jvp vs finite differences", &jt.to_f64_vec(), &fd, 1e-6);
    // Transpose identity with the vjp: ⟨J·t, u⟩ = ⟨t, Jᵀ·u⟩.
    let v = vjp(&g, &[0], &wrt).unwrap();
    let vu = run(&v, &[ins.clone(), vec![u.clone()]].concat()).unwrap().split_off(1);
    let (lhs, rhs) = (dot(&[jt], &[u]), dot(&t, &vu));
    assert!((lhs - rhs).abs() <= 1e-12 * (1.0 + lhs.abs()), "⟨jvp, u⟩ = {lhs}, ⟨t, vjp⟩ = {rhs}");
}

#[test]
fn hvp_matches_finite_differences_of_the_gradient() {
    let (g, ins) = net();
    let w = weighted(&g, 5);
    let wrt = [0, 1, 2, 3];
    let mut r = Rng(13);
    let v: Vec<ConstData> = ins.iter().map(|x| tensor(DType::F64, &x.shape, &r.vec(x.numel(), -1.0, 1.0))).collect();
    check_hvp(&w, &ins, &v, &wrt);
}

/// The Hessian-vector product of output 0 of `g` at `ins` along `v` (inputs `wrt`) against central
/// differences of its gradient (step 1e-5), within 1e-6.
fn check_hvp(g: &Mir, ins: &[ConstData], v: &[ConstData], wrt: &[usize]) {
    let hv = run(&hvp(g, 0, wrt).unwrap(), &[ins.to_vec(), v.to_vec()].concat()).unwrap();
    let gr = grad(g, 0, wrt).unwrap();
    let eps = 1e-5;
    let at = |s: f64| -> Vec<ConstData> {
        let x: Vec<ConstData> = ins.iter().zip(v).map(|(x, d)| {
            let y: Vec<f64> = x.to_f64_vec().iter().zip(d.to_f64_vec()).map(|(a, b)| a + s * b).collect();
            tensor(DType::F64, &x.shape, &y)
        }).collect();
        run(&gr, &x).unwrap()
    };
    let (p, m) = (at(eps), at(-eps));
    for k in 0..wrt.len() {
        let fd: Vec<f64> = p[k].to_f64_vec().iter().zip(m[k].to_f64_vec()).map(|(a, b)| (a - b) / (2.0 * eps)).collect();
        close(&format!("hvp input {k}"), &hv[k].to_f64_vec(), &fd, 1e-6);
    }
}

#[test]
fn an_op_without_a_rule_is_an_error_naming_the_node() {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F32, &[1, 1, 4, 4]));
    let idx = g.add_const(None, ConstData::from_i64(vec![1, 2], &[0, 1]));
    let y = g.add1("GatherND_7", MirOp::GatherNd { batch_dims: 0 }, &[x, idx]).unwrap();
    let s = g.add1("sum", MirOp::Reduce { op: ReduceOp::Sum, axes: vec![0, 1, 2], keepdims: false }, &[y]).unwrap();
    g.outputs = vec![s];
    let e = grad(&g, 0, &[0]).unwrap_err();
    assert_eq!((e.node.as_deref(), e.op.as_deref()), (Some("GatherND_7"), Some("gather_nd")), "{e}");
    assert!(e.to_string().contains("no gradient rule for gather_nd"), "{e}");
    // Integer paths (indices, comparisons) carry no derivative and need no rule.
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F32, &[3]));
    let a = g.add1("argmax", MirOp::ArgReduce { op: rlx_ir::ArgOp::ArgMax, axis: 0, keepdims: false, select_last: false }, &[x]).unwrap();
    let f = g.add1("cast", MirOp::Cast { to: DType::F32 }, &[a]).unwrap();
    let y = g.add1("mul", MirOp::Binary(BinaryOp::Mul), &[x, f]).unwrap();
    g.outputs = vec![y];
    let out = run(&grad(&g, 0, &[0]).unwrap(), &[ConstData::from_f32(vec![3], &[1.0, 5.0, 2.0])]).unwrap();
    assert_eq!(out[0].to_f64_vec(), vec![1.0; 3]);
    // Out-of-range indices are errors, not panics.
    assert!(grad(&g, 3, &[0]).is_err());
    assert!(grad(&g, 0, &[7]).is_err());
}
