//! The daemon as a process: its lifecycle (start, status, a second start, a foreground rival,
//! stop, token files), kill -9 of the daemon in the middle of a step and the next daemon's
//! recovery, cancel, Ctrl-C on a following `cairn run`, a graceful `daemon stop` in the middle of
//! a step, and the daemon's exit when its state root disappears.
//!
//! Every test leaves no process behind: it stops its daemon and checks the pids are gone; a
//! [`Reaper`] SIGKILLs whatever a failing test left (its own CLI children, daemons and tools only).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::support::*;
use cairn_store::testing::Kind;

/// Waits until a dead daemon is reaped by whoever inherited it (pid 1 here, which takes up to a
/// second or so).
#[track_caller]
pub(crate) fn wait_reaped(pid: i32) {
    assert!(
        wait_until(Duration::from_secs(10), || proc_state(pid).is_none()),
        "process {pid} was never reaped: {:?}",
        proc_state(pid)
    );
}

/// Ctrl-C on a following `cairn run`: it detaches with exit 130.
#[track_caller]
fn detach(runner: &mut Child) {
    kill(Pid::from_raw(runner.id() as i32), Signal::SIGINT).unwrap();
    let out = wait_exit(runner, Duration::from_secs(10));
    assert!(!out.timed_out, "`cairn run` did not exit on Ctrl-C");
    assert_eq!(out.code, Some(130), "{out:?}");
}

/// Stops the daemon with `cairn daemon stop --json` (bounded: a stop that hangs is a failure, not
/// a hung test) and checks its process is gone.
#[track_caller]
fn stop_daemon_checked(c: &Cairn, reaper: &Reaper) -> Value {
    let pid = c.daemon().pid;
    let mut stop = reaper.spawn(c, &["daemon", "stop", "--json"]);
    let out = wait_exit(&mut stop, Duration::from_secs(15));
    assert!(!out.timed_out, "`cairn daemon stop` did not return within 15 s\ndaemon log:\n{}", c.daemon_log());
    assert_eq!(out.code, Some(0), "{out:?}\ndaemon log:\n{}", c.daemon_log());
    let v = parse_stdout(&out.stdout, 0, "daemon stop");
    assert_eq!(v["running"], false, "{v}");
    assert_eq!(v["stopped_pid"], pid, "{v}");
    assert!(
        wait_until(Duration::from_secs(3), || !alive(pid)),
        "the daemon (pid {pid}) still runs after `cairn daemon stop` returned"
    );
    v
}

/// SIGKILLs, when the test ends, whatever it started and left alive: spawned CLI processes, every
/// daemon it saw, and every tool that logged a start. A passing test leaves nothing for it to do.
pub(crate) struct Reaper {
    home: PathBuf,
    log: PathBuf,
    cli: std::cell::RefCell<Vec<i32>>,
    daemons: std::cell::RefCell<Vec<i32>>,
}

impl Reaper {
    pub(crate) fn new(c: &Cairn) -> Reaper {
        Reaper {
            home: c.home.path().to_path_buf(),
            log: c.path("log"),
            cli: Default::default(),
            daemons: Default::default(),
        }
    }

    pub(crate) fn spawn<S: AsRef<std::ffi::OsStr>>(&self, c: &Cairn, args: &[S]) -> Child {
        let child = c.spawn(args);
        self.cli.borrow_mut().push(child.id() as i32);
        child
    }

    /// Notes a daemon pid to kill if the test fails before stopping it.
    pub(crate) fn daemon(&self, pid: i32) -> i32 {
        self.daemons.borrow_mut().push(pid);
        pid
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        let mut daemons = self.daemons.borrow().clone();
        if let Ok(text) = std::fs::read_to_string(self.home.join("daemon.json"))
            && let Ok(v) = serde_json::from_str::<Value>(&text)
            && let Some(pid) = v["pid"].as_i64()
        {
            daemons.push(pid as i32);
        }
        for pid in self.cli.borrow().iter().chain(daemons.iter()) {
            if alive(*pid) {
                let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
            }
        }
        for line in log_lines(&self.log) {
            let mut parts = line.split(':');
            if let (Some(_), Some("start"), Some(_), Some(pid)) =
                (parts.next(), parts.next(), parts.next(), parts.next())
                && let Ok(pid) = pid.parse::<i32>()
                && alive(pid)
            {
                kill_group(pid);
            }
        }
    }
}

