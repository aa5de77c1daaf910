//! Plan → approve → execute: planning is read-only and stores an immutable plan; approval
//! reloads it, re-hashes its inputs, re-checks readiness and mints a short-lived receipt;
//! consuming the receipt reserves the run (one transaction) before any effect is applied.
//!
//! **Invariant:** a missing, modified, expired or consumed approval creates nothing: no run row,
//! no directory, no process. Effects are applied only after the reservation, each checked against
//! its checksum and kept inside `run_dir`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use cairn_core::access::{Caller, Permission, Scope};
use cairn_core::canonical::sha256_hex;
use cairn_core::controller::SlurmSubmit;
use cairn_core::ids::{Owner, RunId};
use cairn_core::plan::{
    ApprovalChannel, Effect, InputFile, PLAN_FORMAT, Plan, PlanReadiness, PlanReplay, PlannedCommand, Receipt,
    absolute_path_strings, check_effect_path, read_plan, sign_receipt, verify_receipt,
};
use cairn_core::replay::DecisionRecord;
use cairn_core::signature::run_identity;
use cairn_core::status::RunStatus;
use cairn_core::store::{ConsumeReceipt, NewRun, PlanRecord, RunRecord};
use cairn_core::target::LOCAL;
use cairn_exec::agent::protocol::{DeployFile, DeployRequest, ReadyRequest};
use serde_json::Value;

use crate::registry::{LoadedWorkflow, load_record};
use crate::replay::ReplayRequest;
use crate::runner::check_input;
use crate::{Engine, EngineError};

/// How long a receipt approves its request.
pub const RECEIPT_TTL_MS: i64 = 60_000;

#[derive(Debug, Clone)]
pub struct PlanRequest {
    /// NAME or NAME@VERSION. For a replay it may be omitted (the source's workflow); when given,
    /// it must name the source's workflow, and its version may be another registered one.
    pub workflow: Option<String>,
    pub input: Value,
    pub target: String,
    pub run_dir: PathBuf,
    pub name: Option<String>,
    /// Plan a replay instead: `(source_run_id, step_ids)`.
    pub replay: Option<(RunId, Vec<String>)>,
}

/// A stored plan, as plans are listed: its index row and the run that executed it, if any.
#[derive(Debug, Clone)]
pub struct PlanListing {
    pub record: PlanRecord,
    pub run_id: Option<RunId>,
}

fn stale(m: impl Into<String>) -> EngineError {
    EngineError::PlanStale { message: m.into() }
}

/// SHA-256 of a file, streamed.
pub(crate) fn hash_file(path: &Path) -> std::io::Result<String> {
    Ok(cairn_exec::artifacts::hash_file(path)?.1)
}

pub(crate) fn run_dir_err(message: String) -> EngineError {
    EngineError::InvalidRunDir { message }
}

/// Readiness of a run_dir on the local target: absolute, absent, its parent an existing,
/// writable directory reached without a symlink.
pub(crate) fn check_run_dir(run_dir: &Path) -> Result<(), String> {
    let text = run_dir.display().to_string();
    check_run_dir_text(run_dir)?;
    if std::fs::symlink_metadata(run_dir).is_ok() {
        return Err(format!("run_dir `{text}` exists already; a run creates its own new directory"));
    }
    let parent = run_dir.parent().ok_or_else(|| format!("run_dir `{text}` has no parent directory"))?;
    let real = parent
        .canonicalize()
        .map_err(|e| format!("the parent of run_dir, {}, is not usable: {e}", parent.display()))?;
    if real != parent {
        return Err(format!(
            "the parent of run_dir, {}, goes through a symlink (it resolves to {}); give the real path",
            parent.display(),
            real.display()
        ));
    }
    if !real.is_dir() {
        return Err(format!("the parent of run_dir, {}, is not a directory", parent.display()));
    }
    nix::unistd::access(parent, nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK)
        .map_err(|e| format!("the parent of run_dir, {}, is not writable: {e}", parent.display()))?;
    Ok(())
}

/// Who approves a plan's execution and how: what consuming its receipt records with the run.
pub struct Approving<'a> {
    pub caller: &'a Caller,
    pub channel: ApprovalChannel,
    /// The quotas the run's creation must pass.
    pub admission: cairn_core::quota::Admission,
    /// The process that executes the run.
    pub owner: Option<Owner>,
    pub thread_id: Option<String>,
}

