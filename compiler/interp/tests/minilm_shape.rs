//! A MiniLM-L6-shaped encoder (6 layers, hidden 384, 12 heads, FFN 1536, seq 128, batch 1) with
//! pseudo-random weights: checks the interpreter runs a real-sized transformer in reasonable time and
//! keeps outputs finite and layer-normalized.
use rlx_interp::run;
use rlx_ir::{BinaryOp as B, ConstData, DType, Dim, Mir, MirOp, ReduceOp, TensorType, UnaryOp as U, ValueId};
use std::time::Instant;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1
    }
    fn t(&mut self, shape: &[usize]) -> ConstData {
        let n = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| self.next()).collect();
        ConstData::from_f32(shape.to_vec(), &v)
    }
}

fn dims(v: &[usize]) -> Vec<Dim> {
    v.iter().map(|&d| Dim::Fixed(d as u64)).collect()
}

fn layer_norm(g: &mut Mir, x: ValueId, h: usize, p: &str) -> ValueId {
    let red = |axes: Vec<usize>| MirOp::Reduce { op: ReduceOp::Mean, axes, keepdims: true };
    let mean = g.add1(&format!("{p}.mean"), red(vec![2]), &[x]).unwrap();
    let d = g.add1(&format!("{p}.sub"), MirOp::Binary(B::Sub), &[x, mean]).unwrap();
    let d2 = g.add1(&format!("{p}.sq"), MirOp::Binary(B::Mul), &[d, d]).unwrap();
    let var = g.add1(&format!("{p}.var"), red(vec![2]), &[d2]).unwrap();
    let eps = g.add_const(None, ConstData::from_f32(vec![], &[1e-12]));
    let ve = g.add1(&format!("{p}.add_eps"), MirOp::Binary(B::Add), &[var, eps]).unwrap();
    let sd = g.add1(&format!("{p}.sqrt"), MirOp::Unary(U::Sqrt), &[ve]).unwrap();
    let n = g.add1(&format!("{p}.div"), MirOp::Binary(B::Div), &[d, sd]).unwrap();
    let gamma = g.add_const(None, ConstData::from_f32(vec![h], &vec![1.0; h]));
    let beta = g.add_const(None, ConstData::from_f32(vec![h], &vec![0.0; h]));
    let s = g.add1(&format!("{p}.gamma"), MirOp::Binary(B::Mul), &[n, gamma]).unwrap();
    g.add1(&format!("{p}.beta"), MirOp::Binary(B::Add), &[s, beta]).unwrap()
}

fn linear(g: &mut Mir, rng: &mut Rng, x: ValueId, i: usize, o: usize, p: &str) -> ValueId {
    let w = g.add_const(None, rng.t(&[i, o]));
    let b = g.add_const(None, rng.t(&[o]));
    let y = g.add1(&format!("{p}.matmul"), MirOp::MatMul, &[x, w]).unwrap();
    g.add1(&format!("{p}.bias"), MirOp::Binary(B::Add), &[y, b]).unwrap()
}

