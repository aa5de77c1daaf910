//! Starting a local tool's process: a vfork-style `clone` (the child shares this process's memory
//! and the calling thread sleeps until the child has exec'd, exactly as glibc's `posix_spawn`
//! does) onto a stack kept for the next spawn, with the child's pidfd from the same call.
//!
//! Why not `std::process::Command`: through glibc it maps a fresh stack for every spawn and
//! unmaps it after, and unmapping memory of a process whose threads run on other CPUs interrupts
//! each of them to flush its TLB; it also copies the environment twice and allocates its file
//! actions, and the pidfd costs a second call. Under the daemon's load that was a tenth of its
//! CPU (BENCHMARKS §18). What the child does is what `posix_spawn` does for `Command`, no more:
//! caught signals back to their default (and SIGPIPE, which Rust's runtime ignores), an empty
//! signal mask, its own process group, the three pipes as its standard streams, its directory,
//! then `execve`; and, started from a thread made a batch thread ([`run_this_thread_as_batch`]),
//! the normal scheduling policy back.

use std::ffi::{CString, c_char, c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::ptr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// A process to start: its program, argv, environment and directory, made ready for the child
/// (which may not allocate). It inherits nothing else from this process but the three
/// descriptors [`Prepared::spawn`] is given (every other one of this process is close-on-exec,
/// as Rust opens them).
pub(crate) struct Prepared {
    program: CString,
    cwd: CString,
    /// Point into `_strings`, whose heap buffers do not move with this struct; null-terminated.
    argv: Vec<*const c_char>,
    envp: Vec<*const c_char>,
    _strings: Vec<CString>,
}

// SAFETY: the pointers point only into the CStrings this struct owns.
unsafe impl Send for Prepared {}

impl Prepared {
    /// `program` is the file executed (a path: no lookup on the PATH here); `argv` the whole
    /// argv, `argv[0]` included. Fails on a NUL byte in any of them.
    pub fn new(program: &Path, argv: &[String], env: &[(String, String)], cwd: &Path) -> io::Result<Prepared> {
        let args = argv.iter().map(|a| c_string(a.as_bytes().to_vec())).collect::<io::Result<Vec<_>>>()?;
        let entries = env
            .iter()
            .map(|(k, v)| {
                let mut entry = Vec::with_capacity(k.len() + v.len() + 2);
                entry.extend_from_slice(k.as_bytes());
                entry.push(b'=');
                entry.extend_from_slice(v.as_bytes());
                c_string(entry)
            })
            .collect::<io::Result<Vec<_>>>()?;
        let argv = null_terminated(&args);
        let envp = null_terminated(&entries);
        let mut strings = args;
        strings.extend(entries);
        Ok(Prepared {
            program: c_string(program.as_os_str().as_bytes().to_vec())?,
            cwd: c_string(cwd.as_os_str().as_bytes().to_vec())?,
            argv,
            envp,
            _strings: strings,
        })
    }

    /// Starts the process with `stdio` as its stdin, stdout and stderr. Returns once it has
    /// exec'd: an error is why it could not (its program missing or not executable, its
    /// directory gone), the half-started child already reaped.
    pub fn spawn(&self, stdio: [BorrowedFd<'_>; 3]) -> io::Result<Process> {
        let args = ChildArgs {
            program: self.program.as_ptr(),
            argv: self.argv.as_ptr(),
            envp: self.envp.as_ptr(),
            cwd: self.cwd.as_ptr(),
            stdio: stdio.map(|fd| fd.as_raw_fd()),
            error: AtomicI32::new(0),
        };
        let stack = Stack::take()?;
        let result = clone_child(&stack, &args);
        stack.give_back();
        let (pid, pidfd) = result?;
        let error = args.error.load(Ordering::Relaxed);
        let mut process = Process { pid, pidfd, status: None };
        if error != 0 {
            // The child has exited (127) without exec'ing: reap it, so no zombie is left.
            let _ = process.wait();
            return Err(io::Error::from_raw_os_error(error));
        }
        Ok(process)
    }
}

/// A started process, this process's child until it is waited for.
pub(crate) struct Process {
    pid: i32,
    /// Its exit as a readable descriptor, when the kernel gives one with the clone.
    pidfd: Option<OwnedFd>,
    /// Once reaped.
    status: Option<ExitStatus>,
}

impl Process {
    pub fn id(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    /// The child's pidfd, made by its clone (None on a kernel before 5.2).
    pub fn take_pidfd(&mut self) -> Option<OwnedFd> {
        self.pidfd.take()
    }

    /// Waits for the child's exit and reaps it.
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.try_reap(0)? {
                return Ok(status);
            }
        }
    }

    /// The child's exit status if it has exited (reaping it), without waiting.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.try_reap(libc::WNOHANG)
    }

    fn try_reap(&mut self, options: c_int) -> io::Result<Option<ExitStatus>> {
        if let Some(status) = self.status {
            return Ok(Some(status));
        }
        let mut raw: c_int = 0;
        // SAFETY: waitpid writes one int we own.
        match unsafe { libc::waitpid(self.pid, &mut raw, options) } {
            0 => Ok(None),
            -1 => {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted { Ok(None) } else { Err(e) }
            }
            _ => {
                let status = ExitStatus::from_raw(raw);
                self.status = Some(status);
                Ok(Some(status))
            }
        }
    }
}

