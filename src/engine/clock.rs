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
pub(crate) const SECOND: Nanos = 1_000_000_000;

/// Where the engine gets `now`. Every algorithm takes time from here, never from the OS.
pub trait Clock: Send + Sync + 'static {
    /// Now, in nanoseconds on this clock's scale.
    fn now(&self) -> Nanos;

    /// This clock, if it is the system clock: the limiter keeps a copy to read it without a
    /// virtual call, on every decision.
    fn as_system(&self) -> Option<&SystemClock> {
        None
    }
}

/// Monotonic time aligned to the Unix epoch at start, so windows fall on wall-clock boundaries
/// and never run backwards. Read from the TSC where it is reliable (quanta), which costs a few
/// nanoseconds instead of a `clock_gettime`.
///
/// `now` scales the raw counter's distance from start straight to nanoseconds, one multiply and
/// a constant shift, rather than going through `quanta::Instant` and a `Duration` (which splits
/// into seconds and nanoseconds and joins them again on every call) or quanta's
/// `delta_as_nanos` (which asks again which kind of clock it is and shifts a 128-bit product by
/// a variable amount). The scale is quanta's own, read once: the nanoseconds it gives for
/// 2^`SCALE_SHIFT` raw ticks (exactly 2^`SCALE_SHIFT` when the raw counter is already in
/// nanoseconds, without a TSC), so the two agree to a part in 10^11. A raw reading at or before
/// start (a TSC that differs between cores by more than the time since start) reads as start,
/// as quanta's own arithmetic saturates.
#[derive(Clone, Debug)]
pub struct SystemClock {
    clock: quanta::Clock,
    start_raw: u64,
    start_unix: Nanos,
    /// Nanoseconds per 2^`SCALE_SHIFT` raw ticks.
    scale: u64,
}

/// Large enough that the scale keeps quanta's precision, small enough that no product of a
/// 64-bit tick count and the scale can overflow 128 bits (the scale stays below 2^50 for any
/// counter of at least one tick per 1,000 ns).
const SCALE_SHIFT: u32 = 40;

impl SystemClock {
    /// A clock reading the Unix time now, and monotonic from here on.
    pub fn new() -> SystemClock {
        let start_unix = SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_nanos() as Nanos);
        let clock = quanta::Clock::new();
        let scale = clock.delta_as_nanos(0, 1 << SCALE_SHIFT);
        SystemClock { start_raw: clock.raw(), clock, start_unix, scale }
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
        let ticks = self.clock.raw().saturating_sub(self.start_raw);
        self.start_unix + ((u128::from(ticks) * u128::from(self.scale)) >> SCALE_SHIFT) as Nanos
    }

    fn as_system(&self) -> Option<&SystemClock> {
        Some(self)
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

    #[test]
    fn system_clock_keeps_quantas_scale() {
        let clock = SystemClock::new();
        let q = &clock.clock;
        // A second's worth of ticks, and a day's, scaled both ways: quanta's to the nanosecond,
        // ours within a part in 10^9 (a millisecond over eleven days).
        let per_second = (1u64..).map(|n| n << 20).find(|&t| q.delta_as_nanos(0, t) >= SECOND).unwrap();
        for ticks in [per_second, per_second * 86_400] {
            let theirs = q.delta_as_nanos(0, ticks);
            let ours = ((u128::from(ticks) * u128::from(clock.scale)) >> SCALE_SHIFT) as u64;
            assert!(theirs.abs_diff(ours) <= theirs / 1_000_000_000 + 1, "quanta {theirs} ns, ours {ours} ns");
        }
        // And the two clocks read the same time within what passes between the readings.
        let quanta_now = clock.start_unix + q.delta_as_nanos(clock.start_raw, q.raw());
        let ours = clock.now();
        assert!(ours.abs_diff(quanta_now) < SECOND, "quanta {quanta_now}, ours {ours}");
    }
}
