//! runtime-min (`rlx-rt`): what an object compiled by rlxc needs at run time, and what its callers
//! need to call it safely.
//!
//! - [`DType`] and [`TensorSpec`]: the element types and port descriptions of an artifact's manifest.
//! - [`Error`]: every code that `NAME_run` returns, plus the errors the Rust binding finds before it
//!   calls the object (a slice of the wrong length, an arena too small or misaligned).
//! - the checking helpers [`check_input`], [`check_output`], [`check_weights`], [`check_arena`],
//!   [`arena_ptr`], [`check_aligned`]; they return errors and never panic.
//! - [`Arena`]: an aligned byte buffer of a size known at compile time, for a `static` or the stack.
//! - [`parallel_for`] and its C symbol [`rlx_rt_parallel_for`], the one runtime function an object
//!   calls. Without the `std` feature a loop runs serially on the calling thread; with it, on a small
//!   persistent thread pool (see `pool.rs`).
//!
//! Invariants: `#![no_std]`, no allocation (the `std` pool allocates its workers once, on first
//! use), no dependencies (feature `vulkan` adds ash and the executor in `vulkan.rs`; feature `cuda` adds cudarc, the executor in `cuda.rs` and its C API in `cuda_c.rs`), no panics on caller input.

#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(any(feature = "std", test))]
extern crate std;

#[cfg(feature = "std")]
mod pool;
/// The communicator of sharded artifacts' collectives (`rlx_rt_comm_set`, `rlx_rt_collective`).
pub mod comm;

/// The GPU schedule format both device executors read (`NAME.schedule.bin`).
#[cfg(feature = "std")]
pub mod schedule;

/// The CUDA executor for PTX artifacts (feature `cuda`; the driver opened at run time, uses std and
/// allocates at setup).
#[cfg(feature = "cuda")]
pub mod cuda;
/// The CUDA executor's C API (feature `cuda`): the opaque `RlxCuda` handle and its `rlx_cuda_*`
/// functions, declared in `include/rlx_cuda.h`.
#[cfg(feature = "cuda")]
pub mod cuda_c;
#[cfg(feature = "nccl")]
pub mod nccl;

/// The Vulkan executor for shader artifacts (feature `vulkan`; uses std and allocates at setup).
#[cfg(feature = "vulkan")]
pub mod vulkan;

use core::ffi::c_void;
use core::fmt;

/// Alignment in bytes that an arena must have (`NAME_ARENA_ALIGN` in a generated header).
pub const ARENA_ALIGN: usize = 16;

/// Element types, with the same codes and order as rlxc's `rlx_ir::DType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DType {
    F32 = 0,
    F16 = 1,
    BF16 = 2,
    F64 = 3,
    I8 = 4,
    U8 = 5,
    I16 = 6,
    U16 = 7,
    I32 = 8,
    U32 = 9,
    I64 = 10,
    U64 = 11,
    /// One byte per value, 0 or 1.
    Bool = 12,
    /// GGUF Q8_0: blocks of 32 values in 34 bytes.
    Q8_0 = 13,
    /// GGUF Q4_0: blocks of 32 values in 18 bytes.
    Q4_0 = 14,
}

impl DType {
    /// The dtype with this code (`dtype as u8`), if any.
    pub const fn from_code(code: u8) -> Option<DType> {
        Some(match code {
            0 => DType::F32,
            1 => DType::F16,
            2 => DType::BF16,
            3 => DType::F64,
            4 => DType::I8,
            5 => DType::U8,
            6 => DType::I16,
            7 => DType::U16,
            8 => DType::I32,
            9 => DType::U32,
            10 => DType::I64,
            11 => DType::U64,
            12 => DType::Bool,
            13 => DType::Q8_0,
            14 => DType::Q4_0,
            _ => return None,
        })
    }

