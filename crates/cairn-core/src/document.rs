//! Workflow documents: markdown with fenced python cells (```` ```python ```` and the
//! jupytext/MyST ```` ```{code-cell} python ```` form), or a Jupyter notebook (nbformat 4.x).
//! A document becomes an ordered list of cells; prose between code fences is kept byte for byte.
//!
//! Cell tags are read as Jupyter's tools define them: a notebook cell's `metadata.tags`; in
//! markdown, a MyST code cell's `:tags: [a, b]` option (or `tags:` in its `---` option block) and
//! jupytext's fence metadata (```` ```python tags=["a"] ````). The document's own metadata is a
//! notebook's `metadata`, or a markdown document's YAML front matter (where jupytext keeps it).

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
use serde_json::{Map, Value};

/// A code cell's error is expected (nbclient, nbval): it is recorded and the run goes on.
pub const TAG_RAISES_EXCEPTION: &str = "raises-exception";
/// A code cell that is not run (nbclient, MyST-NB).
pub const TAG_SKIP_EXECUTION: &str = "skip-execution";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CellKind {
    #[default]
    Markdown,
    Code,
    Raw,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DocCell {
    pub kind: CellKind,
    pub source: String,
    /// 1-based line of the cell in the document (markdown only), for messages.
    pub line: Option<usize>,
    /// The cell's metadata: a notebook cell's as it is; a markdown cell's tags as `tags`.
    pub metadata: Map<String, Value>,
}

impl DocCell {
    pub fn tags(&self) -> Vec<&str> {
        match self.metadata.get("tags") {
            Some(Value::Array(tags)) => tags.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        }
    }

    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags().contains(&tag)
    }
}

/// A parsed document: its cells and its own metadata.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParsedDocument {
    pub cells: Vec<DocCell>,
    /// A notebook's `metadata`; a markdown document's front matter (empty without one).
    pub metadata: Map<String, Value>,
}

impl ParsedDocument {
    /// The per-cell timeout the document asks for, in seconds: `metadata.execution.timeout` (the
    /// jupyter-book and MyST-NB convention). `-1` and `0` mean no timeout there; Cairn's own
    /// bound then applies.
    pub fn execution_timeout(&self, file: &str) -> Result<Option<u64>, DocumentError> {
        let Some(t) = self.metadata.get("execution").and_then(|e| e.get("timeout")) else { return Ok(None) };
        match t.as_f64() {
            Some(secs) if secs > 0.0 => Ok(Some(secs.ceil() as u64)),
            Some(_) => Ok(None),
            None if t.is_null() => Ok(None),
            None => Err(DocumentError::BadMetadata {
                file: file.into(),
                field: "execution.timeout",
                reason: format!("must be a number of seconds (got {t})"),
            }),
        }
    }
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
    #[error("{file}:{line}: the cell's {what} cannot be read: {reason}")]
    BadOptions { file: String, line: usize, what: &'static str, reason: String },
    #[error("{file}: metadata {field} {reason}")]
    BadMetadata { file: String, field: &'static str, reason: String },
}

/// jupytext's cell metadata after the language of a fence's info string: `key=JSON` pairs
/// (```` ```python tags=["a", "b"] ````); a bare word is an option jupytext writes as `key=true`.
fn fence_metadata(info: &str) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    let mut rest = info.trim_start();
    // The language (and MyST's `{code-cell}` directive) come first.
    for _ in 0..2 {
        match rest.split_once(char::is_whitespace) {
            Some((word, tail)) if !word.contains('=') => rest = tail.trim_start(),
            None if !rest.contains('=') => return Ok(out),
            _ => break,
        }
    }
    while !rest.is_empty() {
        let end = rest.find(|c: char| c == '=' || c.is_whitespace()).unwrap_or(rest.len());
        let key = &rest[..end];
        if rest[end..].starts_with('=') {
            let value_text = &rest[end + 1..];
            let mut values = serde_json::Deserializer::from_str(value_text).into_iter::<Value>();
            let value = match values.next() {
                Some(Ok(v)) => v,
                _ => {
                    return Err(format!(
                        "`{key}=` is not followed by a JSON value (write {key}=[\"a\"] or {key}=\"a\")"
                    ));
                }
            };
            out.insert(key.to_string(), value);
            rest = value_text[values.byte_offset()..].trim_start();
        } else {
            out.insert(key.to_string(), Value::Bool(true));
            rest = rest[end..].trim_start();
        }
    }
    Ok(out)
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

/// A MyST code cell's options (a `---` YAML block, or leading `:key: value` lines, each value
/// YAML) and the code after them.
fn myst_options(code: &str) -> Result<(Map<String, Value>, &str), String> {
    if let Some(rest) = code.strip_prefix("---\n")
        && let Some(end) = rest.find("\n---\n")
    {
        let options = yaml_map(&rest[..end])?;
        return Ok((options, &rest[end + 5..]));
    }
    let mut options = Map::new();
    let mut rest = code;
    while rest.starts_with(':') {
        let nl = rest.find('\n').unwrap_or(rest.len());
        let Some((key, value)) = rest[1..nl].split_once(':') else { break };
        if key.is_empty() || key.contains(char::is_whitespace) {
            break;
        }
        let value: Value = serde_norway::from_str(value.trim()).map_err(|e| format!("option `:{key}:`: {e}"))?;
        options.insert(key.to_string(), value);
        rest = rest.get(nl + 1..).unwrap_or("");
    }
    Ok((options, rest))
}

/// A YAML mapping as JSON; empty text is an empty mapping.
fn yaml_map(text: &str) -> Result<Map<String, Value>, String> {
    match serde_norway::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(other) => Err(format!("expected a mapping of options, got {other}")),
        Err(e) => Err(e.to_string()),
    }
}

/// A markdown document's YAML front matter (`---` on its first line, up to the next `---`).
fn front_matter(text: &str, file: &str) -> Result<Map<String, Value>, DocumentError> {
    let Some(rest) = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n")) else {
        return Ok(Map::new());
    };
    let end = rest.find("\n---\n").or_else(|| rest.strip_suffix("\n---").map(|r| r.len()));
    let Some(end) = end else { return Ok(Map::new()) };
    yaml_map(&rest[..end]).map_err(|reason| DocumentError::BadOptions {
        file: file.into(),
        line: 1,
        what: "front matter",
        reason,
    })
}