#[test]
fn minilm_sized_encoder_runs() {
    let (s, h, heads, f) = (128, 384, 12, 1536);
    let hd = h / heads;
    let mut rng = Rng(42);
    let mut g = Mir::new();
    let mut x = g.add_input("x", TensorType::new(DType::F32, rlx_ir::Shape(vec![Dim::Fixed(1), Dim::Fixed(s as u64), Dim::Fixed(h as u64)])));
    for l in 0..6 {
        let p = format!("l{l}");
        let split = |g: &mut Mir, v: ValueId, name: &str| {
            let r = g.add1(&format!("{name}.reshape"), MirOp::Reshape { shape: dims(&[1, s, heads, hd]) }, &[v]).unwrap();
            g.add1(&format!("{name}.transpose"), MirOp::Transpose { perm: vec![0, 2, 1, 3] }, &[r]).unwrap()
        };
        let q = linear(&mut g, &mut rng, x, h, h, &format!("{p}.q"));
        let k = linear(&mut g, &mut rng, x, h, h, &format!("{p}.k"));
        let v = linear(&mut g, &mut rng, x, h, h, &format!("{p}.v"));
        let (q, k, v) = (split(&mut g, q, &format!("{p}.q")), split(&mut g, k, &format!("{p}.k")), split(&mut g, v, &format!("{p}.v")));
        let kt = g.add1(&format!("{p}.kt"), MirOp::Transpose { perm: vec![0, 1, 3, 2] }, &[k]).unwrap();
        let sc = g.add1(&format!("{p}.scores"), MirOp::MatMul, &[q, kt]).unwrap();
        let scale = g.add_const(None, ConstData::from_f32(vec![], &[1.0 / (hd as f32).sqrt()]));
        let sc = g.add1(&format!("{p}.scale"), MirOp::Binary(B::Mul), &[sc, scale]).unwrap();
        let mx = g.add1(&format!("{p}.max"), MirOp::Reduce { op: ReduceOp::Max, axes: vec![3], keepdims: true }, &[sc]).unwrap();
        let e = g.add1(&format!("{p}.sub"), MirOp::Binary(B::Sub), &[sc, mx]).unwrap();
        let e = g.add1(&format!("{p}.exp"), MirOp::Unary(U::Exp), &[e]).unwrap();
        let z = g.add1(&format!("{p}.sum"), MirOp::Reduce { op: ReduceOp::Sum, axes: vec![3], keepdims: true }, &[e]).unwrap();
        let pr = g.add1(&format!("{p}.softmax"), MirOp::Binary(B::Div), &[e, z]).unwrap();
        let ctx = g.add1(&format!("{p}.ctx"), MirOp::MatMul, &[pr, v]).unwrap();
        let ctx = g.add1(&format!("{p}.ctx.t"), MirOp::Transpose { perm: vec![0, 2, 1, 3] }, &[ctx]).unwrap();
        let ctx = g.add1(&format!("{p}.ctx.r"), MirOp::Reshape { shape: dims(&[1, s, h]) }, &[ctx]).unwrap();
        let o = linear(&mut g, &mut rng, ctx, h, h, &format!("{p}.o"));
        let r = g.add1(&format!("{p}.res1"), MirOp::Binary(B::Add), &[o, x]).unwrap();
        let a = layer_norm(&mut g, r, h, &format!("{p}.ln1"));
        // GELU(x) = x/2 * (1 + erf(x/sqrt 2))
        let u = linear(&mut g, &mut rng, a, h, f, &format!("{p}.up"));
        let rs2 = g.add_const(None, ConstData::from_f32(vec![], &[std::f32::consts::FRAC_1_SQRT_2]));
        let half = g.add_const(None, ConstData::from_f32(vec![], &[0.5]));
        let one = g.add_const(None, ConstData::from_f32(vec![], &[1.0]));
        let t = g.add1(&format!("{p}.gelu.s"), MirOp::Binary(B::Mul), &[u, rs2]).unwrap();
        let t = g.add1(&format!("{p}.gelu.erf"), MirOp::Unary(U::Erf), &[t]).unwrap();
        let t = g.add1(&format!("{p}.gelu.one"), MirOp::Binary(B::Add), &[t, one]).unwrap();
        let t = g.add1(&format!("{p}.gelu.mul"), MirOp::Binary(B::Mul), &[u, t]).unwrap();
        let t = g.add1(&format!("{p}.gelu.half"), MirOp::Binary(B::Mul), &[t, half]).unwrap();
        let d = linear(&mut g, &mut rng, t, f, h, &format!("{p}.down"));
        let r = g.add1(&format!("{p}.res2"), MirOp::Binary(B::Add), &[d, a]).unwrap();
        x = layer_norm(&mut g, r, h, &format!("{p}.ln2"));
    }
    g.outputs = vec![x];
    let input = Rng(7).t(&[1, s, h]);
    let t0 = Instant::now();
    let out = run(&g, &[input]).unwrap();
    let dt = t0.elapsed();
    eprintln!("MiniLM-shaped encoder: {:.2}s", dt.as_secs_f64());
    let v = out[0].to_f64_vec();
    assert_eq!(out[0].shape, vec![1, s, h]);
    assert!(v.iter().all(|x| x.is_finite()));
    // Each row is layer-normalized: mean ~0, variance ~1.
    let row = &v[..h];
    let mean: f64 = row.iter().sum::<f64>() / h as f64;
    let var: f64 = row.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / h as f64;
    assert!(mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-3, "mean {mean}, var {var}");
}
