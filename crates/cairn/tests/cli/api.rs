//! The daemon's HTTP API from the outside: every endpoint × every kind of caller, the loopback
//! `Host` check, bad submissions that must create nothing, run semantics over HTTP, and the
//! OpenAPI document. Each test has its own state root (its own `CAIRN_HOME`) and its own daemon.
//!
//! The endpoint table is checked against the router's source: a route added anywhere under
//! `src/` without a row here fails [`auth_matrix_covers_every_endpoint_and_caller`],
//! and one missing from `/openapi.json` fails [`openapi_document_describes_every_route`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;

// ------------------------------------------------------------------------------------ client

/// Who calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    /// No `Authorization` header.
    Anonymous,
    /// A bearer token of the right length that is not one of the daemon's.
    Wrong,
    Viewer,
    Operator,
}

const CALLERS: [Caller; 4] = [Caller::Anonymous, Caller::Wrong, Caller::Viewer, Caller::Operator];

/// A state root with the `demo` workflow registered and its daemon running.
struct Api {
    c: Cairn,
    url: String,
    port: u16,
    viewer: String,
    operator: String,
}

impl Drop for Api {
    fn drop(&mut self) {
        // Best effort, also while a failed test unwinds; removing the state root stops it too.
        let _ = self.c.cmd(&["daemon", "stop"]);
    }
}

impl Api {
    fn start() -> Api {
        Api::on(cairn_store::testing::Kind::Sqlite).unwrap_or_else(|| unreachable!("SQLite is always there"))
    }

    /// An API whose registry is `kind`'s (`None`: no PostgreSQL here, outside CI).
    fn on(kind: cairn_store::testing::Kind) -> Option<Api> {
        let c = Cairn::on(kind)?;
        demo_workflow(&c);
        let d = c.start_daemon();
        let port = d.url.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("{}", d.url));
        let (viewer, operator) = (c.token("viewer"), c.token("operator"));
        assert_ne!(viewer, operator);
        Some(Api { url: d.url, port, viewer, operator, c })
    }

    fn token(&self, who: Caller) -> Option<String> {
        match who {
            Caller::Anonymous => None,
            Caller::Wrong => Some("0".repeat(self.operator.len())),
            Caller::Viewer => Some(self.viewer.clone()),
            Caller::Operator => Some(self.operator.clone()),
        }
    }

    fn send(&self, method: &str, path: &str, who: Caller, body: Option<Body>, headers: &[(&str, &str)]) -> Http {
        self.send_within(Duration::from_secs(30), method, path, who, body, headers)
    }

    /// [`Api::send`] with a time limit for the whole exchange (a stream cut by it ends early).
    fn send_within(
        &self,
        limit: Duration,
        method: &str,
        path: &str,
        who: Caller,
        body: Option<Body>,
        headers: &[(&str, &str)],
    ) -> Http {
        request(limit, method, &format!("{}{path}", self.url), self.token(who).as_deref(), body, headers)
    }

    fn get(&self, path: &str, who: Caller) -> Http {
        self.send("GET", path, who, None, &[])
    }

    fn post(&self, path: &str, who: Caller, body: &Value) -> Http {
        self.send("POST", path, who, Some(Body::json(body)), &[])
    }

    /// The input of a `demo` run whose step `a` follows `plan`.
    fn input(&self, plan: &[&str]) -> Value {
        json!({"plan": plan, "log": self.c.path_str("log"), "release": self.c.path_str("release")})
    }

    /// A `POST /runs` body for `demo` with that plan (and run id).
    fn submit_body(&self, plan: &[&str], run_id: Option<&str>) -> Value {
        let mut b = json!({"thread_id": "thread-1", "agent_id": "demo", "input": self.input(plan)});
        if let Some(id) = run_id {
            b["run_id"] = json!(id);
        }
        b
    }

    /// Polls `GET /runs/{id}` until the run has `status`; panics if it ends otherwise.
    #[track_caller]
    fn wait_status(&self, run_id: &str, status: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = self.get(&format!("/runs/{run_id}"), Caller::Viewer);
            expect(&r, 200, None, &format!("GET /runs/{run_id}"));
            let now = r.body["status"].as_str().unwrap_or("").to_string();
            if now == status {
                return r.body;
            }
            let terminal = ["READY", "BLOCKED", "FAILED", "CANCELLED"].contains(&now.as_str());
            assert!(!terminal, "run {run_id} ended {now}, expected {status}: {:#}", r.body);
            assert!(Instant::now() < deadline, "run {run_id} is still {now} after 30 s: {:#}", r.body);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Submits a `demo` run that finishes at once, as the operator, and waits until it is READY.
    #[track_caller]
    fn finished_run(&self, run_id: &str) -> Value {
        let r = self.post("/runs", Caller::Operator, &self.submit_body(&["ok"], Some(run_id)));
        expect(&r, 202, None, "POST /runs");
        self.wait_status(run_id, "READY")
    }

    /// What a refused request must leave alone.
    fn snapshot(&self) -> (usize, Vec<String>, Vec<String>) {
        (self.c.runs().len(), self.c.entries("runs"), log_lines(&self.c.path("log")))
    }
}

/// Checks one answer: its status, and for an error the JSON error shape
/// `{"error": {"code", "message"}}` with a JSON content type (and `WWW-Authenticate: Bearer` on a
/// 401); `code`, when given, must be the error code.
#[track_caller]
fn expect(r: &Http, status: u16, code: Option<&str>, what: &str) {
    assert_eq!(r.status, status, "{what}: unexpected status\n{}", r.text);
    if status < 400 {
        return;
    }
    assert!(
        r.header("content-type").starts_with("application/json"),
        "{what}: an error must be JSON, the content type was `{}`: {}",
        r.header("content-type"),
        r.text
    );
    let obj = r.body.as_object().unwrap_or_else(|| panic!("{what}: the error body is not a JSON object: {}", r.text));
    assert_eq!(obj.keys().collect::<Vec<_>>(), ["error"], "{what}: {}", r.text);
    let err = r.body["error"].as_object().unwrap_or_else(|| panic!("{what}: `error` is not an object: {}", r.text));
    let mut keys: Vec<&String> = err.keys().collect();
    keys.sort();
    // A rejected workflow also lists its problems, each located.
    if r.body["error"]["problems"].as_array().is_some_and(|p| !p.is_empty()) {
        assert_eq!(keys, ["code", "message", "problems"], "{what}: {}", r.text);
    } else {
        assert_eq!(keys, ["code", "message"], "{what}: {}", r.text);
    }
    let got = r.body["error"]["code"].as_str().unwrap_or("");
    assert!(!got.is_empty(), "{what}: empty error code: {}", r.text);
    assert!(!r.body["error"]["message"].as_str().unwrap_or("").trim().is_empty(), "{what}: empty message: {}", r.text);
    if let Some(code) = code {
        assert_eq!(got, code, "{what}: unexpected error code: {}", r.text);
    }
    if status == 401 {
        assert_eq!(r.header("www-authenticate"), "Bearer", "{what}: a 401 must carry `WWW-Authenticate: Bearer`");
    }
}

/// The error message of an error answer.
fn message(r: &Http) -> &str {
    r.body["error"]["message"].as_str().unwrap_or("")
}

/// Sends one request over a bare socket, writing the body from another thread while the answer
/// is read. For a body the daemon refuses unread (413): a client that first writes all of it, as
/// ureq does, meets a closed connection (EPIPE) before it can read the answer.
fn send_raw(port: u16, head: &str, body: &[u8]) -> Http {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut bytes = head.as_bytes().to_vec();
    bytes.extend_from_slice(body);
    let sending = std::thread::spawn(move || {
        let _ = writer.write_all(&bytes); // may fail once the daemon has answered and closed
    });
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if !got.is_empty() => {
                eprintln!("reading the answer ended with {e} after {} bytes", got.len());
                break;
            }
            Err(e) => panic!("no answer to {head:?}: {e}"),
        }
        // Stop once the whole answer (with a Content-Length) is in.
        if let Some(at) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..at]).to_ascii_lowercase();
            let len = head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok());
            if len.is_some_and(|len: usize| got.len() >= at + 4 + len) {
                break;
            }
        }
    }
    drop(stream);
    let _ = sending.join();
    let text = String::from_utf8_lossy(&got).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let text = body.to_string();
    let body = serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.clone()));
    Http { status, headers, body, bytes: text.clone().into_bytes(), text }
}

// ------------------------------------------------------------------------------------ workflow

/// A tool that writes `args.lines` numbered lines to stderr and a small result to stdout.
const NOISY_PY: &str = r#"import json, sys
raw = sys.stdin.read()
args = json.loads(raw) if raw.strip() else {}
for i in range(1, int(args.get("lines", 5)) + 1):
    sys.stderr.write("noise line %d\n" % i)
