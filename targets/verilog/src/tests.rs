use super::*;
use rlx_ir::{BinaryOp, ConstData, Mir, MirOp, PadMode, PoolKind, Shape, TensorType};

/// A one-layer int8 graph as `rlx_opt::quantize` writes it: x[1,4] · W[4,3] + b, requantized.
fn one_layer(extra_relu_node: bool) -> Mir {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::new(DType::I8, Shape::fixed(&[1, 4])));
    let w = g.add_const(
        None,
        ConstData::new(
            DType::I8,
            vec![4, 3],
            rlx_ir::Blob::from_vec((0..12u8).map(|i| i.wrapping_mul(37)).collect()),
        )
        .unwrap(),
    );
    let b = g.add_const(
        None,
        ConstData::new(
            DType::I32,
            vec![3],
            rlx_ir::Blob::from_vec(
                [5i32, -7, 9].iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
        )
        .unwrap(),
    );
    let xi = g.add1("fc", MirOp::Cast { to: DType::I32 }, &[x]).unwrap();
    let wi = g.add1("fc", MirOp::Cast { to: DType::I32 }, &[w]).unwrap();
    let mm = g.add1("fc", MirOp::MatMul, &[xi, wi]).unwrap();
    let mut v = g
        .add1("fc.bias", MirOp::Binary(BinaryOp::Add), &[mm, b])
        .unwrap();
    v = g
        .add1("fc.requant", MirOp::Cast { to: DType::I64 }, &[v])
        .unwrap();
    let steps: [(BinaryOp, ConstData); 6] = [
        (
            BinaryOp::Mul,
            ConstData::from_i64(vec![3], &[1 << 30, 1 << 30, 3 << 29]),
        ),
        (
            BinaryOp::Add,
            ConstData::from_i64(vec![3], &[1 << 37, 1 << 37, 1 << 37]),
        ),
        (BinaryOp::Shr, ConstData::from_i64(vec![3], &[38, 38, 38])),
        (BinaryOp::Add, ConstData::scalar(DType::I64, -3.0)),
        (BinaryOp::Max, ConstData::scalar(DType::I64, -3.0)),
        (BinaryOp::Min, ConstData::scalar(DType::I64, 127.0)),
    ];
    for (op, c) in steps {
        let c = g.add_const(None, c);
        v = g.add1("fc.requant", MirOp::Binary(op), &[v, c]).unwrap();
    }
    v = g
        .add1("fc.requant", MirOp::Cast { to: DType::I8 }, &[v])
        .unwrap();
    if extra_relu_node {
        let z = g.add_const(None, ConstData::scalar(DType::I8, 0.0));
        v = g
            .add1("relu", MirOp::Binary(BinaryOp::Max), &[v, z])
            .unwrap();
    }
    g.outputs = vec![v];
    g
}

#[test]
fn recognizes_a_layer_and_counts_cycles() {
    let (layers, i, o) = recognize(&one_layer(false)).unwrap();
    assert_eq!((layers.len(), i, o), (1, 4, 3));
    let l = &layers[0];
    assert_eq!((l.k, l.n, l.zp, l.lo, l.hi), (4, 3, -3, -3, 127));
    assert_eq!(l.bias, vec![5, -7, 9]);
    assert_eq!(l.shift, vec![38; 3]);
    // 4 loads, 2 groups of 2 channels: 2·(4+2) + 3, 2 cycles per output.
    assert_eq!(cycles(&layers, i, o, 2), 4 + 12 + 3 + 6);
    let q = PortQuant {
        scale: 1.0,
        zero_point: 0,
    };
    let d = emit(
        &one_layer(false),
        &Options {
            name: "t".into(),
            macs_per_cycle: 2,
            input: q,
            output: q,
            rlxc_version: "test".into(),
            testbench_vectors: 1,
        },
    )
    .unwrap();
    // Weight words in read order: group 0 holds channels {1, 0}, group 1 {pad, 2}.
    assert_eq!(d.weights_mem.lines().count(), 8);
    assert_eq!(d.weights_mem.lines().next().unwrap(), "2500");
    assert_eq!(d.weights_mem.lines().nth(4).unwrap(), "004a");
    assert_eq!(d.qparams_mem.lines().nth(1).unwrap(), "2640000000fffffff9");
    assert!(d.verilog.contains("module t (") && d.testbench.contains("module t_tb;"));
}

