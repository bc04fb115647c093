//! Firmware test driver for `rlxc compile --emit rust`: runs the model in `$RLX_MODEL_RS` (included
//! as a module) over every image in `images.bin` (`INPUT_0_ELEMS` int8 values each, quantized with
//! the model's `INPUT_0_SCALE` / `INPUT_0_ZERO_POINT`), read over semihosting, and writes the int8
//! outputs to `outputs.bin` in the same order; prints `images N predictions h0 h1 …` and exits QEMU
//! with status 0 (1 on any failure).
//!
//! Everything a bare Cortex-M4 needs is here, with no crates: the vector table and the reset handler
//! (`global_asm!`: enable the FPU, then `rust_start` copies `.data`, zeroes `.bss` and calls `main`),
//! the semihosting calls (`bkpt 0xab`), and `link.x` (QEMU mps2-an386's memory map).
//!
//! The panic handler calls a symbol that does not exist: the image links only if the optimizer
//! removed every panic path, the model's `run` included — the proof that the hot path cannot panic.
#![no_std]
#![no_main]

#[allow(dead_code)]
mod model {
    include!(env!("RLX_MODEL_RS"));
}

use core::ptr::{addr_of, addr_of_mut};
use model::{INPUT_0_ELEMS, OUTPUT_0_ELEMS};

core::arch::global_asm!(
    ".section .vectors, \"a\", %progbits",
    ".global __vectors",
    ".p2align 2",
    "__vectors:",
    ".word __stack_top",
    ".word reset_handler",
    ".rept 14",
    ".word fault_handler",
    ".endr",
    ".section .text.reset_handler, \"ax\", %progbits",
    ".syntax unified",
    ".thumb",
    ".global reset_handler",
    ".type reset_handler, %function",
    ".thumb_func",
    "reset_handler:",
    // CPACR: full access to CP10/CP11 (the FPU) before any Rust code runs.
    "ldr r0, =0xE000ED88",
    "ldr r1, [r0]",
    "orr r1, r1, #0xF00000",
    "str r1, [r0]",
    "dsb",
    "isb",
    "bl rust_start",
    "b .",
    ".ltorg",
);

const SYS_OPEN: usize = 0x01;
const SYS_CLOSE: usize = 0x02;
const SYS_WRITE: usize = 0x05;
const SYS_READ: usize = 0x06;
const SYS_EXIT: usize = 0x18;
const ADP_STOPPED_APPLICATION_EXIT: usize = 0x20026;
const ADP_STOPPED_RUNTIME_ERROR_UNKNOWN: usize = 0x20023;

/// One semihosting call: operation in r0, argument (usually a pointer to a parameter block) in r1.
fn semihost(op: usize, arg: usize) -> isize {
    let mut r0 = op;
    // SAFETY: `bkpt 0xab` traps to the debugger (QEMU), which reads the parameter block and writes
    // only into the buffers the block names; it clobbers r0 (the result) alone.
    unsafe { core::arch::asm!("bkpt #0xab", inout("r0") r0, in("r1") arg, options(nostack, preserves_flags)) };
    r0 as isize
}

fn open(name: &[u8], mode: usize) -> isize {
    // `name` ends with NUL; the length excludes it.
    let block = [name.as_ptr() as usize, mode, name.len().saturating_sub(1)];
    semihost(SYS_OPEN, block.as_ptr() as usize)
}

/// Bytes NOT transferred (0 = all).
fn xfer(op: usize, handle: isize, buf: *const u8, len: usize) -> isize {
    let block = [handle as usize, buf as usize, len];
    semihost(op, block.as_ptr() as usize)
}

fn close(handle: isize) {
    let block = [handle as usize];
    semihost(SYS_CLOSE, block.as_ptr() as usize);
}

fn exit(ok: bool) -> ! {
    semihost(SYS_EXIT, if ok { ADP_STOPPED_APPLICATION_EXIT } else { ADP_STOPPED_RUNTIME_ERROR_UNKNOWN });
    loop {}
}

/// A small line buffer (no core::fmt: it would bring panic paths).
struct Line {
    buf: [u8; 160],
    len: usize,
}

impl Line {
    fn push(&mut self, s: &[u8]) {
        for &c in s {
            if let Some(b) = self.buf.get_mut(self.len) {
                *b = c;
                self.len += 1;
            }
        }
    }
    fn num(&mut self, mut v: u32) {
        let mut d = [0u8; 10];
        let mut n = 0;
        loop {
            if let Some(x) = d.get_mut(n) {
                *x = b'0' + (v % 10) as u8;
            }
            n += 1;
            v /= 10;
            if v == 0 || n >= d.len() {
                break;
            }
        }
        for x in d.iter().take(n).rev() {
            self.push(core::slice::from_ref(x));
        }
    }
}

fn main() -> bool {
    let fi = open(b"images.bin\0", 1); // "rb"
    let fo = open(b"outputs.bin\0", 5); // "wb"
    let tt = open(b":tt\0", 4); // "w": the console
    if fi < 0 || fo < 0 || tt < 0 {
        return false;
    }
    let mut input = [0i8; INPUT_0_ELEMS];
    let mut output = [0i8; OUTPUT_0_ELEMS];
    let mut hist = [0u32; OUTPUT_0_ELEMS];
    let mut n = 0u32;
    while xfer(SYS_READ, fi, input.as_mut_ptr() as *const u8, INPUT_0_ELEMS) == 0 {
        if model::run(&input, &mut output).is_err() {
            return false;
        }
        if xfer(SYS_WRITE, fo, output.as_ptr() as *const u8, OUTPUT_0_ELEMS) != 0 {
            return false;
        }
        let best = output
            .iter()
            .enumerate()
            .fold((0, i8::MIN), |(bi, bv), (j, &v)| if v > bv { (j, v) } else { (bi, bv) })
            .0;
        if let Some(h) = hist.get_mut(best) {
            *h = h.wrapping_add(1);
        }
        n = n.wrapping_add(1);
    }
    close(fi);
    close(fo);
    let mut line = Line { buf: [0; 160], len: 0 };
    line.push(b"images ");
    line.num(n);
    line.push(b" predictions");
    for &h in hist.iter() {
        line.push(b" ");
        line.num(h);
    }
    line.push(b"\n");
    xfer(SYS_WRITE, tt, line.buf.as_ptr(), line.len.min(line.buf.len()));
    true
}

#[no_mangle]
unsafe extern "C" fn rust_start() -> ! {
    extern "C" {
        static mut __sbss: u32;
        static mut __ebss: u32;
        static mut __sdata: u32;
        static mut __edata: u32;
        static __sidata: u32;
    }
    // SAFETY: the linker script defines these word-aligned bounds; nothing has used .bss or .data yet.
    let mut p = addr_of_mut!(__sbss);
    while p < addr_of_mut!(__ebss) {
        core::ptr::write_volatile(p, 0);
        p = p.add(1);
    }
    let (mut d, mut s) = (addr_of_mut!(__sdata), addr_of!(__sidata));
    while d < addr_of_mut!(__edata) {
        core::ptr::write_volatile(d, core::ptr::read(s));
        d = d.add(1);
        s = s.add(1);
    }
    exit(main())
}

#[no_mangle]
extern "C" fn fault_handler() -> ! {
    exit(false)
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    extern "C" {
        /// Deliberately undefined: linking fails if any panic path survives optimization.
        fn rlx_fw_panic_path_is_linked() -> !;
    }
    // SAFETY: never linked (see above).
    unsafe { rlx_fw_panic_path_is_linked() }
}
