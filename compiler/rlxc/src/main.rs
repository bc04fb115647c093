//! The `rlxc` command line: inspect · run · bench · check · compile · train · coverage · conformance ·
//! tokenize · detokenize.
//!
//! Exit codes: 0 success; 1 the model is invalid or unsupported (or a run fails); 2 the command line
//! is wrong (bad flags, `--dim`/`--input` syntax, unknown target, inputs that do not match the model).

mod cmd_bench;
mod cmd_check;
mod cmd_compile;
mod cmd_coverage;
mod cmd_inspect;
mod cmd_llm;
mod cmd_run;
mod cmd_tokens;
mod cmd_train;
mod cmd_train_step;

pub use rlxc::cli::*;


use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "rlxc",
    version = VERSION,
    about = "rlxc: an ahead-of-time compiler for ML models (ONNX, safetensors, GGUF)",
    long_about = "rlxc: an ahead-of-time compiler for ML models.\n\n\
        MODEL is an ONNX file (.onnx), a safetensors model folder (config.json + model.safetensors: BERT \
        encoders, or language models whose config.json says model_type llama, qwen2, qwen3 or gemma3_text; \
        the folder or its model.safetensors) or a GGUF language model (.gguf; `rlxc run model.gguf --prompt \
        TEXT` generates text, `rlxc run FOLDER --tokens 1,2,3 -n N` generates ids).\n\n\
        Exit codes: 0 success; 1 the model is invalid or unsupported, or running it failed; \
        2 usage error (bad flags, --dim/--input syntax, unknown target, inputs that do not match the model)."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Show a model's inputs, outputs, op histogram and parameter size (or its HIR/MIR text)
    #[command(long_about = cmd_inspect::LONG_ABOUT)]
    Inspect(cmd_inspect::InspectArgs),
    /// Run a model on .npy inputs (interpreter, or a compiled target's executor) and write .npy outputs
    #[command(long_about = cmd_run::LONG_ABOUT)]
    Run(cmd_run::RunArgs),
    /// Time a compiled model in its executor (p50/p10/p90; instructions or cycles on MCU / Verilog)
    #[command(long_about = cmd_bench::LONG_ABOUT)]
    Bench(cmd_bench::BenchArgs),
    /// Compile a model ahead of time into an object, C header, Rust binding and manifest
    #[command(long_about = cmd_compile::LONG_ABOUT)]
    Compile(cmd_compile::CompileArgs),
    /// Report how every op of a model resolves on a target, without compiling
    #[command(long_about = cmd_check::LONG_ABOUT)]
    Check(cmd_check::CheckArgs),
    /// Train a model with its compiled training step (parameters resident between steps) on .npy data
    #[command(long_about = cmd_train::LONG_ABOUT)]
    Train(cmd_train::TrainCmdArgs),
    /// Print (or write, or check) the op-coverage table generated from the targets' claim sets
    Coverage(cmd_coverage::CoverageArgs),
    /// Run the ONNX op conformance suite
    Conformance(rlxc::conformance::ConformanceArgs),
    /// Token ids of a text, with a GGUF model's own vocabulary (comma-separated on stdout)
    Tokenize(cmd_tokens::TokenizeArgs),
    /// The text of token ids, with a GGUF model's own vocabulary
    Detokenize(cmd_tokens::DetokenizeArgs),
}

fn main() -> ExitCode {
    // Rust ignores SIGPIPE, so a print to a closed pipe (`rlxc inspect m.onnx | head -1`) would panic.
    // Restore the default action: the process ends quietly, as cat and grep do. rlxc never writes to
    // a child's stdin, so no other pipe can end it this way. Artifacts are renamed into place only
    // after they are complete, so an end at a print never leaves half an artifact.
    // SAFETY: called first in main, before any thread exists; SIG_DFL is a valid disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let r = match &cli.cmd {
        Cmd::Inspect(a) => cmd_inspect::main(a),
        Cmd::Run(a) => cmd_run::main(a),
        Cmd::Bench(a) => cmd_bench::main(a),
        Cmd::Check(a) => cmd_check::main(a),
        Cmd::Compile(a) => cmd_compile::main(a),
        Cmd::Train(a) => cmd_train::main(a),
        Cmd::Coverage(a) => cmd_coverage::main(a),
        Cmd::Tokenize(a) => cmd_tokens::tokenize(a),
        Cmd::Detokenize(a) => cmd_tokens::detokenize(a),
        Cmd::Conformance(a) => {
            let code = rlxc::conformance::main(a);
            return ExitCode::from(u8::try_from(code).unwrap_or(1));
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            if !f.msg.is_empty() {
                eprintln!("error: {}", f.msg);
            }
            ExitCode::from(f.code)
        }
    }
}
