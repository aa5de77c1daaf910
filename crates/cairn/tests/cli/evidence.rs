//! The evidence of a run: each step's result (bounded in a run, whole on its own) and the files
//! its declared outputs name, hashed and recorded with the completion; `${steps.X.outputs.NAME}`
//! downstream; a replay that materialises reused artifacts (a hard link, or a copy across
//! filesystems) and refuses to reuse changed or missing bytes; `trace` from a file back to its
//! runs; a kill -9 between a tool's exit and the commit of its completion.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::support::*;

/// The evidence tool. It reads its arguments from stdin and:
///
/// * writes `args.write`: `{relative path: what}`, where what is `text:T`, `zeros:N` (N zero
///   bytes), `sparse:N` (a sparse file of N bytes), `dir` (an empty folder) or `link:TARGET` (a
///   symlink);
/// * reads `args.read`: `{name: absolute path}`, answering each with its SHA-256 (a file) or its
///   sorted listing (a folder);
/// * answers `args.result` when given (or `{"big": N}`: a string of N characters), else what it
///   read and where it ran.
///
/// Log lines (to `args.log`): `<step>:start:<attempt>` first and `<step>:end:<attempt>` right
/// before it prints.
pub(crate) const TOOL: &str = r#"import hashlib, json, os, sys
args = json.loads(sys.stdin.read() or "{}")
step = os.environ.get("CAIRN_STEP_ID", "?")
attempt = int(os.environ.get("CAIRN_ATTEMPT", "0"))
def note(line):
    if args.get("log"):
        with open(args["log"], "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
note("%s:start:%d" % (step, attempt))
for rel, what in (args.get("write") or {}).items():
    if os.path.dirname(rel):
        os.makedirs(os.path.dirname(rel), exist_ok=True)
    kind, _, param = what.partition(":")
    if kind == "text":
        with open(rel, "w") as f:
            f.write(param)
    elif kind == "zeros":
        with open(rel, "wb") as f:
            left = int(param)
            while left:
                n = min(left, 1 << 20)
                f.write(b"\0" * n)
                left -= n
    elif kind == "sparse":
        with open(rel, "wb") as f:
            f.truncate(int(param))
    elif kind == "dir":
        os.makedirs(rel, exist_ok=True)
    elif kind == "link":
        os.symlink(param, rel)
read = {}
for name, path in (args.get("read") or {}).items():
    if os.path.isdir(path):
        read[name] = {"path": path, "files": sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs)}
    else:
        with open(path, "rb") as f:
            read[name] = {"path": path, "sha256": hashlib.sha256(f.read()).hexdigest()}
result = args.get("result")
if isinstance(result, dict) and "big" in result:
    result = {"notes": "n" * int(result["big"])}
if result is None:
    result = {"step": step, "attempt": attempt, "cwd": os.getcwd(), "read": read}
note("%s:end:%d" % (step, attempt))
sys.stdout.write(json.dumps(result))
"#;

/// `render` writes a report (its tool's output), a folder of plots, an empty folder and a data
/// file; `publish` reads three of them by `${steps.render.outputs.*}`; `notes` is independent.
pub(crate) const WORKFLOW: &str = r#"
[workflow]
name = "evidence"
version = "1.0.0"

[tools.make]
command = ["python3", "tools/make.py"]
timeout_secs = 120
outputs = { report = "report.html" }

[tools.jot]
command = ["python3", "tools/make.py"]

[[steps]]
id = "render"
tool = "make"
args = { log = "${input.log}", write = "${input.render}" }
outputs = { plots = "plots/", empty = "empty/", data = "data.bin" }

[[steps]]
id = "notes"
tool = "jot"
args = { log = "${input.log}", write = { "notes.txt" = "text:independent" } }
outputs = { notes = "notes.txt" }

[[steps]]
id = "publish"
tool = "make"
needs = ["render"]
args = { log = "${input.log}", write = { "report.html" = "text:published" }, read = { report = "${steps.render.outputs.report}", plots = "${steps.render.outputs.plots}", data = "${steps.render.outputs.data}" } }
"#;

pub(crate) const MIB: u64 = 1 << 20;