/// The lifecycle: status before, start, a second start, a foreground rival, stop, token files.
#[test]
fn daemon_lifecycle_start_status_rival_stop() {
    let c = Cairn::new();
    let reaper = Reaper::new(&c);

    // Nothing runs yet; stopping nothing is fine.
    let before = c.json(&["daemon", "status"]).expect(0).json;
    assert_eq!(before["running"], false, "{before}");
    assert_eq!(before["pid"], Value::Null, "{before}");
    assert_eq!(before["url"], Value::Null, "{before}");
    let none = c.json(&["daemon", "stop"]).expect(0).json;
    assert_eq!(none, json!({"running": false, "stopped_pid": null}));

    // Start: it runs, with a pid and a loopback URL, and answers there.
    let started = c.json(&["daemon", "start"]).expect(0).json;
    assert_eq!(started["running"], true, "{started}");
    assert_eq!(started["started"], true, "{started}");
    let pid = reaper.daemon(started["pid"].as_i64().expect("pid") as i32);
    let url = started["url"].as_str().expect("url").to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    assert!(alive(pid));
    let info = c.daemon();
    assert_eq!((info.pid, info.url.as_str()), (pid, url.as_str()), "daemon.json agrees with `daemon start`");
    let health = http("GET", &format!("{url}/health"), None, None, &[]);
    assert_eq!(health.status, 200, "{}", health.text);
    assert_eq!(health.body["pid"], pid, "{}", health.text);
    let status = c.json(&["daemon", "status"]).expect(0).json;
    assert_eq!(status["running"], true, "{status}");
    assert_eq!(status["pid"], pid, "{status}");
    assert_eq!(status["url"], url, "{status}");

    // A second start is a no-op that names the running daemon.
    let again = c.json(&["daemon", "start"]).expect(0).json;
    assert_eq!(again["running"], true, "{again}");
    assert_eq!(again["started"], false, "{again}");
    assert_eq!(again["pid"], pid, "{again}");
    let text = c.cmd(&["daemon", "start"]);
    assert!(text.status.success(), "{text:?}");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("already running"), "{text}");
    assert!(text.contains(&pid.to_string()), "{text}");

    // A foreground daemon cannot take the lock: exit 4, naming the holder.
    let mut rival = reaper.spawn(&c, &["daemon", "run"]);
    let rival_pid = rival.id() as i32;
    let out = wait_exit(&mut rival, Duration::from_secs(10));
    assert!(!out.timed_out, "`cairn daemon run` (pid {rival_pid}) kept running next to daemon {pid}");
    assert_eq!(out.code, Some(4), "{out:?}");
    assert!(out.stderr.contains(&format!("pid {pid}")), "the message names the holding pid: {}", out.stderr);
    assert!(alive(pid), "the rival must not disturb the running daemon");
    assert_eq!(c.daemon().pid, pid, "the rival must not overwrite daemon.json");

    // Tokens: 0600 files in a 0700 directory.
    let auth = c.home().join("auth");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&auth), 0o700, "{}", auth.display());
    for role in ["viewer", "operator"] {
        let file = auth.join(format!("{role}.token"));
        assert_eq!(mode(&file), 0o600, "{}", file.display());
        assert!(c.token(role).len() >= 32, "{role} token too short");
    }
    assert_ne!(c.token("viewer"), c.token("operator"));

    // Stop: the process is gone, status says so, daemon.json is removed.
    stop_daemon_checked(&c, &reaper);
    let after = c.json(&["daemon", "status"]).expect(0).json;
    assert_eq!(after["running"], false, "{after}");
    assert_eq!(after["pid"], Value::Null, "{after}");
    assert!(!c.home().join("daemon.json").exists(), "daemon.json must go with the daemon");
}

/// kill -9 of the daemon while step b runs: the orphaned tool survives; the next daemon takes the
/// run over, stops the orphan, runs b again (attempt 2) and finishes READY; a and c ran once.
fn kill_dash_nine_of_the_daemon_mid_step_then_the_next_daemon_recovers(k: Kind) {
    let Some(c) = Cairn::on(k) else { return };
    let reaper = Reaper::new(&c);
    chain_workflow(&c, "chain");
    // b waits for the release file on attempt 1 (the one we abandon), not on attempt 2.
    let input = chain_input(&c, json!({"a": ["ok"], "b": ["wait", "ok"], "c": ["ok"]}));
    let log = c.path("log");
    // `cairn run` starts the daemon itself.
    let mut runner = reaper.spawn(&c, &c.run_args("chain", &input, &["--run-id", "R", "--json"]));
    let orphan = wait_for_tool(&log, "b", 1);
    let first = reaper.daemon(c.daemon().pid);
    assert!(alive(first));
    kill(Pid::from_raw(first), Signal::SIGKILL).unwrap();
    assert!(wait_until(Duration::from_secs(5), || !alive(first)), "daemon {first} survived SIGKILL");

    // The tool lives in its own process group: it survives its daemon. Expected.
    assert!(alive(orphan), "the b tool should outlive the killed daemon");
    let shown = c.show("R");
    assert_eq!(shown["status"], "RUNNING", "{shown:#}");
    assert_eq!(step(&shown, "b")["status"], "RUNNING", "{shown:#}");
    let status = c.json(&["daemon", "status"]).expect(0).json;
    assert_eq!(status["running"], false, "a dead daemon is not running: {status}");

    // The attached `cairn run` loses its event stream: it must end (not hang), and not claim
    // success. It reads the run from the registry: still RUNNING, which maps to exit 4.
    let out = wait_exit(&mut runner, Duration::from_secs(10));
    assert!(!out.timed_out, "`cairn run` hung after its daemon was killed (it should notice the stream ended)");
    assert_eq!(out.code, Some(4), "`cairn run` after its daemon died: {out:?}");
    let v = parse_stdout(&out.stdout, 4, "run");
    assert_eq!(v["run_id"], "R", "{v}");
    assert_eq!(v["status"], "RUNNING", "{v}");

    // The killed daemon is a zombie until whoever inherited it (here pid 1) reaps it; a zombie
    // owner is the subject of the next test. Here: wait until it is reaped.
    wait_reaped(first);

    // The next daemon recovers the run by itself.
    let second = reaper.daemon(c.start_daemon().pid);
    assert_ne!(second, first);
    let shown = c.wait_for_status("R", "READY", Duration::from_secs(20));
    assert!(!alive(orphan), "the orphaned b attempt (pid {orphan}) must be stopped by the recovery");
    // Were the orphan still there, the release file would let it finish and log b:end:1.
    std::fs::write(c.path("release"), "").unwrap();

    assert_eq!(step(&shown, "a")["attempts"], 1, "{shown:#}");
    assert_eq!(step(&shown, "b")["attempts"], 2, "{shown:#}");
    assert_eq!(step(&shown, "b")["status"], "COMPLETED", "{shown:#}");
    assert_eq!(step(&shown, "c")["attempts"], 1, "{shown:#}");
    assert_eq!(shown["findings"], json!([]), "{shown:#}");
    let events = c.events("R");
    assert_b_resumed_once(&log_lines(&log), &events);
    assert!(events_of(&events, "step.interrupted", None).len() == 1, "{:?}", kinds(&events));
    assert_eq!(events_of(&events, "step.started", Some("a")).len(), 1);
    assert_eq!(events_of(&events, "step.started", Some("b")).len(), 2);
    assert_eq!(events_of(&events, "step.started", Some("c")).len(), 1);
    let fin = events_of(&events, "run.finished", None);
    assert_eq!(fin.len(), 1, "{:?}", kinds(&events));
    assert_eq!(fin[0]["data"]["status"], "READY");
    assert!(events_of(&events, "step.stale_write_rejected", None).is_empty(), "{:?}", kinds(&events));

    stop_daemon_checked(&c, &reaper);
}