sys.stderr.flush()
sys.stdout.write(json.dumps({"noisy": True}))
"#;

/// The input must be an object with `plan` (strings), `log` and `release`.
const SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["plan", "log", "release"],
  "properties": {
    "plan": {"type": "array", "items": {"type": "string"}},
    "log": {"type": "string"},
    "release": {"type": "string"}
  }
}"#;

/// `demo@1.0.0`: step `a` runs the generic tool with `input.plan`; step `b` (after `a`) writes
/// five lines to stderr.
fn demo_workflow(c: &Cairn) {
    let toml = format!(
        r#"
[workflow]
name = "demo"
version = "1.0.0"
input_schema = "input.schema.json"

{}
[tools.noisy]
command = ["python3", "tools/noisy.py"]

[[steps]]
id = "a"
tool = "t"
args = {{ plan = "${{input.plan}}", log = "${{input.log}}", release = "${{input.release}}" }}

[[steps]]
id = "b"
tool = "noisy"
needs = ["a"]
args = {{ lines = 5, after = "${{steps.a.result.step}}" }}
"#,
        tool_toml("t", "")
    );
    let mut files = tool_files();
    files.push(("tools/noisy.py", NOISY_PY));
    files.push(("input.schema.json", SCHEMA));
    c.add(&write_workflow(&c.path("demo"), &toml, &files));
}

// ------------------------------------------------------------------------------------ routes

/// Every `(METHOD, path)` the router serves, read from the binary's source (every `.rs` file
/// under `src/`, wherever the router's parts live), so a new endpoint cannot go untested. Every
/// route is a one-line `.route("/…", method(handler)…)`; a nested router (`.nest(`) is not
/// understood and fails here.
fn router_routes() -> Vec<(String, String)> {
    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = e.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(!text.contains(".nest("), "{} nests a router: teach router_routes() its prefix", f.display());
        // Each `.route("` of a line (rustfmt puts a short chain on one line).
        for (line, at) in text.lines().flat_map(|l| l.match_indices(".route(\"").map(move |(at, _)| (l, at))) {
            let rest = &line[at + ".route(\"".len()..];
            let rest = &rest[..rest[1..].find(".route(\"").map_or(rest.len(), |n| n + 1)];
            let Some(end) = rest.find('"') else { continue };
            let path = rest[..end].to_string();
            let handlers = &rest[end..];
            let mut methods = 0;
            for m in ["get", "post", "put", "delete", "patch"] {
                let found = handlers.match_indices(&format!("{m}(")).any(|(i, _)| {
                    i == 0 || !handlers.as_bytes()[i - 1].is_ascii_alphanumeric() && handlers.as_bytes()[i - 1] != b'_'
                });
                if found {
                    out.push((m.to_ascii_uppercase(), path.clone()));
                    methods += 1;
                }
            }
            assert!(methods > 0, "cannot tell the methods of route `{path}` in {}: {line}", f.display());
        }
    }
    assert!(out.len() >= 10, "the router has at least the ten run and workflow routes: {out:?}");
    out
}

/// Whether a concrete path fits a route template (`{x}` matches one non-empty segment).
fn fits(template: &str, path: &str) -> bool {
    let path = path.split('?').next().unwrap();
    let (t, p): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    t.len() == p.len() && t.iter().zip(&p).all(|(t, p)| if t.starts_with('{') { !p.is_empty() } else { t == p })
}

/// Routes that answer without a token: the daemon's health and document, and the web app's page,
/// files and login (which holds no data; its data comes from the API with the Viewer token).
const PUBLIC: [&str; 5] = ["/health", "/openapi.json", "/", "/assets/{file}", "/ui/login"];

/// The content type a successful answer to `path` has: JSON but for the web app's page and files,
/// event streams, and notebook downloads.
fn content_type_of(path: &str) -> &'static str {
    match path.split('?').next().unwrap_or("") {
        "/" => "text/html",
        p if p.starts_with("/assets/") && p.ends_with(".js") => "text/javascript",
        p if p.starts_with("/assets/") && p.ends_with(".css") => "text/css",
        "/api/notebook" => "application/x-ipynb+json",
        p if p.ends_with("/ro-crate") => "application/zip",
        _ if path.contains("follow=true") => "text/event-stream",
        _ => "application/json",
    }
}

// ------------------------------------------------------------------------------------ 1. auth

