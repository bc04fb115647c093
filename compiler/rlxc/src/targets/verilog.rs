//! The Verilog family: int8 quantization (always: `--calibrate`, or a QDQ model's own scales and zero
//! points, `--calibrate` then optional and only the testbench's vectors) → legalize → the
//! Verilog writer on the MIR (no LIR) → testbench vectors from the interpreter; `NAME.v`,
//! `NAME_tb.v`, the ROM images, the vectors and the manifest. Executor: Icarus Verilog ([`icarus`]).

pub mod icarus;

use super::write::{dispatch_counts, model_file, sha256_hex};
use super::{Artifact, Family, Flag, Planning, Prepared, Quantization, Request, Session};
use crate::cli::{Failure, Target};
use crate::pipeline::{eval_op, run_interp, Timings};
use rlx_ir::{ConstData, Mir, MirOp, TargetCaps};
use rlx_opt::DispatchReport;
use std::collections::BTreeMap;
use std::path::Path;

pub struct Verilog;

impl Family for Verilog {
    fn describe(&self) -> &'static str {
        "--target verilog"
    }
    fn caps(&self, _t: Target) -> TargetCaps {
        rlx_target_verilog::caps("verilog")
    }
    fn flags(&self) -> &'static [Flag] {
        &[Flag::Calibrate, Flag::MacsPerCycle]
    }
    fn quantization(&self, _t: Target) -> Quantization {
        Quantization::Required(rlx_opt::QuantOptions::default())
    }
    fn planning(&self, _t: Target, _r: &Request) -> Result<Planning, Failure> {
        Ok(Planning::None)
    }
    /// Nodes the datapath does not map fail the compile, every one named with the model's op type.
    fn check_program(&self, _t: Target, mir: &Mir, r: &Request) -> Result<(), Failure> {
        check_datapath(mir, &r.source_ops)
    }
    fn emit(&self, _t: Target, p: Prepared, r: &Request, tm: &mut Timings) -> Result<Box<dyn Artifact>, Failure> {
        Ok(Box::new(emit(p, r, tm)?))
    }
    fn runs(&self, _t: Target) -> bool {
        true
    }
    fn load(&self, t: Target, mir: &Mir, r: &Request, tm: &mut Timings) -> Result<Box<dyn Session>, Failure> {
        let p = super::prepare(t, mir, r, tm)?;
        let mir = p.mir.clone();
        let c = emit(p, r, tm)?;
        Ok(Box::new(icarus::Simulation::new(c, mir, &r.name, tm)?))
    }
}

/// Everything a Verilog compile produced, before it is written.
pub struct VerilogCompiled {
    pub report: DispatchReport,
    pub design: rlx_target_verilog::Design,
    pub macs_per_cycle: usize,
    pub input: rlx_opt::QParams,
    pub output: rlx_opt::QParams,
    /// Testbench vectors from the calibration samples: int8 inputs and the interpreter's int8 outputs.
    pub tb_in: Vec<u8>,
    pub tb_expected: Vec<u8>,
}

fn emit(p: Prepared, r: &Request, tm: &mut Timings) -> Result<VerilogCompiled, Failure> {
    let Some(q) = p.quant else { return Err(Failure::usage("--target verilog builds an int8 datapath: pass --calibrate data.npy")) };
    // A QDQ model compiled without --calibrate: one testbench vector, the all-zero input.
    let calib = match p.calib {
        Some(c) => c,
        None => vec![p.mir.inputs.iter().map(|&i| ConstData::from_f32(p.mir.ty(i).shape.as_fixed().unwrap_or_default(), &vec![0.0; p.mir.ty(i).shape.numel().unwrap_or(0)])).collect()],
    };
    let (qi, qo) = match (q.inputs.as_slice(), q.outputs.as_slice()) {
        ([i], [o]) => (*i, *o),
        (i, o) => return Err(Failure::model(format!("--target verilog maps models with one input and one output, this one has {} and {}", i.len(), o.len()))),
    };
    emit_design(&p.mir, p.report, &r.name, &calib, qi, qo, r.macs_per_cycle.unwrap_or(1), tm)
}

/// The datapath check: every node the Verilog writer does not map, named with its op type from
/// `source_ops` (node name → the model's op type, `ModelSource::node_op_types`).
fn check_datapath(qmir: &Mir, source_ops: &BTreeMap<String, String>) -> Result<(), Failure> {
    // Lowered blocks and quantized layers extend their node's name (`sm0/exp`, `pool.sum`): the
    // model node is the longest prefix ending before a '/' or '.' that the model names (ONNX names
    // may hold '/' and '.' themselves).
    let source = |mir_node: &str| -> Option<(String, String)> {
        let mut name = mir_node;
        loop {
            if let Some(op) = source_ops.get(name) {
                return Some((name.to_string(), op.clone()));
            }
            name = &name[..name.rfind(['/', '.'])?];
        }
    };
    rlx_target_verilog::unsupported(qmir, &source).map_err(Failure::model)
}

