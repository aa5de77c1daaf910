//! The checks of a workflow file, one parser a section: the `[workflow]` header, the `[tools]`,
//! the `[[steps]]`, the step graph and the references between steps, and the validator's rules.
//! Each parser reports every problem it finds to the one `Checker` and returns what it could
//! read, so the sections after it are still checked.

use std::collections::BTreeMap;

use serde_json::Value;
use toml::Spanned;

use super::{
    DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT_SECS, JsonValue, Locator, MAX_MAX_ATTEMPTS, MAX_TIMEOUT_SECS,
    PIPELINE_OUTPUTS, RawMeta, RawRule, RawStep, RawTool, StepDef, ToolDef, ToolKind, WorkflowError, is_identifier,
    is_name, valid_outputs,
};
use crate::artifact::OutputDecl;
use crate::dag::{Dag, DagError};
use crate::status::{Outcome, RetryOn};
use crate::template::{self, ReferenceView, RootView};
use crate::validator::{Op, Rule};

/// Where a workflow file's problems are gathered, each with its file and line.
pub(super) struct Checker<'a> {
    pub(super) loc: Locator<'a>,
    pub(super) problems: Vec<WorkflowError>,
}

impl<'a> Checker<'a> {
    pub(super) fn new(loc: Locator<'a>) -> Self {
        Checker { loc, problems: Vec::new() }
    }

    /// A problem at byte `offset` of the file, in `field` (of `step`, if any).
    fn report(&mut self, offset: usize, step: Option<&str>, field: &str, message: impl Into<String>) {
        let problem = self.loc.err(Some(offset), step, Some(field), message);
        self.problems.push(problem);
    }

    // --- [workflow] ---

    /// The header's name and version; the version as semver prints it (or as written, if it is
    /// not one).
    pub(super) fn header(&mut self, meta: &RawMeta) -> String {
        if !is_name(meta.name.get_ref()) {
            self.report(
                meta.name.span().start,
                None,
                "workflow.name",
                format!("`{}` is not a valid workflow name; use lowercase letters, digits and `-`, starting with a letter or digit", meta.name.get_ref()),
            );
        }
        match semver::Version::parse(meta.version.get_ref()) {
            Ok(v) => v.to_string(),
            Err(e) => {
                self.report(
                    meta.version.span().start,
                    None,
                    "workflow.version",
                    format!("`{}` is not a semantic version ({e}); write it like \"1.2.0\"", meta.version.get_ref()),
                );
                meta.version.get_ref().clone()
            }
        }
    }

    // --- [tools] ---

    /// Every tool, by name.
    pub(super) fn tools(&mut self, raw: BTreeMap<String, Spanned<RawTool>>) -> BTreeMap<String, ToolDef> {
        raw.into_iter().map(|(name, tool)| (name.clone(), self.tool(name, tool))).collect()
    }

    /// One `[tools.<name>]` table. A tool of an unknown kind is kept unchecked: its steps are not
    /// checked against a kind it does not have.
    fn tool(&mut self, name: String, raw: Spanned<RawTool>) -> ToolDef {
        let at = raw.span().start;
        let t = raw.into_inner();
        if !is_identifier(&name) {
            self.report(at, None, &format!("tools.{name}"), "a tool name may use only letters, digits, `_` and `-`");
        }
        let Some(kind) = self.tool_kind(&name, t.kind.as_ref()) else {
            return ToolDef::unchecked(name);
        };
        let command = self.tool_command(&name, at, kind, t.command);
        let timeout_secs = self.tool_timeout(&name, t.timeout_secs.as_ref());
        self.check_tool_env(&name, at, &t.env);
        self.check_tool_secrets(&name, at, &t.secrets, &t.env);
        let outputs = self.tool_outputs(&name, at, kind, t.outputs);
        ToolDef { name, kind, command, timeout_secs, version: t.version, env: t.env, secrets: t.secrets, outputs }
    }

    /// The tool's kind (`process` when absent); `None` for a kind there is not.
    fn tool_kind(&mut self, name: &str, kind: Option<&Spanned<String>>) -> Option<ToolKind> {
        let Some(k) = kind else { return Some(ToolKind::Process) };
        match k.get_ref().as_str() {
            "process" => Some(ToolKind::Process),
            "snakemake" => Some(ToolKind::Snakemake),
            "nextflow" => Some(ToolKind::Nextflow),
            other => {
                self.report(
                    k.span().start,
                    None,
                    &format!("tools.{name}.kind"),
                    format!("`{other}` is not a tool kind; use `process` (the default), `snakemake` or `nextflow`"),
                );
                None
            }
        }
    }

