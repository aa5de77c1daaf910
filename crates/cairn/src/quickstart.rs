//! `cairn quickstart`: registers the bundled release-validation example (1.0.0, 1.1.0 and 1.2.0)
//! and runs 1.2.0 twice, once READY and once BLOCKED, so a new user sees the whole loop: what
//! the steps found, the evidence report they wrote (an artifact, with its SHA-256), the verdict.

use std::path::Path;

use cairn_engine::Engine;
use rust_embed::RustEmbed;
use serde_json::json;

use crate::Failure;
use crate::follow::submit_and_follow;
use crate::input::read_input;
use crate::output::{print_json, print_run};
use crate::wire::{SubmitRun, to_value};

/// The example's versions, registered in order; the last is the one the quickstart runs.
const VERSIONS: [&str; 3] = ["1.0.0", "1.1.0", "1.2.0"];
const RUNS: &str = "1.2.0";

#[derive(RustEmbed)]
#[folder = "../../examples/"]
struct Examples;

/// Writes the bundled examples under `<state>/examples`, replacing an older copy.
fn extract(dest: &Path) -> Result<(), Failure> {
    let io = |p: &Path, e: std::io::Error| Failure::usage(format!("{}: {e}", p.display()));
    if dest.exists() {
        std::fs::remove_dir_all(dest).map_err(|e| io(dest, e))?;
    }
    for name in Examples::iter() {
        if name.contains("__pycache__") {
            continue;
        }
        let Some(file) = Examples::get(&name) else { continue };
        let to = dest.join(name.as_ref());
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        std::fs::write(&to, file.data.as_ref()).map_err(|e| io(&to, e))?;
    }
    Ok(())
}

pub fn run(root: &Path, json: bool) -> Result<u8, Failure> {
    let engine = &Engine::open(root)?;
    let dest = engine.state().path().join("examples");
    extract(&dest)?;
    let example = dest.join("release-validation");
    let say = |s: String| {
        if !json {
            eprintln!("{s}");
        }
    };
    say(format!("state root: {}", engine.state().path().display()));
    for version in VERSIONS {
        let added = engine.add_workflow(&crate::input::owner_caller(), &example.join(version))?;
        say(format!(
            "{} release-validation@{version} ({} steps)",
            if added.newly_registered { "registered" } else { "already registered" },
            added.record.spec.steps.len()
        ));
    }
    let mut results = Vec::new();
    for (fixture, expected) in [("ready", "READY"), ("blocked", "BLOCKED")] {
        let input_path = example.join("inputs").join(format!("{fixture}.json"));
        say(format!("\n$ cairn run release-validation@{RUNS} --input {}", input_path.display()));
        let input = read_input(&input_path)?;
        let run = SubmitRun {
            thread_id: "quickstart".into(),
            workflow: Some("release-validation".into()),
            version: Some(RUNS.into()),
            input: Some(input),
            run_id: None,
            replay: None,
            parallel: None,
        };
        let report = submit_and_follow(root, &run, json)?;
        if !json {
            print_run(&report, false);
            for s in &report.run.steps {
                for a in &s.artifacts {
                    eprintln!("  {} wrote {} ({} bytes, sha256 {})", s.step_id, a.path, a.bytes, a.sha256);
                }
            }
        }
        results.push((expected, report));
    }
    let as_expected = results.iter().all(|(expected, r)| r.run.status == *expected);
    if json {
        print_json(&json!({
            "state_root": engine.state().path().display().to_string(),
            "registered": VERSIONS.iter().map(|v| format!("release-validation@{v}")).collect::<Vec<_>>(),
            "runs": results.iter().map(|(_, r)| to_value(&r.run)).collect::<Vec<_>>(),
            "as_expected": as_expected,
        }));
    } else {
        let (ready, blocked) = (&results[0].1.run.run_id, &results[1].1.run.run_id);
        eprintln!("\nNext:");
        eprintln!("  cairn runs                      # every run, newest first");
        eprintln!("  cairn show {blocked}   # the BLOCKED run, its finding and what each step found");
        eprintln!("  cairn artifacts {ready} # the files it wrote, with their SHA-256");
        let evidence = results[0].1.run.steps.iter().flat_map(|s| &s.artifacts).next_back();
        if let Some(a) = evidence {
            let file = Path::new(&results[0].1.run.run_dir).join(&a.path);
            eprintln!("  cairn trace {}   # which run wrote these bytes", file.display());
        }
        eprintln!("  cairn events {ready} # the durable event log");
        eprintln!("  cairn workflow show release-validation@{RUNS}");
        eprintln!("  cairn ui                        # the same runs in the read-only web app");
    }
    Ok(if as_expected { 0 } else { 3 })
}
