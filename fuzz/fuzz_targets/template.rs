//! Template resolution against arbitrary JSON.
//!
//! Two readings of each input. Arbitrary argument trees (strings full of `$`, `{`, `}`, `.` and
//! reference words) against an arbitrary input and step results: resolution never panics, the
//! listed references agree with the borrowed scan, a string without `${` comes back unchanged,
//! the shape of the tree is kept, and resolution is deterministic. And argument strings built from
//! known pieces (text, escapes, references that exist or not), whose resolution is computed here
//! independently, by the rules in `template.rs`'s module doc, and must be exactly what
//! `resolve_with` gives.
#![no_main]

use std::collections::HashMap;

use arbitrary::{Result, Unstructured};
use cairn_core::canonical::canonical_json;
use cairn_core::template::{self, Upstream, for_each_reference, lookup, references, resolve_with};
use cairn_fuzz::{json, segment, text};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

const WORDS: [&str; 16] =
    ["${", "$${", "$", "{", "}", ".", " ", "input", "steps", "result", "outputs", "a", "b", "0", "x-y", "é"];
const KEYS: [&str; 5] = ["a", "b", "0", "x-y", "list"];
const STEPS: [&str; 3] = ["s1", "s2", "gone"];

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let _ = arbitrary_trees(&mut u);
    let _ = modelled(&mut u);
});

/// Step results for `s1` and `s2` (not `gone`), and declared outputs named `report`.
fn results(u: &mut Unstructured<'_>) -> Result<HashMap<String, Value>> {
    let mut out = HashMap::new();
    for id in &STEPS[..2] {
        out.insert(id.to_string(), json(u, &KEYS, 3)?);
    }
    Ok(out)
}

fn output(step: &str, name: &str) -> Option<Value> {
    (step != "gone" && name == "report").then(|| Value::String(format!("/run/steps/{step}/report")))
}

/// The shapes agree: same kinds, same keys, same lengths; a string without `${` unchanged.
fn same_shape(args: &Value, out: &Value) {
    match (args, out) {
        (Value::String(s), o) if !s.contains("${") => assert_eq!(o, &Value::String(s.clone())),
        (Value::String(_), _) => {}
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len());
            a.iter().zip(b).for_each(|(x, y)| same_shape(x, y));
        }
        (Value::Object(a), Value::Object(b)) => {
            assert!(a.keys().eq(b.keys()), "keys changed: {a:?} -> {b:?}");
            a.values().zip(b.values()).for_each(|(x, y)| same_shape(x, y));
        }
        (a, b) => assert_eq!(a, b, "a non-string changed"),
    }
}

fn arbitrary_trees(u: &mut Unstructured<'_>) -> Result<()> {
    let args = json(u, &WORDS, 3)?;
    let input = json(u, &KEYS, 3)?;
    let results = results(u)?;
    let upstream = Upstream { result: &|id| results.get(id), output: &output };

    let listed = references(&args);
    let mut seen = Vec::new();
    let scanned = for_each_reference(&args, &mut |p, r| seen.push((p.to_string(), r.text.to_string())));
    match (&listed, &scanned) {
        (Ok(l), Ok(())) => {
            let l: Vec<(String, String)> = l.iter().map(|(p, r)| (p.clone(), r.text.clone())).collect();
            assert_eq!(l, seen, "references and the scan disagree on {args}");
        }
        (Err(a), Err(b)) => assert_eq!(a, b),
        _ => panic!("references {listed:?} but the scan {scanned:?} on {args}"),
    }
    let resolved = resolve_with(&args, &input, &upstream);
    if let Ok(out) = &resolved {
        assert!(listed.is_ok(), "resolved {args} whose references do not parse: {listed:?}");
        same_shape(&args, out);
    }
    if let Err(e) = &resolved {
        let text = e.to_string();
        assert!(text.contains(" at `"), "an error that does not say where: {text}");
    }
    assert_eq!(resolve_with(&args, &input, &upstream), resolved, "resolution is not deterministic");
    // Without a `${`, the tree is returned as it is (whatever else its strings hold).
    if !args.to_string().contains("${") {
        assert_eq!(resolved.as_ref(), Ok(&args));
    }
    Ok(())
}

