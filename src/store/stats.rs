//! What a shared store has been doing, counted in atomics for metrics, logs and the console.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::latency::Latency;
use crate::throttle::{Throttle, monotonic_now};

/// A shared store's activity.
#[derive(Debug, Default)]
pub struct StoreStats {
    /// Whether every node of the store answers (no circuit is open).
    pub up: AtomicBool,
    /// Script calls made for decisions.
    pub calls: AtomicU64,
    /// Decision calls that failed or timed out.
    pub errors: AtomicU64,
    /// Refusals answered by the local deny cache.
    pub deny_hits: AtomicU64,
    /// Decisions in which some bound followed its `on-store-error`.
    pub fallbacks: AtomicU64,
    /// Decisions in which some bound followed `on-store-error: open`, `closed`, `local` (in
    /// [`OnStoreError`](crate::policy::OnStoreError) order).
    pub followed: [AtomicU64; 3],
    /// Decision calls the store answered with an error (not a node out of reach, which its
    /// circuit logs once).
    pub call_failures: Failures,
    /// Undo calls that failed: what one hash slot admitted for a request another refused stays
    /// counted until its window passes.
    pub undo_failures: Failures,
    /// Lease renewals and releases that failed: a lease still in use may lapse, or one no longer
    /// in use holds a permit until its ttl.
    pub lease_failures: Failures,
    /// Time of one decision call.
    pub latency: Latency,
}

/// How often a kind of failure may be logged.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Failures of work no request waits for (undo, lease renewal and release). Each is counted; the
/// first is logged, then at most one line per ten seconds with how many went unlogged, so a store
/// in trouble leaves a trace without flooding the log.
#[derive(Debug)]
pub struct Failures {
    count: AtomicU64,
    log: Throttle,
}

impl Default for Failures {
    fn default() -> Failures {
        Failures { count: AtomicU64::new(0), log: Throttle::new(LOG_EVERY) }
    }
}

impl Failures {
    /// How many have happened.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Counts one, and logs it unless one was logged less than ten seconds ago.
    pub fn record(&self, store: &str, what: &'static str, error: &str) {
        self.count.fetch_add(1, Ordering::Relaxed);
        if let Some(line) = self.log.occurred(monotonic_now) {
            tracing::warn!(store, error, unlogged = line.suppressed, "{what}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_is_counted_and_few_are_logged() {
        let f = Failures::default();
        for _ in 0..5 {
            f.record("redis://h:1", "store call failed in the background", "refused");
        }
        assert_eq!(f.count(), 5);
        assert_eq!(f.log.unreported(), 4, "the first is logged, the next four wait their turn");
    }
}
