//! The script calls of one decision: `decide.lua` per hash slot, and `undo.lua` to take back what
//! some slots committed for a request another refused.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::conn::Conn;
use super::micros::Micros;
use super::store::RedisStore;
use crate::engine::{Check, Counter, Limiter, Nanos, Plan, Rate, Report};
use crate::period::Window;
use crate::policy::{Mode, Policy};

/// What one decision sends to the store, carried from its calls to their undoing.
pub(super) struct Round<'a> {
    pub limiter: &'a Limiter,
    pub policy: &'a Policy,
    pub plan: &'a Plan,
    /// Each check's counter key, in plan order.
    pub keys: Vec<String>,
    /// Indexes of the checks by hash slot: one script call each.
    pub groups: Vec<Vec<usize>>,
    /// Each check's rate as the scripts take it, a quota's with the calendar period of now (a
    /// first-use quota's: the period its caller's first use now would start).
    pub rates: Vec<Rate>,
    /// The instance's time of the decision, in whole microseconds (first-use periods are cut on
    /// it, and anchors kept in it).
    pub now: Micros,
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
    /// Refused only because of `count-when` requests still pending, which may yet be released.
    pub pending_only: bool,
    pub remaining: u32,
    pub reset: Micros,
    pub retry: Micros,
    /// A first-use quota's period end as the store keeps it (the instance's guess may differ).
    pub period_end: Option<Nanos>,
}

impl Remote {
    /// What the headers say of this answer.
    pub(super) fn report(&self, check: &Check, rate: &Rate) -> Report {
        let mut r = report(check, rate, self.remaining, self.reset.nanos(), self.retry.nanos());
        r.period_end = self.period_end.or(r.period_end);
        r
    }
}

/// The one place the store builds a check's `Report`.
pub(super) fn report(check: &Check, rate: &Rate, remaining: u32, reset: Nanos, retry: Nanos) -> Report {
    Report { bound: check.bound, limit: rate.capacity(), remaining, reset, retry, period_end: rate.period_end() }
}

/// A bound's algorithm as the scripts take it: its number, its window (a quota's period start),
/// and its burst (a quota's period end, in microseconds).
pub(super) fn script_rate(rate: Rate) -> (u8, Micros, u64) {
    match rate {
        Rate::SlidingWindow { window, .. } => (1, Micros::from_nanos(window), 0),
        Rate::TokenBucket { window, burst, .. } => (2, Micros::from_nanos(window), u64::from(burst)),
        Rate::Concurrency { .. } => (3, Micros::default(), 0),
        Rate::Quota { window, first_use: false, .. } => {
            (4, Micros::from_nanos(window.start), Micros::from_nanos(window.end).get())
        }
        Rate::Quota { window, first_use: true, .. } => {
            (5, Micros::from_nanos(window.start), Micros::from_nanos(window.end).get())
        }
    }
}

/// The reply of a decision script call: one whose first value is -1 asks for first-use periods
/// to be rolled (pairs of a position in the call and an anchor), and counted nothing.
const ROLL: i64 = -1;

