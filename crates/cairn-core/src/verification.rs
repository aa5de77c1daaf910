//! Verification verdicts and the proven notebook: pure functions over what a scratch kernel
//! reported. The notebook is nbformat 4.5 with deterministic cell ids, the document's prose byte
//! for byte, the run's outputs, and one provenance cell saying what the run proved and what not.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use serde_json::Map;

use crate::document::{CellKind, DocCell};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Passed,
    Failed,
    Died,
    TimedOut,
    Interrupted,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Passed => "passed",
            Verdict::Failed => "failed",
            Verdict::Died => "died",
            Verdict::TimedOut => "timed_out",
            Verdict::Interrupted => "interrupted",
        }
    }
}

impl std::str::FromStr for Verdict {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Verdict::Passed, Verdict::Failed, Verdict::Died, Verdict::TimedOut, Verdict::Interrupted]
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| format!("`{s}` is not a verdict"))
    }
}

/// The status of one code cell of a verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellStatus {
    Passed,
    Failed,
    Died,
    TimedOut,
    Interrupted,
    /// Never sent: an earlier cell did not pass, and later cells were written against its state.
    Skipped,
}

impl CellStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CellStatus::Passed => "passed",
            CellStatus::Failed => "failed",
            CellStatus::Died => "died",
            CellStatus::TimedOut => "timed_out",
            CellStatus::Interrupted => "interrupted",
            CellStatus::Skipped => "skipped",
        }
    }
}

/// Why a code cell was not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// Its `skip-execution` tag.
    Tag,
    /// An earlier cell did not pass.
    AfterFailure,
}

/// The most of a traceback a cell's error keeps (its lines' bytes, ANSI codes stripped).
pub const TRACEBACK_LIMIT: usize = 16 << 10;

/// A cell's error as an agent acts on it: the exception's name, its value, and its traceback
/// (terminal colours stripped, bounded at [`TRACEBACK_LIMIT`] with a marker).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellError {
    pub ename: String,
    pub evalue: String,
    pub traceback: Vec<String>,
}

impl CellError {
    pub fn new(ename: &str, evalue: &str, traceback: &[String]) -> CellError {
        let plain = |s: &str| String::from_utf8_lossy(&strip_ansi_escapes::strip(s)).into_owned();
        let mut kept = Vec::new();
        let mut size = 0usize;
        for (i, line) in traceback.iter().enumerate() {
            let line = plain(line);
            if size + line.len() > TRACEBACK_LIMIT {
                let rest: usize = traceback[i..].iter().map(String::len).sum();
                kept.push(format!(
                    "[… {rest} more bytes of traceback cut by cairn at {} KiB …]",
                    TRACEBACK_LIMIT >> 10
                ));
                break;
            }
            size += line.len();
            kept.push(line);
        }
        CellError { ename: plain(ename), evalue: plain(evalue), traceback: kept }
    }
}

/// What happened to one code cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellOutcome {
    pub status: CellStatus,
    pub duration_ms: u64,
    pub execution_count: Option<u32>,
    /// nbformat v4 output dicts.
    pub outputs: Vec<Value>,
    /// The error it raised: why it failed, or the one its `raises-exception` tag expected.
    pub error: Option<CellError>,
    /// It raised, and its `raises-exception` tag says that is expected: it passed.
    pub error_expected: bool,
    /// Set when it was not run.
    pub skipped: Option<SkipReason>,
}

impl CellOutcome {
    /// A cell that was not run.
    pub fn skipped(reason: SkipReason) -> CellOutcome {
        CellOutcome {
            status: CellStatus::Skipped,
            duration_ms: 0,
            execution_count: None,
            outputs: Vec::new(),
            error: None,
            error_expected: false,
            skipped: Some(reason),
        }
    }
}

/// One code cell in a verification's result and record: `{index, status, duration_ms}` and,
/// when they apply, `error`, `error_expected`, `reason` (why it was skipped) and `tags`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellReport {
    pub index: usize,
    pub status: CellStatus,
    pub duration_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<CellError>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub error_expected: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<SkipReason>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

impl CellReport {
    pub fn of(index: usize, o: &CellOutcome, cell: Option<&DocCell>) -> CellReport {
        CellReport {
            index,
            status: o.status,
            duration_ms: o.duration_ms,
            error: o.error.clone(),
            error_expected: o.error_expected,
            reason: o.skipped,
            tags: cell.map(|c| c.tags().into_iter().map(str::to_string).collect()).unwrap_or_default(),
        }
    }
}

