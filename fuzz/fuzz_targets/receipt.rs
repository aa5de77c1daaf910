//! Receipts, and the sealed approval state an MCP server carries: a forged or altered one never
//! verifies under the key.
//!
//! The input up to its first NUL byte is read as a receipt (JSON) and as a sealed state, and
//! checked against a plan under a fixed key: a receipt the fuzzer writes never verifies (it
//! would have to forge an HMAC-SHA256), and neither call panics, whatever the times. The bytes
//! after it drive a generator: a receipt signed with the key verifies for its plan until it
//! expires, and altering any one of its fields, signing it with another key, or checking it
//! against a changed plan never verifies; a sealed state opens only unaltered, under its key,
//! before its deadline.
#![no_main]

use arbitrary::{Result, Unstructured};
use cairn_core::plan::{
    ApprovalState, ApprovalStateError, Plan, Receipt, ReceiptError, open_approval_state, seal_approval_state,
    sign_receipt, verify_receipt,
};
use cairn_fuzz::{split_input, text};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

const KEY: &[u8] = b"the daemon's receipt key, 32 bytes";
const WORDS: [&str; 6] = ["plan_", "rcpt_", "a", "é", "0", "\""];

fuzz_target!(|data: &[u8]| {
    let (text, rest) = split_input(data);
    let plan = base_plan();
    let mut u = Unstructured::new(rest);
    let now: i64 = u.arbitrary().unwrap_or(0);
    if let Ok(r) = serde_json::from_str::<Receipt>(&text) {
        // Written by the fuzzer, not signed with the key: it never verifies.
        match verify_receipt(KEY, &r, &plan, now) {
            Err(ReceiptError::BadMac) => {}
            other => panic!("a receipt the fuzzer wrote gave {other:?}: {r:?}"),
        }
    }
    match open_approval_state(KEY, text.trim(), now) {
        Err(ApprovalStateError::Malformed | ApprovalStateError::BadMac) => {}
        other => panic!("a state the fuzzer wrote gave {other:?}: {text:?}"),
    }
    let _ = generated(&mut u, &plan);
});

fn base_plan() -> Plan {
    let mut p: Plan = serde_json::from_value(json!({
        "format": 1, "plan_name": "nightly", "plan_id": "plan_1", "workflow": "w", "version": "1.0.0",
        "workflow_digest": "ab", "input": {"n": 1}, "target": "local", "run_dir": "/runs/a", "commands": [],
        "inputs": [], "effects": [{"kind": "create_run_dir"}], "created_at": 0, "plan_checksum": ""
    }))
    .expect("a plan");
    p.plan_checksum = p.compute_checksum().expect("hashes");
    p
}

fn generated(u: &mut Unstructured<'_>, base: &Plan) -> Result<()> {
    let mut plan = base.clone();
    plan.plan_name = text(u, &WORDS, 3)?;
    plan.plan_id = text(u, &WORDS, 3)?;
    plan.input = json!({"n": u.int_in_range(-1000i64..=1000)?, "s": text(u, &WORDS, 3)?});
    plan.plan_checksum = plan.compute_checksum().expect("hashes");
    // Milliseconds since the epoch, as a clock gives them: within ±2^53, like every hashed number.
    let expires_at: i64 = u.int_in_range(-(1i64 << 53) + 1..=(1i64 << 53) - 1)?;
    let receipt = Receipt {
        receipt_id: text(u, &WORDS, 3)?,
        plan_name: plan.plan_name.clone(),
        plan_id: plan.plan_id.clone(),
        plan_checksum: plan.plan_checksum.clone(),
        request_hash: plan.request_hash().expect("hashes"),
        nonce: text(u, &WORDS, 3)?,
        expires_at,
        mac: String::new(),
    };
    let signed = sign_receipt(KEY, receipt).expect("signs");
    let now: i64 = u.arbitrary()?;
    match verify_receipt(KEY, &signed, &plan, now) {
        Ok(()) => assert!(now <= expires_at),
        Err(ReceiptError::Expired(ms)) => assert!(now > expires_at && ms > 0, "{now} {expires_at} {ms}"),
        Err(e) => panic!("a receipt signed for its plan gave {e}"),
    }
    let when = expires_at.min(now);

    // Another key: never.
    let other = sign_receipt(b"another daemon's key", signed.clone()).expect("signs");
    assert_eq!(verify_receipt(KEY, &other, &plan, when), Err(ReceiptError::BadMac));
    // One field altered after signing: never.
    let mut forged = signed.clone();
    let tweak = |s: &mut String| s.push('x');
    match u.int_in_range(0..=7)? {
        0 => tweak(&mut forged.receipt_id),
        1 => tweak(&mut forged.plan_name),
        2 => tweak(&mut forged.plan_id),
        3 => tweak(&mut forged.plan_checksum),
        4 => tweak(&mut forged.request_hash),
        5 => tweak(&mut forged.nonce),
        6 => forged.expires_at = forged.expires_at.wrapping_add(u.int_in_range(1..=i64::MAX)?),
        _ => {
            // One byte of the MAC's hex changed.
            let at = u.int_in_range(0..=forged.mac.len() - 1)?;
            let mut b = forged.mac.clone().into_bytes();
            b[at] = if b[at] == b'0' { b'1' } else { b'0' };
            forged.mac = String::from_utf8(b).expect("hex");
        }
    }
    assert_eq!(verify_receipt(KEY, &forged, &plan, when), Err(ReceiptError::BadMac), "{forged:?}");
    // The plan changed after the approval: its request no longer matches.
    let mut changed = plan.clone();
    changed.run_dir.push('x');
    changed.plan_checksum = changed.compute_checksum().expect("hashes");
    assert!(verify_receipt(KEY, &signed, &changed, when).is_err());
    let mut changed = plan.clone();
    changed.input = json!({"n": "other"});
    assert_eq!(verify_receipt(KEY, &signed, &changed, when), Err(ReceiptError::RequestChanged));

    // The sealed approval state.
    let state = ApprovalState {
        principal: text(u, &WORDS, 3)?,
        plan_name: plan.plan_name.clone(),
        plan_id: plan.plan_id.clone(),
        plan_checksum: plan.plan_checksum.clone(),
        expires_at,
        nonce: text(u, &WORDS, 3)?,
    };
    let sealed = seal_approval_state(KEY, &state).expect("seals");
    match open_approval_state(KEY, &sealed, now) {
        Ok(s) => assert!(s == state && now <= expires_at),
        Err(ApprovalStateError::Expired(ms)) => assert!(now > expires_at && ms > 0),
        Err(e) => panic!("a sealed state gave {e}"),
    }
    assert_eq!(open_approval_state(b"another key", &sealed, when), Err(ApprovalStateError::BadMac));
    let mut bytes = sealed.clone().into_bytes();
    let at = u.int_in_range(0..=bytes.len() - 1)?;
    let to: u8 = u.arbitrary()?;
    if bytes[at] != to {
        bytes[at] = to;
        let altered = String::from_utf8_lossy(&bytes);
        match open_approval_state(KEY, &altered, when) {
            Err(ApprovalStateError::Malformed | ApprovalStateError::BadMac) => {}
            // Hex is case-insensitive: `A` for `a` is the same state.
            Ok(s) => assert!(s == state && altered.to_ascii_lowercase() == sealed, "{altered} opened"),
            other => panic!("an altered state gave {other:?}"),
        }
    }
    Ok(())
}
