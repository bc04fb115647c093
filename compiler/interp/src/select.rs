//! The data-dependent-length ops (`rlx_ir::bounded`): nonzero, compress, nms, unique. Each result is
//! padded to the op's static bound with zeros (valid indices for the gathers that read it); the count
//! beside it (the importer's, or `nms`'s own) says how much of it is the result.

use crate::reduce::elem_cmp;
use crate::tensor::{map_buf, numel, Buf, T};
use rlx_ir::DType;
use std::cmp::Ordering;

/// `total` elements, zero but for element `src[i]` of `x` at `pos[i]`.
fn placed(x: &T, src: &[usize], pos: &[usize], total: usize) -> Buf {
    map_buf!(x.data.take(src), v => {
        let mut out = vec![Default::default(); total];
        for (p, e) in pos.iter().zip(v) {
            out[*p] = e;
        }
        out
    })
}

fn is_nonzero(x: &T, i: usize) -> bool {
    match &x.data {
        Buf::I(v) => v[i] != 0,
        d => d.f(i) != 0.0,
    }
}

pub fn nonzero(x: &T) -> Result<T, String> {
    let (r, n) = (x.shape.len(), x.numel());
    let mut out = vec![0i64; r * n];
    let mut idx = vec![0usize; r];
    let mut k = 0;
    for i in 0..n {
        if is_nonzero(x, i) {
            for (d, &j) in idx.iter().enumerate() {
                out[d * n + k] = j as i64;
            }
            k += 1;
        }
        crate::tensor::next_index(&mut idx, &x.shape);
    }
    Ok(T::new(DType::I64, vec![r, n], Buf::I(out)))
}

pub fn compress(x: &T, cond: &T, axis: usize) -> Result<T, String> {
    let (outer, len, inner) = (numel(&x.shape[..axis]), x.shape[axis], numel(&x.shape[axis + 1..]));
    let keep: Vec<usize> = (0..cond.numel().min(len)).filter(|&i| is_nonzero(cond, i)).collect();
    let mut src = Vec::with_capacity(outer * keep.len() * inner);
    let mut pos = Vec::with_capacity(outer * keep.len() * inner);
    for o in 0..outer {
        for (j, &k) in keep.iter().enumerate() {
            for i in 0..inner {
                src.push((o * len + k) * inner + i);
                pos.push((o * len + j) * inner + i);
            }
        }
    }
    // Kept slices go to the front of each outer block; the rest is zeros.
    Ok(T::new(x.dtype, x.shape.clone(), placed(x, &src, &pos, x.numel())))
}

/// Whether box `a` suppresses box `b` (IoU above the threshold), in f32 as the ONNX reference does.
fn suppresses(bx: &[f32], center: bool, iou: f32) -> bool {
    let (a, b) = (&bx[0..4], &bx[4..8]);
    let corners = |p: &[f32]| -> (f32, f32, f32, f32) {
        if center {
            let (hw, hh) = (p[2] / 2.0, p[3] / 2.0);
            (p[0] - hw, p[0] + hw, p[1] - hh, p[1] + hh)
        } else {
            (p[1].min(p[3]), p[1].max(p[3]), p[0].min(p[2]), p[0].max(p[2]))
        }
    };
    let (ax0, ax1, ay0, ay1) = corners(a);
    let (bx0, bx1, by0, by1) = corners(b);
    let (ix0, ix1) = (ax0.max(bx0), ax1.min(bx1));
    if ix1 <= ix0 {
        return false;
    }
    let (iy0, iy1) = (ay0.max(by0), ay1.min(by1));
    if iy1 <= iy0 {
        return false;
    }
    let inter = (ix1 - ix0) * (iy1 - iy0);
    if inter <= 0.0 {
        return false;
    }
    let (a1, a2) = ((ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0));
    let union = a1 + a2 - inter;
    if a1 <= 0.0 || a2 <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > iou
}

