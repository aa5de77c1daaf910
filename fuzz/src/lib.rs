//! What Cairn's fuzz targets share: JSON values drawn from the fuzzer's bytes (biased towards the
//! shapes Cairn's parsers meet, and bounded so one input stays fast), the split of an input into a
//! document and the bytes that drive a generator, and the check of nbformat 4.5 through its
//! published JSON schema, so the notebook target needs no Python.

use arbitrary::{Result, Unstructured};
use serde_json::{Map, Number, Value};

pub mod nbformat;

/// `data` split at its first NUL byte: the text a parser reads (lossy UTF-8, so a seed file is
/// used as it is), and the bytes after it, which drive the target's generator.
pub fn split_input(data: &[u8]) -> (String, &[u8]) {
    match data.iter().position(|b| *b == 0) {
        Some(at) => (String::from_utf8_lossy(&data[..at]).into_owned(), &data[at + 1..]),
        None => (String::from_utf8_lossy(data).into_owned(), &[]),
    }
}

/// A string drawn from `words` (the pieces a parser reacts to) and short arbitrary runs.
pub fn text(u: &mut Unstructured<'_>, words: &[&str], max_pieces: usize) -> Result<String> {
    let n = u.int_in_range(0..=max_pieces)?;
    let mut s = String::new();
    for _ in 0..n {
        if u.ratio(3, 4)? {
            s.push_str(u.choose(words)?);
        } else {
            let c: char = u.arbitrary()?;
            s.push(c);
        }
    }
    Ok(s)
}

/// A JSON number: small and huge integers, 2^53 neighbours, whole and fractional doubles.
pub fn number(u: &mut Unstructured<'_>) -> Result<Value> {
    Ok(match u.int_in_range(0..=6)? {
        0 => Value::from(u.int_in_range(-1000i64..=1000)?),
        1 => Value::from(u.arbitrary::<i64>()?),
        2 => Value::from(u.arbitrary::<u64>()?),
        3 => {
            let near = cairn_core::canonical::MAX_SAFE_INTEGER as i64 + u.int_in_range(-2i64..=2)?;
            Value::from(if u.arbitrary()? { near } else { -near })
        }
        4 => Number::from_f64(u.arbitrary::<f64>()?).map_or(Value::Null, Value::Number),
        5 => Number::from_f64(u.int_in_range(-100_000i64..=100_000)? as f64 / 8.0).map_or(Value::Null, Value::Number),
        _ => Number::from_f64((u.int_in_range(0u32..=80)? as f64).exp2() * if u.arbitrary()? { 1.0 } else { -1.0 })
            .map_or(Value::Null, Value::Number),
    })
}

/// A JSON value of at most `depth` levels whose strings and keys come from `words` (and
/// arbitrary characters).
pub fn json(u: &mut Unstructured<'_>, words: &[&str], depth: u32) -> Result<Value> {
    let kind = if depth == 0 { u.int_in_range(0..=3)? } else { u.int_in_range(0..=5)? };
    Ok(match kind {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => number(u)?,
        3 => Value::String(text(u, words, 6)?),
        4 => {
            let n = u.int_in_range(0..=4)?;
            Value::Array((0..n).map(|_| json(u, words, depth - 1)).collect::<Result<_>>()?)
        }
        _ => {
            let n = u.int_in_range(0..=4)?;
            let mut map = Map::new();
            for _ in 0..n {
                map.insert(text(u, words, 2)?, json(u, words, depth - 1)?);
            }
            Value::Object(map)
        }
    })
}

/// The next segment of a path into `cur`: mostly one of its keys or indices (so the path leads
/// somewhere), else what `other` makes (so it sometimes leads nowhere).
pub fn segment(
    u: &mut Unstructured<'_>,
    cur: Option<&Value>,
    other: impl FnOnce(&mut Unstructured<'_>) -> Result<String>,
) -> Result<String> {
    match cur {
        Some(Value::Object(m)) if !m.is_empty() && u.ratio(4, 5)? => {
            let keys: Vec<&String> = m.keys().collect();
            Ok((*u.choose(&keys)?).clone())
        }
        Some(Value::Array(a)) if !a.is_empty() && u.ratio(4, 5)? => Ok(u.int_in_range(0..=a.len() - 1)?.to_string()),
        _ => other(u),
    }
}

/// Every object of `v` rebuilt with its keys in reverse order: what canonical JSON must not see.
pub fn reversed(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().rev().map(|(k, v)| (k.clone(), reversed(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(reversed).collect()),
        other => other.clone(),
    }
}

/// SHA-256 of bytes as lowercase hex, computed here rather than by the code under test.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}
