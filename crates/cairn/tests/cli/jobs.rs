//! A pipeline's jobs as evidence: the per-sample calling pipeline of
//! `tests/fixtures/pipelines/calling` (Debian's `bwa`, `samtools` and `bcftools` on a made-up
//! genome) runs under Cairn, and every job its Snakemake ran is a record — rule, wildcards,
//! Snakemake's reason, inputs linked to the job that wrote them, outputs with what they held
//! when the job finished — the same on the CLI, the API and MCP, and the same set of jobs plain
//! `snakemake` runs in a copy of the folder.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::controllers::{Fx, venv_bin};
use crate::evidence::sha256_file;
use crate::pipelines::tree;
use crate::support::*;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pipelines");

/// The calling pipeline's tools, from Debian's packages; under CI their absence fails the test.
fn have_tools() -> bool {
    let missing: Vec<&str> = ["bwa", "samtools", "bcftools"]
        .into_iter()
        .filter(|t| {
            !Command::new("sh").args(["-c", &format!("command -v {t}")]).output().is_ok_and(|o| o.status.success())
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    if ci() {
        panic!("{} missing: scripts/test.sh installs them from Debian's packages", missing.join(", "));
    }
    eprintln!("SKIPPED: {} missing (run scripts/test.sh)", missing.join(", "));
    false
}

/// `rule {k=v, …}` of each job: what identifies a job across runs (job ids do not).
pub(crate) fn job_keys(jobs: &Value) -> BTreeSet<String> {
    jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            let w: Vec<String> =
                j["wildcards"].as_object().unwrap().iter().map(|(k, v)| format!("{k}={}", str_of(v))).collect();
            format!("{} {{{}}}", str_of(&j["rule"]), w.join(", "))
        })
        .collect()
}

/// The jobs plain `snakemake` ran, read from its log the way a person reads it: each
/// `rule NAME:` block with its `wildcards:` line.
pub(crate) fn plain_job_keys(log: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut current: Option<(String, String)> = None;
    for line in log.lines() {
        let header = ["localrule ", "rule ", "checkpoint ", "localcheckpoint "]
            .iter()
            .find_map(|p| line.strip_prefix(p))
            .and_then(|r| r.strip_suffix(':'));
        if let Some(rule) = header {
            if let Some((r, w)) = current.take() {
                out.insert(format!("{r} {{{w}}}"));
            }
            current = Some((rule.to_string(), String::new()));
        } else if let (Some((_, w)), Some(v)) = (current.as_mut(), line.trim().strip_prefix("wildcards: ")) {
            *w = v.to_string();
        } else if !line.starts_with(' ')
            && let Some((r, w)) = current.take()
        {
            out.insert(format!("{r} {{{w}}}"));
        }
    }
    if let Some((r, w)) = current {
        out.insert(format!("{r} {{{w}}}"));
    }
    out
}

/// Plain `snakemake` in `dir` (a copy of the pipeline, as a user would run it in a checkout),
/// with the run's config; its log.
pub(crate) fn plain_snakemake_in(fx: &Fx, dir: &Path, config: &Value) -> String {
    let file = dir.with_extension("config.json");
    std::fs::write(&file, config.to_string()).unwrap();
    let out = Command::new(venv_bin().unwrap().join("snakemake"))
        .current_dir(dir)
        .args(["--snakefile", "Snakefile", "--cores", "2", "--nocolor", "--configfile"])
        .arg(&file)
        .env("PATH", &fx.path)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "plain snakemake in {} failed:\n{log}", dir.display());
    log
}

pub(crate) fn calling(fx: &Fx) -> Option<PathBuf> {
    if !have_tools() {
        return None;
    }
    let dir = fx.p("calling");
    copy_dir(&Path::new(FIXTURES).join("calling"), &dir);
    fx.json(&["workflow", "add", dir.to_str().unwrap()]).expect(0);
    Some(dir)
}

pub(crate) fn run_calling(fx: &Fx, run_id: &str, samples: &[&str]) -> Value {
    let input = json!({"config": {"samples": samples}});
    let args = fx.c.run_args("calling", &input, &["--run-id", run_id]);
    let run = fx.json(&args.iter().map(String::as_str).collect::<Vec<_>>()).expect(0).json;
    assert_eq!(run["status"], "READY", "{run:#}");
    run
}

