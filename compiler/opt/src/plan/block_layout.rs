//! The packed layout of a GGUF block constant and the dequantization of one value from it, as
//! loop-form expressions (the kernels that use them are in `blocks.rs`).
//!
//! Each constant that `dequant_matmul` / `dequant_gather` read is repacked into panels of `nr` rows whose
//! blocks are interleaved field by field: for block `b` of panel `p`, byte `t` of the block for row
//! `p·nr + jj` lives at `((p·nblk + b)·bb + t)·nr + jj`; a 2-byte f16 field at `t0` keeps its two bytes
//! together at `((p·nblk + b)·bb + t0)·nr + 2·jj`. The bytes are the same bytes, permuted (the artifact
//! grows by nothing), and every value is computed from the same fields with the interpreter's f32
//! arithmetic (`rlx-interp`'s `blocks.rs`, ggml's order). Block layouts: see that file's header.
//!
//! A Q8_0, Q5_0, Q4_K or Q6_K weight that the int8 form reads (`int8_dot.rs`) keeps its quant bytes
//! (`quad_bytes`: `s ≤ t < e`; Q8_0 / Q5_0 after the f16 scale, Q4_K after its scales, Q6_K's `ql`
//! and `qh`) in groups of 4 per row instead ("quads"): byte `t` of row `jj` at `((p·nblk + b)·bb + s +
//! 4·((t−s)/4))·nr + 4·jj + (t−s)%4`, so a row's group (4 quants; Q5_0's high bits `qh`) is one i32
//! and a group for all `nr` rows one unit-stride vector. The other bytes keep the plain layout.

use super::kernel::lit;
use rlx_ir::loops::{Expr, IOp};
use rlx_ir::{BinaryOp, ConstData, DType, UnaryOp};

/// A block constant as the kernels see it: views of its packed bytes (buffer ids) and its geometry.
#[derive(Clone, Debug)]
pub(super) struct BlockWeight {
    pub dtype: DType,
    /// Rows (N for a matmul, R for a gather) and values per row.
    pub rows: usize,
    pub cols: usize,
    /// Rows per panel (a power of two dividing `rows`).
    pub nr: usize,
    /// The packed bytes viewed as u8, i8, f16 (K-quant and legacy-quant fields), and, for plain float
    /// weights, as their own dtype.
    pub u8v: u32,
    pub i8v: u32,
    pub f16v: u32,
    pub valv: u32,
    /// A weight packed in quads (module doc): its bytes viewed as i32.
    pub quads: Option<u32>,
}

impl BlockWeight {
    pub(super) fn nblk(&self) -> usize {
        self.cols / self.dtype.block().0
    }
}

/// Whether the kernels read weights of dtype `d`: f32, f16, bf16 and every GGUF block type.
pub(super) fn lowers(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16) || d.is_quantized_block()
}

/// Rows per panel for a weight of `rows` rows: the largest power of two ≤ `nr` dividing `rows` (so no
/// panel is partial and no lane needs a guard).
pub(super) fn panel_rows(rows: usize, nr: usize) -> usize {
    let mut p = nr.max(1).next_power_of_two();
    if p > nr.max(1) {
        p /= 2;
    }
    while p > 1 && rows % p != 0 {
        p /= 2;
    }
    p
}

/// The 2-byte (f16) fields of a block, by byte offset; every other byte is a 1-byte field. Plain float
/// types are one field of their own size.
pub(super) fn f16_fields(d: DType) -> &'static [usize] {
    match d {
        DType::Q4_0 | DType::Q5_0 | DType::Q8_0 => &[0],
        DType::Q4_1 | DType::Q5_1 | DType::Q4_K | DType::Q5_K => &[0, 2],
        DType::Q2_K => &[80, 82],
        DType::Q3_K => &[108],
        DType::Q6_K => &[208],
        _ => &[],
    }
}

/// The bytes `s..e` of a block that the int8 form reads in quads (module doc), for the types it takes.
pub(super) fn quad_bytes(d: DType) -> Option<(usize, usize)> {
    match d {
        DType::Q8_0 => Some((2, 34)),
        DType::Q5_0 => Some((2, 22)),
        DType::Q4_K => Some((16, 144)),
        DType::Q6_K => Some((0, 192)),
        _ => None,
    }
}

