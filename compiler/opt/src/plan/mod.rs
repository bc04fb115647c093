//! Fusion, memory planning and kernel lowering: MIR → LIR.
//!
//! 1. **Fusion** ([`fuse`]): every node is a view (reshape, leading-axis slice: no kernel, aliases its
//!    input), *inlined* into its single consumer (elementwise and data-movement ops become part of the
//!    consumer's per-element expression, so chains of elementwise ops are one loop), an *anchor fused as
//!    the producer of an epilogue* (matmul / reduce / conv whose single consumer is elementwise of the
//!    same shape: the epilogue is applied to the accumulator before the store), or a *kernel root*.
//! 2. **Memory planning**: graph inputs and outputs are the caller's buffers; constants go to one
//!    aligned weights blob (a 2-D matmul weight is stored transposed so both operands stream
//!    contiguously); every other materialized value gets an arena offset from liveness — first fit in
//!    order of decreasing size among buffers whose live ranges overlap — so memory is reused; views
//!    alias their root at an offset. The peak is `arena_bytes`.
//! 3. **Kernel lowering**: each kernel root becomes one loop-form [`Kernel`].
//!
//! Where things live: [`fuse`] and [`row_fuse`] decide the roles (`fuse.rs`, `row_fuse.rs`);
//! `memory.rs` places inputs, constants and values and assigns arena offsets (`concat.rs`: concats
//! whose inputs' kernels store into their slices, with no launch of their own); `kernel.rs` lowers a
//! root to its loop nest, with the per-element expressions of inlined nodes in `inline.rs`, anchor
//! bodies (dot product, reductions, cumsum) in `anchor.rs`, the kernels that read GGUF block
//! constants (`dequant_matmul`, `dequant_gather`) in `blocks.rs` (a GPU one over many rows through an f32
//! scratch and a tiled matmul in `block_gemm_gpu.rs`), their weights' packed row panels and
//! per-type dequantization in `block_layout.rs`, direct convolution in `conv.rs`, dense convolution
//! on the GEMM micro-kernel (packed weight rows) in `conv_gemm.rs`, its im2col copy in `im2col.rs`
//! (or a strided one's phase split in `phase.rs`),
//! transposed convolution
//! (GEMM then col2im gather, or direct) in `conv_transpose.rs`, grouped / depthwise convolution in
//! `depthwise.rs`, pooling in `pool.rs`, the vectorized window kernels of both (interior and border
//! columns) in `window.rs`, the GEMM micro-kernel and weight packing in `gemm.rs`, and index
//! arithmetic in `index.rs`.

mod anchor;
mod attention;
mod block_layout;
mod block_gemm_gpu;
mod concat;
mod blocks;
mod causal;
mod comm;
mod conv;
mod conv_gemm;
mod dw_lanes;
mod conv_nhwc;
mod conv_nhwc_gemm;
mod homes;
mod dw_padded;
mod flat;
mod conv_lanes;
mod conv_rows;
mod conv_transpose;
mod depthwise;
mod fuse;
mod gemm;
mod hoist;
mod im2col;
mod index;
mod inline;
mod int8_dot;
mod kernel;
mod memory;
mod phase;
mod pool;
mod reduce_rows;
mod region;
mod row_fuse;
mod scatter;
mod select;
mod split_k;
mod state;
mod topk;
mod transpose;
mod window;
mod winograd;
mod winograd_nhwc;

pub use fuse::{fuse, fuse_with, is_scalar_scale, Fusion, Role};
pub(crate) use fuse::is_view;
pub use row_fuse::row_fuse;

use index::align_up;
use rlx_ir::lir::{Base, Buffer, Launch, Lir, Port, StateSlot};
use rlx_ir::loops::Access;
use rlx_ir::verify::Problem;
use rlx_ir::{ConstData, DType, Mir, NodeId, OpSet, ValueId};
use std::collections::{HashMap, HashSet};

/// The MIR op kinds the kernel lowering implements (a target's claim set is a subset of these).
pub fn lowerable_kinds() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = rlx_ir::UnaryOp::ALL.iter().map(|u| u.name()).collect();
    v.extend(rlx_ir::BinaryOp::ALL.iter().map(|b| b.name()));
    v.extend([
        "where", "cast", "bitcast", "matmul", "reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_mean", "argmax", "argmin",
        "reshape", "transpose", "expand", "slice", "concat", "gather", "gather_elements", "gather_nd", "pad", "conv", "conv_transpose", "max_pool", "avg_pool", "cumsum",
        "quantize", "dequantize", "fake_quantize", "dequant_matmul", "dequant_gather", "write_rows", "nonzero", "compress", "nms", "unique",
        "scatter_elements", "scatter_nd", "topk",
    ]);
    v
}