/// kill -9 of the daemon between a tool's spawn and the commit recording its pid (the crash point
/// `tool-spawned`): the next daemon's recovery finds the tool by its attempt's nonce and stops it
/// before attempt 2 starts, so the step's output is attempt 2's alone.
fn a_daemon_killed_before_recording_a_tools_pid_leaves_no_second_execution(k: Kind) {
    let Some(c) = Cairn::on(k) else { return };
    let reaper = Reaper::new(&c);
    marked_workflow(&c, "marked");
    let (marks, input) = marked_input(&c);
    let started = c.std_command(&["daemon", "start", "--json"]).env("CAIRN_TEST_CRASH_AT", "tool-spawned:s:1").output();
    let started = Out::of_json(started.unwrap(), "daemon start", Duration::ZERO).expect(0);
    let first = reaper.daemon(started.json["pid"].as_i64().unwrap() as i32);
    let mut runner = reaper.spawn(&c, &c.run_args("marked", &input, &["--run-id", "R", "--json"]));
    let mark = wait_for_mark(&marks, 1);
    let at = std::time::Instant::now();
    let orphan = mark["pid"].as_i64().unwrap() as i32;
    assert!(wait_until(Duration::from_secs(10), || !alive(first)), "the daemon never reached its crash point");
    assert!(alive(orphan), "the tool should outlive its killed daemon");
    // The daemon may die before its answer to `POST /runs` is out (5: unreachable) or after (4:
    // the run is still RUNNING); either way `cairn run` ends without claiming success.
    let out = wait_exit(&mut runner, Duration::from_secs(10));
    assert!(matches!(out.code, Some(4 | 5)), "`cairn run` after its daemon died: {out:?}");
    wait_reaped(first);
    assert_eq!(step(&c.show("R"), "s")["status"], "RUNNING");

    // The next daemon recovers the run by itself.
    reaper.daemon(c.start_daemon().pid);
    let shown = c.wait_for_status("R", "READY", Duration::from_secs(20));
    assert_one_execution(&shown, &marks, orphan, at);
    let events = c.events("R");
    assert_eq!(events_of(&events, "step.interrupted", Some("s")).len(), 1, "{:?}", kinds(&events));
    stop_daemon_checked(&c, &reaper);
}

/// A run leased to a daemon whose pool gave up on it (the test fault point `give-up:RUN`, as an
/// unexpected error would) is not left leased there for good, its lease renewed by the heartbeat
/// and taken over by no one: at its second heartbeat without a driver the daemon takes it over
/// again, under a new epoch, and it ends READY with its step run once.
#[test]
fn a_run_leased_here_but_no_longer_driven_is_taken_over_again() {
    let c = Cairn::new();
    marked_workflow(&c, "marked");
    let (marks, mut input) = marked_input(&c);
    input["sleep"] = json!("0");
    // Leases of 3 s: a heartbeat each second.
    let started = c
        .std_command(&["daemon", "start", "--json", "--lease-secs", "3"])
        .env("CAIRN_TEST_CRASH_AT", "give-up:G1")
        .output();
    Out::of_json(started.unwrap(), "daemon start", Duration::ZERO).expect(0);
    let run = c.run("marked", &input, &["--run-id", "G1"]).expect(0).json;
    assert_eq!(run["status"], "READY", "{run:#}");
    assert_eq!(step(&run, "s")["attempts"], 1, "{run:#}");
    assert!(marks.join("attempt-1.done").exists() && !marks.join("attempt-2.json").exists());
    let log = c.daemon_log();
    assert!(log.contains("run G1 could not go on: given up at the test's fault point"), "{log}");
    assert!(log.contains("run G1 is leased to this daemon but not driven here; taking it over again"), "{log}");
    let me = c.json(&["daemon", "list"]).expect(0).json;
    let id = me["daemons"][0]["id"].as_str().unwrap().to_string();
    let events = c.events("G1");
    let leased = events_of(&events, "run.leased", None);
    assert_eq!(leased.len(), 1, "{:?}", kinds(&events));
    assert_eq!((&leased[0]["data"]["previous"], &leased[0]["data"]["epoch"]), (&json!(id), &json!(2)), "{leased:?}");
    c.stop_daemon();
}

/// kill -9 of the daemon at a group commit (the crash point `group-commit`: several runs' writes
/// in one SQLite transaction, before the COMMIT that makes them durable): none of them was
/// acknowledged, so the next daemon finds each run as its last acknowledged write left it, and
/// every run ends READY with nothing completed run twice.
#[test]
fn a_daemon_killed_at_a_group_commit_loses_nothing_acknowledged_and_runs_nothing_twice() {
    // The first group (runs being created, as often as not) and a later one (steps of runs under way).
    for nth in [1, 40] {
        killed_at_a_group_commit(nth);
    }
}

