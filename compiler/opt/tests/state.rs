//! Planning state (a KV cache): state tensors live in the state region, not among the caller's
//! inputs and outputs; `write_rows` updates its state input in place (its kernel binds the state
//! buffer and stores only the new rows, under a bounds guard); a `write_rows` on anything else is a
//! planning problem naming the node.

use rlx_ir::lir::Base;
use rlx_ir::loops::Stmt;
use rlx_ir::{DType, Mir, MirOp, ReduceOp, State, TensorType};

fn graph(cache_is_state: bool) -> Mir {
    let mut g = Mir::new();
    let x = g.add_input("x", TensorType::fixed(DType::F32, &[2, 3]));
    let pos = g.add_input("pos", TensorType::fixed(DType::I64, &[2]));
    let cache = g.add_input("cache", TensorType::fixed(DType::F32, &[8, 3]));
    let c = g.add1("cache.update", MirOp::WriteRows, &[cache, x, pos]).unwrap();
    let s = g.add1("sum", MirOp::Reduce { op: ReduceOp::Sum, axes: vec![0], keepdims: false }, &[c]).unwrap();
    g.outputs = vec![s, c];
    if cache_is_state {
        g.state = vec![State { input: 2, output: 1 }];
    }
    g
}

#[test]
fn write_rows_updates_the_state_in_place() {
    let lir = rlx_opt::plan(&graph(true), &rlx_opt::plan::PlanOptions::default()).unwrap();
    assert_eq!(lir.inputs.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["x", "pos"]);
    assert_eq!(lir.outputs.len(), 1);
    assert_eq!((lir.state.len(), lir.state[0].offset, lir.state_bytes), (1, 0, 8 * 3 * 4));
    let w = lir.launches.iter().find(|l| l.kernel.name == "cache.update").expect("a write_rows kernel");
    let out = &lir.buffers[w.bindings[0] as usize];
    assert_eq!((out.base, out.offset, out.shape.clone()), (Base::State, 0, vec![8, 3]));
    // A parallel loop over a row's elements, inside it the rows in order, each guarded; no copy of
    // the cache anywhere.
    let [Stmt::For { extent: 3, kind: rlx_ir::loops::LoopKind::Parallel, body, .. }] = &w.kernel.body[..] else { panic!("{:?}", w.kernel.body) };
    let [Stmt::For { extent: 2, body, .. }] = &body[..] else { panic!("{body:?}") };
    assert!(matches!(body[..], [Stmt::If { .. }]), "{body:?}");
    assert_eq!(lir.launches.len(), 2, "{lir}");
    // The reduction reads the updated cache from the state region.
    let sum = lir.launches.iter().find(|l| l.kernel.name != "cache.update").unwrap();
    assert!(sum.bindings.iter().any(|&b| lir.buffers[b as usize].base == Base::State), "{lir}");
}

#[test]
fn write_rows_on_a_plain_input_is_a_problem() {
    let probs = rlx_opt::plan(&graph(false), &rlx_opt::plan::PlanOptions::default()).unwrap_err();
    assert!(probs.iter().any(|p| p.node.as_deref() == Some("cache.update") && p.msg.contains("state input")), "{probs:?}");
}
