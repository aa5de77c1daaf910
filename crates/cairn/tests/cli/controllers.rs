//! Pipeline controllers as workflow steps (`kind = "snakemake"` / `kind = "nextflow"` tools),
//! through the CLI contract and against a real Snakemake: a pipeline run with `cairn run`, the same
//! pipeline planned and executed locally and on the SSH target (from the copy deployed into
//! run_dir), cancelled mid-run there and here (SIGINT: snakemake stops its jobs and releases its
//! lock; partial results stay), a failing rule, badly defined tools and steps, Nextflow refused
//! where it is not installed, and a completed controller step never run twice (an idempotent
//! rerun, and a daemon killed mid-pipeline whose successor re-attaches).
//!
//! The workflows are the folders of `tests/fixtures/controllers/`, copied into the test's scratch
//! directory before they are registered. Snakemake comes from the test venv (`$CAIRN_TEST_VENV`,
//! else the workspace's `.venv`): every `cairn` command runs with its `bin` first on PATH, so the
//! daemon it starts, and the controllers the daemon runs, find `snakemake`. The SSH target is the
//! test sshd of `scripts/sshd-up.sh` (`$CAIRN_TEST_SSHD_DIR`), on this machine: the test reads the
//! target's files directly. Under `CI=true` a missing venv, snakemake, sshd or sqlite3 fails the
//! test; elsewhere it is skipped with a note.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/controllers");

/// The name the tests give the SSH target.
const TARGET: &str = "ci";

/// How long a cancelled pipeline may take to be gone, from the `cairn cancel` call: the kill grace
/// is 2 s; the rest is slack for a loaded machine.
const CANCEL_WITHIN: Duration = Duration::from_secs(10);

/// The test venv's `bin` folder, holding `snakemake`. Under CI its absence is a failure.
pub(crate) fn venv_bin() -> Option<PathBuf> {
    let bin = venv_dir().join("bin");
    if bin.join("snakemake").is_file() {
        return Some(bin.canonicalize().unwrap());
    }
    if ci() {
        panic!("no snakemake in {}: run scripts/test.sh (it installs the test venv)", bin.display());
    }
    eprintln!("SKIPPED: no snakemake in {} (run scripts/test.sh)", bin.display());
    None
}

/// Every file under `dir/rel`, as `(path relative to dir, bytes)`, sorted.
pub(crate) fn files_under(dir: &Path, rel: &str) -> Vec<(String, u64)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, u64)>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            if meta.is_dir() {
                walk(root, &e.path(), out);
            } else {
                let rel = e.path().strip_prefix(root).unwrap().display().to_string();
                out.push((rel, meta.len()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &dir.join(rel), &mut out);
    out.sort();
    out
}

/// The files snakemake holds its lock with, in `<run_dir>/.snakemake/locks` (none once released).
pub(crate) fn lock_files(run_dir: &Path) -> Vec<String> {
    match std::fs::read_dir(run_dir.join(".snakemake/locks")) {
        Ok(rd) => rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => Vec::new(),
    }
}

/// `pgrep -f RUN_DIR`: processes whose command line names the run directory (snakemake does).
fn pgrep(run_dir: &Path) -> Vec<i32> {
    let out = Command::new("pgrep").arg("-f").arg("--").arg(run_dir).output().expect("pgrep");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|p| alive(*p))
        .collect()
}

/// Live processes (not this one) whose command line names `dir` or whose working directory is
/// inside it: snakemake, and the shell jobs it runs in run_dir.
pub(crate) fn processes_in(dir: &Path) -> Vec<i32> {
    let needle = dir.display().to_string();
    let mut found = Vec::new();
    for (pid, cmdline) in processes() {
        let in_dir = std::fs::read_link(format!("/proc/{pid}/cwd"))
            .is_ok_and(|cwd| cwd == dir || cwd.starts_with(format!("{needle}/")));
        if cmdline.contains(&needle) || in_dir {
            found.push(pid);
        }
    }
    found
}

/// Whether the process recorded as `(pid, start_time)` (the /proc start time) still runs.
fn same_alive(pid: i64, start_time: i64) -> bool {
    let pid = pid as i32;
    let fields = stat(pid).unwrap_or_default();
    fields.get(19).and_then(|f| f.parse::<i64>().ok()) == Some(start_time) && alive(pid)
}

/// One test's state root, scratch directory and PATH. Dropping it stops the daemon, SIGKILLs
/// whatever still runs in its directories (a passing test leaves nothing) and closes the SSH
/// control connections.
pub(crate) struct Fx {
    pub(crate) c: Cairn,
    /// The scratch directory, canonical (a run_dir's parent must not go through a symlink).
    pub(crate) base: PathBuf,
    /// PATH for every `cairn` command: the test venv's `bin` first.
    pub(crate) path: String,
    spawned: RefCell<Vec<Child>>,
}

impl Drop for Fx {
    fn drop(&mut self) {
        for child in self.spawned.borrow_mut().iter_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if self.c.home().join("daemon.json").exists() {
            let _ = self.c.cmd(&["daemon", "stop"]);
        }
        // `daemon stop` leaves supervised launches running (the next daemon re-attaches to them).
        for dir in [self.c.home(), self.base.clone()] {
            for pid in processes_in(&dir) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            }
        }
        close_ssh_masters(&self.c);
    }
}

impl Fx {
    pub(crate) fn new() -> Option<Fx> {
        let venv_bin = venv_bin()?;
        let path = format!("{}:{}", venv_bin.display(), std::env::var("PATH").unwrap_or_default());
        let c = Cairn::new().with_env("PATH", &path);
        let base = c.work.path().canonicalize().unwrap();
        Some(Fx { c, base, path, spawned: RefCell::new(Vec::new()) })
    }

    pub(crate) fn p(&self, rel: &str) -> PathBuf {
        self.base.join(rel)
    }

    /// `cairn ARGS --json` with this test's PATH, checking the `--json` contract.
    pub(crate) fn json(&self, args: &[&str]) -> Out {
        self.c.json(args)
    }

    /// Starts `cairn ARGS` in the background with this test's PATH; returns its index for
    /// [`Fx::wait_spawned`]. Killed when the test ends, if still running.
    pub(crate) fn spawn(&self, args: &[String]) -> usize {
        let child = self.c.spawn(args);
        let mut spawned = self.spawned.borrow_mut();
        spawned.push(child);
        spawned.len() - 1
    }

    /// Waits (at most `timeout`) for a spawned command to exit: its exit code and stdout.
    #[track_caller]
    pub(crate) fn wait_spawned(&self, i: usize, timeout: Duration) -> (i32, String) {
        let out = wait_exit(&mut self.spawned.borrow_mut()[i], timeout);
        assert!(!out.timed_out, "a spawned `cairn` did not exit within {timeout:?}");
        (out.code.unwrap_or(-1), out.stdout)
    }

    /// Copies the fixture folder `name` into the scratch directory.
    fn fixture(&self, name: &str) -> PathBuf {
        let dir = self.p(name);
        copy_dir(&Path::new(FIXTURES).join(name), &dir);
        dir
    }

