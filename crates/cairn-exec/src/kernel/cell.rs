//! Running one cell: a single execute_request, its iopub messages folded into outputs (see
//! `outputs`) until the reply and the kernel's idle, and its end told apart: a reply, the
//! kernel's death, the timeout (SIGINT, a grace, then the kill) or a lost socket.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use jupyter_protocol::{ExecuteRequest, JupyterMessage};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::sleep_until;

use super::client::{Channels, exited, recv_iopub, recv_shell};
use super::{ExitInfo, OutputCollector, OutputLimits, ScratchKernel, later};

/// How long after the execute reply we still wait for the kernel's `idle` (and the outputs
/// before it); the wait restarts with every iopub message of the request.
const IDLE_AFTER_REPLY: Duration = Duration::from_millis(300);

/// After the kernel died, how long to keep draining output it sent just before.
const DRAIN_AFTER_DEATH: Duration = Duration::from_millis(10);

/// How one cell ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CellStatus {
    Ok,
    /// The code raised (or the request was aborted: `ename` "ExecutionAborted").
    Error {
        ename: String,
        evalue: String,
        traceback: Vec<String>,
    },
    /// The kernel process ended while the cell ran (or before it was sent).
    Died {
        exit_code: Option<i32>,
        signal: Option<i32>,
    },
    /// The cell exceeded its timeout; it was interrupted and then its process group was killed.
    TimedOut,
    /// The kernel's process lives but its sockets failed; it was killed. `reason` says what failed.
    Lost {
        reason: String,
    },
    /// [`KernelHandle::kill`] stopped the kernel while the cell ran.
    Cancelled,
}

/// What one execute request produced.
#[derive(Debug, Clone)]
pub struct CellRun {
    pub status: CellStatus,
    /// nbformat v4 output dicts (stream merged per name, display_data, execute_result, error),
    /// `transient` stripped, capped with visible markers.
    pub outputs: Vec<Value>,
    pub execution_count: Option<u32>,
    /// From sending the request to the cell's end (reply and idle, death, or the kill).
    pub duration: Duration,
}

impl ScratchKernel {
    /// Runs one cell: a single execute_request (allow_stdin=false, store_history=true,
    /// stop_on_error=true). `on_output` sees each output as it arrives (stream fragments
    /// unmerged). Never panics on kernel behaviour; after `Died`, `TimedOut` or `Lost` the kernel
    /// is gone and later calls return `Died` at once. On timeout the kernel's group gets SIGINT,
    /// then after `interrupt_grace` SIGKILL, whether or not the interrupt worked: a scratch kernel
    /// that overran is not reused.
    pub fn execute(&mut self, code: &str, timeout: Duration, on_output: &mut dyn FnMut(&Value)) -> CellRun {
        self.execute_as(code, timeout, false, on_output)
    }

    /// Runs code the notebook does not show: `silent=true`, `store_history=false`, so the
    /// execution count does not advance, `In`/`Out`/`_i` are untouched and no result is
    /// displayed. Otherwise as [`ScratchKernel::execute`] (an error is still reported).
    pub fn execute_silent(&mut self, code: &str, timeout: Duration) -> CellRun {
        self.execute_as(code, timeout, true, &mut |_| {})
    }

