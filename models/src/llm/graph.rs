//! The LLaMA-family graph: token embedding, `layers` × (RMSNorm → attention with RoPE and a causal,
//! optionally sliding-window mask → RMSNorm → gated MLP), final RMSNorm, logits. Weights stay in their
//! GGUF blocks (`dequant_gather` for the embedding, `dequant_matmul` for every projection). The
//! tensors are read by their GGUF names through [`Weights`] (a GGUF file, or a Hugging Face checkpoint
//! mapped onto those names by `hf.rs`); errors name them as the checkpoint does.
//!
//! Two forms share every layer (`layer`, one function of hidden states, RoPE tables, masks and where
//! the keys and values come from):
//! - stateless full sequence ([`build`]): inputs `tokens` i64[sequence] and `positions` i64[sequence],
//!   output `logits` f32[sequence, vocab];
//! - a cached step ([`build_step`]): `tokens` and `positions` i64[chunk], then per layer the state
//!   inputs `cache.{i}.k` and `cache.{i}.v` f32[context, kv_heads, head_dim] (keys after RoPE, values);
//!   outputs `logits` f32[1, vocab] — the next-token logits after the chunk's *last* row only (callers
//!   put their n tokens in the last n rows) — and the updated caches (the graph's state pairs). The step writes
//!   its keys and values at `positions` (`write_rows`; a position outside 0..context is a padding row and
//!   writes nothing) and attends over the whole cache with the mask key position ≤ query position (and
//!   within the sliding window on Gemma 3's local layers), so rows not yet written are never weighted.
//!
//! F32 matrices are plain `linear` / `gather` (nothing to dequantize: the GEMM kernels take them);
//! every other type keeps `dequant_matmul` / `dequant_gather`.

use super::config::{Arch, LlmConfig, RopeStyle};
use super::Weights;
use rlx_ir::{BinaryOp, ConstData, DType, Dim, Hir, HirOp, MirOp, ReduceOp, Shape, State, TensorType, UnaryOp, ValueId};

type R<T> = Result<T, String>;

fn seq() -> Dim {
    Dim::sym("sequence")
}

/// A small wrapper over the graph: named primitive nodes. `rows` is the query-row dim (`sequence`, or
/// the step's fixed chunk).
struct B<'a> {
    g: Hir,
    f: &'a dyn Weights,
    rows: Dim,
}

