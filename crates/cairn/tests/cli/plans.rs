//! Plan → approve → execute on the local target, through the CLI contract: `cairn plan` is
//! read-only and stores an immutable, checksummed plan; `cairn execute-plan NAME --id --checksum`
//! is the only approval and executes exactly that plan, once; every refusal creates nothing (no
//! run row, no run_dir, no tool execution, no process); effects stay inside run_dir.
//!
//! Also: ten concurrent approvals of one plan (one run), effect paths edited to leave run_dir,
//! symlinks planted after planning, a registry snapshot or a deployed tool changed after the
//! approval, and one run_dir shared by two plans or spelled two ways.
//!
//! The workflow `pw` runs one small tool, [`WHERE_PY`], twice (steps `a` then `b`); each execution
//! appends one JSON line to the log named by the run input — its step, the tool file it ran from,
//! its argv and its working directory — so the log tells how often and from where tools ran.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use cairn_core::canonical::{hash_json, sha256_hex};
use serde_json::{Value, json};

use crate::support::*;

/// The tool: logs (and returns) where it runs from.
const WHERE_PY: &str = r#"import json, os, sys
raw = sys.stdin.read()
args = json.loads(raw) if raw.strip() else {}
rec = {"step": os.environ.get("CAIRN_STEP_ID", "?"), "file": os.path.abspath(__file__),
       "argv": sys.argv, "cwd": os.getcwd(), "pid": os.getpid()}
log = args.get("log")
if log:
    with open(log, "a") as f:
        f.write(json.dumps(rec) + "\n")
        f.flush()
        os.fsync(f.fileno())
sys.stdout.write(json.dumps(rec))
"#;

const WORKFLOW: &str = r#"
[workflow]
name = "pw"
version = "1.0.0"
input_schema = "input.schema.json"

[tools.where]
command = ["python3", "tools/where.py"]

[[steps]]
id = "a"
tool = "where"
args = { log = "${input.log}" }

[[steps]]
id = "b"
tool = "where"
needs = ["a"]
args = { log = "${input.log}", after = "${steps.a.result.step}" }

[[validator.rules]]
id = "b-ran-after-a"
step = "b"
pointer = "/step"
op = "eq"
value = "b"
finding = "b did not run"
"#;

const SCHEMA: &str = r#"{"type": "object", "required": ["log"], "properties": {"log": {"type": "string"}}}"#;

/// One test's state root and scratch directory, with `pw@1.0.0` registered. Dropping it stops a
/// daemon the test left running and kills tools that logged a start (a passing test leaves
/// nothing for it to do).
struct Fx {
    c: Cairn,
    /// The scratch directory, canonical (a run_dir's parent must not go through a symlink).
    base: PathBuf,
}

impl Drop for Fx {
    fn drop(&mut self) {
        if self.c.home().join("daemon.json").exists() {
            let _ = self.c.cmd(&["daemon", "stop"]);
        }
        for rec in self.tool_runs() {
            if let Some(pid) = rec["pid"].as_i64()
                && alive(pid as i32)
            {
                kill_group(pid as i32);
            }
        }
        // The chain workflow's tools log `<step>:start:<attempt>:<pid>`.
        for line in log_lines(&self.p(CHAIN_LOG)) {
            if let Some(pid) = line.split(':').nth(3).and_then(|p| p.parse::<i32>().ok())
                && alive(pid)
            {
                kill_group(pid);
            }
        }
    }
}

/// The log of the chain workflow's tools (see [`chain_workflow`]).
const CHAIN_LOG: &str = "chain-log";

impl Fx {
    fn new() -> Fx {
        let c = Cairn::new();
        let dir =
            write_workflow(&c.path("pw"), WORKFLOW, &[("tools/where.py", WHERE_PY), ("input.schema.json", SCHEMA)]);
        c.add(&dir);
        let base = c.work.path().canonicalize().unwrap();
        Fx { c, base }
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.base.join(rel)
    }

    fn log(&self) -> PathBuf {
        self.p("log")
    }

    /// What the tools logged, one object per execution.
    fn tool_runs(&self) -> Vec<Value> {
        log_lines(&self.log()).iter().map(|l| serde_json::from_str(l).unwrap_or_else(|_| json!(l))).collect()
    }

    /// `cairn plan pw --input <input> --target local --run-dir RUN_DIR --name NAME --json`.
    fn plan(&self, name: &str, run_dir: &Path, input: &Value) -> Out {
        self.plan_of("pw", name, run_dir, input)
    }

    /// `cairn plan WORKFLOW --input <input> --target local --run-dir RUN_DIR --name NAME --json`.
    fn plan_of(&self, workflow: &str, name: &str, run_dir: &Path, input: &Value) -> Out {
        self.c.plan(workflow, &self.c.input(input), "local", run_dir, name)
    }

    #[track_caller]
    fn planned(&self, name: &str, run_dir: &Path, input: &Value) -> Value {
        self.plan(name, run_dir, input).expect(0).json
    }

    fn execute(&self, name: &str, id: &str, checksum: &str) -> Out {
        self.c.json(&["execute-plan", name, "--id", id, "--checksum", checksum])
    }

    /// Executes `plan` exactly as it was shown.
    fn execute_shown(&self, plan: &Value) -> Out {
        self.execute(str_of(&plan["plan_name"]), str_of(&plan["plan_id"]), str_of(&plan["plan_checksum"]))
    }

    fn plan_file(&self, name: &str) -> PathBuf {
        self.c.home().join("plans").join(format!("{name}.json"))
    }

    /// `cairn plans --json` → the plans.
    #[track_caller]
    fn plans(&self) -> Vec<Value> {
        self.c.json(&["plans"]).expect(0).json["plans"].as_array().unwrap().clone()
    }

    /// The `cairn plans` entry of plan `name`.
    #[track_caller]
    fn listed(&self, name: &str) -> Value {
        let plans = self.plans();
        plans.iter().find(|p| p["plan_name"] == name).unwrap_or_else(|| panic!("no plan {name} in {plans:#?}")).clone()
    }

