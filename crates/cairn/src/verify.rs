//! `cairn verify`: each cell's status live on stderr, then the verdict and the notebook or draft.
//! Ctrl-C interrupts the verification: its kernel is killed and the verdict is `interrupted`; a
//! second Ctrl-C exits at once.
//!
//! When a daemon serves the state root and its spare kernel fits this verification (the same
//! interpreter and kernel environment, no memory limit), the daemon runs it on that spare and
//! this command shows its progress: the same lines, the same answer, a kernel that was already
//! up. Otherwise (or with `--no-spare`) the kernel starts here, for this verification.

use std::io::BufRead;
use std::path::Path;
use std::sync::{Arc, Mutex};

use cairn_core::verification::CellStatus;
use cairn_engine::verify::{Document, VerifyObserver};
use cairn_engine::{Engine, StopKind, StopSignal};
use serde_json::{Value, json};

use crate::Failure;
use crate::client::Client;
use crate::output::print_wire;
use crate::wire::{Verify, VerifyCellStatus, VerifyKernelStart, VerifyResult, VerifyStreamEvent, VerifyVerdict};

struct Live {
    json: bool,
}

impl VerifyObserver for Live {
    fn message(&mut self, text: &str) {
        eprintln!("{text}");
    }

    fn cell_started(&mut self, index: usize, total: usize) {
        if !self.json {
            eprint!("  cell {index:>3}/{total:<3} … ");
        }
    }

    fn cell_finished(&mut self, _index: usize, status: CellStatus, ms: u64) {
        if !self.json && status != CellStatus::Skipped {
            eprintln!("{} ({})", status.as_str(), crate::output::human_duration(std::time::Duration::from_millis(ms)));
        }
    }
}

/// On the first Ctrl-C, runs `first`; on the second, exits at once.
fn on_interrupt(first: impl Fn() + Send + 'static) {
    let Ok(mut signals) = signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT]) else { return };
    std::thread::spawn(move || {
        let mut seen = 0;
        for _ in signals.forever() {
            seen += 1;
            if seen > 1 {
                std::process::exit(130);
            }
            eprintln!("\ninterrupting the verification (Ctrl-C again to quit at once)");
            first();
        }
    });
}

pub fn run(engine: &Engine, request: Verify, json: bool) -> Result<u8, Failure> {
    let cwd = std::env::current_dir().map_err(|e| Failure::usage(format!("cannot read the working directory: {e}")))?;
    let on_spare = !request.no_spare && request.memory_limit.is_none();
    let python = request.python.clone();
    let mut req = request.into_request(Some(&cwd))?;
    if on_spare && let Some(daemon) = spare_that_fits(engine.state().path(), python.as_deref()) {
        return through_daemon(&daemon, &req, json);
    }
    let stop = StopSignal::new();
    let signal = stop.clone();
    on_interrupt(move || signal.request(StopKind::Cancel));
    req.stop = Some(stop);
    let report = engine.verify(&req, &mut Live { json })?;
    finish(&VerifyResult::from_report(&report), json)
}

/// The daemon of `root`, when one runs with a spare kernel (ready or booting) that this
/// verification's kernel would match: the interpreter it would use and the environment it
/// would give the kernel.
fn spare_that_fits(root: &Path, python: Option<&Path>) -> Option<Client> {
    let daemon = Client::if_running(root)?;
    let spare: crate::wire::SpareKernel = daemon.get("/kernel/spare").ok()?.decode(200, "GET /kernel/spare").ok()?;
    if !spare.is_usable() {
        return None;
    }
    let ours = python.map(Path::to_path_buf).unwrap_or_else(|| root.join("python").join("bin").join("python"));
    // What the spare boots with (a booting one too): a verification the daemon runs gets the
    // daemon's interpreter and kernel environment, so they must be this command's. The daemon
    // checks the rest (memory limit, the interpreter file, distributions, plugins) as it takes
    // the spare, and starts a kernel for the verification when it does not fit.
    let fits = spare.python.as_deref() == ours.to_str()
        && spare.env_sha256.as_deref() == Some(cairn_engine::verify::kernel_env_sha256().as_str());
    fits.then_some(daemon)
}

