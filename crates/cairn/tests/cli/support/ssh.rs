//! The test sshd of scripts/sshd-up.sh, on 127.0.0.1, which the SSH-target tests need: where its
//! keys are, its port, and the ssh control connections a state root leaves open.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{Cairn, Out, ci};

/// The test sshd's directory (keys, known_hosts), from `CAIRN_TEST_SSHD_DIR` (set by
/// scripts/test.sh) or /tmp/cairn-sshd. Under CI it must exist: a missing service fails.
pub fn sshd() -> Option<PathBuf> {
    let dir = std::env::var_os("CAIRN_TEST_SSHD_DIR").map(PathBuf::from).or_else(|| {
        let d = PathBuf::from("/tmp/cairn-sshd");
        d.join("known_hosts").is_file().then_some(d)
    });
    match dir {
        Some(d) if d.join("id_ed25519").is_file() && d.join("known_hosts").is_file() => Some(d),
        _ if ci() => panic!("no test sshd: run scripts/test.sh (it starts one with scripts/sshd-up.sh)"),
        _ => {
            eprintln!("SKIPPED: no test sshd (run scripts/sshd-up.sh, or scripts/test.sh)");
            None
        }
    }
}

/// The test sshd's port on 127.0.0.1 (`CAIRN_TEST_SSHD_PORT`, default 2222).
pub fn sshd_port() -> String {
    std::env::var("CAIRN_TEST_SSHD_PORT").unwrap_or_else(|_| "2222".into())
}

impl Cairn {
    /// `cairn target add NAME --ssh SSH --identity IDENTITY --known-hosts KNOWN_HOSTS
    /// --workspace-root ROOT EXTRA… --json`.
    pub fn add_target(
        &self,
        name: &str,
        ssh: &str,
        identity: &Path,
        known_hosts: &Path,
        root: &str,
        extra: &[&str],
    ) -> Out {
        let mut args = vec![
            "target",
            "add",
            name,
            "--ssh",
            ssh,
            "--identity",
            identity.to_str().unwrap(),
            "--known-hosts",
            known_hosts.to_str().unwrap(),
            "--workspace-root",
            root,
        ];
        args.extend_from_slice(extra);
        self.json(&args)
    }
}

/// Stops the ssh control connections of a state root (they would linger for ControlPersist).
pub fn close_ssh_masters(c: &Cairn) {
    for e in std::fs::read_dir(c.home().join("ssh")).into_iter().flatten().flatten() {
        let _ = Command::new("ssh")
            .args(["-o", &format!("ControlPath={}", e.path().display()), "-O", "exit", "x"])
            .stdin(Stdio::null())
            .output();
    }
}

/// A known_hosts file in `dir` that pins a freshly generated ed25519 key for the test sshd's
/// address: not the key the server has.
pub fn spoofed_known_hosts(dir: &Path) -> PathBuf {
    let key = dir.join("other-host-key");
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f", key.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(made.status.success(), "ssh-keygen: {}", String::from_utf8_lossy(&made.stderr));
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let fields: Vec<&str> = public.split_whitespace().take(2).collect();
    let path = dir.join("spoofed_known_hosts");
    std::fs::write(&path, format!("[127.0.0.1]:{} {}\n", sshd_port(), fields.join(" "))).unwrap();
    path
}
