//! One tool attempt as a process: spawn, feed stdin, collect bounded output, enforce the timeout,
//! classify the exit and leave no process of the attempt's group behind.

use std::collections::{BTreeMap, VecDeque};
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use cairn_core::cause::DiskSpace;
use cairn_core::status::{Outcome, classify_exit};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{PidfdFlags, pidfd_open};

use crate::spawn::{Prepared, Process};

/// Variables passed through from this process's environment when set. The one list: the step
/// agent receives it in each run request and builds a tool's environment there from it.
pub const BASE_ENV: [&str; 7] = ["PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR"];

/// Every variable whose name starts with this is passed through as well (here and by the agent).
pub const ENV_PREFIX: &str = "CAIRN_";

/// The variable an attempt's tool is started with, holding the attempt's nonce (a local tool's:
/// its token's `AttemptToken::nonce`; an agent launch's: the nonce of its launch record). Both
/// are recorded before the launch, so a successor finds the attempt's processes by it
/// ([`crate::reap::stop_carrying`]) even when its pid was never recorded. What the tool starts
/// inherits it.
pub const NONCE_VAR: &str = "CAIRN_ATTEMPT_NONCE";

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
    /// How long the tool runs before [`run_tool`] reports its identity: one that ends sooner is
    /// never reported (its end is). Zero: at once, right after the spawn.
    pub report_after: Duration,
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
    /// For a FAILED attempt that ran: the room left on the filesystem holding its working
    /// directory, as seen where it ran once it ended (so a full disk can be named). Empty
    /// otherwise.
    pub disks: Vec<DiskSpace>,
    /// Time spent spawning the tool (until it has exec'd).
    pub spawn: Duration,
    /// From spawn to the process having exited and its output collected (without the time its
    /// admission took to be given back: another tool's start).
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
            disks: Vec::new(),
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
    #[error("could not be started: the thread that admitted it failed before its spawn")]
    NotLaunched,
    #[error("could not be waited for: {0}")]
    Wait(io::Error),
    #[error("exceeded its timeout of {} and was terminated", human(*.timeout))]
    TimedOut { timeout: Duration },
    #[error("exceeded its timeout of {} and was killed after ignoring SIGTERM for {}", human(*.timeout), human(*.grace))]
    TimedOutKilled { timeout: Duration, grace: Duration },
    #[error("wrote more than {0} bytes to stdout")]
    StdoutTooLarge(usize),
    #[error("exited but its {0} stayed open: a process that left its process group still holds it")]
    PipeHeld(&'static str),
    #[error("could not be supervised: failed to start a thread: {0}")]
    Thread(io::Error),
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

/// Runs one attempt. Never panics on any process behaviour; a spawn failure is a FAILED ToolRun.
/// `on_start` is called with the process's identity once it has run `cmd.report_after` (at once
/// for zero), so the caller can record it; a tool that ends sooner is never reported. Whoever
/// must find the process before then finds it by its nonce ([`NONCE_VAR`]), which its caller
/// recorded before the spawn: recording a short tool's pid would only cost a write per step.
///
/// One thread supervises the whole attempt: it polls the two output pipes and a pidfd of the
/// child (the process's exit as a readable file descriptor), so an attempt costs no helper thread
/// (only input larger than a pipe's atomic write gets one, to write it).
pub fn run_tool(cmd: &ToolCommand, on_start: &mut dyn FnMut(&ProcessIdentity)) -> ToolRun {
    supervise_unadmitted(cmd, on_start, true)
}

/// [`run_tool`], once `admit` lets the tool start (the daemon's step slots). `admit` is given the
/// tool's [`Launch`] and runs it once the tool may start, on its own thread or on whichever
/// thread admits it (a step slot's releaser starts the next tool itself, so a slot is not left
/// idle while the waiting thread wakes), and the tool's [`Park`] to wait on meanwhile. What
/// `admit` returns is held until the tool's group is gone, and dropped then, so what it bounds is
/// the tools running, not the work before a spawn and after an exit (a directory made, output
/// read). `admit`'s error: the tool was not started (and its launch was dropped, never run).
pub fn run_admitted<H, E>(
    cmd: &ToolCommand,
    admit: impl FnOnce(Launch, &Park<'_>) -> Result<H, E>,
    on_start: &mut dyn FnMut(&ProcessIdentity),
) -> Result<ToolRun, E> {
    supervise(cmd, admit, on_start, true)
}

/// An admitted tool's spawn, with its input written: run once, by the thread that admits the
/// tool ([`run_admitted`]).
pub type Launch = Box<dyn FnOnce() + Send>;

/// What a tool waiting for its admission can sleep on: its output pipes, made before the tool.
/// Nothing can close them before its [`Launch`] has run; once another thread has run it, the
/// tool's end does (a launch that fails closes them at once). So the thread that will supervise
/// the tool, waiting here rather than for a wake-up from the thread that started it, is woken by
/// the tool's end: the thread handing a slot over makes no wake-up call, and the waiter does not
/// wake while its tool runs. A tool still running is found by the waiter's clock instead; what
/// it writes meanwhile waits in the pipes, as for [`QUICK_EXIT`].
pub struct Park<'a> {
    pipes: [std::os::fd::BorrowedFd<'a>; 2],
}

impl<'a> Park<'a> {
    /// A park on these pipes' read ends (a test's, or a tool's).
    pub fn new(pipes: [std::os::fd::BorrowedFd<'a>; 2]) -> Park<'a> {
        Park { pipes }
    }

    /// Sleeps until one of the pipes is closed at its other end, or for `at_most`, whichever
    /// comes first. True when a pipe was closed: the park then never sleeps again.
    pub fn wait(&self, at_most: Duration) -> bool {
        // No event asked for: poll still reports a hang-up (POLLHUP), and only that.
        let mut fds = self.pipes.map(|fd| PollFd::from_borrowed_fd(fd, PollFlags::empty()));
        match rustix::event::poll(&mut fds, Some(&timespec(at_most))) {
            Ok(_) => fds.iter().any(|fd| !fd.revents().is_empty()),
            // Interrupted: the caller looks again and waits again.
            Err(rustix::io::Errno::INTR) => false,
            // Cannot poll (out of memory): sleep on the clock rather than return at once, so a
            // caller waiting in a loop never spins.
            Err(_) => {
                thread::sleep(at_most);
                false
            }
        }
    }
}

/// A poll's timeout (a wait too long to represent is as good as forever).
fn timespec(wait: Duration) -> Timespec {
    Timespec { tv_sec: wait.as_secs().min(i64::MAX as u64) as i64, tv_nsec: i64::from(wait.subsec_nanos()) }
}

/// What a [`Launch`] leaves for the thread supervising the tool.
struct Launched {
    /// When the spawn began: the tool's own time starts here, after any wait for admission.
    started: Instant,
    child: io::Result<Process>,
    /// Time spent spawning the tool.
    spawn: Duration,
    /// The thread writing an input larger than a pipe's atomic write could not be started.
    thread_error: Option<io::Error>,
}

/// [`supervise`] with nothing to wait for before the spawn.
fn supervise_unadmitted(cmd: &ToolCommand, on_start: &mut dyn FnMut(&ProcessIdentity), use_pidfd: bool) -> ToolRun {
    let admit = |launch: Launch, _: &Park<'_>| {
        launch();
        Ok::<(), std::convert::Infallible>(())
    };
    let Ok(run) = supervise(cmd, admit, on_start, use_pidfd);
    run
}

/// Writes a tool's input and closes its stdin. A tool may exit without reading its input: EPIPE
/// (and any other write error) is ignored. Input that fits in PIPE_BUF goes into the fresh, empty
/// pipe at once (such a write never blocks); larger input is written by a thread that is not
/// joined: its write ends at the latest when the group is gone. The thread that could not be
/// started, if any, is returned.
fn feed(mut stdin: io::PipeWriter, input: Vec<u8>) -> Option<io::Error> {
    if input.len() <= PIPE_BUF {
        let _ = stdin.write_all(&input);
        return None;
    }
    thread::Builder::new()
        .name("cairn-stdin".into())
        .spawn(move || {
            let _ = stdin.write_all(&input);
        })
        .err()
}

/// [`run_admitted`]; `use_pidfd: false` watches the exit as a kernel without pidfds makes it.
fn supervise<H, E>(
    cmd: &ToolCommand,
    admit: impl FnOnce(Launch, &Park<'_>) -> Result<H, E>,
    on_start: &mut dyn FnMut(&ProcessIdentity),
    use_pidfd: bool,
) -> Result<ToolRun, E> {
    let Some(program) = cmd.argv.first() else {
        return Ok(not_started(AttemptError::NoProgram, Duration::ZERO, Instant::now()));
    };

    // The pipes are made here, not by the spawn, so the wait for admission can sleep on the
    // output's (`Park`).
    let pipes = io::pipe().and_then(|stdin| Ok((stdin, io::pipe()?, io::pipe()?)));
    let ((stdin_r, stdin), (stdout, stdout_w), (stderr, stderr_w)) = match pipes {
        Ok(pipes) => pipes,
        Err(source) => {
            let err = AttemptError::Spawn { program: program.clone(), source };
            return Ok(not_started(err, Duration::ZERO, Instant::now()));
        }
    };
    // What the child gets, made before its admission (a NUL byte in an argument fails here). It
    // leads its own group, so the whole tree can be signalled at once.
    let prepared = match Prepared::new(&resolve_program(program, &cmd.env, &cmd.cwd), &cmd.argv, &cmd.env, &cmd.cwd) {
        Ok(prepared) => prepared,
        Err(source) => {
            let err = AttemptError::Spawn { program: program.clone(), source };
            return Ok(not_started(err, Duration::ZERO, Instant::now()));
        }
    };

    let launched: Arc<OnceLock<Launched>> = Arc::default();
    let into = launched.clone();
    let input = cmd.stdin.clone();
    let launch: Launch = Box::new(move || {
        let started = Instant::now();
        let child = prepared.spawn([stdin_r.as_fd(), stdout_w.as_fd(), stderr_w.as_fd()]);
        let spawn = started.elapsed();
        // Its copies of the pipes' child ends: the tool's are then the only ones, so the output
        // pipes close when the tool's group has gone.
        drop((stdin_r, stdout_w, stderr_w));
        // Written by whoever started the tool, so a tool reading its input never waits for the
        // thread that will supervise it to wake.
        let thread_error = match &child {
            Ok(_) => feed(stdin, input),
            Err(_) => None,
        };
        let _ = into.set(Launched { started, child, spawn, thread_error });
    });
    let admitted = admit(launch, &Park::new([stdout.as_fd(), stderr.as_fd()]))?;
    // Admitted, the launch has run (and is gone, with its handle on the cell); had it not (a
    // panic on the thread that ran it), nothing started.
    let Some(Launched { started, child, spawn, thread_error }) =
        Arc::into_inner(launched).and_then(OnceLock::into_inner)
    else {
        return Ok(not_started(AttemptError::NotLaunched, Duration::ZERO, Instant::now()));
    };
    let mut child = match child {
        Ok(child) => child,
        Err(source) => {
            let err = AttemptError::Spawn { program: program.clone(), source };
            return Ok(not_started(err, spawn, started));
        }
    };

    let pid = child.id();
    let pgid = Pid::from_raw(pid as i32);
    // Made by the spawn (Linux 5.2 and later), else opened now: the child is ours and not yet
    // waited for, so its pid cannot be reused before this opens. Without pidfds (Linux before
    // 5.3, or a seccomp filter) its exit is polled instead.
    let opened = || rustix::process::Pid::from_raw(pid as i32).and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok());
    let exit_fd = if use_pidfd { child.take_pidfd().or_else(opened) } else { None };

    let mut report = || {
        // Read now, while the child is ours and not yet reaped (a zombie still has its entry).
        on_start(&ProcessIdentity { pid, pgid: pid, start_time: process_start_time(pid) });
    };
    let report_at = if cmd.report_after.is_zero() {
        report();
        None
    } else {
        started.checked_add(cmd.report_after)
    };

    let mut watch = Watch {
        stdout: Some(OwnedFd::from(stdout)),
        stderr: Some(OwnedFd::from(stderr)),
        exit_fd,
        out: Vec::new(),
        max_stdout: cmd.max_stdout,
        err_tail: VecDeque::with_capacity(cmd.stderr_tail.min(CHUNK)),
        tail: cmd.stderr_tail,
        // Never zeroed: each read fills what it returns (64 KiB of memset a step otherwise).
        chunk: Vec::with_capacity(CHUNK),
        overflow: false,
        read_error: None,
    };
    let mut ended = watch.for_exit(
        &mut child,
        pgid,
        // Counted from the spawn: a supervisor that was parked while its tool ran has only what
        // is left of it.
        cmd.timeout.saturating_sub(started.elapsed()),
        cmd.grace,
        report_at.map(|at| (at, &mut report as &mut dyn FnMut())),
    );

    // The direct child is gone: kill whatever else is left of its group, so no grandchild survives
    // holding the pipes.
    kill_group(pgid, Signal::SIGKILL);
    // Giving the admission back may start the next tool on this thread (a step slot's next
    // waiter): that time is not this tool's.
    let handing = Instant::now();
    drop(admitted);
    let handing = handing.elapsed();
    let all_closed = watch.for_pipes(PIPE_CLOSE_WAIT);
    // Output read after the exit counts against the bound as well.
    ended.overflow |= watch.overflow;

    let mut problem = None;
    if !all_closed {
        let pipe = if watch.stdout.is_some() { "stdout" } else { "stderr" };
        problem = Some(AttemptError::PipeHeld(pipe));
    }
    if let Some(e) = watch.read_error.take() {
        problem.get_or_insert(e);
    }
    if let Some(e) = thread_error {
        problem.get_or_insert(AttemptError::Thread(e));
    }
    let stdout = if problem.is_some() { Vec::new() } else { std::mem::take(&mut watch.out) };
    let stderr: Vec<u8> = std::mem::take(&mut watch.err_tail).into();

    let mut run = classify(cmd, ended, stdout, problem);
    run.stderr_tail = String::from_utf8_lossy(&stderr).into_owned();
    // Read now, while what the tool left on its disk is still there.
    if run.outcome == Outcome::Failed {
        run.disks = crate::space::disk_space(&[&cmd.cwd]);
    }
    run.spawn = spawn;
    run.duration = started.elapsed().saturating_sub(handing);
    Ok(run)
}

/// The scrubbed environment: the `BASE_ENV` variables taken from this process's environment when
/// set, then every variable named in `allow` when set, then every `ENV_PREFIX` variable of this
/// process, then `extra` (which wins). Sorted by name, no duplicates.
///
/// This process's environment is read once, at the first call: Cairn never changes its own, and
/// a daemon starting a thousand tools a second would otherwise copy all of it for each.
pub fn sandbox_env(allow: &[String], extra: &[(String, String)]) -> Vec<(String, String)> {
    static HERE: OnceLock<BTreeMap<String, String>> = OnceLock::new();
    let here = HERE.get_or_init(|| {
        // Variables that are not valid UTF-8 cannot be represented here and are left out.
        std::env::vars_os()
            .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
            .collect()
    });
    env_by_rule(here, allow, extra)
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

/// What one thread watches of a running attempt: its output pipes and its exit.
struct Watch {
    /// `None` once at its end (or, for stdout, abandoned over the bound).
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    /// Readable once the direct child has exited; `None` without pidfd support, or once reaped.
    exit_fd: Option<OwnedFd>,
    out: Vec<u8>,
    max_stdout: usize,
    err_tail: VecDeque<u8>,
    tail: usize,
    chunk: Vec<u8>,
    /// Stdout went over `max_stdout`: the group was killed.
    overflow: bool,
    read_error: Option<AttemptError>,
}

/// How often the child's exit is checked when there is no pidfd to poll.
const EXIT_POLL: Duration = Duration::from_millis(2);

/// How long a tool's exit is waited for alone before its output is read as it comes.
const QUICK_EXIT: Duration = Duration::from_millis(2);

impl Watch {
    /// Reads the output as it comes until the direct child exits, enforcing the timeout (SIGTERM to
    /// the group, then SIGKILL after the grace) and the stdout bound (SIGKILL at once); `report`
    /// is called at its time if the child is still running then.
    fn for_exit(
        &mut self,
        child: &mut Process,
        pgid: Pid,
        timeout: Duration,
        grace: Duration,
        mut report: Option<(Instant, &mut dyn FnMut())>,
    ) -> Ended {
        let mut ended =
            Ended { status: Err(AttemptError::NoStatus), timed_out: false, killed_after_grace: false, overflow: false };
        // None: no limit (after SIGKILL, or a timeout too large to represent).
        let mut deadline = Instant::now().checked_add(timeout);
        if let Some(status) = self.quick_exit(child, timeout, report.as_ref().map(|(at, _)| *at)) {
            ended.status = status;
            return ended;
        }
        loop {
            // Without a pidfd, the exit is checked on every wake and at least every EXIT_POLL.
            if self.exit_fd.is_none() {
                match child.try_wait() {
                    Ok(Some(status)) => {
                        ended.status = Ok(status);
                        return ended;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        ended.status = Err(AttemptError::Wait(e));
                        return ended;
                    }
                }
            }
            let now = Instant::now();
            if let Some(at) = deadline
                && now >= at
            {
                if ended.timed_out {
                    ended.killed_after_grace = true;
                    kill_group(pgid, Signal::SIGKILL);
                    deadline = None;
                } else {
                    ended.timed_out = true;
                    kill_group(pgid, Signal::SIGTERM);
                    deadline = Instant::now().checked_add(grace);
                }
                continue;
            }
            if let Some((at, _)) = &report
                && now >= *at
            {
                if let Some((_, report)) = report.take() {
                    report();
                }
                continue;
            }
            let mut wait = deadline.map(|at| at.saturating_duration_since(now));
            if let Some((at, _)) = &report {
                let left = at.saturating_duration_since(now);
                wait = Some(wait.map_or(left, |w| w.min(left)));
            }
            if self.exit_fd.is_none() {
                wait = Some(wait.map_or(EXIT_POLL, |w| w.min(EXIT_POLL)));
            }
            let exited = match self.poll(wait, true) {
                Ok(exited) => exited,
                Err(e) => {
                    // Cannot watch any more: stop the group and reap the child.
                    kill_group(pgid, Signal::SIGKILL);
                    ended.status = child.wait().map_err(AttemptError::Wait);
                    self.read_error.get_or_insert(AttemptError::Wait(e));
                    return ended;
                }
            };
            if self.overflow && !ended.overflow {
                ended.overflow = true;
                kill_group(pgid, Signal::SIGKILL);
                deadline = None;
            }
            if exited {
                // The pidfd says it has exited: this wait does not block.
                ended.status = child.wait().map_err(AttemptError::Wait);
                self.exit_fd = None;
                return ended;
            }
        }
    }

    /// Reads the pipes until both are closed, for at most `limit`. True when they are.
    fn for_pipes(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.stdout.is_some() || self.stderr.is_some() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.poll(Some(left), false).is_err() {
                return false;
            }
        }
        true
    }

    /// The exit of a tool that ends within [`QUICK_EXIT`] (and before its timeout and its report),
    /// waited for alone: most steps' tools are that short, and they then wake this thread once,
    /// rather than once for each write and each pipe closed. What they wrote waits in the pipes,
    /// read once the exit is known ([`Watch::for_pipes`]); a tool that writes more than a pipe
    /// holds meanwhile waits at most this long for it to be read. `None`: still running (or no
    /// pidfd), to be watched as it goes.
    fn quick_exit(
        &mut self,
        child: &mut Process,
        timeout: Duration,
        report_at: Option<Instant>,
    ) -> Option<Result<ExitStatus, AttemptError>> {
        let exit_fd = self.exit_fd.as_ref()?;
        let mut wait = QUICK_EXIT.min(timeout);
        if let Some(at) = report_at {
            wait = wait.min(at.saturating_duration_since(Instant::now()));
        }
        let mut fds = [PollFd::new(exit_fd, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&timespec(wait))) {
            Ok(n) if n > 0 => {
                // The pidfd says it has exited: this wait does not block.
                self.exit_fd = None;
                Some(child.wait().map_err(AttemptError::Wait))
            }
            _ => None,
        }
    }

    /// One poll over the open pipes (and the exit, when `exit` is asked for), reading what is
    /// ready. True when the child has exited.
    fn poll(&mut self, wait: Option<Duration>, exit: bool) -> io::Result<bool> {
        let ready = {
            let mut fds = Vec::with_capacity(3);
            let mut which = Vec::with_capacity(3);
            for (fd, name) in [(&self.stdout, Ready::Stdout), (&self.stderr, Ready::Stderr)] {
                if let Some(fd) = fd {
                    fds.push(PollFd::new(fd, PollFlags::IN));
                    which.push(name);
                }
            }
            if exit && let Some(fd) = &self.exit_fd {
                fds.push(PollFd::new(fd, PollFlags::IN));
                which.push(Ready::Exit);
            }
            if fds.is_empty() {
                // Nothing to watch but the clock (no pidfd, pipes closed).
                thread::sleep(wait.unwrap_or(EXIT_POLL));
                return Ok(false);
            }
            match rustix::event::poll(&mut fds, wait.map(timespec).as_ref()) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => return Ok(false),
                Err(e) => return Err(e.into()),
            }
            let seen: Vec<Ready> =
                fds.iter().zip(&which).filter(|(fd, _)| !fd.revents().is_empty()).map(|(_, which)| *which).collect();
            seen
        };
        let mut exited = false;
        for r in ready {
            match r {
                Ready::Stdout => self.read_stdout(),
                Ready::Stderr => self.read_stderr(),
                Ready::Exit => exited = true,
            }
        }
        Ok(exited)
    }

    /// One read of stdout. Past `max_stdout` it stops reading (the caller kills the group).
    fn read_stdout(&mut self) {
        let Some(fd) = &self.stdout else { return };
        self.chunk.clear();
        match rustix::io::read(fd, rustix::buffer::spare_capacity(&mut self.chunk)) {
            Ok(0) => self.stdout = None,
            Ok(n) if self.out.len() + n > self.max_stdout => {
                self.overflow = true;
                self.stdout = None;
            }
            Ok(_) => self.out.extend_from_slice(&self.chunk),
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
            Err(e) => {
                self.read_error.get_or_insert(AttemptError::ReadStdout(e.into()));
                self.stdout = None;
            }
        }
    }

    /// One read of stderr, keeping only the last `tail` bytes.
    fn read_stderr(&mut self) {
        let Some(fd) = &self.stderr else { return };
        self.chunk.clear();
        match rustix::io::read(fd, rustix::buffer::spare_capacity(&mut self.chunk)) {
            Ok(0) => self.stderr = None,
            Ok(n) => {
                let fresh = &self.chunk[n.saturating_sub(self.tail)..n];
                self.err_tail.extend(fresh);
                let excess = self.err_tail.len().saturating_sub(self.tail);
                self.err_tail.drain(..excess);
            }
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
            // An unreadable stderr only loses the log's tail.
            Err(_) => self.stderr = None,
        }
    }
}

/// Which of the watched descriptors was ready.
#[derive(Clone, Copy)]
enum Ready {
    Stdout,
    Stderr,
    Exit,
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
        disks: Vec::new(),
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
    /// The room left on the filesystem holding its working directory, as the agent read it.
    pub disks: Vec<DiskSpace>,
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
    if run.outcome == Outcome::Failed {
        run.disks = end.disks;
    }
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
        disks: Vec::new(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout: Duration) -> ToolCommand {
        ToolCommand {
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            cwd: std::env::temp_dir(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            stdin: b"{}".to_vec(),
            timeout,
            grace: Duration::from_millis(100),
            max_stdout: 1024,
            stderr_tail: 8,
            report_after: Duration::ZERO,
        }
    }

    /// Without a pidfd the exit is polled: the same outcomes, output and limits.
    #[test]
    fn without_pidfds_the_exit_is_polled_with_the_same_outcomes() {
        let run = supervise_unadmitted(&sh("cat; echo err-tail-kept >&2", Duration::from_secs(5)), &mut |_| {}, false);
        assert_eq!(run.outcome, Outcome::Completed, "{run:?}");
        assert_eq!(run.result, Some(serde_json::json!({})));
        assert_eq!(run.stderr_tail, "il-kept\n");

        let run = supervise_unadmitted(&sh("exit 3", Duration::from_secs(5)), &mut |_| {}, false);
        assert_eq!((run.exit_code, run.error.as_deref()), (Some(3), Some("exited with code 3")));

        let run = supervise_unadmitted(&sh("sleep 5", Duration::from_millis(100)), &mut |_| {}, false);
        assert_eq!(run.error.as_deref(), Some("exceeded its timeout of 100 ms and was terminated"));
        assert!(run.duration < Duration::from_secs(2), "{run:?}");

        let run =
            supervise_unadmitted(&sh("head -c 5000 /dev/zero; sleep 5", Duration::from_secs(5)), &mut |_| {}, false);
        assert_eq!(run.error.as_deref(), Some("wrote more than 1024 bytes to stdout"));
        assert!(run.duration < Duration::from_secs(2), "{run:?}");
    }
}
