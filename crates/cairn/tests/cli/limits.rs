//! Bounded output: a tool that floods stdout fails fast and leaves the store usable.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::*;

#[test]
fn a_tool_printing_100_mb_fails_fast_with_a_clear_error() {
    let c = Cairn::new();
    let toml = format!(
        r#"
[workflow]
name = "flood"
version = "1.0.0"

{}
[[steps]]
id = "flood"
tool = "t"
args = {{ plan = ["big"], log = "${{input.log}}" }}

[[steps]]
id = "after"
tool = "t"
needs = ["flood"]
args = {{ log = "${{input.log}}" }}
"#,
        tool_toml("t", "timeout_secs = 30")
    );
    c.add(&write_workflow(&c.path("flood"), &toml, &tool_files()));
    let started = Instant::now();
    let out = c.run("flood", &json!({"log": c.path("log")}), &["--run-id", "flood-1"]).expect(3);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(8), "a flood must be cut off quickly, took {took:?}");
    assert_eq!(out.json["status"], "FAILED");
    let s = out.step("flood");
    assert_eq!(s["status"], "FAILED");
    assert_eq!(s["outcome"], "FAILED");
    assert_eq!(s["attempts"], 1, "FAILED is not retried by default");
    let err = s["error"].as_str().unwrap();
    assert!(err.contains("stdout") && err.contains("more than"), "{err}");
    assert!(out.json["error"].as_str().unwrap().contains("`flood`"), "{}", out.stdout);
    assert_eq!(out.step("after")["status"], "PENDING", "nothing runs after the failed step");
    assert_eq!(out.step("after")["attempts"], 0);
    assert_eq!(count(&log_lines(&c.path("log")), "after:"), 0);

    // The stored state is intact and readable, and not bloated by the output.
    let shown = c.show("flood-1");
    assert_eq!(contract(&shown), contract(&out.json));
    let events = c.events("flood-1");
    assert_eq!(events_of(&events, "step.failed", Some("flood")).len(), 1);
    let db = std::fs::metadata(c.home().join("cairn.db")).unwrap().len();
    assert!(db < 8 << 20, "the database grew to {db} bytes: the output must not be stored");
    let out = c.cmd(&["show", "flood-1"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("FAILED"));
}