/// Set once [`run_this_thread_as_batch`] has made a thread a batch thread.
static MADE_BATCH: AtomicBool = AtomicBool::new(false);

/// Tells the scheduler this thread is a batch thread (`SCHED_BATCH`): one woken does not preempt
/// the task running on its CPU, but waits for that task's turn to end. For the daemon's run
/// threads, woken at every tool's end: a thread woken by its tool's pipes closing preempted the
/// tool before its exit was complete, found no exit, and slept again, so the tool was switched out
/// and back once more for every step (BENCHMARKS §18). A thread the process's owner already gave
/// another policy (`chrt`) keeps it. The threads it starts inherit the policy; the tools they
/// start get the normal one back in the spawn's child. True when the thread was changed.
pub fn run_this_thread_as_batch() -> bool {
    let changed = policy() == libc::SCHED_OTHER && set_policy(libc::SCHED_BATCH);
    if changed {
        MADE_BATCH.store(true, Ordering::Relaxed);
    }
    changed
}

/// Runs `spawn` (a `std::process::Command`'s spawn) under the normal policy when this thread is a
/// batch thread made so by [`run_this_thread_as_batch`], and makes it a batch thread again after:
/// what it starts (the step agent, and the controller and jobs of a pipeline under it) is the
/// user's work, as a tool is.
pub fn with_normal_policy<T>(spawn: impl FnOnce() -> T) -> T {
    // Refused, the child inherits the batch policy: no reason to fail its start.
    let batch = made_batch() && set_policy(libc::SCHED_OTHER);
    let out = spawn();
    if batch {
        set_policy(libc::SCHED_BATCH);
    }
    out
}

/// This thread runs under the batch policy [`run_this_thread_as_batch`] gave it or its creator.
/// Async-signal-safe (an atomic's load and a system call): the spawn's child asks it too.
fn made_batch() -> bool {
    MADE_BATCH.load(Ordering::Relaxed) && policy() == libc::SCHED_BATCH
}

/// This thread's scheduling policy.
fn policy() -> c_int {
    // SAFETY: reads this thread's own policy.
    unsafe { libc::sched_getscheduler(0) }
}

/// Sets this thread's scheduling policy (priority 0, as SCHED_OTHER and SCHED_BATCH have). True
/// when it was set.
fn set_policy(policy: c_int) -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sets this thread's own policy.
    unsafe { libc::sched_setscheduler(0, policy, &param) == 0 }
}

/// The kernel refused `CLONE_PIDFD` once (before Linux 5.2): never asked for again.
static NO_CLONE_PIDFD: AtomicBool = AtomicBool::new(false);

