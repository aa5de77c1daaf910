//! RFC 8785 (JCS) canonical JSON and the SHA-256 helpers every hash in Cairn goes through.
//!
//! `serde_json_canonicalizer` silently rounds integers above 2^53 to the nearest double, which
//! would make two different inputs hash the same; such numbers are rejected before hashing.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The largest integer a JSON number can carry without loss through an IEEE double.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum CanonicalError {
    #[error("the number {number} at `{pointer}` is outside ±2^53 and cannot be hashed exactly; pass it as a string")]
    UnsafeInteger { pointer: String, number: String },
    #[error("could not serialise the value at `{pointer}` canonically: {reason}")]
    Serialise { pointer: String, reason: String },
}

/// The canonical (JCS) text of a JSON value.
pub fn canonical_json(value: &Value) -> Result<String, CanonicalError> {
    check_safe_numbers(value, &mut String::new())?;
    serde_json_canonicalizer::to_string(value)
        .map_err(|e| CanonicalError::Serialise { pointer: String::new(), reason: e.to_string() })
}

/// `sha256(JCS(value))` as lowercase hex.
pub fn hash_json(value: &Value) -> Result<String, CanonicalError> {
    Ok(sha256_hex(canonical_json(value)?.as_bytes()))
}

/// The first 12 characters of a hash, as messages show it. Cut on a character, not a byte: a
/// hash read from a plan file or a source run's row is whatever text is there.
pub fn short_hash(h: &str) -> &str {
    h.char_indices().nth(12).map_or(h, |(end, _)| &h[..end])
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character's boundary: where
/// text anyone wrote (a result, a log, an output) is cut to a size.
pub fn prefix_within(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// SHA-256 of bytes as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Rejects integers that JCS would round, and the doubles whose canonical text would read back
/// as such an integer: JCS prints a whole double below 10^21 as digits, and digits that fit a
/// 64-bit integer are read back as one, which is then refused; its canonical text would not be
/// a fixed point. Other doubles are left alone: they read back as themselves.
pub fn check_safe_numbers(value: &Value, pointer: &mut String) -> Result<(), CanonicalError> {
    first_bad_number(value, pointer, &|n| match (n.as_u64(), n.as_i64(), n.as_f64()) {
        (Some(u), _, _) => u > MAX_SAFE_INTEGER,
        (None, Some(i), _) => i.unsigned_abs() > MAX_SAFE_INTEGER,
        (None, None, Some(f)) => {
            // 2^64 and -2^63: the bounds of what serde_json reads back as an integer.
            let reads_as_integer = (-9_223_372_036_854_775_808.0..18_446_744_073_709_551_616.0).contains(&f);
            f.fract() == 0.0 && f.abs() > MAX_SAFE_INTEGER as f64 && reads_as_integer
        }
        _ => false,
    })
}

/// Stricter than [`check_safe_numbers`], for a run's input: also refuses whole-number doubles of
/// magnitude 2^53 or more. JSON text like `1180591620717411303424` is read as such a double, and
/// two different literals can read as the same one, so their inputs would share an identity.
pub fn check_exact_numbers(value: &Value, pointer: &mut String) -> Result<(), CanonicalError> {
    check_safe_numbers(value, pointer)?;
    first_bad_number(value, pointer, &|n| {
        n.as_i64().is_none()
            && n.as_u64().is_none()
            && n.as_f64().is_some_and(|f| f.fract() == 0.0 && f.abs() >= (MAX_SAFE_INTEGER + 1) as f64)
    })
}

/// The first number (in document order) for which `bad` holds, as an error naming its pointer.
fn first_bad_number(
    value: &Value,
    pointer: &mut String,
    bad: &dyn Fn(&serde_json::Number) -> bool,
) -> Result<(), CanonicalError> {
    let mut found = None;
    visit_numbers(value, pointer, &mut |p, n| {
        if found.is_none() && bad(n) {
            found = Some(CanonicalError::UnsafeInteger { pointer: p.to_string(), number: n.to_string() });
        }
    });
    found.map_or(Ok(()), Err)
}

fn visit_numbers(value: &Value, pointer: &mut String, f: &mut dyn FnMut(&str, &serde_json::Number)) {
    match value {
        Value::Number(n) => f(pointer, n),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = pointer.len();
                pointer.push_str(&format!("/{i}"));
                visit_numbers(item, pointer, f);
                pointer.truncate(len);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&k.replace('~', "~0").replace('/', "~1"));
                visit_numbers(item, pointer, f);
                pointer.truncate(len);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn keys_are_sorted_by_utf16_and_whitespace_dropped() {
        let v = json!({"b": 1, "a": [true, null], "é": "x", "\u{1F600}": 2, "\u{FB33}": 3});
        // RFC 8785 sorts by UTF-16 code units: U+1F600 (surrogates D83D…) sorts before U+FB33.
        assert_eq!(
            canonical_json(&v).unwrap(),
            "{\"a\":[true,null],\"b\":1,\"é\":\"x\",\"\u{1F600}\":2,\"\u{FB33}\":3}"
        );
    }

    #[test]
    fn numbers_follow_ecmascript_formatting() {
        let v: Value = serde_json::from_str("[1.0, 1e21, 0.000001, -0.0, 1E3, 123456789012]").unwrap();
        assert_eq!(canonical_json(&v).unwrap(), "[1,1e+21,0.000001,0,1000,123456789012]");
    }

    #[test]
    fn unicode_strings_are_not_escaped_except_controls() {
        let v = json!("a\u{0001}\"\\/\u{00e9}\u{2028}");
        assert_eq!(canonical_json(&v).unwrap(), "\"a\\u0001\\\"\\\\/\u{00e9}\u{2028}\"");
    }

    #[test]
    fn integers_beyond_2_pow_53_are_rejected_with_their_pointer() {
        let v = json!({"a": [1, {"b": 9007199254740993u64}]});
        let err = canonical_json(&v).unwrap_err();
        assert_eq!(err, CanonicalError::UnsafeInteger { pointer: "/a/1/b".into(), number: "9007199254740993".into() });
        assert!(canonical_json(&json!(9007199254740991u64)).is_ok());
        assert!(canonical_json(&json!(-9007199254740992i64)).is_err());
    }

    /// The fixed point the canonical fuzz target asserts (`fuzz/fuzz_targets/canonical.rs`) did
    /// not hold: the double 1e16 was canonicalised as `10000000000000000`, which reads back as an
    /// integer beyond 2^53 and was then refused.
    #[test]
    fn whole_doubles_that_read_back_as_unsafe_integers_are_refused() {
        for text in ["1e16", "-9.2e18", "1.8e19", "9007199254740994.0"] {
            let v: Value = serde_json::from_str(text).unwrap();
            assert!(v.is_f64(), "{text}");
            let err = canonical_json(&v).unwrap_err();
            assert!(matches!(err, CanonicalError::UnsafeInteger { .. }), "{text}: {err}");
        }
        // Digits beyond 64 bits, an exponent, a fraction or a safe whole double read back as the
        // same double: a fixed point.
        for text in ["1.8446744073709552e19", "-1e19", "1e21", "1.5", "9007199254740991.0", "-4e15"] {
            let v: Value = serde_json::from_str(text).unwrap();
            let c = canonical_json(&v).unwrap();
            let back: Value = serde_json::from_str(&c).unwrap();
            assert_eq!(canonical_json(&back).unwrap(), c, "{text}");
        }
    }

    /// Found by the fuzzer (`fuzz/fuzz_targets/replay.rs`): a replay reason cut a recorded hash
    /// at byte 12, inside a character, and panicked.
    #[test]
    fn a_short_hash_is_cut_on_a_character() {
        assert_eq!(short_hash(&"ab".repeat(32)), "abababababab");
        assert_eq!(short_hash("abc"), "abc");
        assert_eq!(short_hash("ééééééééééééé"), "éééééééééééé");
        assert_eq!(short_hash("abcdefghi\u{c3f3f}xyz"), "abcdefghi\u{c3f3f}xy");
    }

    #[test]
    fn inputs_refuse_integers_read_as_doubles() {
        let v: Value = serde_json::from_str(r#"{"n": [1180591620717411303424]}"#).unwrap();
        let err = check_exact_numbers(&v, &mut String::new()).unwrap_err();
        assert!(matches!(err, CanonicalError::UnsafeInteger { ref pointer, .. } if pointer == "/n/0"), "{err}");
        let ok: Value = serde_json::from_str(r#"{"a": 1.5e300, "b": 12.0, "c": -3}"#).unwrap();
        assert!(check_exact_numbers(&ok, &mut String::new()).is_err_and(|e| e.to_string().contains("/a")));
        let fine: Value = serde_json::from_str(r#"{"a": 1.5, "b": 12.0, "c": -3, "d": 1e-300}"#).unwrap();
        assert!(check_exact_numbers(&fine, &mut String::new()).is_ok());
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-(MAX_SAFE_INTEGER as i64)..=(MAX_SAFE_INTEGER as i64)).prop_map(|i| json!(i)),
            // JCS prints an integral double of 2^53 or more as an integer, which is then refused on
            // re-reading; such doubles are out of the property's domain.
            any::<f64>()
                .prop_filter("finite, below 2^53", |f| f.is_finite() && f.abs() < 9.0e15)
                .prop_map(|f| json!(f)),
            ".*".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::btree_map(".*", inner, 0..8).prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn canonical_form_is_a_fixed_point_and_independent_of_key_order(v in arb_json()) {
            let c = canonical_json(&v).unwrap();
            let reparsed: Value = serde_json::from_str(&c).unwrap();
            prop_assert_eq!(canonical_json(&reparsed).unwrap(), c.clone());
            // Rebuild every object in reverse insertion order: the canonical text must not change.
            fn reverse(v: &Value) -> Value {
                match v {
                    Value::Object(m) => Value::Object(m.iter().rev().map(|(k, v)| (k.clone(), reverse(v))).collect()),
                    Value::Array(a) => Value::Array(a.iter().map(reverse).collect()),
                    other => other.clone(),
                }
            }
            prop_assert_eq!(canonical_json(&reverse(&v)).unwrap(), c);
        }
    }
}
