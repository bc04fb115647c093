use super::*;
use rlx_ir::{Blob, PadMode, TensorType};

fn run(g: &Mir, ins: &[ConstData]) -> Result<Vec<ConstData>, String> {
    rlx_interp::run(g, ins).map_err(|e| e.to_string())
}

/// Deterministic values in [lo, hi).
fn values(seed: &mut u64, n: usize, lo: f64, hi: f64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            (lo + (hi - lo) * ((*seed >> 11) as f64 / (1u64 << 53) as f64)) as f32
        })
        .collect()
}

fn quantized(g: &Mir, shapes: &[Vec<usize>], ranges: &[(f64, f64)]) -> Quantized {
    let mut seed = 0x9e37_79b9_7f4a_7c15;
    let calib: Vec<Vec<ConstData>> = (0..32)
        .map(|_| {
            shapes
                .iter()
                .zip(ranges)
                .map(|(s, &(lo, hi))| {
                    ConstData::from_f32(
                        s.clone(),
                        &values(&mut seed, s.iter().product(), lo, hi),
                    )
                })
                .collect()
        })
        .collect();
    let q =
        quantize(g, &calib, &run, &QuantOptions::default()).unwrap_or_else(|p| panic!("{p:?}"));
    for n in &q.out_nodes() {
        assert!(
            !q.mir.ty(*n).dtype.is_float(),
            "float value left in the quantized graph"
        );
    }
    q
}

impl Quantized {
    fn out_nodes(&self) -> Vec<ValueId> {
        self.mir
            .nodes
            .iter()
            .flat_map(|n| n.outputs.iter().copied())
            .collect()
    }
}

fn i8s(shape: Vec<usize>, v: &[i64]) -> ConstData {
    ConstData {
        dtype: DType::I8,
        shape,
        data: Blob::from_vec(bytes_i8(v)),
    }
}

fn random_q(seed: &mut u64, n: usize) -> Vec<i64> {
    values(seed, n, -128.0, 128.0)
        .iter()
        .map(|&x| (x.floor() as i64).clamp(-128, 127))
        .collect()
}

fn softmax_graph(n: usize) -> Mir {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F32, &[1, n]));
    let m = g
        .add1(
            "sm/max",
            MirOp::Reduce {
                op: ReduceOp::Max,
                axes: vec![1],
                keepdims: true,
            },
            &[x],
        )
        .unwrap();
    let d = g
        .add1("sm/sub", MirOp::Binary(BinaryOp::Sub), &[x, m])
        .unwrap();
    let e = g.add1("sm/exp", MirOp::Unary(UnaryOp::Exp), &[d]).unwrap();
    let s = g
        .add1(
            "sm/sum",
            MirOp::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keepdims: true,
            },
            &[e],
        )
        .unwrap();
    g.outputs = vec![g.add1("sm", MirOp::Binary(BinaryOp::Div), &[e, s]).unwrap()];
    g
}

/// The lookup-table softmax against the exact softmax of its dequantized int8 input: within one
/// output step (1/256) on random inputs, and within half a step below the saturation at 127/256.
#[test]
fn int8_softmax_is_within_one_step_of_the_exact_softmax() {
    for n in [10usize, 100] {
        let q = quantized(&softmax_graph(n), &[vec![1, n]], &[(-6.0, 6.0)]);
        assert_eq!(
            (q.outputs[0].scale, q.outputs[0].zero_point),
            (1.0 / 256.0, -128)
        );
        let p = q.inputs[0];
        let mut seed = 7;
        let (mut worst, mut worst_unsat) = (0f64, 0f64);
        for _ in 0..300 {
            let xq = random_q(&mut seed, n);
            let y = run(&q.mir, &[i8s(vec![1, n], &xq)])
                .unwrap()
                .remove(0)
                .to_i64_vec();
            let xr: Vec<f64> = xq
                .iter()
                .map(|&v| (v - p.zero_point as i64) as f64 * p.scale as f64)
                .collect();
            let mx = xr.iter().cloned().fold(f64::MIN, f64::max);
            let sum: f64 = xr.iter().map(|v| (v - mx).exp()).sum();
            for (yv, xv) in y.iter().zip(&xr) {
                let exact = (xv - mx).exp() / sum;
                let err = ((yv + 128) as f64 / 256.0 - exact).abs();
                worst = worst.max(err);
                if exact < 127.0 / 256.0 {
                    worst_unsat = worst_unsat.max(err);
                }
            }
        }
        eprintln!(
            "softmax n={n}: max error {:.3} steps, {:.3} steps below saturation",
            worst * 256.0,
            worst_unsat * 256.0
        );
        assert!(worst <= 1.0 / 256.0 + 1e-9, "n={n}: {worst}");
        assert!(worst_unsat <= 0.5 / 256.0 + 1e-6, "n={n}: {worst_unsat}");
    }
}

