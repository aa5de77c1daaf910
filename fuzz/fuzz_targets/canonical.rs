//! Canonical JSON (RFC 8785) and hashing.
//!
//! Each input is read as JSON text (up to its first NUL byte) and drives a generator of JSON
//! values (numbers around 2^53 and beyond, whole and fractional doubles, Unicode keys). For
//! every value: its canonical text is a fixed point (read back and canonicalised again, it is the
//! same text), independent of key order, hashes as SHA-256 of that text, deterministically; an
//! integer beyond ±2^53 is refused, never rounded, with a pointer to that very number; and a value
//! with no such number is never refused.
#![no_main]

use arbitrary::Unstructured;
use cairn_core::canonical::{CanonicalError, MAX_SAFE_INTEGER, canonical_json, check_exact_numbers, hash_json};
use cairn_fuzz::{json, reversed, sha256_hex, split_input};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const WORDS: [&str; 8] = ["a", "b", "é", "\u{1F600}", "\u{FB33}", "~", "/", "\u{7f}"];

fuzz_target!(|data: &[u8]| {
    let (text, rest) = split_input(data);
    if let Ok(v) = serde_json::from_str::<Value>(&text) {
        check(&v);
    }
    let mut u = Unstructured::new(rest);
    if let Ok(v) = json(&mut u, &WORDS, 4) {
        check(&v);
    }
});

/// Whether JCS would print `n` as an integer that reads back beyond ±2^53 (the refusal's reason):
/// an integer out of range, or a whole double beyond 2^53 whose digits (JCS prints digits below
/// 10^21) fit a 64-bit integer, which is how they read back.
fn unsafe_number(n: &serde_json::Number) -> bool {
    match (n.as_u64(), n.as_i64(), n.as_f64()) {
        (Some(u), _, _) => u > MAX_SAFE_INTEGER,
        (None, Some(i), _) => i.unsigned_abs() > MAX_SAFE_INTEGER,
        // A whole double JCS prints as digits that read back as a 64-bit integer.
        (None, None, Some(f)) => {
            f.fract() == 0.0
                && f.abs() > MAX_SAFE_INTEGER as f64
                && ((f > 0.0 && f < 2f64.powi(64)) || (f < 0.0 && f >= -(2f64.powi(63))))
        }
        _ => false,
    }
}

fn any_unsafe(v: &Value) -> bool {
    match v {
        Value::Number(n) => unsafe_number(n),
        Value::Array(a) => a.iter().any(any_unsafe),
        Value::Object(m) => m.values().any(any_unsafe),
        _ => false,
    }
}

fn check(v: &Value) {
    match canonical_json(v) {
        Ok(c) => {
            assert!(!any_unsafe(v), "a number beyond 2^53 was canonicalised (rounded?): {v} -> {c}");
            let back: Value =
                serde_json::from_str(&c).unwrap_or_else(|e| panic!("canonical text {c:?} does not parse: {e}"));
            assert_eq!(canonical_json(&back).as_ref(), Ok(&c), "not a fixed point: {v}");
            assert_eq!(canonical_json(&reversed(v)).as_ref(), Ok(&c), "depends on key order: {v}");
            assert!(!c.contains('\n'), "a raw newline in {c:?}");
            let h = hash_json(v).expect("hashes what it canonicalises");
            assert_eq!(h, sha256_hex(c.as_bytes()));
            assert_eq!(hash_json(&back).as_ref(), Ok(&h));
        }
        Err(CanonicalError::UnsafeInteger { pointer, number }) => {
            let at = v.pointer(&pointer).unwrap_or_else(|| panic!("refused at `{pointer}`, which is not in {v}"));
            let Value::Number(n) = at else { panic!("refused at `{pointer}`, which holds {at}") };
            assert!(unsafe_number(n), "refused the safe number {n} at `{pointer}`");
            assert_eq!(number, n.to_string());
            assert!(hash_json(v).is_err());
            assert!(check_exact_numbers(v, &mut String::new()).is_err(), "an input would accept {v}");
        }
        Err(e) => panic!("{e} for {v}"),
    }
}