/// Every job of the calling pipeline is recorded with its rule, wildcards, reason, files and
/// lineage: the same jobs plain `snakemake` runs, the same answer from `cairn jobs --json`, the
/// API and MCP, and each artifact names the job that wrote it.
#[test]
fn a_calling_pipelines_jobs_are_records_with_their_files_reason_and_lineage() {
    let Some(fx) = Fx::new() else { return };
    let Some(_) = calling(&fx) else { return };
    let run = run_calling(&fx, "ab", &["A", "B"]);
    let work = PathBuf::from(str_of(&run["run_dir"])).join("steps/calling");

    let jobs = fx.json(&["jobs", "ab", "calling"]).expect(0).json;
    assert_eq!(jobs["status"], "COMPLETED");
    assert_eq!(jobs["total"], 9, "{jobs:#}");
    let keys = job_keys(&jobs);
    let plain = fx.p("plain-ab");
    copy_dir(&Path::new(FIXTURES).join("calling"), &plain);
    let plain_log = plain_snakemake_in(&fx, &plain, &json!({"samples": ["A", "B"]}));
    assert_eq!(keys, plain_job_keys(&plain_log), "Cairn's jobs are the jobs plain snakemake runs");
    // The calls are the same bytes as plain snakemake's.
    assert_eq!(sha256_file(&work.join("calls/all.vcf")), sha256_file(&plain.join("calls/all.vcf")));

    let all: Vec<&Value> = jobs["jobs"].as_array().unwrap().iter().collect();
    assert!(all.iter().all(|j| j["status"] == "finished" && j["attempt"] == 1 && j["tries"] == 1), "{jobs:#}");
    let job = |rule: &str, sample: Option<&str>| -> &Value {
        all.iter()
            .find(|j| j["rule"] == rule && sample.is_none_or(|s| j["wildcards"]["sample"] == s))
            .unwrap_or_else(|| panic!("no {rule} {sample:?} job in {jobs:#}"))
    };
    let index = job("bwa_index", None);
    let map_a = job("bwa_map", Some("A"));
    let sort_a = job("samtools_sort", Some("A"));
    let call = job("call", None);
    assert!(str_of(&map_a["reason"]).starts_with("Missing output files: mapped_reads/A.bam"), "{map_a:#}");
    assert_eq!(map_a["log"], json!(["logs/bwa_map/A.log"]));
    assert_eq!(map_a["outputs"], json!(["mapped_reads/A.bam"]));
    // Inputs name the job that wrote them; the pipeline's own inputs name none.
    let from = |j: &Value, path: &str| -> Value {
        j["inputs"].as_array().unwrap().iter().find(|i| i["path"] == path).unwrap_or_else(|| panic!("{path}"))["from"]
            .clone()
    };
    assert_eq!(from(map_a, "data/samples/A.fastq"), Value::Null);
    assert_eq!(from(map_a, "data/genome.fa.bwt"), json!({"attempt": 1, "job": index["job"]}));
    assert_eq!(from(sort_a, "mapped_reads/A.bam"), json!({"attempt": 1, "job": map_a["job"]}));
    assert_eq!(from(call, "sorted_reads/A.bam"), json!({"attempt": 1, "job": sort_a["job"]}));
    // A finished job's outputs as they were then: the sorted BAM is the file in the working copy.
    let sorted = &sort_a["files"][0];
    assert_eq!(sorted["path"], "sorted_reads/A.bam");
    assert_eq!(str_of(&sorted["sha256"]), sha256_file(&work.join("sorted_reads/A.bam")));
    // The temporary alignment is hashed if it was still there when its end was read, else gone.
    let mapped = &map_a["files"][0];
    assert!(mapped["sha256"].is_string() || (mapped["bytes"].is_null() && mapped["link"].is_null()), "{mapped:#}");
    assert!(!work.join("mapped_reads/A.bam").exists(), "temp() outputs are removed, as by plain snakemake");
    // Each rule's counts.
    let rules: Vec<(String, u64)> = jobs["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (str_of(&r["rule"]).to_string(), r["finished"].as_u64().unwrap()))
        .collect();
    assert!(rules.contains(&("bwa_map".to_string(), 2)) && rules.contains(&("call".to_string(), 1)), "{rules:?}");

    // The API answers the same, filtered and paged where asked; a bad status is refused.
    let d = fx.c.daemon();
    let token = fx.c.token("viewer");
    let api = http("GET", &format!("{}/runs/ab/steps/calling/jobs", d.url), Some(&token), None, &[]);
    assert_eq!(api.status, 200);
    assert_eq!(api.body, jobs, "the API and `cairn jobs --json` agree");
    let maps =
        http("GET", &format!("{}/runs/ab/steps/calling/jobs?rule=bwa_map&limit=1", d.url), Some(&token), None, &[]);
    assert_eq!((maps.body["total"].clone(), maps.body["jobs"].as_array().unwrap().len()), (json!(2), 1));
    let bad = http("GET", &format!("{}/runs/ab/steps/calling/jobs?status=done", d.url), Some(&token), None, &[]);
    assert_eq!(bad.status, 422, "{:#}", bad.body);
    assert!(str_of(&bad.body["error"]["message"]).contains("status `done` is not a job status"), "{:#}", bad.body);
    let missing = fx.json(&["jobs", "ab", "nope"]).expect(2);
    assert!(missing.stderr.contains("nope"), "{}", missing.stderr);

    // A person reads the same: each rule's counts, each job with why it ran and where its input came from.
    let text = fx.c.cmd(&["jobs", "ab", "calling"]);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("bwa_map") && text.contains("why:    Missing output files: mapped_reads/A.bam"), "{text}");
    assert!(text.contains(&format!("input:  mapped_reads/A.bam  <- job 1.{}", map_a["job"])), "{text}");

    // `cairn show` has a pipeline section: the jobs per rule.
    let shown = fx.c.cmd(&["show", "ab"]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("pipeline jobs: 9 (bwa_index 1, bwa_map 2, samtools_sort 2, samtools_index 2, call 1, all 1)")
            && shown.contains("`cairn jobs ab calling` lists them"),
        "{shown}"
    );

    // Every artifact of the step names the job that wrote it.
    let shown = fx.c.show("ab");
    let artifacts = step(&shown, "calling")["artifacts"].as_array().unwrap().clone();
    let vcf = artifacts.iter().find(|a| a["name"] == "calls/all.vcf").unwrap();
    assert_eq!(vcf["job"], json!({"attempt": 1, "job": call["job"], "rule": "call", "wildcards": {}}), "{vcf:#}");
    let bai = artifacts.iter().find(|a| a["name"] == "sorted_reads/B.bam.bai").unwrap();
    assert_eq!(bai["job"]["rule"], "samtools_index");
    assert_eq!(bai["job"]["wildcards"], json!({"sample": "B"}));
    // `cairn trace` walks a file back through the jobs to the pipeline's own files, with hashes.
    let traced = fx.json(&["trace", work.join("sorted_reads/A.bam").to_str().unwrap()]).expect(0).json;
    let chain = &traced["matches"][0]["jobs"];
    let rules: Vec<&str> = chain.as_array().unwrap().iter().map(|j| str_of(&j["rule"])).collect();
    assert_eq!(rules, ["samtools_sort", "bwa_map", "bwa_index"], "{traced:#}");
    assert_eq!(chain[0]["wildcards"], json!({"sample": "A"}));
    assert_eq!(chain[0]["inputs"][0]["from"], json!({"attempt": 1, "job": map_a["job"]}));
    let fastq = chain[1]["inputs"].as_array().unwrap().iter().find(|i| i["path"] == "data/samples/A.fastq").unwrap();
    assert_eq!(str_of(&fastq["sha256"]), sha256_file(&Path::new(FIXTURES).join("calling/data/samples/A.fastq")));
    assert!(fastq["from"].is_null(), "the pipeline's own file: {fastq:#}");
    let bwt = chain[1]["inputs"].as_array().unwrap().iter().find(|i| i["path"] == "data/genome.fa.bwt").unwrap();
    assert_eq!(str_of(&bwt["sha256"]), sha256_file(&work.join("data/genome.fa.bwt")), "as the index job recorded it");
    let sha = str_of(&traced["sha256"]);
    let api = http("GET", &format!("{}/artifacts?sha256={sha}", d.url), Some(&token), None, &[]);
    assert_eq!(api.body, traced, "the API traces the same");
    let text = String::from_utf8_lossy(&fx.c.cmd(&["trace", work.join("sorted_reads/A.bam").to_str().unwrap()]).stdout)
        .into_owned();
    assert!(text.contains("<- job 1.") && text.contains("samtools_sort (sample=A)"), "{text}");
    // The RO-Crate has one CreateAction per job, with the files it read and wrote, and validates.
    let crate_dir = fx.p("crate-ab");
    fx.json(&["export", "ab", "--ro-crate", crate_dir.to_str().unwrap()]).expect(0);
    crate::rocrate::assert_valid(&fx.c, &crate_dir);
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(crate_dir.join("ro-crate-metadata.json")).unwrap()).unwrap();
    let graph = meta["@graph"].as_array().unwrap();
    let job_actions: Vec<&Value> =
        graph.iter().filter(|e| str_of(&e["@id"]).starts_with("#run-ab-step-calling-job-")).collect();
    assert_eq!(job_actions.len(), 9, "one action per job");
    let file_id = |name: &str| -> Value {
        graph
            .iter()
            .find(|e| e["@type"] == "File" && e["name"] == format!("steps/calling/{name}"))
            .map(|e| e["@id"].clone())
            .unwrap_or_else(|| panic!("no file {name} in the crate"))
    };
    let index_action =
        job_actions.iter().find(|a| str_of(&a["name"]).contains("rule samtools_index (sample=A)")).unwrap();
    assert_eq!(index_action["@type"], "CreateAction");
    assert_eq!(index_action["object"], json!([{"@id": file_id("sorted_reads/A.bam")}]), "{index_action:#}");
    assert_eq!(index_action["result"], json!([{"@id": file_id("sorted_reads/A.bam.bai")}]));
    assert!(str_of(&index_action["description"]).starts_with("Missing output files"), "{index_action:#}");
    let listed = fx.json(&["artifacts", "ab"]).expect(0).json;
    let vcf_listed = listed["artifacts"].as_array().unwrap().iter().find(|a| a["name"] == "calls/all.vcf").unwrap();
    assert_eq!(vcf_listed["job"], vcf["job"], "`cairn artifacts` names the same job");
    fx.stop_daemon();
}

