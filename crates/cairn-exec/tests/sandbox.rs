//! The sandbox against real processes: /bin/sh, coreutils and python3.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::{Duration, Instant};

use cairn_core::status::Outcome;
use cairn_exec::{ProcessIdentity, ToolCommand, ToolRun, process_start_time, run_tool, sandbox_env};
use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;
use serde_json::json;

/// Variables of this test process that the environment tests look for. Set once, before any test
/// reads the environment (every test goes through `init`).
fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: runs once, while every other test thread waits in `call_once` before touching
        // the environment.
        unsafe {
            std::env::set_var("FOO_SECRET", "hunter2");
            std::env::set_var("CAIRN_TEST_MARK", "marked");
            std::env::set_var("ALLOWED_VAR", "allowed");
        }
    });
}

fn command(dir: &Path, argv: &[&str]) -> ToolCommand {
    init();
    ToolCommand {
        argv: argv.iter().map(|a| a.to_string()).collect(),
        cwd: dir.to_path_buf(),
        env: sandbox_env(&[], &[]),
        stdin: b"{}".to_vec(),
        timeout: Duration::from_secs(5),
        grace: Duration::from_millis(200),
        max_stdout: 16 * 1024 * 1024,
        stderr_tail: 4096,
        report_after: Duration::ZERO,
    }
}

fn sh(dir: &Path, script: &str) -> ToolCommand {
    command(dir, &["/bin/sh", "-c", script])
}

fn run(cmd: &ToolCommand) -> ToolRun {
    run_tool(cmd, &mut |_| {})
}

fn assert_failed(run: &ToolRun, error: &str) {
    assert_eq!(run.outcome, Outcome::Failed, "{run:?}");
    assert_eq!(run.error.as_deref(), Some(error), "{run:?}");
    assert!(run.result.is_none(), "{run:?}");
}

/// Dead means gone (ESRCH) or a zombie waiting to be reaped by whoever inherited it.
fn is_dead(pid: i32) -> bool {
    if kill(Pid::from_raw(pid), None) == Err(Errno::ESRCH) {
        return true;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return true };
    stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()) == Some("Z")
}

fn wait_dead(pid: i32) -> bool {
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        if is_dead(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    is_dead(pid)
}

#[test]
fn cat_echoes_its_json_arguments_as_the_result() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = command(dir.path(), &["/bin/cat"]);
    cmd.stdin = br#"{"a":1}"#.to_vec();
    let run = run(&cmd);
    assert_eq!(run.outcome, Outcome::Completed, "{run:?}");
    assert_eq!(run.result, Some(json!({"a": 1})));
    assert_eq!(run.exit_code, Some(0));
    assert_eq!(run.signal, None);
    assert_eq!(run.error, None);
    assert!(run.spawn <= run.duration);
}