/// Planning options.
#[derive(Clone, Debug)]
pub struct PlanOptions {
    /// Alignment of arena and weights offsets in bytes.
    pub align: usize,
    /// Columns per GEMM panel = lanes of the micro-kernel's vector accumulators: the target's f32
    /// vector width × 2 (AVX2 and NEON: 16; AVX-512: 32).
    pub gemm_nr: usize,
    /// Rows per GEMM micro-kernel tile: `gemm_mr` × 2 vector accumulators must fit the register file
    /// with room for the B vectors (AVX2: 6 rows, 12 of 16 ymm; AVX-512: 8 rows, 16 of 32 zmm).
    pub gemm_mr: usize,
    /// Rows × lanes of the f32 micro-kernel's wide tile: taken by a convolution on the GEMM
    /// (`conv_gemm.rs`) with at least `lanes` output positions, and by a matmul over a packed constant
    /// weight (`gemm.rs`) with at least `lanes` columns and no more tail columns than `gemm_nr` leaves;
    /// the others keep `gemm_mr` × `gemm_nr`. (0, 0): none. The CPU family sets 6 × 64 with AVX-512
    /// (24 zmm accumulators and 4 B vectors of the 32 registers).
    pub wide_tile: (usize, usize),
    /// Softmax / LayerNorm as one row kernel each ([`row_fuse`]); CPU targets turn it on.
    pub row_fusion: bool,
    /// Row kernels recompute a transcendental that several passes read instead of storing it
    /// ([`row_fuse`]'s `recompute`; the shader targets turn it on: softmax becomes one kernel).
    pub row_recompute: bool,
    /// Transposes, reshapes and scalar scalings on a single-use path into a matmul operand are
    /// inlined into the matmul's loads instead of materialized ([`fuse_with`]; the shader targets
    /// turn it on: attention's K^T and its scalings are no dispatches of their own).
    pub inline_operands: bool,
    /// A gather from a constant that an elementwise op reads broadcast is inlined into that op's
    /// kernel, redone per element, instead of a launch of its own ([`fuse_with`]; the CUDA target turns
    /// it on where a launch costs more than the loads).
    pub inline_gathers: bool,
    /// Dense f32 convolutions on the GEMM micro-kernel (`conv_gemm.rs`: packed weight rows × im2col or
    /// x itself); CPU targets turn it on. Off, every convolution is the direct per-output loop.
    pub conv_gemm: bool,
    /// With `conv_gemm`, dense 3×3 stride-1 convolutions over large images in the Winograd F(m×m, 3×3)
    /// form, m = this (2 or 4; 0: none) (`winograd.rs`: per block of tile rows, input transform, the
    /// (m + 2)² GEMMs on the micro-kernel, output transform with the epilogue, in one kernel); CPU targets
    /// set it from `--winograd off|f2|f4` (default 4).
    pub winograd: usize,
    /// Two 512-bit FMA units per core (Intel's server cores: the CPU family sets it by the CPU's name),
    /// where the direct form's FMAs cost half what they do on one (AMD's Zen 4 issues one 512-bit FMA a
    /// cycle): the Winograd form then needs more input channels to repay its transforms (`winograd.rs`).
    pub two_fma: bool,
    /// A concat whose slices are contiguous and whose inputs each have a kernel of their own is no
    /// launch: each input's kernel stores into its slice of the concat's buffer (`concat.rs`); CPU
    /// targets turn it on.
    pub concat_in_place: bool,
    /// Vector lanes of the window kernels (`window.rs`: 2-D pools and grouped / depthwise
    /// convolutions with their interior columns in `vector(lanes)` loops and channels as the parallel
    /// loop); 0 keeps the per-element form (the shader, CUDA and MCU targets, whose grid or scalar
    /// code wants one output per iteration). The CPU targets set the f32 vector width (8 or 16).
    pub window_lanes: usize,
    /// `dequant_matmul` as one flat dot product per output over the weight rows in their own block
    /// layout (no interleaved panels): `for i parallel { for j { acc += Σ_sub x · w } }`, which the GPU
    /// writers run one warp per output with each lane's loads contiguous (`loops/tiled.rs`'s row
    /// reduction). The CUDA target turns it on; the CPU targets keep the panel form (`blocks.rs`).
    pub flat_block_dots: bool,
    /// `dequant_matmul` of a Q8_0, Q5_0, Q4_K or Q6_K weight (decode and prefill) as integer dot
    /// products on int8-quantized activations (`int8_dot.rs`: x quantized per 32 values as llama.cpp's
    /// q8_0, [`rlx_ir::loops::Expr::Dot4`] per 4 values, which the LLVM writer emits as the CPU's
    /// instruction: `vpdpbusd`, `vpmaddubsw` + `vpmaddwd`, `sdot`). Changes results slightly (that
    /// module's doc states the bound); the CPU family sets it where the CPU has one of those and the
    /// back end is LLVM, unless `--exact-activations`.
    pub int8_dot: bool,
    /// With `int8_dot`, prefill's many-row matmuls take the int8 form too (else they keep the f32
    /// panels): the CPU family sets it where that pays (measured: AVX-512 VNNI yes, AVX2 no).
    pub int8_gemm: bool,
    /// Attention — `matmul(Q, Kᵀ)`, a scalar scaling and a mask broadcast over the query rows, the
    /// softmax over the keys, `matmul(P, V)` — as one kernel whose scores never reach memory
    /// (`attention.rs`), which the GPU writers run one warp per query row with the head's keys and
    /// values in shared memory. The CUDA target turns it on (unless `RLX_CUDA_FUSED_ATTENTION=0`).
    pub fused_attention: bool,
    /// With `fused_attention`: the fewest query rows (every head's together) an attention needs to be
    /// fused; 0 any. The CUDA target asks none unless `RLX_CUDA_ATTN_MIN_ROWS=N` at compile time (its
    /// twins: before session 32 it asked 8,192 under its reduced precisions, whose three launches on
    /// the tensor cores then measured as fast as either fused kernel at MiniLM batch 1).
    pub fused_attention_min_rows: usize,
    /// Matmuls with few outputs over a long K computed as this many partial sums in a launch of their
    /// own, added in order by the matmul's kernel (`split_k.rs`); 0: none. The CUDA target sets it.
    pub split_k: usize,
    /// With `split_k`: a matmul whose value, after its epilogue (bias, residual), only a row kernel
    /// reads (the LayerNorm after a transformer's FFN down or attention output projection) splits
    /// when its K is at least this long, and that row kernel adds the partials itself in each pass
    /// over the row, in place of the matmul's own sum kernel — one launch and one dependent level
    /// fewer (`split_k.rs`'s [`split_k::row_fuse_split`]); 0: never. The CUDA target sets it.
    pub split_k_rows: usize,
    /// With `split_k`: matmuls with more outputs than `split_k` takes (a GPU's worth of tiles, which
    /// leave SMs idle or run few warps per SM over a long K — MiniLM batch 8's FFN down, 96 blocks of
    /// 64×64 over K = 1536) split into `.0` parts where they have at most `.1` outputs; (0, _):
    /// never (`split_k.rs`). The CUDA target sets it (2 parts up to 524,288 outputs).
    pub split_k_wide: (usize, usize),
    /// The layout pass (`rlx_opt::channels_last`) before planning: pointwise convolutions as matmuls of
    /// channels-last activations, depthwise ones and stems as `conv_nhwc` (`conv_nhwc.rs`), where the layout changes
    /// it leaves are few. The CPU family sets it (vector targets).
    pub channels_last: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions { align: 64, gemm_nr: GEMM_NR, gemm_mr: GEMM_MR, wide_tile: (0, 0), row_fusion: false, row_recompute: false, inline_operands: false, inline_gathers: false, conv_gemm: false, winograd: 0, two_fma: false, concat_in_place: false, window_lanes: 0, flat_block_dots: false, int8_dot: false, int8_gemm: false, fused_attention: false, fused_attention_min_rows: 0, split_k: 0, split_k_rows: 0, channels_last: false, split_k_wide: (0, 0) }
    }
}

