//! What the tests share. Every test drives the real `cairn` binary through its CLI contract, with
//! its own `CAIRN_HOME` and its own workflow folders in a temporary directory.
//!
//! Style: a test builds a [`Cairn`] (a private state root plus a scratch directory), writes small
//! workflow folders with [`write_workflow`], registers them with [`Cairn::add`], and runs them with
//! [`Cairn::run`]. Every command goes through [`Cairn::json`], which checks the `--json` contract
//! (stdout holds exactly one JSON object) and returns the exit code, the object and stderr.
//!
//! Tools are instances of one small Python script, [`TOOL_PY`], whose behaviour per attempt is
//! chosen by its arguments (a `plan`), and which appends what it does to a log file whose absolute
//! path comes in the run input: the log is how tests count executions.
//!
//! The test modules take all of it with `use crate::support::*`; the files here are by concern.

mod chain;
mod cli;
mod disk;
mod http;
mod marked;
mod procs;
mod repo;
mod ssh;
mod tool;

pub use chain::*;
pub use cli::*;
pub use disk::*;
pub use http::*;
pub use marked::*;
pub use procs::*;
pub use repo::*;
pub use ssh::*;
pub use tool::*;

/// The SHA-256 of bytes, in hex: what an artifact records.
pub use cairn_core::canonical::sha256_hex;

/// Whether this is CI (`CI=true`, or `CI=1`): a missing service then fails a test instead of
/// skipping it.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}
