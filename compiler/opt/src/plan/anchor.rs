//! Anchor bodies: the statements computing an anchor's value at one output index — a matmul's dot
//! product (with a transposed or packed weight), a reduction, an arg-reduction, a cumulative sum —
//! and the expression of that value (the accumulator its epilogue reads). Convolution and pooling
//! bodies are in `conv.rs`, the GEMM micro-kernel in `gemm.rs`.

use super::index::{bidx, linear};
use super::kernel::{lit, KB};
use super::Planner;
use rlx_ir::loops::{Access, Expr, IOp, LoopKind, Stmt};
use rlx_ir::{BinaryOp, DType, MirOp, OpSet, ReduceOp};

impl Planner<'_> {
    /// Statements computing an anchor's value at output index `idx`, and the expression of that value.
    pub(super) fn anchor_body(&mut self, kb: &mut KB, n: &rlx_ir::Node<MirOp>, idx: &[Expr]) -> (Vec<Stmt>, Expr) {
        let ins = &n.inputs;
        let odt = self.dt(n.outputs[0]);
        match &n.op {
            MirOp::MatMul => {
                if let Some(sum) = self.split_k_sum(kb, n, idx) {
                    return (Vec::new(), sum);
                }
                let kv = kb.var();
                let k = self.matmul_k(n);
                let prod = self.matmul_term(kb, n, idx, Expr::Var(kv));
                let acc = kb.var();
                let stmts = vec![
                    Stmt::Decl { var: acc, dtype: odt, init: lit(0.0, odt) },
                    Stmt::For {
                        var: kv,
                        extent: k as i64,
                        kind: LoopKind::Vector(8),
                        body: vec![Stmt::Assign { var: acc, value: Expr::Bin(BinaryOp::Add, odt, Box::new(Expr::Var(acc)), Box::new(prod)) }],
                    },
                ];
                (stmts, Expr::Var(acc))
            }
            MirOp::Reduce { op, axes, keepdims } => {
                let s = self.shape(ins[0]);
                let acc = kb.var();
                let mut in_idx = Vec::with_capacity(s.len());
                let mut loops = Vec::new();
                let mut oi = 0;
                // Trailing reduced axes of a value in a buffer of its own shape (a global pool's H × W)
                // are one flat loop: their elements are contiguous, so the vector loop runs over all of
                // them (49 at 7²) instead of each row's few (7: a vector of 8 with one lane idle and a
                // horizontal sum per row; MobileNet-like's global pool at batch 8 took 4.6× ORT's time).
                let flat = (0..s.len()).rev().take_while(|d| axes.contains(d)).count();
                let contiguous = !kb.subst.contains_key(&ins[0]) && self.buf_of[ins[0].index()].is_some_and(|b| self.buffers[b as usize].shape == s);
                let flat = if flat >= 2 && contiguous { flat } else { 0 };
                // The flat index goes on the last of those axes longer than 1 (the axes after it have
                // size 1, so its stride is 1 and its linear index is the flat offset: the buffer is
                // row-major in `s`; an index on a size-1 axis is not part of the linear index).
                let on = (s.len() - flat..s.len()).rev().find(|&d| s[d] > 1).unwrap_or(s.len() - 1);
                for (d, &sd) in s.iter().enumerate() {
                    if flat > 0 && d >= s.len() - flat {
                        // Index 0 on the others.
                        if d != on {
                            in_idx.push(Expr::Int(0));
                        } else {
                            let v = kb.var();
                            loops.push((v, s[s.len() - flat..].iter().product()));
                            in_idx.push(Expr::Var(v));
                        }
                        if *keepdims {
                            oi += 1;
                        }
                    } else if axes.contains(&d) {
                        let v = kb.var();
                        loops.push((v, sd));
                        in_idx.push(Expr::Var(v));
                        if *keepdims {
                            oi += 1;
                        }
                    } else {
                        in_idx.push(idx[oi].clone());
                        oi += 1;
                    }
                }
                let x = self.elem(kb, ins[0], &in_idx);
                let bop = match op {
                    ReduceOp::Sum | ReduceOp::Mean => BinaryOp::Add,
                    ReduceOp::Prod => BinaryOp::Mul,
                    ReduceOp::Max => BinaryOp::Max,
                    ReduceOp::Min => BinaryOp::Min,
                };
                let mut body = vec![Stmt::Assign { var: acc, value: Expr::Bin(bop, odt, Box::new(Expr::Var(acc)), Box::new(x)) }];
                let nloops = loops.len();
                for (i, (v, e)) in loops.into_iter().enumerate().rev() {
                    let kind = if i + 1 == nloops { LoopKind::Vector(8) } else { LoopKind::Serial };
                    body = vec![Stmt::For { var: v, extent: e as i64, kind, body }];
                }
                let mut stmts = vec![Stmt::Decl { var: acc, dtype: odt, init: lit(identity(*op, odt), odt) }];
                stmts.extend(body);
                let count: usize = axes.iter().map(|&a| s[a]).product();
                let val = if *op == ReduceOp::Mean {
                    Expr::Bin(BinaryOp::Div, odt, Box::new(Expr::Var(acc)), Box::new(lit(count as f64, odt)))
                } else {
                    Expr::Var(acc)
                };
                (stmts, val)
            }
            MirOp::ArgReduce { op, axis, keepdims, select_last } => {
                let s = self.shape(ins[0]);
                let dt = self.dt(ins[0]);
                let a = *axis;
                let mut base: Vec<Expr> = Vec::with_capacity(s.len());
                let mut oi = 0;
                for d in 0..s.len() {
                    if d == a {
                        base.push(Expr::Int(0));
                        if *keepdims {
                            oi += 1;
                        }
                    } else {
                        base.push(idx[oi].clone());
                        oi += 1;
                    }
                }
                let best = kb.var();
                let bi = kb.var();
                let j = kb.var();
                let first = self.elem(kb, ins[0], &base);
                let mut at = base.clone();
                at[a] = Expr::Var(j);
                let x = self.elem(kb, ins[0], &at);
                let cmp = match (op, select_last) {
                    (rlx_ir::ArgOp::ArgMax, false) => BinaryOp::Gt,
                    (rlx_ir::ArgOp::ArgMax, true) => BinaryOp::Ge,
                    (rlx_ir::ArgOp::ArgMin, false) => BinaryOp::Lt,
                    (rlx_ir::ArgOp::ArgMin, true) => BinaryOp::Le,
                };
                let cond = Expr::Bin(cmp, dt, Box::new(x.clone()), Box::new(Expr::Var(best)));
                let stmts = vec![
                    Stmt::Decl { var: best, dtype: dt, init: first },
                    Stmt::Decl { var: bi, dtype: DType::I64, init: lit(0.0, DType::I64) },
                    Stmt::For {
                        var: j,
                        extent: s[a] as i64,
                        kind: LoopKind::Serial,
                        body: vec![
                            Stmt::Assign { var: bi, value: Expr::Select(Box::new(cond.clone()), Box::new(Expr::ToIndex { from: DType::I64, x: Box::new(Expr::Var(j)) }), Box::new(Expr::Var(bi))) },
                            Stmt::Assign { var: best, value: Expr::Select(Box::new(cond), Box::new(x), Box::new(Expr::Var(best))) },
                        ],
                    },
                ];
                (stmts, Expr::Var(bi))
            }
            MirOp::Conv { .. } => self.conv_body(kb, n, idx),
            MirOp::ConvTranspose { .. } => self.conv_transpose_body(kb, n, idx),
            MirOp::Pool { .. } => self.pool_body(kb, n, idx),
            MirOp::CumSum { axis, exclusive, reverse } => {
                // out[i] = Σ x[j] over j ≤ i (j < i when exclusive; j ≥ i / j > i when reversed).
                // Quadratic in the axis length, which is fine for the position-id and small-scan
                // uses seen in models; a linear scan needs a stateful loop the per-element form lacks.
                let s = self.shape(ins[0]);
                let a = *axis;
                let acc = kb.var();
                let j = kb.var();
                let mut xi = idx.to_vec();
                xi[a] = Expr::Var(j);
                let x = self.elem(kb, ins[0], &xi);
                let (lo, hi) = if *reverse { (idx[a].clone(), Expr::Var(j)) } else { (Expr::Var(j), idx[a].clone()) };
                let cond = if *exclusive { Expr::i(IOp::Lt, lo, hi) } else { Expr::i(IOp::Le, lo, hi) };
                let upd = Stmt::Assign { var: acc, value: Expr::Bin(BinaryOp::Add, odt, Box::new(Expr::Var(acc)), Box::new(x)) };
                let stmts = vec![
                    Stmt::Decl { var: acc, dtype: odt, init: lit(0.0, odt) },
                    Stmt::For { var: j, extent: s[a] as i64, kind: LoopKind::Serial, body: vec![Stmt::If { cond, body: vec![upd] }] },
                ];
                (stmts, Expr::Var(acc))
            }
            other => unreachable!("anchor_body on {}", other.kind()),
        }
    }
}

