//! The validator over arbitrary rules and results.
//!
//! Rules (any op, pointers into the result or beside it, any value) are evaluated against
//! arbitrary step results: evaluation never panics and its errors read as words; findings come in
//! rule order with what the pointer held; and the ops behave as documented: `exists`/`absent`,
//! `truthy`/`falsy`, `eq`/`ne`, `lt`/`ge` and `gt`/`le` are complementary (one of each pair holds,
//! or both refuse to compare), `eq` holds of the value observed, `in` is `eq` to any element, and
//! a rule on a step without a result is an error naming both.
#![no_main]

use arbitrary::{Result, Unstructured};
use cairn_core::validator::{Op, Rule, ValidatorError, evaluate};
use cairn_fuzz::{json, segment, text};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const WORDS: [&str; 8] = ["a", "b", "0", "1", "é", "~0", "~1", "\u{1F600}"];
const OPS: [Op; 11] =
    [Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge, Op::In, Op::Exists, Op::Absent, Op::Truthy, Op::Falsy];

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});

/// A pointer into `v` (mostly one that is there), or beside it.
fn pointer(u: &mut Unstructured<'_>, v: &Value) -> Result<String> {
    let mut p = String::new();
    let mut cur = Some(v);
    for _ in 0..u.int_in_range(0..=3)? {
        let seg = segment(u, cur, |u| text(u, &WORDS, 2))?;
        cur = match cur {
            Some(Value::Object(m)) => m.get(&seg),
            Some(Value::Array(a)) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
            _ => None,
        };
        p.push('/');
        p.push_str(&seg.replace('~', "~0").replace('/', "~1"));
    }
    if u.ratio(1, 10)? {
        p = text(u, &WORDS, 3)?; // Not a JSON Pointer at all.
    }
    Ok(p)
}

fn rule(id: &str, op: Op, pointer: &str, value: Option<Value>) -> Rule {
    Rule { id: id.into(), step: "s".into(), pointer: pointer.into(), op, value, finding: format!("{id} failed") }
}

/// Whether `rule` holds of `result`: `Ok(true)` without a finding, `Ok(false)` with one.
fn holds(rule: &Rule, result: &Value) -> std::result::Result<bool, ValidatorError> {
    let r = rule.clone();
    let found = evaluate(std::slice::from_ref(&r), &|_| Some(result.clone()))?;
    if let Some(f) = found.first() {
        assert_eq!((f.rule.as_str(), f.pointer.as_str()), (rule.id.as_str(), rule.pointer.as_str()));
        assert_eq!(f.observed.as_ref(), result.pointer(&rule.pointer));
    }
    Ok(found.is_empty())
}

fn complementary(a: Op, b: Op, p: &str, value: &Option<Value>, result: &Value) {
    let x = holds(&rule("a", a, p, value.clone()), result);
    let y = holds(&rule("b", b, p, value.clone()), result);
    match (&x, &y) {
        (Ok(x), Ok(y)) => assert_ne!(x, y, "{a:?} and {b:?} both {x} at {p} of {result} for {value:?}"),
        (Err(e), Err(f)) => {
            assert!(!e.to_string().is_empty() && !f.to_string().is_empty());
        }
        _ => panic!("{a:?} gave {x:?} but {b:?} gave {y:?} at {p} of {result} for {value:?}"),
    }
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let result = json(u, &WORDS, 3)?;
    let p = pointer(u, &result)?;
    let value = if u.ratio(1, 3)? {
        result.pointer(&p).cloned()
    } else if u.arbitrary()? {
        Some(json(u, &WORDS, 2)?)
    } else {
        None
    };

    // Arbitrary rules, in order, some on a step with no result.
    let mut rules = Vec::new();
    for k in 0..u.int_in_range(0..=4)? {
        let mut r = rule(
            &format!("r{k}"),
            *u.choose(&OPS)?,
            &pointer(u, &result)?,
            if u.arbitrary()? { Some(json(u, &WORDS, 2)?) } else { None },
        );
        if u.ratio(1, 8)? {
            r.step = "missing".into();
        }
        rules.push(r);
    }
    match evaluate(&rules, &|step| (step == "s").then(|| result.clone())) {
        Ok(found) => {
            let ids: Vec<&str> = found.iter().map(|f| f.rule.as_str()).collect();
            let mut in_order = rules.iter().map(|r| r.id.as_str()).filter(|id| ids.contains(id));
            assert!(ids.iter().all(|id| in_order.next() == Some(*id)), "findings out of rule order");
            assert!(rules.iter().all(|r| r.step == "s"));
        }
        Err(ValidatorError::MissingResult { rule, step }) => {
            assert_eq!(step, "missing");
            let e = ValidatorError::MissingResult { rule: rule.clone(), step }.to_string();
            assert!(e.contains(&rule) && e.contains("missing"), "{e}");
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }

    // The documented pairs.
    complementary(Op::Exists, Op::Absent, &p, &None, &result);
    complementary(Op::Truthy, Op::Falsy, &p, &None, &result);
    if value.is_some() {
        complementary(Op::Eq, Op::Ne, &p, &value, &result);
        // Orderings of what is there; an ordering of nothing holds for no op (below).
        if result.pointer(&p).is_some() {
            complementary(Op::Lt, Op::Ge, &p, &value, &result);
            complementary(Op::Gt, Op::Le, &p, &value, &result);
        }
        let v = value.clone().unwrap_or(Value::Null);
        assert_eq!(
            holds(&rule("in", Op::In, &p, Some(Value::Array(vec![v.clone()]))), &result).ok(),
            holds(&rule("eq", Op::Eq, &p, Some(v)), &result).ok(),
            "`in [v]` is not `eq v`"
        );
    }
    if let Some(observed) = result.pointer(&p) {
        assert_eq!(holds(&rule("eq", Op::Eq, &p, Some(observed.clone())), &result).ok(), Some(true));
        assert_eq!(holds(&rule("exists", Op::Exists, &p, None), &result).ok(), Some(true));
    } else {
        // An ordering of nothing holds for no value: a finding, not an error.
        assert_eq!(holds(&rule("lt", Op::Lt, &p, Some(Value::from(1))), &result).ok(), Some(false));
    }
    // `in` needs an array; a value-taking op without one is an error naming the rule.
    match holds(&rule("in-scalar", Op::In, &p, Some(Value::from(1))), &result) {
        Err(e) => assert!(e.to_string().contains("in-scalar")),
        Ok(h) => panic!("`in` with a scalar value gave {h}"),
    }
    match holds(&rule("no-value", Op::Gt, &p, None), &result) {
        Err(e) => assert!(e.to_string().contains("no-value")),
        Ok(h) => panic!("`gt` without a value gave {h}"),
    }
    Ok(())
}
