//! `cairn export RUN --ro-crate DIR`: a run as a Provenance Run Crate 0.5, validated offline with
//! `roc-validator` (pinned in scripts/requirements-test.txt, from the test venv) at the REQUIRED
//! level with zero skipped checks, and read back with `rocrate` (ro-crate-py). The JSON-LD
//! contexts come from `tests/data/ro-crate/` through a filled requests-cache, never the network.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::evidence::{evidence_workflow, input as evidence_input, render_files, sha256_file};
use crate::support::*;

fn data_dir() -> PathBuf {
    repo().join("crates/cairn/tests/data/ro-crate")
}

/// The test venv's `rocrate-validator`; missing, the test fails (the venv is required).
fn validator() -> PathBuf {
    let bin = venv().join("bin/rocrate-validator");
    assert!(
        bin.exists(),
        "no rocrate-validator in the test venv {} (pip install -r scripts/requirements-test.txt)",
        venv().display()
    );
    bin
}

/// Validates a crate offline at REQUIRED against provenance-run-crate-0.5 (which runs the
/// workflow-run, process-run, workflow-ro-crate and ro-crate checks it inherits): it must pass
/// with zero skipped checks.
#[track_caller]
pub(crate) fn assert_valid(c: &Cairn, dir: &Path) {
    assert_valid_as(c, dir, "provenance-run-crate-0.5")
}

/// Validates a crate offline at REQUIRED against `profile`, with zero skipped checks.
#[track_caller]
fn assert_valid_as(c: &Cairn, dir: &Path, profile: &str) {
    let work = tempfile::tempdir_in(c.path("")).unwrap();
    let cache = work.path().join("http_cache");
    let fill = Command::new(python())
        .arg(data_dir().join("fill-cache.py"))
        .arg(&cache)
        .arg("--contexts")
        .arg(data_dir())
        .output()
        .unwrap();
    assert!(
        fill.status.success(),
        "fill-cache.py: {}{}",
        String::from_utf8_lossy(&fill.stdout),
        String::from_utf8_lossy(&fill.stderr)
    );
    let report = work.path().join("report.json");
    let out = Command::new(validator())
        .args(["--no-interactive", "--disable-color", "validate", "-p", profile, "-l", "REQUIRED"])
        .args(["-f", "json", "-o"])
        .arg(&report)
        .arg("--offline")
        .arg("--cache-path")
        .arg(&cache)
        .arg(dir)
        .env("ROCRATE_VALIDATOR_AUTO_WARM", "0")
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&report).unwrap_or_else(|e| {
        panic!("no report ({e}): {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    let r: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "report unreadable ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let s = &r["statistics"];
    let skipped = r["skipped_checks"].as_u64().unwrap_or(0).max(s["total_skipped_checks"].as_u64().unwrap_or(0));
    let issues: Vec<String> = r["issues"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            format!("{} {}: {} [{}]", i["check"]["identifier"], i["check"]["name"], i["message"], i["violatingEntity"])
        })
        .collect();
    assert!(
        r["passed"] == true && skipped == 0 && out.status.success(),
        "{} does not validate: passed {}, {} skipped, exit {:?}\n{}\n{:#}",
        dir.display(),
        r["passed"],
        skipped,
        out.status.code(),
        issues.join("\n"),
        r["skipped_check_details"]
    );
    assert!(s["total_checks"].as_u64().unwrap() > 20, "too few checks ran: {s}");
}

/// Extracts a zip with Python's zipfile (roc-validator 0.13.0 cannot report on a zip: "Object of
/// type URI is not JSON serializable"), to validate what it holds.
#[track_caller]
pub(crate) fn unzip(file: &Path, to: &Path) {
    let x = Command::new(python())
        .args(["-c", "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])"])
        .arg(file)
        .arg(to)
        .output()
        .unwrap();
    assert!(x.status.success(), "unzip {}: {}", file.display(), String::from_utf8_lossy(&x.stderr));
}

pub(crate) fn export(c: &Cairn, run_id: &str, extra: &[&str]) -> (PathBuf, Value) {
    let dir = c.path(&format!("{run_id}.crate"));
    let mut args = vec!["export", run_id, "--ro-crate", dir.to_str().unwrap()];
    args.extend(extra);
    let out = c.json(&args).expect(0).json;
    assert_eq!(out["path"], dir.display().to_string(), "{out:#}");
    (dir, out)
}

pub(crate) fn metadata(dir: &Path) -> Value {
    read_json(&dir.join("ro-crate-metadata.json"))
}

pub(crate) fn entity<'a>(meta: &'a Value, id: &str) -> &'a Value {
    meta["@graph"].as_array().unwrap().iter().find(|e| e["@id"] == id).unwrap_or_else(|| panic!("no entity {id}"))
}

