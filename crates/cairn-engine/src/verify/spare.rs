//! The daemon's spare scratch kernel: one kernel booted ahead of need and never used, so a
//! verification starts on a process that has run nothing instead of waiting half a second for
//! ipykernel to start. Still one fresh process per verification: a spare is taken once, and the
//! next one boots in the background after that verification ends.
//!
//! A spare is used only when it is what a cold start would have given the verification: the same
//! interpreter (path and file), the same kernel environment variables and no memory limit (a
//! spare is booted without one). One that fits no request stays for the next request; one whose
//! world changed under it (the interpreter file, the installed distributions, the kernel plugins)
//! is discarded. Before the first cell, the kernel's working directory, IPython's record of it
//! and the import cache of the spare's own directory are set to the document's, as a cold start
//! in the document's folder has them.
//!
//! **Invariant:** a spare's directory (`kernels/<its future verification id>/`) holds `spare.json`
//! naming its owner and its kernel until it is taken, so a spare whose daemon was killed is
//! stopped (checked by pid and start time) and removed by whoever next reaps.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use cairn_core::canonical::sha256_hex;
use cairn_exec::ProcessIdentity;
use cairn_exec::kernel::{KernelConfig, ScratchKernel};
use serde::{Deserialize, Serialize};

use crate::Engine;
use crate::process::{Owner, is_alive, this_process};

use super::{INTERRUPT_GRACE, kernel_env};

/// What marks a spare's directory.
const SPARE: &str = "spare.json";

/// A spare's directory while it is made: `<this>-<owner pid>-<owner start time>-<id>`.
const STAGING: &str = ".spare-staging-";

/// After a spare failed to boot, the next try waits this long (or for the next verification).
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(60);

/// What a verification asks of its kernel that a spare must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelAsk {
    pub python: PathBuf,
    pub env: Vec<(String, String)>,
    pub memory_limit: Option<u64>,
}

impl KernelAsk {
    /// A digest of the kernel's environment variables: what a client compares with the spare's
    /// without the values being shown.
    pub fn env_sha256(&self) -> String {
        env_sha256(&self.env)
    }
}

pub fn env_sha256(env: &[(String, String)]) -> String {
    let mut bytes = Vec::new();
    for (k, v) in env {
        bytes.extend_from_slice(k.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(v.as_bytes());
        bytes.push(0);
    }
    sha256_hex(&bytes)
}

/// The spare as a client sees it (`GET /kernel/spare`).
#[derive(Debug, Clone, Serialize)]
pub struct SpareStatus {
    /// The daemon keeps a spare (not turned off with `--no-spare-kernel`).
    pub enabled: bool,
    /// `ready`, `booting`, or `none` (no interpreter yet, or the last boot failed).
    pub state: &'static str,
    pub python: Option<String>,
    /// sha256 of the kernel's environment variables (names and values).
    pub env_sha256: Option<String>,
    /// The environment hash the bootstrap cell will report (interpreter and distributions).
    pub environment_sha256: Option<String>,
    /// Since it was ready.
    pub idle_ms: Option<u64>,
    /// Why there is none, when there is none.
    pub reason: Option<String>,
}

impl SpareStatus {
    /// A daemon that keeps none (`--no-spare-kernel`).
    pub fn off() -> SpareStatus {
        SpareStatus {
            enabled: false,
            state: "off",
            python: None,
            env_sha256: None,
            environment_sha256: None,
            idle_ms: None,
            reason: Some("the daemon runs with --no-spare-kernel".into()),
        }
    }
}

/// A booted spare.
pub(crate) struct Spare {
    pub kernel: ScratchKernel,
    /// The id the verification that takes it gets (its directory's name).
    pub id: String,
    pub runtime_dir: PathBuf,
    ask: KernelAsk,
    python_file: Option<FileStamp>,
    world: World,
    ready_at: Instant,
}

impl Spare {
    /// How long it waited, from ready to now.
    pub fn idle(&self) -> Duration {
        self.ready_at.elapsed()
    }

    /// Sets the working directory the document's verification has in a cold start: the kernel
    /// changes to it, IPython's `_dh` and `starting_dir` name it, and the import cache entry of
    /// the spare's own directory goes (`''` on `sys.path` is the working directory). Silent, so
    /// the notebook's execution counts and history are a cold start's. `false` when the kernel
    /// refused (it is not used then).
    pub fn move_to(&mut self, workdir: &Path) -> bool {
        let (Some(dir), Some(own)) = (workdir.to_str(), self.runtime_dir.to_str()) else { return false };
        let (Ok(dir), Ok(own)) = (serde_json::to_string(dir), serde_json::to_string(own)) else { return false };
        // One expression binding nothing in the user's namespace.
        let code = format!(
            "(lambda os, sys, pathlib, ip, d, s: (os.chdir(d), sys.path_importer_cache.pop(s, None), \
             setattr(ip, 'starting_dir', d), ip.user_ns['_dh'].__setitem__(slice(None), [pathlib.Path(d)]), None)[-1])\
             (__import__('os'), __import__('sys'), __import__('pathlib'), get_ipython(), {dir}, {own})"
        );
        let run = self.kernel.execute_silent(&code, Duration::from_secs(10));
        matches!(run.status, cairn_exec::kernel::CellStatus::Ok)
    }
}

/// What a spare was booted against and is re-checked against when taken.
#[derive(Debug, Clone, PartialEq, Eq)]
struct World {
    /// The bootstrap's environment hash: the Python version and the distributions on `sys.path`.
    environment_sha256: String,
    python_version: String,
    sys_path: Vec<String>,
    plugins_sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: u64,
}

fn stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(FileStamp { len: m.len(), modified: m.modified().ok(), inode: m.ino() })
}

