//! Step signatures and run identity, and the pure decisions made from them: what to do with an
//! existing step row, and what follows a finished attempt.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::artifact::OutputDecl;
use crate::canonical::{CanonicalError, hash_json};
use crate::status::{CauseKind, Outcome, RetryOn, StepStatus};
use crate::workflow::ToolDef;

/// Bumped whenever what a hash covers changes, so old and new hashes never collide silently.
pub const SIGNATURE_FORMAT: u32 = 1;

/// What makes a step's evidence reusable: the same tool, the same tool definition, the same args.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepSignature {
    pub tool: String,
    pub tool_digest: String,
    pub args_hash: String,
}

/// A file the tool's command names inside the workflow folder, with its content hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolFile {
    pub path: String,
    pub sha256: String,
}

/// `sha256` of the tool definition: command, declared version, timeout, environment allowlist,
/// the names of its secrets and the content hashes of the files its command names.
pub fn tool_digest(tool: &ToolDef, files: &[ToolFile]) -> Result<String, CanonicalError> {
    let mut files: Vec<&ToolFile> = files.iter().collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let mut doc = json!({
        "format": SIGNATURE_FORMAT,
        "command": tool.command,
        "version": tool.version,
        "timeout_secs": tool.timeout_secs,
        "env": tool.env,
        "files": files.iter().map(|f| json!({"path": f.path, "sha256": f.sha256})).collect::<Vec<_>>(),
    });
    // Only a controller names its kind, so every digest recorded before kinds existed still holds.
    if !tool.kind.is_process() {
        doc["kind"] = json!(tool.kind);
    }
    // A secret's name is part of what the tool is (its value never is); a tool without secrets
    // keeps the digest it had before they existed.
    if !tool.secrets.is_empty() {
        doc["secrets"] = json!(tool.secrets);
    }
    hash_json(&doc)
}

/// A step's tool digest: its tool's, and, when the step declares outputs (its own or its tool's),
/// those declarations too, so declaring an output changes what the step's evidence is. A step
/// without outputs has its tool's digest unchanged.
pub fn step_tool_digest(tool_digest: &str, outputs: &[OutputDecl]) -> String {
    if outputs.is_empty() {
        return tool_digest.to_string();
    }
    let outputs: serde_json::Map<String, Value> =
        outputs.iter().map(|o| (o.name.clone(), Value::String(o.declared()))).collect();
    // Only strings: canonicalising cannot fail.
    hash_json(&json!({"format": SIGNATURE_FORMAT, "tool": tool_digest, "outputs": outputs})).unwrap_or_default()
}

/// The content digest of a workflow folder: what a registered `name@version` is addressed by,
/// and what a plan's deployed copy is checked against. `files` are relative paths with their
/// SHA-256, in any order.
pub fn folder_digest(files: &[ToolFile]) -> String {
    // JCS orders the keys; only strings and a small integer, so canonicalising cannot fail.
    let files: serde_json::Map<String, Value> =
        files.iter().map(|f| (f.path.clone(), Value::String(f.sha256.clone()))).collect();
    hash_json(&json!({"format": 1, "files": files})).unwrap_or_default()
}

/// `sha256(JCS(args))`.
pub fn args_hash(args: &Value) -> Result<String, CanonicalError> {
    hash_json(args)
}

/// The identity of a run: workflow, version, canonical input and, for a replay child, the directive.
pub fn run_identity(
    workflow: &str,
    version: &str,
    input: &Value,
    replay: Option<&Value>,
) -> Result<String, CanonicalError> {
    hash_json(&json!({
        "format": SIGNATURE_FORMAT,
        "workflow": workflow,
        "version": version,
        "input": input,
        "replay": replay,
    }))
}

/// The first signature component that differs, for an explicit mismatch message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignatureMismatch {
    pub field: String,
    pub stored: String,
    pub wanted: String,
}