/// What admits a tool (a daemon's step slot) is held from its spawn to its exit, not while it
/// waits to be admitted nor after: its time is its own, and a refusal starts nothing.
#[test]
fn an_admitted_tool_holds_its_admission_only_while_it_runs() {
    use std::sync::atomic::{AtomicBool, Ordering};
    struct Held<'a>(&'a AtomicBool);
    impl Drop for Held<'_> {
        fn drop(&mut self) {
            self.0.store(false, Ordering::SeqCst);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let held = AtomicBool::new(false);
    let cmd = sh(dir.path(), "cat; sleep 0.2");
    let mut seen_running = None;
    let admit = |launch: cairn_exec::Launch, _: &cairn_exec::Park<'_>| {
        // A slot long in coming: its wait is not the tool's time.
        std::thread::sleep(Duration::from_millis(500));
        held.store(true, Ordering::SeqCst);
        launch();
        Ok::<_, ()>(Held(&held))
    };
    let run = cairn_exec::run_admitted(&cmd, admit, &mut |_| seen_running = Some(held.load(Ordering::SeqCst))).unwrap();
    assert_eq!(run.outcome, Outcome::Completed, "{run:?}");
    assert_eq!(seen_running, Some(true), "held when the tool started");
    assert!(!held.load(Ordering::SeqCst), "given back once it ended");
    assert!(run.duration >= Duration::from_millis(200) && run.duration < Duration::from_millis(500), "{run:?}");

    // Refused: nothing starts.
    let marker = dir.path().join("started");
    let cmd = command(dir.path(), &["/usr/bin/touch", marker.to_str().unwrap()]);
    let refused = cairn_exec::run_admitted(&cmd, |_, _| Err::<(), _>("stopped"), &mut |_| panic!("started"));
    assert_eq!(refused.err(), Some("stopped"));
    assert!(!marker.exists());

    // Started by another thread (a step slot's releaser): supervised here all the same.
    let cmd = sh(dir.path(), "cat > /dev/null; echo '{\"ok\": 1}'");
    let admit = |launch: cairn_exec::Launch, _: &cairn_exec::Park<'_>| {
        std::thread::spawn(launch).join().unwrap();
        Ok::<_, ()>(())
    };
    let mut reported = None;
    let run = cairn_exec::run_admitted(&cmd, admit, &mut |p| reported = Some(p.pid)).unwrap();
    assert_eq!(run.outcome, Outcome::Completed, "{run:?}");
    assert_eq!(run.result, Some(serde_json::json!({"ok": 1})));
    assert!(reported.is_some());

    // Parked on its pipes while another thread starts it: nothing closes them before the
    // launch; the tool's input is written by the thread that started it (this one is still
    // parked), and the tool's end wakes the park.
    let mut cmd = sh(dir.path(), "cat > /dev/null; echo '{\"ok\": 2}'");
    cmd.stdin = br#"{"n": 1}"#.to_vec();
    let mut woke = None;
    let admit = |launch: cairn_exec::Launch, park: &cairn_exec::Park<'_>| {
        let starter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            launch();
        });
        let parked = std::time::Instant::now();
        assert!(park.wait(Duration::from_secs(60)), "woken by the tool's end, not the clock");
        woke = Some(parked.elapsed());
        starter.join().unwrap();
        Ok::<_, ()>(())
    };
    let run = cairn_exec::run_admitted(&cmd, admit, &mut |_| {}).unwrap();
    assert_eq!(run.outcome, Outcome::Completed, "{run:?}");
    assert_eq!(run.result, Some(serde_json::json!({"ok": 2})));
    let woke = woke.unwrap();
    assert!(woke >= Duration::from_millis(100) && woke < Duration::from_secs(30), "woken after {woke:?}");

    // What giving the admission back costs (a step slot's releaser starts the next tool then)
    // is not the tool's time.
    struct SlowRelease;
    impl Drop for SlowRelease {
        fn drop(&mut self) {
            std::thread::sleep(Duration::from_millis(400));
        }
    }
    let admit = |launch: cairn_exec::Launch, _: &cairn_exec::Park<'_>| {
        launch();
        Ok::<_, ()>(SlowRelease)
    };
    let run = cairn_exec::run_admitted(&cmd, admit, &mut |_| {}).unwrap();
    assert_eq!(run.outcome, Outcome::Completed, "{run:?}");
    assert!(run.duration < Duration::from_millis(400), "{run:?}");

    // Admitted, but its launch never ran (the thread that was to run it failed): nothing
    // started, said so.
    let dropped = |launch: cairn_exec::Launch, _: &cairn_exec::Park<'_>| {
        drop(launch);
        Ok::<_, ()>(())
    };
    let run = cairn_exec::run_admitted(&cmd, dropped, &mut |_| panic!("started")).unwrap();
    assert_eq!(run.outcome, Outcome::Failed);
    assert_eq!(run.error.as_deref(), Some("could not be started: the thread that admitted it failed before its spawn"));
}