    /// A process's argv (not empty, no NUL byte); a pipeline controller has none.
    fn tool_command(
        &mut self,
        name: &str,
        at: usize,
        kind: ToolKind,
        command: Option<Spanned<Vec<String>>>,
    ) -> Vec<String> {
        let field = format!("tools.{name}.command");
        let (command_at, command) = match (command, kind) {
            (Some(c), ToolKind::Process) => (c.span().start, c.into_inner()),
            (None, _) => (at, Vec::new()),
            (Some(c), _) => {
                self.report(
                    c.span().start,
                    None,
                    &field,
                    "a pipeline controller takes no command: Cairn runs it; its steps' args name the pipeline source (e.g. `snakefile`, `configfile`, `cores`)",
                );
                (at, Vec::new())
            }
        };
        if kind.is_process() && (command.is_empty() || command[0].is_empty()) {
            self.report(
                command_at,
                None,
                &field,
                "the command is empty; give an argv such as [\"python3\", \"tools/check.py\"]",
            );
        }
        if command.iter().any(|a| a.contains('\0')) {
            self.report(command_at, None, &field, "an argument contains a NUL byte");
        }
        command
    }

    /// The tool's timeout in seconds, within range.
    fn tool_timeout(&mut self, name: &str, timeout_secs: Option<&Spanned<i64>>) -> u64 {
        let Some(v) = timeout_secs else { return DEFAULT_TIMEOUT_SECS };
        let n = *v.get_ref();
        if n < 1 || n as u64 > MAX_TIMEOUT_SECS {
            self.report(
                v.span().start,
                None,
                &format!("tools.{name}.timeout_secs"),
                format!("{n} is out of range; use 1 to {MAX_TIMEOUT_SECS} seconds"),
            );
        }
        n.clamp(1, MAX_TIMEOUT_SECS as i64) as u64
    }

    /// The names of the environment variables the tool is given.
    fn check_tool_env(&mut self, name: &str, at: usize, env: &[String]) {
        for var in env {
            if var.is_empty() || var.contains('=') || var.contains('\0') {
                self.report(
                    at,
                    None,
                    &format!("tools.{name}.env"),
                    format!("`{var}` is not an environment variable name"),
                );
            }
        }
    }

    /// Its secrets: each a valid name, once, and not also passed through from the environment.
    fn check_tool_secrets(&mut self, name: &str, at: usize, secrets: &[String], env: &[String]) {
        let field = format!("tools.{name}.secrets");
        for (i, secret) in secrets.iter().enumerate() {
            if let Err(e) = crate::secret::check_name(secret) {
                self.report(at, None, &field, e.to_string());
            } else if secrets[..i].contains(secret) {
                self.report(at, None, &field, format!("secret `{secret}` is named twice"));
            } else if env.contains(secret) {
                self.report(
                    at,
                    None,
                    &field,
                    format!("`{secret}` is both a secret and in `env`: a secret's value comes from the secret provider, not the daemon's environment; remove it from `env`"),
                );
            }
        }
    }

    /// The tool's well-formed outputs, so its steps' references are checked against those; a
    /// pipeline controller declares none.
    fn tool_outputs(
        &mut self,
        name: &str,
        at: usize,
        kind: ToolKind,
        outputs: BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let field = format!("tools.{name}.outputs");
        let declared_any = !outputs.is_empty();
        let outputs = valid_outputs(outputs, |e| self.report(at, None, &field, e));
        if !kind.is_process() && declared_any {
            self.report(at, None, &field, PIPELINE_OUTPUTS);
        }
        outputs
    }

    // --- [[steps]] ---

    /// Every step, in file order.
    pub(super) fn steps(&mut self, raw: Vec<Spanned<RawStep>>, tools: &BTreeMap<String, ToolDef>) -> Vec<StepDef> {
        let mut steps = Vec::with_capacity(raw.len());
        for step in raw {
            steps.push(self.step(step, tools));
        }
        steps
    }

