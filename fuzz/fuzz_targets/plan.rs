//! Plan files: parsing and checksum verification.
//!
//! The input up to its first NUL byte is a plan file: `read_plan` never panics, and a plan it
//! accepts carries the checksum of its own content and describes its effects. The bytes after the
//! NUL drive a generator of plans (any input JSON, commands, files, effects): a generated plan's
//! checksum verifies in its canonical and its pretty form, and any one-byte alteration of its
//! canonical file never verifies unless it reads as the very same plan (a byte of JSON syntax that
//! means the same, such as `E` for `e` in a number's exponent).
#![no_main]

use arbitrary::{Result, Unstructured};
use cairn_core::canonical::canonical_json;
use std::collections::BTreeMap;

use cairn_core::plan::{
    Effect, InputFile, PLAN_FORMAT, Plan, PlanFileError, PlanReadiness, PlanReplay, PlannedCommand, read_plan,
};
use cairn_core::replay::{Decision, Reason};
use cairn_core::target::{Executor, ReadyFacts};
use cairn_fuzz::{json, split_input, text};
use libfuzzer_sys::fuzz_target;

const WORDS: [&str; 8] = ["/data/in.csv", "run", "é", "steps/a", "..", "\"", "\\", "x"];

fuzz_target!(|data: &[u8]| {
    let (file, rest) = split_input(data);
    match read_plan(file.as_bytes()) {
        Ok(plan) => {
            assert_eq!(plan.compute_checksum().as_ref(), Ok(&plan.plan_checksum));
            assert_eq!(plan.format, PLAN_FORMAT);
            for e in &plan.effects {
                assert!(!e.describe().is_empty());
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    let _ = generated(&mut Unstructured::new(rest));
});

fn s(u: &mut Unstructured<'_>) -> Result<String> {
    text(u, &WORDS, 4)
}

fn file(u: &mut Unstructured<'_>) -> Result<InputFile> {
    Ok(InputFile { path: s(u)?, sha256: if u.arbitrary()? { "ab".repeat(32) } else { s(u)? } })
}

fn plan(u: &mut Unstructured<'_>) -> Result<Plan> {
    let mut commands = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        commands.push(PlannedCommand {
            step_id: s(u)?,
            tool: s(u)?,
            argv: vec![s(u)?, s(u)?],
            cwd: s(u)?,
            secrets: vec![],
        });
    }
    let mut effects = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        effects.push(match u.int_in_range(0..=2)? {
            0 => Effect::CreateRunDir,
            1 => Effect::WriteFile { path: s(u)?, sha256: s(u)?, content: s(u)? },
            _ => Effect::DeployWorkflow { path: s(u)?, digest: s(u)?, files: vec![file(u)?] },
        });
    }
    let mut p = Plan {
        format: PLAN_FORMAT,
        plan_name: s(u)?,
        plan_id: format!("plan_{}", u.arbitrary::<u64>()?),
        workflow: s(u)?,
        version: "1.0.0".into(),
        workflow_digest: "ef".repeat(32),
        input: json(u, &WORDS, 3)?,
        target: if u.arbitrary()? { "local".into() } else { s(u)? },
        run_dir: s(u)?,
        commands,
        inputs: (0..u.int_in_range(0..=2)?).map(|_| file(u)).collect::<Result<_>>()?,
        effects,
        readiness: if u.arbitrary()? { Some(readiness(u)?) } else { None },
        replay: if u.arbitrary()? { Some(replay(u)?) } else { None },
        created_at: u.arbitrary()?,
        plan_checksum: String::new(),
    };
    // A plan whose content cannot be hashed (an integer beyond 2^53 in its input) is refused at
    // planning; the generator leaves it out.
    p.plan_checksum = p.compute_checksum().map_err(|_| arbitrary::Error::IncorrectFormat)?;
    Ok(p)
}

fn names(u: &mut Unstructured<'_>) -> Result<BTreeMap<String, Option<String>>> {
    (0..u.int_in_range(0..=2)?).map(|_| Ok((s(u)?, if u.arbitrary()? { Some(s(u)?) } else { None }))).collect()
}

fn readiness(u: &mut Unstructured<'_>) -> Result<PlanReadiness> {
    Ok(PlanReadiness {
        target: s(u)?,
        executor: if u.arbitrary()? { Executor::Process } else { Executor::Slurm },
        observed: ReadyFacts {
            // Below 2^53: a larger integer cannot be hashed, and no disk has that many bytes.
            free_bytes: if u.arbitrary()? { Some(u.int_in_range(0..=1u64 << 52)?) } else { None },
            inputs: names(u)?,
            inside_workspace_root: u.arbitrary()?,
            parent: s(u)?,
            parent_is_dir: u.arbitrary()?,
            parent_real: u.arbitrary()?,
            parent_writable: u.arbitrary()?,
            programs: names(u)?,
            run_dir: s(u)?,
            run_dir_absent: u.arbitrary()?,
        },
        checked_at: u.int_in_range(0..=1i64 << 50)?,
    })
}

fn replay(u: &mut Unstructured<'_>) -> Result<PlanReplay> {
    let mut decisions = Vec::new();
    for _ in 0..u.int_in_range(0..=2)? {
        let (decision, reason) = match u.int_in_range(0..=2)? {
            0 => (Decision::Reuse, Reason::SignatureEqual { source_run_id: s(u)? }),
            1 => (Decision::Replay, Reason::Requested),
            _ => (Decision::Replay, Reason::DescendantOfRequested { step: s(u)? }),
        };
        decisions.push(cairn_core::replay::DecisionRecord { step_id: s(u)?, decision, text: reason.text(), reason });
    }
    Ok(PlanReplay { source_run_id: s(u)?, step_ids: vec![s(u)?], decisions })
}

/// A plan's meaning: its canonical JSON (what its checksum covers; `1` and `1.0` are one number).
fn canonical_of(p: &Plan) -> String {
    canonical_json(&serde_json::to_value(p).expect("a plan serialises")).expect("it hashed")
}

fn generated(u: &mut Unstructured<'_>) -> Result<()> {
    let p = plan(u)?;
    for e in &p.effects {
        assert!(!e.describe().is_empty());
    }
    let canonical = canonical_of(&p);
    let read = read_plan(canonical.as_bytes()).unwrap_or_else(|e| panic!("a plan does not verify ({e}): {canonical}"));
    assert_eq!(canonical_of(&read), canonical);
    let pretty = serde_json::to_string_pretty(&p).expect("a plan serialises");
    let read = read_plan(pretty.as_bytes()).unwrap_or_else(|e| panic!("a pretty plan does not verify ({e}): {pretty}"));
    assert_eq!(canonical_of(&read), canonical);

    // One byte altered, anywhere.
    let mut bytes = canonical.clone().into_bytes();
    let at = u.int_in_range(0..=bytes.len() - 1)?;
    let to: u8 = u.arbitrary()?;
    if bytes[at] == to {
        return Ok(());
    }
    bytes[at] = to;
    match read_plan(&bytes) {
        Ok(q) => assert_eq!(
            canonical_of(&q),
            canonical,
            "an altered plan verified as another plan (byte {at} set to {to:#04x}): {}",
            String::from_utf8_lossy(&bytes)
        ),
        Err(
            PlanFileError::Parse(_)
            | PlanFileError::Format(_)
            | PlanFileError::Checksum { .. }
            | PlanFileError::Unhashable(_),
        ) => {}
    }
    // A plan whose content changed, with its old checksum: refused, naming both.
    let mut q = p.clone();
    q.run_dir.push('x');
    let text = serde_json::to_string(&q).expect("serialises");
    match read_plan(text.as_bytes()) {
        Err(PlanFileError::Checksum { computed, carried }) => {
            assert_eq!(carried, p.plan_checksum);
            assert_ne!(computed, carried);
        }
        other => panic!("an altered run_dir gave {other:?}"),
    }
    Ok(())
}