#[test]
fn a_bare_program_name_is_found_on_the_tools_own_path() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let tool = bin.join("mytool");
    std::fs::write(&tool, "#!/bin/sh\nprintf '  {\"tool\": \"mine\"}\\n\\n'\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();

    let mut cmd = command(dir.path(), &["mytool"]);
    cmd.env.retain(|(k, _)| k != "PATH");
    cmd.env.push(("PATH".into(), format!("/nonexistent:{}:/usr/bin:/bin", bin.display())));
    let run = run(&cmd);
    assert_eq!(run.outcome, Outcome::Completed, "{run:?}");
    assert_eq!(run.result, Some(json!({"tool": "mine"})));

    // Our own PATH does not count: with an empty tool PATH, `cat` is not found.
    let mut cmd = command(dir.path(), &["cat"]);
    cmd.env = vec![("PATH".into(), "/nonexistent".into())];
    assert_failed(&run_tool(&cmd, &mut |_| {}), "could not be started: `cat`: No such file or directory (os error 2)");
}

#[test]
fn exits_64_and_65_are_invalid_input() {
    let dir = tempfile::tempdir().unwrap();
    for code in [64, 65] {
        let run = run(&sh(dir.path(), &format!("echo '{{}}'; exit {code}")));
        assert_eq!(run.outcome, Outcome::InvalidInput, "{run:?}");
        assert_eq!(run.exit_code, Some(code));
        assert_eq!(run.result, None);
        assert_eq!(run.error, Some(format!("exited with code {code} (invalid input)")));
    }
}

#[test]
fn exit_77_is_denied() {
    let dir = tempfile::tempdir().unwrap();
    let run = run(&sh(dir.path(), "exit 77"));
    assert_eq!(run.outcome, Outcome::Denied, "{run:?}");
    assert_eq!(run.exit_code, Some(77));
    assert_eq!(run.error.as_deref(), Some("exited with code 77 (denied)"));
}

#[test]
fn another_exit_code_fails_even_with_valid_json() {
    let dir = tempfile::tempdir().unwrap();
    let run = run(&sh(dir.path(), "echo '{\"partial\": true}'; echo oops >&2; exit 3"));
    assert_failed(&run, "exited with code 3");
    assert_eq!(run.exit_code, Some(3));
    assert_eq!(run.stderr_tail, "oops\n");
}

#[test]
fn invalid_json_fails() {
    let dir = tempfile::tempdir().unwrap();
    let run = run(&sh(dir.path(), "echo 'not json'"));
    assert_eq!(run.outcome, Outcome::Failed, "{run:?}");
    assert_eq!(run.exit_code, Some(0));
    let error = run.error.unwrap();
    assert!(error.starts_with("printed invalid JSON on stdout: expected"), "{error}");

    // Two values are not one value.
    let run = run_tool(&sh(dir.path(), "echo '{} {}'"), &mut |_| {});
    let error = run.error.unwrap();
    assert!(error.starts_with("printed invalid JSON on stdout: trailing characters"), "{error}");
}

#[test]
fn empty_stdout_fails() {
    let dir = tempfile::tempdir().unwrap();
    assert_failed(&run(&sh(dir.path(), "true")), "exited 0 but printed nothing on stdout");
    assert_failed(&run(&sh(dir.path(), "printf ' \\n\\t\\n'")), "exited 0 but printed nothing on stdout");
}

#[test]
fn a_signal_fails_and_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let run = run(&sh(dir.path(), "echo '{}'; kill -9 $$"));
    assert_failed(&run, "was killed by signal 9 (SIGKILL)");
    assert_eq!(run.signal, Some(9));
    assert_eq!(run.exit_code, None);
}

