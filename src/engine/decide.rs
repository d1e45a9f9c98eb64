//! Deciding a plan: every counter of it locked in one global order (table, shard, overflow),
//! every bound evaluated, and the request counted only if all admit. A plan of one bound, the
//! commonest, takes a path without the bookkeeping that ordering several locks needs.

use std::sync::Arc;

use smallvec::SmallVec;

use super::counter::{Counter, Verdict};
use super::decision::{BoundVerdict, Check, Decision, Outcome, Permit, Permits, Plan, Report};
use super::limiter::Limiter;
use super::rate::{self, Rate};
use super::reservation::Reservations;
use super::table::{self, KeyTable, Slot};
use crate::policy::{BoundIndex, Mode};

impl Limiter {
    /// Checks every bound of the plan and, only if all admit, counts the request in all of them,
    /// atomically: the counters of one decision are locked together, in a fixed order.
    pub fn decide(&self, plan: &Plan) -> Decision {
        self.run(plan, true)
    }

    /// Checks without counting: what `decide` would answer now.
    pub fn peek(&self, plan: &Plan) -> Decision {
        self.run(plan, false)
    }

    pub(super) fn run(&self, plan: &Plan, commit: bool) -> Decision {
        if let Some(outcome) = plan.rejected {
            return Self::rejected(outcome);
        }
        match plan.checks.as_slice() {
            // No bound applies (an operation without any, and no route bounds): nothing to read
            // or lock, and none of `run_many`'s setting up.
            [] => Self::unbounded(),
            [check] => self.run_one(check, commit),
            checks => self.run_many(checks, commit),
        }
    }

    /// The decision for a plan of no bounds: allowed, nothing to report or hold.
    #[inline]
    fn unbounded() -> Decision {
        Decision {
            outcome: Outcome::Allowed,
            report: None,
            other: None,
            verdicts: SmallVec::new(),
            permits: Permits::default(),
            reservations: Reservations::default(),
        }
    }

    /// A plan refused before anything was counted.
    #[cold]
    fn rejected(outcome: Outcome) -> Decision {
        Decision { outcome, ..Self::unbounded() }
    }

