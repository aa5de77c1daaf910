//! `cairn kernel …`: the session kernel, through the daemon that owns it.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cairn_engine::Engine;
use serde_json::{Value, json};

use crate::Failure;
use crate::cli::KernelCommand;
use crate::client::Client;
use crate::output::{human_duration, print_json, print_wire};
use crate::wire::{Interrupted, Job, JobList, KernelJobKind, KernelJobState, Restarted};

pub fn run(root: &Path, command: KernelCommand) -> Result<u8, Failure> {
    match command {
        KernelCommand::Exec { code, file, timeout, detach, json } => {
            let code = match (code, file) {
                (Some(c), _) => c,
                (None, Some(f)) => read_code(&f)?,
                (None, None) => return Err(Failure::usage("give the code, or --file FILE")),
            };
            let client = Client::connect(root)?;
            let mut body = json!({"code": code});
            if let Some(t) = timeout {
                body["timeout_secs"] = json!(t);
            }
            let job: Job = client.post("/kernel/jobs", &body)?.decode(202, "POST /kernel/jobs")?;
            let job_id = job.job_id.clone();
            if detach {
                if json {
                    print_wire(&job);
                } else {
                    println!("{job_id} queued; see it with `cairn kernel poll {job_id}`");
                }
                return Ok(0);
            }
            let job = wait(&client, &job_id, json)?;
            Ok(finish(&job, json))
        }
        KernelCommand::Jobs { json } => {
            let client = Client::connect(root)?;
            let list: JobList = client.get("/kernel/jobs")?.decode(200, "GET /kernel/jobs")?;
            if json {
                print_wire(&list);
            } else {
                if list.jobs.is_empty() {
                    eprintln!("no session jobs yet; run one with `cairn kernel exec CODE`");
                }
                for j in &list.jobs {
                    let mut first = j.code.lines().next().unwrap_or("").to_string();
                    if j.kind == KernelJobKind::Verification {
                        first = format!(
                            "verify {} ({} of {} cells)",
                            j.title.as_deref().unwrap_or(""),
                            j.cells_done.unwrap_or(0),
                            j.cells_total.unwrap_or(0)
                        );
                    }
                    println!(
                        "{}  {:<11} {:>8}  {}  {}",
                        j.job_id,
                        j.status.as_str(),
                        duration_of(j).map(human_duration).unwrap_or_default(),
                        j.submitted_at,
                        first.chars().take(60).collect::<String>()
                    );
                }
            }
            Ok(0)
        }
        KernelCommand::Poll { job_id, json } => {
            let client = Client::connect(root)?;
            let job: Job = client.get(&format!("/kernel/jobs/{job_id}"))?.decode(200, "GET /kernel/jobs/{id}")?;
            if json {
                print_wire(&job);
            } else {
                print_outputs(&job, 0);
                eprintln!("{}", summary(&job));
            }
            Ok(0)
        }
        KernelCommand::Interrupt { json } => {
            let client = Client::connect(root)?;
            let out: Interrupted =
                client.post("/kernel/interrupt", &json!({}))?.decode(200, "POST /kernel/interrupt")?;
            if json {
                print_wire(&out);
            } else {
                match (&out.interrupted, out.verifications.is_empty()) {
                    (Some(j), _) => println!("interrupted {j}"),
                    (None, true) => println!("no job was running"),
                    (None, false) => {}
                }
                for v in &out.verifications {
                    println!("stopping verification {v}: no further cell; the running one is interrupted");
                }
            }
            Ok(0)
        }
        KernelCommand::Restart { json } => {
            let client = Client::connect(root)?;
            let out: Restarted = client.post("/kernel/restart", &json!({}))?.decode(200, "POST /kernel/restart")?;
            if json {
                print_wire(&out);
            } else {
                let cancelled = out.cancelled.len();
                match &out.killed_session {
                    Some(s) => println!("killed session {s}; {cancelled} job(s) cancelled; the next job starts fresh"),
                    None => println!("no kernel was running; the next job starts fresh"),
                }
                for v in &out.verifications {
                    println!("killed the kernel of verification {v}");
                }
            }
            Ok(0)
        }
        KernelCommand::Export { workflow, output, json } => {
            let (path, what) = if workflow { export_workflow(root, output)? } else { export_audit(root, output)? };
            if json {
                print_json(&json!({"path": path.display().to_string(), "kind": what}));
            } else {
                println!("{}", path.display());
            }
            Ok(0)
        }
    }
}

fn read_code(path: &Path) -> Result<String, Failure> {
    let mut text = String::new();
    if path.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text).map_err(|e| Failure::usage(format!("stdin: {e}")))?;
    } else {
        text = std::fs::read_to_string(path)
            .map_err(|e| Failure::usage(format!("{}: cannot read the code: {e}", path.display())))?;
    }
    Ok(text)
}