pub(crate) fn of_type<'a>(meta: &'a Value, ty: &str) -> Vec<&'a Value> {
    meta["@graph"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["@type"] == ty || e["@type"].as_array().is_some_and(|a| a.iter().any(|t| t == ty)))
        .collect()
}

/// Every artifact of the run is a File of the crate with its SHA-256 and size, copied in.
#[track_caller]
pub(crate) fn assert_artifacts_in(run: &Value, dir: &Path, meta: &Value) {
    for s in run["steps"].as_array().unwrap() {
        for a in s["artifacts"].as_array().unwrap() {
            let path = str_of(&a["path"]);
            let f = entity(meta, &path.replace(' ', "%20").replace('#', "%23"));
            assert_eq!(f["sha256"], a["sha256"], "{path}");
            assert_eq!(f["contentSize"], a["bytes"].to_string(), "{path}");
            assert_eq!(sha256_file(&dir.join(path)), str_of(&a["sha256"]), "{path}");
        }
    }
}

fn add_example(c: &Cairn) {
    c.add(&example("1.0.0"));
}

fn example_input(name: &str) -> Value {
    read_json(&example("inputs").join(name))
}

#[test]
fn rocrate_of_a_ready_run_validates_and_names_its_workflow_steps_and_actions() {
    let c = Cairn::new();
    add_example(&c);
    let run = c.run("release-validation", &example_input("ready.json"), &["--run-id", "R1"]).expect(0).json;
    assert_eq!(run["status"], "READY");
    let (dir, out) = export(&c, "R1", &[]);
    assert!(out["files"].as_u64().unwrap() >= 4, "{out:#}");
    assert_valid(&c, &dir);
    let meta = metadata(&dir);
    let wf = entity(&meta, "workflow/workflow.toml");
    for t in ["File", "SoftwareSourceCode", "ComputationalWorkflow", "HowTo"] {
        assert!(wf["@type"].as_array().unwrap().iter().any(|x| x == t), "{wf:#}");
    }
    let steps = run["steps"].as_array().unwrap();
    assert_eq!(of_type(&meta, "HowToStep").len(), steps.len());
    for (i, s) in steps.iter().enumerate() {
        let id = str_of(&s["step_id"]);
        let how = entity(&meta, &format!("#step-{id}"));
        assert_eq!(how["position"], i.to_string());
    }
    assert_eq!(of_type(&meta, "ControlAction").len(), steps.len());
    assert_eq!(of_type(&meta, "OrganizeAction").len(), 1);
    let run_action = entity(&meta, "#run-R1");
    assert_eq!(run_action["actionStatus"]["@id"], "http://schema.org/CompletedActionStatus");
    assert_eq!(read_json(&dir.join("input.json")), example_input("ready.json"));
    assert_artifacts_in(&run, &dir, &meta);
}

#[test]
fn rocrate_of_a_blocked_run_validates_and_carries_its_findings() {
    let c = Cairn::new();
    add_example(&c);
    let run = c.run("release-validation", &example_input("blocked.json"), &["--run-id", "B1"]).json;
    assert_eq!(run["status"], "BLOCKED", "{run:#}");
    let (dir, _) = export(&c, "B1", &[]);
    assert_valid(&c, &dir);
    let meta = metadata(&dir);
    let verdict = read_json(&dir.join("validation.json"));
    assert_eq!(verdict["status"], "BLOCKED");
    assert_eq!(verdict["findings"], run["findings"]);
    assert!(!verdict["findings"].as_array().unwrap().is_empty());
    let v = entity(&meta, "validation.json");
    assert_eq!(v["sha256"], sha256_file(&dir.join("validation.json")));
    assert!(str_of(&entity(&meta, "#run-B1")["description"]).starts_with("BLOCKED"));
}

