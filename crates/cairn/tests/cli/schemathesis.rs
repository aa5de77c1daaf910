//! The daemon's HTTP API against its own OpenAPI document, checked by `schemathesis` (pinned in
//! `scripts/requirements-test.txt`, installed in the test venv that `scripts/test.sh` creates and
//! exports as `CAIRN_TEST_VENV`).
//!
//! One state root with real data (a registered workflow, a READY run whose second step left a log,
//! and a FAILED run), one daemon, and per token (Viewer, then Operator) two bounded, deterministic
//! `schemathesis run`s (see [`PASSES`]): every operation of `GET /openapi.json` — the document's
//! own endpoint included, which schemathesis leaves out unless a filter names it — and then the
//! event stream of a real run. Every phase runs (examples, coverage, fuzzing, and stateful in the
//! first, the one with links to follow), positive and negative data, about half the generated identifiers replaced by real ones (see [`CONFIG`]),
//! with these checks:
//!
//! * `not_a_server_error`: no 5xx;
//! * `status_code_conformance`: every status is one the operation declares;
//! * `content_type_conformance`: every `Content-Type` is one the status declares;
//! * `response_schema_conformance`: every body (each Server-Sent Event of a `follow=true` stream
//!   too) matches its declared schema.
//!
//! The stateful phase follows the document's OpenAPI links (a submitted run to its events and
//! steps, a plan to its execution, a verification to its notebook, …, see `api/openapi.rs`), and
//! the test checks that it ran on every declared link and that the Operator's run followed some.
//!
//! The run is bounded (examples per operation and stateful scenarios, a per-request timeout, a
//! hard deadline for the whole call) and reproducible (deterministic generation, one worker, no example database): a
//! failure prints schemathesis' report, with a `curl` line for each failing case.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::*;

/// Test cases per operation and phase: enough to reach every declared status, small enough for CI.
const MAX_EXAMPLES: usize = 25;
/// Scenarios of the stateful phase (chains of calls along the document's links), and the most
/// calls in one: enough to follow most links from a real run, plan, verification, job or doc.
const STATEFUL: &str = "[phases.stateful]\nmax-steps = 8\n\n[phases.stateful.generation]\nmax-examples = 120\n";
/// Per request. The daemon answers in milliseconds; an event stream of a finished run ends at once.
const REQUEST_TIMEOUT: &str = "5";
/// For one whole `schemathesis run`; the longest takes about 10 s here. Only stops a hang.
const RUN_DEADLINE: Duration = Duration::from_secs(150);
/// The checks; see the module documentation.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance";

/// The test venv: `CAIRN_TEST_VENV` (required under `CI=true`), else `<repo>/.venv`. `None` (the
/// test is skipped, loudly) only outside CI when no venv with schemathesis is found.
fn venv() -> Option<PathBuf> {
    let ci = ci();
    let from_env = std::env::var_os("CAIRN_TEST_VENV").is_some();
    assert!(
        from_env || !ci,
        "CAIRN_TEST_VENV is not set; under CI the schemathesis test needs the test venv that scripts/test.sh \
         creates from scripts/requirements-test.txt (run scripts/test.sh, or set CAIRN_TEST_VENV to a venv \
         with those packages)"
    );
    let venv = venv_dir();
    if venv.join("bin/schemathesis").is_file() {
        return Some(venv);
    }
    let message = format!(
        "no schemathesis in the test venv {} (install scripts/requirements-test.txt into it: run scripts/test.sh, \
         or `{}/bin/pip install -r scripts/requirements-test.txt`)",
        venv.display(),
        venv.display()
    );
    assert!(!ci && !from_env, "{message}");
    eprintln!("SKIPPED: {message}");
    None
}

/// The input must be an object with `plan` (strings, see [`TOOL_PY`]).
const INPUT_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["plan"],
  "properties": {"plan": {"type": "array", "items": {"type": "string"}}}
}"#;

/// Writes three lines to stderr, so a step log has content.
const NOISY_PY: &str = r#"import json, sys
sys.stdin.read()
for i in range(1, 4):
    sys.stderr.write("noise line %d\n" % i)
sys.stderr.flush()
sys.stdout.write(json.dumps({"noisy": True}))
"#;

