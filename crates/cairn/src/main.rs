//! The `cairn` binary: the CLI, and the daemon with its HTTP API (`cairn daemon run`), over the
//! engine. Data goes to stdout (one JSON object with `--json`), progress and messages to stderr;
//! exit codes are part of the CLI contract: 0 success/READY, 1 BLOCKED, 2 usage or input error,
//! 3 run FAILED, 4 conflict.

mod cli;
mod client;
mod commands;
mod daemon;
mod kernel;
mod mcp;
mod output;
mod progress;
mod quickstart;
mod remote;
mod verify;
mod wire;

use std::process::ExitCode;

use cairn_engine::{EngineError, ErrorKind};
use clap::Parser;

/// An error at the binary's edge, with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure { code: 2, message: message.into() }
    }
}

impl From<EngineError> for Failure {
    fn from(e: EngineError) -> Failure {
        let code = match e.kind() {
            ErrorKind::Conflict => 4,
            ErrorKind::Invalid | ErrorKind::NotFound | ErrorKind::Internal => 2,
            ErrorKind::Interrupted => 130,
        };
        Failure { code, message: e.to_string() }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Failure {
        Failure { code: 2, message: format!("{e:#}") }
    }
}

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match commands::dispatch(cli) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("error: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}
