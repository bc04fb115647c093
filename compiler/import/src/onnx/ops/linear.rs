//! Matrix products: MatMul, Gemm (a `linear` block when it is one), Einsum, ONNX Attention, and Det
//! (the Leibniz sum over permutations, for matrices up to 5×5).

use super::{one, Node, R};
use crate::onnx::{dtype_from_onnx, Attrs, Ctx};
use rlx_ir::{BinaryOp, ConstData, DType, Dim, HirOp, MirOp, PadMode, ReduceOp, UnaryOp, ValueId};

/// The ONNX op types this family translates.
pub(super) const OPS: &[&str] = &[
    "Attention", "Det", "Einsum", "Gemm", "MatMul",
];

/// Det of [..., n, n], n ≤ 5: Σ over permutations σ of sign(σ)·Π x[i, σ(i)] (exact structure, no pivoting).
fn det(cx: &mut Ctx, x: ValueId) -> Result<ValueId, String> {
    let d = cx.fixed_dims(x, "Det input")?;
    let r = d.len();
    if r < 2 || d[r - 1] != d[r - 2] {
        return Err(format!("Det: input {d:?} must be [..., n, n]"));
    }
    let n = d[r - 1];
    if n == 0 || n > 5 {
        return Err(format!("unsupported: Det of {n}×{n} matrices (rlxc expands 1×1 to 5×5)"));
    }
    if !cx.dtype(x).is_float() {
        return Err(format!("Det of {} is not supported", cx.dtype(x)));
    }
    let mut flat: Vec<usize> = d[..r - 2].to_vec();
    flat.push(n * n);
    let xf = cx.reshape_u(x, &flat)?;
    let ax = flat.len() - 1;
    let el: Vec<ValueId> = (0..n * n).map(|k| cx.slice_axis(xf, ax, k, k + 1)).collect::<Result<_, _>>()?;
    let mut perm: Vec<usize> = (0..n).collect();
    let mut acc: Option<ValueId> = None;
    loop {
        let inversions = (0..n).flat_map(|i| (i + 1..n).map(move |j| (i, j))).filter(|&(i, j)| perm[i] > perm[j]).count();
        let mut t = el[perm[0]];
        for (i, &p) in perm.iter().enumerate().skip(1) {
            t = cx.bin(BinaryOp::Mul, t, el[i * n + p])?;
        }
        acc = Some(match (acc, inversions % 2 == 1) {
            (None, false) => t,
            (None, true) => cx.un(UnaryOp::Neg, t)?,
            (Some(a), false) => cx.bin(BinaryOp::Add, a, t)?,
            (Some(a), true) => cx.bin(BinaryOp::Sub, a, t)?,
        });
        // Next permutation in lexicographic order.
        let Some(i) = (0..n.saturating_sub(1)).rev().find(|&i| perm[i] < perm[i + 1]) else { break };
        let j = (i + 1..n).rev().find(|&j| perm[j] > perm[i]).unwrap_or(i + 1);
        perm.swap(i, j);
        perm[i + 1..].reverse();
    }
    let out = d[..r - 2].to_vec();
    match acc {
        Some(a) => cx.reshape_u(a, &out),
        None => Err("Det of a 0×0 matrix".into()),
    }
}

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    let (a, op, ins, nout) = (&nd.a, nd.op, nd.ins, nd.nout);
    let inp = |i: usize| nd.inp(i);
    let req = |i: usize| nd.req(i);
    match op {
        "MatMul" => one(cx.prim(MirOp::MatMul, &[req(0)?, req(1)?])?),
        "Det" => one(det(cx, req(0)?)?),
        "Gemm" => {
            let (mut x, mut w) = (req(0)?, req(1)?);
            let (ta, tb) = (a.i("transA", 0) != 0, a.i("transB", 0) != 0);
            let (alpha, beta) = (a.f("alpha", 1.0), a.f("beta", 1.0));
            let c = inp(2);
            // A Linear block when it is one: x[M,K]·W (+ bias[N]).
            if !ta && alpha == 1.0 && cx.dtype(x).is_float() && (c.is_none() || (beta == 1.0 && cx.rank(c.unwrap()) == 1)) {
                let mut li = vec![x, w];
                li.extend(c);
                if let Ok(v) = cx.hir(HirOp::Linear { transpose_w: tb }, &li) {
                    return one(v);
                }
            }
            if ta {
                x = cx.transpose(x, vec![1, 0])?;
            }
            if tb {
                w = cx.transpose(w, vec![1, 0])?;
            }
            let mut y = cx.prim(MirOp::MatMul, &[x, w])?;
            if alpha != 1.0 {
                y = cx.mul_sc(y, alpha)?;
            }
            if let Some(mut c) = c {
                if beta != 1.0 {
                    c = cx.mul_sc(c, beta)?;
                }
                y = cx.bin(BinaryOp::Add, y, c)?;
            }
            one(y)
        }
        "Attention" => attention(cx, &a, ins, nout),
        "Einsum" => einsum(cx, &a.s("equation").unwrap_or_default(), &ins.iter().flatten().copied().collect::<Vec<_>>()),
        _ => Err(format!("unsupported op {op}")),
    }
}

