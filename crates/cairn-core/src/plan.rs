//! Plans and receipts, as data: an immutable plan of one execution (workflow, input, target,
//! `run_dir`, the exact commands, the input files with their SHA-256, and every file effect), its
//! checksum, the effect path rule, and the receipt that binds one approval of it.
//!
//! **Invariant:** a plan's checksum covers everything it would do; a receipt's MAC covers the
//! plan's id and checksum, the hash of the complete execution request, a nonce and an expiry, so
//! a receipt can approve exactly one unchanged request, once, for a minute.

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::canonical::{CanonicalError, hash_json, short_hash};
use crate::replay::DecisionRecord;
use crate::target::{Executor, ReadyFacts};

/// The version of the plan format; a plan of another version is refused, never guessed at.
pub const PLAN_FORMAT: u32 = 1;

/// One step as it will run: its tool and the exact argv (paths inside the deployed workflow).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedCommand {
    pub step_id: String,
    pub tool: String,
    pub argv: Vec<String>,
    /// The step's working directory.
    pub cwd: String,
    /// The secrets its tool receives in its environment, by name (their values are never in a
    /// plan).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
}

/// An input file the plan relies on: a string of the run input naming an existing absolute file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    pub path: String,
    pub sha256: String,
}

/// One file effect of executing the plan, every path relative to `run_dir`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Effect {
    /// Create `run_dir` itself (it must not exist).
    CreateRunDir,
    /// Write a file whose bytes have this SHA-256 (`content` is the text written).
    WriteFile { path: String, sha256: String, content: String },
    /// Copy a registered workflow snapshot (its files, each with its SHA-256) to `path`.
    DeployWorkflow { path: String, digest: String, files: Vec<InputFile> },
}

impl Effect {
    /// Its kind as the plan's JSON names it (`create_run_dir`, `write_file`, `deploy_workflow`).
    pub fn kind(&self) -> &'static str {
        match self {
            Effect::CreateRunDir => "create_run_dir",
            Effect::WriteFile { .. } => "write_file",
            Effect::DeployWorkflow { .. } => "deploy_workflow",
        }
    }

    /// The path this effect writes, relative to `run_dir` (`.` for the directory itself).
    pub fn path(&self) -> &str {
        match self {
            Effect::CreateRunDir => ".",
            Effect::WriteFile { path, .. } | Effect::DeployWorkflow { path, .. } => path,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Effect::CreateRunDir => "create run_dir".into(),
            Effect::WriteFile { path, sha256, .. } => {
                format!("write {path} (sha256 {})", short_hash(sha256))
            }
            Effect::DeployWorkflow { path, digest, files } => {
                format!("deploy workflow snapshot {} ({} files) to {path}", short_hash(digest), files.len())
            }
        }
    }
}

/// A target's readiness for a run_dir as a plan records it (and execution re-checks it): the
/// target, its executor, what the agent observed there, and when (Unix milliseconds). Its fields
/// are in the order plans have always stored them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanReadiness {
    pub target: String,
    pub executor: Executor,
    pub observed: ReadyFacts,
    pub checked_at: i64,
}

/// For a planned replay: the run replayed, the steps asked for, and what the replay planner
/// decided for each step when the plan was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanReplay {
    pub source_run_id: String,
    /// The requested step ids, deduplicated, in declaration order.
    pub step_ids: Vec<String>,
    pub decisions: Vec<DecisionRecord>,
}

/// An immutable plan. Everything but `plan_checksum` is covered by the checksum.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub format: u32,
    pub plan_name: String,
    pub plan_id: String,
    pub workflow: String,
    pub version: String,
    /// The registered snapshot's digest.
    pub workflow_digest: String,
    pub input: Value,
    pub target: String,
    /// Absolute; created by the execution, absent when planned.
    pub run_dir: String,
    pub commands: Vec<PlannedCommand>,
    pub inputs: Vec<InputFile>,
    pub effects: Vec<Effect>,
    /// The facts observed on the target that the plan relies on (run_dir's parent writable,
    /// run_dir absent, programs found); execution re-checks them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<PlanReadiness>,
    /// For a planned replay: the source run, the steps asked for, and each step's decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<PlanReplay>,
    pub created_at: i64,
    pub plan_checksum: String,
}

