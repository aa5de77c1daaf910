//! The crash tests' workflow: a chain `a → b → c` over the generic tool, each step's behaviour set
//! by the run input, and what a run of it resumed after a crash must show.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::{Cairn, count, events_of, kinds, log_lines, logged_pid, tool_files, tool_toml, wait_until, write_workflow};

/// Registers the chain as `name`; each step's behaviour comes from `input.plans.<id>`.
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

/// The chain's input: the steps' `plans`, and the log and release files in the scratch directory.
pub fn chain_input(c: &Cairn, plans: Value) -> Value {
    serde_json::json!({"plans": plans, "log": c.path_str("log"), "release": c.path_str("release")})
}

/// Waits until the tool of `step` attempt `attempt` has logged its start; returns its pid.
#[track_caller]
pub fn wait_for_tool(log: &Path, step: &str, attempt: u32) -> i32 {
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

/// The chain, resumed after its first `b` attempt was abandoned: `a` and `c` ran once, `b` twice
/// and only its second attempt ended, before `c` started; the events record the one
/// interruption.
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
