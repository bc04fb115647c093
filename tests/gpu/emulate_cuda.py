#!/usr/bin/env python3
"""Runs a CUDA artifact's kernels on the CPU, without a GPU: a check of the cooperative kernels' logic
(tile indexing, bounds at tile edges, barriers, warp reductions, tensor-core fragment plumbing)
against the interpreter before the GPU machine runs them.

    emulate_cuda.py ART_DIR NAME OUT_DIR IN0.npy [IN1.npy …]

ART_DIR is `rlxc compile --target cuda --emit-ir` output (NAME.ll: the LLVM IR handed to the NVPTX
back end, NAME.json, NAME.weights.bin). The IR's NVVM intrinsics become functions of a generated C
driver — thread and block ids are thread-locals; `llvm.nvvm.barrier0` waits on a pthread barrier of the
block's threads; `shfl.sync.bfly` exchanges through a per-warp array between two warp barriers;
the inline PTX of `--precision tf32|bf16|fp16` (`cvt.rna.tf32.f32`, `cvt.rn.bf16x2.f32` / `f16x2`,
`mma.sync m16n8k8 tf32` / `m16n8k16 bf16` / `f16`; fp16 through gcc's `_Float16`) is emulated per warp from the fragment layouts the PTX ISA documents
(lane = 4·g + t) — `--precision f32`'s 3×TF32 tiles are the same instructions (two `cvt.rna` per
operand register, tf32 `mma.sync`s); each emulated `mma.sync` sums its products in f64 and rounds once,
where the H200 rounds toward zero, so the emulated f32 error is lower than the GPU's —; `--sm 90`'s `griddepcontrol.wait` (for the kernels before) is dropped, the
dispatches running in order — shared memory is a plain global; llc-19 compiles the IR for the host, gcc links
it with the driver, which runs every dispatch in order, block by block, with blockDim threads. Writes
each output as OUT_DIR/<output name>.npy. A stateful artifact (a KV cache: the schedule's state
buffer) reads its state from OUT_DIR/state.bin when that file exists (zeros otherwise) and writes it
back after the run, so calls made one after another with the same OUT_DIR continue one sequence, as
the CUDA executor's runs do; the compiled driver is reused while the artifact is the same. What it cannot check: the GPU's own behaviour (memory model,
the hardware's reading of the PTX) — tests/gpu/run_cuda.sh on the GPU machine does. Hopper's `wgmma.mma_async` blocks (nvptx/wgmma.rs, `RLX_CUDA_WGMMA`, sm_90a) are emulated per
thread from the descriptors and the 128-byte swizzle the PTX ISA documents, each done at once (below)."""
import json, os, re, subprocess, sys
import numpy as np

