//! The recurrent layers RNN, GRU and LSTM, unrolled over the (static) sequence length into MIR
//! primitives: one matmul of the whole input sequence with W (plus biases) per direction, then per
//! time step a matmul of the hidden state with R, the gates' activations and the state update.
//! Every attribute: `direction` (forward, reverse, bidirectional), `activations` with
//! `activation_alpha`/`activation_beta`, `clip`, `layout`, GRU's `linear_before_reset`, LSTM's
//! `input_forget` and peepholes; inputs `B`, `sequence_lens` (a step at or past a batch row's length
//! keeps that row's state and writes zeros to Y, which for the reverse direction also makes each row
//! start at its own last element), `initial_h`, `initial_c`.

use super::elementwise::activation;
use super::{Node, R};
use crate::onnx::Ctx;
use rlx_ir::{BinaryOp, DType, Dim, MirOp, UnaryOp, ValueId};

/// The ONNX op types this family translates.
pub(super) const OPS: &[&str] = &["GRU", "LSTM", "RNN"];

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Rnn,
    Gru,
    Lstm,
}

/// One activation function with its alpha/beta (the defaults where the model gives none).
struct Act {
    name: String,
    alpha: Option<f64>,
    beta: Option<f64>,
}

fn apply_act(cx: &mut Ctx, f: &Act, x: ValueId) -> Result<ValueId, String> {
    let (al, be) = (f.alpha, f.beta);
    match f.name.to_ascii_lowercase().as_str() {
        "tanh" => cx.un(UnaryOp::Tanh, x),
        "sigmoid" => cx.un(UnaryOp::Sigmoid, x),
        "relu" => cx.un(UnaryOp::Relu, x),
        "affine" => {
            let t = cx.mul_sc(x, al.unwrap_or(1.0))?;
            cx.add_sc(t, be.unwrap_or(0.0))
        }
        "scaledtanh" => {
            let t = cx.mul_sc(x, be.unwrap_or(1.0))?;
            let t = cx.un(UnaryOp::Tanh, t)?;
            cx.mul_sc(t, al.unwrap_or(1.0))
        }
        _ => {
            let name = match f.name.to_ascii_lowercase().as_str() {
                "leakyrelu" => "LeakyRelu",
                "thresholdedrelu" => "ThresholdedRelu",
                "hardsigmoid" => "HardSigmoid",
                "elu" => "Elu",
                "softsign" => "Softsign",
                "softplus" => "Softplus",
                _ => return Err(format!("unsupported: activation '{}'", f.name)),
            };
            let attr = |k: &str, d: f64| match k {
                "alpha" => al.unwrap_or(d),
                "beta" => be.unwrap_or(d),
                _ => d,
            };
            activation(cx, name, &attr, x)?.ok_or_else(|| format!("unsupported: activation '{}'", f.name))
        }
    }
}