/// `cairn replay SOURCE --step calling --input {config} --run-id ID --json`, READY.
fn replay_calling(fx: &Fx, source: &str, run_id: &str, config: &Value) -> Value {
    let input = fx.c.input(&json!({"config": config}));
    let run = fx
        .json(&["replay", source, "--step", "calling", "--input", input.to_str().unwrap(), "--run-id", run_id])
        .expect(0)
        .json;
    assert_eq!(run["status"], "READY", "{run:#}");
    run
}

/// The jobs a run's step ran itself (not those it carried over), as `rule {wildcards}`.
fn ran_keys(fx: &Fx, run_id: &str) -> BTreeSet<String> {
    ran_keys_of(fx, run_id, "calling")
}

fn ran_keys_of(fx: &Fx, run_id: &str, step_id: &str) -> BTreeSet<String> {
    let jobs = fx.json(&["jobs", run_id, step_id]).expect(0).json;
    let ran: Vec<Value> =
        jobs["jobs"].as_array().unwrap().iter().filter(|j| j["status"] != "carried").cloned().collect();
    job_keys(&json!({"jobs": ran}))
}

/// The user's next day: a sample added, then a rule's params changed. Each replay re-executes
/// the pipeline step in a working copy seeded from the source run's (its files checked against
/// their recorded SHA-256, with Snakemake's record of its jobs), so Snakemake runs exactly the
/// jobs plain `snakemake` runs in place, and writes the same bytes; the rest are carried over and
/// say so. The source run's files are untouched.
#[test]
fn a_replay_runs_only_the_jobs_plain_snakemake_runs_in_place() {
    let Some(fx) = Fx::new() else { return };
    let Some(_) = calling(&fx) else { return };
    let source = run_calling(&fx, "ab", &["A", "B"]);
    let source_work = PathBuf::from(str_of(&source["run_dir"])).join("steps/calling");
    let source_files = tree(&source_work, &[]);
    let plain = fx.p("plain");
    copy_dir(&Path::new(FIXTURES).join("calling"), &plain);
    plain_snakemake_in(&fx, &plain, &json!({"samples": ["A", "B"]}));

    // One sample added. The dry run says, per rule, the jobs Snakemake will run, and why.
    let abc = json!({"samples": ["A", "B", "C"]});
    let input = fx.c.input(&json!({"config": abc}));
    let dry =
        fx.json(&["replay", "ab", "--step", "calling", "--input", input.to_str().unwrap(), "--dry-run"]).expect(0).json;
    let predicted: Vec<(String, u64)> = dry["jobs"][0]["rules"]
        .as_array()
        .unwrap_or_else(|| panic!("{dry:#}"))
        .iter()
        .map(|r| (str_of(&r["rule"]).to_string(), r["jobs"].as_u64().unwrap()))
        .collect();
    let text = String::from_utf8_lossy(
        &fx.c.cmd(&["replay", "ab", "--step", "calling", "--input", input.to_str().unwrap(), "--dry-run"]).stdout,
    )
    .into_owned();
    assert!(text.contains("bwa_map: 1 would run (Missing output files)"), "{text}");
    assert!(fx.c.runs().iter().all(|r| r["run_id"] != "abc"), "a dry run creates nothing");
    let child = replay_calling(&fx, "ab", "abc", &abc);
    let plain_log = plain_snakemake_in(&fx, &plain, &abc);
    let plain_jobs = plain_job_keys(&plain_log);
    assert_eq!(plain_jobs.len(), 5, "plain snakemake runs C's three jobs, the call and all: {plain_jobs:?}");
    assert_eq!(ran_keys(&fx, "abc"), plain_jobs, "the replay runs the jobs plain snakemake runs in place");
    let mut ran_rules: Vec<(String, u64)> = Vec::new();
    for key in ran_keys(&fx, "abc") {
        let rule = key.split(' ').next().unwrap().to_string();
        match ran_rules.iter_mut().find(|(r, _)| *r == rule) {
            Some((_, n)) => *n += 1,
            None => ran_rules.push((rule, 1)),
        }
    }
    let (mut a, mut b) = (predicted.clone(), ran_rules);
    a.sort();
    b.sort();
    assert_eq!(a, b, "the dry run predicted the jobs the replay ran, by rule: {dry:#}");
    let work = PathBuf::from(str_of(&child["run_dir"])).join("steps/calling");
    // bwa's logs hold its command line (absolute paths) and timings: compared by name only.
    assert_eq!(
        tree(&work, &[".snakemake", ".cairn", "config", "logs"]),
        tree(&plain, &[".snakemake", "config", "workflow.toml", "logs"]),
        "the same files, byte for byte, as plain snakemake in place"
    );
    assert_eq!(
        tree(&work.join("logs"), &[]).keys().collect::<Vec<_>>(),
        tree(&plain.join("logs"), &[]).keys().collect::<Vec<_>>()
    );
    let result = fx.json(&["result", "abc", "calling"]).expect(0).json;
    let seeded = &result["result"]["seeded"];
    assert_eq!(
        (&seeded["from_run"], &seeded["state"], &seeded["left_out"]),
        (&json!("ab"), &json!(true), &json!([])),
        "{seeded:#}"
    );
    // The jobs it did not run are carried over from the source, and say so.
    let jobs = fx.json(&["jobs", "abc", "calling"]).expect(0).json;
    let carried: Vec<&Value> = jobs["jobs"].as_array().unwrap().iter().filter(|j| j["status"] == "carried").collect();
    assert_eq!(carried.len(), 7, "{jobs:#}");
    assert!(carried.iter().all(|j| j["carried_from"] == "ab"));
    let text = String::from_utf8_lossy(&fx.c.cmd(&["show", "abc"]).stdout).into_owned();
    assert!(text.contains("bwa_map 1 + 2 carried"), "{text}");
    // The source run's working copy is untouched.
    assert_eq!(tree(&source_work, &[]), source_files, "a replay changed its source's files");

    // A rule's params changed: the call runs again, nothing else.
    let strict = json!({"samples": ["A", "B", "C"], "min_base_quality": 13});
    let child = replay_calling(&fx, "abc", "strict", &strict);
    let plain_log = plain_snakemake_in(&fx, &plain, &strict);
    let plain_jobs = plain_job_keys(&plain_log);
    assert_eq!(ran_keys(&fx, "strict"), plain_jobs, "params changed: the same jobs as plain snakemake in place");
    assert!(plain_jobs.iter().any(|k| k.starts_with("call ")) && plain_jobs.len() == 2, "{plain_jobs:?}");
    let work = PathBuf::from(str_of(&child["run_dir"])).join("steps/calling");
    assert_eq!(
        tree(&work, &[".snakemake", ".cairn", "config", "logs"]),
        tree(&plain, &[".snakemake", "config", "workflow.toml", "logs"])
    );
    let jobs = fx.json(&["jobs", "strict", "calling"]).expect(0).json;
    let call =
        jobs["jobs"].as_array().unwrap().iter().find(|j| j["rule"] == "call" && j["status"] == "finished").unwrap();
    assert!(str_of(&call["reason"]).contains("Params have changed"), "{call:#}");
    // One input file changed (a new version of the pipeline whose A.fastq differs): A's jobs, the
    // call and all run again, as plain snakemake does after the file is edited in place.
    let v2 = fx.p("calling-v2");
    copy_dir(&Path::new(FIXTURES).join("calling"), &v2);
    let toml = std::fs::read_to_string(v2.join("workflow.toml")).unwrap().replace("1.0.0", "1.1.0");
    std::fs::write(v2.join("workflow.toml"), toml).unwrap();
    let fastq = std::fs::read_to_string(v2.join("data/samples/A.fastq")).unwrap();
    let edited: String = fastq.lines().take(200).map(|l| format!("{l}\n")).collect();
    std::fs::write(v2.join("data/samples/A.fastq"), &edited).unwrap();
    fx.json(&["workflow", "add", v2.to_str().unwrap()]).expect(0);
    let input = fx.c.input(&json!({"config": strict}));
    let changed = fx
        .json(&[
            "replay",
            "strict",
            "--step",
            "calling",
            "--version",
            "1.1.0",
            "--input",
            input.to_str().unwrap(),
            "--run-id",
            "edited",
        ])
        .expect(0)
        .json;
    assert_eq!(changed["status"], "READY", "{changed:#}");
    std::fs::write(plain.join("data/samples/A.fastq"), &edited).unwrap();
    let plain_jobs = plain_job_keys(&plain_snakemake_in(&fx, &plain, &strict));
    assert_eq!(ran_keys(&fx, "edited"), plain_jobs, "an input file changed: the same jobs as plain snakemake in place");
    assert!(plain_jobs.contains("bwa_map {sample=A}") && !plain_jobs.contains("bwa_map {sample=B}"), "{plain_jobs:?}");
    let work = PathBuf::from(str_of(&changed["run_dir"])).join("steps/calling");
    assert_eq!(
        tree(&work, &[".snakemake", ".cairn", "config", "logs"]),
        tree(&plain, &[".snakemake", "config", "workflow.toml", "logs"])
    );

    // `cairn explain` says, per rule, how many jobs the step ran and why, and how many it carried.
    let why = fx.json(&["explain", "strict", "calling"]).expect(0).json;
    let rule = |name: &str| why["jobs"].as_array().unwrap().iter().find(|r| r["rule"] == name).cloned().unwrap();
    assert_eq!(rule("call")["reasons"]["Params have changed since last execution"], 1, "{why:#}");
    assert_eq!((rule("bwa_map")["jobs"].clone(), rule("bwa_map")["carried"].clone()), (json!(3), json!(3)), "{why:#}");
    let text = String::from_utf8_lossy(&fx.c.cmd(&["explain", "strict", "calling"]).stdout).into_owned();
    assert!(text.contains("call: 1 ran (Params have changed since last execution)"), "{text}");
    assert!(text.contains("bwa_map: 0 ran, 3 carried over"), "{text}");
    fx.stop_daemon();
}

