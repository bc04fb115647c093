//! Indexing: gather, gather_elements, gather_nd, scatter_elements, scatter_nd.

use crate::tensor::{icmp, numel, strides, walk, wrap, Buf, T};
use rlx_ir::ScatterRed;
use std::cmp::Ordering;

/// Normalizes a possibly negative index against `n`, or reports it out of range.
fn norm(i: i64, n: usize, what: &str) -> Result<usize, String> {
    let j = if i < 0 { i + n as i64 } else { i };
    if j < 0 || j >= n as i64 {
        return Err(format!("{what} index {i} out of range for axis of size {n}"));
    }
    Ok(j as usize)
}

fn int_indices(t: &T) -> Result<Vec<i64>, String> {
    if !t.dtype.is_int() {
        return Err(format!("indices must be integers, got {}", t.dtype));
    }
    Ok(t.to_i64())
}

pub fn gather(x: &T, ind: &T, axis: usize) -> Result<T, String> {
    let r = x.shape.len();
    if axis >= r {
        return Err(format!("axis {axis} out of range for rank {r}"));
    }
    let idx = int_indices(ind)?;
    let outer: usize = x.shape[..axis].iter().product();
    let d = x.shape[axis];
    let inner: usize = x.shape[axis + 1..].iter().product();
    let norm_idx: Vec<usize> = idx.iter().map(|&i| norm(i, d, "gather")).collect::<Result<_, _>>()?;
    let mut src = Vec::with_capacity(outer * norm_idx.len() * inner);
    for o in 0..outer {
        for &j in &norm_idx {
            let b = (o * d + j) * inner;
            src.extend(b..b + inner);
        }
    }
    let mut shape = x.shape[..axis].to_vec();
    shape.extend_from_slice(&ind.shape);
    shape.extend_from_slice(&x.shape[axis + 1..]);
    Ok(T::new(x.dtype, shape, x.data.take(&src)))
}

/// Offsets into `x` for every element of `ind` (same rank), with `axis` replaced by the index value.
fn element_offsets(x: &T, ind: &T, axis: usize, what: &str) -> Result<Vec<usize>, String> {
    let r = x.shape.len();
    if axis >= r || ind.shape.len() != r {
        return Err(format!("{what}: indices of rank {} for data of rank {r}, axis {axis}", ind.shape.len()));
    }
    for d in 0..r {
        if d != axis && ind.shape[d] > x.shape[d] {
            return Err(format!("{what}: indices shape {:?} exceeds data shape {:?} on axis {d}", ind.shape, x.shape));
        }
    }
    let idx = int_indices(ind)?;
    let s = strides(&x.shape);
    let st: Vec<isize> = (0..r).map(|d| if d == axis { 0 } else { s[d] as isize }).collect();
    let base = walk(&ind.shape, &st, 0);
    base.iter()
        .zip(&idx)
        .map(|(&b, &i)| Ok(b + norm(i, x.shape[axis], what)? * s[axis]))
        .collect()
}

pub fn gather_elements(x: &T, ind: &T, axis: usize) -> Result<T, String> {
    let offs = element_offsets(x, ind, axis, "gather_elements")?;
    Ok(T::new(x.dtype, ind.shape.clone(), x.data.take(&offs)))
}

/// For ONNX GatherND/ScatterND: the start offset into `x` of each index tuple, and the size of the
/// slice each tuple addresses. `batch_dims` leading dims are shared by data and indices.
fn nd_offsets(x: &T, ind: &T, batch_dims: usize, what: &str) -> Result<(Vec<usize>, usize, Vec<usize>), String> {
    let (r, q) = (x.shape.len(), ind.shape.len());
    if q == 0 {
        return Err(format!("{what}: indices must have rank >= 1"));
    }
    let last = ind.shape[q - 1];
    if batch_dims >= q || batch_dims + last > r {
        return Err(format!("{what}: index depth {last} with batch_dims {batch_dims} exceeds data rank {r}"));
    }
    if ind.shape[..batch_dims] != x.shape[..batch_dims] {
        return Err(format!("{what}: batch dims of indices {:?} and data {:?} differ", ind.shape, x.shape));
    }
    let idx = int_indices(ind)?;
    let s = strides(&x.shape);
    let slice: usize = x.shape[batch_dims + last..].iter().product();
    let tuples = numel(&ind.shape[..q - 1]);
    let per_batch = numel(&ind.shape[batch_dims..q - 1]);
    let batch_stride = if batch_dims == 0 { 0 } else { s[batch_dims - 1] };
    let mut offs = Vec::with_capacity(tuples);
    for t in 0..tuples {
        let b = t.checked_div(per_batch).unwrap_or(0);
        let mut off = b * batch_stride;
        for j in 0..last {
            let ax = batch_dims + j;
            off += norm(idx[t * last + j], x.shape[ax], what)? * s[ax];
        }
        offs.push(off);
    }
    let mut out_shape = ind.shape[..q - 1].to_vec();
    out_shape.extend_from_slice(&x.shape[batch_dims + last..]);
    Ok((offs, slice, out_shape))
}

