//! Why a kernel could not be started, in words that say what to do.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::KernelConfig;

/// Why a kernel could not be started. Each message reads after "failed to start the kernel: ".
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("could not prepare the runtime directory {}: {source}", path.display())]
    RuntimeDir { path: PathBuf, source: io::Error },
    #[error("the working directory {} does not exist or is not a directory", path.display())]
    Workdir { path: PathBuf },
    #[error("could not run `{}`: {source}; check that the interpreter exists and is executable", python.display())]
    Spawn { python: PathBuf, source: io::Error },
    #[error(
        "the kernel process ({}) exited during start-up ({}){hint}{}",
        python.display(),
        describe_exit(exit_code, signal),
        stderr_section(stderr_tail)
    )]
    ExitedDuringStartup {
        python: PathBuf,
        exit_code: Option<i32>,
        signal: Option<i32>,
        /// What to do about it, when the cause is recognised ("" otherwise).
        hint: String,
        stderr_tail: String,
    },
    #[error(
        "the kernel did not answer kernel_info within {} ({}){}",
        human(*timeout),
        python.display(),
        stderr_section(stderr_tail)
    )]
    StartupTimeout { python: PathBuf, timeout: Duration, stderr_tail: String },
    #[error("could not talk to the kernel over {endpoint}: {reason}{}", stderr_section(stderr_tail))]
    Protocol { endpoint: String, reason: String, stderr_tail: String },
    #[error("could not set up the kernel client: {0}")]
    Internal(String),
}

impl KernelError {
    /// The tail of the kernel's stderr, when the error has one.
    pub fn stderr_tail(&self) -> Option<&str> {
        match self {
            KernelError::ExitedDuringStartup { stderr_tail, .. }
            | KernelError::StartupTimeout { stderr_tail, .. }
            | KernelError::Protocol { stderr_tail, .. } => Some(stderr_tail),
            _ => None,
        }
    }
}

fn stderr_section(tail: &str) -> String {
    let tail = tail.trim_end();
    if tail.is_empty() { String::new() } else { format!("; the kernel's stderr ends with:\n{tail}") }
}

fn describe_exit(code: &Option<i32>, signal: &Option<i32>) -> String {
    match (code, signal) {
        (_, Some(s)) => format!("killed by signal {s}"),
        (Some(c), None) => format!("exit code {c}"),
        (None, None) => "status unknown".to_string(),
    }
}

fn human(d: Duration) -> String {
    if d.as_millis().is_multiple_of(1000) { format!("{} s", d.as_secs()) } else { format!("{} ms", d.as_millis()) }
}

/// A sentence for the causes of a failed start that we recognise.
pub(super) fn startup_hint(cfg: &KernelConfig, stderr_tail: &str) -> String {
    if stderr_tail.contains("No module named ipykernel") {
        format!(
            "; this interpreter has no ipykernel: install it (`{} -m pip install ipykernel`) or use another interpreter",
            cfg.python.display()
        )
    } else if let Some(limit) = cfg.memory_limit {
        format!(
            "; it ran under a memory limit (RLIMIT_AS) of {} MiB, which may be too small for it to start: raise the limit",
            limit / (1024 * 1024)
        )
    } else {
        String::new()
    }
}

pub(super) fn lost_port_race(e: &KernelError) -> bool {
    match e {
        KernelError::ExitedDuringStartup { stderr_tail, .. } => {
            stderr_tail.contains("Address already in use") || stderr_tail.contains("EADDRINUSE")
        }
        KernelError::Protocol { .. } => true,
        _ => false,
    }
}
