//! Run identity, crashes and fencing: idempotent run ids, a changed tool after a crash, a stale
//! worker, and kill -9 of the runner in the middle of a step, and between a tool's spawn and the
//! commit recording its pid.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;

/// The same run id with the same input is idempotent; with another input it is a conflict.
#[test]
fn run_ids_are_idempotent_and_identity_is_enforced() {
    let c = Cairn::new();
    chain_workflow(&c, "chain");
    let input = chain_input(&c, json!({"a": ["ok"], "b": ["ok"], "c": ["ok"]}));
    let first = c.run("chain", &input, &["--run-id", "same"]).expect(0);
    assert_eq!(first.json["status"], "READY");
    let events_before = c.events("same");

    // Again, same id and input (from another file with the same content): the same result.
    let second = c.run("chain", &input, &["--run-id", "same"]).expect(0);
    assert_eq!(contract(&second.json), contract(&first.json), "an idempotent rerun must return the stored result");
    let lines = log_lines(&c.path("log"));
    for s in ["a", "b", "c"] {
        assert_eq!(count(&lines, &format!("{s}:start:")), 1, "{s} must have run once: {lines:?}");
    }
    assert_eq!(c.events("same"), events_before, "an idempotent rerun appends no events");

    // Key order and whitespace do not change the identity (canonical JSON).
    let file = c.path("reordered.json");
    let text = format!(
        "{{ \"release\": {}, \"log\": {},\n \"plans\": {{\"c\": [\"ok\"], \"b\": [\"ok\"], \"a\": [\"ok\"]}} }}",
        json!(input["release"]),
        json!(input["log"])
    );
    std::fs::write(&file, text).unwrap();
    let third = c.json(&["run", "chain", "--input", file.to_str().unwrap(), "--run-id", "same"]).expect(0);
    assert_eq!(contract(&third.json), contract(&first.json));

    // Same id, different input: ExecutionInputMismatch, exit 4, nothing executed or recorded.
    let mut other = input.clone();
    other["plans"]["c"] = json!(["ok", "ok"]);
    let conflict = c.run("chain", &other, &["--run-id", "same"]).expect(4);
    assert!(conflict.stderr.contains("ExecutionInputMismatch"), "{}", conflict.stderr);
    assert!(conflict.stderr.contains("same"), "the message names the run: {}", conflict.stderr);
    assert_eq!(log_lines(&c.path("log")), lines, "nothing may run on a mismatch");
    assert_eq!(c.events("same"), events_before);
    assert_eq!(contract(&c.show("same")), contract(&first.json));
    assert_eq!(c.runs().len(), 1);

    // A terminal FAILED run is returned as it is, not retried, under the same id.
    let failing = chain_input(&c, json!({"a": ["ok"], "b": ["exit:1"], "c": ["ok"]}));
    let failed = c.run("chain", &failing, &["--run-id", "failing"]).expect(3);
    let before = log_lines(&c.path("log")).len();
    let again = c.run("chain", &failing, &["--run-id", "failing"]).expect(3);
    assert_eq!(contract(&again.json), contract(&failed.json));
    assert_eq!(log_lines(&c.path("log")).len(), before, "a FAILED run is not re-executed");
}