/// `probe@1.0.0`: step `first` acts on `input.plan`; step `noisy` (after it) writes to stderr.
fn probe_workflow(c: &Cairn) {
    let toml = format!(
        r#"
[workflow]
name = "probe"
version = "1.0.0"
input_schema = "input.schema.json"

{}
[tools.noisy]
command = ["python3", "tools/noisy.py"]

[[steps]]
id = "first"
tool = "t"
args = {{ plan = "${{input.plan}}" }}
max_attempts = 1

[[steps]]
id = "noisy"
tool = "noisy"
needs = ["first"]
args = {{ after = "${{steps.first.result.step}}" }}
"#,
        tool_toml("t", "")
    );
    let mut files = tool_files();
    files.push(("tools/noisy.py", NOISY_PY));
    files.push(("input.schema.json", INPUT_SCHEMA));
    c.add(&write_workflow(&c.path("probe"), &toml, &files));
}

/// Real values for schemathesis to mix (about half the time) into what it generates, so requests
/// reach the data behind the 404s: the runs, steps and workflow made here, and event sequence
/// numbers below the end of the log (a generated `after` is almost always past it, and an event
/// stream past the end is empty). `POST /runs` always sends an input the workflow accepts (so a
/// generated submission of `probe` really runs, and the 200/202 answers and `cancel` of a running
/// run get checked), and `POST /kernel/jobs` always sends harmless code: generated code would be
/// executed, and IPython runs `!`-lines in a shell.
const CONFIG: &str = r#"
[dictionaries.runs]
values = ["r1", "r2"]

[dictionaries.steps]
values = ["first", "noisy"]

[dictionaries.workflows]
values = ["probe"]

[dictionaries.versions]
values = ["1.0.0"]

[dictionaries.targets]
values = ["local"]

[dictionaries.statuses]
values = ["READY", "FAILED"]

[dictionaries.seqs]
values = [0, 2]

[parameters]
"path.run_id" = { dictionary = "runs", probability = 0.5 }
"path.step_id" = { dictionary = "steps", probability = 0.5 }
"path.name" = { dictionary = "workflows", probability = 0.5 }
"query.version" = { dictionary = "versions", probability = 0.5 }
"query.status" = { dictionary = "statuses", probability = 0.5 }
"query.after" = { dictionary = "seqs", probability = 0.5 }
"body.agent_id" = { dictionary = "workflows", probability = 0.5 }
"body.workflow" = { dictionary = "workflows", probability = 0.5 }
"body.version" = { dictionary = "versions", probability = 0.5 }
"body.target" = { dictionary = "targets", probability = 0.5 }
"body.run_id" = { dictionary = "runs", probability = 0.3 }
"body.replay.source_run_id" = { dictionary = "runs", probability = 0.5 }
"body.replay.step_ids[*]" = { dictionary = "steps", probability = 0.5 }

[[operations]]
include-name = "POST /runs"
parameters = { "body.input" = { plan = ["ok"] } }

[[operations]]
include-name = "POST /plans"
parameters = { "body.input" = { plan = ["ok"] } }

[[operations]]
include-name = "POST /kernel/jobs"
parameters = { "body.code" = "print('schemathesis')" }
"#;

/// Stops the daemon when the test ends, however it ends.
struct DaemonGuard<'a> {
    cairn: &'a Cairn,
    pid: i32,
}

impl Drop for DaemonGuard<'_> {
    fn drop(&mut self) {
        let _ = self.cairn.command(&["daemon", "stop", "--json"]).output();
        if !wait_until(Duration::from_secs(10), || !alive(self.pid)) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// One kind of `schemathesis run`: its config file and which operations it selects.
struct Pass {
    name: &'static str,
    config: &'static str,
    /// Operation filters.
    filter: &'static [&'static str],
    /// How many operations it must test; `None`: every operation of the document.
    tests: Option<usize>,
    /// Whether its stateful phase runs (it follows the document's links).
    stateful: bool,
}

static PASSES: [Pass; 2] = [
    // Every operation, `GET /openapi.json` too (left out unless a filter selects it).
    Pass {
        name: "every operation",
        config: CONFIG,
        filter: &["--include-path-regex", "^/"],
        tests: None,
        stateful: true,
    },
    // The event stream of a real run (see STREAM_CONFIG).
    Pass {
        name: "event streams",
        config: STREAM_CONFIG,
        filter: &["--include-name", "GET /runs/{run_id}/events"],
        tests: Some(1),
        // One operation has no link to follow.
        stateful: false,
    },
];

