//! The SSH transport to a target, through the system OpenSSH client: strict host-key checking
//! against a known_hosts file, batch mode (never a prompt), a multiplexed control connection per
//! target. Remote commands are fixed strings chosen by Cairn; data travels on stdin, never in a
//! shell string.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cairn_core::status::Outcome;
use serde_json::Value;

use crate::{ToolCommand, run_tool, sandbox_env};

/// The read-only probe, run with `python3 -` on the target.
pub const PROBE_PY: &str = include_str!("probe.py");

/// How to reach one SSH target.
#[derive(Debug, Clone)]
pub struct SshTransport {
    pub user: String,
    pub host: String,
    pub port: u16,
    pub identity: Option<PathBuf>,
    pub known_hosts: Option<PathBuf>,
    /// Where control sockets live (private to the state root).
    pub control_dir: PathBuf,
    /// Distinguishes this configuration's control connection: a connection opened under one
    /// identity and known_hosts file is never reused by another configuration of the same host.
    pub control_tag: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "the host key of {host} is unknown or changed (strict host-key checking refused it); check its fingerprint and add it to {known_hosts}"
    )]
    HostKey { host: String, known_hosts: String },
    #[error("{host} refused the login ({detail}); check the user and --identity")]
    Auth { host: String, detail: String },
    #[error("cannot reach {host}: {detail}")]
    Unreachable { host: String, detail: String },
    #[error("the probe failed on {host}: {detail}")]
    Failed { host: String, detail: String },
}

impl ProbeError {
    /// The host answered and refused us (its key, our login): a configuration to fix, not a
    /// fault that heals by waiting.
    pub fn is_refusal(&self) -> bool {
        matches!(self, ProbeError::HostKey { .. } | ProbeError::Auth { .. })
    }
}

impl SshTransport {
    /// The ssh argv for a fixed remote command.
    pub fn argv(&self, remote: &str) -> Vec<String> {
        let mut a: Vec<String> = vec!["ssh".into()];
        let mut opt = |o: String| {
            a.push("-o".into());
            a.push(o);
        };
        opt("BatchMode=yes".into());
        opt("StrictHostKeyChecking=yes".into());
        opt("ConnectTimeout=10".into());
        opt("ControlMaster=auto".into());
        opt(format!("ControlPath={}/{}-%C", self.control_dir.display(), self.control_tag));
        opt("ControlPersist=60".into());
        // A dead connection is noticed within ~15 s, so a follower re-attaches instead of hanging.
        opt("ServerAliveInterval=5".into());
        opt("ServerAliveCountMax=3".into());
        if let Some(k) = &self.known_hosts {
            opt(format!("UserKnownHostsFile={}", k.display()));
            opt("GlobalKnownHostsFile=/dev/null".into());
        }
        if let Some(i) = &self.identity {
            opt("IdentitiesOnly=yes".into());
            a.push("-i".into());
            a.push(i.display().to_string());
        }
        a.push("-p".into());
        a.push(self.port.to_string());
        a.push("-l".into());
        a.push(self.user.clone());
        a.push("--".into());
        a.push(self.host.clone());
        a.push(remote.into());
        a
    }

    pub fn label(&self) -> String {
        format!("{}@{}:{}", self.user, self.host, self.port)
    }

    /// Runs the probe on the target and returns what it observed.
    pub fn probe(&self, workspace_root: &str) -> Result<Value, ProbeError> {
        let _ = std::fs::create_dir_all(&self.control_dir);
        let out = run_probe(self.argv("python3 -"), workspace_root);
        out.map_err(|stderr| classify_ssh_failure(self, &stderr))
    }
}

/// Names what went wrong with an ssh connection from the client's stderr.
pub fn classify_ssh_failure(t: &SshTransport, stderr: &str) -> ProbeError {
    let host = t.label();
    let known_hosts =
        t.known_hosts.as_ref().map(|k| k.display().to_string()).unwrap_or_else(|| "~/.ssh/known_hosts".into());
    let detail = stderr.trim().lines().last().unwrap_or("no detail").to_string();
    if stderr.contains("Host key verification failed") || stderr.contains("HOST IDENTIFICATION HAS CHANGED") {
        ProbeError::HostKey { host, known_hosts }
    } else if stderr.contains("Permission denied") {
        ProbeError::Auth { host, detail }
    } else if stderr.contains("Connection refused")
        || stderr.contains("timed out")
        || stderr.contains("Could not resolve")
        || stderr.contains("No route")
        || stderr.contains("Connection reset")
        || stderr.contains("Broken pipe")
    {
        ProbeError::Unreachable { host, detail }
    } else {
        ProbeError::Failed { host, detail }
    }
}

/// Runs the probe on this machine.
pub fn probe_local(workspace_root: &str) -> Result<Value, ProbeError> {
    run_probe(vec!["python3".into(), "-".into()], workspace_root)
        .map_err(|detail| ProbeError::Failed { host: "local".into(), detail })
}

fn run_probe(argv: Vec<String>, workspace_root: &str) -> Result<Value, String> {
    // The workspace root travels inside the script, hex-encoded: data, never shell text.
    let script = PROBE_PY.replace("__WORKSPACE_HEX__", &hex::encode(workspace_root.as_bytes()));
    let cmd = ToolCommand {
        argv,
        cwd: Path::new("/").to_path_buf(),
        env: sandbox_env(&["SSH_AUTH_SOCK".to_string()], &[]),
        stdin: script.into_bytes(),
        timeout: Duration::from_secs(60),
        grace: Duration::from_secs(2),
        max_stdout: 1 << 20,
        stderr_tail: 16 << 10,
        report_after: Duration::ZERO,
    };
    let run = run_tool(&cmd, &mut |_| {});
    match run.result {
        Some(v) if run.outcome == Outcome::Completed => Ok(v),
        _ => Err(if run.stderr_tail.trim().is_empty() {
            run.error.unwrap_or_else(|| "no output".into())
        } else {
            run.stderr_tail
        }),
    }
}