/// The daemon's answer as the wire type it sends with `status`; any other status is the failure
/// it carries. `what` names the request in the message of an answer this build cannot read.
/// A job's duration, when it has one (a negative one, from a clock that went back, is none).
fn duration_of(job: &Job) -> Option<Duration> {
    job.duration_ms.and_then(|ms| u64::try_from(ms).ok()).map(Duration::from_millis)
}

/// Follows the job until it ends, printing its outputs as they come (unless --json): each read
/// waits in the daemon for the job's next output or its end (at most a second, so Ctrl-C is
/// seen). Ctrl-C stops waiting; the job goes on in the daemon.
fn wait(client: &Client, job_id: &str, json: bool) -> Result<Job, Failure> {
    let stop = Arc::new(AtomicBool::new(false));
    let registered = signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone());
    let mut shown = 0;
    let mut outputs = 0;
    loop {
        let path = format!("/kernel/jobs/{job_id}?wait=1&outputs={outputs}");
        let job: Job = client.get(&path)?.decode(200, "GET /kernel/jobs/{id}")?;
        outputs = job.outputs.len();
        if !json {
            shown = print_outputs(&job, shown);
        }
        if job.has_ended() {
            if let Ok(id) = registered {
                signal_hook::low_level::unregister(id);
            }
            return Ok(job);
        }
        if stop.load(Ordering::SeqCst) {
            eprintln!(
                "\nstopped waiting: {job_id} goes on in the session kernel.\n  see it:      cairn kernel poll {job_id}\n  interrupt:   cairn kernel interrupt"
            );
            return Err(Failure::detached(format!("detached from {job_id}")));
        }
    }
}

/// Prints the outputs' text beyond the first `printed` bytes; returns the new total. While a job
/// runs its outputs are the raw messages and at its end the merged ones, whose text is the same.
fn print_outputs(job: &Job, printed: usize) -> usize {
    let text: String = job.outputs.iter().map(text_of).collect();
    if let Some(new) = text.get(printed..) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(new.as_bytes());
        let _ = out.flush();
    }
    text.len().max(printed)
}

fn text_of(o: &Value) -> String {
    let join = |v: &Value| match v {
        Value::Array(parts) => parts.iter().filter_map(Value::as_str).collect::<String>(),
        Value::String(s) => s.clone(),
        _ => String::new(),
    };
    match o["output_type"].as_str() {
        Some("stream") => join(&o["text"]),
        Some("execute_result") | Some("display_data") => {
            let mut t = join(&o["data"]["text/plain"]);
            if !t.ends_with('\n') {
                t.push('\n');
            }
            t
        }
        Some("error") => {
            format!("{}: {}\n", o["ename"].as_str().unwrap_or(""), o["evalue"].as_str().unwrap_or(""))
        }
        _ => String::new(),
    }
}

fn summary(job: &Job) -> String {
    let mut s = format!("{} {}", job.job_id, job.status);
    if let Some(d) = duration_of(job) {
        s.push_str(&format!(" ({})", human_duration(d)));
    }
    if let Some(e) = &job.error {
        s.push_str(&format!(": {e}"));
    }
    s
}

/// 0 for `ok`, 1 for a job that ended otherwise (as a failed verification).
fn finish(job: &Job, json: bool) -> u8 {
    if json {
        print_wire(job);
    } else {
        eprintln!("{}", summary(job));
    }
    if job.status == KernelJobState::Ok { 0 } else { 1 }
}

fn export_audit(root: &Path, output: Option<PathBuf>) -> Result<(PathBuf, &'static str), Failure> {
    let client = Client::connect(root)?;
    // The audit notebook is nbformat, read as it is.
    let notebook: Value = client.get("/kernel/audit")?.decode(200, "GET /kernel/audit")?;
    let path = match output {
        Some(p) => p,
        None => {
            let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%S%.3fZ").to_string().replace('.', "");
            root.join("workflows").join("audit").join(format!("session-{stamp}.ipynb"))
        }
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| Failure::usage(format!("{}: {e}", parent.display())))?;
    }
    let text = serde_json::to_vec_pretty(&notebook).unwrap_or_default();
    std::fs::write(&path, text)
        .map_err(|e| Failure::usage(format!("{}: cannot write the notebook: {e}", path.display())))?;
    Ok((path, "audit"))
}

fn export_workflow(root: &Path, output: Option<PathBuf>) -> Result<(PathBuf, &'static str), Failure> {
    let engine = Engine::open(root)?;
    let passed = engine.newest_pass()?.and_then(|v| v.notebook).ok_or(cairn_engine::EngineError::NothingVerified)?;
    match output {
        Some(p) => {
            std::fs::copy(&passed, &p)
                .map_err(|e| Failure::usage(format!("{}: cannot write the notebook: {e}", p.display())))?;
            Ok((p, "workflow"))
        }
        None => Ok((PathBuf::from(passed), "workflow")),
    }
}
