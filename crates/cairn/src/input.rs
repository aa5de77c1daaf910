//! What the CLI reads before it calls anything: the state root it works on, a run input file, and
//! the engine options of a process that executes.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use cairn_engine::EngineOptions;

use crate::Failure;

/// `--home`/`CAIRN_HOME`, else `$XDG_STATE_HOME/cairn`, else `~/.local/state/cairn`.
pub fn state_root(home: Option<PathBuf>) -> Result<PathBuf, Failure> {
    if let Some(h) = home.filter(|h| !h.as_os_str().is_empty()) {
        return Ok(h);
    }
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(x) = env("XDG_STATE_HOME") {
        return Ok(x.join("cairn"));
    }
    env("HOME")
        .map(|h| h.join(".local/state/cairn"))
        .ok_or_else(|| Failure::usage("cannot find a state root: set CAIRN_HOME (or HOME)"))
}

/// A run input: one JSON value from a file, or from stdin for `-`.
pub fn read_input(path: &Path) -> Result<Value, Failure> {
    read_json_file(path).map_err(Failure::usage)
}

/// [`read_input`] as a command-line value parser, so `--input FILE` arrives as its JSON.
pub fn input_file(arg: &str) -> Result<Value, String> {
    read_json_file(Path::new(arg))
}

fn read_json_file(path: &Path) -> Result<Value, String> {
    let label = path.display().to_string();
    let bytes = if label == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf).map_err(|e| format!("stdin: {e}"))?;
        buf
    } else {
        std::fs::read(path).map_err(|e| format!("{label}: cannot read the input file: {e}"))?
    };
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| format!("{label}: the input is not UTF-8 text (invalid byte at offset {})", e.valid_up_to()))?;
    serde_json::from_str(text).map_err(|e| {
        format!("{label}: the input is not valid JSON: {e}; the run input is one JSON value, usually an object")
    })
}

/// The engine's options of a process that executes (an `--in-process` run or replay, the
/// daemon): the defaults, and, for the crash tests only, the crash point `CAIRN_TEST_CRASH_AT`
/// names, where the process then kills itself (`tool-spawned:STEP:ATTEMPT`,
/// `session-kernel-started`, `group-commit[:N]`), or where its pool gives up on a run
/// (`give-up:RUN`). Nothing but a test sets it.
pub fn engine_options() -> Result<EngineOptions, Failure> {
    let crash = match std::env::var("CAIRN_TEST_CRASH_AT") {
        Ok(point) if !point.is_empty() => {
            Some(point.parse().map_err(|e: String| Failure::usage(format!("CAIRN_TEST_CRASH_AT (test-only): {e}")))?)
        }
        _ => None,
    };
    Ok(EngineOptions { crash, ..EngineOptions::default() })
}

/// The caller of a command that works on the state root in-process: its owner, who can read
/// and write every file there anyway.
pub fn owner_caller() -> cairn_core::access::Caller {
    cairn_core::access::Caller::owner("cli")
}