art, name, out = sys.argv[1], sys.argv[2], sys.argv[3]
ins = sys.argv[4:]
os.makedirs(out, exist_ok=True)
m = json.load(open(f"{art}/{name}.json"))
ir = open(f"{art}/{name}.ll").read()
# Tensor cores: the inline PTX becomes calls into the driver's warp-level emulation.
ir = re.sub(r'call i32 asm "cvt\.rna\.tf32\.f32 \$0, \$1;", "=r,f"', "call i32 @emu_cvt_tf32", ir)
ir = re.sub(r'call i32 asm "cvt\.rn\.bf16x2\.f32 \$0, \$1, \$2;", "=r,f,f"', "call i32 @emu_cvt_bf16x2", ir)
ir = re.sub(r'call i32 asm "cvt\.rn\.f16x2\.f32 \$0, \$1, \$2;", "=r,f,f"', "call i32 @emu_cvt_f16x2", ir)
# The GPU writer's one-instruction bf16 rounding (ir.rs's cast: a NaN becomes 0x7FFF, as on the GPU) and
# erf's copysign (ir/math.rs: sign of the first operand, magnitude of the second).
ir = re.sub(r'call i16 asm "cvt\.rn\.bf16\.f32 \$0, \$1;", "=h,f"', "call i16 @emu_cvt_bf16", ir)
ir = re.sub(r'call float asm "copysign\.f32 \$0, \$1, \$2;", "=f,f,f"\(float ([^,]+), float ([^)]+)\)', r"call float @llvm.copysign.f32(float \2, float \1)", ir)
mma = re.findall(r'asm sideeffect "mma\.sync\.aligned\.m16n8k\d+\.row\.col\.f32\.(\w+)\.\w+\.f32', ir)
ir = re.sub(r'asm sideeffect "mma\.sync\.aligned\.m16n8k\d+\.row\.col\.f32\.(\w+)\.\w+\.f32 [^"]*", "[^"]*"', r"@emu_mma_\1", ir)
# Hopper's wgmma (nvptx/wgmma.rs, sm_90a): each inline-PTX block of `wgmma.mma_async`s becomes a call
# of a generated function with the block's operands (descriptors, the scale-d flag, the accumulators),
# which calls the driver's emu_wgmma: every thread computes its own accumulator registers (the PTX
# ISA's m64nN f32 D layout) from the operands in shared memory as the descriptors describe them
# (K-major, 128-byte swizzle), each `mma_async` done at once — as a cp.async copy is below — so the
# `wait_group` blocks pass their accumulators through and the async-proxy fence is dropped.
wgmma_blocks = {}
def _wgmma_block(mt):
    sty, text, cons = mt.group(1), mt.group(2), mt.group(3)
    key = (sty, text, cons)
    if key not in wgmma_blocks:
        wgmma_blocks[key] = len(wgmma_blocks)
    return f"call {sty} @emu_wg{wgmma_blocks[key]}("
ir = re.sub(r'call (\{[^}]*\}) asm sideeffect "(\{ \.reg \.pred p; setp\.ne\.b32 p, \$\d+, 0; wgmma\.fence\.sync\.aligned; [^"]*)", "([^"]*)"\(', _wgmma_block, ir)
wgmma_waits = set()
def _wgmma_wait(mt):
    n = mt.group(1).count("float")
    wgmma_waits.add(n)
    return f"call {mt.group(1)} @emu_wgwait{n}("
ir = re.sub(r'call (\{[^}]*\}) asm sideeffect "wgmma\.wait_group\.sync\.aligned \d+;", "[^"]*"\(', _wgmma_wait, ir)
ir = ir.replace('  call void asm sideeffect "fence.proxy.async.shared::cta;", "~{memory}"() #1\n', "")
# The wgmma kernels' dynamic shared array (aligned to 1,024 bytes inside it by the kernel): a global the
# driver sees, aligned to 2^18 so that a descriptor's 18-bit address field is the offset into it.
ir = ir.replace("@dsw = external addrspace(3) global [0 x i8], align 1024", "@emu_dsw = global [262144 x i8] zeroinitializer, align 262144").replace("@dsw", "@emu_dsw")
# Programmatic dependent launch (--sm 90: nvptx/pdl.rs): the wait for the kernels before is a no-op
# here, where the dispatches run one after another.
ir = ir.replace('  call void asm sideeffect "griddepcontrol.wait;", "~{memory}"() #1\n', "")
# (Every inline PTX replaced: none left for the host's llc. The kernels' annotations — `minctasm` among
# them — are metadata, not asm.)
assert not re.search(r"\basm\b", ir), [l for l in ir.splitlines() if re.search(r"\basm\b", l)][:3]
# The GPU erf's approximate reciprocal and 2^x (ir/math/gpu_erf.rs) as the host's correctly rounded
# 1/x and exp2: the emulation checks the form, not the approximations' last bits (their error bound is
# tests/gpu/erf_accuracy.py's, the H200's own figure its `erf` parity case in run_cuda.sh).
for intr, body in [("rcp.approx.ftz.f", "%r = fdiv float 1.0, %x"), ("ex2.approx.ftz.f", "%r = call float @llvm.exp2.f32(float %x)")]:
    if f"@llvm.nvvm.{intr}(" in ir:
        ir = re.sub(rf"declare float @llvm\.nvvm\.{re.escape(intr)}\(float\)( #\d+)?\n", "", ir)
        fn = "@emu_" + intr.split(".")[0]
        ir = ir.replace(f"@llvm.nvvm.{intr}(", fn + "(")
        ir += f"\ndefine internal float {fn}(float %x) {{\n  {body}\n  ret float %r\n}}\n"
