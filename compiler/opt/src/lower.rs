//! HIR → MIR lowering. Primitive nodes are copied; each block op expands into MIR primitives whose
//! node names extend the block's name (`encoder.layer.0.attention.self/scores`), so errors and reports
//! still point at the model.

use rlx_ir::verify::Problem;
use rlx_ir::{
    BinaryOp, ConstData, DType, Def, Dim, Hir, HirOp, Mir, MirOp, OpSet, ReduceOp, UnaryOp, ValueId,
};

struct Lowerer {
    mir: Mir,
}

type R<T> = Result<T, String>;

impl Lowerer {
    fn node(&mut self, name: &str, op: MirOp, ins: &[ValueId]) -> R<ValueId> {
        self.mir.add1(name, op, ins)
    }
    fn scalar(&mut self, dtype: DType, v: f64) -> ValueId {
        self.mir.add_const(None, ConstData::scalar(dtype, v))
    }
    fn bin(&mut self, name: &str, op: BinaryOp, a: ValueId, b: ValueId) -> R<ValueId> {
        self.node(name, MirOp::Binary(op), &[a, b])
    }
    fn un(&mut self, name: &str, op: UnaryOp, a: ValueId) -> R<ValueId> {
        self.node(name, MirOp::Unary(op), &[a])
    }
    fn reduce(&mut self, name: &str, op: ReduceOp, x: ValueId, axes: Vec<usize>) -> R<ValueId> {
        self.node(name, MirOp::Reduce { op, axes, keepdims: true }, &[x])
    }
    fn dims(&self, v: ValueId) -> Vec<Dim> {
        self.mir.ty(v).shape.0.clone()
    }

    fn softmax(&mut self, name: &str, x: ValueId, axis: usize, log: bool) -> R<ValueId> {
        let m = self.reduce(&format!("{name}/max"), ReduceOp::Max, x, vec![axis])?;
        let d = self.bin(&format!("{name}/sub"), BinaryOp::Sub, x, m)?;
        let e = self.un(&format!("{name}/exp"), UnaryOp::Exp, d)?;
        let s = self.reduce(&format!("{name}/sum"), ReduceOp::Sum, e, vec![axis])?;
        if log {
            let l = self.un(&format!("{name}/log"), UnaryOp::Log, s)?;
            self.bin(name, BinaryOp::Sub, d, l)
        } else {
            self.bin(name, BinaryOp::Div, e, s)
        }
    }

