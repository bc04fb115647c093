//! rlx-target-shader: the shader back end. LIR loop-form kernels become compute entry points of one
//! `naga::Module`; naga validates it and its writers emit SPIR-V (Vulkan), WGSL (WebGPU), MSL (Metal),
//! HLSL (DirectX) and GLSL compute (OpenGL).
//!
//! The translation (`wgsl.rs`) writes the loop form as WGSL text and hands it to naga's WGSL front
//! end, the same way the LLVM writer writes LLVM IR text and has LLVM parse it: the text is small,
//! printable, and naga's front end builds and type-checks the `naga::Module` that every writer reads.
//!
//! The mapping:
//! - one storage buffer per distinct LIR base (arena, weights, each input, each output), declared
//!   `array<u32, N>` at `@group(0) @binding(i)` where `i` is the base's index in [`Program::bases`];
//!   every kernel parameter is an element offset into its base's buffer (4-byte dtypes bitcast on
//!   load and store; i64 as two words; bool is a byte: read by shifting, written through an atomic
//!   view of the same buffer at `@binding(n_bases + i)`, `atomicAnd` + `atomicOr` on its word);
//! - a kernel's outermost `parallel` loop, together with nested loops whose iterations are provably
//!   independent, is flattened into the global invocation index (workgroup size 256, bounds-checked;
//!   more than 65,535 workgroups spill into the y dimension); inner loops stay loops; a kernel with no
//!   parallel outer loop runs on one invocation;
//! - index arithmetic is i32 (buffers of 2^31 elements or more are rejected with an error);
//! - matmuls and reductions recognized in the loop form (`wgsl/tiled.rs`) use workgroup memory and
//!   barriers instead: 16×16-invocation tiles staging A and B through `var<workgroup>` arrays (1×1,
//!   2×2 or 4×4 outputs per invocation), one 64-invocation workgroup per reduced row with a
//!   shared-memory tree, and row kernels (the planner's row fusion: LayerNorm, softmax) as one
//!   workgroup of 64–256 invocations per row, a tree per reduction and the outputs strided over the
//!   invocations. [`translate_with`]`(…, false)` turns that off.
//!
//! It depends on rlx-ir only and hands the legalizer its claim set as data ([`caps`]).

mod wgsl;

use rlx_ir::lir::{Base, Lir};
use rlx_ir::{DType, TargetCaps};
use std::collections::BTreeMap;

pub use wgsl::WORKGROUP_SIZE;

/// The languages the shader targets write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    /// SPIR-V 1.0 for Vulkan (`--target vulkan`, `--target spirv`): `NAME.spv`, one module, one entry
    /// point per kernel (`k0`, `k1`, …).
    Spirv,
    /// WGSL (`--target webgpu`): `NAME.wgsl`.
    Wgsl,
    /// Metal Shading Language 2.1 (`--target metal`): `NAME.metal`, buffer `[[buffer(i)]]` = binding i.
    Msl,
    /// HLSL shader model 5.1 (`--target directx`): `NAME.hlsl`, `register(u_i)`/`(t_i)` = binding i.
    Hlsl,
    /// GLSL 4.30 compute (`--target opengl`): `NAME.kI.comp`, one file per kernel (GLSL has one entry
    /// point per shader).
    Glsl,
}

/// Dtypes every shader target claims. f64 is not claimed (Vulkan's extended instructions have no
/// 64-bit exp/log/…), nor are 8/16-bit integers and f16/bf16 (sub-word stores need atomics or
/// extensions): `rlxc check` reports them.
pub const DTYPES: &[DType] = &[DType::F32, DType::I32, DType::U32, DType::Bool];

/// The dtypes a language claims: SPIR-V adds i64 (SPIR-V `Int64`; the device needs `shaderInt64`,
/// which runtime-min's executor checks). WGSL has no i64; MSL, HLSL (SM 6.0) and GLSL
/// (`GL_ARB_gpu_shader_int64`) could, but are not claimed until something checks them.
pub fn dtypes(lang: Lang) -> Vec<DType> {
    let mut v = DTYPES.to_vec();
    if lang == Lang::Spirv {
        v.push(DType::I64);
    }
    v
}

/// MIR op kinds claimed: every kind the shared kernel lowering produces loop form for, except the
/// ones whose kernels need data the shader writer does not yet handle.
pub const KINDS: &[&str] = &[
    "neg", "abs", "exp", "log", "sqrt", "recip", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
    "atanh", "sigmoid", "erf", "relu", "floor", "ceil", "round", "sign", "not", "bit_not", "is_nan", "is_inf", "is_pos_inf",
    "is_neg_inf", "add", "sub", "mul", "div", "pow", "max", "min", "mod", "fmod", "eq", "lt", "le", "gt", "ge", "and", "or", "xor",
    "bit_and", "bit_or", "bit_xor", "shl", "shr", "where", "cast", "matmul", "reduce_sum", "reduce_prod", "reduce_max", "reduce_min",
    "reduce_mean", "argmax", "argmin", "reshape", "transpose", "expand", "slice", "concat", "gather", "gather_elements", "gather_nd", "pad",
    "conv", "conv_transpose", "max_pool", "avg_pool", "cumsum", "compress", "nonzero", "nms", "unique", "quantize", "dequantize", "fake_quantize",
    "scatter_elements", "scatter_nd", "topk",
];

