//! A small exact model of every algorithm, for the property tests: what each bound means, in
//! rational arithmetic (fractions over a common denominator, in `i128`), with nothing clever.
//! Waits and what is left are found by searching the model's own admission rule, so they do not
//! share the engine's formulas. Time is a plain integer in any unit: nanoseconds against the
//! engine, microseconds against the Redis scripts.

use std::collections::BTreeMap;

/// What a model says of a request: as a `Verdict` does, in the model's unit of time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Said {
    pub admitted: bool,
    pub remaining: u64,
    pub reset: u64,
    /// The least wait after which the same request passes (if nothing else happens); `None`
    /// when admitted, or when it never would.
    pub retry: Option<u64>,
}

/// One algorithm's exact state.
#[derive(Clone, Debug)]
pub(crate) enum Model {
    /// Cost counted per window index; the estimate weighs the previous window by what is left
    /// of its share.
    Sliding { limit: i128, window: i128, counts: BTreeMap<i128, i128> },
    /// GCRA: the theoretical arrival time times `limit` (so a token's `window / limit` is whole).
    Bucket { limit: i128, window: i128, burst: i128, tat_l: i128 },
    /// Cost in flight.
    Concurrency { limit: i128, in_flight: i128 },
    /// Cost used per period of fixed length `period`, counted from `origin`.
    Quota { limit: i128, period: i128, origin: i128, used: BTreeMap<i128, i128> },
}

impl Model {
    /// Whether a request of `cost` at `t` passes.
    fn admits(&self, t: i128, cost: i128) -> bool {
        match self {
            Model::Sliding { limit, window, counts } => {
                let (index, elapsed) = (t.div_euclid(*window), t.rem_euclid(*window));
                let prev = counts.get(&(index - 1)).copied().unwrap_or(0);
                let curr = counts.get(&index).copied().unwrap_or(0);
                // prev × (window − elapsed) / window + curr + cost ≤ limit, times window.
                prev * (window - elapsed) + (curr + cost) * window <= limit * window
            }
            Model::Bucket { limit, window, burst, tat_l } => {
                let tat = (*tat_l).max(t * limit);
                tat + cost * window - t * limit <= burst * window
            }
            Model::Concurrency { limit, in_flight } => in_flight + cost <= *limit,
            Model::Quota { limit, used, .. } => used.get(&self.period_of(t)).copied().unwrap_or(0) + cost <= *limit,
        }
    }

    fn period_of(&self, t: i128) -> i128 {
        match self {
            Model::Quota { period, origin, .. } => (t - origin).div_euclid(*period),
            _ => 0,
        }
    }

    /// Counts a request of `cost` admitted at `t`.
    fn commit(&mut self, t: i128, cost: i128) {
        let period = self.period_of(t);
        match self {
            Model::Sliding { window, counts, .. } => *counts.entry(t.div_euclid(*window)).or_default() += cost,
            Model::Bucket { limit, window, tat_l, .. } => *tat_l = (*tat_l).max(t * *limit) + cost * *window,
            Model::Concurrency { in_flight, .. } => *in_flight += cost,
            Model::Quota { used, .. } => *used.entry(period).or_default() += cost,
        }
    }

    /// The largest `k` in `0..=top` for which `ok(k)` holds, `ok` holding below some point only.
    fn most(top: i128, ok: impl Fn(i128) -> bool) -> i128 {
        let (mut lo, mut hi) = (0, top);
        if !ok(0) {
            return 0;
        }
        while lo < hi {
            let mid = (lo + hi + 1) / 2;
            if ok(mid) { lo = mid } else { hi = mid - 1 }
        }
        lo
    }

