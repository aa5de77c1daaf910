//! Compute targets against a real OpenSSH server on loopback (started by `scripts/sshd-up.sh`,
//! which `scripts/test.sh` runs; its directory comes in `CAIRN_TEST_SSHD_DIR`): registration and
//! its refusals, the read-only probe, strict host-key checking, and an unreachable host.

use std::path::Path;

use serde_json::Value;

use crate::support::*;

/// `cairn target add` with the workspace root of these tests, which nothing may create (a probe
/// only reads).
fn add(c: &Cairn, name: &str, ssh: &str, identity: &Path, known_hosts: &Path, extra: &[&str]) -> Out {
    c.add_target(name, ssh, identity, known_hosts, "/tmp/cairn-test-workspace/ws", extra)
}

fn targets(c: &Cairn) -> Vec<Value> {
    c.json(&["target", "list"]).expect(0).json["targets"].as_array().unwrap().clone()
}

#[test]
fn a_target_is_registered_probed_over_ssh_and_removed() {
    let Some(d) = sshd() else { return };
    let c = Cairn::new();
    let ssh = format!("root@127.0.0.1:{}", sshd_port());
    let added = add(&c, "ci", &ssh, &d.join("id_ed25519"), &d.join("known_hosts"), &[]).expect(0).json;
    assert_eq!(added["name"], "ci");
    assert_eq!(added["ssh"]["port"].as_u64().unwrap().to_string(), sshd_port());
    let names: Vec<String> = targets(&c).iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, ["local", "ci"]);

    let probed = c.json(&["target", "probe", "ci"]).expect(0).json;
    let o = &probed["observed"];
    assert_eq!(probed["target"], "ci");
    assert!(o["cpus"].as_u64().unwrap() >= 1, "{o:#}");
    assert!(o["memory"]["total_bytes"].as_u64().unwrap() > 0, "{o:#}");
    assert!(!o["kernel"].as_str().unwrap().is_empty());
    assert!(o["python"]["version"].as_str().unwrap().starts_with('3'), "{o:#}");
    assert_eq!(o["workspace"]["path"], "/tmp/cairn-test-workspace/ws");
    assert!(o["workspace"]["free_bytes"].as_u64().unwrap() > 0);
    // scripts/test.sh puts the test venv (with its pinned Snakemake) on the sshd's PATH: the probe
    // reads the version the installed package declares.
    if std::env::var_os("CAIRN_TEST_VENV").is_some() {
        let pinned =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/requirements-test.txt"))
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("snakemake==").map(str::to_string))
                .unwrap();
        assert_eq!(o["snakemake"]["version"], pinned.as_str(), "{o:#}");
        assert!(o["snakemake"]["path"].as_str().unwrap().ends_with("/bin/snakemake"), "{o:#}");
    }
    for tool in ["sbatch", "squeue", "scancel"] {
        assert!(o["slurm"].get(tool).is_some(), "the probe reports {tool}: {o:#}");
    }
    assert!(o["docker_host"]["refused"].is_boolean());
    // Read-only: the probe did not create the workspace root it was asked about.
    assert!(!std::path::Path::new("/tmp/cairn-test-workspace/ws").exists());

    // The local target is built in and probes this machine.
    let local = c.json(&["target", "probe", "local"]).expect(0).json;
    assert_eq!(local["observed"]["cpus"], o["cpus"], "loopback: the same machine");

    c.json(&["target", "remove", "ci"]).expect(0);
    assert_eq!(targets(&c).len(), 1);
    let gone = c.json(&["target", "probe", "ci"]).expect(2);
    assert!(gone.stderr.contains("not configured"), "{}", gone.stderr);
    close_ssh_masters(&c);
}

/// A refused registration: name, ssh, identity, known_hosts, extra flags, and what the error says.
type Case<'a> = (&'a str, String, &'a Path, &'a Path, Vec<&'a str>, &'a str);