fn killed_at_a_group_commit(nth: u32) {
    let c = Cairn::new();
    let reaper = Reaper::new(&c);
    // Quick shell steps, many runs at once: writes of several runs meet at the registry.
    let tool = "#!/bin/sh\necho \"$CAIRN_STEP_ID:start:$CAIRN_ATTEMPT:$$\" >> \"$CAIRN_RUN_DIR/starts.log\"\ncat >/dev/null\necho '{}'\n";
    let mut chain = String::from(
        "[workflow]\nname = \"grouped\"\nversion = \"1.0.0\"\n\n[tools.t]\ncommand = [\"tools/log.sh\"]\n\n",
    );
    for i in 0..30 {
        let needs = if i > 0 { format!("needs = [\"s{}\"]\n", i - 1) } else { String::new() };
        chain += &format!("[[steps]]\nid = \"s{i}\"\ntool = \"t\"\n{needs}\n");
    }
    c.add(&write_workflow(&c.path("grouped"), &chain, &[("tools/log.sh", tool)]));
    // Two step slots for twelve runs: steps of several runs queue for them (six and more, the
    // backlog), so commits wait for company and groups of several writes form as under load, not
    // by chance.
    let started = c
        .std_command(&["daemon", "start", "--workers", "2", "--json"])
        .env("CAIRN_TEST_CRASH_AT", format!("group-commit:{nth}"))
        .output();
    let started = Out::of_json(started.unwrap(), "daemon start", Duration::ZERO).expect(0);
    let first = reaper.daemon(started.json["pid"].as_i64().unwrap() as i32);
    let runs: Vec<(String, PathBuf)> =
        (0..12).map(|i| (format!("G{i}"), c.home().join(format!("runs/G{i}/starts.log")))).collect();
    let mut runners = Vec::new();
    for (run_id, _) in &runs {
        runners.push(reaper.spawn(&c, &c.run_args("grouped", &json!({}), &["--run-id", run_id, "--json"])));
    }
    if !wait_until(Duration::from_secs(60), || !alive(first)) {
        let runs: Vec<String> = c
            .runs()
            .iter()
            .map(|r| format!("{} {} {}", str_of(&r["run_id"]), str_of(&r["status"]), r["step_counts"]))
            .collect();
        panic!(
            "the daemon never committed its group {nth} of several writes; runs: {runs:#?}\ndaemon log:\n{}",
            c.daemon_log()
        );
    }
    let mut codes = Vec::new();
    for runner in &mut runners {
        let out = wait_exit(runner, Duration::from_secs(10));
        assert!(!out.timed_out, "`cairn run` hung after its daemon was killed");
        codes.push((out.code, out.stdout, out.stderr));
    }
    wait_reaped(first);

    // A run whose creation was in the lost group was never acknowledged: it does not exist, and its
    // `cairn run` failed without a run to show. Every other run goes on from its last
    // acknowledged write.
    let listed = c.runs();
    let ids: Vec<String> = listed.iter().map(|r| str_of(&r["run_id"]).to_string()).collect();
    if nth > 1 {
        assert!(listed.iter().any(|r| r["status"] == "RUNNING"), "the crash was not in a run under way: {listed:#?}");
    }
    reaper.daemon(c.start_daemon().pid);
    let mut created = 0;
    for ((run_id, log), (code, stdout, stderr)) in runs.iter().zip(&codes) {
        if !ids.contains(run_id) {
            let answer: Value = serde_json::from_str(stdout).unwrap_or(Value::Null);
            assert!(
                *code != Some(0) && answer.get("run_id").is_none(),
                "run {run_id} does not exist, yet its `cairn run` got an answer: {code:?} {stdout} {stderr}"
            );
            continue;
        }
        created += 1;
        assert_whole_after_kill(&c, run_id, log, 1);
    }
    assert!(created > 0, "no run was created before the crash");
    stop_daemon_checked(&c, &reaper);
}

/// A daemon killed by SIGKILL stays a zombie while its parent has not reaped it (a supervisor
/// that never waits, a container whose pid 1 does not reap, or, as here, a parent that has not got
/// round to it yet). A zombie runs nothing and holds no lock: the next daemon must treat it as a
/// dead owner and recover its runs.
#[test]
fn a_killed_daemon_not_yet_reaped_does_not_block_recovery() {
    let c = Cairn::new();
    let reaper = Reaper::new(&c);
    chain_workflow(&c, "chain");
    let input = chain_input(&c, json!({"a": ["ok"], "b": ["wait", "ok"], "c": ["ok"]}));
    let log = c.path("log");
    // The first daemon is this test's own child (in the foreground), so it stays a zombie after
    // SIGKILL until the test reaps it.
    let first_log = std::fs::File::create(c.path("first-daemon.log")).unwrap();
    let mut first = c
        .std_command(&["daemon", "run"])
        .stdin(std::process::Stdio::null())
        .stdout(first_log.try_clone().unwrap())
        .stderr(first_log)
        .spawn()
        .unwrap();
    let first_pid = reaper.daemon(first.id() as i32);
    assert!(
        wait_until(Duration::from_secs(15), || {
            std::fs::read_to_string(c.home.path().join("daemon.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .is_some_and(|v| v["pid"] == first_pid)
        }),
        "the foreground daemon did not publish daemon.json: {}",
        std::fs::read_to_string(c.path("first-daemon.log")).unwrap_or_default()
    );
    let mut runner = reaper.spawn(&c, &c.run_args("chain", &input, &["--run-id", "R", "--json"]));
    let orphan = wait_for_tool(&log, "b", 1);
    detach(&mut runner);
    kill(Pid::from_raw(first_pid), Signal::SIGKILL).unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || proc_state(first_pid).as_deref() == Some("Z")),
        "the killed daemon should be an unreaped zombie: {:?}",
        proc_state(first_pid)
    );

    let second = reaper.daemon(c.start_daemon().pid);
    let recovered = wait_until(Duration::from_secs(15), || c.show("R")["status"] == "READY");
    let shown = c.show("R");
    let zombie = proc_state(first_pid);
    let _ = first.wait();
    assert!(
        recovered,
        "daemon {second} did not recover run R while its dead owner {first_pid} was a zombie ({zombie:?}): {}\ndaemon log:\n{}",
        shown["status"],
        c.daemon_log()
    );
    assert_eq!(step(&shown, "b")["attempts"], 2, "{shown:#}");
    assert!(!alive(orphan), "the orphaned b attempt (pid {orphan}) must be stopped by the recovery");
    let events = c.events("R");
    assert_eq!(events_of(&events, "step.interrupted", Some("b")).len(), 1, "{:?}", kinds(&events));
    assert_eq!(events_of(&events, "run.finished", None).len(), 1, "{:?}", kinds(&events));

    stop_daemon_checked(&c, &reaper);
}