pub(super) fn convert(cx: &mut Ctx, nd: &Node) -> R {
    let a = &nd.a;
    let kind = match nd.op {
        "RNN" => Kind::Rnn,
        "GRU" => Kind::Gru,
        _ => Kind::Lstm,
    };
    let gates = match kind {
        Kind::Rnn => 1,
        Kind::Gru => 3,
        Kind::Lstm => 4,
    };
    let hs = a.i("hidden_size", 0);
    let (x, w, r) = (nd.req(0)?, nd.req(1)?, nd.req(2)?);
    let dt = cx.dtype(x);
    if !dt.is_float() {
        return Err(format!("{} of {dt} input", nd.op));
    }
    let layout = a.i("layout", 0);
    let xd = cx.fixed_dims(x, &format!("{} input X", nd.op))?;
    if xd.len() != 3 {
        return Err(format!("X must be 3-D, got {xd:?}"));
    }
    let x = if layout == 1 { cx.transpose(x, vec![1, 0, 2])? } else { x };
    let (seq, batch, isz) = if layout == 1 { (xd[1], xd[0], xd[2]) } else { (xd[0], xd[1], xd[2]) };
    if seq == 0 {
        return Err("unsupported: a sequence of length 0".into());
    }
    let wd = cx.fixed_dims(w, "W")?;
    let hs = if hs > 0 { hs as usize } else { wd.get(1).copied().unwrap_or(0) / gates };
    let dir = a.s("direction").unwrap_or_else(|| "forward".into());
    let dirs: Vec<bool> = match dir.as_str() {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        d => return Err(format!("unknown direction '{d}'")),
    };
    let nd_ = dirs.len();
    let g = gates * hs;
    if wd != [nd_, g, isz] {
        return Err(format!("W is {wd:?}, expected [{nd_}, {g}, {isz}]"));
    }
    if cx.fixed_dims(r, "R")? != [nd_, g, hs] {
        return Err(format!("R is {:?}, expected [{nd_}, {g}, {hs}]", cx.dims(r)));
    }
    // Activations: per direction f[, g[, h]].
    let per = match kind {
        Kind::Rnn => 1,
        Kind::Gru => 2,
        Kind::Lstm => 3,
    };
    let defaults: &[&str] = match kind {
        Kind::Rnn => &["Tanh"],
        Kind::Gru => &["Sigmoid", "Tanh"],
        Kind::Lstm => &["Sigmoid", "Tanh", "Tanh"],
    };
    let names: Vec<String> = match a.strings("activations") {
        Some(v) if !v.is_empty() => v,
        _ => (0..nd_).flat_map(|_| defaults.iter().map(|s| s.to_string())).collect(),
    };
    if names.len() != per * nd_ {
        return Err(format!("activations lists {} functions, {} needs {}", names.len(), nd.op, per * nd_));
    }
    let (alphas, betas) = (a.floats("activation_alpha").unwrap_or_default(), a.floats("activation_beta").unwrap_or_default());
    let (mut ia, mut ib) = (0, 0);
    let mut acts = Vec::new();
    for n in names {
        let l = n.to_ascii_lowercase();
        let takes_a = matches!(l.as_str(), "affine" | "leakyrelu" | "thresholdedrelu" | "scaledtanh" | "hardsigmoid" | "elu");
        let takes_b = matches!(l.as_str(), "affine" | "scaledtanh" | "hardsigmoid");
        let alpha = if takes_a { ia += 1; alphas.get(ia - 1).copied() } else { None };
        let beta = if takes_b { ib += 1; betas.get(ib - 1).copied() } else { None };
        acts.push(Act { name: n, alpha, beta });
    }
    let clip = a.has("clip").then(|| a.f("clip", 0.0));
    let lbr = a.i("linear_before_reset", 0) != 0;
    let input_forget = a.i("input_forget", 0) != 0;

    let b = nd.inp(3);
    let lens = nd.inp(4).map(|l| cx.cast(l, DType::I64)).transpose()?;
    let state_in = |cx: &mut Ctx, i: usize| -> Result<Option<ValueId>, String> {
        match nd.inp(i) {
            Some(v) => Ok(Some(if layout == 1 { cx.transpose(v, vec![1, 0, 2])? } else { v })),
            None => Ok(None),
        }
    };
    let h0 = state_in(cx, 5)?;
    let c0 = if kind == Kind::Lstm { state_in(cx, 6)? } else { None };
    let p = if kind == Kind::Lstm { nd.inp(7) } else { None };

    let mut ys = Vec::new();
    let mut hs_out = Vec::new();
    let mut cs_out = Vec::new();
    for (di, &rev) in dirs.iter().enumerate() {
        let f = &acts[di * per..di * per + per];
        let pick = |cx: &mut Ctx, v: ValueId| -> Result<ValueId, String> {
            let s = cx.slice_axis(v, 0, di, di + 1)?;
            let mut d = cx.dims(s);
            d.remove(0);
            cx.reshape(s, d)
        };
        let wt = pick(cx, w)?;
        let wt = cx.transpose(wt, vec![1, 0])?; // [in, G·h]
        let rt = pick(cx, r)?;
        let rt = cx.transpose(rt, vec![1, 0])?; // [h, G·h]
        let mut xw = cx.prim(MirOp::MatMul, &[x, wt])?; // [seq, batch, G·h]
        // Biases: Wb + Rb folded into xw, except GRU's Rb_h which linear_before_reset needs inside r ⊙ (…).
        let mut rbh = None;
        if let Some(b) = b {
            let bd = pick(cx, b)?; // [2·G·h]
            let wb = cx.slice_axis(bd, 0, 0, g)?;
            let rb = cx.slice_axis(bd, 0, g, 2 * g)?;
            let bias = if kind == Kind::Gru {
                let rzr = cx.slice_axis(rb, 0, 0, 2 * hs)?;
                rbh = Some(cx.slice_axis(rb, 0, 2 * hs, g)?);
                let wzr = cx.slice_axis(wb, 0, 0, 2 * hs)?;
                let wh = cx.slice_axis(wb, 0, 2 * hs, g)?;
                let zr = cx.bin(BinaryOp::Add, wzr, rzr)?;
                cx.prim(MirOp::Concat { axis: 0 }, &[zr, wh])?
            } else {
                cx.bin(BinaryOp::Add, wb, rb)?
            };
            xw = cx.bin(BinaryOp::Add, xw, bias)?;
        }
        let zeros = |cx: &mut Ctx| -> Result<ValueId, String> {
            let z = cx.scalar(dt, 0.0);
            cx.prim(MirOp::Expand { shape: vec![Dim::Fixed(batch as u64), Dim::Fixed(hs as u64)] }, &[z])
        };
        let mut h = match h0 {
            Some(v) => pick(cx, v)?,
            None => zeros(cx)?,
        };
        // The cell state (LSTM only; the other kinds carry `h` here, unused).
        let mut c = match c0 {
            Some(v) => pick(cx, v)?,
            None if kind == Kind::Lstm => zeros(cx)?,
            None => h,
        };
        let peep = match p {
            Some(pv) => {
                let pd = pick(cx, pv)?;
                Some((cx.slice_axis(pd, 0, 0, hs)?, cx.slice_axis(pd, 0, hs, 2 * hs)?, cx.slice_axis(pd, 0, 2 * hs, 3 * hs)?))
            }
            None => None,
        };
        let clipped = |cx: &mut Ctx, v: ValueId| -> Result<ValueId, String> {
            match clip {
                Some(cl) => {
                    let lo = cx.sc(v, -cl);
                    let hi = cx.sc(v, cl);
                    let v = cx.bin(BinaryOp::Max, v, lo)?;
                    cx.bin(BinaryOp::Min, v, hi)
                }
                None => Ok(v),
            }
        };
        let gate = |cx: &mut Ctx, v: ValueId, k: usize| cx.slice_axis(v, 1, k * hs, (k + 1) * hs);
        let mut y_steps = vec![None; seq];
        let order: Vec<usize> = if rev { (0..seq).rev().collect() } else { (0..seq).collect() };
        for &t in &order {
            let xt = cx.slice_axis(xw, 0, t, t + 1)?;
            let xt = cx.reshape_u(xt, &[batch, g])?;
            let hr = cx.prim(MirOp::MatMul, &[h, rt])?; // [batch, G·h]
            let (h_new, c_new) = match kind {
                Kind::Rnn => {
                    let s = cx.bin(BinaryOp::Add, xt, hr)?;
                    let s = clipped(cx, s)?;
                    (apply_act(cx, &f[0], s)?, None)
                }
                Kind::Gru => {
                    let (xz, xr, xh) = (gate(cx, xt, 0)?, gate(cx, xt, 1)?, gate(cx, xt, 2)?);
                    let (hz, hr_, hh) = (gate(cx, hr, 0)?, gate(cx, hr, 1)?, gate(cx, hr, 2)?);
                    let z = cx.bin(BinaryOp::Add, xz, hz)?;
                    let z = clipped(cx, z)?;
                    let z = apply_act(cx, &f[0], z)?;
                    let rg = cx.bin(BinaryOp::Add, xr, hr_)?;
                    let rg = clipped(cx, rg)?;
                    let rg = apply_act(cx, &f[0], rg)?;
                    let inner = if lbr {
                        let hh = match rbh {
                            Some(rb) => cx.bin(BinaryOp::Add, hh, rb)?,
                            None => hh,
                        };
                        cx.bin(BinaryOp::Mul, rg, hh)?
                    } else {
                        let rh = cx.bin(BinaryOp::Mul, rg, h)?;
                        let rht = cx.slice_axis(rt, 1, 2 * hs, g)?;
                        let m = cx.prim(MirOp::MatMul, &[rh, rht])?;
                        match rbh {
                            Some(rb) => cx.bin(BinaryOp::Add, m, rb)?,
                            None => m,
                        }
                    };
                    let hc = cx.bin(BinaryOp::Add, xh, inner)?;
                    let hc = clipped(cx, hc)?;
                    let hc = apply_act(cx, &f[1], hc)?;
                    // (1 - z) ⊙ hc + z ⊙ h
                    let one_ = cx.sc(z, 1.0);
                    let omz = cx.bin(BinaryOp::Sub, one_, z)?;
                    let l = cx.bin(BinaryOp::Mul, omz, hc)?;
                    let rr = cx.bin(BinaryOp::Mul, z, h)?;
                    (cx.bin(BinaryOp::Add, l, rr)?, None)
                }
                Kind::Lstm => {
                    let s = cx.bin(BinaryOp::Add, xt, hr)?;
                    let (si, so, sf, sc) = (gate(cx, s, 0)?, gate(cx, s, 1)?, gate(cx, s, 2)?, gate(cx, s, 3)?);
                    let (si, sf) = match peep {
                        Some((pi, _, pf)) => {
                            let a_ = cx.bin(BinaryOp::Mul, pi, c)?;
                            let b_ = cx.bin(BinaryOp::Mul, pf, c)?;
                            (cx.bin(BinaryOp::Add, si, a_)?, cx.bin(BinaryOp::Add, sf, b_)?)
                        }
                        None => (si, sf),
                    };
                    let si = clipped(cx, si)?;
                    let it = apply_act(cx, &f[0], si)?;
                    let ft = if input_forget {
                        let one_ = cx.sc(it, 1.0);
                        cx.bin(BinaryOp::Sub, one_, it)?
                    } else {
                        let sf = clipped(cx, sf)?;
                        apply_act(cx, &f[0], sf)?
                    };
                    let sc = clipped(cx, sc)?;
                    let ct = apply_act(cx, &f[1], sc)?;
                    let fc = cx.bin(BinaryOp::Mul, ft, c)?;
                    let ic = cx.bin(BinaryOp::Mul, it, ct)?;
                    let cn = cx.bin(BinaryOp::Add, fc, ic)?;
                    let so = match peep {
                        Some((_, po, _)) => {
                            let a_ = cx.bin(BinaryOp::Mul, po, cn)?;
                            cx.bin(BinaryOp::Add, so, a_)?
                        }
                        None => so,
                    };
                    let so = clipped(cx, so)?;
                    let ot = apply_act(cx, &f[0], so)?;
                    let hc = apply_act(cx, &f[2], cn)?;
                    (cx.bin(BinaryOp::Mul, ot, hc)?, Some(cn))
                }
            };
            // sequence_lens: rows whose sequence has ended keep their state and output zeros.
            let (h_next, c_next, y) = match lens {
                Some(l) => {
                    let tc = cx.scalar(DType::I64, t as f64);
                    let live = cx.bin(BinaryOp::Lt, tc, l)?; // [batch]
                    let live = cx.reshape_u(live, &[batch, 1])?;
                    let hn = cx.prim(MirOp::Where, &[live, h_new, h])?;
                    let cn = match c_new {
                        Some(cn) => Some(cx.prim(MirOp::Where, &[live, cn, c])?),
                        None => None,
                    };
                    let z = cx.scalar(dt, 0.0);
                    let y = cx.prim(MirOp::Where, &[live, h_new, z])?;
                    (hn, cn, y)
                }
                None => (h_new, c_new, h_new),
            };
            h = h_next;
            if let Some(cn) = c_next {
                c = cn;
            }
            y_steps[t] = Some(y);
        }
        let steps: Vec<ValueId> = y_steps.into_iter().flatten().collect();
        let mut us = Vec::with_capacity(steps.len());
        for s in steps {
            us.push(cx.reshape_u(s, &[1, 1, batch, hs])?);
        }
        let y = if us.len() == 1 { us[0] } else { cx.prim(MirOp::Concat { axis: 0 }, &us)? }; // [seq, 1, batch, h]
        ys.push(y);
        hs_out.push(cx.reshape_u(h, &[1, batch, hs])?);
        if kind == Kind::Lstm {
            cs_out.push(cx.reshape_u(c, &[1, batch, hs])?);
        }
    }
    let cat = |cx: &mut Ctx, v: &[ValueId], axis: usize| -> Result<ValueId, String> {
        if v.len() == 1 {
            Ok(v[0])
        } else {
            cx.prim(MirOp::Concat { axis }, v)
        }
    };
    let y = cat(cx, &ys, 1)?;
    let yh = cat(cx, &hs_out, 0)?;
    let mut outs = vec![y, yh];
    if kind == Kind::Lstm {
        outs.push(cat(cx, &cs_out, 0)?);
    }
    if layout == 1 {
        outs[0] = cx.transpose(outs[0], vec![2, 0, 1, 3])?;
        for o in outs.iter_mut().skip(1) {
            *o = cx.transpose(*o, vec![1, 0, 2])?;
        }
    }
    Ok(outs)
}
