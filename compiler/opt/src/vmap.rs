//! `vmap`: a graph mapped over a new leading axis, as a MIR transform. The chosen inputs gain a
//! leading axis of `size`; every node that reads a batched value is rewritten to carry that axis at
//! position 0 (`f(x)` row by row, in one graph), nodes that read none are copied unchanged, and every
//! output is batched (an unbatched one is broadcast), so output `k` row `i` = `f(inputs row i)[k]`.
//!
//! Rules: elementwise ops (unary, binary, `where`, `cast`: a batched operand of lower
//! rank than the result gets unit axes after the batch axis, so numpy broadcasting still aligns the
//! trailing dims), `matmul` (1-D operands promoted to matrices, the batched ones given the batch
//! axis, the result reshaped back), reductions and arg-reductions (axes shifted), `reshape`,
//! `transpose`, `expand`, `slice`, `concat` (unbatched parts broadcast first), `gather` of batched
//! data with unbatched indices, `fake_quantize` of a batched input with unbatched scale and zero
//! point (its axis shifted). Any other op reading a batched value is an error naming the node
//! and op.

use rlx_ir::{Def, Dim, Mir, MirOp, OpSet, TensorType, ValueId};

fn fixed(t: &TensorType, what: &str) -> Result<Vec<usize>, String> {
    t.shape.as_fixed().ok_or_else(|| format!("vmap needs fixed shapes: {what} is {t}"))
}

fn dims(s: &[usize]) -> Vec<Dim> {
    s.iter().map(|&d| Dim::Fixed(d as u64)).collect()
}

struct V<'a> {
    g: Mir,
    size: usize,
    name: &'a str,
    n: usize,
}

impl V<'_> {
    fn op(&mut self, op: MirOp, ins: &[ValueId]) -> Result<ValueId, String> {
        self.n += 1;
        let name = format!("{}/vmap#{}", self.name, self.n);
        self.g.add1(&name, op, ins)
    }
    /// `v` reshaped to `shape` (no node when it already has it).
    fn reshape(&mut self, v: ValueId, shape: &[usize]) -> Result<ValueId, String> {
        if self.g.ty(v).shape.as_fixed().as_deref() == Some(shape) {
            return Ok(v);
        }
        self.op(MirOp::Reshape { shape: dims(shape) }, &[v])
    }
    /// A batched value of unbatched shape `s` given rank `r` (+ the batch axis): unit axes after it.
    fn lift(&mut self, v: ValueId, s: &[usize], r: usize) -> Result<ValueId, String> {
        let mut shape = vec![self.size];
        shape.extend(std::iter::repeat_n(1, r.saturating_sub(s.len())));
        shape.extend_from_slice(s);
        self.reshape(v, &shape)
    }
    /// An unbatched value broadcast to [size, …shape].
    fn broadcast(&mut self, v: ValueId, s: &[usize]) -> Result<ValueId, String> {
        let mut shape = vec![self.size];
        shape.extend_from_slice(s);
        self.op(MirOp::Expand { shape: dims(&shape) }, &[v])
    }
}

