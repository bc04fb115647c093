//! `librlx_rt.a`: runtime-min with its thread pool, for C and C++ programs that link an rlxc object.
//!
//! Build with `cargo build --release -p rlx-rt-capi`; the archive exports `rlx_rt_parallel_for`.
//! A C link also needs the system libraries that Rust's std uses; print them with
//! `cargo rustc --release -p rlx-rt-capi -- --print native-static-libs`.
//!
//! With `--features cuda` the archive also exports the CUDA executor's C API (`rlx_cuda_load`,
//! `rlx_cuda_run`, …; header `runtime-min/include/rlx_cuda.h`). libcuda is opened at run time, so
//! building needs no CUDA SDK and a machine without the driver gets an error from `rlx_cuda_load`.
//! `make cuda-c-example` builds that archive in its own target dir (`target/rt-cuda`), beside the CPU
//! runtime's.

pub use rlx_rt::comm::{rlx_rt_collective, rlx_rt_comm_set};
pub use rlx_rt::rlx_rt_parallel_for;

#[cfg(feature = "cuda")]
pub use rlx_rt::cuda_c::{
    rlx_cuda_device, rlx_cuda_error, rlx_cuda_free, rlx_cuda_input_bytes, rlx_cuda_inputs, rlx_cuda_launch, rlx_cuda_load, rlx_cuda_output_bytes, rlx_cuda_outputs,
    rlx_cuda_run, RlxCuda,
};