/// What one caller gets from one request: a status and, for an error, its code.
type Outcome = (u16, Option<&'static str>);

/// One row of the endpoint table: a request and what each of [`CALLERS`] gets.
struct Row {
    method: &'static str,
    path: String,
    body: Option<Value>,
    expect: [Outcome; 4],
}

const UNAUTHORIZED: Outcome = (401, Some("unauthorized"));
const FORBIDDEN: Outcome = (403, Some("forbidden"));
const OK: Outcome = (200, None);
const NOT_FOUND: Outcome = (404, Some("not_found"));

/// Refused as missing, with the engine's own code for what is missing (`run_not_found`, …).
fn missing(code: &'static str) -> Outcome {
    (404, Some(code))
}

/// Refused as invalid (422), with the engine's own code for why.
fn refused(code: &'static str) -> Outcome {
    (422, Some(code))
}

/// A route that needs a token: no or a wrong token is 401; the viewer and operator get these.
fn protected(method: &'static str, path: &str, body: Option<Value>, viewer: Outcome, operator: Outcome) -> Row {
    Row { method, path: path.to_string(), body, expect: [UNAUTHORIZED, UNAUTHORIZED, viewer, operator] }
}

/// A request every caller gets the same answer to.
fn public(method: &'static str, path: &str, outcome: Outcome) -> Row {
    Row { method, path: path.to_string(), body: None, expect: [outcome; 4] }
}

/// Every endpoint × {no token, wrong token, viewer, operator}, over a finished run `R1`: reads
/// answer the viewer, every POST refuses it with 403, and the operator passes; nothing a refused
/// caller sent changes anything.
fn auth_matrix_covers_every_endpoint_and_caller(k: cairn_store::testing::Kind) {
    let Some(api) = Api::on(k) else { return };
    api.finished_run("R1");
    let same_as_r1 = api.submit_body(&["ok"], Some("R1"));
    let rows = vec![
        public("GET", "/health", OK),
        public("GET", "/openapi.json", OK),
        // The web app: its page and files for anyone, its login only with a code of `cairn ui`.
        public("GET", "/", OK),
        public("GET", "/assets/app.js", OK),
        public("GET", "/assets/style.css", OK),
        public("GET", "/assets/nope.js", NOT_FOUND),
        public("GET", "/assets/index.html", NOT_FOUND),
        public("GET", "/ui/login?code=1.2.3", (401, Some("invalid_login"))),
        public("GET", "/ui/login", (400, Some("invalid_query"))),
        protected("GET", "/runs", None, OK, OK),
        protected("GET", "/runs?status=READY&limit=5", None, OK, OK),
        protected("GET", "/runs?workflow=demo", None, OK, OK),
        protected("GET", "/runs?source_run_id=R1", None, OK, OK),
        protected("GET", "/runs?workflow=%20", None, refused("invalid_field"), refused("invalid_field")),
        // No run is active, so the stream sends the list once and ends.
        protected("GET", "/runs?follow=true", None, OK, OK),
        // The operator re-submits R1 itself: idempotent, 200, nothing new.
        protected("POST", "/runs", Some(same_as_r1), FORBIDDEN, OK),
        // A viewer's POST is refused before its body is read, even a bad one.
        protected("POST", "/runs", Some(json!({"nonsense": true})), FORBIDDEN, refused("invalid_body")),
        protected("GET", "/runs/R1", None, OK, OK),
        protected("GET", "/runs/nope", None, missing("run_not_found"), missing("run_not_found")),
        protected("GET", "/runs/R1/events", None, OK, OK),
        protected("GET", "/runs/R1/events?after=1", None, OK, OK),
        protected("GET", "/runs/nope/events", None, missing("run_not_found"), missing("run_not_found")),
        protected("GET", "/runs/R1/steps/b/log", None, OK, OK),
        protected("GET", "/runs/R1/steps/zz/log", None, missing("step_not_found"), missing("step_not_found")),
        protected("GET", "/runs/nope/steps/a/log", None, missing("run_not_found"), missing("run_not_found")),
        protected("POST", "/runs/R1/cancel", None, FORBIDDEN, (409, Some("run_finished"))),
        protected("POST", "/runs/nope/cancel", None, FORBIDDEN, missing("run_not_found")),
        protected("GET", "/workflows", None, OK, OK),
        protected("GET", "/workflows/demo", None, OK, OK),
        protected("GET", "/workflows/demo?version=1.0.0", None, OK, OK),
        protected("GET", "/workflows/nope", None, missing("workflow_not_found"), missing("workflow_not_found")),
        // Registering: the operator's folders are refused (relative; no workflow.toml; no such
        // field), so nothing is registered.
        protected("POST", "/workflows", Some(json!({"path": "demo"})), FORBIDDEN, refused("invalid_field")),
        protected(
            "POST",
            "/workflows",
            Some(json!({"path": "/nonexistent/cairn-folder"})),
            FORBIDDEN,
            refused("invalid_workflow_folder"),
        ),
        protected("POST", "/workflows", Some(json!({"folder": "/tmp"})), FORBIDDEN, refused("invalid_body")),
        // The session kernel. The operator's job is refused for its empty code, so no kernel
        // starts; interrupt and restart with no kernel running are harmless no-ops.
        protected("GET", "/kernel/jobs", None, OK, OK),
        protected("POST", "/kernel/jobs", Some(json!({"code": "  "})), FORBIDDEN, refused("empty_job")),
        protected("POST", "/kernel/jobs", Some(json!({"code": 5})), FORBIDDEN, refused("invalid_body")),
        protected("GET", "/kernel/jobs/nope", None, missing("job_not_found"), missing("job_not_found")),
        protected("POST", "/kernel/interrupt", None, FORBIDDEN, OK),
        protected("POST", "/kernel/restart", None, FORBIDDEN, OK),
        protected("GET", "/kernel/audit", None, OK, OK),
        // The notebook exports: the audit (empty), and the workflow, of which there is none yet.
        protected("GET", "/api/notebook", None, OK, OK),
        protected("GET", "/api/notebook?workflow=0", None, OK, OK),
        protected("GET", "/api/notebook?workflow=1", None, missing("nothing_verified"), missing("nothing_verified")),
        protected("GET", "/api/notebook?workflow=yes", None, refused("invalid_field"), refused("invalid_field")),
        // Plans. The operator's plan is refused for its relative run_dir and its execution of an
        // unknown plan is 404, so nothing is planned or executed.
        protected("GET", "/plans", None, OK, OK),
        protected(
            "POST",
            "/plans",
            Some(json!({"workflow": "demo", "input": {}, "target": "local", "run_dir": "relative"})),
            FORBIDDEN,
            refused("invalid_run_dir"),
        ),
        protected("GET", "/plans/nope", None, missing("plan_not_found"), missing("plan_not_found")),
        protected(
            "POST",
            "/plans/nope/execute",
            Some(json!({"plan_id": "plan_x", "plan_checksum": "0"})),
            FORBIDDEN,
            missing("plan_not_found"),
        ),
        protected("GET", "/runs/R1/timeline", None, OK, OK),
        protected("GET", "/runs/nope/timeline", None, missing("run_not_found"), missing("run_not_found")),
        protected("GET", "/runs/R1/timeline?steps_limit=0", None, refused("invalid_field"), refused("invalid_field")),
        protected("GET", "/runs/R1/layers", None, OK, OK),
        protected("GET", "/runs/R1/layers?limit=0", None, refused("invalid_field"), refused("invalid_field")),
        protected("GET", "/runs/nope/layers", None, missing("run_not_found"), missing("run_not_found")),
        protected("GET", "/runs/R1?steps_status=nope", None, refused("invalid_field"), refused("invalid_field")),
        protected("GET", "/runs/R1/events?limit=0", None, refused("invalid_field"), refused("invalid_field")),
        protected("GET", "/runs/R1/steps/b/explain", None, OK, OK),
        protected("GET", "/runs/R1/steps/zz/explain", None, missing("step_not_found"), missing("step_not_found")),
        // A step's pipeline jobs (none: it is not a pipeline), and a bad filter.
        protected("GET", "/runs/R1/steps/b/jobs", None, OK, OK),
        protected("GET", "/runs/R1/steps/zz/jobs", None, missing("step_not_found"), missing("step_not_found")),
        protected("GET", "/runs/R1/steps/b/jobs?status=done", None, refused("invalid_input"), refused("invalid_input")),
        // The evidence: a step whole, a run's artifacts, and a trace by hash (none recorded).
        protected("GET", "/runs/R1/steps/b", None, OK, OK),
        protected("GET", "/runs/R1/steps/zz", None, missing("step_not_found"), missing("step_not_found")),
        protected("GET", "/runs/R1/artifacts", None, OK, OK),
        protected("GET", "/runs/nope/artifacts", None, missing("run_not_found"), missing("run_not_found")),
        protected(
            "GET",
            "/runs/R1/steps/b/artifacts/nope",
            None,
            missing("artifact_not_found"),
            missing("artifact_not_found"),
        ),
        // RO-Crate exports: a projection, so a Viewer may have one.
        protected("GET", "/runs/R1/ro-crate", None, OK, OK),
        protected("GET", "/runs/nope/ro-crate", None, missing("run_not_found"), missing("run_not_found")),
        protected("GET", "/runs/R1/export?data=false", None, OK, OK),
        protected("GET", "/runs/nope/export", None, missing("run_not_found"), missing("run_not_found")),
        protected(
            "GET",
            "/verifications/nope/ro-crate",
            None,
            missing("verification_not_found"),
            missing("verification_not_found"),
        ),
        protected("GET", &format!("/artifacts?sha256={}", "ab".repeat(32)), None, OK, OK),
        protected("GET", "/artifacts?sha256=xyz", None, refused("invalid_field"), refused("invalid_field")),
        protected("GET", "/artifacts", None, refused("invalid_field"), refused("invalid_field")),
        // Compute. The operator's registration is refused for its relative workspace root and
        // the probe and readiness name unknown targets, so nothing is contacted or stored.
        protected("GET", "/targets", None, OK, OK),
        protected(
            "POST",
            "/targets",
            Some(json!({"name": "t", "ssh": "me@host", "workspace_root": "relative"})),
            FORBIDDEN,
            refused("invalid_target"),
        ),
        protected("POST", "/targets/nope/probe", None, FORBIDDEN, missing("target_not_found")),
        protected(
            "GET",
            "/targets/nope/readiness?run_dir=/tmp/x",
            None,
            missing("target_not_found"),
            missing("target_not_found"),
        ),
        // Verifications. The operator's request is refused for naming no document.
        protected("GET", "/verifications", None, OK, OK),
        protected("POST", "/verifications", Some(json!({})), FORBIDDEN, refused("invalid_field")),
        protected(
            "GET",
            "/verifications/nope",
            None,
            missing("verification_not_found"),
            missing("verification_not_found"),
        ),
        protected(
            "GET",
            "/verifications/nope/notebook",
            None,
            missing("verification_not_found"),
            missing("verification_not_found"),
        ),
        // Cancelling a verification no one runs: 404; the spare (this daemon keeps one, or not).
        protected("POST", "/verifications/nope/cancel", None, FORBIDDEN, missing("verification_not_found")),
        protected("GET", "/kernel/spare", None, OK, OK),
        protected("GET", "/daemons", None, OK, OK),
        // The doc index: the operator saves `m` (and a bad name is refused), everyone reads it,
        // and the operator removes it last.
        protected("GET", "/docs", None, OK, OK),
        protected("POST", "/docs", Some(json!({"name": "m", "text": "# M\n"})), FORBIDDEN, (201, None)),
        protected(
            "POST",
            "/docs",
            Some(json!({"name": "a/b", "text": "# M\n"})),
            FORBIDDEN,
            refused("invalid_doc_name"),
        ),
        protected("GET", "/docs?removed=true", None, OK, OK),
        protected("GET", "/docs/search?query=m", None, OK, OK),
        protected(
            "GET",
            "/docs/search?query=AND%20OR",
            None,
            refused("invalid_doc_query"),
            refused("invalid_doc_query"),
        ),
        protected("GET", "/docs/m", None, OK, OK),
        protected("GET", "/docs/m?version=2", None, missing("doc_version_not_found"), missing("doc_version_not_found")),
        protected("GET", "/docs/nope", None, missing("doc_not_found"), missing("doc_not_found")),
        protected("DELETE", "/docs/nope", None, FORBIDDEN, missing("doc_not_found")),
        protected("DELETE", "/docs/m", None, FORBIDDEN, OK),
        // A team: everyone reads principals, roles, policies and the audit; the owner's changes
        // are refused for a bad name or body, or name what does not exist, so nothing changes.
        protected("GET", "/principals", None, OK, OK),
        protected(
            "POST",
            "/principals",
            Some(json!({"name": "Bad Name", "role": "viewer"})),
            FORBIDDEN,
            refused("invalid_name"),
        ),
        protected("GET", "/principals/nope", None, missing("principal_not_found"), missing("principal_not_found")),
        protected("POST", "/principals/nope/rotate", None, FORBIDDEN, missing("principal_not_found")),
        protected("POST", "/principals/nope/revoke", None, FORBIDDEN, missing("principal_not_found")),
        protected(
            "POST",
            "/principals/nope/grants",
            Some(json!({"role": "viewer"})),
            FORBIDDEN,
            missing("principal_not_found"),
        ),
        protected("DELETE", "/principals/nope/grants?role=viewer", None, FORBIDDEN, missing("grant_not_found")),
        protected("GET", "/roles", None, OK, OK),
        protected(
            "POST",
            "/roles",
            Some(json!({"name": "r", "permissions": ["fly"]})),
            FORBIDDEN,
            refused("invalid_field"),
        ),
        protected("DELETE", "/roles/nope", None, FORBIDDEN, missing("role_not_found")),
        protected("GET", "/policies", None, OK, OK),
        protected("PUT", "/policies/demo", Some(json!({"two_person": 1})), FORBIDDEN, refused("invalid_body")),
        protected("GET", "/audit", None, OK, OK),
        protected("GET", "/audit?limit=0", None, refused("invalid_field"), refused("invalid_field")),
        protected("GET", "/whoami", None, OK, OK),
        protected("GET", "/quotas", None, OK, OK),
        protected(
            "PUT",
            "/quotas",
            Some(json!({"principal": "x", "measure": "fly", "limit": 1})),
            FORBIDDEN,
            refused("invalid_field"),
        ),
        protected("DELETE", "/quotas?principal=x&measure=runs", None, FORBIDDEN, missing("quota_not_found")),
        // Not an endpoint: 404 for everyone, as JSON.
        public("GET", "/nope", NOT_FOUND),
        public("DELETE", "/runs/R1", (405, Some("method_not_allowed"))),
    ];

    // The table covers the router: every route has a row, and every route but the public ones
    // is protected in it.
    for (method, template) in router_routes() {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.method == method && fits(&template, &r.path)).collect();
        assert!(!mine.is_empty(), "{method} {template} is served but has no row in the endpoint table; add one");
        for r in mine {
            let is_public = PUBLIC.contains(&template.as_str());
            assert_eq!(r.expect[0] == UNAUTHORIZED, !is_public, "{method} {}: protected or public?", r.path);
        }
    }

    let before = api.snapshot();
    let r1_events = api.get("/runs/R1/events", Caller::Viewer).body;
    for row in &rows {
        for (who, (status, code)) in CALLERS.iter().zip(row.expect) {
            let what = format!("{} {} as {who:?}", row.method, row.path);
            let r = api.send(row.method, &row.path, *who, row.body.as_ref().map(Body::json), &[]);
            expect(&r, status, code, &what);
            if status < 400 {
                let kind = content_type_of(&row.path);
                assert!(r.header("content-type").starts_with(kind), "{what}: not {kind}: {}", r.header("content-type"));
                if kind.ends_with("json") {
                    assert!(r.body.is_object(), "{what}: a JSON object: {}", r.text);
                }
            }
            if matches!(row.method, "POST" | "DELETE") && *who == Caller::Viewer && status == 403 {
                assert!(message(&r).contains("Operator"), "{what}: the 403 says which token is needed: {}", r.text);
            }
        }
    }
    assert_eq!(api.snapshot(), before, "no request in the matrix may create a run or execute a tool");
    assert_eq!(api.get("/runs/R1/events", Caller::Viewer).body, r1_events, "R1 must be untouched");
    assert_eq!(api.get("/runs/R1", Caller::Viewer).body["status"], "READY");
    assert_eq!(api.get("/kernel/jobs", Caller::Viewer).body["jobs"], json!([]), "no kernel job may be created");

    // Spot checks of what the callers got.
    let health = api.get("/health", Caller::Anonymous);
    assert_eq!(health.body["status"], "ok", "{}", health.text);
    let mine = api.post("/runs", Caller::Operator, &api.submit_body(&["ok"], Some("R1")));
    assert_eq!(mine.body["run_id"], "R1");
    assert_eq!(mine.body["status"], "READY");
    // The two kinds of 401 say different things: what to send, and that the token is wrong.
    let none = api.get("/runs", Caller::Anonymous);
    let wrong = api.get("/runs", Caller::Wrong);
    assert!(message(&none).contains("Authorization"), "{}", none.text);
    assert!(message(&wrong).contains("not valid"), "{}", wrong.text);
    // Other schemes and malformed headers are no token at all.
    for header in ["Basic ".to_string() + &api.operator, api.operator.clone(), "Bearer".into(), "Bearer ".into()] {
        let r = api.send("GET", "/runs", Caller::Anonymous, None, &[("Authorization", &header)]);
        expect(&r, 401, Some("unauthorized"), &format!("GET /runs with `Authorization: {header}`"));
    }
}

