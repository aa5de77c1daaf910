//! Argument templates. A string that is exactly one `${…}` becomes the referenced JSON value; a
//! `${…}` inside a longer string is interpolated as text. `$${` writes a literal `${`.
//!
//! A reference is `input`, `input.<path>`, `steps.<id>.result`, `steps.<id>.result.<path>`, or
//! `steps.<id>.outputs.<name>` (a declared output of an ancestor step, as the caller resolves it:
//! a path to run with, a content digest to sign with); a path is dot-separated keys, with a
//! number indexing an array.

use std::fmt::Write as _;

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

/// A reference's root, borrowed from the text that holds it: what a check needs of a reference
/// without building the owned [`Reference`] (a workflow of 100,000 steps checks every one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootView<'a> {
    Input,
    Step(&'a str),
    Output { step: &'a str, name: &'a str },
}

/// A reference as written, borrowed: its root and its text without `${` `}` (trimmed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReferenceView<'a> {
    pub root: RootView<'a>,
    pub text: &'a str,
}

/// The one definition of a reference's syntax: its root, and the rest of its path (dot-separated
/// segments, or empty). Bytes, not `str::split`, since every reference of every step is read.
fn split_reference<'a>(inner: &'a str, pointer: &str) -> Result<(ReferenceView<'a>, &'a str), TemplateError> {
    let bad = || TemplateError::BadReference { pointer: pointer.to_string(), reference: inner.to_string() };
    let text = inner.trim();
    // Every segment non-empty and of `[A-Za-z0-9_-]`.
    let mut segment_len = 0;
    for &c in text.as_bytes() {
        if c == b'.' {
            if segment_len == 0 {
                return Err(bad());
            }
            segment_len = 0;
        } else if c.is_ascii_alphanumeric() || c == b'_' || c == b'-' {
            segment_len += 1;
        } else {
            return Err(bad());
        }
    }
    if segment_len == 0 {
        return Err(bad());
    }
    let mut rest = text;
    let mut next = || {
        let seg;
        (seg, rest) = match rest.bytes().position(|c| c == b'.') {
            Some(dot) => (&rest[..dot], &rest[dot + 1..]),
            None => (rest, ""),
        };
        (!seg.is_empty()).then_some(seg)
    };
    let root = match next() {
        Some("input") => RootView::Input,
        Some("steps") => match (next(), next()) {
            (Some(id), Some("result")) => RootView::Step(id),
            (Some(id), Some("outputs")) => match (next(), next()) {
                (Some(name), None) => RootView::Output { step: id, name },
                _ => return Err(bad()),
            },
            _ => return Err(bad()),
        },
        _ => return Err(bad()),
    };
    Ok((ReferenceView { root, text }, rest))
}

fn parse_reference(inner: &str, pointer: &str) -> Result<Reference, TemplateError> {
    let (view, rest) = split_reference(inner, pointer)?;
    let root = match view.root {
        RootView::Input => Root::Input,
        RootView::Step(id) => Root::Step(id.to_string()),
        RootView::Output { step, name } => Root::Output { step: step.to_string(), name: name.to_string() },
    };
    let path = if rest.is_empty() { Vec::new() } else { rest.split('.').map(str::to_string).collect() };
    Ok(Reference { root, path, text: view.text.to_string() })
}

