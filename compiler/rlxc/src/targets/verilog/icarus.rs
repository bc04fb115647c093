//! The Verilog executor: the design and its ROM images simulated with Icarus Verilog under a run
//! testbench (below: it streams each sample's int8 input through the valid/ready ports, writes every
//! output byte to `run_out.mem` and prints each inference's cycles, first input byte accepted to
//! last output byte), outputs read back.

use super::VerilogCompiled;
use crate::cli::Failure;
use crate::pipeline::Timings;
use crate::targets::run::{check_types, run_limited, tool, value_of, Counter, Scratch};
use crate::targets::{QuantPorts, Session};
use rlx_ir::{ConstData, DType, Mir, TensorType};
use std::process::Command;
use std::time::Duration;

/// The run testbench of a design: `+vectors=N` inputs from `run_in.mem` (hex, one byte a line).
fn run_testbench(name: &str, in_n: usize, out_n: usize, cycles: u64, max_vectors: usize) -> String {
    format!(
        r#"// rlxc run --target verilog: streams the inputs, writes the outputs, prints cycles.
`timescale 1ns / 1ps
module rlxc_run_tb;
    localparam IN_N = {in_n}, OUT_N = {out_n}, CYCLES = {cycles}, MAX_VECTORS = {max_vectors};
    reg clk = 1'b0;
    always #5 clk = ~clk;
    reg rst = 1'b1;
    reg in_valid = 1'b0, out_ready = 1'b0;
    reg [7:0] in_data = 8'd0;
    wire in_ready, out_valid, out_last;
    wire [7:0] out_data;
    {name} dut (.clk(clk), .rst(rst), .in_valid(in_valid), .in_ready(in_ready), .in_data(in_data),
        .out_valid(out_valid), .out_ready(out_ready), .out_data(out_data), .out_last(out_last));
    reg [7:0] in_mem [0:MAX_VECTORS*IN_N-1];
    integer n, v, i, o, fd, cycle, t0, t1;
    reg [63:0] limit;
    always @(posedge clk) cycle <= cycle + 1;
    initial begin
        cycle = 0;
        if (!$value$plusargs("vectors=%d", n)) n = 1;
        $readmemh("run_in.mem", in_mem, 0, n*IN_N-1);
        fd = $fopen("run_out.mem", "w");
        limit = n * (CYCLES * 8 + 1000);
        repeat (3) @(posedge clk);
        @(negedge clk) rst = 1'b0;
        for (v = 0; v < n; v = v + 1) begin
            fork
                begin
                    i = 0;
                    while (i < IN_N) begin
                        @(negedge clk);
                        in_valid = 1'b1;
                        in_data = in_mem[v*IN_N+i];
                        if (in_ready) begin
                            if (i == 0) t0 = cycle;
                            i = i + 1;
                        end
                    end
                    @(negedge clk) in_valid = 1'b0;
                end
                begin
                    o = 0;
                    while (o < OUT_N) begin
                        @(negedge clk);
                        out_ready = 1'b1;
                        if (out_valid) begin
                            $fwrite(fd, "%02x\n", out_data);
                            if (o == OUT_N-1) t1 = cycle;
                            o = o + 1;
                        end
                    end
                    @(negedge clk) out_ready = 1'b0;
                end
            join
            $display("cycles %0d", t1 - t0 + 1);
        end
        $fclose(fd);
        $display("DONE %0d", n);
        $finish;
    end
    initial begin
        wait (limit > 0);
        wait (cycle > limit);
        $display("FAIL: timeout after %0d cycles", cycle);
        $finish;
    end
endmodule
"#
    )
}

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
        let d = &self.c.design;
        self.dir.write("run_tb.v", run_testbench(&self.name, d.in_elems, d.out_elems, d.cycles, max_vectors).as_bytes())?;
        tool(
            Command::new("iverilog").args(["-g2005", "-o", "run.vvp", "run_tb.v"]).arg(format!("{}.v", self.name)).current_dir(self.dir.path()),
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
        cmd.args(["-n", "run.vvp"]).arg(format!("+vectors={n}")).current_dir(self.dir.path());
        let f = run_limited(&mut cmd, self.timeout).map_err(|e| Failure::model(format!("vvp: {e}")))?;
        if !f.status.success() || !f.stdout.contains(&format!("DONE {n}")) {
            return Err(Failure::model(format!("the simulation failed ({}):\n{}{}", f.status, f.stdout.trim(), f.stderr.trim())));
        }
        let cycles: Vec<f64> = f.stdout.lines().filter_map(|l| l.strip_prefix("cycles ")?.trim().parse().ok()).collect();
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