/// Kinds that only move data (loads and stores, no arithmetic): these, and `cast`, are also claimed
/// for the storage-only dtypes [`NARROW`] (bytes and 16-bit values are read by shifting, written
/// through an atomic view, held widened in 32 bits; f16/bf16 exactly in f32, rounded to nearest
/// even by a cast to them: `wgsl/half.rs`).
pub const BYTE_KINDS: &[&str] = &["cast", "reshape", "transpose", "expand", "slice", "concat", "gather", "gather_elements", "gather_nd", "pad"];

/// The quantization ops, claimed for the narrow dtypes too (their operands and results; the
/// arithmetic is f32 and i32).
pub const QUANT_KINDS: &[&str] = &["quantize", "dequantize", "fake_quantize"];

/// Elementwise integer kinds also claimed for i8/u8/i16/u16: computed in the 32-bit carrier, the
/// result wrapped to the narrow width (`wgsl.rs`'s `wrap_small`).
pub const SMALL_INT_KINDS: &[&str] = &[
    "neg", "abs", "sign", "relu", "bit_not", "add", "sub", "mul", "div", "mod", "fmod", "max", "min", "eq", "lt", "le", "gt", "ge", "bit_and",
    "bit_or", "bit_xor", "shl", "shr", "where",
];

/// Elementwise kinds also claimed for f16/bf16: computed in f32, each result rounded to the narrow
/// type (`wgsl.rs`'s `round_half`), as the interpreter rounds each op's f64 result.
pub const HALF_KINDS: &[&str] = &[
    "neg", "abs", "exp", "log", "sqrt", "recip", "sin", "cos", "tanh", "sigmoid", "erf", "relu", "floor", "ceil", "round", "sign", "is_nan",
    "is_inf", "is_pos_inf", "is_neg_inf", "add", "sub", "mul", "div", "max", "min", "mod", "fmod", "eq", "lt", "le", "gt", "ge", "where",
];

/// The storage-only dtypes of [`BYTE_KINDS`].
pub const NARROW: &[DType] = &[DType::I8, DType::U8, DType::I16, DType::U16, DType::F16, DType::BF16];

/// Kinds whose result is i64 whatever their input: claimed for SPIR-V only (`dtypes`).
pub const I64_KINDS: &[&str] = &["nonzero", "nms", "unique", "topk"];

/// The claim set for `--target NAME` writing `lang`.
pub fn caps(name: &str, lang: Lang) -> TargetCaps {
    let mut native = BTreeMap::new();
    for &k in KINDS {
        // Their results are i64 (indices, counts), which only SPIR-V has.
        if I64_KINDS.contains(&k) && lang != Lang::Spirv {
            continue;
        }
        let mut d = dtypes(lang);
        if BYTE_KINDS.contains(&k) {
            d.extend(NARROW);
        }
        if QUANT_KINDS.contains(&k) {
            d.extend(NARROW);
        }
        if SMALL_INT_KINDS.contains(&k) {
            d.extend(&NARROW[..4]);
        }
        if HALF_KINDS.contains(&k) {
            d.extend([DType::F16, DType::BF16]);
        }
        native.insert(k, d);
    }
    TargetCaps { name: name.to_string(), native }
}

/// One storage buffer of the program (the shader declares `max(1, ceil(bytes / 4))` words).
pub use rlx_ir::schedule::BaseBuf;

/// One dispatch, in schedule order: entry point `k{entry}`, workgroup counts.
#[derive(Clone, Debug, PartialEq)]
pub struct Dispatch {
    pub entry: u32,
    pub groups: [u32; 3],
    /// The entry point's `@workgroup_size` ([`WORKGROUP_SIZE`]×1×1 for the per-invocation mapping,
    /// 16×16×1 for a tiled matmul, 64×1×1 for a workgroup reduction, 64/128/256×1×1 for a row kernel).
    pub workgroup_size: [u32; 3],
    /// Binding indices (into [`Program::bases`]) the kernel touches.
    pub uses: Vec<u32>,
    /// Every byte range the kernel may touch: one per kernel parameter, in parameter order.
    pub ranges: Vec<ByteRange>,
    /// The kernel's name (its fused MIR nodes), for reports.
    pub name: String,
}

/// The byte range a kernel parameter may touch (one format for every GPU writer: `rlx_ir::schedule`).
pub use rlx_ir::schedule::ByteRange;

/// A translated model: the naga module and its schedule.
pub struct Program {
    pub wgsl: String,
    pub module: naga::Module,
    pub info: naga::valid::ModuleInfo,
    pub bases: Vec<BaseBuf>,
    pub dispatches: Vec<Dispatch>,
    /// The module computes in 64-bit integers (SPIR-V `Int64`).
    pub int64: bool,
}

pub use rlx_ir::schedule::{SCHEDULE_MAGIC, SCHEDULE_VERSION};

