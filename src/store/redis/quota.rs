//! An operator's look at a quota caller in Redis and a change to it (`/quota`), on the same keys
//! and periods as decisions: a calendar period from the instance's clock, a first-use one from
//! the anchor the store keeps.

use super::conn::ADMIN;
use super::micros::Micros;
use super::store::RedisStore;
use crate::engine::quota::{Adjustment, Standing};
use crate::engine::{Check, Counter, Limiter, Rate};
use crate::period::Window;
use crate::policy::BoundIndex;
use crate::store::StoreError;

/// A caller's quota as the store keeps it, read against the instance's time.
struct Kept {
    key: String,
    tracked: bool,
    consumed: u32,
    limit: u32,
    window: Window,
    /// A first-use caller's anchor (the instance's time for one never seen); 0 for calendar.
    anchor: Micros,
}

impl RedisStore {
    /// A quota caller's consumption in the current period, counting nothing; `None` for a bound
    /// that is not a quota.
    pub async fn standing(
        &self,
        limiter: &Limiter,
        bound: BoundIndex,
        key: u64,
    ) -> Result<Option<Standing>, StoreError> {
        let Some(kept) = self.kept(limiter, bound, key).await? else { return Ok(None) };
        Ok(Some(Standing { tracked: kept.tracked, consumed: kept.consumed, limit: kept.limit, window: kept.window }))
    }

    /// Changes what a quota caller consumed in the current period, atomically in the store:
    /// `(before, after)`, `None` for a bound that is not a quota. This instance forgets having
    /// refused the caller, so its next request sees the change.
    pub async fn adjust(
        &self,
        limiter: &Limiter,
        bound: BoundIndex,
        key: u64,
        change: Adjustment,
    ) -> Result<Option<(u32, u32)>, StoreError> {
        let Some(kept) = self.kept(limiter, bound, key).await? else { return Ok(None) };
        let conn = self.conn.load_full().ok_or(StoreError::NotConnected)?;
        let (op, amount) = match change {
            Adjustment::Set(n) => ("set", i64::from(n)),
            Adjustment::Add(n) => ("add", n.clamp(-i64::from(u32::MAX), i64::from(u32::MAX))),
        };
        let mut invocation = self.adjust.prepare_invoke();
        invocation
            .key(&kept.key)
            .arg(Micros::from_nanos(kept.window.start))
            .arg(Micros::from_nanos(kept.window.end))
            .arg(kept.anchor)
            .arg(op)
            .arg(amount);
        let changed: (i64, i64) = conn.run(&kept.key, &invocation, ADMIN).await?;
        self.deny.forget(limiter.policy().bounds[bound].fingerprint, key);
        let clamp = |n: i64| n.clamp(0, i64::from(u32::MAX)) as u32;
        Ok(Some((clamp(changed.0), clamp(changed.1))))
    }

    /// What the store keeps of a caller's quota, read as a decision now would read it.
    async fn kept(&self, limiter: &Limiter, bound: BoundIndex, key: u64) -> Result<Option<Kept>, StoreError> {
        let conn = self.conn.load_full().ok_or(StoreError::NotConnected)?;
        let now = Micros::from_nanos(limiter.clock().now());
        let table = limiter.table(bound);
        let Rate::Quota { limit, window, first_use } = table.rate_at(Counter::default(), now.nanos()) else {
            return Ok(None);
        };
        let key = self.key(limiter.policy(), &Check { key, bound, cost: 0 });
        let fields: (Option<u64>, Option<u64>, Option<u64>, Option<u32>) =
            conn.query(&key, redis::cmd("HMGET").arg(&key).arg("a").arg("s").arg("e").arg("c"), ADMIN).await?;
        let micros = |v: u64| Micros::from_answer(i64::try_from(v).unwrap_or(i64::MAX)).nanos();
        let (a, s, e, c) = (fields.0.map(micros), fields.1.map(micros), fields.2.map(micros), fields.3.unwrap_or(0));
        let tracked = s.is_some();
        let kept = |consumed, window, anchor| Kept { key: key.clone(), tracked, consumed, limit, window, anchor };
        Ok(Some(match (first_use, a, s, e) {
            // A first-use caller in its stored period, or one an instance ahead rolled to.
            (true, Some(a), Some(s), Some(e)) if now.nanos() < e => {
                kept(c, Window { start: s, end: e }, Micros::from_nanos(a))
            }
            (true, Some(a), _, _) => {
                let window = match table.rate_at(Counter { a: a.max(1), ..Counter::default() }, now.nanos()) {
                    Rate::Quota { window, .. } => window,
                    _ => window,
                };
                kept(0, window, Micros::from_nanos(a))
            }
            // Never seen: its first use now would anchor it.
            (true, None, _, _) => kept(0, window, now),
            (false, _, Some(s), Some(e)) if s >= window.start => {
                kept(c, Window { start: s, end: e.max(window.end) }, Micros::default())
            }
            (false, ..) => kept(0, window, Micros::default()),
        }))
    }
}
