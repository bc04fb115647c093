//! Which kernels run on the thread pool (`rlx_ir::loops::split_of`): by work, or by bytes streamed.

use rlx_ir::loops::*;
use rlx_ir::DType;

fn param(dtype: DType, elems: usize, access: Access) -> Param {
    Param { dtype, elems, access }
}

/// `out[i] = sum_k x[k] * w[i, k]` with `n` outputs of `k` terms: the shape of a batch-1 linear layer.
fn gemv(n: i64, k: i64) -> Kernel {
    let (i, j, acc) = (Var(0), Var(1), Var(2));
    let w_idx = Expr::I(IOp::Add, Box::new(Expr::I(IOp::Mul, Box::new(Expr::Var(i)), Box::new(Expr::Int(k)))), Box::new(Expr::Var(j)));
    let term = Expr::Bin(
        rlx_ir::BinaryOp::Mul,
        DType::F32,
        Box::new(Expr::Load { buf: 1, index: Box::new(Expr::Var(j)) }),
        Box::new(Expr::Load { buf: 2, index: Box::new(w_idx) }),
    );
    let body = vec![Stmt::For {
        var: i,
        extent: n,
        kind: LoopKind::Parallel,
        body: vec![
            Stmt::Decl { var: acc, dtype: DType::F32, init: Expr::Lit(0.0, DType::F32) },
            Stmt::For {
                var: j,
                extent: k,
                kind: LoopKind::Serial,
                body: vec![Stmt::Assign { var: acc, value: Expr::Bin(rlx_ir::BinaryOp::Add, DType::F32, Box::new(Expr::Var(acc)), Box::new(term)) }],
            },
            Stmt::Store { buf: 0, index: Expr::Var(i), value: Expr::Var(acc) },
        ],
    }];
    let params = vec![
        param(DType::F32, n as usize, Access::Write),
        param(DType::F32, k as usize, Access::Read),
        param(DType::F32, (n * k) as usize, Access::Read),
    ];
    Kernel { name: "gemv".into(), params, body, vars: 3 }
}

#[test]
fn a_large_matrix_vector_product_is_split_for_its_bytes() {
    // 784 × 128 f32: 100,352 multiply-adds (under PARALLEL_MIN_WORK) over 401 KB of weights.
    let k = gemv(128, 784);
    assert!(work(&k.body) < PARALLEL_MIN_WORK);
    assert!(streamed_bytes(&k) >= PARALLEL_MIN_BYTES);
    let s = split_of(&k);
    assert_eq!(s.extent, 128);
    assert!(s.grain.is_some(), "a 401 KB matrix-vector product should run on the pool");
}

#[test]
fn a_small_kernel_runs_inline() {
    // 10 × 128: 5 KB of weights.
    let s = split_of(&gemv(10, 128));
    assert!(s.grain.is_none());
}

#[test]
fn a_gather_from_a_large_table_counts_the_rows_it_touches() {
    // 128 rows of 384 gathered from a 30522 × 384 table: the table is 46 MB but 49,152 elements are read.
    let (i, j) = (Var(0), Var(1));
    let idx = Expr::I(IOp::Add, Box::new(Expr::I(IOp::Mul, Box::new(Expr::Var(i)), Box::new(Expr::Int(384)))), Box::new(Expr::Var(j)));
    let body = vec![Stmt::For {
        var: i,
        extent: 128,
        kind: LoopKind::Parallel,
        body: vec![Stmt::For {
            var: j,
            extent: 384,
            kind: LoopKind::Vector(16),
            body: vec![Stmt::Store { buf: 0, index: idx.clone(), value: Expr::Load { buf: 1, index: Box::new(idx) } }],
        }],
    }];
    let k = Kernel {
        name: "gather".into(),
        params: vec![param(DType::I8, 128 * 384, Access::Write), param(DType::I8, 30522 * 384, Access::Read)],
        body,
        vars: 2,
    };
    assert_eq!(streamed_bytes(&k), 2 * 128 * 384);
    assert!(split_of(&k).grain.is_none());
}

#[test]
fn much_work_is_split_whatever_the_bytes() {
    let k = gemv(1024, 1024);
    assert!(work(&k.body) >= PARALLEL_MIN_WORK);
    assert!(split_of(&k).grain.is_some());
}