    /// Copies and registers the fixture `name`.
    #[track_caller]
    fn add(&self, name: &str) -> Value {
        let dir = self.fixture(name);
        self.json(&["workflow", "add", dir.to_str().unwrap()]).expect(0).json
    }

    /// `cairn run WF --input <input> EXTRA… --json`.
    fn run(&self, workflow: &str, input: &Value, extra: &[&str]) -> Out {
        let args = self.c.run_args(workflow, input, extra);
        self.json(&args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// `cairn plan WF --input <input> --target TARGET --run-dir RUN_DIR --name NAME --json`.
    pub(crate) fn plan(&self, workflow: &str, input: &Value, target: &str, run_dir: &Path, name: &str) -> Out {
        self.c.plan(workflow, &self.c.input(input), target, run_dir, name)
    }

    pub(crate) fn execute(&self, plan: &Value) -> Out {
        let args = approval(plan);
        self.json(&args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// Registers the test sshd as target [`TARGET`], its workspace root `<scratch>/ws`.
    #[track_caller]
    pub(crate) fn add_target(&self, d: &Path) -> &'static str {
        let ws = self.p("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let ssh = format!("root@127.0.0.1:{}", sshd_port());
        let (identity, known_hosts) = (d.join("id_ed25519"), d.join("known_hosts"));
        self.c.add_target(TARGET, &ssh, &identity, &known_hosts, ws.to_str().unwrap(), &[]).expect(0);
        TARGET
    }

    /// One row of `tool_calls` as JSON, read with the sqlite3 CLI; `None` (a skip) when sqlite3 is
    /// missing outside CI.
    pub(crate) fn row(&self, run_id: &str, step_id: &str) -> Option<Value> {
        let query = format!(
            "SELECT status, outcome, result_json, error, log_tail, attempt_count, started_at, finished_at, remote_json \
             FROM tool_calls WHERE run_id = '{run_id}' AND step_id = '{step_id}'"
        );
        let Some(out) = self.c.sql(&["-json"], &query) else {
            eprintln!("sqlite3 not installed: skipped the check of the stored step result");
            return None;
        };
        let rows: Value = serde_json::from_str(&out).unwrap_or_else(|_| json!([]));
        let row = rows.get(0).unwrap_or_else(|| panic!("no tool_calls row for {run_id}/{step_id}")).clone();
        Some(row)
    }

    /// The step's stored result (`tool_calls.result_json`), parsed.
    pub(crate) fn result(&self, run_id: &str, step_id: &str) -> Option<Value> {
        self.row(run_id, step_id).map(|r| match r["result_json"].as_str() {
            Some(text) => serde_json::from_str(text).unwrap(),
            None => Value::Null,
        })
    }

    /// Stops the daemon and checks its process is gone.
    #[track_caller]
    pub(crate) fn stop_daemon(&self) {
        self.c.stop_daemon_within(Duration::from_secs(5));
    }
}

/// The `greetings` pipeline's results: two samples greeted with the configured greeting, shouted,
/// and summed up in sample order.
const GREETING_FILES: [(&str, &str); 5] = [
    ("results/greetings/ada.txt", "Hello from config, ada!\n"),
    ("results/greetings/grace.txt", "Hello from config, grace!\n"),
    ("results/shouts/ada.txt", "HELLO FROM CONFIG, ADA!\n"),
    ("results/shouts/grace.txt", "HELLO FROM CONFIG, GRACE!\n"),
    ("results/summary.txt", "HELLO FROM CONFIG, ADA!\nHELLO FROM CONFIG, GRACE!\n"),
];

/// A `greetings` run that ended READY: its files are the expected ones, the step's result lists
/// exactly them, the lock is released, nothing of it still runs, and its controller ran exactly
/// once, as `argv_tail` (everything after `snakemake`).
#[track_caller]
fn assert_greetings_done(fx: &Fx, run: &Value, run_dir: &Path, argv_tail: &str, target: &str) {
    let run_id = str_of(&run["run_id"]);
    assert_eq!(run["status"], "READY", "{run:#}");
    assert_eq!(run["run_dir"], run_dir.to_str().unwrap(), "{run:#}");
    assert_eq!(run["findings"], json!([]), "{run:#}");
    let step = step(run, "pipeline");
    assert_eq!(step["status"], "COMPLETED", "{run:#}");
    assert_eq!(step["outcome"], "COMPLETED", "{run:#}");
    assert_eq!(step["attempts"], 1, "{run:#}");

    // The files, under the working copy's results/ only.
    let work = run_dir.join("steps/pipeline");
    for (rel, content) in GREETING_FILES {
        let text = std::fs::read_to_string(work.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert_eq!(text, content, "{rel}");
    }
    let on_disk = files_under(&work, "results");
    assert_eq!(
        on_disk.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
        GREETING_FILES.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        "the working copy's results/ holds exactly the pipeline's outputs"
    );
    // They are the step's artifacts, named by their path in the working copy.
    let artifacts: Vec<(String, u64)> = step["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (str_of(&a["name"]).to_string(), a["bytes"].as_u64().unwrap()))
        .collect();
    assert_eq!(artifacts, on_disk, "every output is an artifact, and nothing else: {step:#}");

    // The step's result is the controller's report of them.
    if let Some(result) = fx.result(run_id, "pipeline") {
        assert_eq!(result["kind"], "snakemake", "{result:#}");
        assert_eq!(result["working_copy"], work.to_str().unwrap(), "{result:#}");
        let listed: Vec<(String, u64)> = result["outputs"]
            .as_array()
            .unwrap_or_else(|| panic!("no outputs list: {result:#}"))
            .iter()
            .map(|r| (str_of(&r["name"]).to_string(), r["bytes"].as_u64().unwrap()))
            .collect();
        assert_eq!(listed, on_disk, "the result lists every output with its size: {result:#}");
        // 2 greet + 2 shout + summary + all.
        assert_eq!(result["jobs"], json!({"total": 6, "done": 6, "failed": 0}), "{result:#}");
        assert_eq!(result["failed_rules"], json!([]), "{result:#}");
        assert_eq!(result["lock_released"], true, "{result:#}");
        let row = fx.row(run_id, "pipeline").unwrap();
        let remote: Value = serde_json::from_str(str_of(&row["remote_json"])).unwrap();
        assert_eq!(remote["target"], target, "{remote:#}");
        assert_eq!(remote["attempt_dir"], attempt_dir(run_dir, "pipeline", 1).to_str().unwrap(), "{remote:#}");
    }
    assert_eq!(lock_files(&work), Vec::<String>::new(), "snakemake released its lock");

    // The supervisor's record: who ran (pid, start time, nonce) and how it ended.
    let attempt = attempt_dir(run_dir, "pipeline", 1);
    let pid = read_json(&attempt.join("pid.json"));
    assert!(pid["pid"].as_i64().is_some_and(|p| p > 1), "{pid}");
    assert!(pid["start_time"].as_i64().is_some(), "{pid}");
    assert!(pid["nonce"].as_str().is_some_and(|n| !n.is_empty()), "{pid}");
    let exit = read_json(&attempt.join("exit.json"));
    assert_eq!(exit["exit_code"], 0, "{exit}");
    assert!(attempt.join("stdout").is_file());
    assert!(!same_alive(pid["pid"].as_i64().unwrap(), pid["start_time"].as_i64().unwrap()), "snakemake still runs");
    assert_eq!(pgrep(run_dir), Vec::<i32>::new(), "a process still names {}", run_dir.display());

    // The controller ran once, with the argv Cairn built (its log is the attempt's stderr).
    let log = std::fs::read_to_string(attempt.join("stderr")).unwrap();
    let commands: Vec<&str> = log.lines().filter(|l| l.trim_start().starts_with("Command:")).collect();
    assert_eq!(commands.len(), 1, "one snakemake invocation: {commands:?}");
    assert!(
        commands[0].ends_with(&format!("/snakemake {argv_tail}")),
        "snakemake ran as\n  {}\nnot with\n  {argv_tail}",
        commands[0].trim()
    );
    assert!(!run_dir.join("steps/pipeline/.cairn/attempt-2").exists());
    let events = fx.c.events(run_id);
    assert_eq!(events_of(&events, "step.started", Some("pipeline")).len(), 1, "{:?}", kinds(&events));
    assert_eq!(events_of(&events, "step.completed", Some("pipeline")).len(), 1, "{:?}", kinds(&events));
    assert_eq!(kinds(&events).last().map(String::as_str), Some("run.finished"), "{:?}", kinds(&events));
}

/// (1) `cairn run` of a Snakemake pipeline.
///
/// Cairn builds the argv (snakefile and config file from the registered snapshot, run_dir as the
/// working directory); the outputs land under run_dir/results, the step's result lists them, and
/// the lock is released.
#[test]
fn a_snakemake_pipeline_runs_as_one_controller_step() {
    let Some(fx) = Fx::new() else { return };
    let added = fx.add("greetings");
    assert_eq!(added["steps"], 1, "{added}");
    let snapshot = fx.c.snapshot("greetings@1.0.0");
    let run_dir = fx.c.home().join("runs/hello");

    let out = fx.run("greetings", &json!({}), &["--run-id", "hello"]).expect(0);

    // It ran in its working copy: a copy of the snapshot, never the snapshot itself.
    let work = run_dir.join("steps/pipeline");
    let argv_tail = format!(
        "--snakefile {work}/Snakefile --directory {work} --cores 2 --nocolor --rerun-incomplete --configfile {work}/config.yaml",
        work = work.display()
    );
    for f in ["Snakefile", "config.yaml"] {
        assert_eq!(std::fs::read(work.join(f)).unwrap(), std::fs::read(snapshot.join(f)).unwrap(), "{f}");
    }
    assert!(!work.join("workflow.toml").exists(), "Cairn's definition is not a file of the pipeline");
    assert!(!snapshot.join("results").exists() && !snapshot.join(".snakemake").exists(), "the snapshot is untouched");
    assert_greetings_done(&fx, &out.json, &run_dir, &argv_tail, "local");
    assert_eq!(fx.c.show("hello")["status"], "READY");
    fx.stop_daemon();
}

/// (2) The same pipeline planned and executed.
///
/// The plan shows the exact argv, against the copy it deploys into run_dir/workflow, and that is
/// what runs.
fn planned_pipeline_runs(fx: &Fx, target: &str) {
    fx.add("greetings");
    std::fs::create_dir_all(fx.p("ws")).unwrap();
    let run_dir = fx.p("ws/greetings-1");
    let plan = fx.plan("greetings", &json!({}), target, &run_dir, "greet-1").expect(0).json;
    assert!(std::fs::symlink_metadata(&run_dir).is_err(), "planning created {}", run_dir.display());
    assert!(fx.c.runs().is_empty(), "planning created a run");
    assert_eq!(plan["target"], target);

    let deployed = run_dir.join("workflow");
    let work = run_dir.join("steps/pipeline");
    let argv = json!([
        "snakemake",
        "--snakefile",
        work.join("Snakefile"),
        "--directory",
        work,
        "--cores",
        "2",
        "--nocolor",
        "--rerun-incomplete",
        "--configfile",
        work.join("config.yaml"),
    ]);
    let commands = plan["commands"].as_array().unwrap();
    assert_eq!(commands.len(), 1, "{commands:#?}");
    assert_eq!(commands[0]["argv"], argv, "the plan shows the controller's exact argv");
    assert_eq!(commands[0]["cwd"], run_dir.join("steps/pipeline").to_str().unwrap());
    if target != "local" {
        // Readiness was checked on the target: snakemake is on its login PATH.
        let found = &plan["readiness"]["observed"]["programs"]["snakemake"];
        assert!(found.as_str().is_some_and(|p| p.ends_with("/snakemake")), "{:#}", plan["readiness"]);
    }

    let run = fx.execute(&plan).expect(0).json;

    // The deployed workflow is the registered one, byte for byte.
    for f in ["Snakefile", "config.yaml", "workflow.toml"] {
        assert_eq!(
            std::fs::read(deployed.join(f)).unwrap(),
            std::fs::read(Path::new(FIXTURES).join("greetings").join(f)).unwrap(),
            "run_dir/workflow/{f}"
        );
    }
    let argv_tail: Vec<&str> = argv.as_array().unwrap()[1..].iter().map(str_of).collect();
    assert_greetings_done(fx, &run, &run_dir, &argv_tail.join(" "), target);
    assert_eq!(fx.c.entries("runs"), Vec::<String>::new(), "nothing was written to the local runs folder");
    let listed = fx.json(&["plans"]).expect(0).json;
    assert_eq!(listed["plans"][0]["run_id"], run["run_id"], "{listed:#}");
    fx.stop_daemon();
}

#[test]
fn a_planned_pipeline_runs_on_the_ssh_target_from_its_deployed_copy() {
    let Some(fx) = Fx::new() else { return };
    let Some(d) = sshd() else { return };
    let target = fx.add_target(&d);
    planned_pipeline_runs(&fx, target);
}

#[test]
fn a_planned_pipeline_runs_locally_from_its_deployed_copy() {
    let Some(fx) = Fx::new() else { return };
    planned_pipeline_runs(&fx, "local");
}

/// Starts the registered `naps` pipeline in the background: here as run `name` (`cairn run`), or
/// on `target` planned into `<scratch>/<run_dir>` and approved. Returns the follower, the run's id
/// and its run directory.
fn start_naps(fx: &Fx, target: Option<&str>, name: &str, run_dir: &str) -> (usize, String, PathBuf) {
    let Some(t) = target else {
        let args = fx.c.run_args("naps", &json!({}), &["--run-id", name, "--json"]);
        return (fx.spawn(&args), name.to_string(), fx.c.home().join("runs").join(name));
    };
    let run_dir = fx.p(run_dir);
    let plan = fx.plan("naps", &json!({}), t, &run_dir, name).expect(0).json;
    let mut args = approval(&plan);
    args.push("--json".into());
    let i = fx.spawn(&args);
    let mut run_id = String::new();
    assert!(
        wait_until(Duration::from_secs(30), || {
            let plans = fx.json(&["plans"]).expect(0).json;
            run_id = plans["plans"][0]["run_id"].as_str().unwrap_or_default().to_string();
            !run_id.is_empty()
        }),
        "execute-plan never created its run"
    );
    (i, run_id, run_dir)
}

/// (3) Cancel mid-run: `naps` sleeps 4 s per job, two at a time, 6 jobs. Once the first outputs
/// exist (and the next jobs run), `cairn cancel`: snakemake gets SIGINT, stops its jobs, releases
/// its lock and exits; the run is CANCELLED within seconds; completed outputs stay.
fn cancel_mid_run(fx: &Fx, target: Option<&str>) {
    fx.add("naps");
    let (follower, run_id, run_dir) = start_naps(fx, target, "naps", "ws/naps-1");

    // Mid-run: the first naps are done, snakemake runs and holds its lock.
    let work = run_dir.join("steps/pipeline");
    let naps = work.join("results/naps");
    assert!(
        wait_until(Duration::from_secs(60), || std::fs::read_dir(&naps).is_ok_and(|rd| rd.count() >= 1)),
        "no nap finished within 60 s\ndaemon log:\n{}",
        fx.c.daemon_log()
    );
    let running = pgrep(&run_dir);
    assert!(!running.is_empty(), "snakemake should be running for {}", run_dir.display());
    assert!(!lock_files(&work).is_empty(), "a running snakemake holds its lock in .snakemake/locks");
    let attempt = attempt_dir(&run_dir, "pipeline", 1);
    let pid = read_json(&attempt.join("pid.json"));
    let (supervisor, supervisor_start) =
        (pid["supervisor_pid"].as_i64().unwrap(), pid["supervisor_start_time"].as_i64().unwrap());

    let asked = Instant::now();
    let out = fx.json(&["cancel", &run_id]).expect(0);
    assert_eq!(out.json["status"], "CANCELLED", "{}", out.stdout);
    assert_eq!(out.step("pipeline")["status"], "FAILED", "{}", out.stdout);
    assert!(str_of(&out.step("pipeline")["error"]).contains("cancel"), "{}", out.stdout);
    let gone = wait_until(CANCEL_WITHIN.saturating_sub(asked.elapsed()), || {
        pgrep(&run_dir).is_empty() && processes_in(&run_dir).is_empty()
    });
    let took = asked.elapsed();
    assert!(
        gone,
        "{took:?} after the cancel, processes of {} remain: {:?}",
        run_dir.display(),
        processes_in(&run_dir).into_iter().map(describe_pid).collect::<Vec<_>>()
    );
    eprintln!("cancelled ({}) in {took:?}", target.unwrap_or("local"));
    // A one-shot supervisor (a local controller) leaves with its controller; over SSH the
    // supervisor is the target's serving agent, which goes on serving: either way the end is
    // recorded.
    if target.is_none() {
        assert!(
            wait_until(Duration::from_secs(5), || !same_alive(supervisor, supervisor_start)),
            "the step's supervisor (pid {supervisor}) outlived its controller"
        );
    }
    assert!(wait_until(Duration::from_secs(5), || attempt.join("exit.json").is_file()), "no exit.json");

    // The follower (`cairn run` / `cairn execute-plan`) sees the run end CANCELLED: exit 3.
    let (code, stdout) = fx.wait_spawned(follower, Duration::from_secs(15));
    assert_eq!(code, 3, "the follower: {stdout}");
    assert_eq!(parse_stdout(&stdout, 3, "follower")["status"], "CANCELLED", "{stdout}");

    // Snakemake stopped on SIGINT by itself (not SIGKILLed after the grace) and released its lock.
    assert_eq!(lock_files(&work), Vec::<String>::new(), "the lock was not released");
    assert!(wait_until(Duration::from_secs(5), || attempt.join("exit.json").is_file()), "no exit.json");
    let exit = read_json(&attempt.join("exit.json"));
    assert_ne!(exit["signal"], 9, "snakemake had to be SIGKILLed: {exit}");
    let log = std::fs::read_to_string(attempt.join("stderr")).unwrap();
    assert!(log.contains("Terminating processes on user request"), "snakemake saw the SIGINT:\n{log}");

    // Partial results stay: every finished nap, complete; no summary.
    let left = files_under(&work, "results");
    assert!(!left.is_empty() && left.len() < 6, "some, not all, naps finished: {left:?}");
    for (rel, _) in &left {
        let sample = rel.strip_prefix("results/naps/").and_then(|f| f.strip_suffix(".txt"));
        let sample = sample.unwrap_or_else(|| panic!("unexpected output {rel}"));
        assert_eq!(std::fs::read_to_string(work.join(rel)).unwrap(), format!("napped {sample}\n"), "{rel}");
    }

    let shown = fx.c.show(&run_id);
    assert_eq!(shown["status"], "CANCELLED", "{shown:#}");
    let events = fx.c.events(&run_id);
    assert_eq!(events_of(&events, "step.cancelled", Some("pipeline")).len(), 1, "{:?}", kinds(&events));
    assert!(events_of(&events, "step.completed", None).is_empty(), "{:?}", kinds(&events));
    assert_eq!(kinds(&events).last().map(String::as_str), Some("run.finished"), "{:?}", kinds(&events));
    // Nothing changes afterwards: the outputs are still there a moment later.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(files_under(&work, "results"), left);
    fx.stop_daemon();
}

#[test]
fn cancel_stops_a_local_pipeline_and_releases_its_lock() {
    let Some(fx) = Fx::new() else { return };
    cancel_mid_run(&fx, None);
}

#[test]
fn cancel_stops_a_pipeline_on_the_ssh_target_and_releases_its_lock() {
    let Some(fx) = Fx::new() else { return };
    let Some(d) = sshd() else { return };
    let target = fx.add_target(&d);
    cancel_mid_run(&fx, Some(target));
}

/// (4) A rule whose shell command exits 1: the step and the run are FAILED (not retried: FAILED is
/// not in the default `retry_on`), the error names the exit code, and the stored log tail is
/// snakemake's own account of the failure.
#[test]
fn a_failing_rule_fails_the_step_and_the_run_with_snakemakes_error() {
    let Some(fx) = Fx::new() else { return };
    fx.add("broken");
    let run_dir = fx.c.home().join("runs/broken");
    let out = fx.run("broken", &json!({}), &["--run-id", "broken"]).expect(3);
    let run = &out.json;
    assert_eq!(run["status"], "FAILED", "{run:#}");
    let step = out.step("pipeline");
    assert_eq!(step["status"], "FAILED", "{run:#}");
    assert_eq!(step["outcome"], "FAILED", "{run:#}");
    assert_eq!(step["attempts"], 1, "{run:#}");
    assert!(str_of(&step["error"]).contains("exited with code 1"), "{run:#}");
    assert!(
        str_of(&step["error"]).contains("rule `broken` failed (1 of 3 jobs done); its log tail says why"),
        "the error names the failing rule: {run:#}"
    );
    let error = str_of(&run["error"]);
    assert!(error.contains("step `pipeline`") && error.contains("code 1"), "{run:#}");

    if let Some(row) = fx.row("broken", "pipeline") {
        assert_eq!(row["result_json"], Value::Null, "a failed controller has no result: {row:#}");
        let tail = str_of(&row["log_tail"]);
        for says in [
            "Error in rule broken",
            "the broken rule gives up",
            "non-zero exit status 1",
            "did not complete successfully",
        ] {
            assert!(tail.contains(says), "the stored log tail lacks `{says}`:\n{tail}");
        }
    }
    // `cairn show` prints the tail's last lines under the failed step.
    let shown = fx.c.cmd(&["show", "broken"]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("exited with code 1"), "{text}");
    assert!(text.contains("At least one job did not complete successfully"), "{text}");

    // The rule before the failing one ran; the failing one left nothing; the lock is released.
    let work = run_dir.join("steps/pipeline");
    assert_eq!(std::fs::read_to_string(work.join("results/prepared.txt")).unwrap(), "prepared\n");
    assert!(!work.join("results/broken.txt").exists());
    assert_eq!(lock_files(&work), Vec::<String>::new());
    assert_eq!(step["artifacts"], json!([]), "a failed attempt records no artifact");
    assert_eq!(read_json(&attempt_dir(&run_dir, "pipeline", 1).join("exit.json"))["exit_code"], 1);
    assert!(!attempt_dir(&run_dir, "pipeline", 2).exists(), "a FAILED controller is not retried");
    assert_eq!(pgrep(&run_dir), Vec::<i32>::new());
    fx.stop_daemon();
}

/// The `greetings` fixture's workflow.toml with `from` replaced by `to` (which must occur) and
/// the workflow renamed `name`, written as a workflow folder `name` with the fixture's files.
fn variant(fx: &Fx, name: &str, from: &str, to: &str) -> PathBuf {
    variant_of(fx, "greetings", name, from, to)
}

/// [`variant`] of another fixture.
fn variant_of(fx: &Fx, fixture: &str, name: &str, from: &str, to: &str) -> PathBuf {
    let dir = fx.p(name);
    copy_dir(&Path::new(FIXTURES).join(fixture), &dir);
    let toml = std::fs::read_to_string(dir.join("workflow.toml")).unwrap();
    assert!(toml.contains(from), "the {fixture} fixture has no `{from}`");
    let toml = toml.replacen(from, to, 1).replacen(&format!("name = \"{fixture}\""), &format!("name = \"{name}\""), 1);
    std::fs::write(dir.join("workflow.toml"), toml).unwrap();
    dir
}

/// `args.targets` are snakemake's targets: only what they need is built. `broken` has no config
/// file; its target `results/prepared.txt` never reaches the failing rule, so the run is READY.
#[test]
fn targets_build_only_what_they_name() {
    let Some(fx) = Fx::new() else { return };
    let dir = variant_of(&fx, "broken", "targeted", "cores = 1 }", "cores = 1, targets = [\"results/prepared.txt\"] }");
    fx.json(&["workflow", "add", dir.to_str().unwrap()]).expect(0);
    let out = fx.run("targeted", &json!({}), &["--run-id", "targeted"]).expect(0);
    assert_eq!(out.json["status"], "READY", "{}", out.stdout);
    let work = fx.c.home().join("runs/targeted/steps/pipeline");
    assert_eq!(files_under(&work, "results"), [("results/prepared.txt".to_string(), 9)]);
    if let Some(result) = fx.result("targeted", "pipeline") {
        assert_eq!(result["jobs"], json!({"total": 1, "done": 1, "failed": 0}), "{result:#}");
    }
    fx.stop_daemon();
}

/// The same with a config file. Cairn puts the targets after `--configfile PATH`, and snakemake's
/// `--configfile` takes one or more files: the targets are read as config files
/// (`FileNotFoundError: ... 'results/shouts/ada.txt'`) and the step fails.
#[test]
fn targets_build_only_what_they_name_also_with_a_config_file() {
    let Some(fx) = Fx::new() else { return };
    let dir = variant(&fx, "targeted", "cores = 2 }", "cores = 2, targets = [\"results/shouts/ada.txt\"] }");
    fx.json(&["workflow", "add", dir.to_str().unwrap()]).expect(0);
    let out = fx.run("targeted", &json!({}), &["--run-id", "targeted"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    let work = fx.c.home().join("runs/targeted/steps/pipeline");
    let built: Vec<String> = files_under(&work, "results").into_iter().map(|(p, _)| p).collect();
    assert_eq!(built, ["results/greetings/ada.txt", "results/shouts/ada.txt"]);
    assert_eq!(std::fs::read_to_string(work.join("results/shouts/ada.txt")).unwrap(), "HELLO FROM CONFIG, ADA!\n");
    fx.stop_daemon();
}

/// (5) Bad definitions. A `command` on a controller tool and an unknown kind are refused when
/// registering, naming the file, line and field, and register nothing. Bad step args (a path out
/// of the workflow folder, zero cores, an argument snakemake steps do not take, also when it comes
/// from the input) are refused at the first stage that sees them, naming the arg, and snakemake
/// never starts.
#[test]
fn bad_controller_definitions_are_refused_naming_the_field() {
    let Some(fx) = Fx::new() else { return };
    let kind = "kind = \"snakemake\"";
    let refused = [
        (
            "bad-command",
            kind,
            "kind = \"snakemake\"\ncommand = [\"snakemake\", \"--cores\", \"all\"]",
            "tools.pipeline.command",
            "takes no command",
        ),
        ("bad-kind", kind, "kind = \"snakemake-ish\"", "tools.pipeline.kind", "`snakemake-ish` is not a tool kind"),
    ];
    for (name, from, to, field, says) in refused {
        let dir = variant(&fx, name, from, to);
        let out = fx.json(&["workflow", "add", dir.to_str().unwrap()]);
        assert_eq!(out.code, 2, "{name}: {}", out.stderr);
        let file = dir.join("workflow.toml");
        for want in [field, says, file.to_str().unwrap()] {
            assert!(out.stderr.contains(want), "{name}: the error lacks `{want}`: {}", out.stderr);
        }
        assert!(out.stderr.contains("workflow.toml:"), "{name}: names the line: {}", out.stderr);
    }
    let listed = fx.json(&["workflow", "list"]).expect(0).json;
    assert_eq!(listed["workflows"], json!([]), "nothing was registered: {listed:#}");
    assert_eq!(fx.c.entries("registry"), Vec::<String>::new(), "no snapshot was stored");

    let args = "args = { snakefile = \"Snakefile\", configfile = \"config.yaml\", cores = 2 }";
    let bad_args = [
        ("up-and-out", "args = { snakefile = \"../greetings/Snakefile\", cores = 2 }", json!({}), "args.snakefile"),
        ("no-cores", "args = { snakefile = \"Snakefile\", cores = 0 }", json!({}), "args.cores"),
        ("extra-arg", "args = { snakefile = \"Snakefile\", cores = 2, use_conda = true }", json!({}), "args.use_conda"),
        (
            "from-input",
            "args = { snakefile = \"${input.snakefile}\", cores = 2 }",
            json!({"snakefile": "/etc/passwd"}),
            "args.snakefile",
        ),
    ];
    let mut surfaced = Vec::new();
    for (name, to, input, arg) in bad_args {
        let dir = variant(&fx, name, args, to);
        let added = fx.json(&["workflow", "add", dir.to_str().unwrap()]);
        if added.code == 2 {
            assert!(added.stderr.contains(arg), "{name}: the refusal does not name {arg}: {}", added.stderr);
            surfaced.push(format!("{name}: refused by workflow add"));
            continue;
        }
        added.expect(0);

        // Planned: refused there, or the approved plan's run fails before snakemake starts.
        let run_dir = fx.p(&format!("plan-{name}"));
        let plan = fx.plan(name, &input, "local", &run_dir, name);
        if plan.code == 2 {
            assert!(plan.stderr.contains(arg), "{name}: the plan refusal does not name {arg}: {}", plan.stderr);
            assert!(std::fs::symlink_metadata(&run_dir).is_err());
            surfaced.push(format!("{name}: refused by plan"));
        } else {
            let plan = plan.expect(0).json;
            let run = fx.execute(&plan).expect(3).json;
            assert_bad_args_failed(&run, &run_dir, arg, name);
            surfaced
                .push(format!("{name}: planned (argv shown: {}), failed when executed", plan["commands"][0]["argv"]));
        }

        // Run directly: refused before a run exists (exit 2), naming the arg; snakemake never
        // started.
        let out = fx.run(name, &input, &["--run-id", name]);
        assert_eq!(out.code, 2, "{name}: {}", out.stderr);
        assert!(out.stderr.contains(arg), "{name}: the run refusal does not name {arg}: {}", out.stderr);
        assert!(!fx.c.home().join("runs").join(name).exists(), "{name}: a refused run left a run_dir");
    }
    eprintln!("where bad args surface:\n  {}", surfaced.join("\n  "));
    fx.stop_daemon();
}

/// A run whose controller step could not start because of a bad arg.
#[track_caller]
fn assert_bad_args_failed(run: &Value, run_dir: &Path, arg: &str, name: &str) {
    assert_eq!(run["status"], "FAILED", "{name}: {run:#}");
    let step = step(run, "pipeline");
    assert_eq!(step["status"], "FAILED", "{name}: {run:#}");
    assert!(str_of(&step["error"]).contains(arg), "{name}: the step error does not name {arg}: {run:#}");
    assert!(str_of(&run["error"]).contains(arg), "{name}: the run error does not name {arg}: {run:#}");
    assert_eq!(step["attempts"], 1, "{name}: not retried: {run:#}");
    let work = run_dir.join("steps/pipeline");
    assert!(!work.join(".snakemake").exists(), "{name}: snakemake ran in {}", work.display());
    assert!(!work.join("results").exists(), "{name}: outputs in {}", work.display());
}

/// (6) Nextflow is not installed here: a plan of a Nextflow pipeline is refused, naming nextflow
/// and the step, locally and on the SSH target, and creates nothing (no plan, no run, no run_dir).
#[test]
fn a_nextflow_pipeline_is_refused_at_plan_time_where_nextflow_is_missing() {
    let Some(fx) = Fx::new() else { return };
    let on_path = std::env::split_paths(&fx.path).find(|d| d.join("nextflow").is_file());
    assert!(on_path.is_none(), "this test needs a machine without nextflow; found it in {on_path:?}");
    fx.add("nextflow");
    std::fs::create_dir_all(fx.p("ws")).unwrap();
    let mut targets = vec!["local"];
    if let Some(d) = sshd() {
        targets.push(fx.add_target(&d));
    }
    for target in targets {
        let run_dir = fx.p(&format!("ws/nf-{target}"));
        let out = fx.plan("nf-hello", &json!({}), target, &run_dir, &format!("nf-{target}"));
        assert_eq!(out.code, 2, "{target}: {}{}", out.stdout, out.stderr);
        for want in ["`nextflow`", "step `pipeline`", &format!("target `{target}` is not ready")] {
            assert!(out.stderr.contains(want), "{target}: the refusal lacks `{want}`: {}", out.stderr);
        }
        assert!(std::fs::symlink_metadata(&run_dir).is_err(), "{target}: {} was created", run_dir.display());
        assert_eq!(fx.json(&["plans"]).expect(0).json["plans"], json!([]), "{target}: a plan was stored");
        assert_eq!(fx.c.entries("plans"), Vec::<String>::new(), "{target}: a plan file was written");
        assert!(fx.c.runs().is_empty(), "{target}: a run was created");
    }

    // `cairn run` has no plan step; it must not succeed either, and says why.
    let out = fx.run("nf-hello", &json!({}), &["--run-id", "nf"]);
    assert!(out.code == 2 || out.code == 3, "{}{}", out.stdout, out.stderr);
    let said = format!("{}{}", out.json["error"].as_str().unwrap_or_default(), out.stderr);
    assert!(said.contains("nextflow"), "{said}");
    if fx.c.home().join("daemon.json").exists() {
        fx.stop_daemon();
    }
}

/// (7) A completed controller step is never run twice: `cairn run` with the same run id returns the
/// stored run; snakemake does not start again (one attempt directory, one snakemake log, the
/// outputs untouched) and no event is appended.
#[test]
fn a_completed_controller_step_is_not_run_again_under_the_same_run_id() {
    let Some(fx) = Fx::new() else { return };
    fx.add("greetings");
    let run_dir = fx.c.home().join("runs/once/steps/pipeline");
    let first = fx.run("greetings", &json!({"n": 1}), &["--run-id", "once"]).expect(0);
    assert_eq!(first.json["status"], "READY", "{}", first.stdout);
    let events = fx.c.events("once");
    let row = fx.row("once", "pipeline");
    let snakemake_logs = std::fs::read_dir(run_dir.join(".snakemake/log")).unwrap().count();
    assert_eq!(snakemake_logs, 1);
    let mtime = |rel: &str| std::fs::metadata(run_dir.join(rel)).unwrap().modified().unwrap();
    let stamps: Vec<_> = GREETING_FILES.iter().map(|(rel, _)| mtime(rel)).collect();

    for _ in 0..2 {
        let again = fx.run("greetings", &json!({"n": 1}), &["--run-id", "once"]).expect(0);
        assert_eq!(contract(&again.json), contract(&first.json), "the rerun returns the stored run");
    }
    assert_eq!(fx.c.events("once"), events, "a rerun appends no events");
    assert_eq!(fx.row("once", "pipeline"), row, "the stored step is unchanged");
    assert_eq!(std::fs::read_dir(run_dir.join(".snakemake/log")).unwrap().count(), 1, "snakemake ran again");
    let mut attempts: Vec<String> = std::fs::read_dir(run_dir.join(".cairn"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    attempts.sort();
    assert_eq!(attempts, ["attempt-1", "working-copy"]);
    assert_eq!(GREETING_FILES.iter().map(|(rel, _)| mtime(rel)).collect::<Vec<_>>(), stamps, "outputs rewritten");
    fx.stop_daemon();
}

/// (7b) The controller runs detached from the daemon: a daemon killed (SIGKILL) mid-pipeline leaves
/// snakemake running, and the next daemon re-attaches to that same launch (after checking its
/// nonce) instead of starting the pipeline again. One attempt, one snakemake, every output.
fn daemon_killed_mid_pipeline(fx: &Fx, target: Option<&str>) {
    fx.add("naps");
    let (follower, run_id, run_dir) = start_naps(fx, target, "naps", "ws/naps-1");
    let work = run_dir.join("steps/pipeline");
    assert!(
        wait_until(Duration::from_secs(60), || std::fs::read_dir(work.join("results/naps"))
            .is_ok_and(|rd| rd.count() >= 1)),
        "no nap finished within 60 s\ndaemon log:\n{}",
        fx.c.daemon_log()
    );
    let attempt = attempt_dir(&run_dir, "pipeline", 1);
    let launched = read_json(&attempt.join("pid.json"));
    let (pid, start) = (launched["pid"].as_i64().unwrap(), launched["start_time"].as_i64().unwrap());
    let first = fx.c.daemon().pid;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(first), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(wait_until(Duration::from_secs(5), || !alive(first)), "daemon {first} survived SIGKILL");
    assert!(same_alive(pid, start), "snakemake (pid {pid}) should outlive the killed daemon");
    // The follower loses its stream and reports the run as it stands: RUNNING (exit 4).
    let (code, stdout) = fx.wait_spawned(follower, Duration::from_secs(15));
    assert_eq!(code, 4, "{stdout}");

    let second = fx.json(&["daemon", "start"]).expect(0).json;
    assert_ne!(second["pid"], first, "{second}");
    let run = fx.c.wait_for_status(&run_id, "READY", Duration::from_secs(60));
    assert_eq!(step(&run, "pipeline")["attempts"], 1, "{run:#}");
    assert!(!attempt_dir(&run_dir, "pipeline", 2).exists(), "a second attempt was launched");
    assert_eq!(std::fs::read_dir(work.join(".snakemake/log")).unwrap().count(), 1, "snakemake ran twice");
    let events = fx.c.events(&run_id);
    assert_eq!(events_of(&events, "step.reattached", Some("pipeline")).len(), 1, "{:?}", kinds(&events));
    assert_eq!(events_of(&events, "step.started", Some("pipeline")).len(), 1, "{:?}", kinds(&events));
    assert!(events_of(&events, "step.interrupted", None).is_empty(), "{:?}", kinds(&events));
    // Its successor read the log again from its start and recorded each job once.
    let finished = events_of(&events, "pipeline.job_finished", Some("pipeline"));
    assert_eq!(finished.len(), 8, "each of the 8 jobs finished once: {finished:#?}");
    if let Some(result) = fx.result(&run_id, "pipeline") {
        assert_eq!(result["jobs"], json!({"total": 8, "done": 8, "failed": 0}), "{result:#}");
        assert_eq!(result["outputs"].as_array().unwrap().len(), 7, "six naps and the summary: {result:#}");
        assert_eq!(result["lock_released"], true, "{result:#}");
    }
    let summary = std::fs::read_to_string(work.join("results/summary.txt")).unwrap();
    assert_eq!(summary, (1..=6).map(|i| format!("napped s{i}\n")).collect::<String>());
    assert_eq!(lock_files(&work), Vec::<String>::new());
}

#[test]
fn a_daemon_killed_mid_pipeline_is_followed_by_a_reattach_not_a_rerun() {
    let Some(fx) = Fx::new() else { return };
    daemon_killed_mid_pipeline(&fx, None);
    fx.stop_daemon();
}

#[test]
fn a_daemon_killed_mid_pipeline_on_the_ssh_target_is_followed_by_a_reattach_there() {
    let Some(fx) = Fx::new() else { return };
    let Some(d) = sshd() else { return };
    let target = fx.add_target(&d);
    daemon_killed_mid_pipeline(&fx, Some(target));
    fx.stop_daemon();
}

/// The processes (not this one) whose environment holds `CAIRN_ATTEMPT_NONCE=nonce`: an
/// attempt's, whatever started them.
fn carrying(nonce: &str) -> Vec<i32> {
    let entry = format!("CAIRN_ATTEMPT_NONCE={nonce}");
    processes()
        .into_iter()
        .map(|(pid, _)| pid)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|e| e == entry.as_bytes()))
        })
        .collect()
}

/// The daemon killed while the local agent's supervisor had started Snakemake but not yet written
/// its pid file (held back by the test-only `CAIRN_TEST_DELAY_PID_FILE`): the next daemon's
/// re-attach finds the launch recorded and no process named, so the attempt is lost from sight
/// and starts over. Before the next attempt begins, everything carrying the lost launch's nonce
/// (the agent, its supervisor, Snakemake and its jobs) is stopped: no job of attempt 1 starts or
/// ends once attempt 2 has begun, and the pipeline's outputs are whole.
#[test]
fn a_controller_lost_before_its_pid_file_is_stopped_before_the_next_attempt() {
    let Some(fx) = Fx::new() else { return };
    let dir = fx.p("naps");
    copy_dir(Path::new(FIXTURES).join("naps").as_path(), &dir);
    // Every nap job logs its start and end with its attempt, in the working copy.
    let snakefile = std::fs::read_to_string(dir.join("Snakefile")).unwrap();
    let logged = snakefile.replace(
        "\"sleep {params.secs}; echo 'napped {wildcards.sample}' > {output}\"",
        "\"echo start {wildcards.sample} $CAIRN_ATTEMPT >> naps.log; sleep {params.secs}; \"\n        \
         \"echo end {wildcards.sample} $CAIRN_ATTEMPT >> naps.log; echo 'napped {wildcards.sample}' > {output}\"",
    );
    assert_ne!(logged, snakefile);
    std::fs::write(dir.join("Snakefile"), logged).unwrap();
    fx.json(&["workflow", "add", dir.to_str().unwrap()]).expect(0);
    let started = fx.c.std_command(&["daemon", "start", "--json"]).env("CAIRN_TEST_DELAY_PID_FILE", "20").output();
    let first = Out::of_json(started.unwrap(), "daemon start", Duration::ZERO).expect(0).json["pid"].as_i64().unwrap();
    let (follower, run_id, run_dir) = start_naps(&fx, None, "lost", "");
    let work = run_dir.join("steps/pipeline");
    let log = work.join("naps.log");
    assert!(
        wait_until(Duration::from_secs(60), || log_lines(&log).iter().any(|l| l.ends_with(" 1"))),
        "no nap of attempt 1 started within 60 s
daemon log:
{}",
        fx.c.daemon_log()
    );
    let attempt1 = attempt_dir(&run_dir, "pipeline", 1);
    let nonce = read_json(&attempt1.join("request.json"))["nonce"].as_str().unwrap().to_string();
    let lost = carrying(&nonce);
    assert!(!lost.is_empty(), "attempt 1's processes carry its launch's nonce");
    assert!(!attempt1.join("pid.json").exists(), "the pid file is held back");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(first as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(wait_until(Duration::from_secs(5), || !alive(first as i32)), "daemon {first} survived SIGKILL");
    let (code, stdout) = fx.wait_spawned(follower, Duration::from_secs(15));
    assert!(matches!(code, 4 | 5), "{stdout}");

    fx.json(&["daemon", "start"]).expect(0);
    let run = fx.c.wait_for_status(&run_id, "READY", Duration::from_secs(90));
    assert_eq!(step(&run, "pipeline")["attempts"], 2, "{run:#}");
    assert!(carrying(&nonce).is_empty(), "attempt 1's processes outlived the recovery: {lost:?}");
    // Attempt 1 did nothing once attempt 2 began: every line of attempt 2 comes after its last.
    let lines = log_lines(&log);
    let first_of_2 = lines.iter().position(|l| l.ends_with(" 2")).unwrap_or_else(|| panic!("{lines:?}"));
    assert!(lines[first_of_2..].iter().all(|l| l.ends_with(" 2")), "attempts 1 and 2 overlapped: {lines:?}");
    assert!(!attempt1.join("exit.json").exists(), "attempt 1's supervisor outlived the recovery");
    let summary = std::fs::read_to_string(work.join("results/summary.txt")).unwrap();
    assert_eq!(summary, (1..=6).map(|i| format!("napped s{i}\n")).collect::<String>());
    assert_eq!(lock_files(&work), Vec::<String>::new());
    fx.stop_daemon();
}

/// (7c) Snakemake itself killed (SIGKILL, as the OOM killer would) mid-pipeline, here or on the
/// SSH target: the next attempt resumes in the same working copy, after its stale lock is
/// released, with `--rerun-incomplete`; a job that had completed is never run again, the
/// interruption uses up no retry (the step allows one attempt), and the event says why.
fn killed_snakemake_resumes(fx: &Fx, target: Option<&str>) {
    let dir = fx.p("naps");
    if !dir.exists() {
        copy_dir(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/controllers/naps")), &dir);
        // Every nap job says it started, in the working copy (appends of short lines do not mix).
        let snakefile = std::fs::read_to_string(dir.join("Snakefile")).unwrap();
        let logged = snakefile
            .replace("\"sleep {params.secs}; ", "\"echo {wildcards.sample} >> starts.log; sleep {params.secs}; ");
        assert_ne!(logged, snakefile);
        std::fs::write(dir.join("Snakefile"), logged).unwrap();
        fx.json(&["workflow", "add", dir.to_str().unwrap()]).expect(0);
    }
    let (follower, run_id, run_dir) = start_naps(fx, target, "killed", "ws/killed");
    let work = run_dir.join("steps/pipeline");
    assert!(
        wait_until(Duration::from_secs(60), || files_under(&work, "results/naps").len() >= 2),
        "no two naps finished within 60 s\ndaemon log:\n{}",
        fx.c.daemon_log()
    );
    // The target is this machine: its pid file names a process here.
    let launched = read_json(&attempt_dir(&run_dir, "pipeline", 1).join("pid.json"));
    let pid = launched["pid"].as_i64().unwrap() as i32;
    let done_before: Vec<String> = files_under(&work, "results/naps").into_iter().map(|(name, _)| name).collect();
    // Snakemake records a job complete just after its output appears: give it that moment.
    std::thread::sleep(Duration::from_secs(1));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();

    let (code, stdout) = fx.wait_spawned(follower, Duration::from_secs(90));
    assert_eq!(code, 0, "the run should resume and end READY: {stdout}\n{}", fx.c.daemon_log());
    let run = fx.c.show(&run_id);
    assert_eq!(step(&run, "pipeline")["attempts"], 2, "{run:#}");
    let events = fx.c.events(&run_id);
    let interrupted = events_of(&events, "step.interrupted", Some("pipeline"));
    assert_eq!(interrupted.len(), 1, "{:?}", kinds(&events));
    let why = str_of(&interrupted[0]["data"]["why"]);
    assert!(why.contains("killed by signal 9") && why.contains("resumes it in its working copy"), "{why}");
    assert!(events_of(&events, "step.retrying", None).is_empty(), "a resume is not a retry: {:?}", kinds(&events));

    // Each job that had completed before the kill started once; every sample is there.
    let starts = std::fs::read_to_string(work.join("starts.log")).unwrap();
    for name in &done_before {
        let sample = name.trim_start_matches("results/naps/").trim_end_matches(".txt");
        let n = starts.lines().filter(|l| *l == sample).count();
        assert_eq!(n, 1, "{sample} had completed before the kill, and started {n} times:\n{starts}");
    }
    let summary = std::fs::read_to_string(work.join("results/summary.txt")).unwrap();
    assert_eq!(summary, (1..=6).map(|i| format!("napped s{i}\n")).collect::<String>());
    // The second Snakemake ran in the same working copy, only what was left, and left no lock.
    assert_eq!(std::fs::read_dir(work.join(".snakemake/log")).unwrap().count(), 2);
    let result = fx.result(&run_id, "pipeline").expect("a result");
    let total = result["jobs"]["total"].as_u64().unwrap();
    assert!(total < 8, "the resumed Snakemake had only the jobs left to run, not all 8: {result:#}");
    assert_eq!(lock_files(&work), Vec::<String>::new());
    // Its artifacts are every file the pipeline wrote, across both attempts.
    let names: Vec<String> = step(&run, "pipeline")["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| str_of(&a["name"]).to_string())
        .collect();
    for i in 1..=6 {
        assert!(names.contains(&format!("results/naps/s{i}.txt")), "{names:?}");
    }
    fx.stop_daemon();
}

#[test]
fn a_killed_snakemake_resumes_in_its_working_copy_without_rerunning_a_completed_job() {
    let Some(fx) = Fx::new() else { return };
    killed_snakemake_resumes(&fx, None);
}

#[test]
fn a_killed_snakemake_on_the_ssh_target_resumes_there() {
    let Some(fx) = Fx::new() else { return };
    let Some(d) = sshd() else { return };
    let target = fx.add_target(&d);
    killed_snakemake_resumes(&fx, Some(target));
}