    fn execute_as(
        &mut self,
        code: &str,
        timeout: Duration,
        silent: bool,
        on_output: &mut dyn FnMut(&Value),
    ) -> CellRun {
        let started = Instant::now();
        if let Some(exit) = self.exit_info() {
            self.kill();
            return CellRun {
                status: died(self.reaped.unwrap_or(exit)),
                outputs: Vec::new(),
                execution_count: None,
                duration: started.elapsed(),
            };
        }
        let Some(channels) = self.channels.as_mut() else {
            self.kill();
            return CellRun {
                status: died(self.reaped.unwrap_or(ExitInfo { exit_code: None, signal: None })),
                outputs: Vec::new(),
                execution_count: None,
                duration: started.elapsed(),
            };
        };
        let ctx = CellContext { pgid: self.pid as i32, timeout, grace: self.grace, limits: self.limits, silent };
        let mut exit_rx = self.exit_rx.clone();
        let (end, outputs, execution_count) =
            self.rt.block_on(run_cell(channels, &mut exit_rx, &ctx, code, started, on_output));
        let status = match end {
            CellEnd::Reply(status) => status,
            CellEnd::Died if self.shared.cancelled.load(Ordering::SeqCst) => {
                self.kill();
                CellStatus::Cancelled
            }
            CellEnd::Died => {
                self.kill();
                died(self.reaped.or(*self.exit_rx.borrow()).unwrap_or(ExitInfo { exit_code: None, signal: None }))
            }
            CellEnd::TimedOut => {
                self.kill();
                CellStatus::TimedOut
            }
            CellEnd::Lost(reason) => {
                self.kill();
                CellStatus::Lost { reason }
            }
        };
        CellRun { status, outputs, execution_count, duration: started.elapsed() }
    }
}

fn died(exit: ExitInfo) -> CellStatus {
    CellStatus::Died { exit_code: exit.exit_code, signal: exit.signal }
}

struct CellContext {
    pgid: i32,
    timeout: Duration,
    grace: Duration,
    limits: OutputLimits,
    silent: bool,
}

enum CellEnd {
    Reply(CellStatus),
    Died,
    TimedOut,
    Lost(String),
}

fn status_from_reply(reply: &Value, outputs_error: Option<&Value>) -> CellStatus {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    match reply.get("status").and_then(Value::as_str) {
        Some("ok") => CellStatus::Ok,
        Some("aborted") => CellStatus::Error {
            ename: "ExecutionAborted".into(),
            evalue: "the kernel aborted the request (an earlier request failed)".into(),
            traceback: Vec::new(),
        },
        other => {
            // Prefer the reply's fields; fall back to the error output.
            let src = if reply.get("ename").is_some() { reply } else { outputs_error.unwrap_or(reply) };
            CellStatus::Error {
                ename: s(src, "ename").unwrap_or_else(|| format!("KernelReply({})", other.unwrap_or("missing"))),
                evalue: s(src, "evalue").unwrap_or_default(),
                traceback: src
                    .get("traceback")
                    .and_then(Value::as_array)
                    .map(|t| t.iter().filter_map(Value::as_str).map(str::to_string).collect())
                    .unwrap_or_default(),
            }
        }
    }
}