impl SignatureMismatch {
    pub fn between(stored: &StepSignature, wanted: &StepSignature) -> Option<SignatureMismatch> {
        let pairs = [
            ("tool", &stored.tool, &wanted.tool),
            ("tool_digest", &stored.tool_digest, &wanted.tool_digest),
            ("args_hash", &stored.args_hash, &wanted.args_hash),
        ];
        pairs.iter().find(|(_, a, b)| a != b).map(|(f, a, b)| SignatureMismatch {
            field: f.to_string(),
            stored: a.to_string(),
            wanted: b.to_string(),
        })
    }
}

/// What the engine does with a step, given the row already stored for it (if any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepAction {
    /// No row: start attempt 1.
    Execute,
    /// A completed row with an equal signature: reuse its result.
    Reuse,
    /// A running row and an explicit resume: mark the attempt interrupted, start a new one.
    ResumeInterrupted,
    /// A running row without an explicit resume: it may still be alive, so refuse.
    RefuseRunning,
    /// A failed row with an equal signature: the failure stands.
    AlreadyFailed,
    /// Any row whose signature differs: an explicit mismatch, never a cache hit.
    Mismatch(SignatureMismatch),
}

pub fn decide_step(
    existing: Option<(StepStatus, &StepSignature)>,
    wanted: &StepSignature,
    resume_interrupted: bool,
) -> StepAction {
    let Some((status, stored)) = existing else { return StepAction::Execute };
    if let Some(m) = SignatureMismatch::between(stored, wanted) {
        return StepAction::Mismatch(m);
    }
    match status {
        StepStatus::Completed => StepAction::Reuse,
        StepStatus::Failed => StepAction::AlreadyFailed,
        StepStatus::Running if resume_interrupted => StepAction::ResumeInterrupted,
        StepStatus::Running => StepAction::RefuseRunning,
    }
}

/// What follows an attempt that ended with `outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterAttempt {
    Complete,
    Retry,
    /// Permanent, or the attempts are exhausted: the run is FAILED.
    Fail,
}

