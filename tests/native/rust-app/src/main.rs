//! Runs one model compiled by rlxc through its generated safe binding.
//!
//!     rust-app IN_0 … IN_{n-1} OUT_0 … OUT_{m-1}
//!
//! Each IN_i holds the raw little-endian bytes of input i, each OUT_i receives output i's. The
//! binding (`NAME.rs`) is `include!`d from the path build.rs exports as `RLX_MODEL_RS`; build.rs
//! also generates `ports.rs`, which builds the binding's `Inputs`/`Outputs` from byte buffers.
//! Exit: 0 success; 1 bad usage or I/O; 3 `run` returned an error.

use std::process::ExitCode;

#[allow(clippy::all)]
mod model {
    include!(env!("RLX_MODEL_RS"));
}

/// A byte buffer aligned to 16, viewable as a slice of any element type of the binding.
struct Buf {
    words: Vec<u128>,
    bytes: usize,
}

/// The element types a binding uses (plain integers and floats: every bit pattern is a value).
trait Elem: Copy {}
impl Elem for f32 {}
impl Elem for f64 {}
impl Elem for i8 {}
impl Elem for u8 {}
impl Elem for i16 {}
impl Elem for u16 {}
impl Elem for i32 {}
impl Elem for u32 {}
impl Elem for i64 {}
impl Elem for u64 {}

impl Buf {
    fn zeroed(bytes: usize) -> Buf {
        Buf { words: vec![0u128; bytes.div_ceil(16)], bytes }
    }
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: the words own at least `bytes` initialized bytes.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast(), self.bytes) }
    }
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), self.bytes) }
    }
    fn view<T: Elem>(&self) -> &[T] {
        // SAFETY: 16-byte alignment suits every `Elem`; any bit pattern is a valid `T`.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast(), self.bytes / size_of::<T>()) }
    }
    fn view_mut<T: Elem>(&mut self) -> &mut [T] {
        // SAFETY: as above, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), self.bytes / size_of::<T>()) }
    }
}

// fn run_bufs(arena: &mut [u8], ins: &[Buf], outs: &mut [Buf]) -> Result<(), rlx_rt::Error>
include!(concat!(env!("OUT_DIR"), "/ports.rs"));

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (ni, no) = (model::INPUTS.len(), model::OUTPUTS.len());
    if args.len() != ni + no {
        let names: Vec<String> = model::INPUTS.iter().map(|s| format!("{}.bin", s.name)).collect();
        let outs: Vec<String> = model::OUTPUTS.iter().map(|s| format!("OUT_{}.bin", s.name)).collect();
        eprintln!("usage: rust-app {} {}", names.join(" "), outs.join(" "));
        return ExitCode::from(1);
    }
    let mut ins = Vec::new();
    for (spec, path) in model::INPUTS.iter().zip(&args) {
        let data = match std::fs::read(path) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("{path}: {e}");
                return ExitCode::from(1);
            }
        };
        if data.len() != spec.bytes() {
            eprintln!("{path}: {} bytes, input {:?} needs {}", data.len(), spec.name, spec.bytes());
            return ExitCode::from(1);
        }
        let mut b = Buf::zeroed(data.len());
        b.as_bytes_mut().copy_from_slice(&data);
        ins.push(b);
    }
    let mut outs: Vec<Buf> = model::OUTPUTS.iter().map(|s| Buf::zeroed(s.bytes())).collect();
    let mut arena = Buf::zeroed(model::ARENA_BYTES);

    let t = std::time::Instant::now();
    if let Err(e) = run_bufs(arena.as_bytes_mut(), &ins, &mut outs) {
        eprintln!("run failed: {e} ({e:?})");
        return ExitCode::from(3);
    }
    eprintln!("run: {:.3} ms", t.elapsed().as_secs_f64() * 1e3);
    for (b, path) in outs.iter().zip(&args[ni..]) {
        if let Err(e) = std::fs::write(path, b.as_bytes()) {
            eprintln!("{path}: {e}");
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}
