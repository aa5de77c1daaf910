//! Secrets from the outside: a tool declares two, one kept in the state root's store (`cairn
//! secret set`, the value on stdin) and one in a real external manager (Debian's `pass` over
//! GnuPG, through `cairn secret provider pass show`); the tool gets both values in its
//! environment, and afterwards not one byte of either is anywhere Cairn wrote: the whole state
//! root, the registry's dump, the daemon's log, the plan and an RO-Crate export. A rotated value
//! is not a new signature; a missing one fails the step saying how to set it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use std::os::unix::fs::PermissionsExt;

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::support::*;

pub(crate) const PASSWORD: &str = "hunter2-correct-horse-battery";
pub(crate) const TOKEN: &str = "tok_7f3a9c1e5b2d4f60a8b9c0d1e2f3a4b5";
const ROTATED: &str = "a-new-password-after-rotation";

/// A tool that proves it got its secrets (their SHA-256 in its result) and then prints them
/// everywhere it can: its result, its stderr, and an error-looking line.
pub(crate) const USES_PY: &str = r#"
import hashlib, json, os, sys
password, token = os.environ["DB_PASSWORD"], os.environ["PORTAL_TOKEN"]
print(f"connecting with password={password} and token {token}", file=sys.stderr)
print(json.dumps({
    "password_sha256": hashlib.sha256(password.encode()).hexdigest(),
    "token_sha256": hashlib.sha256(token.encode()).hexdigest(),
    "echo": f"the token is {token}",
    "env_has_daemon_secret": "DB_PASSWORD_FROM_DAEMON" in os.environ,
}))
"#;

pub(crate) const PLAIN_PY: &str = r#"
import json
print(json.dumps({"ok": True}))
"#;

pub(crate) const WORKFLOW: &str = r#"
[workflow]
name = "vault"
version = "1.0.0"

[tools.uses]
command = ["python3", "tools/uses.py"]
secrets = ["DB_PASSWORD", "PORTAL_TOKEN"]

[tools.plain]
command = ["python3", "tools/plain.py"]

[[steps]]
id = "connect"
tool = "uses"

[[steps]]
id = "after"
tool = "plain"
needs = ["connect"]
"#;

