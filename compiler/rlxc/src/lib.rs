//! rlxc as a library: the pieces of the CLI that tests and other tools reuse.
//!
//! - [`npy`]: NumPy `.npy` reader and writer (inputs and outputs of `rlxc run`), re-exported from
//!   `rlx_import::npy` (a reader of outside bytes lives with the other importers; one implementation).
//! - [`conformance`]: the ONNX op conformance suite behind `rlxc conformance`.
//! - [`targets`]: the target families behind one trait — compile, write, execute.
//! - [`llm`]: token generation (the `Step` an executor implements, sampling, the loop).
//! - [`train`]: `rlxc train` — the compiled training step with resident parameters, data, reports.

#[cfg(not(any(feature = "llvm", feature = "cranelift")))]
compile_error!("rlxc needs at least one native back end: cargo feature `llvm` or `cranelift`");

pub mod artifact;
pub mod cli;
pub mod conformance;
pub mod conformance_gaps;
pub mod cpus;
pub mod dims;
pub mod llm;
pub use rlx_import::npy;
pub mod pipeline;
pub mod shard;
pub mod targets;
pub mod train;
