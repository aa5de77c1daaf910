//! The steps of a large `workflow.toml` read straight from the TOML parser's events.
//!
//! The TOML crate's own parse lexes the whole file into one token vector, records every parser
//! event into a second, then builds a tree of tables; at 100,000 steps those are hundreds of MB
//! of page faults and most of the parse. Here the lexer's tokens are parsed a few thousand at a
//! time (split before a `[` that opens a line, the only place a table header can be) and each
//! `[[steps]]` table is built straight into a [`RawStep`] from the events. The other sections
//! (`[workflow]`, `[tools.*]`, `[validator]`, anything else) are a few lines: they are copied
//! into one small document in file order and parsed by the TOML crate and serde as before, their
//! spans mapped back to the file's.
//!
//! This reading covers the shapes steps are written in. Anything else — a TOML error, a dotted
//! key, a float or datetime, a duplicate key, an unknown or mistyped field, `steps` written any
//! other way — makes [`read`] return `None`, and the caller parses the whole file the full way,
//! for that way's result or error. So this is only ever faster, never different: the unit tests
//! compare the two on every input they read.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

use serde::Deserialize;
use serde_json::{Map, Value};
use toml::Spanned;
use toml::de::DeTable;
use toml_parser::decoder::{Encoding, ScalarKind};
use toml_parser::lexer::TokenKind;
use toml_parser::parser::{EventReceiver, RecursionGuard, ValidateWhitespace, parse_document};
use toml_parser::{ErrorSink, ParseError, Raw, Source, Span};

use super::{
    JsonValue, RawFile, RawMeta, RawRule, RawStep, RawTool, RawValidator, TOML_DATETIME_KEY, raw_file_from_tree,
};

/// Tokens parsed per call of the parser, at least: small enough to stay in cache, large enough
/// that the calls cost nothing.
const CHUNK_TOKENS: usize = 4096;

/// The TOML crate's nesting limit, so a file it refuses is refused here too.
const RECURSION_LIMIT: u32 = 80;

/// The file as [`RawFile`], read as described in the module doc; `None` where this reading does
/// not cover the file or the file has any problem (the caller then parses it the full way).
pub(super) fn read(text: &str) -> Option<RawFile> {
    let source = Source::new(text);
    let mut reader = Reader::new(source);
    let mut tokens = Vec::with_capacity(CHUNK_TOKENS + 64);
    let mut after_newline = true;
    for token in source.lex() {
        let kind = token.kind();
        if kind == TokenKind::LeftSquareBracket && after_newline && tokens.len() >= CHUNK_TOKENS {
            reader.parse(&tokens)?;
            tokens.clear();
        }
        after_newline = kind == TokenKind::Newline;
        tokens.push(token);
    }
    reader.parse(&tokens)?;
    let (steps, sections) = reader.finish(text.len())?;
    if steps.is_empty() {
        // Nothing gained: the full way is as fast for a file without steps.
        return None;
    }
    let rest = Rest::new(text, &sections);
    let root = DeTable::parse(&rest.text).ok()?;
    if root.get_ref().contains_key("steps") {
        return None;
    }
    let raw = match raw_file_from_tree(root.get_ref()) {
        Some(raw) => raw,
        None => RawFile::deserialize(toml::de::Deserializer::from(root)).ok()?,
    };
    Some(RawFile { steps, ..rest.relocate(raw) })
}

/// A file split by [`Reader`]: its steps, read, and the ranges of its other sections, in order.
type Split = (Vec<Spanned<RawStep>>, Vec<Range<usize>>);

/// Set when the parser reports anything: the file then goes the full way, for its message.
#[derive(Default)]
struct Failed(bool);

impl ErrorSink for Failed {
    fn report_error(&mut self, _error: ParseError) {
        self.0 = true;
    }
}

/// The part of the file a section of it is.
enum Section {
    /// Not a `[[steps]]` table (the root's own keys, before any header, included): copied
    /// whole into the rest. Its start in the file.
    Other(usize),
    /// A `[[steps]]` table (boxed: the other variants are a few words).
    Step(Box<StepFields>),
    /// Between a header's `[` and its `]`.
    Header { start: usize, is_array: bool, keys: u32, steps: bool },
}

/// A `[[steps]]` table's fields as they are read; each may be given once.
#[derive(Default)]
struct StepFields {
    header: Range<usize>,
    id: Option<Spanned<String>>,
    tool: Option<Spanned<String>>,
    args: Option<Spanned<JsonValue>>,
    needs: Option<Vec<String>>,
    max_attempts: Option<Spanned<i64>>,
    retry_on: Option<Spanned<Vec<String>>>,
    outputs: Option<BTreeMap<String, String>>,
}

