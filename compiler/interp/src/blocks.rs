//! GGUF block dequantization: every block type → f32, written from ggml's documented block layouts
//! (ggml-common.h). Arithmetic is f32 in ggml's order (`d * q`, `d * q - m`; no fused multiply-add),
//! so values match ggml's and the `gguf` Python package's dequantizers bit for bit.
//!
//! Block layouts (little-endian; `f16` = IEEE half):
//! - Q4_0 (32 values, 18 B): d f16, qs[16] nibbles (low nibbles values 0..16, high 16..32), v = d·(q−8)
//! - Q4_1 (32, 20 B): d, m f16, qs[16]; v = d·q + m
//! - Q5_0 (32, 22 B): d, qh u32 (bit j = 5th bit of value j), qs[16]; v = d·(q−16)
//! - Q5_1 (32, 24 B): d, m, qh u32, qs[16]; v = d·q + m
//! - Q8_0 (32, 34 B): d, qs[32] i8; v = d·q
//! - Q2_K (256, 84 B): scales[16] (low nibble scale, high nibble min), qs[64] 2-bit, d, dmin
//! - Q3_K (256, 110 B): hmask[32] (3rd bit, inverted: clear = −4), qs[64] 2-bit, scales[12] (16 6-bit
//!   scales, offset 32), d
//! - Q4_K (256, 144 B): d, dmin, scales[12] (8 6-bit scales + 8 6-bit mins), qs[128] nibbles
//! - Q5_K (256, 176 B): d, dmin, scales[12], qh[32] (5th bits), qs[128] nibbles
//! - Q6_K (256, 210 B): ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] i8, d; v = d·s·(q−32)

use rlx_ir::DType;

fn f16(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// Dequantizes whole blocks: `bytes` holds `out.len() / block_values` blocks of `dtype` (plain float
/// dtypes are accepted too and decoded as values). Errors if the lengths disagree.
pub fn dequantize(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<(), String> {
    let (n, size) = dtype.block();
    if out.len() % n != 0 || bytes.len() != out.len() / n * size {
        return Err(format!("{dtype}: {} bytes do not hold {} values", bytes.len(), out.len()));
    }
    let blocks = bytes.chunks_exact(size).zip(out.chunks_exact_mut(n));
    match dtype {
        DType::F32 => bytes.chunks_exact(4).zip(out.iter_mut()).for_each(|(b, y)| *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DType::F16 => bytes.chunks_exact(2).zip(out.iter_mut()).for_each(|(b, y)| *y = f16(b, 0)),
        DType::BF16 => bytes
            .chunks_exact(2)
            .zip(out.iter_mut())
            .for_each(|(b, y)| *y = half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()),
        DType::Q4_0 => blocks.for_each(|(b, y)| q4_0(b, y)),
        DType::Q4_1 => blocks.for_each(|(b, y)| q4_1(b, y)),
        DType::Q5_0 => blocks.for_each(|(b, y)| q5_0(b, y)),
        DType::Q5_1 => blocks.for_each(|(b, y)| q5_1(b, y)),
        DType::Q8_0 => blocks.for_each(|(b, y)| q8_0(b, y)),
        DType::Q2_K => blocks.for_each(|(b, y)| q2_k(b, y)),
        DType::Q3_K => blocks.for_each(|(b, y)| q3_k(b, y)),
        DType::Q4_K => blocks.for_each(|(b, y)| q4_k(b, y)),
        DType::Q5_K => blocks.for_each(|(b, y)| q5_k(b, y)),
        DType::Q6_K => blocks.for_each(|(b, y)| q6_k(b, y)),
        other => return Err(format!("{other} is not a float or GGUF block type")),
    }
    Ok(())
}

fn q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16(b, 0);
    for j in 0..16 {
        let q = b[2 + j];
        y[j] = d * ((q & 0xF) as i32 - 8) as f32;
        y[j + 16] = d * ((q >> 4) as i32 - 8) as f32;
    }
}

fn q4_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16(b, 0), f16(b, 2));
    for j in 0..16 {
        let q = b[4 + j];
        y[j] = d * (q & 0xF) as f32 + m;
        y[j + 16] = d * (q >> 4) as f32 + m;
    }
}

/// The 5-bit values of a Q5_0/Q5_1 block: nibbles at `qs`, fifth bits in the u32 at `qh`.
fn q5_values(b: &[u8], qh: usize, qs: usize) -> [i32; 32] {
    let h = u32::from_le_bytes([b[qh], b[qh + 1], b[qh + 2], b[qh + 3]]);
    let mut v = [0i32; 32];
    for j in 0..16 {
        let q = b[qs + j];
        v[j] = ((q & 0xF) as u32 | ((h >> j) & 1) << 4) as i32;
        v[j + 16] = ((q >> 4) as u32 | ((h >> (j + 16)) & 1) << 4) as i32;
    }
    v
}

