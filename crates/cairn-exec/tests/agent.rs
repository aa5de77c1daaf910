//! The step agent run on this machine (the same program an SSH target receives): deploy, a
//! launch that outlives its follower, re-attaching by nonce, a refused nonce, cancelling, tails.

use std::path::Path;
use std::time::{Duration, Instant};

use cairn_exec::agent::protocol::{
    CancelRequest, DeployFile, DeployRequest, Identity, Launch, ReadyRequest, RunRequest, StopSignal, WaitRequest,
};
use cairn_exec::agent::{Agent, StepEnd, Stop};
use serde_json::Value;

fn text(p: &Path) -> String {
    p.display().to_string()
}

fn run_request(dir: &Path, nonce: &str, script: &str, timeout: f64) -> RunRequest {
    RunRequest {
        attempt_dir: text(&dir.join("steps/s/.cairn/attempt-1")),
        nonce: nonce.into(),
        argv: vec!["python3".into(), "-c".into(), script.into()],
        cwd: text(&dir.join("steps/s")),
        run_dir: text(dir),
        base_env: cairn_exec::BASE_ENV.map(String::from).to_vec(),
        allow_env: vec![],
        env_prefix: cairn_exec::ENV_PREFIX.into(),
        env: [("CAIRN_STEP_ID".to_string(), "s".to_string())].into(),
        stdin: "{\"n\":1}".into(),
        timeout,
        grace: 1.0,
        stop_signal: StopSignal::Term,
        max_stdout: 1 << 20,
        stderr_tail: 4096,
        controller: None,
        slurm: None,
        check_files: vec![],
    }
}

fn wait(attempt: &Path, nonce: &str) -> WaitRequest {
    WaitRequest { attempt_dir: text(attempt), nonce: nonce.into() }
}

fn pid_of(id: &Identity) -> u64 {
    match id.launch {
        Launch::Process { pid, .. } => u64::from(pid),
        Launch::Slurm { .. } => panic!("a process was launched, not a Slurm job: {id:?}"),
    }
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().and_then(|r| r.split_whitespace().next()) != Some("Z"))
        .unwrap_or(false)
}

#[test]
fn a_step_runs_with_its_stdin_env_and_exit_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let script = "import json,os,sys; a=json.load(sys.stdin); print(json.dumps({'n': a['n'], 'step': os.environ['CAIRN_STEP_ID'], 'cwd': os.getcwd()}))";
    let mut identity = None;
    let end = Agent::local()
        .run_step(run_request(dir.path(), "att_1", script, 30.0), &mut |id| identity = Some(id.clone()), &|| false)
        .unwrap();
    let id = identity.expect("the launch's identity is reported before its end");
    assert_eq!(id.nonce, "att_1");
    let Launch::Process { pid, start_time, .. } = id.launch else { panic!("{id:?}") };
    assert!(pid > 0 && start_time.is_some(), "{id:?}");
    let StepEnd::Ended(exit) = end else { panic!("{end:?}") };
    let rec = exit.recorded_end(false);
    assert_eq!(rec.exit_code, Some(0));
    let out: Value = serde_json::from_slice(&rec.stdout).unwrap();
    assert_eq!(out["n"], 1);
    assert_eq!(out["step"], "s");
    assert!(out["cwd"].as_str().unwrap().ends_with("steps/s"));
    // The attempt directory holds the whole record: who ran and how it ended.
    let attempt = dir.path().join("steps/s/.cairn/attempt-1");
    for f in ["request.json", "stdin.json", "pid.json", "exit.json", "stdout", "stderr"] {
        assert!(attempt.join(f).is_file(), "{f} missing");
    }
}

#[test]
fn a_launch_outlives_its_follower_and_is_reattached_only_with_its_nonce() {
    let dir = tempfile::tempdir().unwrap();
    let script = "import time; time.sleep(1.5); print('{\"done\": true}')";
    let mut pid = 0;
    let started = Instant::now();
    // The follower stops following as soon as the launch is identified (a dying daemon).
    let stop_after_identity = std::cell::Cell::new(false);
    let end = Agent::local()
        .run_step(
            run_request(dir.path(), "att_2", script, 30.0),
            &mut |id| {
                pid = pid_of(id);
                stop_after_identity.set(true);
            },
            &|| stop_after_identity.get(),
        )
        .unwrap();
    assert!(matches!(end, StepEnd::Detached), "{end:?}");
    assert!(alive(pid), "the step stops when its follower goes away");

    let attempt = dir.path().join("steps/s/.cairn/attempt-1");
    let wrong = Agent::local().wait_step(wait(&attempt, "att_other"), &|| false);
    assert!(matches!(wrong, Ok(StepEnd::Mismatch(_))), "{wrong:?}");
    assert!(alive(pid), "a refused re-attach touches nothing");

    let end = Agent::local().wait_step(wait(&attempt, "att_2"), &|| false).unwrap();
    let StepEnd::Ended(exit) = end else { panic!("{end:?}") };
    assert_eq!(exit.recorded_end(false).stdout, b"{\"done\": true}\n");
    assert!(started.elapsed() >= Duration::from_millis(1400));

    // A second launch into the same attempt directory is refused: an attempt runs once.
    let again = Agent::local().run_step(run_request(dir.path(), "att_2", script, 30.0), &mut |_| {}, &|| false);
    let err = again.unwrap_err().to_string();
    assert!(err.contains("exists already"), "{err}");
}

