//! Shared helpers for the boundary tests: every test drives the real `cairn` binary through its
//! CLI contract, with its own `CAIRN_HOME` and its own workflow folders in a temporary directory.
//!
//! Style: a test builds a [`Cairn`] (a private state root plus a scratch directory), writes small
//! workflow folders with [`write_workflow`], registers them with [`Cairn::add`], and runs them with
//! [`Cairn::run`]. Every command goes through [`Cairn::json`], which checks the `--json` contract
//! (stdout holds exactly one JSON object) and returns the exit code, the object and stderr.
//!
//! Tools are instances of one small Python script, [`TOOL_PY`], whose behaviour per attempt is
//! chosen by its arguments (a `plan`), and which appends what it does to a log file whose absolute
//! path comes in the run input: the log is how tests count executions.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

/// No single CLI call in these tests should take anywhere near this long; it only stops a hang.
pub const CMD_TIMEOUT: Duration = Duration::from_secs(60);

/// The generic tool. It reads its arguments (canonical JSON) from stdin and acts on
/// `plan[attempt - 1]` (the last entry repeats):
///
/// * `ok`                  print the result: `args.result` if given, else `{step, attempt, pid}`
/// * `exit:N`              exit with code N, printing nothing
/// * `badjson`             print text that is not JSON, exit 0
/// * `empty`               print nothing, exit 0
/// * `sleep:S`             sleep S seconds, then behave as `ok`
/// * `sleep_if_flag:S`     sleep S seconds only while the file `args.flag` exists, then `ok`
/// * `wait`                wait (at most 30 s) until the file `args.release` exists, then `ok`
/// * `big`                 write 100 MB to stdout
///
/// Log lines (to `args.log`, when given): `<step>:start:<attempt>:<pid>` first, and
/// `<step>:end:<attempt>` right before printing a result.
pub const TOOL_PY: &str = r#"import json, os, sys, time
raw = sys.stdin.read()
args = json.loads(raw) if raw.strip() else {}
step = os.environ.get("CAIRN_STEP_ID", "?")
attempt = int(os.environ.get("CAIRN_ATTEMPT", "0"))
log = args.get("log")

def note(line):
    if log:
        with open(log, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

note("%s:start:%d:%d" % (step, attempt, os.getpid()))
plan = args.get("plan") or ["ok"]
mode = plan[min(max(attempt, 1), len(plan)) - 1]
kind, _, param = mode.partition(":")

def done(result=None):
    note("%s:end:%d" % (step, attempt))
    if result is None:
        result = args.get("result", {"step": step, "attempt": attempt, "pid": os.getpid()})
    sys.stdout.write(json.dumps(result))
    sys.stdout.flush()
    sys.exit(0)

if kind == "ok":
    done()
elif kind == "exit":
    sys.exit(int(param))
elif kind == "badjson":
    note("%s:end:%d" % (step, attempt))
    print("this is { not json")
    sys.exit(0)
elif kind == "empty":
    note("%s:end:%d" % (step, attempt))
    sys.exit(0)
elif kind == "sleep":
    time.sleep(float(param))
    done()
elif kind == "sleep_if_flag":
    if os.path.exists(args["flag"]):
        time.sleep(float(param))
    done()
elif kind == "wait":
    deadline = time.time() + 30
    while not os.path.exists(args["release"]) and time.time() < deadline:
        time.sleep(0.05)
    done()
elif kind == "big":
    chunk = b"x" * (1 << 20)
    for _ in range(100):
        sys.stdout.buffer.write(chunk)
    sys.stdout.flush()
    sys.exit(0)
else:
    sys.stderr.write("unknown mode %r\n" % mode)
    sys.exit(2)
"#;

/// A `[tools.NAME]` table running [`TOOL_PY`] (written as `tools/tool.py` by [`tool_files`]).
pub fn tool_toml(name: &str, extra: &str) -> String {
    format!("[tools.{name}]\ncommand = [\"python3\", \"tools/tool.py\"]\n{extra}\n")
}

/// The files every workflow built on [`TOOL_PY`] needs.
pub fn tool_files() -> Vec<(&'static str, &'static str)> {
    vec![("tools/tool.py", TOOL_PY)]
}

/// Writes a workflow folder: `workflow.toml` plus `files` (relative paths, parents created,
/// mode 0755 so shell tools can be run directly).
pub fn write_workflow(dir: &Path, toml: &str, files: &[(&str, &str)]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("workflow.toml"), toml).unwrap();
    for (name, content) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir.to_path_buf()
}