pub(crate) fn evidence_workflow(c: &Cairn) {
    c.add(&write_workflow(&c.path("evidence"), WORKFLOW, &[("tools/make.py", TOOL)]));
}

/// What `render` writes in a good run: every kind of output, the data file `data` bytes.
pub(crate) fn render_files(data: u64) -> Value {
    json!({
        "report.html": "text:<h1>release 2.4.1</h1>",
        "plots/latency.png": "text:latency",
        "plots/by-region/eu.png": "text:eu",
        "empty/": "dir",
        "data.bin": format!("zeros:{data}"),
    })
}

pub(crate) fn input(c: &Cairn, render: Value) -> Value {
    json!({"log": c.path_str("log"), "render": render})
}

pub(crate) fn sha256_file(path: &Path) -> String {
    use std::io::Read;
    let mut h = Sha256::new();
    let mut f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    hex::encode(h.finalize())
}

pub(crate) fn artifacts(run: &Value, step_id: &str) -> Vec<Value> {
    step(run, step_id)["artifacts"].as_array().unwrap_or_else(|| panic!("no artifacts of {step_id}: {run:#}")).clone()
}

fn paths(list: &[Value]) -> Vec<String> {
    list.iter().map(|a| str_of(&a["path"]).to_string()).collect()
}

fn run_dir(run: &Value) -> PathBuf {
    PathBuf::from(str_of(&run["run_dir"]))
}

/// Every artifact of the run is the file at its path: its size and SHA-256.
#[track_caller]
pub(crate) fn assert_on_disk(run: &Value) {
    let dir = run_dir(run);
    for s in run["steps"].as_array().unwrap() {
        for a in s["artifacts"].as_array().unwrap() {
            let file = dir.join(str_of(&a["path"]));
            assert_eq!(a["sha256"], sha256_file(&file), "{}", file.display());
            assert_eq!(a["bytes"], std::fs::metadata(&file).unwrap().len(), "{}", file.display());
        }
    }
}

/// A workflow with outputs of every kind: a file, a folder (nested), an empty folder and a
/// 100 MiB file. Each is recorded, one artifact per file, with the completion; the downstream step
/// runs with their absolute paths; `cairn artifacts` lists them with the contract's fields.
#[test]
fn outputs_of_every_kind_are_recorded_with_the_completion_and_read_downstream_by_path() {
    let c = Cairn::new();
    evidence_workflow(&c);
    let run = c.run("evidence", &input(&c, render_files(100 * MIB)), &["--run-id", "E1"]).expect(0).json;
    assert_eq!(run["status"], "READY", "{run:#}");
    let dir = run_dir(&run);

    let render = artifacts(&run, "render");
    assert_eq!(
        paths(&render),
        [
            "steps/render/data.bin",
            "steps/render/plots/by-region/eu.png",
            "steps/render/plots/latency.png",
            "steps/render/report.html"
        ],
        "one artifact per file, an empty folder none: {render:#?}"
    );
    let names: Vec<&str> = render.iter().map(|a| str_of(&a["name"])).collect();
    assert_eq!(names, ["data", "plots", "plots", "report"]);
    assert_eq!(render[0]["bytes"], 100 * MIB);
    assert!(render.iter().all(|a| a["attempt"] == 1 && a["step_id"] == "render" && a["reused_from"].is_null()));
    assert_on_disk(&run);
    assert!(dir.join("steps/render/empty").is_dir());

    // `publish` ran with the absolute paths, and read the very bytes recorded.
    let read = &step(&run, "publish")["result"]["read"];
    assert_eq!(read["report"]["path"], dir.join("steps/render/report.html").to_str().unwrap());
    assert_eq!(read["report"]["sha256"], render[3]["sha256"]);
    assert_eq!(read["data"]["sha256"], render[0]["sha256"]);
    assert_eq!(read["plots"]["files"], json!(["by-region/eu.png", "latency.png"]));
    // Its own report (its tool's output), a file of the same name in its own directory.
    assert_eq!(paths(&artifacts(&run, "publish")), ["steps/publish/report.html"]);

    // `cairn artifacts`: the contract's fields, the same as the run carries.
    let listed = c.json(&["artifacts", "E1"]).expect(0).json;
    assert_eq!(listed["run_id"], "E1");
    let all = listed["artifacts"].as_array().unwrap();
    assert_eq!(all.len(), 6, "{listed:#}");
    for a in all {
        let keys: Vec<&String> = a.as_object().unwrap().keys().collect();
        for k in ["step_id", "name", "path", "bytes", "sha256", "attempt"] {
            assert!(keys.iter().any(|x| *x == k), "{k} missing in {a}");
        }
        let shown = artifacts(&run, str_of(&a["step_id"]));
        assert!(shown.contains(a), "{a} is not what the run shows");
    }
    let human = c.raw(&["artifacts", "E1"]);
    assert!(human.stdout.contains(str_of(&render[3]["sha256"])), "{}", human.stdout);

    // `publish`'s signature is the bytes it read, not where they lay: the stored arguments name
    // each output by its content digest.
    let args = c.sql(&["-json"], "SELECT args_json FROM tool_calls WHERE run_id = 'E1' AND step_id = 'publish'");
    if let Some(args) = args {
        assert!(args.contains(&format!("sha256:{}", str_of(&render[3]["sha256"]))), "{args}");
        assert!(!args.contains(dir.to_str().unwrap()), "no path is signed: {args}");
    }

    // A bad declaration is refused when the workflow is added, naming the file, step and field.
    let bad = WORKFLOW.replace("plots = \"plots/\"", "plots = \"../plots/\"").replace("1.0.0", "1.0.1");
    let refused = c.json(&[
        "workflow",
        "add",
        write_workflow(&c.path("bad"), &bad, &[("tools/make.py", TOOL)]).to_str().unwrap(),
    ]);
    let refused = refused.expect(2);
    assert!(refused.stderr.contains("step `render`, field `outputs`"), "{}", refused.stderr);
    assert!(refused.stderr.contains("relative to the step's directory"), "{}", refused.stderr);
}