// ------------------------------------------------------------------------------------ 2. host

/// Requests addressed to anything but loopback by name are refused (DNS rebinding), even with the
/// operator token and on the public endpoints; `localhost` and `127.0.0.1` pass.
#[test]
fn host_header_must_name_loopback() {
    let api = Api::start();
    let port = api.port.to_string();
    let before = api.snapshot();
    let bad = ["evil.example".to_string(), format!("evil.example:{port}"), "127.0.0.1.evil.example".to_string()];
    for host in &bad {
        for (method, path, body) in [
            ("GET", "/runs", None),
            ("GET", "/health", None),
            ("GET", "/openapi.json", None),
            ("POST", "/runs", Some(api.submit_body(&["ok"], Some("rebound")))),
        ] {
            let what = format!("{method} {path} with Host `{host}`");
            let r = api.send(method, path, Caller::Operator, body.as_ref().map(Body::json), &[("Host", host)]);
            expect(&r, 403, Some("forbidden_host"), &what);
            assert!(message(&r).contains(host.as_str()), "{what}: the message names the host: {}", r.text);
        }
    }
    assert_eq!(api.snapshot(), before, "a refused host must create nothing");

    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let r = api.send("GET", "/runs", Caller::Operator, None, &[("Host", &host)]);
        expect(&r, 200, None, &format!("GET /runs with Host `{host}`"));
        assert!(r.body["runs"].is_array(), "{}", r.text);
        let r = api.send("GET", "/health", Caller::Anonymous, None, &[("Host", &host)]);
        expect(&r, 200, None, &format!("GET /health with Host `{host}`"));
    }
}

// ------------------------------------------------------------------------------------ 3. bad bodies