impl Plan {
    /// The plan as hashed: every field but the checksum, in canonical JSON.
    fn body(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(m) = &mut v {
            m.remove("plan_checksum");
        }
        v
    }

    /// SHA-256 of the canonical JSON of everything but the checksum itself.
    pub fn compute_checksum(&self) -> Result<String, CanonicalError> {
        hash_json(&self.body())
    }

    /// What an approval binds: the complete execution request, effects included.
    pub fn request(&self) -> Value {
        json!({
            "plan_name": self.plan_name,
            "plan_id": self.plan_id,
            "workflow": self.workflow,
            "version": self.version,
            "workflow_digest": self.workflow_digest,
            "input": self.input,
            "target": self.target,
            "run_dir": self.run_dir,
            "commands": self.commands,
            "inputs": self.inputs,
            "effects": self.effects,
            "readiness": self.readiness,
            "replay": self.replay,
        })
    }

    pub fn request_hash(&self) -> Result<String, CanonicalError> {
        hash_json(&self.request())
    }
}

/// Why the bytes of a plan file are not a plan this Cairn executes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanFileError {
    #[error("it no longer parses: {0}")]
    Parse(String),
    #[error("format {0} is not {PLAN_FORMAT}")]
    Format(u32),
    #[error("its content cannot be hashed: {0}")]
    Unhashable(CanonicalError),
    #[error("its checksum is {computed}, not the plan_checksum it carries ({carried})")]
    Checksum { computed: String, carried: String },
}

/// A plan file's bytes as the plan they hold: it parses (no unknown field), is of this format, and
/// its content hashes to the `plan_checksum` it carries. Whether that checksum is the one the plan
/// was stored (and approved) with is the caller's check: it knows the record.
pub fn read_plan(bytes: &[u8]) -> Result<Plan, PlanFileError> {
    let plan: Plan = serde_json::from_slice(bytes).map_err(|e| PlanFileError::Parse(e.to_string()))?;
    if plan.format != PLAN_FORMAT {
        return Err(PlanFileError::Format(plan.format));
    }
    let computed = plan.compute_checksum().map_err(PlanFileError::Unhashable)?;
    if computed != plan.plan_checksum {
        return Err(PlanFileError::Checksum { computed, carried: plan.plan_checksum });
    }
    Ok(plan)
}

/// Why an effect's path is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("effect path `{0}` is absolute; effect paths are relative to run_dir")]
    Absolute(String),
    #[error("effect path `{0}` leaves run_dir (`..`)")]
    Escapes(String),
    #[error("effect path `{0}` is empty or not a plain relative path")]
    Invalid(String),
}

/// Lexical check of an effect path: relative, no `..`, no empty or odd components. (The engine
/// also refuses a symlink on the way when it applies the effect.)
pub fn check_effect_path(path: &str) -> Result<(), PathError> {
    if path == "." {
        return Ok(());
    }
    if path.starts_with('/') {
        return Err(PathError::Absolute(path.into()));
    }
    if path.is_empty() || path.contains('\0') || path.contains('\\') {
        return Err(PathError::Invalid(path.into()));
    }
    for part in path.split('/') {
        match part {
            ".." => return Err(PathError::Escapes(path.into())),
            "" | "." => return Err(PathError::Invalid(path.into())),
            _ => {}
        }
    }
    Ok(())
}

/// Every string of the run input that is an absolute path, in document order, without
/// duplicates: the candidates for the plan's input files (the engine keeps those that exist).
pub fn absolute_path_strings(input: &Value) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) if s.starts_with('/') && s.len() > 1 && !out.contains(s) => out.push(s.clone()),
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(m) => m.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(input, &mut out);
    out
}

