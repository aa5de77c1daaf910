//! The files the engine writes into a local run's directory before its steps run. (A target's
//! run directory is made on the target, by the plan's approval; a step's own folder,
//! `steps/<step>/`, by its launch.)

use std::path::Path;

use serde_json::Value;

use crate::EngineError;

/// The run's input, as the run read it.
pub(crate) const INPUT_FILE: &str = "input.json";

/// Lays out a local run's directory: its `steps/` folder, and its input once
/// ([`write_input`]).
pub(super) fn lay_out(run_dir: &Path, input: &Value) -> Result<(), EngineError> {
    std::fs::create_dir_all(run_dir.join("steps")).map_err(|e| EngineError::io(run_dir, e))?;
    write_input(run_dir, input)
}

/// Writes `input.json`, the run's input as pretty-printed JSON, unless it is there already (a
/// resumed run keeps the file its first execution wrote).
pub(super) fn write_input(run_dir: &Path, input: &Value) -> Result<(), EngineError> {
    let input_file = run_dir.join(INPUT_FILE);
    if !input_file.exists() {
        let text = serde_json::to_vec_pretty(input).map_err(|e| EngineError::io(&input_file, e))?;
        std::fs::write(&input_file, text).map_err(|e| EngineError::io(&input_file, e))?;
    }
    Ok(())
}