struct Planner<'g> {
    g: &'g Mir,
    fusion: Fusion,
    /// Value → buffer index, for materialized values.
    buf_of: Vec<Option<u32>>,
    buffers: Vec<Buffer>,
    /// Buffer → root buffer (itself unless a view) and byte offset within the root.
    root_of: Vec<(u32, usize)>,
    weights: Vec<u8>,
    transposed_weight: HashMap<ValueId, u32>,
    /// Float matmul weights packed in panels of `GEMM_NR` columns: [N/NR (rounded up), K, NR].
    packed_weight: HashMap<ValueId, u32>,
    /// The convolutions' packed weights by (weight, label, packed shape, groups): convolutions that
    /// share a weight (a Siamese pair, an unrolled recurrent cell) share its packed copy ([`Planner::add_packed`]).
    packed_copies: HashMap<(ValueId, String, Vec<usize>, usize), u32>,
    /// Constants read by `dequant_matmul` / `dequant_gather`, packed in interleaved row panels.
    block_weight: HashMap<ValueId, blocks::BlockWeight>,
    /// GPU `dequant_matmul` anchors over many rows → the f32 scratch their dequantization launch fills (`block_gemm_gpu.rs`).
    gpu_dequant: HashMap<NodeId, u32>,
    /// Matmul outputs computed as split-K partial sums (`split_k.rs`): scratch buffer, parts.
    split_k_parts: HashMap<ValueId, (u32, usize)>,
    /// Row kernel roots → the split-K matmuls whose partials' sum they compute ([`PlanOptions::split_k_rows`]).
    split_rows: HashMap<NodeId, Vec<NodeId>>,
    /// Convolutions on the GEMM micro-kernel (`conv_gemm.rs`), by anchor node.
    conv_gemm: HashMap<NodeId, conv_gemm::ConvGemm>,
    /// Transposed convolutions whose product goes through the same GEMM loops (`conv_transpose.rs`).
    conv_transpose_gemm: HashMap<NodeId, conv_gemm::ConvGemm>,
    conv_gemm_on: bool,
    /// Depthwise convolutions with the channels as the lanes (`dw_lanes.rs`) → their packed weight.
    dw_lanes: HashMap<NodeId, u32>,
    align: usize,
    nr: usize,
    mr: usize,
    /// [`PlanOptions::wide_tile`] (rows, lanes), (0, 0) when unset.
    wide_tile: (usize, usize),
    /// [`PlanOptions::flat_block_dots`].
    flat_blocks: bool,
    /// Graph inputs / outputs before the state pairs (the caller's own buffers).
    plain_inputs: usize,
    plain_outputs: usize,
    /// State tensors' offsets in the state region, in `g.state` order, and its size.
    state_offsets: Vec<usize>,
    state_bytes: usize,
    /// [`PlanOptions::window_lanes`].
    lanes: usize,
    /// [`PlanOptions::int8_dot`].
    int8_dot: bool,
    /// [`PlanOptions::int8_gemm`].
    int8_gemm: bool,
    /// `dequant_matmul` anchors in the int8 form → their quantized activations, written by the
    /// launch before them (`int8_dot.rs`).
    int8_act: HashMap<NodeId, int8_dot::Int8Act>,
    /// State outputs written in place into their slot (`state.rs`): value → state index.
    inplace_state: HashMap<ValueId, usize>,
    /// The options, for planning region bodies (`region.rs`).
    opts: PlanOptions,
    /// Control-flow regions, in launch order (`region.rs`).
    regions: Vec<rlx_ir::lir::Region>,
    /// Fused attentions (`attention.rs`), by their `matmul(P, V)` node.
    attention: HashMap<NodeId, attention::Attention>,
    /// Values stored by their kernels into a pad's or concat's buffer (`homes.rs`).
    strided: homes::Strided,
}