/// Bad submissions are refused with the right status and a JSON error, and create nothing: no
/// run, no run directory, no tool execution.
#[test]
fn bad_submissions_create_nothing() {
    let api = Api::start();
    api.finished_run("src"); // a READY source for the replay cases
    let before = api.snapshot();
    assert_eq!(before.0, 1);

    let good = api.submit_body(&["ok"], None);
    let with = |key: &str, value: Value| {
        let mut b = good.clone();
        b[key] = value;
        b
    };
    let without = |key: &str| {
        let mut b = good.clone();
        b.as_object_mut().unwrap().remove(key);
        b
    };
    let json_body = |v: &Value| serde_json::to_vec(v).unwrap();
    let mut huge = good.clone();
    huge["input"]["padding"] = json!("x".repeat(2 << 20));
    let replay = |source: &str, steps: &[&str]| json!({"thread_id": "t", "agent_id": "demo", "replay": {"source_run_id": source, "step_ids": steps}});

    // (what, body bytes, content type, status, code, words the message must contain)
    type Case<'a> = (&'a str, Vec<u8>, Option<&'a str>, u16, &'a str, Vec<&'a str>);
    let json_ct = Some("application/json");
    let cases: Vec<Case> = vec![
        ("not JSON", b"{\"thread_id\": ".to_vec(), json_ct, 400, "invalid_json", vec![]),
        ("not JSON at all", b"hello".to_vec(), json_ct, 400, "invalid_json", vec![]),
        ("an empty body", Vec::new(), json_ct, 400, "invalid_json", vec![]),
        ("a JSON array", json_body(&json!([good.clone()])), json_ct, 422, "invalid_body", vec![]),
        (
            "thread_id as a number",
            json_body(&with("thread_id", json!(5))),
            json_ct,
            422,
            "invalid_body",
            vec!["thread_id"],
        ),
        (
            "input as a string (the schema needs an object)",
            json_body(&with("input", json!("hello"))),
            json_ct,
            422,
            "invalid_input",
            vec!["input schema"],
        ),
        ("an unknown field", json_body(&with("colour", json!("red"))), json_ct, 422, "invalid_body", vec!["colour"]),
        (
            "an unknown field in replay",
            json_body(&json!({"thread_id": "t", "agent_id": "demo",
                "replay": {"source_run_id": "src", "step_ids": ["a"], "colour": "red"}})),
            json_ct,
            422,
            "invalid_body",
            vec!["colour"],
        ),
        ("missing thread_id", json_body(&without("thread_id")), json_ct, 422, "invalid_body", vec!["thread_id"]),
        (
            "a blank thread_id",
            json_body(&with("thread_id", json!("  "))),
            json_ct,
            422,
            "invalid_field",
            vec!["thread_id"],
        ),
        ("missing agent_id", json_body(&without("agent_id")), json_ct, 422, "invalid_body", vec!["agent_id"]),
        ("an empty agent_id", json_body(&with("agent_id", json!(""))), json_ct, 422, "invalid_field", vec!["agent_id"]),
        ("missing input", json_body(&without("input")), json_ct, 422, "invalid_input", vec!["input"]),
        (
            "an unknown workflow",
            json_body(&with("agent_id", json!("nope-wf"))),
            json_ct,
            404,
            "workflow_not_found",
            vec!["nope-wf"],
        ),
        (
            "an unknown version",
            json_body(&with("agent_version", json!("9.9.9"))),
            json_ct,
            404,
            "workflow_not_found",
            vec!["9.9.9"],
        ),
        (
            "input failing the schema",
            json_body(&with("input", json!({"plan": "ok", "log": 5, "release": "r"}))),
            json_ct,
            422,
            "invalid_input",
            vec!["input schema", "/log"],
        ),
        ("no content type", json_body(&good), None, 415, "unsupported_media_type", vec!["application/json"]),
        ("a text/plain body", json_body(&good), Some("text/plain"), 415, "unsupported_media_type", vec![]),
        ("parallel 0", json_body(&with("parallel", json!(0))), json_ct, 422, "invalid_field", vec!["parallel"]),
        ("parallel 1000", json_body(&with("parallel", json!(1000))), json_ct, 422, "invalid_field", vec!["parallel"]),
        ("parallel -1", json_body(&with("parallel", json!(-1))), json_ct, 422, "invalid_body", vec!["parallel"]),
        (
            "a replay of an unknown source",
            json_body(&replay("nope-src", &["a"])),
            json_ct,
            404,
            "source_run_not_found",
            vec!["nope-src"],
        ),
        (
            "a replay of an unknown step",
            json_body(&replay("src", &["zz"])),
            json_ct,
            422,
            "replay_unknown_steps",
            vec!["zz", "a, b"],
        ),
        ("a replay of no step", json_body(&replay("src", &[])), json_ct, 422, "replay_no_steps", vec![]),
        (
            "a replay onto its own source",
            json_body(&{
                let mut b = replay("src", &["a"]);
                b["run_id"] = json!("src");
                b
            }),
            json_ct,
            422,
            "replay_of_itself",
            vec!["src"],
        ),
        (
            "a run id with a slash",
            json_body(&with("run_id", json!("a/b"))),
            json_ct,
            422,
            "invalid_run_id",
            vec!["a/b"],
        ),
        ("a run id with a space", json_body(&with("run_id", json!("a b"))), json_ct, 422, "invalid_run_id", vec![]),
        ("a run id `..`", json_body(&with("run_id", json!(".."))), json_ct, 422, "invalid_run_id", vec![]),
        ("an empty run id", json_body(&with("run_id", json!(""))), json_ct, 422, "invalid_run_id", vec![]),
        (
            "a run id of 129 characters",
            json_body(&with("run_id", json!("r".repeat(129)))),
            json_ct,
            422,
            "invalid_run_id",
            vec![],
        ),
    ];
    for (what, bytes, content_type, status, code, words) in cases {
        let r = api.send("POST", "/runs", Caller::Operator, Some(Body { bytes, content_type }), &[]);
        expect(&r, status, Some(code), what);
        for w in words {
            assert!(message(&r).contains(w), "{what}: the message lacks `{w}`: {}", r.text);
        }
        assert_eq!(api.snapshot(), before, "{what}: nothing may be created or executed");
    }

    // A body of 2 MiB: 413 before it is read (sent over a bare socket, see `send_raw`).
    let huge = serde_json::to_vec(&huge).unwrap();
    let head = format!(
        "POST /runs HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        api.port,
        api.operator,
        huge.len()
    );
    let r = send_raw(api.port, &head, &huge);
    expect(&r, 413, Some("body_too_large"), "a body of 2 MiB");
    assert!(message(&r).contains("1048576"), "the message names the limit: {}", r.text);
    assert_eq!(api.snapshot(), before, "a body of 2 MiB: nothing may be created or executed");

    // The good body works, so the refusals above were about what was changed.
    let body =
        Body { bytes: serde_json::to_vec(&good).unwrap(), content_type: Some("application/json; charset=utf-8") };
    let r = api.send("POST", "/runs", Caller::Operator, Some(body), &[]);
    expect(&r, 202, None, "the good body");
    api.wait_status(r.body["run_id"].as_str().unwrap(), "READY");
    assert_eq!(api.c.runs().len(), 2);
}

// ------------------------------------------------------------------------------------ 4. semantics

/// Parses a `text/event-stream` body into `(id, event, data)` triples (comments skipped).
fn sse(text: &str) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let (mut id, mut event, mut data) = (String::new(), String::new(), String::new());
        for line in block.lines().filter(|l| !l.starts_with(':')) {
            let (k, v) = line.split_once(':').unwrap_or((line, ""));
            let v = v.strip_prefix(' ').unwrap_or(v);
            match k {
                "id" => id = v.to_string(),
                "event" => event = v.to_string(),
                "data" => data.push_str(v),
                _ => {}
            }
        }
        if !event.is_empty() || !data.is_empty() {
            out.push((id, event, serde_json::from_str(&data).unwrap_or(Value::String(data))));
        }
    }
    out
}

