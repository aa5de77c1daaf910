//! The step agent run on this machine (the same program an SSH target receives): deploy, a
//! launch that outlives its follower, re-attaching by nonce, a refused nonce, cancelling, tails;
//! its protocol (each request read as Cairn wrote it, another protocol refused, attempt files
//! written before versions followed, unknown ones a mismatch); the environment it builds; and the
//! Slurm job running the agent's own supervisor.

use std::os::unix::process::CommandExt as _;
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
        secrets: Default::default(),
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

/// A tool that failed is answered with the room left on its working directory's disk, read as
/// Cairn reads it here (the same mount point, inode count or not), so a full disk on a target is
/// named as one here would be; a tool that succeeded is answered without.
#[test]
fn a_failed_tool_is_answered_with_the_room_left_on_its_disk() {
    let dir = tempfile::tempdir().unwrap();
    let end = Agent::local()
        .run_step(run_request(dir.path(), "att_1", "import sys; sys.exit(3)", 30.0), &mut |_| {}, &|| false)
        .unwrap();
    let StepEnd::Ended(exit) = end else { panic!("{end:?}") };
    let there = exit.recorded_end(false).disks;
    let here = cairn_exec::disk_space(&[dir.path().join("steps/s")]);
    let seen = |d: &[cairn_core::cause::DiskSpace]| -> Vec<(String, bool)> {
        d.iter().map(|d| (d.path.clone(), d.free_inodes.is_some())).collect()
    };
    assert_eq!(seen(&there), seen(&here));
    assert_eq!(there.len(), 1, "{there:?}");

    let ok = tempfile::tempdir().unwrap();
    let end =
        Agent::local().run_step(run_request(ok.path(), "att_2", "print('{}')", 30.0), &mut |_| {}, &|| false).unwrap();
    let StepEnd::Ended(exit) = end else { panic!("{end:?}") };
    assert!(exit.disks.is_empty(), "{:?}", exit.disks);
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

// ------------------------------------------------------------------------------------ protocol

/// The agent's source, for the tests that import it as a module.
const AGENT_PY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/agent/agent.py");

/// Runs `script` in a python3 that has imported `agent.py` as `agent` (the import runs no request),
/// with `env` as its whole environment and `stdin` on its stdin; its last stdout line, as JSON.
fn with_agent_module(script: &str, env: &[(String, String)], stdin: &str) -> Value {
    use std::io::Write as _;
    // No bytecode cache beside the source.
    let prelude = "import importlib.util, json, os, sys\n\
        sys.dont_write_bytecode = True\n\
        spec = importlib.util.spec_from_file_location('agent', sys.argv[1])\n\
        agent = importlib.util.module_from_spec(spec)\n\
        spec.loader.exec_module(agent)\n";
    let mut child = std::process::Command::new("python3")
        .args(["-c", &format!("{prelude}{script}"), AGENT_PY])
        .env_clear()
        .envs(env.iter().cloned())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "python3 failed\nstdout: {stdout}\nstderr: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn path_only() -> Vec<(String, String)> {
    vec![("PATH".into(), std::env::var("PATH").unwrap_or_default())]
}

/// Every request Cairn sends, serialised by its Rust type, is what the agent reads: the agent's
/// own `parse_request` (the first thing it does with any request) checks the protocol, the op and
/// every field by name and type, refuses a field it does not read, and returns only the fields it
/// reads. So what it hands back equals what Rust serialised exactly when both sides agree on
/// every field. One of each `Request` variant, and a serving agent's request with its id.
#[test]
fn every_request_is_read_by_the_agent_as_cairn_wrote_it() {
    use cairn_core::artifact::OutputDecl;
    use cairn_exec::agent::protocol::{
        ChangedRequest, CheckFile, CheckRequest, Envelope, FilesRequest, MaterializeRequest, OutputsRequest, PROTOCOL,
        Request, SeedRequest, SeedState, SlurmJob, TailRequest,
    };
    let dir = Path::new("/tmp/cairn-no-such-run");
    let mut slurm = run_request(dir, "att_s", "print(1)", 12.5);
    slurm.slurm = Some(SlurmJob { partition: Some("debug".into()), account: None, time_minutes: 3 });
    slurm.controller = Some("snakemake".into());
    slurm.stop_signal = StopSignal::Int;
    slurm.allow_env = vec!["LANG".into(), "OMP_NUM_THREADS".into()];
    slurm.check_files = vec![CheckFile { path: "/w/tools/t.py".into(), sha256: "ab".repeat(32) }];
    let requests = [
        Request::Ready(ReadyRequest {
            run_dir: "/w/run".into(),
            workspace_root: "/w".into(),
            inputs: vec!["/w/in.csv".into()],
            programs: vec!["sbatch".into()],
        }),
        Request::Deploy(DeployRequest {
            run_dir: "/w/run".into(),
            files: vec![DeployFile::new("a/b.py", b"x", 0o755)],
        }),
        Request::Run(Box::new(run_request(dir, "att_p", "print(1)", 30.0))),
        Request::Run(Box::new(slurm)),
        Request::Serve,
        Request::Wait(wait(dir, "att_w")),
        Request::Cancel(CancelRequest { attempt_dir: "/w/a".into(), nonce: "att_c".into(), grace: 2.5 }),
        Request::Tail(TailRequest { path: "/w/a/stderr".into(), max_bytes: 4096 }),
        Request::Outputs(OutputsRequest {
            run_dir: "/w/run".into(),
            step_id: "s".into(),
            outputs: vec![OutputDecl::parse("plots", "plots/").unwrap(), OutputDecl::parse("r", "r.html").unwrap()],
        }),
        Request::Check(CheckRequest {
            run_dir: "/w/run".into(),
            files: vec![CheckFile { path: "steps/s/r.html".into(), sha256: "ab".repeat(32) }],
        }),
        Request::Materialize(MaterializeRequest {
            from: "/w/src".into(),
            to: "/w/run".into(),
            files: vec![CheckFile { path: "steps/s/r.html".into(), sha256: "ab".repeat(32) }],
            dirs: vec!["steps/s/plots".into()],
            link: false,
            once: Some(".cairn/working-copy".into()),
            write: vec![DeployFile::new(".cairn/config.json", b"{}", 0o644)],
        }),
        Request::Changed(ChangedRequest {
            work_dir: "/w/run/steps/p".into(),
            prefix: "steps/p".into(),
            baseline: vec![CheckFile { path: "Snakefile".into(), sha256: "ab".repeat(32) }],
            exclude: vec![".snakemake".into()],
            state: Some(".snakemake/metadata".into()),
        }),
        Request::Files(FilesRequest {
            work_dir: "/w/run/steps/p".into(),
            jobs: vec![vec!["sorted/A.bam".into(), "out/".into()], vec![]],
        }),
        Request::Seed(Box::new(SeedRequest {
            snapshot: "/w/run/workflow".into(),
            to: "/w/run/steps/p".into(),
            from: "/w/src/steps/p".into(),
            baseline: vec![CheckFile { path: "Snakefile".into(), sha256: "ab".repeat(32) }],
            files: vec![CheckFile { path: "calls/all.vcf".into(), sha256: "cd".repeat(32) }],
            state: Some(SeedState { dir: ".snakemake/metadata".into(), sha256: "ef".repeat(32) }),
            write: vec![DeployFile::new(".cairn/config.json", b"{}", 0o644)],
            once: ".cairn/working-copy".into(),
        })),
    ];
    let mut sent: Vec<Value> = requests.iter().map(|r| serde_json::to_value(Envelope::new(r)).unwrap()).collect();
    let served = Envelope { protocol: PROTOCOL, id: Some(7), body: &requests[2] };
    sent.push(serde_json::to_value(served).unwrap());
    let lines: String = sent.iter().map(|v| format!("{v}\n")).collect();
    let read = with_agent_module(
        "out = []\n\
         for line in sys.stdin:\n\
         \x20   try:\n\
         \x20       out.append(agent.parse_request(json.loads(line)))\n\
         \x20   except agent.Invalid as e:\n\
         \x20       out.append({'invalid': str(e)})\n\
         print(json.dumps({'protocol': agent.PROTOCOL, 'read': out}))",
        &path_only(),
        &lines,
    );
    assert_eq!(read["protocol"], PROTOCOL, "agent.py and protocol.rs name one protocol");
    let read = read["read"].as_array().unwrap();
    assert_eq!(read.len(), sent.len());
    for (sent, read) in sent.iter().zip(read) {
        assert_eq!(read, sent, "the agent read the `{}` request otherwise than Cairn wrote it", sent["op"]);
    }
}

/// The agent Cairn sends is the agent on disk, whole: `AGENT_FILES` holds every `.py` file beside
/// `agent.py`, as it is there, and names what the agent's own `FILES` names (the files it copies
/// for a Slurm job when it was not sent).
#[test]
fn cairn_sends_every_file_of_the_agent() {
    use cairn_exec::agent::AGENT_FILES;
    let sent: Vec<&str> = AGENT_FILES.iter().map(|(name, _)| *name).collect();
    let listed = with_agent_module("print(json.dumps(list(agent.FILES)))", &path_only(), "");
    assert_eq!(listed, serde_json::json!(sent), "agent_wire.py's FILES and AGENT_FILES name the same files");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/agent");
    let mut beside: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".py"))
        .collect();
    beside.sort();
    let mut sorted = sent.clone();
    sorted.sort_unstable();
    assert_eq!(beside, sorted, "every agent file is sent");
    for (name, text) in AGENT_FILES {
        assert_eq!(std::fs::read_to_string(dir.join(name)).unwrap(), *text, "{name} is sent as it is");
    }
}