/// The clone itself, with every signal blocked on this thread meanwhile: the child inherits the
/// mask, so none of this process's handlers can run in it (on this process's memory) before it
/// has set them back to their defaults.
fn clone_child(stack: &Stack, args: &ChildArgs) -> io::Result<(i32, Option<OwnedFd>)> {
    loop {
        let with_pidfd = !NO_CLONE_PIDFD.load(Ordering::Relaxed);
        let mut flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
        if with_pidfd {
            flags |= libc::CLONE_PIDFD;
        }
        let mut pidfd: c_int = -1;
        // SAFETY: the sets are ours; `child` only reads `args`, which outlives the clone (this
        // thread sleeps until the child has exec'd or exited, CLONE_VFORK), and runs on `stack`,
        // which no one else uses meanwhile; the kernel writes the pidfd into `pidfd`.
        let (pid, errno) = unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            let pid = libc::clone(
                child,
                stack.top(),
                flags,
                ptr::from_ref(args).cast_mut().cast::<c_void>(),
                &mut pidfd as *mut c_int,
            );
            let errno = io::Error::last_os_error();
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, ptr::null_mut());
            (pid, errno)
        };
        if pid == -1 {
            if with_pidfd && errno.raw_os_error() == Some(libc::EINVAL) {
                NO_CLONE_PIDFD.store(true, Ordering::Relaxed);
                continue;
            }
            return Err(errno);
        }
        // SAFETY: with CLONE_PIDFD the kernel made this descriptor for us alone.
        let pidfd = (with_pidfd && pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd) });
        return Ok((pid, pidfd));
    }
}

/// What the child reads, all of it made before the clone.
struct ChildArgs {
    program: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    cwd: *const c_char,
    stdio: [c_int; 3],
    /// The errno of the step that failed, written by a child that cannot exec.
    error: AtomicI32,
}

/// The child, between the clone and the exec, on this process's memory: only async-signal-safe
/// calls, no allocation, no lock. It never returns (an exec, or `_exit(127)`).
extern "C" fn child(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `ChildArgs` the parent's thread keeps alive while it sleeps.
    let args = unsafe { &*arg.cast::<ChildArgs>() };
    // SAFETY: plain system calls on data the parent prepared.
    unsafe {
        let error = match prepare(args) {
            Ok(()) => {
                libc::execve(args.program, args.argv, args.envp);
                *libc::__errno_location()
            }
            Err(errno) => errno,
        };
        args.error.store(error.max(1), Ordering::Relaxed);
        libc::_exit(127)
    }
}