/// Columns per packed weight panel = lanes of the GEMM micro-kernel's vector accumulators.
pub const GEMM_NR: usize = 16;
/// Rows per GEMM micro-kernel tile by default (6 rows × 16 lanes = 12 AVX2 accumulators).
pub const GEMM_MR: usize = 6;

impl<'g> Planner<'g> {
    fn shape(&self, v: ValueId) -> Vec<usize> {
        self.g.ty(v).shape.as_fixed().expect("plan checks static shapes")
    }
    fn dt(&self, v: ValueId) -> DType {
        self.g.ty(v).dtype
    }

    /// The parameters of kernel `k` (bound to `bindings`) that it only reads and that share no storage
    /// (the same root buffer: views, in-place updates) with one it writes.
    fn unaliased_reads(&self, k: &rlx_ir::loops::Kernel, bindings: &[u32]) -> HashSet<u32> {
        let root = |p: usize| self.root_of[bindings[p] as usize].0;
        let written: HashSet<u32> = (0..k.params.len()).filter(|&p| k.params[p].access != Access::Read).map(root).collect();
        (0..k.params.len()).filter(|&p| k.params[p].access == Access::Read && !written.contains(&root(p))).map(|p| p as u32).collect()
    }

    fn add_buffer(&mut self, b: Buffer, root: Option<(u32, usize)>) -> u32 {
        let id = self.buffers.len() as u32;
        self.buffers.push(b);
        self.root_of.push(root.unwrap_or((id, 0)));
        id
    }