    /// One `[[steps]]` table, checked against its tool.
    fn step(&mut self, raw: Spanned<RawStep>, tools: &BTreeMap<String, ToolDef>) -> StepDef {
        let at = raw.span().start;
        let s = raw.into_inner();
        let id_at = s.id.span().start;
        let id = s.id.into_inner();
        if !is_identifier(&id) {
            self.report(id_at, Some(&id), "id", "a step id must be 1 to 128 letters, digits, `_` or `-`");
        }
        let tool = self.step_tool(&id, &s.tool, tools);
        let args = self.step_args(&id, s.args);
        let max_attempts = self.step_max_attempts(&id, s.max_attempts.as_ref());
        let retry_on = self.step_retry_on(&id, s.retry_on);
        let kind = tool.map(|t| t.kind).unwrap_or_default();
        self.check_controller_args(&id, at, kind, &args);
        let outputs = valid_outputs(s.outputs, |e| self.report(at, Some(&id), "outputs", e));
        if !kind.is_process() && !outputs.is_empty() {
            self.report(at, Some(&id), "outputs", PIPELINE_OUTPUTS);
        }
        self.check_outputs_disjoint(&id, at, tool, &outputs);
        StepDef {
            id,
            tool: s.tool.into_inner(),
            args,
            needs: s.needs,
            max_attempts,
            retry_on,
            outputs,
            line: self.loc.line(at),
        }
    }

