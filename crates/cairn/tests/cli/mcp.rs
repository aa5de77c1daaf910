//! Boundary tests of the MCP servers (docs/src/design.md, "The MCP contract"): `cairn --home H mcp
//! workbench|compute|app` over stdio, and the daemon's streamable HTTP endpoints `/mcp/workbench`,
//! `/mcp/compute` and `/mcp/app`, each driven by a real MCP client — the official Python SDK from
//! the test venv (`mcp`, pinned in scripts/requirements-test.txt; `$CAIRN_TEST_VENV`, else
//! `<repo>/.venv`). Under `CI=true` a missing venv or SDK fails the tests; elsewhere they are
//! skipped, loudly.
//!
//! The client is `tests/mcp_client.py`, a thin line-driven bridge: the test writes one JSON request
//! per line (connect a session, list tools, call a tool, read a resource) and reads the answer as
//! it came over the wire; every assertion is made here. One bridge process holds any number of
//! sessions, so a test can compare stdio with HTTP, or an Operator with a Viewer, on one daemon.
//!
//! The contract under test: the exact tool names and argument names of each server and their
//! annotations (the app server only reads); the agent's path — `plan_run` creates nothing,
//! `execute_plan` runs exactly the plan shown, `plan_replay` predicts the decisions the child run
//! then follows; verification keeps a notebook (a resource) or a draft; refusals are `isError`
//! tool results with `{error: {status, code, message}}`; a Viewer token reads and changes nothing;
//! the HTTP endpoints need a token and a loopback `Host`; compute targets and readiness; the
//! session kernel; the resources and their templates.

use std::cell::{Cell, RefCell};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use cairn_store::testing::Kind;

use crate::support::*;

mod add_workflow;
mod agent_loop;
mod approval;
mod bounds;
mod docs;
mod export;
mod guided;
mod progress;
mod read_artifact;
mod subscribe;

// ------------------------------------------------------------------------------------------------
// the contract

/// Each tool of a server with its required and optional arguments (docs/src/design.md, "The MCP contract").
type Tools = &'static [(&'static str, &'static [&'static str], &'static [&'static str])];

const WORKBENCH: Tools = &[
    ("list_workflows", &[], &[]),
    ("add_workflow", &["path"], &[]),
    ("describe_workflow", &["name"], &["version"]),
    ("plan_run", &["workflow", "input", "target", "run_dir"], &["version", "plan_name"]),
    ("plan_replay", &["source_run_id", "step_ids", "run_dir"], &["input", "target"]),
    ("execute_plan", &["plan_name", "plan_id", "plan_checksum"], &[]),
    ("list_runs", &[], &["status", "limit"]),
    ("get_run", &["run_id"], &["steps_offset", "steps_limit", "steps_status", "steps_order", "steps_layer"]),
    ("get_run_layers", &["run_id"], &["offset", "limit"]),
    ("explain_step", &["run_id", "step_id"], &[]),
    ("get_pipeline_jobs", &["run_id", "step_id"], &["rule", "status", "offset", "limit"]),
    ("trace_artifact", &["sha256"], &[]),
    ("get_step_result", &["run_id", "step_id"], &[]),
    ("export_run", &["run_id"], &["data"]),
    ("read_artifact", &["run_id", "step_id", "name"], &["path", "offset", "length"]),
    ("tail_log", &["run_id", "step_id"], &["lines"]),
    ("cancel_run", &["run_id"], &[]),
    ("verify_workflow", &[], &["document", "path", "title", "parameters", "wait"]),
    ("execute_code", &["code"], &[]),
    ("poll_job", &["job_id"], &[]),
    ("list_jobs", &[], &[]),
    ("interrupt_kernel", &[], &[]),
    ("restart_kernel", &[], &[]),
    ("list_docs", &[], &[]),
    ("read_doc", &["name"], &["version"]),
    ("search_docs", &["query"], &["limit"]),
    ("save_doc", &["name", "text"], &["verification_id"]),
];

const COMPUTE: Tools = &[
    ("list_targets", &[], &[]),
    (
        "add_target",
        &["name", "ssh", "workspace_root"],
        &["identity", "known_hosts", "executor", "partition", "account"],
    ),
    ("probe_target", &["name"], &[]),
    ("check_readiness", &["target", "run_dir"], &[]),
];

const APP: Tools = &[
    ("runs_overview", &[], &[]),
    ("run_detail", &["run_id"], &[]),
    ("export_run", &["run_id"], &["data"]),
    ("read_artifact", &["run_id", "step_id", "name"], &["path", "offset", "length"]),
    ("workflows_overview", &[], &[]),
    ("targets_overview", &[], &[]),
    ("docs_overview", &[], &[]),
];

/// Tools that change something (plan, run, cancel, verify, drive the kernel, register a target):
/// never annotated read-only, and never offered by the app server.
const MUTATING: [&str; 12] = [
    "add_workflow",
    "plan_run",
    "plan_replay",
    "execute_plan",
    "cancel_run",
    "verify_workflow",
    "execute_code",
    "interrupt_kernel",
    "restart_kernel",
    "add_target",
    // It changes nothing on the target, but Cairn records its result as the last probe.
    "probe_target",
    "save_doc",
];

/// Tools that only read: annotated read-only.
const READ_ONLY: [&str; 24] = [
    "list_workflows",
    "describe_workflow",
    "list_runs",
    "get_run",
    "get_run_layers",
    "explain_step",
    "get_pipeline_jobs",
    "trace_artifact",
    "get_step_result",
    "export_run",
    "read_artifact",
    "tail_log",
    "poll_job",
    "list_jobs",
    "list_targets",
    "check_readiness",
    "runs_overview",
    "run_detail",
    "workflows_overview",
    "targets_overview",
    "list_docs",
    "read_doc",
    "search_docs",
    "docs_overview",
];

const TEMPLATES: [&str; 4] = [
    "cairn://runs/{run_id}",
    "cairn://runs/{run_id}/steps/{step_id}/result",
    "cairn://workflows/{name}@{version}",
    "cairn://verifications/{verification_id}/notebook",
];

/// What a replay of the bundled example's `run_unit_tests` does with its [`EXAMPLE_STEPS`].
const REUSED: [&str; 4] = ["load_manifest", "inspect_artifacts", "run_compatibility", "inspect_deployment"];
const REPLAYED: [&str; 2] = ["run_unit_tests", "generate_evidence"];

/// JSON-RPC: invalid params (rmcp's answer for an unknown tool), and MCP's resource not found.
const INVALID_PARAMS: i64 = -32602;
const RESOURCE_NOT_FOUND: i64 = -32002;

/// How long one request to the client may take: `execute_plan` and `execute_code` wait up to 60 s
/// server-side; this only stops a hang.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);

// ------------------------------------------------------------------------------------------------
// the test venv

/// The test venv's python, with the MCP SDK importable. `None` (a loud skip) only outside CI.
fn client_python() -> Option<PathBuf> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let venv = venv_dir();
        let python = venv.join("bin/python");
        if !python.exists() {
            return Err(format!(
                "no test venv at {} (scripts/test.sh creates it from scripts/requirements-test.txt, or set CAIRN_TEST_VENV)",
                venv.display()
            ));
        }
        let out = Command::new(&python)
            .args(["-c", "import anyio, httpx2, mcp, mcp.client.streamable_http"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
        if !out.status.success() {
            return Err(format!(
                "the test venv {} lacks the Python MCP SDK (`mcp`, pinned in scripts/requirements-test.txt; run scripts/test.sh): {}",
                venv.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(python)
    });
    match found {
        Ok(python) => Some(python.clone()),
        Err(why) if ci() => panic!("{why}; CI requires it"),
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            None
        }
    }
}

// ------------------------------------------------------------------------------------------------
// one test's state root

/// A private state root and scratch directory; the venv's python is the daemon's kernel python.
/// Dropping it stops the daemon (and with it every process it started).
struct Fx {
    c: Cairn,
    /// The scratch directory, canonical (a run_dir's parent must not go through a symlink).
    base: PathBuf,
    python: PathBuf,
    /// An empty `CAIRN_CONFIG` (no kernel plugins of the machine's user).
    config: PathBuf,
}

impl Drop for Fx {
    fn drop(&mut self) {
        if self.c.home().join("daemon.json").exists() {
            let _ = self.command(&["daemon", "stop"]).output();
        }
    }
}

/// Which transport a session uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Over {
    Stdio,
    Http,
}

impl Fx {
    /// A fresh state root, no daemon; `None` when the MCP SDK is missing outside CI.
    fn new() -> Option<Fx> {
        Fx::on(Kind::Sqlite)
    }

    /// A fixture whose registry is `kind`'s.
    fn on(kind: Kind) -> Option<Fx> {
        let python = client_python()?;
        let c = Cairn::on(kind)?;
        let base = c.work.path().canonicalize().unwrap();
        let config = base.join("config");
        std::fs::create_dir_all(&config).unwrap();
        let c = c.with_kernel(&python, &config);
        Some(Fx { c, base, python, config })
    }

    /// With `release-validation@1.2.0` registered and the daemon started.
    fn with_example() -> Option<Fx> {
        Fx::with_example_on(Kind::Sqlite)
    }

