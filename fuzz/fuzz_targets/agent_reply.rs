//! The step agent's reply lines (`cairn_exec::agent::protocol::decode_line`).
//!
//! The input up to its first NUL byte is one line the agent (or a login shell before it) printed:
//! decoding never panics; only a JSON object with a `protocol` is an answer; an answer of another
//! protocol is refused naming it; and an answer read once reads the same when written again. The
//! bytes after it drive a generator of every reply the protocol has: written as the agent writes
//! it (one line of JSON with this protocol and maybe a request id), each decodes to itself.
#![no_main]

use std::collections::BTreeMap;

use arbitrary::{Result, Unstructured};
use cairn_core::artifact::Artifact;
use cairn_core::cause::DiskSpace;
use cairn_core::pipeline::JobFile;
use cairn_core::replay::Found;
use cairn_exec::agent::protocol::{
    Cancelled, Chunk, Envelope, ExitRecord, HashedOutputs, Identity, Launch, MaterializedCounts, PROTOCOL, ReadyFacts,
    Reply, ReplyError, SeededCounts, StepExit, Tail, Unsupported, decode_line,
};
use cairn_fuzz::{json, split_input, text};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const WORDS: [&str; 8] = ["/run/a", "nonce", "é", "\n", "\"", "\\", "{", "x"];

fuzz_target!(|data: &[u8]| {
    let (line, rest) = split_input(data);
    if let Some(decoded) = decode_line(&line) {
        let value: Value = serde_json::from_str(&line).expect("an answer is JSON");
        let protocol = value.get("protocol").expect("an answer has a protocol");
        match &decoded.reply {
            Ok(reply) => {
                assert_eq!(protocol.as_u64(), Some(u64::from(PROTOCOL)));
                // Read once, the same when written again.
                let again = encode(decoded.id, reply);
                let twice = decode_line(&again).expect("an answer");
                assert_eq!(twice.id, decoded.id);
                assert_eq!(twice.reply.as_ref().ok(), Some(reply), "{again}");
            }
            Err(ReplyError::Version { got }) => {
                assert_ne!(protocol.as_u64(), Some(u64::from(PROTOCOL)));
                assert_eq!(got, &protocol.to_string());
                assert!(ReplyError::Version { got: got.clone() }.to_string().contains(got.as_str()));
            }
            Err(ReplyError::Unreadable(why)) => assert!(!why.is_empty()),
        }
    }
    let _ = generated(&mut Unstructured::new(rest));
});

fn encode(id: Option<u64>, reply: &Reply) -> String {
    serde_json::to_string(&Envelope { protocol: PROTOCOL, id, body: reply.clone() }).expect("a reply serialises")
}

fn s(u: &mut Unstructured<'_>) -> Result<String> {
    text(u, &WORDS, 4)
}

/// A finite double: JSON has no other (the agent's clock and durations are finite).
fn finite(u: &mut Unstructured<'_>) -> Result<f64> {
    let f: f64 = u.arbitrary()?;
    Ok(if f.is_finite() { f } else { 0.0 })
}

fn opt<T>(u: &mut Unstructured<'_>, f: impl FnOnce(&mut Unstructured<'_>) -> Result<T>) -> Result<Option<T>> {
    Ok(if u.arbitrary()? { Some(f(u)?) } else { None })
}

fn found(u: &mut Unstructured<'_>) -> Result<Found> {
    Ok(match u.int_in_range(0..=2)? {
        0 => Found::Changed { sha256: s(u)? },
        1 => Found::Missing,
        _ => Found::Unreachable { why: s(u)? },
    })
}

