//! NCCL for sharded CUDA artifacts (feature `nccl`, implies `cuda`): the communicator a sharded rank's
//! collectives go through, created by the application — never by the artifact, which opens no socket.
//! The usual way: rank 0 calls [`unique_id`], the application broadcasts its 128 bytes (over MPI, say),
//! and every rank calls [`Nccl::init`] with its GPU, rank and the world size. [`crate::cuda::Executor::with_nccl`]
//! then issues each collective of the schedule on the executor's stream between the kernels, inside
//! the one captured CUDA graph.
//!
//! `libnccl.so` is opened at run time through cudarc's `dynamic-loading` (no SDK to build); a machine
//! without it gets a [`CudaError`] before any NCCL call.

use crate::cuda::{open_device_index, CudaError};
use crate::schedule::Collective;
use crate::DType;
use cudarc::driver::{result as drv, sys as dsys};
use cudarc::nccl::{result, sys};
use std::format;

fn nccl(what: &str) -> impl Fn(result::NcclError) -> CudaError + '_ {
    move |e| CudaError(format!("{what}: {:?}", e.0))
}

fn present() -> Result<(), CudaError> {
    // SAFETY: only looks for the library file; no NCCL function is called.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError("no NCCL: libnccl.so could not be loaded (install NCCL, e.g. PyPI's nvidia-nccl-cu12, and put it on LD_LIBRARY_PATH)".into()))
    }
}

/// A new NCCL unique id (on one rank; the application sends it to the others).
pub fn unique_id() -> Result<[u8; 128], CudaError> {
    present()?;
    let id = result::get_uniqueid().map_err(nccl("ncclGetUniqueId"))?;
    Ok(id.internal.map(|c| c as u8))
}

/// One rank's NCCL communicator on one GPU (destroyed on drop).
pub struct Nccl {
    comm: sys::ncclComm_t,
    dev: dsys::CUdevice,
    device: i32,
    rank: i32,
    size: i32,
}

impl Nccl {
    /// Joins the communicator of `size` ranks identified by `id` as `rank`, on CUDA device `device`
    /// (its primary context is made current first: NCCL works on the current device). Blocks until
    /// every rank has joined.
    pub fn init(device: i32, rank: i32, size: i32, id: &[u8; 128]) -> Result<Nccl, CudaError> {
        present()?;
        if size < 1 || rank < 0 || rank >= size {
            return Err(CudaError(format!("NCCL rank {rank} of {size}")));
        }
        let dev = open_device_index(device)?;
        // SAFETY: `dev` came from cuDeviceGet; the primary context stays retained while the
        // communicator lives (released in Drop, or here when joining fails).
        unsafe {
            let ctx = drv::primary_ctx::retain(dev).map_err(|e| CudaError(format!("cuDevicePrimaryCtxRetain: {e:?}")))?;
            if let Err(e) = drv::ctx::set_current(ctx) {
                let _ = drv::primary_ctx::release(dev);
                return Err(CudaError(format!("cuCtxSetCurrent: {e:?}")));
            }
        }
        let id = sys::ncclUniqueId { internal: id.map(|b| b as core::ffi::c_char) };
        let mut comm: sys::ncclComm_t = core::ptr::null_mut();
        // SAFETY: `comm` is written by NCCL; the id is the one the application shared.
        if let Err(e) = unsafe { result::comm_init_rank(&mut comm, size, id, rank) } {
            // SAFETY: retained above.
            let _ = unsafe { drv::primary_ctx::release(dev) };
            return Err(nccl("ncclCommInitRank")(e));
        }
        Ok(Nccl { comm, dev, device, rank, size })
    }

    pub fn device(&self) -> i32 {
        self.device
    }
    pub fn rank(&self) -> i32 {
        self.rank
    }
    pub fn size(&self) -> i32 {
        self.size
    }

    /// Enqueues collective `c` on `stream` (sums in f32/f64/i32/i64; gathers and transfers move bytes).
    ///
    /// # Safety
    /// `send` and `recv` are device allocations of the bytes `c` moves ([`Collective::bytes`]) on
    /// this communicator's device, and `stream` is a stream of its context.
    pub(crate) unsafe fn issue(&self, c: &Collective, send: dsys::CUdeviceptr, recv: dsys::CUdeviceptr, stream: dsys::CUstream) -> Result<(), CudaError> {
        use crate::comm::*;
        use sys::ncclDataType_t::*;
        let st = stream as sys::cudaStream_t;
        let (s, r) = (send as *const core::ffi::c_void, recv as *mut core::ffi::c_void);
        let sum_type = || match c.dtype {
            DType::F32 => Ok(ncclFloat32),
            DType::F64 => Ok(ncclFloat64),
            DType::I32 => Ok(ncclInt32),
            DType::I64 => Ok(ncclInt64),
            d => Err(CudaError(format!("NCCL sums no {d:?}"))),
        };
        let size = c.dtype.size().ok_or_else(|| CudaError(format!("a collective of {:?}", c.dtype)))?;
        let bytes = c.count as usize * size;
        let sum = sys::ncclRedOp_t::ncclSum;
        // SAFETY: the caller's contract.
        unsafe {
            match c.op {
                ALL_REDUCE => result::all_reduce(s, r, c.count as usize, sum_type()?, sum, self.comm, st).map_err(nccl("ncclAllReduce"))?,
                REDUCE_SCATTER => result::reduce_scatter(s, r, c.count as usize, sum_type()?, sum, self.comm, st).map_err(nccl("ncclReduceScatter"))?,
                ALL_GATHER => result::all_gather(s, r, bytes, ncclUint8, self.comm, st).map_err(nccl("ncclAllGather"))?,
                SEND => result::send(s, bytes, ncclUint8, c.peer, self.comm, st).map_err(nccl("ncclSend"))?,
                RECV => result::recv(r, bytes, ncclUint8, c.peer, self.comm, st).map_err(nccl("ncclRecv"))?,
                op => return Err(CudaError(format!("collective op {op}"))),
            };
            if c.op == SEND && send != recv {
                // The node's output is the value sent.
                drv::memcpy_dtod_async(recv, send, bytes, stream).map_err(|e| CudaError(format!("cuMemcpyDtoDAsync: {e:?}")))?;
            }
        }
        Ok(())
    }
}

impl Drop for Nccl {
    fn drop(&mut self) {
        // SAFETY: created in `init`, destroyed once; then the primary context `init` retained.
        unsafe {
            let _ = result::comm_destroy(self.comm);
            let _ = drv::primary_ctx::release(self.dev);
        }
    }
}
