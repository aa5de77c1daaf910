//! nbformat 4.5, checked structurally: what `nbformat.v4.5.schema.json` requires of a notebook
//! (required keys and their types per cell and output type, no other keys where the schema
//! forbids them, the metadata the schema constrains), plus what `nbformat.validate` checks beyond
//! the schema: cell ids unique. The schema's patterns are Python `re.search` patterns, whose `$`
//! also matches before a final newline; the checks below follow that.

use std::collections::HashSet;

use serde_json::{Map, Value};

type Check = Result<(), String>;

fn fail<T>(at: &str, what: impl std::fmt::Display) -> Result<T, String> {
    Err(format!("{at}: {what}"))
}

fn object<'v>(v: Option<&'v Value>, at: &str) -> Result<&'v Map<String, Value>, String> {
    match v {
        Some(Value::Object(m)) => Ok(m),
        Some(other) => fail(at, format!("must be an object, is {other}")),
        None => fail(at, "is missing"),
    }
}

fn string(v: Option<&Value>, at: &str) -> Check {
    match v {
        Some(Value::String(_)) => Ok(()),
        Some(other) => fail(at, format!("must be a string, is {other}")),
        None => fail(at, "is missing"),
    }
}

/// `multiline_string`: a string, or a list of strings.
fn multiline(v: Option<&Value>, at: &str) -> Check {
    match v {
        Some(Value::String(_)) => Ok(()),
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => Ok(()),
        Some(other) => fail(at, format!("must be a string or a list of strings, is {other}")),
        None => fail(at, "is missing"),
    }
}

/// `["integer", "null"]` with `minimum: 0`.
fn execution_count(v: Option<&Value>, at: &str) -> Check {
    match v {
        Some(Value::Null) => Ok(()),
        Some(Value::Number(n)) if n.is_u64() => Ok(()),
        Some(other) => fail(at, format!("must be a non-negative integer or null, is {other}")),
        None => fail(at, "is missing"),
    }
}

/// Only `allowed` keys (the schema's `additionalProperties: false`).
fn only(m: &Map<String, Value>, allowed: &[&str], at: &str) -> Check {
    match m.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => fail(at, format!("has key `{k}`, which the schema does not allow")),
        None => Ok(()),
    }
}

/// Python's `re.search(pattern, s)` where the pattern ends in `$`: the text before one final
/// newline is what must match.
fn before_final_newline(s: &str) -> &str {
    s.strip_suffix('\n').unwrap_or(s)
}

