//! The Verilog executor: the design and its ROM images simulated with Icarus Verilog under the
//! design's own generated testbench (`NAME_tb.v`, the one the artifact ships) in its `+noexpect`
//! mode: it streams each sample's int8 input (`+in=run_in.mem`) through the valid/ready ports, writes
//! every output byte to `+out=run_out.mem` and prints each inference's cycles (`+verbose`: first
//! input byte accepted to last output byte); the outputs are read back.

use super::VerilogCompiled;
use crate::cli::Failure;
use crate::pipeline::Timings;
use crate::targets::run::{check_types, run_limited, tool, value_of, Counter, Scratch};
use crate::targets::{QuantPorts, Session};
use rlx_ir::{ConstData, DType, Mir, TensorType};
use std::process::Command;
use std::time::Duration;

/// A design compiled for Icarus, ready to run batches of samples.
pub struct Simulation {
    c: VerilogCompiled,
    name: String,
    quant: QuantPorts,
    input: TensorType,
    output: TensorType,
    dir: Scratch,
    max_vectors: usize,
    last: Option<Counter>,
    pub timeout: Duration,
}

impl Simulation {
    /// Writes the design, its ROMs and the run testbench; compiles them with iverilog (phase "build").
    pub fn new(c: VerilogCompiled, qmir: Mir, name: &str, tm: &mut Timings) -> Result<Simulation, Failure> {
        let (Some(&i), Some(&o)) = (qmir.inputs.first(), qmir.outputs.first()) else { return Err(Failure::model("the model has no input or no output")) };
        let (input, output) = (qmir.ty(i).clone(), qmir.ty(o).clone());
        if input.dtype != DType::I8 || output.dtype != DType::I8 {
            return Err(Failure::model(format!("the quantized design takes {input} and gives {output}, int8 expected")));
        }
        let dir = Scratch::new("verilog")?;
        let d = &c.design;
        dir.write(&format!("{name}.v"), d.verilog.as_bytes())?;
        dir.write(&format!("{name}_weights.mem"), d.weights_mem.as_bytes())?;
        dir.write(&format!("{name}_qparams.mem"), d.qparams_mem.as_bytes())?;
        let quant = QuantPorts { inputs: vec![c.input], outputs: vec![c.output] };
        let mut s = Simulation { c, name: name.to_string(), quant, input, output, dir, max_vectors: 0, last: None, timeout: Duration::from_secs(600) };
        tm.time("build (iverilog)", || s.build(1000))?;
        Ok(s)
    }

    fn build(&mut self, max_vectors: usize) -> Result<(), Failure> {
        let name = &self.name;
        self.dir.write(&format!("{name}_tb.v"), self.c.design.testbench.as_bytes())?;
        let cap = format!("-P{name}_tb.MAX_VECTORS={}", max_vectors.max(1));
        tool(
            Command::new("iverilog").args(["-g2005", "-o", "run.vvp", &cap]).arg(format!("{name}_tb.v")).arg(format!("{name}.v")).current_dir(self.dir.path()),
            "compile the design with Icarus Verilog",
        )?;
        self.max_vectors = max_vectors;
        Ok(())
    }
}

impl Session for Simulation {
    fn device(&self) -> String {
        format!("Icarus Verilog ({} MAC(s) per cycle)", self.c.macs_per_cycle)
    }
    fn inputs(&self) -> Vec<TensorType> {
        vec![self.input.clone()]
    }
    fn quant(&self) -> Option<&QuantPorts> {
        Some(&self.quant)
    }
    fn run(&mut self, samples: &[Vec<ConstData>]) -> Result<Vec<Vec<ConstData>>, Failure> {
        check_types(&self.inputs(), &["input".to_string()], samples)?;
        let n = samples.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        if n > self.max_vectors {
            self.build(n)?;
        }
        let bytes: Vec<u8> = samples.iter().flat_map(|s| s[0].data.bytes().iter().copied()).collect();
        self.dir.write("run_in.mem", super::mem_hex(&bytes).as_bytes())?;
        let _ = std::fs::remove_file(self.dir.path().join("run_out.mem"));
        let mut cmd = Command::new("vvp");
        cmd.args(["-n", "run.vvp", "+noexpect", "+verbose", "+in=run_in.mem", "+out=run_out.mem"]).arg(format!("+vectors={n}")).current_dir(self.dir.path());
        let f = run_limited(&mut cmd, self.timeout).map_err(|e| Failure::model(format!("vvp: {e}")))?;
        if !f.status.success() || !f.stdout.contains(&format!("DONE: {n} vectors")) {
            return Err(Failure::model(format!("the simulation failed ({}):\n{}{}", f.status, f.stdout.trim(), f.stderr.trim())));
        }
        // "vector V: PASS, C cycles" per sample (+verbose).
        let cycles: Vec<f64> = f.stdout.lines().filter_map(|l| l.strip_prefix("vector ")?.strip_suffix(" cycles")?.rsplit(' ').next()?.parse().ok()).collect();
        self.last = (cycles.len() == n).then(|| Counter { unit: "cycles", min: cycles.iter().copied().fold(f64::INFINITY, f64::min), max: cycles.iter().copied().fold(0.0, f64::max) });
        let text = std::fs::read_to_string(self.dir.path().join("run_out.mem")).map_err(|e| Failure::model(format!("run_out.mem: {e}")))?;
        let mut out = Vec::with_capacity(text.len() / 3);
        for (k, l) in text.lines().enumerate() {
            out.push(u8::from_str_radix(l.trim(), 16).map_err(|_| Failure::model(format!("run_out.mem line {}: '{l}' is not a hex byte (an X or Z on out_data?)", k + 1)))?);
        }
        let per = d_out(&self.output);
        if out.len() != per * n {
            return Err(Failure::model(format!("the simulation wrote {} output bytes, {} expected", out.len(), per * n)));
        }
        out.chunks(per).enumerate().map(|(i, b)| Ok(vec![value_of(&self.output, b.to_vec(), &format!("output of sample {i}"))?])).collect()
    }
    fn counter(&self) -> Option<Counter> {
        self.last.clone()
    }
    fn timed(&self) -> bool {
        false
    }
}

fn d_out(ty: &TensorType) -> usize {
    crate::targets::run::port_bytes(ty)
}