impl<'a> Approving<'a> {
    /// `caller` approving through `channel`, with no quota, owner or thread.
    pub fn by(caller: &'a Caller, channel: ApprovalChannel) -> Approving<'a> {
        Approving { caller, channel, admission: Default::default(), owner: None, thread_id: None }
    }
}

impl Engine {
    pub(crate) fn plans_dir(&self) -> PathBuf {
        self.state.path().join("plans")
    }

    fn plan_file(&self, name: &str) -> PathBuf {
        self.plans_dir().join(format!("{name}.json"))
    }

    /// The key receipts are signed with: `<state>/auth/receipt.key` (mode 0600), created once.
    pub fn receipt_key(&self) -> Result<Vec<u8>, EngineError> {
        let dir = self.state.path().join("auth");
        std::fs::create_dir_all(&dir).map_err(|e| EngineError::io(&dir, e))?;
        let path = dir.join("receipt.key");
        if !path.exists() {
            // Written whole to a private temporary file, then published with a hard link, which
            // fails if another process published first: a reader never sees a partial key, and a
            // crash leaves no empty one.
            let tmp = dir.join(format!("receipt.key.{}", self.ids.token()));
            let key = format!("{}{}", self.ids.token(), self.ids.token());
            let written = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
                .and_then(|mut f| f.write_all(key.as_bytes()).and_then(|_| f.sync_all()));
            let published = written.and_then(|_| std::fs::hard_link(&tmp, &path));
            let _ = std::fs::remove_file(&tmp);
            match published {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(EngineError::io(&path, e)),
            }
        }
        let key = std::fs::read(&path).map_err(|e| EngineError::io(&path, e))?;
        if key.len() < 32 {
            return Err(EngineError::io(&path, "the receipt key is too short; remove it to make a new one"));
        }
        Ok(key)
    }

    /// Plans a run: checks everything, resolves every command, hashes every input file, lists
    /// every effect, and stores the plan. Creates nothing in or at `run_dir`.
    pub fn make_plan(&self, caller: &Caller, req: &PlanRequest) -> Result<Plan, EngineError> {
        // Who may plan is decided first, on the workflow named (a replay's: its source's).
        let resource = Scope { workflow: self.workflow_planned(req)?, target: Some(req.target.clone()) };
        self.authorize(caller, Permission::Plan, &resource)?;
        // One spelling per directory (`/a//b/` is `/a/b`), so a reservation cannot be dodged.
        let run_dir_path: PathBuf = req.run_dir.components().collect();
        let remote = req.target != LOCAL;
        if remote {
            self.target(&req.target)?;
            check_run_dir_text(&run_dir_path).map_err(run_dir_err)?;
        } else {
            check_run_dir(&run_dir_path).map_err(run_dir_err)?;
        }
        let (wf, input, replay) = self.planned_workflow_and_input(req)?;
        let plan_id = format!("plan_{}", self.ids.run_suffix());
        let name = match &req.name {
            Some(n) => RunId::parse(n).map_err(EngineError::InvalidPlanName)?.to_string(),
            None => format!("{}-{}", wf.spec().name, &plan_id[plan_id.len() - 8..]),
        };
        if self.store.plan(&name)?.is_some() {
            return Err(EngineError::Store(cairn_core::store::StoreError::PlanExists(name)));
        }
        let run_dir = run_dir_path.display().to_string();
        // A pipeline on a Slurm target submits its jobs there, as the plan shows.
        let slurm = if remote {
            let spec = self.target(&req.target)?;
            (spec.executor == cairn_core::target::Executor::Slurm)
                .then(|| SlurmSubmit { partition: spec.partition.clone(), account: spec.account.clone() })
        } else {
            None
        };
        let (inputs, readiness) = self.planned_input_files(req, &run_dir, &wf, &input)?;
        let commands = planned_commands(&wf, &input, &run_dir_path, slurm.as_ref())?;
        let effects = planned_effects(&wf, &input)?;
        let mut plan = Plan {
            format: PLAN_FORMAT,
            plan_name: name,
            plan_id,
            workflow: wf.spec().name.clone(),
            version: wf.spec().version.clone(),
            workflow_digest: wf.record.digest.clone(),
            input,
            target: req.target.clone(),
            run_dir,
            commands,
            inputs,
            effects,
            readiness,
            replay,
            created_at: self.clock.now_ms(),
            plan_checksum: String::new(),
        };
        plan.plan_checksum = plan.compute_checksum().map_err(|e| EngineError::input(format!("run input: {e}")))?;
        self.store_plan(&plan, caller)?;
        Ok(plan)
    }