/// `cairn cancel`: the run ends CANCELLED with its running step FAILED, the tool is stopped, the
/// attached follower exits 3; a second cancel is a conflict, an unknown run a usage error.
#[test]
fn cancel_stops_the_step_and_finishes_the_run_cancelled() {
    let c = Cairn::new();
    let reaper = Reaper::new(&c);
    chain_workflow(&c, "chain");
    let input = chain_input(&c, json!({"a": ["ok"], "b": ["wait"], "c": ["ok"]}));
    let log = c.path("log");
    let mut runner = reaper.spawn(&c, &c.run_args("chain", &input, &["--run-id", "R", "--json"]));
    let tool = wait_for_tool(&log, "b", 1);
    reaper.daemon(c.daemon().pid);

    let out = c.json(&["cancel", "R"]).expect(0);
    assert_eq!(out.json["run_id"], "R", "{}", out.stdout);
    assert_eq!(out.json["status"], "CANCELLED", "{}", out.stdout);
    assert_eq!(out.step("b")["status"], "FAILED", "{}", out.stdout);
    assert!(
        wait_until(Duration::from_secs(5), || !alive(tool)),
        "the b tool (pid {tool}) still runs 5 s after the cancel"
    );

    // The attached follower sees run.finished and exits 3 (CANCELLED).
    let followed = wait_exit(&mut runner, Duration::from_secs(10));
    assert!(!followed.timed_out, "the follower hung after the cancel");
    assert_eq!(followed.code, Some(3), "{followed:?}");
    let v = parse_stdout(&followed.stdout, 3, "run");
    assert_eq!(v["status"], "CANCELLED", "{v}");

    let shown = c.show("R");
    assert_eq!(shown["status"], "CANCELLED", "{shown:#}");
    assert!(shown["finished_at"].is_string(), "{shown:#}");
    assert_eq!(step(&shown, "a")["status"], "COMPLETED", "{shown:#}");
    let b = step(&shown, "b");
    assert_eq!(b["status"], "FAILED", "{shown:#}");
    assert!(b["error"].as_str().is_some_and(|e| e.contains("cancel")), "b's error names the cancellation: {b}");
    assert_eq!(step(&shown, "c")["status"], "PENDING", "{shown:#}");
    assert_eq!(step(&shown, "c")["attempts"], 0, "{shown:#}");

    let events = c.events("R");
    let cancelled = events_of(&events, "step.cancelled", Some("b"));
    assert_eq!(cancelled.len(), 1, "{:?}", kinds(&events));
    assert_eq!(cancelled[0]["attempt"], 1);
    let fin = events_of(&events, "run.finished", None);
    assert_eq!(fin.len(), 1, "{:?}", kinds(&events));
    assert_eq!(fin[0]["data"]["status"], "CANCELLED");
    assert_eq!(kinds(&events).last().map(String::as_str), Some("run.finished"), "{:?}", kinds(&events));
    assert!(events_of(&events, "step.completed", Some("b")).is_empty(), "{:?}", kinds(&events));
    assert!(events_of(&events, "step.failed", Some("b")).is_empty(), "{:?}", kinds(&events));
    assert!(events_of(&events, "step.started", Some("c")).is_empty(), "{:?}", kinds(&events));

    // Once finished, a cancel is a conflict and changes nothing; an unknown run is exit 2.
    let again = c.json(&["cancel", "R"]).expect(4);
    assert!(again.stderr.contains("CANCELLED"), "{}", again.stderr);
    let unknown = c.json(&["cancel", "no-such-run"]).expect(2);
    assert!(unknown.stderr.contains("no-such-run"), "{}", unknown.stderr);
    assert_eq!(c.events("R"), events, "a refused cancel appends nothing");

    // Nothing of b ever finished; c never started.
    std::fs::write(c.path("release"), "").unwrap();
    let lines = log_lines(&log);
    assert_eq!(count(&lines, "b:end:"), 0, "{lines:?}");
    assert_eq!(count(&lines, "c:start:"), 0, "{lines:?}");

    stop_daemon_checked(&c, &reaper);
}

/// Ctrl-C on `cairn run` detaches: exit 130 with how to follow or cancel; the run goes on in the
/// daemon and finishes READY.
#[test]
fn ctrl_c_on_run_detaches_and_the_run_goes_on() {
    let c = Cairn::new();
    let reaper = Reaper::new(&c);
    chain_workflow(&c, "chain");
    let input = chain_input(&c, json!({"a": ["ok"], "b": ["wait"], "c": ["ok"]}));
    let log = c.path("log");
    // In its own process group, like a shell's foreground job: Ctrl-C goes to the whole group.
    let mut runner = {
        use std::os::unix::process::CommandExt;
        let child = c
            .std_command(&c.run_args("chain", &input, &["--run-id", "R"]))
            .process_group(0)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        reaper.cli.borrow_mut().push(child.id() as i32);
        child
    };
    let tool = wait_for_tool(&log, "b", 1);
    let daemon = reaper.daemon(c.daemon().pid);

    nix::sys::signal::killpg(Pid::from_raw(runner.id() as i32), Signal::SIGINT).unwrap();
    let out = wait_exit(&mut runner, Duration::from_secs(10));
    assert!(!out.timed_out, "`cairn run` did not exit on Ctrl-C");
    assert_eq!(out.code, Some(130), "{out:?}");
    assert!(out.stderr.contains("cairn cancel R"), "it says how to cancel: {}", out.stderr);
    assert!(out.stderr.contains("cairn events R --follow"), "it says how to follow: {}", out.stderr);

    // The run goes on.
    assert!(alive(daemon), "Ctrl-C in the client's terminal must not reach the daemon it started");
    assert!(alive(tool), "Ctrl-C in the client's terminal must not reach the tool");
    assert_eq!(c.show("R")["status"], "RUNNING");
    std::fs::write(c.path("release"), "").unwrap();
    let shown = c.wait_for_status("R", "READY", Duration::from_secs(15));
    for s in ["a", "b", "c"] {
        assert_eq!(step(&shown, s)["attempts"], 1, "{shown:#}");
        assert_eq!(step(&shown, s)["status"], "COMPLETED", "{shown:#}");
    }
    let events = c.events("R");
    let fin = events_of(&events, "run.finished", None);
    assert_eq!(fin.len(), 1, "{:?}", kinds(&events));
    assert_eq!(fin[0]["data"]["status"], "READY");
    assert!(events_of(&events, "step.cancelled", None).is_empty(), "{:?}", kinds(&events));
    let lines = log_lines(&log);
    assert_eq!(count(&lines, "b:end:1"), 1, "{lines:?}");
    assert_eq!(count(&lines, "c:start:"), 1, "{lines:?}");

    stop_daemon_checked(&c, &reaper);
}

