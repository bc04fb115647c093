//! Pipeline parallelism: the nodes, in their (topological) order, cut into N contiguous stages of
//! about equal FLOPs. A value computed in stage s and read in a later stage t is sent by s right after
//! it is computed (`send`, whose output — the value sent — is an output of stage s) and received by t
//! before its first node (`recv`, in the order s sends). A stage takes the model inputs its nodes read,
//! and returns the model outputs it computes. Every rank receives in the global order of the values'
//! producers and senders send in that order, so blocking transfers cannot deadlock.

use super::{Note, Shard, Sharded};
use rlx_ir::{Def, Dim, Mir, MirOp, OpSet, ValueId};
use std::collections::BTreeMap;

/// FLOPs of a node, roughly: 2·M·N·K for products, one per output element otherwise.
fn flops(g: &Mir, i: usize) -> u64 {
    let node = &g.nodes[i];
    let out: u64 = node.outputs.iter().map(|&o| g.ty(o).shape.numel().unwrap_or(0) as u64).sum();
    let k = match node.op {
        MirOp::MatMul | MirOp::DequantMatMul => g.ty(node.inputs[0]).shape.as_fixed().and_then(|s| s.last().copied()).unwrap_or(1) as u64,
        MirOp::Conv { .. } => g.ty(node.inputs[1]).shape.as_fixed().map_or(1, |s| s[1..].iter().product::<usize>() as u64),
        _ => return out.max(1),
    };
    2 * out * k.max(1)
}

