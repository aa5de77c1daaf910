//! Progress of a long tool call, for a caller that sent a `progressToken`: `notifications/progress`
//! with steps done of total for a run (and, while a Snakemake step runs, its pipeline's jobs
//! done of total in the message and as the fraction of that step), and cells done of total for a
//! verification. A run's progress is folded from its events ([`cairn_core::progress`]) as the
//! daemon's run follower streams them.

use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext};

use crate::wire::{VerifyCellStatus, VerifyResult};

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

impl Progress {
    /// Tells `message` (a run began or ended a wait for its environment) without news of done
    /// work: MCP requires each notification's progress to grow, so it grows by a thousandth.
    pub async fn say(&mut self, total: Option<f64>, message: String) {
        let next = self.last.unwrap_or(0.0) + 0.001;
        self.report(next, total, message).await;
    }
}

/// What a verification in progress has done: its cells ended of its code cells.
pub fn cells(title: Option<&str>, done: usize, total: usize) -> (f64, f64, String) {
    let title = title.filter(|t| !t.is_empty()).unwrap_or("the document");
    (done as f64, total as f64, format!("{title}: {done} of {total} cells done"))
}

/// What a verification's verdict says of its cells: those that ran of all its code cells.
pub fn ended_cells(result: &VerifyResult) -> (f64, f64, String) {
    let cells = &result.cells;
    let ran = cells.iter().filter(|c| c.status != VerifyCellStatus::Skipped).count();
    let (title, verdict) = (&result.title, result.verdict);
    (ran as f64, cells.len() as f64, format!("{title}: {ran} of {} cells done, {verdict}", cells.len()))
}
