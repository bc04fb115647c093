//! Compile a model ahead of time from a Cargo build script.
//!
//! `rlxc-build` runs the `rlxc` binary as a subprocess (so a build script never compiles LLVM into
//! itself), archives the object it writes, and prints the `cargo:` lines that link the model into
//! the crate being built. It depends on nothing but std.
//!
//! # Example
//!
//! `Cargo.toml`:
//!
//! ```toml
//! [dependencies]
//! rlx-rt = { version = "0.1", features = ["std"] }   # the binding's runtime; "std" = thread pool
//!
//! [build-dependencies]
//! rlxc-build = "0.1"
//! ```
//!
//! `build.rs`:
//!
//! ```no_run
//! fn main() {
//!     rlxc_build::Model::new("model.onnx")   // relative to the package root
//!         .name("mnist")                      // artifact name and C symbol prefix
//!         .dim("batch", 1)                    // fix every symbolic dim
//!         .target_from_cargo()                // or .target("host") (the default)
//!         .weights_external(false)            // weights embedded in the object (the default)
//!         .compile_or_exit();                 // on failure: cargo warnings + exit status 1
//! }
//! ```
//!
//! `src/main.rs` — the generated safe binding, included from `OUT_DIR/rlxc/<name>/<name>.rs`:
//!
//! ```ignore
//! mod mnist {
//!     include!(concat!(env!("OUT_DIR"), "/rlxc/mnist/mnist.rs"));
//! }
//!
//! fn main() {
//!     let mut arena = Box::new(mnist::Arena::new()); // right size and alignment, off the stack
//!     let image = [0f32; 784];
//!     let mut logits = [0f32; 10];
//!     // One field per model input / output, named after it (see the generated NAME.rs).
//!     let inputs = mnist::Inputs { input: &image };
//!     let mut outputs = mnist::Outputs { logits: &mut logits };
//!     mnist::run(arena.as_mut_slice(), &inputs, &mut outputs).expect("run");
//!     println!("{logits:?}");
//! }
//! ```
//!
//! Instead of spelling the path, a build script can export it with
//! [`Artifact::binding_env`]:
//!
//! ```no_run
//! // build.rs
//! rlxc_build::Model::new("model.onnx").name("mnist").compile_or_exit().binding_env("RLX_MODEL_MNIST");
//! ```
//!
//! ```ignore
//! // src/main.rs
//! mod mnist { include!(env!("RLX_MODEL_MNIST")); }
//! ```
//!
//! # Which `rlxc`
//!
//! The environment variable `RLXC` (a path to the binary), else `rlxc` on `PATH`. The build
//! script reruns when the model, `RLXC`, `AR` or the `rlxc` binary change.
//!
//! # What gets linked
//!
//! [`Model::compile`] writes `NAME.o`, `NAME.h`, `NAME.rs`, `NAME.json` and `librlx_rt.a` into
//! `OUT_DIR/rlxc/<name>/`, archives `NAME.o` into `lib<name>_model.a` (with `$AR`, else `ar`), and
//! prints `cargo:rustc-link-search=native=<dir>`, `cargo:rustc-link-lib=static=<name>_model` and one
//! `cargo:rustc-link-lib=dylib=…` for each system library of the manifest's link line.
//!
//! The object's one runtime function, `rlx_rt_parallel_for`, comes from the `rlx-rt` crate the
//! binding uses (enable its `std` feature for the thread pool; without it parallel loops run
//! serially). `librlx_rt.a` — the same runtime built as a C static library, with its own copy of
//! Rust's std — is for C programs and is not linked by default: linking it next to the `rlx-rt`
//! crate would define the runtime twice. [`Model::link_runtime`]`(true)` links it anyway, for a
//! crate that uses the object through the C header without depending on `rlx-rt`.