impl StepFields {
    /// The field `key` of this step set to `value`; `None` for an unknown key, a value of the
    /// wrong type, or a field given twice.
    fn set(&mut self, key: &str, value: Value, span: Range<usize>) -> Option<()> {
        fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
            slot.is_none().then(|| *slot = Some(value))
        }
        match key {
            "id" => once(&mut self.id, Spanned::new(span, string(value)?)),
            "tool" => once(&mut self.tool, Spanned::new(span, string(value)?)),
            "needs" => once(&mut self.needs, strings(value)?),
            "args" => once(&mut self.args, Spanned::new(span, JsonValue(Ok(value)))),
            "max_attempts" => once(&mut self.max_attempts, Spanned::new(span, value.as_i64()?)),
            "retry_on" => once(&mut self.retry_on, Spanned::new(span, strings(value)?)),
            "outputs" => {
                let Value::Object(map) = value else { return None };
                let outputs = map.into_iter().map(|(k, v)| Some((k, string(v)?))).collect::<Option<_>>()?;
                once(&mut self.outputs, outputs)
            }
            _ => None,
        }
    }

    fn into_step(self) -> Option<Spanned<RawStep>> {
        let step = RawStep {
            id: self.id?,
            tool: self.tool?,
            args: self.args,
            needs: self.needs.unwrap_or_default(),
            max_attempts: self.max_attempts,
            retry_on: self.retry_on,
            outputs: self.outputs.unwrap_or_default(),
        };
        Some(Spanned::new(self.header, step))
    }
}

fn string(value: Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s),
        _ => None,
    }
}

fn strings(value: Value) -> Option<Vec<String>> {
    match value {
        Value::Array(items) => items.into_iter().map(string).collect(),
        _ => None,
    }
}

/// An array or inline table whose close has not come yet.
enum Open {
    Array {
        start: usize,
        items: Vec<Value>,
    },
    /// Its keys sorted, as the TOML crate's tree (a `BTreeMap` without its `preserve_order`)
    /// hands them to the JSON.
    Table {
        start: usize,
        map: BTreeMap<String, Value>,
        key: Option<String>,
    },
}

struct Reader<'s> {
    source: Source<'s>,
    section: Section,
    steps: Vec<Spanned<RawStep>>,
    /// The sections copied into the rest, in file order.
    others: Vec<Range<usize>>,
    /// The key of a step's key/value pair whose value has not ended yet.
    key: Option<String>,
    open: Vec<Open>,
    /// Set by the first event this reading does not cover; every later event is ignored.
    uncovered: bool,
}

impl<'s> Reader<'s> {
    fn new(source: Source<'s>) -> Self {
        Reader {
            source,
            section: Section::Other(0),
            steps: Vec::new(),
            others: Vec::new(),
            key: None,
            open: Vec::new(),
            uncovered: false,
        }
    }

    /// Feeds one run of tokens through the parser; `None` once anything is not covered.
    fn parse(&mut self, tokens: &[toml_parser::lexer::Token]) -> Option<()> {
        let mut failed = Failed::default();
        let source = self.source;
        let mut validated = ValidateWhitespace::new(self, source);
        let mut guarded = RecursionGuard::new(&mut validated, RECURSION_LIMIT);
        parse_document(tokens, &mut guarded, &mut failed);
        (!failed.0 && !self.uncovered).then_some(())
    }

    /// The steps and the other sections' ranges, once the whole file is read.
    fn finish(mut self, end: usize) -> Option<Split> {
        self.end_section(end);
        (!self.uncovered).then_some((self.steps, self.others))
    }

    fn uncover(&mut self) {
        self.uncovered = true;
    }

