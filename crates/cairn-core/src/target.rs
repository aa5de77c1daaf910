//! Compute targets, as data: `local`, or an SSH host (user, host, port, identity, known_hosts)
//! with a workspace root and an executor (`process`, or `slurm` with partition and account).
//! Parsing and validation only; the transport is in `cairn-exec`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The built-in target: this machine.
pub const LOCAL: &str = "local";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Executor {
    Process,
    Slurm,
}

impl Executor {
    pub fn as_str(self) -> &'static str {
        match self {
            Executor::Process => "process",
            Executor::Slurm => "slurm",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshAddress {
    pub user: String,
    pub host: String,
    pub port: u16,
}

/// A configured target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSpec {
    pub name: String,
    pub ssh: SshAddress,
    /// A private key file; the ssh client's default when absent.
    pub identity: Option<String>,
    /// The known_hosts file host keys are checked against (strictly); the user's default when absent.
    pub known_hosts: Option<String>,
    /// Absolute, on the target: the default parent of run directories.
    pub workspace_root: String,
    pub executor: Executor,
    pub partition: Option<String>,
    pub account: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("target name `{0}` is not valid: use 1 to 64 of A-Z a-z 0-9 . _ -, not `local`")]
    Name(String),
    #[error("`{0}` is not USER@HOST[:PORT] (user and host of A-Z a-z 0-9 . _ -, port 1 to 65535)")]
    Ssh(String),
    #[error("workspace root `{0}` must be an absolute path without `..`")]
    WorkspaceRoot(String),
    #[error("{field} `{value}` is not valid: use A-Z a-z 0-9 . _ - only")]
    Word { field: &'static str, value: String },
    #[error("{0} is only for the slurm executor; add --executor slurm")]
    NotSlurm(&'static str),
}

fn plain(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// Parses `USER@HOST[:PORT]` (port 22 by default). Only plain names: nothing that a shell or
/// ssh could read as an option or a command (`-oProxyCommand=…` is refused).
pub fn parse_ssh(text: &str) -> Result<SshAddress, TargetError> {
    let bad = || TargetError::Ssh(text.to_string());
    let (user, rest) = text.split_once('@').ok_or_else(bad)?;
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) => (h, p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(bad)?),
        None => (rest, 22),
    };
    if !plain(user, 64) || !plain(host, 253) || user.starts_with('-') || host.starts_with('-') {
        return Err(bad());
    }
    Ok(SshAddress { user: user.into(), host: host.into(), port })
}

impl TargetSpec {
    /// Checks every field; the executor options need the slurm executor.
    pub fn validate(&self) -> Result<(), TargetError> {
        if !plain(&self.name, 64) || self.name == LOCAL {
            return Err(TargetError::Name(self.name.clone()));
        }
        let ws = &self.workspace_root;
        if !ws.starts_with('/') || ws.split('/').any(|c| c == "..") {
            return Err(TargetError::WorkspaceRoot(ws.clone()));
        }
        for (field, value) in [("partition", &self.partition), ("account", &self.account)] {
            if let Some(v) = value {
                if !plain(v, 64) {
                    return Err(TargetError::Word { field, value: v.clone() });
                }
                if self.executor != Executor::Slurm {
                    return Err(TargetError::NotSlurm(field));
                }
            }
        }
        Ok(())
    }
}

/// What a target's last probe says stands in the way of running there, in words; empty when
/// nothing does. A probe knows no run_dir, so this is the target's general readiness (a writable
/// workspace root, the executor's programs); a plan still checks its own run_dir.
pub fn probe_problems(target: &str, executor: Executor, observed: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    let ws = &observed["workspace"];
    let path = ws["path"].as_str().unwrap_or("?");
    if ws["writable"].as_bool() != Some(true) {
        let nearest = ws["nearest_existing"].as_str().unwrap_or("?");
        out.push(format!(
            "the workspace root {path} cannot be created or written on `{target}` (nearest existing directory: {nearest})"
        ));
    }
    if executor == Executor::Slurm {
        for program in ["sbatch", "squeue", "scancel", "scontrol"] {
            if observed["slurm"][program].as_str().is_none() {
                out.push(format!("`{program}` is not on the PATH of `{target}`, but its executor is slurm"));
            }
        }
    }
    out
}

/// What the step agent observed for a run_dir on a target (the fields in the order it prints
/// them, so a plan stores them as before).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyFacts {
    /// Free bytes at the parent; `None` when it is not a directory.
    pub free_bytes: Option<u64>,
    /// Each input path and its SHA-256, `None` when it is not a file there.
    pub inputs: BTreeMap<String, Option<String>>,
    pub inside_workspace_root: bool,
    pub parent: String,
    pub parent_is_dir: bool,
    /// The parent is reached without a symlink.
    pub parent_real: bool,
    pub parent_writable: bool,
    /// Each program asked for and where it is on the PATH, `None` when it is not.
    pub programs: BTreeMap<String, Option<String>>,
    pub run_dir: String,
    pub run_dir_absent: bool,
}

