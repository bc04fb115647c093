//! The Cortex-M family (`cortex-m0plus` … `cortex-m55`): fold, or int8 quantization with
//! `--calibrate` (a QDQ model with its own parameters) → legalize → plan the smallest arena over
//! several operator orders → C99 (or no_std Rust with `--emit rust`) → RAM/flash budgets; `NAME.c`,
//! `NAME.h` (or `NAME.rs`), the manifest, and with `--board` a buildable firmware folder. Executor:
//! the firmware built with arm-none-eabi-gcc and run in `qemu-system-arm` ([`qemu`]).

pub mod qemu;

use super::write::{dispatch_counts, model_file, sha256_hex};
use super::{Artifact, Family, Flag, Planning, Prepared, QuantPorts, Quantization, Request, Session};
use crate::cli::{problem_list, Failure, Target};
use crate::pipeline::Timings;
use rlx_ir::lir::Lir;
use rlx_ir::{Mir, TargetCaps};
use rlx_opt::DispatchReport;
use rlx_target_mcu::firmware::Board;
use rlx_target_mcu::Core;
use std::path::Path;

pub struct Mcu;

/// The Cortex-M core of an MCU target.
pub fn core_of(t: Target) -> Result<Core, Failure> {
    Ok(match t {
        Target::CortexM0plus => Core::M0Plus,
        Target::CortexM3 => Core::M3,
        Target::CortexM4 => Core::M4,
        Target::CortexM7 => Core::M7,
        Target::CortexM33 => Core::M33,
        Target::CortexM55 => Core::M55,
        _ => return Err(Failure::usage(format!("{} is not an MCU target", t.name()))),
    })
}

/// The board of a request (`--board`, else the core's default board), checked against the core.
pub fn board_of(t: Target, r: &Request) -> Result<&'static Board, Failure> {
    let core = core_of(t)?;
    let Some(name) = &r.board else { return Ok(Board::of(core)) };
    let b = Board::named(name).ok_or_else(|| Failure::usage(format!("--board {name} is not a board rlxc knows; boards: {}", Board::names())))?;
    if b.core != core {
        return Err(Failure::usage(format!("--board {name} has a {}, not a {} (boards: {})", b.core.name(), core.name(), Board::names())));
    }
    Ok(b)
}

/// The quantization options of the MCU path: matmul weights stored `[N, K]` (contiguous per output
/// channel, for the dual-MAC inner loops).
pub fn quant_options() -> rlx_opt::QuantOptions {
    rlx_opt::QuantOptions { transpose_matmul_weights: true, ..Default::default() }
}

impl Family for Mcu {
    fn describe(&self) -> &'static str {
        "MCU targets (--target cortex-m*)"
    }
    fn caps(&self, t: Target) -> TargetCaps {
        rlx_target_mcu::caps(t.name())
    }
    fn flags(&self) -> &'static [Flag] {
        &[Flag::EmitRust, Flag::Calibrate, Flag::RamBudget, Flag::FlashBudget, Flag::Board]
    }
    fn check(&self, t: Target, r: &Request) -> Result<(), Failure> {
        if r.board.is_some() && r.emit_rust {
            return Err(Failure::usage("--board writes a C firmware folder; --emit rust writes a no_std Rust source for your own firmware crate: use one"));
        }
        board_of(t, r).map(|_| ())
    }
    fn quantization(&self, _t: Target) -> Quantization {
        Quantization::Optional(quant_options())
    }
    /// Every core claims the same set: one column.
    fn coverage_column(&self, t: Target) -> bool {
        t == Target::CortexM4
    }
    fn planning(&self, _t: Target, _r: &Request) -> Result<Planning, Failure> {
        Ok(Planning::SmallestArena(rlx_opt::PlanOptions { align: 8, ..Default::default() }))
    }
    fn emit(&self, t: Target, p: Prepared, r: &Request, tm: &mut Timings) -> Result<Box<dyn Artifact>, Failure> {
        Ok(Box::new(emit(t, p, r, tm)?))
    }
    fn runs(&self, _t: Target) -> bool {
        true
    }
    fn load(&self, t: Target, mir: &Mir, r: &Request, tm: &mut Timings) -> Result<Box<dyn Session>, Failure> {
        let c = compile(t, mir, r, tm)?;
        Ok(Box::new(qemu::Firmware::new(c, board_of(t, r)?, tm)?))
    }
}

