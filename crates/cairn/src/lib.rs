//! The `cairn` binary's library: the CLI, and the daemon with its HTTP API (`cairn daemon run`),
//! the MCP servers and the web app, over the engine. It only translates: every use case is one
//! engine call, and this crate holds the wire (command lines, JSON bodies, MCP tools, pages) and
//! the terminal. Data goes to stdout (one JSON object with `--json`), progress and messages to
//! stderr; exit codes are part of the CLI contract: 0 success/READY, 1 BLOCKED, 2 usage or input
//! error, 3 run FAILED, 4 conflict, 5 the environment failed (the daemon, the registry or a
//! target cannot be reached, a disk is full), 130 interrupted.
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
pub mod completions;
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
pub mod reference;
pub mod team;
pub mod verify;
pub mod wire;

pub use failure::Failure;

/// Parses the command line, runs the command, and turns its outcome into the exit code. With
/// `--json`, a failure too is the one JSON object on stdout (`{"error": {"code", "message"}}`),
/// besides its sentence on stderr.
pub fn main() -> std::process::ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    end_quietly_on_a_closed_stdout();
    let json_asked = std::env::args_os().skip(1).any(|a| a == "--json");
    let parsed = cli::Cli::command().try_get_matches().and_then(|m| Ok((cli::Cli::from_arg_matches(&m)?, m)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(e) if json_asked && e.use_stderr() => {
            let _ = e.print();
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("").trim_start_matches("error: ");
            output::print_wire(&error_body(&Failure::usage(first)));
            return std::process::ExitCode::from(e.exit_code().clamp(0, 255) as u8);
        }
        Err(e) => e.exit(),
    };
    let json = wants_json(&matches);
    match commands::dispatch(cli) {
        Ok(code) => std::process::ExitCode::from(code),
        Err(f) => {
            eprintln!("error: {}", f.message);
            if json {
                output::print_wire(&error_body(&f));
            }
            std::process::ExitCode::from(f.code)
        }
    }
}

/// `cairn events RUN | head`: when the reader closes the pipe, the command ends as any Unix tool
/// does (status 141, SIGPIPE's), not with a panic's message. SIGPIPE itself stays ignored (Rust's
/// default), so a daemon or a client writing to a closed socket gets an error it handles rather
/// than dying; only `println!`'s panic on a broken stdout is turned into this exit.
fn end_quietly_on_a_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info)
    }));
}

/// Whether the command given (a subcommand at any depth) has `--json` set.
fn wants_json(m: &clap::ArgMatches) -> bool {
    let here = m.try_get_one::<bool>("json").ok().flatten().copied().unwrap_or(false);
    here || m.subcommand().is_some_and(|(_, sub)| wants_json(sub))
}

/// What `--json` prints for a failure: the API's error body, so a script reads one shape from
/// the CLI and the HTTP API alike.
fn error_body(f: &Failure) -> wire::ErrorBody {
    wire::ErrorBody {
        error: wire::ErrorDetail {
            code: f.error.clone(),
            message: f.message.clone(),
            problems: Vec::new(),
            missing: None,
        },
    }
}
