//! The workflow file (`workflow.toml`): parsing into the model and every check that needs no IO.
//! Errors name the file, line, step and field, and say how to fix them.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toml::Spanned;
use toml::de::{DeArray, DeTable, DeValue, ValueDeserializer};

use crate::artifact::OutputDecl;
use crate::dag::{Dag, DagError};
use crate::status::RetryOn;

use crate::validator::Rule;

pub mod keys;
mod sections;
mod streamed;

use sections::Checker;

pub const DEFAULT_TIMEOUT_SECS: u64 = 60;
pub const DEFAULT_MAX_ATTEMPTS: u32 = 2;
pub const MAX_MAX_ATTEMPTS: u32 = 100;
pub const MAX_TIMEOUT_SECS: u64 = 7 * 24 * 3600;

// What a tool is lives with the controllers it names; it is a word of the workflow file too.
pub use crate::controller::ToolKind;

/// A tool: a named executable contract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    pub name: String,
    #[serde(default, skip_serializing_if = "ToolKind::is_process")]
    pub kind: ToolKind,
    /// argv; relative paths name files inside the workflow folder. Empty for a controller kind.
    pub command: Vec<String>,
    pub timeout_secs: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Extra environment variables passed through; the rest is scrubbed.
    #[serde(default)]
    pub env: Vec<String>,
    /// The secrets it receives in its environment at launch, by name; their values come from a
    /// secret provider and are never recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// The files it produces, by name: a path relative to the step's directory (`plots/`, with a
    /// trailing `/`, a folder).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outputs: BTreeMap<String, String>,
}

impl ToolDef {
    /// A tool whose definition has a problem that leaves nothing to check of it (an unknown
    /// kind): known by name, so its steps do not also report it as unknown.
    fn unchecked(name: String) -> ToolDef {
        ToolDef {
            name,
            kind: ToolKind::Process,
            command: Vec::new(),
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            version: None,
            env: Vec::new(),
            secrets: Vec::new(),
            outputs: BTreeMap::new(),
        }
    }
}

/// A DAG node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepDef {
    pub id: String,
    pub tool: String,
    pub args: Value,
    pub needs: Vec<String>,
    pub max_attempts: u32,
    /// The outcome classes and failure causes its attempts are retried on (`TIMED_OUT` when
    /// absent).
    pub retry_on: Vec<RetryOn>,
    /// Outputs of this step beyond (or instead of, by name) its tool's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outputs: BTreeMap<String, String>,
    /// Line of the step's table in the workflow file, for messages.
    pub line: usize,
}

/// A parsed, structurally valid workflow definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowSpec {
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<String>,
    pub tools: BTreeMap<String, ToolDef>,
    pub steps: Vec<StepDef>,
    pub rules: Vec<Rule>,
}

impl WorkflowSpec {
    pub fn step(&self, id: &str) -> Option<&StepDef> {
        self.steps.iter().find(|s| s.id == id)
    }

    pub fn dag(&self) -> Result<Dag, DagError> {
        Dag::build(self.steps.iter().map(|s| (s.id.as_str(), s.needs.iter().map(String::as_str))))
    }

    pub fn reference(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }

    /// A step's declared outputs: its tool's, overridden and extended by its own, by name.
    pub fn outputs_of(&self, step: &StepDef) -> Vec<OutputDecl> {
        let mut all: BTreeMap<&String, &String> = BTreeMap::new();
        if let Some(tool) = self.tools.get(&step.tool) {
            all.extend(tool.outputs.iter());
        }
        all.extend(step.outputs.iter());
        // Checked when the workflow was parsed.
        all.into_iter().filter_map(|(name, path)| OutputDecl::parse(name, path).ok()).collect()
    }
}

const PIPELINE_OUTPUTS: &str = "a pipeline step's outputs are the files its pipeline creates or changes in its working copy, and Cairn records every one of them; remove `outputs`";