    fn with_example_on(kind: Kind) -> Option<Fx> {
        let fx = Fx::on(kind)?;
        let dir = example("1.2.0");
        let (code, added, out) = fx.json(&["workflow", "add", dir.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}");
        assert_eq!(added["version"], "1.2.0");
        fx.start_daemon();
        Some(fx)
    }

    fn home(&self) -> PathBuf {
        self.c.home()
    }

    /// The test venv's `bin` (its Snakemake) first on the PATH of every command, and so of a
    /// daemon started after.
    fn with_venv_on_path(mut self) -> Fx {
        let path = format!("{}:{}", venv_dir().join("bin").display(), std::env::var("PATH").unwrap_or_default());
        self.c = std::mem::replace(&mut self.c, Cairn::new()).with_env("PATH", path);
        self
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.base.join(rel)
    }

    /// `cairn ARGS` with this state root, the venv's python and the empty config.
    fn command(&self, args: &[&str]) -> assert_cmd::Command {
        self.c.command(args)
    }

    /// `cairn ARGS --json`: exit code, the JSON object, and everything printed (for messages).
    fn json(&self, args: &[&str]) -> (i32, Value, String) {
        let out = self.c.json(args);
        (out.code, out.json, format!("stdout: {}\nstderr: {}", out.stdout, out.stderr))
    }

    fn start_daemon(&self) {
        let (code, v, out) = self.json(&["daemon", "start"]);
        assert_eq!(code, 0, "{out}");
        assert_eq!(v["running"], true, "{out}");
    }

    /// The daemon's URL, from `daemon.json`.
    #[track_caller]
    fn url(&self) -> String {
        self.c.daemon().url
    }

    fn token(&self, role: &str) -> String {
        self.c.token(role)
    }

    /// `cairn runs --json` → the runs (read from the registry, not through MCP).
    #[track_caller]
    fn runs(&self) -> Vec<Value> {
        let (code, v, out) = self.json(&["runs"]);
        assert_eq!(code, 0, "{out}");
        v["runs"].as_array().unwrap().clone()
    }

    /// A bridge process for this state root.
    fn client(&self) -> Client {
        Client::start(self)
    }
}

/// The bundled example's READY input.
fn ready_input() -> Value {
    read_json(&example("inputs/ready.json"))
}

// ------------------------------------------------------------------------------------------------
// the client bridge

/// One `mcp_client.py` process; its sessions are [`Session`]s.
struct Client {
    child: RefCell<Child>,
    stdin: RefCell<Option<ChildStdin>>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    cairn: PathBuf,
    home: PathBuf,
    sessions: Cell<u32>,
}

impl Client {
    fn start(fx: &Fx) -> Client {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
        // The stdio servers inherit this environment (and a daemon one of them starts, too).
        let mut child = Command::new(&fx.python)
            .arg(&script)
            .env("CAIRN_HOME", fx.c.home.path())
            .env_remove("XDG_STATE_HOME")
            .env("CAIRN_PYTHON", &fx.python)
            .env("CAIRN_CONFIG", &fx.config)
            .env("PYTHONUNBUFFERED", "1")
            .current_dir(&fx.base)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} {}: {e}", fx.python.display(), script.display()));
        let (tx, lines) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let mut err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Client {
            stdin: RefCell::new(child.stdin.take()),
            child: RefCell::new(child),
            lines,
            stderr,
            cairn: Cairn::bin(),
            home: fx.home(),
            sessions: Cell::new(0),
        }
    }

    fn stderr(&self) -> String {
        let s = self.stderr.lock().unwrap().clone();
        // The tail is what matters; the SDK can be chatty.
        let cut = s.len().saturating_sub(6000);
        s[s.char_indices().map(|(i, _)| i).find(|i| *i >= cut).unwrap_or(0)..].to_string()
    }

    /// One request and its answer, or why there is none.
    fn try_send(&self, req: &Value) -> Result<Value, String> {
        {
            let mut stdin = self.stdin.borrow_mut();
            let w = stdin.as_mut().ok_or("the client's stdin is closed")?;
            writeln!(w, "{req}").and_then(|_| w.flush()).map_err(|e| format!("cannot write to the client: {e}"))?;
        }
        let line = match self.lines.recv_timeout(ANSWER_TIMEOUT) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => return Err(format!("no answer within {ANSWER_TIMEOUT:?}")),
            Err(RecvTimeoutError::Disconnected) => return Err("the client exited".into()),
        };
        let v: Value =
            serde_json::from_str(&line).map_err(|e| format!("the client printed a non-JSON line ({e}): {line}"))?;
        if let Some(fatal) = v.get("fatal") {
            return Err(format!("the client failed: {fatal}\n{}", v["trace"].as_str().unwrap_or("")));
        }
        Ok(v)
    }

    #[track_caller]
    fn send(&self, req: &Value) -> Value {
        self.try_send(req).unwrap_or_else(|why| panic!("{why}\nrequest: {req}\nclient stderr:\n{}", self.stderr()))
    }

    /// Connects a session: the answer to `initialize`, or the error the client saw.
    fn connect(&self, over: Over, server: &str, token: Option<&str>) -> (String, Value) {
        self.connect_with(over, server, token, json!({}))
    }

    /// As [`Client::connect`], with the bridge's connect options (`era`, `elicitation`).
    fn connect_with(&self, over: Over, server: &str, token: Option<&str>, options: Value) -> (String, Value) {
        let n = self.sessions.get() + 1;
        self.sessions.set(n);
        let id = format!("s{n}");
        let req = match over {
            Over::Stdio => json!({
                "op": "connect", "session": id, "mode": "stdio", "cairn": self.cairn, "home": self.home, "server": server,
            }),
            Over::Http => {
                let url = daemon_info(&self.home).url;
                json!({"op": "connect", "session": id, "mode": "http", "url": format!("{url}/mcp/{server}"), "token": token})
            }
        };
        let mut req = req;
        if let Value::Object(m) = options {
            req.as_object_mut().unwrap().extend(m);
        }
        (id, self.send(&req))
    }

    /// A session with `server`: over stdio (the server's own token: Operator for workbench and
    /// compute, Viewer for app), or over HTTP with the `role`'s token.
    #[track_caller]
    fn session(&self, over: Over, server: &str, role: &str) -> Session<'_> {
        self.session_with(over, server, role, json!({}))
    }

    /// As [`Client::session`], with the bridge's connect options: `{"era": "modern"}` negotiates
    /// 2026-07-28, `{"elicitation": true}` declares the elicitation capability.
    #[track_caller]
    fn session_with(&self, over: Over, server: &str, role: &str, options: Value) -> Session<'_> {
        let token = match over {
            Over::Stdio => None,
            Over::Http => Some(read_token(&self.home, role)),
        };
        let (id, answer) = self.connect_with(over, server, token.as_deref(), options);
        let what = match over {
            Over::Stdio => format!("{server} over stdio"),
            Over::Http => format!("{server} over HTTP as {role}"),
        };
        let init = answer
            .get("ok")
            .unwrap_or_else(|| panic!("{what}: cannot connect: {answer:#}\nclient stderr:\n{}", self.stderr()))
            .clone();
        Session { client: self, id, what, init }
    }

    /// A session with `server` over HTTP with `token` (a principal's).
    #[track_caller]
    fn http_as(&self, server: &str, who: &str, token: &str) -> Session<'_> {
        let (id, answer) = self.connect_with(Over::Http, server, Some(token), json!({}));
        let what = format!("{server} over HTTP as {who}");
        let init = answer.get("ok").unwrap_or_else(|| panic!("{what}: cannot connect: {answer:#}")).clone();
        Session { client: self, id, what, init }
    }

    #[track_caller]
    fn stdio(&self, server: &str) -> Session<'_> {
        self.session(Over::Stdio, server, "")
    }

    #[track_caller]
    fn http(&self, server: &str, role: &str) -> Session<'_> {
        self.session(Over::Http, server, role)
    }

    /// The same server as the operator's (stdio: the server's own token; HTTP: the Operator's).
    #[track_caller]
    fn over(&self, over: Over, server: &str) -> Session<'_> {
        self.session(over, server, "operator")
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.try_send_exit();
        self.stdin.borrow_mut().take();
        wait_exit(&mut self.child.borrow_mut(), Duration::from_secs(15));
    }
}

impl Client {
    fn try_send_exit(&self) -> Result<(), String> {
        let mut stdin = self.stdin.borrow_mut();
        let w = stdin.as_mut().ok_or("closed")?;
        writeln!(w, "{}", json!({"op": "exit"})).map_err(|e| e.to_string())
    }
}

/// One MCP session of a [`Client`].
struct Session<'a> {
    client: &'a Client,
    id: String,
    /// e.g. `workbench over HTTP as viewer`, for messages.
    what: String,
    /// The server's InitializeResult.
    init: Value,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = self.client.try_send(&json!({"op": "close", "session": self.id}));
        }
    }
}

