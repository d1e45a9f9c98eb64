//! Log lines for what can happen thousands of times a second: the first occurrence at once, then
//! at most one line a period, counting those left out. A leaf: it imports only `std` and tokio.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A line that may be written now: how many occurrences went unlogged before it, and when it was
/// claimed (the next line may come a period later).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Line {
    /// Occurrences left out since the last line.
    pub suppressed: u64,
    /// When the line was claimed, in nanoseconds on the caller's clock.
    pub at: u64,
}

/// When the next line may be written, and how many occurrences no line has reported yet.
/// Lock-free and allocation-free: an occurrence is an add, a load and at most one
/// compare-and-swap. Time is whatever clock the caller reads, in nanoseconds.
#[derive(Debug)]
pub(crate) struct Throttle {
    /// The shortest time between two lines, in nanoseconds.
    period: u64,
    /// The time before which no line is written; zero at first, so the first occurrence is
    /// logged.
    next: AtomicU64,
    /// Occurrences no line has reported, the one being logged included until it is.
    pending: AtomicU64,
}

impl Throttle {
    /// At most one line per `period`.
    pub(crate) const fn new(period: Duration) -> Throttle {
        Throttle { period: period.as_nanos() as u64, next: AtomicU64::new(0), pending: AtomicU64::new(0) }
    }

    /// An occurrence, at the time `now` reads. `Some`: log it, with the occurrences since the last
    /// line that went unlogged. `None`: a line was written less than a period ago; this one is
    /// counted for the next.
    pub(crate) fn occurred(&self, now: impl FnOnce() -> u64) -> Option<Line> {
        // Counted before the clock is read: a `flush` that finds nothing pending has read the
        // clock earlier, so this occurrence then sees the slot free and logs itself. Counted
        // after, it could land just behind a flush that gave up, and wait for the next flood to
        // be told.
        self.pending.fetch_add(1, Ordering::SeqCst);
        let at = now();
        if !self.claim(at) {
            return None;
        }
        // Only the holder of a slot takes the count, so this occurrence is in it;
        // `saturating_sub` covers a holder of the previous slot that was descheduled for a whole
        // period.
        let taken = self.pending.swap(0, Ordering::SeqCst);
        Some(Line { suppressed: taken.saturating_sub(1), at })
    }

    /// A period after a line, when the flood may have stopped and no occurrence would report the
    /// rest. `Some`: log how many came since. `None`: nothing to report, or an occurrence's own
    /// line took the slot (and reports them).
    pub(crate) fn flush(&self, now: u64) -> Option<Line> {
        if self.pending.load(Ordering::SeqCst) == 0 || !self.claim(now) {
            return None;
        }
        Some(Line { suppressed: self.pending.swap(0, Ordering::SeqCst), at: now })
    }

    /// Occurrences no line has reported yet.
    #[cfg(test)]
    pub(crate) fn unreported(&self) -> u64 {
        self.pending.load(Ordering::SeqCst)
    }