#[test]
fn rocrate_of_a_failed_run_validates_with_its_failed_attempt_and_unstarted_steps() {
    let c = Cairn::new();
    let toml = format!(
        r#"
[workflow]
name = "fails"
version = "1.0.0"

{}
[[steps]]
id = "first"
tool = "t"
args = {{ plan = "${{input.plan}}", log = "${{input.log}}" }}
max_attempts = 2
retry_on = ["FAILED"]

[[steps]]
id = "after"
tool = "u"
needs = ["first"]
args = {{ log = "${{input.log}}" }}
"#,
        tool_toml("t", "timeout_secs = 30") + &tool_toml("u", "timeout_secs = 30")
    );
    c.add(&write_workflow(&c.path("fails"), &toml, &tool_files()));
    let run =
        c.run("fails", &json!({"plan": ["exit:3", "exit:1"], "log": c.path_str("log")}), &["--run-id", "F1"]).json;
    assert_eq!(run["status"], "FAILED", "{run:#}");
    let (dir, _) = export(&c, "F1", &[]);
    assert_valid(&c, &dir);
    let meta = metadata(&dir);
    assert_eq!(entity(&meta, "#run-F1")["actionStatus"]["@id"], "http://schema.org/FailedActionStatus");
    // Both attempts are actions of their own, each with its error, orchestrated by the step.
    for (n, code) in [(1, 3), (2, 1)] {
        let attempt = entity(&meta, &format!("#run-F1-step-first-attempt-{n}"));
        assert_eq!(attempt["actionStatus"]["@id"], "http://schema.org/FailedActionStatus");
        let wanted = format!("exited with code {code}");
        assert!(attempt["error"].as_str().is_some_and(|e| e.contains(&wanted)), "{attempt:#}");
        assert!(attempt["endTime"].is_string(), "{attempt:#}");
    }
    let objects = &entity(&meta, "#control-F1-first")["object"];
    assert_eq!(objects, &json!([{"@id": "#run-F1-step-first-attempt-1"}, {"@id": "#run-F1-step-first-attempt-2"}]));
    // The step that never started is a HowToStep of the workflow without an attempt.
    entity(&meta, "#step-after");
    let graph = meta["@graph"].as_array().unwrap();
    assert!(!graph.iter().any(|e| e["@id"] == "#control-F1-after"), "no ControlAction without an attempt");
    assert!(graph.iter().any(|e| e["@id"] == "#control-F1-first"));
}