#[test]
fn cancel_stops_the_whole_group_and_the_end_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    // The tool starts a grandchild in its group; both must go.
    let script = "import subprocess,time; subprocess.Popen(['sleep','60']); time.sleep(60)";
    let mut pid = 0;
    let flag = std::cell::Cell::new(false);
    let _ = Agent::local()
        .run_step(
            run_request(dir.path(), "att_3", script, 120.0),
            &mut |id| {
                pid = pid_of(id);
                flag.set(true);
            },
            &|| flag.get(),
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let attempt = dir.path().join("steps/s/.cairn/attempt-1");
    let answer = Agent::local()
        .cancel(
            CancelRequest { attempt_dir: text(&attempt), nonce: "att_3".into(), grace: 1.0 },
            Duration::from_secs(30),
        )
        .unwrap();
    assert!(matches!(&answer, Stop::Matched(c) if c.stopped), "{answer:?}");
    assert!(!alive(pid));
    let group = std::process::Command::new("pgrep").args(["-g", &pid.to_string()]).output().unwrap();
    // A killed member may linger as a zombie until its new parent reaps it; it no longer runs.
    let left: Vec<u64> = String::from_utf8_lossy(&group.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|p| alive(*p))
        .collect();
    assert!(left.is_empty(), "left running in the group: {left:?}");
    let exit: Value = serde_json::from_slice(&std::fs::read(attempt.join("exit.json")).unwrap()).unwrap();
    assert_eq!(exit["signal"], 15, "{exit}");
}

#[test]
fn the_timeout_is_enforced_by_the_supervisor() {
    let dir = tempfile::tempdir().unwrap();
    let script = "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)";
    let end = Agent::local().run_step(run_request(dir.path(), "att_4", script, 0.5), &mut |_| {}, &|| false).unwrap();
    let StepEnd::Ended(exit) = end else { panic!("{end:?}") };
    let rec = exit.clone().recorded_end(false);
    assert!(rec.timed_out && rec.killed_after_grace, "{exit:?}");
    assert_eq!(rec.signal, Some(9));
}

#[test]
fn deploy_creates_a_new_run_dir_and_refuses_bad_content_or_an_existing_dir() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let files = vec![
        DeployFile::new("input.json", b"{}\n", 0o644),
        DeployFile::new("workflow/tools/t.py", b"print(1)\n", 0o755),
    ];
    let agent = Agent::local();
    let deploy = |run_dir: &Path, files: Vec<DeployFile>| {
        agent.deploy(DeployRequest { run_dir: text(run_dir), files }, Duration::from_secs(30))
    };
    assert_eq!(deploy(&run_dir, files).unwrap(), 2);
    assert_eq!(std::fs::read(run_dir.join("workflow/tools/t.py")).unwrap(), b"print(1)\n");

    let again = deploy(&run_dir, vec![]);
    assert!(again.unwrap_err().to_string().contains("cannot create"));

    let mut bad = DeployFile::new("input.json", b"{}\n", 0o644);
    bad.sha256 = "0".repeat(64);
    let other = dir.path().join("other");
    let refused = deploy(&other, vec![bad]);
    assert!(refused.unwrap_err().to_string().contains("does not match its checksum"));
    assert!(!other.join("input.json").exists());
}

#[test]
fn readiness_reports_what_it_observed() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("data.csv");
    std::fs::write(&input, "a,b\n").unwrap();
    let request = ReadyRequest {
        run_dir: text(&dir.path().join("new")),
        workspace_root: "/nowhere".into(),
        inputs: vec![text(&input), "/no/such/file".into()],
        programs: vec!["python3".into(), "no-such-program-x".into()],
    };
    let facts = Agent::local().ready(request, Duration::from_secs(30)).unwrap();
    assert!(facts.run_dir_absent);
    assert!(facts.parent_writable);
    assert!(!facts.inside_workspace_root);
    assert!(facts.programs["python3"].is_some());
    assert_eq!(facts.programs["no-such-program-x"], None);
    assert_eq!(facts.inputs[&text(&input)], Some(cairn_core::canonical::sha256_hex(b"a,b\n")));
    assert_eq!(facts.inputs["/no/such/file"], None);
}