/// A request of a protocol the agent does not speak is refused before anything is done, in words
/// that name both versions and what to do, and Cairn reports it as such.
#[test]
fn a_request_of_another_protocol_is_refused_naming_both_versions() {
    use cairn_exec::agent::AgentError;
    use cairn_exec::agent::protocol::{PROTOCOL, Request};
    let dir = tempfile::tempdir().unwrap();
    let request = Request::Deploy(DeployRequest { run_dir: text(&dir.path().join("run")), files: vec![] });
    let err = Agent::local().call_in_protocol(99, &request, Duration::from_secs(30)).unwrap_err();
    let message = err.to_string();
    let AgentError::Unsupported { agent, request, .. } = err else { panic!("{err:?}") };
    assert_eq!((agent, request), (PROTOCOL, Some(99)));
    for words in [&format!("speaks protocol {PROTOCOL}") as &str, "protocol 99", "reinstall Cairn"] {
        assert!(message.contains(words), "`{words}` is not in: {message}");
    }
    assert!(!dir.path().join("run").exists(), "a refused request did nothing");
}

/// An attempt directory as the agent wrote it before versions existed (no `protocol` in any file).
fn pre_version_attempt(dir: &Path, nonce: &str, pid: u32, supervisor: u32) -> std::path::PathBuf {
    let attempt = dir.join("steps/s/.cairn/attempt-1");
    std::fs::create_dir_all(&attempt).unwrap();
    let write = |name: &str, v: Value| std::fs::write(attempt.join(name), v.to_string()).unwrap();
    write(
        "request.json",
        serde_json::json!({"op": "run", "attempt_dir": text(&attempt), "nonce": nonce, "argv": ["sleep", "60"],
            "cwd": text(&dir.join("steps/s")), "run_dir": text(dir), "env": {"CAIRN_STEP_ID": "s"}, "allow_env": [],
            "stdin": "{}", "timeout": 60.0, "grace": 1.0, "stop_signal": "SIGTERM", "max_stdout": 1 << 20,
            "stderr_tail": 4096, "controller": null, "slurm": null, "check_files": []}),
    );
    write(
        "pid.json",
        serde_json::json!({"nonce": nonce, "pid": pid, "pgid": pid, "start_time": cairn_exec::process_start_time(pid),
            "supervisor_pid": supervisor, "supervisor_start_time": cairn_exec::process_start_time(supervisor),
            "launched_at": 1.0e9}),
    );
    std::fs::write(attempt.join("stdout"), "").unwrap();
    std::fs::write(attempt.join("stderr"), "old\n").unwrap();
    attempt
}

