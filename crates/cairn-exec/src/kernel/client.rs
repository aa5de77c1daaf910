//! The Jupyter client side: connecting to a kernel's sockets once it has bound them, the
//! kernel_info handshake, and receiving its signed messages. The ZeroMQ crates are async; the
//! kernel's private current-thread runtime runs these futures.

use std::path::Path;
use std::time::{Duration, Instant};

use jupyter_protocol::connection_info::ConnectionInfo;
use jupyter_protocol::{JupyterMessage, KernelInfoRequest};
use jupyter_zmq_client::{ClientIoPubConnection, ClientShellConnection, RawMessage};
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::sleep_until;
use zeromq::SocketRecv as _;

use super::ExitInfo;

/// How often start-up checks whether the kernel has bound its sockets.
const BIND_POLL: Duration = Duration::from_millis(5);

/// Start-up re-sends kernel_info_request when no reply arrived within this (the first request
/// may be lost while the sockets connect) or when iopub stayed silent after a reply.
const KERNEL_INFO_RESEND: Duration = Duration::from_millis(500);

pub(super) struct Channels {
    pub(super) shell: ClientShellConnection,
    pub(super) iopub: ClientIoPubConnection,
    endpoint: String,
}

/// One message as received, its content parsed only when it concerns us.
pub(super) struct Incoming {
    pub(super) msg_type: String,
    pub(super) parent_id: Option<String>,
    pub(super) content: Value,
}

pub(super) enum StartFailure {
    Exited,
    Timeout,
    Protocol { endpoint: String, reason: String },
}

/// Decodes a verified message's header, parent and content; `None` for a message that is not a
/// valid signed Jupyter message (it is skipped).
fn decode(raw: Option<RawMessage>) -> Option<Incoming> {
    let raw = raw?;
    let header: Value = serde_json::from_slice(raw.jparts.first()?).ok()?;
    let msg_type = header.get("msg_type")?.as_str()?.to_string();
    let parent: Value = serde_json::from_slice(raw.jparts.get(1)?).unwrap_or(Value::Null);
    let parent_id = parent.get("msg_id").and_then(Value::as_str).map(str::to_string);
    let content = serde_json::from_slice(raw.jparts.get(3)?).unwrap_or(Value::Null);
    Some(Incoming { msg_type, parent_id, content })
}

pub(super) async fn recv_iopub(c: &mut ClientIoPubConnection) -> Result<Option<Incoming>, String> {
    let zmq = c.socket.recv().await.map_err(|e| e.to_string())?;
    Ok(decode(RawMessage::from_multipart(zmq, &c.mac).ok()))
}

pub(super) async fn recv_shell(c: &mut ClientShellConnection) -> Result<Option<Incoming>, String> {
    let zmq = c.socket.recv().await.map_err(|e| e.to_string())?;
    Ok(decode(RawMessage::from_multipart(zmq, &c.mac).ok()))
}

/// Resolves when the kernel has exited (never, if the waiter is gone without a report).
pub(super) async fn exited(rx: &mut watch::Receiver<Option<ExitInfo>>) {
    if rx.wait_for(Option::is_some).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Waits for the kernel to bind, connects, and handshakes with kernel_info.
pub(super) async fn connect(
    info: &ConnectionInfo,
    exit_rx: &mut watch::Receiver<Option<ExitInfo>>,
    deadline: Instant,
) -> Result<(Channels, Value), StartFailure> {
    let deadline = tokio::time::Instant::from_std(deadline);
    let work = async {
        wait_bound(info).await;
        let session = uuid::Uuid::new_v4().to_string();
        let protocol = |endpoint: String| {
            move |e: jupyter_zmq_client::RuntimeError| StartFailure::Protocol { endpoint, reason: e.to_string() }
        };
        let iopub = jupyter_zmq_client::create_client_iopub_connection(info, "", &session)
            .await
            .map_err(protocol(info.iopub_url()))?;
        let identity = jupyter_zmq_client::peer_identity_for_session(&session).map_err(protocol(info.shell_url()))?;
        let shell = jupyter_zmq_client::create_client_shell_connection_with_identity(info, &session, identity)
            .await
            .map_err(protocol(info.shell_url()))?;
        let mut ch = Channels { shell, iopub, endpoint: info.shell_url() };
        let reply = handshake(&mut ch).await?;
        Ok((ch, reply))
    };
    tokio::select! {
        biased;
        _ = exited(exit_rx) => Err(StartFailure::Exited),
        r = work => r,
        _ = sleep_until(deadline) => Err(StartFailure::Timeout),
    }
}

/// Until the kernel has bound all five sockets, so that connecting needs no backoff.
async fn wait_bound(info: &ConnectionInfo) {
    let urls = [info.shell_url(), info.iopub_url(), info.stdin_url(), info.control_url(), info.hb_url()];
    loop {
        let mut all = true;
        for url in &urls {
            let ready = if let Some(path) = url.strip_prefix("ipc://") {
                Path::new(path).exists()
            } else if let Some(addr) = url.strip_prefix("tcp://") {
                tokio::net::TcpStream::connect(addr).await.is_ok()
            } else {
                true
            };
            if !ready {
                all = false;
                break;
            }
        }
        if all {
            return;
        }
        tokio::time::sleep(BIND_POLL).await;
    }
}

/// kernel_info until both a reply on shell and a message on iopub arrived: then iopub is
/// subscribed and no output of the first cell can be lost.
async fn handshake(ch: &mut Channels) -> Result<Value, StartFailure> {
    let mut reply: Option<Value> = None;
    let mut iopub_seen = false;
    loop {
        let msg = JupyterMessage::new(KernelInfoRequest {}, None);
        ch.shell
            .send(msg)
            .await
            .map_err(|e| StartFailure::Protocol { endpoint: ch.endpoint.clone(), reason: e.to_string() })?;
        let resend = tokio::time::Instant::now() + KERNEL_INFO_RESEND;
        loop {
            if let (Some(r), true) = (&reply, iopub_seen) {
                return Ok(r.clone());
            }
            tokio::select! {
                m = recv_shell(&mut ch.shell) => match m {
                    Ok(Some(m)) if m.msg_type == "kernel_info_reply" => reply = Some(m.content),
                    Ok(_) => {}
                    Err(reason) => return Err(StartFailure::Protocol { endpoint: ch.endpoint.clone(), reason }),
                },
                m = recv_iopub(&mut ch.iopub) => match m {
                    Ok(_) => iopub_seen = true,
                    Err(_) => tokio::time::sleep(BIND_POLL).await,
                },
                _ = sleep_until(resend) => break,
            }
        }
    }
}
