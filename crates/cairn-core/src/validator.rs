//! The readiness validator: a pure, flat checklist over completed step results. No findings is
//! READY; findings are BLOCKED; an exception (a rule that cannot be evaluated) makes the run FAILED.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::status::UnknownName;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    Exists,
    Absent,
    Truthy,
    Falsy,
}

impl Op {
    pub const NAMES: &'static str = "eq ne lt le gt ge in exists absent truthy falsy";

    pub fn parse(s: &str) -> Result<Op, UnknownName> {
        Ok(match s {
            "eq" => Op::Eq,
            "ne" => Op::Ne,
            "lt" => Op::Lt,
            "le" => Op::Le,
            "gt" => Op::Gt,
            "ge" => Op::Ge,
            "in" => Op::In,
            "exists" => Op::Exists,
            "absent" => Op::Absent,
            "truthy" => Op::Truthy,
            "falsy" => Op::Falsy,
            _ => {
                return Err(UnknownName {
                    kind: "a validator op",
                    given: s.into(),
                    expected: Self::NAMES.replace(' ', ", "),
                });
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Eq => "eq",
            Op::Ne => "ne",
            Op::Lt => "lt",
            Op::Le => "le",
            Op::Gt => "gt",
            Op::Ge => "ge",
            Op::In => "in",
            Op::Exists => "exists",
            Op::Absent => "absent",
            Op::Truthy => "truthy",
            Op::Falsy => "falsy",
        }
    }

    /// Whether the op compares against a `value` (the others only look at the pointer).
    pub fn takes_value(self) -> bool {
        !matches!(self, Op::Exists | Op::Absent | Op::Truthy | Op::Falsy)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub id: String,
    pub step: String,
    pub pointer: String,
    pub op: Op,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    pub finding: String,
}

/// A rule that did not hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub rule: String,
    pub step: String,
    pub pointer: String,
    pub finding: String,
    /// What the pointer held (absent when it held nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValidatorError {
    #[error("validator rule `{rule}` reads step `{step}`, which has no completed result")]
    MissingResult { rule: String, step: String },
    #[error(
        "validator rule `{rule}` cannot compare {observed} with {expected} using `{op}`; both must be numbers or both strings"
    )]
    Incomparable { rule: String, op: String, observed: String, expected: String },
    #[error("validator rule `{rule}` uses `in`, whose `value` must be an array")]
    InNeedsArray { rule: String },
    #[error("validator rule `{rule}` uses `{op}` and needs a `value`")]
    MissingValue { rule: String, op: String },
}

fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn describe(v: &Value) -> String {
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    let mut text = v.to_string();
    if text.len() > 60 {
        // On a character's boundary: a result's text is anyone's Unicode.
        text.truncate(crate::canonical::prefix_within(&text, 57).len());
        text.push_str("...");
    }
    format!("{kind} ({text})")
}

