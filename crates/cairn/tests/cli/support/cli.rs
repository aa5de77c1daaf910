//! The driver of the real binary: [`Cairn`], a private state root and scratch directory per test,
//! and the checks of the CLI's `--json` contract on what each call printed.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

use super::{DaemonInfo, alive, ci, daemon_info, read_token, wait_until};

/// No single CLI call in these tests should take anywhere near this long; it only stops a hang.
pub const CMD_TIMEOUT: Duration = Duration::from_secs(60);

/// What one CLI call did.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    /// The one JSON object on stdout, or `Null` when stdout was empty (an error exit) or was not
    /// read as JSON ([`Cairn::raw`]).
    pub json: Value,
    pub stdout: String,
    pub stderr: String,
    /// From the start of the call to its end.
    pub elapsed: Duration,
}

impl Out {
    /// What the finished call `what` printed, its stdout not parsed.
    #[track_caller]
    pub fn of(out: Output, what: &str, elapsed: Duration) -> Out {
        let code = out.status.code().unwrap_or_else(|| panic!("`cairn {what}` died by a signal: {:?}", out.status));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        Out { code, json: Value::Null, stdout, stderr, elapsed }
    }

    /// The same, with the `--json` contract checked on its stdout.
    #[track_caller]
    pub fn of_json(out: Output, what: &str, elapsed: Duration) -> Out {
        let mut out = Out::of(out, what, elapsed);
        out.json = parse_stdout(&out.stdout, out.code, what);
        out
    }

    /// Panics with everything the call printed unless it exited with `code`.
    #[track_caller]
    pub fn expect(self, code: i32) -> Out {
        assert_eq!(self.code, code, "unexpected exit code\nstdout: {}\nstderr: {}", self.stdout, self.stderr);
        self
    }

    /// The step view named `id` in a run object.
    #[track_caller]
    pub fn step(&self, id: &str) -> &Value {
        step(&self.json, id)
    }
}

/// Checks the `--json` contract on one call's stdout: exactly one JSON object (nothing else), a
/// failure's being the error body `{"error": {"code", "message"}}`. Only a process killed by a
/// signal (no exit code of its own) may have printed nothing.
#[track_caller]
pub fn parse_stdout(stdout: &str, code: i32, what: &str) -> Value {
    if stdout.trim().is_empty() {
        assert!(
            !matches!(code, 0..=5 | 130),
            "`{what}` exited {code} but printed nothing on stdout; --json must print one JSON object"
        );
        return Value::Null;
    }
    let mut values = serde_json::Deserializer::from_str(stdout).into_iter::<Value>();
    let first = match values.next() {
        Some(Ok(v)) => v,
        other => panic!("`{what}`: stdout is not JSON ({other:?}):\n{stdout}"),
    };
    assert!(values.next().is_none(), "`{what}`: stdout holds more than one JSON value:\n{stdout}");
    assert!(first.is_object(), "`{what}`: stdout is JSON but not an object:\n{stdout}");
    if matches!(code, 2 | 4 | 5 | 130) && first.get("error").is_some_and(Value::is_object) {
        assert_error_body(&first, what);
    }
    first
}

/// A failure's `--json` object: `{"error": {"code", "message"}}` and nothing else, both words.
#[track_caller]
pub fn assert_error_body(v: &Value, what: &str) {
    let keys: Vec<&String> = v.as_object().map(|o| o.keys().collect()).unwrap_or_default();
    assert_eq!(keys, ["error"], "`{what}`: a failure's object holds only `error`: {v}");
    for field in ["code", "message"] {
        assert!(
            v["error"][field].as_str().is_some_and(|s| !s.trim().is_empty()),
            "`{what}`: the error's `{field}` is empty: {v}"
        );
    }
}