    /// The name rlxc's manifest uses (`"f32"`, `"bool"`, `"q8_0"`, …).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::U64 => "u64",
            DType::Bool => "bool",
            DType::Q8_0 => "q8_0",
            DType::Q4_0 => "q4_0",
        }
    }

    /// (values per block, bytes per block). Plain types have blocks of one value.
    pub const fn block(self) -> (usize, usize) {
        match self {
            DType::F32 | DType::I32 | DType::U32 => (1, 4),
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => (1, 2),
            DType::F64 | DType::I64 | DType::U64 => (1, 8),
            DType::I8 | DType::U8 | DType::Bool => (1, 1),
            DType::Q8_0 => (32, 34),
            DType::Q4_0 => (32, 18),
        }
    }

    /// Bytes per value for plain types; `None` for block-quantized types.
    pub const fn size(self) -> Option<usize> {
        match self.block() {
            (1, b) => Some(b),
            _ => None,
        }
    }

    /// Bytes that `elems` values take (a partial block counts whole; saturates at `usize::MAX`).
    pub const fn bytes_for(self, elems: usize) -> usize {
        let (n, b) = self.block();
        elems.div_ceil(n).saturating_mul(b)
    }
}

/// One input or output of an artifact: its manifest name, dtype and dense row-major shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: &'static str,
    pub dtype: DType,
    pub shape: &'static [usize],
}

impl TensorSpec {
    /// Number of values: the product of the shape (1 for a scalar; saturates at `usize::MAX`).
    pub const fn elems(&self) -> usize {
        let mut product = 1usize;
        let mut i = 0;
        while i < self.shape.len() {
            product = product.saturating_mul(self.shape[i]);
            i += 1;
        }
        product
    }

    /// Number of bytes the tensor takes.
    pub const fn bytes(&self) -> usize {
        self.dtype.bytes_for(self.elems())
    }
}

/// Why a call did not run. Codes 1–7 come from `NAME_run`; the rest are found before the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Code 1: the arena pointer is NULL.
    NullArena,
    /// Code 2: the inputs array is NULL.
    NullInputs,
    /// Code 3: the outputs array is NULL.
    NullOutputs,
    /// Code 4: an input pointer is NULL.
    NullInput,
    /// Code 5: an output pointer is NULL.
    NullOutput,
    /// Code 6: the arena is not aligned to [`ARENA_ALIGN`] bytes.
    MisalignedArena,
    /// Code 7: the artifact keeps its weights outside and `NAME_set_weights` was not called.
    NullWeights,
    /// Code 8 (stateful artifacts' `NAME_step`): the state pointer is NULL.
    NullState,
    /// Code 9: the state is not aligned to [`ARENA_ALIGN`] bytes.
    MisalignedState,
    /// Code 10 (sharded artifacts): a collective failed, or no communicator was set (`rlx_rt_comm_set`).
    Comm,
    /// Code 11 (artifacts with a loop region): a loop was still running at its maximum trip count.
    LoopBound,
    /// The state has `got` bytes where the artifact needs `need` (`NAME_STATE_BYTES`).
    StateTooSmall { need: usize, got: usize },
    /// Input `index` has `got` bytes where its spec needs `expected`.
    InputLength { index: usize, expected: usize, got: usize },
    /// Output `index` has `got` bytes where its spec needs `expected`.
    OutputLength { index: usize, expected: usize, got: usize },
    /// The external weights blob has `got` bytes where the artifact needs `expected`.
    WeightsLength { expected: usize, got: usize },
    /// The arena has `got` bytes where the artifact needs `need`.
    ArenaTooSmall { need: usize, got: usize },
    /// A buffer other than the arena is not aligned to `align` bytes.
    Misaligned { align: usize },
    /// A code that this version of the runtime does not know.
    Unknown(i32),
}

