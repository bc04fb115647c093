//! The C API of the CUDA executor (feature `cuda`; `librlx_rt.a` built with `-p rlx-rt-capi --features
//! cuda`): [`crate::cuda::Executor`] behind an opaque handle, `RlxCuda`. The header is
//! `runtime-min/include/rlx_cuda.h`; `runtime-min/examples/cuda_run.c` is the example.
//!
//! `rlx_cuda_load(dir, name, err, err_len)` loads `dir/NAME.ptx`, `NAME.schedule.bin` and
//! `NAME.weights.bin` (`rlxc compile --target cuda`) and sets the program up on the device (one CUDA
//! graph); `rlx_cuda_inputs` / `_outputs` / `_input_bytes` / `_output_bytes` describe its ports;
//! `rlx_cuda_run` copies the inputs in, launches the graph once and copies the outputs out;
//! `rlx_cuda_launch` launches the graph alone on the inputs already on the device; `rlx_cuda_device`
//! names the device; `rlx_cuda_error` is the last failure's message; `rlx_cuda_free` releases it all.
//!
//! Ownership: the handle belongs to the caller from `rlx_cuda_load` until `rlx_cuda_free` (once;
//! NULL allowed). The strings of `rlx_cuda_device` and `rlx_cuda_error` belong to the handle: the
//! device name lives until `rlx_cuda_free`, an error message until the next call on the handle. Input
//! and output buffers stay the caller's; they are read / written only during `rlx_cuda_run`, which
//! returns once the outputs are in them.
//!
//! Thread safety: a handle may be used from any thread (each call makes the device's context current),
//! but from one thread at a time; distinct handles are independent.
//!
//! Nothing here panics across the C boundary: NULL handles and pointers, an index out of range and a
//! buffer count or size the model does not take are errors, and every entry point runs under
//! `catch_unwind` (a panic, which would be a bug, becomes an error return).

use crate::cuda::Executor;
use core::ffi::{c_char, c_int, c_void, CStr};
use std::boxed::Box;
use std::ffi::CString;
use std::format;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::string::{String, ToString};
use std::vec::Vec;

/// A loaded CUDA artifact (opaque to C): the executor, its device's name, its port sizes and the last
/// error's message.
pub struct RlxCuda {
    ex: Executor,
    device: CString,
    inputs: Vec<u64>,
    outputs: Vec<u64>,
    error: CString,
}

impl RlxCuda {
    /// No error (the last call succeeded); an empty message is kept as it is.
    fn clear(&mut self) {
        if !self.error.is_empty() {
            self.error = CString::default();
        }
    }

    fn fail(&mut self, msg: &str) -> c_int {
        self.error = c_string(msg);
        1
    }
}

/// `s` as a C string (any NUL byte in it replaced by a space).
fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).unwrap_or_default()
}

/// `f()`, or `default` when it panics.
fn guard<T>(default: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(default)
}

/// What a panic that was caught said (for an error message).
fn panic_text(p: &(dyn core::any::Any + Send)) -> String {
    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_else(|| "unknown panic".into())
}

/// Writes `msg` NUL-terminated into `err` (`len` bytes, `len - 1` of text at most, cut at a character
/// boundary); nothing when `err` is NULL or `len` is 0.
///
/// # Safety
/// `err` is NULL or writable for `len` bytes.
unsafe fn write_err(err: *mut c_char, len: usize, msg: &str) {
    if err.is_null() || len == 0 {
        return;
    }
    let mut n = msg.len().min(len - 1);
    while !msg.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: the caller's contract: `n + 1 <= len` bytes of `err` are writable.
    unsafe {
        core::ptr::copy_nonoverlapping(msg.as_ptr(), err as *mut u8, n);
        *err.add(n) = 0;
    }
}

/// `p` as UTF-8 text (`what` names the argument in the error).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, String> {
    if p.is_null() {
        return Err(format!("{what} is NULL"));
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| format!("{what} is not UTF-8"))
}

/// Loads `DIR/NAME.ptx`, `NAME.schedule.bin` and `NAME.weights.bin` and sets the program up on the CUDA
/// device (device 0, or `RLX_CUDA_DEVICE`). NULL on failure — no CUDA driver, no device, a missing or
/// malformed file, a driver error — with the message written NUL-terminated into `err` (at most
/// `err_len` bytes with the NUL) when `err` is not NULL.
///
/// # Safety
/// `dir` and `name` are NULL or NUL-terminated strings; `err` is NULL or writable for `err_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn rlx_cuda_load(dir: *const c_char, name: *const c_char, err: *mut c_char, err_len: usize) -> *mut RlxCuda {
    let r = catch_unwind(AssertUnwindSafe(|| -> Result<Box<RlxCuda>, String> {
        // SAFETY: the caller's contract.
        let (dir, name) = unsafe { (text(dir, "dir")?, text(name, "name")?) };
        let ex = Executor::load(std::path::Path::new(dir), name).map_err(|e| e.0)?;
        let (device, inputs, outputs) = (c_string(ex.device_name()), ex.input_sizes(), ex.output_sizes());
        Ok(Box::new(RlxCuda { ex, device, inputs, outputs, error: CString::default() }))
    }));
    match r {
        Ok(Ok(m)) => Box::into_raw(m),
        Ok(Err(e)) => {
            // SAFETY: the caller's contract.
            unsafe { write_err(err, err_len, &e) };
            core::ptr::null_mut()
        }
        Err(p) => {
            // SAFETY: the caller's contract.
            unsafe { write_err(err, err_len, &format!("rlx_cuda_load panicked: {}", panic_text(&*p))) };
            core::ptr::null_mut()
        }
    }
}

