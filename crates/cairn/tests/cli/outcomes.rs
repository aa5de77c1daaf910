//! Outcome classes, retries and the validator, through the real binary.

use serde_json::{Value, json};

use crate::support::*;

/// One step, `probe`, whose behaviour comes from the run input. One attempt only, so a timeout
/// ends the run instead of being retried.
fn probe_workflow(c: &Cairn) {
    let toml = format!(
        r#"
[workflow]
name = "probe"
version = "1.0.0"

{}
[[steps]]
id = "probe"
tool = "t"
args = {{ plan = "${{input.plan}}", log = "${{input.log}}" }}
max_attempts = 1
"#,
        tool_toml("t", "timeout_secs = 1")
    );
    c.add(&write_workflow(&c.path("probe"), &toml, &tool_files()));
}

/// (plan, exit, run status, step status, outcome, words the step error must contain)
type OutcomeCase<'a> = (&'a str, i32, &'a str, &'a str, &'a str, &'a [&'a str]);

/// Every outcome class: exit code, run status, the step's status/outcome/error, the run error,
/// and the same state again through `show` and `events`.
#[test]
fn every_outcome_class_maps_to_its_status_and_exit_code() {
    let c = Cairn::new();
    probe_workflow(&c);
    let log = c.path_str("log");
    let cases: &[OutcomeCase] = &[
        ("ok", 0, "READY", "COMPLETED", "COMPLETED", &[]),
        ("exit:65", 3, "FAILED", "FAILED", "INVALID_INPUT", &["65"]),
        ("exit:64", 3, "FAILED", "FAILED", "INVALID_INPUT", &["64"]),
        ("exit:77", 3, "FAILED", "FAILED", "DENIED", &["77"]),
        ("exit:1", 3, "FAILED", "FAILED", "FAILED", &["exited with code 1"]),
        ("exit:3", 3, "FAILED", "FAILED", "FAILED", &["exited with code 3"]),
        ("badjson", 3, "FAILED", "FAILED", "FAILED", &["invalid JSON"]),
        ("empty", 3, "FAILED", "FAILED", "FAILED", &["printed nothing"]),
        ("sleep:5", 3, "FAILED", "FAILED", "TIMED_OUT", &["timeout"]),
    ];
    for (i, (plan, exit, status, step_status, outcome, words)) in cases.iter().enumerate() {
        let started = std::time::Instant::now();
        let run_id = format!("case-{i}");
        let out = c.run("probe", &json!({"plan": [plan], "log": log}), &["--run-id", &run_id]);
        let ctx = format!("plan {plan}: {}\n{}", out.stdout, out.stderr);
        assert_eq!(out.code, *exit, "{ctx}");
        let run = &out.json;
        assert_eq!(run["run_id"], run_id, "{ctx}");
        assert_eq!(run["workflow"], "probe", "{ctx}");
        assert_eq!(run["version"], "1.0.0", "{ctx}");
        assert_eq!(run["status"], *status, "{ctx}");
        let s = out.step("probe");
        assert_eq!(s["status"], *step_status, "{ctx}");
        assert_eq!(s["outcome"], *outcome, "{ctx}");
        assert_eq!(s["attempts"], 1, "{ctx}");
        assert_eq!(s["reused"], false, "{ctx}");
        assert!(s["duration_ms"].is_number(), "{ctx}");
        if *status == "READY" {
            assert!(s["error"].is_null(), "{ctx}");
            assert!(run["error"].is_null(), "{ctx}");
            assert_eq!(run["findings"], json!([]), "{ctx}");
        } else {
            let step_error = s["error"].as_str().unwrap_or_else(|| panic!("no step error: {ctx}"));
            for w in *words {
                assert!(step_error.contains(w), "step error lacks `{w}`: {ctx}");
            }
            let run_error = run["error"].as_str().unwrap_or_else(|| panic!("no run error: {ctx}"));
            assert!(run_error.contains("`probe`"), "the run error must name the step: {ctx}");
            assert!(run_error.contains(outcome), "the run error must name the outcome: {ctx}");
        }
        if *outcome == "TIMED_OUT" {
            // timeout_secs = 1 and a 5 s sleep: terminated, not waited for.
            assert!(started.elapsed().as_secs_f64() < 4.5, "the timeout was not enforced: {:?}", started.elapsed());
        }

        // The stored state says the same thing.
        let shown = c.show(&run_id);
        assert_eq!(contract(&shown), contract(run), "show differs from run ({ctx})");
        let events = c.events(&run_id);
        let k = kinds(&events);
        assert_eq!(k.first().map(String::as_str), Some("run.created"), "{k:?}");
        assert_eq!(k.last().map(String::as_str), Some("run.finished"), "{k:?}");
        assert_eq!(events.last().unwrap()["data"]["status"], *status);
        let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "event seqs must increase: {seqs:?}");
        assert_eq!(events_of(&events, "step.started", Some("probe")).len(), 1, "{k:?}");
        if *status == "READY" {
            assert_eq!(events_of(&events, "step.completed", Some("probe")).len(), 1, "{k:?}");
        } else {
            let failed = events_of(&events, "step.failed", Some("probe"));
            assert_eq!(failed.len(), 1, "{k:?}");
            assert_eq!(failed[0]["data"]["outcome"], *outcome);
            assert_eq!(failed[0]["attempt"], 1);
        }
    }
    // Each case ran its tool exactly once.
    let lines = log_lines(&c.path("log"));
    assert_eq!(count(&lines, "probe:start:"), cases.len(), "{lines:?}");
    assert_eq!(c.runs().len(), cases.len());
}

