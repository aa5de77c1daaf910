//! `workflow.toml`: parsing and DAG validation.
//!
//! Every input is read twice. As raw text (up to its first NUL byte, so a real workflow.toml is a
//! seed as it is): `parse_workflow` never panics, a parsed spec's DAG builds and its order respects
//! `needs`, every reference names an ancestor, every problem carries the file and a message, and
//! the fast `[[steps]]` reader agrees with the full way wherever it gives a reading. And as the
//! bytes that drive a generator of workflow files (steps, needs, templates referencing inputs and
//! other steps, tools, outputs, validator rules), either well formed, which must parse into the
//! very graph generated, or with one known fault, which must be refused with a problem that names
//! the field to fix.
#![no_main]

use std::collections::BTreeSet;

use arbitrary::{Result, Unstructured};
use cairn_core::template::{self, RootView};
use cairn_core::workflow::{WorkflowProblems, WorkflowSpec, both_readings, parse_workflow};
use cairn_fuzz::split_input;
use libfuzzer_sys::fuzz_target;

const FILE: &str = "wf/workflow.toml";

fuzz_target!(|data: &[u8]| {
    let (text, rest) = split_input(data);
    let _ = check_text(&text);
    let _ = generated(&mut Unstructured::new(if rest.is_empty() { data } else { rest }));
});

/// The properties of any text, parsed or refused.
fn check_text(text: &str) -> std::result::Result<WorkflowSpec, WorkflowProblems> {
    let (streamed, full) = both_readings(text);
    if let Some(s) = &streamed {
        match &full {
            Ok(f) => assert_eq!(s, f, "the fast reader and the full way disagree on:\n{text}"),
            Err(e) => panic!("the fast reader read a file the full way refuses ({e}):\n{text}\n{s}"),
        }
    }
    let parsed = parse_workflow(text, FILE);
    match &parsed {
        Ok(spec) => check_spec(spec, text),
        Err(problems) => check_problems(problems, text),
    }
    parsed
}

fn check_problems(problems: &WorkflowProblems, text: &str) {
    assert!(!problems.0.is_empty(), "an error with no problem in it:\n{text}");
    let lines = text.lines().count().max(1) + 1;
    for p in &problems.0 {
        assert_eq!(p.file, FILE, "a problem names another file: {p:?}");
        assert!(!p.message.trim().is_empty(), "a problem without a message: {p:?}");
        if let Some(line) = p.line {
            assert!((1..=lines).contains(&line), "line {line} of a {lines}-line file: {p:?}");
        }
        assert!(p.to_string().starts_with(FILE), "{p}");
    }
}

fn check_spec(spec: &WorkflowSpec, text: &str) {
    let dag = spec.dag().unwrap_or_else(|e| panic!("a parsed spec whose DAG does not build ({e}):\n{text}"));
    assert_eq!(dag.len(), spec.steps.len());
    let order = dag.order();
    let mut position = vec![usize::MAX; order.len()];
    for (at, &i) in order.iter().enumerate() {
        assert_eq!(position[i], usize::MAX, "step {i} twice in the order");
        position[i] = at;
    }
    for (i, step) in spec.steps.iter().enumerate() {
        assert_eq!(dag.id(i), step.id);
        assert!(spec.tools.contains_key(&step.tool), "step `{}` has unknown tool `{}`", step.id, step.tool);
        assert!((1..=cairn_core::workflow::MAX_MAX_ATTEMPTS).contains(&step.max_attempts));
        for need in &step.needs {
            let d = dag.index_of(need).unwrap_or_else(|| panic!("`{}` needs unknown `{need}`", step.id));
            assert!(position[d] < position[i], "`{}` runs before its need `{need}`", step.id);
        }
        assert!(step.args.is_object(), "args of `{}` are not a table", step.id);
        template::for_each_reference(&step.args, &mut |_, r| {
            let target = match r.root {
                RootView::Input => return,
                RootView::Step(t) | RootView::Output { step: t, .. } => t,
            };
            let t = dag.index_of(target).unwrap_or_else(|| panic!("`{}` references unknown `{target}`", step.id));
            assert!(dag.is_ancestor(t, i), "`{}` references non-ancestor `{target}`", step.id);
        })
        .unwrap_or_else(|e| panic!("a parsed spec with a bad template ({e}):\n{text}"));
    }
    for rule in &spec.rules {
        assert!(spec.step(&rule.step).is_some(), "rule `{}` reads unknown step `{}`", rule.id, rule.step);
        assert!(rule.pointer.is_empty() || rule.pointer.starts_with('/'));
    }
    assert!(semver_like(&spec.version), "version `{}`", spec.version);
}

fn semver_like(v: &str) -> bool {
    v.split(['-', '+']).next().is_some_and(|core| core.split('.').count() == 3)
}