/// On the SSH target too: a planned replay adding a sample seeds its working copy there (the
/// agent copies it), Snakemake runs only the new sample's jobs, the call and `all`, and each
/// finished job's outputs were hashed there.
#[test]
fn a_planned_replay_on_the_ssh_target_runs_only_the_new_samples_jobs() {
    let Some(fx) = Fx::new() else { return };
    let Some(d) = sshd() else { return };
    let Some(_) = calling(&fx) else { return };
    let target = fx.add_target(&d);
    let plan =
        fx.plan("calling", &json!({"config": {"samples": ["A", "B"]}}), target, &fx.p("ws/ab"), "ab").expect(0).json;
    let source = fx.execute(&plan).expect(0).json;
    assert_eq!(source["status"], "READY", "{source:#}\n{}", fx.c.daemon_log());
    let source_id = str_of(&source["run_id"]).to_string();
    let jobs = fx.json(&["jobs", &source_id, "calling"]).expect(0).json;
    let sort_a = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["rule"] == "samtools_sort" && j["wildcards"]["sample"] == "A")
        .unwrap();
    assert_eq!(
        str_of(&sort_a["files"][0]["sha256"]),
        sha256_file(&fx.p("ws/ab/steps/calling/sorted_reads/A.bam")),
        "a job's outputs are hashed where it ran: {sort_a:#}"
    );

    let input = fx.c.input(&json!({"config": {"samples": ["A", "B", "C"]}}));
    let child_dir = fx.p("ws/abc");
    let replay = fx
        .json(&[
            "plan",
            "--replay",
            &source_id,
            "--step",
            "calling",
            "--input",
            input.to_str().unwrap(),
            "--target",
            target,
            "--run-dir",
            child_dir.to_str().unwrap(),
            "--name",
            "abc",
        ])
        .expect(0)
        .json;
    // The forecast looks only here: on a target the plan says so.
    assert!(str_of(&replay["jobs"][0]["note"]).contains("on target `ci`"), "{replay:#}");
    let child = fx.execute(&replay).expect(0).json;
    assert_eq!(child["status"], "READY", "{child:#}\n{}", fx.c.daemon_log());
    let child_id = str_of(&child["run_id"]).to_string();
    let want: BTreeSet<String> =
        ["bwa_map {sample=C}", "samtools_sort {sample=C}", "samtools_index {sample=C}", "call {}", "all {}"]
            .map(String::from)
            .into();
    assert_eq!(ran_keys(&fx, &child_id), want, "only the new sample's jobs, the call and all");
    let result = fx.json(&["result", &child_id, "calling"]).expect(0).json;
    assert_eq!(result["result"]["seeded"]["from_run"], source_id.as_str(), "{result:#}");
    fx.stop_daemon();
}