impl Session<'_> {
    /// The raw answer: `{"ok": RESULT}` or `{"error": {...}}`.
    fn raw(&self, op: &str, extra: Value) -> Value {
        let mut req = json!({"op": op, "session": self.id});
        if let Value::Object(m) = extra {
            req.as_object_mut().unwrap().extend(m);
        }
        self.client.send(&req)
    }

    #[track_caller]
    fn ok(&self, op: &str, extra: Value) -> Value {
        let answer = self.raw(op, extra.clone());
        answer.get("ok").cloned().unwrap_or_else(|| {
            panic!("{}: `{op}` {extra} failed: {answer:#}\nclient stderr:\n{}", self.what, self.client.stderr())
        })
    }

    #[track_caller]
    fn tools(&self) -> Vec<Value> {
        self.ok("list_tools", json!({}))["tools"].as_array().unwrap().clone()
    }

    /// The CallToolResult (panics on a JSON-RPC error).
    #[track_caller]
    fn call(&self, name: &str, args: Value) -> Value {
        self.ok("call", json!({"name": name, "arguments": args}))
    }

    /// A call with the bridge's per-call options (`elicit`, `progress`): the whole answer,
    /// `{ok: CallToolResult, elicited, rounds, progress}`.
    #[track_caller]
    fn call_seeing(&self, name: &str, args: Value, options: Value) -> Value {
        let mut extra = json!({"name": name, "arguments": args});
        if let Value::Object(m) = options {
            extra.as_object_mut().unwrap().extend(m);
        }
        let answer = self.raw("call", extra.clone());
        assert!(
            answer.get("ok").is_some(),
            "{}: call {extra} failed: {answer:#}\nclient stderr:\n{}",
            self.what,
            self.client.stderr()
        );
        answer
    }

    /// A successful call's structured content.
    #[track_caller]
    fn call_ok(&self, name: &str, args: Value) -> Value {
        let r = self.call(name, args.clone());
        assert_eq!(r["isError"], false, "{}: {name}({args}) failed: {r:#}", self.what);
        let content = r["structuredContent"].clone();
        assert!(content.is_object(), "{}: {name} returned no structured content: {r:#}", self.what);
        // The text content carries the same JSON (for clients without structured content).
        let text = r["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{}: no text content: {r:#}", self.what));
        assert_eq!(serde_json::from_str::<Value>(text).ok().as_ref(), Some(&content), "{}: {name}", self.what);
        content
    }

    /// A refused call: `isError`, with `structuredContent.error` `{status, code, message}`.
    #[track_caller]
    fn call_err(&self, name: &str, args: Value) -> Value {
        let r = self.call(name, args.clone());
        assert_eq!(r["isError"], true, "{}: {name}({args}) should have been refused: {r:#}", self.what);
        let e = r["structuredContent"]["error"].clone();
        assert!(
            e["status"].is_u64() && e["code"].is_string() && e["message"].is_string(),
            "{}: {name}: a failure is structuredContent {{error: {{status, code, message}}}}: {r:#}",
            self.what
        );
        e
    }

    /// A resource's contents, or the error the client saw.
    #[track_caller]
    fn read(&self, uri: &str) -> Result<Value, Value> {
        let answer = self.raw("read", json!({"uri": uri}));
        match answer.get("ok") {
            Some(ok) => {
                let contents = ok["contents"].as_array().unwrap_or_else(|| panic!("{}: {ok:#}", self.what));
                assert_eq!(contents.len(), 1, "{}: {uri}: {ok:#}", self.what);
                assert_eq!(contents[0]["uri"], uri, "{}: {ok:#}", self.what);
                Ok(contents[0].clone())
            }
            None => Err(answer["error"].clone()),
        }
    }

    /// A JSON resource, parsed.
    #[track_caller]
    fn read_json(&self, uri: &str) -> Value {
        let c = self.read(uri).unwrap_or_else(|e| panic!("{}: reading {uri}: {e:#}", self.what));
        serde_json::from_str(c["text"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{}: {uri} is not JSON: {e}", self.what))
    }

    /// A resource that must not be readable: the JSON-RPC error.
    #[track_caller]
    fn read_err(&self, uri: &str) -> Value {
        match self.read(uri) {
            Ok(c) => panic!("{}: {uri} should not be readable, got {c:#}", self.what),
            Err(e) => e,
        }
    }
}

// ------------------------------------------------------------------------------------------------
// 1. the tools of each server

/// Checks one server's tool list against the contract; returns it (sorted by name).
#[track_caller]
fn check_tools(s: &Session, server: &str, contract: Tools) -> Vec<Value> {
    assert_eq!(s.init["serverInfo"]["name"], format!("cairn-{server}"), "{}: {:#}", s.what, s.init);
    assert!(s.init["capabilities"]["tools"].is_object(), "{}: tools capability: {:#}", s.what, s.init);
    assert!(s.init["capabilities"]["resources"].is_object(), "{}: resources capability: {:#}", s.what, s.init);
    assert!(s.init["protocolVersion"].as_str().is_some_and(|v| !v.is_empty()), "{:#}", s.init);
    assert!(s.init["instructions"].as_str().is_some_and(|v| !v.is_empty()), "{}: no instructions", s.what);

    let mut tools = s.tools();
    tools.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let mut got: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    got.sort();
    let mut want: Vec<&str> = contract.iter().map(|(n, _, _)| *n).collect();
    want.sort();
    assert_eq!(got, want, "{}: the tool names", s.what);

    for (name, required, optional) in contract {
        let t = tools.iter().find(|t| t["name"] == *name).unwrap();
        let what = format!("{}: tool {name}", s.what);
        assert!(t["description"].as_str().is_some_and(|d| d.len() > 10), "{what}: no description: {t:#}");
        let schema = &t["inputSchema"];
        assert_eq!(schema["type"], "object", "{what}: inputSchema: {t:#}");
        // Its structured content's schema (the SDK validates every result against it).
        assert_eq!(t["outputSchema"]["type"], "object", "{what}: outputSchema: {t:#}");
        let mut props: Vec<String> =
            schema["properties"].as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default();
        props.sort();
        let mut args = owned(required);
        args.extend(owned(optional));
        args.sort();
        assert_eq!(props, args, "{what}: argument names: {schema:#}");
        let mut req = schema.get("required").map(strs).unwrap_or_default();
        req.sort();
        let mut want_req = owned(required);
        want_req.sort();
        assert_eq!(req, want_req, "{what}: required arguments: {schema:#}");

        let a = &t["annotations"];
        assert!(a.is_object(), "{what}: no annotations: {t:#}");
        if MUTATING.contains(name) {
            assert_eq!(a["readOnlyHint"], false, "{what} changes something: {a}");
        }
        if READ_ONLY.contains(name) {
            assert_eq!(a["readOnlyHint"], true, "{what} only reads: {a}");
            assert_ne!(a["destructiveHint"], true, "{what} only reads: {a}");
        }
    }
    let ann = |n: &str| tools.iter().find(|t| t["name"] == n).map(|t| t["annotations"].clone()).unwrap();
    if server == "workbench" {
        assert_eq!(ann("execute_plan")["destructiveHint"], true, "{}", s.what);
        assert_eq!(ann("cancel_run")["destructiveHint"], true, "{}", s.what);
        assert_eq!(ann("restart_kernel")["destructiveHint"], true, "{}", s.what);
        assert_eq!(ann("plan_run")["destructiveHint"], false, "{}: planning creates nothing", s.what);
    }
    if server == "app" {
        for t in &tools {
            let name = t["name"].as_str().unwrap();
            assert!(!MUTATING.contains(&name), "{}: the app server offers `{name}`, which changes things", s.what);
            assert_eq!(t["annotations"]["readOnlyHint"], true, "{}: {name} must be read-only", s.what);
            assert_ne!(t["annotations"]["destructiveHint"], true, "{}: {name}", s.what);
        }
    }
    tools
}

/// The three servers list exactly the contract's tools, with their argument names and honest
/// annotations, identically over stdio and HTTP. The first stdio server starts the daemon.
#[test]
fn each_server_lists_the_contract_tools_over_stdio_and_http() {
    let Some(fx) = Fx::new() else { return };
    assert!(!fx.home().join("daemon.json").exists());
    let client = fx.client();
    let mut listed = Vec::new();
    for (server, contract) in [("workbench", WORKBENCH), ("compute", COMPUTE), ("app", APP)] {
        let s = client.stdio(server);
        listed.push((server, "stdio", check_tools(&s, server, contract)));
        if server == "workbench" {
            // `cairn mcp` started the daemon it talks to.
            let d = fx.c.daemon();
            assert!(alive(d.pid), "the daemon {} that `cairn mcp` started is not running", d.pid);
        }
    }
    for (server, contract) in [("workbench", WORKBENCH), ("compute", COMPUTE), ("app", APP)] {
        let s = client.http(server, "operator");
        listed.push((server, "http", check_tools(&s, server, contract)));
    }
    // The app server over HTTP takes a Viewer token as well.
    let s = client.http("app", "viewer");
    listed.push(("app", "http-viewer", check_tools(&s, "app", APP)));
    for (server, how, tools) in &listed {
        let (_, _, stdio) = listed.iter().find(|(s, h, _)| s == server && *h == "stdio").unwrap();
        assert_eq!(tools, stdio, "{server}: the tools over {how} differ from those over stdio");
    }
}

// ------------------------------------------------------------------------------------------------
// 2. the agent's path: plan → approve → run → replay

/// plan_run (creates nothing) → execute_plan → READY; plan_replay predicts the decisions; its
/// execution follows them (four roots reused, run_unit_tests and generate_evidence re-executed)
/// and leaves the source unchanged. Reads and app views along the way.
fn agent_path(over: Over, kind: Kind) {
    let Some(fx) = Fx::with_example_on(kind) else { return };
    let client = fx.client();
    let wb = client.over(over, "workbench");
    let app = client.session(over, "app", "viewer");
    let w = &wb.what;

    let listed = wb.call_ok("list_workflows", json!({}));
    assert!(listed["workflows"].as_array().unwrap().iter().any(|wf| wf["name"] == "release-validation"), "{listed:#}");
    let described = wb.call_ok("describe_workflow", json!({"name": "release-validation"}));
    assert_eq!(described["version"], "1.2.0", "{described:#}");
    assert_eq!(strs(&described["order"]), owned(&EXAMPLE_STEPS), "{described:#}");
    assert_eq!(wb.call_ok("list_runs", json!({}))["runs"], json!([]));

    // Plan: read-only.
    let run_dir = fx.p("rd-first");
    let mut args =
        json!({"workflow": "release-validation", "input": ready_input(), "target": "local", "run_dir": run_dir});
    if over == Over::Stdio {
        args["plan_name"] = json!("mcp-first");
    }
    let plan = wb.call_ok("plan_run", args);
    let name = plan["plan_name"].as_str().unwrap().to_string();
    match over {
        Over::Stdio => assert_eq!(name, "mcp-first"),
        Over::Http => assert!(name.starts_with("release-validation-"), "{w}: default plan name {name}"),
    }
    assert!(plan["plan_id"].as_str().is_some_and(|id| id.starts_with("plan_")), "{plan:#}");
    let checksum = plan["plan_checksum"].as_str().unwrap().to_string();
    assert!(checksum.len() == 64 && checksum.chars().all(|c| c.is_ascii_hexdigit()), "{plan:#}");
    assert_eq!((plan["workflow"].as_str(), plan["version"].as_str()), (Some("release-validation"), Some("1.2.0")));
    assert_eq!(plan["target"], "local");
    assert_eq!(plan["run_dir"], run_dir.display().to_string());
    let commands = plan["commands"].as_array().unwrap();
    let ids: Vec<&str> = commands.iter().map(|c| c["step_id"].as_str().unwrap()).collect();
    assert_eq!(ids, EXAMPLE_STEPS, "{w}: the plan's commands");
    let summary = plan["summary"].as_str().unwrap();
    assert!(summary.contains("Commands:") && summary.contains(&run_dir.display().to_string()), "{w}: {summary}");
    for c in commands {
        let argv: Vec<String> = strs(&c["argv"]);
        assert!(argv[1].starts_with(&run_dir.join("workflow/tools").display().to_string()), "{w}: {c}");
        assert!(summary.contains(&argv.join(" ")), "{w}: the summary shows the command {argv:?}:\n{summary}");
    }
    assert!(summary.contains("execute_plan"), "{w}: the summary says how to approve: {summary}");
    let effects: Vec<&str> = plan["effects"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(effects, ["create_run_dir", "write_file", "deploy_workflow"], "{w}: {plan:#}");
    assert!(!run_dir.exists(), "{w}: plan_run created {}", run_dir.display());
    assert!(fx.runs().is_empty(), "{w}: plan_run created a run");

    // Approve exactly that plan.
    let approve = json!({"plan_name": name, "plan_id": plan["plan_id"], "plan_checksum": checksum});
    let run = wb.call_ok("execute_plan", approve.clone());
    assert_eq!(run["status"], "READY", "{w}: {run:#}");
    assert_eq!(run["approval"]["channel"], "host", "{w}: no elicitation capability: the host approved: {run:#}");
    let src = run["run_id"].as_str().unwrap().to_string();
    assert_eq!(run["run_dir"], run_dir.display().to_string());
    assert!(run_dir.join("input.json").is_file() && run_dir.join("workflow/workflow.toml").is_file(), "{w}");
    let got = wb.call_ok("get_run", json!({"run_id": src}));
    assert_eq!(got["status"], "READY", "{w}: {got:#}");
    assert_eq!(got["findings"], json!([]));
    for id in EXAMPLE_STEPS {
        let s = step(&got, id);
        assert_eq!(
            (s["status"].as_str(), s["reused"].as_bool(), s["attempts"].as_u64()),
            (Some("COMPLETED"), Some(false), Some(1)),
            "{w}: {s}"
        );
    }
    assert_eq!(contract(&run), contract(&got), "{w}: execute_plan's run vs get_run");
    assert_eq!(contract(&wb.read_json(&format!("cairn://runs/{src}"))), contract(&got), "{w}: the run resource");
    let log = wb.call_ok("tail_log", json!({"run_id": src, "step_id": "run_unit_tests"}));
    assert!(strs(&log["lines"]).iter().any(|l| l.contains("12 case(s), 0 failed")), "{w}: {log:#}");

    // A second approval of the same plan is refused and creates nothing.
    let again = wb.call_err("execute_plan", approve);
    assert_eq!(again["status"], 409, "{w}: {again:#}");
    assert_eq!(fx.runs().len(), 1, "{w}: a refused approval created a run");

    // Replay run_unit_tests into a new directory: planned first, read-only.
    let run_dir2 = fx.p("rd-replay");
    let rp =
        wb.call_ok("plan_replay", json!({"source_run_id": src, "step_ids": ["run_unit_tests"], "run_dir": run_dir2}));
    assert_eq!(rp["source_run_id"], src.as_str(), "{w}: {rp:#}");
    assert_eq!(rp["run_dir"], run_dir2.display().to_string());
    assert!(rp["summary"].as_str().unwrap().contains("Commands:"), "{w}: {rp:#}");
    let decisions = rp["decisions"].as_array().unwrap_or_else(|| panic!("{w}: no decisions: {rp:#}")).clone();
    let by_step: Vec<(String, String)> = decisions
        .iter()
        .map(|d| (d["step_id"].as_str().unwrap().to_string(), d["decision"].as_str().unwrap().to_string()))
        .collect();
    let expected: Vec<(String, String)> = EXAMPLE_STEPS
        .iter()
        .map(|id| (id.to_string(), if REUSED.contains(id) { "reuse" } else { "replay" }.to_string()))
        .collect();
    assert_eq!(by_step, expected, "{w}: the planned decisions");
    for d in &decisions {
        let text = d["text"].as_str().unwrap();
        match d["step_id"].as_str().unwrap() {
            "run_unit_tests" => assert_eq!(text, "requested"),
            "generate_evidence" => assert_eq!(text, "descendant of requested step run_unit_tests"),
            _ => assert_eq!(text, format!("reused from run {src} (signature equal)")),
        }
    }
    assert!(!run_dir2.exists(), "{w}: plan_replay created {}", run_dir2.display());
    assert_eq!(fx.runs().len(), 1, "{w}: plan_replay created a run");

    let child = wb.call_ok(
        "execute_plan",
        json!({"plan_name": rp["plan_name"], "plan_id": rp["plan_id"], "plan_checksum": rp["plan_checksum"]}),
    );
    assert_eq!(child["status"], "READY", "{w}: {child:#}");
    let cid = child["run_id"].as_str().unwrap().to_string();
    assert_ne!(cid, src);
    let r = &child["replay"];
    assert_eq!(r["source_run_id"], src.as_str(), "{w}: {child:#}");
    assert_eq!(strs(&r["requested"]), ["run_unit_tests"]);
    assert_eq!(strs(&r["reused"]), owned(&REUSED), "{w}: reused");
    assert_eq!(strs(&r["replayed"]), owned(&REPLAYED), "{w}: replayed");
    assert_eq!(r["decisions"], json!(decisions), "{w}: the plan's decisions vs the child's");
    let shown = wb.call_ok("get_run", json!({"run_id": cid}));
    assert_eq!(contract(&shown), contract(&child), "{w}");
    for id in EXAMPLE_STEPS {
        let reused = REUSED.contains(&id);
        let s = step(&shown, id);
        assert_eq!(s["status"], "COMPLETED", "{w}: {id}: {s}");
        assert_eq!(s["reused"], reused, "{w}: {id}: {s}");
        assert_eq!(s["decision"], if reused { "reuse" } else { "replay" }, "{w}: {id}: {s}");
        assert_eq!(s["attempts"], if reused { 0 } else { 1 }, "{w}: {id}: {s}");
        // The whole step, as the CLI and the API give it; `get_run` carries the same evidence.
        let whole = wb.call_ok("get_step_result", json!({"run_id": cid, "step_id": id}));
        let (code, cli, out) = fx.json(&["result", &cid, id]);
        assert_eq!(code, 0, "{out}");
        assert_eq!(whole, cli, "{w}: {id}: get_step_result is `cairn result`");
        for field in ["result", "result_truncated", "result_bytes", "artifacts"] {
            assert_eq!(whole[field], s[field], "{w}: {id}: {field}");
        }
        let names: Vec<&str> = s["artifacts"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
        assert_eq!(names, if id == "generate_evidence" { vec!["report", "summary"] } else { vec![] }, "{w}: {id}");
        let ex = wb.call_ok("explain_step", json!({"run_id": cid, "step_id": id}));
        if reused {
            assert_eq!(ex["reused_from"], src.as_str(), "{w}: {id}: {ex:#}");
        } else {
            assert!(ex["reused_from"].is_null(), "{w}: {id}: {ex:#}");
        }
    }
    // The source never changes.
    assert_eq!(contract(&wb.call_ok("get_run", json!({"run_id": src}))), contract(&got), "{w}: the source changed");

    let all = wb.call_ok("list_runs", json!({}));
    let ids: Vec<&str> = all["runs"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap()).collect();
    assert_eq!(ids, [cid.as_str(), src.as_str()], "{w}: newest first");
    let newest = wb.call_ok("list_runs", json!({"status": "READY", "limit": 1}));
    assert_eq!(newest["runs"].as_array().unwrap().len(), 1, "{w}: {newest:#}");
    assert_eq!(newest["runs"][0]["run_id"], cid.as_str());
    assert_eq!(wb.call_ok("list_runs", json!({"status": "BLOCKED"}))["runs"], json!([]));

    // The person's views.
    let overview = app.call_ok("runs_overview", json!({}));
    let rows = overview["runs"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{}: {overview:#}", app.what);
    assert!(rows.iter().all(|r| r["status"] == "READY"), "{overview:#}");
    let detail = app.call_ok("run_detail", json!({"run_id": cid}));
    assert_eq!(detail["status"], "READY");
    assert_eq!(detail["replay"]["source_run_id"], src.as_str(), "{}: {detail:#}", app.what);
    let events = detail["events"].as_array().unwrap_or_else(|| panic!("{}: no events: {detail:#}", app.what));
    assert!(!events.is_empty() && events.len() <= 100, "{}", app.what);
    assert_eq!(contract(&app.read_json(&format!("cairn://runs/{cid}"))), contract(&shown), "{}", app.what);
}

fn agent_path_over_stdio(kind: Kind) {
    agent_path(Over::Stdio, kind);
}

fn agent_path_over_http(kind: Kind) {
    agent_path(Over::Http, kind);
}

// An agent's whole path is the same over either registry.
cairn_store::on_both!(agent_path_over_stdio, agent_path_over_http);

// ------------------------------------------------------------------------------------------------
// 3. verification

const PASSING_DOC: &str =
    "# Sum\n\nTwo numbers.\n\n```python\nx = 40 + 2\nprint(x)\n```\n\n```python\nassert x == 42\n```\n";
const FAILING_DOC: &str =
    "# Boom\n\n```python\ny = 1\n```\n\n```python\nraise ValueError('boom')\n```\n\n```python\nprint(y)\n```\n";

/// A passing document keeps a notebook (readable as a resource, a valid nbformat 4 notebook with
/// the provenance cell first); a failing one keeps a draft and no notebook. Over both transports.
#[test]
fn verify_workflow_keeps_a_notebook_or_a_draft() {
    let Some(fx) = Fx::new() else { return };
    fx.start_daemon();
    let client = fx.client();
    let mut validated = false;
    for over in [Over::Stdio, Over::Http] {
        let wb = client.over(over, "workbench");
        let w = &wb.what;
        let title = format!("sum {over:?}");
        let v = wb.call_ok("verify_workflow", json!({"document": PASSING_DOC, "title": title}));
        assert_eq!(v["verdict"], "passed", "{w}: {v:#}");
        assert_eq!(v["title"], title.as_str());
        assert!(v["error"].is_null() && v.get("draft").is_none(), "{w}: {v:#}");
        let statuses: Vec<&str> =
            v["cells"].as_array().unwrap().iter().map(|c| c["status"].as_str().unwrap()).collect();
        assert_eq!(statuses, ["passed", "passed"], "{w}: {v:#}");
        let file = PathBuf::from(v["notebook"].as_str().unwrap_or_else(|| panic!("{w}: no notebook: {v:#}")));
        assert!(file.is_file(), "{w}: {}", file.display());
        let id = v["verification_id"].as_str().unwrap();

        let uri = format!("cairn://verifications/{id}/notebook");
        let c = wb.read(&uri).unwrap_or_else(|e| panic!("{w}: {uri}: {e:#}"));
        assert_eq!(c["mimeType"], "application/x-ipynb+json", "{w}");
        let nb: Value = serde_json::from_str(c["text"].as_str().unwrap()).expect("the notebook resource is JSON");
        assert_eq!(nb["nbformat"], 4, "{w}");
        let on_disk: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(nb, on_disk, "{w}: the resource is the kept notebook");
        let cells = nb["cells"].as_array().unwrap();
        assert_eq!(cells[0]["metadata"]["cairn"]["role"], "provenance", "{w}: {:#}", cells[0]);
        let sources: Vec<String> = cells
            .iter()
            .filter(|c| c["cell_type"] == "code")
            .map(|c| match &c["source"] {
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                s => s.as_str().unwrap_or_default().to_string(),
            })
            .collect();
        assert!(sources.iter().any(|s| s.contains("x = 40 + 2")), "{w}: {sources:?}");
        if !validated {
            // A real nbformat check, once (the notebooks are made the same way on both paths).
            let out = Command::new(&fx.python)
                .args(["-c", "import sys, nbformat; nbformat.validate(nbformat.read(sys.argv[1], as_version=4))"])
                .arg(&file)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{w}: nbformat rejects the notebook: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            validated = true;
        }

        // Parameters, as papermill injects them.
        let doc = "```python tags=[\"parameters\"]\nalpha = 1\n```\n\n```python\nassert alpha == 21\n```\n";
        let p = wb.call_ok("verify_workflow", json!({"document": doc, "parameters": {"alpha": 21}}));
        assert_eq!((p["verdict"].as_str(), &p["parameters"]), (Some("passed"), &json!({"alpha": 21})), "{w}: {p:#}");
        assert_eq!(p["cells"][1]["tags"], json!(["injected-parameters"]), "{w}: {p:#}");
        // The stored record keeps them: the same answer from the API.
        let pid = p["verification_id"].as_str().unwrap();
        let d = fx.c.daemon();
        let stored = http("GET", &format!("{}/verifications/{pid}", d.url), Some(&fx.c.token("viewer")), None, &[]);
        assert_eq!(stored.body["parameters"], json!({"alpha": 21}), "{w}: {:#}", stored.body);

        let f = wb.call_ok("verify_workflow", json!({"document": FAILING_DOC, "title": format!("boom {over:?}")}));
        assert_eq!(f["verdict"], "failed", "{w}: {f:#}");
        assert!(f["cells"][1]["error"]["ename"].is_string(), "{w}: the failed cell's error: {f:#}");
        assert!(f["error"].as_str().is_some_and(|e| e.contains("boom")), "{w}: {f:#}");
        assert!(f.get("notebook").is_none(), "{w}: a failure keeps no notebook: {f:#}");
        let draft = PathBuf::from(f["draft"].as_str().unwrap_or_else(|| panic!("{w}: no draft: {f:#}")));
        assert!(draft.is_file(), "{w}: {}", draft.display());
        let statuses: Vec<&str> =
            f["cells"].as_array().unwrap().iter().map(|c| c["status"].as_str().unwrap()).collect();
        assert_eq!(statuses, ["passed", "failed", "skipped"], "{w}: it stops at the first failure: {f:#}");
        let fid = f["verification_id"].as_str().unwrap();
        let e = wb.read_err(&format!("cairn://verifications/{fid}/notebook"));
        assert_eq!(e["kind"], "mcp", "{w}: {e:#}");

        // Exactly one of document and path.
        let e = wb.call_err("verify_workflow", json!({}));
        assert!(e["message"].as_str().unwrap().contains("exactly one"), "{w}: {e:#}");
        let e = wb.call_err("verify_workflow", json!({"document": PASSING_DOC, "path": "/x.md"}));
        assert_eq!(e["status"], 422, "{w}: {e:#}");
        if over == Over::Stdio {
            // A file on the daemon's machine.
            let doc = fx.p("sum.md");
            std::fs::write(&doc, PASSING_DOC).unwrap();
            let v = wb.call_ok("verify_workflow", json!({"path": doc}));
            assert_eq!(v["verdict"], "passed", "{w}: {v:#}");
            let e = wb.call_err("verify_workflow", json!({"path": "sum.md"}));
            assert!(e["status"].as_u64().is_some_and(|s| (400..500).contains(&s)), "{w}: a relative path: {e:#}");
        }
    }
}

// ------------------------------------------------------------------------------------------------
// 4. refusals

/// A wrong checksum or id, an unknown plan, a relative or existing run_dir and bad arguments are
/// errors the client sees, and create nothing; the plan still runs when approved correctly.
///
/// Bad arguments (a missing required field, a wrong type) come back from rmcp as `isError` tool
/// results whose text says `failed to deserialize parameters: …` (not JSON-RPC errors); an unknown
/// tool is a JSON-RPC error, invalid params (-32602).
#[test]
fn refusals_are_errors_the_client_sees_and_create_nothing() {
    let Some(fx) = Fx::with_example() else { return };
    let client = fx.client();
    let existing = fx.p("existing");
    std::fs::create_dir(&existing).unwrap();
    let mut plans = Vec::new();
    for over in [Over::Stdio, Over::Http] {
        let wb = client.over(over, "workbench");
        let w = &wb.what;
        let run_dir = fx.p(&format!("rd-{over:?}"));
        let base =
            json!({"workflow": "release-validation", "input": ready_input(), "target": "local", "run_dir": run_dir});
        let plan = wb.call_ok("plan_run", base.clone());
        let (name, id, sum) = (plan["plan_name"].clone(), plan["plan_id"].clone(), plan["plan_checksum"].clone());

        let wrong = "0".repeat(64);
        let e = wb.call_err("execute_plan", json!({"plan_name": name, "plan_id": id, "plan_checksum": wrong}));
        assert_eq!(e["status"], 409, "{w}: {e:#}");
        let m = e["message"].as_str().unwrap();
        assert!(m.contains("checksum") && m.contains(&wrong), "{w}: the message names the checksum: {m}");
        let e = wb.call_err("execute_plan", json!({"plan_name": name, "plan_id": "plan_x", "plan_checksum": sum}));
        assert_eq!(e["status"], 409, "{w}: {e:#}");
        assert!(e["message"].as_str().unwrap().contains("plan_x"), "{w}: {e:#}");
        let e = wb.call_err("execute_plan", json!({"plan_name": "no-such-plan", "plan_id": id, "plan_checksum": sum}));
        assert_eq!((e["status"].as_u64(), e["code"].as_str()), (Some(404), Some("plan_not_found")), "{w}: {e:#}");

        // A relative or existing run_dir: named in the refusal.
        let mut rel = base.clone();
        rel["run_dir"] = json!("relative/dir");
        let e = wb.call_err("plan_run", rel);
        assert_eq!(e["status"], 422, "{w}: {e:#}");
        let m = e["message"].as_str().unwrap();
        assert!(m.contains("run_dir") && m.contains("relative"), "{w}: {m}");
        let mut ex = base.clone();
        ex["run_dir"] = json!(existing);
        let e = wb.call_err("plan_run", ex);
        assert!(e["message"].as_str().unwrap().contains("exists"), "{w}: {e:#}");
        let mut bad_input = base.clone();
        bad_input["input"] = json!({"manifest": 1});
        let e = wb.call_err("plan_run", bad_input);
        assert!(e["message"].as_str().unwrap().contains("input schema"), "{w}: {e:#}");
        let e =
            wb.call_err("plan_replay", json!({"source_run_id": "run_nope", "step_ids": ["a"], "run_dir": fx.p("x")}));
        assert_eq!(e["status"], 404, "{w}: {e:#}");
        let e = wb.call_err("plan_replay", json!({"source_run_id": "run_nope", "step_ids": [], "run_dir": fx.p("x")}));
        assert_eq!((e["status"].as_u64(), e["code"].as_str()), (Some(422), Some("invalid_arguments")), "{w}: {e:#}");

        // Arguments that do not match the input schema: isError results naming the problem.
        let mut missing = base.clone();
        missing.as_object_mut().unwrap().remove("run_dir");
        for (args, needle, tool) in [
            (missing, "run_dir", "plan_run"),
            (
                json!({"workflow": "release-validation", "input": {}, "target": "local", "run_dir": 5}),
                "invalid type",
                "plan_run",
            ),
            (
                json!({"workflow": "release-validation", "input": {}, "target": ["local"], "run_dir": "/x"}),
                "invalid type",
                "plan_run",
            ),
            (json!({"plan_name": name, "plan_id": id}), "plan_checksum", "execute_plan"),
            (json!({"limit": "2"}), "invalid type", "list_runs"),
            (json!({"limit": -1}), "-1", "list_runs"),
        ] {
            let r = wb.call(tool, args.clone());
            assert_eq!(r["isError"], true, "{w}: {tool}({args}) must be refused: {r:#}");
            let text = r["content"][0]["text"].as_str().unwrap_or_default();
            assert!(text.contains(needle), "{w}: {tool}({args}): the error names `{needle}`: {r:#}");
        }
        // An unknown tool: a JSON-RPC error.
        let answer = wb.raw("call", json!({"name": "no_such_tool", "arguments": {}}));
        assert_eq!(answer["error"]["kind"], "mcp", "{w}: {answer:#}");
        assert_eq!(answer["error"]["code"], INVALID_PARAMS, "{w}: {answer:#}");

        assert!(!run_dir.exists(), "{w}: a refusal created {}", run_dir.display());
        assert!(fx.runs().is_empty(), "{w}: a refusal created a run: {:#?}", fx.runs());
        assert_eq!(std::fs::read_dir(&existing).unwrap().count(), 0, "{w}: the existing run_dir was touched");
        plans.push((over, name, id, sum, run_dir));
    }
    // The refused attempts did not use the plan up: approved as shown, it runs.
    let (over, name, id, sum, run_dir) = plans.pop().unwrap();
    let wb = client.over(over, "workbench");
    let run = wb.call_ok("execute_plan", json!({"plan_name": name, "plan_id": id, "plan_checksum": sum}));
    assert_eq!(run["status"], "READY", "{run:#}");
    assert_eq!(run["run_dir"], run_dir.display().to_string());
}

// ------------------------------------------------------------------------------------------------
// 5. tokens, roles and hosts over HTTP

fn initialize_body() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "cairn-tests", "version": "1"}}})
    .to_string()
}