/// Einsum as transpose/reshape + broadcast multiply + sum: every operand is laid out over all the
/// equation's letters (missing ones as size-1 dims), multiplied, and summed over the letters not in
/// the output. Repeated letters within one operand (diagonals) are not supported.
fn einsum(cx: &mut Ctx, eq: &str, ins: &[ValueId]) -> R {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ins.len() {
        return Err(format!("einsum '{eq}' names {} operands, got {}", terms.len(), ins.len()));
    }
    // Expand '...' into upper-case placeholder letters: the dims an operand's rank has beyond its
    // term's letters.
    let mut ell_ranks = Vec::with_capacity(terms.len());
    for (t, &v) in terms.iter().zip(ins) {
        let letters = t.chars().count();
        ell_ranks.push(match t.contains("...") {
            true => cx.rank(v).checked_sub(letters - 3).ok_or_else(|| format!("einsum term '{t}' has more letters than its operand's rank {}", cx.rank(v)))?,
            false => 0,
        });
    }
    let ell_rank = ell_ranks.iter().copied().max().unwrap_or(0);
    if ell_rank > 26 {
        return Err(format!("einsum '{eq}': '...' stands for {ell_rank} dims, more than the 26 supported"));
    }
    let ell: String = (0..ell_rank).map(|i| (b'A' + i as u8) as char).collect();
    let mut subs: Vec<Vec<char>> = Vec::new();
    for ((t, &v), &k) in terms.iter().zip(ins).zip(&ell_ranks) {
        let s = if t.contains("...") {
            t.replace("...", &ell[ell_rank - k..])
        } else {
            t.to_string()
        };
        let cs: Vec<char> = s.chars().collect();
        if cs.len() != cx.rank(v) {
            return Err(format!("einsum term '{t}' does not match rank {}", cx.rank(v)));
        }
        let mut u = cs.clone();
        u.sort();
        u.dedup();
        if u.len() != cs.len() {
            return Err("unsupported: einsum with a repeated index in one operand".into());
        }
        subs.push(cs);
    }
    let out: Vec<char> = match rhs {
        Some(r) => r.replace("...", &ell).chars().collect(),
        None => {
            let mut cnt = std::collections::BTreeMap::new();
            for s in &subs {
                for &c in s {
                    *cnt.entry(c).or_insert(0) += 1;
                }
            }
            let mut o: Vec<char> = ell.chars().collect();
            o.extend(cnt.iter().filter(|(c, &n)| n == 1 && c.is_ascii_lowercase()).map(|(c, _)| *c));
            o
        }
    };
    let mut all: Vec<char> = out.clone();
    for s in &subs {
        for &c in s {
            if !all.contains(&c) {
                all.push(c);
            }
        }
    }
    let mut acc: Option<ValueId> = None;
    for (s, &v) in subs.iter().zip(ins) {
        let d = cx.dims(v);
        let mut present: Vec<char> = all.iter().filter(|c| s.contains(c)).copied().collect();
        let perm: Vec<usize> = present.iter().map(|c| s.iter().position(|x| x == c).unwrap()).collect();
        let t = cx.transpose(v, perm.clone())?;
        let shape: Vec<Dim> = all.iter().map(|c| match s.iter().position(|x| x == c) {
            Some(p) => d[p].clone(),
            None => Dim::Fixed(1),
        }).collect();
        present.clear();
        let t = cx.reshape(t, shape)?;
        acc = Some(match acc {
            None => t,
            Some(a) => cx.bin(BinaryOp::Mul, a, t)?,
        });
    }
    let acc = acc.ok_or("einsum without operands")?;
    let red: Vec<usize> = (out.len()..all.len()).collect();
    let y = if red.is_empty() { acc } else { cx.reduce(ReduceOp::Sum, acc, red, false)? };
    Ok(vec![y])
}

