//! Control-flow regions (`loop`, `if`: `rlx_ir::region`) in LIR: each body planned as a program of its
//! own (its inputs and outputs the caller's buffers, its constants appended to the outer weights blob),
//! and the op a [`Region`] in place of one launch whose bindings are every buffer the region touches —
//! operands, results, the bodies' arena, a loop's temporaries — so the arena plan keeps them alive for
//! the whole region. The CPU writers turn it into control flow in the driver (`rlx_ir::lir::Region`).

use super::{plan, Planner};
use rlx_ir::lir::{Base, Buffer, Launch, Lir, Region, RegionKind};
use rlx_ir::loops::{Access, Kernel, Param};
use rlx_ir::verify::Problem;
use rlx_ir::{ConstData, DType, MirOp, NodeId, OpSet};

/// Moves every weights offset of `lir` (and of its regions' bodies) by `by` bytes.
fn rebase_weights(lir: &mut Lir, by: usize) {
    for b in &mut lir.buffers {
        if b.base == Base::Weights {
            b.offset += by;
        }
    }
    for r in &mut lir.regions {
        for body in &mut r.bodies {
            rebase_weights(body, by);
        }
    }
}

impl Planner<'_> {
    fn region_temp(&mut self, dtype: DType, shape: Vec<usize>, label: String) -> u32 {
        self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype, shape, label }, None)
    }

    /// The launch and region of region node `r`, to be launch number `at`.
    pub(super) fn region_launch(&mut self, r: NodeId, at: usize) -> Result<(Launch, Region), Vec<Problem>> {
        let node = self.g.node(r).clone();
        let (kind, graphs) = match &node.op {
            MirOp::Loop { max_trips, carried, body } => (RegionKind::Loop { max_trips: *max_trips, carried: *carried }, &body[..]),
            MirOp::If { branches } => (RegionKind::If, &branches[..]),
            other => unreachable!("{} is not a region op", other.kind()),
        };
        let name = node.name.clone();
        let mut bodies = Vec::new();
        for (k, g) in graphs.iter().enumerate() {
            if !g.state.is_empty() {
                return Err(vec![Problem { node: Some(name.clone()), msg: "a region body with state tensors is not compiled".into() }]);
            }
            let mut body = plan(g, &self.opts).map_err(|ps| {
                ps.into_iter().map(|p| Problem { node: Some(format!("{name}, region {k}{}", p.node.map(|n| format!(", node '{n}'")).unwrap_or_default())), msg: p.msg }).collect::<Vec<_>>()
            })?;
            let off = super::index::align_up(self.weights.len(), self.align);
            self.weights.resize(off, 0);
            self.weights.extend_from_slice(&std::mem::take(&mut body.weights));
            rebase_weights(&mut body, off);
            bodies.push(body);
        }
        let buf = |p: &Self, v: rlx_ir::ValueId| p.buf_of[v.index()].expect("a region op's operands and results are materialized");
        let operands: Vec<u32> = node.inputs.iter().map(|&v| buf(self, v)).collect();
        let results: Vec<u32> = node.outputs.iter().map(|&v| buf(self, v)).collect();
        let arena = bodies.iter().map(|b| b.arena_bytes).max().unwrap_or(0);
        let scratch = (arena > 0).then(|| self.region_temp(DType::U8, vec![arena], format!("{name} (region arena)")));
        let (mut temps, mut truth) = (Vec::new(), None);
        if let RegionKind::Loop { carried, .. } = kind {
            let body = &graphs[0];
            for k in 0..1 + carried {
                let v = body.outputs[k];
                let ty = body.ty(v);
                let Some(shape) = ty.shape.as_fixed() else {
                    return Err(vec![Problem { node: Some(name.clone()), msg: format!("loop-carried value {k} has the symbolic shape {} (bind its dims with --dim)", ty.shape) }]);
                };
                temps.push(self.region_temp(ty.dtype, shape, format!("{name} (next {})", if k == 0 { "condition".to_string() } else { format!("carried {}", k - 1) })));
            }
            truth = Some(self.add_weight(format!("{name} (true)"), &ConstData::scalar(DType::Bool, 1.0)));
        }
        let bindings: Vec<u32> = operands.iter().chain(&results).chain(&scratch).chain(&temps).chain(&truth).copied().collect();
        let params = bindings
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                let bb = &self.buffers[b as usize];
                let access = if i < operands.len() || Some(b) == truth { Access::Read } else { Access::ReadWrite };
                Param { dtype: bb.dtype, elems: bb.elems(), access }
            })
            .collect();
        let launch = Launch { nodes: vec![r], kernel: Kernel { name, params, body: Vec::new(), vars: 0 }, bindings };
        Ok((launch, Region { launch: at, kind, bodies, operands, results, scratch, temps, truth }))
    }
}
