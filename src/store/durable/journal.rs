//! Between a limiter's durable tables (quotas, `count-when` bounds) and the state file: counters
//! read back at start, changes written behind on a timer, and a last write when the process stops.
//!
//! The authoritative count is in memory; a decision never waits for the disk. Each write carries
//! whole counters, never deltas, so writing one twice counts nothing twice. A write that fails
//! puts its changes back, and the next tick tries again.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use super::{Change as Stored, Entry, Key, StateError, StateStore, SyncStats};
use crate::engine::{Change, Counter, KeyTable, Limiter, Nanos};
use crate::latency::Latency;
use crate::policy::Bound;
use crate::policy::bound::{Algorithm, Periods};

/// A durable bound's table name in the state file (`None` for a bound that is not durable):
/// everything that gives its count a meaning, and nothing that does not, exactly what
/// `BoundDef::same_consumption` compares, so a reload that keeps a bound's counts in memory keeps
/// its table, and a quota whose limit was raised finds what it had used after a restart.
///
/// A quota: the bound, its key, its periods and its key cap (not limit or cost). A first-use
/// counter keeps the end of its period (its layout before kept the start), and its table says
/// so: a table of the old layout has another name and is never misread. A `count-when` bound:
/// the bound, its key, its algorithm with its window (a token bucket's limit and burst too: its
/// counter is a time measured in refills), its key cap and the statuses it counts.
pub fn table_name(bound: &Bound) -> Option<String> {
    let def = &bound.def;
    if !def.durable() {
        return None;
    }
    let (id, per, max_keys) = (&bound.id, &def.per, def.max_keys);
    let count_when = def.counting.count_when.as_ref().map(|s| format!("|count-when={s}")).unwrap_or_default();
    Some(match &def.algorithm {
        Algorithm::Quota { periods } => {
            let reset = match periods {
                Periods::Calendar(_) => "calendar",
                Periods::FirstUse(_) => "first-use:end",
            };
            let (period, tz) = (periods.period(), periods.zone().name());
            format!("{id}|per={per}|period={period}|reset={reset}|tz={tz}|max-keys={max_keys}{count_when}")
        }
        Algorithm::SlidingWindow { window } => {
            format!("{id}|per={per}|algorithm=sliding-window|window={window}|max-keys={max_keys}{count_when}")
        }
        Algorithm::TokenBucket { window, burst } => format!(
            "{id}|per={per}|algorithm=token-bucket|window={window}|limit={}|burst={burst}|max-keys={max_keys}{count_when}",
            def.limit
        ),
        Algorithm::Concurrency => return None,
    })
}

/// The entry a counter is written as: it expires when the counter would be idle (a quota's
/// period ends, a sliding window's previous and current windows are both over, a token bucket
/// is full again), so the file holds only what a restart would still count, and `write` prunes
/// the rest. `None` for a counter already idle: its entry is removed.
fn entry(table: &KeyTable, counter: Counter, now: Nanos) -> Option<Entry> {
    let expires = table.rate_at(counter, now).idle_at(counter);
    // `Nanos::MAX` is a concurrency counter's "unknown": never durable, never written.
    (expires > now && expires != Nanos::MAX).then_some(Entry { a: counter.a, b: counter.b, c: counter.c, expires })
}

/// Reads every durable bound's counters back into the limiter's tables; how many were restored.
/// Entries that expired while opbound was down (a period ended, a window passed) are not
/// restored: they are over.
pub fn restore(state: &StateStore, limiter: &Limiter, now: Nanos) -> Result<usize, StateError> {
    restore_where(state, limiter, now, |_| true)
}

/// [`restore`] for the bounds whose table name `fresh` accepts: a reload reads back the bounds
/// that start fresh, and leaves alone those whose counts it carried over in memory (newer than
/// the file's).
pub fn restore_where(
    state: &StateStore,
    limiter: &Limiter,
    now: Nanos,
    fresh: impl Fn(&str) -> bool,
) -> Result<usize, StateError> {
    let mut restored = 0;
    for (i, bound) in limiter.policy().indexed_bounds() {
        let Some(name) = table_name(bound).filter(|n| fresh(n)) else { continue };
        let entries = state.load(&name, now)?;
        restored += entries.len();
        limiter.table(i).restore(entries.into_iter().map(|(key, e)| {
            let counter = Counter { a: e.a, b: e.b, c: e.c };
            match key {
                Key::Caller(k) => Change::Caller(k, Some(counter)),
                Key::Overflow => Change::Overflow(counter),
            }
        }));
    }
    Ok(restored)
}