/// `cell_id`: `^[a-zA-Z0-9-_]+$`, 1 to 64 characters.
pub fn is_cell_id(id: &str) -> bool {
    let body = before_final_newline(id);
    (1..=64).contains(&id.chars().count())
        && !body.is_empty()
        && body.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `metadata_tags`: unique strings matching `^[^,]+$`.
pub fn tags(v: &Value, at: &str) -> Check {
    let Value::Array(items) = v else { return fail(at, format!("must be a list, is {v}")) };
    let mut seen = HashSet::new();
    for t in items {
        let Value::String(s) = t else { return fail(at, format!("holds {t}, not a string")) };
        if s.is_empty() || s.contains(',') {
            return fail(at, format!("tag {s:?} is empty or holds a comma"));
        }
        if !seen.insert(s) {
            return fail(at, format!("tag {s:?} is given twice"));
        }
    }
    Ok(())
}

/// `metadata_name`: `^.+$` (`.` is anything but a newline).
fn name(v: &Value, at: &str) -> Check {
    match v {
        Value::String(s) if !before_final_newline(s).is_empty() && !before_final_newline(s).contains('\n') => Ok(()),
        other => fail(at, format!("must be a non-empty one-line string, is {other}")),
    }
}

/// The cell metadata the schema constrains, per cell type.
fn cell_metadata(m: &Map<String, Value>, cell_type: &str, at: &str) -> Check {
    if let Some(t) = m.get("tags") {
        tags(t, &format!("{at}.tags"))?;
    }
    if let Some(n) = m.get("name") {
        name(n, &format!("{at}.name"))?;
    }
    if let Some(j) = m.get("jupyter") {
        object(Some(j), &format!("{at}.jupyter"))?;
    }
    match cell_type {
        "raw" => {
            if let Some(f) = m.get("format") {
                string(Some(f), &format!("{at}.format"))?;
            }
        }
        "code" => {
            if let Some(e) = m.get("execution") {
                for (k, v) in object(Some(e), &format!("{at}.execution"))? {
                    string(Some(v), &format!("{at}.execution.{k}"))?;
                }
            }
            if let Some(c) = m.get("collapsed")
                && !c.is_boolean()
            {
                return fail(&format!("{at}.collapsed"), format!("must be a boolean, is {c}"));
            }
            if let Some(s) = m.get("scrolled")
                && !(s.is_boolean() || s == "auto")
            {
                return fail(&format!("{at}.scrolled"), format!("must be true, false or \"auto\", is {s}"));
            }
        }
        _ => {}
    }
    Ok(())
}

/// `mimebundle`: every value a multiline string, except JSON mime types, which hold anything.
fn mimebundle(v: Option<&Value>, at: &str) -> Check {
    for (mime, value) in object(v, at)? {
        if !is_json_mime(mime) {
            multiline(Some(value), &format!("{at}[{mime:?}]"))?;
        }
    }
    Ok(())
}

/// `^application/(.*\+)?json$`, searched as Python does.
fn is_json_mime(mime: &str) -> bool {
    let Some(rest) = before_final_newline(mime).strip_prefix("application/") else { return false };
    let Some(head) = rest.strip_suffix("json") else { return false };
    // `(.*\+)?`: nothing, or anything without a newline ending in `+`.
    head.is_empty() || (head.ends_with('+') && !head.contains('\n'))
}

fn output(o: &Value, at: &str) -> Check {
    let m = object(Some(o), at)?;
    let kind = m.get("output_type").and_then(Value::as_str).unwrap_or_default();
    match kind {
        "execute_result" => {
            only(m, &["output_type", "data", "metadata", "execution_count"], at)?;
            execution_count(m.get("execution_count"), &format!("{at}.execution_count"))?;
            mimebundle(m.get("data"), &format!("{at}.data"))?;
            object(m.get("metadata"), &format!("{at}.metadata")).map(drop)
        }
        "display_data" => {
            only(m, &["output_type", "data", "metadata"], at)?;
            mimebundle(m.get("data"), &format!("{at}.data"))?;
            object(m.get("metadata"), &format!("{at}.metadata")).map(drop)
        }
        "stream" => {
            only(m, &["output_type", "name", "text"], at)?;
            string(m.get("name"), &format!("{at}.name"))?;
            multiline(m.get("text"), &format!("{at}.text"))
        }
        "error" => {
            only(m, &["output_type", "ename", "evalue", "traceback"], at)?;
            string(m.get("ename"), &format!("{at}.ename"))?;
            string(m.get("evalue"), &format!("{at}.evalue"))?;
            match m.get("traceback") {
                Some(Value::Array(lines)) if lines.iter().all(Value::is_string) => Ok(()),
                other => fail(&format!("{at}.traceback"), format!("must be a list of strings, is {other:?}")),
            }
        }
        other => fail(at, format!("output_type {other:?} is not one of nbformat's four")),
    }
}

fn cell(c: &Value, at: &str) -> Check {
    let m = object(Some(c), at)?;
    let cell_type = m.get("cell_type").and_then(Value::as_str).unwrap_or_default();
    match cell_type {
        "markdown" | "raw" => only(m, &["id", "cell_type", "metadata", "attachments", "source"], at)?,
        "code" => {
            only(m, &["id", "cell_type", "metadata", "source", "outputs", "execution_count"], at)?;
            execution_count(m.get("execution_count"), &format!("{at}.execution_count"))?;
            let Some(Value::Array(outputs)) = m.get("outputs") else {
                return fail(at, "a code cell needs an `outputs` list");
            };
            for (i, o) in outputs.iter().enumerate() {
                output(o, &format!("{at}.outputs[{i}]"))?;
            }
        }
        other => return fail(at, format!("cell_type {other:?} is not markdown, code or raw")),
    }
    match m.get("id") {
        Some(Value::String(id)) if is_cell_id(id) => {}
        other => return fail(&format!("{at}.id"), format!("is not an nbformat cell id: {other:?}")),
    }
    if let Some(a) = m.get("attachments") {
        for (file, bundle) in object(Some(a), &format!("{at}.attachments"))? {
            mimebundle(Some(bundle), &format!("{at}.attachments[{file:?}]"))?;
        }
    }
    multiline(m.get("source"), &format!("{at}.source"))?;
    cell_metadata(object(m.get("metadata"), &format!("{at}.metadata"))?, cell_type, &format!("{at}.metadata"))
}

/// `Ok` when `nb` is a valid nbformat 4.5 notebook; else the first problem, located.
pub fn check(nb: &Value) -> Check {
    let m = object(Some(nb), "notebook")?;
    only(m, &["metadata", "nbformat_minor", "nbformat", "cells"], "notebook")?;
    if m.get("nbformat") != Some(&Value::from(4)) {
        return fail("nbformat", "must be 4");
    }
    match m.get("nbformat_minor") {
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n >= 5) => {}
        other => return fail("nbformat_minor", format!("must be an integer of at least 5, is {other:?}")),
    }
    let meta = object(m.get("metadata"), "metadata")?;
    if let Some(k) = meta.get("kernelspec") {
        let k = object(Some(k), "metadata.kernelspec")?;
        string(k.get("name"), "metadata.kernelspec.name")?;
        string(k.get("display_name"), "metadata.kernelspec.display_name")?;
    }
    if let Some(l) = meta.get("language_info") {
        let l = object(Some(l), "metadata.language_info")?;
        string(l.get("name"), "metadata.language_info.name")?;
        for key in ["file_extension", "mimetype", "pygments_lexer"] {
            if let Some(v) = l.get(key) {
                string(Some(v), &format!("metadata.language_info.{key}"))?;
            }
        }
        if let Some(c) = l.get("codemirror_mode")
            && !(c.is_string() || c.is_object())
        {
            return fail("metadata.language_info.codemirror_mode", "must be a string or an object");
        }
    }
    if let Some(o) = meta.get("orig_nbformat")
        && !o.as_u64().is_some_and(|n| n >= 1)
    {
        return fail("metadata.orig_nbformat", format!("must be an integer of at least 1, is {o}"));
    }
    if let Some(t) = meta.get("title") {
        string(Some(t), "metadata.title")?;
    }
    if let Some(a) = meta.get("authors")
        && !a.is_array()
    {
        return fail("metadata.authors", format!("must be a list, is {a}"));
    }
    let Some(Value::Array(cells)) = m.get("cells") else { return fail("cells", "must be a list") };
    let mut ids = HashSet::new();
    for (i, c) in cells.iter().enumerate() {
        cell(c, &format!("cells[{i}]"))?;
        let id = c.get("id").and_then(Value::as_str).unwrap_or_default();
        if !ids.insert(id) {
            return fail(&format!("cells[{i}].id"), format!("{id:?} is not unique"));
        }
    }
    Ok(())
}