/// What one CLI call did.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    /// The one JSON object on stdout, or `Null` when stdout was empty (an error exit).
    pub json: Value,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
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

/// What `cairn ARGS --json` printed, with the `--json` contract checked.
#[track_caller]
pub fn out_of(out: Output, args: &[&str]) -> Out {
    let code = out.status.code().unwrap_or_else(|| panic!("`cairn {args:?}` died by a signal"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = parse_stdout(&stdout, code, &args.join(" "));
    Out { code, json, stdout, stderr }
}

/// Checks the `--json` contract on one call's stdout: exactly one JSON object (nothing else), or
/// nothing at all when the command failed before producing a result.
#[track_caller]
pub fn parse_stdout(stdout: &str, code: i32, what: &str) -> Value {
    if stdout.trim().is_empty() {
        assert!(
            code == 2 || code == 4,
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
    first
}

static INPUTS: AtomicUsize = AtomicUsize::new(0);

/// A private state root and a scratch directory for one test.
pub struct Cairn {
    pub home: TempDir,
    pub work: TempDir,
    /// Set for every command of this state root (see [`Cairn::with_env`]).
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
}

impl Default for Cairn {
    fn default() -> Self {
        Self::new()
    }
}

impl Cairn {
    pub fn new() -> Cairn {
        Cairn {
            home: tempfile::Builder::new().prefix("cairn-home-").tempdir().unwrap(),
            work: tempfile::Builder::new().prefix("cairn-work-").tempdir().unwrap(),
            env: Vec::new(),
        }
    }

    /// Every command of this state root gets `key=value` too (a PATH, the kernel's python, …).
    pub fn with_env(mut self, key: impl AsRef<std::ffi::OsStr>, value: impl AsRef<std::ffi::OsStr>) -> Cairn {
        self.env.push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
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

    fn std_command(&self, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new(Self::bin());
        c.env("CAIRN_HOME", self.home.path()).env_remove("XDG_STATE_HOME").current_dir(self.work.path()).args(args);
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    /// The command, ready to run.
    pub fn command(&self, args: &[&str]) -> assert_cmd::Command {
        let mut c = assert_cmd::Command::from_std(self.std_command(args));
        c.timeout(CMD_TIMEOUT);
        c
    }

    /// Runs `cairn ARGS` and returns its raw output.
    pub fn cmd(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs `cairn ARGS --json` and checks the `--json` contract.
    pub fn json(&self, args: &[&str]) -> Out {
        let mut all: Vec<&str> = args.to_vec();
        all.push("--json");
        out_of(self.cmd(&all), &all)
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
    pub fn spawn(&self, args: &[String]) -> Child {
        self.std_command(&args.iter().map(String::as_str).collect::<Vec<_>>())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
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

    /// Entries of a directory under the state root (empty when it does not exist).
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
}

/// The fields of a run object the CLI contract fixes (`run`, `show` and an idempotent rerun must
/// agree on these; other fields may be added by newer versions).
pub const RUN_FIELDS: [&str; 10] =
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

/// The lines of a tool log (empty when the file does not exist yet).
pub fn log_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).map(|s| s.lines().map(str::to_string).collect()).unwrap_or_default()
}

/// How many log lines start with `prefix`.
pub fn count(lines: &[String], prefix: &str) -> usize {
    lines.iter().filter(|l| l.starts_with(prefix)).count()
}

/// Waits until `f` holds, polling; false after `timeout`.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Whether a process is alive (a zombie counts as dead: it runs nothing and only awaits reaping).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X") | None)
        }
        Err(_) => false,
    }
}

/// The pid a tool logged in its `<step>:start:<attempt>:<pid>` line.
pub fn logged_pid(lines: &[String], step: &str, attempt: u32) -> Option<i32> {
    let prefix = format!("{step}:start:{attempt}:");
    lines.iter().find_map(|l| l.strip_prefix(&prefix).and_then(|p| p.parse().ok()))
}

/// SIGKILLs a process group left behind by a test (best effort; used for cleanup only).
pub fn kill_group(pid: i32) {
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
}

/// Appends text to a file.
pub fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// What `<state>/daemon.json` says about the running daemon.
#[derive(Debug, Clone)]
pub struct DaemonInfo {
    pub pid: i32,
    pub url: String,
}

/// An HTTP answer: status, headers we look at, and the body (JSON when it parses, else a string).
#[derive(Debug, Clone)]
pub struct Http {
    pub status: u16,
    pub content_type: String,
    pub body: Value,
    pub text: String,
}

impl Cairn {
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

    /// The token of `role` (`viewer` or `operator`).
    #[track_caller]
    pub fn token(&self, role: &str) -> String {
        read_token(&self.home(), role)
    }
}

/// The running daemon of the state root `home`, from its `daemon.json`.
#[track_caller]
pub fn daemon_info(home: &Path) -> DaemonInfo {
    let text = std::fs::read_to_string(home.join("daemon.json")).expect("daemon.json (is the daemon running?)");
    let v: Value = serde_json::from_str(&text).unwrap();
    DaemonInfo { pid: v["pid"].as_i64().unwrap() as i32, url: v["url"].as_str().unwrap().to_string() }
}

/// The token of `role` (`viewer` or `operator`) of the state root `home`.
#[track_caller]
pub fn read_token(home: &Path, role: &str) -> String {
    std::fs::read_to_string(home.join("auth").join(format!("{role}.token"))).unwrap().trim().to_string()
}

/// One HTTP request to the daemon. `headers` are sent as given (use it for a `Host` override).
pub fn http(method: &str, url: &str, token: Option<&str>, body: Option<&str>, headers: &[(&str, &str)]) -> Http {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut req = ureq::http::Request::builder().method(method).uri(url);
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    if body.is_some() {
        req = req.header("Content-Type", "application/json");
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(body.unwrap_or("").to_string()).unwrap();
    let mut resp = agent.run(req).unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = resp.status().as_u16();
    let content_type = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let text = resp.body_mut().with_config().limit(64 << 20).read_to_string().unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.clone()));
    Http { status, content_type, body, text }
}

// ------------------------------------------------------------------ the chain workflow of the crash tests

/// A chain a → b → c over the generic tool; each step's behaviour comes from `input.plans.<id>`.
pub fn chain_workflow(c: &Cairn, name: &str) {
    let toml = format!(
        r#"
[workflow]
name = "{name}"
version = "1.0.0"

{}
[[steps]]
id = "a"
tool = "t"
args = {{ plan = "${{input.plans.a}}", log = "${{input.log}}", release = "${{input.release}}" }}

[[steps]]
id = "b"
tool = "t"
needs = ["a"]
args = {{ plan = "${{input.plans.b}}", log = "${{input.log}}", release = "${{input.release}}", after = "${{steps.a.result.step}}" }}

[[steps]]
id = "c"
tool = "t"
needs = ["b"]
args = {{ plan = "${{input.plans.c}}", log = "${{input.log}}", release = "${{input.release}}", after = "${{steps.b.result.step}}" }}

[[validator.rules]]
id = "c-ran-after-b"
step = "c"
pointer = "/step"
op = "eq"
value = "c"
finding = "c did not run"
"#,
        tool_toml("t", "")
    );
    c.add(&write_workflow(&c.path(name), &toml, &tool_files()));
}

pub fn chain_input(c: &Cairn, plans: Value) -> Value {
    serde_json::json!({"plans": plans, "log": c.path_str("log"), "release": c.path_str("release")})
}

/// Kills the given cairn process with SIGKILL and reaps it.
pub fn kill9(child: &mut std::process::Child) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "{status:?}");
}

/// Waits until the tool of `step` attempt `attempt` has logged its start; returns its pid.
#[track_caller]
pub fn wait_for_tool(log: &std::path::Path, step: &str, attempt: u32) -> i32 {
    let mut pid = None;
    assert!(
        wait_until(Duration::from_secs(15), || {
            pid = logged_pid(&log_lines(log), step, attempt);
            pid.is_some()
        }),
        "the tool of step {step} attempt {attempt} never started: {:?}",
        log_lines(log)
    );
    pid.unwrap()
}

// ------------------------------------------------------------------ kernel processes

/// Live (non-zombie) processes of a kernel of the state root `home`: a kernel runs
/// `ipykernel_launcher -f $CAIRN_HOME/kernels/<id>/kernel-*.json` with `IPYTHONDIR` under that
/// directory, which what it starts inherits.
pub fn kernel_processes(home: &Path) -> Vec<i32> {
    let mut needles = vec![home.to_string_lossy().into_owned()];
    if let Ok(c) = home.canonicalize() {
        needles.push(c.to_string_lossy().into_owned());
    }
    let me = std::process::id() as i32;
    let mut found = Vec::new();
    let Ok(proc) = std::fs::read_dir("/proc") else { return found };
    for e in proc.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if pid == me || !alive(pid) {
            continue;
        }
        let cmdline = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default())
            .replace('\0', " ");
        let environ =
            String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default()).into_owned();
        let under_home = needles.iter().any(|n| cmdline.contains(n.as_str()));
        let kernel_env = needles.iter().any(|n| environ.contains(&format!("IPYTHONDIR={n}")));
        if under_home && (cmdline.contains("ipykernel_launcher") || cmdline.contains("/kernels/")) || kernel_env {
            found.push(pid);
        }
    }
    found
}