/// How often one call may be asked to roll before it gives up: once is the rule; again only if
/// another instance changed the key in between.
const MAX_ROLLS: usize = 3;

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
        // Anchors are kept in microseconds: periods are cut from the same instant the store keeps.
        let now = Micros::from_nanos(now);
        // A fresh counter gives a calendar quota's period (the same for every caller), and a
        // first-use one's tentative period (as if this were the caller's first use): the script
        // says when the caller's own period is another.
        let rates =
            plan.checks.iter().map(|c| limiter.table(c.bound).rate_at(Counter::default(), now.nanos())).collect();
        Round { limiter, policy, plan, keys, groups, rates, now, lease, conn }
    }

    /// A first-use quota's current period for a caller anchored at `anchor`, at the round's time.
    fn rolled(round: &Round<'_>, i: usize, anchor: Micros) -> Window {
        let counter = Counter { a: anchor.nanos().max(1), ..Counter::default() };
        match round.limiter.table(round.plan.checks[i].bound).rate_at(counter, round.now.nanos()) {
            Rate::Quota { window, .. } => window,
            // Only a quota's check is ever rolled.
            _ => Window { start: 0, end: 0 },
        }
    }

    /// The key of a bound's counter for a caller: a prefix, the bound (by id, and a fingerprint
    /// that changes when the bound does), and the hashed caller. Never a raw identifier. A
    /// `count-when` bound's hashed caller is a hash tag, so its reservations (`KEY:r`) share the
    /// counter's slot on a cluster.
    pub(super) fn key(&self, policy: &Policy, check: &Check) -> String {
        let bound = &policy.bounds[check.bound];
        let id: String =
            bound.id.chars().map(|c| if c.is_ascii_graphic() && !"{}".contains(c) { c } else { '_' }).collect();
        let (prefix, fp, key) = (&self.settings.prefix, bound.fingerprint, check.key);
        if bound.def.counting.count_when.is_some() {
            format!("{prefix}:{id}:{fp:016x}:{{{key:016x}}}")
        } else {
            format!("{prefix}:{id}:{fp:016x}:{key:016x}")
        }
    }

    /// One decision for a group of checks (all in one hash slot): one script call, or two when a
    /// first-use quota's period must be rolled (the script cannot work out its next one).
    pub(super) async fn call(&self, round: &Round<'_>, group: &[usize]) -> Option<Answer> {
        let mut rolled: Vec<Option<(Window, Micros)>> = vec![None; group.len()];
        for _ in 0..MAX_ROLLS {
            let values = self.invoke(round, group, &rolled).await?;
            if values.first() == Some(&ROLL) {
                for pair in values[1..].chunks_exact(2) {
                    // Lua counts from 1.
                    let Some(at) = usize::try_from(pair[0] - 1).ok().filter(|&at| at < group.len()) else { continue };
                    let anchor = Micros::from_answer(pair[1]);
                    rolled[at] = Some((Self::rolled(round, group[at], anchor), anchor));
                }
                continue;
            }
            if values.len() != 1 + 4 * group.len() {
                self.misanswered(&format!("the script answered {} values", values.len()));
                return None;
            }
            let results = values[1..]
                .chunks(4)
                .zip(group)
                .map(|(c, &i)| {
                    let reset = Micros::from_answer(c[2]);
                    let first_use = matches!(round.rates[i], Rate::Quota { first_use: true, .. });
                    Remote {
                        admitted: c[0] == 1,
                        pending_only: c[0] == 2,
                        remaining: c[1].clamp(0, i64::from(u32::MAX)) as u32,
                        reset,
                        retry: Micros::from_answer(c[3]),
                        // The script's reset of a first-use quota is counted from the round's time.
                        period_end: first_use.then(|| round.now.nanos() + reset.nanos()),
                    }
                })
                .collect();
            return Some(Answer { at: Micros::from_answer(values[0]), results });
        }
        self.misanswered(&format!("the script asked to roll a first-use period {MAX_ROLLS} times"));
        None
    }

    /// One script call; a first-use quota whose period was rolled goes with that period (6).
    async fn invoke(
        &self,
        round: &Round<'_>,
        group: &[usize],
        rolled: &[Option<(Window, Micros)>],
    ) -> Option<Vec<i64>> {
        let conn = round.conn.as_ref()?;
        let key = &round.keys[group[0]];
        let mut invocation = self.decide.prepare_invoke();
        for (&i, rolled) in group.iter().zip(rolled) {
            let check = round.plan.checks[i];
            let def = &round.policy.bounds[check.bound].def;
            let (algo, window, burst) = script_rate(round.rates[i]);
            // A quota carries the round's time in the lease's place, and, once rolled,
            // its anchor in the lease id's.
            let (algo, window, burst, ttl, lease) = match (algo, rolled) {
                (5, Some((period, anchor))) => (
                    6,
                    Micros::from_nanos(period.start),
                    Micros::from_nanos(period.end).get(),
                    round.now,
                    anchor.get().to_string(),
                ),
                (5, None) => (5, window, burst, round.now, String::new()),
                (4, _) => (4, window, burst, round.now, String::new()),
                _ => (algo, window, burst, Micros::from_duration(self.settings.lease_ttl), round.lease.clone()),
            };
            let (reserve, member) = self.reservation(round, i);
            invocation.key(&round.keys[i]);
            invocation
                .arg(algo)
                .arg(def.limit.get())
                .arg(window)
                .arg(burst)
                .arg(check.cost)
                .arg(u8::from(def.mode == Mode::Enforce))
                .arg(ttl)
                .arg(lease)
                .arg(reserve)
                .arg(member);
        }
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        let started = quanta::Instant::now();
        let answer = conn.run::<Vec<i64>>(key, &invocation, self.settings.timeout).await;
        // A call not made (its node's circuit is open) took no time of the store's.
        if !answer.as_ref().is_err_and(super::conn::not_made) {
            self.stats.latency.observe(started.elapsed());
        }
        answer.map_err(|e| self.failed(&e)).ok()
    }

    /// A decision call failed: counted. A node out of reach is its circuit's to log, once; any
    /// other failure (an error the store answered) is logged at most every ten seconds.
    fn failed(&self, error: &redis::RedisError) {
        if super::conn::not_made(error) {
            return;
        }
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        if !super::conn::out_of_reach(error) {
            self.stats.call_failures.record(&self.target.display(), "store call failed", &error.to_string());
        }
    }

    /// A decision call answered with something other than a decision: counted and logged.
    fn misanswered(&self, why: &str) {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        self.stats.call_failures.record(&self.target.display(), "store call failed", why);
    }

    /// Takes back what groups already committed for a request that was refused after all (on a
    /// cluster, by another slot's group; or by a local fallback). A failure leaves the request
    /// counted where it was admitted until its window passes: counted and logged, not retried.
    pub(super) async fn undo(&self, round: &Round<'_>, committed: &[usize], remote: &[Option<Remote>], at: Micros) {
        let Some(conn) = round.conn.as_ref() else { return };
        for group in self.target.groups(&round.keys, committed.iter().copied()) {
            let key = &round.keys[group[0]];
            let mut invocation = self.undo.prepare_invoke();
            for i in group {
                let check = round.plan.checks[i];
                let def = &round.policy.bounds[check.bound].def;
                let (algo, mut window, _) = script_rate(round.rates[i]);
                // A first-use period is known by the end the store answered.
                if let Some(end) = remote[i].and_then(|r| r.period_end) {
                    window = Micros::from_nanos(end);
                }
                let (_, member) = self.reservation(round, i);
                invocation.key(&round.keys[i]);
                invocation
                    .arg(algo)
                    .arg(def.limit.get())
                    .arg(window)
                    .arg(check.cost)
                    .arg(at)
                    .arg(&round.lease)
                    .arg(member);
            }
            let error = match conn.run::<i64>(key, &invocation, self.settings.timeout).await {
                Ok(_) => continue,
                Err(e) => e.to_string(),
            };
            let what =
                "store undo failed: a refused request stays counted where it was admitted until its window passes";
            self.stats.undo_failures.record(&self.target.display(), what, &error);
        }
    }
}

#[cfg(test)]
impl RedisStore {
    /// Takes back what check 0 of a plan committed at `now` under `lease`, as a refusal by
    /// another slot would: the tests' way to `undo.lua`.
    pub(super) async fn undo_now(&self, limiter: &Limiter, plan: &Plan, lease: String, now: Nanos) {
        let round = self.round(limiter, plan, self.conn.load_full(), lease, now);
        self.undo(&round, &[0], &[None], round.now).await;
    }
}