/// The sandbox: canonical JSON on stdin, the step directory as cwd, a scrubbed environment with
/// the CAIRN_* variables set.
#[test]
fn tools_get_canonical_args_their_step_dir_and_a_scrubbed_env() {
    let c = Cairn::new();
    // A shell tool that dumps its stdin, cwd and environment into files in its cwd.
    let dump = r#"#!/bin/sh
cat > stdin.json
pwd > cwd.txt
env | sort > env.txt
echo '{"dumped": true}'
"#;
    let toml = r#"
[workflow]
name = "dump"
version = "1.0.0"

[tools.dump]
command = ["tools/dump.sh"]
env = ["CAIRN_TEST_ALLOWED_2"]

[[steps]]
id = "dump"
tool = "dump"
args = { zeta = 1, alpha = { b = "${input.b}", a = [3, 2, 1] }, "é" = "ü", mid = 1.5 }
"#;
    c.add(&write_workflow(&c.path("dump"), toml, &[("tools/dump.sh", dump)]));
    let input = json!({"b": "bee"});
    let out = c
        .command(&["run", "dump", "--input", c.input(&input).to_str().unwrap(), "--run-id", "dump-1", "--json"])
        .env("SECRET_TOKEN_FOR_TEST", "leak")
        .env("CAIRN_TEST_ALLOWED_2", "yes")
        .env("CAIRN_RUN_ID", "spoofed")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let run = parse_stdout(&String::from_utf8_lossy(&out.stdout), 0, "run");
    let run_dir = std::path::PathBuf::from(run["run_dir"].as_str().unwrap());
    let step_dir = run_dir.join("steps").join("dump");
    let stdin = std::fs::read_to_string(step_dir.join("stdin.json")).unwrap();
    assert_eq!(
        stdin, r#"{"alpha":{"a":[3,2,1],"b":"bee"},"mid":1.5,"zeta":1,"é":"ü"}"#,
        "the tool must get its resolved args as canonical (JCS) JSON"
    );
    let cwd = std::fs::read_to_string(step_dir.join("cwd.txt")).unwrap();
    assert_eq!(std::path::Path::new(cwd.trim()).canonicalize().unwrap(), step_dir.canonicalize().unwrap());
    let env: Vec<(String, String)> = std::fs::read_to_string(step_dir.join("env.txt"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect();
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("CAIRN_RUN_ID"), Some("dump-1"), "CAIRN_RUN_ID must be the run's id, not inherited");
    assert_eq!(get("CAIRN_STEP_ID"), Some("dump"));
    assert_eq!(get("CAIRN_ATTEMPT"), Some("1"));
    assert_eq!(get("CAIRN_RUN_DIR"), Some(run_dir.to_str().unwrap()));
    assert_eq!(get("CAIRN_TEST_ALLOWED_2"), Some("yes"), "a variable in the tool's env list is passed");
    assert_eq!(get("SECRET_TOKEN_FOR_TEST"), None, "an unlisted variable must be scrubbed");
    let allowed =
        ["PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR", "CAIRN_TEST_ALLOWED_2", "PWD", "SHLVL", "_"];
    for (k, _) in &env {
        assert!(allowed.contains(&k.as_str()) || k.starts_with("CAIRN_"), "unexpected variable `{k}` reached the tool");
    }
}

/// (workflow, plan, exit, status, attempts, final outcome, `step.retrying` events)
type RetryCase<'a> = (&'a str, &'a [&'a str], i32, &'a str, u64, &'a str, usize);

