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
use cairn_core::waiting::Waiting;
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

    /// Wakes followers for a change that is not a commit (a run began or ended a wait).
    pub(crate) fn bump(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
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

/// What a run's follower is given next.
#[derive(Debug, Clone, PartialEq)]
pub enum Followed {
    /// Events committed to the run's log, in order.
    Events(Vec<EventRecord>),
    /// The run began to wait for its environment (`Some`, also each time it is tried again in
    /// vain), or its wait ended (`None`). Not in the log: the registry may be what failed.
    Waiting(Option<Waiting>),
}

/// One run's events as they are committed, in order, each once, ending after `run.finished`;
/// and its waits for its environment as they begin and end.
pub struct RunFollower {
    engine: Arc<Engine>,
    run_id: RunId,
    after: i64,
    commits: CommitWatch,
    first: bool,
    ended: bool,
    /// The wait this follower was last told of.
    told: Option<Waiting>,
}

impl RunFollower {
    /// What follows: at once the events that exist after the last ones given, else what the next
    /// commit (or change of the run's wait) brings. A registry that cannot be read is told as a
    /// wait, and read again, never the follower's end. `Ok(None)` once the run's last event has
    /// been given (or the run had finished with nothing after the starting point).
    pub async fn next(&mut self) -> Result<Option<Followed>, EngineError> {
        loop {
            if self.ended {
                return Ok(None);
            }
            if !std::mem::take(&mut self.first) {
                self.commits.next().await;
            }
            let (engine, run_id, after) = (self.engine.clone(), self.run_id.clone(), self.after);
            let read = tokio::task::spawn_blocking(move || engine.event_batch(&run_id, after))
                .await
                .map_err(|e| EngineError::Internal { message: format!("following the run failed: {e}") })?;
            let batch = match read {
                Ok(batch) => batch,
                Err(e) if crate::is_environment_fault(&e) => {
                    // The run's daemon may hold no wait (it wrote nothing meanwhile): this read's
                    // failure is the follower's.
                    let now = self.engine.now_ms();
                    let waiting = self.engine.waiting(&self.run_id).or_else(|| {
                        let kept = self.told.clone();
                        Some(kept.unwrap_or_else(|| Waiting::began(e.code().as_str(), &e.to_string(), now)))
                    });
                    if let Some(told) = self.tell(waiting) {
                        return Ok(Some(told));
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            if let Some(told) = self.tell(self.engine.waiting(&self.run_id)) {
                // The events, if any, come on the next call, at once.
                self.first = true;
                return Ok(Some(told));
            }
            let mut events = batch.events;
            if let Some(end) = events.iter().position(|e| e.event.ends_run()) {
                events.truncate(end + 1);
                self.ended = true;
            } else if batch.full {
                // More is there already: the next call reads it without waiting for a commit.
                self.first = true;
            }
            let Some(last) = events.last() else {
                self.ended = batch.finished;
                continue;
            };
            self.after = last.seq;
            return Ok(Some(Followed::Events(events)));
        }
    }

    /// The change of the run's wait to tell, if it changed since last told.
    fn tell(&mut self, now: Option<Waiting>) -> Option<Followed> {
        if now == self.told {
            return None;
        }
        self.told = now.clone();
        Some(Followed::Waiting(now))
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
        Ok(RunFollower {
            engine: self.clone(),
            run_id: run_id.clone(),
            after,
            commits,
            first: true,
            ended: false,
            told: None,
        })
    }
}