/// A fault put into an otherwise well-formed file, and the field the refusal must name.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    UnknownTool,
    MissingNeed,
    Cycle,
    NonAncestorReference,
    DuplicateId,
    BadVersion,
    BadOp,
    UnknownField,
    BadTemplate,
}

const FAULTS: [Fault; 10] = [
    Fault::None,
    Fault::UnknownTool,
    Fault::MissingNeed,
    Fault::Cycle,
    Fault::NonAncestorReference,
    Fault::DuplicateId,
    Fault::BadVersion,
    Fault::BadOp,
    Fault::UnknownField,
    Fault::BadTemplate,
];

const IDS: [&str; 8] = ["load", "check_a", "check-b", "s3", "evidence", "x", "Upper_9", "t"];
const TOOLS: [&str; 3] = ["t", "py_tool", "other-tool"];
const OPS: [&str; 11] = ["eq", "ne", "lt", "le", "gt", "ge", "in", "exists", "absent", "truthy", "falsy"];
const TEXT: [&str; 10] = ["v", "-", " ", "suite", "é", "\\\"", "\\\\", "\\n", "x.y", "{}"];

/// A TOML basic string of `s`, escaped.
fn quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

struct Step {
    id: String,
    tool: String,
    needs: Vec<usize>,
    /// `key = value` pairs of its args, rendered.
    args: Vec<String>,
    outputs: Vec<(String, String)>,
}

