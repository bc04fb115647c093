//! HIR: block ops that importers and model builders emit, plus any MIR primitive (`Prim`). Lowering to
//! MIR (in rlx-opt) expands each block op into primitives; a block op never reaches a target.

use crate::attr::{Attr, Attrs};
use crate::mir::MirOp;
use crate::{Dim, Graph, OpSet, Shape, TensorType};

#[derive(Clone, Debug, PartialEq)]
pub enum HirOp {
    Prim(MirOp),
    /// (x[…,K], w, bias[N]?) → x·W (+ bias). `w` is [N,K] when `transpose_w` (PyTorch layout), else [K,N].
    Linear { transpose_w: bool },
    /// (x, gamma, beta?) → normalized over dims `axis..rank`: (x-mean)/sqrt(var+eps)*gamma (+beta).
    LayerNorm { axis: usize, eps: f64 },
    /// (x) → GELU; exact (erf) unless `tanh`.
    Gelu { tanh: bool },
    /// (x) → softmax (or log-softmax) along `axis`.
    Softmax { axis: usize, log: bool },
    /// (q[B,S,H*D], k[B,T,H*D], v[B,T,H*D], mask[B,T]?) → [B,S,H*D]: multi-head scaled dot-product
    /// attention with `heads` heads, scores scaled by `scale`; positions where mask == 0 are excluded;
    /// `causal` also excludes keys after the query position.
    Attention { heads: usize, scale: f64, causal: bool },
    /// MIR's `loop` over an HIR body (lowered body and all): `crate::region`.
    Loop { max_trips: Option<u64>, carried: usize, body: Box<[Graph<HirOp>; 1]> },
    /// MIR's `if` over HIR branches: `crate::region`.
    If { branches: Box<[Graph<HirOp>; 2]> },
}