impl Error {
    /// The error for a `NAME_run` return code: `None` for 0 (success).
    ///
    /// `Error::from_code(rc).map_or(Ok(()), Err)` turns a code into a `Result`.
    pub const fn from_code(code: i32) -> Option<Error> {
        Some(match code {
            0 => return None,
            1 => Error::NullArena,
            2 => Error::NullInputs,
            3 => Error::NullOutputs,
            4 => Error::NullInput,
            5 => Error::NullOutput,
            6 => Error::MisalignedArena,
            7 => Error::NullWeights,
            8 => Error::NullState,
            9 => Error::MisalignedState,
            10 => Error::Comm,
            11 => Error::LoopBound,
            other => Error::Unknown(other),
        })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::NullArena => f.write_str("the arena pointer is NULL"),
            Error::NullState => f.write_str("the state pointer is NULL"),
            Error::Comm => f.write_str("a collective failed, or no communicator was set (rlx_rt_comm_set)"),
            Error::LoopBound => f.write_str("a loop region was still running at its maximum trip count"),
            Error::MisalignedState => write!(f, "the state is not aligned to {ARENA_ALIGN} bytes"),
            Error::StateTooSmall { need, got } => write!(f, "the state has {got} bytes, the model needs {need}"),
            Error::NullInputs => f.write_str("the inputs array is NULL"),
            Error::NullOutputs => f.write_str("the outputs array is NULL"),
            Error::NullInput => f.write_str("an input pointer is NULL"),
            Error::NullOutput => f.write_str("an output pointer is NULL"),
            Error::MisalignedArena => write!(f, "the arena is not aligned to {ARENA_ALIGN} bytes"),
            Error::NullWeights => f.write_str("external weights were not set (call NAME_set_weights first)"),
            Error::InputLength { index, expected, got } => {
                write!(f, "input {index} has {got} bytes, expected {expected}")
            }
            Error::OutputLength { index, expected, got } => {
                write!(f, "output {index} has {got} bytes, expected {expected}")
            }
            Error::WeightsLength { expected, got } => {
                write!(f, "the weights blob has {got} bytes, expected {expected}")
            }
            Error::ArenaTooSmall { need, got } => write!(f, "the arena has {got} bytes, needs {need}"),
            Error::Misaligned { align } => write!(f, "a buffer is not aligned to {align} bytes"),
            Error::Unknown(code) => write!(f, "unknown error code {code}"),
        }
    }
}

/// Checks that input `index`, `len` bytes long, matches `spec`.
pub fn check_input(index: usize, spec: &TensorSpec, len: usize) -> Result<(), Error> {
    match spec.bytes() {
        expected if expected == len => Ok(()),
        expected => Err(Error::InputLength { index, expected, got: len }),
    }
}

/// Checks that output `index`, `len` bytes long, matches `spec`.
pub fn check_output(index: usize, spec: &TensorSpec, len: usize) -> Result<(), Error> {
    match spec.bytes() {
        expected if expected == len => Ok(()),
        expected => Err(Error::OutputLength { index, expected, got: len }),
    }
}

/// Checks that an external weights blob of `len` bytes is the `expected` size.
pub fn check_weights(expected: usize, len: usize) -> Result<(), Error> {
    if expected == len {
        Ok(())
    } else {
        Err(Error::WeightsLength { expected, got: len })
    }
}

/// Checks an arena the way `NAME_run` will: not NULL, aligned to [`ARENA_ALIGN`], and (checked
/// here only) at least `need` bytes long.
pub fn check_arena(ptr: *const u8, len: usize, need: usize) -> Result<(), Error> {
    if ptr.is_null() {
        return Err(Error::NullArena);
    }
    if len < need {
        return Err(Error::ArenaTooSmall { need, got: len });
    }
    if !(ptr as usize).is_multiple_of(ARENA_ALIGN) {
        return Err(Error::MisalignedArena);
    }
    Ok(())
}

/// The zero-byte arena that [`arena_ptr`] hands out when an artifact needs none.
static EMPTY_ARENA: Arena<0> = Arena::new();

/// The pointer to pass to `NAME_run` for `arena`, after [`check_arena`].
///
/// When `need` is 0 any slice is accepted (an empty slice's pointer is dangling and may be
/// misaligned) and a pointer to a static zero-byte, aligned arena is returned instead.
pub fn arena_ptr(arena: &mut [u8], need: usize) -> Result<*mut u8, Error> {
    if need == 0 {
        // The object writes nothing through a zero-byte arena.
        return Ok(&EMPTY_ARENA as *const Arena<0> as *mut u8);
    }
    check_arena(arena.as_ptr(), arena.len(), need)?;
    Ok(arena.as_mut_ptr())
}

