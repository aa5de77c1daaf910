//! The step agent: one fixed, stdlib-only Python program (`agent.py` and the files it imports,
//! [`AGENT_FILES`]) that Cairn sends with every request to the controller host, locally or over SSH. It checks readiness, deploys approved
//! files, launches a step detached from the connection (process or Slurm), waits for it,
//! re-attaches to it, cancels it and reads bounded log tails. Nothing is installed on the target.
//!
//! The remote command is a constant: the agent and its request travel as one JSON line on stdin,
//! so no shell string is ever built from user input. What travels is typed and versioned in
//! `protocol`; this module is the transport (one-shot requests, following a launch) and
//! `session` the serving agent an SSH target keeps per connection.

pub mod protocol;
mod session;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use cairn_core::pipeline::JobFile;
use cairn_core::replay::Found;
use serde::Serialize;

use crate::ssh::{SshTransport, classify_ssh_failure};
use protocol::{
    CancelRequest, Cancelled, ChangedRequest, CheckRequest, Chunk, DeployRequest, Envelope, FilesRequest,
    HashedOutputs, Identity, MaterializeRequest, MaterializedCounts, OutputsRequest, PROTOCOL, ReadRequest, ReadyFacts,
    ReadyRequest, Reply, ReplyError, Request, RunRequest, SeedRequest, SeededCounts, StepExit, Tail, TailRequest,
    WaitRequest, decode_line,
};

/// The step agent's files, by name, split by role: `agent.py` is run, and imports the others from
/// what was sent with it. All of them travel with every request (nothing is installed on a
/// target), so a request never meets another build's agent; a Slurm job gets a copy of them all.
/// `FILES` in `agent_wire.py` names the same files.
#[doc(hidden)]
pub const AGENT_FILES: &[(&str, &str)] = &[
    ("agent.py", include_str!("agent.py")),
    ("agent_wire.py", include_str!("agent_wire.py")),
    ("agent_files.py", include_str!("agent_files.py")),
    ("agent_proc.py", include_str!("agent_proc.py")),
    ("agent_launch.py", include_str!("agent_launch.py")),
    ("agent_follow.py", include_str!("agent_follow.py")),
    ("agent_host.py", include_str!("agent_host.py")),
    ("agent_artifacts.py", include_str!("agent_artifacts.py")),
    ("agent_seed.py", include_str!("agent_seed.py")),
];

/// Reads the first stdin line and runs the agent's `agent.py` it carries, with every file of the
/// agent at hand (it imports them; a Slurm job gets a copy). Constant: no part comes from input.
const BOOT: &str = "import json,sys;m=json.loads(sys.stdin.readline());f=dict(m['agent']);exec(f['agent.py'],{'REQUEST':m['request'],'SOURCES':f,'__name__':'cairn_agent'})";

/// ssh exits 255 when the connection (not the remote command) failed.
const SSH_CONNECTION_FAILED: i32 = 255;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Connection(#[from] crate::ssh::ProbeError),
    #[error("the step agent on {host} failed: {detail}")]
    Failed { host: String, detail: String },
    #[error("the step agent on {host} did not answer within {secs} s")]
    TimedOut { host: String, secs: u64 },
    /// The agent does not speak the request's protocol; `detail` says both and what to do.
    #[error("the step agent on {host} refused the request: {detail}")]
    Unsupported { host: String, agent: u32, request: Option<u64>, detail: String },
    /// A reply of another protocol, or one that does not decode.
    #[error("the step agent on {host} {source}")]
    Reply {
        host: String,
        #[source]
        source: ReplyError,
    },
    #[error("the step agent on {host} answered `{got}` to a `{op}` request")]
    Unexpected { host: String, op: &'static str, got: &'static str },
}

impl AgentError {
    /// See [`crate::ssh::ProbeError::is_refusal`].
    pub fn is_refusal(&self) -> bool {
        matches!(self, AgentError::Connection(e) if e.is_refusal())
    }
}

/// What became of a step the agent launched or re-attached to.
#[derive(Debug)]
pub enum StepEnd {
    /// It ended; the record the supervisor wrote, with the bounded output.
    Ended(Box<StepExit>),
    /// The recorded launch is not the one found there (another nonce, or files of a protocol
    /// the agent does not read): nothing was touched.
    Mismatch(String),
    /// Nothing of the launch is left to observe (no pid file, or its supervisor died silently).
    Lost(String),
    /// The connection dropped before the end was seen; the step itself goes on.
    Dropped(String),
    /// The caller asked to stop following; the step itself goes on.
    Detached,
}

/// What `cancel` found in the attempt directory.
#[derive(Debug)]
pub enum Stop {
    /// The launch recorded there is the one asked for.
    Matched(Cancelled),
    /// Another launch is recorded there: nothing was touched.
    Mismatch(String),
}