/// Runs the verification in the daemon and shows its progress as it comes.
fn through_daemon(daemon: &Client, req: &cairn_engine::verify::VerifyRequest, json: bool) -> Result<u8, Failure> {
    let (document, path) = match &req.document {
        Document::File(p) => (None, Some(p.clone())),
        Document::Text(t) => (Some(t.clone()), None),
        Document::Draft => (None, None),
    };
    let body = crate::wire::to_value(&crate::wire::Verify {
        document,
        path,
        title: req.title.clone(),
        timeout_secs: req.cell_timeout.map(|t| t.as_secs()),
        no_wait: req.no_wait,
        parameters: Some(req.parameters.clone()),
        ..crate::wire::Verify::default()
    });
    let lines = match daemon.post_lines("/verifications", &body)? {
        Ok(lines) => lines,
        Err(refused) => return Err(crate::client::failure_of(&refused)),
    };
    let id: Arc<Mutex<Option<String>>> = Arc::default();
    let (known, cancel_via) = (id.clone(), daemon.clone());
    on_interrupt(move || {
        // Cancelled in the daemon as Ctrl-C cancels one here; the answer still comes.
        if let Some(id) = known.lock().ok().and_then(|g| g.clone()) {
            let _ = cancel_via.post(&format!("/verifications/{id}/cancel"), &json!({}));
        }
    });
    let mut live = Live { json };
    for line in lines.lines() {
        let line = line.map_err(|e| Failure::usage(format!("the daemon's verification stream broke: {e}")))?;
        let event = match serde_json::from_str::<VerifyStreamEvent>(&line) {
            Ok(event) => event,
            // A line this build does not know is passed over; a result it cannot read is an error.
            Err(e) if serde_json::from_str::<Value>(&line).is_ok_and(|v| v["event"] == "result") => {
                return Err(Failure::usage(format!("the daemon's verification result is unreadable: {e}")));
            }
            Err(_) => continue,
        };
        match event {
            VerifyStreamEvent::Started { verification_id } => {
                if let Ok(mut g) = id.lock() {
                    *g = Some(verification_id);
                }
            }
            VerifyStreamEvent::Message { text } => live.message(&text),
            VerifyStreamEvent::CellStarted { index, total } => live.cell_started(index, total),
            VerifyStreamEvent::CellFinished { index, status, duration_ms } => {
                live.cell_finished(index, status.into(), duration_ms);
            }
            VerifyStreamEvent::Result { result } => return finish(&result, json),
            VerifyStreamEvent::Error { status, error } => {
                return Err(Failure::of_answer(status, &error.code, error.message));
            }
        }
    }
    Err(Failure::usage(
        "the daemon's verification stream ended without a verdict (did the daemon stop?); see `cairn daemon status`",
    ))
}

fn finish(r: &VerifyResult, json: bool) -> Result<u8, Failure> {
    if json {
        print_wire(r);
    } else {
        print_human(r);
    }
    Ok(if r.verdict == VerifyVerdict::Passed { 0 } else { 1 })
}

fn print_human(r: &VerifyResult) {
    let skipped = r.cells.iter().filter(|c| c.status == VerifyCellStatus::Skipped).count();
    println!(
        "{}: {} ({} cells{})",
        r.title,
        r.verdict,
        r.cells.len(),
        if skipped > 0 { format!(", {skipped} skipped") } else { String::new() }
    );
    if let Some(f) = &r.error {
        println!("  {f}");
    }
    if let Some(n) = &r.notebook {
        println!("  notebook: {n}");
    }
    if let Some(d) = &r.draft {
        println!("  draft: {d} (edit it and run `cairn verify --title {:?}` to retry)", r.title);
    }
    if let Some(p) = &r.preserved_edit {
        println!("  your edited draft was kept as {p}");
    }
    if let VerifyKernelStart::PreStarted { idle_ms } = r.kernel {
        println!("  kernel: the daemon's spare, idle {idle_ms} ms before it");
    }
}
