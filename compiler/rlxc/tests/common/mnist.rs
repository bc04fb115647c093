//! The MNIST int8 test scaffolding shared by the Cortex-M tests (`mcu.rs`, `mcu_qdq.rs`) and the
//! Verilog test: the trained models and images, image quantization, the interpreter's reference
//! outputs, and the Cortex-M4 firmware run in QEMU.

use super::ok;
use rlx_ir::{Blob, ConstData, DType, Mir, MirOp};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The trained float models, calibration sets and MNIST images in build/mcu-test/data: trained by
/// tests/mcu/train_mnist.py once per version of the script (and once per process: tests share it).
pub fn data() -> PathBuf {
    static DATA: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DATA.get_or_init(|| super::made_by_script("build/mcu-test/data", "tests/mcu/train_mnist.py", "meta.json")).clone()
}

/// `x` quantized with the `quantize` op and a port's scale and zero point (int8).
pub fn quantize(x: ConstData, scale: f32, zero_point: i32) -> ConstData {
    let scale = ConstData::from_f32(vec![], &[scale]);
    let zp = ConstData::scalar(DType::I8, zero_point as f64);
    rlxc::pipeline::eval_op(&MirOp::Quantize { axis: 0 }, &[x, scale, zp]).unwrap().remove(0)
}

/// The reference interpreter's int8 outputs of the integer program `mir` on the first `count` of the
/// `n` inputs packed in `images`, concatenated.
pub fn interpreter_outputs(mir: &Mir, images: &[u8], n: usize, count: usize) -> Vec<u8> {
    let per = images.len() / n;
    let in_shape = mir.ty(mir.inputs[0]).shape.as_fixed().unwrap();
    let mut host = Vec::new();
    for i in 0..count {
        let input = ConstData { dtype: DType::I8, shape: in_shape.clone(), data: Blob::from_vec(images[i * per..(i + 1) * per].to_vec()) };
        host.extend_from_slice(rlx_interp::run(mir, &[input]).unwrap().remove(0).data.bytes());
    }
    host
}

/// Builds the firmware folder rlxc writes for `--board mps2-an386` (rlx_target_mcu::firmware: main.c,
/// startup.c, the board's gcc and link flags) around `dir/MODEL.c` for the Cortex-M4, runs it over
/// `images` (written to `dir/images.bin`) in `qemu-system-arm -M mps2-an386`, checks that it read
/// 1,000 images, and returns the ELF and the int8 outputs it wrote.
pub fn m4_firmware_outputs(model: &str, dir: &Path, images: &[u8]) -> (PathBuf, Vec<u8>) {
    std::fs::write(dir.join("images.bin"), images).unwrap();
    let board = rlx_target_mcu::firmware::Board::named("mps2-an386").unwrap();
    for (f, text) in board.files(model) {
        std::fs::write(dir.join(f), text).unwrap();
    }
    ok(Command::new("arm-none-eabi-gcc").args(board.gcc_args(model, false, "fw.elf")).current_dir(dir));
    let stdout = ok(Command::new("timeout").arg("120").arg("qemu-system-arm").args(board.qemu_args(false, "fw.elf")).current_dir(dir));
    assert!(stdout.contains("images 1000"), "{stdout}");
    (dir.join("fw.elf"), std::fs::read(dir.join("outputs.bin")).unwrap())
}

/// Asserts that the firmware's int8 outputs equal the interpreter's, bit for bit.
pub fn assert_bit_exact(model: &str, fw: &[u8], host: &[u8]) {
    assert_eq!(fw.len(), host.len(), "firmware wrote {} bytes, host {}", fw.len(), host.len());
    let diff = fw.iter().zip(host).filter(|(a, b)| a != b).count();
    assert_eq!(diff, 0, "{model}: {diff} int8 outputs differ between the firmware and the interpreter");
}