impl Program {
    /// The schedule as runtime-min's Vulkan executor reads it (`rlx_ir::schedule::encode`, version 2:
    /// the workgroup sizes are in the module). Binding `i` of descriptor set 0 is base `i`, and binding
    /// `n_bases + i` is base `i` again (the atomic view byte stores use; ranges name `i`); entry point
    /// `k{entry}` is in `NAME.spv`.
    pub fn schedule_bytes(&self) -> Vec<u8> {
        let ds: Vec<rlx_ir::schedule::SchedDispatch> =
            self.dispatches.iter().map(|d| rlx_ir::schedule::SchedDispatch { entry: d.entry, groups: d.groups, block: d.workgroup_size, shared: 0, ranges: d.ranges.clone(), comm: None }).collect();
        rlx_ir::schedule::encode(&self.bases, &ds, false)
    }
}

pub use rlx_ir::schedule::bases_of;

/// LIR → WGSL → validated naga module for `lang`. Errors name the kernel and what it needs. i64 is
/// 64-bit in the module when `lang` claims it and the program has i64 values of the model's own (an
/// i64 tensor, or a cast to i64 inside a fused chain); otherwise the only i64 scalars are the
/// planner's (window counters, arg positions, bounded by tensor sizes) and are computed in i32.
pub fn translate(lir: &Lir, lang: Lang) -> Result<Program, String> {
    translate_with(lir, lang, true)
}

/// [`translate`], choosing whether matmuls and reductions use workgroup memory (`tiles`; `false` keeps
/// every kernel on the one-invocation-per-output mapping — the reference the tiled kernels are tested
/// against).
pub fn translate_with(lir: &Lir, lang: Lang, tiles: bool) -> Result<Program, String> {
    let bases = bases_of(lir);
    let int64 = dtypes(lang).contains(&DType::I64) && (lir.buffers.iter().any(|b| b.dtype == DType::I64) || lir.launches.iter().any(|l| wgsl::casts_to_i64(&l.kernel.body)));
    let (text, dispatches) = wgsl::module_text(lir, &bases, int64, tiles)?;
    let module = naga::front::wgsl::parse_str(&text).map_err(|e| format!("internal error: generated WGSL does not parse: {}\n{text}", e.emit_to_string(&text)))?;
    let info = validate(&module).map_err(|e| format!("internal error: naga rejects the generated module: {e}"))?;
    Ok(Program { wgsl: text, module, info, bases, dispatches, int64 })
}

/// Validates a module with every check on and no optional capabilities but 64-bit integers.
pub fn validate(module: &naga::Module) -> Result<naga::valid::ModuleInfo, String> {
    naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::SHADER_INT64)
        .validate(module)
        .map_err(|e| format!("{:?}", e.into_inner()))
}

