//! The Cortex-M executor: the firmware folder `--board` writes (main.c, startup.c, the board's link
//! flags) built with arm-none-eabi-gcc, run in `qemu-system-arm` with semihosting and `-icount
//! shift=0`: main.c reads every sample's int8 input from `images.bin` and writes the int8 outputs to
//! `outputs.bin`, which are read back; SysTick ticks over the run (one instruction = 1 ns of virtual
//! time) give the instructions per inference.

use super::Compiled;
use crate::cli::Failure;
use crate::pipeline::Timings;
use crate::targets::run::{check_inputs, run_limited, tool, value_of, Counter, Scratch};
use crate::targets::{QuantPorts, Session};
use rlx_ir::{ConstData, DType, TensorType};
use rlx_target_mcu::firmware::Board;
use std::process::Command;
use std::time::Duration;

/// Built firmware, ready to run batches of samples.
pub struct Firmware {
    c: Compiled,
    board: &'static Board,
    dir: Scratch,
    last: Option<Counter>,
    pub timeout: Duration,
}

impl Firmware {
    /// Writes the sources and the firmware folder, builds `fw.elf` (phase "build").
    pub fn new(c: Compiled, board: &'static Board, tm: &mut Timings) -> Result<Firmware, Failure> {
        let int8 = |ps: &[rlx_ir::lir::Port]| ps.len() == 1 && matches!(ps[0].ty.dtype, DType::I8);
        if c.rust.is_some() || !int8(&c.lir.inputs) || !int8(&c.lir.outputs) {
            return Err(Failure::usage(format!(
                "rlxc runs Cortex-M firmware for int8 models with one input and one output (this one: {} input(s), {} output(s){}); quantize it with --calibrate data.npy",
                c.lir.inputs.len(),
                c.lir.outputs.len(),
                c.lir.inputs.first().map(|p| format!(", input {}", p.ty)).unwrap_or_default()
            )));
        }
        let dir = Scratch::new("mcu")?;
        let name = c.name.clone();
        dir.write(&format!("{name}.c"), c.sources.c.as_bytes())?;
        dir.write(&format!("{name}.h"), c.sources.h.as_bytes())?;
        for (f, text) in board.files(&name) {
            dir.write(&f, text.as_bytes())?;
        }
        tm.time("build (arm-none-eabi-gcc)", || tool(Command::new("arm-none-eabi-gcc").args(board.gcc_args(&name, true, "fw.elf")).current_dir(dir.path()), "build the firmware"))?;
        Ok(Firmware { c, board, dir, last: None, timeout: Duration::from_secs(600) })
    }
}

impl Session for Firmware {
    fn device(&self) -> String {
        format!("qemu-system-arm -M {} ({})", self.board.machine, self.board.core.name())
    }
    fn inputs(&self) -> Vec<TensorType> {
        crate::targets::run::port_types(&self.c.lir.inputs)
    }
    fn quant(&self) -> Option<&QuantPorts> {
        self.c.quant.as_ref()
    }
    fn run(&mut self, samples: &[Vec<ConstData>]) -> Result<Vec<Vec<ConstData>>, Failure> {
        check_inputs(&self.c.lir.inputs, samples)?;
        let images: Vec<u8> = samples.iter().flat_map(|s| s[0].data.bytes().iter().copied()).collect();
        self.dir.write("images.bin", &images)?;
        let _ = std::fs::remove_file(self.dir.path().join("outputs.bin"));
        let mut q = Command::new("qemu-system-arm");
        q.args(self.board.qemu_args(true, "fw.elf")).current_dir(self.dir.path());
        let f = run_limited(&mut q, self.timeout).map_err(|e| Failure::model(format!("qemu-system-arm: {e}")))?;
        let said = format!("{}{}", f.stdout, f.stderr);
        if !f.status.success() {
            return Err(Failure::model(format!("the firmware failed in qemu-system-arm -M {} ({}):\n{}", self.board.machine, f.status, said.trim())));
        }
        let n = samples.len();
        if !f.stdout.lines().any(|l| l.starts_with(&format!("images {n} "))) {
            return Err(Failure::model(format!("the firmware did not run {n} input(s):\n{}", said.trim())));
        }
        let out = std::fs::read(self.dir.path().join("outputs.bin")).map_err(|e| Failure::model(format!("outputs.bin: {e}")))?;
        let ty = &self.c.lir.outputs[0].ty;
        let per = crate::targets::run::port_bytes(ty);
        if out.len() != per * n {
            return Err(Failure::model(format!("the firmware wrote {} output bytes, {} expected", out.len(), per * n)));
        }
        let ticks: Option<f64> = f.stdout.lines().find_map(|l| l.strip_prefix("systick ")?.trim().parse().ok());
        let calib: Option<f64> = f.stdout.lines().find_map(|l| l.strip_prefix("systick-calib ")?.trim().parse().ok());
        let hz = self.board.systick_hz as f64;
        // main.c's calibration loop runs 2,000,000 instructions: its ticks confirm the clock.
        self.last = match (ticks, calib) {
            (Some(t), Some(c)) if (c - 2e6 * hz / 1e9).abs() <= 2.0 && n > 0 => {
                let per_inference = t * 1e9 / hz / n as f64;
                Some(Counter { unit: "instructions", min: per_inference, max: per_inference })
            }
            _ => None,
        };
        out.chunks(per).enumerate().map(|(i, b)| Ok(vec![value_of(ty, b.to_vec(), &format!("output of sample {i}"))?])).collect()
    }
    fn counter(&self) -> Option<Counter> {
        self.last.clone()
    }
    fn timed(&self) -> bool {
        false
    }
}