/// Two activations with different scales, then relu: within one output step of the float sum of
/// the dequantized operands.
#[test]
fn int8_add_rescales_both_operands() {
    let mut g = Mir::new();
    let a = g.add_input("a", TensorType::fixed(DType::F32, &[1, 64]));
    let b = g.add_input("b", TensorType::fixed(DType::F32, &[1, 64]));
    let s = g
        .add1("res", MirOp::Binary(BinaryOp::Add), &[a, b])
        .unwrap();
    g.outputs = vec![g
        .add1("res_relu", MirOp::Unary(UnaryOp::Relu), &[s])
        .unwrap()];
    let q = quantized(&g, &[vec![1, 64], vec![1, 64]], &[(-1.0, 1.0), (-0.5, 7.5)]);
    assert!(
        q.mir
            .nodes
            .iter()
            .all(|n| n.op != MirOp::Unary(UnaryOp::Relu)),
        "relu fused into the clamp"
    );
    let (pa, pb, po) = (q.inputs[0], q.inputs[1], q.outputs[0]);
    assert_ne!(pa.scale, pb.scale);
    let mut seed = 3;
    for _ in 0..50 {
        let (xa, xb) = (random_q(&mut seed, 64), random_q(&mut seed, 64));
        let y = run(&q.mir, &[i8s(vec![1, 64], &xa), i8s(vec![1, 64], &xb)])
            .unwrap()
            .remove(0)
            .to_i64_vec();
        for i in 0..64 {
            let real = (xa[i] - pa.zero_point as i64) as f64 * pa.scale as f64
                + (xb[i] - pb.zero_point as i64) as f64 * pb.scale as f64;
            let want =
                (real.max(0.0) / po.scale as f64 + po.zero_point as f64).clamp(-128.0, 127.0);
            assert!(
                (y[i] as f64 - want).abs() <= 0.5 + 1e-3,
                "{i}: {} vs {want}",
                y[i]
            );
        }
    }
}

/// Average pooling (padding counted and not counted) and a global mean: the int8 result is the
/// mean of the int8 window rounded half up, `floor(Σq/d + 1/2)`, with d the counted elements and
/// padding read as the real 0 (the zero point) when counted.
#[test]
fn int8_average_pools_round_half_up() {
    for include in [false, true] {
        let mut g = Mir::new();
        let x = g.add_input("x", TensorType::fixed(DType::F32, &[1, 2, 5, 5]));
        let op = MirOp::Pool {
            kind: PoolKind::Avg,
            kernel: vec![3, 3],
            strides: vec![2, 2],
            pads: vec![1, 1, 1, 1],
            dilations: vec![1, 1],
            ceil_mode: false,
            count_include_pad: include,
        };
        let y = g.add1("pool", op, &[x]).unwrap();
        let m = g
            .add1(
                "gap",
                MirOp::Reduce {
                    op: ReduceOp::Mean,
                    axes: vec![2, 3],
                    keepdims: true,
                },
                &[x],
            )
            .unwrap();
        g.outputs = vec![y, m];
        let q = quantized(&g, &[vec![1, 2, 5, 5]], &[(-1.0, 3.0)]);
        let z = q.inputs[0].zero_point as i64;
        assert_eq!(q.outputs[0], q.inputs[0]);
        let mut seed = 11;
        for _ in 0..20 {
            let xq = random_q(&mut seed, 50);
            let out = run(&q.mir, &[i8s(vec![1, 2, 5, 5], &xq)]).unwrap();
            let (yp, ym) = (out[0].to_i64_vec(), out[1].to_i64_vec());
            for c in 0..2 {
                for oy in 0..3 {
                    for ox in 0..3 {
                        let (mut sum, mut d) = (0i64, 0i64);
                        for ky in 0..3 {
                            for kx in 0..3 {
                                let (iy, ix) = (oy * 2 + ky, ox * 2 + kx);
                                let inside = (1..6).contains(&iy) && (1..6).contains(&ix);
                                if inside {
                                    sum += xq[c * 25 + (iy - 1) * 5 + (ix - 1)];
                                    d += 1;
                                } else if include {
                                    sum += z;
                                    d += 1;
                                }
                            }
                        }
                        let want = (sum as f64 / d as f64 + 0.5).floor() as i64;
                        assert_eq!(
                            yp[c * 9 + oy * 3 + ox],
                            want,
                            "include_pad={include} c{c} ({oy},{ox})"
                        );
                    }
                }
                let s: i64 = xq[c * 25..c * 25 + 25].iter().sum();
                assert_eq!(ym[c], (s as f64 / 25.0 + 0.5).floor() as i64);
            }
        }
    }
}

