//! Which daemon drives a run: a run is leased to the daemon that drives it, until a time its
//! heartbeat keeps pushing back. Whether another daemon may take a run over is decided here, as a
//! pure function of the run's lease row, its holder's daemon row and the clock; whether a holder
//! on this host is alive is the caller's to find out (it is IO) and given as an argument.
//!
//! **Invariant:** a live holder's run is never taken: only a run with no lease and no live owner,
//! a lease that expired, a holder that stopped cleanly, or a holder provably dead on this host. A
//! run whose files are on another host (a run on the local target there) is left for a daemon of
//! that host.

use crate::store::{DaemonRecord, LeasedRun};

/// What a daemon does about an open run it does not drive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Takeover {
    /// Take its lease and drive it (resuming its interrupted steps).
    Take,
    /// Leave it to its live holder (or live owner).
    Leave,
    /// Its lease expired, but its files are on another host: it waits for a daemon there.
    Wait { host: String },
}

/// Whether `me` may take `run` over at `now`. `holder_alive` says whether the run's holder (a
/// daemon on this host) or, for a run without a lease, its owner process is alive; `None` when
/// that cannot be told from here.
pub fn takeover(run: &LeasedRun, me: &DaemonRecord, now: i64, holder_alive: Option<bool>) -> Takeover {
    let Some(lease) = &run.lease else {
        // Made in-process (or before leases): its owner process decides, as on one host.
        return match holder_alive {
            Some(true) => Takeover::Leave,
            _ => local_or_wait(run, me),
        };
    };
    if lease.daemon == me.id {
        return Takeover::Leave;
    }
    let dead_here = run.holder.as_ref().is_some_and(|h| h.host == me.host) && holder_alive == Some(false);
    if lapsed(run, now) || dead_here { local_or_wait(run, me) } else { Takeover::Leave }
}

/// Whether `run`'s lease has ended at `now`: it expired, or its holder stopped cleanly (which
/// ends its leases at once).
pub fn lapsed(run: &LeasedRun, now: i64) -> bool {
    run.expires_at.is_none_or(|at| at < now) || run.holder.as_ref().is_some_and(|h| h.stopped_at.is_some())
}

fn local_or_wait(run: &LeasedRun, me: &DaemonRecord) -> Takeover {
    match &run.home_host {
        Some(host) if *host != me.host => Takeover::Wait { host: host.clone() },
        _ => Takeover::Take,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::RunStatus;
    use crate::store::{Lease, RunRecord};

    fn daemon(id: &str, host: &str, stopped_at: Option<i64>) -> DaemonRecord {
        DaemonRecord {
            id: id.into(),
            host: host.into(),
            pid: 1,
            start_time: 2,
            state_root: "/s".into(),
            started_at: 0,
            heartbeat_at: 0,
            stopped_at,
        }
    }

    fn run(lease: Option<(&str, i64)>, holder: Option<DaemonRecord>, home_host: Option<&str>) -> LeasedRun {
        LeasedRun {
            run: RunRecord {
                run_id: crate::ids::RunId::lookup("r"),
                workflow: "w".into(),
                version: "1.0.0".into(),
                identity_hash: "h".into(),
                input: serde_json::json!({}),
                status: RunStatus::Running,
                revision: 1,
                run_dir: "/s/runs/r".into(),
                created_at: 0,
                updated_at: 0,
                finished_at: None,
                findings: vec![],
                error: None,
                source_run_id: None,
                replay: None,
                owner: None,
                thread_id: None,
                plan_id: None,
                parallelism: 1,
                submitted_by: None,
                cancelled_by: None,
                held_since: None,
            },
            lease: lease.map(|(d, _)| Lease { daemon: d.into(), epoch: 1 }),
            expires_at: lease.map(|(_, at)| at),
            holder,
            home_host: home_host.map(str::to_string),
        }
    }

    #[test]
    fn a_run_is_taken_only_from_a_holder_that_is_gone() {
        let me = daemon("me", "h1", None);
        let other_here = daemon("x", "h1", None);
        let other_there = daemon("y", "h2", None);
        let cases = [
            // A live lease: left, wherever its holder is.
            (run(Some(("x", 100)), Some(other_here.clone()), Some("h1")), Some(true), Takeover::Leave),
            (run(Some(("y", 100)), Some(other_there.clone()), None), None, Takeover::Leave),
            // Ours: left.
            (run(Some(("me", 10)), Some(me.clone()), Some("h1")), Some(true), Takeover::Leave),
            // Expired: taken.
            (run(Some(("y", 10)), Some(other_there.clone()), None), None, Takeover::Take),
            // Its holder stopped cleanly, or is dead on this host: taken before it expires.
            (run(Some(("y", 100)), Some(daemon("y", "h2", Some(40))), None), None, Takeover::Take),
            (run(Some(("x", 100)), Some(other_here.clone()), Some("h1")), Some(false), Takeover::Take),
            // A holder elsewhere cannot be told dead from here: its lease must expire.
            (run(Some(("y", 100)), Some(other_there.clone()), None), Some(false), Takeover::Leave),
            // Expired, but its files are on the other host: it waits for a daemon there.
            (run(Some(("y", 10)), Some(other_there.clone()), Some("h2")), None, Takeover::Wait { host: "h2".into() }),
            // No lease (made in-process): its owner decides.
            (run(None, None, Some("h1")), Some(true), Takeover::Leave),
            (run(None, None, Some("h1")), Some(false), Takeover::Take),
            (run(None, None, None), None, Takeover::Take),
            // An unknown holder whose lease expired.
            (run(Some(("gone", 10)), None, None), None, Takeover::Take),
        ];
        for (i, (r, alive, want)) in cases.into_iter().enumerate() {
            assert_eq!(takeover(&r, &me, 50, alive), want, "case {i}");
        }
    }
}
