//! Plans executed on SSH targets, against the real OpenSSH server on loopback
//! (`scripts/sshd-up.sh`) and the single-node Slurm (`scripts/slurm-up.sh`) that
//! `scripts/test.sh` starts: every step runs on the target under the step agent's supervisor, as a
//! detached process group (the `process` executor) or as an sbatch job (the `slurm` executor).
//!
//! The target is this machine, reached over SSH, so the tests read the target's files (the
//! attempt directories, the tool's own log) and processes directly.
//!
//! Covered: the bundled example planned and executed on both executors; readiness recorded in the
//! plan; cancellation and the step time limit stopping what runs there; an exit code mapped to its
//! outcome; a daemon killed with `kill -9` mid-step (the successor re-attaches, the step is never
//! launched twice); a dropped SSH connection mid-step; plan-time refusals that create nothing; and
//! the live log of a running remote step over the API. One test is ignored: it pins a known bug
//! (a Slurm step timed out across a daemon crash ends FAILED, not TIMED_OUT).
//!
//! Most tests run one step of the workflow `remote` over the tool
//! `fixtures/remote/tools/remote_tool.py`, which appends `start <step> <attempt> <pid>` to
//! `$CAIRN_RUN_DIR/launches` when it starts: that file is how the tests count launches.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::support::*;

const REMOTE_TOOL: &str = include_str!("../fixtures/remote/tools/remote_tool.py");

/// How long a remote run may take in these tests before a wait gives up (a hang, not a verdict).
const RUN_TIMEOUT: Duration = Duration::from_secs(90);

// ------------------------------------------------------------------------------------ services

/// Whether the test Slurm takes jobs on partition `debug`. `CAIRN_TEST_SLURM=1` (exported by
/// scripts/test.sh once Slurm came up) makes it a requirement: then an unusable Slurm fails the
/// test. Unset, a running Slurm is used and a missing one skips (scripts/test.sh leaves it unset
/// when Slurm did not come up: Slurm is optional there).
pub(crate) fn slurm() -> bool {
    let usable = Command::new("sinfo")
        .args(["-h", "-p", "debug", "-o", "%a"])
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "up");
    let required = std::env::var("CAIRN_TEST_SLURM").is_ok_and(|v| v == "1") || ci();
    match usable {
        true => true,
        false if required => {
            panic!("no test Slurm: partition `debug` is not up (scripts/slurm-up.sh, run by scripts/test.sh)")
        }
        _ => {
            eprintln!("SKIPPED: no test Slurm (run scripts/slurm-up.sh, or scripts/test.sh)");
            false
        }
    }
}

// ------------------------------------------------------------------------------------ fixture

/// One test's state root and scratch directory, with a target registered. Dropping it stops the
/// daemon, kills every tool the test launched that is still alive, cancels its Slurm jobs and
/// closes its SSH control connections (a passing test leaves nothing for it to do but the last).
struct Rt {
    c: Cairn,
    /// The scratch directory, canonical: run directories go here.
    base: PathBuf,
    sshd: PathBuf,
}

impl Drop for Rt {
    fn drop(&mut self) {
        if self.c.home().join("daemon.json").exists() {
            let _ = self.c.command(&["daemon", "stop"]).timeout(Duration::from_secs(30)).output();
        }
        for dir in self.run_dirs() {
            for (_, _, pid) in launches(&dir) {
                if alive(pid) {
                    kill_group(pid);
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
            }
            for job in job_ids(&dir) {
                let _ = Command::new("scancel").arg(&job).output();
            }
        }
        close_ssh_masters(&self.c);
    }
}

impl Rt {
    /// A fixture with the target `name` registered (`executor` `process` or `slurm`).
    fn new(sshd: PathBuf, name: &str, executor: &str) -> Rt {
        Rt::with(Cairn::new(), sshd, name, executor)
    }

    /// [`Rt::new`] on the state root `c` (a PostgreSQL registry, another host's name).
    fn with(c: Cairn, sshd: PathBuf, name: &str, executor: &str) -> Rt {
        let base = c.work.path().canonicalize().unwrap();
        let rt = Rt { c, base, sshd };
        rt.add_target(name, "root", executor, &rt.sshd.join("known_hosts")).expect(0);
        rt
    }

    fn add_target(&self, name: &str, user: &str, executor: &str, known_hosts: &Path) -> Out {
        let ssh = format!("{user}@127.0.0.1:{}", sshd_port());
        let mut extra = vec!["--executor", executor];
        if executor == "slurm" {
            extra.extend(["--partition", "debug"]);
        }
        self.c.add_target(name, &ssh, &self.sshd.join("id_ed25519"), known_hosts, self.base.to_str().unwrap(), &extra)
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.base.join(rel)
    }

    /// Every run directory this test made (those holding an `input.json`).
    fn run_dirs(&self) -> Vec<PathBuf> {
        std::fs::read_dir(&self.base)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join("input.json").is_file())
            .collect()
    }

    /// Registers the one-step workflow `remote` over [`REMOTE_TOOL`]; its tool's time limit is
    /// `timeout_secs`, and one attempt is all it gets (a failure is final, nothing is retried).
    fn remote_workflow(&self, timeout_secs: u64) {
        let toml = format!(
            r#"
[workflow]
name = "remote"
version = "1.0.0"

[tools.t]
command = ["python3", "tools/remote_tool.py"]
timeout_secs = {timeout_secs}

[[steps]]
id = "s"
tool = "t"
args = {{ sleep = "${{input.sleep}}", exit = "${{input.exit}}", stderr = "${{input.stderr}}" }}
max_attempts = 1
"#
        );
        self.c.add(&write_workflow(&self.c.path("remote"), &toml, &[("tools/remote_tool.py", REMOTE_TOOL)]));
    }

    /// Plans one run of `remote` (the tool sleeps `sleep` s, then exits `exit`) and returns the
    /// `execute-plan` argv for it, with the id and checksum `plan show` gives.
    #[track_caller]
    fn plan_remote(&self, target: &str, run_dir: &Path, sleep: f64, exit: i32, stderr: &[&str]) -> Vec<String> {
        let input = self.c.input(&json!({"sleep": sleep, "exit": exit, "stderr": stderr}));
        let name = run_dir.file_name().unwrap().to_str().unwrap();
        self.c.plan("remote", &input, target, run_dir, name).expect(0);
        assert!(!run_dir.exists(), "planning created {}", run_dir.display());
        self.approval(name)
    }

    /// The `execute-plan` argv (with `--json`) for the stored plan `name`, as `plan show` shows it.
    #[track_caller]
    fn approval(&self, name: &str) -> Vec<String> {
        let shown = self.c.json(&["plan", "show", name]).expect(0).json;
        let mut argv = approval(&shown);
        argv.push("--json".into());
        argv
    }

    /// Runs `execute-plan` in the foreground (the argv from [`Rt::approval`]).
    fn execute(&self, argv: &[String]) -> Out {
        let args: Vec<&str> = argv[..argv.len() - 1].iter().map(String::as_str).collect();
        self.c.json(&args)
    }

    /// The id of the test's one run, once `execute-plan` has created it.
    #[track_caller]
    fn run_id(&self) -> String {
        let mut id = None;
        assert!(
            wait_until(Duration::from_secs(30), || {
                id = self.c.runs().first().and_then(|r| r["run_id"].as_str().map(String::from));
                id.is_some()
            }),
            "no run was created"
        );
        id.unwrap()
    }

    /// Polls `cairn show RUN` until the run is no longer RUNNING (or QUEUED); returns it.
    #[track_caller]
    fn wait_finished(&self, run_id: &str, timeout: Duration) -> Value {
        let mut run = Value::Null;
        let done = wait_until(timeout, || {
            run = self.c.show(run_id);
            !matches!(run["status"].as_str(), Some("RUNNING") | Some("QUEUED") | Some("PENDING"))
        });
        assert!(done, "run {run_id} did not finish within {timeout:?}: {run:#}\ndaemon log:\n{}", self.c.daemon_log());
        run
    }

    /// A query against `$CAIRN_HOME/cairn.db` with the sqlite3 CLI (read-only).
    #[track_caller]
    fn sql(&self, query: &str) -> String {
        self.c.sql(&[], query).expect("the sqlite3 CLI (scripts/test.sh installs it)").trim().to_string()
    }