pub fn nms(boxes: &T, scores: &T, iou: &T, score_threshold: &T, center: bool, max_per_class: usize) -> Result<Vec<T>, String> {
    let (nb, nc, n) = (scores.shape[0], scores.shape[1], scores.shape[2]);
    let (iou, st) = (iou.data.f(0) as f32, score_threshold.data.f(0) as f32);
    let per = max_per_class.min(n);
    let bound = nb * nc * per;
    let mut out = vec![0i64; bound * 3];
    let mut k = 0;
    let bx = |b: usize, i: usize| -> [f32; 4] { std::array::from_fn(|c| boxes.data.f((b * n + i) * 4 + c) as f32) };
    for b in 0..nb {
        for c in 0..nc {
            let s = |i: usize| scores.data.f((b * nc + c) * n + i) as f32;
            // Candidates above the threshold, by descending score, ties by lower index (a stable sort).
            let mut cand: Vec<usize> = (0..n).filter(|&i| s(i) > st).collect();
            cand.sort_by(|&p, &q| s(q).partial_cmp(&s(p)).unwrap_or(Ordering::Equal));
            let mut kept: Vec<usize> = Vec::new();
            for i in cand {
                if kept.len() == per {
                    break;
                }
                let bi = bx(b, i);
                if kept.iter().all(|&j| {
                    let bj = bx(b, j);
                    !suppresses(&[bi, bj].concat(), center, iou)
                }) {
                    kept.push(i);
                    out[k * 3..k * 3 + 3].copy_from_slice(&[b as i64, c as i64, i as i64]);
                    k += 1;
                }
            }
        }
    }
    Ok(vec![T::new(DType::I64, vec![bound, 3], Buf::I(out)), T::new(DType::I64, vec![], Buf::I(vec![k as i64]))])
}

pub fn unique(x: &T, axis: Option<usize>, sorted: bool) -> Result<Vec<T>, String> {
    // Slices along the axis (single elements without one), compared lexicographically.
    let (shape, axis) = match axis {
        Some(a) => (x.shape.clone(), a),
        None => (vec![x.numel()], 0),
    };
    let (outer, len, inner) = (numel(&shape[..axis]), shape[axis], numel(&shape[axis + 1..]));
    let at = |s: usize, e: usize| -> usize { let (o, i) = (e / inner, e % inner); (o * len + s) * inner + i };
    let per = outer * inner;
    let cmp = |p: usize, q: usize| -> Ordering {
        (0..per).map(|e| elem_cmp(x, at(p, e), at(q, e))).find(|o| *o != Ordering::Equal).unwrap_or(Ordering::Equal)
    };
    // First occurrences in order, then (sorted) ascending.
    let mut firsts: Vec<usize> = Vec::new();
    let mut inverse = vec![0i64; len];
    let mut counts: Vec<i64> = Vec::new();
    for s in 0..len {
        match firsts.iter().position(|&f| cmp(f, s) == Ordering::Equal) {
            Some(u) => {
                inverse[s] = u as i64;
                counts[u] += 1;
            }
            None => {
                inverse[s] = firsts.len() as i64;
                firsts.push(s);
                counts.push(1);
            }
        }
    }
    let m = firsts.len();
    let mut order: Vec<usize> = (0..m).collect();
    if sorted {
        order.sort_by(|&a, &b| cmp(firsts[a], firsts[b]));
    }
    let mut rank = vec![0i64; m];
    for (r, &u) in order.iter().enumerate() {
        rank[u] = r as i64;
    }
    let inverse: Vec<i64> = inverse.iter().map(|&u| rank[u as usize]).collect();
    let mut src = Vec::with_capacity(outer * m * inner);
    let mut pos = Vec::with_capacity(outer * m * inner);
    for o in 0..outer {
        for (j, &u) in order.iter().enumerate() {
            for i in 0..inner {
                src.push((o * len + firsts[u]) * inner + i);
                pos.push((o * len + j) * inner + i);
            }
        }
    }
    let y = placed(x, &src, &pos, numel(&shape));
    let mut idx = vec![0i64; len];
    let mut cnt = vec![0i64; len];
    for (j, &u) in order.iter().enumerate() {
        idx[j] = firsts[u] as i64;
        cnt[j] = counts[u];
    }
    let v = |d: Vec<i64>| T::new(DType::I64, vec![len], Buf::I(d));
    Ok(vec![T::new(x.dtype, shape, y), v(idx), v(inverse), v(cnt)])
}