    /// Children of the running daemon (none when no daemon runs): a refused approval starts none.
    fn daemon_children(&self) -> Vec<i32> {
        let Ok(text) = std::fs::read_to_string(self.c.home().join("daemon.json")) else { return Vec::new() };
        let pid = serde_json::from_str::<Value>(&text).unwrap()["pid"].as_i64().unwrap();
        let mut kids = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
            let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            kids.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()).filter(|p| alive(*p)));
        }
        kids
    }

    /// A refusal changed nothing: still `runs` runs, no tool ran, the daemon has no child, and
    /// `run_dir` is as it was (absent, or the empty directory someone else made).
    #[track_caller]
    fn assert_nothing_created(&self, what: &str, runs: usize, run_dir: &Path) {
        let all = self.c.runs();
        assert_eq!(all.len(), runs, "{what}: a refused request created a run: {all:#?}");
        assert!(
            all.iter().all(|r| r["run_dir"] != run_dir.to_str().unwrap()),
            "{what}: a run holds the refused run_dir: {all:#?}"
        );
        assert!(self.tool_runs().is_empty(), "{what}: a tool ran: {:?}", self.tool_runs());
        assert_eq!(self.daemon_children(), Vec::<i32>::new(), "{what}: the daemon started a process");
        match std::fs::symlink_metadata(run_dir) {
            Err(_) => {}
            Ok(m) if m.is_dir() => assert_eq!(
                std::fs::read_dir(run_dir).unwrap().count(),
                0,
                "{what}: something was written into {}",
                run_dir.display()
            ),
            Ok(m) => panic!("{what}: {} is a {:?} now", run_dir.display(), m.file_type()),
        }
    }

    /// Stops the daemon and checks its process is gone.
    #[track_caller]
    fn stop(&self) {
        self.c.stop_daemon_within(Duration::from_secs(5));
    }
}

/// The name, id and checksum a plan was shown with: what `execute-plan` takes.
fn shown_of(p: &Value) -> [String; 3] {
    [str_of(&p["plan_name"]).into(), str_of(&p["plan_id"]).into(), str_of(&p["plan_checksum"]).into()]
}

/// The same hex string with its last digit changed.
fn flipped(sum: &str) -> String {
    let last = if sum.ends_with('0') { '1' } else { '0' };
    format!("{}{last}", &sum[..sum.len() - 1])
}