/// `g` mapped over a new leading axis of `size` on the inputs listed in `batched` (input indices).
pub fn vmap(g: &Mir, batched: &[usize], size: usize) -> Result<Mir, String> {
    if size == 0 {
        return Err("vmap: the mapped axis must have at least one row".into());
    }
    if let Some(&i) = batched.iter().find(|&&i| i >= g.inputs.len()) {
        return Err(format!("vmap: input {i} does not exist (the graph has {})", g.inputs.len()));
    }
    let mut v = V { g: Mir::new(), size, name: "", n: 0 };
    // old value → (new value, batched)
    let mut map: Vec<Option<(ValueId, bool)>> = vec![None; g.values.len()];
    for (k, &i) in g.inputs.iter().enumerate() {
        let t = g.ty(i);
        let b = batched.contains(&k);
        let mut shape = t.shape.0.clone();
        if b {
            shape.insert(0, Dim::Fixed(size as u64));
        }
        let name = g.value(i).name.clone().unwrap_or_else(|| format!("input{k}"));
        map[i.index()] = Some((v.g.add_input(&name, TensorType::new(t.dtype, rlx_ir::Shape(shape))), b));
    }
    for (k, val) in g.values.iter().enumerate() {
        if let Def::Const(c) = &val.def {
            map[k] = Some((v.g.add_const(val.name.as_deref(), c.clone()), false));
        }
    }
    for node in &g.nodes {
        let ins: Vec<(ValueId, bool)> = node.inputs.iter().map(|i| map[i.index()].ok_or_else(|| format!("node '{}': an input is not defined before it", node.name))).collect::<Result<_, _>>()?;
        let vals: Vec<ValueId> = ins.iter().map(|p| p.0).collect();
        if !ins.iter().any(|p| p.1) {
            let outs = v.g.add_node(&node.name, node.op.clone(), &vals)?;
            for (o, n) in node.outputs.iter().zip(outs) {
                map[o.index()] = Some((n, false));
            }
            continue;
        }
        if node.outputs.len() != 1 {
            return Err(format!("node '{}' ({}): vmap has no rule for an op with {} outputs", node.name, node.op.kind(), node.outputs.len()));
        }
        v.name = &node.name;
        v.n = 0;
        let out = fixed(g.ty(node.outputs[0]), &format!("the output of node '{}'", node.name))?;
        let orig: Vec<Vec<usize>> = node.inputs.iter().map(|&i| fixed(g.ty(i), &format!("an input of node '{}'", node.name))).collect::<Result<_, _>>()?;
        let shift = |a: &[usize]| a.iter().map(|x| x + 1).collect::<Vec<usize>>();
        let r = match &node.op {
            MirOp::Unary(_) | MirOp::Binary(_) | MirOp::Where | MirOp::Cast { .. } => {
                let mut xs = Vec::new();
                for (k, &(x, b)) in ins.iter().enumerate() {
                    xs.push(if b { v.lift(x, &orig[k], out.len())? } else { x });
                }
                v.op(node.op.clone(), &xs)?
            }
            MirOp::MatMul => {
                let (sa, sb) = (&orig[0], &orig[1]);
                let a2 = if sa.len() == 1 { vec![1, sa[0]] } else { sa.clone() };
                let b2 = if sb.len() == 1 { vec![sb[0], 1] } else { sb.clone() };
                let rank = a2.len().max(b2.len());
                let mut xs = Vec::new();
                for (k, s2) in [a2, b2].iter().enumerate() {
                    let (x, b) = ins[k];
                    xs.push(if b { v.lift(x, s2, rank)? } else { v.reshape(x, s2)? });
                }
                let m = v.op(MirOp::MatMul, &xs)?;
                let mut want = vec![size];
                want.extend_from_slice(&out);
                v.reshape(m, &want)?
            }
            MirOp::Reduce { op, axes, keepdims } => v.op(MirOp::Reduce { op: *op, axes: shift(axes), keepdims: *keepdims }, &vals)?,
            MirOp::ArgReduce { op, axis, keepdims, select_last } => v.op(MirOp::ArgReduce { op: *op, axis: axis + 1, keepdims: *keepdims, select_last: *select_last }, &vals)?,
            MirOp::Reshape { .. } => {
                let mut want = vec![size];
                want.extend_from_slice(&out);
                v.reshape(vals[0], &want)?
            }
            MirOp::Transpose { perm } => {
                let mut p = vec![0];
                p.extend(shift(perm));
                v.op(MirOp::Transpose { perm: p }, &vals)?
            }
            MirOp::Expand { .. } => {
                let x = v.lift(vals[0], &orig[0], out.len())?;
                let mut want = vec![size];
                want.extend_from_slice(&out);
                v.op(MirOp::Expand { shape: dims(&want) }, &[x])?
            }
            MirOp::Slice { axes, starts, ends, steps } => v.op(MirOp::Slice { axes: shift(axes), starts: starts.clone(), ends: ends.clone(), steps: steps.clone() }, &vals)?,
            MirOp::Concat { axis } => {
                let mut xs = Vec::new();
                for (k, &(x, b)) in ins.iter().enumerate() {
                    xs.push(if b { x } else { v.broadcast(x, &orig[k])? });
                }
                v.op(MirOp::Concat { axis: axis + 1 }, &xs)?
            }
            MirOp::FakeQuantize { axis } if ins[1..].iter().all(|p| !p.1) => v.op(MirOp::FakeQuantize { axis: axis + 1 }, &vals)?,
            MirOp::Gather { axis } if ins[0].1 && !ins[1].1 => v.op(MirOp::Gather { axis: axis + 1 }, &vals)?,
            op => return Err(format!("node '{}' ({}): vmap has no rule for it on a batched value", node.name, op.kind())),
        };
        map[node.outputs[0].index()] = Some((r, true));
    }
    v.name = "output";
    for (k, &o) in g.outputs.iter().enumerate() {
        let (n, b) = map[o.index()].ok_or_else(|| format!("output {k} is not defined"))?;
        let n = if b { n } else { v.broadcast(n, &fixed(g.ty(o), &format!("output {k}"))?)? };
        v.g.outputs.push(n);
    }
    Ok(v.g)
}
