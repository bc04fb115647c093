//! A safetensors file's bytes: `rlx_import::safetensors::parse_safetensors` (header length, JSON
//! header, every tensor's dtype/shape/offsets, then the tensors borrowing the bytes). A tensor that
//! parses must hold exactly the bytes its dtype and shape need.
//! libfuzzer: -max_len=16384
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    if let Ok(tensors) = rlx_import::safetensors::parse_safetensors(Arc::new(data.to_vec())) {
        for (name, t) in &tensors {
            let numel: u128 = t.shape.iter().map(|&d| d as u128).product();
            let want = numel * t.dtype.size().expect("safetensors dtypes are plain") as u128;
            assert_eq!(t.data.bytes().len() as u128, want, "tensor '{name}'");
        }
    }
});