fn q5_0(b: &[u8], y: &mut [f32]) {
    let d = f16(b, 0);
    for (y, q) in y.iter_mut().zip(q5_values(b, 2, 6)) {
        *y = d * (q - 16) as f32;
    }
}

fn q5_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16(b, 0), f16(b, 2));
    for (y, q) in y.iter_mut().zip(q5_values(b, 4, 8)) {
        *y = d * q as f32 + m;
    }
}

fn q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16(b, 0);
    for j in 0..32 {
        y[j] = d * (b[2 + j] as i8) as f32;
    }
}

fn q2_k(b: &[u8], y: &mut [f32]) {
    let (scales, qs) = (&b[0..16], &b[16..80]);
    let (d, dmin) = (f16(b, 80), f16(b, 82));
    let mut k = 0;
    for half in 0..2 {
        let q = &qs[32 * half..32 * half + 32];
        for j in 0..4 {
            let shift = 2 * j;
            for part in 0..2 {
                let sc = scales[8 * half + 2 * j + part];
                let (dl, ml) = (d * (sc & 0xF) as f32, dmin * (sc >> 4) as f32);
                for l in 0..16 {
                    y[k] = dl * ((q[16 * part + l] >> shift) & 3) as f32 - ml;
                    k += 1;
                }
            }
        }
    }
}

/// Q3_K's 16 six-bit scales from its 12 packed bytes: low 4 bits in bytes 0..8 (nibbles), high 2 bits
/// in bytes 8..12 (2-bit fields), each minus 32.
fn q3_k_scales(s: &[u8]) -> [i32; 16] {
    let mut out = [0i32; 16];
    for (i, o) in out.iter_mut().enumerate() {
        let low = if i < 8 { s[i] & 0xF } else { s[i - 8] >> 4 };
        let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        *o = (low | high << 4) as i32 - 32;
    }
    out
}

fn q3_k(b: &[u8], y: &mut [f32]) {
    let (hmask, qs) = (&b[0..32], &b[32..96]);
    let scales = q3_k_scales(&b[96..108]);
    let d = f16(b, 108);
    let (mut k, mut bit) = (0, 0);
    for half in 0..2 {
        let q = &qs[32 * half..32 * half + 32];
        for j in 0..4 {
            let shift = 2 * j;
            for part in 0..2 {
                let dl = d * scales[8 * half + 2 * j + part] as f32;
                for l in 0..16 {
                    let i = 16 * part + l;
                    let hi = if hmask[i] >> bit & 1 == 1 { 0 } else { 4 };
                    y[k] = dl * (((q[i] >> shift) & 3) as i32 - hi) as f32;
                    k += 1;
                }
            }
            bit += 1;
        }
    }
}

/// Scale and min `j` (0..8) of a Q4_K/Q5_K block's 12 packed bytes (6 bits each).
fn k4_scale_min(s: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        ((s[j + 4] & 0xF) | (s[j - 4] >> 6) << 4, (s[j + 4] >> 4) | (s[j] >> 6) << 4)
    }
}

fn q4_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16(b, 0), f16(b, 2));
    let (scales, qs) = (&b[4..16], &b[16..144]);
    for g in 0..4 {
        let q = &qs[32 * g..32 * g + 32];
        for (part, shift) in [(0usize, 0u8), (1, 4)] {
            let (sc, m) = k4_scale_min(scales, 2 * g + part);
            let (dl, ml) = (d * sc as f32, dmin * m as f32);
            for l in 0..32 {
                y[64 * g + 32 * part + l] = dl * ((q[l] >> shift) & 0xF) as f32 - ml;
            }
        }
    }
}

fn q5_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16(b, 0), f16(b, 2));
    let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[48..176]);
    for g in 0..4 {
        let q = &qs[32 * g..32 * g + 32];
        for (part, shift) in [(0usize, 0u8), (1, 4)] {
            let (sc, m) = k4_scale_min(scales, 2 * g + part);
            let (dl, ml) = (d * sc as f32, dmin * m as f32);
            let hbit = 2 * g + part;
            for l in 0..32 {
                let v = ((q[l] >> shift) & 0xF) | ((qh[l] >> hbit) & 1) << 4;
                y[64 * g + 32 * part + l] = dl * v as f32 - ml;
            }
        }
    }
}

fn q6_k(b: &[u8], y: &mut [f32]) {
    let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
    let d = f16(b, 208);
    for half in 0..2 {
        let (ql, qh, sc, y) = (&ql[64 * half..], &qh[32 * half..], &sc[8 * half..], &mut y[128 * half..]);
        for l in 0..32 {
            let is = l / 16;
            let q = [
                (ql[l] & 0xF) | (qh[l] & 3) << 4,
                (ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4,
                (ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4,
                (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4,
            ];
            for (k, q) in q.into_iter().enumerate() {
                y[l + 32 * k] = d * (sc[is + 2 * k] as i8) as f32 * (q as i32 - 32) as f32;
            }
        }
    }
}