impl<'a> B<'a> {
    fn op(&mut self, name: &str, op: MirOp, ins: &[ValueId]) -> R<ValueId> {
        self.g.add1(name, HirOp::Prim(op), ins)
    }
    fn bin(&mut self, name: &str, b: BinaryOp, x: ValueId, y: ValueId) -> R<ValueId> {
        self.op(name, MirOp::Binary(b), &[x, y])
    }
    fn scalar(&mut self, v: f32) -> ValueId {
        self.g.add_const(None, ConstData::from_f32(vec![], &[v]))
    }
    fn reshape(&mut self, name: &str, x: ValueId, shape: Vec<Dim>) -> R<ValueId> {
        self.op(name, MirOp::Reshape { shape }, &[x])
    }
    /// The tensor `name` (a GGUF name), or an error naming it as the checkpoint does.
    fn tensor(&self, name: &str) -> R<&'a ConstData> {
        self.f.tensor(name).ok_or_else(|| format!("tensor '{}' is missing", self.f.shown(name)))
    }
    /// A weight tensor as it is stored (block types stay blocks).
    fn raw(&mut self, name: &str) -> R<ValueId> {
        let t = self.tensor(name)?.clone();
        Ok(self.g.add_const(Some(name), t))
    }
    /// A 1-D parameter (norm weight, bias) as f32.
    fn vector(&mut self, name: &str, len: usize) -> R<ValueId> {
        let t = self.tensor(name)?.clone();
        if t.shape != [len] || !t.dtype.is_float() {
            return Err(format!("tensor '{}' is {}{:?}, expected a float [{len}]", self.f.shown(name), t.dtype, t.shape));
        }
        let dtype = t.dtype;
        let v = self.g.add_const(Some(name), t);
        if dtype == DType::F32 {
            return Ok(v);
        }
        self.op(name, MirOp::Cast { to: DType::F32 }, &[v])
    }
    /// x · Wᵀ for the GGUF matrix `name` ([out, in]), plus its bias when `bias` (Qwen 2's q/k/v:
    /// required, as llama.cpp requires them).
    fn linear(&mut self, name: &str, x: ValueId, out: usize, inp: usize, bias: bool) -> R<ValueId> {
        let wname = format!("{name}.weight");
        let t = self.tensor(&wname)?;
        if t.shape != [out, inp] {
            return Err(format!("tensor '{}' has shape {:?}, expected [{out}, {inp}]", self.f.shown(&wname), t.shape));
        }
        let f32 = t.dtype == DType::F32;
        let w = self.raw(&wname)?;
        let y = if f32 {
            self.g.add1(name, HirOp::Linear { transpose_w: true }, &[x, w])?
        } else {
            self.op(name, MirOp::DequantMatMul, &[x, w])?
        };
        let bname = format!("{name}.bias");
        if bias {
            let b = self.vector(&bname, out)?;
            return self.bin(&format!("{name}.add_bias"), BinaryOp::Add, y, b);
        }
        Ok(y)
    }
    /// RMSNorm over the last axis: x / sqrt(mean(x²) + eps) · w.
    fn rms_norm(&mut self, name: &str, x: ValueId, w: &str, len: usize, eps: f64) -> R<ValueId> {
        let rank = self.g.ty(x).shape.rank();
        let sq = self.bin(&format!("{name}.square"), BinaryOp::Mul, x, x)?;
        let ms = self.op(&format!("{name}.mean"), MirOp::Reduce { op: ReduceOp::Mean, axes: vec![rank - 1], keepdims: true }, &[sq])?;
        let e = self.scalar(eps as f32);
        let ms = self.bin(&format!("{name}.add_eps"), BinaryOp::Add, ms, e)?;
        let rms = self.op(&format!("{name}.sqrt"), MirOp::Unary(UnaryOp::Sqrt), &[ms])?;
        let y = self.bin(&format!("{name}.div"), BinaryOp::Div, x, rms)?;
        let w = self.vector(w, len)?;
        self.bin(name, BinaryOp::Mul, y, w)
    }
}

/// cos and sin tables [sequence, 1, d/2] for RoPE with base `base`: angle = position · base^(−2i/d).
fn rope_tables(b: &mut B, name: &str, pos_f: ValueId, d: usize, base: f64) -> R<(ValueId, ValueId)> {
    let inv: Vec<f32> = (0..d / 2).map(|i| base.powf(-2.0 * i as f64 / d as f64) as f32).collect();
    let inv = b.g.add_const(Some(&format!("{name}.inv_freq")), ConstData::from_f32(vec![1, d / 2], &inv));
    let p = b.reshape(&format!("{name}.positions"), pos_f, vec![b.rows.clone(), Dim::Fixed(1)])?;
    let ang = b.bin(&format!("{name}.angles"), BinaryOp::Mul, p, inv)?;
    let ang = b.reshape(&format!("{name}.angles3"), ang, vec![b.rows.clone(), Dim::Fixed(1), Dim::Fixed(d as u64 / 2)])?;
    let cos = b.op(&format!("{name}.cos"), MirOp::Unary(UnaryOp::Cos), &[ang])?;
    let sin = b.op(&format!("{name}.sin"), MirOp::Unary(UnaryOp::Sin), &[ang])?;
    Ok((cos, sin))
}