/// Two workflows over the same one-step shape: the default retry policy, and
/// `max_attempts = 3, retry_on = ["FAILED"]`. The tool's timeout is 1 s.
fn retry_workflows(c: &Cairn) {
    let tools = tool_toml("t", "timeout_secs = 1");
    let wf = |name: &str, policy: &str| {
        let toml = format!(
            r#"
[workflow]
name = "{name}"
version = "1.0.0"

{tools}
[[steps]]
id = "s"
tool = "t"
args = {{ plan = "${{input.plan}}", log = "${{input.log}}" }}
{policy}

[[validator.rules]]
id = "ran"
step = "s"
pointer = "/step"
op = "eq"
value = "s"
finding = "the step did not report itself"
"#
        );
        c.add(&write_workflow(&c.path(name), &toml, &tool_files()));
    };
    wf("default-policy", "");
    wf("retry-failed", "max_attempts = 3\nretry_on = [\"FAILED\"]");
}

fn check_retry_cases(c: &Cairn, cases: &[RetryCase]) {
    for (i, (wf, plan, exit, status, attempts, outcome, retrying)) in cases.iter().enumerate() {
        let log = c.path(&format!("log-{i}"));
        let run_id = format!("retry-{i}");
        let out = c.run(wf, &json!({"plan": plan, "log": log}), &["--run-id", &run_id]);
        let ctx = format!("{wf} {plan:?}: {}\n{}", out.stdout, out.stderr);
        assert_eq!(out.code, *exit, "{ctx}");
        assert_eq!(out.json["status"], *status, "{ctx}");
        let s = out.step("s");
        assert_eq!(s["attempts"], *attempts, "{ctx}");
        assert_eq!(s["outcome"], *outcome, "{ctx}");
        if *status == "FAILED" {
            assert_eq!(s["status"], "FAILED", "{ctx}");
            assert_eq!(out.json["findings"], json!([]), "{ctx}");
            let err = out.json["error"].as_str().unwrap_or_default();
            assert!(err.contains("`s`") && err.contains(&format!("attempt {attempts}")), "{ctx}");
        }
        // The tool ran exactly `attempts` times, with CAIRN_ATTEMPT = 1, 2, …
        let lines = log_lines(&log);
        let starts: Vec<&String> = lines.iter().filter(|l| l.starts_with("s:start:")).collect();
        assert_eq!(starts.len() as u64, *attempts, "{ctx}\n{lines:?}");
        for (n, l) in starts.iter().enumerate() {
            assert!(l.starts_with(&format!("s:start:{}:", n + 1)), "{lines:?}");
        }
        let events = c.events(&run_id);
        let retry_events = events_of(&events, "step.retrying", Some("s"));
        assert_eq!(retry_events.len(), *retrying, "{ctx}\n{:?}", kinds(&events));
        for (n, e) in retry_events.iter().enumerate() {
            assert_eq!(e["attempt"], n as u64 + 1, "{e}");
            assert_eq!(e["data"]["next_attempt"], n as u64 + 2, "{e}");
            let first = plan[n.min(plan.len() - 1)];
            let expected = if first.starts_with("sleep") { "TIMED_OUT" } else { "FAILED" };
            assert_eq!(e["data"]["outcome"], expected, "{e}");
        }
        assert_eq!(events_of(&events, "step.started", Some("s")).len() as u64, *attempts);
        let shown = c.show(&run_id);
        assert_eq!(step(&shown, "s")["attempts"], *attempts);
        assert_eq!(shown["status"], *status);
    }
}

/// By default only TIMED_OUT is retried, up to max_attempts = 2; exhausted → FAILED.
#[test]
fn timeouts_are_retried_by_default_and_nothing_else() {
    let c = Cairn::new();
    retry_workflows(&c);
    check_retry_cases(
        &c,
        &[
            // A timeout on attempt 1, success on attempt 2.
            ("default-policy", &["sleep:5", "ok"], 0, "READY", 2, "COMPLETED", 1),
            // A plain failure is permanent by default.
            ("default-policy", &["exit:1", "ok"], 3, "FAILED", 1, "FAILED", 0),
            // INVALID_INPUT and DENIED are never retried by default either.
            ("default-policy", &["exit:65", "ok"], 3, "FAILED", 1, "INVALID_INPUT", 0),
            ("default-policy", &["exit:77", "ok"], 3, "FAILED", 1, "DENIED", 0),
            // Timeouts exhaust max_attempts = 2: FAILED, not BLOCKED.
            ("default-policy", &["sleep:5"], 3, "FAILED", 2, "TIMED_OUT", 1),
        ],
    );
}

