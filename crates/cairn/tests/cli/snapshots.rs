//! Snapshots (insta) of what a person reads: `cairn show`, `cairn runs`, `cairn explain` without
//! `--json`, and the error lines of typical mistakes. The JSON contracts are checked field by field
//! elsewhere; these pin the human layout, so a change to it shows up as a diff to review.
//!
//! The snapshots are files in `snapshots/` beside this file. A mismatch fails the test; under
//! `CI=true` insta writes nothing, elsewhere it leaves a `.snap.new` beside the snapshot.
//! CONTRIBUTING.md says how to review and accept a change. What varies from one run to the next
//! (the state root's and scratch directory's paths, times, durations, the tool's digest) is
//! replaced by a placeholder before the comparison; the rest is byte for byte.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::json;

use crate::support::*;

/// Every snapshot this module asserts. A snapshot file for any other name fails
/// [`every_snapshot_file_is_asserted`] (the conventions' `unreferenced: reject`, which
/// `cargo insta test` would check, without needing cargo-insta).
const SNAPSHOTS: &[&str] = &[
    "show_ready",
    "show_blocked",
    "show_failed",
    "show_replay",
    "runs",
    "runs_empty",
    "explain_executed",
    "explain_reused",
    "explain_replayed",
    "explain_failed",
    "errors",
];

/// Two steps: `prepare` (the generic tool, whose plan can make it fail) and `report` (writes an
/// artifact), with a validator rule on the report's verdict.
fn snap_workflow(c: &Cairn) {
    let toml = format!(
        r#"[workflow]
name = "snap"
version = "1.0.0"

{tool}
[tools.make]
command = ["python3", "tools/make.py"]

[[steps]]
id = "prepare"
tool = "t"
args = {{ plan = "${{input.plan}}", result = {{ rows = 3, verdict = "${{input.verdict}}" }} }}

[[steps]]
id = "report"
tool = "make"
needs = ["prepare"]
args = {{ write = {{ "report.txt" = "text:3 rows" }}, result = {{ verdict = "${{steps.prepare.result.verdict}}", rows = "${{steps.prepare.result.rows}}" }} }}
outputs = {{ report = "report.txt" }}

[[validator.rules]]
id = "passed"
step = "report"
pointer = "/verdict"
op = "eq"
value = "pass"
finding = "the report did not pass"
"#,
        tool = tool_toml("t", "")
    );
    let mut files = tool_files();
    files.push(("tools/make.py", crate::evidence::TOOL));
    c.add(&write_workflow(&c.path("snap"), &toml, &files));
}

/// `out` with what varies between runs replaced: the state root and scratch directory (as given
/// and canonical), then insta's filters for times, durations and the tool's digest.
fn redact(c: &Cairn, out: &str) -> String {
    let mut text = out.to_string();
    for (path, name) in [(c.home(), "[HOME]"), (c.home.path().to_path_buf(), "[HOME]")] {
        text = text.replace(&path.display().to_string(), name);
    }
    for (path, name) in [(c.work.path().canonicalize().unwrap(), "[WORK]"), (c.work.path().to_path_buf(), "[WORK]")] {
        text = text.replace(&path.display().to_string(), name);
    }
    text
}

/// Asserts the snapshot `name` of `text` under the module's filters.
#[track_caller]
fn snapshot(name: &str, text: &str) {
    assert!(SNAPSHOTS.contains(&name), "snapshot `{name}` is not listed in SNAPSHOTS");
    let mut settings = insta::Settings::clone_current();
    settings.set_omit_expression(true);
    // RFC 3339 times (`cairn_core::time::rfc3339`), with the padding of a column after one.
    settings.add_filter(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})", "[time]");
    // A step's duration, right-aligned in its column: the spaces before it go with it.
    settings.add_filter(r" +\d+(\.\d)? (ms|s)\b", " [duration]");
    // The tool's digest, and a run's identity (which holds the workflow's digest), hash the
    // source of the test tools, which other tests share and may change.
    settings.add_filter(r"(tool_digest +)[0-9a-f]{64}", "${1}[digest]");
    settings.add_filter(r"identity [0-9a-f]{12}…", "identity [hash]…");
    settings.bind(|| insta::assert_snapshot!(name, text));
}

/// `cairn ARGS` for a person (no `--json`): its stdout, which holds all of it (stderr empty).
#[track_caller]
fn human(c: &Cairn, args: &[&str]) -> String {
    let out = c.raw(args).expect(0);
    assert_eq!(out.stderr, "", "`cairn {}` printed on stderr", args.join(" "));
    redact(c, &out.stdout)
}