    /// The `remote_json` the registry holds for one step of a run.
    #[track_caller]
    fn remote_json(&self, run_id: &str, step_id: &str) -> Value {
        let text = self
            .sql(&format!("SELECT remote_json FROM tool_calls WHERE run_id = '{run_id}' AND step_id = '{step_id}'"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("remote_json of {run_id}/{step_id} `{text}`: {e}"))
    }

    /// Stops the daemon and checks it is gone.
    #[track_caller]
    fn stop(&self) {
        self.c.stop_daemon_within(Duration::from_secs(10));
    }
}

/// `(step, attempt, pid)` of every launch the tool recorded in `<run_dir>/launches`.
fn launches(run_dir: &Path) -> Vec<(String, u32, i32)> {
    log_lines(&run_dir.join("launches"))
        .iter()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                ["start", step, attempt, pid] => Some((step.to_string(), attempt.parse().ok()?, pid.parse().ok()?)),
                _ => None,
            }
        })
        .collect()
}

/// Waits until the tool of `step` has started on the target; returns its pid.
#[track_caller]
fn wait_launched(run_dir: &Path, step: &str) -> i32 {
    let mut pid = None;
    assert!(
        wait_until(Duration::from_secs(30), || {
            pid = launches(run_dir).iter().find(|(s, _, _)| s == step).map(|l| l.2);
            pid.is_some()
        }),
        "the tool of step {step} never started in {}",
        run_dir.display()
    );
    pid.unwrap()
}

