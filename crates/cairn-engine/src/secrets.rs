//! Secret providers: where the value of a secret a tool declares comes from at launch. First the
//! state root's own store (`<state>/secrets/NAME`, mode 0600 in a 0700 folder, outside the
//! registry: `cairn secret set NAME` reads the value from stdin), else an external manager's
//! command, the way git's credential helpers work (`pass show`, given the name as its last
//! argument, no shell; the first line of its output is the value). A value is read for the
//! attempt that needs it and kept nowhere else.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cairn_core::access::{Caller, Permission, Scope};
use cairn_core::secret;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::{Engine, EngineError};

/// How long an external provider may take to answer (a manager asking for a passphrase on a
/// terminal the daemon does not have would otherwise hang the launch).
pub const PROVIDER_TIMEOUT: Duration = Duration::from_secs(20);

/// The external manager's command, kept in `<state>/secrets/provider.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provider {
    /// argv; the secret's name is appended.
    pub command: Vec<String>,
}

/// What the daemon can provide: the names in its store, and the external command, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretsView {
    pub stored: Vec<String>,
    pub provider: Option<Provider>,
}

impl Engine {
    fn secrets_dir(&self) -> PathBuf {
        self.state.path().join("secrets")
    }

    fn private_dir(&self) -> Result<PathBuf, EngineError> {
        let dir = self.secrets_dir();
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).map_err(|e| EngineError::io(&dir, e))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| EngineError::io(&dir, e))?;
        Ok(dir)
    }

    /// Stores a secret's value (the state root owner's, or an admin's, act; its name is recorded,
    /// never its value).
    pub fn set_secret(&self, caller: &Caller, name: &str, value: &str) -> Result<(), EngineError> {
        self.authorize(caller, Permission::Admin, &Scope::everywhere())?;
        secret::check_name(name)?;
        secret::check_value(name, value)?;
        write_private(&self.private_dir()?.join(name), value.as_bytes())?;
        self.record(caller, "secret.set", name, json!({}));
        Ok(())
    }

    pub fn remove_secret(&self, caller: &Caller, name: &str) -> Result<(), EngineError> {
        self.authorize(caller, Permission::Admin, &Scope::everywhere())?;
        secret::check_name(name)?;
        let path = self.secrets_dir().join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => {
                self.record(caller, "secret.removed", name, json!({}));
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(EngineError::SecretMissing { name: name.to_string(), how: "it is not in the store".into() })
            }
            Err(e) => Err(EngineError::io(&path, e)),
        }
    }

    /// Sets (or, with `None`, removes) the external manager's command.
    pub fn set_secret_provider(&self, caller: &Caller, command: Option<Vec<String>>) -> Result<(), EngineError> {
        self.authorize(caller, Permission::Admin, &Scope::everywhere())?;
        let path = self.private_dir()?.join("provider.json");
        match command {
            Some(command) if command.is_empty() || command[0].trim().is_empty() => {
                Err(EngineError::invalid_field("command", "name the provider's program, e.g. `pass show`"))
            }
            Some(command) => {
                let text = serde_json::to_vec_pretty(&Provider { command: command.clone() })
                    .map_err(|e| EngineError::internal(e.to_string()))?;
                write_private(&path, &text)?;
                self.record(caller, "secret.provider", "provider", json!({"command": command}));
                Ok(())
            }
            None => {
                let _ = std::fs::remove_file(&path);
                self.record(caller, "secret.provider", "provider", json!({"command": null}));
                Ok(())
            }
        }
    }

    fn provider(&self) -> Result<Option<Provider>, EngineError> {
        let path = self.secrets_dir().join("provider.json");
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                EngineError::io(&path, format!("not a provider file: {e}; set it again with `cairn secret provider`"))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(EngineError::io(&path, e)),
        }
    }

    /// The names in the store and the external command.
    pub fn secrets(&self) -> Result<SecretsView, EngineError> {
        let dir = self.secrets_dir();
        let mut stored = Vec::new();
        match std::fs::read_dir(&dir) {
            Ok(entries) => {
                for e in entries.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if secret::check_name(&name).is_ok() {
                        stored.push(name);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(EngineError::io(&dir, e)),
        }
        stored.sort();
        Ok(SecretsView { stored, provider: self.provider()? })
    }

    /// The values of `names`, for the attempt about to launch: each from the store, else from
    /// the provider. A name with no value is refused, saying how to give it one.
    pub(crate) fn resolve_secrets(&self, names: &[String]) -> Result<Vec<(String, String)>, EngineError> {
        let mut out = Vec::with_capacity(names.len());
        let mut provider = None;
        for name in names {
            let path = self.secrets_dir().join(name);
            let value = match std::fs::read_to_string(&path) {
                Ok(v) => v,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if provider.is_none() {
                        provider = Some(self.provider()?);
                    }
                    match provider.as_ref().and_then(Option::as_ref) {
                        Some(p) => ask_provider(p, name)?,
                        None => {
                            return Err(EngineError::SecretMissing {
                                name: name.clone(),
                                how: "it is not in the store and no provider is set".into(),
                            });
                        }
                    }
                }
                Err(e) => return Err(EngineError::io(&path, e)),
            };
            secret::check_value(name, &value)?;
            out.push((name.clone(), value));
        }
        Ok(out)
    }
}

/// Writes `bytes` to `path` whole or not at all (a temporary file of mode 0600 beside it, synced,
/// then renamed over it): no one else can read it, and a crash leaves the old value or the new.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> Result<(), EngineError> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|_| f.sync_all()))
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| EngineError::io(path, e))
}

/// Runs the provider for `name`: its first line of output is the value.
fn ask_provider(p: &Provider, name: &str) -> Result<String, EngineError> {
    let failed = |message: String| EngineError::SecretProvider { name: name.to_string(), message };
    let mut command = Command::new(&p.command[0]);
    command.args(&p.command[1..]).arg(name).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cairn_exec::with_normal_policy(|| command.spawn())
        .map_err(|e| failed(format!("`{}` could not be started: {e}", p.command.join(" "))))?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > PROVIDER_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(failed(format!("`{}` gave no answer in {PROVIDER_TIMEOUT:?}", p.command.join(" "))));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(failed(e.to_string())),
        }
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut stdout);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    if !status.success() {
        let why = stderr.lines().next().unwrap_or("").trim().to_string();
        return Err(failed(format!("`{} {name}` failed ({status}): {why}", p.command.join(" "))));
    }
    Ok(stdout.lines().next().unwrap_or("").to_string())
}