// The crate docs show a whole build.rs, `fn main` included.
#![allow(clippy::needless_doctest_main)]

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A model to compile: the builder. Every setter consumes and returns the builder.
#[derive(Clone, Debug)]
pub struct Model {
    model: PathBuf,
    name: Option<String>,
    dims: Vec<(String, u64)>,
    target: TargetChoice,
    cpu: Option<String>,
    weights_external: bool,
    out_dir: Option<PathBuf>,
    link_runtime: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum TargetChoice {
    Named(String),
    FromCargo,
}

/// What [`Model::compile`] produced: paths into the output folder and the arena size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    /// The output folder, `OUT_DIR/rlxc/<name>/` unless [`Model::out_dir`] set it.
    pub dir: PathBuf,
    /// The artifact name: the C symbol prefix and the stem of every file.
    pub name: String,
    /// `NAME.rs`, the safe Rust binding to `include!`.
    pub binding: PathBuf,
    /// `NAME.h`, the C header.
    pub header: PathBuf,
    /// `NAME.json`, the manifest.
    pub manifest: PathBuf,
    /// `lib<name>_model.a`, the archived object.
    pub library: PathBuf,
    /// `NAME.weights.bin` when the weights are external (pass its bytes to `set_weights`).
    pub weights: Option<PathBuf>,
    /// Bytes of scratch memory one run needs (`NAME::ARENA_BYTES`).
    pub arena_bytes: u64,
    /// Bytes of weights, embedded or external.
    pub weights_bytes: u64,
    /// System libraries of the manifest's link line (`pthread`, `dl`, …), linked as dylibs.
    pub system_libs: Vec<String>,
}