/// The step view named `id` in a run object (`run`/`show` JSON).
#[track_caller]
pub fn step<'a>(run: &'a Value, id: &str) -> &'a Value {
    run["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("no steps in {run:#}"))
        .iter()
        .find(|s| s["step_id"] == id)
        .unwrap_or_else(|| panic!("no step `{id}` in {run:#}"))
}

/// A JSON string's text.
#[track_caller]
pub fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

/// A JSON array of strings, as strings.
#[track_caller]
pub fn strs(v: &Value) -> Vec<String> {
    v.as_array().unwrap_or_else(|| panic!("not an array: {v}")).iter().map(|s| str_of(s).to_string()).collect()
}

/// The same strings, owned (to compare with [`strs`]).
pub fn owned(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The fields of a run object the CLI contract fixes (`run`, `show` and an idempotent rerun must
/// agree on these; other fields may be added by newer versions).
const RUN_FIELDS: [&str; 10] =
    ["run_id", "workflow", "version", "status", "steps", "findings", "error", "run_dir", "created_at", "finished_at"];

/// A run object reduced to [`RUN_FIELDS`].
pub fn contract(run: &Value) -> Value {
    Value::Object(RUN_FIELDS.iter().map(|k| (k.to_string(), run.get(*k).cloned().unwrap_or(Value::Null))).collect())
}

/// The kinds of a run's events, in order.
pub fn kinds(events: &[Value]) -> Vec<String> {
    events.iter().map(|e| e["kind"].as_str().unwrap().to_string()).collect()
}

/// Events of `kind` (optionally for `step`).
pub fn events_of<'a>(events: &'a [Value], kind: &str, step: Option<&str>) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind && step.is_none_or(|s| e["step_id"] == s)).collect()
}

/// The argv of `cairn execute-plan` approving `plan` (a plan object) exactly as it was shown.
pub fn approval(plan: &Value) -> Vec<String> {
    [
        "execute-plan",
        str_of(&plan["plan_name"]),
        "--id",
        str_of(&plan["plan_id"]),
        "--checksum",
        str_of(&plan["plan_checksum"]),
    ]
    .into_iter()
    .map(String::from)
    .collect()
}

/// Numbers input files. One counter for the whole binary is enough: each test has its own
/// scratch directory, and a name is never reused within one.
static INPUTS: AtomicUsize = AtomicUsize::new(0);

/// A private state root and a scratch directory for one test.
pub struct Cairn {
    pub home: TempDir,
    pub work: TempDir,
    /// Set for every command of this state root (see [`Cairn::with_env`]).
    env: Vec<(OsString, OsString)>,
    /// The PostgreSQL schema the state root's registry is in, if it is not the SQLite file.
    db: Option<cairn_store::testing::TestSchema>,
}

impl Cairn {
    pub fn new() -> Cairn {
        Cairn {
            home: tempfile::Builder::new().prefix("cairn-home-").tempdir().unwrap(),
            work: tempfile::Builder::new().prefix("cairn-work-").tempdir().unwrap(),
            env: Vec::new(),
            db: None,
        }
    }

    /// A private state root whose registry is on `kind`: the SQLite file, or a schema of its own
    /// in the PostgreSQL test database, recorded as a user does it (`cairn daemon start
    /// --database URL`, then `cairn daemon stop`). `None` where there is no PostgreSQL test server
    /// (outside CI only).
    pub fn on(kind: cairn_store::testing::Kind) -> Option<Cairn> {
        let mut c = Cairn::new();
        if let cairn_store::testing::TestDatabase::Postgres(schema) = kind.database()? {
            c.raw(&["daemon", "start", "--database", &schema.url]).expect(0);
            c.raw(&["daemon", "stop"]).expect(0);
            c.db = Some(schema);
        }
        Some(c)
    }

    /// The PostgreSQL schema of the state root's registry, if it is in PostgreSQL.
    pub fn database(&self) -> Option<&cairn_store::testing::TestSchema> {
        self.db.as_ref()
    }

    /// Every command of this state root gets `key=value` too (a PATH, the kernel's python, …).
    pub fn with_env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Cairn {
        self.env.push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Every command of this state root, and the daemon one starts, runs kernels with the test
    /// venv's `python`, reads the empty folder `config` as `CAIRN_CONFIG` (so no kernel plugin of
    /// the machine's user is loaded), and starts a daemon quietly. The daemon keeps no spare
    /// kernel: these tests count the kernels a session or a verification leaves, and a spare is
    /// one the daemon keeps on purpose (its own tests are in `verify.rs`, "the daemon's spare").
    pub fn with_kernel(self, python: impl AsRef<OsStr>, config: impl AsRef<OsStr>) -> Cairn {
        self.with_env("CAIRN_PYTHON", python)
            .with_env("CAIRN_CONFIG", config)
            .with_env("CAIRN_QUIET_DAEMON", "1")
            .with_env("CAIRN_NO_SPARE_KERNEL", "1")
    }

    pub fn bin() -> PathBuf {
        assert_cmd::cargo::cargo_bin("cairn")
    }

    /// The state root as the binary reports it (canonical).
    pub fn home(&self) -> PathBuf {
        self.home.path().canonicalize().unwrap()
    }

    /// A path in the scratch directory.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.work.path().join(rel)
    }

