//! The selective replay planner: for every step of the target workflow, whether the child run
//! reuses the source's evidence or re-executes the step, and why — as data, so every surface can
//! show the same reason.
//!
//! The rules, in order: requested steps and all their descendants re-execute; an unselected step
//! is reused only when its source step completed and its step id, tool, tool digest and args hash
//! equal the target's; a missing or incompatible source step is invalidated with all its
//! descendants. Reuse therefore needs every ancestor reused, which is what lets the planner
//! resolve a reused step's arguments from the source's own results.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::artifact::{Artifact, signed_output};
use crate::canonical::hash_json;
use crate::dag::Dag;
use crate::signature::{StepSignature, args_hash, step_tool_digest};
use crate::status::StepStatus;
use crate::template;
use crate::workflow::WorkflowSpec;

/// A source run's step, as the planner needs it.
#[derive(Debug, Clone)]
pub struct SourceStep<'a> {
    pub status: StepStatus,
    pub signature: &'a StepSignature,
    pub args: &'a Value,
    pub result: Option<&'a Value>,
    /// The files it recorded (those of its declared outputs).
    pub artifacts: &'a [Artifact],
}

/// A source step's recorded output whose bytes are no longer what was recorded, as the engine
/// found it where the source run wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputDamage {
    /// The declared output.
    pub output: String,
    /// The file, relative to the source's run directory.
    pub path: String,
    pub recorded: String,
    pub found: Found,
}

/// A file a source pipeline step read (an absolute path its arguments named, hashed when it
/// started) whose bytes are no longer those it read, as the engine found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputDamage {
    /// The file's absolute path where the step ran.
    pub path: String,
    pub recorded: String,
    pub found: Found,
}

/// Why a source step cannot stand for its bytes any more: a file it recorded, or a file it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    Output(OutputDamage),
    Input(InputDamage),
}

/// What is at a recorded artifact's path now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Found {
    /// Other bytes.
    Changed { sha256: String },
    /// Nothing (or not a regular file).
    Missing,
    /// It cannot be reached from where the child runs, in words.
    Unreachable { why: String },
}

/// One changed argument: where, and the hashes of its canonical old and new values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArgChange {
    pub pointer: String,
    /// `None` when the argument did not exist on that side.
    pub old_hash: Option<String>,
    pub new_hash: Option<String>,
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Found::Changed { sha256 } => write!(f, "sha256 {sha256}"),
            Found::Missing => write!(f, "missing"),
            Found::Unreachable { why } => write!(f, "{why}"),
        }
    }
}

/// Why a step is reused or re-executed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reason {
    /// The source step's signature equals the target's.
    SignatureEqual {
        source_run_id: String,
    },
    Requested,
    DescendantOfRequested {
        step: String,
    },
    AncestorInvalidated {
        step: String,
    },
    SourceMissing,
    SourceNotCompleted {
        status: StepStatus,
    },
    ToolChanged {
        from: String,
        to: String,
    },
    /// The tool's definition or files changed; `changes` says which, in words.
    ToolDigestChanged {
        from: String,
        to: String,
        changes: Vec<String>,
    },
    ArgsChanged {
        from: String,
        to: String,
        changes: Vec<ArgChange>,
        more: usize,
    },
    /// The target's arguments could not be resolved from the source's results.
    ArgsUnresolved {
        error: String,
    },
    /// A file the source step recorded is not the bytes it recorded.
    OutputChanged {
        step: String,
        source_run_id: String,
        #[serde(flatten)]
        damage: OutputDamage,
    },
    /// A file the source step read (bound by its arguments) is not the bytes it read.
    InputChanged {
        step: String,
        source_run_id: String,
        #[serde(flatten)]
        damage: InputDamage,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Reuse,
    Replay,
}