/// What the readiness facts observed on a target (by the step agent's `ready`) say is wrong for
/// a run_dir, in words; empty when the target is ready. `programs` lists what the plan needs on
/// the target's PATH with the reason.
pub fn readiness_problems(target: &str, facts: &ReadyFacts, programs: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    if !facts.run_dir_absent {
        out.push(format!(
            "run_dir {} exists already on `{target}`; a run creates its own new directory",
            facts.run_dir
        ));
    }
    if !facts.parent_is_dir {
        out.push(format!("the parent of run_dir, {}, is not a directory on `{target}`", facts.parent));
    } else if !facts.parent_real {
        out.push(format!(
            "the parent of run_dir, {}, goes through a symlink on `{target}`; give the real path",
            facts.parent
        ));
    } else if !facts.parent_writable {
        out.push(format!("the parent of run_dir, {}, is not writable on `{target}`", facts.parent));
    }
    for (program, why) in programs {
        if !matches!(facts.programs.get(program), Some(Some(_))) {
            out.push(format!("`{program}` is not on the PATH of `{target}` (observed: none), but {why}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_names_what_stands_in_the_way() {
        let good = serde_json::json!({"workspace": {"path": "/w", "writable": true},
            "slurm": {"sbatch": "/b/sbatch", "squeue": "/b/squeue", "scancel": "/b/scancel", "scontrol": "/b/scontrol"}});
        assert!(probe_problems("t", Executor::Slurm, &good).is_empty());
        let bad = serde_json::json!({"workspace": {"path": "/w", "writable": false, "nearest_existing": "/"},
            "slurm": {"sbatch": null}});
        let process = probe_problems("t", Executor::Process, &bad);
        assert_eq!(process.len(), 1, "{process:?}");
        assert!(process[0].contains("/w") && process[0].contains("nearest existing directory: /"), "{process:?}");
        let slurm = probe_problems("t", Executor::Slurm, &bad);
        assert_eq!(slurm.len(), 5, "{slurm:?}");
        assert!(slurm[1].contains("`sbatch`"), "{slurm:?}");
    }

    #[test]
    fn ssh_addresses_are_plain_names_only() {
        assert_eq!(
            parse_ssh("root@127.0.0.1:2222"),
            Ok(SshAddress { user: "root".into(), host: "127.0.0.1".into(), port: 2222 })
        );
        assert_eq!(parse_ssh("me@host.example").unwrap().port, 22);
        for bad in [
            "host",
            "@h",
            "u@",
            "u@h:0",
            "u@h:99999",
            "u@h:x",
            "-oProxyCommand=x@h",
            "u@-h",
            "u@h;rm",
            "u@h h",
            "u@$(x)",
        ] {
            assert!(parse_ssh(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn specs_are_validated() {
        let ok = TargetSpec {
            name: "hpc".into(),
            ssh: parse_ssh("u@h").unwrap(),
            identity: None,
            known_hosts: None,
            workspace_root: "/scratch/u".into(),
            executor: Executor::Process,
            partition: None,
            account: None,
        };
        assert_eq!(ok.validate(), Ok(()));
        assert!(matches!(TargetSpec { name: "local".into(), ..ok.clone() }.validate(), Err(TargetError::Name(_))));
        assert!(matches!(TargetSpec { name: "a b".into(), ..ok.clone() }.validate(), Err(TargetError::Name(_))));
        assert!(matches!(
            TargetSpec { workspace_root: "rel".into(), ..ok.clone() }.validate(),
            Err(TargetError::WorkspaceRoot(_))
        ));
        assert!(matches!(
            TargetSpec { workspace_root: "/a/../b".into(), ..ok.clone() }.validate(),
            Err(TargetError::WorkspaceRoot(_))
        ));
        assert!(matches!(
            TargetSpec { partition: Some("p".into()), ..ok.clone() }.validate(),
            Err(TargetError::NotSlurm("partition"))
        ));
        let slurm = TargetSpec { executor: Executor::Slurm, partition: Some("debug".into()), ..ok.clone() };
        assert_eq!(slurm.validate(), Ok(()));
        assert!(matches!(
            TargetSpec { account: Some("a;b".into()), ..slurm }.validate(),
            Err(TargetError::Word { field: "account", .. })
        ));
    }
}