/// The child's set-up before its exec; the errno of the call that failed.
///
/// # Safety
/// Called only in the child of [`clone_child`].
unsafe fn prepare(args: &ChildArgs) -> Result<(), c_int> {
    // SAFETY: as the caller's.
    unsafe {
        let fail = || *libc::__errno_location();
        // Handlers are this process's code over this process's memory: caught signals go back to
        // their defaults (an exec would do it, but a signal could arrive before), and so does
        // SIGPIPE, which Rust's runtime ignores and an ignored signal stays ignored over an exec.
        let mut action: libc::sigaction = std::mem::zeroed();
        let default: libc::sigaction = std::mem::zeroed(); // sa_sigaction 0 is SIG_DFL
        for signal in 1..NSIG {
            if signal == libc::SIGKILL || signal == libc::SIGSTOP {
                continue;
            }
            // glibc's own signals (32, 33) are refused: they are neither caught nor passed on.
            if libc::sigaction(signal, ptr::null(), &mut action) != 0 {
                continue;
            }
            let handler = action.sa_sigaction;
            if signal == libc::SIGPIPE || (handler != libc::SIG_DFL && handler != libc::SIG_IGN) {
                libc::sigaction(signal, &default, ptr::null_mut());
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        if libc::sigprocmask(libc::SIG_SETMASK, &none, ptr::null_mut()) != 0 {
            return Err(fail());
        }
        if libc::setpgid(0, 0) != 0 {
            return Err(fail());
        }
        // A tool is the user's work: it runs under the policy the daemon was started with, not
        // the one the daemon chose for its own threads. (Were this refused, the tool would run
        // as a batch task: no reason to fail it.)
        if made_batch() {
            set_policy(libc::SCHED_OTHER);
        }
        // A pipe numbered 0–2 (this process started without its standard streams) is moved out
        // of the way first, so no dup2 overwrites another's source.
        let mut stdio = args.stdio;
        for fd in &mut stdio {
            if *fd < 3 {
                let moved = libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 3);
                if moved < 0 {
                    return Err(fail());
                }
                *fd = moved;
            }
        }
        for (target, fd) in (0..).zip(stdio) {
            if libc::dup2(fd, target) < 0 {
                return Err(fail());
            }
        }
        if libc::chdir(args.cwd) != 0 {
            return Err(fail());
        }
        Ok(())
    }
}

/// Linux's signals are 1 to 64.
const NSIG: c_int = 65;

/// A child's stack: a 64 KiB mapping (glibc's `posix_spawn` maps 36) with a guard page below it,
/// so a child that overran it would die of SIGSEGV alone rather than write over this process.
/// Kept for the next spawn: one per spawn running at once.
struct Stack {
    base: *mut c_void,
}

// SAFETY: a mapping is no thread's; only the spawn holding it uses it.
unsafe impl Send for Stack {}

const STACK_BYTES: usize = 64 * 1024;

static STACKS: Mutex<Vec<Stack>> = Mutex::new(Vec::new());

impl Stack {
    fn take() -> io::Result<Stack> {
        if let Some(stack) = STACKS.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Ok(stack);
        }
        let page = page_size();
        // SAFETY: a fresh anonymous mapping; its first page is then made inaccessible.
        unsafe {
            let base = libc::mmap(
                ptr::null_mut(),
                STACK_BYTES + page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            if libc::mprotect(base, page, libc::PROT_NONE) != 0 {
                let e = io::Error::last_os_error();
                libc::munmap(base, STACK_BYTES + page);
                return Err(e);
            }
            Ok(Stack { base })
        }
    }

    /// The stack's highest address (it grows down), 16-byte aligned as both ABIs want.
    fn top(&self) -> *mut c_void {
        // SAFETY: within the mapping (its end).
        unsafe { self.base.cast::<u8>().add(STACK_BYTES + page_size()).cast() }
    }

    fn give_back(self) {
        STACKS.lock().unwrap_or_else(|e| e.into_inner()).push(self);
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).ok().filter(|s| *s > 0).unwrap_or(4096)
}

fn c_string(bytes: Vec<u8>) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "nul byte found in provided data"))
}