/// The daemon's keeper of the spare: the slot, and the thread that boots into it.
pub struct SpareKernel {
    python: Option<PathBuf>,
    /// The interpreter a spare boots with, as a verification names it: `python`, else the venv's.
    boots_with: PathBuf,
    inner: Mutex<Inner>,
    changed: Condvar,
}

#[derive(Default)]
struct Inner {
    spare: Option<Spare>,
    booting: bool,
    /// A boot is due (at start, and after each verification).
    due: bool,
    closed: bool,
    reason: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct SpareRecord {
    owner_pid: u32,
    owner_start_time: u64,
    /// `None` while the kernel starts (written first, so a crash then still leaves the record).
    kernel_pid: Option<u32>,
    kernel_start_time: Option<u64>,
}

impl SpareRecord {
    fn write(&self, dir: &Path) -> std::io::Result<()> {
        let tmp = dir.join(".spare.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec(self).unwrap_or_default())?;
        std::fs::rename(&tmp, dir.join(SPARE))
    }
}

/// What taking a spare gave.
pub(crate) enum Taken {
    Spare(Box<Spare>),
    /// None fits (or none is kept): a cold start.
    Cold,
}

impl SpareKernel {
    /// Starts keeping a spare for `engine` (the daemon's), booted with `python` (the daemon's
    /// `CAIRN_PYTHON`; else Cairn's own venv once it exists). The thread ends on [`close`].
    ///
    /// [`close`]: SpareKernel::close
    pub fn start(engine: Arc<Engine>, python: Option<PathBuf>) -> Arc<SpareKernel> {
        let boots_with =
            python.clone().unwrap_or_else(|| engine.state.path().join("python").join("bin").join("python"));
        let keeper = Arc::new(SpareKernel {
            python,
            boots_with,
            inner: Mutex::new(Inner { due: true, ..Default::default() }),
            changed: Condvar::new(),
        });
        if engine.spare.set(keeper.clone()).is_err() {
            return engine.spare.get().cloned().unwrap_or(keeper);
        }
        let k = keeper.clone();
        let spawned = std::thread::Builder::new().name("cairn-spare-kernel".into()).spawn(move || k.keep(&engine));
        if spawned.is_err() {
            keeper.lock().reason = Some("the thread that boots spares could not start".into());
        }
        keeper
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn keep(&self, engine: &Engine) {
        loop {
            let mut inner = self.lock();
            loop {
                if inner.closed {
                    return;
                }
                if inner.spare.is_none() && inner.due {
                    break;
                }
                inner = self.changed.wait(inner).unwrap_or_else(PoisonError::into_inner);
            }
            inner.booting = true;
            inner.due = false;
            drop(inner);
            let booted = engine.boot_spare(self.python.as_deref());
            let mut inner = self.lock();
            inner.booting = false;
            match booted {
                Ok(spare) if !inner.closed => {
                    inner.spare = Some(spare);
                    inner.reason = None;
                }
                Ok(spare) => spare.discard(),
                Err(reason) => {
                    inner.reason = Some(reason);
                    // Retried after a while, or at once after the next verification (which may
                    // have created the interpreter).
                    let (mut again, _) = self
                        .changed
                        .wait_timeout_while(inner, RETRY_AFTER_FAILURE, |i| !i.due && !i.closed)
                        .unwrap_or_else(PoisonError::into_inner);
                    again.due = true;
                    inner = again;
                }
            }
            drop(inner);
            self.changed.notify_all();
        }
    }

    /// A verification ended: boot the next spare.
    pub(crate) fn replenish(&self) {
        self.lock().due = true;
        self.changed.notify_all();
    }

    /// Stops keeping a spare and kills the one kept (the daemon's shutdown). A spare still
    /// booting is waited for (as long as a start may take) and killed as it comes up: a kernel
    /// leads its own process group, so one the daemon left behind would outlive it.
    pub fn close(&self) {
        let spare = {
            let mut inner = self.lock();
            inner.closed = true;
            self.changed.notify_all();
            let (mut inner, _) = self
                .changed
                .wait_timeout_while(inner, BOOTING_WAIT, |i| i.booting)
                .unwrap_or_else(PoisonError::into_inner);
            inner.spare.take()
        };
        if let Some(s) = spare {
            s.discard();
        }
    }

    pub fn status(&self) -> SpareStatus {
        let inner = self.lock();
        let base = SpareStatus {
            enabled: true,
            state: "none",
            // What the next spare boots with, so a client can tell before one is ready.
            python: Some(self.boots_with.display().to_string()),
            env_sha256: Some(env_sha256(&kernel_env())),
            environment_sha256: None,
            idle_ms: None,
            reason: inner.reason.clone(),
        };
        match &inner.spare {
            Some(s) => SpareStatus {
                state: "ready",
                python: Some(s.ask.python.display().to_string()),
                env_sha256: Some(s.ask.env_sha256()),
                environment_sha256: Some(s.world.environment_sha256.clone()),
                idle_ms: Some(s.idle().as_millis() as u64),
                reason: None,
                ..base
            },
            None if inner.booting || (inner.due && !inner.closed) => {
                SpareStatus { state: "booting", reason: None, ..base }
            }
            None => base,
        }
    }

    /// The spare, if it fits `ask` and its world is unchanged, for a verification in `workdir`;
    /// one still booting is waited for (it is nearer ready than a cold start). A spare whose
    /// world changed is discarded.
    pub(crate) fn take(&self, ask: &KernelAsk, workdir: &Path, startup: Duration) -> Taken {
        let deadline = Instant::now() + startup;
        let mut inner = self.lock();
        while inner.spare.is_none() && inner.booting && !inner.closed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Taken::Cold;
            }
            inner = self.changed.wait_timeout(inner, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        let Some(spare) = inner.spare.as_ref() else { return Taken::Cold };
        if &spare.ask != ask {
            // Another request's kernel: this one stays for a request it fits.
            return Taken::Cold;
        }
        let Some(spare) = inner.spare.take() else { return Taken::Cold };
        drop(inner);
        let now = World::of(&spare.world.python_version, &spare.world.sys_path, workdir, &ask.env);
        let fresh = spare.kernel.exit_info().is_none()
            && stamp(&ask.python) == spare.python_file
            && now.as_ref() == Some(&spare.world);
        if !fresh {
            spare.discard();
            self.replenish();
            return Taken::Cold;
        }
        let _ = std::fs::remove_file(spare.runtime_dir.join(SPARE));
        Taken::Spare(Box::new(spare))
    }
}

impl Spare {
    /// Kills it and removes its directory.
    pub fn discard(self) {
        let dir = self.runtime_dir.clone();
        drop(self);
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Asks for the next spare when dropped: when a verification is over, however it ends.
pub(crate) struct Replenish(pub Arc<SpareKernel>);

impl Drop for Replenish {
    fn drop(&mut self) {
        self.0.replenish();
    }
}

/// How long a verification waits for a spare that is booting: as long as a cold start may take.
pub(crate) const BOOTING_WAIT: Duration = Duration::from_secs(60);

impl World {
    /// Computed as the bootstrap computes it (Python version and the distribution folders on
    /// `sys.path`, a relative entry taken from `workdir`), and the kernel plugins' names and
    /// bytes, found as the bootstrap finds them from the kernel's environment.
    fn of(version: &str, sys_path: &[String], workdir: &Path, env: &[(String, String)]) -> Option<World> {
        let mut dists = std::collections::BTreeSet::new();
        for p in sys_path.iter().filter(|p| !p.is_empty()) {
            let dir = workdir.join(p);
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.ends_with(".dist-info") || name.ends_with(".egg-info") {
                    dists.insert(name);
                }
            }
        }
        let text = std::iter::once(version.to_string()).chain(dists).collect::<Vec<_>>().join("\n");
        Some(World {
            environment_sha256: sha256_hex(text.as_bytes()),
            python_version: version.to_string(),
            sys_path: sys_path.to_vec(),
            plugins_sha256: plugins_sha256(env)?,
        })
    }
}

/// The kernel plugins (`<config>/kernel/*.py`, hidden files excluded as Python's glob excludes
/// them): their names and bytes.
fn plugins_sha256(env: &[(String, String)]) -> Option<String> {
    let var = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).filter(|v| !v.is_empty());
    let base = match (var("CAIRN_CONFIG"), var("XDG_CONFIG_HOME"), var("HOME")) {
        (Some(c), _, _) => PathBuf::from(c),
        (None, Some(x), _) => Path::new(&x).join("cairn"),
        (None, None, Some(h)) => Path::new(&h).join(".config").join("cairn"),
        (None, None, None) => return Some(sha256_hex(b"")),
    };
    let mut names: Vec<PathBuf> =
        std::fs::read_dir(base.join("kernel")).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    names.retain(|p| {
        let n = p.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        n.ends_with(".py") && !n.starts_with('.')
    });
    names.sort();
    let mut bytes = Vec::new();
    for p in names {
        bytes.extend_from_slice(p.as_os_str().as_encoded_bytes());
        bytes.push(0);
        bytes.extend_from_slice(&std::fs::read(&p).ok()?);
        bytes.push(0);
    }
    Some(sha256_hex(&bytes))
}

impl Engine {
    /// Boots a spare: the interpreter a verification without `--python` would use (never
    /// created here), the kernel environment, its world probed by a separate interpreter run so
    /// the kernel itself runs nothing.
    fn boot_spare(&self, python: Option<&Path>) -> Result<Spare, String> {
        let python = match python {
            Some(p) if p.exists() => p.to_path_buf(),
            Some(p) => return Err(format!("{} does not exist", p.display())),
            None => {
                let venv = self.state.path().join("python");
                let py = venv.join("bin").join("python");
                let ready = std::fs::read_to_string(venv.join(".cairn-ready"))
                    .is_ok_and(|pin| pin.trim() == super::IPYKERNEL_PIN);
                if !(ready && py.exists()) {
                    return Err("no kernel interpreter yet: the first verification creates Cairn's venv".into());
                }
                py
            }
        };
        let env = kernel_env();
        let id = format!("ver_{}", self.ids.run_suffix());
        let kernels = self.state.path().join("kernels");
        let runtime_dir = kernels.join(&id);
        let me = this_process();
        let mut record = SpareRecord {
            owner_pid: me.pid,
            owner_start_time: me.start_time,
            kernel_pid: None,
            kernel_start_time: None,
        };
        // The directory appears with its record in it: made under a name that says whose it is,
        // then renamed, so a crash leaves nothing the reaper cannot attribute.
        let staging = kernels.join(format!("{STAGING}{}-{}-{id}", me.pid, me.start_time));
        let staged = std::fs::create_dir_all(&staging)
            .and_then(|_| record.write(&staging))
            .and_then(|_| std::fs::rename(&staging, &runtime_dir));
        if let Err(e) = staged {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(format!("cannot create {}: {e}", runtime_dir.display()));
        }
        let fail = |message: String| {
            let _ = std::fs::remove_dir_all(&runtime_dir);
            message
        };
        let python_file = stamp(&python);
        let (version, sys_path) = probe(&python, &env, &runtime_dir).map_err(fail)?;
        let world = World::of(&version, &sys_path, &runtime_dir, &env)
            .ok_or_else(|| fail("a kernel plugin could not be read".into()))?;
        let mut cfg = KernelConfig::new(&python, &runtime_dir, &runtime_dir);
        cfg.env = env.clone();
        let kernel = ScratchKernel::start(&cfg).map_err(|e| fail(format!("failed to start the kernel: {e}")))?;
        record.kernel_pid = Some(kernel.pid());
        record.kernel_start_time = cairn_exec::process_start_time(kernel.pid());
        // Dropped (killed) on failure: a spare is only kept with its record.
        record.write(&runtime_dir).map_err(|e| fail(format!("cannot write {SPARE}: {e}")))?;
        Ok(Spare {
            kernel,
            id,
            runtime_dir,
            ask: KernelAsk { python, env, memory_limit: None },
            python_file,
            world,
            ready_at: Instant::now(),
        })
    }

