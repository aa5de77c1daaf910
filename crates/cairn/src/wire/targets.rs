//! Compute targets as the surfaces show them: `local` and each configured SSH host, with its last
//! probe and what that probe says of its readiness.

use cairn_engine::target::TargetOverview;
use serde_json::{Value, json};

use super::to_value;

/// `{targets: [...]}`, `local` first: a configured target's spec (`name`, `ssh`, `identity`,
/// `known_hosts`, `workspace_root`, `executor`, `partition`, `account`), or `local`'s `name`,
/// `builtin`, `executor` and `workspace_root`; each with `readiness` (`{ready, problems}`) and
/// `last_probe` (`{target, workspace_root, observed, probed_at}`), `null` when never probed.
pub fn targets_json(all: &[TargetOverview]) -> Value {
    let targets: Vec<Value> = all
        .iter()
        .map(|t| {
            let mut v = match &t.spec {
                Some(spec) => to_value(spec),
                None => json!({
                    "name": t.name, "builtin": true, "executor": t.executor, "workspace_root": t.workspace_root,
                }),
            };
            v["readiness"] = t.readiness.as_ref().map(to_value).unwrap_or(Value::Null);
            v["last_probe"] = t.last_probe.as_ref().map(to_value).unwrap_or(Value::Null);
            v
        })
        .collect();
    json!({ "targets": targets })
}
