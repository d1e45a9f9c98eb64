//! Deciding a plan in the store: the deny cache first, then one script call per hash slot; a
//! refusal anywhere takes back what the other slots committed, and each bound whose store
//! failed follows its `on-store-error`. Also an operator's look-up and reset of one counter.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures_util::future::join_all;
use smallvec::SmallVec;

use super::conn::ADMIN;
use super::micros::Micros;
use super::script::{Answer, Remote, Round, report};
use super::store::RedisStore;
use crate::engine::clock::SECOND;
use crate::engine::{
    BoundVerdict, Check, Counter, CounterView, Decision, Limiter, Nanos, Outcome, Permits, Plan, Rate, Report,
    Reservations,
};
use crate::policy::{BoundIndex, Mode, OnStoreError, Policy};
use crate::store::StoreError;

/// What the store answered for each check of a decision.
struct Tally {
    /// Per check: none where its group's call failed.
    remote: Vec<Option<Remote>>,
    /// Checks whose group admitted, and so committed.
    committed: Vec<usize>,
    /// The store's time at the last call that answered.
    at: Micros,
}

impl Tally {
    fn of(round: &Round<'_>, answers: &[Option<Answer>]) -> Tally {
        let checks = &round.plan.checks;
        let mut tally = Tally { remote: vec![None; checks.len()], committed: Vec::new(), at: Micros::default() };
        for (group, answer) in round.groups.iter().zip(answers) {
            let Some(answer) = answer else { continue };
            tally.at = answer.at;
            let refused_here =
                group.iter().zip(&answer.results).any(|(&i, r)| !r.admitted && enforced(round.policy, &checks[i]));
            for (&i, r) in group.iter().zip(&answer.results) {
                tally.remote[i] = Some(*r);
            }
            if !refused_here {
                tally.committed.extend(group.iter().copied());
            }
        }
        tally
    }

    /// Checks whose store did not answer.
    fn failed(&self) -> impl Iterator<Item = usize> + '_ {
        self.remote.iter().enumerate().filter(|(_, r)| r.is_none()).map(|(i, _)| i)
    }

    /// The first refusal in declared order: a bound the store refused (false), or one whose store
    /// failed and that fails closed (true).
    fn refusal(&self, policy: &Policy, plan: &Plan) -> Option<(usize, bool)> {
        plan.checks.iter().zip(&self.remote).enumerate().find_map(|(i, (check, remote))| {
            let def = &policy.bounds[check.bound].def;
            match remote {
                Some(r) if !r.admitted && def.mode == Mode::Enforce => Some((i, false)),
                None if def.on_store_error == OnStoreError::Closed && def.mode == Mode::Enforce => Some((i, true)),
                _ => None,
            }
        })
    }

    fn verdicts(&self, policy: &Policy, plan: &Plan) -> SmallVec<[BoundVerdict; 4]> {
        plan.checks
            .iter()
            .zip(&self.remote)
            .map(|(c, r)| BoundVerdict {
                bound: c.bound,
                key: c.key,
                admitted: r.is_none_or(|r| r.admitted),
                shadow: !enforced(policy, c),
                overflow: false,
                cost: c.cost,
            })
            .collect()
    }
}

