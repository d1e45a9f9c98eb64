//! Quotas in the engine: which period a caller's consumption belongs to, and the verdict on a
//! request against what is left of it.
//!
//! A quota's counter is the same 16 bytes as every other counter:
//!
//! - `reset: calendar`: `a` is the start of the period `c` was consumed in (Unix nanoseconds),
//!   `b` unused. Every caller shares the periods, so the table keeps the current one and asks
//!   the calendar again only when it ends.
//! - `reset: first-use`: `a` is the caller's anchor, the instant of its first admitted request
//!   (0: none yet); `b` the end of the period `c` was consumed in, as whole seconds after the
//!   anchor (anniversaries keep the anchor's wall-clock time, so the offset is whole seconds; a
//!   `u32` of seconds spans 136 years). Keeping the end, not the start, is what makes a decision
//!   cheap: a request before it is in the same period, and only a request after it needs the
//!   calendar arithmetic that finds the next anniversary, the costliest step a quota decision
//!   can take (docs/benchmarks.md has its figure). The start is computed when someone asks to
//!   see it.
//!
//! A counter whose period has ended reads as nothing consumed: a period that ended while nobody
//! asked (or while opbound was down) is over.

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::clock::Nanos;
use super::counter::{Counter, Verdict};
use crate::period::Window;
use crate::policy::bound::Periods;

const SECOND: u64 = 1_000_000_000;

/// A quota's periods, with the current calendar period kept so that a decision costs no time
/// zone arithmetic until the period ends.
#[derive(Debug)]
pub struct QuotaClock {
    periods: Periods,
    /// The calendar period last asked for (first-use quotas do not use it).
    current: ArcSwap<Window>,
}

impl QuotaClock {
    /// The clock of a quota's periods.
    pub fn new(periods: Periods) -> QuotaClock {
        QuotaClock { periods, current: ArcSwap::from_pointee(Window { start: 0, end: 0 }) }
    }

    /// The periods this clock cuts.
    pub fn periods(&self) -> &Periods {
        &self.periods
    }

    /// The period a request at `now` falls in, for a caller with this counter, as a decision
    /// needs it: its end is exact, and so is its start, except for a first-use caller still in
    /// the period its counter was consumed in, whose start is not computed (0). What is shown
    /// to people comes from [`QuotaClock::exact_window`].
    pub fn window(&self, counter: Counter, now: Nanos) -> Window {
        if let (Periods::FirstUse(_), Some(end)) = (&self.periods, kept_end(counter))
            && counter.a <= now
            && now < end
        {
            return Window { start: 0, end };
        }
        self.exact_window(counter, now)
    }

    /// The period a request at `now` falls in, for a caller with this counter, start and end.
    pub fn exact_window(&self, counter: Counter, now: Nanos) -> Window {
        match &self.periods {
            Periods::Calendar(calendar) => {
                let kept = **self.current.load();
                if kept.contains(now) {
                    return kept;
                }
                let fresh = calendar.window(now);
                self.current.store(Arc::new(fresh));
                fresh
            }
            Periods::FirstUse(schedule) => {
                let anchor = if counter.a == 0 { now } else { counter.a };
                schedule.window(anchor, now)
            }
        }
    }

    /// Whether `reset: first-use`.
    pub fn first_use(&self) -> bool {
        matches!(self.periods, Periods::FirstUse(_))
    }
}

/// The end of the period a first-use counter was consumed in, if it has one.
fn kept_end(counter: Counter) -> Option<Nanos> {
    (counter.a != 0 && counter.b != 0).then(|| counter.a.saturating_add(u64::from(counter.b) * SECOND))
}

/// A first-use period's end as the counter keeps it: whole seconds after the anchor.
fn end_offset(anchor: Nanos, window: Window) -> u32 {
    u32::try_from(window.end.saturating_sub(anchor) / SECOND).unwrap_or(u32::MAX)
}

/// What this caller has consumed in `window`, and the counter that says so.
pub(crate) fn consumed(counter: Counter, now: Nanos, window: Window, first_use: bool) -> (u32, Counter) {
    if first_use {
        let anchor = if counter.a == 0 { now } else { counter.a };
        let offset = end_offset(anchor, window);
        let used = if counter.a != 0 && counter.b == offset { counter.c } else { 0 };
        (used, Counter { a: anchor, b: offset, c: used })
    } else {
        // A counter in a later period than `now`'s: a request whose time was read before
        // another's that committed first. It counts in the counter's period; the one before
        // must not replace it.
        let used = if counter.a >= window.start { counter.c } else { 0 };
        (used, Counter { a: counter.a.max(window.start), b: 0, c: used })
    }
}

