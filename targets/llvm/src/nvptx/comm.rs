//! A sharded rank's collectives on CUDA: a launch whose kernel is one `Stmt::Comm` becomes no PTX
//! function but a schedule entry (`rlx_ir::schedule::SchedComm`, schedule version 4) that the CUDA
//! executor issues on its stream through the application's NCCL communicator, between the kernels.

use rlx_ir::lir::{Launch, Lir};
use rlx_ir::loops::{Access, CommOp, Stmt};
use rlx_ir::schedule::{BaseBuf, ByteRange, SchedComm, SchedDispatch};

/// The schedule entry of launch `li` when it is a collective (`None` for a kernel). Its ranges are
/// the send buffer's exact bytes (read; none for a receive) then the receive buffer's (write); the
/// rank count is what the two sizes imply (an all-gather receives, a reduce-scatter sends, `count`
/// × ranks elements). Errors name the kernel.
pub fn dispatch(lir: &Lir, bases: &[BaseBuf], li: usize, l: &Launch) -> Result<Option<SchedDispatch>, String> {
    let [Stmt::Comm { op, send, recv, count, dtype, peer }] = l.kernel.body.as_slice() else {
        return Ok(None);
    };
    let name = &l.kernel.name;
    let range = |pi: u32, access: Access| -> Result<(ByteRange, u64), String> {
        let b = *l.bindings.get(pi as usize).ok_or_else(|| format!("collective '{name}': parameter {pi} is not bound"))?;
        let buf = lir.buffers.get(b as usize).ok_or_else(|| format!("collective '{name}': buffer {b} does not exist"))?;
        let bind = bases.iter().position(|x| x.base == buf.base).ok_or_else(|| format!("collective '{name}': buffer '{}' has no base", buf.label))?;
        let (start, bytes) = (buf.offset as u64, buf.bytes() as u64);
        Ok((ByteRange { binding: bind as u32, access, start, end: start + bytes }, bytes))
    };
    let (rrange, rbytes) = range(*recv, Access::Write)?;
    let mut ranges = Vec::new();
    let mut sbytes = rbytes;
    if let Some(s) = send {
        let (r, b) = range(*s, Access::Read)?;
        ranges.push(r);
        sbytes = b;
    }
    ranges.push(rrange);
    let (big, small) = match op {
        CommOp::AllGather => (rbytes, sbytes),
        CommOp::ReduceScatter => (sbytes, rbytes),
        _ => (1, 1),
    };
    if small == 0 || big % small != 0 {
        return Err(format!("collective '{name}': {} of {sbytes} bytes into {rbytes} bytes", op.name()));
    }
    let ranks = u32::try_from(big / small).map_err(|_| format!("collective '{name}': too many ranks"))?;
    let comm = SchedComm { op: *op, dtype: *dtype, count: *count as u64, ranks, peer: *peer };
    Ok(Some(SchedDispatch { entry: li as u32, groups: [1; 3], block: [1; 3], shared: 0, ranges, comm: Some(comm) }))
}
