//! Compute targets: the built-in `local`, and SSH hosts registered with their workspace root and
//! executor. A probe observes facts on the target (read-only) and claims nothing it did not see.

use std::path::{Path, PathBuf};

use cairn_core::access::{Caller, Permission, Scope};
use cairn_core::store::StoreError;
use cairn_core::target::{Executor, LOCAL, TargetSpec, parse_ssh};
use cairn_exec::ssh::{SshTransport, probe_local};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{Engine, EngineError};

/// What the fixed, read-only probe observed on a target (facts only), and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    pub target: String,
    pub workspace_root: String,
    /// OS, CPUs, memory, free disk at the workspace, Python, Snakemake, Nextflow, Java, Slurm.
    pub observed: Value,
    pub probed_at: i64,
}

/// What a target's last probe says of its readiness.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Readiness {
    pub ready: bool,
    /// Each thing missing, in words.
    pub problems: Vec<String>,
}

/// A target as the overview shows it: `local` (built in, no spec) or a configured one.
#[derive(Debug, Clone)]
pub struct TargetOverview {
    pub name: String,
    /// `None` for the built-in `local`.
    pub spec: Option<TargetSpec>,
    pub executor: Executor,
    pub workspace_root: String,
    /// `None` if it was never probed.
    pub last_probe: Option<Probe>,
    pub readiness: Option<Readiness>,
}

#[derive(Debug, Clone)]
pub struct AddTarget {
    pub name: String,
    /// `USER@HOST[:PORT]`.
    pub ssh: String,
    pub identity: Option<PathBuf>,
    pub known_hosts: Option<PathBuf>,
    pub workspace_root: String,
    pub executor: Executor,
    pub partition: Option<String>,
    pub account: Option<String>,
}