impl OpSet for HirOp {
    fn kind(&self) -> &'static str {
        match self {
            HirOp::Prim(p) => p.kind(),
            HirOp::Linear { .. } => "linear",
            HirOp::LayerNorm { .. } => "layer_norm",
            HirOp::Gelu { .. } => "gelu",
            HirOp::Softmax { .. } => "softmax",
            HirOp::Attention { .. } => "attention",
            HirOp::Loop { .. } => "loop",
            HirOp::If { .. } => "if",
        }
    }

    fn arity(&self) -> (usize, usize) {
        match self {
            HirOp::Prim(p) => p.arity(),
            HirOp::Linear { .. } | HirOp::LayerNorm { .. } => (2, 3),
            HirOp::Gelu { .. } | HirOp::Softmax { .. } => (1, 1),
            HirOp::Attention { .. } => (3, 4),
            HirOp::Loop { carried, body, .. } => (2 + carried, (2 + carried).max(body[0].inputs.len())),
            HirOp::If { branches } => (1, 1 + branches[0].inputs.len()),
        }
    }

    fn infer(&self, ins: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        match self {
            HirOp::Loop { max_trips, carried, body } => return crate::region::infer_loop(*max_trips, *carried, &body[0], ins),
            HirOp::If { branches } => return crate::region::infer_if(&branches[..], ins),
            _ => {}
        }
        let x = ins[0];
        let float = |t: &TensorType, what: &str| {
            if t.dtype.is_float() {
                Ok(())
            } else {
                Err(format!("{what} must be a float tensor, got {t}"))
            }
        };
        match self {
            HirOp::Prim(p) => p.infer(ins),
            HirOp::Linear { transpose_w } => {
                let w = ins[1];
                float(x, "linear input")?;
                if w.dtype != x.dtype || w.shape.rank() != 2 || x.shape.rank() == 0 {
                    return Err(format!("linear: input {x} and weight {w} (weight must be 2-D, same dtype)"));
                }
                let (k, n) = if *transpose_w { (&w.shape.0[1], &w.shape.0[0]) } else { (&w.shape.0[0], &w.shape.0[1]) };
                let xk = &x.shape.0[x.shape.rank() - 1];
                if xk != k {
                    return Err(format!("linear: input {x} has {xk} features, weight {w} expects {k}"));
                }
                if let Some(b) = ins.get(2) {
                    if b.shape.0 != vec![n.clone()] || b.dtype != x.dtype {
                        return Err(format!("linear: bias {b} must be {}[{n}]", x.dtype));
                    }
                }
                let mut s = x.shape.0.clone();
                *s.last_mut().unwrap() = n.clone();
                Ok(vec![TensorType::new(x.dtype, Shape(s))])
            }
            HirOp::LayerNorm { axis, .. } => {
                float(x, "layer_norm input")?;
                if *axis >= x.shape.rank() {
                    return Err(format!("layer_norm: axis {axis} out of range for {x}"));
                }
                let norm = Shape(x.shape.0[*axis..].to_vec());
                for (i, p) in ins[1..].iter().enumerate() {
                    // gamma/beta broadcast against the normalized dims.
                    let ok = p.dtype == x.dtype && crate::shape::broadcast(&norm, &p.shape).is_ok_and(|s| s == norm);
                    if !ok {
                        return Err(format!("layer_norm: {} {p} does not broadcast to {norm}", ["scale", "bias"][i]));
                    }
                }
                Ok(vec![x.clone()])
            }
            HirOp::Gelu { .. } => {
                float(x, "gelu input")?;
                Ok(vec![x.clone()])
            }
            HirOp::Softmax { axis, .. } => {
                float(x, "softmax input")?;
                if *axis >= x.shape.rank() {
                    return Err(format!("softmax: axis {axis} out of range for {x}"));
                }
                Ok(vec![x.clone()])
            }
            HirOp::Attention { heads, .. } => {
                let (q, k, v) = (ins[0], ins[1], ins[2]);
                float(q, "attention query")?;
                for t in [k, v] {
                    if t.dtype != q.dtype || t.shape.rank() != 3 {
                        return Err(format!("attention: q {q}, k {k}, v {v} must be [B,S,H*D] of one dtype"));
                    }
                }
                if q.shape.rank() != 3 || q.shape.0[0] != k.shape.0[0] || k.shape.0[..2] != v.shape.0[..2] || q.shape.0[2] != k.shape.0[2] {
                    return Err(format!("attention: q {q}, k {k}, v {v} have inconsistent dims"));
                }
                if let Dim::Fixed(hd) = q.shape.0[2] {
                    if *heads == 0 || hd % *heads as u64 != 0 {
                        return Err(format!("attention: hidden size {hd} is not a multiple of {heads} heads"));
                    }
                }
                if let Some(m) = ins.get(3) {
                    if m.shape.0 != k.shape.0[..2] || m.dtype.is_quantized_block() {
                        return Err(format!("attention: mask {m} must be [{},{}]", k.shape.0[0], k.shape.0[1]));
                    }
                }
                let mut s = q.shape.0.clone();
                s[2] = v.shape.0[2].clone();
                Ok(vec![TensorType::new(q.dtype, Shape(s))])
            }
            HirOp::Loop { .. } | HirOp::If { .. } => unreachable!("handled above"),
        }
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        match self {
            HirOp::Prim(p) => p.attrs(),
            HirOp::Linear { transpose_w } => vec![("transpose_w", Attr::Bool(*transpose_w))],
            HirOp::LayerNorm { axis, eps } => vec![("axis", Attr::Int(*axis as i64)), ("eps", Attr::Float(*eps))],
            HirOp::Gelu { tanh } => vec![("tanh", Attr::Bool(*tanh))],
            HirOp::Softmax { axis, log } => vec![("axis", Attr::Int(*axis as i64)), ("log", Attr::Bool(*log))],
            HirOp::Attention { heads, scale, causal } => {
                vec![("heads", Attr::Int(*heads as i64)), ("scale", Attr::Float(*scale)), ("causal", Attr::Bool(*causal))]
            }
            HirOp::Loop { max_trips, carried, .. } => crate::region::loop_attrs(*max_trips, *carried),
            HirOp::If { .. } => vec![],
        }
    }

    fn from_parts(kind: &str, attrs: &[(String, Attr)]) -> Result<Self, String> {
        let a = Attrs(attrs);
        Ok(match kind {
            "linear" => HirOp::Linear { transpose_w: a.bool("transpose_w")? },
            "layer_norm" => HirOp::LayerNorm { axis: a.usize("axis")?, eps: a.float("eps")? },
            "gelu" => HirOp::Gelu { tanh: a.bool("tanh")? },
            "softmax" => HirOp::Softmax { axis: a.usize("axis")?, log: a.bool("log")? },
            "attention" => HirOp::Attention { heads: a.usize("heads")?, scale: a.float("scale")?, causal: a.bool("causal")? },
            "loop" => {
                let (max_trips, carried) = crate::region::loop_from_attrs(attrs)?;
                HirOp::Loop { max_trips, carried, body: Box::new([Graph::new()]) }
            }
            "if" => HirOp::If { branches: Box::new([Graph::new(), Graph::new()]) },
            _ => HirOp::Prim(MirOp::from_parts(kind, attrs)?),
        })
    }

    fn regions(&self) -> &[Graph<HirOp>] {
        match self {
            HirOp::Loop { body, .. } => &body[..],
            HirOp::If { branches } => &branches[..],
            _ => &[],
        }
    }

    fn set_regions(&mut self, regions: Vec<Graph<HirOp>>) -> Result<(), String> {
        let kind = self.kind();
        match self {
            HirOp::Loop { body, .. } => crate::region::fill(kind, &mut body[..], regions),
            HirOp::If { branches } => crate::region::fill(kind, &mut branches[..], regions),
            _ if regions.is_empty() => Ok(()),
            _ => Err(format!("{kind} owns no regions, got {}", regions.len())),
        }
    }
}

/// Block-op kinds (everything HIR has beyond MIR).
pub const HIR_BLOCK_KINDS: &[&str] = &["linear", "layer_norm", "gelu", "softmax", "attention"];