impl Decision {
    /// As its JSON names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Reuse => "reuse",
            Decision::Replay => "replay",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepDecision {
    pub step_id: String,
    pub decision: Decision,
    pub reason: Reason,
}

impl StepDecision {
    /// Whether the step re-executes because it was found incompatible (or below such a step),
    /// rather than because it was asked for.
    pub fn is_invalidated(&self) -> bool {
        self.decision == Decision::Replay
            && !matches!(self.reason, Reason::Requested | Reason::DescendantOfRequested { .. })
    }
}

use crate::canonical::short_hash as short;

impl Reason {
    /// The reason in plain words.
    pub fn text(&self) -> String {
        match self {
            Reason::SignatureEqual { source_run_id } => format!("reused from run {source_run_id} (signature equal)"),
            Reason::Requested => "requested".into(),
            Reason::DescendantOfRequested { step } => format!("descendant of requested step {step}"),
            Reason::AncestorInvalidated { step } => format!("invalidated: ancestor {step} invalidated"),
            Reason::SourceMissing => "invalidated: the source run has no such step".into(),
            Reason::SourceNotCompleted { status } => format!("invalidated: source step {status}"),
            Reason::ToolChanged { from, to } => format!("invalidated: tool changed from `{from}` to `{to}`"),
            Reason::ToolDigestChanged { from, to, changes } => {
                if changes.is_empty() {
                    format!("invalidated: tool definition changed (digest {}… → {}…)", short(from), short(to))
                } else {
                    format!("invalidated: {}", changes.join("; "))
                }
            }
            Reason::ArgsChanged { from, to, changes, more } => {
                let parts: Vec<String> = changes
                    .iter()
                    .map(|c| match (&c.old_hash, &c.new_hash) {
                        (Some(o), Some(n)) => {
                            format!("argument `{}` changed (hash {}… → {}…)", c.pointer, short(o), short(n))
                        }
                        (None, Some(_)) => format!("argument `{}` added", c.pointer),
                        (Some(_), None) => format!("argument `{}` removed", c.pointer),
                        (None, None) => format!("argument `{}` changed", c.pointer),
                    })
                    .collect();
                let mut text = if parts.is_empty() {
                    format!("invalidated: arguments changed (hash {}… → {}…)", short(from), short(to))
                } else {
                    format!("invalidated: {}", parts.join(", "))
                };
                if *more > 0 {
                    text.push_str(&format!(" and {more} more"));
                }
                text
            }
            Reason::ArgsUnresolved { error } => format!("invalidated: arguments could not be resolved: {error}"),
            Reason::OutputChanged { step, source_run_id, damage } => {
                let OutputDamage { output, path, recorded, found } = damage;
                match found {
                    Found::Changed { sha256 } => format!(
                        "invalidated: output {output} of step {step} changed since run {source_run_id} recorded it (sha256 {}… → {}…)",
                        short(recorded),
                        short(sha256)
                    ),
                    Found::Missing => format!(
                        "invalidated: output {output} of step {step} is missing since run {source_run_id} recorded it ({path})"
                    ),
                    Found::Unreachable { why } => {
                        format!(
                            "invalidated: output {output} of step {step} (run {source_run_id}) cannot be reused: {why}"
                        )
                    }
                }
            }
            Reason::InputChanged { step, source_run_id, damage } => {
                let InputDamage { path, recorded, found } = damage;
                match found {
                    Found::Changed { sha256 } => format!(
                        "invalidated: input file {path} of step {step} changed since run {source_run_id} read it (sha256 {}… → {}…)",
                        short(recorded),
                        short(sha256)
                    ),
                    Found::Missing => {
                        format!(
                            "invalidated: input file {path} of step {step} is missing since run {source_run_id} read it"
                        )
                    }
                    Found::Unreachable { why } => {
                        format!(
                            "invalidated: input file {path} of step {step} (run {source_run_id}) cannot be checked: {why}"
                        )
                    }
                }
            }
        }
    }
}

/// At most this many changed pointers are listed per step; the rest are counted.
pub const MAX_LISTED_CHANGES: usize = 5;

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The JSON pointers where two argument trees differ, at the deepest level both sides share.
pub fn diff_args(old: &Value, new: &Value) -> Vec<ArgChange> {
    fn hash(v: &Value) -> Option<String> {
        hash_json(v).ok()
    }
    fn go(old: Option<&Value>, new: Option<&Value>, pointer: &mut String, out: &mut Vec<ArgChange>) {
        match (old, new) {
            (Some(Value::Object(a)), Some(Value::Object(b))) => {
                let mut keys: Vec<&String> = a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))).collect();
                keys.sort();
                for k in keys {
                    let len = pointer.len();
                    pointer.push('/');
                    pointer.push_str(&escape(k));
                    go(a.get(k), b.get(k), pointer, out);
                    pointer.truncate(len);
                }
            }
            (Some(Value::Array(a)), Some(Value::Array(b))) if a.len() == b.len() => {
                for (i, (x, y)) in a.iter().zip(b).enumerate() {
                    let len = pointer.len();
                    pointer.push_str(&format!("/{i}"));
                    go(Some(x), Some(y), pointer, out);
                    pointer.truncate(len);
                }
            }
            (o, n) => {
                let (oh, nh) = (o.and_then(hash), n.and_then(hash));
                if oh != nh {
                    out.push(ArgChange { pointer: pointer.clone(), old_hash: oh, new_hash: nh });
                }
            }
        }
    }
    let mut out = Vec::new();
    go(Some(old), Some(new), &mut String::new(), &mut out);
    out
}