/// Repacks a 2-D block (or plain float) constant `[rows, cols]` into interleaved panels of `nr` rows
/// (with `quads`, the bytes `quad_bytes` names in groups of 4 per row: module doc).
pub(super) fn pack_blocks(c: &ConstData, nr: usize, quads: bool) -> Vec<u8> {
    let qb = quad_bytes(c.dtype).filter(|_| quads);
    let (rows, cols) = (c.shape[0], c.shape[1]);
    let (bs, bb) = c.dtype.block();
    let nblk = cols / bs;
    let row_bytes = nblk * bb;
    let mut units: Vec<(usize, usize)> = Vec::new();
    if bs == 1 {
        units.push((0, bb));
    } else {
        let f = f16_fields(c.dtype);
        let mut t = 0;
        while t < bb {
            let us = if f.contains(&t) { 2 } else { 1 };
            units.push((t, us));
            t += us;
        }
    }
    let src = c.data.bytes();
    let mut out = vec![0u8; rows * row_bytes];
    for j in 0..rows {
        let (p, jj) = (j / nr, j % nr);
        for b in 0..nblk {
            let s = &src[j * row_bytes + b * bb..][..bb];
            let base = (p * nblk + b) * bb * nr;
            for &(t0, us) in &units {
                let d = match qb {
                    Some((qs, qe)) if (qs..qe).contains(&t0) => base + (qs + (t0 - qs) / 4 * 4) * nr + 4 * jj + (t0 - qs) % 4,
                    _ => base + t0 * nr + jj * us,
                };
                out[d..d + us].copy_from_slice(&s[t0..t0 + us]);
            }
        }
    }
    out
}

/// (sub-blocks, values per sub-block) of a block type: the values of a sub-block share a scale (and
/// min), and within one the byte holding value `l` is affine in `l` and its shift is fixed.
pub(super) fn subs(d: DType) -> (usize, usize) {
    match d {
        DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 => (2, 16),
        DType::Q8_0 => (1, 32),
        DType::Q2_K | DType::Q3_K | DType::Q6_K => (16, 16),
        DType::Q4_K | DType::Q5_K => (8, 32),
        _ => (1, 1),
    }
}

fn i32c(x: i64) -> Expr {
    lit(x as f64, DType::I32)
}
fn ib(op: BinaryOp, a: Expr, b: Expr) -> Expr {
    Expr::Bin(op, DType::I32, Box::new(a), Box::new(b))
}
pub(super) fn fb(op: BinaryOp, a: Expr, b: Expr) -> Expr {
    Expr::Bin(op, DType::F32, Box::new(a), Box::new(b))
}
fn shr(a: Expr, s: Expr) -> Expr {
    ib(BinaryOp::Shr, a, s)
}
fn and(a: Expr, m: i64) -> Expr {
    ib(BinaryOp::BitAnd, a, i32c(m))
}
fn to_f32(a: Expr) -> Expr {
    Expr::Cast { from: DType::I32, to: DType::F32, x: Box::new(a) }
}
fn idx_i32(e: Expr) -> Expr {
    Expr::Cast { from: DType::I64, to: DType::I32, x: Box::new(e) }
}

/// Where one block's fields are: the kernel params of the views, the block's packed index
/// (`p·nblk + b`) and the lane (`jj`).
pub(super) struct Fields {
    pub u8p: u32,
    pub i8p: u32,
    pub f16p: u32,
    pub valp: u32,
    pub bb: i64,
    pub nr: i64,
    pub blk: Expr,
    pub jj: Expr,
    /// The bytes `s..e` in quads (module doc), when the weight is packed so.
    pub quads: Option<(i64, i64)>,
}