/// kill -9 of an in-process replay at points spread over its life (while it seeds the working
/// copy, while Snakemake runs, after): `--resume-interrupted` finishes it READY with the files the
/// replay makes undisturbed, the source run's files are untouched, and no job that finished is
/// started again.
#[test]
fn a_replay_killed_while_it_seeds_or_runs_resumes_without_running_a_finished_job_twice() {
    let Some(fx) = Fx::new() else { return };
    let Some(_) = calling(&fx) else { return };
    let source = run_calling(&fx, "ab", &["A", "B"]);
    // In-process replays only: the daemon's recovery would take them over.
    fx.stop_daemon();
    let source_work = PathBuf::from(str_of(&source["run_dir"])).join("steps/calling");
    let source_files = tree(&source_work, &[]);
    let input = fx.c.input(&json!({"config": {"samples": ["A", "B", "C"]}}));
    let replay = |run_id: &str, resume: bool| -> Vec<String> {
        let mut args: Vec<String> = [
            "replay",
            "ab",
            "--step",
            "calling",
            "--input",
            input.to_str().unwrap(),
            "--run-id",
            run_id,
            "--in-process",
        ]
        .map(String::from)
        .into();
        if resume {
            args.push("--resume-interrupted".into());
        }
        args
    };
    // The reference: the same replay, not killed.
    let reference = fx.json(&replay("whole", false).iter().map(String::as_str).collect::<Vec<_>>()).expect(0).json;
    assert_eq!(reference["status"], "READY", "{reference:#}");
    let reference_files =
        tree(&PathBuf::from(str_of(&reference["run_dir"])).join("steps/calling"), &[".snakemake", ".cairn", "logs"]);
    let mut landed = 0;
    for (i, delay_ms) in [60u64, 180, 400, 800, 1500, 2600].into_iter().enumerate() {
        let run_id = format!("k{i}");
        let mut child = fx.c.spawn(&replay(&run_id, false));
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        // SIGKILL, unless it ended first (then the kill falls after it).
        let _ =
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL);
        let _ = child.wait();
        let out = fx.json(&replay(&run_id, true).iter().map(String::as_str).collect::<Vec<_>>());
        // A kill before the run was created leaves nothing to resume: it is then made anew.
        let out = if out.code == 0 {
            out
        } else {
            fx.json(&replay(&run_id, false).iter().map(String::as_str).collect::<Vec<_>>())
        };
        assert_eq!(out.json["status"], "READY", "{run_id} (killed at {delay_ms} ms): {:#}\n{}", out.json, out.stderr);
        let work = PathBuf::from(str_of(&out.json["run_dir"])).join("steps/calling");
        assert_eq!(
            tree(&work, &[".snakemake", ".cairn", "logs"]),
            reference_files,
            "{run_id}: the files the replay makes"
        );
        // No job that finished was started again, in any attempt.
        let events = fx.c.events(&run_id);
        if events.iter().any(|e| e["kind"] == "run.resumed") {
            landed += 1;
        }
        let mut finished: BTreeSet<String> = BTreeSet::new();
        let mut key_of: std::collections::HashMap<(u64, u64), String> = std::collections::HashMap::new();
        for e in &events {
            let (attempt, job) = (e["attempt"].as_u64().unwrap_or(0), e["data"]["job"].as_u64().unwrap_or(0));
            match str_of(&e["kind"]) {
                "pipeline.job_started" => {
                    let w: Vec<String> = e["data"]["wildcards"]
                        .as_object()
                        .unwrap()
                        .iter()
                        .map(|(k, v)| format!("{k}={}", str_of(v)))
                        .collect();
                    let key = format!("{} {{{}}}", str_of(&e["data"]["rule"]), w.join(", "));
                    assert!(
                        !finished.contains(&key),
                        "{run_id} (killed at {delay_ms} ms): {key} ran again after it finished"
                    );
                    key_of.insert((attempt, job), key);
                }
                "pipeline.job_finished" => {
                    if let Some(key) = key_of.get(&(attempt, job)) {
                        finished.insert(key.clone());
                    }
                }
                _ => {}
            }
        }
        assert_eq!(tree(&source_work, &[]), source_files, "{run_id}: the source run's files changed");
    }
    assert!(landed >= 2, "only {landed} of the kills fell while the replay ran");
}

