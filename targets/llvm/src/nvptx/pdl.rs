//! Hopper's programmatic dependent launch (sm_90 and newer): every kernel begins with
//! `griddepcontrol.launch_dependents` (the next kernel of the graph may be launched now, its blocks
//! made resident while this one runs) and `griddepcontrol.wait` (nothing of this kernel reads or
//! writes memory before every kernel it depends on has finished and its writes are visible). The
//! CUDA executor launches a kernel that waits so with `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`
//! (runtime-min's `cuda.rs`): in the captured graph the launch latency between dependent kernels overlaps
//! the kernel before. Launched without the attribute (sm_80 code paths, `RLX_CUDA_PDL=0` at run time)
//! the wait returns at once: the PTX is correct either way. `RLX_CUDA_PDL=0` at compile time leaves it out.
//!
//! The wait is the kernel's first instruction, before any bounds check, so every block of every kernel
//! waits: a kernel completes only after those it depends on have, which keeps the dependencies
//! transitive along the graph's edges.

/// The instructions (one inline-PTX statement; `~{memory}`: no load or store moves above it).
pub const PROLOGUE: &str = "  call void asm sideeffect \"griddepcontrol.launch_dependents;\\0Agriddepcontrol.wait;\", \"~{memory}\"() #1\n";
/// The wait alone (`RLX_CUDA_PDL=wait` at compile time, to measure the early trigger): the next
/// kernel is launched as each block of this one exits.
pub const WAIT_ONLY: &str = "  call void asm sideeffect \"griddepcontrol.wait;\", \"~{memory}\"() #1\n";

/// The prologue kernels for `sm_{sm}` begin with: [`PROLOGUE`] on sm_90 and newer (`griddepcontrol`
/// needs PTX ISA 7.8 and sm_90), none with `RLX_CUDA_PDL=0` at compile time, [`WAIT_ONLY`] with
/// `RLX_CUDA_PDL=wait`.
pub fn prologue(sm: u32) -> Option<&'static str> {
    match std::env::var("RLX_CUDA_PDL").as_deref() {
        _ if sm < 90 => None,
        Ok("0") => None,
        Ok("wait") => Some(WAIT_ONLY),
        _ => Some(PROLOGUE),
    }
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
