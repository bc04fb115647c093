//! Reductions along axes: reduce_*, argmax/argmin, cumsum, topk.

use crate::tensor::{icmp, strides, walk, wrap, Buf, T};
use rlx_ir::{ArgOp, DType, ReduceOp};
use std::cmp::Ordering;

pub fn reduce(op: ReduceOp, x: &T, axes: &[usize], keepdims: bool) -> Result<T, String> {
    let r = x.shape.len();
    let mut prev = None;
    for &a in axes {
        if a >= r || prev.is_some_and(|p| p >= a) {
            return Err(format!("axes {axes:?} must be sorted, unique and < rank {r}"));
        }
        prev = Some(a);
    }
    if axes.is_empty() {
        return Ok(x.clone());
    }
    let kept: Vec<usize> = (0..r).map(|d| if axes.contains(&d) { 1 } else { x.shape[d] }).collect();
    let out_shape: Vec<usize> = if keepdims {
        kept.clone()
    } else {
        (0..r).filter(|d| !axes.contains(d)).map(|d| x.shape[d]).collect()
    };
    let ks = strides(&kept);
    let ost: Vec<isize> = (0..r).map(|d| if axes.contains(&d) { 0 } else { ks[d] as isize }).collect();
    let omap = walk(&x.shape, &ost, 0);
    let n_out: usize = kept.iter().product();
    let count: usize = axes.iter().map(|&a| x.shape[a]).product();
    let dt = x.dtype;
    if dt.is_float() {
        let init = match op {
            ReduceOp::Sum | ReduceOp::Mean => 0.0,
            ReduceOp::Prod => 1.0,
            ReduceOp::Max => f64::NEG_INFINITY,
            ReduceOp::Min => f64::INFINITY,
        };
        let mut acc = vec![init; n_out];
        for (i, &o) in omap.iter().enumerate() {
            let v = x.data.f(i);
            let a = &mut acc[o];
            match op {
                ReduceOp::Sum | ReduceOp::Mean => *a += v,
                ReduceOp::Prod => *a *= v,
                ReduceOp::Max => {
                    if !a.is_nan() && (v.is_nan() || v > *a) {
                        *a = v
                    }
                }
                ReduceOp::Min => {
                    if !a.is_nan() && (v.is_nan() || v < *a) {
                        *a = v
                    }
                }
            }
        }
        if op == ReduceOp::Mean {
            acc.iter_mut().for_each(|a| *a /= count as f64);
        }
        return Ok(T::from_f64_fn(dt, out_shape, |i| acc[i]));
    }
    let Buf::I(v) = &x.data else { return Err("integer storage expected".into()) };
    if dt == DType::Bool && matches!(op, ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Mean) {
        return Err(format!("reduce_{} on bool", op.name()));
    }
    let (lo, hi) = int_range(dt);
    let init = match op {
        ReduceOp::Sum | ReduceOp::Mean => 0,
        ReduceOp::Prod => 1,
        ReduceOp::Max => lo,
        ReduceOp::Min => hi,
    };
    let mut acc = vec![init; n_out];
    for (i, &o) in omap.iter().enumerate() {
        let a = &mut acc[o];
        match op {
            ReduceOp::Sum | ReduceOp::Mean => *a = a.wrapping_add(v[i]),
            ReduceOp::Prod => *a = a.wrapping_mul(v[i]),
            ReduceOp::Max => {
                if icmp(dt, v[i], *a) == Ordering::Greater {
                    *a = v[i]
                }
            }
            ReduceOp::Min => {
                if icmp(dt, v[i], *a) == Ordering::Less {
                    *a = v[i]
                }
            }
        }
    }
    if op == ReduceOp::Mean {
        if count == 0 {
            return Err("reduce_mean of an empty integer axis".into());
        }
        for a in acc.iter_mut() {
            *a = if dt == DType::U64 { ((*a as u64) / count as u64) as i64 } else { *a / count as i64 };
        }
    }
    Ok(T::from_i64_fn(dt, out_shape, |i| acc[i]))
}

/// The smallest and largest stored values of an integer dtype (u64's max is its bit pattern, -1).
fn int_range(dt: DType) -> (i64, i64) {
    match dt {
        DType::U64 => (0, -1),
        _ => dt.int_range().unwrap_or((i64::MIN, i64::MAX)),
    }
}

/// Splits a shape around `axis` into (outer, axis size, inner).
fn around(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product())
}

/// Total order used by argmax/argmin/topk on floats: NaN above every number; -0 == +0.
fn fcmp(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).unwrap(),
    }
}

pub(crate) fn elem_cmp(x: &T, i: usize, j: usize) -> Ordering {
    match &x.data {
        Buf::I(v) => icmp(x.dtype, v[i], v[j]),
        d => fcmp(d.f(i), d.f(j)),
    }
}