/// Everything the planner reads. The engine gathers it; nothing here does IO.
pub struct ReplayInput<'a> {
    pub spec: &'a WorkflowSpec,
    pub dag: &'a Dag,
    /// The target's tool digests, by tool name.
    pub tool_digests: &'a HashMap<String, String>,
    pub input: &'a Value,
    /// The source run's input.
    pub source_input: &'a Value,
    /// Whether the target workflow is the very definition the source ran (same name@version).
    pub same_definition: bool,
    pub source_run_id: &'a str,
    pub source: &'a HashMap<String, SourceStep<'a>>,
    /// Requested step ids, already checked to exist.
    pub requested: &'a [String],
    /// Explains a tool digest change in words (which file or field changed), given the tool name.
    pub explain_tool: &'a dyn Fn(&str) -> Vec<String>,
    /// Source steps whose recorded files, or the files they read, are no longer those bytes (the
    /// engine checks those a first plan reuses, then plans again with what it found).
    pub damaged: &'a HashMap<String, Damage>,
}

/// The decision for every step, in execution order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayPlan {
    pub source_run_id: String,
    /// Requested step ids, deduplicated, in declaration order.
    pub requested: Vec<String>,
    pub decisions: Vec<StepDecision>,
}

/// Normalises requested step ids: a set, in declaration order. `Err` names the unknown ids.
pub fn normalise_requested(dag: &Dag, ids: &[String]) -> Result<Vec<String>, Vec<String>> {
    let unknown: Vec<String> = ids.iter().filter(|id| dag.index_of(id).is_none()).cloned().collect();
    if !unknown.is_empty() {
        return Err(unknown);
    }
    let mut idx: Vec<usize> = ids.iter().filter_map(|id| dag.index_of(id)).collect();
    idx.sort_unstable();
    idx.dedup();
    Ok(idx.into_iter().map(|i| dag.id(i).to_string()).collect())
}