/// A padded conv reads its padding as the input zero point through an int8 `pad` (the zero point
/// folded into the bias), not through an i32 subtraction.
#[test]
fn padded_conv_pads_with_the_zero_point() {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F32, &[1, 2, 4, 4]));
    let w = g.add_const(
        None,
        ConstData::from_f32(vec![2, 1, 3, 3], &values(&mut 5, 18, -1.0, 1.0)),
    );
    let conv = MirOp::Conv {
        strides: vec![1, 1],
        pads: vec![1, 1, 1, 1],
        dilations: vec![1, 1],
        groups: 2,
    };
    g.outputs = vec![g.add1("dw", conv, &[x, w]).unwrap()];
    let q = quantized(&g, &[vec![1, 2, 4, 4]], &[(0.0, 2.0)]);
    let z = q.inputs[0].zero_point as f64;
    assert!(q.mir.nodes.iter().any(
        |n| matches!(&n.op, MirOp::Pad { mode: PadMode::Constant, value, .. } if *value == z)
    ));
    assert!(q
        .mir
        .nodes
        .iter()
        .all(|n| !matches!(&n.op, MirOp::Conv { pads, .. } if pads.iter().any(|&p| p != 0))));
    // Against the float conv of the dequantized input: within a few output steps.
    let f = run(&g, &[ConstData::from_f32(vec![1, 2, 4, 4], &[1.0; 32])])
        .unwrap()
        .remove(0)
        .to_f64_vec();
    let xq = ((1.0 / q.inputs[0].scale as f64).round() + z) as i64;
    let y = run(&q.mir, &[i8s(vec![1, 2, 4, 4], &[xq; 32])])
        .unwrap()
        .remove(0)
        .to_i64_vec();
    let po = q.outputs[0];
    for (a, b) in y.iter().zip(&f) {
        assert!(
            ((*a - po.zero_point as i64) as f64 * po.scale as f64 - b).abs()
                <= 3.0 * po.scale as f64,
            "{a} vs {b}"
        );
    }
}

/// What has no int8 form is reported with the node's name, every node at once.
#[test]
fn unsupported_nodes_are_named() {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F32, &[1, 4]));
    let e = g.add1("my_exp", MirOp::Unary(UnaryOp::Exp), &[x]).unwrap();
    let c = g.add_const(None, ConstData::from_f32(vec![1, 4], &[1.0; 4]));
    let a = g
        .add1("my_add_const", MirOp::Binary(BinaryOp::Add), &[x, c])
        .unwrap();
    let y = g
        .add1("join", MirOp::Binary(BinaryOp::Mul), &[e, a])
        .unwrap();
    g.outputs = vec![y];
    let calib = vec![vec![ConstData::from_f32(
        vec![1, 4],
        &[0.5, -0.5, 1.0, 2.0],
    )]];
    let p = quantize(&g, &calib, &run, &QuantOptions::default()).unwrap_err();
    let names: Vec<_> = p.iter().filter_map(|p| p.node.as_deref()).collect();
    assert_eq!(names, ["my_exp", "my_add_const", "join"], "{p:?}");
    assert!(p[0].msg.contains("exp has no int8 form"), "{}", p[0].msg);
}
