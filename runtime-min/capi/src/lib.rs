//! `librlx_rt.a`: runtime-min with its thread pool, for C and C++ programs that link an rlxc object.
//!
//! Build with `cargo build --release -p rlx-rt-capi`; the archive exports `rlx_rt_parallel_for`.
//! A C link also needs the system libraries that Rust's std uses; print them with
//! `cargo rustc --release -p rlx-rt-capi -- --print native-static-libs`.

pub use rlx_rt::comm::{rlx_rt_collective, rlx_rt_comm_set};
pub use rlx_rt::rlx_rt_parallel_for;