/// The verdict is the first cell that did not pass; all passed (or no code at all) is `passed`.
pub fn verdict(cells: &[CellStatus]) -> Verdict {
    for s in cells {
        match s {
            CellStatus::Passed | CellStatus::Skipped => {}
            CellStatus::Failed => return Verdict::Failed,
            CellStatus::Died => return Verdict::Died,
            CellStatus::TimedOut => return Verdict::TimedOut,
            CellStatus::Interrupted => return Verdict::Interrupted,
        }
    }
    Verdict::Passed
}

/// What the provenance cell states.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub title: String,
    pub document: String,
    pub document_sha256: String,
    pub verdict: Verdict,
    pub python: String,
    pub ipykernel: String,
    /// sha256 of the interpreter and package versions the kernel reported.
    pub environment_sha256: String,
    pub plugins_loaded: Vec<String>,
    pub plugins_failed: Vec<String>,
    pub cairn_version: String,
    pub code_cells: usize,
    /// Code cells (0-based among the code cells) not run because of their `skip-execution` tag.
    pub not_run: Vec<usize>,
    /// Code cells that raised what their `raises-exception` tag expects, with the exception.
    pub expected_errors: Vec<(usize, String)>,
    /// The per-cell timeout the cells ran under, in seconds, and who set it.
    pub timeout: Option<(u64, TimeoutSource)>,
    /// The values injected as the `injected-parameters` cell (papermill's convention).
    pub parameters: Map<String, Value>,
    /// How its kernel came to be.
    pub kernel: KernelStart,
}

/// How a verification's kernel was started: for it, or ahead of need by the daemon (a process
/// that had run nothing until this verification).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "start")]
pub enum KernelStart {
    #[default]
    Cold,
    PreStarted {
        /// From the kernel's ready to this verification's first code.
        idle_ms: u64,
    },
}

impl KernelStart {
    /// The provenance table's words.
    pub fn describe(self) -> String {
        match self {
            KernelStart::Cold => "started for this verification".into(),
            KernelStart::PreStarted { idle_ms } => format!(
                "pre-started by the daemon; it had run nothing and waited {:.1} s for this verification",
                idle_ms as f64 / 1000.0
            ),
        }
    }
}

/// Who set a verification's per-cell timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutSource {
    /// `--timeout` (or `timeout_secs`).
    Request,
    /// The document's `metadata.execution.timeout`.
    Document,
    /// Neither: Cairn's default.
    Default,
}

impl TimeoutSource {
    pub fn as_str(self) -> &'static str {
        match self {
            TimeoutSource::Request => "request",
            TimeoutSource::Document => "document",
            TimeoutSource::Default => "default",
        }
    }
}

/// Cell numbers in words: `cell 2`, `cells 2, 5 and 7`.
fn cells_in_words(cells: &[usize]) -> String {
    let n: Vec<String> = cells.iter().map(usize::to_string).collect();
    match n.as_slice() {
        [] => String::new(),
        [one] => format!("cell {one}"),
        [init @ .., last] => format!("cells {} and {last}", init.join(", ")),
    }
}

pub(crate) fn lines(s: &str) -> Value {
    // nbformat stores multi-line sources as a list of lines, each keeping its newline.
    let mut out: Vec<Value> = s.split_inclusive('\n').map(|l| Value::String(l.to_string())).collect();
    if out.is_empty() {
        out.push(Value::String(String::new()));
    }
    Value::Array(out)
}