impl Fields {
    /// Where byte `t` of the block is. A byte the kernels read at a non-constant offset is always a
    /// quant byte (inside the quad range); a constant one is placed by the range.
    fn at(&self, t: Expr) -> Expr {
        let quad = match (self.quads, &t) {
            (Some((s, e)), Expr::Int(c)) => (s..e).contains(c).then_some(s),
            (q, _) => q.map(|(s, _)| s),
        };
        if let Some(s) = quad {
            let q = Expr::i(IOp::Sub, t, Expr::Int(s));
            let (g, r) = (Expr::i(IOp::Div, q.clone(), Expr::Int(4)), Expr::i(IOp::Rem, q, Expr::Int(4)));
            let row = Expr::add(Expr::mul(self.blk.clone(), Expr::Int(self.bb)), Expr::add(Expr::Int(s), Expr::mul(g, Expr::Int(4))));
            return Expr::add(Expr::add(Expr::mul(row, Expr::Int(self.nr)), Expr::mul(self.jj.clone(), Expr::Int(4))), r);
        }
        let row = Expr::add(Expr::mul(self.blk.clone(), Expr::Int(self.bb)), t);
        Expr::add(Expr::mul(row, Expr::Int(self.nr)), self.jj.clone())
    }
    /// Byte `t` of the block as i32 (zero-extended).
    fn u8(&self, t: Expr) -> Expr {
        Expr::Cast { from: DType::U8, to: DType::I32, x: Box::new(Expr::load(self.u8p, self.at(t))) }
    }
    fn u8c(&self, t: usize) -> Expr {
        self.u8(Expr::Int(t as i64))
    }
    /// Byte `t` as a signed value, as f32.
    fn i8f(&self, t: Expr) -> Expr {
        Expr::Cast { from: DType::I8, to: DType::F32, x: Box::new(Expr::load(self.i8p, self.at(t))) }
    }
    /// The f16 field at byte `t0` (even), as f32.
    pub(super) fn h(&self, t0: usize) -> Expr {
        let row = Expr::add(Expr::mul(self.blk.clone(), Expr::Int(self.bb / 2)), Expr::Int(t0 as i64 / 2));
        let i = Expr::add(Expr::mul(row, Expr::Int(self.nr)), self.jj.clone());
        Expr::Cast { from: DType::F16, to: DType::F32, x: Box::new(Expr::load(self.f16p, i)) }
    }
}

/// Value `l` of sub-block `s` as one f32 expression: `scale · q − min` from [`value`]'s parts.
pub(super) fn value_f32(d: DType, f: &Fields, s: usize, l: &Expr) -> Expr {
    let (dl, ml, q) = value(d, f, s, l);
    let val = match dl {
        Some(d) => fb(BinaryOp::Mul, d, q),
        None => q,
    };
    match ml {
        Some(m) => fb(BinaryOp::Sub, val, m),
        None => val,
    }
}