/// The runs every snapshot of `show`, `runs` and `explain` reads: one READY, one BLOCKED, one
/// FAILED and a replay of the READY one.
fn runs(c: &Cairn) {
    snap_workflow(c);
    let run = |id: &str, verdict: &str, plan: &[&str], status: &str| {
        let out = c.run("snap", &json!({"verdict": verdict, "plan": plan}), &["--run-id", id]);
        assert_eq!(out.json["status"], status, "{}\n{}", out.stdout, out.stderr);
    };
    run("ready", "pass", &["ok"], "READY");
    run("blocked", "fail", &["ok"], "BLOCKED");
    run("failed", "pass", &["exit:3"], "FAILED");
    let replay = c.json(&["replay", "ready", "--step", "report", "--run-id", "again"]).expect(0);
    assert_eq!(replay.json["status"], "READY", "{}", replay.stdout);
}

#[test]
fn show_runs_and_explain_for_a_person() {
    let c = Cairn::new();
    snapshot("runs_empty", &{
        let out = c.raw(&["runs"]).expect(0);
        format!("stdout:\n{}stderr:\n{}", out.stdout, redact(&c, &out.stderr))
    });
    runs(&c);
    snapshot("show_ready", &human(&c, &["show", "ready"]));
    snapshot("show_blocked", &human(&c, &["show", "blocked"]));
    snapshot("show_failed", &human(&c, &["show", "failed"]));
    snapshot("show_replay", &human(&c, &["show", "again"]));
    snapshot("runs", &human(&c, &["runs"]));
    snapshot("explain_executed", &human(&c, &["explain", "ready", "report"]));
    snapshot("explain_reused", &human(&c, &["explain", "again", "prepare"]));
    snapshot("explain_replayed", &human(&c, &["explain", "again", "report"]));
    snapshot("explain_failed", &human(&c, &["explain", "failed", "prepare"]));
}

/// What the CLI prints on stderr for typical mistakes, and its exit code (stdout stays empty).
#[test]
fn error_lines_for_a_person() {
    let c = Cairn::new();
    snap_workflow(&c);
    // Input files of fixed names (`Cairn::input` numbers its files across the test binary).
    let file = |name: &str, text: String| {
        std::fs::write(c.path(name), text).unwrap();
        c.path(name)
    };
    let good = file("good.json", json!({"verdict": "pass", "plan": ["ok"]}).to_string());
    c.raw(&["run", "snap", "--input", good.to_str().unwrap(), "--run-id", "ready"]).expect(0);
    let not_json = file("not-json.json", "{\"verdict\": ".into());
    let other = file("other.json", json!({"verdict": "fail", "plan": ["ok"]}).to_string());
    let cycle = write_workflow(
        &c.path("cycle"),
        &format!(
            "[workflow]\nname = \"cycle\"\nversion = \"1.0.0\"\n\n{}\n[[steps]]\nid = \"a\"\ntool = \"t\"\nneeds = [\"b\"]\n\n[[steps]]\nid = \"b\"\ntool = \"t\"\nneeds = [\"a\"]\n",
            tool_toml("t", "")
        ),
        &tool_files(),
    );
    let path = |p: &Path| p.display().to_string();
    let (good, not_json, other, cycle) = (path(&good), path(&not_json), path(&other), path(&cycle));
    let missing = c.path_str("missing.json");
    let cases: Vec<Vec<&str>> = vec![
        vec!["show", "nope"],
        vec!["explain", "ready", "nope"],
        vec!["run", "snap", "--input", &not_json],
        vec!["run", "snap", "--input", &missing],
        vec!["run", "no-such-workflow", "--input", &good],
        vec!["run", "snap", "--input", &good, "--run-id", "a/b"],
        vec!["run", "snap", "--input", &other, "--run-id", "ready"],
        vec!["replay", "ready", "--step", "nope"],
        vec!["workflow", "add", &cycle],
        vec!["run", "snap"],
    ];
    let mut text = String::new();
    for args in &cases {
        let out = c.raw(args);
        assert_ne!(out.code, 0, "`cairn {}` succeeded: {}", args.join(" "), out.stdout);
        assert_eq!(out.stdout, "", "`cairn {}` printed on stdout", args.join(" "));
        text.push_str(&format!("$ cairn {}\nexit {}\n{}\n", args.join(" "), out.code, out.stderr.trim_end()));
    }
    snapshot("errors", &redact(&c, &text));
}

/// Every file in `snapshots/` is the snapshot of a name in [`SNAPSHOTS`]: a renamed or removed
/// snapshot leaves no stale file, and a `.snap.new` a mismatch left (a change not yet reviewed)
/// fails here too until it is accepted or removed.
#[test]
fn every_snapshot_file_is_asserted() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli/snapshots");
    let files: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let expected: BTreeSet<String> = SNAPSHOTS.iter().map(|n| format!("cli__snapshots__{n}.snap")).collect();
    assert_eq!(files, expected, "the files of {} and the snapshots this module asserts", dir.display());
}
