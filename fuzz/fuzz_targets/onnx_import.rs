//! ONNX import to HIR: `rlx_import::load_onnx_bytes` (decode, initializers, graph inputs, every op
//! importer, import-time folding), then the verifier on whatever graph comes out. No external data
//! (no base folder): a model asking for it gets an error.
//! libfuzzer: -max_len=65536
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = rlx_import::load_onnx_bytes(data, None, &rlx_import::ImportOptions::default()) {
        let _ = rlx_ir::verify::verify(&g);
    }
});
