//! ONNX protobuf decode: `rlx_import::onnx_summary_bytes` (prost decode of a `ModelProto`, then what
//! `rlxc inspect` reads from it). Bad bytes must be an `Err`, never a panic.
//! libfuzzer: -max_len=65536
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = rlx_import::onnx_summary_bytes(data);
});