fn null_terminated(strings: &[CString]) -> Vec<*const c_char> {
    strings.iter().map(|s| s.as_ptr()).chain(std::iter::once(ptr::null())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;

    fn run(argv: &[&str], env: &[(&str, &str)], cwd: &Path) -> (io::Result<ExitStatus>, String) {
        let (mut out, out_w) = io::pipe().unwrap();
        let (stdin, _stdin_w) = io::pipe().unwrap();
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let spawned = Prepared::new(Path::new(&argv[0]), &argv, &env, cwd)
            .and_then(|p| p.spawn([stdin.as_fd(), out_w.as_fd(), out_w.as_fd()]));
        drop(out_w);
        match spawned {
            Ok(mut p) => {
                let mut text = String::new();
                out.read_to_string(&mut text).unwrap();
                (p.wait(), text)
            }
            Err(e) => (Err(e), String::new()),
        }
    }

    #[test]
    fn a_child_gets_its_argv_environment_directory_and_group_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let script = "echo \"$0 $1 [$ONLY] $(pwd)\"; read -r pid _ _ _ pgid _ < /proc/$$/stat; echo $pid $pgid; env";
        let env = [("ONLY", "x y"), ("PATH", "/usr/bin:/bin")];
        let (status, out) = run(&["/bin/sh", "-c", script, "zeroth", "first"], &env, dir.path());
        assert!(status.unwrap().success());
        let lines: Vec<&str> = out.lines().collect();
        let real = dir.path().canonicalize().unwrap();
        assert_eq!(lines[0], format!("zeroth first [x y] {}", real.display()), "{out}");
        // Its own group: the group id is its pid.
        let ids: Vec<&str> = lines[1].split(' ').collect();
        assert_eq!(ids[0], ids[1], "{out}");
        // ONLY and PATH, and what sh sets itself (PWD, maybe SHLVL, OLDPWD, _): nothing of this
        // process's.
        let names: Vec<&str> = lines[2..].iter().filter_map(|l| l.split_once('=')).map(|(k, _)| k).collect();
        assert!(names.contains(&"ONLY") && names.contains(&"PATH"), "{out}");
        assert!(names.iter().all(|n| ["ONLY", "PATH", "PWD", "SHLVL", "OLDPWD", "_"].contains(n)), "{out}");
    }

    #[test]
    fn a_child_starts_with_default_signals_and_an_empty_mask_whatever_this_process_set() {
        // This process catches SIGUSR1 and ignores SIGPIPE (Rust's runtime); this thread blocks
        // SIGUSR2.
        extern "C" fn caught(_: c_int) {}
        // SAFETY: a handler that does nothing; a mask of this thread alone.
        unsafe {
            libc::signal(libc::SIGUSR1, caught as extern "C" fn(c_int) as libc::sighandler_t);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR2);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, ptr::null_mut());
        }
        let dir = tempfile::tempdir().unwrap();
        let (status, out) = run(&["/bin/cat", "/proc/self/status"], &[], dir.path());
        assert!(status.unwrap().success());
        let signals = |status: &str| -> Vec<(String, u64)> {
            let lines = status.lines().filter(|l| ["SigBlk:", "SigIgn:", "SigCgt:"].iter().any(|p| l.starts_with(p)));
            let parse =
                |l: &str| l.split_once(':').map(|(k, v)| (k.to_string(), u64::from_str_radix(v.trim(), 16).unwrap()));
            lines.filter_map(parse).collect()
        };
        let ours = signals(&out);
        assert_eq!(ours.len(), 3, "{out}");
        // Nothing blocked, nothing caught (cat catches nothing); SIGPIPE (13) not ignored.
        assert_eq!(ours[0].1, 0, "{ours:?}");
        assert_eq!(ours[2].1, 0, "{ours:?}");
        assert_eq!(ours[1].1 & (1 << (libc::SIGPIPE - 1)), 0, "{ours:?}");
        // What std's spawn (glibc's posix_spawn) gives the same program, but for the mask, which
        // std leaves as the spawning thread's, and glibc's own two signals (32, 33), which it
        // ignores in its children and which are nothing to a tool.
        let std_out = std::process::Command::new("/bin/cat").arg("/proc/self/status").output().unwrap();
        let theirs = signals(&String::from_utf8_lossy(&std_out.stdout));
        assert_eq!(theirs[0].1, 1 << (libc::SIGUSR2 - 1), "{theirs:?}");
        assert_eq!(ours[1].1 & 0x7fff_ffff, theirs[1].1 & 0x7fff_ffff, "{ours:?} {theirs:?}");
        assert_eq!(ours[2], theirs[2]);
        // This thread's mask is as it was.
        // SAFETY: reads this thread's mask.
        unsafe {
            let mut now: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, ptr::null(), &mut now);
            assert_eq!(libc::sigismember(&now, libc::SIGUSR2), 1);
            assert_eq!(libc::sigismember(&now, libc::SIGUSR1), 0);
        }
    }

    #[test]
    fn what_keeps_a_child_from_its_exec_is_the_error_and_no_zombie_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let missing = run(&["/nonexistent/tool"], &[], dir.path()).0.unwrap_err();
        assert_eq!(missing.raw_os_error(), Some(libc::ENOENT), "{missing}");
        let file = dir.path().join("data.txt");
        std::fs::write(&file, "not a program").unwrap();
        let denied = run(&[file.to_str().unwrap()], &[], dir.path()).0.unwrap_err();
        assert_eq!(denied.raw_os_error(), Some(libc::EACCES), "{denied}");
        let gone = run(&["/bin/true"], &[], &dir.path().join("no-such-dir")).0.unwrap_err();
        assert_eq!(gone.raw_os_error(), Some(libc::ENOENT), "{gone}");
        let nul = run(&["/bin/echo", "a\0b"], &[], dir.path()).0.unwrap_err();
        assert_eq!(nul.kind(), io::ErrorKind::InvalidInput);
        // Every failed child was reaped: none is left for this process to wait for.
        // SAFETY: waitpid on no child in particular, not blocking.
        let left = unsafe { libc::waitpid(-1, ptr::null_mut(), libc::WNOHANG) };
        assert!(left <= 0, "a zombie was left: {left}");
    }

    #[test]
    fn many_threads_spawn_at_once_each_on_its_own_stack() {
        let dir = tempfile::tempdir().unwrap();
        std::thread::scope(|scope| {
            for t in 0..8 {
                let dir = dir.path();
                scope.spawn(move || {
                    for i in 0..40 {
                        let word = format!("t{t}-{i}");
                        let (status, out) = run(&["/bin/echo", &word], &[], dir);
                        assert!(status.unwrap().success());
                        assert_eq!(out.trim(), word);
                    }
                });
            }
        });
        // The stacks were given back, for the next spawns.
        assert!(!STACKS.lock().unwrap().is_empty());
    }

    #[test]
    fn a_batch_thread_starts_its_tools_under_the_normal_policy() {
        let dir = tempfile::tempdir().unwrap();
        let policy_of = |stat: &str| -> u32 {
            // Field 41 (policy), counted from the last ')' as field 2 (comm) may hold spaces.
            let after = &stat[stat.rfind(')').unwrap() + 1..];
            after.split_whitespace().nth(38).unwrap().parse().unwrap()
        };
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    assert!(run_this_thread_as_batch());
                    // SAFETY: reads this thread's policy.
                    assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_BATCH);
                    let (status, out) = run(&["/bin/cat", "/proc/self/stat"], &[], dir.path());
                    assert!(status.unwrap().success());
                    assert_eq!(policy_of(&out), libc::SCHED_OTHER as u32, "{out}");
                    // Already a batch thread: left as it is.
                    assert!(!run_this_thread_as_batch());
                    // What std's spawn starts from it, through with_normal_policy, as well; the
                    // thread is a batch thread again after.
                    let out =
                        with_normal_policy(|| std::process::Command::new("/bin/cat").arg("/proc/self/stat").output());
                    assert_eq!(policy_of(&String::from_utf8_lossy(&out.unwrap().stdout)), libc::SCHED_OTHER as u32);
                    // SAFETY: reads this thread's policy.
                    assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_BATCH);
                    let out = std::process::Command::new("/bin/cat").arg("/proc/self/stat").output();
                    assert_eq!(policy_of(&String::from_utf8_lossy(&out.unwrap().stdout)), libc::SCHED_BATCH as u32);
                })
                .join()
                .unwrap();
        });
        // SAFETY: reads this thread's policy.
        assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_OTHER, "only the thread that asked");
    }

    #[test]
    fn a_child_is_waited_for_by_its_pidfd_and_reaped_once() {
        let dir = tempfile::tempdir().unwrap();
        let argv = vec!["/bin/sh".to_string(), "-c".to_string(), "exit 7".to_string()];
        let (stdin, _w) = io::pipe().unwrap();
        let null = std::fs::File::create(dir.path().join("out")).unwrap();
        let mut p = Prepared::new(Path::new("/bin/sh"), &argv, &[], dir.path())
            .unwrap()
            .spawn([stdin.as_fd(), null.as_fd(), null.as_fd()])
            .unwrap();
        let pidfd = p.take_pidfd().expect("Linux 5.2 and later give a pidfd with the clone");
        let mut fds = [rustix::event::PollFd::new(&pidfd, rustix::event::PollFlags::IN)];
        rustix::event::poll(&mut fds, None).unwrap();
        assert_eq!(p.try_wait().unwrap().and_then(|s| s.code()), Some(7));
        assert_eq!(p.wait().unwrap().code(), Some(7));
    }
}