/// Rotates x [sequence, heads, d] by the tables (RoPE), pairing dims by `style`.
fn rope(b: &mut B, name: &str, x: ValueId, heads: usize, d: usize, cos: ValueId, sin: ValueId, style: RopeStyle) -> R<ValueId> {
    let h = d as i64 / 2;
    let slice = |b: &mut B, n: &str, x: ValueId, axis: usize, s: i64, e: i64| {
        b.op(n, MirOp::Slice { axes: vec![axis], starts: vec![s], ends: vec![e], steps: vec![1] }, &[x])
    };
    let (x1, x2, cos, sin) = match style {
        RopeStyle::Neox => (slice(b, &format!("{name}.x1"), x, 2, 0, h)?, slice(b, &format!("{name}.x2"), x, 2, h, 2 * h)?, cos, sin),
        RopeStyle::Norm => {
            let pairs = b.reshape(&format!("{name}.pairs"), x, vec![b.rows.clone(), Dim::Fixed(heads as u64), Dim::Fixed(h as u64), Dim::Fixed(2)])?;
            let x1 = slice(b, &format!("{name}.x1"), pairs, 3, 0, 1)?;
            let x2 = slice(b, &format!("{name}.x2"), pairs, 3, 1, 2)?;
            let c4 = vec![b.rows.clone(), Dim::Fixed(1), Dim::Fixed(h as u64), Dim::Fixed(1)];
            let cos = b.reshape(&format!("{name}.cos4"), cos, c4.clone())?;
            let sin = b.reshape(&format!("{name}.sin4"), sin, c4)?;
            (x1, x2, cos, sin)
        }
    };
    let a = b.bin(&format!("{name}.x1cos"), BinaryOp::Mul, x1, cos)?;
    let c = b.bin(&format!("{name}.x2sin"), BinaryOp::Mul, x2, sin)?;
    let o1 = b.bin(&format!("{name}.out1"), BinaryOp::Sub, a, c)?;
    let a = b.bin(&format!("{name}.x2cos"), BinaryOp::Mul, x2, cos)?;
    let c = b.bin(&format!("{name}.x1sin"), BinaryOp::Mul, x1, sin)?;
    let o2 = b.bin(&format!("{name}.out2"), BinaryOp::Add, a, c)?;
    match style {
        RopeStyle::Neox => b.op(name, MirOp::Concat { axis: 2 }, &[o1, o2]),
        RopeStyle::Norm => {
            let r = b.op(&format!("{name}.interleave"), MirOp::Concat { axis: 3 }, &[o1, o2])?;
            b.reshape(name, r, vec![b.rows.clone(), Dim::Fixed(heads as u64), Dim::Fixed(d as u64)])
        }
    }
}

/// The boolean attention mask [rows, keys]: key position ≤ query position, and within `window`
/// positions of it when given. `key_pos` is [1, keys].
fn mask(b: &mut B, name: &str, pos: ValueId, key_pos: ValueId, window: Option<usize>) -> R<ValueId> {
    let q = b.reshape(&format!("{name}.query_pos"), pos, vec![b.rows.clone(), Dim::Fixed(1)])?;
    let k = key_pos;
    let causal = b.bin(&format!("{name}.causal"), BinaryOp::Le, k, q)?;
    let Some(w) = window else { return Ok(causal) };
    let dist = b.bin(&format!("{name}.distance"), BinaryOp::Sub, q, k)?;
    let wc = b.g.add_const(None, ConstData::from_i64(vec![], &[w as i64]));
    let near = b.bin(&format!("{name}.in_window"), BinaryOp::Lt, dist, wc)?;
    b.bin(name, BinaryOp::And, causal, near)
}

/// Per-layer inputs shared by the layers: RoPE tables and masks for global and local layers.
struct Shared {
    rope_global: (ValueId, ValueId),
    rope_local: (ValueId, ValueId),
    mask_global: ValueId,
    mask_local: ValueId,
}

/// Where attention's keys and values come from: given layer `i`'s keys (after RoPE) and values
/// [rows, kv_heads, head_dim], the tensors attention reads, [keys, kv_heads, head_dim].
type Kv<'k> = dyn FnMut(&mut B, usize, ValueId, ValueId) -> R<(ValueId, ValueId)> + 'k;