/// The crash test: kill -9 of the runner while step b runs. A plain rerun refuses (the step may
/// be alive); --resume-interrupted finishes the run, a and c run once, and the orphaned b attempt
/// is stopped before the new one starts.
#[test]
fn kill_dash_nine_mid_step_then_resume_interrupted() {
    let c = Cairn::new();
    chain_workflow(&c, "chain");
    // b sleeps 3 s on attempt 1 (the one we abandon), and not on attempt 2.
    let input = chain_input(&c, json!({"a": ["ok"], "b": ["sleep:3", "ok"], "c": ["ok"]}));
    let log = c.path("log");
    let mut runner = c.spawn(&c.run_args("chain", &input, &["--run-id", "R", "--in-process", "--json"]));
    let started =
        c.wait_for_event("R", Duration::from_secs(15), |e| e["kind"] == "step.started" && e["step_id"] == "b");
    assert_eq!(started["attempt"], 1);
    let orphan = wait_for_tool(&log, "b", 1);
    let b_started_at = Instant::now();
    kill9(&mut runner);

    // The tool lives in its own process group: it survives the runner. Expected.
    assert!(alive(orphan), "the b tool should outlive the killed runner");
    let shown = c.show("R");
    assert_eq!(shown["status"], "RUNNING");
    assert_eq!(step(&shown, "b")["status"], "RUNNING");
    let events_before = c.events("R");

    // A plain rerun refuses: the step may still be alive.
    let plain = c.run("chain", &input, &["--run-id", "R", "--in-process"]).expect(4);
    assert!(plain.stderr.contains("RUNNING"), "{}", plain.stderr);
    assert!(plain.stderr.contains("--resume-interrupted"), "{}", plain.stderr);
    assert!(plain.stderr.contains("`b`"), "the message names the step: {}", plain.stderr);
    assert_eq!(c.events("R"), events_before, "a refused rerun changes nothing");
    assert_eq!(count(&log_lines(&log), "b:start:"), 1);

    // Resume explicitly: READY.
    let resumed = c.run("chain", &input, &["--run-id", "R", "--in-process", "--resume-interrupted"]);
    let resumed = resumed.expect(0);
    assert_eq!(resumed.json["status"], "READY");
    assert_eq!(resumed.step("a")["attempts"], 1);
    assert_eq!(resumed.step("b")["attempts"], 2);
    assert_eq!(resumed.step("b")["status"], "COMPLETED");
    assert_eq!(resumed.step("c")["attempts"], 1);
    assert!(!alive(orphan), "the orphaned b attempt (pid {orphan}) must be stopped by the resume");

    // Give the orphan the time it would have needed to finish, then read the log.
    std::thread::sleep(Duration::from_secs(4).saturating_sub(b_started_at.elapsed()));
    let events = c.events("R");
    assert_b_resumed_once(&log_lines(&log), &events);
    assert_eq!(events_of(&events, "step.started", Some("a")).len(), 1);
    assert_eq!(events_of(&events, "step.started", Some("b")).len(), 2);
    assert_eq!(events_of(&events, "step.started", Some("c")).len(), 1);
    assert_eq!(events_of(&events, "run.finished", None).len(), 1);
    assert!(events_of(&events, "step.stale_write_rejected", None).is_empty());
    let shown = c.show("R");
    assert_eq!(shown["status"], "READY");
    assert_eq!(step(&shown, "b")["attempts"], 2);
    assert_eq!(step(&shown, "a")["attempts"], 1);

    // And the finished run is idempotent from here on.
    let again = c.run("chain", &input, &["--run-id", "R", "--in-process", "--resume-interrupted"]).expect(0);
    assert_eq!(contract(&again.json), contract(&shown));
}

