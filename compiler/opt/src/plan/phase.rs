//! The phase launch of a strided `Direct` convolution (`conv_gemm.rs`): x split into its s² phases,
//! `phases[n][a·s + b][c][i][j] = x[n][c][s·i + a][s·j + b]` stored `[⌈H/s⌉][OW]`, so the GEMM packs its B
//! chunks from rows contiguous along the flat output position, as a stride-1 `Direct` one does from x
//! (x is read once and written once: the im2col copy it replaces is KH·KW / s² times larger). Images ×
//! channels × row phases are the parallel loop (a 3-channel stem's six iterations split evenly between
//! two threads), each row of x read once for all s column phases: one `vector(lanes)` loop storing
//! every column phase's strided load (one contiguous load and a shuffle per vector, the loads shared;
//! phases of unequal column counts in loops of their own), the remainder one more vector
//! ending at the row's last element. Elements past x's edge are not written: the window mask selects
//! zero wherever a tap reads them.

use super::kernel::KB;
use super::Planner;
use rlx_ir::lir::{Base, Buffer, Launch};
use rlx_ir::loops::{Access, Expr, IOp, Kernel, LoopKind, Stmt};
use rlx_ir::{DType, NodeId};
use std::collections::HashMap;

impl Planner<'_> {
    /// The phase launch before the kernel rooted at `r`, when its anchor is a strided `Direct`
    /// convolution (see the module doc).
    pub(super) fn phase_launch(&mut self, r: NodeId) -> Option<Launch> {
        let out = self.g.node(r).outputs[0];
        let a = self.fusion.anchor_of.get(&out).copied().unwrap_or(r);
        let d = self.conv_gemm.get(&a)?.direct.clone()?;
        let (s, _) = d.phases?;
        let node = self.g.node(a).clone();
        let x = node.inputs[0];
        let (sx, so) = (self.shape(x), self.shape(node.outputs[0]));
        let (nb, c, h, w, ow) = (sx[0], sx[1], sx[2] as i64, sx[3] as i64, so[3] as i64);
        let hp = (d.hw / so[3]) as i64;
        let shape = vec![nb, s * s, c, hp as usize, ow as usize];
        let pb = self.add_buffer(Buffer { base: Base::Arena, offset: 0, dtype: DType::F32, shape: shape.clone(), label: format!("{} (phases)", node.name) }, None);
        self.conv_gemm.get_mut(&a)?.col = Some(pb);
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let pp = kb.param(pb, &self.buffers[pb as usize].clone(), Access::Write);
        let (s, lanes) = (s as i64, self.lanes as i64);
        // Iteration u: image u / (C·s), channel u / s mod C, row phase a = u mod s; each of its rows is
        // read once for all s column phases (one loop storing each phase's vector where their column
        // counts agree).
        let u = kb.var();
        let nc = [Expr::i(IOp::Div, Expr::Var(u), Expr::Int((c as i64) * s)), Expr::i(IOp::Rem, Expr::i(IOp::Div, Expr::Var(u), Expr::Int(s)), Expr::Int(c as i64))];
        let body = {
            let mut stmts = Vec::new();
            for ph in 0..s {
                // Rows i with s·i + ph < H, columns j with s·j + pw < W (at most OW).
                let rows = (h - ph + s - 1) / s;
                let cols: Vec<i64> = (0..s).map(|pw| ((w - pw + s - 1) / s).clamp(0, ow)).collect();
                if rows == 0 {
                    continue;
                }
                let i = kb.var();
                // Column phases with the same column count share their runs.
                let mut groups: Vec<(i64, Vec<i64>)> = Vec::new();
                for pw in 0..s {
                    match groups.iter_mut().find(|g| g.0 == cols[pw as usize]) {
                        Some(g) => g.1.push(pw),
                        None => groups.push((cols[pw as usize], vec![pw])),
                    }
                }
                let mut row = Vec::new();
                for (n, pws) in groups.into_iter().filter(|g| g.0 > 0) {
                    for (start, count, width) in super::im2col::vector_runs(0, n, lanes) {
                        let j = kb.var();
                        let col = Expr::add(Expr::Int(start), Expr::Var(j));
                        let mut body = Vec::new();
                        for &pw in &pws {
                            let xi = [nc[0].clone(), nc[1].clone(), Expr::add(Expr::mul(Expr::Var(i), Expr::Int(s)), Expr::Int(ph)), Expr::add(Expr::mul(col.clone(), Expr::Int(s)), Expr::Int(pw))];
                            let v = self.elem(&mut kb, x, &xi);
                            let pi = [nc[0].clone(), Expr::Int(ph * s + pw), nc[1].clone(), Expr::Var(i), col.clone()];
                            body.push(Stmt::Store { buf: pp, index: super::index::linear(&pi, &shape), value: v });
                        }
                        let kind = LoopKind::run(width as u32);
                        row.push(Stmt::For { var: j, extent: count, kind, body });
                    }
                }
                let rows = Stmt::For { var: i, extent: rows, kind: LoopKind::Serial, body: row };
                stmts.push(Stmt::If { cond: Expr::i(IOp::Eq, Expr::i(IOp::Rem, Expr::Var(u), Expr::Int(s)), Expr::Int(ph)), body: vec![rows] });
            }
            vec![Stmt::For { var: u, extent: (nb * c) as i64 * s, kind: LoopKind::Parallel, body: stmts }]
        };
        let kernel = Kernel { name: format!("{} (phases)", node.name), params: kb.params, body, vars: kb.vars };
        Some(Launch { nodes: vec![], kernel, bindings: kb.bindings })
    }
}
