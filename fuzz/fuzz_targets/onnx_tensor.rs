//! One serialized ONNX `TensorProto` (the `.pb` test data of the ONNX backend suite, `rlxc
//! conformance`): `rlx_import::parse_tensor_pb`, with no base folder for external data.
//! libfuzzer: -max_len=16384
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = rlx_import::parse_tensor_pb(data, None);
});
