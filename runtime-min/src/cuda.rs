//! The CUDA executor (feature `cuda`) for artifacts written by `rlxc compile --target cuda`:
//! `NAME.ptx` (entry points `k0`, `k1`, …, one `ptr` parameter per schedule buffer, in order),
//! `NAME.schedule.bin` (version 3: each dispatch's grid and block; version 5 also its dynamic shared
//! bytes — a kernel over 48 KiB is opted in to them at load, and every launch passes them) and
//! `NAME.weights.bin`.
//!
//! The CUDA driver (`libcuda.so.1`) is opened at run time through cudarc's `dynamic-loading`: building
//! needs no CUDA SDK, and a machine without the driver gets [`CudaError`] from [`probe`] /
//! [`Executor::new`], never a link error or a panic ([`probe`] checks that the library is present
//! before any driver call).
//!
//! Setup (once, in `new`): the device's primary context, one non-blocking stream, the PTX module (JIT-
//! compiled by the driver for the device), one device allocation per schedule buffer (the weights
//! copied in once, the arena zeroed), and the whole schedule captured as **one CUDA graph** and
//! instantiated. `run` copies the inputs in, launches the graph once, copies the outputs out, and waits
//! for the stream: one launch from the host. The graph's edges come from the schedule's byte ranges:
//! the dispatches are captured level by level ([`Schedule::levels`], as the Vulkan executor places its
//! barriers), a level's dispatches on up to [`MAX_BRANCHES`] streams forked from the main one and
//! joined back before the next level, so the graph runs them as parallel branches (MiniLM: a layer's
//! Q, K and V projections; on an H200 batch 1 513 → 484 µs f32, 413 → 372 tf32, 385 → 351 bf16,
//! 1–4% at batch 8 / 32, the output bit for bit the chain's). `RLX_CUDA_CONCURRENT=0` at run time
//! captures one chain in schedule order instead.
//!
//! Programmatic dependent launch (sm_90): a kernel whose PTX begins with `griddepcontrol.wait` (the
//! NVPTX writer's `pdl.rs`, `--sm 90`) is captured with `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`,
//! so the graph's edges into it are programmatic: it is launched as the blocks of the kernels before it
//! exit, not once they have finished and been flushed, and waits in its first instruction for them,
//! which overlaps part of the launch latency between dependent kernels (H200, MiniLM batch 1: f32 484 →
//! 473 µs, tf32 346 → 332, bf16 319 → 305; batch 8 / 32 within the rounds' spread). `RLX_CUDA_PDL=0` at run time
//! captures plain edges (the wait then returns at once), as does a sharded rank's schedule; a driver
//! that refuses the attribute in a capture gets the plain graph.
//!
//! A sharded rank's schedule (version 4) also holds collectives: [`Executor::with_nccl`] (feature
//! `nccl`) issues each one through the application's NCCL communicator ([`crate::nccl::Nccl`]) on the
//! same stream, in schedule order, inside the same captured graph; [`Executor::new`] refuses such a
//! schedule.
//!
//! A stateful model (a KV cache: schedule base kind 4) keeps its state region on the device between
//! runs, zeroed at setup and by [`Executor::reset_state`]; each run's kernels read and write it in
//! place, so a decode step moves only its inputs and outputs over PCIe.
//!
//! Unlike the rest of runtime-min this module allocates (at setup) and uses `std`.

use crate::schedule::{Barriers, BaseKind, Collective, Schedule};
use cudarc::driver::{result, sys};
use std::ffi::{c_void, CString};
use std::format;
use std::string::String;
use std::vec::Vec;

/// What went wrong, in words (no CUDA driver, no device, a malformed schedule, a driver error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaError(pub String);

impl core::fmt::Display for CudaError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CudaError {}

impl From<crate::schedule::ScheduleError> for CudaError {
    fn from(e: crate::schedule::ScheduleError) -> CudaError {
        CudaError(e.0)
    }
}

fn drv(what: &str) -> impl Fn(result::DriverError) -> CudaError + '_ {
    move |e| CudaError(format!("{what}: {e:?}"))
}

/// Opens the driver and device 0 (`RLX_CUDA_DEVICE=i` another): its name and compute capability, or
/// why there is none. Nothing is called in the driver unless `libcuda` is found.
pub fn probe() -> Result<(String, (i32, i32)), CudaError> {
    let dev = open_device()?;
    let name = result::device::get_name(dev).map_err(drv("cuDeviceGetName"))?;
    Ok((name, capability(dev)?))
}

/// The number of CUDA devices the driver reports (an error without a driver).
pub fn device_count() -> Result<i32, CudaError> {
    // SAFETY: only looks for the library file; no driver function is called.
    if !unsafe { sys::is_culib_present() } {
        return Err(CudaError("no CUDA driver: libcuda.so could not be loaded (no NVIDIA driver on this machine)".into()));
    }
    result::init().map_err(drv("cuInit"))?;
    result::device::get_count().map_err(drv("cuDeviceGetCount"))
}

fn open_device() -> Result<sys::CUdevice, CudaError> {
    let want = match std::env::var("RLX_CUDA_DEVICE") {
        Ok(v) => v.parse::<i32>().map_err(|_| CudaError(format!("RLX_CUDA_DEVICE={v}: expected a device index")))?,
        Err(_) => 0,
    };
    open_device_index(want)
}

