//! GGUF files: `rlx_import::gguf::load_gguf` (header, metadata, tensor table, every tensor's range
//! and block type), then `rlx_models::llm::llm_from_gguf` on what loads (hyperparameters from the
//! metadata, the LLaMA-family graph). The loader maps a file, so each input is written to this
//! process's own file under the system temp dir.
//! libfuzzer: -max_len=16384
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

fn file() -> &'static PathBuf {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| std::env::temp_dir().join(format!("rlx-fuzz-{}.gguf", std::process::id())))
}

fuzz_target!(|data: &[u8]| {
    std::fs::write(file(), data).expect("write the temp file");
    if let Ok(f) = rlx_import::gguf::load_gguf(file()) {
        let _ = rlx_models::llm::llm_from_gguf(&f);
    }
});
