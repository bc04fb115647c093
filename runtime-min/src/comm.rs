//! The communicator a sharded artifact's collectives go through. rlxc compiles each collective and
//! transfer of a `--shard` rank into a call of [`rlx_rt_collective`]; the runtime hands it to the
//! communicator the application passed in with [`rlx_rt_comm_set`] — a context pointer and one
//! function — so the artifact never opens a socket or starts a process itself: the application's MPI
//! (feature `mpi`: [`mpi::MpiComm`], over an rsmpi communicator) or any other transport does.
//!
//! `collective(ctx, op, dtype, count, send, recv, peer)` returns 0 on success. `op`: 0 all-reduce (sum)
//! of `count` elements, 1 all-gather (send `count`, receive `count` × ranks, in rank order), 2
//! reduce-scatter (send `count` × ranks, receive this rank's `count` of the sum), 3 send `count` to
//! rank `peer`, 4 receive `count` from rank `peer`. `dtype` is a [`DType`] code.

use crate::DType;
use core::ffi::c_void;
use core::ptr;
use core::sync::atomic::{AtomicPtr, Ordering};

/// `int collective(void *ctx, int op, int dtype, int64_t count, const void *send, void *recv, int64_t peer)`.
pub type CollectiveFn = unsafe extern "C" fn(*mut c_void, i32, i32, i64, *const c_void, *mut c_void, i64) -> i32;

/// A communicator as the C ABI sees it: `struct rlx_comm { void *ctx; collective_fn collective; }`.
#[repr(C)]
pub struct Comm {
    pub ctx: *mut c_void,
    pub collective: Option<CollectiveFn>,
}

/// The op codes of [`CollectiveFn`].
pub const ALL_REDUCE: i32 = 0;
pub const ALL_GATHER: i32 = 1;
pub const REDUCE_SCATTER: i32 = 2;
pub const SEND: i32 = 3;
pub const RECV: i32 = 4;

/// `NAME_run`'s return code when a collective fails or no communicator is set.
pub const COMM_ERROR: i32 = 10;

static COMM: AtomicPtr<Comm> = AtomicPtr::new(ptr::null_mut());

/// `void rlx_rt_comm_set(const struct rlx_comm *comm)`: the communicator every later collective of
/// this process's artifacts uses (NULL unsets it).
///
/// # Safety
/// `comm` is NULL or points to a `Comm` that stays valid, with its context, while artifacts run.
#[no_mangle]
pub unsafe extern "C" fn rlx_rt_comm_set(comm: *const Comm) {
    COMM.store(comm as *mut Comm, Ordering::Release);
}

/// The call compiled artifacts make: runs `op` through the communicator set with [`rlx_rt_comm_set`];
/// for a send, also copies `send` into `recv` (the node's output is the value sent). Returns 0, or
/// [`COMM_ERROR`] when no communicator is set, the dtype is unknown, or the communicator fails.
///
/// # Safety
/// `send` holds `count` elements (× ranks for a reduce-scatter) and `recv` has room for the result,
/// as the artifact's buffers do.
#[no_mangle]
pub unsafe extern "C" fn rlx_rt_collective(op: i32, dtype: i32, count: i64, send: *const c_void, recv: *mut c_void, peer: i64) -> i32 {
    let c = COMM.load(Ordering::Acquire);
    if c.is_null() || count < 0 || !(ALL_REDUCE..=RECV).contains(&op) {
        return COMM_ERROR;
    }
    let Some(size) = u8::try_from(dtype).ok().and_then(DType::from_code).and_then(DType::size) else {
        return COMM_ERROR;
    };
    // SAFETY: the caller's contract (set with rlx_rt_comm_set and still valid).
    let c = unsafe { &*c };
    let Some(f) = c.collective else {
        return COMM_ERROR;
    };
    // SAFETY: the communicator's contract.
    if unsafe { f(c.ctx, op, dtype, count, send, recv, peer) } != 0 {
        return COMM_ERROR;
    }
    if op == SEND && !ptr::eq(send, recv) {
        // SAFETY: both hold `count` elements (the caller's contract); distinct buffers.
        unsafe { ptr::copy_nonoverlapping(send as *const u8, recv as *mut u8, count as usize * size) };
    }
    0
}

#[cfg(feature = "mpi")]
pub mod mpi;
