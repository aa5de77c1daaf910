//! The scratch kernel against a real ipykernel from the test venv (`CAIRN_TEST_VENV`, default
//! `<workspace>/.venv`; scripts/test.sh installs scripts/requirements-test.txt into it).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cairn_exec::kernel::{
    CellRun, CellStatus, KernelConfig, KernelError, KernelTransport, ScratchKernel, python_has_ipykernel,
    truncation_marker,
};
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tempfile::TempDir;

const CELL: Duration = Duration::from_secs(30);

fn venv() -> PathBuf {
    match std::env::var_os("CAIRN_TEST_VENV") {
        Some(v) => PathBuf::from(v),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv"),
    }
}

/// The test venv's interpreter. A missing venv is a failure, not a skip: run scripts/test.sh.
fn python() -> PathBuf {
    let p = venv().join("bin/python");
    assert!(
        python_has_ipykernel(&p),
        "{} has no ipykernel: create the test venv (python3 -m venv .venv && .venv/bin/pip install -r \
         scripts/requirements-test.txt) or set CAIRN_TEST_VENV",
        p.display()
    );
    p
}

struct Fixture {
    dir: TempDir,
    cfg: KernelConfig,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let mut cfg = KernelConfig::new(python(), work, dir.path().join("rt"));
    cfg.env = vec![
        ("PATH".into(), std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())),
        ("HOME".into(), dir.path().to_string_lossy().into_owned()),
        ("LANG".into(), "C.UTF-8".into()),
    ];
    cfg.startup_timeout = Duration::from_secs(60);
    Fixture { dir, cfg }
}

fn start(f: &Fixture) -> ScratchKernel {
    match ScratchKernel::start(&f.cfg) {
        Ok(k) => k,
        Err(e) => panic!("failed to start the kernel: {e}"),
    }
}

fn run(k: &mut ScratchKernel, code: &str) -> CellRun {
    k.execute(code, CELL, &mut |_| {})
}

fn stream_text(run: &CellRun, name: &str) -> String {
    run.outputs
        .iter()
        .filter(|o| o["output_type"] == "stream" && o["name"] == name)
        .filter_map(|o| o["text"].as_str())
        .collect()
}

fn assert_ok(run: &CellRun) {
    assert_eq!(run.status, CellStatus::Ok, "outputs: {:#?}", run.outputs);
}

/// Whether a process still exists and is not a zombie.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit_once(')').map(|(_, r)| r.trim_start().chars().next()).unwrap_or(None);
            state != Some('Z') && state != Some('X')
        }
        Err(_) => false,
    }
}

fn group_gone(pgid: u32) -> bool {
    // ESRCH: no process has this group id (zombies of other parents still count; allow them).
    match killpg(Pid::from_raw(pgid as i32), None) {
        Err(Errno::ESRCH) => true,
        _ => {
            // Every remaining member must be a zombie.
            std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()).all(
                |pid| {
                    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return true };
                    let Some((_, rest)) = stat.rsplit_once(')') else { return true };
                    let fields: Vec<&str> = rest.split_whitespace().collect();
                    // fields[0] = state, fields[2] = pgrp
                    fields.get(2) != Some(&pgid.to_string().as_str()) || fields[0] == "Z"
                },
            )
        }
    }
}

#[test]
fn kernel_is_send() {
    fn is_send<T: Send>() {}
    is_send::<ScratchKernel>();
    is_send::<cairn_exec::kernel::KernelHandle>();
}

#[test]
fn expression_result_and_execution_count() {
    let f = fixture();
    let mut k = start(&f);
    let r = run(&mut k, "1+1");
    assert_ok(&r);
    assert_eq!(r.execution_count, Some(1));
    assert_eq!(
        r.outputs,
        vec![
            json!({"output_type": "execute_result", "execution_count": 1, "data": {"text/plain": "2"}, "metadata": {}})
        ]
    );
}

#[test]
fn print_is_a_stream_and_state_persists() {
    let f = fixture();
    let mut k = start(&f);
    let r = run(&mut k, "x = 41\nprint('hello')\nprint('world')");
    assert_ok(&r);
    assert_eq!(r.outputs, vec![json!({"output_type": "stream", "name": "stdout", "text": "hello\nworld\n"})]);
    let r = run(&mut k, "import sys; print('oops', file=sys.stderr); x + 1");
    assert_ok(&r);
    assert_eq!(stream_text(&r, "stderr"), "oops\n");
    assert_eq!(r.outputs.last().unwrap()["data"]["text/plain"], "42");
    assert_eq!(r.execution_count, Some(2));
}