pub fn plan<'a>(r: &ReplayInput<'a>) -> ReplayPlan {
    let n = r.dag.len();
    let mut requested = vec![false; n];
    for id in r.requested {
        if let Some(i) = r.dag.index_of(id) {
            requested[i] = true;
        }
    }
    // For each replayed step, the requested step that forces it (if any) — so a descendant of
    // both a requested and an invalidated step is reported as a descendant of the requested one.
    let mut forced_by: Vec<Option<usize>> = vec![None; n];
    let mut decisions: Vec<Option<StepDecision>> = vec![None; n];
    let mut reused_results: HashMap<&str, &Value> = HashMap::new();
    let input_unchanged = r.input == r.source_input;
    // Reuse makes the source's result the one descendants resolve their arguments against.
    let reuse = |id: &'a str, src: &SourceStep<'a>, results: &mut HashMap<&'a str, &'a Value>| {
        if let Some(result) = src.result {
            results.insert(id, result);
        }
        StepDecision {
            step_id: id.to_string(),
            decision: Decision::Reuse,
            reason: Reason::SignatureEqual { source_run_id: r.source_run_id.to_string() },
        }
    };

    for &i in r.dag.order() {
        let id = r.dag.id(i);
        let step = &r.spec.steps[i];
        let replay = |reason| Some(StepDecision { step_id: id.to_string(), decision: Decision::Replay, reason });
        if requested[i] {
            forced_by[i] = Some(i);
            decisions[i] = replay(Reason::Requested);
            continue;
        }
        if let Some(&p) = r.dag.needs(i).iter().find(|&&p| forced_by[p].is_some()) {
            let root = forced_by[p].unwrap_or(p);
            forced_by[i] = Some(root);
            decisions[i] = replay(Reason::DescendantOfRequested { step: r.dag.id(root).to_string() });
            continue;
        }
        if let Some(&p) =
            r.dag.needs(i).iter().find(|&&p| decisions[p].as_ref().is_some_and(|d| d.decision == Decision::Replay))
        {
            decisions[i] = replay(Reason::AncestorInvalidated { step: r.dag.id(p).to_string() });
            continue;
        }
        let Some(src) = r.source.get(id) else {
            decisions[i] = replay(Reason::SourceMissing);
            continue;
        };
        if src.status != StepStatus::Completed {
            decisions[i] = replay(Reason::SourceNotCompleted { status: src.status });
            continue;
        }
        if src.signature.tool != step.tool {
            decisions[i] = replay(Reason::ToolChanged { from: src.signature.tool.clone(), to: step.tool.clone() });
            continue;
        }
        let tool_digest = r.tool_digests.get(&step.tool).map(String::as_str).unwrap_or_default();
        let digest = step_tool_digest(tool_digest, &r.spec.outputs_of(step));
        if src.signature.tool_digest != digest {
            decisions[i] = replay(Reason::ToolDigestChanged {
                from: src.signature.tool_digest.clone(),
                to: digest,
                changes: (r.explain_tool)(&step.tool),
            });
            continue;
        }
        if let Some(damage) = r.damaged.get(id) {
            let (step, source_run_id) = (id.to_string(), r.source_run_id.to_string());
            decisions[i] = replay(match damage.clone() {
                Damage::Output(damage) => Reason::OutputChanged { step, source_run_id, damage },
                Damage::Input(damage) => Reason::InputChanged { step, source_run_id, damage },
            });
            continue;
        }
        // Same definition, same input, and every ancestor reused (so its results are the source's
        // own): the step's resolved arguments are the source's, with no need to resolve them.
        if r.same_definition && input_unchanged {
            decisions[i] = Some(reuse(id, src, &mut reused_results));
            continue;
        }
        // An ancestor's output signs as the digest of the bytes the source recorded of it (the
        // ancestor is reused, so those are the bytes this step would read).
        let output = |dep: &str, name: &str| {
            let dep_step = r.dag.index_of(dep).map(|d| &r.spec.steps[d])?;
            let src = r.source.get(dep).filter(|_| reused_results.contains_key(dep))?;
            signed_output(&r.spec.outputs_of(dep_step), dep, name, src.artifacts)
        };
        let upstream = template::Upstream { result: &|dep| reused_results.get(dep).copied(), output: &output };
        let args = match template::resolve_with(&step.args, r.input, &upstream) {
            Ok(a) => a,
            Err(e) => {
                decisions[i] = replay(Reason::ArgsUnresolved { error: e.to_string() });
                continue;
            }
        };
        // Equal argument trees hash equally, and comparing is far cheaper than canonicalising and
        // hashing; only a difference needs the hash (equal hashes can still hide, e.g., 1 vs 1.0).
        let hash = if &args == src.args {
            src.signature.args_hash.clone()
        } else {
            match args_hash(&args) {
                Ok(h) => h,
                Err(e) => {
                    decisions[i] = replay(Reason::ArgsUnresolved { error: e.to_string() });
                    continue;
                }
            }
        };
        if hash != src.signature.args_hash {
            let mut changes = diff_args(src.args, &args);
            let more = changes.len().saturating_sub(MAX_LISTED_CHANGES);
            changes.truncate(MAX_LISTED_CHANGES);
            decisions[i] =
                replay(Reason::ArgsChanged { from: src.signature.args_hash.clone(), to: hash, changes, more });
            continue;
        }
        decisions[i] = Some(reuse(id, src, &mut reused_results));
    }

    ReplayPlan {
        source_run_id: r.source_run_id.to_string(),
        requested: r.requested.to_vec(),
        decisions: r.dag.order().iter().filter_map(|&i| decisions[i].take()).collect(),
    }
}

/// One step's replay decision as recorded, in a replay child (`runs.replay_json`) and in a replay
/// plan: the reason, and that reason in words as it was written (kept as written, so a plan
/// hashes as it was made).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionRecord {
    pub step_id: String,
    pub decision: Decision,
    pub reason: Reason,
    pub text: String,
}

impl DecisionRecord {
    pub fn of(d: &StepDecision) -> DecisionRecord {
        DecisionRecord {
            step_id: d.step_id.clone(),
            decision: d.decision,
            reason: d.reason.clone(),
            text: d.reason.text(),
        }
    }
}