async fn run_cell(
    ch: &mut Channels,
    exit_rx: &mut watch::Receiver<Option<ExitInfo>>,
    ctx: &CellContext,
    code: &str,
    started: Instant,
    on_output: &mut dyn FnMut(&Value),
) -> (CellEnd, Vec<Value>, Option<u32>) {
    let mut collector = OutputCollector::new(ctx.limits);
    let request = ExecuteRequest {
        code: code.to_string(),
        silent: ctx.silent,
        store_history: !ctx.silent,
        user_expressions: None,
        allow_stdin: false,
        stop_on_error: true,
    };
    let msg = JupyterMessage::new(request, None);
    let id = msg.header.msg_id.clone();
    if let Err(e) = ch.shell.send(msg).await {
        // A failed send is most often a kernel that just died: give the waiter a moment.
        let waited = tokio::time::timeout(Duration::from_secs(1), exited(exit_rx)).await;
        let end =
            if waited.is_ok() { CellEnd::Died } else { CellEnd::Lost(format!("sending the request failed: {e}")) };
        return (end, collector.finish(), None);
    }

    let mut deadline = tokio::time::Instant::from_std(later(started, ctx.timeout));
    let mut interrupted = false;
    let mut reply: Option<Value> = None;
    let mut idle = false;
    let mut execution_count: Option<u32> = None;
    let mut last_iopub = tokio::time::Instant::now();
    let mut error_output: Option<Value> = None;
    // A socket that errored is retried after a pause instead of spinning on it.
    let mut iopub_retry: Option<tokio::time::Instant> = None;
    let mut shell_retry: Option<tokio::time::Instant> = None;

    let end = loop {
        if reply.is_some() && idle {
            break None;
        }
        let now = tokio::time::Instant::now();
        if iopub_retry.is_some_and(|t| t <= now) {
            iopub_retry = None;
        }
        if shell_retry.is_some_and(|t| t <= now) {
            shell_retry = None;
        }
        let mut wake = deadline;
        if reply.is_some() {
            wake = wake.min(last_iopub.max(now) + IDLE_AFTER_REPLY);
        }
        for t in [iopub_retry, shell_retry].into_iter().flatten() {
            wake = wake.min(t);
        }
        tokio::select! {
            biased;
            _ = exited(exit_rx) => break Some(CellEnd::Died),
            m = recv_iopub(&mut ch.iopub), if iopub_retry.is_none() => match m {
                Ok(Some(m)) if m.parent_id.as_deref() == Some(id.as_str()) => {
                    last_iopub = tokio::time::Instant::now();
                    match m.msg_type.as_str() {
                        "status" => {
                            if m.content.get("execution_state").and_then(Value::as_str) == Some("idle") {
                                idle = true;
                            }
                        }
                        "execute_input" => {
                            if execution_count.is_none() {
                                execution_count = count_of(&m.content);
                            }
                        }
                        t => {
                            if t == "error" {
                                error_output = Some(m.content.clone());
                            }
                            if let Some(shown) = collector.handle(t, &m.content) {
                                on_output(&shown);
                            }
                        }
                    }
                }
                Ok(_) => {}
                Err(_) => iopub_retry = Some(tokio::time::Instant::now() + Duration::from_millis(20)),
            },
            m = recv_shell(&mut ch.shell), if shell_retry.is_none() => match m {
                Ok(Some(m)) if m.msg_type == "execute_reply" && m.parent_id.as_deref() == Some(id.as_str()) => {
                    if let Some(n) = count_of(&m.content) {
                        execution_count = Some(n);
                    }
                    reply = Some(m.content);
                    last_iopub = tokio::time::Instant::now();
                }
                Ok(_) => {}
                Err(_) => shell_retry = Some(tokio::time::Instant::now() + Duration::from_millis(20)),
            },
            _ = sleep_until(wake) => {
                let now = tokio::time::Instant::now();
                if reply.is_some() && now >= last_iopub + IDLE_AFTER_REPLY {
                    // The idle was lost (iopub drops messages under a flood): the reply ends it.
                    break None;
                }
                if now >= deadline {
                    if interrupted {
                        break Some(CellEnd::TimedOut);
                    }
                    interrupted = true;
                    let _ = killpg(Pid::from_raw(ctx.pgid), Signal::SIGINT);
                    deadline = tokio::time::Instant::from_std(later(now.into_std(), ctx.grace));
                }
            }
        }
    };
    let end = match end {
        Some(CellEnd::Died) => {
            drain(ch, &id, &mut collector, on_output).await;
            CellEnd::Died
        }
        Some(e) => e,
        None if interrupted => CellEnd::TimedOut,
        None => CellEnd::Reply(status_from_reply(reply.as_ref().unwrap_or(&Value::Null), error_output.as_ref())),
    };
    (end, collector.finish(), execution_count)
}

/// Output the kernel sent just before it died may still be queued: take what is there.
async fn drain(ch: &mut Channels, id: &str, collector: &mut OutputCollector, on_output: &mut dyn FnMut(&Value)) {
    let until = tokio::time::Instant::now() + DRAIN_AFTER_DEATH;
    loop {
        match tokio::time::timeout_at(until, recv_iopub(&mut ch.iopub)).await {
            Ok(Ok(Some(m))) => {
                if m.parent_id.as_deref() == Some(id)
                    && let Some(shown) = collector.handle(&m.msg_type, &m.content)
                {
                    on_output(&shown);
                }
            }
            Ok(Ok(None)) => {}
            _ => return,
        }
    }
}

fn count_of(content: &Value) -> Option<u32> {
    content.get("execution_count").and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok())
}
