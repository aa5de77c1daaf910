//! A run held by a fault of its environment: the registry cannot be written (its disk is full or
//! failing, its database cannot be reached) or its target cannot be reached. It is not a status
//! of the run's record, since the registry may be what failed: the daemon that drives the run
//! holds it, shows it on every surface, and tries again on a bounded backoff until the fault
//! clears, when the run continues by itself.

use serde::{Deserialize, Serialize};

/// The first wait before trying again, in milliseconds; each further try waits twice as long.
pub const FIRST_RETRY_MS: i64 = 1_000;
/// The longest wait between two tries, in milliseconds: a fault that clears is noticed within it.
pub const MAX_RETRY_MS: i64 = 30_000;

/// Why and since when a run waits, and when it is tried again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    /// The failure's stable code (`database`, `io`, `target_unreachable`).
    pub code: String,
    /// What failed, as the failure said it.
    pub reason: String,
    /// When the run began to wait (Unix milliseconds).
    pub since: i64,
    /// How many times it has been tried since (the first failure counts one).
    pub tries: u32,
    /// When it is tried next (Unix milliseconds).
    pub next_try_at: i64,
}

/// How long to wait after the `tries`-th failed try: 1 s, 2 s, 4 s, … up to [`MAX_RETRY_MS`].
pub fn retry_delay_ms(tries: u32) -> i64 {
    let doublings = tries.saturating_sub(1).min(16);
    (FIRST_RETRY_MS << doublings).min(MAX_RETRY_MS)
}

impl Waiting {
    /// A run begins to wait at `at` for the failure `code`/`reason`.
    pub fn began(code: &str, reason: &str, at: i64) -> Waiting {
        Waiting {
            code: code.to_string(),
            reason: reason.to_string(),
            since: at,
            tries: 1,
            next_try_at: at + retry_delay_ms(1),
        }
    }

    /// Another try failed at `at` (the fault may have changed: its latest words are kept); the
    /// wait goes on from the same `since`, with a longer delay.
    pub fn failed_again(&self, code: &str, reason: &str, at: i64) -> Waiting {
        let tries = self.tries.saturating_add(1);
        Waiting {
            code: code.to_string(),
            reason: reason.to_string(),
            since: self.since,
            tries,
            next_try_at: at + retry_delay_ms(tries),
        }
    }

    /// It is time to try again.
    pub fn is_due(&self, now: i64) -> bool {
        now >= self.next_try_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_from_one_second_and_stops_at_its_bound() {
        let delays: Vec<i64> = (1..=8).map(retry_delay_ms).collect();
        assert_eq!(delays, [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]);
        assert_eq!(retry_delay_ms(0), 1_000);
        assert_eq!(retry_delay_ms(u32::MAX), MAX_RETRY_MS);
    }

    #[test]
    fn a_wait_keeps_its_start_and_takes_the_latest_reason() {
        let w = Waiting::began("database", "disk is full", 10_000);
        assert_eq!((w.tries, w.next_try_at), (1, 11_000));
        assert!(!w.is_due(10_999) && w.is_due(11_000));
        let again = w.failed_again("io", "cannot write input.json", 11_000);
        assert_eq!((again.since, again.tries, again.next_try_at), (10_000, 2, 13_000));
        assert_eq!((again.code.as_str(), again.reason.as_str()), ("io", "cannot write input.json"));
    }
}