/// Where the first `${` of `s` starts: `str::find` with a two-byte pattern sets up a substring
/// searcher each call, and every string of every step's args is asked.
fn find_open(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut from = 0;
    while let Some(at) = b[from..].iter().position(|&c| c == b'$') {
        let at = from + at;
        if b.get(at + 1) == Some(&b'{') {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Calls `on_ref` with the inside of every `${…}` of `s`, in order, skipping `$${` escapes; the
/// scan of [`parse_pieces`] without building its text pieces.
fn scan_references<'a>(
    s: &'a str,
    pointer: &str,
    mut on_ref: impl FnMut(&'a str) -> Result<(), TemplateError>,
) -> Result<(), TemplateError> {
    let mut rest = s;
    while let Some(at) = find_open(rest) {
        if at > 0 && rest.as_bytes()[at - 1] == b'$' {
            rest = &rest[at + 2..];
            continue;
        }
        let Some(close) = rest[at + 2..].find('}') else {
            return Err(TemplateError::Unclosed { pointer: pointer.to_string(), text: s.to_string() });
        };
        on_ref(&rest[at + 2..at + 2 + close])?;
        rest = &rest[at + 2 + close + 1..];
    }
    Ok(())
}

fn parse_pieces<'a>(s: &'a str, pointer: &str) -> Result<Vec<Piece<'a>>, TemplateError> {
    let mut pieces = Vec::new();
    let mut rest = s;
    let mut text = String::new();
    while let Some(at) = find_open(rest) {
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

fn walk<'v>(
    value: &'v Value,
    pointer: &mut String,
    f: &mut dyn FnMut(&str, &'v str) -> Result<(), TemplateError>,
) -> Result<(), TemplateError> {
    match value {
        Value::String(s) => f(pointer, s),
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let len = pointer.len();
                let _ = write!(pointer, "/{i}");
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
        scan_references(s, pointer, |inner| {
            out.push((pointer.to_string(), parse_reference(inner, pointer)?));
            Ok(())
        })
    })?;
    Ok(out)
}

/// [`references`], borrowed from `args` and told to `f` as they are found, with the pointer of
/// the string that holds each: no owned copy of a reference or its pointer. On an error, `f` has
/// been told the references before it.
pub fn for_each_reference<'v>(
    args: &'v Value,
    f: &mut dyn FnMut(&str, ReferenceView<'v>),
) -> Result<(), TemplateError> {
    walk(args, &mut String::new(), &mut |pointer, s| {
        scan_references(s, pointer, |inner| {
            f(pointer, split_reference(inner, pointer)?.0);
            Ok(())
        })
    })
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
            Value::String(s) if find_open(s).is_some() => {
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
                    let _ = write!(pointer, "/{i}");
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

    /// `references` as it was written before the borrowed scan: every `Piece::Ref` of
    /// `parse_pieces`, kept as the reference the scan must match.
    fn references_via_pieces(args: &Value) -> Result<Vec<(String, Reference)>, TemplateError> {
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

    fn view_of(r: &Reference) -> ReferenceView<'_> {
        let root = match &r.root {
            Root::Input => RootView::Input,
            Root::Step(id) => RootView::Step(id),
            Root::Output { step, name } => RootView::Output { step, name },
        };
        ReferenceView { root, text: &r.text }
    }

    proptest! {
        /// The scan finds what `parse_pieces` finds, with the same pointers and the same first
        /// error, and the borrowed views are the owned references' roots and texts.
        #[test]
        fn the_reference_scan_matches_parse_pieces(
            parts in prop::collection::vec(prop::sample::select(vec![
                "$", "{", "}", "${", "$${", ".", " ", "x", "input", "steps", "s1", "result", "outputs", "a-b", "é", "0",
            ]), 0..14),
            nested in any::<bool>(),
        ) {
            let s: String = parts.concat();
            let args = if nested { json!({"k": [1, s.clone(), {"m": s}]}) } else { json!({"k": s}) };
            let expected = references_via_pieces(&args);
            prop_assert_eq!(references(&args), expected.clone());
            let mut seen = Vec::new();
            let views = for_each_reference(&args, &mut |p, r| seen.push((p.to_string(), r)));
            match (&expected, &views) {
                (Ok(e), Ok(())) => {
                    let e: Vec<(&str, ReferenceView<'_>)> = e.iter().map(|(p, r)| (p.as_str(), view_of(r))).collect();
                    let v: Vec<(&str, ReferenceView<'_>)> = seen.iter().map(|(p, r)| (p.as_str(), *r)).collect();
                    prop_assert_eq!(e, v);
                }
                (Err(e), Err(v)) => prop_assert_eq!(e, v),
                _ => prop_assert!(false, "{:?} vs {:?}", expected, views),
            }
        }

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