#[test]
fn a_timeout_terminates_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sh(dir.path(), "sleep 30");
    cmd.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let run = run(&cmd);
    assert_eq!(run.outcome, Outcome::TimedOut, "{run:?}");
    assert_eq!(run.error.as_deref(), Some("exceeded its timeout of 300 ms and was terminated"));
    assert_eq!(run.signal, Some(15));
    assert!(run.duration >= Duration::from_millis(300), "{run:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A tool started by another thread while its supervisor was still parked (a step slot handed
/// over) has its timeout counted from its spawn, not from when its supervisor got to it.
#[test]
fn a_timeout_counts_from_the_spawn_when_the_supervisor_comes_late() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sh(dir.path(), "sleep 30");
    cmd.timeout = Duration::from_millis(300);
    let admit = |launch: cairn_exec::Launch, _: &cairn_exec::Park<'_>| {
        std::thread::spawn(launch).join().unwrap();
        // The supervisor wakes late: a parked waiter finds its running tool by its clock.
        std::thread::sleep(Duration::from_millis(250));
        Ok::<_, ()>(())
    };
    let run = cairn_exec::run_admitted(&cmd, admit, &mut |_| {}).unwrap();
    assert_eq!(run.outcome, Outcome::TimedOut, "{run:?}");
    assert_eq!(run.signal, Some(15));
    // Terminated 300 ms after its spawn, not 300 ms after the supervisor came (550 ms).
    assert!(run.duration >= Duration::from_millis(300) && run.duration < Duration::from_millis(500), "{run:?}");
}

#[test]
fn a_tool_ignoring_sigterm_is_killed_after_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sh(dir.path(), "trap '' TERM; sleep 30; echo '{}'");
    cmd.timeout = Duration::from_millis(300);
    cmd.grace = Duration::from_millis(200);
    let started = Instant::now();
    let run = run(&cmd);
    assert_eq!(run.outcome, Outcome::TimedOut, "{run:?}");
    assert_eq!(
        run.error.as_deref(),
        Some("exceeded its timeout of 300 ms and was killed after ignoring SIGTERM for 200 ms")
    );
    assert_eq!(run.signal, Some(9));
    assert!(run.duration >= Duration::from_millis(500), "{run:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn no_grandchild_survives_the_attempt() {
    let dir = tempfile::tempdir().unwrap();
    // The grandchild keeps stdout and stderr open: the attempt must still end promptly.
    let started = Instant::now();
    let run = run(&sh(dir.path(), "sleep 1000 & echo $! > grandchild.pid; echo '{}'"));
    assert_eq!(run.outcome, Outcome::Completed, "{run:?}");
    assert_eq!(run.result, Some(json!({})));
    assert!(started.elapsed() < Duration::from_secs(3));

    let pid: i32 = std::fs::read_to_string(dir.path().join("grandchild.pid")).unwrap().trim().parse().unwrap();
    assert!(wait_dead(pid), "grandchild {pid} is still alive");
}

#[test]
fn too_much_stdout_kills_the_group_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let run = run(&sh(dir.path(), "head -c 100000000 /dev/zero; sleep 30"));
    assert_failed(&run, "wrote more than 16777216 bytes to stdout");
    assert!(started.elapsed() < Duration::from_secs(3), "{run:?}");
}

#[test]
fn too_much_stdout_fails_even_after_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = command(dir.path(), &["python3", "-c", "print('\"' + 'x' * 2000 + '\"')"]);
    cmd.max_stdout = 100;
    let run = run(&cmd);
    assert_failed(&run, "wrote more than 100 bytes to stdout");

    // A tool that ends at once has its output read only after its exit: the bound holds there too.
    let long = format!("\"{}\"", "x".repeat(2000));
    let mut cmd = command(dir.path(), &["/bin/echo", &long]);
    cmd.max_stdout = 100;
    assert_failed(&run_tool(&cmd, &mut |_| {}), "wrote more than 100 bytes to stdout");

    // Exactly the bound is fine.
    let mut cmd = sh(dir.path(), "printf '{\"a\":1}'");
    cmd.max_stdout = 7;
    let run = run_tool(&cmd, &mut |_| {});
    assert_eq!(run.outcome, Outcome::Completed, "{run:?}");
}