/// The handle behind `m`, if any.
///
/// # Safety
/// `m` is NULL or a live handle of `rlx_cuda_load`, used by no other thread during the call.
unsafe fn handle<'a>(m: *mut RlxCuda) -> Option<&'a mut RlxCuda> {
    // SAFETY: the caller's contract.
    unsafe { m.as_mut() }
}

/// The number of input ports (0 for NULL).
///
/// # Safety
/// `m` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rlx_cuda_inputs(m: *const RlxCuda) -> usize {
    // SAFETY: the caller's contract.
    unsafe { m.as_ref() }.map_or(0, |m| m.inputs.len())
}

/// The number of output ports (0 for NULL).
///
/// # Safety
/// `m` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rlx_cuda_outputs(m: *const RlxCuda) -> usize {
    // SAFETY: the caller's contract.
    unsafe { m.as_ref() }.map_or(0, |m| m.outputs.len())
}

/// Bytes of input `i` (0 for NULL or an index out of range).
///
/// # Safety
/// `m` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rlx_cuda_input_bytes(m: *const RlxCuda, i: usize) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { m.as_ref() }.and_then(|m| m.inputs.get(i).copied()).unwrap_or(0)
}

/// Bytes of output `i` (0 for NULL or an index out of range).
///
/// # Safety
/// `m` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rlx_cuda_output_bytes(m: *const RlxCuda, i: usize) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { m.as_ref() }.and_then(|m| m.outputs.get(i).copied()).unwrap_or(0)
}

/// `n` port buffers from the C array `ptrs` of `sizes.len()` pointers, as slices (`what`: "input" or
/// "output" in the errors). A NULL array is accepted only for no ports, a NULL buffer only for a
/// port of 0 bytes.
///
/// # Safety
/// `ptrs` is NULL or holds `sizes.len()` pointers, each NULL or valid for its port's bytes.
unsafe fn buffers<P: Copy>(ptrs: *const P, sizes: &[u64], what: &str, get: impl Fn(P) -> *mut u8) -> Result<Vec<(*mut u8, usize)>, String> {
    if sizes.is_empty() {
        return Ok(Vec::new());
    }
    if ptrs.is_null() {
        return Err(format!("the {what}s array is NULL"));
    }
    let mut v = Vec::with_capacity(sizes.len());
    for (i, &n) in sizes.iter().enumerate() {
        let n = usize::try_from(n).map_err(|_| format!("{what} {i} of {n} bytes does not fit this machine"))?;
        // SAFETY: the caller's contract: the array holds one pointer per port.
        let p = get(unsafe { *ptrs.add(i) });
        if p.is_null() && n > 0 {
            return Err(format!("{what} {i} is NULL"));
        }
        // A port of 0 bytes is read or written through an empty slice, never through its pointer.
        v.push((if n == 0 { core::ptr::NonNull::<u8>::dangling().as_ptr() } else { p }, n));
    }
    Ok(v)
}

/// Copies the inputs in, launches the graph once, copies the outputs out; returns once the outputs
/// are written. `inputs` holds one pointer per input port, each to exactly its bytes
/// (`rlx_cuda_input_bytes`); `outputs` one per output port, each to exactly its bytes, overlapping
/// neither each other nor an input. 0 on success; 1 on an error (a NULL handle, array or buffer, a
/// driver or kernel failure), its message in `rlx_cuda_error`.
///
/// # Safety
/// `m` is NULL or a live handle; `inputs` / `outputs` are NULL or arrays of one pointer per port, each
/// NULL or valid for reading / writing its port's bytes.
#[no_mangle]
pub unsafe extern "C" fn rlx_cuda_run(m: *mut RlxCuda, inputs: *const *const c_void, outputs: *const *mut c_void) -> c_int {
    // SAFETY: the caller's contract.
    let Some(m) = (unsafe { handle(m) }) else { return 1 };
    m.clear();
    let r = catch_unwind(AssertUnwindSafe(|| -> Result<(), String> {
        // SAFETY: the caller's contract (one pointer per port, each valid for its bytes).
        let ins = unsafe { buffers(inputs, &m.inputs, "input", |p| p as *mut u8)? };
        let outs = unsafe { buffers(outputs, &m.outputs, "output", |p| p as *mut u8)? };
        // SAFETY: as above; the output buffers overlap nothing else (the caller's contract).
        let ins: Vec<&[u8]> = ins.iter().map(|&(p, n)| unsafe { core::slice::from_raw_parts(p as *const u8, n) }).collect();
        let mut outs: Vec<&mut [u8]> = outs.iter().map(|&(p, n)| unsafe { core::slice::from_raw_parts_mut(p, n) }).collect();
        m.ex.run(&ins, &mut outs).map_err(|e| e.0)
    }));
    match r {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => m.fail(&e),
        Err(p) => m.fail(&format!("rlx_cuda_run panicked: {}", panic_text(&*p))),
    }
}