/// One transformer layer on hidden states x [rows, hidden].
fn layer(b: &mut B, c: &LlmConfig, i: usize, x: ValueId, s: &Shared, kv: &mut Kv) -> R<ValueId> {
    let p = format!("blk.{i}.");
    let (h, nh, nkv, d) = (c.hidden, c.heads, c.kv_heads, c.head_dim);
    let gemma = c.arch == Arch::Gemma3;
    let bias = c.arch == Arch::Qwen2;
    let xn = b.rms_norm(&format!("{p}attn_norm"), x, &format!("{p}attn_norm.weight"), h, c.eps)?;
    let q = b.linear(&format!("{p}attn_q"), xn, nh * d, h, bias)?;
    let k = b.linear(&format!("{p}attn_k"), xn, nkv * d, h, bias)?;
    let v = b.linear(&format!("{p}attn_v"), xn, nkv * d, h, bias)?;
    let rows = b.rows.clone();
    let heads3 = |n: usize| vec![rows.clone(), Dim::Fixed(n as u64), Dim::Fixed(d as u64)];
    let mut q = b.reshape(&format!("{p}attn_q.heads"), q, heads3(nh))?;
    let mut k = b.reshape(&format!("{p}attn_k.heads"), k, heads3(nkv))?;
    let v = b.reshape(&format!("{p}attn_v.heads"), v, heads3(nkv))?;
    if matches!(c.arch, Arch::Qwen3 | Arch::Gemma3) {
        q = b.rms_norm(&format!("{p}attn_q_norm"), q, &format!("{p}attn_q_norm.weight"), d, c.eps)?;
        k = b.rms_norm(&format!("{p}attn_k_norm"), k, &format!("{p}attn_k_norm.weight"), d, c.eps)?;
    }
    let local = c.is_local(i);
    let (cos, sin) = if local { s.rope_local } else { s.rope_global };
    let q = rope(b, &format!("{p}rope_q"), q, nh, d, cos, sin, c.rope)?;
    let k = rope(b, &format!("{p}rope_k"), k, nkv, d, cos, sin, c.rope)?;
    let (k, v) = kv(b, i, k, v)?;
    let keys = b.g.ty(k).shape.0[0].clone();
    // Grouped-query attention: query head j reads key/value head j / g (g = nh / nkv). The query heads
    // are grouped by their key/value head, [nkv, g, rows, d], and the keys and values keep one head
    // per group, [nkv, 1, …], broadcast by the matmuls: the cache is read where it is, never copied
    // once per query head.
    let g = nh / nkv;
    let (fx, rows) = (|n: usize| Dim::Fixed(n as u64), b.rows.clone());
    let q4 = b.reshape(&format!("{p}attn.q_groups"), q, vec![rows.clone(), fx(nkv), fx(g), fx(d)])?;
    let k4 = b.reshape(&format!("{p}attn.k_groups"), k, vec![keys.clone(), fx(nkv), fx(1), fx(d)])?;
    let v4 = b.reshape(&format!("{p}attn.v_groups"), v, vec![keys.clone(), fx(nkv), fx(1), fx(d)])?;
    let qt = b.op(&format!("{p}attn.q_t"), MirOp::Transpose { perm: vec![1, 2, 0, 3] }, &[q4])?;
    let kt = b.op(&format!("{p}attn.k_t"), MirOp::Transpose { perm: vec![1, 2, 3, 0] }, &[k4])?;
    let vt = b.op(&format!("{p}attn.v_t"), MirOp::Transpose { perm: vec![1, 2, 0, 3] }, &[v4])?;
    let scores = b.op(&format!("{p}attn.scores"), MirOp::MatMul, &[qt, kt])?;
    let sc = b.scalar(c.attn_scale as f32);
    let scores = b.bin(&format!("{p}attn.scale"), BinaryOp::Mul, scores, sc)?;
    let ninf = b.scalar(f32::NEG_INFINITY);
    let m = if local { s.mask_local } else { s.mask_global };
    let scores = b.op(&format!("{p}attn.mask"), MirOp::Where, &[m, scores, ninf])?;
    let probs = b.g.add1(&format!("{p}attn.softmax"), HirOp::Softmax { axis: 3, log: false }, &[scores])?;
    let ctx = b.op(&format!("{p}attn.context"), MirOp::MatMul, &[probs, vt])?;
    let ctx = b.op(&format!("{p}attn.merge_t"), MirOp::Transpose { perm: vec![2, 0, 1, 3] }, &[ctx])?;
    let ctx = b.reshape(&format!("{p}attn.merge"), ctx, vec![b.rows.clone(), Dim::Fixed((nh * d) as u64)])?;
    let mut o = b.linear(&format!("{p}attn_output"), ctx, h, nh * d, false)?;
    if gemma {
        o = b.rms_norm(&format!("{p}post_attention_norm"), o, &format!("{p}post_attention_norm.weight"), h, c.eps)?;
    }
    let x = b.bin(&format!("{p}attn_residual"), BinaryOp::Add, x, o)?;

    let xn = b.rms_norm(&format!("{p}ffn_norm"), x, &format!("{p}ffn_norm.weight"), h, c.eps)?;
    let gate = b.linear(&format!("{p}ffn_gate"), xn, c.ffn, h, false)?;
    let up = b.linear(&format!("{p}ffn_up"), xn, c.ffn, h, false)?;
    let act = if gemma {
        // GeGLU with the tanh approximation of GELU (Gemma's gelu_pytorch_tanh).
        b.g.add1(&format!("{p}ffn_gelu"), HirOp::Gelu { tanh: true }, &[gate])?
    } else {
        let sg = b.op(&format!("{p}ffn_silu.sigmoid"), MirOp::Unary(UnaryOp::Sigmoid), &[gate])?;
        b.bin(&format!("{p}ffn_silu"), BinaryOp::Mul, gate, sg)?
    };
    let hdn = b.bin(&format!("{p}ffn_gated"), BinaryOp::Mul, act, up)?;
    let mut f = b.linear(&format!("{p}ffn_down"), hdn, h, c.ffn, false)?;
    if gemma {
        f = b.rms_norm(&format!("{p}post_ffw_norm"), f, &format!("{p}post_ffw_norm.weight"), h, c.eps)?;
    }
    b.bin(&format!("{p}ffn_residual"), BinaryOp::Add, x, f)
}

