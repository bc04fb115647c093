//! The reference interpreter as a target: `interp` runs the lowered MIR as it is (the numerical
//! oracle); `interp-int8` runs the int8 program the Cortex-M and Verilog targets compile (`--calibrate`
//! quantization, or a QDQ model's own parameters; the same passes and options as the MCU family), so a
//! firmware user gets the reference int8 outputs of their model. Nothing is written: no `compile`.

use super::{Artifact, Family, Flag, Planning, Prepared, QuantPorts, Quantization, Request, Session};
use crate::cli::{Failure, Target};
use crate::pipeline::Timings;
use rlx_ir::{ConstData, Mir, TargetCaps, TensorType};

pub struct Interp;

impl Family for Interp {
    fn describe(&self) -> &'static str {
        "--target interp-int8"
    }
    fn caps(&self, _t: Target) -> TargetCaps {
        rlx_interp::caps()
    }
    fn coverage_column(&self, t: Target) -> bool {
        t == Target::Interp
    }
    fn flags(&self) -> &'static [Flag] {
        &[Flag::Calibrate]
    }
    fn check(&self, t: Target, r: &Request) -> Result<(), Failure> {
        if t == Target::Interp && r.calibrate.is_some() {
            return Err(Failure::usage("--calibrate applies to --target interp-int8 (the interpreter's run of the int8 program), not --target interp"));
        }
        Ok(())
    }
    fn quantization(&self, t: Target) -> Quantization {
        match t {
            Target::InterpInt8 => Quantization::Optional(super::mcu::quant_options()),
            _ => Quantization::Never,
        }
    }
    fn planning(&self, _t: Target, _r: &Request) -> Result<Planning, Failure> {
        Ok(Planning::None)
    }
    fn emit(&self, t: Target, _p: Prepared, _r: &Request, _tm: &mut Timings) -> Result<Box<dyn Artifact>, Failure> {
        Err(Failure::usage(format!("--target {} has no compiled form; use `rlxc run --target {}`", t.name(), t.name())))
    }
    fn runs(&self, _t: Target) -> bool {
        true
    }
    fn load(&self, t: Target, mir: &Mir, r: &Request, tm: &mut Timings) -> Result<Box<dyn Session>, Failure> {
        if t == Target::Interp {
            // The MIR as lowered, unfolded: what `rlxc run` has always run.
            return Ok(Box::new(Interpreter { mir: mir.clone(), quant: None }));
        }
        let (q, quant, _) = super::passes(t, mir, r, tm)?;
        if quant.is_none() {
            return Err(Failure::usage("--target interp-int8 runs the int8 program: pass --calibrate data.npy (or give a QDQ model)"));
        }
        Ok(Box::new(Interpreter { mir: q, quant }))
    }
}

/// The interpreter on a MIR (float, or the quantized integer program).
pub struct Interpreter {
    mir: Mir,
    quant: Option<QuantPorts>,
}

impl Session for Interpreter {
    fn device(&self) -> String {
        match self.quant {
            Some(_) => "the reference interpreter (int8 program)".into(),
            None => "the reference interpreter".into(),
        }
    }
    fn inputs(&self) -> Vec<TensorType> {
        self.mir.inputs.iter().map(|&v| self.mir.ty(v).clone()).collect()
    }
    fn quant(&self) -> Option<&QuantPorts> {
        self.quant.as_ref()
    }
    fn run(&mut self, samples: &[Vec<ConstData>]) -> Result<Vec<Vec<ConstData>>, Failure> {
        samples.iter().map(|s| rlx_interp::run(&self.mir, s).map_err(|e| Failure::model(format!("the interpreter failed: {e}")))).collect()
    }
}