/// The state region of a stateful artifact (its KV cache) as the pointer `NAME_step` takes: at least
/// `need` bytes (`NAME_STATE_BYTES`), aligned to [`ARENA_ALIGN`]. The caller keeps it between calls.
pub fn state_ptr(state: &mut [u8], need: usize) -> Result<*mut u8, Error> {
    if state.len() < need {
        return Err(Error::StateTooSmall { need, got: state.len() });
    }
    if !(state.as_ptr() as usize).is_multiple_of(ARENA_ALIGN) {
        return Err(Error::MisalignedState);
    }
    Ok(state.as_mut_ptr())
}

/// Checks that `ptr` is aligned to `align` bytes (a power of two; 0 and 1 accept anything).
pub fn check_aligned(ptr: *const u8, align: usize) -> Result<(), Error> {
    if align > 1 && !(ptr as usize).is_multiple_of(align) {
        Err(Error::Misaligned { align })
    } else {
        Ok(())
    }
}

/// An arena of `N` bytes aligned to 64 (more than [`ARENA_ALIGN`], a cache line).
///
/// Use it as a `static` (`static mut ARENA: Arena<N> = Arena::new();`) or on the stack when `N` is
/// small; a large arena on a thread's stack overflows it.
#[repr(C, align(64))]
pub struct Arena<const N: usize>([u8; N]);

impl<const N: usize> Arena<N> {
    /// A zeroed arena.
    pub const fn new() -> Self {
        Arena([0; N])
    }

    /// `N`.
    pub const fn len(&self) -> usize {
        N
    }

    /// `N == 0`.
    pub const fn is_empty(&self) -> bool {
        N == 0
    }

    /// The first byte; aligned to 64 and never NULL, also when `N` is 0.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr()
    }

    /// The arena as bytes.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl<const N: usize> Default for Arena<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// A loop body: runs iterations `[start, end)` with the `ctx` the object passed.
pub type Body = unsafe extern "C" fn(ctx: *const c_void, start: i64, end: i64);

/// Runs `body` over `[0, n)` in chunks of at least `grain` iterations and returns when all are done.
///
/// Without `std`, one call `body(ctx, 0, n)`. With `std`, the chunks run on the thread pool (see
/// `pool.rs`). Nothing runs when `n <= 0`; a `grain` below 1 counts as 1.
///
/// # Safety
/// `body` must be safe to call with `ctx` on disjoint sub-ranges of `[0, n)` from several threads
/// at once, for the duration of this call.
pub unsafe fn parallel_for(body: Body, ctx: *const c_void, n: i64, grain: i64) {
    if n <= 0 {
        return;
    }
    #[cfg(feature = "std")]
    // SAFETY: the caller's contract is forwarded unchanged.
    unsafe {
        pool::global().run(body, ctx, n, grain)
    }
    #[cfg(not(feature = "std"))]
    {
        let _ = grain;
        // SAFETY: the caller's contract; one call covers the whole range.
        unsafe { body(ctx, 0, n) }
    }
}

