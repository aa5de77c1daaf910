//! Progress of a long tool call, for a caller that sent a `progressToken`: `notifications/progress`
//! with steps done of total for a run (and, while a Snakemake step runs, its pipeline's jobs
//! done of total in the message and as the fraction of that step), and cells done of total for a
//! verification. The servers learn it as any client would, by reading the API while they wait.

use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext};
use serde_json::Value;

/// Where a call's progress goes; a call without a `progressToken` gets none.
pub struct Progress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    /// The last progress sent: each notification must be larger (MCP requires it).
    last: Option<f64>,
}

impl Progress {
    pub fn of(ctx: &RequestContext<RoleServer>) -> Option<Progress> {
        ctx.meta.get_progress_token().map(|token| Progress { peer: ctx.peer.clone(), token, last: None })
    }

    /// Sends `progress` of `total` with `message`, if it is more than was sent before.
    pub async fn report(&mut self, progress: f64, total: Option<f64>, message: String) {
        if self.last.is_some_and(|last| progress <= last) {
            return;
        }
        self.last = Some(progress);
        let mut param = ProgressNotificationParam::new(self.token.clone(), progress).with_message(message);
        if let Some(total) = total {
            param = param.with_total(total);
        }
        // A client that has gone away gets no progress; the call itself still answers.
        let _ = self.peer.notify_progress(param).await;
    }
}

/// What a run has done: steps ended (completed, failed or reused) of all its steps, and the
/// pipeline jobs of a running Snakemake step as its events tell them.
#[derive(Debug, Default)]
pub struct RunProgress {
    /// The last event read.
    pub after: i64,
    /// Per running pipeline step: its jobs done and total, from its newest `pipeline.job_finished`.
    jobs: std::collections::BTreeMap<String, (u64, u64)>,
}

impl RunProgress {
    /// Takes in events (`GET /runs/{id}/events?after=`), in order.
    pub fn feed(&mut self, events: &Value) {
        for e in events["events"].as_array().into_iter().flatten() {
            self.after = self.after.max(e["seq"].as_i64().unwrap_or(0));
            if e["kind"] == "pipeline.job_finished"
                && let (Some(step), Some(done), Some(total)) =
                    (e["step_id"].as_str(), e["data"]["done"].as_u64(), e["data"]["total"].as_u64())
            {
                self.jobs.insert(step.to_string(), (done, total));
            }
        }
    }

    /// The progress of `run` (`GET /runs/{id}`): steps ended plus the fraction of the pipeline
    /// jobs of those running, of the steps; and what to tell the person.
    pub fn of(&self, run: &Value) -> (f64, f64, String) {
        let steps = run["steps"].as_array().map(Vec::as_slice).unwrap_or_default();
        let ended = steps.iter().filter(|s| !matches!(s["status"].as_str(), Some("PENDING" | "RUNNING"))).count();
        let mut progress = ended as f64;
        let mut message = format!("{ended} of {} steps done", steps.len());
        for s in steps.iter().filter(|s| s["status"] == "RUNNING") {
            let id = s["step_id"].as_str().unwrap_or_default();
            match self.jobs.get(id) {
                Some(&(done, total)) if total > 0 => {
                    progress += (done.min(total) as f64) / (total as f64) * 0.99;
                    message.push_str(&format!("; {id}: {done} of {total} pipeline jobs done"));
                }
                _ => message.push_str(&format!("; {id} running")),
            }
        }
        (progress, steps.len() as f64, message)
    }
}

/// What a verification in progress has done (`GET /kernel/jobs/{id}`, or its row in the list).
pub fn cells(job: &Value) -> Option<(f64, f64, String)> {
    let (done, total) = (job["cells_done"].as_u64()?, job["cells_total"].as_u64()?);
    let title = job["title"].as_str().unwrap_or("the document");
    Some((done as f64, total as f64, format!("{title}: {done} of {total} cells done")))
}

/// What a verification's verdict says of its cells: those that ran of all its code cells.
pub fn ended_cells(result: &Value) -> Option<(f64, f64, String)> {
    let cells = result["cells"].as_array()?;
    let ran = cells.iter().filter(|c| c["status"] != "skipped").count();
    let title = result["title"].as_str().unwrap_or("the document");
    let verdict = result["verdict"].as_str().unwrap_or("no verdict");
    Some((ran as f64, cells.len() as f64, format!("{title}: {ran} of {} cells done, {verdict}", cells.len())))
}