    /// `add_weight` for weight `w`'s packed copy `pc` (`groups`: the packing's), once per weight and
    /// packing: a second convolution reading `w` packed alike gets the same buffer.
    fn add_packed(&mut self, w: ValueId, label: String, pc: &ConstData, groups: usize) -> u32 {
        let key = (w, label, pc.shape.clone(), groups);
        if let Some(&b) = self.packed_copies.get(&key) {
            return b;
        }
        let b = self.add_weight(key.1.clone(), pc);
        self.packed_copies.insert(key, b);
        b
    }

    fn add_weight(&mut self, label: String, c: &ConstData) -> u32 {
        let off = align_up(self.weights.len(), self.align);
        self.weights.resize(off, 0);
        self.weights.extend_from_slice(c.data.bytes());
        self.add_buffer(Buffer { base: Base::Weights, offset: off, dtype: c.dtype, shape: c.shape.clone(), label }, None)
    }
}

/// Plans a MIR graph (static shapes, legal for the target) into LIR. Problems name the nodes.
pub fn plan(g: &Mir, opts: &PlanOptions) -> Result<Lir, Vec<Problem>> {
    let mut probs = Vec::new();
    for n in &g.nodes {
        for &o in n.outputs.iter().chain(&n.inputs) {
            if !g.ty(o).shape.is_static() {
                probs.push(Problem { node: Some(n.name.clone()), msg: format!("shape {} is not static; fix {} with --dim NAME=N", g.ty(o).shape, g.ty(o).shape.symbols().join(", ")) });
                break;
            }
        }
        if !lowerable_kinds().contains(&n.op.kind()) && !n.op.is_comm() && n.op.regions().is_empty() {
            probs.push(Problem { node: Some(n.name.clone()), msg: format!("no kernel lowering for {}", n.op.kind()) });
        }
        if let Some(w) = n.op.block_weight_input().and_then(|i| n.inputs.get(i)) {
            let d = g.ty(*w).dtype;
            if !blocks::lowers(d) {
                probs.push(Problem { node: Some(n.name.clone()), msg: format!("no kernel lowering for {} of a {d} weight", n.op.kind()) });
            } else if !matches!(g.value(*w).def, rlx_ir::Def::Const(_)) {
                probs.push(Problem { node: Some(n.name.clone()), msg: format!("{}: the block weight must be a constant", n.op.kind()) });
            }
        }
    }
    for &i in &g.inputs {
        if !g.ty(i).shape.is_static() {
            probs.push(Problem { node: None, msg: format!("input '{}' has shape {}; fix {} with --dim NAME=N", g.value(i).name.clone().unwrap_or_default(), g.ty(i).shape, g.ty(i).shape.symbols().join(", ")) });
        }
    }
    let ns = g.state.len();
    for (k, st) in g.state.iter().enumerate() {
        if st.input as usize + ns != g.inputs.len() + k || st.output as usize + ns != g.outputs.len() + k {
            probs.push(Problem { node: None, msg: format!("state {k} is not among the trailing inputs and outputs") });
        }
    }
    let state_inputs: Vec<ValueId> = g.inputs[g.inputs.len().saturating_sub(ns)..].to_vec();
    for n in &g.nodes {
        if n.op == rlx_ir::MirOp::WriteRows && !state_inputs.contains(&n.inputs[0]) {
            probs.push(Problem { node: Some(n.name.clone()), msg: "write_rows compiles only as the in-place update of a state input".to_string() });
        }
        if let Some(msg) = n.op.is_comm().then(|| comm::check(g, n)).flatten() {
            probs.push(Problem { node: Some(n.name.clone()), msg });
        }
    }
    if !probs.is_empty() {
        return Err(probs);
    }
    let relaid = if opts.channels_last && opts.window_lanes > 1 { crate::channels_last::channels_last(g) } else { None };
    let g = relaid.as_ref().unwrap_or(g);
    let mut fusion = fuse_with(g, opts.inline_operands, opts.inline_gathers);
    if opts.row_fusion && opts.split_k >= 2 && opts.split_k_rows > 0 {
        split_k::row_fuse_split(g, &mut fusion, opts.row_recompute, split_k::Split::of(opts, opts.split_k_rows));
    } else if opts.row_fusion {
        row_fuse(g, &mut fusion, opts.row_recompute);
    }
    if opts.window_lanes >= 8 && !opts.inline_operands {
        gemm::materialize_short_k_rhs(g, &mut fusion);
    }
    let attention = if opts.fused_attention { attention::fuse(g, &mut fusion, opts.fused_attention_min_rows) } else { HashMap::new() };
    let split_rows = split_k::split_rows(g, &fusion);
    let mut p = Planner {
        g,
        fusion,
        buf_of: vec![None; g.values.len()],
        buffers: Vec::new(),
        root_of: Vec::new(),
        weights: Vec::new(),
        transposed_weight: HashMap::new(),
        packed_weight: HashMap::new(),
        packed_copies: HashMap::new(),
        block_weight: HashMap::new(),
        gpu_dequant: HashMap::new(),
        split_k_parts: HashMap::new(),
        split_rows,
        conv_gemm: HashMap::new(),
        conv_transpose_gemm: HashMap::new(),
        conv_gemm_on: opts.conv_gemm,
        dw_lanes: HashMap::new(),
        align: opts.align,
        nr: opts.gemm_nr.max(1),
        mr: opts.gemm_mr.max(1),
        wide_tile: opts.wide_tile,
        flat_blocks: opts.flat_block_dots,
        plain_inputs: g.inputs.len() - ns,
        plain_outputs: g.outputs.len() - ns,
        state_offsets: Vec::new(),
        state_bytes: 0,
        lanes: opts.window_lanes,
        int8_dot: opts.int8_dot,
        int8_gemm: opts.int8_gemm,
        int8_act: HashMap::new(),
        inplace_state: HashMap::new(),
        opts: opts.clone(),
        regions: Vec::new(),
        attention,
        strided: homes::Strided::default(),
    };
    p.place_inputs_and_constants();
    p.inplace_state = p.plan_inplace_state();
    let out_slot = p.output_slots();
    let roots = p.place_values(&out_slot);
    // Kernels, in node order.
    let mut launches = Vec::new();
    for &n in &roots {
        if !g.node(n).op.regions().is_empty() {
            let (launch, region) = p.region_launch(n, launches.len())?;
            launches.push(launch);
            p.regions.push(region);
            continue;
        }
        launches.extend(p.im2col_launch(n));
        launches.extend(p.phase_launch(n));
        launches.extend(p.int8_launch(n));
        launches.extend(p.gpu_dequant_launch(n));
        launches.extend(p.split_k_launch(n));
        launches.extend(p.conv_transpose_launch(n));
        let (mut kernel, bindings, nodes) = p.kernel(n);
        if p.lanes > 0 {
            let frozen = p.unaliased_reads(&kernel, &bindings);
            hoist::invariant_loads(&mut kernel, &frozen);
        }
        launches.push(Launch { nodes, kernel, bindings });
    }
    // Copies for outputs that are not a root's own result (views, inputs, constants, duplicates).
    for (i, &o) in g.outputs.iter().enumerate().take(p.plain_outputs) {
        if out_slot.get(&o) != Some(&(i as u32)) {
            let copy = p.copy_output(i, o);
            launches.push(copy);
        }
    }
    // State outputs not updated in place, copied into their slots after every read of the old values.
    let inplace = std::mem::take(&mut p.inplace_state);
    launches.extend(p.state_copies(&inplace));
    let peak = p.assign_arena(&launches);
    let port = |v: ValueId, i: usize, what: &str| Port { name: g.value(v).name.clone().unwrap_or_else(|| format!("{what}{i}")), ty: g.ty(v).clone() };
    let state = g.inputs[p.plain_inputs..].iter().zip(&p.state_offsets).enumerate().map(|(k, (&v, &offset))| StateSlot { port: port(v, k, "state"), offset }).collect();
    Ok(Lir {
        inputs: g.inputs.iter().enumerate().take(p.plain_inputs).map(|(i, &v)| port(v, i, "input")).collect(),
        outputs: g.outputs.iter().enumerate().take(p.plain_outputs).map(|(i, &v)| port(v, i, "output")).collect(),
        state,
        state_bytes: p.state_bytes,
        buffers: p.buffers,
        launches,
        regions: p.regions,
        arena_bytes: peak,
        weights: p.weights,
        align: opts.align,
    })
}
