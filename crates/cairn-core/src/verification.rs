//! Verification verdicts and the proven notebook: pure functions over what a scratch kernel
//! reported. The notebook is nbformat 4.5 with deterministic cell ids, the document's prose byte
//! for byte, the run's outputs, and one provenance cell saying what the run proved and what not.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

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

/// What happened to one code cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellOutcome {
    pub status: CellStatus,
    pub duration_ms: u64,
    pub execution_count: Option<u32>,
    /// nbformat v4 output dicts.
    pub outputs: Vec<Value>,
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
        format!(
            "## Verified by Cairn: {title}\n\n\
             **What this run proved.** The {n} code cell(s) of `{doc}` (sha256 `{sha}`) executed in order, \
             without error, in a fresh Python kernel that started with nothing bound but the bootstrap cell below.\n\n\
             **What it did not prove.** That the numbers are right: the run only shows the cells execute. \
             Nor that side effects were undone: files the cells wrote and anything they uploaded stay as they are.\n\n",
            title = p.title,
            n = p.code_cells,
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
         | cairn | {cairn} |\n\n\
         The bootstrap cell runs *your* kernel plugins from `$CAIRN_CONFIG/kernel/*.py` (fail-open: a missing \
         plugin binds nothing, and a cell that uses it fails where it is used). They need not be the author's.\n",
        verdict = p.verdict.as_str(),
        python = p.python,
        ipykernel = p.ipykernel,
        env = p.environment_sha256,
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
pub fn build_notebook(
    doc: &[DocCell],
    outcomes: &[CellOutcome],
    bootstrap: (&str, &[Value], Option<u32>),
    provenance: &Provenance,
) -> Value {
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
            CellKind::Markdown => {
                cells.push(json!({"id": id, "cell_type": "markdown", "metadata": {}, "source": lines(&cell.source)}))
            }
            CellKind::Raw => {
                cells.push(json!({"id": id, "cell_type": "raw", "metadata": {}, "source": lines(&cell.source)}))
            }
            CellKind::Code => {
                let o = outcomes.get(code_index);
                code_index += 1;
                let status = o.map(|o| o.status).unwrap_or(CellStatus::Skipped);
                cells.push(json!({
                    "id": id,
                    "cell_type": "code",
                    "execution_count": o.and_then(|o| o.execution_count),
                    "metadata": {"cairn": {"status": status.as_str(), "duration_ms": o.map(|o| o.duration_ms)}},
                    "outputs": o.map(|o| o.outputs.clone()).unwrap_or_default(),
                    "source": lines(&cell.source),
                }));
            }
        }
    }
    notebook(
        cells,
        json!({"verdict": provenance.verdict.as_str(), "document_sha256": provenance.document_sha256, "title": provenance.title}),
    )
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
            DocCell { kind: CellKind::Markdown, source: "# T\n\ntext\n".into(), line: Some(1) },
            DocCell { kind: CellKind::Code, source: "x = 1".into(), line: Some(4) },
            DocCell { kind: CellKind::Code, source: "y".into(), line: Some(8) },
        ];
        let outcomes =
            vec![CellOutcome { status: CellStatus::Failed, duration_ms: 3, execution_count: Some(1), outputs: vec![] }];
        let p = Provenance {
            title: "t".into(),
            document: "d.md".into(),
            document_sha256: "ab".into(),
            verdict: Verdict::Failed,
            python: "3.11".into(),
            ipykernel: "6".into(),
            environment_sha256: "cd".into(),
            plugins_loaded: vec![],
            plugins_failed: vec![],
            cairn_version: "0.1.0".into(),
            code_cells: 2,
        };
        let nb = build_notebook(&doc, &outcomes, ("# bootstrap\n", &[], Some(1)), &p);
        assert_eq!(nb["nbformat_minor"], 5);
        let cells = nb["cells"].as_array().unwrap();
        assert_eq!(cells.len(), 5);
        assert_eq!(cells[2]["source"], json!(["# T\n", "\n", "text\n"]));
        assert_eq!(cells[4]["metadata"]["cairn"]["status"], "skipped");
        let ids: Vec<&str> = cells.iter().map(|c| c["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["cairn-provenance", "cairn-bootstrap", "cell-0", "cell-1", "cell-2"]);
    }
}
