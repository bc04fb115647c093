//! Data movement: reshape, transpose, expand, slice, concat, pad.

use crate::tensor::{bcast_strides, map_buf, numel, round_f, strides, walk, f64_to_int, Buf, T};
use rlx_ir::mir::slice_range;
use rlx_ir::{broadcast_fixed, DType, PadMode};

pub fn reshape(x: &T, shape: &[usize]) -> Result<T, String> {
    if numel(shape) != x.numel() {
        return Err(format!("cannot reshape {:?} ({} elements) to {shape:?} ({} elements)", x.shape, x.numel(), numel(shape)));
    }
    Ok(T::new(x.dtype, shape.to_vec(), x.data.clone()))
}

/// The bytes of `x` read as `to` (same width: the type rule checked it).
pub fn bitcast(x: &T, to: DType) -> Result<T, String> {
    let c = x.to_const();
    T::from_const(&rlx_ir::ConstData { dtype: to, shape: c.shape, data: c.data })
}

pub fn transpose(x: &T, perm: &[usize]) -> Result<T, String> {
    let r = x.shape.len();
    let mut seen = vec![false; r];
    if perm.len() != r || perm.iter().any(|&p| p >= r || std::mem::replace(&mut seen[p], true)) {
        return Err(format!("perm {perm:?} is not a permutation of rank {r}"));
    }
    let s = strides(&x.shape);
    let out: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let st: Vec<isize> = perm.iter().map(|&p| s[p] as isize).collect();
    Ok(T::new(x.dtype, out.clone(), x.data.take(&walk(&out, &st, 0))))
}

pub fn expand(x: &T, shape: &[usize]) -> Result<T, String> {
    let b = broadcast_fixed(&x.shape, shape)?;
    if b != shape {
        return Err(format!("{:?} does not broadcast to exactly {shape:?}", x.shape));
    }
    Ok(T::new(x.dtype, shape.to_vec(), x.data.take(&walk(shape, &bcast_strides(&x.shape, shape), 0))))
}

pub fn slice(x: &T, axes: &[usize], starts: &[i64], ends: &[i64], steps: &[i64]) -> Result<T, String> {
    let r = x.shape.len();
    let n = axes.len();
    if starts.len() != n || ends.len() != n || steps.len() != n {
        return Err("axes/starts/ends/steps lengths differ".into());
    }
    let s = strides(&x.shape);
    let mut out = x.shape.clone();
    let mut st: Vec<isize> = s.iter().map(|&v| v as isize).collect();
    let mut base: isize = 0;
    for i in 0..n {
        let a = axes[i];
        if a >= r {
            return Err(format!("axis {a} out of range for rank {r}"));
        }
        if steps[i] == 0 {
            return Err("slice step 0".into());
        }
        let (start, cnt) = slice_range(x.shape[a] as i64, starts[i], ends[i], steps[i]);
        out[a] = cnt as usize;
        if cnt > 0 {
            base += start as isize * s[a] as isize;
        }
        st[a] = steps[i] as isize * s[a] as isize;
    }
    let idx = if numel(&out) == 0 { Vec::new() } else { walk(&out, &st, base) };
    Ok(T::new(x.dtype, out, x.data.take(&idx)))
}

pub fn concat(ins: &[&T], axis: usize) -> Result<T, String> {
    let x = ins[0];
    let r = x.shape.len();
    if axis >= r {
        return Err(format!("axis {axis} out of range for rank {r}"));
    }
    let mut out = x.shape.clone();
    out[axis] = 0;
    for t in ins {
        if t.dtype != x.dtype || t.shape.len() != r || (0..r).any(|d| d != axis && t.shape[d] != x.shape[d]) {
            return Err(format!("cannot concatenate {}{:?} with {}{:?} on axis {axis}", x.dtype, x.shape, t.dtype, t.shape));
        }
        out[axis] += t.shape[axis];
    }
    let outer: usize = x.shape[..axis].iter().product();
    let inner: usize = x.shape[axis + 1..].iter().product();
    // Source (input, element) pairs in output order, then one gather per storage type.
    let mut data = map_buf!(&x.data, _v => Vec::with_capacity(numel(&out)));
    for o in 0..outer {
        for t in ins {
            let chunk = t.shape[axis] * inner;
            let range = o * chunk..(o + 1) * chunk;
            match (&mut data, &t.data) {
                (Buf::F(d), Buf::F(s)) => d.extend_from_slice(&s[range]),
                (Buf::D(d), Buf::D(s)) => d.extend_from_slice(&s[range]),
                (Buf::I(d), Buf::I(s)) => d.extend_from_slice(&s[range]),
                _ => return Err("operand storage differs".into()),
            }
        }
    }
    Ok(T::new(x.dtype, out, data))
}

/// Source coordinate for output coordinate `o` on one axis, or `None` for the constant fill.
fn pad_src(o: i64, begin: i64, n: i64, mode: PadMode) -> Option<usize> {
    let i = o - begin;
    if (0..n).contains(&i) {
        return Some(i as usize);
    }
    if n == 0 {
        return None;
    }
    match mode {
        PadMode::Constant => None,
        PadMode::Edge => Some(i.clamp(0, n - 1) as usize),
        PadMode::Wrap => Some(i.rem_euclid(n) as usize),
        PadMode::Reflect => {
            if n == 1 {
                return Some(0);
            }
            let p = 2 * (n - 1);
            let m = i.rem_euclid(p);
            Some(if m < n { m } else { p - m } as usize)
        }
    }
}

pub fn pad(x: &T, pads: &[i64], mode: PadMode, value: f64) -> Result<T, String> {
    let r = x.shape.len();
    if pads.len() != 2 * r {
        return Err(format!("{} pads for rank {r}", pads.len()));
    }
    let mut out = Vec::with_capacity(r);
    for d in 0..r {
        let n = x.shape[d] as i64 + pads[d] + pads[d + r];
        if n < 0 {
            return Err(format!("negative output size on axis {d}"));
        }
        if n > 0 && x.shape[d] == 0 && mode != PadMode::Constant {
            return Err(format!("{} padding of an empty axis {d}", mode.name()));
        }
        out.push(n as usize);
    }
    // Per-axis tables: output coordinate -> input coordinate (or fill).
    let tables: Vec<Vec<Option<usize>>> =
        (0..r).map(|d| (0..out[d] as i64).map(|o| pad_src(o, pads[d], x.shape[d] as i64, mode)).collect()).collect();
    let s = strides(&x.shape);
    let total = numel(&out);
    let mut src: Vec<Option<usize>> = Vec::with_capacity(total);
    if total > 0 {
        let mut idx = vec![0usize; r];
        loop {
            let mut off = Some(0usize);
            for d in 0..r {
                off = match (off, tables[d][idx[d]]) {
                    (Some(a), Some(i)) => Some(a + i * s[d]),
                    _ => None,
                };
            }
            src.push(off);
            if !crate::tensor::next_index(&mut idx, &out) {
                break;
            }
        }
    }
    let data = match &x.data {
        Buf::F(v) => {
            let fill = round_f(x.dtype, value);
            Buf::F(src.iter().map(|s| s.map_or(fill, |i| v[i])).collect())
        }
        Buf::D(v) => Buf::D(src.iter().map(|s| s.map_or(value, |i| v[i])).collect()),
        Buf::I(v) => {
            let fill = if x.dtype == DType::Bool { (value != 0.0) as i64 } else { f64_to_int(x.dtype, value) };
            Buf::I(src.iter().map(|s| s.map_or(fill, |i| v[i])).collect())
        }
    };
    Ok(T::new(x.dtype, out, data))
}
