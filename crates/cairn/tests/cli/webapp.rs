//! The read-only web app end to end, in a real browser: one state root filled through the real CLI
//! and daemon (READY, BLOCKED and FAILED runs, a replay child with a reused step, a passed and a
//! failed verification, session-kernel jobs, the test sshd's target, and a run that is still
//! RUNNING), then `cairn ui --no-open --json` for a login link, then `tools/webapp-e2e/e2e.mjs`
//! drives Debian's chromium headless through playwright-core: every page against the DOM
//! contract, axe-core on each, the live run turning READY without a reload, the notebook
//! downloads, and a network log with only GETs carrying the Viewer token.
//!
//! Needs `/usr/bin/chromium`, node and `npm ci` in tools/webapp-e2e (scripts/test.sh installs all
//! three); without them the test fails under `CI=true` and skips loudly otherwise. Screenshots,
//! downloads and the network log land in `target/webapp-artifacts/`.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;

use cairn_store::testing::Kind;

use crate::support::*;

const CHROMIUM: &str = "/usr/bin/chromium";

/// How long node may take for the whole browser test (it has its own, shorter deadline).
const NODE_TIMEOUT: Duration = Duration::from_secs(300);

/// The demo workflow's tool: prints a log line on stderr (the web app shows log tails), then acts
/// on `args.mode`: `ok` prints `args.result` (or `{step}`), `exit:N` fails with code N, `gate`
/// waits until the file `args.gate` exists (at most `args.timeout` seconds, then fails).
const TOOL: &str = r#"import json, os, sys, time
raw = sys.stdin.read()
args = json.loads(raw) if raw.strip() else {}
step = os.environ.get("CAIRN_STEP_ID", "?")
sys.stderr.write("webapp-e2e: step %s says hello\n" % step)
sys.stderr.flush()
mode = args.get("mode", "ok")
if mode.startswith("exit:"):
    sys.stderr.write("webapp-e2e: step %s fails on purpose\n" % step)
    sys.exit(int(mode[5:]))
if mode == "gate":
    if args.get("started"):
        open(args["started"], "w").close()
    deadline = time.time() + float(args.get("timeout", 120))
    while not os.path.exists(args["gate"]):
        if time.time() > deadline:
            sys.stderr.write("webapp-e2e: the gate %s never opened\n" % args["gate"])
            sys.exit(1)
        time.sleep(0.1)
result = args.get("result") or {"step": step}
if args.get("write"):
    # A declared output: the step's evidence file, in its own directory.
    with open(args["write"], "w") as f:
        json.dump(result, f)
sys.stdout.write(json.dumps(result))
"#;

const DEMO: &str = "webapp-demo";
/// A workflow of more steps than a page of a run holds.
const LARGE: &str = "webapp-large";
const LARGE_FAN: usize = 1500;
const LIVE: &str = "webapp-live";
const VERSION: &str = "1.0.0";
const STEPS: [&str; 3] = ["prepare", "analyse", "report"];
const LIVE_STEPS: [&str; 2] = ["hold", "finish"];
const TOOLS: [&str; 2] = ["worker", "reporter"];
const FINDING: &str = "the report did not pass";

/// A line only the passed verification's document holds (the download check looks for it).
const PASSED_CODE: &str = "print('cairn webapp e2e: the answer is', 6 * 7)";
/// The procedure doc the Docs page shows: its name, title, a second-level heading, a code line and
/// a word only it holds (the search finds it by that word).
const DOC: &str = "webapp-procedure";
const DOC_TITLE: &str = "Answer the question on new data";
const DOC_HEADING: &str = "Derive the parameters";
const DOC_CODE: &str = "answer = 6 * 7";
const DOC_WORD: &str = "ultimately";
const DOC_TEXT: &str = "# Answer the question on new data\n\nThe procedure, ultimately, minus the dataset. <script>alert(1)</script>\n\n## Derive the parameters\n\n- count the *inputs*\n- [the guide](https://example.org/guide)\n\n```python\nanswer = 6 * 7\n```\n";

/// A line only the failed verification's document holds (its draft shows it).
const FAILED_CODE: &str = "raise RuntimeError('cairn webapp e2e: this verification fails on purpose')";