/// Device `want` (an error naming it when the driver has fewer).
pub(crate) fn open_device_index(want: i32) -> Result<sys::CUdevice, CudaError> {
    let n = device_count()?;
    if want < 0 || want >= n {
        return Err(CudaError(format!("CUDA device {want} requested, the driver reports {n}")));
    }
    result::device::get(want).map_err(drv("cuDeviceGet"))
}

fn capability(dev: sys::CUdevice) -> Result<(i32, i32), CudaError> {
    use sys::CUdevice_attribute::*;
    // SAFETY: `dev` came from cuDeviceGet.
    unsafe {
        let major = result::device::get_attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).map_err(drv("cuDeviceGetAttribute"))?;
        let minor = result::device::get_attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).map_err(drv("cuDeviceGetAttribute"))?;
        Ok((major, minor))
    }
}

/// The most streams one level's dispatches are captured on (further ones share them, in turn).
const MAX_BRANCHES: usize = 4;

/// The entry points `k{I}` of `ptx` whose first instruction other than declarations and parameter
/// loads (`ld.param`: the launch's own constants) is `griddepcontrol.wait`: those may be launched programmatically, since nothing of theirs touches
/// memory or branches before their dependencies have finished.
fn kernels_that_wait(ptx: &str) -> std::collections::BTreeSet<u32> {
    let mut out = std::collections::BTreeSet::new();
    for part in ptx.split(".entry k").skip(1) {
        let Some(id) = part.split(|c: char| !c.is_ascii_digit()).next().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Some(open) = part.find('{') else { continue };
        let skip = [".reg", "//", ".shared", ".local", "ld.param"];
        let first = part[open + 1..].lines().map(str::trim).find(|l| !l.is_empty() && !skip.iter().any(|s| l.starts_with(s)));
        if first.is_some_and(|l| l.starts_with("griddepcontrol.wait")) {
            out.insert(id);
        }
    }
    out
}