/// How the person approved a plan's execution, as the surface that asked them declares it: an
/// MCP elicitation form, an MCP multi round-trip input request, the MCP host's own tool-call
/// confirmation, `cairn execute-plan`, or a direct API call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalChannel {
    Elicitation,
    InputRequired,
    Host,
    Cli,
    Api,
}

impl ApprovalChannel {
    pub const ALL: [ApprovalChannel; 5] = [
        ApprovalChannel::Elicitation,
        ApprovalChannel::InputRequired,
        ApprovalChannel::Host,
        ApprovalChannel::Cli,
        ApprovalChannel::Api,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalChannel::Elicitation => "elicitation",
            ApprovalChannel::InputRequired => "input_required",
            ApprovalChannel::Host => "host",
            ApprovalChannel::Cli => "cli",
            ApprovalChannel::Api => "api",
        }
    }

    /// The channel named `s`, or `None`.
    pub fn parse(s: &str) -> Option<ApprovalChannel> {
        ApprovalChannel::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// How and when a run's plan was approved (its receipt consumed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// An [`ApprovalChannel`]'s name; `unrecorded` for a run approved before Cairn kept it.
    pub channel: String,
    /// Milliseconds since the epoch.
    pub at: i64,
    /// The principal that approved it; `None` before this was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The principal that made the plan; `None` before this was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_by: Option<String>,
}

/// A single-use approval of one plan's execution request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    pub receipt_id: String,
    pub plan_name: String,
    pub plan_id: String,
    pub plan_checksum: String,
    pub request_hash: String,
    pub nonce: String,
    /// Milliseconds since the epoch.
    pub expires_at: i64,
    /// HMAC-SHA256 over the canonical JSON of the fields above, hex.
    pub mac: String,
}

/// Why a receipt does not approve a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiptError {
    #[error("the receipt's MAC does not verify: it was not issued by this daemon, or was altered")]
    BadMac,
    #[error("the receipt expired {0} ms ago; approve the plan again")]
    Expired(i64),
    #[error("the execution request changed after it was approved (request hash differs)")]
    RequestChanged,
    #[error("the receipt is for plan {receipt} but the request is plan {request}")]
    OtherPlan { receipt: String, request: String },
}

fn receipt_body(r: &Receipt) -> Value {
    json!({
        "receipt_id": r.receipt_id, "plan_name": r.plan_name, "plan_id": r.plan_id,
        "plan_checksum": r.plan_checksum, "request_hash": r.request_hash, "nonce": r.nonce,
        "expires_at": r.expires_at,
    })
}

fn mac_of(key: &[u8], r: &Receipt) -> Result<Hmac<Sha256>, CanonicalError> {
    let text = crate::canonical::canonical_json(&receipt_body(r))?;
    // HMAC takes keys of any length.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(text.as_bytes());
    Ok(mac)
}

/// Sets the receipt's MAC.
pub fn sign_receipt(key: &[u8], mut r: Receipt) -> Result<Receipt, CanonicalError> {
    r.mac = hex::encode(mac_of(key, &r)?.finalize().into_bytes());
    Ok(r)
}

/// Checks a receipt against the request it claims to approve, at time `now` (ms): its MAC (in
/// constant time), its expiry, that it names this plan, and the request's hash.
pub fn verify_receipt(key: &[u8], r: &Receipt, plan: &Plan, now: i64) -> Result<(), ReceiptError> {
    let mac = mac_of(key, r).map_err(|_| ReceiptError::BadMac)?;
    let given = hex::decode(&r.mac).map_err(|_| ReceiptError::BadMac)?;
    mac.verify_slice(&given).map_err(|_| ReceiptError::BadMac)?;
    if now > r.expires_at {
        return Err(ReceiptError::Expired(now.saturating_sub(r.expires_at)));
    }
    if r.plan_id != plan.plan_id || r.plan_name != plan.plan_name || r.plan_checksum != plan.plan_checksum {
        return Err(ReceiptError::OtherPlan { receipt: r.plan_id.clone(), request: plan.plan_id.clone() });
    }
    if plan.request_hash().ok().as_deref() != Some(r.request_hash.as_str()) {
        return Err(ReceiptError::RequestChanged);
    }
    Ok(())
}