pub fn provenance_markdown(p: &Provenance) -> String {
    let plugins = if p.plugins_loaded.is_empty() { "none".to_string() } else { p.plugins_loaded.join(", ") };
    let claim = if p.verdict == Verdict::Passed {
        let ran = p.code_cells - p.not_run.len();
        let cells = if p.not_run.is_empty() {
            format!("The {ran} code cell(s)")
        } else {
            format!("{ran} of the {} code cells", p.code_cells)
        };
        let expected = if p.expected_errors.is_empty() {
            String::new()
        } else {
            let (idx, names): (Vec<usize>, Vec<String>) = p.expected_errors.iter().cloned().unzip();
            format!(
                " ({} raised {}, as {} `raises-exception` tag expects)",
                cells_in_words(&idx),
                names.join(", "),
                if idx.len() == 1 { "its" } else { "their" }
            )
        };
        let not_run = if p.not_run.is_empty() {
            String::new()
        } else {
            format!(
                " Nor anything of {}, which {} not run (tagged `skip-execution`).",
                cells_in_words(&p.not_run),
                if p.not_run.len() == 1 { "was" } else { "were" }
            )
        };
        let injected = if p.parameters.is_empty() {
            ""
        } else {
            ", with the parameters below injected as the cell tagged `injected-parameters`"
        };
        format!(
            "## Verified by Cairn: {title}\n\n\
             **What this run proved.** {cells} of `{doc}` (sha256 `{sha}`) executed in order{injected}, \
             without an unexpected error{expected}, in a fresh Python kernel that started with nothing bound but the \
             bootstrap cell below.\n\n\
             **What it did not prove.** That the numbers are right: the run only shows the cells execute. \
             Nor that side effects were undone: files the cells wrote and anything they uploaded stay as they are.\
             {not_run}\n\n",
            title = p.title,
            doc = p.document,
            sha = p.document_sha256,
        )
    } else {
        format!(
            "## Not verified: {title}\n\n\
             **This run did not pass** (verdict: {verdict}). The code cells of `{doc}` (sha256 `{sha}`) ran in order \
             in a fresh Python kernel until the first one that did not pass; the cells after it were never run \
             (marked skipped in their metadata). Nothing here is proven.\n\n\
             Side effects of the cells that did run (files written, uploads) were not undone.\n\n",
            title = p.title,
            verdict = p.verdict.as_str(),
            doc = p.document,
            sha = p.document_sha256,
        )
    };
    let mut s = claim;
    s.push_str(&format!(
        "| | |\n|---|---|\n\
         | verdict | {verdict} |\n\
         | python | {python} |\n\
         | ipykernel | {ipykernel} |\n\
         | environment sha256 | `{env}` |\n\
         | kernel plugins loaded | {plugins} |\n\
         | cell timeout | {timeout} |\n\
         | parameters | {parameters} |\n\
         | kernel | {kernel} |\n\
         | cairn | {cairn} |\n\n\
         The bootstrap cell runs *your* kernel plugins from `$CAIRN_CONFIG/kernel/*.py` (fail-open: a missing \
         plugin binds nothing, and a cell that uses it fails where it is used). They need not be the author's.\n",
        verdict = p.verdict.as_str(),
        python = p.python,
        ipykernel = p.ipykernel,
        env = p.environment_sha256,
        timeout = match p.timeout {
            Some((secs, TimeoutSource::Request)) => format!("{secs} s (the request's)"),
            Some((secs, TimeoutSource::Document)) => format!("{secs} s (the document's `metadata.execution.timeout`)"),
            Some((secs, TimeoutSource::Default)) => format!("{secs} s (Cairn's default)"),
            None => "none".to_string(),
        },
        parameters = if p.parameters.is_empty() {
            "none".to_string()
        } else {
            p.parameters
                .iter()
                .map(|(k, v)| format!("`{k} = {}`", crate::parameters::python_literal(v).replace('|', "\\|")))
                .collect::<Vec<_>>()
                .join(", ")
        },
        kernel = p.kernel.describe(),
        cairn = p.cairn_version,
    ));
    if !p.plugins_failed.is_empty() {
        s.push_str(&format!(
            "\nPlugins that failed to load in the verification kernel: {}.\n",
            p.plugins_failed.join(", ")
        ));
    }
    s
}