/// What a replay child keeps of its replay: the summary, and each step's decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayRecord {
    #[serde(flatten)]
    pub summary: ReplaySummary,
    #[serde(default)]
    pub decisions: Vec<DecisionRecord>,
}

impl ReplayRecord {
    /// The decision recorded for `step_id`.
    pub fn decision(&self, step_id: &str) -> Option<&DecisionRecord> {
        self.decisions.iter().find(|d| d.step_id == step_id)
    }
}

/// The replay summary every surface reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplaySummary {
    pub source_run_id: String,
    pub requested: Vec<String>,
    pub replayed: Vec<String>,
    pub reused: Vec<String>,
    pub invalidated: Vec<String>,
}

impl ReplayPlan {
    pub fn decision(&self, step_id: &str) -> Option<&StepDecision> {
        self.decisions.iter().find(|d| d.step_id == step_id)
    }

    /// Lists in declaration order.
    pub fn summary(&self, dag: &Dag) -> ReplaySummary {
        let mut ordered: Vec<&StepDecision> = self.decisions.iter().collect();
        ordered.sort_by_key(|d| dag.index_of(&d.step_id).unwrap_or(usize::MAX));
        let pick =
            |f: &dyn Fn(&StepDecision) -> bool| ordered.iter().filter(|d| f(d)).map(|d| d.step_id.clone()).collect();
        ReplaySummary {
            source_run_id: self.source_run_id.clone(),
            requested: self.requested.clone(),
            replayed: pick(&|d| d.decision == Decision::Replay),
            reused: pick(&|d| d.decision == Decision::Reuse),
            invalidated: pick(&|d| d.is_invalidated()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::parse_workflow;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn diff_finds_the_deepest_changed_pointers() {
        let old = json!({"suite": {"cases": [{"s": "pass"}, {"s": "pass"}]}, "n": 1, "gone": true});
        let new = json!({"suite": {"cases": [{"s": "pass"}, {"s": "fail"}]}, "n": 1, "new": 2});
        let ptrs: Vec<String> = diff_args(&old, &new).into_iter().map(|c| c.pointer).collect();
        assert_eq!(ptrs, ["/gone", "/new", "/suite/cases/1/s"]);
        let changes = diff_args(&json!({"a": [1]}), &json!({"a": [1, 2]}));
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].pointer, "/a");
    }

    /// A random DAG as a workflow: step i needs a random subset of earlier steps and passes the
    /// input field `f<i>` plus its needs' results as arguments.
    fn workflow(n: usize, edges: &[(usize, usize)]) -> WorkflowSpec {
        let mut text = String::from("[workflow]\nname = \"p\"\nversion = \"1.0.0\"\n[tools.t]\ncommand = [\"t\"]\n");
        for i in 0..n {
            let needs: Vec<usize> = {
                let mut v: Vec<usize> = edges.iter().filter(|(a, b)| *b == i && *a < i).map(|(a, _)| *a).collect();
                v.sort();
                v.dedup();
                v
            };
            let needs_list: Vec<String> = needs.iter().map(|d| format!("\"s{d}\"")).collect();
            let mut args = vec![format!("f = \"${{input.f{i}}}\"")];
            args.extend(needs.iter().map(|d| format!("r{d} = \"${{steps.s{d}.result}}\"")));
            text.push_str(&format!(
                "[[steps]]\nid = \"s{i}\"\ntool = \"t\"\nneeds = [{}]\nargs = {{ {} }}\n",
                needs_list.join(", "),
                args.join(", ")
            ));
        }
        parse_workflow(&text, "p.toml").unwrap()
    }

    proptest! {
        #[test]
        fn replay_partitions_the_dag_soundly(
            n in 1usize..25,
            edges in prop::collection::vec((0usize..25, 0usize..25), 0..60),
            requested in prop::collection::vec(0usize..25, 0..4),
            changed in prop::collection::vec(0usize..25, 0..4),
            damaged in prop::collection::vec(0usize..25, 0..3),
            same_def in any::<bool>(),
        ) {
            let spec = workflow(n, &edges);
            let dag = spec.dag().unwrap();
            let digests: HashMap<String, String> = [("t".to_string(), "d".to_string())].into();
            let source_input = Value::Object((0..n).map(|i| (format!("f{i}"), json!(i))).collect());
            let mut input = source_input.clone();
            for c in &changed {
                if *c < n { input[format!("f{c}")] = json!("changed"); }
            }
            // The source run: every step completed with result = its index.
            let mut results: HashMap<String, Value> = HashMap::new();
            let mut rows: Vec<(String, StepSignature, Value)> = Vec::new();
            for &i in dag.order() {
                let step = &spec.steps[i];
                let args = template::resolve(&step.args, &source_input, &|d| results.get(d)).unwrap();
                let sig = StepSignature { tool: "t".into(), tool_digest: "d".into(), args_hash: args_hash(&args).unwrap() };
                results.insert(step.id.clone(), json!(i));
                rows.push((step.id.clone(), sig, args));
            }
            let source: HashMap<String, SourceStep> = rows.iter().map(|(id, sig, args)| {
                (id.clone(), SourceStep { status: StepStatus::Completed, signature: sig, args, result: results.get(id), artifacts: &[] })
            }).collect();
            let damage = Damage::Output(OutputDamage { output: "o".into(), path: "steps/x/o".into(), recorded: "aa".into(), found: Found::Missing });
            let damaged_map: HashMap<String, Damage> =
                damaged.iter().filter(|d| **d < n).map(|d| (format!("s{d}"), damage.clone())).collect();
            let req_ids: Vec<String> = requested.iter().filter(|r| **r < n).map(|r| format!("s{r}")).collect();
            let req = normalise_requested(&dag, &req_ids).unwrap();
            let p = plan(&ReplayInput {
                spec: &spec, dag: &dag, tool_digests: &digests, input: &input, source_input: &source_input,
                same_definition: same_def, source_run_id: "src",
                source: &source, requested: &req, explain_tool: &|_| vec![], damaged: &damaged_map,
            });
            let s = p.summary(&dag);
            // replayed ∪ reused = all steps, disjoint
            prop_assert_eq!(s.replayed.len() + s.reused.len(), n);
            for id in &s.reused { prop_assert!(!s.replayed.contains(id)); }
            let is_replayed = |i: usize| s.replayed.contains(&dag.id(i).to_string());
            for i in 0..n {
                // replayed is closed under descendants; every reused step's ancestors are reused
                if is_replayed(i) { for &c in dag.children(i) { prop_assert!(is_replayed(c)); } }
                else { for &d in dag.needs(i) { prop_assert!(!is_replayed(d)); } }
            }
            // every requested step is replayed; a step whose own input changed is replayed
            for r in &req { prop_assert!(s.replayed.contains(r)); }
            for c in &changed { if *c < n { prop_assert!(is_replayed(*c)); } }
            // a step is reused exactly when nothing upstream of it (itself included) was requested,
            // changed or damaged
            for i in 0..n {
                let touched = dag.descendants_closure(req.iter().filter_map(|r| dag.index_of(r))
                    .chain(changed.iter().copied().filter(|c| *c < n))
                    .chain(damaged.iter().copied().filter(|c| *c < n)));
                prop_assert_eq!(is_replayed(i), touched[i]);
            }
        }
    }

    #[test]
    fn reasons_read_as_plain_words() {
        let r = Reason::ArgsChanged {
            from: "a".repeat(64),
            to: "b".repeat(64),
            changes: vec![ArgChange {
                pointer: "/suite".into(),
                old_hash: Some("a1b2".repeat(16)),
                new_hash: Some("c3d4".repeat(16)),
            }],
            more: 0,
        };
        assert_eq!(r.text(), "invalidated: argument `/suite` changed (hash a1b2a1b2a1b2… → c3d4c3d4c3d4…)");
        assert_eq!(Reason::DescendantOfRequested { step: "x".into() }.text(), "descendant of requested step x");
        assert_eq!(Reason::SignatureEqual { source_run_id: "R".into() }.text(), "reused from run R (signature equal)");
        assert_eq!(Reason::SourceNotCompleted { status: StepStatus::Failed }.text(), "invalidated: source step FAILED");
        let changed = |found| Reason::OutputChanged {
            step: "render".into(),
            source_run_id: "R".into(),
            damage: OutputDamage {
                output: "report".into(),
                path: "steps/render/report.html".into(),
                recorded: "a1".repeat(32),
                found,
            },
        };
        assert_eq!(
            changed(Found::Changed { sha256: "c3".repeat(32) }).text(),
            "invalidated: output report of step render changed since run R recorded it (sha256 a1a1a1a1a1a1… → c3c3c3c3c3c3…)"
        );
        assert_eq!(
            changed(Found::Missing).text(),
            "invalidated: output report of step render is missing since run R recorded it (steps/render/report.html)"
        );
    }

    /// `render` writes a report; `publish` reads it by `${steps.render.outputs.report}`. Under
    /// another version (so arguments are resolved again) the report signs as the digest of the
    /// bytes the source recorded, which is what `publish` was signed with: it is reused. A
    /// damaged report invalidates `render` and, below it, `publish`.
    #[test]
    fn outputs_sign_as_their_recorded_bytes_and_damage_invalidates_the_producer() {
        let text = r#"
[workflow]
name = "o"
version = "1.0.0"
[tools.t]
command = ["t"]
[[steps]]
id = "render"
tool = "t"
outputs = { report = "report.html" }
[[steps]]
id = "publish"
tool = "t"
needs = ["render"]
args = { report = "${steps.render.outputs.report}" }
"#;
        let spec = parse_workflow(text, "o.toml").unwrap();
        let dag = spec.dag().unwrap();
        let digests: HashMap<String, String> = [("t".to_string(), "d".to_string())].into();
        let report = Artifact {
            name: "report".into(),
            path: "steps/render/report.html".into(),
            bytes: 3,
            sha256: "ab".repeat(32),
            link: None,
        };
        let artifacts = vec![report];
        let render_digest = step_tool_digest("d", &spec.outputs_of(&spec.steps[0]));
        let render_args = json!({});
        let publish_args = json!({"report": format!("sha256:{}", "ab".repeat(32))});
        let render_sig =
            StepSignature { tool: "t".into(), tool_digest: render_digest, args_hash: args_hash(&render_args).unwrap() };
        let publish_sig =
            StepSignature { tool: "t".into(), tool_digest: "d".into(), args_hash: args_hash(&publish_args).unwrap() };
        let result = json!({});
        let source: HashMap<String, SourceStep> = [
            (
                "render".to_string(),
                SourceStep {
                    status: StepStatus::Completed,
                    signature: &render_sig,
                    args: &render_args,
                    result: Some(&result),
                    artifacts: &artifacts,
                },
            ),
            (
                "publish".to_string(),
                SourceStep {
                    status: StepStatus::Completed,
                    signature: &publish_sig,
                    args: &publish_args,
                    result: Some(&result),
                    artifacts: &[],
                },
            ),
        ]
        .into();
        let input = json!({});
        let requested: Vec<String> = vec![];
        let run = |damaged: &HashMap<String, Damage>| {
            plan(&ReplayInput {
                spec: &spec,
                dag: &dag,
                tool_digests: &digests,
                input: &input,
                source_input: &input,
                same_definition: false,
                source_run_id: "R",
                source: &source,
                requested: &requested,
                explain_tool: &|_| vec![],
                damaged,
            })
        };
        let clean = run(&HashMap::new());
        assert_eq!(clean.summary(&dag).reused, ["render", "publish"], "{clean:?}");
        let damage = OutputDamage {
            output: "report".into(),
            path: "steps/render/report.html".into(),
            recorded: "ab".repeat(32),
            found: Found::Changed { sha256: "cd".repeat(32) },
        };
        let hurt = run(&[("render".to_string(), Damage::Output(damage))].into());
        assert_eq!(hurt.summary(&dag).invalidated, ["render", "publish"]);
        assert!(matches!(hurt.decision("render").unwrap().reason, Reason::OutputChanged { .. }));
        assert_eq!(hurt.decision("publish").unwrap().reason, Reason::AncestorInvalidated { step: "render".into() });
        // A file it read, changed since: the same invalidation, naming the file.
        let read = InputDamage {
            path: "/data/sheet.csv".into(),
            recorded: "ab".repeat(32),
            found: Found::Changed { sha256: "cd".repeat(32) },
        };
        let hurt = run(&[("render".to_string(), Damage::Input(read))].into());
        assert_eq!(hurt.summary(&dag).invalidated, ["render", "publish"]);
        assert_eq!(
            hurt.decision("render").unwrap().reason.text(),
            "invalidated: input file /data/sheet.csv of step render changed since run R read it (sha256 abababababab… → cdcdcdcdcdcd…)"
        );
    }
}