/// A generated file: well formed, or with one fault; parsed and checked against what was
/// generated.
fn generated(u: &mut Unstructured<'_>) -> Result<()> {
    let fault = *u.choose(&FAULTS)?;
    let n = u.int_in_range(1..=IDS.len())?;
    let tools: Vec<&str> = TOOLS[..u.int_in_range(1..=TOOLS.len())?].to_vec();
    let mut steps: Vec<Step> = Vec::with_capacity(n);
    for (i, id) in IDS.iter().enumerate().take(n) {
        // Needs among earlier steps: the graph is acyclic by construction.
        let mut needs = BTreeSet::new();
        for j in 0..i {
            if u.ratio(1, 3)? {
                needs.insert(j);
            }
        }
        let needs: Vec<usize> = needs.into_iter().collect();
        let mut args = Vec::new();
        for k in 0..u.int_in_range(0..=3)? {
            let value = match u.int_in_range(0..=4)? {
                0 => quoted(&format!("${{input.{}}}", ["manifest", "manifest.tests", "a.0.b"][k % 3])),
                1 if !needs.is_empty() => {
                    let d = *u.choose(&needs)?;
                    quoted(&format!("v${{steps.{}.result.{}}}-$${{lit}}", IDS[d], ["x", "0", "deep.path"][k % 3]))
                }
                2 => format!("{}", u.int_in_range(-1_000_000i64..=1_000_000)?),
                3 => format!(
                    "[{}, true, {{ k = {} }}]",
                    quoted(&cairn_fuzz::text(u, &TEXT, 4)?.replace('$', "")),
                    u.arbitrary::<u8>()?
                ),
                _ => quoted(&cairn_fuzz::text(u, &TEXT, 6)?.replace('$', "")),
            };
            args.push(format!("a{k} = {value}"));
        }
        let outputs = if u.ratio(1, 4)? { vec![("report".to_string(), "out/report.html".to_string())] } else { vec![] };
        steps.push(Step { id: id.to_string(), tool: u.choose(&tools)?.to_string(), needs, args, outputs });
    }
    // A step that reads another's declared output, when one before it declares any.
    if let Some(last) = steps.len().checked_sub(1)
        && let Some(p) = (0..last).find(|&p| !steps[p].outputs.is_empty())
    {
        if !steps[last].needs.contains(&p) {
            steps[last].needs.push(p);
            steps[last].needs.sort_unstable();
        }
        steps[last].args.push(format!("report = {}", quoted(&format!("${{steps.{}.outputs.report}}", IDS[p]))));
    }
    let mut rules = Vec::new();
    for r in 0..u.int_in_range(0..=3)? {
        let op = *u.choose(&OPS)?;
        let value = match op {
            "in" => Some("[0, \"ok\"]".to_string()),
            "exists" | "absent" | "truthy" | "falsy" => None,
            _ => Some(format!("{}", u.int_in_range(-5i32..=5)?)),
        };
        rules.push((format!("rule-{r}"), u.int_in_range(0..=n - 1)?, op, value));
    }
    let mut version = "1.2.0".to_string();
    let mut expect: Option<(&str, Option<String>)> = None;
    let mut extra_step_key = None;
    match fault {
        Fault::None => {}
        Fault::UnknownTool => {
            let i = u.int_in_range(0..=n - 1)?;
            steps[i].tool = "undeclared".into();
            expect = Some(("tool", Some(steps[i].id.clone())));
        }
        Fault::MissingNeed => {
            let i = u.int_in_range(0..=n - 1)?;
            steps[i].needs.push(usize::MAX);
            expect = Some(("needs", Some(steps[i].id.clone())));
        }
        Fault::Cycle if n >= 2 => {
            // The first step needs the last, which needs the first.
            steps[0].needs.push(n - 1);
            if !steps[n - 1].needs.contains(&0) {
                steps[n - 1].needs.insert(0, 0);
            }
            expect = Some(("needs", None));
        }
        Fault::NonAncestorReference if n >= 2 => {
            // The first step reads the last one's result: never its ancestor.
            steps[0].args.push(format!("late = {}", quoted(&format!("${{steps.{}.result}}", IDS[n - 1]))));
            expect = Some(("args", Some(steps[0].id.clone())));
        }
        Fault::DuplicateId if n >= 2 => {
            steps[n - 1].id = steps[0].id.clone();
            expect = Some(("id", Some(steps[0].id.clone())));
        }
        Fault::BadVersion => {
            version = "1.2".into();
            expect = Some(("workflow.version", None));
        }
        Fault::BadOp => {
            rules.push(("bad-op".into(), 0, "equals", Some("1".into())));
            expect = Some(("validator.rules[bad-op].op", None));
        }
        Fault::UnknownField => {
            let i = u.int_in_range(0..=n - 1)?;
            extra_step_key = Some(i);
            expect = Some(("", None));
        }
        Fault::BadTemplate => {
            let i = u.int_in_range(0..=n - 1)?;
            steps[i].args.push(format!("broken = {}", quoted("${input.unclosed")));
            expect = Some(("args", Some(steps[i].id.clone())));
        }
        _ => {}
    }

    let mut text = format!("[workflow]\nname = \"fuzzed\"\nversion = {}\n\n", quoted(&version));
    for t in &tools {
        text.push_str(&format!("[tools.{t}]\ncommand = [\"python3\", \"tools/{t}.py\"]\ntimeout_secs = 30\n\n"));
    }
    for (i, s) in steps.iter().enumerate() {
        let needs: Vec<String> =
            s.needs.iter().map(|&d| quoted(if d == usize::MAX { "nowhere" } else { &steps[d].id })).collect();
        text.push_str(&format!("[[steps]]\nid = {}\ntool = {}\n", quoted(&s.id), quoted(&s.tool)));
        if !needs.is_empty() || u.arbitrary()? {
            text.push_str(&format!("needs = [{}]\n", needs.join(", ")));
        }
        if !s.args.is_empty() {
            text.push_str(&format!("args = {{ {} }}\n", s.args.join(", ")));
        }
        if !s.outputs.is_empty() {
            let o: Vec<String> = s.outputs.iter().map(|(k, v)| format!("{k} = {}", quoted(v))).collect();
            text.push_str(&format!("outputs = {{ {} }}\n", o.join(", ")));
        }
        if extra_step_key == Some(i) {
            text.push_str("need = []\n");
        }
        text.push('\n');
    }
    for (id, step, op, value) in &rules {
        text.push_str(&format!(
            "[[validator.rules]]\nid = {}\nstep = {}\npointer = \"/failed\"\nop = {}\n",
            quoted(id),
            quoted(&steps[*step].id),
            quoted(op)
        ));
        if let Some(v) = value {
            text.push_str(&format!("value = {v}\n"));
        }
        text.push_str("finding = \"it failed\"\n\n");
    }

    match (expect, check_text(&text)) {
        (None, Ok(spec)) => {
            // The very graph generated.
            let got: Vec<(&str, &str, Vec<&str>)> = spec
                .steps
                .iter()
                .map(|s| (s.id.as_str(), s.tool.as_str(), s.needs.iter().map(String::as_str).collect()))
                .collect();
            let want: Vec<(&str, &str, Vec<&str>)> = steps
                .iter()
                .map(|s| (s.id.as_str(), s.tool.as_str(), s.needs.iter().map(|&d| steps[d].id.as_str()).collect()))
                .collect();
            assert_eq!(got, want, "{text}");
            assert_eq!(spec.rules.len(), rules.len(), "{text}");
        }
        (None, Err(p)) => panic!("a well-formed file was refused: {p}\n{text}"),
        (Some((field, step)), Err(p)) => {
            let named = p.0.iter().any(|e| {
                (field.is_empty() || e.field.as_deref() == Some(field))
                    && (step.is_none() || e.step == step)
                    && e.line.is_some()
            });
            assert!(named, "the refusal of a {fault:?} does not name `{field}` of {step:?} with a line: {p}\n{text}");
        }
        (Some(_), Ok(_)) => panic!("a file with a {fault:?} was accepted:\n{text}"),
    }
    Ok(())
}