/// Builds the notebook. `outcomes` holds one entry per code cell of `doc`, in order; `bootstrap`
/// is the bootstrap source and its outputs.
/// The document's own metadata is kept (a notebook's, or a markdown document's front matter), as
/// is each cell's: its tags, so the notebook re-runs under nbconvert as the document did.
pub fn build_notebook(
    doc: &[DocCell],
    doc_metadata: &Map<String, Value>,
    outcomes: &[CellOutcome],
    bootstrap: (&str, &[Value], Option<u32>),
    provenance: &Provenance,
) -> Value {
    let with = |cell: &DocCell, cairn: Option<Value>| {
        let mut m = cell.metadata.clone();
        // Cairn's key is its own: a document that carried one (a notebook Cairn wrote) gets the
        // new run's.
        m.remove("cairn");
        if let Some(c) = cairn {
            m.insert("cairn".into(), c);
        }
        Value::Object(m)
    };
    let mut cells = vec![
        json!({"id": "cairn-provenance", "cell_type": "markdown", "metadata": {"cairn": {"role": "provenance"}},
               "source": lines(&provenance_markdown(provenance))}),
        json!({"id": "cairn-bootstrap", "cell_type": "code", "execution_count": bootstrap.2,
               "metadata": {"cairn": {"role": "bootstrap"}}, "outputs": bootstrap.1, "source": lines(bootstrap.0)}),
    ];
    let mut code_index = 0usize;
    for (i, cell) in doc.iter().enumerate() {
        let id = format!("cell-{i}");
        match cell.kind {
            CellKind::Markdown => cells.push(
                json!({"id": id, "cell_type": "markdown", "metadata": with(cell, None), "source": lines(&cell.source)}),
            ),
            CellKind::Raw => cells.push(
                json!({"id": id, "cell_type": "raw", "metadata": with(cell, None), "source": lines(&cell.source)}),
            ),
            CellKind::Code => {
                let o = outcomes.get(code_index);
                code_index += 1;
                let status = o.map(|o| o.status).unwrap_or(CellStatus::Skipped);
                let mut cairn = json!({"status": status.as_str(), "duration_ms": o.map(|o| o.duration_ms)});
                if let Some(reason) = o.and_then(|o| o.skipped) {
                    cairn["reason"] = json!(reason);
                }
                if o.is_some_and(|o| o.error_expected) {
                    cairn["error_expected"] = json!(true);
                }
                cells.push(json!({
                    "id": id,
                    "cell_type": "code",
                    "execution_count": o.and_then(|o| o.execution_count),
                    "metadata": with(cell, Some(cairn)),
                    "outputs": o.map(|o| o.outputs.clone()).unwrap_or_default(),
                    "source": lines(&cell.source),
                }));
            }
        }
    }
    let mut cairn = json!({
        "verdict": provenance.verdict.as_str(), "document_sha256": provenance.document_sha256, "title": provenance.title,
        "python": provenance.python, "ipykernel": provenance.ipykernel,
        "environment_sha256": provenance.environment_sha256, "kernel": provenance.kernel,
    });
    if !provenance.parameters.is_empty() {
        cairn["parameters"] = Value::Object(provenance.parameters.clone());
    }
    let mut nb = notebook(cells, cairn);
    if let Some(meta) = nb["metadata"].as_object_mut() {
        for (k, v) in doc_metadata {
            // The kernel it ran in and Cairn's own record are this run's.
            if !matches!(k.as_str(), "kernelspec" | "language_info" | "cairn") {
                meta.insert(k.clone(), v.clone());
            }
        }
    }
    nb
}

/// An nbformat 4.5 notebook for a python3 ipykernel, with Cairn's metadata.
pub(crate) fn notebook(cells: Vec<Value>, cairn: Value) -> Value {
    json!({
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
            "language_info": {"name": "python"},
            "cairn": cairn,
        },
        "cells": cells,
    })
}

