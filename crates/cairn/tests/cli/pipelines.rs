//! Real Snakemake pipelines, unchanged, as Cairn steps: each pipeline of
//! `tests/fixtures/pipelines/` (a bare folder with its inputs, the standardized layout with its
//! config overridden by the run input, a checkpoint, `temp()` files, `retries:`, `threads:`) runs
//! under Cairn in its working copy, and under plain `snakemake` in a copy of the same folder; what
//! each wrote is compared file by file, and what Cairn recorded as artifacts is exactly what the
//! pipeline created or changed. Planned, on this machine and on the SSH target, the run's config
//! is approved as a file of the plan, and a samplesheet at an absolute path is bound by its
//! checksum.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::controllers::{Fx, venv_bin};
use crate::evidence::sha256_file;
use crate::support::*;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pipelines");

/// Every file below `dir` (its path relative to `dir` and its SHA-256), but the top-level
/// entries `skip`.
pub(crate) fn tree(dir: &Path, skip: &[&str]) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, skip: &[&str], out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            if skip.contains(&rel.as_str()) {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                walk(root, &e.path(), skip, out);
            } else {
                out.insert(rel, sha256_file(&e.path()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, skip, &mut out);
    out
}

/// The pipeline `name` run by plain `snakemake` in a copy of its folder, as a user would in a
/// checkout: the copy, with what it wrote.
fn plain_snakemake(fx: &Fx, name: &str, label: &str, snakefile: &str, cores: u64, config: Option<&Value>) -> PathBuf {
    let dir = fx.p(&format!("plain-{label}"));
    copy_dir(&Path::new(FIXTURES).join(name), &dir);
    let bin = venv_bin().expect("the venv's snakemake");
    let mut cmd = Command::new(bin.join("snakemake"));
    cmd.current_dir(&dir).args(["--snakefile", snakefile, "--cores", &cores.to_string(), "--nocolor"]);
    if let Some(config) = config {
        let file = fx.p(&format!("plain-{label}-config.json"));
        std::fs::write(&file, config.to_string()).unwrap();
        cmd.arg("--configfile").arg(&file);
    }
    cmd.env("PATH", &fx.path);
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "plain snakemake of {name} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    // Its log beside it: the jobs it ran.
    std::fs::write(plain_log(&dir), &out.stderr).unwrap();
    dir
}

/// Where [`plain_snakemake`] keeps the log of its run in `dir`.
fn plain_log(dir: &Path) -> PathBuf {
    dir.with_extension("snakemake.log")
}

/// A pipeline step's jobs (`cairn jobs --json`) are the jobs plain snakemake ran in `plain`, and
/// each job's hashed outputs are the bytes its step recorded as artifacts (where the job wrote
/// the file and nothing changed it after).
#[track_caller]
fn jobs_are_plain_snakemakes(fx: &Fx, run_id: &str, plain: &Path, label: &str) {
    let jobs = fx.json(&["jobs", run_id, "pipeline"]).expect(0).json;
    let plain_jobs = crate::jobs::plain_job_keys(&std::fs::read_to_string(plain_log(plain)).unwrap());
    assert_eq!(crate::jobs::job_keys(&jobs), plain_jobs, "{label}: Cairn's jobs are plain snakemake's");
    let run = fx.c.show(run_id);
    for a in step(&run, "pipeline")["artifacts"].as_array().unwrap() {
        let Some(job) = a.get("job") else { continue };
        let listed =
            jobs["jobs"].as_array().unwrap().iter().find(|j| j["job"] == job["job"] && j["attempt"] == job["attempt"]);
        let file = listed.and_then(|j| j["files"].as_array().unwrap().iter().find(|f| f["path"] == a["name"]));
        if let Some(sha) = file.and_then(|f| f["sha256"].as_str()) {
            assert_eq!(sha, str_of(&a["sha256"]), "{label}: {} as its job left it", a["name"]);
        }
    }
}

/// The step's artifacts as `name → sha256`.
fn artifacts_of(run: &Value) -> BTreeMap<String, String> {
    step(run, "pipeline")["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (str_of(&a["name"]).to_string(), str_of(&a["sha256"]).to_string()))
        .collect()
}

/// What a pipeline run left in `dir` beyond its own folder: the files it created or changed.
fn created_or_changed(dir: &Path, name: &str) -> BTreeMap<String, String> {
    let original = tree(&Path::new(FIXTURES).join(name), &[]);
    tree(dir, &[".snakemake"]).into_iter().filter(|(p, sha)| original.get(p) != Some(sha)).collect()
}

struct Shape {
    name: &'static str,
    snakefile: &'static str,
    cores: u64,
    input: Value,
    config: Option<Value>,
}

fn shapes() -> Vec<Shape> {
    let config = json!({"punctuation": "!", "samples": ["ada", "grace", "hedy"]});
    vec![
        Shape { name: "bare", snakefile: "Snakefile", cores: 2, input: json!({}), config: None },
        Shape {
            name: "standard",
            snakefile: "workflow/Snakefile",
            cores: 2,
            input: json!({"config": config}),
            config: Some(config),
        },
        Shape { name: "checkpoint", snakefile: "Snakefile", cores: 2, input: json!({}), config: None },
        Shape { name: "retries", snakefile: "Snakefile", cores: 1, input: json!({}), config: None },
        Shape { name: "threads", snakefile: "Snakefile", cores: 3, input: json!({}), config: None },
        Shape { name: "cluster", snakefile: "Snakefile", cores: 2, input: json!({}), config: None },
    ]
}

/// Each shape runs under Cairn as it runs under plain Snakemake: the same files, byte for byte,
/// and the files it created or changed are the step's artifacts, listed in its result.
/// Here (`cairn run`) or on the SSH target (planned and approved, the process executor).
fn every_shape_as_plain_snakemake(fx: &Fx, target: Option<&str>) {
    for shape in shapes() {
        let name = shape.name;
        let dir = fx.p(name);
        if !dir.exists() {
            copy_dir(&Path::new(FIXTURES).join(name), &dir);
            fx.json(&["workflow", "add", dir.to_str().unwrap()]).expect(0);
        }
        let run = match target {
            None => {
                fx.json(
                    &fx.c
                        .run_args(name, &shape.input, &["--run-id", name])
                        .iter()
                        .map(String::as_str)
                        .collect::<Vec<_>>(),
                )
                .expect(0)
                .json
            }
            Some(t) => {
                let label = format!("{name}-{t}");
                let plan = fx.plan(name, &shape.input, t, &fx.p(&format!("ws/{label}")), &label).expect(0).json;
                fx.execute(&plan).expect(0).json
            }
        };
        assert_eq!(run["status"], "READY", "{name}: {run:#}");
        let run_id = str_of(&run["run_id"]).to_string();
        let work = PathBuf::from(str_of(&run["run_dir"])).join("steps/pipeline");

        let label = format!("{name}-{}", target.unwrap_or("here"));
        let plain = plain_snakemake(fx, name, &label, shape.snakefile, shape.cores, shape.config.as_ref());
        // Cairn's definition of the workflow is not a file of the pipeline: not in its copy.
        let theirs = tree(&plain, &[".snakemake", "workflow.toml"]);
        let ours = tree(&work, &[".snakemake", ".cairn"]);
        assert_eq!(ours, theirs, "{name}: Cairn's working copy and plain snakemake's folder differ");
        jobs_are_plain_snakemakes(fx, &run_id, &plain, &label);

        let created = created_or_changed(&work, name);
        let created: BTreeMap<String, String> =
            created.into_iter().filter(|(p, _)| !p.starts_with(".cairn/")).collect();
        assert!(!created.is_empty(), "{name}: the pipeline wrote nothing");
        assert_eq!(artifacts_of(&run), created, "{name}: the artifacts are what the pipeline created or changed");
        let result = &step(&run, "pipeline")["result"];
        let listed: BTreeMap<String, String> = result["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (str_of(&o["name"]).to_string(), str_of(&o["sha256"]).to_string()))
            .collect();
        assert_eq!(listed, created, "{name}: the result lists them: {result:#}");
        assert_eq!(result["jobs"]["failed"], 0, "{name}: {result:#}");
        assert_eq!(result["jobs"]["done"], result["jobs"]["total"], "{name}: {result:#}");

        // Snakemake's jobs are events of the step: each job that started finished (or, with
        // `retries:`, failed and was restarted), and the last says how many were done of all.
        let events = fx.c.events(&run_id);
        let of = |kind: &str| -> Vec<Value> {
            events_of(&events, kind, Some("pipeline")).into_iter().map(|e| e["data"].clone()).collect()
        };
        let (started, finished, failed) =
            (of("pipeline.job_started"), of("pipeline.job_finished"), of("pipeline.job_failed"));
        let total = result["jobs"]["total"].as_u64().unwrap();
        assert_eq!(finished.len() as u64, total, "{name}: one job_finished per job: {finished:#?}");
        assert_eq!(started.len(), finished.len() + failed.len(), "{name}: every start ended: {events:#?}");
        assert!(failed.iter().all(|f| f["restarted"] == true), "{name}: {failed:#?}");
        assert_eq!(finished.last().unwrap()["done"], total, "{name}");
        assert_eq!(finished.last().unwrap()["total"], total, "{name}");
        let rules: std::collections::BTreeSet<&str> = finished.iter().map(|f| str_of(&f["rule"])).collect();
        assert!(rules.len() > 1 || total == 1, "{name}: {rules:?}");

        // What each shape is about.
        match name {
            "bare" => {
                assert!(!work.join("results/counts").exists(), "temp() outputs are gone");
                assert_eq!(
                    std::fs::read_to_string(work.join("results/report.txt")).unwrap(),
                    "alpha: 3 lines, first: alpha one\nbeta: 2 lines, first: beta one\n"
                );
            }
            "standard" => assert_eq!(
                std::fs::read_to_string(work.join("results/greeted/hedy.txt")).unwrap(),
                "Good morning, hedy!\n",
                "the run input's config overrides config/config.yaml"
            ),
            "checkpoint" => {
                assert_eq!(
                    std::fs::read_to_string(work.join("results/joined.txt")).unwrap(),
                    "PART 1\nPART 2\nPART 3\n"
                )
            }
            "retries" => {
                assert_eq!(std::fs::read_to_string(work.join("attempts.txt")).unwrap(), "3\n");
                assert_eq!(failed.len(), 2, "two failures, each restarted: {failed:#?}");
                assert_eq!(started.len(), 3);
                assert_eq!(step(&run, "pipeline")["attempts"], 1, "Snakemake retried the rule, not Cairn the step");
            }
            "threads" => {
                assert_eq!(std::fs::read_to_string(work.join("results/threads.txt")).unwrap(), "3 threads\n")
            }
            _ => {}
        }
    }
}

#[test]
fn every_pipeline_shape_writes_what_plain_snakemake_writes() {
    let Some(fx) = Fx::new() else { return };
    every_shape_as_plain_snakemake(&fx, None);
    fx.stop_daemon();
}

#[test]
fn every_pipeline_shape_on_the_ssh_target_writes_what_plain_snakemake_writes() {
    let Some(fx) = Fx::new() else { return };
    let Some(d) = sshd() else { return };
    let target = fx.add_target(&d);
    every_shape_as_plain_snakemake(&fx, Some(target));
    fx.stop_daemon();
}

/// Planned (here and on the SSH target): the run input's config is a file of the plan, with its
/// checksum, written by the approval; the pipeline runs on the target as plain snakemake would.
fn planned_with_config(fx: &Fx, target: &str) {
    let dir = fx.p("standard");
    if !dir.exists() {
        copy_dir(&Path::new(FIXTURES).join("standard"), &dir);
        fx.json(&["workflow", "add", dir.to_str().unwrap()]).expect(0);
    }
    std::fs::create_dir_all(fx.p("ws")).unwrap();
    let run_dir = fx.p(&format!("ws/standard-{target}"));
    let config = json!({"punctuation": "?", "samples": ["kay"]});
    let plan =
        fx.plan("standard", &json!({"config": config}), target, &run_dir, &format!("std-{target}")).expect(0).json;
    let bytes = serde_json::to_string(&config).unwrap();
    let written: Vec<&Value> = plan["effects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["path"] == "steps/pipeline/.cairn/config.json")
        .collect();
    assert_eq!(written.len(), 1, "the plan writes the run's config: {:#}", plan["effects"]);
    assert_eq!(written[0]["sha256"], sha256_hex(bytes.as_bytes()), "{:#}", written[0]);
    let argv = plan["commands"][0]["argv"].as_array().unwrap();
    assert_eq!(argv.last().unwrap(), run_dir.join("steps/pipeline/.cairn/config.json").to_str().unwrap(), "{argv:?}");

    let run = fx.execute(&plan).expect(0).json;
    assert_eq!(run["status"], "READY", "{run:#}");
    let work = run_dir.join("steps/pipeline");
    assert_eq!(std::fs::read_to_string(work.join(".cairn/config.json")).unwrap(), bytes);
    assert_eq!(std::fs::read_to_string(work.join("results/greeted/kay.txt")).unwrap(), "Good morning, kay?\n");
    let plain = plain_snakemake(fx, "standard", &format!("standard-{target}"), "workflow/Snakefile", 2, Some(&config));
    assert_eq!(tree(&work, &[".snakemake", ".cairn"]), tree(&plain, &[".snakemake", "workflow.toml"]));
    assert_eq!(artifacts_of(&run).keys().collect::<Vec<_>>(), ["results/greeted/kay.txt"]);
}

#[test]
fn a_planned_pipeline_gets_its_config_from_the_plan_here_and_on_the_ssh_target() {
    let Some(fx) = Fx::new() else { return };
    planned_with_config(&fx, "local");
    if let Some(d) = sshd() {
        let target = fx.add_target(&d);
        planned_with_config(&fx, target);
    }
    fx.stop_daemon();
}

/// A samplesheet at an absolute path, named by the run input's config, stays where it is: the
/// plan binds its checksum, the pipeline reads it there, and a samplesheet changed after planning
/// refuses the approval (exit 4), creating nothing.
#[test]
fn a_samplesheet_at_an_absolute_path_is_bound_by_its_checksum() {
    let Some(fx) = Fx::new() else { return };
    let dir = fx.p("samples");
    copy_dir(&Path::new(FIXTURES).join("samples"), &dir);
    fx.json(&["workflow", "add", dir.to_str().unwrap()]).expect(0);
    let sheet = fx.p("data/sheet.csv");
    std::fs::create_dir_all(sheet.parent().unwrap()).unwrap();
    std::fs::write(&sheet, "sample,reads\nada,120\nbob,80\n").unwrap();
    let input = json!({"config": {"samplesheet": sheet}});

    std::fs::create_dir_all(fx.p("ws")).unwrap();
    let run_dir = fx.p("ws/samples-1");
    let plan = fx.plan("samples", &input, "local", &run_dir, "samples-1").expect(0).json;
    let bound: Vec<&Value> =
        plan["inputs"].as_array().unwrap().iter().filter(|i| i["path"] == sheet.to_str().unwrap()).collect();
    assert_eq!(bound.len(), 1, "the samplesheet is an input of the plan: {:#}", plan["inputs"]);
    assert_eq!(bound[0]["sha256"], sha256_file(&sheet));
    let run = fx.execute(&plan).expect(0).json;
    assert_eq!(run["status"], "READY", "{run:#}");
    let work = run_dir.join("steps/pipeline");
    assert_eq!(std::fs::read_to_string(work.join("results/bob.txt")).unwrap(), "bob has 80 reads\n");
    assert!(!work.join("data").exists() && sheet.is_file(), "the samplesheet was read where it is, not copied");

    // Changed after planning: refused, nothing created.
    let run_dir = fx.p("ws/samples-2");
    let plan = fx.plan("samples", &input, "local", &run_dir, "samples-2").expect(0).json;
    std::fs::write(&sheet, "sample,reads\nada,121\nbob,80\n").unwrap();
    let runs_before = fx.c.runs().len();
    let refused = fx.execute(&plan).expect(4);
    assert!(refused.stderr.contains(sheet.to_str().unwrap()), "the refusal names the samplesheet: {}", refused.stderr);
    assert!(std::fs::symlink_metadata(&run_dir).is_err(), "a refused approval created {}", run_dir.display());
    assert_eq!(fx.c.runs().len(), runs_before, "a refused approval created a run");
    fx.stop_daemon();
}

/// A pipeline's jobs are events while it runs, not only once it ended: `cairn events` and the
/// API show them as they happen, each job with its rule and wildcards.
#[test]
fn a_pipelines_jobs_are_events_while_it_runs() {
    let Some(fx) = Fx::new() else { return };
    let dir = fx.p("naps");
    copy_dir(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/controllers/naps")), &dir);
    let toml = std::fs::read_to_string(dir.join("workflow.toml"))
        .unwrap()
        .replace("cores = 2 }", "cores = 2, config = { nap_secs = 1, samples = [\"s1\", \"s2\", \"s3\", \"s4\"] } }");
    std::fs::write(dir.join("workflow.toml"), toml).unwrap();
    fx.json(&["workflow", "add", dir.to_str().unwrap()]).expect(0);
    let args = fx.c.run_args("naps", &json!({}), &["--run-id", "live", "--json"]);
    let follower = fx.spawn(&args);

    // While the run is RUNNING, a finished job is already an event, and the run's step counts its
    // jobs: done of the controller's total (all, summary and 4 naps), and those running.
    let mut seen = Vec::new();
    let mut live_jobs = Value::Null;
    assert!(
        wait_until(std::time::Duration::from_secs(60), || {
            let Ok(events) = std::panic::catch_unwind(|| fx.c.events("live")) else { return false };
            let shown = fx.c.show("live");
            live_jobs = step(&shown, "pipeline")["jobs"].clone();
            seen = events_of(&events, "pipeline.job_finished", Some("pipeline")).into_iter().cloned().collect();
            shown["status"] == "RUNNING" && !seen.is_empty()
        }),
        "no job_finished event while the run ran: {seen:#?}"
    );
    assert_eq!(live_jobs["total"], 6, "{live_jobs:#}");
    assert!(live_jobs["done"].as_u64().is_some_and(|d| (1..6).contains(&d)), "{live_jobs:#}");
    assert!(live_jobs["running"].as_u64().is_some_and(|r| r <= 2), "two at a time: {live_jobs:#}");
    assert_eq!(live_jobs["failed"], 0, "{live_jobs:#}");
    let (code, _) = fx.wait_spawned(follower, std::time::Duration::from_secs(60));
    assert_eq!(code, 0);
    assert_eq!(step(&fx.c.show("live"), "pipeline")["jobs"], json!({"done": 6, "total": 6, "running": 0, "failed": 0}));
    let events = fx.c.events("live");
    let started = events_of(&events, "pipeline.job_started", Some("pipeline"));
    let naps: Vec<&str> = started
        .iter()
        .filter(|e| e["data"]["rule"] == "nap")
        .map(|e| str_of(&e["data"]["wildcards"]["sample"]))
        .collect();
    let mut sorted = naps.clone();
    sorted.sort();
    assert_eq!(sorted, ["s1", "s2", "s3", "s4"], "each nap job with its wildcards: {started:#?}");
    assert!(started.iter().all(|e| e["attempt"] == 1));
    // The API gives the same events.
    let d = fx.c.daemon();
    let api = http("GET", &format!("{}/runs/live/events", d.url), Some(&fx.c.token("viewer")), None, &[]);
    assert_eq!(api.status, 200);
    let api_jobs: Vec<&Value> =
        api.body["events"].as_array().unwrap().iter().filter(|e| str_of(&e["kind"]).starts_with("pipeline.")).collect();
    assert_eq!(api_jobs.len(), events.iter().filter(|e| str_of(&e["kind"]).starts_with("pipeline.")).count());
    fx.stop_daemon();
}

/// The samplesheet pipeline with a step after it (`count`, a plain tool reading the pipeline's
/// listed outputs), so a replay can request `count` and decide about the pipeline.
fn samples_with_count(fx: &Fx, version: &str, snakefile_extra: &str) -> PathBuf {
    let dir = fx.p(&format!("samples-{version}"));
    copy_dir(&Path::new(FIXTURES).join("samples"), &dir);
    let toml = std::fs::read_to_string(dir.join("workflow.toml")).unwrap().replace("1.0.0", version)
        + r#"
[tools.count]
command = ["python3", "count.py"]
timeout_secs = 30

[[steps]]
id = "count"
tool = "count"
needs = ["pipeline"]
args = { outputs = "${steps.pipeline.result.outputs}" }
"#;
    std::fs::write(dir.join("workflow.toml"), toml).unwrap();
    std::fs::write(
        dir.join("count.py"),
        "import json, sys\nargs = json.load(sys.stdin)\nprint(json.dumps({\"files\": len(args[\"outputs\"])}))\n",
    )
    .unwrap();
    let snakefile = std::fs::read_to_string(dir.join("Snakefile")).unwrap() + snakefile_extra;
    std::fs::write(dir.join("Snakefile"), snakefile).unwrap();
    fx.json(&["workflow", "add", dir.to_str().unwrap()]).expect(0);
    dir
}

fn run_dir(run: &Value) -> PathBuf {
    PathBuf::from(str_of(&run["run_dir"]))
}

/// The decision a replay made about `step_id`, and its reason in words (a dry run's, or a child
/// run's).
fn decision(replay: &Value, step_id: &str) -> (String, String) {
    let decisions = if replay["dry_run"] == true { &replay["decisions"] } else { &replay["replay"]["decisions"] };
    let d = decisions.as_array().unwrap().iter().find(|d| d["step_id"] == step_id).unwrap();
    (str_of(&d["decision"]).to_string(), str_of(&d["text"]).to_string())
}

/// A replay reuses a pipeline step while its Snakefile, its config and the samplesheet its config
/// names are the bytes the source ran with (the step's result lists that file with its hash),
/// materialising its outputs into the child; each change re-executes it, the reason naming what
/// changed.
#[test]
fn a_pipeline_step_is_reused_until_its_snakefile_config_or_samplesheet_changes() {
    let Some(fx) = Fx::new() else { return };
    samples_with_count(&fx, "1.0.0", "");
    let sheet = fx.p("data/sheet.csv");
    std::fs::create_dir_all(sheet.parent().unwrap()).unwrap();
    std::fs::write(&sheet, "sample,reads\nada,120\nbob,80\n").unwrap();
    let input = json!({"config": {"samplesheet": sheet}});
    let source = fx.c.run("samples", &input, &["--run-id", "S"]).expect(0).json;
    let result = &step(&source, "pipeline")["result"];
    assert_eq!(
        result["inputs"],
        json!([{"path": sheet, "sha256": sha256_file(&sheet)}]),
        "the samplesheet, hashed before the pipeline read it: {result:#}"
    );
    assert_eq!(step(&source, "count")["result"]["files"], 2);

    // Nothing changed: the pipeline is reused, its outputs carried into the child.
    let child = fx.json(&["replay", "S", "--step", "count", "--run-id", "C1"]).expect(0).json;
    assert_eq!(decision(&child, "pipeline").0, "reuse", "{child:#}");
    let carried = run_dir(&child).join("steps/pipeline/results/bob.txt");
    assert_eq!(std::fs::read_to_string(&carried).unwrap(), "bob has 80 reads\n");
    assert_eq!(artifacts_of(&child), artifacts_of(&source));

    // The samplesheet changed: re-executed, the reason naming it; the child reads the new one.
    std::fs::write(&sheet, "sample,reads\nada,120\nbob,81\n").unwrap();
    let dry = fx.json(&["replay", "S", "--step", "count", "--dry-run"]).expect(0).json;
    let (what, why) = decision(&dry, "pipeline");
    assert_eq!(what, "replay", "{dry:#}");
    let named = format!("invalidated: input file {} of step pipeline changed since run S read it", sheet.display());
    assert!(why.starts_with(&named), "{why}");
    let child = fx.json(&["replay", "S", "--step", "count", "--run-id", "C2"]).expect(0).json;
    assert_eq!(decision(&child, "pipeline"), (what, why));
    let work = run_dir(&child).join("steps/pipeline");
    assert_eq!(std::fs::read_to_string(work.join("results/bob.txt")).unwrap(), "bob has 81 reads\n");

    // The config changed (a key added): re-executed, naming the argument.
    let more = json!({"config": {"samplesheet": sheet, "note": "rerun"}});
    let file = fx.p("more.json");
    std::fs::write(&file, more.to_string()).unwrap();
    let dry =
        fx.json(&["replay", "C2", "--step", "count", "--input", file.to_str().unwrap(), "--dry-run"]).expect(0).json;
    assert_eq!(decision(&dry, "pipeline"), ("replay".into(), "invalidated: argument `/config/note` added".into()));

    // The Snakefile changed (a new version of the pipeline): re-executed, naming the file.
    samples_with_count(&fx, "1.0.1", "\n# A comment is a change of the pipeline's bytes.\n");
    let dry = fx.json(&["replay", "C2", "--step", "count", "--version", "1.0.1", "--dry-run"]).expect(0).json;
    assert_eq!(decision(&dry, "pipeline"), ("replay".into(), "invalidated: tool file Snakefile changed".into()));
    // And C2, replayed as it is, is reused: it read the samplesheet as it is now.
    let dry = fx.json(&["replay", "C2", "--step", "count", "--dry-run"]).expect(0).json;
    assert_eq!(decision(&dry, "pipeline").0, "reuse", "{dry:#}");
    fx.stop_daemon();
}

/// On a Slurm target Snakemake is the controller, and it submits the pipeline's jobs to Slurm
/// itself (`--executor slurm`, to the target's partition, at most `jobs` at once): each job is a
/// Slurm job that Slurm's accounting shows completed, the local rules run in Snakemake, and the
/// pipeline writes what plain Snakemake writes; its jobs are events of the step as anywhere.
#[test]
fn a_pipeline_on_a_slurm_target_submits_its_jobs_to_slurm() {
    let Some(fx) = Fx::new() else { return };
    let Some(d) = sshd() else { return };
    if !crate::remote::slurm() {
        return;
    }
    let ws = fx.p("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ssh = format!("root@127.0.0.1:{}", sshd_port());
    let extra = ["--executor", "slurm", "--partition", "debug"];
    fx.c.add_target("hpc", &ssh, &d.join("id_ed25519"), &d.join("known_hosts"), ws.to_str().unwrap(), &extra).expect(0);
    let dir = fx.p("cluster");
    copy_dir(&Path::new(FIXTURES).join("cluster"), &dir);
    fx.json(&["workflow", "add", dir.to_str().unwrap()]).expect(0);

    let run_dir = fx.p("ws/cluster-1");
    let plan = fx.plan("cluster", &json!({}), "hpc", &run_dir, "cluster-1").expect(0).json;
    let argv: Vec<&str> = plan["commands"][0]["argv"].as_array().unwrap().iter().map(str_of).collect();
    let tail = "--executor slurm --jobs 3 --default-resources slurm_partition=debug";
    assert!(argv.join(" ").ends_with(tail), "the plan shows Snakemake submitting to Slurm: {argv:?}");
    let found = &plan["readiness"]["observed"]["programs"]["sacct"];
    assert!(found.as_str().is_some_and(|p| p.ends_with("/sacct")), "{:#}", plan["readiness"]);
    let run = fx.execute(&plan).expect(0).json;
    assert_eq!(run["status"], "READY", "{run:#}");
    let work = run_dir.join("steps/pipeline");
    assert_eq!(
        std::fs::read_to_string(work.join("results/summary.txt")).unwrap(),
        "hello Ada Lovelace\nhello Grace Hopper\nhello Hedy Lamarr\n"
    );
    let plain = plain_snakemake(&fx, "cluster", "cluster-plain", "Snakefile", 2, None);
    assert_eq!(tree(&work, &[".snakemake", ".cairn"]), tree(&plain, &[".snakemake", "workflow.toml"]));
    // Submitted to Slurm, each job is still a record: the same jobs as plain snakemake's, each
    // finished job's outputs hashed on the target.
    jobs_are_plain_snakemakes(&fx, str_of(&run["run_id"]), &plain, "cluster on slurm");
    let jobs = fx.json(&["jobs", str_of(&run["run_id"]), "pipeline"]).expect(0).json;
    let greets: Vec<&Value> = jobs["jobs"].as_array().unwrap().iter().filter(|j| j["rule"] == "greet").collect();
    assert_eq!(greets.len(), 3, "{jobs:#}");
    assert!(greets.iter().all(|g| g["status"] == "finished" && g["files"][0]["sha256"].is_string()), "{jobs:#}");
    let created: BTreeMap<String, String> =
        created_or_changed(&work, "cluster").into_iter().filter(|(p, _)| !p.starts_with(".cairn/")).collect();
    assert_eq!(artifacts_of(&run), created);

    // Each greet job went through Slurm: its log names the Slurm job, which sacct shows COMPLETED
    // (accounting can lag a moment behind a job's end).
    let log = std::fs::read_to_string(run_dir.join("steps/pipeline/.cairn/attempt-1/stderr")).unwrap();
    let ids: Vec<String> = log
        .lines()
        .filter_map(|l| l.split("has been submitted with SLURM jobid ").nth(1))
        .map(|rest| rest.split_whitespace().next().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 3, "one Slurm job per sample:\n{log}");
    for id in &ids {
        let mut state = String::new();
        let completed = wait_until(std::time::Duration::from_secs(30), || {
            let out = Command::new("sacct").args(["-n", "-X", "-P", "-o", "State", "-j", id]).output().unwrap();
            state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            state == "COMPLETED"
        });
        assert!(completed, "Slurm job {id} is {state:?}, not COMPLETED");
    }
    let result = &step(&run, "pipeline")["result"];
    assert_eq!(result["jobs"], json!({"total": 5, "done": 5, "failed": 0}), "{result:#}");
    let events = fx.c.events(str_of(&run["run_id"]));
    let greeted: Vec<&Value> = events_of(&events, "pipeline.job_finished", Some("pipeline"))
        .into_iter()
        .filter(|e| e["data"]["rule"] == "greet")
        .collect();
    assert_eq!(greeted.len(), 3, "{events:#?}");
    fx.stop_daemon();
}

/// The `bin` of Snakemake 8's venv (`$CAIRN_TEST_SNAKEMAKE8`, else the workspace's
/// `.venv-snakemake8`, which scripts/test.sh installs). Under CI its absence is a failure.
fn snakemake8_bin() -> Option<PathBuf> {
    let venv = std::env::var_os("CAIRN_TEST_SNAKEMAKE8")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv-snakemake8"));
    let bin = venv.join("bin");
    if bin.join("snakemake").is_file() {
        return Some(bin.canonicalize().unwrap());
    }
    if ci() {
        panic!("no snakemake in {}: run scripts/test.sh (it installs Snakemake 8's venv)", bin.display());
    }
    eprintln!("SKIPPED: no snakemake in {} (run scripts/test.sh)", bin.display());
    None
}

/// With Snakemake 8.30 (the last 8.x) as the controller, the pipelines' jobs are events of the
/// step as with 9, read from 8's log, whose finishes name only the job: each job that started
/// finished (or failed and was restarted), under the rule it started with, and the result counts
/// them all done. The cluster shape is left out: its workflow profile sets an option of the Slurm
/// executor, which 8's venv does not have.
#[test]
fn pipeline_jobs_are_read_from_snakemake_8s_log_too() {
    let Some(bin8) = snakemake8_bin() else { return };
    let Some(mut fx) = Fx::new() else { return };
    // Fx puts Snakemake 9 first on PATH; the last PATH given to a Cairn wins, for its commands and
    // the daemon they start.
    fx.path = format!("{}:{}", bin8.display(), std::env::var("PATH").unwrap_or_default());
    fx.c = std::mem::replace(&mut fx.c, Cairn::new()).with_env("PATH", &fx.path);
    let totals = [("bare", 5), ("standard", 4), ("checkpoint", 6), ("retries", 1), ("threads", 1)];
    for shape in shapes().into_iter().filter(|s| s.name != "cluster") {
        let name = shape.name;
        let dir = fx.p(name);
        copy_dir(&Path::new(FIXTURES).join(name), &dir);
        fx.json(&["workflow", "add", dir.to_str().unwrap()]).expect(0);
        let run = fx.c.run(name, &shape.input, &["--run-id", name]).expect(0).json;
        assert_eq!(run["status"], "READY", "{name}: {run:#}");
        let log = std::fs::read_to_string(
            PathBuf::from(str_of(&run["run_dir"])).join("steps/pipeline/.cairn/attempt-1/stderr"),
        )
        .unwrap();
        assert!(
            log.contains("\nFinished job ") && !log.contains("Finished jobid:"),
            "{name}: not Snakemake 8's log:\n{log}"
        );

        let total = totals.iter().find(|(n, _)| *n == name).map(|(_, t)| *t).unwrap();
        let result = &step(&run, "pipeline")["result"];
        assert_eq!(result["jobs"], json!({"total": total, "done": total, "failed": 0}), "{name}: {result:#}");
        assert_eq!(result["failed_rules"], json!([]), "{name}: {result:#}");
        let events = fx.c.events(name);
        let of = |kind: &str| -> Vec<Value> {
            events_of(&events, kind, Some("pipeline")).into_iter().map(|e| e["data"].clone()).collect()
        };
        let (started, finished, failed) =
            (of("pipeline.job_started"), of("pipeline.job_finished"), of("pipeline.job_failed"));
        assert_eq!(finished.len() as u64, total, "{name}: one job_finished per job: {finished:#?}");
        assert_eq!(started.len(), finished.len() + failed.len(), "{name}: every start ended: {events:#?}");
        assert!(failed.iter().all(|f| f["restarted"] == true), "{name}: {failed:#?}");
        assert_eq!(finished.last().unwrap()["done"], total, "{name}");
        assert_eq!(finished.last().unwrap()["total"], total, "{name}");
        for f in &finished {
            let rule_started = started.iter().any(|s| s["job"] == f["job"] && s["rule"] == f["rule"]);
            assert!(rule_started, "{name}: {f} ended under the rule it started with: {started:#?}");
        }
        if name == "retries" {
            assert_eq!((started.len(), failed.len()), (3, 2), "two failures, each restarted: {failed:#?}");
        }
        // Each job is a record from 8's log too: its outputs and why it ran.
        let jobs = fx.json(&["jobs", name, "pipeline"]).expect(0).json;
        for j in jobs["jobs"].as_array().unwrap() {
            assert!(j["reason"].is_string(), "{name}: {j:#}");
            if name == "bare" {
                assert!(!j["outputs"].as_array().unwrap().is_empty(), "{name}: {j:#}");
            }
        }
    }
    fx.stop_daemon();
}