/// A padded conv + max pool as `rlx_opt::quantize` writes them: x[1,2,4,3] → pad(1, zp -5) →
/// conv 3×2×2×2 stride (2, 1) → requantize → max pool 2×2 stride 1. `dilated_pool` makes the pool
/// unmappable.
fn conv_pool(dilated_pool: bool) -> Mir {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::new(DType::I8, Shape::fixed(&[1, 2, 4, 3])));
    let w = g.add_const(
        None,
        ConstData::new(
            DType::I8,
            vec![3, 2, 2, 2],
            rlx_ir::Blob::from_vec((0..24u8).map(|i| i.wrapping_mul(29)).collect()),
        )
        .unwrap(),
    );
    let b = g.add_const(
        None,
        ConstData::new(
            DType::I32,
            vec![3],
            rlx_ir::Blob::from_vec([1i32, 2, 3].iter().flat_map(|v| v.to_le_bytes()).collect()),
        )
        .unwrap(),
    );
    let pad = MirOp::Pad { pads: vec![0, 0, 1, 1, 0, 0, 1, 1], mode: PadMode::Constant, value: -5.0 };
    let xp = g.add1("conv.pad", pad, &[x]).unwrap();
    let xi = g.add1("conv", MirOp::Cast { to: DType::I32 }, &[xp]).unwrap();
    let wi = g.add1("conv", MirOp::Cast { to: DType::I32 }, &[w]).unwrap();
    let conv = MirOp::Conv { strides: vec![2, 1], pads: vec![0; 4], dilations: vec![1, 1], groups: 1 };
    let mut v = g.add1("conv", conv, &[xi, wi, b]).unwrap();
    v = g.add1("conv.requant", MirOp::Cast { to: DType::I64 }, &[v]).unwrap();
    let steps: [(BinaryOp, ConstData); 6] = [
        (BinaryOp::Mul, ConstData::from_i64(vec![3, 1, 1], &[1 << 30, 1 << 29, 3 << 28])),
        (BinaryOp::Add, ConstData::from_i64(vec![3, 1, 1], &[1 << 36; 3])),
        (BinaryOp::Shr, ConstData::from_i64(vec![3, 1, 1], &[37; 3])),
        (BinaryOp::Add, ConstData::scalar(DType::I64, 4.0)),
        (BinaryOp::Max, ConstData::scalar(DType::I64, 4.0)),
        (BinaryOp::Min, ConstData::scalar(DType::I64, 127.0)),
    ];
    for (op, c) in steps {
        let c = g.add_const(None, c);
        v = g.add1("conv.requant", MirOp::Binary(op), &[v, c]).unwrap();
    }
    v = g.add1("conv.requant", MirOp::Cast { to: DType::I8 }, &[v]).unwrap();
    let pool = MirOp::Pool {
        kind: PoolKind::Max,
        kernel: vec![2, 2],
        strides: vec![1, 1],
        pads: vec![0; 4],
        dilations: vec![if dilated_pool { 2 } else { 1 }, 1],
        ceil_mode: false,
        count_include_pad: false,
    };
    v = g.add1("pool", pool, &[v]).unwrap();
    g.outputs = vec![v];
    g
}

#[test]
fn recognizes_a_padded_conv_and_a_max_pool() {
    let (layers, i, o) = recognize(&conv_pool(false)).unwrap();
    // Padded input 6×5, kernel 2×2, stride (2, 1): output 3×4; the pool: 2×3.
    assert_eq!((layers.len(), i, o), (2, 24, 3 * 2 * 3));
    let c = &layers[0];
    assert_eq!((c.kind, c.cin, c.ih, c.iw, c.ch, c.oh, c.ow), (Kind::Conv, 2, 4, 3, 3, 3, 4));
    assert_eq!((c.sh, c.sw, c.pt, c.pl, c.pad_value, c.zp, c.lo), (2, 1, 1, 1, -5, 4, 4));
    assert_eq!((c.bias.clone(), c.shift.clone()), (vec![1, 2, 3], vec![37; 3]));
    let m = &layers[1];
    assert_eq!((m.kind, m.ch, m.ih, m.iw, m.oh, m.ow, m.pad_value), (Kind::MaxPool, 3, 3, 4, 2, 3, -128));
    // Load 24; conv: 12 pixels × (2 groups of 2 × (8 + 2) + 3 writes); pool: 18 × (4 + 2 + 1); out 2 × 18.
    assert_eq!(cycles(&layers, i, o, 2), 24 + 12 * (2 * 10 + 3) + 18 * 7 + 36);
    let q = PortQuant { scale: 1.0, zero_point: -5 };
    let opts = Options { name: "cp".into(), macs_per_cycle: 2, input: q, output: q, rlxc_version: "test".into(), testbench_vectors: 1 };
    let d = emit(&conv_pool(false), &opts).unwrap();
    // Weight words: group 0 = channels {1, 0}, step 0 = w[c][0][0][0] = byte 8c·29; group 1 = {pad, 2}.
    let w: Vec<&str> = d.weights_mem.lines().collect();
    assert_eq!(w.len(), 2 * 8);
    assert_eq!((w[0], w[1], w[8]), ("e800", "051d", "00d0"));
    assert!(d.verilog.contains("padv = 8'hfb; pool = 1'b0") && d.verilog.contains("pool = 1'b1"));
}

#[test]
fn reports_every_unmapped_node() {
    let e = recognize(&conv_pool(true)).unwrap_err();
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("node 'pool': max_pool") && e[0].contains("dilation"), "{e:?}");
    let e = recognize(&one_layer(true)).unwrap_err();
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("node 'relu': max"), "{e:?}");
    let q = PortQuant {
        scale: 1.0,
        zero_point: 0,
    };
    let o = Options {
        name: "t".into(),
        macs_per_cycle: 0,
        input: q,
        output: q,
        rlxc_version: "test".into(),
        testbench_vectors: 1,
    };
    let e = emit(&one_layer(false), &o).err().unwrap();
    assert!(e.contains("--macs-per-cycle"), "{e}");
    let o = Options {
        name: "input".into(),
        macs_per_cycle: 1,
        ..o
    };
    let e = emit(&one_layer(false), &o).err().unwrap();
    assert!(e.contains("Verilog keyword"), "{e}");
}
