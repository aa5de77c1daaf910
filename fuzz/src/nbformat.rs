//! nbformat 4.5, checked against its published JSON schema: `fuzz/nbformat.v4.5.schema.json`,
//! vendored unchanged from the nbformat Python package (origin and BSD-3 licence in
//! `fuzz/nbformat.v4.5.schema.LICENSE`), compiled once by the `jsonschema` crate as draft 4 (the
//! schema's own `$schema`; every `$ref` is inside the file, so nothing is fetched).
//!
//! Two things the schema file alone does not say, kept apart below:
//! - its patterns are Python `re.search` patterns, whose `$` also matches before one final
//!   newline, where JSON Schema's ECMA-262 `$` matches only at the end; [`python_patterns`]
//!   rewrites them so the check agrees with `nbformat.validate` (Cairn's document reader follows
//!   Python there: a cell named `"x\n"` is a valid notebook);
//! - `nbformat.validate` requires cell ids to be unique, which no JSON schema can express
//!   ([`unique_cell_ids`]).

use std::collections::HashSet;
use std::sync::LazyLock;

use jsonschema::Validator;
use serde_json::{Value, json};

type Check = Result<(), String>;

const SCHEMA: &str = include_str!("../nbformat.v4.5.schema.json");

/// The vendored schema with its patterns as Python reads them.
fn schema() -> Value {
    let mut schema: Value = serde_json::from_str(SCHEMA).expect("the vendored nbformat schema is JSON");
    python_patterns(&mut schema);
    schema
}

/// Every `pattern` and `patternProperties` key of `v` whose final `$` is Python's: `\n?$`.
fn python_patterns(v: &mut Value) {
    fn python(p: &str) -> String {
        match p.strip_suffix('$') {
            Some(head) if !head.ends_with('\\') => format!("{head}\\n?$"),
            _ => p.to_string(),
        }
    }
    match v {
        Value::Object(m) => {
            if let Some(Value::String(p)) = m.get_mut("pattern") {
                *p = python(p);
            }
            if let Some(Value::Object(props)) = m.get_mut("patternProperties") {
                *props = std::mem::take(props).into_iter().map(|(k, v)| (python(&k), v)).collect();
            }
            m.values_mut().for_each(python_patterns);
        }
        Value::Array(items) => items.iter_mut().for_each(python_patterns),
        _ => {}
    }
}

fn compile(schema: &Value) -> Validator {
    jsonschema::draft4::new(schema).unwrap_or_else(|e| panic!("the vendored nbformat schema does not compile: {e}"))
}

/// The whole notebook's schema.
static NOTEBOOK: LazyLock<Validator> = LazyLock::new(|| compile(&schema()));

/// The schema's `metadata_tags` alone (for the document target, which checks tags as read).
static TAGS: LazyLock<Validator> = LazyLock::new(|| {
    let definitions = schema()["definitions"].take();
    compile(&json!({"definitions": definitions, "allOf": [{"$ref": "#/definitions/misc/metadata_tags"}]}))
});

/// The first error of `validator` on `v`, located by its JSON pointer under `at`.
///
/// A cell and an output are each a `oneOf` of their kinds, so a problem inside one is first
/// reported as the whole cell matching none of them. The kind's own error is then looked for
/// among every error of the evaluation: those of the other kinds' branches (the branches where
/// `cell_type` or `output_type` did not match) are set aside, and the first one left is it.
fn validate(validator: &Validator, v: &Value, at: &str) -> Check {
    let Some(first) = validator.iter_errors(v).next() else { return Ok(()) };
    let evaluation = validator.evaluate(v);
    let errors: Vec<_> = evaluation.iter_errors().collect();
    let other_kinds: Vec<&str> = errors
        .iter()
        .filter_map(|e| {
            ["/properties/cell_type/enum", "/properties/output_type/enum"]
                .iter()
                .find_map(|kind| e.schema_location.strip_suffix(kind))
        })
        .collect();
    let within = errors.iter().find(|e| {
        !e.schema_location.ends_with("/oneOf")
            && !other_kinds.iter().any(|branch| e.schema_location.starts_with(&format!("{branch}/")))
    });
    Err(match within {
        Some(e) => format!("{at}{}: {}", e.instance_location, e.error),
        None => format!("{at}{}: {first}", first.instance_path()),
    })
}

/// `nbformat.validate` beyond the schema: no two cells share an id.
fn unique_cell_ids(nb: &Value) -> Check {
    let mut seen = HashSet::new();
    for (i, cell) in nb["cells"].as_array().into_iter().flatten().enumerate() {
        let id = cell["id"].as_str().unwrap_or_default();
        if !seen.insert(id) {
            return Err(format!("/cells/{i}/id: {id:?} is not unique (nbformat.validate requires unique cell ids)"));
        }
    }
    Ok(())
}

/// `Ok` when `nb` is a valid nbformat 4.5 notebook, as `nbformat.validate` decides; else the
/// first problem, with its JSON pointer.
pub fn check(nb: &Value) -> Check {
    validate(&NOTEBOOK, nb, "")?;
    unique_cell_ids(nb)
}

/// `Ok` when `v` is valid as a cell's `metadata.tags` (the schema's `metadata_tags`: unique
/// strings without commas); else the problem, under `at`.
pub fn tags(v: &Value, at: &str) -> Check {
    validate(&TAGS, v, at)
}