    fn raw(&self, span: Span, encoding: Option<Encoding>) -> Option<Raw<'s>> {
        let text = self.source.input().get(span.start()..span.end())?;
        Some(Raw::new_unchecked(text, encoding, span))
    }

    fn decode_key(&mut self, span: Span, encoding: Option<Encoding>) -> Option<String> {
        let raw = self.raw(span, encoding)?;
        let mut key = Cow::Borrowed("");
        let mut failed = Failed::default();
        raw.decode_key(&mut key, &mut failed);
        (!failed.0).then(|| key.into_owned())
    }

    fn decode_scalar(&mut self, span: Span, encoding: Option<Encoding>) -> Option<Value> {
        let raw = self.raw(span, encoding)?;
        let mut text = Cow::Borrowed("");
        let mut failed = Failed::default();
        let kind = raw.decode_scalar(&mut text, &mut failed);
        if failed.0 {
            return None;
        }
        match kind {
            ScalarKind::String => Some(Value::String(text.into_owned())),
            ScalarKind::Boolean(b) => Some(Value::Bool(b)),
            // As the TOML crate converts one (`from_str_radix` of its decoded digits), and as the
            // JSON visitor keeps it; one beyond i64 is the full way's to judge.
            ScalarKind::Integer(radix) => i64::from_str_radix(&text, radix.value()).ok().map(Value::from),
            // Their conversions are the deserializer's own.
            ScalarKind::Float | ScalarKind::DateTime => None,
        }
    }

    /// Ends the section being read at `end` (the next header's start, or the file's end).
    fn end_section(&mut self, end: usize) {
        match std::mem::replace(&mut self.section, Section::Other(end)) {
            Section::Other(start) => {
                if start < end {
                    self.others.push(start..end);
                }
            }
            Section::Step(fields) => match fields.into_step() {
                Some(step) => self.steps.push(step),
                None => self.uncover(),
            },
            Section::Header { .. } => self.uncover(),
        }
    }

    fn table_open(&mut self, span: Span, is_array: bool) {
        if !self.open.is_empty() || self.key.is_some() {
            return self.uncover();
        }
        self.end_section(span.start());
        self.section = Section::Header { start: span.start(), is_array, keys: 0, steps: false };
    }

    fn table_close(&mut self, span: Span) {
        let Section::Header { start, is_array, keys, steps } = self.section else { return self.uncover() };
        self.section = if is_array && keys == 1 && steps {
            Section::Step(Box::new(StepFields { header: start..span.end(), ..StepFields::default() }))
        } else {
            Section::Other(start)
        };
    }

    /// A value that has ended: into the array or table it is in, or the step's field.
    fn value(&mut self, value: Value, span: Range<usize>) {
        let done = match self.open.last_mut() {
            Some(Open::Array { items, .. }) => {
                items.push(value);
                Some(())
            }
            Some(Open::Table { map, key, .. }) => match key.take() {
                Some(k) if k != TOML_DATETIME_KEY => map.insert(k, value).is_none().then_some(()),
                _ => None,
            },
            None => match (&mut self.section, self.key.take()) {
                (Section::Step(fields), Some(key)) => fields.set(&key, value, span),
                _ => None,
            },
        };
        if done.is_none() {
            self.uncover();
        }
    }

    /// Whether the events now are a step's to read (not another section's, which are skipped).
    fn in_step(&self) -> bool {
        !self.uncovered && matches!(self.section, Section::Step(_))
    }
}

impl EventReceiver for Reader<'_> {
    fn std_table_open(&mut self, span: Span, _error: &mut dyn ErrorSink) {
        self.table_open(span, false);
    }
    fn std_table_close(&mut self, span: Span, _error: &mut dyn ErrorSink) {
        self.table_close(span);
    }
    fn array_table_open(&mut self, span: Span, _error: &mut dyn ErrorSink) {
        self.table_open(span, true);
    }
    fn array_table_close(&mut self, span: Span, _error: &mut dyn ErrorSink) {
        self.table_close(span);
    }
    fn inline_table_open(&mut self, span: Span, _error: &mut dyn ErrorSink) -> bool {
        if self.in_step() {
            self.open.push(Open::Table { start: span.start(), map: BTreeMap::new(), key: None });
        }
        true
    }
    fn inline_table_close(&mut self, span: Span, _error: &mut dyn ErrorSink) {
        if self.in_step() {
            match self.open.pop() {
                Some(Open::Table { start, map, key: None }) => {
                    self.value(Value::Object(map.into_iter().collect::<Map<_, _>>()), start..span.end())
                }
                _ => self.uncover(),
            }
        }
    }
    fn array_open(&mut self, span: Span, _error: &mut dyn ErrorSink) -> bool {
        if self.in_step() {
            self.open.push(Open::Array { start: span.start(), items: Vec::new() });
        }
        true
    }
    fn array_close(&mut self, span: Span, _error: &mut dyn ErrorSink) {
        if self.in_step() {
            match self.open.pop() {
                Some(Open::Array { start, items }) => self.value(Value::Array(items), start..span.end()),
                _ => self.uncover(),
            }
        }
    }
    fn simple_key(&mut self, span: Span, encoding: Option<Encoding>, _error: &mut dyn ErrorSink) {
        if let Section::Header { keys, steps, .. } = self.section {
            let is_steps = keys == 0 && self.decode_key(span, encoding).as_deref() == Some("steps");
            if let Section::Header { keys, steps: s, .. } = &mut self.section {
                *keys += 1;
                *s = steps || is_steps;
            }
            return;
        }
        if !self.in_step() {
            return;
        }
        let Some(key) = self.decode_key(span, encoding) else { return self.uncover() };
        let slot = match self.open.last_mut() {
            Some(Open::Table { key: slot, .. }) => slot,
            Some(Open::Array { .. }) => return self.uncover(),
            None => &mut self.key,
        };
        // A second key before a value is a dotted key (`a.b = 1`): the TOML crate's to build.
        if slot.replace(key).is_some() {
            self.uncover();
        }
    }
    fn key_sep(&mut self, _span: Span, _error: &mut dyn ErrorSink) {
        if self.in_step() {
            self.uncover();
        }
    }
    fn scalar(&mut self, span: Span, encoding: Option<Encoding>, _error: &mut dyn ErrorSink) {
        if !self.in_step() {
            return;
        }
        match self.decode_scalar(span, encoding) {
            Some(value) => self.value(value, span.start()..span.end()),
            None => self.uncover(),
        }
    }
    fn error(&mut self, _span: Span, _error: &mut dyn ErrorSink) {
        self.uncover();
    }
}