/// A declared output that was not written, written as a folder, or a symlink out of the step's
/// directory fails the step with the output's name, and records no artifact of it.
#[test]
fn a_missing_or_symlinked_output_fails_the_step_naming_it() {
    let c = Cairn::new();
    evidence_workflow(&c);
    let cases = [
        ("missing", json!({"data.bin": null}), "declared output data (data.bin) was not written"),
        ("link", json!({"plots/escape.png": "link:/etc/passwd"}), "declared output plots (plots/) is a symlink at"),
        ("folder", json!({"data.bin": null, "data.bin/x": "text:x"}), "declared output data (data.bin) is a folder"),
    ];
    for (id, change, message) in cases {
        let mut files = render_files(10);
        for (k, v) in change.as_object().unwrap() {
            if v.is_null() {
                files.as_object_mut().unwrap().remove(k);
            } else {
                files[k] = v.clone();
            }
        }
        let run = c.run("evidence", &input(&c, files), &["--run-id", id]).expect(3).json;
        let render = step(&run, "render");
        assert_eq!(render["status"], "FAILED", "{run:#}");
        assert!(str_of(&render["error"]).contains(message), "{id}: {:#}", render["error"]);
        assert!(run["error"].as_str().unwrap_or_default().contains(message), "{id}: the run says why: {run:#}");
        assert_eq!(render["artifacts"], json!([]), "{id}: nothing recorded of a failed attempt");
        assert_eq!(step(&run, "publish")["status"], "PENDING");
        assert_eq!(c.json(&["artifacts", id]).expect(0).json["artifacts"], json!([]), "{id}");
    }
}