/// `cairn daemon stop` while b runs (its `cairn run` detached): the tool is killed, the run stays
/// RUNNING (neither cancelled nor failed), no process is left; the next daemon resumes it.
#[test]
fn daemon_stop_mid_step_leaves_the_run_for_the_next_daemon() {
    let c = Cairn::new();
    let reaper = Reaper::new(&c);
    chain_workflow(&c, "chain");
    let input = chain_input(&c, json!({"a": ["ok"], "b": ["wait", "ok"], "c": ["ok"]}));
    let log = c.path("log");
    let first = reaper.daemon(c.start_daemon().pid);
    let mut runner = reaper.spawn(&c, &c.run_args("chain", &input, &["--run-id", "R", "--json"]));
    let tool = wait_for_tool(&log, "b", 1);
    detach(&mut runner);

    stop_daemon_checked(&c, &reaper);
    assert!(
        wait_until(Duration::from_secs(3), || !alive(tool)),
        "the b tool (pid {tool}) outlived `cairn daemon stop`"
    );
    assert!(!alive(first));

    // Stopped, not finished: RUNNING, nothing cancelled, failed or finished.
    let shown = c.show("R");
    assert_eq!(shown["status"], "RUNNING", "{shown:#}");
    assert_eq!(step(&shown, "b")["status"], "RUNNING", "{shown:#}");
    assert_eq!(shown["finished_at"], Value::Null, "{shown:#}");
    let events = c.events("R");
    for kind in ["run.finished", "step.cancelled", "step.failed", "step.retrying", "step.interrupted"] {
        assert!(events_of(&events, kind, None).is_empty(), "{kind} after a daemon stop: {:?}", kinds(&events));
    }
    assert_eq!(c.json(&["daemon", "status"]).expect(0).json["running"], false);

    // The next daemon resumes it. (Once the stopped daemon is reaped: an unreaped one is the
    // subject of `a_killed_daemon_not_yet_reaped_does_not_block_recovery`.)
    wait_reaped(first);
    let second = reaper.daemon(c.start_daemon().pid);
    assert_ne!(second, first);
    let shown = c.wait_for_status("R", "READY", Duration::from_secs(20));
    assert_eq!(step(&shown, "a")["attempts"], 1, "{shown:#}");
    assert_eq!(step(&shown, "b")["attempts"], 2, "{shown:#}");
    assert_eq!(step(&shown, "c")["attempts"], 1, "{shown:#}");
    let events = c.events("R");
    let interrupted = events_of(&events, "step.interrupted", Some("b"));
    assert_eq!(interrupted.len(), 1, "{:?}", kinds(&events));
    assert_eq!(interrupted[0]["attempt"], 1);
    assert_eq!(events_of(&events, "step.interrupted", None).len(), 1, "{:?}", kinds(&events));
    assert_eq!(events_of(&events, "run.finished", None).len(), 1, "{:?}", kinds(&events));
    let lines = log_lines(&log);
    assert_eq!(count(&lines, "a:start:"), 1, "{lines:?}");
    assert_eq!(count(&lines, "b:end:1"), 0, "{lines:?}");
    assert_eq!(count(&lines, "b:end:2"), 1, "{lines:?}");
    assert_eq!(count(&lines, "c:start:"), 1, "{lines:?}");

    stop_daemon_checked(&c, &reaper);
}

/// `cairn daemon stop` while a `cairn run` is attached to the running run: the follower must not
/// hold the daemon up. The stop returns promptly, the daemon and the tool are gone, and the
/// follower ends with the run still RUNNING (exit 4).
#[test]
fn daemon_stop_is_not_held_up_by_an_attached_follower() {
    let c = Cairn::new();
    let reaper = Reaper::new(&c);
    chain_workflow(&c, "chain");
    let input = chain_input(&c, json!({"a": ["ok"], "b": ["wait", "ok"], "c": ["ok"]}));
    let log = c.path("log");
    let daemon = reaper.daemon(c.start_daemon().pid);
    let mut runner = reaper.spawn(&c, &c.run_args("chain", &input, &["--run-id", "R", "--json"]));
    let tool = wait_for_tool(&log, "b", 1);

    stop_daemon_checked(&c, &reaper);
    assert!(!alive(daemon));
    assert!(
        wait_until(Duration::from_secs(3), || !alive(tool)),
        "the b tool (pid {tool}) outlived `cairn daemon stop`"
    );
    let out = wait_exit(&mut runner, Duration::from_secs(10));
    assert!(!out.timed_out, "`cairn run` hung after `daemon stop`");
    assert_eq!(out.code, Some(4), "{out:?}");
    assert_eq!(parse_stdout(&out.stdout, 4, "run")["status"], "RUNNING", "{out:?}");
    let shown = c.show("R");
    assert_eq!(shown["status"], "RUNNING", "{shown:#}");
    assert!(events_of(&c.events("R"), "run.finished", None).is_empty());
}

/// A daemon whose state root is removed (a test's temporary directory) exits by itself, and stops
/// the tool of the run it was executing.
#[test]
fn the_daemon_exits_when_its_state_root_is_removed() {
    let c = Cairn::new();
    let reaper = Reaper::new(&c);
    chain_workflow(&c, "chain");
    let input = chain_input(&c, json!({"a": ["ok"], "b": ["wait"], "c": ["ok"]}));
    let pid = reaper.daemon(c.start_daemon().pid);
    let mut runner = reaper.spawn(&c, &c.run_args("chain", &input, &["--run-id", "R", "--json"]));
    let tool = wait_for_tool(&c.path("log"), "b", 1);
    detach(&mut runner);
    assert!(alive(pid) && alive(tool));

    // The daemon may be writing while we remove: retry until the directory is gone.
    assert!(
        wait_until(Duration::from_secs(5), || {
            let _ = std::fs::remove_dir_all(c.home.path());
            !c.home.path().exists()
        }),
        "could not remove {}",
        c.home.path().display()
    );
    assert!(
        wait_until(Duration::from_secs(5), || !alive(pid)),
        "the daemon (pid {pid}) still runs 5 s after its state root was removed"
    );
    assert!(wait_until(Duration::from_secs(3), || !alive(tool)), "the b tool (pid {tool}) outlived its daemon's exit");
}

