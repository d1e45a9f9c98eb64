//! The three algorithms, pure: each maps a caller's counter, `now` and a cost to a verdict and
//! the counter to keep if the request is committed. No locks, no clocks, plain numbers.

use super::clock::{Nanos, SECOND};
use crate::policy::{Algorithm, BoundDef};

/// `a × b / c`, rounded down, in 64 bits when the product fits (the common case) and 128 otherwise.
fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    match a.checked_mul(b) {
        Some(p) => p / c,
        None => (u128::from(a) * u128::from(b) / u128::from(c)) as u64,
    }
}

/// One caller's state for one bound, 16 bytes whatever the algorithm:
/// sliding window `(window index, previous count, current count)`, token bucket
/// `(theoretical arrival time, -, -)`, concurrency `(-, in flight, -)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counter {
    /// Sliding window: the current window's index (`now / window`). Token bucket: the
    /// theoretical arrival time, in nanoseconds. Concurrency: unused.
    pub a: u64,
    /// Sliding window: the previous window's count. Concurrency: cost in flight. Token bucket:
    /// unused.
    pub b: u32,
    /// Sliding window: the current window's count. Otherwise unused.
    pub c: u32,
}

/// What a bound says about one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the bound has room for the request now.
    pub admitted: bool,
    /// The counter to store if the request is committed (meaningless when refused).
    pub next: Counter,
    /// Budget left after this request (if admitted) or now (if refused).
    pub remaining: u32,
    /// What `RateLimit-Reset` reports, in nanoseconds. Sliding window: until the current window
    /// ends (at most the window). Token bucket: until the bucket is full again (at most
    /// `burst × window / limit`). Concurrency: 0, since nothing comes back with time.
    pub reset: Nanos,
    /// Nanoseconds until this request could pass, when refused; 0 when admitted.
    pub retry: Nanos,
    /// A quota's period end (Unix nanoseconds); None for the other algorithms.
    pub period_end: Option<Nanos>,
}

/// A bound's algorithm with its numbers, ready to evaluate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rate {
    /// At most `limit` per `window`, by the two-window estimate.
    SlidingWindow {
        /// Cost admitted per window; never zero.
        limit: u32,
        /// The window, in nanoseconds; never zero.
        window: Nanos,
    },
    /// GCRA: one token every `window / limit`, at most `burst` tokens.
    TokenBucket {
        /// Tokens refilled per window; never zero.
        limit: u32,
        /// The refill window, in nanoseconds; never zero.
        window: Nanos,
        /// The most tokens the bucket holds; never zero.
        burst: u32,
    },
    /// At most `limit` in flight; a request holds its share until its response ends.
    Concurrency {
        /// Cost in flight at once; never zero.
        limit: u32,
    },
    /// At most `limit` consumed per period. The period a request falls in depends on the time
    /// (and, for first-use quotas, on the caller): the key table fills `window` in for each
    /// decision from the bound's [`QuotaClock`](super::quota::QuotaClock).
    Quota {
        /// Cost admitted per period; never zero.
        limit: u32,
        /// The period the decision falls in.
        window: crate::period::Window,
        /// Whether periods count from each caller's first use (`reset: first-use`).
        first_use: bool,
    },
}

impl Rate {
    /// The algorithm and numbers of a validated bound.
    pub fn of(def: &BoundDef) -> Rate {
        let limit = def.limit.get();
        match def.algorithm {
            Algorithm::SlidingWindow { window } => Rate::SlidingWindow { limit, window: window.nanos() },
            Algorithm::TokenBucket { window, burst } => {
                Rate::TokenBucket { limit, window: window.nanos(), burst: burst.get() }
            }
            Algorithm::Concurrency => Rate::Concurrency { limit },
            Algorithm::Quota { ref periods } => Rate::Quota {
                limit,
                window: crate::period::Window { start: 0, end: 0 },
                first_use: matches!(periods, crate::policy::bound::Periods::FirstUse(_)),
            },
        }
    }

    /// The most the budget ever holds: what `RateLimit-Limit` reports.
    pub fn capacity(&self) -> u32 {
        match *self {
            Rate::SlidingWindow { limit, .. } | Rate::Concurrency { limit } | Rate::Quota { limit, .. } => limit,
            Rate::TokenBucket { burst, .. } => burst,
        }
    }