/// A step the previous Cairn launched, still running when the user upgrades: the new agent follows
/// it, stops it by its nonce and reports the end its old supervisor records (played here by this
/// test: it owns the tool and writes exit.json as the old agent did).
#[test]
fn a_launch_recorded_before_versions_is_followed_and_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let mut tool = std::process::Command::new("sleep").arg("60").process_group(0).spawn().unwrap();
    let attempt = pre_version_attempt(dir.path(), "att_old", tool.id(), std::process::id());
    let old_supervisor = {
        let attempt = attempt.clone();
        std::thread::spawn(move || {
            use std::os::unix::process::ExitStatusExt as _;
            let status = tool.wait().unwrap();
            let exit = serde_json::json!({"exit_code": status.code(), "signal": status.signal(),
                "timed_out": false, "killed_after_grace": false, "duration_s": 0.5});
            std::fs::write(attempt.join("exit.json"), exit.to_string()).unwrap();
        })
    };
    let follower = {
        let attempt = attempt.clone();
        std::thread::spawn(move || Agent::local().wait_step(wait(&attempt, "att_old"), &|| false))
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(!follower.is_finished(), "the running step's end was reported before it ended");
    let request = CancelRequest { attempt_dir: text(&attempt), nonce: "att_old".into(), grace: 1.0 };
    let stopped = Agent::local().cancel(request, Duration::from_secs(30)).unwrap();
    assert!(matches!(&stopped, Stop::Matched(c) if c.stopped), "{stopped:?}");
    old_supervisor.join().unwrap();
    let end = follower.join().unwrap().unwrap();
    let StepEnd::Ended(exit) = end else { panic!("{end:?}") };
    assert_eq!(exit.record.protocol, 0, "the record is the old supervisor's");
    assert_eq!(exit.record.signal, Some(15), "{exit:?}");
    assert_eq!(exit.stderr_tail, "old\n");
}