    fn lower_block(&mut self, name: &str, op: &HirOp, ins: &[ValueId]) -> R<Vec<ValueId>> {
        let x = ins[0];
        let dt = self.mir.ty(x).dtype;
        let out = match op {
            HirOp::Prim(p) => return self.mir.add_node(name, p.clone(), ins),
            // A region's sub-graphs are lowered as graphs of their own (their problems named by the op).
            HirOp::Loop { max_trips, carried, body } => {
                let body = Box::new([lower_region(name, &body[0])?]);
                return self.mir.add_node(name, MirOp::Loop { max_trips: *max_trips, carried: *carried, body }, ins);
            }
            HirOp::If { branches } => {
                let branches = Box::new([lower_region(name, &branches[0])?, lower_region(name, &branches[1])?]);
                return self.mir.add_node(name, MirOp::If { branches }, ins);
            }
            HirOp::Linear { transpose_w } => {
                let mut w = ins[1];
                if *transpose_w {
                    w = self.node(&format!("{name}/weight_t"), MirOp::Transpose { perm: vec![1, 0] }, &[w])?;
                }
                let y = self.node(&format!("{name}/matmul"), MirOp::MatMul, &[x, w])?;
                match ins.get(2) {
                    Some(&b) => self.bin(name, BinaryOp::Add, y, b)?,
                    None => y,
                }
            }
            HirOp::LayerNorm { axis, eps } => {
                let r = self.mir.ty(x).shape.rank();
                let axes: Vec<usize> = (*axis..r).collect();
                let mean = self.reduce(&format!("{name}/mean"), ReduceOp::Mean, x, axes.clone())?;
                let d = self.bin(&format!("{name}/center"), BinaryOp::Sub, x, mean)?;
                let sq = self.bin(&format!("{name}/square"), BinaryOp::Mul, d, d)?;
                let var = self.reduce(&format!("{name}/var"), ReduceOp::Mean, sq, axes)?;
                let e = self.scalar(dt, *eps);
                let ve = self.bin(&format!("{name}/var_eps"), BinaryOp::Add, var, e)?;
                let sd = self.un(&format!("{name}/std"), UnaryOp::Sqrt, ve)?;
                let n = self.bin(&format!("{name}/normalize"), BinaryOp::Div, d, sd)?;
                let sname = if ins.len() > 2 { format!("{name}/scale") } else { name.to_string() };
                let scaled = self.bin(&sname, BinaryOp::Mul, n, ins[1])?;
                match ins.get(2) {
                    Some(&b) => self.bin(name, BinaryOp::Add, scaled, b)?,
                    None => scaled,
                }
            }
            HirOp::Gelu { tanh } => {
                let half = self.scalar(dt, 0.5);
                let one = self.scalar(dt, 1.0);
                let inner = if *tanh {
                    // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
                    let c = self.scalar(dt, 0.044715);
                    let k = self.scalar(dt, (2.0 / std::f64::consts::PI).sqrt());
                    let x2 = self.bin(&format!("{name}/x2"), BinaryOp::Mul, x, x)?;
                    let x3 = self.bin(&format!("{name}/x3"), BinaryOp::Mul, x2, x)?;
                    let cx3 = self.bin(&format!("{name}/cx3"), BinaryOp::Mul, x3, c)?;
                    let s = self.bin(&format!("{name}/sum"), BinaryOp::Add, x, cx3)?;
                    let ks = self.bin(&format!("{name}/scaled"), BinaryOp::Mul, s, k)?;
                    self.un(&format!("{name}/tanh"), UnaryOp::Tanh, ks)?
                } else {
                    // 0.5·x·(1 + erf(x/√2))
                    let r = self.scalar(dt, std::f64::consts::FRAC_1_SQRT_2);
                    let xs = self.bin(&format!("{name}/scaled"), BinaryOp::Mul, x, r)?;
                    self.un(&format!("{name}/erf"), UnaryOp::Erf, xs)?
                };
                let p1 = self.bin(&format!("{name}/plus_one"), BinaryOp::Add, inner, one)?;
                let hx = self.bin(&format!("{name}/half_x"), BinaryOp::Mul, x, half)?;
                self.bin(name, BinaryOp::Mul, hx, p1)?
            }
            HirOp::Softmax { axis, log } => self.softmax(name, x, *axis, *log)?,
            HirOp::Attention { heads, scale, causal } => {
                let (q, k, v) = (ins[0], ins[1], ins[2]);
                let qd = self.dims(q);
                let kd = self.dims(k);
                let vd = self.dims(v);
                let h = *heads as u64;
                let split = |hd: &Dim, what: &str| -> R<u64> {
                    match hd {
                        Dim::Fixed(n) if h > 0 && n % h == 0 => Ok(n / h),
                        _ => Err(format!("attention {what} width {hd} must be a fixed multiple of {h} heads")),
                    }
                };
                let dq = split(&qd[2], "query")?;
                let dv = split(&vd[2], "value")?;
                let heads4 = |b: &Dim, s: &Dim, d: u64| vec![b.clone(), s.clone(), Dim::Fixed(h), Dim::Fixed(d)];
                let q4 = self.node(&format!("{name}/q_heads"), MirOp::Reshape { shape: heads4(&qd[0], &qd[1], dq) }, &[q])?;
                let q4 = self.node(&format!("{name}/q_t"), MirOp::Transpose { perm: vec![0, 2, 1, 3] }, &[q4])?;
                let k4 = self.node(&format!("{name}/k_heads"), MirOp::Reshape { shape: heads4(&kd[0], &kd[1], dq) }, &[k])?;
                let k4 = self.node(&format!("{name}/k_t"), MirOp::Transpose { perm: vec![0, 2, 3, 1] }, &[k4])?;
                let v4 = self.node(&format!("{name}/v_heads"), MirOp::Reshape { shape: heads4(&vd[0], &vd[1], dv) }, &[v])?;
                let v4 = self.node(&format!("{name}/v_t"), MirOp::Transpose { perm: vec![0, 2, 1, 3] }, &[v4])?;
                let s = self.node(&format!("{name}/scores"), MirOp::MatMul, &[q4, k4])?;
                let sc = self.scalar(dt, *scale);
                let mut s = self.bin(&format!("{name}/scale"), BinaryOp::Mul, s, sc)?;
                let neg = self.scalar(dt, f32::MIN as f64);
                if let Some(&m) = ins.get(3) {
                    let mb = self.node(&format!("{name}/mask_bool"), MirOp::Cast { to: DType::Bool }, &[m])?;
                    let shape = vec![kd[0].clone(), Dim::Fixed(1), Dim::Fixed(1), kd[1].clone()];
                    let mb = self.node(&format!("{name}/mask_b11t"), MirOp::Reshape { shape }, &[mb])?;
                    s = self.node(&format!("{name}/masked"), MirOp::Where, &[mb, s, neg])?;
                }
                if *causal {
                    let (Some(sq), Some(t)) = (qd[1].fixed(), kd[1].fixed()) else {
                        return Err(format!("causal attention needs fixed sequence lengths, got {} and {} (fix them with --dim)", qd[1], kd[1]));
                    };
                    let (sq, t) = (sq as usize, t as usize);
                    // Query i (aligned to the end of the keys) sees keys j <= i + (t - sq).
                    let mut bits = Vec::with_capacity(sq * t);
                    for i in 0..sq {
                        for j in 0..t {
                            bits.push((j + sq <= i + t) as u8);
                        }
                    }
                    let data = ConstData::new(DType::Bool, vec![sq, t], rlx_ir::Blob::from_vec(bits)).map_err(|e| format!("causal mask: {e}"))?;
                    let cm = self.mir.add_const(None, data);
                    s = self.node(&format!("{name}/causal"), MirOp::Where, &[cm, s, neg])?;
                }
                let p = self.softmax(&format!("{name}/softmax"), s, 3, false)?;
                let c = self.node(&format!("{name}/context"), MirOp::MatMul, &[p, v4])?;
                let c = self.node(&format!("{name}/context_t"), MirOp::Transpose { perm: vec![0, 2, 1, 3] }, &[c])?;
                let shape = vec![qd[0].clone(), qd[1].clone(), vd[2].clone()];
                self.node(name, MirOp::Reshape { shape }, &[c])?
            }
        };
        Ok(vec![out])
    }
}