/// The sections that are not steps, as one small TOML document, and where each came from.
struct Rest {
    text: String,
    /// `(start in text, start in the file)` of each section, in order.
    starts: Vec<(usize, usize)>,
}

impl Rest {
    fn new(file: &str, sections: &[Range<usize>]) -> Rest {
        let mut text = String::with_capacity(sections.iter().map(|r| r.len()).sum());
        let mut starts = Vec::with_capacity(sections.len());
        for range in sections {
            starts.push((text.len(), range.start));
            text.push_str(&file[range.clone()]);
        }
        Rest { text, starts }
    }

    /// An offset in the rest as an offset in the file.
    fn offset(&self, at: usize) -> usize {
        let i = self.starts.partition_point(|&(start, _)| start <= at).saturating_sub(1);
        self.starts.get(i).map_or(at, |&(start, file_start)| file_start + (at - start))
    }

    fn span<T>(&self, v: Spanned<T>) -> Spanned<T> {
        let span = v.span();
        Spanned::new(self.offset(span.start)..self.offset(span.end), v.into_inner())
    }

    /// `raw`, read from the rest, with every span it keeps made the file's.
    fn relocate(&self, raw: RawFile) -> RawFile {
        let meta = |m: RawMeta| RawMeta {
            name: self.span(m.name),
            version: self.span(m.version),
            description: m.description,
            input_schema: m.input_schema.map(|s| self.span(s)),
        };
        let tool = |t: RawTool| RawTool {
            kind: t.kind.map(|k| self.span(k)),
            command: t.command.map(|c| self.span(c)),
            timeout_secs: t.timeout_secs.map(|s| self.span(s)),
            ..t
        };
        let rule = |r: RawRule| RawRule {
            id: self.span(r.id),
            step: self.span(r.step),
            pointer: self.span(r.pointer),
            op: self.span(r.op),
            ..r
        };
        let workflow = self.span(raw.workflow);
        let workflow_span = workflow.span();
        RawFile {
            workflow: Spanned::new(workflow_span, meta(workflow.into_inner())),
            tools: raw
                .tools
                .into_iter()
                .map(|(name, t)| {
                    let t = self.span(t);
                    let span = t.span();
                    (name, Spanned::new(span, tool(t.into_inner())))
                })
                .collect(),
            steps: raw.steps,
            validator: raw.validator.map(|v| RawValidator {
                rules: v
                    .rules
                    .into_iter()
                    .map(|r| {
                        let r = self.span(r);
                        let span = r.span();
                        Spanned::new(span, rule(r.into_inner()))
                    })
                    .collect(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;

    use super::*;

    /// What the full way (the TOML crate's tree, read by hand or by serde) makes of `text`, as
    /// `Debug` text (spans included), or `None` where it refuses the file.
    fn full(text: &str) -> Option<String> {
        crate::workflow::read_full(text).ok().map(|raw| format!("{raw:#?}"))
    }

    /// [`read`] of `text`, checked against the full way: identical wherever it gives a result.
    /// Returns whether it did.
    fn read_as_the_full_way_does(text: &str) -> bool {
        let Some(streamed) = read(text) else { return false };
        match full(text) {
            Some(f) => assert_eq!(format!("{streamed:#?}"), f, "{text}"),
            None => panic!("read as {streamed:#?}, which the full way refuses:\n{text}"),
        }
        true
    }

    fn with_step(body: &str) -> String {
        format!("[workflow]\nname = \"w\"\nversion = \"1.0.0\"\n[tools.t]\ncommand = [\"x\"]\n[[steps]]\n{body}\n")
    }

    #[test]
    fn the_steps_are_read_from_the_events_as_the_full_way_reads_them() {
        for body in [
            "id = \"a\"\ntool = \"t\"",
            "id = \"a\"\ntool = \"t\"\nneeds = []\nargs = {}",
            "id = \"a\"\ntool = \"nope\"\nneeds = [\"b\", \"c\"]\nargs = { x = \"${steps.b.result}\" }",
            "tool = \"t\"\nid = \"\"\nargs = { s = 'lit', i = -7, u = 9223372036854775807, h = 0xff, o = 0o17, b = 0b101, n = 1_000, t = true }",
            "id = \"a\"\ntool = \"t\"\nargs = { t = { inner = { deep = [true, false] } }, \"quoted key\" = \"\"\"multi\nline\"\"\", 'lit key' = '''raw\\n''' }",
            "id = \"a\"\ntool = \"t\"\nargs = { e = \"tab\\tquote\\\" \\u00e9 \\U0001F600\", empty = \"\", nested = [[1, 2], [], [{}]] }",
            "id = \"a\"\ntool = \"t\"\nargs = \"not a table\"",
            "id = \"a\"\ntool = \"t\"\nargs = [1, 2]",
            "id = \"a\"\ntool = \"t\"\nmax_attempts = 3\nretry_on = [\"FAILED\"]\noutputs = { log = \"log.txt\", plots = \"plots/\" }",
            "id = \"a\"\ntool = \"t\"\nretry_on = [\"NO_SPACE\", \"TIMED_OUT\", \"NO_SPACE\", \"COMPLETED\"]",
            "id = \"a\"\ntool = \"t\"\nmax_attempts = 0\nretry_on = [\"NOPE\"]\noutputs = { \"../x\" = \"/abs\" }",
            "id = \"a\" # a comment\ntool = \"t\"\t# another\n\n# a line of comment\nneeds = [ # inside\n  \"b\", # after an item\n  \"c\",\n]\n",
            "id = \"a\"\ntool = \"t\"\n[[steps]]\nid = \"b\"\ntool = \"t\"\nneeds = [\"a\"]\n[tools.u]\ncommand = [\"y\"]\n[[steps]]\nid = \"c\"\ntool = \"u\"",
            "id = \"a\"\ntool = \"t\"\n[[validator.rules]]\nid = \"r\"\nstep = \"a\"\npointer = \"/x\"\nop = \"eq\"\nvalue = 1.5\nfinding = \"f\"\n[[steps]]\nid = \"b\"\ntool = \"t\"",
            "\"id\" = \"a\"\n'tool' = \"t\"",
        ] {
            assert!(read_as_the_full_way_does(&with_step(body)), "not read from the events: {body}");
        }
        for text in [
            // The root's own keys before the first header, CRLF line ends, and a header with spaces.
            "tools = { t = { command = [\"x\"] } }\r\n[workflow]\r\nname = \"w\"\r\nversion = \"1.0.0\"\r\n[[ steps ]]\r\nid = \"a\"\r\ntool = \"t\"\r\n",
            // No newline at the end of the file, and the workflow table after the steps.
            "[[steps]]\nid = \"a\"\ntool = \"t\"\n[workflow]\nname = \"w\"\nversion = \"1.0.0\"",
            "[[\"steps\"]]\nid = \"a\"\ntool = \"t\"\n[workflow]\nname = \"w\"\nversion = \"1.0.0\"\ninput_schema = \"s.json\"\n[tools.t]\nkind = \"snakemake\"\ntimeout_secs = 5\nenv = [\"A\"]\n",
        ] {
            assert!(read_as_the_full_way_does(text), "not read from the events: {text}");
        }
        // Left to the full way: a file it refuses, or a shape this reading does not cover.
        for body in [
            "id = \"a\"",
            "id = 1\ntool = \"t\"",
            "id = \"a\"\ntool = [\"t\"]",
            "id = \"a\"\ntool = \"t\"\nneeds = \"b\"",
            "id = \"a\"\ntool = \"t\"\nneeds = [1]",
            "id = \"a\"\ntool = \"t\"\nneed = []",
            "id = \"a\"\ntool = \"t\"\nid = \"b\"",
            "id = \"a\"\ntool = \"t\"\nargs = { x = 1, x = 2 }",
            "id = \"a\"\ntool = \"t\"\nargs.x = 1",
            "id = \"a\"\ntool = \"t\"\nargs = { x.y = 1 }",
            "id = \"a\"\ntool = \"t\"\nargs = { f = 1.5 }",
            "id = \"a\"\ntool = \"t\"\nargs = { d = 1979-05-27 }",
            "id = \"a\"\ntool = \"t\"\nargs = { x = 99999999999999999999 }",
            "id = \"a\"\ntool = \"t\"\nargs = { x = \"\\q\" }",
            "id = \"a\"\ntool = \"t\"\nargs = { x = { \"$__toml_private_datetime\" = \"1979-05-27\" } }",
            "id = \"a\"\ntool = \"t\"\nmax_attempts = \"3\"",
            "id = \"a\"\ntool = \"t\"\n[steps.args]\nx = \"y\"",
            "id = \"a\"\ntool = \"t\"\nargs = { x = 1 ",
            "id = \"a\" tool = \"t\"",
        ] {
            assert!(!read_as_the_full_way_does(&with_step(body)), "read from the events: {body}");
        }
        for text in [
            "steps = [1]\n[workflow]\nname = \"w\"\nversion = \"1.0.0\"\n[[steps]]\nid = \"a\"\ntool = \"t\"\n",
            "[workflow]\nname = \"w\"\nversion = \"1.0.0\"\n[[steps]]\nid = \"a\"\ntool = \"t\"\n[workflow]\nname = \"v\"\n",
            "[workflow]\nname = \"w\"\nversion = \"1.0.0\"\n[steps]\nid = \"a\"\n",
            "[workflow]\nname = \"w\"\nversion = \"1.0.0\"\n[[steps.x]]\nid = \"a\"\n",
            "[workflow]\nname = \"w\"\nversion = \"1.0.0\"\nextra = 1\n[[steps]]\nid = \"a\"\ntool = \"t\"\n",
            "[workflow]\nname = \"w\"\nversion = \"1.0.0\"\n",
            "[workflow\nname = \"w\"\n[[steps]]\nid = \"a\"\ntool = \"t\"\n",
        ] {
            assert!(!read_as_the_full_way_does(text), "read from the events: {text}");
        }
    }

    /// `n` steps in the shape of a large real workflow, each with `extra` appended to its table.
    fn many_steps(n: usize, extra: &str) -> String {
        let mut text =
            String::from("[workflow]\nname = \"big\"\nversion = \"1.0.0\"\n\n[tools.t]\ncommand = [\"x\"]\n\n");
        for i in 0..n {
            text.push_str(&format!("[[steps]]\nid = \"s{i}\"\ntool = \"t\"\n"));
            if i > 0 {
                text.push_str(&format!(
                    "needs = [\"s{}\"]\nargs = {{ x = \"${{steps.s{}.result}}\", n = {i} }}\n",
                    i - 1,
                    i - 1
                ));
            }
            text.push_str(extra);
            text.push('\n');
        }
        text.push_str(
            "[[validator.rules]]\nid = \"r\"\nstep = \"s0\"\npointer = \"\"\nop = \"exists\"\nfinding = \"f\"\n",
        );
        text
    }

    #[test]
    fn a_file_read_in_many_chunks_is_read_as_one() {
        assert!(read_as_the_full_way_does(&many_steps(3_000, "")));
        // A line of an array that starts with `[` where a chunk may end: never a split that
        // changes what is read (it is either read the same or left to the full way).
        let text = many_steps(3_000, "outputs = { log = \"log.txt\" }\nretry_on = [\n\"FAILED\"]\nmax_attempts = 3\n");
        assert!(read_as_the_full_way_does(&text));
        let text = many_steps(2_000, "[steps.args.more]\nk = [\n[1],\n[2]]\n");
        read_as_the_full_way_does(&text);
        let text = many_steps(
            2_000,
            "[[validator.rules]]\nid = \"r\"\nstep = \"s0\"\npointer = \"\"\nop = \"in\"\nvalue = [\n[1],\n]\nfinding = \"f\"\n",
        );
        read_as_the_full_way_does(&text);
    }

    /// A TOML key: bare, quoted or literal.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => "[a-z_][a-z0-9_-]{0,6}",
            1 => "[a-z .$]{0,5}".prop_map(|k| format!("\"{k}\"")),
            1 => "[a-z .]{0,5}".prop_map(|k| format!("'{k}'")),
        ]
    }

    /// A TOML value in every syntax a step may be written in, and some it may not.
    fn value() -> impl Strategy<Value = String> {
        let scalar = prop_oneof![
            3 => "[a-z ${}.]{0,8}".prop_map(|s| format!("\"{s}\"")),
            1 => Just("\"esc \\t \\\" \\\\ \\u00e9\"".to_string()),
            1 => Just("\"bad \\q\"".to_string()),
            1 => "[a-z ]{0,6}".prop_map(|s| format!("'{s}'")),
            1 => "[a-z\n ]{0,8}".prop_map(|s| format!("\"\"\"{s}\"\"\"")),
            1 => "[a-z\n ]{0,8}".prop_map(|s| format!("'''{s}'''")),
            2 => any::<i64>().prop_map(|i| i.to_string()),
            1 => prop_oneof![Just("0xff"), Just("0o17"), Just("0b11"), Just("1_000"), Just("+5"), Just("99999999999999999999"), Just("0x"), Just("01")].prop_map(str::to_string),
            1 => prop_oneof![Just("true"), Just("false")].prop_map(str::to_string),
            1 => prop_oneof![Just("1.5"), Just("nan"), Just("-inf"), Just("1e3"), Just("1979-05-27"), Just("07:32:00"), Just("1979-05-27T07:32:00Z")].prop_map(str::to_string),
        ];
        scalar.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                (prop::collection::vec(inner.clone(), 0..4), any::<bool>(), any::<bool>()).prop_map(
                    |(items, multiline, trailing)| {
                        let sep = if multiline { ",\n  " } else { ", " };
                        let tail = if trailing && !items.is_empty() { "," } else { "" };
                        let nl = if multiline { "\n" } else { "" };
                        format!("[{nl}{}{tail}{nl}]", items.join(sep))
                    }
                ),
                prop::collection::vec((key(), inner), 0..4).prop_map(|pairs| {
                    let pairs: Vec<String> = pairs.into_iter().map(|(k, v)| format!("{k} = {v}")).collect();
                    format!("{{ {} }}", pairs.join(", "))
                }),
            ]
        })
    }