impl RedisStore {
    /// Decides a plan against the store: the deny cache first, then one script call (one per
    /// hash slot on a cluster). On a store failure each bound follows its `on-store-error`.
    pub async fn decide(self: &Arc<Self>, limiter: &Limiter, plan: &Plan) -> Decision {
        if plan.rejected.is_some() || plan.checks.is_empty() {
            return limiter.decide(plan);
        }
        let policy = limiter.policy();
        let now = limiter.clock().now();
        if let Some(d) = self.denied(limiter, plan, now) {
            self.stats.deny_hits.fetch_add(1, Ordering::Relaxed);
            return d;
        }
        let lease = self.leases.next();
        let conn = if self.shares(limiter.hasher()) { self.conn.load_full() } else { None };
        let round = self.round(limiter, plan, conn, lease, now);
        let answers = join_all(round.groups.iter().map(|group| self.call(&round, group))).await;
        let tally = Tally::of(&round, &answers);
        let failed: Vec<usize> = tally.failed().collect();
        if !failed.is_empty() {
            self.stats.fallbacks.fetch_add(1, Ordering::Relaxed);
            let mut followed = [false; 3];
            for &i in &failed {
                followed[policy.bounds[plan.checks[i].bound].def.on_store_error as usize] = true;
            }
            for (counter, followed) in self.stats.followed.iter().zip(followed) {
                if followed {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if let Some((i, unavailable)) = tally.refusal(policy, plan) {
            self.undo(&round, &tally.committed, &tally.remote, tally.at).await;
            return self.refuse(limiter, plan, &tally, i, unavailable, now);
        }
        // Bounds that fall back to this instance's own counters decide next, atomically among
        // themselves; bounds that fail open are let through.
        let mut local = Plan::default();
        for &i in &failed {
            if policy.bounds[plan.checks[i].bound].def.on_store_error == OnStoreError::Local {
                local.checks.push(plan.checks[i]);
            }
        }
        let local = (!local.checks.is_empty()).then(|| limiter.decide(&local));
        match local {
            Some(d) if !d.allowed() => {
                self.undo(&round, &tally.committed, &tally.remote, tally.at).await;
                d
            }
            local => self.admit(limiter, &round, &tally, local),
        }
    }

    /// The refusal of check `i`: by the store (remembered in the deny cache, but for concurrency,
    /// whose permits come back at any moment, and for a refusal only `count-when` requests still
    /// pending make, which their responses may release), or because its store failed and it
    /// fails closed.
    fn refuse(
        &self,
        limiter: &Limiter,
        plan: &Plan,
        tally: &Tally,
        i: usize,
        unavailable: bool,
        now: Nanos,
    ) -> Decision {
        let policy = limiter.policy();
        let check = plan.checks[i];
        let rate = limiter.table(check.bound).rate_at(Counter::default(), now);
        let (report, outcome) = match tally.remote[i] {
            Some(r) if !unavailable => {
                if !matches!(rate, Rate::Concurrency { .. }) && !r.pending_only {
                    let until = now + r.retry.nanos();
                    self.deny.refuse(policy.bounds[check.bound].fingerprint, check.key, check.cost, until, now);
                }
                (r.report(&check, &rate), Outcome::Limited { bound: check.bound })
            }
            _ => (report(&check, &rate, 0, 0, SECOND), Outcome::Unavailable { bound: check.bound }),
        };
        Decision {
            outcome,
            report: Some(report),
            other: None,
            verdicts: tally.verdicts(policy, plan),
            permits: Permits::default(),
            reservations: Default::default(),
        }
    }

    /// The admission of a plan every bound admitted (in the store, or locally): the enforced bound
    /// with the least left is reported, and the concurrency leases it took are handed to its
    /// permits.
    fn admit(
        self: &Arc<Self>,
        limiter: &Limiter,
        round: &Round<'_>,
        tally: &Tally,
        local: Option<Decision>,
    ) -> Decision {
        let (policy, checks) = (round.policy, &round.plan.checks);
        let mut best: Option<Report> = None;
        let mut all: Vec<Report> = Vec::new();
        for ((check, r), rate) in checks.iter().zip(&tally.remote).zip(&round.rates) {
            let Some(r) = r else { continue };
            if enforced(policy, check) {
                let rep = r.report(check, rate);
                if best.is_none_or(|b| rep.remaining < b.remaining) {
                    best = Some(rep);
                }
                if limiter.metered() {
                    all.push(rep);
                }
            }
        }
        let mut permits = Permits::default();
        let mut reservations = Reservations::default();
        let mut verdicts = tally.verdicts(policy, round.plan);
        if let Some(d) = local {
            if let Some(rep) = d.report {
                if best.is_none_or(|b| rep.remaining < b.remaining) {
                    best = Some(rep);
                }
                if limiter.metered() {
                    all.push(rep);
                }
            }
            all.extend(d.other.map(|o| *o));
            for v in d.verdicts {
                if let Some(slot) = verdicts.iter_mut().find(|x| x.bound == v.bound) {
                    *slot = v;
                }
            }
            permits.absorb(d.permits);
            reservations.absorb(d.reservations);
        }
        let stored = tally.remote.iter().enumerate().filter(|(_, r)| r.is_some_and(|r| r.admitted)).map(|(i, _)| i);
        self.hand_over(round, stored, &mut reservations);
        let taken: Vec<(String, u32)> = checks
            .iter()
            .zip(&tally.remote)
            .enumerate()
            .filter(|(_, (c, r))| {
                matches!(limiter.table(c.bound).rate, Rate::Concurrency { .. }) && r.is_some_and(|r| r.admitted)
            })
            .map(|(i, (c, _))| (round.keys[i].clone(), c.cost))
            .collect();
        if !taken.is_empty()
            && let Some(conn) = round.conn.clone()
        {
            self.hold(conn, &round.lease, taken, &mut permits);
        }
        // The least left of the other kind (requests, or what requests use), for the providers'
        // headers.
        let metered = |r: &Report| policy.bounds[r.bound].def.is_metered();
        let other = best.and_then(|b| {
            all.into_iter().filter(|r| metered(r) != metered(&b)).min_by_key(|r| r.remaining).map(Box::new)
        });
        Decision { outcome: Outcome::Allowed, report: best, other, verdicts, permits, reservations }
    }

    /// A refusal from the local deny cache alone, without a round trip (for the identity-free
    /// bounds checked before identity work).
    pub fn early(&self, limiter: &Limiter, plan: &Plan) -> Option<Decision> {
        let d = self.denied(limiter, plan, limiter.clock().now());
        if d.is_some() {
            self.stats.deny_hits.fetch_add(1, Ordering::Relaxed);
        }
        d
    }

    /// A refusal from the deny cache, if any bound of the plan refused this caller recently.
    fn denied(&self, limiter: &Limiter, plan: &Plan, now: Nanos) -> Option<Decision> {
        let policy = limiter.policy();
        for check in plan.checks.iter().filter(|check| enforced(policy, check)) {
            let fp = policy.bounds[check.bound].fingerprint;
            if let Some(until) = self.deny.until(fp, check.key, check.cost, now) {
                let rate = limiter.table(check.bound).rate_at(Counter::default(), now);
                let mut verdicts = SmallVec::new();
                verdicts.push(BoundVerdict {
                    bound: check.bound,
                    key: check.key,
                    admitted: false,
                    shadow: false,
                    overflow: false,
                    cost: check.cost,
                });
                let mut report = report(check, &rate, 0, until - now, until - now);
                // A quota's refusal lasts until its period ends (for first-use, the caller's own).
                report.period_end = report.period_end.map(|_| until);
                return Some(Decision {
                    outcome: Outcome::Limited { bound: check.bound },
                    report: Some(report),
                    other: None,
                    verdicts,
                    permits: Permits::default(),
                    reservations: Default::default(),
                });
            }
        }
        None
    }

    /// What a caller's counter says in the store, without counting anything: the decision
    /// script with a cost of 0, which it never commits.
    pub async fn inspect(&self, limiter: &Limiter, bound: BoundIndex, key: u64) -> Result<CounterView, StoreError> {
        let conn = self.conn.load_full().ok_or(StoreError::NotConnected)?;
        let mut plan = Plan::default();
        plan.checks.push(Check { key, bound, cost: 0 });
        let round = self.round(limiter, &plan, Some(conn.clone()), "inspect".to_string(), limiter.clock().now());
        let exists: i64 = conn.query(&round.keys[0], redis::cmd("EXISTS").arg(&round.keys[0]), ADMIN).await?;
        let answer = self.call(&round, &[0]).await.ok_or(StoreError::NoAnswer)?;
        let r = answer.results[0];
        Ok(CounterView {
            tracked: exists == 1,
            limit: limiter.table(bound).rate.capacity(),
            remaining: r.remaining,
            reset: r.reset.nanos(),
        })
    }

    /// Forgets a caller's counter in the store (and this instance's memory of refusing it).
    pub async fn forget(&self, limiter: &Limiter, bound: BoundIndex, key: u64) -> Result<bool, StoreError> {
        let policy = limiter.policy();
        let conn = self.conn.load_full().ok_or(StoreError::NotConnected)?;
        let check = Check { key, bound, cost: 1 };
        self.deny.forget(policy.bounds[bound].fingerprint, key);
        let key = self.key(policy, &check);
        let removed: i64 = conn.query(&key, redis::cmd("DEL").arg(&key), ADMIN).await?;
        Ok(removed == 1)
    }
}

fn enforced(policy: &Policy, check: &Check) -> bool {
    policy.bounds[check.bound].def.mode == Mode::Enforce
}