pub(super) fn pp(g: &Mir, n: usize) -> Result<Sharded, String> {
    let total: u64 = (0..g.nodes.len()).map(|i| flops(g, i)).sum();
    if g.nodes.len() < n {
        return Err(format!("--shard pp={n}: the model has {} nodes, fewer than {n} stages", g.nodes.len()));
    }
    // Stage of each node: cut where the running sum passes k/n of the total (by the node's middle).
    let mut stage = Vec::with_capacity(g.nodes.len());
    let mut run = 0u64;
    for i in 0..g.nodes.len() {
        let f = flops(g, i);
        let mid = run as u128 * 2 + f as u128;
        stage.push(((mid * n as u128) / (2 * total.max(1) as u128)).min(n as u128 - 1) as usize);
        run += f;
    }
    let mut notes = Vec::new();
    for s in 0..n {
        let nodes: Vec<usize> = (0..g.nodes.len()).filter(|&i| stage[i] == s).collect();
        if nodes.is_empty() {
            return Err(format!("--shard pp={n}: stage {s} gets no node: one node carries more than 1/{n} of the model's work"));
        }
        let f: u64 = nodes.iter().map(|&i| flops(g, i)).sum();
        notes.push(Note {
            node: g.nodes[nodes[0]].name.clone(),
            op: g.nodes[nodes[0]].op.kind().into(),
            msg: format!("stage {s} starts here: {} nodes, {:.1}% of the FLOPs", nodes.len(), 100.0 * f as f64 / total.max(1) as f64),
        });
    }
    // Producer stage of every computed value; the stages that read it.
    let mut made: BTreeMap<ValueId, (usize, usize)> = BTreeMap::new();
    for (i, node) in g.nodes.iter().enumerate() {
        for &o in &node.outputs {
            made.insert(o, (stage[i], i));
        }
    }
    let mut readers: BTreeMap<ValueId, Vec<usize>> = BTreeMap::new();
    for (i, node) in g.nodes.iter().enumerate() {
        for &v in &node.inputs {
            if let Some(&(s, _)) = made.get(&v) {
                if s != stage[i] {
                    let e = readers.entry(v).or_default();
                    if !e.contains(&stage[i]) {
                        e.push(stage[i]);
                    }
                }
            }
        }
    }
    for d in readers.values_mut() {
        d.sort();
    }
    let mut ranks = Vec::with_capacity(n);
    let (mut outputs, mut inputs) = (Vec::new(), Vec::new());
    for s in 0..n {
        let mut m = Mir::new();
        let mut map: BTreeMap<ValueId, ValueId> = BTreeMap::new();
        // The model inputs this stage reads (in model order); an output that is an input goes to the last stage.
        let mut ins = Vec::new();
        for (k, &i) in g.inputs.iter().enumerate() {
            let read = g.nodes.iter().enumerate().any(|(ni, nd)| stage[ni] == s && nd.inputs.contains(&i));
            let out = s == n - 1 && g.outputs.contains(&i);
            if read || out {
                let v = g.value(i);
                map.insert(i, m.add_input(v.name.as_deref().unwrap_or(""), v.ty.clone()));
                ins.push(k);
            }
        }
        // Receives, in the order of the values' producers.
        for (&v, dests) in &readers {
            let (src, pi) = made[&v];
            if dests.contains(&s) {
                let ty = g.ty(v);
                let op = MirOp::Recv { peer: src, dtype: ty.dtype, shape: ty.shape.0.iter().cloned().collect::<Vec<Dim>>() };
                let id = m.add1(&format!("{}/recv", g.nodes[pi].name), op, &[])?;
                m.values[id.index()].name = g.value(v).name.clone();
                map.insert(v, id);
            }
        }
        let mut outs: Vec<(ValueId, Option<usize>)> = Vec::new();
        for (i, node) in g.nodes.iter().enumerate().filter(|&(i, _)| stage[i] == s) {
            let mut ids = Vec::with_capacity(node.inputs.len());
            for &v in &node.inputs {
                let id = match map.get(&v) {
                    Some(&id) => id,
                    None => match &g.value(v).def {
                        Def::Const(c) => {
                            let id = m.add_const(g.value(v).name.as_deref(), c.clone());
                            map.insert(v, id);
                            id
                        }
                        _ => return Err(format!("node '{}': value {v} is not available in stage {s}", node.name)),
                    },
                };
                ids.push(id);
            }
            let new = m.add_node(&node.name, node.op.clone(), &ids).map_err(|e| format!("node '{}' ({}): {e}", node.name, node.op.kind()))?;
            for (&o, &id) in node.outputs.iter().zip(&new) {
                m.values[id.index()].name = g.value(o).name.clone();
                map.insert(o, id);
                for &t in readers.get(&o).map(Vec::as_slice).unwrap_or(&[]) {
                    let sent = m.add1(&format!("{}/send{t}", node.name), MirOp::Send { peer: t }, &[id])?;
                    let name = g.value(o).name.clone().unwrap_or_else(|| format!("v{}", o.0));
                    m.values[sent.index()].name = Some(format!("{name}@send{t}"));
                    outs.push((sent, None));
                }
            }
            let _ = i;
        }
        // The model outputs this stage computes (or a model input / constant output, on the last stage).
        let mut model_outs = Vec::new();
        for (k, &o) in g.outputs.iter().enumerate() {
            let mine = match made.get(&o) {
                Some(&(ps, _)) => ps == s,
                None => s == n - 1,
            };
            if mine {
                let id = match map.get(&o) {
                    Some(&id) => id,
                    None => match &g.value(o).def {
                        Def::Const(c) => m.add_const(g.value(o).name.as_deref(), c.clone()),
                        _ => return Err(format!("output {k} is not available in stage {s}")),
                    },
                };
                model_outs.push((id, Some(k)));
            }
        }
        model_outs.extend(outs);
        m.outputs = model_outs.iter().map(|x| x.0).collect();
        outputs.push(model_outs.iter().map(|x| x.1).collect());
        inputs.push(ins);
        ranks.push(m);
    }
    let parts = inputs.iter().map(|i: &Vec<usize>| vec![None; i.len()]).collect();
    Ok(Sharded { shard: Shard::Pp(n), ranks, notes, outputs, inputs, parts })
}
