//! The IR text form with the HIR op set: `rlx_ir::text::parse::<HirOp>`, then the verifier, then
//! the round trip the text form promises: `print(parse(print(g))) == print(g)`.
//! libfuzzer: -max_len=8192
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        rlx_fuzz::ir_text::check::<rlx_ir::HirOp>(text);
    }
});