    /// A value of the kinds this reading covers (no float, datetime, bad escape or overflow).
    fn covered_value() -> impl Strategy<Value = String> {
        let scalar = prop_oneof![
            4 => "[a-z ${}.]{0,8}".prop_map(|s| format!("\"{s}\"")),
            1 => Just("\"esc \\t \\\" \\\\ \\u00e9 \\U0001F600\"".to_string()),
            1 => "[a-z ]{0,6}".prop_map(|s| format!("'{s}'")),
            1 => "[a-z\n ]{0,8}".prop_map(|s| format!("\"\"\"{s}\"\"\"")),
            1 => "[a-z\n ]{0,8}".prop_map(|s| format!("'\'\'{s}'\'\'")),
            2 => any::<i64>().prop_map(|i| i.to_string()),
            1 => prop_oneof![Just("0xff"), Just("0o17"), Just("0b11"), Just("1_000"), Just("+5"), Just("-0")].prop_map(str::to_string),
            1 => prop_oneof![Just("true"), Just("false")].prop_map(str::to_string),
        ];
        scalar.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                (prop::collection::vec(inner.clone(), 0..4), any::<bool>()).prop_map(|(items, multiline)| {
                    match (multiline, items.is_empty()) {
                        (true, false) => format!("[\n  {},\n]", items.join(",\n  ")),
                        (true, true) => "[\n]".to_string(),
                        (false, _) => format!("[{}]", items.join(", ")),
                    }
                }),
                prop::collection::btree_map("[a-z_]{1,4}", inner, 0..4).prop_map(|pairs| {
                    let pairs: Vec<String> = pairs.into_iter().map(|(k, v)| format!("{k} = {v}")).collect();
                    format!("{{ {} }}", pairs.join(", "))
                }),
            ]
        })
    }

    /// A `[[steps]]` table this reading covers: each field at most once, in any order, with
    /// comments and blank lines between.
    fn covered_step() -> impl Strategy<Value = String> {
        let strings = prop::collection::vec("[a-z0-9]{1,3}", 0..3)
            .prop_map(|s| format!("[{}]", s.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ")));
        let outputs = prop::collection::btree_map("[a-z]{1,3}", "[a-z/.]{1,5}", 0..3).prop_map(|m| {
            let pairs: Vec<String> = m.into_iter().map(|(k, v)| format!("{k} = \"{v}\"")).collect();
            format!("{{ {} }}", pairs.join(", "))
        });
        (
            "[a-z0-9]{1,3}",
            prop::option::of(strings.clone()),
            prop::option::of(prop::collection::btree_map("[a-z_]{1,4}", covered_value(), 0..4)),
            prop::option::of(1i64..5),
            prop::option::of(prop_oneof![Just("[\"FAILED\"]"), Just("[]"), Just("[\"TIMED_OUT\", \"DENIED\"]")]),
            prop::option::of(outputs),
            prop::collection::vec(prop_oneof![Just(""), Just("# a comment"), Just("   \t")], 0..3),
        )
            .prop_flat_map(|(id, needs, args, max, retry, outputs, filler)| {
                let mut lines = vec![format!("id = \"{id}\""), "tool = \"t\" # the tool".to_string()];
                lines.extend(needs.map(|n| format!("needs = {n}")));
                lines.extend(args.map(|a| {
                    let pairs: Vec<String> = a.into_iter().map(|(k, v)| format!("{k} = {v}")).collect();
                    format!("args = {{ {} }}", pairs.join(", "))
                }));
                lines.extend(max.map(|m| format!("max_attempts = {m}")));
                lines.extend(retry.map(|r| format!("retry_on = {r}")));
                lines.extend(outputs.map(|o| format!("outputs = {o}")));
                lines.extend(filler.into_iter().map(str::to_string));
                Just(lines).prop_shuffle()
            })
            .prop_map(|lines| format!("[[steps]]\n{}\n", lines.join("\n")))
    }

    /// A line of a step's table: one of its fields (well or badly typed), a key it does not have,
    /// a dotted key, a comment, or nothing.
    fn step_line() -> impl Strategy<Value = String> {
        let strings = prop::collection::vec("[a-z0-9]{1,3}", 0..3)
            .prop_map(|s| format!("[{}]", s.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ")));
        prop_oneof![
            3 => "[a-z0-9]{1,3}".prop_map(|s| format!("id = \"{s}\"")),
            3 => prop_oneof![Just("tool = \"t\""), Just("tool = \"u\""), Just("tool = 't'"), Just("tool = 1")].prop_map(str::to_string),
            2 => strings.clone().prop_map(|s| format!("needs = {s}")),
            3 => value().prop_map(|v| format!("args = {v}")),
            1 => value().prop_map(|v| format!("max_attempts = {v}")),
            1 => prop_oneof![Just("max_attempts = 3"), Just("max_attempts = 0x10")].prop_map(str::to_string),
            1 => prop_oneof![Just("retry_on = [\"FAILED\"]"), Just("retry_on = [\"NO_SPACE\"]"), Just("retry_on = []")].prop_map(str::to_string),
            1 => value().prop_map(|v| format!("outputs = {v}")),
            1 => prop_oneof![Just("outputs = { log = \"log.txt\" }"), Just("outputs = {}")].prop_map(str::to_string),
            1 => (key(), value()).prop_map(|(k, v)| format!("{k} = {v}")),
            1 => (key(), value()).prop_map(|(k, v)| format!("args.{k} = {v}")),
            1 => Just("# a comment".to_string()),
            1 => Just(String::new()),
        ]
    }

    /// A section this reading covers: a step (most often), a tool or a rule.
    fn covered_section() -> impl Strategy<Value = String> {
        prop_oneof![
            8 => covered_step(),
            1 => "[a-z]{1,2}".prop_map(|t| format!("[tools.{t}x]\ncommand = [\"x\"]\ntimeout_secs = 3\n")),
            1 => covered_value().prop_map(|v| format!("[[validator.rules]]\nid = \"r\"\nstep = \"s\"\npointer = \"\"\nop = \"eq\"\nvalue = {v}\nfinding = \"f\"\n")),
        ]
    }

    /// A section of a workflow file: a step (most often), the workflow table, a tool, a rule,
    /// another table, or a table that extends the last step.
    fn section() -> impl Strategy<Value = String> {
        prop_oneof![
            8 => (prop::collection::vec(step_line(), 0..7), any::<bool>()).prop_map(|(lines, valid)| {
                let head = if valid { "id = \"s\"\ntool = \"t\"\n" } else { "" };
                format!("[[steps]]\n{head}{}\n", lines.join("\n"))
            }),
            1 => Just("[workflow]\nname = \"w\"\nversion = \"1.0.0\"\n".to_string()),
            1 => "[a-z]{1,2}".prop_map(|t| format!("[tools.{t}]\ncommand = [\"x\"]\ntimeout_secs = 3\n")),
            1 => value().prop_map(|v| format!("[[validator.rules]]\nid = \"r\"\nstep = \"s\"\npointer = \"\"\nop = \"eq\"\nvalue = {v}\nfinding = \"f\"\n")),
            1 => prop_oneof![Just("[steps.args]\nx = 1\n"), Just("[steps]\n"), Just("[other]\n"), Just("[[steps.x]]\n")].prop_map(str::to_string),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Whatever the file, this reading gives the full way's result or leaves it to the full
        /// way; it never gives another.
        #[test]
        fn any_file_is_read_as_the_full_way_reads_it_or_left_to_it(
            root in prop::option::of("[a-z]{1,3} = 1\n"),
            sections in prop::collection::vec(prop_oneof![section(), covered_section()], 0..8),
            workflow_first in any::<bool>(),
        ) {
            let mut text = root.unwrap_or_default();
            if workflow_first {
                text.push_str("[workflow]\nname = \"w\"\nversion = \"1.0.0\"\n[tools.t]\ncommand = [\"x\"]\n");
            }
            for s in &sections {
                text.push_str(s);
            }
            read_as_the_full_way_does(&text);
        }
    }

    /// The generator of covered sections makes files this reading does read, so the property
    /// above compares results rather than only agreeing to leave files to the full way.
    #[test]
    fn the_generated_files_are_mostly_read_from_the_events() {
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let sections = (covered_step(), prop::collection::vec(covered_section(), 0..8));
        let (mut read, mut total) = (0, 0);
        for _ in 0..500 {
            let tree = sections.new_tree(&mut runner).expect("a value");
            let mut text =
                String::from("[workflow]\nname = \"w\"\nversion = \"1.0.0\"\n[tools.t]\ncommand = [\"x\"]\n");
            let (step, sections) = tree.current();
            text.push_str(&step);
            text.extend(sections);
            total += 1;
            if read_as_the_full_way_does(&text) {
                read += 1;
            } else if std::env::var("SHOW").is_ok() {
                eprintln!("=====\n{text}\n{:?}", full(&text).is_some());
            }
        }
        assert!(read * 10 >= total * 9, "only {read} of {total} generated files were read from the events");
    }
}