/// One piece of a modelled argument string.
enum Piece {
    /// Text without `$`.
    Text(String),
    /// `$${`, a literal `${`.
    Escape,
    /// A reference, as written, and what it resolves to (`None`: it does not).
    Ref(String, Option<Value>),
}

/// A path of 0 to 3 segments into `v`, mostly one that exists; with the value there.
fn path(u: &mut Unstructured<'_>, v: &Value) -> Result<(Vec<String>, Option<Value>)> {
    let mut segs = Vec::new();
    let mut cur = Some(v);
    for _ in 0..u.int_in_range(0..=3)? {
        let seg = segment(u, cur, |u| Ok(u.choose(&KEYS)?.to_string()))?;
        // A key that is not a path segment cannot be written in a reference.
        if seg.is_empty() || !seg.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            break;
        }
        cur = cur.and_then(|c| lookup(c, std::slice::from_ref(&seg)).ok());
        segs.push(seg);
    }
    Ok((segs, cur.cloned()))
}

fn piece(u: &mut Unstructured<'_>, input: &Value, results: &HashMap<String, Value>) -> Result<Piece> {
    Ok(match u.int_in_range(0..=5)? {
        // Never empty: an empty text is no piece at all.
        0 | 1 => Piece::Text(format!("{}.", text(u, &["a", " ", "}", "{", ".", "x", "é", "\n"], 4)?.replace('$', ""))),
        2 => Piece::Escape,
        3 => {
            let (segs, value) = path(u, input)?;
            let written = if segs.is_empty() { "input".to_string() } else { format!("input.{}", segs.join(".")) };
            Piece::Ref(written, value)
        }
        4 => {
            let step = *u.choose(&STEPS)?;
            let (segs, value) = match results.get(step) {
                Some(r) => path(u, r)?,
                None => (vec![], None),
            };
            let mut written = format!("steps.{step}.result");
            for s in &segs {
                written.push('.');
                written.push_str(s);
            }
            Piece::Ref(written, value)
        }
        _ => {
            let step = *u.choose(&STEPS)?;
            let name = *u.choose(&["report", "other"])?;
            Piece::Ref(format!("steps.{step}.outputs.{name}"), output(step, name))
        }
    })
}

/// Interpolated text of a value: a string as it is, anything else as its canonical JSON.
fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => canonical_json(other).unwrap_or_else(|_| other.to_string()),
    }
}

fn modelled(u: &mut Unstructured<'_>) -> Result<()> {
    let input = json(u, &KEYS, 3)?;
    let results = results(u)?;
    let upstream = Upstream { result: &|id| results.get(id), output: &output };
    let mut args = Map::new();
    let mut expected = Map::new();
    let mut resolvable = true;
    for k in 0..u.int_in_range(1..=4)? {
        let pieces: Vec<Piece> =
            (0..u.int_in_range(0..=4)?).map(|_| piece(u, &input, &results)).collect::<Result<_>>()?;
        let mut written = String::new();
        let mut want = String::new();
        for p in &pieces {
            match p {
                Piece::Text(t) => {
                    written.push_str(t);
                    want.push_str(t);
                }
                Piece::Escape => {
                    written.push_str("$${");
                    want.push_str("${");
                }
                Piece::Ref(r, v) => {
                    // Spaces inside the braces are allowed.
                    let pad = if u.ratio(1, 5)? { " " } else { "" };
                    written.push_str(&format!("${{{pad}{r}{pad}}}"));
                    match v {
                        Some(v) => want.push_str(&as_text(v)),
                        None => resolvable = false,
                    }
                }
            }
        }
        let value = match pieces.as_slice() {
            [Piece::Ref(_, v)] => v.clone().unwrap_or(Value::Null),
            _ => Value::String(want),
        };
        args.insert(format!("k{k}"), Value::String(written));
        expected.insert(format!("k{k}"), value);
    }
    let args = Value::Object(args);
    let got = resolve_with(&args, &input, &upstream);
    if resolvable {
        assert_eq!(got, Ok(Value::Object(expected)), "args {args}\ninput {input}\nresults {results:?}");
        let refs = references(&args).expect("the references of resolved args parse");
        assert!(refs.iter().all(|(p, _)| p.starts_with("/k")));
    } else {
        match got {
            Err(template::TemplateError::Unresolved { .. }) => {}
            other => panic!("an unresolvable reference gave {other:?}\nargs {args}\ninput {input}"),
        }
    }
    Ok(())
}
