//! The notebook builder: a document, the kernel's messages and a provenance, into the proven
//! notebook.
//!
//! The input up to its first NUL byte is a document (a notebook when it starts with `{`, else
//! markdown); the bytes after it drive everything a verification adds: injected parameters, for
//! each code cell the iopub messages a kernel sent (folded by the real `OutputCollector`, under
//! small caps so the cuts are exercised), its status and count, and the provenance. Whatever they
//! are, the built notebook validates against nbformat 4.5's published schema with unique cell ids
//! (`cairn_fuzz::nbformat`, which checks itself once before the fuzzing starts), it has the
//! provenance and bootstrap cells first, and it reads back as the document's cells, in order, with
//! their sources and tags.
#![no_main]

use arbitrary::{Result, Unstructured};
use cairn_core::document::{CellKind, read_document, read_notebook};
use cairn_core::parameters::inject;
use cairn_core::verification::{
    CellError, CellOutcome, CellStatus, KernelStart, Provenance, SkipReason, TimeoutSource, Verdict, build_notebook,
    verdict,
};
use cairn_exec::kernel::{OutputCollector, OutputLimits};
use cairn_fuzz::{json, nbformat, split_input, text};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

fuzz_target!(init: nbformat::self_check(), |data: &[u8]| {
    let (doc, rest) = split_input(data);
    let file = if doc.trim_start().starts_with('{') { "doc.ipynb" } else { "doc.md" };
    let Ok(parsed) = read_document(doc.as_bytes(), file) else { return };
    let _ = build(&parsed.cells, &parsed.metadata, &mut Unstructured::new(rest));
});

const WORDS: [&str; 14] = [
    "text/plain",
    "image/png",
    "application/json",
    "application/vnd.x+json",
    "text/html",
    "data",
    "metadata",
    "transient",
    "display_id",
    "d1",
    "\n",
    "é",
    "\u{1b}[31m",
    "x",
];
const MSG_TYPES: [&str; 8] =
    ["stream", "display_data", "execute_result", "update_display_data", "error", "clear_output", "status", "other"];
const STATUSES: [CellStatus; 6] = [
    CellStatus::Passed,
    CellStatus::Failed,
    CellStatus::Died,
    CellStatus::TimedOut,
    CellStatus::Interrupted,
    CellStatus::Skipped,
];

/// An iopub message's content: mostly the shape its type has, sometimes anything.
fn content(u: &mut Unstructured<'_>, msg_type: &str) -> Result<Value> {
    if u.ratio(1, 8)? {
        return json(u, &WORDS, 3);
    }
    let mut m = Map::new();
    match msg_type {
        "stream" => {
            m.insert("name".into(), Value::from(*u.choose(&["stdout", "stderr", "other"])?));
            m.insert(
                "text".into(),
                if u.ratio(1, 4)? { json(u, &WORDS, 1)? } else { Value::from(text(u, &WORDS, 8)?) },
            );
        }
        "display_data" | "execute_result" | "update_display_data" => {
            let mut data = Map::new();
            for _ in 0..u.int_in_range(0..=3)? {
                let mime = *u.choose(&WORDS[..5])?;
                let v = if u.ratio(3, 4)? { Value::from(text(u, &WORDS, 8)?) } else { json(u, &WORDS, 2)? };
                data.insert(mime.to_string(), v);
            }
            m.insert("data".into(), Value::Object(data));
            m.insert("metadata".into(), json(u, &WORDS, 1)?);
            if u.arbitrary()? {
                m.insert("transient".into(), serde_json::json!({"display_id": *u.choose(&["d1", "d2"])?}));
            }
            if msg_type == "execute_result" {
                m.insert("execution_count".into(), cairn_fuzz::number(u)?);
            }
        }
        "error" => {
            m.insert("ename".into(), Value::from(text(u, &WORDS, 2)?));
            m.insert("evalue".into(), Value::from(text(u, &WORDS, 4)?));
            let tb: Vec<Value> =
                (0..u.int_in_range(0..=3)?).map(|_| text(u, &WORDS, 4).map(Value::from)).collect::<Result<_>>()?;
            m.insert("traceback".into(), Value::Array(tb));
        }
        "clear_output" => {
            m.insert("wait".into(), Value::Bool(u.arbitrary()?));
        }
        _ => {}
    }
    Ok(Value::Object(m))
}