pub fn describe_pid(pid: i32) -> String {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    format!("{pid}: {}", String::from_utf8_lossy(&cmd).replace('\0', " "))
}

/// Whether this is CI (`CI=true`, or `CI=1`): a missing service then fails a test instead of
/// skipping it.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The test sshd's directory (keys, known_hosts), from `CAIRN_TEST_SSHD_DIR` (set by
/// scripts/test.sh) or /tmp/cairn-sshd. Under CI it must exist: a missing service fails.
#[allow(dead_code)]
pub fn sshd() -> Option<PathBuf> {
    let dir = std::env::var_os("CAIRN_TEST_SSHD_DIR").map(PathBuf::from).or_else(|| {
        let d = PathBuf::from("/tmp/cairn-sshd");
        d.join("known_hosts").is_file().then_some(d)
    });
    match dir {
        Some(d) if d.join("id_ed25519").is_file() && d.join("known_hosts").is_file() => Some(d),
        _ if ci() => panic!("no test sshd: run scripts/test.sh (it starts one with scripts/sshd-up.sh)"),
        _ => {
            eprintln!("SKIPPED: no test sshd (run scripts/sshd-up.sh, or scripts/test.sh)");
            None
        }
    }
}

/// The test sshd's port on 127.0.0.1 (`CAIRN_TEST_SSHD_PORT`, default 2222).
pub fn sshd_port() -> String {
    std::env::var("CAIRN_TEST_SSHD_PORT").unwrap_or_else(|_| "2222".into())
}