    /// The workflow and input a plan runs (checked), and for a replay plan the replay it makes
    /// (its source, steps and the planner's decisions).
    /// The name of the workflow a request plans, as far as it can be told before it is checked:
    /// the one it names, else its replay source's. `None` when it names none (refused later).
    fn workflow_planned(&self, req: &PlanRequest) -> Result<Option<String>, EngineError> {
        if let Some(reference) = &req.workflow {
            return Ok(crate::registry::parse_reference(reference).ok().map(|(name, _)| name.to_string()));
        }
        match &req.replay {
            Some((source, _)) => Ok(self.store.run(source)?.map(|r| r.workflow)),
            None => Ok(None),
        }
    }

    fn planned_workflow_and_input(
        &self,
        req: &PlanRequest,
    ) -> Result<(LoadedWorkflow, Value, Option<PlanReplay>), EngineError> {
        let Some((source, steps)) = &req.replay else {
            let Some(reference) = &req.workflow else {
                return Err(EngineError::input("name the workflow to plan (NAME or NAME@VERSION)"));
            };
            if req.input.is_null() {
                return Err(EngineError::input("input is required (only a replay plan may omit it)"));
            }
            let wf = self.load_workflow(reference)?;
            check_input(&wf, &req.input)?;
            return Ok((wf, req.input.clone(), None));
        };
        let (name, version) = match &req.workflow {
            Some(reference) => {
                let (n, v) = crate::registry::parse_reference(reference)?;
                (Some(n.to_string()), v.map(String::from))
            }
            None => (None, None),
        };
        let prepared = self.prepare_replay(&ReplayRequest {
            source_run_id: source.clone(),
            step_ids: steps.clone(),
            input: (!req.input.is_null()).then(|| req.input.clone()),
            version,
            workflow: name,
            target: Some(req.target.clone()),
            ..ReplayRequest::default()
        })?;
        let replay = PlanReplay {
            source_run_id: source.to_string(),
            step_ids: prepared.plan.requested.clone(),
            decisions: prepared.plan.decisions.iter().map(DecisionRecord::of).collect(),
        };
        Ok((prepared.workflow, prepared.input, Some(replay)))
    }

    /// The input files the run will read, each hashed where it will read them, and on a target
    /// the facts of its readiness check. Locally, also checks that every program is found.
    fn planned_input_files(
        &self,
        req: &PlanRequest,
        run_dir: &str,
        wf: &LoadedWorkflow,
        input: &Value,
    ) -> Result<(Vec<InputFile>, Option<PlanReadiness>), EngineError> {
        let mut inputs = Vec::new();
        if req.target != LOCAL {
            // On a target, input files are read where the run will read them: on the target.
            let facts = self.target_ready(&req.target, run_dir, &crate::placement::workflow_needs(wf), input)?;
            for (path, sha) in &facts.observed.inputs {
                if let Some(sha256) = sha {
                    inputs.push(InputFile { path: path.clone(), sha256: sha256.clone() });
                }
            }
            return Ok((inputs, Some(facts)));
        }
        crate::placement::local_programs(wf)?;
        for p in absolute_path_strings(input) {
            if Path::new(&p).is_file() {
                let sha256 = hash_file(Path::new(&p))
                    .map_err(|e| EngineError::input(format!("{p}: cannot read this input file: {e}")))?;
                inputs.push(InputFile { path: p, sha256 });
            }
        }
        Ok((inputs, None))
    }

