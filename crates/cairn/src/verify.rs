//! `cairn verify`: each cell's status live on stderr, then the verdict and the notebook or draft.
//! Ctrl-C interrupts the verification: the engine kills its kernel and the verdict is
//! `interrupted`; a second Ctrl-C exits at once.

use cairn_core::verification::{CellStatus, Verdict};
use cairn_engine::verify::{VerifyObserver, VerifyReport};
use cairn_engine::{Engine, StopKind, StopSignal};

use crate::Failure;
use crate::output::print_wire;
use crate::wire::{Verify, VerifyResult};

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
            eprintln!("{} ({ms} ms)", status.as_str());
        }
    }
}

/// On the first Ctrl-C, asks the verification to stop; on the second, exits at once.
fn stop_on_interrupt(stop: StopSignal) {
    let Ok(mut signals) = signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT]) else { return };
    std::thread::spawn(move || {
        let mut seen = 0;
        for _ in signals.forever() {
            seen += 1;
            if seen > 1 {
                std::process::exit(130);
            }
            eprintln!("\ninterrupting the verification (Ctrl-C again to quit at once)");
            stop.request(StopKind::Cancel);
        }
    });
}

pub fn run(engine: &Engine, request: Verify, json: bool) -> Result<u8, Failure> {
    let cwd = std::env::current_dir().map_err(|e| Failure::usage(format!("cannot read the working directory: {e}")))?;
    let mut req = request.into_request(Some(&cwd))?;
    let stop = StopSignal::new();
    stop_on_interrupt(stop.clone());
    req.stop = Some(stop);
    let report = engine.verify(&req, &mut Live { json })?;
    if json {
        print_wire(&VerifyResult::from_report(&report));
    } else {
        print_human(&report);
    }
    Ok(if report.verdict == Verdict::Passed { 0 } else { 1 })
}

fn print_human(r: &VerifyReport) {
    let skipped = r.cells.iter().filter(|c| c.status == CellStatus::Skipped).count();
    println!(
        "{}: {} ({} cells{})",
        r.record.title,
        r.verdict.as_str(),
        r.cells.len(),
        if skipped > 0 { format!(", {skipped} skipped") } else { String::new() }
    );
    if let Some(f) = &r.failure {
        println!("  {f}");
    }
    if let Some(n) = &r.record.notebook {
        println!("  notebook: {n}");
    }
    if let Some(d) = &r.record.draft {
        println!("  draft: {d} (edit it and run `cairn verify --title {:?}` to retry)", r.record.title);
    }
    if let Some(p) = &r.preserved_edit {
        println!("  your edited draft was kept as {}", p.display());
    }
}
