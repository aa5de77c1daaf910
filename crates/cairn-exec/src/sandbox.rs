//! One tool attempt as a process: spawn, feed stdin, collect bounded output, enforce the timeout,
//! classify the exit and leave no process of the attempt's group behind.

use std::collections::{BTreeMap, VecDeque};
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use cairn_core::status::{Outcome, classify_exit};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Variables passed through from this process's environment when set. The one list: the step
/// agent receives it in each run request and builds a tool's environment there from it.
pub const BASE_ENV: [&str; 7] = ["PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR"];

/// Every variable whose name starts with this is passed through as well (here and by the agent).
pub const ENV_PREFIX: &str = "CAIRN_";

/// How long the output pipes may stay open after the whole group was killed. Only a process that
/// left the group (`setsid`) can hold them that long; we stop waiting for it rather than hang.
const PIPE_CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Writes up to this size to a pipe are atomic and, into an empty pipe, never block (POSIX
/// guarantees at least 512; Linux has 4096 and never shrinks a pipe below one page).
const PIPE_BUF: usize = 4096;

/// Read size for the output pipes (the default Linux pipe capacity).
const CHUNK: usize = 64 * 1024;

/// One attempt's complete process request. Nothing else is inherited from the caller.
#[derive(Debug, Clone)]
pub struct ToolCommand {
    /// `argv[0]` without '/' is looked up on the PATH found in `env`.
    pub argv: Vec<String>,
    /// The working directory; it exists (the caller creates it).
    pub cwd: PathBuf,
    /// The complete environment of the process.
    pub env: Vec<(String, String)>,
    /// Canonical JSON arguments, written to stdin, which is then closed.
    pub stdin: Vec<u8>,
    pub timeout: Duration,
    /// After the timeout, SIGTERM goes to the process group, then SIGKILL after this.
    pub grace: Duration,
    /// Bytes; beyond it the group is killed and the attempt is FAILED.
    pub max_stdout: usize,
    /// Keep only the last N bytes of stderr.
    pub stderr_tail: usize,
}

/// Who the attempt's process is, so a later process can tell whether it is still the same one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessIdentity {
    pub pid: u32,
    pub pgid: u32,
    /// Field 22 (starttime, clock ticks since boot) of /proc/<pid>/stat.
    pub start_time: Option<u64>,
}

/// What one attempt did.
#[derive(Debug, Clone)]
pub struct ToolRun {
    pub outcome: Outcome,
    /// Some only when `outcome == Completed`.
    pub result: Option<serde_json::Value>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// None when Completed; otherwise a lowercase sentence a user can act on.
    pub error: Option<String>,
    /// Lossy UTF-8 of the last `stderr_tail` bytes of stderr.
    pub stderr_tail: String,
    /// Time spent in `Command::spawn`.
    pub spawn: Duration,
    /// From spawn to the process having exited and its output collected.
    pub duration: Duration,
}

impl ToolRun {
    /// An attempt that failed for a reason outside the tool, in words.
    pub fn failed(error: String) -> ToolRun {
        ToolRun {
            outcome: Outcome::Failed,
            result: None,
            exit_code: None,
            signal: None,
            error: Some(error),
            stderr_tail: String::new(),
            spawn: Duration::ZERO,
            duration: Duration::ZERO,
        }
    }
}

