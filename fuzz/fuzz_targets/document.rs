//! Markdown and `.ipynb` documents, split into cells.
//!
//! Each input is read as a document (up to its first NUL byte): as markdown and as a notebook
//! (whichever it is, the other reader must refuse it cleanly or read it). Reading never panics; a
//! refusal names the file; the markdown reader keeps prose byte for byte, in order; every cell's
//! tags are unique strings without commas (what nbformat allows); a document's cells written as a
//! notebook read back as the same cells. The bytes after the NUL drive a generator of markdown
//! documents (prose, python fences of every form, MyST and jupytext tags) whose cells are known,
//! and must be exactly what the reader gives.
#![no_main]

use arbitrary::{Result, Unstructured};
use cairn_core::document::{CellKind, DocCell, ParsedDocument, parse_markdown, read_document, read_notebook};
use cairn_fuzz::split_input;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    let (text, rest) = split_input(data);
    for file in ["docs/guide.md", "docs/guide.ipynb"] {
        match read_document(text.as_bytes(), file) {
            Ok(doc) => check_doc(&doc, &text, file),
            Err(e) => assert!(e.to_string().starts_with(file), "a refusal that does not name the file: {e}"),
        }
    }
    let _ = generated(&mut Unstructured::new(rest));
});

fn check_doc(doc: &ParsedDocument, text: &str, file: &str) {
    for (i, c) in doc.cells.iter().enumerate() {
        if let Some(tags) = c.metadata.get("tags") {
            cairn_fuzz::nbformat::tags(tags, &format!("cell {i}: tags")).unwrap_or_else(|e| panic!("{e}"));
        }
    }
    if file.ends_with(".md") {
        // Prose byte for byte, in order; code cells and prose at lines of the document.
        let mut from = 0;
        let lines = text.split('\n').count();
        for c in &doc.cells {
            let line = c.line.expect("a markdown cell has a line");
            assert!((1..=lines).contains(&line), "line {line} of {lines}");
            if c.kind == CellKind::Markdown {
                let at = text[from..].find(&c.source).unwrap_or_else(|| panic!("prose {:?} not in order", c.source));
                from += at + c.source.len();
                assert!(!c.source.trim().is_empty());
            } else {
                assert_eq!(c.kind, CellKind::Code);
            }
        }
        assert_eq!(parse_markdown(text, file).as_ref().ok(), Some(&doc.cells), "not deterministic");
    }
    // The cells as a notebook read back as themselves.
    let nb = json!({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": doc.cells.iter().enumerate().map(|(i, c)| {
            json!({"id": format!("c{i}"), "cell_type": c.kind, "metadata": c.metadata, "source": c.source})
        }).collect::<Vec<_>>(),
    });
    let back = read_notebook(&nb.to_string(), "back.ipynb").unwrap_or_else(|e| panic!("{e}"));
    let strip = |cells: &[DocCell]| -> Vec<(CellKind, String, Option<Value>)> {
        cells.iter().map(|c| (c.kind, c.source.clone(), c.metadata.get("tags").cloned())).collect()
    };
    // Cairn's own cells (provenance, bootstrap) are dropped on reading; a document that has one
    // keeps its other cells.
    let own = |c: &DocCell| {
        matches!(
            c.metadata.get("cairn").and_then(|x| x.get("role")).and_then(Value::as_str),
            Some("provenance" | "bootstrap")
        )
    };
    let kept: Vec<DocCell> = doc.cells.iter().filter(|c| !own(c)).cloned().collect();
    assert_eq!(strip(&back.cells), strip(&kept));
}

const PROSE: [&str; 9] = ["word", " ", "text", ",", ".", "*em*", "# ", "- ", "\n"];
const CODE: [&str; 9] = ["x", " = ", "1", "print(x)", "\n", "(", ")", "'s'", "#"];
const TAGS: [&str; 5] = ["hide", "raises-exception", "skip-execution", "parameters", "x-y"];

/// Prose that stays prose: no fence, HTML, indentation or block quote can start in it.
fn prose(u: &mut Unstructured<'_>) -> Result<String> {
    let mut s = String::new();
    for _ in 0..u.int_in_range(1..=8)? {
        let w = *u.choose(&PROSE)?;
        if (w == "# " || w == "- ") && !(s.is_empty() || s.ends_with('\n')) {
            continue;
        }
        s.push_str(w);
    }
    if s.trim().is_empty() {
        s.push_str("word");
    }
    Ok(s)
}

fn code(u: &mut Unstructured<'_>) -> Result<String> {
    let mut s = String::new();
    for _ in 0..u.int_in_range(0..=8)? {
        s.push_str(u.choose(&CODE)?);
    }
    Ok(s)
}

/// A markdown document of known cells, rendered, and the cells the reader must give.
fn generated(u: &mut Unstructured<'_>) -> Result<()> {
    let mut text = String::new();
    let mut want: Vec<(CellKind, String, Vec<String>)> = Vec::new();
    for _ in 0..u.int_in_range(0..=5)? {
        if u.arbitrary()? {
            let p = prose(u)?;
            text.push_str(&p);
            text.push_str("\n\n");
            want.push((CellKind::Markdown, format!("{p}\n\n"), vec![]));
        }
        let body = code(u)?;
        let mut tags: Vec<String> = Vec::new();
        for t in TAGS {
            if u.ratio(1, 4)? {
                tags.push(t.to_string());
            }
        }
        let fence = *u.choose(&["```", "````", "~~~"])?;
        let quoted: Vec<String> = tags.iter().map(|t| format!("\"{t}\"")).collect();
        match u.int_in_range(0..=3)? {
            0 => text.push_str(&format!("{fence}python\n")),
            1 => text.push_str(&format!("{fence}python tags=[{}]\n", quoted.join(", "))),
            2 => text.push_str(&format!("{fence}{{code-cell}} python\n:tags: [{}]\n", tags.join(", "))),
            _ => text.push_str(&format!("{fence}{{code-cell}} ipython3\n---\ntags: [{}]\n---\n", tags.join(", "))),
        }
        // The first choice writes no tags.
        if text.ends_with("python\n") {
            tags.clear();
        }
        text.push_str(&body);
        if !body.is_empty() && !body.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(fence);
        text.push('\n');
        let source = body.strip_suffix('\n').unwrap_or(&body).to_string();
        want.push((CellKind::Code, source, tags));
        if u.arbitrary()? {
            text.push('\n');
        }
    }
    let cells = parse_markdown(&text, "gen.md").unwrap_or_else(|e| panic!("{e}\n{text}"));
    let got: Vec<(CellKind, String, Vec<String>)> =
        cells.iter().map(|c| (c.kind, c.source.clone(), c.tags().into_iter().map(str::to_string).collect())).collect();
    // A markdown cell is the prose between fences byte for byte, blank lines included.
    let norm = |cells: Vec<(CellKind, String, Vec<String>)>| -> Vec<(CellKind, String, Vec<String>)> {
        cells
            .into_iter()
            .map(|(k, s, t)| if k == CellKind::Markdown { (k, s.trim().to_string(), t) } else { (k, s, t) })
            .collect()
    };
    assert_eq!(norm(got), norm(want), "{text}");
    check_doc(&ParsedDocument { cells, metadata: Default::default() }, &text, "gen.md");
    Ok(())
}
