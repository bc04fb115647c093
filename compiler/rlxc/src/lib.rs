//! rlxc as a library: the pieces of the CLI that tests and other tools reuse.
//!
//! - [`npy`]: NumPy `.npy` reader and writer (inputs and outputs of `rlxc run`).
//! - [`conformance`]: the ONNX op conformance suite behind `rlxc conformance`.

pub mod artifact;
pub mod cli;
pub mod conformance;
pub mod native;
pub mod npy;
pub mod pipeline;
