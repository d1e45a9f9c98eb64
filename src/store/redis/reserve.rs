//! Charges that wait for the response in the store: a `count-when` bound's reservation (a member
//! of `KEY:r`, weighed by `decide.lua` as if counted) and a `settle` bound's estimate. The
//! engine's `Reservations` carry them; `settle.lua` settles each when the response head arrives,
//! spawned so the response never waits for the store.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use smallvec::SmallVec;

use super::conn::Conn;
use super::micros::Micros;
use super::script::{Round, script_rate};
use super::store::RedisStore;
use crate::engine::{Counter, Finished, KeyTable, Reservations};

/// One bound's charge held in the store until its response settles it.
struct Held {
    key: String,
    table: Arc<KeyTable>,
    limit: u32,
    cost: u32,
    /// The reservation's member in `KEY:r`; empty for a `settle` bound without `count-when`,
    /// whose estimate was committed at admission.
    member: String,
}

impl RedisStore {
    /// What check `i` of a round reserves in the store: how long the reservation lives and its
    /// member (`lease:cost`), or nothing (0, '') for a bound that counts at admission.
    pub(super) fn reservation(&self, round: &Round<'_>, i: usize) -> (Micros, String) {
        let check = round.plan.checks[i];
        if round.limiter.table(check.bound).counting.count_when.is_none() {
            return (Micros::default(), String::new());
        }
        (Micros::from_duration(self.settings.reservation_ttl), format!("{}:{}", round.lease, check.cost))
    }

    /// Hands the charges the store admitted for bounds that count by the response to the
    /// decision's reservations; settled (or dropped) later, each by one `settle.lua` call.
    pub(super) fn hand_over(
        self: &Arc<Self>,
        round: &Round<'_>,
        admitted: impl Iterator<Item = usize>,
        reservations: &mut Reservations,
    ) {
        let Some(conn) = round.conn.clone() else { return };
        let (mut tables, mut held) = (SmallVec::new(), Vec::new());
        for i in admitted {
            let check = round.plan.checks[i];
            let table = round.limiter.table(check.bound);
            if !table.counting.after_response() {
                continue;
            }
            let (_, member) = self.reservation(round, i);
            let limit = round.policy.bounds[check.bound].def.limit.get();
            tables.push(table.clone());
            held.push(Held { key: round.keys[i].clone(), table: table.clone(), limit, cost: check.cost, member });
        }
        if held.is_empty() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else { return };
        let store = self.clone();
        let clock = round.limiter.clock().clone();
        reservations.push_external(tables, move |finished: Vec<Finished>| {
            let now = Micros::from_nanos(clock.now());
            handle.spawn(async move {
                for (h, f) in held.iter().zip(finished) {
                    store.settle(&conn, h, f, now).await;
                }
            });
        });
    }

    /// One `settle.lua` call. A failure leaves a reservation pending until it lapses (then it
    /// commits) and an estimate standing: counted and logged, not retried.
    async fn settle(&self, conn: &Arc<Conn>, held: &Held, finished: Finished, now: Micros) {
        let rate = held.table.rate_at(Counter::default(), now.nanos());
        let (algo, window, stop) = script_rate(rate);
        let mut invocation = self.settle.prepare_invoke();
        invocation
            .key(&held.key)
            .arg(algo)
            .arg(held.limit)
            .arg(window)
            .arg(stop)
            .arg(now)
            .arg(&held.member)
            .arg(held.cost)
            .arg(u8::from(finished.counted))
            .arg(finished.charge(u64::from(held.cost)).map_or(-1, |u| i64::try_from(u).unwrap_or(i64::MAX)));
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        let error = match conn.run::<i64>(&held.key, &invocation, self.settings.timeout * 4).await {
            Ok(_) => return,
            Err(e) => e.to_string(),
        };
        let what = "store settle failed: a count-when reservation commits when it lapses, a settle estimate stands";
        self.stats.undo_failures.record(&self.target.display(), what, &error);
    }
}

#[cfg(test)]
impl RedisStore {
    /// Settles check `i` of a plan at once, as a `settle` bound's response would after
    /// admission with `cost` as its estimate: the tests' way to `settle.lua`, awaited, where a
    /// response's settle is spawned.
    pub(super) async fn settle_now(
        &self,
        limiter: &crate::engine::Limiter,
        plan: &crate::engine::Plan,
        i: usize,
        cost: u32,
        finished: Finished,
    ) {
        let Some(conn) = self.conn.load_full() else { panic!("the store is connected") };
        let policy = limiter.policy();
        let check = plan.checks[i];
        let table = limiter.table(check.bound).clone();
        let limit = policy.bounds[check.bound].def.limit.get();
        let held = Held { key: self.key(policy, &check), table, limit, cost, member: String::new() };
        self.settle(&conn, &held, finished, Micros::from_nanos(limiter.clock().now())).await;
    }
}