/// Every path under `dir` (not following symlinks), with its kind and, for files, its content
/// hash: two equal listings mean nothing was created, removed or rewritten there.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let path = e.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                out.push(format!("{}/", path.display()));
                walk(&path, out);
            } else if meta.is_file() {
                out.push(format!("{} {}", path.display(), sha256_hex(&std::fs::read(&path).unwrap())));
            } else {
                out.push(format!("{} -> {:?}", path.display(), std::fs::read_link(&path).ok()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

/// Reads a stored plan file, lets `edit` change it, writes it back.
fn edit_plan_file(path: &Path, edit: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

/// The checksum a plan document claims for itself, recomputed by the design's rule:
/// `sha256(JCS(plan without its checksum))`.
fn checksum_of(plan: &Value) -> String {
    let mut body = plan.clone();
    body.as_object_mut().unwrap().remove("plan_checksum");
    hash_json(&body).unwrap()
}

/// The effect of `kind` in a plan.
#[track_caller]
fn effect<'a>(plan: &'a Value, kind: &str) -> &'a Value {
    plan["effects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == kind)
        .unwrap_or_else(|| panic!("no `{kind}` effect in {:#}", plan["effects"]))
}

/// The happy path: planning creates nothing, the plan carries the contract's fields and binds its
/// input files, `plan show` agrees, and `execute-plan` with the shown id and checksum runs the
/// tools from the workflow deployed into run_dir.
#[test]
fn a_plan_is_read_only_and_executes_exactly_as_shown() {
    let fx = Fx::new();
    let data = fx.p("data.csv");
    std::fs::write(&data, "a,b\n1,2\n").unwrap();
    std::fs::create_dir(fx.p("deep")).unwrap();
    let other = fx.p("deep/other.txt");
    std::fs::write(&other, "other bytes").unwrap();
    std::fs::create_dir(fx.p("runs")).unwrap();
    let run_dir = fx.p("runs/first");
    let input = json!({
        // Absent when planning (the tools create it): not an input file.
        "log": fx.log(),
        "data": data,
        "again": data,
        "nested": {"list": ["/definitely/not/here.txt", other, fx.p("deep"), "relative/data.csv", 7, "/", null]},
    });

    let plan = fx.planned("first", &run_dir, &input);

    // Read-only.
    assert!(std::fs::symlink_metadata(&run_dir).is_err(), "planning created {}", run_dir.display());
    assert!(fx.c.runs().is_empty(), "planning created a run");
    assert!(fx.tool_runs().is_empty(), "planning ran a tool");
    assert!(fx.plan_file("first").is_file(), "the plan is stored as <state>/plans/first.json");

    // The contract's fields.
    for field in ["plan_name", "plan_id", "plan_checksum", "target", "run_dir", "commands", "inputs", "effects"] {
        assert!(plan.get(field).is_some(), "the plan lacks `{field}`: {plan:#}");
    }
    assert_eq!(plan["plan_name"], "first");
    assert_eq!(plan["target"], "local");
    assert_eq!(plan["run_dir"], run_dir.to_str().unwrap());
    let checksum = str_of(&plan["plan_checksum"]);
    assert!(checksum.len() == 64 && checksum.bytes().all(|b| b.is_ascii_hexdigit()), "{checksum}");
    assert_eq!(checksum_of(&plan), checksum, "plan_checksum is sha256(JCS(plan without its checksum))");

    // Every string naming an existing absolute file, once, with its SHA-256; nothing else.
    let mut inputs: Vec<(String, String)> = plan["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (str_of(&f["path"]).to_string(), str_of(&f["sha256"]).to_string()))
        .collect();
    inputs.sort();
    let mut expected = vec![
        (data.display().to_string(), sha256_hex(b"a,b\n1,2\n")),
        (other.display().to_string(), sha256_hex(b"other bytes")),
    ];
    expected.sort();
    assert_eq!(inputs, expected, "{:#}", plan["inputs"]);

    // The exact commands: the tool deployed into run_dir, each step in its own directory there.
    let deployed_tool = run_dir.join("workflow/tools/where.py").display().to_string();
    let commands = plan["commands"].as_array().unwrap();
    assert_eq!(commands.iter().map(|c| str_of(&c["step_id"])).collect::<Vec<_>>(), ["a", "b"], "{commands:#?}");
    for c in commands {
        assert_eq!(c["argv"], json!(["python3", deployed_tool]), "{c:#}");
        assert_eq!(c["cwd"], run_dir.join("steps").join(str_of(&c["step_id"])).to_str().unwrap(), "{c:#}");
    }

    // The effects: create run_dir, write input.json, deploy the snapshot to workflow/.
    assert_eq!(
        plan["effects"].as_array().unwrap().iter().map(|e| str_of(&e["kind"])).collect::<Vec<_>>(),
        ["create_run_dir", "write_file", "deploy_workflow"],
        "{:#}",
        plan["effects"]
    );
    let write = effect(&plan, "write_file");
    assert_eq!(write["path"], "input.json");
    let deploy = effect(&plan, "deploy_workflow");
    assert_eq!(deploy["path"], "workflow");
    let snapshot = fx.c.snapshot("pw@1.0.0");
    let files: Vec<&str> = deploy["files"].as_array().unwrap().iter().map(|f| str_of(&f["path"])).collect();
    for f in ["workflow.toml", "tools/where.py", "input.schema.json"] {
        assert!(files.contains(&f), "the deploy effect lacks {f}: {files:?}");
    }
    for f in deploy["files"].as_array().unwrap() {
        assert_eq!(f["sha256"], sha256_hex(&std::fs::read(snapshot.join(str_of(&f["path"]))).unwrap()), "{f}");
    }

    // `plan show` and `plans` agree with what `plan` printed.
    let shown = fx.c.json(&["plan", "show", "first"]).expect(0).json;
    assert_eq!(shown, plan, "`plan show` differs from `plan`");
    let listed = fx.listed("first");
    assert_eq!((&listed["plan_id"], &listed["plan_checksum"]), (&plan["plan_id"], &plan["plan_checksum"]));
    assert_eq!(listed["run_id"], Value::Null, "not executed yet: {listed}");

    // Executing exactly the shown plan.
    let out =
        fx.execute(str_of(&shown["plan_name"]), str_of(&shown["plan_id"]), str_of(&shown["plan_checksum"])).expect(0);
    let run = out.json;
    assert_eq!(run["status"], "READY", "{run:#}");
    assert_eq!(run["run_dir"], run_dir.to_str().unwrap(), "{run:#}");
    assert_eq!(step(&run, "a")["status"], "COMPLETED");
    assert_eq!(step(&run, "b")["status"], "COMPLETED");
    let run_id = str_of(&run["run_id"]);

    // run_dir holds input.json as planned and the deployed workflow.
    let written = std::fs::read(run_dir.join("input.json")).unwrap();
    assert_eq!(sha256_hex(&written), str_of(&write["sha256"]), "input.json is not the planned bytes");
    assert_eq!(serde_json::from_slice::<Value>(&written).unwrap(), input);
    for f in deploy["files"].as_array().unwrap() {
        let bytes = std::fs::read(run_dir.join("workflow").join(str_of(&f["path"]))).unwrap();
        assert_eq!(sha256_hex(&bytes), str_of(&f["sha256"]), "deployed {f}");
    }

    // Each tool ran once, from the deployed workflow, in the planned directory, with the planned argv.
    let ran = fx.tool_runs();
    assert_eq!(ran.iter().map(|r| str_of(&r["step"])).collect::<Vec<_>>(), ["a", "b"], "{ran:#?}");
    for (r, c) in ran.iter().zip(commands) {
        assert_eq!(r["file"], deployed_tool, "{r}");
        assert_eq!(r["argv"][0], c["argv"][1], "{r}");
        assert_eq!(r["cwd"], c["cwd"], "{r}");
    }

    // The registry agrees.
    let shown_run = fx.c.show(run_id);
    assert_eq!(contract(&shown_run), contract(&run));
    assert_eq!(fx.c.runs().len(), 1);
    assert_eq!(fx.listed("first")["run_id"], run_id, "`cairn plans` names the run that executed the plan");
    fx.stop();
}

/// `cairn plan` refuses, creating nothing (no plan, no run, nothing in the scratch directory).
#[test]
fn plan_refuses_bad_requests_and_creates_nothing() {
    let fx = Fx::new();
    std::fs::create_dir(fx.p("exists")).unwrap();
    std::fs::write(fx.p("a-file"), "x").unwrap();
    std::os::unix::fs::symlink(fx.p("nowhere"), fx.p("dangling")).unwrap();
    std::fs::create_dir(fx.p("real")).unwrap();
    std::os::unix::fs::symlink(fx.p("real"), fx.p("via-link")).unwrap();
    let good = fx.c.input(&json!({"log": fx.log()}));
    let not_json = fx.p("not-json.json");
    std::fs::write(&not_json, "{ this is not json").unwrap();
    let bad_schema = fx.c.input(&json!({"log": 5}));
    let fresh = |rel: &str| fx.p(rel).display().to_string();

    struct Case<'a> {
        what: &'a str,
        workflow: &'a str,
        input: String,
        target: &'a str,
        run_dir: String,
        name: &'a str,
        code: i32,
    }
    let case = |what, run_dir: String| Case {
        what,
        workflow: "pw",
        input: good.display().to_string(),
        target: "local",
        run_dir,
        name: "p",
        code: 2,
    };
    let cases = [
        case("relative run_dir", "runs/relative".into()),
        case("bare relative run_dir", "run".into()),
        case("run_dir holding ..", format!("{}/../run", fresh("real"))),
        case("existing run_dir (a directory)", fresh("exists")),
        case("existing run_dir (a file)", fresh("a-file")),
        case("existing run_dir (a dangling symlink)", fresh("dangling")),
        case("missing parent", fresh("missing/run")),
        case("parent is a file", fresh("a-file/run")),
        case("parent through a symlink", fresh("via-link/run")),
        Case { target: "nowhere", ..case("unknown target", fresh("run")) },
        Case { target: "", ..case("empty target", fresh("run")) },
        Case { workflow: "no-such-workflow", ..case("unknown workflow", fresh("run")) },
        Case { workflow: "pw@9.9.9", ..case("unknown version", fresh("run")) },
        Case { input: fresh("no-such-input.json"), ..case("missing input file", fresh("run")) },
        Case { input: not_json.display().to_string(), ..case("input not JSON", fresh("run")) },
        Case { input: bad_schema.display().to_string(), ..case("input against the schema", fresh("run")) },
        Case { name: "../escaped", ..case("plan name leaving plans/", fresh("run")) },
        Case { name: "a/b", ..case("plan name with a slash", fresh("run")) },
        Case { name: "", ..case("empty plan name", fresh("run")) },
    ];

    let before = tree(&fx.base);
    for c in &cases {
        let out = fx.c.json(&[
            "plan",
            c.workflow,
            "--input",
            &c.input,
            "--target",
            c.target,
            "--run-dir",
            &c.run_dir,
            "--name",
            c.name,
        ]);
        assert_eq!(out.code, c.code, "{}: exit code\nstdout: {}\nstderr: {}", c.what, out.stdout, out.stderr);
        assert!(!out.stderr.trim().is_empty(), "{}: no message on stderr", c.what);
        assert_eq!(tree(&fx.base), before, "{}: the scratch directory changed", c.what);
        assert!(fx.plans().is_empty(), "{}: a plan was stored: {:#?}", c.what, fx.plans());
        assert_eq!(fx.c.entries("plans"), Vec::<String>::new(), "{}: a plan file was written", c.what);
        assert!(!fx.c.home().join("escaped.json").exists() && !fx.base.join("escaped.json").exists(), "{}", c.what);
        assert!(fx.c.runs().is_empty(), "{}: a run was created", c.what);
    }
    assert_eq!(fx.c.json(&["plan", "show", "no-such-plan"]).code, 2, "plan show of an unknown plan");

    // A duplicate name is a conflict (exit 4) and leaves the first plan as it was.
    std::fs::create_dir(fx.p("runs")).unwrap();
    let first = fx.planned("dup", &fx.p("runs/one"), &json!({"log": fx.log()}));
    let stored = std::fs::read(fx.plan_file("dup")).unwrap();
    let out = fx.plan("dup", &fx.p("runs/two"), &json!({"log": fx.log(), "other": 1}));
    assert_eq!(out.code, 4, "a duplicate plan name\nstdout: {}\nstderr: {}", out.stdout, out.stderr);
    assert_eq!(std::fs::read(fx.plan_file("dup")).unwrap(), stored, "the stored plan was rewritten");
    assert_eq!(fx.plans().len(), 1, "{:#?}", fx.plans());
    assert_eq!(fx.listed("dup")["plan_id"], first["plan_id"]);
    assert_eq!(fx.c.json(&["plan", "show", "dup"]).expect(0).json, first);
    assert!(!fx.p("runs/one").exists() && !fx.p("runs/two").exists());
    assert!(fx.c.runs().is_empty());
    assert!(!fx.c.home().join("daemon.json").exists(), "planning started a daemon");
}

/// Recursively gives `path` to `uid:gid` (not following symlinks).
fn chown_tree(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).unwrap();
    if std::fs::symlink_metadata(path).unwrap().is_dir() {
        for e in std::fs::read_dir(path).unwrap() {
            chown_tree(&e.unwrap().path(), uid, gid);
        }
    }
}

/// `cairn plan` refuses a run_dir whose parent it cannot write (exit 2), creating nothing. Root's
/// `access(W_OK)` succeeds on a 0555 directory, so when the tests run as root the command runs as
/// the unprivileged user `nobody` (65534), owning the state root and scratch directory, for which
/// the 0555 parent really is not writable.
#[test]
fn plan_refuses_a_parent_it_cannot_write() {
    use std::os::unix::process::CommandExt;
    let fx = Fx::new();
    let parent = fx.p("read-only");
    std::fs::create_dir(&parent).unwrap();
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o555)).unwrap();
    let run_dir = parent.join("run");
    let input = fx.c.input(&json!({"log": fx.log()}));
    // Files this process creates are owned by its effective uid.
    let as_root = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&fx.base).unwrap()) == 0;
    if as_root {
        chown_tree(&fx.c.home(), 65534, 65534);
        chown_tree(&fx.base, 65534, 65534);
    }
    let plan = |dir: &Path, name: &str| {
        let mut cmd = fx.c.std_command(&[
            "plan",
            "pw",
            "--input",
            input.to_str().unwrap(),
            "--run-dir",
            dir.to_str().unwrap(),
            "--name",
            name,
            "--json",
        ]);
        if as_root {
            // std drops the supplementary groups when it changes the uid of a root process.
            cmd.uid(65534).gid(65534);
        }
        let out = cmd.output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };

    let before = tree(&fx.base);
    let (code, stderr) = plan(&run_dir, "ro");
    assert_eq!(code, Some(2), "a parent that is not writable: {stderr}");
    assert!(stderr.contains("writable"), "the message says why: {stderr}");
    assert_eq!(tree(&fx.base), before, "the scratch directory changed");
    assert!(fx.plans().is_empty() && fx.c.runs().is_empty());

    // The same request with a writable parent is planned: the refusal was about the permission.
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, stderr) = plan(&run_dir, "rw");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!run_dir.exists());
}