/// An error in a workflow file, located as precisely as the parser can.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct WorkflowError {
    pub file: String,
    pub line: Option<usize>,
    pub step: Option<String>,
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for WorkflowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        f.write_str(": ")?;
        match (&self.step, &self.field) {
            (Some(step), Some(field)) => write!(f, "step `{step}`, field `{field}`: ")?,
            (Some(step), None) => write!(f, "step `{step}`: ")?,
            (None, Some(field)) => write!(f, "field `{field}`: ")?,
            (None, None) => {}
        }
        f.write_str(&self.message)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    workflow: Spanned<RawMeta>,
    #[serde(default)]
    tools: BTreeMap<String, Spanned<RawTool>>,
    #[serde(default)]
    steps: Vec<Spanned<RawStep>>,
    #[serde(default)]
    validator: Option<RawValidator>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMeta {
    name: Spanned<String>,
    version: Spanned<String>,
    #[serde(default)]
    description: String,
    input_schema: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTool {
    kind: Option<Spanned<String>>,
    command: Option<Spanned<Vec<String>>>,
    timeout_secs: Option<Spanned<i64>>,
    version: Option<String>,
    #[serde(default)]
    env: Vec<String>,
    #[serde(default)]
    secrets: Vec<String>,
    #[serde(default)]
    outputs: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    id: Spanned<String>,
    tool: Spanned<String>,
    args: Option<Spanned<JsonValue>>,
    #[serde(default)]
    needs: Vec<String>,
    max_attempts: Option<Spanned<i64>>,
    retry_on: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    outputs: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawValidator {
    #[serde(default)]
    rules: Vec<Spanned<RawRule>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    id: Spanned<String>,
    step: Spanned<String>,
    pointer: Spanned<String>,
    op: Spanned<String>,
    value: Option<JsonValue>,
    finding: String,
}

fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// Step and tool ids are path and template segments: `[A-Za-z0-9_-]+`.
pub fn is_identifier(s: &str) -> bool {
    !s.is_empty() && s.len() <= 128 && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

fn finite(f: f64) -> Result<Value, String> {
    serde_json::Number::from_f64(f).map(Value::Number).ok_or_else(|| format!("{f} is not a finite number"))
}

/// The key under which the TOML deserializer hands a datetime to a visitor (a one-field map).
const TOML_DATETIME_KEY: &str = "$__toml_private_datetime";

/// A TOML value (a step's args, a rule's value) read straight into JSON: a workflow of 100,000
/// steps would otherwise build every step's args twice (a TOML tree, then its JSON). Datetimes
/// become their RFC 3339 text. A value JSON cannot hold (a non-finite float) is kept as the
/// problem to report, not a parse error, so every other problem of the file is still found.
#[derive(Debug)]
struct JsonValue(Result<Value, String>);

impl<'de> Deserialize<'de> for JsonValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> serde::de::Visitor<'de> for JsonVisitor {
    type Value = JsonValue;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a TOML value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<JsonValue, E> {
        Ok(JsonValue(Ok(Value::Bool(b))))
    }
    fn visit_i64<E>(self, i: i64) -> Result<JsonValue, E> {
        Ok(JsonValue(Ok(Value::from(i))))
    }
    fn visit_u64<E>(self, u: u64) -> Result<JsonValue, E> {
        Ok(JsonValue(Ok(Value::from(u))))
    }
    fn visit_f64<E>(self, f: f64) -> Result<JsonValue, E> {
        Ok(JsonValue(finite(f)))
    }
    fn visit_str<E>(self, s: &str) -> Result<JsonValue, E> {
        Ok(JsonValue(Ok(Value::String(s.to_string()))))
    }
    fn visit_string<E>(self, s: String) -> Result<JsonValue, E> {
        Ok(JsonValue(Ok(Value::String(s))))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<JsonValue, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        let mut problem = None;
        while let Some(JsonValue(item)) = seq.next_element()? {
            match item {
                Ok(v) => items.push(v),
                Err(e) => problem = problem.or(Some(e)),
            }
        }
        Ok(JsonValue(problem.map_or(Ok(Value::Array(items)), Err)))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<JsonValue, A::Error> {
        let mut out = serde_json::Map::new();
        let mut problem = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == TOML_DATETIME_KEY {
                // Its value is the datetime's text, which is what the JSON keeps.
                let text: String = map.next_value()?;
                return Ok(JsonValue(Ok(Value::String(text))));
            }
            match map.next_value::<JsonValue>()?.0 {
                Ok(v) => {
                    out.insert(key, v);
                }
                Err(e) => problem = problem.or(Some(e)),
            }
        }
        Ok(JsonValue(problem.map_or(Ok(Value::Object(out)), Err)))
    }
}

/// `T` deserialized by serde from a copy of one value of the tree, exactly as `toml::from_str`
/// deserializes it in place; `None` if serde refuses it (the whole file then goes through serde,
/// for its error).
fn by_serde<'de, T: Deserialize<'de>>(v: &Spanned<DeValue<'de>>) -> Option<T> {
    T::deserialize(ValueDeserializer::from(Spanned::new(v.span(), v.get_ref().clone()))).ok()
}

/// The [`RawFile`] serde would make of the tree, or `None` where this reading does not cover the
/// tree or serde would refuse it. The steps, a workflow's bulk, are read by hand; the workflow
/// table, the tools and the validator (a few entries each) by serde.
fn raw_file_from_tree(root: &DeTable<'_>) -> Option<RawFile> {
    let (mut workflow, mut tools, mut steps, mut validator) = (None, BTreeMap::new(), Vec::new(), None);
    // In the table's order, as serde visits it.
    for (key, value) in root.iter() {
        match key.get_ref().as_ref() {
            "workflow" => workflow = Some(by_serde(value)?),
            "tools" => tools = by_serde(value)?,
            "steps" => steps = raw_steps_from_tree(value)?,
            "validator" => validator = by_serde(value)?,
            _ => return None,
        }
    }
    Some(RawFile { workflow: workflow?, tools, steps, validator })
}

fn raw_steps_from_tree(value: &Spanned<DeValue<'_>>) -> Option<Vec<Spanned<RawStep>>> {
    let DeValue::Array(items) = value.get_ref() else { return None };
    let mut steps = Vec::with_capacity(items.len());
    for item in items.iter() {
        steps.push(Spanned::new(item.span(), raw_step_from_tree(item)?));
    }
    Some(steps)
}

/// A step of `id`, `tool`, `needs` and `args` by hand; one with any other key by serde.
fn raw_step_from_tree(item: &Spanned<DeValue<'_>>) -> Option<RawStep> {
    let DeValue::Table(table) = item.get_ref() else { return None };
    let (mut id, mut tool, mut needs, mut args) = (None, None, Vec::new(), None);
    for (key, value) in table.iter() {
        match key.get_ref().as_ref() {
            "id" => id = Some(Spanned::new(value.span(), value.get_ref().as_str()?.to_string())),
            "tool" => tool = Some(Spanned::new(value.span(), value.get_ref().as_str()?.to_string())),
            "needs" => needs = strings_from_tree(value.get_ref().as_array()?)?,
            "args" => args = Some(Spanned::new(value.span(), json_from_tree(value)?)),
            _ => return by_serde(item),
        }
    }
    Some(RawStep { id: id?, tool: tool?, args, needs, max_attempts: None, retry_on: None, outputs: BTreeMap::new() })
}

fn strings_from_tree(items: &DeArray<'_>) -> Option<Vec<String>> {
    items.iter().map(|v| v.get_ref().as_str().map(str::to_string)).collect()
}

/// What [`JsonVisitor`] makes of a value: strings, booleans, arrays and tables by hand, the other
/// scalars (whose conversions are the deserializer's) by serde.
fn json_from_tree(value: &Spanned<DeValue<'_>>) -> Option<JsonValue> {
    Some(JsonValue(match value.get_ref() {
        DeValue::String(s) => Ok(Value::String(s.to_string())),
        DeValue::Boolean(b) => Ok(Value::Bool(*b)),
        DeValue::Integer(_) | DeValue::Float(_) | DeValue::Datetime(_) => return by_serde(value),
        DeValue::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            let mut problem = None;
            for item in items.iter() {
                match json_from_tree(item)?.0 {
                    Ok(v) => out.push(v),
                    Err(e) => problem = problem.or(Some(e)),
                }
            }
            problem.map_or(Ok(Value::Array(out)), Err)
        }
        DeValue::Table(table) => {
            let mut out = serde_json::Map::with_capacity(table.len());
            let mut problem = None;
            for (key, item) in table.iter() {
                // A table with this key is what the visitor reads as a datetime.
                if key.get_ref() == TOML_DATETIME_KEY {
                    return by_serde(value);
                }
                match json_from_tree(item)?.0 {
                    Ok(v) => {
                        out.insert(key.get_ref().to_string(), v);
                    }
                    Err(e) => problem = problem.or(Some(e)),
                }
            }
            problem.map_or(Ok(Value::Object(out)), Err)
        }
    }))
}

struct Locator<'a> {
    file: &'a str,
    /// Byte offsets of every newline, so a line number is a binary search, not a scan: a
    /// workflow of 100,000 steps asks for 100,000 of them.
    newlines: Vec<usize>,
}