    /// Decides a request of `cost` against a counter.
    pub fn evaluate(&self, counter: Counter, now: Nanos, cost: u32) -> Verdict {
        match *self {
            Rate::SlidingWindow { limit, window } => sliding(counter, now, cost, limit, window),
            Rate::TokenBucket { limit, window, burst } => gcra(counter, now, cost, limit, window, burst),
            Rate::Quota { limit, window, first_use } => {
                super::quota::evaluate(counter, now, cost, limit, window, first_use)
            }
            Rate::Concurrency { limit } => {
                let in_flight = counter.b;
                let admitted = u64::from(in_flight) + u64::from(cost) <= u64::from(limit);
                let after = if admitted { in_flight + cost } else { in_flight };
                Verdict {
                    admitted,
                    next: Counter { b: after, ..counter },
                    remaining: limit.saturating_sub(after),
                    reset: 0,
                    // Nothing says when a permit comes back; a second is a polite guess.
                    retry: if admitted { 0 } else { SECOND },
                    period_end: None,
                }
            }
        }
    }

    /// A quota's period end (Unix nanoseconds), once the period is filled in.
    pub fn period_end(&self) -> Option<Nanos> {
        match *self {
            Rate::Quota { window, .. } => Some(window.end),
            _ => None,
        }
    }

    /// Returns permits taken by a committed concurrency request.
    pub fn release(&self, counter: Counter, cost: u32) -> Counter {
        Counter { b: counter.b.saturating_sub(cost), ..counter }
    }

    /// When the counter becomes indistinguishable from a fresh one, so it may be swept.
    /// `Nanos::MAX` when that cannot be known (permits in flight).
    pub fn idle_at(&self, counter: Counter) -> Nanos {
        match *self {
            Rate::SlidingWindow { window, .. } => {
                if counter.b == 0 && counter.c == 0 {
                    0
                } else {
                    counter.a.saturating_add(2).saturating_mul(window)
                }
            }
            Rate::TokenBucket { .. } => counter.a,
            Rate::Quota { window, first_use, .. } => super::quota::idle_at(counter, window, first_use),
            Rate::Concurrency { .. } => {
                if counter.b == 0 {
                    0
                } else {
                    Nanos::MAX
                }
            }
        }
    }
}

/// The two-window estimate: `previous × (1 − elapsed share) + current`, the previous window's
/// share rounded down, so a caller who paces itself gets the whole limit in every window.
fn sliding(counter: Counter, now: Nanos, cost: u32, limit: u32, window: Nanos) -> Verdict {
    let index = now / window;
    let (prev, curr) = if counter.a == index {
        (counter.b, counter.c)
    } else if counter.a + 1 == index {
        (counter.c, 0)
    } else {
        (0, 0)
    };
    let elapsed = now - index * window;
    let weighted_prev = mul_div(u64::from(prev), window - elapsed, window);
    let used = weighted_prev + u64::from(curr);
    let admitted = used + u64::from(cost) <= u64::from(limit);
    let curr_after = if admitted { curr + cost } else { curr };
    let remaining = u64::from(limit).saturating_sub(weighted_prev + u64::from(curr_after)) as u32;
    let start = index * window;
    // Reset is the end of the current window: from then on nothing counted before this window
    // weighs, and this window's count starts to decay. It never exceeds the window and falls
    // steadily within it, whatever the traffic; the exact wait of a refusal is `retry`.
    let reset = start + window - now;
    let retry = if admitted {
        0
    } else if u64::from(curr) + u64::from(cost) <= u64::from(limit) {
        // Later in this window, once enough of the previous window has decayed.
        (start + decay(prev, limit - curr - cost, window)).saturating_sub(now).max(1)
    } else {
        // In the next window, once enough of this window's count has decayed.
        start + window + decay(curr, limit - cost, window) - now
    };
    Verdict { admitted, next: Counter { a: index, b: prev, c: curr_after }, remaining, reset, retry, period_end: None }
}

/// How far into a window a previous count of `count` weighs no more than `budget`: the least `e`
/// with `floor(count × (window − e) / window) ≤ budget`.
fn decay(count: u32, budget: u32, window: Nanos) -> Nanos {
    if count <= budget {
        return 0;
    }
    let w = u128::from(window);
    window - (((u128::from(budget) + 1) * w - 1) / u128::from(count)) as u64
}