/// Builds the stateless full-sequence graph.
pub fn build(c: &LlmConfig, f: &dyn Weights) -> R<Hir> {
    let mut b = B { g: Hir::new(), f, rows: seq() };
    let ids = b.g.add_input("tokens", TensorType::new(DType::I64, Shape(vec![seq()])));
    let pos = b.g.add_input("positions", TensorType::new(DType::I64, Shape(vec![seq()])));
    let key_pos = b.reshape("mask.key_pos", pos, vec![Dim::Fixed(1), seq()])?;
    let x = body(&mut b, c, ids, pos, key_pos, &mut |_, _, k, v| Ok((k, v)))?;
    let logits = head(&mut b, c, x)?;
    b.g.outputs.push(logits);
    finish(b.g)
}

/// Builds one cached step over `chunk` tokens with caches of `context` positions (see the module doc).
pub fn build_step(c: &LlmConfig, f: &dyn Weights, chunk: usize, context: usize) -> R<Hir> {
    if chunk == 0 || context == 0 || chunk > context || context > i32::MAX as usize {
        return Err(format!("a cached step needs 1 <= chunk ({chunk}) <= context ({context}) <= 2^31 - 1"));
    }
    let rows = Dim::Fixed(chunk as u64);
    let mut b = B { g: Hir::new(), f, rows: rows.clone() };
    let ids = b.g.add_input("tokens", TensorType::new(DType::I64, Shape(vec![rows.clone()])));
    let pos = b.g.add_input("positions", TensorType::new(DType::I64, Shape(vec![rows])));
    let cache_ty = TensorType::fixed(DType::F32, &[context, c.kv_heads, c.head_dim]);
    let mut caches = Vec::with_capacity(c.layers);
    for i in 0..c.layers {
        let k = b.g.add_input(&format!("cache.{i}.k"), cache_ty.clone());
        let v = b.g.add_input(&format!("cache.{i}.v"), cache_ty.clone());
        caches.push((k, v));
    }
    let iota: Vec<i64> = (0..context as i64).collect();
    let key_pos = b.g.add_const(Some("cache.positions"), ConstData::from_i64(vec![1, context], &iota));
    let mut written = Vec::with_capacity(2 * c.layers);
    let x = body(&mut b, c, ids, pos, key_pos, &mut |b, i, k, v| {
        let (kc, vc) = caches[i];
        let k = b.op(&format!("cache.{i}.k"), MirOp::WriteRows, &[kc, k, pos])?;
        let v = b.op(&format!("cache.{i}.v"), MirOp::WriteRows, &[vc, v, pos])?;
        written.push((format!("cache.{i}.k"), k));
        written.push((format!("cache.{i}.v"), v));
        Ok((k, v))
    })?;
    // Only the chunk's last row is read out (the next token after the call's last real token; callers
    // put their tokens at the end of the chunk): the final norm and the output projection — over the
    // whole vocabulary, the largest matmul of a step — run on one row, not `chunk`.
    let c1 = chunk as i64;
    let last = b.op("last_row", MirOp::Slice { axes: vec![0], starts: vec![c1 - 1], ends: vec![c1], steps: vec![1] }, &[x])?;
    b.rows = Dim::Fixed(1);
    let logits = head(&mut b, c, last)?;
    b.g.outputs.push(logits);
    let (ni, no) = (b.g.inputs.len() as u32, b.g.outputs.len() as u32);
    for (k, (name, v)) in written.into_iter().enumerate() {
        b.g.values[v.index()].name = Some(name);
        b.g.outputs.push(v);
        b.g.state.push(State { input: ni - 2 * c.layers as u32 + k as u32, output: no + k as u32 });
    }
    finish(b.g)
}

