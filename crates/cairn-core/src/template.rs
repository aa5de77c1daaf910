//! Argument templates. A string that is exactly one `${…}` becomes the referenced JSON value; a
//! `${…}` inside a longer string is interpolated as text. `$${` writes a literal `${`.
//!
//! A reference is `input`, `input.<path>`, `steps.<id>.result`, `steps.<id>.result.<path>`, or
//! `steps.<id>.outputs.<name>` (a declared output of an ancestor step, as the caller resolves it:
//! a path to run with, a content digest to sign with); a path is dot-separated keys, with a
//! number indexing an array.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Root {
    Input,
    Step(String),
    /// A declared output of a step; the reference's path is empty.
    Output {
        step: String,
        name: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub root: Root,
    pub path: Vec<String>,
    /// The reference as written, without `${` `}`.
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("`{text}` at `{pointer}` has a `${{` with no closing `}}`")]
    Unclosed { pointer: String, text: String },
    #[error(
        "`${{{reference}}}` at `{pointer}` is not a reference; use `input.<path>`, `steps.<id>.result.<path>` or `steps.<id>.outputs.<name>`"
    )]
    BadReference { pointer: String, reference: String },
    #[error("`${{{reference}}}` at `{pointer}`: {reason}")]
    Unresolved { pointer: String, reference: String, reason: String },
}

enum Piece<'a> {
    Text(std::borrow::Cow<'a, str>),
    Ref(Reference),
}

fn parse_reference(inner: &str, pointer: &str) -> Result<Reference, TemplateError> {
    let bad = || TemplateError::BadReference { pointer: pointer.to_string(), reference: inner.to_string() };
    let segs: Vec<&str> = inner.trim().split('.').collect();
    let valid_seg = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !segs.iter().all(|s| valid_seg(s)) {
        return Err(bad());
    }
    let (root, rest) = match segs.as_slice() {
        ["input", rest @ ..] => (Root::Input, rest),
        ["steps", id, "result", rest @ ..] => (Root::Step(id.to_string()), rest),
        ["steps", id, "outputs", name] => (Root::Output { step: id.to_string(), name: name.to_string() }, &[][..]),
        _ => return Err(bad()),
    };
    Ok(Reference { root, path: rest.iter().map(|s| s.to_string()).collect(), text: inner.trim().to_string() })
}

fn parse_pieces<'a>(s: &'a str, pointer: &str) -> Result<Vec<Piece<'a>>, TemplateError> {
    let mut pieces = Vec::new();
    let mut rest = s;
    let mut text = String::new();
    while let Some(at) = rest.find("${") {
        if at > 0 && rest.as_bytes()[at - 1] == b'$' {
            // `$${` is an escaped literal `${`.
            text.push_str(&rest[..at - 1]);
            text.push_str("${");
            rest = &rest[at + 2..];
            continue;
        }
        text.push_str(&rest[..at]);
        let Some(close) = rest[at + 2..].find('}') else {
            return Err(TemplateError::Unclosed { pointer: pointer.to_string(), text: s.to_string() });
        };
        if !text.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut text).into()));
        }
        pieces.push(Piece::Ref(parse_reference(&rest[at + 2..at + 2 + close], pointer)?));
        rest = &rest[at + 2 + close + 1..];
    }
    text.push_str(rest);
    if !text.is_empty() {
        pieces.push(Piece::Text(text.into()));
    }
    Ok(pieces)
}

