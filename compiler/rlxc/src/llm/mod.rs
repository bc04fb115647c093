//! Token generation for language models, independent of what runs the model:
//! - `step.rs`: the [`Step`] trait — prefill a prompt, decode one token, each returning the next
//!   token's logits — the one thing an executor implements to generate;
//! - `interp.rs`: [`InterpStep`], the reference interpreter on the stateless full-sequence graph
//!   (every step recomputes the whole sequence: correct, slow);
//! - `chunked.rs`: [`Chunked`], a compiled KV-cache step as a [`Step`] (prefill in chunks, decode
//!   one token per call) over a [`chunked::Runner`] that executes one call;
//! - `compiled.rs`: [`CompiledStep`], that step compiled for this machine's CPU and loaded in process;
//! - `cuda.rs`: [`CudaStep`], that step compiled for `--target cuda` on the CUDA executor (the KV
//!   cache stays on the GPU);
//! - `sharded.rs` (feature `mpi`): [`ShardedStep`], one rank of the step sharded `--shard tp=N`, run
//!   under `mpirun` with its collectives over MPI_COMM_WORLD;
//! - `sample.rs`: greedy and temperature / top-k / top-p sampling with a seeded RNG of our own;
//! - `generate.rs`: the loop — prefill, sample, stop at end-of-generation, the context or N tokens —
//!   and its timings (prefill and decode tokens/s).
//!
//! `rlxc run model.gguf --prompt …|--tokens …` (the binary's `cmd_llm.rs`) wires these to the
//! tokenizer and stdout.

pub mod chunked;
pub mod compiled;
pub mod cuda;
pub mod generate;
pub mod interp;
pub mod sample;
#[cfg(feature = "mpi")]
pub mod sharded;
pub mod step;

pub use chunked::Chunked;
pub use compiled::CompiledStep;
pub use cuda::CudaStep;
pub use generate::{generate, Stats, Stop};
pub use interp::InterpStep;
pub use sample::{Sampler, Sampling};
#[cfg(feature = "mpi")]
pub use sharded::ShardedStep;
pub use step::Step;