fn finish(g: Hir) -> R<Hir> {
    let problems = rlx_ir::verify::verify(&g);
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        return Err(format!("built an invalid graph:\n  {}", list.join("\n  ")));
    }
    Ok(g)
}

/// Embedding and the layers for tokens `ids` at positions `pos`: the hidden states [rows, hidden];
/// `key_pos` [1, keys] are the positions of the keys attention reads (`kv` says where those keys come from).
fn body(b: &mut B, c: &LlmConfig, ids: ValueId, pos: ValueId, key_pos: ValueId, kv: &mut Kv) -> R<ValueId> {
    let f32_table = b.tensor("token_embd.weight")?.dtype == DType::F32;
    let table = b.raw("token_embd.weight")?;
    let mut x = if f32_table {
        b.op("token_embd", MirOp::Gather { axis: 0 }, &[table, ids])?
    } else {
        b.op("token_embd", MirOp::DequantGather, &[table, ids])?
    };
    if c.arch == Arch::Gemma3 {
        let s = b.scalar((c.hidden as f64).sqrt() as f32);
        x = b.bin("token_embd.scale", BinaryOp::Mul, x, s)?;
    }
    let pos_f = b.op("positions.f32", MirOp::Cast { to: DType::F32 }, &[pos])?;
    let rope_global = rope_tables(b, "rope", pos_f, c.head_dim, c.rope_base)?;
    let mask_global = mask(b, "mask", pos, key_pos, None)?;
    let (rope_local, mask_local) = if c.sliding_window.is_some() {
        (rope_tables(b, "rope_local", pos_f, c.head_dim, c.rope_base_local)?, mask(b, "mask_local", pos, key_pos, c.sliding_window)?)
    } else {
        (rope_global, mask_global)
    };
    let shared = Shared { rope_global, rope_local, mask_global, mask_local };
    for i in 0..c.layers {
        x = layer(b, c, i, x, &shared, kv)?;
    }
    Ok(x)
}

/// The final norm and the logits of hidden states x [rows, hidden].
fn head(b: &mut B, c: &LlmConfig, x: ValueId) -> R<ValueId> {
    let f = b.f;
    let x = b.rms_norm("output_norm", x, "output_norm.weight", c.hidden, c.eps)?;
    // Tied embeddings: without an `output` matrix the logits read the token embedding table.
    let out = if f.tensor("output.weight").is_some() { "output" } else { "token_embd" };
    let wname = format!("{out}.weight");
    let t = b.tensor(&wname)?;
    if t.shape != [c.vocab, c.hidden] {
        return Err(format!("tensor '{}' has shape {:?}, expected [{}, {}]", f.shown(&wname), t.shape, c.vocab, c.hidden));
    }
    let logits = b.linear(out, x, c.vocab, c.hidden, false)?;
    b.g.values[logits.index()].name = Some("logits".to_string());
    Ok(logits)
}
