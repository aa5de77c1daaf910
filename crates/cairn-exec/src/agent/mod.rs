//! The step agent: one fixed, stdlib-only Python program (`agent.py`) that Cairn sends with every
//! request to the controller host, locally or over SSH. It checks readiness, deploys approved
//! files, launches a step detached from the connection (process or Slurm), waits for it,
//! re-attaches to it, cancels it and reads bounded log tails. Nothing is installed on the target.
//!
//! The remote command is a constant: the agent and its request travel as one JSON line on stdin,
//! so no shell string is ever built from user input.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::ssh::{SshTransport, classify_ssh_failure};

const AGENT_PY: &str = include_str!("agent.py");

/// Reads the first stdin line and runs the agent it carries. Constant: no part comes from input.
const BOOT: &str = "import json,sys;m=json.loads(sys.stdin.readline());exec(m['agent'],{'REQUEST':m['request'],'__name__':'cairn_agent'})";

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
}

/// What became of a step the agent launched or re-attached to.
#[derive(Debug)]
pub enum StepEnd {
    /// It ended; the record the supervisor wrote, with the bounded output.
    Ended { record: Value },
    /// The recorded launch is not the one found there (another nonce): nothing was touched.
    Mismatch(String),
    /// Nothing of the launch is left to observe (no pid file, or its supervisor died silently).
    Lost(String),
    /// The connection dropped before the end was seen; the step itself goes on.
    Dropped(String),
    /// The caller asked to stop following; the step itself goes on.
    Detached,
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

    /// Starts the agent with `request` and closes its stdin (a one-shot request).
    fn spawn(&self, request: &Value) -> Result<Child, AgentError> {
        let (child, stdin) = self.spawn_open(request)?;
        drop(stdin);
        Ok(child)
    }