    /// The least `d` in `1..=top` for which `ok(d)` holds, `ok` holding from some point on.
    fn least(top: i128, ok: impl Fn(i128) -> bool) -> Option<i128> {
        if !ok(top) {
            return None;
        }
        let (mut lo, mut hi) = (1, top);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if ok(mid) { hi = mid } else { lo = mid + 1 }
        }
        Some(lo)
    }

    /// The longest any wait can be: beyond it everything counted has stopped weighing.
    fn horizon(&self) -> i128 {
        match self {
            Model::Sliding { window, .. } => 3 * window,
            Model::Bucket { window, burst, limit, tat_l } => tat_l / limit + (burst + 1) * window,
            Model::Concurrency { .. } => 1,
            Model::Quota { period, .. } => 2 * period,
        }
    }

    /// Decides a request of `cost` at `t`, and counts it if it passes.
    pub(crate) fn decide(&mut self, t: u64, cost: u32) -> Said {
        let (t, cost) = (i128::from(t), i128::from(cost));
        let admitted = self.admits(t, cost);
        if admitted {
            self.commit(t, cost);
        }
        let capacity = match *self {
            Model::Sliding { limit, .. } | Model::Concurrency { limit, .. } | Model::Quota { limit, .. } => limit,
            Model::Bucket { burst, .. } => burst,
        };
        let remaining = Model::most(capacity, |k| self.admits(t, k));
        let reset = match *self {
            Model::Sliding { window, .. } => window - t.rem_euclid(window),
            // Until the bucket is full: the theoretical arrival time, to the next whole unit.
            Model::Bucket { limit, tat_l, .. } => {
                let ahead = (tat_l - t * limit).max(0);
                ahead / limit + i128::from(ahead % limit > 0)
            }
            Model::Concurrency { .. } => 0,
            Model::Quota { period, origin, .. } => period - (t - origin).rem_euclid(period),
        };
        let retry = if admitted { None } else { Model::least(self.horizon(), |d| self.admits(t + d, cost)) };
        let unit = |x: i128| u64::try_from(x).expect("a model's figure fits");
        Said { admitted, remaining: unit(remaining), reset: unit(reset), retry: retry.map(unit) }
    }

    /// Charges `delta` (a refund when negative) whatever the limit says, as `Rate::charge`: a
    /// sliding window's current count (a refund beyond it from the previous window's), a
    /// bucket's arrival time, a quota's period. Counts never go below 0.
    pub(crate) fn charge(&mut self, t: u64, delta: i64) {
        let (t, delta) = (i128::from(t), i128::from(delta));
        let period = self.period_of(t);
        match self {
            Model::Sliding { window, counts, .. } => {
                let index = t.div_euclid(*window);
                let curr = counts.get(&index).copied().unwrap_or(0) + delta;
                if curr < 0 {
                    let prev = counts.entry(index - 1).or_default();
                    *prev = (*prev + curr).max(0);
                }
                counts.insert(index, curr.max(0));
            }
            Model::Bucket { limit, window, tat_l, .. } => {
                *tat_l = if delta >= 0 {
                    (*tat_l).max(t * *limit) + delta * *window
                } else {
                    (*tat_l + delta * *window).max(0)
                };
            }
            Model::Concurrency { .. } => {}
            Model::Quota { used, .. } => {
                let u = used.entry(period).or_default();
                *u = (*u + delta).max(0);
            }
        }
    }

    /// The state before a request admitted at `t`, once a store has taken it back: as it was,
    /// but a bucket's time no earlier than `t` (undo.lua moves it back no further). That is the
    /// same for every later decision, and only a refund comes out of a later time: the limit's
    /// favour.
    pub(crate) fn taken_back(mut before: Model, t: u64) -> Model {
        if let Model::Bucket { limit, tat_l, .. } = &mut before {
            *tat_l = (*tat_l).max(i128::from(t) * *limit);
        }
        before
    }

    /// Returns permits a concurrency request held.
    pub(crate) fn release(&mut self, cost: u32) {
        if let Model::Concurrency { in_flight, .. } = self {
            *in_flight = (*in_flight - i128::from(cost)).max(0);
        }
    }
}
