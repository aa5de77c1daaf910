//! The HTTP API's page, from the OpenAPI document the daemon serves at `GET /openapi.json`:
//! every operation by tag, what it needs, takes and answers, and every schema it names.

use std::collections::BTreeMap;

use serde_json::Value;
use utoipa::OpenApi;

use super::{cell, code, first_sentence, header, slug, table, text};

const METHODS: [&str; 7] = ["get", "put", "post", "delete", "options", "head", "patch"];

pub(super) fn page() -> String {
    let doc = serde_json::to_value(crate::api::ApiDoc::openapi()).unwrap_or_default();
    let mut out = header("HTTP API", "the daemon's OpenAPI document (`GET /openapi.json`)");
    out.push_str(&text(doc["info"]["description"].as_str().unwrap_or("")));
    out.push_str(
        "\n\nThe daemon listens on loopback only; `cairn daemon status` prints its address. Bodies are JSON. \
         A request that only reads (`GET`) needs a token allowed to read, such as the Viewer token; any other \
         needs the Operator token or a principal granted a role that allows it. Every error answers with the \
         body [ErrorBody](#schema-errorbody): `{\"error\": {\"code\", \"message\"}}`, its `code` one of \
         [the error codes](codes.md#error-codes). The OpenAPI 3.1 document itself is `GET /openapi.json`.\n\n",
    );
    let mut by_tag: BTreeMap<String, Vec<(String, String, &Value)>> = BTreeMap::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for method in METHODS {
            let Some(op) = item.get(method) else { continue };
            let tag = op["tags"][0].as_str().unwrap_or("other").to_string();
            by_tag.entry(tag).or_default().push((method.to_uppercase(), path.clone(), op));
        }
    }
    out.push_str("## Contents\n\n");
    for (tag, ops) in &by_tag {
        out.push_str(&format!("- [{tag}](#{})\n", slug(&format!("tag {tag}"))));
        for (method, path, op) in ops {
            let summary = op["summary"].as_str().unwrap_or("");
            out.push_str(&format!(
                "  - [`{method} {path}`](#{}): {}\n",
                anchor(method, path, op),
                first_sentence(summary)
            ));
        }
    }
    out.push_str("- [Schemas](#schemas)\n");
    for (tag, ops) in &by_tag {
        out.push_str(&format!("\n## {tag} {{#{}}}\n", slug(&format!("tag {tag}"))));
        for (method, path, op) in ops {
            operation(&mut out, method, path, op);
        }
    }
    schemas(&mut out, &doc["components"]["schemas"]);
    out
}

/// An operation's anchor: its operationId when it has one.
fn anchor(method: &str, path: &str, op: &Value) -> String {
    match op["operationId"].as_str() {
        Some(id) => slug(&format!("op {id}")),
        None => slug(&format!("op {method} {path}")),
    }
}

fn operation(out: &mut String, method: &str, path: &str, op: &Value) {
    out.push_str(&format!("\n### `{method} {path}` {{#{}}}\n\n", anchor(method, path, op)));
    for part in ["summary", "description"] {
        if let Some(t) = op[part].as_str().filter(|t| !t.is_empty()) {
            out.push_str(&text(t));
            out.push_str("\n\n");
        }
    }
    let needs_token = op["security"].as_array().is_some_and(|s| !s.is_empty());
    let access = match (needs_token, crate::api::is_read(method)) {
        (false, _) => "no token.",
        (true, true) => "a token allowed to read (the Viewer token suffices).",
        (true, false) => "a change: the Operator token, or a principal granted a role that allows it.",
    };
    out.push_str(&format!("**Access:** {access}\n\n"));
    let params: Vec<Vec<String>> = op["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            vec![
                code(p["name"].as_str().unwrap_or("")),
                p["in"].as_str().unwrap_or("").to_string(),
                type_of(&p["schema"]),
                if p["required"].as_bool() == Some(true) { "yes".into() } else { String::new() },
                cell(p["description"].as_str().unwrap_or("")),
            ]
        })
        .collect();
    if !params.is_empty() {
        out.push_str("**Parameters**\n\n");
        out.push_str(&table(&["Name", "In", "Type", "Required", "Meaning"], &params));
        out.push('\n');
    }
    if let Some(body) = op["requestBody"].as_object() {
        let required = if body.get("required").and_then(Value::as_bool) == Some(true) { "" } else { " (optional)" };
        out.push_str(&format!("**Request body**{required}: {}\n\n", contents(&body["content"])));
    }
    let responses: Vec<Vec<String>> = op["responses"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(status, r)| {
            vec![format!("{status}"), cell(r["description"].as_str().unwrap_or("")), contents(&r["content"])]
        })
        .collect();
    out.push_str("**Responses**\n\n");
    out.push_str(&table(&["Status", "Meaning", "Body"], &responses));
}

