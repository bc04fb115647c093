//! rlx-target-cranelift: the Cranelift back end. Translates LIR's loop-form kernels into CLIF
//! ([`clif`]), compiles them with Cranelift (`opt_level=speed`) for x86-64 or aarch64, and writes an ELF
//! object through cranelift-object with the same symbols and ABI as the LLVM back end: internal kernel
//! functions, the exported `NAME_run` entry, and the weights blob as a local read-only data object (or,
//! with external weights, a pointer set by the exported `NAME_set_weights`). Needs no LLVM.
//!
//! It depends on rlx-ir only, and hands the legalizer its claim set as data ([`caps`]).

pub mod clif;

use cranelift_codegen::isa::{self, OwnedTargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use rlx_ir::lir::Lir;
use rlx_ir::{DType, TargetCaps};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    pub fn triple(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-gnu",
            Arch::Aarch64 => "aarch64-unknown-linux-gnu",
        }
    }
}

/// What to generate code for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Isa {
    /// This machine, with every feature Cranelift detects.
    Host,
    /// x86-64-v3 (AVX2, FMA, BMI, LZCNT, POPCNT) — the same baseline as the LLVM `x86_64` target.
    X86_64V3,
    /// x86-64 baseline (SSE2): floor/ceil/round become libm calls.
    X86_64,
    /// AArch64 (armv8-a, NEON).
    Aarch64,
}

impl Isa {
    pub fn arch(&self) -> Arch {
        match self {
            Isa::X86_64V3 | Isa::X86_64 => Arch::X86_64,
            Isa::Aarch64 => Arch::Aarch64,
            Isa::Host => match std::env::consts::ARCH {
                "aarch64" => Arch::Aarch64,
                _ => Arch::X86_64,
            },
        }
    }

    fn build(&self) -> Result<OwnedTargetIsa, String> {
        let mut flags = settings::builder();
        let set = |f: &mut settings::Builder, k: &str, v: &str| f.set(k, v).map_err(|e| format!("internal error: cranelift setting {k}={v}: {e}"));
        set(&mut flags, "opt_level", "speed")?;
        set(&mut flags, "is_pic", "true")?;
        set(&mut flags, "unwind_info", "false")?;
        // The writer's output is verified in debug builds only: it costs compile time, and the tests
        // exercise every construct.
        set(&mut flags, "enable_verifier", if cfg!(debug_assertions) { "true" } else { "false" })?;
        let flags = settings::Flags::new(flags);
        let mut b = match self {
            Isa::Host => {
                if !matches!(std::env::consts::ARCH, "x86_64" | "aarch64") {
                    return Err(format!("host architecture {} is not supported by the Cranelift target", std::env::consts::ARCH));
                }
                cranelift_native::builder().map_err(|e| format!("Cranelift does not support this host: {e}"))?
            }
            other => isa::lookup_by_name(other.arch().triple()).map_err(|e| format!("Cranelift has no target {}: {e}", other.arch().triple()))?,
        };
        if *self == Isa::X86_64V3 {
            for f in ["has_sse3", "has_ssse3", "has_sse41", "has_sse42", "has_popcnt", "has_avx", "has_avx2", "has_fma", "has_bmi1", "has_bmi2", "has_lzcnt"] {
                b.enable(f).map_err(|e| format!("internal error: cranelift x86 flag {f}: {e}"))?;
            }
        }
        b.finish(flags).map_err(|e| format!("Cranelift rejected the target: {e}"))
    }
}

/// Dtypes this target implements: the shared CPU set ([`rlx_ir::loops::LOWERED_DTYPES`]).
pub const DTYPES: &[DType] = rlx_ir::loops::LOWERED_DTYPES;

/// MIR op kinds this target claims: every kind the shared kernel lowering produces loop form for.
pub const KINDS: &[&str] = rlx_ir::loops::LOWERED_KINDS;

/// The claim set for `--target NAME` ([`rlx_ir::loops::lowered_caps`], the same for every CPU writer).
pub fn caps(name: &str) -> TargetCaps {
    // Control-flow regions (`rlx_ir::lir::Region`): control flow in the driver, values of any dtype
    // copied bytewise (the bodies' nodes are resolved one by one).
    let all = rlx_ir::loops::LOWERED_DTYPES;
    rlx_ir::loops::lowered_caps(name).with("loop", all).with("if", all)
}

/// Options for one compile.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// C symbol prefix: `NAME_run`.
    pub name: String,
    pub isa: Isa,
    /// Weights are loaded by the caller (`NAME_set_weights`) instead of embedded.
    pub external_weights: bool,
}

/// The CLIF of every function (after translation, before Cranelift's optimizer), for `--emit-ir`.
pub fn emit_ir(lir: &Lir, opts: &CompileOptions) -> Result<String, String> {
    let isa = opts.isa.build()?;
    clif::translate(lir, &opts.name, opts.external_weights, isa, true).map(|(_, text)| text)
}

/// Compiles LIR to an ELF object. Deterministic: the same LIR and options give the same bytes.
pub fn compile(lir: &Lir, opts: &CompileOptions) -> Result<Vec<u8>, String> {
    let isa = opts.isa.build()?;
    clif::translate(lir, &opts.name, opts.external_weights, isa, false).map(|(obj, _)| obj)
}