/// Why a compile failed. `Display` gives the summary line followed, for a failed `rlxc` run, by
/// every line rlxc printed; [`Error::summary`] is the one line and [`Error::lines`] the details.
#[derive(Debug)]
pub enum Error {
    /// Neither `$RLXC` nor `rlxc` on `PATH` names an existing binary.
    RlxcNotFound {
        /// Where it looked.
        tried: Vec<PathBuf>,
    },
    /// An environment variable Cargo sets for build scripts is missing (not run by Cargo?).
    MissingEnv(&'static str),
    /// `target_from_cargo` met a `CARGO_CFG_TARGET_ARCH` that rlxc has no target for.
    UnsupportedArch(String),
    /// A program could not be started, or a file or folder could not be read or written.
    Io {
        /// What was being done, e.g. "run rlxc".
        what: String,
        /// The program or file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// `rlxc compile` exited with a failure: the model is invalid or unsupported (status 1) or the
    /// arguments were rejected (status 2).
    Compile {
        /// The model path as given.
        model: PathBuf,
        /// The exit status, `None` if rlxc was killed by a signal.
        status: Option<i32>,
        /// Everything rlxc printed on stderr.
        stderr: String,
    },
    /// `ar` failed to archive the object.
    Archive {
        /// The archiver that ran.
        ar: String,
        /// Its exit status and stderr.
        detail: String,
    },
    /// rlxc reported success but a file is missing or the manifest lacks a field.
    Output {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
}

impl Model {
    /// A model file (`.onnx`) or safetensors folder, relative to the package root (the working
    /// folder of build scripts) or absolute.
    pub fn new(model: impl Into<PathBuf>) -> Self {
        Model {
            model: model.into(),
            name: None,
            dims: Vec::new(),
            target: TargetChoice::Named("host".into()),
            cpu: None,
            weights_external: false,
            out_dir: None,
            link_runtime: false,
        }
    }

    /// The artifact name and C symbol prefix (default: the model's file stem). Characters other
    /// than ASCII letters, digits and `_` become `_`, as rlxc does.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Fixes the symbolic dim `name` to `value` (`--dim name=value`); repeatable.
    pub fn dim(mut self, name: impl Into<String>, value: u64) -> Self {
        let name = name.into();
        self.dims.retain(|(n, _)| *n != name);
        self.dims.push((name, value));
        self
    }

    /// The rlxc target: `host` (the default: this machine's CPU and all its features), `x86_64`
    /// (x86-64-v3 unless [`Model::cpu`]) or `aarch64`.
    pub fn target(mut self, target: impl Into<String>) -> Self {
        self.target = TargetChoice::Named(target.into());
        self
    }

    /// The target from Cargo's `CARGO_CFG_TARGET_ARCH` (`x86_64` → `x86_64`, `aarch64` →
    /// `aarch64`): right when cross-compiling, and portable across CPUs of that architecture.
    pub fn target_from_cargo(mut self) -> Self {
        self.target = TargetChoice::FromCargo;
        self
    }

    /// The LLVM CPU name (`--cpu`, e.g. `x86-64-v3`, `znver3`, `cortex-a72`).
    pub fn cpu(mut self, cpu: impl Into<String>) -> Self {
        self.cpu = Some(cpu.into());
        self
    }

    /// `true`: weights go to `NAME.weights.bin` ([`Artifact::weights`]) and the program passes them
    /// to the binding's `set_weights`; `false` (the default): embedded in the object.
    pub fn weights_external(mut self, external: bool) -> Self {
        self.weights_external = external;
        self
    }

    /// Writes into `dir` instead of `OUT_DIR/rlxc/<name>/`.
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// Also links `librlx_rt.a` (default `false`; see the crate docs, "What gets linked").
    pub fn link_runtime(mut self, link: bool) -> Self {
        self.link_runtime = link;
        self
    }

    /// The artifact name: [`Model::name`], else the model's file stem, made a C identifier.
    pub fn artifact_name(&self) -> String {
        let raw = match &self.name {
            Some(n) => n.clone(),
            None => self.model.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        };
        sanitize_ident(&raw)
    }

    /// The rlxc target this build uses ([`Model::target`] or the one mapped from Cargo's env).
    pub fn resolved_target(&self) -> Result<String, Error> {
        match &self.target {
            TargetChoice::Named(t) => Ok(t.clone()),
            TargetChoice::FromCargo => {
                let arch = std::env::var("CARGO_CFG_TARGET_ARCH").map_err(|_| Error::MissingEnv("CARGO_CFG_TARGET_ARCH"))?;
                target_for_arch(&arch).map(str::to_string)
            }
        }
    }

    /// The arguments of `rlxc` for this model, writing into `out`.
    pub fn rlxc_args(&self, out: &Path) -> Result<Vec<OsString>, Error> {
        Ok(self.args_with(out, &self.resolved_target()?))
    }

    fn args_with(&self, out: &Path, target: &str) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec!["compile".into(), self.model.clone().into_os_string()];
        a.extend(["--target".into(), target.into()]);
        a.extend(["-o".into(), out.as_os_str().to_owned()]);
        a.extend(["--name".into(), self.artifact_name().into()]);
        for (n, v) in &self.dims {
            a.extend(["--dim".into(), format!("{n}={v}").into()]);
        }
        if let Some(cpu) = &self.cpu {
            a.extend(["--cpu".into(), cpu.into()]);
        }
        a.extend(["--weights".into(), if self.weights_external { "external" } else { "embedded" }.into()]);
        a
    }

    /// Compiles the model and prints the `cargo:` lines that rebuild on change and link it.
    pub fn compile(&self) -> Result<Artifact, Error> {
        cargo(&format!("rerun-if-changed={}", self.model.display()));
        cargo("rerun-if-env-changed=RLXC");
        cargo("rerun-if-env-changed=AR");
        let rlxc = find_rlxc()?;
        cargo(&format!("rerun-if-changed={}", rlxc.display()));
        let name = self.artifact_name();
        let dir = match &self.out_dir {
            Some(d) => d.clone(),
            None => PathBuf::from(std::env::var_os("OUT_DIR").ok_or(Error::MissingEnv("OUT_DIR"))?).join("rlxc").join(&name),
        };
        let target = self.resolved_target()?;
        // A fresh folder: no stale NAME.weights.bin from an earlier configuration.
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| io("clear the output folder", &dir, e))?;
        }
        std::fs::create_dir_all(&dir).map_err(|e| io("create the output folder", &dir, e))?;

        let out = Command::new(&rlxc).args(self.args_with(&dir, &target)).output().map_err(|e| io("run rlxc", &rlxc, e))?;
        if !out.status.success() {
            return Err(Error::Compile {
                model: self.model.clone(),
                status: out.status.code(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }

        let file = |ext: &str| dir.join(format!("{name}.{ext}"));
        let (object, binding, header, manifest) = (file("o"), file("rs"), file("h"), file("json"));
        for p in [&object, &binding, &header, &manifest] {
            if !p.is_file() {
                return Err(Error::Output { path: p.clone(), detail: "rlxc reported success but did not write it".into() });
            }
        }
        let library = dir.join(format!("lib{name}_model.a"));
        archive(&library, &object)?;

        let text = std::fs::read_to_string(&manifest).map_err(|e| io("read the manifest", &manifest, e))?;
        let missing = |key: &str| Error::Output { path: manifest.clone(), detail: format!("no numeric field \"{key}\"") };
        let arena_bytes = json_u64(&text, "arena_bytes").ok_or_else(|| missing("arena_bytes"))?;
        let weights_bytes = json_u64(&text, "weights_bytes").ok_or_else(|| missing("weights_bytes"))?;
        let system_libs = json_string(&text, "link_line").map(|l| system_libs(&l)).unwrap_or_default();
        let weights = Some(file("weights.bin")).filter(|p| p.is_file());

        cargo(&format!("rustc-link-search=native={}", dir.display()));
        cargo(&format!("rustc-link-lib=static={name}_model"));
        if self.link_runtime {
            cargo("rustc-link-lib=static=rlx_rt");
        }
        for l in &system_libs {
            cargo(&format!("rustc-link-lib=dylib={l}"));
        }
        Ok(Artifact { dir, name, binding, header, manifest, library, weights, arena_bytes, weights_bytes, system_libs })
    }

    /// [`Model::compile`], or on failure [`Error::exit`]: every detail line as a `cargo:warning=`,
    /// a one-line summary on stderr, exit status 1 — never a panic.
    pub fn compile_or_exit(&self) -> Artifact {
        self.compile().unwrap_or_else(|e| e.exit())
    }
}

impl Artifact {
    /// Prints `cargo:rustc-env=VAR=<binding path>`, so the crate can write
    /// `mod m { include!(env!("VAR")); }`.
    pub fn binding_env(&self, var: &str) -> &Self {
        cargo(&format!("rustc-env={var}={}", self.binding.display()));
        self
    }
}

impl Error {
    /// One line: what failed and, for a failed rlxc run, its first problem and how many more.
    pub fn summary(&self) -> String {
        match self {
            Error::RlxcNotFound { tried } => {
                let tried: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
                format!(
                    "the rlxc compiler was not found (looked at: {}); set RLXC to its path or put it on PATH",
                    if tried.is_empty() { "nothing: PATH is empty".into() } else { tried.join(", ") }
                )
            }
            Error::MissingEnv(v) => format!("environment variable {v} is not set (is this running as a Cargo build script?)"),
            Error::UnsupportedArch(a) => format!("rlxc has no target for CARGO_CFG_TARGET_ARCH={a} (supported: x86_64, aarch64)"),
            Error::Io { what, path, source } => format!("cannot {what} ({}): {source}", path.display()),
            Error::Compile { model, status, stderr } => {
                let problems = problems(stderr);
                let status = match status {
                    Some(c) => format!("exit status {c}"),
                    None => "killed by a signal".into(),
                };
                let first = problems.first().map(String::as_str).or_else(|| stderr_lines(stderr).into_iter().next());
                match (first, problems.len()) {
                    (None, _) => format!("rlxc failed to compile {} ({status}) and printed nothing", model.display()),
                    (Some(f), n) if n > 1 => {
                        format!("rlxc failed to compile {} ({status}): {f} (and {} more problems)", model.display(), n - 1)
                    }
                    (Some(f), _) => format!("rlxc failed to compile {} ({status}): {f}", model.display()),
                }
            }
            Error::Archive { ar, detail } => format!("archiving the model object with `{ar}` failed: {detail}"),
            Error::Output { path, detail } => format!("bad rlxc output {}: {detail}", path.display()),
        }
    }

    /// The lines to show as build warnings: rlxc's stderr for a failed compile, else the summary.
    pub fn lines(&self) -> Vec<String> {
        match self {
            Error::Compile { stderr, .. } if !stderr_lines(stderr).is_empty() => {
                stderr_lines(stderr).into_iter().map(str::to_string).collect()
            }
            _ => vec![self.summary()],
        }
    }

    /// Prints every line of [`Error::lines`] as `cargo:warning=…`, the summary on stderr, and exits
    /// the build script with status 1.
    pub fn exit(&self) -> ! {
        for l in self.lines() {
            cargo(&format!("warning={l}"));
        }
        eprintln!("rlxc-build: {}", self.summary());
        std::process::exit(1)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary())?;
        if let Error::Compile { stderr, .. } = self {
            for l in stderr_lines(stderr) {
                write!(f, "\n  {l}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn cargo(line: &str) {
    println!("cargo:{line}");
}

fn io(what: &str, path: &Path, source: std::io::Error) -> Error {
    Error::Io { what: what.into(), path: path.to_path_buf(), source }
}

/// The non-empty lines of `s`, without trailing whitespace (a `cargo:warning` is one line).
fn stderr_lines(s: &str) -> Vec<&str> {
    s.lines().map(str::trim_end).filter(|l| !l.is_empty()).collect()
}

/// The problems rlxc reported: each `error: …` line, and each indented line under an
/// `error: heading:` line as `heading: line`.
fn problems(stderr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut heading: Option<&str> = None;
    let mut heading_used = false;
    for line in stderr_lines(stderr) {
        if let Some(msg) = line.strip_prefix("error:").map(str::trim) {
            if let (Some(h), false) = (heading, heading_used) {
                out.push(h.to_string());
            }
            heading = msg.strip_suffix(':');
            heading_used = false;
            if heading.is_none() {
                out.push(msg.to_string());
            }
        } else if let (Some(h), true) = (heading, line.starts_with(char::is_whitespace)) {
            out.push(format!("{h}: {}", line.trim()));
            heading_used = true;
        }
    }
    if let (Some(h), false) = (heading, heading_used) {
        out.push(h.to_string());
    }
    out
}

/// As rlxc names artifacts: ASCII letters, digits and `_`; a leading digit gets `m_`; empty is `m`.
fn sanitize_ident(s: &str) -> String {
    let mut out: String = s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if out.is_empty() {
        out.push('m');
    } else if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert_str(0, "m_");
    }
    out
}

fn target_for_arch(arch: &str) -> Result<&'static str, Error> {
    match arch {
        "x86_64" => Ok("x86_64"),
        "aarch64" => Ok("aarch64"),
        other => Err(Error::UnsupportedArch(other.into())),
    }
}

/// `$RLXC` if set (it must exist), else the first `rlxc` on `PATH`.
fn find_rlxc() -> Result<PathBuf, Error> {
    if let Some(p) = std::env::var_os("RLXC").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() { Ok(p) } else { Err(Error::RlxcNotFound { tried: vec![p] }) };
    }
    let tried: Vec<PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).map(|d| d.join("rlxc")).collect()).unwrap_or_default();
    tried.iter().find(|p| p.is_file()).cloned().ok_or(Error::RlxcNotFound { tried })
}

fn archive(library: &Path, object: &Path) -> Result<(), Error> {
    let ar = std::env::var("AR").ok().filter(|a| !a.is_empty()).unwrap_or_else(|| "ar".into());
    if library.exists() {
        std::fs::remove_file(library).map_err(|e| io("remove the old archive", library, e))?;
    }
    let out = Command::new(&ar).arg("crs").arg(library).arg(object).output().map_err(|e| io("run the archiver", Path::new(&ar), e))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(Error::Archive { ar, detail: format!("{}: {}", out.status, stderr_lines(&err).join("; ")) });
    }
    Ok(())
}