/// `cairn execute-plan` refuses — a wrong id or checksum, an unknown or altered plan, a changed
/// input file, a run_dir that appeared, a second execution — creating nothing.
#[test]
fn execute_plan_refuses_and_creates_nothing() {
    let fx = Fx::new();
    std::fs::create_dir(fx.p("runs")).unwrap();
    fx.c.start_daemon();

    // Another plan, for its id and checksum.
    let other = fx.planned("other", &fx.p("runs/other"), &json!({"log": fx.log()}));

    type Tamper = fn(&Fx, &Value, &Value) -> [String; 3];
    let cases: Vec<(&str, i32, Tamper)> = vec![
        ("wrong checksum", 4, |_, p, _| {
            let [n, i, c] = shown_of(p);
            [n, i, flipped(&c)]
        }),
        ("wrong id", 4, |_, p, _| {
            let [n, i, c] = shown_of(p);
            [n, format!("{i}x"), c]
        }),
        ("another plan's checksum", 4, |_, p, o| {
            let [n, i, _] = shown_of(p);
            [n, i, str_of(&o["plan_checksum"]).into()]
        }),
        ("another plan's id", 4, |_, p, o| {
            let [n, _, c] = shown_of(p);
            [n, str_of(&o["plan_id"]).into(), c]
        }),
        ("unknown plan", 2, |_, p, _| {
            let [_, i, c] = shown_of(p);
            ["no-such-plan".into(), i, c]
        }),
        ("plan file: run_dir altered", 4, |fx, p, _| {
            let elsewhere = fx.p(&format!("elsewhere-{}", str_of(&p["plan_name"])));
            edit_plan_file(&fx.plan_file(str_of(&p["plan_name"])), |v| v["run_dir"] = json!(elsewhere));
            shown_of(p)
        }),
        ("plan file: input altered", 4, |fx, p, _| {
            edit_plan_file(&fx.plan_file(str_of(&p["plan_name"])), |v| v["input"]["log"] = json!(fx.p("other-log")));
            shown_of(p)
        }),
        ("plan file: input.json content altered", 4, |fx, p, _| {
            edit_plan_file(&fx.plan_file(str_of(&p["plan_name"])), |v| {
                v["effects"][1]["content"] = json!("{\"log\": \"/tmp/elsewhere\"}\n");
            });
            shown_of(p)
        }),
        ("plan file: run_dir altered, its checksum recomputed and given", 4, |fx, p, _| {
            let mut sum = String::new();
            let elsewhere = fx.p(&format!("elsewhere-{}", str_of(&p["plan_name"])));
            edit_plan_file(&fx.plan_file(str_of(&p["plan_name"])), |v| {
                v["run_dir"] = json!(elsewhere);
                sum = checksum_of(v);
                v["plan_checksum"] = json!(sum);
            });
            let [n, i, _] = shown_of(p);
            [n, i, sum]
        }),
        ("plan file removed", 4, |fx, p, _| {
            std::fs::remove_file(fx.plan_file(str_of(&p["plan_name"]))).unwrap();
            shown_of(p)
        }),
        ("plan file not JSON", 4, |fx, p, _| {
            std::fs::write(fx.plan_file(str_of(&p["plan_name"])), "{ garbage").unwrap();
            shown_of(p)
        }),
        ("input file changed", 4, |_, p, _| {
            std::fs::write(str_of(&p["inputs"][0]["path"]), "changed").unwrap();
            shown_of(p)
        }),
        ("input file removed", 4, |_, p, _| {
            std::fs::remove_file(str_of(&p["inputs"][0]["path"])).unwrap();
            shown_of(p)
        }),
        ("run_dir created by someone after planning", 4, |_, p, _| {
            std::fs::create_dir(str_of(&p["run_dir"])).unwrap();
            shown_of(p)
        }),
    ];

    for (i, (what, code, tamper)) in cases.iter().enumerate() {
        let name = format!("case-{i}");
        let data = fx.p(&format!("data-{i}.txt"));
        std::fs::write(&data, format!("data {i}")).unwrap();
        let run_dir = fx.p(&format!("runs/{name}"));
        let plan = fx.planned(&name, &run_dir, &json!({"log": fx.log(), "data": data}));
        assert_eq!(plan["inputs"].as_array().unwrap().len(), 1, "{plan:#}");
        let [n, id, sum] = tamper(&fx, &plan, &other);
        let out = fx.execute(&n, &id, &sum);
        assert_eq!(out.code, *code, "{what}: exit code\nstdout: {}\nstderr: {}", out.stdout, out.stderr);
        assert!(!out.stderr.trim().is_empty(), "{what}: no message on stderr");
        fx.assert_nothing_created(what, 0, &run_dir);
        assert!(!fx.p(&format!("elsewhere-{name}")).exists(), "{what}: the altered run_dir was created");
        assert_eq!(fx.listed(&name)["run_id"], Value::Null, "{what}");
        if what.starts_with("plan file") {
            let show = fx.c.json(&["plan", "show", &name]);
            assert_eq!(show.code, 4, "{what}: `plan show` of an altered plan\nstdout: {}", show.stdout);
        }
    }

    // Executed twice: the second (and any later) request is a conflict that creates nothing more.
    let plan = fx.planned("twice", &fx.p("runs/twice"), &json!({"log": fx.log()}));
    let first = fx.execute_shown(&plan).expect(0).json;
    assert_eq!(first["status"], "READY", "{first:#}");
    let ran = fx.tool_runs().len();
    assert_eq!(ran, 2);
    let dir_before = tree(&fx.p("runs/twice"));
    for attempt in 0..2 {
        let out = fx.execute_shown(&plan);
        assert_eq!(out.code, 4, "execution #{}\nstdout: {}\nstderr: {}", attempt + 2, out.stdout, out.stderr);
    }
    assert_eq!(fx.c.runs().len(), 1, "{:#?}", fx.c.runs());
    assert_eq!(fx.tool_runs().len(), ran, "a second execution ran a tool");
    assert_eq!(tree(&fx.p("runs/twice")), dir_before, "a second execution touched run_dir");
    assert_eq!(fx.listed("twice")["run_id"], first["run_id"]);
    assert_eq!(fx.daemon_children(), Vec::<i32>::new());
    fx.stop();
}