    /// The decision for a plan of several bounds, their counters locked together.
    // Apart from `run_one`, so the commonest plan does not pay for this one's stack frame.
    #[inline(never)]
    pub(super) fn run_many(&self, checks: &[Check], commit: bool) -> Decision {
        // Lock in a fixed order: by table (bound index), then shard, then overflow.
        // Pushed in place: collected, the vector was built aside and moved, a 160-byte copy.
        let mut order: SmallVec<[(BoundIndex, usize, usize); 6]> = SmallVec::new();
        for (i, c) in checks.iter().enumerate() {
            order.push((c.bound, self.table(c.bound).shard_of(c.key), i));
        }
        // Plans list bounds in declared order, which is nearly always the order to lock them in.
        if !order.is_sorted() {
            order.sort_unstable();
        }
        // The locks apart from the verdicts: each part moves into its vector in a few registers,
        // where the two together were copied through `memmove`.
        let mut locks: SmallVec<[table::Locked<'_>; 4]> = SmallVec::new();
        let mut held: SmallVec<[(usize, Verdict); 4]> = SmallVec::new();
        // The time read once the first counter is locked (see `KeyTable::lock_reading`).
        let mut read = None;
        for &(.., i) in &order {
            let table = self.table(checks[i].bound);
            let locked = table.lock_reading(checks[i].key, || *read.get_or_insert_with(|| self.now()));
            let now = *read.get_or_insert_with(|| self.now());
            // What is pending on a `count-when` counter weighs as if counted: exact under concurrency.
            let weight = checks[i].cost.saturating_add(locked.pending);
            // Evaluated in its place in `held` (see `Rate::evaluate_into`).
            let n = held.len();
            held.push((i, Verdict::BLANK));
            table.rate_at(locked.counter, now).evaluate_into(locked.counter, now, weight, &mut held[n].1);
            locks.push(locked);
        }
        // Slices from here on: every access through a `SmallVec` asks again whether it spilled.
        let held = held.as_slice();
        let bounds = &self.policy.bounds;
        let enforced = |i: usize| bounds[checks[i].bound].def.mode == Mode::Enforce;
        // The first exceeded in declared order refuses; `i` is the declared position.
        let refusing = held.iter().filter(|(i, v)| !v.admitted && enforced(*i)).min_by_key(|(i, _)| *i);
        let report_of = |i: usize, v: &Verdict| Report {
            bound: checks[i].bound,
            limit: self.table(checks[i].bound).rate.capacity(),
            remaining: v.remaining,
            reset: v.reset,
            retry: v.retry,
            period_end: v.period_end,
        };
        let (outcome, report) = match refusing {
            Some((i, v)) => (Outcome::Limited { bound: checks[*i].bound }, Some(report_of(*i, v))),
            None => {
                // The enforced bound with the least left; the first declared on a tie.
                let least = held.iter().filter(|(i, _)| enforced(*i)).min_by_key(|(i, v)| (v.remaining, *i));
                (Outcome::Allowed, least.map(|(i, v)| report_of(*i, v)))
            }
        };
        // The least left of the other kind, only where a policy has both kinds.
        let other = match &report {
            Some(r) if self.metered => {
                let metered = |i: usize| bounds[checks[i].bound].def.is_metered();
                let kind = bounds[r.bound].def.is_metered();
                let least = held
                    .iter()
                    .filter(|(i, _)| enforced(*i) && metered(*i) != kind)
                    .min_by_key(|(i, v)| (v.remaining, *i));
                least.map(|(i, v)| Box::new(report_of(*i, v)))
            }
            _ => None,
        };
        let refused = refusing.is_some();
        // The decision is made first and its verdicts pushed into it: a vector of verdicts
        // collected aside and then moved in was read back in 16-byte moves over its fields'
        // narrower stores, which the CPU cannot forward. (The decision itself is still copied
        // out once on return; Rust does not build a local returned by name in its caller's slot.)
        let mut decision = Decision {
            outcome,
            report,
            other,
            verdicts: SmallVec::new(),
            permits: Permits::default(),
            reservations: Reservations::default(),
        };
        for c in checks {
            decision.verdicts.push(BoundVerdict {
                bound: c.bound,
                key: c.key,
                admitted: false,
                shadow: false,
                overflow: false,
                cost: c.cost,
            });
        }
        let Decision { verdicts, permits, reservations, .. } = &mut decision;
        let verdicts = verdicts.as_mut_slice();
        for ((i, verdict), locked) in held.iter().zip(locks.iter_mut()) {
            let check = checks[*i];
            let v = &mut verdicts[*i];
            (v.admitted, v.shadow, v.overflow) = (verdict.admitted, !enforced(*i), locked.slot == Slot::Overflow);
            // A refused request is counted by no bound; a shadow bound counts only what it admits.
            if commit && !refused && verdict.admitted {
                self.take(self.table(check.bound), locked, verdict.next, check, permits, reservations);
            }
        }
        drop(locks);
        decision
    }

    /// The same decision for a plan of one bound, the commonest case, without the bookkeeping
    /// that ordering several locks needs.
    #[inline]
    fn run_one(&self, check: &Check, commit: bool) -> Decision {
        let table = self.table(check.bound);
        let mut shard = table.lock_shard(check.key);
        let (Rate::SlidingWindow { limit, window }, Some(entry)) =
            (table.rate, table.plain_entry(&mut shard, check.key))
        else {
            return self.run_one_locked(check, commit, shard);
        };
        // The commonest of all: a caller already tracked under a sliding window, on a table
        // nothing outlives a decision on. Judged and stored with only the counter itself read
        // and written under the lock, and the verdict kept in registers: through `evaluate`,
        // whose arms merge into one `Verdict`, its fields were stored and read back wider than
        // they were written, which the CPU cannot forward. The time is read once the counter
        // is locked (see `KeyTable::lock_reading`).
        let (counter, now) = (*entry, self.now());
        let Verdict { admitted, next, remaining, reset, retry, period_end } =
            rate::sliding(counter, now, check.cost, limit, window);
        if commit && admitted {
            (entry.a, entry.b, entry.c) = (next.a, next.b, next.c);
        }
        drop(shard);
        let verdict = Verdict { admitted, next, remaining, reset, retry, period_end };
        self.one_decision(*check, table, verdict, false, Permits::default(), Reservations::default())
    }

    /// `run_one` for any other counter: a new caller, the overflow counter, something pending
    /// or written behind, a charge that outlives the decision.
    #[inline(never)]
    pub(super) fn run_one_locked(&self, check: &Check, commit: bool, shard: table::ShardGuard<'_>) -> Decision {
        let check = *check;
        let table = self.table(check.bound);
        let mut permits = Permits::default();
        let mut reservations = Reservations::default();
        // The time read once the counter is locked (see `KeyTable::lock_reading`).
        let mut read = None;
        let mut locked = table.locked_in(shard, check.key, || *read.insert(self.now()));
        let now = read.unwrap_or_else(|| self.now());
        let weight = check.cost.saturating_add(locked.pending);
        let verdict = table.rate_at(locked.counter, now).evaluate(locked.counter, now, weight);
        if commit && verdict.admitted {
            self.take(table, &mut locked, verdict.next, check, &mut permits, &mut reservations);
        }
        let overflow = locked.slot == Slot::Overflow;
        drop(locked);
        self.one_decision(check, table, verdict, overflow, permits, reservations)
    }

    /// The decision on a plan of one bound, from that bound's verdict.
    #[inline(always)]
    fn one_decision(
        &self,
        check: Check,
        table: &KeyTable,
        Verdict { admitted, remaining, reset, retry, period_end, .. }: Verdict,
        overflow: bool,
        permits: Permits,
        reservations: Reservations,
    ) -> Decision {
        let enforced = self.policy.bounds[check.bound].def.mode == Mode::Enforce;
        let report = Report { bound: check.bound, limit: table.rate.capacity(), remaining, reset, retry, period_end };
        let outcome = if admitted || !enforced { Outcome::Allowed } else { Outcome::Limited { bound: check.bound } };
        let mut verdicts = SmallVec::new();
        verdicts.push(BoundVerdict {
            bound: check.bound,
            key: check.key,
            admitted,
            shadow: !enforced,
            overflow,
            cost: check.cost,
        });
        Decision { outcome, report: enforced.then_some(report), other: None, verdicts, permits, reservations }
    }

    /// Counts an admitted request on one bound: commits the counter, or (`count-when`) holds
    /// the cost as pending; a concurrency permit or a reservation goes with the decision.
    #[inline(always)]
    fn take(
        &self,
        table: &Arc<KeyTable>,
        locked: &mut table::Locked<'_>,
        next: Counter,
        check: Check,
        permits: &mut Permits,
        reservations: &mut Reservations,
    ) {
        if table.plain {
            locked.commit(next);
        } else {
            // `next` field by field, as `Locked::commit` passes it on.
            self.take_held(table, locked, (next.a, next.b, next.c), check, permits, reservations);
        }
    }

    /// `take` for a bound whose charge outlives the decision: a concurrency permit, or a
    /// reservation the response settles.
    #[inline(never)]
    fn take_held(
        &self,
        table: &Arc<KeyTable>,
        locked: &mut table::Locked<'_>,
        (a, b, c): (u64, u32, u32),
        check: Check,
        permits: &mut Permits,
        reservations: &mut Reservations,
    ) {
        if table.counting.count_when.is_some() {
            locked.reserve(check.cost);
        } else {
            locked.commit(Counter { a, b, c });
        }
        if matches!(table.rate, Rate::Concurrency { .. }) {
            permits.push(Permit::Local { table: table.clone(), key: check.key, slot: locked.slot, cost: check.cost });
        } else if table.counting.after_response() {
            reservations.push(&self.clock, table, check.key, locked.slot, check.cost);
        }
    }
}