/// Memory limits for an MCU compile (bytes).
#[derive(Clone, Copy, Debug, Default)]
pub struct Budgets {
    pub ram: Option<usize>,
    pub flash: Option<usize>,
}

/// Everything an MCU compile produced, before it is written.
pub struct Compiled {
    pub lir: Lir,
    pub report: DispatchReport,
    pub sources: rlx_target_mcu::Sources,
    pub core: Core,
    /// Port parameters when the model was quantized.
    pub quant: Option<QuantPorts>,
    /// `--emit rust`: the no_std Rust source (then NAME.rs is written instead of NAME.c / NAME.h).
    pub rust: Option<rlx_target_mcu::RustSource>,
    /// Arena bytes of each operator order the planner tried, and the one kept.
    pub order: rlx_opt::OrderReport,
    /// `--board`: the firmware folder written beside the sources.
    pub board: Option<&'static Board>,
    pub name: String,
}

/// MIR → C sources for a Cortex-M core (the family's script, typed). Fails listing every
/// unsupported node, or the largest buffers over a budget.
pub fn compile(t: Target, mir: &Mir, r: &Request, tm: &mut Timings) -> Result<Compiled, Failure> {
    let p = super::prepare(t, mir, r, tm)?;
    emit(t, p, r, tm)
}

fn emit(t: Target, p: Prepared, r: &Request, tm: &mut Timings) -> Result<Compiled, Failure> {
    let core = core_of(t)?;
    let (Some(lir), Some(order)) = (p.lir, p.order) else { return Err(Failure::model("internal error: the MCU family plans a LIR")) };
    let quant = p.quant;
    let pq = |q: &rlx_opt::QParams| Some(rlx_target_mcu::PortQuant { scale: q.scale, zero_point: q.zero_point });
    let opts = rlx_target_mcu::Options {
        name: r.name.clone(),
        core,
        inputs: quant.as_ref().map(|q| q.inputs.iter().map(pq).collect()).unwrap_or_default(),
        outputs: quant.as_ref().map(|q| q.outputs.iter().map(pq).collect()).unwrap_or_default(),
        rlxc_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let sources = tm.time("codegen (C)", || rlx_target_mcu::emit_c(&lir, &opts)).map_err(Failure::model)?;
    check_budgets(&lir, &sources, Budgets { ram: r.ram_budget, flash: r.flash_budget })?;
    let rust = match r.emit_rust {
        true => Some(tm.time("codegen (Rust)", || rlx_target_mcu::emit_rust(&lir, &opts)).map_err(Failure::model)?),
        false => None,
    };
    let board = match r.board {
        Some(_) => Some(board_of(t, r)?),
        None => None,
    };
    Ok(Compiled { lir, report: p.report, sources, core, quant, rust, order, board, name: r.name.clone() })
}

/// Fails when the arena (RAM) or the weights (flash) exceed a budget, naming the largest buffers.
fn check_budgets(lir: &Lir, s: &rlx_target_mcu::Sources, b: Budgets) -> Result<(), Failure> {
    use rlx_ir::lir::Base;
    let mut problems = Vec::new();
    for (what, used, budget, base) in [("RAM (arena)", s.arena_bytes, b.ram, Base::Arena), ("flash (weights)", s.weights_bytes, b.flash, Base::Weights)] {
        let Some(budget) = budget else { continue };
        if used <= budget {
            continue;
        }
        let mut bufs: Vec<_> = lir.buffers.iter().filter(|x| x.base == base).collect();
        bufs.sort_by(|x, y| y.bytes().cmp(&x.bytes()).then(x.offset.cmp(&y.offset)));
        bufs.dedup_by(|x, y| x.offset == y.offset && x.bytes() == y.bytes());
        let largest: Vec<String> = bufs.iter().take(5).map(|x| format!("{} bytes: '{}' {}{:?}", x.bytes(), x.label, x.dtype, x.shape)).collect();
        problems.push(format!("{what}: needs {used} bytes, budget {budget} (over by {}); largest buffers: {}", used - budget, largest.join("; ")));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Failure::model(problem_list("the plan does not fit the memory budget", &problems)))
    }
}