    /// Starts the agent with `request`, keeping its stdin open for more lines.
    fn spawn_open(&self, request: &Value) -> Result<(Child, Option<ChildStdin>), AgentError> {
        let argv = match &self.ssh {
            Some(t) => {
                let _ = std::fs::create_dir_all(&t.control_dir);
                t.argv(&format!("python3 -c \"{BOOT}\""))
            }
            None => vec!["python3".into(), "-c".into(), BOOT.into()],
        };
        let env = crate::sandbox_env(&["SSH_AUTH_SOCK".to_string()], &[]);
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .envs(env)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| AgentError::Failed {
                host: self.host(),
                detail: format!("cannot start `{}`: {e}", argv[0]),
            })?;
        let line = json!({"agent": AGENT_PY, "request": request}).to_string() + "\n";
        let mut stdin = child.stdin.take();
        if let Some(s) = stdin.as_mut() {
            // A write error shows up as the agent's exit.
            let _ = s.write_all(line.as_bytes());
        }
        Ok((child, stdin))
    }

    /// A request with a single answer, within `timeout`.
    pub fn call(&self, request: &Value, timeout: Duration) -> Result<Value, AgentError> {
        let mut answers = Vec::new();
        self.stream(request, Some(timeout), &mut |v| answers.push(v), &|| false)?;
        let host = self.host();
        let answer =
            answers.pop().ok_or_else(|| AgentError::Failed { host: host.clone(), detail: "no answer".into() })?;
        if let Some(e) = answer.get("error").and_then(Value::as_str) {
            return Err(AgentError::Failed { host, detail: e.to_string() });
        }
        Ok(answer)
    }

    /// Runs a request, passing each answer line to `on_line` as it arrives. `stop` is polled; when it
    /// says so the connection is closed (the agent's work on the target is not affected).
    fn stream(
        &self,
        request: &Value,
        timeout: Option<Duration>,
        on_line: &mut dyn FnMut(Value),
        stop: &dyn Fn() -> bool,
    ) -> Result<Streamed, AgentError> {
        let started = Instant::now();
        let mut child = self.spawn(request)?;
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
                Ok(Some(line)) => match serde_json::from_str::<Value>(&line) {
                    Ok(v) => on_line(v),
                    // The login shell may print before the agent runs: only JSON lines are answers.
                    Err(_) => continue,
                },
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

    /// Launches a step (`op: run`) and follows it to its end. `on_identity` is called with the
    /// launch's identity as soon as the agent reports it, before anything else is awaited. On an
    /// SSH target it goes through the target's serving agent (one per transport, started on first
    /// need): no new ssh session or Python start per step.
    pub fn run_step(
        &self,
        request: &Value,
        on_identity: &mut dyn FnMut(&Value),
        stop: &dyn Fn() -> bool,
    ) -> Result<StepEnd, AgentError> {
        match self.session() {
            Some(session) => session.run(request, on_identity, stop, &self.host()),
            None => self.follow(request, on_identity, stop),
        }
    }

    /// The serving agent of this SSH transport, started if none is alive; `None` locally, or if
    /// it cannot start (the one-shot path then reports why).
    fn session(&self) -> Option<Arc<Session>> {
        let t = self.ssh.as_ref()?;
        let key = format!("{}#{}", t.label(), t.control_tag);
        let mut sessions = SESSIONS.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = sessions.get(&key)
            && s.alive.load(Ordering::SeqCst)
        {
            return Some(s.clone());
        }
        let session = Arc::new(Session::start(self)?);
        sessions.insert(key, session.clone());
        Some(session)
    }

    /// Re-attaches to a recorded launch (`op: wait`) and follows it to its end.
    pub fn wait_step(&self, request: &Value, stop: &dyn Fn() -> bool) -> Result<StepEnd, AgentError> {
        self.follow(request, &mut |_| {}, stop)
    }

    fn follow(
        &self,
        request: &Value,
        on_identity: &mut dyn FnMut(&Value),
        stop: &dyn Fn() -> bool,
    ) -> Result<StepEnd, AgentError> {
        let mut end = None;
        let mut error = None;
        let streamed = self.stream(
            request,
            None,
            &mut |v| {
                if let Some(id) = v.get("identity") {
                    on_identity(id);
                } else if let Some(rec) = v.get("exit") {
                    end = Some(StepEnd::Ended { record: rec.clone() });
                } else if let Some(m) = v.get("mismatch").and_then(Value::as_str) {
                    end = Some(StepEnd::Mismatch(m.to_string()));
                } else if let Some(m) = v.get("lost").and_then(Value::as_str) {
                    end = Some(StepEnd::Lost(m.to_string()));
                } else if let Some(e) = v.get("error").and_then(Value::as_str) {
                    error = Some(e.to_string());
                }
            },
            stop,
        );
        match streamed {
            Ok(Streamed::Stopped) => return Ok(end.unwrap_or(StepEnd::Detached)),
            Ok(Streamed::Exited) => {}
            Err(AgentError::Connection(e)) if end.is_none() => return Ok(StepEnd::Dropped(e.to_string())),
            Err(AgentError::Failed { detail, .. }) if end.is_none() && error.is_none() => {
                return Ok(StepEnd::Dropped(detail));
            }
            Err(e) => return Err(e),
        }
        if let Some(e) = error {
            return Err(AgentError::Failed { host: self.host(), detail: e });
        }
        Ok(end.unwrap_or_else(|| StepEnd::Dropped("the agent ended without reporting the step's end".into())))
    }
}

/// Serving agents, one per SSH transport (its label and configuration tag).
static SESSIONS: LazyLock<Mutex<HashMap<String, Arc<Session>>>> = LazyLock::new(Default::default);

/// How long a serving agent may take to say it serves.
const SESSION_START: Duration = Duration::from_secs(30);

/// A serving agent (`op: serve`) on one target: requests go down its stdin with an id, answers
/// come back on its stdout with that id and are routed to whoever waits for them.
struct Session {
    stdin: Mutex<ChildStdin>,
    routes: Arc<Mutex<HashMap<u64, mpsc::Sender<Value>>>>,
    alive: Arc<AtomicBool>,
    next: AtomicU64,
    /// Kept so the ssh client is reaped when the session is dropped.
    _child: Mutex<Child>,
}