/// The first line the agent reads: its files, and the request.
#[derive(Serialize)]
struct Boot<'a> {
    agent: &'static [(&'static str, &'static str)],
    request: &'a Envelope<&'a Request>,
}

/// Where the agent runs: on this machine, or through an SSH transport.
#[derive(Debug, Clone)]
pub struct Agent {
    pub ssh: Option<SshTransport>,
}

impl Agent {
    pub fn local() -> Agent {
        Agent { ssh: None }
    }

    fn host(&self) -> String {
        self.ssh.as_ref().map(SshTransport::label).unwrap_or_else(|| "local".into())
    }

    /// Starts the agent with `message` and closes its stdin (a one-shot request).
    fn spawn(&self, message: &Envelope<&Request>) -> Result<Child, AgentError> {
        let (child, stdin) = self.spawn_open(message)?;
        drop(stdin);
        Ok(child)
    }

    /// Starts the agent with `message`, keeping its stdin open for more lines.
    fn spawn_open(&self, message: &Envelope<&Request>) -> Result<(Child, Option<ChildStdin>), AgentError> {
        let line = serde_json::to_string(&Boot { agent: AGENT_FILES, request: message })
            .map_err(|e| AgentError::Failed { host: self.host(), detail: format!("cannot encode the request: {e}") })?
            + "\n";
        let argv = match &self.ssh {
            Some(t) => {
                let _ = std::fs::create_dir_all(&t.control_dir);
                t.argv(&format!("python3 -c \"{BOOT}\""))
            }
            None => vec!["python3".into(), "-c".into(), BOOT.into()],
        };
        // A launch on this host: the agent (and the supervisor it forks) carry the attempt's
        // nonce too, so a successor that finds no pid file yet still finds all of it, the agent
        // about to start the tool included.
        let nonce: Vec<(String, String)> = match (&self.ssh, message.body) {
            (None, Request::Run(run)) => {
                run.env.get(crate::NONCE_VAR).map(|n| (crate::NONCE_VAR.to_string(), n.clone())).into_iter().collect()
            }
            _ => Vec::new(),
        };
        let env = crate::sandbox_env(&["SSH_AUTH_SOCK".to_string()], &nonce);
        let mut command = Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .env_clear()
            .envs(env)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = crate::with_normal_policy(|| command.spawn()).map_err(|e| AgentError::Failed {
            host: self.host(),
            detail: format!("cannot start `{}`: {e}", argv[0]),
        })?;
        let mut stdin = child.stdin.take();
        if let Some(s) = stdin.as_mut() {
            // A write error shows up as the agent's exit.
            let _ = s.write_all(line.as_bytes());
        }
        Ok((child, stdin))
    }

    /// A request with a single answer, within `timeout`: the answer, or the agent's error.
    pub fn call(&self, request: &Request, timeout: Duration) -> Result<Reply, AgentError> {
        self.call_in_protocol(PROTOCOL, request, timeout)
    }

    /// [`Agent::call`] with the request sent as `protocol`: only for testing that the agent
    /// refuses a protocol it does not speak.
    #[doc(hidden)]
    pub fn call_in_protocol(&self, protocol: u32, request: &Request, timeout: Duration) -> Result<Reply, AgentError> {
        let mut last = None;
        let message = Envelope { protocol, id: None, body: request };
        self.stream(&message, Some(timeout), &mut |r| last = Some(r), &|| false)?;
        match last {
            None => Err(AgentError::Failed { host: self.host(), detail: "no answer".into() }),
            Some(Ok(reply)) if !matches!(reply, Reply::Error(_) | Reply::Unsupported(_)) => Ok(reply),
            Some(other) => Err(not_the_answer(other, &self.host(), request.op())),
        }
    }

    /// `request`'s answer, as `pick` takes it out of the reply it expects.
    fn ask<T>(
        &self,
        request: Request,
        timeout: Duration,
        pick: impl FnOnce(Reply) -> Result<T, Reply>,
    ) -> Result<T, AgentError> {
        let reply = self.call(&request, timeout)?;
        pick(reply).map_err(|other| not_the_answer(Ok(other), &self.host(), request.op()))
    }

    /// What the agent observes for a run_dir there.
    pub fn ready(&self, request: ReadyRequest, timeout: Duration) -> Result<ReadyFacts, AgentError> {
        self.ask(Request::Ready(request), timeout, |r| if let Reply::Ready(f) = r { Ok(f) } else { Err(r) })
    }

    /// Creates run_dir and writes the files; how many were written.
    pub fn deploy(&self, request: DeployRequest, timeout: Duration) -> Result<usize, AgentError> {
        self.ask(Request::Deploy(request), timeout, |r| if let Reply::Deployed(n) = r { Ok(n) } else { Err(r) })
    }