/// Why an attempt did not complete; the text is what `ToolRun::error` carries.
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error("could not be started: no program given (argv is empty)")]
    NoProgram,
    #[error("could not be started: `{program}`: {source}")]
    Spawn { program: String, source: io::Error },
    #[error("could not be waited for: {0}")]
    Wait(io::Error),
    #[error("could not be waited for: the waiting thread stopped unexpectedly")]
    WaiterLost,
    #[error("exceeded its timeout of {} and was terminated", human(*.timeout))]
    TimedOut { timeout: Duration },
    #[error("exceeded its timeout of {} and was killed after ignoring SIGTERM for {}", human(*.timeout), human(*.grace))]
    TimedOutKilled { timeout: Duration, grace: Duration },
    #[error("wrote more than {0} bytes to stdout")]
    StdoutTooLarge(usize),
    #[error("exited but its {0} stayed open: a process that left its process group still holds it")]
    PipeHeld(&'static str),
    #[error("could not be supervised: the thread reading its {0} stopped unexpectedly")]
    ReaderPanicked(&'static str),
    #[error("could not be supervised: failed to start a thread: {0}")]
    Thread(io::Error),
    #[error("could not be supervised: its {0} was not captured")]
    NotCaptured(&'static str),
    #[error("could not read its stdout: {0}")]
    ReadStdout(io::Error),
    #[error("exited with code {0}")]
    Exit(i32),
    #[error("exited with code {0} (invalid input)")]
    InvalidInput(i32),
    #[error("exited with code {0} (denied)")]
    Denied(i32),
    #[error("was killed by signal {signal} ({})", signal_name(*.signal))]
    Signal { signal: i32 },
    #[error("ended without an exit code or a signal")]
    NoStatus,
    #[error("exited 0 but printed nothing on stdout")]
    EmptyStdout,
    #[error("printed invalid JSON on stdout: {0}")]
    InvalidJson(serde_json::Error),
    #[error("{0}")]
    Agent(String),
}

/// What the helper threads tell the main thread. One channel carries them all.
enum Event {
    /// The direct child has exited (or `wait` failed).
    Exited(io::Result<ExitStatus>),
    /// The waiter thread ended without reporting a status.
    WaiterGone,
    /// Stdout went over `max_stdout`; the group must be killed now.
    StdoutOverflow,
    /// A reader thread is done (EOF, error, overflow or a panic).
    ReaderDone,
}

/// Sends its event when dropped, so a thread reports its end even if it unwinds.
struct Notify {
    tx: Sender<Event>,
    event: Option<Event>,
}

impl Drop for Notify {
    fn drop(&mut self) {
        if let Some(event) = self.event.take() {
            let _ = self.tx.send(event);
        }
    }
}

/// Runs one attempt. Never panics on any process behaviour; a spawn failure is a FAILED ToolRun.
/// `on_start` is called right after spawn, before waiting, so the caller can record the identity durably.
pub fn run_tool(cmd: &ToolCommand, on_start: &mut dyn FnMut(&ProcessIdentity)) -> ToolRun {
    let started = Instant::now();
    let Some(program) = cmd.argv.first() else {
        return not_started(AttemptError::NoProgram, Duration::ZERO, started);
    };

    let mut command = Command::new(resolve_program(program, &cmd.env, &cmd.cwd));
    command
        .arg0(program)
        .args(&cmd.argv[1..])
        .env_clear()
        .envs(cmd.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&cmd.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // The child leads its own group so the whole tree can be signalled at once. No pre_exec:
        // it would force fork+exec instead of posix_spawn.
        .process_group(0);

    let spawned = command.spawn();
    let spawn = started.elapsed();
    let mut child = match spawned {
        Ok(child) => child,
        Err(source) => {
            let err = AttemptError::Spawn { program: program.clone(), source };
            return not_started(err, spawn, started);
        }
    };

    let pid = child.id();
    // Read the start time before the waiter can reap the child and free its /proc entry.
    let identity = ProcessIdentity { pid, pgid: pid, start_time: process_start_time(pid) };
    let pgid = Pid::from_raw(pid as i32);

    let (tx, rx) = mpsc::channel();
    // A helper thread that cannot be created fails the attempt (the process still runs to its end
    // or its timeout and is cleaned up like any other).
    let mut thread_error = None;
    // A tool may exit without reading its input: EPIPE (and any other write error) is ignored.
    // Input that fits in PIPE_BUF goes into the fresh, empty pipe at once (such a write never
    // blocks) and saves a thread; larger input is written by a thread that is not joined: its
    // write ends at the latest when the group is gone. Either way stdin is then closed.
    if let Some(mut stdin) = child.stdin.take() {
        if cmd.stdin.len() <= PIPE_BUF {
            let _ = stdin.write_all(&cmd.stdin);
        } else {
            let input = cmd.stdin.clone();
            let spawned = thread::Builder::new().name("cairn-stdin".into()).spawn(move || {
                let _ = stdin.write_all(&input);
            });
            if let Err(e) = spawned {
                thread_error = Some(e);
            }
        }
    }
    let max_stdout = cmd.max_stdout;
    let stdout_reader =
        child.stdout.take().map(|out| spawn_reader("cairn-stdout", &tx, move |tx| read_stdout(out, max_stdout, tx)));
    let tail = cmd.stderr_tail;
    let stderr_reader =
        child.stderr.take().map(|err| spawn_reader("cairn-stderr", &tx, move |_| read_stderr_tail(err, tail)));
    let waiter = spawn_waiter(child, &tx);
    drop(tx);

    on_start(&identity);

    let mut wait = Wait { rx, pgid, readers_done: 0 };
    let ended = wait.for_exit(cmd.timeout, cmd.grace, waiter.is_ok());

    // The direct child is gone: kill whatever else is left of its group, so no grandchild survives
    // holding the pipes.
    kill_group(pgid, Signal::SIGKILL);

    let readers =
        [stdout_reader.as_ref().is_some_and(Result::is_ok), stderr_reader.as_ref().is_some_and(Result::is_ok)];
    let all_closed = wait.for_readers(readers.iter().filter(|r| **r).count(), PIPE_CLOSE_WAIT);
    match waiter {
        // Its event has been received, so joining does not block for long.
        Ok(waiter) => {
            let _ = waiter.join();
        }
        Err(e) => thread_error = Some(e),
    }

    let stdout = collect(stdout_reader, all_closed, "stdout").and_then(|out| out);
    let (stdout, mut problem) = match stdout {
        Ok(out) => (out, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let stderr = collect(stderr_reader, all_closed, "stderr").unwrap_or_else(|e| {
        problem.get_or_insert(e);
        Vec::new()
    });
    if let Some(e) = thread_error {
        problem.get_or_insert(AttemptError::Thread(e));
    }

    let mut run = classify(cmd, ended, stdout, problem);
    run.stderr_tail = String::from_utf8_lossy(&stderr).into_owned();
    run.spawn = spawn;
    run.duration = started.elapsed();
    run
}

/// The scrubbed environment: the `BASE_ENV` variables taken from this process's environment when
/// set, then every variable named in `allow` when set, then every `ENV_PREFIX` variable of this
/// process, then `extra` (which wins). Sorted by name, no duplicates.
pub fn sandbox_env(allow: &[String], extra: &[(String, String)]) -> Vec<(String, String)> {
    // Variables that are not valid UTF-8 cannot be represented here and are left out.
    let here: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .collect();
    env_by_rule(&here, allow, extra)
}

/// `sandbox_env`'s rule over the environment `from`. The step agent's `step_env` applies it to its
/// own environment, with the names a run request carries.
pub fn env_by_rule(
    from: &BTreeMap<String, String>,
    allow: &[String],
    extra: &[(String, String)],
) -> Vec<(String, String)> {
    let mut env = BTreeMap::new();
    for name in BASE_ENV.iter().copied().chain(allow.iter().map(String::as_str)) {
        if let Some(value) = from.get(name) {
            env.insert(name.to_string(), value.clone());
        }
    }
    for (name, value) in from {
        if name.starts_with(ENV_PREFIX) {
            env.insert(name.clone(), value.clone());
        }
    }
    for (name, value) in extra {
        env.insert(name.clone(), value.clone());
    }
    env.into_iter().collect()
}

/// Reads /proc/<pid>/stat start time (field 22); None if the process is gone.
pub fn process_start_time(pid: u32) -> Option<u64> {
    crate::procfs::stat(pid).map(|s| s.start_time)
}

/// How the direct child ended, as far as the main thread saw it.
struct Ended {
    status: Result<ExitStatus, AttemptError>,
    timed_out: bool,
    /// SIGKILL was needed after the grace period.
    killed_after_grace: bool,
    overflow: bool,
}

struct Wait {
    rx: Receiver<Event>,
    pgid: Pid,
    readers_done: usize,
}

impl Wait {
    /// Waits for the direct child to exit, enforcing the timeout and the stdout bound.
    fn for_exit(&mut self, timeout: Duration, grace: Duration, have_waiter: bool) -> Ended {
        let mut ended = Ended {
            status: Err(AttemptError::WaiterLost),
            timed_out: false,
            killed_after_grace: false,
            overflow: false,
        };
        if !have_waiter {
            return ended;
        }
        // None: no limit (after SIGKILL, or a timeout too large to represent).
        let mut deadline = Instant::now().checked_add(timeout);
        loop {
            let event = match deadline {
                Some(at) => self.rx.recv_timeout(at.saturating_duration_since(Instant::now())),
                None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match event {
                Ok(Event::Exited(status)) => {
                    ended.status = status.map_err(AttemptError::Wait);
                    return ended;
                }
                Ok(Event::WaiterGone) | Err(RecvTimeoutError::Disconnected) => return ended,
                Ok(Event::StdoutOverflow) => {
                    ended.overflow = true;
                    kill_group(self.pgid, Signal::SIGKILL);
                    deadline = None;
                }
                Ok(Event::ReaderDone) => self.readers_done += 1,
                Err(RecvTimeoutError::Timeout) => {
                    if ended.timed_out {
                        ended.killed_after_grace = true;
                        kill_group(self.pgid, Signal::SIGKILL);
                        deadline = None;
                    } else {
                        ended.timed_out = true;
                        kill_group(self.pgid, Signal::SIGTERM);
                        deadline = Instant::now().checked_add(grace);
                    }
                }
            }
        }
    }

    /// Waits until `readers` reader threads are done, for at most `limit`. True when all are.
    fn for_readers(&mut self, readers: usize, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.readers_done < readers {
            match self.rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Event::ReaderDone) => self.readers_done += 1,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
        true
    }
}

fn spawn_reader<T: Send + 'static>(
    name: &str,
    tx: &Sender<Event>,
    read: impl FnOnce(&Sender<Event>) -> T + Send + 'static,
) -> io::Result<JoinHandle<T>> {
    let tx = tx.clone();
    thread::Builder::new().name(name.into()).spawn(move || {
        // Reports the end even if `read` unwinds.
        let done = Notify { tx, event: Some(Event::ReaderDone) };
        read(&done.tx)
    })
}

fn spawn_waiter(mut child: Child, tx: &Sender<Event>) -> io::Result<JoinHandle<()>> {
    let tx = tx.clone();
    thread::Builder::new().name("cairn-wait".into()).spawn(move || {
        let mut notify = Notify { tx, event: Some(Event::WaiterGone) };
        notify.event = Some(Event::Exited(child.wait()));
    })
}

/// The reader's result, or why there is none.
fn collect<T>(
    reader: Option<io::Result<JoinHandle<T>>>,
    all_closed: bool,
    pipe: &'static str,
) -> Result<T, AttemptError> {
    match reader {
        Some(Ok(handle)) => join_reader(handle, all_closed, pipe),
        Some(Err(e)) => Err(AttemptError::Thread(e)),
        // Unreachable with piped stdio, but not worth a panic.
        None => Err(AttemptError::NotCaptured(pipe)),
    }
}

/// Joins a reader that reported done; one still blocked on a pipe held by an escaped process is
/// left to finish on its own.
fn join_reader<T>(handle: JoinHandle<T>, all_closed: bool, pipe: &'static str) -> Result<T, AttemptError> {
    if !all_closed && !handle.is_finished() {
        return Err(AttemptError::PipeHeld(pipe));
    }
    handle.join().map_err(|_| AttemptError::ReaderPanicked(pipe))
}

/// Reads stdout up to `max` bytes. Past that it reports the overflow, so the group is killed at
/// once, and stops reading.
fn read_stdout(mut out: ChildStdout, max: usize, tx: &Sender<Event>) -> Result<Vec<u8>, AttemptError> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let n = match out.read(&mut chunk) {
            Ok(0) => return Ok(buf),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(AttemptError::ReadStdout(e)),
        };
        if buf.len() + n > max {
            let _ = tx.send(Event::StdoutOverflow);
            return Err(AttemptError::StdoutTooLarge(max));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Reads stderr to its end, keeping only the last `tail` bytes.
fn read_stderr_tail(mut err: ChildStderr, tail: usize) -> Vec<u8> {
    let mut kept = VecDeque::with_capacity(tail.min(CHUNK));
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let n = match err.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let fresh = &chunk[n.saturating_sub(tail)..n];
        kept.extend(fresh);
        let excess = kept.len().saturating_sub(tail);
        kept.drain(..excess);
    }
    kept.into()
}

/// Signals the whole group; a group that is already gone is fine.
fn kill_group(pgid: Pid, signal: Signal) {
    // ESRCH: nothing is left. EPERM: the group id now belongs to someone else's processes. Both
    // mean there is nothing of ours to signal.
    let _ = killpg(pgid, signal);
}

/// argv[0] without '/' is looked up on the PATH of the tool's own environment, not ours. Falls back
/// to the bare name, which makes the spawn fail with a clear "No such file or directory".
fn resolve_program(program: &str, env: &[(String, String)], cwd: &Path) -> PathBuf {
    if program.contains('/') || program.is_empty() {
        return PathBuf::from(program);
    }
    let path = env.iter().rev().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str()).unwrap_or("");
    for dir in path.split(':') {
        let dir = if dir.is_empty() { Path::new(".") } else { Path::new(dir) };
        let candidate = cwd.join(dir).join(program);
        if let Ok(meta) = std::fs::metadata(&candidate)
            && meta.is_file()
            && meta.permissions().mode() & 0o111 != 0
        {
            return candidate;
        }
    }
    PathBuf::from(program)
}

fn not_started(err: AttemptError, spawn: Duration, started: Instant) -> ToolRun {
    ToolRun {
        outcome: Outcome::Failed,
        result: None,
        exit_code: None,
        signal: None,
        error: Some(err.to_string()),
        stderr_tail: String::new(),
        spawn,
        duration: started.elapsed(),
    }
}

/// How an attempt supervised elsewhere (by the step agent, on a target) ended, as it recorded it.
#[derive(Debug, Clone, Default)]
pub struct RecordedEnd {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub killed_after_grace: bool,
    /// Why the tool could not be started or supervised, in words.
    pub error: Option<String>,
    pub stdout: Vec<u8>,
    /// The full size of stdout; only up to `max_stdout` bytes are ever transferred.
    pub stdout_bytes: u64,
    pub stderr_tail: String,
}

/// Classifies an attempt that ran elsewhere exactly as `run_tool` classifies a local one.
pub fn classify_recorded(cmd: &ToolCommand, end: RecordedEnd, duration: Duration) -> ToolRun {
    let status = match (end.exit_code, end.signal) {
        (Some(code), _) => Ok(ExitStatus::from_raw((code & 0xff) << 8)),
        (None, Some(sig)) => Ok(ExitStatus::from_raw(sig & 0x7f)),
        // Stopped for its time (a Slurm job cancelled at the deadline) before it recorded an end.
        (None, None) if end.timed_out => Ok(ExitStatus::from_raw(Signal::SIGTERM as i32)),
        (None, None) => Err(AttemptError::Agent(end.error.clone().unwrap_or_else(|| "ended without a status".into()))),
    };
    let overflow = end.stdout_bytes > cmd.max_stdout as u64;
    let ended = Ended { status, timed_out: end.timed_out, killed_after_grace: end.killed_after_grace, overflow };
    let problem = end.error.filter(|_| end.exit_code.is_some() || end.signal.is_some()).map(AttemptError::Agent);
    let mut run = classify(cmd, ended, end.stdout, problem);
    run.stderr_tail = end.stderr_tail;
    run.duration = duration;
    run
}

/// Turns how the process ended and what it printed into the attempt's outcome.
fn classify(cmd: &ToolCommand, ended: Ended, stdout: Vec<u8>, problem: Option<AttemptError>) -> ToolRun {
    let mut run = ToolRun {
        outcome: Outcome::Failed,
        result: None,
        exit_code: None,
        signal: None,
        error: None,
        stderr_tail: String::new(),
        spawn: Duration::ZERO,
        duration: Duration::ZERO,
    };
    let status = match ended.status {
        Ok(status) => status,
        Err(err) => {
            run.error = Some(err.to_string());
            return run;
        }
    };
    run.exit_code = status.code();
    run.signal = status.signal();

    // Too much output fails the attempt whatever the exit: the overflow may have been noticed only
    // after the process had exited.
    let overflow = ended.overflow || matches!(problem, Some(AttemptError::StdoutTooLarge(_)));
    let error = if overflow {
        Some(AttemptError::StdoutTooLarge(cmd.max_stdout))
    } else if ended.timed_out {
        run.outcome = classify_exit(run.exit_code, true, false);
        Some(if ended.killed_after_grace {
            AttemptError::TimedOutKilled { timeout: cmd.timeout, grace: cmd.grace }
        } else {
            AttemptError::TimedOut { timeout: cmd.timeout }
        })
    } else if let Some(err) = problem {
        Some(err)
    } else {
        match (run.exit_code, run.signal) {
            (Some(0), _) => match parse_stdout(&stdout) {
                Ok(value) => {
                    run.outcome = classify_exit(Some(0), false, true);
                    run.result = Some(value);
                    None
                }
                Err(err) => Some(err),
            },
            (Some(code), _) => {
                run.outcome = classify_exit(Some(code), false, false);
                Some(match run.outcome {
                    Outcome::InvalidInput => AttemptError::InvalidInput(code),
                    Outcome::Denied => AttemptError::Denied(code),
                    _ => AttemptError::Exit(code),
                })
            }
            (None, Some(signal)) => Some(AttemptError::Signal { signal }),
            (None, None) => Some(AttemptError::NoStatus),
        }
    };
    run.error = error.map(|e| e.to_string());
    run
}

fn parse_stdout(stdout: &[u8]) -> Result<serde_json::Value, AttemptError> {
    if stdout.iter().all(u8::is_ascii_whitespace) {
        return Err(AttemptError::EmptyStdout);
    }
    serde_json::from_slice(stdout).map_err(AttemptError::InvalidJson)
}

fn signal_name(signal: i32) -> &'static str {
    Signal::try_from(signal).map(Signal::as_str).unwrap_or("an unknown signal")
}

/// "2 s", "1.5 s", "300 ms".
fn human(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} s", d.as_secs_f64())
    }
}
