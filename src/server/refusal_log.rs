//! Refusal lines, at most one a second per bound. Under a flood a bound writes one line a second
//! saying how many refusals it did not log one by one, instead of a line per request.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::engine::{Clock, Nanos};

/// The shortest time between two lines of one bound.
pub(crate) const PERIOD: Nanos = 1_000_000_000;

/// The log target of refusal lines.
pub(crate) const TARGET: &str = "opbound::refusal";

/// A line a bound may write now: how many refusals went unlogged before it, and when it was
/// claimed (the next line may come a `PERIOD` later).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line {
    /// Refusals of this bound left out since its last line.
    pub suppressed: u64,
    /// When the line was claimed, on the limiter's clock.
    pub at: Nanos,
}

/// When one bound may write its next refusal line, and how many of its refusals no line has
/// reported yet. Lock-free and allocation-free: a refusal is an add, a load and at most one
/// compare-and-swap.
#[derive(Debug, Default)]
pub struct Throttle {
    /// The clock's time before which no line is written; zero at first, so the first refusal is
    /// logged.
    next: AtomicU64,
    /// Refusals no line has reported, the one being logged included until it is.
    pending: AtomicU64,
}

impl Throttle {
    /// A refusal. `Some`: log it, with the refusals since the last line that went unlogged.
    /// `None`: a line was written less than a `PERIOD` ago; this one is counted for the next.
    pub fn refusal(&self, clock: &dyn Clock) -> Option<Line> {
        // Counted before the clock is read: a `flush` that finds nothing pending has read the
        // clock earlier, so this refusal then sees the slot free and logs itself. Counted after,
        // it could land just behind a flush that gave up, and wait for the next flood to be told.
        self.pending.fetch_add(1, Ordering::SeqCst);
        let at = clock.now();
        if !self.claim(at) {
            return None;
        }
        // Only the holder of a slot takes the count, so this refusal is in it; `saturating_sub`
        // covers a holder of the previous slot that was descheduled for a whole period.
        let taken = self.pending.swap(0, Ordering::SeqCst);
        Some(Line { suppressed: taken.saturating_sub(1), at })
    }

    /// A `PERIOD` after a line, when the flood may have stopped and no refusal would report the
    /// rest. `Some`: log how many came since. `None`: nothing to report, or a refusal's own line
    /// took the slot (and reports them).
    pub fn flush(&self, now: Nanos) -> Option<Line> {
        if self.pending.load(Ordering::SeqCst) == 0 || !self.claim(now) {
            return None;
        }
        Some(Line { suppressed: self.pending.swap(0, Ordering::SeqCst), at: now })
    }