/// An MCP server acts as the principal whose token it holds: a launcher plans (the plan says she
/// made it) and is refused what her role does not allow — approving, running code — naming the
/// permission and the grant to ask for; the audit says it came through MCP.
#[test]
fn an_mcp_session_acts_as_its_principal() {
    let Some(fx) = Fx::with_example() else { return };
    let (code, lena, out) = fx.json(&["user", "add", "lena", "--role", "launcher"]);
    assert_eq!(code, 0, "{out}");
    let token = lena["token"].as_str().unwrap().to_string();
    let client = fx.client();
    let wb = client.http_as("workbench", "lena", &token);
    let run_dir = fx.p("lena-run");
    let plan = wb.call_ok(
        "plan_run",
        json!({"workflow": "release-validation", "input": ready_input(), "target": "local", "run_dir": run_dir}),
    );
    let e = wb.call_err(
        "execute_plan",
        json!({"plan_name": plan["plan_name"], "plan_id": plan["plan_id"], "plan_checksum": plan["plan_checksum"]}),
    );
    assert_eq!((e["status"].as_u64(), e["code"].as_str()), (Some(403), Some("forbidden")), "{e:#}");
    assert!(e["message"].as_str().unwrap().contains("lena may not approve"), "{e:#}");
    let e = wb.call_err("execute_code", json!({"code": "1"}));
    assert_eq!((e["status"].as_u64(), e["code"].as_str()), (Some(403), Some("forbidden")), "{e:#}");
    let message = e["message"].as_str().unwrap();
    assert!(message.contains("lena may not code") && message.contains("cairn grant add"), "{message}");
    assert!(!run_dir.exists() && fx.runs().is_empty(), "nothing refused ran");
    let (_, acts, _) = fx.json(&["audit", "--principal", "lena"]);
    assert_eq!(acts["acts"][0]["action"], "plan.made", "{acts:#}");
    assert_eq!(acts["acts"][0]["channel"], "mcp", "the audit says it came through MCP: {acts:#}");
}

