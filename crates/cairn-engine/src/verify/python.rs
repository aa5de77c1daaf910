//! Which interpreter runs scratch kernels: one the user names (`--python`, `CAIRN_PYTHON`), or
//! Cairn's own venv at `<state>/python`, created once from the system `python3` with a pinned
//! ipykernel.

use std::path::{Path, PathBuf};
use std::process::Command;

use cairn_exec::kernel::python_has_ipykernel;

use super::VerifyObserver;
use crate::EngineError;

fn kernel(message: String) -> EngineError {
    EngineError::KernelUnavailable { message }
}

/// The ipykernel version Cairn installs into its own venv.
pub const IPYKERNEL_PIN: &str = "ipykernel==7.4.0";

pub fn resolve_python(
    explicit: Option<&Path>,
    venv: &Path,
    obs: &mut dyn VerifyObserver,
) -> Result<PathBuf, EngineError> {
    if let Some(p) = explicit {
        // No import check here: it costs an interpreter start on every verification, and a
        // kernel that cannot start says why (its stderr and a hint to install ipykernel).
        if !p.exists() {
            return Err(kernel(format!(
                "{} does not exist; give --python/CAIRN_PYTHON an interpreter that has ipykernel, or drop it to let Cairn manage its own",
                p.display()
            )));
        }
        return Ok(p.to_path_buf());
    }
    let python = venv.join("bin").join("python");
    // Written once the venv is complete, so a ready venv costs no interpreter start to check.
    let ready = venv.join(".cairn-ready");
    if std::fs::read_to_string(&ready).is_ok_and(|pin| pin.trim() == IPYKERNEL_PIN) && python.exists() {
        return Ok(python);
    }
    if python.exists() && python_has_ipykernel(&python) {
        let _ = std::fs::write(&ready, IPYKERNEL_PIN);
        return Ok(python);
    }
    obs.message(&format!(
        "creating the kernel environment {} with {IPYKERNEL_PIN} (once; this takes a minute)",
        venv.display()
    ));
    let status = Command::new("python3").args(["-m", "venv", "--clear"]).arg(venv).status().map_err(|e| {
        kernel(format!(
            "cannot run python3 to create {}: {e}; install python3 (with venv) or pass --python",
            venv.display()
        ))
    })?;
    if !status.success() {
        return Err(kernel(format!(
            "python3 -m venv {} failed ({status}); install python3-venv or pass --python PATH",
            venv.display()
        )));
    }
    let out = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", IPYKERNEL_PIN])
        .output()
        .map_err(|e| EngineError::io(&python, e))?;
    if !out.status.success() {
        return Err(kernel(format!(
            "installing {IPYKERNEL_PIN} into {} failed: {}",
            venv.display(),
            String::from_utf8_lossy(&out.stderr).lines().rev().take(5).collect::<Vec<_>>().join(" / ")
        )));
    }
    let _ = std::fs::write(&ready, IPYKERNEL_PIN);
    obs.message("kernel environment ready");
    Ok(python)
}