fn neg_inf_where(cx: &mut Ctx, allowed: ValueId, dt: DType) -> Result<ValueId, String> {
    let z = cx.scalar(dt, 0.0);
    let ni = cx.scalar(dt, f64::NEG_INFINITY);
    cx.prim(MirOp::Where, &[allowed, z, ni])
}

/// ONNX Attention (opset 23+), following the reference: 3-D inputs split into heads, past K/V
/// concatenated, causal / sliding-window / padding biases, GQA head repetition, softcap, and the
/// fully-masked-row guard.
fn attention(cx: &mut Ctx, a: &Attrs, ins: &[Option<ValueId>], nout: usize) -> R {
    let inp = |i: usize| ins.get(i).copied().flatten();
    let (mut q, mut k, mut v) = (inp(0).ok_or("Q required")?, inp(1).ok_or("K required")?, inp(2).ok_or("V required")?);
    let dt = cx.dtype(q);
    let three = cx.rank(q) == 3;
    // Q's rank decides the layout: 3-D [batch, seq, heads·dim] or 4-D [batch, heads, seq, dim]; K
    // and V must share it (the head split below indexes their dims).
    let want = if three { 3 } else { 4 };
    for (t, name) in [(q, "Q"), (k, "K"), (v, "V")] {
        if cx.rank(t) != want {
            return Err(format!("Attention: {name} has rank {}, expected {want} (3-D or 4-D inputs, as Q's rank {})", cx.rank(t), cx.rank(q)));
        }
    }
    if three {
        let (qh, kvh) = (a.i("q_num_heads", 0), a.i("kv_num_heads", 0));
        if qh <= 0 || kvh <= 0 {
            return Err("3-D Attention needs q_num_heads and kv_num_heads".into());
        }
        for (t, h) in [(&mut q, qh), (&mut k, kvh), (&mut v, kvh)] {
            let d = cx.fixed_dims(*t, "Attention")?;
            let x = cx.reshape_u(*t, &[d[0], d[1], h as usize, d[2] / h as usize])?;
            *t = cx.transpose(x, vec![0, 2, 1, 3])?;
        }
    }
    let past_len = match inp(4) {
        Some(pk) => {
            let l = *cx.fixed_dims(pk, "past_key")?.get(2).ok_or("Attention: past_key must be 4-D")?;
            k = cx.prim(MirOp::Concat { axis: 2 }, &[pk, k])?;
            l
        }
        None => 0,
    };
    if let Some(pv) = inp(5) {
        v = cx.prim(MirOp::Concat { axis: 2 }, &[pv, v])?;
    }
    let (present_k, present_v) = (k, v);
    let qd = cx.fixed_dims(q, "Attention Q")?;
    let kd = cx.fixed_dims(k, "Attention K")?;
    let (batch, qh, qs, hd) = (qd[0], qd[1], qd[2], qd[3]);
    let (kvh, kvs) = (kd[1], kd[2]);
    let nonpad = inp(6);
    let mut bias: Option<ValueId>;
    let mut mask = inp(3);
    if let Some(m) = mask {
        let md = cx.fixed_dims(m, "attn_mask")?;
        let last = *md.last().ok_or("attn_mask must have rank >= 1")?;
        if last < kvs {
            let r = md.len();
            let mut pads = vec![0i64; 2 * r];
            pads[2 * r - 1] = (kvs - last) as i64;
            let val = if cx.dtype(m) == DType::Bool { 0.0 } else { f64::NEG_INFINITY };
            mask = Some(cx.prim(MirOp::Pad { pads, mode: PadMode::Constant, value: val }, &[m])?);
        }
    }
    let mask = match mask {
        Some(m) if cx.dtype(m) == DType::Bool => Some(neg_inf_where(cx, m, dt)?),
        Some(m) => Some(cx.cast(m, dt)?),
        None => None,
    };
    let causal = a.i("is_causal", 0) != 0;
    let (lw, rw) = (a.i("left_window_size", -1), a.i("right_window_size", -1));
    // diff[i,j] = i + offset - j for a static offset.
    let static_diff = |off: i64| -> Vec<i64> {
        let mut d = Vec::with_capacity(qs * kvs);
        for i in 0..qs as i64 {
            for j in 0..kvs as i64 {
                d.push(i + off - j);
            }
        }
        d
    };
    if causal {
        let allowed = match nonpad.filter(|_| past_len == 0) {
            Some(np) => {
                // j <= i + nonpad[b] - qs  <=>  j - i + qs <= nonpad[b]
                let d: Vec<i64> = static_diff(0).iter().map(|x| -x + qs as i64).collect();
                let dc = cx.konst(ConstData::from_i64(vec![1, 1, qs, kvs], &d));
                let np = cx.cast(np, DType::I64)?;
                let np = cx.reshape_u(np, &[batch, 1, 1, 1])?;
                cx.bin(BinaryOp::Le, dc, np)?
            }
            None => {
                let d: Vec<f64> = static_diff(past_len as i64).iter().map(|&x| (x >= 0) as i64 as f64).collect();
                cx.konst(ConstData::from_f64s(DType::Bool, vec![qs, kvs], &d))
            }
        };
        let c = neg_inf_where(cx, allowed, dt)?;
        bias = Some(match mask {
            Some(m) => cx.bin(BinaryOp::Add, m, c)?,
            None => c,
        });
    } else {
        bias = mask;
    }
    if lw >= 0 || rw >= 0 {
        if nonpad.is_some() && past_len == 0 {
            return Err("unsupported: Attention sliding window with nonpad_kv_seqlen".into());
        }
        let d: Vec<f64> = static_diff(past_len as i64)
            .iter()
            .map(|&x| ((lw < 0 || x <= lw) && (rw < 0 || -x <= rw)) as i64 as f64)
            .collect();
        let al = cx.konst(ConstData::from_f64s(DType::Bool, vec![qs, kvs], &d));
        let w = neg_inf_where(cx, al, dt)?;
        bias = Some(match bias {
            Some(b) => cx.bin(BinaryOp::Add, b, w)?,
            None => w,
        });
    }
    if let Some(np) = nonpad {
        let ids: Vec<i64> = (0..kvs as i64).collect();
        let r = cx.konst(ConstData::from_i64(vec![1, kvs], &ids));
        let np = cx.cast(np, DType::I64)?;
        let np = cx.reshape_u(np, &[batch, 1])?;
        let lt = cx.bin(BinaryOp::Lt, r, np)?;
        let lt = cx.reshape_u(lt, &[batch, 1, 1, kvs])?;
        let pm = neg_inf_where(cx, lt, dt)?;
        bias = Some(match bias {
            Some(b) => cx.bin(BinaryOp::Add, b, pm)?,
            None => pm,
        });
    }
    if qh != kvh {
        if kvh == 0 || qh % kvh != 0 {
            return Err(format!("{qh} query heads are not a multiple of {kvh} kv heads"));
        }
        let rep = qh / kvh;
        for t in [&mut k, &mut v] {
            let d = cx.fixed_dims(*t, "Attention")?;
            let x = cx.reshape_u(*t, &[d[0], d[1], 1, d[2], d[3]])?;
            let x = cx.prim(MirOp::Expand { shape: [d[0], d[1], rep, d[2], d[3]].iter().map(|&n| Dim::Fixed(n as u64)).collect() }, &[x])?;
            *t = cx.reshape_u(x, &[d[0], qh, d[2], d[3]])?;
        }
    }
    let scale = if a.has("scale") { a.f("scale", 1.0) } else { 1.0 / (hd as f64).sqrt() };
    let ss = scale.sqrt();
    let qsc = cx.mul_sc(q, ss)?;
    let kt = cx.transpose(k, vec![0, 1, 3, 2])?;
    let ksc = cx.mul_sc(kt, ss)?;
    let mut qk = cx.prim(MirOp::MatMul, &[qsc, ksc])?;
    let softcap = a.f("softcap", 0.0);
    if softcap > 0.0 {
        let t = cx.mul_sc(qk, 1.0 / softcap)?;
        let t = cx.un(UnaryOp::Tanh, t)?;
        qk = cx.mul_sc(t, softcap)?;
    }
    let qkb = match bias {
        Some(b) => cx.bin(BinaryOp::Add, qk, b)?,
        None => qk,
    };
    let mode = a.i("qk_matmul_output_mode", 0);
    let sp = if a.has("softmax_precision") { dtype_from_onnx(a.i("softmax_precision", 1) as i32)? } else { dt };
    let x = cx.cast(qkb, sp)?;
    let m = cx.reduce(ReduceOp::Max, x, vec![3], true)?;
    let mi = cx.un(UnaryOp::IsNegInf, m)?;
    let z = cx.scalar(sp, 0.0);
    let m = cx.prim(MirOp::Where, &[mi, z, m])?;
    let d = cx.bin(BinaryOp::Sub, x, m)?;
    let e = cx.un(UnaryOp::Exp, d)?;
    let s = cx.reduce(ReduceOp::Sum, e, vec![3], true)?;
    let s0 = cx.bin(BinaryOp::Eq, s, z)?;
    let one_ = cx.scalar(sp, 1.0);
    let s = cx.prim(MirOp::Where, &[s0, one_, s])?;
    let mut p = cx.bin(BinaryOp::Div, e, s)?;
    if let Some(b) = bias {
        let bm = cx.reduce(ReduceOp::Max, b, vec![cx.rank(b) - 1], true)?;
        let ram = cx.un(UnaryOp::IsNegInf, bm)?;
        let z = cx.scalar(sp, 0.0);
        p = cx.prim(MirOp::Where, &[ram, z, p])?;
    }
    let p = cx.cast(p, dt)?;
    let mut y = cx.prim(MirOp::MatMul, &[p, v])?;
    if three {
        y = cx.transpose(y, vec![0, 2, 1, 3])?;
        let yd = cx.fixed_dims(y, "Attention")?;
        y = cx.reshape_u(y, &[yd[0], yd[1], yd[2] * yd[3]])?;
    }
    let mut outs = vec![y, present_k, present_v];
    if nout > 3 {
        let o = match mode {
            2 => qkb,
            3 => p,
            _ => qk,
        };
        outs.push(o);
    }
    Ok(outs)
}
