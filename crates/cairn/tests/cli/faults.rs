//! Faults of the environment beyond a kill: a state root whose disk fills up during a run. The
//! run is shown waiting (why, since when) on every surface, its follower is told, the daemon
//! keeps answering, and the run continues by itself once space is freed: no restart, no person.
//! Without a daemon (`--in-process`) the same fault exits 5 with one JSON error object.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::daemon::{Reaper, wait_reaped};
use crate::support::*;

/// Fills the filesystem of `dir` to its last byte with a ballast file; returns its path.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("ballast");
    let mut f = std::fs::File::create(&path).unwrap();
    for chunk in [1 << 20, 4096, 1] {
        let bytes = vec![0u8; chunk];
        while f.write_all(&bytes).is_ok() {}
    }
    path
}

/// Polls `cairn show R --json` until `pred` holds of it; panics with the last answer after
/// `timeout`.
#[track_caller]
fn show_until(c: &Cairn, run_id: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let shown = c.show(run_id);
        if pred(&shown) {
            return shown;
        }
        assert!(Instant::now() < deadline, "gave up after {timeout:?}: {shown:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The state root's disk fills while step b runs: b's end cannot be written, so the run waits,
/// shown with its reason on `cairn show`, `cairn runs` and the follower's stderr, and tried
/// again on a backoff; once the ballast is removed it continues by itself (b resumed as
/// interrupted, c after it) and ends READY, its log saying when it waited and for how long.
#[test]
fn a_full_disk_holds_a_daemon_s_run_waiting_and_it_continues_once_space_is_freed() {
    let c = Cairn::new();
    let Some(_disk) = Tmpfs::mount(&c.home(), "24m") else { return };
    let reaper = Reaper::new(&c);
    chain_workflow(&c, "chain");
    let input = chain_input(&c, json!({"a": ["ok"], "b": ["wait", "ok"], "c": ["ok"]}));
    let log = c.path("log");
    let mut runner = reaper.spawn(&c, &c.run_args("chain", &input, &["--run-id", "R", "--json"]));
    wait_for_tool(&log, "b", 1);
    let daemon = c.daemon().pid;

    let ballast = fill(&c.home());
    std::fs::write(c.path("release"), "").unwrap();
    let waiting = show_until(&c, "R", Duration::from_secs(20), |r| r["waiting"].is_object());
    assert_eq!(waiting["status"], "RUNNING", "{waiting:#}");
    let w = &waiting["waiting"];
    assert!(matches!(w["code"].as_str(), Some("database" | "io")), "a fault of the environment: {w}");
    let reason = w["reason"].as_str().unwrap();
    assert!(reason.contains("full") || reason.contains("No space"), "the reason names the full disk: {w}");
    assert!(w["since"].is_string() && w["next_try_at"].is_string(), "{w}");

    // It is tried again on a backoff, and the daemon answers meanwhile, on every read.
    let again = show_until(&c, "R", Duration::from_secs(15), |r| r["waiting"]["tries"].as_u64() >= Some(3));
    assert_eq!(again["waiting"]["since"], w["since"], "one wait, from when it began: {again:#}");
    let listed = c.runs();
    let row = listed.iter().find(|r| r["run_id"] == "R").unwrap();
    assert_eq!(row["waiting"]["code"], w["code"], "`cairn runs` shows it waiting: {row}");
    assert!(alive(daemon), "the daemon must live through the fault");
    let status = c.json(&["daemon", "status"]).expect(0).json;
    assert_eq!(status["running"], true, "{status}");

    std::fs::remove_file(&ballast).unwrap();
    let out = wait_exit(&mut runner, Duration::from_secs(60));
    assert!(!out.timed_out, "the run did not continue after space was freed: {out:?}");
    assert_eq!(out.code, Some(0), "{out:?}");
    let run = parse_stdout(&out.stdout, 0, "run");
    assert_eq!(run["status"], "READY", "{run:#}");
    assert!(run.get("waiting").is_none(), "a finished run waits for nothing: {run:#}");
    assert!(out.stderr.contains("waiting for its environment"), "the follower was told: {}", out.stderr);
    assert!(out.stderr.contains("its environment is back"), "and told it went on: {}", out.stderr);

    // Nothing completed ran again; b's attempt whose end was lost ran once more.
    let lines = log_lines(&log);
    assert_eq!(count(&lines, "a:start:"), 1, "{lines:?}");
    assert_eq!(count(&lines, "c:start:"), 1, "{lines:?}");
    assert_eq!(step(&run, "b")["attempts"], 2, "{run:#}");
    assert_eq!(daemon, c.daemon().pid, "the same daemon, not a restart");

    // The log says it waited, once, and for how long, before the run went on.
    let events = c.events("R");
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    let at = |k: &str| kinds.iter().position(|x| *x == k).unwrap_or_else(|| panic!("no {k}: {kinds:?}"));
    assert_eq!(events_of(&events, "run.waiting", None).len(), 1, "{kinds:?}");
    assert_eq!(events_of(&events, "run.continued", None).len(), 1, "{kinds:?}");
    assert!(at("run.waiting") < at("run.continued") && at("run.continued") < at("run.finished"), "{kinds:?}");
    let continued = events_of(&events, "run.continued", None)[0];
    assert!(continued["data"]["waited_ms"].as_i64().unwrap() >= 3_000, "{continued}");
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "the log has no gap: {seqs:?}");
}

/// kill -9 of the daemon while it holds a run waiting on a full disk (its wait only in memory,
/// nothing of it in the registry): once space is freed, the next daemon takes the run over like any
/// run of a dead daemon and ends it READY; nothing completed ran again.
#[test]
fn a_daemon_killed_while_its_run_waits_leaves_it_for_the_next_daemon() {
    let c = Cairn::new();
    let Some(_disk) = Tmpfs::mount(&c.home(), "24m") else { return };
    let reaper = Reaper::new(&c);
    chain_workflow(&c, "chain");
    let input = chain_input(&c, json!({"a": ["ok"], "b": ["wait", "ok"], "c": ["ok"]}));
    let log = c.path("log");
    let mut runner = reaper.spawn(&c, &c.run_args("chain", &input, &["--run-id", "R", "--json"]));
    wait_for_tool(&log, "b", 1);
    let first = reaper.daemon(c.daemon().pid);

    let ballast = fill(&c.home());
    std::fs::write(c.path("release"), "").unwrap();
    show_until(&c, "R", Duration::from_secs(20), |r| r["waiting"].is_object());
    kill9_pid(first);
    let out = wait_exit(&mut runner, Duration::from_secs(15));
    assert!(!out.timed_out, "`cairn run` hung after its daemon died: {out:?}");
    wait_reaped(first);

    std::fs::remove_file(&ballast).unwrap();
    reaper.daemon(c.start_daemon().pid);
    let run = c.wait_for_status("R", "READY", Duration::from_secs(30));
    assert!(run.get("waiting").is_none(), "{run:#}");
    let lines = log_lines(&log);
    assert_eq!(count(&lines, "a:start:"), 1, "{lines:?}");
    assert_eq!(count(&lines, "c:start:"), 1, "{lines:?}");
    assert_eq!(step(&run, "b")["attempts"], 2, "{run:#}");
}

/// Without a daemon, a run on a full disk cannot wait for it: `cairn run --in-process --json`
/// exits 5 (the environment failed), not 2 (a usage error), with exactly one JSON object, the
/// error, naming the full disk.
#[test]
fn an_in_process_run_on_a_full_disk_exits_5_with_one_json_error() {
    let c = Cairn::new();
    let Some(_disk) = Tmpfs::mount(&c.home(), "16m") else { return };
    chain_workflow(&c, "chain");
    let input = chain_input(&c, json!({"a": ["ok"], "b": ["ok"], "c": ["ok"]}));
    fill(&c.home());
    let out = c.run("chain", &input, &["--in-process"]);
    assert_eq!(out.code, 5, "{out:?}");
    assert_error_body(&out.json, "run --in-process");
    assert!(matches!(out.json["error"]["code"].as_str(), Some("database" | "io")), "{}", out.json);
    let message = out.json["error"]["message"].as_str().unwrap();
    assert!(message.contains("full") || message.contains("No space"), "{message}");
}

/// A PostgreSQL server of this test's own (`scripts/pg-up.sh` on a port of its own), so it can be
/// stopped without touching the server the other tests share; stopped for good when dropped.
struct OwnPostgres {
    dir: PathBuf,
    port: &'static str,
}

impl OwnPostgres {
    const PG_CTL: &'static str = "/usr/lib/postgresql/15/bin/pg_ctl";

    /// Starts it (initialised on first use) and returns it with its URL. Where PostgreSQL is not
    /// installed outside CI, `None`: the test says so and skips.
    fn start(dir: &Path, port: &'static str) -> Option<(OwnPostgres, String)> {
        // Set up by scripts/test.sh with the shared server (and required in CI).
        cairn_store::testing::database_url()?;
        let pg = OwnPostgres { dir: dir.to_path_buf(), port };
        let url = pg.up();
        Some((pg, url))
    }

    fn up(&self) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg-up.sh");
        let out = Command::new(script)
            .env("PG_DIR", &self.dir)
            .env("PG_PORT", self.port)
            .env("PG_DB", "cairn_fault")
            .output()
            .unwrap();
        assert!(out.status.success(), "pg-up.sh: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).lines().last().unwrap().trim().to_string()
    }

    /// Stops it as an administrator would (`-m fast`: clients cut off, what was committed kept;
    /// an immediate stop of a server without fsync could lose the last commits, which is no
    /// fault of Cairn's).
    fn stop(&self) {
        let status = Command::new("runuser")
            .args(["-u", "postgres", "--", Self::PG_CTL, "-D"])
            .arg(self.dir.join("data"))
            .args(["-m", "fast", "-w", "stop"])
            .output()
            .unwrap();
        assert!(status.status.success(), "pg_ctl stop: {}", String::from_utf8_lossy(&status.stderr));
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--", Self::PG_CTL, "-D"])
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The PostgreSQL registry's server stops while step b runs and stays down for several tries:
/// the daemon and its reads answer at once (exit 5, `database`), never hang; the follower is told
/// the run waits; once the server is back the run continues by itself and ends READY, its log
/// saying it waited.
#[test]
fn a_stopped_postgresql_server_holds_the_run_waiting_until_it_is_back() {
    let scratch = tempfile::Builder::new().prefix("cairn-pg-fault-").tempdir().unwrap();
    let pg_dir = scratch.path().join("pg");
    let Some((pg, url)) = OwnPostgres::start(&pg_dir, "5439") else {
        eprintln!("skipped: PostgreSQL is not set up (scripts/test.sh does)");
        return;
    };
    let c = Cairn::new();
    let reaper = Reaper::new(&c);
    reaper.daemon(c.json(&["daemon", "start", "--database", &url]).expect(0).json["pid"].as_i64().unwrap() as i32);
    chain_workflow(&c, "chain");
    let input = chain_input(&c, json!({"a": ["ok"], "b": ["wait", "ok"], "c": ["ok"]}));
    let log = c.path("log");
    let mut runner = reaper.spawn(&c, &c.run_args("chain", &input, &["--run-id", "R", "--json"]));
    wait_for_tool(&log, "b", 1);
    let daemon = c.daemon().pid;

    pg.stop();
    std::fs::write(c.path("release"), "").unwrap();
    // Reads fail at once with the environment's exit code, never hang.
    let asked = Instant::now();
    let out = c.json(&["show", "R"]);
    assert_eq!(out.code, 5, "{out:?}");
    assert_eq!(out.json["error"]["code"], "database", "{}", out.stdout);
    assert!(asked.elapsed() < Duration::from_secs(15), "a read took {:?}", asked.elapsed());
    // Through several tries (1 s, 2 s, 4 s apart).
    std::thread::sleep(Duration::from_secs(6));
    assert!(alive(daemon), "the daemon must live through the fault");
    let health = c.json(&["daemon", "status"]);
    assert_eq!(health.code, 0, "the daemon answers while its registry is down: {health:?}");

    pg.up();
    let out = wait_exit(&mut runner, Duration::from_secs(60));
    assert!(!out.timed_out, "the run did not continue once the server was back: {out:?}");
    assert_eq!(out.code, Some(0), "{out:?}");
    let run = parse_stdout(&out.stdout, 0, "run");
    assert_eq!(run["status"], "READY", "{run:#}");
    assert!(out.stderr.contains("waiting for its environment"), "the follower was told: {}", out.stderr);
    let lines = log_lines(&log);
    assert_eq!(count(&lines, "a:start:"), 1, "{lines:?}");
    assert_eq!(count(&lines, "c:start:"), 1, "{lines:?}");
    assert_eq!(daemon, c.daemon().pid, "the same daemon, not a restart");
    let events = c.events("R");
    assert_eq!(events_of(&events, "run.waiting", None).len(), 1);
    let continued = events_of(&events, "run.continued", None);
    assert_eq!(continued.len(), 1);
    assert_eq!(continued[0]["data"]["since"], events_of(&events, "run.waiting", None)[0]["data"]["since"]);
}