/// The (step, attempt) of every tool start a log holds, refusing a start logged twice: the same
/// attempt's tool never runs twice.
#[track_caller]
fn starts_once(lines: &[String]) -> Vec<(String, u32)> {
    let mut starts: Vec<(String, u32)> = lines
        .iter()
        .filter_map(|l| {
            let mut parts = l.split(':');
            let (step, kind, attempt) = (parts.next()?, parts.next()?, parts.next()?);
            (kind == "start").then(|| (step.to_string(), attempt.parse().unwrap()))
        })
        .collect();
    let n = starts.len();
    starts.sort();
    starts.dedup();
    assert_eq!(starts.len(), n, "an attempt's tool started twice: {lines:#?}");
    starts
}

/// After a kill -9 of its daemon and the next daemon's recovery, a run is whole: every step
/// completed, no completed step ran again, each tool start belongs to an attempt the registry
/// began (so it was begun before the tool started), and only steps in flight at the kill (at most
/// `in_flight`) took a second attempt, each with its `step.interrupted`.
#[track_caller]
fn assert_whole_after_kill(c: &Cairn, run_id: &str, log: &Path, in_flight: usize) {
    let shown = c.wait_for_status(run_id, "READY", Duration::from_secs(60));
    let starts = starts_once(&log_lines(log));
    let mut again = 0;
    for s in shown["steps"].as_array().unwrap() {
        let (id, attempts) = (str_of(&s["step_id"]), s["attempts"].as_u64().unwrap() as u32);
        assert_eq!(s["status"], "COMPLETED", "{shown:#}");
        assert!(attempts <= 2, "step {id} took {attempts} attempts: {shown:#}");
        for (_, attempt) in starts.iter().filter(|(step, _)| step == id) {
            assert!(*attempt <= attempts, "step {id}'s tool ran as attempt {attempt}, never begun: {shown:#}");
        }
        again += (attempts - 1) as usize;
    }
    assert!(again <= in_flight, "{again} steps ran again after the kill, at most {in_flight} were running: {shown:#}");
    let events = c.events(run_id);
    assert_eq!(events_of(&events, "step.interrupted", None).len(), again, "{:?}", kinds(&events));
    assert!(events_of(&events, "step.stale_write_rejected", None).is_empty(), "{:?}", kinds(&events));
    assert_eq!(events_of(&events, "run.finished", None).len(), 1, "{:?}", kinds(&events));
}

/// kill -9 of the daemon at pseudo-random points of short steps, serial and at `--parallel 3`:
/// the commit that completes a step and begins the ones it releases (one transaction), the
/// commits of completions gathered together, a tool's start and exit. After each, the next daemon
/// recovers the run with nothing lost and nothing completed run twice.
fn kill_dash_nine_of_the_daemon_at_random_points_loses_no_step_and_runs_none_twice(k: Kind) {
    let Some(c) = Cairn::on(k) else { return };
    let reaper = Reaper::new(&c);
    let mut chain = format!("[workflow]\nname = \"quick\"\nversion = \"1.0.0\"\n\n{}", tool_toml("t", ""));
    let mut wide = format!("[workflow]\nname = \"wide\"\nversion = \"1.0.0\"\n\n{}", tool_toml("t", ""));
    let mut roots = Vec::new();
    for i in 0..16 {
        let needs = if i > 0 { format!("needs = [\"s{}\"]\n", i - 1) } else { String::new() };
        chain += &format!("[[steps]]\nid = \"s{i}\"\ntool = \"t\"\n{needs}args = {{ log = \"${{input.log}}\" }}\n\n");
        wide += &format!("[[steps]]\nid = \"r{i}\"\ntool = \"t\"\nargs = {{ log = \"${{input.log}}\" }}\n\n");
        roots.push(format!("\"r{i}\""));
    }
    wide += &format!(
        "[[steps]]\nid = \"join\"\ntool = \"t\"\nneeds = [{}]\nargs = {{ log = \"${{input.log}}\" }}\n",
        roots.join(", ")
    );
    c.add(&write_workflow(&c.path("quick"), &chain, &tool_files()));
    c.add(&write_workflow(&c.path("wide"), &wide, &tool_files()));
    c.start_daemon();

    // A fixed sequence, so a failure is reproduced by running the test again.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |below: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % below as u64) as usize
    };
    for round in 0..8 {
        let (workflow, parallel, lines) = if round % 2 == 0 { ("quick", 1, 32) } else { ("wide", 3, 34) };
        let run_id = format!("K{round}");
        let log = c.path(&format!("log-{round}"));
        let input = json!({"log": log.display().to_string()});
        // Killed once the log has this many lines: somewhere between the first start and the end.
        let at = 1 + next(lines - 1);
        let par = parallel.to_string();
        let mut runner =
            reaper.spawn(&c, &c.run_args(workflow, &input, &["--run-id", &run_id, "--parallel", &par, "--json"]));
        assert!(
            wait_until(Duration::from_secs(60), || log_lines(&log).len() >= at),
            "round {round}: the log never reached {at} lines: {:?}",
            log_lines(&log)
        );
        let pid = reaper.daemon(c.daemon().pid);
        kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
        assert!(wait_until(Duration::from_secs(5), || !alive(pid)), "daemon {pid} survived SIGKILL");
        let out = wait_exit(&mut runner, Duration::from_secs(10));
        assert!(!out.timed_out, "round {round}: `cairn run` hung after its daemon was killed");
        wait_reaped(pid);
        reaper.daemon(c.start_daemon().pid);
        assert_whole_after_kill(&c, &run_id, &log, parallel);
        let shown = c.show(&run_id);
        assert_eq!(shown["parallel"], parallel, "round {round}: {shown:#}");
    }
    stop_daemon_checked(&c, &reaper);
}