/// kill -9 of an in-process runner between its tool's spawn and the commit recording the tool's
/// pid (the crash point `tool-spawned`): nothing records the tool but the attempt's token. The
/// resume finds the tool by the nonce in its environment and stops it before attempt 2 starts,
/// so the step's output is attempt 2's alone.
#[test]
fn a_tool_whose_pid_was_never_recorded_is_stopped_before_the_resumed_attempt() {
    let c = Cairn::new();
    marked_workflow(&c, "marked");
    let (marks, input) = marked_input(&c);
    let mut runner = c
        .std_command(&c.run_args("marked", &input, &["--run-id", "R", "--in-process", "--json"]))
        .env("CAIRN_TEST_CRASH_AT", "tool-spawned:s:1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = runner.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "the crash point was not reached");
    let first = wait_for_mark(&marks, 1);
    let started = Instant::now();
    let orphan = first["pid"].as_i64().unwrap() as i32;
    assert!(alive(orphan), "the tool should outlive its killed runner");
    // Its pid never reached the registry: only the nonce of the token begun before it finds it.
    if let Some(pid) = c.sql(&[], "SELECT coalesce(pid, 'none') FROM tool_calls WHERE step_id = 's'") {
        assert_eq!(pid.trim(), "none", "the crash point is before the pid's commit");
    }
    let shown = c.show("R");
    assert_eq!((shown["status"].as_str(), step(&shown, "s")["status"].as_str()), (Some("RUNNING"), Some("RUNNING")));

    let resumed = c.run("marked", &input, &["--run-id", "R", "--in-process", "--resume-interrupted"]).expect(0);
    assert_one_execution(&resumed.json, &marks, orphan, started);
    let second = read_json(&marks.join("attempt-2.json"));
    assert_ne!(first["nonce"], second["nonce"], "each attempt has its own nonce");
    let events = c.events("R");
    assert_eq!(events_of(&events, "step.interrupted", Some("s")).len(), 1, "{:?}", kinds(&events));
    assert_eq!(events_of(&events, "step.completed", Some("s")).len(), 1, "{:?}", kinds(&events));
}

/// A run the daemon drives has one driver: an explicit in-process resume of it while the
/// daemon's lease is current is refused (exit 4, naming the daemon) and runs nothing; the daemon's
/// run finishes with every step run once.
#[test]
fn a_run_the_daemon_drives_is_not_resumed_in_process_beside_it() {
    let c = Cairn::new();
    chain_workflow(&c, "chain");
    let input = chain_input(&c, json!({"a": ["ok"], "b": ["sleep:2", "ok"], "c": ["ok"]}));
    let log = c.path("log");
    let runner = c.spawn(&c.run_args("chain", &input, &["--run-id", "R", "--json"]));
    c.wait_for_event("R", Duration::from_secs(15), |e| e["kind"] == "step.started" && e["step_id"] == "b");
    wait_for_tool(&log, "b", 1);
    assert!(c.show("R")["lease"]["daemon"].is_string(), "the daemon leases the run it drives");

    let refused = c.run("chain", &input, &["--run-id", "R", "--in-process", "--resume-interrupted"]).expect(4);
    assert!(refused.stderr.contains("driven by daemon"), "{}", refused.stderr);
    assert_eq!(count(&log_lines(&log), "b:start:"), 1, "the refused resume started b again");

    let out = runner.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let shown = c.show("R");
    assert_eq!(shown["status"], "READY", "{shown:#}");
    for id in ["a", "b", "c"] {
        assert_eq!(step(&shown, id)["attempts"], 1, "{id}: {shown:#}");
    }
    let events = c.events("R");
    assert!(events_of(&events, "run.resumed", None).is_empty(), "{events:#?}");
    assert_eq!(count(&log_lines(&log), "b:start:"), 1);
}

/// After a crash, the tool file of the completed step 1 is changed inside the registered
/// snapshot: resuming must fail with an explicit tool_digest mismatch, never reuse step 1.
#[test]
fn changed_tool_file_after_crash_is_a_signature_mismatch() {
    let c = Cairn::new();
    chain_workflow(&c, "chain");
    // b waits for the release file (created at the end of the test), so it is RUNNING when killed.
    let input = chain_input(&c, json!({"a": ["ok"], "b": ["wait"], "c": ["ok"]}));
    let log = c.path("log");
    let mut runner = c.spawn(&c.run_args("chain", &input, &["--run-id", "R", "--in-process", "--json"]));
    c.wait_for_event("R", Duration::from_secs(15), |e| e["kind"] == "step.started" && e["step_id"] == "b");
    let orphan = wait_for_tool(&log, "b", 1);
    kill9(&mut runner);

    // Change the tool file in the registered snapshot (all three steps share it).
    let snapshot = c.snapshot("chain");
    let tool = snapshot.join("tools/tool.py");
    assert!(tool.is_file(), "{}", tool.display());
    append(&tool, "\n# changed after registration\n");

    let out = c.run("chain", &input, &["--run-id", "R", "--in-process", "--resume-interrupted"]);
    std::fs::write(c.path("release"), "").unwrap(); // let the orphan go, whatever happened
    let out = out.expect(3);
    assert_eq!(out.json["status"], "FAILED");
    let err = out.json["error"].as_str().unwrap();
    assert!(err.contains("tool_digest"), "{err}");
    assert!(err.contains("signature mismatch"), "{err}");
    assert!(err.contains("`a`"), "the mismatch is found on step a: {err}");
    assert_eq!(out.step("a")["status"], "COMPLETED");
    assert_eq!(out.step("a")["attempts"], 1);
    let lines = log_lines(&log);
    assert_eq!(count(&lines, "a:start:"), 1, "a must not execute again: {lines:?}");
    assert_eq!(count(&lines, "b:start:2"), 0, "b must not start again: {lines:?}");
    assert_eq!(count(&lines, "c:start:"), 0, "{lines:?}");
    let events = c.events("R");
    assert_eq!(events_of(&events, "step.started", Some("a")).len(), 1);
    assert_eq!(events_of(&events, "step.started", Some("b")).len(), 1);
    let fin = events_of(&events, "run.finished", None);
    assert_eq!(fin.len(), 1);
    assert_eq!(fin[0]["data"]["status"], "FAILED");
    assert_eq!(c.show("R")["status"], "FAILED");
    // Clean up the orphan if it is still there.
    if alive(orphan) {
        assert!(wait_until(Duration::from_secs(5), || !alive(orphan)));
    }
}

/// Fencing: worker A's attempt is taken over by worker B (--resume-interrupted) while A's tool is
/// still running. B finishes the run; A's late write is rejected (exit 4) and recorded.
#[test]
fn a_stale_worker_cannot_write_over_the_new_attempt() {
    let c = Cairn::new();
    let toml = format!(
        r#"
[workflow]
name = "fenced"
version = "1.0.0"

{}
[[steps]]
id = "s"
tool = "t"
args = {{ plan = ["sleep_if_flag:3"], flag = "${{input.flag}}", log = "${{input.log}}" }}

[[validator.rules]]
id = "result-from-attempt-2"
step = "s"
pointer = "/attempt"
op = "eq"
value = 2
finding = "the stored result is not the one from attempt 2"
"#,
        tool_toml("t", "")
    );
    c.add(&write_workflow(&c.path("fenced"), &toml, &tool_files()));
    let flag = c.path("flag");
    std::fs::write(&flag, "").unwrap();
    let log = c.path("log");
    let input = json!({"flag": flag, "log": log});

    let a = c.spawn(&c.run_args("fenced", &input, &["--run-id", "R", "--in-process", "--json"]));
    c.wait_for_event("R", Duration::from_secs(15), |e| e["kind"] == "step.started" && e["step_id"] == "s");
    let a_tool = wait_for_tool(&log, "s", 1);
    // The flag goes only once A's tool has seen it: removed earlier, A would not sleep and
    // would finish its attempt before B could take it over.
    assert!(
        wait_until(Duration::from_secs(15), || count(&log_lines(&log), "s:sleeping:1") == 1),
        "A's tool never began to sleep: {:?}",
        log_lines(&log)
    );
    std::fs::remove_file(&flag).unwrap();

    let b = c.run("fenced", &input, &["--run-id", "R", "--in-process", "--resume-interrupted"]);
    let a_out = a.wait_with_output().unwrap();
    let a_stdout = String::from_utf8_lossy(&a_out.stdout).into_owned();
    let a_stderr = String::from_utf8_lossy(&a_out.stderr).into_owned();
    let events = c.events("R");
    let ctx = format!(
        "B: exit {} {}\n{}\nA: {:?}\n{a_stdout}\n{a_stderr}\nevents: {:#}",
        b.code,
        b.stdout,
        b.stderr,
        a_out.status,
        Value::Array(events.clone())
    );

    assert_eq!(b.code, 0, "B must finish the run READY\n{ctx}");
    assert_eq!(b.json["status"], "READY", "{ctx}");
    assert_eq!(b.step("s")["attempts"], 2, "{ctx}");
    assert_eq!(a_out.status.code(), Some(4), "A's late write must be a conflict\n{ctx}");
    assert!(a_stdout.trim().is_empty() || parse_stdout(&a_stdout, 4, "run A").is_object(), "{ctx}");
    assert!(!events_of(&events, "step.stale_write_rejected", Some("s")).is_empty(), "{ctx}");
    assert_eq!(events_of(&events, "step.interrupted", Some("s")).len(), 1, "{ctx}");
    assert_eq!(events_of(&events, "step.completed", Some("s")).len(), 1, "{ctx}");
    assert!(events_of(&events, "step.failed", Some("s")).is_empty(), "A's failure must not be applied\n{ctx}");
    let fin = events_of(&events, "run.finished", None);
    assert_eq!(fin.len(), 1, "{ctx}");
    assert_eq!(fin[0]["data"]["status"], "READY", "{ctx}");

    let shown = c.show("R");
    assert_eq!(shown["status"], "READY", "{ctx}");
    assert_eq!(shown["findings"], json!([]), "the stored result is B's (attempt 2)\n{ctx}");
    assert_eq!(step(&shown, "s")["attempts"], 2);
    assert_eq!(step(&shown, "s")["status"], "COMPLETED");
    assert!(!alive(a_tool), "A's tool must be gone");
    let lines = log_lines(&log);
    assert_eq!(count(&lines, "s:end:2"), 1, "{lines:?}");
}