/// What a body's contents are: each media type with its schema.
fn contents(content: &Value) -> String {
    let parts: Vec<String> = content
        .as_object()
        .into_iter()
        .flatten()
        .map(|(media, c)| match c.get("schema") {
            Some(s) => format!("{}: {}", code(media), type_of(s)),
            None => code(media),
        })
        .collect();
    parts.join("; ")
}

/// A schema's type in a few words, its named schemas linked.
fn type_of(s: &Value) -> String {
    type_in(s, &|name| format!("[{name}](#{})", schema_anchor(name)))
}

/// A schema's type in a few words, each named schema it refers to written by `named`.
pub(super) fn type_in(s: &Value, named: &dyn Fn(&str) -> String) -> String {
    let type_of = |s: &Value| type_in(s, named);
    if let Some(r) = s["$ref"].as_str() {
        return named(r.rsplit('/').next().unwrap_or(r));
    }
    for combo in ["oneOf", "anyOf"] {
        if let Some(all) = s[combo].as_array() {
            let kinds: Vec<String> = all.iter().map(type_of).collect();
            return kinds.join(" or ");
        }
    }
    if let Some(all) = s["allOf"].as_array() {
        return all.iter().map(type_of).collect::<Vec<_>>().join(" and ");
    }
    if let Some(values) = s["enum"].as_array() {
        let values: Vec<String> =
            values.iter().map(|v| code(v.as_str().map_or(v.to_string(), str::to_string).as_str())).collect();
        return format!("one of {}", values.join(", "));
    }
    let kinds: Vec<&str> = match &s["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let words: Vec<String> = kinds
        .iter()
        .map(|k| match *k {
            "array" => format!("array of {}", type_of(&s["items"])),
            "object" if s["additionalProperties"].is_object() => {
                format!("map of {}", type_of(&s["additionalProperties"]))
            }
            "integer" | "number" | "string" => match s["format"].as_str() {
                Some(f) => format!("{k} ({f})"),
                None => k.to_string(),
            },
            other => other.to_string(),
        })
        .collect();
    if words.is_empty() { "any".into() } else { words.join(" or ") }
}

fn schema_anchor(name: &str) -> String {
    format!("schema-{}", slug(name))
}

/// Every named schema, by name: its fields, or what it is.
fn schemas(out: &mut String, all: &Value) {
    out.push_str("\n## Schemas {#schemas}\n\n");
    let sorted: BTreeMap<&String, &Value> = all.as_object().into_iter().flatten().collect();
    let names: Vec<String> = sorted.keys().map(|n| format!("[{n}](#{})", schema_anchor(n))).collect();
    out.push_str(&names.join(" · "));
    out.push('\n');
    for (name, s) in sorted {
        out.push_str(&format!("\n### {name} {{#{}}}\n\n", schema_anchor(name)));
        if let Some(d) = s["description"].as_str() {
            out.push_str(&text(d));
            out.push_str("\n\n");
        }
        out.push_str(&fields(s, &|name| format!("[{name}](#{})", schema_anchor(name))));
    }
}

/// A schema's fields as a table, or, for one without fields, its type; the variants of a
/// `oneOf` each in turn.
pub(super) fn fields(s: &Value, named: &dyn Fn(&str) -> String) -> String {
    let type_of = |s: &Value| type_in(s, named);
    if let Some(props) = s["properties"].as_object() {
        let required: Vec<&str> = s["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let rows: Vec<Vec<String>> = props
            .iter()
            .map(|(name, p)| {
                vec![
                    code(name),
                    type_of(p),
                    if required.contains(&name.as_str()) { "yes".into() } else { String::new() },
                    cell(p["description"].as_str().unwrap_or("")),
                ]
            })
            .collect();
        return table(&["Field", "Type", "Required", "Meaning"], &rows);
    }
    if let Some(variants) = s["oneOf"].as_array().filter(|v| v.iter().any(|v| v["properties"].is_object())) {
        let mut out = String::from("One of:\n\n");
        for v in variants {
            let about = v["description"].as_str().map(|d| format!(": {}", text(d))).unwrap_or_default();
            if v["properties"].is_object() {
                out.push_str(&format!("- an object{about}\n\n"));
                out.push_str(&fields(v, named).lines().map(|l| format!("  {l}\n")).collect::<String>());
                out.push('\n');
            } else {
                out.push_str(&format!("- {}{about}\n\n", type_of(v)));
            }
        }
        return out;
    }
    format!("Type: {}\n", type_of(s))
}