/// A request of `cost` against a quota of `limit` per period, in the period `window` that `now`
/// falls in. A refused request waits for the next period: nothing comes back before it.
pub(crate) fn evaluate(
    counter: Counter,
    now: Nanos,
    cost: u32,
    limit: u32,
    window: Window,
    first_use: bool,
) -> Verdict {
    let (used, current) = consumed(counter, now, window, first_use);
    let admitted = u64::from(used) + u64::from(cost) <= u64::from(limit);
    let after = if admitted { used + cost } else { used };
    let until_end = window.end.saturating_sub(now).max(1);
    Verdict {
        admitted,
        next: Counter { c: after, ..current },
        remaining: limit.saturating_sub(after),
        reset: until_end,
        retry: if admitted { 0 } else { until_end },
        period_end: Some(window.end),
    }
}

/// An operator's change to what a caller consumed in the current period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adjustment {
    /// Consumed this much.
    Set(u32),
    /// Consumed this much more (less, when negative).
    Add(i64),
}

impl Adjustment {
    /// What `used` becomes, held between 0 and `u32::MAX`.
    pub fn apply(self, used: u32) -> u32 {
        match self {
            Adjustment::Set(n) => n,
            Adjustment::Add(n) => (i64::from(used).saturating_add(n)).clamp(0, i64::from(u32::MAX)) as u32,
        }
    }
}

/// One caller's standing on a quota, as an operator looks it up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standing {
    /// Whether the caller has a counter of its own.
    pub tracked: bool,
    /// Cost units consumed in the current period.
    pub consumed: u32,
    /// The most a period allows.
    pub limit: u32,
    /// The current period (for a first-use caller never seen, the one its first request now
    /// would start).
    pub window: Window,
}

