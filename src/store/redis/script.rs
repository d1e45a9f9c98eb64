//! The script calls of one decision: `decide.lua` per hash slot, and `undo.lua` to take back what
//! some slots committed for a request another refused.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::RedisStore;
use super::conn::Conn;
use super::micros::Micros;
use crate::engine::{Check, Counter, Limiter, Nanos, Plan, Rate, Report};
use crate::policy::{Mode, Policy};

pub(super) const DECIDE: &str = include_str!("decide.lua");
pub(super) const UNDO: &str = include_str!("undo.lua");

/// What one decision sends to the store, carried from its calls to their undoing.
pub(super) struct Round<'a> {
    pub policy: &'a Policy,
    pub plan: &'a Plan,
    /// Each check's counter key, in plan order.
    pub keys: Vec<String>,
    /// Indexes of the checks by hash slot: one script call each.
    pub groups: Vec<Vec<usize>>,
    /// Each check's rate as the scripts take it, a quota's with the calendar period of now.
    pub rates: Vec<Rate>,
    /// The member this decision's concurrency leases are held under.
    pub lease: String,
    /// None when the plan must not be counted in the store: not connected, or hashed with a
    /// secret other instances do not share.
    pub conn: Option<Arc<Conn>>,
}

/// One script call's answer: the store's time, and one result per check of its group.
pub(super) struct Answer {
    pub at: Micros,
    pub results: Vec<Remote>,
}

/// One check's answer from the store.
#[derive(Clone, Copy, Debug)]
pub(super) struct Remote {
    pub admitted: bool,
    pub remaining: u32,
    pub reset: Micros,
    pub retry: Micros,
}

impl Remote {
    /// What the headers say of this answer.
    pub(super) fn report(&self, check: &Check, rate: &Rate) -> Report {
        report(check, rate, self.remaining, self.reset.nanos(), self.retry.nanos())
    }
}

/// The one place the store builds a check's `Report`.
pub(super) fn report(check: &Check, rate: &Rate, remaining: u32, reset: Nanos, retry: Nanos) -> Report {
    Report { bound: check.bound, limit: rate.capacity(), remaining, reset, retry, period_end: rate.period_end() }
}

/// A bound's algorithm as the scripts take it: its number, its window (a quota's period start),
/// and its burst (a quota's period end, in microseconds).
fn script_rate(rate: Rate) -> (u8, Micros, u64) {
    match rate {
        Rate::SlidingWindow { window, .. } => (1, Micros::from_nanos(window), 0),
        Rate::TokenBucket { window, burst, .. } => (2, Micros::from_nanos(window), u64::from(burst)),
        Rate::Concurrency { .. } => (3, Micros::default(), 0),
        Rate::Quota { window, .. } => (4, Micros::from_nanos(window.start), Micros::from_nanos(window.end).get()),
    }
}

impl RedisStore {
    /// The round of a plan: its keys, grouped by hash slot.
    pub(super) fn round<'a>(
        &self,
        limiter: &'a Limiter,
        plan: &'a Plan,
        conn: Option<Arc<Conn>>,
        lease: String,
        now: Nanos,
    ) -> Round<'a> {
        let policy = limiter.policy();
        let keys: Vec<String> = plan.checks.iter().map(|c| self.key(policy, c)).collect();
        let groups = self.target.groups(&keys, 0..keys.len());
        // Quotas in the store count calendar periods (the policy refuses first-use ones with a
        // shared store), the same for every caller, so a fresh counter gives the period.
        let rates = plan.checks.iter().map(|c| limiter.table(c.bound).rate_at(Counter::default(), now)).collect();
        Round { policy, plan, keys, groups, rates, lease, conn }
    }

    /// The key of a bound's counter for a caller: a prefix, the bound (by id, and a fingerprint
    /// that changes when the bound does), and the hashed caller. Never a raw identifier.
    pub(super) fn key(&self, policy: &Policy, check: &Check) -> String {
        let bound = &policy.bounds[check.bound];
        let id: String =
            bound.id.chars().map(|c| if c.is_ascii_graphic() && !"{}".contains(c) { c } else { '_' }).collect();
        format!("{}:{}:{:016x}:{:016x}", self.settings.prefix, id, bound.fingerprint, check.key)
    }

    /// One script call for a group of checks (all in one hash slot).
    pub(super) async fn call(&self, round: &Round<'_>, group: &[usize]) -> Option<Answer> {
        let conn = round.conn.as_deref()?;
        let mut invocation = self.decide.prepare_invoke();
        for &i in group {
            let check = round.plan.checks[i];
            let def = &round.policy.bounds[check.bound].def;
            let (algo, window, burst) = script_rate(round.rates[i]);
            invocation.key(&round.keys[i]);
            invocation
                .arg(algo)
                .arg(def.limit.get())
                .arg(window)
                .arg(burst)
                .arg(check.cost)
                .arg(u8::from(def.mode == Mode::Enforce))
                .arg(Micros::from_duration(self.settings.lease_ttl))
                .arg(&round.lease);
        }
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        let started = quanta::Instant::now();
        let answer = tokio::time::timeout(self.settings.timeout, conn.run::<Vec<i64>>(&invocation)).await;
        self.stats.latency.observe(started.elapsed());
        let values = match answer {
            Ok(Ok(v)) if v.len() == 1 + 4 * group.len() => v,
            Ok(Ok(v)) => {
                self.failed(&format!("the script answered {} values", v.len()));
                return None;
            }
            Ok(Err(e)) => {
                self.failed(&e.to_string());
                return None;
            }
            Err(_) => {
                self.failed(&format!("no answer within {:?}", self.settings.timeout));
                return None;
            }
        };
        self.mark(true);
        let results = values[1..]
            .chunks(4)
            .map(|c| Remote {
                admitted: c[0] == 1,
                remaining: c[1].clamp(0, i64::from(u32::MAX)) as u32,
                reset: Micros::from_answer(c[2]),
                retry: Micros::from_answer(c[3]),
            })
            .collect();
        Some(Answer { at: Micros::from_answer(values[0]), results })
    }

    /// A decision call failed: counted, logged when the store was up until now, marked down.
    fn failed(&self, why: &str) {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        if self.stats.up.load(Ordering::Relaxed) {
            tracing::warn!(store = %self.target.display(), error = %why, "store call failed");
        }
        self.mark(false);
    }

    /// Takes back what groups already committed for a request that was refused after all (on a
    /// cluster, by another slot's group; or by a local fallback). A failure leaves the request
    /// counted where it was admitted until its window passes: counted and logged, not retried.
    pub(super) async fn undo(&self, round: &Round<'_>, committed: &[usize], at: Micros) {
        let Some(conn) = round.conn.as_deref() else { return };
        for group in self.target.groups(&round.keys, committed.iter().copied()) {
            let mut invocation = self.undo.prepare_invoke();
            for i in group {
                let check = round.plan.checks[i];
                let def = &round.policy.bounds[check.bound].def;
                let (algo, window, _) = script_rate(round.rates[i]);
                invocation.key(&round.keys[i]);
                invocation.arg(algo).arg(def.limit.get()).arg(window).arg(check.cost).arg(at).arg(&round.lease);
            }
            let error = match tokio::time::timeout(self.settings.timeout, conn.run::<i64>(&invocation)).await {
                Ok(Ok(_)) => continue,
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {:?}", self.settings.timeout),
            };
            let what =
                "store undo failed: a refused request stays counted where it was admitted until its window passes";
            self.stats.undo_failures.record(&self.target.display(), what, &error);
        }
    }
}