#[test]
fn rocrate_of_folder_artifacts_and_a_replay_child_of_a_child_validates_and_points_to_the_producers() {
    let c = Cairn::new();
    evidence_workflow(&c);
    let mut files = render_files(1024);
    files["plots/by region/eu #2.png"] = json!("text:eu2");
    let run = c.run("evidence", &evidence_input(&c, files), &["--run-id", "E1"]).expect(0).json;
    assert_eq!(run["status"], "READY", "{run:#}");
    let (dir, out) = export(&c, "E1", &[]);
    assert_valid(&c, &dir);
    let meta = metadata(&dir);
    assert_artifacts_in(&run, &dir, &meta);
    assert_eq!(out["artifacts"], 7, "{out:#}");
    entity(&meta, "steps/render/plots/by-region/eu.png");
    // A name with a space and a `#` is a percent-encoded id of the file as named.
    assert_eq!(
        entity(&meta, "steps/render/plots/by%20region/eu%20%232.png")["name"],
        "steps/render/plots/by region/eu #2.png"
    );
    assert!(dir.join("steps/render/plots/by region/eu #2.png").is_file());

    c.json(&["replay", "E1", "--step", "publish", "--run-id", "E2"]).expect(0);
    let e3 = c.json(&["replay", "E2", "--step", "notes", "--run-id", "E3"]).expect(0).json;
    assert_eq!(e3["status"], "READY", "{e3:#}");
    let shown = c.show("E3");
    let (dir, _) = export(&c, "E3", &[]);
    assert_valid(&c, &dir);
    let meta = metadata(&dir);
    assert_artifacts_in(&shown, &dir, &meta);
    // render was executed by E1 (reused twice), publish by E2, notes by E3.
    for (step, producer) in [("render", "E1"), ("publish", "E2"), ("notes", "E3")] {
        let control = entity(&meta, &format!("#control-E3-{step}"));
        let action = format!("#run-{producer}-step-{step}-attempt-1");
        assert_eq!(control["object"]["@id"], action, "{step}: {control:#}");
        entity(&meta, &action);
        let decision = str_of(&control["description"]);
        assert!(decision.starts_with(if step == "notes" { "replay" } else { "reuse" }), "{step}: {decision}");
    }
    assert!(str_of(&entity(&meta, "#run-E3")["description"]).contains("E2 <- E1"));

    // Read back with ro-crate-py: the same entities and the files' hashes.
    let script = r#"
import hashlib, json, sys
from rocrate.rocrate import ROCrate
crate = ROCrate(sys.argv[1])
out = {}
for e in crate.get_entities():
    t = e.type if isinstance(e.type, list) else [e.type]
    out[e.id] = {"type": t, "sha256": e.get("sha256")}
print(json.dumps({"root": crate.root_dataset.id, "main": crate.mainEntity.id, "entities": out}))
"#;
    let read = Command::new(python()).arg("-c").arg(script).arg(&dir).output().unwrap();
    assert!(read.status.success(), "rocrate: {}", String::from_utf8_lossy(&read.stderr));
    let back: Value = serde_json::from_slice(&read.stdout).unwrap();
    assert_eq!(back["main"], "workflow/workflow.toml", "{back:#}");
    let entities = back["entities"].as_object().unwrap();
    for s in shown["steps"].as_array().unwrap() {
        for a in s["artifacts"].as_array().unwrap() {
            let path = str_of(&a["path"]);
            let id = path.replace(' ', "%20").replace('#', "%23");
            assert_eq!(entities[&id]["sha256"], a["sha256"], "{path}");
            assert_eq!(sha256_file(&dir.join(path)), str_of(&a["sha256"]));
        }
    }
    assert!(entities["#run-E3"]["type"].as_array().unwrap().iter().any(|t| t == "CreateAction"));
}

#[test]
fn rocrate_export_refuses_an_existing_destination_and_an_unknown_run() {
    let c = Cairn::new();
    add_example(&c);
    c.run("release-validation", &example_input("ready.json"), &["--run-id", "R1"]).expect(0);
    let (dir, _) = export(&c, "R1", &[]);
    let again = c.json(&["export", "R1", "--ro-crate", dir.to_str().unwrap()]);
    assert_ne!(again.code, 0);
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);
    let missing = c.json(&["export", "nope", "--ro-crate", &c.path_str("x")]);
    assert_eq!(missing.code, 2, "{}", missing.stderr);
}

#[test]
fn rocrate_without_data_references_the_artifacts_by_path_and_hash_and_validates() {
    let c = Cairn::new();
    evidence_workflow(&c);
    let run = c.run("evidence", &evidence_input(&c, render_files(1024)), &["--run-id", "N1"]).expect(0).json;
    let (dir, out) = export(&c, "N1", &["--no-data"]);
    assert_eq!(out["artifacts"], 0, "{out:#}");
    assert!(!dir.join("steps").exists(), "no artifact is copied without data");
    assert_valid(&c, &dir);
    let meta = metadata(&dir);
    let run_dir = PathBuf::from(str_of(&run["run_dir"]));
    for s in run["steps"].as_array().unwrap() {
        for a in s["artifacts"].as_array().unwrap() {
            let id = format!("file://{}", run_dir.join(str_of(&a["path"])).display());
            assert_eq!(entity(&meta, &id)["sha256"], a["sha256"], "{id}");
        }
    }
}