/// `GET /runs/{run_id}/events?follow=true` of a real run, from its start or the middle, so every
/// Server-Sent Event gets checked against the document: in the first pass `follow`, a real run id
/// and a small `after` rarely come together (the stream past the end is empty).
const STREAM_CONFIG: &str = r#"
[dictionaries.runs]
values = ["r1", "r2"]

[dictionaries.seqs]
values = [0, 2]

[parameters]
"path.run_id" = { dictionary = "runs", probability = 0.8 }
"query.after" = { dictionary = "seqs", probability = 0.5 }
"query.follow" = "true"
"#;

/// What one `schemathesis run` did.
struct Outcome {
    role: &'static str,
    pass: &'static Pass,
    code: Option<i32>,
    output: String,
    elapsed: Duration,
}

/// `schemathesis run <url>/openapi.json` of one pass with `role`'s token, in `dir` (so no config
/// file of the repository is picked up and whatever it writes stays in the scratch directory).
fn schemathesis(venv: &Path, url: &str, role: &'static str, token: &str, pass: &'static Pass, dir: &Path) -> Outcome {
    let slug = pass.name.replace(' ', "-");
    let log = dir.join(format!("schemathesis-{role}-{slug}.log"));
    let file = std::fs::File::create(&log).unwrap();
    let config = dir.join(format!("schemathesis-{slug}.toml"));
    // The example counts are in the file, not on the command line, which would override the
    // stateful phase's own.
    let stateful = if pass.stateful { STATEFUL } else { "" };
    std::fs::write(&config, format!("[generation]\nmax-examples = {MAX_EXAMPLES}\n\n{stateful}{}", pass.config))
        .unwrap();
    let mut args: Vec<String> = [
        "--config-file",
        config.to_str().unwrap(),
        "run",
        &format!("{url}/openapi.json"),
        "--header",
        &format!("Authorization: Bearer {token}"),
        "--checks",
        CHECKS,
        // Reproducible: the same cases every run (schemathesis ignores `--seed` in this mode).
        "--generation-deterministic",
        "--workers",
        "1",
        "--request-timeout",
        REQUEST_TIMEOUT,
        "--no-color",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(pass.filter.iter().map(|s| s.to_string()));
    if !pass.stateful {
        args.extend(["--phases".to_string(), "examples,coverage,fuzzing".to_string()]);
    }
    let started = Instant::now();
    let mut child = Command::new(venv.join("bin/schemathesis"))
        .args(&args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}/bin/schemathesis: {e}", venv.display()));
    let exited = wait_exit(&mut child, RUN_DEADLINE);
    let elapsed = started.elapsed();
    let mut output = format!("$ schemathesis {}\n", args.join(" ").replace(token, "<token>"));
    output.push_str(&std::fs::read_to_string(&log).unwrap_or_default());
    if exited.timed_out {
        output.push_str(&format!("\n[killed: still running after {RUN_DEADLINE:?}]\n"));
    }
    Outcome { role, pass, code: exited.code, output, elapsed }
}

/// Every operation of the document answers with a declared status, content type and body, for
/// the Viewer token and for the Operator token; nothing answers 5xx.
#[test]
fn every_operation_conforms_to_the_openapi_document_for_both_tokens() {
    let Some(venv) = venv() else { return };
    let c = Cairn::new();
    probe_workflow(&c);

    // The daemon first, with the venv's python for its session kernel (else it would build its
    // own venv from PyPI) and an empty config; `cairn run` then goes through it.
    let config = tempfile::Builder::new().prefix("cairn-stcfg-").tempdir().unwrap();
    let out = c
        .command(&["daemon", "start", "--json"])
        .env("CAIRN_PYTHON", venv.join("bin/python"))
        .env("CAIRN_CONFIG", config.path())
        .env("CAIRN_QUIET_DAEMON", "1")
        .output()
        .unwrap();
    let started = parse_stdout(&String::from_utf8_lossy(&out.stdout), out.status.code().unwrap_or(-1), "daemon start");
    assert!(out.status.success() && started["running"] == true, "{started}\n{}", String::from_utf8_lossy(&out.stderr));
    let daemon = c.daemon();
    let _guard = DaemonGuard { cairn: &c, pid: daemon.pid };

    let ok = c.run("probe", &json!({"plan": ["ok"]}), &["--run-id", "r1"]);
    assert_eq!(ok.json["status"], "READY", "{}\n{}", ok.stdout, ok.stderr);
    let failed = c.run("probe", &json!({"plan": ["exit:3"]}), &["--run-id", "r2"]);
    assert_eq!(failed.json["status"], "FAILED", "{}\n{}", failed.stdout, failed.stderr);
    let doc = http("GET", &format!("{}/openapi.json", daemon.url), None, None, &[]);
    assert_eq!(doc.status, 200, "{}", doc.text);
    let operations: usize = doc.body["paths"]
        .as_object()
        .expect("paths in /openapi.json")
        .values()
        .map(|item| item.as_object().unwrap().keys().filter(|k| HTTP_METHODS.contains(&k.as_str())).count())
        .sum();
    assert!(operations > 0, "no operations in {}", doc.text);
    // The links the document declares, which the stateful phase follows.
    let links: usize = doc.body["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|item| item.as_object().unwrap().values())
        .filter_map(|op| op["responses"].as_object())
        .flat_map(|responses| responses.values())
        .filter_map(|r| r["links"].as_object().map(|l| l.len()))
        .sum();
    assert!(links > 0, "no links in {}", doc.text);

    // The Viewer first: it changes nothing, so its pass sees exactly the data made above.
    let mut outcomes = Vec::new();
    for role in ["viewer", "operator"] {
        for pass in &PASSES {
            outcomes.push(schemathesis(&venv, &daemon.url, role, &c.token(role), pass, c.work.path()));
        }
    }

    let mut problems = Vec::new();
    for o in &outcomes {
        eprintln!("schemathesis, {} token, {}: exit {:?} in {:.1?}", o.role, o.pass.name, o.code, o.elapsed);
        if std::env::var_os("TMP_SHOW").is_some() {
            eprintln!("{}", o.output);
        }
        let tested = format!("Tested: {}", o.pass.tests.unwrap_or(operations));
        if o.code != Some(0) {
            problems.push(format!("schemathesis, {} token, {}: exit {:?}", o.role, o.pass.name, o.code));
        } else if !o.output.contains(&tested) {
            problems.push(format!("schemathesis, {} token, {}: not `{tested}`", o.role, o.pass.name));
        } else if o.pass.stateful {
            // The stateful phase ran on every declared link, and the Operator's (who can create
            // what they lead from) followed some.
            match stateful_links(&o.output) {
                Some((covered, declared)) if declared == links && (covered > 0 || o.role == "viewer") => {}
                other => problems.push(format!(
                    "schemathesis, {} token, {}: the stateful phase followed {other:?} (covered, declared) links of the \
                     document's {links}",
                    o.role, o.pass.name
                )),
            }
        }
    }
    let health = http("GET", &format!("{}/health", daemon.url), None, None, &[]);
    if health.status != 200 {
        problems
            .push(format!("the daemon no longer answers /health after the runs: {} {}", health.status, health.text));
    }
    if !problems.is_empty() {
        let reports: Vec<String> = outcomes
            .iter()
            .filter(|o| o.code != Some(0))
            .map(|o| {
                format!(
                    "==================== schemathesis, {} token, {} ====================\n{}",
                    o.role, o.pass.name, o.output
                )
            })
            .collect();
        panic!("{}\n\n{}", problems.join("\n"), reports.join("\n"));
    }
}

/// From schemathesis' report, `API Links: N covered / S selected / T total (I inferred)`: the
/// links it followed, and those the document declares (the total less the ones it inferred).
fn stateful_links(output: &str) -> Option<(usize, usize)> {
    let line = output.lines().find(|l| l.trim_start().starts_with("API Links:"))?;
    let numbers: Vec<usize> =
        line.split(|c: char| !c.is_ascii_digit()).filter(|w| !w.is_empty()).filter_map(|w| w.parse().ok()).collect();
    match numbers.as_slice() {
        [covered, _selected, total, inferred] => Some((*covered, total - inferred)),
        [covered, _selected, total] => Some((*covered, *total)),
        _ => None,
    }
}

/// The methods an OpenAPI path item may hold operations for.
const HTTP_METHODS: [&str; 8] = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];