pub fn arg_reduce(op: ArgOp, x: &T, axis: usize, keepdims: bool, select_last: bool) -> Result<T, String> {
    if axis >= x.shape.len() {
        return Err(format!("axis {axis} out of range for rank {}", x.shape.len()));
    }
    let (outer, d, inner) = around(&x.shape, axis);
    if d == 0 && outer * inner > 0 {
        return Err(format!("{} over an empty axis", op.name()));
    }
    // Which ordering makes a candidate "better" than the current best.
    let want = if op == ArgOp::ArgMax { Ordering::Greater } else { Ordering::Less };
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let base = o * d * inner + i;
            let mut best = 0usize;
            for j in 1..d {
                let c = elem_cmp(x, base + j * inner, base + best * inner);
                // NaN always wins (it is the max for argmax and, as in numpy, also picked by argmin).
                let nan_j = x.is_float() && x.data.f(base + j * inner).is_nan();
                let nan_b = x.is_float() && x.data.f(base + best * inner).is_nan();
                let better = if nan_b {
                    select_last && nan_j
                } else if nan_j {
                    true
                } else {
                    c == want || (select_last && c == Ordering::Equal)
                };
                if better {
                    best = j;
                }
            }
            out.push(best as i64);
        }
    }
    let mut shape = x.shape.clone();
    if keepdims {
        shape[axis] = 1;
    } else {
        shape.remove(axis);
    }
    Ok(T::new(DType::I64, shape, Buf::I(out)))
}

pub fn cumsum(x: &T, axis: usize, exclusive: bool, reverse: bool) -> Result<T, String> {
    if axis >= x.shape.len() {
        return Err(format!("axis {axis} out of range for rank {}", x.shape.len()));
    }
    let (outer, d, inner) = around(&x.shape, axis);
    let n = x.numel();
    let order = |j: usize| if reverse { d - 1 - j } else { j };
    let dt = x.dtype;
    if dt.is_float() {
        let mut vals = vec![0.0f64; n];
        for o in 0..outer {
            for i in 0..inner {
                let mut acc = 0.0f64;
                for j in 0..d {
                    let p = (o * d + order(j)) * inner + i;
                    let v = x.data.f(p);
                    if exclusive {
                        vals[p] = acc;
                        acc += v;
                    } else {
                        acc += v;
                        vals[p] = acc;
                    }
                }
            }
        }
        return Ok(T::from_f64_fn(dt, x.shape.clone(), |i| vals[i]));
    }
    let Buf::I(v) = &x.data else { return Err("integer storage expected".into()) };
    let mut vals = vec![0i64; n];
    for o in 0..outer {
        for i in 0..inner {
            let mut acc = 0i64;
            for j in 0..d {
                let p = (o * d + order(j)) * inner + i;
                if exclusive {
                    vals[p] = acc;
                    acc = acc.wrapping_add(v[p]);
                } else {
                    acc = acc.wrapping_add(v[p]);
                    vals[p] = acc;
                }
            }
        }
    }
    Ok(T::new(dt, x.shape.clone(), Buf::I(vals.into_iter().map(|a| wrap(dt, a)).collect())))
}

pub fn topk(x: &T, axis: usize, k: usize, largest: bool) -> Result<Vec<T>, String> {
    if axis >= x.shape.len() {
        return Err(format!("axis {axis} out of range for rank {}", x.shape.len()));
    }
    let (outer, d, inner) = around(&x.shape, axis);
    if k > d {
        return Err(format!("k={k} exceeds axis size {d}"));
    }
    let mut src = Vec::with_capacity(outer * k * inner);
    let mut idx = vec![0i64; outer * k * inner];
    let mut lane: Vec<usize> = Vec::with_capacity(d);
    for o in 0..outer {
        for i in 0..inner {
            let base = o * d * inner + i;
            lane.clear();
            lane.extend(0..d);
            // Stable sort: ties keep the lower index first.
            lane.sort_by(|&p, &q| {
                let c = elem_cmp(x, base + p * inner, base + q * inner);
                if largest {
                    c.reverse()
                } else {
                    c
                }
            });
            for (j, &p) in lane[..k].iter().enumerate() {
                idx[(o * k + j) * inner + i] = p as i64;
            }
        }
    }
    for o in 0..outer {
        for j in 0..k {
            for i in 0..inner {
                let p = idx[(o * k + j) * inner + i] as usize;
                src.push(o * d * inner + p * inner + i);
            }
        }
    }
    let mut shape = x.shape.clone();
    shape[axis] = k;
    Ok(vec![T::new(x.dtype, shape.clone(), x.data.take(&src)), T::new(DType::I64, shape, Buf::I(idx))])
}