/// Writes what changed in the limiter's durable tables since the last call (pending
/// reservations counted), in one durable transaction. On an error nothing is lost: the changes
/// go back to their tables.
pub fn sync(state: &StateStore, limiter: &Limiter, now: Nanos) -> Result<SyncStats, StateError> {
    let mut drained: Vec<(&KeyTable, String, Vec<Change>)> = Vec::new();
    for (i, bound) in limiter.policy().indexed_bounds() {
        let Some(name) = table_name(bound) else { continue };
        let table = limiter.table(i);
        let changes = table.drain_changes(now);
        if !changes.is_empty() {
            drained.push((table, name, changes));
        }
    }
    let mut stored = Vec::new();
    for (table, name, changes) in &drained {
        for change in changes {
            let (key, counter) = match *change {
                Change::Caller(k, c) => (Key::Caller(k), c),
                Change::Overflow(c) => (Key::Overflow, Some(c)),
            };
            stored.push(match counter.and_then(|c| entry(table, c, now)) {
                Some(e) => Stored::put(name, key, e),
                None => Stored::remove(name, key),
            });
        }
    }
    let result = state.write(&stored, now);
    if result.is_err() {
        for (table, _, changes) in &drained {
            table.requeue(changes);
        }
    }
    result
}

/// Drops the tables of durable bounds the limiter no longer has once every entry they hold has
/// expired (`write` prunes expired entries, so such a table is empty); returns how many went.
/// Until then a table stays: a reload back to its bound in time reads its counts back.
pub fn drop_ended(state: &StateStore, limiter: &Limiter) -> Result<usize, StateError> {
    let current: Vec<String> = limiter.policy().bounds.iter().filter_map(table_name).collect();
    let mut dropped = 0;
    for table in state.tables()? {
        if table.entries == 0 && !current.contains(&table.name) && state.drop_table(&table.name)? {
            tracing::info!(table = %table.name, "a removed bound's counts all expired: its state dropped");
            dropped += 1;
        }
    }
    Ok(dropped)
}

/// How writing behind goes, for metrics: read by the admin listener while the writer's thread
/// adds to it.
#[derive(Debug)]
pub struct StateStats {
    /// How long each write that had something to write took, failed ones included.
    pub latency: Latency,
    /// Writes that failed (their changes were kept for the next one).
    pub failures: AtomicU64,
}

impl Default for StateStats {
    fn default() -> StateStats {
        // A durable commit waits for the disk: milliseconds, up to seconds on a busy one.
        let bounds = [1e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0, 5.0];
        StateStats { latency: Latency::with_bounds(bounds), failures: AtomicU64::new(0) }
    }
}