impl Artifact for Compiled {
    fn report(&self) -> &DispatchReport {
        &self.report
    }
    fn summary(&self) -> String {
        format!(
            "{}{}: {} kernels, arena (RAM) {} bytes, weights (flash) {} bytes",
            self.core.name(),
            if self.quant.is_some() { " (int8)" } else { "" },
            self.lir.launches.len(),
            self.sources.arena_bytes,
            self.sources.weights_bytes
        )
    }
    fn files(&self, name: &str, model: &Path) -> Result<(Vec<(String, Vec<u8>)>, serde_json::Value), Failure> {
        let c = self;
        let port = |p: &rlx_ir::lir::Port, q: Option<&rlx_opt::QParams>| {
            let mut v = serde_json::json!({"name": p.name, "dtype": p.ty.dtype.name(), "shape": p.ty.shape.as_fixed().unwrap_or_default()});
            if let Some(q) = q {
                v["scale"] = serde_json::json!(q.scale);
                v["zero_point"] = serde_json::json!(q.zero_point);
            }
            v
        };
        let ins: Vec<_> = c.lir.inputs.iter().enumerate().map(|(i, p)| port(p, c.quant.as_ref().map(|q| &q.inputs[i]))).collect();
        let outs: Vec<_> = c.lir.outputs.iter().enumerate().map(|(i, p)| port(p, c.quant.as_ref().map(|q| &q.outputs[i]))).collect();
        let mut manifest = serde_json::json!({
            "name": name,
            "rlxc_version": env!("CARGO_PKG_VERSION"),
            "model": model_file(model),
            "target": {"core": c.core.name(), "gcc_flags": c.core.gcc_flags()},
            "quantized": c.quant.is_some(),
            "inputs": ins,
            "outputs": outs,
            "arena_bytes": c.sources.arena_bytes,
            "weights_bytes": c.sources.weights_bytes,
            "kernels": c.lir.launches.len(),
            "arena_by_order": {
                "tried": c.order.tried.iter().map(|(n, b)| serde_json::json!({"order": n, "arena_bytes": b})).collect::<Vec<_>>(),
                "chosen": c.order.chosen_name(),
            },
            "sources": match &c.rust {
                Some(r) => serde_json::json!({"rs": {"file": format!("{name}.rs"), "sha256": sha256_hex(r.rs.as_bytes()), "proven_accesses": r.proven_accesses, "checked_accesses": r.checked_accesses}}),
                None => serde_json::json!({"c": {"file": format!("{name}.c"), "sha256": sha256_hex(c.sources.c.as_bytes())}, "h": {"file": format!("{name}.h"), "sha256": sha256_hex(c.sources.h.as_bytes())}}),
            },
            "dispatch": dispatch_counts(&c.report),
        });
        let mut files = match &c.rust {
            Some(r) => vec![(format!("{name}.rs"), r.rs.clone().into_bytes())],
            None => vec![(format!("{name}.c"), c.sources.c.clone().into_bytes()), (format!("{name}.h"), c.sources.h.clone().into_bytes())],
        };
        if let Some(b) = c.board {
            let fw = b.files(name);
            manifest["firmware"] = serde_json::json!({
                "board": b.name,
                "qemu_machine": b.machine,
                "build": "make",
                "files": fw.iter().map(|(f, t)| serde_json::json!({"file": f, "sha256": sha256_hex(t.as_bytes())})).collect::<Vec<_>>(),
            });
            files.extend(fw.into_iter().map(|(f, t)| (f, t.into_bytes())));
        }
        Ok((files, manifest))
    }
}