    /// The step's tool, if it is declared.
    fn step_tool<'t>(
        &mut self,
        id: &str,
        tool: &Spanned<String>,
        tools: &'t BTreeMap<String, ToolDef>,
    ) -> Option<&'t ToolDef> {
        let found = tools.get(tool.get_ref());
        if found.is_none() {
            let known: Vec<&str> = tools.keys().map(String::as_str).collect();
            self.report(
                tool.span().start,
                Some(id),
                "tool",
                format!(
                    "unknown tool `{}`; declare it as [tools.{}] or use one of: {}",
                    tool.get_ref(),
                    tool.get_ref(),
                    if known.is_empty() { "(none declared)".to_string() } else { known.join(", ") }
                ),
            );
        }
        found
    }

    /// The step's args, a table (an empty one when absent or wrong).
    fn step_args(&mut self, id: &str, args: Option<Spanned<JsonValue>>) -> Value {
        let Some(a) = args else { return Value::Object(Default::default()) };
        let a_at = a.span().start;
        match a.into_inner().0 {
            Ok(v) if v.is_object() => v,
            Ok(_) => {
                self.report(a_at, Some(id), "args", "args must be a table, such as { suite = \"${input.tests}\" }");
                Value::Object(Default::default())
            }
            Err(e) => {
                self.report(a_at, Some(id), "args", e);
                Value::Object(Default::default())
            }
        }
    }

    /// How many attempts the step may take, within range.
    fn step_max_attempts(&mut self, id: &str, max_attempts: Option<&Spanned<i64>>) -> u32 {
        let Some(v) = max_attempts else { return DEFAULT_MAX_ATTEMPTS };
        let n = *v.get_ref();
        if n < 1 || n > MAX_MAX_ATTEMPTS as i64 {
            self.report(
                v.span().start,
                Some(id),
                "max_attempts",
                format!("{n} is out of range; use 1 to {MAX_MAX_ATTEMPTS}"),
            );
        }
        n.clamp(1, MAX_MAX_ATTEMPTS as i64) as u32
    }

    /// The outcome classes and causes the step is retried on, each once (a timeout when absent).
    fn step_retry_on(&mut self, id: &str, retry_on: Option<Spanned<Vec<String>>>) -> Vec<RetryOn> {
        let Some(v) = retry_on else { return vec![RetryOn::Outcome(Outcome::TimedOut)] };
        let v_at = v.span().start;
        let mut out = Vec::new();
        for name in v.into_inner() {
            match name.parse::<RetryOn>() {
                Err(e) => self.report(v_at, Some(id), "retry_on", e.to_string()),
                Ok(RetryOn::Outcome(Outcome::Completed)) => {
                    self.report(v_at, Some(id), "retry_on", "COMPLETED is not a failure and cannot be retried")
                }
                Ok(r) if !out.contains(&r) => out.push(r),
                Ok(_) => {}
            }
        }
        out
    }

    /// A controller's argument names are checked now, and its args whole when they hold no
    /// template: a bad one is never registered.
    fn check_controller_args(&mut self, id: &str, at: usize, kind: ToolKind, args: &Value) {
        if kind.is_process() {
            return;
        }
        let checked = crate::controller::check_keys(kind, args).and_then(|_| {
            if args.to_string().contains("${") {
                Ok(())
            } else {
                crate::controller::controller_argv(kind, args, "/", None).map(|_| ())
            }
        });
        if let Err(e) = checked {
            self.report(at, Some(id), "args", e.to_string());
        }
    }

    /// One file is one artifact: no two outputs of a step (its own and its tool's) may cover the
    /// same path.
    fn check_outputs_disjoint(
        &mut self,
        id: &str,
        at: usize,
        tool: Option<&ToolDef>,
        outputs: &BTreeMap<String, String>,
    ) {
        let mut declared: BTreeMap<&String, &String> = BTreeMap::new();
        if let Some(tool) = tool {
            declared.extend(tool.outputs.iter());
        }
        declared.extend(outputs.iter());
        let decls: Vec<OutputDecl> =
            declared.iter().filter_map(|(name, path)| OutputDecl::parse(name, path).ok()).collect();
        for (k, a) in decls.iter().enumerate() {
            if let Some(b) = decls[k + 1..].iter().find(|b| a.overlaps(b)) {
                self.report(
                    at,
                    Some(id),
                    "outputs",
                    format!(
                        "outputs `{}` ({}) and `{}` ({}) cover the same files; give each output its own path",
                        a.name,
                        a.declared(),
                        b.name,
                        b.declared()
                    ),
                );
                break;
            }
        }
    }

    // --- the step graph ---

    /// The step graph, if the steps make one; the references and the rules are checked against
    /// it.
    pub(super) fn step_graph(&mut self, steps: &[StepDef]) -> Option<Dag> {
        if steps.is_empty() {
            return None;
        }
        let e = match Dag::build(steps.iter().map(|s| (s.id.as_str(), s.needs.iter().map(String::as_str)))) {
            Ok(dag) => return Some(dag),
            Err(e) => e,
        };
        let (step, field) = match &e {
            DagError::EmptyId { .. } => (None, Some("id")),
            DagError::DuplicateId { id } => (Some(id.clone()), Some("id")),
            DagError::MissingDependency { step, .. }
            | DagError::DuplicateDependency { step, .. }
            | DagError::SelfDependency { step } => (Some(step.clone()), Some("needs")),
            DagError::Cycle { cycle } => (cycle.first().cloned(), Some("needs")),
        };
        let line = match &e {
            // The second declaration is the one to fix.
            DagError::DuplicateId { id } => steps.iter().filter(|s| &s.id == id).nth(1).map(|s| s.line),
            _ => step.as_deref().and_then(|id| steps.iter().find(|s| s.id == id).map(|s| s.line)),
        };
        self.problems.push(WorkflowError {
            file: self.loc.file.to_string(),
            line,
            step,
            field: field.map(str::to_string),
            message: e.to_string(),
        });
        None
    }

    /// Every `${…}` of every step's args: a well-formed template naming an ancestor step (and
    /// an output it declares). Without a step graph only the templates' syntax is checked.
    pub(super) fn check_references(&mut self, steps: &[StepDef], tools: &BTreeMap<String, ToolDef>, dag: Option<&Dag>) {
        for (i, step) in steps.iter().enumerate() {
            let at_step = |message: String| WorkflowError {
                file: self.loc.file.to_string(),
                line: Some(step.line),
                step: Some(step.id.clone()),
                field: Some("args".into()),
                message,
            };
            // The references' problems are reported only if the args have no template error
            // (which is then the step's one problem), so they wait in `found` until the whole
            // scan is done.
            let mut found = Vec::new();
            let scanned = template::for_each_reference(&step.args, &mut |pointer, r| {
                let Some(dag) = dag else { return };
                found.extend(reference_problem(dag, steps, tools, i, pointer, &r));
            });
            let step_problems: Vec<WorkflowError> = match scanned {
                Ok(()) => found.into_iter().map(at_step).collect(),
                Err(e) => vec![at_step(e.to_string())],
            };
            self.problems.extend(step_problems);
        }
    }

    // --- [validator] ---

    /// Every rule that reads as one, in file order; a rule's step is checked only when there is
    /// a step graph.
    pub(super) fn rules(&mut self, raw: Vec<Spanned<RawRule>>, steps: &[StepDef], has_graph: bool) -> Vec<Rule> {
        let mut rules = Vec::new();
        for raw_rule in raw {
            if let Some(rule) = self.rule(raw_rule, &rules, steps, has_graph) {
                rules.push(rule);
            }
        }
        rules
    }

    /// One `[[validator.rules]]` table; `None` when its op or value cannot be read.
    fn rule(&mut self, raw: Spanned<RawRule>, earlier: &[Rule], steps: &[StepDef], has_graph: bool) -> Option<Rule> {
        let at = raw.span().start;
        let r = raw.into_inner();
        let field = |f: &str| format!("validator.rules[{}].{f}", r.id.get_ref());
        if r.id.get_ref().is_empty() || earlier.iter().any(|x| &x.id == r.id.get_ref()) {
            self.report(r.id.span().start, None, &field("id"), "rule ids must be non-empty and unique");
        }
        if has_graph && !steps.iter().any(|s| &s.id == r.step.get_ref()) {
            self.report(r.step.span().start, None, &field("step"), format!("unknown step `{}`", r.step.get_ref()));
        }
        let pointer = r.pointer.get_ref();
        if !(pointer.is_empty() || pointer.starts_with('/')) {
            self.report(
                r.pointer.span().start,
                None,
                &field("pointer"),
                format!("`{pointer}` is not a JSON Pointer; write it like \"/failed\" (or \"\" for the whole result)"),
            );
        }
        let op = match Op::parse(r.op.get_ref()) {
            Ok(op) => op,
            Err(e) => {
                self.report(r.op.span().start, None, &field("op"), e.to_string());
                return None;
            }
        };
        let value = match r.value.map(|v| v.0).transpose() {
            Ok(v) => v,
            Err(e) => {
                self.report(at, None, &field("value"), e);
                return None;
            }
        };
        if let Some(message) = rule_value_problem(r.op.get_ref(), op, value.as_ref()) {
            self.report(at, None, &field("value"), message);
            return None;
        }
        Some(Rule {
            id: r.id.into_inner(),
            step: r.step.into_inner(),
            pointer: r.pointer.into_inner(),
            op,
            value,
            finding: r.finding,
        })
    }
}

