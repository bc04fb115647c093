//! The checkpoint-folder loader: `rlx_models::bert_from_dir` on a folder holding `config.json` and
//! `model.safetensors`. Input: the config's bytes, one NUL byte, then the safetensors bytes (JSON
//! never holds a raw NUL, so the first one splits the two). The folder is this process's own, under
//! the system temp dir, rewritten for every input.
//! libfuzzer: -max_len=16384
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

fn folder() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("rlx-fuzz-folder-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let (config, weights) = (&data[..split], data.get(split + 1..).unwrap_or(&[]));
    let dir = folder();
    std::fs::write(dir.join("config.json"), config).expect("write config.json");
    std::fs::write(dir.join("model.safetensors"), weights).expect("write model.safetensors");
    let _ = rlx_models::bert_from_dir(dir);
});