    /// Stops a recorded launch, once its nonce matched.
    pub fn cancel(&self, request: CancelRequest, timeout: Duration) -> Result<Stop, AgentError> {
        self.ask(Request::Cancel(request), timeout, |r| match r {
            Reply::Cancelled(c) => Ok(Stop::Matched(c)),
            Reply::Mismatch(m) => Ok(Stop::Mismatch(m)),
            other => Err(other),
        })
    }

    /// The last bytes of a file there.
    pub fn tail(&self, request: TailRequest, timeout: Duration) -> Result<Tail, AgentError> {
        self.ask(Request::Tail(request), timeout, |r| if let Reply::Tail(t) = r { Ok(t) } else { Err(r) })
    }

    /// Hashes a completed attempt's declared outputs there: the artifacts, or the step's error.
    pub fn outputs(&self, request: OutputsRequest, timeout: Duration) -> Result<HashedOutputs, AgentError> {
        self.ask(Request::Outputs(request), timeout, |r| if let Reply::Outputs(o) = r { Ok(o) } else { Err(r) })
    }

    /// What is at recorded artifacts' paths there: `None` for the recorded bytes.
    pub fn check(
        &self,
        request: CheckRequest,
        timeout: Duration,
    ) -> Result<BTreeMap<String, Option<Found>>, AgentError> {
        self.ask(Request::Check(request), timeout, |r| if let Reply::Checked(c) = r { Ok(c) } else { Err(r) })
    }

    /// Materialises a source run's artifacts into a child's run_dir there.
    pub fn materialize(
        &self,
        request: MaterializeRequest,
        timeout: Duration,
    ) -> Result<MaterializedCounts, AgentError> {
        self.ask(
            Request::Materialize(request),
            timeout,
            |r| if let Reply::Materialized(m) = r { Ok(m) } else { Err(r) },
        )
    }

    /// The files a pipeline created or changed in its working copy there, hashed.
    pub fn changed(&self, request: ChangedRequest, timeout: Duration) -> Result<HashedOutputs, AgentError> {
        self.ask(Request::Changed(request), timeout, |r| if let Reply::Outputs(o) = r { Ok(o) } else { Err(r) })
    }

    /// Bytes of a file there, from an offset.
    pub fn read(&self, request: ReadRequest, timeout: Duration) -> Result<Chunk, AgentError> {
        self.ask(Request::Read(request), timeout, |r| if let Reply::Chunk(c) = r { Ok(c) } else { Err(r) })
    }

    /// A pipeline's working copy seeded from an earlier run's, there.
    pub fn seed(&self, request: SeedRequest, timeout: Duration) -> Result<SeededCounts, AgentError> {
        self.ask(Request::Seed(Box::new(request)), timeout, |r| if let Reply::Seeded(s) = r { Ok(s) } else { Err(r) })
    }

    /// What finished pipeline jobs' outputs hold there, each job's in the order asked.
    pub fn files(&self, request: FilesRequest, timeout: Duration) -> Result<Vec<Vec<JobFile>>, AgentError> {
        self.ask(Request::Files(request), timeout, |r| if let Reply::Files(f) = r { Ok(f) } else { Err(r) })
    }

