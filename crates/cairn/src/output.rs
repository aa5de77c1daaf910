//! What commands print for a person: the human renderings of the wire objects (`--json` prints
//! the wire objects themselves, with [`print_json`]).

use std::collections::BTreeMap;
use std::time::Duration;

use cairn_core::canonical::short_hash;
use cairn_core::replay::Decision;
use cairn_core::store::EventRecord;
use cairn_engine::RunView;
use cairn_engine::registry::LoadedWorkflow;
use cairn_engine::replay::PreparedReplay;
use serde_json::Value;

use crate::wire;

pub fn print_json(v: &Value) {
    use std::io::Write;
    // Serialising a Value cannot fail; a closed stdout (`| head`) is not an error worth a panic.
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

pub use crate::wire::time;

/// A wire object on stdout, as `--json` prints it.
pub fn print_wire<T: serde::Serialize>(v: &T) {
    print_json(&wire::to_value(v));
}

fn duration(us: Option<i64>) -> String {
    match us {
        None => "-".into(),
        Some(us) => human_duration(Duration::from_micros(u64::try_from(us).unwrap_or(0))),
    }
}

/// A run's answer as the CLI prints it: the run as the wire gives it (`GET /runs/{id}`, the
/// daemon's answer at the end of the stream a command followed, or the registry's read
/// in-process), each pipeline step's jobs summed up, and (for `cairn show`) each step's log tail.
#[derive(Debug, Clone)]
pub struct RunAnswer {
    pub run: wire::RunResult,
    pub pipelines: BTreeMap<String, PipelineSection>,
    pub log_tails: BTreeMap<String, String>,
}

/// A pipeline step's jobs as a run's answer sums them up: each rule's counts, and the jobs that
/// failed or were interrupted, in the order they started.
#[derive(Debug, Clone, Default)]
pub struct PipelineSection {
    pub rules: Vec<wire::RuleJobs>,
    pub stopped: Vec<wire::PipelineJob>,
}

impl RunAnswer {
    /// The answer of a run read in-process.
    pub fn of_view(view: &RunView) -> RunAnswer {
        use cairn_core::job::JobStatus;
        let pipelines = view
            .steps
            .iter()
            .filter(|s| !s.jobs.is_empty())
            .map(|s| {
                let section = PipelineSection {
                    rules: cairn_core::job::by_rule(&s.jobs).iter().map(wire::RuleJobs::from_core).collect(),
                    stopped: s
                        .jobs
                        .iter()
                        .filter(|j| matches!(j.status, JobStatus::Failed | JobStatus::Interrupted))
                        .map(wire::PipelineJob::from_core)
                        .collect(),
                };
                (s.step_id.clone(), section)
            })
            .collect();
        let log_tails =
            view.steps.iter().filter_map(|s| Some((s.step_id.clone(), s.record.as_ref()?.log_tail.clone()?))).collect();
        RunAnswer { run: wire::RunResult::from_view(view), pipelines, log_tails }
    }

    /// The run's status, as its exit code is decided by.
    pub fn status(&self) -> Option<cairn_core::status::RunStatus> {
        self.run.status.parse().ok()
    }
}

/// A run: each step's line (and, with `detail`, its error, result, artifacts and log tail), its
/// pipeline jobs, then its status and findings.
pub fn print_run(answer: &RunAnswer, detail: bool) {
    let run = &answer.run;
    println!("run {}  {}@{}", run.run_id, run.workflow, run.version);
    println!("  {:<28} {:<10} {:>8}  {:>9}", "STEP", "STATUS", "ATTEMPTS", "DURATION");
    for s in &run.steps {
        print_step(answer, s, detail);
    }
    if let Some(note) = steps_note(run) {
        println!("{note}");
    }
    let findings: Vec<cairn_core::validator::Finding> =
        run.findings.iter().filter_map(|f| serde_json::from_value(f.clone()).ok()).collect();
    match run.status.as_str() {
        "BLOCKED" => {
            println!("BLOCKED: {} finding(s)", findings.len());
            for f in &findings {
                let observed = f.observed.as_ref().map(|o| format!(" (observed {o})")).unwrap_or_default();
                println!("  - {}: {} [{} {}]{observed}", f.rule, f.finding, f.step, f.pointer);
            }
        }
        "READY" => println!("READY: every validator rule holds"),
        status => println!("{status}"),
    }
    if let Some(w) = &run.waiting {
        println!("{}", waiting_line(w));
    }
    if let Some(e) = &run.error {
        println!("  error: {e}");
    }
    if detail {
        println!("  created {}  finished {}", run.created_at, run.finished_at.as_deref().unwrap_or("-"));
        println!("  run dir {}", run.run_dir);
        if let Some(who) = who_line(run) {
            println!("{who}");
        }
    }
}

/// What the rows above left out of a run's steps, with its counts and how to see the rest; none
/// when they are every step.
fn steps_note(run: &wire::RunResult) -> Option<String> {
    let (c, p) = (&run.step_counts, &run.steps_page);
    if p.returned >= c.total {
        return None;
    }
    let shown = match (p.status.is_empty(), p.returned) {
        (_, 0) => format!("no step of {} shown", c.total),
        (true, n) => format!("steps {}-{} of {} shown", p.offset + 1, p.offset + n, c.total),
        (false, n) => format!("{n} of {} steps shown, the {} ones", c.total, p.status.join("/")),
    };
    let mut line = format!(
        "  {shown}: {} completed, {} failed, {} running, {} pending\n  every step: `cairn show {} --all`",
        c.completed, c.failed, c.running, c.pending, run.run_id
    );
    if let Some(next) = p.next_offset {
        let mut page = format!("--steps-offset {next}");
        if !p.status.is_empty() {
            page.push_str(&format!(" --steps-status {}", p.status.join(",")));
        }
        if p.attention_first {
            page.push_str(" --steps-order attention");
        }
        line.push_str(&format!("; the next page: `cairn show {} {page}`", run.run_id));
    }
    Some(line)
}

/// Who planned, approved (or submitted) and cancelled a run, as far as it was recorded.
pub fn who_line(run: &wire::RunResult) -> Option<String> {
    let mut parts = Vec::new();
    match &run.approval {
        Some(a) => {
            if let Some(p) = &a.planned_by {
                parts.push(format!("planned by {p}"));
            }
            if let Some(b) = &a.by {
                parts.push(format!("approved by {b}"));
            }
        }
        None => {
            if let Some(s) = &run.submitted_by {
                parts.push(format!("submitted by {s}"));
            }
        }
    }
    if let Some(c) = &run.cancelled_by {
        parts.push(format!("cancelled by {c}"));
    }
    (!parts.is_empty()).then(|| format!("  {}", parts.join("; ")))
}

/// What a run waiting for its environment shows: why, since when, and that it goes on by itself.
pub fn waiting_line(w: &wire::RunWaiting) -> String {
    format!(
        "  waiting since {} ({}): {}\n  it continues by itself once this clears; tried {} time(s), next at {}",
        w.since, w.code, w.reason, w.tries, w.next_try_at
    )
}

fn print_step(answer: &RunAnswer, s: &wire::StepResult, detail: bool) {
    // The wire gives milliseconds with microseconds as the fraction: the same duration back.
    let us = s.duration_ms.map(|ms| (ms * 1000.0).round() as i64);
    let mut line = format!("  {:<28} {:<10} {:>8}  {:>9}", s.step_id, s.status, s.attempts, duration(us));
    if let Some(reason) = &s.reason {
        line.push_str(&format!("  {reason}"));
    } else if s.reused
        && let Some(source) = answer.run.lineage.first()
    {
        line.push_str(&format!("  reused from {}", source.run_id));
    }
    println!("{line}");
    if let Some(err) = &s.error
        && (detail || s.status == "FAILED")
    {
        println!("      {err}");
    }
    if detail && let Some(result) = &s.result {
        println!("      result {}", compact(result, s.result_truncated.then_some(s.result_bytes), 100));
    }
    if detail {
        for a in &s.artifacts {
            println!("      {}", artifact_line(&a.name, &a.path, a.bytes, &a.sha256, a.link.as_deref()));
        }
    }
    if detail && let Some(tail) = answer.log_tails.get(&s.step_id) {
        for l in tail.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev() {
            println!("      | {l}");
        }
    }
    if let Some(section) = answer.pipelines.get(&s.step_id) {
        print_pipeline_section(&answer.run.run_id, &s.step_id, section);
    }
}

/// A JSON value on one line, cut to about `max` characters. A result the wire cut already (a
/// string of its JSON text's start, `whole` bytes in all) is cut from that text.
fn compact(v: &Value, whole: Option<usize>, max: usize) -> String {
    let text = match (whole, v) {
        (Some(_), Value::String(start)) => start.clone(),
        _ => v.to_string(),
    };
    let bytes = whole.unwrap_or(text.len());
    if whole.is_none() && text.chars().count() <= max {
        return text;
    }
    let cut: String = text.chars().take(max).collect();
    format!("{cut}… ({bytes} bytes; `cairn result` prints it whole)")
}

fn size(bytes: u64) -> String {
    match bytes {
        b if b < 1024 => format!("{b} B"),
        b if b < 1 << 20 => format!("{:.1} KiB", b as f64 / 1024.0),
        b if b < 1 << 30 => format!("{:.1} MiB", b as f64 / f64::from(1u32 << 20)),
        b => format!("{:.2} GiB", b as f64 / f64::from(1u32 << 30)),
    }
}

fn artifact_line(name: &str, path: &str, bytes: u64, sha256: &str, link: Option<&str>) -> String {
    match link {
        Some(target) => {
            format!("artifact {name:<12} {path} -> {target}  (a symlink, recorded as a link, not followed)")
        }
        None => format!("artifact {name:<12} {path}  {}  sha256 {}", size(bytes), sha256),
    }
}

/// `cairn result RUN STEP`: the step's status, its whole result (pretty) and its artifacts.
pub fn print_step_result(d: &wire::StepDetail) {
    let s = &d.step;
    println!("run {}  step {}  {}  (attempts {})", d.run_id, s.step_id, s.status, s.attempts);
    if let Some(reason) = &s.reason {
        println!("  {reason}");
    }
    if let Some(e) = &s.error {
        println!("  error: {e}");
    }
    match &s.result {
        Some(v) => println!("{}", serde_json::to_string_pretty(v).unwrap_or_default()),
        None => println!("  no result: the step has not completed"),
    }
    for a in &s.artifacts {
        println!("  {}", artifact_line(&a.name, &a.path, a.bytes, &a.sha256, a.link.as_deref()));
    }
}

/// Under a pipeline step of `cairn show`: its jobs per rule, and the jobs that failed or were
/// interrupted, first and by name (`cairn jobs` has every job).
fn print_pipeline_section(run_id: &str, step_id: &str, section: &PipelineSection) {
    for j in &section.stopped {
        let wildcards: Vec<String> = j.wildcards.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let wildcards = if wildcards.is_empty() { String::new() } else { format!(" ({})", wildcards.join(", ")) };
        println!("      job {}.{} {}{wildcards}: {}", j.attempt, j.job, j.rule, j.status);
    }
    let rules: Vec<String> = section
        .rules
        .iter()
        .map(|r| {
            let ran = r.jobs - r.carried;
            let carried = if r.carried > 0 { format!(" + {} carried", r.carried) } else { String::new() };
            if r.finished == ran {
                format!("{} {ran}{carried}", r.rule)
            } else {
                format!("{} {}/{ran}{carried}", r.rule, r.finished)
            }
        })
        .collect();
    let total: u64 = section.rules.iter().map(|r| r.jobs).sum();
    println!("      pipeline jobs: {total} ({}); `cairn jobs {run_id} {step_id}` lists them", rules.join(", "));
}

/// `cairn jobs RUN STEP`: each rule's counts, then every job (failed and interrupted ones first),
/// with why it ran and what it read and wrote.
pub fn print_jobs(j: &wire::PipelineJobs) {
    let from = j.from_run.as_ref().map(|r| format!(" (reused: its jobs ran in run {r})")).unwrap_or_default();
    if j.jobs.is_empty() {
        println!("run {}  step {}  {}: no pipeline jobs recorded{from}", j.run_id, j.step_id, j.status);
        return;
    }
    println!("run {}  step {}  {}: {} job(s){from}", j.run_id, j.step_id, j.status, j.jobs.len());
    for r in &j.rules {
        let mut parts = vec![format!("{} finished", r.finished)];
        for (n, word) in
            [(r.failed, "failed"), (r.running, "running"), (r.interrupted, "interrupted"), (r.carried, "carried over")]
        {
            if n > 0 {
                parts.push(format!("{n} {word}"));
            }
        }
        println!("  {:<24} {:>4} job(s): {}", r.rule, r.jobs, parts.join(", "));
    }
    let mut jobs: Vec<&wire::PipelineJob> = j.jobs.iter().collect();
    jobs.sort_by_key(|job| !job.is_failed());
    for job in jobs {
        let wildcards: Vec<String> = job.wildcards.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let wildcards = if wildcards.is_empty() { String::new() } else { format!(" ({})", wildcards.join(", ")) };
        let tries = if job.tries > 1 { format!(", {} tries", job.tries) } else { String::new() };
        let tries = match &job.carried_from {
            Some(run) => format!("{tries} (ran in run {run})"),
            None => tries,
        };
        println!("\n  job {}.{} {}{wildcards}: {}{tries}", job.attempt, job.job, job.rule, job.status);
        if let Some(reason) = &job.reason {
            println!("    why:    {reason}");
        }
        for input in &job.inputs {
            let from = input.from.map(|f| format!("  <- job {}.{}", f.attempt, f.job)).unwrap_or_default();
            println!("    input:  {}{from}", input.path);
        }
        let shown: Vec<&str> = job.files.iter().map(|f| f.path.as_str()).collect();
        for f in &job.files {
            match (&f.sha256, &f.link) {
                (Some(sha), _) => {
                    println!("    output: {}  {} bytes  sha256 {}", f.path, f.bytes.unwrap_or(0), short_hash(sha))
                }
                (None, Some(link)) => println!("    output: {} -> {link}  (a symlink, not followed)", f.path),
                (None, None) => println!("    output: {}  (gone when the job ended)", f.path),
            }
        }
        for o in job.outputs.iter().filter(|o| !shown.iter().any(|s| s.starts_with(o.trim_end_matches('/')))) {
            println!("    output: {o}");
        }
        for l in &job.log {
            println!("    log:    {l}");
        }
    }
}

/// `cairn artifacts RUN`.
pub fn print_artifacts(list: &wire::ArtifactList) {
    if list.artifacts.is_empty() {
        println!("run {} recorded no artifacts: its steps declare no `outputs` in workflow.toml", list.run_id);
        return;
    }
    println!("run {}: {} artifact(s)", list.run_id, list.artifacts.len());
    println!("  {:<20} {:<12} {:>10}  {:<64}  PATH", "STEP", "OUTPUT", "BYTES", "SHA256");
    for a in &list.artifacts {
        let reused = a.reused_from.as_ref().map(|r| format!("  (reused from {r})")).unwrap_or_default();
        let path = match &a.link {
            Some(target) => format!("{} -> {target} (a symlink)", a.path),
            None => a.path.clone(),
        };
        println!("  {:<20} {:<12} {:>10}  {:<64}  {path}{reused}", a.step_id, a.name, a.bytes, a.sha256);
    }
}

/// `cairn trace FILE`.
pub fn print_trace(file: &std::path::Path, t: &wire::TraceResult) {
    if t.matches.is_empty() {
        eprintln!(
            "no run recorded {} (sha256 {}): no artifact of any run has these bytes; a file is recorded only when a step declares it in `outputs`",
            file.display(),
            t.sha256
        );
        return;
    }
    println!("{}  sha256 {}", file.display(), t.sha256);
    for m in &t.matches {
        let how = match &m.reused_from {
            Some(from) => format!("reused from {from} via {}", m.lineage.join(" ← ")),
            None => "produced here".to_string(),
        };
        println!(
            "  run {}  {}@{}  step {} attempt {}  {}  ({how})",
            m.run_id, m.workflow, m.version, m.step_id, m.attempt, m.path
        );
        for j in &m.jobs {
            let wildcards: Vec<String> = j.wildcards.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let wildcards = if wildcards.is_empty() { String::new() } else { format!(" ({})", wildcards.join(", ")) };
            println!("    <- job {}.{} {}{wildcards}", j.attempt, j.job, j.rule);
            for i in &j.inputs {
                let sha = i.sha256.as_deref().map(short_hash).unwrap_or("not recorded");
                let from = match i.from {
                    Some(f) => format!("  written by job {}.{}", f.attempt, f.job),
                    None => "  (no job of the step wrote it)".to_string(),
                };
                println!("       {}  sha256 {sha}{from}", i.path);
            }
        }
    }
}

pub fn print_runs(list: &wire::RunList) {
    if list.runs.is_empty() {
        eprintln!("no runs yet; start one with `cairn run NAME --input FILE`");
        return;
    }
    println!("{:<40} {:<10} {:<32} {:<24}", "RUN", "STATUS", "WORKFLOW", "CREATED");
    for r in &list.runs {
        let waiting =
            r.waiting.as_ref().map(|w| format!("  waiting since {} ({})", w.since, w.code)).unwrap_or_default();
        println!(
            "{:<40} {:<10} {:<32} {:<24}{waiting}",
            r.run_id,
            r.status,
            format!("{}@{}", r.workflow, r.version),
            r.created_at
        );
    }
}

pub fn print_events(events: &[EventRecord]) {
    for e in events {
        let step = e.step_id.as_deref().unwrap_or("-");
        let attempt = e.attempt.map(|a| a.to_string()).unwrap_or_else(|| "-".into());
        println!(
            "{:>5}  {}  {:<26} {:<24} {:>3}  {}",
            e.seq,
            time(e.at),
            e.event.kind(),
            step,
            attempt,
            e.event.data()
        );
    }
}

pub fn print_workflow(wf: &LoadedWorkflow) {
    let spec = wf.spec();
    println!("{}  digest {}", spec.reference(), &wf.record.digest[..16]);
    if !spec.description.is_empty() {
        println!("  {}", spec.description);
    }
    println!("  steps (in execution order):");
    for &i in wf.dag.order() {
        let s = &spec.steps[i];
        let needs = if s.needs.is_empty() { String::new() } else { format!("  needs {}", s.needs.join(", ")) };
        println!("    {:<28} tool {}{needs}", s.id, s.tool);
    }
    println!("  tools:");
    for (name, t) in &wf.tools {
        println!("    {:<28} {}  digest {}", name, spec.tools[name].command.join(" "), &t.digest[..16]);
    }
    if !spec.rules.is_empty() {
        println!("  validator rules:");
        for r in &spec.rules {
            println!(
                "    {:<28} {} {} {:?} {}",
                r.id,
                r.step,
                r.pointer,
                r.op,
                r.value.as_ref().map(|v| v.to_string()).unwrap_or_default()
            );
        }
    }
}

/// `cairn daemon list`: one line a daemon, then the runs it drives.
pub fn print_daemons(listed: &wire::DaemonsBody) {
    println!("{:<38} {:<20} {:>8}  {:<25} {:<25} RUNS", "DAEMON", "HOST", "PID", "STARTED", "HEARTBEAT");
    for d in &listed.daemons {
        let runs = if d.runs.is_empty() { "-".to_string() } else { d.runs.join(", ") };
        println!("{:<38} {:<20} {:>8}  {:<25} {:<25} {runs}", d.id, d.host, d.pid, d.started_at, d.heartbeat_at);
    }
}

pub fn print_lineage(view: &RunView) {
    let (run, chain) = (&view.run, &view.lineage);
    if let Some(l) = &view.lease {
        let on = l.host.as_deref().map(|h| format!(" on host {h}")).unwrap_or_default();
        let until = l.expires_at.map(wire::time).unwrap_or_else(|| "?".into());
        match (&l.waits_for_host, l.expired) {
            (Some(host), _) => println!(
                "  waiting for a daemon on host {host}: its files are there, and the lease of daemon {}{on} expired at {until}",
                l.daemon
            ),
            (None, true) => {
                println!("  lease of daemon {}{on} expired at {until}: the next daemon takes it over", l.daemon)
            }
            (None, false) => println!("  driven by daemon {}{on} (lease epoch {}, until {until})", l.daemon, l.epoch),
        }
    }
    if let Some(a) = &view.approval {
        let how = match a.channel.as_str() {
            "elicitation" => "by the person, in the MCP client's approval form",
            "input_required" => "by the person, through the MCP client's input request",
            "host" => "through the MCP host's tool-call confirmation",
            "cli" => "with `cairn execute-plan`",
            "api" => "by a direct API call",
            _ => "(how was not recorded)",
        };
        println!("  approved {how} at {}  [{}]", wire::time(a.at), a.channel);
    }
    if let Some(replay) = &run.replay {
        let r = &replay.summary;
        println!("  replay of {}: requested [{}]", r.source_run_id, r.requested.join(", "));
        println!(
            "    replayed [{}]  reused [{}]  invalidated [{}]",
            some_ids(&r.replayed),
            some_ids(&r.reused),
            some_ids(&r.invalidated)
        );
    }
    if !chain.is_empty() {
        let ids: Vec<String> = chain.iter().map(|r| format!("{} ({})", r.run_id, r.status)).collect();
        println!("  lineage: {} <- {}", run.run_id, ids.join(" <- "));
    }
}

/// Step ids for a line of text: the first few of a long list, and how many there are.
fn some_ids(ids: &[String]) -> String {
    const SHOWN: usize = 12;
    if ids.len() <= SHOWN {
        return ids.join(", ");
    }
    format!("{}, … ({} in all)", ids[..SHOWN].join(", "), ids.len())
}

pub fn print_dry_run(p: &PreparedReplay, jobs: &[cairn_engine::JobPrediction]) {
    println!("replay of {} ({}) — dry run, nothing created", p.source.run_id, p.workflow.spec().reference());
    for d in &p.plan.decisions {
        let what = match d.decision {
            Decision::Reuse => "REUSE",
            Decision::Replay => "RUN",
        };
        println!("  {:<28} {:<6} {}", d.step_id, what, d.reason.text());
    }
    let s = &p.summary;
    println!("replayed {}, reused {}, invalidated {}", s.replayed.len(), s.reused.len(), s.invalidated.len());
    print_predictions(jobs);
}

/// Each pipeline step's forecast jobs (a replay's dry run, a replay plan).
pub fn print_predictions(jobs: &[cairn_engine::JobPrediction]) {
    for j in jobs {
        match &j.note {
            Some(note) => println!("pipeline step {}: {note}", j.step_id),
            None if j.rules.is_empty() => println!("pipeline step {}: Snakemake would run no job", j.step_id),
            None => {
                println!("pipeline step {}: the jobs Snakemake would run, by rule:", j.step_id);
                for r in &j.rules {
                    println!("  {}", wire::RuleJobs::from_core(r).summary().replacen(" ran", " would run", 1));
                }
            }
        }
    }
}

pub fn print_explain(e: &wire::Explanation) {
    println!("{} / {}: {}", e.run_id, e.step_id, e.text.as_str().unwrap_or(""));
    println!("  status {}  attempts {}", e.status, e.attempts);
    if let Some(sig) = e.signature.as_ref().and_then(Value::as_object) {
        for k in ["tool", "tool_digest", "args_hash"] {
            println!("  {k:<12} {}", sig.get(k).and_then(Value::as_str).unwrap_or(""));
        }
    }
    if let Some(error) = &e.error {
        println!("  error: {error}");
    }
    if !e.jobs.is_empty() {
        println!("  pipeline jobs, by rule:");
        for r in &e.jobs {
            println!("    {}", r.summary());
        }
    }
}

/// How many columns the timeline's axis spans in a terminal.
const TIMELINE_WIDTH: usize = 48;

/// `cairn show --timeline`: one line per attempt, a bar where it ran on the run's time axis, so
/// what overlapped and what was slow stand out; a reused step is a point (◆).
/// `cairn show RUN --layers`: the run's DAG by layers, each with its steps' counts by status.
pub fn print_layers(l: &wire::RunLayers) {
    let last = l.offset + l.layers.len();
    if l.layers.is_empty() {
        println!("run {}: {} layer{}, none from {}", l.run_id, l.total, if l.total == 1 { "" } else { "s" }, l.offset);
        return;
    }
    let s = if l.total == 1 { "" } else { "s" };
    println!("run {}: {} layer{s} (layers {}–{} shown)", l.run_id, l.total, l.offset, last - 1);
    println!(
        "{:>6}  {:>7}  {:>7}  {:>7}  {:>9}  {:>6}  first steps",
        "layer", "steps", "pending", "running", "completed", "failed"
    );
    for x in &l.layers {
        let c = &x.step_counts;
        let more = if c.total > x.first.len() { ", …" } else { "" };
        println!(
            "{:>6}  {:>7}  {:>7}  {:>7}  {:>9}  {:>6}  {}{more}",
            x.layer,
            c.total,
            c.pending,
            c.running,
            c.completed,
            c.failed,
            x.first.join(", ")
        );
    }
    if last < l.total {
        println!("next: cairn show {} --layers --steps-offset {last}", l.run_id);
    }
    println!("a layer's steps: cairn show {} --steps-layer N", l.run_id);
}

pub fn print_timeline(t: &wire::RunTimeline) {
    let len = t.length_ms.max(1);
    let state = if t.finished_ms.is_some() { "finished" } else { "still running" };
    let ran = t.attempts.iter().filter(|a| a.end != "reused").count();
    println!(
        "run {}: {ran} attempt{} over {} (0 ms = {}; {state})",
        t.run_id,
        if ran == 1 { "" } else { "s" },
        human_ms(t.length_ms as f64),
        t.started_at
    );
    if t.attempts.is_empty() {
        println!("no step has started yet");
        return;
    }
    let id_width = t.attempts.iter().map(|a| a.step_id.len()).max().unwrap_or(4).clamp(4, 32);
    println!(
        "{:<id_width$}  {:>3}  {:>9}  {:>9}  |0{:>w$}|",
        "step",
        "#",
        "start",
        "took",
        human_ms(len as f64),
        w = TIMELINE_WIDTH - 1
    );
    let column = |ms: i64| ((ms.clamp(0, len) as f64 / len as f64) * TIMELINE_WIDTH as f64) as usize;
    for a in &t.attempts {
        let from = column(a.start_ms).min(TIMELINE_WIDTH - 1);
        let mut bar = vec![' '; TIMELINE_WIDTH];
        let note = match a.end.as_str() {
            "reused" => {
                bar[from] = '◆';
                " reused".to_string()
            }
            end => {
                let to = column(a.end_ms.unwrap_or(t.length_ms)).clamp(from + 1, TIMELINE_WIDTH);
                bar[from..to].fill(if end == "completed" { '█' } else { '▒' });
                if end == "completed" { String::new() } else { format!(" {end}") }
            }
        };
        let took = match (a.duration_ms, a.end_ms) {
            (Some(d), _) => human_ms(d),
            (None, Some(end)) if a.end != "reused" => human_ms((end - a.start_ms) as f64),
            (None, None) => "…".into(),
            _ => "—".into(),
        };
        let attempt = if a.attempt == 0 { "-".to_string() } else { a.attempt.to_string() };
        println!(
            "{:<id_width$}  {:>3}  {:>9}  {:>9}  |{}|{note}",
            a.step_id,
            attempt,
            human_ms(a.start_ms as f64),
            took,
            bar.into_iter().collect::<String>()
        );
    }
    let p = &t.steps_page;
    if p.returned < t.step_counts.total {
        let mut line = format!(
            "the attempts of {} of the run's {} steps (from step {})",
            p.returned,
            t.step_counts.total,
            p.offset + 1
        );
        if let Some(next) = p.next_offset {
            line.push_str(&format!("; the next page: `cairn show {} --timeline --steps-offset {next}`", t.run_id));
        }
        println!("{line}");
    }
}

/// How long something took, as every human line of the CLI says it: "850 ms", "12.3 ms", "1.25 s".
pub fn human_duration(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else if ms >= 100.0 || ms == ms.trunc() {
        format!("{ms:.0} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

/// [`human_duration`] of milliseconds (the timeline's unit).
fn human_ms(ms: f64) -> String {
    human_duration(Duration::from_secs_f64(ms.max(0.0) / 1000.0))
}

/// `cairn doctor`: one line a check, then each finding with what to do.
pub fn print_doctor(d: &wire::Doctor) {
    println!("state root {}  registry {}", d.state_root, d.registry);
    for c in &d.checks {
        let mark = match c.status.as_str() {
            "passed" => "ok  ",
            "failed" => "FAIL",
            _ => "n/a ",
        };
        println!("  {mark} {:<10} {}", c.check, c.summary);
    }
    if d.findings.is_empty() {
        println!("no findings: every check passed");
        return;
    }
    println!("{} finding(s):", d.findings.len());
    for f in &d.findings {
        println!("  [{}] {}: {}", f.severity, f.check, f.message);
    }
}

/// `cairn backup`: where it is, what it holds, what it left.
pub fn print_backup(b: &wire::Backup) {
    println!("backup written to {}", b.path);
    println!("  {}  {} bytes (the registry, copied online)", b.database, b.database_bytes);
    for p in &b.copied {
        println!("  {}/  {} file(s), {} bytes: {}", p.path, p.files, p.bytes, p.what);
    }
    println!("not copied:");
    for l in &b.left {
        println!("  {l}");
    }
    println!(
        "restore: stop the daemon, then put the backup's contents back at the state root's own path (the registry names its files by absolute path)"
    );
}