/// A notebook with a cell of each kind and an output of each type, valid as Cairn writes them
/// (a cell name ending in a newline included, which Python's patterns allow).
fn example() -> Value {
    json!({
        "nbformat": 4, "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}, "title": "t"},
        "cells": [
            {"id": "md-1", "cell_type": "markdown", "metadata": {}, "source": "# Title\n"},
            {"id": "code-1", "cell_type": "code", "metadata": {"tags": ["parameters"], "name": "x\n"},
             "source": ["x = 1\n", "x"], "execution_count": 1, "outputs": [
                {"output_type": "stream", "name": "stdout", "text": "hi\n"},
                {"output_type": "display_data", "data": {"text/plain": ["a", "b"], "application/vnd.x+json": {"k": 1}}, "metadata": {}},
                {"output_type": "execute_result", "execution_count": 1, "data": {"text/plain": "1"}, "metadata": {}},
                {"output_type": "error", "ename": "E", "evalue": "v", "traceback": ["t"]},
            ]},
            {"id": "raw-1", "cell_type": "raw", "metadata": {"format": "text/plain"}, "source": ""},
        ]
    })
}

/// What is changed in [`example`], how, and the JSON pointer the problem must name.
type Broken = (&'static str, fn(&mut Value), &'static str);

/// Changes that each make [`example`] invalid.
fn broken() -> Vec<Broken> {
    vec![
        ("nbformat 3", |nb| nb["nbformat"] = json!(3), "/nbformat"),
        ("nbformat_minor 4", |nb| nb["nbformat_minor"] = json!(4), "/nbformat_minor"),
        ("no metadata", |nb| drop(nb.as_object_mut().map(|m| m.remove("metadata"))), ""),
        ("a key the schema forbids", |nb| nb["extra"] = json!(1), ""),
        ("a title that is not a string", |nb| nb["metadata"]["title"] = json!(2024), "/metadata/title"),
        (
            "a code cell without outputs",
            |nb| drop(nb["cells"][1].as_object_mut().map(|m| m.remove("outputs"))),
            "/cells/1",
        ),
        ("a cell id with a space", |nb| nb["cells"][0]["id"] = json!("a b"), "/cells/0/id"),
        ("a cell id of 65 characters", |nb| nb["cells"][0]["id"] = json!("a".repeat(65)), "/cells/0/id"),
        ("a cell id ending in two newlines", |nb| nb["cells"][0]["id"] = json!("md-1\n\n"), "/cells/0/id"),
        ("a repeated cell id", |nb| nb["cells"][2]["id"] = json!("md-1"), "/cells/2/id"),
        ("a stream with an extra key", |nb| nb["cells"][1]["outputs"][0]["extra"] = json!(1), "/cells/1/outputs/0"),
        (
            "a text mime type holding a number",
            |nb| nb["cells"][1]["outputs"][1]["data"]["text/plain"] = json!(1),
            "/cells/1/outputs/1/data/text~1plain",
        ),
        ("a negative execution count", |nb| nb["cells"][1]["execution_count"] = json!(-1), "/cells/1/execution_count"),
        ("a tag with a comma", |nb| nb["cells"][1]["metadata"]["tags"] = json!(["a,b"]), "/cells/1/metadata/tags/0"),
        ("a name of two lines", |nb| nb["cells"][1]["metadata"]["name"] = json!("x\ny"), "/cells/1/metadata/name"),
        ("an unknown output type", |nb| nb["cells"][1]["outputs"][0]["output_type"] = json!("other"), "/cells/1"),
    ]
}

/// Panics unless [`check`] accepts a valid notebook and refuses each of a set of invalid ones,
/// naming where. The notebook target runs it once before it fuzzes, so a check that accepts
/// everything (a schema that did not load as meant, say) fails the CI smoke; the unit tests
/// below run it too.
pub fn self_check() {
    if let Err(problem) = check(&example()) {
        panic!("the nbformat check refuses a valid notebook: {problem}");
    }
    for (what, change, at) in broken() {
        let mut nb = example();
        change(&mut nb);
        match check(&nb) {
            Ok(()) => panic!("the nbformat check accepts a notebook with {what}"),
            Err(problem) if !problem.starts_with(&format!("{at}: ")) => {
                panic!("the nbformat check refuses a notebook with {what}, but not at `{at}`: {problem}")
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A valid notebook passes; each change that makes it invalid is refused, and the check names
    /// where (inside a cell or an output, not only the cell).
    #[test]
    fn invalid_notebooks_are_refused_naming_where() {
        self_check();
    }

    /// The patterns read as Python's `re.search` reads them: `$` also before one final newline.
    #[test]
    fn patterns_end_as_in_python() {
        let mut nb = example();
        nb["cells"][0]["id"] = json!("md-1\n");
        nb["cells"][1]["metadata"]["tags"] = json!(["a\n"]);
        assert_eq!(check(&nb), Ok(()));
    }

    #[test]
    fn tags_are_unique_strings_without_commas() {
        assert_eq!(tags(&json!(["a", "b"]), "tags"), Ok(()));
        for bad in [json!(["a", "a"]), json!(["a,b"]), json!([""]), json!([1]), json!("a")] {
            let problem = tags(&bad, "cell 0: tags").expect_err(&bad.to_string());
            assert!(problem.starts_with("cell 0: tags"), "{problem}");
        }
    }
}
