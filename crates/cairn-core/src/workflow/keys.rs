//! Every key of the workflow file, with its type, default and meaning: the book's reference page
//! of the file is generated from this table, and a test holds it to the parser's own types (each
//! `Raw*` struct's serde fields), so a key the parser gains or loses fails the test until the
//! table says so.

use super::{DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT_SECS, MAX_MAX_ATTEMPTS, MAX_TIMEOUT_SECS};
use crate::status::{CauseKind, Outcome};
use crate::validator::Op;

/// One key of one table of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// The table it sits in, as written in the file: `[workflow]`, `[tools.<name>]`, `[[steps]]`,
    /// `[[validator.rules]]`, or `(top level)`.
    pub table: &'static str,
    pub key: &'static str,
    /// Its TOML type.
    pub kind: &'static str,
    /// `None`: the key is required; otherwise what holds when it is absent.
    pub default: Option<String>,
    pub meaning: String,
}

/// The tables in the order a file reads them.
pub const TABLES: [&str; 5] = ["(top level)", "[workflow]", "[tools.<name>]", "[[steps]]", "[[validator.rules]]"];

/// Every key of every table, in the order of [`TABLES`].
pub fn keys() -> Vec<Key> {
    [top(), header(), tool(), step(), rule()].concat()
}

fn key(table: usize, key: &'static str, kind: &'static str, default: Option<&str>, meaning: &str) -> Key {
    Key { table: TABLES[table], key, kind, default: default.map(str::to_string), meaning: meaning.to_string() }
}

/// The top level's tables.
fn top() -> Vec<Key> {
    vec![
        key(0, "workflow", "table", None, "The workflow's name, version and description."),
        key(0, "tools", "table of tables", Some("no tools"), "The tools its steps run, each `[tools.<name>]`."),
        key(0, "steps", "array of tables", Some("no steps"), "The steps of the DAG, each `[[steps]]`."),
        key(0, "validator", "table", Some("no rules"), "The readiness checklist: its `[[validator.rules]]`."),
    ]
}

/// `[workflow]`.
fn header() -> Vec<Key> {
    vec![
        key(
            1,
            "name",
            "string",
            None,
            "The workflow's name: lowercase letters, digits and `-`, starting with a letter or digit.",
        ),
        key(
            1,
            "version",
            "string",
            None,
            "Its version, a semantic version (`1.2.0`); a registered name@version never changes.",
        ),
        key(1, "description", "string", Some("empty"), "What it does, for a person."),
        key(
            1,
            "input_schema",
            "string",
            Some("any input"),
            "A JSON Schema (draft 2020-12) file, relative to the workflow folder, that every run's input must satisfy.",
        ),
    ]
}

/// `[tools.<name>]`.
fn tool() -> Vec<Key> {
    let timeout = DEFAULT_TIMEOUT_SECS.to_string();
    vec![
        key(
            2,
            "kind",
            "string",
            Some("`process`"),
            "`process` (a command: JSON args on stdin, a JSON result on stdout), or a pipeline controller: `snakemake` or `nextflow`, whose steps name the pipeline in their args.",
        ),
        key(
            2,
            "command",
            "array of strings",
            Some("required for `process`; none for a controller"),
            "The argv; relative paths name files inside the workflow folder (`[\"python3\", \"tools/check.py\"]`).",
        ),
        key(
            2,
            "timeout_secs",
            "integer",
            Some(&timeout),
            &format!(
                "An attempt's time limit in seconds, 1 to {MAX_TIMEOUT_SECS}: past it the attempt is stopped, TIMED_OUT."
            ),
        ),
        key(2, "version", "string", Some("none"), "The tool's own version, part of what a step's result is keyed on."),
        key(
            2,
            "env",
            "array of strings",
            Some("none"),
            "Environment variables passed through from the daemon; the rest is scrubbed.",
        ),
        key(
            2,
            "secrets",
            "array of strings",
            Some("none"),
            "Secrets given in its environment at launch, by name; their values come from the secret provider and are never recorded.",
        ),
        key(
            2,
            "outputs",
            "table of strings",
            Some("none"),
            "The files it produces, by name: a path relative to the step's directory (`plots/`, with a trailing `/`, a folder); recorded as artifacts with their SHA-256.",
        ),
    ]
}