/// Attempt files of a protocol this agent does not read are never guessed at: `wait` and `cancel`
/// answer a mismatch naming the file and both versions, and the process they name is untouched.
#[test]
fn attempt_files_of_an_unknown_protocol_are_a_mismatch_and_nothing_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let mut tool = std::process::Command::new("sleep").arg("60").process_group(0).spawn().unwrap();
    let attempt = pre_version_attempt(dir.path(), "att_new", tool.id(), std::process::id());
    let mut exit = serde_json::json!({"protocol": 1, "exit_code": 0, "signal": null, "timed_out": false,
        "killed_after_grace": false});
    for file in ["pid.json", "exit.json"] {
        let path = attempt.join(file);
        let mut record: Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap_or_default()).unwrap_or_else(|_| exit.take());
        record["protocol"] = 99.into();
        std::fs::write(&path, record.to_string()).unwrap();

        let end = Agent::local().wait_step(wait(&attempt, "att_new"), &|| false);
        let Ok(StepEnd::Mismatch(why)) = end else { panic!("{file}: {end:?}") };
        assert!(why.contains(file) && why.contains("protocol 99") && why.contains("protocol 1"), "{file}: {why}");
        if file == "pid.json" {
            let request = CancelRequest { attempt_dir: text(&attempt), nonce: "att_new".into(), grace: 1.0 };
            let stop = Agent::local().cancel(request, Duration::from_secs(30)).unwrap();
            assert!(matches!(&stop, Stop::Mismatch(why) if why.contains("protocol 99")), "{stop:?}");
            assert!(alive(u64::from(tool.id())), "a refused cancel stopped the tool");
            // The next case: a readable pid.json whose tool has ended, and an unreadable end.
            let mut ident: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            ident["protocol"] = 1.into();
            ident["pid"] = 1_000_000_000u32.into();
            std::fs::write(&path, ident.to_string()).unwrap();
        }
    }
    let _ = tool.kill();
    let _ = tool.wait();
}

// ------------------------------------------------------------------------------------ environment

/// The agent builds a tool's environment by `sandbox_env`'s rule from the names the run request
/// carries: over the environment the agent sees, its `step_env` and Rust's `env_by_rule` agree
/// variable for variable; and a step launched through the agent here gets the variables
/// `sandbox_env` gives here.
#[test]
fn the_agent_builds_the_environment_the_sandbox_builds() {
    let environ: std::collections::BTreeMap<String, String> = [
        ("PATH", std::env::var("PATH").unwrap_or_default().as_str()),
        ("HOME", "/home/h"),
        ("LANG", "C.UTF-8"),
        ("FOO_SECRET", "hunter2"),
        ("ALLOWED_VAR", "allowed"),
        ("CAIRN_TEST_MARK", "marked"),
        ("CAIRN_STEP_ID", "from-the-environment"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut request = run_request(Path::new("/tmp/x"), "att_env", "", 1.0);
    request.allow_env = vec!["ALLOWED_VAR".into(), "UNSET_VAR".into()];
    let line = serde_json::to_string(&cairn_exec::agent::protocol::Envelope::new(
        cairn_exec::agent::protocol::Request::Run(Box::new(request.clone())),
    ))
    .unwrap();
    // Python's own view of its environment: a launcher such as pyenv's python3 edits PATH.
    let out = with_agent_module(
        "r = agent.parse_request(json.loads(sys.stdin.readline()))\n\
         print(json.dumps({'environ': dict(os.environ), 'built': agent.step_env(r)}))",
        &environ.into_iter().collect::<Vec<_>>(),
        &line,
    );
    let (seen_by_python, built) = (&out["environ"], &out["built"]);
    let environ: std::collections::BTreeMap<String, String> = serde_json::from_value(seen_by_python.clone()).unwrap();
    let extra: Vec<(String, String)> = request.env.clone().into_iter().collect();
    let rule: serde_json::Map<String, Value> = cairn_exec::env_by_rule(&environ, &request.allow_env, &extra)
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    assert_eq!(built, &Value::Object(rule));
    assert_eq!(built["CAIRN_STEP_ID"], "s", "the request's own variables win");
    assert!(built.get("FOO_SECRET").is_none() && built["ALLOWED_VAR"] == "allowed", "{built}");

    let dir = tempfile::tempdir().unwrap();
    let mut run = run_request(dir.path(), "att_env", "", 30.0);
    run.argv = vec!["env".into(), "-0".into()];
    let end = Agent::local().run_step(run, &mut |_| {}, &|| false).unwrap();
    let StepEnd::Ended(exit) = end else { panic!("{end:?}") };
    let stdout = exit.recorded_end(false).stdout;
    let mut names: Vec<String> = String::from_utf8_lossy(&stdout)
        .split('\0')
        .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.to_string()))
        .collect();
    names.sort();
    let here: Vec<String> = cairn_exec::sandbox_env(&[], &extra).into_iter().map(|(k, _)| k).collect();
    assert_eq!(names, here);
}

// ------------------------------------------------------------------------------------ Slurm