/// When a quota counter holds nothing worth keeping: the end of the period it was consumed in,
/// or 0 when that period is not the current one.
pub(crate) fn idle_at(counter: Counter, window: Window, first_use: bool) -> Nanos {
    let current = if first_use {
        counter.a != 0 && window.end > counter.a && counter.b == end_offset(counter.a, window)
    } else {
        counter.a == window.start
    };
    if current && counter.c > 0 { window.end } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::period::{Calendar, FirstUse, Period, Zone};

    fn at(rfc3339: &str) -> Nanos {
        let t: jiff::Timestamp = rfc3339.parse().unwrap();
        t.as_nanosecond() as Nanos
    }

    fn monthly() -> QuotaClock {
        QuotaClock::new(Periods::Calendar(Calendar::new(Period::parse("P1M").unwrap(), Zone::utc()).unwrap()))
    }

    /// Runs a request and keeps the counter if it was admitted, as the table does.
    fn run(clock: &QuotaClock, counter: &mut Counter, now: Nanos, cost: u32, limit: u32) -> Verdict {
        let window = clock.window(*counter, now);
        let v = evaluate(*counter, now, cost, limit, window, clock.first_use());
        if v.admitted {
            *counter = v.next;
        }
        v
    }

    #[test]
    fn a_calendar_month_is_used_up_and_comes_back_on_the_first() {
        let clock = monthly();
        let mut c = Counter::default();
        let now = at("2026-01-31T23:00:00Z");
        assert!(run(&clock, &mut c, now, 3, 5).admitted);
        let v = run(&clock, &mut c, now, 3, 5);
        assert!(!v.admitted, "3 + 3 is over 5");
        assert_eq!(v.remaining, 2);
        assert_eq!(v.retry, at("2026-02-01T00:00:00Z") - now, "until the month ends");
        assert_eq!(v.reset, v.retry);
        // The refused request consumed nothing: two are still there.
        assert!(run(&clock, &mut c, now, 2, 5).admitted);
        assert!(!run(&clock, &mut c, at("2026-01-31T23:59:59.999Z"), 1, 5).admitted);
        let v = run(&clock, &mut c, at("2026-02-01T00:00:00Z"), 5, 5);
        assert!(v.admitted, "February is a new period");
        assert_eq!(v.remaining, 0);
        assert_eq!(v.reset, at("2026-03-01T00:00:00Z") - at("2026-02-01T00:00:00Z"));
    }

    #[test]
    fn a_period_that_ended_unseen_is_over() {
        let clock = monthly();
        let mut c = Counter::default();
        assert!(run(&clock, &mut c, at("2026-03-10T00:00:00Z"), 5, 5).admitted);
        let window = clock.window(c, at("2026-03-20T00:00:00Z"));
        assert_eq!(idle_at(c, window, false), at("2026-04-01T00:00:00Z"));
        // Months later, the counter from March means nothing.
        let later = at("2026-09-02T00:00:00Z");
        assert_eq!(idle_at(c, clock.window(c, later), false), 0);
        assert!(run(&clock, &mut c, later, 5, 5).admitted);
    }

    #[test]
    fn first_use_periods_are_anniversaries_of_the_first_admitted_request() {
        let clock = QuotaClock::new(Periods::FirstUse(FirstUse::new(Period::parse("P1M").unwrap(), Zone::utc())));
        let mut c = Counter::default();
        let first = at("2026-01-31T10:00:00Z");
        let v = run(&clock, &mut c, first, 4, 4);
        assert!(v.admitted);
        assert_eq!(c.a, first, "the anchor");
        assert_eq!(v.reset, at("2026-02-28T10:00:00Z") - first);
        assert!(!run(&clock, &mut c, at("2026-02-28T09:59:59Z"), 1, 4).admitted);
        assert!(run(&clock, &mut c, at("2026-02-28T10:00:00Z"), 4, 4).admitted, "the second period");
        assert!(!run(&clock, &mut c, at("2026-03-30T10:00:00Z"), 1, 4).admitted);
        // The third period starts on the 31st again: anniversaries are counted from the anchor.
        let v = run(&clock, &mut c, at("2026-03-31T10:00:00Z"), 1, 4);
        assert!(v.admitted);
        assert_eq!(v.remaining, 3);
        assert_eq!(c.a, first, "the anchor never moves");
        // Skipping a few periods: the current one is found, consumption from before is gone.
        let v = run(&clock, &mut c, at("2026-08-01T00:00:00Z"), 4, 4);
        assert!(v.admitted);
        assert_eq!(v.reset, at("2026-08-31T10:00:00Z") - at("2026-08-01T00:00:00Z"));
    }

    /// The request path takes a first-use period's end from the counter; it must agree with the
    /// calendar arithmetic on every request, across month ends and both clock changes.
    #[test]
    fn a_first_use_period_kept_in_the_counter_agrees_with_the_calendar() {
        for (period, zone) in [("P1M", "UTC"), ("P1D", "Europe/Berlin"), ("P1W", "America/New_York"), ("PT30H", "UTC")]
        {
            let clock = QuotaClock::new(Periods::FirstUse(FirstUse::new(
                Period::parse(period).unwrap(),
                Zone::named(zone).unwrap(),
            )));
            let mut fast = Counter::default();
            let mut exact = Counter::default();
            // From 30 January, past both of 2026's clock changes, in steps of 7h 13m 17.5s.
            let mut now = at("2026-01-30T22:30:00.25Z");
            let mut took_the_counter = 0;
            while now < at("2026-11-30T00:00:00Z") {
                let w = clock.window(fast, now);
                let e = clock.exact_window(exact, now);
                assert_eq!(w.end, e.end, "{period} {zone} at {now}");
                took_the_counter += usize::from(w.start == 0);
                let a = evaluate(fast, now, 1, 3, w, true);
                let b = evaluate(exact, now, 1, 3, e, true);
                assert_eq!((a.admitted, a.remaining, a.reset), (b.admitted, b.remaining, b.reset), "{period} {zone}");
                if a.admitted {
                    fast = a.next;
                    exact = b.next;
                }
                assert_eq!(fast, exact);
                now += 26_000_500_000_000;
            }
            assert!(took_the_counter > 100, "{period} {zone}: the counter's end was used {took_the_counter} times");
        }
    }

    #[test]
    fn an_operator_sees_a_first_use_period_with_its_start() {
        let clock = QuotaClock::new(Periods::FirstUse(FirstUse::new(Period::parse("P1M").unwrap(), Zone::utc())));
        let mut c = Counter::default();
        run(&clock, &mut c, at("2026-01-31T10:00:00Z"), 1, 4);
        let now = at("2026-03-05T00:00:00Z");
        run(&clock, &mut c, now, 1, 4);
        assert_eq!(clock.window(c, now).start, 0, "a decision does not compute it");
        let shown = clock.exact_window(c, now);
        assert_eq!(shown, Window { start: at("2026-02-28T10:00:00Z"), end: at("2026-03-31T10:00:00Z") });
    }

    #[test]
    fn an_adjustment_stays_between_zero_and_the_most_a_counter_holds() {
        assert_eq!(Adjustment::Set(7).apply(100), 7);
        assert_eq!(Adjustment::Add(-500).apply(100), 0);
        assert_eq!(Adjustment::Add(500).apply(100), 600);
        assert_eq!(Adjustment::Add(i64::MAX).apply(100), u32::MAX);
        assert_eq!(Adjustment::Add(i64::MIN).apply(100), 0);
    }

    #[test]
    fn cost_counts_and_a_refusal_consumes_nothing() {
        let clock = monthly();
        let mut c = Counter::default();
        let now = at("2026-06-15T12:00:00Z");
        assert!(run(&clock, &mut c, now, 10, 25).admitted);
        assert!(run(&clock, &mut c, now, 10, 25).admitted);
        for _ in 0..3 {
            assert!(!run(&clock, &mut c, now, 10, 25).admitted);
        }
        assert_eq!(c.c, 20);
        let v = run(&clock, &mut c, now, 5, 25);
        assert!(v.admitted);
        assert_eq!(v.remaining, 0);
    }
}