/// Every entry below `dir` but the top-level `skip`: a file as its SHA-256, a symlink as
/// `-> target` (never followed).
fn entries(dir: &Path, skip: &[&str]) -> std::collections::BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, skip: &[&str], out: &mut std::collections::BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            if skip.contains(&rel.as_str()) {
                continue;
            }
            let t = e.file_type().unwrap();
            if t.is_symlink() {
                out.insert(rel, format!("-> {}", std::fs::read_link(e.path()).unwrap().display()));
            } else if t.is_dir() {
                walk(root, &e.path(), skip, out);
            } else {
                out.insert(rel, sha256_file(&e.path()));
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(dir, dir, skip, &mut out);
    out
}

/// Pipelines that make symlinks run as under plain `snakemake`: a `directory()` output that is a
/// link to a folder, a relative link read by a `shadow:` rule, a link out of the working copy.
/// Each link is an artifact recorded as a link (its target's text, never followed; the folder it
/// points to recorded once, as itself); a replay that reuses the step makes the links again in
/// the child, one that re-executes it carries them and Snakemake finds nothing to do, as in place.
#[test]
fn symlinks_a_pipeline_makes_are_recorded_as_links_and_carried_by_replays() {
    let Some(fx) = Fx::new() else { return };
    let dir = fx.p("symlinks");
    copy_dir(&Path::new(FIXTURES).join("symlinks"), &dir);
    // A step after the pipeline, so a replay can reuse the pipeline.
    let toml = std::fs::read_to_string(dir.join("workflow.toml")).unwrap()
        + "\n[tools.after]\ncommand = [\"python3\", \"-c\", \"print('{}')\"]\n\n[[steps]]\nid = \"after\"\ntool = \"after\"\nneeds = [\"pipeline\"]\n";
    std::fs::write(dir.join("workflow.toml"), toml).unwrap();
    fx.json(&["workflow", "add", dir.to_str().unwrap()]).expect(0);
    let args = fx.c.run_args("symlinks", &json!({}), &["--run-id", "links"]);
    let run = fx.json(&args.iter().map(String::as_str).collect::<Vec<_>>()).expect(0).json;
    assert_eq!(run["status"], "READY", "{run:#}");
    let work = PathBuf::from(str_of(&run["run_dir"])).join("steps/pipeline");

    let plain = fx.p("plain-links");
    copy_dir(&Path::new(FIXTURES).join("symlinks"), &plain);
    let out = Command::new(venv_bin().unwrap().join("snakemake"))
        .current_dir(&plain)
        .args(["--cores", "2", "--nocolor"])
        .env("PATH", &fx.path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        entries(&work, &[".snakemake", ".cairn"]),
        entries(&plain, &[".snakemake", "workflow.toml"]),
        "the same files and links as plain snakemake"
    );
    let plain_first = plain_job_keys(&String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        ran_keys_of(&fx, "links", "pipeline"),
        plain_first,
        "the same jobs as plain snakemake (the shadow rule's too)"
    );

    let artifacts = step(&run, "pipeline")["artifacts"].as_array().unwrap().clone();
    let find = |name: &str| {
        artifacts.iter().find(|a| a["name"] == name).cloned().unwrap_or_else(|| panic!("no {name}: {artifacts:#?}"))
    };
    assert_eq!(find("symlinked_dir")["link"], "dir_to_link_to");
    assert_eq!(find("test.symbolic.in")["link"], "test.in");
    assert_eq!(find("outside.link")["link"], "/etc/hostname", "a link out of the copy is recorded as a link");
    assert_eq!(find("outside.link")["bytes"], "/etc/hostname".len());
    assert!(find("dir_to_link_to/one.txt")["link"].is_null(), "the folder a link points to is recorded as itself");
    assert!(
        !artifacts.iter().any(|a| str_of(&a["name"]).starts_with("symlinked_dir/")),
        "never followed: {artifacts:#?}"
    );
    // Its job names it.
    assert_eq!(find("symlinked_dir")["job"]["rule"], "link_dir");
    let jobs = fx.json(&["jobs", "links", "pipeline"]).expect(0).json;
    let link_dir = jobs["jobs"].as_array().unwrap().iter().find(|j| j["rule"] == "link_dir").unwrap();
    assert_eq!(link_dir["files"], json!([{"path": "symlinked_dir", "link": "dir_to_link_to"}]), "{link_dir:#}");
    // A link holds no bytes to read; the crate names it and validates.
    let read = fx.json(&["read-artifact", "links", "pipeline", "outside.link"]).expect(4);
    assert!(read.stderr.contains("is a symlink to /etc/hostname"), "{}", read.stderr);
    let crate_dir = fx.p("crate-links");
    fx.json(&["export", "links", "--ro-crate", crate_dir.to_str().unwrap()]).expect(0);
    crate::rocrate::assert_valid(&fx.c, &crate_dir);
    let meta = std::fs::read_to_string(crate_dir.join("ro-crate-metadata.json")).unwrap();
    assert!(meta.contains("steps/pipeline/outside.link -> /etc/hostname"), "the step's action names its links");

    // A replay that reuses the pipeline makes its links again in the child.
    let reused = fx.json(&["replay", "links", "--step", "after", "--run-id", "reused"]).expect(0).json;
    assert_eq!(reused["status"], "READY", "{reused:#}");
    let child = PathBuf::from(str_of(&reused["run_dir"])).join("steps/pipeline");
    assert_eq!(std::fs::read_link(child.join("symlinked_dir")).unwrap(), Path::new("dir_to_link_to"));
    assert_eq!(std::fs::read_link(child.join("outside.link")).unwrap(), Path::new("/etc/hostname"));
    // One that re-executes it carries them: Snakemake finds nothing to do, as in place.
    let again = fx.json(&["replay", "links", "--step", "pipeline", "--run-id", "again"]).expect(0).json;
    assert_eq!(again["status"], "READY", "{again:#}");
    let out = Command::new(venv_bin().unwrap().join("snakemake"))
        .current_dir(&plain)
        .args(["--cores", "2", "--nocolor"])
        .env("PATH", &fx.path)
        .output()
        .unwrap();
    let plain_again = plain_job_keys(&String::from_utf8_lossy(&out.stderr));
    assert_eq!(ran_keys_of(&fx, "again", "pipeline"), plain_again, "the jobs plain snakemake runs again in place");
    let work = PathBuf::from(str_of(&again["run_dir"])).join("steps/pipeline");
    assert_eq!(entries(&work, &[".snakemake", ".cairn"]), entries(&plain, &[".snakemake", "workflow.toml"]));
    fx.stop_daemon();
}