/// Submit, poll, idempotent resubmission, ExecutionInputMismatch, cancel, the event stream, the
/// step log and the run list's filters.
fn runs_over_http(k: cairn_store::testing::Kind) {
    let Some(api) = Api::on(k) else { return };
    let log = api.c.path("log");

    // A valid POST: 202, a generated run id, a Location; the run reaches READY.
    let r = api.post("/runs", Caller::Operator, &api.submit_body(&["ok"], None));
    expect(&r, 202, None, "POST /runs");
    let id = r.body["run_id"].as_str().unwrap_or_else(|| panic!("no run_id: {}", r.text)).to_string();
    assert_eq!(r.header("location"), format!("/runs/{id}"));
    assert_eq!(r.body["workflow"], "demo");
    assert_eq!(r.body["thread_id"], "thread-1");
    let done = api.wait_status(&id, "READY");
    assert_eq!(done["steps"].as_array().unwrap().len(), 2, "{done:#}");

    // The same run id and input again: 200 with the same result, nothing executed.
    let body = api.submit_body(&["ok"], Some("same"));
    let r = api.post("/runs", Caller::Operator, &body);
    expect(&r, 202, None, "POST /runs run_id=same");
    assert_eq!(r.header("location"), "/runs/same");
    let first = api.wait_status("same", "READY");
    let events = api.get("/runs/same/events", Caller::Viewer).body;
    let lines = log_lines(&log);
    assert_eq!(count(&lines, "a:start:"), 2, "{lines:?}");
    let again = api.post("/runs", Caller::Operator, &body);
    expect(&again, 200, None, "the same POST again");
    assert_eq!(again.body, first, "an idempotent POST returns the stored result");
    let shown = api.get("/runs/same", Caller::Viewer).body;
    assert_eq!(contract(&shown), contract(&first));
    assert_eq!(api.get("/runs/same/events", Caller::Viewer).body, events, "nothing new may happen");
    assert_eq!(log_lines(&log), lines, "no tool may run again");

    // The same run id with another input: 409 execution_input_mismatch, nothing changes.
    let other = api.submit_body(&["ok", "ok"], Some("same"));
    let r = api.post("/runs", Caller::Operator, &other);
    expect(&r, 409, Some("execution_input_mismatch"), "the same run id with another input");
    assert!(message(&r).contains("same"), "the message names the run: {}", r.text);
    assert_eq!(api.get("/runs/same/events", Caller::Viewer).body, events);
    assert_eq!(log_lines(&log), lines);
    assert_eq!(api.c.runs().len(), 2);

    // Cancel a finished run: 409.
    let r = api.send("POST", "/runs/same/cancel", Caller::Operator, None, &[]);
    expect(&r, 409, Some("run_finished"), "cancel of a finished run");
    assert!(message(&r).contains("READY"), "{}", r.text);
    assert_eq!(api.get("/runs/same", Caller::Viewer).body["status"], "READY");

    // A live run, followed from before its step starts until it finishes: the stream ends with
    // run.finished. Submitting it again while it runs is 202 and starts nothing new.
    let live = api.submit_body(&["wait"], Some("live"));
    let r = api.post("/runs", Caller::Operator, &live);
    expect(&r, 202, None, "POST /runs run_id=live");
    let streamed = std::thread::scope(|s| {
        let follower = s.spawn(|| api.get("/runs/live/events?follow=true", Caller::Viewer));
        assert!(
            wait_until(Duration::from_secs(15), || count(&log_lines(&log), "a:start:") == 3),
            "the waiting tool never started: {:?}",
            log_lines(&log)
        );
        let r = api.post("/runs", Caller::Operator, &live);
        expect(&r, 202, None, "POST /runs run_id=live while it runs");
        assert_eq!(r.body["run_id"], "live");
        assert_eq!(r.header("location"), "/runs/live");
        std::thread::sleep(Duration::from_millis(200));
        std::fs::write(api.c.path("release"), "").unwrap();
        follower.join().unwrap()
    });
    api.wait_status("live", "READY");
    assert!(streamed.header("content-type").starts_with("text/event-stream"), "{}", streamed.header("content-type"));
    let live_events = api.get("/runs/live/events", Caller::Viewer).body["events"].as_array().unwrap().clone();
    let got: Vec<(String, String)> = sse(&streamed.text).into_iter().map(|(id, kind, _)| (id, kind)).collect();
    let want: Vec<(String, String)> =
        live_events.iter().map(|e| (e["seq"].to_string(), e["kind"].as_str().unwrap().to_string())).collect();
    assert_eq!(got, want, "the live stream carries every event once, in order, ending with run.finished");
    assert_eq!(got.last().map(|e| e.1.as_str()), Some("run.finished"));
    assert_eq!(count(&log_lines(&log), "a:start:"), 3, "the second POST must not start the run again");
    std::fs::remove_file(api.c.path("release")).unwrap();
    let lines = log_lines(&log);

    // Cancel a running run, followed: 200, CANCELLED, its tool stopped, the stream ends with the
    // one run.finished; a second cancel is 409 and resubmitting returns the cancelled run.
    let slow = api.submit_body(&["wait"], Some("slow"));
    let r = api.post("/runs", Caller::Operator, &slow);
    expect(&r, 202, None, "POST /runs run_id=slow");
    let (r, streamed) = std::thread::scope(|s| {
        let follower = s.spawn(|| api.get("/runs/slow/events?follow=true", Caller::Viewer));
        assert!(
            wait_until(Duration::from_secs(15), || count(&log_lines(&log), "a:start:") == 4),
            "the waiting tool never started: {:?}",
            log_lines(&log)
        );
        (api.send("POST", "/runs/slow/cancel", Caller::Operator, None, &[]), follower.join().unwrap())
    });
    let pid = logged_pid(&log_lines(&log)[lines.len()..], "a", 1).unwrap();
    expect(&r, 200, None, "cancel of a running run");
    assert_eq!(r.body["status"], "CANCELLED", "{}", r.text);
    assert!(wait_until(Duration::from_secs(15), || !alive(pid)), "the cancelled tool (pid {pid}) must be stopped");
    std::fs::write(api.c.path("release"), "").unwrap();
    let streamed = sse(&streamed.text);
    assert_eq!(streamed.last().map(|e| e.1.as_str()), Some("run.finished"), "{streamed:?}");
    assert_eq!(streamed.last().unwrap().2["data"]["status"], "CANCELLED");
    assert!(
        wait_until(Duration::from_secs(15), || api.get("/health", Caller::Anonymous).body["active_runs"] == 0),
        "the cancelled run must leave the worker pool"
    );
    let slow_events = api.get("/runs/slow/events", Caller::Viewer).body["events"].as_array().unwrap().clone();
    let kinds_of_slow = kinds(&slow_events);
    assert_eq!(events_of(&slow_events, "run.finished", None).len(), 1, "{kinds_of_slow:?}");
    assert_eq!(kinds_of_slow.last().map(String::as_str), Some("run.finished"), "{kinds_of_slow:?}");
    let r = api.send("POST", "/runs/slow/cancel", Caller::Operator, None, &[]);
    expect(&r, 409, Some("run_finished"), "a second cancel");
    assert!(message(&r).contains("CANCELLED"), "{}", r.text);
    let r = api.post("/runs", Caller::Operator, &slow);
    expect(&r, 200, None, "resubmitting a cancelled run");
    assert_eq!(r.body["status"], "CANCELLED");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(count(&log_lines(&log), "a:start:"), 4, "a cancelled run is not executed again");
    assert_eq!(api.get("/runs/slow/events", Caller::Viewer).body["events"], json!(slow_events));

    // Events: JSON, `after`, and an SSE stream that ends with run.finished for a finished run.
    let all = events["events"].as_array().unwrap().clone();
    assert_eq!(events["run_id"], "same");
    assert_eq!(all.last().unwrap()["kind"], "run.finished", "{events:#}");
    let seqs: Vec<i64> = all.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    let after = api.get(&format!("/runs/same/events?after={}", seqs[1]), Caller::Viewer);
    expect(&after, 200, None, "events?after");
    assert_eq!(after.body["events"].as_array().unwrap()[..], all[2..]);
    let stream = api.get("/runs/same/events?follow=true", Caller::Viewer);
    expect(&stream, 200, None, "events?follow=true");
    assert!(
        stream.header("content-type").starts_with("text/event-stream"),
        "content type `{}`",
        stream.header("content-type")
    );
    let streamed = sse(&stream.text);
    assert_eq!(streamed.len(), all.len(), "every event, once: {}", stream.text);
    for ((sid, kind, data), e) in streamed.iter().zip(&all) {
        assert_eq!(sid, &e["seq"].to_string());
        assert_eq!(kind, e["kind"].as_str().unwrap());
        assert_eq!(data, e, "the data of an SSE event is the event itself");
    }
    assert_eq!(streamed.last().unwrap().1, "run.finished");
    let tail = api.get(&format!("/runs/same/events?follow=true&after={}", seqs[seqs.len() - 2]), Caller::Viewer);
    let tail = sse(&tail.text);
    assert_eq!(tail.len(), 1, "{tail:?}");
    assert_eq!(tail[0].1, "run.finished");
    let r = api.get("/runs/same/events?after=x", Caller::Viewer);
    expect(&r, 400, Some("invalid_query"), "events?after=x");

    // The step log: the stderr tail, `lines` to shorten it; an unknown step names the known ones.
    let noise: Vec<String> = (1..=5).map(|i| format!("noise line {i}")).collect();
    let r = api.get("/runs/same/steps/b/log", Caller::Viewer);
    expect(&r, 200, None, "the log of b");
    assert_eq!(r.body["lines"], json!(noise), "{}", r.text);
    assert_eq!(r.body["truncated"], false);
    assert_eq!(r.body["status"], "COMPLETED");
    assert_eq!((r.body["run_id"].as_str(), r.body["step_id"].as_str()), (Some("same"), Some("b")));
    let r = api.get("/runs/same/steps/b/log?lines=2", Caller::Viewer);
    assert_eq!(r.body["lines"], json!(noise[3..]), "{}", r.text);
    assert_eq!(r.body["truncated"], true);
    let r = api.get("/runs/same/steps/a/log", Caller::Viewer);
    assert_eq!(r.body["lines"], json!([]), "a writes nothing to stderr: {}", r.text);
    for q in ["0", "10001"] {
        let r = api.get(&format!("/runs/same/steps/b/log?lines={q}"), Caller::Viewer);
        expect(&r, 422, Some("invalid_field"), &format!("lines={q}"));
    }
    let r = api.get("/runs/same/steps/zz/log", Caller::Viewer);
    expect(&r, 404, Some("step_not_found"), "the log of an unknown step");
    assert!(message(&r).contains("zz") && message(&r).contains("a, b"), "{}", r.text);

    // The run list: newest first, filtered by status, bounded by limit.
    let list = |q: &str| {
        let r = api.get(&format!("/runs{q}"), Caller::Viewer);
        expect(&r, 200, None, &format!("GET /runs{q}"));
        r.body["runs"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap().to_string()).collect::<Vec<_>>()
    };
    assert_eq!(list(""), ["slow", "live", "same", id.as_str()]);
    assert_eq!(list("?status=READY"), ["live", "same", id.as_str()]);
    assert_eq!(list("?status=CANCELLED"), ["slow"]);
    assert_eq!(list("?status=FAILED"), Vec::<String>::new());
    assert_eq!(list("?limit=1"), ["slow"]);
    assert_eq!(list("?status=READY&limit=1"), ["live"]);
    assert_eq!(list("?status=READY&limit=2"), ["live", "same"]);
    for q in ["?limit=0", "?limit=1001", "?status=bogus"] {
        let r = api.get(&format!("/runs{q}"), Caller::Viewer);
        expect(&r, 422, Some("invalid_field"), &format!("GET /runs{q}"));
    }
    let r = api.get("/runs?limit=-1", Caller::Viewer);
    expect(&r, 400, Some("invalid_query"), "GET /runs?limit=-1");

    // Workflows: the list, one version, an unknown version.
    let r = api.get("/workflows", Caller::Viewer);
    assert_eq!(r.body["workflows"][0]["name"], "demo", "{}", r.text);
    let r = api.get("/workflows/demo?version=1.0.0", Caller::Viewer);
    expect(&r, 200, None, "GET /workflows/demo?version=1.0.0");
    let r = api.get("/workflows/demo?version=9.9.9", Caller::Viewer);
    expect(&r, 404, Some("workflow_not_found"), "an unknown version");
    let r = api.get("/workflows/demo@1.0.0", Caller::Viewer);
    expect(&r, 422, Some("invalid_field"), "a name with @");
}