/// Whether a notebook cell is one Cairn adds to what it writes (`metadata.cairn.role`).
fn is_cairns(cell: &DocCell) -> bool {
    let role = cell.metadata.get("cairn").and_then(|c| c.get("role")).and_then(Value::as_str);
    matches!(role, Some("provenance") | Some("bootstrap"))
}

/// Tags as nbformat 4.5 has them, wherever they come from: a list of distinct, non-empty strings
/// without commas (the notebook Cairn writes carries them, and must validate).
fn check_tags(metadata: &Map<String, Value>) -> Result<(), String> {
    match metadata.get("tags") {
        None => Ok(()),
        Some(Value::Array(tags)) => {
            for (i, tag) in tags.iter().enumerate() {
                match tag {
                    Value::String(t) if t.is_empty() || t.contains(',') => {
                        return Err(format!(
                            "tags hold {tag}, which nbformat does not allow: a tag is a non-empty string without commas"
                        ));
                    }
                    Value::String(_) if tags[..i].contains(tag) => {
                        return Err(format!("tags hold {tag} twice; give each tag once"));
                    }
                    Value::String(_) => {}
                    other => return Err(format!("tags must be a list of strings (got {other} in it)")),
                }
            }
            Ok(())
        }
        Some(other) => Err(format!("tags must be a list of strings (got {other})")),
    }
}

/// Whether `s` is what nbformat's `^.+$` takes: not empty, one line (a final newline aside).
fn one_line(s: &str) -> bool {
    let body = s.strip_suffix('\n').unwrap_or(s);
    !body.is_empty() && !body.contains('\n')
}

/// A notebook cell's metadata as nbformat 4.5 constrains it for its kind: the notebook Cairn
/// writes keeps it, so one that would not validate is refused here, naming the key.
fn check_cell_metadata(kind: CellKind, m: &Map<String, Value>) -> Result<(), String> {
    check_tags(m)?;
    if let Some(name) = m.get("name")
        && !name.as_str().is_some_and(one_line)
    {
        return Err(format!("name must be a non-empty, one-line string (got {name})"));
    }
    if let Some(j) = m.get("jupyter")
        && !j.is_object()
    {
        return Err(format!("jupyter must be an object (got {j})"));
    }
    match kind {
        CellKind::Code => {
            if let Some(c) = m.get("collapsed")
                && !c.is_boolean()
            {
                return Err(format!("collapsed must be true or false (got {c})"));
            }
            if let Some(s) = m.get("scrolled")
                && !(s.is_boolean() || s == "auto")
            {
                return Err(format!("scrolled must be true, false or \"auto\" (got {s})"));
            }
            match m.get("execution") {
                None => {}
                Some(Value::Object(times)) => {
                    if let Some((k, v)) = times.iter().find(|(_, v)| !v.is_string()) {
                        return Err(format!("execution.{k} must be a string, a time (got {v})"));
                    }
                }
                Some(other) => return Err(format!("execution must be an object of times (got {other})")),
            }
        }
        CellKind::Raw => {
            if let Some(f) = m.get("format")
                && !f.is_string()
            {
                return Err(format!("format must be a string, a mime type (got {f})"));
            }
        }
        CellKind::Markdown => {}
    }
    Ok(())
}