impl<'a> Locator<'a> {
    fn new(file: &'a str, text: &str) -> Self {
        // A vectorised search: a byte-at-a-time filter was a twentieth of the parse.
        Locator { file, newlines: memchr::memchr_iter(b'\n', text.as_bytes()).collect() }
    }

    fn line(&self, offset: usize) -> usize {
        self.newlines.partition_point(|&nl| nl < offset) + 1
    }

    fn err(
        &self,
        offset: Option<usize>,
        step: Option<&str>,
        field: Option<&str>,
        message: impl Into<String>,
    ) -> WorkflowError {
        WorkflowError {
            file: self.file.to_string(),
            line: offset.map(|o| self.line(o)),
            step: step.map(str::to_string),
            field: field.map(str::to_string),
            message: message.into(),
        }
    }
}

/// Every problem found in a workflow file (at least one), in file order within each kind: a
/// person or an agent fixes them all in one pass instead of one per attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowProblems(pub Vec<WorkflowError>);

impl WorkflowProblems {
    /// The first problem (there is always one).
    pub fn first(&self) -> &WorkflowError {
        &self.0[0]
    }
}

impl fmt::Display for WorkflowProblems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for WorkflowProblems {}

impl From<WorkflowError> for WorkflowProblems {
    fn from(e: WorkflowError) -> Self {
        WorkflowProblems(vec![e])
    }
}