impl Session {
    fn start(agent: &Agent) -> Option<Session> {
        let (mut child, stdin) = agent.spawn_open(&json!({"op": "serve"})).ok()?;
        let stdin = stdin?;
        let stdout = child.stdout.take()?;
        if let Some(mut err) = child.stderr.take() {
            // Drained so the agent never blocks on a full pipe; its stderr is not an answer.
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut err, &mut std::io::sink());
            });
        }
        let routes: Arc<Mutex<HashMap<u64, mpsc::Sender<Value>>>> = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let (ready_tx, ready_rx) = mpsc::channel();
        let (r, a) = (routes.clone(), alive.clone());
        std::thread::Builder::new()
            .name("cairn-agent-session".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
                    if v.get("serving").is_some() {
                        let _ = ready_tx.send(());
                        continue;
                    }
                    let Some(id) = v.get("id").and_then(Value::as_u64) else { continue };
                    let routes = r.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some(tx) = routes.get(&id) {
                        let _ = tx.send(v);
                    }
                }
                a.store(false, Ordering::SeqCst);
                // Every follower sees its channel close: the connection dropped.
                r.lock().unwrap_or_else(PoisonError::into_inner).clear();
            })
            .ok()?;
        if ready_rx.recv_timeout(SESSION_START).is_err() {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        Some(Session { stdin: Mutex::new(stdin), routes, alive, next: AtomicU64::new(1), _child: Mutex::new(child) })
    }

    fn run(
        &self,
        request: &Value,
        on_identity: &mut dyn FnMut(&Value),
        stop: &dyn Fn() -> bool,
        host: &str,
    ) -> Result<StepEnd, AgentError> {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel();
        self.routes.lock().unwrap_or_else(PoisonError::into_inner).insert(id, tx);
        let forget = || {
            self.routes.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
        };
        let mut req = request.clone();
        req["id"] = json!(id);
        let line = req.to_string() + "\n";
        let written = self.stdin.lock().unwrap_or_else(PoisonError::into_inner).write_all(line.as_bytes());
        if let Err(e) = written {
            forget();
            self.alive.store(false, Ordering::SeqCst);
            return Ok(StepEnd::Dropped(format!("the agent session on {host} ended: {e}")));
        }
        loop {
            if stop() {
                forget();
                return Ok(StepEnd::Detached);
            }
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(v) => {
                    if let Some(ident) = v.get("identity") {
                        on_identity(ident);
                    } else if let Some(rec) = v.get("exit") {
                        forget();
                        return Ok(StepEnd::Ended { record: rec.clone() });
                    } else if let Some(e) = v.get("error").and_then(Value::as_str) {
                        forget();
                        return Err(AgentError::Failed { host: host.to_string(), detail: e.to_string() });
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Ok(StepEnd::Dropped(format!("the agent session on {host} ended")));
                }
            }
        }
    }
}

enum Streamed {
    Exited,
    Stopped,
}

/// The supervisor's record of an ended step, as `classify_recorded` takes it. For a controller
/// that exited 0, its report (outputs under `results/`, progress, lock state) is the result.
pub fn recorded_end(record: &Value, controller: bool) -> crate::RecordedEnd {
    use base64::Engine as _;
    let int = |k: &str| record.get(k).and_then(Value::as_i64).map(|v| v as i32);
    let flag = |k: &str| record.get(k).and_then(Value::as_bool).unwrap_or(false);
    let mut end = crate::RecordedEnd {
        exit_code: int("exit_code"),
        signal: int("signal"),
        timed_out: flag("timed_out"),
        killed_after_grace: flag("killed_after_grace"),
        error: record.get("error").and_then(Value::as_str).map(String::from),
        stdout: record
            .get("stdout_b64")
            .and_then(Value::as_str)
            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
            .unwrap_or_default(),
        stdout_bytes: record.get("stdout_bytes").and_then(Value::as_u64).unwrap_or(0),
        stderr_tail: record.get("stderr_tail").and_then(Value::as_str).unwrap_or_default().to_string(),
    };
    if let Some(state) = record.get("slurm_state").and_then(Value::as_str)
        && end.exit_code.is_none()
        && end.signal.is_none()
        && end.error.is_none()
    {
        end.error = Some(if end.timed_out {
            format!("its Slurm job ended {state} (the time limit) before the tool recorded its end")
        } else {
            format!("its Slurm job ended {state} before the tool recorded its end")
        });
    }
    if controller && end.exit_code == Some(0) && !end.timed_out {
        let report = record.get("controller").cloned().unwrap_or(Value::Null);
        end.stdout = report.to_string().into_bytes();
        end.stdout_bytes = end.stdout.len() as u64;
    }
    end
}

/// One file for the agent's `deploy`: its path under run_dir, content, checksum and mode.
pub fn deploy_file(path: &str, bytes: &[u8], mode: u32) -> Value {
    use base64::Engine as _;
    json!({
        "path": path,
        "b64": base64::engine::general_purpose::STANDARD.encode(bytes),
        "sha256": cairn_core::canonical::sha256_hex(bytes),
        "mode": mode,
    })
}
