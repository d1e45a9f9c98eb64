//! The three algorithms, pure: each maps a caller's counter, `now` and a cost to a verdict and
//! the counter to keep if the request is committed. No locks, no clocks, plain numbers.

use super::clock::{Nanos, SECOND};
use super::counter::{Counter, Verdict};
use crate::policy::{Algorithm, BoundDef};

/// `a × b / c`, rounded up, for `b ≤ c` (so the result is at most `a`).
#[inline(always)]
fn mul_div_ceil(a: u64, b: u64, c: u64) -> u64 {
    match a.checked_mul(b) {
        Some(p) => p.div_ceil(c),
        None => (u128::from(a) * u128::from(b)).div_ceil(u128::from(c)) as u64,
    }
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
    /// decision from the bound's `QuotaClock`.
    Quota {
        /// Cost admitted per period; never zero.
        limit: u32,
        /// The period the decision falls in (its start 0 when the decision did not need it: see
        /// `QuotaClock::window`).
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
    // Always inline, as `sliding` is: a verdict returned through memory stalled its reader.
    #[inline(always)]
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

    /// [`evaluate`](Rate::evaluate) written into `out`, arm by arm. Where several verdicts are
    /// kept (`run_many`), the verdict the arms merge into was built on the stack and copied into
    /// its place in wider moves than its fields were stored with, which the CPU cannot forward
    /// (a fifth of `run_many`'s samples); written in place, each field is stored once, where it
    /// is read.
    #[inline(always)]
    pub fn evaluate_into(&self, counter: Counter, now: Nanos, cost: u32, out: &mut Verdict) {
        match *self {
            Rate::SlidingWindow { limit, window } => *out = sliding(counter, now, cost, limit, window),
            Rate::TokenBucket { limit, window, burst } => *out = gcra(counter, now, cost, limit, window, burst),
            _ => *out = self.evaluate(counter, now, cost),
        }
    }

    /// A quota's period end (Unix nanoseconds), once the period is filled in.
    pub fn period_end(&self) -> Option<Nanos> {
        match *self {
            Rate::Quota { window, .. } => Some(window.end),
            _ => None,
        }
    }

    /// Charges `delta` (a refund when negative) whatever the limit says: a reservation
    /// committed, or a charge corrected to what the upstream reported. The counter may go over
    /// its limit; the caller is then refused until it has paid back. Concurrency counters are
    /// never charged this way.
    pub fn charge(&self, counter: Counter, now: Nanos, delta: i64) -> Counter {
        let add = |n: u32, d: i64| (i64::from(n) + d).clamp(0, i64::from(u32::MAX)) as u32;
        match *self {
            Rate::SlidingWindow { window, .. } => {
                // Never an older window than the counter's (see `sliding`).
                let index = (now / window).max(counter.a);
                let (prev, curr) = rolled(counter, index);
                // A refund larger than this window's count comes out of the previous window's.
                let short = (i64::from(curr) + delta).min(0);
                Counter { a: index, b: add(prev, short), c: add(curr, delta) }
            }
            Rate::TokenBucket { limit, window, .. } => {
                let (l, span) = (u128::from(limit), u128::from(delta.unsigned_abs()) * u128::from(window));
                let tat = Tat::of(counter, limit);
                let tat = if delta >= 0 { tat.max(u128::from(now) * l) + span } else { tat.saturating_sub(span) };
                Tat::counter(tat, limit)
            }
            Rate::Quota { window, first_use, .. } => {
                let (used, current) = super::quota::consumed(counter, now, window, first_use);
                Counter { c: add(used, delta), ..current }
            }
            Rate::Concurrency { .. } => counter,
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
            Rate::TokenBucket { .. } => counter.a + u64::from(counter.b > 0),
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

/// The two-window estimate: a request passes when `previous × (1 − elapsed share) + current +
/// cost ≤ limit`, compared exactly. The other terms are whole, so it is the same as the previous
/// window's share rounded *up*: rounded down, it let one request more through at a boundary,
/// which is a third over a bound of three (issue 63).
// Always inline: out of line, its verdict came back through memory and the counter in it was
// read back wider than it was written, which the CPU cannot forward.
#[inline(always)]
pub(crate) fn sliding(counter: Counter, now: Nanos, cost: u32, limit: u32, window: Nanos) -> Verdict {
    // A counter already in a later window than `now`'s: a request whose time was read before
    // another's that committed first. It counts as at the start of the counter's window; taken
    // as it came, it would replace the counter with an older one and forget this window.
    let now = now.max(counter.a.saturating_mul(window));
    let index = window_index(counter, now, window);
    let (prev, curr) = rolled(counter, index);
    let elapsed = now - index * window;
    // A caller with nothing in the previous window (the commonest) skips a division.
    let weighted_prev = if prev == 0 { 0 } else { mul_div_ceil(u64::from(prev), window - elapsed, window) };
    let used = weighted_prev + u64::from(curr);
    let admitted = used + u64::from(cost) <= u64::from(limit);
    let curr_after = if admitted { curr + cost } else { curr };
    // Whole requests only: what is left after the share rounded up is what would still pass now.
    let remaining = u64::from(limit).saturating_sub(weighted_prev + u64::from(curr_after)) as u32;
    let start = index * window;
    // Reset is the end of the current window: from then on nothing counted before this window
    // weighs, and this window's count starts to decay. It never exceeds the window and falls
    // steadily within it, whatever the traffic; the exact wait of a refusal is `retry`.
    let reset = start + window - now;
    let retry = if admitted { 0 } else { sliding_retry(prev, curr, now, cost, limit, window, start) };
    Verdict { admitted, next: Counter { a: index, b: prev, c: curr_after }, remaining, reset, retry, period_end: None }
}

/// How long a refused request waits, from the deficit: out of line, since admissions are the
/// common case.
#[cold]
#[inline(never)]
fn sliding_retry(prev: u32, curr: u32, now: Nanos, cost: u32, limit: u32, window: Nanos, start: Nanos) -> Nanos {
    if u64::from(curr) + u64::from(cost) <= u64::from(limit) {
        // Later in this window, once enough of the previous window has decayed.
        (start + decay(prev, limit - curr - cost, window)).saturating_sub(now).max(1)
    } else {
        // In the next window, once enough of this window's count has decayed.
        start + window + decay(curr, limit.saturating_sub(cost), window) - now
    }
}

/// `now / window`, without the division when the counter is in the current window or the one
/// before (a caller's requests nearly always are): a 64-bit division is the dearest instruction
/// of a decision.
#[inline(always)]
fn window_index(counter: Counter, now: Nanos, window: Nanos) -> u64 {
    if let Some(start) = counter.a.checked_mul(window)
        && let Some(elapsed) = now.checked_sub(start)
    {
        if elapsed < window {
            return counter.a;
        }
        if elapsed - window < window {
            return counter.a + 1;
        }
    }
    now / window
}

/// A sliding window counter's `(previous, current)` counts as window `index` sees them.
fn rolled(counter: Counter, index: u64) -> (u32, u32) {
    if counter.a == index {
        (counter.b, counter.c)
    } else if counter.a + 1 == index {
        (counter.c, 0)
    } else {
        (0, 0)
    }
}

/// How far into a window a previous count of `count` weighs no more than `budget`: the least `e`
/// with `count × (window − e) ≤ budget × window`, so a request then passes and one a nanosecond
/// earlier does not.
fn decay(count: u32, budget: u32, window: Nanos) -> Nanos {
    if count <= budget {
        return 0;
    }
    window - (u128::from(budget) * u128::from(window) / u128::from(count)) as u64
}

/// GCRA: the counter holds the theoretical arrival time (TAT); a request of `cost` moves it
/// `cost × window / limit` on, and passes while TAT stays within `burst × window / limit` of now.
/// A token's `window / limit` is seldom whole nanoseconds (3 per 10 s), and rounding it either
/// way drifts from the rate with every request (down, in the caller's favour), so the TAT is
/// kept exactly: `a` nanoseconds and `b` limit-ths of one (see [`Tat`]).
fn gcra(counter: Counter, now: Nanos, cost: u32, limit: u32, window: Nanos, burst: u32) -> Verdict {
    let (l, w) = (u64::from(limit), window);
    // A whole number of nanoseconds per token (100 per minute) and no fraction held: 64 bits
    // hold it exactly, without the 128-bit divisions below.
    if counter.b == 0
        && w.is_multiple_of(l)
        && (w / l)
            .checked_mul(u64::from(cost.max(burst)))
            .and_then(|span| counter.a.max(now).checked_add(span))
            .is_some()
    {
        let per = |tokens: u32| w / l * u64::from(tokens);
        let tolerance = per(burst);
        let tat = counter.a.max(now);
        let new_tat = tat + per(cost);
        let admitted = new_tat - now <= tolerance;
        let held = if admitted { new_tat } else { tat };
        let remaining = ((tolerance - (held - now).min(tolerance)) / (w / l)).min(u64::from(burst)) as u32;
        return Verdict {
            admitted,
            next: Counter { a: held, ..counter },
            remaining,
            reset: held - now,
            retry: if admitted { 0 } else { new_tat - tolerance - now },
            period_end: None,
        };
    }
    gcra_fraction(counter, now, cost, limit, window, burst)
}

/// [`gcra`] in limit-ths of a nanosecond, where a token is not whole nanoseconds.
#[inline(never)]
fn gcra_fraction(counter: Counter, now: Nanos, cost: u32, limit: u32, window: Nanos, burst: u32) -> Verdict {
    let (l, w) = (u128::from(limit), u128::from(window));
    let now_l = u128::from(now) * l;
    let tolerance = u128::from(burst) * w;
    let tat = Tat::of(counter, limit).max(now_l);
    let new_tat = tat + u128::from(cost) * w;
    let admitted = new_tat - now_l <= tolerance;
    let held = if admitted { new_tat } else { tat };
    let ahead = held - now_l;
    // Whole tokens only, and whole nanoseconds rounded up: never more than will pass, never a
    // wait that is too short.
    let remaining = (tolerance.saturating_sub(ahead) / w).min(u128::from(burst)) as u32;
    let wait = |span: u128| u64::try_from(span.div_ceil(l)).unwrap_or(u64::MAX);
    Verdict {
        admitted,
        next: Tat::counter(held, limit),
        remaining,
        reset: wait(ahead),
        retry: if admitted { 0 } else { wait(new_tat - tolerance - now_l) },
        period_end: None,
    }
}

/// A token bucket's theoretical arrival time in limit-ths of a nanosecond: the counter's `a`
/// nanoseconds and `b` limit-ths (`b < limit`).
struct Tat;

impl Tat {
    fn of(counter: Counter, limit: u32) -> u128 {
        u128::from(counter.a) * u128::from(limit) + u128::from(counter.b)
    }

    fn counter(tat: u128, limit: u32) -> Counter {
        let l = u128::from(limit);
        Counter { a: u64::try_from(tat / l).unwrap_or(u64::MAX), b: (tat % l) as u32, c: 0 }
    }
}

#[cfg(test)]
#[path = "rate_tests.rs"]
mod tests;