/// `cairn execute-plan` of `plan`, READY: Slurm's jobs each wait for its scheduler, so more than
/// the CLI helper's 60 s may pass.
fn execute_slowly(fx: &Fx, plan: &Value) -> Value {
    let mut args = approval(plan);
    args.push("--json".into());
    let i = fx.spawn(&args);
    let (code, out) = fx.wait_spawned(i, std::time::Duration::from_secs(240));
    let run: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}\n{}", fx.c.daemon_log()));
    assert_eq!((code, &run["status"]), (0, &json!("READY")), "{run:#}\n{}", fx.c.daemon_log());
    run
}

/// Under Slurm (Snakemake submitting each job with its Slurm executor): the jobs are records,
/// and a planned replay adding a sample submits only that sample's jobs, the call and `all`.
#[test]
fn a_planned_replay_on_a_slurm_target_submits_only_the_new_samples_jobs() {
    let Some(fx) = Fx::new() else { return };
    let Some(d) = sshd() else { return };
    if !crate::remote::slurm() {
        return;
    }
    let Some(_) = calling(&fx) else { return };
    let ws = fx.p("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ssh = format!("root@127.0.0.1:{}", sshd_port());
    let extra = ["--executor", "slurm", "--partition", "debug"];
    fx.c.add_target("hpc", &ssh, &d.join("id_ed25519"), &d.join("known_hosts"), ws.to_str().unwrap(), &extra).expect(0);
    let plan = fx.plan("calling", &json!({"config": {"samples": ["A"]}}), "hpc", &fx.p("ws/a"), "a").expect(0).json;
    let source = execute_slowly(&fx, &plan);
    let source_id = str_of(&source["run_id"]).to_string();
    assert_eq!(ran_keys(&fx, &source_id).len(), 6, "every job recorded under Slurm");

    let input = fx.c.input(&json!({"config": {"samples": ["A", "B"]}}));
    let child_dir = fx.p("ws/ab");
    let replay = fx
        .json(&[
            "plan",
            "--replay",
            &source_id,
            "--step",
            "calling",
            "--input",
            input.to_str().unwrap(),
            "--target",
            "hpc",
            "--run-dir",
            child_dir.to_str().unwrap(),
            "--name",
            "abc",
        ])
        .expect(0)
        .json;
    let child = execute_slowly(&fx, &replay);
    let want: BTreeSet<String> =
        ["bwa_map {sample=B}", "samtools_sort {sample=B}", "samtools_index {sample=B}", "call {}", "all {}"]
            .map(String::from)
            .into();
    assert_eq!(ran_keys(&fx, str_of(&child["run_id"])), want, "only the new sample's jobs, the call and all");
    let log = std::fs::read_to_string(child_dir.join("steps/calling/.cairn/attempt-1/stderr")).unwrap();
    let submitted = log.matches("has been submitted with SLURM jobid").count();
    assert_eq!(submitted, 4, "the four jobs that are not `all` went through Slurm:\n{log}");
    fx.stop_daemon();
}