/// `finished_attempts` counts attempts that ended with an outcome (interrupted ones do not);
/// `cause` is what made a FAILED one fail, when it is known (a full disk), which `retry_on` may
/// name instead of the whole outcome class.
pub fn after_attempt(
    outcome: Outcome,
    cause: Option<CauseKind>,
    finished_attempts: u32,
    max_attempts: u32,
    retry_on: &[RetryOn],
) -> AfterAttempt {
    match outcome {
        Outcome::Completed => AfterAttempt::Complete,
        o if retry_on.iter().any(|r| r.matches(o, cause)) && finished_attempts < max_attempts => AfterAttempt::Retry,
        _ => AfterAttempt::Fail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(args: &str) -> StepSignature {
        StepSignature { tool: "t".into(), tool_digest: "d".into(), args_hash: args.into() }
    }

    #[test]
    fn existing_rows_are_reused_only_on_an_equal_signature() {
        let s = sig("a");
        assert_eq!(decide_step(None, &s, false), StepAction::Execute);
        assert_eq!(decide_step(Some((StepStatus::Completed, &s)), &s, false), StepAction::Reuse);
        assert_eq!(decide_step(Some((StepStatus::Running, &s)), &s, false), StepAction::RefuseRunning);
        assert_eq!(decide_step(Some((StepStatus::Running, &s)), &s, true), StepAction::ResumeInterrupted);
        assert_eq!(decide_step(Some((StepStatus::Failed, &s)), &s, true), StepAction::AlreadyFailed);
        for status in [StepStatus::Completed, StepStatus::Running, StepStatus::Failed] {
            let StepAction::Mismatch(m) = decide_step(Some((status, &sig("b"))), &s, true) else { panic!() };
            assert_eq!((m.field.as_str(), m.stored.as_str(), m.wanted.as_str()), ("args_hash", "b", "a"));
        }
    }

    #[test]
    fn only_listed_outcomes_retry_and_only_within_the_budget() {
        let on = [Outcome::TimedOut.into()];
        assert_eq!(after_attempt(Outcome::TimedOut, None, 1, 2, &on), AfterAttempt::Retry);
        assert_eq!(after_attempt(Outcome::TimedOut, None, 2, 2, &on), AfterAttempt::Fail);
        assert_eq!(after_attempt(Outcome::Failed, None, 1, 2, &on), AfterAttempt::Fail);
        assert_eq!(after_attempt(Outcome::InvalidInput, None, 1, 5, &on), AfterAttempt::Fail);
        assert_eq!(after_attempt(Outcome::Completed, None, 2, 2, &on), AfterAttempt::Complete);
    }

    #[test]
    fn no_space_retries_a_failure_on_a_full_disk_and_no_other_failure() {
        let full = Some(CauseKind::NoSpace);
        let on = [RetryOn::Cause(CauseKind::NoSpace)];
        assert_eq!(after_attempt(Outcome::Failed, full, 1, 3, &on), AfterAttempt::Retry);
        assert_eq!(after_attempt(Outcome::Failed, full, 3, 3, &on), AfterAttempt::Fail, "within the budget only");
        assert_eq!(after_attempt(Outcome::Failed, None, 1, 3, &on), AfterAttempt::Fail);
        assert_eq!(after_attempt(Outcome::TimedOut, None, 1, 3, &on), AfterAttempt::Fail, "it replaces the default");
        // Without NO_SPACE (the default), a full disk is an ordinary failure; FAILED covers it.
        assert_eq!(after_attempt(Outcome::Failed, full, 1, 3, &[Outcome::TimedOut.into()]), AfterAttempt::Fail);
        assert_eq!(after_attempt(Outcome::Failed, full, 1, 3, &[Outcome::Failed.into()]), AfterAttempt::Retry);
    }

    #[test]
    fn tool_digest_covers_every_part_of_the_definition() {
        let tool = ToolDef {
            name: "t".into(),
            kind: Default::default(),
            command: vec!["python3".into(), "t.py".into()],
            timeout_secs: 60,
            version: None,
            env: vec![],
            secrets: vec![],
            outputs: Default::default(),
        };
        let files = vec![ToolFile { path: "t.py".into(), sha256: "aa".into() }];
        let base = tool_digest(&tool, &files).unwrap();
        let variants = [
            ToolDef { timeout_secs: 61, ..tool.clone() },
            ToolDef { kind: crate::workflow::ToolKind::Snakemake, ..tool.clone() },
            ToolDef { version: Some("2".into()), ..tool.clone() },
            ToolDef { env: vec!["LANG".into()], ..tool.clone() },
            ToolDef { secrets: vec!["DB_PASSWORD".into()], ..tool.clone() },
            ToolDef { command: vec!["python3".into(), "-u".into(), "t.py".into()], ..tool.clone() },
        ];
        for v in &variants {
            assert_ne!(tool_digest(v, &files).unwrap(), base);
        }
        assert_ne!(tool_digest(&tool, &[ToolFile { path: "t.py".into(), sha256: "ab".into() }]).unwrap(), base);
        // The tool's own name is not part of the digest: renaming a tool changes the `tool` field.
        assert_eq!(tool_digest(&ToolDef { name: "u".into(), ..tool.clone() }, &files).unwrap(), base);
    }

    #[test]
    fn declared_outputs_are_part_of_a_steps_digest_and_no_outputs_change_nothing() {
        assert_eq!(step_tool_digest("d", &[]), "d");
        let report = OutputDecl::parse("report", "report.html").unwrap();
        let with = step_tool_digest("d", std::slice::from_ref(&report));
        assert_ne!(with, "d");
        assert_ne!(with, step_tool_digest("e", std::slice::from_ref(&report)));
        assert_ne!(with, step_tool_digest("d", &[OutputDecl::parse("report", "report.html/").unwrap()]));
        assert_ne!(with, step_tool_digest("d", &[OutputDecl::parse("summary", "report.html").unwrap()]));
    }

    #[test]
    fn run_identity_separates_replay_children() {
        let input = json!({"a": 1});
        let plain = run_identity("w", "1.0.0", &input, None).unwrap();
        assert_eq!(plain, run_identity("w", "1.0.0", &json!({"a": 1}), None).unwrap());
        assert_ne!(plain, run_identity("w", "1.0.1", &input, None).unwrap());
        assert_ne!(plain, run_identity("w", "1.0.0", &input, Some(&json!({"source_run_id": "r"}))).unwrap());
    }
}