/// Every mutating MCP tool against principals of every built-in role, a custom one, and grants
/// scoped to the workflow and to the target (one table, as the API's in `access.rs`): an allowed
/// caller gets past the permission check to the refusal or the no-op its arguments lead to; a
/// refused one gets 403 `forbidden` naming itself and the permission. Nothing is created.
#[test]
fn every_mutating_tool_against_every_kind_of_principal() {
    const WHO: [&str; 8] = ["vera", "lena", "abe", "max", "ada", "rob", "dana", "tom"];
    let Some(fx) = Fx::with_example() else { return };
    let (code, _, out) = fx.json(&["role", "add", "runner", "--allow", "read,run"]);
    assert_eq!(code, 0, "{out}");
    let roles = ["viewer", "launcher", "approver", "maintainer", "admin", "runner", "viewer", "viewer"];
    let mut tokens = Vec::new();
    for (who, role) in WHO.iter().zip(roles) {
        let (code, added, out) = fx.json(&["user", "add", who, "--role", role]);
        assert_eq!(code, 0, "{out}");
        tokens.push(added["token"].as_str().unwrap().to_string());
    }
    for grant in [["dana", "launcher", "--workflow", "release-validation"], ["tom", "approver", "--target", "local"]] {
        let mut args = vec!["grant", "add"];
        args.extend(grant);
        assert_eq!(fx.json(&args).0, 0);
    }
    // A plan the owner made, executed with a wrong checksum: past the check it is a mismatch.
    let input = fx.p("ready.json");
    std::fs::write(&input, ready_input().to_string()).unwrap();
    let run_dir = fx.p("planned");
    let (code, plan, out) = fx.json(&[
        "plan",
        "release-validation",
        "--input",
        input.to_str().unwrap(),
        "--target",
        "local",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--name",
        "p1",
    ]);
    assert_eq!(code, 0, "{out}");
    let (code, run, out) =
        fx.json(&["run", "release-validation", "--input", input.to_str().unwrap(), "--run-id", "R1"]);
    assert_eq!((code, run["status"].as_str()), (0, Some("READY")), "{out}");
    let example = example("1.2.0");
    let rows: Vec<(&str, &str, Value, &str, &str)> = vec![
        ("workbench", "add_workflow", json!({"path": example}), "register", "---++---"),
        (
            "workbench",
            "plan_run",
            json!({"workflow": "release-validation", "input": ready_input(), "target": "local", "run_dir": "relative"}),
            "plan",
            "-++++-++",
        ),
        (
            "workbench",
            "plan_replay",
            json!({"source_run_id": "R1", "step_ids": ["load_manifest"], "run_dir": "relative"}),
            "plan",
            "-++++-++",
        ),
        (
            "workbench",
            "execute_plan",
            json!({"plan_name": "p1", "plan_id": plan["plan_id"], "plan_checksum": "0".repeat(64)}),
            "approve",
            "--+++--+",
        ),
        ("workbench", "cancel_run", json!({"run_id": "R1"}), "cancel", "---++---"),
        ("workbench", "verify_workflow", json!({}), "code", "---++---"),
        ("workbench", "execute_code", json!({"code": "  "}), "code", "---++---"),
        ("workbench", "interrupt_kernel", json!({}), "code", "---++---"),
        ("workbench", "restart_kernel", json!({}), "code", "---++---"),
        ("workbench", "save_doc", json!({"name": "a/b", "text": "# M\n"}), "docs", "-++++---"),
        (
            "compute",
            "add_target",
            json!({"name": "t", "ssh": "me@host", "workspace_root": "relative"}),
            "target",
            "---++---",
        ),
        ("compute", "probe_target", json!({"name": "nope"}), "plan", "-++++---"),
    ];
    let tools: Vec<&str> = rows.iter().map(|r| r.1).collect();
    assert_eq!(tools.iter().copied().collect::<std::collections::BTreeSet<_>>(), MUTATING.into_iter().collect());
    let client = fx.client();
    for (i, who) in WHO.iter().enumerate() {
        let wb = client.http_as("workbench", who, &tokens[i]);
        let compute = client.http_as("compute", who, &tokens[i]);
        for (server, tool, args, permission, allowed) in &rows {
            let session = if *server == "workbench" { &wb } else { &compute };
            let r = session.call(tool, args.clone());
            let error = &r["structuredContent"]["error"];
            let what = format!("{tool} as {who}");
            if allowed.as_bytes()[i] == b'+' {
                assert_ne!(error["code"], "forbidden", "{what}: it may: {r:#}");
            } else {
                assert_eq!(
                    (error["status"].as_u64(), error["code"].as_str()),
                    (Some(403), Some("forbidden")),
                    "{what}: {r:#}"
                );
                let message = error["message"].as_str().unwrap_or_default();
                assert!(message.contains(who), "{what}: the refusal names who: {message}");
                if *who != "vera" {
                    assert!(
                        message.contains(&format!("may not {permission}")),
                        "{what}: names `{permission}`: {message}"
                    );
                    assert_eq!(error["missing"]["permission"], *permission, "{what}: as data too: {r:#}");
                }
            }
        }
    }
    assert_eq!(fx.runs().len(), 1, "no call created a run: {:#?}", fx.runs());
    assert!(!run_dir.exists(), "no call executed the plan");
}