#[test]
fn the_users_ipython_profile_does_not_run() {
    let f = fixture();
    let startup = f.dir.path().join(".ipython/profile_default/startup");
    std::fs::create_dir_all(&startup).unwrap();
    std::fs::write(startup.join("00-leak.py"), "leaked = 1\n").unwrap();
    let mut k = start(&f);
    let r = run(&mut k, "leaked");
    assert!(matches!(&r.status, CellStatus::Error { ename, .. } if ename == "NameError"), "{:?}", r.status);
}

#[test]
fn live_outputs_reach_the_callback() {
    let f = fixture();
    let mut k = start(&f);
    let mut seen: Vec<Value> = Vec::new();
    let r =
        k.execute("print('a'); from IPython.display import display; display(3)", CELL, &mut |o| seen.push(o.clone()));
    assert_ok(&r);
    assert!(seen.iter().any(|o| o["output_type"] == "stream"), "{seen:?}");
    assert!(seen.iter().any(|o| o["output_type"] == "display_data" && o.get("transient").is_none()), "{seen:?}");
}

#[test]
fn exception_is_an_error_with_ename() {
    let f = fixture();
    let mut k = start(&f);
    let r = run(&mut k, "def f():\n    return 1/0\nf()");
    match &r.status {
        CellStatus::Error { ename, evalue, traceback } => {
            assert_eq!(ename, "ZeroDivisionError");
            assert!(evalue.contains("division"), "{evalue}");
            assert!(!traceback.is_empty());
        }
        other => panic!("expected an error, got {other:?}"),
    }
    let err = r.outputs.iter().find(|o| o["output_type"] == "error").expect("an error output");
    assert_eq!(err["ename"], "ZeroDivisionError");
    // The kernel survives an error.
    assert_ok(&run(&mut k, "pass"));
}

#[test]
fn input_fails_fast() {
    let f = fixture();
    let mut k = start(&f);
    let t = Instant::now();
    let r = run(&mut k, "input('name? ')");
    match &r.status {
        CellStatus::Error { ename, .. } => assert_eq!(ename, "StdinNotImplementedError"),
        other => panic!("expected StdinNotImplementedError, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(5), "input() took {:?}", t.elapsed());
}

#[test]
fn self_sigkill_is_died_with_signal_9_fast() {
    let f = fixture();
    let mut k = start(&f);
    let pid = k.pid();
    let r = run(&mut k, "import os; os.kill(os.getpid(), 9)");
    assert_eq!(r.status, CellStatus::Died { exit_code: None, signal: Some(9) });
    eprintln!("self-SIGKILL cell returned after {:?}", r.duration);
    assert!(r.duration < Duration::from_secs(1), "{:?}", r.duration);
    assert!(group_gone(pid));
    // A dead kernel answers every later cell with the same death, at once.
    let again = run(&mut k, "1");
    assert_eq!(again.status, CellStatus::Died { exit_code: None, signal: Some(9) });
}

#[test]
fn external_sigkill_is_detected_within_100ms() {
    let f = fixture();
    let mut k = start(&f);
    let pid = k.pid() as i32;
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        let at = Instant::now();
        kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
        at
    });
    let r = run(&mut k, "import time; time.sleep(30)");
    let returned = Instant::now();
    let killed_at = killer.join().unwrap();
    let latency = returned - killed_at;
    eprintln!("SIGKILL -> Died verdict: {latency:?}");
    assert_eq!(r.status, CellStatus::Died { exit_code: None, signal: Some(9) });
    assert!(latency < Duration::from_secs(1), "{latency:?}");
}

#[test]
fn exit_is_died_with_exit_code() {
    let f = fixture();
    let mut k = start(&f);
    let r = run(&mut k, "import os; os._exit(3)");
    assert_eq!(r.status, CellStatus::Died { exit_code: Some(3), signal: None });
}

#[test]
fn timeout_of_a_cell_ignoring_sigint_kills_the_group() {
    let f = fixture();
    let mut k = start(&f);
    let pgid = k.pid();
    let r = run(&mut k, "import subprocess; p = subprocess.Popen(['sleep', '1000']); print(p.pid)");
    assert_ok(&r);
    let child: i32 = stream_text(&r, "stdout").trim().parse().unwrap();
    assert!(alive(child));
    let t = Instant::now();
    let r = k.execute(
        "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)",
        Duration::from_secs(1),
        &mut |_| {},
    );
    let took = t.elapsed();
    eprintln!("timeout 1 s + grace 1 s -> TimedOut after {took:?}");
    assert_eq!(r.status, CellStatus::TimedOut);
    assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(5), "{took:?}");
    assert!(group_gone(pgid), "a process of the kernel's group survived");
    assert!(!alive(child), "the kernel's subprocess survived");
    assert!(matches!(run(&mut k, "1").status, CellStatus::Died { .. }));
}

