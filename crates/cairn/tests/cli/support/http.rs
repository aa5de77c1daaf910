//! Reaching the daemon over HTTP: its address and tokens as the state root records them, and one
//! request with everything the answer carried.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

/// What `<state>/daemon.json` says about the running daemon.
#[derive(Debug, Clone)]
pub struct DaemonInfo {
    pub pid: i32,
    pub url: String,
}

/// The running daemon of the state root `home`, from its `daemon.json`.
#[track_caller]
pub fn daemon_info(home: &Path) -> DaemonInfo {
    let text = std::fs::read_to_string(home.join("daemon.json")).expect("daemon.json (is the daemon running?)");
    let v: Value = serde_json::from_str(&text).unwrap();
    DaemonInfo { pid: v["pid"].as_i64().unwrap() as i32, url: v["url"].as_str().unwrap().to_string() }
}

/// The token of `role` (`viewer` or `operator`) of the state root `home`.
#[track_caller]
pub fn read_token(home: &Path, role: &str) -> String {
    std::fs::read_to_string(home.join("auth").join(format!("{role}.token"))).unwrap().trim().to_string()
}

/// An HTTP answer: its status, its headers (names in lower case), and its body.
#[derive(Debug, Clone)]
pub struct Http {
    pub status: u16,
    pub headers: BTreeMap<String, String>,
    /// JSON when the body parses, else the text as a string.
    pub body: Value,
    pub text: String,
    /// The body's bytes as sent (a zip, say).
    pub bytes: Vec<u8>,
}

impl Http {
    /// A header's value (empty when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }
}

/// A request body: the bytes and the `Content-Type` to send with them (none when `None`).
pub struct Body<'a> {
    pub bytes: Vec<u8>,
    pub content_type: Option<&'a str>,
}

impl Body<'_> {
    pub fn json(v: &Value) -> Body<'static> {
        Body { bytes: serde_json::to_vec(v).unwrap(), content_type: Some("application/json") }
    }
}

/// One HTTP request, with a time limit for the whole exchange (a stream cut by it ends early).
/// `headers` are sent as given (use it for a `Host` override); an HTTP error status is an answer,
/// not a failure.
pub fn request(
    limit: Duration,
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<Body>,
    headers: &[(&str, &str)],
) -> Http {
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(limit)).build().into();
    let mut req = ureq::http::Request::builder().method(method).uri(url);
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    if let Some(ct) = body.as_ref().and_then(|b| b.content_type) {
        req = req.header("Content-Type", ct);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(body.map(|b| b.bytes).unwrap_or_default()).unwrap();
    let mut resp = agent.run(req).unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_ascii_lowercase(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let bytes = resp.body_mut().with_config().limit(64 << 20).read_to_vec().unwrap_or_default();
    let text = String::from_utf8(bytes.clone()).unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.clone()));
    Http { status, headers, body, text, bytes }
}

/// One HTTP request to the daemon (within 30 s), with a JSON body when one is given.
pub fn http(method: &str, url: &str, token: Option<&str>, body: Option<&str>, headers: &[(&str, &str)]) -> Http {
    let body = body.map(|b| Body { bytes: b.as_bytes().to_vec(), content_type: Some("application/json") });
    request(Duration::from_secs(30), method, url, token, body, headers)
}