/// `outputs` without the declarations that do not parse, each of those told to `bad` (in name
/// order).
fn valid_outputs(mut outputs: BTreeMap<String, String>, mut bad: impl FnMut(String)) -> BTreeMap<String, String> {
    outputs.retain(|name, path| match OutputDecl::parse(name, path) {
        Ok(_) => true,
        Err(e) => {
            bad(e.to_string());
            false
        }
    });
    outputs
}

/// Parses and validates a `workflow.toml`. `file` is the path used in messages. Every problem is
/// reported, not only the first; a problem that makes later checks meaningless (a TOML syntax
/// error, a broken step graph) ends the checks that depend on it.
/// Checks that need the filesystem (tool files, the input schema) are the engine's.
pub fn parse_workflow(text: &str, file: &str) -> Result<WorkflowSpec, WorkflowProblems> {
    let loc = Locator::new(file, text);
    // `[[steps]]` read from the parser's events where they have the common shapes; anything
    // else the full way, for its result or error.
    let raw = match streamed::read(text) {
        Some(raw) => raw,
        None => read_full(text).map_err(|e| {
            let offset = e.span().map(|s| s.start);
            WorkflowProblems::from(loc.err(offset, None, None, e.message().trim_end().to_string()))
        })?,
    };
    let mut check = Checker::new(loc);

    let meta_span = raw.workflow.span().start;
    let meta = raw.workflow.into_inner();
    let version = check.header(&meta);
    let tools = check.tools(raw.tools);
    let steps = check.steps(raw.steps, &tools);
    if steps.is_empty() {
        check.problems.push(check.loc.err(
            Some(meta_span),
            None,
            Some("steps"),
            "the workflow has no steps; add at least one [[steps]] table",
        ));
    }
    // The references and the rules are checked against the step graph; without one (it has a
    // problem of its own) they are not checked at all.
    let dag = check.step_graph(&steps);
    check.check_references(&steps, &tools, dag.as_ref());
    let rules = check.rules(raw.validator.map(|v| v.rules).unwrap_or_default(), &steps, dag.is_some());

    if !check.problems.is_empty() {
        return Err(WorkflowProblems(check.problems));
    }
    Ok(WorkflowSpec {
        name: meta.name.into_inner(),
        version,
        description: meta.description,
        input_schema: meta.input_schema.map(Spanned::into_inner),
        tools,
        steps,
        rules,
    })
}

/// The two readings of a workflow file, each as `Debug` text (spans included), for the fuzzer's
/// differential check (`fuzz/fuzz_targets/workflow.rs`): the fast reading of `[[steps]]`
/// (`workflow/streamed.rs`; `None` where it leaves the file to the full way) and the full way (the
/// TOML crate's tree, read by hand or by serde; `Err` with its message where it refuses the file).
/// Wherever the first is `Some`, the second must be `Ok` with the same text.
#[doc(hidden)]
pub fn both_readings(text: &str) -> (Option<String>, Result<String, String>) {
    let streamed = streamed::read(text).map(|raw| format!("{raw:#?}"));
    (streamed, read_full(text).map(|raw| format!("{raw:#?}")).map_err(|e| e.to_string()))
}

/// The full way of reading a workflow file: `toml::from_str` is the TOML crate's parse followed by
/// serde over the tree; reading the tree's common shapes by hand is the same result at a fraction
/// of serde's cost, and anything else (or anything wrong) goes to serde on the same tree, for
/// serde's result or error.
fn read_full(text: &str) -> Result<RawFile, toml::de::Error> {
    let root = DeTable::parse(text)?;
    match raw_file_from_tree(root.get_ref()) {
        Some(raw) => Ok(raw),
        None => RawFile::deserialize(toml::de::Deserializer::from(root)),
    }
}