/// `retry_on = ["FAILED"]`, `max_attempts = 3`: failures are retried up to three attempts.
#[test]
fn retry_on_failed_retries_up_to_max_attempts() {
    let c = Cairn::new();
    retry_workflows(&c);
    check_retry_cases(
        &c,
        &[
            // Retried, succeeds on attempt 3.
            ("retry-failed", &["exit:1", "exit:1", "ok"], 0, "READY", 3, "COMPLETED", 2),
            // Three attempts, then FAILED (not BLOCKED).
            ("retry-failed", &["exit:1"], 3, "FAILED", 3, "FAILED", 2),
            // retry_on = FAILED does not retry a timeout.
            ("retry-failed", &["sleep:5", "ok"], 3, "FAILED", 1, "TIMED_OUT", 0),
        ],
    );
}

/// The validator: a failing rule is a finding (BLOCKED, exit 1); a rule that cannot be evaluated
/// is an exception (FAILED, exit 3).
#[test]
fn validator_findings_block_and_exceptions_fail() {
    let c = Cairn::new();
    let toml = format!(
        r#"
[workflow]
name = "checked"
version = "1.0.0"

{}
[[steps]]
id = "tests"
tool = "t"
args = {{ result = "${{input.result}}" }}

[[validator.rules]]
id = "no-failures"
step = "tests"
pointer = "/failed"
op = "eq"
value = 0
finding = "unit tests failed"

[[validator.rules]]
id = "fast-enough"
step = "tests"
pointer = "/seconds"
op = "lt"
value = 10
finding = "the suite is too slow"
"#,
        tool_toml("t", "")
    );
    c.add(&write_workflow(&c.path("checked"), &toml, &tool_files()));

    let out = c.run("checked", &json!({"result": {"failed": 0, "seconds": 3}}), &[]).expect(0);
    assert_eq!(out.json["status"], "READY");
    assert_eq!(out.json["findings"], json!([]));

    let out = c.run("checked", &json!({"result": {"failed": 2, "seconds": 3}}), &["--run-id", "blocked"]).expect(1);
    assert_eq!(out.json["status"], "BLOCKED");
    assert!(out.json["error"].is_null(), "{}", out.stdout);
    assert_eq!(out.step("tests")["status"], "COMPLETED");
    assert_eq!(
        out.json["findings"],
        json!([{"rule": "no-failures", "step": "tests", "pointer": "/failed", "finding": "unit tests failed", "observed": 2}])
    );
    assert_eq!(c.show("blocked")["findings"], out.json["findings"]);
    let events = c.events("blocked");
    let fin = events_of(&events, "run.finished", None);
    assert_eq!(fin.len(), 1);
    assert_eq!(fin[0]["data"]["status"], "BLOCKED");
    assert_eq!(fin[0]["data"]["findings"], 1);

    // Both rules fail: both findings, in rule order; an absent pointer holds nothing observed.
    let out = c.run("checked", &json!({"result": {"failed": 1}}), &[]).expect(1);
    let f = out.json["findings"].as_array().unwrap();
    assert_eq!(f.len(), 2, "{}", out.stdout);
    assert_eq!(f[0]["rule"], "no-failures");
    assert_eq!(f[1]["rule"], "fast-enough");
    assert!(f[1].get("observed").is_none_or(Value::is_null), "{}", out.stdout);

    // `lt` on a string cannot be evaluated: an exception, FAILED, not a finding.
    let out = c.run("checked", &json!({"result": {"failed": 0, "seconds": "three"}}), &["--run-id", "incomparable"]);
    let out = out.expect(3);
    assert_eq!(out.json["status"], "FAILED");
    assert_eq!(out.json["findings"], json!([]));
    let err = out.json["error"].as_str().unwrap();
    assert!(err.contains("validator") && err.contains("fast-enough"), "{err}");
    assert_eq!(out.step("tests")["status"], "COMPLETED", "the step itself completed");
    assert_eq!(c.show("incomparable")["status"], "FAILED");
    assert_eq!(c.runs().len(), 4);
}
