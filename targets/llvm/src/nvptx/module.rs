//! LIR → LLVM IR text for NVPTX: one `ptx_kernel` function `k{I}` per launch. The thread's global
//! index `gi = ctaid.x · ntid.x + tid.x` is bounds-checked against the grid's size and unflattened
//! into the grid loops' variables (the innermost varies fastest); the body inside the grid loops is
//! written by the CPU writer's statement writer (`ir::gpu_body`).

use crate::ir::gpu_body;
use rlx_ir::lir::{Base, Lir};
use rlx_ir::loops::grid::{buffers_of, grid};
use rlx_ir::loops::tiled::Plan;
use rlx_ir::loops::Access;
use rlx_ir::schedule::{param_range, BaseBuf, SchedDispatch};
use std::collections::BTreeSet;
use std::fmt::Write;

use super::half_weights::{HalfCopy, HalfWeights, Halves};
use super::BLOCK;

/// What a cooperative kernel is, for the IR's comments.
fn plan_name(p: &Plan) -> String {
    match p {
        Plan::Matmul { r, .. } => format!("tiled matmul, {r}x{r} outputs per thread"),
        Plan::Reduce { .. } => "row reduction, one warp per row".into(),
        Plan::Rows { .. } => "row kernel, one warp per row".into(),
        Plan::Attention(a) => format!("fused attention over {} keys, one warp per query row", a.keys),
    }
}