/// The value after `"key":` — the manifest's top-level keys are unique, and a quote inside a JSON
/// string is escaped, so the first match is the key.
fn json_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\":");
    let at = text.find(&pat)? + pat.len();
    Some(text[at..].trim_start())
}

fn json_u64(text: &str, key: &str) -> Option<u64> {
    let v = json_value(text, key)?;
    let end = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    v[..end].parse().ok()
}

fn json_string(text: &str, key: &str) -> Option<String> {
    let mut chars = json_value(text, key)?.strip_prefix('"')?.chars();
    let mut out = String::new();
    loop {
        match chars.next()? {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    out.push(u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32).unwrap_or('\u{fffd}'));
                }
                c => out.push(c), // \" \\ \/ (and \b \f, which a link line never has)
            },
            c => out.push(c),
        }
    }
}

/// `-lNAME` words of a link line, in order, without repeats.
fn system_libs(link_line: &str) -> Vec<String> {
    let mut libs: Vec<String> = Vec::new();
    for w in link_line.split_whitespace() {
        if let Some(l) = w.strip_prefix("-l").filter(|l| !l.is_empty()) {
            if !libs.iter().any(|x| x == l) {
                libs.push(l.to_string());
            }
        }
    }
    libs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(a: &[OsString]) -> Vec<String> {
        a.iter().map(|s| s.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn args_default() {
        let m = Model::new("models/mnist.onnx");
        assert_eq!(m.artifact_name(), "mnist");
        assert_eq!(
            strs(&m.args_with(Path::new("out/rlxc/mnist"), "host")),
            ["compile", "models/mnist.onnx", "--target", "host", "-o", "out/rlxc/mnist", "--name", "mnist", "--weights", "embedded"]
        );
        assert_eq!(m.resolved_target().unwrap(), "host");
    }

    #[test]
    fn args_full() {
        let m = Model::new("m.onnx")
            .name("my-model.v2")
            .dim("batch", 1)
            .dim("sequence", 128)
            .dim("batch", 4) // the last value of a dim wins
            .target("x86_64")
            .cpu("znver3")
            .weights_external(true);
        assert_eq!(m.artifact_name(), "my_model_v2");
        assert_eq!(
            strs(&m.rlxc_args(Path::new("o")).unwrap()),
            [
                "compile", "m.onnx", "--target", "x86_64", "-o", "o", "--name", "my_model_v2", "--dim", "sequence=128", "--dim",
                "batch=4", "--cpu", "znver3", "--weights", "external"
            ]
        );
    }

    #[test]
    fn names() {
        assert_eq!(sanitize_ident("9lives"), "m_9lives");
        assert_eq!(sanitize_ident(""), "m");
        assert_eq!(sanitize_ident("température"), "temp_rature");
        assert_eq!(Model::new("dir/bert-base").artifact_name(), "bert_base");
        assert_eq!(Model::new("a/b.c.onnx").artifact_name(), "b_c");
    }

    #[test]
    fn arch_mapping() {
        assert_eq!(target_for_arch("x86_64").unwrap(), "x86_64");
        assert_eq!(target_for_arch("aarch64").unwrap(), "aarch64");
        let e = target_for_arch("riscv64").unwrap_err();
        assert_eq!(e.to_string(), "rlxc has no target for CARGO_CFG_TARGET_ARCH=riscv64 (supported: x86_64, aarch64)");
    }

    #[test]
    fn compile_error_formatting() {
        let e = Error::Compile {
            model: "model.onnx".into(),
            status: Some(1),
            stderr: "error: node 'n1' (Foo, domain '', opset 17): unsupported op type\r\n\n\
                     error: node 'n2' (Bar): unsupported op type\n"
                .into(),
        };
        assert_eq!(
            e.summary(),
            "rlxc failed to compile model.onnx (exit status 1): node 'n1' (Foo, domain '', opset 17): unsupported op type \
             (and 1 more problems)"
        );
        assert_eq!(e.lines(), ["error: node 'n1' (Foo, domain '', opset 17): unsupported op type", "error: node 'n2' (Bar): unsupported op type"]);
        let shown = e.to_string();
        assert_eq!(shown.lines().count(), 3);
        assert!(shown.ends_with("\n  error: node 'n2' (Bar): unsupported op type"));

        let nested = Error::Compile {
            model: "bad.onnx".into(),
            status: Some(1),
            stderr: "error: cannot import 'bad.onnx':\n  node 'f1' (X:Foo): unsupported op Foo\n  node 'f2' (X:Bar): unsupported op Bar\n\
                     error: symbolic dims must be fixed: batch\n"
                .into(),
        };
        assert_eq!(
            nested.summary(),
            "rlxc failed to compile bad.onnx (exit status 1): cannot import 'bad.onnx': node 'f1' (X:Foo): unsupported op Foo \
             (and 2 more problems)"
        );
        assert_eq!(nested.lines().len(), 4);
        assert_eq!(problems("error: a:\nerror: b:\n  c\n"), ["a", "b: c"]);
        let one = Error::Compile { model: "m.onnx".into(), status: Some(2), stderr: "error: bad --dim 'x'\n".into() };
        assert_eq!(one.summary(), "rlxc failed to compile m.onnx (exit status 2): bad --dim 'x'");
        let silent = Error::Compile { model: "m.onnx".into(), status: None, stderr: "\n".into() };
        assert_eq!(silent.summary(), "rlxc failed to compile m.onnx (killed by a signal) and printed nothing");
        assert_eq!(silent.lines(), [silent.summary()]);
    }

    #[test]
    fn other_error_formatting() {
        let e = Error::RlxcNotFound { tried: vec!["/a/rlxc".into(), "/b/rlxc".into()] };
        assert_eq!(e.summary(), "the rlxc compiler was not found (looked at: /a/rlxc, /b/rlxc); set RLXC to its path or put it on PATH");
        assert_eq!(e.lines(), [e.summary()]);
        let e = io("run rlxc", Path::new("/x/rlxc"), std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied"));
        assert_eq!(e.to_string(), "cannot run rlxc (/x/rlxc): denied");
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(Error::MissingEnv("OUT_DIR").to_string(), "environment variable OUT_DIR is not set (is this running as a Cargo build script?)");
    }

    #[test]
    fn manifest_scan() {
        let text = r#"{
  "arena_align": 16,
  "arena_bytes": 1024,
  "dispatch": { "nodes": [ { "node": "\"link_line\": -lbogus" } ] },
  "link_line": "cc app.c m.o librlx_rt.a -lpthread -ldl -lm -lrt -lutil -lm",
  "name": "m\u00e9",
  "weights_bytes": 0
}"#;
        assert_eq!(json_u64(text, "arena_bytes"), Some(1024));
        assert_eq!(json_u64(text, "weights_bytes"), Some(0));
        assert_eq!(json_u64(text, "missing"), None);
        assert_eq!(json_string(text, "name").as_deref(), Some("mé"));
        let line = json_string(text, "link_line").unwrap();
        assert_eq!(system_libs(&line), ["pthread", "dl", "m", "rt", "util"]);
        assert_eq!(json_string(r#"{"a": "x\"y\\z"}"#, "a").as_deref(), Some("x\"y\\z"));
        assert_eq!(json_string(r#"{"a": "unterminated"#, "a"), None);
    }
}