    /// Takes the slot of the line at `now`, if its time has come and no one else took it.
    fn claim(&self, now: u64) -> bool {
        let next = self.next.load(Ordering::SeqCst);
        now >= next
            && self
                .next
                .compare_exchange(next, now.saturating_add(self.period), Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
    }
}

/// Reports what occurred after `line` once nothing else will: `log` is called a period after each
/// line, until a period passes with nothing to report or an occurrence's own line takes over (that
/// occurrence starts its own). So the `suppressed` counts of a flood always add up, even after it
/// stops, and a throttle never has more than a couple of these waiting.
pub(crate) async fn report_rest(throttle: Arc<Throttle>, now: impl Fn() -> u64, line: Line, log: impl Fn(Line)) {
    let mut due = line.at.saturating_add(throttle.period);
    loop {
        let t = now();
        if t < due {
            tokio::time::sleep(Duration::from_nanos(due - t)).await;
            continue;
        }
        let Some(line) = throttle.flush(t) else { return };
        log(line);
        due = line.at.saturating_add(throttle.period);
    }
}

/// Nanoseconds since the process first asked, on the monotonic clock: time for throttles that
/// have no clock of their own (accept errors, a store's background failures).
pub(crate) fn monotonic_now() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Clock, ManualClock};

    const MS: Duration = Duration::from_millis(1);
    const SECOND: Duration = Duration::from_secs(1);
    const PERIOD: u64 = 1_000_000_000;

    #[test]
    fn one_line_a_period_counting_the_rest() {
        let clock = ManualClock::starting_at(Duration::from_secs(100));
        let t = Throttle::new(SECOND);
        let start = clock.now();
        assert_eq!(t.occurred(|| clock.now()), Some(Line { suppressed: 0, at: start }), "the first is logged");
        for _ in 0..9 {
            clock.advance(100 * MS);
            assert_eq!(t.occurred(|| clock.now()), None, "within the period: counted, not logged");
        }
        assert_eq!(clock.now(), start + 900_000_000);
        clock.advance(99 * MS);
        assert_eq!(t.occurred(|| clock.now()), None, "a millisecond short of the period is still inside it");
        clock.advance(MS);
        let at = clock.now();
        assert_eq!(t.occurred(|| clock.now()), Some(Line { suppressed: 10, at }), "the first of the next period");
        assert_eq!(t.flush(at + PERIOD), None, "nothing came since: nothing to report");
        clock.advance(Duration::from_secs(60));
        assert_eq!(t.occurred(|| clock.now()).map(|l| l.suppressed), Some(0), "after a quiet minute, logged at once");
    }

    #[test]
    fn the_period_is_the_throttles_own() {
        let t = Throttle::new(Duration::from_secs(5));
        let start = 7;
        assert_eq!(t.occurred(|| start), Some(Line { suppressed: 0, at: start }));
        for i in 1..=1000 {
            assert_eq!(t.occurred(|| start + i * 1_000_000), None);
        }
        assert_eq!(t.unreported(), 1000);
        let five = 5 * PERIOD;
        assert_eq!(t.occurred(|| start + five), Some(Line { suppressed: 1000, at: start + five }));
        assert_eq!(t.occurred(|| start + 3 * five), Some(Line { suppressed: 0, at: start + 3 * five }));
    }

    #[test]
    fn a_flush_reports_the_end_of_a_flood_and_gives_way_to_an_occurrence() {
        let clock = ManualClock::starting_at(Duration::from_secs(5));
        let t = Throttle::new(SECOND);
        let first = t.occurred(|| clock.now()).unwrap();
        for _ in 0..4 {
            clock.advance(10 * MS);
            assert_eq!(t.occurred(|| clock.now()), None);
        }
        assert_eq!(t.flush(first.at + PERIOD - 1), None, "not before the period is over");
        assert_eq!(t.flush(first.at + PERIOD), Some(Line { suppressed: 4, at: first.at + PERIOD }));
        assert_eq!(t.flush(first.at + 3 * PERIOD), None, "reported once");

        // An occurrence takes the slot before the flush: its line reports the rest, the flush
        // nothing.
        clock.set(Duration::from_secs(50));
        let line = t.occurred(|| clock.now()).unwrap();
        clock.advance(10 * MS);
        assert_eq!(t.occurred(|| clock.now()), None);
        clock.set(Duration::from_nanos(line.at + PERIOD));
        assert_eq!(t.occurred(|| clock.now()).map(|l| l.suppressed), Some(1));
        assert_eq!(t.flush(line.at + PERIOD), None, "the slot is taken");
    }

    #[test]
    fn threads_at_once_lose_no_count() {
        let clock = Arc::new(ManualClock::starting_at(Duration::from_secs(1)));
        let t = Arc::new(Throttle::new(SECOND));
        let start = clock.now();
        let (threads, each) = (4, 20_000u64);
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (t, clock) = (t.clone(), clock.clone());
                std::thread::spawn(move || {
                    let mut lines = Vec::new();
                    for i in 0..each {
                        if i % 1000 == 0 {
                            // Time moves while the threads count: a new period every 2,500 or so.
                            clock.advance(100 * MS);
                        }
                        lines.extend(t.occurred(|| clock.now()));
                    }
                    lines
                })
            })
            .collect();
        let lines: Vec<Line> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
        let flushed = t.flush(clock.now() + PERIOD).map_or(0, |l| l.suppressed);
        let reported: u64 = lines.iter().map(|l| 1 + l.suppressed).sum::<u64>() + flushed;
        assert_eq!(reported, threads * each, "every occurrence is a line or counted in one");
        let periods = (clock.now() - start) / PERIOD + 1;
        assert!(lines.len() as u64 <= periods, "{} lines in {periods} periods", lines.len());
        let mut at: Vec<u64> = lines.iter().map(|l| l.at).collect();
        at.sort();
        assert!(at.windows(2).all(|w| w[1] - w[0] >= PERIOD), "a period between lines: {at:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_rest_of_a_flood_is_reported_after_it_stops() {
        let clock = ManualClock::starting_at(Duration::from_secs(10));
        let t = Arc::new(Throttle::new(SECOND));
        let line = t.occurred(|| clock.now()).unwrap();
        let reported = Arc::new(std::sync::Mutex::new(Vec::new()));
        let rest = tokio::spawn(report_rest(
            t.clone(),
            {
                let clock = clock.clone();
                move || clock.now()
            },
            line,
            {
                let reported = reported.clone();
                move |line| reported.lock().unwrap().push(line.suppressed)
            },
        ));
        for _ in 0..7 {
            clock.advance(MS);
            assert_eq!(t.occurred(|| clock.now()), None);
        }
        // The flood stops. Once the period is over, the reporter takes the seven, then finds
        // nothing more and ends.
        clock.set(Duration::from_nanos(line.at + PERIOD));
        tokio::time::sleep(SECOND).await;
        assert_eq!(t.unreported(), 0, "reported");
        assert_eq!(*reported.lock().unwrap(), [7]);
        clock.advance(SECOND);
        tokio::time::timeout(Duration::from_secs(3), rest).await.expect("the reporter ends").unwrap();
        assert_eq!(*reported.lock().unwrap(), [7], "nothing more to say");
    }
}