fn walk(
    value: &Value,
    pointer: &mut String,
    f: &mut dyn FnMut(&str, &str) -> Result<(), TemplateError>,
) -> Result<(), TemplateError> {
    match value {
        Value::String(s) => f(pointer, s),
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let len = pointer.len();
                pointer.push_str(&format!("/{i}"));
                walk(v, pointer, f)?;
                pointer.truncate(len);
            }
            Ok(())
        }
        Value::Object(map) => {
            for (k, v) in map {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(k);
                walk(v, pointer, f)?;
                pointer.truncate(len);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Every reference in an argument tree, with the JSON pointer of the string that holds it.
pub fn references(args: &Value) -> Result<Vec<(String, Reference)>, TemplateError> {
    let mut out = Vec::new();
    walk(args, &mut String::new(), &mut |pointer, s| {
        if s.contains("${") {
            for piece in parse_pieces(s, pointer)? {
                if let Piece::Ref(r) = piece {
                    out.push((pointer.to_string(), r));
                }
            }
        }
        Ok(())
    })?;
    Ok(out)
}

/// Looks a path up in a value; `Err` names the first segment that is missing.
pub fn lookup<'v>(value: &'v Value, path: &[String]) -> Result<&'v Value, String> {
    let mut cur = value;
    for (i, seg) in path.iter().enumerate() {
        let next = match cur {
            Value::Object(map) => map.get(seg),
            Value::Array(items) => seg.parse::<usize>().ok().and_then(|n| items.get(n)),
            _ => None,
        };
        cur = next.ok_or_else(|| {
            let at = if i == 0 { "the top level".to_string() } else { format!("`{}`", path[..i].join(".")) };
            format!("there is no `{seg}` in {at}")
        })?;
    }
    Ok(cur)
}

fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        // Non-strings interpolate as their canonical JSON text, so the result is deterministic.
        other => crate::canonical::canonical_json(other).unwrap_or_else(|_| other.to_string()),
    }
}

/// What references resolve against: a completed upstream step's result, and one of its declared
/// outputs (a path, or a content digest: the caller's choice).
pub struct Upstream<'u, 'r> {
    pub result: &'u dyn Fn(&str) -> Option<&'r Value>,
    pub output: &'u dyn Fn(&str, &str) -> Option<Value>,
}

/// Resolves every template in `args`. `step_result` returns a completed upstream step's result;
/// a step that references outputs resolves with [`resolve_with`].
pub fn resolve<'r>(
    args: &Value,
    input: &Value,
    step_result: &dyn Fn(&str) -> Option<&'r Value>,
) -> Result<Value, TemplateError> {
    resolve_with(args, input, &Upstream { result: step_result, output: &|_, _| None })
}

/// Whether any template in `args` names a step's output.
pub fn names_outputs(args: &Value) -> bool {
    references(args).is_ok_and(|refs| refs.iter().any(|(_, r)| matches!(r.root, Root::Output { .. })))
}