/// GCRA: the counter holds the theoretical arrival time (TAT); a request of `cost` moves it
/// `cost × window / limit` on, and passes while TAT stays within `burst × window / limit` of now.
fn gcra(counter: Counter, now: Nanos, cost: u32, limit: u32, window: Nanos, burst: u32) -> Verdict {
    let per = |tokens: u32| mul_div(u64::from(tokens), window, u64::from(limit));
    let tolerance = per(burst);
    let tat = counter.a.max(now);
    let new_tat = tat + per(cost);
    let admitted = new_tat - now <= tolerance;
    let held = if admitted { new_tat } else { tat };
    let tokens = |span: u64| mul_div(span, u64::from(limit), window).min(u64::from(u32::MAX)) as u32;
    let remaining = tokens(tolerance.saturating_sub(held - now)).min(burst);
    Verdict {
        admitted,
        next: Counter { a: held, ..counter },
        remaining,
        reset: held - now,
        retry: if admitted { 0 } else { new_tat - tolerance - now },
        period_end: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = SECOND;

    /// Runs requests and commits the admitted ones, as the store does.
    fn run(rate: Rate, counter: &mut Counter, now: Nanos, cost: u32) -> Verdict {
        let v = rate.evaluate(*counter, now, cost);
        if v.admitted {
            *counter = v.next;
        }
        v
    }

    #[test]
    fn the_worked_token_bucket() {
        // Capacity 10, refilled 2 per second.
        let rate = Rate::TokenBucket { limit: 2, window: S, burst: 10 };
        let t0 = 1000 * S;
        let mut c = Counter::default();
        for i in 0..10 {
            let v = run(rate, &mut c, t0, 1);
            assert!(v.admitted, "request {i}");
            assert_eq!(v.remaining, 9 - i);
        }
        // The eleventh is eligible half a second later, and told to retry in a whole second.
        let v = run(rate, &mut c, t0, 1);
        assert!(!v.admitted);
        assert_eq!(v.retry, S / 2);
        assert_eq!(super::super::decision::whole_seconds(v.retry), 1);
        assert!(run(rate, &mut c, t0 + S / 2 - 1, 1).admitted.eq(&false));
        assert!(run(rate, &mut c, t0 + S / 2, 1).admitted);

        // From empty, three idle seconds refill six tokens: a cost-4 request leaves 2.
        let mut c = Counter::default();
        for _ in 0..10 {
            run(rate, &mut c, t0, 1);
        }
        let v = run(rate, &mut c, t0 + 3 * S, 4);
        assert!(v.admitted);
        assert_eq!(v.remaining, 2);
        let v = run(rate, &mut c, t0 + 3 * S, 4);
        assert!(!v.admitted);
        assert_eq!(v.retry, S, "the next cost-4 request waits one second");
        assert!(run(rate, &mut c, t0 + 4 * S, 4).admitted);
    }

    #[test]
    fn the_boundary_burst_is_not_twice_the_limit() {
        // 100 per minute. A fixed window would admit 100 just before the boundary and 100 just
        // after; the two-window estimate still counts the first hundred.
        let rate = Rate::SlidingWindow { limit: 100, window: 60 * S };
        let boundary = 600 * S;
        let mut c = Counter::default();
        let before = (0..100).filter(|_| run(rate, &mut c, boundary - S, 1).admitted).count();
        let after = (0..100).filter(|_| run(rate, &mut c, boundary + S, 1).admitted).count();
        assert_eq!(before, 100);
        assert!(before + after < 200, "{after} more passed just after the boundary");
        // One second into the new window, the previous hundred still weigh 59/60 of themselves.
        assert_eq!(after, 2, "100 - floor(100 × 59/60) = 2 fit");
    }

    #[test]
    fn refused_requests_are_not_counted() {
        // 10 per 10 s. A caller who retries every 10 ms while refused (6,000 requests in a
        // minute) still gets about ten per window, and is never locked out.
        let rate = Rate::SlidingWindow { limit: 10, window: 10 * S };
        let mut c = Counter::default();
        let mut per_window = [0u32; 6];
        let start = 1000 * S;
        for tick in 0..6000u64 {
            let now = start + tick * (S / 100);
            if run(rate, &mut c, now, 1).admitted {
                per_window[(tick / 1000) as usize] += 1;
            }
        }
        assert_eq!(per_window[0], 10);
        for (w, n) in per_window.iter().enumerate() {
            assert!((9..=10).contains(n), "window {w}: {n} admitted: {per_window:?}");
        }
        let total: u32 = per_window.iter().sum();
        assert!(total >= 57, "{total} over six windows of ten: {per_window:?}");
    }

    #[test]
    fn sliding_window_retry_after_is_from_the_deficit() {
        let rate = Rate::SlidingWindow { limit: 10, window: 60 * S };
        let mut c = Counter::default();
        for _ in 0..10 {
            run(rate, &mut c, 0, 1);
        }
        // Full for the rest of this window; in the next, the ten weigh floor(10 × (1 − e/60)),
        // which is 9 as soon as e > 0.
        let v = run(rate, &mut c, 30 * S, 1);
        assert!(!v.admitted);
        assert_eq!(v.retry, 30 * S + 1);
        assert_eq!(super::super::decision::whole_seconds(v.retry), 31);
        assert!(!run(rate, &mut c, 60 * S, 1).admitted, "not at the very boundary");
        assert!(run(rate, &mut c, 60 * S + 1, 1).admitted, "but right after it");
        // Reset is the end of the current window, 30 s away; the refusal waits a little longer.
        assert_eq!(v.reset, 30 * S);
        let mut fresh = Counter::default();
        for _ in 0..10 {
            run(rate, &mut fresh, 0, 1);
        }
        assert_eq!(run(rate, &mut fresh, 114 * S, 1).remaining, 8, "not quite whole at 114 s");
        assert_eq!(
            run(rate, &mut fresh, 114 * S + 1, 1).remaining,
            8,
            "whole just after: one more request leaves 8 of 10"
        );

        // Room in this window once the previous one decays: 6 in the previous window, 2 now,
        // limit 10, cost 4: floor(6 × (1 − e/60)) ≤ 4 from e > 10 s.
        let mut c = Counter { a: 1, b: 6, c: 2 };
        let v = rate.evaluate(c, 60 * S + 5 * S, 4);
        assert!(!v.admitted);
        assert_eq!(v.retry, 5 * S + 1);
        assert!(run(rate, &mut c, 70 * S + 1, 4).admitted);
    }

    #[test]
    fn concurrency_counts_in_flight() {
        let rate = Rate::Concurrency { limit: 2 };
        let mut c = Counter::default();
        assert!(run(rate, &mut c, 0, 1).admitted);
        assert!(run(rate, &mut c, 0, 1).admitted);
        let v = run(rate, &mut c, 0, 1);
        assert!(!v.admitted);
        assert_eq!(v.retry, S);
        c = rate.release(c, 1);
        assert_eq!(run(rate, &mut c, 0, 1).remaining, 0);
        assert_eq!(rate.idle_at(c), Nanos::MAX);
        assert_eq!(rate.idle_at(rate.release(rate.release(c, 1), 1)), 0);
    }

    #[test]
    fn idle_times() {
        let sw = Rate::SlidingWindow { limit: 5, window: 10 };
        assert_eq!(sw.idle_at(Counter { a: 3, b: 0, c: 1 }), 50);
        assert_eq!(sw.idle_at(Counter::default()), 0);
        let tb = Rate::TokenBucket { limit: 1, window: 10, burst: 1 };
        assert_eq!(tb.idle_at(Counter { a: 77, b: 0, c: 0 }), 77);
    }

    /// Issue 10, item 7: a PT10S bound reported `RateLimit-Reset: 18`, and one request could move
    /// Reset from 4 to 34 in the same second. Reset is defined per algorithm (see `Verdict`);
    /// over varied traffic it never exceeds what the definition allows, and for the sliding
    /// window it only falls within a window.
    #[test]
    fn reset_never_exceeds_its_definition() {
        let sliding = Rate::SlidingWindow { limit: 5, window: 10 * S };
        let bucket = Rate::TokenBucket { limit: 2, window: S, burst: 10 };
        let mut counters = [Counter::default(), Counter::default()];
        let mut last_sliding: Option<(Nanos, Nanos)> = None;
        // A bursty caller: clumps of requests at uneven steps, some refused.
        let mut now = 1_000 * S;
        for step in 0..2_000u64 {
            now += (step * 7_919 % 13) * S / 7 + 1;
            for (rate, c) in [sliding, bucket].iter().zip(counters.iter_mut()) {
                let cost = if matches!(rate, Rate::TokenBucket { .. }) { 1 + (step % 4) as u32 } else { 1 };
                let v = run(*rate, c, now, cost);
                match *rate {
                    Rate::SlidingWindow { window, .. } => {
                        assert!(v.reset <= window && v.reset > 0, "reset {} at {now}", v.reset);
                        assert_eq!(v.reset, window - now % window, "the end of the current window");
                        if let Some((at, reset)) = last_sliding
                            && at / window == now / window
                        {
                            assert!(v.reset <= reset, "reset rose within a window: {reset} then {}", v.reset);
                        }
                        last_sliding = Some((now, v.reset));
                    }
                    Rate::TokenBucket { limit, window, burst } => {
                        let full = mul_div(u64::from(burst), window, u64::from(limit));
                        assert!(v.reset <= full, "reset {} beyond a full refill {full}", v.reset);
                        assert_eq!(v.reset, c.a.saturating_sub(now), "until the bucket is full");
                    }
                    Rate::Concurrency { .. } | Rate::Quota { .. } => unreachable!(),
                }
            }
        }
    }
}