/// What is wrong with one reference `r` (at `pointer` of step `i`'s args), if anything: the step
/// it names must be an ancestor, and the output it names one that step declares.
fn reference_problem(
    dag: &Dag,
    steps: &[StepDef],
    tools: &BTreeMap<String, ToolDef>,
    i: usize,
    pointer: &str,
    r: &ReferenceView<'_>,
) -> Option<String> {
    let (target, output) = match r.root {
        RootView::Input => return None,
        RootView::Step(target) => (target, None),
        RootView::Output { step, name } => (step, Some(name)),
    };
    match dag.index_of(target) {
        None => Some(format!("`${{{}}}` at `{pointer}` references unknown step `{target}`", r.text)),
        Some(t) if t == i => Some(format!("`${{{}}}` at `{pointer}` references the step itself", r.text)),
        Some(t) if !dag.is_ancestor(t, i) => Some(format!(
            "`${{{}}}` at `{pointer}` references step `{target}`, which is not an ancestor; add \"{target}\" to `needs`",
            r.text
        )),
        Some(t) => output.and_then(|name| {
            let upstream = &steps[t];
            let declared: Vec<String> = tools
                .get(&upstream.tool)
                .map(|tool| tool.outputs.keys().chain(upstream.outputs.keys()).cloned().collect())
                .unwrap_or_default();
            (!declared.iter().any(|d| d == name)).then(|| {
                format!(
                    "`${{{}}}` at `{pointer}` names output `{name}`, which step `{target}` does not declare; {}",
                    r.text,
                    if declared.is_empty() {
                        format!("declare it with `outputs = {{ {name} = \"…\" }}` on the step or its tool")
                    } else {
                        format!("it declares: {}", declared.join(", "))
                    }
                )
            })
        }),
    }
}

/// Whether a rule's value fits its op (`op_text` as written): present exactly when the op takes
/// one, an array for `in`.
fn rule_value_problem(op_text: &str, op: Op, value: Option<&Value>) -> Option<String> {
    match (value, op.takes_value()) {
        (None, true) => Some(format!("op `{op_text}` needs a `value`")),
        (Some(_), false) => Some(format!("op `{op_text}` takes no `value`; remove it")),
        (Some(v), _) if op == Op::In && !v.is_array() => Some("op `in` needs an array `value`".to_string()),
        _ => None,
    }
}