#[test]
fn registration_refuses_bad_input_and_stores_nothing() {
    let Some(d) = sshd() else { return };
    let c = Cairn::new();
    let (id, kh, missing) = (d.join("id_ed25519"), d.join("known_hosts"), c.path("nope"));
    let (id, kh, missing) = (id.as_path(), kh.as_path(), missing.as_path());
    let cases: Vec<Case> = vec![
        ("local", "root@h".into(), id, kh, vec![], "not `local`"),
        ("a b", "root@h".into(), id, kh, vec![], "not valid"),
        ("t", "noatsign".into(), id, kh, vec![], "USER@HOST"),
        ("t", "root@h;reboot".into(), id, kh, vec![], "USER@HOST"),
        ("t", "root@h:0".into(), id, kh, vec![], "USER@HOST"),
        ("t", "root@h".into(), missing, kh, vec![], "--identity"),
        ("t", "root@h".into(), id, missing, vec![], "--known-hosts"),
        ("t", "root@h".into(), id, kh, vec!["--partition", "debug"], "slurm"),
        ("t", "root@h".into(), id, kh, vec!["--executor", "slurm", "--account", "a;b"], "account"),
    ];
    for (name, ssh, identity, known_hosts, extra, says) in cases {
        let out = add(&c, name, &ssh, identity, known_hosts, &extra);
        assert_eq!(out.code, 2, "{name} {ssh} {extra:?}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{name} {ssh}: expected `{says}` in: {}", out.stderr);
    }
    let rel = c.json(&["target", "add", "t", "--ssh", "root@h", "--workspace-root", "relative/dir"]);
    assert_eq!(rel.code, 2, "{}", rel.stderr);
    assert_eq!(targets(&c).len(), 1, "only `local`: nothing was stored");
    add(&c, "t", "root@h", id, kh, &[]).expect(0);
    let dup = add(&c, "t", "root@other", id, kh, &[]);
    assert_eq!(dup.code, 4, "{}", dup.stderr);
    assert_eq!(targets(&c)[1]["ssh"]["host"], "h", "the first registration stands");
}

/// Host keys are checked strictly: a known_hosts file holding another key for the host refuses
/// the connection (even while a connection of another configuration of the same host is open),
/// and an unreachable port says so.
#[test]
fn a_wrong_host_key_or_a_closed_port_is_refused_clearly() {
    let Some(d) = sshd() else { return };
    let c = Cairn::new();
    let ssh = format!("root@127.0.0.1:{}", sshd_port());
    add(&c, "good", &ssh, &d.join("id_ed25519"), &d.join("known_hosts"), &[]).expect(0);
    c.json(&["target", "probe", "good"]).expect(0);

    let bad_known = spoofed_known_hosts(c.work.path());
    add(&c, "spoofed", &ssh, &d.join("id_ed25519"), &bad_known, &[]).expect(0);
    let out = c.json(&["target", "probe", "spoofed"]);
    assert_eq!(out.code, 2, "a wrong host key must refuse: {}", out.stdout);
    assert_eq!(out.json["error"]["code"], "target_refused", "a key to fix, not a fault to wait out: {}", out.stdout);
    assert!(out.stderr.contains("host key"), "{}", out.stderr);
    assert!(out.stderr.contains(bad_known.to_str().unwrap()), "names the known_hosts file: {}", out.stderr);

    add(&c, "closed", "root@127.0.0.1:1", &d.join("id_ed25519"), &d.join("known_hosts"), &[]).expect(0);
    let out = c.json(&["target", "probe", "closed"]);
    assert_eq!(out.code, 5, "an unreachable host is a fault of the environment: {}", out.stdout);
    assert_eq!(out.json["error"]["code"], "target_unreachable", "{}", out.stdout);
    assert!(out.stderr.contains("cannot reach"), "{}", out.stderr);
    close_ssh_masters(&c);
}