#[test]
fn timeout_of_an_interruptible_cell_is_timed_out_with_its_output() {
    let f = fixture();
    let mut k = start(&f);
    let t = Instant::now();
    let r = k.execute("import time\nprint('before', flush=True)\ntime.sleep(60)", Duration::from_secs(1), &mut |_| {});
    assert_eq!(r.status, CellStatus::TimedOut);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(stream_text(&r, "stdout"), "before\n");
    assert!(r.outputs.iter().any(|o| o["ename"] == "KeyboardInterrupt"), "{:#?}", r.outputs);
}

#[test]
fn kill_leaves_no_process_of_the_group() {
    let f = fixture();
    let mut k = start(&f);
    let pgid = k.pid();
    let r = run(&mut k, "import subprocess; p = subprocess.Popen(['sleep', '1000']); print(p.pid)");
    assert_ok(&r);
    let child: i32 = stream_text(&r, "stdout").trim().parse().unwrap();
    assert!(alive(child));
    k.kill();
    k.kill(); // idempotent
    assert!(!alive(child), "sleep {child} survived kill()");
    assert!(!alive(pgid as i32));
    assert!(group_gone(pgid));
    // The connection file and sockets are removed; the log (and the private IPYTHONDIR) stay.
    let mut left: Vec<_> =
        std::fs::read_dir(f.dir.path().join("rt")).unwrap().map(|e| e.unwrap().file_name()).collect();
    left.sort();
    assert_eq!(left, ["ipython", "kernel.log"]);
}

#[test]
fn drop_kills_the_group() {
    let f = fixture();
    let mut k = start(&f);
    let pgid = k.pid();
    let r = run(&mut k, "import subprocess; p = subprocess.Popen(['sleep', '1000']); print(p.pid)");
    let child: i32 = stream_text(&r, "stdout").trim().parse().unwrap();
    drop(k);
    assert!(!alive(child));
    assert!(group_gone(pgid));
}

#[test]
fn handle_interrupts_and_kills_from_another_thread() {
    let f = fixture();
    let mut k = start(&f);
    let h = k.handle();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        h.interrupt();
    });
    let r = run(&mut k, "import time; time.sleep(30)");
    t.join().unwrap();
    match &r.status {
        CellStatus::Error { ename, .. } => assert_eq!(ename, "KeyboardInterrupt"),
        other => panic!("expected KeyboardInterrupt, got {other:?}"),
    }
    assert_ok(&run(&mut k, "pass"));

    let h = k.handle();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        h.kill();
        h
    });
    let r = run(&mut k, "import time; time.sleep(30)");
    let h = t.join().unwrap();
    assert_eq!(r.status, CellStatus::Cancelled);
    assert!(group_gone(k.pid()));
    h.kill(); // after reaping: does nothing
}

#[test]
fn memory_limit_makes_a_big_allocation_fail() {
    let mut f = fixture();
    f.cfg.memory_limit = Some(300 * 1024 * 1024);
    let mut k = start(&f);
    let r = run(&mut k, "b = bytearray(2*10**9)");
    eprintln!("bytearray(2e9) under RLIMIT_AS=300MiB -> {:?}", r.status);
    match &r.status {
        CellStatus::Error { ename, .. } => assert_eq!(ename, "MemoryError"),
        CellStatus::Died { .. } => {}
        other => panic!("expected MemoryError or death, got {other:?}"),
    }
}

#[test]
fn fifty_megabytes_of_output_are_capped() {
    let f = fixture();
    let mut k = start(&f);
    let t = Instant::now();
    let r = run(&mut k, "print('x' * 50_000_000)");
    eprintln!("one 50 MB print: {:?}", t.elapsed());
    assert_ok(&r);
    let text = stream_text(&r, "stdout");
    assert!(text.len() <= 1024 * 1024 + 100, "{}", text.len());
    assert!(text.ends_with(&truncation_marker(50_000_001 - 1024 * 1024)), "{}", &text[text.len() - 80..]);

    let t = Instant::now();
    let r = run(&mut k, "import sys\nfor i in range(500):\n    print('y' * 99_999)\nsys.stderr.write('e' * 9_000_000)");
    eprintln!("500 prints of 100 kB (50 MB) + 9 MB stderr: {:?}", t.elapsed());
    assert_ok(&r);
    let total: usize = r.outputs.iter().map(|o| o.to_string().len()).sum();
    assert!(total < 9 * 1024 * 1024, "{total}");
    let all: String = r.outputs.iter().filter_map(|o| o["text"].as_str()).collect();
    assert!(all.contains("[... output truncated by cairn: "), "no marker");
    assert!(t.elapsed() < Duration::from_secs(60));
    // The kernel is still fine afterwards.
    assert_ok(&run(&mut k, "pass"));
}