/// A Slurm job runs the agent's own supervisor: a copy of the agent and its request file beside a
/// fixed job.sh that holds nothing of the request. `sbatch` is played by running job.sh at once
/// in the attempt directory with an empty environment (`--chdir`, `--export NONE`); the real one
/// is in `crates/cairn/tests/remote.rs`. The job records the tool's end, enforcing its timeout.
#[test]
fn a_slurm_job_runs_the_agents_own_supervisor() {
    use cairn_exec::agent::protocol::{Envelope, Request, SlurmJob};
    let dir = tempfile::tempdir().unwrap();
    let lines: String = [
        ("att_job", "import os; print(os.environ['CAIRN_STEP_ID'])", 30.0),
        ("att_slow", "import time; time.sleep(30)", 0.3),
    ]
    .iter()
    .map(|(nonce, script, timeout)| {
        let mut r = run_request(&dir.path().join(nonce), nonce, script, *timeout);
        r.slurm = Some(SlurmJob { partition: None, account: None, time_minutes: 2 });
        r.grace = 0.2;
        serde_json::to_string(&Envelope::new(Request::Run(Box::new(r)))).unwrap() + "\n"
    })
    .collect();
    let out = with_agent_module(
        "import subprocess\n\
         agent.shutil.which = lambda p: '/slurm/bin/' + p\n\
         real_run = subprocess.run\n\
         def sbatch(argv, **kw):\n\
         \x20   if argv[0] != 'sbatch':\n\
         \x20       return real_run(argv, **kw)\n\
         \x20   job = real_run(['sh', argv[-1]], cwd=argv[argv.index('--chdir') + 1], env={}, capture_output=True, text=True)\n\
         \x20   return subprocess.CompletedProcess(argv, 0, '4242;cluster\\n' if job.returncode == 0 else '', job.stderr)\n\
         agent.subprocess.run = sbatch\n\
         out = []\n\
         for line in sys.stdin:\n\
         \x20   r = agent.parse_request(json.loads(line))\n\
         \x20   agent.prepare_attempt(r)\n\
         \x20   ident, err = agent.launch_slurm(r, agent.step_env(r))\n\
         \x20   d = r['attempt_dir']\n\
         \x20   out.append({'ident': ident, 'err': err, 'job': open(d + '/job.sh').read(), \
         \x20               'exit': agent.read_json(d + '/exit.json'), 'stdout': open(d + '/stdout').read()})\n\
         print(json.dumps(out))",
        &path_only(),
        &lines,
    );
    let [done, slow] = out.as_array().unwrap().as_slice() else { panic!("{out}") };
    assert_eq!(done["err"], Value::Null, "{done:#}");
    assert_eq!(done["ident"]["job_id"], "4242", "{done:#}");
    assert_eq!(done["exit"]["protocol"], 1, "the job's supervisor recorded the end: {done:#}");
    assert_eq!(done["exit"]["exit_code"], 0, "{done:#}");
    assert_eq!(done["stdout"], "s\n", "the step's environment reached the job: {done:#}");
    let job = done["job"].as_str().unwrap();
    assert!(job.contains("agent.py supervise.json"), "{job}");
    for variable in ["att_job", "CAIRN_STEP_ID", "print"] {
        assert!(!job.contains(variable), "job.sh holds `{variable}` of the request:\n{job}");
    }
    assert_eq!(slow["exit"]["timed_out"], true, "the job's supervisor enforces the timeout: {slow:#}");
    assert_eq!(slow["exit"]["signal"], 15, "{slow:#}");
}

