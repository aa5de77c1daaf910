//! Workflow documents: markdown with fenced python cells (```` ```python ```` and the
//! jupytext/MyST ```` ```{code-cell} python ```` form), or a Jupyter notebook (nbformat 4.x).
//! A document becomes an ordered list of cells; prose between code fences is kept byte for byte.

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CellKind {
    Markdown,
    Code,
    Raw,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocCell {
    pub kind: CellKind,
    pub source: String,
    /// 1-based line of the cell in the document (markdown only), for messages.
    pub line: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    #[error(
        "{file}:{line}: the ```{info} fence opened here is never closed; close it with a line of ``` (at least as many backticks)"
    )]
    UnclosedFence { file: String, line: usize, info: String },
    #[error("{file}: not a Jupyter notebook: {reason}")]
    NotANotebook { file: String, reason: String },
    #[error("{file}: nbformat {major}.{minor} is not supported; save it as nbformat 4 (Jupyter 4.0 or later)")]
    UnsupportedVersion { file: String, major: i64, minor: i64 },
    #[error("{file}: cell {index}: {reason}")]
    BadCell { file: String, index: usize, reason: String },
    #[error("{file}: the notebook's language is `{language}`; only python documents can be verified")]
    NotPython { file: String, language: String },
}

/// Whether a fence info string marks a python code cell.
fn is_python_fence(info: &str) -> bool {
    let mut words = info.split_whitespace();
    match words.next() {
        Some("python") | Some("python3") | Some("py") | Some("ipython") | Some("ipython3") => true,
        Some("{code-cell}") => matches!(words.next(), None | Some("python") | Some("python3") | Some("ipython3")),
        _ => false,
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|b| **b == b'\n').count() + 1
}

/// Strips MyST cell options (a `---` YAML block or leading `:key: value` lines) from a code cell.
fn strip_myst_options(code: &str) -> &str {
    if let Some(rest) = code.strip_prefix("---\n")
        && let Some(end) = rest.find("\n---\n")
    {
        return &rest[end + 5..];
    }
    let mut rest = code;
    while rest.starts_with(':') {
        match rest.find('\n') {
            Some(nl) if rest[1..nl].contains(':') => rest = &rest[nl + 1..],
            _ => break,
        }
    }
    rest
}

/// Splits markdown into cells. `file` names the document in errors.
pub fn parse_markdown(text: &str, file: &str) -> Result<Vec<DocCell>, DocumentError> {
    let mut cells = Vec::new();
    let mut prose_from = 0usize;
    let mut in_python: Option<(usize, String, String)> = None; // (fence start, info, code)
    for (event, range) in Parser::new(text).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) if is_python_fence(&info) => {
                in_python = Some((range.start, info.to_string(), String::new()));
            }
            Event::Text(t) if in_python.is_some() => {
                if let Some((_, _, code)) = in_python.as_mut() {
                    code.push_str(&t);
                }
            }
            Event::End(TagEnd::CodeBlock) if in_python.is_some() => {
                let Some((start, info, code)) = in_python.take() else { continue };
                // CommonMark lets an unclosed fence run to the end of the document; here that is
                // almost always a typo that would swallow the rest of the document.
                let block = &text[start..range.end];
                let fence_char = block.trim_start().chars().next().unwrap_or('`');
                let fence_len = block.trim_start().chars().take_while(|c| *c == fence_char).count();
                let last_line = block.trim_end_matches(['\n', '\r']).rsplit('\n').next().unwrap_or("").trim();
                let closed = block.trim_end().lines().count() > 1
                    && last_line.chars().all(|c| c == fence_char)
                    && last_line.len() >= fence_len;
                if !closed {
                    return Err(DocumentError::UnclosedFence { file: file.into(), line: line_of(text, start), info });
                }
                let prose = &text[prose_from..start];
                if !prose.trim().is_empty() {
                    cells.push(DocCell {
                        kind: CellKind::Markdown,
                        source: prose.to_string(),
                        line: Some(line_of(text, prose_from)),
                    });
                }
                let code = strip_myst_options(&code);
                cells.push(DocCell {
                    kind: CellKind::Code,
                    source: code.strip_suffix('\n').unwrap_or(code).to_string(),
                    line: Some(line_of(text, start)),
                });
                prose_from = range.end;
            }
            _ => {}
        }
    }
    let prose = &text[prose_from..];
    if !prose.trim().is_empty() {
        cells.push(DocCell {
            kind: CellKind::Markdown,
            source: prose.to_string(),
            line: Some(line_of(text, prose_from)),
        });
    }
    Ok(cells)
}

fn source_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Array(lines) => lines.iter().map(|l| l.as_str()).collect::<Option<Vec<_>>>().map(|l| l.concat()),
        _ => None,
    }
}