/// The C symbol that compiled objects call:
/// `void rlx_rt_parallel_for(void (*body)(const void *, int64_t, int64_t), const void *ctx, int64_t n, int64_t grain);`
///
/// A NULL `body` does nothing.
///
/// # Safety
/// As [`parallel_for`].
#[no_mangle]
pub unsafe extern "C" fn rlx_rt_parallel_for(body: Option<Body>, ctx: *const c_void, n: i64, grain: i64) {
    if let Some(body) = body {
        // SAFETY: the caller's contract.
        unsafe { parallel_for(body, ctx, n, grain) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicU64, Ordering};
    use std::string::ToString;

    #[test]
    fn dtype_codes_round_trip() {
        for code in 0..=255u8 {
            if let Some(d) = DType::from_code(code) {
                assert_eq!(d as u8, code);
            }
        }
        assert_eq!(DType::from_code(14), Some(DType::Q4_0));
        assert_eq!(DType::from_code(15), None);
        assert_eq!(DType::Bool.size(), Some(1));
        assert_eq!(DType::Q8_0.size(), None);
        assert_eq!(DType::Q8_0.bytes_for(64), 68);
    }

    #[test]
    fn spec_sizes() {
        let s = TensorSpec { name: "x", dtype: DType::F32, shape: &[2, 3] };
        assert_eq!((s.elems(), s.bytes()), (6, 24));
        let scalar = TensorSpec { name: "s", dtype: DType::I64, shape: &[] };
        assert_eq!(scalar.bytes(), 8);
        let huge = TensorSpec { name: "h", dtype: DType::F64, shape: &[usize::MAX, 2] };
        assert_eq!(huge.bytes(), usize::MAX);
        assert_eq!(check_input(0, &s, 24), Ok(()));
        assert_eq!(check_input(1, &s, 20), Err(Error::InputLength { index: 1, expected: 24, got: 20 }));
        assert_eq!(check_output(2, &s, 0), Err(Error::OutputLength { index: 2, expected: 24, got: 0 }));
        assert_eq!(check_weights(8, 7), Err(Error::WeightsLength { expected: 8, got: 7 }));
    }

    #[test]
    fn error_codes() {
        assert_eq!(Error::from_code(0), None);
        assert_eq!(Error::from_code(6), Some(Error::MisalignedArena));
        assert_eq!(Error::from_code(7), Some(Error::NullWeights));
        assert_eq!(Error::from_code(-3), Some(Error::Unknown(-3)));
        for code in -1..10 {
            if let Some(e) = Error::from_code(code) {
                assert!(!e.to_string().is_empty());
            }
        }
    }

    #[test]
    fn arenas() {
        let mut a = Arena::<100>::new();
        assert_eq!(a.as_mut_ptr() as usize % 64, 0);
        assert_eq!(check_arena(a.as_mut_ptr(), a.len(), 100), Ok(()));
        assert_eq!(check_arena(a.as_mut_ptr(), a.len(), 101), Err(Error::ArenaTooSmall { need: 101, got: 100 }));
        assert_eq!(check_arena(a.as_mut_ptr().wrapping_add(1), 99, 99), Err(Error::MisalignedArena));
        assert_eq!(check_arena(core::ptr::null(), 0, 0), Err(Error::NullArena));
        let p = arena_ptr(a.as_mut_slice(), 100).unwrap();
        assert_eq!(p, a.as_mut_ptr());
        assert!(arena_ptr(&mut a.as_mut_slice()[1..], 10).is_err());
        // A zero-byte artifact accepts any slice, and gets an aligned, non-NULL pointer.
        let p = arena_ptr(&mut [], 0).unwrap();
        assert!(!p.is_null() && (p as usize).is_multiple_of(ARENA_ALIGN));
        let mut z = Arena::<0>::new();
        assert!(z.is_empty() && !z.as_mut_ptr().is_null() && (z.as_mut_ptr() as usize).is_multiple_of(64));
        assert_eq!(check_aligned(8 as *const u8, 4), Ok(()));
        assert_eq!(check_aligned(6 as *const u8, 4), Err(Error::Misaligned { align: 4 }));
    }

    unsafe extern "C" fn sum_body(ctx: *const c_void, start: i64, end: i64) {
        // SAFETY: the tests pass a pointer to an AtomicU64.
        let total = unsafe { &*(ctx as *const AtomicU64) };
        let s: u64 = (start as u64..end as u64).sum();
        total.fetch_add(s, Ordering::Relaxed);
    }

    #[test]
    fn exported_symbol_runs_the_whole_range() {
        let total = AtomicU64::new(0);
        let ctx = &total as *const AtomicU64 as *const c_void;
        unsafe { rlx_rt_parallel_for(Some(sum_body), ctx, 1000, 7) };
        assert_eq!(total.load(Ordering::Relaxed), 999 * 1000 / 2);
        unsafe { rlx_rt_parallel_for(None, ctx, 1000, 7) };
        unsafe { rlx_rt_parallel_for(Some(sum_body), ctx, 0, 1) };
        unsafe { rlx_rt_parallel_for(Some(sum_body), ctx, -5, -5) };
        assert_eq!(total.load(Ordering::Relaxed), 999 * 1000 / 2);
    }
}
