//! The im2col launch of a convolution on the GEMM micro-kernel (`conv_gemm.rs`): `col[n][(c, k…)][(o…)]
//! = x[n][c][o·s − pad + k·d]`, zero where the window reads padding. Images × channels × the kernel
//! dims but the last are the parallel loop; the last kernel dim is unrolled, so for each of its taps the
//! output columns whose input column is inside the input are known at compile time: the columns before
//! and after them are stored as zeros, the ones inside copied by `vector(lanes)` loops (unit-stride or
//! strided loads of one input row, no check per column; the remainder one more vector ending at the
//! last column, overlapping the one before). A row of the other spatial dims that falls in the padding
//! selects zero for the whole row (one uniform condition).

use super::index::{clamp, linear};
use super::kernel::{lit, nest, KB};
use super::Planner;
use rlx_ir::lir::{Base, Buffer, Launch};
use rlx_ir::loops::{Access, Expr, IOp, Kernel, LoopKind, Stmt};
use rlx_ir::{DType, MirOp, NodeId};
use std::collections::HashMap;

/// A run of `n` columns from `lo` as (first column, count, width) loops: vectors of the lanes (halved
/// down to 4 for a short run), then one more vector ending at the run's last column; one scalar loop
/// when the run is under 4 columns.
pub(super) fn vector_runs(lo: i64, n: i64, lanes: i64) -> Vec<(i64, i64, i64)> {
    let mut vl = lanes;
    while vl > 4 && vl > n {
        vl /= 2;
    }
    if vl < 4 || n < vl {
        return vec![(lo, n, 1)];
    }
    let full = n / vl * vl;
    let mut runs = vec![(lo, full, vl)];
    if full < n {
        runs.push((lo + n - vl, vl, vl));
    }
    runs
}

impl Planner<'_> {
    /// The im2col launch before the kernel rooted at `r`, when its anchor is a convolution on the GEMM
    /// path that needs one (see the module doc).
    pub(super) fn im2col_launch(&mut self, r: NodeId) -> Option<Launch> {
        let out = self.g.node(r).outputs[0];
        let a = self.fusion.anchor_of.get(&out).copied().unwrap_or(r);
        let cg = self.conv_gemm.get(&a)?;
        if !cg.im2col {
            return None;
        }
        let node = self.g.node(a).clone();
        let MirOp::Conv { strides, pads, dilations, .. } = &node.op else { return None };
        let x = node.inputs[0];
        let (sx, sw, so) = (self.shape(x), self.shape(node.inputs[1]), self.shape(node.outputs[0]));
        let sp = sx.len() - 2;
        // The col buffer [N, K, P] in row-major order is the space [N, C, k…, o…].
        let mut space = vec![sx[0], sx[1]];
        space.extend_from_slice(&sw[2..]);
        space.extend_from_slice(&so[2..]);
        let kdim: usize = sx[1] * sw[2..].iter().product::<usize>();
        let pn: usize = so[2..].iter().product();
        let col = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: vec![sx[0], kdim, pn], label: format!("{} (im2col)", node.name) }, None);
        self.conv_gemm.get_mut(&a)?.col = Some(col);
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let cb = self.buffers[col as usize].clone();
        let cp = kb.param(col, &cb, Access::Write);
        // The last spatial dim: kernel taps, output and input columns, stride, leading pad, dilation.
        let (kl, ol, wl) = (sw[1 + sp] as i64, so[1 + sp] as i64, sx[1 + sp] as i64);
        let (sl, pl, dl) = (strides[sp - 1] as i64, pads[sp - 1] as i64, dilations[sp - 1] as i64);
        let lanes = self.lanes as i64;
        // Parallel over [N, C, k… but the last]; serial over the output dims but the last.
        let mut pspace = vec![sx[0], sx[1]];
        pspace.extend_from_slice(&sw[2..1 + sp]);
        let oshape = so[2..1 + sp].to_vec();
        let body = nest(&mut kb, &pspace, LoopKind::Parallel, &mut |kb, pidx| {
            nest(kb, &oshape, LoopKind::Serial, &mut |kb, oidx| {
                // The input position along the other spatial dims, and whether it is inside the input.
                let mut xi = vec![pidx[0].clone(), pidx[1].clone()];
                let mut cond: Option<Expr> = None;
                for i in 0..sp - 1 {
                    let pos = Expr::add(Expr::i(IOp::Sub, Expr::mul(oidx[i].clone(), Expr::Int(strides[i] as i64)), Expr::Int(pads[i] as i64)), Expr::mul(pidx[2 + i].clone(), Expr::Int(dilations[i] as i64)));
                    let d = sx[2 + i] as i64;
                    if pads[i] > 0 || pads[i + sp] > 0 {
                        let ok = Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(0), pos.clone()), Expr::i(IOp::Lt, pos.clone(), Expr::Int(d)));
                        cond = Some(match cond.take() {
                            Some(p) => Expr::i(IOp::And, p, ok),
                            None => ok,
                        });
                        // Clamped so the load stays in bounds; the select discards it.
                        xi.push(clamp(pos, 0, d - 1));
                    } else {
                        xi.push(pos);
                    }
                }
                let mut stmts = Vec::new();
                for t in 0..kl {
                    // Output columns c with 0 <= c·s − p + t·d < w: [lo, hi).
                    let first = pl - t * dl;
                    let lo = if first <= 0 { 0 } else { (first + sl - 1) / sl }.min(ol);
                    let last = wl - 1 + pl - t * dl;
                    let hi = if last < 0 { lo } else { (last / sl + 1).clamp(lo, ol) };
                    let at = |c: Expr| {
                        let mut i = pidx.to_vec();
                        i.push(Expr::Int(t));
                        i.extend(oidx.iter().cloned());
                        i.push(c);
                        linear(&i, &space)
                    };
                    // (first column, count, lanes, copy?): zeros before, the copy, its last vector, zeros after.
                    let mut ranges = vec![(0, lo, 1, false)];
                    ranges.extend(vector_runs(lo, hi - lo, lanes).into_iter().map(|(s, c, w)| (s, c, w, true)));
                    ranges.push((hi, ol - hi, 1, false));
                    for (start, count, width, copy) in ranges {
                        if count <= 0 {
                            continue;
                        }
                        let j = kb.var();
                        let c = Expr::add(Expr::Int(start), Expr::Var(j));
                        let v = if copy {
                            let mut xr = xi.clone();
                            xr.push(Expr::add(Expr::i(IOp::Sub, Expr::mul(c.clone(), Expr::Int(sl)), Expr::Int(pl)), Expr::Int(t * dl)));
                            let xv = self.elem(kb, x, &xr);
                            match &cond {
                                Some(k) => Expr::Select(Box::new(k.clone()), Box::new(xv), Box::new(lit(0.0, DType::F32))),
                                None => xv,
                            }
                        } else {
                            lit(0.0, DType::F32)
                        };
                        let kind = LoopKind::run(width as u32);
                        stmts.push(Stmt::For { var: j, extent: count, kind, body: vec![Stmt::Store { buf: cp, index: at(c), value: v }] });
                    }
                }
                stmts
            })
        });
        let kernel = Kernel { name: format!("{} (im2col)", node.name), params: kb.params, body, vars: kb.vars };
        Some(Launch { nodes: vec![], kernel, bindings: kb.bindings })
    }
}
