//! Following the registry as it is written: the one way every surface watches a run (the API's
//! event and run-list streams, which the CLI, the MCP servers and the web app read).
//!
//! Each committed write of this process's engine bumps [`Commits`], so a follower wakes the
//! moment something it may want exists. Writes of *other* processes (an `--in-process` run, a
//! second daemon on a shared PostgreSQL registry) bump nothing here, so a follower also looks
//! every [`OTHER_WRITERS_EVERY`]: the only timer left, and only a fallback.

use std::sync::Arc;
use std::time::Duration;

use cairn_core::ids::RunId;
use cairn_core::store::EventRecord;
use tokio::sync::watch;

use crate::{Engine, EngineError};

/// How long a follower waits without a commit of this process before looking anyway.
pub const OTHER_WRITERS_EVERY: Duration = Duration::from_secs(1);

/// A counter of the engine's committed writes, watched by followers.
pub(crate) struct Commits(Arc<watch::Sender<u64>>);

impl Commits {
    pub(crate) fn new() -> Commits {
        Commits(Arc::new(watch::channel(0).0))
    }

    /// What the store calls after each commit (its lock released).
    pub(crate) fn hook(&self) -> impl Fn() + Send + Sync + 'static {
        let tx = self.0.clone();
        move || tx.send_modify(|n| *n = n.wrapping_add(1))
    }

    fn subscribe(&self) -> CommitWatch {
        CommitWatch(self.0.subscribe())
    }
}

/// A subscription to the engine's commits.
pub struct CommitWatch(watch::Receiver<u64>);

impl CommitWatch {
    /// Returns after the next commit since the last call (or the subscription), or after
    /// [`OTHER_WRITERS_EVERY`] without one.
    pub async fn next(&mut self) {
        tokio::select! {
            _ = self.0.changed() => {}
            _ = tokio::time::sleep(OTHER_WRITERS_EVERY) => {}
        }
        self.0.borrow_and_update();
    }
}

/// One run's events as they are committed, in order, each once, ending after `run.finished`.
pub struct RunFollower {
    engine: Arc<Engine>,
    run_id: RunId,
    after: i64,
    commits: CommitWatch,
    first: bool,
    ended: bool,
}

impl RunFollower {
    /// The run's next events: at once what exists after the last ones given, else after the next
    /// commit that wrote some. `Ok(None)` once the run's last event has been given (or the run
    /// had finished with nothing after the starting point).
    pub async fn next(&mut self) -> Result<Option<Vec<EventRecord>>, EngineError> {
        loop {
            if self.ended {
                return Ok(None);
            }
            if !std::mem::take(&mut self.first) {
                self.commits.next().await;
            }
            let (engine, run_id, after) = (self.engine.clone(), self.run_id.clone(), self.after);
            let batch = tokio::task::spawn_blocking(move || engine.event_batch(&run_id, after))
                .await
                .map_err(|e| EngineError::Internal { message: format!("following the run failed: {e}") })??;
            let mut events = batch.events;
            if let Some(end) = events.iter().position(|e| e.event.ends_run()) {
                events.truncate(end + 1);
                self.ended = true;
            }
            let Some(last) = events.last() else {
                self.ended = batch.finished;
                continue;
            };
            self.after = last.seq;
            return Ok(Some(events));
        }
    }

    /// The sequence number of the last event given.
    pub fn after(&self) -> i64 {
        self.after
    }
}

impl Engine {
    /// A subscription to this engine's commits (for a follower of something other than one run,
    /// such as the list of runs).
    pub fn commits(&self) -> CommitWatch {
        self.commits.subscribe()
    }

    /// Follows `run_id` from after event `after`. Refused at once for a run that does not exist.
    /// The subscription starts before the first read, so no commit after it goes unnoticed.
    pub fn follow_run(self: &Arc<Engine>, run_id: &RunId, after: i64) -> Result<RunFollower, EngineError> {
        let commits = self.commits();
        self.run_record(run_id)?;
        Ok(RunFollower { engine: self.clone(), run_id: run_id.clone(), after, commits, first: true, ended: false })
    }
}