pub(crate) fn sha256(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// Runs `program args` with `env`, feeding `stdin`; panics unless it succeeds.
fn sh(program: &str, args: &[&str], env: &[(&str, &Path)], stdin: &str) {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{program}: {e} (scripts/test.sh installs pass and gnupg)"));
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A real `pass` store with one entry, over a fresh GnuPG home with a key without passphrase.
fn pass_store(dir: &Path) -> (PathBuf, PathBuf) {
    let gnupg = dir.join("gnupg");
    let store = dir.join("password-store");
    std::fs::create_dir_all(&gnupg).unwrap();
    std::fs::set_permissions(&gnupg, std::fs::Permissions::from_mode(0o700)).unwrap();
    let env = [("GNUPGHOME", gnupg.as_path()), ("PASSWORD_STORE_DIR", store.as_path())];
    let key = "Cairn Test <cairn-test@example.invalid>";
    sh("gpg", &["--batch", "--passphrase", "", "--quick-gen-key", key, "default", "default", "never"], &env, "");
    sh("pass", &["init", "cairn-test@example.invalid"], &env, "");
    sh("pass", &["insert", "--multiline", "PORTAL_TOKEN"], &env, &format!("{TOKEN}\nuser: lab\n"));
    (gnupg, store)
}

/// Every file under `root` whose bytes hold `needle`.
pub(crate) fn files_holding(root: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file()
                && std::fs::read(&path).is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
            {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn secrets_reach_their_tool_and_nothing_cairn_writes() {
    let scratch = tempfile::tempdir().unwrap();
    let (gnupg, store) = pass_store(scratch.path());
    let c = Cairn::new()
        .with_env("GNUPGHOME", &gnupg)
        .with_env("PASSWORD_STORE_DIR", &store)
        .with_env("DB_PASSWORD_FROM_DAEMON", PASSWORD);
    let wf = write_workflow(&c.path("vault"), WORKFLOW, &[("tools/uses.py", USES_PY), ("tools/plain.py", PLAIN_PY)]);
    c.add(&wf);

    // The value on stdin, never an argument; the other from `pass show PORTAL_TOKEN`.
    let mut set = c.command(&["secret", "set", "DB_PASSWORD"]);
    set.write_stdin(format!("{PASSWORD}\n")).assert().success();
    c.raw(&["secret", "provider", "--", "pass", "show"]).expect(0);
    let listed = c.json(&["secret", "list"]).expect(0).json;
    assert_eq!(listed, json!({"stored": ["DB_PASSWORD"], "provider": ["pass", "show"]}));
    let stored = c.home().join("secrets/DB_PASSWORD");
    assert_eq!(std::fs::metadata(&stored).unwrap().permissions().mode() & 0o777, 0o600);

    // The plan lists which secrets the run receives, never their values.
    let input = c.input(&json!({}));
    std::fs::create_dir_all(c.path("planned")).unwrap();
    let plan = c.plan("vault", &input, "local", &c.path("planned/run"), "p1").expect(0).json;
    assert_eq!(plan["commands"][0]["secrets"], json!(["DB_PASSWORD", "PORTAL_TOKEN"]), "{plan:#}");
    assert!(plan["commands"][1].get("secrets").is_none(), "{plan:#}");

    c.start_daemon();
    let run = c.run("vault", &json!({}), &["--run-id", "R1"]).expect(0).json;
    assert_eq!(run["status"], "READY", "{run:#}");
    let result = &step(&run, "connect")["result"];
    assert_eq!(result["password_sha256"], sha256(PASSWORD), "the tool got the stored value: {run:#}");
    assert_eq!(result["token_sha256"], sha256(TOKEN), "the tool got pass's first line: {run:#}");
    assert_eq!(result["echo"], "the token is [secret PORTAL_TOKEN]", "{run:#}");
    assert_eq!(result["env_has_daemon_secret"], false, "the daemon's environment is scrubbed as before");
    let log =
        http("GET", &format!("{}/runs/R1/steps/connect/log", c.daemon().url), Some(&c.token("viewer")), None, &[]);
    assert_eq!(log.status, 200, "{}", log.text);
    let tail = log.body.to_string();
    assert!(tail.contains("password=[secret DB_PASSWORD]") && tail.contains("token [secret PORTAL_TOKEN]"), "{tail}");

    // Rotated: the same signature, so a replay of the later step reuses `connect`.
    let mut rotate = c.command(&["secret", "set", "DB_PASSWORD"]);
    rotate.write_stdin(ROTATED).assert().success();
    let child = c.json(&["replay", "R1", "--step", "after"]).expect(0).json;
    assert_eq!(step(&child, "connect")["decision"], "reuse", "a new value is not a new signature: {child:#}");

    // Exported with its data, then every place Cairn wrote is searched for the values' bytes.
    c.json(&["export", "R1", "--ro-crate", &c.path_str("crate")]).expect(0);
    let dump = c.sql(&[], ".dump").expect("sqlite3 is there in CI");
    let plan_file = c.home().join("plans");
    c.stop_daemon();
    for value in [PASSWORD, TOKEN, ROTATED] {
        let bytes = value.as_bytes();
        let mut found = files_holding(&c.home(), bytes).into_iter().filter(|p| *p != stored).collect::<Vec<_>>();
        found.extend(files_holding(&c.path("crate"), bytes));
        found.extend(files_holding(&plan_file, bytes));
        found.extend(files_holding(&c.path("planned"), bytes));
        assert!(found.is_empty(), "`{value}` is in {found:?}");
        assert!(!dump.contains(value), "`{value}` is in the registry");
    }
    // The store's own file holds the current value, and nothing else does.
    assert_eq!(std::fs::read_to_string(&stored).unwrap(), ROTATED);
}

#[test]
fn a_missing_secret_fails_the_step_saying_how_to_set_it() {
    let c = Cairn::new();
    let wf = write_workflow(&c.path("vault"), WORKFLOW, &[("tools/uses.py", USES_PY), ("tools/plain.py", PLAIN_PY)]);
    c.add(&wf);
    let run = c.run("vault", &json!({}), &["--run-id", "M1"]);
    assert_eq!(run.code, 3, "{}", run.stdout);
    let error = step(&run.json, "connect")["error"].as_str().unwrap_or_default().to_string();
    assert!(
        error.contains("secret `DB_PASSWORD` has no value") && error.contains("cairn secret set DB_PASSWORD"),
        "{error}"
    );
    assert_eq!(step(&run.json, "connect")["attempts"], 1, "a refused launch is not retried");
    // A bad name or value is refused and stores nothing.
    let mut short = c.command(&["secret", "set", "DB_PASSWORD"]);
    short.write_stdin("abc").assert().code(2);
    let bad = c.json(&["secret", "set", "lower"]);
    assert_eq!((bad.code, bad.json["error"]["code"].clone()), (2, json!("invalid_secret")));
    assert!(!c.home().join("secrets/DB_PASSWORD").exists());
}