#[test]
fn only_the_tail_of_a_huge_stderr_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let script = "import sys\nsys.stderr.write('a' * 5_000_000 + 'THE END')\nprint('{}')";
    let mut cmd = command(dir.path(), &["python3", "-c", script]);
    cmd.stderr_tail = 100;
    let run = run(&cmd);
    assert_eq!(run.outcome, Outcome::Completed, "{run:?}");
    assert_eq!(run.stderr_tail.len(), 100);
    assert!(run.stderr_tail.ends_with("aaaTHE END"), "{}", run.stderr_tail);

    cmd.stderr_tail = 0;
    assert_eq!(run_tool(&cmd, &mut |_| {}).stderr_tail, "");
}

#[test]
fn the_environment_is_scrubbed() {
    let dir = tempfile::tempdir().unwrap();
    let allow = vec!["ALLOWED_VAR".to_string(), "NOT_SET_ANYWHERE".to_string()];
    // Without it, python adds LC_CTYPE to its own environment under the C locale.
    let extra = vec![("PYTHONCOERCECLOCALE".to_string(), "0".to_string())];
    // The interpreter itself, not a wrapper on PATH (pyenv shims add variables of their own).
    let python =
        std::process::Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().unwrap();
    let python = String::from_utf8(python.stdout).unwrap();
    let dump = "import json, os; print(json.dumps(dict(os.environ)))";
    let mut cmd = command(dir.path(), &[python.trim(), "-c", dump]);
    cmd.env = sandbox_env(&allow, &extra);
    let run = run(&cmd);
    assert_eq!(run.outcome, Outcome::Completed, "{run:?}");
    let seen = run.result.unwrap();
    let seen = seen.as_object().unwrap();
    let names: Vec<&str> = seen.keys().map(String::as_str).collect();
    let expected: Vec<&str> = cmd.env.iter().map(|(k, _)| k.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted, expected);
    assert!(!seen.contains_key("FOO_SECRET"));
    assert_eq!(seen["ALLOWED_VAR"], "allowed");
    assert_eq!(seen["CAIRN_TEST_MARK"], "marked");
    assert_eq!(seen["PYTHONCOERCECLOCALE"], "0");
    for name in names {
        assert!(
            ["PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR", "ALLOWED_VAR", "PYTHONCOERCECLOCALE"]
                .contains(&name)
                || name.starts_with("CAIRN_"),
            "{name} leaked into the tool's environment"
        );
    }
}

#[test]
fn sandbox_env_is_sorted_unique_and_extra_wins() {
    init();
    let allow = vec!["ALLOWED_VAR".to_string(), "PATH".to_string()];
    let extra = vec![("CAIRN_TEST_MARK".to_string(), "overridden".to_string()), ("ZZ".to_string(), "z".to_string())];
    let env = sandbox_env(&allow, &extra);
    let names: Vec<&String> = env.iter().map(|(k, _)| k).collect();
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(names, sorted);
    let get = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    assert_eq!(get("CAIRN_TEST_MARK"), Some("overridden"));
    assert_eq!(get("ALLOWED_VAR"), Some("allowed"));
    assert_eq!(get("ZZ"), Some("z"));
    assert_eq!(get("FOO_SECRET"), None);
    assert_eq!(get("PATH").map(String::from), std::env::var("PATH").ok());
}

#[test]
fn on_start_reports_the_process_identity() {
    let dir = tempfile::tempdir().unwrap();
    let mut seen: Option<(ProcessIdentity, Option<u64>)> = None;
    let cmd = sh(dir.path(), "sleep 0.3; echo \"$$\"");
    let run = run_tool(&cmd, &mut |id| seen = Some((id.clone(), process_start_time(id.pid))));
    assert_eq!(run.outcome, Outcome::Completed, "{run:?}");
    let (id, start_time_then) = seen.expect("on_start was called");
    assert_eq!(id.pgid, id.pid);
    assert!(id.start_time.is_some());
    assert_eq!(id.start_time, start_time_then);
    assert_eq!(run.result, Some(json!(id.pid)));
    // The process is gone now.
    assert_eq!(process_start_time(id.pid), None);
    assert!(process_start_time(std::process::id()).is_some());
}