/// On a target the agent hashes outputs, checks artifacts and materialises them: the same
/// artifacts, the same findings and the same words as `cairn_exec::artifacts` here, on the same
/// files (so `trace` finds a remote file by a local copy's hash).
#[test]
fn the_agent_hashes_checks_and_materialises_artifacts_as_cairn_does_here() {
    use cairn_core::artifact::OutputDecl;
    use cairn_exec::agent::protocol::{CheckFile, CheckRequest, MaterializeRequest, OutputsRequest};
    use cairn_exec::artifacts::{Carried, Carry, check_artifact, hash_outputs, materialize};
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let step = run.join("steps/s");
    std::fs::create_dir_all(step.join("plots/a-b")).unwrap();
    std::fs::create_dir_all(step.join("plots/a")).unwrap();
    std::fs::create_dir_all(step.join("empty")).unwrap();
    std::fs::write(step.join("r.html"), b"<p>report</p>").unwrap();
    std::fs::write(step.join("plots/a/x.png"), b"x").unwrap();
    std::fs::write(step.join("plots/a-b/y.png"), b"y").unwrap();
    std::fs::write(step.join("plots/z.png"), vec![7u8; 3 << 20]).unwrap();
    let agent = Agent::local();
    let t = Duration::from_secs(30);
    let decl = |n: &str, p: &str| OutputDecl::parse(n, p).unwrap();
    let outputs = |decls: Vec<OutputDecl>| {
        agent.outputs(OutputsRequest { run_dir: text(&run), step_id: "s".into(), outputs: decls }, t).unwrap()
    };

    let decls = vec![decl("r", "r.html"), decl("plots", "plots/"), decl("empty", "empty/")];
    let there = outputs(decls.clone());
    assert_eq!(there.fault, None);
    assert_eq!(there.artifacts, hash_outputs(&run, "s", &decls).unwrap(), "the same artifacts, in the same order");
    assert_eq!(there.artifacts.len(), 4);
    for bad in [decl("missing", "missing.txt"), decl("r", "r.html/"), decl("plots", "plots")] {
        let here = hash_outputs(&run, "s", std::slice::from_ref(&bad)).unwrap_err().to_string();
        assert_eq!(outputs(vec![bad]).fault.as_deref(), Some(here.as_str()));
    }
    std::os::unix::fs::symlink("/etc/passwd", step.join("plots/escape")).unwrap();
    let here = hash_outputs(&run, "s", &[decl("plots", "plots/")]).unwrap_err().to_string();
    assert_eq!(outputs(vec![decl("plots", "plots/")]).fault.as_deref(), Some(here.as_str()));
    std::fs::remove_file(step.join("plots/escape")).unwrap();

    // Check: one intact, one edited, one missing.
    let report = &there.artifacts[0];
    let paths: Vec<&str> = there.artifacts.iter().map(|a| a.path.as_str()).collect();
    assert_eq!(
        paths,
        ["steps/s/r.html", "steps/s/plots/a-b/y.png", "steps/s/plots/a/x.png", "steps/s/plots/z.png"],
        "a folder's files in byte order of their paths"
    );
    let x = &there.artifacts[2];
    std::fs::write(step.join("plots/a/x.png"), b"edited").unwrap();
    let files = vec![
        CheckFile { path: report.path.clone(), sha256: report.sha256.clone() },
        CheckFile { path: x.path.clone(), sha256: x.sha256.clone() },
        CheckFile { path: "steps/s/gone.txt".into(), sha256: "00".repeat(32) },
    ];
    let checked = agent.check(CheckRequest { run_dir: text(&run), files: files.clone() }, t).unwrap();
    for f in &files {
        assert_eq!(checked[&f.path], check_artifact(&run, &f.path, &f.sha256), "{}", f.path);
    }
    assert!(checked[&report.path].is_none());
    assert!(matches!(checked[&x.path], Some(cairn_core::replay::Found::Changed { .. })));

    // Materialise: linked where it can, and a changed source is refused in the same words.
    let child = dir.path().join("child");
    let carried = |a: &cairn_core::artifact::Artifact| CheckFile { path: a.path.clone(), sha256: a.sha256.clone() };
    let done = agent
        .materialize(
            MaterializeRequest {
                from: text(&run),
                to: text(&child),
                files: vec![carried(report), carried(&there.artifacts[3])],
                dirs: vec!["steps/s/empty".into()],
                link: true,
                once: None,
                write: vec![],
            },
            t,
        )
        .unwrap();
    assert_eq!((done.linked, done.copied, done.present), (2, 0, 0));
    assert!(child.join("steps/s/empty").is_dir());
    assert_eq!(std::fs::read(child.join("steps/s/r.html")).unwrap(), b"<p>report</p>");
    let changed = vec![carried(x)];
    let err = agent
        .materialize(
            MaterializeRequest {
                from: text(&run),
                to: text(&dir.path().join("other")),
                files: changed,
                dirs: vec![],
                link: true,
                once: None,
                write: vec![],
            },
            t,
        )
        .unwrap_err()
        .to_string();
    let carried_x = [Carried { path: x.path.clone(), sha256: x.sha256.clone() }];
    let here =
        materialize(&run, &dir.path().join("other2"), &Carry { files: &carried_x, link: true, ..Carry::default() })
            .unwrap_err()
            .to_string();
    assert!(err.ends_with(&here), "agent: {err}\nhere: {here}");
}