/// Resolves every template in `args` against `input` and the upstream steps.
pub fn resolve_with(args: &Value, input: &Value, upstream: &Upstream<'_, '_>) -> Result<Value, TemplateError> {
    fn go(v: &Value, pointer: &mut String, input: &Value, upstream: &Upstream<'_, '_>) -> Result<Value, TemplateError> {
        match v {
            Value::String(s) if s.contains("${") => {
                let pieces = parse_pieces(s, pointer)?;
                let value_of = |r: &Reference| -> Result<Value, TemplateError> {
                    let unresolved = |reason: String| TemplateError::Unresolved {
                        pointer: pointer.clone(),
                        reference: r.text.clone(),
                        reason,
                    };
                    match &r.root {
                        Root::Input => lookup(input, &r.path)
                            .cloned()
                            .map_err(|e| unresolved(format!("the run input has no such field: {e}"))),
                        Root::Output { step, name } => (upstream.output)(step, name)
                            .ok_or_else(|| unresolved(format!("step `{step}` has no recorded output `{name}`"))),
                        Root::Step(id) => {
                            let result = (upstream.result)(id)
                                .ok_or_else(|| unresolved(format!("step `{id}` has no completed result")))?;
                            lookup(result, &r.path)
                                .cloned()
                                .map_err(|e| unresolved(format!("the result of step `{id}` has no such field: {e}")))
                        }
                    }
                };
                if let [Piece::Ref(r)] = pieces.as_slice() {
                    return value_of(r);
                }
                let mut out = String::new();
                for p in &pieces {
                    match p {
                        Piece::Text(t) => out.push_str(t),
                        Piece::Ref(r) => out.push_str(&as_text(&value_of(r)?)),
                    }
                }
                Ok(Value::String(out))
            }
            Value::String(s) => Ok(Value::String(s.clone())),
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let len = pointer.len();
                    pointer.push_str(&format!("/{i}"));
                    out.push(go(item, pointer, input, upstream)?);
                    pointer.truncate(len);
                }
                Ok(Value::Array(out))
            }
            Value::Object(map) => {
                let mut out = serde_json::Map::with_capacity(map.len());
                for (k, item) in map {
                    let len = pointer.len();
                    pointer.push('/');
                    pointer.push_str(k);
                    out.insert(k.clone(), go(item, pointer, input, upstream)?);
                    pointer.truncate(len);
                }
                Ok(Value::Object(out))
            }
            other => Ok(other.clone()),
        }
    }
    go(args, &mut String::new(), input, upstream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn a_result() -> &'static Value {
        static A: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
        A.get_or_init(|| json!({"n": 3, "list": [{"x": "deep"}], "s": "txt"}))
    }

    fn results(id: &str) -> Option<&'static Value> {
        (id == "a").then(a_result)
    }

    #[test]
    fn whole_string_reference_keeps_the_json_type() {
        let input = json!({"manifest": {"tests": ["t1", "t2"], "version": "2.4.0"}});
        let args = json!({"suite": "${input.manifest.tests}", "n": "${steps.a.result.n}", "all": "${steps.a.result}"});
        let out = resolve(&args, &input, &results).unwrap();
        assert_eq!(out, json!({"suite": ["t1", "t2"], "n": 3, "all": a_result()}));
    }

    #[test]
    fn embedded_references_interpolate_as_text() {
        let input = json!({"v": "2.4.0", "n": 7, "o": {"b": 1, "a": 2}});
        let args = json!(["v${input.v}-${steps.a.result.list.0.x}", "n=${input.n} ${input.o}", "lit $${input.v}"]);
        let out = resolve(&args, &input, &results).unwrap();
        assert_eq!(out, json!(["v2.4.0-deep", "n=7 {\"a\":2,\"b\":1}", "lit ${input.v}"]));
    }

    #[test]
    fn errors_name_the_pointer_and_the_missing_segment() {
        let err =
            resolve(&json!({"x": {"y": "${input.manifest.tets}"}}), &json!({"manifest": {}}), &results).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`${input.manifest.tets}` at `/x/y`: the run input has no such field: there is no `tets` in `manifest`"
        );
        let err = references(&json!(["${input.a"])).unwrap_err();
        assert!(matches!(err, TemplateError::Unclosed { .. }));
        let err = references(&json!({"k": "${steps.a.output}"})).unwrap_err();
        assert!(err.to_string().contains("is not a reference"), "{err}");
        let err = resolve(&json!("${steps.b.result}"), &json!({}), &results).unwrap_err();
        assert!(err.to_string().contains("step `b` has no completed result"));
    }

    #[test]
    fn references_are_listed_with_their_pointers() {
        let refs = references(&json!({"a": ["x ${input.p} ${steps.s1.result.q}"], "b": 1})).unwrap();
        assert_eq!(refs.len(), 2);
        assert_eq!(refs[0].0, "/a/0");
        assert_eq!(refs[1].1.root, Root::Step("s1".into()));
        assert_eq!(refs[1].1.path, vec!["q".to_string()]);
    }

    proptest! {
        /// Strings without `${` are returned unchanged, whatever else they contain.
        #[test]
        fn plain_strings_are_untouched(s in "[^$]*|.*\\$[^{]?.*") {
            prop_assume!(!s.contains("${"));
            let out = resolve(&json!({"k": s.clone()}), &json!({}), &|_| None).unwrap();
            prop_assert_eq!(out, json!({"k": s}));
        }

        /// A whole-string input reference resolves to exactly the referenced value.
        #[test]
        fn whole_reference_is_identity(key in "[a-z]{1,8}", n in any::<i32>(), s in ".*") {
            let input = json!({key.clone(): {"n": n, "s": s.clone()}});
            let out = resolve(&json!([format!("${{input.{key}.n}}"), format!("${{input.{key}.s}}")]), &input, &|_| None).unwrap();
            prop_assert_eq!(out, json!([n, s]));
        }
    }
}