/// A document's own metadata as nbformat 4.5 constrains it (the notebook Cairn writes keeps it):
/// `title` a string, `authors` a list, `orig_nbformat` a whole number of at least 1.
fn check_document_metadata(m: &Map<String, Value>, file: &str) -> Result<(), DocumentError> {
    let bad =
        |field: &'static str, reason: String| Err(DocumentError::BadMetadata { file: file.into(), field, reason });
    if let Some(t) = m.get("title")
        && !t.is_string()
    {
        return bad("title", format!("must be a string (got {t}); quote it"));
    }
    if let Some(a) = m.get("authors")
        && !a.is_array()
    {
        return bad("authors", format!("must be a list (got {a})"));
    }
    if let Some(o) = m.get("orig_nbformat")
        && o.as_u64().is_none_or(|n| n < 1)
    {
        return bad("orig_nbformat", format!("must be a whole number of at least 1 (got {o})"));
    }
    Ok(())
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
                        metadata: Map::new(),
                    });
                }
                let line = line_of(text, start);
                let bad = |what: &'static str| {
                    move |reason: String| DocumentError::BadOptions { file: file.into(), line, what, reason }
                };
                let mut metadata = fence_metadata(&info).map_err(bad("fence metadata"))?;
                let (options, code) = myst_options(&code).map_err(bad("MyST options"))?;
                if let Some(tags) = options.get("tags") {
                    metadata.insert("tags".into(), tags.clone());
                }
                check_tags(&metadata).map_err(bad("metadata"))?;
                // Only what Jupyter's tools read of a markdown cell is kept as its metadata.
                metadata.retain(|k, _| k == "tags");
                cells.push(DocCell {
                    kind: CellKind::Code,
                    source: code.strip_suffix('\n').unwrap_or(code).to_string(),
                    line: Some(line),
                    metadata,
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
            metadata: Map::new(),
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
    read_notebook(text, file).map(|d| d.cells)
}

/// Reads an nbformat 4.x notebook: its cells, and its metadata.
pub fn read_notebook(text: &str, file: &str) -> Result<ParsedDocument, DocumentError> {
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
    let metadata = match nb.get("metadata") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(not_nb("`metadata` is not an object".into())),
    };
    check_document_metadata(&metadata, file)?;
    let cells = nb.get("cells").and_then(Value::as_array).ok_or_else(|| not_nb("no `cells` list".into()))?;
    let cells = cells
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
            let metadata = match c.get("metadata") {
                None | Some(Value::Null) => Map::new(),
                Some(Value::Object(m)) => m.clone(),
                Some(_) => return Err(bad("`metadata` must be an object")),
            };
            check_cell_metadata(kind, &metadata).map_err(|reason| bad(&format!("metadata.{reason}")))?;
            Ok(DocCell { kind, source, line: None, metadata })
        })
        .collect::<Result<Vec<DocCell>, _>>()?;
    // A notebook Cairn wrote (a pass, or a notebook's draft) starts with its own provenance and
    // bootstrap cells: not the document's, and the bootstrap runs anyway.
    let cells = cells.into_iter().filter(|c| !is_cairns(c)).collect();
    Ok(ParsedDocument { cells, metadata })
}

/// A document from its file name and bytes: `.ipynb` is a notebook, anything else markdown.
pub fn parse_document(bytes: &[u8], file: &str) -> Result<Vec<DocCell>, DocumentError> {
    read_document(bytes, file).map(|d| d.cells)
}