    /// Takes the slot of the line at `now`, if its time has come and no one else took it.
    fn claim(&self, now: Nanos) -> bool {
        let next = self.next.load(Ordering::SeqCst);
        now >= next
            && self.next.compare_exchange(next, now.saturating_add(PERIOD), Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }
}

/// Logs what `bound` refused after `line` once nothing else will: a `PERIOD` after each line it
/// writes, until a period passes with nothing to report or a refusal's own line takes over (that
/// refusal starts its own). So the `suppressed` counts of a flood always add up, even after it
/// stops, and a bound never has more than a couple of these waiting.
pub(crate) async fn report_rest(throttle: Arc<Throttle>, clock: Arc<dyn Clock>, bound: String, line: Line) {
    let mut due = line.at.saturating_add(PERIOD);
    loop {
        let now = clock.now();
        if now < due {
            tokio::time::sleep(Duration::from_nanos(due - now)).await;
            continue;
        }
        let Some(line) = throttle.flush(now) else { return };
        tracing::info!(target: TARGET, bound, suppressed = line.suppressed, "refusals not logged one by one since the bound's last line");
        due = line.at.saturating_add(PERIOD);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ManualClock;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn one_line_a_second_counting_the_rest() {
        let clock = ManualClock::starting_at(Duration::from_secs(100));
        let t = Throttle::default();
        let start = clock.now();
        assert_eq!(t.refusal(&clock), Some(Line { suppressed: 0, at: start }), "the first refusal is logged");
        for _ in 0..9 {
            clock.advance(100 * MS);
            assert_eq!(t.refusal(&clock), None, "within the second: counted, not logged");
        }
        assert_eq!(clock.now(), start + 900_000_000);
        clock.advance(99 * MS);
        assert_eq!(t.refusal(&clock), None, "a nanosecond short of the second is still inside it");
        clock.advance(MS);
        let at = clock.now();
        assert_eq!(t.refusal(&clock), Some(Line { suppressed: 10, at }), "the first of the next second");
        assert_eq!(t.flush(at + PERIOD), None, "nothing came since: nothing to report");
        clock.advance(Duration::from_secs(60));
        assert_eq!(t.refusal(&clock).map(|l| l.suppressed), Some(0), "after a quiet minute, logged at once");
    }

    #[test]
    fn a_flush_reports_the_end_of_a_flood_and_gives_way_to_a_refusal() {
        let clock = ManualClock::starting_at(Duration::from_secs(5));
        let t = Throttle::default();
        let first = t.refusal(&clock).unwrap();
        for _ in 0..4 {
            clock.advance(10 * MS);
            assert_eq!(t.refusal(&clock), None);
        }
        assert_eq!(t.flush(first.at + PERIOD - 1), None, "not before the second is over");
        assert_eq!(t.flush(first.at + PERIOD), Some(Line { suppressed: 4, at: first.at + PERIOD }));
        assert_eq!(t.flush(first.at + 3 * PERIOD), None, "reported once");

        // A refusal takes the slot before the flush: its line reports the rest, the flush nothing.
        clock.set(Duration::from_secs(50));
        let line = t.refusal(&clock).unwrap();
        clock.advance(10 * MS);
        assert_eq!(t.refusal(&clock), None);
        clock.set(Duration::from_nanos(line.at + PERIOD));
        assert_eq!(t.refusal(&clock).map(|l| l.suppressed), Some(1));
        assert_eq!(t.flush(line.at + PERIOD), None, "the slot is taken");
    }

    #[test]
    fn threads_refusing_at_once_lose_no_count() {
        let clock = Arc::new(ManualClock::starting_at(Duration::from_secs(1)));
        let t = Arc::new(Throttle::default());
        let start = clock.now();
        let (threads, each) = (4, 20_000u64);
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (t, clock) = (t.clone(), clock.clone());
                std::thread::spawn(move || {
                    let mut lines = Vec::new();
                    for i in 0..each {
                        if i % 1000 == 0 {
                            // Time moves while the threads refuse: a new second every 2,500 refusals or so.
                            clock.advance(100 * MS);
                        }
                        lines.extend(t.refusal(clock.as_ref()));
                    }
                    lines
                })
            })
            .collect();
        let lines: Vec<Line> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
        let flushed = t.flush(clock.now() + PERIOD).map_or(0, |l| l.suppressed);
        let reported: u64 = lines.iter().map(|l| 1 + l.suppressed).sum::<u64>() + flushed;
        assert_eq!(reported, threads * each, "every refusal is a line or counted in one");
        let seconds = (clock.now() - start) / PERIOD + 1;
        assert!(lines.len() as u64 <= seconds, "{} lines in {seconds} seconds", lines.len());
        let mut at: Vec<Nanos> = lines.iter().map(|l| l.at).collect();
        at.sort();
        assert!(at.windows(2).all(|w| w[1] - w[0] >= PERIOD), "a second between lines: {at:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_rest_of_a_flood_is_reported_after_it_stops() {
        let clock = ManualClock::starting_at(Duration::from_secs(10));
        let t = Arc::new(Throttle::default());
        let line = t.refusal(&clock).unwrap();
        let rest = tokio::spawn(report_rest(t.clone(), Arc::new(clock.clone()), "b".into(), line));
        for _ in 0..7 {
            clock.advance(MS);
            assert_eq!(t.refusal(&clock), None);
        }
        // The flood stops. Once the second is over, the reporter takes the seven, then finds
        // nothing more and ends.
        clock.set(Duration::from_nanos(line.at + PERIOD));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(t.pending.load(Ordering::SeqCst), 0, "reported");
        clock.advance(Duration::from_secs(1));
        tokio::time::timeout(Duration::from_secs(3), rest).await.expect("the reporter ends").unwrap();
    }
}
