//! A run's timeline at scale: `cairn_core::timeline::timeline` over the event log of a fan-out of
//! N steps run two at a time (each step's `step.started` and `step.completed`), what
//! `GET /runs/{id}/timeline` and `cairn show --timeline` fold. It must grow linearly with N.
//!
//! Run with `cargo bench -p cairn-core --bench timeline` (optional arguments: the sizes).
//! `CAIRN_BENCH_RUNS` sets the number of timed runs per size (default 7): the median is printed.

use std::hint::black_box;
use std::time::{Duration, Instant};

use cairn_core::event::RunEvent;
use cairn_core::ids::RunId;
use cairn_core::store::EventRecord;
use cairn_core::timeline::timeline;

fn events(n: usize) -> Vec<EventRecord> {
    let run_id = RunId::lookup("r");
    let mut out = Vec::with_capacity(2 * n + 2);
    let mut seq = 0;
    let mut push = |step: Option<String>, attempt: Option<u32>, at: i64, event: RunEvent| {
        seq += 1;
        out.push(EventRecord { seq, run_id: run_id.clone(), step_id: step, attempt, at, event });
    };
    let created = RunEvent::RunCreated {
        workflow: "w".into(),
        version: "1".into(),
        identity_hash: "h".into(),
        source_run_id: None,
        plan: None,
    };
    push(None, None, 0, created);
    let started = || RunEvent::StepStarted { tool: "t".into(), tool_digest: "d".into(), args_hash: "h".into() };
    // Two at a time: step i starts as step i-2 completes.
    for i in 0..n {
        let at = i as i64;
        push(Some(format!("s{i}")), Some(1), at, started());
        if i >= 1 {
            push(Some(format!("s{}", i - 1)), Some(1), at, RunEvent::StepCompleted { duration_us: 1_000 });
        }
    }
    push(Some(format!("s{}", n - 1)), Some(1), n as i64, RunEvent::StepCompleted { duration_us: 1_000 });
    out
}

fn main() {
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![1_000, 10_000, 100_000] } else { sizes };
    let runs: usize = std::env::var("CAIRN_BENCH_RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(7);
    println!("{:>8}  {:>12}  {:>12}", "steps", "median", "per step");
    for n in sizes {
        let log = events(n);
        let mut times: Vec<Duration> = (0..runs.max(1))
            .map(|_| {
                let t = Instant::now();
                let tl = timeline(black_box(&log));
                assert_eq!(tl.spans.len(), n);
                t.elapsed()
            })
            .collect();
        times.sort();
        let median = times[times.len() / 2];
        println!("{n:>8}  {:>10.2}ms  {:>10.0}ns", median.as_secs_f64() * 1e3, median.as_nanos() as f64 / n as f64);
    }
}