/// A pipeline's working copy on a target: copied (never linked) once with the run's config, kept
/// as the pipeline changed it, and what it created or changed found as Cairn finds it here.
#[test]
fn the_agent_keeps_a_working_copy_and_finds_its_changes_as_cairn_does_here() {
    use cairn_exec::agent::protocol::{ChangedRequest, CheckFile, MaterializeRequest};
    use cairn_exec::artifacts::{Carried, changed_files};
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let (snap, work) = (dir.path().join("workflow"), dir.path().join("steps/p"));
    std::fs::create_dir_all(snap.join("config")).unwrap();
    std::fs::write(snap.join("Snakefile"), b"rule all: pass").unwrap();
    std::fs::write(snap.join("config/c.yaml"), b"n: 1").unwrap();
    let baseline: Vec<CheckFile> = ["Snakefile", "config/c.yaml"]
        .iter()
        .map(|p| CheckFile {
            path: p.to_string(),
            sha256: cairn_core::canonical::sha256_hex(&std::fs::read(snap.join(p)).unwrap()),
        })
        .collect();
    let agent = Agent::local();
    let t = Duration::from_secs(30);
    let request = MaterializeRequest {
        from: text(&snap),
        to: text(&work),
        files: baseline.clone(),
        dirs: vec![],
        link: false,
        once: Some(".cairn/working-copy".into()),
        write: vec![DeployFile::new(".cairn/config.json", b"{\"n\":2}", 0o644)],
    };
    let done = agent.materialize(request.clone(), t).unwrap();
    assert_eq!((done.linked, done.copied, done.present), (0, 3, 0));
    assert_ne!(
        std::fs::metadata(snap.join("Snakefile")).unwrap().ino(),
        std::fs::metadata(work.join("Snakefile")).unwrap().ino()
    );
    std::fs::write(work.join("config/c.yaml"), b"n: 3").unwrap();
    std::fs::create_dir_all(work.join("results/a-b")).unwrap();
    std::fs::write(work.join("results/a-b/x"), b"x").unwrap();
    std::fs::write(work.join("results/a"), b"a").unwrap();
    assert_eq!(agent.materialize(request.clone(), t).unwrap().present, 3, "kept");
    assert_eq!(std::fs::read(work.join("config/c.yaml")).unwrap(), b"n: 3");
    let mut conflicting = request;
    conflicting.write = vec![DeployFile::new(".cairn/config.json", b"{}", 0o644)];
    let e = agent.materialize(conflicting, t).unwrap_err().to_string();
    assert!(e.contains("not the approved one"), "{e}");

    let exclude = vec![".snakemake".to_string(), ".cairn".to_string()];
    let there = agent
        .changed(
            ChangedRequest {
                work_dir: text(&work),
                prefix: "steps/p".into(),
                baseline: baseline.clone(),
                exclude: exclude.clone(),
                state: None,
            },
            t,
        )
        .unwrap();
    let carried: Vec<Carried> =
        baseline.iter().map(|b| Carried { path: b.path.clone(), sha256: b.sha256.clone() }).collect();
    let here = changed_files(&work, "steps/p", &carried, &[".snakemake", ".cairn"]).unwrap();
    assert_eq!(there.artifacts, here, "the same changes, in the same order");
    let names: Vec<&str> = here.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["config/c.yaml", "results/a", "results/a-b/x"]);
}