    /// Runs a request, passing each reply to `on_reply` as it arrives. `stop` is polled; when it
    /// says so the connection is closed (the agent's work on the target is not affected).
    fn stream(
        &self,
        message: &Envelope<&Request>,
        timeout: Option<Duration>,
        on_reply: &mut dyn FnMut(Result<Reply, ReplyError>),
        stop: &dyn Fn() -> bool,
    ) -> Result<Streamed, AgentError> {
        let started = Instant::now();
        let mut child = self.spawn(message)?;
        let host = self.host();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let (tx, rx) = mpsc::channel::<Option<String>>();
        if let Some(out) = stdout {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    match line {
                        Ok(l) => {
                            let _ = tx.send(Some(l));
                        }
                        Err(_) => break,
                    }
                }
                let _ = tx.send(None);
            });
        } else {
            let _ = tx.send(None);
        }
        let err_reader = stderr.map(|mut e| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = (&mut e).take(64 << 10).read_to_end(&mut buf);
                // Drain the rest so the agent never blocks on a full pipe.
                let _ = std::io::copy(&mut e, &mut std::io::sink());
                String::from_utf8_lossy(&buf).into_owned()
            })
        });
        drop(tx);
        let kill = |child: &mut Child| {
            let _ = child.kill();
            let _ = child.wait();
        };
        loop {
            if stop() {
                kill(&mut child);
                return Ok(Streamed::Stopped);
            }
            if let Some(t) = timeout
                && started.elapsed() > t
            {
                kill(&mut child);
                return Err(AgentError::TimedOut { host, secs: t.as_secs() });
            }
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(Some(line)) => {
                    if let Some(line) = decode_line(&line) {
                        on_reply(line.reply);
                    }
                }
                Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
            }
        }
        let status = child.wait().map_err(|e| AgentError::Failed { host: host.clone(), detail: e.to_string() })?;
        let stderr = err_reader.and_then(|h| h.join().ok()).unwrap_or_default();
        if !status.success() {
            if let Some(t) = &self.ssh
                && status.code() == Some(SSH_CONNECTION_FAILED)
            {
                return Err(AgentError::Connection(classify_ssh_failure(t, &stderr)));
            }
            let detail = stderr.trim().lines().last().unwrap_or("no detail").to_string();
            return Err(AgentError::Failed { host, detail: format!("exited with {status}: {detail}") });
        }
        Ok(Streamed::Exited)
    }

    /// Launches a step (`run`) and follows it to its end. `on_identity` is called with the
    /// launch's identity as soon as the agent reports it, before anything else is awaited. On an
    /// SSH target it goes through the target's serving agent (one per transport, started on first
    /// need): no new ssh session or Python start per step.
    pub fn run_step(
        &self,
        request: RunRequest,
        on_identity: &mut dyn FnMut(&Identity),
        stop: &dyn Fn() -> bool,
    ) -> Result<StepEnd, AgentError> {
        let request = Request::Run(Box::new(request));
        match self.session() {
            Some(session) => session.run(&request, on_identity, stop, &self.host()),
            None => self.follow(&request, on_identity, stop),
        }
    }

    /// Re-attaches to a recorded launch (`wait`) and follows it to its end.
    pub fn wait_step(&self, request: WaitRequest, stop: &dyn Fn() -> bool) -> Result<StepEnd, AgentError> {
        self.follow(&Request::Wait(request), &mut |_| {}, stop)
    }

    fn follow(
        &self,
        request: &Request,
        on_identity: &mut dyn FnMut(&Identity),
        stop: &dyn Fn() -> bool,
    ) -> Result<StepEnd, AgentError> {
        let host = self.host();
        let mut end = None;
        let streamed = self.stream(
            &Envelope::new(request),
            None,
            &mut |reply| {
                if end.is_none() {
                    end = follow_reply(reply, &host, request.op(), on_identity);
                }
            },
            stop,
        );
        match streamed {
            Ok(Streamed::Stopped) => Ok(match end {
                Some(Ok(end)) => end,
                _ => StepEnd::Detached,
            }),
            Ok(Streamed::Exited) => {
                end.unwrap_or_else(|| Ok(StepEnd::Dropped("the agent ended without reporting the step's end".into())))
            }
            Err(AgentError::Connection(e)) if end.is_none() => Ok(StepEnd::Dropped(e.to_string())),
            Err(AgentError::Failed { detail, .. }) if end.is_none() => Ok(StepEnd::Dropped(detail)),
            Err(e) => Err(e),
        }
    }
}

/// What a follower of a launch makes of one reply, one-shot or through a serving agent: `None`
/// while the launch goes on, then its end, or why the agent could not follow it.
fn follow_reply(
    reply: Result<Reply, ReplyError>,
    host: &str,
    op: &'static str,
    on_identity: &mut dyn FnMut(&Identity),
) -> Option<Result<StepEnd, AgentError>> {
    match reply {
        Ok(Reply::Identity(id)) => {
            on_identity(&id);
            None
        }
        Ok(Reply::Exit(exit)) => Some(Ok(StepEnd::Ended(exit))),
        Ok(Reply::Mismatch(m)) => Some(Ok(StepEnd::Mismatch(m))),
        Ok(Reply::Lost(m)) => Some(Ok(StepEnd::Lost(m))),
        other => Some(Err(not_the_answer(other, host, op))),
    }
}

/// A reply that is not the answer a request wants, as the error it is: the agent's own error,
/// its refusal of the protocol, a line that does not decode, or another reply.
fn not_the_answer(reply: Result<Reply, ReplyError>, host: &str, op: &'static str) -> AgentError {
    let host = host.to_string();
    match reply {
        Ok(Reply::Error(detail)) => AgentError::Failed { host, detail },
        Ok(Reply::Unsupported(u)) => {
            AgentError::Unsupported { host, agent: u.agent, request: u.request, detail: u.error }
        }
        Ok(other) => AgentError::Unexpected { host, op, got: other.name() },
        Err(source) => AgentError::Reply { host, source },
    }
}

enum Streamed {
    Exited,
    Stopped,
}