/// A replay materialises the reused steps' artifacts into the child's own directory as hard
/// links (the same inode), checked; `trace` finds a file in every run that recorded it, with the
/// replays that carried it; once the source's run directory is gone, the child is still whole
/// and a replay of the child carries its bytes on.
#[test]
fn a_replay_links_the_reused_bytes_into_the_child_and_trace_follows_them() {
    let c = Cairn::new();
    evidence_workflow(&c);
    let source = c.run("evidence", &input(&c, render_files(MIB)), &["--run-id", "S"]).expect(0).json;
    let child = c.json(&["replay", "S", "--step", "publish", "--run-id", "C"]).expect(0).json;
    assert_eq!(child["status"], "READY", "{child:#}");
    assert_eq!(step(&child, "render")["decision"], "reuse");
    assert_eq!(step(&child, "publish")["attempts"], 1);

    let (src_dir, child_dir) = (run_dir(&source), run_dir(&child));
    let reused = artifacts(&child, "render");
    assert_eq!(paths(&reused), paths(&artifacts(&source, "render")));
    for (a, b) in reused.iter().zip(artifacts(&source, "render")) {
        assert_eq!((&a["sha256"], &a["bytes"], &a["attempt"]), (&b["sha256"], &b["bytes"], &b["attempt"]));
        assert_eq!(a["reused_from"], "S");
        let (x, y) = (src_dir.join(str_of(&a["path"])), child_dir.join(str_of(&a["path"])));
        let (mx, my) = (std::fs::metadata(&x).unwrap(), std::fs::metadata(&y).unwrap());
        assert_eq!((mx.dev(), mx.ino()), (my.dev(), my.ino()), "{} is a hard link of {}", y.display(), x.display());
    }
    assert!(child_dir.join("steps/render/empty").is_dir(), "an empty output folder is materialised too");
    // The re-executed step read the child's own copy.
    let read = &step(&child, "publish")["result"]["read"];
    assert_eq!(read["report"]["path"], child_dir.join("steps/render/report.html").to_str().unwrap());
    assert_on_disk(&child);

    // Where did this file come from? The run that produced it, and the replay that carried it.
    let report = src_dir.join("steps/render/report.html");
    let traced = c.json(&["trace", report.to_str().unwrap()]).expect(0).json;
    assert_eq!(traced["sha256"], sha256_file(&report));
    let m = traced["matches"].as_array().unwrap();
    let runs: Vec<&str> = m.iter().map(|x| str_of(&x["run_id"])).collect();
    assert_eq!(runs, ["S", "C"], "{traced:#}");
    assert_eq!(
        (m[0]["step_id"].as_str(), m[0]["workflow"].as_str(), m[0]["version"].as_str()),
        (Some("render"), Some("evidence"), Some("1.0.0"))
    );
    assert_eq!((m[0]["reused_from"].clone(), m[0]["lineage"].clone()), (Value::Null, json!([])));
    assert_eq!((m[1]["reused_from"].clone(), m[1]["lineage"].clone()), (json!("S"), json!(["S"])));
    assert_eq!(m[1]["path"], "steps/render/report.html");
    assert_eq!(m[0]["signature"]["args_hash"], m[1]["signature"]["args_hash"], "the same evidence, the same signature");
    let human = c.raw(&["trace", report.to_str().unwrap()]);
    assert!(human.stdout.contains("reused from S"), "{}", human.stdout);

    // The source's run directory goes away: the child is whole on its own, and a replay of it
    // carries the bytes on (from the child's directory), naming the producer.
    std::fs::remove_dir_all(&src_dir).unwrap();
    assert_on_disk(&c.show("C"));
    let grandchild = c.json(&["replay", "C", "--step", "publish", "--run-id", "G"]).expect(0).json;
    assert_eq!(step(&grandchild, "render")["decision"], "reuse", "{grandchild:#}");
    assert_on_disk(&grandchild);
    let local_copy = c.path("copy-of-report.html");
    std::fs::copy(child_dir.join("steps/render/report.html"), &local_copy).unwrap();
    let traced = c.json(&["trace", local_copy.to_str().unwrap()]).expect(0).json;
    let last = traced["matches"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["run_id"].as_str(), last["reused_from"].as_str()), (Some("G"), Some("S")));
    assert_eq!(last["lineage"], json!(["C", "S"]));

    // Bytes no run recorded: exit 1, saying so.
    std::fs::write(c.path("stranger.txt"), "no run wrote this").unwrap();
    let none = c.json(&["trace", c.path_str("stranger.txt").as_str()]).expect(1);
    assert_eq!(none.json["matches"], json!([]));
    let none = c.raw(&["trace", c.path_str("stranger.txt").as_str()]);
    assert_eq!(none.code, 1);
    assert!(none.stderr.contains("no run recorded"), "{}", none.stderr);
    let missing = c.json(&["trace", c.path_str("nope").as_str()]).expect(2);
    assert!(missing.stderr.contains("cannot be traced"), "{}", missing.stderr);
}

