//! rlx-opt: passes over the IR. Each pass is a function from graph to graph (or to a report), tested as
//! text in → text out. The optimizer never names a target: targets hand it their claim set as data.
//!
//! - [`lower`]: HIR → MIR (block ops expanded into primitives).
//! - [`legalize`]: the dispatch contract — every MIR node resolved to native / common-IR / rewritten /
//!   unsupported against a `TargetCaps`, with a report listing every unsupported node.

pub mod legalize;
pub mod lower;

pub use legalize::{report, DispatchEntry, DispatchReport, Resolution};
pub use lower::lower;
pub mod channels_last;
pub use channels_last::channels_last;
pub mod conv1d;
pub mod conv_affine;
pub use conv_affine::{collapse_affine_chains, fold_conv_affine};
pub mod fold;
pub mod merge_matmuls;
pub mod narrow;
pub use merge_matmuls::{merge_matmuls, merge_shared_operand_matmuls, Form as MergeForm};
pub use fold::{dce, fold, fold_only, simplify, sink_gathers, Evaluator};
pub mod plan;
pub use plan::{plan, PlanOptions};
pub mod order;
pub use order::{plan_min_arena, OrderReport};
pub mod quantize;
pub use quantize::{quantize, QParams, QuantOptions, Quantized};
pub mod qdq;
pub use qdq::{is_qdq, quantize_qdq};
pub mod autodiff;
pub use autodiff::{grad, grad_with_loss, hvp, jvp, vjp, AdError};
pub mod train;
pub mod shard;
pub use shard::{shard, Shard, Sharded};
pub mod vmap;
pub use vmap::vmap;
pub use train::{train_step, Loss, Optimizer, TrainOptions, TrainStep};