/// Ten approvals of one plan at once: exactly one executes it; the others are conflicts.
#[test]
fn ten_concurrent_approvals_execute_the_plan_once() {
    let fx = Fx::new();
    std::fs::create_dir(fx.p("runs")).unwrap();
    let run_dir = fx.p("runs/raced");
    let plan = fx.planned("raced", &run_dir, &json!({"log": fx.log()}));
    fx.c.start_daemon();
    let args: Vec<String> = ["execute-plan", str_of(&plan["plan_name"]), "--id", str_of(&plan["plan_id"])]
        .into_iter()
        .chain(["--checksum", str_of(&plan["plan_checksum"]), "--json"])
        .map(String::from)
        .collect();
    let children: Vec<Child> = (0..10).map(|_| fx.c.spawn(&args)).collect();
    let results: Vec<_> = children.into_iter().map(|mut child| wait_exit(&mut child, CMD_TIMEOUT)).collect();

    let winners: Vec<_> = results.iter().filter(|r| r.code == Some(0)).collect();
    let losers = results.iter().filter(|r| r.code == Some(4)).count();
    assert!(winners.len() == 1 && losers == 9, "exactly one exits 0, nine exit 4: {results:#?}");
    let run = parse_stdout(&winners[0].stdout, 0, "execute-plan");
    assert_eq!(run["status"], "READY", "{run:#}");
    let runs = fx.c.runs();
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0]["run_id"], run["run_id"]);
    let ran = fx.tool_runs();
    assert_eq!(ran.iter().map(|r| str_of(&r["step"])).collect::<Vec<_>>(), ["a", "b"], "each tool runs once: {ran:#?}");
    assert_eq!(fx.listed("raced")["run_id"], run["run_id"]);
    assert_eq!(fx.daemon_children(), Vec::<i32>::new());
    fx.stop();
}