/// A Viewer token on /mcp/workbench and /mcp/compute reads, and every change comes back `isError`
/// 403 and changes nothing; /mcp/app works with either token; no token is a 401, a foreign
/// `Host` a 403 (DNS rebinding), a foreign browser `Origin` a 403.
#[test]
fn http_roles_tokens_and_hosts() {
    let Some(fx) = Fx::with_example() else { return };
    let client = fx.client();
    let op = client.http("workbench", "operator");
    let run_dir = fx.p("rd-viewer");
    let plan = op.call_ok(
        "plan_run",
        json!({"workflow": "release-validation", "input": ready_input(), "target": "local", "run_dir": run_dir}),
    );

    let viewer = client.http("workbench", "viewer");
    let w = &viewer.what;
    assert_eq!(viewer.call_ok("list_runs", json!({}))["runs"], json!([]));
    assert!(!viewer.call_ok("list_workflows", json!({}))["workflows"].as_array().unwrap().is_empty());
    assert_eq!(viewer.call_ok("describe_workflow", json!({"name": "release-validation"}))["version"], "1.2.0");
    let kernels_before = kernel_processes(&fx.home());
    for (tool, args) in [
        (
            "plan_run",
            json!({"workflow": "release-validation", "input": ready_input(), "target": "local", "run_dir": fx.p("rd-v2")}),
        ),
        (
            "execute_plan",
            json!({"plan_name": plan["plan_name"], "plan_id": plan["plan_id"], "plan_checksum": plan["plan_checksum"]}),
        ),
        ("cancel_run", json!({"run_id": "run_nope"})),
        ("execute_code", json!({"code": "open('/tmp/never', 'w')"})),
        ("restart_kernel", json!({})),
        ("interrupt_kernel", json!({})),
        ("verify_workflow", json!({"document": PASSING_DOC})),
    ] {
        let e = viewer.call_err(tool, args);
        assert_eq!((e["status"].as_u64(), e["code"].as_str()), (Some(403), Some("forbidden")), "{w}: {tool}: {e:#}");
        assert!(e["message"].as_str().unwrap().contains("Viewer"), "{w}: {tool}: the message says why: {e:#}");
    }
    assert!(!run_dir.exists() && !fx.p("rd-v2").exists(), "{w}: a Viewer's approval created a run_dir");
    assert!(fx.runs().is_empty(), "{w}: a Viewer created a run");
    assert_eq!(kernel_processes(&fx.home()), kernels_before, "{w}: a Viewer started a kernel");

    let compute = client.http("compute", "viewer");
    let targets = compute.call_ok("list_targets", json!({}));
    assert_eq!(targets["targets"][0]["name"], "local", "{targets:#}");
    let e =
        compute.call_err("add_target", json!({"name": "hpc", "ssh": "me@127.0.0.1:22", "workspace_root": "/scratch"}));
    assert_eq!(e["status"], 403, "{}: {e:#}", compute.what);
    assert_eq!(op.call_ok("list_runs", json!({}))["runs"], json!([]));

    for role in ["viewer", "operator"] {
        let app = client.http("app", role);
        assert_eq!(app.call_ok("runs_overview", json!({}))["runs"], json!([]), "{}", app.what);
        let wfs = app.call_ok("workflows_overview", json!({}));
        assert_eq!(wfs["workflows"][0]["name"], "release-validation", "{}: {wfs:#}", app.what);
        let t = app.call_ok("targets_overview", json!({}));
        assert_eq!(t["targets"][0]["name"], "local", "{}: {t:#}", app.what);
    }

    // Without a token the SDK cannot even initialise.
    let (_, answer) = client.connect(Over::Http, "workbench", None);
    assert!(answer.get("error").is_some(), "an MCP session without a token must fail: {answer:#}");
    let (_, answer) = client.connect(Over::Http, "app", Some("not-a-token"));
    assert!(answer.get("error").is_some(), "an MCP session with a wrong token must fail: {answer:#}");

    // The same at the HTTP level, on each endpoint.
    let url = fx.url();
    let port = url.rsplit(':').next().unwrap().to_string();
    let token = fx.token("operator");
    let body = initialize_body();
    let accept = ("Accept", "application/json, text/event-stream");
    for server in ["workbench", "compute", "app"] {
        let at = format!("{url}/mcp/{server}");
        let r = http("POST", &at, None, Some(&body), &[accept]);
        assert_eq!(r.status, 401, "POST {at} without a token: {}", r.text);
        assert_eq!(r.body["error"]["code"], "unauthorized", "{}", r.text);
        let r = http("POST", &at, Some("not-a-token"), Some(&body), &[accept]);
        assert_eq!(r.status, 401, "POST {at} with a wrong token: {}", r.text);
        let r = http("GET", &at, None, None, &[accept]);
        assert_eq!(r.status, 401, "GET {at} without a token: {}", r.text);
        for host in ["evil.example".to_string(), format!("evil.example:{port}")] {
            let r = http("POST", &at, Some(&token), Some(&body), &[accept, ("Host", &host)]);
            assert_eq!(r.status, 403, "POST {at} with Host {host}: {}", r.text);
            assert_eq!(r.body["error"]["code"], "forbidden_host", "{}", r.text);
        }
        let r = http("POST", &at, Some(&token), Some(&body), &[accept, ("Origin", "http://evil.example")]);
        assert_eq!(r.status, 403, "POST {at} with a foreign Origin: {}", r.text);
        let r = http("POST", &at, Some(&token), Some(&body), &[accept, ("Host", &format!("localhost:{port}"))]);
        assert_eq!(r.status, 200, "POST {at} with Host localhost: {}", r.text);
        assert!(r.text.contains(&format!("cairn-{server}")), "{}", r.text);
    }
}