/// A region op's sub-graph lowered, its problems folded into one message for the op's node.
fn lower_region(name: &str, g: &Hir) -> R<Mir> {
    lower(g).map_err(|ps| format!("in a region of '{name}': {}", ps.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("; ")))
}

/// Lowers a HIR graph to MIR. Graph inputs, constants and outputs keep their names; every problem found
/// is returned (a node that fails to lower is reported and lowering continues where it can).
pub fn lower(h: &Hir) -> Result<Mir, Vec<Problem>> {
    let mut probs = rlx_ir::verify::verify(h);
    if !probs.is_empty() {
        return Err(probs);
    }
    let mut l = Lowerer { mir: Mir::new() };
    let mut map: Vec<Option<ValueId>> = vec![None; h.values.len()];
    for &i in &h.inputs {
        let v = h.value(i);
        let id = l.mir.add_input(v.name.as_deref().unwrap_or(""), v.ty.clone());
        l.mir.values[id.index()].name = v.name.clone();
        map[i.index()] = Some(id);
    }
    for (k, v) in h.values.iter().enumerate() {
        if let Def::Const(c) = &v.def {
            map[k] = Some(l.mir.add_const(v.name.as_deref(), c.clone()));
        }
    }
    for n in &h.nodes {
        let ins: Option<Vec<ValueId>> = n.inputs.iter().map(|i| map[i.index()]).collect();
        let Some(ins) = ins else {
            // An input failed to lower earlier; that failure is already reported.
            continue;
        };
        match l.lower_block(&n.name, &n.op, &ins) {
            Ok(outs) => {
                for (&ho, mo) in n.outputs.iter().zip(outs) {
                    let want = &h.ty(ho);
                    if l.mir.ty(mo) != *want {
                        probs.push(Problem { node: Some(n.name.clone()), msg: format!("lowering of {} gave {} but HIR says {want}", n.op.kind(), l.mir.ty(mo)) });
                    }
                    if h.value(ho).name.is_some() {
                        l.mir.values[mo.index()].name = h.value(ho).name.clone();
                    }
                    map[ho.index()] = Some(mo);
                }
            }
            Err(e) => probs.push(Problem { node: Some(n.name.clone()), msg: format!("cannot lower {}: {e}", n.op.kind()) }),
        }
    }
    for &o in &h.outputs {
        match map[o.index()] {
            Some(m) => l.mir.outputs.push(m),
            None => probs.push(Problem { node: None, msg: format!("graph output {o} was not lowered") }),
        }
    }
    l.mir.state = h.state.clone();
    l.mir.bounded = h.bounded.clone();
    if probs.is_empty() {
        probs = rlx_ir::verify::verify(&l.mir);
    }
    if probs.is_empty() {
        Ok(l.mir)
    } else {
        Err(probs)
    }
}

