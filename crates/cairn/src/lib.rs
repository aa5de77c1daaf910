//! The `cairn` binary's library: the CLI, and the daemon with its HTTP API (`cairn daemon run`),
//! the MCP servers and the web app, over the engine. It only translates: every use case is one
//! engine call, and this crate holds the wire (command lines, JSON bodies, MCP tools, pages) and
//! the terminal. Data goes to stdout (one JSON object with `--json`), progress and messages to
//! stderr; exit codes are part of the CLI contract: 0 success/READY, 1 BLOCKED, 2 usage or input
//! error, 3 run FAILED, 4 conflict, 130 interrupted.
//!
//! **Invariant:** nothing here reads or writes the registry or starts a process of a run: it
//! depends on `cairn-engine` and `cairn-core` only, not on `cairn-store` or `cairn-exec`.

// No function over `too-many-lines-threshold` (clippy.toml): a reader finds a concept by its name.
#![warn(clippy::too_many_lines)]

pub mod api;
pub mod auth;
pub mod cli;
pub mod client;
pub mod commands;
pub mod daemon;
pub mod docs;
pub mod failure;
pub mod follow;
pub mod input;
pub mod kernel;
pub mod markdown;
pub mod mcp;
pub mod output;
pub mod presence;
pub mod progress;
pub mod quickstart;
pub mod verify;
pub mod wire;

pub use failure::Failure;

/// Parses the command line, runs the command, and turns its outcome into the exit code.
pub fn main() -> std::process::ExitCode {
    use clap::Parser;
    let cli = cli::Cli::parse();
    match commands::dispatch(cli) {
        Ok(code) => std::process::ExitCode::from(code),
        Err(f) => {
            eprintln!("error: {}", f.message);
            std::process::ExitCode::from(f.code)
        }
    }
}
