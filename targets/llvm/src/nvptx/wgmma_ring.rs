//! `wgmma.rs`'s tiles with their K slices copied by `cp.async` through a ring of N stages
//! (`RLX_CUDA_WGMMA=N`, N = 3 or 4 at compile time): the slices S − 1 ahead are in flight while the
//! tensor cores work on one. An operand with a 16-bit copy (a weight, `half_weights.rs`) is copied
//! straight into its ring in the 128-byte swizzled layout the descriptors read (16-byte chunk j of
//! row r at chunk j ^ r % 8); an f32 operand (activations) is copied as f32 into a ring of its own —
//! each thread's two 16-byte copies of a bf16 chunk at places only it reads back — and converted
//! (`cvt.rn` pairs) by the same thread into one of two swizzled slices while the previous slice's
//! `wgmma`s run, so no barrier stands between a copy landing and its conversion.
//!
//! Iteration s: issue slice s's `wgmma`s (asynchronous: `commit_group`, no wait); issue the copies
//! of slice s + N − 1 into the stage slice s − 1 held (its `wgmma`s were waited for before the last
//! barrier) and commit them as one group (empty past K); wait for this thread's copies of slice
//! s + 1 (`cp.async.wait_group N − 2`), convert its f32 chunks of it, `fence.proxy.async` (its
//! copies and stores are then visible to the tensor cores' reads after the barrier); wait for slice
//! s's `wgmma`s; one barrier.

use super::half_weights::Halves;
use super::tiled::{barrier, for_loop, if_, to_operand, unflatten};
use super::vec_tile::{block_origin, grid, Direct, Warps};
use super::Mma;
use crate::ir::Writer;
use rlx_ir::loops::tiled::Acc;
use rlx_ir::loops::Var;

const DSW: &str = "@dsw";
const TK: i64 = 64;
const ROW: i64 = 128;

/// One operand's regions (bytes from the aligned start): `ring` its N stages (swizzled bf16 where
/// `f32` is `None`, else f32 chunks) and, converted, `f32 = Some(two swizzled bf16 slices)`.
struct Regions {
    own: i64,
    ring: i64,
    stage: i64,
    conv: Option<i64>,
}