#[test]
fn a_tool_is_reported_once_it_has_run_its_report_delay_and_a_shorter_one_never() {
    let dir = tempfile::tempdir().unwrap();
    let mut quick = sh(dir.path(), "echo 1");
    quick.report_after = Duration::from_secs(2);
    let mut reported = 0;
    let run = run_tool(&quick, &mut |_| reported += 1);
    assert_eq!(run.outcome, Outcome::Completed, "{run:?}");
    assert_eq!(reported, 0, "a tool that ended before its report delay is never reported");
    assert!(run.duration < Duration::from_secs(2), "its end was not held back by the delay: {run:?}");

    let mut slow = sh(dir.path(), "sleep 0.5; echo \"$$\"");
    slow.report_after = Duration::from_millis(100);
    let t0 = Instant::now();
    let mut seen = Vec::new();
    let run = run_tool(&slow, &mut |id| seen.push((t0.elapsed(), id.clone(), process_start_time(id.pid))));
    assert_eq!(run.outcome, Outcome::Completed, "{run:?}");
    let [(at, id, alive_start)] = &seen[..] else { panic!("reported once: {seen:?}") };
    assert!(*at >= Duration::from_millis(100) && *at < Duration::from_millis(450), "reported at {at:?}");
    assert_eq!(run.result, Some(json!(id.pid)));
    assert!(id.start_time.is_some(), "its start time was read while it ran");
    assert_eq!(&id.start_time, alive_start);
}

#[test]
fn a_missing_program_fails_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let run = run(&command(dir.path(), &["nope"]));
    assert_failed(&run, "could not be started: `nope`: No such file or directory (os error 2)");
    assert_eq!(run.exit_code, None);

    let run = run_tool(&command(dir.path(), &["/nonexistent/tool"]), &mut |_| panic!("nothing started"));
    assert!(run.error.unwrap().starts_with("could not be started: `/nonexistent/tool`"));

    let run = run_tool(&command(dir.path(), &[]), &mut |_| panic!("nothing started"));
    assert_eq!(run.outcome, Outcome::Failed);
    assert!(run.error.unwrap().starts_with("could not be started"));
}

#[test]
fn the_tool_runs_in_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let run = run(&command(dir.path(), &["python3", "-c", "import json, os; print(json.dumps(os.getcwd()))"]));
    let cwd: PathBuf = dir.path().canonicalize().unwrap();
    assert_eq!(run.result, Some(json!(cwd.to_str().unwrap())));
}

#[test]
fn a_tool_that_ignores_a_large_stdin_still_completes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = sh(dir.path(), "echo '{\"ignored\": true}'");
    cmd.stdin = vec![b' '; 8 * 1024 * 1024];
    let run = run(&cmd);
    assert_eq!(run.outcome, Outcome::Completed, "{run:?}");
    assert_eq!(run.result, Some(json!({"ignored": true})));
}

#[test]
fn a_process_escaping_the_group_with_the_pipes_does_not_hang_the_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    // The pid file appears only once the process has left the group.
    let script = "setsid sh -c 'echo $$ > escaped.tmp; mv escaped.tmp escaped.pid; exec sleep 20' &
        while [ ! -s escaped.pid ]; do sleep 0.01; done; echo '{}'";
    let run = run(&sh(dir.path(), script));
    let pid: i32 = std::fs::read_to_string(dir.path().join("escaped.pid")).unwrap().trim().parse().unwrap();
    let _ = kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    assert_failed(&run, "exited but its stdout stayed open: a process that left its process group still holds it");
    assert!(started.elapsed() < Duration::from_secs(3), "{run:?}");
}