/// Edited (or deleted) bytes are not reused: the producing step is invalidated with its
/// descendants, with a reason that names the output, the step, the run and both hashes, in the
/// dry run, the replay and `explain`; an independent step is still reused.
#[test]
fn a_changed_or_missing_source_artifact_invalidates_its_step_with_the_reason() {
    let c = Cairn::new();
    evidence_workflow(&c);
    let source = c.run("evidence", &input(&c, render_files(MIB)), &["--run-id", "S"]).expect(0).json;
    let report = run_dir(&source).join("steps/render/report.html");
    let recorded = str_of(&artifacts(&source, "render")[3]["sha256"]).to_string();
    std::fs::write(&report, "<h1>edited by hand</h1>").unwrap();
    let edited = sha256_file(&report);
    let want = format!(
        "invalidated: output report of step render changed since run S recorded it (sha256 {}… → {}…)",
        &recorded[..12],
        &edited[..12]
    );

    let dry = c.json(&["replay", "S", "--step", "publish", "--dry-run"]).expect(0).json;
    let decision =
        |d: &Value, id: &str| d["decisions"].as_array().unwrap().iter().find(|x| x["step_id"] == id).cloned().unwrap();
    assert_eq!(decision(&dry, "render")["text"], want.as_str(), "{dry:#}");
    assert_eq!(decision(&dry, "render")["reason"]["kind"], "output_changed");
    assert_eq!(decision(&dry, "notes")["decision"], "reuse");
    assert_eq!(dry["replay"]["invalidated"], json!(["render"]));

    let child = c.json(&["replay", "S", "--step", "publish", "--run-id", "C"]).expect(0).json;
    assert_eq!(step(&child, "render")["reason"], want.as_str());
    assert_eq!(step(&child, "render")["attempts"], 1, "re-executed");
    assert_eq!(step(&child, "notes")["decision"], "reuse");
    let explained = c.json(&["explain", "C", "render"]).expect(0).json;
    assert_eq!(explained["text"], want.as_str());
    // The child's report is the step's own again, freshly recorded; the source is untouched.
    let again = &artifacts(&child, "render")[3];
    assert_eq!((again["sha256"].as_str(), again["reused_from"].clone()), (Some(recorded.as_str()), Value::Null));
    assert_eq!(sha256_file(&report), edited);
    assert_eq!(c.show("S")["steps"], source["steps"], "the source run is never changed");

    // Deleted: `… is missing`.
    std::fs::remove_file(&report).unwrap();
    let dry = c.json(&["replay", "S", "--step", "publish", "--dry-run"]).expect(0).json;
    assert_eq!(
        decision(&dry, "render")["text"],
        "invalidated: output report of step render is missing since run S recorded it (steps/render/report.html)"
    );
}