/// A finished job's files and a seeded working copy are the same made by the agent (as on a
/// target) and here: the same hashes, links and gone files; the same files carried with their
/// modification times, the same left out, the controller's record carried only unchanged.
#[test]
fn the_agent_hashes_job_files_and_seeds_a_working_copy_as_cairn_does_here() {
    use cairn_core::canonical::sha256_hex;
    use cairn_exec::agent::protocol::{CheckFile, FilesRequest, SeedRequest, SeedState};
    use cairn_exec::artifacts::{Carried, Seed, job_files, seed_working_copy, state_digest};
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let earlier = dir.path().join("earlier");
    std::fs::create_dir_all(earlier.join("out/dir")).unwrap();
    std::fs::create_dir_all(earlier.join(".snakemake/metadata")).unwrap();
    std::fs::write(earlier.join("Snakefile"), b"rule all:\n").unwrap();
    std::fs::write(earlier.join("out/a.txt"), b"a").unwrap();
    std::fs::write(earlier.join("out/b.txt"), b"b").unwrap();
    std::fs::write(earlier.join("out/dir/c.txt"), b"c").unwrap();
    std::os::unix::fs::symlink("a.txt", earlier.join("out/link")).unwrap();
    std::fs::write(earlier.join(".snakemake/metadata/b3V0L2EudHh0"), b"{\"rule\": \"a\"}").unwrap();
    let agent = Agent::local();
    let t = Duration::from_secs(30);
    let paths: Vec<String> = ["out/a.txt", "out/link", "out/dir", "out/gone", "../x"].map(String::from).into();
    let jobs = vec![paths.clone(), vec!["out/b.txt".to_string()]];
    let there = agent.files(FilesRequest { work_dir: text(&earlier), jobs }, t).unwrap();
    assert_eq!(
        there,
        [job_files(&earlier, &paths), job_files(&earlier, &["out/b.txt".to_string()])],
        "the same files, links and gone ones, each job's in the same order"
    );

    let sha = |p: &Path| cairn_core::canonical::sha256_hex(&std::fs::read(p).unwrap());
    let snapshot = dir.path().join("snapshot");
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::write(snapshot.join("Snakefile"), b"rule all:\n").unwrap();
    let baseline = vec![Carried { path: "Snakefile".into(), sha256: sha(&snapshot.join("Snakefile")) }];
    let mut files = vec![
        Carried { path: "out/a.txt".into(), sha256: sha(&earlier.join("out/a.txt")) },
        Carried { path: "out/dir/c.txt".into(), sha256: sha(&earlier.join("out/dir/c.txt")) },
        Carried { path: "out/b.txt".into(), sha256: "0".repeat(64) },
    ];
    let old = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    std::fs::File::open(earlier.join("out/a.txt")).unwrap().set_modified(old).unwrap();
    let state = state_digest(&earlier.join(".snakemake/metadata")).unwrap().unwrap();
    let check = |c: &Carried| CheckFile { path: c.path.clone(), sha256: c.sha256.clone() };
    let write = [cairn_exec::artifacts::Written {
        path: ".cairn/config.json".into(),
        content: b"{}".to_vec(),
        sha256: sha256_hex(b"{}"),
    }];
    let both = |files: &[Carried], state: &str, label: &str| {
        let (here, there) = (dir.path().join(format!("{label}-here")), dir.path().join(format!("{label}-there")));
        let seed = Seed { from: &earlier, files, state: Some((".snakemake/metadata", state)) };
        let done = seed_working_copy(&snapshot, &here, &baseline, &write, ".cairn/working-copy", &seed).unwrap();
        let request = SeedRequest {
            snapshot: text(&snapshot),
            to: text(&there),
            from: text(&earlier),
            baseline: baseline.iter().map(check).collect(),
            files: files.iter().map(check).collect(),
            state: Some(SeedState { dir: ".snakemake/metadata".into(), sha256: state.into() }),
            write: write.iter().map(|w| DeployFile::new(&w.path, &w.content, 0o644)).collect(),
            once: ".cairn/working-copy".into(),
        };
        let counts = agent.seed(request.clone(), t).unwrap();
        assert_eq!(
            (done.carried, &done.left_out, done.state),
            (counts.carried, &counts.left_out, counts.state),
            "{label}"
        );
        assert!(agent.seed(request, t).unwrap().present, "{label}: made once");
        for p in ["Snakefile", "out/a.txt", "out/dir/c.txt", ".snakemake/metadata/b3V0L2EudHh0", ".cairn/config.json"] {
            let (h, th) = (here.join(p), there.join(p));
            assert_eq!(h.exists(), th.exists(), "{label}: {p}");
            if h.exists() {
                assert_eq!(std::fs::read(&h).unwrap(), std::fs::read(&th).unwrap(), "{label}: {p}");
                let time = |f: &Path| std::fs::metadata(f).unwrap().modified().unwrap();
                if p != ".cairn/config.json" && label == "seeded" {
                    assert_eq!(time(&h), time(&th), "{label}: {p} keeps its time both ways");
                }
            }
        }
        (done, here)
    };
    let (done, here) = both(&files, &state, "seeded");
    assert!(done.state);
    assert_eq!(done.carried, 4, "the Snakefile, a.txt, c.txt and the job record");
    assert_eq!(done.left_out.len(), 1);
    assert!(
        done.left_out[0].0 == "out/b.txt" && done.left_out[0].1.contains("its bytes changed"),
        "{:?}",
        done.left_out
    );
    assert!(!here.join("out/b.txt").exists(), "a changed output is left out, so the controller remakes it");
    assert_eq!(std::fs::metadata(here.join("out/a.txt")).unwrap().modified().unwrap(), old);
    assert_ne!(
        std::fs::metadata(here.join("out/a.txt")).unwrap().ino(),
        std::fs::metadata(earlier.join("out/a.txt")).unwrap().ino(),
        "a copy, never a link into the earlier run"
    );
    // The controller's record changed since: nothing of the earlier run's outputs comes along.
    files.truncate(2);
    let (done, here) = both(&files, &"1".repeat(64), "stale");
    assert!(!done.state && done.carried == 0 && done.left_out.len() == 2, "{done:?}");
    assert!(here.join("Snakefile").is_file() && !here.join("out/a.txt").exists());
}

/// A `wait` that comes between a launch's request and its pid file (its supervisor has just
/// started the tool) waits for the pid file and follows the launch: answering it lost would start
/// the step again beside its running tool.
#[test]
fn a_wait_between_the_launch_and_its_pid_file_follows_the_launch_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let mut tool = std::process::Command::new("sleep").arg("1").process_group(0).spawn().unwrap();
    let attempt = pre_version_attempt(dir.path(), "att_new", tool.id(), std::process::id());
    let pid_file = attempt.join("pid.json");
    let held = attempt.join("pid.json.held");
    std::fs::rename(&pid_file, &held).unwrap();
    let supervisor = {
        let attempt = attempt.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(800));
            std::fs::rename(&held, &pid_file).unwrap();
            let status = tool.wait().unwrap();
            let exit = serde_json::json!({"exit_code": status.code(), "signal": null,
                "timed_out": false, "killed_after_grace": false, "duration_s": 1.0});
            std::fs::write(attempt.join("exit.json"), exit.to_string()).unwrap();
        })
    };
    let end = Agent::local().wait_step(wait(&attempt, "att_new"), &|| false).unwrap();
    supervisor.join().unwrap();
    let StepEnd::Ended(exit) = end else { panic!("the starting launch was answered {end:?}") };
    assert_eq!(exit.record.exit_code, Some(0), "{exit:?}");
}