fn reply(u: &mut Unstructured<'_>) -> Result<Reply> {
    Ok(match u.int_in_range(0..=16)? {
        0 => Reply::Serving(u.arbitrary()?),
        1 => {
            let mut inputs = BTreeMap::new();
            let mut programs = BTreeMap::new();
            for _ in 0..u.int_in_range(0..=2)? {
                inputs.insert(s(u)?, opt(u, s)?);
                programs.insert(s(u)?, opt(u, s)?);
            }
            Reply::Ready(ReadyFacts {
                free_bytes: u.arbitrary()?,
                inputs,
                inside_workspace_root: u.arbitrary()?,
                parent: s(u)?,
                parent_is_dir: u.arbitrary()?,
                parent_real: u.arbitrary()?,
                parent_writable: u.arbitrary()?,
                programs,
                run_dir: s(u)?,
                run_dir_absent: u.arbitrary()?,
            })
        }
        2 => Reply::Deployed(u.arbitrary()?),
        3 => Reply::Identity(Identity {
            protocol: u.arbitrary()?,
            nonce: s(u)?,
            launched_at: finite(u)?,
            launch: if u.arbitrary()? {
                Launch::Process {
                    pid: u.arbitrary()?,
                    pgid: u.arbitrary()?,
                    start_time: u.arbitrary()?,
                    supervisor_pid: u.arbitrary()?,
                    supervisor_start_time: u.arbitrary()?,
                }
            } else {
                Launch::Slurm { job_id: s(u)? }
            },
        }),
        4 => Reply::Exit(Box::new(StepExit {
            record: ExitRecord {
                protocol: u.arbitrary()?,
                exit_code: u.arbitrary()?,
                signal: u.arbitrary()?,
                timed_out: u.arbitrary()?,
                killed_after_grace: u.arbitrary()?,
                error: opt(u, s)?,
                duration_s: opt(u, finite)?,
                slurm_state: opt(u, s)?,
                slurm_exit_code: opt(u, s)?,
            },
            stdout_b64: s(u)?,
            stdout_bytes: u.arbitrary()?,
            stderr_tail: s(u)?,
            // A JSON null is no report: the agent writes none then.
            controller: opt(u, |u| json(u, &WORDS, 2))?.filter(|v| !v.is_null()),
            disks: (0..u.int_in_range(0..=2)?)
                .map(|_| Ok(DiskSpace { path: s(u)?, free_bytes: u.arbitrary()?, free_inodes: u.arbitrary()? }))
                .collect::<Result<Vec<_>>>()?,
        })),
        5 => Reply::Mismatch(s(u)?),
        6 => Reply::Lost(s(u)?),
        7 => Reply::Cancelled(Cancelled { stopped: u.arbitrary()?, detail: s(u)? }),
        8 => Reply::Tail(Tail { text: s(u)?, bytes: u.arbitrary()? }),
        9 => Reply::Outputs(HashedOutputs {
            artifacts: (0..u.int_in_range(0..=2)?)
                .map(|_| {
                    Ok(Artifact { name: s(u)?, path: s(u)?, bytes: u.arbitrary()?, sha256: s(u)?, link: opt(u, s)? })
                })
                .collect::<Result<_>>()?,
            fault: opt(u, s)?,
            state_sha256: opt(u, s)?,
        }),
        10 => {
            let mut checked = BTreeMap::new();
            for _ in 0..u.int_in_range(0..=3)? {
                checked.insert(s(u)?, opt(u, found)?);
            }
            Reply::Checked(checked)
        }
        11 => Reply::Materialized(MaterializedCounts {
            linked: u.arbitrary()?,
            copied: u.arbitrary()?,
            present: u.arbitrary()?,
        }),
        12 => Reply::Chunk(Chunk { b64: s(u)?, offset: u.arbitrary()?, size: u.arbitrary()? }),
        13 => Reply::Error(s(u)?),
        14 => Reply::Files(
            (0..u.int_in_range(0..=2)?)
                .map(|_| {
                    (0..u.int_in_range(0..=2)?)
                        .map(|_| {
                            Ok(JobFile {
                                path: s(u)?,
                                bytes: opt(u, |u| u.arbitrary())?,
                                sha256: opt(u, s)?,
                                link: opt(u, s)?,
                            })
                        })
                        .collect::<Result<Vec<_>>>()
                })
                .collect::<Result<_>>()?,
        ),
        15 => Reply::Seeded(SeededCounts {
            carried: u.arbitrary()?,
            left_out: (0..u.int_in_range(0..=2)?).map(|_| Ok((s(u)?, s(u)?))).collect::<Result<_>>()?,
            state: u.arbitrary()?,
            present: u.arbitrary()?,
        }),
        _ => Reply::Unsupported(Unsupported { agent: u.arbitrary()?, request: u.arbitrary()?, error: s(u)? }),
    })
}

fn generated(u: &mut Unstructured<'_>) -> Result<()> {
    let r = reply(u)?;
    let id: Option<u64> = u.arbitrary()?;
    let line = encode(id, &r);
    assert!(!line.contains('\n'), "a reply is one line: {line}");
    let decoded = decode_line(&line).unwrap_or_else(|| panic!("not an answer: {line}"));
    assert_eq!(decoded.id, id);
    match decoded.reply {
        Ok(back) => assert_eq!(back, r, "{line}"),
        Err(e) => panic!("{e}: {line}"),
    }
    // The same reply in another protocol is refused, naming it.
    let other = line.replacen(&format!("\"protocol\":{PROTOCOL}"), "\"protocol\":2", 1);
    match decode_line(&other).map(|l| l.reply) {
        Some(Err(ReplyError::Version { got })) => assert_eq!(got, "2"),
        other => panic!("a reply of protocol 2 gave {other:?}"),
    }
    Ok(())
}
