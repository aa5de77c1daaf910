//! The registry (immutable, content-addressed name@version, highest version by default) and the
//! bundled quickstart.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::*;

/// A one-step workflow whose tool file reports `tag`; a rule checks the tag, so a READY run proves
/// which registered snapshot ran.
fn versioned(c: &Cairn, folder: &str, version: &str, tag: &str) -> std::path::PathBuf {
    let tool = format!("#!/bin/sh\ncat >/dev/null\necho '{{\"tag\": \"{tag}\"}}'\n");
    let toml = format!(
        r#"
[workflow]
name = "reg"
version = "{version}"

[tools.t]
command = ["tools/t.sh"]

[[steps]]
id = "s"
tool = "t"
args = {{ expect = "${{input.expect}}" }}

[[validator.rules]]
id = "tag"
step = "s"
pointer = "/tag"
op = "eq"
value = "{tag}"
finding = "another snapshot ran"
"#
    );
    write_workflow(&c.path(folder), &toml, &[("tools/t.sh", &tool)])
}

#[test]
fn registration_is_idempotent_immutable_and_versioned() {
    let c = Cairn::new();
    let v1 = versioned(&c, "v1", "1.0.0", "one");

    let first = c.add(&v1);
    assert_eq!(first["name"], "reg");
    assert_eq!(first["version"], "1.0.0");
    assert_eq!(first["registered"], true);
    assert_eq!(first["steps"], 1);
    let digest = first["digest"].as_str().unwrap().to_string();
    assert_eq!(digest.len(), 64);

    // The same content again, also via the file path and from a copy elsewhere: ok, unchanged.
    let again = c.add(&v1);
    assert_eq!(again["registered"], false);
    assert_eq!(again["digest"], digest.as_str());
    assert_eq!(c.add(&v1.join("workflow.toml"))["digest"], digest.as_str());
    let copy = versioned(&c, "copy-of-v1", "1.0.0", "one");
    assert_eq!(c.add(&copy)["digest"], digest.as_str(), "the digest covers content, not location");
    let list = c.json(&["workflow", "list"]).expect(0).json;
    assert_eq!(list["workflows"].as_array().unwrap().len(), 1, "{list}");

    // The same name@version with other content: a conflict, and nothing changes.
    let tool = v1.join("tools/t.sh");
    append(&tool, "# edited\n");
    let conflict = c.json(&["workflow", "add", v1.to_str().unwrap()]).expect(4);
    assert!(conflict.stderr.contains("reg@1.0.0"), "{}", conflict.stderr);
    assert!(conflict.stderr.contains("already registered"), "{}", conflict.stderr);
    assert_eq!(c.json(&["workflow", "list"]).expect(0).json, list);
    assert_eq!(c.json(&["workflow", "show", "reg@1.0.0"]).expect(0).json["digest"], digest.as_str());

    // Two more versions; `run reg` picks the highest by semver (1.10.0 > 1.9.0), not by text
    // and not by registration order.
    c.add(&versioned(&c, "v1-10", "1.10.0", "ten"));
    c.add(&versioned(&c, "v1-9", "1.9.0", "nine"));
    let list = c.json(&["workflow", "list"]).expect(0).json;
    let versions: Vec<&str> =
        list["workflows"].as_array().unwrap().iter().map(|w| w["version"].as_str().unwrap()).collect();
    assert_eq!(versions.len(), 3, "{list}");
    for v in ["1.0.0", "1.9.0", "1.10.0"] {
        assert!(versions.contains(&v), "{list}");
    }
    let shown = c.json(&["workflow", "show", "reg"]).expect(0).json;
    assert_eq!(shown["version"], "1.10.0");
    assert_eq!(shown["order"], json!(["s"]));

    let input = json!({"expect": "any"});
    let latest = c.run("reg", &input, &[]).expect(0);
    assert_eq!(latest.json["version"], "1.10.0");
    assert_eq!(latest.json["status"], "READY", "the 1.10.0 snapshot's tool must have run");

    // Older versions stay runnable, from their own (unedited) snapshot.
    let old = c.run("reg@1.0.0", &input, &[]).expect(0);
    assert_eq!(old.json["version"], "1.0.0");
    assert_eq!(old.json["status"], "READY", "the registered 1.0.0 tool (tag one) must have run: {}", old.stdout);
    let nine = c.run("reg@1.9.0", &input, &[]).expect(0);
    assert_eq!(nine.json["version"], "1.9.0");

    // A run id is bound to its version: the same id and input under another version conflicts.
    c.run("reg@1.0.0", &input, &["--run-id", "pinned"]).expect(0);
    let out = c.run("reg@1.9.0", &input, &["--run-id", "pinned"]).expect(4);
    assert!(out.stderr.contains("ExecutionInputMismatch"), "{}", out.stderr);
    assert_eq!(c.runs().len(), 4);
}