    /// Stops the spares of daemons that died (kill -9) and removes their directories.
    pub(crate) fn reap_orphan_spares(&self) {
        let Ok(dir) = std::fs::read_dir(self.state.path().join("kernels")) else { return };
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(rest) = name.strip_prefix(STAGING) {
                let mut parts = rest.splitn(3, '-');
                let owner = (parts.next().and_then(|p| p.parse().ok()), parts.next().and_then(|s| s.parse().ok()));
                if let (Some(pid), Some(start_time)) = owner
                    && !is_alive(&Owner { pid, start_time })
                {
                    let _ = std::fs::remove_dir_all(e.path());
                }
                continue;
            }
            let Ok(bytes) = std::fs::read(e.path().join(SPARE)) else { continue };
            let Ok(r) = serde_json::from_slice::<SpareRecord>(&bytes) else { continue };
            if is_alive(&Owner { pid: r.owner_pid, start_time: r.owner_start_time }) {
                continue;
            }
            let kernels = match (r.kernel_pid, r.kernel_start_time) {
                (Some(pid), start_time @ Some(_)) => vec![ProcessIdentity { pid, pgid: pid, start_time }],
                // Killed while its kernel started: found by its connection file, which is in this
                // directory and no other process's arguments.
                _ => cairn_exec::leaders_naming(&e.path().join("kernel-")),
            };
            for kernel in &kernels {
                cairn_exec::terminate_if_same(kernel, INTERRUPT_GRACE);
            }
            let _ = std::fs::remove_dir_all(e.path());
        }
    }

