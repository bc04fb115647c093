//! GGUF block dequantization against llama.cpp's `gguf` Python package (tests/reference/gguf_blocks.py):
//! values quantized by `gguf.quants.quantize` (every type it writes), random bytes of every block type
//! (the K-quants it cannot write), and the Gemma 3 270M file's real Q8_0/Q5_0/Q4_K/Q6_K tensors, each
//! dequantized by `gguf.quants.dequantize`. Ours must match bit for bit.

use rlx_interp::blocks::dequantize;
use rlx_ir::DType;
use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> PathBuf {
    let p = match std::env::var_os("RLX_PY") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => repo().join(".venv/bin/python"),
    };
    assert!(p.exists(), "venv python {} not found: run `make setup`", p.display());
    p
}

fn dtype(gguf_name: &str) -> DType {
    DType::parse(&gguf_name.to_ascii_lowercase()).unwrap_or_else(|| panic!("no DType for {gguf_name}"))
}

#[test]
fn every_block_type_matches_gguf_bit_for_bit() {
    let model = repo().join("build/models/gemma-3-270m-q4_k_m.gguf");
    assert!(model.exists(), "{} not found: run `make models`", model.display());
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gguf-blocks");
    let _ = std::fs::remove_dir_all(&out);
    let st = Command::new(python())
        .arg(repo().join("tests/reference/gguf_blocks.py"))
        .arg(&out)
        .arg(&model)
        .output()
        .expect("run python");
    assert!(st.status.success(), "gguf_blocks.py failed:\n{}", String::from_utf8_lossy(&st.stderr));
    let cases = std::fs::read_to_string(out.join("cases.txt")).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for line in cases.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (name, dt, rows, cols) = (f[0], dtype(f[1]), f[2].parse::<usize>().unwrap(), f[3].parse::<usize>().unwrap());
        let raw = std::fs::read(out.join(format!("{name}.bin"))).unwrap();
        let want: Vec<f32> =
            std::fs::read(out.join(format!("{name}.f32"))).unwrap().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(want.len(), rows * cols, "{name}");
        let mut got = vec![0f32; rows * cols];
        dequantize(dt, &raw, &mut got).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "{name}: value {i} (row {}, col {}): ours {g}, gguf {w}", i / cols, i % cols);
        }
        seen.insert(dt);
    }
    // Every block type was covered, and the Gemma file's real K-quant tensors were among the cases.
    for d in rlx_ir::dtype::BLOCK_DTYPES {
        assert!(seen.contains(&d), "no case for {d}");
    }
    assert!(cases.contains("gemma_Q4_K") && cases.contains("gemma_Q6_K"), "{cases}");
}

#[test]
fn wrong_lengths_are_errors() {
    let mut out = vec![0f32; 256];
    let e = dequantize(DType::Q4_K, &[0u8; 143], &mut out).unwrap_err();
    assert!(e.contains("143 bytes"), "{e}");
    assert!(dequantize(DType::Q4_0, &[0u8; 18], &mut out[..31]).is_err());
}
