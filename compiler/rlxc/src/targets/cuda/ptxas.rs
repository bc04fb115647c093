//! Finding NVIDIA's assembler `ptxas` (PyPI's nvidia-cuda-nvcc-cu12, requirements.txt) for the
//! `cuda-ptxas` conformance column and the CUDA tests.

use std::path::{Path, PathBuf};

/// `$RLX_PTXAS`, else found through the venv python (`$RLX_PY`, else `.venv/bin/python`):
/// [`ptxas_of`].
pub fn ptxas() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("RLX_PTXAS").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    ptxas_of(&std::env::var_os("RLX_PY").filter(|p| !p.is_empty()).map_or_else(|| PathBuf::from(".venv/bin/python"), PathBuf::from))
}

/// `site-packages/nvidia/cuda_nvcc/bin/ptxas` of the python `py`.
pub fn ptxas_of(py: &Path) -> Result<PathBuf, String> {
    let code = "import importlib.util, os; s = importlib.util.find_spec('nvidia.cuda_nvcc'); print(os.path.join(list(s.submodule_search_locations)[0], 'bin', 'ptxas'))";
    let out = std::process::Command::new(py).args(["-c", code]).output().map_err(|e| format!("cannot run {} to find ptxas: {e} (make setup)", py.display()))?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() || !p.exists() {
        return Err(format!("ptxas not found through {} (make setup installs nvidia-cuda-nvcc-cu12): {}", py.display(), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(p)
}

/// Assembles `ptx` for `sm_{sm}` (`sm_{sm}a` where the module is written for it: `wgmma`, the NVPTX
/// writer's `RLX_CUDA_WGMMA=1`) with `ptxas` in the scratch folder `dir` (created; the caller removes
/// it). `Err` quotes ptxas' diagnostics.
pub fn assemble(ptxas: &Path, ptx: &str, sm: u32, dir: &Path) -> Result<(), String> {
    let arch = if ptx.lines().any(|l| l.trim() == format!(".target sm_{sm}a")) { format!("sm_{sm}a") } else { format!("sm_{sm}") };
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let src = dir.join("k.ptx");
    std::fs::write(&src, ptx).map_err(|e| format!("cannot write {}: {e}", src.display()))?;
    let out = std::process::Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg(&src)
        .arg("-o")
        .arg(dir.join("k.cubin"))
        .output()
        .map_err(|e| format!("cannot run ptxas ({}): {e}", ptxas.display()))?;
    if !out.status.success() {
        return Err(format!("ptxas: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}