/// Effect paths that leave run_dir, written into the stored plan, are refused (the checksum no
/// longer matches) and create nothing anywhere; a parent replaced by a symlink after planning, or
/// a symlink planted at run_dir, is refused at approval and nothing is written through it.
#[test]
fn escaping_effect_paths_and_planted_symlinks_create_nothing_outside_run_dir() {
    let fx = Fx::new();
    std::fs::create_dir(fx.p("runs")).unwrap();
    fx.c.start_daemon();
    let run_dir = fx.p("runs/esc");
    let plan = fx.planned("esc", &run_dir, &json!({"log": fx.log()}));
    let file = fx.plan_file("esc");
    let original = std::fs::read(&file).unwrap();
    let abs = fx.p("abs-escape").display().to_string();
    let abs = abs.as_str();
    // (what, the field of the stored plan, its new value)
    let edits = [
        ("write_file to ../escape", "/effects/1/path", "../escape"),
        ("write_file to an absolute path", "/effects/1/path", abs),
        ("write_file to a/../../x", "/effects/1/path", "a/../../x"),
        ("deploy to ../escape", "/effects/2/path", "../escape"),
        ("deploy to an absolute path", "/effects/2/path", abs),
        ("deploy a file to a/../../x", "/effects/2/files/0/path", "a/../../x"),
    ];
    let before = tree(&fx.base);
    for (what, pointer, value) in edits {
        for recompute in [false, true] {
            let mut sum = str_of(&plan["plan_checksum"]).to_string();
            edit_plan_file(&file, |v| {
                *v.pointer_mut(pointer).unwrap_or_else(|| panic!("no {pointer} in the plan")) = json!(value);
                if recompute {
                    sum = checksum_of(v);
                    v["plan_checksum"] = json!(sum);
                }
            });
            let out = fx.execute(str_of(&plan["plan_name"]), str_of(&plan["plan_id"]), &sum);
            let what = format!("{what} (checksum recomputed: {recompute})");
            assert_eq!(out.code, 4, "{what}\nstdout: {}\nstderr: {}", out.stdout, out.stderr);
            fx.assert_nothing_created(&what, 0, &run_dir);
            assert_eq!(tree(&fx.base), before, "{what}: the scratch directory changed");
            assert!(!fx.base.parent().unwrap().join("escape").exists() && !Path::new("/x").exists(), "{what}");
            std::fs::write(&file, &original).unwrap();
        }
    }
    // Restored, the plan was never consumed by those refusals: it executes.
    let run = fx.execute_shown(&plan).expect(0).json;
    assert_eq!(run["status"], "READY", "{run:#}");
    fx.c.json(&["events", str_of(&run["run_id"])]).expect(0);

    // The parent of run_dir replaced by a symlink after planning: refused at approval (exit 4).
    std::fs::create_dir(fx.p("parent")).unwrap();
    let target = fx.p("symlink-target");
    std::fs::create_dir(&target).unwrap();
    let linked = fx.planned("linked-parent", &fx.p("parent/run"), &json!({"log": fx.p("log-linked")}));
    std::fs::remove_dir(fx.p("parent")).unwrap();
    std::os::unix::fs::symlink(&target, fx.p("parent")).unwrap();
    let out = fx.execute_shown(&linked);
    assert_eq!(out.code, 4, "a parent replaced by a symlink\nstdout: {}\nstderr: {}", out.stdout, out.stderr);
    assert!(out.stderr.contains("symlink"), "the refusal names the symlink: {}", out.stderr);
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0, "something was written through the symlink");
    assert_eq!(fx.c.runs().len(), 1, "{:#?}", fx.c.runs());
    assert!(log_lines(&fx.p("log-linked")).is_empty());

    // A symlink planted at run_dir itself after planning: refused (exit 4), nothing written through it.
    std::fs::create_dir(fx.p("parent2")).unwrap();
    let target2 = fx.p("symlink-target2");
    std::fs::create_dir(&target2).unwrap();
    let planted = fx.planned("planted", &fx.p("parent2/run"), &json!({"log": fx.p("log-planted")}));
    std::os::unix::fs::symlink(&target2, fx.p("parent2/run")).unwrap();
    let out = fx.execute_shown(&planted);
    assert_eq!(out.code, 4, "a symlink planted at run_dir\nstdout: {}\nstderr: {}", out.stdout, out.stderr);
    assert_eq!(std::fs::read_dir(&target2).unwrap().count(), 0, "something was written through the symlink");
    assert_eq!(fx.c.runs().len(), 1, "{:#?}", fx.c.runs());
    assert!(log_lines(&fx.p("log-planted")).is_empty());
    assert_eq!(fx.daemon_children(), Vec::<i32>::new());
    fx.stop();
}

