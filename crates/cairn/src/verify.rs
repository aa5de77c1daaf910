//! `cairn verify`: each cell's status live on stderr, then the verdict and the notebook or draft.
//! Ctrl-C interrupts the verification: its kernel is killed and the verdict is `interrupted`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cairn_core::verification::{CellStatus, Verdict};
use cairn_engine::Engine;
use cairn_engine::verify::{VerifyObserver, VerifyReport, VerifyRequest};
use cairn_exec::kernel::KernelHandle;
use serde_json::json;

use crate::Failure;
use crate::output::print_json;

struct Live {
    json: bool,
    kernel: Arc<Mutex<Option<KernelHandle>>>,
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

    fn kernel_started(&mut self, handle: KernelHandle) {
        if let Ok(mut k) = self.kernel.lock() {
            *k = Some(handle);
        }
    }
}

/// On the first Ctrl-C, stop: before the kernel starts nothing runs; after, the running kernel is
/// killed (the verification then ends `interrupted`). On the second, exit at once.
fn install_interrupt(kernel: Arc<Mutex<Option<KernelHandle>>>, cancel: Arc<AtomicBool>) {
    let Ok(mut signals) = signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT]) else { return };
    std::thread::spawn(move || {
        let mut seen = 0;
        for _ in signals.forever() {
            seen += 1;
            if seen > 1 {
                std::process::exit(130);
            }
            cancel.store(true, Ordering::SeqCst);
            eprintln!("\ninterrupting the verification (Ctrl-C again to quit at once)");
            if let Ok(k) = kernel.lock()
                && let Some(h) = k.as_ref()
            {
                h.kill();
            }
        }
    });
}

pub fn run(engine: &Engine, mut req: VerifyRequest, json: bool) -> Result<u8, Failure> {
    let kernel = Arc::new(Mutex::new(None));
    let cancel = Arc::new(AtomicBool::new(false));
    install_interrupt(kernel.clone(), cancel.clone());
    req.cancel = Some(cancel);
    let mut live = Live { json, kernel };
    let report = engine.verify(&req, &mut live)?;
    if json {
        print_json(&report_json(&report));
    } else {
        print_human(&report);
    }
    Ok(if report.verdict == Verdict::Passed { 0 } else { 1 })
}

pub fn report_json(r: &VerifyReport) -> serde_json::Value {
    let mut v = json!({
        "verification_id": r.record.id,
        "title": r.record.title,
        "document": r.record.document,
        "document_sha256": r.record.document_sha256,
        "verdict": r.verdict.as_str(),
        "cells": r.cells.iter().map(|(i, s, ms)| json!({"index": i, "status": s.as_str(), "duration_ms": ms})).collect::<Vec<_>>(),
        "error": r.failure,
    });
    if let Some(n) = &r.record.notebook {
        v["notebook"] = json!(n);
    }
    if let Some(d) = &r.record.draft {
        v["draft"] = json!(d);
    }
    if let Some(p) = &r.preserved_edit {
        v["preserved_edit"] = json!(p.display().to_string());
    }
    v
}

fn print_human(r: &VerifyReport) {
    let skipped = r.cells.iter().filter(|(_, s, _)| *s == CellStatus::Skipped).count();
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
