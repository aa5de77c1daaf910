//! The CLI's side of the daemon: find it (starting it on first need), call its HTTP API with the
//! Operator token, follow a run's event stream.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use crate::presence::{self, StartOptions};
use crate::wire::Followed;
use crate::{Failure, auth};

/// An auto-started daemon exits after this long with nothing to do; `cairn daemon start` starts
/// one that stays.
pub const AUTO_IDLE_EXIT: Duration = Duration::from_secs(15 * 60);

/// Every request says it comes from the CLI, so the audit records that channel.
const CHANNEL: &str = crate::wire::CHANNEL_HEADER;

/// `CAIRN_URL`: another daemon to talk to (a lab's shared one) instead of this state root's.
fn daemon_url() -> Option<String> {
    std::env::var("CAIRN_URL").ok().map(|u| u.trim().trim_end_matches('/').to_string()).filter(|u| !u.is_empty())
}

/// `CAIRN_TOKEN`, or the contents of the file `CAIRN_TOKEN_FILE` names: a principal's token to
/// act as, instead of the state root's owner.
pub fn principal_token() -> Result<Option<String>, Failure> {
    if let Some(t) = std::env::var("CAIRN_TOKEN").ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty()) {
        return Ok(Some(t));
    }
    let Some(path) = std::env::var_os("CAIRN_TOKEN_FILE").filter(|p| !p.is_empty()) else { return Ok(None) };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Failure::usage(format!("CAIRN_TOKEN_FILE {}: cannot read it: {e}", Path::new(&path).display())))?;
    let token = text.trim().to_string();
    if token.is_empty() {
        return Err(Failure::usage(format!("CAIRN_TOKEN_FILE {} is empty", Path::new(&path).display())));
    }
    Ok(Some(token))
}

/// The HTTP client of every caller of the daemon's API: statuses are answers, not errors.
pub fn http_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(5)))
        .build()
        .into()
}

#[derive(Clone)]
pub struct Client {
    base: String,
    token: String,
    agent: ureq::Agent,
}

/// An HTTP answer: status and JSON body.
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Answer {
    /// The body as the wire type `T` when the status is `status`; else the failure it answered.
    pub fn decode<T: serde::de::DeserializeOwned>(self, status: u16, what: &str) -> Result<T, Failure> {
        if self.status != status {
            return Err(failure_of(&self));
        }
        serde_json::from_value(self.body)
            .map_err(|e| Failure::of_answer(500, "internal", format!("{what} answered an unexpected body: {e}")))
    }
}

impl Client {
    /// Connects to the daemon of `root` (starting it, detached with an idle exit, if none runs)
    /// as its owner; or, with `CAIRN_URL` and/or `CAIRN_TOKEN` set, to that daemon as that
    /// principal.
    pub fn connect(root: &Path) -> Result<Client, Failure> {
        let (base, token) = Client::endpoint(root, auth::Role::Operator)?;
        Ok(Client { base, token, agent: http_agent() })
    }

    /// The daemon of `root` if one runs (none is started).
    pub fn if_running(root: &Path) -> Option<Client> {
        if let Some(url) = daemon_url() {
            let token = principal_token().ok()??;
            return Some(Client { base: url, token, agent: http_agent() });
        }
        let info = presence::running(root)?;
        let token = match principal_token().ok()? {
            Some(t) => t,
            None => auth::read_token(root, auth::Role::Operator).ok()??,
        };
        Some(Client { base: info.url, token, agent: http_agent() })
    }

    /// The URL of the daemon of `root` (started if none runs) and the token of `role`; or, with
    /// `CAIRN_URL` set, that daemon's, and with `CAIRN_TOKEN` set, that token.
    pub fn endpoint(root: &Path, role: auth::Role) -> Result<(String, String), Failure> {
        let principal = principal_token()?;
        if let Some(url) = daemon_url() {
            let token = principal.ok_or_else(|| {
                Failure::usage(
                    "CAIRN_URL names another daemon: set CAIRN_TOKEN (or CAIRN_TOKEN_FILE) to the token its admin gave you with `cairn user add`",
                )
            })?;
            return Ok((url, token));
        }
        let info = match presence::running(root) {
            Some(info) => {
                if !info.build.is_empty() && info.build != presence::build_id() {
                    eprintln!(
                        "note: the running daemon (pid {}) is another build of cairn than this command; \
                         `cairn daemon stop` and run again to use this one",
                        info.pid
                    );
                }
                info
            }
            None => {
                let (info, started) =
                    presence::start(root, &StartOptions { idle_exit: Some(AUTO_IDLE_EXIT), ..Default::default() })?;
                if started && std::env::var_os("CAIRN_QUIET_DAEMON").is_none() {
                    eprintln!("started the cairn daemon (pid {}, {})", info.pid, info.url);
                }
                info
            }
        };
        if let Some(token) = principal {
            return Ok((info.url, token));
        }
        let token = auth::read_token(root, role)?.ok_or_else(|| {
            Failure::usage(format!(
                "the daemon runs but {} is missing; stop it with `cairn daemon stop` and start it again",
                auth::token_path(root, role).display()
            ))
        })?;
        Ok((info.url, token))
    }