#[allow(clippy::too_many_arguments)]
fn emit_design(qmir: &Mir, report: DispatchReport, name: &str, calib: &[Vec<ConstData>], qi: rlx_opt::QParams, qo: rlx_opt::QParams, macs_per_cycle: usize, tm: &mut Timings) -> Result<VerilogCompiled, Failure> {
    let pq = |q: rlx_opt::QParams| rlx_target_verilog::PortQuant { scale: q.scale, zero_point: q.zero_point };
    let opts = rlx_target_verilog::Options { name: name.to_string(), macs_per_cycle, input: pq(qi), output: pq(qo), rlxc_version: env!("CARGO_PKG_VERSION").to_string(), testbench_vectors: calib.len() };
    let design = tm.time("codegen (Verilog)", || rlx_target_verilog::emit(qmir, &opts)).map_err(Failure::model)?;
    let (mut tb_in, mut tb_expected) = (Vec::new(), Vec::new());
    tm.time("testbench vectors", || -> Result<(), Failure> {
        let scale = ConstData::from_f32(vec![], &[qi.scale]);
        let zp = ConstData::scalar(rlx_ir::DType::I8, qi.zero_point as f64);
        for s in calib {
            let x = eval_op(&MirOp::Quantize { axis: 0 }, &[s[0].clone(), scale.clone(), zp.clone()]).map_err(Failure::model)?.remove(0);
            let y = run_interp(qmir, std::slice::from_ref(&x)).map_err(Failure::model)?.remove(0);
            tb_in.extend_from_slice(x.data.bytes());
            tb_expected.extend_from_slice(y.data.bytes());
        }
        Ok(())
    })?;
    Ok(VerilogCompiled { report, design, macs_per_cycle, input: qi, output: qo, tb_in, tb_expected })
}

/// MIR → Verilog with explicit calibration samples (the tests' entry): quantize (the same pass and
/// runner as the MCU path) → the datapath check (unmapped nodes named with their op types from
/// `source_ops`) → legalize → the Verilog writer → testbench vectors.
pub fn compile_verilog(mir: &Mir, name: &str, calib: &[Vec<ConstData>], macs_per_cycle: usize, source_ops: &BTreeMap<String, String>, tm: &mut Timings) -> Result<VerilogCompiled, Failure> {
    let q = tm.time("quantize", || crate::pipeline::quantize_mir(mir, calib))?;
    check_datapath(&q.mir, source_ops)?;
    let report = crate::pipeline::legalize(&q.mir, &Verilog.caps(Target::Verilog), tm)?;
    emit_design(&q.mir, report, name, calib, q.inputs[0], q.outputs[0], macs_per_cycle, tm)
}

/// int8 bytes as a `$readmemh` file: two hex digits a line.
pub fn mem_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 3);
    for b in bytes {
        s.push_str(&format!("{b:02x}\n"));
    }
    s
}

impl Artifact for VerilogCompiled {
    fn report(&self) -> &DispatchReport {
        &self.report
    }
    fn summary(&self) -> String {
        format!(
            "verilog (int8): {} layer(s), {} MAC(s) per cycle, {} cycles per inference",
            self.design.layers.len(),
            self.macs_per_cycle,
            self.design.cycles
        )
    }
    fn files(&self, name: &str, model: &Path) -> Result<(Vec<(String, Vec<u8>)>, serde_json::Value), Failure> {
        let c = self;
        let d = &c.design;
        let files: Vec<(String, Vec<u8>)> = vec![
            (format!("{name}.v"), d.verilog.clone().into_bytes()),
            (format!("{name}_tb.v"), d.testbench.clone().into_bytes()),
            (format!("{name}_weights.mem"), d.weights_mem.clone().into_bytes()),
            (format!("{name}_qparams.mem"), d.qparams_mem.clone().into_bytes()),
            (format!("{name}_tb_in.mem"), mem_hex(&c.tb_in).into_bytes()),
            (format!("{name}_tb_expected.mem"), mem_hex(&c.tb_expected).into_bytes()),
        ];
        let sources: serde_json::Map<String, serde_json::Value> = files.iter().map(|(f, b)| (f.clone(), serde_json::json!(sha256_hex(b)))).collect();
        let port = |n: usize, q: &rlx_opt::QParams| serde_json::json!({"dtype": "i8", "elems": n, "scale": q.scale, "zero_point": q.zero_point});
        let manifest = serde_json::json!({
            "name": name,
            "rlxc_version": env!("CARGO_PKG_VERSION"),
            "model": model_file(model),
            "target": "verilog",
            "macs_per_cycle": c.macs_per_cycle,
            "cycles_per_inference": d.cycles,
            "layers": d.layers.iter().map(|l| serde_json::json!({"node": l.node, "in": l.k, "out": l.n})).collect::<Vec<_>>(),
            "input": port(d.in_elems, &c.input),
            "output": port(d.out_elems, &c.output),
            "memories": {"activation_ram_bytes": d.act_bytes, "weight_rom_bits": d.weight_rom_bits, "qparam_rom_bits": d.qparam_rom_bits},
            "testbench_vectors": c.tb_in.len() / d.in_elems.max(1),
            "sha256": sources,
            "dispatch": dispatch_counts(&c.report),
        });
        Ok((files, manifest))
    }
}

/// Writes a Verilog compile's files and manifest (the tests' entry; `rlxc compile` goes through
/// [`Artifact::files`] and the same writer).
pub fn write_verilog_artifacts(dir: &Path, name: &str, model: &Path, c: &VerilogCompiled) -> Result<Vec<std::path::PathBuf>, Failure> {
    let (files, manifest) = c.files(name, model)?;
    super::write::write_artifact(dir, name, files, &manifest)
}