/// Whether one rule holds against an observed value (None: the pointer is absent).
fn holds(rule: &Rule, observed: Option<&Value>) -> Result<bool, ValidatorError> {
    let expected = || {
        rule.value
            .as_ref()
            .ok_or_else(|| ValidatorError::MissingValue { rule: rule.id.clone(), op: rule.op.as_str().into() })
    };
    Ok(match rule.op {
        Op::Exists => observed.is_some(),
        Op::Absent => observed.is_none(),
        Op::Truthy => observed.is_some_and(truthy),
        Op::Falsy => !observed.is_some_and(truthy),
        Op::Eq => {
            let e = expected()?;
            observed.is_some_and(|o| json_eq(o, e))
        }
        Op::Ne => {
            let e = expected()?;
            !observed.is_some_and(|o| json_eq(o, e))
        }
        Op::In => {
            let Value::Array(options) = expected()? else {
                return Err(ValidatorError::InNeedsArray { rule: rule.id.clone() });
            };
            observed.is_some_and(|o| options.iter().any(|x| json_eq(o, x)))
        }
        Op::Lt | Op::Le | Op::Gt | Op::Ge => {
            let e = expected()?;
            // An absent value cannot satisfy an ordering: that is a finding, not an exception.
            let Some(o) = observed else { return Ok(false) };
            let ord = match (o, e) {
                (Value::Number(a), Value::Number(b)) => a.as_f64().zip(b.as_f64()).and_then(|(a, b)| a.partial_cmp(&b)),
                (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
                _ => None,
            };
            let Some(ord) = ord else {
                return Err(ValidatorError::Incomparable {
                    rule: rule.id.clone(),
                    op: rule.op.as_str().into(),
                    observed: describe(o),
                    expected: describe(e),
                });
            };
            match rule.op {
                Op::Lt => ord.is_lt(),
                Op::Le => ord.is_le(),
                Op::Gt => ord.is_gt(),
                _ => ord.is_ge(),
            }
        }
    })
}

/// Evaluates every rule in order; `result` returns a step's completed result.
pub fn evaluate(rules: &[Rule], result: &dyn Fn(&str) -> Option<Value>) -> Result<Vec<Finding>, ValidatorError> {
    let mut findings = Vec::new();
    for rule in rules {
        let value = result(&rule.step)
            .ok_or_else(|| ValidatorError::MissingResult { rule: rule.id.clone(), step: rule.step.clone() })?;
        let observed = value.pointer(&rule.pointer);
        if !holds(rule, observed)? {
            findings.push(Finding {
                rule: rule.id.clone(),
                step: rule.step.clone(),
                pointer: rule.pointer.clone(),
                finding: rule.finding.clone(),
                observed: observed.cloned(),
            });
        }
    }
    Ok(findings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(op: &str, pointer: &str, value: Option<Value>) -> Rule {
        Rule {
            id: format!("r-{op}"),
            step: "s".into(),
            pointer: pointer.into(),
            op: Op::parse(op).unwrap(),
            value,
            finding: "f".into(),
        }
    }

    fn check(r: Rule) -> Result<bool, ValidatorError> {
        let result = json!({"failed": 0, "ratio": 0.5, "name": "beta", "ok": true, "list": [], "tags": ["a"]});
        evaluate(&[r], &|s| (s == "s").then(|| result.clone())).map(|f| f.is_empty())
    }

    #[test]
    fn every_op_holds_and_fails_as_documented() {
        let cases: Vec<(&str, &str, Option<Value>, bool)> = vec![
            ("eq", "/failed", Some(json!(0)), true),
            ("eq", "/failed", Some(json!(0.0)), true),
            ("eq", "/failed", Some(json!(1)), false),
            ("eq", "/missing", Some(json!(0)), false),
            ("ne", "/failed", Some(json!(1)), true),
            ("ne", "/missing", Some(json!(1)), true),
            ("lt", "/ratio", Some(json!(1)), true),
            ("le", "/ratio", Some(json!(0.5)), true),
            ("gt", "/ratio", Some(json!(0.5)), false),
            ("ge", "/name", Some(json!("alpha")), true),
            ("lt", "/missing", Some(json!(1)), false),
            ("in", "/name", Some(json!(["alpha", "beta"])), true),
            ("in", "/name", Some(json!(["gamma"])), false),
            ("exists", "/list", None, true),
            ("exists", "/nope", None, false),
            ("absent", "/nope", None, true),
            ("truthy", "/ok", None, true),
            ("truthy", "/list", None, false),
            ("falsy", "/failed", None, true),
            ("falsy", "/tags", None, false),
            ("falsy", "/nope", None, true),
        ];
        for (op, pointer, value, expect) in cases {
            assert_eq!(check(rule(op, pointer, value.clone())).unwrap(), expect, "{op} {pointer} {value:?}");
        }
    }

    #[test]
    fn exceptions_are_errors_not_findings() {
        assert!(matches!(check(rule("lt", "/name", Some(json!(3)))), Err(ValidatorError::Incomparable { .. })));
        assert!(matches!(check(rule("in", "/name", Some(json!("beta")))), Err(ValidatorError::InNeedsArray { .. })));
        assert!(matches!(check(rule("eq", "/name", None)), Err(ValidatorError::MissingValue { .. })));
        let r = Rule { step: "other".into(), ..rule("exists", "/x", None) };
        assert!(matches!(evaluate(&[r], &|_| None), Err(ValidatorError::MissingResult { .. })));
    }

    fn arb_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|i| json!(i)),
            (-1e6f64..1e6).prop_map(|f| json!(f)),
            "[a-c]{0,3}".prop_map(Value::String),
            prop::collection::vec(any::<i8>().prop_map(|i| json!(i)), 0..3).prop_map(Value::Array),
        ]
    }

    proptest::proptest! {
        /// Complementary ops never agree, and the checklist is a pure function of its inputs.
        #[test]
        fn complementary_ops_disagree(observed in proptest::option::of(arb_value()), value in arb_value()) {
            let result = match &observed { Some(v) => json!({"x": v}), None => json!({}) };
            let eval = |op: &str, v: Option<Value>| {
                let r = rule(op, "/x", v);
                evaluate(std::slice::from_ref(&r), &|_| Some(result.clone())).map(|f| f.is_empty())
            };
            let pairs = [("eq", "ne"), ("exists", "absent"), ("truthy", "falsy")];
            for (a, b) in pairs {
                let v = if a == "eq" { Some(value.clone()) } else { None };
                proptest::prop_assert_ne!(eval(a, v.clone()).unwrap(), eval(b, v).unwrap());
            }
            // For two numbers, lt and ge are complementary; otherwise ordering is an exception or a finding.
            if observed.as_ref().is_some_and(Value::is_number) && value.is_number() {
                proptest::prop_assert_ne!(eval("lt", Some(value.clone())).unwrap(), eval("ge", Some(value.clone())).unwrap());
            }
            proptest::prop_assert_eq!(eval("in", Some(json!([value.clone()]))).unwrap(), eval("eq", Some(value.clone())).unwrap());
        }
    }

    /// Found by the fuzzer (`fuzz/fuzz_targets/validator.rs`): an incomparable value whose text
    /// passed 60 bytes with a multi-byte character at the cut panicked instead of answering.
    #[test]
    fn an_incomparable_unicode_value_is_described_without_a_panic() {
        let observed = "é".repeat(40);
        let r = rule("lt", "/s", Some(json!(3)));
        let e = evaluate(&[r], &|_| Some(json!({"s": observed}))).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, ValidatorError::Incomparable { .. }), "{text}");
        assert!(text.contains("a string (\"éé") && text.contains("...)"), "{text}");
    }

    #[test]
    fn findings_carry_what_was_observed() {
        let f = evaluate(&[rule("eq", "/failed", Some(json!(0)))], &|_| Some(json!({"failed": 2}))).unwrap();
        assert_eq!(f[0].observed, Some(json!(2)));
        assert_eq!(f[0].finding, "f");
    }
}
