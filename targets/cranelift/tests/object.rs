//! A hand-built LIR program through the Cranelift writer: objects for x86-64 and aarch64 with the
//! contract's symbols, deterministic bytes, CLIF text for `--emit-ir`. (Running objects is tested
//! end to end in rlxc: the conformance columns and `compiler/rlxc/tests/native.rs`.)

use rlx_ir::lir::{Base, Buffer, Launch, Lir, Port};
use rlx_ir::loops::{Access, Expr, Kernel, LoopKind, Param, Stmt, Var};
use rlx_ir::{BinaryOp, DType, TensorType, UnaryOp};
use rlx_target_cranelift::{compile, emit_ir, CompileOptions, Isa};

/// out[i] = exp(in[i]) + w[i] for 4 f32s, with a parallel outer loop and an f16 round trip.
fn program() -> Lir {
    let i = Var(0);
    let x = Expr::load(0, Expr::var(i));
    let w = Expr::load(2, Expr::var(i));
    let h = Expr::Cast { from: DType::F16, to: DType::F32, x: Box::new(Expr::Cast { from: DType::F32, to: DType::F16, x: Box::new(w) }) };
    let v = Expr::Bin(BinaryOp::Add, DType::F32, Box::new(Expr::Un(UnaryOp::Exp, DType::F32, Box::new(x))), Box::new(h));
    let body = vec![Stmt::For { var: i, extent: 4, kind: LoopKind::Parallel, body: vec![Stmt::Store { buf: 1, index: Expr::var(i), value: v }] }];
    let p = |access| Param { dtype: DType::F32, elems: 4, access };
    let kernel = Kernel { name: "k".into(), params: vec![p(Access::Read), p(Access::Write), p(Access::Read)], body, vars: 1 };
    let buf = |base, label: &str| Buffer { base, offset: 0, dtype: DType::F32, shape: vec![4], label: label.into() };
    Lir {
        inputs: vec![Port { name: "x".into(), ty: TensorType::fixed(DType::F32, &[4]) }],
        outputs: vec![Port { name: "y".into(), ty: TensorType::fixed(DType::F32, &[4]) }],
        buffers: vec![buf(Base::Input(0), "x"), buf(Base::Output(0), "y"), buf(Base::Weights, "w")],
        launches: vec![Launch { nodes: vec![], kernel, bindings: vec![0, 1, 2] }],
        regions: Vec::new(),
        arena_bytes: 0,
        state: vec![],
        state_bytes: 0,
        weights: [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|f| f.to_le_bytes()).collect(),
        align: 64,
    }
}

fn has(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn objects_for_x86_64_and_aarch64_have_the_contract_symbols() {
    let lir = program();
    for isa in [Isa::X86_64V3, Isa::X86_64, Isa::Aarch64, Isa::Host] {
        for external in [false, true] {
            let opts = CompileOptions { name: "tiny".into(), isa: isa.clone(), external_weights: external };
            let obj = compile(&lir, &opts).unwrap_or_else(|e| panic!("{isa:?}: {e}"));
            assert_eq!(&obj[..4], b"\x7fELF", "{isa:?}: an ELF object");
            assert!(has(&obj, "tiny_run"), "{isa:?}: exports tiny_run");
            assert!(has(&obj, "expf"), "{isa:?}: calls libm expf");
            assert_eq!(has(&obj, "tiny_set_weights"), external, "{isa:?}: NAME_set_weights only with external weights");
            assert_eq!(obj, compile(&lir, &opts).unwrap(), "{isa:?}: deterministic bytes");
        }
    }
    let text = emit_ir(&lir, &CompileOptions { name: "tiny".into(), isa: Isa::X86_64V3, external_weights: false }).unwrap();
    assert!(text.contains("function") && text.contains("call"), "CLIF text:\n{text}");
}