    fn auth(&self) -> String {
        format!("Bearer {}", self.token)
    }

    /// `method path` with an optional JSON body (for `PUT` and `DELETE`).
    pub fn send(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Answer, Failure> {
        let url = format!("{}{path}", self.base);
        let sent = match (method, body) {
            ("PUT", Some(b)) => {
                self.agent.put(&url).header("Authorization", self.auth()).header(CHANNEL, "cli").send_json(b)
            }
            ("DELETE", _) => self.agent.delete(&url).header("Authorization", self.auth()).header(CHANNEL, "cli").call(),
            ("GET", _) => return self.get(path),
            (_, b) => return self.post(path, b.unwrap_or(&Value::Null)),
        };
        answer(sent.map_err(|e| unreachable_daemon(&self.base, e))?)
    }

    pub fn post(&self, path: &str, body: &Value) -> Result<Answer, Failure> {
        let resp = self
            .agent
            .post(format!("{}{path}", self.base))
            .header("Authorization", self.auth())
            .header(CHANNEL, "cli")
            .send_json(body)
            .map_err(|e| unreachable_daemon(&self.base, e))?;
        answer(resp)
    }

    /// POSTs asking for JSON lines (`Accept: application/x-ndjson`): the lines as they come, or,
    /// when the daemon answers otherwise (a refusal), that answer.
    pub fn post_lines(&self, path: &str, body: &Value) -> Result<Result<Box<dyn BufRead + Send>, Answer>, Failure> {
        let resp = self
            .agent
            .post(format!("{}{path}", self.base))
            .header("Authorization", self.auth())
            .header(CHANNEL, "cli")
            .header("Accept", "application/x-ndjson")
            .send_json(body)
            .map_err(|e| unreachable_daemon(&self.base, e))?;
        let lines = resp.status().as_u16() == 200
            && resp
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/x-ndjson"));
        if !lines {
            return Ok(Err(answer(resp)?));
        }
        Ok(Ok(Box::new(BufReader::new(resp.into_body().into_reader()))))
    }

    pub fn get(&self, path: &str) -> Result<Answer, Failure> {
        let resp = self
            .agent
            .get(format!("{}{path}", self.base))
            .header("Authorization", self.auth())
            .header(CHANNEL, "cli")
            .call()
            .map_err(|e| unreachable_daemon(&self.base, e))?;
        answer(resp)
    }

    /// Streams a run's events (Server-Sent Events) on a thread: each event arrives on the
    /// returned channel; the channel closes after the run's last event or when the stream ends.
    pub fn follow(&self, run_id: &str, after: i64) -> Result<mpsc::Receiver<Followed>, Failure> {
        let resp = self
            .agent
            .get(format!("{}/runs/{run_id}/events?follow=true&after={after}", self.base))
            .header("Authorization", self.auth())
            .header(CHANNEL, "cli")
            .header("Accept", "text/event-stream")
            .call()
            .map_err(|e| unreachable_daemon(&self.base, e))?;
        if resp.status().as_u16() != 200 {
            let a = answer(resp)?;
            return Err(failure_of(&a));
        }
        let (tx, rx) = mpsc::channel();
        let reader = BufReader::new(resp.into_body().into_reader());
        std::thread::Builder::new()
            .name("cairn-follow".into())
            .spawn(move || {
                for line in reader.lines() {
                    let Ok(line) = line else { break };
                    let Some(item) = Followed::of_sse_line(&line) else { continue };
                    let done = matches!(&item, Followed::Event(e) if e.event().is_some_and(|e| e.ends_run()));
                    if tx.send(item).is_err() || done {
                        break;
                    }
                }
            })
            .map_err(|e| Failure::usage(format!("cannot start a thread to follow the run: {e}")))?;
        Ok(rx)
    }
}

fn answer(mut resp: ureq::http::Response<ureq::Body>) -> Result<Answer, Failure> {
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_json::<Value>()
        .map_err(|e| Failure::usage(format!("the daemon answered {status} with a body that is not JSON: {e}")))?;
    Ok(Answer { status, body })
}

fn unreachable_daemon(base: &str, e: ureq::Error) -> Failure {
    Failure::unavailable(
        "daemon_unreachable",
        format!("cannot reach the cairn daemon at {base}: {e}; see `cairn daemon status`"),
    )
}

/// The CLI's failure for an error answer, with the exit code its wire code maps to.
pub fn failure_of(a: &Answer) -> Failure {
    match serde_json::from_value::<crate::wire::ErrorBody>(a.body.clone()) {
        Ok(body) => Failure::of_answer(a.status, &body.error.code, body.error.message),
        // Not the API's error body (a proxy's page?): shown as it came.
        Err(_) => Failure::of_answer(a.status, "", a.body.to_string()),
    }
}
