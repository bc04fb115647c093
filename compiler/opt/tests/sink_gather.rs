//! `sink_gathers` changes where a gather happens, never the values: the fold filetest's graph, run by
//! the reference interpreter before and after `simplify`, gives bit-identical outputs for every id.

use rlx_ir::{text, ConstData, DType, Mir, MirOp, TensorType};

fn eval(op: &MirOp, ins: &[ConstData]) -> Result<Vec<ConstData>, String> {
    let mut m = Mir::new();
    let vs: Vec<_> = ins.iter().map(|c| m.add_input("", TensorType::fixed(c.dtype, &c.shape))).collect();
    m.outputs = m.add_node("fold", op.clone(), &vs)?;
    rlx_interp::run(&m, ins).map_err(|e| e.to_string())
}

#[test]
fn sunk_gathers_compute_the_same_values() {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/filetests/fold_sink_gather.rlx")).unwrap();
    let body: String = src.lines().skip(1).take_while(|l| !l.starts_with("----")).filter(|l| !l.starts_with('#')).map(|l| format!("{l}\n")).collect();
    let g = text::parse::<MirOp>(&body).unwrap();
    let s = rlx_opt::simplify(&g, &eval);
    // The table's gather moved: no f32 constant as large as the table is left.
    let table_sized = s.values.iter().filter_map(|v| match &v.def {
        rlx_ir::Def::Const(c) => Some(c),
        _ => None,
    });
    assert!(table_sized.clone().count() > 0);
    assert!(table_sized.into_iter().all(|c| !(c.dtype == DType::F32 && c.shape == [4, 3])));
    for a in 0..4i64 {
        for b in 0..4i64 {
            let ids = ConstData::from_i64(vec![1, 2], &[a, b]);
            let want = rlx_interp::run(&g, std::slice::from_ref(&ids)).unwrap();
            let got = rlx_interp::run(&s, std::slice::from_ref(&ids)).unwrap();
            assert_eq!(want, got, "ids [{a}, {b}]");
        }
    }
}