// ------------------------------------------------------------------------------------------------
// 6. compute

/// Targets: `local` is listed; readiness of a fresh directory (created by nothing), refusals of
/// an existing or relative one; add_target refuses a relative workspace_root and `local`, and
/// registers an SSH target without contacting it. Over both transports.
#[test]
fn compute_targets_and_readiness() {
    let Some(fx) = Fx::new() else { return };
    fx.start_daemon();
    let client = fx.client();
    let existing = fx.p("existing");
    std::fs::create_dir(&existing).unwrap();
    for over in [Over::Stdio, Over::Http] {
        let c = client.over(over, "compute");
        let w = &c.what;
        let targets = c.call_ok("list_targets", json!({}));
        let local = &targets["targets"][0];
        assert_eq!(
            (local["name"].as_str(), local["builtin"].as_bool()),
            (Some("local"), Some(true)),
            "{w}: {targets:#}"
        );

        let fresh = fx.p(&format!("fresh-{over:?}"));
        let r = c.call_ok("check_readiness", json!({"target": "local", "run_dir": fresh}));
        assert_eq!(r["ready"], true, "{w}: {r:#}");
        assert_eq!(r["run_dir"], fresh.display().to_string());
        assert!(!fresh.exists(), "{w}: check_readiness created {}", fresh.display());
        let e = c.call_err("check_readiness", json!({"target": "local", "run_dir": existing}));
        assert!(e["message"].as_str().unwrap().contains("exists"), "{w}: {e:#}");
        let e = c.call_err("check_readiness", json!({"target": "local", "run_dir": "rel/dir"}));
        assert!(e["message"].as_str().unwrap().contains("relative"), "{w}: {e:#}");
        let e = c.call_err("check_readiness", json!({"target": "nowhere", "run_dir": fresh}));
        assert!(e["message"].as_str().unwrap().contains("nowhere"), "{w}: {e:#}");

        let name = format!("hpc-{}", format!("{over:?}").to_lowercase());
        let e =
            c.call_err("add_target", json!({"name": name, "ssh": "me@127.0.0.1:22", "workspace_root": "scratch/me"}));
        assert_eq!(e["status"], 422, "{w}: {e:#}");
        let m = e["message"].as_str().unwrap();
        assert!(m.contains("workspace root") && m.contains("scratch/me"), "{w}: the refusal names it: {e:#}");
        let e =
            c.call_err("add_target", json!({"name": "local", "ssh": "me@127.0.0.1:22", "workspace_root": "/scratch"}));
        assert!(e["status"].as_u64().is_some_and(|s| s == 409 || s == 422), "{w}: `local` is built in: {e:#}");
        let added =
            c.call_ok("add_target", json!({"name": name, "ssh": "me@127.0.0.1:22", "workspace_root": "/scratch/me"}));
        assert_eq!(added["name"], name.as_str(), "{w}: {added:#}");
        let listed = c.call_ok("list_targets", json!({}));
        assert!(listed["targets"].as_array().unwrap().iter().any(|t| t["name"] == name.as_str()), "{w}: {listed:#}");
        let app = client.session(over, "app", "viewer");
        let t = app.call_ok("targets_overview", json!({}));
        assert!(t["targets"].as_array().unwrap().iter().any(|t| t["name"] == name.as_str()), "{}: {t:#}", app.what);
    }
    let (code, v, out) = fx.json(&["target", "list"]);
    assert_eq!(code, 0, "{out}");
    let names: Vec<&str> = v["targets"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"hpc-stdio") && names.contains(&"hpc-http"), "the CLI sees the targets: {v:#}");
}

// ------------------------------------------------------------------------------------------------
// 7. the session kernel

