//! The serving agent: one long-lived `serve` agent per SSH transport, so a step there costs no
//! new ssh session or Python start. Requests go down its stdin with an id; the replies that carry
//! that id are routed back to whoever follows the launch, and read by the same `follow_reply` as
//! a one-shot request's.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, mpsc};
use std::time::Duration;

use super::protocol::{Envelope, PROTOCOL, Reply, ReplyError, Request, decode_line};
use super::{Agent, AgentError, Identity, StepEnd, follow_reply};

/// Serving agents, one per SSH transport (its label and configuration tag).
static SESSIONS: LazyLock<Mutex<HashMap<String, Arc<Session>>>> = LazyLock::new(Default::default);

/// How long a serving agent may take to say it serves.
const SESSION_START: Duration = Duration::from_secs(30);

type Routes = Arc<Mutex<HashMap<u64, mpsc::Sender<Result<Reply, ReplyError>>>>>;

/// A serving agent (`serve`) on one target.
pub(super) struct Session {
    stdin: Mutex<ChildStdin>,
    routes: Routes,
    alive: Arc<AtomicBool>,
    next: AtomicU64,
    /// Kept so the ssh client is reaped when the session is dropped.
    _child: Mutex<Child>,
}

impl Agent {
    /// The serving agent of this SSH transport, started if none is alive; `None` locally, or if
    /// it cannot start (the one-shot path then reports why).
    pub(super) fn session(&self) -> Option<Arc<Session>> {
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
}

impl Session {
    fn start(agent: &Agent) -> Option<Session> {
        let (mut child, stdin) = agent.spawn_open(&Envelope::new(&Request::Serve)).ok()?;
        let stdin = stdin?;
        let stdout = child.stdout.take()?;
        if let Some(mut err) = child.stderr.take() {
            // Drained so the agent never blocks on a full pipe; its stderr is not an answer.
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut err, &mut std::io::sink());
            });
        }
        let routes: Routes = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        // Whether the first reply without an id said the agent serves (a refusal says it won't).
        let (ready_tx, ready_rx) = mpsc::channel::<bool>();
        let (r, a) = (routes.clone(), alive.clone());
        std::thread::Builder::new()
            .name("cairn-agent-session".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let Some(line) = decode_line(&line) else { continue };
                    let Some(id) = line.id else {
                        let _ = ready_tx.send(matches!(line.reply, Ok(Reply::Serving(_))));
                        continue;
                    };
                    let routes = r.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some(tx) = routes.get(&id) {
                        let _ = tx.send(line.reply);
                    }
                }
                a.store(false, Ordering::SeqCst);
                // Every follower sees its channel close: the connection dropped.
                r.lock().unwrap_or_else(PoisonError::into_inner).clear();
            })
            .ok()?;
        if ready_rx.recv_timeout(SESSION_START) != Ok(true) {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        Some(Session { stdin: Mutex::new(stdin), routes, alive, next: AtomicU64::new(1), _child: Mutex::new(child) })
    }

    pub(super) fn run(
        &self,
        request: &Request,
        on_identity: &mut dyn FnMut(&Identity),
        stop: &dyn Fn() -> bool,
        host: &str,
    ) -> Result<StepEnd, AgentError> {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel();
        self.routes.lock().unwrap_or_else(PoisonError::into_inner).insert(id, tx);
        let forget = || {
            self.routes.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
        };
        let line = match serde_json::to_string(&Envelope { protocol: PROTOCOL, id: Some(id), body: request }) {
            Ok(line) => line + "\n",
            Err(e) => {
                forget();
                let detail = format!("cannot encode the request: {e}");
                return Err(AgentError::Failed { host: host.to_string(), detail });
            }
        };
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
                Ok(reply) => {
                    if let Some(end) = follow_reply(reply, host, request.op(), on_identity) {
                        forget();
                        return end;
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
