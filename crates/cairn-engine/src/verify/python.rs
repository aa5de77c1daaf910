//! Which interpreter runs scratch kernels: one the user names (`--python`, `CAIRN_PYTHON`), or
//! Cairn's own venv at `<state>/python`, created once from the system `python3` with a pinned
//! ipykernel.

use std::path::{Path, PathBuf};
use std::process::Command;

use cairn_exec::kernel::python_has_ipykernel;

use super::VerifyObserver;
use crate::EngineError;

/// The ipykernel version Cairn installs into its own venv.
pub const IPYKERNEL_PIN: &str = "ipykernel==7.4.0";

pub fn resolve_python(
    explicit: Option<&Path>,
    venv: &Path,
    obs: &mut dyn VerifyObserver,
) -> Result<PathBuf, EngineError> {
    if let Some(p) = explicit {
        if !python_has_ipykernel(p) {
            return Err(EngineError::Invalid(format!(
                "{} cannot import ipykernel; install it there (`{} -m pip install ipykernel`) or drop --python/CAIRN_PYTHON to let Cairn manage its own",
                p.display(),
                p.display()
            )));
        }
        return Ok(p.to_path_buf());
    }
    let python = venv.join("bin").join("python");
    if python.exists() && python_has_ipykernel(&python) {
        return Ok(python);
    }
    obs.message(&format!(
        "creating the kernel environment {} with {IPYKERNEL_PIN} (once; this takes a minute)",
        venv.display()
    ));
    let status = Command::new("python3").args(["-m", "venv", "--clear"]).arg(venv).status().map_err(|e| {
        EngineError::Invalid(format!(
            "cannot run python3 to create {}: {e}; install python3 (with venv) or pass --python",
            venv.display()
        ))
    })?;
    if !status.success() {
        return Err(EngineError::Invalid(format!(
            "python3 -m venv {} failed ({status}); install python3-venv or pass --python PATH",
            venv.display()
        )));
    }
    let out = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", IPYKERNEL_PIN])
        .output()
        .map_err(|e| EngineError::io(&python, e))?;
    if !out.status.success() {
        return Err(EngineError::Invalid(format!(
            "installing {IPYKERNEL_PIN} into {} failed: {}",
            venv.display(),
            String::from_utf8_lossy(&out.stderr).lines().rev().take(5).collect::<Vec<_>>().join(" / ")
        )));
    }
    obs.message("kernel environment ready");
    Ok(python)
}