/// The module text, the dispatches (in launch order) and the launches' names. `tiles`: write the
/// kernels `rlx_ir::loops::tiled` recognizes cooperatively (`tiled.rs`); without, every kernel runs
/// one thread per grid point (the reference the cooperative kernels are checked against).
/// With `--precision bf16|fp16` also the 16-bit weight copies the matmul tiles read (`half_weights.rs`):
/// their list and the bytes to append to the weights. `pdl`: the instructions every kernel begins
/// with (`pdl.rs`'s programmatic-dependent-launch prologue, sm_90).
pub fn module_text(lir: &Lir, bases: &[BaseBuf], tiles: bool, mma: super::Mma, pdl: Option<&str>, smem: i64, wgmma: bool, tf32: &[u32]) -> Result<(String, Vec<SchedDispatch>, Vec<String>, Vec<HalfCopy>, Vec<u8>), String> {
    let mut halves = HalfWeights::new(lir, mma);
    let wbind = bases.iter().position(|x| x.base == Base::Weights).unwrap_or(0);
    let mut decls = BTreeSet::new();
    let mut globals: Vec<String> = Vec::new();
    let mut fns = String::new();
    let mut dispatches = Vec::new();
    let mut names = Vec::new();
    let nb = bases.len();
    let sig: Vec<String> = (0..nb).map(|b| format!("ptr addrspace(1) noalias %b{b}")).collect();
    let mut kernels = Vec::new();
    let mut min_blocks = Vec::new();
    // The alias scopes' metadata (alias.rs), numbered after the annotations' (at most two per launch).
    let (mut next_md, mut alias_md) = (2 * lir.launches.len(), String::new());
    for (li, l) in lir.launches.iter().enumerate() {
        // A collective: a schedule entry the executor issues through NCCL, no PTX function.
        if let Some(d) = super::comm::dispatch(lir, bases, li, l)? {
            dispatches.push(d);
            names.push(l.kernel.name.clone());
            continue;
        }
        kernels.push(li);
        let k = &l.kernel;
        let (loads, stores) = (buffers_of(&k.body, false), buffers_of(&k.body, true));
        let mut params = Vec::new();
        let mut offsets = Vec::new();
        let mut ranges = Vec::new();
        let mut setup = String::new();
        let mut own = Vec::new();
        let mut param_bases = Vec::new();
        // The parameters holding tf32-rounded values (`half_activations.rs`): stored rounded, staged as they are.
        let rounded: Vec<u32> = (0..l.bindings.len() as u32).filter(|&pi| tf32.contains(&l.bindings[pi as usize])).collect();
        for (pi, &b) in l.bindings.iter().enumerate() {
            let buf = lir.buffers.get(b as usize).ok_or_else(|| format!("kernel '{}': binding {pi} names buffer {b}, the program has {}", k.name, lir.buffers.len()))?;
            let bind = bases.iter().position(|x| x.base == buf.base).ok_or_else(|| format!("kernel '{}': buffer '{}' has no base", k.name, buf.label))?;
            let end = buf.offset as u64 + buf.bytes() as u64;
            if end > bases[bind].bytes {
                return Err(format!("kernel '{}': buffer '{}' ({} bytes at {}) does not fit its base of {} bytes", k.name, buf.label, buf.bytes(), buf.offset, bases[bind].bytes));
            }
            let dtype = k.params.get(pi).map_or(buf.dtype, |p| p.dtype);
            let _ = writeln!(setup, "  %p{pi} = getelementptr inbounds i8, ptr %g{bind}, i64 {}", buf.offset);
            params.push((dtype, format!("%p{pi}")));
            own.push(matches!(dtype, rlx_ir::DType::BF16 | rlx_ir::DType::F16).then_some((bind, buf.offset as u64)));
            param_bases.push(bind);
            offsets.push(buf.offset as u64);
            let declared = k.params.get(pi).map_or(Access::ReadWrite, |p| p.access);
            ranges.push(param_range(lir, b, bind, declared, loads.contains(&(pi as u32)), stores.contains(&(pi as u32))));
        }
        let spans: Vec<(usize, u64, u64)> = ranges.iter().map(|r| (r.binding as usize, r.start, r.end)).collect();
        let alias = super::alias::scopes(li, &spans, &mut next_md, &mut alias_md);
        let (dims, inner) = grid(k, i32::MAX as i64);
        let total: i64 = if dims.is_empty() { 1 } else { dims.iter().map(|d| d.1).product() };
        let body = if dims.is_empty() { &k.body[..] } else if total == 0 { &[][..] } else { inner };
        let bound: Vec<(rlx_ir::loops::Var, String)> = dims.iter().map(|(v, _)| (*v, format!("%g.v{}", v.0))).collect();
        // Matmuls, row kernels and row reductions of the shapes the shared recognizer finds: shared
        // memory, barriers and warp shuffles (tiled.rs). Everything else: one thread per grid point.
        // A kernel without a grid loop (one row: a decode step's norms) is a grid of one, as in the
        // shader writer: its row phases still spread over a block's threads.
        let plan = if total > 0 && tiles { rlx_ir::loops::tiled::recognize(k, &dims, body) } else { None };
        if let Some(plan) = plan {
            let mut casts = String::new();
            for bind in 0..nb {
                let _ = writeln!(casts, "  %g{bind} = addrspacecast ptr addrspace(1) %b{bind} to ptr");
            }
            casts.push_str(&setup);
            let mut h = Halves { weights: halves.as_mut(), bindings: &l.bindings, wbind, own: &own, tf32: &rounded, bases: &param_bases };
            let t = super::tiled::kernel(li, &sig.join(", "), &casts, params, alias, &offsets, &plan, mma, smem, wgmma, &mut h, &mut decls).map_err(|e| format!("kernel '{}': {e}", k.name))?;
            let _ = writeln!(fns, "; launch {li}: {:?} ({})", k.name, plan_name(&plan));
            fns.push_str(&match pdl {
                Some(p) => super::pdl::with_prologue(&t.text, p),
                None => t.text,
            });
            // One declaration of the dynamic shared array every pipelined tile shares (cp_async.rs).
            for g in t.globals {
                if !globals.contains(&g) {
                    globals.push(g);
                }
            }
            if t.min_blocks > 0 {
                min_blocks.push((li, t.min_blocks));
            }
            dispatches.push(SchedDispatch { entry: li as u32, groups: t.groups, block: [t.block, 1, 1], shared: t.shared, ranges, comm: None });
            names.push(k.name.clone());
            continue;
        }
        let (allocas, text) = gpu_body(body, params, alias, &bound, rounded, &mut decls);
        let mut f = String::new();
        let _ = writeln!(f, "; launch {li}: {:?}", k.name);
        let _ = writeln!(f, "define ptx_kernel void @k{li}({}) #0 {{\nentry:", sig.join(", "));
        f.push_str(pdl.unwrap_or(""));
        f.push_str(&allocas);
        for (_, slot) in &bound {
            let _ = writeln!(f, "  {slot} = alloca i64");
        }
        f.push_str("  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()\n  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()\n");
        f.push_str("  %tid64 = zext i32 %tid to i64\n  %ctaid64 = zext i32 %ctaid to i64\n  %ntid64 = zext i32 %ntid to i64\n");
        f.push_str("  %gi.base = mul nuw nsw i64 %ctaid64, %ntid64\n  %gi = add nuw nsw i64 %gi.base, %tid64\n");
        let _ = writeln!(f, "  %in.grid = icmp slt i64 %gi, {total}\n  br i1 %in.grid, label %grid, label %exit\ngrid:");
        for bind in 0..nb {
            let _ = writeln!(f, "  %g{bind} = addrspacecast ptr addrspace(1) %b{bind} to ptr");
        }
        f.push_str(&setup);
        let mut stride = total.max(1);
        for ((_, e), (_, slot)) in dims.iter().zip(&bound) {
            stride /= (*e).max(1);
            let v = &slot[3..];
            let _ = writeln!(f, "  %q.{v} = udiv i64 %gi, {stride}\n  %r.{v} = urem i64 %q.{v}, {e}\n  store i64 %r.{v}, ptr {slot}");
        }
        f.push_str("  br label %start.bb\nstart.bb:\n");
        f.push_str(&text);
        f.push_str("  br label %exit\nexit:\n  ret void\n}\n\n");
        fns.push_str(&f);
        let groups = (total.max(1) as u64).div_ceil(BLOCK as u64);
        if groups > i32::MAX as u64 {
            return Err(format!("kernel '{}': {total} threads need more than 2^31 - 1 blocks", k.name));
        }
        dispatches.push(SchedDispatch { entry: li as u32, groups: [groups as u32, 1, 1], block: [BLOCK, 1, 1], shared: 0, ranges, comm: None });
        names.push(k.name.clone());
    }
    let mut m = String::new();
    let _ = writeln!(m, "; rlxc {} — CUDA module", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(m, "target triple = \"{}\"\n", super::TRIPLE);
    for g in &globals {
        m.push_str(g);
        m.push('\n');
    }
    if !globals.is_empty() {
        m.push('\n');
    }
    m.push_str(&fns);
    decls.insert("declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()".into());
    decls.insert("declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()".into());
    decls.insert("declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()".into());
    for d in &decls {
        m.push_str(d);
        m.push('\n');
    }
    let _ = writeln!(m, "\nattributes #0 = {{ nounwind }}\nattributes #1 = {{ convergent nounwind }}\nattributes #2 = {{ nounwind memory(none) }}\n");
    // Every kernel runs BLOCK threads per block: the register allocator may assume it; and some must
    // leave room for more than one block per SM (`Tiled::min_blocks`: `.minnctapersm`).
    let top = lir.launches.len();
    let ann: Vec<String> = kernels.iter().map(|li| format!("!{li}")).chain((0..min_blocks.len()).map(|i| format!("!{}", top + i))).collect();
    if !ann.is_empty() {
        let _ = writeln!(m, "!nvvm.annotations = !{{{}}}", ann.join(", "));
        for &li in &kernels {
            let _ = writeln!(m, "!{li} = !{{ptr @k{li}, !\"maxntidx\", i32 {BLOCK}}}");
        }
        for (i, (li, b)) in min_blocks.iter().enumerate() {
            let _ = writeln!(m, "!{} = !{{ptr @k{li}, !\"minctasm\", i32 {b}}}", top + i);
        }
    }
    m.push_str(&alias_md);
    let (copies, bytes) = halves.map_or((Vec::new(), Vec::new()), |h| (h.copies, h.bytes));
    Ok((m, dispatches, names, copies, bytes))
}