impl Planner<'_> {
    /// The reduction length K of a matmul node.
    pub(super) fn matmul_k(&self, n: &rlx_ir::Node<MirOp>) -> usize {
        let sa = self.shape(n.inputs[0]);
        if sa.len() == 1 {
            sa[0]
        } else {
            sa[sa.len() - 1]
        }
    }

    /// The product a[.., k] · b[k, ..] of a matmul node at output index `idx` and reduction index `kx`
    /// (the weight read packed or transposed where the planner stored it so).
    pub(super) fn matmul_term(&mut self, kb: &mut KB, n: &rlx_ir::Node<MirOp>, idx: &[Expr], kx: Expr) -> Expr {
        let ins = &n.inputs;
        let odt = self.dt(n.outputs[0]);
        let (sa, sb) = (self.shape(ins[0]), self.shape(ins[1]));
        let (a1, b1) = (sa.len() == 1, sb.len() == 1);
        let k = self.matmul_k(n);
        let nb = if a1 { 0 } else { sa.len() - 2 };
        let mb = if b1 { 0 } else { sb.len() - 2 };
        let batch_rank = idx.len() - (!a1) as usize - (!b1) as usize;
        let batch = &idx[..batch_rank];
        let mut ai: Vec<Expr> = bidx(batch, &sa[..nb]);
        if !a1 {
            ai.push(idx[batch_rank].clone());
        }
        ai.push(kx.clone());
        let mut bi: Vec<Expr> = bidx(batch, &sb[..mb]);
        bi.push(kx);
        if !b1 {
            bi.push(idx[idx.len() - 1].clone());
        }
        let av = self.elem(kb, ins[0], &ai);
        let packed = self.packed_weight.get(&ins[1]).copied();
        let bv = match (packed, self.transposed_weight.get(&ins[1]).copied()) {
            (Some(pb), _) => {
                let (n, kx) = (bi[1].clone(), bi[0].clone());
                let nr = self.buffers[pb as usize].shape[2] as i64;
                let idx = Expr::add(
                    Expr::mul(Expr::add(Expr::mul(Expr::i(IOp::Div, n.clone(), Expr::Int(nr)), Expr::Int(k as i64)), kx), Expr::Int(nr)),
                    Expr::i(IOp::Rem, n, Expr::Int(nr)),
                );
                let p = kb.param(pb, &self.buffers[pb as usize].clone(), Access::Read);
                Expr::load(p, idx)
            }
            (None, Some(tb)) => {
                // Weight stored as [N, K]: element (k, n) is at n*K + k.
                let shape = self.buffers[tb as usize].shape.clone();
                let p = kb.param(tb, &self.buffers[tb as usize].clone(), Access::Read);
                Expr::load(p, linear(&[bi[1].clone(), bi[0].clone()], &shape))
            }
            (None, None) => self.elem(kb, ins[1], &bi),
        };
        Expr::Bin(BinaryOp::Mul, odt, Box::new(av), Box::new(bv))
    }
}

pub(super) fn identity(op: ReduceOp, d: DType) -> f64 {
    match op {
        ReduceOp::Sum | ReduceOp::Mean => 0.0,
        ReduceOp::Prod => 1.0,
        ReduceOp::Max => {
            if d.is_float() {
                f64::NEG_INFINITY
            } else {
                int_min(d)
            }
        }
        ReduceOp::Min => {
            if d.is_float() {
                f64::INFINITY
            } else {
                int_max(d)
            }
        }
    }
}

fn int_min(d: DType) -> f64 {
    match d {
        DType::I8 => -128.0,
        DType::I16 => -32768.0,
        DType::I32 => i32::MIN as f64,
        DType::I64 => i64::MIN as f64,
        _ => 0.0,
    }
}
fn int_max(d: DType) -> f64 {
    match d {
        DType::I8 => 127.0,
        DType::U8 | DType::Bool => 255.0,
        DType::I16 => 32767.0,
        DType::U16 => 65535.0,
        DType::I32 => i32::MAX as f64,
        DType::U32 => u32::MAX as f64,
        DType::I64 => i64::MAX as f64,
        DType::U64 => u64::MAX as f64,
        _ => f64::INFINITY,
    }
}