/// Writes behind every `interval` until `stop` says so (or its sender is gone), then writes
/// once more: a graceful stop loses nothing. `current` gives the limiter serving now (a reload
/// replaces it; the counters it carried over are the same).
pub fn write_behind(
    state: Arc<StateStore>,
    current: impl Fn() -> Arc<Limiter>,
    interval: Duration,
    stop: Receiver<()>,
    stats: &StateStats,
) -> Result<(), StateError> {
    let mut failures = 0u64;
    loop {
        let stopping = !matches!(stop.recv_timeout(interval), Err(RecvTimeoutError::Timeout));
        let limiter = current();
        let now = limiter.clock().now();
        let started = std::time::Instant::now();
        let result = sync(&state, &limiter, now).and_then(|stats| drop_ended(&state, &limiter).map(|_| stats));
        if !matches!(result, Ok(ref s) if !s.committed) {
            stats.latency.observe(started.elapsed());
        }
        if result.is_err() {
            stats.failures.fetch_add(1, Ordering::Relaxed);
        }
        match result {
            Ok(stats) if stats.committed => {
                tracing::debug!(
                    written = stats.written,
                    removed = stats.removed,
                    pruned = stats.pruned,
                    "state synced"
                );
                failures = 0;
            }
            Ok(_) => {}
            Err(e) if stopping => return Err(e),
            Err(e) => {
                failures += 1;
                // Once, then every minute of trouble: the changes stay queued meanwhile.
                if failures == 1 || failures.is_multiple_of(60) {
                    // (sixty failed ticks apart)
                    tracing::error!(error = %e, failures, "cannot write the durable state; retrying, nothing is lost unless the process is killed");
                }
            }
        }
        if stopping {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Clock, KeyHasher, ManualClock, Stage};
    use crate::request::Given;

    const MONTHLY: &str = "{algorithm: quota, per: address, limit: 5, period: P1M}";

    fn limiter(clock: &ManualClock, hasher: KeyHasher) -> Limiter {
        limiter_of(MONTHLY, clock, hasher)
    }

    /// A limiter whose spec has the one top-level bound `bound`.
    fn limiter_of(bound: &str, clock: &ManualClock, hasher: KeyHasher) -> Limiter {
        let yaml = format!("openapi: 3.0.3\ninfo: {{title: t, version: '1'}}\nx-rate-limit: {bound}\npaths: {{}}\n");
        let source = crate::spec::Source::from_text(std::path::Path::new("q.yaml"), yaml);
        let policy = Arc::new(crate::policy::load_source(source, &crate::Options::default()).unwrap().policy);
        Limiter::new(policy, Arc::new(clock.clone()), hasher)
    }

    fn request(l: &Limiter, i: u8) -> bool {
        let facts = Given { address: std::net::IpAddr::from([192, 0, 2, i]), headers: vec![], query: None };
        l.decide(&l.plan(None, &facts, None, Stage::All)).allowed()
    }

    #[test]
    fn what_changed_is_written_once_and_read_back() {
        let dir = std::env::temp_dir().join(format!("opbound-journal-{}", std::process::id()));
        let state = StateStore::open(&dir, true).unwrap();
        let clock = ManualClock::starting_at(Duration::from_secs(1_790_000_000)); // 2026-09
        let hasher = KeyHasher::with_secret(state.secret());
        let l = limiter(&clock, hasher.clone());
        for i in 1..=3 {
            assert!(request(&l, i));
        }
        assert!(request(&l, 1));
        let now = clock.now();
        let stats = sync(&state, &l, now).unwrap();
        assert_eq!((stats.written, stats.committed), (3, true), "three callers, each once: {stats:?}");
        assert!(!sync(&state, &l, now).unwrap().committed, "nothing changed since");
        assert!(request(&l, 3));
        assert_eq!(sync(&state, &l, now).unwrap().written, 1);
        // A new process: the counts come back, and spend from where they were.
        let fresh = limiter(&clock, hasher);
        assert_eq!(restore(&state, &fresh, now).unwrap(), 3);
        for _ in 0..3 {
            assert!(request(&fresh, 1));
        }
        assert!(!request(&fresh, 1), "2 before the restart, 3 after: 5 of 5");
        // Months later the period is over: nothing is restored.
        clock.advance(Duration::from_secs(90 * 86_400));
        let later = limiter(&clock, KeyHasher::with_secret(state.secret()));
        assert_eq!(restore(&state, &later, clock.now()).unwrap(), 0);
        drop(state);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_removed_quota_keeps_its_table_until_its_period_ends() {
        let dir = std::env::temp_dir().join(format!("opbound-journal-drop-{}", std::process::id()));
        let state = StateStore::open(&dir, true).unwrap();
        let clock = ManualClock::starting_at(Duration::from_secs(1_790_000_000)); // 2026-09
        let hasher = KeyHasher::with_secret(state.secret());
        let monthly = limiter(&clock, hasher.clone());
        assert!(request(&monthly, 1));
        sync(&state, &monthly, clock.now()).unwrap();
        let name = table_name(&monthly.policy().bounds[0]).unwrap();
        // A reload makes it a daily quota: a different quota, and the monthly table unused.
        let daily = limiter_of("{algorithm: quota, per: address, limit: 5, period: P1D}", &clock, hasher.clone());
        assert!(request(&daily, 1));
        sync(&state, &daily, clock.now()).unwrap();
        assert_eq!(drop_ended(&state, &daily).unwrap(), 0, "the month is not over");
        assert!(state.tables().unwrap().iter().any(|t| t.name == name));
        // A reload back within the month finds what was used.
        let back = limiter(&clock, hasher.clone());
        assert_eq!(restore(&state, &back, clock.now()).unwrap(), 1);
        // Once the month is over its entries are pruned, and the table of the removed quota goes;
        // the daily quota's table, still served, stays even when empty.
        clock.advance(Duration::from_secs(40 * 86_400));
        state.prune(clock.now()).unwrap();
        assert_eq!(drop_ended(&state, &daily).unwrap(), 1);
        let names: Vec<String> = state.tables().unwrap().into_iter().map(|t| t.name).collect();
        assert_eq!(names, [table_name(&daily.policy().bounds[0]).unwrap()]);
        drop(state);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
#[path = "journal_tests.rs"]
mod count_when_tests;