/// Value `l` of sub-block `s`: `(scale, min, q)` with the value `scale · q − min` (`q` an f32 of a small
/// integer), or `(None, None, v)` for plain floats (the value itself). `scale` and `min` do not depend
/// on `l`. The arithmetic is the interpreter's (`rlx-interp`'s `blocks.rs`), in the same order: an
/// added min `m` is written `− (−m)`, which is the same IEEE operation.
pub(super) fn value(d: DType, f: &Fields, s: usize, l: &Expr) -> (Option<Expr>, Option<Expr>, Expr) {
    let lv = || l.clone();
    let add = |t: i64| Expr::add(Expr::Int(t), lv());
    let neg = |e: Expr| Expr::Un(UnaryOp::Neg, DType::F32, Box::new(e));
    let si = s as i64;
    match d {
        DType::F32 | DType::F16 | DType::BF16 => {
            let i = Expr::add(Expr::mul(f.blk.clone(), Expr::Int(f.nr)), f.jj.clone());
            let v = Expr::load(f.valp, i);
            (None, None, if d == DType::F32 { v } else { Expr::Cast { from: d, to: DType::F32, x: Box::new(v) } })
        }
        DType::Q4_0 => (Some(f.h(0)), None, to_f32(ib(BinaryOp::Sub, and(shr(f.u8(add(2)), i32c(4 * si)), 15), i32c(8)))),
        DType::Q4_1 => (Some(f.h(0)), Some(neg(f.h(2))), to_f32(and(shr(f.u8(add(4)), i32c(4 * si)), 15))),
        DType::Q5_0 | DType::Q5_1 => {
            let (qh, qs) = if d == DType::Q5_0 { (2, 6) } else { (4, 8) };
            let lo = and(shr(f.u8(add(qs)), i32c(4 * si)), 15);
            let hbyte = f.u8(Expr::add(Expr::Int(qh + 2 * si), Expr::i(IOp::Div, lv(), Expr::Int(8))));
            // The shift `l mod 8` as a masked i32, so the writer sees it is below 32 (no out-of-range select).
            let hi = and(shr(hbyte, and(idx_i32(lv()), 7)), 1);
            let q = ib(BinaryOp::BitOr, lo, ib(BinaryOp::Shl, hi, i32c(4)));
            if d == DType::Q5_0 {
                (Some(f.h(0)), None, to_f32(ib(BinaryOp::Sub, q, i32c(16))))
            } else {
                (Some(f.h(0)), Some(neg(f.h(2))), to_f32(q))
            }
        }
        DType::Q8_0 => (Some(f.h(0)), None, f.i8f(add(2))),
        DType::Q2_K | DType::Q3_K => {
            let (half, j, part) = (si / 8, (si % 8) / 2, si % 2);
            let i = 16 * part;
            if d == DType::Q2_K {
                let sc = f.u8c(s);
                let dl = fb(BinaryOp::Mul, f.h(80), to_f32(and(sc.clone(), 15)));
                let ml = fb(BinaryOp::Mul, f.h(82), to_f32(shr(sc, i32c(4))));
                let q = and(shr(f.u8(add(16 + 32 * half + i)), i32c(2 * j)), 3);
                (Some(dl), Some(ml), to_f32(q))
            } else {
                let bit = 4 * half + j;
                let low = if s < 8 { and(f.u8c(96 + s), 15) } else { shr(f.u8c(96 + s - 8), i32c(4)) };
                let high = and(shr(f.u8c(104 + s % 4), i32c(2 * (si / 4))), 3);
                let sc = ib(BinaryOp::Sub, ib(BinaryOp::BitOr, low, ib(BinaryOp::Shl, high, i32c(4))), i32c(32));
                let dl = fb(BinaryOp::Mul, f.h(108), to_f32(sc));
                let q2 = and(shr(f.u8(add(32 + 32 * half + i)), i32c(2 * j)), 3);
                let hb = and(shr(f.u8(add(i)), i32c(bit)), 1);
                // hmask bit clear = −4: q − 4 + 4·bit.
                let q = ib(BinaryOp::Add, ib(BinaryOp::Sub, q2, i32c(4)), ib(BinaryOp::Shl, hb, i32c(2)));
                (Some(dl), None, to_f32(q))
            }
        }
        DType::Q4_K | DType::Q5_K => {
            let (g, part) = (si / 2, si % 2);
            let (scm, m) = if s < 4 {
                (and(f.u8c(4 + s), 63), and(f.u8c(8 + s), 63))
            } else {
                (
                    ib(BinaryOp::BitOr, and(f.u8c(8 + s), 15), ib(BinaryOp::Shl, shr(f.u8c(s), i32c(6)), i32c(4))),
                    ib(BinaryOp::BitOr, shr(f.u8c(8 + s), i32c(4)), ib(BinaryOp::Shl, shr(f.u8c(4 + s), i32c(6)), i32c(4))),
                )
            };
            let dl = fb(BinaryOp::Mul, f.h(0), to_f32(scm));
            let ml = fb(BinaryOp::Mul, f.h(2), to_f32(m));
            let qs = if d == DType::Q4_K { 16 } else { 48 };
            let mut q = and(shr(f.u8(add(qs + 32 * g)), i32c(4 * part)), 15);
            if d == DType::Q5_K {
                let hb = and(shr(f.u8(add(16)), i32c(si)), 1);
                q = ib(BinaryOp::BitOr, q, ib(BinaryOp::Shl, hb, i32c(4)));
            }
            (Some(dl), Some(ml), to_f32(q))
        }
        DType::Q6_K => {
            let (h, k, is) = (si / 8, (si % 8) / 2, si % 2);
            let lp = 16 * is;
            let qlb = f.u8(add(64 * h + lp + if k % 2 == 1 { 32 } else { 0 }));
            let ql = if k < 2 { and(qlb, 15) } else { shr(qlb, i32c(4)) };
            let qh = and(shr(f.u8(add(128 + 32 * h + lp)), i32c(2 * k)), 3);
            let q = ib(BinaryOp::Sub, ib(BinaryOp::BitOr, ql, ib(BinaryOp::Shl, qh, i32c(4))), i32c(32));
            let dl = fb(BinaryOp::Mul, f.h(208), f.i8f(Expr::Int(192 + 8 * h + is + 2 * k)));
            (Some(dl), None, to_f32(q))
        }
        other => unreachable!("{other} is not a float or GGUF block type (inference checks)"),
    }
}