/// A local file the ssh client will read, made absolute; it must exist.
fn local_file(path: &Path, what: &'static str) -> Result<String, EngineError> {
    let abs = path.canonicalize().map_err(|e| EngineError::TargetFile {
        what,
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    if !abs.is_file() {
        return Err(EngineError::TargetFile {
            what,
            path: abs.display().to_string(),
            message: "it is not a file".into(),
        });
    }
    Ok(abs.display().to_string())
}

impl Engine {
    /// Validates and registers a target. Nothing is contacted: `probe_target` does that.
    /// Refused unless `caller` may add this target.
    pub fn add_target(&self, caller: &Caller, req: &AddTarget) -> Result<TargetSpec, EngineError> {
        self.authorize(caller, Permission::Target, &Scope { workflow: None, target: Some(req.name.clone()) })?;
        let spec = TargetSpec {
            name: req.name.clone(),
            ssh: parse_ssh(&req.ssh)?,
            identity: req.identity.as_deref().map(|p| local_file(p, "--identity")).transpose()?,
            known_hosts: req.known_hosts.as_deref().map(|p| local_file(p, "--known-hosts")).transpose()?,
            workspace_root: req.workspace_root.clone(),
            executor: req.executor,
            partition: req.partition.clone(),
            account: req.account.clone(),
        };
        spec.validate()?;
        self.store.add_target(&spec, self.clock.now_ms())?;
        let detail = serde_json::json!({"ssh": req.ssh, "executor": spec.executor});
        self.record(caller, "target.added", &spec.name, detail);
        Ok(spec)
    }

    /// Removes a configured target; its runs and plans stay recorded.
    pub fn remove_target(&self, caller: &Caller, name: &str) -> Result<(), EngineError> {
        self.authorize(caller, Permission::Target, &Scope { workflow: None, target: Some(name.to_string()) })?;
        if self.store.remove_target(name)? {
            self.record(caller, "target.removed", name, serde_json::json!({}));
            Ok(())
        } else {
            Err(EngineError::TargetNotFound { name: name.to_string() })
        }
    }

    /// Every configured SSH target, by name (`local` is built in and not among them).
    pub fn targets(&self) -> Result<Vec<TargetSpec>, EngineError> {
        Ok(self.store.targets()?)
    }

    pub fn target(&self, name: &str) -> Result<TargetSpec, EngineError> {
        self.store.target(name)?.ok_or_else(|| EngineError::TargetNotFound { name: name.to_string() })
    }

    pub(crate) fn transport(&self, spec: &TargetSpec) -> SshTransport {
        SshTransport {
            user: spec.ssh.user.clone(),
            host: spec.ssh.host.clone(),
            port: spec.ssh.port,
            identity: spec.identity.as_ref().map(PathBuf::from),
            known_hosts: spec.known_hosts.as_ref().map(PathBuf::from),
            control_dir: self.control_dir(),
            control_tag: serde_json::to_vec(spec)
                .map(|b| cairn_core::canonical::sha256_hex(&b)[..12].to_string())
                .unwrap_or_else(|_| spec.name.clone()),
        }
    }

    /// Where ssh control sockets live: `<state>/ssh`, unless that path is too long for a Unix
    /// socket (108 bytes with the tag and ssh's 40-character `%C`), then a private directory
    /// under /tmp named after the state root.
    fn control_dir(&self) -> PathBuf {
        let dir = self.state.path().join("ssh");
        // `<dir>/<12-char tag>-<40-char %C>` plus ssh's temporary suffix (about 17 characters).
        if dir.as_os_str().len() + 1 + 12 + 1 + 40 + 17 < 108 {
            return dir;
        }
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        // This process's uid, as the owner of its /proc entry.
        let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else { return dir };
        let tag = &cairn_core::canonical::sha256_hex(self.state.path().display().to_string().as_bytes())[..12];
        let short = PathBuf::from(format!("/tmp/cairn-ssh-{uid}-{tag}"));
        // Private to this user: refuse a directory someone else made there.
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&short);
        match std::fs::symlink_metadata(&short) {
            Ok(m) if m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0 => short,
            _ => dir,
        }
    }

    /// Runs the fixed read-only probe on a target and keeps what it observed as its last probe.
    pub fn probe_target(&self, name: &str) -> Result<Probe, EngineError> {
        let (observed, workspace) = if name == LOCAL {
            let ws = self.state.runs().display().to_string();
            (probe_local(&ws), ws)
        } else {
            let spec = self.target(name)?;
            (self.transport(&spec).probe(&spec.workspace_root), spec.workspace_root.clone())
        };
        let observed = observed.map_err(|e| EngineError::of_target(name, e.is_refusal(), e.to_string()))?;
        let probe =
            Probe { target: name.to_string(), workspace_root: workspace, observed, probed_at: self.clock.now_ms() };
        let stored = serde_json::to_value(&probe).map_err(|e| EngineError::internal(e.to_string()))?;
        self.store.record_probe(name, &stored, probe.probed_at)?;
        Ok(probe)
    }

    /// Every target, `local` first, each with its last probe and what that probe says of its
    /// readiness.
    pub fn targets_overview(&self) -> Result<Vec<TargetOverview>, EngineError> {
        let overview = |name: &str, spec: Option<TargetSpec>, executor: Executor, workspace_root: String| {
            let last_probe: Option<Probe> = match self.store.last_probe(name)? {
                Some((v, _)) => Some(serde_json::from_value(v).map_err(|e| {
                    EngineError::Store(StoreError::Corrupt(format!("the last probe of `{name}`: {e}")))
                })?),
                None => None,
            };
            let readiness = last_probe.as_ref().map(|p| {
                let problems = cairn_core::target::probe_problems(name, executor, &p.observed);
                Readiness { ready: problems.is_empty(), problems }
            });
            Ok::<_, EngineError>(TargetOverview {
                name: name.to_string(),
                spec,
                executor,
                workspace_root,
                last_probe,
                readiness,
            })
        };
        let mut all = vec![overview(LOCAL, None, Executor::Process, self.state.runs().display().to_string())?];
        for t in self.store.targets()? {
            all.push(overview(&t.name.clone(), Some(t.clone()), t.executor, t.workspace_root.clone())?);
        }
        Ok(all)
    }

    /// Whether `run_dir` on `target` could take a new run now: absent, its parent an existing,
    /// writable directory reached without a symlink, and the executor's programs present. The
    /// facts observed, or an error naming what is missing.
    pub fn check_readiness(&self, target: &str, run_dir: &str) -> Result<Value, EngineError> {
        let path: PathBuf = Path::new(run_dir).components().collect();
        if target == LOCAL {
            crate::plan::check_run_dir(&path).map_err(crate::plan::run_dir_err)?;
            return Ok(json!({"target": LOCAL, "run_dir": path.display().to_string(), "ready": true}));
        }
        crate::plan::check_run_dir_text(&path).map_err(crate::plan::run_dir_err)?;
        let readiness = self.target_ready(target, &path.display().to_string(), &[], &Value::Null)?;
        let mut facts = serde_json::to_value(readiness).unwrap_or(Value::Null);
        facts["ready"] = json!(true);
        Ok(facts)
    }
}