/// One code cell's run: its outputs as the collector folds the messages, its status and count.
fn outcome(u: &mut Unstructured<'_>, limits: OutputLimits) -> Result<CellOutcome> {
    if u.ratio(1, 6)? {
        return Ok(CellOutcome::skipped(if u.arbitrary()? { SkipReason::Tag } else { SkipReason::AfterFailure }));
    }
    let mut collector = OutputCollector::new(limits);
    for _ in 0..u.int_in_range(0..=6)? {
        let msg_type = *u.choose(&MSG_TYPES)?;
        let c = content(u, msg_type)?;
        if let Some(live) = collector.handle(msg_type, &c) {
            assert!(live.is_object(), "a live output that is not an object: {live}");
        }
    }
    let status = *u.choose(&STATUSES[..5])?;
    let error = if u.arbitrary()? {
        let tb: Vec<String> = (0..u.int_in_range(0..=3)?).map(|_| text(u, &WORDS, 4)).collect::<Result<_>>()?;
        Some(CellError::new(&text(u, &WORDS, 2)?, &text(u, &WORDS, 3)?, &tb))
    } else {
        None
    };
    Ok(CellOutcome {
        status,
        duration_ms: u.arbitrary()?,
        execution_count: u.arbitrary()?,
        outputs: collector.finish(),
        error_expected: error.is_some() && u.arbitrary()?,
        error,
        skipped: None,
    })
}

fn build(
    cells: &[cairn_core::document::DocCell],
    metadata: &Map<String, Value>,
    u: &mut Unstructured<'_>,
) -> Result<()> {
    let mut cells = cells.to_vec();
    let mut parameters = Map::new();
    if u.ratio(1, 4)? {
        for _ in 0..u.int_in_range(1..=3)? {
            parameters.insert(u.choose(&["alpha", "n", "_x", "class", "1a"])?.to_string(), json(u, &WORDS, 2)?);
        }
        if inject(&mut cells, &parameters).is_err() {
            parameters.clear();
        }
    }
    let limits = OutputLimits { per_output: u.int_in_range(0..=64)?, per_cell: u.int_in_range(0..=256)? };
    let code: Vec<usize> = (0..cells.len()).filter(|&i| cells[i].kind == CellKind::Code).collect();
    // Sometimes fewer outcomes than code cells (a run that stopped): the rest are skipped.
    let ran = if u.ratio(1, 5)? { u.int_in_range(0..=code.len())? } else { code.len() };
    let outcomes: Vec<CellOutcome> = (0..ran).map(|_| outcome(u, limits)).collect::<Result<_>>()?;
    let boot = outcome(u, limits)?;
    let statuses: Vec<CellStatus> = std::iter::once(boot.status).chain(outcomes.iter().map(|o| o.status)).collect();
    let provenance = Provenance {
        title: text(u, &WORDS, 3)?,
        document: "doc".into(),
        document_sha256: "ab".repeat(32),
        verdict: verdict(&statuses),
        python: text(u, &WORDS, 2)?,
        ipykernel: "7.4.0".into(),
        environment_sha256: "cd".repeat(32),
        plugins_loaded: vec![text(u, &WORDS, 2)?],
        plugins_failed: if u.arbitrary()? { vec!["broken".into()] } else { vec![] },
        cairn_version: "0.1.0".into(),
        code_cells: code.len(),
        not_run: (0..outcomes.len()).filter(|&i| outcomes[i].skipped == Some(SkipReason::Tag)).collect(),
        expected_errors: (0..outcomes.len())
            .filter(|&i| outcomes[i].error_expected)
            .filter_map(|i| outcomes[i].error.as_ref().map(|e| (i, e.ename.clone())))
            .collect(),
        timeout: if u.arbitrary()? { Some((u.arbitrary()?, TimeoutSource::Document)) } else { None },
        parameters,
        kernel: if u.arbitrary()? { KernelStart::Cold } else { KernelStart::PreStarted { idle_ms: u.arbitrary()? } },
    };
    let boot_source = text(u, &WORDS, 4)?;
    let nb =
        build_notebook(&cells, metadata, &outcomes, (&boot_source, &boot.outputs, boot.execution_count), &provenance);

    if let Err(problem) = nbformat::check(&nb) {
        panic!("the built notebook is not nbformat 4.5: {problem}\n{nb:#}");
    }
    let built = nb["cells"].as_array().expect("cells");
    assert_eq!(built.len(), cells.len() + 2);
    assert_eq!(built[0]["id"], "cairn-provenance");
    assert_eq!(built[1]["id"], "cairn-bootstrap");
    assert_eq!(nb["metadata"]["cairn"]["verdict"], provenance.verdict.as_str());
    let passed = provenance.verdict == Verdict::Passed;
    let claim = built[0]["source"].as_array().and_then(|l| l.first()).and_then(Value::as_str).unwrap_or_default();
    assert_eq!(
        claim.starts_with("## Verified by Cairn"),
        passed,
        "the provenance claims {claim:?} for {:?}",
        provenance.verdict
    );
    // Read back: the document's cells, without Cairn's own.
    let back = read_notebook(&nb.to_string(), "built.ipynb").unwrap_or_else(|e| panic!("{e}\n{nb:#}"));
    let summary = |c: &cairn_core::document::DocCell| (c.kind, c.source.clone(), c.tags().join(","));
    assert_eq!(back.cells.iter().map(summary).collect::<Vec<_>>(), cells.iter().map(summary).collect::<Vec<_>>());
    Ok(())
}