// ------------------------------------------------------------------------------------ 5. openapi

/// `/openapi.json` is an OpenAPI 3.1 document with a bearer scheme, and describes every route the
/// router serves, with the bearer requirement on exactly the protected ones.
#[test]
fn openapi_document_describes_every_route() {
    let api = Api::start();
    let r = api.get("/openapi.json", Caller::Anonymous);
    expect(&r, 200, None, "GET /openapi.json");
    assert!(r.header("content-type").starts_with("application/json"), "{}", r.header("content-type"));
    let doc = &r.body;
    assert!(doc.is_object(), "not JSON: {}", r.text);
    let version = doc["openapi"].as_str().unwrap_or("");
    assert!(version.starts_with("3.1"), "openapi is `{version}`");
    let bearer = &doc["components"]["securitySchemes"]["bearer"];
    assert_eq!(bearer["type"], "http", "{bearer}");
    assert_eq!(bearer["scheme"].as_str().map(str::to_ascii_lowercase).as_deref(), Some("bearer"), "{bearer}");
    assert!(!doc["info"]["version"].as_str().unwrap_or("").is_empty());

    let paths = doc["paths"].as_object().expect("paths");
    let routes = router_routes();
    for (method, path) in &routes {
        let op = &paths.get(path).unwrap_or_else(|| panic!("{path} is served but not in /openapi.json"))
            [method.to_ascii_lowercase()];
        assert!(op.is_object(), "{method} {path} is served but not in /openapi.json: {:#}", paths[path]);
        let secured = op["security"].as_array().is_some_and(|s| s.iter().any(|r| r.get("bearer").is_some()));
        assert_eq!(secured, !PUBLIC.contains(&path.as_str()), "{method} {path}: security {}", op["security"]);
    }
    // And nothing described that is not served.
    for (path, ops) in paths {
        for method in ops.as_object().unwrap().keys().filter(|k| !k.starts_with("parameters")) {
            let m = method.to_ascii_uppercase();
            assert!(routes.iter().any(|(rm, rp)| rm == &m && rp == path), "{m} {path} is described but not served");
        }
    }
    // The error shape is in the document.
    assert!(doc["components"]["schemas"]["ErrorBody"].is_object());
}