/// Reads the cells of an nbformat 4.x notebook.
pub fn parse_notebook(text: &str, file: &str) -> Result<Vec<DocCell>, DocumentError> {
    let not_nb = |reason: String| DocumentError::NotANotebook { file: file.into(), reason };
    let nb: Value = serde_json::from_str(text).map_err(|e| not_nb(format!("invalid JSON: {e}")))?;
    let major =
        nb.get("nbformat").and_then(Value::as_i64).ok_or_else(|| not_nb("no `nbformat` version number".into()))?;
    let minor = nb.get("nbformat_minor").and_then(Value::as_i64).unwrap_or(0);
    if major != 4 {
        return Err(DocumentError::UnsupportedVersion { file: file.into(), major, minor });
    }
    if let Some(lang) = nb.pointer("/metadata/kernelspec/language").and_then(Value::as_str)
        && !lang.eq_ignore_ascii_case("python")
    {
        return Err(DocumentError::NotPython { file: file.into(), language: lang.into() });
    }
    let cells = nb.get("cells").and_then(Value::as_array).ok_or_else(|| not_nb("no `cells` list".into()))?;
    cells
        .iter()
        .enumerate()
        .map(|(index, c)| {
            let bad = |reason: &str| DocumentError::BadCell { file: file.into(), index, reason: reason.into() };
            let kind = match c.get("cell_type").and_then(Value::as_str) {
                Some("code") => CellKind::Code,
                Some("markdown") => CellKind::Markdown,
                Some("raw") => CellKind::Raw,
                Some(_) => return Err(bad("unknown `cell_type`; expected code, markdown or raw")),
                None => return Err(bad("no `cell_type`")),
            };
            let source =
                source_text(c.get("source")).ok_or_else(|| bad("`source` must be a string or a list of strings"))?;
            Ok(DocCell { kind, source, line: None })
        })
        .collect()
}

/// A document from its file name and bytes: `.ipynb` is a notebook, anything else markdown.
pub fn parse_document(bytes: &[u8], file: &str) -> Result<Vec<DocCell>, DocumentError> {
    let text = std::str::from_utf8(bytes).map_err(|e| DocumentError::NotANotebook {
        file: file.into(),
        reason: format!("not UTF-8 text (invalid byte at offset {})", e.valid_up_to()),
    })?;
    if file.ends_with(".ipynb") { parse_notebook(text, file) } else { parse_markdown(text, file) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_fences_become_code_and_prose_is_kept_byte_for_byte() {
        let doc = "# Title\n\nSome *prose*.\n\n```python\nx = 1\n```\n\n```bash\necho not code\n```\n\n```{code-cell} python\n:tags: [hide]\ny = x + 1\n```\ntrailing\n";
        let cells = parse_markdown(doc, "d.md").unwrap();
        let kinds: Vec<CellKind> = cells.iter().map(|c| c.kind).collect();
        assert_eq!(kinds, [CellKind::Markdown, CellKind::Code, CellKind::Markdown, CellKind::Code, CellKind::Markdown]);
        assert_eq!(cells[0].source, "# Title\n\nSome *prose*.\n\n");
        assert_eq!(cells[1].source, "x = 1");
        assert_eq!(cells[2].source, "\n\n```bash\necho not code\n```\n\n");
        assert_eq!(cells[3].source, "y = x + 1");
        assert_eq!(cells[4].source, "\ntrailing\n");
        // Concatenating prose and fences gives the document back.
        assert_eq!(cells[3].line, Some(13));
    }

    #[test]
    fn an_unclosed_fence_is_an_error_with_its_line() {
        let err = parse_markdown("text\n\n```python\nx = 1\nmore\n", "d.md").unwrap_err();
        assert_eq!(err, DocumentError::UnclosedFence { file: "d.md".into(), line: 3, info: "python".into() });
    }

    #[test]
    fn a_document_without_code_is_all_prose() {
        let cells = parse_markdown("just words\n", "d.md").unwrap();
        assert_eq!(cells.len(), 1);
        assert_eq!(cells[0].kind, CellKind::Markdown);
        assert!(parse_markdown("", "d.md").unwrap().is_empty());
    }

    #[test]
    fn notebooks_of_nbformat_4_are_read_and_others_refused() {
        let nb = r##"{"nbformat": 4, "nbformat_minor": 4, "metadata": {}, "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# A\n", "b"]},
            {"cell_type": "code", "metadata": {}, "execution_count": null, "outputs": [], "source": "1+1"}]}"##;
        let cells = parse_notebook(nb, "n.ipynb").unwrap();
        assert_eq!(cells[0].source, "# A\nb");
        assert_eq!(cells[1].kind, CellKind::Code);
        assert!(matches!(
            parse_notebook("{\"nbformat\": 3, \"cells\": []}", "n.ipynb"),
            Err(DocumentError::UnsupportedVersion { .. })
        ));
        assert!(matches!(parse_notebook("{not json", "n.ipynb"), Err(DocumentError::NotANotebook { .. })));
        assert!(matches!(
            parse_notebook("{\"nbformat\": 4, \"cells\": [{\"cell_type\": \"code\", \"source\": 3}]}", "n.ipynb"),
            Err(DocumentError::BadCell { index: 0, .. })
        ));
        assert!(matches!(parse_document(&[0xff, 0xfe], "n.ipynb"), Err(DocumentError::NotANotebook { .. })));
    }
}