/// What an MCP server carries through a multi round-trip request (MCP 2026-07-28
/// `InputRequiredResult`) while the person is asked to approve a plan: bound to the caller, the
/// plan and a deadline, integrity-protected by an HMAC under the server's own key, and made
/// single-use by its nonce (the server keeps the nonces it has accepted). The client sees it but
/// cannot change it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalState {
    /// Who asked: a hash of the caller's bearer token, or the stdio server's own name.
    pub principal: String,
    pub plan_name: String,
    pub plan_id: String,
    pub plan_checksum: String,
    /// Milliseconds since the epoch.
    pub expires_at: i64,
    pub nonce: String,
}

/// Why a request state does not carry an approval.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalStateError {
    #[error("the request state is not one this server issued (malformed)")]
    Malformed,
    #[error("the request state's MAC does not verify: it was not issued by this server, or was altered")]
    BadMac,
    #[error("the request state expired {0} ms ago; call execute_plan again to ask the person anew")]
    Expired(i64),
}

fn state_mac(key: &[u8], body: &[u8]) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(body);
    mac
}

/// `HEX(canonical JSON).HEX(HMAC-SHA256)`: opaque to the client, checked by [`open_approval_state`].
pub fn seal_approval_state(key: &[u8], state: &ApprovalState) -> Result<String, CanonicalError> {
    let body = crate::canonical::canonical_json(&serde_json::to_value(state).unwrap_or_default())?;
    let mac = state_mac(key, body.as_bytes()).finalize().into_bytes();
    Ok(format!("{}.{}", hex::encode(body.as_bytes()), hex::encode(mac)))
}