#[test]
fn rocrate_as_a_zip_holds_the_same_crate_and_validates() {
    let c = Cairn::new();
    add_example(&c);
    c.run("release-validation", &example_input("ready.json"), &["--run-id", "Z1"]).expect(0);
    let file = c.path("Z1.zip");
    let out = c.json(&["export", "Z1", "--zip", file.to_str().unwrap()]).expect(0).json;
    assert_eq!(out["path"], file.display().to_string(), "{out:#}");
    assert_eq!(out["bytes"], std::fs::metadata(&file).unwrap().len());
    let left: Vec<String> = std::fs::read_dir(c.path(""))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".Z1.zip.partial"))
        .collect();
    assert!(left.is_empty(), "the staging directory and partial zip are removed: {left:?}");
    let unzipped = c.path("Z1.unzipped");
    unzip(&file, &unzipped);
    assert_valid(&c, &unzipped);
    let list = Command::new(python())
        .args(["-c", "import sys, zipfile; print('\\n'.join(zipfile.ZipFile(sys.argv[1]).namelist()))"])
        .arg(&file)
        .output()
        .unwrap();
    let names = String::from_utf8_lossy(&list.stdout);
    assert!(names.lines().any(|l| l == "ro-crate-metadata.json"), "{names}");
    assert!(names.lines().any(|l| l == "workflow/workflow.toml"), "{names}");
}

/// An export to a zip killed (SIGKILL) while it deflates: no zip at its destination, only the
/// partial zip beside it, which the next export of that destination removes before it writes a
/// whole one.
#[test]
fn rocrate_zip_killed_while_zipping_leaves_no_zip_and_the_next_one_is_whole() {
    let c = Cairn::new();
    evidence_workflow(&c);
    let mut files = render_files(1);
    files["data.bin"] = json!(format!("zeros:{}", 256u64 << 20));
    c.run("evidence", &evidence_input(&c, files), &["--run-id", "KZ"]).expect(0);
    let file = c.path("KZ.zip");
    let partial = || {
        std::fs::read_dir(c.path(""))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().ends_with(".zip") && p.to_string_lossy().contains("/.KZ.zip.partial-"))
    };
    let mut child = c.spawn(&["export", "KZ", "--zip", file.to_str().unwrap()]);
    assert!(wait_until(std::time::Duration::from_secs(60), || partial().is_some()), "the zip was never begun");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    let left = partial().expect("the killed export's partial zip should be what is left");
    assert!(std::fs::symlink_metadata(&file).is_err(), "a killed export left a zip at {}", file.display());

    let out = c.json(&["export", "KZ", "--zip", file.to_str().unwrap()]).expect(0).json;
    assert_eq!(out["bytes"], std::fs::metadata(&file).unwrap().len());
    assert!(!left.exists() && partial().is_none(), "the next export removed the leftover");
    let unzipped = c.path("KZ.unzipped");
    unzip(&file, &unzipped);
    assert_valid(&c, &unzipped);
}

