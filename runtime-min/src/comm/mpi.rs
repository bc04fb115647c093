//! [`MpiComm`]: a [`Comm`] over an MPI communicator the application owns (rsmpi, the `mpi` crate;
//! OpenMPI from Debian). f32, f64, i32 and i64 are reduced with MPI_SUM in their own MPI types; other
//! dtypes are gathered and sent as bytes.

use super::{Comm, ALL_GATHER, ALL_REDUCE, RECV, REDUCE_SCATTER, SEND};
use crate::DType;
use core::ffi::c_void;
use mpi::collective::SystemOperation;
use mpi::datatype::Equivalence;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use std::boxed::Box;

/// An MPI communicator as the runtime's [`Comm`]. Keep it alive (and in place: it is boxed) while
/// artifacts run; pass [`MpiComm::as_comm`] to `rlx_rt_comm_set`.
pub struct MpiComm {
    world: Box<SimpleCommunicator>,
    comm: Comm,
}

impl MpiComm {
    pub fn new(world: SimpleCommunicator) -> Box<MpiComm> {
        let mut world = Box::new(world);
        let ctx = &mut *world as *mut SimpleCommunicator as *mut c_void;
        Box::new(MpiComm { world, comm: Comm { ctx, collective: Some(collective) } })
    }
    pub fn as_comm(&self) -> *const Comm {
        &self.comm
    }
    pub fn rank(&self) -> i32 {
        self.world.rank()
    }
    pub fn size(&self) -> i32 {
        self.world.size()
    }
    /// Ends every process of the job (MPI_Abort) with exit `code`: what a rank that cannot go on does,
    /// since its peers would otherwise wait in their next collective for ever.
    pub fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }
    /// `buf` from rank `root` to every rank (MPI_Bcast of bytes): how an application shares an NCCL
    /// unique id before each rank joins the NCCL communicator.
    pub fn broadcast(&self, root: i32, buf: &mut [u8]) {
        self.world.process_at_rank(root).broadcast_into(buf)
    }
    /// Sets this communicator as the one the statically linked runtime's collectives use.
    pub fn install(&self) {
        // SAFETY: `self` outlives the artifacts' runs (the caller's contract on `MpiComm`).
        unsafe { super::rlx_rt_comm_set(self.as_comm()) }
    }
}

unsafe extern "C" fn collective(ctx: *mut c_void, op: i32, dtype: i32, count: i64, send: *const c_void, recv: *mut c_void, peer: i64) -> i32 {
    // SAFETY: ctx is the boxed communicator of an MpiComm (set in `new`).
    let w = unsafe { &*(ctx as *const SimpleCommunicator) };
    let Some(dt) = u8::try_from(dtype).ok().and_then(DType::from_code) else { return 1 };
    let n = count as usize;
    // SAFETY (every arm): the buffers hold what rlx_rt_collective's contract says.
    unsafe {
        match dt {
            DType::F32 => run::<f32>(w, op, n, send, recv, peer),
            DType::F64 => run::<f64>(w, op, n, send, recv, peer),
            DType::I32 => run::<i32>(w, op, n, send, recv, peer),
            DType::I64 => run::<i64>(w, op, n, send, recv, peer),
            _ if op == ALL_REDUCE || op == REDUCE_SCATTER => 1,
            _ => run::<u8>(w, op, n * dt.size().unwrap_or(1), send, recv, peer),
        }
    }
}

unsafe fn run<T: Equivalence + Copy>(w: &SimpleCommunicator, op: i32, n: usize, send: *const c_void, recv: *mut c_void, peer: i64) -> i32 {
    let ranks = w.size() as usize;
    let peer_ok = peer >= 0 && peer < ranks as i64 && peer != w.rank() as i64;
    // SAFETY (slices): the caller's contract on the buffers' lengths.
    let s = |len: usize| unsafe { core::slice::from_raw_parts(send as *const T, len) };
    let r = |len: usize| unsafe { core::slice::from_raw_parts_mut(recv as *mut T, len) };
    match op {
        ALL_REDUCE => w.all_reduce_into(s(n), r(n), SystemOperation::sum()),
        ALL_GATHER => w.all_gather_into(s(n), r(n * ranks)),
        REDUCE_SCATTER => w.reduce_scatter_block_into(s(n * ranks), r(n), SystemOperation::sum()),
        SEND if peer_ok => w.process_at_rank(peer as i32).send(s(n)),
        RECV if peer_ok => {
            w.process_at_rank(peer as i32).receive_into(r(n));
        }
        _ => return 1,
    }
    0
}

/// Initializes MPI (once per process) and wraps MPI_COMM_WORLD; keep the `Universe` until the last
/// collective has run (dropping it finalizes MPI). `None` when MPI was already initialized.
pub fn init() -> Option<(mpi::environment::Universe, Box<MpiComm>)> {
    let u = mpi::initialize()?;
    let w = u.world();
    Some((u, MpiComm::new(w)))
}
