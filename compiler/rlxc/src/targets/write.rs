//! The one artifact writer: every family's files plus its manifest `NAME.json`, written all or
//! nothing; the sha256 the manifests record; the dispatch counts they share.

use crate::cli::Failure;
use rlx_opt::DispatchReport;
use std::path::{Path, PathBuf};

/// Lower-case hex sha256 of `b` (the manifests' content hashes).
pub fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

/// The manifest's `dispatch` counts (native / common-IR / rewritten / unsupported).
pub fn dispatch_counts(r: &DispatchReport) -> serde_json::Value {
    serde_json::json!({
        "native": r.count(rlx_opt::Resolution::Native),
        "common_ir": r.count(rlx_opt::Resolution::CommonIr),
        "rewritten": r.count(rlx_opt::Resolution::Rewritten),
        "unsupported": r.count(rlx_opt::Resolution::Unsupported),
    })
}

/// The model file's name as manifests record it.
pub fn model_file(model: &Path) -> String {
    model.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Writes `files` (names relative to `dir`) and the manifest as `dir/NAME.json` (pretty JSON and a
/// newline), all or nothing. Returns the paths written, the manifest last.
pub fn write_artifact(dir: &Path, name: &str, files: Vec<(String, Vec<u8>)>, manifest: &serde_json::Value) -> Result<Vec<PathBuf>, Failure> {
    create_out_dir(dir)?;
    let json = serde_json::to_string_pretty(manifest).map_err(|e| Failure::model(e.to_string()))? + "\n";
    let mut all: Vec<(PathBuf, Vec<u8>)> = files.into_iter().map(|(f, b)| (dir.join(f), b)).collect();
    all.push((dir.join(format!("{name}.json")), json.into_bytes()));
    write_all_or_nothing(all)
}

/// Creates the output folder `-o DIR` (and its parents). A path that cannot be a folder (a file is
/// there, no permission) is the command line's fault: exit 2, the same for every target.
pub fn create_out_dir(dir: &Path) -> Result<(), Failure> {
    std::fs::create_dir_all(dir).map_err(|e| Failure::usage(format!("cannot create the output folder {}: {e}", dir.display())))
}

/// Writes every file or none: all contents go to temporary names first, then are renamed. On a
/// failure the temporaries are removed, and so are files already renamed in this call, so a failed
/// compile never leaves half an artifact.
pub fn write_all_or_nothing(files: Vec<(PathBuf, Vec<u8>)>) -> Result<Vec<PathBuf>, Failure> {
    let tmp_of = |p: &Path| p.with_file_name(format!(".{}.rlxc-tmp", p.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()));
    let cleanup = |upto: usize| {
        for (p, _) in &files[..upto] {
            let _ = std::fs::remove_file(tmp_of(p));
        }
    };
    for (i, (p, b)) in files.iter().enumerate() {
        if let Some(d) = p.parent() {
            if let Err(e) = std::fs::create_dir_all(d) {
                cleanup(i);
                return Err(Failure::model(format!("cannot create {}: {e}", d.display())));
            }
        }
        if let Err(e) = std::fs::write(tmp_of(p), b) {
            cleanup(i + 1);
            return Err(Failure::model(format!("cannot write {}: {e}", p.display())));
        }
    }
    for (i, (p, _)) in files.iter().enumerate() {
        if let Err(e) = std::fs::rename(tmp_of(p), p) {
            cleanup(files.len());
            for (q, _) in &files[..i] {
                let _ = std::fs::remove_file(q);
            }
            return Err(Failure::model(format!("cannot write {}: {e}", p.display())));
        }
    }
    Ok(files.into_iter().map(|(p, _)| p).collect())
}

/// A port as the device manifests (shader, CUDA) record it: name, dtype, fixed shape.
pub fn port_json(p: &rlx_ir::lir::Port) -> serde_json::Value {
    serde_json::json!({"name": p.name, "dtype": p.ty.dtype.name(), "shape": p.ty.shape.as_fixed().unwrap_or_default()})
}

/// The buffer a schedule base is, in the device manifests' words ("arena", "weights", "input K",
/// "output K").
pub fn base_name(b: rlx_ir::lir::Base) -> String {
    match b {
        rlx_ir::lir::Base::Arena => "arena".to_string(),
        rlx_ir::lir::Base::Weights => "weights".to_string(),
        rlx_ir::lir::Base::Input(k) => format!("input {k}"),
        rlx_ir::lir::Base::Output(k) => format!("output {k}"),
        rlx_ir::lir::Base::State => "state".to_string(),
    }
}