/// The source on one filesystem (a tmpfs run_dir, planned and approved), the child on another
/// (the state root): each reused artifact is copied, not linked, and checked.
#[test]
fn a_replay_across_filesystems_copies_the_reused_bytes() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        assert!(!ci(), "/dev/shm is needed for the cross-filesystem replay");
        eprintln!("SKIPPED: no /dev/shm");
        return;
    }
    let c = Cairn::new();
    evidence_workflow(&c);
    let scratch = tempfile::Builder::new().prefix("cairn-shm-").tempdir_in(shm).unwrap();
    let run_dir_shm = scratch.path().join("run");
    let input_file = c.input(&input(&c, render_files(MIB)));
    let plan = c.plan("evidence", &input_file, "local", &run_dir_shm, "on-tmpfs").expect(0).json;
    let approved = approval(&plan);
    let source = c.json(&approved.iter().map(String::as_str).collect::<Vec<_>>()).expect(0).json;
    assert_eq!(source["status"], "READY", "{source:#}");
    assert_eq!(run_dir(&source), run_dir_shm);
    let source_id = str_of(&source["run_id"]).to_string();

    let child = c.json(&["replay", &source_id, "--step", "publish", "--run-id", "C"]).expect(0).json;
    assert_eq!(step(&child, "render")["decision"], "reuse", "{child:#}");
    let (a, b) = (run_dir_shm.join("steps/render/data.bin"), run_dir(&child).join("steps/render/data.bin"));
    let (ma, mb) = (std::fs::metadata(&a).unwrap(), std::fs::metadata(&b).unwrap());
    assert_ne!(
        ma.dev(),
        mb.dev(),
        "the source ({}) and the child ({}) are on two filesystems",
        a.display(),
        b.display()
    );
    assert_eq!(mb.nlink(), 1, "a copy, not a link");
    assert_on_disk(&child);
    assert_eq!(artifacts(&child, "render")[0]["reused_from"], source_id.as_str());
}

/// kill -9 of the runner after the tool exited but before its completion was committed (while
/// a 4 GiB sparse output is hashed): the step is still RUNNING with no artifact recorded; the
/// resume runs it again, and the artifact is recorded once, for the attempt that completed.
#[test]
fn kill_dash_nine_between_a_tools_exit_and_its_completion_records_nothing_half() {
    let c = Cairn::new();
    let toml = r#"
[workflow]
name = "hash-crash"
version = "1.0.0"

[tools.make]
command = ["python3", "tools/make.py"]

[[steps]]
id = "big"
tool = "make"
args = { log = "${input.log}", write = { "blob.bin" = "sparse:2147483648" } }
outputs = { blob = "blob.bin" }
"#;
    c.add(&write_workflow(&c.path("hash-crash"), toml, &[("tools/make.py", TOOL)]));
    let input = json!({"log": c.path_str("log")});
    let mut runner = c.spawn(&c.run_args("hash-crash", &input, &["--run-id", "K", "--in-process", "--json"]));
    let log = c.path("log");
    assert!(
        wait_until(Duration::from_secs(60), || log_lines(&log).iter().any(|l| l == "big:end:1")),
        "the tool never finished: {:?}",
        log_lines(&log)
    );
    kill9(&mut runner);

    let shown = c.show("K");
    assert_eq!(step(&shown, "big")["status"], "RUNNING", "the kill came after the commit: {shown:#}");
    assert_eq!(step(&shown, "big")["artifacts"], json!([]));
    assert_eq!(c.json(&["artifacts", "K"]).expect(0).json["artifacts"], json!([]));
    assert!(events_of(&c.events("K"), "step.completed", Some("big")).is_empty());

    let resumed =
        c.run("hash-crash", &input, &["--run-id", "K", "--in-process", "--resume-interrupted"]).expect(0).json;
    assert_eq!(resumed["status"], "READY", "{resumed:#}");
    assert_eq!(step(&resumed, "big")["attempts"], 2);
    assert_eq!(count(&log_lines(&log), "big:start:"), 2, "the uncommitted attempt runs again");
    let recorded = c.json(&["artifacts", "K"]).expect(0).json;
    let all = recorded["artifacts"].as_array().unwrap();
    assert_eq!(all.len(), 1, "{recorded:#}");
    assert_eq!((all[0]["attempt"].as_u64(), all[0]["bytes"].as_u64()), (Some(2), Some(2 << 30)));
    let mut zeros = Sha256::new();
    let block = vec![0u8; 1 << 20];
    for _ in 0..2048 {
        zeros.update(&block);
    }
    assert_eq!(all[0]["sha256"], hex::encode(zeros.finalize()));
}