    /// A path in the scratch directory, as a string (for run inputs).
    pub fn path_str(&self, rel: &str) -> String {
        self.path(rel).display().to_string()
    }

    /// `cairn ARGS` with this state root, run in the scratch directory, its stdio left to the
    /// caller (for a command the test starts in its own way).
    pub fn std_command<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut c = Command::new(Self::bin());
        c.env("CAIRN_HOME", self.home.path()).env_remove("XDG_STATE_HOME").current_dir(self.work.path()).args(args);
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    /// The command, ready to run.
    pub fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> assert_cmd::Command {
        let mut c = assert_cmd::Command::from_std(self.std_command(args));
        c.timeout(CMD_TIMEOUT);
        c
    }

    /// Runs `cairn ARGS` and returns its raw output.
    pub fn cmd(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs `cairn ARGS` as given (no `--json` added, stdout not parsed).
    #[track_caller]
    pub fn raw(&self, args: &[&str]) -> Out {
        let started = Instant::now();
        let out = self.cmd(args);
        Out::of(out, &args.join(" "), started.elapsed())
    }

    /// Runs `cairn ARGS --json` and checks the `--json` contract.
    #[track_caller]
    pub fn json(&self, args: &[&str]) -> Out {
        let mut all: Vec<&str> = args.to_vec();
        all.push("--json");
        let started = Instant::now();
        let out = self.cmd(&all);
        Out::of_json(out, &all.join(" "), started.elapsed())
    }

    /// `cairn workflow add DIR --json`, expecting success.
    #[track_caller]
    pub fn add(&self, dir: &Path) -> Value {
        self.json(&["workflow", "add", dir.to_str().unwrap()]).expect(0).json
    }

    /// Writes a run input file in the scratch directory.
    pub fn input(&self, input: &Value) -> PathBuf {
        let n = INPUTS.fetch_add(1, Ordering::SeqCst);
        let path = self.path(&format!("input-{n}.json"));
        std::fs::write(&path, serde_json::to_vec(input).unwrap()).unwrap();
        path
    }

    /// The argv of `cairn run WF --input FILE EXTRA…` (without `--json`).
    pub fn run_args(&self, workflow: &str, input: &Value, extra: &[&str]) -> Vec<String> {
        let file = self.input(input);
        let mut args = vec!["run".to_string(), workflow.to_string(), "--input".into(), file.display().to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    /// `cairn run WF --input <input> EXTRA… --json`.
    pub fn run(&self, workflow: &str, input: &Value, extra: &[&str]) -> Out {
        let args = self.run_args(workflow, input, extra);
        self.json(&args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// `cairn plan WORKFLOW --input INPUT --target TARGET --run-dir RUN_DIR --name NAME --json`.
    pub fn plan(&self, workflow: &str, input: &Path, target: &str, run_dir: &Path, name: &str) -> Out {
        self.json(&[
            "plan",
            workflow,
            "--input",
            input.to_str().unwrap(),
            "--target",
            target,
            "--run-dir",
            run_dir.to_str().unwrap(),
            "--name",
            name,
        ])
    }

    /// `cairn show RUN --json`, expecting success.
    #[track_caller]
    pub fn show(&self, run_id: &str) -> Value {
        self.json(&["show", run_id]).expect(0).json
    }

    /// `cairn events RUN --json` → the events.
    #[track_caller]
    pub fn events(&self, run_id: &str) -> Vec<Value> {
        let v = self.json(&["events", run_id]).expect(0).json;
        assert_eq!(v["run_id"], run_id);
        v["events"].as_array().unwrap().clone()
    }

    /// `cairn runs --json` → the runs.
    #[track_caller]
    pub fn runs(&self) -> Vec<Value> {
        self.json(&["runs"]).expect(0).json["runs"].as_array().unwrap().clone()
    }

    /// Starts `cairn ARGS` in the background (stdout and stderr piped).
    pub fn spawn<S: AsRef<OsStr>>(&self, args: &[S]) -> Child {
        self.std_command(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
    }

    /// Polls `cairn events RUN` until an event satisfies `pred`; panics after `timeout`.
    #[track_caller]
    pub fn wait_for_event(&self, run_id: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            // The run may not exist yet (exit 2) right after a spawn.
            let out = self.json(&["events", run_id]);
            if out.code == 0
                && let Some(e) = out.json["events"].as_array().unwrap().iter().find(|e| pred(e))
            {
                return e.clone();
            }
            assert!(Instant::now() < deadline, "timed out waiting for an event of run {run_id}: {}", out.stdout);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The snapshot folder of a registered workflow: `$CAIRN_HOME/registry/<digest>`.
    #[track_caller]
    pub fn snapshot(&self, reference: &str) -> PathBuf {
        let wf = self.json(&["workflow", "show", reference]).expect(0).json;
        let digest = wf["digest"].as_str().unwrap();
        let dir = self.home().join("registry").join(digest);
        assert!(dir.join("workflow.toml").is_file(), "no snapshot at {}", dir.display());
        dir
    }

    /// Entries of a directory under the state root (sorted; empty when it does not exist).
    pub fn entries(&self, rel: &str) -> Vec<String> {
        match std::fs::read_dir(self.home().join(rel)) {
            Ok(rd) => {
                let mut v: Vec<String> = rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
                v.sort();
                v
            }
            Err(_) => Vec::new(),
        }
    }

    /// `sqlite3 -readonly FLAGS… $CAIRN_HOME/cairn.db QUERY`: what it printed. `None` when the
    /// sqlite3 CLI is not installed, which fails the test under CI instead (scripts/test.sh
    /// installs it).
    #[track_caller]
    pub fn sql(&self, flags: &[&str], query: &str) -> Option<String> {
        let db = self.home().join("cairn.db");
        let out = match Command::new("sqlite3").arg("-readonly").args(flags).arg(&db).arg(query).output() {
            Ok(out) => out,
            Err(e) if ci() => panic!("sqlite3 is required in CI: {e}"),
            Err(_) => return None,
        };
        assert!(out.status.success(), "sqlite3 {query}: {}", String::from_utf8_lossy(&out.stderr));
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    // ---------------------------------------------------------------------------- the daemon

    /// `cairn daemon start --json`, expecting success; returns the running daemon.
    #[track_caller]
    pub fn start_daemon(&self) -> DaemonInfo {
        let out = self.json(&["daemon", "start"]).expect(0);
        assert_eq!(out.json["running"], true, "{}", out.stdout);
        self.daemon()
    }

    /// The running daemon, from `<state>/daemon.json`.
    #[track_caller]
    pub fn daemon(&self) -> DaemonInfo {
        daemon_info(&self.home())
    }

    /// `cairn daemon stop`, expecting success.
    pub fn stop_daemon(&self) {
        self.json(&["daemon", "stop"]).expect(0);
    }

    /// `cairn daemon stop`, expecting success, and the daemon's process gone within `grace`.
    #[track_caller]
    pub fn stop_daemon_within(&self, grace: Duration) {
        let pid = self.daemon().pid;
        self.stop_daemon();
        assert!(wait_until(grace, || !alive(pid)), "the daemon (pid {pid}) outlived `daemon stop`");
    }

    /// The token of `role` (`viewer` or `operator`).
    #[track_caller]
    pub fn token(&self, role: &str) -> String {
        read_token(&self.home(), role)
    }

    /// The last lines of the daemon's log, for failure messages.
    pub fn daemon_log(&self) -> String {
        let text = std::fs::read_to_string(self.home.path().join("daemon.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Polls `cairn show RUN` until the run has `status`; returns the run.
    #[track_caller]
    pub fn wait_for_status(&self, run_id: &str, status: &str, timeout: Duration) -> Value {
        let mut last = Value::Null;
        let reached = wait_until(timeout, || {
            let out = self.json(&["show", run_id]);
            last = out.json;
            out.code == 0 && last["status"] == status
        });
        assert!(
            reached,
            "run {run_id} did not become {status} within {timeout:?}: {last:#}\ndaemon log:\n{}",
            self.daemon_log()
        );
        last
    }
}