/// The pipelined body, or `None` where the stages do not fit the shared memory: the grid and the
/// dynamic shared bytes.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    w: &mut Writer, acc: &Acc, (a, b): (&Direct, &Direct), ptrs: &[String], (rows, cols, batch): (&[(Var, i64)], &[(Var, i64)], &[(Var, i64)]), (bm, bn): (i64, i64), kind: Mma, (stages, smem): (i64, i64),
    halves: &mut Halves, globals: &mut Vec<String>,
) -> Result<Option<([u32; 3], u32)>, String> {
    let (m, n, nb): (i64, i64, i64) = (rows.iter().map(|d| d.1).product(), cols.iter().map(|d| d.1).product(), batch.iter().map(|d| d.1).product());
    let (kv, kext) = acc.ks[0];
    let ab = if kind == Mma::Bf16 { "bf16" } else { "f16" };
    let wgm = bm / 64;
    let wn = bn / (2 / wgm);
    // Which operands have a 16-bit copy decides the layout; the copies are registered only once the
    // form is taken (the sizes do not depend on it: a weight has its copy whatever the form).
    let has_copy = |x: &Direct, h: &mut Halves| x.by8 && h.of_param(x.buf).is_some();
    let layout = |conv: [bool; 2]| {
        let mut at = 0;
        let mut regs = Vec::new();
        for (own, cv) in [(bm, conv[0]), (bn, conv[1])] {
            let stage = own * if cv { 2 * ROW } else { ROW };
            let ring = at;
            at += stages * stage;
            let c = cv.then(|| {
                let c = at;
                at += 2 * own * ROW;
                c
            });
            regs.push(Regions { own, ring, stage, conv: c });
        }
        (regs, at + 1024)
    };
    let conv = [!has_copy(a, halves), !has_copy(b, halves)];
    let (regs, bytes) = layout(conv);
    if bytes > smem {
        return Ok(None);
    }
    globals.push(format!("{DSW} = external addrspace(3) global [0 x i8], align 1024"));
    w.declare("declare void @llvm.nvvm.cp.async.cg.shared.global.16(ptr addrspace(3), ptr addrspace(1))");
    w.declare("declare void @llvm.nvvm.cp.async.commit.group()");
    w.declare("declare void @llvm.nvvm.cp.async.wait.group(i32)");
    let (tid, m0, n0, kslot) = block_origin(w, (bm, bn), batch, kv);
    let base = w.emit_op(format!("ptrtoint ptr addrspace(3) {DSW} to i64"));
    let al = w.emit_op(format!("add nuw nsw i64 {base}, 1023"));
    let al = w.emit_op(format!("and i64 {al}, -1024"));
    let pad = w.emit_op(format!("sub nuw nsw i64 {al}, {base}"));
    // Per chunk e = tid + 256·q of an operand (row e / 8, chunk e % 8): its global pointer at the
    // slice start, its swizzled place (bytes), its f32 places (two, from the ring stage's start).
    struct Chunk {
        ptr: String,
        swz: String,
        oi: usize,
        e: i64,
    }
    let mut chunks = Vec::new();
    for (oi, (x, base_rows, dims)) in [(a, &m0, rows), (b, &n0, cols)].into_iter().enumerate() {
        let copy = if conv[oi] { None } else { halves.of_param(x.buf) };
        let from = match copy {
            Some((bind, o)) => w.emit_op(format!("getelementptr inbounds i8, ptr %g{bind}, i64 {o}")),
            None => ptrs[x.buf as usize].clone(),
        };
        for q in 0..regs[oi].own * 8 / 256 {
            let e = w.emit_op(format!("add nuw nsw i64 {tid}, {}", 256 * q));
            let r = w.emit_op(format!("lshr i64 {e}, 3"));
            let j = w.emit_op(format!("and i64 {e}, 7"));
            let kq = w.emit_op(format!("shl nuw nsw i64 {j}, 3"));
            let g = w.emit_op(format!("add nuw nsw i64 {base_rows}, {r}"));
            unflatten(w, &g, dims);
            w.emit(&format!("store i64 {kq}, ptr {kslot}"));
            let idx = w.value(x.index);
            let ety = if copy.is_some() { "i16" } else { "float" };
            let ptr = w.emit_op(format!("getelementptr inbounds {ety}, ptr {from}, i64 {idx}"));
            let r7 = w.emit_op(format!("and i64 {r}, 7"));
            let sj = w.emit_op(format!("xor i64 {j}, {r7}"));
            let sj = w.emit_op(format!("shl nuw nsw i64 {sj}, 4"));
            let rb = w.emit_op(format!("shl nuw nsw i64 {r}, 7"));
            let d = w.emit_op(format!("add nuw nsw i64 {rb}, {sj}"));
            let swz = w.emit_op(format!("add nuw nsw i64 {d}, {pad}"));
            chunks.push(Chunk { ptr, swz, oi, e: q });
        }
    }
    let tid16 = w.emit_op(format!("shl nuw nsw i64 {tid}, 4"));
    let tid16 = w.emit_op(format!("add nuw nsw i64 {tid16}, {pad}"));
    // Byte `o` of the dynamic array (o from @dsw: the aligned start's `pad` already in).
    let at = |w: &mut Writer, o: &str| w.emit_op(format!("getelementptr inbounds i8, ptr addrspace(3) {DSW}, i64 {o}"));
    // Slice k0's copies into ring stage `st` (i64 values).
    let issue = |w: &mut Writer, k0: &str, st: &str| {
        w.emit(&format!("store i64 {k0}, ptr {kslot}"));
        let offs = [w.value(&a.kpart), w.value(&b.kpart)];
        for c in &chunks {
            let rg = &regs[c.oi];
            let so = w.emit_op(format!("mul nuw nsw i64 {st}, {}", rg.stage));
            let so = w.emit_op(format!("add nuw nsw i64 {so}, {}", rg.ring));
            let ety = if rg.conv.is_some() { "float" } else { "i16" };
            let src = w.emit_op(format!("getelementptr inbounds {ety}, ptr {}, i64 {}", c.ptr, offs[c.oi]));
            if rg.conv.is_some() {
                // Half h of chunk e (4 f32) at 16·(h·own·8 + e) of the stage: a thread's own places.
                for h in 0..2 {
                    let s4 = w.emit_op(format!("getelementptr inbounds float, ptr {src}, i64 {}", 4 * h));
                    let s4 = w.emit_op(format!("addrspacecast ptr {s4} to ptr addrspace(1)"));
                    let o = w.emit_op(format!("add nuw nsw i64 {so}, {tid16}"));
                    let o = w.emit_op(format!("add nuw nsw i64 {o}, {}", 16 * (h * rg.own * 8 + 256 * c.e)));
                    let dst = at(w, &o);
                    w.emit(&format!("call void @llvm.nvvm.cp.async.cg.shared.global.16(ptr addrspace(3) {dst}, ptr addrspace(1) {s4})"));
                }
            } else {
                let src = w.emit_op(format!("addrspacecast ptr {src} to ptr addrspace(1)"));
                let o = w.emit_op(format!("add nuw nsw i64 {so}, {}", c.swz));
                let dst = at(w, &o);
                w.emit(&format!("call void @llvm.nvvm.cp.async.cg.shared.global.16(ptr addrspace(3) {dst}, ptr addrspace(1) {src})"));
            }
        }
        w.emit("call void @llvm.nvvm.cp.async.commit.group()");
    };
    // This thread's f32 chunks of ring stage `st` → converted slice `cb` (0 / 1).
    let convert = |w: &mut Writer, st: &str, cb: &str| {
        for c in chunks.iter().filter(|c| regs[c.oi].conv.is_some()) {
            let rg = &regs[c.oi];
            let so = w.emit_op(format!("mul nuw nsw i64 {st}, {}", rg.stage));
            let so = w.emit_op(format!("add nuw nsw i64 {so}, {}", rg.ring));
            let mut x = Vec::new();
            for h in 0..2 {
                let o = w.emit_op(format!("add nuw nsw i64 {so}, {tid16}"));
                let o = w.emit_op(format!("add nuw nsw i64 {o}, {}", 16 * (h * rg.own * 8 + 256 * c.e)));
                let p = at(w, &o);
                let v = w.emit_op(format!("load <4 x float>, ptr addrspace(3) {p}, align 16"));
                x.extend((0..4).map(|i| w.emit_op(format!("extractelement <4 x float> {v}, i64 {i}"))));
            }
            let mut vv = "poison".to_string();
            for i in 0..4 {
                let word = to_operand(w, kind, &x[2 * i], Some(&x[2 * i + 1]));
                vv = w.emit_op(format!("insertelement <4 x i32> {vv}, i32 {word}, i64 {i}"));
            }
            let co = w.emit_op(format!("mul nuw nsw i64 {cb}, {}", rg.own * ROW));
            let co = w.emit_op(format!("add nuw nsw i64 {co}, {}", rg.conv.unwrap()));
            let o = w.emit_op(format!("add nuw nsw i64 {co}, {}", c.swz));
            let p = at(w, &o);
            w.emit(&format!("store <4 x i32> {vv}, ptr addrspace(3) {p}, align 16"));
        }
    };
    let fence = |w: &mut Writer| w.emit("call void asm sideeffect \"fence.proxy.async.shared::cta;\", \"~{memory}\"() #1");
    let wait_copies = |w: &mut Writer| w.emit(&format!("call void @llvm.nvvm.cp.async.wait.group(i32 {})", stages - 2));
    let wg = Warps::grouped(w, acc, &tid, (bm, bn), kind);
    let wp = w.emit_op(format!("lshr i64 {tid}, 5"));
    let grp = w.emit_op(format!("lshr i64 {wp}, 2"));
    let (arow, brow) = if wgm == 2 { (w.emit_op(format!("shl nuw nsw i64 {grp}, 6")), "0".to_string()) } else { ("0".to_string(), w.emit_op(format!("mul nuw nsw i64 {grp}, {wn}"))) };
    let fixed: u64 = (1 << 16) | (64 << 32) | (1 << 62);
    let accs = 4 * (wn / 8);
    let regs_d: Vec<String> = (0..wn / 8).flat_map(|j| (0..4).map(move |q| format!("%d{j}.{q}"))).collect();
    let list = (0..accs).map(|i| format!("${i}")).collect::<Vec<_>>().join(",");
    let mut text = format!("{{ .reg .pred p; setp.ne.b32 p, ${}, 0; wgmma.fence.sync.aligned; ", accs + 8);
    for s in 0..4 {
        text += &format!("wgmma.mma_async.sync.aligned.m64n{wn}k16.f32.{ab}.{ab} {{{list}}}, ${}, ${}, p, 1, 1, 0, 0; ", accs + 2 * s, accs + 2 * s + 1);
    }
    text += "wgmma.commit_group.sync.aligned; }";
    let cons: Vec<String> = (0..accs).map(|_| "=f".to_string()).chain((0..8).map(|_| "l".to_string())).chain(["r".to_string()]).chain((0..accs).map(|i| i.to_string())).collect();
    let sty = format!("{{ {} }}", vec!["float"; accs as usize].join(", "));
    // Slice s's wgmmas: each operand from its converted slice `cb` or its ring stage `st`.
    let compute = |w: &mut Writer, st: &str, cb: &str| {
        let mut ds = Vec::new();
        for (oi, first) in [(0, &arow), (1, &brow)] {
            let rg = &regs[oi];
            let so = match rg.conv {
                Some(c) => {
                    let o = w.emit_op(format!("mul nuw nsw i64 {cb}, {}", rg.own * ROW));
                    w.emit_op(format!("add nuw nsw i64 {o}, {c}"))
                }
                None => {
                    let o = w.emit_op(format!("mul nuw nsw i64 {st}, {}", rg.stage));
                    w.emit_op(format!("add nuw nsw i64 {o}, {}", rg.ring))
                }
            };
            let r = w.emit_op(format!("shl nuw nsw i64 {first}, 7"));
            let o = w.emit_op(format!("add nuw nsw i64 {so}, {r}"));
            let addr = w.emit_op(format!("add nuw nsw i64 {al}, {o}"));
            let x = w.emit_op(format!("and i64 {addr}, 262143"));
            let x = w.emit_op(format!("lshr i64 {x}, 4"));
            ds.push(w.emit_op(format!("or i64 {x}, {}", fixed as i64)));
        }
        let mut args = Vec::new();
        for s in 0..4 {
            for d in &ds {
                args.push(format!("i64 {}", if s == 0 { d.clone() } else { w.emit_op(format!("add nuw nsw i64 {d}, {}", 2 * s)) }));
            }
        }
        args.push("i32 1".into());
        for r in &regs_d {
            let v = w.emit_op(format!("load float, ptr {r}"));
            args.push(format!("float {v}"));
        }
        let res = w.emit_op(format!("call {sty} asm sideeffect \"{text}\", \"{},~{{memory}}\"({}) #1", cons.join(","), args.join(", ")));
        for (i, r) in regs_d.iter().enumerate() {
            let v = w.emit_op(format!("extractvalue {sty} {res}, {i}"));
            w.emit(&format!("store float {v}, ptr {r}"));
        }
    };
    let wait_mma = |w: &mut Writer| {
        let ins: Vec<String> = regs_d.iter().map(|r| format!("float {}", w.emit_op(format!("load float, ptr {r}")))).collect();
        let cons: Vec<String> = (0..accs).map(|_| "=f".to_string()).chain((0..accs).map(|i| i.to_string())).collect();
        let res = w.emit_op(format!("call {sty} asm sideeffect \"wgmma.wait_group.sync.aligned 0;\", \"{},~{{memory}}\"({}) #1", cons.join(","), ins.join(", ")));
        for (i, r) in regs_d.iter().enumerate() {
            let v = w.emit_op(format!("extractvalue {sty} {res}, {i}"));
            w.emit(&format!("store float {v}, ptr {r}"));
        }
    };
    // The prologue: slices 0 .. N − 2 into stages 0 .. N − 2 (empty groups past K), slice 0 converted.
    for s in 0..stages - 1 {
        if s * TK < kext {
            issue(w, &(s * TK).to_string(), &s.to_string());
        } else {
            w.emit("call void @llvm.nvvm.cp.async.commit.group()");
        }
    }
    wait_copies(w);
    convert(w, "0", "0");
    fence(w);
    barrier(w);
    for_loop(w, "%s.k0", "0", &kext.to_string(), TK, &mut |w| {
        let k0 = w.emit_op("load i64, ptr %s.k0".into());
        let kt = w.emit_op(format!("udiv i64 {k0}, {TK}"));
        let st = w.emit_op(format!("urem i64 {kt}, {stages}"));
        let cb = w.emit_op(format!("and i64 {kt}, 1"));
        compute(w, &st, &cb);
        // Slice s + N − 1 into the stage of slice s − 1 (≡ s + N − 1 mod N).
        let kn = w.emit_op(format!("add nuw nsw i64 {k0}, {}", (stages - 1) * TK));
        let more = w.emit_op(format!("icmp slt i64 {kn}, {kext}"));
        let t = w.emit_op(format!("add nuw nsw i64 {kt}, {}", stages - 1));
        let sn = w.emit_op(format!("urem i64 {t}, {stages}"));
        if_(w, &more, &mut |w| {
            issue(w, &kn, &sn);
            Ok(())
        })?;
        let less = w.emit_op(format!("icmp sge i64 {kn}, {kext}"));
        if_(w, &less, &mut |w| {
            w.emit("call void @llvm.nvvm.cp.async.commit.group()");
            Ok(())
        })?;
        let k1 = w.emit_op(format!("add nuw nsw i64 {k0}, {TK}"));
        let next = w.emit_op(format!("icmp slt i64 {k1}, {kext}"));
        if_(w, &next, &mut |w| {
            wait_copies(w);
            let t1 = w.emit_op(format!("add nuw nsw i64 {kt}, 1"));
            let s1 = w.emit_op(format!("urem i64 {t1}, {stages}"));
            let c1 = w.emit_op(format!("xor i64 {cb}, 1"));
            convert(w, &s1, &c1);
            fence(w);
            Ok(())
        })?;
        wait_mma(w);
        barrier(w);
        Ok(())
    })?;
    wg.epilogue(w, acc, kind, (&m0, &n0), (m, n), (rows, cols))?;
    Ok(Some((grid(m, n, nb, bm, bn)?, bytes as u32)))
}