fn demo_toml() -> String {
    format!(
        r#"
[workflow]
name = "{DEMO}"
version = "{VERSION}"
description = "The web app's browser test: three steps and one rule."

[tools.worker]
command = ["python3", "tools/tool.py"]

[tools.reporter]
command = ["python3", "tools/tool.py", "report"]

[[steps]]
id = "prepare"
tool = "worker"
args = {{ mode = "${{input.modes.prepare}}", write = "summary.json" }}
outputs = {{ summary = "summary.json" }}

[[steps]]
id = "analyse"
tool = "worker"
needs = ["prepare"]
args = {{ mode = "${{input.modes.analyse}}", after = "${{steps.prepare.result.step}}" }}

[[steps]]
id = "report"
tool = "reporter"
needs = ["analyse"]
args = {{ mode = "ok", result = "${{input.report}}", after = "${{steps.analyse.result.step}}", summary = "${{steps.prepare.outputs.summary}}" }}

[[validator.rules]]
id = "report-passed"
step = "report"
pointer = "/verdict"
op = "eq"
value = "pass"
finding = "{FINDING}"
"#
    )
}

fn live_toml() -> String {
    format!(
        r#"
[workflow]
name = "{LIVE}"
version = "{VERSION}"
description = "The web app's browser test: a run that waits for a gate file."

[tools.gate]
command = ["python3", "tools/tool.py"]
timeout_secs = 600

[[steps]]
id = "hold"
tool = "gate"
args = {{ mode = "gate", gate = "${{input.gate}}", started = "${{input.started}}", timeout = 240 }}

[[steps]]
id = "finish"
tool = "gate"
needs = ["hold"]
args = {{ mode = "ok", after = "${{steps.hold.result.step}}" }}
"#
    )
}

/// What the browser test needs: chromium, node, and the npm packages. `None` (after saying so)
/// when something is missing outside CI; a panic under CI.
fn browser() -> Option<(PathBuf, PathBuf)> {
    let dir = repo().join("tools/webapp-e2e");
    let node = ["/usr/bin/node", "/usr/local/bin/node"].into_iter().map(PathBuf::from).find(|p| p.exists());
    let mut missing = Vec::new();
    if !Path::new(CHROMIUM).exists() {
        missing.push(format!("{CHROMIUM} (apt-get install chromium)"));
    }
    if node.is_none() {
        missing.push("node (apt-get install nodejs npm)".to_string());
    }
    for f in ["node_modules/playwright-core/package.json", "node_modules/axe-core/axe.min.js"] {
        if !dir.join(f).exists() {
            missing.push(format!("{} (npm ci in tools/webapp-e2e)", dir.join(f).display()));
        }
    }
    if missing.is_empty() {
        return Some((node.unwrap(), dir));
    }
    let msg = format!("the browser test needs {}; scripts/test.sh installs them", missing.join(", "));
    assert!(!ci(), "{msg}");
    eprintln!("SKIPPED webapp end-to-end test: {msg}");
    None
}

/// A state root whose commands and daemon see the venv's python and an empty `CAIRN_CONFIG`.
struct Env {
    c: Cairn,
    /// The empty `CAIRN_CONFIG`, kept for the test's length.
    _config: TempDir,
    /// Control sockets of ssh probes, closed at the end.
    ssh: bool,
}

impl Env {
    /// An environment whose registry is `kind`'s (`None`: no PostgreSQL here, outside CI).
    fn on(kind: Kind) -> Option<Env> {
        let config = tempfile::Builder::new().prefix("cairn-wcfg-").tempdir().unwrap();
        // Snakemake (the pipeline run) comes from the test venv, as the daemon finds it on PATH.
        let path = format!("{}:{}", venv_dir().join("bin").display(), std::env::var("PATH").unwrap_or_default());
        let c = Cairn::on(kind)?.with_kernel(python(), config.path()).with_env("PATH", path);
        Some(Env { c, _config: config, ssh: false })
    }

    /// `cairn ARGS --json`, with the `--json` contract checked.
    fn json(&self, args: &[&str]) -> Out {
        self.c.json(args)
    }

    /// `cairn run WF --input FILE --json` expecting exit `code`: the run object.
    #[track_caller]
    fn run(&self, workflow: &str, input: &Value, code: i32) -> Value {
        self.c.run(workflow, input, &[]).expect(code).json
    }
}