/// Stops the ssh control connections of a state root (they would linger for ControlPersist).
pub fn close_ssh_masters(c: &Cairn) {
    for e in std::fs::read_dir(c.home().join("ssh")).into_iter().flatten().flatten() {
        let _ = std::process::Command::new("ssh")
            .args(["-o", &format!("ControlPath={}", e.path().display()), "-O", "exit", "x"])
            .stdin(std::process::Stdio::null())
            .output();
    }
}

/// The chain `a → b → c` of the crash tests, resumed after its first `b` attempt was abandoned:
/// `a` and `c` ran once, `b` twice and only its second attempt ended, before `c` started; the
/// events record the one interruption.
#[allow(dead_code)]
#[track_caller]
pub fn assert_b_resumed_once(lines: &[String], events: &[Value]) {
    assert_eq!(count(lines, "a:start:"), 1, "a must not run again: {lines:?}");
    assert_eq!(count(lines, "c:start:"), 1, "c must run once: {lines:?}");
    assert_eq!(count(lines, "b:start:1:"), 1, "{lines:?}");
    assert_eq!(count(lines, "b:start:2:"), 1, "{lines:?}");
    assert_eq!(count(lines, "b:end:2"), 1, "{lines:?}");
    assert_eq!(count(lines, "b:end:1"), 0, "the abandoned attempt must never finish: {lines:?}");
    let pos = |p: &str| lines.iter().position(|l| l.starts_with(p)).unwrap();
    assert!(pos("b:end:2") < pos("c:start:"), "{lines:?}");
    let interrupted = events_of(events, "step.interrupted", Some("b"));
    assert_eq!(interrupted.len(), 1, "{:?}", kinds(events));
    assert_eq!(interrupted[0]["attempt"], 1);
    assert_eq!(interrupted[0]["data"]["next_attempt"], 2);
}