/// Hashing reads files outside the registry's write lock: while one step's 1 GiB output is being
/// hashed, another step of the same run (started once the first one's tool had exited) completes
/// and is committed first.
#[test]
fn hashing_an_output_does_not_hold_the_registry_while_it_reads() {
    let c = Cairn::new();
    let toml = r#"
[workflow]
name = "lock"
version = "1.0.0"

[tools.make]
command = ["python3", "tools/make.py"]

[tools.wait]
command = ["python3", "tools/wait.py"]

[[steps]]
id = "big"
tool = "make"
args = { log = "${input.log}", write = { "blob.bin" = "sparse:1073741824" } }
outputs = { blob = "blob.bin" }

[[steps]]
id = "quick"
tool = "wait"
args = { log = "${input.log}" }
"#;
    // `quick` waits until `big`'s tool has exited (its end line in the log), then answers.
    let wait = r#"import json, sys, time
args = json.loads(sys.stdin.read())
deadline = time.time() + 60
while time.time() < deadline:
    try:
        with open(args["log"]) as f:
            if "big:end:1" in f.read().splitlines():
                break
    except FileNotFoundError:
        pass
    time.sleep(0.01)
print(json.dumps({"waited": True}))
"#;
    c.add(&write_workflow(&c.path("lock"), toml, &[("tools/make.py", TOOL), ("tools/wait.py", wait)]));
    let run = c.run("lock", &json!({"log": c.path_str("log")}), &["--run-id", "L", "--parallel", "2"]).expect(0).json;
    assert_eq!(run["status"], "READY", "{run:#}");
    let events = c.events("L");
    let seq = |id: &str| events_of(&events, "step.completed", Some(id))[0]["seq"].as_i64().unwrap();
    assert!(seq("quick") < seq("big"), "`quick` committed while `big` was hashed: {events:#?}");
}

/// kill -9 of a replay while it materialises a reused artifact (checking a linked 1 GiB file):
/// the child exists with no step recorded; continued, it materialises again (the half-made file
/// replaced), copies every reused step and artifact once, and finishes.
#[test]
fn kill_dash_nine_while_a_replay_materialises_then_continue() {
    let c = Cairn::new();
    evidence_workflow(&c);
    let mut files = render_files(MIB);
    files["data.bin"] = json!("sparse:1073741824");
    c.run("evidence", &input(&c, files), &["--run-id", "S"]).expect(0);
    let replay = ["replay", "S", "--step", "publish", "--run-id", "C", "--in-process", "--json"];
    let mut runner = c.spawn(&replay);
    assert!(
        wait_until(Duration::from_secs(60), || c.json(&["show", "C"]).code == 0),
        "the child run was never created"
    );
    kill9(&mut runner);
    let shown = c.show("C");
    assert_eq!(shown["status"], "RUNNING", "{shown:#}");
    assert!(
        shown["steps"].as_array().unwrap().iter().all(|s| s["status"] == "PENDING"),
        "the kill came too late: {shown:#}"
    );
    assert_eq!(c.json(&["artifacts", "C"]).expect(0).json["artifacts"], json!([]));

    let mut args = replay.to_vec();
    args.insert(args.len() - 1, "--resume-interrupted");
    let child = c.json(&args[..args.len() - 1]).expect(0).json;
    assert_eq!(child["status"], "READY", "{child:#}");
    assert_eq!(step(&child, "render")["decision"], "reuse");
    assert_eq!(artifacts(&child, "render").len(), 4);
    assert_eq!(events_of(&c.events("C"), "step.replay_reused", Some("render")).len(), 1, "copied once");
    assert_on_disk(&child);
    let leftovers: Vec<String> = std::fs::read_dir(run_dir(&child).join("steps/render"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".cairn-"))
        .collect();
    assert!(leftovers.is_empty(), "a half-made file was left: {leftovers:?}");
}