/// The stdout text of a job.
fn job_stdout(job: &Value) -> String {
    job["outputs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| o["output_type"] == "stream" && o["name"] == "stdout")
        .map(|o| match &o["text"] {
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            t => t.as_str().unwrap_or_default().to_string(),
        })
        .collect()
}

/// execute_code runs in one long-lived kernel whose state carries from job to job (and from the
/// stdio server to the HTTP one: it is the daemon's); list_jobs, poll_job, interrupt_kernel and
/// restart_kernel (which loses the state). Stopping the daemon leaves no kernel behind.
#[test]
fn session_kernel_through_the_workbench() {
    let Some(fx) = Fx::new() else { return };
    fx.start_daemon();
    let client = fx.client();
    let stdio = client.stdio("workbench");
    let web = client.http("workbench", "operator");

    let first = stdio.call_ok("execute_code", json!({"code": "x = 40 + 2; print(x)"}));
    assert_eq!(first["status"], "ok", "{first:#}");
    assert_eq!(job_stdout(&first), "42\n", "{first:#}");
    assert!(first["error"].is_null(), "{first:#}");
    let id1 = first["job_id"].as_str().unwrap().to_string();
    assert!(id1.starts_with("job_"), "{first:#}");
    let session = first["session"].clone();

    let second = web.call_ok("execute_code", json!({"code": "print(x + 1)"}));
    assert_eq!((second["status"].as_str(), job_stdout(&second).as_str()), (Some("ok"), "43\n"), "{second:#}");
    assert_eq!(second["session"], session, "one kernel for both transports");
    let id2 = second["job_id"].as_str().unwrap().to_string();

    let jobs = stdio.call_ok("list_jobs", json!({}));
    let ids: Vec<&str> = jobs["jobs"].as_array().unwrap().iter().map(|j| j["job_id"].as_str().unwrap()).collect();
    assert_eq!(ids, [id1.as_str(), id2.as_str()], "oldest first: {jobs:#}");
    let polled = web.call_ok("poll_job", json!({"job_id": id1}));
    assert_eq!(polled, first, "poll_job returns the finished job");
    let e = web.call_err("poll_job", json!({"job_id": "job_nope"}));
    assert_eq!(e["status"], 404, "{e:#}");

    let err = stdio.call_ok("execute_code", json!({"code": "1 / 0"}));
    assert_eq!(err["status"], "error", "a failing job is a result, not a tool error: {err:#}");
    assert!(err["error"].as_str().unwrap().contains("ZeroDivisionError"), "{err:#}");

    let i = web.call_ok("interrupt_kernel", json!({}));
    assert!(i.get("interrupted").is_some(), "{i:#}");
    let again = stdio.call_ok("execute_code", json!({"code": "print(x)"}));
    assert_eq!(job_stdout(&again), "42\n", "an interrupt keeps the state: {again:#}");

    let r = stdio.call_ok("restart_kernel", json!({}));
    assert_eq!(r["killed_session"], session, "{r:#}");
    let lost = web.call_ok("execute_code", json!({"code": "print(x)"}));
    assert_eq!(lost["status"], "error", "{lost:#}");
    assert!(lost["error"].as_str().unwrap().contains("NameError"), "a restart loses the state: {lost:#}");
    assert_ne!(lost["session"], session, "a new kernel session: {lost:#}");

    drop(stdio);
    drop(web);
    drop(client);
    let (code, _, out) = fx.json(&["daemon", "stop"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        wait_until(Duration::from_secs(10), || kernel_processes(&fx.home()).is_empty()),
        "kernel processes survived the daemon: {:?}",
        kernel_processes(&fx.home()).into_iter().map(describe_pid).collect::<Vec<_>>()
    );
}

// ------------------------------------------------------------------------------------------------
// 8. resources

/// Every server offers the guide and the three templates; a workflow version reads as JSON; an
/// unknown URI or object is a JSON-RPC error (resource not found). Over both transports.
#[test]
fn resources_and_templates_on_every_server() {
    let Some(fx) = Fx::with_example() else { return };
    let client = fx.client();
    for over in [Over::Stdio, Over::Http] {
        for server in ["workbench", "compute", "app"] {
            let s = client.session(over, server, if server == "app" { "viewer" } else { "operator" });
            let w = &s.what;
            let listed = s.ok("list_resources", json!({}));
            let guide = listed["resources"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["uri"] == "cairn://guide")
                .unwrap_or_else(|| panic!("{w}: no cairn://guide in {listed:#}"));
            assert_eq!(guide["mimeType"], "text/markdown", "{w}: {guide}");
            let templates = s.ok("list_templates", json!({}));
            let mut got: Vec<&str> = templates["resourceTemplates"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["uriTemplate"].as_str().unwrap())
                .collect();
            got.sort();
            let mut want = TEMPLATES.to_vec();
            want.sort();
            assert_eq!(got, want, "{w}: {templates:#}");

            let g = s.read("cairn://guide").unwrap_or_else(|e| panic!("{w}: {e:#}"));
            assert_eq!(g["mimeType"], "text/markdown", "{w}");
            let text = g["text"].as_str().unwrap();
            assert!(text.starts_with("# ") && text.contains("execute_plan"), "{w}: {text}");

            let wf = s.read_json("cairn://workflows/release-validation@1.2.0");
            assert_eq!(
                (wf["name"].as_str(), wf["version"].as_str()),
                (Some("release-validation"), Some("1.2.0")),
                "{w}"
            );
            for uri in [
                "cairn://runs/run_nope",
                "cairn://workflows/release-validation@9.9.9",
                "cairn://workflows/release-validation",
                "cairn://verifications/ver_nope/notebook",
                "cairn://nothing/here",
                "https://example.com/",
            ] {
                let e = s.read_err(uri);
                assert_eq!(
                    (e["kind"].as_str(), e["code"].as_i64()),
                    (Some("mcp"), Some(RESOURCE_NOT_FOUND)),
                    "{w}: {uri}: {e:#}"
                );
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// known product bugs (reproductions; run with `--run-ignored only`)

/// The app server's runs_overview promises each run's replay source, but GET /runs carries no
/// `source_run_id`, so it is always null, even for a replay child.
#[test]
fn bug_runs_overview_names_the_replay_source() {
    let Some(fx) = Fx::with_example() else { return };
    let client = fx.client();
    let wb = client.stdio("workbench");
    let plan = wb.call_ok(
        "plan_run",
        json!({"workflow": "release-validation", "input": ready_input(), "target": "local", "run_dir": fx.p("a")}),
    );
    let src = wb.call_ok(
        "execute_plan",
        json!({"plan_name": plan["plan_name"], "plan_id": plan["plan_id"], "plan_checksum": plan["plan_checksum"]}),
    );
    let rp = wb.call_ok(
        "plan_replay",
        json!({"source_run_id": src["run_id"], "step_ids": ["run_unit_tests"], "run_dir": fx.p("b")}),
    );
    let child = wb.call_ok(
        "execute_plan",
        json!({"plan_name": rp["plan_name"], "plan_id": rp["plan_id"], "plan_checksum": rp["plan_checksum"]}),
    );
    let app = client.stdio("app");
    let rows = app.call_ok("runs_overview", json!({}));
    let row = rows["runs"].as_array().unwrap().iter().find(|r| r["run_id"] == child["run_id"]).unwrap().clone();
    assert_eq!(row["source_run_id"], src["run_id"], "{rows:#}");
}

/// Failures are `isError` results with structuredContent `{error: {status, code, message}}` — but
/// arguments that do not deserialize (rmcp's own check) come back as text only.
#[test]
fn bug_bad_arguments_have_a_structured_error() {
    let Some(fx) = Fx::new() else { return };
    fx.start_daemon();
    let client = fx.client();
    let wb = client.stdio("workbench");
    let e = wb.call_err("plan_run", json!({"workflow": "w", "input": {}, "target": "local"}));
    assert!(e["message"].as_str().unwrap().contains("run_dir"), "{e:#}");
}

/// `cairn daemon stop` while an MCP client holds a streamable-HTTP session open (the SDK keeps
/// its standalone GET stream open, as every host does): the daemon's graceful shutdown waits for
/// that connection, so `stop` waits its whole 30 s grace and SIGKILLs the daemon — which then
/// never runs its shutdown: daemon.log has no `stopping`/`stopped`, daemon.json stays behind, and
/// the session kernel it started is orphaned and keeps running.
#[test]
fn bug_daemon_stop_with_an_open_mcp_http_session() {
    let Some(fx) = Fx::new() else { return };
    fx.start_daemon();
    let client = fx.client();
    let wb = client.http("workbench", "operator");
    assert_eq!(wb.call_ok("execute_code", json!({"code": "x = 1"}))["status"], "ok");
    assert!(!kernel_processes(&fx.home()).is_empty(), "the session kernel runs");
    let started = Instant::now();
    let (code, _, out) = fx.json(&["daemon", "stop"]);
    let took = started.elapsed();
    let leftover = kernel_processes(&fx.home());
    for pid in &leftover {
        kill_group(*pid);
    }
    assert_eq!(code, 0, "{out}");
    let log = std::fs::read_to_string(fx.home().join("daemon.log")).unwrap_or_default();
    assert!(
        took < Duration::from_secs(10) && log.contains("stopped;") && !fx.home().join("daemon.json").exists(),
        "`daemon stop` took {took:?}; daemon.json left: {}; kernels left: {leftover:?}; daemon.log:\n{log}",
        fx.home().join("daemon.json").exists()
    );
    assert!(leftover.is_empty(), "kernel processes survived the daemon: {leftover:?}");
    drop(wb);
}

/// check_readiness only reads, so a Viewer may use it; probe_target records what it observed as
/// the target's last probe, so it is not annotated read-only and needs the Operator token.
#[test]
fn a_viewer_checks_readiness_but_does_not_probe() {
    let Some(fx) = Fx::new() else { return };
    fx.start_daemon();
    let client = fx.client();
    let compute = client.http("compute", "viewer");
    let tools = compute.tools();
    let hint = |name: &str| tools.iter().find(|t| t["name"] == name).unwrap()["annotations"]["readOnlyHint"].clone();
    assert_eq!(hint("check_readiness"), true);
    assert_eq!(hint("probe_target"), false);
    compute.call_ok("check_readiness", json!({"target": "local", "run_dir": fx.p("fresh")}));
    assert!(!fx.p("fresh").exists());
    let refused = compute.call("probe_target", json!({"name": "local"}));
    assert_eq!(refused["isError"], true, "{refused:#}");
    assert_eq!(refused["structuredContent"]["error"]["status"], 403, "{refused:#}");
}

/// `verify_workflow` answers within `wait` seconds: with the verdict, or with the running
/// verification's id, which `list_jobs` lists and `poll_job` follows to its result.
#[test]
fn verify_workflow_answers_within_wait_and_poll_job_follows_it() {
    let Some(fx) = Fx::new() else { return };
    fx.start_daemon();
    let client = fx.client();
    let wb = client.over(Over::Stdio, "workbench");
    let doc = "```python\nimport time\ntime.sleep(3)\n```\n\n```python\nx = 1\n```\n";
    let started = std::time::Instant::now();
    let v = wb.call_ok("verify_workflow", json!({"document": doc, "title": "slow", "wait": 1}));
    assert!(started.elapsed() < Duration::from_secs(3), "it waited {:?}", started.elapsed());
    assert_eq!(v["status"], "running", "{v:#}");
    let id = v["verification_id"].as_str().unwrap().to_string();
    let jobs = wb.call_ok("list_jobs", json!({}));
    let listed: Vec<&Value> = jobs["jobs"].as_array().unwrap().iter().filter(|j| j["job_id"] == id.as_str()).collect();
    assert_eq!(listed.len(), 1, "{jobs:#}");
    assert_eq!((listed[0]["kind"].as_str(), listed[0]["cells_total"].as_u64()), (Some("verification"), Some(2)));
    let mut polled = Value::Null;
    assert!(
        wait_until(Duration::from_secs(60), || {
            polled = wb.call_ok("poll_job", json!({"job_id": id}));
            polled["status"] != "running"
        }),
        "never finished: {polled:#}"
    );
    assert_eq!(polled["status"], "passed", "{polled:#}");
    assert_eq!(polled["verification"]["verdict"], "passed");
    assert!(polled["verification"]["notebook"].as_str().is_some_and(|n| std::path::Path::new(n).is_file()));
    // A fast one, within the default minute: the result itself.
    let fast = wb.call_ok("verify_workflow", json!({"document": "```python\ny = 2\n```\n"}));
    assert_eq!(fast["verdict"], "passed", "{fast:#}");
    // A long one, stopped by interrupt_kernel: no further cell, verdict interrupted.
    let long = "```python\nimport time\ntime.sleep(60)\n```\n\n```python\nz = 3\n```\n";
    let v = wb.call_ok("verify_workflow", json!({"document": long, "title": "long", "wait": 1}));
    let id = v["verification_id"].as_str().unwrap().to_string();
    let out = wb.call_ok("interrupt_kernel", json!({}));
    assert_eq!(out["verifications"], json!([id]), "{out:#}");
    assert!(
        wait_until(Duration::from_secs(10), || {
            polled = wb.call_ok("poll_job", json!({"job_id": id}));
            polled["status"] != "running"
        }),
        "interrupt_kernel did not stop it: {polled:#}"
    );
    assert_eq!(polled["status"], "interrupted", "{polled:#}");
    let cells: Vec<&str> =
        polled["verification"]["cells"].as_array().unwrap().iter().map(|c| c["status"].as_str().unwrap()).collect();
    assert_eq!(cells, ["interrupted", "skipped"], "{polled:#}");
}
