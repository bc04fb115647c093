//! The import-time constant evaluator: enough MIR to resolve shape arithmetic (torch-exported
//! Shape→Gather→Unsqueeze→Concat→Reshape chains) and small constant subgraphs. `None` means "not
//! folded here" — the node is then emitted as is, never an error.

use rlx_ir::mir::slice_range;
use rlx_ir::tensor::{encode_f64, encode_i64};
use rlx_ir::{broadcast_fixed, BinaryOp, Blob, ConstData, DType, MirOp, ReduceOp, UnaryOp};

fn strides(s: &[usize]) -> Vec<usize> {
    let mut st = vec![1; s.len()];
    for i in (0..s.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * s[i + 1];
    }
    st
}

/// For each element of `out`, the flat index into `inp` under numpy broadcasting.
fn bcast_map(out: &[usize], inp: &[usize]) -> Vec<usize> {
    let n: usize = out.iter().product();
    let r = out.len();
    let off = r - inp.len();
    let ist = strides(inp);
    let mut res = Vec::with_capacity(n);
    let mut idx = vec![0usize; r];
    for _ in 0..n {
        let mut f = 0;
        for k in 0..inp.len() {
            if inp[k] != 1 {
                f += idx[k + off] * ist[k];
            }
        }
        res.push(f);
        for k in (0..r).rev() {
            idx[k] += 1;
            if idx[k] < out[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    res
}

fn pick(c: &ConstData, map: &[usize], shape: Vec<usize>) -> Option<ConstData> {
    let sz = c.dtype.size()?;
    let b = c.data.bytes();
    let mut out = Vec::with_capacity(map.len() * sz);
    for &i in map {
        out.extend_from_slice(b.get(i * sz..i * sz + sz)?);
    }
    ConstData::new(c.dtype, shape, Blob::from_vec(out)).ok()
}

fn encode(dtype: DType, shape: Vec<usize>, v: Num) -> ConstData {
    let mut b = Vec::new();
    match v {
        Num::I(v) => v.iter().for_each(|&x| encode_i64(dtype, x, &mut b)),
        Num::F(v) => v.iter().for_each(|&x| encode_f64(dtype, x, &mut b)),
    }
    ConstData { dtype, shape, data: Blob::from_vec(b) }
}

enum Num {
    I(Vec<i64>),
    F(Vec<f64>),
}

fn is_i(d: DType) -> bool {
    d.is_int() || d == DType::Bool
}

pub fn eval(op: &MirOp, ins: &[&ConstData]) -> Option<Vec<ConstData>> {
    if ins.iter().any(|c| c.dtype.is_quantized_block() || c.dtype == DType::U64) {
        return None;
    }
    let x = ins[0];
    let one = |c: Option<ConstData>| c.map(|c| vec![c]);
    match op {
        MirOp::Reshape { shape } => {
            let s: Vec<usize> = shape.iter().map(|d| d.fixed().map(|n| n as usize)).collect::<Option<_>>()?;
            one(ConstData::new(x.dtype, s, x.data.clone()).ok())
        }
        MirOp::Bitcast { to } => one(ConstData::new(*to, x.shape.clone(), x.data.clone()).ok()),
        MirOp::Transpose { perm } => {
            let s = &x.shape;
            let out: Vec<usize> = perm.iter().map(|&p| s[p]).collect();
            let ist = strides(s);
            let n = x.numel();
            let mut map = Vec::with_capacity(n);
            let mut idx = vec![0usize; s.len()];
            for _ in 0..n {
                map.push(perm.iter().enumerate().map(|(i, &p)| idx[i] * ist[p]).sum());
                for k in (0..out.len()).rev() {
                    idx[k] += 1;
                    if idx[k] < out[k] {
                        break;
                    }
                    idx[k] = 0;
                }
            }
            one(pick(x, &map, out))
        }
        MirOp::Expand { shape } => {
            let s: Vec<usize> = shape.iter().map(|d| d.fixed().map(|n| n as usize)).collect::<Option<_>>()?;
            if s.iter().try_fold(1usize, |a, &d| a.checked_mul(d))? > super::FOLD_LIMIT {
                return None;
            }
            let map = bcast_map(&s, &x.shape);
            one(pick(x, &map, s))
        }
        MirOp::Slice { axes, starts, ends, steps } => {
            let s = &x.shape;
            let r = s.len();
            let mut st = vec![0i64; r];
            let mut cnt: Vec<i64> = s.iter().map(|&d| d as i64).collect();
            let mut stp = vec![1i64; r];
            for i in 0..axes.len() {
                let (a, c) = slice_range(s[axes[i]] as i64, starts[i], ends[i], steps[i]);
                st[axes[i]] = a;
                cnt[axes[i]] = c;
                stp[axes[i]] = steps[i];
            }
            let out: Vec<usize> = cnt.iter().map(|&c| c.max(0) as usize).collect();
            let ist = strides(s);
            let n: usize = out.iter().product();
            let mut map = Vec::with_capacity(n);
            let mut idx = vec![0usize; r];
            for _ in 0..n {
                map.push((0..r).map(|k| (st[k] + idx[k] as i64 * stp[k]) as usize * ist[k]).sum());
                for k in (0..r).rev() {
                    idx[k] += 1;
                    if idx[k] < out[k] {
                        break;
                    }
                    idx[k] = 0;
                }
            }
            one(pick(x, &map, out))
        }
        MirOp::Concat { axis } => {
            let outer: usize = x.shape[..*axis].iter().product();
            let mut out_shape = x.shape.clone();
            out_shape[*axis] = ins.iter().map(|c| c.shape[*axis]).sum();
            let sz = x.dtype.size()?;
            let mut b = Vec::new();
            for o in 0..outer {
                for c in ins {
                    let inner: usize = c.shape[*axis..].iter().product::<usize>() * sz;
                    b.extend_from_slice(c.data.bytes().get(o * inner..(o + 1) * inner)?);
                }
            }
            one(ConstData::new(x.dtype, out_shape, Blob::from_vec(b)).ok())
        }
        MirOp::Gather { axis } => {
            let idx = ins[1].to_i64_vec();
            let d = x.shape[*axis] as i64;
            let outer: usize = x.shape[..*axis].iter().product();
            let inner: usize = x.shape[axis + 1..].iter().product();
            let mut map = Vec::new();
            for o in 0..outer {
                for &i in &idx {
                    let i = if i < 0 { i + d } else { i };
                    if i < 0 || i >= d {
                        return None;
                    }
                    for k in 0..inner {
                        map.push((o * d as usize + i as usize) * inner + k);
                    }
                }
            }
            let mut s = x.shape[..*axis].to_vec();
            s.extend_from_slice(&ins[1].shape);
            s.extend_from_slice(&x.shape[axis + 1..]);
            one(pick(x, &map, s))
        }
        MirOp::Cast { to } => {
            if *to == DType::U64 || to.is_quantized_block() {
                return None;
            }
            let v = if is_i(x.dtype) {
                Num::I(x.to_i64_vec())
            } else if is_i(*to) && *to != DType::Bool {
                // float → int truncates toward zero; NaN/inf have no defined value: don't fold.
                let f = x.to_f64_vec();
                if f.iter().any(|v| !v.is_finite()) {
                    return None;
                }
                Num::I(f.iter().map(|&v| v as i64).collect())
            } else {
                Num::F(x.to_f64_vec())
            };
            one(Some(encode(*to, x.shape.clone(), v)))
        }
        MirOp::Where => {
            let out = broadcast_fixed(&broadcast_fixed(&x.shape, &ins[1].shape).ok()?, &ins[2].shape).ok()?;
            let (mc, ma, mb) = (bcast_map(&out, &x.shape), bcast_map(&out, &ins[1].shape), bcast_map(&out, &ins[2].shape));
            let sz = ins[1].dtype.size()?;
            let mut b = Vec::new();
            for i in 0..mc.len() {
                let (src, j) = if x.get_i64(mc[i]) != 0 { (ins[1], ma[i]) } else { (ins[2], mb[i]) };
                b.extend_from_slice(&src.data.bytes()[j * sz..j * sz + sz]);
            }
            one(ConstData::new(ins[1].dtype, out, Blob::from_vec(b)).ok())
        }
        MirOp::Unary(u) => {
            let n = x.numel();
            if is_i(x.dtype) {
                let v = x.to_i64_vec();
                let r: Vec<i64> = match u {
                    UnaryOp::Neg => v.iter().map(|a| a.wrapping_neg()).collect(),
                    UnaryOp::Abs => v.iter().map(|a| a.wrapping_abs()).collect(),
                    UnaryOp::Sign => v.iter().map(|a| a.signum()).collect(),
                    UnaryOp::Relu => v.iter().map(|&a| a.max(0)).collect(),
                    UnaryOp::Not => v.iter().map(|&a| (a == 0) as i64).collect(),
                    _ => return None,
                };
                one(Some(encode(x.dtype, x.shape.clone(), Num::I(r))))
            } else {
                let v = x.to_f64_vec();
                let f: fn(f64) -> f64 = match u {
                    UnaryOp::Neg => |a| -a,
                    UnaryOp::Abs => f64::abs,
                    UnaryOp::Sqrt => f64::sqrt,
                    UnaryOp::Floor => f64::floor,
                    UnaryOp::Ceil => f64::ceil,
                    UnaryOp::Recip => |a| 1.0 / a,
                    UnaryOp::Relu => |a| if a > 0.0 { a } else { 0.0 },
                    _ => return None,
                };
                let _ = n;
                one(Some(encode(x.dtype, x.shape.clone(), Num::F(v.into_iter().map(f).collect()))))
            }
        }
        MirOp::Binary(b) => {
            let y = ins[1];
            if x.dtype != y.dtype {
                return None;
            }
            let out = broadcast_fixed(&x.shape, &y.shape).ok()?;
            let (ma, mb) = (bcast_map(&out, &x.shape), bcast_map(&out, &y.shape));
            let odt = if b.is_compare() || b.is_logical() { DType::Bool } else { x.dtype };
            if is_i(x.dtype) {
                let (va, vb) = (x.to_i64_vec(), y.to_i64_vec());
                let mut r = Vec::with_capacity(ma.len());
                for i in 0..ma.len() {
                    let (a, c) = (va[ma[i]], vb[mb[i]]);
                    r.push(match b {
                        BinaryOp::Add => a.wrapping_add(c),
                        BinaryOp::Sub => a.wrapping_sub(c),
                        BinaryOp::Mul => a.wrapping_mul(c),
                        BinaryOp::Div => a.checked_div(c)?,
                        BinaryOp::Mod => a.checked_rem_euclid(c).map(|m| if m != 0 && c < 0 { m + c } else { m })?,
                        BinaryOp::Max => a.max(c),
                        BinaryOp::Min => a.min(c),
                        BinaryOp::Eq => (a == c) as i64,
                        BinaryOp::Lt => (a < c) as i64,
                        BinaryOp::Le => (a <= c) as i64,
                        BinaryOp::Gt => (a > c) as i64,
                        BinaryOp::Ge => (a >= c) as i64,
                        BinaryOp::And => ((a != 0) && (c != 0)) as i64,
                        BinaryOp::Or => ((a != 0) || (c != 0)) as i64,
                        BinaryOp::Xor => ((a != 0) != (c != 0)) as i64,
                        _ => return None,
                    });
                }
                one(Some(encode(odt, out, Num::I(r))))
            } else {
                let (va, vb) = (x.to_f64_vec(), y.to_f64_vec());
                let mut r = Vec::with_capacity(ma.len());
                for i in 0..ma.len() {
                    let (a, c) = (va[ma[i]], vb[mb[i]]);
                    r.push(match b {
                        BinaryOp::Add => a + c,
                        BinaryOp::Sub => a - c,
                        BinaryOp::Mul => a * c,
                        BinaryOp::Div => a / c,
                        BinaryOp::Max => a.max(c),
                        BinaryOp::Min => a.min(c),
                        BinaryOp::Eq => (a == c) as i64 as f64,
                        BinaryOp::Lt => (a < c) as i64 as f64,
                        BinaryOp::Le => (a <= c) as i64 as f64,
                        BinaryOp::Gt => (a > c) as i64 as f64,
                        BinaryOp::Ge => (a >= c) as i64 as f64,
                        _ => return None,
                    });
                }
                one(Some(encode(odt, out, Num::F(r))))
            }
        }
        MirOp::Reduce { op, axes, keepdims } if is_i(x.dtype) => {
            let s = &x.shape;
            let out_full: Vec<usize> = s.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
            let n_out: usize = out_full.iter().product();
            let ost = strides(&out_full);
            let v = x.to_i64_vec();
            let init = match op {
                ReduceOp::Sum | ReduceOp::Mean => 0i64,
                ReduceOp::Prod => 1,
                ReduceOp::Max => i64::MIN,
                ReduceOp::Min => i64::MAX,
            };
            let mut acc = vec![init; n_out];
            let mut cnt = vec![0i64; n_out];
            let mut idx = vec![0usize; s.len()];
            for &e in &v {
                let o: usize = (0..s.len()).map(|k| if axes.contains(&k) { 0 } else { idx[k] * ost[k] }).sum();
                acc[o] = match op {
                    ReduceOp::Sum | ReduceOp::Mean => acc[o].wrapping_add(e),
                    ReduceOp::Prod => acc[o].wrapping_mul(e),
                    ReduceOp::Max => acc[o].max(e),
                    ReduceOp::Min => acc[o].min(e),
                };
                cnt[o] += 1;
                for k in (0..s.len()).rev() {
                    idx[k] += 1;
                    if idx[k] < s[k] {
                        break;
                    }
                    idx[k] = 0;
                }
            }
            if matches!(op, ReduceOp::Mean) {
                return None;
            }
            let shape = if *keepdims { out_full } else { s.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, &d)| d).collect() };
            one(Some(encode(x.dtype, shape, Num::I(acc))))
        }
        _ => None,
    }
}