/// The attempt directories `step` has on the target.
fn attempts_of(run_dir: &Path, step: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(run_dir.join("steps").join(step).join(".cairn"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Waits for the supervisor's `pid.json` of an attempt; returns it.
#[track_caller]
fn wait_pid_json(dir: &Path) -> Value {
    let mut v = None;
    assert!(
        wait_until(Duration::from_secs(30), || {
            v = try_read_json(&dir.join("pid.json"));
            v.is_some()
        }),
        "no pid.json in {}",
        dir.display()
    );
    v.unwrap()
}

/// Every Slurm job id recorded in a run directory's attempt directories.
fn job_ids(run_dir: &Path) -> Vec<String> {
    let mut ids = Vec::new();
    for step in std::fs::read_dir(run_dir.join("steps")).into_iter().flatten().flatten() {
        for attempt in std::fs::read_dir(step.path().join(".cairn")).into_iter().flatten().flatten() {
            if let Some(id) =
                try_read_json(&attempt.path().join("pid.json")).and_then(|v| v["job_id"].as_str().map(String::from))
            {
                ids.push(id);
            }
        }
    }
    ids
}

/// `scontrol show job -o ID` as key → value.
fn slurm_job(id: &str) -> std::collections::BTreeMap<String, String> {
    let out = Command::new("scontrol").args(["show", "job", "-o", id]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

/// Waits until Slurm reports `state` for job `id`.
#[track_caller]
fn wait_job_state(id: &str, state: &str) {
    let mut last = String::new();
    assert!(
        wait_until(Duration::from_secs(20), || {
            last = slurm_job(id).get("JobState").cloned().unwrap_or_default();
            last == state
        }),
        "Slurm job {id} is {last}, expected {state}: {:?}",
        slurm_job(id)
    );
}

/// Live processes whose process group is `pgid`.
fn group_members(pgid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    for pid in pids() {
        let Some(fields) = stat(pid) else { continue };
        // After the command: state, ppid, pgrp.
        if fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid) && alive(pid) {
            found.push(pid);
        }
    }
    found
}

/// Waits until nothing of a process group is left.
#[track_caller]
fn wait_group_gone(pgid: i32, what: &str) {
    assert!(
        wait_until(Duration::from_secs(15), || group_members(pgid).is_empty()),
        "{what}: the process group {pgid} is still alive: {:?}",
        group_members(pgid).iter().map(|p| describe_pid(*p)).collect::<Vec<_>>()
    );
}

// ------------------------------------------------------------------------------------ the example

/// Plans the example on `target`, checks the plan (readiness observed on the target, nothing
/// created), executes it and checks the run and what it left on the target. Returns the run
/// directory and the run.
fn example_on(rt: &Rt, target: &str, executor: &str) -> (PathBuf, Value) {
    rt.c.add(&example("1.2.0"));
    let run_dir = rt.p("example-run");
    let plan =
        rt.c.plan("release-validation", &example("inputs/ready.json"), target, &run_dir, "example").expect(0).json;
    assert_eq!(plan["target"], target, "{plan:#}");
    let ready = &plan["readiness"];
    assert_eq!(ready["target"], target, "{ready:#}");
    assert_eq!(ready["executor"], executor, "{ready:#}");
    let observed = &ready["observed"];
    assert_eq!(observed["run_dir"], run_dir.to_str().unwrap(), "{ready:#}");
    assert_eq!(observed["parent_writable"], true, "{ready:#}");
    assert_eq!(observed["run_dir_absent"], true, "{ready:#}");
    assert_eq!(observed["parent_is_dir"], true, "{ready:#}");
    // Read-only: no run_dir, no run, no daemon.
    assert!(!run_dir.exists(), "planning created {}", run_dir.display());
    assert!(rt.c.runs().is_empty(), "planning created a run");
    assert!(!rt.c.home().join("daemon.json").exists(), "planning started a daemon");

    let argv = rt.approval("example");
    let out = rt.execute(&argv);
    assert_eq!(
        out.code,
        0,
        "execute-plan on `{target}`\nstdout: {}\nstderr: {}\ndaemon log:\n{}",
        out.stdout,
        out.stderr,
        rt.c.daemon_log()
    );
    let run = out.json;
    assert_eq!(run["status"], "READY", "{run:#}");
    assert_eq!(run["run_dir"], run_dir.to_str().unwrap(), "{run:#}");
    for id in EXAMPLE_STEPS {
        assert_eq!(step(&run, id)["status"], "COMPLETED", "{id}: {run:#}");
    }

    // What the run left on the target: the planned input, the deployed workflow, and one attempt
    // directory per step whose supervisor recorded a clean exit.
    let input: Value = read_json(&example("inputs/ready.json"));
    let written: Value = serde_json::from_slice(&std::fs::read(run_dir.join("input.json")).unwrap()).unwrap();
    assert_eq!(written, input, "input.json on the target");
    assert!(run_dir.join("workflow/workflow.toml").is_file());
    assert!(run_dir.join("workflow/tools/load_manifest.py").is_file());
    let run_id = str_of(&run["run_id"]).to_string();
    for id in EXAMPLE_STEPS {
        let dir = attempt_dir(&run_dir, id, 1);
        assert_eq!(attempts_of(&run_dir, id), ["attempt-1"], "{id}");
        let exit = read_json(&dir.join("exit.json"));
        assert_eq!(exit["exit_code"], 0, "{id}: {exit}");
        assert_eq!(exit["timed_out"], false, "{id}: {exit}");
        for f in ["request.json", "stdin.json", "stdout", "stderr", "pid.json"] {
            assert!(dir.join(f).is_file(), "{id}: no {f} in {}", dir.display());
        }
        // The registry recorded where the step ran, and the nonce the supervisor holds.
        let remote = rt.remote_json(&run_id, id);
        assert_eq!(remote["target"], target, "{id}: {remote}");
        assert_eq!(remote["attempt_dir"], dir.to_str().unwrap(), "{id}: {remote}");
        let ident = read_json(&dir.join("pid.json"));
        assert_eq!(remote["nonce"], ident["nonce"], "{id}: registry {remote} vs pid.json {ident}");
    }
    // The evidence report, hashed on the target by the step agent: the very bytes there.
    let evidence = step(&run, "generate_evidence");
    let names: Vec<&str> = evidence["artifacts"].as_array().unwrap().iter().map(|a| str_of(&a["name"])).collect();
    assert_eq!(names, ["report", "summary"], "{evidence:#}");
    crate::evidence::assert_on_disk(&run);
    (run_dir, run)
}

/// A run on an SSH target: its outputs are hashed there by the step agent; a replay planned on
/// the same target materialises the reused bytes there (a hard link), and `trace` finds them from
/// a local copy; a replay planned elsewhere cannot reuse them, and bytes edited on the target are
/// not reused either — each with its reason in the plan.
#[test]
fn the_evidence_of_an_ssh_run_is_hashed_and_reused_on_its_target() {
    use crate::evidence::{MIB, artifacts, evidence_workflow, input, render_files, sha256_file};
    let Some(d) = sshd() else { return };
    let rt = Rt::new(d, "box", "process");
    evidence_workflow(&rt.c);
    let src_dir = rt.p("ev-src");
    let input_file = rt.c.input(&input(&rt.c, render_files(MIB)));
    rt.c.plan("evidence", &input_file, "box", &src_dir, "ev-src").expect(0);
    let source = rt.execute(&rt.approval("ev-src")).expect(0).json;
    assert_eq!(source["status"], "READY", "{source:#}\n{}", rt.c.daemon_log());
    assert_eq!(artifacts(&source, "render").len(), 4, "{source:#}");
    crate::evidence::assert_on_disk(&source);
    let source_id = str_of(&source["run_id"]).to_string();

    // A replay on the same target: `render` is reused, its bytes linked there.
    let plan_replay = |target: &str, dir: &Path, name: &str| {
        let out = rt.c.json(&[
            "plan",
            "--replay",
            &source_id,
            "--step",
            "publish",
            "--target",
            target,
            "--run-dir",
            dir.to_str().unwrap(),
            "--name",
            name,
        ]);
        out.expect(0).json
    };
    let decision = |plan: &Value, id: &str| {
        plan["replay"]["decisions"].as_array().unwrap().iter().find(|x| x["step_id"] == id).cloned().unwrap()
    };
    let child_dir = rt.p("ev-child");
    let plan = plan_replay("box", &child_dir, "ev-child");
    assert_eq!(decision(&plan, "render")["decision"], "reuse", "{plan:#}");
    let child = rt.execute(&rt.approval("ev-child")).expect(0).json;
    assert_eq!(child["status"], "READY", "{child:#}\n{}", rt.c.daemon_log());
    crate::evidence::assert_on_disk(&child);
    let rel = "steps/render/report.html";
    use std::os::unix::fs::MetadataExt;
    let (a, b) = (std::fs::metadata(src_dir.join(rel)).unwrap(), std::fs::metadata(child_dir.join(rel)).unwrap());
    assert_eq!(a.ino(), b.ino(), "the agent linked the reused report on the target");
    assert_eq!(artifacts(&child, "render")[3]["reused_from"], source_id.as_str());

    // `trace` on a local copy of the target's file.
    let copy = rt.c.path("report-copy.html");
    std::fs::copy(child_dir.join(rel), &copy).unwrap();
    let traced = rt.c.json(&["trace", copy.to_str().unwrap()]).expect(0).json;
    let runs: Vec<&str> = traced["matches"].as_array().unwrap().iter().map(|m| str_of(&m["run_id"])).collect();
    assert_eq!(runs, [source_id.as_str(), str_of(&child["run_id"])], "{traced:#}");

    // Planned on this machine, the target's files cannot be reused.
    let local = plan_replay("local", &rt.p("ev-local"), "ev-local");
    let why = str_of(&decision(&local, "render")["text"]).to_string();
    assert!(why.contains("on target `box`, and this replay runs on `local`"), "{why}");

    // Edited on the target: not reused, and the plan says which bytes changed.
    std::fs::write(src_dir.join(rel), "edited on the target").unwrap();
    let edited = plan_replay("box", &rt.p("ev-edited"), "ev-edited");
    let why = str_of(&decision(&edited, "render")["text"]).to_string();
    let now = sha256_file(&src_dir.join(rel));
    assert!(why.contains("output report of step render changed since run") && why.contains(&now[..12]), "{why}");
    rt.stop();
}

/// A run on an SSH target exported as an RO-Crate: its artifacts and the input file bound on the
/// target are read there over SSH (through the step agent) and checked against their records, and
/// the target — its address, executor and the facts its plan observed — is the agent of every
/// attempt. Without data, the files are referenced on the target's host by path and hash.
#[test]
fn the_rocrate_of_an_ssh_run_names_its_target_as_the_agent_and_copies_the_evidence_from_there() {
    rocrate_of_a_remote_run("process");
}

/// The same through Slurm: the target's executor is `slurm`, its facts name `sbatch`.
#[test]
fn the_rocrate_of_a_slurm_run_names_its_target_as_the_agent() {
    if sshd().is_some() && slurm() {
        rocrate_of_a_remote_run("slurm");
    }
}

fn rocrate_of_a_remote_run(executor: &str) {
    use crate::evidence::{evidence_workflow, input, render_files, sha256_file};
    use crate::rocrate::{assert_artifacts_in, assert_valid, entity, export, metadata};
    let Some(d) = sshd() else { return };
    let rt = Rt::new(d, "box", executor);
    evidence_workflow(&rt.c);
    let data = rt.p("samples.csv");
    std::fs::write(&data, "sample,reads\nA,120\n").unwrap();
    let mut inp = input(&rt.c, render_files(3 << 20));
    inp["data"] = json!(data.to_str().unwrap());
    let run_dir = rt.p("ev-crate");
    rt.c.plan("evidence", &rt.c.input(&inp), "box", &run_dir, "ev-crate").expect(0);
    let run = rt.execute(&rt.approval("ev-crate")).expect(0).json;
    assert_eq!(run["status"], "READY", "{run:#}\n{}", rt.c.daemon_log());
    let run_id = str_of(&run["run_id"]).to_string();

    let (dir, out) = export(&rt.c, &run_id, &[]);
    assert_eq!(out["input_files"], 1, "{out:#}");
    assert_valid(&rt.c, &dir);
    let meta = metadata(&dir);
    assert_artifacts_in(&run, &dir, &meta);
    let copied = format!("inputs{}", data.display());
    assert_eq!(entity(&meta, &copied)["sha256"], sha256_file(&data));
    let target = entity(&meta, "#target-box");
    assert!(str_of(&target["identifier"]).ends_with(&format!("@127.0.0.1:{}", sshd_port())), "{target:#}");
    assert!(str_of(&target["description"]).contains(&format!("executor {executor}")), "{target:#}");
    let facts = read_json(&dir.join(str_of(&target["subjectOf"]["@id"])));
    assert_eq!(facts["source"], "the plan's readiness check", "{facts:#}");
    assert_eq!(facts["facts"]["observed"]["run_dir"], run_dir.to_str().unwrap(), "{facts:#}");
    if executor == "slurm" {
        assert!(facts["facts"]["observed"]["programs"]["sbatch"].is_string(), "{facts:#}");
    }
    assert_eq!(entity(&meta, "targets/box.json")["sha256"], sha256_file(&dir.join("targets/box.json")));
    for s in run["steps"].as_array().unwrap() {
        let action = entity(&meta, &format!("#run-{run_id}-step-{}-attempt-1", str_of(&s["step_id"])));
        assert_eq!(action["agent"]["@id"], "#target-box", "{action:#}");
    }

    // The agent reads the report there, nothing copied back: the same bytes as recorded.
    let daemon = rt.c.daemon();
    let url = format!("{}/runs/{run_id}/steps/render/artifacts/report", daemon.url);
    let read = http("GET", &url, Some(&rt.c.token("viewer")), None, &[]);
    assert_eq!(read.status, 200, "{}", read.text);
    assert_eq!(
        (read.body["target"].as_str(), read.body["text"].as_str()),
        (Some("box"), Some("<h1>release 2.4.1</h1>"))
    );
    assert_eq!(read.body["sha256"], crate::evidence::artifacts(&run, "render")[3]["sha256"], "{}", read.text);

    let bare = rt.p("bare.crate");
    rt.c.json(&["export", &run_id, "--no-data", "--ro-crate", bare.to_str().unwrap()]).expect(0);
    assert_valid(&rt.c, &bare);
    let meta = metadata(&bare);
    let on_target = format!("file://127.0.0.1{}", run_dir.join("steps/render/report.html").display());
    assert_eq!(entity(&meta, &on_target)["sha256"], crate::evidence::artifacts(&run, "render")[3]["sha256"]);
    let input_there = entity(&meta, &format!("file://127.0.0.1{}", data.display()));
    assert_eq!(input_there["sha256"], sha256_file(&data), "{input_there:#}");
    assert_eq!(input_there["contentSize"], std::fs::metadata(&data).unwrap().len().to_string(), "{input_there:#}");
    rt.stop();
}

/// The bundled example, planned and executed on an SSH target with the process executor.
#[test]
fn the_example_runs_on_an_ssh_target_with_the_process_executor() {
    let Some(d) = sshd() else { return };
    let rt = Rt::new(d, "box", "process");
    let (run_dir, run) = example_on(&rt, "box", "process");
    let run_id = str_of(&run["run_id"]);
    for id in EXAMPLE_STEPS {
        let ident = read_json(&attempt_dir(&run_dir, id, 1).join("pid.json"));
        let pid = ident["pid"].as_i64().unwrap_or_else(|| panic!("{id}: no pid in {ident}")) as i32;
        assert_eq!(ident["pgid"], pid, "{id}: the tool leads its own process group: {ident}");
        assert!(ident["start_time"].is_u64() && ident["supervisor_pid"].is_u64(), "{id}: {ident}");
        assert!(!alive(pid), "{id}: the tool (pid {pid}) outlived its step");
        let remote = rt.remote_json(run_id, id);
        assert_eq!(remote["pid"], pid, "{id}: {remote}");
        assert_eq!(remote["start_time"], ident["start_time"], "{id}: {remote}");
    }
    rt.stop();
}

/// The bundled example through Slurm: every step is one sbatch job that Slurm reports COMPLETED.
#[test]
fn the_example_runs_through_slurm_on_an_ssh_target() {
    let Some(d) = sshd() else { return };
    if !slurm() {
        return;
    }
    let rt = Rt::new(d, "hpc", "slurm");
    let (run_dir, run) = example_on(&rt, "hpc", "slurm");
    let plan = rt.c.json(&["plan", "show", "example"]).expect(0).json;
    for program in ["sbatch", "squeue", "scancel", "scontrol"] {
        let found = &plan["readiness"]["observed"]["programs"][program];
        assert!(found.as_str().is_some_and(|p| p.ends_with(program)), "readiness names {program}: {found}");
    }
    let run_id = str_of(&run["run_id"]);
    let mut jobs = Vec::new();
    for id in EXAMPLE_STEPS {
        let ident = read_json(&attempt_dir(&run_dir, id, 1).join("pid.json"));
        let job = ident["job_id"].as_str().unwrap_or_else(|| panic!("{id}: no job_id in {ident}")).to_string();
        assert_eq!(rt.remote_json(run_id, id)["job_id"], job.as_str(), "{id}");
        let info = slurm_job(&job);
        assert_eq!(info.get("JobState").map(String::as_str), Some("COMPLETED"), "{id}: job {job}: {info:?}");
        assert_eq!(info.get("JobName"), Some(&format!("cairn-{}", str_of(&ident["nonce"]))), "{id}: {info:?}");
        assert_eq!(info.get("Partition").map(String::as_str), Some("debug"), "{id}: {info:?}");
        jobs.push(job);
    }
    jobs.sort();
    jobs.dedup();
    assert_eq!(jobs.len(), EXAMPLE_STEPS.len(), "one job per step: {jobs:?}");
    rt.stop();
}

// ------------------------------------------------------------------------------------ stopping

/// `cairn cancel` of a run whose step sleeps 60 s on the target: the run ends CANCELLED within a
/// few seconds, and what ran there is gone.
fn cancel_a_long_step(executor: &str) {
    let Some(d) = sshd() else { return };
    if executor == "slurm" && !slurm() {
        return;
    }
    let rt = Rt::new(d, "t", executor);
    rt.remote_workflow(120);
    let run_dir = rt.p("cancelled");
    let argv = rt.plan_remote("t", &run_dir, 60.0, 0, &[]);
    let mut follower = rt.c.spawn(&argv);
    let tool = wait_launched(&run_dir, "s");
    let ident = wait_pid_json(&attempt_dir(&run_dir, "s", 1));
    let run_id = rt.run_id();
    assert_eq!(rt.c.show(&run_id)["status"], "RUNNING");
    if executor == "slurm" {
        wait_job_state(str_of(&ident["job_id"]), "RUNNING");
    }

    let asked = Instant::now();
    let out = rt.c.json(&["cancel", &run_id]);
    assert_eq!(out.code, 0, "cancel\nstdout: {}\nstderr: {}", out.stdout, out.stderr);
    let Exited { code, stdout, stderr, .. } = wait_exit(&mut follower, Duration::from_secs(30));
    let took = asked.elapsed();
    assert_eq!(code, Some(3), "the follower of a cancelled run exits 3\nstdout: {stdout}\nstderr: {stderr}");
    assert!(took < Duration::from_secs(10), "cancelling took {took:?}");
    let run = rt.c.show(&run_id);
    assert_eq!(run["status"], "CANCELLED", "{run:#}");
    assert_eq!(parse_stdout(&stdout, 3, "execute-plan")["status"], "CANCELLED", "{stdout}");

    match executor {
        "process" => {
            let pgid = ident["pgid"].as_i64().unwrap() as i32;
            assert_eq!(ident["pid"], tool, "pid.json names the tool: {ident}");
            assert!(wait_until(Duration::from_secs(10), || !alive(tool)), "the cancelled tool (pid {tool}) lives on");
            wait_group_gone(pgid, "after cancel");
            // The supervisor (the target's serving agent, which goes on serving other steps)
            // recorded how the tool ended.
            let attempt = attempt_dir(&run_dir, "s", 1);
            assert!(
                wait_until(Duration::from_secs(10), || attempt.join("exit.json").is_file()),
                "the supervisor recorded no end in {}",
                attempt.display()
            );
        }
        _ => {
            wait_job_state(str_of(&ident["job_id"]), "CANCELLED");
            assert!(
                wait_until(Duration::from_secs(15), || !alive(tool)),
                "the cancelled job's tool (pid {tool}) lives on"
            );
        }
    }
    assert!(!log_lines(&run_dir.join("launches")).iter().any(|l| l.starts_with("end ")), "the tool ran to its end");
    assert_eq!(launches(&run_dir).len(), 1, "{:?}", log_lines(&run_dir.join("launches")));
    rt.stop();
}

#[test]
fn cancelling_a_remote_step_stops_its_process_group() {
    cancel_a_long_step("process");
}

#[test]
fn cancelling_a_slurm_step_cancels_its_job() {
    cancel_a_long_step("slurm");
}

/// A tool over its time limit (2 s, sleeping 60 s) on the target: the step ends TIMED_OUT, the run
/// FAILED, the error names the timeout, and nothing of the tool is left. Slurm's own limits are
/// whole minutes, so there it is Cairn's deadline (scancel) that stops the job.
fn a_step_over_its_time_limit(executor: &str) {
    let Some(d) = sshd() else { return };
    if executor == "slurm" && !slurm() {
        return;
    }
    let rt = Rt::new(d, "t", executor);
    // The limit counts from the submission: under Slurm a loaded scheduler has taken over 2 s to
    // start the job, which then timed out before its tool ever ran. 8 s lets it start first.
    let limit = if executor == "slurm" { 8 } else { 2 };
    rt.remote_workflow(limit);
    let run_dir = rt.p("slow");
    let argv = rt.plan_remote("t", &run_dir, 60.0, 0, &[]);
    let started = Instant::now();
    let out = rt.execute(&argv);
    let took = started.elapsed();
    assert_eq!(out.code, 3, "a timed-out step fails the run\nstdout: {}\nstderr: {}", out.stdout, out.stderr);
    assert!(took < Duration::from_secs(30), "the {limit} s limit took {took:?} to act");
    let run = out.json;
    assert_eq!(run["status"], "FAILED", "{run:#}");
    let st = step(&run, "s");
    assert_eq!(st["outcome"], "TIMED_OUT", "{run:#}");
    let error = st["error"].as_str().unwrap_or_default();
    assert!(error.contains("timeout"), "the step error names the timeout: {error}");
    assert!(run["error"].as_str().is_some_and(|e| e.contains("TIMED_OUT")), "{run:#}");

    let tool = wait_launched(&run_dir, "s");
    assert!(wait_until(Duration::from_secs(15), || !alive(tool)), "the timed-out tool (pid {tool}) lives on");
    let ident = read_json(&attempt_dir(&run_dir, "s", 1).join("pid.json"));
    match executor {
        "process" => {
            wait_group_gone(ident["pgid"].as_i64().unwrap() as i32, "after the timeout");
            let exit = read_json(&attempt_dir(&run_dir, "s", 1).join("exit.json"));
            assert_eq!(exit["timed_out"], true, "{exit}");
        }
        _ => {
            let job = str_of(&ident["job_id"]);
            let mut state = String::new();
            assert!(
                wait_until(Duration::from_secs(20), || {
                    state = slurm_job(job).get("JobState").cloned().unwrap_or_default();
                    matches!(state.as_str(), "CANCELLED" | "TIMEOUT")
                }),
                "the timed-out job {job} is {state}"
            );
        }
    }
    assert_eq!(attempts_of(&run_dir, "s"), ["attempt-1"], "one attempt (max_attempts = 1)");
    rt.stop();
}

#[test]
fn a_remote_step_over_its_time_limit_is_timed_out() {
    a_step_over_its_time_limit("process");
}

#[test]
fn a_slurm_step_over_its_time_limit_is_timed_out() {
    a_step_over_its_time_limit("slurm");
}

/// A remote tool exiting 65: INVALID_INPUT, the run FAILED (exit 3), the error says code 65.
#[test]
fn a_remote_tool_exiting_65_is_invalid_input() {
    let Some(d) = sshd() else { return };
    let rt = Rt::new(d, "t", "process");
    rt.remote_workflow(30);
    let run_dir = rt.p("bad-input");
    let argv = rt.plan_remote("t", &run_dir, 0.0, 65, &[]);
    let out = rt.execute(&argv);
    assert_eq!(out.code, 3, "stdout: {}\nstderr: {}", out.stdout, out.stderr);
    let run = out.json;
    assert_eq!(run["status"], "FAILED", "{run:#}");
    let st = step(&run, "s");
    assert_eq!(st["outcome"], "INVALID_INPUT", "{run:#}");
    assert!(st["error"].as_str().is_some_and(|e| e.contains("code 65")), "{run:#}");
    assert!(run["error"].as_str().is_some_and(|e| e.contains("INVALID_INPUT") && e.contains("code 65")), "{run:#}");
    let exit = read_json(&attempt_dir(&run_dir, "s", 1).join("exit.json"));
    assert_eq!(exit["exit_code"], 65, "{exit}");
    assert_eq!(launches(&run_dir).len(), 1, "INVALID_INPUT is not retried");
    rt.stop();
}

// ------------------------------------------------------------------------------------ crashes

/// The daemon killed with `kill -9` while a remote step runs: the next daemon re-attaches to the
/// step (after checking its nonce) and finishes the run READY; the tool was launched exactly once.
fn daemon_killed_mid_step(executor: &str) {
    let Some(d) = sshd() else { return };
    if executor == "slurm" && !slurm() {
        return;
    }
    let rt = Rt::new(d, "t", executor);
    rt.remote_workflow(60);
    let run_dir = rt.p("crash");
    let argv = rt.plan_remote("t", &run_dir, 5.0, 0, &[]);
    let mut follower = rt.c.spawn(&argv);
    let tool = wait_launched(&run_dir, "s");
    let ident = wait_pid_json(&attempt_dir(&run_dir, "s", 1));
    let run_id = rt.run_id();
    // The launch's identity is in the registry before the daemon dies.
    assert!(
        wait_until(Duration::from_secs(10), || {
            let r = rt.remote_json(&run_id, "s");
            r["nonce"] == ident["nonce"] && (r["pid"].is_u64() || r["job_id"].is_string())
        }),
        "the launch was not recorded: {}",
        rt.remote_json(&run_id, "s")
    );

    let first = rt.c.daemon().pid;
    kill(Pid::from_raw(first), Signal::SIGKILL).unwrap();
    assert!(wait_until(Duration::from_secs(5), || !alive(first)), "daemon {first} survived SIGKILL");
    assert!(alive(tool), "the remote tool must outlive the daemon");
    let Exited { code, stdout, stderr, .. } = wait_exit(&mut follower, Duration::from_secs(20));
    assert!(code.is_some(), "execute-plan hung after its daemon was killed\nstderr: {stderr}");
    assert_ne!(code, Some(0), "execute-plan claimed success without seeing the end\nstdout: {stdout}");

    let second = rt.c.start_daemon().pid;
    assert_ne!(second, first);
    let run = rt.wait_finished(&run_id, RUN_TIMEOUT);
    assert_eq!(run["status"], "READY", "{run:#}\ndaemon log:\n{}", rt.c.daemon_log());
    assert_eq!(step(&run, "s")["status"], "COMPLETED", "{run:#}");

    let launched = launches(&run_dir);
    assert_eq!(launched.len(), 1, "the tool was launched {} times: {launched:?}", launched.len());
    assert_eq!(launched[0], ("s".to_string(), 1, tool));
    assert_eq!(count(&log_lines(&run_dir.join("launches")), "end s"), 1);
    assert_eq!(attempts_of(&run_dir, "s"), ["attempt-1"], "a second attempt was launched");
    let events = rt.c.events(&run_id);
    assert_eq!(events_of(&events, "step.reattached", Some("s")).len(), 1, "{:?}", kinds(&events));
    assert_eq!(events_of(&events, "step.started", Some("s")).len(), 1, "{:?}", kinds(&events));
    assert_eq!(events_of(&events, "run.finished", None).len(), 1, "{:?}", kinds(&events));
    if executor == "slurm" {
        wait_job_state(str_of(&ident["job_id"]), "COMPLETED");
    }
    rt.stop();
}

/// Two hosts' daemons on one PostgreSQL registry: a run on an SSH target, its daemon killed
/// (kill -9) on host one. The daemon of host two cannot tell from there that it died, so it waits
/// for its lease to expire; then, the target being reached from any host, it takes the run over,
/// re-attaches to the launch on the target (the tool launched once, never twice), and finishes it.
#[test]
fn a_remote_run_of_a_lost_host_is_continued_by_a_daemon_of_another_host() {
    let Some(d) = sshd() else { return };
    let Some(c) = Cairn::on(cairn_store::testing::Kind::Postgres) else { return };
    let url = c.database().unwrap().url.clone();
    let rt = Rt::with(c.with_env("CAIRN_HOST_ID", "host-one"), d, "t", "process");
    rt.remote_workflow(60);
    rt.c.raw(&["daemon", "start", "--lease-secs", "2"]).expect(0);
    let other = Cairn::new().with_env("CAIRN_HOST_ID", "host-two");
    other.raw(&["daemon", "start", "--database", &url, "--lease-secs", "2"]).expect(0);
    other.add(&rt.c.path("remote"));

    let run_dir = rt.p("handover");
    let argv = rt.plan_remote("t", &run_dir, 8.0, 0, &[]);
    let mut follower = rt.c.spawn(&argv);
    let tool = wait_launched(&run_dir, "s");
    let ident = wait_pid_json(&attempt_dir(&run_dir, "s", 1));
    let run_id = rt.run_id();
    let sql = format!("SELECT remote_json FROM tool_calls WHERE run_id = '{run_id}' AND step_id = 's'");
    let recorded = || -> Value {
        rt.c.database().unwrap().text(&sql).and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default()
    };
    assert!(
        wait_until(Duration::from_secs(10), || {
            let r = recorded();
            r["nonce"] == ident["nonce"] && r["pid"].is_u64()
        }),
        "the launch was not recorded: {}",
        recorded()
    );
    let first = rt.c.daemon().pid;
    kill(Pid::from_raw(first), Signal::SIGKILL).unwrap();
    let killed = std::time::Instant::now();
    let _ = wait_exit(&mut follower, Duration::from_secs(20));
    assert!(alive(tool), "the remote tool must outlive its daemon");

    let leased = other.wait_for_event(&run_id, Duration::from_secs(20), |e| e["kind"] == "run.leased");
    assert!(killed.elapsed() >= Duration::from_millis(1_300), "taken over before the 2 s lease could expire");
    assert_eq!(leased["data"]["host"], "host-two", "{leased}");
    let run = other.wait_for_status(&run_id, "READY", RUN_TIMEOUT);
    assert_eq!(step(&run, "s")["status"], "COMPLETED", "{run:#}");
    let launched = launches(&run_dir);
    assert_eq!(launched.len(), 1, "the tool was launched {} times: {launched:?}", launched.len());
    assert_eq!(attempts_of(&run_dir, "s"), ["attempt-1"], "a second attempt was launched");
    let events = other.events(&run_id);
    assert_eq!(events_of(&events, "step.reattached", Some("s")).len(), 1, "{:?}", kinds(&events));
    other.stop_daemon();
}

#[test]
fn a_daemon_killed_during_a_remote_step_is_reattached() {
    daemon_killed_mid_step("process");
}

#[test]
fn a_daemon_killed_during_a_slurm_step_is_reattached() {
    daemon_killed_mid_step("slurm");
}

/// A Slurm step over its time limit while its daemon is down: the successor re-attaches and the
/// step must still end TIMED_OUT, as it does with the process executor and without a crash. The
/// agent that outlived its daemon scancels the job at the deadline; the `timed_out` marker it
/// writes first is what tells the successor's `wait` why the job ended CANCELLED.
#[test]
fn a_slurm_step_timed_out_across_a_daemon_crash_is_timed_out() {
    let Some(d) = sshd() else { return };
    if !slurm() {
        return;
    }
    let rt = Rt::new(d, "t", "slurm");
    rt.remote_workflow(3);
    let run_dir = rt.p("crash-timeout");
    let argv = rt.plan_remote("t", &run_dir, 30.0, 0, &[]);
    let mut follower = rt.c.spawn(&argv);
    wait_launched(&run_dir, "s");
    let run_id = rt.run_id();
    let first = rt.c.daemon().pid;
    kill(Pid::from_raw(first), Signal::SIGKILL).unwrap();
    assert!(wait_until(Duration::from_secs(5), || !alive(first)), "daemon {first} survived SIGKILL");
    wait_exit(&mut follower, Duration::from_secs(20));
    // Down past the step's deadline.
    std::thread::sleep(Duration::from_secs(4));
    rt.c.start_daemon();
    let run = rt.wait_finished(&run_id, RUN_TIMEOUT);
    assert_eq!(run["status"], "FAILED", "{run:#}");
    assert_eq!(step(&run, "s")["outcome"], "TIMED_OUT", "{run:#}");
    assert!(step(&run, "s")["error"].as_str().is_some_and(|e| e.contains("timeout")), "{run:#}");
    assert_eq!(launches(&run_dir).len(), 1);
    rt.stop();
}

/// The SSH connection drops mid-step (the daemon's ssh client and the control master of the
/// target are killed): the follower waits again over a new connection, and the step completes
/// once.
#[test]
fn a_dropped_ssh_connection_mid_step_is_followed_again() {
    let Some(d) = sshd() else { return };
    let rt = Rt::new(d, "t", "process");
    rt.remote_workflow(60);
    let run_dir = rt.p("dropped");
    let argv = rt.plan_remote("t", &run_dir, 6.0, 0, &[]);
    let mut follower = rt.c.spawn(&argv);
    let tool = wait_launched(&run_dir, "s");
    wait_pid_json(&attempt_dir(&run_dir, "s", 1));
    let run_id = rt.run_id();

    // What `pkill -f ControlPath=<home>/ssh` would hit, by pid: the client (its argv names the
    // control path) and the master (its title does).
    let killed = kill_ssh_of(&rt.c);
    assert!(!killed.is_empty(), "no ssh process of this state root was running mid-step");
    assert!(alive(tool), "the remote tool must outlive the connection");

    let Exited { code, stdout, stderr, .. } = wait_exit(&mut follower, RUN_TIMEOUT);
    assert_eq!(code, Some(0), "stdout: {stdout}\nstderr: {stderr}\ndaemon log:\n{}", rt.c.daemon_log());
    let run = parse_stdout(&stdout, 0, "execute-plan");
    assert_eq!(run["status"], "READY", "{run:#}");
    let launched = launches(&run_dir);
    assert_eq!(launched.len(), 1, "the tool was launched {} times: {launched:?}", launched.len());
    assert_eq!(count(&log_lines(&run_dir.join("launches")), "end s"), 1);
    assert_eq!(attempts_of(&run_dir, "s"), ["attempt-1"]);
    assert_eq!(step(&run, "s")["attempts"], 1, "{run:#}");
    let events = rt.c.events(&run_id);
    assert_eq!(events_of(&events, "step.started", Some("s")).len(), 1, "{:?}", kinds(&events));
    rt.stop();
}

/// SIGKILLs every ssh process of this state root (client or control master); returns their pids.
fn kill_ssh_of(c: &Cairn) -> Vec<i32> {
    let needles: Vec<String> =
        [c.home.path().to_path_buf(), c.home()].iter().map(|h| format!("{}/ssh/", h.display())).collect();
    let mut killed = Vec::new();
    for (pid, cmdline) in processes() {
        if cmdline.starts_with("ssh") && needles.iter().any(|n| cmdline.contains(n.as_str())) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            killed.push(pid);
        }
    }
    killed
}

// ------------------------------------------------------------------------------------ refusals

/// A file named in the input is hashed where the run reads it, on the target; the approval
/// re-hashes it there and refuses a changed one, creating nothing.
#[test]
fn an_input_file_on_the_target_is_bound_by_its_checksum() {
    let Some(d) = sshd() else { return };
    let rt = Rt::new(d, "t", "process");
    rt.remote_workflow(30);
    let data = rt.p("data.csv");
    std::fs::write(&data, "a,b\n1,2\n").unwrap();
    let input = rt.c.input(&json!({"sleep": 0, "exit": 0, "stderr": [], "data": data.to_str().unwrap()}));

    let run_dir = rt.p("bound");
    let plan = rt.c.plan("remote", &input, "t", &run_dir, "bound").expect(0).json;
    let sha = cairn_core::canonical::sha256_hex(b"a,b\n1,2\n");
    assert_eq!(plan["inputs"], json!([{"path": data.to_str().unwrap(), "sha256": sha}]), "{plan:#}");

    std::fs::write(&data, "a,b\n1,3\n").unwrap();
    let refused = rt.execute(&rt.approval("bound"));
    assert_eq!(refused.code, 4, "stdout: {}\nstderr: {}", refused.stdout, refused.stderr);
    assert!(refused.stderr.contains("changed since planning"), "{}", refused.stderr);
    assert!(!run_dir.exists(), "a refused approval created {}", run_dir.display());
    assert_eq!(rt.c.json(&["runs"]).expect(0).json["runs"], json!([]));

    let again = rt.p("rebound");
    rt.c.plan("remote", &input, "t", &again, "rebound").expect(0);
    assert_eq!(rt.execute(&rt.approval("rebound")).expect(0).json["status"], "READY");
    rt.stop();
}

/// Plan-time refusals on a target (exit 2, a clear message): a host key other than the pinned
/// one, an unreachable host, a run_dir that exists, a parent that does not. Nothing is created:
/// no plan, no run, no run_dir, no daemon.
#[test]
fn plan_time_refusals_on_a_target_create_nothing() {
    let Some(d) = sshd() else { return };
    let rt = Rt::new(d.clone(), "good", "process");
    rt.remote_workflow(30);
    let spoofed = spoofed_known_hosts(&rt.base);
    rt.add_target("spoofed", "root", "process", &spoofed).expect(0);
    let (identity, known_hosts) = (d.join("id_ed25519"), d.join("known_hosts"));
    let closed = rt.c.add_target("closed", "root@127.0.0.1:1", &identity, &known_hosts, rt.base.to_str().unwrap(), &[]);
    closed.expect(0);
    std::fs::create_dir(rt.p("exists")).unwrap();
    std::fs::write(rt.p("exists/keep"), "mine").unwrap();
    let input = rt.c.input(&json!({"sleep": 0, "exit": 0, "stderr": []}));

    let spoofed_text = spoofed.display().to_string();
    // (what, target, run_dir, exit code, words the error must hold): an unreachable host is a
    // fault of the environment (exit 5), the rest are for the person to fix (exit 2).
    let cases: Vec<(&str, &str, PathBuf, i32, Vec<&str>)> = vec![
        ("a host key other than the pinned one", "spoofed", rt.p("r-spoofed"), 2, vec!["host key", &spoofed_text]),
        ("an unreachable host", "closed", rt.p("r-closed"), 5, vec!["cannot reach", "127.0.0.1:1"]),
        ("a run_dir that exists", "good", rt.p("exists"), 2, vec!["exists already"]),
        ("a parent that does not exist", "good", rt.p("missing/run"), 2, vec!["not a directory", "missing"]),
    ];
    for (what, target, run_dir, code, words) in &cases {
        let before = std::fs::read_dir(&rt.base).unwrap().count();
        let started = Instant::now();
        let out = rt.c.plan("remote", &input, target, run_dir, "p");
        assert_eq!(out.code, *code, "{what}: exit code\nstdout: {}\nstderr: {}", out.stdout, out.stderr);
        assert!(started.elapsed() < Duration::from_secs(30), "{what}: took {:?}", started.elapsed());
        for w in words {
            assert!(out.stderr.contains(w), "{what}: the error lacks `{w}`: {}", out.stderr);
        }
        assert!(out.stderr.contains(&format!("`{target}`")), "{what}: the error names the target: {}", out.stderr);
        assert!(rt.c.runs().is_empty(), "{what}: a run was created");
        assert!(
            rt.c.json(&["plans"]).expect(0).json["plans"].as_array().unwrap().is_empty(),
            "{what}: a plan was stored"
        );
        assert_eq!(std::fs::read_dir(&rt.base).unwrap().count(), before, "{what}: the scratch directory changed");
        assert!(!rt.p("r-spoofed").exists() && !rt.p("r-closed").exists() && !rt.p("missing").exists(), "{what}");
    }
    let kept: Vec<_> = std::fs::read_dir(rt.p("exists")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(kept, ["keep"], "the existing run_dir was touched");
    assert_eq!(std::fs::read_to_string(rt.p("exists/keep")).unwrap(), "mine");
    assert!(!rt.c.home().join("daemon.json").exists(), "planning started a daemon");
    assert!(rt.run_dirs().is_empty());
}

/// A Slurm target whose login has no `sbatch` on its PATH (the user `cairnlite` of
/// scripts/sshd-up.sh, whose PATH holds python3 only) is refused at planning, naming sbatch.
#[test]
fn a_slurm_target_without_sbatch_is_refused_at_planning() {
    let Some(d) = sshd() else { return };
    let config = std::fs::read_to_string(d.join("sshd_config")).unwrap_or_default();
    if !config.contains("Match User cairnlite") {
        assert!(!ci(), "the test sshd has no `cairnlite` login: run scripts/sshd-up.sh with CAIRN_TEST_VENV set");
        eprintln!("SKIPPED: the test sshd has no `cairnlite` login (scripts/sshd-up.sh with CAIRN_TEST_VENV set)");
        return;
    }
    let rt = Rt::new(d, "good", "process");
    rt.remote_workflow(30);
    // A parent `cairnlite` can reach and write: then sbatch & co. are all that is missing.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&rt.base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let parent = rt.p("shared");
    std::fs::create_dir(&parent).unwrap();
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o777)).unwrap();
    rt.add_target("lite", "cairnlite", "slurm", &rt.sshd.join("known_hosts")).expect(0);
    let input = rt.c.input(&json!({"sleep": 0, "exit": 0, "stderr": []}));
    let run_dir = parent.join("run");

    let out = rt.c.plan("remote", &input, "lite", &run_dir, "lite");
    assert_eq!(out.code, 2, "a missing sbatch\nstdout: {}\nstderr: {}", out.stdout, out.stderr);
    assert!(out.stderr.contains("`sbatch` is not on the PATH"), "the error names sbatch: {}", out.stderr);
    assert!(out.stderr.contains("slurm"), "the error says why sbatch is needed: {}", out.stderr);
    assert!(!out.stderr.contains("parent of run_dir"), "only the programs are missing: {}", out.stderr);
    assert!(!run_dir.exists());
    assert!(rt.c.runs().is_empty());
    assert!(rt.c.json(&["plans"]).expect(0).json["plans"].as_array().unwrap().is_empty());

    // The same login with the process executor needs no Slurm program: that plan is fine.
    rt.add_target("lite-process", "cairnlite", "process", &rt.sshd.join("known_hosts")).expect(0);
    let plan = rt.c.plan("remote", &input, "lite-process", &run_dir, "lite-process").expect(0).json;
    assert_eq!(plan["readiness"]["observed"]["parent_writable"], true, "{plan:#}");
    assert!(!run_dir.exists());
}

// ------------------------------------------------------------------------------------ live log

/// While a remote step runs, `GET /runs/{id}/steps/{step}/log` shows the stderr the tool has
/// written so far, read over SSH; the finished step then keeps it as its log tail. The tool saw
/// the documented working directory and variables.
#[test]
fn the_live_log_of_a_remote_step_is_read_over_ssh() {
    let Some(d) = sshd() else { return };
    let rt = Rt::new(d, "t", "process");
    rt.remote_workflow(60);
    let run_dir = rt.p("logged");
    let argv = rt.plan_remote("t", &run_dir, 5.0, 0, &["first line", "second line"]);
    let mut follower = rt.c.spawn(&argv);
    wait_launched(&run_dir, "s");
    let run_id = rt.run_id();
    let stderr_file = attempt_dir(&run_dir, "s", 1).join("stderr");
    assert!(
        wait_until(Duration::from_secs(10), || std::fs::read_to_string(&stderr_file)
            .is_ok_and(|t| t.contains("second line"))),
        "the tool wrote no stderr"
    );
    let daemon = rt.c.daemon();
    let token = rt.c.token("viewer");
    let url = format!("{}/runs/{run_id}/steps/s/log", daemon.url);
    let r = http("GET", &url, Some(&token), None, &[]);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["status"], "RUNNING", "the step is still running: {}", r.text);
    assert_eq!(r.body["lines"], json!(["first line", "second line"]), "{}", r.text);
    assert_eq!(r.body["truncated"], false, "{}", r.text);
    let r = http("GET", &format!("{url}?lines=1"), Some(&token), None, &[]);
    assert_eq!(r.body["lines"], json!(["second line"]), "{}", r.text);
    assert_eq!(r.body["truncated"], true, "{}", r.text);
    assert!(
        launches(&run_dir).len() == 1 && !log_lines(&run_dir.join("launches")).iter().any(|l| l.starts_with("end ")),
        "the step ended before the log was read: the test proves nothing about a live tail"
    );

    let Exited { code, stdout, stderr, .. } = wait_exit(&mut follower, RUN_TIMEOUT);
    assert_eq!(code, Some(0), "stdout: {stdout}\nstderr: {stderr}");
    let run = parse_stdout(&stdout, 0, "execute-plan");
    assert_eq!(run["status"], "READY", "{run:#}");
    let r = http("GET", &url, Some(&token), None, &[]);
    assert_eq!(r.body["status"], "COMPLETED", "{}", r.text);
    assert_eq!(r.body["lines"], json!(["first line", "second line"]), "the finished step keeps its tail: {}", r.text);

    // The tool ran in <run_dir>/steps/s with Cairn's variables.
    let result = rt.c.show(&run_id);
    let seen = rt.sql(&format!("SELECT result_json FROM tool_calls WHERE run_id = '{run_id}' AND step_id = 's'"));
    let seen: Value = serde_json::from_str(&seen).unwrap();
    assert_eq!(seen["cwd"], run_dir.join("steps/s").to_str().unwrap(), "{seen}");
    assert_eq!(seen["env"]["CAIRN_RUN_ID"], run_id.as_str(), "{seen}");
    assert_eq!(seen["env"]["CAIRN_STEP_ID"], "s", "{seen}");
    assert_eq!(seen["env"]["CAIRN_ATTEMPT"], "1", "{seen}");
    assert_eq!(seen["env"]["CAIRN_RUN_DIR"], run_dir.to_str().unwrap(), "{seen}");
    assert_eq!(result["status"], "READY");
    rt.stop();
}

/// An sshd of one test's own (`scripts/sshd-up.sh` on a port of its own), so it can be made
/// unreachable without touching the one the other tests share; stopped when dropped.
struct OwnSshd {
    dir: PathBuf,
    port: &'static str,
}

impl OwnSshd {
    fn start(dir: &Path, port: &'static str) -> OwnSshd {
        let sshd = OwnSshd { dir: dir.to_path_buf(), port };
        sshd.up();
        sshd
    }

    fn up(&self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/sshd-up.sh");
        let out = Command::new(script).env("SSHD_DIR", &self.dir).env("SSHD_PORT", self.port).output().unwrap();
        assert!(out.status.success(), "sshd-up.sh: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// The host goes away: the listener and every connection it serves are killed, so every ssh
    /// to it is refused; what runs there (the steps' supervisors and tools) goes on.
    fn cut(&self) {
        let Ok(pid) = std::fs::read_to_string(self.dir.join("sshd.pid")) else { return };
        let Ok(listener) = pid.trim().parse::<i32>() else { return };
        let mut tree = vec![listener];
        let mut i = 0;
        while i < tree.len() {
            let parent = tree[i].to_string();
            for p in pids() {
                if stat(p).is_some_and(|f| f.get(1) == Some(&parent)) && !tree.contains(&p) {
                    tree.push(p);
                }
            }
            i += 1;
        }
        // Only sshd itself: a host that drops off the network keeps running what it runs.
        for p in tree
            .into_iter()
            .filter(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sshd"))
        {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
        let _ = std::fs::remove_file(self.dir.join("sshd.pid"));
    }
}

impl Drop for OwnSshd {
    fn drop(&mut self) {
        self.cut();
    }
}

/// The target's host becomes unreachable while a step runs there, for longer than the follower
/// waits: the run is shown waiting for its target (not failed, not hanging), the step left
/// running there untouched; once the host answers again the daemon follows the same launch again
/// (by its nonce) and the run ends READY with the step's one attempt.
#[test]
fn an_unreachable_target_holds_the_run_waiting_and_it_follows_the_same_launch_once_back() {
    let Some(_) = sshd() else { return };
    let scratch = tempfile::Builder::new().prefix("cairn-sshd-own-").tempdir().unwrap();
    let own = OwnSshd::start(scratch.path(), "2299");
    let c = Cairn::new();
    let base = c.work.path().canonicalize().unwrap();
    let (identity, known_hosts) = (scratch.path().join("id_ed25519"), scratch.path().join("known_hosts"));
    c.add_target("flaky", "root@127.0.0.1:2299", &identity, &known_hosts, base.to_str().unwrap(), &[]).expect(0);
    let rt = Rt { c, base, sshd: scratch.path().to_path_buf() };
    rt.remote_workflow(600);
    let run_dir = rt.p("r-flaky");
    let argv = rt.plan_remote("flaky", &run_dir, 50.0, 0, &[]);
    let args: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut runner = rt.c.spawn(&args);
    let tool = wait_launched(&run_dir, "s");
    let run_id = rt.run_id();

    own.cut();
    let mut shown = Value::Null;
    assert!(
        wait_until(Duration::from_secs(90), || {
            shown = rt.c.show(&run_id);
            shown["waiting"].is_object()
        }),
        "the run never showed it waits for its target: {shown:#}\n{}",
        rt.c.daemon_log()
    );
    assert_eq!(shown["status"], "RUNNING", "{shown:#}");
    assert_eq!(shown["waiting"]["code"], "target_unreachable", "{shown:#}");
    assert!(shown["waiting"]["reason"].as_str().unwrap().contains("flaky"), "names the target: {shown:#}");
    assert_eq!(step(&shown, "s")["status"], "RUNNING", "the step is not failed: {shown:#}");
    assert!(alive(tool), "the step goes on on its host meanwhile");

    own.up();
    let out = wait_exit(&mut runner, Duration::from_secs(120));
    assert!(!out.timed_out, "the run did not go on once the target was back: {out:?}\n{}", rt.c.daemon_log());
    assert_eq!(out.code, Some(0), "{out:?}");
    let run = parse_stdout(&out.stdout, 0, "execute-plan");
    assert_eq!(run["status"], "READY", "{run:#}");
    assert!(out.stderr.contains("waiting for its environment"), "the follower was told: {}", out.stderr);
    assert_eq!(launches(&run_dir).len(), 1, "followed again, not launched again: {:?}", launches(&run_dir));
    let events = rt.c.events(&run_id);
    assert_eq!(events_of(&events, "run.waiting", None).len(), 1, "{events:#?}");
    assert!(!events_of(&events, "step.reattached", Some("s")).is_empty(), "the same launch, adopted: {events:#?}");
}

// ------------------------------------------------------------------------------------ secrets

/// A tool's secrets on a target: through the step agent's stdin to a process over SSH, and to a
/// Slurm job in `sbatch`'s own environment (exported by name). The tool gets both values; the
/// run's directory on the target (its request, its stdout and stderr, a job's script and
/// supervise.json), the state root and the registry hold neither: the tool's output there says
/// `[secret NAME]`.
fn secrets_on_a_target(executor: &str) {
    use crate::secrets::{PASSWORD, TOKEN, files_holding, sha256};
    let Some(d) = sshd() else { return };
    if executor == "slurm" && !slurm() {
        return;
    }
    let rt = Rt::new(d, "box", executor);
    let files = [("tools/uses.py", crate::secrets::USES_PY), ("tools/plain.py", crate::secrets::PLAIN_PY)];
    rt.c.add(&write_workflow(&rt.c.path("vault"), crate::secrets::WORKFLOW, &files));
    for (name, value) in [("DB_PASSWORD", PASSWORD), ("PORTAL_TOKEN", TOKEN)] {
        rt.c.command(&["secret", "set", name]).write_stdin(value).assert().success();
    }
    let run_dir = rt.p("vault-run");
    rt.c.plan("vault", &rt.c.input(&json!({})), "box", &run_dir, "vault").expect(0);
    let out = rt.execute(&rt.approval("vault"));
    assert_eq!(out.code, 0, "{}\n{}\ndaemon log:\n{}", out.stdout, out.stderr, rt.c.daemon_log());
    let result = &step(&out.json, "connect")["result"];
    assert_eq!(result["password_sha256"], sha256(PASSWORD), "{:#}", out.json);
    assert_eq!(result["token_sha256"], sha256(TOKEN), "{:#}", out.json);
    assert_eq!(result["echo"], "the token is [secret PORTAL_TOKEN]");
    let stderr = std::fs::read_to_string(attempt_dir(&run_dir, "connect", 1).join("stderr")).unwrap();
    assert!(stderr.contains("password=[secret DB_PASSWORD]"), "the tool's stderr on the target: {stderr}");
    if executor == "slurm" {
        let job = read_json(&attempt_dir(&run_dir, "connect", 1).join("pid.json"))["job_id"].clone();
        assert!(job.is_string(), "it ran as a job");
    }
    let dump = rt.c.sql(&[], ".dump").expect("sqlite3");
    rt.stop();
    let store = rt.c.home().join("secrets");
    for value in [PASSWORD, TOKEN] {
        let mut found = files_holding(&run_dir, value.as_bytes());
        found.extend(files_holding(&rt.c.home(), value.as_bytes()).into_iter().filter(|p| !p.starts_with(&store)));
        assert!(found.is_empty(), "`{value}` is in {found:?}");
        assert!(!dump.contains(value), "`{value}` is in the registry");
    }
}

#[test]
fn secrets_reach_a_tool_over_ssh_and_no_file_on_the_target() {
    secrets_on_a_target("process");
}

#[test]
fn secrets_reach_a_slurm_job_and_no_file_on_the_target() {
    secrets_on_a_target("slurm");
}