/// A result over 64 KiB is cut in a run (a string of its first 64 KiB of JSON text, with
/// `result_truncated` and its size) and whole on `cairn result`; the human views show it compact.
#[test]
fn a_result_over_64_kib_is_cut_in_a_run_and_whole_on_its_own() {
    let c = Cairn::new();
    let toml = r#"
[workflow]
name = "results"
version = "1.0.0"

[tools.say]
command = ["python3", "tools/make.py"]

[[steps]]
id = "small"
tool = "say"
args = { result = { verdict = "pass", count = 3 } }

[[steps]]
id = "large"
tool = "say"
args = { result = { big = 100000 } }
"#;
    c.add(&write_workflow(&c.path("results"), toml, &[("tools/make.py", TOOL)]));
    let run = c.run("results", &json!({}), &["--run-id", "R"]).expect(0).json;
    let small = step(&run, "small");
    assert_eq!(small["result"], json!({"verdict": "pass", "count": 3}));
    let text = small["result"].to_string();
    assert_eq!(
        (small["result_truncated"].as_bool(), small["result_bytes"].as_u64()),
        (Some(false), Some(text.len() as u64))
    );

    let whole = json!({"notes": "n".repeat(100_000)}).to_string();
    for shown in [run.clone(), c.show("R")] {
        let large = step(&shown, "large");
        assert_eq!(large["result_truncated"], true);
        assert_eq!(large["result_bytes"], whole.len());
        assert_eq!(large["result"].as_str(), Some(&whole[..64 << 10]), "the first 64 KiB of its JSON text");
    }
    let one = c.json(&["result", "R", "large"]).expect(0).json;
    assert_eq!((one["run_id"].as_str(), one["step_id"].as_str()), (Some("R"), Some("large")));
    assert_eq!(one["result"], json!({"notes": "n".repeat(100_000)}));
    assert_eq!(
        (one["result_truncated"].as_bool(), one["result_bytes"].as_u64()),
        (Some(false), Some(whole.len() as u64))
    );

    let human = c.raw(&["show", "R"]);
    assert!(human.stdout.contains(&format!("result {text}")), "{}", human.stdout);
    assert!(human.stdout.contains("`cairn result` prints it whole"), "{}", human.stdout);
    let human = c.raw(&["result", "R", "small"]);
    assert!(human.stdout.contains("\"verdict\": \"pass\""), "{}", human.stdout);
    let err = c.json(&["result", "R", "nope"]).expect(2);
    assert!(err.stderr.contains("has no step `nope`"), "{}", err.stderr);
}

/// Through the daemon, every surface answers with the same evidence: `cairn show`/`result`/
/// `artifacts`/`trace` and `GET /runs/{id}`, `/runs/{id}/steps/{step}`, `/runs/{id}/artifacts`,
/// `/artifacts?sha256=` (for a Viewer, who changes nothing).
#[test]
fn the_cli_and_the_api_show_the_same_results_and_artifacts() {
    let c = Cairn::new();
    evidence_workflow(&c);
    let run = c.run("evidence", &input(&c, render_files(MIB)), &["--run-id", "A"]).expect(0).json;
    let d = c.daemon();
    let viewer = c.token("viewer");
    let get = |path: &str| {
        let r = http("GET", &format!("{}{path}", d.url), Some(&viewer), None, &[]);
        assert_eq!(r.status, 200, "GET {path}: {}", r.text);
        r.body
    };
    let api_run = get("/runs/A");
    for s in ["render", "notes", "publish"] {
        for field in ["result", "result_truncated", "result_bytes", "artifacts"] {
            assert_eq!(step(&api_run, s)[field], step(&run, s)[field], "GET /runs/A: {s}.{field}");
        }
        let one = get(&format!("/runs/A/steps/{s}"));
        assert_eq!(one, c.json(&["result", "A", s]).expect(0).json, "GET /runs/A/steps/{s} is `cairn result`");
        assert_eq!(one["artifacts"], step(&run, s)["artifacts"]);
    }
    assert_eq!(get("/runs/A/artifacts"), c.json(&["artifacts", "A"]).expect(0).json);
    let report = run_dir(&run).join("steps/render/report.html");
    let sha = sha256_file(&report);
    assert_eq!(get(&format!("/artifacts?sha256={sha}")), c.json(&["trace", report.to_str().unwrap()]).expect(0).json);
    let upper = get(&format!("/artifacts?sha256={}", sha.to_uppercase()));
    assert_eq!(upper["sha256"], sha.as_str());
    let bad = http("GET", &format!("{}/artifacts?sha256=xyz", d.url), Some(&viewer), None, &[]);
    assert_eq!(bad.status, 422, "{}", bad.text);
    assert!(bad.text.contains("not a SHA-256"), "{}", bad.text);
}