    /// The daemon's spare, when it keeps one.
    pub fn spare_kernel(&self) -> Option<&Arc<SpareKernel>> {
        self.spare.get()
    }
}

/// The interpreter's version and `sys.path` with the kernel's environment and working directory.
fn probe(python: &Path, env: &[(String, String)], cwd: &Path) -> Result<(String, Vec<String>), String> {
    let out = std::process::Command::new(python)
        .args(["-c", "import json, platform, sys; print(json.dumps([platform.python_version(), sys.path]))"])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !out.status.success() {
        return Err(format!("{} failed ({}) reporting its sys.path", python.display(), out.status));
    }
    serde_json::from_slice::<(String, Vec<String>)>(&out.stdout)
        .map_err(|e| format!("{} reported its sys.path unreadably: {e}", python.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_hash_is_the_bootstraps() {
        // The bootstrap: sha256("\n".join([version] + sorted dist folder names)).
        let dir = tempfile::tempdir().unwrap();
        for n in ["b-2.0.dist-info", "a-1.0.dist-info", "c.egg-info", "not-a-dist"] {
            std::fs::create_dir(dir.path().join(n)).unwrap();
        }
        let path = vec![String::new(), dir.path().display().to_string(), "/nonexistent".into()];
        let w = World::of("3.11.7", &path, dir.path(), &[]).unwrap();
        assert_eq!(w.environment_sha256, sha256_hex(b"3.11.7\na-1.0.dist-info\nb-2.0.dist-info\nc.egg-info"));
    }

    #[test]
    fn plugins_are_found_as_the_bootstrap_finds_them() {
        let dir = tempfile::tempdir().unwrap();
        let env = vec![("CAIRN_CONFIG".to_string(), dir.path().display().to_string())];
        let none = plugins_sha256(&env).unwrap();
        std::fs::create_dir(dir.path().join("kernel")).unwrap();
        std::fs::write(dir.path().join("kernel").join(".hidden.py"), "x = 1").unwrap();
        std::fs::write(dir.path().join("kernel").join("notes.txt"), "x").unwrap();
        assert_eq!(plugins_sha256(&env).unwrap(), none, "hidden and non-.py files are not plugins");
        std::fs::write(dir.path().join("kernel").join("a.py"), "x = 1").unwrap();
        let one = plugins_sha256(&env).unwrap();
        assert_ne!(one, none);
        std::fs::write(dir.path().join("kernel").join("a.py"), "x = 2").unwrap();
        assert_ne!(plugins_sha256(&env).unwrap(), one, "a plugin's bytes count");
    }
}
