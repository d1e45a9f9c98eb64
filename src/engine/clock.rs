//! Time for the engine: a `Clock` trait, the system clock, and a manual clock tests advance.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds on a clock's own scale; only differences and window boundaries mean anything.
///
/// An alias, not a newtype, on purpose: the algorithms in `rate.rs` mix times with counts in
/// nearly every line (`now / window` is a window index, `index * window` a time, `tokens ×
/// window / limit` a span, and `Counter::a` holds a window index or a time by algorithm), so a
/// newtype would need an unwrap or a mixed-unit operator at each of them and hide the arithmetic
/// that must match `decide.lua`. Units change only at the edges, each in one place:
/// `store::redis` converts to the scripts' microseconds through its `Micros`, and headers round
/// up to whole seconds in `decision::whole_seconds`.
pub type Nanos = u64;

/// One second.
pub const SECOND: Nanos = 1_000_000_000;

/// Where the engine gets `now`. Every algorithm takes time from here, never from the OS.
pub trait Clock: Send + Sync + 'static {
    /// Now, in nanoseconds on this clock's scale.
    fn now(&self) -> Nanos;
}

/// Monotonic time aligned to the Unix epoch at start, so windows fall on wall-clock boundaries
/// and never run backwards. Read from the TSC where it is reliable (quanta), which costs a few
/// nanoseconds instead of a `clock_gettime`.
///
/// `now` scales the raw counter's distance from start straight to nanoseconds
/// (`delta_as_nanos`: one multiply and shift) rather than going through `quanta::Instant` and a
/// `Duration`, which splits into seconds and nanoseconds and joins them again on every call. A
/// raw reading at or before start (a TSC that differs between cores by more than the time since
/// start) reads as start, as quanta's own `Instant` arithmetic saturates.
#[derive(Clone, Debug)]
pub struct SystemClock {
    clock: quanta::Clock,
    start_raw: u64,
    start_unix: Nanos,
}

impl SystemClock {
    /// A clock reading the Unix time now, and monotonic from here on.
    pub fn new() -> SystemClock {
        let start_unix = SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_nanos() as Nanos);
        let clock = quanta::Clock::new();
        SystemClock { start_raw: clock.raw(), clock, start_unix }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Nanos {
        self.start_unix + self.clock.delta_as_nanos(self.start_raw, self.clock.raw())
    }
}

/// A clock that moves only when told to. Clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock reading `start`.
    pub fn starting_at(start: Duration) -> ManualClock {
        ManualClock(Arc::new(AtomicU64::new(start.as_nanos() as Nanos)))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_nanos() as Nanos, Ordering::SeqCst);
    }

    /// Sets the clock to a time (tests only ever move it forward).
    pub fn set(&self, to: Duration) {
        self.0.store(to.as_nanos() as Nanos, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_starts_at_unix_time_and_never_runs_backwards() {
        let unix = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as Nanos;
        let before = unix();
        let clock = SystemClock::new();
        let mut last = clock.now();
        assert!(last >= before, "{last} is before the Unix time {before} read ahead of it");
        assert!(last - before < SECOND, "{last} is a second or more past {before}");
        for _ in 0..10_000 {
            let now = clock.now();
            assert!(now >= last, "the clock went from {last} back to {now}");
            last = now;
        }
    }
}
