//! `rlxc train`: a model trained by its compiled training step in this process.
//!
//! - `data.rs`: the `.npy` pairs of `--data DIR`, checked against the step's ports.
//! - `compiled.rs`: the step compiled for the host with the parameters and optimizer state resident
//!   in its state region, and the evaluation artifact reading them there.
//! - `metrics.rs`: test loss and accuracy after an epoch.
//! - `report.rs`: the per-epoch CSV and the SVG plot.
//! - `save.rs`: safetensors weights and the trained ONNX model.
//! - `qat_insert.rs`: `--qat`, QuantizeLinear → DequantizeLinear pairs inserted into a float ONNX
//!   model with scales from its ranges on the training data.
//!
//! The binary's `cmd_train.rs` runs the epochs with the progress bar.

pub mod compiled;
pub mod data;
pub mod metrics;
pub mod qat_insert;
pub mod report;
pub mod save;