/// `cuLaunchKernelEx` of `f` on `st` with `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`.
///
/// # Safety
/// As `cuLaunchKernel`: `f` a function of the current context, `args` its parameters, `st` a stream of it.
unsafe fn launch_programmatic(f: sys::CUfunction, g: (u32, u32, u32), b: (u32, u32, u32), shared: u32, st: sys::CUstream, args: &mut [*mut c_void]) -> Result<(), result::DriverError> {
    // SAFETY: an all-zero attribute is a valid C struct (its value a union of plain fields).
    let mut attr: sys::CUlaunchAttribute = unsafe { core::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig { gridDimX: g.0, gridDimY: g.1, gridDimZ: g.2, blockDimX: b.0, blockDimY: b.1, blockDimZ: b.2, sharedMemBytes: shared, hStream: st, attrs: &mut attr, numAttrs: 1 };
    // SAFETY: the caller's contract; `config` and `attr` outlive the call.
    unsafe { sys::cuLaunchKernelEx(&config, f, args.as_mut_ptr(), core::ptr::null_mut()) }.result()
}

/// A loaded artifact on one CUDA device, ready to run any number of times.
pub struct Executor {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    stream: sys::CUstream,
    /// The streams a level's further dispatches are captured on (forked from and joined back into
    /// `stream`), so they are parallel branches of the graph.
    side: Vec<sys::CUstream>,
    module: sys::CUmodule,
    /// The communicator the graph's collectives use: kept alive as long as the graph.
    #[cfg(feature = "nccl")]
    _nccl: Option<std::sync::Arc<crate::nccl::Nccl>>,
    /// One device allocation per schedule buffer: (kind, pointer, exact bytes).
    bufs: Vec<(BaseKind, sys::CUdeviceptr, u64)>,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    /// Buffer index of input i / output i, and of the state region (a stateful model's).
    inputs: Vec<usize>,
    outputs: Vec<usize>,
    state: Option<usize>,
    name: String,
    dispatches: usize,
    /// Collectives in the graph (a sharded rank's).
    collectives: usize,
    /// Per kernel dispatch: its function, grid, block and dynamic shared bytes (for [`Executor::kernel_times`]).
    launches: Vec<(sys::CUfunction, (u32, u32, u32), (u32, u32, u32), u32)>,
    /// Kernels captured with programmatic dependent launch (see the module documentation).
    programmatic: usize,
    /// Per output: page-locked host memory of its size the device copies into (a copy into pageable
    /// memory is staged by the driver, several times slower: a language model's 1 MB of logits per
    /// token), then copied into the caller's slice.
    staging: Vec<(*mut c_void, usize)>,
    /// The outputs' bytes in pieces of about a [`COPY_PIECES`]-th of their total (output, start, end,
    /// whether an event follows the piece's copy: at most [`COPY_PIECES`] do), fixed at setup, and
    /// those events ([`Executor::run`]).
    pieces: Vec<(usize, usize, usize, bool)>,
    copied: Vec<sys::CUevent>,
}

/// Pieces the outputs' copies out are cut into: each is copied into the caller's slice as soon as its
/// event says it has landed, while the device copies the next ones (a 6.3 MB output — MiniLM batch 32 —
/// had been copied to page-locked memory whole, then into the caller's slice whole).
const COPY_PIECES: usize = 8;
/// The smallest piece worth an event of its own.
const COPY_PIECE_MIN: usize = 256 << 10;

/// Outputs of `sizes` bytes in pieces of about a [`COPY_PIECES`]-th of their total, at least
/// [`COPY_PIECE_MIN`]: (output, start, end, whether an event follows the piece's copy) — every k-th
/// piece and the last, at most [`COPY_PIECES`] of them.
fn copy_pieces(sizes: &[usize]) -> Vec<(usize, usize, usize, bool)> {
    let size = sizes.iter().sum::<usize>().div_ceil(COPY_PIECES).max(COPY_PIECE_MIN);
    let mut pieces: Vec<_> = sizes.iter().enumerate().flat_map(|(o, &n)| (0..n).step_by(size).map(move |a| (o, a, (a + size).min(n), false))).collect();
    let (count, every) = (pieces.len(), pieces.len().div_ceil(COPY_PIECES).max(1));
    for (i, p) in pieces.iter_mut().enumerate() {
        p.3 = (i + 1) % every == 0 || i + 1 == count;
    }
    pieces
}

impl Executor {
    /// Loads `dir/NAME.ptx`, `dir/NAME.schedule.bin` and `dir/NAME.weights.bin`.
    pub fn load(dir: &std::path::Path, name: &str) -> Result<Executor, CudaError> {
        let read = |ext: &str| {
            let p = dir.join(format!("{name}.{ext}"));
            std::fs::read(&p).map_err(|e| CudaError(format!("{}: {e}", p.display())))
        };
        let ptx = String::from_utf8(read("ptx")?).map_err(|_| CudaError(format!("{name}.ptx is not UTF-8 text")))?;
        Executor::new(&ptx, &read("schedule.bin")?, &read("weights.bin")?)
    }

    /// Sets up the program (see the module documentation). Checks the schedule and the weights' size
    /// before touching the driver. A schedule with collectives is refused: [`Executor::with_nccl`].
    pub fn new(ptx: &str, schedule: &[u8], weights: &[u8]) -> Result<Executor, CudaError> {
        Executor::setup(ptx, schedule, weights, None)
    }

    /// A sharded rank: sets up the program on the communicator's device and issues each collective
    /// of the schedule through `comm` on the executor's stream, between the kernels, inside the
    /// captured graph. Every collective's rank count must be the communicator's size.
    #[cfg(feature = "nccl")]
    pub fn with_nccl(ptx: &str, schedule: &[u8], weights: &[u8], comm: std::sync::Arc<crate::nccl::Nccl>) -> Result<Executor, CudaError> {
        Executor::setup(ptx, schedule, weights, Some(comm))
    }

    #[cfg(feature = "nccl")]
    fn setup(ptx: &str, schedule: &[u8], weights: &[u8], comm: Option<std::sync::Arc<crate::nccl::Nccl>>) -> Result<Executor, CudaError> {
        let sched = Schedule::parse(schedule)?;
        if let Some(n) = &comm {
            if let Some(c) = sched.dispatches.iter().filter_map(|d| d.comm).find(|c| c.ranks > 1 && c.ranks as i32 != n.size()) {
                return Err(CudaError(format!("the schedule has a collective over {} ranks, the NCCL communicator has {}", c.ranks, n.size())));
            }
            if let Some(c) = sched.dispatches.iter().filter_map(|d| d.comm).find(|c| c.peer >= n.size() || c.peer == n.rank()) {
                return Err(CudaError(format!("the schedule has a transfer with rank {} (this is rank {} of {})", c.peer, n.rank(), n.size())));
            }
        }
        let dev = comm.as_ref().map(|n| n.device());
        let issue = comm.clone();
        let issue = move |c: &Collective, s: sys::CUdeviceptr, r: sys::CUdeviceptr, st: sys::CUstream| match &issue {
            // SAFETY: the executor's buffers hold the bytes the schedule's ranges state (checked at
            // parse), on the communicator's device; `st` is the executor's stream.
            Some(n) => unsafe { n.issue(c, s, r, st) },
            None => Err(CudaError("no communicator".into())),
        };
        let mut ex = Executor::build(ptx, &sched, weights, dev, comm.is_some(), &issue)?;
        ex._nccl = comm;
        Ok(ex)
    }

    #[cfg(not(feature = "nccl"))]
    fn setup(ptx: &str, schedule: &[u8], weights: &[u8], _comm: Option<()>) -> Result<Executor, CudaError> {
        let sched = Schedule::parse(schedule)?;
        let none = |_: &Collective, _: sys::CUdeviceptr, _: sys::CUdeviceptr, _: sys::CUstream| Err(CudaError("no communicator".into()));
        Executor::build(ptx, &sched, weights, None, false, &none)
    }

    /// The setup of [`Executor::new`] on device index `device` (`None`: `RLX_CUDA_DEVICE`, else 0),
    /// opened after the schedule's checks; `has_comm`: a communicator issues the collectives through
    /// `issue` (without one a schedule with collectives is refused).
    fn build(
        ptx: &str,
        sched: &Schedule,
        weights: &[u8],
        device: Option<i32>,
        has_comm: bool,
        issue: &dyn Fn(&Collective, sys::CUdeviceptr, sys::CUdeviceptr, sys::CUstream) -> Result<(), CudaError>,
    ) -> Result<Executor, CudaError> {
        if !has_comm && sched.collectives() > 0 {
            let how = if cfg!(feature = "nccl") { "load it with Executor::with_nccl and the application's NCCL communicator" } else { "this runtime was built without the nccl feature" };
            return Err(CudaError(format!("the schedule has {} collectives (a sharded rank): {how}", sched.collectives())));
        }
        if sched.dispatches.iter().any(|d| d.block == [0; 3]) {
            return Err(CudaError("the schedule has no block sizes (version 2, a shader artifact): compile with --target cuda".into()));
        }
        let wbytes = sched.bases.iter().find(|b| b.0 == BaseKind::Weights).map_or(0, |b| b.1);
        if wbytes != weights.len() as u64 {
            return Err(CudaError(format!("the weights are {} bytes, the schedule expects {wbytes}", weights.len())));
        }
        let ptx_c = CString::new(ptx).map_err(|_| CudaError("the PTX contains a NUL byte".into()))?;
        let port = |want: fn(BaseKind) -> Option<u32>| -> Result<Vec<usize>, CudaError> {
            let mut v: Vec<(u32, usize)> = sched.bases.iter().enumerate().filter_map(|(i, b)| want(b.0).map(|k| (k, i))).collect();
            v.sort();
            if v.iter().enumerate().any(|(i, (k, _))| *k as usize != i) {
                return Err(CudaError("malformed schedule: ports are not numbered 0..n".into()));
            }
            Ok(v.into_iter().map(|(_, i)| i).collect())
        };
        let inputs = port(|k| if let BaseKind::Input(i) = k { Some(i) } else { None })?;
        let outputs = port(|k| if let BaseKind::Output(i) = k { Some(i) } else { None })?;
        let dev = match device {
            Some(i) => open_device_index(i)?,
            None => open_device()?,
        };
        let name = result::device::get_name(dev).map_err(drv("cuDeviceGetName"))?;
        // SAFETY: `dev` came from cuDeviceGet; every handle below is created here and destroyed in Drop
        // (or right away when setup fails), and every copy's host slice outlives the call (sync copies).
        let ctx = unsafe { result::primary_ctx::retain(dev) }.map_err(drv("cuDevicePrimaryCtxRetain"))?;
        let state = sched.bases.iter().position(|b| b.0 == BaseKind::State);
        let mut ex = Executor { dev, ctx, stream: core::ptr::null_mut(), side: Vec::new(), module: core::ptr::null_mut(), bufs: Vec::new(), graph: core::ptr::null_mut(), exec: core::ptr::null_mut(), inputs, outputs, state, name, dispatches: sched.dispatches.len(), launches: Vec::new(), programmatic: 0, collectives: sched.collectives(), staging: Vec::new(), pieces: Vec::new(), copied: Vec::new(), #[cfg(feature = "nccl")] _nccl: None };
        unsafe { result::ctx::set_current(ctx) }.map_err(drv("cuCtxSetCurrent"))?;
        ex.stream = result::stream::create(result::stream::StreamKind::NonBlocking).map_err(drv("cuStreamCreate"))?;
        ex.module = unsafe { result::module::load_data(ptx_c.as_ptr() as *const c_void) }.map_err(drv("cuModuleLoadData (the PTX does not load on this device)"))?;
        for &(kind, bytes) in &sched.bases {
            let n = usize::try_from(bytes).map_err(|_| CudaError(format!("a buffer of {bytes} bytes does not fit this machine")))?;
            // Room for whole words (the ranges cover them) and never a zero-byte allocation.
            let p = unsafe { result::malloc_sync(n.div_ceil(4).max(1) * 4) }.map_err(drv(&format!("cuMemAlloc of {n} bytes")))?;
            ex.bufs.push((kind, p, bytes));
            unsafe { result::memset_d8_sync(p, 0, n.div_ceil(4).max(1) * 4) }.map_err(drv("cuMemsetD8"))?;
            if kind == BaseKind::Weights && n > 0 {
                unsafe { result::memcpy_htod_sync(p, weights) }.map_err(drv("uploading the weights"))?;
            }
        }
        for &b in &ex.outputs {
            let n = ex.bufs[b].2 as usize;
            let p = if n == 0 { core::ptr::null_mut() } else { unsafe { result::malloc_host(n, 0) }.map_err(drv(&format!("cuMemHostAlloc of {n} bytes")))? };
            ex.staging.push((p, n));
        }
        ex.pieces = copy_pieces(&ex.staging.iter().map(|s| s.1).collect::<Vec<_>>());
        for _ in ex.pieces.iter().filter(|p| p.3) {
            ex.copied.push(result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).map_err(drv("cuEventCreate"))?);
        }
        let mut funcs = Vec::with_capacity(sched.dispatches.len());
        for d in &sched.dispatches {
            if d.comm.is_some() {
                funcs.push(core::ptr::null_mut());
                continue;
            }
            let entry = CString::new(format!("k{}", d.entry)).map_err(|_| CudaError("bad entry name".into()))?;
            let f = unsafe { result::module::get_function(ex.module, entry) }.map_err(drv(&format!("the PTX has no entry point k{}", d.entry)))?;
            // More than 48 KiB of dynamic shared memory (a pipelined matmul tile, schedule version 5):
            // the kernel is opted in to the bytes the schedule records, passed again at each launch.
            if d.shared > 48 * 1024 {
                let attr = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
                unsafe { result::function::set_function_attribute(f, attr, d.shared as i32) }.map_err(drv(&format!("k{}: {} bytes of dynamic shared memory", d.entry, d.shared)))?;
            }
            funcs.push(f);
        }
        // Every kernel takes every buffer, in schedule order.
        let mut args: Vec<sys::CUdeviceptr> = ex.bufs.iter().map(|b| b.1).collect();
        let mut argp: Vec<*mut c_void> = args.iter_mut().map(|a| a as *mut sys::CUdeviceptr as *mut c_void).collect();
        // The kernels in schedule order (for `kernel_times`, which launches them one by one).
        for (d, f) in sched.dispatches.iter().zip(&funcs) {
            if d.comm.is_none() {
                ex.launches.push((*f, (d.groups[0], d.groups[1], d.groups[2]), (d.block[0], d.block[1], d.block[2]), d.shared));
            }
        }
        // Kernels that wait for their dependencies in their first instruction (`griddepcontrol.wait`)
        // may be launched programmatically; not in a sharded rank's graph, whose collectives' NCCL
        // kernels sit between ours (untried on two GPUs: plain edges there).
        let waits = kernels_that_wait(ptx);
        let pdl_on = std::env::var("RLX_CUDA_PDL").map_or(true, |v| v != "0") && ex.collectives == 0;
        let programmatic: Vec<bool> = sched.dispatches.iter().map(|d| pdl_on && d.comm.is_none() && waits.contains(&d.entry)).collect();
        // The graph's shape: the dispatches in levels (`Schedule::levels`: each one level after the last
        // earlier dispatch whose byte ranges conflict with its own), a level's dispatches captured on
        // different streams forked from the main one and joined back before the next level, so the
        // graph runs them as parallel branches (MiniLM: a layer's Q, K and V projections). A schedule
        // with collectives, or RLX_CUDA_CONCURRENT=0 at run time, is one chain in schedule order.
        let chain = ex.collectives > 0 || std::env::var("RLX_CUDA_CONCURRENT").is_ok_and(|v| v == "0");
        let levels = sched.levels(if chain { Barriers::All } else { Barriers::Levels });
        let width = levels.iter().map(|l| l.len()).max().unwrap_or(1).min(MAX_BRANCHES);
        for _ in 1..width {
            ex.side.push(result::stream::create(result::stream::StreamKind::NonBlocking).map_err(drv("cuStreamCreate"))?);
        }
        let mut events = Vec::new();
        let event = |events: &mut Vec<sys::CUevent>, st: sys::CUstream| -> Result<sys::CUevent, CudaError> {
            let e = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).map_err(drv("cuEventCreate"))?;
            events.push(e);
            unsafe { result::event::record(e, st) }.map_err(drv("cuEventRecord"))?;
            Ok(e)
        };
        let wait = |st: sys::CUstream, e: sys::CUevent| unsafe { result::stream::wait_event(st, e, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }.map_err(drv("cuStreamWaitEvent"));
        let mut capture = |pdl: bool| -> Result<(), CudaError> {
            for level in &levels {
                let used = level.len().min(width);
                if used > 1 {
                    let fork = event(&mut events, ex.stream)?;
                    for &st in &ex.side[..used - 1] {
                        wait(st, fork)?;
                    }
                }
                for (i, &di) in level.iter().enumerate() {
                    let st = if i % width == 0 { ex.stream } else { ex.side[i % width - 1] };
                    let d = &sched.dispatches[di];
                    if let Some(c) = &d.comm {
                        // A collective: its send (none for a receive) and receive buffers, at their bytes.
                        let at = |r: &crate::schedule::Range| ex.bufs[r.base as usize].1 + r.start;
                        let recv = d.ranges.last().map_or(0, at);
                        let send = if d.ranges.len() == 2 { at(&d.ranges[0]) } else { recv };
                        issue(c, send, recv, st)?;
                        continue;
                    }
                    let (g, b) = ((d.groups[0], d.groups[1], d.groups[2]), (d.block[0], d.block[1], d.block[2]));
                    if pdl && programmatic[di] {
                        unsafe { launch_programmatic(funcs[di], g, b, d.shared, st, &mut argp) }.map_err(drv(&format!("launching k{} (programmatic)", d.entry)))?;
                    } else {
                        unsafe { result::launch_kernel(funcs[di], g, b, d.shared, st, &mut argp) }.map_err(drv(&format!("launching k{}", d.entry)))?;
                    }
                }
                if used > 1 {
                    for &st in &ex.side[..used - 1] {
                        let join = event(&mut events, st)?;
                        wait(ex.stream, join)?;
                    }
                }
            }
            Ok(())
        };
        let mut attempt = |pdl: bool| -> Result<sys::CUgraph, CudaError> {
            unsafe { result::stream::begin_capture(ex.stream, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) }.map_err(drv("cuStreamBeginCapture"))?;
            let launched = capture(pdl);
            let graph = unsafe { result::stream::end_capture(ex.stream) }.map_err(drv("cuStreamEndCapture"));
            match (launched, graph) {
                (Ok(()), g) => g,
                (Err(e), g) => {
                    match g {
                        Ok(g) if !g.is_null() => {
                            let _ = unsafe { result::graph::destroy(g) };
                        }
                        _ => {}
                    }
                    Err(e)
                }
            }
        };
        let any = programmatic.iter().any(|&p| p);
        let graph = match attempt(any) {
            // A driver that does not take the attribute inside a capture: the plain graph.
            Err(_) if any => attempt(false),
            g => {
                if any && g.is_ok() {
                    ex.programmatic = programmatic.iter().filter(|&&p| p).count();
                }
                g
            }
        };
        for e in events {
            let _ = unsafe { result::event::destroy(e) };
        }
        ex.graph = graph?;
        if ex.graph.is_null() {
            return Err(CudaError("stream capture produced no graph".into()));
        }
        ex.exec = unsafe { result::graph::instantiate(ex.graph, sys::CUgraphInstantiate_flags(0)) }.map_err(drv("cuGraphInstantiate"))?;
        unsafe { result::graph::upload(ex.exec, ex.stream) }.map_err(drv("cuGraphUpload"))?;
        unsafe { result::stream::synchronize(ex.stream) }.map_err(drv("cuStreamSynchronize"))?;
        drop(args);
        Ok(ex)
    }

    /// The device's name.
    pub fn device_name(&self) -> &str {
        &self.name
    }

    /// The device's compute capability (major, minor).
    pub fn capability(&self) -> Result<(i32, i32), CudaError> {
        capability(self.dev)
    }

    /// Bytes of the state region kept on the device between runs (0: a stateless model).
    pub fn state_bytes(&self) -> u64 {
        self.state.map_or(0, |i| self.bufs[i].2)
    }

    /// Zeroes the state region (a new sequence for a KV cache; the state is zero after setup too).
    pub fn reset_state(&mut self) -> Result<(), CudaError> {
        let Some(i) = self.state else { return Ok(()) };
        let (_, p, n) = self.bufs[i];
        // SAFETY: `p` is this executor's allocation of at least `n` rounded up to words; the stream is
        // synchronized first so no graph launch still reads it.
        unsafe {
            result::ctx::set_current(self.ctx).map_err(drv("cuCtxSetCurrent"))?;
            result::stream::synchronize(self.stream).map_err(drv("cuStreamSynchronize"))?;
            result::memset_d8_sync(p, 0, (n as usize).div_ceil(4).max(1) * 4).map_err(drv("cuMemsetD8 (state)"))
        }
    }

    /// A copy of the state region's bytes (for checks: a KV cache as the device holds it).
    pub fn read_state(&mut self) -> Result<Vec<u8>, CudaError> {
        let Some(i) = self.state else { return Ok(Vec::new()) };
        let (_, p, n) = self.bufs[i];
        let mut out = std::vec![0u8; n as usize];
        // SAFETY: `out` is exactly the region's bytes; synchronous copy after the stream's work.
        unsafe {
            result::ctx::set_current(self.ctx).map_err(drv("cuCtxSetCurrent"))?;
            result::stream::synchronize(self.stream).map_err(drv("cuStreamSynchronize"))?;
            if n > 0 {
                result::memcpy_dtoh_sync(&mut out, p).map_err(drv("copying the state out"))?;
            }
        }
        Ok(out)
    }

    /// Collectives in the graph.
    pub fn collectives(&self) -> usize {
        self.collectives
    }

    /// Kernel launches and collectives in the graph.
    pub fn dispatches(&self) -> usize {
        self.dispatches
    }

    /// Bytes of each input port, in port order (what [`run`](Self::run) takes).
    pub fn input_sizes(&self) -> Vec<u64> {
        self.inputs.iter().map(|&b| self.bufs[b].2).collect()
    }

    /// Bytes of each output port, in port order (what [`run`](Self::run) writes).
    pub fn output_sizes(&self) -> Vec<u64> {
        self.outputs.iter().map(|&b| self.bufs[b].2).collect()
    }

    /// Kernels in the graph launched programmatically (0: plain edges only; see the module documentation).
    pub fn programmatic(&self) -> usize {
        self.programmatic
    }

    /// Device time of each dispatch in ms, in schedule order (profiling: `cuda_run` prints them with
    /// `RLX_CUDA_KERNEL_TIMES=1`). The dispatches are launched one by one outside the graph, in order
    /// (a whole run on the inputs last copied in), each between two events; the median of `reps` runs.
    pub fn kernel_times(&mut self, reps: usize) -> Result<Vec<f32>, CudaError> {
        if self.collectives > 0 {
            return Err(CudaError("kernel times are not measured for a sharded rank (its collectives run only inside the graph)".into()));
        }
        let mut args: Vec<sys::CUdeviceptr> = self.bufs.iter().map(|b| b.1).collect();
        let mut argp: Vec<*mut c_void> = args.iter_mut().map(|a| a as *mut sys::CUdeviceptr as *mut c_void).collect();
        let n = self.launches.len();
        let mut events = Vec::with_capacity(n + 1);
        let mut times: Vec<Vec<f32>> = (0..n).map(|_| Vec::with_capacity(reps)).collect();
        // SAFETY: the events are created here and destroyed below; the kernels take every buffer, as
        // in the graph; the stream is synchronized before the times are read.
        let r: Result<(), CudaError> = (|| unsafe {
            result::ctx::set_current(self.ctx).map_err(drv("cuCtxSetCurrent"))?;
            for _ in 0..=n {
                events.push(result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(drv("cuEventCreate"))?);
            }
            for _ in 0..reps.max(1) {
                result::event::record(events[0], self.stream).map_err(drv("cuEventRecord"))?;
                for (i, &(f, g, b, sh)) in self.launches.iter().enumerate() {
                    result::launch_kernel(f, g, b, sh, self.stream, &mut argp).map_err(drv(&format!("launching dispatch {i}")))?;
                    result::event::record(events[i + 1], self.stream).map_err(drv("cuEventRecord"))?;
                }
                result::stream::synchronize(self.stream).map_err(drv("running the kernels one by one (a kernel failed)"))?;
                for (i, t) in times.iter_mut().enumerate() {
                    t.push(result::event::elapsed(events[i], events[i + 1]).map_err(drv("cuEventElapsedTime"))?);
                }
            }
            Ok(())
        })();
        for e in events {
            let _ = unsafe { result::event::destroy(e) };
        }
        drop(args);
        r?;
        Ok(times
            .into_iter()
            .map(|mut t| {
                t.sort_by(f32::total_cmp);
                t.get(t.len() / 2).copied().unwrap_or(0.0)
            })
            .collect())
    }

    /// Launches the graph again on what the device buffers hold — the inputs of the last [`run`](Self::run)
    /// — and waits for it; nothing is copied in or out. The device's share of a run, the way a
    /// framework's graph replay with its tensors on the GPU is timed (`cuda_run`'s "resident" figure).
    pub fn launch(&mut self) -> Result<(), CudaError> {
        // SAFETY: the graph and stream live as long as `self`; the stream is synchronized before returning.
        unsafe {
            result::ctx::set_current(self.ctx).map_err(drv("cuCtxSetCurrent"))?;
            result::graph::launch(self.exec, self.stream).map_err(drv("cuGraphLaunch"))?;
            result::stream::synchronize(self.stream).map_err(drv("running the graph (a kernel failed)"))?;
        }
        Ok(())
    }

    /// Copies `inputs` in, launches the graph, copies the outputs out (each slice exactly its port's
    /// bytes, in port order). Errors, never panics, on wrong counts or sizes.
    pub fn run(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), CudaError> {
        if inputs.len() != self.inputs.len() || outputs.len() != self.outputs.len() {
            return Err(CudaError(format!("{} inputs and {} outputs given, the model has {} and {}", inputs.len(), outputs.len(), self.inputs.len(), self.outputs.len())));
        }
        for (i, (x, &b)) in inputs.iter().zip(&self.inputs).enumerate() {
            if x.len() as u64 != self.bufs[b].2 {
                return Err(CudaError(format!("input {i} is {} bytes, the model takes {}", x.len(), self.bufs[b].2)));
            }
        }
        for (i, (y, &b)) in outputs.iter().zip(&self.outputs).enumerate() {
            if y.len() as u64 != self.bufs[b].2 {
                return Err(CudaError(format!("output {i} is {} bytes, the model writes {}", y.len(), self.bufs[b].2)));
            }
        }
        // SAFETY: sizes checked above; the stream is synchronized before the host slices are released.
        unsafe {
            result::ctx::set_current(self.ctx).map_err(drv("cuCtxSetCurrent"))?;
            for (x, &b) in inputs.iter().zip(&self.inputs) {
                if !x.is_empty() {
                    result::memcpy_htod_async(self.bufs[b].1, x, self.stream).map_err(drv("copying an input in"))?;
                }
            }
            result::graph::launch(self.exec, self.stream).map_err(drv("cuGraphLaunch"))?;
            // Each piece copied to page-locked memory, an event after those that have one (`pieces`);
            // then, event by event, the pieces before it copied into the caller's slices while the
            // later ones are on their way.
            let mut events = self.copied.iter();
            for &(o, a, e, mark) in &self.pieces {
                let host = core::slice::from_raw_parts_mut((self.staging[o].0 as *mut u8).add(a), e - a);
                result::memcpy_dtoh_async(host, self.bufs[self.outputs[o]].1 + a as u64, self.stream).map_err(drv("copying an output out"))?;
                if let Some(&ev) = if mark { events.next() } else { None } {
                    result::event::record(ev, self.stream).map_err(drv("cuEventRecord"))?;
                }
            }
            let (mut events, mut done) = (self.copied.iter(), 0);
            for (i, &(.., mark)) in self.pieces.iter().enumerate() {
                if let Some(&ev) = if mark { events.next() } else { None } {
                    result::event::synchronize(ev).map_err(drv("running the graph (a kernel failed)"))?;
                    for &(o, a, e, _) in &self.pieces[done..=i] {
                        outputs[o][a..e].copy_from_slice(core::slice::from_raw_parts((self.staging[o].0 as *const u8).add(a), e - a));
                    }
                    done = i + 1;
                }
            }
            result::stream::synchronize(self.stream).map_err(drv("running the graph (a kernel failed)"))?;
        }
        Ok(())
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        // SAFETY: each handle was created in `new` and is destroyed once; errors at teardown are ignored.
        unsafe {
            let _ = result::ctx::set_current(self.ctx);
            if !self.stream.is_null() {
                let _ = result::stream::synchronize(self.stream);
            }
            if !self.exec.is_null() {
                let _ = result::graph::exec_destroy(self.exec);
            }
            if !self.graph.is_null() {
                let _ = result::graph::destroy(self.graph);
            }
            for &(_, p, _) in &self.bufs {
                let _ = result::free_sync(p);
            }
            for &(h, _) in &self.staging {
                if !h.is_null() {
                    let _ = result::free_host(h);
                }
            }
            for &e in &self.copied {
                let _ = result::event::destroy(e);
            }
            if !self.module.is_null() {
                let _ = result::module::unload(self.module);
            }
            for &st in &self.side {
                let _ = result::stream::destroy(st);
            }
            if !self.stream.is_null() {
                let _ = result::stream::destroy(self.stream);
            }
            let _ = result::primary_ctx::release(self.dev);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    /// The pieces cover each output once, in order, with at most COPY_PIECES events, the last piece's
    /// among them (so every piece is waited for before `run` returns).
    #[test]
    fn output_copies_are_cut_into_covering_pieces() {
        for sizes in [vec![], vec![0], vec![100], vec![6_291_456], vec![6_291_456, 4, 0, 1 << 20], vec![300 << 10; 17]] {
            let pieces = copy_pieces(&sizes);
            for (o, &n) in sizes.iter().enumerate() {
                let mine: Vec<_> = pieces.iter().filter(|p| p.0 == o).collect();
                assert!(mine.windows(2).all(|w| w[0].2 == w[1].1) && mine.first().map_or(0, |p| p.1) == 0 && mine.last().map_or(0, |p| p.2) == n, "{sizes:?}: output {o}");
            }
            assert!(pieces.iter().filter(|p| p.3).count() <= COPY_PIECES && pieces.last().is_none_or(|p| p.3), "{sizes:?}");
        }
    }

    #[test]
    fn bad_schedules_and_weights_are_errors_before_the_driver() {
        let words = |w: &[u32]| -> Vec<u8> { w.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let magic = crate::schedule::SCHEDULE_MAGIC;
        // A version-2 (shader) schedule has no block sizes.
        let v2 = words(&[magic, 2, 1, 1, 0, 8, 0, 1, 0, 1, 1, 1, 0]);
        assert!(Executor::new("", &v2, &[0; 8]).err().unwrap().0.contains("no block sizes"));
        // Version 3, weights of 8 bytes: 4 given.
        let v3 = words(&[magic, 3, 1, 1, 0, 8, 0, 1, 0, 1, 1, 1, 256, 1, 1, 0]);
        assert!(Executor::new("", &v3, &[0; 4]).err().unwrap().0.contains("the weights are 4 bytes, the schedule expects 8"));
        // A block of zero threads or more than 1024 is malformed.
        let zero = words(&[magic, 3, 1, 1, 0, 8, 0, 1, 0, 1, 1, 1, 0, 1, 1, 0]);
        assert!(Executor::new("", &zero, &[0; 8]).err().unwrap().0.contains("block"));
        let big = words(&[magic, 3, 1, 1, 0, 8, 0, 1, 0, 1, 1, 1, 64, 32, 1, 0]);
        assert!(Executor::new("", &big, &[0; 8]).err().unwrap().0.contains("1 to 1024"));
    }

    #[test]
    fn only_kernels_that_wait_first_are_programmatic() {
        // k3 as LLVM's NVPTX back end writes it under --sm 90 (declarations, a parameter load, the
        // inline wait); k4 loads from global memory before it waits; k5 never waits.
        let ptx = ".visible .entry k3(\n\t.param .u64 k3_param_0\n)\n.maxntid 256, 1, 1\n{\n\t.reg .b64 \t%rd<421>;\n\t// demoted variable\n\t.shared .align 16 .b8 sa3[8256];\n\tld.param.u64 \t%rd159, [k3_param_0];\n\t// begin inline asm\n\tgriddepcontrol.wait;\n\t// end inline asm\n\tret;\n}\n\
                   .visible .entry k4(\n\t.param .u64 k4_param_0\n)\n{\n\tld.param.u64 \t%rd1, [k4_param_0];\n\tld.global.f32 \t%f1, [%rd1];\n\tgriddepcontrol.wait;\n\tret;\n}\n\
                   .visible .entry k5(\n\t.param .u64 k5_param_0\n)\n{\n\tret;\n}\n";
        assert_eq!(kernels_that_wait(ptx).into_iter().collect::<Vec<_>>(), std::vec![3]);
    }
}