/// A registration refused as a conflict (exit 4) creates nothing: no content-addressed snapshot
/// of the refused content is left under `$CAIRN_HOME/registry`.
#[test]
fn a_refused_registration_leaves_no_snapshot() {
    let c = Cairn::new();
    let v1 = versioned(&c, "v1", "1.0.0", "one");
    c.add(&v1);
    let registry = c.entries("registry");
    assert_eq!(registry.len(), 1);
    append(&v1.join("tools/t.sh"), "# edited\n");
    c.json(&["workflow", "add", v1.to_str().unwrap()]).expect(4);
    assert_eq!(c.entries("registry"), registry, "the refused content's snapshot was left behind");
}

#[test]
fn quickstart_registers_the_example_and_shows_ready_then_blocked() {
    let c = Cairn::new();
    let out = c.json(&["quickstart"]).expect(0);
    let q = &out.json;
    assert_eq!(q["as_expected"], true, "{}", out.stdout);
    assert_eq!(
        q["registered"],
        json!(["release-validation@1.0.0", "release-validation@1.1.0", "release-validation@1.2.0"])
    );
    let runs = q["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["status"], "READY");
    assert_eq!(runs[0]["version"], "1.2.0");
    // The evidence report is recorded, as the file it is: its path, size and SHA-256.
    for r in runs {
        let evidence = step(r, "generate_evidence");
        let names: Vec<&str> =
            evidence["artifacts"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["report", "summary"], "{evidence:#}");
        let summary = &evidence["artifacts"][1];
        let file = Path::new(r["run_dir"].as_str().unwrap()).join(summary["path"].as_str().unwrap());
        let bytes = std::fs::read(&file).unwrap();
        assert_eq!(summary["sha256"], sha256_hex(&bytes), "{}", file.display());
        assert_eq!(summary["bytes"], bytes.len());
        let written: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(written, evidence["result"], "evidence.json holds the step's result");
    }
    assert_eq!(runs[0]["findings"], json!([]));
    assert_eq!(runs[1]["status"], "BLOCKED");
    assert!(!runs[1]["findings"].as_array().unwrap().is_empty());
    for r in runs {
        assert!(r["steps"].as_array().unwrap().iter().all(|s| s["status"] == "COMPLETED"), "{r}");
    }

    // The runs are stored like any other.
    let listed = c.runs();
    assert_eq!(listed.len(), 2);
    let blocked = runs[1]["run_id"].as_str().unwrap();
    let shown = c.json(&["show", blocked]).expect(0).json;
    assert_eq!(shown["status"], "BLOCKED");
    assert_eq!(shown["findings"], runs[1]["findings"]);
    assert_eq!(c.json(&["workflow", "list"]).expect(0).json["workflows"].as_array().unwrap().len(), 3);

    // The example is also registered for `run`: without a version, the highest (1.2.0).
    let shown = c.json(&["workflow", "show", "release-validation"]).expect(0).json;
    assert_eq!(shown["version"], "1.2.0");
}