/// `[[steps]]`.
fn step() -> Vec<Key> {
    let max_attempts = DEFAULT_MAX_ATTEMPTS.to_string();
    vec![
        key(3, "id", "string", None, "The step's id, unique in the workflow: letters, digits, `_` and `-`."),
        key(3, "tool", "string", None, "The `[tools.<name>]` it runs."),
        key(
            3,
            "args",
            "table",
            Some("`{}`"),
            "The JSON the tool receives; strings may hold `${input.<path>}` and `${steps.<id>.<path>}` templates, filled from the run's input and earlier results.",
        ),
        key(
            3,
            "needs",
            "array of strings",
            Some("`[]`"),
            "The steps that must complete before this one (the DAG's edges).",
        ),
        key(
            3,
            "max_attempts",
            "integer",
            Some(&max_attempts),
            &format!("How many attempts the step may take, 1 to {MAX_MAX_ATTEMPTS}."),
        ),
        key(
            3,
            "retry_on",
            "array of strings",
            Some("`[\"TIMED_OUT\"]`"),
            &format!("The outcomes its attempts are retried on: {}.", retry_on()),
        ),
        key(
            3,
            "outputs",
            "table of strings",
            Some("the tool's"),
            "Outputs of this step beyond (or, by name, instead of) its tool's; not for a pipeline step, whose outputs are every file its pipeline writes.",
        ),
    ]
}

/// `[[validator.rules]]`.
fn rule() -> Vec<Key> {
    vec![
        key(4, "id", "string", None, "The rule's id, named in its finding."),
        key(4, "step", "string", None, "The step whose result it reads."),
        key(4, "pointer", "string", None, "A JSON Pointer into that result (`/failed`)."),
        key(4, "op", "string", None, &format!("The comparison: {}.", ops())),
        key(4, "value", "any", Some("none"), "What the op compares with; only the ops that compare take one."),
        key(
            4,
            "finding",
            "string",
            None,
            "The sentence reported when the rule does not hold: the run is then BLOCKED.",
        ),
    ]
}

/// What `retry_on` takes: every outcome class but COMPLETED, and every cause of a FAILED attempt.
fn retry_on() -> String {
    let outcomes = Outcome::ALL.iter().filter(|o| **o != Outcome::Completed).map(|o| format!("`{}`", o.as_str()));
    let outcomes: Vec<String> = outcomes.collect();
    let causes: Vec<String> = CauseKind::ALL.iter().map(|c| format!("`{}`", c.as_str())).collect();
    format!("the outcome classes {}; or the cause of a FAILED attempt: {}", outcomes.join(", "), causes.join(", "))
}

/// The validator's ops, as the parser reads them.
fn ops() -> String {
    Op::NAMES.split(' ').map(|o| format!("`{o}`")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde::de::{self, Deserialize, Visitor};

    use super::super::{RawFile, RawMeta, RawRule, RawStep, RawTool, RawValidator};
    use super::*;

    /// The field names serde's derive gave `T`: it hands them to `deserialize_struct`, which this
    /// deserializer records and then refuses.
    fn fields<'de, T: Deserialize<'de>>() -> BTreeSet<&'static str> {
        struct Fields(Vec<&'static str>);
        #[derive(Debug)]
        struct Stop;
        impl std::fmt::Display for Stop {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("stop")
            }
        }
        impl std::error::Error for Stop {}
        impl de::Error for Stop {
            fn custom<M: std::fmt::Display>(_: M) -> Stop {
                Stop
            }
        }
        impl<'de> de::Deserializer<'de> for &mut Fields {
            type Error = Stop;
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
                Err(Stop)
            }
            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Stop> {
                self.0.extend(fields);
                Err(Stop)
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
                unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
            }
        }
        let mut f = Fields(Vec::new());
        assert!(T::deserialize(&mut f).is_err());
        f.0.into_iter().collect()
    }

    fn documented(table: &str) -> BTreeSet<&'static str> {
        keys().into_iter().filter(|k| k.table == table).map(|k| k.key).collect()
    }

    #[test]
    fn the_table_has_every_key_the_parser_reads_and_no_other() {
        assert_eq!(documented(TABLES[0]), fields::<RawFile>());
        assert_eq!(documented(TABLES[1]), fields::<RawMeta>());
        assert_eq!(documented(TABLES[2]), fields::<RawTool>());
        assert_eq!(documented(TABLES[3]), fields::<RawStep>());
        assert_eq!(fields::<RawValidator>(), BTreeSet::from(["rules"]));
        assert_eq!(documented(TABLES[4]), fields::<RawRule>());
        let all = keys();
        let unique: BTreeSet<_> = all.iter().map(|k| (k.table, k.key)).collect();
        assert_eq!(unique.len(), all.len(), "a key is listed twice");
        assert!(all.iter().all(|k| !k.meaning.is_empty()), "a key without a meaning");
    }
}