/// The state sealed in `sealed`, if its MAC verifies (in constant time) and it has not expired
/// at `now` (ms). Binding to the caller and the plan is the caller's check: it knows both.
pub fn open_approval_state(key: &[u8], sealed: &str, now: i64) -> Result<ApprovalState, ApprovalStateError> {
    let (body, mac) = sealed.split_once('.').ok_or(ApprovalStateError::Malformed)?;
    let body = hex::decode(body).map_err(|_| ApprovalStateError::Malformed)?;
    let mac = hex::decode(mac).map_err(|_| ApprovalStateError::Malformed)?;
    state_mac(key, &body).verify_slice(&mac).map_err(|_| ApprovalStateError::BadMac)?;
    let state: ApprovalState = serde_json::from_slice(&body).map_err(|_| ApprovalStateError::Malformed)?;
    if now > state.expires_at {
        return Err(ApprovalStateError::Expired(now.saturating_sub(state.expires_at)));
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_effect_s_kind_is_its_json_tag() {
        let effects = [
            super::Effect::CreateRunDir,
            super::Effect::WriteFile { path: "p".into(), sha256: "s".into(), content: "c".into() },
            super::Effect::DeployWorkflow { path: "p".into(), digest: "d".into(), files: Vec::new() },
        ];
        for e in effects {
            assert_eq!(serde_json::to_value(&e).unwrap()["kind"], e.kind());
        }
    }

    use super::*;

    /// Found by the fuzzer (`fuzz/fuzz_targets/receipt.rs`): a receipt or state checked long after
    /// it expired (the clock near `i64::MAX`, the expiry far below zero) overflowed the
    /// subtraction that says by how much.
    #[test]
    fn an_expiry_long_past_is_reported_without_overflow() {
        let plan: Plan = serde_json::from_value(json!({
            "format": 1, "plan_name": "n", "plan_id": "plan_1", "workflow": "w", "version": "1.0.0",
            "workflow_digest": "d", "input": {}, "target": "local", "run_dir": "/r", "commands": [],
            "inputs": [], "effects": [], "created_at": 0, "plan_checksum": ""
        }))
        .unwrap();
        let r = Receipt {
            receipt_id: "rcpt_1".into(),
            plan_name: "n".into(),
            plan_id: "plan_1".into(),
            plan_checksum: String::new(),
            request_hash: plan.request_hash().unwrap(),
            nonce: "x".into(),
            expires_at: 1 - (1 << 53),
            mac: String::new(),
        };
        let r = sign_receipt(b"key", r).unwrap();
        assert_eq!(verify_receipt(b"key", &r, &plan, i64::MAX), Err(ReceiptError::Expired(i64::MAX)));
        let state = ApprovalState {
            principal: "p".into(),
            plan_name: "n".into(),
            plan_id: "plan_1".into(),
            plan_checksum: String::new(),
            expires_at: 1 - (1 << 53),
            nonce: "x".into(),
        };
        let sealed = seal_approval_state(b"key", &state).unwrap();
        assert_eq!(open_approval_state(b"key", &sealed, i64::MAX), Err(ApprovalStateError::Expired(i64::MAX)));
    }

    /// Found by the fuzzer (`fuzz/fuzz_targets/plan.rs`): an effect's description cut its hash at
    /// byte 12, inside a character of a hand-edited plan file, and panicked.
    #[test]
    fn an_effect_with_a_non_hex_hash_is_described() {
        let e = Effect::WriteFile { path: "a".into(), sha256: "é".repeat(20), content: String::new() };
        assert_eq!(e.describe(), format!("write a (sha256 {})", "é".repeat(12)));
    }

    /// A plan file verifies only as written: parsed, of this format, carrying its own checksum.
    #[test]
    fn a_plan_file_verifies_only_unaltered() {
        let mut plan: Plan = serde_json::from_value(json!({
            "format": 1, "plan_name": "n", "plan_id": "plan_1", "workflow": "w", "version": "1.0.0",
            "workflow_digest": "d", "input": {"x": 1.5}, "target": "local", "run_dir": "/r", "commands": [],
            "inputs": [], "effects": [{"kind": "create_run_dir"}], "created_at": 0, "plan_checksum": ""
        }))
        .unwrap();
        plan.plan_checksum = plan.compute_checksum().unwrap();
        let text = serde_json::to_string_pretty(&plan).unwrap();
        assert_eq!(read_plan(text.as_bytes()), Ok(plan.clone()));
        let altered = text.replace("\"/r\"", "\"/s\"");
        assert!(matches!(read_plan(altered.as_bytes()), Err(PlanFileError::Checksum { .. })));
        assert!(matches!(read_plan(b"{"), Err(PlanFileError::Parse(_))));
        let other = text.replace("\"format\": 1", "\"format\": 2");
        assert_eq!(read_plan(other.as_bytes()), Err(PlanFileError::Format(2)));
    }

    #[test]
    fn an_approval_state_opens_only_unaltered_under_its_key_and_before_its_deadline() {
        let state = ApprovalState {
            principal: "p".into(),
            plan_name: "n".into(),
            plan_id: "plan_1".into(),
            plan_checksum: "c".repeat(64),
            expires_at: 1_000,
            nonce: "x".into(),
        };
        let sealed = seal_approval_state(b"key", &state).unwrap();
        assert_eq!(open_approval_state(b"key", &sealed, 999), Ok(state.clone()));
        assert_eq!(open_approval_state(b"other", &sealed, 999), Err(ApprovalStateError::BadMac));
        assert_eq!(open_approval_state(b"key", &sealed, 1_500), Err(ApprovalStateError::Expired(500)));
        // Any change to the body, however small, breaks the MAC.
        let (body, mac) = sealed.split_once('.').unwrap();
        let mut bytes = hex::decode(body).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap().replace("plan_1", "plan_2");
        bytes = text.into_bytes();
        assert_eq!(
            open_approval_state(b"key", &format!("{}.{mac}", hex::encode(&bytes)), 999),
            Err(ApprovalStateError::BadMac)
        );
        for bad in ["", "zz", "ab.cd", "no-dot"] {
            assert!(open_approval_state(b"key", bad, 999).is_err(), "{bad}");
        }
    }

    fn plan() -> Plan {
        let mut p = Plan {
            format: PLAN_FORMAT,
            plan_name: "p".into(),
            plan_id: "plan_1".into(),
            workflow: "wf".into(),
            version: "1.0.0".into(),
            workflow_digest: "d".repeat(64),
            input: json!({"x": 1, "f": "/data/a.csv"}),
            target: "local".into(),
            run_dir: "/runs/r1".into(),
            commands: vec![PlannedCommand {
                step_id: "a".into(),
                tool: "t".into(),
                argv: vec!["/runs/r1/workflow/t.sh".into()],
                cwd: "/runs/r1/steps/a".into(),
                secrets: vec![],
            }],
            inputs: vec![InputFile { path: "/data/a.csv".into(), sha256: "0".repeat(64) }],
            effects: vec![Effect::CreateRunDir],
            readiness: None,
            replay: None,
            created_at: 1,
            plan_checksum: String::new(),
        };
        p.plan_checksum = p.compute_checksum().unwrap();
        p
    }

    fn receipt(p: &Plan, expires_at: i64) -> Receipt {
        Receipt {
            receipt_id: "rcpt_1".into(),
            plan_name: p.plan_name.clone(),
            plan_id: p.plan_id.clone(),
            plan_checksum: p.plan_checksum.clone(),
            request_hash: p.request_hash().unwrap(),
            nonce: "n".into(),
            expires_at,
            mac: String::new(),
        }
    }

    /// A plan on a target, of a replay, as builds before these fields were typed wrote it (their
    /// `json!` objects, key order included): it loads, verifies, and serialises to the same bytes.
    #[test]
    fn a_plan_written_with_untyped_readiness_and_replay_loads_verifies_and_is_rewritten_byte_for_byte() {
        let mut base = serde_json::to_value(plan()).unwrap();
        base["target"] = json!("hpc");
        let readiness = json!({
            "target": "hpc",
            "executor": "slurm",
            "observed": {
                "free_bytes": 1_234_567_890_u64, "inputs": {"/data/a.csv": "0".repeat(64), "/data/b.csv": null},
                "inside_workspace_root": true, "parent": "/runs", "parent_is_dir": true, "parent_real": true,
                "parent_writable": true, "programs": {"sacct": null, "sbatch": "/usr/bin/sbatch"},
                "run_dir": "/runs/r1", "run_dir_absent": true
            },
            "checked_at": 1_700_000_000_000_i64,
        });
        let reasons = [
            json!({"kind": "signature_equal", "source_run_id": "src"}),
            json!({"kind": "requested"}),
            json!({"kind": "descendant_of_requested", "step": "a"}),
            json!({"kind": "args_changed", "from": "f", "to": "t",
                "changes": [{"pointer": "/x", "old_hash": "1", "new_hash": null}], "more": 0}),
        ];
        let decisions: Vec<Value> = reasons
            .iter()
            .enumerate()
            .map(|(i, reason)| {
                let r: crate::replay::Reason = serde_json::from_value(reason.clone()).unwrap();
                json!({"step_id": format!("s{i}"), "decision": if i == 0 { "reuse" } else { "replay" },
                    "reason": reason, "text": r.text()})
            })
            .collect();
        let replay = json!({"source_run_id": "src", "step_ids": ["s1"], "decisions": decisions});
        // The fields in the plan's order, as `Plan`'s serialisation placed the two values.
        let mut doc = serde_json::Map::new();
        for (k, v) in base.as_object().unwrap() {
            if k == "plan_checksum" {
                continue;
            }
            doc.insert(k.clone(), v.clone());
            if k == "effects" {
                doc.insert("readiness".into(), readiness.clone());
                doc.insert("replay".into(), replay.clone());
            }
        }
        let mut doc = Value::Object(doc);
        let checksum = hash_json(&doc).unwrap();
        doc["plan_checksum"] = json!(checksum);
        let bytes = serde_json::to_vec_pretty(&doc).unwrap();
        let read = read_plan(&bytes).expect("an older plan loads and verifies");
        assert_eq!(read.plan_checksum, checksum);
        assert_eq!(read.readiness.as_ref().map(|r| r.executor), Some(Executor::Slurm));
        assert_eq!(read.replay.as_ref().map(|r| r.decisions.len()), Some(reasons.len()));
        assert_eq!(serde_json::to_string_pretty(&read).unwrap(), String::from_utf8(bytes).unwrap());
        assert_eq!((&read.request()["readiness"], &read.request()["replay"]), (&readiness, &replay));
    }

    #[test]
    fn the_checksum_covers_every_field_but_itself() {
        let p = plan();
        assert_eq!(p.compute_checksum().unwrap(), p.plan_checksum);
        let mut q = p.clone();
        q.plan_checksum = "x".into();
        assert_eq!(q.compute_checksum().unwrap(), p.plan_checksum, "the checksum does not cover itself");
        for change in [
            |p: &mut Plan| p.run_dir.push('x'),
            |p: &mut Plan| p.input["x"] = json!(2),
            |p: &mut Plan| p.inputs[0].sha256 = "1".repeat(64),
            |p: &mut Plan| p.commands[0].argv.push("--more".into()),
            |p: &mut Plan| p.effects.push(Effect::CreateRunDir),
            |p: &mut Plan| p.target = "other".into(),
        ] {
            let mut q = p.clone();
            change(&mut q);
            assert_ne!(q.compute_checksum().unwrap(), p.plan_checksum);
        }
    }

    #[test]
    fn a_receipt_approves_its_request_once_unchanged_and_in_time() {
        let key = b"key-1";
        let p = plan();
        let r = sign_receipt(key, receipt(&p, 1_000)).unwrap();
        assert_eq!(verify_receipt(key, &r, &p, 999), Ok(()));
        assert_eq!(verify_receipt(key, &r, &p, 1_001), Err(ReceiptError::Expired(1)));
        assert_eq!(verify_receipt(b"other key", &r, &p, 0), Err(ReceiptError::BadMac));
        let mut forged = r.clone();
        forged.expires_at += 60_000;
        assert_eq!(verify_receipt(key, &forged, &p, 0), Err(ReceiptError::BadMac));
        let mut altered = p.clone();
        altered.effects.push(Effect::WriteFile { path: "x".into(), sha256: "0".into(), content: String::new() });
        assert_eq!(verify_receipt(key, &r, &altered, 0), Err(ReceiptError::RequestChanged));
        let mut other = p.clone();
        other.plan_id = "plan_2".into();
        assert!(matches!(verify_receipt(key, &r, &other, 0), Err(ReceiptError::OtherPlan { .. })));
        let mut garbage = r.clone();
        garbage.mac = "zz".into();
        assert_eq!(verify_receipt(key, &garbage, &p, 0), Err(ReceiptError::BadMac));
    }

    #[test]
    fn effect_paths_stay_inside_run_dir() {
        for ok in [".", "input.json", "workflow/tools/t.sh", "a.b/c"] {
            assert_eq!(check_effect_path(ok), Ok(()), "{ok}");
        }
        assert!(matches!(check_effect_path("/etc/passwd"), Err(PathError::Absolute(_))));
        for bad in ["../x", "a/../../x", "a/.."] {
            assert!(matches!(check_effect_path(bad), Err(PathError::Escapes(_))), "{bad}");
        }
        for bad in ["", "a//b", "./a", "a/./b", "a\\b"] {
            assert!(matches!(check_effect_path(bad), Err(PathError::Invalid(_))), "{bad}");
        }
    }

    #[test]
    fn absolute_path_strings_are_found_once_in_order() {
        let input = json!({"a": "/x/1", "b": ["rel", "/x/2", {"c": "/x/1"}], "d": "/", "e": 3});
        assert_eq!(absolute_path_strings(&input), ["/x/1", "/x/2"]);
    }
}