/// A run submitted with `--parallel 2` and taken over by the next daemon's recovery goes on two
/// steps at a time: its interrupted roots are resumed together, not one after the other.
fn a_recovered_run_keeps_the_parallelism_it_was_submitted_with(k: Kind) {
    let Some(c) = Cairn::on(k) else { return };
    let reaper = Reaper::new(&c);
    let mut toml = format!("[workflow]\nname = \"pair\"\nversion = \"1.0.0\"\n\n{}", tool_toml("t", ""));
    for i in 0..4 {
        toml += &format!(
            "[[steps]]\nid = \"r{i}\"\ntool = \"t\"\nargs = {{ log = \"${{input.log}}\", plan = [\"wait\"], release = \"${{input.release}}\" }}\n\n"
        );
    }
    c.add(&write_workflow(&c.path("pair"), &toml, &tool_files()));
    let log = c.path("log");
    let input = json!({"log": c.path_str("log"), "release": c.path_str("release")});
    let mut runner = reaper.spawn(&c, &c.run_args("pair", &input, &["--run-id", "P", "--parallel", "2", "--json"]));
    let started = |attempt: u32| log_lines(&log).iter().filter(|l| l.contains(&format!(":start:{attempt}:"))).count();
    assert!(wait_until(Duration::from_secs(30), || started(1) == 2), "{:?}", log_lines(&log));
    let first = reaper.daemon(c.daemon().pid);
    kill(Pid::from_raw(first), Signal::SIGKILL).unwrap();
    assert!(wait_until(Duration::from_secs(5), || !alive(first)));
    let _ = wait_exit(&mut runner, Duration::from_secs(10));
    wait_reaped(first);

    reaper.daemon(c.start_daemon().pid);
    // Both interrupted roots start again while neither can finish (none is released yet).
    assert!(
        wait_until(Duration::from_secs(20), || started(2) == 2),
        "the recovered run did not resume two steps at once: {:?}",
        log_lines(&log)
    );
    assert_eq!(count(&log_lines(&log), "r2:"), 0, "a third step started beside two: {:?}", log_lines(&log));
    std::fs::write(c.path("release"), "").unwrap();
    let shown = c.wait_for_status("P", "READY", Duration::from_secs(30));
    assert_eq!(shown["parallel"], 2, "{shown:#}");
    let attempts: Vec<u64> =
        shown["steps"].as_array().unwrap().iter().map(|s| s["attempts"].as_u64().unwrap()).collect();
    assert_eq!(attempts, [2, 2, 1, 1], "{shown:#}");
    stop_daemon_checked(&c, &reaper);
}

// On both registries: the SQLite file and PostgreSQL.
cairn_store::on_both!(
    kill_dash_nine_of_the_daemon_mid_step_then_the_next_daemon_recovers,
    a_daemon_killed_before_recording_a_tools_pid_leaves_no_second_execution,
    kill_dash_nine_of_the_daemon_at_random_points_loses_no_step_and_runs_none_twice,
    a_recovered_run_keeps_the_parallelism_it_was_submitted_with,
);

/// The daemon's log is a line a person reads by default (`<time> <message>`), and one JSON object
/// a line with `--log-format json` (or `CAIRN_LOG_FORMAT=json`), each with its time, level, message
/// and where it came from: the daemon's own lines and the engine's (a run's end) alike.
#[test]
fn the_daemon_log_is_text_by_default_and_json_for_machines() {
    let c = Cairn::new();
    let reaper = Reaper::new(&c);
    chain_workflow(&c, "chain");
    let input = chain_input(&c, json!({"a": ["ok"], "b": ["ok"], "c": ["ok"]}));
    let started = c.json(&["daemon", "start"]).expect(0).json;
    reaper.daemon(started["pid"].as_i64().unwrap() as i32);
    assert_eq!(
        c.json(&c.run_args("chain", &input, &["--run-id", "T"]).iter().map(String::as_str).collect::<Vec<_>>())
            .expect(0)
            .json["status"],
        "READY"
    );
    stop_daemon_checked(&c, &reaper);
    let text = c.daemon_log();
    let ended = text.lines().find(|l| l.contains("run T READY after")).unwrap_or_else(|| panic!("{text}"));
    let (time, rest) = ended.split_once(' ').unwrap();
    assert!(time.ends_with('Z') && time.contains('T') && rest.starts_with("run T READY"), "{ended}");

    let started = c.json(&["daemon", "start", "--log-format", "json"]).expect(0).json;
    reaper.daemon(started["pid"].as_i64().unwrap() as i32);
    assert_eq!(
        c.json(&c.run_args("chain", &input, &["--run-id", "J"]).iter().map(String::as_str).collect::<Vec<_>>())
            .expect(0)
            .json["status"],
        "READY"
    );
    stop_daemon_checked(&c, &reaper);
    let log = c.daemon_log();
    let json_lines: Vec<Value> = log
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let ended = json_lines
        .iter()
        .find(|l| l["fields"]["message"].as_str().is_some_and(|m| m.starts_with("run J READY after")))
        .unwrap_or_else(|| panic!("{log}"));
    assert_eq!((&ended["level"], &ended["target"]), (&json!("INFO"), &json!("cairn_engine::pool")), "{ended}");
    assert!(str_of(&ended["timestamp"]).ends_with('Z'), "{ended}");
    let serving =
        json_lines.iter().find(|l| l["fields"]["message"].as_str().is_some_and(|m| m.contains("serving"))).unwrap();
    assert_eq!(serving["target"], "cairn::daemon");
    // Other crates' events stay out of it: every JSON line is Cairn's.
    assert!(json_lines.iter().all(|l| str_of(&l["target"]).starts_with("cairn")), "{log}");
    let bad = c.cmd(&["daemon", "start", "--log-format", "xml"]);
    assert_eq!(bad.status.code(), Some(2), "{}", String::from_utf8_lossy(&bad.stderr));
}