/// An export killed (SIGKILL) while it copies a large artifact leaves no crate at its destination,
/// only its hidden staging directory; the next export of that destination starts afresh, removes
/// it, and writes a whole crate that validates.
#[test]
fn rocrate_export_killed_midway_leaves_no_crate_and_the_next_one_is_whole() {
    let c = Cairn::new();
    evidence_workflow(&c);
    let mut files = render_files(1);
    files["data.bin"] = json!(format!("sparse:{}", 512u64 << 20));
    c.run("evidence", &evidence_input(&c, files), &["--run-id", "K"]).expect(0);
    let dir = c.path("K.crate");
    // The staging directory is `.K.crate.partial-<pid>-<token>`, beside the destination.
    let staging = || {
        std::fs::read_dir(c.path(""))
            .unwrap()
            .flatten()
            .find(|e| e.file_name().to_string_lossy().starts_with(".K.crate.partial-"))
            .map(|e| e.path())
    };
    let mut child = c.spawn(&["export", "K", "--ro-crate", dir.to_str().unwrap()]);
    assert!(wait_until(std::time::Duration::from_secs(30), || staging().is_some()), "the export never started");
    let killed = staging().unwrap();
    let named = killed.file_name().unwrap().to_string_lossy().into_owned();
    assert!(named.starts_with(&format!(".K.crate.partial-{}-", child.id())), "named after its process: {named}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    assert!(std::fs::symlink_metadata(&dir).is_err(), "a killed export left a crate at {}", dir.display());
    assert!(killed.exists(), "the killed export's staging directory should be what is left");

    let (dir, _) = export(&c, "K", &[]);
    assert!(!killed.exists(), "the next export removed the leftover");
    assert!(staging().is_none(), "no staging directory is left after a whole export");
    assert_valid(&c, &dir);
    assert_artifacts_in(&c.show("K"), &dir, &metadata(&dir));
}

/// The files a run reads from outside its run directory are Files of the crate with their
/// SHA-256 and size, copied in under `inputs/` and named as objects of the run's action: a
/// planned run's bound by the plan's checksum, a direct run's hashed when exported (and said
/// so); one changed since the run is referenced with the recorded hash, not copied.
#[test]
fn rocrate_carries_the_input_files_with_their_hashes_and_says_which_changed() {
    let c = Cairn::new();
    evidence_workflow(&c);
    let data = c.path("data/samples.csv");
    std::fs::create_dir_all(data.parent().unwrap()).unwrap();
    std::fs::write(&data, "sample,reads\nA,120\nB,98\n").unwrap();
    let (sha, size) = (sha256_file(&data), std::fs::metadata(&data).unwrap().len().to_string());
    let mut input = evidence_input(&c, render_files(16));
    input["data"] = json!(data.to_str().unwrap());

    // Planned and executed here: the plan bound the file.
    let input_file = c.input(&input);
    let plan = c.plan("evidence", &input_file, "local", &c.path("planned-run"), "planned").expect(0).json;
    assert_eq!(plan["inputs"][0]["sha256"], sha.as_str(), "{plan:#}");
    let argv = approval(&plan);
    let run = c.json(&argv.iter().map(String::as_str).collect::<Vec<_>>()).expect(0).json;
    let run_id = str_of(&run["run_id"]).to_string();
    let (dir, out) = export(&c, &run_id, &[]);
    assert_eq!(out["input_files"], 1, "{out:#}");
    assert_valid(&c, &dir);
    let meta = metadata(&dir);
    let rel = format!("inputs{}", data.display());
    let f = entity(&meta, &rel);
    assert_eq!((f["sha256"].as_str(), f["contentSize"].as_str()), (Some(sha.as_str()), Some(size.as_str())), "{f:#}");
    assert_eq!(f["name"], data.to_str().unwrap());
    assert!(f.get("description").is_none(), "bound by the plan, nothing to say: {f:#}");
    assert_eq!(sha256_file(&dir.join(&rel)), sha);
    let objects = &entity(&meta, &format!("#run-{run_id}"))["object"];
    assert!(objects.as_array().unwrap().iter().any(|o| o["@id"] == rel.as_str()), "{objects:#}");

    // Run directly: nothing recorded its bytes, so the export hashes it and says so.
    let direct = c.run("evidence", &input, &["--run-id", "D1"]).expect(0).json;
    assert_eq!(direct["status"], "READY");
    let (dir, _) = export(&c, "D1", &[]);
    assert_valid(&c, &dir);
    let f = entity(&metadata(&dir), &rel).clone();
    assert_eq!(f["sha256"], sha.as_str());
    assert!(str_of(&f["description"]).contains("hashed when exported"), "{f:#}");

    // Changed since the planned run read it: referenced by path and the recorded hash.
    std::fs::write(&data, "sample,reads\nA,121\n").unwrap();
    let dir = c.path("no-data.crate");
    let out = c.json(&["export", &run_id, "--ro-crate", dir.to_str().unwrap(), "--no-data"]).expect(0).json;
    assert_eq!(out["input_files"], 0, "{out:#}");
    assert_valid(&c, &dir);
    let f = entity(&metadata(&dir), &format!("file://{}", data.display())).clone();
    assert_eq!(f["sha256"], sha.as_str(), "the recorded hash: {f:#}");
    let dir = c.path("changed.crate");
    c.json(&["export", &run_id, "--ro-crate", dir.to_str().unwrap()]).expect(0);
    let f = entity(&metadata(&dir), &format!("file://{}", data.display())).clone();
    assert!(str_of(&f["description"]).contains("changed since the run read it"), "{f:#}");
    assert!(!dir.join(&rel).exists(), "a changed input is not copied");
    assert_valid(&c, &dir);
}

/// `cairn export --verification ID`: a Process Run Crate of the notebook run — the document as
/// verified, the notebook it proved (or, failed, the failed notebook and the draft), the kernel's
/// environment hash as the notebook records it, the parameters as objects — validated like a run's.
#[test]
fn rocrate_of_a_verification_names_its_document_notebook_environment_and_parameters() {
    use crate::verify::h::{Verdict, Verify};
    let v = Verify::new();
    let doc = v.doc(
        "report.md",
        "# Report\n\n```python tags=[\"parameters\"]\nalpha = 1\n```\n\n```python\nprint(alpha * 2)\n```\n",
    );
    let out = v.verify(&[doc.to_str().unwrap(), "-p", "alpha", "21"]).expect(0);
    let id = str_of(&out.json["verification_id"]).to_string();
    let dir = v.path("verification.crate");
    let done = v.c.json(&["export", "--verification", &id, "--ro-crate", dir.to_str().unwrap()]).expect(0).json;
    assert_eq!(done["verification_id"], id.as_str(), "{done:#}");
    assert!(done.get("run_id").is_none(), "{done:#}");
    assert_valid_as(&v.c, &dir, "process-run-crate-0.5");
    let meta = metadata(&dir);
    let action = entity(&meta, &format!("#verification-{id}"));
    assert_eq!(action["actionStatus"]["@id"], "http://schema.org/CompletedActionStatus");
    let document = entity(&meta, "document/report.md");
    assert_eq!(document["sha256"], out.json["document_sha256"], "{document:#}");
    assert_eq!(sha256_file(&dir.join("document/report.md")), sha256_file(&doc));
    let nb_name = out.notebook().file_name().unwrap().to_string_lossy().into_owned();
    let nb = entity(&meta, &format!("notebook/{nb_name}"));
    assert_eq!(nb["sha256"], sha256_file(&out.notebook()), "the very notebook it proved");
    assert!(action["result"].as_array().unwrap().iter().any(|r| r["@id"] == nb["@id"]), "{action:#}");
    let kept = read_json(&out.notebook());
    let env = str_of(&kept["metadata"]["cairn"]["environment_sha256"]);
    assert_eq!(env.len(), 64, "the notebook records its kernel's environment hash: {kept:#}");
    assert_eq!(entity(&meta, "#kernel-environment")["value"], env);
    assert!(action["instrument"].as_array().unwrap().iter().any(|i| i["@id"] == "#kernel"), "{action:#}");
    let alpha = entity(&meta, "#parameter-alpha");
    assert_eq!((alpha["name"].as_str(), alpha["value"].as_str()), (Some("alpha"), Some("21")), "{alpha:#}");
    assert_eq!(read_json(&dir.join("verification.json"))["verdict"], "passed");

    // A failed verification: the failed notebook and the draft, and the error.
    let bad = v.doc("bad.md", "# Bad\n\n```python\nraise ValueError('boom')\n```\n");
    let failed = v.verify(&[bad.to_str().unwrap()]).expect(1);
    let fid = str_of(&failed.json["verification_id"]).to_string();
    let file = v.path("failed.zip");
    v.c.json(&["export", "--verification", &fid, "--zip", file.to_str().unwrap()]).expect(0);
    let unzipped = v.path("failed.unzipped");
    unzip(&file, &unzipped);
    assert_valid_as(&v.c, &unzipped, "process-run-crate-0.5");
    let meta = metadata(&unzipped);
    let action = entity(&meta, &format!("#verification-{fid}"));
    assert_eq!(action["actionStatus"]["@id"], "http://schema.org/FailedActionStatus");
    assert!(str_of(&action["error"]).contains("ValueError"), "{action:#}");
    entity(&meta, "notebook/bad.ipynb");
    entity(&meta, "draft/bad.md");
    let unknown = v.c.json(&["export", "--verification", "nope", "--ro-crate", v.path("x").to_str().unwrap()]);
    assert_eq!(unknown.code, 2, "{}", unknown.stderr);
    assert!(!v.path("x").exists());
}