impl Drop for Env {
    /// A failing test leaves nothing running: the daemon, ssh masters, kernels of this root.
    fn drop(&mut self) {
        let _ = self.c.command(&["daemon", "stop", "--json"]).timeout(Duration::from_secs(20)).output();
        if self.ssh {
            close_ssh_masters(&self.c);
        }
        kill_kernels(self.c.home.path());
    }
}

/// The background `cairn run` of the live run; killed if the test fails before it ends.
struct Background(Option<Child>);

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn id(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_else(|| panic!("no `{key}` in {v:#}")).to_string()
}

/// The data of the web app, made through the real CLI and daemon; returns what the browser test
/// must find (`CAIRN_EXPECT`) and the live run's background process.
fn fill(e: &Env, gate: &Path) -> (Value, Background, Held) {
    let c = &e.c;
    e.json(&["daemon", "start"]).expect(0);

    let files = [("tools/tool.py", TOOL)];
    c.add(&write_workflow(&c.path(DEMO), &demo_toml(), &files));
    c.add(&write_workflow(&c.path(LIVE), &live_toml(), &files));

    // Runs: READY, BLOCKED (the rule is not met), FAILED (a step exits 3).
    let input = |analyse: &str, verdict: &str| json!({"modes": {"prepare": "ok", "analyse": analyse}, "report": {"verdict": verdict}});
    // The READY run's report is over the 64 KiB a run carries of a result: the page shows it
    // cut, and whole once opened.
    let mut ready_input = input("ok", "pass");
    ready_input["report"]["notes"] = json!("n".repeat(70_000));
    let ready = e.run(DEMO, &ready_input, 0);
    assert_eq!(ready["status"], "READY", "{ready:#}");
    assert_eq!(step(&ready, "report")["result_truncated"], true, "{:#}", step(&ready, "report"));
    let blocked = e.run(DEMO, &input("ok", "fail"), 1);
    assert_eq!(blocked["status"], "BLOCKED", "{blocked:#}");
    assert!(!blocked["findings"].as_array().unwrap().is_empty(), "{blocked:#}");
    let failed = e.run(DEMO, &input("exit:3", "pass"), 3);
    assert_eq!(failed["status"], "FAILED", "{failed:#}");
    assert_eq!(step(&failed, "analyse")["status"], "FAILED", "{failed:#}");

    // A replay child of the READY run: `prepare` is reused, the rest runs again.
    let ready_id = id(&ready, "run_id");
    let child = e.json(&["replay", &ready_id, "--step", "analyse"]).expect(0).json;
    assert_eq!(child["status"], "READY", "{child:#}");
    assert_eq!(step(&child, "prepare")["decision"], "reuse", "{child:#}");
    assert_eq!(child["replay"]["source_run_id"], ready_id.as_str(), "{child:#}");

    // A pipeline step: its jobs are shown as the run and its jobs endpoint count them.
    let snakefile = "rule all:\n    input: expand('results/{s}.txt', s=['a', 'b', 'c'])\n\nrule one:\n    output: 'results/{s}.txt'\n    shell: 'echo {wildcards.s} > {output}'\n";
    let pipeline_toml = "[workflow]\nname = \"webapp-pipeline\"\nversion = \"1.0.0\"\n\n[tools.p]\nkind = \"snakemake\"\n\n[[steps]]\nid = \"pipeline\"\ntool = \"p\"\nargs = { snakefile = \"Snakefile\" }\n";
    c.add(&write_workflow(&c.path("webapp-pipeline"), pipeline_toml, &[("Snakefile", snakefile)]));
    let pipeline = e.run("webapp-pipeline", &json!({}), 0);
    assert_eq!(step(&pipeline, "pipeline")["result"]["jobs"]["total"], 4, "{pipeline:#}");
    // The page's "4 of 4 jobs done" is the run's own count.
    assert_eq!(step(&pipeline, "pipeline")["jobs"], json!({"done": 4, "total": 4, "running": 0, "failed": 0}));

    // Verifications: one passes, one fails.
    let pass_doc = c.path("passing.md");
    std::fs::write(&pass_doc, format!("# A passing analysis\n\nThe answer.\n\n```python\n{PASSED_CODE}\n```\n"))
        .unwrap();
    let passed = e.json(&["verify", pass_doc.to_str().unwrap()]).expect(0).json;
    assert_eq!(passed["verdict"], "passed", "{passed:#}");
    let fail_doc = c.path("failing.md");
    std::fs::write(
        &fail_doc,
        format!("# A failing analysis\n\n```python\nx = 1\n```\n\nThen it breaks.\n\n```python\n{FAILED_CODE}\n```\n"),
    )
    .unwrap();
    let failed_v = e.json(&["verify", fail_doc.to_str().unwrap()]).expect(1).json;
    assert_eq!(failed_v["verdict"], "failed", "{failed_v:#}");

    // Procedure docs: one in two versions, the newest saved from the passed verification, and
    // another one.
    let doc_v1 = c.path("procedure-v1.md");
    std::fs::write(&doc_v1, "# Answer the question\n\nA first draft.\n").unwrap();
    c.json(&["doc", "save", DOC, doc_v1.to_str().unwrap()]).expect(0);
    let doc_v2 = c.path("procedure-v2.md");
    std::fs::write(&doc_v2, DOC_TEXT).unwrap();
    let vid = id(&passed, "verification_id");
    let saved = c.json(&["doc", "save", DOC, doc_v2.to_str().unwrap(), "--from", &vid]).expect(0).json;
    assert_eq!(
        (saved["version"].as_u64(), saved["verification"]["verdict"].as_str()),
        (Some(2), Some("passed")),
        "{saved:#}"
    );
    let other = c.path("procedure-other.md");
    std::fs::write(&other, "# Something else\n\nNothing about the answer.\n").unwrap();
    c.json(&["doc", "save", "webapp-other", other.to_str().unwrap()]).expect(0);

    // Session-kernel jobs: two that pass and one that errors.
    let mut jobs = Vec::new();
    for (code, exit, status) in
        [("x = 6 * 7", 0, "ok"), ("print('cairn webapp e2e job', x)", 0, "ok"), ("1 / 0", 1, "error")]
    {
        let job = e.json(&["kernel", "exec", code]).expect(exit).json;
        assert_eq!(job["status"], status, "{job:#}");
        jobs.push(json!({"id": id(&job, "job_id"), "status": status, "code": code}));
    }

    // The test sshd's target, registered and probed.
    let target = sshd().map(|d| {
        let ssh = format!("root@127.0.0.1:{}", sshd_port());
        let (identity, known_hosts) = (d.join("id_ed25519"), d.join("known_hosts"));
        c.add_target("test-sshd", &ssh, &identity, &known_hosts, "/tmp/cairn-test-workspace/ws", &[]).expect(0);
        e.json(&["target", "probe", "test-sshd"]).expect(0);
        "test-sshd".to_string()
    });

    // A verification in progress (after the session jobs: it holds the kernel slot), held in its
    // second cell until its own gate opens: a row of the jobs table while the browser looks.
    let (vgate, vstarted) = (c.path("verification-gate"), c.path("verification-started"));
    let held_doc = c.path("held.md");
    std::fs::write(
        &held_doc,
        format!(
            "```python\nopen({:?}, 'w').close()\n```\n\n```python\nimport os, time\nwhile not os.path.exists({:?}):\n    time.sleep(0.05)\n```\n",
            vstarted.to_str().unwrap(),
            vgate.to_str().unwrap()
        ),
    )
    .unwrap();
    let held = Held {
        gate: vgate,
        child: Background(Some(c.spawn(&["verify".into(), held_doc.display().to_string(), "--json".into()]))),
    };
    assert!(wait_until(Duration::from_secs(60), || vstarted.exists()), "the held verification never started");
    let mut held_row = Value::Null;
    assert!(
        wait_until(Duration::from_secs(15), || {
            let jobs = e.json(&["kernel", "jobs"]).expect(0).json;
            held_row = jobs["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .find(|j| j["kind"] == "verification")
                .cloned()
                .unwrap_or_default();
            held_row["cells_done"] == 1
        }),
        "the held verification is not listed: {held_row:#}"
    );

    // The live run: started in the background through the daemon, RUNNING until the gate opens.
    let started = c.path("live-started");
    let mut args = c.run_args(LIVE, &json!({"gate": gate, "started": started}), &[]);
    args.push("--json".into());
    let bg = Background(Some(c.spawn(&args)));
    assert!(wait_until(Duration::from_secs(30), || started.exists()), "the live run's step never started");
    let mut live = Value::Null;
    assert!(
        wait_until(Duration::from_secs(15), || {
            live = e.json(&["runs"]).expect(0).json["runs"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["workflow"] == LIVE)
                .cloned()
                .unwrap_or(Value::Null);
            live["status"] == "RUNNING"
        }),
        "the live run is not RUNNING: {live:#}"
    );
    let live_id = id(&live, "run_id");
    assert_eq!(step(&c.show(&live_id), "hold")["status"], "RUNNING");

    // A run of more steps than one page (a fan of 1,500 and a join): the page shows it by
    // layers and a virtualized table.
    let mut large_toml = format!(
        "[workflow]\nname = \"{LARGE}\"\nversion = \"{VERSION}\"\n\n[tools.step]\ncommand = [\"tools/step.sh\"]\n\n"
    );
    for i in 0..LARGE_FAN {
        large_toml.push_str(&format!("[[steps]]\nid = \"s{i}\"\ntool = \"step\"\n\n"));
    }
    let needs: Vec<String> = (0..LARGE_FAN).map(|i| format!("\"s{i}\"")).collect();
    large_toml.push_str(&format!("[[steps]]\nid = \"join\"\ntool = \"step\"\nneeds = [{}]\n", needs.join(", ")));
    let step_sh = "#!/bin/sh\ncat >/dev/null\necho \"webapp-e2e: large step $CAIRN_STEP_ID\" >&2\necho '{}'\n";
    c.add(&write_workflow(&c.path(LARGE), &large_toml, &[("tools/step.sh", step_sh)]));
    let large = c.run(LARGE, &json!({}), &["--parallel", "2"]).expect(0).json;
    assert_eq!(large["status"], "READY", "{}", large["error"]);
    assert_eq!(large["step_counts"]["total"], LARGE_FAN + 1);

    // The evidence as the API gives it: what the page must show, field for field.
    let shown = c.show(&ready_id);
    assert!(shown["steps"].as_array().unwrap().iter().all(|s| s.get("jobs").is_none()), "no pipeline step: {shown:#}");
    let prepare = step(&shown, "prepare");
    let artifact = prepare["artifacts"][0].clone();
    assert_eq!(artifact["path"], "steps/prepare/summary.json", "{prepare:#}");
    let child_shown = c.show(&id(&child, "run_id"));
    let carried = step(&child_shown, "prepare")["artifacts"][0].clone();
    assert_eq!(carried["sha256"], artifact["sha256"], "the reused step carries the source's artifact");
    assert_eq!(carried["reused_from"], ready_id.as_str());
    let report = c.json(&["result", &ready_id, "report"]).expect(0).json;
    assert_eq!(report["result_truncated"], false);

    let expect = json!({
        "pipeline": {"run": id(&pipeline, "run_id"), "step": "pipeline", "jobs": "4 of 4 jobs done",
            "job_count": 4, "job_edges": 3, "artifact": "steps/pipeline/results/a.txt", "artifact_rule": "one (s=a)"},
        "evidence": {
            "step": "prepare",
            "result": prepare["result"],
            "artifact": artifact,
            "cut_step": "report",
            "cut_bytes": step(&shown, "report")["result_bytes"],
            "cut_result": report["result"],
        },
        "ready": ready_id,
        "large": {"run": id(&large, "run_id"), "steps": LARGE_FAN + 1, "fan": LARGE_FAN,
            "log_text": "webapp-e2e: large step s0"},
        "blocked": id(&blocked, "run_id"),
        "failed": id(&failed, "run_id"),
        "failed_step": "analyse",
        "replay_child": id(&child, "run_id"),
        "replay_source": ready_id,
        "live": live_id,
        "reused_step": "prepare",
        "workflow": DEMO,
        "live_workflow": LIVE,
        "version": VERSION,
        "steps": STEPS,
        "live_steps": LIVE_STEPS,
        "tools": TOOLS,
        "finding": FINDING,
        "log_text": "webapp-e2e: step prepare says hello",
        "fail_text": "webapp-e2e: step analyse fails on purpose",
        "passed_verification": id(&passed, "verification_id"),
        "failed_verification": id(&failed_v, "verification_id"),
        "passed_code": PASSED_CODE,
        "failed_code": FAILED_CODE,
        "jobs": jobs,
        "held_verification": {"id": id(&held_row, "job_id"), "cells": "held: 1 of 2 cells done"},
        "failed_cell_error": "RuntimeError: cairn webapp e2e: this verification fails on purpose",
        "target": target,
        "doc": {
            "name": DOC,
            "title": DOC_TITLE,
            "heading": DOC_HEADING,
            "code": DOC_CODE,
            "word": DOC_WORD,
            "versions": 2,
            "verification": vid,
            "other": "webapp-other",
        },
    });
    (expect, bg, held)
}

/// A verification held in progress until its gate opens.
struct Held {
    gate: PathBuf,
    child: Background,
}

fn the_web_app_shows_every_page_follows_a_live_run_and_only_reads(kind: Kind) {
    let Some((node, e2e)) = browser() else { return };
    let started = Instant::now();
    let Some(mut e) = Env::on(kind) else { return };
    e.ssh = true;
    let gate = e.c.path("gate");
    let (expect, mut bg, mut held) = fill(&e, &gate);
    // One line: the expectations hold a result of over 64 KiB, and a long dump here would push the
    // browser's own report out of a truncated CI log.
    let keys: Vec<&String> = expect.as_object().map(|o| o.keys().collect()).unwrap_or_default();
    eprintln!("webapp: data ready in {:?} (expectations: {keys:?})", started.elapsed());

    let ui = e.json(&["ui", "--no-open"]).expect(0).json;
    for key in ["url", "login_url", "expires_at"] {
        assert!(ui[key].is_string(), "`cairn ui --no-open --json` has no `{key}`: {ui:#}");
    }
    let url = id(&ui, "url");
    let login = id(&ui, "login_url");
    assert!(login.starts_with(url.trim_end_matches('/')) && login.contains("#login="), "{ui:#}");

    let artifacts = match kind {
        Kind::Sqlite => repo().join("target/webapp-artifacts"),
        Kind::Postgres => repo().join("target/webapp-artifacts-postgres"),
    };
    let _ = std::fs::remove_dir_all(&artifacts);
    std::fs::create_dir_all(&artifacts).unwrap();

    let out = assert_cmd::Command::new(&node)
        .arg(e2e.join("e2e.mjs"))
        .current_dir(&e2e)
        .env("CAIRN_URL", &url)
        .env("CAIRN_LOGIN_URL", &login)
        .env("CAIRN_VIEWER_TOKEN", e.c.token("viewer"))
        .env("CAIRN_OPERATOR_TOKEN", e.c.token("operator"))
        .env("CAIRN_GATE_FILE", &gate)
        .env("CAIRN_ARTIFACTS", &artifacts)
        .env("CAIRN_EXPECT", expect.to_string())
        .timeout(NODE_TIMEOUT)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("webapp: node finished in {:?} (total {:?})", started.elapsed(), started.elapsed());
    // What failed comes first: the report's `error` and every failed section, then the whole output.
    let failed: Vec<&str> =
        stderr.lines().filter(|l| l.starts_with("E2E FAILED") || l.starts_with("[e2e] FAILED")).collect();
    assert!(
        out.status.success(),
        "the browser test failed ({:?}):\n{}\nartifacts in {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status,
        failed.join("\n"),
        artifacts.display()
    );
    let summary: Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON summary on node's stdout:\n{stdout}\n{stderr}"));
    assert_eq!(summary["ok"], true, "{summary:#}");
    eprintln!("webapp: {summary}");

    // The live run finished READY once the browser opened its gate.
    let child = bg.0.take().unwrap();
    let run = child.wait_with_output().unwrap();
    assert_eq!(run.status.code(), Some(0), "the live run: {}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(e.c.show(&id(&expect, "live"))["status"], "READY");
    // The held verification passes once its gate opens: the browser stopped nothing.
    std::fs::write(&held.gate, "").unwrap();
    let verified = held.child.0.take().unwrap().wait_with_output().unwrap();
    assert_eq!(verified.status.code(), Some(0), "the held verification: {}", String::from_utf8_lossy(&verified.stderr));

    e.json(&["daemon", "stop"]).expect(0);
    close_ssh_masters(&e.c);
}

// The web app reads the same over either registry.
cairn_store::on_both!(the_web_app_shows_every_page_follows_a_live_run_and_only_reads);
