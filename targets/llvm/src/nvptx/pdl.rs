//! Hopper's programmatic dependent launch (sm_90 and newer): every kernel begins with
//! `griddepcontrol.wait` — nothing of it reads or writes memory before every kernel it depends on has
//! finished and its writes are visible. The CUDA executor launches a kernel that waits so with
//! `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION` (runtime-min's `cuda.rs`): in the captured
//! graph the next kernel is launched as the blocks of the one before exit (the implicit trigger), not
//! after the whole grid has finished and been flushed, so part of the launch latency between dependent
//! kernels overlaps the kernel before. Launched without the attribute (`RLX_CUDA_PDL=0` at run time)
//! the wait returns at once: the PTX is correct either way. `RLX_CUDA_PDL=0` at compile time leaves it
//! out. (An explicit early trigger, `griddepcontrol.launch_dependents` at each kernel's start, was
//! measured on an H200 and not kept: MiniLM f32 batch 1 / 8 480 → 510 / 1,775 → 2,126 µs against the
//! wait alone — the dependent kernels' blocks, made resident while the kernels before still run, cost
//! more than the earlier launch saves. Nor a late one, session 33: `launch_dependents` where each
//! cooperative kernel's stores begin — a matmul tile's epilogue, a row kernel's last pass, the tensor-core
//! attention's stores —, which lets the next kernel launch only one deep; on an H100, MiniLM resident, it
//! took 1.11–1.16× the time of the implicit trigger at batch 1, 1.05–1.12× at batch 8, 1.00× at batch 32
//! (every precision; raw tests/gpu/h100-cuda-s33a*) — at batch 1 more than plain edges.)
//!
//! The wait is the kernel's first instruction, before any bounds check, so every block of every kernel
//! waits: a kernel completes only after those it depends on have, which keeps the dependencies
//! transitive along the graph's edges.

/// The instruction (inline PTX; `~{memory}`: no load or store moves above it).
pub const PROLOGUE: &str = "  call void asm sideeffect \"griddepcontrol.wait;\", \"~{memory}\"() #1\n";

/// The prologue kernels for `sm_{sm}` begin with: [`PROLOGUE`] on sm_90 and newer (`griddepcontrol`
/// needs PTX ISA 7.8 and sm_90), none with `RLX_CUDA_PDL=0` at compile time.
pub fn prologue(sm: u32) -> Option<&'static str> {
    (sm >= 90 && std::env::var("RLX_CUDA_PDL").map_or(true, |v| v != "0")).then_some(PROLOGUE)
}

/// `text`, one kernel's definition (`define ptx_kernel … {\nentry:\n…`), with `prologue` first in
/// its entry block.
pub fn with_prologue(text: &str, prologue: &str) -> String {
    match text.find("{\nentry:\n") {
        Some(at) => {
            let cut = at + "{\nentry:\n".len();
            format!("{}{prologue}{}", &text[..cut], &text[cut..])
        }
        None => text.to_string(),
    }
}