/// `follow=true&after=N` resumes a stream (a client that reconnects): it must send only events
/// after N, whether the run is still going or finished, and for a finished run it must end.
#[test]
fn follow_resumes_after_the_given_event() {
    let api = Api::start();
    let log = api.c.path("log");
    let mut problems = Vec::new();

    // A live run, resumed after its latest event while its step waits.
    let r = api.post("/runs", Caller::Operator, &api.submit_body(&["wait"], Some("live")));
    expect(&r, 202, None, "POST /runs run_id=live");
    assert!(
        wait_until(Duration::from_secs(15), || count(&log_lines(&log), "a:start:") == 1),
        "the waiting tool never started"
    );
    let seen = api.get("/runs/live/events", Caller::Viewer).body["events"].as_array().unwrap().clone();
    let last = seen.last().unwrap()["seq"].as_i64().unwrap();
    let path = format!("/runs/live/events?follow=true&after={last}");
    let streamed = std::thread::scope(|s| {
        let follower = s.spawn(|| api.get(&path, Caller::Viewer));
        std::thread::sleep(Duration::from_millis(500));
        std::fs::write(api.c.path("release"), "").unwrap();
        follower.join().unwrap()
    });
    api.wait_status("live", "READY");
    let all = api.get("/runs/live/events", Caller::Viewer).body["events"].as_array().unwrap().clone();
    let want: Vec<String> =
        all.iter().filter(|e| e["seq"].as_i64().unwrap() > last).map(|e| e["seq"].to_string()).collect();
    let got: Vec<String> = sse(&streamed.text).into_iter().map(|e| e.0).collect();
    if got != want {
        problems
            .push(format!("GET {path} on a live run sent events {got:?}; expected only those after {last}: {want:?}"));
    }

    // The finished run, resumed after its last event: nothing is sent, and the stream ends.
    let last = all.last().unwrap()["seq"].as_i64().unwrap();
    let path = format!("/runs/live/events?follow=true&after={last}");
    let limit = Duration::from_secs(10);
    let t0 = Instant::now();
    let r = api.send_within(limit, "GET", &path, Caller::Viewer, None, &[]);
    let got: Vec<String> = sse(&r.text).into_iter().map(|e| e.0).collect();
    if !got.is_empty() {
        problems.push(format!("GET {path} on a finished run sent events {got:?}; expected none after {last}"));
    }
    if t0.elapsed() >= limit {
        problems.push(format!("GET {path}: the stream of a finished run did not end within {limit:?}"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Identical submissions racing each other create one run and execute it once.
#[test]
fn racing_identical_submissions_run_once() {
    let api = Api::start();
    let body = api.submit_body(&["sleep:0.3"], Some("race"));
    let barrier = std::sync::Barrier::new(8);
    let answers: Vec<Http> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    api.post("/runs", Caller::Operator, &body)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in &answers {
        assert!(matches!(r.status, 200 | 202), "{} {}", r.status, r.text);
        assert_eq!(r.body["run_id"], "race", "{}", r.text);
    }
    api.wait_status("race", "READY");
    assert!(
        wait_until(Duration::from_secs(15), || api.get("/health", Caller::Anonymous).body["active_runs"] == 0),
        "the run must leave the worker pool"
    );
    let lines = log_lines(&api.c.path("log"));
    assert_eq!(count(&lines, "a:start:"), 1, "step a must run once: {lines:?}");
    let events = api.get("/runs/race/events", Caller::Viewer).body["events"].as_array().unwrap().clone();
    assert_eq!(events_of(&events, "run.created", None).len(), 1, "{:?}", kinds(&events));
    assert_eq!(events_of(&events, "step.started", None).len(), 2, "{:?}", kinds(&events));
    assert_eq!(events_of(&events, "run.finished", None).len(), 1, "{:?}", kinds(&events));
    assert_eq!(api.c.runs().len(), 1);
}

/// The authentication scheme is case-insensitive (RFC 9110 §11.1, formerly RFC 7235 §2.1):
/// `bearer TOKEN` is the operator's token like `Bearer TOKEN`.
#[test]
fn bearer_scheme_is_case_insensitive() {
    let api = Api::start();
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let header = format!("{scheme} {}", api.operator);
        let r = api.send("GET", "/runs", Caller::Anonymous, None, &[("Authorization", &header)]);
        expect(&r, 200, None, &format!("GET /runs with `Authorization: {scheme} <operator>`"));
    }
}

// ------------------------------------------------------------------------------------ 6. web app

/// The web app's login: `cairn ui` prints a link whose code the daemon exchanges, once, for the
/// Viewer token (never the Operator's); a used, altered or foreign code is refused. The page and
/// its files carry a policy that loads nothing from anywhere but the daemon.
#[test]
fn web_login_gives_the_viewer_token_once() {
    let api = Api::start();
    let ui = api.c.json(&["ui", "--no-open"]).expect(0).json;
    assert_eq!(ui["url"], format!("{}/", api.url), "{ui:#}");
    assert_eq!(ui["opened"], false, "--no-open opens nothing: {ui:#}");
    let link = ui["login_url"].as_str().unwrap();
    let code = link.split_once("#login=").map(|(_, c)| c).unwrap_or_else(|| panic!("no #login= in {link}"));
    assert!(link.starts_with(&api.url), "{link}");

    let path = format!("/ui/login?code={code}");
    let first = api.get(&path, Caller::Anonymous);
    expect(&first, 200, None, "GET /ui/login with a fresh code");
    assert_eq!(first.body["role"], "viewer");
    assert_eq!(first.body["token"].as_str(), Some(api.viewer.as_str()), "the login gives the Viewer token");
    assert_ne!(first.body["token"].as_str(), Some(api.operator.as_str()));
    assert_eq!(first.header("cache-control"), "no-store");
    let again = api.get(&path, Caller::Anonymous);
    expect(&again, 401, Some("invalid_login"), "the same code again");
    assert!(message(&again).contains("used already"), "{}", again.text);

    // Altered codes: the MAC of another code, a later expiry, and garbage.
    let other = api.c.json(&["ui", "--no-open"]).expect(0).json;
    let other = other["login_url"].as_str().unwrap().split_once("#login=").unwrap().1.to_string();
    let (expiry, rest) = other.split_once('.').unwrap();
    let later: i64 = expiry.parse::<i64>().unwrap() + 60_000;
    for (bad, says) in [
        (format!("{later}.{rest}"), "not made by"),
        (format!("{}.{}", &code[..code.rfind('.').unwrap()], other.rsplit('.').next().unwrap()), "not made by"),
        ("not-a-code".to_string(), "malformed"),
    ] {
        let r = api.get(&format!("/ui/login?code={bad}"), Caller::Anonymous);
        expect(&r, 401, Some("invalid_login"), &format!("GET /ui/login?code={bad}"));
        assert!(message(&r).contains(says), "{bad}: {}", r.text);
    }
    // The untouched second code still works: a refused code uses up nothing.
    expect(&api.get(&format!("/ui/login?code={other}"), Caller::Anonymous), 200, None, "the second code");

    // The page and its files: no token needed, a strict policy, nothing cached stale.
    for (path, kind) in
        [("/", "text/html"), ("/assets/app.js", "text/javascript"), ("/assets/dag.js", "text/javascript")]
    {
        let r = api.get(path, Caller::Anonymous);
        expect(&r, 200, None, path);
        assert!(r.header("content-type").starts_with(kind), "{path}: {}", r.header("content-type"));
        let csp = r.header("content-security-policy");
        for part in ["default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"] {
            assert!(csp.contains(part), "{path}: the policy lacks {part}: {csp}");
        }
        assert_eq!(r.header("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(r.header("cache-control"), "no-cache", "{path}");
    }
    let page = api.get("/", Caller::Anonymous).text;
    assert!(!page.contains("http://") && !page.contains("https://"), "the page names no other origin: {page}");
    for path in ["/assets/..%2Fsrc%2Fmain.rs", "/assets/.hidden", "/assets/index.html"] {
        expect(&api.get(path, Caller::Anonymous), 404, Some("not_found"), path);
    }
}

/// `GET /runs?follow=true` streams the list while a run is active (the run appears RUNNING, then
/// READY) and ends once nothing is active; `workflow=` filters by name.
fn the_run_list_streams_while_runs_are_active(k: cairn_store::testing::Kind) {
    let Some(api) = Api::on(k) else { return };
    let log = api.c.path("log");
    api.finished_run("done");
    let r = api.post("/runs", Caller::Operator, &api.submit_body(&["wait"], Some("live")));
    expect(&r, 202, None, "POST /runs run_id=live");
    assert!(
        wait_until(Duration::from_secs(15), || count(&log_lines(&log), "a:start:") == 1),
        "the waiting tool never started"
    );
    let streamed = std::thread::scope(|s| {
        let follower =
            s.spawn(|| api.send_within(Duration::from_secs(30), "GET", "/runs?follow=true", Caller::Viewer, None, &[]));
        std::thread::sleep(Duration::from_millis(500));
        std::fs::write(api.c.path("release"), "").unwrap();
        follower.join().unwrap()
    });
    expect(&streamed, 200, None, "GET /runs?follow=true");
    assert!(streamed.header("content-type").starts_with("text/event-stream"), "{}", streamed.header("content-type"));
    let lists = sse(&streamed.text);
    let status_of = |list: &Value, id: &str| -> String {
        list["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["run_id"] == id)
            .map(|r| r["status"].to_string())
            .unwrap_or_default()
    };
    assert!(lists.len() >= 2, "a list when following began and one when the run finished: {}", streamed.text);
    assert!(lists.iter().all(|(_, event, _)| event == "runs"), "{}", streamed.text);
    assert_eq!(status_of(&lists[0].2, "live"), "\"RUNNING\"", "{}", streamed.text);
    assert_eq!(
        status_of(&lists.last().unwrap().2, "live"),
        "\"READY\"",
        "the stream ends with the run READY: {}",
        streamed.text
    );
    assert_eq!(lists.last().unwrap().2["runs"][0]["target"], "local");
    for w in lists.windows(2) {
        assert_ne!(w[0].2, w[1].2, "a list is sent only when it changed");
    }
    // A run's replays, by their source.
    let body = json!({"thread_id": "t", "agent_id": "demo", "run_id": "child",
        "replay": {"source_run_id": "done", "step_ids": ["b"]}});
    expect(&api.post("/runs", Caller::Operator, &body), 202, None, "POST /runs (a replay of `done`)");
    api.wait_status("child", "READY");
    let replays = api.get("/runs?source_run_id=done", Caller::Viewer).body;
    let ids: Vec<&str> = replays["runs"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["child"], "{replays:#}");
    assert_eq!(replays["runs"][0]["source_run_id"], "done");
    assert_eq!(api.get("/runs?source_run_id=live", Caller::Viewer).body["runs"], json!([]));
    assert_eq!(api.get("/runs?source_run_id=done&status=FAILED", Caller::Viewer).body["runs"], json!([]));
    let other = api.get("/runs?workflow=nope", Caller::Viewer);
    assert_eq!(other.body["runs"], json!([]), "{}", other.text);
    assert_eq!(api.get("/runs?workflow=demo&limit=1", Caller::Viewer).body["runs"].as_array().unwrap().len(), 1);
}

/// `GET /runs/{id}/ro-crate` answers the run's zipped Provenance Run Crate, to a Viewer too (it
/// changes no record); `GET /runs/{id}/export` writes it under the state root and says where;
/// an unknown run is a 404 that writes nothing, a bad query a 400, no token a 401.
fn a_run_exports_as_a_zipped_ro_crate_to_a_viewer(k: cairn_store::testing::Kind) {
    let Some(api) = Api::on(k) else { return };
    let before = api.finished_run("X1");
    let r = api.get("/runs/X1/ro-crate", Caller::Viewer);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("content-type"), "application/zip");
    assert!(r.header("content-disposition").contains("run-X1.ro-crate.zip"), "{:?}", r.headers);
    assert_eq!(r.header("content-length"), r.bytes.len().to_string());
    let zip = api.c.path("X1.zip");
    std::fs::write(&zip, &r.bytes).unwrap();
    let dir = api.c.path("X1.unzipped");
    crate::rocrate::unzip(&zip, &dir);
    crate::rocrate::assert_valid(&api.c, &dir);
    let meta = crate::rocrate::metadata(&dir);
    assert_eq!(crate::rocrate::entity(&meta, "#run-X1")["identifier"], "X1");

    let e = api.get("/runs/X1/export?data=false", Caller::Viewer);
    assert_eq!(e.status, 200, "{}", e.text);
    let kept = api.c.home().join("exports/run-X1.ro-crate.zip");
    assert_eq!(e.body["path"], kept.display().to_string(), "{}", e.text);
    assert_eq!((e.body["run_id"].as_str(), e.body["artifacts"].as_u64()), (Some("X1"), Some(0)), "{}", e.text);
    assert_eq!(e.body["bytes"], std::fs::metadata(&kept).unwrap().len(), "{}", e.text);
    let after = api.get("/runs/X1", Caller::Viewer).body;
    assert_eq!(after["revision"], before["revision"], "an export changes no record");

    let unknown = api.get("/runs/nope/ro-crate", Caller::Viewer);
    expect(&unknown, 404, Some("run_not_found"), "unknown run");
    assert!(!api.c.home().join("exports/run-nope.ro-crate.zip").exists());
    expect(&api.get("/runs/X1/export?data=maybe", Caller::Viewer), 400, None, "bad query");
    expect(&api.get("/runs/X1/ro-crate", Caller::Anonymous), 401, None, "no token");
}

// The API is the same over either registry: every endpoint (the auth matrix), a run's whole life,
// the live run list and an export, on the SQLite file and on PostgreSQL.
cairn_store::on_both!(
    auth_matrix_covers_every_endpoint_and_caller,
    runs_over_http,
    the_run_list_streams_while_runs_are_active,
    a_run_exports_as_a_zipped_ro_crate_to_a_viewer,
);