/// Whether an argv element could name a file inside the workflow folder: a relative path with no
/// `..` component that is not an option. The engine checks which of these exist.
pub fn tool_path_candidate(arg: &str) -> bool {
    !arg.is_empty()
        && !arg.starts_with('/')
        && !arg.starts_with('-')
        && !arg.contains('\0')
        && arg.split('/').all(|seg| seg != "..")
        && !arg.contains("${")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::Outcome;
    use serde_json::json;

    /// The plain conversion of a parsed TOML tree, kept as the reference `JsonValue` must match.
    fn toml_to_json(v: toml::Value) -> Result<Value, String> {
        Ok(match v {
            toml::Value::String(s) => Value::String(s),
            toml::Value::Integer(i) => Value::from(i),
            toml::Value::Float(f) => finite(f)?,
            toml::Value::Boolean(b) => Value::Bool(b),
            toml::Value::Datetime(d) => Value::String(d.to_string()),
            toml::Value::Array(items) => Value::Array(items.into_iter().map(toml_to_json).collect::<Result<_, _>>()?),
            toml::Value::Table(t) => {
                Value::Object(t.into_iter().map(|(k, v)| Ok((k, toml_to_json(v)?))).collect::<Result<_, String>>()?)
            }
        })
    }

    /// A step's args read straight into JSON are what `toml_to_json` makes of the same TOML: every
    /// kind of value, nested, datetimes as text, and a non-finite float kept as the problem.
    #[test]
    fn args_are_read_into_json_as_toml_to_json_converts_them() {
        let table = r#"s = "${input.x}"
i = -7
u = 9223372036854775807
f = 1.5
b = true
odt = 1979-05-27T07:32:00Z
ldt = 1979-05-27T07:32:00
ld = 1979-05-27
lt = 07:32:00.25
a = [1, "two", [3.0], { k = 1979-05-27 }]
t = { inner = { deep = [true, false] } }
"#;
        let direct: JsonValue = toml::from_str(table).unwrap();
        let via_toml = toml_to_json(toml::from_str::<toml::Value>(table).unwrap()).unwrap();
        assert_eq!(direct.0.unwrap(), via_toml);
        assert_eq!(via_toml["odt"], "1979-05-27T07:32:00Z");
        assert_eq!(via_toml["a"][3]["k"], "1979-05-27");

        for bad in ["x = nan", "x = [1, inf]", "x = { y = { z = -inf } }"] {
            let direct: JsonValue = toml::from_str(bad).unwrap();
            let converted = toml_to_json(toml::from_str::<toml::Value>(bad).unwrap());
            assert_eq!(direct.0, converted, "{bad}");
            assert!(direct.0.unwrap_err().contains("is not a finite number"), "{bad}");
        }
        let text = GOOD.replace(r#"args = { suite = "${input.manifest.tests}" }"#, "args = { w = nan }");
        let problems = parse_workflow(&text, "w.toml").unwrap_err();
        let p = problems.first();
        assert_eq!((p.step.as_deref(), p.field.as_deref()), (Some("a"), Some("args")), "{problems}");
        assert!(p.message.contains("NaN is not a finite number"), "{problems}");
    }

    /// What the hand reading of the tree makes of `text`, checked against serde's reading of the
    /// same tree: identical (spans included, by `Debug`) wherever it gives a result. Returns
    /// whether it did.
    fn read_by_hand_as_serde_does(text: &str) -> bool {
        let Ok(root) = DeTable::parse(text) else { return false };
        let by_hand = raw_file_from_tree(root.get_ref());
        let by_serde = RawFile::deserialize(toml::de::Deserializer::from(root.clone()));
        match (by_hand, by_serde) {
            (Some(h), Ok(s)) => {
                assert_eq!(format!("{h:#?}"), format!("{s:#?}"), "{text}");
                true
            }
            (Some(h), Err(e)) => panic!("read by hand as {h:#?}, which serde refuses: {e}\n{text}"),
            (None, _) => false,
        }
    }

    #[test]
    fn the_tree_is_read_by_hand_as_serde_reads_it() {
        let step = |body: &str| {
            format!("[workflow]\nname = \"w\"\nversion = \"1.0.0\"\n[tools.t]\ncommand = [\"x\"]\n[[steps]]\n{body}\n")
        };
        // Read by hand: the common shapes, every kind of args value, and problems found later.
        for body in [
            "id = \"a\"\ntool = \"t\"",
            "id = \"a\"\ntool = \"t\"\nneeds = []\nargs = {}",
            "id = \"a\"\ntool = \"nope\"\nneeds = [\"b\", \"c\"]\nargs = { x = \"${steps.b.result}\" }",
            "tool = \"t\"\nid = \"\"\nargs = { s = 'lit', i = -7, u = 9223372036854775807, h = 0xff, f = 1.5, n = nan, b = true }",
            "id = \"a\"\ntool = \"t\"\nargs = { d = 1979-05-27T07:32:00Z, l = 1979-05-27, t = 07:32:00.25, a = [1, \"two\", [3.0, inf], { k = 1979-05-27 }] }",
            "id = \"a\"\ntool = \"t\"\nargs = { t = { inner = { deep = [true, false] } }, \"quoted key\" = \"\"\"multi\nline\"\"\" }",
            "id = \"a\"\ntool = \"t\"\nargs = \"not a table\"",
            // The key under which the deserializer hands over a datetime: the visitor's text.
            "id = \"a\"\ntool = \"t\"\nargs = { x = { \"$__toml_private_datetime\" = \"1979-05-27\" } }",
            "id = \"a\"\ntool = \"t\"\nargs = [1, 2]",
            "id = \"a\"\ntool = \"t\"\n[steps.args]\nx = \"y\"\n[steps.args.z]\nw = 1",
            "id = \"a\"\ntool = \"t\"\nmax_attempts = 3\nretry_on = [\"FAILED\"]\noutputs = { log = \"log.txt\" }",
            "id = \"a\"\ntool = \"t\"\n[[steps]]\nid = \"b\"\ntool = \"t\"\nneeds = [\"a\"]\nmax_attempts = 0",
        ] {
            assert!(read_by_hand_as_serde_does(&step(body)), "not read by hand: {body}");
        }
        assert!(read_by_hand_as_serde_does(GOOD));
        assert!(read_by_hand_as_serde_does("[workflow]\nname = \"w\"\nversion = \"1.0.0\"\n"));
        // Left to serde: whatever serde refuses, or reads in a way the hand reading does not.
        for body in [
            "id = \"a\"",
            "tool = \"t\"",
            "id = 1\ntool = \"t\"",
            "id = \"a\"\ntool = [\"t\"]",
            "id = \"a\"\ntool = \"t\"\nneeds = \"b\"",
            "id = \"a\"\ntool = \"t\"\nneeds = [1]",
            "id = \"a\"\ntool = \"t\"\nneed = []",
            "id = \"a\"\ntool = \"t\"\nmax_attempts = \"3\"",
            "id = \"a\"\ntool = \"t\"\nargs = { x = 99999999999999999999 }",
        ] {
            assert!(!read_by_hand_as_serde_does(&step(body)), "read by hand: {body}");
        }
        for text in [
            "steps = [1]\n[workflow]\nname = \"w\"\nversion = \"1.0.0\"\n",
            "steps = 1\n[workflow]\nname = \"w\"\nversion = \"1.0.0\"\n",
            "[workflow]\nname = \"w\"\nversion = \"1.0.0\"\nextra = 1\n",
            "[workflow]\nname = \"w\"\nversion = \"1.0.0\"\n[other]\n",
            "[[steps]]\nid = \"a\"\ntool = \"t\"\n",
            "[workflow]\nname = \"w\"\nversion = \"1.0.0\"\n[tools.t]\ncommand = \"x\"\n",
            "[workflow]\nname = \"w\"\nversion = \"1.0.0\"\n[[validator.rules]]\nid = \"r\"\n",
        ] {
            assert!(!read_by_hand_as_serde_does(text), "read by hand: {text}");
        }
        // A file serde refuses gives serde's error, located as before.
        let e = err(&step("id = \"a\"\ntool = \"t\"\nneeds = [1]"));
        assert_eq!(e.line, Some(9), "{e}");
        assert!(e.message.contains("invalid type: integer `1`, expected a string"), "{e}");
    }

    const GOOD: &str = r#"
[workflow]
name = "release-validation"
version = "1.1.0"

[tools.t]
command = ["python3", "tools/t.py"]
timeout_secs = 5

[[steps]]
id = "a"
tool = "t"
args = { suite = "${input.manifest.tests}" }

[[steps]]
id = "b"
tool = "t"
needs = ["a"]
max_attempts = 3
retry_on = ["TIMED_OUT", "FAILED"]
args = { x = "${steps.a.result.failed}", v = "v${input.manifest.version}" }

[[validator.rules]]
id = "tests-pass"
step = "a"
pointer = "/failed"
op = "eq"
value = 0
finding = "unit tests failed"
"#;

    #[test]
    fn a_good_file_parses_with_defaults() {
        let w = parse_workflow(GOOD, "workflow.toml").unwrap();
        assert_eq!(w.reference(), "release-validation@1.1.0");
        assert_eq!(w.steps[0].max_attempts, 2);
        assert_eq!(w.steps[0].retry_on, vec![RetryOn::Outcome(Outcome::TimedOut)]);
        assert_eq!(w.steps[1].retry_on, vec![RetryOn::Outcome(Outcome::TimedOut), RetryOn::Outcome(Outcome::Failed)]);
        assert_eq!(w.steps[1].line, 15);
        assert_eq!(w.tools["t"].timeout_secs, 5);
        assert_eq!(w.rules[0].value, Some(json!(0)));
    }

    fn err(text: &str) -> WorkflowError {
        parse_workflow(text, "wf/workflow.toml").unwrap_err().first().clone()
    }

    #[test]
    fn errors_name_file_line_step_and_field() {
        let e = err(&GOOD.replace("needs = [\"a\"]", "needs = [\"zz\"]"));
        assert_eq!(
            e.to_string(),
            "wf/workflow.toml:15: step `b`, field `needs`: step `b` needs `zz`, which is not a step of this workflow"
        );

        let e = err(&GOOD.replace("tool = \"t\"\nneeds", "tool = \"nope\"\nneeds"));
        assert_eq!((e.step.as_deref(), e.field.as_deref(), e.line), (Some("b"), Some("tool"), Some(17)));
        assert!(e.message.contains("unknown tool `nope`"));

        let e = err(&GOOD.replace("id = \"b\"", "id = \"a\""));
        assert_eq!((e.step.as_deref(), e.line), (Some("a"), Some(15)));

        let e = err(&GOOD.replace("needs = [\"a\"]", "needs = [\"b\"]"));
        assert!(e.message.contains("needs itself"), "{e}");

        let e = err(&GOOD.replace("x = \"${steps.a.result.failed}\"", "x = \"${steps.c.result}\""));
        assert!(e.message.contains("unknown step `c`"), "{e}");

        let e = err(&GOOD.replace("max_attempts = 3", "max_attempts = 0"));
        assert_eq!(e.field.as_deref(), Some("max_attempts"));

        let e = err(&GOOD.replace("retry_on = [\"TIMED_OUT\", \"FAILED\"]", "retry_on = [\"LATE\"]"));
        assert_eq!((e.field.as_deref(), e.step.as_deref()), (Some("retry_on"), Some("b")), "{e}");
        assert!(e.message.contains("`LATE` is neither an outcome class nor a failure cause"), "{e}");
        assert!(
            e.message.contains("TIMED_OUT, FAILED, DENIED, INVALID_INPUT") && e.message.contains("NO_SPACE"),
            "{e}"
        );

        let w = parse_workflow(
            &GOOD.replace("retry_on = [\"TIMED_OUT\", \"FAILED\"]", "retry_on = [\"NO_SPACE\", \"TIMED_OUT\"]"),
            "w",
        )
        .unwrap();
        let no_space = RetryOn::Cause(crate::status::CauseKind::NoSpace);
        assert_eq!(w.steps[1].retry_on, vec![no_space, RetryOn::Outcome(Outcome::TimedOut)]);

        let e = err(&GOOD.replace("op = \"eq\"", "op = \"equals\""));
        assert!(e.message.contains("eq, ne"), "{e}");

        let e = err(&GOOD.replace("version = \"1.1.0\"", "version = \"1.1\""));
        assert_eq!(e.field.as_deref(), Some("workflow.version"));
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let text = GOOD
            .replace("version = \"1.1.0\"", "version = \"1.1\"")
            .replace("timeout_secs = 5", "timeout_secs = 0")
            .replace("max_attempts = 3", "max_attempts = 0")
            .replace("x = \"${steps.a.result.failed}\"", "x = \"${steps.c.result}\"")
            .replace("op = \"eq\"", "op = \"equals\"");
        let all = parse_workflow(&text, "wf/workflow.toml").unwrap_err().0;
        let fields: Vec<(Option<&str>, Option<&str>)> =
            all.iter().map(|e| (e.step.as_deref(), e.field.as_deref())).collect();
        assert_eq!(
            fields,
            [
                (None, Some("workflow.version")),
                (None, Some("tools.t.timeout_secs")),
                (Some("b"), Some("max_attempts")),
                (Some("b"), Some("args")),
                (None, Some("validator.rules[tests-pass].op")),
            ],
            "{all:#?}"
        );
        assert!(all.iter().all(|e| e.line.is_some()), "every problem has its line: {all:#?}");

        // A broken step graph is one problem; what depends on it is not checked.
        let cyc = GOOD.replace(
            "[[steps]]\nid = \"a\"\ntool = \"t\"\n",
            "[[steps]]\nid = \"a\"\ntool = \"nope\"\nneeds = [\"b\"]\n",
        );
        let all = parse_workflow(&cyc, "w.toml").unwrap_err().0;
        assert_eq!(all.len(), 2, "{all:#?}");
        assert!(all[0].message.contains("unknown tool `nope`") && all[1].message.contains("a -> b -> a"), "{all:#?}");
        // Each on its own line in the message.
        assert_eq!(parse_workflow(&cyc, "w.toml").unwrap_err().to_string().lines().count(), 2);
    }

    #[test]
    fn outputs_are_checked_where_they_are_declared_and_referenced() {
        let with = |tool: &str, a: &str, b: &str| {
            GOOD.replace("timeout_secs = 5\n", &format!("timeout_secs = 5\n{tool}\n"))
                .replace("id = \"a\"\ntool = \"t\"\n", &format!("id = \"a\"\ntool = \"t\"\n{a}\n"))
                .replace("x = \"${steps.a.result.failed}\"", b)
        };
        let w = parse_workflow(
            &with(
                "outputs = { log = \"log.txt\", plots = \"plots/\" }",
                "outputs = { log = \"run.log\", report = \"out/report.html\" }",
                "x = \"${steps.a.outputs.report}\"",
            ),
            "w.toml",
        )
        .unwrap();
        let decls = w.outputs_of(&w.steps[0]);
        let got: Vec<(String, String)> = decls.iter().map(|d| (d.name.clone(), d.declared())).collect();
        assert_eq!(
            got,
            [
                ("log".into(), "run.log".into()),
                ("plots".into(), "plots/".into()),
                ("report".into(), "out/report.html".into())
            ],
            "a step's own output wins over its tool's of the same name"
        );
        assert_eq!(w.outputs_of(&w.steps[1]).len(), 2, "b has its tool's outputs");

        let e = err(&with("", "outputs = { report = \"../report.html\" }", "x = 1"));
        assert_eq!((e.step.as_deref(), e.field.as_deref()), (Some("a"), Some("outputs")), "{e}");
        assert!(e.message.contains("relative to the step's directory"), "{e}");
        let e = err(&with("outputs = { \"a b\" = \"x\" }", "", "x = 1"));
        assert!(e.message.contains("output name `a b` is not valid"), "{e}");
        let e = err(&with("", "outputs = { plots = \"plots/\", one = \"plots/one.png\" }", "x = 1"));
        assert!(e.message.contains("cover the same files"), "{e}");
        let e = err(&with("", "outputs = { report = \"r.html\" }", "x = \"${steps.a.outputs.plot}\""));
        assert!(e.message.contains("names output `plot`, which step `a` does not declare; it declares: report"), "{e}");
        let e = err(&with("", "", "x = \"${steps.a.outputs.plot}\""));
        assert!(e.message.contains("declare it with `outputs = { plot = \"…\" }`"), "{e}");
        let e = err(&with("", "", "x = \"${steps.a.outputs}\""));
        assert!(e.message.contains("steps.<id>.outputs.<name>"), "{e}");
    }

    #[test]
    fn a_reference_to_a_non_ancestor_is_refused() {
        let text = GOOD.replace("needs = [\"a\"]\n", "").replace("${steps.a.result.failed}", "${steps.a.result}");
        let e = err(&text);
        assert!(e.message.contains("not an ancestor; add \"a\" to `needs`"), "{e}");
    }

    #[test]
    fn a_cycle_names_its_steps() {
        let text = GOOD
            .replace("[[steps]]\nid = \"a\"\ntool = \"t\"\n", "[[steps]]\nid = \"a\"\ntool = \"t\"\nneeds = [\"b\"]\n");
        let e = err(&text);
        assert!(e.message.contains("a -> b -> a"), "{e}");
    }

    #[test]
    fn toml_syntax_and_unknown_keys_are_located() {
        let e = err("[workflow]\nname = \"x\"\nversion = \"1.0.0\"\n[[steps]]\nid = \"a\"\ntool = \"t\"\nneed = []\n");
        assert_eq!(e.line, Some(7), "{e}");
        assert!(e.message.contains("unknown field `need`"), "{e}");
        let e = err("[workflow\nname = 1");
        assert_eq!(e.line, Some(1), "{e}");
        let e = err("[workflow]\nname = \"x\"\nversion = \"1.0.0\"\n");
        assert!(e.message.contains("no steps"), "{e}");
    }

    #[test]
    fn tool_path_candidates() {
        assert!(tool_path_candidate("tools/x.py"));
        assert!(tool_path_candidate("x.py"));
        assert!(!tool_path_candidate("/bin/echo"));
        assert!(!tool_path_candidate("../x.py"));
        assert!(!tool_path_candidate("--flag"));
    }
}