#[test]
fn bash_magic_streams() {
    let f = fixture();
    let mut k = start(&f);
    let r = run(&mut k, "%%bash\necho hi");
    assert_ok(&r);
    assert_eq!(stream_text(&r, "stdout"), "hi\n");
}

#[test]
fn tcp_transport_works() {
    let mut f = fixture();
    f.cfg.transport = KernelTransport::Tcp;
    let mut k = start(&f);
    assert_eq!(k.transport(), KernelTransport::Tcp);
    let r = run(&mut k, "print(6*7)");
    assert_ok(&r);
    assert_eq!(stream_text(&r, "stdout"), "42\n");
}

#[test]
fn long_runtime_dir_falls_back_to_tcp() {
    let mut f = fixture();
    f.cfg.runtime_dir = f.dir.path().join("r".repeat(100));
    let mut k = start(&f);
    assert_eq!(k.transport(), KernelTransport::Tcp);
    assert_ok(&run(&mut k, "1"));
}

#[test]
fn runtime_dir_is_private_and_ipc_by_default() {
    use std::os::unix::fs::PermissionsExt;
    let f = fixture();
    let k = start(&f);
    assert_eq!(k.transport(), KernelTransport::Ipc);
    let mode = std::fs::metadata(f.dir.path().join("rt")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    assert_eq!(k.kernel_info()["language_info"]["name"], "python");
}

#[test]
fn python_without_ipykernel_fails_with_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty-venv");
    let ok = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&empty)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let py = empty.join("bin/python");
    assert!(!python_has_ipykernel(&py));
    let mut f = fixture();
    f.cfg.python = py;
    let t = Instant::now();
    let err = ScratchKernel::start(&f.cfg).unwrap_err();
    let msg = err.to_string();
    eprintln!("{msg}");
    assert!(t.elapsed() < Duration::from_secs(10));
    assert!(matches!(err, KernelError::ExitedDuringStartup { exit_code: Some(1), .. }), "{err:?}");
    assert!(msg.contains("No module named ipykernel_launcher"), "{msg}");
    assert!(err.stderr_tail().unwrap().contains("ipykernel_launcher"));
}

#[test]
fn missing_interpreter_is_a_spawn_error() {
    let mut f = fixture();
    f.cfg.python = f.dir.path().join("no-such-python");
    let err = ScratchKernel::start(&f.cfg).unwrap_err();
    assert!(matches!(err, KernelError::Spawn { .. }), "{err:?}");
    assert!(!python_has_ipykernel(&f.cfg.python));
}

#[test]
fn startup_timeout_is_reported_and_cleaned_up() {
    let mut f = fixture();
    // An "interpreter" that never binds anything.
    let fake = f.dir.path().join("fake-python");
    std::fs::write(&fake, "#!/bin/sh\necho starting >&2\nexec sleep 1000\n").unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    f.cfg.python = fake;
    f.cfg.startup_timeout = Duration::from_millis(500);
    let err = ScratchKernel::start(&f.cfg).unwrap_err();
    assert!(matches!(err, KernelError::StartupTimeout { .. }), "{err:?}");
    assert!(err.to_string().contains("starting"), "{err}");
}

/// Start-up and trivial-execute timings (medians of 5), printed for the report.
#[test]
fn timings() {
    let f = fixture();
    let mut starts = Vec::new();
    let mut execs = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let mut k = start(&f);
        starts.push(t.elapsed());
        assert_ok(&run(&mut k, "pass"));
        let r = run(&mut k, "1+1");
        assert_ok(&r);
        execs.push(r.duration);
    }
    starts.sort();
    execs.sort();
    eprintln!("kernel start (spawn -> kernel_info_reply), median of 5: {:?} (all {starts:?})", starts[2]);
    eprintln!("trivial execute `1+1`, median of 5: {:?} (all {execs:?})", execs[2]);
}

#[test]
fn memory_limit_too_small_to_start_says_so() {
    let mut f = fixture();
    f.cfg.memory_limit = Some(40 * 1024 * 1024);
    let err = ScratchKernel::start(&f.cfg).unwrap_err();
    let msg = err.to_string();
    eprintln!("{msg}");
    assert!(matches!(err, KernelError::ExitedDuringStartup { .. }), "{err:?}");
    assert!(msg.contains("memory limit (RLIMIT_AS) of 40 MiB"), "{msg}");
}

#[test]
fn huge_timeouts_do_not_panic() {
    let mut f = fixture();
    f.cfg.startup_timeout = Duration::MAX;
    f.cfg.interrupt_grace = Duration::MAX;
    let mut k = start(&f);
    let r = k.execute("print('ok')", Duration::MAX, &mut |_| {});
    assert_ok(&r);
}