/// A tool file of the registered snapshot changed after planning: the changed tool never runs;
/// the execution fails at the deploy effect, naming it.
#[test]
fn a_tool_changed_in_the_registry_after_planning_never_runs() {
    let fx = Fx::new();
    std::fs::create_dir(fx.p("runs")).unwrap();
    fx.c.start_daemon();
    let run_dir = fx.p("runs/swapped");
    let plan = fx.planned("swapped", &run_dir, &json!({"log": fx.log()}));
    let tool = fx.c.snapshot("pw@1.0.0").join("tools/where.py");
    let marker = fx.p("pwned");
    let evil = format!("open({:?}, 'w').write('ran')\nprint('{{}}')\n", marker.display().to_string());
    let mode = std::fs::metadata(&tool).unwrap().permissions();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&tool, &evil).unwrap();
    std::fs::set_permissions(&tool, mode).unwrap();

    let out = fx.execute_shown(&plan);
    assert!(!marker.exists(), "the modified tool ran");
    assert!(fx.tool_runs().is_empty(), "a tool ran: {:?}", fx.tool_runs());
    assert_eq!(fx.daemon_children(), Vec::<i32>::new());
    if out.code == 4 {
        // Refused at approval (a re-hash of the snapshot): nothing at all was created.
        fx.assert_nothing_created("a changed snapshot", 0, &run_dir);
        fx.stop();
        return;
    }
    // Today the approval does not re-hash the snapshot, so the deploy effect is where the change
    // is caught: the run is FAILED, naming the effect and the file.
    assert_eq!(out.code, 3, "expected a FAILED run (or a refusal)\nstdout: {}\nstderr: {}", out.stdout, out.stderr);
    let run = out.json;
    assert_eq!(run["status"], "FAILED", "{run:#}");
    let error = run["error"].to_string();
    assert!(error.contains("deploy workflow snapshot"), "the error names the deploy effect: {error}");
    assert!(error.contains("tools/where.py"), "the error names the changed file: {error}");
    assert_eq!(fx.c.show(str_of(&run["run_id"]))["status"], "FAILED");
    assert!(
        std::fs::read_to_string(run_dir.join("workflow/tools/where.py")).map(|t| t != evil).unwrap_or(true),
        "the modified tool was deployed"
    );
    assert_eq!(fx.c.runs().len(), 1, "{:#?}", fx.c.runs());
    fx.stop();
}

/// A run_dir is one directory, however it is spelled: "one run per target and run_dir, ever"
/// holds for the directory, not for one spelling of it. Planning may refuse a non-normalised
/// spelling (`//`, a trailing `/`, exit 2) or normalise it; either way a second plan naming the
/// same directory plainly cannot run there again once the first has (even after the directory is
/// removed, as it cannot for the same spelling).
#[test]
fn one_run_dir_spelled_two_ways_is_still_one_run_dir() {
    let fx = Fx::new();
    std::fs::create_dir(fx.p("runs")).unwrap();
    let canonical = fx.p("runs/x");
    let odd = format!("{}//x/", fx.p("runs").display());
    let out = fx.plan("odd", Path::new(&odd), &json!({"log": fx.log()}));
    if out.code == 2 {
        assert!(fx.plans().is_empty());
        return;
    }
    let odd_plan = out.expect(0).json;
    let plain = fx.planned("plain", &canonical, &json!({"log": fx.log()}));
    let again = fx.planned("again", Path::new(&odd), &json!({"log": fx.log()}));
    let first = fx.execute_shown(&odd_plan).expect(0).json;
    assert!(canonical.join("input.json").is_file());
    std::fs::remove_dir_all(&canonical).unwrap();
    // The same spelling stays reserved by the first run...
    let out = fx.execute_shown(&again);
    assert_eq!(out.code, 4, "the same spelling, run again\nstdout: {}\nstderr: {}", out.stdout, out.stderr);
    // ... and so must the same directory spelled plainly.
    let out = fx.execute_shown(&plain);
    assert_eq!(
        out.code,
        4,
        "a second run in run_dir {} (first planned as {odd})\nstdout: {}\nstderr: {}",
        canonical.display(),
        out.stdout,
        out.stderr
    );
    assert_eq!(fx.c.runs().len(), 1, "{:#?}", fx.c.runs());
    assert!(!canonical.exists());
    assert_eq!(fx.listed("odd")["run_id"], first["run_id"]);
    fx.stop();
}

/// Two plans for the same run_dir: once one executes, the other is refused (exit 4, nothing
/// created), and `cairn plans` names a run only for the plan that ran.
#[test]
fn of_two_plans_for_one_run_dir_only_the_executed_one_lists_a_run() {
    let fx = Fx::new();
    std::fs::create_dir(fx.p("runs")).unwrap();
    let run_dir = fx.p("runs/shared");
    let one = fx.planned("one", &run_dir, &json!({"log": fx.log()}));
    let two = fx.planned("two", &run_dir, &json!({"log": fx.log(), "other": true}));
    let run = fx.execute_shown(&one).expect(0).json;
    let dir = tree(&run_dir);
    let ran = fx.tool_runs().len();
    let out = fx.execute_shown(&two);
    assert_eq!(out.code, 4, "the second plan for a taken run_dir\nstdout: {}\nstderr: {}", out.stdout, out.stderr);
    assert_eq!(tree(&run_dir), dir, "the refused plan touched run_dir");
    assert_eq!((fx.c.runs().len(), fx.tool_runs().len()), (1, ran));
    assert_eq!(fx.listed("one")["run_id"], run["run_id"]);
    assert_eq!(fx.listed("two")["run_id"], Value::Null, "`cairn plans` says plan `two` ran: {:#}", fx.listed("two"));
    fx.stop();
}