/// Writes the program in one language: `(file suffix, bytes)` pairs (`spv`, `wgsl`, `metal`, `hlsl`,
/// `kI.comp`).
pub fn emit(p: &Program, lang: Lang) -> Result<Vec<(String, Vec<u8>)>, String> {
    use naga::back;
    use naga::ResourceBinding;
    let rb = |i: usize| ResourceBinding { group: 0, binding: i as u32 };
    let writable = |b: &BaseBuf| !matches!(b.base, Base::Weights | Base::Input(_));
    match lang {
        Lang::Spirv => {
            let mut opts = back::spv::Options::default();
            opts.flags = back::spv::WriterFlags::empty();
            // Every workgroup array is written before it is read (behind a barrier): no zero fill.
            opts.zero_initialize_workgroup_memory = back::spv::ZeroInitializeWorkgroupMemoryMode::None;
            let words = back::spv::write_vec(&p.module, &p.info, &opts, None).map_err(|e| format!("SPIR-V writer: {e}"))?;
            Ok(vec![("spv".into(), words.iter().flat_map(|w| w.to_le_bytes()).collect())])
        }
        Lang::Wgsl => {
            let s = back::wgsl::write_string(&p.module, &p.info, back::wgsl::WriterFlags::empty()).map_err(|e| format!("WGSL writer: {e}"))?;
            // Every WGSL file written is re-parsed and validated by naga (the CI check for webgpu).
            let again = naga::front::wgsl::parse_str(&s).map_err(|e| format!("internal error: written WGSL does not re-parse: {}", e.emit_to_string(&s)))?;
            validate(&again).map_err(|e| format!("internal error: written WGSL does not re-validate: {e}"))?;
            Ok(vec![("wgsl".into(), s.into_bytes())])
        }
        Lang::Msl => {
            let mut opts = back::msl::Options { lang_version: (2, 1), fake_missing_bindings: false, zero_initialize_workgroup_memory: false, ..Default::default() };
            for d in &p.dispatches {
                let mut res = back::msl::EntryPointResources::default();
                for (i, b) in p.bases.iter().enumerate() {
                    res.resources.insert(rb(i), back::msl::BindTarget { buffer: Some(i as u8), mutable: writable(b), ..Default::default() });
                    let j = p.bases.len() + i;
                    res.resources.insert(rb(j), back::msl::BindTarget { buffer: Some(j as u8), mutable: true, ..Default::default() });
                }
                opts.per_entry_point_map.insert(format!("k{}", d.entry), res);
            }
            let (s, _) = back::msl::write_string(&p.module, &p.info, &opts, &back::msl::PipelineOptions::default()).map_err(|e| format!("MSL writer: {e}"))?;
            Ok(vec![("metal".into(), s.into_bytes())])
        }
        Lang::Hlsl => {
            let mut opts = back::hlsl::Options { shader_model: back::hlsl::ShaderModel::V5_1, fake_missing_bindings: false, zero_initialize_workgroup_memory: false, ..Default::default() };
            for i in 0..2 * p.bases.len() {
                opts.binding_map.insert(rb(i), back::hlsl::BindTarget { space: 0, register: i as u32, ..Default::default() });
            }
            let popts = back::hlsl::PipelineOptions { entry_point: None };
            let mut s = String::new();
            back::hlsl::Writer::new(&mut s, &opts, &popts).write(&p.module, &p.info, None).map_err(|e| format!("HLSL writer: {e}"))?;
            Ok(vec![("hlsl".into(), s.into_bytes())])
        }
        Lang::Glsl => {
            let mut out = Vec::new();
            for d in &p.dispatches {
                let mut opts = back::glsl::Options { version: back::glsl::Version::Desktop(430), writer_flags: back::glsl::WriterFlags::empty(), zero_initialize_workgroup_memory: false, ..Default::default() };
                for i in 0..2 * p.bases.len() {
                    opts.binding_map.insert(rb(i), i as u8);
                }
                let popts = back::glsl::PipelineOptions { shader_stage: naga::ShaderStage::Compute, entry_point: format!("k{}", d.entry), multiview: None };
                let mut s = String::new();
                back::glsl::Writer::new(&mut s, &p.module, &p.info, &opts, &popts, naga::proc::BoundsCheckPolicies::default())
                    .and_then(|mut w| w.write().map(|_| ()))
                    .map_err(|e| format!("GLSL writer (k{}): {e}", d.entry))?;
                out.push((format!("k{}.comp", d.entry), s.into_bytes()));
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::lir::{Buffer, Launch, Port};
    use rlx_ir::loops::{Access, Expr, Kernel, LoopKind, Param, Stmt, Var};
    use rlx_ir::{BinaryOp, TensorType};

    /// out[i] (i64) = i < n/2 ? -1 : x[i] > 0 — one parallel loop of `n` iterations.
    fn lir(n: usize) -> Lir {
        let i = Var(0);
        let x = Expr::load(1, Expr::var(i));
        let pos = Expr::Bin(BinaryOp::Gt, DType::F32, Box::new(x), Box::new(Expr::Lit(0.0, DType::F32)));
        let v = Expr::Select(
            Box::new(Expr::i(rlx_ir::loops::IOp::Lt, Expr::var(i), Expr::int(n as i64 / 2))),
            Box::new(Expr::Lit(-1.0, DType::I64)),
            Box::new(Expr::Cast { from: DType::Bool, to: DType::I64, x: Box::new(pos) }),
        );
        let kernel = Kernel {
            name: "k".into(),
            params: vec![Param { dtype: DType::I64, elems: n, access: Access::Write }, Param { dtype: DType::F32, elems: n, access: Access::Read }],
            body: vec![Stmt::For { var: i, extent: n as i64, kind: LoopKind::Parallel, body: vec![Stmt::Store { buf: 0, index: Expr::var(i), value: v }] }],
            vars: 1,
        };
        Lir {
            inputs: vec![Port { name: "x".into(), ty: TensorType::fixed(DType::F32, &[n]) }],
            outputs: vec![Port { name: "y".into(), ty: TensorType::fixed(DType::I64, &[n]) }],
            buffers: vec![
                Buffer { base: Base::Output(0), offset: 0, dtype: DType::I64, shape: vec![n], label: "y".into() },
                Buffer { base: Base::Input(0), offset: 0, dtype: DType::F32, shape: vec![n], label: "x".into() },
            ],
            launches: vec![Launch { nodes: vec![], kernel, bindings: vec![0, 1] }],
            regions: Vec::new(),
            arena_bytes: 0,
            state: vec![],
            state_bytes: 0,
            weights: vec![],
            align: 64,
        }
    }

    #[test]
    fn every_language_is_written_from_one_validated_module() {
        let p = translate(&lir(100), Lang::Wgsl).unwrap();
        assert!(!p.int64);
        assert_eq!(p.dispatches[0].groups, [1, 1, 1]);
        for lang in [Lang::Spirv, Lang::Wgsl, Lang::Msl, Lang::Hlsl, Lang::Glsl] {
            let files = emit(&p, lang).unwrap();
            assert!(!files.is_empty() && files.iter().all(|(_, b)| !b.is_empty()), "{lang:?}");
        }
        let s = p.schedule_bytes();
        assert_eq!(&s[..4], b"RLXS");
        // Header, 4 bases, 1 dispatch of 5 words + 2 ranges of 6.
        assert_eq!(s.len(), 4 * (3 + 4 * 4 + 1 + 5 + 2 * 6));
    }

    /// Three launches on arena buffers: `a` (f32[16], bytes 0..64), a view `v` of its second half
    /// (bytes 32..64), `m` (bool[3] at byte 64: bytes 64..67, whole word 64..68), and `b` (f32[8]
    /// placed at bytes 0..32 — arena reuse of `a`'s first half).
    #[test]
    fn dispatch_ranges_are_the_bound_buffers_bytes_in_words() {
        let i = Var(0);
        let f = |shape: &[usize]| TensorType::fixed(DType::F32, shape);
        let buf = |base, offset, dtype, n: usize, label: &str| Buffer { base, offset, dtype, shape: vec![n], label: label.into() };
        let par = |dtype, elems, access| Param { dtype, elems, access };
        let each = |n: usize, body: Vec<Stmt>| vec![Stmt::For { var: i, extent: n as i64, kind: LoopKind::Parallel, body }];
        let launch = |name: &str, params, bindings, body| Launch { nodes: vec![], kernel: Kernel { name: name.into(), params, body, vars: 1 }, bindings };
        let l = Lir {
            inputs: vec![Port { name: "x".into(), ty: f(&[16]) }],
            outputs: vec![Port { name: "y".into(), ty: f(&[8]) }],
            buffers: vec![
                buf(Base::Arena, 0, DType::F32, 16, "a"),
                buf(Base::Arena, 32, DType::F32, 8, "v"),
                buf(Base::Arena, 64, DType::Bool, 3, "m"),
                buf(Base::Input(0), 0, DType::F32, 16, "x"),
                buf(Base::Output(0), 0, DType::F32, 8, "y"),
                buf(Base::Arena, 0, DType::F32, 8, "b"),
            ],
            launches: vec![
                // a = x
                launch("a", vec![par(DType::F32, 16, Access::Write), par(DType::F32, 16, Access::Read)], vec![0, 3], each(16, vec![Stmt::Store { buf: 0, index: Expr::var(i), value: Expr::load(1, Expr::var(i)) }])),
                // m = v > 0 for the first 3; b = v
                launch(
                    "m",
                    vec![par(DType::Bool, 3, Access::Write), par(DType::F32, 8, Access::Read), par(DType::F32, 8, Access::Write)],
                    vec![2, 1, 5],
                    each(3, vec![
                        Stmt::Store { buf: 0, index: Expr::var(i), value: Expr::Bin(BinaryOp::Gt, DType::F32, Box::new(Expr::load(1, Expr::var(i))), Box::new(Expr::Lit(0.0, DType::F32))) },
                        Stmt::Store { buf: 2, index: Expr::var(i), value: Expr::load(1, Expr::var(i)) },
                    ]),
                ),
                // y = b + y (a parameter declared Write whose body also reads it: ReadWrite)
                launch(
                    "y",
                    vec![par(DType::F32, 8, Access::Write), par(DType::F32, 8, Access::Read)],
                    vec![4, 5],
                    each(8, vec![Stmt::Store { buf: 0, index: Expr::var(i), value: Expr::Bin(BinaryOp::Add, DType::F32, Box::new(Expr::load(1, Expr::var(i))), Box::new(Expr::load(0, Expr::var(i)))) }]),
                ),
            ],
            regions: Vec::new(),
            arena_bytes: 68,
            state: vec![],
            state_bytes: 0,
            weights: vec![],
            align: 4,
        };
        let p = translate(&l, Lang::Spirv).unwrap();
        let r = |binding, access, start, end| ByteRange { binding, access, start, end };
        // Bindings: 0 arena, 1 weights, 2 input 0, 3 output 0.
        assert_eq!(p.dispatches[0].ranges, vec![r(0, Access::Write, 0, 64), r(2, Access::Read, 0, 64)]);
        assert_eq!(p.dispatches[1].ranges, vec![r(0, Access::Write, 64, 68), r(0, Access::Read, 32, 64), r(0, Access::Write, 0, 32)]);
        assert_eq!(p.dispatches[2].ranges, vec![r(3, Access::ReadWrite, 0, 32), r(0, Access::Read, 0, 32)]);
        // The schedule words of dispatch 1: entry, groups, 3 ranges {binding, access, start, end}.
        let w: Vec<u32> = p.schedule_bytes().chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        assert_eq!(w[1], 2);
        let d1 = 3 + 4 * 4 + 1 + (5 + 2 * 6);
        assert_eq!(w[d1..d1 + 5 + 3 * 6], [1, 1, 1, 1, 3, 0, 2, 64, 0, 68, 0, 0, 1, 32, 0, 64, 0, 0, 2, 0, 0, 32, 0]);
    }

    #[test]
    fn empty_grids_and_index_valued_i64_stores_translate() {
        // A zero-extent loop: no invocation runs the body (and nothing divides by zero).
        let p = translate(&lir(0), Lang::Spirv).unwrap();
        assert_eq!(p.dispatches[0].groups, [1, 1, 1]);
        // An index stored into an i64 tensor (as arg-reductions do) is widened to i64.
        let mut l = lir(8);
        if let Stmt::For { body, .. } = &mut l.launches[0].kernel.body[0] {
            body[0] = Stmt::Store { buf: 0, index: Expr::var(Var(0)), value: Expr::Select(Box::new(Expr::int(1)), Box::new(Expr::ToIndex { from: DType::I64, x: Box::new(Expr::var(Var(0))) }), Box::new(Expr::Lit(3.0, DType::I64))) };
        }
        for lang in [Lang::Spirv, Lang::Wgsl] {
            translate(&l, lang).unwrap();
        }
    }

    #[test]
    fn grids_past_65535_workgroups_spill_into_y() {
        let n = 65535 * WORKGROUP_SIZE as usize + 1000;
        let p = translate(&lir(n), Lang::Wgsl).unwrap();
        assert_eq!(p.dispatches[0].groups, [65535, 2, 1]);
        assert!(p.wgsl.contains(&format!("gid.y * nwg.x * {WORKGROUP_SIZE}u")));
    }

    #[test]
    fn unsupported_storage_is_an_error_naming_the_kernel() {
        let mut l = lir(8);
        l.launches[0].kernel.params[0].dtype = DType::F64;
        l.buffers[0].dtype = DType::F64;
        l.outputs[0].ty = TensorType::fixed(DType::F64, &[8]);
        let e = translate(&l, Lang::Spirv).err().unwrap();
        assert!(e.contains("kernel 'k'") && e.contains("f64"), "{e}");
        assert!(!caps("vulkan", Lang::Spirv).claims("add", DType::F64) && caps("vulkan", Lang::Spirv).claims("add", DType::I64));
        assert!(!caps("webgpu", Lang::Wgsl).claims("add", DType::I64));
        assert!(caps("metal", Lang::Msl).claims("matmul", DType::F32));
    }

    /// out[i, j] = relu(sum_k a[i, k] * w[j, k]) (a weight stored [N, K]), and r[i] = max_k a[i, k]:
    /// the per-element loop forms the planner writes for a matmul and a reduction.
    fn matmul_and_reduce(m: usize, n: usize, k: usize) -> Lir {
        let (i, j, kk, acc) = (Var(0), Var(1), Var(2), Var(3));
        let (i2, k2, acc2) = (Var(4), Var(5), Var(6));
        let a = Expr::load(1, Expr::add(Expr::mul(Expr::var(i), Expr::int(k as i64)), Expr::var(kk)));
        let w = Expr::load(2, Expr::add(Expr::mul(Expr::var(j), Expr::int(k as i64)), Expr::var(kk)));
        let prod = Expr::Bin(BinaryOp::Mul, DType::F32, Box::new(a), Box::new(w));
        let mm = vec![Stmt::For {
            var: i,
            extent: m as i64,
            kind: LoopKind::Parallel,
            body: vec![Stmt::For {
                var: j,
                extent: n as i64,
                kind: LoopKind::Serial,
                body: vec![
                    Stmt::Decl { var: acc, dtype: DType::F32, init: Expr::Lit(0.0, DType::F32) },
                    Stmt::For { var: kk, extent: k as i64, kind: LoopKind::Vector(8), body: vec![Stmt::Assign { var: acc, value: Expr::Bin(BinaryOp::Add, DType::F32, Box::new(Expr::var(acc)), Box::new(prod)) }] },
                    Stmt::Store { buf: 0, index: Expr::add(Expr::mul(Expr::var(i), Expr::int(n as i64)), Expr::var(j)), value: Expr::Un(rlx_ir::UnaryOp::Relu, DType::F32, Box::new(Expr::var(acc))) },
                ],
            }],
        }];
        let x = Expr::load(1, Expr::add(Expr::mul(Expr::var(i2), Expr::int(k as i64)), Expr::var(k2)));
        let red = vec![Stmt::For {
            var: i2,
            extent: m as i64,
            kind: LoopKind::Parallel,
            body: vec![
                Stmt::Decl { var: acc2, dtype: DType::F32, init: Expr::Lit(f64::NEG_INFINITY, DType::F32) },
                Stmt::For { var: k2, extent: k as i64, kind: LoopKind::Vector(8), body: vec![Stmt::Assign { var: acc2, value: Expr::Bin(BinaryOp::Max, DType::F32, Box::new(Expr::var(acc2)), Box::new(x)) }] },
                Stmt::Store { buf: 0, index: Expr::var(i2), value: Expr::var(acc2) },
            ],
        }];
        let p = |dtype, elems, access| Param { dtype, elems, access };
        let f = |shape: &[usize]| TensorType::fixed(DType::F32, shape);
        Lir {
            inputs: vec![Port { name: "a".into(), ty: f(&[m, k]) }],
            outputs: vec![Port { name: "y".into(), ty: f(&[m, n]) }, Port { name: "r".into(), ty: f(&[m]) }],
            buffers: vec![
                Buffer { base: Base::Output(0), offset: 0, dtype: DType::F32, shape: vec![m, n], label: "y".into() },
                Buffer { base: Base::Input(0), offset: 0, dtype: DType::F32, shape: vec![m, k], label: "a".into() },
                Buffer { base: Base::Weights, offset: 0, dtype: DType::F32, shape: vec![n, k], label: "w".into() },
                Buffer { base: Base::Output(1), offset: 0, dtype: DType::F32, shape: vec![m], label: "r".into() },
            ],
            launches: vec![
                Launch { nodes: vec![], kernel: Kernel { name: "mm".into(), params: vec![p(DType::F32, m * n, Access::Write), p(DType::F32, m * k, Access::Read), p(DType::F32, n * k, Access::Read)], body: mm, vars: 4 }, bindings: vec![0, 1, 2] },
                Launch { nodes: vec![], kernel: Kernel { name: "max".into(), params: vec![p(DType::F32, m, Access::Write), p(DType::F32, m * k, Access::Read)], body: red, vars: 7 }, bindings: vec![3, 1] },
            ],
            regions: Vec::new(),
            arena_bytes: 0,
            state: vec![],
            state_bytes: 0,
            weights: vec![0; n * k * 4],
            align: 64,
        }
    }

    #[test]
    fn matmuls_and_reductions_use_workgroup_memory() {
        // 300×200 outputs: 4×4 per invocation (64×64 tiles, 5×4 = 20 workgroups < 128 → 2×2 → 80 < 128 → 1×1).
        let p = translate(&matmul_and_reduce(300, 200, 70), Lang::Spirv).unwrap();
        assert_eq!((p.dispatches[0].workgroup_size, p.dispatches[0].groups), ([16, 16, 1], [13, 19, 1]));
        assert_eq!((p.dispatches[1].workgroup_size, p.dispatches[1].groups), ([64, 1, 1], [300, 1, 1]));
        assert!(p.wgsl.contains("workgroupBarrier()") && p.wgsl.contains("var<workgroup> wa_f32: array<f32, 272>"), "{}", p.wgsl);
        // The weight is stored [N, K]: invocations stage it along K (coalesced).
        assert!(p.wgsl.contains("let cc = e / 16i;"));
        // Enough workgroups for 4×4 per invocation: 1024×1024 → 16×16 = 256 groups of 64×64.
        let p = translate(&matmul_and_reduce(1024, 1024, 32), Lang::Wgsl).unwrap();
        assert_eq!(p.dispatches[0].groups, [16, 16, 1]);
        assert!(p.wgsl.contains("c3_3"));
        // Without tiles every kernel keeps one invocation per output.
        let p = translate_with(&matmul_and_reduce(300, 200, 70), Lang::Spirv, false).unwrap();
        assert!(!p.wgsl.contains("workgroupBarrier") && p.dispatches.iter().all(|d| d.workgroup_size == [WORKGROUP_SIZE, 1, 1]));
        // Short reductions keep the serial loop.
        let p = translate(&matmul_and_reduce(8, 8, 10), Lang::Spirv).unwrap();
        assert_eq!(p.dispatches[1].workgroup_size, [WORKGROUP_SIZE, 1, 1]);
        assert_eq!(p.dispatches[1].groups, [1, 1, 1]);
        for lang in [Lang::Spirv, Lang::Wgsl, Lang::Msl, Lang::Hlsl, Lang::Glsl] {
            emit(&translate(&matmul_and_reduce(300, 200, 70), lang).unwrap(), lang).unwrap();
        }
    }

    /// LayerNorm over rows of `n` as the planner's row fusion writes it: per row, the mean, then the
    /// variance of the centred values (reading the mean), then the normalized outputs.
    fn layer_norm(rows: usize, n: usize) -> Lir {
        let (r, k1, s, mean, k2, q, var, j) = (Var(0), Var(1), Var(2), Var(3), Var(4), Var(5), Var(6), Var(7));
        let f = |op, a: Expr, b: Expr| Expr::Bin(op, DType::F32, Box::new(a), Box::new(b));
        let x = |k: Var| Expr::load(1, Expr::add(Expr::mul(Expr::var(r), Expr::int(n as i64)), Expr::var(k)));
        let lit = |v: f64| Expr::Lit(v, DType::F32);
        let centred = |k: Var| f(BinaryOp::Sub, x(k), Expr::var(mean));
        let body = vec![
            Stmt::Decl { var: s, dtype: DType::F32, init: lit(0.0) },
            Stmt::For { var: k1, extent: n as i64, kind: LoopKind::Vector(8), body: vec![Stmt::Assign { var: s, value: f(BinaryOp::Add, Expr::var(s), x(k1)) }] },
            Stmt::Decl { var: mean, dtype: DType::F32, init: f(BinaryOp::Div, Expr::var(s), lit(n as f64)) },
            Stmt::Decl { var: q, dtype: DType::F32, init: lit(0.0) },
            Stmt::For { var: k2, extent: n as i64, kind: LoopKind::Vector(8), body: vec![Stmt::Assign { var: q, value: f(BinaryOp::Add, Expr::var(q), f(BinaryOp::Mul, centred(k2), centred(k2))) }] },
            Stmt::Decl { var, dtype: DType::F32, init: f(BinaryOp::Div, Expr::var(q), lit(n as f64)) },
            Stmt::For {
                var: j,
                extent: n as i64,
                kind: LoopKind::Serial,
                body: vec![Stmt::Store {
                    buf: 0,
                    index: Expr::add(Expr::mul(Expr::var(r), Expr::int(n as i64)), Expr::var(j)),
                    value: f(BinaryOp::Div, centred(j), Expr::Un(rlx_ir::UnaryOp::Sqrt, DType::F32, Box::new(f(BinaryOp::Add, Expr::var(var), lit(1e-5))))),
                }],
            },
        ];
        let p = |access| Param { dtype: DType::F32, elems: rows * n, access };
        let kernel = Kernel { name: "ln".into(), params: vec![p(Access::Write), p(Access::Read)], body: vec![Stmt::For { var: r, extent: rows as i64, kind: LoopKind::Parallel, body }], vars: 8 };
        Lir {
            inputs: vec![Port { name: "x".into(), ty: TensorType::fixed(DType::F32, &[rows, n]) }],
            outputs: vec![Port { name: "y".into(), ty: TensorType::fixed(DType::F32, &[rows, n]) }],
            buffers: vec![
                Buffer { base: Base::Output(0), offset: 0, dtype: DType::F32, shape: vec![rows, n], label: "y".into() },
                Buffer { base: Base::Input(0), offset: 0, dtype: DType::F32, shape: vec![rows, n], label: "x".into() },
            ],
            launches: vec![Launch { nodes: vec![], kernel, bindings: vec![0, 1] }],
            regions: Vec::new(),
            arena_bytes: 0,
            state: vec![],
            state_bytes: 0,
            weights: vec![],
            align: 64,
        }
    }

    #[test]
    fn row_kernels_use_one_workgroup_per_row() {
        // Rows of 384: 128 invocations per row (3 elements each), one workgroup per row; both
        // reductions go through the shared-memory tree; the outputs are strided over the invocations.
        let p = translate(&layer_norm(300, 384), Lang::Wgsl).unwrap();
        assert_eq!((p.dispatches[0].workgroup_size, p.dispatches[0].groups), ([128, 1, 1], [300, 1, 1]));
        assert_eq!(p.wgsl.matches("f = f + 128i").count(), 2, "{}", p.wgsl);
        assert!(p.wgsl.contains("v7 = v7 + 128i") && p.wgsl.contains("var<workgroup> wr_f32: array<f32, 128>"), "{}", p.wgsl);
        // Per reduction a barrier after the partials and one per tree level down to 2 values (every
        // invocation folds the last two itself): 1 + 6; one more between the two reductions.
        assert_eq!(p.wgsl.matches("workgroupBarrier()").count(), 2 * 7 + 1, "{}", p.wgsl);
        // Longer rows take 256 invocations; more rows than 65,535 spill into y.
        let p = translate(&layer_norm(70000, 2000), Lang::Spirv).unwrap();
        assert_eq!((p.dispatches[0].workgroup_size, p.dispatches[0].groups), ([256, 1, 1], [65535, 2, 1]));
        // Short rows keep one invocation per row, the row loops serial.
        let p = translate(&layer_norm(300, 10), Lang::Spirv).unwrap();
        assert_eq!((p.dispatches[0].workgroup_size, p.dispatches[0].groups), ([WORKGROUP_SIZE, 1, 1], [2, 1, 1]));
        assert!(!p.wgsl.contains("workgroupBarrier"));
        // Without tiles as well.
        let p = translate_with(&layer_norm(300, 384), Lang::Spirv, false).unwrap();
        assert_eq!(p.dispatches[0].workgroup_size, [WORKGROUP_SIZE, 1, 1]);
        for lang in [Lang::Spirv, Lang::Wgsl, Lang::Msl, Lang::Hlsl, Lang::Glsl] {
            emit(&translate(&layer_norm(300, 384), lang).unwrap(), lang).unwrap();
        }
    }

    #[test]
    fn a_row_kernel_whose_loops_are_not_independent_is_not_a_workgroup_kernel() {
        // The output loop also reads the output buffer: its iterations may not be split across
        // invocations, and invocation 0 must not run it alone after a workgroup reduction either.
        let mut l = layer_norm(300, 384);
        l.launches[0].kernel.params[0].access = Access::ReadWrite;
        if let Stmt::For { body, .. } = &mut l.launches[0].kernel.body[0] {
            if let Some(Stmt::For { body: lb, .. }) = body.last_mut() {
                if let Stmt::Store { value, .. } = &mut lb[0] {
                    *value = Expr::Bin(BinaryOp::Add, DType::F32, Box::new(value.clone()), Box::new(Expr::load(0, Expr::int(0))));
                }
            }
        }
        let p = translate(&l, Lang::Spirv).unwrap();
        assert_eq!(p.dispatches[0].workgroup_size, [WORKGROUP_SIZE, 1, 1]);
    }

    #[test]
    fn spirv_computes_i64_in_64_bits() {
        let p = translate(&lir(100), Lang::Spirv).unwrap();
        assert!(p.int64 && p.wgsl.contains("li"));
        let spv = &emit(&p, Lang::Spirv).unwrap()[0].1;
        let words: Vec<u32> = spv.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        // OpCapability (17) Int64 (11).
        assert!(words.windows(2).any(|w| w[0] == (2 << 16 | 17) && w[1] == 11));
    }
}