/// A document with its metadata, from its file name and bytes.
pub fn read_document(bytes: &[u8], file: &str) -> Result<ParsedDocument, DocumentError> {
    let text = std::str::from_utf8(bytes).map_err(|e| DocumentError::NotANotebook {
        file: file.into(),
        reason: format!("not UTF-8 text (invalid byte at offset {})", e.valid_up_to()),
    })?;
    if is_notebook(file) {
        read_notebook(text, file)
    } else {
        let metadata = front_matter(text, file)?;
        check_document_metadata(&metadata, file)?;
        Ok(ParsedDocument { cells: parse_markdown(text, file)?, metadata })
    }
}

/// Whether `file` names a notebook (by its extension).
pub fn is_notebook(file: &str) -> bool {
    file.ends_with(".ipynb")
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

    #[test]
    fn tags_are_read_as_jupyters_tools_write_them() {
        let doc = "---\nexecution:\n  timeout: 12.5\n---\n# T\n\n\
```{code-cell} python\n:tags: [raises-exception]\n1/0\n```\n\n\
```{code-cell} ipython3\n---\ntags: [skip-execution, other]\n---\nslow()\n```\n\n\
```python tags=[\"raises-exception\", \"x y\"] echo=true\nraise SystemExit(1)\n```\n\n\
```python\nplain = 1\n```\n";
        let parsed = read_document(doc.as_bytes(), "d.md").unwrap();
        let code: Vec<&DocCell> = parsed.cells.iter().filter(|c| c.kind == CellKind::Code).collect();
        let tags: Vec<Vec<&str>> = code.iter().map(|c| c.tags()).collect();
        assert_eq!(
            tags,
            [vec!["raises-exception"], vec!["skip-execution", "other"], vec!["raises-exception", "x y"], vec![]]
        );
        assert_eq!(code[0].source, "1/0");
        assert_eq!(code[1].source, "slow()");
        assert_eq!(code[2].source, "raise SystemExit(1)");
        assert!(code[2].metadata.get("echo").is_none(), "only tags are kept of a markdown cell's metadata");
        assert_eq!(parsed.execution_timeout("d.md").unwrap(), Some(13));
        // The front matter is still prose, byte for byte.
        assert!(parsed.cells[0].source.starts_with("---\nexecution:"));

        let nb = r#"{"nbformat": 4, "nbformat_minor": 5, "metadata": {"execution": {"timeout": 30}}, "cells": [
            {"cell_type": "code", "metadata": {"tags": ["skip-execution"], "scrolled": true}, "source": "x", "outputs": []}]}"#;
        let parsed = read_document(nb.as_bytes(), "n.ipynb").unwrap();
        assert!(parsed.cells[0].has_tag(TAG_SKIP_EXECUTION));
        assert_eq!(parsed.cells[0].metadata["scrolled"], true, "a notebook cell's metadata is kept whole");
        assert_eq!(parsed.execution_timeout("n.ipynb").unwrap(), Some(30));
    }

    #[test]
    fn bad_tags_and_options_are_errors_naming_the_cell() {
        let bad_json = "```python tags=[unquoted]\nx\n```\n";
        let e = parse_markdown(bad_json, "d.md").unwrap_err().to_string();
        assert!(e.starts_with("d.md:1: the cell's fence metadata cannot be read: `tags=`"), "{e}");
        let bad_yaml = "text\n\n```{code-cell} python\n:tags: [a, \n1\n```\n";
        let e = parse_markdown(bad_yaml, "d.md").unwrap_err().to_string();
        assert!(e.starts_with("d.md:3: the cell's MyST options cannot be read: option `:tags:`"), "{e}");
        let not_list = "```{code-cell} python\n:tags: raises-exception\nx\n```\n";
        let e = parse_markdown(not_list, "d.md").unwrap_err().to_string();
        assert!(e.contains("tags must be a list of strings"), "{e}");
        let nb = r#"{"nbformat": 4, "cells": [{"cell_type": "code", "metadata": {"tags": "x"}, "source": ""}]}"#;
        let e = parse_notebook(nb, "n.ipynb").unwrap_err().to_string();
        assert!(e.contains("n.ipynb: cell 0: metadata.tags must be a list of strings"), "{e}");
        let nb = r#"{"nbformat": 4, "metadata": {"execution": {"timeout": "soon"}}, "cells": []}"#;
        let e = read_document(nb.as_bytes(), "n.ipynb").unwrap().execution_timeout("n.ipynb").unwrap_err();
        assert_eq!(e.to_string(), "n.ipynb: metadata execution.timeout must be a number of seconds (got \"soon\")");
    }

    /// Found by the fuzzer (`fuzz/fuzz_targets/document.rs`): a tag with a comma (or empty, or
    /// given twice) was read, and the notebook Cairn wrote with it did not validate.
    #[test]
    fn tags_nbformat_refuses_are_refused_naming_the_tag() {
        for (tags, says) in [
            (r#"["a,b"]"#, r#"tags hold "a,b", which nbformat does not allow"#),
            (r#"[""]"#, r#"tags hold "", which nbformat does not allow"#),
            (r#"["x", "y", "x"]"#, r#"tags hold "x" twice; give each tag once"#),
        ] {
            let md = format!("```python tags={tags}\nx\n```\n");
            let e = parse_markdown(&md, "d.md").unwrap_err().to_string();
            assert!(e.starts_with("d.md:1: the cell's metadata cannot be read: ") && e.contains(says), "{e}");
            let nb = format!(
                r#"{{"nbformat": 4, "cells": [{{"cell_type": "code", "metadata": {{"tags": {tags}}}, "source": ""}}]}}"#
            );
            let e = parse_notebook(&nb, "n.ipynb").unwrap_err().to_string();
            assert!(e.starts_with("n.ipynb: cell 0: metadata.") && e.contains(says), "{e}");
        }
        let myst = "```{code-cell} python\n:tags: [a, a]\nx\n```\n";
        assert!(parse_markdown(myst, "d.md").unwrap_err().to_string().contains(r#"tags hold "a" twice"#));
    }

    /// Found by the fuzzer (`fuzz/fuzz_targets/notebook.rs`): a document whose `title` was not a
    /// string was read, and the notebook Cairn wrote with it did not validate. The other metadata
    /// nbformat 4.5 constrains (a cell's `collapsed`, `scrolled`, `execution`, `name`, `format`,
    /// `jupyter`; the document's `authors`, `orig_nbformat`) is checked alike.
    #[test]
    fn metadata_nbformat_refuses_is_refused_naming_the_key() {
        let cell = |kind: &str, meta: &str| {
            let nb =
                format!(r#"{{"nbformat": 4, "cells": [{{"cell_type": "{kind}", "metadata": {meta}, "source": ""}}]}}"#);
            parse_notebook(&nb, "n.ipynb").map(|_| ()).map_err(|e| e.to_string())
        };
        for (kind, meta, says) in [
            ("code", r#"{"collapsed": 1}"#, "metadata.collapsed must be true or false (got 1)"),
            ("code", r#"{"scrolled": "yes"}"#, r#"metadata.scrolled must be true, false or "auto" (got "yes")"#),
            (
                "code",
                r#"{"execution": {"shell.execute_reply": 3}}"#,
                "metadata.execution.shell.execute_reply must be a string",
            ),
            ("markdown", r#"{"name": ""}"#, "metadata.name must be a non-empty, one-line string"),
            ("raw", r#"{"name": "a\nb"}"#, "metadata.name must be a non-empty, one-line string"),
            ("raw", r#"{"format": 7}"#, "metadata.format must be a string"),
            ("code", r#"{"jupyter": true}"#, "metadata.jupyter must be an object"),
        ] {
            let e = cell(kind, meta).unwrap_err();
            assert!(e.starts_with("n.ipynb: cell 0: ") && e.contains(says), "{kind} {meta}: {e}");
        }
        // What nbformat allows is read: the same keys where they are not constrained, and right.
        for (kind, meta) in [
            ("markdown", r#"{"collapsed": 1, "scrolled": "yes"}"#),
            (
                "code",
                r#"{"collapsed": false, "scrolled": "auto", "execution": {"iopub.status.busy": "t"}, "name": "a\n"}"#,
            ),
            ("raw", r#"{"format": "text/x-rst", "jupyter": {"source_hidden": true}}"#),
        ] {
            assert_eq!(cell(kind, meta), Ok(()), "{kind} {meta}");
        }
        let e = read_document(b"---\ntitle: 2024\n---\n# T\n", "d.md").unwrap_err().to_string();
        assert_eq!(e, "d.md: metadata title must be a string (got 2024); quote it");
        let nb = r#"{"nbformat": 4, "metadata": {"orig_nbformat": 0}, "cells": []}"#;
        let e = read_document(nb.as_bytes(), "n.ipynb").unwrap_err().to_string();
        assert_eq!(e, "n.ipynb: metadata orig_nbformat must be a whole number of at least 1 (got 0)");
        assert!(read_document(b"---\ntitle: \"2024\"\nauthors: []\n---\n", "d.md").is_ok());
    }
}