/// The workflow deployed into run_dir is what the plan approved: a tool file changed there after
/// the deploy (here while step `a` runs) never runs for a later step.
#[test]
fn a_deployed_tool_changed_during_the_run_never_runs() {
    let fx = Fx::new();
    chain_workflow(&fx.c, "chain");
    std::fs::create_dir(fx.p("runs")).unwrap();
    let run_dir = fx.p("runs/chain");
    let input = json!({
        "plans": {"a": ["wait"], "b": ["ok"], "c": ["ok"]},
        "log": fx.p(CHAIN_LOG),
        "release": fx.p("release"),
    });
    let plan = fx.plan_of("chain", "chain", &run_dir, &input).expect(0).json;
    fx.c.start_daemon();
    let args: Vec<String> = ["execute-plan", "chain", "--id", str_of(&plan["plan_id"]), "--checksum"]
        .into_iter()
        .chain([str_of(&plan["plan_checksum"]), "--json"])
        .map(String::from)
        .collect();
    let mut child = fx.c.spawn(&args);
    wait_for_tool(&fx.p(CHAIN_LOG), "a", 1);

    let tool = run_dir.join("workflow/tools/tool.py");
    let marker = fx.p("tampered");
    let evil = format!(
        "import json, sys\nsys.stdin.read()\nopen({:?}, 'a').write('ran\\n')\nprint(json.dumps({{'step': 'b'}}))\n",
        marker.display().to_string()
    );
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(&tool, evil).unwrap();
    std::fs::write(fx.p("release"), "").unwrap();

    let Exited { code, stdout, stderr, .. } = wait_exit(&mut child, CMD_TIMEOUT);
    let lines = log_lines(&fx.p(CHAIN_LOG));
    assert!(!marker.exists(), "the tool changed in run_dir/workflow after the deploy ran (exit {code:?}): {stdout}");
    let run = parse_stdout(&stdout, code.unwrap_or(-1), "execute-plan");
    match code {
        // Ran the approved tool from somewhere the change cannot reach.
        Some(0) => assert_eq!(count(&lines, "b:start"), 1, "{lines:?}"),
        // Or refused to launch it: the run fails, saying why.
        Some(3) => assert!(run["error"].to_string().contains("tool"), "{run:#}"),
        other => panic!("exit {other:?}\nstdout: {stdout}\nstderr: {stderr}"),
    }
    fx.stop();
}

/// A replay is planned and approved the same way: the plan records the decisions, planning
/// creates nothing, and the approved child reuses `a` and re-executes `b` from the deployed copy.
#[test]
fn a_replay_is_planned_and_approved_like_a_run() {
    let fx = Fx::new();
    let input = json!({"log": fx.log().display().to_string()});
    let first = fx.planned("src", &fx.p("src-run"), &input);
    let source = fx.execute_shown(&first).expect(0).json;
    let source_id = str_of(&source["run_id"]).to_string();
    let runs_before = fx.c.runs().len();
    let executions_before = fx.tool_runs().len();

    let run_dir = fx.p("replay-run");
    let out = fx.c.json(&[
        "plan",
        "--replay",
        &source_id,
        "--step",
        "b",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--name",
        "rp",
    ]);
    let plan = out.expect(0).json;
    assert_eq!(plan["replay"]["source_run_id"], source_id.as_str());
    assert_eq!(plan["replay"]["step_ids"], json!(["b"]));
    let decisions: Vec<(String, String)> = plan["replay"]["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (str_of(&d["step_id"]).to_string(), str_of(&d["decision"]).to_string()))
        .collect();
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    assert!(decisions.iter().any(|(id, d)| id == "a" && d == "reuse"), "{decisions:?}");
    assert_eq!(fx.c.runs().len(), runs_before, "planning a replay created a run");
    assert!(!run_dir.exists(), "planning a replay created its run_dir");
    assert_eq!(fx.tool_runs().len(), executions_before, "planning a replay ran a tool");

    let child = fx.execute_shown(&plan).expect(0).json;
    assert_eq!(child["status"], "READY", "{child:#}");
    assert_eq!(child["run_dir"], run_dir.display().to_string());
    assert_eq!(child["replay"]["source_run_id"], source_id.as_str());
    assert_eq!(child["replay"]["reused"], json!(["a"]));
    assert_eq!(child["replay"]["replayed"], json!(["b"]));
    let steps: Vec<(String, bool, u64)> = child["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|st| {
            (str_of(&st["step_id"]).to_string(), st["reused"].as_bool().unwrap(), st["attempts"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(steps, [("a".to_string(), true, 0), ("b".to_string(), false, 1)]);
    // Only b ran again, from the replay's deployed workflow.
    let runs = fx.tool_runs();
    assert_eq!(runs.len(), executions_before + 1, "{runs:#?}");
    let last = runs.last().unwrap();
    assert_eq!(last["step"], "b");
    assert!(str_of(&last["file"]).starts_with(run_dir.join("workflow").to_str().unwrap()), "{last}");
    // Approved once: a second approval is refused and changes nothing.
    let runs_now = fx.c.runs().len();
    fx.execute_shown(&plan).expect(4);
    assert_eq!(fx.c.runs().len(), runs_now);
    fx.stop();
}

/// A registered snapshot altered on disk before planning is refused at planning: a plan never
/// claims a digest its files do not have.
#[test]
fn a_snapshot_altered_before_planning_is_refused() {
    let fx = Fx::new();
    let wf = fx.c.json(&["workflow", "show", "pw"]).expect(0).json;
    let tool = fx.c.home().join("registry").join(str_of(&wf["digest"])).join("tools/where.py");
    append(&tool, "\n# altered after registration\n");
    let run_dir = fx.p("r");
    let out = fx.plan("altered", &run_dir, &json!({"log": fx.log().display().to_string()}));
    assert_eq!(out.code, 4, "{}", out.stderr);
    assert!(out.stderr.contains("changed on disk"), "{}", out.stderr);
    assert!(!fx.plan_file("altered").exists(), "no plan is stored");
    assert!(!run_dir.exists());
}