if "@llvm.exp2.f32(" in ir and "declare float @llvm.exp2.f32(float)" not in ir:
    ir += "\ndeclare float @llvm.exp2.f32(float)\n"
if "@emu_cvt_tf32" in ir:
    ir += "\ndeclare i32 @emu_cvt_tf32(float)\n"
if "@emu_cvt_bf16(" in ir:
    ir += "\ndeclare i16 @emu_cvt_bf16(float)\n"
if "@llvm.copysign.f32(" in ir and "declare float @llvm.copysign.f32(float, float)" not in ir:
    ir += "\ndeclare float @llvm.copysign.f32(float, float)\n"
if "@emu_cvt_bf16x2" in ir:
    ir += "\ndeclare i32 @emu_cvt_bf16x2(float, float)\n"
if "@emu_cvt_f16x2" in ir:
    ir += "\ndeclare i32 @emu_cvt_f16x2(float, float)\n"
for ty in sorted(set(mma)):
    ir += f"""
declare void @emu_mma_c_{ty}(ptr, i32, i32, i32, i32, i32, i32, float, float, float, float)
define {{ float, float, float, float }} @emu_mma_{ty}(i32 %a0, i32 %a1, i32 %a2, i32 %a3, i32 %b0, i32 %b1, float %c0, float %c1, float %c2, float %c3) {{
  %p = alloca [4 x float]
  call void @emu_mma_c_{ty}(ptr %p, i32 %a0, i32 %a1, i32 %a2, i32 %a3, i32 %b0, i32 %b1, float %c0, float %c1, float %c2, float %c3)
  %q1 = getelementptr float, ptr %p, i64 1
  %q2 = getelementptr float, ptr %p, i64 2
  %q3 = getelementptr float, ptr %p, i64 3
  %d0 = load float, ptr %p
  %d1 = load float, ptr %q1
  %d2 = load float, ptr %q2
  %d3 = load float, ptr %q3
  %r0 = insertvalue {{ float, float, float, float }} poison, float %d0, 0
  %r1 = insertvalue {{ float, float, float, float }} %r0, float %d1, 1
  %r2 = insertvalue {{ float, float, float, float }} %r1, float %d2, 2
  %r3 = insertvalue {{ float, float, float, float }} %r2, float %d3, 3
  ret {{ float, float, float, float }} %r3
}}
"""
for (sty, text, cons), i in wgmma_blocks.items():
    c_ = cons.split(",")
    outs = sum(1 for x in c_ if x.startswith("="))
    opnds = [x for x in c_[outs:] if not x.startswith("~")]
    ty = {"l": "i64", "r": "i32"}
    params = [f"{ty.get(x, 'float')} %i{j}" for j, x in enumerate(opnds)]
    # (A is a descriptor, or — register-sourced A, nvptx/wgmma.rs's RLX_CUDA_X3_RS — four words `{$i,…}`.)
    mm = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k(\d+)\.f32\.(\w+)\.\w+ \{([^}]*)\}, (\$\d+|\{[^}]*\}), \$(\d+), p, ([\d, ]+);", text)
    wn, ks, ab = int(mm[0][0]), int(mm[0][1]), mm[0][2]
    assert all((int(x[0]), int(x[1]), x[2]) == (wn, ks, ab) for x in mm) and outs % (wn // 2) == 0, text
    # Each mma_async's accumulators: wn / 2 consecutive outputs (3×TF32's blocks have two such sets).
    firsts = []
    for x in mm:
        regs_ = [int(v.strip()[1:]) for v in x[3].split(",")]
        assert regs_ == list(range(regs_[0], regs_[0] + wn // 2)) and regs_[-1] < outs, text
        firsts.append(regs_[0])
    # The immediates after p: scale-a, scale-b (1: not negated), and for 16-bit operands both transposes 0 (K-major).
    assert all(x[6].replace(" ", "") == ("1,1" if ab == "tf32" else "1,1,0,0") for x in mm), text
    code = {"bf16": 1, "tf32": 0, "f16": 2}[ab]
    scale = int(re.search(r"setp\.ne\.b32 p, \$(\d+), 0;", text).group(1)) - outs
    body = [f"  %acc = alloca [{outs} x float]", f"  %desc = alloca [{2 * len(mm)} x i64]"]
    words = lambda a: [int(v.strip()[1:]) for v in a.strip("{}").split(",")]
    assert sorted({int(v) for x in mm for v in ([x[4][1:]] if x[4][0] == "$" else []) + [x[5]]}) == [outs + j for j, y in enumerate(opnds) if y == "l"], text
    assert all(opnds[w - outs] == "r" for x in mm if x[4][0] == "{" for w in words(x[4])) and all(y in "lr" for y in opnds[:len(opnds) - outs - 1]), text
    for j in range(outs):
        body += [f"  %pa{j} = getelementptr float, ptr %acc, i64 {j}", f"  store float %i{opnds.index(str(j))}, ptr %pa{j}"]
    for q, x in enumerate(mm):
        for h in range(2):
            if h == 1 or x[4][0] == "$":
                body += [f"  %pd{q}_{h} = getelementptr i64, ptr %desc, i64 {2 * q + h}", f"  store i64 %i{int(x[4 + h].lstrip('$')) - outs}, ptr %pd{q}_{h}"]
    # In the block's order, each on its own accumulators.
    for q, x in enumerate(mm):
        if x[4][0] == "$":
            body.append(f"  call void @emu_wgmma(ptr %pa{firsts[q]}, ptr %pd{q}_0, i32 1, i32 {code}, i32 {wn}, i32 %i{scale})")
        else:
            a = ", ".join(f"i32 %i{w - outs}" for w in words(x[4]))
            body.append(f"  call void @emu_wgmma_rs(ptr %pa{firsts[q]}, {a}, ptr %pd{q}_1, i32 {wn}, i32 %i{scale})")
    prev = "poison"
    for j in range(outs):
        body += [f"  %v{j} = load float, ptr %pa{j}", f"  %r{j} = insertvalue {sty} {prev}, float %v{j}, {j}"]
        prev = f"%r{j}"
    ir += f"\ndefine internal {sty} @emu_wg{i}({', '.join(params)}) {{\n" + "\n".join(body) + f"\n  ret {sty} {prev}\n}}\n"
if wgmma_blocks:
    ir += "\ndeclare void @emu_wgmma(ptr, ptr, i32, i32, i32, i32)\ndeclare void @emu_wgmma_rs(ptr, i32, i32, i32, i32, ptr, i32, i32)\n"
for n in sorted(wgmma_waits):
    sty = "{ " + ", ".join(["float"] * n) + " }"
    body, prev = [], "poison"
    for j in range(n):
        body.append(f"  %r{j} = insertvalue {sty} {prev}, float %i{j}, {j}")
        prev = f"%r{j}"
    ir += f"\ndefine internal {sty} @emu_wgwait{n}({', '.join(f'float %i{j}' for j in range(n))}) {{\n" + "\n".join(body) + f"\n  ret {sty} {prev}\n}}\n"
# cp.async (nvptx/cp_async.rs's pipelined tiles): each 16-byte copy done at once, so the commit and
# wait are no-ops — a copy lands before the barrier that publishes it, as `wait_group` guarantees on
# the GPU (what this cannot check: a wait missing or too shallow). The dynamic shared array is a plain
# global of the most any block may take.
ir = re.sub(r"= addrspacecast ptr (%[\w.]+) to ptr addrspace\(1\)", r"= getelementptr i8, ptr \1, i64 0", ir)
ir = ir.replace("@llvm.nvvm.cp.async.cg.shared.global.16", "@emu_cp_async16")
ir = re.sub(r"  call void @llvm\.nvvm\.cp\.async\.(commit\.group|wait\.group)\((i32 \d+)?\)\n", "", ir)
ir = re.sub(r"declare void @llvm\.nvvm\.cp\.async\.(commit\.group|wait\.group)\(.*\n", "", ir)
ir = ir.replace("@dsm = external addrspace(3) global [0 x i32], align 16", "@dsm = internal global [58112 x i32] zeroinitializer, align 16")
ir = re.sub(r'target triple = ".*"\n', "", ir)
ir = ir.replace("define ptx_kernel void", "define void")
ir = re.sub(r"= addrspacecast ptr addrspace\(1\) (%\w+) to ptr", r"= getelementptr i8, ptr \1, i64 0", ir)
ir = ir.replace("ptr addrspace(1)", "ptr").replace("ptr addrspace(3)", "ptr").replace("internal addrspace(3) global", "internal global")
ir = re.sub(r"@llvm\.nvvm\.read\.ptx\.sreg\.(\w+)\.(\w)\b", r"@emu_\1_\2", ir)
ir = ir.replace("@llvm.nvvm.barrier0", "@emu_barrier")
ir = ir.replace("@llvm.nvvm.shfl.sync.bfly.f32", "@emu_shfl_f32").replace("@llvm.nvvm.shfl.sync.bfly.i32", "@emu_shfl_i32")
# The kernels' annotations go; their accesses' alias scopes (nvptx/alias.rs) stay.
ir = "\n".join(l for l in ir.splitlines() if not (l.startswith("!") and ("nvvm" in l or "ptr @" in l)))
assert "nvvm" not in ir, [l for l in ir.splitlines() if "nvvm" in l][:5]
open(f"{out}/emu.ll.new", "w").write(ir)
params = m["schedule"]["params"]
nb = len(params)
ds = m["schedule"]["dispatches"]
c = ["#include <pthread.h>", "#include <stdio.h>", "#include <stdlib.h>", "#include <string.h>"]
for i in range(len(ds)):
    c.append(f"void k{i}({', '.join(['void*'] * nb)});")
c.append("""
static __thread int t_tid, t_cx, t_cy, t_cz; static int t_ntid; /* blockDim: set by main, read by every worker */
int emu_tid_x(void){return t_tid;} int emu_ntid_x(void){return t_ntid;}
int emu_ctaid_x(void){return t_cx;} int emu_ctaid_y(void){return t_cy;} int emu_ctaid_z(void){return t_cz;}
static pthread_barrier_t bar, wbar[8]; static float fs[8][32]; static int is_[8][32];
void emu_barrier(void){ pthread_barrier_wait(&bar); }
float emu_shfl_f32(int mask, float v, int lm, int c){ int w=t_tid/32,l=t_tid%32; fs[w][l]=v; pthread_barrier_wait(&wbar[w]); float r=fs[w][l^lm]; pthread_barrier_wait(&wbar[w]); return r; }
int emu_shfl_i32(int mask, int v, int lm, int c){ int w=t_tid/32,l=t_tid%32; is_[w][l]=v; pthread_barrier_wait(&wbar[w]); int r=is_[w][l^lm]; pthread_barrier_wait(&wbar[w]); return r; }
void emu_cp_async16(void *dst, const void *src){ memcpy(dst, src, 16); }
static void *B[64]; static int K, GX, GY, GZ;
static unsigned fb(float f){unsigned u; memcpy(&u,&f,4); return u;} static float bf(unsigned u){float f; memcpy(&f,&u,4); return f;}
int emu_cvt_tf32(float x){ unsigned u=fb(x); return (int)((u + 0x1000u) & 0xFFFFE000u); }
static unsigned bf16(float x){ unsigned u=fb(x); return (u + 0x7FFFu + ((u>>16)&1u)) >> 16; }
unsigned short emu_cvt_bf16(float x){ return x != x ? 0x7FFFu : (unsigned short)bf16(x); }
int emu_cvt_bf16x2(float hi, float lo){ return (int)((bf16(hi)<<16) | bf16(lo)); }
/* fp16: the host's _Float16 conversion, round to nearest even as cvt.rn. */
static unsigned f16(float x){ _Float16 h=(_Float16)x; unsigned short u; memcpy(&u,&h,2); return u; }
static float f16f(unsigned u){ unsigned short s=(unsigned short)u; _Float16 h; memcpy(&h,&s,2); return (float)h; }
int emu_cvt_f16x2(float hi, float lo){ return (int)((f16(hi)<<16) | f16(lo)); }
static unsigned A_[8][32][4], B_[8][32][2]; static float C_[8][32][4];
/* m16n8k8 tf32 / m16n8k16 bf16 (k16 1) or f16 (k16 2), f32 accumulation, in the PTX ISA's fragment
   layouts (lane = 4g + t). */
static void mma(int k16, float *d, int a0,int a1,int a2,int a3,int b0,int b1,float c0,float c1,float c2,float c3){
  int w=t_tid/32,l=t_tid%32; unsigned a[4]={a0,a1,a2,a3}; memcpy(A_[w][l],a,16); B_[w][l][0]=b0; B_[w][l][1]=b1;
  pthread_barrier_wait(&wbar[w]);
  int g=l/4,t=l%4; float c[4]={c0,c1,c2,c3};
  for(int q=0;q<4;q++){ int row=g+8*(q/2), col=2*t+q%2; double acc=c[q];
    for(int k=0;k<(k16?16:8);k++){ float av,bv;
      if(!k16){ av=bf(A_[w][(row%8)*4+k%4][(row/8)+2*(k/4)]); bv=bf(B_[w][col*4+k%4][k/4]); }
      else { int kp=k/2,h=k%2; unsigned aw=A_[w][(row%8)*4+kp%4][(row/8)+2*(kp/4)], bw=B_[w][col*4+kp%4][kp/4];
             unsigned ah=(aw>>(16*h))&0xFFFFu, bh=(bw>>(16*h))&0xFFFFu;
             if(k16==1){ av=bf(ah<<16); bv=bf(bh<<16); } else { av=f16f(ah); bv=f16f(bh); } }
      acc += (double)av*(double)bv; }
    d[q]=(float)acc; }
  pthread_barrier_wait(&wbar[w]);
}
void emu_mma_c_tf32(float*d,int a0,int a1,int a2,int a3,int b0,int b1,float c0,float c1,float c2,float c3){ mma(0,d,a0,a1,a2,a3,b0,b1,c0,c1,c2,c3); }
void emu_mma_c_bf16(float*d,int a0,int a1,int a2,int a3,int b0,int b1,float c0,float c1,float c2,float c3){ mma(1,d,a0,a1,a2,a3,b0,b1,c0,c1,c2,c3); }
void emu_mma_c_f16(float*d,int a0,int a1,int a2,int a3,int b0,int b1,float c0,float c1,float c2,float c3){ mma(2,d,a0,a1,a2,a3,b0,b1,c0,c1,c2,c3); }
""")
# Only where the module has wgmma kernels (which define the emu_dsw array it reads).
if wgmma_blocks:
    c.append("""
/* wgmma.mma_async m64nNk16 bf16 (h16 1) or f16 (h16 2) / m64nNk8 tf32 (h16 0), f32 accumulation, both operands K-major in shared memory
   through descriptors (the PTX ISA's matrix descriptor: start address >> 4 in bits 0-13, leading byte
   offset >> 4 in 16-29, stride byte offset >> 4 in 32-45, base offset in 49-51, swizzle mode in 62-63).
   Only the layout nvptx/wgmma.rs writes is accepted: 128-byte swizzle (mode 1), stride 1,024 (8-row
   atoms of 128-byte rows), base offset 0; a row r's byte at logical offset o from the start lies at
   o ^ ((o >> 7) & 7) << 4 of the 2^18-aligned shared array (the swizzle on address bits 4-6 by 7-9).
   Thread tid of warp w % 4 in its warpgroup, lane 4g + t: accumulator 4j + q is row 16(w % 4) + g +
   8(q / 2), column 8j + 2t + q % 2 of the m64 x nN tile; each mma_async sums its k products in f64
   and rounds once. `n` mma_asyncs, descriptors (a, b) each, in order. */
extern unsigned char emu_dsw[];
static unsigned long swz(unsigned long o){ return o ^ (((o >> 7) & 7) << 4); }
static float wg_val(unsigned long o, int h16){ unsigned u; if(h16){ unsigned short h; memcpy(&h, emu_dsw + swz(o), 2); if(h16 == 2) return f16f(h); u = (unsigned)h << 16; }
  else { memcpy(&u, emu_dsw + swz(o), 4); u &= 0xFFFFE000u; } return bf(u); }
static unsigned long wg_start(long d){
  if(((d >> 62) & 3) != 1 || ((d >> 32) & 0x3FFF) != 64 || ((d >> 49) & 7) != 0 || (d & 0x3FFF) << 4 >= 262144){
    fprintf(stderr, "emu_wgmma: descriptor %lx is not the 128-byte swizzled K-major layout this emulates\\n", (unsigned long)d); exit(1); }
  return (unsigned long)(d & 0x3FFF) << 4; }
void emu_wgmma(float *acc, const long *desc, int n, int h16, int wn, int scale){
  int l = t_tid % 32, wq = (t_tid / 32) % 4, g = l / 4, t = l % 4, ks = h16 ? 16 : 8, eb = h16 ? 2 : 4;
  for(int s = 0; s < n; s++){ unsigned long a0 = wg_start(desc[2*s]), b0 = wg_start(desc[2*s+1]);
    for(int j = 0; j < wn / 8; j++) for(int q = 0; q < 4; q++){ int row = 16*wq + g + 8*(q/2), col = 8*j + 2*t + q%2;
      double sum = scale ? acc[4*j+q] : 0.0;
      for(int k = 0; k < ks; k++){
        float av = wg_val(a0 + (row/8)*1024 + (row%8)*128 + k*eb, h16), bv = wg_val(b0 + (col/8)*1024 + (col%8)*128 + k*eb, h16);
        sum += (double)av * (double)bv; }
      acc[4*j+q] = (float)sum; } }
}
/* The same with A from registers (tf32, m64nNk8): word q of lane 4g + t holds A's row g + 8(q % 2),
   k t + 4(q / 2) of the warp's 16 rows (the PTX ISA's register fragment for A), exchanged within the
   warp as mma.sync's are; B through its descriptor. */
void emu_wgmma_rs(float *acc, int a0, int a1, int a2, int a3, const long *descb, int wn, int scale){
  int w = t_tid / 32, l = t_tid % 32, g = l / 4, t = l % 4; unsigned a[4] = {a0, a1, a2, a3}; memcpy(A_[w][l], a, 16);
  pthread_barrier_wait(&wbar[w]);
  unsigned long b0 = wg_start(*descb);
  for(int j = 0; j < wn / 8; j++) for(int q = 0; q < 4; q++){ int row = g + 8*(q/2), col = 8*j + 2*t + q%2;
    double sum = scale ? acc[4*j+q] : 0.0;
    for(int k = 0; k < 8; k++){
      float av = bf(A_[w][4*(row%8) + k%4][row/8 + 2*(k/4)] & 0xFFFFE000u), bv = wg_val(b0 + (col/8)*1024 + (col%8)*128 + k*4, 0);
      sum += (double)av * (double)bv; }
    acc[4*j+q] = (float)sum; }
  pthread_barrier_wait(&wbar[w]);
}
""")
c.append("static void call(int k){ switch(k){")
args = ", ".join(f"B[{j}]" for j in range(nb))
for i in range(len(ds)):
    c.append(f"case {i}: k{i}({args}); break;")
c.append("}}")
c.append("""
static void *worker(void *p){ t_tid=(int)(long)p; for(int z=0;z<GZ;z++)for(int y=0;y<GY;y++)for(int x=0;x<GX;x++){ t_cx=x;t_cy=y;t_cz=z; call(K); pthread_barrier_wait(&bar);} return 0; }
static void *readf(const char*p, long n){ void*b=calloc(n+16,1); FILE*f=fopen(p,"rb"); if(!f){perror(p);exit(1);} long r=fread(b,1,n,f); fclose(f); if(r!=n){fprintf(stderr,"%s: %ld of %ld bytes\\n",p,r,n);exit(1);} return b; }
int main(int argc, char**argv){""")
n_in = sum(1 for p in params if p["buffer"].startswith("input "))
for j, p in enumerate(params):
    bn = p["buffer"]
    if bn == "weights":
        c.append(f'B[{j}] = readf("{art}/{name}.weights.bin", {p["bytes"]});')
    elif bn.startswith("input "):
        c.append(f'B[{j}] = readf(argv[{1 + int(bn.split()[1])}], {p["bytes"]});')
    elif bn == "state":
        c.append(f'{{ char fn[4096]; snprintf(fn, sizeof fn, "%s/state.bin", argv[{1 + n_in}]); FILE*f=fopen(fn,"rb"); if(f){{ fclose(f); B[{j}] = readf(fn, {p["bytes"]}); }} else B[{j}] = calloc({p["bytes"]} + 16, 1); }}')
    else:
        c.append(f'B[{j}] = calloc({p["bytes"]} + 16, 1);')
c.append("int D[][5] = {" + ", ".join("{%d,%d,%d,%d,%d}" % (i, d["grid"][0], d["grid"][1], d["grid"][2], d["block"][0]) for i, d in enumerate(ds)) + "};")
c.append(f"""for(int i=0;i<{len(ds)};i++){{ K=D[i][0];GX=D[i][1];GY=D[i][2];GZ=D[i][3]; int bx=D[i][4]; t_ntid=bx;
  pthread_barrier_init(&bar,0,bx); for(int w=0;w<bx/32;w++) pthread_barrier_init(&wbar[w],0,32);
  pthread_t th[1024]; for(int t=0;t<bx;t++){{ pthread_attr_t a; pthread_attr_init(&a); pthread_attr_setstacksize(&a, 1<<20); pthread_create(&th[t],&a,worker,(void*)(long)t); }}
  for(int t=0;t<bx;t++) pthread_join(th[t],0);
  pthread_barrier_destroy(&bar); for(int w=0;w<bx/32;w++) pthread_barrier_destroy(&wbar[w]); }}""")
for j, p in enumerate(params):
    if p["buffer"] == "state":
        c.append(f'{{ char fn[4096]; snprintf(fn, sizeof fn, "%s/state.bin", argv[{1 + n_in}]); FILE*f=fopen(fn,"wb"); fwrite(B[{j}],1,{p["bytes"]},f); fclose(f); }}')
    if p["buffer"].startswith("output "):
        o = int(p["buffer"].split()[1])
        c.append(f'{{ char fn[4096]; snprintf(fn, sizeof fn, "%s/out{o}.bin", argv[{1 + n_in}]); FILE*f=fopen(fn,"wb"); fwrite(B[{j}],1,{p["bytes"]},f); fclose(f); }}')
c.append("return 0; }")
drv = "\n".join(c)
# Compiled once per artifact: a later call with the same IR and driver reuses the binary.
same = os.path.exists(f"{out}/emu") and os.path.exists(f"{out}/emu.ll") and os.path.exists(f"{out}/drv.c") \
    and open(f"{out}/emu.ll").read() == ir and open(f"{out}/drv.c").read() == drv
os.replace(f"{out}/emu.ll.new", f"{out}/emu.ll")
if not same:
    open(f"{out}/drv.c", "w").write(drv)
    subprocess.run(["llc-19", "-O2", "-relocation-model=pic", "-filetype=obj", f"{out}/emu.ll", "-o", f"{out}/emu.o"], check=True)
    subprocess.run(["gcc", "-O1", f"{out}/drv.c", f"{out}/emu.o", "-lpthread", "-lm", "-o", f"{out}/emu"], check=True)
bins = []
for i, p in enumerate(ins):
    b = f"{out}/in{i}.bin"
    np.load(p).tofile(b)
    bins.append(b)
subprocess.run([f"{out}/emu"] + bins + [out], check=True)
for i, o in enumerate(m["outputs"]):
    dt = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}[o["dtype"]]
    np.save(f"{out}/{o['name']}.npy", np.fromfile(f"{out}/out{i}.bin", dtype=dt).reshape(o["shape"]))
print("emulated", len(ds), "dispatches")