pub fn gather_nd(x: &T, ind: &T, batch_dims: usize) -> Result<T, String> {
    let (offs, slice, shape) = nd_offsets(x, ind, batch_dims, "gather_nd")?;
    let src: Vec<usize> = offs.iter().flat_map(|&o| o..o + slice).collect();
    Ok(T::new(x.dtype, shape, x.data.take(&src)))
}

/// Writes update element `u` into `out[o]` with the reduction.
fn scatter_into(out: &mut T, o: usize, upd: &T, u: usize, red: ScatterRed) {
    let dt = out.dtype;
    match (&mut out.data, &upd.data) {
        (Buf::I(v), Buf::I(w)) => {
            let (a, b) = (v[o], w[u]);
            v[o] = wrap(
                dt,
                match red {
                    ScatterRed::None => b,
                    ScatterRed::Add => a.wrapping_add(b),
                    ScatterRed::Mul => a.wrapping_mul(b),
                    ScatterRed::Max => {
                        if icmp(dt, b, a) == Ordering::Greater {
                            b
                        } else {
                            a
                        }
                    }
                    ScatterRed::Min => {
                        if icmp(dt, b, a) == Ordering::Less {
                            b
                        } else {
                            a
                        }
                    }
                },
            );
        }
        (data, w) => {
            let (a, b) = (data.f(o), w.f(u));
            let r = match red {
                ScatterRed::None => b,
                ScatterRed::Add => a + b,
                ScatterRed::Mul => a * b,
                ScatterRed::Max => a.max(b),
                ScatterRed::Min => a.min(b),
            };
            match data {
                Buf::F(v) => v[o] = crate::tensor::round_f(dt, r),
                Buf::D(v) => v[o] = r,
                Buf::I(_) => {}
            }
        }
    }
}

pub fn scatter_elements(x: &T, ind: &T, upd: &T, axis: usize, red: ScatterRed) -> Result<T, String> {
    if ind.shape != upd.shape || x.dtype != upd.dtype {
        return Err("indices and updates must have the same shape, updates the data's dtype".into());
    }
    let offs = element_offsets(x, ind, axis, "scatter_elements")?;
    let mut out = x.clone();
    for (u, &o) in offs.iter().enumerate() {
        scatter_into(&mut out, o, upd, u, red);
    }
    Ok(out)
}

pub fn scatter_nd(x: &T, ind: &T, upd: &T, red: ScatterRed) -> Result<T, String> {
    if x.dtype != upd.dtype {
        return Err("updates must have the data's dtype".into());
    }
    let (offs, slice, want) = nd_offsets(x, ind, 0, "scatter_nd")?;
    if upd.shape != want {
        return Err(format!("updates shape {:?}, expected {want:?}", upd.shape));
    }
    let mut out = x.clone();
    for (t, &o) in offs.iter().enumerate() {
        for e in 0..slice {
            scatter_into(&mut out, o + e, upd, t * slice + e, red);
        }
    }
    Ok(out)
}

/// `write_rows`: `cache` with row `positions[i]` replaced by `rows[i]`; positions outside the cache's
/// rows write nothing (padding rows); on repeats the later row wins.
pub fn write_rows(cache: &T, rows: &T, pos: &T) -> Result<T, String> {
    if cache.dtype != rows.dtype || cache.shape.is_empty() || rows.shape.len() != cache.shape.len() || rows.shape[1..] != cache.shape[1..] {
        return Err(format!("rows {}{:?} do not fit cache {}{:?}", rows.dtype, rows.shape, cache.dtype, cache.shape));
    }
    let n = rows.shape[0];
    if pos.shape != [n] {
        return Err(format!("positions {:?}, expected [{n}]", pos.shape));
    }
    let row = numel(&cache.shape[1..]);
    let mut out = cache.clone();
    for r in 0..n {
        let p = pos.data.i(r);
        if p < 0 || p as u64 >= cache.shape[0] as u64 {
            continue;
        }
        let dst: Vec<usize> = (p as usize * row..(p as usize + 1) * row).collect();
        let src: Vec<usize> = (r * row..(r + 1) * row).collect();
        let vals = rows.data.take(&src);
        match (&mut out.data, vals) {
            (Buf::F(o), Buf::F(v)) => dst.iter().zip(v).for_each(|(&d, x)| o[d] = x),
            (Buf::D(o), Buf::D(v)) => dst.iter().zip(v).for_each(|(&d, x)| o[d] = x),
            (Buf::I(o), Buf::I(v)) => dst.iter().zip(v).for_each(|(&d, x)| o[d] = x),
            _ => return Err("rows and cache are stored differently".into()),
        }
    }
    Ok(out)
}