    /// Writes the plan file (its name claimed atomically) and then its index row.
    fn store_plan(&self, plan: &Plan, caller: &Caller) -> Result<(), EngineError> {
        let dir = self.plans_dir();
        std::fs::create_dir_all(&dir).map_err(|e| EngineError::io(&dir, e))?;
        let path = self.plan_file(&plan.plan_name);
        let text = serde_json::to_vec_pretty(plan).map_err(|e| EngineError::io(&path, e))?;
        let mut f = match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(EngineError::Store(cairn_core::store::StoreError::PlanExists(plan.plan_name.clone())));
            }
            Err(e) => return Err(EngineError::io(&path, e)),
        };
        f.write_all(&text).and_then(|_| f.sync_all()).map_err(|e| EngineError::io(&path, e))?;
        let record = PlanRecord {
            plan_name: plan.plan_name.clone(),
            plan_id: plan.plan_id.clone(),
            plan_checksum: plan.plan_checksum.clone(),
            workflow: plan.workflow.clone(),
            version: plan.version.clone(),
            target: plan.target.clone(),
            run_dir: plan.run_dir.clone(),
            created_at: plan.created_at,
            planned_by: Some(caller.name().to_string()),
        };
        let made_in = self.state.path().display().to_string();
        let act = self.act(
            caller,
            "plan.made",
            &plan.plan_name,
            serde_json::json!({"workflow": plan.workflow, "version": plan.version, "target": plan.target}),
        );
        if let Err(e) = self.store.insert_plan(&record, &String::from_utf8_lossy(&text), &made_in, Some(&act)) {
            let _ = std::fs::remove_file(&path);
            return Err(e.into());
        }
        Ok(())
    }

    /// Every stored plan, newest first, with the run that executed it.
    pub fn plans(&self) -> Result<Vec<PlanListing>, EngineError> {
        self.store
            .plans()?
            .into_iter()
            .map(|record| Ok(PlanListing { run_id: self.store.run_of_plan(&record.plan_id)?, record }))
            .collect()
    }

    /// A stored plan, checked: its file parses and still has the checksum it was stored with.
    pub fn load_plan(&self, name: &str) -> Result<Plan, EngineError> {
        let record = self.store.plan(name)?.ok_or_else(|| EngineError::PlanNotFound { name: name.to_string() })?;
        let path = self.plan_file(name);
        let altered =
            |why: String| EngineError::PlanAltered { name: name.to_string(), path: path.display().to_string(), why };
        // Its file, in the state root that made it (there a missing file is an alteration); a
        // plan made through another state root sharing the registry is read from the copy the
        // registry keeps. Either is checked against the checksum.
        let here = self.state.path().display().to_string();
        let text = match self.store.plan_document(name)? {
            Some((document, made_in)) if made_in != here => document.into_bytes(),
            _ => std::fs::read(&path).map_err(|e| altered(format!("cannot read it: {e}")))?,
        };
        let plan = read_plan(&text).map_err(|e| altered(e.to_string()))?;
        if plan.plan_checksum != record.plan_checksum || plan.plan_id != record.plan_id {
            return Err(altered(format!(
                "its checksum is {}, it was stored as {}",
                plan.plan_checksum, record.plan_checksum
            )));
        }
        Ok(plan)
    }

    /// The approval: reloads the plan, checks the id and checksum given by the approver,
    /// re-hashes every input file and re-checks readiness, then mints a receipt for its request.
    /// Refused unless `caller` may approve plans of its workflow on its target and, where the
    /// workflow's policy needs two people, did not make the plan.
    pub fn approve_plan(
        &self,
        caller: &Caller,
        name: &str,
        plan_id: &str,
        checksum: &str,
    ) -> Result<(Plan, Receipt), EngineError> {
        let plan = self.load_plan(name)?;
        let resource = Scope { workflow: Some(plan.workflow.clone()), target: Some(plan.target.clone()) };
        self.authorize(caller, Permission::Approve, &resource)?;
        let planner = self.store.plan(name)?.and_then(|r| r.planned_by);
        cairn_core::access::check_two_person(
            self.policy(&plan.workflow)?.as_ref(),
            name,
            planner.as_deref(),
            caller.name(),
        )?;
        if plan.plan_id != plan_id {
            return Err(EngineError::PlanMismatch {
                message: format!(
                    "plan `{name}` has id {}, not {plan_id}; approve the plan you were shown",
                    plan.plan_id
                ),
            });
        }
        if plan.plan_checksum != checksum {
            return Err(EngineError::PlanMismatch {
                message: format!(
                    "the checksum given ({checksum}) is not plan `{name}`'s ({}); approve the plan you were shown",
                    plan.plan_checksum
                ),
            });
        }
        if let Some(run_id) = self.store.run_of_plan(&plan.plan_id)? {
            return Err(EngineError::PlanExecuted { name: name.to_string(), run_id: run_id.into_string() });
        }
        if let Some(run_id) = self.store.reservation(&plan.target, &plan.run_dir)? {
            return Err(EngineError::Store(cairn_core::store::StoreError::RunDirReserved {
                target: plan.target.clone(),
                run_dir: plan.run_dir.clone(),
                run_id: run_id.into_string(),
            }));
        }
        // A target's readiness, observed there with the input files' hashes; here, each file is
        // hashed now and the run_dir checked after.
        let facts = if plan.target == LOCAL {
            None
        } else {
            let wf = self.planned_workflow(&plan.workflow, &plan.version, &plan.target, &plan.run_dir)?;
            Some(
                self.target_ready(&plan.target, &plan.run_dir, &crate::placement::workflow_needs(&wf), &plan.input)
                    .map_err(|e| stale(format!("target `{}` is no longer ready: {e}", plan.target)))?,
            )
        };
        for f in &plan.inputs {
            let (now, place) = match &facts {
                None => (
                    hash_file(Path::new(&f.path))
                        .map_err(|e| stale(format!("input file {} is no longer readable: {e}", f.path)))?,
                    String::new(),
                ),
                Some(facts) => (
                    facts.observed.inputs.get(&f.path).cloned().flatten().unwrap_or_else(|| "unreadable".into()),
                    format!(" on `{}`", plan.target),
                ),
            };
            if now != f.sha256 {
                return Err(stale(format!(
                    "input file {}{place} changed since planning (sha256 {} then, {} now); plan again",
                    f.path,
                    cairn_core::canonical::short_hash(&f.sha256),
                    cairn_core::canonical::short_hash(&now)
                )));
            }
        }
        if facts.is_none() {
            check_run_dir(Path::new(&plan.run_dir))
                .map_err(|why| stale(format!("the target is no longer ready: {why}")))?;
        }
        let record = self.store.workflow(&plan.workflow, Some(&plan.version))?;
        if record.as_ref().map(|r| r.digest.as_str()) != Some(plan.workflow_digest.as_str()) {
            return Err(stale(format!(
                "workflow {}@{} is no longer registered as planned",
                plan.workflow, plan.version
            )));
        }
        let receipt = Receipt {
            receipt_id: format!("rcpt_{}", self.ids.run_suffix()),
            plan_name: plan.plan_name.clone(),
            plan_id: plan.plan_id.clone(),
            plan_checksum: plan.plan_checksum.clone(),
            request_hash: plan.request_hash().map_err(|e| EngineError::input(format!("run input: {e}")))?,
            nonce: self.ids.token(),
            expires_at: self.clock.now_ms() + RECEIPT_TTL_MS,
            mac: String::new(),
        };
        let receipt = sign_receipt(&self.receipt_key()?, receipt)
            .map_err(|e| EngineError::ReceiptRefused { message: e.to_string() })?;
        Ok((plan, receipt))
    }

    /// Consumes a receipt for `plan`: verifies it, then in one transaction marks it consumed,
    /// reserves `target + run_dir` and creates the run; then applies the effects. Returns the run
    /// (FAILED, naming the effect, if one failed) and the workflow to execute it with.
    pub fn consume_receipt(
        &self,
        plan: &Plan,
        receipt: &Receipt,
        how: Approving<'_>,
    ) -> Result<(RunRecord, LoadedWorkflow), EngineError> {
        let Approving { caller, channel, admission, owner, thread_id } = how;
        let admission = &admission;
        verify_receipt(&self.receipt_key()?, receipt, plan, self.clock.now_ms())
            .map_err(|e| EngineError::ReceiptRefused { message: e.to_string() })?;
        let run_id = RunId::generated(&self.ids.run_suffix());
        let run = match self.replay_request(plan, &run_id) {
            None => NewRun {
                lease: None,
                run_id,
                workflow: plan.workflow.clone(),
                version: plan.version.clone(),
                identity_hash: run_identity(&plan.workflow, &plan.version, &plan.input, None)
                    .map_err(|e| EngineError::input(format!("run input: {e}")))?,
                input: plan.input.clone(),
                run_dir: plan.run_dir.clone(),
                source_run_id: None,
                replay: None,
                owner,
                thread_id,
                parallelism: 1,
                at: self.clock.now_ms(),
                act: None,
                admission: admission.clone(),
            },
            Some(req) => {
                // Re-planned now: the source is immutable, so the decisions are those approved.
                // From the registry snapshot: the deployed copy (same digest) does not exist yet.
                let req = ReplayRequest { workflow_dir: None, ..req };
                let prepared = self.prepare_replay(&req)?;
                let new = self.replay_run(&req, &prepared)?;
                NewRun {
                    run_dir: plan.run_dir.clone(),
                    owner,
                    thread_id,
                    act: None,
                    admission: admission.clone(),
                    ..new
                }
            }
        };
        // A run on an SSH or Slurm target is reached from any daemon; a local one from this host.
        let run = NewRun { lease: self.new_lease(plan.target == "local"), ..run };
        let run = self.store.consume_receipt(&ConsumeReceipt {
            receipt_id: receipt.receipt_id.clone(),
            plan_id: plan.plan_id.clone(),
            target: plan.target.clone(),
            channel,
            act: Some(self.act(
                caller,
                "plan.approved",
                &plan.plan_name,
                serde_json::json!({"run_id": run.run_id, "channel": channel.as_str(), "target": plan.target}),
            )),
            run,
        });
        let run = run.map_err(|e| Engine::over_quota(e.into(), admission))?;
        if let Err(why) = self.apply_effects(plan) {
            let failed = self.store.finish_run(
                &run.run_id,
                run.revision,
                RunStatus::Failed,
                &[],
                Some(&why),
                self.clock.now_ms(),
            )?;
            let wf = self.load_workflow(&format!("{}@{}", plan.workflow, plan.version))?;
            return Ok((failed, wf));
        }
        Ok((run, self.deployed_workflow(plan)?))
    }

    /// For a planned replay, the request that executes it as `run_id`, from the deployed workflow.
    pub(crate) fn replay_request(&self, plan: &Plan, run_id: &RunId) -> Option<ReplayRequest> {
        let r = plan.replay.as_ref()?;
        Some(ReplayRequest {
            source_run_id: RunId::lookup(r.source_run_id.as_str()),
            step_ids: r.step_ids.clone(),
            input: Some(plan.input.clone()),
            run_id: Some(run_id.to_string()),
            version: Some(plan.version.clone()),
            workflow: Some(plan.workflow.clone()),
            workflow_dir: Some(Path::new(&plan.run_dir).join("workflow")),
            parallelism: 1,
            target: Some(plan.target.clone()),
            ..ReplayRequest::default()
        })
    }

    /// The workflow as deployed into the plan's run_dir (its tools run from there).
    pub(crate) fn deployed_workflow(&self, plan: &Plan) -> Result<LoadedWorkflow, EngineError> {
        self.planned_workflow(&plan.workflow, &plan.version, &plan.target, &plan.run_dir)
    }

    /// The workflow a run executes: for a run planned on this machine, the copy its approval
    /// deployed into its run_dir; for one on a target, the registry snapshot (byte-identical to
    /// the deployed copy, which the agent re-checks before each launch); else the registry's.
    pub(crate) fn workflow_of_run(&self, run: &RunRecord) -> Result<LoadedWorkflow, EngineError> {
        match (&run.plan_id, self.store.target_of_run(&run.run_id)?) {
            (Some(_), Some(target)) => self.planned_workflow(&run.workflow, &run.version, &target, &run.run_dir),
            _ => self.load_workflow(&format!("{}@{}", run.workflow, run.version)),
        }
    }

    fn planned_workflow(
        &self,
        name: &str,
        version: &str,
        target: &str,
        run_dir: &str,
    ) -> Result<LoadedWorkflow, EngineError> {
        let mut record = self.workflow_record(name, Some(version))?;
        if target == LOCAL {
            record.path = Path::new(run_dir).join("workflow").display().to_string();
        }
        load_record(record)
    }

    /// Applies every effect in order; the first failure is returned, naming the effect.
    fn apply_effects(&self, plan: &Plan) -> Result<(), String> {
        if plan.target != LOCAL {
            return self.apply_effects_on_target(plan);
        }
        let run_dir = Path::new(&plan.run_dir);
        for effect in &plan.effects {
            let fail = |why: String| format!("effect `{}` failed: {why}", effect.describe());
            check_effect_path(effect.path()).map_err(|e| fail(e.to_string()))?;
            match effect {
                Effect::CreateRunDir => {
                    // The parent is re-resolved now: a symlink planted since planning is refused.
                    check_run_dir(run_dir).map_err(fail)?;
                    std::fs::create_dir(run_dir).map_err(|e| fail(e.to_string()))?;
                }
                Effect::WriteFile { path, sha256, content } => {
                    if &sha256_hex(content.as_bytes()) != sha256 {
                        return Err(fail("its content does not match its checksum".into()));
                    }
                    write_new(run_dir, path, content.as_bytes()).map_err(fail)?;
                }
                Effect::DeployWorkflow { path, digest, files } => {
                    let source = self.state.registry().join(digest);
                    for f in files {
                        check_effect_path(&f.path).map_err(|e| fail(e.to_string()))?;
                        let bytes = std::fs::read(source.join(&f.path))
                            .map_err(|e| fail(format!("{}: {e}", source.join(&f.path).display())))?;
                        if sha256_hex(&bytes) != f.sha256 {
                            return Err(fail(format!("{} no longer has its planned checksum", f.path)));
                        }
                        write_new(run_dir, &format!("{path}/{}", f.path), &bytes).map_err(fail)?;
                        if let Ok(meta) = std::fs::metadata(source.join(&f.path)) {
                            let _ = std::fs::set_permissions(run_dir.join(path).join(&f.path), meta.permissions());
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// The command each step will run, in execution order, with the workflow's files where the run
/// deploys them (`<run_dir>/workflow`).
fn planned_commands(
    wf: &LoadedWorkflow,
    input: &Value,
    run_dir_path: &Path,
    slurm: Option<&SlurmSubmit>,
) -> Result<Vec<PlannedCommand>, EngineError> {
    let run_dir = run_dir_path.display().to_string();
    let snapshot = PathBuf::from(&wf.record.path);
    let deployed = run_dir_path.join("workflow");
    wf.dag
        .order()
        .iter()
        .map(|&i| {
            let step = &wf.spec().steps[i];
            let kind = wf.spec().tools[&step.tool].kind;
            let argv = if kind.is_process() {
                wf.tools[&step.tool]
                    .argv
                    .iter()
                    .map(|a| match Path::new(a).strip_prefix(&snapshot) {
                        Ok(rel) => deployed.join(rel).display().to_string(),
                        Err(_) => a.clone(),
                    })
                    .collect()
            } else {
                // A controller's argv comes from the step's args; shown when they are known
                // before the run (they do not depend on an earlier step's result).
                crate::placement::planned_controller_argv(kind, step, input, &run_dir, slurm)?.unwrap_or_else(|| {
                    vec![kind.program().unwrap_or_default().to_string(), "(args from earlier steps)".into()]
                })
            };
            Ok(PlannedCommand {
                step_id: step.id.clone(),
                tool: step.tool.clone(),
                argv,
                cwd: run_dir_path.join("steps").join(&step.id).display().to_string(),
                secrets: wf.spec().tools[&step.tool].secrets.clone(),
            })
        })
        .collect()
}

/// What approving the plan does before the run starts: create the run directory, write the
/// input, deploy the workflow's files (as registered: a snapshot changed since is refused), and
/// write each pipeline step's run configuration the input decides.
fn planned_effects(wf: &LoadedWorkflow, input: &Value) -> Result<Vec<Effect>, EngineError> {
    let input_text = format!("{}\n", serde_json::to_string_pretty(input).unwrap_or_default());
    let snapshot = PathBuf::from(&wf.record.path);
    let (files, on_disk) = crate::registry::hash_folder(&snapshot)?;
    if on_disk != wf.record.digest {
        return Err(EngineError::SnapshotChanged {
            reference: wf.spec().reference(),
            path: snapshot.display().to_string(),
            now: on_disk,
            registered: wf.record.digest.clone(),
        });
    }
    let files: Vec<InputFile> = files.into_iter().map(|f| InputFile { path: f.path, sha256: f.sha256 }).collect();
    let mut effects = vec![
        Effect::CreateRunDir,
        Effect::WriteFile { path: "input.json".into(), sha256: sha256_hex(input_text.as_bytes()), content: input_text },
        Effect::DeployWorkflow { path: "workflow".into(), digest: wf.record.digest.clone(), files },
    ];
    effects.extend(run_config_effects(wf, input)?);
    Ok(effects)
}

/// A pipeline step's run configuration, when the run input decides it, is approved with the
/// plan: written by the approval, and checked before the pipeline starts.
fn run_config_effects(wf: &LoadedWorkflow, input: &Value) -> Result<Vec<Effect>, EngineError> {
    let mut effects = Vec::new();
    for step in &wf.spec().steps {
        if wf.spec().tools[&step.tool].kind.is_process() {
            continue;
        }
        let Ok(args) = cairn_core::template::resolve(&step.args, input, &|_| None) else { continue };
        if let Some(config) = cairn_core::controller::run_config(&args)
            .map_err(|e| EngineError::input(format!("step `{}`: {e}", step.id)))?
        {
            let bytes = crate::pipeline::run_config_bytes(config).map_err(EngineError::input)?;
            effects.push(Effect::WriteFile {
                path: format!(
                    "{}/{}",
                    cairn_core::controller::working_copy(&step.id),
                    cairn_core::controller::RUN_CONFIG
                ),
                sha256: sha256_hex(&bytes),
                content: String::from_utf8_lossy(&bytes).into_owned(),
            });
        }
    }
    Ok(effects)
}

impl Engine {
    /// The target's readiness facts for `run_dir`, observed by the step agent there, checked:
    /// an unusable run_dir or a program the plan needs that is missing is an error naming it.
    pub(crate) fn target_ready(
        &self,
        target: &str,
        run_dir: &str,
        steps_need: &[(String, String)],
        input: &Value,
    ) -> Result<PlanReadiness, EngineError> {
        let spec = self.target(target)?;
        let mut needs: Vec<(String, String)> = Vec::new();
        if spec.executor == cairn_core::target::Executor::Slurm {
            for p in ["sbatch", "squeue", "scancel", "scontrol"] {
                needs.push((p.to_string(), format!("target `{target}` uses the slurm executor")));
            }
        }
        if spec.executor == cairn_core::target::Executor::Slurm && steps_need.iter().any(|(p, _)| p == "snakemake") {
            let why = format!("a snakemake pipeline on target `{target}` submits its jobs to Slurm and polls them");
            needs.push(("sacct".to_string(), why));
        }
        needs.extend(steps_need.iter().cloned());
        let request = ReadyRequest {
            run_dir: run_dir.to_string(),
            workspace_root: spec.workspace_root.clone(),
            inputs: absolute_path_strings(input),
            programs: needs.iter().map(|(p, _)| p.clone()).collect(),
        };
        let facts = self
            .agent_of(&spec)
            .ready(request, std::time::Duration::from_secs(60))
            .map_err(|e| EngineError::of_target(target, e.is_refusal(), e.to_string()))?;
        let problems = cairn_core::target::readiness_problems(target, &facts, &needs);
        if !problems.is_empty() {
            return Err(EngineError::TargetNotReady { target: target.to_string(), problems });
        }
        Ok(PlanReadiness {
            target: target.to_string(),
            executor: spec.executor,
            observed: facts,
            checked_at: self.clock.now_ms(),
        })
    }

    /// The effects on a target, in one call to the agent there: it creates run_dir (refusing an
    /// existing one or a symlinked parent) and writes every file new, each checked against its
    /// checksum. The workflow's files come from the registry snapshot, checked here first.
    fn apply_effects_on_target(&self, plan: &Plan) -> Result<(), String> {
        let mut files = Vec::new();
        for effect in &plan.effects {
            let fail = |why: String| format!("effect `{}` failed: {why}", effect.describe());
            check_effect_path(effect.path()).map_err(|e| fail(e.to_string()))?;
            match effect {
                Effect::CreateRunDir => {}
                Effect::WriteFile { path, sha256, content } => {
                    if &sha256_hex(content.as_bytes()) != sha256 {
                        return Err(fail("its content does not match its checksum".into()));
                    }
                    files.push(DeployFile::new(path, content.as_bytes(), 0o644));
                }
                Effect::DeployWorkflow { path, digest, files: listed } => {
                    let source = self.state.registry().join(digest);
                    for f in listed {
                        check_effect_path(&f.path).map_err(|e| fail(e.to_string()))?;
                        let abs = source.join(&f.path);
                        let bytes = std::fs::read(&abs).map_err(|e| fail(format!("{}: {e}", abs.display())))?;
                        if sha256_hex(&bytes) != f.sha256 {
                            return Err(fail(format!("{} no longer has its planned checksum", f.path)));
                        }
                        use std::os::unix::fs::PermissionsExt;
                        let mode = std::fs::metadata(&abs).map(|m| m.permissions().mode() & 0o777).unwrap_or(0o644);
                        files.push(DeployFile::new(&format!("{path}/{}", f.path), &bytes, mode));
                    }
                }
            }
        }
        let agent = self.agent(&plan.target).map_err(|e| e.to_string())?;
        let request = DeployRequest { run_dir: plan.run_dir.clone(), files };
        agent
            .deploy(request, std::time::Duration::from_secs(300))
            .map(|_| ())
            .map_err(|e| format!("effects on target `{}` failed: {e}", plan.target))
    }
}

/// The checks of a run_dir that need no filesystem (for a target, whose filesystem is there).
pub(crate) fn check_run_dir_text(run_dir: &Path) -> Result<(), String> {
    let text = run_dir.display().to_string();
    if !run_dir.is_absolute() {
        return Err(format!("run_dir `{text}` is relative; give an absolute path"));
    }
    if run_dir.components().any(|c| matches!(c, std::path::Component::ParentDir | std::path::Component::CurDir)) {
        return Err(format!("run_dir `{text}` holds `.` or `..`; give a normalised absolute path"));
    }
    if run_dir.parent().is_none() {
        return Err(format!("run_dir `{text}` has no parent directory"));
    }
    Ok(())
}

/// Writes a new file at `rel` under `root`, creating its folders, refusing any symlink on the way
/// and any existing file.
fn write_new(root: &Path, rel: &str, bytes: &[u8]) -> Result<(), String> {
    let target = root.join(rel);
    let mut dir = root.to_path_buf();
    let parts: Vec<&str> = rel.split('/').collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        dir.push(part);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_symlink() => return Err(format!("{} is a symlink", dir.display())),
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(format!("{} is not a directory", dir.display())),
            Err(_) => std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?,
        }
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&target)
        .map_err(|e| format!("{}: {e}", target.display()))?;
    f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| format!("{}: {e}", target.display()))
}
