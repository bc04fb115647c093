//! rlx-ir: the IR of rlxc. DType, symbolic Shape, constant data, the graph container shared by HIR and
//! MIR, the two op sets with shape and dtype inference, the verifier, the text form, and target claim
//! sets. It depends on nothing of ours.

pub mod attr;
pub mod bounded;
pub mod caps;
pub mod dtype;
pub mod graph;
pub mod hir;
pub mod lir;
pub mod loops;
pub mod mir;
pub mod region;
pub mod schedule;
pub mod shape;
pub mod tensor;
pub mod text;
pub mod verify;

pub use attr::{Attr, Attrs};
pub use caps::TargetCaps;
pub use dtype::DType;
pub use graph::{Bounded, Def, Graph, Node, NodeId, OpSet, State, Value, ValueId};
pub use hir::HirOp;
pub use mir::{ArgOp, BinaryOp, MirOp, PadMode, PoolKind, ReduceOp, ScatterRed, UnaryOp};
pub use shape::{broadcast, broadcast_fixed, Dim, Shape, TensorType};
pub use tensor::{Blob, ConstData};

pub type Hir = Graph<HirOp>;
pub type Mir = Graph<MirOp>;