/// Launches the graph again on what the device holds — the inputs of the last `rlx_cuda_run` — and
/// waits for it; nothing is copied in or out (the device's share of a run). 0 on success; 1 on an
/// error, its message in `rlx_cuda_error`.
///
/// # Safety
/// `m` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rlx_cuda_launch(m: *mut RlxCuda) -> c_int {
    // SAFETY: the caller's contract.
    let Some(m) = (unsafe { handle(m) }) else { return 1 };
    m.clear();
    match catch_unwind(AssertUnwindSafe(|| m.ex.launch())) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => m.fail(&e.0),
        Err(p) => m.fail(&format!("rlx_cuda_launch panicked: {}", panic_text(&*p))),
    }
}

/// The message of the last failed `rlx_cuda_run` / `rlx_cuda_launch` on `m` ("" when the last one
/// succeeded), valid until the next call on `m`; for NULL, a static message saying so. Never NULL.
///
/// # Safety
/// `m` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rlx_cuda_error(m: *const RlxCuda) -> *const c_char {
    // SAFETY: the caller's contract.
    match unsafe { m.as_ref() } {
        Some(m) => m.error.as_ptr(),
        None => c"the RlxCuda handle is NULL".as_ptr(),
    }
}

/// The device's name, valid until `rlx_cuda_free`; "" for NULL. Never NULL.
///
/// # Safety
/// `m` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rlx_cuda_device(m: *const RlxCuda) -> *const c_char {
    // SAFETY: the caller's contract.
    match unsafe { m.as_ref() } {
        Some(m) => m.device.as_ptr(),
        None => c"".as_ptr(),
    }
}

/// Releases the handle and everything on the device it holds (after the device's work on it has
/// finished). NULL does nothing.
///
/// # Safety
/// `m` is NULL or a live handle of `rlx_cuda_load`, not used again.
#[no_mangle]
pub unsafe extern "C" fn rlx_cuda_free(m: *mut RlxCuda) {
    if !m.is_null() {
        // SAFETY: the caller's contract: `m` came from Box::into_raw in rlx_cuda_load, freed once.
        let m = unsafe { Box::from_raw(m) };
        guard((), || drop(m));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_handles_and_arguments_are_errors() {
        let mut err = [0x55 as c_char; 16];
        unsafe {
            assert!(rlx_cuda_load(core::ptr::null(), c"m".as_ptr(), err.as_mut_ptr(), err.len()).is_null());
            let msg = CStr::from_ptr(err.as_ptr()).to_str().unwrap();
            assert_eq!(msg, "dir is NULL");
            // Truncated to the buffer, NUL included.
            let mut small = [0x55 as c_char; 4];
            assert!(rlx_cuda_load(core::ptr::null(), c"m".as_ptr(), small.as_mut_ptr(), small.len()).is_null());
            assert_eq!(CStr::from_ptr(small.as_ptr()).to_bytes(), b"dir");
            assert!(rlx_cuda_load(c"/nonexistent".as_ptr(), core::ptr::null(), core::ptr::null_mut(), 0).is_null());
            let none = core::ptr::null_mut();
            assert_eq!((rlx_cuda_inputs(none), rlx_cuda_outputs(none), rlx_cuda_input_bytes(none, 0), rlx_cuda_output_bytes(none, 3)), (0, 0, 0, 0));
            assert_eq!(rlx_cuda_run(none, core::ptr::null(), core::ptr::null()), 1);
            assert_eq!(rlx_cuda_launch(none), 1);
            assert!(!CStr::from_ptr(rlx_cuda_error(none)).to_bytes().is_empty());
            assert!(CStr::from_ptr(rlx_cuda_device(none)).to_bytes().is_empty());
            rlx_cuda_free(none);
        }
    }

    #[test]
    fn a_missing_artifact_names_the_file() {
        let mut err = [0 as c_char; 256];
        let m = unsafe { rlx_cuda_load(c"/nonexistent-rlx-dir".as_ptr(), c"m".as_ptr(), err.as_mut_ptr(), err.len()) };
        assert!(m.is_null());
        let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
        assert!(msg.contains("nonexistent-rlx-dir/m.ptx"), "{msg}");
    }

    #[test]
    fn messages_are_cut_at_a_character_boundary() {
        let mut err = [0x55 as c_char; 3];
        unsafe { write_err(err.as_mut_ptr(), err.len(), "aµb") };
        assert_eq!(unsafe { CStr::from_ptr(err.as_ptr()) }.to_bytes(), b"a");
        assert_eq!(c_string("a\0b").as_bytes(), b"a b");
    }
}