/// A file-name-safe slug of a title.
pub fn slug(title: &str) -> String {
    let mut s = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c.to_ascii_lowercase());
        } else if !s.ends_with('-') && !s.is_empty() {
            s.push('-');
        }
    }
    let s = s.trim_end_matches('-');
    let s: String = s.chars().take(64).collect();
    if s.is_empty() { "untitled".into() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provenance(document: &str, verdict: Verdict, code_cells: usize) -> Provenance {
        Provenance {
            title: "t".into(),
            document: document.into(),
            document_sha256: "ab".into(),
            verdict,
            python: "3.11".into(),
            ipykernel: "6".into(),
            environment_sha256: "cd".into(),
            plugins_loaded: vec![],
            plugins_failed: vec![],
            cairn_version: "0.1.0".into(),
            code_cells,
            not_run: vec![],
            expected_errors: vec![],
            timeout: Some((600, TimeoutSource::Default)),
            parameters: Map::new(),
            kernel: KernelStart::Cold,
        }
    }

    #[test]
    fn the_verdict_is_the_first_cell_that_did_not_pass() {
        use CellStatus::*;
        assert_eq!(verdict(&[]), Verdict::Passed);
        assert_eq!(verdict(&[Passed, Passed]), Verdict::Passed);
        assert_eq!(verdict(&[Passed, Failed, Skipped]), Verdict::Failed);
        assert_eq!(verdict(&[Died, Skipped]), Verdict::Died);
        assert_eq!(verdict(&[Passed, TimedOut]), Verdict::TimedOut);
    }

    #[test]
    fn slugs_are_safe() {
        assert_eq!(slug("My Workflow: v2!"), "my-workflow-v2");
        assert_eq!(slug("../../etc"), "etc");
        assert_eq!(slug("???"), "untitled");
    }

    #[test]
    fn the_notebook_keeps_prose_and_marks_skipped_cells() {
        let doc = vec![
            DocCell { kind: CellKind::Markdown, source: "# T\n\ntext\n".into(), line: Some(1), ..DocCell::default() },
            DocCell { kind: CellKind::Code, source: "x = 1".into(), line: Some(4), ..DocCell::default() },
            DocCell { kind: CellKind::Code, source: "y".into(), line: Some(8), ..DocCell::default() },
        ];
        let outcomes = vec![CellOutcome {
            status: CellStatus::Failed,
            duration_ms: 3,
            execution_count: Some(1),
            outputs: vec![],
            error: Some(CellError::new("ValueError", "bad", &[])),
            error_expected: false,
            skipped: None,
        }];
        let p = provenance("d.md", Verdict::Failed, 2);
        let nb = build_notebook(&doc, &Map::new(), &outcomes, ("# bootstrap\n", &[], Some(1)), &p);
        assert_eq!(nb["nbformat_minor"], 5);
        let cells = nb["cells"].as_array().unwrap();
        assert_eq!(cells.len(), 5);
        assert_eq!(cells[2]["source"], json!(["# T\n", "\n", "text\n"]));
        assert_eq!(cells[4]["metadata"]["cairn"]["status"], "skipped");
        let ids: Vec<&str> = cells.iter().map(|c| c["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["cairn-provenance", "cairn-bootstrap", "cell-0", "cell-1", "cell-2"]);
    }

    #[test]
    fn a_cells_error_is_plain_text_and_bounded() {
        let tb = vec!["\u{1b}[0;31mValueError\u{1b}[0m: bad".to_string(), "x".repeat(TRACEBACK_LIMIT)];
        let e = CellError::new("ValueError", "\u{1b}[1mbad\u{1b}[0m", &tb);
        assert_eq!((e.ename.as_str(), e.evalue.as_str()), ("ValueError", "bad"));
        assert_eq!(e.traceback[0], "ValueError: bad");
        assert_eq!(e.traceback.len(), 2);
        assert!(
            e.traceback[1].starts_with("[… 16384 more bytes of traceback cut by cairn at 16 KiB"),
            "{:?}",
            e.traceback[1]
        );
    }

    #[test]
    fn the_provenance_says_which_cells_were_not_run_and_which_errors_were_expected() {
        let p = Provenance {
            not_run: vec![1, 3],
            expected_errors: vec![(2, "ZeroDivisionError".into())],
            timeout: Some((30, TimeoutSource::Document)),
            parameters: json!({"alpha": 2, "name": "a|b"}).as_object().unwrap().clone(),
            ..provenance("d.ipynb", Verdict::Passed, 4)
        };
        let md = provenance_markdown(&p);
        assert!(md.contains("2 of the 4 code cells of `d.ipynb`"), "{md}");
        assert!(md.contains("(cell 2 raised ZeroDivisionError, as its `raises-exception` tag expects)"), "{md}");
        assert!(md.contains("Nor anything of cells 1 and 3, which were not run (tagged `skip-execution`)."), "{md}");
        assert!(md.contains("| cell timeout | 30 s (the document's `metadata.execution.timeout`) |"), "{md}");
        assert!(md.contains("| parameters | `alpha = 2`, `name = \"a\\|b\"` |"), "{md}");
        assert!(md.contains("with the parameters below injected as the cell tagged `injected-parameters`"), "{md}");
        assert!(md.contains("| kernel | started for this verification |"), "{md}");
        let warm = provenance_markdown(&Provenance { kernel: KernelStart::PreStarted { idle_ms: 2345 }, ..p });
        assert!(
            warm.contains(
                "| kernel | pre-started by the daemon; it had run nothing and waited 2.3 s for this verification |"
            ),
            "{warm}"
        );
    }
}
